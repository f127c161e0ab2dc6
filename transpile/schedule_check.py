"""The schedule checker: proves, by running it, that a pipelined main loop never reads a ring slot before the
copies that fill it have landed, never overwrites a slot that a wave or a wgmma still reads, and feeds every MMA the
tiles of its own iteration, in order.

Nothing here can run an AMD variant (there is no AMD GPU at hand), and a ring that is one slot off or a wait that
leaves one group too many in flight still compiles; it only computes wrong numbers, now and then, on the card (a
Hopper variant's race may as well pass every run of a GPU test). So the checker executes the emitted kernel body
abstractly, on the CPU, for every ring depth the kernel can pick, one or two warpgroups, short and long loops with and
without a K tail, and every branch it cannot decide, and follows every shared-memory access.

The model (what Triton 3.6-3.9 lower these operations to):

* Each wave runs the same code. `async_copy.wait_group(n)` waits for the wave's own copies only (`s_waitcnt`,
  `cp.async.wait_group`); Triton's membar pass puts a CTA barrier right after it, so a copy is visible to every wave
  once *every* wave has waited for it and a barrier has passed. An asynchronous copy writes its slot from the moment
  it is issued.
* AMD: a `warp_pipeline_stage` block starts at a barrier. The warp pipeline runs two warp groups a stage apart:
  before the pipelined loop the trailing group executes one extra barrier, after it the leading group does. Barriers
  are matched by count, so an operation of the leading group that follows its n-th barrier runs in *phase* n, the
  same operation of the trailing group in phase n + 1 (inside the loop). Two operations of any two waves are ordered
  only when their phases differ.
* Register-staged rings (`ring.index(s).store(t)` then `ring.index(s).load(layout)`): Triton's membar pass cannot
  tell slots of one allocation apart and puts a barrier between a store and a later load of the same ring (and
  between a load and a later store) where none lies between; the checker does the same. A wgmma reads a stored slot
  only after a `fence_async_shared()`.
* Hopper: an mbarrier completes a phase when its `count` arrivals are in (`expect` is one, and arms the phase for
  the TMA copies that complete with it); `mbarrier.wait(bar, parity)` passes once the phase of that parity has
  completed, and a TMA copy's slot is readable by a partition once it has passed the wait of the copy's phase. An
  asynchronous wgmma reads its slots until a `warpgroup_mma_wait` leaves it behind; a copy into a slot a wgmma still
  reads is a race. With one warpgroup its own wait ends the read; with two, a barrier must too.
* Warp specialisation: the partitions run one at a time, the workers (the loaders) first and again as soon as an
  arrival lets them go on, so every copy is issued as early as the mbarriers allow; no partition able to go on while
  some wait is a deadlock.
* Consecutive barriers with no shared-memory access or MMA between them are one barrier (the fewer barriers, the
  fewer orderings: the model errs on the side of a finding).

A finding names the kernel, the line of the operation and the case (warps, ring depth, iterations, K tail, branches)
it happens in.
"""

from __future__ import annotations

import ast
import re
import threading
from dataclasses import dataclass, field

__all__ = ["Finding", "Report", "check_source", "pipelined_kernels"]

# The calls the model gives a meaning; any other call passes the tiles of its arguments on to its result.
_COPIES = {"buffer_load_to_shared", "global_load_to_shared", "global_to_shared", "_desc_buffer_copy"}
_DOTS = {"_dot", "_dot_acc", "mfma", "mfma_scaled", "wmma", "wmma_scaled", "dot"}
# the loop trip counts the emitter binds (a second loop's names end in `_`), overridden by each case the checker runs
_TRIP_NAME = re.compile(r"^(num_iters|num_full|ws_iters)_*$")
# the ring depth's constexpr, overridden by each case (a partition's `NUM_STAGES = ring.shape[0]` follows the ring)
_STAGES_NAME = re.compile(r"^(NUM_STAGES|WS_STAGES)_*$")
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
class _RingV:
    """A shared-memory allocation: a ring of `depth` slots (or one buffer), or an array of mbarriers."""

    name: str
    depth: int | None


@dataclass(frozen=True)
class _SlotV:
    """One slot of a ring (`ring.index(s)`, possibly permuted); `index` None: the checker could not evaluate it."""

    ring: _RingV
    index: int | None


@dataclass
class _Copy:
    """One write of a slot: the `number`-th tile of its ring. `kind`: "async" (a copy waited for by `wait_group`),
    "store" (registers), "tma" (a TMA copy completing an mbarrier phase). `done`: the phase (leading, trailing warp
    group) of each group's wait that covered it (None: in flight); for TMA, the barrier and the phase it lands
    with."""

    number: int | None  # None: a buffer stored once (not a ring's iteration)
    line: int
    kind: str
    part: str
    done: list = field(default_factory=lambda: [None, None])
    bar: tuple | None = None
    bar_phase: int | None = None
    fenced: bool = False


@dataclass
class _Read:
    """One read of a slot (by a wave, or a wgmma): at `line`, in `phases` (leading, trailing warp group), and what may
    be wrong with what it found."""

    line: int
    phases: tuple[int, int]
    problems: list = field(default_factory=list)
    used_at: int | None = None  # the line of the first MMA that uses what it read
    inflight: bool = False  # an asynchronous wgmma still reads the slot
    wgmma: bool = False
    part: str = ""


@dataclass
class _Bar:
    """An mbarrier: `count` arrivals complete a phase (with the TMA copies of that phase, once an `expect` armed it);
    `phase`: phases completed so far."""

    count: int
    pending: int
    phase: int = 0
    copies: list = field(default_factory=list)
    expected: bool = False


class _Abort(Exception):
    """A partition thread stops: another one found the run cannot go on."""


class _Part:
    """What one partition (or the kernel, where there is none) carries: its view of mbarrier phases, its wgmmas and
    async copy groups in flight, and the tiles each accumulator has had."""

    def __init__(self, name: str, warps: int):
        self.name = name
        self.warps = warps
        self.observed: dict[tuple, int] = {}  # mbarrier -> phases this partition has seen completed
        self.wgmmas: list[list[_Read]] = []  # asynchronous wgmmas in flight, oldest first, with the reads they hold
        self.groups: list[list[_Copy]] = []  # committed copy groups in flight, oldest first
        self.open_group: list[_Copy] = []
        # (carried accumulator, the rings of its operands) -> [updates, trip count at its first update, line, tiles]
        self.acc: dict[tuple[str, tuple[str, ...]], list] = {}
        self.sequence: dict[tuple[str, str], int] = {}  # (ring, accumulator) -> the last tile number it used
        # values made afresh in the iteration (a dot's own product, `qk = _dot(q, k, zeros)`, or a value bound in
        # the loop from other names, `qk = gl.zeros(...)`): a dot that adds to one (`qk = _dot_acc(q_pe, k_pe, qk)`,
        # scores summed from several products) accumulates this iteration's product, not a carried accumulator
        self.products: dict[str, int] = {}  # (-> the loop depth it was made at; a dot there adds to this product)
        self.bound_by_dot: str | None = None  # the name the dot just evaluated binds
        self.depth = 0  # the loops (not static) the walk is in
        self.trips: int | None = None
        # scheduling (warp specialisation): what it waits for, whether it has ended
        self.blocked = None
        self.done = False
        self.error: BaseException | None = None

    def held(self) -> list[str]:
        """The accumulators carried now, each once (`acc` holds a state per pair of rings its dots read)."""
        return list(dict.fromkeys(name for name, _ in self.acc))


class _Machine:
    """One abstract run of a kernel for one case: the shared memory, the barriers and the findings."""

    def __init__(self, kernel: str, functions: dict, overrides: dict, decisions: dict, case: str):
        self.kernel = kernel
        self.functions = functions
        self.overrides = overrides
        self.decisions = decisions
        self.case = case
        self.findings: list[Finding] = []
        # barrier counts of the leading and trailing warp group; `dirty`: an access since the last barrier
        self.phase = [0, 0]
        self.dirty = False
        self.slots: dict[tuple[str, int], _Copy] = {}  # what each slot holds (its last write)
        self.readers: dict[tuple[str, int], list[_Read]] = {}  # reads of each slot's current content
        self.reads: list[_Read] = []
        self.copied: dict[str, int] = {}  # tiles written (or staged) into each ring so far
        self.written_since: set[str] = set()  # rings stored into from registers since the last barrier
        self.read_since: set[str] = set()
        self.bars: dict[tuple, _Bar] = {}
        self.rings: dict[str, int] = {}  # allocations made of each name
        # names an MMA updates under a test the checker evaluated false in some iteration (a guarded accumulation,
        # `if i_s >= 0: acc = _dot(a, b, acc)`): they take fewer updates than the loop has iterations, and skip tiles
        self.guarded: set[str] = set()
        # warp specialisation: the baton passed between partition threads (one runs at a time)
        self.baton = threading.Condition()
        self.turn: _Part | None = None
        self.parts: list[_Part] = []
        self.aborted = False

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

    # -- shared memory --------------------------------------------------------------------------------------------
    def copy(self, part: _Part, ref: _SlotV, line: int, kind: str, number: int | None = None,
             bar: _SlotV | None = None) -> None:
        ring = ref.ring.name
        if ref.index is None:
            raise _Unbounded(None, f"line {line}: a copy into `{ring}` at a slot index the checker cannot evaluate")
        if kind == "store" and (ring in self.read_since or ring in self.written_since):
            self.barrier()  # membar: a store after a load (or store) of the same allocation
        if number is None and kind != "store":
            number = self.copied.get(ring, 0)
            self.copied[ring] = number + 1
        key = (ring, ref.index)
        issue = self.now()
        # the reads of what the slot held before must be over (in every wave) before this copy writes it
        for read in self.readers.get(key, []):
            if read.inflight:
                self.find(line, f"slot {ref.index} of `{ring}` is overwritten (tile {number}) while the wgmma of line "
                                f"{read.line} still reads it")
            elif read.wgmma and read.part == part.name and part.warps <= 4:
                pass  # one warpgroup: its own `warpgroup_mma_wait` ended the read for all its warps
            elif max(read.phases) >= min(issue) and (kind != "tma" or read.part == part.name):
                # (a TMA copy is issued once for the CTA: a read by another partition is ordered by the mbarriers
                # that partition arrives on, which are followed on their own; one by another warpgroup of this
                # partition only by a barrier)
                self.problem(read, f"slot {ref.index} of `{ring}` is overwritten at line {line} (tile {number}) "
                                   "while another wave may still be reading it")
        self.readers[key] = []
        entry = _Copy(number, line, kind, part.name)
        previous = self.slots.get(key)
        if kind == "async":
            if previous is not None and previous.kind == "async" and None in previous.done:
                self.find(line, f"copy into slot {ref.index} of `{ring}` while the copy of line {previous.line} "
                                "into it is still in flight")
            part.open_group.append(entry)
        elif kind == "tma":
            state = self.bars.get(_bar_key(bar))
            if state is None:
                raise _Unbounded(None, f"line {line}: a TMA copy completing an mbarrier the checker did not see made")
            if not state.expected:
                self.find(line, f"TMA copy into slot {ref.index} of `{ring}` on an mbarrier no `expect` armed")
            entry.bar = _bar_key(bar)
            state.copies.append(entry)
        else:
            entry.done = [issue[0], issue[1]]
            self.written_since.add(ring)
        self.slots[key] = entry

    def commit(self, part: _Part, empty: bool = False) -> None:
        """Close the open copy group; `empty`: even with no copy in it (`commit_group` after copies a kernel skips
        makes an empty group, which `wait_group` counts as any other)."""
        if part.open_group or empty:
            part.groups.append(part.open_group)
        part.open_group = []

    def wait(self, part: _Part, outstanding: int) -> None:
        self.commit(part)  # uncommitted copies are waited for too
        at = self.now()
        while len(part.groups) > outstanding:
            for entry in part.groups.pop(0):
                entry.done = [at[0], at[1]]
        self.barrier()  # membar's barrier after every async wait

    def read(self, part: _Part, ref: _SlotV, line: int, relaxed: bool, wgmma: bool = False) -> _Sym:
        ring = ref.ring.name
        if ref.index is None:
            raise _Unbounded(None, f"line {line}: a read of `{ring}` at a slot index the checker cannot evaluate")
        if not relaxed and ring in self.written_since:
            self.barrier()  # membar: a load after a store of the same allocation
        key = (ring, ref.index)
        phases = self.now()
        entry = self.slots.get(key)
        record = _Read(line, phases, wgmma=wgmma, part=part.name)
        if entry is None:
            record.problems.append(f"slot {ref.index} of `{ring}` is read before anything wrote it")
        elif entry.kind == "tma":
            if entry.bar_phase is None or part.observed.get(entry.bar, 0) <= entry.bar_phase:
                record.problems.append(
                    f"slot {ref.index} of `{ring}` (tile {entry.number}, copied at line {entry.line}) is read before "
                    "this partition has waited for the mbarrier phase its TMA copy completes")
        elif entry.kind == "store" and wgmma and not entry.fenced:
            record.problems.append(f"slot {ref.index} of `{ring}` (stored at line {entry.line}) is read by a wgmma "
                                   "without a `fence_async_shared()` after the store")
        else:
            for group in (0, 1):
                done = entry.done[group]
                if done is None or not (phases[0] > done and phases[1] > done):
                    record.problems.append(
                        f"slot {ref.index} of `{ring}` (tile {entry.number}, copied at line {entry.line}) is read "
                        "before every wave's wait for that copy and a barrier after it")
                    break
        self.readers.setdefault(key, []).append(record)
        self.read_since.add(ring)
        self.reads.append(record)
        return _Sym(frozenset({_Tile(ring, None if entry is None else entry.number, len(self.reads) - 1)}))

    def fence(self, part: _Part) -> None:
        for entry in self.slots.values():
            if entry.kind == "store" and entry.part == part.name:
                entry.fenced = True

    # -- matrix products ------------------------------------------------------------------------------------------
    def dot(self, part: _Part, target: str | None, carried: bool, operands: list, line: int) -> None:
        self.now()
        tiles = [tile for value in operands for tile in _tiles(value)]
        if not tiles:
            return  # a dot of a loop as translated (no ring): nothing to check
        name = target or f"<dot at line {line}>"
        carried = carried and part.products.get(name) != part.depth
        if not carried and target is not None:
            part.products[target] = part.depth
            part.bound_by_dot = target
        # (per accumulator and the rings its operands come from: two dots into one accumulator, over two halves of K
        # with rings of their own, `acc = dot(a1, b1, acc)` then `acc = dot(a2, b2, acc)`, each update it once per
        # iteration)
        key = (name, tuple(sorted({tile.ring for tile in tiles if tile.number is not None})))
        state = part.acc.setdefault(key, [0, part.trips, line, {}]) if carried else None
        for tile in tiles:
            read = self.reads[tile.read]
            if read.used_at is None:
                read.used_at = line
                for problem in read.problems:
                    self.find(read.line, f"{problem}; the MMA at line {line} uses it")
            if tile.number is None:
                continue
            last = part.sequence.get((tile.ring, name), -1)
            # the next tile, or the same one again (a software-pipelined PV reads the first V tile twice: with a
            # zero P, then with the first P); never one skipped (but by a guard the iteration failed) or an older one
            if tile.number not in (last, last + 1) and not (name in self.guarded and tile.number > last):
                self.find(line, f"`{name}` uses tile {tile.number} of `{tile.ring}` (read at line {read.line}) "
                                f"after tile {last}")
            part.sequence[(tile.ring, name)] = tile.number
            if state is not None:
                state[3].setdefault(tile.ring, set()).add(tile.number)
        if state is not None:
            state[0] += 1

    def wgmma_wait(self, part: _Part, outstanding: int) -> None:
        while len(part.wgmmas) > outstanding:
            for read in part.wgmmas.pop(0):
                read.inflight = False

    def settle(self, part: _Part, name: str) -> None:
        """`name` stops being an accumulator (reset, or the kernel ends): it must have had every iteration."""
        for key in [key for key in part.acc if key[0] == name]:
            self._settle(part.acc.pop(key), name)

    def _settle(self, state: list, name: str) -> None:
        if state[0] == 0 or not isinstance(state[1], int):
            return
        if state[0] != state[1] and not (name in self.guarded and state[0] < state[1]):
            self.find(state[2], f"`{name}` is updated {state[0]} times by a loop of {state[1]} iterations")
        # each update a tile of its own (one may come twice: a software-pipelined PV's first V tile), not the same
        # registers again and again
        for ring, numbers in state[3].items():
            if len(numbers) < state[0] - 1:
                self.find(state[2], f"`{name}` is updated {state[0]} times from only {len(numbers)} tile(s) of "
                                    f"`{ring}`: an MMA fed the same tile again")

    def finish(self, part: _Part, line: int) -> None:
        self.commit(part)
        if any(part.groups):
            lines = sorted({entry.line for group in part.groups for entry in group})
            self.find(line, f"copies of line(s) {', '.join(map(str, lines))} are still in flight when "
                            f"{'the kernel' if part.name == 'kernel' else 'partition ' + part.name} ends")
        for name in part.held():
            self.settle(part, name)

    # -- mbarriers ------------------------------------------------------------------------------------------------
    def bar(self, ref: _SlotV, line: int) -> _Bar:
        state = self.bars.get(_bar_key(ref))
        if state is None:
            raise _Unbounded(None, f"line {line}: an mbarrier the checker did not see initialised")
        return state

    def arrive(self, ref: _SlotV, line: int, expect: bool = False) -> None:
        state = self.bar(ref, line)
        if expect:
            state.expected = True
        state.pending -= 1
        if state.pending < 0:
            self.find(line, "more arrivals on an mbarrier than its count in one phase")

    def released(self, part: _Part, ref: _SlotV, line: int) -> None:
        """`mbarrier.arrive` on the barrier of slot `ref.index` hands the slot back: one thread arrives for the
        partition, so with two warpgroups the other's wgmma reads of the slot must be over too (a barrier since its
        `warpgroup_mma_wait`, as the arriving warpgroup's own wait ended only its own)."""
        if part.warps <= 4:
            return
        for (ring, index), reads in self.readers.items():
            for read in reads:
                if index == ref.index and read.wgmma and read.part == part.name and not read.inflight \
                        and max(read.phases) >= min(self.phase):
                    self.find(line, f"slot {index} of `{ring}` is handed back ({ref.ring.name}) while the other "
                                    f"warpgroup's wgmma of line {read.line} may still read it (no barrier since)")

    def settle_bars(self) -> None:
        """Complete every mbarrier phase whose arrivals are in (its TMA copies land with it)."""
        for state in self.bars.values():
            if state.pending <= 0:
                for entry in state.copies:
                    entry.bar_phase = state.phase
                state.copies = []
                state.phase += 1
                state.pending += state.count
                state.expected = False

    def passes(self, part: _Part, ref: _SlotV, parity: int, line: int):
        """The test of `mbarrier.wait(bar, parity)`: the phase of that parity has completed."""
        key = _bar_key(ref)
        state = self.bar(ref, line)

        def test() -> bool:
            self.settle_bars()
            if state.phase % 2 != parity % 2:
                part.observed[key] = state.phase
                return True
            return False

        return test

    # -- partitions -----------------------------------------------------------------------------------------------
    def block(self, part: _Part, test, line: int) -> None:
        """Wait until `test` holds: at once where it does; else hand the run to another partition (none: a
        deadlock, which ends the case with a finding)."""
        if test():
            return
        if part not in self.parts:
            raise _Unbounded(None, f"line {line}: an mbarrier wait that nothing can complete (a deadlock)")
        part.blocked = test
        self.pass_baton(part)

    def pass_baton(self, part: _Part) -> None:
        with self.baton:
            self.turn = None
            self.baton.notify_all()
            while self.turn is not part and not self.aborted:
                self.baton.wait()
            if self.aborted:
                raise _Abort()

    def specialise(self, runners: list, line: int) -> None:
        """Run the partitions of `gl.warp_specialize` to the end, one at a time: the workers (the loaders) first
        and as soon as they can go on, so that each copy is issued as early as the mbarriers allow."""
        order = [r.part for r in runners[1:]] + [runners[0].part]
        self.parts = order

        def body(runner) -> None:
            with self.baton:
                while self.turn is not runner.part and not self.aborted:
                    self.baton.wait()
            try:
                if not self.aborted:
                    runner.run()
            except _Abort:
                pass
            except BaseException as exc:  # noqa: BLE001 - carried to the scheduling thread
                runner.part.error = exc
            with self.baton:
                runner.part.done = True
                self.turn = None
                self.baton.notify_all()

        threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in runners]
        for t in threads:
            t.start()
        try:
            while True:
                if any(p.error for p in order):
                    break
                live = [p for p in order if not p.done]
                if not live:
                    break
                ready = [p for p in live if p.blocked is None or p.blocked()]
                if not ready:
                    waiting = ", ".join(p.name for p in live)
                    self.find(line, f"the partitions deadlock: {waiting} wait on mbarrier phases nothing completes")
                    break
                chosen = ready[0]
                chosen.blocked = None
                with self.baton:
                    self.turn = chosen
                    self.baton.notify_all()
                    while self.turn is chosen and not chosen.done:
                        self.baton.wait()
        finally:
            with self.baton:
                self.aborted = True
                self.baton.notify_all()
            for t in threads:
                t.join()
            self.aborted = False
            self.parts = []
        for p in order:
            if p.error is not None:
                raise p.error

    def yield_point(self, part: _Part) -> None:
        """After an arrive: a partition ahead of this one in priority that can now go on runs first."""
        if part in self.parts:
            part.blocked = None
            self.pass_baton(part)


def _bar_key(ref: _SlotV | None) -> tuple:
    return (ref.ring.name, ref.index) if ref is not None else ("?", None)


def _as_slot(value) -> _SlotV | None:
    if isinstance(value, _SlotV):
        return value
    if isinstance(value, _RingV):
        return _SlotV(value, 0)  # a single buffer (or mbarrier)
    return None


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


# the calls the model gives a meaning (by the last part of their name), besides module functions that make them
_MODEL_CALLS = {"store", "load", "wait_group", "commit_group", "load_shared_relaxed", _STAGE_CALL, "_buffer_tile_load",
                "init", "expect", "arrive", "wait", "warpgroup_mma", "warpgroup_mma_wait", "_mma_sync_slots",
                "fence_async_shared", "_tma_async_load", "_cp_async_load", "warp_specialize", "_cta_barrier",
                "allocate_shared_memory", *_COPIES, *_DOTS}


def _mentions(node: ast.AST, functions: dict | None = None, seen: frozenset = frozenset()) -> bool:
    """Whether `node` holds an operation of the model, directly or in a module function it calls."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            leaf = _leaf(sub.func)
            if leaf in _MODEL_CALLS:
                return True
            if functions and isinstance(sub.func, ast.Name) and leaf in functions and leaf not in seen \
                    and _mentions(functions[leaf], functions, seen | {leaf}):
                return True
    return False


def _only_mmas(body: list[ast.stmt], functions: dict | None) -> bool:
    """Whether the model's operations in `body` are MMAs alone (no copy, wait, barrier, slot read or store)."""
    for statement in body:
        for sub in ast.walk(statement):
            if isinstance(sub, ast.Call):
                leaf = _leaf(sub.func)
                if leaf in _DOTS:
                    continue
                if leaf in _MODEL_CALLS or (functions and isinstance(sub.func, ast.Name) and leaf in functions
                                            and _mentions(functions[leaf], functions, frozenset({leaf}))):
                    return False
            if isinstance(sub, (ast.With, ast.For, ast.While)):
                return False
    return True


class _Return(Exception):
    def __init__(self, value=None):
        self.value = value


class _Runner:
    """Runs one function body (the kernel, a partition, or a helper it calls) over the machine."""

    def __init__(self, fn: ast.FunctionDef, machine: _Machine, part: _Part, env: dict | None = None, depth: int = 0):
        self.fn = fn
        self.m = machine
        self.part = part
        self.env: dict[str, object] = env if env is not None else {}
        self.depth = depth

    def mentions(self, node: ast.AST) -> bool:
        return _mentions(node, self.m.functions)

    # -- expressions ----------------------------------------------------------------------------------------------
    def value(self, node: ast.AST, target: str | None = None):
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, (int, bool)) else _OPAQUE
        if isinstance(node, ast.Name):
            return self.env.get(node.id, _OPAQUE)
        if isinstance(node, ast.BinOp):
            # (a product scaled where it is made, `acc += _dot(a, b, zeros) * s`: the dot is named by the statement's
            # target, the same in every unrolled copy of the step)
            left, right = self.value(node.left, target), self.value(node.right, target)
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
                if isinstance(node.op, ast.Invert):
                    return ~operand
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
            # one known operand decides it (`gl.num_warps() == 4 and isinstance(stride, int)` is False at 8 warps)
            if isinstance(node.op, ast.And) and any(_is_int(v) and not v for v in values):
                return False
            if isinstance(node.op, ast.Or) and any(_is_int(v) and v for v in values):
                return True
            return _Sym(frozenset().union(*(_tiles(v) for v in values)))
        if isinstance(node, ast.IfExp):
            test = self.value(node.test)
            if _is_int(test):
                return self.value(node.body if test else node.orelse)
            return _Sym(_tiles(self.value(node.body)) | _tiles(self.value(node.orelse)))
        if isinstance(node, ast.Subscript):
            base = self.value(node.value)
            if isinstance(base, tuple):
                index = self.value(node.slice)
                return base[index] if _is_int(index) and -len(base) <= index < len(base) else _OPAQUE
            if isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
                ring = self.value(node.value.value)
                index = self.value(node.slice)
                if isinstance(ring, _RingV) and index == 0 and ring.depth is not None:
                    return ring.depth
            return _Sym(_tiles(base) | _tiles(self.value(node.slice)))
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self.value(e) for e in node.elts)
        if isinstance(node, ast.Call):
            return self.call(node, target)
        if isinstance(node, ast.Attribute):
            base = self.value(node.value)
            return _Sym(_tiles(base))
        tiles = frozenset()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                tiles |= _tiles(self.value(child))
        return _Sym(tiles)

    def slot(self, node: ast.AST) -> _SlotV | None:
        return _as_slot(self.value(node))

    def keyword(self, node: ast.Call, name: str, position: int | None = None):
        for k in node.keywords:
            if k.arg == name:
                return k.value
        if position is not None and len(node.args) > position:
            return node.args[position]
        return None

    def call(self, node: ast.Call, target: str | None):
        m, part = self.m, self.part
        leaf = _leaf(node.func)
        dotted = _dotted(node.func)
        line = node.lineno
        method = isinstance(node.func, ast.Attribute)
        # (`_dot(a, b, zeros).to(gl.float32)`: the product of a dot cast where it is made is the assigned name's)
        receiver = self.value(node.func.value, target if leaf in ("to", "cast") else None) \
            if method and not dotted.startswith(("gl.", "mbarrier.", "tma.", "async_copy.", "tl.")) else None
        if isinstance(receiver, _RingV) and leaf == "index" and node.args:
            index = self.value(node.args[0])
            return _SlotV(receiver, index if _is_int(index) else None)
        if isinstance(receiver, (_SlotV, _RingV)):
            ref = _as_slot(receiver)
            if leaf == "store":
                value = self.value(node.args[0]) if node.args else _OPAQUE
                number = value.number if isinstance(value, _Staged) else None
                m.copy(part, ref, line, "store", number=number)
                return _OPAQUE
            if leaf == "load":
                return m.read(part, ref, line, relaxed=False)
            if leaf in ("permute", "_reinterpret", "reshape", "trans", "slice"):
                return receiver
        if leaf == "allocate_shared_memory":
            shape = self.value(node.args[1]) if len(node.args) > 1 else ()
            depth = shape[0] if isinstance(shape, tuple) and shape and _is_int(shape[0]) else None
            # named as the variant names it; a second allocation of one name (a helper's, called again) is told apart
            label = target or "smem"
            m.rings[label] = m.rings.get(label, 0) + 1
            ring = _RingV(label if m.rings[label] == 1 else f"{label} (allocation {m.rings[label]})", depth)
            if len(node.args) > 3 or self.keyword(node, "value") is not None:
                # allocated with its value: a store the compiler fences for the wgmmas that read it
                m.copy(part, _SlotV(ring, 0), line, "store")
                m.slots[(ring.name, 0)].fenced = True
            return ring
        if leaf == "load_shared_relaxed":
            ref = self.slot(node.args[0])
            if ref is not None:
                return m.read(part, ref, line, relaxed=True)
        if leaf in _COPIES or leaf == "_cp_async_load" or dotted in ("async_copy.async_load",
                                                                      "async_copy.async_copy_global_to_shared"):
            position = 3 if leaf == "_desc_buffer_copy" else 0  # `_desc_buffer_copy(desc, off0, off1, dest)`
            dest = node.args[position] if len(node.args) > position else None
            ref = self.slot(dest) if dest is not None else None
            if ref is not None:
                for arg in node.args[1:]:
                    self.value(arg)
                m.copy(part, ref, line, "async")
                return _OPAQUE
        if leaf == "_tma_async_load" or dotted in ("tma.async_load", "tma.async_copy_global_to_shared"):
            bar = self.slot(node.args[2]) if len(node.args) > 3 else None
            ref = self.slot(node.args[3]) if len(node.args) > 3 else None
            if ref is not None and bar is not None:
                m.copy(part, ref, line, "tma", bar=bar)
                return _OPAQUE
        if dotted.startswith("mbarrier."):
            ref = self.slot(node.args[0]) if node.args else None
            if ref is None:
                raise _Unbounded(node, f"line {line}: an mbarrier the checker cannot tell")
            if ref.index is None:
                raise _Unbounded(node, f"line {line}: an mbarrier index the checker cannot evaluate")
            pred = self.keyword(node, "pred")
            taken = True if pred is None else self.value(pred)
            if leaf == "init":
                count = self.value(self.keyword(node, "count", 1))
                if not _is_int(count):
                    raise _Unbounded(node, f"line {line}: an mbarrier count the checker cannot evaluate")
                m.bars[_bar_key(ref)] = _Bar(count, count)
            elif leaf == "expect":
                if not _is_int(taken):
                    raise _Unbounded(node, f"line {line}: a predicate the checker cannot evaluate")
                if taken:
                    m.arrive(ref, line, expect=True)
            elif leaf == "arrive":
                if not _is_int(taken):
                    raise _Unbounded(node, f"line {line}: a predicate the checker cannot evaluate")
                if taken:
                    m.released(part, ref, line)
                    m.arrive(ref, line)
                    m.yield_point(part)
            elif leaf == "wait":
                parity = self.value(node.args[1]) if len(node.args) > 1 else self.value(self.keyword(node, "phase"))
                if not _is_int(parity):
                    raise _Unbounded(node, f"line {line}: an mbarrier phase the checker cannot evaluate")
                if taken:
                    m.block(part, m.passes(part, ref, parity, line), line)
            return _OPAQUE
        if leaf == "commit_group":
            m.commit(part, empty=True)
            return _OPAQUE
        if leaf in ("wait_group", "async_wait"):
            count = self.value(node.args[0]) if node.args else 0
            if not _is_int(count):
                raise _Unbounded(node, f"line {line}: a wait whose count the checker cannot evaluate")
            m.wait(part, count)
            return _OPAQUE
        if leaf in ("_cta_barrier", "thread_barrier") or dotted == "gl.barrier":
            m.barrier()
            return _OPAQUE
        if leaf == "fence_async_shared":
            m.fence(part)
            return _OPAQUE
        if leaf == "warpgroup_mma":
            operands, reads = [], []
            for arg in node.args[:2]:
                ref = self.slot(arg)
                value = m.read(part, ref, line, relaxed=False, wgmma=True) if ref is not None else self.value(arg)
                if ref is not None:
                    reads.append(m.reads[-1])
                operands.append(value)
            acc = node.args[2] if len(node.args) > 2 else self.keyword(node, "acc")
            self.value(acc) if acc is not None else None
            carried = isinstance(acc, ast.Name) and acc.id == target
            m.dot(part, target, carried, operands, line)
            asynchronous = self.value(self.keyword(node, "is_async") or ast.Constant(False))
            if asynchronous is True:
                for read in reads:
                    read.inflight = True
                part.wgmmas.append(reads)
            return _OPAQUE
        if leaf == "_mma_sync_slots":
            # mma.sync of two slots (a tile of fewer rows than a wgmma takes): each warp reads them into registers,
            # done when it returns; another warp may still be reading until a barrier
            operands = []
            for arg in node.args[:2]:
                ref = self.slot(arg)
                operands.append(m.read(part, ref, line, relaxed=False) if ref is not None else self.value(arg))
            acc = node.args[2] if len(node.args) > 2 else None
            self.value(acc) if acc is not None else None
            m.dot(part, target, isinstance(acc, ast.Name) and acc.id == target, operands, line)
            return _OPAQUE
        if leaf == "warpgroup_mma_wait":
            count = self.value(node.args[0]) if node.args else self.value(self.keyword(node, "num_outstanding"))
            if not _is_int(count):
                raise _Unbounded(node, f"line {line}: a wgmma wait whose count the checker cannot evaluate")
            m.wgmma_wait(part, count)
            return _OPAQUE
        if leaf == "_buffer_tile_load" and node.args:
            ring = self.value(node.args[0])
            if isinstance(ring, _RingV):
                number = m.copied.get(ring.name, 0)
                m.copied[ring.name] = number + 1
                for arg in node.args[1:]:
                    self.value(arg)
                return _Staged(ring.name, number)
        if leaf in _DOTS and node.args:
            operands = [self.value(arg) for arg in node.args if not (isinstance(arg, ast.Name) and arg.id == target)]
            carried = any(isinstance(arg, ast.Name) and arg.id == target for arg in node.args)
            m.dot(part, target, carried, operands, line)
            return _OPAQUE
        if leaf == "warp_specialize":
            self.specialise(node, line)
            return _OPAQUE
        if dotted == "gl.num_warps":
            return part.warps
        if leaf == "cdiv" and len(node.args) == 2:
            a, b = self.value(node.args[0]), self.value(node.args[1])
            if _is_int(a) and _is_int(b) and b:
                return -(-a // b)
        if leaf in ("minimum", "maximum", "min", "max") and len(node.args) == 2:
            a, b = self.value(node.args[0]), self.value(node.args[1])
            if _is_int(a) and _is_int(b):
                return min(a, b) if leaf in ("minimum", "min") else max(a, b)
        if isinstance(node.func, ast.Name) and leaf in m.functions and self.mentions(m.functions[leaf]):
            return self.inline(m.functions[leaf], node)
        tiles = frozenset()
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            # (`acc = gl.fma(_dot(a, b, zeros) * s, t, acc)`: as in a binary operation)
            tiles |= _tiles(self.value(arg, target if leaf == "fma" and arg is node.args[0] else None))
        if isinstance(receiver, _Sym):
            tiles |= receiver.tiles
        return _Sym(tiles)

    def bind(self, fn: ast.FunctionDef, args: list, keywords: dict) -> dict:
        params = [a.arg for a in fn.args.args]
        env = dict(zip(params, args))
        env.update({k: v for k, v in keywords.items() if k in params})
        defaults = fn.args.defaults
        for name, default in zip(params[len(params) - len(defaults):], defaults):
            if name not in env:
                env[name] = self.value(default)
        return env

    def inline(self, fn: ast.FunctionDef, node: ast.Call):
        if self.depth > 8:
            raise _Unbounded(node, f"line {node.lineno}: helpers nested too deep")
        env = self.bind(fn, [self.value(a) for a in node.args], {k.arg: self.value(k.value) for k in node.keywords})
        runner = _Runner(fn, self.m, self.part, env, self.depth + 1)
        try:
            runner.block(fn.body)
        except _Return as returned:
            return returned.value if returned.value is not None else _OPAQUE
        return _OPAQUE

    def specialise(self, node: ast.Call, line: int) -> None:
        partitions = node.args[0] if node.args else None
        if not isinstance(partitions, (ast.List, ast.Tuple)):
            raise _Unbounded(node, f"line {line}: a `gl.warp_specialize` call of another form")
        runners = []
        worker_warps = self.value(node.args[1]) if len(node.args) > 1 else ()
        worker_warps = worker_warps if isinstance(worker_warps, tuple) else ()
        for i, item in enumerate(partitions.elts):
            if not (isinstance(item, ast.Tuple) and len(item.elts) == 2 and isinstance(item.elts[0], ast.Name)
                    and item.elts[0].id in self.m.functions):
                raise _Unbounded(node, f"line {line}: a partition the checker cannot tell")
            fn = self.m.functions[item.elts[0].id]
            args = self.value(item.elts[1])
            args = list(args) if isinstance(args, tuple) else []
            warps = self.part.warps if i == 0 else (worker_warps[i - 1] if i - 1 < len(worker_warps) else 1)
            part = _Part(f"{fn.name}#{i}", warps if _is_int(warps) else 1)
            runners.append(_Runner(fn, self.m, part, self.bind(fn, args, {}), self.depth + 1))
        self.m.specialise(runners, line)

    # -- statements -----------------------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            self.block(self.fn.body)
        except _Return:
            pass
        self.m.finish(self.part, self.fn.body[-1].end_lineno or self.fn.lineno)

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
                if trip.group(1) in ("num_iters", "ws_iters"):
                    # (a later loop: those of the loop before have had its trips)
                    for acc in self.part.held():
                        m.settle(self.part, acc)
                    self.part.trips = value
            elif _STAGES_NAME.match(name) and not (isinstance(node, ast.Subscript)):
                value = m.overrides["NUM_STAGES"]  # the ring depth of this case
            afresh = not any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))  # (not read back)
            if name in self.part.held() and afresh:
                m.settle(self.part, name)  # the accumulator starts again (a new output tile)
            if self.part.bound_by_dot != name:
                if self.part.depth and afresh:
                    self.part.products[name] = self.part.depth  # (made in the iteration: `qk = gl.zeros(...)`)
                else:
                    self.part.products.pop(name, None)
            self.part.bound_by_dot = None
            self.env[name] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = value if isinstance(value, tuple) and len(value) == len(target.elts) else None
            for i, element in enumerate(target.elts):
                self.assign(element, node, values[i] if values else _Sym(_tiles(value)))

    def stmt(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Assign):
            target = stmt.targets[0].id if isinstance(stmt.targets[0], ast.Name) else None
            if target is None and isinstance(stmt.targets[0], ast.Tuple) and stmt.targets[0].elts \
                    and isinstance(stmt.targets[0].elts[0], ast.Name):
                target = stmt.targets[0].elts[0].id  # `acc, _ = warpgroup_mma_wait(...)`
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
                    self.env[stmt.target.id] = _BINOPS[type(stmt.op)](current, change)
                else:
                    self.env[stmt.target.id] = _Sym(_tiles(current) | _tiles(change))
        elif isinstance(stmt, ast.Expr):
            self.value(stmt.value)
        elif isinstance(stmt, ast.If):
            test = self.value(stmt.test)
            if _is_int(test):
                if not test and not stmt.orelse and self.mentions(stmt):
                    # (a guarded accumulation skipped this iteration: fewer updates than iterations, tiles skipped;
                    # the stage around it meets the other warp group's barriers all the same, as where it runs)
                    self.m.guarded |= {node.id for s in stmt.body for node in ast.walk(s) if isinstance(s, (
                        ast.Assign, ast.AugAssign)) and isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
                    self.m.now()
                self.block(stmt.body if test else stmt.orelse)
            elif not self.mentions(stmt):
                self.block(stmt.body)  # nothing of the model: either branch leaves it as it is
            elif not stmt.orelse and _only_mmas(stmt.body, self.m.functions):
                # (an iteration guard's test, `if kbid:` on a value the iteration loads: its branch runs MMAs on
                # operands read outside it, every iteration, and issues no copy, wait or barrier; where it is skipped
                # no slot is read either, so the branch taken every iteration is the case that shows every hazard)
                self.block(stmt.body)
            elif stmt.lineno in self.m.decisions:
                self.block(stmt.body if self.m.decisions[stmt.lineno] else stmt.orelse)
            else:
                raise _Undecided(stmt)
        elif isinstance(stmt, ast.For):
            self.loop(stmt)
        elif isinstance(stmt, ast.With):
            stage = any(isinstance(item.context_expr, ast.Call) and _leaf(item.context_expr.func) == _STAGE_CALL
                        for item in stmt.items)
            if stage:
                self.m.barrier()  # every stage starts at a barrier
            self.block(stmt.body)
        elif isinstance(stmt, ast.Return):
            raise _Return(self.value(stmt.value) if stmt.value is not None else None)
        elif isinstance(stmt, ast.While):
            self.while_loop(stmt)

    def while_loop(self, stmt: ast.While) -> None:
        """A `while` runs while its test holds, if the checker can evaluate it; else (a stream-K kernel's walk over
        its share of the iterations) two trips, as a `for` over tiles does."""
        if not self.mentions(stmt):
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
        static = _is_static(stmt)
        bounds = None
        if isinstance(it, ast.Call) and _leaf(it.func) in ("range", "static_range"):
            args = [self.value(a) for a in it.args]
            if all(_is_int(a) for a in args) and 1 <= len(args) <= 3:
                bounds = range(*args)
        if bounds is None:
            if not self.mentions(stmt):
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
        self.part.depth += 0 if static else 1
        for value in bounds:
            if isinstance(stmt.target, ast.Name):
                self.env[stmt.target.id] = value
            self.block(stmt.body)
        self.part.depth -= 0 if static else 1
        if pipelined:
            m.barrier()
            m.phase[0] += 1  # the leading group's extra barrier: both are level again


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
    ast.BitAnd: lambda a, b: a & b,
    ast.BitXor: lambda a, b: a ^ b,
    ast.BitOr: lambda a, b: a | b,
}
_COMPARES = {
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
}


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def pipelined_kernels(tree: ast.Module) -> list[ast.FunctionDef]:
    """The kernels of a variant with a pipelined loop: a `warp_pipeline_stage` block (AMD) or a ring of shared
    memory slots sized by a `NUM_STAGES` constexpr (Hopper), in the kernel or in the partitions it runs; the
    partitions and helpers themselves are followed from their kernel."""
    functions = _functions(tree)
    called = {sub.id for fn in functions.values() if _is_jit(fn) for sub in ast.walk(fn)
              if isinstance(sub, ast.Name) and sub.id in functions and sub.id != fn.name}

    def pipelined(fn: ast.FunctionDef, seen: frozenset) -> bool:
        for sub in ast.walk(fn):
            if isinstance(sub, ast.Call) and _leaf(sub.func) == _STAGE_CALL:
                return True
            if isinstance(sub, ast.AnnAssign) and isinstance(sub.target, ast.Name) \
                    and _STAGES_NAME.match(sub.target.id):
                return True
            if isinstance(sub, ast.Name) and sub.id in functions and sub.id not in seen \
                    and pipelined(functions[sub.id], seen | {sub.id}):
                return True
        return False

    return [fn for name, fn in functions.items() if name not in called and _is_jit(fn)
            and pipelined(fn, frozenset({name}))]


def _reached(fn: ast.FunctionDef, functions: dict) -> set[str]:
    """`fn` and the module functions it names, transitively."""
    seen, stack = {fn.name}, [fn]
    while stack:
        for sub in ast.walk(stack.pop()):
            if isinstance(sub, ast.Name) and sub.id in functions and sub.id not in seen:
                seen.add(sub.id)
                stack.append(functions[sub.id])
    return seen


def _is_jit(fn: ast.FunctionDef) -> bool:
    return any(_leaf(d.func if isinstance(d, ast.Call) else d) == "jit" for d in fn.decorator_list)


def _depths(fn: ast.FunctionDef) -> list[int]:
    """The ring depths `fn` can pick: the literal it names, else 2 up to the most its `_ring_slots(limit, most,
    ...)` or `_fit_stages(depth, ...)` call allows (4 where its depth is a choice of autotuning)."""
    most, fixed = 2, None
    for node in ast.walk(fn):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and _STAGES_NAME.match(node.target.id) and node.value is not None):
            continue
        value = node.value
        if isinstance(value, ast.Constant) and isinstance(value.value, int):
            fixed = value.value
        elif isinstance(value, ast.Call):
            leaf = _leaf(value.func)
            bound = value.args[1] if leaf == "_ring_slots" and len(value.args) > 1 else (
                value.args[0] if leaf == "_fit_stages" and value.args else None)
            if isinstance(bound, ast.Constant) and isinstance(bound.value, int):
                most = max(most, bound.value)
            elif leaf not in ("_ring_slots", "_fit_stages"):
                most = max(most, 4)
    if fixed is not None and most == 2:
        return [fixed]
    return list(range(2, most + 1))


def check_function(fn: ast.FunctionDef, functions: dict, report: Report) -> None:
    """Every case of one kernel: each ring depth, loops of 0 to three rounds of the ring and more, with and without
    a K tail, and every branch of an `if` the checker cannot decide that guards the model's operations."""
    findings: list[Finding] = []
    runs = 0
    reached = [functions[name] for name in _reached(fn, functions)]
    # a warp-pipelined loop runs with 8 warps (its kernel asserts it); a Hopper kernel with one warpgroup or two
    warp_counts = [8] if any(_leaf(c.func) == _STAGE_CALL for f in reached for c in ast.walk(f)
                             if isinstance(c, ast.Call)) else [4, 8]
    tails = (False, True) if any(isinstance(n, ast.Name) and n.id.startswith("num_full")
                                 for f in reached for n in ast.walk(f)) else (False,)
    for warps in warp_counts:
        for depth in _depths(fn):
            for iters in range(3 * depth + 4):
                for tail in tails:
                    if tail and iters == 0:
                        continue
                    overrides = {"NUM_STAGES": depth, "num_iters": iters, "ws_iters": iters,
                                 "num_full": iters - 1 if tail else iters, "num_warps": warps}
                    case = (f"num_warps={warps}, NUM_STAGES={depth}, {iters} iterations"
                            + (", the last one a K tail" if tail else ""))
                    found, completed = _run_all_branches(fn, functions, overrides, case)
                    findings.extend(found)
                    runs += completed
    report.cases[fn.name] = report.cases.get(fn.name, 0) + runs
    seen = {(f.kernel, f.line, f.message) for f in report.findings}
    for finding in findings:  # one finding per operation and message: the first case that shows it
        key = (finding.kernel, finding.line, finding.message)
        if key not in seen:
            seen.add(key)
            report.findings.append(finding)


def _run_all_branches(fn: ast.FunctionDef, functions: dict, overrides: dict, case: str
                      ) -> tuple[list[Finding], int]:
    """One case, run once per combination of the branches it cannot decide: the findings, and the runs completed."""
    findings: list[Finding] = []
    completed = 0
    pending: list[dict] = [{}]
    tried = 0
    while pending:
        decisions = pending.pop()
        tried += 1
        if tried > 64:
            findings.append(Finding(fn.name, fn.lineno, "too many undecidable branches guard the model's operations",
                                    case))
            break
        label = case + "".join(f", the `if` of line {line} {'taken' if taken else 'not taken'}"
                               for line, taken in sorted(decisions.items()))
        machine = _Machine(fn.name, functions, overrides, decisions, label)
        try:
            _Runner(fn, machine, _Part("kernel", overrides["num_warps"])).run()
        except _Undecided as undecided:
            pending.append({**decisions, undecided.node.lineno: True})
            pending.append({**decisions, undecided.node.lineno: False})
            continue
        except _Unbounded as unbounded:
            line = unbounded.node.lineno if unbounded.node is not None else fn.lineno
            findings.append(Finding(fn.name, line, f"the checker cannot follow {unbounded.why}", label))
            continue
        completed += 1
        findings.extend(machine.findings)
    return findings, completed


def check_source(source: str) -> Report:
    """Every pipelined kernel of a variant's source, every case."""
    report = Report()
    tree = ast.parse(source)
    functions = _functions(tree)
    for fn in pipelined_kernels(tree):
        check_function(fn, functions, report)
    return report
