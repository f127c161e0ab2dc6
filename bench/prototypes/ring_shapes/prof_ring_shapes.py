"""One launch each (after warm-up) of orig, v0, v1, v2 at fp16 4096^3, config 128x256x64, for ncu."""
import sys, torch, triton
from pathlib import Path
import importlib.util
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
PATHS = {"orig": ROOT / "fixtures/matmul_grouped.py", "v0": ROOT / "fixtures/expected/sm90/matmul_grouped_sm90.py"}
def load(name):
    spec = importlib.util.spec_from_file_location("m_" + name, PATHS.get(name, HERE / f"{name}.py"))
    m = importlib.util.module_from_spec(spec); sys.modules["m_" + name] = m; spec.loader.exec_module(m); return m
mods = [load(n) for n in ("orig", "v0", "v1", "v2")]
a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
for m in mods:
    m.matmul_kernel.configs = m.matmul_kernel.configs[:1]
    m.matmul(a, b)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for m in mods:
    m.matmul(a, b)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
