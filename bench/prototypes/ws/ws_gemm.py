"""Issue 10 prototype (session 6): a warp-specialised sm90 form of matmul_descriptor's kernel, hand-written to
measure what the emitter would gain before building it. One loader warp issues the TMA copies into an empty/ready
mbarrier ring; the default partition (num_warps warps) issues the async wgmmas and releases each slot once the wgmma
that read it has completed; the epilogue runs after the partitions join. GROUP_M > 1 remaps the 2-D grid to a
grouped tile order (a bijection of the program ids: same tiles, better L2 reuse).

    python bench/prototypes/ws/ws_gemm.py      # on the GPU: correctness, then ms for every form and config
"""
import sys
from pathlib import Path

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

_tma_async_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_async_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
_cta_barrier = getattr(gl, "barrier", None) or gl.thread_barrier


@gluon.constexpr_function
def _mma_layout(m, n, num_warps):
    warps_m = max(4, min(num_warps, m // 16))
    warps_n = num_warps // warps_m
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[warps_m, warps_n], instr_shape=[16, min(256, n // warps_n), 16])


@gluon.jit
def _load_partition(a_desc, b_desc, a_smem, b_smem, ready, empty, off_m, off_n, num_iters):
    NUM_STAGES: gl.constexpr = a_smem.shape[0]
    BLOCK_K: gl.constexpr = a_smem.shape[2]
    for it in range(num_iters):
        slot = it % NUM_STAGES
        # A fresh mbarrier counts as having completed the phase before phase 0: the first pass does not wait.
        mbarrier.wait(empty.index(slot), ((it // NUM_STAGES) & 1) ^ 1)
        mbarrier.expect(ready.index(slot), a_desc.block_type.nbytes + b_desc.block_type.nbytes)
        _tma_async_load(a_desc, [off_m, it * BLOCK_K], ready.index(slot), a_smem.index(slot))
        _tma_async_load(b_desc, [it * BLOCK_K, off_n], ready.index(slot), b_smem.index(slot))


@gluon.jit
def _mma_partition(a_smem, b_smem, ready, empty, num_iters, acc):
    NUM_STAGES: gl.constexpr = a_smem.shape[0]
    for it in range(num_iters):
        slot = it % NUM_STAGES
        mbarrier.wait(ready.index(slot), (it // NUM_STAGES) & 1)
        acc = warpgroup_mma(a_smem.index(slot), b_smem.index(slot), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=[acc])
        # The wgmma of the previous iteration has completed (in every warpgroup, after the barrier): its slot is free.
        if gl.num_warps() > 4:
            _cta_barrier()
        mbarrier.arrive(empty.index((it + NUM_STAGES - 1) % NUM_STAGES), pred=it > 0)
    acc = warpgroup_mma_wait(0, deps=[acc])
    return (acc, )  # a tuple: Triton 3.6's warp_specialize flattens the default partition's results


@triton.autotune(configs=[], key=["M", "N", "K"])
@gluon.jit
def ws_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K, stride_am, stride_bk, stride_cm,
              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, ACTIVATION: gl.constexpr,
              NUM_STAGES: gl.constexpr, GROUP_M: gl.constexpr):
    mma_layout: gl.constexpr = _mma_layout(BLOCK_M, BLOCK_N, gl.num_warps())
    pid_m = gl.program_id(0)
    pid_n = gl.program_id(1)
    if GROUP_M > 1:
        # The same set of tiles in a grouped order: GROUP_M row tiles share each column tile of B in L2.
        num_m = gl.num_programs(0)
        num_n = gl.num_programs(1)
        pid = pid_n * num_m + pid_m
        group = pid // (GROUP_M * num_n)
        first_m = group * GROUP_M
        size_m = min(num_m - first_m, GROUP_M)
        pid_m = first_m + (pid % (GROUP_M * num_n)) % size_m
        pid_n = (pid % (GROUP_M * num_n)) // size_m
    a_desc = tma.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K], layout=gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_K], a_ptr.dtype.element_ty))
    b_desc = tma.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_K, BLOCK_N], layout=gl.NVMMASharedLayout.get_default_for([BLOCK_K, BLOCK_N], b_ptr.dtype.element_ty))
    c_desc = tma.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_M, BLOCK_N], layout=gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_N], c_ptr.dtype.element_ty))
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N

    a_smem = gl.allocate_shared_memory(a_desc.dtype, [NUM_STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_smem = gl.allocate_shared_memory(b_desc.dtype, [NUM_STAGES, BLOCK_K, BLOCK_N], b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(NUM_STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    num_iters = gl.cdiv(K, BLOCK_K)
    acc = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=mma_layout)
    results = gl.warp_specialize([
        (_mma_partition, (a_smem, b_smem, ready, empty, num_iters, acc)),
        (_load_partition, (a_desc, b_desc, a_smem, b_smem, ready, empty, off_m, off_n, num_iters)),
    ], [1], [24])
    acc = results[0]
    for s in gl.static_range(NUM_STAGES):
        mbarrier.invalidate(ready.index(s))
        mbarrier.invalidate(empty.index(s))

    offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_layout))
    bias = gl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0)
    acc = acc + bias[None, :].to(gl.float32)
    if ACTIVATION == "leaky_relu":
        acc = gl.where(acc >= 0, acc, 0.01 * acc)
    c_smem = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout, acc.to(c_desc.dtype))
    fence_async_shared()
    _tma_async_store(c_desc, [off_m, off_n], c_smem)
    tma.store_wait(0)


def run(kernel, a, b, bias, cfg, activation="leaky_relu"):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=a.device))
    BM, BN, BK, warps, stages, group = cfg
    grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))
    kernel.fn[grid](a, b, c, bias, M, N, K, a.stride(0), b.stride(0), c.stride(0), BLOCK_M=BM, BLOCK_N=BN,
                    BLOCK_K=BK, ACTIVATION=activation, NUM_STAGES=stages, GROUP_M=group, num_warps=warps)
    return c


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[3]
    sys.path.insert(0, str(root / "fixtures"))
    import matmul_descriptor as orig
    import importlib.util
    spec = importlib.util.spec_from_file_location("golden", root / "fixtures/expected/sm90/matmul_descriptor_sm90.py")
    golden = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(golden)
    print(torch.cuda.get_device_name(), triton.__version__, flush=True)
    configs = [(128, 128, 64, 8, 4, 1), (128, 256, 64, 8, 3, 1), (128, 256, 64, 8, 4, 1), (128, 256, 64, 8, 4, 8),
               (128, 256, 64, 8, 5, 8), (128, 128, 64, 4, 4, 8)]
    gen = torch.Generator(device="cuda").manual_seed(0)
    for M, N, K in ((1000, 1096, 712), (4096, 4096, 4096), (8192, 8192, 8192)):
        a = torch.randn(M, K, device="cuda", dtype=torch.float16, generator=gen)
        b = torch.randn(K, N, device="cuda", dtype=torch.float16, generator=gen)
        bias = torch.randn(N, device="cuda", dtype=torch.float16, generator=gen)
        ref = orig.matmul_bias_act(a, b, bias)
        t = lambda f: triton.testing.do_bench(f, warmup=25, rep=200, return_mode="median")
        flops = 2.0 * M * N * K
        t_orig = t(lambda: orig.matmul_bias_act(a, b, bias))
        t_gold = t(lambda: golden.matmul_bias_act(a, b, bias))
        t_cublas = t(lambda: torch.matmul(a, b))
        print(f"== {M}x{N}x{K}: original {t_orig*1e3:.0f}us ({flops/t_orig*1e-9:.0f} TF/s), ring golden x{t_orig/t_gold:.3f}, "
              f"cuBLAS matmul {t_cublas*1e3:.0f}us ({flops/t_cublas*1e-9:.0f} TF/s)", flush=True)
        for BM, BN, BK, W in ((128, 128, 64, 8), (128, 256, 64, 8)):
            # The plain TMA ring (the golden) at the same tile, for the share of the gain the tile alone gives.
            c = torch.empty((M, N), device="cuda", dtype=torch.float16)
            grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))
            f = lambda: golden.matmul_bias_act_kernel.fn[grid](a, b, c, bias, M, N, K, a.stride(0), b.stride(0),
                                                               c.stride(0), BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK,
                                                               ACTIVATION="leaky_relu", num_warps=W)
            try:
                f()
                err = (c.float() - ref.float()).abs().max().item()
                ms = t(f)
                print(f"   ring {(BM, BN, BK, W)}: {ms*1e3:.0f}us {flops/ms*1e-9:.0f} TF/s  x{t_orig/ms:.3f} orig  x{t_cublas/ms:.3f} cuBLAS  err {err:.3g}", flush=True)
            except Exception as exc:
                print(f"   ring {(BM, BN, BK, W)}: FAILED {type(exc).__name__}: {str(exc).splitlines()[0][:200]}", flush=True)
        for cfg in configs:
            try:
                got = run(ws_kernel, a, b, bias, cfg)
                err = (got.float() - ref.float()).abs().max().item()
                ms = t(lambda: run(ws_kernel, a, b, bias, cfg))
                print(f"   ws {cfg}: {ms*1e3:.0f}us {flops/ms*1e-9:.0f} TF/s  x{t_orig/ms:.3f} orig  x{t_cublas/ms:.3f} cuBLAS  err {err:.3g}", flush=True)
            except Exception as exc:
                print(f"   ws {cfg}: FAILED {type(exc).__name__}: {str(exc).splitlines()[0][:200]}", flush=True)
