"""scripts/coverage.py: per repository and target, the dot-loop kernels the tool pipelines and why the rest are kept."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "coverage.py"
spec = importlib.util.spec_from_file_location("coverage_script", SCRIPT)
coverage = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
spec.loader.exec_module(coverage)  # type: ignore[union-attr]


TWO_DOTS = """import triton
import triton.language as tl


@triton.jit
def k(q_ptr, k_ptr, o_ptr, N, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    m = tl.arange(0, BM)
    d = tl.arange(0, D)
    q = tl.load(q_ptr + m[:, None] * D + d[None, :])
    acc = tl.zeros((BM, D), dtype=tl.float32)
    for start in range(0, N, BN):
        n = start + tl.arange(0, BN)
        kt = tl.load(k_ptr + n[None, :] * D + d[:, None])
        s = tl.dot(q, kt)
        p = tl.exp(s - tl.max(s, axis=0)[None, :])
        acc += tl.dot(p.to(tl.float16), tl.trans(kt))
    tl.store(o_ptr + m[:, None] * D + d[None, :], acc.to(tl.float16))
"""


def test_counts_dot_loop_kernels_per_repository(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "repo"
    (repo / "ops").mkdir(parents=True)
    shutil.copy(ROOT / "fixtures" / "matmul_grouped.py", repo / "ops" / "mm.py")  # pipelined for gfx950
    shutil.copy(ROOT / "fixtures" / "softmax.py", repo / "ops" / "softmax.py")  # no dot: not counted
    (repo / "ops" / "block.py").write_text(  # a kernel under a module-level `if`: translated where it stands
        "import triton\nimport triton.language as tl\n\nif True:\n    @triton.jit\n    def k(x):\n"
        "        for i in range(4):\n            tl.dot(x, x)\n", encoding="utf-8")
    (repo / "ops" / "nested.py").write_text(  # a kernel in a block in a block: kept as written (TT007), and counted
        "import triton\nimport triton.language as tl\n\nif True:\n    if True:\n        @triton.jit\n"
        "        def k(x):\n            for i in range(4):\n                tl.dot(x, x)\n", encoding="utf-8")
    (repo / "ops" / "nested_once.py").write_text(  # one dot, in no loop: not a dot-loop kernel, not counted
        "import triton\nimport triton.language as tl\n\nif True:\n    @triton.jit\n    def k(x):\n"
        "        tl.dot(x, x)\n", encoding="utf-8")
    assert coverage.main([str(repo), "-t", "gfx950", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    row = report["table"]["repo"]["gfx950"]
    assert row["dot-loop kernels"] == 3 and row["pipelined"] == 1 and row["kept as Triton"] == 2
    assert "file rejected" not in row
    reasons = [reason for reason, _ in report["reasons"]["gfx950"]]
    assert sum(reason.startswith("TT007 `…` is defined inside the `…` block at line N") for reason in reasons) == 1
    kept = {Path(path).name: reason for path, _, reason in report["kept"]["gfx950"]}
    assert "TT007" not in kept["block.py"] and "defined inside" not in kept["block.py"]  # (the engine's own reason)


def test_table_names_reasons_without_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    (repo / "k.py").write_text(TWO_DOTS, encoding="utf-8")
    assert coverage.main([str(repo), "-t", "gfx950"]) == 0
    out = capsys.readouterr().out
    # kept as Triton, with the measurement of the form that would take it: covered, not pipelined
    assert "| r | 0 / 1 (1) |" in out
    # the construct, without the line or the names (the column reduction `tl.max(s, axis=0)` between the chained
    # dots crosses warps, so only one warp group could run the ring; V is the K tile itself, `tl.trans(kt)`: an
    # attention loop)
    assert "reduction `…` at line N inside the attention loop" in out and "line 1" not in out


def test_kernels_whose_source_triton_rejects_are_counted_apart(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "old"
    repo.mkdir()
    # Triton's older TMA API, removed before Triton 3.6: the source compiles under no Triton the tool serves
    (repo / "tma.py").write_text(TWO_DOTS.replace(
        "        kt = tl.load(k_ptr + n[None, :] * D + d[:, None])\n",
        "        kt = tl._experimental_descriptor_load(k_ptr, [start, 0], [D, BN], tl.float16)\n"), encoding="utf-8")
    shutil.copy(ROOT / "fixtures" / "matmul_grouped.py", repo / "mm.py")  # pipelined for gfx950
    assert coverage.main([str(repo), "-t", "gfx950", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["table"]["old"]["gfx950"]
    assert row["dot-loop kernels"] == 2 and row["pipelined"] == 1 and row["source not Triton"] == 1
    assert coverage.main([str(repo), "-t", "gfx950"]) == 0
    assert "| **all Triton kernels** | 1 / 1 (100%; covered 100%; 1 not Triton) |" in capsys.readouterr().out


def test_kernels_pipelined_for_some_launches_only_are_counted_apart(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The attention ring runs the launches that set the causal flag (TT043): pipelined, at some launches only; a
    GEMM whose launcher tests alignment alone is not counted so."""
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(ROOT / "fixtures" / "attention_fwd.py", repo / "attention.py")
    shutil.copy(ROOT / "fixtures" / "matmul_grouped.py", repo / "mm.py")
    assert coverage.main([str(repo), "-t", "sm90", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["table"]["repo"]["sm90"]
    assert row["pipelined"] == 2 and row["pipelined, some launches"] == 1


def test_a_kernel_is_covered_by_measurements_only_where_each_of_its_loops_names_one() -> None:
    """A kept kernel counts as covered where the reason of every loop (every unswitched copy) it keeps names a
    measurement: one measured copy beside an unmeasured one is not enough."""
    measured = coverage.measured
    one = ("the loop at line 5 is not pipelined for gfx950 (a ring that measured 0.9x Triton's: bench/RESULTS.md); "
           "Triton's compiler pipelines it")
    two = ("the loop at line 5 is not pipelined for gfx950 (a dot in a branch on a run-time value); the loop at line 5 "
           "is not pipelined for gfx950 (a ring that measured 0.9x Triton's: bench/RESULTS.md); Triton's compiler "
           "pipelines it")
    assert measured(one) and not measured(two)
    assert measured(two.replace("a dot in a branch on a run-time value", "measured 1.2x"))
