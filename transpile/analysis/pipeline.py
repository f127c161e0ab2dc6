"""Main-loop facts for software pipelining: which statements produce the MMA operands, which consume them.

For a loop ``for k in range(lo, hi[, step])`` of a jit function, `plan_loop` finds the dot (``acc = tl.dot(a, b,
acc)``), the tile loads that produce its operands (``a = a_desc.load(coords)`` through a tensor descriptor, or
``a = tl.load(a_ptrs, mask=..., other=...)`` through a tile of pointers), and the *producer slice*: the loop
statements those loads' addresses and masks depend on (``off_k = k * BLOCK_K``, ``k_mask = offs_k < K - k *
BLOCK_K``), including *loop-carried producer state*: pointers that each iteration advances after the loads
(``a_ptrs += BLOCK_K * stride_ak``). Everything else is the consumer. The plan is pure facts; a target's pipeline
rule turns it into a ring of shared-memory buffers filled ahead of use (the producer slice is re-evaluated for a
later iteration, its carried state advanced on its own copy). When a loop cannot be pipelined the result is a
`LoopRefusal` with the reason and the node to point at; the loop then stays as it is.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import libcst as cst

from transpile.analysis.dot_loops import dot_loops, is_unrolled
from transpile.analysis.guards import iteration_guard
from transpile.analysis.layouts import LayoutPlan, OperandAnchor, StoreAnchor, name_terms
from transpile.analysis.layout_values import DotSite
from transpile.cst_utils import (GUARDS_FLATTENED, added_to, assigned_names, bound_names, calls_in, compile_time,
                                 names_in, names_int8, per_loop, read_names, value_names)
from transpile.cst_walk import preorder
from transpile.discover import ModuleFacts, language_name
from transpile.source import SourceFile

# Keyword arguments of `tl.load` that a pipelined copy can honour (the cache hints are dropped by the copy engines).
POINTER_LOAD_KEYWORDS = ("mask", "other", "cache_modifier", "eviction_policy")


@dataclass
class OperandLoad:
    index: int  # statement index in the loop body
    name: str  # the variable the tile is bound to
    descriptor: str  # the descriptor variable it is loaded through ("" for a pointer load)
    call: cst.Call = field(repr=False)
    pointer: cst.BaseExpression | None = field(default=None, repr=False)  # pointer loads: the tile of pointers
    mask: cst.BaseExpression | None = field(default=None, repr=False)
    other: cst.BaseExpression | None = field(default=None, repr=False)
    # The dot reads the tile transposed (`tl.dot(x, tl.trans(w))`, `w.T`: a linear layer's [N, K] weights): the
    # ring holds the tile as loaded and the MMA reads a transposed view of its slot.
    transposed: bool = False
    # The load is written inside the dot (`tl.dot(a_desc.load([...]), ...)`): `index` is the dot's statement and
    # `name` a name for the tile that the source does not bind.
    inline: bool = False
    # The dot reads a tile computed from this one (`b = (w.to(tl.float32) * scales).to(tl.float16)`, dequantised
    # weights), or the loop reads the tile elsewhere too: the ring holds the tile as loaded, its slot is read in the
    # layout of the MMA operand it becomes, and the computation stays in the consumer.
    computed: bool = False
    # ... the statements of that computation (indices in the loop body, the load's excluded)
    prep: tuple[int, ...] = ()
    # ... and, where the dot reads that computed tile transposed (`k = k_0.to(tl.bfloat16)`, `tl.dot(q, k.T)`: an
    # attention loop's dequantised K), its name: the slot is read transposed, straight in the MMA operand's layout, and
    # the computation, elementwise, runs on that view (`transpile.analysis.stages` checks it is elementwise)
    computed_as: str = ""
    # The tile feeds dots both as loaded and transposed (attention's backward reads Q and dO each way: `tl.dot(k, qT)`
    # and `tl.dot(ds, tl.trans(qT))`): one ring, its slot read once in each form. `transposed` is the first dot's form.
    twice: bool = False
    # The tile, as loaded, is the A operand of one dot and the B operand of another (FLA's `b_dA += tl.dot(b_do, b_v)`
    # and `b_dv = tl.dot(b_A, b_do)`): one ring, its slot read once in each operand's layout
    sides: bool = False

    @property
    def kind(self) -> str:
        return "descriptor" if self.descriptor else "pointer"


@dataclass(frozen=True)
class DotChain:
    """One dot of a pipelined loop: its statement, its accumulator and the names of its A and B tile loads."""

    index: int
    acc: str
    # the dot takes the accumulator (`acc = tl.dot(a, b, acc)`); False where the statement adds the dot's result to
    # it (`acc += tl.dot(a, b)`, an accumulator whose dtype canonicalisation could not prove foldable): the MMA
    # layout is then the dot result's, not `acc`'s
    acc_in_dot: bool
    operands: tuple[str, str]
    call: cst.Call = field(repr=False, compare=False)  # the dot call (a key of `LayoutPlan.dots`)
    # The dot starts from zero each iteration (attention's scores, ``s = tl.dot(q, tl.trans(k))``): `acc` names its
    # result and nothing is carried; its MMA layout is the result's
    fresh: bool = False
    # `tl.dot_scaled`: the names of the scale tile loads that have rings of their own, A's then B's ("" where that
    # scale has none: `None`, or loaded otherwise; operand positions 2 and 3 in `LoopPlan.use_of`)
    scales: tuple[str, ...] = ()
    # A and B are read transposed by this dot (`tl.trans(w)`): a tile read in both forms (`OperandLoad.twice`) is
    # transposed in some dots only
    transposed: tuple[bool, bool] = (False, False)
    # The A operand is computed in the iteration from earlier dots' products (`p.to(v.dtype)` of a fresh dot's
    # scores): it stays in registers, named by its source text in `operands`
    chained: bool = False
    # The dot's product is scaled in registers before it is added to `acc` (`acc += tl.dot(a, b) * a_s[:, None] *
    # b_s[None, :]`, block-scaled 8-bit GEMMs): the MMA starts from zero each iteration and the statement adds its
    # scaled result; `acc` is carried, and its layout is the product's
    scaled_product: bool = False
    # Further tiles loaded in the loop that an operand is computed from, beside the one `operands` names (`xg = (x *
    # tl.exp(g)).to(x.dtype)`: `x` in `operands`, `g` here): (name, operand position). Each has a ring of its own,
    # its slot read in the layout the computation runs in, the operand's
    factors: tuple[tuple[str, int], ...] = ()
    # `acc += tl.dot(a, b)` where the operands may be 8-bit integers and the accumulator's type is not named (aiter's
    # `acc_dtype = tl.float32 if c_ptr.type.element_ty != tl.int8 else tl.int32`): an int32 product added to a float
    # accumulator apart from the MMA. The loop is pipelined for the other operand types; launches with 8-bit integer
    # tensors run the source kernel (`integer_sums` of `plan_loop`)
    integer_sum: bool = False
    # The dot runs under a test of scalars alone (`if i_s >= 0: b_o += tl.dot(b_s, b_v)`, FLA's guard): its
    # statement is the `if`, whose branch is the one accumulation (`guarded_dot`); the MMA runs where the test holds,
    # its operands read from the rings as for any dot (`guarded_dots` of `plan_loop`)
    guarded: bool = False

    def position_of(self, name: str) -> int | None:
        """The operand position at which this dot reads the tile load `name` (0: A, 1: B, 2 and 3: A's and B's
        scales, a factor: the operand it is a factor of); None where it reads none."""
        if name in self.operands:
            return self.operands.index(name)
        if name in self.scales:
            return 2 + self.scales.index(name)
        return next((position for factor, position in self.factors if factor == name), None)


@dataclass
class LoopPlan:
    loop: cst.For = field(repr=False)
    var: str
    range_args: list[cst.BaseExpression] = field(repr=False)
    num_stages: int
    loads: list[OperandLoad]  # A then B of the first dot, then the tiles only further dots read
    dot_index: int
    acc: str
    producer: list[int]  # statement indices the loads' addresses and masks depend on (in body order)
    carried: list[str] = field(default_factory=list)  # loop-carried producer state (advanced after the loads)
    # Every dot of the loop, the first one (`dot_index`, `acc`) included: one chain per accumulator, each reading
    # two of `loads` (several where the caller allows `several_dots`: a gated GEMM's gate and up products)
    chains: list[DotChain] = field(default_factory=list)
    # The flash-attention shape (`transpile.analysis.attention.as_loop_plan`): a fresh dot of a loop-invariant A
    # operand and a loaded K, an online softmax of its result (row reductions), and a second dot of the
    # probabilities and a loaded V into the carried accumulator
    attention: bool = False
    # Carried pointers the loop advances by a loop-invariant step (`w_ptrs += BLOCK_K * stride_wk`) that the code after
    # the loop reads (a peeled last K block): (name, step). The pipelined copies advance a copy of their own, so the
    # expander binds each after the loop to its value there, `w_ptrs + iterations * step` (`advance_after`)
    advanced: list[tuple[str, cst.BaseExpression]] = field(default_factory=list, repr=False)

    @property
    def chained(self) -> bool:
        """A dot reads earlier dots' products of the iteration in registers (`DotChain.chained`): every dot's rows
        stay in one warp (warps along M) so that those products reach the next MMA's operand layout in registers."""
        return any(chain.chained for chain in self.chains)

    @property
    def acc_in_dot(self) -> bool:
        """The first dot takes its accumulator (`DotChain.acc_in_dot`)."""
        return self.chains[0].acc_in_dot if self.chains else True

    def use_of(self, name: str) -> tuple[DotChain, int]:
        """The (first) dot the tile load `name` feeds, and its operand position there (0: A, 1: B)."""
        chain = next(chain for chain in self.chains if chain.position_of(name) is not None)
        return chain, chain.position_of(name)  # type: ignore[return-value]

    @property
    def kind(self) -> str:
        """"descriptor" when both operands come through tensor descriptors, "pointer" when both are pointer tiles."""
        kinds = {load.kind for load in self.loads}
        return kinds.pop() if len(kinds) == 1 else "mixed"

    def _advances(self, i: int) -> bool:
        """Statement `i` advances loop-carried producer state (``a_ptrs += ...``): it assigns a name the loads read
        before the body assigns it, and it comes after the first load. Any other producer statement (coordinates,
        masks, an address recomputed from the loop variable between two loads) runs before the loads."""
        first = min(load.index for load in self.loads)
        return i > first and bool(assigned_names(loop_body(self.loop)[i]) & set(self.carried))

    def producer_before(self) -> list[int]:
        """Producer statements that run before the loads of an iteration (coordinates, masks, addresses)."""
        return [i for i in self.producer if not self._advances(i)]

    def producer_after(self) -> list[int]:
        """Producer statements that advance the carried state after the loads (``a_ptrs += ...``)."""
        return [i for i in self.producer if self._advances(i)]


@dataclass
class LoopRefusal:
    node: cst.CSTNode
    reason: str


@contextmanager
def flattened_guards() -> Iterator[None]:
    """Within: `loop_body` gives a loop with an iteration guard (`analysis.guards.iteration_guard`: `if kbid:` around
    the iteration's work, its loads masked by the test) the guard's statements in place of the `if`, so that the
    planners read them as any iteration's. Only an expander that runs those statements under the test (the AMD warp
    pipeline: `guarded_indices`) plans within it."""
    token = GUARDS_FLATTENED.set(True)
    try:
        yield
    finally:
        GUARDS_FLATTENED.reset(token)


def loop_body(loop: cst.For | cst.While) -> list[cst.BaseStatement]:
    body = list(loop.body.body) if isinstance(loop.body, cst.IndentedBlock) else []
    if GUARDS_FLATTENED.get():
        guard = iteration_guard(loop)
        if guard is not None:
            at = next(i for i, s in enumerate(body) if s is guard)
            body[at:at + 1] = list(guard.body.body)  # type: ignore[union-attr]
    return body


def guard_reads(loop: cst.For | cst.While) -> set[str]:
    """The names the test of `loop`'s iteration guard reads (none without one, or outside `flattened_guards`)."""
    found = guarded_indices(loop)
    return names_in(found[0].test) if found is not None else set()


def guarded_indices(loop: cst.For | cst.While) -> tuple[cst.If, range] | None:
    """The iteration guard of `loop` and the indices its statements take in `loop_body` as flattened, else None."""
    guard = iteration_guard(loop) if GUARDS_FLATTENED.get() else None
    if guard is None:
        return None
    at = next(i for i, s in enumerate(loop.body.body) if s is guard)  # type: ignore[union-attr]
    return guard, range(at, at + len(guard.body.body))  # type: ignore[union-attr]


def loop_header(source: SourceFile, loop: cst.For, default_stages: int
                ) -> tuple[list[cst.BaseExpression], int] | LoopRefusal:
    """`for k in range(...)` / `tl.range(..., num_stages=n)`: the range arguments and the ring depth (at least 2;
    `default_stages` when the source gives none), or a refusal naming what is not such a loop."""
    if not isinstance(loop.target, cst.Name) or not isinstance(loop.iter, cst.Call):
        return LoopRefusal(loop, "the loop is not `for <name> in range(...)`")
    lang = language_name(source.qualified_name(loop.iter.func))
    if not ((isinstance(loop.iter.func, cst.Name) and loop.iter.func.value == "range") or lang == "range"):
        return LoopRefusal(loop.iter, "the loop does not iterate over `range`/`tl.range`")
    stages = default_stages
    for a in loop.iter.args:
        if a.keyword is not None and a.keyword.value == "num_stages":
            try:
                stages = int(source.code(a.value).strip())
            except ValueError:
                # a depth the launch gives (`num_stages=NUM_STAGES`): the ring takes the default depth, which the
                # target's rules fit to its shared memory as they do any depth
                if not isinstance(a.value, cst.Name):
                    return LoopRefusal(a.value, "`num_stages` must be an integer literal or a constexpr name")
    return [a.value for a in loop.iter.args if a.keyword is None], max(stages, 2)


def operand_load(source: SourceFile, plan: LayoutPlan, index: int, statement: cst.BaseStatement,
                 name: str) -> OperandLoad | LoopRefusal | None:
    """`name = desc.load(coords)` or `name = tl.load(ptrs, mask=, other=)` at `statement`, else None."""
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Assign) and assigned_names(statement) == {name}):
        return None
    call = statement.body[0].value
    if not isinstance(call, cst.Call):
        return None
    op = plan.descriptor_ops.get(call)
    if op is not None and op[0] == "load" and isinstance(call.func, cst.Attribute) \
            and isinstance(call.func.value, cst.Name):
        shapes = {tuple(" ".join(b.split()) for b in info.block_shape)
                  for info in plan.descriptor_makes.get(call.func.value.value, [])}
        if len(shapes) > 1:
            # (`if TRANSPOSE_A: a_desc = ...[BK, BM]... else: a_desc = ...[BM, BK]...`: the ring's slots would take
            # one of the blocks for every copy of the loop)
            return LoopRefusal(call, f"the descriptor `{call.func.value.value}` is made with {len(shapes)} block "
                               "shapes (in the branches of an `if`); a ring's slots take one")
        return OperandLoad(index, name, call.func.value.value, call)
    if language_name(source.qualified_name(call.func)) not in ("load", "core.load"):
        return None
    positional = [a for a in call.args if a.keyword is None]
    keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    unsupported = [k for k in keywords if k not in POINTER_LOAD_KEYWORDS + ("pointer",)]
    if unsupported:
        return LoopRefusal(call, f"`tl.load(..., {unsupported[0]}=...)` has no pipelined copy")
    values = [a.value for a in positional]
    pointer = values[0] if values else keywords.get("pointer")
    mask = values[1] if len(values) > 1 else keywords.get("mask")
    other = values[2] if len(values) > 2 else keywords.get("other")
    if pointer is None:
        return None
    return OperandLoad(index, name, "", call, pointer, mask, other)


def _inline_descriptor_load(plan: LayoutPlan, operand: cst.BaseExpression, dot_index: int, transposed: bool
                            ) -> OperandLoad | None:
    """The operand `a_desc.load(coords)` written inside the dot, as an OperandLoad of the dot's statement."""
    if not isinstance(operand, cst.Call):
        return None
    op = plan.descriptor_ops.get(operand)
    if op is None or op[0] != "load" or not isinstance(operand.func, cst.Attribute) \
            or not isinstance(operand.func.value, cst.Name):
        return None
    desc = operand.func.value.value
    return OperandLoad(dot_index, f"{desc}_tile", desc, operand, transposed=transposed, inline=True)


def transposed_name(source: SourceFile, operand: cst.BaseExpression, calls: bool = False
                     ) -> cst.BaseExpression | None:
    """`w` of a dot operand written `tl.trans(w)` or `tl.permute(w, (1, 0))` (canonicalisation turns `w.T` into
    `tl.trans(w)`), else None; with `calls`, `w` may be a call (`tl.trans(w_desc.load(...))`)."""
    if not isinstance(operand, cst.Call) or not operand.args:
        return None
    if not isinstance(operand.args[0].value, cst.Name) and not (calls and isinstance(operand.args[0].value, cst.Call)):
        return None
    name = language_name(source.qualified_name(operand.func))
    rest = "".join(source.code(a.value) for a in operand.args[1:]).replace(" ", "")
    if name == "trans" and rest in ("", "(1,0)", "[1,0]", "1,0", "10"):
        return operand.args[0].value
    if name == "permute" and rest in ("(1,0)", "[1,0]", "10"):
        return operand.args[0].value
    return None


#: why a branch on constexpr parameters stayed in the loop (`passes/unswitch.py` copies the loop once per value)
NOT_COPIED = ("decided at compile time, but the loop was not copied once per value (the tool copies a dot loop for at "
              "most two such tests, four copies of at most four dots each (three tests, eight copies, for a loop of "
              "one dot), each test written on a line of its own; with fewer such tests in the loop, each copy is "
              "planned on its own)")
#: memory operations a branch of the loop may run, kept whole in the consumer (`branch_refusal`)
_CONSUMER_MEMORY = ("load", "core.load", "store", "core.store")
# Calls an `if` of the loop body may not make, those above aside: they would decide inside the pipelined loop which
# MMAs, atomics or barriers an iteration runs (the copies of a later iteration run ahead of its consumer).
_BRANCH_EFFECTS = re.compile(r"^(core\.)?(load|store|dot|dot_scaled|atomic_\w+|debug_barrier|device_print|"
                             r"device_assert|make_block_ptr|advance)$")


def branch_refusal(source: SourceFile, plan: LayoutPlan, statement: cst.BaseStatement) -> LoopRefusal | None:
    """None where `statement`, a compound statement of the loop body, is an `if` of arithmetic, plain loads and
    stores only (a mask or an offset chosen by a flag, an operand converted under `if USE_FP8:`, a state stored every
    few iterations, a gate loaded under `if USE_G:` or on a run-time test): the pipeline stages it as one statement,
    whole, with the consumer (a branch the loads' addresses read, which would go with the producer, is refused by
    `plan_loop`). Else the refusal naming it: a dot, an atomic, a barrier, a tensor descriptor's or block pointer's
    operation in a branch."""
    line = source.position(statement)[0]
    if isinstance(statement, cst.With):
        return LoopRefusal(statement, f"the `with` block at line {line} inside the main loop (no pipeline rule stages "
                           "a `with` block; a loop without it is pipelined)")
    if not isinstance(statement, cst.If):
        kind = type(statement).__name__.lower()
        return LoopRefusal(statement, f"the `{kind}` statement at line {line} inside the main loop")
    for node in preorder(statement):
        if isinstance(node, (cst.For, cst.While)):
            return LoopRefusal(node, f"a loop inside the `if` at line {line} of the main loop")
        if isinstance(node, (cst.Break, cst.Continue, cst.Return)):
            return LoopRefusal(node, f"data-dependent exit from the main loop (in the `if` at line {line})")
        if isinstance(node, (cst.With, cst.Try)):
            return LoopRefusal(node, f"a `{type(node).__name__.lower()}` block inside the `if` at line {line} of the "
                               "main loop")
        if isinstance(node, cst.Call):
            what = language_name(source.qualified_name(node.func)) or ""
            op = plan.descriptor_ops.get(node)
            if op is not None:
                what = f"descriptor {op[0]}"
            elif node in plan.dots:
                what = "dot"
            elif not _BRANCH_EFFECTS.match(what):
                continue
            elif what in _CONSUMER_MEMORY:
                # (a plain load or store: the branch runs whole in the consumer, in the iteration's order, as the
                # source runs it; a branch the loads' addresses read is refused apart, and a tile a dot reads that a
                # branch loads is no ring's tile)
                continue
            flags = _compile_time_tests(source, plan, statement, node)
            if flags:
                return LoopRefusal(node, f"the `if` at line {line} inside the main loop runs "
                                   f"`{what.split('.')[-1]}` in a branch on `{flags}`, {NOT_COPIED}")
            return LoopRefusal(node, f"the `if` at line {line} inside the main loop runs `{what.split('.')[-1]}` in a "
                               "branch: which loads, stores or MMAs an iteration runs would be decided inside the "
                               "pipelined loop (a branch on constexpr parameters alone is hoisted out of the loop "
                               "first; branches of arithmetic only are pipelined)")
    return None


def _compile_time_tests(source: SourceFile, plan: LayoutPlan, statement: cst.If, node: cst.CSTNode) -> str:
    """The tests of the `if`s from `statement` down to `node`, where every one reads only the
    function's constexpr parameters and literals (Triton decides them when it compiles the kernel); else ""."""
    constexprs = {p.name for p in plan.function.params if p.is_constexpr}
    tests: list[cst.BaseExpression] = []
    parents = source.parents
    at = parents.get(node) if node is not statement else None
    while at is not None and at is not statement:
        if isinstance(at, cst.If):
            tests.append(at.test)
        at = parents.get(at)
    tests.append(statement.test)
    if not all(compile_time(test, constexprs) for test in tests):
        return ""
    return "`, `".join(" ".join(source.code(test).split()) for test in reversed(tests))


def _exposed(statements: Sequence[cst.BaseStatement], defined: set[str]) -> tuple[set[str], set[str]]:
    """(names `statements` read before they assign them, names they assign on every path), given `defined` already
    assigned. A name an `if` assigns on some paths only is read too: where no branch assigns it, its value flows
    through."""
    reads: set[str] = set()
    defined = set(defined)
    for statement in statements:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign):
                    reads |= names_in(small.value) - defined
                    for target in small.targets:
                        if not isinstance(target.target, (cst.Name, cst.Tuple, cst.List)):
                            reads |= names_in(target.target) - defined
                    defined |= assigned_names(cst.SimpleStatementLine([small]))
                elif isinstance(small, cst.AnnAssign):
                    reads |= (names_in(small.value) if small.value is not None else set()) - defined
                    defined |= names_in(small.target)
                else:
                    reads |= names_in(small) - defined
                    if isinstance(small, cst.AugAssign):
                        defined |= names_in(small.target)
        elif isinstance(statement, cst.If):
            reads |= names_in(statement.test) - defined
            then_reads, then_defined = _exposed(list(statement.body.body), defined)  # type: ignore[union-attr]
            otherwise = statement.orelse
            if isinstance(otherwise, cst.If):
                else_reads, else_defined = _exposed([otherwise], defined)
            elif isinstance(otherwise, cst.Else):
                else_reads, else_defined = _exposed(list(otherwise.body.body), defined)  # type: ignore[union-attr]
            else:
                else_reads, else_defined = set(), set(defined)
            must = then_defined & else_defined
            reads |= then_reads | else_reads | ((then_defined | else_defined) - must)
            defined = must
        elif isinstance(statement, (cst.For, cst.While)) and isinstance(statement.body, cst.IndentedBlock):
            # (what the body reads before assigning it in an iteration; it may run no iteration: defines nothing)
            head = statement.iter if isinstance(statement, cst.For) else statement.test
            reads |= names_in(head) - defined
            inner = defined | (names_in(statement.target) if isinstance(statement, cst.For) else set())
            reads |= _exposed(list(statement.body.body), inner)[0]
            if isinstance(statement.orelse, cst.Else):
                reads |= _exposed(list(statement.orelse.body.body), defined)[0]  # type: ignore[union-attr]
        else:
            reads |= names_in(statement) - defined
            defined |= assigned_names(statement)
    return reads, defined


def _plain_targets(statement: cst.BaseStatement) -> set[str]:
    """Names a statement assigns without reading them first (`x = ...`; not `x += ...`; an `if` that assigns `x` on
    every path before any read of it)."""
    if isinstance(statement, cst.SimpleStatementLine) and all(isinstance(s, (cst.Assign, cst.AnnAssign))
                                                               for s in statement.body):
        return assigned_names(statement)
    if isinstance(statement, cst.If):
        reads, defined = _exposed([statement], set())
        return defined - reads
    return set()


@per_loop
def plan_loop(source: SourceFile, loop: cst.For, plan: LayoutPlan, default_stages: int,
              transposed_operands: bool = False, inline_loads: bool = False, accumulations: bool = False,
              several_dots: bool = False, computed_operands: bool = False,
              scale_rings: bool = False, fresh_dots: bool = False, chained_dots: bool = False,
              scaled_products: bool = False, advances_after: bool = False, integer_sums: bool = False,
              guarded_dots: bool = False, transposed_computed: bool = False) -> LoopPlan | LoopRefusal | None:
    """The pipelining plan of `loop`, a refusal, or None when the loop has no dot fed by tile loads.
    `transposed_operands`: the caller's ring can feed a transposed tile (`tl.trans(w)`) to the MMA; `inline_loads`:
    it can take a tensor descriptor's load written as the dot operand itself (`tl.dot(a_desc.load([...]), ...)`);
    `accumulations`: it can take a dot whose result is added to the accumulator (`acc += tl.dot(a, b)`,
    `acc = acc + tl.dot(a, b)`), which canonicalisation leaves apart where the accumulator's dtype is not known;
    `several_dots`: it can take several dots with accumulators of their own (`LoopPlan.chains`);
    `computed_operands`: it can take an operand computed from one loaded tile, or a tile also read outside the dot
    (`OperandLoad.computed`); `scale_rings`: it can take the scale tiles of a `tl.dot_scaled` through rings of their
    own (`DotChain.scales`); `fresh_dots`: it can take a dot whose result is made afresh each iteration and used there
    (`x = tl.dot(a, b)`, `DotChain.fresh`); `chained_dots`: it can take a dot whose A operand is computed in registers
    from earlier dots' products of the iteration (`DotChain.chained`: attention's backward, `tl.dot(pT.to(do.dtype),
    do)`), a tile fed to dots both as loaded and transposed (`OperandLoad.twice`) and one fed as the A operand of a dot
    and the B operand of another (`OperandLoad.sides`); `scaled_products` (with
    `accumulations`): it can take a dot whose product is scaled before it is added to the accumulator
    (`DotChain.scaled_product`); `advances_after`: it binds the carried pointers the code after the loop reads to
    their values there (`LoopPlan.advanced`, `advance_after`), where each advances by a loop-invariant step;
    `integer_sums` (with `accumulations`): it runs the source kernel for launches with 8-bit integer tensors, so a dot
    whose result is added to an accumulator of unnamed type may have 8-bit integer operands (`DotChain.integer_sum`);
    `guarded_dots`: it can take a dot accumulated under a test of scalars alone (`DotChain.guarded`);
    `transposed_computed` (with `computed_operands`): it can take a computed operand the dot reads transposed
    (`b_h_op = b_h.to(T)`, `tl.dot(b_q, tl.trans(b_h_op))`: `OperandLoad.computed_as`), its slot read through a
    transposed view and the computation run on that view."""
    body = loop_body(loop)
    dots = [(i, s) for i, s in enumerate(body) if any(call in plan.dots for call in calls_in(s))]
    if not dots:
        return None
    # A dot in a loop nested in this one belongs to that loop (the innermost loop around a dot is the one pipelined,
    # as `dot_loops` finds them): a loop whose dots all run in nested loops is not a dot loop itself.
    nested = _nested_loop_dots(source, loop, plan)
    if all(call in nested for _, s in dots for call in calls_in(s) if call in plan.dots):
        return None
    if len(dots) != 1 and not several_dots:
        return LoopRefusal(dots[1][1], "more than one `tl.dot` in the loop (one accumulator chain is pipelined)")
    header = loop_header(source, loop, default_stages)
    if isinstance(header, LoopRefusal):
        return header
    range_args, stages = header
    for statement in body:
        if isinstance(statement, (cst.For, cst.While)):
            return LoopRefusal(statement, "a loop inside the main loop")
        if not isinstance(statement, cst.SimpleStatementLine):
            if guarded_dots and guarded_dot(plan, statement) is not None:
                continue
            refusal = branch_refusal(source, plan, statement)
            if refusal is not None:
                return refusal
            continue
        for small in statement.body:
            if isinstance(small, (cst.Break, cst.Continue, cst.Return)):
                return LoopRefusal(small, "data-dependent exit from the main loop")
    uses_of: dict[str, list[tuple[int, int]]] = {}  # load name -> (dot statement, operand position) it feeds
    loads: dict[str, OperandLoad] = {}
    chains: list[DotChain] = []
    for dot_index, dot_statement in dots:
        products = {c.acc for c in chains if c.fresh} if chained_dots else set()
        chain = _dot_chain(source, plan, body, dot_index, dot_statement, transposed_operands, inline_loads,
                           accumulations, computed_operands, scale_rings, fresh_dots, products, scaled_products,
                           integer_sums, transposed_computed)
        if isinstance(chain, LoopRefusal):
            return chain
        chain_loads, chain = chain
        if any(other.acc == chain.acc and not (_continues(other) and _continues(chain)) for other in chains):
            # (dots that each take the accumulator, `acc = tl.dot(a1, b1, acc)` then `acc = tl.dot(a2, b2, acc)`: a
            # sum of products over two halves of K, run in order into one MMA accumulator; any other pair is refused)
            return LoopRefusal(dot_statement, f"two dots accumulate into `{chain.acc}` (one chain per accumulator)")
        for load in chain_loads:
            position = chain.position_of(load.name)
            known = loads.setdefault(load.name, load)
            if chained_dots and known is not load and known.index == load.index and not known.computed \
                    and not load.computed and not load.inline and known.transposed != load.transposed:
                known.twice = True  # (one ring, its slot read as loaded and transposed)
            elif chained_dots and transposed_computed and known is not load and known.index == load.index \
                    and known.computed and load.computed and known.transposed != load.transposed \
                    and known.prep == load.prep and _one_computed_tile(plan, [*chains, chain], known, load):
                # (a tile computed once and fed both ways, `b_q = (b_q * scale).to(T)` then `tl.dot(b_k,
                # tl.trans(b_q))` and `tl.dot(b_ds, b_q)`: one ring, its slot read in each form and the computation,
                # elementwise, run on each read)
                known.twice = True
                known.computed_as = known.computed_as or load.computed_as
            elif known.index != load.index or known.transposed != load.transposed \
                    or known.computed != load.computed:
                return LoopRefusal(load.call, f"`{load.name}` feeds two dots in different forms")
            uses_of.setdefault(load.name, []).append((dot_index, position))
        chains.append(chain)
    for chain in chains:
        for held in chain.operands[1:] if chain.chained else chain.operands:  # (a chained A: made in the iteration)
            if held not in loads and sum(held in value_names(st) for st in body) > 1 + sum(
                    other.index != chain.index and held in other.operands for other in chains):
                return LoopRefusal(chain.call, f"`{held}`, a dot operand held in registers across the loop, is also "
                                   "used outside the dot (the pipelined MMA reads it converted to its operand layout)")
    for name, fed in uses_of.items():
        # (a tile read as loaded by one dot and transposed by another, `OperandLoad.twice`, may be the A operand of
        # one and the B operand of the other: FLA's `b_ds += tl.dot(b_do, tl.trans(b_v))`, `b_dk += tl.dot(b_v,
        # b_dh)`; each form is read from the slot in the layout of the dot that reads it so)
        if len({position for _, position in fed}) != 1 and not loads[name].twice:
            load = loads[name]
            if not (chained_dots and {position for _, position in fed} == {0, 1} and not load.transposed
                    and not load.computed and not load.inline):
                return LoopRefusal(load.call, f"`{name}` is the A operand of one dot and the B operand of another")
            load.sides = True  # (one ring, its slot read in each operand's layout)
        uses = sum(name in value_names(st) for j, st in enumerate(body) if j != loads[name].index)
        if not loads[name].inline and not loads[name].computed and uses != len({index for index, _ in fed}):
            if computed_operands and not loads[name].transposed and not loads[name].sides:
                loads[name].computed = True  # (its slot is read in the operand's layout, for every use)
                continue
            return LoopRefusal(loads[name].call, f"`{name}` is used outside the dot; the pipelined MMA reads it "
                               "straight from shared memory")
    operands = list(loads.values())
    first = chains[0]
    dot_index, acc, dot_call = first.index, first.acc, first.call
    accumulators = {chain.acc for chain in chains}
    dot_indices = {chain.index for chain in chains}
    # The producer slice: statements the load addresses and masks need, transitively, within the loop. A name the
    # loads read before the loop body assigns it is loop-carried producer state (`a_ptrs += ...` after the dot).
    first_load = min(o.index for o in operands)
    load_indices = {o.index for o in operands}
    assigned_at: dict[str, list[int]] = {}
    for i, s in enumerate(body):
        for name in assigned_names(s):
            assigned_at.setdefault(name, []).append(i)
    needed: set[str] = set()
    for load in operands:
        for part in (load.call.args[0].value if load.descriptor else load.pointer, load.mask, load.other):
            if part is not None:
                needed |= names_in(part)
    producer: set[int] = set()
    frontier = set(needed)
    while frontier:
        name = frontier.pop()
        for i in assigned_at.get(name, []):
            if i in producer:
                continue
            if i in load_indices:
                return LoopRefusal(body[i], f"a load address depends on the loaded tile `{name}`")
            if accumulators & names_in(body[i]) or i in dot_indices:
                return LoopRefusal(body[i], "a load depends on this iteration's MMA result")
            producer.add(i)
            new = read_names(body[i]) - needed  # (not `mask` of `tl.load(..., mask=m)`: a keyword, not a read)
            frontier |= new
            needed |= new
    if accumulators & needed:
        return LoopRefusal(dot_call, "a load depends on the accumulator")
    for i in sorted(producer):
        if isinstance(body[i], cst.If):
            fed = sorted(assigned_names(body[i]) & needed) or sorted(assigned_names(body[i]))
            return LoopRefusal(body[i], f"`{fed[0]}`, which a tile load of the loop reads, is assigned in the `if` at "
                               f"line {source.position(body[i])[0]}: the pipelined copies re-evaluate each load's "
                               "address and mask for a later iteration statement by statement (a branch on constexpr "
                               "parameters alone is hoisted out of the loop first)")
        for node in preorder(body[i]):
            if isinstance(node, cst.Assign) and isinstance(node.value, cst.Name) and node.value.value == "None":
                name = sorted(names_in(node.targets[0].target))[0]
                return LoopRefusal(node, f"`{name}`, which a tile load of the loop reads, is `None` (a load without a "
                                   "mask): the pipelined copies of a later iteration add their own bound to each mask")
    # Loop-carried producer state: a name some load or producer statement reads before the body assigns it in the
    # iteration (`a_ptrs += BLOCK_K * stride` after the dot); the value read comes from the previous iteration. An
    # address recomputed from the loop variable between two loads (`w_ptrs = base + k_idx[:, None] * ...`) is not.
    reads: dict[str, int] = {}  # name -> first statement index reading it (loads and producer statements)
    for i in sorted(producer | load_indices):
        for name in read_names(body[i]):
            reads.setdefault(name, i)
    carried: list[str] = []
    for i in sorted(producer):
        for name in assigned_names(body[i]):
            if reads.get(name, i + 1) < i or (reads.get(name) == i and name not in _plain_targets(body[i])):
                if i < first_load or any(j < first_load for j in assigned_at[name]):
                    return LoopRefusal(body[i], f"`{name}` is assigned both before and after the loads")
                if name not in carried:
                    carried.append(name)
    # The carried state must advance from producer values alone (it is re-run ahead of the consumer).
    for i in producer:
        if assigned_names(body[i]) & set(carried):
            for name in read_names(body[i]):
                for j in assigned_at.get(name, []):
                    if j not in producer and name not in carried:
                        return LoopRefusal(body[i], f"the pointer advance reads `{name}`, which the consumer computes")
    carried.sort(key=lambda name: assigned_at[name][0])
    stale = _stale_after(body, sorted(producer), load_indices)
    steps = _invariant_steps(body, loop, stale & set(carried)) if advances_after else {}
    advanced: list[tuple[str, cst.BaseExpression]] = []
    for name in sorted(steps):  # (those the code after the loop reads: the others need no value there)
        if carried_out(source, plan.function.node, loop, {name}, carried) is not None:
            advanced.append((name, steps[name]))
    escaped = carried_out(source, plan.function.node, loop, stale, carried, {n for n, _ in advanced})
    if escaped is not None:
        return escaped
    return LoopPlan(loop, loop.target.value, range_args, stages, operands, dot_index, acc, sorted(producer),
                    carried, chains, advanced=advanced)


def _one_computed_tile(plan: LayoutPlan, chains: list[DotChain], first: OperandLoad, second: OperandLoad) -> bool:
    """The two computed loads `first` and `second` of one tile (one read transposed, `OperandLoad.computed_as`, the
    other as it is) feed their dots the same computed name: `tl.trans(b_q)` and `b_q`."""
    computed = first.computed_as or second.computed_as
    if not computed or (first.computed_as and second.computed_as):
        return False
    plain = second if first.computed_as else first
    chain = next((c for c in reversed(chains) if c.position_of(plain.name) in (0, 1)
                  and not c.transposed[c.position_of(plain.name)]), None)  # type: ignore[index]
    if chain is None:
        return False
    site = plan.dots[chain.call]
    operand = (site.a, site.b)[chain.position_of(plain.name)]  # type: ignore[index]
    return isinstance(operand, cst.Name) and operand.value == computed


def _invariant_steps(body: list[cst.BaseStatement], loop: cst.For, names: set[str]) -> dict[str, cst.BaseExpression]:
    """The step of each of `names` that the loop advances by a loop-invariant value only: every statement of the body
    that binds it is `p += step` (or `p = p + step`, `p = step + p`), `step` reading nothing the loop binds."""
    bound = set().union(*(assigned_names(s) for s in body)) | {loop.target.value}
    steps: dict[str, cst.BaseExpression] = {}
    for name in names:
        found: list[cst.BaseExpression] = []
        for statement in body:
            if name not in assigned_names(statement):
                continue
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
                else None
            step = None
            if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign) \
                    and isinstance(small.target, cst.Name) and small.target.value == name:
                step = small.value
            elif isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target,
                                                                                        cst.Name) \
                    and small.targets[0].target.value == name and isinstance(small.value, cst.BinaryOperation) \
                    and isinstance(small.value.operator, cst.Add):
                left, right = small.value.left, small.value.right
                step = right if isinstance(left, cst.Name) and left.value == name else \
                    left if isinstance(right, cst.Name) and right.value == name else None
            if step is None or read_names(step) & bound:
                found = []
                break
            found.append(step)
        if len(found) == 1:
            steps[name] = found[0]
    return steps


def loop_bindings(loop: cst.For) -> dict[str, tuple[int, cst.BaseExpression]]:
    """The names the body of `loop` binds once, by a plain `name = value` statement of its own (no other statement of
    the body binds them): (that statement's index, the value), by name."""
    body = loop_body(loop)
    counts: dict[str, int] = {}
    for statement in body:
        for name in assigned_names(statement):
            counts[name] = counts.get(name, 0) + 1
    found: dict[str, tuple[int, cst.BaseExpression]] = {}
    for i, statement in enumerate(body):
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
                and isinstance(statement.body[0], cst.Assign) and len(statement.body[0].targets) == 1 \
                and isinstance(statement.body[0].targets[0].target, cst.Name) \
                and counts[statement.body[0].targets[0].target.value] == 1:
            found[statement.body[0].targets[0].target.value] = (i, statement.body[0].value)
    return found


def local_pointer(plan: LoopPlan, load: OperandLoad) -> cst.BaseExpression | None:
    """The address of the pointer tile `load` as the analyses of its alignment read it: where the load reads a name
    the loop body binds once, by a plain assignment before it (`p_dA = dA + i_bh * T * BT + ...`), that assignment's
    value, which the function-wide definitions do not give where another loop binds the name too (FLA's kernels of
    two loops, each making `p_dA` afresh); else the pointer as the load reads it."""
    pointer = load.pointer
    if not isinstance(pointer, cst.Name):
        return pointer
    found = loop_bindings(plan.loop).get(pointer.value)
    return found[1] if found is not None and found[0] < load.index else pointer


def advance_after(plan: LoopPlan, iterations: str) -> list[str]:
    """Gluon statements that advance each of `LoopPlan.advanced` to its value after the loop: `p += iterations *
    (step)`, `iterations` the loop's trip count (none where it is not positive)."""
    code = cst.Module([]).code_for_node
    return [f"{name} += gl.maximum({iterations}, 0) * ({code(step)})" for name, step in plan.advanced]


def consumer_indices(producer: Sequence[int], loads: set[int], body: list[cst.BaseStatement],
                     reads: set[str] | frozenset[str] = frozenset()) -> list[int]:
    """Indices of the loop statements the consumer of a pipelined loop runs: all but the tile loads, less the producer
    statements whose values only the producer reads (those run ahead, on the renamed copies). A producer statement
    whose value the consumer reads runs in the consumer too, and so, transitively, do the producer statements it
    reads (`o_v = off + arange` then `off += BV`: the consumer advances its own `off`). `reads`: names the consumer
    reads besides its statements (an iteration guard's test, which it evaluates for its own iteration)."""
    read: set[str] = set(reads)
    taken: set[int] = set()
    for i, statement in enumerate(body):
        if i not in loads and i not in producer:
            read |= names_in(statement)
    changed = True
    while changed:
        changed = False
        for i in producer:
            if i not in taken and i not in loads and assigned_names(body[i]) & read:
                taken.add(i)
                read |= names_in(body[i])
                changed = True
    return [i for i in range(len(body)) if i not in loads and (i not in producer or i in taken)]


def _stale_after(body: list[cst.BaseStatement], producer: Sequence[int], loads: set[int]) -> set[str]:
    """Names whose values after the pipelined loop would be those they had before it: bound by producer statements
    only (the copies' run ahead on renamed copies), never by a statement the consumer runs."""
    consumer = set(consumer_indices(producer, loads, body))
    by_producer = set().union(*(assigned_names(body[i]) for i in producer if i not in consumer))
    return by_producer - set().union(*(assigned_names(body[i]) for i in consumer))


def carried_out(source: SourceFile, function: cst.FunctionDef, loop: cst.For, stale: set[str],
                 carried: Sequence[str], advanced: set[str] | frozenset[str] = frozenset()) -> LoopRefusal | None:
    """A refusal where a value only the pipelined copies compute (`a_ptrs += BLOCK_K`, `k0 = k * BLOCK_K`: `stale`)
    is read after the loop: later in the function, in another branch of an `if` around it that a loop around that
    runs again, or by the next iteration of a loop around it (its test, or its body before it assigns the name
    afresh). The copies compute their own copy of that value, so the name keeps the value it had before the loop.
    `advanced`: those of `stale` advanced after the loop by its trip count (`advance_after`), which hold their value
    wherever read after it; a loop around that carries one into this loop's next run is still refused, as the copies
    start from the pointer's definition, not from the value a previous run left."""
    path = _block_path(function, loop)
    if path is None or not stale:
        return None
    live = set(stale)
    fresh: set[str] = set()  # names assigned afresh before the loop inside the loop around it, on the way
    # ... and those assigned afresh before the loop at any level passed so far: every run of a loop further out
    # reaches this loop through those assignments (a grouped GEMM's `while` over tiles, inside its loop over
    # problems, makes the tile pointers afresh for each tile)
    dominating: set[str] = set()
    for level in range(len(path) - 1, -1, -1):
        owner, block, index = path[level]
        for statement in block[index + 1:]:
            for name in sorted((live - advanced) & _exposed([statement], set())[0]):
                return LoopRefusal(statement, f"`{name}`, which the loop computes for its loads, is read after it: the "
                                   "pipelined copies compute a copy of it, so after the loop it would keep the value "
                                   "it had before")
            live -= _plain_targets(statement)
        loops_above = [j for j in range(level) if isinstance(path[j][0], (cst.For, cst.While))]
        if level > 0 and isinstance(owner, (cst.If, cst.Else)) and loops_above:
            branch = path[level - 1][1][path[level - 1][2]]  # (the `if` statement whose branch holds the loop)
            # (what the loop around assigns afresh before it reaches this `if` again is no stale value there)
            renewed = set().union(*(_fresh_targets(st) for j in range(loops_above[-1], level)
                                    for st in path[j][1][:path[j][2]]))
            for other_owner, other in _if_branches(branch):
                reads = _exposed(other, set())[0] if other_owner is not owner else set()
                for name in sorted((live & reads) - renewed - advanced):
                    return LoopRefusal(loop, f"`{name}`, which the loop computes for its loads, is read in another "
                                       f"branch of the `if` at line {source.position(branch)[0]}, which a loop around "
                                       "runs again: the pipelined copies compute a copy of it, so there it would keep "
                                       "the value it had before the loop")
        for statement in block[:index]:  # (run again before the loop by the next iteration of a loop around it)
            fresh |= _fresh_targets(statement) & live
            dominating |= _fresh_targets(statement) & live
        if isinstance(owner, (cst.For, cst.While)):
            line = source.position(owner)[0]
            test = owner.test if isinstance(owner, cst.While) else owner.iter
            for name in sorted(live):
                # (the loop itself reads what a name it carries holds when it starts: a value only its copies advanced
                # is stale there unless assigned afresh; a name it assigns before reading matters only where read)
                first = next((i for i, st in enumerate(block[:index]) if name in _fresh_targets(st)), index)
                read_first = (name in carried and name not in fresh | dominating) or name not in advanced and (
                    name in read_names(test) or any(name in _exposed([st], set())[0] for st in block[:first]))
                if read_first:
                    return LoopRefusal(loop, f"`{name}`, which the loop computes for its loads, is carried into the "
                                       f"next iteration of the loop at line {line} around it, which does not assign "
                                       "it afresh first: the pipelined copies compute a copy of it (assign it in that "
                                       "loop before this one)")
            # (the last iteration's value still flows out of the loop around it)
            fresh = set()
        if not live:
            return None
    return None


def _fresh_targets(statement: cst.BaseStatement) -> set[str]:
    """Names `statement` assigns afresh: without reading their earlier value (`k0 = 0`, not `kk = kk % K`)."""
    return _plain_targets(statement) - _exposed([statement], set())[0]


def _if_branches(statement: cst.BaseStatement) -> list[tuple[cst.CSTNode, list[cst.BaseStatement]]]:
    """The branches of an `if` statement (its `elif`s and `else` too): (the node owning each block, as `_block_path`
    names it, the block's statements)."""
    found: list[tuple[cst.CSTNode, list[cst.BaseStatement]]] = []
    node: cst.CSTNode | None = statement
    while isinstance(node, cst.If):
        found.append((node, list(node.body.body) if isinstance(node.body, cst.IndentedBlock) else []))
        node = node.orelse
    if isinstance(node, cst.Else):
        found.append((node, list(node.body.body) if isinstance(node.body, cst.IndentedBlock) else []))
    return found


def _block_path(node: cst.CSTNode, target: cst.CSTNode) -> list[tuple[cst.CSTNode, list[cst.BaseStatement], int]] | None:
    """The blocks from `node` down to the statement `target`: (the statement owning each block, its statements, the
    index of the statement on the way), outermost first; None where `target` is not under `node`."""
    blocks: list[tuple[cst.CSTNode, cst.BaseSuite]] = []
    for field_name in ("body", "orelse", "handlers", "finalbody"):
        part = getattr(node, field_name, None)
        if isinstance(part, cst.BaseSuite):
            blocks.append((node, part))
        elif isinstance(part, (cst.Else, cst.If, cst.Finally)):
            blocks.append((part, part.body))  # (an `else:` of a loop runs once, after it: not the loop's body)
            if isinstance(part, cst.If):
                deeper = _block_path(part, target)
                if deeper is not None:
                    return deeper
        elif isinstance(part, (tuple, list)):
            blocks += [(handler, handler.body) for handler in part if isinstance(handler, cst.ExceptHandler)]
    for owner, suite in blocks:
        statements = list(suite.body) if isinstance(suite, cst.IndentedBlock) else []
        for index, statement in enumerate(statements):
            if statement is target:
                return [(owner, statements, index)]
            if isinstance(statement, cst.BaseCompoundStatement):
                deeper = _block_path(statement, target)
                if deeper is not None:
                    return [(owner, statements, index), *deeper]
    return None


def _nested_loop_dots(source: SourceFile, loop: cst.For, plan: LayoutPlan) -> set[cst.Call]:
    """The dots of `plan` that run in a `for` loop nested in `loop` (not an unrolled `tl.static_range` one, whose
    dots belong to the loop around it)."""
    found: set[cst.Call] = set()
    for node in preorder(loop.body):
        if isinstance(node, cst.For) and not is_unrolled(source, node):
            found |= {call for call in calls_in(node) if call in plan.dots}
    return found


#: Element types that are not integers, as the layout analysis writes an operand's type where it knows it
_FLOAT_TYPE = re.compile(r"\b(b?float\d*|fp8\w*|float8\w*)\b")


def _integer_dot(function: cst.FunctionDef, site: DotSite) -> bool:
    """The dot may run on 8-bit integer operands: the kernel names an 8-bit integer type in its code (not in a
    comment: `# good for int8`), and neither operand's element type is known to be a float type (a tile cast
    `.to(tl.bfloat16)` before the dot; Triton's dot takes operands of one kind)."""
    return names_int8(function) and not any(t is not None and _FLOAT_TYPE.search(t) for t in (site.operand_dtype, site.b_dtype))


def _continues(chain: DotChain) -> bool:
    """The dot takes the loop-carried accumulator itself (`acc = tl.dot(a, b, acc)`): not a fresh, scaled or chained
    product, nor a sum the statement adds apart from the MMA."""
    return chain.acc_in_dot and not (chain.fresh or chain.scaled_product or chain.chained or chain.scales)


def _dot_chain(source: SourceFile, plan: LayoutPlan, body: list[cst.BaseStatement], dot_index: int,
               dot_statement: cst.BaseStatement, transposed_operands: bool, inline_loads: bool, accumulations: bool,
               computed_operands: bool = False, scale_rings: bool = False, fresh_dots: bool = False,
               products: set[str] | None = None, scaled_products: bool = False, integer_sums: bool = False,
               transposed_computed: bool = False) -> tuple[list[OperandLoad], DotChain] | LoopRefusal:
    """The accumulator of the dot at `dot_index` and the tile loads of its two operands (A, then B), then (with
    `scale_rings`) those of a scaled dot's scales. `products`: the fresh products of earlier dots of the iteration,
    which an A operand may be computed from in registers (`DotChain.chained`)."""
    dot_call = next(c for c in calls_in(dot_statement) if c in plan.dots)
    site = plan.dots[dot_call]
    guard = guarded_dot(plan, dot_statement)
    if guard is not None:
        dot_statement = guard
    small = dot_statement.body[0] if isinstance(dot_statement, cst.SimpleStatementLine) else None
    acc_in_dot = True
    fresh = scaled = integer_sum = False
    if fresh_dots and guard is None and site.acc is None and site.scaled is None and isinstance(small, cst.Assign) \
            and _fresh_value(small.value, dot_call) and len(small.targets) == 1 \
            and isinstance(small.targets[0].target, cst.Name) \
            and small.targets[0].target.value not in _exposed(body[:dot_index], set())[0]:
        # `x = tl.dot(a, b)`: a product made afresh each iteration (a tile of the output stored in the loop, scores
        # reduced or scaled there); nothing is carried, and its MMA layout is the result's
        acc, acc_in_dot, fresh = small.targets[0].target.value, False, True
    elif not (isinstance(small, cst.Assign) and small.value is dot_call
              and isinstance(small.targets[0].target, cst.Name) and isinstance(site.acc, cst.Name)
              and site.acc.value == small.targets[0].target.value):
        added = _accumulation(small, dot_call) if accumulations and site.acc is None else None
        if added is None and accumulations and scaled_products and site.acc is None and site.scaled is None:
            added = scaled_accumulation(small, dot_call)
            scaled = added is not None
        if added is None:
            return LoopRefusal(dot_call, (_scaled(small, dot_call) if accumulations else "") or
                               "the dot is not `acc = tl.dot(a, b, acc)` with a loop-carried accumulator")
        integer_sum = not scaled and _integer_dot(plan.function.node, site)
        if integer_sum and not integer_sums:
            # 8-bit integer operands make an int32 product, which such an accumulator (float32 where the output
            # is not int8, in aiter's `gemm_a8w8`) takes as a separate add per iteration: that form measured 48
            # VGPR spills at 256x128x64 on gfx950 where Triton's own compile has none
            return LoopRefusal(dot_call, "`acc += tl.dot(a, b)` on 8-bit integer operands into an accumulator whose "
                               "type the kernel does not name: the int32 product would be added to it apart from "
                               "the MMA each iteration, which spilled where Triton's own compile does not")
        acc, acc_in_dot = added, False
    else:
        acc = site.acc.value  # type: ignore[union-attr]
    operands: list[OperandLoad] = []
    names: list[str] = []  # A's and B's: a tile load's name, or a loop-invariant operand held in registers
    factors: list[tuple[str, int]] = []  # further tiles a computed operand reads (`DotChain.factors`)
    extra: list[OperandLoad] = []
    assigned_in_body = set().union(*(assigned_names(s) for s in body))
    views = [False, False]
    chained = False
    for position, operand in enumerate((site.a, site.b)):
        if fresh and isinstance(operand, cst.Name) and operand.value not in assigned_in_body:
            names.append(operand.value)  # (a tile made before the loop, held in registers: `tl.dot(b_A, b_v)`)
            continue
        if products and position == 0 and _reads_products(source, plan, body, dot_index, operand, products):
            # (`tl.dot(pT.to(do.dtype), do)`: the probabilities of this iteration's scores, in registers; the rows of
            # the product stay in their warps)
            names.append(" ".join(source.code(operand).split()))
            chained = True
            continue
        transposed = transposed_name(source, operand, inline_loads) if transposed_operands else None
        views[position] = transposed is not None
        if transposed is not None:
            operand = transposed
        inline = _inline_descriptor_load(plan, operand, dot_index, transposed is not None) if inline_loads else None
        if inline is not None:
            operands.append(inline)
            names.append(inline.name)
            continue
        found: OperandLoad | LoopRefusal | None = None
        if isinstance(operand, cst.Name):
            for i, statement in enumerate(body[:dot_index]):
                candidate = operand_load(source, plan, i, statement, operand.value)
                if candidate is not None:
                    found = candidate
            if computed_operands and isinstance(found, OperandLoad) and any(
                    operand.value in assigned_names(s) for s in body[found.index + 1:dot_index]):
                found = None  # (`b = tl.load(...)` then `b = b.to(...)`: computed)
        if found is None and computed_operands and transposed is None:
            found = computed_from(source, plan, body, dot_index, operand, several=True)
            if isinstance(found, list):  # (the first tile names the operand; the others are its factors)
                factors += [(load.name, position) for load in found[1:]]
                extra += found[1:]
                found = found[0]
        elif found is None and computed_operands and transposed_computed and isinstance(operand, cst.Name):
            # (`tl.trans(b_h_op)` with `b_h_op = b_h.to(T)`: one tile, its slot read transposed and computed so)
            found = computed_from(source, plan, body, dot_index, operand)
            if isinstance(found, OperandLoad):
                found.computed_as = operand.value
        elif not isinstance(operand, cst.Name):
            return LoopRefusal(operand, "a dot operand is an expression, not a loaded tile (it would need registers)")
        if isinstance(found, LoopRefusal):
            return found
        if found is None and not isinstance(operand, cst.Name):
            return LoopRefusal(operand, "a dot operand is an expression, not a loaded tile (it would need registers)")
        if found is None:
            return LoopRefusal(operand, f"the dot operand `{operand.value}` is not a tile load (`tl.load` or a tensor "
                               "descriptor's `load`) in this loop")
        found.transposed = transposed is not None
        operands.append(found)
        names.append(found.name)
    if not operands:
        return LoopRefusal(dot_call, "neither operand of the dot is loaded in the loop: there is no tile to pipeline")
    scales: list[OperandLoad | None] = []
    for scale in (site.scaled[0], site.scaled[2]) if scale_rings and site.scaled is not None else ():
        # a scale tile loaded in the loop into a name the dot alone reads (else it stays in the consumer)
        load = None
        if isinstance(scale, cst.Name):
            for i, statement in enumerate(body[:dot_index]):
                load = operand_load(source, plan, i, statement, scale.value) or load
        if load is None or load.descriptor or any(
                scale.value in assigned_names(s) for s in body[load.index + 1:dot_index]) \
                or load.name in {o.name for o in operands + [s for s in scales if s is not None]}:
            load = None
        scales.append(load)
    rings = [load for load in scales if load is not None]
    if extra and (rings or site.scaled is not None or names[0] == names[1]):
        return LoopRefusal(extra[0].call, f"the dot operand is computed from {len(extra) + 1} tiles loaded in the loop "
                           "in a scaled dot, or both its operands from one: a computed operand of such a dot is "
                           "pipelined from one tile")
    if extra and len({load.name for load in [*operands, *extra]}) != len(operands) + len(extra):
        return LoopRefusal(extra[0].call, f"`{extra[0].name}` feeds both operands of the dot, computed")
    return [*operands, *extra, *rings], DotChain(
        dot_index, acc, acc_in_dot, (names[0], names[1]), dot_call, fresh=fresh,
        scales=tuple(load.name if load is not None else "" for load in scales), transposed=(views[0], views[1]),
        chained=chained, scaled_product=scaled, factors=tuple(factors), integer_sum=integer_sum,
        guarded=guard is not None)


def guarded_dot(plan: LayoutPlan, statement: cst.BaseStatement) -> cst.SimpleStatementLine | None:
    """The one statement of `statement`, an `if` of one branch whose test reads no tensor and calls nothing (the loop
    variable, scalars, constexprs: `if i_s >= 0:`), where that statement runs exactly one dot (a guarded
    accumulation, `b_o += tl.dot(b_s, b_v)`; `_dot_chain` then reads its operands as any dot's); else None."""
    if not isinstance(statement, cst.If) or statement.orelse is not None:
        return None
    inner = list(statement.body.body)  # type: ignore[union-attr]
    if len(inner) != 1 or not isinstance(inner[0], cst.SimpleStatementLine) or len(inner[0].body) != 1:
        return None
    if names_in(statement.test) & set(name_terms(plan)) or any(
            isinstance(call, cst.Call) for call in preorder(statement.test)):
        return None
    return inner[0] if sum(call in plan.dots for call in calls_in(inner[0])) == 1 else None


def _fresh_value(value: cst.BaseExpression, dot_call: cst.Call) -> bool:
    """`value` is the dot's product as made: the call itself, or the call cast (`tl.dot(v, tl.trans(do)).to(tl.float32)`,
    a type it has already)."""
    if value is dot_call:
        return True
    return isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.value is dot_call \
        and value.func.attr.value in ("to", "cast")


def _reads_products(source: SourceFile, plan: LayoutPlan, body: list[cst.BaseStatement], dot_index: int,
                    operand: cst.BaseExpression, products: set[str]) -> bool:
    """`operand` of the dot at `dot_index` is computed in the iteration, through plain assignments before the dot (or
    branches of arithmetic: `if MASK: pT = tl.where(mask, pT, 0.0)`), from one of `products` (earlier dots' fresh
    results)."""
    seen: set[tuple[str, int]] = set()
    work = [(name, dot_index) for name in value_names(operand)]  # (a name, as read before statement `index`)
    while work:
        name, upto = work.pop()
        if name in products:
            return True
        if (name, upto) in seen:
            continue
        seen.add((name, upto))
        at = _last_assignment(body, name, upto)
        if at is not None and (isinstance(body[at], cst.SimpleStatementLine)
                               or _arithmetic_branch(source, plan, body[at])):
            work += [(n, at) for n in value_names(body[at])]
    return False


def _last_assignment(body: list[cst.BaseStatement], name: str, before: int) -> int | None:
    """The index of the last statement of `body` before `before` that assigns `name` (None: it is defined before the
    loop, or carried from the previous iteration)."""
    return max((i for i in range(before) if name in assigned_names(body[i])), default=None)


def computed_from(source: SourceFile, plan: LayoutPlan, body: list[cst.BaseStatement], dot_index: int,
                   operand: cst.BaseExpression, several: bool = False
                   ) -> OperandLoad | list[OperandLoad] | LoopRefusal | None:
    """The one tile load of this iteration that the dot operand `operand` is computed from (through the statements
    before the dot), marked `computed`; a refusal where the computation reads several tiles or runs in a compound
    statement; None where it reads none. With `several`, a computation of several tiles of one shape (`x *
    tl.exp(g)`, each element of the operand from the same element of each) gives them all, in the loop's order, each
    marked `computed` with the statements of the computation after it."""
    tiles: dict[int, OperandLoad] = {}
    prep: set[int] = set()
    seen: set[tuple[str, int]] = set()
    compound: tuple[cst.BaseStatement, str] | None = None  # an arithmetic branch the computation reads a name from
    work = [(name, dot_index) for name in value_names(operand)]  # (`b.to(a.dtype)` computes from `b` alone)
    while work:
        name, before = work.pop()
        if (name, before) in seen:
            continue
        seen.add((name, before))
        at = _last_assignment(body, name, before)
        if at is None:
            continue  # defined before the loop, or carried from the previous iteration
        statement = body[at]
        if not isinstance(statement, cst.SimpleStatementLine):
            if not _arithmetic_branch(source, plan, statement):
                return LoopRefusal(statement, f"the dot operand is computed from `{name}`, which this compound "
                                   "statement assigns")
            # (a mask under a constexpr flag, `if MASK: pT = tl.where(mask, pT, 0.0)`: followed through; it stays
            # where it is, so an operand computed from a loaded tile through it is refused below)
            compound = compound or (statement, name)
            work += [(n, at) for n in value_names(statement)]
            continue
        load = operand_load(source, plan, at, statement, name)
        if isinstance(load, OperandLoad) and not load.descriptor:
            value = plan.loads.get(load.call)
            if value is not None and value.rank == 2:
                tiles[at] = load
                continue
        if isinstance(load, OperandLoad) and load.descriptor:
            tiles[at] = load
            continue
        prep.add(at)
        work += [(n, at) for n in value_names(statement)]
    if tiles and compound is not None:
        flags = _compile_time_tests(source, plan, compound[0], compound[0]) \
            if isinstance(compound[0], cst.If) else ""
        line = source.position(compound[0])[0]
        where = f"the `if` at line {line} on `{flags}` assigns, {NOT_COPIED}" if flags else \
            f"the `if` at line {line} assigns (a branch on a run-time value: the computation is pipelined from " \
            "straight-line statements)" if isinstance(compound[0], cst.If) else "this compound statement assigns"
        return LoopRefusal(compound[0], f"the dot operand is computed from `{compound[1]}`, which {where}")
    if len(tiles) > 1:
        ordered = sorted(tiles.values(), key=lambda t: t.index)
        names = ", ".join(f"`{t.name}`" for t in ordered)
        shapes = {tuple(plan.loads[t.call].shape) if t.call in plan.loads else None for t in ordered}
        if not several or len(shapes) != 1 or None in shapes or any(t.descriptor for t in ordered):
            why = ("a computed operand is pipelined from one" if not several else
                   "a computed operand is pipelined from tiles of one shape (each element of the operand from the "
                   "same element of each), here of different shapes or through tensor descriptors")
            return LoopRefusal(operand, f"the dot operand is computed from {len(tiles)} tiles loaded in the loop "
                               f"({names}); {why}")
        for load in ordered:
            load.computed = True
            load.prep = tuple(sorted(i for i in prep if i > load.index))
        return ordered
    if not tiles:
        return None
    load = next(iter(tiles.values()))
    load.computed = True
    load.prep = tuple(sorted(i for i in prep if i > load.index))
    return load


def _arithmetic_branch(source: SourceFile, plan: LayoutPlan, statement: cst.BaseStatement) -> bool:
    """`statement` is an `if` of arithmetic only, which the pipeline stages whole (`branch_refusal`)."""
    return isinstance(statement, cst.If) and branch_refusal(source, plan, statement) is None


def _accumulation(small: cst.BaseSmallStatement | None, dot: cst.Call) -> str | None:
    """`acc` of ``acc += tl.dot(a, b)``, ``acc = acc + tl.dot(a, b)`` or ``acc = tl.dot(a, b) + acc``, else None."""
    added = added_to(small)
    return added[0] if added is not None and added[1] is dot else None


def scaled_accumulation(small: cst.BaseSmallStatement | None, dot: cst.Call) -> str | None:
    """`acc` of ``acc += tl.dot(a, b) * s`` (or ``acc = acc + ...``): the product, cast or not, multiplied by factors
    or divided by a divisor (`a_s[:, None] * b_s[None, :]`) that do not read `acc`; else None."""
    added = added_to(small)
    if added is None:
        return None
    acc, node = added
    if acc in names_in(node):
        return None
    scaled = False
    while node is not dot and not _fresh_value(node, dot):
        if not isinstance(node, cst.BinaryOperation) or not isinstance(node.operator, (cst.Multiply, cst.Divide)):
            return None
        inside = [side for side in (node.left, node.right) if any(n is dot for n in preorder(side))]
        if not inside or (isinstance(node.operator, cst.Divide) and inside[0] is not node.left):
            return None
        node, scaled = inside[0], True
    return acc if scaled else None


def _scaled(small: cst.BaseSmallStatement | None, dot: cst.Call) -> str:
    """Why an accumulation around the dot is not taken: the dot's result scaled (block-scaled 8-bit GEMMs)."""
    added = added_to(small)
    scaled = [n for n in preorder(added[1]) if isinstance(n, cst.BinaryOperation) and isinstance(
        n.operator, (cst.Multiply, cst.Divide))] if added is not None else []
    if any(any(m is dot for m in preorder(n)) for n in scaled):
        return ("the dot's result is scaled before it is accumulated (`acc += tl.dot(a, b) * s`): the pointer rings "
                "take a dot into its accumulator; the sm90 TMA ring takes this form where the tiles can be read "
                "through descriptors (8-bit ones K-major), and it ran lightllm's block-scaled fp8 GEMM at 0.95-1.06x "
                "its source on an H200 with 8 warps, 0.51-0.99x with 4 (bench/RESULTS.md); the AMD warp pipeline "
                "takes it, the scales loaded in the MMA's slice layout (docs/PIPELINES.md)")
    return ""



def operand_anchors(source: SourceFile, facts: ModuleFacts, plans: dict[str, LayoutPlan], default_stages: int
                    ) -> dict[str, list[OperandAnchor | StoreAnchor]]:
    """Per function, the stores of loops whose products are made afresh each iteration (`StoreAnchor`), and the tile
    loads its dot loops compute operands from (`OperandLoad.computed`), with the nodes of
    each computation and the loop-invariant names it reads: what `LayoutAnalysis` lays out in the MMA operand's layout
    for the AMD pipelines. A loop of plain tile loads that shares names with a computed one (its copy for the other
    value of an unswitched flag) would get its tiles converted to those layouts: such a computed loop is left out,
    and the other keeps its layouts."""
    anchors: dict[str, list[OperandAnchor]] = {}
    for fn in facts.functions.values():
        plan = plans[fn.name]
        loops = [(loop.node, plan_loop(source, loop.node, plan, default_stages, transposed_operands=True,
                                       accumulations=True, several_dots=True, computed_operands=True,
                                       fresh_dots=True, scaled_products=True, integer_sums=True,
                                       guarded_dots=True, transposed_computed=True))
                 for loop in dot_loops(facts, fn) if isinstance(loop.node, cst.For)]
        from transpile.analysis.attention import AttentionPlan, as_loop_plan, plan_attention_loop  # (imports this)

        # (a flash-attention loop, which the AMD expander pipelines in order: its K or V computed from a loaded tile)
        loops = [(loop, p) if isinstance(p, LoopPlan) else (loop, attention) for loop, p in loops
                 for attention in [plan_attention_loop(source, loop, plan, default_stages, in_order=True)]]
        loops = [(loop, as_loop_plan(p, plan) if isinstance(p, AttentionPlan) else p) for loop, p in loops]
        planned = [(loop, p) for loop, p in loops if isinstance(p, LoopPlan)]
        plain = set().union(*(bound_names(loop) for loop, p in planned if not any(ld.computed for ld in p.loads)))
        found: list[OperandAnchor | StoreAnchor] = []
        for loop, loop_plan in planned:
            body = loop_body(loop)
            if all(chain.fresh for chain in loop_plan.chains) and not loop_plan.attention:
                # the tiles of products made afresh each iteration, stored in the loop (`StoreAnchor`)
                found += [StoreAnchor(call) for call in _stores(source, body)]
            # (the names of the computed tiles and of their computations: the loaded tile `a`, `a = a.to(T)`; the
            # unswitch pass gives a copy's own computations names of their own, `a_2`)
            computing = {name for load in loop_plan.loads if load.computed
                         for name in (load.name, *(n for i in load.prep for n in assigned_names(body[i])))}
            if computing & plain:
                continue
            in_loop = {name for statement in body for name in assigned_names(statement)}
            for load in loop_plan.loads:
                if not load.computed or load.descriptor or load.computed_as:
                    continue  # (a computed tile read transposed: computed on the slot's transposed view as read)
                chain, position = loop_plan.use_of(load.name)
                site = plan.dots[chain.call]
                parts = [*(body[i] for i in load.prep), site.a if position == 0 else site.b]
                nodes = frozenset(id(n) for part in parts for n in preorder(part))
                invariant = frozenset({name for part in parts for name in names_in(part)} - in_loop)
                found.append(OperandAnchor(load.call, chain.call, position, nodes, invariant))
        # A product made afresh and stored in a loop whose other dots accumulate, or read a tile as both operands
        # (FLA's `b_dv = tl.dot(b_A, b_do)` stored beside `b_dA += tl.dot(b_do, b_v)`): its store too, for the loops
        # the plan above leaves out (the AMD planner takes them with `chained_dots`)
        # (planned again with `chained_dots` only where that can add one: a loop planned above with no fresh dot,
        # or only fresh ones, whose stores are anchored already, or an attention loop, has none to add)
        stored = {id(a.store) for a in found if isinstance(a, StoreAnchor)}
        for loop, loop_plan in loops:
            if isinstance(loop_plan, LoopPlan) and (loop_plan.attention or all(
                    chain.fresh for chain in loop_plan.chains) or not any(chain.fresh for chain in loop_plan.chains)):
                continue
            wide = plan_loop(source, loop, plan, default_stages, transposed_operands=True, accumulations=True,
                             several_dots=True, computed_operands=True, fresh_dots=True, chained_dots=True,
                             scaled_products=True, integer_sums=True, guarded_dots=True, transposed_computed=True)
            if not isinstance(wide, LoopPlan) or wide.attention or wide.chained:
                continue
            fresh = {chain.acc for chain in wide.chains if chain.fresh}
            for call in _stores(source, loop_body(loop)):
                if id(call) not in stored and len(call.args) >= 2 and names_in(call.args[1].value) & fresh:
                    found.append(StoreAnchor(call))
                    stored.add(id(call))
        if found:
            anchors[fn.name] = found
    return anchors


def _stores(source: SourceFile, body: list[cst.BaseStatement]) -> list[cst.Call]:
    """The `tl.store` calls of a loop body."""
    return [call for statement in body for call in calls_in(statement)
            if language_name(source.qualified_name(call.func)) in ("store", "core.store")]


def product_loops(source: SourceFile, facts: ModuleFacts, plans: dict[str, LayoutPlan], default_stages: int
                  ) -> dict[str, list[cst.For]]:
    """Per function, its dot loops whose products meet other values in registers, in the MMA layout: dots that read
    earlier dots' products (`LoopPlan.chained`: attention's backward), products made afresh each iteration
    (`DotChain.fresh`), products scaled before they are added (`DotChain.scaled_product`: block-scaled GEMMs), and
    flash-attention loops (a gate added to the scores, `b_s += b_gq[:, None] - b_gk[None, :]`: FLA's parallel
    attention). A vector loaded in such a loop and broadcast against them (`lse[None, :]`, `a_s[:, None]`) is loaded
    straight in the tile's slice layout, as Triton's own compile loads a vector of fewer elements than the program
    has lanes: a layout of its own (`transpile.passes.vector_loads`) would be converted through shared memory inside
    the `mma` stage."""
    from transpile.analysis.attention import AttentionPlan, plan_attention_loop  # (it imports this module)

    found: dict[str, list[cst.For]] = {}
    for fn in facts.functions.values():
        for loop in dot_loops(facts, fn):
            if not isinstance(loop.node, cst.For):
                continue
            loop_plan = plan_loop(source, loop.node, plans[fn.name], default_stages, transposed_operands=True,
                                  accumulations=True, several_dots=True, computed_operands=True, fresh_dots=True,
                                  chained_dots=True, scaled_products=True, integer_sums=True, guarded_dots=True,
                                  transposed_computed=True)
            if isinstance(loop_plan, LoopPlan) and (loop_plan.chained or any(
                    chain.fresh or chain.scaled_product for chain in loop_plan.chains)) or isinstance(
                    plan_attention_loop(source, loop.node, plans[fn.name], default_stages, in_order=True),
                    AttentionPlan):
                found.setdefault(fn.name, []).append(loop.node)
    return found

