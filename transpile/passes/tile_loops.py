"""A persistent GEMM's one loop over tiles x K steps, written as a loop over tiles around its K loop.

Triton's persistent-matmul tutorial (3.0-3.2) and the code written after it (tritonbench's `matmul_kernel_persistent`)
walk each program's output tiles and their K steps in a single loop, with a counter that wraps at the K steps and
branches on it for the start and the end of a tile::

    ki = -1
    for _ in range(0, k_tiles * tiles_per_SM):
        ki = tl.where(ki == k_tiles - 1, 0, ki + 1)
        if ki == 0:                       # a new tile: its coordinates and offsets
            tile_id += NUM_SMS
            ...
        a = tl.load(...)                  # one K step
        b = tl.load(...)
        accumulator = tl.dot(a, b, accumulator)
        if ki == k_tiles - 1:             # the tile's last K step: its epilogue
            tl.store(c_ptrs, accumulator.to(tl.float16), mask=c_mask)
            accumulator = tl.zeros(...)

The store inside the loop's branch decides, inside a pipelined loop, which iterations write memory: no pipeline takes
it. The same iterations in the same order are::

    if k_tiles > 0:
        for _ in range(0, tiles_per_SM):
            tile_id += NUM_SMS            # the `ki == 0` branch's statements
            ...
            for ki in range(0, k_tiles):
                a = tl.load(...)
                ...
            tl.store(...)                 # the `ki == k_tiles - 1` branch's statements
            ...

a persistent tile loop around a plain K loop, which the pipeline rules take (the guard keeps a launch with no K step
as the source runs it: no iteration at all). Matched only exactly: the loop's bound is the product of the counter's
wrap and another factor; the counter starts at `-1` on a line before the loop, in the same block, and is bound
nowhere else; its update is the loop's first statement (`tl.where(c == n - 1, 0, c + 1)` or `(c + 1) % n`); the
branches on `c == 0` come before every other statement and those on `c == n - 1` after, none with an `else`, and
neither reads the counter or the loop's variable; the statements between them do not branch on the counter; the
loop's variable is read nowhere; the counter is read nowhere else. Anything else is left as written.

`split_tile_loops(source, facts)` returns the new module text and the functions it replaced (old node -> new), or
None when nothing changes.
"""

from __future__ import annotations

import libcst as cst

from transpile.cst_utils import assigned_names, names_in, read_names, single_assign
from transpile.cst_walk import semantic_preorder
from transpile.discover import ModuleFacts, language_name
from transpile.passes import rewrite_functions
from transpile.source import SourceFile

NOTE = "# triton-transpile: the tiles x K steps loop as a tile loop around its K loop (the same iterations, in order)."


def split_tile_loops(source: SourceFile, facts: ModuleFacts) -> tuple[str, dict[cst.CSTNode, cst.CSTNode]] | None:
    if "where(" not in source.text and "%" not in source.text:
        return None
    return rewrite_functions(source.module, {fn.node for fn in facts.functions.values()},
                             lambda fn: _Blocks(source, fn))


class _Blocks(cst.CSTTransformer):
    """Each matching loop of a block, with the counter's first binding before it, rewritten."""

    def __init__(self, source: SourceFile, fn: cst.FunctionDef) -> None:
        super().__init__()
        self.source = source
        self.fn = fn
        self.changed = False
        self.counts: dict[str, int] = {}
        for node in semantic_preorder(fn):
            if isinstance(node, cst.SimpleStatementLine):
                for name in assigned_names(node):
                    self.counts[name] = self.counts.get(name, 0) + 1
            elif isinstance(node, cst.For):
                for name in names_in(node.target):
                    self.counts[name] = self.counts.get(name, 0) + 1

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
                            ) -> cst.IndentedBlock:
        statements = list(updated_node.body)
        for i, statement in enumerate(statements):
            if not isinstance(statement, cst.For):
                continue
            split = self._split(statements[:i], statement)
            if split is None:
                continue
            init, guard = split
            statements = [s for j, s in enumerate(statements) if j != init]
            statements[statements.index(statement)] = guard
            self.changed = True
            return updated_node.with_changes(body=statements)
        return updated_node

    def _split(self, before: list[cst.BaseStatement], loop: cst.For) -> tuple[int, cst.If] | None:
        if loop.orelse is not None or not isinstance(loop.target, cst.Name) or not isinstance(loop.body,
                                                                                           cst.IndentedBlock):
            return None
        bound = _product_bound(self.source, loop.iter)
        body = list(loop.body.body)
        if bound is None or len(body) < 3:
            return None
        update = single_assign(body[0])
        if update is None:
            return None
        counter = update[0]
        wrap = _wrap(self.source, update[1], counter)
        if wrap is None:
            return None
        factors = [f for f in bound if _same(f, wrap)]
        if not factors:
            return None
        tiles = bound[1] if bound[0] is factors[0] else bound[0]
        # the counter: `counter = -1` on a line before the loop in this block, bound nowhere else
        init = next((j for j in range(len(before) - 1, -1, -1) if counter in assigned_names(before[j])), None)
        if init is None or not _minus_one(single_assign(before[init])) or self.counts.get(counter) != 2:
            return None
        variable = loop.target.value
        targets = sum(1 for n in semantic_preorder(self.fn) if isinstance(n, cst.For)
                      and isinstance(n.target, cst.Name) and n.target.value == variable)
        if _uses(self.fn, variable) != targets:
            return None  # (the loop's variable is read: the nested loops give it other values)
        if _uses(self.fn, counter) != _uses(loop, counter) + _uses(before[init], counter):
            return None  # (read after the loop: the nested loops leave it at another value)
        first, last = cst.parse_expression("0"), cst.BinaryOperation(wrap, cst.Subtract(), cst.Integer("1"))
        prologue: list[cst.BaseStatement] = []
        epilogue: list[cst.BaseStatement] = []
        middle: list[cst.BaseStatement] = []
        for statement in body[1:]:
            test = _counter_test(statement, counter)
            if test is not None and _same(test, first) and not middle and not epilogue:
                prologue.extend(statement.body.body)  # type: ignore[attr-defined]
            elif test is not None and _same(test, last):
                epilogue.extend(statement.body.body)  # type: ignore[attr-defined]
            elif epilogue or test is not None:
                return None
            else:
                middle.append(statement)
        if not middle or not (prologue or epilogue):
            return None
        if any(counter in read_names(s) or variable in read_names(s) for s in (*prologue, *epilogue)):
            return None
        if any(isinstance(n, cst.If) and counter in read_names(n.test) for s in middle for n in semantic_preorder(s)):
            return None
        inner = cst.For(target=cst.Name(counter), iter=cst.parse_expression(f"range(0, {_code(wrap)})"),
                        body=cst.IndentedBlock(middle))
        outer = loop.with_changes(iter=cst.parse_expression(f"range(0, {_code(tiles)})"),
                                  body=cst.IndentedBlock([*prologue, inner, *epilogue]), leading_lines=[])
        guard = cst.If(test=cst.parse_expression(f"{_code(wrap)} > 0"), body=cst.IndentedBlock([outer]),
                       leading_lines=[*loop.leading_lines, cst.EmptyLine(comment=cst.Comment(NOTE))])
        return init, guard


def _uses(node: cst.CSTNode, name: str) -> int:
    """How many times `name` appears in `node` (read or bound)."""
    return sum(1 for n in semantic_preorder(node) if isinstance(n, cst.Name) and n.value == name)


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _same(a: cst.CSTNode, b: cst.CSTNode) -> bool:
    return " ".join(_code(a).replace("(", " ").replace(")", " ").split()) == \
        " ".join(_code(b).replace("(", " ").replace(")", " ").split())


def _product_bound(source: SourceFile, node: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(x, y) of `range(x * y)` or `range(0, x * y)`."""
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Name) or node.func.value != "range" \
            or any(a.keyword is not None or a.star for a in node.args):
        return None
    args = [a.value for a in node.args]
    if len(args) == 2 and _code(args[0]).strip() == "0":
        args = args[1:]
    if len(args) != 1 or not isinstance(args[0], cst.BinaryOperation) or not isinstance(args[0].operator,
                                                                                       cst.Multiply):
        return None
    return args[0].left, args[0].right


def _wrap(source: SourceFile, value: cst.BaseExpression, counter: str) -> cst.BaseExpression | None:
    """`n` of `tl.where(c == n - 1, 0, c + 1)` or `(c + 1) % n`."""
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Modulo) \
            and _same(value.left, cst.parse_expression(f"{counter} + 1")):
        return value.right
    if not isinstance(value, cst.Call) or language_name(source.qualified_name(value.func)) not in ("where",
                                                                                                   "core.where"):
        return None
    args = [a.value for a in value.args if a.keyword is None]
    if len(args) != 3 or _code(args[1]).strip() != "0" or not _same(args[2], cst.parse_expression(f"{counter} + 1")):
        return None
    test = args[0]
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1 \
            or not isinstance(test.comparisons[0].operator, cst.Equal) or not _same(test.left, cst.Name(counter)):
        return None
    bound = test.comparisons[0].comparator
    if isinstance(bound, cst.BinaryOperation) and isinstance(bound.operator, cst.Subtract) \
            and _code(bound.right).strip() == "1":
        return bound.left
    return None


def _minus_one(assigned: tuple[str, cst.BaseExpression] | None) -> bool:
    return assigned is not None and _code(assigned[1]).replace(" ", "") == "-1"


def _counter_test(statement: cst.BaseStatement, counter: str) -> cst.BaseExpression | None:
    """`v` of `if counter == v:` (no `elif`/`else`), else None."""
    if not isinstance(statement, cst.If) or statement.orelse is not None or not isinstance(statement.body,
                                                                                          cst.IndentedBlock):
        return None
    test = statement.test
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(
            test.comparisons[0].operator, cst.Equal) and _same(test.left, cst.Name(counter)):
        return test.comparisons[0].comparator
    return None
