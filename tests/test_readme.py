"""README.md and docs/ stay true: their generated tables match the code, the README documents the commands and
every option in 120 columns and links every docs/ file, docs/CLI.md describes every option, docs/TESTS.md every test
file."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest
import typer.main

from transpile.cli.app import app, tools

ROOT = Path(__file__).resolve().parents[1]
TABLES = runpy.run_path(str(ROOT / "scripts" / "readme_tables.py"))


def _text(root: Path, file: str) -> str:
    return (root / file).read_text(encoding="utf-8")


@pytest.mark.parametrize("file", TABLES["FILES"])
def test_tables_match_the_code(root: Path, file: str) -> None:
    text = _text(root, file)
    assert TABLES["render"](text, file) == text, (
        f"{file}: tables out of date: run `python scripts/readme_tables.py --write`")


def test_documents_the_two_commands_and_the_triton36_check(root: Path) -> None:
    text = _text(root, "README.md")
    assert "pip install -e . && transpile fixtures/vector_add.py --target gfx942 --diff" in text
    assert "pip install -e '.[verify]'" in text and "pip install -e '.[test]'" in text  # the extras
    assert "pip install torch==2.13.0" in text  # the CPU torch before the test extras
    assert "bash .ci/run" in text and "python -m pytest -q" in text
    assert "bash scripts/check_triton36.sh" in text
    tests = _text(root, "docs/TESTS.md")
    assert "## Checking Hopper output under Triton 3.6" in tests and "bash scripts/check_triton36.sh" in tests


def _options() -> set[str]:
    commands = [typer.main.get_command(app), *typer.main.get_command(tools).commands.values()]
    options = {opt for command in commands for param in command.params for opt in getattr(param, "opts", [])
               if opt.startswith("--") and opt != "--help"}
    assert options, "no options found"
    return options


@pytest.mark.parametrize("file", ["README.md", "docs/CLI.md"])
def test_documents_every_option(root: Path, file: str) -> None:
    text = _text(root, file)
    assert sorted(o for o in _options() if not re.search(rf"{re.escape(o)}(?![\w-])", text)) == []


def test_cli_reference_has_a_row_for_every_option(root: Path) -> None:
    """docs/CLI.md's options table names every option in its first column (not only somewhere in the prose)."""
    rows = [line.split("|")[1] for line in _text(root, "docs/CLI.md").splitlines() if line.startswith("| `-")]
    assert sorted(o for o in _options() if not any(re.search(rf"`{re.escape(o)}[ `]", row) for row in rows)) == []


def test_readme_fits_120_columns_and_stays_short(root: Path) -> None:
    lines = _text(root, "README.md").splitlines()
    assert [n for n, line in enumerate(lines, 1) if len(line) > 120] == []
    assert len(lines) <= 200


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation but `-` and `_` dropped, spaces `-`."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def _links(page: Path) -> list[tuple[Path, str]]:
    """The page's links to markdown files and images of the repository, with their anchors ('' for none)."""
    found = re.findall(r"\]\(([\w./-]+\.(?:md|svg))?(?:#([\w-]+))?\)", page.read_text(encoding="utf-8"))
    return [((page.parent / target).resolve() if target else page, anchor) for target, anchor in found
            if target or anchor]


def test_readme_links_every_docs_file(root: Path) -> None:
    linked = {target for target, _ in _links(root / "README.md")}
    docs = sorted((root / "docs").glob("*.md"))
    assert root / "docs" / "DESIGN.md" in docs
    assert [page.name for page in docs if page.resolve() not in linked] == []


@pytest.mark.parametrize("page", ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))])
def test_links_resolve(root: Path, page: str) -> None:
    for target, anchor in _links(root / page):
        assert target.exists(), f"{page}: {target}"
        assert not anchor or target.suffix != ".md" or anchor in _anchors(target), f"{page}: {target.name}#{anchor}"


def test_tests_table_lists_every_test_file(root: Path) -> None:
    """docs/TESTS.md has one row per tests/test_*.py, and no row for a file that is gone."""
    rows = re.findall(r"^\| `(tests/test_\w+\.py)`", _text(root, "docs/TESTS.md"), re.MULTILINE)
    files = sorted(p.relative_to(root).as_posix() for p in (root / "tests").glob("test_*.py"))
    assert sorted(set(rows)) == files, {"no row": sorted(set(files) - set(rows)),
                                        "gone": sorted(set(rows) - set(files))}
    assert len(rows) == len(set(rows)), "a test file has two rows"
