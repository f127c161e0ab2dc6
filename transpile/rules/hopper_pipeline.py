"""sm90: pipeline a descriptor GEMM main loop with a TMA ring and asynchronous wgmma.

Matches: ``for k in range(...)`` / ``tl.range(..., num_stages=n)`` whose body loads the two operands of one
``acc = tl.dot(a, b, acc)`` with ``desc.load(...)`` (the plan of `transpile.analysis.pipeline`).
Emits: an ``NUM_STAGES``-deep ring of shared-memory tiles per operand with one mbarrier per slot (allocate, ``init``,
``expect`` with the tile bytes, ``wait`` on the slot's phase, ``invalidate`` after the loop); a prologue that starts
the copies of the first ``NUM_STAGES - 1`` iterations; in the loop, ``warpgroup_mma(..., is_async=True)`` straight
from the ring, then ``warpgroup_mma_wait(1, ...)``: the previous wgmma has then finished reading its slot, and that
slot is refilled with the tiles of iteration ``it + NUM_STAGES - 1``. One final ``warpgroup_mma_wait(0)`` makes the
accumulator available to the epilogue. A loop the analysis cannot pipeline is left as it is, with a TT040 note.

Warp specialisation: where the loop body is only the copies, their scalar producer slice and the dot, the ring has a
second form, chosen at compile time for tiles of 128x256 accumulator elements and more: a loader partition (one warp,
a module-level function emitted before the kernel) issues the copies into slots an `empty` mbarrier hands back, and
the kernel's warps (`_ws_wgmma_consumer`) only wait, run the wgmmas and release slots. On an H100 it ran the
descriptor GEMM 1.18x (4096^3) and 1.37x (8192^3) faster than the original kernel at 128x256x64, against 1.18x and
1.21x for the single-partition ring at that tile, and 0.95-1.04x at 128x128 (bench/RESULTS.md). An autotuned kernel
whose tile sizes are config keys gets that tile as one more config (listed in the variant's header), so that the
autotuner can choose it; its own configs stay. A loop that scales each step's product with one B scale per tile
(block-scaled 8-bit GEMMs, `rules/tile_scales.py`) has a warp-specialised form from 128x128 tiles on 8 warps, whose
consumer partition is the kernel's own: the loop's statements around each wgmma (`SCALED_CONSUMER_STEPS`), the kernel
values they read passed to it (the fixture suite_block_fp8_linear 1.13 -> 1.21x its source on an H100). By default
such a loop is kept as Triton instead, with its scale read once per tile there (`passes/tile_scales.py`), which
measured at or above this ring (UNPROFITABLE_RINGS, "TMA ring, one scale per tile"); `--gluon-always` emits the ring.
Targets: sm90.
"""

from __future__ import annotations

from dataclasses import replace

import libcst as cst

from transpile.analysis.pipeline import (LoopPlan, LoopRefusal, OperandLoad, carried_out, consumer_indices,
                                         plan_loop)
from transpile.analysis.tile_scales import UniformFactor
from transpile.cst_utils import assigned_names, calls_in, names_in, parenthesized, read_names
from transpile.discover import TRITON_AUTOTUNE, decorator_target
from transpile.rules import hopper_persistent as persistent
from transpile.rules.base import Counterexample, Example, Rule, RuleContext
from transpile.passes.tile_scales import scalar_scale
from transpile.rules.tile_scales import SCALED_TILE_ROWS, launch_tests, uniform_scale
from transpile.rules.dot import translated_dot
from transpile.lowering.sm90 import (CONSUMER_STEPS, LOADER_STEPS, SCALED_CONSUMER_STEPS, LoopText, RingNames, TmaCopy, Wgmma, gemm_ring,
                                     partition_loop, wgmma_rows)
from transpile.rules.hopper_schedule import (PERSISTENT_LOADER_REGISTERS, SCALED_WS_MIN_TILE, WS_CONFIG, WS_CONSUMER,
                                             WS_MIN_TILE, RingConfig,
                                             RingOperand, Sm90Ring, WarpSpecialised, add_config, kernel_configs,
                                             least_rows)
from transpile.rules.pipeline_text import LoopRange, code, indent, loop_namer, next_names, rename, ring_depth

EXAMPLE = (
    "import triton\nimport triton.language as tl\n\n@triton.jit\n"
    "def k(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):\n"
    "    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])\n"
    "    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])\n"
    "    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])\n"
    "    acc = tl.zeros((BM, BN), dtype=tl.float32)\n"
    "    for k in tl.range(0, tl.cdiv(K, BK), num_stages=4):\n"
    "        a = a_desc.load([0, k * BK])\n        b = b_desc.load([k * BK, 0])\n        acc = tl.dot(a, b, acc)\n"
    "    c_desc.store([0, 0], acc.to(tl.float16))\n"
)

class HopperTMAPipeline(Rule):
    name = "hopper-tma-pipeline"
    matches = "a main loop whose dot operands are tensor-descriptor tile loads"
    emits = "a TMA ring with per-slot mbarriers and async wgmma kept one deep in flight"
    examples = (
        Example(EXAMPLE, (
            "NUM_STAGES: gl.constexpr = 4",
            "mbarrier.wait(ready.index(slot), (it // NUM_STAGES) & 1)",
            "acc = warpgroup_mma(a_smem.index(slot), b_smem.index(slot), acc, is_async=True)",
            "acc, _, _ = warpgroup_mma_wait(1, deps=[acc, a_smem.index(slot), b_smem.index(slot)])",
            "acc = warpgroup_mma_wait(0, deps=[acc])",
            # (BM, a constexpr each launch passes, may be fewer than a wgmma's 64 rows: mma.sync from the slots)
            "WGMMA: gl.constexpr = a_desc.block_type.shape[0] >= 64  # (fewer rows: mma.sync)",
            "acc = _mma_sync_slots(a_smem.index(slot), b_smem.index(slot), acc)",
            "a_desc.block_type.shape[0] >= 64",
            "and a_desc.block_type.shape[0] * b_desc.block_type.shape[1] >= 32768",
            "(_ws_wgmma_consumer, (a_smem, b_smem, ready, empty, num_iters, acc)),",
            "(_k_tma_loader, (a_desc, b_desc, BK, a_smem, b_smem, ready, empty, num_iters)),",
            "def _k_tma_loader(a_desc, b_desc, BK: gl.constexpr, a_ring, b_ring, ready, empty, num_iters):",
        ), "sm90"),
    )
    counterexamples = (
        # an operand also read outside the dot: the pipelined wgmma reads it from shared memory only
        Counterexample(EXAMPLE.replace("        acc = tl.dot(a, b, acc)\n", "        acc = tl.dot(a, b, acc)\n"
                                       "        acc += tl.sum(a.to(tl.float32), 1)[:, None]\n"),
                       ("mbarrier.wait(ready", "a_smem.index(slot)"), "TT041", "`a` is used outside the dot", "sm90"),
    )

    def leave_For(self, ctx: RuleContext, original: cst.For, updated: cst.For):  # noqa: ANN201
        default = ctx.function.num_stages or ctx.function.launch_stages or 3
        plan = plan_loop(ctx.source, original, ctx.plan, default, transposed_operands=True, inline_loads=True,
                         accumulations=True, scaled_products=True)
        if plan is None:
            return updated
        if isinstance(plan, LoopRefusal):
            if not any(ctx.plan.descriptor_ops.get(c, ("",))[0] == "load" for c in calls_in(original)):
                return updated  # not a descriptor loop: the pointer-tile and attention rules speak for it
            ctx.diagnostics.append(ctx.source.diagnostic(plan.node, "TT040", f"main loop not pipelined: {plan.reason}"))
            return updated
        if plan.kind == "pointer":
            return updated  # pointer tiles: the cp.async ring (HopperCpAsyncPipeline)
        if plan.kind != "descriptor":
            ctx.diagnostics.append(ctx.source.diagnostic(
                original, "TT040", "main loop not pipelined: one operand is a pointer tile, the other a tensor "
                "descriptor's tile"))
            return updated
        if not plan.acc_in_dot and not plan.chains[0].scaled_product:
            # (`acc += tl.dot(a, b)` that canonicalisation could not fold: Triton runs it as a dot into `acc`)
            ctx.diagnostics.append(ctx.source.diagnostic(
                plan.chains[0].call, "TT040", "main loop not pipelined: the dot is not `acc = tl.dot(a, b, acc)` "
                "with a loop-carried accumulator"))
            return updated
        uniform = uniform_scale(ctx, plan, original) if not plan.acc_in_dot else None
        if not plan.acc_in_dot and uniform is None and ctx.slower_than_triton(original, "TMA ring, scaled product"):
            return updated  # the profitability policy keeps the kernel as Triton (UNPROFITABLE_RINGS in rules/base.py)
        if uniform is not None and ctx.slower_than_triton(original, "TMA ring, one scale per tile"):
            return updated  # (kept: the tile-scaled Triton form, `transpile.passes.tile_scales`, measured faster)
        if uniform is not None:
            # one scale per tile only where a column group holds whole tiles: the launcher runs the source kernel
            # for the others, and for tiles of fewer rows
            launch_tests(ctx, plan, uniform, SCALED_TILE_ROWS)
        if ctx.slower_than_triton(original, "TMA ring"):  # (a form no measure keeps but host descriptors)
            return updated
        texts, ring = self._emit(ctx, plan, updated, original, uniform)
        ctx.pipelined_loop(original, ring)
        statement = cst.parse_statement(texts[0])
        if ctx.persistent is not None:
            ctx.persistent.loop_statement = statement
            ctx.persistent.plain_statement = cst.parse_statement(texts[1])
        return statement

    def leave_FunctionDef(self, ctx: RuleContext, original: cst.FunctionDef, updated: cst.FunctionDef
                          ) -> cst.FunctionDef:
        """The persistent form where the ring rule found the kernel fit for it; an autotuned kernel with a
        warp-specialised ring gets the tile that form is for as one more config."""
        if ctx.persistent is not None:
            built = persistent.build(ctx, ctx.persistent, original, updated)
            if built is None:
                ctx.persistent = None
            else:
                updated = built
                ctx.need("persistent_grid")
                for ring in ctx.schedules:  # the timeline draws the partitions that are emitted
                    if isinstance(ring, Sm90Ring) and ring.ws is not None:
                        ring.ws = replace(ring.ws, loader=f"_{ctx.function.name}_tile_loader",
                                          consumer=f"_{ctx.function.name}_tile_consumer",
                                          registers=PERSISTENT_LOADER_REGISTERS, persistent=True)
        tiles = ctx.ws_tiles
        if not tiles or not ctx.function.autotune_configs:
            return updated
        ctx.ws_config = _has_ws_config(ctx, tiles)
        decorators = list(updated.decorators)
        for i, (source, decorator) in enumerate(zip(original.decorators, decorators)):
            if ctx.source.qualified_name(decorator_target(source)) != TRITON_AUTOTUNE:
                continue
            added = _add_ws_config(ctx, decorator, tiles)
            if added is not None:
                ctx.ws_config = True
                decorators[i], config = added
                for ring in ctx.schedules:  # the timeline shows which form each config compiles
                    if isinstance(ring, Sm90Ring) and ring.ws is not None:
                        ring.configs.append(config)
                return updated.with_changes(decorators=decorators)
        return updated

    def _emit(self, ctx: RuleContext, plan: LoopPlan, updated: cst.For, original_loop: cst.For,
              uniform: UniformFactor | None = None) -> tuple[list[str], Sm90Ring]:
        """The pipelined loop for 16-bit operands, under a compile-time test that keeps the translated loop for
        operands of other widths, and the schedule it was written from; second text, where the kernel takes the
        persistent form (`ctx.persistent`), the same loop without the warp-specialised branch."""
        body = list(updated.body.body)  # type: ignore[union-attr]
        name = loop_namer(ctx, plan.loop)
        tile_scale: list[str] = []  # (the scalar address of a scale held once per tile, defined before the ring)
        tile = ""
        if uniform is not None:
            tile = name(f"{uniform.name}_ptr")
            body = scalar_scale(body, original_loop, plan.dot_index, uniform, tile)
            tile_scale = [
                f"# One {uniform.name} per tile: the columns of a tile share one group of `{uniform.group}` (a "
                f"multiple of `{uniform.block}`,",
                "# which the launcher checks), so the scale is loaded once a step as a scalar, not once a column.",
                f"{tile} = {_one_expression(uniform.scalar)}"]
        prologue_i = name("i")  # the prologue's loop variable: a name the kernel does not use (a static_range
        # loop leaves its variable bound to the last value, which would change a kernel variable `i`); so are
        s_var = _barrier_var(ctx, name)  # the barrier loops'
        stages, ready, it, slot, nxt, nxt_slot, iters = (name("NUM_STAGES"), name("ready"), name("it"), name("slot"),
                                                         name("next_it"), name("next_slot"), name("num_iters"))
        a, b = plan.loads
        a_smem, b_smem = name(f"{a.name}_smem"), name(f"{b.name}_smem")
        infos = {op.descriptor: ctx.plan.descriptors[op.descriptor] for op in plan.loads}
        span = LoopRange.of(updated)
        count, index = span.count, span.value
        ring = Sm90Ring("tma", ctx.function.name, ctx.source.position(plan.loop)[0],
                        ring_depth(ctx, plan.loop, plan.num_stages),
                        tuple(RingOperand(op.name, "TMA", op.transposed) for op in plan.loads),
                        configs=kernel_configs(ctx.function))

        # Producer statements, re-evaluated for a later iteration with their names suffixed `_next`.
        renames = next_names(plan.var, plan.producer, body, name)
        coords_of = _operand_coords(plan, body)
        copy = TmaCopy(ready, tuple((op.descriptor, rename(coords_of[id(op)], renames), smem)
                                    for op, smem in ((a, a_smem), (b, b_smem))))

        ctx.need("tma_aliases")
        consumer = consumer_indices(plan.producer, {op.index for op in plan.loads}, body)
        before = [body[i] for i in consumer if i < plan.dot_index]
        after = [body[i] for i in consumer if i > plan.dot_index]
        after_text = [code(s) for s in after]
        if plan.acc_in_dot:
            dot_call = _dot_call(body[plan.dot_index])
            acc_in = code(dot_call.args[2].value) if dot_call is not None and len(dot_call.args) > 2 else plan.acc
            product = plan.acc
        else:
            # `acc += tl.dot(a, b) * scales` (block-scaled GEMMs) or an accumulation the canonical form could not
            # fold: each wgmma makes the iteration's product from zero, waited for at once, and the loop's own
            # statement adds it (scaled) to the accumulator, the translated dot replaced by the product.
            product = name("product")
            dot_call = translated_dot(body[plan.dot_index])
            acc_in = code(dot_call.args[2].value)
            after_text.insert(0, code(body[plan.dot_index].deep_replace(dot_call, cst.Name(product))))
            ring.mma_in_flight, ring.product = 0, True
        loop_text = LoopText(
            plan.var, index, product, acc_in, [code(s) for s in before], after_text, renames[plan.var],
            [rename(body[i], renames) for i in plan.producer_before()],
            [rename(body[i], renames) for i in plan.producer_after()],
            uses_var=any(plan.var in names_in(s) for s in [*before, *after, *([] if plan.acc_in_dot else
                                                                                 [body[plan.dot_index]])]))
        # A launch may give fewer rows than a wgmma takes: the ring multiplies them with mma.sync (a product made
        # from zero each iteration, block-scaled, runs the translated loop instead)
        rows = wgmma_rows(f"{a.descriptor}.block_type.shape[{1 if a.transposed else 0}]",
                          least_rows(ctx, plan.chains[0].call))
        flag = name("WGMMA") if rows is not None and plan.acc_in_dot else ""
        mma = Wgmma(ring.mma_in_flight, lambda s: (_view(a, f"{a_smem}.index({s})"), _view(b, f"{b_smem}.index({s})")),
                    (a_smem, b_smem), use_acc=plan.acc_in_dot, wgmma_flag=flag)
        if flag:
            ctx.need("mma_sync_slots")

        header = [
            "# Main loop, pipelined by triton-transpile: the tiles of A and B stream through a ring of NUM_STAGES",
            "# shared-memory slots filled by TMA ahead of use (one mbarrier per slot); each wgmma reads its slot",
            "# directly and runs asynchronously, one stays in flight, and a slot is refilled only once the wgmma",
            "# that read it has completed.",
        ]
        # The ring, its `ready` barriers and the trip count serve both forms (the warp-specialised one, below).
        shared = [
            *([f"{flag}: gl.constexpr = {rows}  # (fewer rows: mma.sync)"] if flag else []),
            *ring.depth.lines(stages),
            f"{a_smem} = gl.allocate_shared_memory({a.descriptor}.dtype, [{stages}, "
            f"{', '.join(infos[a.descriptor].block_shape)}], {a.descriptor}.layout)",
            f"{b_smem} = gl.allocate_shared_memory({b.descriptor}.dtype, [{stages}, "
            f"{', '.join(infos[b.descriptor].block_shape)}], {b.descriptor}.layout)",
            f"{ready} = gl.allocate_shared_memory(gl.int64, [{stages}, 1], mbarrier.MBarrierLayout())",
            f"for {s_var} in gl.static_range({stages}):\n    mbarrier.init({ready}.index({s_var}), count=1)",
            f"{iters} = {count}",
            *tile_scale,
        ]
        lines = gemm_ring(ring.steady, loop_text, RingNames(stages, it, slot, nxt, nxt_slot, iters, prologue_i), copy,
                          mma, [(renames[c], c) for c in plan.carried])
        # `_tma_load` stays: the translated loop (the branch for 8- and 32-bit operands) calls it.
        ctx.need("cta_barrier")
        if uniform is not None:
            # (a scaled product, one B scale per tile: a consumer partition of the kernel's own, which runs the
            # loop's statements around the wgmma)
            ring.ws = _scaled_ws_decision(ctx, plan, body, original_loop, [*before, body[plan.dot_index], *after],
                                          name)
            ws = _scaled_warp_specialised(ctx, plan, ring.ws, body, name, stages, iters, index, loop_text,
                                          (a_smem, b_smem, ready), coords_of,
                                          tile) if ring.ws is not None else []
        else:
            # (the warp-specialised consumer runs only the wgmmas into the accumulator: no statement of the loop's
            # own)
            ring.ws = _ws_decision(ctx, plan, body, before or after or not plan.acc_in_dot, name)
            if ring.ws is not None and flag:
                ring.ws = replace(ring.ws, rows_test=rows)
            ws = _warp_specialised(ctx, plan, ring.ws, body, name, stages, iters, index, acc_in,
                                   (a_smem, b_smem, ready), coords_of) if ring.ws is not None else []
        sixteen = " and ".join(f"{op.descriptor}.dtype.primitive_bitwidth == 16" for op in plan.loads)
        condition = sixteen
        k_major = not a.transposed and b.transposed  # A's slot [M, K], B's [N, K]: both K-major, as 8-bit wgmma reads
        eight = " and ".join(f"{op.descriptor}.dtype.is_fp8()" for op in plan.loads) if k_major else ""
        if eight:
            condition = f"({sixteen}) or ({eight})"
        if rows is not None and not flag:
            condition = f"({condition}) and {rows}"
        original = indent(code(updated), "    ")

        def assemble(body_lines: list[str]) -> str:
            body_lines = [*shared, *body_lines,
                          f"for {s_var} in gl.static_range({stages}):\n    mbarrier.invalidate({ready}.index({s_var}))"]
            return "\n".join([
                *header,
                f"if {condition}:",
                indent("\n".join(body_lines), "    "),
                "else:",
                *(["    # Other operand types (8-bit integers, 32-bit): the loop runs as translated, unpipelined."] if k_major
                  else ["    # 8- and 32-bit operands: wgmma wants B K-major in shared memory, which this ring does not lay out;",
                        "    # the loop runs as translated, unpipelined."]),
                *(["    # So does a tile of fewer rows than a warpgroup's wgmma takes (its dot runs as mma.sync)."]
                  if rows is not None and not flag else []),
                original,
            ]) + "\n"

        plain = assemble(lines)
        if not ws:
            return [plain], ring
        if uniform is not None:  # (no persistent form of the scaled ring: not measured)
            return [assemble([*ws, "else:", indent("\n".join(lines), "    ")])], ring
        # the warp-specialised form for large tiles, the ring below for the others
        texts = [assemble([*ws, "else:", indent("\n".join(lines), "    ")]), plain]
        # The persistent form's kernel test: from WS_MIN_TILE with 8 warps (`ring.ws.condition`); but where B is read
        # K-major (both slots K-major: fp8 may come too), 16-bit operands take it at every tile and number of warps,
        # under the source's grid where the launch's tile is below WS_MIN_TILE (one tile per program), which measured
        # faster than the single-partition ring on small GEMMs (H200, bench/RESULTS.md: 1.11x against 0.83x at
        # 512^3, the same from 2048^3; not measured with B read N-major).
        wide = f" and {rows}" if flag else ""
        kernel_test = (f"({sixteen}{wide}) or ({eight} and {ring.ws.condition})" if eight
                       else f"{sixteen} and {ring.ws.condition}")
        if rows is not None and not flag:
            kernel_test = f"({kernel_test}) and {rows}"
        ctx.persistent = _persistent_form(ctx, plan, original_loop, body, name, stages, ready, index, acc_in,
                                          (a_smem, b_smem), coords_of, count, kernel_test)
        return texts, ring


def _operand_coords(plan: LoopPlan, body: list[cst.BaseStatement]) -> dict[int, cst.BaseExpression]:
    """The coordinates of each operand's load in the translated body (by `id` of the OperandLoad): the load
    statement's `_tma_load(desc, coords, layout)`, or, for a load written inside the dot, the `_tma_load` of that
    descriptor there (in order, should both operands come through one descriptor)."""
    found: dict[int, cst.BaseExpression] = {}
    taken: list[cst.Call] = []
    for op in plan.loads:
        if not op.inline:
            found[id(op)] = _load_coords(body[op.index])
            continue
        call = next(c for c in calls_in(body[op.index]) if isinstance(c.func, cst.Name) and c.func.value == "_tma_load"
                    and isinstance(c.args[0].value, cst.Name) and c.args[0].value.value == op.descriptor
                    and not any(c is t for t in taken))
        taken.append(call)
        found[id(op)] = call.args[1].value
    return found


def _load_coords(statement: cst.BaseStatement) -> cst.BaseExpression:
    value = statement.body[0].value  # type: ignore[union-attr]
    # after DescriptorsAsTMA: `_tma_load(desc, coords, layout)`
    return value.args[1].value


def _dot_call(statement: cst.BaseStatement) -> cst.Call | None:
    value = statement.body[0].value  # type: ignore[union-attr]
    return value if isinstance(value, cst.Call) else None


def _barrier_var(ctx: RuleContext, name) -> str:  # noqa: ANN001
    """The variable of the `static_range` loops that init and invalidate the barriers: `s` unless the kernel uses
    that name (the loop leaves it bound to its last value); the loops run one after another, so they share it."""
    return "s" if "s" not in _kernel_names(ctx.function.node) else name("s")


#: Names the warp-specialised loader function binds itself (its parameters and loop): a kernel value of one of these
#: names, passed to it, would be shadowed (or be a duplicate parameter).
LOADER_NAMES = frozenset({"it", "slot", "NUM_STAGES", "a_ring", "b_ring", "ready", "empty", "num_iters"})


def _ws_decision(ctx: RuleContext, plan: LoopPlan, body: list[cst.BaseStatement], consumer_rest: list,
                 name) -> WarpSpecialised | None:  # noqa: ANN001
    """The warp-specialised form of the ring, or None where the loop does more than copy and multiply (consumer
    statements besides the dot) or its producer slice is not plain scalar arithmetic (a loader warp takes no
    tensors)."""
    if consumer_rest:
        return None
    if _kernel_names(ctx.function.node) & LOADER_NAMES - {plan.var}:
        return None  # the loader function's own names would shadow kernel values passed to it
    for statement in (body[i] for i in plan.producer):
        for call in calls_in(statement):
            if code(call.func) not in persistent.SCALAR_CALLS:
                return None
    a, b = plan.loads
    # The accumulator's rows are A's rows and its columns B's columns, whichever way the tiles are loaded.
    rows, cols = (1 if a.transposed else 0), (0 if b.transposed else 1)
    dims = (ctx.plan.descriptors[a.descriptor].block_shape[rows], ctx.plan.descriptors[b.descriptor].block_shape[cols])
    return WarpSpecialised(name(f"_{ctx.function.name}_tma_loader"), f"{a.descriptor}.block_type.shape[{rows}]",
                           f"{b.descriptor}.block_type.shape[{cols}]", dims)


def _warp_specialised(ctx: RuleContext, plan: LoopPlan, ws: WarpSpecialised, body: list[cst.BaseStatement],
                      name, stages: str, iters: str, index, acc_in: str,  # noqa: ANN001
                      smem: tuple[str, str, str], coords_of: dict) -> list[str]:  # noqa: ANN001
    """The warp-specialised form `ws` of the ring (statements of the kernel that use the ring, its `ready` barriers
    and trip count allocated before them; the loader function is recorded in `ctx`)."""
    free = _loader(ctx, plan, ws, body, index, coords_of)
    a, b = plan.loads
    a_ring, b_ring, ready = smem
    empty = name("empty")
    s_var = _barrier_var(ctx, name)  # (a kernel variable `s` would be left bound to the loop's last value)
    ctx.need("ws_wgmma_consumer")
    ctx.need("tma_aliases")
    # The operand tiles as the dot reads them, [M, K] and [K, N], for the added autotune config.
    shapes = {op.descriptor: ctx.plan.descriptors[op.descriptor].block_shape for op in (a, b)}
    tiles = tuple(list(reversed(shapes[op.descriptor])) if op.transposed else list(shapes[op.descriptor])
                  for op in (a, b))
    ctx.ws_tiles = tiles  # read by leave_FunctionDef (one more autotune config)
    args = ", ".join(free)
    # Transposed operands (`tl.trans(w)`): the consumer reads a transposed view of the slot (TRANS_A, TRANS_B).
    flags = ", " + ", ".join(str(op.transposed) for op in (a, b)) if a.transposed or b.transposed else ""
    consumer = f"({WS_CONSUMER}, ({a_ring}, {b_ring}, {ready}, {empty}, {iters}, {acc_in}{flags}))"
    return _specialise(ws, plan.acc, empty, s_var, stages, consumer, f"({ws.loader}, ({args}, {a_ring}, {b_ring}, "
                       f"{ready}, {empty}, {iters}))", "these warps only wait, multiply and hand slots back")


def _specialise(ws: WarpSpecialised, acc: str, empty: str, s_var: str, stages: str, consumer: str, loader: str,
                what: str) -> list[str]:
    """The kernel's statements of a warp-specialised ring: its `empty` barriers around `gl.warp_specialize` of the
    consumer (the default partition, whose result is the accumulator) and the loader."""
    return [
        f"if {ws.condition}:",
        f"    # Warp-specialised: one loader warp fills the ring, {what}",
        "    # through the `empty` barriers.",
        f"    {empty} = gl.allocate_shared_memory(gl.int64, [{stages}, 1], mbarrier.MBarrierLayout())",
        f"    for {s_var} in gl.static_range({stages}):",
        f"        mbarrier.init({empty}.index({s_var}), count=1)",
        f"    {acc} = gl.warp_specialize([",
        f"        {consumer},",
        f"        {loader},",
        f"    ], [{ws.warps}], [{ws.registers}])[0]",
        f"    for {s_var} in gl.static_range({stages}):",
        f"        mbarrier.invalidate({empty}.index({s_var}))",
    ]


def _loader(ctx: RuleContext, plan: LoopPlan, ws: WarpSpecialised, body: list[cst.BaseStatement], index,  # noqa: ANN001
            coords_of: dict) -> list[str]:
    """The loader partition's function of the warp-specialised form `ws` (recorded in `ctx`), and the kernel values
    it takes, in order."""
    producer = [body[i] for i in plan.producer]
    coords = [coords_of[id(op)] for op in plan.loads]
    local = _kernel_names(ctx.function.node)
    # Loop-carried producer state (`off_k += BLOCK_K` after the loads) starts from the kernel's value: an argument.
    assigned = {n for st in producer for n in assigned_names(st)} - set(plan.carried) | {plan.var}
    used: list[str] = []
    for node in [cst.parse_expression(index("it")), *producer, *coords]:
        for n in sorted(names_in(node)):
            if n in local and n not in assigned and n not in used and n != "it":
                used.append(n)
    descriptors = [op.descriptor for op in plan.loads]
    free = [*dict.fromkeys(descriptors), *[n for n in used if n not in descriptors]]
    constexprs = _constexpr_names(ctx.function)
    loader = ws.loader
    params = ", ".join(f"{n}: gl.constexpr" if n in constexprs else n for n in free)
    line = ctx.source.position(plan.loop)[0]
    loader_loop = partition_loop(LOADER_STEPS, _partition_text(plan, body, index),
                                 TmaCopy("ready", _copies(plan, coords_of)), None, None)
    ctx.module_functions.append("\n".join([
        "@gluon.jit",
        f"def {loader}({params}, a_ring, b_ring, ready, empty, num_iters):",
        f'    """Loader partition of `{ctx.function.name}`\'s warp-specialised main loop (line {line} of the source): '
        "one warp",
        "    issues the TMA copies of each iteration into the ring slot the wgmma warps have handed back.\"\"\"",
        "    NUM_STAGES: gl.constexpr = a_ring.shape[0]",
        *(indent(text, "    ") for text in loader_loop),
    ]) + "\n")
    return free


#: Names the scaled consumer partition binds itself (its parameters and loop), besides the loader's
CONSUMER_NAMES = LOADER_NAMES | {"product"}


def _scaled_ws_decision(ctx: RuleContext, plan: LoopPlan, body: list[cst.BaseStatement], loop: cst.For,
                        consumed: list[cst.BaseStatement], name) -> WarpSpecialised | None:  # noqa: ANN001
    """The warp-specialised form of a ring whose steps' products the loop scales (one B scale per tile), or None
    where its producer slice is not plain scalar arithmetic, a partition's own names would shadow the kernel's, or
    the loop's statements the consumer runs (`consumed`) bind a value, or the loop variable, that the kernel reads
    after the loop (`carried_out`: later in the function, in another branch of an `if` a loop around runs again, or
    carried by a loop around into this loop's next run); the consumer returns the accumulator only."""
    ws = _ws_decision(ctx, plan, body, [], name)
    if ws is None or _kernel_names(ctx.function.node) & CONSUMER_NAMES - {plan.var}:
        return None
    consumer = f"_{ctx.function.name}_ws_consumer"
    if consumer in ctx.facts.functions or consumer in _kernel_names(ctx.function.node):
        return None
    made = set().union(*(assigned_names(s) for s in consumed), {plan.var}) - {plan.acc}
    if carried_out(ctx.source, ctx.function.node, loop, made, sorted(made)) is not None:
        return None
    return replace(ws, consumer=consumer, min_tile=SCALED_WS_MIN_TILE)


def _one_expression(node: cst.BaseExpression) -> str:
    """`node`'s code as one expression where it stands alone: an address written over several lines in the source
    (inside a call's parentheses there) in parentheses of its own."""
    text = code(node)
    return code(parenthesized(node)) if "\n" in text else text


def _scaled_warp_specialised(ctx: RuleContext, plan: LoopPlan, ws: WarpSpecialised, body: list[cst.BaseStatement],
                             name, stages: str, iters: str, index, text: LoopText,  # noqa: ANN001
                             smem: tuple[str, str, str], coords_of: dict, tile: str) -> list[str]:
    """The warp-specialised form of a ring whose steps' products the loop scales: the loader partition as for any
    ring, and a consumer partition of the kernel's own (`SCALED_CONSUMER_STEPS`) that runs the loop's statements
    around each wgmma, the kernel values they read passed to it."""
    free = _loader(ctx, plan, ws, body, index, coords_of)
    a, b = plan.loads
    a_ring, b_ring, ready = smem
    empty = name("empty")
    s_var = _barrier_var(ctx, name)
    mma = Wgmma(0, lambda s: (_view(a, f"a_ring.index({s})"), _view(b, f"b_ring.index({s})")), ("a_ring", "b_ring"),
                use_acc=False, hands_back=True)
    loop = partition_loop(SCALED_CONSUMER_STEPS, text, TmaCopy("ready", ()), mma, None)
    # The kernel values the loop reads before it binds them (the accumulator among them), in order of use.
    local = _kernel_names(ctx.function.node) | {name for name, _, _ in ctx.plan.declarations} | {tile} - {""}
    statements = list(cst.parse_module("\n".join(loop)).body)
    assert isinstance(statements[0], cst.For)
    taken: list[str] = []
    bound: set[str] = set()
    for statement in statements[0].body.body:  # type: ignore[union-attr]
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        if isinstance(small, (cst.Assign, cst.AnnAssign)) and small.value is not None:
            reads = read_names(small.value)
        else:
            reads = read_names(statement)
        taken += [n for n in sorted(reads) if n in local and n not in bound and n not in taken]
        bound |= assigned_names(statement)
    constexprs = _constexpr_names(ctx.function) | {name for name, _, _ in ctx.plan.declarations}
    params = ", ".join(f"{n}: gl.constexpr" if n in constexprs else n for n in taken)
    line = ctx.source.position(plan.loop)[0]
    ctx.module_functions.append("\n".join([
        "@gluon.jit",
        f"def {ws.consumer}({params}, a_ring, b_ring, ready, empty, num_iters):",
        f'    """Consumer partition of `{ctx.function.name}`\'s warp-specialised main loop (line {line} of the '
        "source): waits",
        "    for each slot the loader warp filled, multiplies it into a product from zero, hands the slot back once "
        "every",
        "    warpgroup has its product, and scales the product into the accumulator as the loop does. Returns the",
        "    accumulator as a 1-tuple (Triton 3.6's `warp_specialize` flattens the default partition's results).\"\"\"",
        "    NUM_STAGES: gl.constexpr = a_ring.shape[0]",
        *(indent(text_, "    ") for text_ in loop),
        f"    return ({plan.acc}, )",
    ]) + "\n")
    ctx.need("tma_aliases")
    args = ", ".join(free)
    consumer = f"({ws.consumer}, ({', '.join(taken)}, {a_ring}, {b_ring}, {ready}, {empty}, {iters}))"
    return _specialise(ws, plan.acc, empty, s_var, stages, consumer, f"({ws.loader}, ({args}, {a_ring}, {b_ring}, "
                       f"{ready}, {empty}, {iters}))", "these warps wait, multiply, scale and hand slots back")


def _persistent_form(ctx: RuleContext, plan: LoopPlan, loop: cst.For, body: list[cst.BaseStatement], name,  # noqa: ANN001
                     stages: str, ready: str, index, acc_in: str, rings: tuple[str, str], coords_of: dict,  # noqa: ANN001
                     count: str, condition: str) -> persistent.PersistentForm | None:
    """The pieces of the kernel's persistent form (`hopper_persistent`), or None where the kernel or its launches
    do not allow it (the non-persistent warp-specialised ring then stays)."""
    if persistent.eligible(ctx.function, loop, ctx.facts.functions) is not None:
        return None
    grid = persistent.launch_grid(ctx.source.module, ctx.function)
    if grid is None:
        return None
    a, b = plan.loads
    shapes = {op.descriptor: ctx.plan.descriptors[op.descriptor].block_shape for op in (a, b)}
    rows = shapes[a.descriptor][1 if a.transposed else 0]
    cols = shapes[b.descriptor][0 if b.transposed else 1]
    host = persistent.host_tile_condition(rows, cols, set(ctx.function.constexpr_names), WS_MIN_TILE)
    if host is None:
        return None
    a_smem, b_smem = rings
    empty = name("empty")
    s_var = _barrier_var(ctx, name)  # (a kernel variable `s` would be left bound to the loop's last value)
    text = _partition_text(plan, body, index, acc_in)
    copy = TmaCopy("ready", _copies(plan, coords_of))
    mma = Wgmma(1, lambda s: (_view(a, f"a_ring.index({s})"), _view(b, f"b_ring.index({s})")))
    consumer_loop = [
        *partition_loop(CONSUMER_STEPS, text, copy, mma, count, "(n_done + it)"),
        *mma.drain(plan.acc),
        "if gl.num_warps() > 4:",
        "    _cta_barrier()",
        "mbarrier.arrive(empty.index((n_done + num_iters + NUM_STAGES - 1) % NUM_STAGES), pred=num_iters > 0)",
        "n_done += num_iters",
    ]
    loader_loop = [*partition_loop(LOADER_STEPS, text, copy, None, count, "(n_done + it)"), "n_done += num_iters"]
    taken = _kernel_names(ctx.function.node)
    fixed = {"tile", "group_size", "first", "rows", "program_0", "program_1", "program_2", "n_done", "num_iters", "it", "slot", "NUM_STAGES", "a_ring", "b_ring", "ready", "empty"}
    if taken & fixed - {plan.var}:
        return None  # the partitions' own names would shadow the kernel's
    return persistent.PersistentForm(
        loop_statement=None, plain_statement=None, grid=grid,  # type: ignore[arg-type]
        host_condition=host,
        kernel_condition=condition,
        ring_lines=[
            *ring_depth(ctx, plan.loop, plan.num_stages).lines(stages),
            f"{a_smem} = gl.allocate_shared_memory({a.descriptor}.dtype, [{stages}, "
            f"{', '.join(shapes[a.descriptor])}], {a.descriptor}.layout)",
            f"{b_smem} = gl.allocate_shared_memory({b.descriptor}.dtype, [{stages}, "
            f"{', '.join(shapes[b.descriptor])}], {b.descriptor}.layout)",
            f"{ready} = gl.allocate_shared_memory(gl.int64, [{stages}, 1], mbarrier.MBarrierLayout())",
            f"{empty} = gl.allocate_shared_memory(gl.int64, [{stages}, 1], mbarrier.MBarrierLayout())",
            f"for {s_var} in gl.static_range({stages}):",
            f"    mbarrier.init({ready}.index({s_var}), count=1)",
            f"    mbarrier.init({empty}.index({s_var}), count=1)",
        ],
        ring_args=f"{a_smem}, {b_smem}, {ready}, {empty}", stages=stages, stage_bytes=copy.nbytes,
        invalidate_lines=[f"for {s_var} in gl.static_range({stages}):",
                          f"    mbarrier.invalidate({ready}.index({s_var}))",
                          f"    mbarrier.invalidate({empty}.index({s_var}))"],
        consumer_loop=consumer_loop, loader_loop=loader_loop, ws_loader=ctx.module_functions[-1])


class _Bound(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.found: set[str] = set()

    def visit_Param(self, node: cst.Param) -> None:
        self.found.add(node.name.value)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self.found |= names_in(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self.found |= names_in(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.found |= names_in(node.target)

    def visit_For(self, node: cst.For) -> None:
        self.found |= names_in(node.target)


def _kernel_names(function: cst.FunctionDef) -> set[str]:
    """Names the function binds: its parameters and every assignment or loop target in its body."""
    visitor = _Bound()
    function.visit(visitor)
    return visitor.found


def _constexpr_names(function) -> set[str]:  # noqa: ANN001 - JitFunction
    """Constexpr parameters and `X: tl.constexpr = ...` names of the function (a loader takes them as constexprs)."""
    names = set(function.constexpr_names)

    class _Ann(cst.CSTVisitor):
        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            if code(node.annotation.annotation).endswith("constexpr") and isinstance(node.target, cst.Name):
                names.add(node.target.value)

    function.node.visit(_Ann())
    return names


def _has_ws_config(ctx: RuleContext, tiles) -> bool:  # noqa: ANN001
    """Whether one of the kernel's own autotune configs has the warp-specialised ring's tile and warps."""
    (m, _k), (_k2, n) = tiles
    return any(isinstance(c.values.get(m), int) and isinstance(c.values.get(n), int)
               and c.values[m] * c.values[n] >= WS_MIN_TILE and (c.num_warps or 4) >= 8
               for c in ctx.function.autotune_configs)


def _add_ws_config(ctx: RuleContext, decorator: cst.Decorator, tiles  # noqa: ANN001
                   ) -> tuple[cst.Decorator, RingConfig] | None:
    """`@triton.autotune(configs=[...])` with one more `triton.Config` for the warp-specialised tile (WS_CONFIG), or
    None (see `add_config`)."""
    (m, k), (k2, n) = tiles
    if k != k2 or len({m, n, k}) < 3:
        return None
    (bm, bn, bk), warps, depth = WS_CONFIG
    return add_config(ctx, decorator, {m: bm, n: bn, k: bk}, warps, depth, "the warp-specialised ring's tile")


def _partition_text(plan: LoopPlan, body: list[cst.BaseStatement], index, acc_in: str = "") -> LoopText:  # noqa: ANN001
    """The loop as a warp-specialised partition runs it: the loop variable and producer slice under their own
    names (a partition has no consumer statements: the warp-specialised form is only chosen without them)."""
    return LoopText(plan.var, index, plan.acc, acc_in or plan.acc,
                    producer_before=[code(body[i]) for i in plan.producer_before()],
                    producer_after=[code(body[i]) for i in plan.producer_after()])


def _copies(plan: LoopPlan, coords_of: dict) -> tuple[tuple[str, str, str], ...]:  # noqa: ANN001
    """The TMA copies of a partition's loop: each operand's descriptor and coordinates, into `a_ring`/`b_ring`."""
    return tuple((op.descriptor, code(coords_of[id(op)]), ring) for op, ring in zip(plan.loads, ("a_ring", "b_ring")))


def _view(load: OperandLoad, slot: str) -> str:
    """The MMA operand for `load`'s ring slot: the slot itself, or a transposed view of it (`tl.trans(w)`)."""
    return f"{slot}.permute((1, 0))" if load.transposed else slot
