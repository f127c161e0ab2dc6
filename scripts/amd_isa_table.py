"""The machine-code comparison of `transpile verify --isa`, as a table over many kernels and AMD targets.

For each file (default: the fixtures with a `tl.dot`), each AMD target and each kernel and autotune config, compile
the variant's kernel and its source kernel as one aligned launch specialises them (`transpile.verify.isa_compare`),
with the argument types and constexprs of `fixtures/verify.json`, and print one markdown row: the variant's status,
the hot loop's non-MFMA instructions per 16x16x32 MFMA of work for the source and the variant, their ratio, spills and
the variant's direct-to-LDS copies. Extra constexprs (`--set BLOCK_M=256`) apply to every file that has them.

    python scripts/amd_isa_table.py [FILE ...] [-t gfx950,gfx942,gfx1250] [--set NAME=VALUE ...] [--json OUT]
                                    [--gluon-always] [--unaligned]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _rows(job: tuple[str, str, dict]) -> list[dict]:
    from transpile.targets import get_target
    from transpile.verify import isa_compare_file

    path, target, values, gluon_always, aligned = job
    display = os.path.relpath(path, ROOT)
    try:
        comparisons = isa_compare_file(Path(path), get_target(target), values, display, gluon_always=gluon_always,
                                       aligned=aligned)
    except Exception as exc:  # a file the comparison cannot compile at these values: say so, go on
        return [{"file": display, "target": target, "error": f"{type(exc).__name__}: {exc}"[:300]}]
    return [{"file": display, "target": target, **c.as_dict()} for c in comparisons]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*")
    parser.add_argument("-t", "--targets", default="gfx950,gfx942,gfx1250")
    parser.add_argument("--set", action="append", default=[], help="NAME=VALUE for every file that has NAME")
    parser.add_argument("--json", help="also write the rows as JSON here")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--gluon-always", action="store_true",
                        help="compile the Gluon form of loops the profitability policy keeps as Triton (to measure it)")
    parser.add_argument("--unaligned", action="store_true",
                        help="compile both without the aligned-launch specialisation (as `verify --isa --unaligned`)")
    args = parser.parse_args()
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    from transpile.verify import parse_values

    table = json.loads((ROOT / "fixtures" / "verify.json").read_text())
    files = args.files or sorted(str(p) for p in (ROOT / "fixtures").glob("*.py")
                                 if "tl.dot" in p.read_text() or ".dot(" in p.read_text())
    extra = parse_values(args.set)
    jobs = []
    for path in files:
        values = dict(table.get(Path(path).name, {}))
        text = Path(path).read_text()
        values.update({k: v for k, v in extra.items() if k in text})
        for target in args.targets.split(","):
            jobs.append((path, target, values, args.gluon_always, not args.unaligned))
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = [row for rows in pool.map(_rows, jobs) for row in rows]
    print("| file | kernel [config] | target | status | source | variant | ratio | spills src/var | direct-to-LDS |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        if "error" in row:
            print(f"| {row['file']} | - | {row['target']} | error: {row['error']} | | | | | |")
            continue
        src, var = row["source"] or {}, row["variant"] or {}
        sl, vl = src.get("hot_loop") or {}, var.get("hot_loop") or {}
        if not sl.get("mma") and not vl.get("mma"):
            continue  # no MFMA loop: nothing to compare
        print(f"| {row['file']} | {row['kernel']} [{row['config']}] | {row['target']} | {row['status']}"
              f"{' (' + row['message'][:80] + ')' if row['message'] else ''} | {sl.get('other_per_mma_eq')} "
              f"| {vl.get('other_per_mma_eq')} | {row['ratio']} | {src.get('vgpr_spills')}/{var.get('vgpr_spills')} "
              f"| {vl.get('lds_direct')} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
