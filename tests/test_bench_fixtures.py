"""bench/bench_fixtures.py: every fixture with a dot loop is benchmarked (a Case with bench_shape and flops in
tests/gpu/check_fixtures.py), and --dry-run lists the run on the CPU."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench" / "bench_fixtures.py"


def _bench_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_fixtures", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_fixtures"] = module
    spec.loader.exec_module(module)
    return module


def _is_jit(fn: ast.FunctionDef) -> bool:
    return any(ast.unparse(d).split("(")[0] in ("triton.jit", "jit") for d in fn.decorator_list)


def _calls(node: ast.AST) -> list[str]:
    """Names called inside node: `tl.dot` -> "dot", `helper(...)` -> "helper"."""
    names = []
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        func = call.func
        names.append(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def has_dot_loop(text: str) -> bool:
    """A jit function of the module has a loop with a dot in it, directly or through a jit helper it calls."""
    module = ast.parse(text)
    jit = {n.name: n for n in module.body if isinstance(n, ast.FunctionDef) and _is_jit(n)}
    dotty = {name for name, fn in jit.items() if {"dot", "dot_scaled"} & set(_calls(fn))}
    for fn in jit.values():
        for loop in (n for n in ast.walk(fn) if isinstance(n, (ast.For, ast.While))):
            called = set(_calls(loop))
            if {"dot", "dot_scaled"} & called or called & dotty:
                return True
    return False


def dot_loop_fixtures() -> list[str]:
    from transpile.engine import is_generated

    names = []
    for path in sorted((ROOT / "fixtures").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if not is_generated(text) and has_dot_loop(text):
            names.append(path.stem)
    return names


def test_dot_loop_detection_is_real() -> None:
    """The detector finds the known dot-loop fixtures and none of the elementwise/row-wise ones."""
    found = set(dot_loop_fixtures())
    assert {"matmul_grouped", "attention_fwd", "suite_gemm_kaddr", "suite_linear_attn", "suite_lora"} <= found
    assert not {"vector_add", "softmax", "suite_online_softmax", "suite_cross_entropy"} & found


@pytest.mark.parametrize("fixture", dot_loop_fixtures())
def test_every_dot_loop_fixture_has_a_bench_case(fixture: str) -> None:
    bench = _bench_module()
    checks = bench.load_checks()
    cases = [c for c in checks.CASES if c.fixture == fixture and c.bench_shape is not None]
    assert cases, f"tests/gpu/check_fixtures.py has no Case of {fixture} with a bench_shape"
    for case in cases:
        assert case.flops is not None, f"{case.name}: bench_shape without flops"
        assert case.flops(case.bench_shape) > 1e9, f"{case.name}: implausible flop count"
        assert set(case.shape) == set(case.bench_shape), f"{case.name}: shape and bench_shape name other sizes"


def test_dry_run_lists_every_bench_case() -> None:
    bench = _bench_module()
    cases = bench.bench_cases(bench.load_checks(), None)
    completed = subprocess.run([sys.executable, str(BENCH), "--dry-run"], cwd=ROOT, capture_output=True, text=True,
                               timeout=300)
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    listed = {line.split()[0] for line in lines[1:-1]}
    assert listed == {c.name for c in cases}
    assert lines[-1].startswith(f"{len(cases)} case(s)")
    assert set(dot_loop_fixtures()) <= {c.fixture for c in cases}


def test_dry_run_filters_cases_and_reads_variant_kinds(tmp_path: Path) -> None:
    """--case selects by case or fixture name; the variant column says gluon / triton (kept) / missing."""
    (tmp_path / "matmul_grouped_sm90.py").write_text(
        "import triton\n\n@triton.jit\ndef matmul_kernel(a_ptr):\n    pass\n", encoding="utf-8")
    (tmp_path / "suite_bmm_sm90.py").write_text(
        "from triton.experimental import gluon\n\n@gluon.jit\ndef bmm_kernel(a_ptr):\n    pass\n", encoding="utf-8")
    completed = subprocess.run([sys.executable, str(BENCH), "--dry-run", "--variant-dir", str(tmp_path), "--case",
                                "matmul_grouped", "--case", "suite_bmm", "--case", "suite_lora"], cwd=ROOT,
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr
    rows = {line.split()[0]: line.split()[5] for line in completed.stdout.splitlines()[1:-1]}
    assert rows == {"matmul_grouped": "triton", "suite_bmm": "gluon", "suite_lora": "missing"}

    unknown = subprocess.run([sys.executable, str(BENCH), "--dry-run", "--case", "no_such_fixture"], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    assert unknown.returncode != 0 and "no_such_fixture" in unknown.stderr
