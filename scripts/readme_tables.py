"""The README's generated tables: targets (from `transpile.targets`) and diagnostics (from
`transpile.diagnostics.CODES`).

    python scripts/readme_tables.py            # print both tables
    python scripts/readme_tables.py --write    # rewrite them in README.md, between their marker comments
    python scripts/readme_tables.py --check    # exit 1 when README.md is out of date (tests/test_readme.py does this)
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def targets_table() -> str:
    from transpile.targets import all_targets

    rows = ["| target | aliases | `tl.dot` becomes | copies into shared memory | warp size | shared memory "
            "| oldest Triton |", "|---|---|---|---|---|---|---|"]
    for t in all_targets():
        aliases = ", ".join(f"`{a}`" for a in t.aliases) or "-"
        rows.append(f"| `{t.name}` | {aliases} | {t.mma} | {t.copy_engine} | {t.warp_size} | "
                    f"{t.shared_memory_bytes // 1024} KiB | {'.'.join(map(str, t.min_triton))} |")
    return "\n".join(rows)


def diagnostics_table() -> str:
    from transpile.diagnostics import CODES

    rows = ["| code | severity | meaning |", "|---|---|---|"]
    rows += [f"| `{code}` | {severity.value} | {meaning} |" for code, (severity, meaning) in sorted(CODES.items())]
    return "\n".join(rows)


TABLES = {"targets": targets_table, "diagnostics": diagnostics_table}


def render(text: str) -> str:
    """`text` with every `<!-- NAME:start -->...<!-- NAME:end -->` block replaced by the current table."""
    for name, make in TABLES.items():
        pattern = re.compile(rf"(<!-- {name}:start[^>]*-->\n).*?(<!-- {name}:end -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"README.md has no `<!-- {name}:start -->` ... `<!-- {name}:end -->` block")
        text = pattern.sub(lambda m, make=make: m.group(1) + make() + "\n" + m.group(2), text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the tables in README.md")
    mode.add_argument("--check", action="store_true", help="exit 1 when README.md's tables are out of date")
    args = parser.parse_args()
    if not (args.write or args.check):
        print(targets_table(), diagnostics_table(), sep="\n\n")
        return 0
    current = README.read_text(encoding="utf-8")
    fresh = render(current)
    if args.check:
        if fresh != current:
            print("README.md tables are out of date: run `python scripts/readme_tables.py --write`", file=sys.stderr)
            return 1
        return 0
    if fresh != current:
        README.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
