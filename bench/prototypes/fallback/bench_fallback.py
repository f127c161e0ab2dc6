"""Per-config timings of the pointer GEMM's unaligned-size paths in one run (issue #4: the fallback at 4000x4100x3900).

    python bench/prototypes/fallback/bench_fallback.py orig,f_old,f_reg,f_reg2,f_vec4

orig: the fixture; f_old: the golden before the register-staged fallback (translated, unpipelined loop); f_reg: the
golden with it (tiles loaded into registers one iteration ahead, 3-slot ring); f_reg2: two iterations ahead; f_vec4:
f_reg with the cp.async ring taking 8-byte copies (rows 8-byte aligned, sizes multiples of 4). Each config launched
directly; medians of three interleaved do_bench medians; (original time / variant time).
"""
import importlib.util, sys, traceback
from pathlib import Path
import torch, triton

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
NAMES = sys.argv[1].split(",")


def load(name):
    path = ROOT / "fixtures/matmul_grouped.py" if name == "orig" else HERE / f"{name}.py"
    spec = importlib.util.spec_from_file_location("m_" + name, path)
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


cases = [((4000, 4100, 3900), torch.float16), ((4000, 4100, 3900), torch.bfloat16), ((4001, 4099, 3901), torch.float16)]
torch.manual_seed(0)
for (m, n, k), dt in cases:
    a = torch.randn(m, k, device="cuda", dtype=dt)
    b = torch.randn(k, n, device="cuda", dtype=dt)
    ref = a.float() @ b.float()
    for ci, cfg in enumerate(CFGS):
        ok = {}
        for nm in NAMES:
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
                times[nm].append(triton.testing.do_bench(lambda: gemm(mods[nm], cfg, a, b), warmup=25, rep=100,
                                                         return_mode="median"))
        med = {nm: sorted(t)[1] for nm, t in times.items()}
        row = " ".join(f"{nm}={med[nm]:.3f}({med['orig'] / med[nm]:.3f})" for nm in med)
        kw = cfg.kwargs
        print(f"{str(dt)[6:]:8s} {m}x{n}x{k} cfg{ci} {kw['BLOCK_SIZE_M']}x{kw['BLOCK_SIZE_N']}x{kw['BLOCK_SIZE_K']}: {row}",
              flush=True)
