"""The schedule checker: proves, by running it, that a warp-pipelined AMD main loop never reads a ring slot before
the copies that fill it have landed, never overwrites a slot another wave still reads, and feeds every MMA the tiles
of its own iteration.

Nothing here can run an AMD variant (there is no AMD GPU at hand), and a ring that is one slot off or a wait that
leaves one group too many in flight still compiles; it only computes wrong numbers, now and then, on the card. So the
checker executes the emitted kernel body abstractly, on the CPU, for every ring depth the kernel can pick and for
short and long loops with and without a K tail, and follows every LDS access of the two warp groups the warp
pipeline runs one stage apart.

The model (what Triton 3.6-3.9 lower these operations to):

* Each wave runs the same code. `async_copy.wait_group(n)` waits for the wave's own copies only (`s_waitcnt`);
  Triton's membar pass puts a CTA barrier right after it, so a copy is visible to every wave once *every* wave has
  waited for it and a barrier has passed. A direct-to-LDS copy writes its slot from the moment it is issued.
* A `warp_pipeline_stage` block starts at a barrier. The warp pipeline runs two warp groups a stage apart: before
  the pipelined loop the trailing group executes one extra barrier, after it the leading group does. Barriers are
  matched by count, so an operation of the leading group that follows its n-th barrier runs in *phase* n, the same
  operation of the trailing group in phase n + 1 (inside the loop). Two operations of any two waves are ordered
  only when their phases differ.
* Register-staged rings (`ring.index(s).store(t)` then `ring.index(s).load(layout)`): Triton's membar pass cannot
  tell slots of one allocation apart and puts a barrier between a store and a later load of the same ring (and
  between a load and a later store) where none lies between; the checker does the same.
* Consecutive barriers with no LDS access or MMA between them are one barrier (the fewer barriers, the fewer
  orderings: the model errs on the side of a finding).

A finding names the kernel, the line of the operation and the case (ring depth, iterations, K tail) it happens in.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

__all__ = ["Finding", "Report", "check_source", "pipelined_kernels"]

# The calls the model gives a meaning; any other call passes the tiles of its arguments on to its result.
_COPIES = {"buffer_load_to_shared", "global_load_to_shared", "_desc_copy"}
_DOTS = {"_dot", "_dot_acc", "mfma", "mfma_scaled", "wmma", "wmma_scaled", "dot"}
# the loop trip counts the emitter binds (a second loop's names end in `_`), overridden by each case the checker runs
_TRIP_NAME = re.compile(r"^(num_iters|num_full)_*$")
_STAGE_CALL = "warp_pipeline_stage"
_MOST_TRIPS = 1000


@dataclass(frozen=True)
class Finding:
    """One broken guarantee: `kernel`'s operation at `line` does `message`, in the case `case` describes."""

    kernel: str
    line: int
    message: str
    case: str

    def __str__(self) -> str:
        return f"{self.kernel}:{self.line}: {self.message} ({self.case})"


@dataclass
class Report:
    """What the checker ran: each warp-pipelined kernel and how many cases (ring depth x trip count x K tail x
    branch) it followed, and what it found (nothing: every guarantee holds in every case)."""

    cases: dict[str, int] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)


class _Undecided(Exception):
    """An `if` whose test the checker cannot evaluate guards LDS traffic: the case is run once per branch."""

    def __init__(self, node: ast.If):
        self.node = node


class _Unbounded(Exception):
    def __init__(self, node: ast.AST, why: str):
        self.node = node
        self.why = why


@dataclass(frozen=True)
class _Tile:
    """Registers holding what a read found in a ring slot: the `number`-th tile copied into `ring` (None: a slot
    never written), and the read that produced them."""

    ring: str
    number: int | None
    read: int


@dataclass(frozen=True)
class _Sym:
    """A value the checker does not compute (a tensor, a runtime scalar), with the ring tiles it was made from."""

    tiles: frozenset = frozenset()


_OPAQUE = _Sym()


@dataclass(frozen=True)
class _Staged:
    """A tile loaded into registers for a register-staged ring (`_buffer_tile_load`), not yet stored."""

    ring: str
    number: int


@dataclass(frozen=True)
class _SlotRef:
    ring: str
    slot: int | None  # None: the whole ring (a slot index the checker could not evaluate)


@dataclass
class _Copy:
    """One copy into a slot: the `number`-th tile of its ring, issued at `issue` (phases of the leading and trailing
    group), complete for each group at the phase of the wait that covered it (None: still in flight)."""

    number: int
    line: int
    issue: tuple[int, int]
    asynchronous: bool
    done: list = field(default_factory=lambda: [None, None])


@dataclass
class _Read:
    ring: str
    slot: int
    line: int
    phases: tuple[int, int]
    copy: _Copy | None
    problems: list = field(default_factory=list)
    used_at: int | None = None  # the line of the first MMA that uses what it read


class _Machine:
    """One abstract run of a kernel body for one case."""

    def __init__(self, kernel: str, overrides: dict, decisions: dict, case: str):
        self.kernel = kernel
        self.overrides = overrides
        self.decisions = decisions
        self.case = case
        self.env: dict[str, object] = {}
        self.rings: set[str] = set()
        self.findings: list[Finding] = []
        # barrier counts of the leading and trailing warp group; `dirty`: an access since the last barrier
        self.phase = [0, 0]
        self.dirty = False
        self.in_pipeline = 0
        self.groups: list[list[_Copy]] = []  # committed groups in flight, oldest first
        self.open_group: list[_Copy] = []
        self.slots: dict[tuple[str, int], _Copy] = {}  # what each slot holds (its last copy)
        self.readers: dict[tuple[str, int], list[_Read]] = {}  # reads of each slot's current content
        self.reads: list[_Read] = []
        self.copied: dict[str, int] = {}  # tiles copied (or staged) into each ring so far
        self.written_since: set[str] = set()  # register-staged rings stored since the last barrier
        self.read_since: set[str] = set()
        self.acc: dict[str, list] = {}  # accumulator -> [updates, trip count at its first update, line]
        self.trips: int | None = None  # the trip count of the pipelined loop last entered

    # -- findings and phases --------------------------------------------------------------------------------------
    def find(self, line: int, message: str) -> None:
        finding = Finding(self.kernel, line, message, self.case)
        if finding not in self.findings:
            self.findings.append(finding)

    def problem(self, read: _Read, message: str) -> None:
        """What `read` found may be wrong: a finding once an MMA uses it (a read never used, such as the one of the
        tile past the end, is harmless)."""
        read.problems.append(message)
        if read.used_at is not None:
            self.find(read.line, f"{message}; the MMA at line {read.used_at} uses it")

    def barrier(self) -> None:
        if self.dirty:
            self.phase[0] += 1
            self.phase[1] += 1
            self.dirty = False
            self.written_since.clear()
            self.read_since.clear()

    def now(self) -> tuple[int, int]:
        self.dirty = True
        return (self.phase[0], self.phase[1])

    # -- LDS operations -------------------------------------------------------------------------------------------
    def copy(self, ref: _SlotRef, line: int, asynchronous: bool, number: int | None = None) -> None:
        if ref.slot is None:
            raise _Unbounded(None, f"line {line}: a copy into `{ref.ring}` at a slot index the checker cannot evaluate")
        if not asynchronous and (ref.ring in self.read_since or ref.ring in self.written_since):
            self.barrier()  # membar: a store after a load (or store) of the same allocation
        if number is None:
            number = self.copied.get(ref.ring, 0)
            self.copied[ref.ring] = number + 1
        key = (ref.ring, ref.slot)
        issue = self.now()
        # the reads of what the slot held before must be over (in every wave) before this copy writes it
        for read in self.readers.get(key, []):
            if max(read.phases) >= min(issue):
                self.problem(read, f"slot {ref.slot} of `{ref.ring}` is overwritten at line {line} (tile {number}) "
                                   "while another wave may still be reading it")
        self.readers[key] = []
        entry = _Copy(number, line, issue, asynchronous)
        if asynchronous:
            previous = self.slots.get(key)
            if previous is not None and previous.asynchronous and None in previous.done:
                self.find(line, f"copy into slot {ref.slot} of `{ref.ring}` while the copy of line {previous.line} "
                                "into it is still in flight")
            self.open_group.append(entry)
        else:
            entry.done = [issue[0], issue[1]]
            self.written_since.add(ref.ring)
        self.slots[key] = entry

    def commit(self) -> None:
        if self.open_group:
            self.groups.append(self.open_group)
        self.open_group = []

    def wait(self, outstanding: int, line: int) -> None:
        # uncommitted copies are waited for too
        self.commit()
        at = self.now()
        while len(self.groups) > outstanding:
            for entry in self.groups.pop(0):
                entry.done = [at[0], at[1]]
        self.barrier()  # membar's barrier after every async wait

    def read(self, ref: _SlotRef, line: int, relaxed: bool) -> _Sym:
        if ref.slot is None:
            raise _Unbounded(None, f"line {line}: a read of `{ref.ring}` at a slot index the checker cannot evaluate")
        if not relaxed and ref.ring in self.written_since:
            self.barrier()  # membar: a load after a store of the same allocation
        key = (ref.ring, ref.slot)
        phases = self.now()
        entry = self.slots.get(key)
        record = _Read(ref.ring, ref.slot, line, phases, entry)
        if entry is None:
            record.problems.append(f"slot {ref.slot} of `{ref.ring}` is read before any copy wrote it")
        else:
            for group in (0, 1):
                done = entry.done[group]
                if done is None or not (phases[0] > done and phases[1] > done):
                    record.problems.append(
                        f"slot {ref.slot} of `{ref.ring}` (tile {entry.number}, copied at line {entry.line}) is read "
                        "before every wave's wait for that copy and a barrier after it"
                    )
                    break
        self.readers.setdefault(key, []).append(record)
        self.read_since.add(ref.ring)
        self.reads.append(record)
        return _Sym(frozenset({_Tile(ref.ring, None if entry is None else entry.number, len(self.reads) - 1)}))

    def dot(self, target: str | None, operands: list, line: int) -> _Sym:
        self.now()
        if not any(_tiles(value) for value in operands):
            return _OPAQUE  # a dot of the loop as translated (no ring): nothing to check
        name = target or f"<dot at line {line}>"
        state = self.acc.setdefault(name, [0, self.trips, line])
        for value in operands:
            for tile in _tiles(value):
                read = self.reads[tile.read]
                if read.used_at is None:
                    read.used_at = line
                    for problem in read.problems:
                        self.find(read.line, f"{problem}; the MMA at line {line} uses it")
                if tile.number is not None and tile.number != state[0]:
                    self.find(line, f"update {state[0]} of `{name}` uses tile {tile.number} of `{tile.ring}` "
                                    f"(read at line {read.line})")
        state[0] += 1
        return _OPAQUE

    def settle(self, name: str) -> None:
        """`name` stops being an accumulator (reset, or the kernel ends): it must have had every iteration."""
        state = self.acc.pop(name, None)
        if state is None or state[0] == 0 or not isinstance(state[1], int):
            return
        if state[0] != state[1]:
            self.find(state[2], f"`{name}` is updated {state[0]} times by a loop of {state[1]} iterations")

    def finish(self, line: int) -> None:
        self.commit()
        if self.groups:
            lines = sorted({entry.line for group in self.groups for entry in group})
            self.find(line, f"copies of line(s) {', '.join(map(str, lines))} are still in flight when the kernel ends")
        for name in list(self.acc):
            self.settle(name)


def _tiles(value) -> frozenset:
    return value.tiles if isinstance(value, _Sym) else frozenset()


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _leaf(node: ast.AST) -> str:
    return _dotted(node).rsplit(".", 1)[-1]


def _mentions(node: ast.AST, names: set[str]) -> bool:
    """Whether `node` holds an operation of the model (its leaf call names among `names`, or a stage)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            leaf = _leaf(sub.func)
            if leaf in names or leaf in ("store", "load", "wait_group", "commit_group", "load_shared_relaxed",
                                         _STAGE_CALL, "_buffer_tile_load") or leaf in _COPIES or leaf in _DOTS:
                return True
    return False


class _Runner:
    def __init__(self, fn: ast.FunctionDef, machine: _Machine):
        self.fn = fn
        self.m = machine

    # -- expressions ----------------------------------------------------------------------------------------------
    def value(self, node: ast.AST, target: str | None = None):
        m = self.m
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, (int, bool)) else _OPAQUE
        if isinstance(node, ast.Name):
            return m.env.get(node.id, _OPAQUE)
        if isinstance(node, ast.BinOp):
            left, right = self.value(node.left), self.value(node.right)
            if _is_int(left) and _is_int(right):
                try:
                    return _BINOPS[type(node.op)](left, right)
                except (KeyError, ZeroDivisionError):
                    return _OPAQUE
            return _Sym(_tiles(left) | _tiles(right))
        if isinstance(node, ast.UnaryOp):
            operand = self.value(node.operand)
            if _is_int(operand):
                if isinstance(node.op, ast.USub):
                    return -operand
                if isinstance(node.op, ast.Not):
                    return not operand
            return _Sym(_tiles(operand))
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, right = self.value(node.left), self.value(node.comparators[0])
            if _is_int(left) and _is_int(right) and type(node.ops[0]) in _COMPARES:
                return _COMPARES[type(node.ops[0])](left, right)
            return _Sym(_tiles(left) | _tiles(right))
        if isinstance(node, ast.BoolOp):
            values = [self.value(v) for v in node.values]
            if all(_is_int(v) for v in values):
                return all(values) if isinstance(node.op, ast.And) else any(values)
            return _Sym(frozenset().union(*(_tiles(v) for v in values)))
        if isinstance(node, ast.IfExp):
            test = self.value(node.test)
            if _is_int(test):
                return self.value(node.body if test else node.orelse)
            return _Sym(_tiles(self.value(node.body)) | _tiles(self.value(node.orelse)))
        if isinstance(node, ast.Call):
            return self.call(node, target)
        tiles = frozenset()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                tiles |= _tiles(self.value(child))
        return _Sym(tiles)

    def slot(self, node: ast.AST) -> _SlotRef | None:
        """`ring.index(s)` (possibly `.permute(...)`d, `._reinterpret`ed) as a slot of a ring, else None."""
        while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "index" and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id in self.m.rings and node.args:
                index = self.value(node.args[0])
                return _SlotRef(node.func.value.id, index if _is_int(index) else None)
            node = node.func.value
        return None

    def call(self, node: ast.Call, target: str | None):
        m = self.m
        leaf = _leaf(node.func)
        line = node.lineno
        if isinstance(node.func, ast.Attribute) and leaf in ("store", "load"):
            ref = self.slot(node.func.value)
            if ref is not None:
                if leaf == "store":
                    value = self.value(node.args[0]) if node.args else _OPAQUE
                    number = value.number if isinstance(value, _Staged) else None
                    m.copy(ref, line, asynchronous=False, number=number)
                    return _OPAQUE
                return m.read(ref, line, relaxed=False)
        if leaf == "load_shared_relaxed":
            ref = self.slot(node.args[0])
            if ref is not None:
                return m.read(ref, line, relaxed=True)
        if leaf in _COPIES:
            dest = node.args[0] if leaf != "_desc_copy" else (node.args[3] if len(node.args) > 3 else None)
            ref = self.slot(dest) if dest is not None else None
            if ref is not None:
                for arg in node.args[1:]:
                    self.value(arg)
                m.copy(ref, line, asynchronous=True)
                return _OPAQUE
        if leaf == "commit_group":
            m.commit()
            return _OPAQUE
        if leaf in ("wait_group", "async_wait"):
            count = self.value(node.args[0]) if node.args else 0
            if not _is_int(count):
                raise _Unbounded(node, f"line {line}: a wait whose count the checker cannot evaluate")
            m.wait(count, line)
            return _OPAQUE
        if leaf == "_buffer_tile_load" and node.args and isinstance(node.args[0], ast.Name) \
                and node.args[0].id in m.rings:
            ring = node.args[0].id
            number = m.copied.get(ring, 0)
            m.copied[ring] = number + 1
            for arg in node.args[1:]:
                self.value(arg)
            return _Staged(ring, number)
        if leaf in ("allocate_shared_memory",):
            return _OPAQUE
        if leaf in _DOTS and node.args:
            operands = [self.value(arg) for arg in node.args if not (isinstance(arg, ast.Name) and arg.id == target)]
            return m.dot(target, operands, line)
        if leaf == "cdiv" and len(node.args) == 2:
            a, b = self.value(node.args[0]), self.value(node.args[1])
            if _is_int(a) and _is_int(b) and b:
                return -(-a // b)
        if leaf in ("minimum", "maximum", "min", "max") and len(node.args) == 2:
            a, b = self.value(node.args[0]), self.value(node.args[1])
            if _is_int(a) and _is_int(b):
                return min(a, b) if leaf in ("minimum", "min") else max(a, b)
        tiles = frozenset()
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            tiles |= _tiles(self.value(arg))
        if isinstance(node.func, ast.Attribute):
            tiles |= _tiles(self.value(node.func.value))
        return _Sym(tiles)

    # -- statements -----------------------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            self.block(self.fn.body)
        except _Return:
            pass
        self.m.finish(self.fn.body[-1].end_lineno or self.fn.lineno)

    def block(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self.stmt(stmt)

    def assign(self, target: ast.AST, node: ast.AST, value) -> None:
        m = self.m
        if isinstance(target, ast.Name):
            name = target.id
            trip = _TRIP_NAME.match(name)
            if trip:
                value = m.overrides[trip.group(1)]
                m.trips = value if trip.group(1) == "num_iters" else m.trips
            elif isinstance(node, ast.Call) and _leaf(node.func) == "_ring_slots":
                value = m.overrides["NUM_STAGES"]  # the ring depth of this case
            if name in m.acc and not any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node)):
                m.settle(name)  # the accumulator starts again (a new output tile)
            if isinstance(node, ast.Call) and _leaf(node.func) == "allocate_shared_memory":
                m.rings.add(name)
                for key in [k for k in m.slots if k[0] == name]:
                    del m.slots[key]
                m.copied[name] = 0
            m.env[name] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self.assign(element, node, _Sym(_tiles(value)))

    def stmt(self, stmt: ast.stmt) -> None:
        m = self.m
        if isinstance(stmt, ast.Assign):
            target = stmt.targets[0].id if isinstance(stmt.targets[0], ast.Name) else None
            value = self.value(stmt.value, target)
            for t in stmt.targets:
                self.assign(t, stmt.value, value)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            target = stmt.target.id if isinstance(stmt.target, ast.Name) else None
            self.assign(stmt.target, stmt.value, self.value(stmt.value, target))
        elif isinstance(stmt, ast.AugAssign):
            current = self.value(stmt.target)
            change = self.value(stmt.value, stmt.target.id if isinstance(stmt.target, ast.Name) else None)
            if isinstance(stmt.target, ast.Name):
                if _is_int(current) and _is_int(change) and type(stmt.op) in _BINOPS:
                    m.env[stmt.target.id] = _BINOPS[type(stmt.op)](current, change)
                else:
                    m.env[stmt.target.id] = _Sym(_tiles(current) | _tiles(change))
        elif isinstance(stmt, ast.Expr):
            self.value(stmt.value)
        elif isinstance(stmt, ast.If):
            test = self.value(stmt.test)
            if _is_int(test):
                self.block(stmt.body if test else stmt.orelse)
            elif not _mentions(stmt, set()):
                self.block(stmt.body)  # no LDS traffic: either branch leaves the model as it is
            elif stmt.lineno in m.decisions:
                self.block(stmt.body if m.decisions[stmt.lineno] else stmt.orelse)
            else:
                raise _Undecided(stmt)
        elif isinstance(stmt, ast.For):
            self.loop(stmt)
        elif isinstance(stmt, ast.With):
            stage = any(isinstance(item.context_expr, ast.Call) and _leaf(item.context_expr.func) == _STAGE_CALL
                        for item in stmt.items)
            if stage:
                m.barrier()  # every stage starts at a barrier
            self.block(stmt.body)
        elif isinstance(stmt, ast.Return):
            if stmt.value is not None:
                self.value(stmt.value)
            raise _Return()
        elif isinstance(stmt, ast.While):
            self.while_loop(stmt)

    def while_loop(self, stmt: ast.While) -> None:
        """A `while` runs while its test holds, if the checker can evaluate it; else (a stream-K kernel's walk over
        its share of the iterations) two trips, as a `for` over tiles does."""
        if not _mentions(stmt, set()):
            return
        for trip in range(_MOST_TRIPS):
            test = self.value(stmt.test)
            if _is_int(test) and not test:
                return
            if not _is_int(test) and trip == 2:
                return
            self.block(stmt.body)
        raise _Unbounded(stmt, f"line {stmt.lineno}: a while loop of more than {_MOST_TRIPS} trips")

    def loop(self, stmt: ast.For) -> None:
        m = self.m
        it = stmt.iter
        static = isinstance(it, ast.Call) and _leaf(it.func) == "static_range"
        bounds = None
        if isinstance(it, ast.Call) and _leaf(it.func) in ("range", "static_range"):
            args = [self.value(a) for a in it.args]
            if all(_is_int(a) for a in args) and 1 <= len(args) <= 3:
                bounds = range(*args)
        if bounds is None:
            if not _mentions(stmt, set()):
                return
            # a loop over tiles (a persistent kernel's) or heads: two trips show what one trip leaves behind
            bounds = [_OPAQUE, _OPAQUE]
        pipelined = not static and any(
            isinstance(node, ast.With) and any(isinstance(item.context_expr, ast.Call)
                                               and _leaf(item.context_expr.func) == _STAGE_CALL
                                               for item in node.items)
            for node in ast.walk(stmt)
        ) and not any(
            isinstance(node, ast.For) and node is not stmt and not _is_static(node)
            and any(isinstance(w, ast.With) for w in ast.walk(node))
            for node in ast.walk(stmt)
        )
        if pipelined:
            m.barrier()
            m.phase[1] += 1  # the trailing group's extra barrier: it starts a stage behind
        for value in bounds:
            if isinstance(stmt.target, ast.Name):
                m.env[stmt.target.id] = value
            self.block(stmt.body)
        if pipelined:
            m.barrier()
            m.phase[0] += 1  # the leading group's extra barrier: both are level again


class _Return(Exception):
    pass


def _is_static(node: ast.For) -> bool:
    return isinstance(node.iter, ast.Call) and _leaf(node.iter.func) == "static_range"


def _is_int(value) -> bool:
    return isinstance(value, (int, bool))


_BINOPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
}
_COMPARES = {
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
}


def pipelined_kernels(tree: ast.Module) -> list[ast.FunctionDef]:
    """The functions of a variant with a warp-pipelined loop (a `warp_pipeline_stage` block)."""
    kernels = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(
            isinstance(sub, ast.Call) and _leaf(sub.func) == _STAGE_CALL for sub in ast.walk(node)
        ):
            kernels.append(node)
    return kernels


def _depths(fn: ast.FunctionDef) -> list[int]:
    """The ring depths `fn` can pick: 2 up to the `most` its `_ring_slots(limit, most, ...)` call names."""
    most = 2
    for node in ast.walk(fn):
        if (isinstance(node, ast.Call) and _leaf(node.func) == "_ring_slots" and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, int)):
            most = max(most, node.args[1].value)
    return list(range(2, most + 1))


def check_function(fn: ast.FunctionDef, report: Report) -> None:
    """Every case of one kernel: each ring depth, loops of 0 to three rounds of the ring and more, with and without
    a K tail, and every branch of an `if` the checker cannot decide that guards LDS traffic."""
    findings: list[Finding] = []
    runs = [0]
    for depth in _depths(fn):
        for iters in range(3 * depth + 4):
            for tail in (False, True):
                if tail and iters == 0:
                    continue
                overrides = {"NUM_STAGES": depth, "num_iters": iters, "num_full": iters - 1 if tail else iters}
                case = f"NUM_STAGES={depth}, {iters} iterations" + (", the last one a K tail" if tail else "")
                findings.extend(_run_all_branches(fn, overrides, case, runs))
    report.cases[fn.name] = report.cases.get(fn.name, 0) + runs[0]
    seen = {(f.kernel, f.line, f.message) for f in report.findings}
    for finding in findings:  # one finding per operation and message: the first case that shows it
        key = (finding.kernel, finding.line, finding.message)
        if key not in seen:
            seen.add(key)
            report.findings.append(finding)


def _run_all_branches(fn: ast.FunctionDef, overrides: dict, case: str, runs: list[int]) -> list[Finding]:
    findings: list[Finding] = []
    pending: list[dict] = [{}]
    tried = 0
    while pending:
        decisions = pending.pop()
        tried += 1
        if tried > 64:
            findings.append(Finding(fn.name, fn.lineno, "too many undecidable branches guard LDS traffic", case))
            break
        label = case + "".join(f", the `if` of line {line} {'taken' if taken else 'not taken'}"
                               for line, taken in sorted(decisions.items()))
        machine = _Machine(fn.name, overrides, decisions, label)
        try:
            _Runner(fn, machine).run()
        except _Undecided as undecided:
            pending.append({**decisions, undecided.node.lineno: True})
            pending.append({**decisions, undecided.node.lineno: False})
            continue
        except _Unbounded as unbounded:
            line = unbounded.node.lineno if unbounded.node is not None else fn.lineno
            findings.append(Finding(fn.name, line, f"the checker cannot follow {unbounded.why}", label))
            continue
        runs[0] += 1
        findings.extend(machine.findings)
    return findings


def check_source(source: str) -> Report:
    """Every warp-pipelined kernel of a variant's source, every case."""
    report = Report()
    for fn in pipelined_kernels(ast.parse(source)):
        check_function(fn, report)
    return report
