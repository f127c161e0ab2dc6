"""`transpile.passes.tile_loops`: a persistent GEMM's one loop over tiles x K steps (a counter that wraps at the K
steps, branches on its first and last value) written as a tile loop around its K loop; the rewritten Triton run by the
interpreter gives the source's outputs bit for bit; loops that are not exactly that form are left as written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from transpile.discover import discover
from transpile.passes.tile_loops import NOTE, split_tile_loops
from transpile.source import parse_source

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FLAT = (FIXTURES / "suite_gemm_persistent_flat.py").read_text(encoding="utf-8")


def rewritten(text: str) -> str | None:
    source = parse_source(text, "k.py")
    result = split_tile_loops(source, discover(source))
    return None if result is None else result[0]


def test_the_flat_loop_becomes_a_tile_loop_around_the_k_loop() -> None:
    text = rewritten(FLAT)
    assert text is not None
    kernel = text.split("def flat_persistent_gemm_kernel")[1].split("def matmul_persistent_flat")[0]
    lines = [line.strip() for line in kernel.splitlines() if line.strip()]
    assert "kk = -1" not in lines  # (the counter is the K loop's variable now)
    start = lines.index(NOTE)
    assert lines[start + 1:start + 4] == ["if k_steps > 0:", "for _ in range(0, my_tiles):", "tile += NUM_SMS"]
    # the new tile's statements, then the K loop, then the tile's epilogue, each once, in the source's order
    k_loop = lines.index("for kk in range(0, k_steps):")
    assert lines[k_loop - 1] == "cols = tl.max_contiguous(tl.multiple_of(cols, BLOCK_N), BLOCK_N)"
    assert lines[k_loop + 1] == "offs_k = kk * BLOCK_K + offs_k0"
    assert lines[-1] == "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)"
    assert "kk = tl.where(kk == k_steps - 1, 0, kk + 1)" not in kernel and "if kk ==" not in kernel
    indent = {line.strip(): len(line) - len(line.lstrip()) for line in kernel.splitlines() if line.strip()}
    assert indent["acc = tl.dot(a, b, acc)"] == indent["tile += NUM_SMS"] + 4
    assert rewritten(text) is None  # idempotent: nothing is left to split


def test_the_modulo_spelling_of_the_counter() -> None:
    text = rewritten(FLAT.replace("kk = tl.where(kk == k_steps - 1, 0, kk + 1)", "kk = (kk + 1) % k_steps"))
    assert text is not None and "for kk in range(0, k_steps):" in text


@pytest.mark.parametrize("change", [
    # the counter read after the loop (the nested loops leave it at another value)
    ("", "", "            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n",
     "            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n    tl.store(c_ptr, kk)\n"),
    # the loop's variable read in the loop
    ("for _ in range(0, k_steps * my_tiles):", "for t in range(0, k_steps * my_tiles):",
     "        offs_k = kk * BLOCK_K + offs_k0\n", "        offs_k = kk * BLOCK_K + offs_k0 + t * 0\n"),
    # the counter starting elsewhere than at -1
    ("    kk = -1\n", "    kk = 0\n", "", ""),
    # a tile's last step with an `else`
    ("            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n",
     "            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n        else:\n            acc = acc * 1.0\n",
     "", ""),
    # a bound that is not the counter's wrap times another factor
    ("for _ in range(0, k_steps * my_tiles):", "for _ in range(0, (k_steps + 1) * my_tiles):", "", ""),
])
def test_other_loops_are_left_as_written(change: tuple[str, str, str, str]) -> None:
    text = FLAT
    for old, new in (change[:2], change[2:]):
        if old:
            assert old in text
            text = text.replace(old, new)
    assert text != FLAT and rewritten(text) is None


RUN = """
import importlib.util, sys
import torch

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

source, rewritten = load(sys.argv[1], "source"), load(sys.argv[2], "rewritten")
for m, n, k in ((150, 130, 100), (300, 260, 64), (64, 64, 0)):
    torch.manual_seed(m)
    a, b = torch.randn(m, k, dtype=torch.float16), torch.randn(k, n, dtype=torch.float16)
    expected, got = source.matmul_persistent_flat(a, b), rewritten.matmul_persistent_flat(a, b)
    if k == 0:  # (no K step: neither writes the output)
        continue
    assert torch.equal(expected, got), (m, n, k, (expected.float() - got.float()).abs().max())
print("SAME")
"""


@pytest.mark.slow
def test_the_rewritten_kernel_computes_what_the_source_computes(tmp_path: Path) -> None:
    (tmp_path / "source.py").write_text(FLAT)
    (tmp_path / "rewritten.py").write_text(rewritten(FLAT) or "")
    (tmp_path / "run.py").write_text(RUN)
    result = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path / "source.py"),
                             str(tmp_path / "rewritten.py")], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TRITON_INTERPRET": "1"})
    assert result.returncode == 0 and "SAME" in result.stdout, result.stderr[-3000:]
