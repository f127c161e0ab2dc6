"""Local names of a jit function that the Gluon translation reads the Gluon language by, named afresh.

A variant reads the Gluon language as `gl` (and `gluon`); a kernel that binds one of those names itself::

    gl = p * (a - b_t + bart_minus_rk * delta)      # (FLA's PaTH attention backward: the gradient of the gate)
    b_dg += tl.sum(gl, 1)

would shadow it in the translation. Python makes a name a function binds local to the whole function, so every read
of it there reads the local: this pass renames each such local (`gl_1`: the first number free in the function) at
every mention inside the function, attribute names and keyword-argument names aside. Parameters keep their names (a
caller may pass them by keyword): a function with such a parameter is kept as Triton, with the reason
(`transpile.policy`). Lines are kept.

`rename_reserved(source, facts)` returns the new module text and the functions it replaced (old node -> new), or None
when nothing changes.
"""

from __future__ import annotations

import libcst as cst

from transpile.cst_utils import bound_names, names_in, substituted
from transpile.cst_walk import preorder
from transpile.discover import ModuleFacts
from transpile.passes import rewrite_functions
from transpile.source import SourceFile

#: The names a variant reads the Gluon language by (`from triton.experimental import gluon`, `... as gl`)
RESERVED_NAMES = frozenset({"gl", "gluon"})


def rename_reserved(source: SourceFile, facts: ModuleFacts) -> tuple[str, dict[cst.CSTNode, cst.CSTNode]] | None:
    return rewrite_functions(source.module, {fn.node for fn in facts.functions.values()}, _Renamer)


class _Renamer(cst.CSTTransformer):
    """Renames the function's own locals that are reserved names (see the module's docstring)."""

    def __init__(self, fn: cst.FunctionDef) -> None:
        super().__init__()
        params = {p.name.value for p in (*fn.params.params, *fn.params.posonly_params, *fn.params.kwonly_params)}
        scoped = any(isinstance(n, (cst.Global, cst.Nonlocal, cst.FunctionDef, cst.Lambda, cst.ClassDef))
                     for n in preorder(fn.body))
        local = sorted((RESERVED_NAMES & bound_names(fn)) - params) if not scoped else []
        taken = names_in(fn) | params
        self.renames: dict[str, cst.BaseExpression] = {}
        for name in local:
            i = 1
            while f"{name}_{i}" in taken:
                i += 1
            taken.add(f"{name}_{i}")
            self.renames[name] = cst.Name(f"{name}_{i}")
        self.changed = bool(self.renames)

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        if not self.renames:
            return updated
        return updated.with_changes(body=substituted(updated.body, self.renames))
