"""Kernels defined under a module-level block, translated where they stand.

Some kernel modules define their kernels inside a module-level `if`, `try` or `with` block: a feature or version
test (torchao's ``if has_triton():``, ``if triton.__version__ >= "2.1.0":``), an optional import. The variant keeps
that structure: each block that holds kernels is translated as a module of its own (its statements, after the
imports and constants of the module that come before the block), and the translation takes the block's place, with the Gluon
imports and helpers it needs at the block's top, so that they run only where the block runs. The rest of the file
stays as written. Diagnostics point at the user's lines and columns (the block's statements map back to where they
stand).

A file that also defines kernels at module level, whose kernels sit deeper (a block in a block, a class, a
function), or whose block calls a jit function defined outside it, is not translated this way: its kernels below
module level are kept as written, with TT007.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst

from transpile.cst_utils import node_code
from transpile.cst_walk import preorder
from transpile.discover import nested_kernels
from transpile.source import SourceFile

# A statement that marks where the block's own statements start in the text translated for it.
_SENTINEL = "__triton_transpile_block__ = None"


def kernel_blocks(source: SourceFile) -> list[tuple[int, cst.IndentedBlock]] | None:
    """(index of the module-level statement, its block) of each block that holds kernels, where every kernel of the
    file below module level is a statement of one of them; None where one is not (or none is below module level)."""
    nested = nested_kernels(source)
    if not nested:
        return None
    found: list[tuple[int, cst.IndentedBlock]] = []
    jit: dict[str, int] = {}  # each kernel's block (its index in `found`)
    held: set[int] = set()
    for index, statement in enumerate(source.module.body):
        if not isinstance(statement, (cst.If, cst.Try, cst.With)):
            continue
        for block in _blocks(statement):
            kernels = [k for k, _ in nested if any(s is k for s in block.body)]
            if kernels:
                for k in kernels:
                    jit.setdefault(k.name.value, len(found))
                held |= {id(k) for k in kernels}
                found.append((index, block))
    if len(held) != len(nested):
        return None
    # Each block must hold what its jit functions call of the file's jit functions (a helper in another block, or
    # at module level, is another module's to translate): else the file is kept as written.
    module_level = {s.name.value for s in source.module.body if isinstance(s, cst.FunctionDef)}
    for index, (_, block) in enumerate(found):
        for statement in block.body:
            if not isinstance(statement, cst.FunctionDef) or statement.name.value not in jit:
                continue
            called = {n.func.value for n in preorder(statement) if isinstance(n, cst.Call)
                      and isinstance(n.func, cst.Name)}
            if any(jit.get(name, index) != index for name in called) or called & module_level:
                return None
    return found


def _blocks(statement: cst.CSTNode) -> list[cst.IndentedBlock]:
    """The indented blocks of a module-level compound statement: an `if`'s body and its `elif`/`else` branches, a
    `try`'s body, handlers, `else` and `finally`, a `with`'s body."""
    blocks: list[cst.BaseSuite] = []
    if isinstance(statement, cst.If):
        blocks.append(statement.body)
        if isinstance(statement.orelse, cst.If):
            return [*[b for b in blocks if isinstance(b, cst.IndentedBlock)], *_blocks(statement.orelse)]
        if isinstance(statement.orelse, cst.Else):
            blocks.append(statement.orelse.body)
    elif isinstance(statement, cst.Try):
        blocks += [statement.body, *(h.body for h in statement.handlers)]
        blocks += [part.body for part in (statement.orelse, statement.finalbody) if part is not None]
    elif isinstance(statement, cst.With):
        blocks.append(statement.body)
    return [b for b in blocks if isinstance(b, cst.IndentedBlock)]


def block_text(source: SourceFile, index: int, block: cst.IndentedBlock) -> tuple[str, list[int]]:
    """The text translated for `block` (the module's imports before its statement, the block's own imports, a marker,
    the block's other statements, dedented) and its line map (its line -> the file's line)."""
    module = source.module
    prefix = _prefix(module, index)
    parts: list[str] = []
    lines: list[int] = [0]  # (line_map's entry 0 is unused)

    def add(statements: list[cst.BaseStatement]) -> None:
        for statement in statements:
            code = node_code(module, statement.with_changes(leading_lines=[]))
            parts.append(code)
            lines.extend([source.position(statement)[0]] * code.count("\n"))

    def add_block(statements: list[cst.BaseStatement]) -> None:  # (with their comments and blank lines)
        if statements:
            code = cst.Module(body=statements).code
            start = _first_line(source, statements[0]) - len(statements[0].leading_lines)
            parts.append(code)
            lines.extend(start + k for k in range(code.count("\n")))

    # the module's imports, the block's own, the module's constants, then the marker: the Gluon imports and helpers
    # go after every import
    statements = list(block.body)
    imports = 0
    while imports < len(statements) and _is_import(statements[imports]):
        imports += 1
    add([s for s in prefix if _is_import(s)])
    add_block(statements[:imports])
    add([s for s in prefix if not _is_import(s)])
    parts.append(_SENTINEL + "\n")
    lines.append(lines[-1] if len(lines) > 1 else source.position(module.body[index])[0])
    add_block(statements[imports:])
    lines.append(lines[-1])
    return "".join(parts), lines


def _first_line(source: SourceFile, statement: cst.BaseStatement) -> int:
    """The line a statement's code starts on: its first decorator's, for a decorated definition."""
    decorators = getattr(statement, "decorators", ())
    return source.position(decorators[0] if decorators else statement)[0]


def _prefix(module: cst.Module, index: int) -> list[cst.SimpleStatementLine]:
    """The imports and literal constants of the module before its statement `index`: at its top level, and the imports
    in the body of a module-level `try:` (`try: import triton ... except ImportError: ...`)."""
    found = []
    for statement in module.body[:index]:
        if _is_import(statement) or _is_constant(statement):
            found.append(statement)
        elif isinstance(statement, cst.Try):
            found += [s for s in statement.body.body if _is_import(s)]
    return found


def _is_constant(statement: cst.BaseStatement) -> bool:
    """A module-level constant a kernel may read: `NAME = <literal>` or `NAME = tl.constexpr(<literal>)`."""
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
        return False
    small = statement.body[0]
    value = small.value if isinstance(small, (cst.Assign, cst.AnnAssign)) else None
    if isinstance(value, cst.Call) and len(value.args) == 1 and (
            isinstance(value.func, cst.Attribute) and value.func.attr.value == "constexpr"
            or isinstance(value.func, cst.Name) and value.func.value == "constexpr"):
        value = value.args[0].value
    if isinstance(value, cst.UnaryOperation):
        value = value.expression
    return isinstance(value, (cst.Integer, cst.Float, cst.SimpleString)) or (
        isinstance(value, cst.Name) and value.value in ("True", "False", "None"))


def _is_import(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body)


def in_place(source: SourceFile, translated: list[tuple[int, cst.IndentedBlock, str]]) -> str:
    """The file's text with each block replaced by the translation of its text (`block_text`, translated: without
    the variant's header): the statements the translation put before the marker that are not the file's own
    imports (the Gluon imports and helpers) first, then those after it."""
    module = source.module
    replaced: dict[int, cst.IndentedBlock] = {}
    for index, block, text in translated:
        parsed = cst.parse_module(text)
        # (the file's own statements come first, once each: a later copy of one is the block's own, and stays)
        own = Counter(node_code(module, s.with_changes(leading_lines=[])) for s in _prefix(module, index))
        before: list[cst.BaseStatement] = []
        after: list[cst.BaseStatement] = []
        seen = False
        for statement in parsed.body:
            if not seen and _is_sentinel(statement):
                seen = True
            elif seen:
                after.append(statement)
            else:
                code = node_code(parsed, statement.with_changes(leading_lines=[]))
                if own[code] > 0:
                    own[code] -= 1
                else:
                    before.append(statement)
        if before and after:  # (the helpers' two blank lines before the block's own first statement)
            after[0] = after[0].with_changes(leading_lines=[cst.EmptyLine(indent=False)] * 2 + [
                line for line in after[0].leading_lines if line.comment is not None])
        replaced[id(block)] = block.with_changes(body=[*before, *after])
    return module.visit(_Replace(replaced)).code


def _is_sentinel(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and cst.Module(body=[statement]).code.strip() == _SENTINEL


class _Replace(cst.CSTTransformer):
    def __init__(self, replaced: dict[int, cst.IndentedBlock]) -> None:
        super().__init__()
        self.replaced = replaced

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        return self.replaced.get(id(original), updated)


@dataclass(frozen=True)
class KernelBlock:
    """A module-level block holding kernels, and what is translated for it (`block_text`)."""

    index: int  # of the module-level statement that holds the block
    block: cst.IndentedBlock = field(repr=False)
    text: str = field(repr=False)
    lines: list[int] = field(repr=False)  # the text's line -> the file's line
    holder: int  # the line of that statement: a line after it is the block's
    indent: int  # the block's indentation width: the columns its dedented text is short of


def kernel_block_texts(source: SourceFile) -> list[KernelBlock]:
    """Each block holding kernels with its text, where the file's kernels all stand in such blocks (`kernel_blocks`),
    else none: what the translation, `verify` and `explain` read."""
    found: list[KernelBlock] = []
    for index, block in kernel_blocks(source) or []:
        text, lines = block_text(source, index, block)
        indent = block.indent if block.indent is not None else source.module.default_indent
        found.append(KernelBlock(index, block, text, lines, source.position(source.module.body[index])[0],
                                 len(indent)))
    return found


def translate_blocks(source: SourceFile, translate: Callable[[KernelBlock], str | None]) -> str | None:
    """The file's text with each block holding kernels translated where it stands (`translate`: a block -> the
    translation of its text without the header, or None where it cannot be); None where the file's kernels are not
    all statements of module-level blocks, or a block cannot be translated."""
    blocks = kernel_block_texts(source)
    if not blocks:
        return None
    done: list[tuple[int, cst.IndentedBlock, str]] = []
    for block in blocks:
        translated = translate(block)
        if translated is None:
            return None
        done.append((block.index, block.block, translated))
    return in_place(source, done)
