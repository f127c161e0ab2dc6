"""The fixture kernels (the translator's inputs) compute what their torch references compute.

They run on the CPU under Triton's interpreter, through tests/gpu/check_fixtures.py with its small ragged
sizes and every autotune config. Each fixture gets its own subprocess, because the interpreter is chosen by
TRITON_INTERPRET when triton is first imported. The interpreter needs numpy.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECK_SCRIPT = ROOT / "tests" / "gpu" / "check_fixtures.py"
FIXTURES = sorted(path.stem for path in (ROOT / "fixtures").glob("*.py"))
# Fixtures that Triton 3.9's interpreter cannot run (strict: remove the entry once it can).
INTERPRETER_FAILURES = {
    "suite_blockptr_gemm": "Triton 3.9 removed block pointers (`tl.make_block_ptr`): the kernel runs only on Triton <= 3.6",
    "lang_gated_act": "the interpreter has no libdevice (`libdevice.tanh` of the GELU-tanh case): checked on the GPU",
}


@pytest.mark.slow
@pytest.mark.parametrize("fixture", FIXTURES)
def test_fixture_matches_torch_reference(fixture: str, request: pytest.FixtureRequest) -> None:
    if fixture in INTERPRETER_FAILURES:
        request.applymarker(pytest.mark.xfail(strict=True, reason=INTERPRETER_FAILURES[fixture]))
    # --case with a fixture name runs all of that fixture's cases; a fixture without any is an error.
    command = [sys.executable, str(CHECK_SCRIPT), "--interpret", "--all-configs", "--case", fixture]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout}\n{result.stderr}"
    assert "PASS" in result.stdout
