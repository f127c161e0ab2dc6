"""GPU check: Triton's `autotune` applied by a call to a variant's launcher (aiter's `k = triton.autotune(...)(k)`, under a
module-level flag) tunes through the launcher's `run`, which keeps its choice per launch: an aligned launch of the
rmsnorm golden runs the Gluon kernel, an unaligned one (a row length not a multiple of 16, an offset view) the
source's Triton kernel, and every result matches torch.

    python tests/gpu/check_wrapped_launcher.py [--variant fixtures/expected/sm90/rmsnorm_sm90.py]
"""
import argparse
import importlib.util
import sys

import torch
import triton

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--variant", default="fixtures/expected/sm90/rmsnorm_sm90.py")
spec = importlib.util.spec_from_file_location("v", parser.parse_args().variant)
v = importlib.util.module_from_spec(spec)
spec.loader.exec_module(v)
launcher = v.rms_norm_kernel
picked = []
for name in ("gluon_kernel", "triton_kernel"):
    kernel = getattr(launcher, name)
    original = kernel.run

    def run(*args, _name=name, _original=original, **kwargs):
        picked.append(_name)
        return _original(*args, **kwargs)

    kernel.run = run
failed = False
tuned = triton.autotune(configs=[triton.Config({"BLOCK_SIZE": 1024}, num_warps=4),
                                 triton.Config({"BLOCK_SIZE": 2048}, num_warps=8)], key=["n_cols"])(launcher)
for n_cols, offset, expected in ((1024, 0, "gluon_kernel"), (1000, 0, "triton_kernel"), (1024, 1, "triton_kernel")):
    base = torch.randn(64 * n_cols + offset, device="cuda", dtype=torch.float32)
    x = base[offset:].view(64, n_cols)
    w = torch.randn(n_cols, device="cuda", dtype=torch.float32)
    y = torch.empty_like(x)
    picked.clear()
    tuned[(64,)](x, w, y, x.stride(0), y.stride(0), 64, n_cols, 1e-6)
    ref = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w
    err = (y - ref).abs().max().item()
    ok = err < 1e-4 and set(picked) == {expected}
    failed |= not ok
    print(f"n_cols={n_cols} offset={offset}: kernels run {sorted(set(picked))}, best {tuned.best_config}, "
          f"max err {err:.2e}", "PASS" if ok else "FAIL")
sys.exit(1 if failed else 0)
