"""The variants are formatted (transpile.formatting): every golden is what `ruff format` and `black` leave alone at
the repository's line length (88, the default: this repository configures neither formatter); a project's own line
length and settings (`[tool.black]`, `[tool.ruff]`, ruff.toml) are used; without a working ruff the variants are
written unformatted with a TT050 note. A variant that a formatter at other settings rewrote is still current
(same_code); edits of code and comments are not."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

import black
import pytest

from conftest import EXPECTED_DIR, ROOT
from transpile.diagnostics import TranspileError
from transpile.engine import format_results, translate_source
from transpile.formatting import (
    DEFAULT_LINE_LENGTH,
    FormatError,
    FormatStyle,
    format_texts,
    project_style,
    same_code,
    settle_with_black,
)
from transpile.targets import get_target

GOLDENS = sorted(EXPECTED_DIR.glob("*/*.py"))


def _ruff_check(path: Path, line_length: int, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ruff", "format", "--check", "--isolated", "--no-cache",
                           "--line-length", str(line_length), *options, str(path)], capture_output=True, text=True)


def _black_check(path: Path, line_length: int, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BLACK_CACHE_DIR": str(tmp_path / "black-cache")}  # a fresh cache: every file is checked
    return subprocess.run([sys.executable, "-m", "black", "--check", "-l", str(line_length), str(path)],
                          capture_output=True, text=True, env=env)


def _long_code_lines(text: str, line_length: int) -> list[str]:
    """Lines longer than `line_length` that a formatter could have split: not a comment, not inside a string (which
    formatters leave as they are), not under `# fmt: skip`."""
    exempt: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT or (token.type == tokenize.STRING and token.start[0] != token.end[0]):
            exempt.update(range(token.start[0], token.end[0] + 1))
        elif token.type == tokenize.STRING and len(token.string) > line_length // 2:
            exempt.add(token.start[0])  # a long string literal: black and ruff do not split strings
    return [line for number, line in enumerate(text.splitlines(), 1)
            if len(line) > line_length and number not in exempt]


# --------------------------------------------------------------------------------------------------------------------
# The goldens


def test_the_repository_formats_at_the_default_line_length() -> None:
    assert project_style(ROOT) == FormatStyle(DEFAULT_LINE_LENGTH) == FormatStyle(88)


def test_every_golden_is_formatted_by_ruff() -> None:
    result = _ruff_check(EXPECTED_DIR, 88)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(GOLDENS)} files already formatted" in result.stdout
    texts = [path.read_text(encoding="utf-8") for path in GOLDENS]
    assert format_texts(texts) == texts  # and the tool's own formatting (ruff, then black's layouts) is idempotent


def test_every_golden_is_stable_under_black(tmp_path: Path) -> None:
    """Black at the same line length leaves every golden alone (where black lays out ruff's output otherwise,
    transpile.formatting settles it: docstring quotes, assert messages, pragma comments)."""
    result = _black_check(EXPECTED_DIR, 88, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert any("fmt: skip" in path.read_text(encoding="utf-8") for path in GOLDENS)  # the assert messages


def test_every_golden_fits_the_line_length() -> None:
    long = {path.name: lines for path in GOLDENS if (lines := _long_code_lines(path.read_text("utf-8"), 88))}
    assert not long


def test_every_golden_reformatted_at_other_settings_is_the_same_code(tmp_path: Path) -> None:
    """A ruff hook at another line length and quote style rewrites the layout, not the code: still current."""
    copy = tmp_path / "expected"
    shutil.copytree(EXPECTED_DIR, copy)
    subprocess.run([sys.executable, "-m", "ruff", "format", "-q", "--isolated", "--no-cache", "--line-length", "120",
                    "--config", "format.quote-style='single'", str(copy)], check=True)
    changed = 0
    for path in GOLDENS:
        text, formatted = path.read_text(encoding="utf-8"), (copy / path.relative_to(EXPECTED_DIR)).read_text("utf-8")
        changed += formatted != text
        assert same_code(formatted, text), path
    assert changed > len(GOLDENS) // 2  # the comparison is not trivially byte equality


@pytest.mark.parametrize("name", ["attention_fwd_gfx950", "matmul_descriptor_sm90", "canon_linear_desc_bias_gfx942",
                                  "suite_gemm_bias_gelu_gfx1250"])
def test_goldens_reformatted_by_black_at_another_length_are_the_same_code(name: str) -> None:
    (path,) = EXPECTED_DIR.glob(f"*/{name}.py")
    text = path.read_text(encoding="utf-8")
    formatted = black.format_str(text, mode=black.Mode(line_length=120))
    assert formatted != text and same_code(formatted, text)


def test_the_unformatted_translation_is_the_same_code_as_the_golden() -> None:
    text = (ROOT / "fixtures" / "matmul_descriptor.py").read_text(encoding="utf-8")
    golden = (EXPECTED_DIR / "sm90" / "matmul_descriptor_sm90.py").read_text(encoding="utf-8")
    raw = translate_source(text, "fixtures/matmul_descriptor.py", get_target("sm90"),
                           "transpile fixtures/matmul_descriptor.py --target sm90 --out-dir fixtures/expected/sm90 "
                           "--source-root fixtures")
    assert raw.text != golden and same_code(raw.text, golden)
    assert format_results([raw]) is None and raw.text == golden


def test_edits_are_not_formatting() -> None:
    text = (EXPECTED_DIR / "sm90" / "vector_add_sm90.py").read_text(encoding="utf-8")
    assert same_code(text, text)
    assert not same_code(text.replace("BLOCK", "TILE", 1), text)  # code
    first_comment = text.index("# Generated by")
    assert not same_code(text[:first_comment] + "# Hand-edited\n" + text[first_comment:], text)  # a comment
    assert not same_code(text.replace("# Guard the last block", "# Guard the first block"), text)
    assert not same_code(text + "\nx = 1\n", text)
    assert not same_code("def f(:\n", text)  # not Python


# --------------------------------------------------------------------------------------------------------------------
# The project's settings


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def test_project_style_reads_ruff_then_black(tmp_path: Path) -> None:
    black_only = _project(tmp_path / "black", {"pyproject.toml": "[tool.black]\nline-length = 120\n"})
    assert project_style(black_only) == FormatStyle(120)
    snake = _project(tmp_path / "snake", {"pyproject.toml": "[tool.black]\nline_length = 99\n"
                                                            "skip-string-normalization = true\n"})
    assert project_style(snake) == FormatStyle(99, (("format.quote-style", "preserve"),))
    ruff = _project(tmp_path / "ruff", {"pyproject.toml": "[tool.ruff]\nline-length = 100\n[tool.ruff.format]\n"
                                                          "quote-style = 'single'\n[tool.black]\nline-length = 120\n"})
    assert project_style(ruff) == FormatStyle(100, (("format.quote-style", "single"),))
    ruff_toml = _project(tmp_path / "ruff_toml", {"ruff.toml": "line-length = 110\n",
                                                  "pyproject.toml": "[tool.ruff]\nline-length = 100\n"})
    assert project_style(ruff_toml).line_length == 110
    dot = _project(tmp_path / "dot", {".ruff.toml": "line-length = 111\n", "ruff.toml": "line-length = 110\n"})
    assert project_style(dot).line_length == 111
    lint_only = _project(tmp_path / "lint_only", {"pyproject.toml": "[tool.ruff.lint]\nselect = ['E']\n"
                                                                    "[tool.black]\nline-length = 120\n"})
    assert project_style(lint_only).line_length == 120  # ruff sets no line length: black's
    parent = _project(tmp_path / "parent", {"ruff.toml": "extend = 'base/ruff.toml'\n[format]\nindent-style = 'tab'\n",
                                            "base/ruff.toml": "line-length = 101\n",
                                            "pkg/pyproject.toml": "[project]\nname = 'pkg'\n"})
    style = project_style(parent / "pkg")  # the configuration above the project root, and the one it extends
    assert style == FormatStyle(101, (("format.indent-style", "tab"),)) and not style.black_compatible
    assert project_style(_project(tmp_path / "none", {"pyproject.toml": "[project]\nname = 'x'\n"})) == FormatStyle()


@pytest.mark.parametrize("files", [{"pyproject.toml": "[tool.black]\nline-length = 'wide'\n"},
                                   {"ruff.toml": "line-length = 0\n"}, {"ruff.toml": "line-length = [\n"}])
def test_bad_formatter_settings_are_tt005(tmp_path: Path, files: dict[str, str]) -> None:
    with pytest.raises(TranspileError) as error:
        project_style(_project(tmp_path, files))
    assert error.value.diagnostic.code == "TT005"


@pytest.mark.parametrize(("config", "length", "fixtures"), [
    ("[tool.black]\nline-length = 120\n", 120, ("matmul_descriptor", "suite_gemm_bias_gelu")),
    ("[tool.ruff]\nline-length = 100\n", 100, ("matmul_descriptor", "suite_gemm_bias_gelu")),
])
def test_variants_are_formatted_at_the_projects_line_length(config: str, length: int, fixtures: tuple[str, ...],
                                                             tmp_path: Path, cli, fixture_copy) -> None:
    (tmp_path / "pyproject.toml").write_text(config + "[tool.triton-transpile]\ntargets = ['gfx950', 'sm90']\n",
                                             encoding="utf-8")
    fixture_copy(*fixtures, into=tmp_path / "kernels")
    result = cli("kernels")
    assert result.exit_code == 0, result.output
    variants = sorted([*(tmp_path / "kernels").glob("*_gfx950.py"), *(tmp_path / "kernels").glob("*_sm90.py")])
    assert len(variants) == 2 * len(fixtures)
    texts = [path.read_text(encoding="utf-8") for path in variants]
    assert all(not _long_code_lines(text, length) for text in texts)
    assert any(_long_code_lines(text, 88) for text in texts)  # formatted at the project's width, not at 88
    for path in variants:  # the formatters leave them alone, at the project's width only
        (tmp_path / "check" / path.name).parent.mkdir(exist_ok=True)
        shutil.copy(path, tmp_path / "check" / path.name)
    ruff = _ruff_check(tmp_path / "check", length)
    assert ruff.returncode == 0, ruff.stdout + ruff.stderr
    blackened = _black_check(tmp_path / "check", length, tmp_path)
    assert blackened.returncode == 0, blackened.stderr[-3000:]
    assert _ruff_check(tmp_path / "check", 88).returncode == 1

    again = cli("kernels", "--output-format", "json")  # idempotent: a second run writes nothing
    assert again.exit_code == 0 and '"written"' not in again.stdout, again.output
    assert [path.read_text(encoding="utf-8") for path in variants] == texts


def test_a_variant_ruff_reformatted_at_the_projects_settings_is_byte_identical(tmp_path: Path, cli,
                                                                              fixture_copy) -> None:
    """The project's ruff settings (here single quotes) are the variant's: a ruff hook changes nothing."""
    _project(tmp_path, {"ruff.toml": "line-length = 100\n[format]\nquote-style = 'single'\n"})
    fixture_copy("vector_add")
    assert cli("vector_add.py", "-t", "gfx942").exit_code == 0
    variant = tmp_path / "vector_add_gfx942.py"
    assert "'BLOCK_SIZE'" in variant.read_text(encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "ruff", "format", "--check", "--no-cache", str(variant)],
                            cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# --------------------------------------------------------------------------------------------------------------------
# Black's layout where ruff's differs


ASSERTS = '''def launch(x, w, bias):
    assert x.shape[1] == w.shape[0] and bias.shape == (w.shape[1],), "incompatible dimensions"
    assert x.is_contiguous() and w.is_contiguous(), f"descriptors need row-major operands, not {x.stride()}"
    assert x.shape == w.shape, "shapes differ: " + str(x.shape) + " and " + str(w.shape) + "!"
    grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]), triton.cdiv(N, META["BLOCK_N"]))  # noqa: E731
    return grid


def documented():
    """A docstring whose last line passes the line length once its closing quotes are added to it:
    black moves the closing quotes to a line of their own, and ruff keeps them there once they are."""
'''


@pytest.mark.parametrize("length", [80, 88, 100])
def test_ruff_output_is_settled_with_black(length: int, tmp_path: Path) -> None:
    (formatted,) = format_texts([ASSERTS], FormatStyle(length))
    path = tmp_path / "asserts.py"
    path.write_text(formatted, encoding="utf-8")
    assert _ruff_check(path, length).returncode == 0, formatted
    result = _black_check(path, length, tmp_path)
    assert result.returncode == 0, formatted
    assert same_code(formatted, ASSERTS)


def test_settling_keeps_other_styles_alone() -> None:
    text = 'def f():\n    """Doc.\n\n    Long enough to pass a line length of 20."""\n'
    assert settle_with_black(text, FormatStyle(20, (("format.quote-style", "single"),))) == text
    assert settle_with_black(text, FormatStyle(20)) != text


# --------------------------------------------------------------------------------------------------------------------
# Without ruff


def test_without_ruff_the_variants_are_written_unformatted(tmp_path: Path, cli, fixture_copy,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import transpile.formatting

    fixture_copy("vector_add", "softmax")
    monkeypatch.setattr(transpile.formatting, "ruff_binary", lambda: None)
    result = cli("vector_add.py", "softmax.py", "-t", "gfx942")
    assert result.exit_code == 0, result.output
    assert "<ruff format>:1:1: TT050 ruff is not installed (`pip install ruff`): the variants are left unformatted" \
           in result.stderr
    variant = (tmp_path / "vector_add_gfx942.py").read_text(encoding="utf-8")
    raw = translate_source((tmp_path / "vector_add.py").read_text(encoding="utf-8"), "vector_add.py",
                           get_target("gfx942"))
    assert variant == raw.text
    monkeypatch.undo()  # ruff is back: the unformatted variant is the same code, so it is current
    assert cli("vector_add.py", "softmax.py", "-t", "gfx942", "--check").exit_code == 0


def test_a_failing_ruff_is_a_note(tmp_path: Path, cli, fixture_copy, monkeypatch: pytest.MonkeyPatch) -> None:
    import transpile.formatting

    fake = tmp_path / "bin" / "ruff"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'error: something went wrong' >&2\nexit 2\n", encoding="utf-8")
    fake.chmod(0o755)
    fixture_copy("vector_add")
    monkeypatch.setattr(transpile.formatting, "ruff_binary", lambda: str(fake))
    with pytest.raises(FormatError) as error:
        format_texts(["x = 1\n"])
    assert error.value.texts == ["x = 1\n"] and error.value.failed == [0]
    result = cli("vector_add.py", "-t", "sm90", "--output-format", "json")
    assert result.exit_code == 0, result.output
    assert "TT050" in result.stdout and "error: something went wrong" in result.stdout
    assert (tmp_path / "vector_add_sm90.py").is_file()
