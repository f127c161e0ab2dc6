#!/usr/bin/env python
"""Benchmark every dot-loop fixture's variant against its original kernel, in one run, on the GPU.

    python bench/bench_fixtures.py                                  # fixtures/expected/sm90, target sm90
    python bench/bench_fixtures.py --variant-dir out --target sm90 --json bench.json
    python bench/bench_fixtures.py --case suite_bmm --case attention_fwd
    python bench/bench_fixtures.py --dry-run                        # what would run (works on the CPU)
    python bench/bench_fixtures.py --check-only                     # correctness only, no timing

The cases are those of tests/gpu/check_fixtures.py that have a `bench_shape`: every case of a dot-loop fixture, and
the elementwise, row-wise and reduction cases at memory-bound sizes (MEMORY_BENCH there). For each, the original
fixture and its variant `DIR/<fixture>_<target>.py` (imported by path: only this checkout is needed) are first
checked against each other and against torch at the case's ragged sizes, then both host wrappers are timed at
`bench_shape` on the same inputs. Times are medians of `triton.testing.do_bench` (`--rep` ms of runs after
`--warmup` ms), after one untimed call (autotuning, compilation); with --repeats R the original and the variant are
timed alternately R times and the median of the R medians is kept. The ratio is a speed ratio, original ms / variant
ms: above 1.0 the variant is faster. TFLOP/s is the case's `flops` at bench_shape divided by the variant's time. A
variant whose kernels are kept as plain Triton (`@triton.jit`, left for Triton's own pipeliner) is timed like any
other; the `variant` column says gluon, triton or mixed.
Exit status 1 if any case fails its check or cannot be timed.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import statistics
import sys
import traceback
import zlib
from dataclasses import asdict, dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECK_PATH = ROOT / "tests" / "gpu" / "check_fixtures.py"


def load_checks():
    """tests/gpu/check_fixtures.py, imported by path: its Case table describes every fixture."""
    if "check_fixtures" in sys.modules:
        return sys.modules["check_fixtures"]
    spec = importlib.util.spec_from_file_location("check_fixtures", CHECK_PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_fixtures"] = module
    spec.loader.exec_module(module)
    return module


def bench_cases(checks, names: list[str] | None) -> list:
    """The cases with a bench_shape, filtered by case or fixture names (unknown names are an error)."""
    cases = [c for c in checks.CASES if c.bench_shape is not None]
    if not names:
        return cases
    known = {c.name for c in cases} | {c.fixture for c in cases}
    unknown = [n for n in names if n not in known]
    if unknown:
        sys.exit(f"no benchmark case named {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return [c for c in cases if c.name in names or c.fixture in names]


def kernel_kinds(path: Path) -> dict[str, str]:
    """{kernel name: "gluon" | "triton"} of the module's jit functions, read from its text (no import)."""
    if not path.is_file():
        return {}
    kinds = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for decorator in node.decorator_list:
            text = ast.unparse(decorator)
            if text.startswith(("gluon.jit", "gl.jit")):
                kinds[node.name] = "gluon"
            elif text.startswith(("triton.jit", "jit")) and "gluon" not in text:
                kinds[node.name] = "triton"
    return kinds


def variant_kind(path: Path, original: Path) -> str:
    """gluon / triton / mixed for the kernels (not helpers) the original defines; "missing" without a variant."""
    if not path.is_file():
        return "missing"
    source_kernels = set(kernel_kinds(original))
    kinds = {k for name, k in kernel_kinds(path).items() if name in source_kernels}
    if not kinds:
        return "refused"
    return kinds.pop() if len(kinds) == 1 else "mixed"


def _shape_text(shape: dict[str, int]) -> str:
    return "x".join(f"{k}={v}" for k, v in shape.items())


@dataclass
class Row:
    case: str
    fixture: str
    shape: str
    variant: str  # gluon / triton / mixed / missing / refused
    check: str  # PASS / FAIL / skipped
    original_ms: float | None = None
    variant_ms: float | None = None
    ratio: float | None = None  # original_ms / variant_ms
    original_tflops: float | None = None
    variant_tflops: float | None = None
    error: str | None = None


def _time(fn, warmup: int, rep: int) -> float:
    import torch
    import triton

    fn()  # autotune and compile outside the measurement
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def bench_case(checks, case, loaded, device, args) -> Row:
    import torch

    fixture_path = checks.FIXTURES_DIR / f"{case.fixture}.py"
    variant_path = args.variant_dir / f"{case.fixture}_{args.target}.py"
    row = Row(case.name, case.fixture, _shape_text(case.bench_shape), variant_kind(variant_path, fixture_path),
              "skipped")
    if not args.no_check:
        ok = checks.run_case(case, loaded, device, small=False, label=case.name)
        row.check = "PASS" if ok else "FAIL"
        if not ok or args.check_only:
            return row
    if loaded.variant is None:
        row.error = loaded.variant_error or "no variant"
        return row
    try:
        gen = torch.Generator().manual_seed(zlib.crc32(case.name.encode()))
        inputs = case.make_inputs(case.bench_shape, device, gen)
        original = getattr(loaded.original, case.wrapper)
        variant = getattr(loaded.variant, case.wrapper)
        times: dict[str, list[float]] = {"original": [], "variant": []}
        for _ in range(args.repeats):
            times["original"].append(_time(lambda: original(*inputs, **case.options), args.warmup, args.rep))
            times["variant"].append(_time(lambda: variant(*inputs, **case.options), args.warmup, args.rep))
        row.original_ms = statistics.median(times["original"])
        row.variant_ms = statistics.median(times["variant"])
        row.ratio = row.original_ms / row.variant_ms
        if case.flops is not None:
            flops = case.flops(case.bench_shape)
            row.original_tflops = flops / row.original_ms * 1e-9
            row.variant_tflops = flops / row.variant_ms * 1e-9
        del inputs
    except Exception as exc:  # report it and go on with the other cases
        traceback.print_exc()
        row.error = f"{type(exc).__name__}: {exc}".splitlines()[0]
    torch.cuda.empty_cache()
    return row


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


HEADER = (f"{'case':36s} {'shape':42s} {'variant':8s} {'check':6s} {'orig ms':>9s} {'var ms':>9s} {'ratio':>7s} "
          f"{'orig TF/s':>9s} {'var TF/s':>9s}")


def format_row(row: Row) -> str:
    line = (f"{row.case:36s} {row.shape:42s} {row.variant:8s} {row.check:6s} {_fmt(row.original_ms, '9.3f')} "
            f"{_fmt(row.variant_ms, '9.3f')} {_fmt(row.ratio, '7.3f')} {_fmt(row.original_tflops, '9.1f')} "
            f"{_fmt(row.variant_tflops, '9.1f')}")
    return line + (f"  ({row.error})" if row.error else "")


def dry_run(checks, cases, args) -> int:
    print(f"{'case':36s} {'fixture':24s} {'wrapper':24s} {'bench shape':42s} {'GFLOP':>9s} variant")
    for case in cases:
        variant_path = args.variant_dir / f"{case.fixture}_{args.target}.py"
        kind = variant_kind(variant_path, checks.FIXTURES_DIR / f"{case.fixture}.py")
        gflop = case.flops(case.bench_shape) * 1e-9 if case.flops else None
        print(f"{case.name:36s} {case.fixture:24s} {case.wrapper:24s} {_shape_text(case.bench_shape):42s} "
              f"{_fmt(gflop, '9.1f')} {kind} ({variant_path.relative_to(ROOT) if variant_path.is_relative_to(ROOT) else variant_path})")
    print(f"{len(cases)} case(s), {len({c.fixture for c in cases})} fixture(s); target {args.target}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant-dir", type=Path, default=ROOT / "fixtures" / "expected" / "sm90",
                        help="directory of the variants <fixture>_<target>.py (default: fixtures/expected/sm90)")
    parser.add_argument("--target", default="sm90", help="target suffix of the variant files (default: sm90)")
    parser.add_argument("--case", action="append", metavar="NAME", help="case or fixture name (repeatable)")
    parser.add_argument("--dry-run", action="store_true", help="list the cases, shapes and variants; run nothing")
    parser.add_argument("--check-only", action="store_true", help="check correctness at the ragged sizes; no timing")
    parser.add_argument("--no-check", action="store_true", help="time without checking first")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the rows as JSON")
    parser.add_argument("--warmup", type=int, default=25, help="do_bench warmup, ms (default 25)")
    parser.add_argument("--rep", type=int, default=100, help="do_bench measurement time, ms (default 100)")
    parser.add_argument("--repeats", type=int, default=1, help="alternate original/variant timings R times")
    parser.add_argument("--shape", action="append", metavar="KEY=N", default=[],
                        help="time at these sizes instead of each case's bench_shape (repeatable: --shape M=512 "
                             "--shape N=512; keys a case's shape does not have are left out for it)")
    args = parser.parse_args(argv)
    args.variant_dir = args.variant_dir.resolve()
    args.interpret = False  # check_fixtures.load_fixture reads it

    checks = load_checks()
    cases = bench_cases(checks, args.case)
    if args.shape:  # (small shapes: where a pipeline's fill and drain show)
        sizes = dict((key, int(value)) for key, _, value in (item.partition("=") for item in args.shape))
        cases = [replace(c, bench_shape={k: sizes.get(k, v) for k, v in c.bench_shape.items()}) for c in cases]
    if args.dry_run:
        return dry_run(checks, cases, args)

    import torch
    import triton

    print(f"device: {torch.cuda.get_device_name()}, triton {triton.__version__}, torch {torch.__version__}; "
          f"variants {args.variant_dir} ({args.target})", flush=True)
    device = torch.device("cuda")
    rows: list[Row] = []
    for fixture in dict.fromkeys(c.fixture for c in cases):
        loaded = checks.load_fixture(fixture, args, config_index=None)
        for case in (c for c in cases if c.fixture == fixture):
            rows.append(bench_case(checks, case, loaded, device, args))
            print(format_row(rows[-1]), flush=True)

    print()
    print(HEADER)
    for row in rows:
        print(format_row(row))
    failed = [r for r in rows if r.check == "FAIL" or r.error]
    timed = [r.ratio for r in rows if r.ratio is not None]
    if timed:
        print(f"{len(timed)} timed; ratio min {min(timed):.3f}, median {statistics.median(timed):.3f}; "
              f"below 0.97: {', '.join(r.case for r in rows if r.ratio is not None and r.ratio < 0.97) or 'none'}")
    print(f"{len(rows) - len(failed)}/{len(rows)} ok")
    if args.json:
        args.json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "triton": triton.__version__,
                                         "torch": torch.__version__, "target": args.target,
                                         "rows": [asdict(r) for r in rows]}, indent=1) + "\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
