"""Stage plans for AMD warp pipelining: which statements of a main loop run in which stage, with which waits.

`plan_stages(source, fn, loop, plan, target)` combines the loop's pipelining facts (`transpile.analysis.pipeline`:
the dot, the tile loads feeding it, the producer slice) with its dataflow (`transpile.analysis.dataflow`: effects,
loop-carried values, ops that need a CTA-wide barrier) into a `StagePlan`:

- a ring of shared-memory (LDS) slots per operand, ``slots`` deep (at most; the emitted kernel takes fewer where
  they do not fit the target's LDS, 2 at least), filled ``distance = slots`` iterations ahead;
- for a GEMM loop two stages, each a ``with gl.amd.warp_pipeline_stage(label, priority=p)`` block: ``mma``
  (priority 0: the MMA and the rest of the body, on operands read one step ahead) and ``mem`` (priority 1: the next
  iteration's operands from the ring, then the producer slice of iteration ``it + slots`` and its copies into the
  slot iteration ``it`` was read from);
- the wait before each iteration's ``mma`` for asynchronous copy engines: ``slots - 2`` copy groups stay in flight;
- the prologue (``distance`` iterations copied before the loop) and the epilogue (the last iterations, unstaged).

The lowering runs the two stages on two warp groups of 4 warps at once, one stage apart. Iteration ``it`` reads its
operands into registers in the ``mem`` stage of ``it - 1`` and overwrites that slot in its own ``mem`` stage, while
the other group runs an ``mma`` stage, which reads no LDS: no group ever writes a slot the other reads. The wait for
the copies of ``it + 1`` stands at the stage boundary before the ``mma`` of ``it``, ahead of the barrier the lowering
puts there, so both groups' parts of that tile have landed before either reads it. The emitted loop is unrolled by
the ring depth (constant slot indices) and stops early enough that its copies are never past the end.

A loop that cannot be pipelined gets a `StageRefusal` naming the construct and the reason; the rule then keeps the
loop as it is and reports TT040.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from transpile.analysis.dataflow import Effect, LoopDataflow, loop_dataflow
from transpile.analysis.launch_alignment import (address_head, all_definitions, base_moved_along_last_axis, is_load,
                                                 divided_stride,
                                                 first_axis_contiguous, fixed_last_axis_stride, last_axis_reads_memory,
                                                 last_axis_divided, last_axis_selected, moved_unvouched, unvouched_offset,
                                                 pointer_tile_strides, run_time_alignment, tile_base)
from transpile.analysis.layouts import LayoutPlan, name_terms
from transpile.analysis.attention import AttentionPlan, as_loop_plan, plan_attention_loop, tile_reads
from transpile.analysis.pipeline import LoopPlan, LoopRefusal, OperandLoad, local_pointer, loop_bindings, loop_body, plan_loop
from transpile.cst_utils import (INTEGER_ARITHMETIC, bound_names, broadcast_axis, calls_in, conjuncts, names_in,
                                 only_nodes, read_names, single_definitions, unparenthesized)
from transpile.cst_walk import preorder
from transpile.discover import JitFunction, language_name
from transpile.source import SourceFile

# Copy engines of the AMD targets and what they imply for the ring.
ENGINES = {
    "registers": "global loads into registers, stored into the LDS ring",
    "buffer_loads": "16-byte buffer loads (scalar base, 32-bit offsets) into registers, stored into the LDS ring",
    "async_copy": "direct-to-LDS async copies (commit_group / wait_group)",
    "tdm": "TDM tensor copies into the LDS ring (tdm.async_wait)",
}
WAITS = {"registers": None, "buffer_loads": None, "async_copy": "async_copy.wait_group({n})", "tdm": "tdm.async_wait({n})"}
MIN_SLOTS = 3
PIPELINE_WARPS = 8
# Copy engines that lay a pointer tile's copies out on their own (16-byte vectors), whatever the layout the tile is
# read in
POINTER_ENGINES = ("async_copy", "buffer_loads")


@dataclass
class Ring:
    operand: str  # the dot operand's variable, e.g. "a"
    shape: list[str]  # tile shape as source text
    elem_bits: dict[str, int]  # per autotune config / constexpr default: element bits where known ("" = default)

    def slot_elements(self, values: dict[str, object]) -> int | None:
        total = 1
        for dim in self.shape:
            value = values.get(dim, dim)
            try:
                total *= int(value)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                return None
        return total


@dataclass
class Stage:
    label: str
    priority: int
    lines: list[int]  # source lines of the statements the stage runs
    role: str
    # What the stage runs, in order, as the expander writes it (`rules/amd_warp_pipeline.py`, `step`): consume —
    # the loop's computation and its MMAs on this iteration's operands (in registers); operands — the next
    # iteration's operands read from the ring (and the operands computed from them, where computed in `mem`);
    # store_staged — the tiles of a later iteration, loaded a step before, stored into the slot just read (the
    # gfx942 prefetching engine; nothing otherwise); refill — the copies of iteration it + NUM_STAGES into that slot
    ops: tuple[str, ...] = ()


# The ops of the two warp-pipeline stages of every AMD pipelined loop (`Stage.ops`): the MMA stage, then the memory
# stage. Each iteration waits for its copies first (`StagePlan.wait`), then runs the stages in this order.
MMA_OPS = ("consume",)
MEM_OPS = ("operands", "store_staged", "refill")
# Copy engines that load a later iteration's tiles into registers a step before storing them (`store_staged`); the
# register engine does so for tensor-descriptor tiles (`prefetches`), whose 16-byte rows a descriptor vouches for.
# Pointer tiles it stages only where no launch proves them 16-byte rows: loaded an element a lane, a tile held a step
# in registers spilled (fixture GEMMs compiled unaligned, prefetched: 6-1,865 VGPRs spilled on the three targets).
PREFETCHING_ENGINES = ("buffer_loads",)


def prefetches(engine: str, kind: str) -> bool:
    """Whether `engine` loads the tiles of a loop of `kind` tiles ("pointer", "descriptor", "mixed") into registers a
    step before storing them into their slot."""
    return engine in PREFETCHING_ENGINES or (engine == "registers" and kind == "descriptor")


def mem_ops(engine: str, kind: str = "pointer") -> tuple[str, ...]:
    """MEM_OPS as `engine` runs them: `store_staged` only where it prefetches."""
    return MEM_OPS if prefetches(engine, kind) else tuple(op for op in MEM_OPS if op != "store_staged")


@dataclass
class StagePlan:
    line: int
    loop: LoopPlan = field(repr=False)
    dataflow: LoopDataflow = field(repr=False)
    engine: str
    slots: int
    distance: int
    stages: list[Stage]
    wait: str | None  # the wait before each iteration's stages (GEMM: before `mma`), or None
    rings: list[Ring]
    lds_limit: int
    configs: list[dict[str, object]]  # the constexpr values the ring size is evaluated for (autotune configs)
    # (M, N, K) of each dot of the loop as source text (None where not known): an iteration's matrix work
    dot_shapes: list[tuple[str | None, str | None, str | None]] = field(default_factory=list)
    # Why the pointer tiles' copies go through registers, naming the first tile no launch can copy 16 bytes a lane
    # ("" where they do not, or for another reason: the target has no direct-to-LDS copy)
    staged: str = ""
    # The warp groups that run the stages: 2, one stage apart (the warp pipeline: `warp_pipeline_stage` blocks, 8
    # warps); 1 where an op of the loop body needs a CTA-wide barrier that would fall inside a stage (`barrier_op`
    # says which, with its line): every wave then runs the whole step in order, at the kernel's own warps, the ring
    # and its copies as before, one CTA barrier after each step's wait.
    groups: int = 2
    barrier_op: str = ""
    # Every warp along M in the MMA layout (a GEMM loop whose row reductions, `tl.sum(x, axis=1)` of its accumulator
    # or of its A tiles, then stay inside a warp: no barrier in the `mma` stage); launches with fewer rows than 16 a
    # warp run the source kernel
    row_reduction: str = ""  # the first such reduction, with its line ("" where none)
    # Whether one of the ops `barrier_op` names is a layout conversion or a transpose (else they are reductions): the
    # profitability policy tells the two apart (UNPROFITABLE_RINGS)
    barrier_converts: bool = False
    # Tiles read in the `mma` stage of their own iteration, right before the first dot that reads them, instead of in
    # the `mem` stage a step ahead (`late_reads`: attention's V on gfx1250, whose 32-lane waves would otherwise hold
    # the next iteration's K and V, each warp the whole tile, across the stage boundary). The refill then writes the
    # slot read a step earlier, `distance = slots - 1` iterations ahead, and 3 slots are the fewest.
    late: tuple[str, ...] = ()
    # Pointer tiles whose base the kernel loads (a grouped GEMM's per-problem pointers), by tile name: (the base, the
    # integers that must be multiples of 16 bytes of its elements: `run_time_alignment`). The pipelined loop runs where
    # a test before it finds them so, its copies 16 bytes a lane; elsewhere the loop runs as translated.
    aligned_at_run_time: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    # The loop's bounds are computed from a 64-bit integer (`LoopRange.wide`): its variable is 64-bit
    wide: bool = False
    # Pointer tiles a dot operand is computed from, in a ring copied through registers (`engine == "registers"`: a
    # tile of the loop no launch copies 16 bytes a lane), by tile name: the axis along which the tile is contiguous
    # in memory (0: read transposed, `base + offs_k[:, None] + offs_n[None, :] * stride`). Their translation loads
    # them in the MMA operand's layout (the computation runs there); the ring loads them instead in a copy layout
    # along that axis (`_copy_layout`, `_transposed_copy_layout` for axis 0: lanes along the contiguous axis, so
    # that the loads are coalesced) and stores them into the slot.
    register_copies: dict[str, int] = field(default_factory=dict)

    @property
    def warps_along_m(self) -> bool:
        return bool(self.row_reduction)

    @property
    def prologue(self) -> str:
        return f"{self.distance} iteration(s) prefetched into slots 0..{self.distance - 1}"

    @property
    def epilogue(self) -> str:
        return ("the steady state stops NUM_STAGES to 2 * NUM_STAGES - 1 iterations before the end (its copies are "
                "never past it); those last iterations run unstaged, their copies past the end masked off")

    def ring_bytes(self, values: dict[str, object], elem_bits: int = 16) -> int | None:
        """LDS bytes of all the rings for one set of constexpr values, `elem_bits`-bit elements."""
        total = 0
        for ring in self.rings:
            elements = ring.slot_elements(values)
            if elements is None:
                return None
            total += self.slots * elements * elem_bits // 8
        return total


@dataclass
class StageRefusal:
    node: cst.CSTNode
    reason: str


def plan_stages(source: SourceFile, fn: JitFunction, loop: cst.For, plan: LayoutPlan, engine: str,
                lds_limit: int, pointer_engine: str | None = None, late_reads: bool = False
                ) -> StagePlan | StageRefusal | None:
    """The stage plan of `loop` for an AMD copy engine, a refusal, or None when the loop has no dot fed by loads.
    `pointer_engine`: "async_copy" where the target copies pointer tiles direct to LDS with another engine than its
    descriptor tiles' (gfx1250). `late_reads`: an attention loop's tiles that only its second dot reads (V) are read
    in the `mma` stage, just before that dot (`StagePlan.late`)."""
    requested = fn.num_stages
    loop_plan = plan_loop(source, loop, plan, requested or MIN_SLOTS, transposed_operands=True, accumulations=True,
                          several_dots=True, computed_operands=True, scale_rings=True, fresh_dots=True,
                          chained_dots=True, scaled_products=True, advances_after=True,
                          integer_sums=True, guarded_dots=True, transposed_computed=True)
    if loop_plan is None:
        return None
    if isinstance(loop_plan, LoopRefusal) or loop_plan.chained:
        # (the flash-attention loop is also a loop of chained dots: its planner, which takes the online softmax's
        # row reductions, comes first)
        attention = plan_attention_loop(source, loop, plan, requested or MIN_SLOTS, in_order=True)
        if isinstance(attention, AttentionPlan):
            loop_plan = as_loop_plan(attention, plan)
        elif isinstance(loop_plan, LoopRefusal):
            if isinstance(attention, LoopRefusal):
                return StageRefusal(attention.node, attention.reason)
            return _refusal(source, loop, plan, loop_plan)
    # The target's copy engine moves tensor-descriptor tiles. Pointer tiles go by direct-to-LDS copies too (gfx950):
    # those need wide vectors (a unit inner stride, 16-byte aligned rows) that the compiler proves for pointer
    # arithmetic only when the launch specialised the strides, so the variant's launcher runs the Gluon kernel on
    # aligned launches only (`RuleContext.launch_checked`). TDM copies need a descriptor: pointer tiles are staged
    # through registers there, unless the target has a direct-to-LDS copy of its own for them (gfx1250's
    # `async_copy.global_to_shared`: a loop of pointer tiles only).
    if loop_plan.kind != "descriptor" and engine != "async_copy":
        engine = "async_copy" if pointer_engine == "async_copy" and loop_plan.kind == "pointer" else "registers"
    # (a trip count computed from a 64-bit integer: the pipelined loop counts in 32 bits, `LoopRange.wide`)
    wide = _wide_trip_count(source, fn, loop) is not None
    params = {p.name for p in fn.params if not p.is_constexpr}
    # The strides of the pointer tiles' other axes (rows): a tile whose last axis is scaled by one of them (Q read
    # transposed, `offs_m[None, :] * stride_tok`, beside dO's rows `offs_m[:, None] * stride_tok`) needs a launch with
    # that stride 1, which no launch of real tensors gives (the launcher would never run the Gluon kernel).
    # (each tile's address as the loop makes it: `local_pointer`; the names it reads, as the loop binds them)
    pointers = {load.name: local_pointer(loop_plan, load) for load in loop_plan.loads}
    definitions = {**single_definitions(fn.node), **{name: value for name, (_, value) in loop_bindings(loop).items()}}
    strides = {load.name: pointer_tile_strides(fn, [pointers[load.name]], [])
               for load in loop_plan.loads if load.kind == "pointer" and load.pointer is not None}
    rows = {name for _, other in strides.values() for name in other}

    run_time: dict[str, tuple[str, tuple[str, ...]]] = {}

    def not_16_bytes(load: OperandLoad) -> str:
        """Why no launch can vouch for the pointer tile `load` as rows of 16-byte vectors ("" where one can): it must
        be addressed from a pointer parameter (or from a base the kernel loads, tested in the kernel before the
        loop: `run_time_alignment`, recorded in `run_time`), along its contiguous axis from no loaded offset,
        contiguous along its last axis (a column-major tile's vectors would run down the columns, and a last axis
        scaled by another tile's row stride is never unit), its rows not a run-time integer divided apart."""
        at = f"the tile `{load.name}` at line {source.position(load.call)[0]}"
        pointer = pointers[load.name]
        traced = tile_base(fn, pointer, params) if pointer is not None else None
        if traced is not None and address_head(fn, pointer) not in (traced, None):  # type: ignore[arg-type]
            traced = None  # (an argument added to a base the kernel loads, `a_ptr + ... + k_off`, is no base)
        untested = ""  # (why the tile's base is neither the launch's nor tested: after the checks that name more)
        moved = traced is not None and pointer is not None and (
            moved_unvouched(fn, traced) or unvouched_offset(fn, pointer, traced))
        if pointer is None or traced is None or moved:
            # (a base the kernel loads, or a parameter it moves by a loaded or computed offset: tested at run time,
            # before the loop, with what its rows and bounds read)
            found = run_time_alignment(fn, load.pointer, load.mask, loop) if load.pointer is not None else None
            if found is None and not moved:
                return (f"{at} is addressed from a pointer not traced to one pointer parameter (one the kernel loads, "
                        "or a name assigned more than once before the loop) and not tested before the loop (a base "
                        "first in its address, rows scaled by names the loop does not change)")
            if found is None:
                untested = (f"{at} is addressed from `{traced}` moved by an offset no launch vouches for (loaded, "
                            "computed, or scaled by a constexpr) and not tested before the loop (a base first in its "
                            "address, rows scaled by names the loop does not change, none assigned after the tile "
                            "is made)")
            else:
                run_time[load.name] = found
        if last_axis_reads_memory(fn, pointer):
            return f"{at} is addressed along its contiguous axis from loaded offsets"
        selected = last_axis_selected(fn, pointer)
        if selected:
            return (f"{at} is addressed along its contiguous axis by `{selected}`, which a `where` makes with no "
                    f"`tl.max_contiguous` hint after it: the compiler cannot prove its columns contiguous")
        if first_axis_contiguous(fn, pointer):
            return f"{at} is contiguous along its first axis (a tile read transposed from memory)"
        moved = base_moved_along_last_axis(fn, pointer)
        if moved:
            return (f"{at} is addressed from a pointer moved along the tile's last axis by a strided vector "
                    f"(`{moved}`): its columns are not contiguous")
        fixed = fixed_last_axis_stride(fn, pointer)
        if fixed:
            return (f"{at} has its last axis strided by `{fixed}`, known when the kernel is compiled and not 1 (a tile "
                    "read transposed from memory)")
        if divided_stride(fn, pointer):
            return f"{at} has rows a run-time integer divides apart"
        repeated = last_axis_divided(pointer, definitions) if pointer is not None else ""
        if repeated:
            return (f"{at} is indexed along its contiguous axis through a floor division (`{repeated}`): neighbouring "
                    "columns share addresses (a scale per group of K), no run of 16 bytes")
        crossed = sorted(set(strides[load.name][0]) & rows)
        if crossed:
            return (f"{at} has its last axis strided by `{crossed[0]}`, a row stride of the loop's tiles (a tile read "
                    "transposed from memory: no launch has that stride 1)")
        for term in conjuncts(load.mask) if load.mask is not None else []:
            # (`cols[None, :] <= rows[:, None]`, a causal mask inside a chunk: it changes value inside a row, where no
            # bound of the tile proves it true, and a 16-byte copy takes one mask value for its whole vector)
            if {0, 1} <= {broadcast_axis(n) for n in preorder(term) if isinstance(n, cst.Subscript)}:
                return (f"{at} is masked by `{' '.join(source.code(term).split())}`, which compares its columns with "
                        "its rows: a 16-byte copy takes one mask value for its whole vector")
        return untested

    def copies_16_bytes(load: OperandLoad) -> bool:
        return not not_16_bytes(load)

    staged = ""  # why the copies go through registers, naming the tile
    if engine == "async_copy" and any(load.kind == "pointer" and not copies_16_bytes(load)
                                      for load in loop_plan.loads):
        engine = "registers"
        staged = next(not_16_bytes(load) for load in loop_plan.loads
                      if load.kind == "pointer" and not copies_16_bytes(load))
    elif engine == "registers" and loop_plan.kind != "descriptor" and all(
            load.kind == "pointer" and copies_16_bytes(load) for load in loop_plan.loads):
        # Pointer tiles from pointer parameters, on a target without a direct-to-LDS copy of 16 bytes a lane
        # (gfx942; gfx1250 where a loop mixes pointer and descriptor tiles): 16-byte buffer loads into registers, as
        # Triton's own AMD backend does, under the same launch checks as the direct-to-LDS copies.
        engine = "buffer_loads"
    # `tl.dot_scaled`'s scale tiles are copied direct to LDS beside the operands (rings of their own, as the engine
    # checks above took them) and read in the layout the scaled MMA reads them in. Loaded in the `mma` stage instead
    # and converted there, they made the hot loop 2.7-3.1x heavier than Triton's own (aiter's fp8 GEMM,
    # bench/RESULTS.md): such a loop is not pipelined.
    for chain in loop_plan.chains:
        site = plan.dots[chain.call]
        if site.scaled is None:
            continue
        scales = [(scale, name) for scale, name in zip((site.scaled[0], site.scaled[2]), chain.scales)
                  if scale is not None and not (isinstance(scale, cst.Name) and scale.value == "None")]
        loads = {load.name: load for load in loop_plan.loads}
        stuck = next((load.name for load in loop_plan.loads if load.kind == "pointer" and not copies_16_bytes(load)),
                     None) if engine != "async_copy" else None
        # (a scale's mask that varies along K, `rs[None, :] < ...`, makes a copy of a byte a lane, which no
        # direct-to-LDS copy takes)
        stuck = stuck or next((name for _, name in scales if name and loads[name].mask is not None and any(
            isinstance(node, cst.Subscript) and broadcast_axis(node) == 1 for node in preorder(loads[name].mask))),
            None)
        why = ""
        if stuck:
            why = (f"the tile `{stuck}` cannot be copied direct to LDS 16 bytes a lane (a launch proves that of a tile "
                   "addressed from a pointer parameter by addresses bound once, contiguous along its last axis, its "
                   "rows not a run-time integer divided apart, `K // 2`, and a scale unmasked along K)")
        elif engine != "async_copy" or loop_plan.attention:
            why = "the loop's tiles are not copied direct to LDS"
        elif any(not isinstance(scale, cst.Name) for scale, _ in scales):
            why = "a scale is an expression, not a tile loaded in the loop"
        elif any(not name for _, name in scales):
            why = (f"the scale `{next(s.value for s, n in scales if not n)}` is not a tile loaded in the loop into a "
                   "name the dot alone reads")
        if why:
            return StageRefusal(chain.call, f"the scales of this `tl.dot_scaled` would be loaded in the `mma` stage and "
                                f"converted to the scaled MFMA's layout there ({why}): that form measured 2.7-3.1x "
                                "Triton's own non-MFMA instructions per MFMA (bench/RESULTS.md)")
    if loop_plan.attention and not loop_plan.loads[0].transposed:
        # K read as [HEAD_DIM, BLOCK_N] (`tl.dot(q, k)`): its keys run along the tile's last axis, which copies of 16
        # bytes a lane need contiguous; in memory each key is a row of its own (the head dimension is contiguous)
        engine = "registers"
    flow = loop_dataflow(source, loop, plan)
    body = flow.statements
    barrier_op = ""  # the first op that needs a CTA-wide barrier inside the `mma` stage ("" where none)
    converts = False  # one of them is a layout conversion or a transpose
    # Barrier-needing ops may only start a stage; in a GEMM loop the consumer after the dot is one stage, so any such
    # op there would sit inside `mma` next to the MMA. An attention loop's MMA layout puts every warp along the rows
    # (M): its row reductions are lane shuffles inside a warp, and the probabilities reach the second dot's operand
    # layout in registers. A conversion of `<loop variable> + offsets` (`start_n * BLOCK_N + offs_n`) is made once, of
    # the offsets, before the loop.
    scalars = scalar_names(plan, fn)
    row_reduction = ""  # the first row reduction every warp along M keeps inside a warp
    row_scalars = set(scalars) | {p.name for p in fn.params}
    rows = _row_family(source, loop_plan, body, row_scalars) if not (loop_plan.attention or loop_plan.chained) else set()
    # (and the B tiles' K axis, which each warp holds whole: `tl.sum(b_h * b_dh, axis=0)` of two B tiles, FLA's gate
    # gradients, reduces inside each warp)
    k_columns = _row_family(source, loop_plan, body, row_scalars, position=1) \
        if not (loop_plan.attention or loop_plan.chained) else set()
    # (... with values the loop does not bind, a gate's vector loaded before it, `exp(b_gn)`: laid out as the tiles
    # they meet, converted once before the loop where they need it)
    invariant = row_scalars | (bound_names(fn.node) - set().union(*(f.defines for f in body))
                               - ({loop.target.value} if isinstance(loop.target, cst.Name) else set()))
    skipped = {*loop_plan.producer, *(load.index for load in loop_plan.loads),
               *(chain.index for chain in loop_plan.chains)}
    for facts in body:
        for node, what in facts.barriers:
            if what == "layout conversion" and (hoistable_convert(node, loop, flow, fn, scalars) is not None or (
                    isinstance(facts.node, cst.SimpleStatementLine) and invariant_convert(source, node, loop, flow,
                                                                                  plan.elementwise_imports))):
                continue  # (a conversion in a branch is made where the branch runs: not hoisted)
            if (loop_plan.attention or loop_plan.chained) and what.startswith("reduction") \
                    and (_reduction(source, node) or (None, None))[1] == 1:
                # a row reduction: warp-local with all warps along M (chained dots, attention's backward, lay their
                # MMAs out so: `b_dg += tl.sum(b_ds, 1)` beside `b_dq += tl.dot(b_ds, tl.trans(b_k))`)
                continue
            if not loop_plan.attention and not loop_plan.chained and what.startswith("reduction") \
                    and _row_reduction_of(source, node, rows, row_scalars):
                # (a row reduction of the accumulator or of an A tile: warp-local so)
                row_reduction = row_reduction or f"{what} at line {facts.line}"
                continue
            if not loop_plan.attention and not loop_plan.chained and what.startswith("reduction") \
                    and _row_reduction_of(source, node, k_columns, invariant, axis=0, helpers=plan.elementwise_imports):
                continue  # (along the K axis of B tiles: inside each warp, whatever the warps)
            if facts.index in skipped:
                continue
            if what == "layout conversion":  # (of what, where: the analysis inserted it, the source shows none)
                what = f"a layout conversion of `{' '.join(source.code(node).split())}` at line {facts.line}"
            # (an op whose CTA-wide barrier would fall inside the `mma` stage, which the other warp group runs a
            # stage apart: the loop is pipelined on one warp group, every wave running each step in order)
            converts = converts or not what.startswith("reduction")
            if "at line" not in what:
                what = f"{what} at line {facts.line}"
            barrier_op = barrier_op or (f"{what} inside the attention loop" if loop_plan.attention
                                        else f"{what} in the loop body")
        if facts.nested_loop and loop_plan.attention:
            return StageRefusal(facts.node, "a loop inside the main loop")
        # A store (a tile of the output made afresh each iteration, `x = tl.dot(a, b)`; a recurrent state stored
        # every few iterations, `if i_t % NTS == 0: tl.store(p_h, b_h)`) runs in the `mma` stage, in the iteration's
        # order, while the copies of later iterations are already issued: as Triton's own pipeliner orders them
        # (neither proves that a store does not write what a later load reads; a loop that says so asks for
        # `num_stages=1`, below). Atomics, and stores in an attention loop, stay refused.
        if Effect.ATOMIC in facts.effects or (Effect.GLOBAL_STORE in facts.effects and loop_plan.attention):
            return StageRefusal(facts.node, "a store or atomic inside the main loop (the stages would reorder it "
                                "against the prefetched loads)")
        if Effect.GLOBAL_STORE in facts.effects and _no_prefetch(source, loop, fn):
            # (a recurrence through memory: iteration i + 1 loads what iteration i stores, which the kernel says by
            # asking Triton not to pipeline the loop)
            return StageRefusal(facts.node, "a store inside a loop that asks for `num_stages=1`: its loads are not to "
                                "be prefetched ahead of its stores (a later iteration may read what this one stores)")
    register_copies: dict[str, int] = {}  # (`StagePlan.register_copies`)
    for load in loop_plan.loads:
        if not load.computed:
            continue
        if load.computed_as and load.twice:
            # (a computed tile fed both ways: its computation runs on each form, in the MMA operand's layouts, where
            # every warp holds a B tile whole; a cast folds into the reads, arithmetic is run 2 x 8 times over)
            arithmetic = arithmetic_step(loop_body(loop_plan.loop), load.prep)  # type: ignore[union-attr]
            if arithmetic is not None:
                return StageRefusal(arithmetic, f"`{load.computed_as}`, computed from the tile `{load.name}` by "
                                    f"arithmetic (line {source.position(arithmetic)[0]}), feeds two dots, one "
                                    "transposed: each form would run that computation in the MMA operand's layout, "
                                    "every warp on the whole tile, and that form measured 0.92-1.80x Triton's own "
                                    "non-MFMA instructions per loop iteration on gfx950, with more spills (FLA's "
                                    "compression dK/dV, Q scaled, 128 keys x 16-32 query heads, 8 warps; "
                                    "bench/RESULTS.md), where a cast alone measured 0.48-0.73x")
        if load.computed_as:
            # (read transposed from its slot in the MMA operand's layout: its computation runs on that view, which
            # only an elementwise computation with scalars allows)
            why = not_elementwise(source, loop_body(loop_plan.loop), load.name, load.prep,  # type: ignore[union-attr]
                                  plan, fn)
            if why:
                return StageRefusal(load.call, f"the dot reads `{load.computed_as}` transposed, computed from the tile "
                                    f"`{load.name}`, and {why}: only an elementwise computation with scalars is run "
                                    "on the slot's transposed view")
            continue
        chain, position = loop_plan.use_of(load.name)
        value = plan.loads.get(load.call)
        operand = value.term.find().operand if value is not None else None
        if load.descriptor or value is None:
            return StageRefusal(load.call, f"the dot reads a tile computed from `{load.name}`, a tensor descriptor's "
                                "tile: only computed pointer tiles are pipelined")
        if engine == "registers" and not loop_plan.attention and load.kind == "pointer" \
                and load.pointer is not None and pointers[load.name] is not None:
            register_copies[load.name] = 0 if first_axis_contiguous(fn, pointers[load.name]) else 1
        elif engine not in POINTER_ENGINES:
            why = staged or (f"`{load.name}` is a tile read transposed (K as [HEAD_DIM, BLOCK_N])" if
                             loop_plan.attention else "no launch proves its rows aligned for 16-byte copies")
            return StageRefusal(load.call, f"the dot reads a tile computed from `{load.name}`, whose copies would go "
                                f"through registers in the MMA operand's layout ({why})")
        if operand is None or operand[0] != position or operand[3] is None \
                or operand[3].find() is not plan.dots[chain.call].result.find():
            return StageRefusal(load.call, f"the dot reads a tile computed from `{load.name}`, and that computation "
                                "is not laid out in the MMA operand's layout (a reshape, a transpose or another dot "
                                "between them, or names it shares with a loop of plain tile loads, an unswitched "
                                "copy of it): it would convert layouts inside the MMA stage")
    if engine == "tdm" and len(loop_plan.loads) > 2:
        return StageRefusal(loop_plan.loop, "several dots with tiles of their own: the fused TDM copy moves two tiles "
                            "(one per half of the warps)")
    rings: list[Ring] = []
    for load in loop_plan.loads:
        chain, position = loop_plan.use_of(load.name)
        shape = plan.dots[chain.call].operand_shape(position)
        if load.computed and not load.computed_as:  # (the tile as loaded; a transposed one's ring holds it so below)
            shape = plan.loads[load.call].shape
        if not shape or any(dim is None for dim in shape):
            return StageRefusal(load.call, f"the shape of the `{load.name}` tile is not known from the source "
                                "(the LDS ring needs its block shape)")
        dims = [dim for dim in shape if dim is not None]
        # (a transposed operand, `tl.trans(w)`: the ring holds the tile as loaded, [N, K])
        rings.append(Ring(load.name, dims[::-1] if load.transposed else dims, {}))
    slots = max(MIN_SLOTS, loop_plan.num_stages)
    distance = slots  # the copies of iteration it + NUM_STAGES go into the slot iteration it was read from
    late: tuple[str, ...] = ()
    if late_reads and loop_plan.attention and not barrier_op and engine == "async_copy":  # (no prefetching engine)
        # (V: a tile no dot before the second reads, read as loaded; the other warp group, a stage behind, reads it
        # in its `mma` stage while this one refills: the refill goes into the slot read a step earlier, one slot more)
        late = tuple(load.name for load in loop_plan.loads if not load.computed and not load.twice and not load.sides
                     and loop_plan.chains.index(loop_plan.use_of(load.name)[0]) > 0)
        if late:
            slots += 1
            distance = slots - 1
    wait = WAITS[engine]
    if wait is not None:  # one commit group (async_copy) or one fused TDM operation (tdm) per iteration
        wait = wait.format(n=distance - 2)
    producer_lines = [body[i].line for i in loop_plan.producer]
    load_lines = [body[load.index].line for load in loop_plan.loads]
    consumer_lines = [f.line for f in body if f.index not in loop_plan.producer
                      and f.index not in {load.index for load in loop_plan.loads}]
    copies = {"registers": "16-byte loads into registers, stored into the slot just read a step later"
              if prefetches(engine, loop_plan.kind) else "global loads into registers, stored into the slot just read",
              "buffer_loads": "16-byte buffer loads into registers, stored into the slot just read",
              "async_copy": "direct-to-LDS copies into the slot just read, one commit group",
              "tdm": "one fused TDM copy into the slot just read (warps 0-3: A, warps 4-7: B)"}[engine]
    refill_note = ""
    if late:
        copies = copies.replace("the slot just read", "the slot read a step earlier")
        refill_note = f" (not {', '.join(f'`{n}`' for n in late)}, which `mma` reads)"
    twice = [load.name for load in loop_plan.loads if load.twice]
    mma = ("S = Q K^T, the online softmax (row reductions inside each warp: every warp owns rows of its own) and "
           "acc += P V on this iteration's K and V, " + (
               f"K read from its ring one step ahead, {' and '.join(f'`{n}`' for n in late)} from its own slot right "
               "before the dot that reads it" if late else "read from the rings one step ahead")
           if loop_plan.attention else
           f"the {len(loop_plan.chains)} dots in order, each product reaching the dot that reads it in registers "
           "(every warp owns rows of its own), on this iteration's tiles read from the rings one step ahead"
           + (f" ({', '.join(f'`{n}`' for n in twice)} read both as loaded and transposed)" if twice else "")
           if loop_plan.chained else
           "the MMA (and the rest of the body) on this iteration's operands, read from the ring one step ahead") + "".join(
        f" (`{load.name}` read as the A operand of one dot and the B operand of another)"
        for load in loop_plan.loads if load.sides)
    stages = [
        Stage("mma", 0, sorted(consumer_lines), mma, MMA_OPS),
        Stage("mem", 1, sorted(producer_lines + load_lines),
              f"the next iteration's operands from the ring{refill_note}; addresses and masks of iteration it + "
              f"{distance}, {copies}", mem_ops(engine, loop_plan.kind)),
    ]
    configs = [dict(c.values) for c in fn.autotune_configs] or [{}]
    shapes = []
    for chain in loop_plan.chains:
        site = plan.dots[chain.call]
        m, n = (list(site.shape) + [None, None])[:2]
        k = site.a_shape[-1] if site.a_shape else None
        if site.scaled is not None:  # (K in values: 32 a scale; an fp4 tile packs two a byte)
            scale = site.scale_shapes[0] or site.scale_shapes[1]
            k = f"({scale[-1]}) * 32" if scale and scale[-1] is not None else None
        shapes.append((m, n, k))
    if engine == "registers" and not staged:
        staged = next((not_16_bytes(load) for load in loop_plan.loads if load.kind == "pointer"
                       and not copies_16_bytes(load)), "") or next((
            f"the tile `{load.name}` at line {source.position(load.call)[0]} is read through a tensor descriptor, "
            "which this target copies through registers (it has no TDM)" for load in loop_plan.loads
            if load.kind == "descriptor"), "")
    if barrier_op and engine == "tdm":
        # (the fused TDM copy moves one tile per half of the 8 warps of the two warp groups)
        return StageRefusal(loop_plan.loop, f"{barrier_op} needs a CTA-wide barrier, which would fall inside the "
                            "`mma` stage of the warp pipeline (two warp groups one stage apart), and the TDM ring "
                            "runs only as that pipeline (its fused copy moves one tile per group)")
    aligned = {name: found for name, found in run_time.items() if engine in ("async_copy", "buffer_loads")}
    return StagePlan(source.position(loop)[0], loop_plan, flow, engine, slots, distance, stages, wait, rings,
                     lds_limit, configs, shapes, staged, 1 if barrier_op else 2, barrier_op,
                     "" if barrier_op else row_reduction, converts, late, aligned, wide, register_copies)


def _refusal(source: SourceFile, loop: cst.For, plan: LayoutPlan, refusal: LoopRefusal) -> StageRefusal:
    """The loop plan's refusal, with the barrier-needing ops named when they are what stands in the way."""
    flow = loop_dataflow(source, loop, plan)
    dots = [f for f in flow.statements if Effect.SHARED in f.effects]
    if len(dots) > 1:
        between = [(f.line, what) for f in flow.statements if dots[0].index < f.index < dots[-1].index
                   for _, what in f.barriers]
        if between:
            listed = ", ".join(f"{what} at line {line}" for line, what in between)
            return StageRefusal(refusal.node, f"{len(dots)} dots with cross-warp ops between them ({listed}): with the "
                                "two warp groups one stage apart, their barriers and LDS scratch would be shared by two "
                                "stages running at once; only dots that read earlier dots' products of the iteration as "
                                "their A operands (attention, its backward: row reductions, rows kept in their warps) "
                                f"keep them inside a warp, and this loop is not one ({refusal.reason})")
    return StageRefusal(refusal.node, refusal.reason)


def _no_prefetch(source: SourceFile, loop: cst.For, fn: JitFunction) -> bool:
    """The loop may be asked for no software pipelining: `tl.range(..., num_stages=1)` (or 0; keyword or fourth
    argument; a name: the launch may give 1), or, where the loop names none, an autotune config or a launch of the
    kernel with `num_stages` 1 (or a value the source does not spell as a number)."""

    def low(value: cst.BaseExpression) -> bool:
        text = source.code(value).strip()
        return not text.isdigit() or int(text) <= 1

    if isinstance(loop.iter, cst.Call):
        positional = [a for a in loop.iter.args if a.keyword is None]
        for arg in loop.iter.args:
            if arg.keyword is not None and arg.keyword.value == "num_stages":
                return low(arg.value)
        if len(positional) >= 4:
            return low(positional[3].value)
    if any(c.num_stages is not None and c.num_stages <= 1 for c in fn.autotune_configs):
        return True
    for call in calls_in(source.module):
        func = call.func
        if isinstance(func, cst.Subscript) and isinstance(func.value, cst.Name) and func.value.value == fn.name:
            if any(a.keyword is not None and a.keyword.value == "num_stages" and low(a.value) for a in call.args):
                return True
    return False


def _row_family(source: SourceFile, loop_plan: LoopPlan, body: list, scalars: set[str], position: int = 0
                ) -> set[str]:
    """Names whose rows lie where the accumulators' do: the accumulators, the A tiles of the dots (read as loaded,
    not transposed), and the names the loop computes from them elementwise with scalars (`xf = x.to(tl.float32)`).
    With every warp along M in the MMA layout, each warp holds whole rows of all of them. `position` 1: the B tiles
    instead (no accumulator), whose columns (K, axis 0) each warp holds whole in the B operand's layout, whatever the
    warps (they split N, or hold copies of the tile)."""
    family = {chain.acc for chain in loop_plan.chains} if position == 0 else set()
    family |= {chain.operands[position] for chain in loop_plan.chains if not chain.transposed[position]}
    loads = {load.name: load for load in loop_plan.loads}
    # (the tiles computed on: in their operand's layout, `OperandLoad.computed`)
    family |= {load.name for load in loop_plan.loads if loop_plan.use_of(load.name)[1] == position}
    family = {name for name in family if name not in loads or not loads[name].transposed}
    own = {chain.index for chain in loop_plan.chains} | {load.index for load in loop_plan.loads}
    for facts in body:
        if facts.index in own:
            continue  # (the dots and the tile loads bind the names above)
        statement = facts.node
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
            else None
        targets = ([t.target for t in small.targets] if isinstance(small, cst.Assign) else
                   [small.target] if isinstance(small, cst.AugAssign) else [])
        if len(targets) == 1 and isinstance(targets[0], cst.Name) and small.value is not None:
            reads = _variables(source, small.value)
            if reads & family and reads - family <= scalars and not any(
                    isinstance(n, (cst.Subscript, cst.Call)) and not _elementwise(n) for n in preorder(small.value)):
                family.add(targets[0].value)
                continue
        if not isinstance(statement, cst.SimpleStatementLine) or any(
                isinstance(n, cst.Call) and _call_name(source, n) in _REARRANGING for n in preorder(statement)):
            family -= facts.defines  # (rebound by a reshape, a transpose, in a branch: its rows may lie elsewhere)
    return family


#: Calls that move a tile's elements to other rows or columns
_REARRANGING = frozenset({"trans", "permute", "reshape", "view", "join", "split", "interleave", "expand_dims",
                          "broadcast_to", "cat", "flip", "gather", "T"})


def _call_name(source: SourceFile, call: cst.Call) -> str | None:
    """The language function or tensor method `call` makes (`tl.trans(x)`, `x.reshape(...)`), by its last name."""
    name = language_name(source.qualified_name(call.func))
    if name is None and isinstance(call.func, cst.Attribute):
        name = call.func.attr.value
    return name.split(".")[-1] if name else None


def not_elementwise(source: SourceFile, body: list[cst.BaseStatement], tile: str, prep: tuple[int, ...],
                    plan: LayoutPlan, fn: JitFunction) -> str:
    """Why the computation `prep` (statement indices in the loop `body`) of a tile computed from the loaded `tile`
    is not elementwise with scalars (assignments of one name, `.to` casts, arithmetic and comparisons, conditional
    expressions, language functions of one element, the tile's `.dtype`), or "" where it is: a computation that runs
    the same on the tile's transpose."""
    scalars = set(scalar_names(plan, fn)) | {p.name for p in fn.params if p.name not in name_terms(plan)}
    tiles = {tile}
    for i in prep:
        statement = body[i]
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
            else None
        if not (isinstance(small, cst.Assign) and len(small.targets) == 1
                and isinstance(small.targets[0].target, cst.Name)):
            return f"line {source.position(statement)[0]} is not an assignment of one name"
        for node in preorder(small.value):
            if isinstance(node, cst.Subscript) or (isinstance(node, cst.Call) and not _elementwise(node)
                                                   and not _dtype_test(node)):
                return f"`{source.code(node).strip()}` at line {source.position(node)[0]} is not elementwise"
        reads = tile_reads(small.value) & _variables(source, small.value)  # (`k_0.dtype` is no read of the tile)
        others = reads - tiles - scalars
        if others:
            return f"it reads the tensor `{sorted(others)[0]}` at line {source.position(statement)[0]}"
        tiles.add(small.targets[0].target.value)
    return ""


def _dtype_test(node: cst.Call) -> bool:
    """`x.dtype.is_fp8()` and the like: a test of a tile's element type, decided at compile time."""
    func = node.func
    return isinstance(func, cst.Attribute) and func.attr.value.startswith("is_") and not node.args \
        and isinstance(func.value, cst.Attribute) and func.value.attr.value == "dtype"


def _variables(source: SourceFile, expression: cst.BaseExpression) -> set[str]:
    """The variables `expression` reads: not the modules it names (`tl` of `tl.float32`)."""
    modules = {n.value.value for n in preorder(expression) if isinstance(n, cst.Attribute)
               and isinstance(n.value, cst.Name) and language_name(source.qualified_name(n)) is not None}
    return read_names(expression) - modules


def _elementwise(node: cst.CSTNode, source: SourceFile | None = None, helpers: frozenset[str] = frozenset()) -> bool:
    """`node`, a call or a subscript, keeps its operand's rows: `x.to(...)`, a language function of one element (with
    `source`, also one imported by name: `exp(x)` from `triton.language.math`, or a helper of elementwise math the
    module imports, `helpers`: FLA's `exp`)."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        return node.func.attr.value in ("to", "cast") or node.func.attr.value in PURE_CALLS
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and source is not None:
        return node.func.value in helpers or language_name(source.qualified_name(node.func)) in PURE_CALLS
    return False


def _reduction(source: SourceFile, node: cst.CSTNode) -> tuple[cst.BaseExpression, int | None] | None:
    """The operand of the reduction `node` and its axis (None where not a literal), in either spelling: the language
    function (`tl.max(x, 1)`, `tl.sum(x, axis=1)`) or the tensor method (`x.max(1)`, `x.sum(axis=1)`). An axis of -1
    is 1: the tiles reduced in a dot loop are 2-D."""
    if not isinstance(node, cst.Call):
        return None
    if isinstance(node.func, cst.Attribute) and language_name(source.qualified_name(node.func)) is None:
        operand, axis_args = node.func.value, node.args  # the method: its first argument is the axis
    elif node.args:
        operand, axis_args = node.args[0].value, node.args[1:]
    else:
        return None
    axis = next((a.value for a in axis_args if a.keyword is None or a.keyword.value == "axis"), None)
    text = source.code(axis).strip() if axis is not None else ""
    return operand, {"0": 0, "1": 1, "-1": 1}.get(text)


def _row_reduction_of(source: SourceFile, node: cst.CSTNode, family: set[str], scalars: set[str], axis: int = 1,
                      helpers: frozenset[str] = frozenset()) -> bool:
    """`node` reduces along axis 1 a value computed elementwise from names of `family` (and scalars): with every warp
    along M, a reduction inside each warp (`scalars`: names bound to no tensor). (`axis` 0 with the B tiles' family:
    along K, inside each warp.)"""
    reduction = _reduction(source, node)
    if reduction is None or reduction[1] != axis:
        return False
    operand = reduction[0]
    if any(isinstance(n, cst.Subscript) or (isinstance(n, cst.Call) and not _elementwise(n, source, helpers))
           for n in preorder(operand)):
        return False
    names = _variables(source, operand) - {n.func.value for n in preorder(operand)
                                           if isinstance(n, cst.Call) and isinstance(n.func, cst.Name)}
    return bool(names & family) and names <= family | scalars


#: Elementwise language functions a loop-invariant value may be computed with and still be converted once, before the
#: loop (`invariant_convert`): no memory access, no cross-lane work.
#: (Each is spelt `gl.<name>` in the translation, where the rule looks for it again: `_Invariant`.)
PURE_CALLS = frozenset({"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "maximum", "minimum", "where", "cos",
                        "sin", "fma", "floor", "ceil", "math.exp", "math.exp2", "math.log", "math.log2", "math.sqrt",
                        "math.rsqrt", "math.abs"})


def invariant_convert(source: SourceFile, node: cst.CSTNode, loop: cst.For, flow: LoopDataflow,
                      helpers: frozenset[str] = frozenset()) -> bool:
    """A layout conversion of a value the loop does not change (it reads names the loop does not assign, through
    arithmetic, broadcasts and elementwise math: `shifter[:, None]`, `exp2(b_g)`): the rule makes it once, before the
    loop, instead of in a stage next to the MMA."""
    defined = set().union(*(f.defines for f in flow.statements))
    if isinstance(loop.target, cst.Name):
        defined.add(loop.target.value)
    for n in preorder(node):
        if isinstance(n, cst.Name) and n.value in defined:
            return False
        if isinstance(n, cst.Call) and not (isinstance(n.func, cst.Attribute) and n.func.attr.value == "to") \
                and language_name(source.qualified_name(n.func)) not in PURE_CALLS \
                and not (isinstance(n.func, cst.Name) and (n.func.value in helpers or _builtin_minmax(source, n))):
            return False
    return True


def arithmetic_step(body: list[cst.BaseStatement], prep: tuple[int, ...]) -> cst.CSTNode | None:
    """The first statement of the computation `prep` that does more than rename or cast (`x = y.to(T)`), or None."""
    for i in prep:
        statement = body[i]
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
            else None
        value = small.value if isinstance(small, cst.Assign) else None
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "to":
            value = value.func.value
        if not isinstance(value, cst.Name):
            return statement
    return None


#: Python's builtins that Triton's (and Gluon's) frontend reads as elementwise `maximum` / `minimum` on tensors
BUILTIN_ELEMENTWISE = ("min", "max")


def _builtin_minmax(source: SourceFile, call: cst.Call) -> bool:
    """`max(0, x)`, `min(a, b)`: Python's builtins (`BUILTIN_ELEMENTWISE`), where the module does not bind the name
    itself."""
    return isinstance(call.func, cst.Name) and call.func.value in BUILTIN_ELEMENTWISE \
        and source.qualified_name(call.func) in (None, "min", "max", "builtins.min", "builtins.max")


def scalar_names(plan: LayoutPlan, fn: JitFunction) -> frozenset[str]:
    """Names `fn` binds that the layout plan did not bind to tensors: its scalars (`cur_end = tl.minimum(...)`)."""
    return frozenset(bound_names(fn.node) - set(name_terms(plan)))


def _wide_trip_count(source: SourceFile, fn: JitFunction, loop: cst.For) -> cst.CSTNode | None:
    """A value cast to a 64-bit integer (`tl.program_id(0).to(tl.int64)`) that the loop's range bounds are computed
    from, through the function's assignments of the names they read; None where there is none."""
    definitions = all_definitions(fn)  # (every value of each name, one tuple expression a name)
    work = [a.value for a in loop.iter.args] if isinstance(loop.iter, cst.Call) else [loop.iter]
    seen: set[str] = set()
    while work:
        value = work.pop()
        if isinstance(value, cst.Tuple):  # (a name's values, one of them the cast)
            work += [element.value for element in value.elements]
            continue
        # (a value loaded from memory has the pointer's element type, whatever its address is computed from)
        loaded = {id(n) for call in preorder(value) if isinstance(call, cst.Call)
                  and language_name(source.qualified_name(call.func)) in ("load", "core.load") for n in preorder(call)}
        nodes = [n for n in preorder(value) if id(n) not in loaded]
        if any(isinstance(n, cst.Attribute) and n.attr.value in ("int64", "uint64") for n in nodes):
            return value
        for name in {n.value for n in nodes if isinstance(n, cst.Name)} - seen:
            seen.add(name)
            if name in definitions:
                work.append(definitions[name])
    return None


def _hoistable_expression(node: cst.CSTNode, loop: cst.For, flow: LoopDataflow, fn: JitFunction,
                          scalar_names: frozenset[str]) -> tuple[str, str] | None:
    """For a layout conversion of integer arithmetic of one hoistable sum `x` and scalars (an ALiBi bias's key
    distance, `(blk_seq_offs - seq_len + 1)`): that arithmetic with `x` written as its sum (`hoistable_convert`).
    Likewise a bound of such arithmetic written in place, `(o_c < NC)[None, :]` (the bound scalars): the comparison of
    the sum made in the converted layout."""
    if not isinstance(node, cst.BaseExpression):
        return None
    var = loop.target.value  # type: ignore[attr-defined]
    defined = {name for f in flow.statements for name in f.defines}
    scalars = ({var, *(p.name for p in fn.params)} | scalar_names) - defined
    scalars |= _iteration_scalars(flow, var, scalars)
    bare = unparenthesized(node)
    if isinstance(bare, cst.Comparison) and len(bare.comparisons) == 1 \
            and isinstance(bare.comparisons[0].operator, _COMPARISONS):
        bound = bare.comparisons[0].comparator
        if not _scalar_arithmetic(bound, scalars):
            return None
        left = unparenthesized(bare.left)
        inner = hoistable_convert(left, loop, flow, fn, scalar_names)
        if inner is None or inner[0].startswith("("):
            return None
        return _compared(inner, bare.comparisons[0])
    if not only_nodes(node, INTEGER_ARITHMETIC):
        return None
    sums = [name for name in read_names(node) if name not in scalars]
    if len(sums) != 1:
        return None
    if sums[0] not in defined and sums[0] != var:
        # (offsets from before the loop, `(start_n + offs_n) < end`: the conversion of `offs_n`, made once)
        inner: tuple[str, str] | None = (OFFSETS, sums[0])
    else:
        inner = hoistable_convert(cst.Name(sums[0]), loop, flow, fn, scalar_names)
    if inner is None or inner[0].startswith("("):  # (a sum, not a bound of one)
        return None

    marker = "_hoisted_sum_"

    class _Sum(cst.CSTTransformer):
        def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
            return cst.Name(marker) if updated.value == sums[0] else updated

    text = " ".join(cst.Module([]).code_for_node(node.visit(_Sum())).split())  # type: ignore[arg-type]
    return text.replace(marker, inner[0] if inner[0] == OFFSETS else f"({inner[0]})"), inner[1]


def _iteration_scalars(flow: LoopDataflow, var: str, outside: set[str]) -> set[str]:
    """Names the iteration binds once, before any other use, to integer arithmetic of the loop variable, of
    `outside` (scalars from before the loop) and of earlier such names: scalars of this iteration."""
    made: set[str] = set()
    counts: dict[str, int] = {}
    read: set[str] = set()  # names read so far in the iteration (one read before its binding is carried)
    for facts in flow.statements:
        for name in facts.defines:
            counts[name] = counts.get(name, 0) + 1
    for facts in flow.statements:
        small = facts.node.body[0] if isinstance(facts.node, cst.SimpleStatementLine) and len(facts.node.body) == 1 \
            else None
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
            name = small.targets[0].target.value
            if counts.get(name) == 1 and name not in read and _scalar_arithmetic(small.value, outside | made | {var}):
                made.add(name)
        read |= read_names(facts.node)
    return made


def _wrapped(text: str) -> bool:
    """`text` is one parenthesised expression, `(a + b)` (not `(a) + (b)`)."""
    if not text.startswith("("):
        return False
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return i == len(text) - 1
    return False


def _last_name(func: cst.BaseExpression) -> str:
    """The last name of a called expression (`tl.multiple_of` -> "multiple_of", `x.to` -> "to"), "" for others."""
    return func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""


def _hint_of(statement: cst.CSTNode, var: str) -> bool:
    """`statement` is `var = tl.multiple_of(var, ...)` (or `tl.max_contiguous`): a hint that keeps the value."""
    small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
    if not (isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name)
            and small.targets[0].target.value == var and isinstance(small.value, cst.Call)):
        return False
    first = small.value.args[0].value if small.value.args else None
    return _last_name(small.value.func) in ("multiple_of", "max_contiguous") and isinstance(first, cst.Name) \
        and first.value == var


def _scalar_arithmetic(node: cst.BaseExpression, names: set[str]) -> bool:
    """Integer arithmetic (`INTEGER_ARITHMETIC`) of `names` and literals, through scalar loads from addresses of such
    arithmetic (a block-sparse kernel's block index, `tl.load(blocks_ptr + i) * BLOCK_N`: one value for every lane)
    and casts (`tl.cast(i, tl.int64)`, `x.to(tl.int32)`, `tl.multiple_of(x, 16)`)."""
    node = unparenthesized(node)
    if isinstance(node, cst.Name):
        return node.value in names
    if isinstance(node, cst.Integer):
        return True
    if isinstance(node, cst.BinaryOperation):
        return isinstance(node.operator, (cst.Add, cst.Subtract, cst.Multiply, cst.FloorDivide)) \
            and _scalar_arithmetic(node.left, names) and _scalar_arithmetic(node.right, names)
    if not isinstance(node, cst.Call):
        return False
    positional = [a.value for a in node.args if a.keyword is None]
    func = node.func
    last = _last_name(func)
    if is_load(node):
        return len(node.args) == 1 and len(positional) == 1 and _scalar_arithmetic(positional[0], names)
    if isinstance(func, cst.Attribute) and last == "to":  # (`x.to(tl.int32)`)
        return _scalar_arithmetic(func.value, names)
    if last in ("cast", "multiple_of") and positional:
        return _scalar_arithmetic(positional[0], names)
    return False


#: Where the converted offsets stand in the expression `hoistable_convert` gives.
OFFSETS = "@offsets@"
#: The offsets `hoistable_convert` gives for `tl.arange(a, b)` written in the sum: ARANGE + "a, b" (the rule makes the
#: range before the loop, in the layout the conversion would give it).
ARANGE = "@arange@"


def _arange_bounds(node: cst.BaseExpression, scalars: set[str]) -> str | None:
    """"a, b" of `tl.arange(a, b)` (any module alias; `arange` as the last name of the call), its bounds integer
    arithmetic of `scalars` and literals; else None."""
    if not isinstance(node, cst.Call) or len(node.args) != 2 or any(a.keyword is not None for a in node.args):
        return None
    if _last_name(node.func) != "arange":
        return None
    if not all(only_nodes(a.value, INTEGER_ARITHMETIC) and read_names(a.value) <= scalars for a in node.args):
        return None
    return ", ".join(" ".join(cst.Module([]).code_for_node(a.value).split()) for a in node.args)
_COMPARISONS = (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual)


def _compared(inner: tuple[str, str], comparison: cst.ComparisonTarget) -> tuple[str, str]:
    """`inner` (a hoisted sum and its offsets, `hoistable_convert`) compared as `comparison` compares the sum."""
    operator = cst.Module([]).code_for_node(comparison.operator).strip()
    left_text = inner[0] if inner[0] == OFFSETS or _wrapped(inner[0]) else f"({inner[0]})"
    return f"{left_text} {operator} {' '.join(cst.Module([]).code_for_node(comparison.comparator).split())}", inner[1]


def hoistable_convert(node: cst.CSTNode, loop: cst.For, flow: LoopDataflow, fn: JitFunction,
                      scalar_names: frozenset[str] = frozenset()) -> tuple[str, str] | None:
    """For a layout conversion of `x`, where this iteration computes ``x = <scalar> + offs`` with `offs` from
    outside the loop and `<scalar>` the loop variable or integer arithmetic of it and of the parameters of `fn` (its
    scalars: ``start_n * BLOCK_N + offs_n``): (that sum with `OFFSETS` in place of `offs`, offs). The conversion of
    `offs` can then be made once before the loop, and `x` is that sum in the converted layout. Likewise a bound of
    such a sum, ``mask = x < bound`` (`bound` integer arithmetic of parameters and of `scalar_names`, scalars bound
    before the loop): the comparison of the converted sum."""
    if not isinstance(loop.target, cst.Name):
        return None
    if not isinstance(node, cst.Name):
        return _hoistable_expression(node, loop, flow, fn, scalar_names)
    var = loop.target.value
    # (`x` bound once in the iteration, the loop variable never but to a hint of itself, `start_n =
    # tl.multiple_of(start_n, BLOCK_N)`: `x` then holds that sum wherever it is converted)
    if sum(node.value in f.defines for f in flow.statements) != 1 or any(
            var in f.defines and not _hint_of(f.node, var) for f in flow.statements):
        return None
    defined = {name for f in flow.statements for name in f.defines}
    scalars = {var, *(p.name for p in fn.params)}
    # (scalars the iteration computes from the loop variable, `kv_blk_idx = kv_blk_start + b`: read where they are)
    made = _iteration_scalars(flow, var, (scalars | scalar_names) - defined)
    for facts in flow.statements:
        if facts.defines != {node.value} or not isinstance(facts.node, cst.SimpleStatementLine):
            continue
        small = facts.node.body[0]
        if isinstance(small, cst.Assign) and isinstance(small.value, cst.Comparison) \
                and len(small.value.comparisons) == 1 and isinstance(small.value.comparisons[0].operator, _COMPARISONS):
            comparison = small.value.comparisons[0]
            bound = comparison.comparator
            left = unparenthesized(small.value.left)
            bounds = _arange_bounds(left, scalars - defined - {var})
            if isinstance(left, cst.Name) and left.value not in defined and left.value != var:
                inner: tuple[str, str] | None = (OFFSETS, left.value)  # (`n_mask = offs_n < L - idx_n * BLOCK_N`)
            elif bounds is not None:
                inner = (OFFSETS, ARANGE + bounds)
            else:
                inner = hoistable_convert(small.value.left, loop, flow, fn, scalar_names)
            # (the bound: scalars from before the loop, or of this iteration, `L - idx_n * BLOCK_N` with `idx_n` a
            # block index the iteration loads)
            if inner is None or not _scalar_arithmetic(bound, ((scalars | scalar_names) - defined - {var}) | made):
                return None
            return _compared(inner, comparison)
        if not (isinstance(small, cst.Assign) and isinstance(small.value, cst.BinaryOperation)
                and isinstance(small.value.operator, cst.Add)):
            return None
        sides = [small.value.left, small.value.right]
        for position, offsets in enumerate(sides):
            scalar = sides[1 - position]
            if not (only_nodes(scalar, INTEGER_ARITHMETIC) and ({var} | made) & names_in(scalar)
                    and read_names(scalar) <= ((scalars | scalar_names) - defined) | made):
                continue
            if isinstance(offsets, cst.Name) and offsets.value not in defined and offsets.value != var:
                return f"{' '.join(cst.Module([]).code_for_node(scalar).split())} + {OFFSETS}", offsets.value
            bounds = _arange_bounds(offsets, scalars - defined - {var})
            if bounds is not None:  # (`start_n + tl.arange(0, BLOCK_N)`: the offsets made before the loop, laid out)
                return f"{' '.join(cst.Module([]).code_for_node(scalar).split())} + {OFFSETS}", ARANGE + bounds
        return None
    return None

