"""The fixture kernels (the translator's inputs) compute what their torch references compute.

They run on the CPU under Triton's interpreter, through tests/gpu/check_fixtures.py with its small ragged
sizes and every autotune config. The fixtures run in one subprocess (the interpreter is chosen by TRITON_INTERPRET
when triton is first imported; starting torch and Triton once instead of once a fixture saves about two minutes),
whose report each fixture's test reads: every case of the fixture (`check_fixtures.py --list`) passed. A fixture the
interpreter cannot run gets a subprocess of its own. The interpreter needs numpy.
"""

from __future__ import annotations

import subprocess
import sys
from functools import lru_cache
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


def _run(*arguments: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(CHECK_SCRIPT), *arguments]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


@lru_cache(maxsize=None)
def _cases() -> dict[str, list[str]]:
    """Each fixture's case names (`check_fixtures.py --list`)."""
    listed = _run("--list")
    assert listed.returncode == 0, listed.stderr
    cases: dict[str, list[str]] = {}
    for line in listed.stdout.splitlines():
        name, fixture = line.split()[0], line.split()[1].split(".")[0]
        cases.setdefault(fixture, []).append(name)
    return cases


@lru_cache(maxsize=None)
def _report() -> tuple[subprocess.CompletedProcess[str], dict[str, list[str]]]:
    """One interpreter run of every fixture it can run, every config: the run, and each case's report lines (a case
    of an autotuned fixture reports once per config, `NAME@cfgI`)."""
    run = _run("--interpret", "--all-configs",
               *(a for f in FIXTURES if f not in INTERPRETER_FAILURES for a in ("--case", f)))
    lines: dict[str, list[str]] = {}
    for line in run.stdout.splitlines():
        if line.strip():
            lines.setdefault(line.split()[0].split("@")[0], []).append(line)
    return run, lines


@pytest.mark.slow
@pytest.mark.parametrize("fixture", FIXTURES)
def test_fixture_matches_torch_reference(fixture: str, request: pytest.FixtureRequest) -> None:
    if fixture in INTERPRETER_FAILURES:
        request.applymarker(pytest.mark.xfail(strict=True, reason=INTERPRETER_FAILURES[fixture]))
        # --case with a fixture name runs all of that fixture's cases; a fixture without any is an error.
        result = _run("--interpret", "--all-configs", "--case", fixture)
        assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
        assert "PASS" in result.stdout
        return
    cases = _cases().get(fixture)
    assert cases, f"tests/gpu/check_fixtures.py has no case for {fixture}"
    run, lines = _report()
    context = f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    for case in cases:
        reported = lines.get(case)
        assert reported, f"{case}: no report from the interpreter run\n{context}"
        failed = [line for line in reported if "FAIL" in line.split() or not {"PASS", "SKIP"} & set(line.split())]
        assert not failed, "\n".join(failed)
