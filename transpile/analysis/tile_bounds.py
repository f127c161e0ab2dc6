"""The K-tail peel's proof: which mask terms of a pipelined loop's tile loads hold on every element of the tile for
all iterations but the last few, and how many leading iterations that is.

The most common public GEMM loop masks its K tail on every load::

    offs_k = tl.arange(0, BLOCK_K)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)

On iteration ``k`` the term is true for every element of the tile when ``K - k * BLOCK_K >= BLOCK_K``, i.e. on the
first ``K // BLOCK_K`` iterations: a loop that copies only those iterations' tiles (a pipelined loop's steady state)
may drop the term, and the compare and select it costs per copy, as AMD's hand-written GEMMs do by peeling the tail.

`tail_peel` proves that for mask terms written as one comparison between affine expressions of the loop variable,
invariant scalars (parameters, and locals assigned once outside the loop from them) and ``arange`` vectors (possibly
broadcast, laid out or hinted), each vector with coefficient +-1: the term's least value over the tile, its slack, is
then an affine function of the iteration index ``j``, ``s0 - d * j``, with ``d`` a product of constexpr parameters
(block sizes, assumed positive as ``tl.arange`` requires) and literals, and the term holds on the first
``max(s0 + d, 0) // d`` iterations. Terms that do not read the loop variable (row bounds) are never dropped; terms
the proof does not take stay as written. Facts only: nothing here edits a tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from transpile import cst_walk
from transpile.analysis.pipeline import LoopPlan, loop_body
from transpile.cst_utils import conjuncts, names_in, read_names, unparenthesized
from transpile.discover import JitFunction

#: A polynomial over atoms: monomial (sorted atom names; "" for the loop variable) -> integer coefficient.
Poly = dict[tuple[str, ...], int]

_LOOP = ""  # the loop variable's atom
_PASS_THROUGH = {"multiple_of", "max_contiguous", "convert_layout", "max_constancy"}  # value-preserving calls
_SCALAR_CALLS = {"program_id", "num_programs", "cdiv", "minimum", "maximum", "min", "max", "to",
                 # (a value loaded from a scalar address, once, outside the loop: a grouped GEMM's `K`)
                 "load"}


@dataclass(frozen=True)
class TailPeel:
    """Mask terms that hold on the first `count` iterations of a loop."""

    count: str  # source text, from the kernel's own names: how many leading iterations every dropped term holds on
    dropped: dict[int, tuple[int, ...]]  # a load's statement index in the body -> the indices of its mask's terms
    # a load's statement index -> its mask's terms, where a mask named by the kernel was expanded into the terms it
    # binds (`masks_a = masks_am[:, None] & masks_k[None, :]`: the row term stays, the K term is dropped)
    terms: dict[int, tuple[cst.BaseExpression, ...]] = field(default_factory=dict)


def tail_peel(fn: JitFunction, plan: LoopPlan) -> TailPeel | None:
    """The mask terms of `plan`'s pointer loads that a steady state of full tiles may drop, or None."""
    algebra = _Algebra(fn, plan)
    span = _span(algebra, plan)
    if span is None:
        return None
    lo_poly, step_poly = span
    dropped: dict[int, tuple[int, ...]] = {}
    expanded: dict[int, tuple[cst.BaseExpression, ...]] = {}
    counts: list[str] = []
    for load in plan.loads:
        if load.kind != "pointer" or load.mask is None:
            continue
        indices = []
        algebra.load_index = load.index
        terms = algebra.expand(load.mask)
        for i, term in enumerate(terms):
            count = algebra.holds_for(term, load.index, lo_poly, step_poly)
            if count is not None:
                indices.append(i)
                if count not in counts:
                    counts.append(count)
        if indices:
            dropped[load.index] = tuple(indices)
            if len(terms) != len(conjuncts(load.mask)):
                expanded[load.index] = tuple(terms)
    if not dropped:
        return None
    return TailPeel(_nested_minimum(counts), dropped, expanded)


@dataclass(frozen=True)
class DescriptorTile:
    """A tensor descriptor a loop's tiles are read through, as the kernel makes it
    (`tl.make_tensor_descriptor(base, shape=[...], strides=[...], block_shape=[...])`): source texts."""

    base: str
    shape: tuple[str, ...]
    strides: tuple[str, ...]
    block: tuple[str, ...]


def descriptor_tile(fn: JitFunction, name: str) -> DescriptorTile | None:
    """How the kernel `fn` makes the descriptor `name` (assigned once, by `tl.make_tensor_descriptor` with list
    arguments), or None."""
    found = [node for node in cst_walk.preorder(fn.node) if isinstance(node, cst.Assign) and any(
        isinstance(t.target, cst.Name) and t.target.value == name for t in node.targets)]
    if len(found) != 1 or not isinstance(found[0].value, cst.Call):
        return None
    call = found[0].value
    func = call.func
    if not (isinstance(func, cst.Attribute) and func.attr.value == "make_tensor_descriptor"):
        return None
    positional = [a.value for a in call.args if a.keyword is None]
    keyword = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    lists = []
    for i, key in ((1, "shape"), (2, "strides"), (3, "block_shape")):
        value = keyword.get(key, positional[i] if i < len(positional) else None)
        if not isinstance(value, (cst.List, cst.Tuple)):
            return None
        lists.append(tuple(cst.Module([]).code_for_node(e.value).strip() for e in value.elements))
    if not len(lists[0]) == len(lists[1]) == len(lists[2]) == 2:
        return None
    base = keyword.get("base", positional[0] if positional else None)
    if base is None:
        return None
    return DescriptorTile(cst.Module([]).code_for_node(base).strip(), *lists)


def descriptor_peel(fn: JitFunction, plan: LoopPlan) -> tuple[str, dict[int, int]] | None:
    """For a loop of 2-D tensor-descriptor tiles: how many leading iterations each tile lies wholly inside its
    descriptor's shape along the axis its offset moves with the loop (`k * BLOCK_K + (BLOCK_K - 1) < K`), and that
    axis per load (by statement index); None where no tile's bound is proven."""
    algebra = _Algebra(fn, plan)
    span = _span(algebra, plan)
    if span is None:
        return None
    axes: dict[int, int] = {}
    counts: list[str] = []
    for load in plan.loads:
        tile = descriptor_tile(fn, load.descriptor) if load.kind == "descriptor" else None
        offsets = load.call.args[0].value if tile is not None and load.call.args else None
        if not isinstance(offsets, (cst.List, cst.Tuple)) or len(offsets.elements) != 2:
            continue
        for axis, element in enumerate(offsets.elements):
            offset = cst.Module([]).code_for_node(element.value).strip()
            test = f"({offset}) + ({tile.block[axis]} - 1) < ({tile.shape[axis]})"  # type: ignore[union-attr]
            try:
                node = cst.parse_expression(test)
            except cst.ParserSyntaxError:
                continue
            count = algebra.holds_for(node, load.index, *span)
            if count is not None:
                axes[load.index] = axis
                if count not in counts:
                    counts.append(count)
                break
    if not counts:
        return None
    return _nested_minimum(counts), axes


def leading_iterations(fn: JitFunction, plan: LoopPlan, tests: list[str]) -> str | None:
    """How many leading iterations of `plan`'s loop every one of `tests` holds on, as text: scalar comparisons of the
    loop variable with invariant scalars (a uniform mask's terms, `transpile.analysis.uniform_mask`, whose tests
    bound a whole tile: `start_n + (BLOCK_N - 1) < N_CTX`, causal `start_m * BLOCK_M >= start_n + (BLOCK_N - 1)`).
    None where a test does not read the loop variable, does not fall as the loop goes on, or the proof does not
    take it."""
    algebra = _Algebra(fn, plan)
    span = _span(algebra, plan)
    if span is None or not tests:
        return None
    counts: list[str] = []
    for test in tests:
        try:
            node = cst.parse_expression(test)
        except cst.ParserSyntaxError:
            return None
        count = algebra.holds_for(node, 0, *span)
        if count is None:
            return None
        if count not in counts:
            counts.append(count)
    return _nested_minimum(counts)


def _span(algebra: _Algebra, plan: LoopPlan) -> tuple[Poly, Poly] | None:
    """The affine forms of the loop's start and step (`range(lo, hi, step)`), or None."""
    span = [a.value for a in plan.loop.iter.args if a.keyword is None]  # type: ignore[attr-defined]
    lo, step = (span[0], span[2] if len(span) > 2 else None) if len(span) > 1 else (None, None)
    lo_poly = algebra.scalar(lo) if lo is not None else {}
    step_poly = algebra.scalar(step) if step is not None else {(): 1}
    if lo_poly is None or step_poly is None:
        return None
    return lo_poly, step_poly


def _nested_minimum(values: list[str]) -> str:
    text = values[0]
    for value in values[1:]:
        text = f"gl.minimum({text}, {value})"
    return text


class _Algebra:
    """Affine forms of a loop's mask expressions; vectors are `arange` atoms with their bounds."""

    def __init__(self, fn: JitFunction, plan: LoopPlan) -> None:
        self.plan = plan
        self.body = loop_body(plan.loop)
        self.params = {p.name: p.is_constexpr for p in fn.params}
        bindings: dict[str, int] = {}
        values: dict[str, cst.BaseExpression] = {}
        body_nodes = {id(n) for s in self.body for n in cst_walk.preorder(s)}
        for node in cst_walk.preorder(fn.node):
            if id(node) in body_nodes:
                continue  # (the loop's own assignments: `value`)
            targets: list[cst.BaseExpression] = []
            if isinstance(node, cst.Assign):
                targets = [t.target for t in node.targets]
                if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
                    values[node.targets[0].target.value] = node.value
            elif isinstance(node, (cst.AugAssign, cst.AnnAssign, cst.For)):
                targets = [node.target]
            elif isinstance(node, cst.AsName):
                targets = [node.name]
            for target in targets:
                for name in names_in(target):
                    bindings[name] = bindings.get(name, 0) + 1
        self.single = {name: value for name, value in values.items() if bindings.get(name) == 1}
        # the variables of `range` loops around the loop, bound once: scalars it does not change
        self.outer = {node.target.value for node in cst_walk.preorder(fn.node)
                      if isinstance(node, cst.For) and id(node) not in body_nodes and node is not plan.loop
                      and isinstance(node.target, cst.Name) and bindings.get(node.target.value) == 1
                      and isinstance(node.iter, cst.Call) and _callee(node.iter) in ("range", "static_range")}
        self.bound = set(bindings)
        self.loop_defs = {name for s in self.body for name in _assigned(s)}
        self.vectors: dict[str, tuple[Poly, Poly]] = {}  # arange atom -> (lo, hi)
        self.load_index = 0  # the load whose mask is read: names assigned in the loop before it are expanded

    def expand(self, mask: cst.BaseExpression) -> list[cst.BaseExpression]:
        """The conjuncts of `mask`, a name among them that the kernel binds to a conjunction of several terms
        replaced by those terms (so a mask may keep its row bound and drop its K bound)."""
        out: list[cst.BaseExpression] = []
        for term in conjuncts(mask):
            bare = unparenthesized(term)
            value = self.value(bare.value) if isinstance(bare, cst.Name) else None
            if value is not None and len(conjuncts(value)) > 1:
                out.extend(self.expand(value))
            else:
                out.append(term)
        return out

    # ---- the proof --------------------------------------------------------------------------------------------------
    def holds_for(self, term: cst.BaseExpression, load_index: int, lo: Poly, step: Poly,
                  seen: frozenset[str] = frozenset()) -> str | None:
        """How many leading iterations `term` holds on for the whole tile, as text; None where it does not read the
        loop variable or the proof does not take it. A term is a comparison, or a name (possibly broadcast) bound to
        one comparison or to a conjunction of them (`k_mask = offs_k < K - k * BLOCK_K`; `k_mask[None, :]`)."""
        self.load_index = load_index
        term = unparenthesized(term)
        if isinstance(term, cst.Subscript) and _is_broadcast(term):
            term = unparenthesized(term.value)
        if isinstance(term, cst.Name) and term.value not in seen:
            value = self.value(term.value)
            if value is None:
                return None
            counts = [self.holds_for(t, load_index, lo, step, seen | {term.value}) for t in conjuncts(value)]
            if not counts or any(c is None for c in counts):
                return None
            unique = list(dict.fromkeys(counts))
            return _nested_minimum(unique)  # type: ignore[arg-type]
        if not isinstance(term, cst.Comparison) or len(term.comparisons) != 1:
            return None
        op = term.comparisons[0].operator
        left, right = term.left, term.comparisons[0].comparator
        if isinstance(op, (cst.GreaterThan, cst.GreaterThanEqual)):
            left, right = right, left
        elif not isinstance(op, (cst.LessThan, cst.LessThanEqual)):
            return None
        strict = isinstance(op, (cst.LessThan, cst.GreaterThan))
        lhs, rhs = self.form(left), self.form(right)
        if lhs is None or rhs is None:
            return None
        slack = _add(rhs, _scale(lhs, -1))  # the term holds where slack >= 1 (strict) or >= 0
        if not any(_LOOP in mono for mono in slack):
            return None
        least: Poly = {}  # slack's least value over the tile: each vector at the end of its range that lowers it
        for mono, coef in slack.items():
            vectors = [a for a in mono if a in self.vectors]
            if not vectors:
                least = _add(least, {mono: coef})
                continue
            if len(mono) != 1:
                return None  # a vector times anything but a constant
            lo_v, hi_v = self.vectors[mono[0]]
            least = _add(least, _scale(_add(hi_v, {(): -1}) if coef < 0 else lo_v, coef))
        per_k = {tuple(a for a in mono if a != _LOOP): coef for mono, coef in least.items() if _LOOP in mono}
        if any(mono.count(_LOOP) != 1 for mono in least if _LOOP in mono):
            return None  # not affine in the loop variable
        rest = {mono: coef for mono, coef in least.items() if _LOOP not in mono}
        # k = lo + j * step: slack = rest + per_k * lo + per_k * step * j; it must fall as j grows.
        drop = _scale(_mul(per_k, step), -1)  # d: the slack lost per iteration
        if len(drop) != 1:
            return None
        (mono, coef), = drop.items()
        if coef <= 0 or any(not self.params.get(a, False) or a in self.bound for a in mono):
            return None  # d must be a positive literal times constexpr parameters
        start = _add(rest, _mul(per_k, lo))
        numerator = _add(_add(start, {(): -1 if strict else 0}), drop)  # s0 - m + d
        return f"gl.maximum({_text(numerator)}, 0) // {_text(drop, factor=True)}"

    # ---- affine forms -----------------------------------------------------------------------------------------------
    def form(self, node: cst.BaseExpression, seen: frozenset[str] = frozenset()) -> Poly | None:
        node = unparenthesized(node)
        if isinstance(node, cst.Integer):
            return {(): int(node.value, 0)}
        if isinstance(node, cst.Name):
            return self.name(node.value, seen)
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
            inner = self.form(node.expression, seen)
            return None if inner is None else _scale(inner, -1)
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Subtract, cst.Multiply)):
            left, right = self.form(node.left, seen), self.form(node.right, seen)
            if left is None or right is None:
                return None
            if isinstance(node.operator, cst.Add):
                return _add(left, right)
            if isinstance(node.operator, cst.Subtract):
                return _add(left, _scale(right, -1))
            return _mul(left, right)
        if isinstance(node, cst.Subscript):  # a broadcast (`v[None, :]`) keeps the values
            return self.form(node.value, seen) if _is_broadcast(node) else None
        if isinstance(node, cst.Call):
            callee = _callee(node)
            positional = [a.value for a in node.args if a.keyword is None]
            if callee in _PASS_THROUGH and positional:
                return self.form(positional[0], seen)
            # `offs.to(tl.int64)`: a widening (or any integer) cast of an index keeps its values
            if callee == "to" and isinstance(node.func, cst.Attribute) and positional \
                    and "int" in cst.Module([]).code_for_node(positional[0]):
                return self.form(node.func.value, seen)
            if callee == "arange" and len(positional) == 2:
                lo, hi = self.scalar(positional[0]), self.scalar(positional[1])
                if lo is None or hi is None:
                    return None
                atom = f"<arange {len(self.vectors)}>"
                self.vectors[atom] = (lo, hi)
                return {(atom,): 1}
        return None

    def value(self, name: str) -> cst.BaseExpression | None:
        """The one value `name` has where the load reads it: its assignment earlier in the loop body (the only one
        there), or else its only assignment in the function; None where that is not known."""
        if name in self.loop_defs:
            defs = [(i, s) for i, s in enumerate(self.body) if name in _assigned(s)]
            if len(defs) != 1 or defs[0][0] >= self.load_index or name in _assigned_by_aug(defs[0][1]):
                return None  # assigned twice, or after the load (the previous iteration's value)
            small = defs[0][1].body[0]  # type: ignore[attr-defined]
            if not isinstance(small, cst.Assign) or len(small.targets) != 1 or not isinstance(
                    small.targets[0].target, cst.Name):
                return None
            return small.value
        return self.single.get(name)

    def name(self, name: str, seen: frozenset[str]) -> Poly | None:
        if name == self.plan.var:
            return {(_LOOP,): 1}
        if name in seen:
            return None
        if name in self.params and name not in self.loop_defs:
            return None if name in self.bound else {(name,): 1}
        value = self.value(name)
        if value is None:
            return None
        if name not in self.loop_defs and self._scalar(value, seen | {name}):
            return {(name,): 1}  # an invariant scalar: kept by name
        return self.form(value, seen | {name})

    def scalar(self, node: cst.BaseExpression | None) -> Poly | None:
        """The affine form of a loop-invariant scalar (a range bound, an arange bound)."""
        if node is None:
            return None
        saved, self.load_index = self.load_index, 0  # (no name assigned in the loop is invariant)
        poly = self.form(node)
        self.load_index = saved
        if poly is None or any(_LOOP in mono or any(a in self.vectors for a in mono) for mono in poly):
            return None
        return poly

    def _scalar(self, node: cst.BaseExpression, seen: frozenset[str]) -> bool:
        """`node` computes a scalar from parameters and other such scalars, outside the loop."""
        for sub in cst_walk.preorder(node):
            if isinstance(sub, cst.Subscript):
                return False
            if isinstance(sub, cst.Call) and _callee(sub) not in _SCALAR_CALLS:
                return False
        for name in read_names(node):
            if name in ("tl", "gl", "triton", "language", "min", "max") or (
                    name in self.params and name not in self.bound and name not in self.loop_defs):
                continue
            if name in self.loop_defs or name == self.plan.var or name in seen:
                return False
            if name in self.outer:
                continue
            value = self.single.get(name)
            if value is None or not self._scalar(value, seen | {name}):
                return False
        return True


def _assigned(statement: cst.BaseStatement) -> set[str]:
    if isinstance(statement, cst.SimpleStatementLine):
        found: set[str] = set()
        for small in statement.body:
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    found |= names_in(target.target)
            elif isinstance(small, (cst.AugAssign, cst.AnnAssign)):
                found |= names_in(small.target)
        return found
    return set()


def _assigned_by_aug(statement: cst.BaseStatement) -> set[str]:
    return {name for small in getattr(statement, "body", []) if isinstance(small, cst.AugAssign)
            for name in names_in(small.target)}


def _is_broadcast(node: cst.Subscript) -> bool:
    """`v[None, :]`, `v[:, None]`: the same values along a new axis."""
    return all(isinstance(e.slice, cst.Slice) or (isinstance(e.slice, cst.Index) and isinstance(e.slice.value, cst.Name)
                                                   and e.slice.value.value == "None") for e in node.slice)


def _callee(call: cst.Call) -> str | None:
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return func.value if isinstance(func, cst.Name) else None


def _add(a: Poly, b: Poly) -> Poly:
    out = dict(a)
    for mono, coef in b.items():
        out[mono] = out.get(mono, 0) + coef
    return {mono: coef for mono, coef in out.items() if coef}


def _scale(a: Poly, factor: int) -> Poly:
    return {mono: coef * factor for mono, coef in a.items() if coef * factor}


def _mul(a: Poly, b: Poly) -> Poly:
    out: Poly = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            out = _add(out, {tuple(sorted(ma + mb)): ca * cb})
    return out


def _text(poly: Poly, factor: bool = False) -> str:
    """`poly` as source text; `factor`: parenthesised unless a single name or literal."""
    if not poly:
        return "0"
    order = sorted(poly.items(), key=lambda item: (item[1] < 0, not item[0], len(item[0]), item[0]))
    parts: list[str] = []
    for mono, coef in order:
        names = " * ".join(mono)
        magnitude = abs(coef)
        body = names if magnitude == 1 and names else f"{magnitude} * {names}" if names else str(magnitude)
        parts.append(("- " if coef < 0 else "+ ") + body if parts else ("-" if coef < 0 else "") + body)
    text = " ".join(parts)
    single = len(poly) == 1 and next(iter(poly.values())) > 0 and len(next(iter(poly))) <= 1 and (
        next(iter(poly.values())) == 1 or not next(iter(poly)))
    return text if not factor or single else f"({text})"
