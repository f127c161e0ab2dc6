"""A persistent cache of translations, like ruff's and black's: a run over files that did not change reads their
variants instead of translating them again.

An entry is one source file translated for one target. Its key is the SHA-256 of everything the translation reads:

- the tool itself: the cache format, the tool's version, the text of every Python file of the `transpile` package (a
  changed rule or table is a new tool), the Python version (`ast`, `tokenize`) and libcst's version (parser, code
  generation);
- the input: the source text, the path written into the variant's header and messages, the file's resolved path
  (helpers imported from other modules of the project are found on disk from it), the target, the regenerate
  command of the header and `--gluon-always`.

The translation also reads other files: the modules a kernel file imports helpers from (``from pkg.ops import
helper``: `transpile.analysis.imports` looks for them on disk). Every such look-up is recorded
with the translation (the path, and the SHA-256 of the file's bytes or that there was no file) and checked again
when the entry is read: an entry whose recorded files changed, appeared or went away is a miss. So an entry is
never stale; a miss translates as without a cache.

Errors of a file (a syntax error, no kernels) are cached like variants; internal errors (TT090) are not.

Location: ``$TRANSPILE_CACHE_DIR``, else ``$XDG_CACHE_HOME/triton-transpile/translations``, else
``~/.cache/triton-transpile/translations``; one directory per tool fingerprint, of which those unused for 30 days
are removed. ``--no-cache`` or ``TRANSPILE_NO_CACHE=1`` turn the cache off; deleting the directory is always safe.
Writes are atomic (a temporary file renamed), so runs in parallel (pre-commit starts several) share it safely.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

from transpile import __version__
from transpile.atomic import write_atomic

CACHE_FORMAT = 1
_UNUSED_DAYS = 30

# File look-ups recorded while a translation runs (see `recording`): (path, SHA-256 of its bytes or None).
_recorded: list[tuple[str, str | None]] | None = None


def look_up(path: Path) -> tuple[str, str | None]:
    """What the file at `path` is now (its SHA-256, or None for no file), for `record`."""
    return _probe(path)


def record(probes: list[tuple[str, str | None]] | tuple[tuple[str, str | None], ...]) -> None:
    """Note that the running translation looked for these files (`look_up`)."""
    if _recorded is not None:
        _recorded.extend(probes)


def recording() -> list[tuple[str, str | None]]:
    """Start recording file look-ups (`record`) into the list returned; `stop_recording` ends it."""
    global _recorded
    _recorded = []
    return _recorded


def stop_recording() -> None:
    global _recorded
    _recorded = None


def _probe(path: Path) -> tuple[str, str | None]:
    try:
        return str(path), hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    except OSError:
        return str(path), None


def enabled_by_environment() -> bool:
    return os.environ.get("TRANSPILE_NO_CACHE", "") in ("", "0")


def default_directory() -> Path:
    configured = os.environ.get("TRANSPILE_CACHE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "triton-transpile" / "translations"


@functools.lru_cache(maxsize=1)
def tool_fingerprint() -> str | None:
    """The SHA-256 of the tool as installed (see the module docstring); None when its sources cannot be read (then
    nothing is cached)."""
    return fingerprint_of(Path(__file__).resolve().parent)


def fingerprint_of(package: Path) -> str | None:
    """The fingerprint of the tool whose `transpile` package is the directory `package`."""
    digest = hashlib.sha256()
    try:
        from importlib.metadata import version

        libcst = version("libcst")
    except Exception:  # noqa: BLE001 - an unknown libcst: no cache rather than a wrong one
        return None
    for part in (str(CACHE_FORMAT), __version__, sys.version, libcst):
        _add(digest, part)
    sources = sorted(package.rglob("*.py"))
    if not sources:
        return None
    try:
        for path in sources:
            _add(digest, path.relative_to(package).as_posix())
            _add(digest, path.read_bytes())
    except OSError:
        return None
    return digest.hexdigest()


def _add(digest: "hashlib._Hash", part: str | bytes) -> None:
    data = part.encode("utf-8", "surrogatepass") if isinstance(part, str) else part
    digest.update(b"%d:" % len(data))
    digest.update(data)


class TranslationCache:
    """Entries under `directory`/<tool fingerprint>/; `open` gives None when the cache is off or unusable."""

    def __init__(self, root: Path, fingerprint: str) -> None:
        self.root = root
        self.fingerprint = fingerprint
        self.directory = root / fingerprint[:24]

    @classmethod
    def open(cls, directory: Path | None = None) -> TranslationCache | None:
        if not enabled_by_environment():
            return None
        fingerprint = tool_fingerprint()
        if fingerprint is None:
            return None
        cache = cls(directory if directory is not None else default_directory(), fingerprint)
        cache._prune()
        return cache

    def key(self, text: str, display: str, target: str, command: str, gluon_always: bool) -> str:
        digest = hashlib.sha256()
        for part in (self.fingerprint, text, display, str(Path(display).resolve()), target, command,
                     "gluon-always" if gluon_always else ""):
            _add(digest, part)
        return digest.hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        """The stored entry (`put`'s `value`), or None: no entry, an unreadable one, or one whose recorded files
        changed."""
        try:
            data = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("key") != key:
            return None
        for path, digest in data.get("files", []):
            if _probe(Path(path)) != (path, digest):
                return None
        return data.get("value")

    def put(self, key: str, value: dict, files: list[tuple[str, str | None]]) -> None:
        path = self._path(key)
        data = json.dumps({"key": key, "files": sorted(set(files)), "value": value}, ensure_ascii=False)
        try:
            write_atomic(path, data)  # (an interrupted run leaves no temporary file)
        except OSError:
            pass  # a cache that cannot be written only makes the next run slower

    def _prune(self) -> None:
        """Remove the directories of other tool fingerprints unused for `_UNUSED_DAYS` days; mark this one used."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            os.utime(self.directory)
            limit = time.time() - _UNUSED_DAYS * 86400
            for other in self.root.iterdir():
                if other != self.directory and other.is_dir() and other.stat().st_mtime < limit:
                    shutil.rmtree(other, ignore_errors=True)
        except OSError:
            pass


__all__ = ["TranslationCache", "default_directory", "look_up", "record", "recording", "stop_recording", "tool_fingerprint"]
