#!/usr/bin/env python
"""Benchmark the sm90 variants against the original plain Triton kernels (and cuBLAS for GEMM), in one run.

    python bench/bench_sm90.py --variant-dir fixtures/expected/sm90

Every ratio is a speed ratio (original time / variant time, cuBLAS time / variant time): above 1.0 the variant is
faster. Times are medians of `triton.testing.do_bench` on the same inputs, after each kernel's autotuning (the
variant keeps the original's autotune table, so both pick from the same tile configs).
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant-dir", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="one GEMM size and one attention shape")
    args = parser.parse_args()
    torch.manual_seed(0)
    print(f"device: {torch.cuda.get_device_name()}, triton {triton.__version__}, torch {torch.__version__}")
    print(f"{'case':42s} {'orig ms':>9s} {'variant ms':>11s} {'ref ms':>9s} {'vs orig':>8s} {'vs ref':>8s}")

    gemm_o = _load(FIXTURES / "matmul_grouped.py", "bench_orig_gemm")
    gemm_v = _load(args.variant_dir / "matmul_grouped_sm90.py", "bench_var_gemm")
    sizes = [(4096, 4096, 4096)] if args.quick else [(4096, 4096, 4096), (8192, 8192, 8192), (4000, 4100, 3900)]
    for dtype in (torch.float16, torch.bfloat16):
        for m, n, k in sizes:
            a = torch.randn(m, k, device="cuda", dtype=dtype)
            b = torch.randn(k, n, device="cuda", dtype=dtype)
            try:
                t_o = _ms(lambda: gemm_o.matmul(a, b))
            except AssertionError as exc:  # the fixture's wrapper accepts the dtypes it was written for
                print(f"gemm {str(dtype).split('.')[-1]}: skipped, the fixture's wrapper refuses it ({exc or 'assert'})")
                break
            t_v = _ms(lambda: gemm_v.matmul(a, b))
            t_r = _ms(lambda: torch.matmul(a, b))
            name = f"gemm {str(dtype).split('.')[-1]} {m}x{n}x{k}"
            print(f"{name:42s} {t_o:9.3f} {t_v:11.3f} {t_r:9.3f} {t_o / t_v:8.2f} {t_r / t_v:8.2f}", flush=True)

    desc_o = _load(FIXTURES / "matmul_descriptor.py", "bench_orig_desc")
    desc_v = _load(args.variant_dir / "matmul_descriptor_sm90.py", "bench_var_desc")
    zero_bias = None
    for m, n, k in sizes:
        n, k = -(-n // 8) * 8, -(-k // 8) * 8  # TMA needs 16-byte aligned row strides
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16)
        zero_bias = torch.zeros(n, device="cuda", dtype=torch.float16)
        t_o = _ms(lambda: desc_o.matmul_bias_act(a, b, zero_bias, activation="none"))
        t_v = _ms(lambda: desc_v.matmul_bias_act(a, b, zero_bias, activation="none"))
        t_r = _ms(lambda: torch.matmul(a, b))
        name = f"descriptor gemm float16 {m}x{n}x{k}"
        print(f"{name:42s} {t_o:9.3f} {t_v:11.3f} {t_r:9.3f} {t_o / t_v:8.2f} {t_r / t_v:8.2f}", flush=True)

    attn_o = _load(FIXTURES / "attention_fwd.py", "bench_orig_attn")
    attn_v = _load(args.variant_dir / "attention_fwd_sm90.py", "bench_var_attn")
    shapes = [(64, False)] if args.quick else [(64, False), (64, True), (128, False), (128, True)]
    for head_dim, causal in shapes:
        q, k, v = (torch.randn(4, 16, 4096, head_dim, device="cuda", dtype=torch.float16) for _ in range(3))
        scale = head_dim**-0.5
        t_o = _ms(lambda: attn_o.attention(q, k, v, causal, scale))
        t_v = _ms(lambda: attn_v.attention(q, k, v, causal, scale))
        name = f"attention fwd seq 4096 d{head_dim} {'causal' if causal else 'full'}"
        print(f"{name:42s} {t_o:9.3f} {t_v:11.3f} {'-':>9s} {t_o / t_v:8.2f} {'-':>8s}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
