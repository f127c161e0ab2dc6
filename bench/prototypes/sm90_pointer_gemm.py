"""Hand-written pipelined main loops for the pointer GEMM (fixtures/matmul_grouped.py) on sm90: the shapes the
pointer-load pipeline rule should transcribe (issue #4), measured on an H200 (Triton 3.6) in bench/RESULTS.md.

MODE 1: cp.async ring. NUM_STAGES shared-memory slots per operand, filled NUM_STAGES - 1 iterations ahead with
        `async_copy` (one commit group per iteration, masks kept, `next_it < num_iters` folded into the mask);
        per iteration: `wait_group(NUM_STAGES - 2)`, CTA barrier, async wgmma from the slot, `warpgroup_mma_wait(1)`,
        a second barrier with two warpgroups, refill the slot the retired wgmma read. No proxy fence: Triton's own
        pipeliner emits none between cp.async and wgmma either (one more barrier cost 3-5%).
        0.93-0.99x of the original kernel per config, fp16 and bf16. Compiles ONLY when the launch specialization
        proves 16-byte vectors (inner stride constexpr 1 and K, row strides divisible by 16): with a ragged K or
        unaligned rows the compiler rejects it ("cp.async does not support transfers smaller than 4 bytes").
MODE 0: register-staged ring: `gl.load` of iteration it+1 into registers, smem store, fence, barrier, async wgmma.
        Always compiles, but the loads are only one iteration ahead: 0.27-0.7x of the original. Not worth emitting.
MODE 3: MODE 0 with the next tiles loaded before the current ones are stored (two register tiles live): slower still
        with 128x256 tiles (register pressure).
MODE 2: MODE 1 under a runtime test of the integers' alignment (hints on the copies' pointers and masks), MODE 3
        otherwise. Broken as written: `gl.multiple_of`/`max_contiguous` set their attribute on the op that defines the
        value, here the pointer tensor shared with the fallback, whose plain loads then vectorise on unaligned rows
        ("misaligned address"). Hints must go on values the guarded branch defines itself.
VEC: elements per thread along the contiguous dimension of the copy layouts; 8 (16-byte copies) is required for
        speed: the emitted `_blocked_layout` (4 elements) gives 8-byte cp.async and 0.7x.
"""
import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.language.nvidia.ampere import async_copy as _async_copy

_cp_async_load = getattr(_async_copy, "async_load", None) or _async_copy.async_copy_global_to_shared
_cta_barrier = getattr(gl, "barrier", None) or gl.thread_barrier


@gluon.constexpr_function
def _blocked_layout_v(shape, num_warps, vec):
    rank = len(shape)
    size = list(shape)
    size_per_thread = [1] * (rank - 1) + [min(vec, size[-1])]
    threads_per_warp = [1] * rank
    lanes = 32
    for dim in reversed(range(rank)):
        threads_per_warp[dim] = min(lanes, max(1, size[dim] // size_per_thread[dim]))
        lanes //= threads_per_warp[dim]
    threads_per_warp[0] *= lanes
    warps_per_cta = [1] * rank
    warps = num_warps
    for dim in range(rank):
        warps_per_cta[dim] = min(warps, max(1, size[dim] // (size_per_thread[dim] * threads_per_warp[dim])))
        warps //= warps_per_cta[dim]
    warps_per_cta[0] *= warps
    return gl.BlockedLayout(size_per_thread, threads_per_warp, warps_per_cta, list(reversed(range(rank))))


@gluon.constexpr_function
def _mma_layout(m, ns, dtype, num_warps):
    widths = [n for n in ns if n is not None] or [128]
    rows = 128 if m is None else m
    warps_m = max(4, min(num_warps, rows // 16))
    warps_n = num_warps // warps_m
    instr_n = min(256, min(widths) // warps_n)
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[warps_m, warps_n],
                                     instr_shape=[16, instr_n, 256 // dtype.primitive_bitwidth])


@gluon.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_SIZE_M: gl.constexpr, BLOCK_SIZE_N: gl.constexpr, BLOCK_SIZE_K: gl.constexpr,
                  GROUP_SIZE_M: gl.constexpr, MODE: gl.constexpr, NUM_STAGES: gl.constexpr, VEC: gl.constexpr):
    a_ptrs_layout: gl.constexpr = _blocked_layout_v([BLOCK_SIZE_M, BLOCK_SIZE_K], gl.num_warps(), VEC)
    b_ptrs_layout: gl.constexpr = _blocked_layout_v([BLOCK_SIZE_K, BLOCK_SIZE_N], gl.num_warps(), VEC)
    mma_layout: gl.constexpr = _mma_layout(BLOCK_SIZE_M, [BLOCK_SIZE_N], a_ptr.dtype.element_ty, gl.num_warps())
    pid = gl.program_id(axis=0)
    num_pid_m = gl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = gl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = gl.minimum(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK_SIZE_M + gl.arange(0, BLOCK_SIZE_M, layout=gl.SliceLayout(1, a_ptrs_layout))) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + gl.arange(0, BLOCK_SIZE_N, layout=gl.SliceLayout(0, b_ptrs_layout))) % N
    offs_am = gl.max_contiguous(gl.multiple_of(offs_am, BLOCK_SIZE_M), BLOCK_SIZE_M)
    offs_bn = gl.max_contiguous(gl.multiple_of(offs_bn, BLOCK_SIZE_N), BLOCK_SIZE_N)
    offs_k = gl.arange(0, BLOCK_SIZE_K, layout=gl.SliceLayout(0, a_ptrs_layout))
    offs_k_col = gl.convert_layout(offs_k, gl.SliceLayout(1, b_ptrs_layout))
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k_col[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    accumulator = gl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=gl.float32, layout=mma_layout)
    dtype: gl.constexpr = a_ptr.dtype.element_ty
    a_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_SIZE_M, BLOCK_SIZE_K],
                                       gl.NVMMASharedLayout.get_default_for([BLOCK_SIZE_M, BLOCK_SIZE_K], dtype))
    b_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_SIZE_K, BLOCK_SIZE_N],
                                       gl.NVMMASharedLayout.get_default_for([BLOCK_SIZE_K, BLOCK_SIZE_N], dtype))
    num_iters = gl.cdiv(K, BLOCK_SIZE_K)
    if MODE == 0:
        # register ring: tiles of iteration it+1 are loaded into registers while wgmma it runs
        a_ptrs_next = a_ptrs
        b_ptrs_next = b_ptrs
        a = gl.load(a_ptrs_next, mask=(offs_k[None, :] < K) & (0 < num_iters), other=0.0)
        b = gl.load(b_ptrs_next, mask=(offs_k_col[:, None] < K) & (0 < num_iters), other=0.0)
        a_ptrs_next += BLOCK_SIZE_K * stride_ak
        b_ptrs_next += BLOCK_SIZE_K * stride_bk
        for it in range(num_iters):
            slot = it % NUM_STAGES
            a_smem.index(slot).store(a)
            b_smem.index(slot).store(b)
            fence_async_shared()
            _cta_barrier()
            k_next = it + 1
            a = gl.load(a_ptrs_next, mask=(offs_k[None, :] < K - k_next * BLOCK_SIZE_K) & (k_next < num_iters), other=0.0)
            b = gl.load(b_ptrs_next, mask=(offs_k_col[:, None] < K - k_next * BLOCK_SIZE_K) & (k_next < num_iters), other=0.0)
            a_ptrs_next += BLOCK_SIZE_K * stride_ak
            b_ptrs_next += BLOCK_SIZE_K * stride_bk
            accumulator = warpgroup_mma(a_smem.index(slot), b_smem.index(slot), accumulator, is_async=True)
            accumulator, _, _ = warpgroup_mma_wait(1, deps=[accumulator, a_smem.index(slot), b_smem.index(slot)])
        accumulator = warpgroup_mma_wait(0, deps=[accumulator])
    elif MODE == 3:
        a_ptrs_next = a_ptrs
        b_ptrs_next = b_ptrs
        a = gl.load(a_ptrs_next, mask=(offs_k[None, :] < K) & (0 < num_iters), other=0.0)
        b = gl.load(b_ptrs_next, mask=(offs_k_col[:, None] < K) & (0 < num_iters), other=0.0)
        for it in range(num_iters):
            slot = it % NUM_STAGES
            a_ptrs_next += BLOCK_SIZE_K * stride_ak
            b_ptrs_next += BLOCK_SIZE_K * stride_bk
            k_next = it + 1
            a_next = gl.load(a_ptrs_next, mask=(offs_k[None, :] < K - k_next * BLOCK_SIZE_K) & (k_next < num_iters), other=0.0)
            b_next = gl.load(b_ptrs_next, mask=(offs_k_col[:, None] < K - k_next * BLOCK_SIZE_K) & (k_next < num_iters), other=0.0)
            a_smem.index(slot).store(a)
            b_smem.index(slot).store(b)
            fence_async_shared()
            _cta_barrier()
            accumulator = warpgroup_mma(a_smem.index(slot), b_smem.index(slot), accumulator, is_async=True)
            accumulator, _, _ = warpgroup_mma_wait(1, deps=[accumulator, a_smem.index(slot), b_smem.index(slot)])
            a = a_next
            b = b_next
        accumulator = warpgroup_mma_wait(0, deps=[accumulator])
    elif MODE == 2 and ((K % VEC == 0) & (stride_am % VEC == 0) & (stride_bk % VEC == 0) & (N % VEC == 0)):
        # cp.async ring; the runtime test above makes these alignment facts true
        a_ptrs_next = a_ptrs
        b_ptrs_next = b_ptrs
        for i in gl.static_range(NUM_STAGES - 1):
            _cp_async_load(a_smem.index(i), gl.max_contiguous(gl.multiple_of(a_ptrs_next, [1, 16]), [1, VEC]),
                           mask=gl.max_constancy((offs_k[None, :] < K - i * BLOCK_SIZE_K) & (i < num_iters), [1, VEC]))
            _cp_async_load(b_smem.index(i), gl.max_contiguous(gl.multiple_of(b_ptrs_next, [1, 16]), [1, VEC]),
                           mask=(offs_k_col[:, None] < K - i * BLOCK_SIZE_K) & (i < num_iters))
            _async_copy.commit_group()
            a_ptrs_next += BLOCK_SIZE_K * stride_ak
            b_ptrs_next += BLOCK_SIZE_K * stride_bk
        for it in range(num_iters):
            slot = it % NUM_STAGES
            _async_copy.wait_group(NUM_STAGES - 2)
            _cta_barrier()
            accumulator = warpgroup_mma(a_smem.index(slot), b_smem.index(slot), accumulator, is_async=True)
            accumulator, _, _ = warpgroup_mma_wait(1, deps=[accumulator, a_smem.index(slot), b_smem.index(slot)])
            if gl.num_warps() > 4:
                _cta_barrier()
            next_it = it + NUM_STAGES - 1
            next_slot = next_it % NUM_STAGES
            _cp_async_load(a_smem.index(next_slot), gl.max_contiguous(gl.multiple_of(a_ptrs_next, [1, 16]), [1, VEC]),
                           mask=gl.max_constancy((offs_k[None, :] < K - next_it * BLOCK_SIZE_K) & (next_it < num_iters), [1, VEC]))
            _cp_async_load(b_smem.index(next_slot), gl.max_contiguous(gl.multiple_of(b_ptrs_next, [1, 16]), [1, VEC]),
                           mask=(offs_k_col[:, None] < K - next_it * BLOCK_SIZE_K) & (next_it < num_iters))
            _async_copy.commit_group()
            a_ptrs_next += BLOCK_SIZE_K * stride_ak
            b_ptrs_next += BLOCK_SIZE_K * stride_bk
        accumulator = warpgroup_mma_wait(0, deps=[accumulator])
        _async_copy.wait_group(0)
    elif MODE == 2:
        a_ptrs_next = a_ptrs
        b_ptrs_next = b_ptrs
        a = gl.load(a_ptrs_next, mask=(offs_k[None, :] < K) & (0 < num_iters), other=0.0)
        b = gl.load(b_ptrs_next, mask=(offs_k_col[:, None] < K) & (0 < num_iters), other=0.0)
        for it in range(num_iters):
            slot = it % NUM_STAGES
            a_ptrs_next += BLOCK_SIZE_K * stride_ak
            b_ptrs_next += BLOCK_SIZE_K * stride_bk
            k_next = it + 1
            a_next = gl.load(a_ptrs_next, mask=(offs_k[None, :] < K - k_next * BLOCK_SIZE_K) & (k_next < num_iters), other=0.0)
            b_next = gl.load(b_ptrs_next, mask=(offs_k_col[:, None] < K - k_next * BLOCK_SIZE_K) & (k_next < num_iters), other=0.0)
            a_smem.index(slot).store(a)
            b_smem.index(slot).store(b)
            fence_async_shared()
            _cta_barrier()
            accumulator = warpgroup_mma(a_smem.index(slot), b_smem.index(slot), accumulator, is_async=True)
            accumulator, _, _ = warpgroup_mma_wait(1, deps=[accumulator, a_smem.index(slot), b_smem.index(slot)])
            a = a_next
            b = b_next
        accumulator = warpgroup_mma_wait(0, deps=[accumulator])
    else:
        a_ptrs_next = a_ptrs
        b_ptrs_next = b_ptrs
        for i in gl.static_range(NUM_STAGES - 1):
            _cp_async_load(a_smem.index(i), a_ptrs_next, mask=(offs_k[None, :] < K - i * BLOCK_SIZE_K) & (i < num_iters))
            _cp_async_load(b_smem.index(i), b_ptrs_next, mask=(offs_k_col[:, None] < K - i * BLOCK_SIZE_K) & (i < num_iters))
            _async_copy.commit_group()
            a_ptrs_next += BLOCK_SIZE_K * stride_ak
            b_ptrs_next += BLOCK_SIZE_K * stride_bk
        for it in range(num_iters):
            slot = it % NUM_STAGES
            _async_copy.wait_group(NUM_STAGES - 2)
            _cta_barrier()
            accumulator = warpgroup_mma(a_smem.index(slot), b_smem.index(slot), accumulator, is_async=True)
            accumulator, _, _ = warpgroup_mma_wait(1, deps=[accumulator, a_smem.index(slot), b_smem.index(slot)])
            if gl.num_warps() > 4:
                _cta_barrier()
            next_it = it + NUM_STAGES - 1
            next_slot = next_it % NUM_STAGES
            _cp_async_load(a_smem.index(next_slot), a_ptrs_next,
                           mask=(offs_k[None, :] < K - next_it * BLOCK_SIZE_K) & (next_it < num_iters))
            _cp_async_load(b_smem.index(next_slot), b_ptrs_next,
                           mask=(offs_k_col[:, None] < K - next_it * BLOCK_SIZE_K) & (next_it < num_iters))
            _async_copy.commit_group()
            a_ptrs_next += BLOCK_SIZE_K * stride_ak
            b_ptrs_next += BLOCK_SIZE_K * stride_bk
        accumulator = warpgroup_mma_wait(0, deps=[accumulator])
        _async_copy.wait_group(0)
    c = accumulator.to(gl.float16)

    offs_cm = pid_m * BLOCK_SIZE_M + gl.arange(0, BLOCK_SIZE_M, layout=gl.SliceLayout(1, mma_layout))
    offs_cn = pid_n * BLOCK_SIZE_N + gl.arange(0, BLOCK_SIZE_N, layout=gl.SliceLayout(0, mma_layout))
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    gl.store(c_ptrs, c, mask=c_mask)


CONFIGS = [dict(BLOCK_SIZE_M=128, BLOCK_SIZE_N=256, BLOCK_SIZE_K=64, GROUP_SIZE_M=8, num_warps=8),
           dict(BLOCK_SIZE_M=64, BLOCK_SIZE_N=128, BLOCK_SIZE_K=32, GROUP_SIZE_M=8, num_warps=4)]


def matmul(a, b, cfg, mode, stages, vec):
    M, K = a.shape
    K, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, cfg["BLOCK_SIZE_M"]) * triton.cdiv(N, cfg["BLOCK_SIZE_N"]),)
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                        MODE=mode, NUM_STAGES=stages, VEC=vec, **cfg)
    return c
