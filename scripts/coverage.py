"""Pipeline coverage over public repositories: of the kernels with a dot in a loop, how many each target pipelines.

    python scripts/coverage.py REPO_DIR [REPO_DIR ...] [-t gfx950 -t sm90 ...] [--json] [--reasons 20]

Each REPO_DIR is one repository (a fetched snapshot, a checkout): its `.py` files holding `@triton.jit` are
translated in-process for every target (nothing is written). A *dot-loop kernel* is a kernel (a jit function no other
jit function of its file calls) with a loop that runs a `tl.dot`/`tl.dot_scaled`, directly or through helpers
(`transpile.analysis.dot_loops`). For each repository and target the table gives the dot-loop kernels, how many the
variant pipelines, and how many are kept as Triton or translated without a pipeline; below it, the reasons given for
the kept ones, grouped by their first clause (the construct), most frequent first. Files the tool rejects as a whole
(syntax errors, kernels defined inside functions) count their dot-loop kernels as "file rejected"; kernels defined
under module-level blocks count as the variant has them: translated block by block where the file's kernels all stand
in such blocks, else kept as written, with TT007. A kernel kept
as Triton because the form that would pipeline it measured slower, with the measurement named in its reason, counts
as *covered* (the table's last figure per target): pipelined + kept with a measurement for each of its loops (or, on
sm90, run on a K-major copy of B, TT046: a measured faster form of the Triton kernel). "pipelined, some launches"
counts the pipelined kernels whose launcher runs the Gluon kernel for some launches only (a flag, least sizes or
grid, a test of the parameters, element types), the others on the source kernel. A kernel whose source Triton's
own compiler rejects (names Triton removed before 3.6, another backend's dialect: the tool's reason says "which
Triton's compiler rejects too") is counted apart as well ("source not Triton"), and the percentages are given over the others too.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path

import libcst as cst

from transpile import cst_walk
from transpile.analysis.dot_loops import dot_loops
from transpile.discover import nested_kernels
from transpile.diagnostics import TranspileError
from transpile.engine import prepare, translate_source
from transpile.language import NOT_TRITON
from transpile.targets import all_targets, get_target

JIT = re.compile(r"@(triton\.)?jit\b|triton\.jit\(")
DOT = re.compile(r"\bdot(_scaled)?\s*\(")
#: a keep reason that names a measurement (a figure against Triton's own compile or run, and where it is recorded)
MEASURED = re.compile(r"measured|bench/RESULTS\.md|\d\.\d+x")
#: where a kernel's keep reason moves on to its next loop (or copy of a loop), each with its own reason
_NEXT_LOOP = re.compile(r"; (?=the loop at line \d+ is not pipelined)")


def measured(reason: str) -> bool:
    """Every loop the keep reason names is kept with a measurement (`MEASURED`): a kernel one of whose loops (or
    unswitched copies of a loop) is kept for another reason is not covered by the others' measurements."""
    return all(MEASURED.search(part) for part in _NEXT_LOOP.split(reason))


def _files(repo: Path) -> list[Path]:
    found = []
    for path in sorted(repo.rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if JIT.search(text) and DOT.search(text):
            found.append(path)
    return found


def _reason_class(reason: str) -> str:
    """The construct a keep reason names, without the lines and names that differ per kernel."""
    text = re.sub(r"`[^`]*`", "`…`", reason)
    text = re.sub(r"\b(line|lines) \d+(-\d+)?", r"\1 N", text)
    text = re.sub(r"\b\d+\b", "N", text)
    text = re.sub(r"^the loop at line N is not pipelined for \S+ \(", "", text)
    return text.split(";")[0].split(" (")[0][:120]


def _dot_in_loop(fn: cst.FunctionDef) -> bool:
    """A `for`/`while` loop of the function calls a dot (`tl.dot`, `tl.dot_scaled`, any spelling)."""
    loops = [n for n in cst_walk.preorder(fn) if isinstance(n, (cst.For, cst.While))]
    return any(isinstance(c.func, cst.Attribute) and c.func.attr.value in ("dot", "dot_scaled")
               or isinstance(c.func, cst.Name) and c.func.value in ("dot", "dot_scaled")
               for loop in loops for c in cst_walk.preorder(loop) if isinstance(c, cst.Call))


def evaluate(repos: list[Path], targets: list[str]) -> dict[str, object]:
    table: dict[str, dict[str, collections.Counter[str]]] = {}
    reasons: dict[str, collections.Counter[str]] = {t: collections.Counter() for t in targets}
    kept: dict[str, list[tuple[str, str, str]]] = {t: [] for t in targets}  # (file, kernel, reason) per target
    for repo in repos:
        rows = table[repo.name] = {t: collections.Counter() for t in targets}
        for path in _files(repo):
            text = path.read_text(encoding="utf-8", errors="replace")
            try:
                prepared = prepare(text, str(path))
            except TranspileError as exc:
                n = len(re.findall(r"@(?:triton\.)?jit", text))
                for t in targets:
                    rows[t]["file rejected"] += n
                    reasons[t][f"file rejected: {exc.diagnostic.code} {_reason_class(exc.diagnostic.message)}"] += n
                continue
            if prepared.nested:  # kernels in module-level blocks: translated block by block, else kept (TT007)
                kernels = {k.name.value for k, _ in nested_kernels(prepared.source) if _dot_in_loop(k)}
            else:
                facts = prepared.facts
                kernels = {name for name, fn in facts.functions.items()
                           if not fn.called_by and dot_loops(facts, fn)}
            if not kernels:
                continue
            for t in targets:
                try:
                    result = translate_source(text, str(path), get_target(t), prepared=prepared)
                except TranspileError as exc:
                    rows[t]["file rejected"] += len(kernels)
                    reasons[t][f"file rejected: {exc.diagnostic.code}"] += len(kernels)
                    continue
                for fn in result.functions:
                    if fn.name not in kernels:
                        continue
                    rows[t]["dot-loop kernels"] += 1
                    if fn.translated and fn.pipelined:  # (a kernel kept as Triton after its loop was planned is not)
                        rows[t]["pipelined"] += 1
                        if _some_launches(fn.dispatch):
                            rows[t]["pipelined, some launches"] += 1
                    elif fn.translated:
                        rows[t]["translated, not pipelined"] += 1
                        reasons[t]["translated without a pipeline"] += 1
                    else:
                        rows[t]["kept as Triton"] += 1
                        if measured(fn.kept_reason) or any(d.code == "TT046" for d in fn.diagnostics):
                            rows[t]["kept, measured slower"] += 1
                        elif NOT_TRITON in fn.kept_reason:
                            rows[t]["source not Triton"] += 1
                        nested = "TT007 " if any(d.code == "TT007" for d in fn.diagnostics) else ""
                        reasons[t][nested + _reason_class(fn.kept_reason)] += 1
                        kept[t].append((str(path), fn.name, fn.kept_reason))
    return {"targets": targets, "table": {r: {t: dict(c) for t, c in rows.items()} for r, rows in table.items()},
            "reasons": {t: c.most_common() for t, c in reasons.items()}, "kept": kept}


def _some_launches(dispatch) -> bool:  # noqa: ANN001 - passes.tma_tiles.Dispatch or None
    """The variant's launcher runs the Gluon kernel only for some launches its tiles can address (a flag, sizes at
    least some value, a grid long enough, a test of the parameters, element types, one wave): a kernel pipelined at
    some launches only, the others running the source kernel. (Not the tests every launch of a form passes where
    its sizes and data do: alignment, 8 warps, the LDS its ring needs.)"""
    if dispatch is None:
        return False
    return bool(dispatch.when or dispatch.at_least or dispatch.grid_at_least or dispatch.source_when
                or dispatch.slow_dtypes or dispatch.one_wave)


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.0f}%" if whole else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repos", nargs="+", type=Path)
    parser.add_argument("-t", "--target", action="append", help="target (repeatable; default: all four)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--reasons", type=int, default=15, help="how many keep reasons to list per target")
    parser.add_argument("--kernels", metavar="TEXT", help="list each kept kernel whose reason contains TEXT "
                        "(file, kernel, reason; '' lists them all)")
    args = parser.parse_args(argv)
    targets = args.target or [t.name for t in all_targets()]
    report = evaluate(args.repos, targets)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    table = report["table"]
    print("| repository | " + " | ".join(f"{t} pipelined / dot-loop kernels (covered)" for t in targets) + " |")
    print("|---|" + "---|" * len(targets))
    totals = {t: collections.Counter() for t in targets}
    for repo, rows in table.items():  # type: ignore[union-attr]
        cells = []
        for t in targets:
            c = rows[t]
            totals[t].update(c)
            covered = c.get("pipelined", 0) + c.get("kept, measured slower", 0)
            some = c.get("pipelined, some launches", 0)
            cells.append(f"{c.get('pipelined', 0)} / {c.get('dot-loop kernels', 0)} ({covered})"
                         + (f", {some} at some launches" if some else ""))
        print(f"| {repo} | " + " | ".join(cells) + " |")
    print("| **all** | " + " | ".join(
        f"**{totals[t]['pipelined']} / {totals[t]['dot-loop kernels']} "
        f"({_pct(totals[t]['pipelined'], totals[t]['dot-loop kernels'])}; covered "
        f"{_pct(totals[t]['pipelined'] + totals[t]['kept, measured slower'], totals[t]['dot-loop kernels'])}; "
        f"{totals[t]['pipelined, some launches']} of the pipelined at some launches only)**"
        for t in targets) + " |")
    # (kernels whose source Triton itself rejects: the tool can neither run nor beat them)
    print("| **all Triton kernels** | " + " | ".join(
        f"{totals[t]['pipelined']} / {totals[t]['dot-loop kernels'] - totals[t]['source not Triton']} "
        f"({_pct(totals[t]['pipelined'], totals[t]['dot-loop kernels'] - totals[t]['source not Triton'])}; covered "
        f"{_pct(totals[t]['pipelined'] + totals[t]['kept, measured slower'], totals[t]['dot-loop kernels'] - totals[t]['source not Triton'])}; "
        f"{totals[t]['source not Triton']} not Triton)" for t in targets) + " |")
    for t in targets:
        print(f"\n{t}: kept or not pipelined, by reason")
        for reason, n in report["reasons"][t][:args.reasons]:  # type: ignore[index]
            print(f"  {n:4d}  {reason}")
        if args.kernels is not None:
            for path, name, reason in report["kept"][t]:  # type: ignore[index]
                if args.kernels in reason:
                    print(f"    {path}: {name}: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
