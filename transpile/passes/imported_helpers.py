"""Triton helpers imported from other modules of the project, copied into the file before anything is analysed.

A kernel file often imports the helpers it calls (``from aiter.ops.triton.utils._triton.moe_common import
_write_zeros_to_output``). A Gluon kernel can call only Gluon functions, and helpers that do no more than elementwise
math on what they are given; a helper that makes tensors, loads, stores or multiplies must be translated beside the
kernel. So this pass copies such a helper, with the helpers and constants it reads (transitively, across the modules
it imports from), into the module, after its imports, under a comment naming where it comes from; its name leaves the
import (helpers the file imports but none of its Triton functions reads stay as they are). From there the helper is
a helper of the file like any other: translated with the kernels that call it, specialised per call, kept as Triton
beside a kept kernel. The variant stays self-contained: it calls no Triton code of another module.

What is copied is found on disk (`transpile.analysis.imports`: the file of the module as the import names it, every
look-up recorded for the cache). A helper that cannot be copied (it reads a class, a Python function, a name its
module binds otherwise than by a definition; a name the file binds itself) stays imported, and the refusal of the
kernel that calls it says why. Helpers that only compute elementwise stay imported (a Gluon kernel calls them).

`bring_in_helpers(source, facts)` returns the new text and its line map (the copied lines map to the import they
replace), or None when the file imports no such helper.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import libcst as cst

from transpile.analysis.imports import HelperClosure, helper_closure, top_bindings
from transpile.analysis.layouts import imported_helpers
from transpile.cst_utils import module_code, names_in, node_code
from transpile.discover import ModuleFacts
from transpile.source import SourceFile, pieces_line_map


def bring_in_helpers(source: SourceFile, facts: ModuleFacts) -> tuple[str, list[int]] | None:
    module = source.module
    read = set().union(*(names_in(fn.node) for fn in facts.functions.values()))
    found = [h for h in imported_helpers(module, source.path) if h[2] not in facts.functions and h[2] in read]
    if not found:
        return None
    bindings = top_bindings(ast.parse(source.text))
    brought = {bound for _, _, bound, _, _ in found}
    closures: list[tuple[cst.SimpleStatementLine, cst.ImportAlias, HelperClosure]] = []
    merged: dict[str, str] = {}  # name -> what the copies bind it to
    for statement, alias, bound, origin, imported in found:
        if bound != imported:
            continue  # imported under another name: stays imported (the refusal says so)
        closure = helper_closure(source.path, origin, bound,
                                 {n: b for n, b in bindings.items() if n not in brought})
        if isinstance(closure, HelperClosure) and all(merged.get(n, text) == text for n, text in closure.defines):
            closures.append((statement, alias, closure))
            merged.update(closure.defines)  # (a later helper whose copy binds one of these names otherwise stays)
    if not closures:
        return None
    # One copy of each statement, whichever helper needs it: the imported module's first, each in its file's order.
    statements: list[str] = []
    imports: list[str] = []
    origins: list[str] = []
    for _, _, closure in closures:
        statements += [s for s in closure.statements if s not in statements]
        imports += [i for i in closure.imports if i not in imports]
        if closure.origin not in origins:
            origins.append(closure.origin)
    removed: dict[cst.SimpleStatementLine, set[int]] = {}
    for statement, alias, _ in closures:
        removed.setdefault(statement, set()).add(id(alias))
    names = ", ".join(f"`{c.name}`" for _, _, c in closures)
    files = ", ".join(sorted({_shown(c.file) for _, _, c in closures}))
    comment = (f"{names}: Triton helper{'s' if len(closures) > 1 else ''} of {', '.join(f'`{o}`' for o in origins)} "
               f"({files}), copied here from that module (with what {'they read' if len(closures) > 1 else 'it reads'})"
               ": a Gluon kernel can call only helpers translated beside it.")
    wrapped = textwrap.wrap(comment, width=118, initial_indent="# ", subsequent_indent="# ", break_on_hyphens=False,
                            break_long_words=False)
    block = "\n".join([*wrapped, *imports, "\n\n\n".join(statements)]) + "\n"
    parsed = cst.parse_module(block)  # (the comment is the parse's header: it goes before the first statement)
    inserted = list(parsed.body)
    inserted[0] = inserted[0].with_changes(leading_lines=[cst.EmptyLine(indent=False), cst.EmptyLine(indent=False),
                                                          *parsed.header, *inserted[0].leading_lines])
    anchor = max([_last_import(list(module.body)), *(i for i, s in enumerate(module.body) if s in removed)])
    line = source.position(closures[0][0])[0]
    body: list[cst.BaseStatement] = []
    pieces: list[tuple[str, str, int]] = [(node_code(module, n), node_code(module, n), 0) for n in module.header]
    for i, statement in enumerate(module.body):
        old = node_code(module, statement)
        if statement in removed:
            kept = _without(statement, removed[statement])  # type: ignore[arg-type]
            pieces.append((old, node_code(module, kept) if kept is not None else "", 0))
            if kept is not None:
                body.append(kept)
        else:
            pieces.append((old, old, 0))
            body.append(statement)
        if i == anchor:
            body += inserted
            pieces.append(("", "".join(node_code(module, n) for n in inserted), line))
    pieces += [(node_code(module, n), node_code(module, n), 0) for n in module.footer]
    text = module_code(module.with_changes(body=body))
    return text, pieces_line_map(source.text, text, pieces)


def _without(statement: cst.SimpleStatementLine, aliases: set[int]) -> cst.SimpleStatementLine | None:
    small = []
    for node in statement.body:
        if isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar):
            names = [a for a in node.names if id(a) not in aliases]
            if not names:
                continue
            names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            node = node.with_changes(names=names)
        small.append(node)
    return statement.with_changes(body=small) if small else None


def _last_import(body: list[cst.BaseStatement]) -> int:
    """Index of the last import statement before the first definition (-1: none)."""
    last = -1
    for i, statement in enumerate(body):
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            break
        if isinstance(statement, cst.SimpleStatementLine) and any(
                isinstance(s, (cst.Import, cst.ImportFrom)) for s in statement.body):
            last = i
    return last


def _shown(path: Path) -> str:
    """The copied module's file as a reader finds it: relative to the current directory where it is below it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return Path(path).name
