"""Index tensors a dot loop advances by a constant, written as a function of the loop variable.

Public GEMMs often carry the K offsets of their tiles through the loop and advance them at its end::

    offs_k = tl.arange(0, BLOCK_K)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        mask_k = offs_k < K
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :])
        ...
        offs_k += BLOCK_K

(vLLM's `scaled_mm`, FlagGems' `bmm`, ...). Such a tensor is a loop-carried value: its layout is fixed by the loop, and
a pipelined copy issued ahead of the consumer (in the layout of its own 16-byte transfers, for a later iteration)
cannot read it. But its value is the invariant start plus a multiple of the loop index, so this pass writes the reads
that way and drops the advance::

    for k in range(0, tl.cdiv(K, BLOCK_K)):
        mask_k = (offs_k + k * BLOCK_K) < K

which every later analysis reads as an affine function of the loop variable (the copies re-evaluate it for any
iteration; `transpile.analysis.tile_bounds` proves the mask true on full tiles, so the K tail is peeled).

Only a tensor that is certainly an index is rewritten: its one assignment outside the loop is in the loop's own block,
before it, and calls `arange` (or reads a vector assigned once there from `arange`: `w_offs = offs_k[:, None] *
stride_wk + offs_n[None, :] * stride_wn`); the loop assigns it only by `x += c` / `x = x + c` at its top level, with
`c` invariant in the loop, after every read of it in the iteration; it is never a load's or store's pointer (those
are the pointer rings' carried state, which the rules advance themselves); and nothing after the loop reads it.
Anything else is left as written. The rewrite is exact for the values an `int32` index reaches (`k * BLOCK_K` is computed in the loop
variable's type, as Triton computes the source's own `k * BLOCK_K` terms).

`rewrite_inductions(source, facts)` returns the new module text and the functions it replaced (old node -> new), or
None when nothing changes.
"""

from __future__ import annotations

import libcst as cst

from transpile.cst_utils import (
    assigned_names,
    compile_time,
    bound_names,
    calls_in,
    module_code,
    names_in,
    read_names,
    substituted,
)
from transpile.cst_walk import semantic_preorder
from transpile.discover import ModuleFacts, language_alias, language_name
from transpile.source import SourceFile

_MEMORY = ("load", "store", "core.load", "core.store")
_DOTS = ("dot", "core.dot", "dot_scaled", "core.dot_scaled")


def rewrite_inductions(source: SourceFile, facts: ModuleFacts
                       ) -> tuple[str, dict[cst.CSTNode, cst.CSTNode]] | None:
    functions = {fn.node for fn in facts.functions.values()}
    replaced: dict[cst.CSTNode, cst.CSTNode] = {}
    body = []
    for statement in source.module.body:
        new = _function(source, statement) if statement in functions else None  # type: ignore[arg-type]
        if new is not None:
            replaced[statement] = new
        body.append(new or statement)
    return (module_code(source.module.with_changes(body=body)), replaced) if replaced else None


def _function(source: SourceFile, fn: cst.FunctionDef) -> cst.FunctionDef | None:
    """`fn` with its dot loops' index tensors rewritten, or None where none is."""
    counts: dict[str, int] = {}  # name -> assignments anywhere in the function
    for statement in _all_statements(fn):
        if isinstance(statement, cst.SimpleStatementLine):
            for name in assigned_names(statement):
                counts[name] = counts.get(name, 0) + 1
    rewriter = _Blocks(source, counts, fn)
    if not rewriter.any(fn):
        return None
    new = fn.visit(rewriter)
    return new if rewriter.changed else None  # type: ignore[return-value]


class _Blocks(cst.CSTTransformer):
    """Rewrites each dot loop of a statement block against the statements around it in that block."""

    def __init__(self, source: SourceFile, counts: dict[str, int], fn: cst.FunctionDef) -> None:
        super().__init__()
        self.source = source
        self.counts = counts
        self.fn = fn
        self.changed = False

    def any(self, fn: cst.FunctionDef) -> bool:
        return any(isinstance(s, cst.For) for s in _all_statements(fn))

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
                            ) -> cst.IndentedBlock:
        # (names resolve on the original nodes: a loop is read there, and replaced whole where it is rewritten)
        statements = list(updated_node.body)
        originals = list(original_node.body)
        changed = False
        for i, statement in enumerate(originals):
            if isinstance(statement, cst.For):
                new = self._loop(statement, originals[:i])
                if new is not statement:
                    statements[i] = new
                    changed = self.changed = True
        return updated_node.with_changes(body=statements) if changed else updated_node

    def _loop(self, loop: cst.For, before: list[cst.BaseStatement]) -> cst.For:
        if not isinstance(loop.target, cst.Name) or not isinstance(loop.iter, cst.Call) \
                or not isinstance(loop.body, cst.IndentedBlock):
            return loop
        qualified = self.source.qualified_name(loop.iter.func)
        if not ((isinstance(loop.iter.func, cst.Name) and loop.iter.func.value == "range")
                or language_name(qualified) == "range"):
            return loop
        if not any(language_name(self.source.qualified_name(c.func)) in _DOTS for c in calls_in(loop.body)):
            return loop
        bounds = [a.value for a in loop.iter.args if a.keyword is None]
        if not 1 <= len(bounds) <= 3 or len(bounds) != len(loop.iter.args):
            return loop  # (`tl.range(lo, hi, step=BLOCK)`, `num_stages=`: the header is read positionally only)
        lo = bounds[0] if len(bounds) >= 2 else None
        step = bounds[2] if len(bounds) == 3 else None
        var = loop.target.value
        body = list(loop.body.body)
        assigned_in_loop: set[str] = {var} | bound_names(loop.body)
        for s in _all_statements(loop.body):
            assigned_in_loop |= assigned_names(s) if isinstance(s, cst.SimpleStatementLine) else set()
            if isinstance(s, cst.For):
                assigned_in_loop |= names_in(s.target)
        if var in set().union(*(names_in(b) for b in bounds)):
            return loop  # (`for k in range(k, ...)`: the start is the variable's value before the loop)
        header = {var}.union(*(names_in(b) for b in bounds[:1] + bounds[2:]))
        if any(not self._hint(n, name) for name in header & bound_names(loop.body) for n in semantic_preorder(loop.body)
               if isinstance(n, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For))
               and name in read_names(n.target)):
            return loop  # (the iteration's index is read from the loop variable and the header's start and step)
        drops: dict[int, tuple[str, cst.BaseExpression]] = {}
        pointers: set[str] = set()
        attention = self._attention(loop.body)
        for i, statement in enumerate(body):
            advance = _advance(statement)
            if advance is None:
                continue
            name, by = advance
            if names_in(by) & assigned_in_loop:
                continue
            if attention is not None and _is_pointer(self.source, loop.body, name) \
                    and self._pointer_induction(loop, body, i, name, before):
                drops[i] = (name, by)
                pointers.add(name)
                continue
            if self.counts.get(name) != 2:
                continue
            start = _definition(before, name)
            # (written nowhere but from its definition to this loop: not after the loop, not around it)
            if start is None or _uses(self.fn, name) != sum(_uses(s, name) for s in before[start[0]:]) \
                    + _uses(loop, name):
                continue
            if not self._made_from_arange(start[1], before):
                continue
            if any(name in names_in(s) for s in body[i + 1:]) or _is_pointer(self.source, loop.body, name):
                continue
            if not any(name in names_in(s) for s in body[:i]):
                continue
            drops[i] = (name, by)
        branched = {} if drops else self._branch_advances(loop, body, var, lo, step, assigned_in_loop, before)
        if branched:
            return loop.with_changes(body=loop.body.with_changes(
                body=[branched.get(i, s) for i, s in enumerate(body)]))
        if not drops:
            return loop
        replacements = {name: _at_iteration(name, by, var, lo, step, attention if name in pointers else None)
                        for name, by in drops.values()}
        new_body = [substituted(s, replacements) for i, s in enumerate(body) if i not in drops]
        # (a blank line or comment above a dropped advance stays with the statement that follows it)
        for i in sorted(drops, reverse=True):
            lines = body[i].leading_lines  # type: ignore[attr-defined]
            kept = i - sum(1 for j in drops if j < i)
            if lines and kept < len(new_body):
                new_body[kept] = new_body[kept].with_changes(leading_lines=[*lines, *new_body[kept].leading_lines])
        return loop.with_changes(body=loop.body.with_changes(body=new_body))

    def _branch_advances(self, loop: cst.For, body: list[cst.BaseStatement], var: str,
                         lo: cst.BaseExpression | None, step: cst.BaseExpression | None, assigned_in_loop: set[str],
                         before: list[cst.BaseStatement]) -> dict[int, cst.BaseStatement]:
        """Index tensors advanced inside one branch of a compile-time `if` of the loop's body, and read in that `if`
        alone (FlagGems' `if DIVISIBLE_K: ... else: mask_k = offs_k < K; offs_k += BLOCK_K`): a branch Triton takes
        in every iteration or in none, so that inside it the value is again `start + index * step`. {index in `body`:
        the `if` with the branch rewritten}; empty where none is."""
        constexprs = {p.name.value for p in self.fn.params.params
                      if p.annotation is not None and "constexpr" in _code(p.annotation.annotation)}
        found: dict[int, cst.BaseStatement] = {}
        for j, statement in enumerate(body):
            if not isinstance(statement, cst.If):
                continue
            branches: list[cst.IndentedBlock] = []
            node: cst.If | cst.Else | None = statement
            while isinstance(node, cst.If):  # (an `elif` chain: every test decided at compile time)
                if not compile_time(node.test, constexprs) or not isinstance(node.body, cst.IndentedBlock):
                    branches = []
                    break
                branches.append(node.body)
                node = node.orelse
            if isinstance(node, cst.Else) and isinstance(node.body, cst.IndentedBlock) and branches:
                branches.append(node.body)
            for block in branches:
                inner = list(block.body)
                drops: dict[int, tuple[str, cst.BaseExpression]] = {}
                for i, s in enumerate(inner):
                    advance = _advance(s)
                    if advance is None:
                        continue
                    name, by = advance
                    if names_in(by) & assigned_in_loop or self.counts.get(name) != 2 \
                            or _is_pointer(self.source, loop.body, name):
                        continue
                    start = _definition(before, name)
                    if start is None or not self._made_from_arange(start[1], before) \
                            or _uses(self.fn, name) != sum(_uses(b, name) for b in before[start[0]:]) \
                            + _uses(loop, name):
                        continue
                    # (read in this branch before the advance alone: not after it, nor anywhere else in the loop)
                    if any(name in names_in(t) for t in inner[i + 1:]) or not any(name in names_in(t)
                                                                                 for t in inner[:i]):
                        continue
                    # (the other branches, which never advance it, read the value before the loop, as written)
                    if _uses(loop, name) != _uses(statement, name):
                        continue
                    drops[i] = (name, by)
                if not drops:
                    continue
                replacements = {name: _at_iteration(name, by, var, lo, step) for name, by in drops.values()}
                new_inner = [substituted(t, replacements) for i, t in enumerate(inner) if i not in drops]
                new_block = block.with_changes(body=new_inner)
                found[j] = found.get(j, statement).deep_replace(block, new_block)  # type: ignore[assignment]
        return found

    def _hint(self, target: cst.CSTNode, name: str) -> bool:
        """`name = tl.multiple_of(name, ...)` (or `max_contiguous`): a hint that keeps the value."""
        if not isinstance(target, cst.AssignTarget) or not isinstance(target.target, cst.Name):
            return False
        assign = self.source.parents.get(target)
        value = assign.value if isinstance(assign, cst.Assign) else None
        return isinstance(value, cst.Call) and language_name(self.source.qualified_name(value.func)) in (
            "multiple_of", "max_contiguous", "max_constancy") and bool(value.args) \
            and isinstance(value.args[0].value, cst.Name) and value.args[0].value.value == name

    def _attention(self, body: cst.CSTNode) -> str | None:
        """For a loop with two dots or more and a `max` (flash attention's online softmax): the function's name of
        `triton.language` (its pointer tiles advanced per iteration are rewritten too, with 64-bit offsets: the
        attention rules read the addresses of an iteration from the loop variable); None otherwise."""
        names = [language_name(self.source.qualified_name(c.func)) for c in calls_in(body)]
        if sum(n in _DOTS for n in names) < 2 or not any(n in ("max", "core.max", "standard.max") for n in names):
            return None
        return language_alias(self.source, self.fn) or None

    def _pointer_induction(self, loop: cst.For, body: list[cst.BaseStatement], i: int, name: str,
                           before: list[cst.BaseStatement]) -> bool:
        """The pointer tile `name`, advanced by the statement `i` of the loop's body: assigned nowhere else in the
        loop, read in the iteration only before the advance, and nowhere after the loop (its uses are those of the
        statements before the loop in this block and of the loop)."""
        if _assignments(loop.body, name) != 1:
            return False
        if any(name in names_in(s) for s in body[i + 1:]) or not any(name in names_in(s) for s in body[:i]):
            return False
        if not any(isinstance(s, cst.SimpleStatementLine) and name in assigned_names(s) for s in before):
            return False
        return _uses(self.fn, name) == sum(_uses(s, name) for s in before) + _uses(loop, name)

    def _made_from_arange(self, value: cst.BaseExpression, before: list[cst.BaseStatement]) -> bool:
        """`value` calls `arange`, or reads a name that `before` defines by a value calling it (an offset tensor made
        from index vectors: `w_offs = offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn`)."""
        def aranges(node: cst.BaseExpression) -> bool:
            return any(language_name(self.source.qualified_name(c.func)) in ("arange", "core.arange")
                       for c in calls_in(node))

        if aranges(value):
            return True
        for name in sorted(names_in(value)):
            definition = _definition(before, name)
            if definition is not None and self.counts.get(name) == 1 and aranges(definition[1]):
                return True
        return False


def _all_statements(node: cst.CSTNode) -> list[cst.BaseStatement]:
    found: list[cst.BaseStatement] = []

    class _Visitor(cst.CSTVisitor):
        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
            found.append(node)

        def visit_For(self, node: cst.For) -> None:
            found.append(node)

    node.visit(_Visitor())
    return found


def _advance(statement: cst.BaseStatement) -> tuple[str, cst.BaseExpression] | None:
    """`x += c` or `x = x + c` as a statement of its own: (x, c)."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign) \
            and isinstance(small.target, cst.Name):
        return small.target.value, small.value
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name) \
            and isinstance(small.value, cst.BinaryOperation) and isinstance(small.value.operator, cst.Add) \
            and isinstance(small.value.left, cst.Name) and small.value.left.value == small.targets[0].target.value:
        return small.value.left.value, small.value.right
    return None


def _definition(before: list[cst.BaseStatement], name: str) -> tuple[int, cst.BaseExpression] | None:
    """The index and value of `name = ...`, a statement of `before` that assigns `name` alone."""
    for i, statement in enumerate(before):
        if isinstance(statement, cst.SimpleStatementLine) and name in assigned_names(statement):
            small = statement.body[0] if len(statement.body) == 1 else None
            if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                    and isinstance(small.targets[0].target, cst.Name):
                return i, small.value
    return None


def _assignments(node: cst.CSTNode, name: str) -> int:
    """How many assignments in `node` (at any depth, one-line suites included) bind `name`."""
    count = 0
    for n in semantic_preorder(node):
        if isinstance(n, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For)):
            count += name in read_names(n.target)
    return count


def _uses(node: cst.CSTNode, name: str) -> int:
    """How many times `name` is written in `node` (reads and assignments; not attribute or keyword names)."""
    found = [0]

    class _Visitor(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            found[0] += node.value == name

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            node.value.visit(self)
            return False

        def visit_Arg(self, node: cst.Arg) -> bool:
            node.value.visit(self)
            return False

    node.visit(_Visitor())
    return found[0]


def _is_pointer(source: SourceFile, body: cst.CSTNode, name: str) -> bool:
    """`name` is, or starts, the pointer argument of a load or store in `body` (`tl.load(x)`, `tl.load(x + d)`)."""
    for call in calls_in(body):
        if language_name(source.qualified_name(call.func)) not in _MEMORY or not call.args:
            continue
        pointer = call.args[0].value
        while isinstance(pointer, cst.BinaryOperation) and isinstance(pointer.operator, (cst.Add, cst.Subtract)):
            pointer = pointer.left
        if isinstance(pointer, cst.Subscript):
            pointer = pointer.value
        if isinstance(pointer, cst.Name) and pointer.value == name:
            return True
    return False


def _paren(node: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(node, (cst.Name, cst.Integer, cst.Attribute, cst.Call, cst.Subscript)) or node.lpar:
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node).replace(" ", "")


def _at_iteration(name: str, by: cst.BaseExpression, var: str, lo: cst.BaseExpression | None,
                  step: cst.BaseExpression | None, wide: str | None = None) -> cst.BaseExpression:
    """`name` advanced to the current iteration: `name + index * by`, the index written as simply as the loop allows
    (`k`, `k - lo`, `k // step`, or just `k` when the loop steps by `by` itself). With `wide` (the module's name of
    `triton.language`), the index is 64-bit (`tl.cast(k, tl.int64)`): a pointer advanced step by step never overflows a
    32-bit offset, and neither does its rewrite (`tl.cast(k, tl.int64)`)."""
    index: cst.BaseExpression = cst.Name(var)
    if wide is not None:
        index = cst.Call(cst.Attribute(cst.Name(wide), cst.Name("cast")),
                         [cst.Arg(cst.Name(var)), cst.Arg(cst.Attribute(cst.Name(wide), cst.Name("int64")))])
    zero = lo is None or _code(lo) == "0"
    if not zero:
        index = cst.BinaryOperation(index, cst.Subtract(), _paren(lo))  # type: ignore[arg-type]
    if step is not None and _code(step) == _code(by):
        term: cst.BaseExpression = _paren(index)
    else:
        if step is not None and _code(step) != "1":
            index = cst.BinaryOperation(_paren(index), cst.FloorDivide(), _paren(step))
        term = cst.BinaryOperation(_paren(index), cst.Multiply(), _paren(by.with_changes(lpar=[], rpar=[])
                                                                          if isinstance(by, cst.Name) else by))
    return cst.BinaryOperation(cst.Name(name), cst.Add(), term, lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
