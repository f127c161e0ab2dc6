"""Every MODE of sm90_pointer_gemm.py vs the original pointer kernel (matmul_grouped), per autotune config, fp16."""
import importlib.util, sys, os
from pathlib import Path
import torch, triton
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import sm90_pointer_gemm as p

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path); m = importlib.util.module_from_spec(spec)
    sys.modules[name] = m; spec.loader.exec_module(m); return m

def ms(fn):
    fn(); torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")

torch.manual_seed(0)
print(torch.cuda.get_device_name(), triton.__version__, torch.__version__, flush=True)
orig = load(HERE.parents[1] / "fixtures/matmul_grouped.py", "orig_gemm")
for dtype in (torch.float16,):
    for (m, n, k) in [(4096, 4096, 4096), (8192, 8192, 8192), (4000, 4100, 3900)]:
        a = torch.randn(m, k, device="cuda", dtype=dtype); b = torch.randn(k, n, device="cuda", dtype=dtype)
        ref = torch.matmul(a, b)
        t_r = ms(lambda: torch.matmul(a, b))
        print(f"== {m}x{n}x{k} cublas {t_r:.3f}", flush=True)
        for ci, cfg in enumerate(p.CONFIGS):
            grid = (triton.cdiv(m, cfg["BLOCK_SIZE_M"]) * triton.cdiv(n, cfg["BLOCK_SIZE_N"]),)
            c = torch.empty(m, n, device="cuda", dtype=dtype)
            ns = 3 if ci == 0 else 4
            def run_o():
                orig.matmul_kernel.fn[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), num_stages=ns, **cfg)
            t_o = ms(run_o)
            print(f"  cfg{ci} original: {t_o:.3f}", flush=True)
            for mode in (1, 2, 3):
                for vec in ((8,) if mode != 3 else (4, 8)):
                    for stages in ((3,) if ci == 0 else (4,)):
                        if mode == 1 and k % 8:
                            continue
                        try:
                            out = p.matmul(a, b, cfg, mode, stages, vec)
                            err = (out.float() - ref.float()).abs().max().item()
                            t = ms(lambda: p.matmul(a, b, cfg, mode, stages, vec))
                            print(f"  cfg{ci} mode{mode} vec{vec} S{stages}: {t:.3f}  vs orig {t_o / t:.2f} vs cublas {t_r / t:.2f} err {err:.3g}", flush=True)
                        except Exception as e:
                            print(f"  cfg{ci} mode{mode} vec{vec} S{stages}: FAIL {str(e).splitlines()[-1][:200]}", flush=True)
