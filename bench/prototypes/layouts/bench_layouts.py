"""Layout experiment (session 6): memory-bound translated kernels measured slower than their originals
(column_minmax at a ragged width, the histogram of lang_shapes). Times the original against the variant with other
explicit layouts substituted for one declaration, in one run.

    python bench/prototypes/layouts/bench_layouts.py VARIANT_DIR
"""
import importlib.util
import re
import sys
import tempfile
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[3]
VDIR = Path(sys.argv[1])


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def patched(src: Path, decl: str, layout: str, tag: str):
    text = src.read_text()
    new, n = re.subn(rf"{decl}: gl.constexpr = [^\n]*", f"{decl}: gl.constexpr = {layout}", text)
    assert n == 1, (decl, n)
    out = Path(tempfile.mkdtemp()) / f"{src.stem}_{tag}.py"
    out.write_text(new)
    return load(out, f"{src.stem}_{tag}")


def t(fn):
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


dev = "cuda"
print(torch.cuda.get_device_name(), triton.__version__, flush=True)
orig = load(ROOT / "fixtures" / "column_minmax.py", "cm_orig")
layouts = {
    "default": None,
    "v8_w_m": "gl.BlockedLayout([1, 8], [2, 16], [gl.num_warps(), 1], [1, 0])",
    "v1_w_m": "gl.BlockedLayout([1, 1], [1, 32], [gl.num_warps(), 1], [1, 0])",
    "v2_w_m": "gl.BlockedLayout([1, 2], [1, 32], [gl.num_warps(), 1], [1, 0])",
    "v4_w_n": "gl.BlockedLayout([1, 4], [4, 8], [1, gl.num_warps()], [1, 0])",
    "v8_w_n": "gl.BlockedLayout([1, 8], [8, 4], [1, gl.num_warps()], [1, 0])",
}
for M, N in ((8192, 4100), (8192, 4096), (3000, 1100)):
    x = torch.randn(M, N, device=dev, dtype=torch.float16)
    ref = orig.column_minmax(x)
    base = t(lambda: orig.column_minmax(x))
    line = f"column_minmax {M}x{N}: orig {base*1e3:.1f}us"
    for tag, layout in layouts.items():
        mod = load(VDIR / "column_minmax_sm90.py", "cm_default") if layout is None else patched(
            VDIR / "column_minmax_sm90.py", "mask_layout", layout, tag)
        got = mod.column_minmax(x)
        ok = all(torch.equal(a, b) for a, b in zip(got, ref))
        ms = t(lambda: mod.column_minmax(x))
        line += f" | {tag} {ms*1e3:.1f}us x{base/ms:.2f}{'' if ok else ' WRONG'}"
    print(line, flush=True)

orig = load(ROOT / "fixtures" / "lang_shapes.py", "ls_orig")
hl = {
    "default": None,
    "h_v1": "gl.BlockedLayout([1], [32], [gl.num_warps()], [0])",
    "h_v2": "gl.BlockedLayout([2], [32], [gl.num_warps()], [0])",
    "h_v4": "gl.BlockedLayout([4], [32], [gl.num_warps()], [0])",
}
for n in (1 << 24, 1_000_003):
    ids = torch.randint(0, 64, (n,), device=dev, dtype=torch.int32)
    ref = orig.bucket_histogram(ids)
    base = t(lambda: orig.bucket_histogram(ids))
    line = f"bucket_histogram n={n}: orig {base*1e3:.1f}us"
    for tag, layout in hl.items():
        mod = load(VDIR / "lang_shapes_sm90.py", "ls_default") if layout is None else patched(
            VDIR / "lang_shapes_sm90.py", "counts_layout", layout, tag)
        got = mod.bucket_histogram(ids)
        ok = torch.equal(got, ref)
        ms = t(lambda: mod.bucket_histogram(ids))
        line += f" | {tag} {ms*1e3:.1f}us x{base/ms:.2f}{'' if ok else ' WRONG'}"
    print(line, flush=True)
