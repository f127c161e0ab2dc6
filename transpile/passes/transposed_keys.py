"""AMD: a flash-attention K tile loaded as [HEAD_DIM, BLOCK_N] loaded as [BLOCK_N, HEAD_DIM] and transposed instead.

Much serving code loads K already transposed for the scores' dot (lightllm, FlagGems, the Triton tutorials' older
forms)::

    k_ptrs = K + offs_n[None, :] * stride_kbs + offs_d[:, None]         # [HEAD_DIM, BLOCK_N]
    for start_n in range(0, end, BLOCK_N):
        k = tl.load(k_ptrs + start_n * stride_kbs, mask=(start_n + offs_n[None, :]) < end, other=0.0)
        qk = tl.dot(q, k)

In memory each key is a row of K (the head dimension is contiguous), so the tile's contiguous axis is its first: the
16-byte copies of the AMD rings (direct to LDS, buffer loads), laid along a tile's last axis, cannot copy it. This pass
reads the same elements as the tile's transpose, whose last axis is the head dimension::

        k = tl.load((K + offs_n[:, None] * stride_kbs + offs_d[None, :]) + start_n * stride_kbs,
                    mask=(start_n + offs_n[:, None]) < end, other=0.0)
        qk = tl.dot(q, tl.trans(k))

the form the AMD pipeline takes (its ring holds [BLOCK_N, HEAD_DIM] slots; the MMA reads a transposed view). Every
``v[:, None]`` and ``v[None, :]`` of the address and mask is swapped, and the 2-D names they read are replaced by
their swapped definitions (`transpile.analysis.attention.transposed_k`: refused, and the loop left as written, where
that is not the same tile transposed). Only the K load and the dot's operand change, on their own lines; the loop's
`k` is read by the dot alone (the attention plan's condition). sm90's attention ring makes the same swap itself
(`AttentionPlan.k_swapped`), so this pass runs for the AMD targets only (`engine.with_transposed_keys`).

`transpose_key_tiles(source, facts, plans)` returns the new module text, or None when no loop changes.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import libcst as cst

from transpile.analysis.attention import (AttentionPlan, loop_local, plan_attention_loop, swapped_axes,
                                          top_definitions, transposed_k)
from transpile.analysis.dot_loops import dot_loops
from transpile.analysis.launch_alignment import first_axis_contiguous, pointer_tile_strides
from transpile.analysis.layouts import LayoutPlan, name_terms
from transpile.analysis.pipeline import loop_bindings, loop_body, transposed_name
from transpile.analysis.stages import not_elementwise
from transpile.cst_utils import (assigned_names, bound_names, broadcast_axis, calls_in, names_in, single_assign,
                                 substituted, unparenthesized)
from transpile.cst_walk import preorder
from transpile.discover import JitFunction, ModuleFacts, language_alias, language_name
from transpile.passes import Replace
from transpile.source import SourceFile


def transpose_key_tiles(source: SourceFile, facts: ModuleFacts, plans: dict[str, LayoutPlan], a_operands: bool = False
                        ) -> str | None:
    replacements: list[tuple[cst.CSTNode, cst.CSTNode]] = []
    for fn in facts.functions.values():
        plan = plans.get(fn.name)
        lang = language_alias(source, fn.node)
        if plan is None or not lang:
            continue
        for loop in dot_loops(facts, fn):
            if not isinstance(loop.node, cst.For):
                continue
            att = plan_attention_loop(source, loop.node, plan, 2, in_order=True)
            if not isinstance(att, AttentionPlan):
                replacements += _transposed_operands(source, fn, plan, loop.node, lang, a_operands)
                continue
            body = loop_body(loop.node)
            # (the scores' K tile, then those of the products added to the scores: each read as its transpose)
            tiles = [(att.k, att.k_transposed, att.scores_index),
                     *((extra.k, extra.k_transposed, extra.index) for extra in att.summed)]
            found = []
            for tile, transposed, index in tiles:
                if transposed:
                    continue
                view = transposed_k(dataclasses.replace(att, k=tile), fn.node, plan, "a 16-byte copy",
                                    loop_names=True)
                # (a K the dot reads computed from its tile, `k_op = k.to(T)`: the same computation on the tile's
                # transpose gives the operand transposed only where it is elementwise with scalars)
                if not isinstance(view, AttentionPlan) or not _readable_in_loop(fn.node, loop.node, view) or (
                        tile.computed and (not_elementwise(source, body, tile.name, tile.prep, plan, fn)
                                           or (att.shared_v is not None and tile is att.k))):
                    found = []
                    break
                found.append((tile, view, index))
            in_loop = bound_names(loop.node)
            for tile, view, index in found:
                # (a 2-D name the loop binds, `off_k = kv_loc[None, :] * stride + ...`, is rewritten where it is bound;
                # those bound before the loop are expanded into the load)
                outside = {n: d for n, d in view.k_definitions.items() if n not in in_loop or n in view.k_inline}
                for statement in body:
                    assigned = single_assign(statement)
                    if assigned is not None and assigned[0] in view.k_definitions and assigned[0] in in_loop \
                            and assigned[0] not in view.k_inline:
                        replacements.append((assigned[1], _expanded(view.k_definitions[assigned[0]], outside)))
                call = tile.call
                args = []
                for arg in call.args:
                    if arg.value is tile.pointer:
                        arg = arg.with_changes(value=_expanded(view.k.pointer, outside))
                    elif tile.mask is not None and arg.value is tile.mask:
                        arg = arg.with_changes(value=_expanded(view.k.mask, outside))
                    args.append(arg)
                replacements.append((call, call.with_changes(args=args)))
                dot = next(c for c in calls_in(body[index]) if c in plan.dots)
                operand = plan.dots[dot].b
                read = operand.value if tile.computed and isinstance(operand, cst.Name) else tile.name
                replacements.append((operand, cst.parse_expression(f"{lang}.trans({read})")))
                if att.shared_v is not None and tile is att.k:
                    # (V the K tile itself, `v = tl.trans(kv)` or `tl.dot(p, tl.trans(kv))`: now `kv` as loaded)
                    if att.shared_v == att.acc_index:
                        second = next(c for c in calls_in(body[att.acc_index]) if c in plan.dots)
                        replacements.append((plan.dots[second].b, cst.Name(tile.name)))
                    else:
                        replacements.append((single_assign(body[att.shared_v])[1], cst.Name(tile.name)))
    if not replacements:
        return None
    # (in one walk: libcst's `deep_replace` remakes the tree, so a second node would no longer be found in it)
    return source.module.visit(Replace({id(old): new for old, new in replacements})).code


def _readable_in_loop(function: cst.FunctionDef, loop: cst.For, view: AttentionPlan) -> bool:
    """Whether the swapped definitions of the 2-D names K's address reads can be evaluated at the load, in the loop:
    no such name is a parameter, and every name they read (but one another) is bound once in the function, not in
    the loop, nor a parameter bound again (`offs_n = start_n + offs_n` in the loop, `kt_ptrs = kt_ptrs + ...`), or
    bound once in the loop by a statement before the load (a paged kernel's `kv_loc = tl.load(...)`)."""
    _, counts = top_definitions(function)
    params = {p.name.value for p in function.params.params}
    in_loop = bound_names(loop)
    body = loop_body(loop)
    before_load = set().union(*(assigned_names(s) for s in body[:view.k.index]))
    for name, definition in view.k_definitions.items():
        if name in params:
            return False
        for read in names_in(definition) - set(view.k_definitions):
            if read in view.k_settled:
                continue  # (its value when the loop starts, which the definition reads: `value_at_loop`)
            if read in in_loop and read in before_load and (loop_local(function, read) or (
                    isinstance(loop.target, cst.Name) and read == loop.target.value)):
                continue  # (bound before the load in each copy of the loop that binds it, or the loop's variable
                # made a multiple of the step there, `start_n = tl.multiple_of(start_n, BLOCK_N)`: this copy's value)
            if name in in_loop and read not in in_loop:
                continue  # (a definition the loop makes reads, at the load, what it reads where the loop makes it:
                # a name the loop does not bind, however often the kernel bound it before, `bos, eos = ...` in both
                # branches of `if IS_VARLEN:`)
            if counts.get(read, 0) + (read in params) > 1 or (read in in_loop and read not in before_load):
                return False
    return True


def _expanded(node: cst.BaseExpression, definitions: dict[str, cst.BaseExpression],
              seen: frozenset[str] = frozenset()) -> cst.BaseExpression:
    """`node` with each name of `definitions` replaced by its (swapped) definition, in parentheses, through the names
    those definitions read."""
    values = {name: _expanded(definitions[name], definitions, seen | {name}).with_changes(
        lpar=[cst.LeftParen()], rpar=[cst.RightParen()]) for name in names_in(node) & set(definitions) - seen}
    return substituted(node, values)


def _transposed_operands(source: SourceFile, fn: JitFunction, plan: LayoutPlan, loop: cst.For, lang: str,
                         a_operands: bool) -> list[tuple[cst.CSTNode, cst.CSTNode]]:
    """The rewrites that read each B operand tile of the loop's dots that is contiguous along its first axis (a
    [K, N] tile with K contiguous: keys loaded transposed in chunked linear attention, a block pointer of order
    `(0, 1)`) as its transpose, the dot reading `tl.trans(tile)`: its address and mask with every `v[:, None]` and
    `v[None, :]` swapped, and so the definitions of the 2-D names they read, where those are bound once (in the loop
    before the load, or before the loop and moved in it by scalars) and read by that load alone. The ring then copies
    [N, K] slots 16 bytes a lane along K, which the MMA reads as B as it reads a K-major B. With `a_operands`, so is
    an A operand tile contiguous along its first axis (a [M, K] tile with M contiguous: K^T of a chunk's state
    update `b_h += tl.dot(b_k, b_v)`, X^T of a weight gradient), its [K, M] slots read through a transposed view. Only
    a tile the loop loads once, by a plain `tl.load`, that the function reads nowhere but as operands of dots of the
    loop."""
    body = loop_body(loop)
    function = fn.node
    terms = name_terms(plan)
    _, counts = top_definitions(function)
    occurrences = Counter(n.value for n in preorder(function.body) if isinstance(n, cst.Name))
    dots = [(i, call) for i, statement in enumerate(body) for call in calls_in(statement) if call in plan.dots]
    # (a name each copy of an unswitched loop binds for itself, `b_k = tl.load(p_k, ...)` in both copies: counted in
    # this copy alone, `loop_local`)
    scoped = _LoopScope(function, loop, occurrences)
    bindings = loop_bindings(loop)
    on_last: Counter | None = None  # (`_last_axis_strides`, counted once the first tile asks)
    replacements: list[tuple[cst.CSTNode, cst.CSTNode]] = []
    for index, statement in enumerate(body):
        assigned = single_assign(statement)
        if assigned is None or not isinstance(assigned[1], cst.Call) or scoped.bindings(assigned[0], counts) != 1:
            continue
        name, call = assigned
        if language_name(source.qualified_name(call.func)) not in ("load", "core.load"):
            continue
        # (the tile read as an operand, `tl.dot(k, qT)`, is read through a transposed view of its slot once loaded as
        # its transpose; read transposed, `tl.dot(ds, tl.trans(qT))`, it is read as loaded. A plain A operand is
        # taken only with `a_operands`)
        plain, transposed = [], []
        for i, dot in dots:
            if i <= index:
                continue
            for position, operand in enumerate((plan.dots[dot].a, plan.dots[dot].b)):
                inner = transposed_name(source, operand)
                if isinstance(inner, cst.Name) and inner.value == name:
                    transposed.append(operand)
                elif isinstance(operand, cst.Name) and operand.value == name and (position or a_operands):
                    plain.append(operand)
        # (the tile is read as operands alone, and for its type, `.to(kT.dtype)`: no other read, none after the
        # loop)
        if not plain + transposed or scoped.occurrences(name) != 1 + len(plain) + len(transposed) + scoped.dtype_reads(
                name):
            continue
        positional = [a for a in call.args if a.keyword is None]
        keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        if set(keywords) - {"pointer", "mask", "other", "cache_modifier", "eviction_policy", "volatile"}:
            continue
        pointer = positional[0].value if positional else keywords.get("pointer")
        mask = positional[1].value if len(positional) > 1 else keywords.get("mask")
        other = positional[2].value if len(positional) > 2 else keywords.get("other")
        # (the address as this loop makes it, where it binds the name once before the load: each copy of an
        # unswitched loop makes its own `p_k`, which the function-wide definitions do not give)
        local = bindings.get(pointer.value) if isinstance(pointer, cst.Name) else None
        address = local[1] if local is not None and local[0] < index else pointer
        if pointer is None or other is not None and not _scalar(other, terms):
            continue
        if not first_axis_contiguous(fn, address):
            on_last = _last_axis_strides(source, fn) if on_last is None else on_last
            # (a pointer given as `pointer=` aside)
            if not positional or not _strided_as_transposed(fn, loop, body, index, positional[0].value, scoped,
                                                            on_last):
                continue
        names: dict[str, cst.BaseExpression] = {}  # 2-D names the address and mask read -> where they are bound
        swappable = _Swappable(terms, function, loop, body, index, scoped, names)
        if not all(swappable(node) for node in (pointer, mask) if node is not None):
            continue
        for bound in names.values():
            replacements.append((bound, swapped_axes(bound)))
        replacements.append((call, call.with_changes(args=[
            a.with_changes(value=swapped_axes(a.value)) if a.value is pointer or a.value is mask else a
            for a in call.args])))
        for operand in plain:
            replacements.append((operand, cst.parse_expression(f"{lang}.trans({name})")))
        for operand in transposed:
            replacements.append((operand, cst.Name(name)))
    return replacements


def _strided_as_transposed(fn: JitFunction, loop: cst.For, body: list[cst.BaseStatement], index: int,
                           pointer: cst.BaseExpression, scope: _LoopScope, on_last: Counter) -> bool:
    """Whether the tile the load at `index` of the loop's `body` reads from `pointer` is read transposed through
    run-time strides (the tutorial's attention backward: `qT_ptrs = Q + offs_m[None, :] * stride_tok + offs_k[:, None]
    * stride_d`, beside tiles made with `offs_k[None, :] * stride_d`): each stride of its first axis scales the last
    axis of more of the function's 2-D tiles (`on_last`, `_last_axis_strides`) than any stride of its last axis does.
    Read as its transpose, its last-axis stride is the one the launch already vouches for as 1 for those tiles. The
    address is read where it is bound once (moved by `+=`)."""
    if isinstance(pointer, cst.Name):
        pointer = _bound_once(pointer.value, fn.node, loop, body, index, scope)  # type: ignore[assignment]
    if pointer is None:
        return False
    last, _ = pointer_tile_strides(fn, [pointer], [])
    first, _ = pointer_tile_strides(fn, [swapped_axes(pointer)], [])
    if not last or not first:
        return False
    return min(on_last[name] for name in first) > max(on_last[name] for name in last)


def _last_axis_strides(source: SourceFile, fn: JitFunction) -> Counter:
    """For each stride parameter, how many of the function's 2-D pointer tiles (loaded or stored) it scales along
    their last axis."""
    on_last: Counter = Counter()
    for node in preorder(fn.node.body):
        if isinstance(node, cst.Call) and node.args and node.args[0].keyword is None and language_name(
                source.qualified_name(node.func)) in ("load", "core.load", "store", "core.store"):
            on_last.update(set(pointer_tile_strides(fn, [node.args[0].value], [])[0]))
    return on_last


class _LoopScope:
    """How often a name is bound and occurs, counted in the loop `loop` alone where the name is a temporary of the
    loops that bind it (`loop_local`: each copy of an unswitched loop binds its own), else in the whole function."""

    def __init__(self, function: cst.FunctionDef, loop: cst.For, occurrences: Counter):
        self.function, self.loop, self.every = function, loop, occurrences
        self.inside = Counter(n.value for n in preorder(loop.body) if isinstance(n, cst.Name))
        self._local: dict[str, bool] = {}

    def local(self, name: str) -> bool:
        if name not in self._local:
            self._local[name] = loop_local(self.function, name)
        return self._local[name]

    def occurrences(self, name: str) -> int:
        return self.inside[name] if self.local(name) else self.every[name]

    def dtype_reads(self, name: str) -> int:
        """How often `name.dtype` is read (its element type, the same once the tile is read transposed)."""
        where = self.loop.body if self.local(name) else self.function.body
        return sum(1 for n in preorder(where) if isinstance(n, cst.Attribute) and isinstance(n.value, cst.Name)
                   and n.value.value == name and n.attr.value == "dtype")

    def bindings(self, name: str, counts: dict[str, int]) -> int:
        if self.local(name):
            return sum(name in assigned_names(s) for s in preorder(self.loop.body)
                       if isinstance(s, cst.SimpleStatementLine))
        return counts.get(name, 0)


def _scalar(node: cst.BaseExpression, terms: dict) -> bool:
    """A number or a name the layout plan holds no tensor for."""
    return isinstance(node, (cst.Integer, cst.Float)) or isinstance(node, cst.UnaryOperation) and isinstance(
        node.expression, (cst.Integer, cst.Float)) or isinstance(node, cst.Name) and node.value not in terms


@dataclasses.dataclass
class _Swappable:
    """Whether a 2-D address or mask of the load at `index` of the loop's `body` is the same tile transposed once its
    broadcasts are swapped: arithmetic and comparisons on scalars, 1-D vectors broadcast by `v[:, None]` /
    `v[None, :]` (`tl.arange` and 1-D names inside them alone), and 2-D names bound once by such an expression and
    read by this load alone (collected in `names`, name -> the value to swap where it is bound)."""

    terms: dict
    function: cst.FunctionDef
    loop: cst.For
    body: list[cst.BaseStatement]
    index: int
    scope: _LoopScope
    names: dict[str, cst.BaseExpression]

    def __call__(self, node: cst.BaseExpression, inside: bool = False) -> bool:
        """`inside`: `node` is a 1-D part of a broadcast."""
        node = unparenthesized(node)
        if isinstance(node, (cst.Integer, cst.Float)):
            return True
        if isinstance(node, cst.Subscript):
            return not inside and broadcast_axis(node) is not None and self(node.value, True)
        if isinstance(node, cst.BinaryOperation):
            return self(node.left, inside) and self(node.right, inside)
        if isinstance(node, cst.UnaryOperation):
            return self(node.expression, inside)
        if isinstance(node, cst.Comparison):
            return all(self(part, inside) for part in (node.left, *(c.comparator for c in node.comparisons)))
        if isinstance(node, cst.Call):
            if isinstance(node.func, cst.Attribute) and node.func.attr.value == "arange" \
                    or isinstance(node.func, cst.Name) and node.func.value == "arange":
                return inside
            return not any(n in self.terms for n in names_in(node))  # (a scalar: `tl.cdiv(K, BK)`)
        if not isinstance(node, cst.Name):
            return False
        term = self.terms.get(node.value)
        if term is None:
            return True  # (a scalar)
        if term.slice_of is not None or term.find().rank == 1:
            return inside
        if inside or term.find().rank != 2:
            return False
        if node.value in self.names:
            return True
        bound = _bound_once(node.value, self.function, self.loop, self.body, self.index, self.scope)
        # (read by this load alone: bound once, read here once, moved only by `+=` of scalars)
        if bound is None or self.scope.occurrences(node.value) != 2 + _advances(node.value, self.body, self.terms):
            return False
        self.names[node.value] = bound
        return self(bound)


def _bound_once(name: str, function: cst.FunctionDef, loop: cst.For, body: list[cst.BaseStatement], index: int,
                scope: _LoopScope) -> cst.BaseExpression | None:
    """The value of the one `name = value` binding `name`, in the loop before statement `index` or at the
    function's top level before the loop; None where it has another binding (`+=` of a scalar aside)."""
    def values(statements: list[cst.BaseStatement]) -> list[cst.BaseExpression]:
        return [assigned[1] for assigned in map(single_assign, statements)
                if assigned is not None and assigned[0] == name]

    found = values(body[:index])
    in_loop = bool(found)
    if not found:
        top = list(function.body.body)  # type: ignore[union-attr]
        if loop not in top:
            return None
        found = values(top[:top.index(loop)])
    # (bound in the loop, in each copy of an unswitched loop: counted in this copy)
    where = loop.body if in_loop and scope.local(name) else function.body
    bindings = sum(name in assigned_names(s) for s in preorder(where)
                   if isinstance(s, cst.SimpleStatementLine) and not _is_advance(s, name))
    return found[0] if len(found) == 1 and bindings == 1 else None


def _is_advance(statement: cst.SimpleStatementLine, name: str) -> bool:
    small = statement.body[0] if len(statement.body) == 1 else None
    return isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name) and small.target.value == name \
        and isinstance(small.operator, cst.AddAssign)


def _advances(name: str, body: list[cst.BaseStatement], terms: dict) -> int:
    """How often the loop moves `name` by `name += <scalar>` (each an occurrence of the name)."""
    return sum(1 for s in body if isinstance(s, cst.SimpleStatementLine) and _is_advance(s, name)
               and not any(n in terms for n in names_in(s.body[0].value)))  # type: ignore[attr-defined]
