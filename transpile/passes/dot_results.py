"""A dot whose product another dot of the iteration reads, on a line of its own where the source folds it into more.

Attention-shaped loops (a product of the iteration, the scores, read by a later dot through the softmax) often fold
the first product into the statement that scales, casts or masks it::

    qk = tl.dot(q, k).to(tl.float32) * (q_scale * k_scale)   # int8 attention, a scale loaded per key block
    qk = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    qk += tl.where(mask, 0, float("-inf"))
    qk += tl.dot(q, k) * softmax_scale                        # block-sparse prefill
    qk = tl.where(m_mask & causal_mask, 0, float("-inf"))
    qk = tl.dot(q, k, qk)                                     # (`qk += tl.dot(q, k)`, canonical): a masked start

The pipeline planners read the scores as a product of their own, `s = tl.dot(q, k)` (or a dot times loop-invariant
scalars), which the consumer stage then computes on. This pass names the product on the line before::

    qk_dot = tl.dot(q, k)
    qk = qk_dot.to(tl.float32) * (q_scale * k_scale)
    qk += qk_dot * softmax_scale
    qk = qk + qk_dot                                          # (the start added to the product)

Only a loop's own statements (not under a branch of it) that bind one name, whose value a later dot of the iteration
reads (through the statements between), and that hold one `tl.dot`: where the value is more than the dot (or, in a
loop of two dots, which the attention planners read with its scale, a dot times factors that are names, numbers and
arithmetic: attention's backward, `qk = tl.dot(q, tl.trans(k)) * scale` then `dp` and `dq += ...`, is named), or
where the dot's accumulator is a start the iteration makes that is not a zero tile (`tl.dot(q, k, bias)` is
`bias + q k^T`). A product accumulated into a value carried from the last iteration (a GEMM's
`acc += tl.dot(a, b) * s`) or added to another product (latent attention's `qk += tl.dot(q_pe, k_pe)` after
`qk = tl.dot(q, k)`, a form the planners read) is left as written. The new line maps to the dot's line
(`replaced_line_map`).

`name_dot_results(source, facts)` returns the new module text and the functions it replaced (old node -> new), or
None when nothing changes.
"""

from __future__ import annotations

import libcst as cst

from transpile.analysis.attention import SCALAR_FACTOR_NODES, zeroed_before
from transpile.cst_utils import assigned_names, names_in, only_nodes
from transpile.cst_walk import semantic_preorder
from transpile.discover import ModuleFacts, language_name
from transpile.passes import replaced, rewrite_functions
from transpile.source import SourceFile

def name_dot_results(source: SourceFile, facts: ModuleFacts) -> tuple[str, dict[cst.CSTNode, cst.CSTNode]] | None:
    if "dot(" not in source.text:
        return None
    return rewrite_functions(source.module, {fn.node for fn in facts.functions.values()},
                             lambda fn: _Loops(source, fn))


class _Loops(cst.CSTTransformer):
    def __init__(self, source: SourceFile, fn: cst.FunctionDef) -> None:
        super().__init__()
        self.source = source
        self.changed = False
        self.taken = names_in(fn)

    def dot(self, node: cst.CSTNode) -> bool:
        return isinstance(node, cst.Call) and language_name(self.source.qualified_name(node.func)) == "dot"

    def dots_in(self, body: list[cst.BaseStatement]) -> int:
        return sum(1 for statement in body for n in semantic_preorder(statement) if self.dot(n))

    def fresh(self, base: str) -> str:
        candidate, i = f"{base}_dot", 1
        while candidate in self.taken:
            i += 1
            candidate = f"{base}_dot{i}"
        self.taken.add(candidate)
        return candidate

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.For:
        if not isinstance(updated_node.body, cst.IndentedBlock):
            return updated_node
        body = list(updated_node.body.body)
        out: list[cst.BaseStatement] = []
        for index, statement in enumerate(body):
            split = self.split(body, index)
            if split is None:
                out.append(statement)
                continue
            out += split
            self.changed = True
        return updated_node.with_changes(body=updated_node.body.with_changes(body=out))

    def split(self, body: list[cst.BaseStatement], index: int) -> list[cst.BaseStatement] | None:
        """The statement at `index` as the dot on a line of its own and the statement reading it, or None."""
        statement = body[index]
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return None
        small = statement.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
            target, value, augmented = small.targets[0].target.value, small.value, False
        elif isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
            target, value, augmented = small.target.value, small.value, True
        else:
            return None
        dots = [n for n in semantic_preorder(value) if self.dot(n)]
        if len(dots) != 1:
            return None
        dot = dots[0]
        assert isinstance(dot, cst.Call)
        earlier = set().union(*(assigned_names(s) for s in body[:index])) if index else set()
        if target in names_in(value) or augmented:
            if target not in earlier:
                return None  # (accumulated into a value carried from the last iteration: a GEMM's accumulator)
        if not _read_by_later_dot(body, index, target, self.dot):
            return None
        start = next((s for s in reversed(body[:index]) if target in assigned_names(s)), None)
        if start is not None and any(self.dot(n) for n in semantic_preorder(start)):
            return None  # (scores summed from several products, `qk += tl.dot(q_pe, k_pe)`: the planners' own form)
        acc = _accumulator(dot)
        if acc is not None:
            if augmented or dot is not value or not isinstance(acc, cst.Name) or acc.value != target \
                    or zeroed_before(self.source, body, index, acc) is not None:
                return None  # (a zero start the planners read as scores made afresh; other forms left as written)
            product = dot.with_changes(args=[a.with_changes(comma=cst.MaybeSentinel.DEFAULT)
                                             for a in _without_accumulator(dot)])
            name = self.fresh(target)
            rest = cst.BinaryOperation(cst.Name(target), cst.Add(), cst.Name(name))
        else:
            if dot is value:
                # (`qk += tl.dot(q, k)`: taken as it is where `qk` starts as a zero tile, the scores made afresh)
                if not augmented or zeroed_before(self.source, body, index, cst.Name(target)) is not None:
                    return None
            elif not augmented and _scalar_product(value, dot) and self.dots_in(body) <= 2:
                # (the form the two-dot attention planners read as it is; the planner of loops of more dots, chained
                # as attention's backward chains them, reads a product of its own)
                return None
            product = dot
            name = self.fresh(target)
            rest = replaced(value, {dot: cst.Name(name)})
        named = statement.with_changes(body=[cst.Assign([cst.AssignTarget(cst.Name(name))], product)],
                                       trailing_whitespace=cst.TrailingWhitespace())
        reading = statement.with_changes(leading_lines=[], body=[small.with_changes(value=rest)])
        return [named, reading]


def _accumulator(dot: cst.Call) -> cst.BaseExpression | None:
    """The accumulator a `tl.dot` call passes (third positional argument or `acc=`), None where none (or `None`)."""
    positional = [a for a in dot.args if a.keyword is None]
    acc = next((a.value for a in dot.args if a.keyword is not None and a.keyword.value == "acc"),
               positional[2].value if len(positional) > 2 else None)
    return None if acc is None or (isinstance(acc, cst.Name) and acc.value == "None") else acc


def _without_accumulator(dot: cst.Call) -> list[cst.Arg]:
    positional = [a for a in dot.args if a.keyword is None]
    third = positional[2] if len(positional) > 2 else None
    return [a for a in dot.args if a is not third and not (a.keyword is not None and a.keyword.value == "acc")]


def _scalar_product(value: cst.BaseExpression, dot: cst.Call) -> bool:
    """`value` is `dot * f1 * f2 ...` or `f * dot`, each factor names, numbers and arithmetic (no call, no subscript):
    a scaled product the planners read as it is (they check that the factors are loop-invariant scalars)."""
    if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply)):
        return False
    if value.right is dot:
        return only_nodes(value.left, SCALAR_FACTOR_NODES)
    node: cst.BaseExpression = value
    while isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply) and node is not dot \
            and not node.lpar:
        if not only_nodes(node.right, SCALAR_FACTOR_NODES):
            return False
        node = node.left
    return node is dot


def _read_by_later_dot(body: list[cst.BaseStatement], index: int, target: str, is_dot) -> bool:  # noqa: ANN001
    """A later statement of the iteration that runs a dot reads `target`, or a name derived from it in between."""
    derived = {target}
    for statement in body[index + 1:]:
        if names_in(statement) & derived:
            if any(is_dot(n) for n in semantic_preorder(statement)):
                return True
            derived |= assigned_names(statement)
    return False
