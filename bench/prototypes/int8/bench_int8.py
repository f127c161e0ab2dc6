"""int8 GEMM (matmul_int8): the original, the sm90 variant before the register-staged ring (i_old: translated loop,
one wgmma waited for at once per iteration) and the golden (register-staged 3-slot ring, B stored K-major), each
autotune config launched directly, in one run.

    python bench/prototypes/int8/bench_int8.py
"""
import importlib.util, sys
from pathlib import Path
import torch, triton

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
PATHS = {"orig": ROOT / "fixtures/matmul_int8.py", "i_old": HERE / "i_old.py",
         "golden": ROOT / "fixtures/expected/sm90/matmul_int8_sm90.py"}


def load(name):
    spec = importlib.util.spec_from_file_location("m_" + name, PATHS[name])
    m = importlib.util.module_from_spec(spec)
    sys.modules["m_" + name] = m
    spec.loader.exec_module(m)
    return m


mods = {n: load(n) for n in PATHS}
CFGS = list(mods["orig"].int8_matmul_scaled_kernel.configs)
torch.manual_seed(0)
for m, n, k in [(4096, 4096, 4096), (8192, 8192, 8192), (4000, 4100, 3900)]:
    a = torch.randint(-128, 127, (m, k), device="cuda", dtype=torch.int8)
    b = torch.randint(-128, 127, (k, n), device="cuda", dtype=torch.int8)
    sa = torch.rand(m, device="cuda")
    sb = torch.rand(n, device="cuda")
    for ci, cfg in enumerate(CFGS):
        outs, med = {}, {}
        for nm, mod in mods.items():
            mod.int8_matmul_scaled_kernel.configs = [cfg]
            mod.int8_matmul_scaled_kernel.cache.clear()
            outs[nm] = mod.int8_matmul_scaled(a, b, sa, sb)
        same = all(torch.equal(outs["orig"], o) for o in outs.values())
        times = {nm: [] for nm in mods}
        for _ in range(3):
            for nm, mod in mods.items():
                times[nm].append(triton.testing.do_bench(lambda: mod.int8_matmul_scaled(a, b, sa, sb), warmup=25,
                                                         rep=100, return_mode="median"))
        med = {nm: sorted(t)[1] for nm, t in times.items()}
        row = " ".join(f"{nm}={med[nm]:.3f}({med['orig'] / med[nm]:.2f})" for nm in med)
        print(f"int8 {m}x{n}x{k} cfg{ci}: {row} {'equal' if same else 'DIFFERENT'}", flush=True)
