"""sm90: pipeline a flash-attention main loop (S = Q K^T, online softmax, acc += P V) with cp.async and wgmma.

Matches: the two-dot loop of `transpile.analysis.attention` (K and V pointer tile loads, ``s = tl.dot(q,
tl.trans(k))``, a softmax of ``s`` whose ``p`` feeds ``acc = tl.dot(p.to(...), v, acc)``).
Emits, under a compile-time test that the K/V rows are contiguous (the launcher turns a stride equal to 1 into a
constexpr; cp.async needs that to copy 16-byte vectors), with the loop as translated in the other branch:
  * Q stored once into shared memory (NVMMA layout) before the loop, loaded 16 bytes per thread for it: every
    QK^T wgmma reads it there; the K/V address tiles re-evaluated in the copy layout from their 1-D offsets;
  * a ``NUM_STAGES``-deep ring of K and V tiles in shared memory, filled by cp.async (one commit group per tile,
    masks kept, so ragged sequence lengths read zeros) ``NUM_STAGES - 1`` iterations ahead of use;
  * per iteration: issue the QK^T wgmma, then the previous iteration's PV wgmma (P from registers, as the wgmma A
    operand), wait for the first only (``warpgroup_mma_wait(1)``), so that the softmax runs while the tensor cores
    still work on PV; wait for PV where the accumulator is rescaled; refill the slots the finished wgmmas read.
    The PV of iteration ``i`` is issued in iteration ``i + 1`` (and the last one after the loop); the first
    iteration's "previous PV" multiplies a zero P by a zero-filled V slot, which keeps the loop body uniform;
  * a score mask that a scalar test shows all true on most tiles (`transpile.analysis.uniform_mask`) built and
    applied only on the tiles where it is not (``if uniform: qk = qk * scale else: <as written>``).
By default (the profitability policy, measured on an H100) the ring is emitted only where that test leaves out a
mask comparing rows against keys (causal) in a one-loop kernel; the kernel is then bound to a launcher
(`_TMAOrTriton`) that runs the Gluon kernel for launches whose tensors have 16-byte aligned rows and, where a
constexpr flag guards the causal term, that set the flag; the source kernel runs the others (TT043). An autotuned
kernel gets ATTENTION_CONFIG's tile as one more config. Elsewhere the kernel stays Triton (TT041).
A two-dot loop of another shape is left as it is, with a TT040 note naming what does not fit.
Targets: sm90.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import libcst as cst

from transpile.analysis.attention import (
    AttentionPlan,
    plan_attention_loop,
    rescale_factor,
    swapped_axes,
    transposed_k,
    trip_count_axis,
)
from transpile.analysis.attention import bare_use as _bare_use
from transpile.analysis.attention import elementwise as _elementwise
from transpile.analysis.attention import subscripts as _subscripts
from transpile.analysis.attention import top_definitions as _definitions
from transpile.analysis.layouts import Term, name_terms
from transpile.analysis.pipeline import LoopRefusal, flattened_guards, guard_reads, guarded_indices, loop_body
from transpile.analysis.uniform_mask import UniformMask, loop_uniform_masks
from transpile.cst_utils import (
    assigned_names,
    bound_names,
    broadcast_axis,
    calls_in,
    names_in,
    parenthesized,
    product_factors,
    read_names,
    single_assign,
    sum_terms,
    unparenthesized,
)
from transpile.cst_walk import preorder
from transpile.discover import (
    TRITON_AUTOTUNE,
    decorator_target,
    language_name,
)
from transpile.lowering.sm90 import ATTENTION_STEADY, WGMMA_ROWS, AttentionStep, wgmma_rows
from transpile.rules.base import Counterexample, Example, Rule, RuleContext
from transpile.rules.hopper_schedule import (
    ATTENTION_CONFIG,
    RingOperand,
    Sm90Ring,
    WaitGroups,
    add_config,
    kernel_configs,
    least_value,
)
from transpile.rules.pipeline_text import (
    LoopRange,
    indent,
    loop_namer,
    next_names,
    rename,
    ring_depth,
)

# The least number of programs along the grid axis that bounds a causal attention loop (the query blocks of the
# longest prompt) for which the ring runs: on an H200, packed prompts of 256 and 512 tokens (2 and 4 blocks of 128)
# ran at 0.80x and 0.94x the source kernel, 1024 (8) at 1.10x but a mix of prompts up to 1024 tokens at 0.93x, a mix
# up to 2000 tokens (16) at 1.04x and 2048 (16) at 1.24x (lightllm's context attention; bench/RESULTS.md).
GRID_LEAST = 16

EXAMPLE = (
    "import triton\nimport triton.language as tl\n\n@triton.jit\n"
    "def attn(q_ptr, k_ptr, v_ptr, o_ptr, stride_n, stride_d, N_CTX, D: tl.constexpr, BM: tl.constexpr,\n"
    "         BN: tl.constexpr):\n"
    "    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)\n    offs_n = tl.arange(0, BN)\n"
    "    offs_d = tl.arange(0, D)\n"
    "    q = tl.load(q_ptr + offs_m[:, None] * stride_n + offs_d[None, :] * stride_d)\n"
    "    k_ptrs = k_ptr + offs_n[:, None] * stride_n + offs_d[None, :] * stride_d\n"
    "    v_ptrs = v_ptr + offs_n[:, None] * stride_n + offs_d[None, :] * stride_d\n"
    "    m_i = tl.full([BM], -float('inf'), dtype=tl.float32)\n    l_i = tl.zeros([BM], dtype=tl.float32)\n"
    "    acc = tl.zeros([BM, D], dtype=tl.float32)\n"
    "    for start_n in range(0, N_CTX, BN):\n"
    "        mask = (start_n + offs_n)[:, None] < N_CTX\n"
    "        k = tl.load(k_ptrs + start_n * stride_n, mask=mask, other=0.0)\n"
    "        qk = tl.dot(q, tl.trans(k))\n"
    "        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))\n        p = tl.exp2(qk - m_ij[:, None])\n"
    "        alpha = tl.exp2(m_i - m_ij)\n        l_i = l_i * alpha + tl.sum(p, axis=1)\n"
    "        acc = acc * alpha[:, None]\n"
    "        v = tl.load(v_ptrs + start_n * stride_n, mask=mask, other=0.0)\n"
    "        acc = tl.dot(p.to(tl.float16), v, acc)\n        m_i = m_ij\n"
    "    tl.store(o_ptr + offs_m[:, None] * stride_n + offs_d[None, :] * stride_d, acc / l_i[:, None])\n"
)

def _text(node: cst.CSTNode, names: dict[str, str] | None = None) -> str:
    return rename(node, names or {})


class HopperAttentionPipeline(Rule):
    name = "hopper-attention-pipeline"
    matches = "a main loop with two dots around an online softmax (flash attention) whose K and V are pointer loads"
    emits = ("Q in shared memory once, a cp.async ring of K/V tiles, async QK^T and PV wgmmas with PV kept in flight "
             "across the softmax")
    examples = (
        Example(EXAMPLE, (
            "if isinstance(stride_d, int) and acc.shape[0] >= 64:",
            "k_ptrs_ring = k_ptr + offs_n_ring[:, None] * stride_n + offs_d_ring[None, :] * stride_d",
            "offs_m_stage = gl.convert_layout(offs_m, gl.SliceLayout(1, q_layout_))",
            "q_smem = gl.allocate_shared_memory(q.dtype, q.shape, gl.NVMMASharedLayout.get_default_for(q.shape, "
            "q.dtype), gl.load(q_ptr + offs_m_stage[:, None] * stride_n + offs_d_stage[None, :] * stride_d))",
            "if i < num_iters:",
            "_cp_async_load(k_smem.index(i), k_ptrs_ring + start_n_next * stride_n, mask=mask_next)",
            "async_copy.wait_group(2 * NUM_STAGES - 3)",
            "qk = warpgroup_mma(q_smem, k_smem.index(slot).permute((1, 0)), gl.zeros([BM, BN], "
            "_acc_dtype(q_ptr.dtype.element_ty), layout=mma_layout), is_async=True)",
            "acc = warpgroup_mma(p_prev, v_smem.index(prev_slot), gl.convert_layout(acc, pv_layout), is_async=True)",
            "qk, _ = warpgroup_mma_wait(1, deps=[qk, k_smem.index(slot)])",
            "acc, _ = warpgroup_mma_wait(0, deps=[acc, v_smem.index(prev_slot)])",
            "p_prev = gl.convert_layout(p.to(gl.float16), p_layout)",
            "acc = _dot(p.to(gl.float16), v, acc)",
        ), "sm90"),
    )
    counterexamples = (
        # scores accumulated onto a tile the loop does not zero: not the online softmax the ring schedules
        Counterexample(EXAMPLE.replace("qk = tl.dot(q, tl.trans(k))",
                                       "qk = tl.dot(q, tl.trans(k), tl.zeros([BM, BN], dtype=tl.float32) + 1.0)"),
                       ("q_smem = gl.allocate_shared_memory(", "_cp_async_load(k_smem"), "TT040",
                       "attention loop: the first dot has an accumulator", "sm90",
                       gluon_always=True),
    )

    def leave_For(self, ctx: RuleContext, original: cst.For, updated: cst.For):  # noqa: ANN201
        # (a loop with an iteration guard, `if kbid:` around the iteration's work, is planned on the guard's
        # statements: the ring runs them under its test, `AttentionStep.guard`)
        with flattened_guards():
            return self._leave_for(ctx, original, updated)

    def _leave_for(self, ctx: RuleContext, original: cst.For, updated: cst.For):  # noqa: ANN202
        default = ctx.function.num_stages or 3
        plan = plan_attention_loop(ctx.source, original, ctx.plan, default)
        if plan is None:
            return updated
        if isinstance(plan, LoopRefusal):
            ctx.diagnostics.append(ctx.source.diagnostic(plan.node, "TT040", f"main loop not pipelined: {plan.reason}"))
            return updated
        if not plan.k_transposed:
            # K read as [HEAD_DIM, BLOCK_N] (keys along the columns, the head dimension contiguous down the rows):
            # the ring's cp.async copies move 16-byte vectors along a tile's last dimension, so it copies K through
            # its transposed addresses into [BLOCK_N, HEAD_DIM] slots, which QK^T reads as a transposed view.
            view = transposed_k(plan, ctx.function.node, ctx.plan, "the cp.async ring", loop_names=True)
            if isinstance(view, LoopRefusal):
                ctx.diagnostics.append(ctx.source.diagnostic(view.node, "TT040",
                                                             f"main loop not pipelined: {view.reason}"))
                return updated
            # Its 2-D address names are re-evaluated transposed from their 1-D parts: converting one as it is would
            # read K untransposed.
            probe = _Relayout(ctx, name_terms(ctx.plan), str, [], view.k_definitions, view.k_settled)
            # (a name the loop binds before the K load is bound again, transposed, by the ring's copies)
            in_loop = set().union(*(assigned_names(loop_body(original)[i]) for i in view.producer))
            stuck = sorted(n for n in view.k_definitions if n not in in_loop and probe.expression_of(n) is None)
            if stuck:
                ctx.diagnostics.append(ctx.source.diagnostic(plan.k.call, "TT040", (
                    "main loop not pipelined: attention loop: the K tile is loaded as [HEAD_DIM, BLOCK_N], which the "
                    f"cp.async ring copies through its transposed addresses, and `{stuck[0]}` cannot be re-evaluated "
                    "transposed from index vectors and scalars")))
                return updated
            plan = view
        body = list(updated.body.body)  # type: ignore[union-attr]
        guarded = guarded_indices(original)
        if guarded is not None:  # (the guard's statements read in its place, as the planner read them)
            at = guarded[1].start
            body[at:at + 1] = list(body[at].body.body)  # type: ignore[attr-defined]
        if len(body) != len(loop_body(original)):
            ctx.diagnostics.append(ctx.source.diagnostic(original, "TT040", "main loop not pipelined: attention "
                                                         "loop: an earlier rule changed its statements"))
            return updated
        step = plan.range_args[2] if len(plan.range_args) > 2 else None
        if step is not None and not _positive(ctx, step):
            # (the ring counts iterations as cdiv(hi - lo, step), which only a positive step gives right)
            ctx.diagnostics.append(ctx.source.diagnostic(step, "TT040", (
                "main loop not pipelined: attention loop: a step that is not a positive number or constexpr "
                "(the ring counts iterations up from the start)")))
            return updated
        statements = loop_body(original)
        created = next((c for i in plan.producer for c in calls_in(statements[i])
                        if ctx.language(c.func) in ("arange", "core.arange")
                        and _ring_vector(ctx, plan, statements[i]) is None
                        and _index_load(ctx, plan, statements[i]) is None), None)
        if created is not None:
            # The ring re-evaluates the K/V addresses for later iterations in its copy layout from the loop's
            # producer statements; an index vector made in the loop has the layout of its uses in the softmax.
            ctx.diagnostics.append(ctx.source.diagnostic(created, "TT040", (
                "main loop not pipelined: attention loop: the K/V addresses use an index vector made in the loop "
                "(`tl.arange` here); the cp.async ring re-evaluates them ahead of use from vectors made before "
                "the loop: make `tl.arange(0, BLOCK_N)` before the loop and add `start_n` to it in the loop")))
            return updated
        walk = _AddressTerms(ctx, plan)
        strides = _inner_strides(ctx, plan, walk)
        copy_nodes = _copy_nodes(ctx, plan, body)
        shared = _shared_vector(ctx, plan, copy_nodes) if not isinstance(copy_nodes, LoopRefusal) else None
        for refusal in (strides, copy_nodes, shared):
            if isinstance(refusal, LoopRefusal):
                ctx.diagnostics.append(ctx.source.diagnostic(refusal.node, "TT040",
                                                             f"main loop not pipelined: {refusal.reason}"))
                return updated
        assert not isinstance(strides, LoopRefusal) and not isinstance(copy_nodes, LoopRefusal)
        # The ring pays where it leaves out a mask that compares rows against keys (causal) on the tiles where
        # every score passes it (Triton's pipeliner builds it on every tile), in a kernel that fills and drains one
        # ring (two dots). Where that term is under a constexpr flag, launches without the flag run the source
        # kernel (`RuleContext.launch_flag`): for them the ring would save a bound check, not a comparison per score.
        masks = _uniform_masks(ctx, plan, list(range(plan.scores_index + 1, plan.acc_index)))
        guards = {guard for mask in masks for guard, _ in mask.pairs}
        pays = bool(guards) and len(ctx.plan.dots) == 2 and (None in guards or len(guards) == 1)
        engine = "cp.async attention, causal mask" if pays else "cp.async attention"
        if pays and len({test for mask in masks for _, test in mask.pairs}) > 1:
            engine = "cp.async attention, window mask"  # rows against keys from both sides: a band
        # At a tile the kernel fixes, the ring measured slower than Triton at head dimension 64 in several styles
        # and faster at 128: such a kernel runs as Gluon only for launches whose head dimension (a constexpr
        # parameter) is at least 128; an autotuned one gets a wider tile as one more config (measured faster at 64).
        head = _head_dims(ctx, plan)[1]
        constexprs = set(ctx.function.constexpr_names)
        at_least: tuple[tuple[str, int], ...] = ()
        if pays and engine.endswith("causal mask") and not ctx.function.autotune_configs:
            if head in constexprs:
                at_least = ((head, 128),)
            elif not (head.isdigit() and int(head) >= 128):
                engine = "cp.async attention, fixed tile"
        if guarded is not None:
            # (Triton's own compile copies the tiles of a guarded iteration in the branch, synchronously: the ring
            # runs its copies ahead whatever the test, and its work under the test)
            engine, pays, at_least = "cp.async attention, iteration guard", True, ()
        if ctx.slower_than_triton(original, engine):
            return updated  # the profitability policy keeps the kernel as Triton (UNPROFITABLE_RINGS)
        # The ring's cp.async copies move 16 bytes: launches whose tensors have other rows run the source kernel
        # (they would not compile), with --gluon-always too; so do those without the flag, if any, by default.
        ctx.launch_checked = True
        ctx.launch_unit = tuple(strides)
        ctx.launch_divisible = (*_divisible_strides(walk, strides),
                                *(b for b in walk.bounds if b not in _divisible_strides(walk, strides)))
        if not ctx.gluon_always:
            ctx.launch_at_least = at_least
            flag = ctx.launch_flag = next(iter(guards)) if guards and None not in guards else None
            name = ctx.function.name
            # Where the key blocks of a program end at its query block (a causal loop bounded by `program_id(axis)`),
            # the grid along that axis is the longest prompt in query blocks: with few of them every program runs
            # one or two iterations and pays the ring's fill and drain (and its shared memory: one program per SM
            # where the source kernel fits two), so such launches run the source kernel (GRID_LEAST, measured).
            axis = trip_count_axis(ctx.source, ctx.function.node, original)
            if axis is not None:
                ctx.launch_grid_at_least = (axis, GRID_LEAST)
            ctx.diagnostics.append(ctx.source.diagnostic(original, "TT043", (
                f"`{name}` runs as Gluon for the launches " + (f"that set `{flag}` (its attention ring leaves out the "
                f"mask that `{flag}` adds on the key blocks where every score passes it) and " if flag else "")
                + "".join(f"whose `{n}` is at least {v} (at a tile the kernel fixes the ring measured slower than "
                          f"Triton below that) and " for n, v in at_least)
                + (f"whose grid has at least {GRID_LEAST} programs along axis {axis} (the query blocks of the longest "
                   "prompt: with fewer, programs of one or two key blocks ran slower than the source kernel) and "
                   if axis is not None else "")
                + "whose tensors have 16-byte aligned rows (the ring's copies move 16 bytes); the others run the "
                f"source kernel, kept as `_{name}_triton`" + (": without the flag the ring would leave out a bound "
                "check only (0.91-1.05x measured on an H100, bench/RESULTS.md)" if flag else ""))))
        for helper in ("cp_async", "cta_barrier", "copy_layout", "mma_layout", "register_a_layout"):
            ctx.need(helper)
        # The loop's own leading comments stay in front of the pipelined form (the translated copy goes without).
        # (the warp-specialised form, `hopper_attention_ws`, builds on such rings; not on a guarded one)
        with_ws = bool(masks) and pays and guarded is None
        text, ring, ws_loop = _emit(ctx, plan, updated.with_changes(leading_lines=[]), body, strides, masks,
                                    copy_nodes, with_ws)
        if len(ctx.plan.dots) == 2 and "_dot(" not in text:  # no translated copy of the loop keeps a `_dot` call
            ctx.helpers.discard("dot")
        ctx.pipelined_loop(original, ring)
        if masks:
            ctx.attention_tile = ring_tile(ctx, plan)
        module = cst.parse_module(text)
        statements = list(module.body)  # the header comments parse as the module's header: put them back in front
        statements[0] = statements[0].with_changes(leading_lines=[*updated.leading_lines, *module.header,
                                                                  *statements[0].leading_lines])
        if ws_loop is not None:  # the warp-specialised form may take the kernel's 4-warp configs
            loop_text, names, count, index = ws_loop
            ctx.ws_attention = WSLoop(plan, walk, tuple(strides), loop_text, names, count, index, tuple(statements))
        return cst.FlattenSentinel(statements)

    def leave_FunctionDef(self, ctx: RuleContext, original: cst.FunctionDef, updated: cst.FunctionDef
                          ) -> cst.FunctionDef:
        """An autotuned kernel whose attention ring masks its scores gets ATTENTION_CONFIG's tile as one more
        config (where its tile sizes are config keys)."""
        tile = ctx.attention_tile
        if tile is None or not ctx.function.autotune_configs:
            return updated
        (bm, bn), warps, depth = ATTENTION_CONFIG
        decorators = list(updated.decorators)
        for i, (source, decorator) in enumerate(zip(original.decorators, decorators)):
            if ctx.source.qualified_name(decorator_target(source)) != TRITON_AUTOTUNE:
                continue
            added = add_config(ctx, decorator, {tile[0]: bm, tile[1]: bn}, warps, depth,
                               "the attention ring's tile: wider key blocks")
            if added is not None:
                decorators[i], config = added
                for ring in ctx.schedules:
                    if isinstance(ring, Sm90Ring) and ring.form == "attention":
                        ring.configs.append(config)
                return updated.with_changes(decorators=decorators)
        return updated


@dataclasses.dataclass(frozen=True)
class WSLoop:
    """What the attention ring leaves for the warp-specialised form (`hopper_attention_ws`): the plan, the K/V
    address terms, the inner strides the launcher makes constexpr, the consumer partition's loop (text), the names
    the form uses (`ws_names`), the loop's iteration count and value (text), and the statements the ring put where
    the loop was (the consumer partition runs its own loop there)."""

    plan: AttentionPlan
    walk: object  # _AddressTerms
    strides: tuple[str, ...]
    loop_text: str
    names: dict[str, str]
    count: str
    index: object  # LoopRange.value
    ring: tuple[cst.BaseStatement, ...]


def ring_tile(ctx: RuleContext, plan: AttentionPlan) -> tuple[str, str] | None:
    """The (rows, keys) tile sizes of the attention loop's scores, as written (`BLOCK_M`, `BLOCK_N`)."""
    site = next((s for s in ctx.plan.dots.values()
                 if s.node in calls_in(loop_body(plan.loop)[plan.scores_index])), None)  # type: ignore[union-attr]
    if site is None or not all(isinstance(x, str) and x.isidentifier() for x in site.shape):
        return None
    return site.shape[0], site.shape[1]


def _positive(ctx: RuleContext, step: cst.BaseExpression) -> bool:
    """A loop step known to be positive: an integer above 0, a constexpr parameter (block sizes), or a product or
    sum of those."""
    if isinstance(step, cst.Integer):
        return int(step.value, 0) > 0
    if isinstance(step, cst.Name):
        return step.value in ctx.function.constexpr_names
    if isinstance(step, cst.BinaryOperation) and isinstance(step.operator, (cst.Multiply, cst.Add)):
        return _positive(ctx, step.left) and _positive(ctx, step.right)
    return False


class _Unconvert(cst.CSTTransformer):
    """``gl.convert_layout(x, layout)`` -> ``x``."""

    def leave_Call(self, original_node: cst.Call, updated_node: cst.BaseExpression) -> cst.BaseExpression:
        func = updated_node.func  # type: ignore[attr-defined]
        if isinstance(func, cst.Attribute) and func.attr.value == "convert_layout" and isinstance(func.value, cst.Name) \
                and func.value.value == "gl" and len(updated_node.args) == 2:  # type: ignore[attr-defined]
            return parenthesized(updated_node.args[0].value)  # type: ignore[attr-defined]
        return updated_node


def _unconverted(node):  # noqa: ANN001, ANN202 - a node of the translated loop, as the ring's copies write it
    """`node` without the layout conversions the translation put in for the softmax's layouts: the ring's copies
    re-make every vector they read in their own copy layout."""
    return None if node is None else node.visit(_Unconvert())


def _ring_vector(ctx: RuleContext, plan: AttentionPlan, statement: cst.BaseStatement
                 ) -> tuple[str, cst.BaseExpression | None, cst.BaseExpression, int] | None:
    """A producer statement `v = start + tl.arange(0, B)` (or `tl.arange(0, B)`, `start` scalar arithmetic without
    calls) whose vector the K/V loads read along one axis only (`v[:, None]`: 1, `v[None, :]`: 0), with K and V tiles
    of one copy layout: (v, start, B, axis); else None."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1 \
            or not isinstance(statement.body[0], cst.Assign) or len(statement.body[0].targets) != 1 \
            or not isinstance(statement.body[0].targets[0].target, cst.Name):
        return None
    target, value = statement.body[0].targets[0].target.value, statement.body[0].value
    start: cst.BaseExpression | None = None
    arange = value
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add):
        arange, start = (value.right, value.left) if isinstance(value.right, cst.Call) else (value.left, value.right)
    if not isinstance(arange, cst.Call) or ctx.language(arange.func) not in ("arange", "core.arange") \
            or len(arange.args) != 2 or any(a.keyword is not None for a in arange.args) \
            or not (isinstance(arange.args[0].value, cst.Integer) and arange.args[0].value.value == "0"):
        return None
    if start is not None and (calls_in(start) or names_in(start) & set(name_terms(ctx.plan)) - {plan.var}):
        return None
    axes: set[int] = set()
    bare = False
    for load in (plan.k, plan.v):
        for node in (load.pointer, load.mask):
            if node is None:
                continue
            for sub in _subscripts_of(node, target):
                axes.add(sub)
            bare = bare or _bare_use(node, target)
    if bare or axes not in ({0}, {1}):
        return None
    return target, start, arange.args[1].value, axes.pop()


def _index_load(ctx: RuleContext, plan: AttentionPlan, statement: cst.BaseStatement) -> tuple[str, int] | None:
    """A producer statement that loads a 1-D index vector the K/V addresses are gathered by (a paged kernel's
    ``kv_loc = tl.load(req_to_tokens + start_n + tl.arange(0, BLOCK_N), mask=...)``), read by the copies along one
    axis only: (its name, that axis), for the ring's copies to load it again in their own layout ahead of use. Its
    own addresses are arithmetic on scalars and `tl.arange` (no other tensor: its vectors are made in the copies'
    layout); else None."""
    assigned = single_assign(statement)
    if assigned is None or not isinstance(assigned[1], cst.Call) \
            or ctx.language(assigned[1].func) not in ("load", "core.load"):
        return None
    target, value = assigned
    terms = set(name_terms(ctx.plan))
    for call in calls_in(value):
        if call is not value and ctx.language(call.func) not in ("arange", "core.arange"):
            return None
    if read_names(value) & terms - {plan.var} or any(a.keyword is not None and a.keyword.value not in
                                                     ("mask", "other") for a in value.args):
        return None
    uses: list[cst.CSTNode] = [n for load in (plan.k, plan.v) for n in (load.pointer, load.mask) if n is not None]
    for i in plan.producer:
        other = single_assign(loop_body(plan.loop)[i])  # type: ignore[union-attr]
        if other is not None and other[0] != target:
            uses.append(plan.k_definitions.get(other[0], other[1]))
    if any(_bare_use(node, target) for node in uses):
        return None
    axis = _axis_of(uses, target)
    return None if axis is None else (target, axis)


class _InLayout(cst.CSTTransformer):
    """An index load's `tl.load`/`tl.arange` calls as Gluon's, its vectors made in a slice of the copies' layout."""

    def __init__(self, ctx: RuleContext, axis: int, layout: str) -> None:
        super().__init__()
        self.ctx, self.axis, self.layout = ctx, axis, layout

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        name = self.ctx.language(original.func) or ""
        if name.rsplit(".", 1)[-1] == "arange":
            layout = cst.parse_expression(f"gl.SliceLayout({self.axis}, {self.layout})")
            args = [*updated.args[:-1], updated.args[-1].with_changes(comma=cst.Comma(
                whitespace_after=cst.SimpleWhitespace(" "))), cst.Arg(layout, keyword=cst.Name("layout"), equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))]
            return updated.with_changes(func=cst.parse_expression("gl.arange"), args=args)
        if name.rsplit(".", 1)[-1] == "load":
            return updated.with_changes(func=cst.parse_expression("gl.load"))
        return updated


def _copy_axis(plan: AttentionPlan, uses: list[cst.CSTNode], name: str, seen: frozenset[str] = frozenset()
               ) -> int | None:
    """The one axis the copies expand the 1-D `name` along: in their addresses and masks (`uses`), or through the
    1-D vectors the loop makes from it (``offs_n = start_n + cols``, then ``offs_n[:, None]``); else None."""
    axes = {a for node in uses for a in _subscripts_of(node, name)}
    for i in plan.producer:
        statement = loop_body(plan.loop)[i]  # type: ignore[union-attr]
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
            else None
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name) \
                and small.targets[0].target.value not in seen | {name} and _bare_use(small.value, name):
            axis = _copy_axis(plan, uses, small.targets[0].target.value, seen | {name})
            axes |= {axis} if axis is not None else set()
    return axes.pop() if axes in ({0}, {1}) else None


def _axis_of(nodes: list[cst.CSTNode], name: str) -> int | None:
    """The one axis `name` is expanded along in `nodes` (`name[:, None]`: 1, `name[None, :]`: 0), else None."""
    axes = {a for node in nodes for a in _subscripts_of(node, name)}
    return axes.pop() if axes in ({0}, {1}) else None


def _subscripts_of(node: cst.CSTNode, name: str) -> list[int]:
    """The axes `name` is read along in `node`: 1 for `name[:, None]`, 0 for `name[None, :]`; -1 for other
    subscripts."""
    found: list[int] = []

    class _Visit(cst.CSTVisitor):
        def visit_Subscript(self, sub: cst.Subscript) -> None:
            if not (isinstance(sub.value, cst.Name) and sub.value.value == name):
                return
            parts = [cst.Module([]).code_for_node(e.slice).strip() for e in sub.slice]
            found.append(1 if parts == [":", "None"] else 0 if parts == ["None", ":"] else -1)

    node.visit(_Visit())
    return found


class _AddressTerms:
    """The terms of the K and V copies' addresses (as the copies write them: a K loaded [HEAD_DIM, BLOCK_N] with its
    broadcasts swapped), followed through the names bound before the loop (``k_ptrs = ...``, ``k_ptr += ...``) and the
    loop's own statements that make them; `opaque`: the int parameters read by names bound otherwise (in a branch, a
    tuple), which a caller must treat as read anywhere."""

    def __init__(self, ctx: RuleContext, plan: AttentionPlan) -> None:
        self.params = {p.name for p in ctx.function.params if not p.is_constexpr}
        values: dict[str, list[cst.BaseExpression]] = {}
        self.opaque: set[str] = set()
        self.bounds: list[str] = []  # runtime bounds of the contiguous index in the masks (`_inner_strides`)
        opaque_names: dict[str, set[str]] = {}
        roots: dict[str, cst.Name] = {}  # parameters moved in place, as they were passed
        for statement in ctx.function.node.body.body:  # type: ignore[union-attr]
            if statement is plan.loop:
                break
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
                else None
            if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                    and isinstance(small.targets[0].target, cst.Name):
                values[small.targets[0].target.value] = [small.value]  # (a plain assignment replaces what was bound)
            elif isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name) \
                    and isinstance(small.operator, (cst.AddAssign, cst.SubtractAssign)):
                # (`k_ptr += off`: a parameter's value before it is moved is itself)
                target = small.target.value
                values.setdefault(target, [roots.setdefault(target, cst.Name(target))] if target in self.params
                                  else []).append(small.value)
            else:
                for name in bound_names(statement):
                    opaque_names.setdefault(name, set()).update(names_in(statement) & self.params)
        for i in plan.producer:  # the loop's statements that make what the copies read (`cols = start_n + offs_n`)
            assignment = single_assign(loop_body(plan.loop)[i])  # type: ignore[union-attr]
            if assignment is not None:
                values[assignment[0]] = [assignment[1]]
        values.update({n: [v] for n, v in plan.k_definitions.items()})
        self.values = values
        self.terms: dict[str, list[cst.BaseExpression]] = {}
        for key, load in (("k", plan.k), ("v", plan.v)):
            found: list[cst.BaseExpression] = []
            pending, seen = [load.pointer], set()
            while pending:
                for term in sum_terms(pending.pop()):
                    if isinstance(term, cst.BinaryOperation) and isinstance(term.operator, cst.Subtract):
                        pending += [term.left, term.right]
                    elif isinstance(term, cst.Name) and (term.value in values or term.value in opaque_names) \
                            and term is not roots.get(term.value):
                        if term.value not in seen:
                            seen.add(term.value)
                            pending += values.get(term.value, [])
                            self.opaque |= opaque_names.get(term.value, set())
                    else:
                        found.append(term)
            self.terms[key] = found

    def definition(self, name: str) -> cst.BaseExpression | None:
        """The one value a 1-D vector was given before the loop or in it, else None."""
        bound = self.values.get(name)
        return bound[0] if bound is not None and len(bound) == 1 else None


def _divisible_strides(walk: _AddressTerms, unit: list[str]) -> tuple[str, ...]:
    """The arguments that scale or offset the K and V addresses (``off_h * stride_kh``, ``offs_n[:, None] *
    stride_kn``, ``(offs_n * stride_kn)[:, None]``, a bare ``kv_offset``), but the inner strides (`unit`): a launch
    where the ints among them are multiples of 16 (and the tensors 16-byte aligned) has Triton compile them as
    divisible by 16, which proves the 16-byte alignment the ring's cp.async copies need."""
    found: list[str] = []

    def add(name: str) -> None:
        if name not in unit and name not in found:
            found.append(name)

    for name in sorted(walk.opaque):
        add(name)
    for key in ("k", "v"):
        for term in walk.terms[key]:
            if isinstance(term, cst.Name):
                if term.value in walk.params:
                    add(term.value)  # an offset argument (or the base pointer: the launcher checks its alignment)
                continue
            for factor in product_factors(term):
                if isinstance(factor, cst.Name) and factor.value in walk.params:
                    add(factor.value)
                elif isinstance(factor, cst.Subscript):  # `(offs_n * stride_kn)[:, None]`, `(d0 + offs_d)[None, :]`
                    for inner_term in sum_terms(factor.value):
                        for inner in product_factors(inner_term):
                            if isinstance(inner, cst.Name) and inner.value in walk.params:
                                add(inner.value)
    return tuple(found)


def _inner_strides(ctx: RuleContext, plan: AttentionPlan, walk: _AddressTerms) -> list[str] | LoopRefusal:
    """The kernel parameters that scale the last (contiguous) index of the K and V addresses: in ``x + i[:, None] *
    s0 + j[None, :] * s1`` that is ``s1``. They must be 1 for cp.async; the launcher makes an int argument equal to 1
    a constexpr, which the emitted code tests at compile time. An address without such a factor is contiguous. The
    contiguous term must read so (``j[None, :]``, times such a parameter, ``j`` an index vector ``start +
    tl.arange(0, B)``); any other (``(offs_d * stride_d)[None, :]``) is refused, as is a mask that bounds the
    contiguous index by a runtime value (``d_mask[None, :]`` with ``d_mask = offs_d < head_dim``: the copies' 16-byte
    vectors would not compile for it)."""
    vectors = {n for n, t in name_terms(ctx.plan).items() if t.slice_of is not None}
    found: list[str] = []

    def refuse(node: cst.CSTNode, why: str) -> LoopRefusal:
        return LoopRefusal(node, f"attention loop: {why}; the ring copies 16 bytes along the K/V tiles' contiguous "
                           "dimension")

    def index_vector(node: cst.BaseExpression, depth: int = 0) -> bool:
        node = unparenthesized(node)
        if depth > 8:
            return False
        if isinstance(node, cst.Name):
            definition = walk.definition(node.value)
            return definition is not None and index_vector(definition, depth + 1)
        if isinstance(node, cst.Call):
            return ctx.language(node.func) in ("arange", "core.arange") and len(node.args) == 2 and \
                ctx.source.code(node.args[0].value).strip() == "0"
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
            for vector, start in ((node.left, node.right), (node.right, node.left)):
                if index_vector(vector, depth + 1) and _elementwise(start) and not names_in(start) & vectors:
                    return True
        return False

    for key in ("k", "v"):
        for term in walk.terms[key]:
            contiguous = [sub for sub in _subscripts(term) if broadcast_axis(sub) == 1]
            if not contiguous:
                continue
            factors = product_factors(term)
            subs = [f for f in factors if isinstance(f, cst.Subscript)]
            others = [f for f in factors if not isinstance(f, cst.Subscript)]
            if len(subs) != 1 or broadcast_axis(subs[0]) != 1 or not index_vector(subs[0].value) or len(others) > 1 \
                    or (others and not (isinstance(others[0], cst.Name) and others[0].value in walk.params)):
                load = plan.k if key == "k" else plan.v  # (the diagnostic points at the load, in the loop)
                return refuse(load.call, f"the contiguous index of the {key.upper()} addresses is "
                              f"`{ctx.source.code(term).strip()}`, not an index vector `offs[None, :]` times a stride")
            if others and others[0].value not in found:  # type: ignore[attr-defined]
                found.append(others[0].value)  # type: ignore[attr-defined]
    # A mask over the contiguous index: only by compile-time values.
    for load in (plan.k, plan.v):
        if load.mask is None:
            continue
        reads: set[str] = set()
        for node in preorder(load.mask):
            if isinstance(node, cst.Subscript) and broadcast_axis(node) == 1:
                reads |= _resolved_reads(walk, node.value)
            elif isinstance(node, cst.Comparison) and any(broadcast_axis(sub) == 1 for sub in _subscripts(node)):
                reads |= _resolved_reads(walk, node)
        runtime = sorted(reads & walk.params)
        bounded = _runtime_bounds(walk, load.mask, index_vector)
        if runtime and (bounded is None or set(runtime) - set(bounded)):
            return refuse(load.call, f"the mask bounds the contiguous index by `{runtime[0]}`, a runtime value, other "
                          "than by `offs < bound` (which a launch with the bound a multiple of 16 keeps whole over "
                          "every 16-byte copy)")
        for bound in bounded or ():
            if bound not in walk.bounds:
                walk.bounds.append(bound)
    return found


def _runtime_bounds(walk: _AddressTerms, mask: cst.BaseExpression, index_vector) -> list[str] | None:  # noqa: ANN001
    """The runtime parameters a K/V mask bounds the contiguous index by, where each such term is `offs < bound`
    (`offs` an index vector, `bound` a parameter; through a one-value name, `d_mask = offs_d < head_dim` read as
    `d_mask[None, :]`): a launch whose bound is a multiple of 16 masks whole 16-byte vectors, which the aligned
    launch tells the compiler (the copies then stay 16 bytes wide). None where a term over that index is otherwise."""
    found: list[str] = []

    def comparison(node: cst.BaseExpression, depth: int = 0) -> bool:
        node = unparenthesized(node)
        if isinstance(node, cst.Name) and depth < 8:
            definition = walk.definition(node.value)
            return definition is not None and comparison(definition, depth + 1)
        if not (isinstance(node, cst.Comparison) and len(node.comparisons) == 1
                and isinstance(node.comparisons[0].operator, cst.LessThan)):
            return False
        bound = unparenthesized(node.comparisons[0].comparator)
        if not (isinstance(bound, cst.Name) and bound.value in walk.params and index_vector(node.left)):
            return False
        found.append(bound.value)
        return True

    for node in preorder(mask):
        if isinstance(node, cst.Subscript) and broadcast_axis(node) == 1:
            if _resolved_reads(walk, node.value) & walk.params and not comparison(node.value):
                return None
        elif isinstance(node, cst.Comparison) and any(broadcast_axis(sub) == 1 for sub in _subscripts(node)):
            # (`offs_d[None, :] < head_dim`: the broadcast compared)
            left = unparenthesized(node.left)
            if not (isinstance(left, cst.Subscript) and broadcast_axis(left) == 1 and len(node.comparisons) == 1
                    and isinstance(node.comparisons[0].operator, cst.LessThan) and index_vector(left.value)):
                return None
            bound = unparenthesized(node.comparisons[0].comparator)
            if isinstance(bound, cst.Name) and bound.value in walk.params:
                found.append(bound.value)
            elif _resolved_reads(walk, bound) & walk.params:
                return None
    return found


def _resolved_reads(walk: _AddressTerms, node: cst.CSTNode, depth: int = 0) -> set[str]:
    """The names `node` reads, and those the names it reads were made from (through one-value definitions)."""
    reads = read_names(node)
    if depth < 8:
        for name in list(reads):
            definition = walk.definition(name)
            if definition is not None:
                reads |= _resolved_reads(walk, definition, depth + 1)
    return reads


class _Relayout:
    """Loop-invariant tensors re-expressed in a copy layout, as statements appended to `lines` (one per tensor and
    layout): a 1-D tensor (a slice of a 2-D layout) is converted; a 2-D tensor defined once, at the top of the kernel,
    by arithmetic on scalars and 1-D tensors (``k_ptr + offs_n[:, None] * stride + offs_d[None, :]``) is
    re-evaluated from its 1-D parts in the new layout; any other 2-D tensor is converted."""

    def __init__(self, ctx: RuleContext, terms: dict[str, Term], name, lines: list[str],  # noqa: ANN001
                 overrides: dict[str, cst.BaseExpression] | None = None, settled: frozenset[str] = frozenset()
                 ) -> None:
        self.ctx, self.terms, self.name, self.lines = ctx, terms, name, lines
        self.definitions, self.counts = _definitions(ctx.function.node)
        self.definitions.update(overrides or {})  # (the transposed K addresses: `AttentionPlan.k_definitions`)
        # (names bound more than once whose value at the loop those definitions give: `AttentionPlan.k_settled`)
        self.counts.update({n: 1 for n in settled})
        self.done: dict[tuple[str, str], str] = {}

    def name_in(self, tensor: str, layout: str, suffix: str, axis: int | None = None) -> str:
        """The name of `tensor` in `layout` (the statement defining it is appended on first use). A 1-D tensor goes
        to the slice of `layout` along `axis` (the axis its uses in the copies expand: `v[:, None]` 1), else along
        the axis the layout plan gave it."""
        term = self.terms[tensor]
        if term.slice_of is not None and axis is None:
            axis = term.slice_of[0]
        key = (tensor, layout, axis if term.slice_of is not None else None)
        if key not in self.done:
            if term.slice_of is not None:
                text = f"gl.convert_layout({tensor}, gl.SliceLayout({axis}, {layout}))"
            else:
                text = self.expression(self.expression_of(tensor), layout, suffix) or \
                    f"gl.convert_layout({tensor}, {layout})"
            new = self.name(f"{tensor}_{suffix}")
            self.lines.append(f"{new} = {text}")
            self.done[key] = new
        return self.done[key]

    def expression(self, node: cst.BaseExpression | None, layout: str, suffix: str) -> str | None:
        """`node` re-evaluated in `layout` (text), or None when it is not arithmetic, comparisons and subscripts of
        numbers, scalars and 1-D tensors that are assigned at most once in the kernel."""
        if node is None or not _elementwise(node):
            return None
        names = sorted(names_in(node))
        if any(self.counts.get(n, 0) > 1 or (n in self.terms and self.terms[n].slice_of is None
                                              and self.expression_of(n) is None) for n in names):
            return None
        # (a 2-D name made by such arithmetic itself, `k_ptrs = K + off_k`, is re-evaluated in turn)
        return _text(node, {n: self.name_in(n, layout, suffix, _axis_of([node], n)) for n in names if n in self.terms})

    def load(self, tensor: str, layout: str, suffix: str) -> str | None:
        """`tensor = tl.load(ptrs, mask=..., other=...)` as a load in `layout` (text), or None."""
        call = self.definitions.get(tensor)
        if not isinstance(call, cst.Call) or self.counts.get(tensor, 0) != 1 or \
                language_name(self.ctx.source.qualified_name(call.func)) not in ("load", "core.load"):
            return None
        positional = [a for a in call.args if a.keyword is None]
        keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        if len(positional) != 1 or not set(keywords) <= {"mask", "other"}:
            return None
        pointer = positional[0].value
        if "other" in keywords and (not _elementwise(keywords["other"]) or names_in(keywords["other"]) & set(self.terms)):
            return None
        for part in (pointer, keywords.get("mask")):  # check first: nothing is emitted for a load that is not moved
            if part is not None and (not _elementwise(part) or any(
                    self.counts.get(n, 0) > 1 or (n in self.terms and self.terms[n].slice_of is None and
                                                  self.expression_of(n) is None) for n in names_in(part))):
                return None
            # (`expression` re-evaluates arithmetic on 1-D tensors only: a 2-D name is taken whole, as the pointer)
            bare = isinstance(part, cst.Name) and part is pointer
            if not bare and any(n in self.terms and self.terms[n].slice_of is None for n in names_in(part)):
                return None
        if isinstance(pointer, cst.Name) and pointer.value in self.terms:
            address = self.name_in(pointer.value, layout, suffix)
        else:
            address = self.expression(pointer, layout, suffix)
        args = [address]
        if "mask" in keywords:
            args.append(f"mask={self.expression(keywords['mask'], layout, suffix)}")
        if "other" in keywords:
            args.append(f"other={_text(keywords['other'])}")
        return f"gl.load({', '.join(args)})"  # type: ignore[arg-type]

    def expression_of(self, tensor: str, depth: int = 0) -> cst.BaseExpression | None:
        """The definition of a 2-D `tensor` when it can be re-evaluated from its 1-D parts (through 2-D names made
        the same way)."""
        node = self.definitions.get(tensor)
        if node is None or depth > 8 or self.counts.get(tensor, 0) != 1 or not _elementwise(node) or any(
                self.counts.get(n, 0) > 1 or (n in self.terms and self.terms[n].slice_of is None
                                              and self.expression_of(n, depth + 1) is None)
                for n in names_in(node)):
            return None
        return node


def _uniform_masks(ctx: RuleContext, plan: AttentionPlan, indices: list[int]) -> list[UniformMask]:
    """The score masks among the softmax statements `indices` that a scalar test shows all true on a tile
    (`transpile.analysis.uniform_mask`)."""
    return loop_uniform_masks(ctx.source, ctx.function, set(name_terms(ctx.plan)), plan.loop, plan.var, indices)


def _inline_rescale(plan: AttentionPlan, statement: cst.BaseStatement) -> list[str]:
    """The accumulator's rescale written inside the second dot (`acc = tl.dot(p, v, acc * alpha[:, None])`,
    `AttentionPlan.pv_rescale`) as a statement of its own, `acc = acc * alpha[:, None]`, from the translated dot: the
    ring runs it where the rescales go, after the previous iteration's PV is waited for, and PV reads `acc`."""
    if plan.pv_rescale is None:
        return []
    for node in preorder(statement):
        factor = rescale_factor(node, plan.acc) if isinstance(node, cst.BinaryOperation) else None
        if factor is not None:
            return [f"    {plan.acc} = {plan.acc} * {_text(factor)}"]
    raise AssertionError("the planned rescale is not in the translated dot")


def _head_dims(ctx: RuleContext, plan: AttentionPlan) -> tuple[str, str]:
    """The head dimensions of Q/K and of V as source text (Q's own columns, the first dot's A operand: its layout
    class may be shared with the accumulator, whose head dimension is V's)."""
    sites = list(ctx.plan.dots.values())
    site1 = next(s for s in sites if s.node in calls_in(loop_body(plan.loop)[plan.scores_index]))  # type: ignore[union-attr]
    site2 = next(s for s in sites if s.node in calls_in(loop_body(plan.loop)[plan.acc_index]))  # type: ignore[union-attr]
    q_cols = site1.a_shape[1] if site1.a_shape and len(site1.a_shape) == 2 and site1.a_shape[1] else \
        f"{plan.q}.shape[1]"
    return q_cols, str(site2.shape[1])


def _copy_reads(plan: AttentionPlan, copy_nodes: dict[object, object]) -> tuple[set[str], set[str]]:
    """The names the K copy and the V copy read: their addresses and masks, through the loop's statements that make
    them (and the 2-D names the ring re-evaluates: `AttentionPlan.k_definitions` for a K read transposed)."""
    producer = {i: copy_nodes.get(i, loop_body(plan.loop)[i]) for i in plan.producer}  # type: ignore[union-attr]
    reads: list[set[str]] = []
    for key in ("k", "v"):
        names = set().union(*(read_names(n) for n in copy_nodes[key] if n is not None))  # type: ignore[attr-defined]
        for i in reversed(plan.producer):
            if assigned_names(producer[i]) & names:  # type: ignore[arg-type]
                names |= read_names(producer[i])  # type: ignore[arg-type]
        if key == "k":
            for name in list(names):
                if name in plan.k_definitions:
                    names |= read_names(plan.k_definitions[name])
        reads.append(names)
    return reads[0], reads[1]


def _shared_vector(ctx: RuleContext, plan: AttentionPlan, copy_nodes: dict[object, object]) -> LoopRefusal | None:
    """K and V tiles of different shapes (another head dimension for V) are copied in layouts of their own: a 1-D
    vector both copies read (the key offsets) would have to be made in both."""
    q_cols, d = _head_dims(ctx, plan)
    if q_cols == d:
        return None
    k_reads, v_reads = _copy_reads(plan, copy_nodes)
    terms = name_terms(ctx.plan)
    shared = sorted(n for n in k_reads & v_reads
                    if (n in terms and terms[n].slice_of is not None) or any(
                        n in assigned_names(loop_body(plan.loop)[i]) for i in plan.producer))  # type: ignore[union-attr]
    if shared:
        return LoopRefusal(plan.v.call, f"attention loop: K and V have different head dimensions, so their copies "
                           f"have layouts of their own, and both read the vector `{shared[0]}`")
    return None


def _copy_nodes(ctx: RuleContext, plan: AttentionPlan, body: list[cst.BaseStatement]
                ) -> dict[object, object] | LoopRefusal:
    """What the ring's copies write, per producer statement index and per load ("k", "v": its address and mask):
    the source's own node where it is arithmetic on names and numbers (every vector it reads is then made again in the
    copy layout through the renames), else the translated node without its layout conversions, where that reads no
    name the source does not (a name the translation made, such as `offs_d_col`, is a vector in the softmax's layout,
    which the copies cannot broadcast against theirs)."""
    source_body = loop_body(plan.loop)
    nodes: dict[object, object] = {}

    def translated(source_nodes: list[cst.CSTNode], new: list[cst.CSTNode | None]) -> LoopRefusal | None:
        extra = set().union(*(read_names(n) for n in new if n is not None)) - {"gl"} - set().union(
            *(read_names(n) for n in source_nodes))
        if extra:
            return LoopRefusal(source_nodes[0], "attention loop: the K/V copies would read `" + sorted(extra)[0]
                               + "`, which the translation made for the softmax's layouts; write the addresses and "
                               "masks as arithmetic on index vectors made before the loop and scalars")
        return None

    for i in plan.producer:
        if _ring_vector(ctx, plan, source_body[i]) is not None or _index_load(ctx, plan, source_body[i]) is not None:
            continue  # (made again in the copy layout by the copies themselves)
        assignment = single_assign(source_body[i])
        if assignment is not None and assignment[0] in plan.k_definitions:
            # (a 2-D address name the loop binds for a K read as [HEAD_DIM, BLOCK_N], `off_k = kv_loc[None, :] *
            # stride + offs_d[:, None]`: the copies bind it transposed, as the K copy reads it)
            nodes[i] = cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(assignment[0]))],
                                                           plan.k_definitions[assignment[0]])])
            continue
        if assignment is not None and _elementwise(assignment[1]):
            nodes[i] = source_body[i]
            continue
        new = _unconverted(body[i])
        refusal = translated([source_body[i]], [new])
        if refusal is not None:
            return refusal
        nodes[i] = new
    for key, load in (("k", plan.k), ("v", plan.v)):
        if all(n is None or _elementwise(n) for n in (load.pointer, load.mask)):
            nodes[key] = (load.pointer, load.mask)
            continue
        pointer, mask = (_unconverted(n) for n in _load_args(body[load.index]))
        if key == "k" and plan.k_swapped:
            # (K read [HEAD_DIM, BLOCK_N]: its translated address and mask swapped as the source's were, `kv_mask[None,
            # :]` -> `kv_mask[:, None]`; `transposed_k` proved the swap reads the same tile transposed)
            pointer, mask = swapped_axes(pointer), swapped_axes(mask)
        refusal = translated([n for n in (load.pointer, load.mask) if n is not None], [pointer, mask])
        if refusal is not None:
            return refusal
        nodes[key] = (pointer, mask)
    return nodes


def _emit(ctx: RuleContext, plan: AttentionPlan, updated: cst.For, body: list[cst.BaseStatement],
          strides: list[str], masks: list[UniformMask], copy_nodes: dict[object, object], with_ws: bool
          ) -> tuple[str, Sm90Ring, tuple | None]:
    """The pipelined loop and the schedule it is written from; `masks`: the score masks to build only where needed.
    With `with_ws`, also the consumer partitions' loop of the warp-specialised form, its names, and the loop's
    iteration count and value (`_ws_consumer_loop`)."""
    # Two commit groups per iteration (K, then V); at the top of iteration `it` the 2 * NUM_STAGES - 3 youngest may
    # be in flight: K of `it` and V of `it - 1` have landed. QK^T is waited for with PV (`mma_in_flight`) in flight.
    schedule = Sm90Ring("attention", ctx.function.name, ctx.source.position(plan.loop)[0],
                        ring_depth(ctx, plan.loop, plan.num_stages),
                        (RingOperand(plan.k.name, "cp.async", plan.k_transposed), RingOperand(plan.v.name, "cp.async")),
                        wait_groups=WaitGroups(2, 3), configs=kernel_configs(ctx.function), q=plan.q,
                        steady=ATTENTION_STEADY)
    name = loop_namer(ctx, plan.loop)
    prologue_i = name("i")  # the prologue's loop variable: a name the kernel does not use (a static_range
    # loop leaves its variable bound to the last value, which would change a kernel variable `i`)
    stages, it, slot, prev_slot, nxt, iters, p_prev = (name("NUM_STAGES"), name("it"), name("slot"),
                                                       name("prev_slot"), name("next_it"), name("num_iters"),
                                                       name("p_prev"))
    q_smem, k_smem, v_smem = name(f"{plan.q}_smem"), name(f"{plan.k.name}_smem"), name(f"{plan.v.name}_smem")
    pv_layout, p_layout = name("pv_layout"), name("p_layout")
    source_body = loop_body(plan.loop)  # (the loop's statements, an iteration guard's read in its place)
    sites = list(ctx.plan.dots.values())
    site1 = next(s for s in sites if s.node in calls_in(source_body[plan.scores_index]))
    site2 = next(s for s in sites if s.node in calls_in(source_body[plan.acc_index]))
    m, n = site1.shape
    d = site2.shape[1]
    acc_layout = ctx.plan.layout_expr(site2.result)
    q_cols = _head_dims(ctx, plan)[0]
    k_shape = f"[{q_cols}, {n}]" if not plan.k_transposed else f"[{n}, {q_cols}]"
    v_shape = f"[{n}, {d}]"
    dtype = f"{plan.q}.dtype"  # wgmma reads A and B of one type: K, V and P are Q's type

    # Copy layouts (16-byte vectors along the contiguous dimension): one per distinct tile shape.
    copy_layouts: dict[str, str] = {}
    for shape in (k_shape, v_shape):
        if shape not in copy_layouts:
            copy_layouts[shape] = name("kv_layout" if not copy_layouts else "v_layout")
    k_layout, v_layout = copy_layouts[k_shape], copy_layouts[v_shape]

    # K and V tiles of different shapes (head dimensions) get copy layouts of their own: then no vector may feed
    # both (it would be made in one of them); `leave_For` refuses such loops (`_shared_vector`).
    k_reads, v_reads = _copy_reads(plan, copy_nodes)

    # Loop-invariant tensors the addresses use, in the copy layout (`_ring` copies): a 1-D tensor is converted, a
    # 2-D one (an address tile) is re-evaluated from its definition with its 1-D parts converted, which costs far
    # fewer instructions than converting a tile of 64-bit pointers through shared memory; a 2-D tensor defined
    # otherwise is converted.
    terms = name_terms(ctx.plan)
    renames = next_names(plan.var, plan.producer, body, name)
    conversions: list[str] = []
    in_layout = _Relayout(ctx, terms, name, conversions, plan.k_definitions, plan.k_settled)
    for invariant in plan.invariants:
        term = terms.get(invariant)
        if term is None:
            continue  # a scalar
        layout = k_layout if invariant in k_reads or k_layout == v_layout else v_layout
        uses = [n for load in (plan.k, plan.v) for n in (load.pointer, load.mask) if n is not None]
        renames[invariant] = in_layout.name_in(invariant, layout, "ring", _copy_axis(plan, uses, invariant))

    # Q is loaded again for its shared-memory copy, 16 bytes per thread (the translated load, in the accumulator's
    # layout, reads 4 bytes per thread; unused in this branch, the compiler drops it), when its address and mask
    # can be re-evaluated in a copy layout; else the translated load's tile is stored.
    q_shape = f"[{m}, {q_cols}]"
    q_layout = copy_layouts.get(q_shape) or name(f"{plan.q}_layout")
    q_tile = in_layout.load(plan.q, q_layout, "stage") or plan.q
    if q_tile != plan.q:
        copy_layouts.setdefault(q_shape, q_layout)

    # The loop range as an iteration count.
    span = LoopRange.of(updated)
    count, index = span.count, span.value

    # Where the address statements load (a page table, a flag an iteration guard tests), those of an iteration past
    # the last, whose copies are skipped, are evaluated for the last one: they read no entry past the table's.
    producer_loads = any(ctx.language(c.func) in ("load", "core.load")
                         for i in plan.producer for c in calls_in(source_body[i]))

    def copies(iteration: str, slot_expr: str, indent: str) -> list[str]:
        at = f"gl.minimum({iteration}, gl.maximum({iters} - 1, 0))" if producer_loads else iteration
        lines = [f"{indent}{renames[plan.var]} = {index(at)}"]
        for i in plan.producer:
            vector = _ring_vector(ctx, plan, source_body[i])
            gathered = _index_load(ctx, plan, source_body[i])
            if gathered is not None:
                # an index vector loaded in the loop (a page table's rows): loaded again, ahead, in the copy layout
                target, axis = gathered
                layout = k_layout if target in k_reads else v_layout
                value = single_assign(source_body[i])[1]  # type: ignore[index]
                text = " ".join(_text(value.visit(_InLayout(ctx, axis, layout)), renames).split())
                lines.append(f"{indent}{renames.get(target, target)} = {text}")
                continue
            if vector is None:
                statement = copy_nodes[i]  # (its comments stay with the loop's own copy of it)
                if isinstance(statement, cst.SimpleStatementLine):
                    statement = statement.with_changes(leading_lines=[])
                lines.append(f"{indent}{_text(statement, renames)}")  # type: ignore[arg-type]
                continue
            # an index vector made in the loop: made again in the copy layout, along the axis the addresses use
            target, start, block, axis = vector
            start_text = f"{_text(start, renames)} + " if start is not None else ""
            layout = k_layout if target in k_reads else v_layout
            lines.append(f"{indent}{renames.get(target, target)} = {start_text}gl.arange(0, {_text(block)}, "
                         f"layout=gl.SliceLayout({axis}, {layout}))")
        for key, load, smem in (("k", plan.k, k_smem), ("v", plan.v, v_smem)):
            pointer, mask = copy_nodes[key]  # type: ignore[misc]  # (a K loaded [HEAD_DIM, BLOCK_N]: transposed)
            masked = f", mask={_text(mask, renames)}" if mask is not None else ""
            # A copy past the last iteration is not issued (a masked-off cp.async still writes its zeros: a loop of
            # one or two key blocks paid for NUM_STAGES of them); its group is committed all the same, empty, so
            # that the waits count the same groups.
            lines.append(f"{indent}if {iteration} < {iters}:")
            lines.append(f"{indent}    _cp_async_load({smem}.index({slot_expr}), {_text(pointer, renames)}{masked})")
            lines.append(f"{indent}async_copy.commit_group()")
        return lines

    dot1 = _value(body[plan.scores_index])
    if plan.scores_scale is not None:  # `s = tl.dot(q, k) * scale`: the dot, then the product after its wait
        if plan.scores_scale[1]:
            dot1 = dot1.right  # type: ignore[attr-defined]
        while isinstance(dot1, cst.BinaryOperation):  # (`tl.dot(q, k) * scale * RCP_LN2`: the innermost left)
            dot1 = dot1.left
    zeros = _text(dot1.args[2].value) if len(dot1.args) > 2 else f"gl.zeros([{m}, {n}], gl.float32, layout={acc_layout})"
    # P's type may be spelt through the K or V tile (`p.to(v.dtype)`): neither is a register tile in this branch.
    p_operand = _value(body[plan.acc_index]).args[0].value
    cast = _p_cast(body, plan, softmax_from=plan.scores_index + 1)
    if cast is not None:  # `p = p.to(v.dtype)` just before the dot: the cast is the operand's, made after PV retires
        p_operand = _value(body[cast])
    p_text = _text(p_operand.visit(_TileDtype({plan.k.name, plan.v.name}, dtype)))
    loads = {plan.k.index, plan.v.index}
    # (an iteration guard's test is read by the consumer, which evaluates it for its own iteration)
    guarded = guarded_indices(plan.loop)
    test_reads = guard_reads(plan.loop)
    producer_only = {i for i in plan.producer
                     if not assigned_names(body[i]) & test_reads
                     and not any(assigned_names(body[i]) & names_in(s) for j, s in enumerate(body)
                                 if j not in plan.producer and j not in loads)}
    skip = loads | producer_only | {plan.scores_index, plan.acc_index} | ({cast} if cast is not None else set())
    before = [i for i in range(plan.scores_index) if i not in skip]
    softmax = [i for i in range(plan.scores_index + 1, plan.acc_index) if i not in skip and i not in plan.rescales]
    after = [i for i in range(plan.acc_index + 1, len(body)) if i not in skip]
    masks = [m for m in masks if m.where_index in softmax and set(m.mask_indices) <= set(softmax)]
    uniform = name("uniform") if masks else ""
    tests = {m.where_index: m.test_lines(uniform) for m in masks}
    uses_var = plan.var in test_reads or any(plan.var in names_in(body[i]) for i in before + softmax + after
                                              + plan.rescales) or any(
        plan.var in m.reads for m in masks)

    tile_dtype = _TileDtype({plan.k.name, plan.v.name}, dtype)  # (`p.to(v.dtype)`: no register tile `v` here)

    def statements(indices: list[int]) -> list[str]:
        return [indent(_text(body[i].visit(tile_dtype)), "    ") for i in indices]

    def softmax_statements() -> list[str]:
        """The softmax, with each mask that is all true on most tiles built and applied only where it is not."""
        moved = {i for m in masks for i in m.mask_indices}
        lines: list[str] = []
        for i in softmax:
            if i in moved:
                continue
            mask = next((m for m in masks if m.where_index == i), None)
            if mask is None:
                lines += statements([i])
                continue
            value = _text(_value(body[i]).args[1].value)
            lines += [
                "    # Every score of most tiles passes the mask (the index ranges lie inside its bounds: the test below);",
                "    # the mask is built and applied only on the tiles where some score may not.",
                *(f"    {line}" for line in tests[i]),
                *([f"    if not {uniform}:"] if value == mask.target else
                  [f"    if {uniform}:", f"        {mask.target} = {value}", "    else:"]),
                *(indent(line, "    ") for line in statements([*mask.mask_indices, i])),
            ]
        return lines

    lines = [
        *schedule.depth.lines(stages),
        "# Copies into shared memory move 16 bytes per thread along the contiguous dimension of each tile.",
        *([f"# `{plan.k.name}` is loaded [{q_cols}, {n}] in the source: the copies read it through its transposed "
           f"addresses into", f"# [{n}, {q_cols}] slots, which QK^T reads as a transposed view."]
          if plan.k_swapped else []),
        *(f"{layout}: gl.constexpr = _copy_layout({shape}, {dtype}, gl.num_warps())"
          for shape, layout in copy_layouts.items()),
        "# PV gets a wgmma as wide as the head dimension (the same registers as the accumulator's layout, so the",
        "# conversions around it are free); P is its A operand, straight from registers.",
        f"{pv_layout}: gl.constexpr = _mma_layout({m}, [{d}], {dtype}, gl.num_warps())",
        f"{p_layout}: gl.constexpr = _register_a_layout({pv_layout}, {dtype})",
        "# Address tiles in the copy layouts, computed once from their row and column offsets (before the buffers",
        "# below, so that the scratch space of the conversions can be reused by them).",
        *conversions,
        f"{q_smem} = gl.allocate_shared_memory({dtype}, {plan.q}.shape, "
        f"gl.NVMMASharedLayout.get_default_for({plan.q}.shape, {dtype}), {q_tile})",
        f"{k_smem} = gl.allocate_shared_memory({dtype}, [{stages}, {k_shape[1:-1]}], "
        f"gl.NVMMASharedLayout.get_default_for({k_shape}, {dtype}))",
        f"{v_smem} = gl.allocate_shared_memory({dtype}, [{stages}, {v_shape[1:-1]}], "
        f"gl.NVMMASharedLayout.get_default_for({v_shape}, {dtype}))",
        "# The V slot of iteration -1 holds zeros: the first iteration's PV (of a zero P) then adds nothing.",
        f"{v_smem}.index({stages} - 1).store(gl.zeros({v_shape}, {dtype}, layout={v_layout}))",
        "fence_async_shared()  # the register stores above are read by wgmma (the async proxy)",
        f"{iters} = {count}",
        f"# Prologue: start the copies of the first {stages} - 1 iterations (none past the last one).",
        f"for {prologue_i} in gl.static_range({stages} - 1):\n" + "\n".join(copies(prologue_i, prologue_i, "    ")),
        f"{p_prev} = gl.zeros([{m}, {n}], {dtype}, layout={p_layout})",
    ]
    # The loop's own statements and names, as both forms run them (the ring here, the warp-specialised form's
    # consumers).
    inside = set(guarded[1]) if guarded is not None else set()
    step = AttentionStep(plan, schedule.steady, it=it, iters=iters, index=index, uses_var=uses_var, slot=slot, prev_slot=prev_slot,
                     p_prev=p_prev, zeros=zeros, p_text=p_text, pv_layout=pv_layout, p_layout=p_layout,
                     acc_layout=acc_layout, before=statements([i for i in before if i not in inside]),
                     softmax=softmax_statements(),
                     rescales=statements(plan.rescales) + _inline_rescale(plan, body[plan.acc_index]),
                     after=statements([i for i in after if i not in inside]),
                     guard=_text(guarded[0].test) if guarded is not None else "",
                     guarded_before=statements([i for i in before if i in inside]),
                     guarded_after=statements([i for i in after if i in inside]))
    loop = list(step.lines(q=q_smem, k_ring=k_smem, v_ring=v_smem, in_flight=schedule.mma_in_flight, acquire=[
        f"    {slot} = {it} % {stages}",
        f"    {prev_slot} = ({it} + {stages} - 1) % {stages}",
        "    # K of this iteration (and V of the previous one) have landed: this thread's copies are done, and the",
        "    # barrier makes every thread's copies visible before the wgmmas read them.",
        f"    async_copy.wait_group({schedule.wait_groups.text(stages)})",
        "    _cta_barrier()",
    ]))
    loop += [
        f"    # This warpgroup's wgmmas that read slot `{prev_slot}` are done; with two warpgroups the barrier waits for",
        "    # the other one's PV too before the slot is refilled with the tiles of iteration it + NUM_STAGES - 1.",
        "    if gl.num_warps() > 4:",
        "        _cta_barrier()",
        f"    {nxt} = {it} + {stages} - 1",
        *copies(nxt, prev_slot, "    "),
    ]
    lines.append("\n".join(loop))
    lines += [
        "# The last iteration's PV, once its V tile has landed (every thread's copies: hence the barrier).",
        "async_copy.wait_group(0)",
        "_cta_barrier()",
        f"{plan.acc} = warpgroup_mma({p_prev}, {v_smem}.index(({iters} + {stages} - 1) % {stages}), "
        f"gl.convert_layout({plan.acc}, {pv_layout}), is_async=True)",
        f"{plan.acc} = gl.convert_layout(warpgroup_mma_wait(0, deps=[{plan.acc}]), {acc_layout})",
    ]
    ws_loop = None
    if with_ws:
        w = ws_names(name)
        ws_loop = (_ws_consumer_loop(step, stages, w, count=count, dtype=dtype, m=m, n=n, d=d), w, count, index)
    pipelined = indent("\n".join(lines), "    ")
    original = indent(_text(updated), "    ")
    rows = wgmma_rows(f"{plan.acc}.shape[0]", least_value(ctx.function, m))  # (a narrower query block runs as mma.sync: the translated loop)
    condition = " and ".join([*(f"isinstance({s}, int)" for s in strides), *([rows] if rows else [])])
    header = [
        "# Main loop, pipelined by triton-transpile (flash-attention shape: S = Q K^T, online softmax, acc += P V):",
        "# Q sits in shared memory for the whole loop; K and V tiles stream through a ring of NUM_STAGES slots",
        "# filled by cp.async ahead of use; each iteration issues its QK^T wgmma and the previous iteration's PV",
        "# wgmma, and waits only for QK^T before the softmax.",
    ]
    if strides:
        header += [
            f"# cp.async needs contiguous rows: the launcher passes {' and '.join(strides)} as compile-time "
            "constants when they",
            "# are 1 (and then `isinstance(..., int)` holds at compile time); other strides keep the translated loop.",
        ]
    if condition:
        why = [*(["rows with a stride"] if strides else []),
               *([f"a query block of fewer than {WGMMA_ROWS} rows (its dots run as mma.sync)"] if rows else [])]
        text = "\n".join([*header, f"if {condition}:", pipelined, "else:",
                          f"    # {' or '.join(why).capitalize()}: the loop runs as translated, unpipelined.", original])
    else:
        text = "\n".join([*header, "\n".join(ln[4:] for ln in pipelined.splitlines())])
    return text + "\n", schedule, ws_loop


def ws_names(name) -> dict[str, str]:  # noqa: ANN001 - the loop's namer
    """The names the warp-specialised form gives its shared buffers, barriers and partition parameters (unused in
    the kernel: `loop_namer`)."""
    return {key: name(key) for key in ("q_bufs", "k_ring", "v_ring", "k_ready", "k_empty", "v_ready", "v_empty",
                                       "turn", "consumer", "NCONS", "ROWS", "last", "v_it", "k_desc", "v_desc",
                                       "WS_STAGES", "ws_iters", "k_layout", "v_layout", "q_layout", "s")}


def _ws_consumer_loop(step: AttentionStep, stages: str, w: dict[str, str], *, count: str, dtype: str, m: str, n: str,
                      d: str) -> str:
    """The main loop as one consumer partition of the warp-specialised form runs it (`hopper_attention_ws`): the
    K and V tiles come from the loader partition's ring (`ready` barriers), each tile is handed back (`empty`) once
    this partition's wgmmas that read it are done, and the partitions take turns issuing their wgmmas (`turn`), so
    that one's softmax runs while the other's wgmmas keep the tensor cores busy. The step is the ring's
    (`AttentionStep`: same softmax, same masks); the row-split of the kernel's tiles is the caller's
    (`hopper_attention_ws`)."""
    plan, it, slot, prev_slot, iters, p_prev = step.plan, step.it, step.slot, step.prev_slot, step.iters, step.p_prev
    pv_layout, p_layout = step.pv_layout, step.p_layout
    c, ncons = w["consumer"], w["NCONS"]

    lines = [
        "# Warp-specialised main loop (this partition's rows): K and V tiles come from the loader partition's ring.",
        f"{stages}: gl.constexpr = {w['k_ring']}.shape[0]",
        f"{pv_layout}: gl.constexpr = _mma_layout({m}, [{d}], {dtype}, gl.num_warps())",
        f"{p_layout}: gl.constexpr = _register_a_layout({pv_layout}, {dtype})",
        f"{w['q_bufs']}.index({c}).store({plan.q}.to({w['q_bufs']}.dtype))",
        "fence_async_shared()  # the register store above is read by wgmma (the async proxy)",
        f"{iters} = {count}",
        f"{p_prev} = gl.zeros([{m}, {n}], {dtype}, layout={p_layout})",
    ]
    lines += step.lines(q=f"{w['q_bufs']}.index({c})", k_ring=w["k_ring"], v_ring=w["v_ring"], in_flight=1, acquire=[
        f"    {slot} = {it} % {stages}",
        "    # PV of the previous iteration (of a zero P in the first: it adds nothing, and reads the first V tile).",
        f"    {w['v_it']} = gl.maximum({it} - 1, 0)",
        f"    {prev_slot} = {w['v_it']} % {stages}",
        f"    mbarrier.wait({w['k_ready']}.index({slot}), ({it} // {stages}) & 1)",
        f"    mbarrier.wait({w['v_ready']}.index({prev_slot}), ({w['v_it']} // {stages}) & 1)",
        f"    _ws_turn_wait({w['turn']}, {it}, {c})",
    ], issued=[f"    _ws_turn_pass({w['turn']}, {c}, {ncons})"],
        k_read=[f"    mbarrier.arrive({w['k_empty']}.index({slot}))"],
        v_read=[f"    mbarrier.arrive({w['v_empty']}.index({prev_slot}), pred={it} > 0)"])
    lines += [
        "# The last iteration's PV.",
        f"if {iters} > 0:",
        f"    {w['last']} = ({iters} - 1) % {stages}",
        f"    mbarrier.wait({w['v_ready']}.index({w['last']}), (({iters} - 1) // {stages}) & 1)",
        f"    _ws_turn_wait({w['turn']}, {iters}, {c})",
        f"    {plan.acc} = warpgroup_mma({p_prev}, {w['v_ring']}.index({w['last']}), gl.convert_layout({plan.acc}, "
        f"{pv_layout}), is_async=True)",
        f"    _ws_turn_pass({w['turn']}, {c}, {ncons})",
        f"    {plan.acc} = gl.convert_layout(warpgroup_mma_wait(0, deps=[{plan.acc}]), {step.acc_layout})",
        f"    mbarrier.arrive({w['v_empty']}.index({w['last']}))",
    ]
    return "\n".join(lines) + "\n"


class _TileDtype(cst.CSTTransformer):
    """``v.dtype`` -> `dtype` for the tiles that stay in shared memory (K, V and Q share one element type)."""

    def __init__(self, tiles: set[str], dtype: str) -> None:
        super().__init__()
        self.tiles, self.dtype = tiles, dtype

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        if original_node.attr.value == "dtype" and isinstance(original_node.value, cst.Name) and \
                original_node.value.value in self.tiles:
            return cst.parse_expression(self.dtype)
        return updated_node


def _p_cast(body: Sequence[cst.BaseStatement], plan: AttentionPlan, softmax_from: int) -> int | None:
    """The statement ``p = p.to(dtype)`` that casts the second dot's A operand last before that dot and that nothing
    else reads (``p = p.to(v.dtype); acc = tl.dot(p, v, acc)``, lightllm's spelling), else None. The rings make that
    cast where they convert P to the wgmma A-operand layout, after PV retires: made before, while PV is in flight, it
    measured 1.25x slower in the warp-specialised form on an H200 (bench/RESULTS.md: sm90: attention, fixed
    launches)."""
    operand = unparenthesized(_value(body[plan.acc_index]).args[0].value)
    if not isinstance(operand, cst.Name):
        return None
    name = operand.value
    for i in range(plan.acc_index - 1, softmax_from - 1, -1):
        if name not in assigned_names(body[i]):
            if name in names_in(body[i]):
                return None  # read between the cast and the dot
            continue
        assignment = single_assign(body[i])
        if assignment is None:
            return None
        value = unparenthesized(assignment[1])
        if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "to"
                and isinstance(unparenthesized(value.func.value), cst.Name)
                and unparenthesized(value.func.value).value == name and len(value.args) == 1):
            return None
        if any(name in names_in(s) for j, s in enumerate(body) if j > plan.acc_index or j < softmax_from):
            return None  # the cast P is read after the dot, or the name before the scores
        return i
    return None


def _value(statement: cst.BaseStatement) -> cst.Call:
    return statement.body[0].value  # type: ignore[union-attr,return-value]


def _load_args(statement: cst.BaseStatement) -> tuple[cst.BaseExpression, cst.BaseExpression | None]:
    call = _value(statement)
    pointer = next(a.value for a in call.args if a.keyword is None)
    mask = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "mask"), None)
    return pointer, mask

