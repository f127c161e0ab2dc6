"""Masks bound to `None` by name, left out of the loads and stores that read them.

A kernel that switches its masks on compile-time flags often names "no mask" ::

    for _ in range(num_iters):
        if DIVISIBLE_M:
            mask_a = None
        else:
            mask_a = mask_m[:, None]
        a = tl.load(a_ptrs, mask_a)

(FlagGems' `bmm` on four backends). Once the flag's branch is hoisted out of the loop (`transpile.passes.unswitch`),
one copy of the loop reads `mask_a = None` then `tl.load(a_ptrs, mask_a)`: a load without a mask, which the pipeline
analyses read only where the call says so (a copy of a later iteration adds its own bound to a load's mask, and `None
& bound` is not a mask). This pass leaves out such a name where a load or store takes it as its mask
or `other` (it drops the argument: `tl.load(a_ptrs)`), where the binding is certain: the name's last binding before
the call, in the same block or a block around it, is `name = None`, and nothing between (a nested loop or branch
included) rebinds it. The binding itself stays (dead where nothing else reads it). Every line stays where it was: an
argument on a line of its own, or followed by positional ones, is left as written.

`drop_none_masks(source, facts)` returns the new module text, or None when nothing changes.
"""

from __future__ import annotations

import libcst as cst

from transpile.cst_utils import bound_names, module_code
from transpile.cst_walk import preorder, transform
from transpile.discover import ModuleFacts, language_name
from transpile.source import SourceFile

_MEMORY = ("load", "core.load", "store", "core.store")


def drop_none_masks(source: SourceFile, facts: ModuleFacts) -> str | None:
    if "None" not in source.text:
        return None
    targets: set[int] = set()
    for fn in facts.functions.values():
        _block(source, list(fn.node.body.body), set(), targets)
    if not targets:
        return None
    return module_code(transform(source.module, _Replace(targets)))


def _block(source: SourceFile, statements: list[cst.BaseStatement], nones: set[str], targets: set[int]) -> None:
    """Walk one block in order with `nones`, the names bound to `None` on entry (copied: the block's own bindings
    do not leave it), collecting the ids of the mask names to replace."""
    nones = set(nones)
    for statement in statements:
        bound = bound_names(statement)
        if isinstance(statement, cst.SimpleStatementLine):
            _calls(source, statement, nones, targets)
            nones -= bound
            if len(statement.body) == 1 and isinstance(statement.body[0], cst.Assign) \
                    and len(statement.body[0].targets) == 1 \
                    and isinstance(statement.body[0].targets[0].target, cst.Name) \
                    and isinstance(statement.body[0].value, cst.Name) and statement.body[0].value.value == "None":
                nones.add(statement.body[0].targets[0].target.value)
            continue
        # A compound statement: what it rebinds anywhere inside is uncertain within it (a loop's next iteration, a
        # branch not taken) and after it.
        inner = nones - bound
        _headers(source, statement, inner, targets)
        for block in _blocks(statement):
            _block(source, block, inner, targets)
        nones -= bound


def _blocks(statement: cst.BaseStatement) -> list[list[cst.BaseStatement]]:
    found: list[list[cst.BaseStatement]] = []
    stack: list[cst.CSTNode] = [statement]
    while stack:
        node = stack.pop()
        for child in node.children:
            if isinstance(child, cst.IndentedBlock):
                found.append(list(child.body))
            elif isinstance(child, (cst.If, cst.Else, cst.Finally, cst.ExceptHandler)):
                stack.append(child)
    return found


def _headers(source: SourceFile, statement: cst.BaseStatement, nones: set[str], targets: set[int]) -> None:
    """Loads in a compound statement's own expressions (an `if` test, a loop's iterable), not its blocks."""
    if not nones:
        return
    for child in statement.children:
        if not isinstance(child, (cst.IndentedBlock, cst.If, cst.Else, cst.Finally, cst.ExceptHandler)):
            _calls(source, child, nones, targets)


def _calls(source: SourceFile, node: cst.CSTNode, nones: set[str], targets: set[int]) -> None:
    if not nones:
        return
    for call in preorder(node):
        if not isinstance(call, cst.Call) or language_name(source.qualified_name(call.func)) not in _MEMORY:
            continue
        store = language_name(source.qualified_name(call.func)) in ("store", "core.store")
        slots = (2, 3) if store else (1, 2)  # (positional mask and other: `tl.store(ptrs, value, mask)`)
        positional = 0
        for arg in call.args:
            index = positional if arg.keyword is None else None
            if arg.keyword is None:
                positional += 1
            takes = (index in slots) if index is not None else arg.keyword.value in ("mask", "other")
            if takes and isinstance(arg.value, cst.Name) and arg.value.value in nones:
                targets.add(id(arg.value))


class _Replace(cst.CSTTransformer):
    """Drops the arguments `targets` names from their calls, where the call keeps its lines (an argument on a line of
    its own stays) and no positional argument follows (`tl.load(p, mask_a, 0.0)` stays)."""

    def __init__(self, targets: set[int]) -> None:
        self.targets = targets

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        drop = [i for i, a in enumerate(original.args) if id(a.value) in self.targets]
        if not drop:
            return updated
        args = list(updated.args)
        for i in reversed(drop):
            if args[i].keyword is None and any(a.keyword is None for a in args[i + 1:]):
                continue
            kept = args[:i] + args[i + 1:]
            if i == len(args) - 1 and i > 0:  # (the new last argument takes the dropped one's comma, if any)
                kept[-1] = kept[-1].with_changes(comma=args[i].comma)
            candidate = updated.with_changes(args=kept)
            if _lines(candidate) == _lines(updated.with_changes(args=args)):
                args = kept
        return updated.with_changes(args=args)


def _lines(node: cst.CSTNode) -> int:
    return cst.Module([]).code_for_node(node).count("\n")
