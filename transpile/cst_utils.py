"""Small read-only queries over libcst trees that several analyses and rules share."""

from __future__ import annotations

import libcst as cst


class _Names(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.found: set[str] = set()

    def visit_Name(self, n: cst.Name) -> None:
        self.found.add(n.value)


# Nodes are immutable and hash by identity: the analyses and rules ask for the names of the same statements several
# times (about three on average), and a libcst visit is the slow part. Bounded so a long directory run stays small.
_NAMES_CACHE: dict[cst.CSTNode, frozenset[str]] = {}


def names_in(node: cst.CSTNode) -> set[str]:
    """Every identifier that occurs in `node` (a fresh set the caller may change)."""
    cached = _NAMES_CACHE.get(node)
    if cached is None:
        visitor = _Names()
        node.visit(visitor)
        cached = frozenset(visitor.found)
        if len(_NAMES_CACHE) > 100_000:
            _NAMES_CACHE.clear()
        _NAMES_CACHE[node] = cached
    return set(cached)


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
