"""The end of a test run (tests/conftest.py: `pytest_unconfigure`): nothing after pytest's summary (Triton's nanobind
extension reports the objects it still holds at interpreter teardown, about 60 lines), the same exit status, junit
file and atexit handlers. Run in a pytest subprocess whose conftest takes those hooks from tests/conftest.py; the
teardown noise is an object that writes to stderr when the interpreter tears its module down."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parent / "conftest.py"

TESTS = '''
import atexit
import os
import sys


class Leak:
    def __del__(self):  # at interpreter teardown, as nanobind's report
        os.write(2, b"nanobind: leaked 4 instances!\\n")


LEAK = Leak()
atexit.register(lambda: open(os.environ["ATEXIT_MARK"], "w").close())


def test_passes():
    pass


def test_fails():
    assert os.environ.get("FAIL") != "1"
'''

HOOKS = f'''
import importlib.util
import sys

_spec = importlib.util.spec_from_file_location("transpile_tests_conftest", {str(CONFTEST)!r})
_conftest = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_conftest)
pytest_sessionfinish = _conftest.pytest_sessionfinish
pytest_unconfigure = _conftest.pytest_unconfigure
'''


def _run(directory: Path, quiet: bool, fail: bool) -> tuple[subprocess.CompletedProcess[str], Path]:
    (directory / "test_noise.py").write_text(TESTS, encoding="utf-8")
    (directory / "conftest.py").write_text(HOOKS if quiet else "", encoding="utf-8")
    mark, junit = directory / "atexit-ran", directory / "junit.xml"
    mark.unlink(missing_ok=True)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                             "test_noise.py"], cwd=directory, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "ATEXIT_MARK": str(mark), "FAIL": "1" if fail else "0"})
    return result, junit


@pytest.mark.parametrize("fail", [False, True])
def test_run_ends_after_its_summary_with_its_status(tmp_path: Path, fail: bool) -> None:
    loud, _ = _run(tmp_path, quiet=False, fail=fail)
    assert "nanobind: leaked" in loud.stderr  # (the stand-in for the noise is heard without the hooks)
    result, junit = _run(tmp_path, quiet=True, fail=fail)
    output = result.stdout + result.stderr
    assert "leaked" not in output
    assert result.returncode == loud.returncode == (1 if fail else 0), output
    summary = output.strip().splitlines()[-1]
    assert summary.startswith("1 failed, 1 passed" if fail else "2 passed"), output
    assert f'failures="{int(fail)}"' in ET.tostring(ET.parse(junit).getroot(), encoding="unicode")
    assert (tmp_path / "atexit-ran").exists()  # the other atexit handlers still run
