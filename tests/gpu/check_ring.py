"""Correctness of the sm90 pointer GEMMs' cp.async ring (HopperCpAsyncPipeline) on a GPU.

The variants pick one of three loops at run time: the ring of 16-byte copies (rows and sizes multiples of 8 elements),
the ring of 8-byte copies (multiples of 4 only: check_fixtures.py's K = 700, 4100 take this one) and the translated
loop (odd rows or sizes). These sizes take each: 1096x712 and the like the 16-byte ring, 1100x708 the 8-byte ring,
1097x713 the translated loop. Each autotune config separately; exit status 1 if any case fails.

    python tests/gpu/check_ring.py --variant-dir fixtures/expected/sm90
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--variant-dir", type=Path, default=ROOT / "fixtures" / "expected" / "sm90")
VARIANTS = parser.parse_args().variant_dir


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def pair(fixture):
    """The original fixture module and its sm90 variant."""
    return (load(ROOT / "fixtures" / f"{fixture}.py", f"o_{fixture}"),
            load(VARIANTS / f"{fixture}_sm90.py", f"v_{fixture}"))


def report(name, out_v, out_o, ref):
    d = (out_v.float() - out_o.float()).abs().max().item()
    r = (out_o.float() - ref.float()).abs().max().item()
    dr = (out_v.float() - ref.float()).abs().max().item()
    ok = dr <= max(2 * r, 1e-2 * ref.float().abs().max().item())
    print(f"{name:55s} variant-vs-orig={d:.3e} orig-vs-torch={r:.3e} variant-vs-torch={dr:.3e} {'PASS' if ok else 'FAIL'}")
    return ok


torch.manual_seed(0)
ok = True
o, v = pair("matmul_grouped")
for (M, N, K) in [(1000, 1096, 712), (512, 512, 512), (257, 1032, 4104), (1000, 1100, 708), (999, 1097, 713)]:
    for dt in (torch.float16,):
        a = torch.randn(M, K, device="cuda", dtype=dt)
        b = torch.randn(K, N, device="cuda", dtype=dt)
        for i, cfg in enumerate(list(v.matmul_kernel.configs)):
            v.matmul_kernel.configs = [cfg]
            o.matmul_kernel.configs = [cfg]
            v.matmul_kernel.cache.clear()
            o.matmul_kernel.cache.clear()
            ok &= report(f"matmul_grouped@cfg{i} {M}x{N}x{K}", v.matmul(a, b), o.matmul(a, b), a.float() @ b.float())
    o, v = pair("matmul_grouped")  # fresh modules: all configs again
o, v = pair("matmul_splitk")
for (M, N, K) in [(250, 336, 4104), (512, 512, 4096), (250, 332, 4100), (251, 333, 4099)]:
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    ok &= report(f"matmul_splitk {M}x{N}x{K}", v.matmul_splitk(a, b), o.matmul_splitk(a, b), a.float() @ b.float())
o, v = pair("moe_gather_gemm")
for (T, E, M, N, K) in [(2000, 4, 600, 1096, 712), (1024, 2, 256, 512, 512), (2000, 4, 600, 1100, 708),
                        (999, 3, 301, 1097, 713)]:
    a = torch.randn(T, K, device="cuda", dtype=torch.float16)
    b = torch.randn(E, K, N, device="cuda", dtype=torch.float16)
    idx = torch.randint(0, T, (E, M), device="cuda", dtype=torch.int32); idx[:, -7:] = -1
    out_o = o.gather_gemm(a, idx, b)
    rows = a[idx.clamp(min=0).long()].float() * (idx >= 0)[..., None]
    ref = torch.bmm(rows, b.float())
    ok &= report(f"moe_gather_gemm {T}x{E}x{M}x{N}x{K}", v.gather_gemm(a, idx, b), out_o, ref)
print("ALL PASS" if ok else "SOME FAIL")
sys.exit(0 if ok else 1)
