"""Per-config timings of the pointer GEMM in one run: the original (orig), the sm90 golden (v0) and hand-edited copies
of the golden with other ring shapes (v1-v5, this folder; see RESULTS.md, "Pointer GEMM ring shapes").

    python bench/prototypes/ring_shapes/bench_ring_shapes.py orig,v0,v1,v2,v3,v4,v5

Each config of the autotune table is launched directly; medians of three do_bench medians, interleaved; the ratio in
parentheses is original time / variant time. Outputs are checked against an fp32 torch product first.
"""
import importlib.util, sys, traceback
from pathlib import Path
import torch, triton

HERE = Path(__file__).resolve().parent
NAMES = sys.argv[1].split(",")


ROOT = HERE.parents[2]
PATHS = {"orig": ROOT / "fixtures/matmul_grouped.py", "v0": ROOT / "fixtures/expected/sm90/matmul_grouped_sm90.py"}


def load(name):
    spec = importlib.util.spec_from_file_location("m_" + name, PATHS.get(name, HERE / f"{name}.py"))
    m = importlib.util.module_from_spec(spec)
    sys.modules["m_" + name] = m
    spec.loader.exec_module(m)
    return m


mods = {n: load(n) for n in NAMES}
CFGS = list(mods["orig"].matmul_kernel.configs)


def gemm(mod, cfg, a, b):
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty((m, n), device=a.device, dtype=torch.float16)
    mod.matmul_kernel.configs = [cfg]
    grid = lambda META: (triton.cdiv(m, META["BLOCK_SIZE_M"]) * triton.cdiv(n, META["BLOCK_SIZE_N"]),)
    mod.matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    return c


cases = [((4096, 4096, 4096), torch.float16), ((8192, 8192, 8192), torch.float16), ((4096, 4096, 4096), torch.bfloat16),
         ((8192, 8192, 8192), torch.bfloat16), ((4000, 4100, 3900), torch.float16)]
torch.manual_seed(0)
for (m, n, k), dt in cases:
    a = torch.randn(m, k, device="cuda", dtype=dt)
    b = torch.randn(k, n, device="cuda", dtype=dt)
    ref = (a.float() @ b.float())
    for ci, cfg in enumerate(CFGS):
        names = NAMES if (m, n, k) != (4000, 4100, 3900) else [x for x in NAMES if x in ("orig", "old", "v0")]
        ok = {}
        for nm in names:
            try:
                c = gemm(mods[nm], cfg, a, b)
                torch.cuda.synchronize()
                err = (c.float() - ref).abs().max().item()
                ok[nm] = err < 1.0 + 0.01 * ref.abs().max().item()
                if not ok[nm]:
                    print("MISMATCH", nm, err)
            except Exception:
                traceback.print_exc(limit=2)
        times = {nm: [] for nm in ok}
        for _ in range(3):
            for nm in ok:
                times[nm].append(triton.testing.do_bench(lambda: gemm(mods[nm], cfg, a, b), warmup=25, rep=100, return_mode="median"))
        med = {nm: sorted(t)[1] for nm, t in times.items()}
        row = " ".join(f"{nm}={med[nm]:.3f}({med['orig'] / med[nm]:.3f})" for nm in med)
        print(f"{str(dt)[6:]:8s} {m}x{n}x{k} cfg{ci} {cfg.kwargs['BLOCK_SIZE_M']}x{cfg.kwargs['BLOCK_SIZE_N']}x{cfg.kwargs['BLOCK_SIZE_K']}: {row}", flush=True)
