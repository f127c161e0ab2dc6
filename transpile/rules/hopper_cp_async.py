"""sm90: pipeline a pointer GEMM main loop with a cp.async ring and asynchronous wgmma.

Matches: ``for k in range(...)`` whose body loads the operands of ``acc = tl.dot(a, b, acc)`` with
``tl.load(ptrs, mask=..., other=0)`` (the pointer plan of `transpile.analysis.pipeline`), the pointer tiles built
before the loop as ``base + rows[:, None] * stride + cols[None, :] * stride`` sums; B may be read transposed
(``tl.dot(x, tl.trans(w), acc)``: its ring holds the tile as loaded and the wgmma reads a transposed view of the slot),
and there may be several such dots written one after the other (a gated GEMM's gate and up products from one A tile:
one ring per tile, the wgmmas of an iteration issued in order and retired together). A dot operand computed from a
loaded tile (dequantised weights, a cast tile) has its raw tile copied: the slot is read into registers after the
copies' wait, the operand computed there and stored into one of two staging buffers for the wgmma (`Staged`); that
form is faster than the source only with few tiles, so its variant's launcher runs it for grids of one wave (at most
one program per SM, per autotune config) and the source kernel for the others (`STAGED_DEPTH`).
Emits, under a test that is partly compile-time (16-bit operands) and partly run-time (16-byte alignment): a ring of
``NUM_STAGES`` shared-memory slots per operand filled ``NUM_STAGES - 1`` iterations ahead with cp.async (16 bytes per
thread copy, one commit group per iteration, masks kept and past-the-end iterations masked off); per iteration
``wait_group(NUM_STAGES - 2)``, a CTA barrier, ``warpgroup_mma(..., is_async=True)`` from the slot,
``warpgroup_mma_wait(1)`` (with two warpgroups a second barrier), then the refill of the slot the retired wgmma read.
No proxy fence after ``wait_group`` (Triton's own pipeliner has none; measured 3-5% slower with one).
The alignment hints the copies need (``multiple_of``/``max_contiguous``/``max_constancy``) sit only on values the
guarded branch creates itself: a hint marks the op defining a value, so one on a value shared with the fallback loop
would make its plain loads vectorise on unaligned rows ("misaligned address").
Tiles in a blocked layout are rebuilt at the start of the ring branch in 16-byte copy layouts: the statements before
the loop that compute the index vectors (and layouts) the ring reads are copied with ``_ring`` names, so the kernel's
declarations, and the fallback loop's plain loads, keep the 4-wide blocked layouts (8-wide plain loads made the
fallback 15-30% slower on unaligned sizes). Where that slice cannot be copied safely, the ring keeps the blocked
layouts (8-byte copies).
Where the 16-byte test fails but rows are 8-byte aligned and the sizes multiples of 4 elements (K = 3900, say), an
``elif`` runs the same ring with 8-byte copies (2.4x the original at 4000x4100x3900, whose plain loads of such rows
are not vectorised; the translated loop was 0.96x there). The fallback (``else``) is the translated loop: 8- and
32-bit operands (wgmma wants B K-major in shared memory, which a copy of an N-contiguous tile does not write), and at
run time odd rows or sizes (cp.async rejects copies under 4 bytes). A ring staged through registers measured slower
than the translated loop there (bench/RESULTS.md: Profitability), so it is not emitted.
Profitability (measured on an H100, Triton 3.6, against the source kernel compiled by Triton): the ring ran at 0.96x
(grouped GEMM, 4096^3), 0.70x (split-K GEMM, 2048x2048x8192) and 0.69x (MoE gather GEMM); Triton 3.6's own pipeliner
builds the same cp.async ring and wins on occupancy. So by default the rule leaves such a loop alone and the kernel is
kept as Triton (`RuleContext.slower_than_triton`, keyed on the copy engine: UNPROFITABLE_RINGS in rules/base.py);
``--gluon-always`` emits the ring. The figures are in bench/RESULTS.md ("Profitability").
Known limit: the run-time test reads the kernel arguments in the pointer-tile definitions and in the masks (directly
or through loop statements); a mask bound computed before the loop from other values is not tested.
Targets: sm90.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import libcst as cst

from transpile.analysis.attention import plan_attention_loop
from transpile.analysis.launch_alignment import run_time_alignment, tile_base
from transpile.analysis.pipeline import (DotChain, LoopPlan, LoopRefusal, OperandLoad, advance_after, consumer_indices,
                                         loop_body, plan_loop)
from transpile.cst_utils import (
    calls_in,
    assigned_names,
    bound_names,
    broadcast_axis,
    names_in,
    product_factors,
    single_assign,
    sum_terms,
)
from transpile.lowering.sm90 import (GEMM_STEADY_SCALED, GEMM_STEADY_STAGED, IN_ORDER_STEADY, WGMMA_ROWS, CpAsyncCopy,
                                     LoopText, Product, RingNames, Staged, Wgmma, gemm_ring, wgmma_rows,
                                     wgmmas_in_order)
from transpile.rules.base import Counterexample, Example, Rule, RuleContext
from transpile.rules.dot import scaled_operand_type, translated_scaled_dot, upcast_text
from transpile.rules.copy_layouts import (
    FreshTiles,
    blocked_tile_layouts,
    in_copy_layouts,
)
from transpile.rules.hopper_schedule import (
    RingOperand,
    Sm90Ring,
    WaitGroups,
    kernel_configs,
    least_rows,
    least_value,
)
from transpile.rules.pipeline_text import (
    LoopRange,
    code,
    indent,
    loop_namer,
    namer,
    next_names,
    rename,
    ring_depth,
    statements,
)

EXAMPLE = (
    "import triton\nimport triton.language as tl\n\n@triton.jit\n"
    "def k(a_ptr, b_ptr, c_ptr, K, N, stride_am, stride_bk, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):\n"
    "    offs_m = tl.arange(0, BM)\n    offs_n = tl.arange(0, BN)\n    offs_k = tl.arange(0, BK)\n"
    "    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]\n"
    "    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :]\n"
    "    acc = tl.zeros((BM, BN), dtype=tl.float32)\n"
    "    for k in tl.range(0, tl.cdiv(K, BK), num_stages=3):\n"
    "        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)\n"
    "        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)\n"
    "        acc = tl.dot(a, b, acc)\n        a_ptrs += BK\n        b_ptrs += BK * stride_bk\n"
    "    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.float16))\n"
)

# A gated GEMM (SwiGLU's gate and up products from one A tile), its weights read transposed ([N, K] rows, `x @ w.T`):
# three rings, two wgmmas an iteration, each reading a transposed view of its weight slot.
GATED = EXAMPLE.replace("b_ptr, c_ptr", "g_ptr, u_ptr, c_ptr").replace(
    "    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :]\n",
    "    g_ptrs = g_ptr + offs_n[:, None] * stride_bk + offs_k[None, :]\n"
    "    u_ptrs = u_ptr + offs_n[:, None] * stride_bk + offs_k[None, :]\n"
    "    up = tl.zeros((BM, BN), dtype=tl.float32)\n").replace(
    "        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)\n"
    "        acc = tl.dot(a, b, acc)\n        a_ptrs += BK\n        b_ptrs += BK * stride_bk\n",
    "        g = tl.load(g_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)\n"
    "        u = tl.load(u_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)\n"
    "        acc = tl.dot(a, tl.trans(g), acc)\n        up = tl.dot(a, tl.trans(u), up)\n"
    "        a_ptrs += BK\n        g_ptrs += BK\n        u_ptrs += BK\n").replace(
    "acc.to(tl.float16)", "(acc * up).to(tl.float16)")

# The A tile also read after the dot (row sums of A beside the product): read from its slot in registers there.
ROW_SUMS = EXAMPLE.replace("    acc = tl.zeros((BM, BN), dtype=tl.float32)\n",
                           "    acc = tl.zeros((BM, BN), dtype=tl.float32)\n    rows = tl.zeros((BM,), dtype=tl.float32)\n").replace(
    "        acc = tl.dot(a, b, acc)\n",
    "        acc = tl.dot(a, b, acc)\n        rows += tl.sum(a.to(tl.float32), axis=1)\n").replace(
    "acc.to(tl.float16))", "(acc / rows[:, None]).to(tl.float16))")

# Weight-only quantised GEMM: int8 weights dequantised by per-column scales in the loop, right before the dot. The
# ring copies the int8 tile; the operand is computed from the slot in registers and staged for the wgmma.
DEQUANT = EXAMPLE.replace("b_ptr, c_ptr", "b_ptr, s_ptr, c_ptr").replace(
    "    acc = tl.zeros((BM, BN), dtype=tl.float32)\n",
    "    scales = tl.load(s_ptr + offs_n)\n    acc = tl.zeros((BM, BN), dtype=tl.float32)\n").replace(
    "        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)\n"
    "        acc = tl.dot(a, b, acc)\n",
    "        w = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0)\n"
    "        b = (w.to(tl.float32) * scales[None, :]).to(tl.float16)\n"
    "        acc = tl.dot(a, b, acc)\n")

# Chained dots (a backward pass in the style of attention's dK/dV loop): a product made afresh from a tile the loop
# does not change and a ring tile read transposed, then two dots whose A the iteration computes from it, each into a
# carried accumulator. Pipelined in order: B from the ring, the unchanged tile in shared memory once, A from registers.
CHAINED = (
    "import triton\nimport triton.language as tl\n\n@triton.jit\n"
    "def k(q_ptr, k_ptr, o_ptr, T, stride, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):\n"
    "    offs_n = tl.program_id(0) * BN + tl.arange(0, BN)\n    offs_m = tl.arange(0, BM)\n"
    "    offs_d = tl.arange(0, D)\n"
    "    kt = tl.load(k_ptr + offs_n[:, None] * stride + offs_d[None, :])\n"
    "    q_ptrs = q_ptr + offs_m[:, None] * stride + offs_d[None, :]\n"
    "    acc = tl.zeros((BN, D), dtype=tl.float32)\n    acc2 = tl.zeros((BN, D), dtype=tl.float32)\n"
    "    for start in range(0, T, BM):\n"
    "        q = tl.load(q_ptrs, mask=(start + offs_m)[:, None] < T, other=0.0)\n"
    "        s = tl.dot(kt, tl.trans(q))\n"
    "        p = tl.exp2(s)\n"
    "        acc = tl.dot(p.to(tl.float16), q, acc)\n"
    "        acc2 = tl.dot((p * p).to(tl.float16), q, acc2)\n"
    "        q_ptrs += BM * stride\n"
    "    tl.store(o_ptr + offs_n[:, None] * stride + offs_d[None, :], (acc + acc2).to(tl.float16))\n"
)

# cp.async copy widths the ring is emitted for, widest first: (16-bit elements per copy, bytes per copy). The 8-byte
# copies take rows and sizes that are multiples of 4 elements but not of 8 (K = 3900, say): half the width, but still
# pipelined, where plain loads of such rows are not vectorised at all.
TIERS = ((8, 16), (4, 8))
ZEROS = ("0", "0.0", "0.", "None")


class HopperCpAsyncPipeline(Rule):
    name = "hopper-cp-async-pipeline"
    matches = "a main loop whose dot operands are pointer-tile loads"
    emits = ("a cp.async ring (16-byte copies, commit/wait groups) feeding async wgmma kept one deep in flight, under "
             "a run-time alignment test; the same ring with 8-byte copies under a weaker one; the translated loop "
             "otherwise")
    examples = (
        Example(EXAMPLE, (
            "NUM_STAGES: gl.constexpr = 3",
            "and (a_ptr.to(gl.int64) % 16 == 0)",
            "and (stride_am % 8 == 0)",
            "and (K % 8 == 0)",
            "a_ptrs_next = a_ptr + offs_m_ring[:, None] * stride_am + offs_k_ring[None, :]",
            "_cp_async_load(a_smem.index(i), gl.max_contiguous(gl.multiple_of(a_ptrs_next, [1, 16]), [1, 8]),",
            "mask=gl.max_constancy(gl.broadcast(offs_k_ring[None, :] < K - k_next * BK, a_ptrs_next)[0] & (i < num_iters), "
            "[1, 8]))",
            "else:",
            "a = gl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)",
            "async_copy.wait_group(NUM_STAGES - 2)",
            "acc = warpgroup_mma(a_smem.index(slot), b_smem.index(slot), acc, is_async=True)",
            "acc, _, _ = warpgroup_mma_wait(1, deps=[acc, a_smem.index(slot), b_smem.index(slot)])",
            "a_ptrs_next += BK",
            "acc = warpgroup_mma_wait(0, deps=[acc])",
        ), "sm90"),
        # a gated GEMM, its weights read transposed: two wgmmas an iteration, retired together
        Example(GATED, (
            "g_smem = gl.allocate_shared_memory(g_ptr.dtype.element_ty, [NUM_STAGES, BN, BK],",
            "acc = warpgroup_mma(a_smem.index(slot), g_smem.index(slot).permute((1, 0)), acc, is_async=True)",
            "up = warpgroup_mma(a_smem.index(slot), u_smem.index(slot).permute((1, 0)), up, is_async=True)",
            "acc, up, _, _, _ = warpgroup_mma_wait(2, deps=[acc, up, a_smem.index(slot), g_smem.index(slot), "
            "u_smem.index(slot)])",
            "acc, up = warpgroup_mma_wait(0, deps=[acc, up])",
        ), "sm90"),
        # an operand computed from its slot (dequantised weights): the slot read into registers after the wait, the
        # operand stored into one of two staging buffers and fenced, the wgmma reading the A slot and that buffer
        Example(DEQUANT, (
            "w_smem = gl.allocate_shared_memory(b_ptr.dtype.element_ty, [NUM_STAGES, BK, BN]",
            "w_staged = gl.allocate_shared_memory(gl.float16, [2, BK, BN]",
            "w = w_smem.index(slot).load(",
            "w_staged.index(stage).store(b)",
            "fence_async_shared()",
            "acc = warpgroup_mma(a_smem.index(slot), w_staged.index(stage), acc, is_async=True)",
            "deps=[acc, a_smem.index(slot), w_smem.index(slot), w_staged.index(stage)]",
        ), "sm90"),
        # chained dots, pipelined in order: the unchanged tile stored into shared memory once, each dot an
        # asynchronous wgmma waited for where it is read (by default the launcher runs the Gluon kernel at 8 warps
        # and 16 iterations or more: tests/test_sm90_in_order.py)
        Example(CHAINED, (
            "kt_smem = gl.allocate_shared_memory(kt.dtype, kt.shape, _mma_k_width(kt.shape, kt.dtype, False), kt)",
            "s = warpgroup_mma(kt_smem, q_smem.index(slot).permute((1, 0)),",
            "s = warpgroup_mma_wait(0, deps=[s])",
            "acc = _wgmma_a_regs(p.to(gl.float16), q_smem.index(slot), acc)",
            "acc2 = _wgmma_a_regs((p * p).to(gl.float16), q_smem.index(slot), acc2)",
            "acc, acc2, _ = warpgroup_mma_wait(0, deps=[acc, acc2, q_smem.index(slot)])",
            "and BN >= 64",
        ), "sm90"),
        # the A tile also read after the dot: from its slot, in the layout the translated code gives it
        Example(ROW_SUMS, (
            "a = a_smem.index(slot).load(mma_layout)",
            "acc = warpgroup_mma(a_smem.index(slot), b_smem.index(slot), acc, is_async=True)",
        ), "sm90"),
    )
    counterexamples = (
        # chained dots whose tile has fewer rows than a warpgroup's wgmma takes: not pipelined in order
        Counterexample(CHAINED.replace("BN: tl.constexpr", "BN_: tl.constexpr").replace(
            "    offs_n = tl.program_id(0) * BN", "    BN: tl.constexpr = 32\n    offs_n = tl.program_id(0) * BN"),
            ("_wgmma_a_regs(",), "TT040", "the dot's tile has 32 rows", "sm90", gluon_always=True),
        # the A tile read before the dot: the ring reads it from its slot only after the wait, with the wgmma
        Counterexample(ROW_SUMS.replace(
            "        acc = tl.dot(a, b, acc)\n        rows += tl.sum(a.to(tl.float32), axis=1)\n",
            "        rows += tl.sum(a.to(tl.float32), axis=1)\n        acc = tl.dot(a, b, acc)\n"),
            ("_cp_async_load(", "a_smem.index(slot).load("), "TT040",
            "`a` is read outside the dot before it, at line 16", "sm90", gluon_always=True),
        # a statement of the consumer between two dots: the wgmmas of an iteration are issued one after the other
        Counterexample(GATED.replace("        up = tl.dot(a, tl.trans(u), up)\n",
                                     "        acc = acc * 0.5\n        up = tl.dot(a, tl.trans(u), up)\n"),
                       ("_cp_async_load(", "warpgroup_mma_wait(2"), "TT040",
                       "the statement at line 19 between its 2 dots", "sm90", gluon_always=True),
        # ... and not staged where the loop has a second dot (the ring stages a computed operand for one dot)
        Counterexample(DEQUANT.replace("        acc = tl.dot(a, b, acc)\n",
                                       "        acc = tl.dot(a, b, acc)\n        acc = tl.dot(a, b, acc)\n"),
                       ("w_staged",), "TT040", "in a loop of several dots or read transposed", "sm90",
                       gluon_always=True),
        # the `a` tile addressed afresh each iteration (no loop-carried tile of pointers): kept, with the measurement
        Counterexample(EXAMPLE.replace(
            "        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)\n",
            "        a = tl.load(a_ptr + offs_m[:, None] * stride_am + (k * BK + offs_k)[None, :],\n"
            "                    mask=(k * BK + offs_k)[None, :] < K, other=0.0)\n"),
            ("_cp_async_load(", "async_copy.wait_group("), "TT041",
            "the pointer tile of `a` is not a loop-carried tile of pointers", "sm90"),
    )

    def leave_For(self, ctx: RuleContext, original: cst.For, updated: cst.For):  # noqa: ANN201
        default = ctx.function.num_stages or ctx.function.launch_stages or 3
        plan = plan_loop(ctx.source, original, ctx.plan, default, transposed_operands=True, several_dots=True,
                         computed_operands=True, fresh_dots=True, chained_dots=True, advances_after=True)
        if plan is None or isinstance(plan, LoopRefusal) or plan.kind != "pointer":
            return updated  # no dot, refused (HopperTMAPipeline reports it), or descriptor tiles (the TMA ring)
        in_order = any(chain.fresh or chain.chained for chain in plan.chains)
        if in_order and plan_attention_loop(ctx.source, original, ctx.plan, default) is not None:
            return updated  # flash attention's two dots: the attention rules' loop, and their measurements
        emitter = _Emitter(ctx, plan, original, updated)
        emitted = emitter.emit()
        if emitter.loaded and not ctx.gluon_always:
            # Tiles addressed from values the kernel loads (a grouped GEMM's per-problem pointers): Triton's own
            # compile copies them 2 bytes a lane, and the cp.async ring has no in-kernel alignment test for them yet
            # (its alignment hints sit on tile pointers the fallback loop reads too), so the pointer rings'
            # measurement, of tiles Triton copies 16 bytes a lane, is not the reason here.
            loaded = ", ".join(f"`{n}`" for n in sorted(emitter.loaded))
            ctx.unprofitable[original] = (
                f"its tiles are addressed from values the kernel loads ({loaded}): Triton's own compile copies such "
                "tiles 2 bytes a lane (the grouped GEMM fixture ran at 39.5 TFLOP/s on an H200 at 2048^3), and the "
                "cp.async ring does not yet test such values in the kernel (its alignment hints would reach the "
                "fallback loop's tiles)")
            return updated
        if isinstance(emitted, _AddressForm) and not in_order and emitter.scaled is None \
                and ctx.slower_than_triton(original, "cp.async, address form", emitted):
            return updated  # the policy keeps such GEMMs as Triton whatever their address form (rules/base.py)
        if isinstance(emitted, _AddressForm) and not in_order and emitter.scaled is not None \
                and ctx.slower_than_triton(original, "cp.async, scaled dot", emitted):
            return updated  # ... and scaled dots, whose ring was measured slower whatever its tiles' addresses
        if isinstance(emitted, str):
            ctx.diagnostics.append(ctx.source.diagnostic(original, "TT040", f"main loop not pipelined: {emitted}"))
            return updated
        staged = emitted.ring.steady in (GEMM_STEADY_STAGED, GEMM_STEADY_SCALED)
        if emitter.scaled is not None and ctx.slower_than_triton(original, "cp.async, scaled dot"):
            return updated  # (rules/base.py: UNPROFITABLE_RINGS)
        if in_order and emitter.fresh and ctx.slower_than_triton(
                original, "cp.async in order, fresh addresses", f"`{emitter.fresh[0]}` is addressed afresh each "
                "iteration (no loop-carried tile of pointers)"):
            return updated  # (the copies of such tiles take the translated layouts: narrow; rules/base.py)
        if not in_order and not staged and ctx.slower_than_triton(original, "cp.async"):
            return updated  # the profitability policy keeps the kernel as Triton (see the module docstring)
        if in_order and not ctx.gluon_always:
            # Faster than Triton's own pipeliner at 8 warps (attention's backward: 1.0-1.3x at head dimension 64,
            # 1.1-1.25x at 128), slower at 4 with large accumulators (0.64-0.76x at head dimension 128;
            # bench/RESULTS.md): the launcher runs the Gluon kernel for launches of 8 warps or more (`IN_ORDER_WARPS`).
            # (An autotuned kernel: the autotuner times each config against its source twin and keeps the faster.)
            ctx.launch_checked = True
        if in_order and not ctx.gluon_always and not ctx.function.autotune_configs:
            ctx.launch_at_least = tuple(dict.fromkeys((*ctx.launch_at_least, ("num_warps", IN_ORDER_WARPS))))
            # ... and loops of IN_ORDER_LEAST_ITERATIONS iterations or more (fewer: the ring's fill and the shared
            # copies of the tiles the loop does not change are not paid back; 0.93-0.96x at 2-8 iterations)
            short = _trip_count_test(ctx, original, IN_ORDER_LEAST_ITERATIONS)
            if short is not None:
                ctx.launch_source_when = tuple(dict.fromkeys((*ctx.launch_source_when, short)))
        if staged and emitter.scaled is None and _casts_only(plan, original, set(ctx.function.constexpr_names)) \
                and ctx.slower_than_triton(original, "cp.async, cast operands"):
            return updated  # (no gain where the computation is a cast alone: rules/base.py)
        if staged and not ctx.gluon_always:
            # Faster than the source only with few tiles (STAGED_DEPTH): the launcher runs the Gluon kernel for grids
            # of one wave, the source kernel for the others (per config where the kernel is autotuned), and for
            # launches of fewer rows than a warpgroup's wgmma takes (`STAGED_ROWS`).
            ctx.launch_checked = True
            ctx.launch_one_wave = True
            if emitted.rows[0]:
                ctx.launch_at_least = tuple(dict.fromkeys((*ctx.launch_at_least, emitted.rows)))
        if ctx.launch_checked:
            # Tiles the loop moves by integer parameters alone (`x_ptrs += stride_x_head`, a loop over heads): the
            # copies are 16 bytes a lane only where those are multiples of 16 (as a launch specialises them), which
            # the launcher tests with the tensors' alignment; others run the source kernel (cp.async takes no
            # copy of 2 bytes)
            ctx.launch_divisible = tuple(dict.fromkeys((*ctx.launch_divisible, *_moving_params(ctx, plan, original))))
        ctx.pipelined_loop(original, emitted.ring)
        # The header comment and the loop's own leading lines go before the first statement (`statements`).
        return cst.FlattenSentinel(statements(emitted.text, updated.leading_lines))

    def leave_FunctionDef(self, ctx: RuleContext, original: cst.FunctionDef, updated: cst.FunctionDef
                          ) -> cst.FunctionDef:
        """The ring's fresh pointer tiles get the translated definitions of the tiles they copy. Where those tiles
        are in a blocked layout, the ring rebuilds them, and the index vectors its masks read, in 16-byte copy layouts
        (8 x 16-bit elements per thread); the fallback loop keeps the blocked layouts (4-element loads)."""
        if not ctx.fresh_tiles:
            return updated
        updated = updated.visit(FreshTiles(updated, ctx.fresh_tiles))  # type: ignore[assignment]
        layouts = blocked_tile_layouts(updated, ctx.copy_tiles)
        if not layouts:
            return updated
        taken = names_in(updated)
        fresh = set(ctx.fresh_tiles)

        def binds_fresh(block: cst.BaseSuite) -> bool:
            """The block's own statements bind a ring's fresh tiles: it is a ring's branch."""
            return isinstance(block, cst.IndentedBlock) and any(assigned_names(s) & fresh for s in block.body
                                                                 if isinstance(s, cst.SimpleStatementLine))

        def rings_in(statements: list[cst.BaseStatement], outer: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
            """`statements` (a block; `outer`: the statements run before it) with each ring rebuilt in copy layouts.
            A ring may stand in a block of its own (a copy of the loop that unswitching made, `if not NO_GROUPS:`):
            only the ring's branches are rebuilt, never the blocks around it, which hold the fallback loops."""
            body = list(statements)
            for i, statement in enumerate(body):
                if isinstance(statement, cst.If) and binds_fresh(statement.body):
                    # The 16-byte ring, then the 8-byte one (`elif`): the same names serve both branches, whose
                    # values do not leave them.
                    (_, width16), (_, width8) = TIERS
                    ring = in_copy_layouts([*outer, *body[:i]], statement, layouts, namer(set(taken)), 8 * width16)
                    tier = statement.orelse
                    if ring is not None and isinstance(tier, cst.If) and binds_fresh(tier.body):
                        tier = in_copy_layouts([*outer, *body[:i]], tier, layouts, namer(set(taken)), 8 * width8)
                        ring = ring.with_changes(orelse=tier) if tier is not None else None
                    if ring is not None:
                        body[i] = ring
                        ctx.need("copy_layout")
                elif isinstance(statement, cst.If) and bound_names(statement) & fresh \
                        and isinstance(statement.body, cst.IndentedBlock):
                    new = statement.with_changes(body=statement.body.with_changes(
                        body=rings_in(list(statement.body.body), [*outer, *body[:i]])))
                    orelse = statement.orelse
                    if isinstance(orelse, cst.Else) and isinstance(orelse.body, cst.IndentedBlock) \
                            and bound_names(orelse) & fresh:
                        new = new.with_changes(orelse=orelse.with_changes(body=orelse.body.with_changes(
                            body=rings_in(list(orelse.body.body), [*outer, *body[:i]]))))
                    body[i] = new
            return body

        body = rings_in(list(updated.body.body), [])
        return updated.with_changes(body=updated.body.with_changes(body=body))


#: The least depth of a ring with an operand computed in registers (`Staged`). On an H200 (Triton 3.6) the GPTQ-style
#: 4-bit GEMM fixture at its autotuned num_stages=2 ran 0.96x its source at M = 16-128 (N = K = 4096) and 0.65x at
#: 4096^3; with 3 slots (GPU time, CUDA graphs) 1.27-1.32x at M = 16-128, 1.21x at 512, but 0.84-0.88x from
#: M = 1024 (8 x 32 tiles of 128 x 128 and more): the launcher runs the form only for grids of one wave
#: (`_OneWaveOrTriton`; bench/RESULTS.md: Profitability).
STAGED_DEPTH = 3
#: The fewest warps a launch of a loop pipelined in order (`IN_ORDER_STEADY`) runs the Gluon kernel with. On an
#: H200 (Triton 3.6), suite_attention_bwd's dK/dV loop (32 or 64 x 128 tiles) against Triton's own compile of the
#: source: 1.00-1.31x at 8 warps and head dimension 64, 1.11-1.24x at 128; at 4 warps 0.94-1.10x (64) and
#: 0.64-0.76x (128: two 128 x 128 fp32 accumulators a warpgroup), 2.8-3.5x where the source spills (64 x 128 x 64).
IN_ORDER_WARPS = 8
#: ... and the fewest iterations of its loop: at 2-8 iterations (128-256 queries of 32 or 64 rows) the same kernel ran
#: 0.93-0.96x at head dimension 128 and 0.93-1.00x at 64, from 16 on 1.04-1.42x.
IN_ORDER_LEAST_ITERATIONS = 16
#: The least rows of such a ring's dot tile: a wgmma's M is 64 rows a warpgroup (Triton runs a narrower dot as
#: mma.sync; Gluon's wgmma refuses it). Launches with fewer run the source kernel.
STAGED_ROWS = WGMMA_ROWS


class _AddressForm(str):
    """Why the ring does not take the loop, where the reason is the form of its tiles' addresses or loads (not their
    element types): a loop the profitability policy keeps as Triton whatever its form."""


class _Emitted:
    """The emitted source of a pipelined loop and the schedule it was written from (a plain `str` from
    `_Emitter.emit` is the reason it was not); `rows`: (the constexpr parameter that sizes the dot's rows, the least
    value a launch of the Gluon kernel needs), for a ring with a staged operand."""

    def __init__(self, text: str, ring: Sm90Ring, rows: tuple[str, int] = ("", 0)) -> None:
        self.text, self.ring, self.rows = text, ring, rows


def _moving_params(ctx: RuleContext, plan: LoopPlan, loop: cst.For) -> list[str]:
    """The integer parameters that move a tile of the loop by themselves: a term of a `+=` advance after the loads
    that is a parameter or a product of parameters, none a constexpr or a number (`x_ptrs += stride_x_head`; not
    `a_ptrs += BLOCK_K * stride_ak`, whose block factor keeps the copies' alignment)."""
    body = loop_body(loop)
    params = {p.name for p in ctx.function.params} - set(ctx.function.constexpr_names)
    found: list[str] = []
    for i in plan.producer_after():
        statement = body[i]
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
            else None
        if not isinstance(small, cst.AugAssign) or not isinstance(small.operator, cst.AddAssign):
            continue
        for term in sum_terms(small.value):
            factors = product_factors(term)
            if all(isinstance(f, cst.Name) and f.value in params for f in factors):
                found += [f.value for f in factors if f.value not in found]  # type: ignore[attr-defined]
    return found


def _casts_only(plan: LoopPlan, loop: cst.For, constexprs: set[str]) -> bool:
    """Every operand the loop computes from a loaded tile is that tile cast to a type the launch passes,
    `a = a_tile.to(dot_dtype)` with `dot_dtype: tl.constexpr` (mamba's `tl.load(...).to(dot_dtype)`, split by
    `transpile.passes.operand_names`; `AB_DTYPE`): the dot's type, chosen from the inputs', no dequantisation. (A cast
    to a type the kernel names, `b.to(tl.bfloat16)` of int16 codes, may be one: the ring's measurements there stand.)"""
    body = loop_body(loop)
    computed = [load for load in plan.loads if load.computed]
    return bool(computed) and all(
        (assigned := single_assign(body[i])) is not None and isinstance(assigned[1], cst.Call)
        and isinstance(assigned[1].func, cst.Attribute) and assigned[1].func.attr.value == "to"
        and isinstance(assigned[1].func.value, cst.Name) and len(assigned[1].args) == 1
        and isinstance(assigned[1].args[0].value, cst.Name) and assigned[1].args[0].value.value in constexprs
        for load in computed for i in load.prep)


class _Emitter:
    """The guarded ring for one loop plan, or the reason it cannot be emitted."""

    def __init__(self, ctx: RuleContext, plan: LoopPlan, original: cst.For, updated: cst.For) -> None:
        self.ctx, self.plan, self.original, self.updated = ctx, plan, original, updated
        self.body = list(updated.body.body)  # type: ignore[union-attr]
        self.params = {p.name for p in ctx.function.params if not p.is_constexpr}
        self.loaded: set[str] = set()  # values the kernel loads that its tiles are addressed from
        self.scaled: cst.Call | None = None  # a `tl.dot_scaled`, translated (`_dot_scaled(a, a_scale, ...)`)

    def emit(self) -> _Emitted | str:
        ctx, plan = self.ctx, self.plan
        if len(self.body) != len(self.original.body.body):  # type: ignore[union-attr]
            # (the plan's statement indices are the source's: `a, s = helper(x)` is followed in the translation by a
            # conversion of each result, `a = gl.convert_layout(a, ...)`)
            return ("the translated loop body has statements the source's has not (layout conversions of a helper's "
                    "results), which the ring's plan does not place")
        # Several dots (a gated GEMM's gate and up products from one A tile, or two products into one accumulator in
        # turn): each is a wgmma of its own from the iteration's slots; they are written one after the other.
        indices = [chain.index for chain in plan.chains]
        # A dot made afresh each iteration (`s = tl.dot(q, tl.trans(k))`) or one whose A operand the iteration
        # computes from earlier products (attention's backward): the loop's statements run in order, each such dot a
        # wgmma waited for at once, from the slots (`in_order`).
        self.in_order = any(chain.fresh or chain.chained for chain in plan.chains)
        self.fresh: list[str] = []  # (in order) tiles addressed afresh each iteration, not through carried pointers
        if any(not chain.acc_in_dot and not chain.fresh for chain in plan.chains):
            return "a dot whose result is added to its accumulator (the wgmma takes the accumulator itself)"
        factored = next((chain for chain in plan.chains if chain.factors), None)
        if factored is not None:  # (not measured on sm90: the AMD rings take it)
            return (f"a dot operand is computed from several tiles loaded in the loop (`{factored.factors[0][0]}` "
                    "among them): the cp.async ring computes an operand from one")
        consumer = consumer_indices(plan.producer, {load.index for load in plan.loads}, self.body)
        original_body = list(self.original.body.body)  # type: ignore[union-attr]
        self.staged: dict[str, int] = {}  # loads a dot operand is computed from -> the operand's position
        scaled = [chain for chain in plan.chains if ctx.plan.dots[chain.call].scaled is not None]
        for load in plan.loads:
            if not load.computed or self.in_order:  # (in order: the tile is read from its slot where it is used)
                continue
            if scaled and load.name in scaled[0].operands:
                continue  # (a scaled dot's operands are upcast from their slots below, computed or not)
            line = ctx.source.position(original_body[load.index])[0]
            users = [chain for chain in plan.chains if load.name in chain.operands]
            if not users:
                return (f"a dot operand is computed from the tile `{load.name}` loaded at line {line} (the wgmma reads "
                        "its operands as copied into shared memory)")
            chain = users[0]
            position = chain.operands.index(load.name)
            site = ctx.plan.dots[chain.call]
            operand = site.a if position == 0 else site.b
            if load.prep or not (isinstance(operand, cst.Name) and operand.value == load.name):
                # The operand is computed from the slot in registers and stored for the wgmma (`Staged`).
                if len(plan.chains) > 1 or load.transposed or load.twice or load.sides or len(users) > 1 \
                        or chain.operands.count(load.name) > 1:
                    return (f"a dot operand is computed from the tile `{load.name}` loaded at line {line}, in a loop "
                            "of several dots or read transposed (the ring stages a computed operand for one dot)")
                self.staged[load.name] = position
                continue
            early = [i for i in consumer if i < min(indices) and load.name in names_in(original_body[i])]
            if early:
                return (f"`{load.name}` is read outside the dot before it, at line "
                        f"{ctx.source.position(original_body[early[0]])[0]} (the ring reads the tile from its slot "
                        "after the copies' wait, where the wgmma is issued)")
        if scaled:
            # Hopper has no microscaled MMA: both operands are upcast in registers from their slots, with their
            # scales (loaded by the loop's own statements), and staged for the wgmma (`Staged`), as Triton's own
            # compile decomposes the dot. An operand the loop computes from its tile (a preshuffled tile put back
            # in order by reshapes) is computed from the slot first, after the copies' wait.
            line = ctx.source.position(scaled[0].call)[0]
            if len(plan.chains) > 1 or self.in_order or self.staged:
                return (f"the `tl.dot_scaled` at line {line} is one of several dots, or beside an operand computed in "
                        "registers (the ring stages the upcast operands of one scaled dot)")
            loaded = {load.name: load for load in plan.loads}
            for position, operand in enumerate(scaled[0].operands):
                load = loaded.get(operand)
                if load is None or load.transposed or scaled[0].operands.count(operand) > 1:
                    return (f"an operand of the `tl.dot_scaled` at line {line} is not a tile loaded in the loop "
                            "as the dot reads it (the ring upcasts each operand from its slot)")
                self.staged[operand] = position
            self.scaled = translated_scaled_dot(self.body[scaled[0].index])
            if self.scaled is None:
                return f"the `tl.dot_scaled` at line {line} was not translated"
        # (the copies' statements between the dots, a second B tile's load, go to the ring's producer)
        between = [i for i in consumer if min(indices) < i < max(indices) and i not in indices]
        if between and not self.in_order:
            line = ctx.source.position(original_body[between[0]])[0]
            return (f"the statement at line {line} between its {len(indices)} dots (the wgmmas of an iteration are "
                    "issued one after the other)")
        dtypes: dict[str, str] = {}
        shapes: dict[str, str] = {}
        self.operand_types: dict[str, tuple[str, str]] = {}  # staged operands: (dtype, shape) of the wgmma operand
        for chain in plan.chains:
            site = ctx.plan.dots[chain.call]
            if site.out_dtype is not None and "int" in code(site.out_dtype):
                # Measured (bench/RESULTS.md: Profitability): a ring staged through registers, B stored K-major, ran
                # as fast as the translated loop at 4096^3 and 5x slower on unaligned sizes, so the loop stays as
                # translated.
                return ("8-bit integer operands: wgmma reads B K-major from shared memory, which a cp.async copy of an "
                        "N-contiguous tile does not write")
            if not site.operand_dtype or not site.b_dtype or not site.a_shape or not site.b_shape \
                    or len(site.a_shape) != 2 or len(site.b_shape) != 2 or None in site.a_shape + site.b_shape:
                return "the operand tiles' element types or 2-D block shapes are not known"
            for name, dtype, shape, transposed in zip(chain.operands, (site.operand_dtype, site.b_dtype),
                                                      (site.a_shape, site.b_shape), chain.transposed):
                # (a tile the dot reads transposed, `tl.trans(w)`: its ring holds it as loaded, [N, K], and the
                # wgmma reads a transposed view of the slot)
                if name in self.staged and self.scaled is not None:  # (upcast: its staging buffer's)
                    self.operand_types[name] = scaled_operand_type(self.scaled, chain.operands.index(name), shape)
                    continue
                if name in self.staged:  # the operand's type and shape are its staging buffer's
                    self.operand_types[name] = (dtype, ", ".join(shape))
                    continue
                dtypes.setdefault(name, dtype)
                shapes.setdefault(name, ", ".join(shape[::-1] if transposed else shape))
        rows: tuple[str, int] = ("", 0)
        self.in_order_rows: list[str] = []
        if self.in_order:
            # Every dot a wgmma, 64 rows a warpgroup: a launch of fewer runs the translated loop (the rows test in
            # the ring's condition), a tile known to have fewer is not taken.
            for chain in plan.chains:
                size = ctx.plan.dots[chain.call].shape[0]
                if size is None:
                    return "the rows of a dot's tile are not known (a wgmma takes 64 rows a warpgroup)"
                test = wgmma_rows(str(size) if str(size).isidentifier() else f"({size})",
                                  least_value(ctx.function, size))
                if test is not None and str(size).isdigit():
                    return (f"the dot's tile has {size} rows: the wgmmas of a loop pipelined in order take "
                            f"{WGMMA_ROWS} rows a warpgroup")
                if test is not None:
                    self.in_order_rows.append(test)
        if self.staged:
            # A wgmma takes 64 rows a warpgroup (Triton runs a narrower dot as mma.sync): the dot's rows must be a
            # constexpr the launcher can test (a literal is tested here).
            size = str(ctx.plan.dots[plan.chains[0].call].shape[0])
            constexprs = {p.name for p in ctx.function.params if p.is_constexpr}
            if size.isdigit() and int(size) < STAGED_ROWS or not size.isdigit() and size not in constexprs:
                return (f"the dot's tile has `{size}` rows: the ring's wgmma takes {STAGED_ROWS} rows a warpgroup, "
                        "which the launch must be known to give")
            rows = (size, STAGED_ROWS) if size in constexprs else rows
        for load in plan.loads:
            if load.name in self.staged or self.in_order:  # its ring holds the tile as loaded: its own type and shape
                tile = ctx.plan.loads.get(load.call)
                if tile is None or tile.elem is None or tile.shape is None or None in tile.shape \
                        or len(tile.shape) != 2:
                    return f"the element type or 2-D block shape of the tile `{load.name}` is not known"
                dtypes[load.name], shapes[load.name] = tile.elem, ", ".join(tile.shape)  # type: ignore[arg-type]
        for load in plan.loads:
            if load.other is not None and code(load.other) not in ZEROS:
                return _AddressForm(f"`{load.name}` is loaded with a nonzero `other` (cp.async fills masked elements "
                                    "with zeros)")
        # Tiles whose base the kernel loads (a grouped GEMM's per-problem pointers, with their leading dimensions and
        # sizes, `run_time_alignment`): no launch vouches for them, and the ring has no in-kernel test for them.
        for load in plan.loads:
            if load.pointer is not None and tile_base(ctx.function, load.pointer, self.params) is None:
                found = run_time_alignment(ctx.function, load.pointer, load.mask, self.original)
                if found is not None:
                    self.loaded |= {found[0], *found[1]}
        if self.loaded:
            # (the ring's hints sit on the carried tile pointers, which the fallback loop reads too: only a launch
            # can vouch for their alignment, and it cannot for values the kernel loads)
            return _AddressForm("its tiles are addressed from values the kernel loads")
        # The run-time tests that make the copies' alignment hints true, per copy width.
        tests: dict[int, list[str]] = {vec: [] for vec, _ in TIERS}
        definitions: dict[str, cst.BaseExpression] = {}
        for load in plan.loads:
            carried = isinstance(load.pointer, cst.Name) and load.pointer.value in plan.carried
            if not carried and not self.in_order:
                return _AddressForm(f"the pointer tile of `{load.name}` is not a loop-carried tile of pointers")
            # (in order, a tile addressed afresh each iteration, `base + rows[:, None] * s + (i * BV + arange)[None,
            # :]`: its copies re-evaluate the address for a later iteration; its contiguous offsets must start on a
            # copy's boundary, `_contiguous_tests`)
            definition = self._definition(load.pointer.value) if carried else self._fresh_definition(load)
            if definition is None:
                return _AddressForm(f"`{load.pointer.value}` is not assigned exactly once before the loop" if carried
                                    else f"the pointer tile of `{load.name}` is not a loop-carried tile of pointers "
                                    "nor an address made in the loop from the kernel's arguments")
            mask_params = sorted(self._mask_params(load))
            for vec, width in TIERS:
                test = self._alignment_tests(definition, vec, width)
                if isinstance(test, str):
                    return _AddressForm(test)
                contiguous = [] if carried else self._contiguous_tests(definition, vec)
                if isinstance(contiguous, str):
                    return _AddressForm(contiguous)
                tests[vec] += test + contiguous + [f"({name} % {vec} == 0)" for name in mask_params]
            if carried:
                definitions[load.pointer.value] = definition
            else:
                self.fresh.append(load.name)
        tests = {vec: list(dict.fromkeys(t)) for vec, t in tests.items()}
        for load in plan.loads:
            ctx.copy_tiles.setdefault(shapes[load.name], dtypes[load.name])
        ctx.need("cp_async")
        ctx.need("cta_barrier")
        return _Emitted(*self._text(tests, definitions, dtypes, shapes), rows=rows)

    def _definition(self, name: str) -> cst.BaseExpression | None:
        """The value of the one assignment `name = ...` among the function's statements outside the loop (and
        outside the branches of an `if` around it that the loop is not in: a loop unswitched on a constexpr flag,
        `transpile.passes.unswitch`, has a copy in the other branch that never runs with this one)."""
        found: list[cst.BaseExpression] = []
        parents, around, node = self.ctx.source.parents, set(), self.original
        while node in parents:  # the nodes around the loop (the source's parent map, made once per file)
            node = parents[node]
            around.add(id(node))

        class Visitor(cst.CSTVisitor):
            def __init__(self, loop: cst.For) -> None:
                self.loop = loop

            def visit_For(self, node: cst.For) -> bool:
                return node is not self.loop

            def visit_If(self, node: cst.If) -> bool:
                if id(node) not in around:
                    return True
                node.test.visit(self)
                taken = node.body if id(node.body) in around else node.orelse
                if taken is not None:
                    taken.visit(self)
                return False

            def visit_Assign(self, node: cst.Assign) -> None:
                if any(isinstance(t.target, cst.Name) and t.target.value == name for t in node.targets):
                    found.append(node.value)

            def visit_AugAssign(self, node: cst.AugAssign) -> None:
                if isinstance(node.target, cst.Name) and node.target.value == name:
                    found.append(node.value)

        self.ctx.function.node.body.visit(Visitor(self.original))
        return found[0] if len(found) == 1 else None

    def _loop_value(self, name: str) -> cst.BaseExpression | None:
        """The value of the one assignment `name = ...` among the loop body's top-level statements, else None."""
        found = [small.value for statement in self.original.body.body  # type: ignore[union-attr]
                 if isinstance(statement, cst.SimpleStatementLine) for small in statement.body
                 if isinstance(small, cst.Assign) and len(small.targets) == 1
                 and isinstance(small.targets[0].target, cst.Name) and small.targets[0].target.value == name]
        others = [statement for statement in self.original.body.body  # type: ignore[union-attr]
                  if name in assigned_names(statement)]
        return found[0] if len(found) == 1 and len(others) == 1 else None

    def _fresh_definition(self, load: OperandLoad) -> cst.BaseExpression | None:
        """The address of a tile the loop addresses afresh each iteration: the load's pointer expression, or the one
        value the loop assigns the name it loads through; None where it is neither (a name bound before the loop and
        not advanced, or rebound in the loop more than once)."""
        pointer = load.pointer
        if isinstance(pointer, cst.Name):
            return self._loop_value(pointer.value)
        return pointer

    def _contiguous_tests(self, definition: cst.BaseExpression, vec: int) -> list[str] | str:
        """Compile-time tests under which the offsets along the last axis of the address `definition` run from a
        multiple of `vec`, contiguous (`start + arange(0, n)`, `start` a multiple of a block size the tests check or
        the loop's own variable stepping by one), else the reason they are not known to."""
        tests: list[str] = []
        constexprs = {p.name for p in self.ctx.function.params if p.is_constexpr}
        loop = LoopRange.of(self.original)

        def resolve(node: cst.BaseExpression, depth: int = 0) -> cst.BaseExpression | None:
            while isinstance(node, cst.BaseExpression) and node.lpar and hasattr(node, "with_changes"):
                node = node.with_changes(lpar=[], rpar=[])
            if isinstance(node, cst.Name) and depth < 4 and node.value != self.plan.var:
                value = self._loop_value(node.value)
                if value is None and not any(node.value in assigned_names(s)
                                             for s in self.original.body.body):  # type: ignore[union-attr]
                    value = self._definition(node.value)
                return resolve(value, depth + 1) if value is not None else None
            return node

        def aligned(node: cst.BaseExpression, depth: int = 0) -> bool:
            """`node` is a multiple of `vec` (under the tests)."""
            node = resolve(node, depth) or node
            if isinstance(node, cst.Integer):
                return int(node.value, 0) % vec == 0
            if isinstance(node, cst.Name) and node.value == self.plan.var:  # (lo, lo + step, ...)
                return aligned(cst.parse_expression(loop.lo), depth + 1) \
                    and aligned(cst.parse_expression(loop.step), depth + 1)
            if isinstance(node, cst.Name) and node.value in constexprs:
                tests.append(f"({node.value} % {vec} == 0)")
                return True
            if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
                return aligned(node.left, depth + 1) or aligned(node.right, depth + 1)
            if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Subtract)):
                return aligned(node.left, depth + 1) and aligned(node.right, depth + 1)
            return False

        def arange_based(node: cst.BaseExpression) -> bool:
            node = resolve(node) or node
            if isinstance(node, cst.Call) and code(node.func).endswith("arange") and node.args \
                    and code(node.args[0].value) == "0":
                return True
            if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
                return arange_based(node.left) and aligned(node.right) or \
                    arange_based(node.right) and aligned(node.left)
            return False

        for term in sum_terms(definition)[1:]:
            for factor in product_factors(term):
                if _broadcast_dim(factor) == "last" and isinstance(factor, cst.Subscript) \
                        and not arange_based(factor.value):
                    return (f"the offsets `{code(factor)}` along the contiguous axis of `{code(definition)}` are not "
                            "known to start on a copy's boundary")
        return list(dict.fromkeys(tests))

    def _alignment_tests(self, definition: cst.BaseExpression, vec: int, width: int) -> list[str] | str:
        """Run-time conditions under which every row of `base + rows[:, None] * s0 + cols[None, :] * s1` starts on a
        `width`-byte boundary and runs contiguously: base `width`-byte aligned, s1 == 1, every other stride a multiple
        of `vec` elements."""
        terms = sum_terms(definition)
        base = terms[0]
        if not (isinstance(base, cst.Name) and base.value in self.params):
            return f"the pointer tile `{code(definition)}` does not start from a pointer argument"
        tests = [f"({base.value}.to(gl.int64) % {width} == 0)"]
        for term in terms[1:]:
            factors = product_factors(term)
            along_last = [f for f in factors if _broadcast_dim(f) == "last"]
            scalars = [f for f in factors if isinstance(f, cst.Name) and f.value in self.params]
            other_names = {n for f in factors if _broadcast_dim(f) is None for n in names_in(f)} & self.params
            if along_last:
                if other_names - {s.value for s in scalars}:
                    return f"the contiguous offsets of `{code(definition)}` are not `cols[None, :] * stride`"
                tests += [f"({s.value} == 1)" for s in scalars]
            else:
                tests += [f"({s.value} % {vec} == 0)" for s in scalars]
                unknown = other_names - {s.value for s in scalars}
                if unknown:
                    return f"the row offsets of `{code(definition)}` are not `rows[:, None] * stride`"
        return tests

    def _mask_params(self, load: OperandLoad) -> set[str]:
        """Kernel arguments a mask reads, directly or through the loop's producer statements."""
        if load.mask is None:
            return set()
        names = names_in(load.mask)
        original_body = list(self.original.body.body)  # type: ignore[union-attr]
        for i in reversed(self.plan.producer_before()):
            if assigned_names(original_body[i]) & names:
                names |= names_in(original_body[i])
        return names & self.params

    def _text(self, tests: dict[int, list[str]], definitions: dict[str, cst.BaseExpression], dtypes: dict[str, str],
              shapes: dict[str, str]) -> tuple[str, Sm90Ring]:
        plan, body = self.plan, self.body
        # One commit group per iteration; at the top of an iteration all but the NUM_STAGES - 2 youngest have landed.
        schedule = Sm90Ring("cp.async", self.ctx.function.name, self.ctx.source.position(plan.loop)[0],
                            # (an operand computed in registers: 3 slots at least, so that two iterations' copies
                            # are in flight while one is read and computed: measured, see STAGED_DEPTH)
                            ring_depth(self.ctx, plan.loop, plan.num_stages, STAGED_DEPTH if self.staged else 2),
                            tuple(RingOperand(load.name, "cp.async") for load in plan.loads),
                            wait_groups=WaitGroups(1, 2), configs=kernel_configs(self.ctx.function),
                            **({"steady": GEMM_STEADY_SCALED} if self.scaled is not None else
                               {"steady": GEMM_STEADY_STAGED} if self.staged else
                               {"steady": IN_ORDER_STEADY, "mma_in_flight": 0} if self.in_order else {}))
        name = loop_namer(self.ctx, plan.loop)
        prologue_i = name("i")  # the prologue's loop variable: a name the kernel does not use (a static_range
        # loop leaves its variable bound to the last value, which would change a kernel variable `i`)
        stages, it, slot, nxt, nxt_slot, iters = (name("NUM_STAGES"), name("it"), name("slot"), name("next_it"),
                                                  name("next_slot"), name("num_iters"))
        smem = {load.name: name(f"{load.name}_smem") for load in plan.loads}
        span = LoopRange.of(self.updated)
        count, index = span.count, span.value

        renames = next_names(plan.var, plan.producer, body, name)
        dots = {chain.index for chain in plan.chains}
        consumer = [i for i in consumer_indices(plan.producer, {load.index for load in plan.loads}, body)
                    if i not in dots]
        before = [i for i in consumer if i < min(dots)]
        after = [i for i in consumer if i > max(dots)]
        uses_var = any(plan.var in names_in(body[i]) for i in consumer)

        def acc_in(chain: DotChain) -> str:
            dot_call = body[chain.index].body[0].value  # type: ignore[union-attr]
            at = 6 if self.scaled is not None else 2  # (`_dot_scaled(a, a_scale, a_format, b, ..., acc)`)
            return code(dot_call.args[at].value) if isinstance(dot_call, cst.Call) and len(dot_call.args) > at \
                else chain.acc

        def copy(load: OperandLoad, iteration: str, slot_expr: str, vec: int, width: int) -> str:
            call = body[load.index].body[0].value  # type: ignore[union-attr]
            pointer = rename(call.args[0].value, renames)
            mask_arg = next((a for a in call.args if a.keyword is not None and a.keyword.value == "mask"), None)
            if mask_arg is None and len([a for a in call.args if a.keyword is None]) > 1:
                mask_arg = call.args[1]
            in_range = f"({iteration} < {iters})"
            # The mask is broadcast to the tile's shape before the hint: a [BK, 1] mask broadcast by the copy
            # itself does not lower (Triton 3.6 and 3.9).
            mask = (f"gl.max_constancy(gl.broadcast({rename(mask_arg.value, renames)}, {pointer})[0] & {in_range}, "
                    f"[1, {vec}])" if mask_arg is not None else in_range)
            head = "_cp_async_load("
            return (f"{head}{smem[load.name]}.index({slot_expr}), gl.max_contiguous(gl.multiple_of({pointer}, "
                    f"[1, {width}]), [1, {vec}]),\n{' ' * len(head)}mask={mask})")

        first = plan.chains[0]
        # A tile the loop also reads outside the dot (after it): read from this iteration's slot, in the layout the
        # translated code gives the loaded tile, once the wgmmas are issued (the slot stays valid until the wgmma
        # that reads it has retired and the copy NUM_STAGES - 1 iterations later refills it).
        reads = {load.name: f"{load.name} = {smem[load.name]}.index({slot}).load("
                            f"{self.ctx.plan.layout_expr(self.ctx.plan.loads[load.call].term)})"
                 for load in plan.loads if load.computed or load.name in self.staged}
        # A tile a dot operand is computed from (`Staged`): read from the slot once its copies have landed, before
        # the statements that compute the operand (GEMM_STEADY_STAGED runs them after the wait).
        staged_reads = [text for name, text in reads.items() if name in self.staged]
        held: dict[str, tuple[str, bool]] = {}
        if self.in_order:
            # Every statement of the iteration in order (the dots among them), after the slot's copies have landed:
            # a dot reading a ring tile, or a tile the loop does not change, is an asynchronous wgmma from shared
            # memory, issued as early as its operands allow and waited for where its result is read
            # (`wgmmas_in_order`); a ring tile read otherwise too is read from its slot in the translated layout.
            assigned = set().union(*(assigned_names(statement) for statement in body)) | {plan.var}
            slot_dots = _SlotDots(smem, slot, invariant_tiles(self.ctx, self.original) - assigned - set(smem), name)
            statements = [slot_dots.rewrite(body[i])
                          for i in consumer_indices(plan.producer, {load.index for load in plan.loads}, body)]
            held = slot_dots.held
            used = set().union(*(names_in(statement) for statement in statements)) if statements else set()
            read = [f"{load.name} = {smem[load.name]}.index({slot}).load("
                    f"{self.ctx.plan.layout_expr(self.ctx.plan.loads[load.call].term)})"
                    for load in plan.loads if load.name in used]
            lines = wgmmas_in_order(statements, name, [f"{smem[load.name]}.index({slot})" for load in plan.loads])
            uses_var = plan.var in used
            loop = LoopText(plan.var, index, first.acc, first.acc, [*read, *lines], [], renames[plan.var],
                            [rename(body[i], renames) for i in plan.producer_before()],
                            [rename(body[i], renames) for i in plan.producer_after()], uses_var)
            if any("_wgmma_a_regs(" in line for line in lines):
                self.ctx.need("wgmma_a_regs")
            if held:
                self.ctx.need("mma_k_width")
        else:
            # (a scaled dot's ring: the statements before the dot that read no ring tile, the scales' loads, run
            # before the copies' wait, `GEMM_STEADY_SCALED`)
            early: list[int] = []
            late: set[str] = set(smem)  # (the ring tiles, and what the statements left after the wait bind)
            for i in before if self.scaled is not None else ():
                if names_in(body[i]) & late:
                    late |= assigned_names(body[i])
                else:
                    early.append(i)
            # (a ring tile the wgmma reads from its slot, never loaded into registers: its element type read where
            # the loop's statements ask for it, `b.to(a.dtype)`, is its slot's)
            slot_types = {n: f"{smem[n]}" for n in smem if n not in reads}
            loop = LoopText(plan.var, index, first.acc, acc_in(first),
                            [*staged_reads, *(_slot_dtypes(code(body[i]), slot_types) for i in before
                                              if i not in early)],
                            [*(text for name, text in reads.items() if name not in self.staged),
                             *(_slot_dtypes(code(body[i]), slot_types) for i in after)], renames[plan.var],
                            [rename(body[i], renames) for i in plan.producer_before()],
                            [rename(body[i], renames) for i in plan.producer_after()], uses_var,
                            consumer_early=[_slot_dtypes(code(body[i]), slot_types) for i in early])
        transposed = {load.name: load.transposed for load in plan.loads}
        stage_index = name("stage")
        buffers = {n: name(f"{n}_staged") for n in self.staged}
        # A scaled dot's A operand, upcast, goes to the wgmma from registers (in the accumulator's operand layout):
        # no staging buffer, no shared-memory round trip (`Staged.in_registers`)
        in_registers = {n: name(f"{n}_upcast") for n, position in self.staged.items()
                        if self.scaled is not None and position == 0}
        if in_registers:
            self.ctx.need("register_a_layout")

        def views(operands: tuple[str, ...], slot_expr: str) -> tuple[str, str]:
            """The dot's two operands as the wgmma reads them from the slot (a transposed view where the dot reads
            the tile transposed), or from their staging buffer (an operand computed in registers)."""
            a, b = (in_registers[n] if n in in_registers else
                    f"{buffers[n]}.index({stage_index})" if n in buffers else
                    f"{smem[n]}.index({slot_expr})" + (".permute((1, 0))" if transposed[n] else "") for n in operands)
            return a, b

        def computed(load_name: str) -> str:
            """The operand computed from `load_name`'s tile, as the translated dot reads it."""
            if self.scaled is not None:
                return upcast_text(self.scaled, self.staged[load_name])
            dot_call = body[first.index].body[0].value  # type: ignore[union-attr]
            return _slot_dtypes(code(dot_call.args[self.staged[load_name]].value),  # type: ignore[union-attr]
                                {n: f"{smem[n]}" for n in smem if n not in reads})

        # A launch may give fewer rows than a wgmma takes: the ring multiplies them with mma.sync, from the same
        # slots (an operand computed in registers takes the translated loop instead: the launcher's row test keeps
        # such launches on the source kernel)
        rows = " and ".join(dict.fromkeys(
            r for r in (wgmma_rows(f"{chain.acc}.shape[0]", least_rows(self.ctx, chain.call)) for chain in plan.chains)
            if r))
        rows = "" if self.in_order else rows  # (in order: `in_order_rows`, in the ring's test)
        flag = name("WGMMA") if rows and not self.staged else ""
        if flag:
            self.ctx.need("mma_sync_slots")
        mma = Wgmma(schedule.mma_in_flight, functools.partial(views, first.operands),
                    tuple(smem[load.name] for load in plan.loads),
                    tuple(Product(chain.acc, acc_in(chain), functools.partial(views, chain.operands))
                          for chain in plan.chains) if len(plan.chains) > 1 else (),
                    staged=tuple(Staged(f"gl.convert_layout({computed(n)}, _register_a_layout({first.acc}.type.layout, "
                                        f"{self.operand_types[n][0]}))", in_registers[n], in_registers=True)
                                 if n in in_registers else Staged(computed(n), buffers[n]) for n in self.staged),
                    stage_index=stage_index,
                    wgmma_flag=flag)

        def ring(vec: int, width: int) -> str:
            # The raw tiles of a scaled dot (bytes) take the layout their translated pointers have, which the scale
            # tiles may have set (a few bytes a thread: shorter than a copy): their pointer tiles are converted to
            # copy layouts of `vec` elements a thread once, before the loop (unmasked tiles only: the masks stay in
            # the translated layouts).
            converted = {load.pointer.value: f"gl.convert_layout({{}}, _copy_layout([{shapes[load.name]}], "
                                             f"{dtypes[load.name]}, gl.num_warps(), {vec} * "
                                             f"{dtypes[load.name]}.primitive_bitwidth))"
                         for load in plan.loads if self.scaled is not None and load.name in self.staged
                         and isinstance(load.pointer, cst.Name) and load.mask is None}
            if converted:
                self.ctx.need("copy_layout")
            engine = CpAsyncCopy(
                lambda iteration, slot_expr: [copy(load, iteration, slot_expr, vec, width) for load in plan.loads],
                schedule.wait_groups.text(stages),  # type: ignore[union-attr]
                prologue_note="# Prologue: start the copies of the first NUM_STAGES - 1 iterations, one commit group "
                "each. The hints\n"
                f"# ({width}-byte aligned, {vec} contiguous elements, masks constant over {vec}) are what the test "
                "above guarantees.")
            lines = [
                *(f"{smem[load.name]} = gl.allocate_shared_memory({dtypes[load.name]}, [{stages}, "
                  f"{shapes[load.name]}], gl.NVMMASharedLayout.get_default_for([{shapes[load.name]}], "
                  f"{dtypes[load.name]}))" for load in plan.loads),
                *(f"{buffers[n]} = gl.allocate_shared_memory({dtype}, [2, {shape}], "
                  f"gl.NVMMASharedLayout.get_default_for([{shape}], {dtype}))"
                  for n, (dtype, shape) in self.operand_types.items() if n not in in_registers),
                *([*(f"{buffer} = gl.allocate_shared_memory({tile}.dtype, {tile}.shape, _mma_k_width({tile}.shape, "
                     f"{tile}.dtype, {as_b}), {tile})" for tile, (buffer, as_b) in held.items()),
                   "fence_async_shared()", "_cta_barrier()"] if held else []),
                f"{iters} = {count}",
                *(["# Fresh pointer tiles: the alignment hints on the copies mark the ops that define these values."]
                  if plan.carried else []),
                *gemm_ring(schedule.steady, loop, RingNames(stages, it, slot, nxt, nxt_slot, iters, prologue_i),
                           engine, mma, [(renames[carried], converted.get(carried, "{}").format(carried))
                                         for carried in plan.carried]),
                *(["# The pointers the code after the loop reads, where the loop leaves them (the copies advanced "
                   "their own).", *advance_after(plan, iters)] if plan.advanced else []),
            ]
            return indent("\n".join(lines), "    ")

        # `a_ptrs_next = a_ptrs` becomes a copy of the translated definition of `a_ptrs` (leave_FunctionDef).
        self.ctx.fresh_tiles.update({renames[c]: c for c in plan.carried if c in definitions})
        # (16-bit operands; a tile an operand is computed from may hold any type, its operand must be 16-bit)
        widths = [f"{self.operand_types[load.name][0] if load.name in self.staged else dtypes[load.name]}"
                  ".primitive_bitwidth == 16" for load in plan.loads]
        # (and, for a staged operand, accumulators of the rows a wgmma takes; in order, every dot's: the tiles the
        # loop does not change are 16-bit too)
        widths += [f"{tile}.dtype.primitive_bitwidth == 16" for tile in held]
        if self.scaled is not None:
            # (the rings of the raw tiles, the staged B operands and the register A operand's conversion scratch
            # must fit in shared memory: a larger tile runs the loop as translated)
            tiles = [*(f"{stages}, [{shapes[load.name]}], {dtypes[load.name]}" for load in plan.loads),
                     *(f"{1 if n in in_registers else 2}, [{shape}], {dtype}"
                       for n, (dtype, shape) in self.operand_types.items())]
            widths.append(f"_tiles_fit({', '.join(tiles)})")
            self.ctx.need("tiles_fit")
        condition = " and ".join(dict.fromkeys([*widths, *([rows] if rows and not flag else []),
                                                *(self.in_order_rows if self.in_order else [])]))
        (vec16, width16), (vec8, width8) = TIERS
        header = [
            "# Main loop, pipelined by triton-transpile: the tiles it loads stream through a ring of NUM_STAGES",
            "# shared-memory slots filled by cp.async (16 bytes per thread copy) NUM_STAGES - 1 iterations ahead; the",
            "# tiles it does not change are stored into shared memory once, before it. Its statements run in order,",
            "# each dot an asynchronous wgmma from shared memory (A from registers where the loop computes it), issued",
            "# as early as its operands allow and waited for where its result is read; all have finished before the",
            "# next iteration refills a slot. The test below (16-bit tiles, dots of 64 rows or more; rows on 16-byte",
            "# boundaries, contiguous, and sizes the masks compare against multiples of 8) makes the copies' alignment",
            "# hints true (the launcher lets through launches with aligned rows only).",
        ] if self.in_order else [
            "# Main loop, pipelined by triton-transpile: the tiles of A and B stream through a ring of NUM_STAGES",
            "# shared-memory slots filled by cp.async (16 bytes per thread copy) NUM_STAGES - 1 iterations ahead; each",
            "# wgmma reads its slot directly and runs asynchronously, one stays in flight, and a slot is refilled only",
            "# once the wgmma that read it has completed. The test below (16-bit operands; rows on 16-byte boundaries,",
            "# contiguous, and sizes the masks compare against multiples of 8) makes the copies' alignment hints true;",
            "# the second ring takes 8-byte copies where rows and sizes are multiples of 4 elements only.",
        ]
        header = [
            *header,
            *schedule.depth.lines(stages),
            *([f"{flag}: gl.constexpr = {rows}  # (fewer rows: mma.sync)"] if flag else []),
            "\n".join(["if (", f"    {condition}", *(f"    and {t}" for t in tests[vec16]), "):"]),
            ring(vec16, width16),
            # (a second ring of 8-byte copies for rows and sizes that are multiples of 4 elements only: not for a loop
            # pipelined in order, whose launcher lets through aligned launches only; one ring a loop keeps the
            # schedule checker's branches of a kernel of several such loops, attention's backward, few; nor for a
            # scaled dot: the compiler gives each ring branch its own shared memory, which two of its rings overrun)
            *(["\n".join([f"elif (  # rows on {width8}-byte boundaries, sizes multiples of {vec8}: the same ring, "
                          f"{width8}-byte copies", f"    {condition}", *(f"    and {t}" for t in tests[vec8]), "):"]),
               ring(vec8, width8)] if not self.in_order and self.scaled is None else []),
            "else:",
            "    # 8- and 32-bit operands (wgmma wants B K-major in shared memory) or unaligned rows and sizes: the loop",
            "    # runs as translated, unpipelined."
            + (" So does a tile of fewer rows than a warpgroup's wgmma takes (mma.sync)."
               if rows and not flag or self.in_order_rows else ""),
            indent(code(self.updated.with_changes(leading_lines=[])), "    "),
        ]
        return "\n".join(header) + "\n", schedule


class _SlotDots(cst.CSTTransformer):
    """A statement of a loop pipelined in order, its dots turned into asynchronous wgmmas from shared memory: a
    translated `_dot(a, b, acc)` whose B is a ring tile (or its transpose, `gl.permute(t, [1, 0])`) or a tile the loop
    does not change (`invariant`: stored into shared memory once, before the loop) becomes `warpgroup_mma` of the
    slot (or view) where A is such a tile too, else `_wgmma_a_regs` (A in registers). A dot whose B is computed in
    the iteration keeps the translated `_dot` (its ring tiles are read from their slots into registers: the rule
    reads every tile a statement still names). `held` collects the invariant tiles read from shared memory."""

    def __init__(self, rings: dict[str, str], slot: str, invariant: set[str], name: Callable[[str], str]) -> None:
        super().__init__()
        self.rings, self.slot, self.invariant, self.name = rings, slot, invariant, name
        self.held: dict[str, tuple[str, bool]] = {}  # invariant tile -> (its shared-memory copy, read as B)

    def rewrite(self, statement: cst.BaseStatement) -> cst.BaseStatement:
        """`statement` with its dot as a wgmma from shared memory, where it is `name = <expression with one dot>`
        (a dot in a compound statement, or one of two in a statement, stays the translated, synchronous `_dot`: the
        waits are placed per statement, `wgmmas_in_order`)."""
        if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
                and isinstance(statement.body[0], cst.Assign) and len(statement.body[0].targets) == 1
                and isinstance(statement.body[0].targets[0].target, cst.Name)):
            return statement
        dots = [n for n in calls_in(statement) if isinstance(n.func, cst.Name) and n.func.value == "_dot"]
        return statement.visit(self) if len(dots) == 1 else statement  # type: ignore[return-value]

    def _buffer(self, tile: str, as_b: bool) -> str | None:
        if tile in self.rings:
            return f"{self.rings[tile]}.index({self.slot})"
        if tile in self.invariant:
            buffer, b = self.held.get(tile, (None, False))
            buffer = buffer or self.name(f"{tile}_smem")
            self.held[tile] = (buffer, b or as_b)
            return buffer
        return None

    def _view(self, node: cst.BaseExpression, as_b: bool) -> cst.BaseExpression | None:
        if isinstance(node, cst.Name):
            buffer = self._buffer(node.value, as_b)
            return cst.parse_expression(buffer) if buffer else None
        if isinstance(node, cst.Call) and code(node.func) == "gl.permute" and len(node.args) == 2 \
                and isinstance(node.args[0].value, cst.Name) \
                and code(node.args[1].value).replace(" ", "") in ("[1,0]", "(1,0)"):
            buffer = self._buffer(node.args[0].value.value, not as_b)
            return cst.parse_expression(f"{buffer}.permute((1, 0))") if buffer else None
        return None

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if not (isinstance(updated.func, cst.Name) and updated.func.value == "_dot") or len(updated.args) != 3 \
                or any(arg.keyword is not None for arg in updated.args):
            return updated
        b = self._view(updated.args[1].value, True)
        if b is None:
            return updated
        a = self._view(updated.args[0].value, False)
        acc = code(updated.args[2].value)
        if a is not None:
            return cst.parse_expression(f"warpgroup_mma({code(a)}, {code(b)}, {acc}, is_async=True)")
        return cst.parse_expression(f"_wgmma_a_regs({code(updated.args[0].value)}, {code(b)}, {acc})")


def _trip_count_test(ctx: RuleContext, loop: cst.For, least: int) -> tuple[str, tuple[tuple[str, str | None], ...]] | None:
    """The launch test (`RuleContext.launch_source_when`) that `loop`, `for x in range(...)`, runs fewer than `least`
    iterations, where its bounds are the kernel's parameters, integers and their sums, differences, products and
    `cdiv`s; None otherwise."""
    params = {p.name: p.default if p.is_constexpr else None for p in ctx.function.params}
    call = loop.iter
    if not (isinstance(call, cst.Call) and code(call.func) in ("range", "tl.range", "gl.range", "triton.language.range")
            and 1 <= len(call.args) <= 3 and all(arg.keyword is None for arg in call.args)):
        return None

    def host(node: cst.BaseExpression) -> str | None:
        if isinstance(node, cst.Name):
            return node.value if node.value in params else None
        if isinstance(node, cst.Integer):
            return node.value
        if isinstance(node, cst.BinaryOperation) and isinstance(
                node.operator, (cst.Add, cst.Subtract, cst.Multiply, cst.FloorDivide)):
            left, right = host(node.left), host(node.right)
            return f"({left} {code(node.operator).strip()} {right})" if left and right else None
        if isinstance(node, cst.Call) and code(node.func).endswith("cdiv") and len(node.args) == 2:
            a, b = host(node.args[0].value), host(node.args[1].value)
            return f"(-(-{a} // {b}))" if a and b else None
        return None

    parts = [host(arg.value) for arg in call.args]
    if any(part is None for part in parts):
        return None
    start, stop, step = ("0", parts[0], "1") if len(parts) == 1 else (*parts, "1") if len(parts) == 2 else parts
    span = stop if start == "0" else f"({stop} - {start})"
    test = f"-(-{span} // {step}) < {least}" if step != "1" else f"{span} < {least}"
    names = sorted(names_in(cst.parse_expression(test)) & set(params))
    return (test, tuple((n, params[n]) for n in names)) if names else None


def invariant_tiles(ctx: RuleContext, loop: cst.For) -> set[str]:
    """Names the kernel binds outside `loop` (the candidates for a dot operand the loop does not change: the caller
    takes away what the loop binds)."""
    found: set[str] = set()

    class Visitor(cst.CSTVisitor):
        def visit_For(self, node: cst.For) -> bool:
            return node is not loop

        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
            found.update(assigned_names(node))

    ctx.function.node.body.visit(Visitor())
    return found


def _calls(statement: cst.CSTNode) -> list[cst.Call]:
    found: list[cst.Call] = []

    class Visitor(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            found.append(node)

    statement.visit(Visitor())
    return found


def _broadcast_dim(node: cst.BaseExpression) -> str | None:
    """"last" for `x[None, :]`, "first" for `x[:, None]`, else None."""
    return {0: "first", 1: "last"}.get(broadcast_axis(node))  # type: ignore[arg-type]


class _SlotDtype(cst.CSTTransformer):
    def __init__(self, slots: dict[str, str]) -> None:
        super().__init__()
        self.slots = slots

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        if isinstance(updated_node.value, cst.Name) and updated_node.value.value in self.slots \
                and updated_node.attr.value == "dtype":
            return updated_node.with_changes(value=cst.Name(self.slots[updated_node.value.value]))
        return updated_node


def _slot_dtypes(text: str, slots: dict[str, str]) -> str:
    """`text` (statements of the loop) with `x.dtype` of each ring tile `x` in `slots` read from its shared-memory
    ring instead (`x_smem.dtype`): the wgmma reads such a tile from its slot, so no register value `x` exists."""
    if not slots or not any(f"{n}.dtype" in text for n in slots):
        return text
    return cst.parse_module(text).visit(_SlotDtype(slots)).code

