"""Issue 10 prototype (session 9): the sm90 flash-attention forward schedule the emitter should produce, hand-written
over the fixture's kernel (fixtures/attention_fwd.py: same arguments, same grid, same results), measured in one run
against that kernel and torch SDPA's cuDNN backend.

- One loader warp (`_loader`) issues TMA copies of K and V blocks into two rings of S slots (`k_ready`/`v_ready`,
  `k_empty`/`v_empty` mbarriers, the empty ones counting one arrive per consumer), Q once per consumer; descriptors
  are made in the kernel from the (batch, head) base pointer (TMA wants 16-byte aligned rows and a unit inner stride).
- NCONS consumer partitions of 4 warps (`_consumer`) each own BLOCK_M / NCONS rows of the Q tile and run the loop:
  QK^T of block j and PV of block j - 1 issued together, QK^T waited for with PV in flight across the softmax (FA3's
  intra-warpgroup overlap).
- PP: ping-pong: the consumers take turns issuing their wgmmas (`turn` mbarriers), so that one's softmax runs while
  the other's wgmmas do (FA3's inter-warpgroup schedule).
- SPLIT: the score mask is built only on the blocks where some score may fail it (the last key block; causal: the
  diagonal blocks), the others take `qk * qk_scale` (`transpile/analysis/uniform_mask.py` derives that test).
- REV: the programs of a head visit the Q blocks last first (causal: the longest rows first).

Session 9 on an H100 (Triton 3.6, batch 4, 16 heads, seq 4096, fp16; bench/RESULTS.md): d128 with 2 consumers, 128-key
blocks, 2 slots, PP+SPLIT+REV: 1.26-1.28x the source kernel full (519-537 TFLOP/s, 0.89-0.91x cuDNN), 1.33-1.35x causal
(456-460, 0.90-0.92x cuDNN); d64 with 3 consumers (BLOCK_M 192), PP+SPLIT: 1.16-1.17x full, 1.21-1.22x causal
(0.82-0.95x cuDNN). Without SPLIT 1.16-1.22x (d128); without PP 1.14-1.18x; one 8-warp consumer instead of two
1.05-1.07x.

    python bench/prototypes/ws/attention_pingpong.py     # on the GPU: ragged checks, then TFLOP/s of each form
"""

import importlib.util
import statistics
import sys
from pathlib import Path

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

_tma_async_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_async_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global


@gluon.jit
def _sync():
    if gl.num_warps() > 4:
        (getattr(gl, "barrier", None) or gl.thread_barrier)()


@gluon.jit
def _loader(
    q_desc,
    k_desc,
    v_desc,
    q_smem,
    k_ring,
    v_ring,
    q_bar,
    k_ready,
    k_empty,
    v_ready,
    v_empty,
    start_m,
    hi,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    NCONS: gl.constexpr,
):
    S: gl.constexpr = k_ring.shape[0]
    ROWS: gl.constexpr = BLOCK_M // NCONS
    for c in gl.static_range(NCONS):
        mbarrier.expect(q_bar.index(c), q_desc.block_type.nbytes)
        _tma_async_load(
            q_desc, [start_m * BLOCK_M + c * ROWS, 0], q_bar.index(c), q_smem.index(c)
        )
    n_iters = gl.cdiv(hi, BLOCK_N)
    for j in range(n_iters):
        slot = j % S
        phase = ((j // S) & 1) ^ 1
        mbarrier.wait(k_empty.index(slot), phase)
        mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
        _tma_async_load(
            k_desc, [j * BLOCK_N, 0], k_ready.index(slot), k_ring.index(slot)
        )
        mbarrier.wait(v_empty.index(slot), phase)
        mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
        _tma_async_load(
            v_desc, [j * BLOCK_N, 0], v_ready.index(slot), v_ring.index(slot)
        )


@gluon.jit
def _softmax_step(
    qk, m_i, l_i, offs_m, offs_kv, N_CTX, qk_scale, CAUSAL: gl.constexpr, need_mask=True
):
    if need_mask:
        valid = offs_kv[None, :] < N_CTX
        if CAUSAL:
            valid = valid & (offs_m[:, None] >= offs_kv[None, :])
        qk = gl.where(valid, qk * qk_scale, -float("inf"))
    else:
        qk = qk * qk_scale
    m_ij = gl.maximum(m_i, gl.max(qk, axis=1))
    p = gl.exp2(qk - m_ij[:, None])
    alpha = gl.exp2(m_i - m_ij)
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, l_i, m_ij


@gluon.jit
def _turn_wait(turn, t, C: gl.constexpr, PP: gl.constexpr):
    if PP:
        if C == 0:
            mbarrier.wait(turn.index(C), (t & 1) ^ 1)
        else:
            mbarrier.wait(turn.index(C), t & 1)


@gluon.jit
def _turn_pass(turn, C: gl.constexpr, NCONS: gl.constexpr, PP: gl.constexpr):
    if PP:
        mbarrier.arrive(turn.index((C + 1) % NCONS))


@gluon.jit
def _consumer(
    turn,
    PP: gl.constexpr,
    REV: gl.constexpr,
    SPLIT: gl.constexpr,
    q_smem,
    k_ring,
    v_ring,
    q_bar,
    k_ready,
    k_empty,
    v_ready,
    v_empty,
    o_desc,
    sm_scale,
    N_CTX,
    start_m,
    hi,
    C: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    NCONS: gl.constexpr,
    CAUSAL: gl.constexpr,
):
    S: gl.constexpr = k_ring.shape[0]
    ROWS: gl.constexpr = BLOCK_M // NCONS
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[gl.num_warps(), 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0],
        warps_per_cta=[gl.num_warps(), 1],
        instr_shape=[16, HEAD_DIM, 16],
    )
    p_layout: gl.constexpr = gl.DotOperandLayout(
        operand_index=0, parent=o_layout, k_width=2
    )
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    dtype: gl.constexpr = q_smem.dtype

    offs_m = start_m * BLOCK_M + C * ROWS + gl.arange(0, ROWS, layout=row_layout)
    offs_n = gl.arange(0, BLOCK_N, layout=col_layout)
    m_i = gl.full([ROWS], -float("inf"), gl.float32, layout=row_layout)
    l_i = gl.zeros([ROWS], gl.float32, layout=row_layout)
    acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, layout=o_layout)
    qk_scale = sm_scale * 1.44269504
    q = q_smem.index(C)
    mbarrier.wait(q_bar.index(C), 0)
    n_iters = gl.cdiv(hi, BLOCK_N)
    # blocks every row of which is valid: no mask
    n_full = N_CTX // BLOCK_N
    if CAUSAL:
        n_full = gl.minimum(n_full, (start_m * BLOCK_M + C * ROWS + 1) // BLOCK_N)

    # block 0: QK^T, softmax (no PV before it)
    mbarrier.wait(k_ready.index(0), 0)
    _turn_wait(turn, 0, C, PP)
    qk = warpgroup_mma(
        q,
        k_ring.index(0).permute((1, 0)),
        gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout),
        is_async=True,
    )
    _turn_pass(turn, C, NCONS, PP)
    qk = warpgroup_mma_wait(0, deps=[qk])
    _sync()
    mbarrier.arrive(k_empty.index(0))
    p, alpha, l_i, m_i = _softmax_step(
        qk, m_i, l_i, offs_m, offs_n, N_CTX, qk_scale, CAUSAL
    )
    p_prev = gl.convert_layout(p.to(dtype), p_layout)
    for j in range(1, n_iters):
        slot = j % S
        prev = (j - 1) % S
        mbarrier.wait(k_ready.index(slot), (j // S) & 1)
        mbarrier.wait(v_ready.index(prev), ((j - 1) // S) & 1)
        _turn_wait(turn, j, C, PP)
        qk = warpgroup_mma(
            q,
            k_ring.index(slot).permute((1, 0)),
            gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout),
            is_async=True,
        )
        acc = warpgroup_mma(p_prev, v_ring.index(prev), acc, is_async=True)
        _turn_pass(turn, C, NCONS, PP)
        qk = warpgroup_mma_wait(1, deps=[qk])
        _sync()
        mbarrier.arrive(k_empty.index(slot))
        if SPLIT:
            p, alpha, l_i, m_i = _softmax_step(
                qk,
                m_i,
                l_i,
                offs_m,
                j * BLOCK_N + offs_n,
                N_CTX,
                qk_scale,
                CAUSAL,
                j >= n_full,
            )
        else:
            p, alpha, l_i, m_i = _softmax_step(
                qk, m_i, l_i, offs_m, j * BLOCK_N + offs_n, N_CTX, qk_scale, CAUSAL
            )
        acc = warpgroup_mma_wait(0, deps=[acc])
        _sync()
        mbarrier.arrive(v_empty.index(prev))
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
        p_prev = gl.convert_layout(p.to(dtype), p_layout)
    last = (n_iters - 1) % S
    mbarrier.wait(v_ready.index(last), ((n_iters - 1) // S) & 1)
    _turn_wait(turn, n_iters, C, PP)
    acc = warpgroup_mma(p_prev, v_ring.index(last), acc, is_async=True)
    _turn_pass(turn, C, NCONS, PP)
    acc = warpgroup_mma_wait(0, deps=[acc])
    _sync()
    mbarrier.arrive(v_empty.index(last))
    acc = acc / gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))[:, None]
    # Q is no longer read: its tile takes O for the TMA store
    q.store(acc.to(dtype))
    fence_async_shared()
    _tma_async_store(o_desc, [start_m * BLOCK_M + C * ROWS, 0], q)
    tma.store_wait(0)


@gluon.jit
def attn_fwd_ws(
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    sm_scale,
    stride_qz,
    stride_qh,
    stride_qm,
    stride_kz,
    stride_kh,
    stride_kn,
    stride_vz,
    stride_vh,
    stride_vn,
    stride_oz,
    stride_oh,
    stride_om,
    H,
    N_CTX,
    HEAD_DIM: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    CAUSAL: gl.constexpr,
    S: gl.constexpr,
    NCONS: gl.constexpr,
    CONS_REGS: gl.constexpr,
    LOAD_REGS: gl.constexpr,
    PP: gl.constexpr = False,
    REV: gl.constexpr = False,
    SPLIT: gl.constexpr = False,
):
    start_m = gl.program_id(0)
    if REV:
        start_m = gl.num_programs(0) - 1 - start_m
    off_hz = gl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    dtype: gl.constexpr = q_ptr.dtype.element_ty
    ROWS: gl.constexpr = BLOCK_M // NCONS
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for(
        [ROWS, HEAD_DIM], dtype
    )
    kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for(
        [BLOCK_N, HEAD_DIM], dtype
    )
    q_desc = tma.make_tensor_descriptor(
        q_ptr + off_z * stride_qz + off_h * stride_qh,
        shape=[N_CTX, HEAD_DIM],
        strides=[stride_qm, 1],
        block_shape=[ROWS, HEAD_DIM],
        layout=q_layout,
    )
    k_desc = tma.make_tensor_descriptor(
        k_ptr + off_z * stride_kz + off_h * stride_kh,
        shape=[N_CTX, HEAD_DIM],
        strides=[stride_kn, 1],
        block_shape=[BLOCK_N, HEAD_DIM],
        layout=kv_layout,
    )
    v_desc = tma.make_tensor_descriptor(
        v_ptr + off_z * stride_vz + off_h * stride_vh,
        shape=[N_CTX, HEAD_DIM],
        strides=[stride_vn, 1],
        block_shape=[BLOCK_N, HEAD_DIM],
        layout=kv_layout,
    )
    o_desc = tma.make_tensor_descriptor(
        o_ptr + off_z * stride_oz + off_h * stride_oh,
        shape=[N_CTX, HEAD_DIM],
        strides=[stride_om, 1],
        block_shape=[ROWS, HEAD_DIM],
        layout=q_layout,
    )
    if CAUSAL:
        hi = gl.minimum((start_m + 1) * BLOCK_M, N_CTX)
    else:
        hi = N_CTX
    q_smem = gl.allocate_shared_memory(dtype, [NCONS, ROWS, HEAD_DIM], q_layout)
    k_ring = gl.allocate_shared_memory(dtype, [S, BLOCK_N, HEAD_DIM], kv_layout)
    v_ring = gl.allocate_shared_memory(dtype, [S, BLOCK_N, HEAD_DIM], kv_layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [NCONS, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [S, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [S, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [S, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [S, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [NCONS, 1], mbarrier.MBarrierLayout())
    for c in gl.static_range(NCONS):
        mbarrier.init(q_bar.index(c), count=1)
        mbarrier.init(turn.index(c), count=1)
    for s in gl.static_range(S):
        mbarrier.init(k_ready.index(s), count=1)
        mbarrier.init(v_ready.index(s), count=1)
        mbarrier.init(k_empty.index(s), count=NCONS)
        mbarrier.init(v_empty.index(s), count=NCONS)
    if NCONS == 1:
        gl.warp_specialize(
            [
                (
                    _consumer,
                    (
                        turn,
                        PP,
                        REV,
                        SPLIT,
                        q_smem,
                        k_ring,
                        v_ring,
                        q_bar,
                        k_ready,
                        k_empty,
                        v_ready,
                        v_empty,
                        o_desc,
                        sm_scale,
                        N_CTX,
                        start_m,
                        hi,
                        0,
                        HEAD_DIM,
                        BLOCK_M,
                        BLOCK_N,
                        NCONS,
                        CAUSAL,
                    ),
                ),
                (
                    _loader,
                    (
                        q_desc,
                        k_desc,
                        v_desc,
                        q_smem,
                        k_ring,
                        v_ring,
                        q_bar,
                        k_ready,
                        k_empty,
                        v_ready,
                        v_empty,
                        start_m,
                        hi,
                        BLOCK_M,
                        BLOCK_N,
                        NCONS,
                    ),
                ),
            ],
            [1],
            [LOAD_REGS],
        )
    elif NCONS == 2:
        gl.warp_specialize(
            [
                (
                    _consumer,
                    (
                        turn,
                        PP,
                        REV,
                        SPLIT,
                        q_smem,
                        k_ring,
                        v_ring,
                        q_bar,
                        k_ready,
                        k_empty,
                        v_ready,
                        v_empty,
                        o_desc,
                        sm_scale,
                        N_CTX,
                        start_m,
                        hi,
                        0,
                        HEAD_DIM,
                        BLOCK_M,
                        BLOCK_N,
                        NCONS,
                        CAUSAL,
                    ),
                ),
                (
                    _consumer,
                    (
                        turn,
                        PP,
                        REV,
                        SPLIT,
                        q_smem,
                        k_ring,
                        v_ring,
                        q_bar,
                        k_ready,
                        k_empty,
                        v_ready,
                        v_empty,
                        o_desc,
                        sm_scale,
                        N_CTX,
                        start_m,
                        hi,
                        1,
                        HEAD_DIM,
                        BLOCK_M,
                        BLOCK_N,
                        NCONS,
                        CAUSAL,
                    ),
                ),
                (
                    _loader,
                    (
                        q_desc,
                        k_desc,
                        v_desc,
                        q_smem,
                        k_ring,
                        v_ring,
                        q_bar,
                        k_ready,
                        k_empty,
                        v_ready,
                        v_empty,
                        start_m,
                        hi,
                        BLOCK_M,
                        BLOCK_N,
                        NCONS,
                    ),
                ),
            ],
            [4, 1],
            [CONS_REGS, LOAD_REGS],
        )
    else:
        gl.warp_specialize(
            [
                (
                    _consumer,
                    (
                        turn,
                        PP,
                        REV,
                        SPLIT,
                        q_smem,
                        k_ring,
                        v_ring,
                        q_bar,
                        k_ready,
                        k_empty,
                        v_ready,
                        v_empty,
                        o_desc,
                        sm_scale,
                        N_CTX,
                        start_m,
                        hi,
                        0,
                        HEAD_DIM,
                        BLOCK_M,
                        BLOCK_N,
                        NCONS,
                        CAUSAL,
                    ),
                ),
                (
                    _consumer,
                    (
                        turn,
                        PP,
                        REV,
                        SPLIT,
                        q_smem,
                        k_ring,
                        v_ring,
                        q_bar,
                        k_ready,
                        k_empty,
                        v_ready,
                        v_empty,
                        o_desc,
                        sm_scale,
                        N_CTX,
                        start_m,
                        hi,
                        1,
                        HEAD_DIM,
                        BLOCK_M,
                        BLOCK_N,
                        NCONS,
                        CAUSAL,
                    ),
                ),
                (
                    _consumer,
                    (
                        turn,
                        PP,
                        REV,
                        SPLIT,
                        q_smem,
                        k_ring,
                        v_ring,
                        q_bar,
                        k_ready,
                        k_empty,
                        v_ready,
                        v_empty,
                        o_desc,
                        sm_scale,
                        N_CTX,
                        start_m,
                        hi,
                        2,
                        HEAD_DIM,
                        BLOCK_M,
                        BLOCK_N,
                        NCONS,
                        CAUSAL,
                    ),
                ),
                (
                    _loader,
                    (
                        q_desc,
                        k_desc,
                        v_desc,
                        q_smem,
                        k_ring,
                        v_ring,
                        q_bar,
                        k_ready,
                        k_empty,
                        v_ready,
                        v_empty,
                        start_m,
                        hi,
                        BLOCK_M,
                        BLOCK_N,
                        NCONS,
                    ),
                ),
            ],
            [4, 4, 1],
            [CONS_REGS, CONS_REGS, LOAD_REGS],
        )


# name -> constexprs (NW: the consumer's warps where NCONS == 1)
FORMS = {
    "d128 2x64 rows, pp+split+rev": dict(
        HEAD_DIM=128,
        BLOCK_M=128,
        BLOCK_N=128,
        S=2,
        NCONS=2,
        CONS_REGS=240,
        LOAD_REGS=24,
        PP=True,
        SPLIT=True,
        REV=True,
    ),
    "d128 2x64 rows, pp+split": dict(
        HEAD_DIM=128,
        BLOCK_M=128,
        BLOCK_N=128,
        S=2,
        NCONS=2,
        CONS_REGS=240,
        LOAD_REGS=24,
        PP=True,
        SPLIT=True,
        REV=False,
    ),
    "d128 2x64 rows, pp": dict(
        HEAD_DIM=128,
        BLOCK_M=128,
        BLOCK_N=128,
        S=2,
        NCONS=2,
        CONS_REGS=240,
        LOAD_REGS=24,
        PP=True,
        SPLIT=False,
        REV=False,
    ),
    "d128 one 8-warp consumer": dict(
        HEAD_DIM=128,
        BLOCK_M=128,
        BLOCK_N=128,
        S=2,
        NCONS=1,
        CONS_REGS=0,
        LOAD_REGS=24,
        PP=False,
        SPLIT=False,
        REV=False,
        NW=8,
    ),
    "d64 3x64 rows, pp+split": dict(
        HEAD_DIM=64,
        BLOCK_M=192,
        BLOCK_N=128,
        S=3,
        NCONS=3,
        CONS_REGS=160,
        LOAD_REGS=24,
        PP=True,
        SPLIT=True,
        REV=False,
    ),
    "d64 2x64 rows, pp+split": dict(
        HEAD_DIM=64,
        BLOCK_M=128,
        BLOCK_N=128,
        S=3,
        NCONS=2,
        CONS_REGS=240,
        LOAD_REGS=24,
        PP=True,
        SPLIT=True,
        REV=False,
    ),
}

ROOT = Path(__file__).resolve().parents[3]


def _original():
    spec = importlib.util.spec_from_file_location(
        "attention_fwd_original", ROOT / "fixtures" / "attention_fwd.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ws_attention(q, k, v, causal, scale, form):
    form = dict(form)
    nw = form.pop("NW", 4)
    Z, H, N, D = q.shape
    o = torch.empty_like(q)
    grid = (triton.cdiv(N, form["BLOCK_M"]), Z * H)
    attn_fwd_ws[grid](
        q,
        k,
        v,
        o,
        scale,
        q.stride(0),
        q.stride(1),
        q.stride(2),
        k.stride(0),
        k.stride(1),
        k.stride(2),
        v.stride(0),
        v.stride(1),
        v.stride(2),
        o.stride(0),
        o.stride(1),
        o.stride(2),
        H,
        N,
        CAUSAL=causal,
        num_warps=nw,
        **form,
    )
    return o


def cudnn_attention(q, k, v, causal, scale):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=causal, scale=scale
        )


def _ms(fn):
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def main() -> int:
    triton.set_allocator(
        lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda")
    )
    original = _original()
    print(
        f"device {torch.cuda.get_device_name()}, triton {triton.__version__}",
        flush=True,
    )
    ok = True
    for (
        name,
        form,
    ) in FORMS.items():  # ragged sizes, both masks, against the original kernel
        for causal in (False, True):
            torch.manual_seed(0)
            q, k, v = (
                torch.randn(
                    2, 3, 1000, form["HEAD_DIM"], device="cuda", dtype=torch.float16
                )
                for _ in range(3)
            )
            scale = form["HEAD_DIM"] ** -0.5
            err = (
                (
                    ws_attention(q, k, v, causal, scale, form).float()
                    - original.attention(q, k, v, causal, scale).float()
                )
                .abs()
                .max()
                .item()
            )
            ok &= err < 2e-2
            print(
                f"check {name:32s} causal={causal!s:5s} 2x3x1000: max |diff| {err:.3g} {'ok' if err < 2e-2 else 'FAIL'}",
                flush=True,
            )
    for head_dim in (64, 128):
        for causal in (False, True):
            torch.manual_seed(0)
            q, k, v = (
                torch.randn(4, 16, 4096, head_dim, device="cuda", dtype=torch.float16)
                for _ in range(3)
            )
            scale = head_dim**-0.5
            flops = 4 * 4 * 16 * 4096 * 4096 * head_dim * (0.5 if causal else 1.0)
            fns = {
                "cuDNN": lambda: cudnn_attention(q, k, v, causal, scale),
                "original": lambda: original.attention(q, k, v, causal, scale),
            }
            for name, form in FORMS.items():
                if form["HEAD_DIM"] == head_dim:
                    fns[name] = lambda form=form: ws_attention(
                        q, k, v, causal, scale, form
                    )
            times = {
                key: statistics.median(_ms(f) for _ in range(3))
                for key, f in fns.items()
            }
            print(f"d{head_dim} {'causal' if causal else 'full'}:", flush=True)
            for key, t in times.items():
                print(
                    f"    {key:32s} {flops / t / 1e9:6.0f} TFLOP/s  {times['original'] / t:5.2f}x original  "
                    f"{times['cuDNN'] / t:5.2f}x cuDNN",
                    flush=True,
                )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
