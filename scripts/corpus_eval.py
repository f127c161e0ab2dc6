"""Run the tool over a directory of public Triton files and report what happens (issues 9 and 12).

    python scripts/corpus_eval.py DIR [DIR ...] [-t sm90 -t gfx942 ...] [--json] [--top 20] [--refusals OUT.json]

For every `.py` file holding `@triton.jit` under the directories, and every target (all four by default), it
translates in-process (nothing written) and counts: files, kernels and helpers, crashes (a traceback of the tool, or
TT090), bad input (TT00x errors), per function "pipelined" / "translated" / "kept as Triton", the refusal codes and
their most common messages, variants that are not valid Python (`compile`) or read a name they never define
(`transpile.names`), and the time per file; `--refusals OUT` writes each refusal with its file, line and message.
Exit status 1 when anything crashed or a variant is not valid Python.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import time
import traceback
from pathlib import Path

from transpile.diagnostics import TranspileError
from transpile.engine import prepare, translate_source
from transpile.language import NOT_TRITON
from transpile.names import undefined_names
from transpile.targets import all_targets, get_target

JIT = re.compile(r"@(triton\.)?jit\b|triton\.jit\(")


def _kept_category(reason: str, codes: set[str]) -> str:
    """Why a function is kept as Triton, in a word or two: refused (a construct the tool cannot translate, or a kernel
    defined below module level where the tool does not translate it: TT007), source not GPU Triton (a construct
    Triton's own compiler rejects for GPUs, as other backends' dialects write), call graph (a caller or callee is
    kept), library helper (a helper other modules import, not called here), test's own kernel (one a test function
    builds for its own checks), no scaled MMA for it (`tl.dot_scaled` where the target has no microscaled MMA for
    its formats: Triton upcasts in software), slower as Gluon (the rest: a dot loop
    Triton's own compiler pipelines better than an unpipelined variant, or a construct measured slower). `codes`: the
    codes of the function's diagnostics."""
    if NOT_TRITON in reason:  # (a construct Triton's own compiler rejects for GPUs: another backend's dialect)
        return "source not GPU Triton"
    if reason.startswith("it is not translated") or "without defining it" in reason or "never defines" in reason \
            or "TT007" in codes:
        return "refused"
    if reason.startswith(("it is called by", "it calls the helper")):
        return "call graph"
    if "it is a test's own kernel" in reason:
        return "test's own kernel"
    if reason.startswith("it is a helper for other modules"):
        return "library helper"
    if reason.startswith("`tl.dot_scaled"):
        return "no scaled MMA for it"
    return "slower as Gluon"


def _files(dirs: list[Path]) -> list[Path]:
    found = []
    for d in dirs:
        paths = [d] if d.is_file() else sorted(d.rglob("*.py"))
        for p in paths:
            try:
                if JIT.search(p.read_text(encoding="utf-8", errors="replace")):
                    found.append(p)
            except OSError:
                continue
    return found


def evaluate(dirs: list[Path], targets: list[str]) -> dict[str, object]:
    files = _files(dirs)
    counts: collections.Counter[str] = collections.Counter()
    refusals: collections.Counter[str] = collections.Counter()
    reasons: collections.Counter[str] = collections.Counter()
    kept_why: collections.Counter[str] = collections.Counter()
    crashes: list[dict[str, str]] = []
    invalid: list[dict[str, str]] = []
    undefined: list[dict[str, str]] = []
    seconds: list[float] = []
    listed: list[dict[str, object]] = []  # every refusal, located
    # per directory given (a repository): functions x targets, and those refused
    per_dir: dict[str, collections.Counter[str]] = {str(d): collections.Counter() for d in dirs}
    for path in files:
        home = next((str(d) for d in dirs if d == path or d in path.parents), str(path.parent))
        per_dir.setdefault(home, collections.Counter())
        text = path.read_text(encoding="utf-8", errors="replace")
        start = time.perf_counter()
        try:
            prepared = prepare(text, str(path))
        except TranspileError as exc:
            counts["bad input" if exc.diagnostic.code != "TT090" else "crash"] += 1
            if exc.diagnostic.code == "TT090":
                crashes.append({"file": str(path), "target": "-", "error": exc.diagnostic.format()})
            seconds.append(time.perf_counter() - start)
            continue
        except Exception:  # noqa: BLE001 - a crash of the tool is what this script counts
            crashes.append({"file": str(path), "target": "-", "error": traceback.format_exc(limit=3)})
            seconds.append(time.perf_counter() - start)
            continue
        own: set[tuple[str, str]] | None = None
        for name in targets:
            try:
                result = translate_source(text, str(path), get_target(name), prepared=prepared)
            except TranspileError:
                counts["bad input"] += 1
                continue
            except Exception:  # noqa: BLE001
                crashes.append({"file": str(path), "target": name, "error": traceback.format_exc(limit=3)})
                continue
            try:
                compile(result.text, f"{path.stem}_{name}.py", "exec")
            except SyntaxError as exc:
                invalid.append({"file": str(path), "target": name, "error": str(exc)})
            else:
                if own is None:  # (the source's own: a star import, a name another module defines)
                    own = {(u.function, u.name) for u in undefined_names(text)}
                for u in undefined_names(result.text):
                    if (u.function, u.name) in own:
                        continue
                    undefined.append({"file": str(path), "target": name, "name": u.name, "function": u.function})
            for fn in result.functions:
                counts["helpers" if fn.is_helper else "kernels"] += 1
                status = ("pipelined" if fn.pipelined else "translated") if fn.translated else "kept as Triton"
                counts[status] += 1
                per_dir[home]["functions"] += 1
                if not fn.translated:
                    category = _kept_category(fn.kept_reason, {d.code for d in fn.diagnostics})
                    kept_why[category] += 1
                    per_dir[home]["refused"] += category == "refused"
                for d in fn.diagnostics:
                    if d.severity.value == "refusal":
                        listed.append({"file": str(path), "target": name, "function": fn.name, "code": d.code,
                                       "line": d.line, "col": d.col, "message": d.message})
                        refusals[d.code] += 1
                        reasons[f"{d.code} {re.sub(r'`[^`]*`', '`…`', d.message)[:110]}"] += 1
        seconds.append(time.perf_counter() - start)
    functions = counts["kernels"] + counts["helpers"]
    return {
        "files": len(files), "targets": targets, "functions": functions, "counts": dict(counts),
        "kept_as_triton_pct": round(100.0 * counts["kept as Triton"] / functions, 1) if functions else 0.0,
        "kept_why": dict(kept_why), "refused_pct": round(100.0 * kept_why["refused"] / functions, 1) if functions else 0.0,
        "refusal_codes": dict(refusals), "top_reasons": reasons.most_common(),
        "per_directory": {d: {"functions": c["functions"], "refused": c["refused"],
                              "refused_pct": round(100.0 * c["refused"] / c["functions"], 1) if c["functions"] else 0.0}
                          for d, c in per_dir.items()},
        "crashes": crashes, "invalid_python": invalid, "undefined_names": undefined,
        "ms_per_file": round(1000.0 * sum(seconds) / len(seconds), 1) if seconds else 0.0,
        "refusals": listed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("-t", "--target", action="append", help="target (repeatable; default: all four)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--top", type=int, default=15, help="how many refusal reasons to list")
    parser.add_argument("--refusals", type=Path, metavar="OUT",
                        help="also write every refusal (file, target, function, code, line, col, message) as JSON")
    args = parser.parse_args(argv)
    targets = args.target or [t.name for t in all_targets()]
    report = evaluate(args.dirs, targets)
    listed = report.pop("refusals")
    if args.refusals:
        args.refusals.write_text(json.dumps(listed, indent=1) + "\n", encoding="utf-8")
    if args.json:
        report["top_reasons"] = report["top_reasons"][:args.top]  # type: ignore[index]
        print(json.dumps(report, indent=1))
    else:
        c = report["counts"]
        print(f"files {report['files']}, targets {', '.join(targets)}, functions x targets {report['functions']}")
        print(f"crashes {len(report['crashes'])}, invalid Python {len(report['invalid_python'])}, "  # type: ignore[arg-type]
              f"undefined names the variants add {len(report['undefined_names'])}, bad input {c.get('bad input', 0)}")  # type: ignore[union-attr,arg-type]
        print(f"pipelined {c.get('pipelined', 0)}, translated {c.get('translated', 0)}, kept as Triton "  # type: ignore[union-attr]
              f"{c.get('kept as Triton', 0)} ({report['kept_as_triton_pct']}%), {report['ms_per_file']} ms per file")  # type: ignore[union-attr]
        print("kept as Triton because: " + ", ".join(f"{k} {v}" for k, v in sorted(report["kept_why"].items()))  # type: ignore[union-attr]
              + f" (refused: {report['refused_pct']}% of functions x targets)")
        if len(args.dirs) > 1:
            for d, c in report["per_directory"].items():  # type: ignore[union-attr]
                print(f"  {d}: functions x targets {c['functions']}, refused {c['refused']} ({c['refused_pct']}%)")
        for reason, n in report["top_reasons"][:args.top]:  # type: ignore[index]
            print(f"  {n:5d}  {reason}")
        for crash in report["crashes"]:  # type: ignore[union-attr]
            print(f"CRASH {crash['file']} [{crash['target']}]\n{crash['error']}")
    return 1 if report["crashes"] or report["invalid_python"] else 0


if __name__ == "__main__":
    sys.exit(main())
