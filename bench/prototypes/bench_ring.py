"""cp.async ring prototype (MODE 1) vs the original pointer kernel, per config, fp16 and bf16, aligned sizes."""
import importlib.util, sys
from pathlib import Path
import torch, triton
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import sm90_pointer_gemm as p

spec = importlib.util.spec_from_file_location("orig_gemm", HERE.parents[1] / "fixtures/matmul_grouped.py")
orig = importlib.util.module_from_spec(spec); spec.loader.exec_module(orig)

def ms(fn):
    fn(); torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")

torch.manual_seed(0)
for dtype in (torch.float16, torch.bfloat16):
    for (m, n, k) in [(4096, 4096, 4096), (8192, 8192, 8192)]:
        a = torch.randn(m, k, device="cuda", dtype=dtype); b = torch.randn(k, n, device="cuda", dtype=dtype)
        c = torch.empty(m, n, device="cuda", dtype=torch.float16)
        t_r = ms(lambda: torch.matmul(a, b))
        for ci, cfg in enumerate(p.CONFIGS):
            ns = 3 if ci == 0 else 4
            grid = (triton.cdiv(m, cfg["BLOCK_SIZE_M"]) * triton.cdiv(n, cfg["BLOCK_SIZE_N"]),)
            t_o = ms(lambda: orig.matmul_kernel.fn[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0),
                                                          b.stride(1), c.stride(0), c.stride(1), num_stages=ns, **cfg))
            t_v = ms(lambda: p.matmul(a, b, cfg, 1, ns, 8))
            print(f"ring {str(dtype)[6:]} {m}^3 cfg{ci}: orig {t_o:.3f} ring {t_v:.3f} cublas {t_r:.3f} "
                  f"vs orig {t_o / t_v:.2f} vs cublas {t_r / t_v:.2f}", flush=True)
