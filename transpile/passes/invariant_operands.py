"""A dot operand computed the same way every iteration, made once before the loop.

Kernels often cast or transpose a tile they hold for the whole loop inside the dot that reads it::

    q = tl.load(q_ptrs)
    q = q * qk_scale
    for start_n in range(0, seq_len, BLOCK_N):
        k = tl.load(k_ptrs)
        qk = tl.dot(q.to(tl.float16), k.T)

(applied-ai's `stay_attention`). The operand is the same value in every iteration; the pipeline rules read a dot's
loop-invariant operand as a tile made before the loop (attention's Q, staged in shared memory once), and Triton's own
compiler hoists the computation out of the loop anyway. This pass writes it that way::

    # triton-transpile: the dot operand `q.to(tl.float16)`, the same every iteration, made once before the loop.
    q_dot = q.to(tl.float16)
    for start_n in range(0, seq_len, BLOCK_N):
        ...
        qk = tl.dot(q_dot, k.T)

Only an operand (a dot's first two arguments) that reads names the loop never binds, and calls nothing but casts,
transposes and reshapes (`x.to(...)`, `tl.trans`, `tl.permute`, `tl.reshape`, `.T`), in a loop's own statements (not
under a branch of it), is moved; the same expression read by several dots of the loop is made once. A tile the loop
loads may be read for its element type alone (`b_A.to(b_do.dtype)`, FLA's style: `b_do = tl.load(p_do, ...)`, `p_do =
do + ...`): that type is its pointer parameter's, known before the loop, and the operand made there reads
`do.dtype.element_ty` instead (where the kernel moves that parameter only by offsets, `do += ...`).

`hoist_invariant_operands(source, facts)` returns the new module text and the functions it replaced (old node ->
new), or None when nothing changes.
"""

from __future__ import annotations

import libcst as cst

from transpile.analysis.dot_loops import is_dot_call
from transpile.cst_utils import bound_names, names_in
from transpile.cst_walk import preorder, semantic_preorder
from transpile.discover import ModuleFacts, language_name
from transpile.passes import Replace, replaced, rewrite_functions
from transpile.source import SourceFile

#: language calls that only rearrange or convert a tile (and the method `x.to(...)`)
_PURE = ("trans", "permute", "reshape", "view", "cast", "core.trans", "core.permute", "core.reshape", "core.view",
         "core.cast")


def hoist_invariant_operands(source: SourceFile, facts: ModuleFacts
                             ) -> tuple[str, dict[cst.CSTNode, cst.CSTNode]] | None:
    if ".to(" not in source.text and "trans" not in source.text and ".T" not in source.text \
            and "permute" not in source.text and "reshape" not in source.text:
        return None
    return rewrite_functions(source.module, {fn.node for fn in facts.functions.values()},
                             lambda fn: _Loops(source, fn))


def only_rearranges(source: SourceFile, node: cst.BaseExpression, methods: tuple[str, ...] = ("to",)) -> bool:
    """`node` calls nothing but language calls that convert or rearrange a tile (`_PURE`) and the tensor `methods`
    (`x.to(dtype)`), and holds no lambda, walrus, await or yield."""
    for sub in semantic_preorder(node):
        if isinstance(sub, cst.Call):
            func = sub.func
            name = language_name(source.qualified_name(func))
            if name in _PURE or (isinstance(func, cst.Attribute) and func.attr.value in methods and name is None):
                continue
            return False
        if isinstance(sub, (cst.Lambda, cst.NamedExpr, cst.Await, cst.Yield)):
            return False
    return True


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


class _Loops(cst.CSTTransformer):
    def __init__(self, source: SourceFile, fn: cst.FunctionDef) -> None:
        super().__init__()
        self.source = source
        self.fn = fn
        self.changed = False
        self.taken = names_in(fn)

    def pure(self, node: cst.BaseExpression) -> bool:
        return only_rearranges(self.source, node)

    def fresh(self, base: str) -> str:
        candidate, i = f"{base}_dot", 1
        while candidate in self.taken:
            i += 1
            candidate = f"{base}_dot{i}"
        self.taken.add(candidate)
        return candidate

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
                            ) -> cst.IndentedBlock:
        statements: list[cst.BaseStatement] = []
        for statement in updated_node.body:
            if isinstance(statement, cst.For) and isinstance(statement.body, cst.IndentedBlock):
                hoisted, loop = self.hoist(statement)
                statements.extend(hoisted)
                statements.append(loop)
            else:
                statements.append(statement)
        return updated_node.with_changes(body=statements) if len(statements) != len(updated_node.body) \
            else updated_node

    def hoist(self, loop: cst.For) -> tuple[list[cst.BaseStatement], cst.For]:
        bound = bound_names(loop.body) | names_in(loop.target)
        dtypes: dict[str, str] | None = None  # (the loop's loaded tiles and their pointers, where an operand reads one)
        made: dict[str, str] = {}  # expression text -> its name
        lines: list[cst.BaseStatement] = []
        replacements: dict[cst.CSTNode, cst.BaseExpression] = {}
        for index, statement in enumerate(loop.body.body):  # type: ignore[union-attr]
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            for call in (n for n in semantic_preorder(statement) if isinstance(n, cst.Call)):
                if not is_dot_call(self.source, call):
                    continue
                for arg in [a for a in call.args if a.keyword is None][:2]:
                    operand = arg.value
                    if isinstance(operand, cst.Name) or not self.pure(operand):
                        continue
                    # (`tile.dtype` of a tile the loop loads: its pointer parameter's element type)
                    types = [n for n in semantic_preorder(operand) if isinstance(n, cst.Attribute)
                             and n.attr.value == "dtype" and isinstance(n.value, cst.Name)]
                    if types and dtypes is None:
                        dtypes = _tile_dtypes(self.source, self.fn, loop)
                    # (a tile the iteration loads before this statement: the type it has here)
                    typed = {id(n): cst.parse_expression(f"{dtypes[n.value.value][0]}.dtype.element_ty")
                             for n in types if n.value.value in dtypes and dtypes[n.value.value][1] < index}
                    if typed:
                        operand = operand.visit(Replace(typed))
                    reads = names_in(operand)
                    if not reads or reads & bound:
                        continue
                    original = arg.value
                    text = " ".join(_code(operand).split())
                    if text not in made:
                        root = next((n.value for n in semantic_preorder(operand) if isinstance(n, cst.Name)), "x")
                        made[text] = self.fresh(root)
                        written = " ".join(_code(original).split())
                        note = (f"# triton-transpile: the dot operand `{written}`, the same every iteration, made "
                                "once before the loop.")
                        # (a loaded tile's element type: its pointer's, read before the loop)
                        types = [f"# (`{_code(n)}` is `{dtypes[n.value.value][0]}.dtype.element_ty`, the element type of "
                                 "the tile's pointer.)" for n in semantic_preorder(original) if id(n) in typed]
                        lines.append(cst.SimpleStatementLine(
                            [cst.Assign([cst.AssignTarget(cst.Name(made[text]))], operand)],
                            leading_lines=[cst.EmptyLine(comment=cst.Comment(c)) for c in [note, *types]]))
                    replacements[original] = cst.Name(made[text])
        if not replacements:
            return [], loop
        self.changed = True
        body = replaced(loop.body, replacements)  # type: ignore[arg-type]
        if lines:  # (the loop's own leading comments stay above the first new line)
            lines[0] = lines[0].with_changes(leading_lines=[*loop.leading_lines, *lines[0].leading_lines])
        return lines, loop.with_changes(body=body, leading_lines=[])


def _tile_dtypes(source: SourceFile, fn: cst.FunctionDef, loop: cst.For) -> dict[str, tuple[str, int]]:
    """The tiles the loop's own statements load once, each by a plain `name = tl.load(ptr, ...)` of a pointer made from
    a pointer parameter (`do + ...`, through a name the loop or the function binds once before: `p_do = do + ...`),
    with that parameter's name and the statement's index: the tile's `dtype` is its element type, the same every
    iteration, after that statement (another loop of the function may bind the name to another tile). So is that of a
    value the loop casts to such a tile's type once (`b_vb = (b_v * b_beta[:, None]).to(b_v.dtype)`). Only parameters the
    function rebinds by offsets alone (`do += ...`) or not at all."""
    params = {p.name.value for p in fn.params.params if p.annotation is None}
    binds = _bindings(fn.body)
    offsets_only = {p for p in params if all(_moves_by_offsets(b) for b in binds.get(p, []))}

    def single_value(name: str) -> cst.BaseExpression | None:
        # (one plain binding; others only move it by offsets, `b_ptrs += BK * stride`: a pointer stays into the
        # tensor it started from)
        found = [b for b in binds.get(name, []) if not _moves_by_offsets(b)]
        if len(found) == 1 and isinstance(found[0], cst.Assign) and len(found[0].targets) == 1 \
                and isinstance(found[0].targets[0].target, cst.Name):
            return found[0].value
        return None

    def base(node: cst.BaseExpression, seen: frozenset[str] = frozenset()) -> str | None:
        while isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Subtract)):
            node = node.left
        if not isinstance(node, cst.Name):
            return None
        if node.value in offsets_only:
            return node.value
        value = single_value(node.value) if node.value not in seen else None
        return base(value, seen | {node.value}) if value is not None else None

    # (how often the loop binds each name: a tile it binds once holds, after that statement, what it loaded there,
    # whatever another loop of the function binds to the name)
    inner = {name: len(nodes) for name, nodes in _bindings(loop.body).items()}
    found: dict[str, tuple[str, int]] = {}
    for index, statement in enumerate(loop.body.body):  # type: ignore[union-attr]
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            continue
        small = statement.body[0]
        if not (isinstance(small, cst.Assign) and len(small.targets) == 1
                and isinstance(small.targets[0].target, cst.Name) and isinstance(small.value, cst.Call)):
            continue
        positional = [a for a in small.value.args if a.keyword is None]
        name = small.targets[0].target.value
        func = small.value.func
        if isinstance(func, cst.Attribute) and func.attr.value == "to" and len(positional) == 1 \
                and inner.get(name) == 1:
            # (a tile cast to a loaded tile's type, `b_vb = (b_v * b_beta[:, None]).to(b_v.dtype)`: that type)
            cast = positional[0].value
            if isinstance(cast, cst.Attribute) and cast.attr.value == "dtype" and isinstance(cast.value, cst.Name) \
                    and cast.value.value in found:
                found[name] = (found[cast.value.value][0], index)
            continue
        if language_name(source.qualified_name(small.value.func)) not in ("load", "core.load") or not positional \
                or inner.get(name) != 1:
            continue
        pointer = base(positional[0].value)
        if pointer is not None:
            found[name] = (pointer, index)
    return found


def _bindings(node: cst.CSTNode) -> dict[str, list[cst.CSTNode]]:
    """The statements under `node` that bind each name (assignments, augmented and annotated ones, loop targets)."""
    binds: dict[str, list[cst.CSTNode]] = {}
    for found in preorder(node):
        targets = ([t.target for t in found.targets] if isinstance(found, cst.Assign) else
                   [found.target] if isinstance(found, (cst.AugAssign, cst.AnnAssign, cst.For)) else [])
        for target in targets:
            for name in names_in(target):
                binds.setdefault(name, []).append(found)
    return binds


def _moves_by_offsets(binding: cst.CSTNode) -> bool:
    """`binding` moves its name by an offset (`x += ...`, `x -= ...`): a pointer stays into its tensor."""
    return isinstance(binding, cst.AugAssign) and isinstance(binding.operator, (cst.AddAssign, cst.SubtractAssign))
