"""The generated tables of README.md and docs/: the targets (from `transpile.targets`), the command line's options
(from the commands' `--help`) and the diagnostics (from `transpile.diagnostics.CODES`).

    python scripts/readme_tables.py            # print every table
    python scripts/readme_tables.py --write    # rewrite them in their files, between their marker comments
    python scripts/readme_tables.py --check    # exit 1 when a file is out of date (tests/test_readme.py does this)

A table lives between `<!-- NAME:start ... -->` and `<!-- NAME:end -->` in the file `TABLES` names for it.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
WIDTH = 120  # README.md's lines fit this many columns (tests/test_readme.py)


def targets_table() -> str:
    """The targets in README.md: narrow enough for its 120 columns (the matrix instruction without its Gluon names)."""
    from transpile.targets import all_targets

    rows = ["| target | aliases | `tl.dot` becomes | copies into shared memory | warp size | shared memory "
            "| oldest Triton |", "|---|---|---|---|---|---|---|"]
    for t in all_targets():
        aliases = ", ".join(f"`{a}`" for a in t.aliases) or "-"
        rows.append(f"| `{t.name}` | {aliases} | {t.mma.split(' (')[0]} | {t.copy_engine} | {t.warp_size} | "
                    f"{t.shared_memory_bytes // 1024} KiB | {'.'.join(map(str, t.min_triton))} |")
    return "\n".join(rows)


def targets_detail_table() -> str:
    """The targets in docs/PIPELINES.md: the Gluon instruction and layout of each target's `tl.dot` too."""
    from transpile.targets import all_targets

    rows = ["| target | `tl.dot` becomes (Gluon instruction, layout) | copies into shared memory |", "|---|---|---|"]
    rows += [f"| `{t.name}` | {t.mma} | {t.copy_engine} |" for t in all_targets()]
    return "\n".join(rows)


def _wrap(text: str, first: str) -> str:
    return "\n".join(textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent="  ", break_long_words=False,
                                   break_on_hyphens=False))


def options_list() -> str:
    """Every command with its help and its options with theirs, as `--help` prints them, wrapped at 120 columns; an
    option a subcommand shares (same names, same help) with a command above it is named, not described again."""
    import typer.main
    from transpile.cli.app import app, tools

    commands = [("transpile PATH...", typer.main.get_command(app))]
    commands += [(f"transpile {name} FILE", command)
                 for name, command in sorted(typer.main.get_command(tools).commands.items())]
    seen: set[tuple[tuple[str, ...], str]] = set()
    blocks = []
    for usage, command in commands:
        lines, shared = [_wrap(command.help or "", f"`{usage}`: "), ""], []
        for param in command.params:
            names = tuple(sorted((o for o in param.opts if o.startswith("-") and o not in ("-h", "--help")),
                                 key=lambda o: (len(o), o)))
            if not names:
                continue
            metavar = f" {param.metavar}" if getattr(param, "metavar", None) and not param.is_flag else ""
            spelled = ", ".join(f"`{n}`" for n in names[:-1]) + ", " * (len(names) > 1) + f"`{names[-1]}{metavar}`"
            if (names, param.help) in seen:
                shared.append(spelled)
                continue
            seen.add((names, param.help))
            lines.append(_wrap(param.help or "", f"- {spelled}: "))
        if shared:
            lines.append(_wrap(", ".join(shared) + ": as above.", "- "))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n\n`-h`, `--help`: the options of a command."


def diagnostics_table() -> str:
    from transpile.diagnostics import CODES

    rows = ["| code | severity | meaning |", "|---|---|---|"]
    rows += [f"| `{code}` | {severity.value} | {meaning} |" for code, (severity, meaning) in sorted(CODES.items())]
    return "\n".join(rows)


#: marker name -> (the file it lives in, relative to the repository root; what makes it)
TABLES = {
    "targets": ("README.md", targets_table),
    "options": ("README.md", options_list),
    "targets-detail": ("docs/PIPELINES.md", targets_detail_table),
    "diagnostics": ("docs/DIAGNOSTICS.md", diagnostics_table),
}
FILES = sorted({file for file, _ in TABLES.values()})


def render(text: str, file: str = "README.md") -> str:
    """`text` (the text of `file`) with each of its `<!-- NAME:start -->...<!-- NAME:end -->` blocks replaced by the
    current table."""
    for name, (home, make) in TABLES.items():
        if home != file:
            continue
        pattern = re.compile(rf"(<!-- {name}:start[^>]*-->\n).*?(<!-- {name}:end -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"{file} has no `<!-- {name}:start -->` ... `<!-- {name}:end -->` block")
        text = pattern.sub(lambda m, make=make: m.group(1) + make() + "\n" + m.group(2), text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the tables in their files")
    mode.add_argument("--check", action="store_true", help="exit 1 when a file's tables are out of date")
    args = parser.parse_args()
    if not (args.write or args.check):
        print(*(make() for _, make in TABLES.values()), sep="\n\n")
        return 0
    stale = []
    for file in FILES:
        path = ROOT / file
        current = path.read_text(encoding="utf-8")
        fresh = render(current, file)
        if fresh != current:
            stale.append(file)
            if args.write:
                path.write_text(fresh, encoding="utf-8")
    if args.check and stale:
        print(f"{', '.join(stale)}: tables out of date: run `python scripts/readme_tables.py --write`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
