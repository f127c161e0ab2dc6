"""A dot operand read through a name that only renames (or transposes) a tile, read as that tile.

Kernels that choose an operand's orientation at compile time name the choice, then multiply the name::

    for ki in range(k_tiles):
        a = a_desc.load([offs_am, offs_k])
        arg1 = a                        # or `arg1 = a.T` where the tile is stored transposed
        ...
        accumulator = tl.dot(arg1, arg2, accumulator)

(tritonbench's `matmul_kernel_descriptor_persistent`, once `transpile.passes.unswitch` has made a loop per flag
value). The pipeline rules look for the loaded tile in the dot's operand; this pass writes the dot on it
(`tl.dot(a, ...)`, or `tl.dot(tl.trans(a), ...)`) and drops the renaming line. Only where the name is a temporary of
the loops that bind it (bound at the top of each before any read, read nowhere else: each unswitched copy of a loop
binds its own), bound in this loop by a line of its own as `x = y`, `x = y.T` or `x = tl.trans(y)` of a name `y`,
read in it by that dot alone (and by reads of its element type, `x.dtype`, between that line and the dot: `y.dtype`
then), and `y` is not bound again between that line and the dot. A transpose may spell its axes (`tl.trans(y, 1, 0)`,
`tl.permute(y, (1, 0))`: deltaformer's backward).

`drop_operand_aliases(source, facts)` returns the new module text and the functions it replaced (old node -> new),
or None when nothing changes.
"""

from __future__ import annotations

import libcst as cst

from transpile.analysis.attention import loop_local
from transpile.analysis.dot_loops import is_dot_call
from transpile.cst_utils import assigned_names, single_assign
from transpile.cst_walk import semantic_preorder
from transpile.discover import ModuleFacts, language_alias, language_name
from transpile.passes import replaced, rewrite_functions
from transpile.source import SourceFile


def drop_operand_aliases(source: SourceFile, facts: ModuleFacts
                         ) -> tuple[str, dict[cst.CSTNode, cst.CSTNode]] | None:
    if "dot" not in source.text:
        return None

    def rewriter(fn: cst.FunctionDef) -> cst.CSTTransformer | None:
        lang = language_alias(source, fn)
        return _Loops(source, fn, lang) if lang else None

    return rewrite_functions(source.module, {fn.node for fn in facts.functions.values()}, rewriter)


def _uses(node: cst.CSTNode, name: str) -> int:
    return sum(1 for n in semantic_preorder(node) if isinstance(n, cst.Name) and n.value == name)


def _dtype_reads(node: cst.CSTNode, name: str) -> list[cst.Name]:
    """The reads of `name` in `node` that only take its element type (`name.dtype`)."""
    return [n.value for n in semantic_preorder(node) if isinstance(n, cst.Attribute) and n.attr.value == "dtype"
            and isinstance(n.value, cst.Name) and n.value.value == name]


class _Loops(cst.CSTTransformer):
    def __init__(self, source: SourceFile, fn: cst.FunctionDef, lang: str) -> None:
        super().__init__()
        self.source = source
        self.fn = fn
        self.lang = lang
        self.changed = False

    def aliased(self, value: cst.BaseExpression) -> tuple[str, bool] | None:
        """(y, transposed) of `y`, `y.T` or `tl.trans(y)`."""
        if isinstance(value, cst.Name):
            return value.value, False
        if isinstance(value, cst.Attribute) and value.attr.value == "T" and isinstance(value.value, cst.Name):
            return value.value.value, True
        if isinstance(value, cst.Call) and value.args and isinstance(value.args[0].value, cst.Name) and all(
                a.keyword is None for a in value.args):
            # (`tl.trans(y)`, and the axes of a 2-D transpose spelled out: `tl.trans(y, 1, 0)`, `tl.permute(y, (1, 0))`)
            function = language_name(self.source.qualified_name(value.func))
            axes = ",".join(self.source.code(a.value) for a in value.args[1:]).replace(" ", "")
            if function in ("trans", "core.trans") and axes in ("", "1,0", "(1,0)", "[1,0]") \
                    or function in ("permute", "core.permute") and axes in ("(1,0)", "[1,0]", "1,0"):
                return value.args[0].value.value, True
        return None

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.For:
        if not isinstance(updated_node.body, cst.IndentedBlock):
            return updated_node
        statements = list(updated_node.body.body)
        drop: set[int] = set()
        operands: dict[cst.CSTNode, cst.BaseExpression] = {}
        for d, statement in enumerate(statements):
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            for call in (n for n in semantic_preorder(statement) if isinstance(n, cst.Call)):
                if not is_dot_call(self.source, call):
                    continue
                for arg in [a for a in call.args if a.keyword is None][:2]:
                    name = arg.value
                    if not isinstance(name, cst.Name) or not loop_local(self.fn, name.value):
                        continue
                    line = next((i for i in range(d) if name.value in assigned_names(statements[i])), None)
                    if line is None:
                        continue
                    # (its element type read between the line and the dot, `tl.dot(da.to(k.dtype), k)`: the tile's)
                    dtypes = [read for s in statements[line + 1:d + 1] for read in _dtype_reads(s, name.value)]
                    if _uses(updated_node.body, name.value) != 2 + len(dtypes) \
                            or _uses(statement, name.value) != 1 + len(_dtype_reads(statement, name.value)):
                        continue  # (read elsewhere, or bound elsewhere than at the top of the loops that read it)
                    assigned = single_assign(statements[line])
                    alias = self.aliased(assigned[1]) if assigned is not None else None
                    if alias is None or alias[0] == name.value or any(
                            alias[0] in assigned_names(s) for s in statements[line + 1:d + 1]):
                        continue
                    operands[name] = cst.parse_expression(f"{self.lang}.trans({alias[0]})") if alias[1] \
                        else cst.Name(alias[0])
                    operands.update({read: cst.Name(alias[0]) for read in dtypes})
                    drop.add(line)
        if not operands:
            return updated_node
        self.changed = True
        kept = [replaced(s, operands) for i, s in enumerate(statements) if i not in drop]  # type: ignore[arg-type]
        return updated_node.with_changes(body=updated_node.body.with_changes(body=kept))
