"""The project a run belongs to: its root, found from the files, and `[tool.triton-transpile]` of its pyproject.toml.

Every error in the configuration is a TT005 at the line and column of what is wrong in pyproject.toml (tomllib gives
values without positions: `_Locator` finds a key's line in the text).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

from transpile.diagnostics import Diagnostic, TranspileError

TABLE = ("tool", "triton-transpile")
KNOWN = ("targets", "out-dir", "exclude", "gluon-always")


@dataclass
class Config:
    """`[tool.triton-transpile]` of the project the files belong to (`project_config`)."""

    root: Path
    targets: list[str] = field(default_factory=list)
    pyproject: Path | None = None  # the project root's pyproject.toml (None: the root is a .git's, or the cwd)
    out_dir: Path | None = None
    exclude: list[str] = field(default_factory=list)
    gluon_always: bool = False  # emit the translated Gluon even where the kernel would be kept as Triton
    anchored: bool = False  # the root is a project's (a pyproject.toml or .git there), not the current directory
    positions: dict[str, tuple[int, int]] = field(default_factory=dict)  # key -> (line, col) in pyproject.toml
    notes: list[Diagnostic] = field(default_factory=list)  # TT009: tables that look like a misspelt tool table

    def diagnostic(self, key: str, code: str, message: str) -> Diagnostic:
        """A message about the configured `key`, at its place in pyproject.toml."""
        line, col = self.positions.get(key, (1, 1))
        return Diagnostic(str(self.pyproject), line, col, code, message)


def project_config(paths: list[Path], cwd: Path | None = None) -> Config:
    """The configuration of the project that `paths` belong to, found from the files, never from where the command
    runs (`load_config`), so that headers, messages and `--check` are the same from any directory. Paths that do not
    exist are left out (they are reported later); none left: the current directory's project. Paths of two projects:
    TT004 (run once per project)."""
    cwd = cwd or Path.cwd()
    starts = [p.resolve() if p.is_dir() else p.resolve().parent for p in paths if p.exists()]
    configs: dict[Path, Config] = {}
    read: dict[Path, tuple[Config, bool]] = {}  # each pyproject.toml read once (pre-commit names many files)
    for start in dict.fromkeys(starts or [cwd.resolve()]):
        config = load_config(start, fallback=cwd, read=read)
        configs.setdefault(config.root.resolve(), config)
    if len(configs) > 1:
        roots = ", ".join(f"`{root}`" for root in configs)
        raise TranspileError(Diagnostic("<command line>", 1, 1, "TT004", f"the paths belong to different projects "
                                        f"({roots}): run triton-transpile once per project"))
    return next(iter(configs.values()))


def load_config(start: Path, fallback: Path | None = None,
                read: dict[Path, tuple[Config, bool]] | None = None) -> Config:
    """The project of the directory `start`: its root is the nearest directory at or above `start` whose
    pyproject.toml has a `[tool.triton-transpile]` table (the search ends at the top of a git repository: a `.git`);
    else the nearest one with a pyproject.toml or a `.git`; else `fallback` (default: `start`). `read`: the
    pyproject.toml files read so far (by path), for many calls."""
    read = {} if read is None else read
    nearest: Config | None = None
    notes: list[Diagnostic] = []
    found: Config | None = None
    for directory in [start, *start.parents]:
        pyproject = directory / "pyproject.toml"
        if pyproject.is_file():
            if pyproject not in read:
                read[pyproject] = read_config(pyproject)
            config, configured = read[pyproject]
            config = dataclasses.replace(config)  # (a copy: its notes are this search's)
            notes += config.notes
            if configured:
                found = config
                break
            nearest = nearest or config
        if (directory / ".git").exists():
            found = nearest or Config(root=directory, anchored=True)
            break
    found = found or nearest or Config(root=fallback if fallback is not None else start)
    found.notes = notes
    return found


def read_config(pyproject: Path) -> tuple[Config, bool]:
    """The configuration in `pyproject`, and whether it has a `[tool.triton-transpile]` table. TT005 for a file that
    cannot be read or parsed, or a table, key or value that is not what the tool takes, at its line and column."""
    try:
        import tomllib  # Python >= 3.11
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    def error(line: int, col: int, message: str) -> TranspileError:
        return TranspileError(Diagnostic(str(pyproject), line, col, "TT005", message))

    try:
        data = pyproject.read_bytes()
    except OSError as exc:
        raise error(1, 1, f"cannot read: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise error(line, col, "not UTF-8 text (TOML files are UTF-8)") from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        where = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        message = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", str(exc))
        lines = text.splitlines() or [""]
        line, col = (int(where.group(1)), int(where.group(2))) if where else (len(lines), len(lines[-1]) + 1)
        raise error(line, col, f"not valid TOML: {message}") from None
    locate = _Locator(text)
    tool = document.get("tool", {})
    if not isinstance(tool, dict):
        raise error(*locate(("tool",)), f"`tool` must be a table, not {_shown(tool)}")
    configured = "triton-transpile" in tool
    notes = [Diagnostic(str(pyproject), *locate(("tool", name)), "TT009", f"[tool.{name}] is not read: did you mean "
                        "[tool.triton-transpile]?") for name in tool if _misspelt(name)]
    section = tool.get("triton-transpile", {})
    if not isinstance(section, dict):
        raise error(*locate(TABLE), f"[tool.triton-transpile] must be a table (`[tool.triton-transpile]` and keys "
                    f"below it), not {_shown(section)}")
    config = Config(root=pyproject.parent, pyproject=pyproject, anchored=True,
                    positions={key: locate((*TABLE, key)) for key in section}, notes=notes)
    for key in section:
        if key not in KNOWN:
            raise TranspileError(config.diagnostic(key, "TT005", f"unknown key `{key}` in [tool.triton-transpile] "
                                                   f"(known: {', '.join(KNOWN)})"))
    targets = section.get("targets", [])
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise TranspileError(config.diagnostic("targets", "TT005", "`targets` must be a list of target names, e.g. "
                                               f'targets = ["gfx942", "sm90"], not {_shown(targets)}'))
    config.targets = targets
    if "out-dir" in section:
        if not isinstance(section["out-dir"], str) or not section["out-dir"]:
            raise TranspileError(config.diagnostic("out-dir", "TT005", "`out-dir` must be a directory path (a "
                                                   f"string), not {_shown(section['out-dir'])}"))
        config.out_dir = pyproject.parent / section["out-dir"]
    exclude = section.get("exclude", [])
    if not isinstance(exclude, list) or not all(isinstance(e, str) for e in exclude):
        raise TranspileError(config.diagnostic("exclude", "TT005", "`exclude` must be a list of globs, e.g. "
                                               f'exclude = ["legacy/*.py"], not {_shown(exclude)}'))
    config.exclude = exclude
    gluon_always = section.get("gluon-always", False)
    if not isinstance(gluon_always, bool):
        raise TranspileError(config.diagnostic("gluon-always", "TT005", "`gluon-always` must be true or false, not "
                                               f"{_shown(gluon_always)}"))
    config.gluon_always = gluon_always
    return config, configured


def _misspelt(name: str) -> bool:
    """`name` (a table under `tool`) looks like `triton-transpile` misspelt: `triton_transpile`, `Triton-Transpile`,
    `tritontranspile`, `triton-transpiler`, `triton-transplie`."""
    if name == "triton-transpile":
        return False
    plain = re.sub(r"[-_. ]", "", name.lower())
    return plain == "tritontranspile" or difflib.SequenceMatcher(None, plain, "tritontranspile").ratio() >= 0.85


def _shown(value: object) -> str:
    """A TOML value as the message names it."""
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, str):
        return f'the string "{value}"'
    if isinstance(value, dict):
        return "a table"
    return f"`{value!r}`"


_PART_TEXT = r"""[A-Za-z0-9_-]+|"[^"]*"|'[^']*'"""  # a bare or quoted key
_PART = re.compile(_PART_TEXT)
_HEADER = re.compile(r"^\s*\[\[?(?P<name>[^\]]*)\]\]?\s*(#.*)?$")
_KEY = re.compile(rf"^(?P<indent>\s*)(?P<key>(?:{_PART_TEXT})(?:\s*\.\s*(?:{_PART_TEXT}))*)\s*=")


def _parts(dotted: str) -> tuple[str, ...]:
    return tuple(p.strip("\"'") for p in _PART.findall(dotted))


class _Locator:
    """(line, col) of a table or key of a TOML text, by its path (`("tool", "triton-transpile", "targets")`): where
    its key is written (`targets =` below `[tool.triton-transpile]`, or a dotted key), else its table's header, else
    the closest enclosing table's; (1, 1) when none is written. Lines inside multi-line strings and arrays are read
    as lines too: a key there could be taken for one (rare: the first match is the real one in practice)."""

    def __init__(self, text: str) -> None:
        self.places: list[tuple[tuple[str, ...], int, int]] = []  # (path, line, col) of headers and keys, in order
        table: tuple[str, ...] = ()
        for number, line in enumerate(text.splitlines(), 1):
            header = _HEADER.match(line)
            if header is not None:
                table = _parts(header.group("name"))
                self.places.append((table, number, line.index("[") + 1))
                continue
            key = _KEY.match(line)
            if key is not None:
                self.places.append(((*table, *_parts(key.group("key"))), number, len(key.group("indent")) + 1))

    def __call__(self, path: tuple[str, ...]) -> tuple[int, int]:
        for length in range(len(path), 0, -1):
            for place, line, col in self.places:
                if place == path[:length]:
                    return line, col
        return 1, 1


__all__ = ["Config", "load_config", "project_config", "read_config"]
