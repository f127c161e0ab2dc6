"""Small read-only queries over libcst trees that several analyses and rules share."""

from __future__ import annotations

import libcst as cst


def names_in(node: cst.CSTNode) -> set[str]:
    """Every identifier that occurs in `node`."""
    found: set[str] = set()

    class _Names(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            found.add(n.value)

    node.visit(_Names())
    return found


def calls_in(node: cst.CSTNode) -> list[cst.Call]:
    """Every call in `node`, outermost first."""
    found: list[cst.Call] = []

    class _Calls(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            found.append(call)

    node.visit(_Calls())
    return found


def assigned_names(statement: cst.CSTNode) -> set[str]:
    """Names a simple statement line binds (plain, augmented and annotated assignments, tuple targets)."""
    names: set[str] = set()
    if isinstance(statement, cst.SimpleStatementLine):
        for small in statement.body:
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    names |= names_in(target.target)
            elif isinstance(small, (cst.AugAssign, cst.AnnAssign)):
                names |= names_in(small.target)
    return names
