#!/usr/bin/env python
"""How fast the tool itself is: ms per file for parsing and analysis, ms per kernel and target for the rewrite, the
formatting of every variant (one ruff process), and the wall time of the command line over a directory for every
target (worker processes included).

    python scripts/bench_tool.py                 # fixtures/, all four targets, median of 5
    python scripts/bench_tool.py DIR --repeats 3

Issue 11 asks for the fixtures x 4 targets in under 1 s on a 2-core CPU; this prints where the time goes. Each figure
comes with its CPU time (in brackets; for the command line, of all its processes): on a machine that other work
shares, the wall time of a run varies far more than the CPU time it needs.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", nargs="?", type=Path, default=ROOT / "fixtures")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)

    from transpile.engine import prepare, translate_source
    from transpile.formatting import format_texts
    from transpile.targets import all_targets

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
    walls, cpus = [], []
    with tempfile.TemporaryDirectory() as out:
        for _ in range(args.repeats):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "transpile", *map(str, files), "--target",
                            ",".join(t.name for t in targets), "--out-dir", out], check=False, capture_output=True)
            walls.append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    print(f"{len(files)} files, {kernels // len(targets)} kernels and helpers, {len(targets)} targets "
          f"(median of {args.repeats})")
    print(f"  parse + canonicalise + analyse: {statistics.median(prepare_ms):7.1f} ms per file "
          f"[cpu {statistics.median(prepare_cpu):.1f}]")
    print(f"  rewrite + emit:                 {statistics.median(translate_ms):7.1f} ms per kernel and target "
          f"[cpu {statistics.median(translate_cpu):.1f}]")
    print(f"  format (one ruff process):      {statistics.median(format_ms):7.1f} ms for {len(variants)} variants "
          f"[cpu {statistics.median(format_cpu):.1f}]")
    print(f"  command line, whole directory:  {statistics.median(walls):7.2f} s [cpu {statistics.median(cpus):.2f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
