"""Reading and parsing one source file, with located errors."""

from __future__ import annotations

import ast
import difflib
import hashlib
import io
import os
import re
import stat
import tokenize
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
from libcst._position import CodePosition, CodeRange
from libcst.metadata import MetadataWrapper, PositionProvider, ScopeProvider
from libcst.metadata.position_provider import NEWLINE_RE, PositionProvidingCodegenState

from transpile import cst_walk
from transpile.cst_utils import node_code
from transpile.diagnostics import Diagnostic, TranspileError

cst_walk.install()  # read-only visits (metadata providers, analyses) walk the tree without rebuilding it


class _Syntactic:
    """``PositionProvidingCodegenState.record_syntactic_position`` as a plain context manager (libcst's is a
    generator, made for most nodes of the tree): the same start and end, the same order of recording."""

    __slots__ = ("end_node", "node", "start", "start_node", "state")

    def __init__(self, state: _PositionState, node: cst.CSTNode, start_node: cst.CSTNode | None,
                 end_node: cst.CSTNode | None) -> None:
        self.state, self.node, self.start_node, self.end_node = state, node, start_node, end_node

    def __enter__(self) -> None:
        self.start = CodePosition(self.state.line, self.state.column)

    def __exit__(self, *exc: object) -> None:
        state = self.state
        computed = state.provider._computed
        end = CodePosition(state.line, state.column)
        start = computed[self.start_node].start if self.start_node is not None else self.start
        end = computed[self.end_node].end if self.end_node is not None else end
        computed[self.node] = CodeRange(start, end)


class _PositionState(PositionProvidingCodegenState):
    def record_syntactic_position(self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None,
                                  end_node: cst.CSTNode | None = None) -> _Syntactic:  # type: ignore[override]
        return _Syntactic(self, node, start_node, end_node)

    def _update_position(self, value: str) -> None:
        if "\n" in value or "\r" in value:
            segments = NEWLINE_RE.split(value)
            self.line += len(segments) - 1
            self.column = len(segments[-1])  # a line end resets the column; what follows it on the line counts
        else:
            self.column += len(value)


class Positions(PositionProvider):
    """libcst's `PositionProvider` (the same positions), generated with less overhead per node (`_Syntactic`)."""

    def _gen_impl(self, module: cst.Module) -> None:
        module._codegen(_PositionState(default_indent=module.default_indent, default_newline=module.default_newline,
                                       provider=self))


@dataclass
class SourceFile:
    """One parsed Python file plus the metadata the analyses read (positions, qualified names).

    Qualified names are what libcst's `QualifiedNameProvider` gives, asked of the scopes one node at a time when an
    analysis needs them (the provider would walk the whole tree once more to set up a lazy value for every node)."""

    path: str
    text: str
    wrapper: MetadataWrapper
    scopes: dict = field(repr=False)
    line_map: list[int] | None = field(repr=False, default=None)  # see `parse_source`
    # Helpers whose calls a rewrite inlined -> the functions that inlined them (`transpile.passes.inline`): still
    # their helpers (`discover`), for the Triton code kept as written.
    inlined: Mapping[str, frozenset[str]] = field(repr=False, default_factory=dict)
    _qualified: dict = field(repr=False, default_factory=dict)
    _reexports: list[tuple[str, str]] | None = field(repr=False, default=None)
    _parents: dict | None = field(repr=False, default=None)
    _positions: Mapping | None = field(repr=False, default=None)

    @property
    def positions(self) -> Mapping:
        """Each node's `CodeRange` (`PositionProvider`'s map; lines of the source through `line_map`), made when first
        asked for: the parse of a source that canonicalisation rewrites is read for its names, never its positions."""
        if self._positions is None:
            positions = Positions()._gen(self.wrapper)
            line_map = self.line_map
            if line_map is not None:
                last = len(line_map) - 1

                def moved(p: CodePosition) -> CodePosition:
                    return CodePosition(line_map[min(p.line, last)] or 1, p.column)

                positions = {node: CodeRange(moved(r.start), moved(r.end)) for node, r in positions.items()}
            self._positions = positions
        return self._positions

    @property
    def module(self) -> cst.Module:
        return self.wrapper.module

    @property
    def sha256(self) -> str:
        return sha256_text(self.text)

    def position(self, node: cst.CSTNode) -> tuple[int, int]:
        """1-based line and column of a node of this file's tree."""
        pos = self.positions.get(node)
        if pos is None:
            return (1, 1)
        return (pos.start.line, pos.start.column + 1)

    def qualified_name(self, node: cst.CSTNode) -> str | None:
        """The single fully qualified name a Name/Attribute refers to, e.g. ``triton.language.load``."""
        base = node
        while isinstance(base, cst.Attribute):
            base = base.value
        if not isinstance(base, cst.Name):  # `tl.load(p).to`: an attribute of a call result, not a dotted name
            return None
        names = self._qualified.get(node)
        if names is None:
            names = self._qualified[node] = self._qualified_names(node)
        if not names:
            return None
        name = sorted(n.name for n in names)[0]
        for prefix, target in self.reexports:
            if name == prefix or name.startswith(prefix + "."):
                return target + name[len(prefix):]
        return name

    @property
    def reexports(self) -> list[tuple[str, str]]:
        """Triton as a project module re-exports it (`from vllm.triton_utils import tl, triton`, a shim for platforms
        without Triton): (`vllm.triton_utils.triton`, `triton`) and (`vllm.triton_utils.tl`, `triton.language`),
        where a module-level `from M import ...` (M not Triton's own) imports the name `triton` that decorates a
        function here (`@triton.jit`, `@triton.autotune`, `@triton.heuristics`), and `tl` beside it. The qualified
        names read through them as Triton's."""
        if self._reexports is None:
            found: list[tuple[str, str]] = []
            for statement in self.module.body:
                if not isinstance(statement, cst.SimpleStatementLine):
                    continue
                for small in statement.body:
                    if not isinstance(small, cst.ImportFrom) or small.relative or small.module is None \
                            or isinstance(small.names, cst.ImportStar):
                        continue
                    module = node_code(self.module, small.module)
                    if module == "triton" or module.startswith("triton."):
                        continue
                    local = {alias.name.value: (alias.asname.name.value if alias.asname else alias.name.value)
                             for alias in small.names if isinstance(alias.name, cst.Name)
                             and (alias.asname is None or isinstance(alias.asname.name, cst.Name))}
                    if "triton" not in local or not re.search(
                            rf"^\s*@\s*{re.escape(local['triton'])}\s*\.\s*(jit|autotune|heuristics)\b",
                            self.text, re.MULTILINE):
                        continue
                    found.append((f"{module}.triton", "triton"))
                    if "tl" in local:
                        found.append((f"{module}.tl", "triton.language"))
            self._reexports = found
        return self._reexports

    def _qualified_names(self, node: cst.CSTNode) -> set | None:
        """`QualifiedNameProvider`'s value for `node`: None for a node outside this tree."""
        if node not in self.scopes:
            return None
        scope = self.scopes[node]
        return scope.get_qualified_names_for(node) if scope else set()

    @property
    def parents(self) -> dict:
        """Each node's parent (`ParentNodeProvider`'s map), made when first asked for."""
        if self._parents is None:
            self._parents = cst_walk.parent_map(self.module)
        return self._parents

    def diagnostic(self, node: cst.CSTNode, code: str, message: str) -> Diagnostic:
        line, col = self.position(node)
        return Diagnostic(self.path, line, col, code, message)

    def code(self, node: cst.CSTNode) -> str:
        return node_code(self.module, node)  # (made once per node and layout)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=]")  # (PEP 263)


def source_encoding(data: bytes) -> str:
    """The encoding Python reads a file's bytes in (PEP 263, `tokenize.detect_encoding`): a UTF-8 BOM gives
    "utf-8-sig", a `# -*- coding: latin-1 -*-` cookie on line 1 or 2 its codec, else "utf-8". ValueError for an
    encoding Python does not know (or a BOM with another cookie)."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        raise ValueError(str(exc)) from None
    return encoding


def decode_source(data: bytes, errors: str = "strict") -> str:
    """The text of a Python file's bytes, as Python reads them (`source_encoding`), without a BOM."""
    try:
        encoding = source_encoding(data)
    except ValueError:
        encoding = "utf-8"
    return data.decode(encoding, errors)


def read_source(path: Path) -> tuple[str, str]:
    """The text of the Python file `path` and its encoding (`source_encoding`). TT002 for a directory, a file that is
    not a regular one (a FIFO would block the read forever: it is never opened), one that cannot be read, or bytes
    that are not text in the file's encoding (at their line and column)."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise TranspileError(Diagnostic(str(path), 1, 1, "TT002", f"cannot read: {exc.strerror}")) from None
    if stat.S_ISDIR(mode):
        raise TranspileError(Diagnostic(str(path), 1, 1, "TT002", "is a directory, expected a Python file"))
    if not stat.S_ISREG(mode):
        raise TranspileError(Diagnostic(str(path), 1, 1, "TT002",
                                        f"is not a regular file ({file_kind(mode)}); not read"))
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TranspileError(Diagnostic(str(path), 1, 1, "TT002", f"cannot read: {exc.strerror}")) from None
    try:
        encoding = source_encoding(data)
    except ValueError as exc:
        cookie = next((i for i, line in enumerate(data.split(b"\n", 2)[:2], 1) if _COOKIE.match(line)), None)
        if cookie is not None:
            raise TranspileError(Diagnostic(str(path), cookie, 1, "TT002", f"bad coding declaration: {exc}")) from None
        encoding = "utf-8"  # bytes that are not UTF-8 on the first lines: located below
    try:
        return data.decode(encoding), encoding
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        what = "UTF-8 text" if encoding in ("utf-8", "utf-8-sig") else f"text in its declared encoding ({encoding})"
        raise TranspileError(
            Diagnostic(str(path), line, col, "TT002", f"not {what} (is this a Python source file?)")
        ) from None


def read_text(path: Path) -> str:
    """The text of the Python file `path` (`read_source`)."""
    return read_source(path)[0]


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, in words (from its `st_mode`)."""
    for test, name in ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character "
                       "device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a file"


#: A file's path as translations name it (relative to the project root, which need not be the current directory) ->
#: where it is: what the analyses that read other files resolve from (the module a helper is imported from).
_LOCATIONS: dict[str, str] = {}


def set_location(display: str, location: str | Path) -> None:
    """Translations of the file named `display` read other files from beside `location`."""
    _LOCATIONS[display] = str(location)


def location(display: str) -> str:
    """Where the file a translation names `display` is (`display` itself, relative to the current directory, unless
    `set_location` said otherwise)."""
    return _LOCATIONS.get(display, display)


def parse_source(text: str, path: str, line_map: list[int] | None = None,
                 inlined: Mapping[str, frozenset[str]] | None = None) -> SourceFile:
    """`text` parsed; `line_map` (a rewrite of the file: its line -> the source's line) makes every position a line
    of the source, so that diagnostics about rewritten code still point at what the user wrote."""
    # CPython's own parser gives the most precise location and message for a syntax error; libcst then builds the
    # concrete tree that the rewrites keep byte-identical where they do not touch it.
    try:
        compile(text, path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as exc:
        raise TranspileError(
            Diagnostic(path, exc.lineno or 1, exc.offset or 1, "TT001", f"syntax error: {exc.msg}")
        ) from None
    except ValueError as exc:  # e.g. "source code string cannot contain null bytes"
        raise TranspileError(Diagnostic(path, 1, 1, "TT002", f"not Python source: {exc}")) from None
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        message = str(exc.message).strip().splitlines()[0] if exc.message else "invalid syntax"
        raise TranspileError(
            Diagnostic(path, exc.raw_line, exc.raw_column + 1, "TT001", f"syntax error: {message}")
        ) from None
    except Exception as exc:  # libcst raises a few other exception types on exotic input
        raise TranspileError(Diagnostic(path, 1, 1, "TT001", f"cannot parse: {exc}")) from None
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    return SourceFile(path=path, text=text, wrapper=wrapper, scopes=wrapper.resolve(ScopeProvider), line_map=line_map,
                      inlined=inlined or {})


def line_map(old: str, new: str) -> list[int]:
    """Line of `new` -> line of `old`: equal lines map to themselves, each line of a replaced block to the line of
    what it replaced that starts most like it (`b_k = tl.load(...)` to `b_k = tl.load(p_k, ...)`, else the first),
    an inserted block to the line it was inserted before."""
    a, b = old.splitlines(), new.splitlines()
    out = [0] * (len(b) + 2)
    _map_lines(a, b, 0, 0, len(a), out)
    out[len(b) + 1] = max(len(a), 1)
    return out


def _map_lines(a: list[str], b: list[str], i0: int, j0: int, total: int, out: list[int]) -> None:
    """`line_map`'s entries for lines `b` of the new text (from line `j0 + 1`), which replace lines `a` of the old
    (from line `i0 + 1`; `total` lines in all)."""
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        for j in range(j1, j2):
            if tag == "equal":
                out[j0 + j + 1] = i0 + i1 + (j - j1) + 1
            else:  # (a line rewritten: the old line of the hunk it shares the longest start with, `b_k = tl.load(`)
                out[j0 + j + 1] = min(i0 + _likeliest(a, i1, i2, b[j]) + 1, max(total, 1))


def _likeliest(a: list[str], i1: int, i2: int, line: str) -> int:
    """The index among `a[i1:i2]` of the line that starts most like `line` (indentation aside), `i1` where none
    shares a character with it."""
    text = line.lstrip()
    best, length = i1, 0
    for i in range(i1, i2):
        other = a[i].lstrip()
        common = len(os.path.commonprefix([text, other]))
        if common > length:
            best, length = i, common
    return best


def replaced_line_map(module: cst.Module, old: str, replaced: Mapping[cst.CSTNode, cst.CSTNode], new: str
                      ) -> list[int]:
    """`line_map(old, new)` where `old` is the text of `module` and `new` that of `module` with the top-level
    statements in `replaced` replaced: each replaced statement's lines are matched with its replacement's only and
    the rest of the file maps to itself, so that the cost grows with the statements replaced, not with the square of
    the file's length (difflib's matcher over a whole file does, where lines repeat: blank lines, `)`, the same
    statements in many kernels)."""
    nodes = [*module.header, *module.body, *module.footer]
    return pieces_line_map(old, new, [(node_code(module, n), node_code(module, replaced.get(n, n)), 0) for n in nodes])


def pieces_line_map(old: str, new: str, pieces: list[tuple[str, str, int]]) -> list[int]:
    """`line_map(old, new)` where both texts are made of pieces, each (old text, new text, line; every piece ends
    with a line end): a piece unchanged maps to itself, a changed one is matched with what it replaced only, and a
    piece inserted (no old text) maps all its lines to `line`."""
    pieces_old = [a for a, _, _ in pieces]
    pieces_new = [b for _, b, _ in pieces]
    # (each piece ends with a line end, so the pieces' lines are the file's; a file without a final newline drops it)
    if not all(p.endswith(("\n", "\r")) for p in (*pieces_old, *pieces_new) if p) or not (
            _joined_is(pieces_old, old) and _joined_is(pieces_new, new)):
        return line_map(old, new)
    total = len(old.splitlines())
    count = len(new.splitlines())
    out = [0] * (count + 2)
    i0 = j0 = 0
    for before, after, line in pieces:
        a, b = before.splitlines(), after.splitlines()
        if before == after:
            for j in range(len(b)):
                out[j0 + j + 1] = i0 + j + 1
        elif not a:
            for j in range(len(b)):
                out[j0 + j + 1] = line or min(i0 + 1, max(total, 1))
        else:
            _map_lines(a, b, i0, j0, total, out)
        i0 += len(a)
        j0 += len(b)
    out[count + 1] = max(total, 1)
    return out


def _joined_is(pieces: list[str], text: str) -> bool:
    """`pieces` make `text`, but for the line end a module without a final newline drops."""
    joined = "".join(pieces)
    return joined.startswith(text) and joined[len(text):] in ("", "\n", "\r", "\r\n")
