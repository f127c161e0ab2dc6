# Launches the original and the sm90 variant of the pointer GEMM once each after warm-up, for ncu (see RESULTS.md).
"""Launch the original and the sm90 variant of the pointer GEMM (and attention d128 full) once each, after warm-up,
so that ncu can profile exactly those launches."""
import importlib.util, sys
from pathlib import Path
import torch, triton

ROOT = Path(__file__).resolve().parents[1]


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    sys.modules[name] = m
    spec.loader.exec_module(m)
    return m


o = load(ROOT / "fixtures/matmul_grouped.py", "o")
v = load(ROOT / "fixtures/expected/sm90/matmul_grouped_sm90.py", "v")
for mod in (o, v):
    mod.matmul_kernel.configs = mod.matmul_kernel.configs[:1]  # 128x256x64, 8 warps, 3 stages
a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
for mod in (o, v):
    mod.matmul(a, b)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
o.matmul(a, b)
v.matmul(a, b)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
