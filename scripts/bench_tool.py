#!/usr/bin/env python
"""How fast the tool itself is: ms per file for parsing and analysis, ms per kernel and target for the rewrite, the
formatting of every variant (one ruff process), and the wall time of the command line over a directory for every
target (worker processes included).

    python scripts/bench_tool.py                 # fixtures/, all four targets, median of 5
    python scripts/bench_tool.py DIR --repeats 3
    python scripts/bench_tool.py --phases        # also: where the time goes, phase by phase
    python scripts/bench_tool.py --floor         # also: what no translation with libcst can go below

Issue 11 asks for the fixtures x 4 targets in under 1 s on a 2-core CPU; this prints where the time goes. Each figure
comes with its CPU time (in brackets; for the command line, of all its processes): on a machine that other work
shares, the wall time of a run varies far more than the CPU time it needs.

The command line is timed three ways: without the cache of translations (`--no-cache`: every file translated, the
headline figure), with an empty cache (translating and filling it: a first run), and with a filled cache (nothing
changed since the last run: every variant read from the cache, checked against the file on disk). The in-process
figures run with the garbage-collector settings of the command line (`transpile.project.tune_gc`).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", nargs="?", type=Path, default=ROOT / "fixtures")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--phases", action="store_true", help="also print the CPU time of each phase (one run)")
    parser.add_argument("--floor", action="store_true", help="also print the cost of starting the command line, "
                        "parsing every file with libcst and generating one module's text per file and target")
    args = parser.parse_args(argv)

    from transpile.engine import prepare, translate_source
    from transpile.formatting import format_texts
    from transpile.project import tune_gc
    from transpile.targets import all_targets

    tune_gc()
    files = [p for p in sorted(args.directory.glob("*.py"))]
    texts = [(str(p), p.read_text(encoding="utf-8")) for p in files]
    targets = all_targets()
    prepare_ms, translate_ms, prepare_cpu, translate_cpu, format_ms, format_cpu = [], [], [], [], [], []
    kernels = 0
    variants: list[str] = []
    for _ in range(args.repeats):
        started, started_cpu = time.perf_counter(), time.process_time()
        prepared = [prepare(text, path) for path, text in texts]
        middle, middle_cpu = time.perf_counter(), time.process_time()
        kernels = 0
        variants = []
        for (path, text), p in zip(texts, prepared):
            for target in targets:
                result = translate_source(text, path, target, prepared=p)
                kernels += len(result.functions)
                variants.append(result.text)
        done, done_cpu = time.perf_counter(), time.process_time()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        format_texts(variants)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        format_ms.append(1000 * (time.perf_counter() - done))
        format_cpu.append(1000 * (time.process_time() - done_cpu + after.ru_utime + after.ru_stime
                                  - before.ru_utime - before.ru_stime))
        prepare_ms.append(1000 * (middle - started) / len(texts))
        translate_ms.append(1000 * (done - middle) / kernels)
        prepare_cpu.append(1000 * (middle_cpu - started_cpu) / len(texts))
        translate_cpu.append(1000 * (done_cpu - middle_cpu) / kernels)
    command = [sys.executable, "-m", "transpile", *map(str, files), "--target", ",".join(t.name for t in targets)]
    with tempfile.TemporaryDirectory() as scratch:
        cache = Path(scratch) / "cache"
        environment = {**os.environ, "TRANSPILE_CACHE_DIR": str(cache)}
        environment.pop("TRANSPILE_NO_CACHE", None)
        out = str(Path(scratch) / "out")
        cold = _time([*command, "--out-dir", out, "--no-cache"], args.repeats, environment)
        empty = _time([*command, "--out-dir", out], args.repeats, environment, before=lambda: _remove(cache))
        warm = _time([*command, "--out-dir", out], args.repeats, environment)
    print(f"{len(files)} files, {kernels // len(targets)} kernels and helpers, {len(targets)} targets "
          f"(median of {args.repeats})")
    print(f"  parse + canonicalise + analyse: {statistics.median(prepare_ms):7.1f} ms per file "
          f"[cpu {statistics.median(prepare_cpu):.1f}]")
    print(f"  rewrite + emit:                 {statistics.median(translate_ms):7.1f} ms per kernel and target "
          f"[cpu {statistics.median(translate_cpu):.1f}]")
    print(f"  format (one ruff process):      {statistics.median(format_ms):7.1f} ms for {len(variants)} variants "
          f"[cpu {statistics.median(format_cpu):.1f}]")
    print(f"  command line, whole directory:  {cold[0]:7.2f} s [cpu {cold[1]:.2f}]  (no cache: every file translated)")
    print(f"    with an empty cache:          {empty[0]:7.2f} s [cpu {empty[1]:.2f}]  (translating and filling it)")
    print(f"    with a filled cache:          {warm[0]:7.2f} s [cpu {warm[1]:.2f}]  (nothing changed since the "
          "last run)")
    if args.phases:
        _print_phases(texts, targets)
    if args.floor:
        _print_floor(texts, len(targets), args.repeats)
    return 0


def _print_floor(texts: list[tuple[str, str]], targets: int, repeats: int) -> None:
    """The part of a run over `texts` that any translation built on libcst pays, whatever its analysis: the start of
    the command line (`transpile --help`: Python, libcst, typer, the package), a libcst parse of every file, and the
    text of one module of the file's size per target (the sources' own text stands in for the variants, which are
    longer). On `cores` processes the wall time is at best the start plus the CPU time divided among them."""
    import libcst

    parse, codegen = [], []
    for _ in range(repeats):
        started = time.process_time()
        modules = [libcst.parse_module(text) for _, text in texts]
        parsed = time.process_time()
        for _ in range(targets):
            for module in modules:
                module.code  # noqa: B018 - the cost of generating the text is what is measured
        parse.append(parsed - started)
        codegen.append(time.process_time() - parsed)
    start = _time([sys.executable, "-m", "transpile", "--help"], repeats, dict(os.environ))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    work = statistics.median(parse) + statistics.median(codegen)
    print(f"floor (median of {repeats}; no analysis, no rewrite, no formatting)")
    print(f"  start of the command line:      {start[0]:7.2f} s")
    print(f"  libcst parse of every file:     {statistics.median(parse):7.2f} s cpu")
    print(f"  text of {targets} modules per file:      {statistics.median(codegen):7.2f} s cpu")
    print(f"  at best on {cores} cores:             {start[0] + work / cores:7.2f} s")


def _remove(directory: Path) -> None:
    import shutil

    shutil.rmtree(directory, ignore_errors=True)


def _time(command: list[str], repeats: int, environment: dict[str, str], before=None) -> tuple[float, float]:
    """Median wall and CPU seconds (of the command and its worker processes) of `repeats` runs."""
    walls, cpus = [], []
    for _ in range(repeats):
        if before is not None:
            before()
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(command, check=False, capture_output=True, env=environment)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def _print_phases(texts: list[tuple[str, str]], targets: list) -> None:
    """One in-process run over the files with the main phases timed (CPU, each phase without the phases it calls)."""
    import libcst
    from libcst.metadata import MetadataWrapper

    import transpile.engine as engine

    spent: Counter[str] = Counter()
    stack: list[float] = []
    patched: list[tuple[object, str, object]] = []

    def timed(owner: object, name: str, label: str) -> None:
        function = getattr(owner, name)

        def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
            started = time.process_time()
            stack.append(0.0)
            try:
                return function(*args, **kwargs)
            finally:
                elapsed = time.process_time() - started
                inner = stack.pop()
                spent[label] += elapsed - inner
                if stack:
                    stack[-1] += elapsed

        patched.append((owner, name, function))
        setattr(owner, name, wrapper)

    timed(libcst, "parse_module", "libcst parse (sources, emitted loops, snippets)")
    timed(MetadataWrapper, "resolve_many", "metadata (positions, scopes)")
    timed(engine, "canonicalize", "canonicalisation")
    timed(engine, "discover", "discovery")
    timed(engine, "analyse_layouts", "layout and loop analysis")
    timed(engine._KernelRewriter, "on_leave", "rules")
    timed(engine, "_emit_tree", "emission: module assembly")
    timed(engine, "_used_imports", "emission: imports the variant uses")
    timed(engine, "_drop_unused_language_imports", "emission: unused triton.language imports")
    timed(engine, "_module_text", "emission: module text")
    timed(engine, "_undefined_in_translated", "undefined-name check")
    timed(engine, "translate_source", "rewrite (libcst transform, kept functions, the rest)")
    total = time.process_time()
    for path, text in texts:
        prepared = engine.prepare(text, path)
        for target in targets:
            engine.translate_source(text, path, target, prepared=prepared)
    total = time.process_time() - total
    for owner, name, function in patched:
        setattr(owner, name, function)
    print(f"phases (one in-process run, CPU; {1000 * total:.0f} ms in all)")
    for label, seconds in spent.most_common():
        print(f"  {label:55s} {1000 * seconds:7.0f} ms  {100 * seconds / total:4.1f}%")
    print(f"  {'other (reading, hashing, discovery glue)':55s} {1000 * (total - sum(spent.values())):7.0f} ms")


if __name__ == "__main__":
    sys.exit(main())
