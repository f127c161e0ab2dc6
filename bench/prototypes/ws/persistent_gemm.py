"""Issue 10 prototype (session 7): persistent sm90 GEMM forms, hand-written to measure what the emitter would gain
before building them. Compared in one run with the fixture's original descriptor kernel, its current variant (plain
TMA ring / warp-specialised ring, the golden) and cuBLAS (torch.matmul):

- `coop`: persistent, warp-specialised: one loader warp walks the CTA's tiles (grouped order) and K steps through an
  empty/ready mbarrier ring that runs on across tiles; the default partition (num_warps warps, both warpgroups on one
  128xBN tile) runs the async wgmmas and then the epilogue (bias, activation, TMA store through shared memory). The
  store of tile j completes while tile j+1's main loop runs (store_wait only before c_smem is reused), and the loader
  fills the ring for tile j+1 while the epilogue of tile j runs.
- `pingpong`: the same loader, two consumer partitions of 4 warps, each with its own whole tile (alternate tiles of the
  CTA): one's epilogue overlaps the other's main loop.

The kernels are correct for any grid (a program takes tiles pid, pid + nprog, ...); launched with one program per SM
they are persistent.

    python bench/prototypes/ws/persistent_gemm.py      # on the GPU: correctness, then TFLOP/s for every form
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
def _tile(tile, num_m, num_n, GROUP_M: gl.constexpr):
    group = tile // (GROUP_M * num_n)
    first_m = group * GROUP_M
    size_m = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (tile % (GROUP_M * num_n)) % size_m
    pid_n = (tile % (GROUP_M * num_n)) // size_m
    return pid_m, pid_n


@gluon.jit
def _loader(a_desc, b_desc, a_smem, b_smem, ready, empty, M, N, K, GROUP_M: gl.constexpr):
    NUM_STAGES: gl.constexpr = a_smem.shape[0]
    BLOCK_M: gl.constexpr = a_smem.shape[1]
    BLOCK_K: gl.constexpr = a_smem.shape[2]
    BLOCK_N: gl.constexpr = b_smem.shape[2]
    num_m = gl.cdiv(M, BLOCK_M)
    num_n = gl.cdiv(N, BLOCK_N)
    k_iters = gl.cdiv(K, BLOCK_K)
    count = 0
    for tile in range(gl.program_id(0), num_m * num_n, gl.num_programs(0)):
        pid_m, pid_n = _tile(tile, num_m, num_n, GROUP_M)
        for k in range(k_iters):
            slot = count % NUM_STAGES
            mbarrier.wait(empty.index(slot), ((count // NUM_STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(slot), a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            _tma_async_load(a_desc, [pid_m * BLOCK_M, k * BLOCK_K], ready.index(slot), a_smem.index(slot))
            _tma_async_load(b_desc, [k * BLOCK_K, pid_n * BLOCK_N], ready.index(slot), b_smem.index(slot))
            count += 1


@gluon.jit
def _consumer(a_smem, b_smem, ready, empty, c_desc, c_smem, bias_ptr, M, N, K, GROUP_M: gl.constexpr,
              ACTIVATION: gl.constexpr, PART: gl.constexpr, NPARTS: gl.constexpr):
    NUM_STAGES: gl.constexpr = a_smem.shape[0]
    BLOCK_M: gl.constexpr = a_smem.shape[1]
    BLOCK_K: gl.constexpr = a_smem.shape[2]
    BLOCK_N: gl.constexpr = b_smem.shape[2]
    mma_layout: gl.constexpr = _mma_layout(BLOCK_M, BLOCK_N, gl.num_warps())
    num_m = gl.cdiv(M, BLOCK_M)
    num_n = gl.cdiv(N, BLOCK_N)
    k_iters = gl.cdiv(K, BLOCK_K)
    j = PART
    for tile in range(gl.program_id(0) + PART * gl.num_programs(0), num_m * num_n, NPARTS * gl.num_programs(0)):
        pid_m, pid_n = _tile(tile, num_m, num_n, GROUP_M)
        count = j * k_iters
        acc = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=mma_layout)
        for k in range(k_iters):
            slot = count % NUM_STAGES
            mbarrier.wait(ready.index(slot), (count // NUM_STAGES) & 1)
            acc = warpgroup_mma(a_smem.index(slot), b_smem.index(slot), acc, is_async=True)
            acc = warpgroup_mma_wait(1, deps=[acc])
            if gl.num_warps() > 4:
                _cta_barrier()
            mbarrier.arrive(empty.index((count + NUM_STAGES - 1) % NUM_STAGES), pred=k > 0)
            count += 1
        acc = warpgroup_mma_wait(0, deps=[acc])
        if gl.num_warps() > 4:
            _cta_barrier()
        mbarrier.arrive(empty.index((count + NUM_STAGES - 1) % NUM_STAGES))
        j += NPARTS

        off_n = pid_n * BLOCK_N
        offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_layout))
        bias = gl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0)
        acc = acc + bias[None, :].to(gl.float32)
        if ACTIVATION == "leaky_relu":
            acc = gl.where(acc >= 0, acc, 0.01 * acc)
        # The previous tile's TMA store has read c_smem before it is overwritten.
        tma.store_wait(0)
        c_smem.store(acc.to(c_desc.dtype))
        fence_async_shared()
        _tma_async_store(c_desc, [pid_m * BLOCK_M, off_n], c_smem)
    tma.store_wait(0)


@gluon.jit
def persistent_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                      BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, ACTIVATION: gl.constexpr,
                      NUM_STAGES: gl.constexpr, GROUP_M: gl.constexpr, PINGPONG: gl.constexpr, LOADER_REGS: gl.constexpr,
                      CONSUMER_REGS: gl.constexpr):
    dtype: gl.constexpr = a_ptr.dtype.element_ty
    a_desc = tma.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K], layout=gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_K], dtype))
    b_desc = tma.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_K, BLOCK_N], layout=gl.NVMMASharedLayout.get_default_for([BLOCK_K, BLOCK_N], dtype))
    c_desc = tma.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_M, BLOCK_N], layout=gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_N], c_ptr.dtype.element_ty))
    a_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_K, BLOCK_N], b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(NUM_STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    c_smem = gl.allocate_shared_memory(c_desc.dtype, [BLOCK_M, BLOCK_N], c_desc.layout)
    if PINGPONG:
        c_smem2 = gl.allocate_shared_memory(c_desc.dtype, [BLOCK_M, BLOCK_N], c_desc.layout)
        gl.warp_specialize([
            (_consumer, (a_smem, b_smem, ready, empty, c_desc, c_smem, bias_ptr, M, N, K, GROUP_M, ACTIVATION, 0, 2)),
            (_consumer, (a_smem, b_smem, ready, empty, c_desc, c_smem2, bias_ptr, M, N, K, GROUP_M, ACTIVATION, 1, 2)),
            (_loader, (a_desc, b_desc, a_smem, b_smem, ready, empty, M, N, K, GROUP_M)),
        ], [4, 1], [CONSUMER_REGS, LOADER_REGS])
    else:
        gl.warp_specialize([
            (_consumer, (a_smem, b_smem, ready, empty, c_desc, c_smem, bias_ptr, M, N, K, GROUP_M, ACTIVATION, 0, 1)),
            (_loader, (a_desc, b_desc, a_smem, b_smem, ready, empty, M, N, K, GROUP_M)),
        ], [1], [LOADER_REGS])
    for s in gl.static_range(NUM_STAGES):
        mbarrier.invalidate(ready.index(s))
        mbarrier.invalidate(empty.index(s))


NUM_SMS = None


def run(a, b, bias, c, cfg, activation="leaky_relu"):
    M, K = a.shape
    N = b.shape[1]
    BM, BN, BK, warps, stages, group, pingpong, programs = cfg
    tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    grid = (min(tiles, programs or NUM_SMS),)
    persistent_kernel[grid](a, b, c, bias, M, N, K, a.stride(0), b.stride(0), c.stride(0), BLOCK_M=BM, BLOCK_N=BN,
                            BLOCK_K=BK, ACTIVATION=activation, NUM_STAGES=stages, GROUP_M=group, PINGPONG=pingpong,
                            LOADER_REGS=40 if pingpong else 24, CONSUMER_REGS=232, num_warps=warps)
    return c


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[3]
    sys.path.insert(0, str(root / "fixtures"))
    import matmul_descriptor as orig
    import importlib.util
    spec = importlib.util.spec_from_file_location("golden", root / "fixtures/expected/sm90/matmul_descriptor_sm90.py")
    golden = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(golden)
    NUM_SMS = torch.cuda.get_device_properties(0).multi_processor_count
    print(torch.cuda.get_device_name(), triton.__version__, NUM_SMS, "SMs", flush=True)
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    # (BM, BN, BK, warps, stages, GROUP_M, pingpong, programs (None: one per SM))
    configs = [c for c in [(128, 256, 64, 8, 3, 8, False, None), (128, 256, 64, 8, 3, 16, False, None),
               (128, 128, 64, 8, 4, 8, False, None),
               (128, 256, 64, 8, 3, 8, False, 10**9), (128, 128, 64, 4, 5, 8, True, None)]
               if "--pingpong" in sys.argv or not c[6]]  # the ping-pong form faults (unspecified launch failure)
    gen = torch.Generator(device="cuda").manual_seed(0)
    t = lambda f: triton.testing.do_bench(f, warmup=25, rep=200, return_mode="median")
    for dtype in (torch.float16, torch.bfloat16):
        for M, N, K in ((1000, 1096, 712), (4096, 4096, 4096), (8192, 8192, 8192)):
            a = torch.randn(M, K, device="cuda", dtype=dtype, generator=gen)
            b = torch.randn(K, N, device="cuda", dtype=dtype, generator=gen)
            bias = torch.randn(N, device="cuda", dtype=dtype, generator=gen)
            ref = orig.matmul_bias_act(a, b, bias)
            flops = 2.0 * M * N * K
            t_orig = t(lambda: orig.matmul_bias_act(a, b, bias))
            t_gold = t(lambda: golden.matmul_bias_act(a, b, bias))
            t_cublas = t(lambda: torch.matmul(a, b))
            print(f"== {dtype} {M}x{N}x{K}: original {flops/t_orig*1e-9:.0f} TF/s, golden {flops/t_gold*1e-9:.0f} TF/s "
                  f"(x{t_orig/t_gold:.3f} orig, x{t_cublas/t_gold:.3f} cuBLAS), cuBLAS {flops/t_cublas*1e-9:.0f} TF/s", flush=True)
            for cfg in configs:
                c = torch.empty((M, N), device="cuda", dtype=torch.float16)
                try:
                    run(a, b, bias, c, cfg)
                    err = (c.float() - ref.float()).abs().max().item()
                    ms = t(lambda: run(a, b, bias, c, cfg))
                    print(f"   {cfg}: {flops/ms*1e-9:.0f} TF/s  x{t_orig/ms:.3f} orig  x{t_cublas/ms:.3f} cuBLAS  err {err:.3g}", flush=True)
                except Exception as exc:
                    print(f"   {cfg}: FAILED {type(exc).__name__}: {str(exc)[:600]}", flush=True)
