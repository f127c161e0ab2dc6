"""README.md stays true: its generated tables match the code, and it documents the commands and every option."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import typer.main

from transpile.cli.app import app, tools


def test_tables_match_the_code(root: Path) -> None:
    render = runpy.run_path(str(root / "scripts" / "readme_tables.py"))["render"]
    text = (root / "README.md").read_text(encoding="utf-8")
    assert render(text) == text, "README.md tables are out of date: run `python scripts/readme_tables.py --write`"


def test_documents_the_two_commands_and_the_triton36_check(root: Path) -> None:
    text = (root / "README.md").read_text(encoding="utf-8")
    assert "pip install -e . && transpile fixtures/vector_add.py --target gfx942 --diff" in text
    assert "pip install -e '.[verify]'" in text and "pip install -e '.[test]'" in text  # the extras
    assert "bash .ci/run" in text and "python -m pytest -q" in text
    assert "## Checking Hopper output under Triton 3.6" in text and "bash scripts/check_triton36.sh" in text


def test_documents_every_option(root: Path) -> None:
    text = (root / "README.md").read_text(encoding="utf-8")
    commands = [typer.main.get_command(app), *typer.main.get_command(tools).commands.values()]
    options = {opt for command in commands for param in command.params for opt in getattr(param, "opts", [])
               if opt.startswith("--") and opt != "--help"}
    assert options, "no options found"
    assert sorted(o for o in options if not re.search(rf"{re.escape(o)}(?![\w-])", text)) == []
