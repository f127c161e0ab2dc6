"""Rewrites of Triton source into Triton source that later analyses read more easily (one spelling per idea)."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from transpile.cst_utils import module_code
from transpile.cst_walk import transform


class Replace(cst.CSTTransformer):
    """Each node that is a key of `replacements` (by identity) replaced by its value."""

    def __init__(self, replacements: dict[int, cst.CSTNode]) -> None:
        super().__init__()
        self.replacements = replacements

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode):  # noqa: ANN201
        return self.replacements.get(id(original), updated)


def replaced(node: cst.CSTNode, replacements: dict[cst.CSTNode, cst.CSTNode]) -> cst.CSTNode:
    """`node` with each of the nodes below it that `replacements` names replaced by its value."""
    return node.visit(Replace({id(old): new for old, new in replacements.items()}))


def rewrite_functions(module: cst.Module, functions: set[cst.CSTNode],
                      rewriter: Callable[[cst.FunctionDef], cst.CSTTransformer | None]
                      ) -> tuple[str, dict[cst.CSTNode, cst.CSTNode]] | None:
    """Each of the module's top-level `functions` through its own transformer (`rewriter(fn)`, None for none; its
    `changed` says whether it rewrote anything): the new module text and the functions it replaced (old node -> new),
    or None when nothing changes."""
    done: dict[cst.CSTNode, cst.CSTNode] = {}
    body = []
    for statement in module.body:
        new = None
        if statement in functions:
            transformer = rewriter(statement)  # type: ignore[arg-type]
            if transformer is not None:
                candidate = transform(statement, transformer)
                new = candidate if getattr(transformer, "changed", False) else None
        if new is not None:
            done[statement] = new
        body.append(new or statement)
    return (module_code(module.with_changes(body=body)), done) if done else None
