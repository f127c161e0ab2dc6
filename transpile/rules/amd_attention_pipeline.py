"""AMD: warp-pipeline a flash-attention main loop into four `gl.amd.warp_pipeline_stage` blocks over K/V LDS rings.

Matches: the two-dot attention loop of `transpile.analysis.attention` (``s = tl.dot(q, tl.trans(k))``, an online
softmax of ``s`` with row reductions, ``acc = tl.dot(p, v, acc)``), with the `StagePlan` of
`transpile.analysis.stages` (stages ``lds_read``, ``copy_qk``, ``softmax``, ``pv``).
Emits, under a compile-time test that every warp can take rows of its own and that the rings fit the LDS (else the
loop runs as translated): ``gl.static_assert`` on 8 warps; an MMA layout with all warps along M (so that the
softmax's row reductions are lane shuffles inside a warp and P reaches the PV operand layout in registers: no stage
holds a barrier or LDS scratch of its own); Q converted once to its MMA operand layout; a ring of ``NUM_STAGES``
LDS slots for K and for V filled ``NUM_STAGES - 1`` iterations ahead through registers; layout conversions of
``<loop variable> + offsets`` hoisted out of the loop as conversions of the offsets.
Targets: gfx942, gfx950, gfx1250.
"""

from __future__ import annotations

import textwrap

import libcst as cst

from transpile.analysis.attention import AttentionPlan
from transpile.analysis.pipeline import OperandLoad
from transpile.analysis.stages import PIPELINE_WARPS, StagePlan, StageRefusal, hoistable_convert, plan_stages
from transpile.cst_utils import assigned_names, calls_in, names_in
from transpile.rules.base import Example, Rule, RuleContext
from transpile.rules.pipeline_text import LoopRange, code, indent, later_load, loop_namer, next_names, rename, statements

EXAMPLE = (
    "import triton\nimport triton.language as tl\n\n@triton.jit\n"
    "def attn(q_ptr, k_ptr, v_ptr, o_ptr, N_CTX, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):\n"
    "    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)\n"
    "    offs_n = tl.arange(0, BLOCK_N)\n    offs_d = tl.arange(0, D)\n"
    "    q = tl.load(q_ptr + offs_m[:, None] * D + offs_d[None, :])\n"
    "    m_i = tl.full([BLOCK_M], -float('inf'), dtype=tl.float32)\n"
    "    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)\n"
    "    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)\n"
    "    for start_n in range(0, N_CTX, BLOCK_N):\n"
    "        offs_kv = start_n + offs_n\n"
    "        k = tl.load(k_ptr + offs_kv[:, None] * D + offs_d[None, :], mask=offs_kv[:, None] < N_CTX, other=0.0)\n"
    "        qk = tl.dot(q, tl.trans(k))\n"
    "        qk = tl.where(offs_kv[None, :] < N_CTX, qk, -float('inf'))\n"
    "        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))\n"
    "        p = tl.exp2(qk - m_ij[:, None])\n"
    "        alpha = tl.exp2(m_i - m_ij)\n"
    "        l_i = l_i * alpha + tl.sum(p, axis=1)\n"
    "        acc = acc * alpha[:, None]\n"
    "        v = tl.load(v_ptr + offs_kv[:, None] * D + offs_d[None, :], mask=offs_kv[:, None] < N_CTX, other=0.0)\n"
    "        acc = tl.dot(p.to(tl.float16), v, acc)\n"
    "        m_i = m_ij\n"
    "    tl.store(o_ptr + offs_m[:, None] * D + offs_d[None, :], (acc / l_i[:, None]).to(tl.float16))\n"
)

STAGE_LABELS = ("lds_read", "copy_qk", "softmax", "pv")


class AMDAttentionWarpPipeline(Rule):
    name = "amd-attention-warp-pipeline"
    matches = "a flash-attention main loop (two dots around an online softmax of the first)"
    emits = "K/V LDS rings and four warp_pipeline_stage blocks (lds_read, copy_qk, softmax, pv), all warps along M"
    examples = (
        Example(EXAMPLE, (
            "mma_layout: gl.constexpr = _mma_layout(BLOCK_M, [D, BLOCK_N], gl.float16, gl.num_warps(), warps_along_m=True)",
            'with gl.amd.warp_pipeline_stage("lds_read", priority=1):',
            "k_t = k_ring.index(slot).permute([1, 0]).load(gl.DotOperandLayout(1, acc.type.layout, "
            "_mma_k_width(k_ring.dtype, acc.type.layout)))",
            'with gl.amd.warp_pipeline_stage("softmax", priority=0):',
            'with gl.amd.warp_pipeline_stage("pv", priority=0):',
            "offs_n_cvt = gl.convert_layout(offs_n, gl.SliceLayout(0, mma_layout))",
        ), "gfx950"),
    )

    def leave_For(self, ctx: RuleContext, original: cst.For, updated: cst.For):  # noqa: ANN201
        sp = plan_stages(ctx.source, ctx.function, original, ctx.plan, "registers", ctx.target.shared_memory_bytes)
        if not isinstance(sp, StagePlan) or not isinstance(sp.loop, AttentionPlan):
            return updated  # other loops, and refusals: the GEMM rule reports them
        if ctx.slower_than_triton(original, "attention ring"):
            return updated  # the profitability policy keeps the kernel as Triton (UNPROFITABLE_RINGS)
        ctx.need("lds_ring")
        ctx.num_warps = PIPELINE_WARPS
        ctx.mma_warps_along_m = True
        text = _emit(ctx, sp, original, updated.with_changes(leading_lines=[]))
        if isinstance(text, StageRefusal):
            ctx.diagnostics.append(ctx.source.diagnostic(text.node, "TT040",
                                                         f"main loop not pipelined: {text.reason}"))
            return updated
        ctx.pipelined_loop(original, sp)
        return cst.FlattenSentinel(statements(text, updated.leading_lines))


class _Substitute(cst.CSTTransformer):
    """Replaces hoistable conversions, the transpose of K and the names of Q/K in the translated statements."""

    def __init__(self, converts: dict[str, tuple[str, str]], names: dict[str, str], k: str, k_t: str) -> None:
        super().__init__()
        self.converts, self.names, self.k, self.k_t = converts, names, k, k_t

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        func = code(updated_node.func)
        arg = updated_node.args[0].value if updated_node.args else None
        if func == "gl.convert_layout" and isinstance(arg, cst.Name) and arg.value in self.converts:
            var, hoisted = self.converts[arg.value]
            return cst.parse_expression(f"({var} + {hoisted})")
        if func == "gl.permute" and isinstance(arg, cst.Name) and arg.value == self.k:
            return cst.Name(self.k_t)
        return updated_node

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        return updated_node.with_changes(value=self.names.get(updated_node.value, updated_node.value))


def _emit(ctx: RuleContext, sp: StagePlan, original: cst.For, updated: cst.For) -> str | StageRefusal:
    att: AttentionPlan = sp.loop  # type: ignore[assignment]
    body = list(updated.body.body)  # type: ignore[union-attr]
    name = loop_namer(ctx, original)
    prologue_i = name("i")  # the prologue's loop variable: a name the kernel does not use (a static_range
    # loop leaves its variable bound to the last value, which would change a kernel variable `i`)
    stages, it, slot, nxt, nxt_slot, iters = (name("NUM_STAGES"), name("it"), name("slot"), name("next_it"),
                                              name("next_slot"), name("num_iters"))
    k_ring, v_ring, k_t, q_op = name(f"{att.k.name}_ring"), name(f"{att.v.name}_ring"), name(f"{att.k.name}_t"), \
        name(f"{att.q}_op")
    rings = {att.k.name: k_ring, att.v.name: v_ring}
    keys, head = sp.rings[0].shape
    source_body = list(original.body.body)  # type: ignore[union-attr]
    rows = ctx.plan.dots[next(c for c in calls_in(source_body[att.acc_index]) if c in ctx.plan.dots)].shape[0]
    dtype = f"{att.q}.dtype"

    # Conversions of `<loop variable> + offsets` in the loop: the offsets are converted once, before the loop.
    flow = sp.dataflow
    converts: dict[str, tuple[str, str]] = {}
    hoisted: list[str] = []
    for facts in flow.statements:
        for node, what in facts.barriers:
            if what != "layout conversion":
                continue
            found = hoistable_convert(node, original, flow)
            if found is None:
                return StageRefusal(node, "a layout conversion inside the loop that cannot be hoisted out of it")
            var, offsets = found
            if node.value not in converts:  # type: ignore[union-attr]
                target = name(f"{offsets}_cvt")
                layout = ctx.plan.layout_expr(ctx.plan.converts[node])
                hoisted.append(f"{target} = gl.convert_layout({offsets}, {layout})")
                converts[node.value] = (var, target)  # type: ignore[union-attr]

    span = LoopRange.of(updated)
    count, index = span.count, span.value

    renames = next_names(att.var, att.producer, body, name)
    loads = {att.k.index: att.k, att.v.index: att.v}
    # K loaded as [HEAD_DIM, BLOCK_N] feeds the first dot as it is: the dot reads `k_t`, the slot loaded in lds_read.
    substitute = _Substitute(converts, {att.q: q_op, **({} if att.k_transposed else {att.k.name: k_t})},
                             att.k.name, k_t)
    consumer = [i for i in range(len(body)) if i not in loads]
    consumer_text = {i: code(body[i].visit(substitute)) for i in consumer}
    used_by_consumer: set[str] = set()
    for i in consumer:
        if i not in att.producer:
            used_by_consumer |= names_in(cst.parse_module(consumer_text[i]))
    consumer = [i for i in consumer if i not in att.producer or assigned_names(body[i]) & used_by_consumer]

    def producer(iteration: str, slot_expr: str, pad: str) -> list[str]:
        lines = [f"{pad}{renames[att.var]} = {index(iteration)}"]
        lines += [indent(rename(body[i], renames), pad) for i in att.producer]
        for i, tile in sorted(loads.items()):
            load = OperandLoad(i, tile.name, "", tile.call, tile.pointer, tile.mask, None)
            value = later_load(body[i], renames, iteration, iters, load)
            lines.append(f"{pad}{rings[tile.name]}.index({slot_expr}).store({value})")
        return lines

    layout = f"{att.acc}.type.layout"
    k_view = f"{k_ring}.index({slot}).permute([1, 0])" if att.k_transposed else f"{k_ring}.index({slot})"
    fits = (f"{rows} >= 16 * gl.num_warps() and _lds_ring_bytes({stages}, [{keys}, {head}], {dtype}, "
            f"[{keys}, {head}], {dtype}) <= {sp.lds_limit}")

    def stage_lines(indices: list[int]) -> list[str]:
        return [indent(consumer_text[i], "        ") for i in indices if i in consumer]

    before = [i for i in range(att.scores_index + 1) if i in consumer]
    between = [i for i in range(att.scores_index + 1, att.acc_index) if i in consumer]
    after = [i for i in range(att.acc_index, len(body)) if i in consumer]
    uses_var = any(att.var in names_in(cst.parse_module(consumer_text[i])) for i in consumer)
    loop = [f"for {it} in range({iters}):"]
    if uses_var:
        loop.append(f"    {att.var} = {index(it)}")
    loop += [
        f"    {slot} = {it} % {stages}",
        '    with gl.amd.warp_pipeline_stage("lds_read", priority=1):',
        f"        {k_t} = {k_view}.load(gl.DotOperandLayout(1, {layout}, _mma_k_width({k_ring}.dtype, {layout})))",
        f"        {att.v.name} = {v_ring}.index({slot}).load(gl.DotOperandLayout(1, {layout}, "
        f"_mma_k_width({v_ring}.dtype, {layout})))",
        '    with gl.amd.warp_pipeline_stage("copy_qk", priority=0):',
        f"        {nxt} = {it} + {stages} - 1",
        f"        {nxt_slot} = {nxt} % {stages}",
        *producer(nxt, nxt_slot, "        "),
        *stage_lines(before),
        '    with gl.amd.warp_pipeline_stage("softmax", priority=0):',
        *stage_lines(between),
        '    with gl.amd.warp_pipeline_stage("pv", priority=0):',
        *stage_lines(after),
    ]
    k_tile = f"{keys}, {head}" if att.k_transposed else f"{head}, {keys}"  # the K slot has the loaded tile's shape
    pipelined = [
        f"{k_ring} = gl.allocate_shared_memory({dtype}, [{stages}, {k_tile}], _lds_layout([{k_tile}], "
        f"{dtype}, 1))",
        f"{v_ring} = gl.allocate_shared_memory({dtype}, [{stages}, {keys}, {head}], _lds_layout([{keys}, {head}], "
        f"{dtype}, 1))",
        f"{q_op} = gl.convert_layout({att.q}, gl.DotOperandLayout(0, {layout}, _mma_k_width({att.q}.dtype, {layout})))",
        *hoisted,
        f"{iters} = {count}",
        "# Prologue: the K and V tiles of the first NUM_STAGES - 1 iterations go into their slots.",
        f"for {prologue_i} in gl.static_range({stages} - 1):\n" + "\n".join(producer(prologue_i, prologue_i, "    ")),
        "\n".join(loop),
    ]
    paragraph = (
        "Main loop, warp-pipelined by triton-transpile: two warp groups of 4 warps run the four stages below one "
        "stage apart. `lds_read` takes this iteration's K^T and V from rings of NUM_STAGES LDS slots; `copy_qk` loads "
        "the K and V tiles of iteration it + NUM_STAGES - 1 into their slots and computes S = Q K^T; `softmax` updates "
        "the running max and sum and rescales the accumulator; `pv` adds P V. Every warp owns rows of its own (the MMA "
        "layout puts all warps along M), so the row reductions are lane shuffles and P reaches its operand layout in "
        "registers: no stage needs a barrier or LDS scratch of its own. Tiles past the end read as zeros."
    )
    text = "\n".join([
        *textwrap.wrap(paragraph, 114, initial_indent="# ", subsequent_indent="# "),
        f'gl.static_assert(gl.num_warps() == {PIPELINE_WARPS}, "the warp-pipelined main loop needs num_warps='
        f'{PIPELINE_WARPS}: "\n                 "two warp groups of 4 warps alternate between its stages")',
        f"{stages}: gl.constexpr = {sp.slots}",
        f"if {fits}:",
        indent("\n".join(pipelined), "    "),
        "else:",
        f"    # Fewer than 16 rows per warp, or rings larger than the {sp.lds_limit // 1024} KiB of LDS: the loop runs "
        "as translated.",
        indent(code(updated), "    "),
    ])
    return text + "\n"
