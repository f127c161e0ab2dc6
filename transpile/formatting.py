"""The layout of the variants (ruff's formatter), and whether a variant on disk is the fresh translation up to layout.

**Formatting.** Repositories that keep Triton kernels almost always run `ruff format` or `black`, often in the same
pre-commit configuration as `transpile`. The variants are written in that layout: `format_texts` runs ruff's
formatter (`ruff format`, a dependency of the package) once over every variant of a run, written to a temporary
directory, at the settings of the user's project (`project_style`):

- the line length is ruff's `line-length` where the project has a ruff configuration (the first `.ruff.toml`,
  `ruff.toml`, or `pyproject.toml` with a `[tool.ruff]` table, searched upwards from the project root, as ruff
  finds it, `extend` followed; never a user-level one, so the output does not depend on the machine), else
  `[tool.black] line-length` of the project's pyproject.toml, else 88 (`DEFAULT_LINE_LENGTH`, the default of both
  formatters);
- with a ruff configuration, its formatter settings (`indent-width`, `target-version`, `preview` and the `[format]`
  table: `quote-style`, `indent-style`, `skip-magic-trailing-comma`, `line-ending`, `docstring-code-format`,
  `docstring-code-line-length`) apply too; without one, black's `skip-string-normalization` and
  `skip-magic-trailing-comma` do.

Ruff's layout is black's except for a few intentional differences; after ruff, three of them are settled so that
`black` at the same line length leaves the output alone too (where the settings are black's: double or preserved
quotes, four-space indents): the closing quotes of a docstring whose last line would pass the line length go on a
line of their own (black's rule, which ruff accepts); an `assert` whose message ruff wraps in parentheses of its own
(black splits the condition instead) is written `assert (\n    test\n), message  # fmt: skip`; a one-line statement
that fits without its trailing pragma comment (`# noqa`, `# type:`, ...) but not with it, which ruff keeps on one
line (it does not count pragma comments) and black splits, gets `# fmt: skip` after that comment.

If ruff is not installed or fails, `format_texts` raises `FormatError`, which carries the texts it could format and
the others as they were given: the command line writes those unformatted with a TT050 note (`--check` accepts either
layout, below), so a missing formatter never blocks a run.

**Comparing.** A formatter may still rewrite a variant (another ruff or black version, other settings) without
changing its syntax tree or its comments. The variant is current when it is the fresh (formatted) translation byte
for byte, or when both have the same syntax tree (docstrings compared as `inspect.cleandoc` gives them, trailing
spaces dropped) and the same comments in the same order (`#x` and `# x` alike, `# fmt: skip` left out:
`same_code`): then `--check` passes and a write leaves the
formatted file alone, so a `transpile` hook and a formatter hook settle after one round instead of rewriting each
other's output on every commit. A hand edit that changes code or a comment is still stale.
"""

from __future__ import annotations

import ast
import functools
import inspect
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from transpile.diagnostics import Diagnostic, TranspileError

#: The line length when the project configures none: ruff's and black's default.
DEFAULT_LINE_LENGTH = 88

# Ruff settings that change the formatter's output, read from the user's ruff configuration.
_RUFF_TOP = ("indent-width", "target-version", "preview")
_RUFF_FORMAT = ("quote-style", "indent-style", "skip-magic-trailing-comma", "line-ending", "docstring-code-format",
                "docstring-code-line-length", "preview")
_RUFF_FILES = (".ruff.toml", "ruff.toml", "pyproject.toml")  # ruff's own order within one directory
_TIMEOUT = 300  # seconds for one ruff process (over every variant of a run)


@dataclass(frozen=True)
class FormatStyle:
    """How the variants are laid out: ruff's formatter at `line_length`, with further ruff settings."""

    line_length: int = DEFAULT_LINE_LENGTH
    #: Further ruff settings as (key, value); keys of the `[format]` table are written `format.<key>`.
    settings: tuple[tuple[str, str | int | bool], ...] = ()

    def ruff_toml(self) -> str:
        """The configuration file handed to ruff (which then reads no other)."""
        top = [f"line-length = {self.line_length}", "respect-gitignore = false", "exclude = []"]
        top += [f"{key} = {_toml(value)}" for key, value in self.settings if not key.startswith("format.")]
        table = [f"{key.removeprefix('format.')} = {_toml(value)}" for key, value in self.settings
                 if key.startswith("format.")]
        return "\n".join([*top, "", "[format]", *table, ""])

    @property
    def black_compatible(self) -> bool:
        """Settings black can produce too (double or preserved quotes, four-space indents): the only ones where the
        layout is also made stable under black (see the module docstring)."""
        settings = dict(self.settings)
        return (settings.get("format.quote-style", "double") in ("double", "preserve")
                and settings.get("format.indent-style", "space") == "space" and settings.get("indent-width", 4) == 4)


class FormatError(Exception):
    """Ruff is missing or failed; `texts` holds every text, formatted where ruff could, else as it was given."""

    def __init__(self, message: str, texts: list[str], failed: list[int]) -> None:
        super().__init__(message)
        self.message = message
        self.texts = texts
        self.failed = failed  # indices of the texts left unformatted


def _toml(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(value)  # a TOML basic string


# --------------------------------------------------------------------------------------------------------------------
# The project's settings


def _load_toml(path: Path) -> dict:
    try:
        import tomllib  # Python >= 3.11
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TranspileError(Diagnostic(str(path), 1, 1, "TT005", f"cannot read the formatter settings: {exc}")
                             ) from None


def _ruff_section(path: Path) -> dict | None:
    data = _load_toml(path)
    if path.name == "pyproject.toml":
        section = data.get("tool", {}).get("ruff")
        return section if isinstance(section, dict) else None
    return data


def _find_ruff_config(root: Path) -> tuple[Path, dict] | None:
    """The ruff configuration ruff itself would use for files in `root`: the first of .ruff.toml, ruff.toml or a
    pyproject.toml with [tool.ruff], in `root` or above it (not a user-level configuration: the output must not
    depend on the machine). A file above the root that does not parse is passed over."""
    for directory in [root, *root.parents]:
        for name in _RUFF_FILES:
            path = directory / name
            if path.is_file():
                try:
                    section = _ruff_section(path)
                except TranspileError:
                    if directory == root:
                        raise
                    continue
                if section is not None:
                    return path, section
    return None


def _with_extends(path: Path, section: dict, depth: int = 0) -> dict:
    """`section` over the configuration its `extend` names (recursively), as ruff merges them."""
    extend = section.get("extend")
    if not isinstance(extend, str) or depth > 8:
        return section
    base_path = (path.parent / os.path.expanduser(extend)).resolve()
    if not base_path.is_file():
        return section
    base = _with_extends(base_path, _ruff_section(base_path) or {}, depth + 1)
    merged = {**base, **section}
    merged["format"] = {**_table(base, "format"), **_table(section, "format")}
    return merged


def _table(section: dict, name: str) -> dict:
    table = section.get(name)
    return table if isinstance(table, dict) else {}


def _line_length(value: object, where: Path) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 320:
        raise TranspileError(Diagnostic(str(where), 1, 1, "TT005", "`line-length` must be a whole number of columns "
                                        f"from 1 to 320, not {value!r}"))
    return value


def project_style(root: Path) -> FormatStyle:
    """The layout of the variants of the project rooted at `root` (see the module docstring). Raises TranspileError
    (TT005) for a configuration file that does not parse or a line length that is not a number of columns."""
    ruff = _find_ruff_config(root)
    pyproject = root / "pyproject.toml"
    black = _table(_load_toml(pyproject).get("tool", {}), "black") if pyproject.is_file() else {}
    black = {key.replace("_", "-"): value for key, value in black.items()}  # black takes `line_length` too
    settings: list[tuple[str, str | int | bool]] = []
    if ruff is not None:
        path, section = ruff
        section = _with_extends(path, section)
        settings += [(key, section[key]) for key in _RUFF_TOP if isinstance(section.get(key), (str, int, bool))]
        table = _table(section, "format")
        settings += [(f"format.{key}", table[key]) for key in _RUFF_FORMAT
                     if isinstance(table.get(key), (str, int, bool))]
        if "line-length" in section:
            return FormatStyle(_line_length(section["line-length"], path), tuple(settings))
    elif black:
        if black.get("skip-string-normalization") is True:
            settings.append(("format.quote-style", "preserve"))
        if black.get("skip-magic-trailing-comma") is True:
            settings.append(("format.skip-magic-trailing-comma", True))
    if "line-length" in black:
        return FormatStyle(_line_length(black["line-length"], pyproject), tuple(settings))
    return FormatStyle(DEFAULT_LINE_LENGTH, tuple(settings))


# --------------------------------------------------------------------------------------------------------------------
# Running ruff


@functools.lru_cache(maxsize=1)
def ruff_binary() -> str | None:
    """The ruff executable: the one the installed `ruff` package ships (as `python -m ruff` finds it), else the
    first `ruff` on PATH; None when there is none."""
    try:
        from ruff import find_ruff_bin  # type: ignore[attr-defined]
    except ImportError:
        try:
            from ruff.__main__ import find_ruff_bin  # type: ignore[no-redef]  # older ruff packages
        except ImportError:
            find_ruff_bin = None  # type: ignore[assignment]
    if find_ruff_bin is not None:
        try:
            return os.fsdecode(find_ruff_bin())
        except (FileNotFoundError, OSError):
            pass
    return shutil.which("ruff")


def format_texts(texts: Sequence[str], style: FormatStyle | None = None) -> list[str]:
    """`texts` (Python modules) laid out by one `ruff format` process at `style`, then settled with black (see the
    module docstring). Raises FormatError when ruff is missing or fails (for some texts or all of them)."""
    style = style or FormatStyle()
    if not texts:
        return []
    ruff = ruff_binary()
    if ruff is None:
        raise FormatError("ruff is not installed (`pip install ruff`)", list(texts),
                          list(range(len(texts))))
    memory = _memory_directory()
    if memory is not None:
        try:
            return _run_ruff(ruff, style, texts, memory)
        except OSError:
            pass  # a full memory file system: once more in the default temporary directory
    try:
        return _run_ruff(ruff, style, texts, None)
    except OSError as exc:
        raise FormatError(f"cannot write the variants to a temporary directory ({exc})", list(texts),
                          list(range(len(texts)))) from None


def _memory_directory() -> str | None:
    """/dev/shm where it is a writable directory: the variants are written, rewritten by ruff and deleted without
    touching a disk (on a busy disk, deleting files just rewritten can take longer than formatting them)."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK) else None


def _run_ruff(ruff: str, style: FormatStyle, texts: Sequence[str], parent: str | None) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="transpile-format-", dir=parent) as tmp:
        config = os.path.join(tmp, "ruff.toml")
        with open(config, "w", encoding="utf-8") as handle:
            handle.write(style.ruff_toml())
        directory = os.path.join(tmp, "variants")
        os.mkdir(directory)
        paths = [os.path.join(directory, f"v{i}.py") for i in range(len(texts))]
        for path, text in zip(paths, texts):
            with open(path, "wb") as handle:
                handle.write(text.encode("utf-8"))
        try:
            # The directory, not the files: any number of variants fits on the command line.
            done = subprocess.run([ruff, "format", "--config", config, "--no-cache", "--quiet", directory], check=False,
                                  cwd=tmp, stdin=subprocess.DEVNULL, capture_output=True, timeout=_TIMEOUT)
        except (OSError, subprocess.SubprocessError) as exc:
            raise FormatError(f"could not run `{ruff} format` ({exc})", list(texts),
                              list(range(len(texts)))) from None
        out: list[str] = []
        for path in paths:
            with open(path, "rb") as handle:
                out.append(handle.read().decode("utf-8", errors="replace"))
        errors = done.stderr.decode("utf-8", errors="replace").replace(directory + os.sep, "").replace(tmp, "<tmp>")
    if done.returncode != 0:
        failed = sorted({int(i) for i in re.findall(r"\bv(\d+)\.py\b", errors) if int(i) < len(texts)})
        failed = failed or list(range(len(texts)))
        lines = [line.strip() for line in errors.splitlines() if line.strip()]
        message = f"`ruff format` failed (exit {done.returncode}): {' '.join(lines[:3]) or 'no message'}"
        settled = [text if i in failed else settle_with_black(formatted, style)
                   for i, (text, formatted) in enumerate(zip(texts, out))]
        raise FormatError(message, settled, failed)
    return [settle_with_black(text, style) for text in out]


# --------------------------------------------------------------------------------------------------------------------
# Where black lays out ruff's output differently


def settle_with_black(text: str, style: FormatStyle) -> str:
    """Ruff's output `text` changed where black would lay it out otherwise (see the module docstring)."""
    if not style.black_compatible:
        return text
    newline = "\r\n" if text.find("\n") > 0 and text[text.find("\n") - 1] == "\r" else "\n"
    text = _docstring_quotes(text, style.line_length, newline)
    text = _assert_messages(text, newline)
    return _pragma_lines(text, style.line_length)


def _width(text: str) -> int:
    if text.isascii():
        return len(text)
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


_TRIPLE_QUOTES_AT_END = re.compile(r'(?:"""|\'\'\')(?=\r?$)', re.MULTILINE)
_DOCSTRING_OPENING = re.compile(r"[ \t]*[rRuU]?")
_HEADER = re.compile(r"(?:async[ \t]+def|def|class)\b")


def _docstring_quotes(text: str, line_length: int, newline: str) -> str:
    """Black puts the closing quotes of a multi-line docstring on a line of their own when its last line would pass
    the line length with them; ruff keeps them there once they are."""
    cuts: list[tuple[int, str]] = []
    for match in _TRIPLE_QUOTES_AT_END.finditer(text):
        close = match.start()
        line_start = text.rfind("\n", 0, close) + 1
        if _width(text[line_start:match.end()]) <= line_length or not text[line_start:close].strip():
            continue
        if text[close - 1] == "\\":
            continue  # black leaves a docstring ending in a backslash alone
        opening = text.rfind(match.group(), 0, close)
        if opening < 0 or "\n" not in text[opening:close]:
            continue
        opening_line = text.rfind("\n", 0, opening) + 1
        prefix = text[opening_line:opening]
        if not _DOCSTRING_OPENING.fullmatch(prefix):
            continue
        indent = len(prefix) - len(prefix.lstrip(" \t"))
        if indent + 3 > line_length or not _is_docstring_position(text, opening_line, indent):
            continue
        cuts.append((close, newline + prefix[:indent]))
    for position, insert in reversed(cuts):
        text = text[:position] + insert + text[position:]
    return text


def _is_docstring_position(text: str, line_start: int, indent: int) -> bool:
    """Whether a string statement at `line_start` (indented by `indent`) is the first statement of the module or of
    a def or class body (ruff's output: consistent indentation, headers ending in `:`)."""
    previous: list[str] = []
    end = line_start - 1
    while end > 0:
        start = text.rfind("\n", 0, end) + 1
        line = text[start:end].rstrip("\r")
        end = start - 1
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not previous and not stripped.endswith(":"):
            return False  # the statement before it is not a header
        previous.append(line)
        if len(line) - len(line.lstrip(" \t")) < indent and not stripped.startswith((")", "]")):
            return _HEADER.match(stripped) is not None
    return not previous  # only comments and blank lines before it: the module docstring


_SPLIT_MESSAGE = re.compile(
    r"^(?P<indent>[ \t]*)assert (?P<test>[^\r\n]+), \(\r?\n"
    r"(?P=indent)[ \t]+(?P<message>[^\r\n]+)\r?\n"
    r"(?P=indent)\)(?P<comment>[ \t]+#[^\r\n]*)?(?=\r?$)", re.MULTILINE)
_STRING = r"""[rRbBuUfF]{0,2}(?:"(?:[^"\\\r\n]|\\.)*"|'(?:[^'\\\r\n]|\\.)*')"""
_ATOM = re.compile(rf"[A-Za-z_][\w.]*|{_STRING}(?:[ \t]+{_STRING})*")  # a name, or strings (implicitly joined)


def _assert_messages(text: str, newline: str) -> str:
    """Ruff wraps a long assert's message in parentheses (`assert test, (\\n    "message"\\n)`) where black splits
    the test (`assert (\\n    test\\n), "message"`); each reformats the other's layout. Black's layout is kept under
    `# fmt: skip`, which both formatters honour: ruff's first line held the test, so every line still fits."""
    if ", (\n" not in text and ", (\r\n" not in text:
        return text

    def black_layout(match: re.Match[str]) -> str:
        indent, test, message = match.group("indent"), match.group("test"), match.group("message")
        comment = match.group("comment") or ""
        if not _ATOM.fullmatch(message) or "fmt:" in comment:
            return match.group(0)  # a message black parenthesises too (an operator, a call): both agree
        return (f"{indent}assert ({newline}{indent}    {test}{newline}{indent}), {message}{comment}  # fmt: skip")

    return _SPLIT_MESSAGE.sub(black_layout, text)


_PRAGMA = re.compile(r"#[ \t]*(?:(?i:noqa)|type:|pyright:|pylint:|flake8:|ruff:|isort:|nosec)[^\r\n]*(?=\r?$)",
                     re.MULTILINE)
_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.FunctionDef,
             ast.AsyncFunctionDef, ast.ClassDef, *((ast.Match,) if hasattr(ast, "Match") else ()),
             *((ast.TryStar,) if hasattr(ast, "TryStar") else ()))


def _pragma_lines(text: str, line_length: int) -> str:
    """Ruff does not count a trailing pragma comment in the line width; black does, and splits a statement that
    fits only without it. Such one-line statements get `# fmt: skip` after the pragma."""
    candidates: list[tuple[int, int]] = []  # (line number, end of the line's text)
    for match in _PRAGMA.finditer(text):
        line_start = text.rfind("\n", 0, match.start()) + 1
        code = text[line_start:match.start()].rstrip(" \t")
        if (len(code) == match.start() - line_start or "fmt:" in match.group()
                or _width(text[line_start:match.end()]) <= line_length or _width(code) > line_length
                or not any(c in code for c in "([{")):
            continue  # not a trailing comment, one with `# fmt:` already, a short line, or one black cannot split
        candidates.append((text.count("\n", 0, line_start) + 1, match.end()))
    if not candidates:
        return text
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    one_line = {node.lineno for node in ast.walk(tree) if isinstance(node, ast.stmt)
                and not isinstance(node, _COMPOUND) and node.lineno == node.end_lineno}
    for line, end in reversed(candidates):
        if line in one_line:
            text = text[:end] + "  # fmt: skip" + text[end:]
    return text


# --------------------------------------------------------------------------------------------------------------------
# Comparing


def same_code(existing: str, fresh: str) -> bool:
    """`existing` is `fresh`, or `fresh` after a formatter (see the module docstring)."""
    if existing == fresh:
        return True
    try:
        return _tree(existing) == _tree(fresh) and _comments(existing) == _comments(fresh)
    except (SyntaxError, ValueError, tokenize.TokenError):
        return False


def _tree(text: str) -> str:
    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            # Formatters re-indent docstrings, drop trailing spaces and move closing quotes.
            docstring = "\n".join(line.rstrip() for line in inspect.cleandoc(body[0].value.value).splitlines())
            body[0].value.value = docstring.strip()
    return ast.dump(tree, include_attributes=False)


def _comments(text: str) -> list[str]:
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    # `#x` and `# x` alike (black and ruff put a space after the `#`); `# fmt: skip` is the formatters' own.
    comments = [" ".join(_FMT_SKIP.sub("", t.string)[1:].split()) for t in tokens if t.type == tokenize.COMMENT]
    return [c for c in comments if c]


_FMT_SKIP = re.compile(r"[ \t]*#[ \t]*fmt:[ \t]*skip[ \t]*$")
