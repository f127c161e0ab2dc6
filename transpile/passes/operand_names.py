"""A dot operand computed in the loop from a tile the loop loads, named on a line of its own before the dot.

Kernels often cast (and transpose) a tile they load inside the dot that reads it::

    for start_n in range(lo, hi, BLOCK_N):
        k = tl.load(K_block_ptr)
        qk = tl.dot(q, k.to(MATMUL_PRECISION), acc=qk)          # tritonbench's template attention
        s = tl.dot(q_lora, kv_lora.trans(1, 0).to(q_lora.dtype))  # aiter's latent attention

The pipeline planners read an operand computed from a loaded tile as a statement of its own (`k_op = k.to(...)`, a
computed operand: the tile goes through the ring as loaded and the computation runs on the slot read), and a transpose
as the dot's view of its operand (`tl.trans(k_op)`). This pass writes the operand that way::

        k = tl.load(K_block_ptr)
        k_op = k.to(MATMUL_PRECISION)
        qk = tl.dot(q, k_op, acc=qk)
        kv_lora_op = kv_lora.to(q_lora.dtype)
        s = tl.dot(q_lora, tl.trans(kv_lora_op))

An operand the loop loads and casts on one line, ``a = tl.load(a_ptrs, mask=m).to(dot_dtype)`` (mamba's chunked
scans), is written as the load, named afresh, and the cast: ``a_tile = tl.load(a_ptrs, mask=m)`` then
``a = a_tile.to(dot_dtype)``: the tile goes through the ring and the cast runs on the slot read, as above.

A cast of a transposed tile is the transpose of the cast tile (a cast converts each element where it is): the cast is
named, and the dot reads its transpose as `tl.trans(name)`. Only a dot's first two arguments, in a loop's own statements (not under a
branch of it), that read a name the loop binds from a load (`tl.load`, a descriptor's `.load`) and call nothing but
casts and rearrangements (`x.to(...)`, `tl.trans`, `.T`, `.trans(...)`, `.permute(...)`, `tl.reshape`) and
arithmetic are named; an operand that is a name, or the transpose of one, stays as it is. The new line maps to the
dot's line (`replaced_line_map`).

`name_dot_operands(source, facts)` returns the new module text and the functions it replaced (old node -> new), or
None when nothing changes.
"""

from __future__ import annotations

import libcst as cst

from transpile.analysis.dot_loops import is_dot_call
from transpile.analysis.launch_alignment import is_load
from transpile.cst_utils import names_in, single_assign
from transpile.cst_walk import semantic_preorder
from transpile.discover import ModuleFacts, language_alias, language_name
from transpile.passes import replaced, rewrite_functions
from transpile.passes.invariant_operands import only_rearranges
from transpile.source import SourceFile

#: tensor methods that only rearrange or convert a tile
_PURE_METHODS = ("to", "trans", "permute", "reshape", "view")
#: the 2-D transpose as a language call
_TRANSPOSES = ("trans", "core.trans")
#: the placeholder of the name in an operand's new form
_HOLE = "__named_operand__"


def name_dot_operands(source: SourceFile, facts: ModuleFacts) -> tuple[str, dict[cst.CSTNode, cst.CSTNode]] | None:
    if ".to(" not in source.text:
        return None  # (both forms cast)
    return rewrite_functions(source.module, {fn.node for fn in facts.functions.values()},
                             lambda fn: _Loops(source, fn, language_alias(source, fn))
                             if language_alias(source, fn) else None)


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


class _Loops(cst.CSTTransformer):
    def __init__(self, source: SourceFile, fn: cst.FunctionDef, lang: str) -> None:
        super().__init__()
        self.source = source
        self.changed = False
        self.taken = names_in(fn)
        self.lang = lang  # the kernel's name of triton.language (`tl`)

    def language(self, func: cst.BaseExpression) -> str | None:
        return language_name(self.source.qualified_name(func))

    def pure(self, node: cst.BaseExpression) -> bool:
        """Casts and rearrangements only (`invariant_operands.only_rearranges`, the methods too: `x.trans(1, 0)`),
        with no subscript or conditional expression."""
        return only_rearranges(self.source, node, _PURE_METHODS) and not any(
            isinstance(sub, (cst.Subscript, cst.IfExp)) for sub in semantic_preorder(node))

    def transposed(self, node: cst.BaseExpression) -> cst.BaseExpression | None:
        """The tile `node` transposes (2-D: `tl.trans(x)`, `x.T`, `x.trans(1, 0)`, `x.permute(1, 0)`), or None."""
        if isinstance(node, cst.Attribute) and node.attr.value == "T":
            return node.value
        if not isinstance(node, cst.Call):
            return None
        args = [a for a in node.args if a.keyword is None]
        if self.language(node.func) in _TRANSPOSES and len(args) == 1:
            return args[0].value
        if isinstance(node.func, cst.Attribute) and self.language(node.func) is None \
                and node.func.attr.value in ("trans", "permute") and all(a.keyword is None for a in node.args) \
                and [_code(a.value) for a in node.args] in ([], ["1", "0"], ["(1, 0)"]):
            return node.func.value
        return None

    def split(self, operand: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
        """(what to name, the operand with a placeholder in its place, `_HOLE`), or None where the operand is a name or
        the transpose of one. A cast of a transposed tile is named as the cast of the tile."""
        inner = self.transposed(operand)
        if inner is not None:  # the dot's own transpose stays: `k.to(T).T` -> `tl.trans(k_op)`
            if isinstance(inner, cst.Name):
                return None
            return inner, self.transpose_of_hole()
        if isinstance(operand, cst.Call) and isinstance(operand.func, cst.Attribute) \
                and operand.func.attr.value == "to" and self.language(operand.func) is None:
            tile = self.transposed(operand.func.value)
            if tile is not None:  # `k.trans(1, 0).to(T)` -> `tl.trans(k_op)` with `k_op = k.to(T)`
                return operand.with_changes(func=operand.func.with_changes(value=tile)), self.transpose_of_hole()
        return operand, cst.Name(_HOLE)

    def transpose_of_hole(self) -> cst.BaseExpression:
        """`tl.trans(<the name>)`, in the kernel's spelling of the language module (the one the planners read)."""
        return cst.parse_expression(f"{self.lang}.trans({_HOLE})")

    def fresh(self, base: str, suffix: str = "op") -> str:
        candidate, i = f"{base}_{suffix}", 1
        while candidate in self.taken:
            i += 1
            candidate = f"{base}_{suffix}{i}"
        self.taken.add(candidate)
        return candidate

    def cast_load(self, value: cst.BaseExpression) -> cst.Call | None:
        """The load `value` casts (`tl.load(p, mask=m).to(T)`, `d.load([i, j]).to(T).to(U)`), else None."""
        casts = 0
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "to" \
                and self.language(value.func) is None:
            value, casts = value.func.value, casts + 1
        return value if casts and isinstance(value, cst.Call) and is_load(value) else None

    def split_cast_loads(self, body: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
        """`a = tl.load(...).to(T)` of an operand a dot of the loop reads by name, or of a tile the loop computes such an
        operand from, as the load, named afresh, and the cast on a line of its own: `a_tile = tl.load(...)`,
        `a = a_tile.to(T)`."""
        # (an operand written as an expression, `tl.dot(b_A, b_kb.to(b_k.dtype))`: the names it reads)
        operands = {name for statement in body for call in semantic_preorder(statement)
                    if isinstance(call, cst.Call) and is_dot_call(self.source, call)
                    for arg in [a for a in call.args if a.keyword is None][:2] for name in names_in(arg.value)}
        # ... and the names the loop computes those operands' values from, through its plain assignments (a gate loaded
        # and cast beside its tile, `b_g = tl.load(p_g, mask=m).to(tl.float32)`, then `b_qg = (b_q * exp2(b_g))...`);
        # not what a load's address reads (an index vector loaded and cast, `idx = tl.load(...).to(tl.int64)`)
        # (an update in place, `b_kb *= exp2(b_gk)`, computes the name from its value too)
        bindings = [assign for assign in map(single_assign, body) if assign is not None] + [
            (small.target.value, small.value) for statement in body if isinstance(statement, cst.SimpleStatementLine)
            for small in statement.body if isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name)]
        work = list(operands)
        while work:
            target = work.pop()
            for name, value in bindings:
                if name == target and not (isinstance(value, cst.Call) and is_load(value)) \
                        and self.cast_load(value) is None:
                    fresh = names_in(value) - operands
                    operands |= fresh
                    work += fresh
        out: list[cst.BaseStatement] = []
        for statement in body:
            assign = single_assign(statement)
            load = self.cast_load(assign[1]) if assign is not None and assign[0] in operands else None
            if load is None:
                out.append(statement)
                continue
            name = self.fresh(assign[0], "tile")
            small = statement.body[0]  # type: ignore[attr-defined]
            out.append(statement.with_changes(body=[cst.Assign([cst.AssignTarget(cst.Name(name))], load)],
                                              trailing_whitespace=cst.TrailingWhitespace()))
            out.append(statement.with_changes(leading_lines=[], body=[small.with_changes(
                value=replaced(small.value, {load: cst.Name(name)}))]))
            self.changed = True
        return out

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.For:
        if not isinstance(updated_node.body, cst.IndentedBlock):
            return updated_node
        updated_node = updated_node.with_changes(body=updated_node.body.with_changes(
            body=self.split_cast_loads(list(updated_node.body.body))))
        loaded = set()  # names the loop binds from a load
        for statement in updated_node.body.body:
            assign = single_assign(statement)
            if assign is not None and isinstance(assign[1], cst.Call) and isinstance(assign[1].func, cst.Attribute) \
                    and assign[1].func.attr.value == "load":
                loaded.add(assign[0])
        if not loaded:
            return updated_node
        statements: list[cst.BaseStatement] = []
        for statement in updated_node.body.body:
            guarded = _guarded(statement)
            named = self.named(guarded if guarded is not None else statement, loaded)
            if named is None:
                statements.append(statement)
                continue
            self.changed = True
            new_lines, line = named
            new_lines[0] = new_lines[0].with_changes(leading_lines=statement.leading_lines)
            if guarded is not None:  # (named before the `if`: a cast of a loaded tile, computed either way)
                line = statement.with_changes(leading_lines=[], body=statement.body.with_changes(body=[line]))
            statements += [*new_lines, line.with_changes(leading_lines=[])]
        return updated_node.with_changes(body=updated_node.body.with_changes(body=statements))

    def named(self, statement: cst.BaseStatement, loaded: set[str]
              ) -> tuple[list[cst.BaseStatement], cst.BaseStatement] | None:
        """The lines naming the computed operands of the dots `statement` runs, and the statement reading those names;
        None where no operand is named."""
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return None
        new_lines: list[cst.BaseStatement] = []
        replacements: dict[cst.CSTNode, cst.BaseExpression] = {}
        for call in (n for n in semantic_preorder(statement) if isinstance(n, cst.Call)):
            if not is_dot_call(self.source, call):
                continue
            for arg in [a for a in call.args if a.keyword is None][:2]:
                operand = arg.value
                if isinstance(operand, cst.Name) or not _tile_reads(operand) & loaded or not self.pure(operand):
                    continue
                parts = self.split(operand)
                if parts is None:
                    continue
                value, form = parts
                root = next(n for n in _tile_reads(value, ordered=True) if n in loaded)
                name = self.fresh(root)
                new_lines.append(cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(name))], value)]))
                replacements[operand] = form.visit(_Fill(name))
        if not replacements:
            return None
        return new_lines, replaced(statement, replacements)


def _guarded(statement: cst.BaseStatement) -> cst.SimpleStatementLine | None:
    """The one simple statement of `statement`, an `if` of one branch whose test calls nothing (a guarded dot, `if
    i_k >= 0: b_o += tl.dot(...)`, as `analysis.pipeline.guarded_dot` reads it), else None."""
    if not isinstance(statement, cst.If) or statement.orelse is not None \
            or not isinstance(statement.body, cst.IndentedBlock) or len(statement.body.body) != 1:
        return None
    inner = statement.body.body[0]
    if not isinstance(inner, cst.SimpleStatementLine) or any(
            isinstance(n, cst.Call) for n in semantic_preorder(statement.test)):
        return None
    return inner


def _tile_reads(node: cst.BaseExpression, ordered: bool = False):  # noqa: ANN202 - a set, or a list where ordered
    """The names `node` reads as tensors: not those it reads only for their type (`v.dtype`, `x.type.element_ty`)."""
    typed = {id(n.value) for n in semantic_preorder(node)
             if isinstance(n, cst.Attribute) and n.attr.value in ("dtype", "type") and isinstance(n.value, cst.Name)}
    names = [n.value for n in semantic_preorder(node) if isinstance(n, cst.Name) and id(n) not in typed]
    return list(dict.fromkeys(names)) if ordered else set(names)


class _Fill(cst.CSTTransformer):
    """The placeholder `_HOLE` as the operand's new name."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        return updated_node.with_changes(value=self.name) if updated_node.value == _HOLE else updated_node
