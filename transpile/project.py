"""Running the tool over files and directories: configuration, variant paths, write/diff/check, atomic writes."""

from __future__ import annotations

import codecs
import dataclasses
import difflib
import fnmatch
import gc
import os
import shlex
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from transpile import __version__
from transpile.passes.tma_tiles import Dispatch, Tile
from transpile.atomic import write_atomic
from transpile.config import Config, load_config, project_config
from transpile.diagnostics import Diagnostic, Severity, TranspileError
from transpile.cache import TranslationCache, recording, stop_recording
from transpile.engine import (
    HEADER_HASH,
    HEADER_SOURCE,
    HEADER_TOOL,
    KernelOutcome,
    Prepared,
    TranslationResult,
    is_generated,
    prepare,
    translate_source,
    variant_path,
)
from transpile.formatting import FormatError, FormatStyle, format_texts, project_style, same_code
from transpile.source import decode_source, file_kind, parse_source, read_source, set_location
from transpile.targets import Target, get_target

# A run over at least this many files translates them in worker processes (`Project._translate_in_parallel`);
# TRANSPILE_JOBS=1 keeps everything in one process.
PARALLEL_FILES = 8

# Collections of the cyclic garbage collector: see `tune_gc`.
GC_THRESHOLD = (100_000, 50, 50)

SKIP_DIRS = {".git", ".hg", ".venv", "venv", "__pycache__", "node_modules", ".tox", ".mypy_cache", "build", "dist"}


def tune_gc() -> None:
    """Fewer garbage collections for a run of the tool. A translation allocates millions of small objects (libcst
    nodes, most of them acyclic and alive until the file is done): with Python's default thresholds the collector ran
    about 2,400 times over the fixtures x 4 targets and took about a fifth of the CPU time, finding little to free.
    Everything imported so far is frozen (never scanned again; worker processes forked later share it unchanged).
    Output does not depend on it; memory stays about the same (the trees are not cyclic garbage)."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


@dataclass
class Outcome:
    """One (source file, target) pair."""

    source: str
    target: str
    variant: str
    status: str  # written | unchanged | missing | stale | up-to-date | would-write | error | skipped | orphaned
    command: str
    reason: str = ""
    diff: str = ""
    kernels: list[dict[str, object]] = field(default_factory=list)
    line: int = 1  # where in the variant the message points (an orphan: at the source path in its header)
    col: int = 1

    def as_dict(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items()
                if (k != "diff" or v) and (k not in ("line", "col") or self.status == "orphaned")}


@dataclass
class Run:
    outcomes: list[Outcome] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        if any(d.severity is Severity.ERROR for d in self.diagnostics):
            return 2
        if any(o.status in ("missing", "stale", "orphaned") for o in self.outcomes):
            return 1
        return 0

    def as_dict(self) -> dict[str, object]:
        return {
            "tool_version": __version__,
            "exit_code": self.exit_code,
            "seconds": round(self.seconds, 3),
            "outcomes": [o.as_dict() for o in self.outcomes],
            "diagnostics": [d.as_dict() for d in self.diagnostics],
        }


class Project:
    def __init__(self, config: Config, targets: list[str], out_dir: Path | None, exclude: list[str],
                 gluon_always: bool = False, source_root: Path | None = None, cache: bool = True) -> None:
        self.config = config
        self.use_cache = cache  # the persistent cache of translations (transpile.cache), unless TRANSPILE_NO_CACHE=1
        self.gluon_always = gluon_always or config.gluon_always
        # With an out-dir, variants mirror the source tree below this root: `--source-root`, else the project root
        # (the pyproject.toml's directory), else (no pyproject.toml) the common parent of the paths of the run.
        self.source_root = source_root.resolve() if source_root is not None else None
        self._paths_root: Path | None = None
        names = targets or config.targets
        if not names:
            raise TranspileError(Diagnostic("<command line>", 1, 1, "TT004",
                                            "no target: pass --target (or set `targets` in [tool.triton-transpile])"))
        seen: dict[str, Target] = {}
        for name in names:
            try:
                target = get_target(name)
            except TranspileError as exc:
                if targets:
                    raise
                # a configured target: the message points at `targets` in pyproject.toml
                raise TranspileError(config.diagnostic("targets", exc.diagnostic.code,
                                                       exc.diagnostic.message)) from None
            seen.setdefault(target.name, target)
        self.targets = list(seen.values())
        self.out_dir = out_dir if out_dir is not None else config.out_dir
        self.exclude = [*config.exclude, *exclude]
        self._prepared: dict[Path, tuple[Prepared, list[tuple[str, str | None]]]] = {}
        self._precomputed: dict[tuple[Path, str], TranslationResult | Diagnostic] = {}
        self._cache: TranslationCache | None = None
        self._style: FormatStyle | None = None
        self._resolved: dict[Path, Path] | None = None  # Path.resolve() during a run (`_resolve`)
        self._bom: set[Path] = set()  # sources that begin with a UTF-8 BOM: their variants do too

    @property
    def style(self) -> FormatStyle:
        """The layout of the variants: the project's ruff or black settings (`transpile.formatting.project_style`).
        Raises TranspileError (TT005) for a formatter configuration that cannot be read."""
        if self._style is None:
            self._style = project_style(self.config.root)
        return self._style

    # ---- paths ----------------------------------------------------------------------------------------------------

    def _resolve(self, path: Path) -> Path:
        """``path.resolve()``, once per path during a run (`run`): headers, commands, variant paths and messages ask
        it of the same few paths thousands of times (a system call per part of the path each time); nothing moves
        during a run, and the working directory does not change."""
        memo = self._resolved
        if memo is None:
            return path.resolve()
        resolved = memo.get(path)
        if resolved is None:
            resolved = memo[path] = path.resolve()
        return resolved

    def display(self, path: Path) -> str:
        """Path as written into headers and messages: relative to the project root when under it (stable)."""
        resolved = self._resolve(path)
        try:
            return resolved.relative_to(self._resolve(self.config.root)).as_posix()
        except ValueError:
            return path.as_posix()

    def excluded(self, path: Path) -> bool:
        shown = self.display(path)
        return any(fnmatch.fnmatch(shown, pattern) or fnmatch.fnmatch(shown, f"{pattern.rstrip('/')}/*")
                   for pattern in self.exclude)

    def collect(self, paths: list[Path], diagnostics: list[Diagnostic]) -> list[tuple[Path, bool]]:
        """(file, named explicitly) pairs: named files as given; directories searched for *.py files."""
        files: list[tuple[Path, bool]] = []
        for path in paths:
            if path.is_dir():
                for root, dirs, names in os.walk(path):
                    dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
                    for name in sorted(names):
                        candidate = Path(root) / name
                        if name.endswith(".py") and not self.excluded(candidate):
                            if _regular(candidate):
                                files.append((candidate, False))
                            else:  # (a FIFO would block the run forever: never opened)
                                kind = file_kind(candidate.stat().st_mode)
                                diagnostics.append(Diagnostic(self.display(candidate), 1, 1, "TT002", f"is not a "
                                                              f"regular file ({kind}); skipped, not read"))
            elif path.exists():
                if not self.excluded(path):
                    files.append((path, True))
            else:
                diagnostics.append(Diagnostic(path.as_posix(), 1, 1, "TT002", "no such file or directory"))
        return files

    def mirror_root(self, source: Path) -> Path:
        """The directory whose tree an out-dir mirrors for `source` (see `__init__`)."""
        if self.source_root is not None:
            return self.source_root
        resolved = self._resolve(source)
        root = self._resolve(self.config.root)
        if self.config.anchored and resolved.is_relative_to(root):
            return root
        if self._paths_root is not None:
            return self._paths_root
        return resolved.parent  # one file, outside a run

    def command(self, source: Path, target: Target) -> str:
        parts = ["transpile", self.display(source), "--target", target.name]
        configured = self._resolve(self.config.out_dir) if self.config.out_dir is not None else None
        if self.out_dir is not None and self._resolve(self.out_dir) != configured:
            parts += ["--out-dir", self.display(self.out_dir)]
        if self.gluon_always and not self.config.gluon_always:
            parts.append("--gluon-always")
        if self.out_dir is not None:
            root = self.mirror_root(source)
            if not self.config.anchored or root != self._resolve(self.config.root):
                # Not the default root: the command names it, so that it writes the same path when run alone.
                parts += ["--source-root", self.display(root) or "."]
        return shlex.join(parts)

    def variant(self, source: Path, target: Target) -> Path:
        out_dir = self.out_dir
        if out_dir is None:
            return variant_path(source, target)
        if not out_dir.is_absolute():
            out_dir = Path.cwd() / out_dir
        root = self.mirror_root(source)
        try:
            relative = self._resolve(source).parent.relative_to(root)
        except ValueError:
            raise TranspileError(Diagnostic(self.display(source), 1, 1, "TT006",
                                            f"is outside the source root `{self.display(root)}`: its variant has no "
                                            "place under the out-dir (pass --source-root with a parent of it)"))
        return variant_path(source, target, out_dir / relative)

    # ---- the run --------------------------------------------------------------------------------------------------

    def run(self, paths: list[Path], mode: str, skip_files_without_kernels: bool = False, progress: bool = False) -> Run:
        self._resolved = {}
        try:
            return self._run(paths, mode, skip_files_without_kernels, progress)
        finally:
            self._resolved = None

    def _run(self, paths: list[Path], mode: str, skip_files_without_kernels: bool, progress: bool) -> Run:
        started = time.perf_counter()
        result = Run()
        result.diagnostics.extend(self.config.notes)
        files = self.collect(paths, result.diagnostics)
        existing = [p.resolve() if p.is_dir() else p.resolve().parent for p in paths if p.exists()]
        self._paths_root = Path(os.path.commonpath(existing)) if existing else None
        texts: dict[Path, str | None] = {}
        for source, named in files:
            if source not in texts:
                texts[source] = self._read(source, named, skip_files_without_kernels, result)
        if self._collisions([f for f, _ in files if texts[f] is not None], result, mode):
            result.seconds = time.perf_counter() - started
            return result  # nothing written
        work = [(f, named, t) for f, named in files for t in self.targets]
        try:
            style = self.style
        except TranspileError as exc:
            result.diagnostics.append(exc.diagnostic)
            result.seconds = time.perf_counter() - started
            return result  # nothing written
        sources = [f for f, _ in files if texts.get(f) is not None]
        self._cache = TranslationCache.open() if self.use_cache else None
        self._precomputed = self._cached(sources, texts)
        self._precomputed.update(self._translate_in_parallel(
            [f for f in sources if any((f, t.name) not in self._precomputed for t in self.targets)], texts))
        pending: list[_Pending] = []
        bar = None
        if progress and len(work) > 8:
            from rich.progress import Progress

            bar = Progress(transient=True)
            bar.start()
            task = bar.add_task("transpiling", total=len(work))
        try:
            for source, named, target in work:
                text = texts[source]
                if text is not None:
                    one = self._one(source, text, target, mode, named and not skip_files_without_kernels, result)
                    if one is not None:
                        pending.append(one)
                if bar is not None:
                    bar.advance(task)
        finally:
            if bar is not None:
                bar.stop()
        self._finish(pending, mode, style, result)
        if mode == "check":
            self._orphans(paths, result)
        result.seconds = time.perf_counter() - started
        return result

    def _orphans(self, paths: list[Path], run: Run) -> None:
        """`--check` over a directory: the variants the tool wrote there (or in its mirror under the out-dir) whose
        header names a source that no longer exists (deleted, or renamed: the new name's variant is another file)."""
        directories: list[Path] = []
        for path in paths:
            if not path.is_dir():
                continue
            directories.append(path)
            if self.out_dir is not None:
                out_dir = self.out_dir if self.out_dir.is_absolute() else Path.cwd() / self.out_dir
                try:
                    directories.append(out_dir / self._resolve(path).relative_to(self.mirror_root(path / "_")))
                except ValueError:
                    pass
        seen: set[Path] = set()
        for directory in directories:
            for root, dirs, names in os.walk(directory):
                dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
                for name in sorted(names):
                    variant = Path(root) / name
                    resolved = self._resolve(variant)
                    if not name.endswith(".py") or resolved in seen or self.excluded(variant):
                        continue
                    seen.add(resolved)
                    orphan = self._orphan(variant)
                    if orphan is not None:
                        run.outcomes.append(orphan)

    def _orphan(self, variant: Path) -> Outcome | None:
        """`variant`'s outcome if it is a variant the tool wrote whose source no longer exists, else None."""
        try:
            if not stat.S_ISREG(variant.stat().st_mode):
                return None
            with variant.open("rb") as handle:
                head = decode_source(handle.read(2000), errors="replace")
        except OSError:
            return None
        header = HEADER_SOURCE.search(head)
        if header is None:
            return None
        target, source = header.group(1), header.group(2)
        # As the header names it (relative to the project root); a header written by a run whose root was the
        # current directory may name it beside the variant.
        if (self.config.root / source).exists() or (variant.parent / Path(source).name).exists():
            return None
        shown = self.display(variant)
        return Outcome(source, target, shown, "orphaned", f"rm {shlex.quote(shown)}",
                       f"its source `{source}` does not exist", line=head.count("\n", 0, header.start(2)) + 1,
                       col=header.start(2) - head.rfind("\n", 0, header.start(2)))

    def _collisions(self, sources: list[Path], run: Run, mode: str = "write") -> bool:
        """TT006 for every variant path two sources (or a source and itself a source) would share, and, when writing,
        for every variant path that holds a file the tool did not write (a hand-written `attn_sm90.py` beside
        `attn.py`: pre-commit passes only the staged source) or a directory; True if any."""
        unique: dict[Path, Path] = {}
        for source in sources:
            unique.setdefault(self._resolve(source), source)  # a file named twice (or through a link) is one source
        sources = list(unique.values())
        owners: dict[Path, tuple[Path, Target]] = {}
        paths = {self._resolve(s): s for s in sources}
        found: list[Diagnostic] = []
        for source in sources:
            for target in self.targets:
                try:
                    variant = self._resolve(self.variant(source, target))
                except TranspileError as exc:
                    found.append(exc.diagnostic)
                    break
                if variant in paths:
                    found.append(Diagnostic(self.display(source), 1, 1, "TT006",
                                            f"its {target.name} variant `{self.display(variant)}` is the source "
                                            f"`{self.display(paths[variant])}`; rename one of them or pass --out-dir"))
                elif variant in owners:
                    other, other_target = owners[variant]
                    found.append(Diagnostic(self.display(source), 1, 1, "TT006",
                                            f"its {target.name} variant `{self.display(variant)}` is also the "
                                            f"{other_target.name} variant of `{self.display(other)}`; nothing was "
                                            "written (rename one, or use --out-dir/--source-root so that they differ)"))
                else:
                    owners[variant] = (source, target)
                    if mode == "write":
                        problem = _not_ours(variant)
                        if problem:
                            found.append(Diagnostic(self.display(source), 1, 1, "TT006",
                                                    f"its {target.name} variant path `{self.display(variant)}` "
                                                    f"{problem}; nothing was written (move it, or pass --out-dir)"))
        run.diagnostics.extend(found)
        return bool(found)

    def _read(self, source: Path, named: bool, skip: bool, run: Run) -> str | None:
        try:
            text, encoding = read_source(source)
            if encoding == "utf-8-sig":
                self._bom.add(source)
        except TranspileError as exc:
            run.diagnostics.append(exc.diagnostic)
            return None
        if "jit" not in text or is_generated(text):
            if named and not skip:
                try:
                    parse_source(text, self.display(source))  # a syntax error is worth more than "no kernels"
                except TranspileError as exc:
                    run.diagnostics.append(exc.diagnostic)
                    return None
                message = ("is a variant generated by triton-transpile, not a source" if is_generated(text)
                           else "no @triton.jit kernels in this file")
                run.diagnostics.append(Diagnostic(self.display(source), 1, 1, "TT003", message))
            return None
        return text

    def _cache_key(self, source: Path, text: str, target: Target) -> str:
        assert self._cache is not None
        return self._cache.key(text, self.display(source), target.name, self.command(source, target),
                               self.gluon_always)

    def _cached(self, sources: list[Path], texts: dict[Path, str | None]
                ) -> dict[tuple[Path, str], TranslationResult | Diagnostic]:
        """The translations of the run that the persistent cache holds (transpile.cache)."""
        found: dict[tuple[Path, str], TranslationResult | Diagnostic] = {}
        if self._cache is None:
            return found
        for source in dict.fromkeys(sources):
            text = texts[source]
            assert text is not None
            for target in self.targets:
                value = self._cache.get(self._cache_key(source, text, target))
                if value is not None:
                    found[(source, target.name)] = from_cache(value, text, target)
        return found

    def _store(self, source: Path, text: str, target: Target, item: TranslationResult | Diagnostic,
               files: list[tuple[str, str | None]]) -> None:
        if self._cache is not None and not (isinstance(item, Diagnostic) and item.code == "TT090"):
            self._cache.put(self._cache_key(source, text, target), to_cache(item), files)

    def _translate_in_parallel(self, sources: list[Path], texts: dict[Path, str | None]
                               ) -> dict[tuple[Path, str], TranslationResult | Diagnostic]:
        """Translations of many files for every target, in worker processes (one file per task): the run over a
        directory uses the machine's cores. Empty for a few files or one core (the loop translates as it goes).
        Each file's output does not depend on which process made it."""
        # Largest files first: the workers finish together instead of one of them running the last big file alone.
        unique = sorted(dict.fromkeys(sources), key=lambda source: -len(texts[source] or ""))
        workers = min(os.cpu_count() or 1, len(unique))
        if workers < 2 or len(unique) < PARALLEL_FILES or os.environ.get("TRANSPILE_JOBS") == "1":
            return {}
        import concurrent.futures
        import multiprocessing

        wanted = {source: [t for t in self.targets if (source, t.name) not in self._precomputed] for source in unique}
        tasks = [(str(source), texts[source], self.display(source),
                  [(t.name, self.command(source, t)) for t in wanted[source]], self.gluon_always) for source in unique]
        context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
        results: dict[tuple[Path, str], TranslationResult | Diagnostic] = {}
        try:
            with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
                try:
                    for source, (outcome, files) in zip(unique, pool.map(_translate_file, tasks, chunksize=1)):
                        for target in wanted[source]:
                            item = outcome[target.name]
                            if isinstance(item, TranslationResult):
                                item.target = target  # sent back without it (rules and snippets stay here)
                            results[(source, target.name)] = item
                            self._store(source, texts[source] or "", target, item, files)
                except BaseException:  # interrupted (Ctrl-C, SIGTERM): the files not yet started are not waited for
                    pool.shutdown(wait=False, cancel_futures=True)
                    raise
        except (OSError, concurrent.futures.process.BrokenProcessPool):
            return {}  # no processes here (a sandbox): translate in this one
        return results

    def _one(self, source: Path, text: str, target: Target, mode: str, named: bool, run: Run) -> _Pending | None:
        """Translates one file for one target; its outcome is settled by `_finish` once every variant of the run is
        formatted (None: an error, already reported)."""
        variant = self.variant(source, target)
        command = self.command(source, target)
        try:
            done = self._precomputed.get((source, target.name))  # made by a worker process
            if isinstance(done, Diagnostic):
                raise TranspileError(done)
            if done is not None:
                translation = done
            else:
                read = recording()  # the other files the translation reads (transpile.cache)
                try:
                    set_location(self.display(source), source)
                    if source not in self._prepared:  # keep one file's analysis (and the files it read)
                        self._prepared = {source: (prepare(text, self.display(source)), list(read))}
                    prepared, files = self._prepared[source]
                    translation = translate_source(text, self.display(source), target, command, prepared,
                                                   gluon_always=self.gluon_always)
                finally:
                    stop_recording()
                self._store(source, text, target, translation, [*files, *read])
        except Exception as exc:  # a bug of the tool must not take the other files down with it
            if not isinstance(exc, TranspileError):
                exc = TranspileError(_internal_error(self.display(source), exc))
            elif done is None:
                self._store(source, text, target, exc.diagnostic, [])
            if exc.diagnostic.code == "TT003" and not named:
                return None  # a file in a directory without kernels: not ours
            if exc.diagnostic not in run.diagnostics:  # once, not once per target
                run.diagnostics.append(exc.diagnostic)
            run.outcomes.append(Outcome(self.display(source), target.name, self.display(variant), "error", command,
                                        exc.diagnostic.message))
            return None
        run.diagnostics.extend(d for d in translation.diagnostics if d not in run.diagnostics)
        outcome = Outcome(self.display(source), target.name, self.display(variant), "", command,
                          kernels=_kernels(translation))
        run.outcomes.append(outcome)  # in the order of the run; its status comes in `_finish`
        return _Pending(outcome, variant, translation, source in self._bom)

    def _finish(self, pending: list[_Pending], mode: str, style: FormatStyle, run: Run) -> None:
        """Formats every variant of the run (one ruff process), then compares each with the file on disk and writes,
        diffs or checks it."""
        try:
            texts = format_texts([p.translation.text for p in pending], style)
        except FormatError as exc:
            texts = exc.texts
            if len(exc.failed) == len(pending) and len(pending) > 1:
                run.diagnostics.append(Diagnostic("<ruff format>", 1, 1, "TT050",
                                                  f"{exc.message}: the variants are left unformatted"))
            else:
                run.diagnostics.extend(Diagnostic(pending[i].outcome.variant, 1, 1, "TT050",
                                                  f"{exc.message}: the variant is left unformatted")
                                       for i in exc.failed)
        writes: list[_Pending] = []
        for item, text in zip(pending, texts):
            item.translation.text = text
            if self._settle(item, mode):
                writes.append(item)
        problems = [(item, why) for item in writes for why in [cannot_write(item.variant, self.display)] if why]
        if problems:  # nothing is written
            for item, why in problems:
                run.diagnostics.append(Diagnostic(item.outcome.variant, 1, 1, "TT008", f"cannot write the "
                                                  f"{item.outcome.target} variant: {why}; nothing was written"))
            failed = {id(item) for item, _ in problems}
            for item in writes:
                item.outcome.status = "error" if id(item) in failed else "skipped"
                item.outcome.reason = "cannot be written" if id(item) in failed else "another variant cannot be written"
            return
        for item in writes:
            try:
                write_atomic(item.variant, item.translation.text, "utf-8-sig" if item.bom else "utf-8")
            except OSError as exc:  # (the checks above passed: a full disk, a file system gone read-only, a race)
                run.diagnostics.append(Diagnostic(item.outcome.variant, 1, 1, "TT008", f"cannot write the "
                                                  f"{item.outcome.target} variant: {_os_error(exc)}"))
                item.outcome.status, item.outcome.reason = "error", "cannot be written"
            else:
                item.outcome.status = "written"

    def _settle(self, item: _Pending, mode: str) -> bool:
        """Sets the outcome of a variant that is compared, diffed or checked; True for one to write."""
        outcome, variant, translation = item.outcome, item.variant, item.translation
        # Bytes as they are (no newline translation): a variant of a CRLF source keeps CRLF line ends.
        # A variant is UTF-8 (a source's coding cookie is a comment below the header there, where Python does not read
        # it), and begins with a BOM where its source does.
        existing, bom = None, False
        if variant.is_file():
            data = variant.read_bytes()
            existing, bom = decode_source(data, errors="replace"), data.startswith(codecs.BOM_UTF8)
        current = existing is not None and bom == item.bom and same_code(existing, translation.text)
        if mode == "check":
            if existing is None:
                outcome.status = "missing"
            elif not current:
                outcome.status = "stale"
                outcome.reason = (_stale_reason(existing, translation) if bom == item.bom else
                                  "the source begins with a BOM, the variant does not" if item.bom else
                                  "the variant begins with a BOM, the source does not")
            else:
                outcome.status = "up-to-date"
        elif mode == "diff":
            outcome.status = "unchanged" if current else "would-write"
            if not current:
                outcome.diff = "".join(difflib.unified_diff(
                    (existing or "").splitlines(keepends=True), translation.text.splitlines(keepends=True),
                    fromfile=outcome.variant if existing is not None else "/dev/null", tofile=outcome.variant))
        elif current:
            outcome.status = "unchanged"  # byte for byte, or as another formatter (or version) left it
        else:
            return True
        return False


@dataclass
class _Pending:
    """A variant translated in a run, to be formatted with the others, then compared, written, diffed or checked."""

    outcome: Outcome
    variant: Path
    translation: TranslationResult
    bom: bool = False  # the source begins with a UTF-8 BOM: the variant is written with one


def _translate_file(task: tuple[str, str, str, list[tuple[str, str]], bool]
                    ) -> tuple[dict[str, TranslationResult | Diagnostic], list[tuple[str, str | None]]]:
    """Worker process: one file for every target, prepared once, and the other files the translation read (for the
    cache). A bad file gives its diagnostic for every target; an internal error its TT090, worded as the one-process
    path words it."""
    where, text, display, targets, gluon_always = task
    set_location(display, where)  # (a display path is relative to the project root, not the worker's directory)
    out: dict[str, TranslationResult | Diagnostic] = {}
    files = recording()
    try:
        try:
            prepared = prepare(text, display)
        except TranspileError as exc:
            return {name: exc.diagnostic for name, _ in targets}, files
        except Exception as exc:  # noqa: BLE001 - reported as TT090 by the caller, like the one-process path
            return {name: _internal_error(display, exc) for name, _ in targets}, files
        for name, command in targets:
            try:
                result = translate_source(text, display, get_target(name), command, prepared,
                                          gluon_always=gluon_always)
                result.target = None  # type: ignore[assignment]  # the caller puts its own Target back
                for outcome in result.functions:
                    outcome.schedules = []  # what `explain --timeline` draws (it translates in its own process)
                out[name] = result
            except TranspileError as exc:
                out[name] = exc.diagnostic
            except Exception as exc:  # noqa: BLE001
                out[name] = _internal_error(display, exc)
        return out, files
    finally:
        stop_recording()


def to_cache(item: TranslationResult | Diagnostic) -> dict[str, object]:
    """A translation (or a file's error) as the cache stores it (`from_cache` reads it back)."""
    if isinstance(item, Diagnostic):
        return {"error": dataclasses.asdict(item)}
    return {"text": item.text, "source_sha256": item.source_sha256, "source_path": item.source_path,
            "functions": [_outcome_data(f) for f in item.functions]}


def _outcome_data(outcome: KernelOutcome) -> dict[str, object]:
    """A kernel's outcome as plain data, without its `schedules`: the rules' own objects (an `Sm90Ring` holds libcst
    nodes), which only `explain --timeline` draws, and it translates in its own process, as the worker processes
    leave them out too (`_translate_file`). A cached outcome reads back with none; nor its `kmajor` (libcst nodes
    too: its TT046 note says what it was)."""
    data = {f.name: ([dataclasses.asdict(d) for d in outcome.diagnostics] if f.name == "diagnostics"
                     else getattr(outcome, f.name))
            for f in dataclasses.fields(outcome) if f.name not in ("schedules", "kmajor")}
    if outcome.dispatch is not None:  # (`Dispatch`: tuples of `Tile`s)
        data["dispatch"] = dataclasses.asdict(outcome.dispatch)
    return data


def _dispatch(data: dict | None) -> Dispatch | None:
    if data is None:
        return None
    tiles = tuple(Tile(**{**t, "offsets": tuple(t["offsets"])}) for t in data["tiles"])
    when = data.get("when")
    return Dispatch(data["kernel"], tuple(data["params"]), tiles, tuple(data.get("helpers", ())),
                    tuple(when) if when is not None else None, bool(data.get("aligned", False)),  # type: ignore[arg-type]
                    tuple(data.get("divisible", ())), tuple(data.get("unit", ())),
                    tuple((n, v) for n, v in data.get("at_least", ())),
                    unflagged_at_least=tuple((n, v) for n, v in data.get("unflagged_at_least", ())),
                    reason=data.get("reason", ""), narrow=bool(data.get("narrow", False)),
                    small=bool(data.get("small", False)), warps=data.get("warps"),
                    no_agprs=bool(data.get("no_agprs", False)), slow_dtypes=tuple(data.get("slow_dtypes", ())),
                    lds=_lds_of(data.get("lds")),
                    source_when=tuple((test, tuple((n, d) for n, d in names))
                                      for test, names in data.get("source_when", ())),
                    grid_at_least=tuple(data["grid_at_least"]) if data.get("grid_at_least") else None,
                    retile=tuple(data["retile"]) if data.get("retile") else None,  # type: ignore[arg-type]
                    one_wave=bool(data.get("one_wave", False)))


def _lds_of(value: object) -> tuple[int, tuple[tuple[tuple[str | int, ...], str], ...]] | None:
    """`Dispatch.lds` from its JSON form (lists for tuples)."""
    if not value:
        return None
    limit, rings, *least = value  # type: ignore[misc]
    found = int(limit), tuple((tuple(shape), str(pointer)) for shape, pointer in rings)
    return (*found, int(least[0])) if least else found  # type: ignore[return-value]


def from_cache(value: dict, text: str, target: Target) -> TranslationResult | Diagnostic:
    if "error" in value:
        return Diagnostic(**value["error"])
    functions = [KernelOutcome(**{**f, "diagnostics": [Diagnostic(**d) for d in f["diagnostics"]],
                                  "dispatch": _dispatch(f.get("dispatch"))})
                 for f in value["functions"]]
    return TranslationResult(value["source_path"], target, value["text"], functions, value["source_sha256"], text)


def _internal_error(display: str, exc: Exception) -> Diagnostic:
    return Diagnostic(display, 1, 1, "TT090", f"internal error of triton-transpile {__version__} "
                      f"({type(exc).__name__}: {exc}); nothing was written for this file, please report it")


def _kernels(translation: TranslationResult) -> list[dict[str, object]]:
    return [{"name": f.name, "helper": f.is_helper, "translated": f.translated, "status": f.status,
             **({"reason": f.reason} if f.reason else {}),
             "diagnostics": [d.format() for d in f.diagnostics]} for f in translation.functions]


def _stale_reason(existing: str, translation: TranslationResult) -> str:
    tool = HEADER_TOOL.search(existing[:2000])
    digest = HEADER_HASH.search(existing[:2000])
    if digest is None or tool is None:
        return "no triton-transpile header"
    if digest.group(1) != translation.source_sha256:
        return "the source changed"
    if tool.group(1) != __version__:
        return f"made by triton-transpile {tool.group(1)}, this is {__version__}"
    return "its content differs from a fresh translation (edited by hand?)"


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return True  # (reported when it is read)


def cannot_write(path: Path, show=lambda p: p.as_posix()) -> str:  # noqa: ANN001 - Path -> str
    """Why a file cannot be written at `path` (it is a directory, a directory on the way is a file, or the nearest
    existing one is not writable), or "" (asked before anything is written: a run writes all its variants or
    none). `show` writes a path into the message."""
    directory = path.parent
    while not directory.exists() and not directory.is_symlink() and directory.parent != directory:
        directory = directory.parent
    if path.is_dir():
        return f"`{show(path)}` is a directory"
    if not directory.is_dir():
        return f"`{show(directory)}` is not a directory"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"the directory `{show(directory)}` is not writable (permission denied)"
    return ""


def _os_error(exc: OSError) -> str:
    where = f" (`{exc.filename}`)" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"


def _not_ours(path: Path) -> str:
    """Why writing a variant to `path` would lose something of the user's, or "": a directory, or a file without the
    header the tool writes."""
    if path.is_dir():
        return "is a directory"
    if not path.exists():
        return ""
    if not _regular(path):
        return "is not a regular file"
    try:
        with path.open("rb") as handle:
            head = handle.read(2000).decode("utf-8", "replace")
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    return "" if is_generated(head) else "holds a file triton-transpile did not write (no generated-file header)"


__all__ = ["Config", "Outcome", "Project", "Run", "cannot_write", "load_config", "project_config", "tune_gc",
           "write_atomic"]
