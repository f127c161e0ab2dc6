#!/usr/bin/env python
"""Benchmark the sm90 variants against the original plain Triton kernels (and cuBLAS for GEMM), in one run.

    python bench/bench_sm90.py --variant-dir fixtures/expected/sm90

GEMMs run in fp16 and bf16 through the fixtures' pointer kernel (matmul_grouped) and descriptor kernel
(matmul_descriptor) at 4096^3, 8192^3 and a size ragged for every tile (4000x4104x3904: rows stay 16-byte aligned, as
TMA needs), and through the pointer kernel also at 4000x4100x3900 (rows not 16-byte aligned: no 16-byte copies);
cuBLAS is `torch.matmul` on the same operands; for attention (batch 4, 16 heads, seq 4096, fp16) the reference is
torch's `scaled_dot_product_attention` on its cuDNN backend. Every ratio is a speed ratio (original time / variant time, cuBLAS
time / variant time): above 1.0 the variant is faster. Times are medians of `triton.testing.do_bench` on the same
inputs, after each kernel's autotuning (the variant keeps the original's autotune table, so both pick from the same
tile configs; --configs prints the picks).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import torch
import triton

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _ms(fn) -> float:
    fn()  # autotune and compile outside the measurement
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def _kernel(kind: str, module):
    return module.matmul_kernel if kind == "pointer" else module.matmul_bias_act_kernel


def _gemm(kind: str, module, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A @ B (fp16 C) with the fixture's pointer kernel (matmul_grouped) or descriptor kernel (matmul_descriptor,
    zero bias, no activation), launched as the fixture's wrapper launches it."""
    (m, k), n = a.shape, b.shape[1]
    if kind == "pointer":
        c = torch.empty((m, n), device=a.device, dtype=torch.float16)
        grid = lambda META: (triton.cdiv(m, META["BLOCK_SIZE_M"]) * triton.cdiv(n, META["BLOCK_SIZE_N"]),)  # noqa: E731
        module.matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                                   c.stride(1))
    else:
        # Through the fixture's wrapper, which launches the kernel as its file does: a variant in the persistent form
        # rewrites that launch (one program per SM for its warp-specialised configs).
        c = module.matmul_bias_act(a, b, _zero_bias(n, a.dtype), activation="none")
    return c


def _cudnn_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    """torch's scaled_dot_product_attention on its cuDNN backend (the reference for attention)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


_BIAS: dict[tuple[int, torch.dtype], torch.Tensor] = {}


def _zero_bias(n: int, dtype: torch.dtype = torch.float16) -> torch.Tensor:
    if (n, dtype) not in _BIAS:
        _BIAS[(n, dtype)] = torch.zeros(n, device="cuda", dtype=dtype)
    return _BIAS[(n, dtype)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant-dir", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="one GEMM size and one attention shape")
    parser.add_argument("--configs", action="store_true", help="print the autotune config each kernel picked")
    parser.add_argument("--only", choices=("gemm", "attention"), help="run only the GEMMs or only attention")
    args = parser.parse_args()
    torch.manual_seed(0)
    print(f"device: {torch.cuda.get_device_name()}, triton {triton.__version__}, torch {torch.__version__}")
    print(f"{'case':42s} {'orig ms':>9s} {'variant ms':>11s} {'ref ms':>9s} {'vs orig':>8s} {'vs ref':>8s}")

    gemm_o = _load(FIXTURES / "matmul_grouped.py", "bench_orig_gemm")
    gemm_v = _load(args.variant_dir / "matmul_grouped_sm90.py", "bench_var_gemm")
    desc_o = _load(FIXTURES / "matmul_descriptor.py", "bench_orig_desc")
    desc_v = _load(args.variant_dir / "matmul_descriptor_sm90.py", "bench_var_desc")
    # Device-side descriptors are built in a global scratch buffer that Triton allocates per launch.
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    sizes = [(4096, 4096, 4096)]
    if not args.quick:
        sizes += [(8192, 8192, 8192), (4000, 4104, 3904), (4000, 4100, 3900)]
    if args.only == "attention":
        sizes = []
    for dtype in (torch.float16, torch.bfloat16):
        for m, n, k in sizes:
            a = torch.randn(m, k, device="cuda", dtype=dtype)
            b = torch.randn(k, n, device="cuda", dtype=dtype)
            t_r = _ms(lambda: torch.matmul(a, b))
            # The pointer kernels are called directly (their wrapper accepts fp16 only), the descriptor kernels through
            # their wrapper: operands of `dtype`, fp32 accumulation, an fp16 result, as the kernels are written.
            kernels = [("pointer", gemm_o, gemm_v), ("descriptor", desc_o, desc_v)]
            for kind, original, variant in kernels[:1] if n % 8 or k % 8 else kernels:
                t_o, t_v = (_ms(lambda: _gemm(kind, module, a, b)) for module in (original, variant))
                name = f"{kind} gemm {str(dtype).split('.')[-1]} {m}x{n}x{k}"
                print(f"{name:42s} {t_o:9.3f} {t_v:11.3f} {t_r:9.3f} {t_o / t_v:8.2f} {t_r / t_v:8.2f}", flush=True)
                if args.configs:
                    for module, label in ((original, "original"), (variant, "variant")):
                        print(f"    {label} picked {_kernel(kind, module).best_config}", flush=True)

    attn_o = _load(FIXTURES / "attention_fwd.py", "bench_orig_attn")
    attn_v = _load(args.variant_dir / "attention_fwd_sm90.py", "bench_var_attn")
    shapes = [(64, False)] if args.quick else [(64, False), (64, True), (128, False), (128, True)]
    if args.only == "gemm":
        shapes = []
    for head_dim, causal in shapes:
        q, k, v = (torch.randn(4, 16, 4096, head_dim, device="cuda", dtype=torch.float16) for _ in range(3))
        scale = head_dim**-0.5
        t_o = _ms(lambda: attn_o.attention(q, k, v, causal, scale))
        t_v = _ms(lambda: attn_v.attention(q, k, v, causal, scale))
        t_r = _ms(lambda: _cudnn_attention(q, k, v, causal, scale))
        flops = 4 * q.shape[0] * q.shape[1] * q.shape[2] ** 2 * head_dim * (0.5 if causal else 1.0)
        name = f"attention fwd seq 4096 d{head_dim} {'causal' if causal else 'full'}"
        print(f"{name:42s} {t_o:9.3f} {t_v:11.3f} {t_r:9.3f} {t_o / t_v:8.2f} {t_r / t_v:8.2f}"
              f"   TFLOP/s: original {flops / t_o / 1e9:.0f}, variant {flops / t_v / 1e9:.0f}, "
              f"cuDNN {flops / t_r / 1e9:.0f}", flush=True)
        if args.configs:
            for module, label in ((attn_o, "original"), (attn_v, "variant")):
                kernel = module.attn_fwd_kernel
                kernels = [("", kernel)] if not hasattr(kernel, "triton_kernel") else [
                    (" (Gluon, its last autotuned launch)", kernel.gluon_kernel),
                    (" (source kernel, its last autotuned launch)", kernel.triton_kernel)]
                for which, k in kernels:
                    print(f"    {label}{which} picked {getattr(k, 'best_config', 'none yet')}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
