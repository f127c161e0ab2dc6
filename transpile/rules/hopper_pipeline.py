"""sm90: pipeline a descriptor GEMM main loop with a TMA ring and asynchronous wgmma.

Matches: ``for k in range(...)`` / ``tl.range(..., num_stages=n)`` whose body loads the two operands of one
``acc = tl.dot(a, b, acc)`` with ``desc.load(...)`` (the plan of `transpile.analysis.pipeline`).
Emits: an ``NUM_STAGES``-deep ring of shared-memory tiles per operand with one mbarrier per slot (allocate, ``init``,
``expect`` with the tile bytes, ``wait`` on the slot's phase, ``invalidate`` after the loop); a prologue that starts
the copies of the first ``NUM_STAGES - 1`` iterations; in the loop, ``warpgroup_mma(..., is_async=True)`` straight
from the ring, then ``warpgroup_mma_wait(1, ...)``: the previous wgmma has then finished reading its slot, and that
slot is refilled with the tiles of iteration ``it + NUM_STAGES - 1``. One final ``warpgroup_mma_wait(0)`` makes the
accumulator available to the epilogue. A loop the analysis cannot pipeline is left as it is, with a TT040 note.
Targets: sm90.
"""

from __future__ import annotations

import libcst as cst

from transpile.analysis.pipeline import LoopPlan, LoopRefusal, plan_loop
from transpile.cst_utils import calls_in, names_in
from transpile.rules.base import Example, Rule, RuleContext
from transpile.rules.pipeline_text import (LoopRange, code, consumer_statements, indent, loop_namer, next_names, rename,
                                           ring_depth_lines)

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
        ), "sm90"),
    )

    def leave_For(self, ctx: RuleContext, original: cst.For, updated: cst.For):  # noqa: ANN201
        default = ctx.function.num_stages or 3
        plan = plan_loop(ctx.source, original, ctx.plan, default)
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
        ctx.pipelined_loop(original)
        return cst.FlattenSentinel([cst.parse_statement(s) for s in self._emit(ctx, plan, updated)])

    def _emit(self, ctx: RuleContext, plan: LoopPlan, updated: cst.For) -> list[str]:
        """The pipelined loop for 16-bit operands, under a compile-time test that keeps the translated loop for
        operands of other widths."""
        body = list(updated.body.body)  # type: ignore[union-attr]
        name = loop_namer(ctx, plan.loop)
        stages, ready, it, slot, nxt, nxt_slot, iters = (name("NUM_STAGES"), name("ready"), name("it"), name("slot"),
                                                         name("next_it"), name("next_slot"), name("num_iters"))
        a, b = plan.loads
        a_smem, b_smem = name(f"{a.name}_smem"), name(f"{b.name}_smem")
        infos = {op.descriptor: ctx.plan.descriptors[op.descriptor] for op in plan.loads}
        span = LoopRange.of(updated)
        count, index = span.count, span.value

        # Producer statements, re-evaluated for a later iteration with their names suffixed `_next`.
        renames = next_names(plan.var, plan.producer, body, name)

        def producer(iteration: str, slot_expr: str, pad: str) -> list[str]:
            lines = [f"{pad}{renames[plan.var]} = {index(iteration)}"]
            lines += [f"{pad}{rename(body[i], renames)}" for i in plan.producer]
            nbytes = " + ".join(f"{op.descriptor}.block_type.nbytes" for op in plan.loads)
            lines.append(f"{pad}mbarrier.expect({ready}.index({slot_expr}), {nbytes}, {iteration} < {iters})")
            for op, smem in ((a, a_smem), (b, b_smem)):
                coords = _load_coords(body[op.index])
                lines.append(f"{pad}_tma_async_load({op.descriptor}, {rename(coords, renames)}, "
                             f"{ready}.index({slot_expr}), {smem}.index({slot_expr}), {iteration} < {iters})")
            return lines

        ctx.need("tma_aliases")
        dot_call = _dot_call(body[plan.dot_index])
        acc_in = code(dot_call.args[2].value) if dot_call is not None and len(dot_call.args) > 2 else plan.acc
        consumer = consumer_statements(plan.producer, {op.index for op in plan.loads}, body)
        before = [body[i] for i in consumer if i < plan.dot_index]
        after = [body[i] for i in consumer if i > plan.dot_index]
        uses_var = any(plan.var in names_in(s) for s in [*before, *after])

        header = [
            "# Main loop, pipelined by triton-transpile: the tiles of A and B stream through a ring of NUM_STAGES",
            "# shared-memory slots filled by TMA ahead of use (one mbarrier per slot); each wgmma reads its slot",
            "# directly and runs asynchronously, one stays in flight, and a slot is refilled only once the wgmma",
            "# that read it has completed.",
        ]
        lines = [
            *ring_depth_lines(ctx, plan.loop, plan.num_stages, stages),
            f"{a_smem} = gl.allocate_shared_memory({a.descriptor}.dtype, [{stages}, "
            f"{', '.join(infos[a.descriptor].block_shape)}], {a.descriptor}.layout)",
            f"{b_smem} = gl.allocate_shared_memory({b.descriptor}.dtype, [{stages}, "
            f"{', '.join(infos[b.descriptor].block_shape)}], {b.descriptor}.layout)",
            f"{ready} = gl.allocate_shared_memory(gl.int64, [{stages}, 1], mbarrier.MBarrierLayout())",
            f"for s in gl.static_range({stages}):\n    mbarrier.init({ready}.index(s), count=1)",
            f"{iters} = {count}",
            "# Prologue: start the copies of the first NUM_STAGES - 1 iterations.",
        ]
        prologue = producer("i", "i", "    ")
        lines.append(f"for i in gl.static_range({stages} - 1):\n" + "\n".join(prologue))
        loop = [f"for {it} in range({iters}):"]
        if uses_var:
            loop.append(f"    {plan.var} = {index(it)}")
        loop += [f"    {code(s)}" for s in before]
        loop += [
            f"    {slot} = {it} % {stages}",
            f"    mbarrier.wait({ready}.index({slot}), ({it} // {stages}) & 1)",
            f"    {plan.acc} = warpgroup_mma({a_smem}.index({slot}), {b_smem}.index({slot}), {acc_in}, is_async=True)",
            "    # The previous wgmma has now finished reading its slot: refill that slot below (with two",
            "    # warpgroups, once both have: the barrier keeps one from refilling a slot the other still reads).",
            f"    {plan.acc}, _, _ = warpgroup_mma_wait(1, deps=[{plan.acc}, {a_smem}.index({slot}), "
            f"{b_smem}.index({slot})])",
            "    if gl.num_warps() > 4:",
            "        _cta_barrier()",
        ]
        loop += [f"    {code(s)}" for s in after]
        loop.append(f"    {nxt} = {it} + {stages} - 1")
        loop.append(f"    {nxt_slot} = {nxt} % {stages}")
        loop += producer(nxt, nxt_slot, "    ")
        lines.append("\n".join(loop))
        lines.append(f"{plan.acc} = warpgroup_mma_wait(0, deps=[{plan.acc}])")
        lines.append(f"for s in gl.static_range({stages}):\n    mbarrier.invalidate({ready}.index(s))")
        # `_tma_load` stays: the translated loop (the branch for 8- and 32-bit operands) calls it.
        ctx.need("cta_barrier")
        pipelined = indent("\n".join(lines), "    ")
        original = indent(code(updated), "    ")
        condition = " and ".join(f"{op.descriptor}.dtype.primitive_bitwidth == 16" for op in plan.loads)
        text = "\n".join([
            *header,
            f"if {condition}:",
            pipelined,
            "else:",
            "    # 8- and 32-bit operands: wgmma wants B K-major in shared memory, which this ring does not lay out;",
            "    # the loop runs as translated, unpipelined.",
            original,
        ])
        return [text + "\n"]


def _load_coords(statement: cst.BaseStatement) -> cst.BaseExpression:
    value = statement.body[0].value  # type: ignore[union-attr]
    # after DescriptorsAsTMA: `_tma_load(desc, coords, layout)`
    return value.args[1].value


def _dot_call(statement: cst.BaseStatement) -> cst.Call | None:
    value = statement.body[0].value  # type: ignore[union-attr]
    return value if isinstance(value, cst.Call) else None
