"""Compile differential over kernel files: does every variant compile where its source compiles?

    python scripts/compile_differential.py DIR_OR_FILE [...] -t sm90 [--jobs 2] [--timeout 300] [--json OUT.json]
        [--sample N]

For each `.py` file holding `@triton.jit` (with `--sample N`, N files per repository, picked by a hash of their
paths, so a rerun takes the same ones), the file is translated for the target and every kernel of the variant is
compiled twice, as `transpile verify --isa` does it (`transpile.verify.isa_compare`): the source `@triton.jit` kernel
and the variant's kernel (Gluon, or the source kept as Triton), with the same argument types, constexprs and warps.
Nobody gives the arguments here, so they are guessed: pointers (the parameters a kernel addresses memory from, and
`*_ptr` names) `*fp16`, or `*i32` where the name says they hold indices, lengths or counts, other runtime arguments
`i32`; constexprs from their default or the autotune configs, else by
name (block sizes 64, group sizes 8, flags False, stages 2, anything else 64). A kernel whose source does not compile
with the guess says nothing and is counted apart; a variant that fails where its source compiles is a bug of the tool.

Each file runs in its own process (a compile that hangs is cut at `--timeout` seconds and counted). Run it under the
Triton the target's variants must compile with (sm90: 3.6 as well as 3.9). Exit status 1 when a variant failed where
its source compiled.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import importlib.abc
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

JIT = re.compile(r"@(triton\.)?jit\b|triton\.jit\(")
_FLAG = re.compile(r"^(IS|HAS|USE|ENABLE|EVEN|DO|APPLY|WITH|NEED|SAVE|RETURN|CAUSAL|FUSE|SHOULD)(_|$)|_FLAG$", re.I)


#: pointers to indices, lengths and counts (`indices_ptr`, `cu_seqlens`, `expert_ids_ptr`, `token_counts`): int32
_INDEX = re.compile(r"(^|_)(idx|index|indices|ids?|offsets?|offs|table|tables|lens?|lengths?|seqlens?|starts?|ends?|"
                    r"counts?|num|loc|locs|sorted|expert|experts|slots?|mapping|positions?|pos|batch)(_|$)", re.I)


def guess_constexpr(name: str) -> object:
    """A value for a constexpr nobody gave: by its name, as public kernels name them."""
    upper = name.upper()
    if _FLAG.search(upper) or upper in ("CAUSAL", "IS_CAUSAL", "TRANSPOSE", "PERSISTENT"):
        return False
    if "STAGES" in upper:
        return 2
    if "WARPS" in upper:
        return 4
    if "GROUP" in upper:
        return 8
    if "SPLIT" in upper:
        return 1
    return 64


def guessed_values(path: Path, result) -> dict[str, object]:  # noqa: ANN001 - engine.TranslationResult
    """Argument types and constexprs for every kernel of `path` that neither a default nor a config gives."""
    from transpile.analysis.launch_alignment import pointer_params
    from transpile.verify import _kernel_facts, _is_pointer_name

    values: dict[str, object] = {}
    for _source, facts, fn in _kernel_facts(result).values():
        pointers = pointer_params(facts, fn)
        configured = set().union(*(c.values for c in fn.autotune_configs)) if fn.autotune_configs else set()
        for param in fn.params:
            name = param.name
            if name in values or name in configured:
                continue
            if param.is_constexpr or name in fn.heuristics:
                if param.default is None:
                    values[name] = guess_constexpr(name)
            elif _is_pointer_name(name) or name in pointers:
                values[name] = "*i32" if _INDEX.search(name) else "*fp16"
    return values


class _Absent(types.ModuleType):
    """A module of the file's package (or a library) that does not import on this machine (one that looks for a GPU
    or a ROCm install when imported): every attribute is another such value, a call returns one, a decorator call
    returns the function it decorates. Only what a kernel's compile reads matters here; a kernel that reads such a
    value fails for the source and the variant alike, and is counted with the sources that do not compile."""

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Absent(f"{self.__name__}.{name}")

    def __call__(self, *args: object, **kwargs: object) -> object:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return _Absent(f"{self.__name__}()")

    def __iter__(self):  # noqa: ANN204
        return iter(())


class _Lenient(importlib.abc.MetaPathFinder):
    """Imports for a file of a package, without running what a machine without a GPU cannot: the packages of `top`
    are imported without their `__init__.py` (paths only), a module of theirs that fails to import is an `_Absent`,
    and so is a library this machine does not have."""

    def __init__(self, top: str) -> None:
        self.top = top
        self.busy: set[str] = set()

    def find_spec(self, name: str, path, target=None):  # noqa: ANN001, ANN201
        if name in self.busy:
            return None
        self.busy.add(name)
        try:
            spec = importlib.util.find_spec(name)
        except Exception:  # noqa: BLE001 - a parent that did not import
            spec = None
        finally:
            self.busy.discard(name)
        head = name.split(".")[0]
        if head != self.top and (spec is not None or head in sys.stdlib_module_names):
            return None  # (another library, installed here, or Python's own: imported as usual)
        return importlib.util.spec_from_loader(name, _LenientLoader(spec, head == self.top))


class _LenientLoader(importlib.abc.Loader):
    def __init__(self, spec, own: bool) -> None:  # noqa: ANN001
        self.spec, self.own = spec, own

    def create_module(self, spec):  # noqa: ANN001, ANN201
        return _Absent(spec.name)

    def exec_module(self, module) -> None:  # noqa: ANN001
        spec = self.spec
        if spec is None:
            return
        if spec.submodule_search_locations is not None:
            module.__path__ = list(spec.submodule_search_locations)
            if self.own:
                return  # (a package of the file's own: its `__init__.py` is left out)
        try:
            real = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = real
            spec.loader.exec_module(real)
        except BaseException:  # noqa: BLE001 - absent on this machine: stays an `_Absent`
            sys.modules[spec.name] = module
            return


def run_one(path: str, target_name: str) -> dict[str, object]:
    """Translate and compile one file (in this process): a record of each kernel's two compiles."""
    from transpile.diagnostics import TranspileError
    from transpile.engine import translate_file
    from transpile.targets import get_target
    from transpile.verify import isa_compare, package_of

    record: dict[str, object] = {"file": path, "target": target_name, "kernels": []}
    package, _root = package_of(Path(path))
    if package:
        sys.meta_path.insert(0, _Lenient(package.split(".")[0]))
    try:
        result = translate_file(Path(path), get_target(target_name))
    except TranspileError as exc:
        record["error"] = exc.diagnostic.format()
        return record
    record["translated"] = [f.name for f in result.functions if f.translated and not f.is_helper]
    if not record["translated"]:
        return record  # (every kernel kept as written: its compile is the source's)
    values = guessed_values(Path(path), result)
    tempfile.tempdir = tempfile.mkdtemp(prefix="transpile-diff-")
    try:
        comparisons = isa_compare(result, values, all_configs=False)
    except TranspileError as exc:
        record["error"] = exc.diagnostic.format()
        return record
    except Exception as exc:  # noqa: BLE001 - a file whose import fails, reported as such
        record["error"] = f"{type(exc).__name__}: {exc}"[:400]
        return record
    for c in comparisons:
        record["kernels"].append({"kernel": c.kernel, "status": c.status, "source_ok": c.source is not None,
                                  "variant_ok": c.variant is not None, "message": c.message[:400]})
    return record


def candidate_files(paths: list[str], sample: int | None) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        found = sorted(p.rglob("*.py")) if p.is_dir() else [p]
        found = [f for f in found if JIT.search(f.read_text(encoding="utf-8", errors="replace"))]
        if sample is not None:
            found = sorted(found, key=lambda f: hashlib.sha256(str(f.relative_to(p) if p.is_dir() else f).encode())
                           .hexdigest())[:sample]
        files.extend(sorted(found))
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("-t", "--target", required=True)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=int, default=300)
    parser.add_argument("--sample", type=int, default=None, help="files per repository (directory argument)")
    parser.add_argument("--json", dest="json_out", default=None)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.paths[0], args.target)))
        return 0
    files = candidate_files(args.paths, args.sample)

    def child(path: Path) -> dict[str, object]:
        env = dict(os.environ, TRITON_ALWAYS_COMPILE="1")
        try:
            done = subprocess.run([sys.executable, __file__, "--one", str(path), "-t", args.target],
                                  capture_output=True, text=True, timeout=args.timeout, env=env)
        except subprocess.TimeoutExpired:
            return {"file": str(path), "target": args.target, "kernels": [], "timeout": True}
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode or not lines:
            return {"file": str(path), "target": args.target, "kernels": [],
                    "crash": (done.stderr.strip().splitlines() or ["?"])[-1][:400]}
        return json.loads(lines[-1])

    with ThreadPoolExecutor(args.jobs) as pool:
        records = list(pool.map(child, files))
    counts: collections.Counter[str] = collections.Counter()
    failures = []
    for r in records:
        counts["files"] += 1
        counts["files with a translated kernel"] += bool(r.get("translated"))
        counts["timeouts"] += bool(r.get("timeout"))
        counts["crashes"] += bool(r.get("crash"))
        counts["files not importable or typed"] += bool(r.get("error"))
        for k in r["kernels"]:
            if not k["source_ok"]:
                counts["kernels whose source does not compile with the guess"] += 1
            elif k["variant_ok"]:
                counts["kernels compiled both ways"] += 1
            else:
                counts["variants failing where the source compiles"] += 1
                failures.append((r["file"], k["kernel"], k["message"]))
    print(f"compile differential, {args.target} (Triton {_triton_version()}):")
    for key, n in counts.items():
        print(f"  {key}: {n}")
    for file, kernel, message in failures:
        print(f"FAIL {file} {kernel}: {message}")
    for r in records:
        if r.get("crash") or r.get("timeout"):
            print(f"{'TIMEOUT' if r.get('timeout') else 'CRASH'} {r['file']}: {r.get('crash', '')}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(records, indent=1), encoding="utf-8")
    return 1 if failures else 0


def _triton_version() -> str:
    import triton

    return triton.__version__


if __name__ == "__main__":
    sys.exit(main())
