"""scripts/corpus_eval.py: the report over a directory of Triton files (crashes, invalid Python, statuses, reasons)."""

from __future__ import annotations

import importlib.util
import json
import textwrap
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "corpus_eval.py"
spec = importlib.util.spec_from_file_location("corpus_eval", SCRIPT)
corpus_eval = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
spec.loader.exec_module(corpus_eval)  # type: ignore[union-attr]

KERNELS = textwrap.dedent('''\
    import triton
    import triton.language as tl


    @triton.jit
    def double(x_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 2)


    @triton.jit
    def gate(x_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.cat(tl.load(x_ptr + offs), tl.load(x_ptr + offs), can_reorder=True))
    ''')


def test_report_counts_statuses_and_reasons(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "k.py").write_text(KERNELS, encoding="utf-8")
    (tmp_path / "plain.py").write_text("x = 1\n", encoding="utf-8")  # no kernels: not counted
    (tmp_path / "broken.py").write_text("@triton.jit\ndef f(:\n", encoding="utf-8")  # bad input, not a crash
    code = corpus_eval.main([str(tmp_path), "-t", "gfx942", "-t", "sm90", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["files"] == 2 and report["functions"] == 4
    assert report["counts"]["translated"] == 2 and report["counts"]["kept as Triton"] == 2
    assert report["counts"]["bad input"] == 1
    assert report["crashes"] == [] and report["invalid_python"] == [] and report["undefined_names"] == []
    assert report["refusal_codes"] == {"TT011": 2}
    assert report["top_reasons"][0][1] == 2 and report["top_reasons"][0][0].startswith("TT011")
    assert report["kept_as_triton_pct"] == 50.0
    assert report["kept_why"] == {"refused": 2} and report["refused_pct"] == 50.0
    assert report["per_directory"] == {str(tmp_path): {"functions": 4, "refused": 2, "refused_pct": 50.0}}


def test_per_repository_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each directory given (a repository) is counted apart: its functions x targets and those refused."""
    for repo, text in (("one", KERNELS), ("two", KERNELS.split("@triton.jit\ndef gate")[0])):
        (tmp_path / repo).mkdir()
        (tmp_path / repo / "k.py").write_text(text, encoding="utf-8")
    assert corpus_eval.main([str(tmp_path / "one"), str(tmp_path / "two"), "-t", "gfx950"]) == 0
    out = capsys.readouterr().out
    assert f"  {tmp_path / 'one'}: functions x targets 2, refused 1 (50.0%)" in out
    assert f"  {tmp_path / 'two'}: functions x targets 1, refused 0 (0.0%)" in out


def test_text_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "k.py").write_text(KERNELS, encoding="utf-8")
    assert corpus_eval.main([str(tmp_path), "-t", "gfx950"]) == 0
    out = capsys.readouterr().out
    assert "crashes 0, invalid Python 0" in out and "kept as Triton 1 (50.0%)" in out
    assert "kept as Triton because: refused 1 (refused: 50.0% of functions x targets)" in out


def test_kernels_triton_itself_rejects_are_counted_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A kernel that indexes a tensor (`x[0]`, another backend's dialect) is kept, as a source Triton's compiler
    rejects too: not one of the tool's own refusals (`refused_pct` leaves it out)."""
    (tmp_path / "k.py").write_text(KERNELS + textwrap.dedent('''

        @triton.jit
        def first(x_ptr, BLOCK: tl.constexpr):
            x = tl.load(x_ptr + tl.arange(0, BLOCK))
            tl.store(x_ptr, x[0])
        '''), encoding="utf-8")
    assert corpus_eval.main([str(tmp_path), "-t", "gfx950", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["functions"] == 3
    assert report["kept_why"] == {"refused": 1, "source not GPU Triton": 1} and report["refused_pct"] == 33.3


def test_every_refusal_is_listed_with_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--refusals OUT`: each refusal with its file, function, code, line and message (what to fix first)."""
    (tmp_path / "k.py").write_text(KERNELS, encoding="utf-8")
    out = tmp_path / "refusals.json"
    assert corpus_eval.main([str(tmp_path), "-t", "gfx950", "--json", "--refusals", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    listed = json.loads(out.read_text(encoding="utf-8"))
    assert "refusals" not in report and len(listed) == sum(report["refusal_codes"].values()) >= 1
    row = listed[0]
    assert row["file"] == str(tmp_path / "k.py") and row["target"] == "gfx950" and row["function"] == "gate"
    assert row["code"].startswith("TT01") and "cat" in row["message"]
    assert "tl.cat(" in KERNELS.splitlines()[row["line"] - 1]  # the line that holds the construct
