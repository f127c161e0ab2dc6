"""Masks that are all true on a tile: `x = tl.where(mask, value, other)` is `x = value` wherever a scalar test holds.

Flash-attention loops mask their scores on every iteration (``qk = tl.where(valid, qk * scale, -inf)``, ``valid`` the
sequence end and, causal, ``offs_m[:, None] >= offs_n[None, :]``), although only the last key block (and, causal, the
blocks on the diagonal) has an element the mask drops. Building the mask and selecting through it costs the softmax
a compare and a select per score on every block. Each term of such a mask compares index vectors ``start + tl.arange(0,
B)`` (broadcast along either axis) and scalars, so interval arithmetic gives a scalar test under which every element of
the tile passes: ``a < b`` holds everywhere when the largest value of ``a`` is below the smallest of ``b``, and an index
vector runs from ``start`` to ``start + B - 1``. The test is sufficient, never necessary (two vectors on the same
axis are taken independently), so where it holds ``tl.where(mask, value, other)`` is ``value`` exactly, and where it
does not, the statements run as written.

`uniform_masks(body, index, ...)` finds, in a loop body, each ``where`` statement whose mask is built that way, with
the statements that build the mask (``valid = ...``, ``if FLAG: valid = valid & ...``), which are read by nothing else
and move into the branch that still needs them. `UniformMask.test_lines` is the scalar test as code. With
``additive``, a mask added to the scores (``qk += tl.where(valid, 0, -inf)``, ``qk = qk * scale + tl.where(valid, 0,
-1.0e6)``) counts too: where the test holds, the statement adds the where's zero (`unmasked`), as the source does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from transpile.analysis.pipeline import loop_body
from transpile.cst_utils import INTEGER_ARITHMETIC, bound_names, only_nodes, read_names, single_assign, unparenthesized
from transpile.discover import JitFunction, language_alias
from transpile.source import SourceFile

_OPS = {cst.LessThan: "<", cst.LessThanEqual: "<=", cst.GreaterThan: ">", cst.GreaterThanEqual: ">="}


@dataclass
class UniformMask:
    where_index: int  # the loop-body statement `target = tl.where(mask, value, other)`
    target: str
    mask_indices: list[int]  # statements that build the mask (read by nothing but the where)
    # The test, term by term: (the constexpr flag guarding the term, or None; the term's scalar test as code)
    terms: list[tuple[str | None, str]] = field(default_factory=list)
    # The terms that compare two index vectors (rows against keys: a causal mask), as (guard, test): the work the
    # branch saves on a tile is then a comparison and a select per score, not a bound check of one vector.
    pairs: list[tuple[str | None, str]] = field(default_factory=list)
    reads: set[str] = field(default_factory=set)  # the names the test reads

    def test_lines(self, name: str) -> list[str]:
        """`name = <test>` and its guarded conjuncts, one statement per line (indent 0)."""
        plain = [t for g, t in self.terms if g is None]
        lines = [f"{name} = {' & '.join(f'({t})' for t in plain) if len(plain) > 1 else plain[0]}"]
        for guard, term in self.terms:
            if guard is not None:
                lines += [f"if {guard}:", f"    {name} = {name} & ({term})"]
        return lines


class _NotUniform(Exception):
    pass


def uniform_masks(body: list[cst.BaseStatement], indices: list[int], var: str, outer: dict[str, cst.BaseExpression],
                  tensors: set[str], flags: set[str], lang: set[str], stable: set[str] | None = None,
                  outside: set[str] = frozenset(), additive: bool = False  # type: ignore[assignment]
                  ) -> list[UniformMask]:
    """The where statements among `indices` of the loop `body` (loop variable `var`) whose masks are all true under
    a scalar test. `outer`: ``name = value`` definitions before the loop of names bound once in the kernel (and
    never in the loop); `tensors`: names bound to tensors (the rest of the names a test reads must be scalars);
    `flags`: constexpr parameters (guards of mask terms); `lang`: the module names of triton.language (``tl``);
    `stable`: the names a test may read besides the loop variable (parameters never assigned, names assigned once in
    the function: a test reads them at the where, a vector was made from them before); `outside`: names read or
    bound outside the loop (a mask among them is not moved into a branch); `additive`: masks added to the scores
    count too (`unmasked`)."""
    found = []
    for i in indices:
        try:
            mask = _where(body, i, indices, var, outer, tensors, flags, lang, stable, outside, additive)
        except _NotUniform:
            continue
        if mask is not None:
            found.append(mask)
    return found


def loop_uniform_masks(source: SourceFile, function: JitFunction, tensors: set[str], loop: cst.For, var: str,
                       indices: list[int], additive: bool = False) -> list[UniformMask]:
    """`uniform_masks` over the statements `indices` of `loop` in the jit function `function` (`tensors`: the names
    the layout analysis binds to tensors), with the names the tests may read taken from the function."""
    from transpile.analysis.attention import top_definitions  # (attention's analysis reads this module's facts)

    definitions, counts = top_definitions(function.node)
    outer = {n: v for n, v in definitions.items() if counts.get(n) == 1}
    lang = language_alias(source, function.node)
    if not lang:
        return []
    params = {p.name for p in function.params}
    stable = {n for n in params if not counts.get(n)} | {n for n, c in counts.items() if c == 1 and n not in params}
    # (names read or bound: not keyword names, `tl.load(..., mask=...)` does not read a variable `mask`)
    outside = set().union(*(read_names(s) for s in function.node.body.body if s is not loop))
    return uniform_masks(loop_body(loop), indices, var, outer,  # type: ignore[union-attr]
                         tensors, set(function.constexpr_names), {lang}, stable, outside, additive)


def _zero(node: cst.BaseExpression) -> bool:
    """A literal zero (`0`, `0.0`)."""
    return isinstance(node, (cst.Integer, cst.Float)) and float(node.value) == 0.0


def _added_where(statement: cst.BaseStatement, lang: set[str]) -> tuple[str, cst.Call, cst.BaseExpression] | None:
    """``x += tl.where(mask, 0, other)`` or ``x = e + tl.where(mask, 0, other)`` (either order) with `x` read by `e`:
    (x, the where call, what it is added to: `x`, or `e`)."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign) \
            and isinstance(small.target, cst.Name):
        call = _lang_call(small.value, lang, "where")
        return (small.target.value, call, small.target) if call is not None else None
    assign = single_assign(statement)
    if assign is None or not isinstance(assign[1], cst.BinaryOperation) or not isinstance(assign[1].operator, cst.Add):
        return None
    for call_side, other_side in ((assign[1].right, assign[1].left), (assign[1].left, assign[1].right)):
        call = _lang_call(call_side, lang, "where")
        if call is not None and assign[0] in read_names(other_side):
            return assign[0], call, other_side
    return None


def unmasked(statement: cst.BaseStatement) -> cst.BaseStatement:
    """The statement of a `UniformMask` as it runs where its test holds: `x = tl.where(mask, value, other)` as
    `x = value`; an added mask, `x += tl.where(mask, 0, other)` / `x = e + tl.where(mask, 0, other)`, with the where
    replaced by its zero (the same arithmetic as the source's where the mask holds)."""
    small = statement.body[0]  # type: ignore[attr-defined]
    if isinstance(small, cst.AugAssign):
        return statement.with_changes(body=[small.with_changes(value=small.value.args[1].value)])  # type: ignore
    value = small.value
    if isinstance(value, cst.Call):
        return statement.with_changes(body=[small.with_changes(value=value.args[1].value)])
    if isinstance(value.right, cst.Call) and isinstance(value.right.func, cst.Attribute) \
            and value.right.func.attr.value == "where":
        return statement.with_changes(body=[small.with_changes(value=value.with_changes(
            right=value.right.args[1].value))])
    return statement.with_changes(body=[small.with_changes(value=value.with_changes(left=value.left.args[1].value))])


def _lang_call(node: cst.CSTNode, lang: set[str], name: str) -> cst.Call | None:
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == name \
            and isinstance(node.func.value, cst.Name) and node.func.value.value in lang:
        return node
    return None


HINTS = ("multiple_of", "max_contiguous", "max_constancy")


def _hint_of(statement: cst.BaseStatement, var: str, lang: set[str]) -> bool:
    """``var = tl.multiple_of(var, ...)``: a compiler hint that leaves the value as it is."""
    assign = single_assign(statement)
    if assign is None or assign[0] != var:
        return False
    call = next((c for hint in HINTS for c in [_lang_call(assign[1], lang, hint)] if c is not None), None)
    return call is not None and bool(call.args) and _is_name(call.args[0].value, var)


def _where(body, i, indices, var, outer, tensors, flags, lang, stable, outside,  # noqa: ANN001
           additive=False) -> UniformMask | None:  # noqa: ANN001
    assign = single_assign(body[i])
    call = _lang_call(assign[1], lang, "where") if assign else None
    added = _added_where(body[i], lang) if additive and call is None else None
    if added is not None:  # (`qk += tl.where(valid, 0, -inf)`: the where's zero, added where the mask holds)
        call = added[1]
    if call is None or len(call.args) != 3 or any(a.keyword is not None for a in call.args):
        return None
    if added is not None and not _zero(call.args[1].value):
        return None
    target, mask, value = (added[0] if added else assign[0]), call.args[0].value, call.args[1].value  # type: ignore
    # `x = value` in the branch must have the where's type and shape: the value is computed from the tensor masked
    # (`qk = tl.where(valid, qk * scale, -inf)`), not a constant or a tensor of its own shape (`tl.where(m, 0.0, b)`);
    # an added mask's zero is added to the tensor masked
    if added is None and target not in read_names(value):
        return None
    # The loop's own definitions before the where, of names bound once in the loop (by `name = value`).
    counts: dict[str, int] = {}
    for statement in body:
        for bound_name in bound_names(statement):
            counts[bound_name] = counts.get(bound_name, 0) + 1
    if var in counts and not all(_hint_of(statement, var, lang) for statement in body if var in bound_names(statement)):
        return None  # the loop variable changes in the loop: a test reads it at the where
    counts.pop(var, None)  # (`start_n = tl.multiple_of(start_n, BLOCK_N)` is the same value, with a hint)
    local: dict[str, cst.BaseExpression] = {}
    for j in range(i):
        bound = single_assign(body[j])
        if bound is not None and counts.get(bound[0]) == 1:
            local[bound[0]] = bound[1]
    resolver = _Resolver(local, {k: v for k, v in outer.items() if k not in counts}, tensors, var, lang)
    resolver.loop_bound = set(counts)
    resolver.stable = stable
    terms: list[tuple[str | None, str]] = []
    mask_indices: list[int] = []
    if isinstance(mask, cst.Name) and mask.value not in outer:
        # `valid = <terms>` then any number of `if FLAG: valid = valid & <terms>`, right before the where.
        name = mask.value
        if name in outside:
            return None  # read or set outside the loop: it must keep its value there
        j = i - 1
        guarded: list[tuple[str, cst.BaseExpression]] = []
        while j >= 0 and j in indices:
            statement = body[j]
            if isinstance(statement, cst.If) and statement.orelse is None and isinstance(statement.test, cst.Name) \
                    and statement.test.value in flags and len(statement.body.body) == 1:
                inner = single_assign(statement.body.body[0])
                if inner is None or inner[0] != name or not isinstance(inner[1], cst.BinaryOperation) \
                        or not isinstance(inner[1].operator, cst.BitAnd) or not _is_name(inner[1].left, name):
                    return None
                guarded.append((statement.test.value, inner[1].right))
                mask_indices.append(j)
                j -= 1
                continue
            bound = single_assign(statement)
            if bound is None or bound[0] != name:
                return None
            mask_indices.append(j)
            terms += [(None, t) for t in resolver.tests(bound[1])]
            break
        else:
            return None
        for guard, node in reversed(guarded):
            terms += [(guard, t) for t in resolver.tests(node)]
        # Nothing else reads the mask (it moves into the branch that needs it).
        if any(name in read_names(body[k]) for k in range(len(body)) if k != i and k not in mask_indices):
            return None
    else:
        terms = [(None, t) for t in resolver.tests(mask)]
    if not terms or all(g is not None for g, _ in terms):
        return None
    return UniformMask(i, target, sorted(mask_indices), terms, [t for t in terms if t[1] in resolver.pairs],
                       resolver.reads)


def _is_name(node: cst.BaseExpression, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name


class _Resolver:
    """Reads mask terms as interval tests on index vectors ``start + tl.arange(0, B)`` and scalars."""

    def __init__(self, local, outer, tensors, var, lang) -> None:
        self.local, self.outer, self.tensors, self.var, self.lang = local, outer, tensors, var, lang
        self.loop_bound: set[str] = set()
        self.stable: set[str] | None = None  # (None: any name not bound in the loop)
        self.pairs: set[str] = set()  # tests of comparisons of two index vectors (rows against keys)
        self.vectors = 0  # index vectors read by the comparison being read
        self.reads: set[str] = set()  # names the tests read

    def tests(self, node: cst.BaseExpression) -> list[str]:
        """The scalar tests, one per comparison of the conjunction `node`."""
        node = unparenthesized(node)
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitAnd):
            return self.tests(node.left) + self.tests(node.right)
        if isinstance(node, cst.Name) and node.value in self.local:
            return self.tests(self.local[node.value])
        if isinstance(node, cst.Comparison) and len(node.comparisons) == 1:
            op = _OPS.get(type(node.comparisons[0].operator))
            if op is None:
                raise _NotUniform
            self.vectors = 0
            low_l, high_l = self.interval(node.left)
            low_r, high_r = self.interval(node.comparisons[0].comparator)
            test = f"{high_l} {op} {low_r}" if op in ("<", "<=") else f"{low_l} {op} {high_r}"
            if self.vectors >= 2:  # index vectors on both sides, or their difference against a scalar
                self.pairs.add(test)
            return [test]
        raise _NotUniform

    def interval(self, node: cst.BaseExpression) -> tuple[str, str]:
        """(smallest, largest) value of `node` over the tile, as code."""
        node = unparenthesized(node)
        if isinstance(node, cst.Subscript):  # `v[:, None]` / `v[None, :]`: a broadcast of the vector `v`
            if len(node.slice) != 2:
                raise _NotUniform
            self.vectors += 1
            return self.vector(node.value)
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Subtract)):
            low_a, high_a = self.interval(node.left)
            low_b, high_b = self.interval(node.right)
            if isinstance(node.operator, cst.Add):
                return _sum(low_a, low_b), _sum(high_a, high_b)
            return f"{low_a} - ({high_b})", f"{high_a} - ({low_b})"
        scalar = self.scalar(node)
        return scalar, scalar

    def vector(self, node: cst.BaseExpression, depth: int = 0) -> tuple[str, str]:
        """(first, last) element of the index vector `node`: a sum of one ``tl.arange(0, B)`` and scalars."""
        node = unparenthesized(node)
        if depth > 8:
            raise _NotUniform
        if isinstance(node, cst.Name):
            definition = self.local.get(node.value, self.outer.get(node.value))
            if definition is None:
                raise _NotUniform
            return self.vector(definition, depth + 1)
        arange = _lang_call(node, self.lang, "arange")
        if arange is not None:
            if len(arange.args) != 2 or any(a.keyword is not None for a in arange.args) \
                    or not (isinstance(arange.args[0].value, cst.Integer) and arange.args[0].value.value == "0"):
                raise _NotUniform
            return "0", f"{self.scalar(arange.args[1].value)} - 1"
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
            for vec, other in ((node.left, node.right), (node.right, node.left)):
                if self._is_vector(vec):
                    first, last = self.vector(vec, depth + 1)
                    start = self.scalar(other)
                    return _sum(start, first), _sum(start, last)
        raise _NotUniform

    def _is_vector(self, node: cst.BaseExpression) -> bool:
        node = unparenthesized(node)
        if isinstance(node, cst.Name):
            return node.value in self.tensors
        return _lang_call(node, self.lang, "arange") is not None or (
            isinstance(node, cst.BinaryOperation) and (self._is_vector(node.left) or self._is_vector(node.right)))

    def scalar(self, node: cst.BaseExpression) -> str:
        """`node` as code, when it is scalar arithmetic on names the loop does not change (or its variable)."""
        node = unparenthesized(node)
        ok = only_nodes(node, INTEGER_ARITHMETIC)
        names = read_names(node)
        # Scalars the loop does not change (parameters, values computed before the loop), or its variable; never
        # a value the loop computes (its test would be read before its definition).
        if not ok or names & self.tensors or any(n in self.local for n in names) \
                or any(n != self.var and n in self.loop_bound for n in names) \
                or (self.stable is not None and any(n != self.var and n not in self.stable for n in names)):
            raise _NotUniform
        self.reads |= names
        text = cst.Module([]).code_for_node(node)
        return text if isinstance(node, (cst.Name, cst.Integer)) else f"({text})"


def _sum(a: str, b: str) -> str:
    if a == "0":
        return b
    if b == "0":
        return a
    return f"{a} + {b}"
