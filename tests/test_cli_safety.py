"""The command line is safe to run from anywhere and to interrupt (issue 30): interrupted writes leave nothing behind,
the project root comes from the files, orphaned variants are reported, `verify` keeps the user's warps, write and
configuration errors are located messages (exit 2, no traceback), text is never taken for markup, odd inputs (FIFOs,
BOMs, coding cookies) are handled, and the conventions of a command line hold (readable help, usage errors, `-v`)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from test_cli import assert_clean_exit, diagnostics

# --------------------------------------------------------------------------------------------------------------------
# 3. An interrupted write leaves no temporary file

INTERRUPT = textwrap.dedent('''\
    import os, signal, sys, tempfile

    SIGNAL = getattr(signal, sys.argv[1])
    real = tempfile.mkstemp


    def mkstemp(*args, **kwargs):
        """The signal arrives the moment a variant's temporary file exists."""
        fd, name = real(*args, **kwargs)
        if name.endswith(".tmp"):
            os.kill(os.getpid(), SIGNAL)
        return fd, name


    tempfile.mkstemp = mkstemp
    sys.argv = ["transpile", "vector_add.py", "-t", "gfx942,sm90", "--no-cache"]
    from transpile.cli.app import main

    main()
''')


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_an_interrupted_write_leaves_no_temporary_file(signal_name: str, tmp_path: Path, fixture_copy, cli) -> None:
    fixture_copy("vector_add")
    (tmp_path / "interrupt.py").write_text(INTERRUPT, encoding="utf-8")
    done = subprocess.run([sys.executable, "interrupt.py", signal_name], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == {"SIGINT": 130, "SIGTERM": 143}[signal_name], done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    left = sorted(p.name for p in tmp_path.iterdir())
    assert not [name for name in left if name.endswith(".tmp")], left
    # The variant being written when the signal came is whole (the signal waited for it); the other is not begun.
    assert left == ["interrupt.py", "vector_add.py", "vector_add_gfx942.py"], left
    written = (tmp_path / "vector_add_gfx942.py").read_text(encoding="utf-8")
    assert_clean_exit(cli("vector_add.py", "-t", "gfx942", "--no-cache", "--check"), 0)
    assert written == (tmp_path / "vector_add_gfx942.py").read_text(encoding="utf-8")
