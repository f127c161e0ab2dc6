"""Main-loop facts for the flash-attention shape: two dots around an online softmax.

`plan_attention_loop` recognises a loop ``for start_n in range(lo, hi[, step])`` whose body holds exactly two
``tl.dot`` calls of this shape::

    k = tl.load(k_ptrs + ..., mask=..., other=0.0)       # K tile: a pointer load in the loop
    s = tl.dot(q, tl.trans(k))                            # first dot: q loop-invariant, fresh accumulator
    ... reductions of s (tl.max / tl.sum), p computed from s ...
    acc = acc * alpha[:, None]                            # rescales of the accumulator (optional)
    v = tl.load(v_ptrs + ..., mask=..., other=0.0)       # V tile: a pointer load in the loop
    acc = tl.dot(p.to(tl.float16), v, acc)                # second dot: A from registers, loop-carried acc

and splits it into the parts a pipelined rewrite moves around: the tile loads and the *producer slice* their
addresses need (re-evaluated for a later iteration), the statements before the first dot, the softmax between the
dots, the accumulator rescales (which must wait for the previous iteration's second dot), and the statements after
the second dot. Anything else with two dots is a `LoopRefusal` naming the construct; loops with another number of
dots are not this plan's business (None). Pure facts: the tree is not edited.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field

import libcst as cst

from transpile.analysis.layouts import REDUCTIONS, LayoutPlan, name_terms
from transpile.analysis.pipeline import DotChain, LoopPlan, LoopRefusal, OperandLoad, computed_from, loop_body, loop_header
from transpile.cst_utils import (added_to, assigned_names, bound_names, bound_names_of, broadcast_axis, calls_in,
                                 names_in, only_nodes, parenthesized, per_loop, read_names, rescaled, single_assign,
                                 statement_reads)
from transpile.cst_walk import parent_map, preorder
from transpile.discover import language_name
from transpile.source import SourceFile


@dataclass
class TileLoad:
    index: int  # statement index in the loop body
    name: str  # the variable the tile is bound to
    call: cst.Call = field(repr=False)  # the `tl.load(...)`
    pointer: cst.BaseExpression = field(repr=False)
    mask: cst.BaseExpression | None = field(repr=False)
    # (`in_order` plans) the dot reads a tile computed from this one in the iteration (`k = k_0.to(tl.bfloat16)`, a
    # dequantised KV cache): the ring holds the tile as loaded and `prep`, the statements of that computation (indices
    # in the loop body), run where the dot reads it (`OperandLoad.computed`)
    computed: bool = False
    prep: tuple[int, ...] = ()
    computed_as: str = ""  # ... the computed tile's name, where the dot reads it transposed (`tl.dot(q, k.T)`)


@dataclass
class AttentionPlan:
    loop: cst.For = field(repr=False)
    var: str
    range_args: list[cst.BaseExpression] = field(repr=False)
    num_stages: int
    q: str  # the first dot's A operand, loop-invariant (staged in shared memory once)
    k: TileLoad  # the first dot's B operand (loaded [N, K] and transposed when `k_transposed`)
    k_transposed: bool
    v: TileLoad  # the second dot's B operand
    scores: str  # the first dot's result
    scores_index: int
    acc: str  # the second dot's loop-carried accumulator
    acc_index: int
    p: cst.BaseExpression = field(repr=False)  # the second dot's A operand (registers)
    producer: list[int]  # statement indices the loads' addresses and masks depend on
    rescales: list[int]  # `acc = acc * ...` (or `acc *= ...`) statements between the dots
    invariants: list[str] = field(default_factory=list)  # names from outside the loop the addresses use
    # `s = tl.dot(q, k) * scale` (or `scale * tl.dot(...)`): the scalar factor, and whether it stands on the left
    scores_scale: tuple[cst.BaseExpression, bool] | None = field(default=None, repr=False)
    # Definitions of the 2-D names the K addresses read, where a rule reads them otherwise than as written (the sm90
    # ring copies a K loaded as [HEAD_DIM, BLOCK_N] through its transposed addresses)
    k_definitions: dict[str, cst.BaseExpression] = field(default_factory=dict, repr=False)
    k_swapped: bool = False  # `k` holds the swapped address and mask of a K loaded [HEAD_DIM, BLOCK_N]
    # Names bound more than once whose value when the loop starts `k_definitions` gives (`value_at_loop`: a tile an
    # inlined helper moved, and the scalars its moves read), which a rule may read as if bound once
    k_settled: frozenset[str] = frozenset()
    # 2-D names the loop binds before the K load that other statements read too (a key mask that also masks the
    # scores: `k_mask = offs_n[None, :] < kv_len - start_n`): their swapped definitions are written into the load,
    # the binding stays as it is for the other readers
    k_inline: frozenset[str] = frozenset()
    # Further products added to the scores (`in_order` plans: multi-head latent attention's `qk += tl.dot(q_pe, k_pe)`
    # beside `qk = tl.dot(q_nope, k_nope)`), in order: each one's statement index, its A operand (loop-invariant, in
    # registers), its K tile (loaded in the loop) and whether the dot reads that tile transposed
    summed: list[SummedScores] = field(default_factory=list)
    # `in_order` plans: V is the K tile itself (multi-head latent attention's shared latent keys and values: `kv`
    # loaded [HEAD_DIM, BLOCK_N] for the scores, `v = tl.trans(kv)` for PV): the index of the `v = ...` statement
    shared_v: int | None = None
    # The accumulator rescaled inside the second dot (`acc = tl.dot(p, v, acc * alpha[:, None])`, the canonical form
    # of `acc = acc * alpha[:, None] + tl.dot(p, v)`): the factor (`alpha[:, None]`), which the sm90 rings apply where
    # the rescales go (after the previous PV's wait), the dot then reading the accumulator itself
    pv_rescale: cst.BaseExpression | None = field(default=None, repr=False)
    # `in_order` plans: producer state carried from the last iteration and advanced before the loads (a block-sparse
    # kernel's block list, `c = tl.load(idx_ptr)` then `idx_ptr = idx_ptr + stride`): the expander's copies advance
    # a copy of it of their own, started from the value the loop starts from
    carried: list[str] = field(default_factory=list)


@dataclass
class SummedScores:
    index: int  # the dot's statement in the loop body
    q: str  # its A operand, defined before the loop
    k: TileLoad  # its B operand's tile load
    k_transposed: bool
    acc_in_dot: bool  # `qk = tl.dot(q_pe, k_pe, qk)` (else `qk += tl.dot(q_pe, k_pe)`)


def _assigned(statement: cst.CSTNode) -> set[str]:
    """Names bound anywhere in `statement` (compound statements included)."""
    names: set[str] = set()

    class _Targets(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            for target in node.targets:
                names.update(names_in(target.target))

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            names.update(names_in(node.target))

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            names.update(names_in(node.target))

    statement.visit(_Targets())
    return names


def tile_reads(node: cst.CSTNode) -> set[str]:
    """The names `node` reads, but those read only for their element type (``v.dtype``)."""
    dtype_only = {id(n.value) for n in preorder(node) if isinstance(n, cst.Attribute) and n.attr.value == "dtype"
                  and isinstance(n.value, cst.Name)}
    return {n.value for n in preorder(node) if isinstance(n, cst.Name) and id(n) not in dtype_only}


def _transposed(source: SourceFile, node: cst.BaseExpression) -> cst.BaseExpression | None:
    """`x` for ``tl.trans(x)``, ``x.T``, ``x.trans()`` and ``tl.permute(x, (1, 0))``; None otherwise."""
    if isinstance(node, cst.Attribute) and node.attr.value == "T":
        return node.value
    if isinstance(node, cst.Call):
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "trans" and not node.args:
            return node.func.value
        lang = language_name(source.qualified_name(node.func))
        if lang in ("trans", "core.trans") and len(node.args) == 1:
            return node.args[0].value
        if lang in ("permute", "core.permute") and len(node.args) == 2:
            order = source.code(node.args[1].value).replace(" ", "")
            if order in ("(1,0)", "[1,0]"):
                return node.args[0].value
    return None


def _is_zero(source: SourceFile, node: cst.BaseExpression) -> bool:
    return source.code(node).strip() in ("0", "0.0", "0.", "False")


def zeroed_before(source: SourceFile, body: list[cst.BaseStatement], index: int, acc: cst.BaseExpression
                   ) -> int | None:
    """The first dot's accumulator is a zero tile made in this iteration: ``qk = tl.zeros([M, N], dtype=...)`` then,
    with nothing reading or binding `qk` in between, ``qk += tl.dot(q, k)`` (the canonical ``qk = tl.dot(q, k, qk)``):
    the scores start from zero each iteration, as ``qk = tl.dot(q, k)`` does (the canonical pass folds the
    accumulation only into a float32/int32 or `out_dtype` start, the dot's own result type). The index of the
    statement that makes the zero tile, else None."""
    if not isinstance(acc, cst.Name):
        return None
    for i in range(index - 1, -1, -1):
        statement = body[i]
        assignment = single_assign(statement)
        if assignment is not None and assignment[0] == acc.value:
            call = assignment[1]
            if not isinstance(call, cst.Call) or language_name(source.qualified_name(call.func)) not in (
                    "zeros", "core.zeros", "full", "core.full"):
                return None
            if language_name(source.qualified_name(call.func)) in ("full", "core.full"):
                value = next((a.value for a in call.args[1:2] if a.keyword is None), None) or next(
                    (a.value for a in call.args if a.keyword is not None and a.keyword.value == "value"), None)
                return i if value is not None and _is_zero(source, value) else None
            return i
        if acc.value in names_in(statement) or acc.value in assigned_names(statement):
            return None
    return None


def _chained(body: list[cst.BaseStatement], first: int, second: int) -> bool:
    """The second dot reads, through the statements between them, a value the first dot's statement assigns (the
    probabilities computed from the scores): the shape of attention, and of chunked linear attention."""
    derived = assigned_names(body[first])
    for statement in body[first + 1:second + 1]:
        if names_in(statement) & derived:
            if statement is body[second]:
                return True
            derived |= assigned_names(statement)
    return False


@per_loop
def plan_attention_loop(source: SourceFile, loop: cst.For, plan: LayoutPlan, default_stages: int,
                        in_order: bool = False) -> AttentionPlan | LoopRefusal | None:
    """The plan of a two-dot attention loop, a refusal naming what does not fit, or None for other loops.
    `in_order`: the caller (the AMD step expander) writes the loop's statements in their order, the producer slice
    apart, so it also takes scores that are a sum of several products, each of a loop-invariant A and a K tile loaded
    in the loop (`AttentionPlan.summed`: the nope and rotary parts of multi-head latent attention), and an address
    computed after an earlier tile's load that an earlier statement reads (the rotary K's, under a flag that
    unswitching hoisted). Every plan takes the accumulator rescaled inside the second dot (`acc = tl.dot(p, v, acc *
    alpha[:, None])`, the canonical form of `acc = acc * alpha[:, None] + tl.dot(p, v)`: `AttentionPlan.pv_rescale`)."""
    body = loop_body(loop)
    dots = [(i, s) for i, s in enumerate(body) if any(call in plan.dots for call in calls_in(s))]
    if sum(1 for s in body for c in calls_in(s) if c in plan.dots) != len(dots) or not (
            len(dots) == 2 or (in_order and len(dots) > 2)):
        return None
    if not _chained(body, dots[0][0], dots[-1][0]):
        return None  # two independent GEMMs (gate and up projections), not attention: the GEMM rules say why not
    first_acc = plan.dots[next(c for c in calls_in(dots[0][1]) if c in plan.dots)].acc
    if isinstance(first_acc, cst.Name) and first_acc.value != "None" and not any(
            first_acc.value in assigned_names(s) for s in body[:dots[0][0]]):
        # the first dot adds into a value carried from the last iteration (a GEMM over two halves of K, `acc =
        # tl.dot(a1, b1, acc)` then `acc = tl.dot(a2, b2, acc)`), not scores made in the iteration: the GEMM rules
        # say why not
        return None
    extra = dots[1:-1]
    dots = [dots[0], dots[-1]]


    def refuse(node: cst.CSTNode, reason: str) -> LoopRefusal:
        return LoopRefusal(node, f"attention loop: {reason}")

    header = loop_header(source, loop, default_stages)
    if isinstance(header, LoopRefusal):
        return refuse(header.node, header.reason)
    range_args, stages = header

    # Statements: no inner loops, no early exits; compound statements only where they touch no dot and no load.
    for statement in body:
        if isinstance(statement, (cst.For, cst.While)):
            return refuse(statement, "a loop inside the main loop")
        for node in _smalls(statement):
            if isinstance(node, (cst.Break, cst.Continue, cst.Return)):
                return refuse(node, "data-dependent exit from the main loop")

    # The two dots.
    (i1, s1), (i2, s2) = dots
    first = single_assign(s1)
    call1 = next(c for c in calls_in(s1) if c in plan.dots)
    site1 = plan.dots[call1]
    scale = _scale_of(first[1], call1, body, plan) if first is not None else None
    if first is None or (first[1] is not call1 and scale is None):
        return refuse(call1, "the first dot is not `s = tl.dot(q, k)` (or a dot times a scalar) on a line of its own")
    zeroed = zeroed_before(source, body, i1, site1.acc) if site1.acc is not None else None
    if site1.acc is not None and not (isinstance(site1.acc, cst.Name) and site1.acc.value == "None") \
            and zeroed is None:
        return refuse(call1, "the first dot has an accumulator; the score tile must start from zero each iteration")
    second = single_assign(s2)
    call2 = next(c for c in calls_in(s2) if c in plan.dots)
    site2 = plan.dots[call2]
    carried = second is not None and (
        (isinstance(site2.acc, cst.Name) and site2.acc.value == second[0])
        or rescaled(site2.acc, second[0]))
    if second is None or second[1] is not call2 or not carried:
        return refuse(call2, "the second dot is not `acc = tl.dot(p, v, acc)` with a loop-carried accumulator")
    scores, acc = first[0], second[0]
    if None in site1.shape or None in site2.shape:
        return refuse(call1, "the dot tile shapes are not known from the source")

    # Tile loads of the loop: `x = tl.load(ptr, mask=..., other=0)`.
    def tile_load(operand: cst.BaseExpression, what: str, also: int | None = None, dot: int | None = None,
                  transposed: bool = False) -> TileLoad | LoopRefusal:
        if not isinstance(operand, cst.Name):
            return refuse(operand, f"{what} is an expression, not a tile loaded in the loop")
        for i, statement in enumerate(body):
            assigned = single_assign(statement)
            if assigned is None or assigned[0] != operand.value:
                continue
            call = assigned[1]
            if not (isinstance(call, cst.Call) and language_name(source.qualified_name(call.func)) in ("load",
                                                                                                       "core.load")):
                if in_order and dot is not None and shared is None:
                    return computed_tile(operand, what, statement, dot, transposed)
                return refuse(statement, f"{what} `{operand.value}` is not a `tl.load` of a pointer tile")
            checked = load_form(call, operand.value)
            if isinstance(checked, LoopRefusal):
                return checked
            pointer, mask = checked
            # (`p.to(v.dtype)`: the tile's element type, which the rings read from Q's, is not a use of the tile)
            uses = sum(operand.value in tile_reads(s) for j, s in enumerate(body) if j not in (i, also))
            if uses != 1:
                return refuse(statement, f"`{operand.value}` is used outside its dot; the pipelined "
                              f"{'MMA' if in_order else 'wgmma'} reads it straight from shared memory")
            return TileLoad(i, operand.value, call, pointer, mask)
        return refuse(operand, f"{what} `{operand.value}` is not loaded in this loop")

    def load_form(call: cst.Call, name: str) -> tuple[cst.BaseExpression, cst.BaseExpression | None] | LoopRefusal:
        """The pointer and mask of the tile load `call` of `name`, or why a pipelined copy cannot make it."""
        pointer = next((a.value for a in call.args if a.keyword is None), None)
        mask = other = None
        for a in call.args:
            if a.keyword is None:
                continue
            if a.keyword.value == "mask":
                mask = a.value
            elif a.keyword.value == "other":
                other = a.value
            elif a.keyword.value in ("cache_modifier", "eviction_policy") and isinstance(a.value, cst.SimpleString) \
                    and a.value.evaluated_value in (".cg", ".ca", "", "evict_last", "evict_first", "evict_normal"):
                continue  # (a caching hint: the ring's 16-byte cp.async copies keep their own, through L2)
            else:
                return refuse(a, f"`{a.keyword.value}=` on the load of `{name}` (cp.async copies "
                              "take a mask only)")
        if pointer is None or len([a for a in call.args if a.keyword is None]) != 1:
            return refuse(call, f"the load of `{name}` passes more than a pointer positionally")
        if other is not None and not _is_zero(source, other):
            return refuse(other, f"the load of `{name}` fills masked elements with a non-zero "
                          "`other` (cp.async fills them with zeros)")
        return pointer, mask

    def computed_tile(operand: cst.Name, what: str, statement: cst.BaseStatement, dot: int, transposed: bool
                      ) -> TileLoad | LoopRefusal:
        """The tile load a dot operand is computed from in the iteration (a cast, a dequantisation of a KV cache):
        one 2-D pointer tile, the computation in simple statements before the dot that read nothing of the softmax,
        and neither the tile nor what the computation binds read anywhere else."""
        found = computed_from(source, plan, body, dot, operand)
        if isinstance(found, LoopRefusal):
            return refuse(found.node, found.reason)
        if found is None or found.descriptor or found.pointer is None:
            return refuse(statement, f"{what} `{operand.value}` is not a `tl.load` of a pointer tile, nor computed "
                          "from one")
        checked = load_form(found.call, found.name)
        if isinstance(checked, LoopRefusal):
            return checked
        prep = tuple(j for j in found.prep if j < dot)
        if len(prep) != len(found.prep) or not prep:
            return refuse(statement, f"{what} `{operand.value}` is not computed from its tile before the dot")
        bound = {found.name} | {n for j in prep for n in _assigned(body[j])}
        inside = {found.index, *prep, dot}
        for j, other in enumerate(body):
            if j not in inside and tile_reads(other) & bound:
                return refuse(other, f"`{sorted(tile_reads(other) & bound)[0]}`, which {what} is computed from, is "
                              "used outside that computation and its dot")
        return TileLoad(found.index, found.name, found.call, checked[0], checked[1], computed=True, prep=prep,
                        computed_as=operand.value if transposed else "")

    k_operand = _transposed(source, site1.b)
    shared = _shared_v(source, body, i2, site2.b, k_operand if k_operand is not None else site1.b,
                       k_operand is not None) if in_order else None
    k = tile_load(k_operand if k_operand is not None else site1.b, "the first dot's B operand", shared, i1,
                  k_operand is not None)
    if isinstance(k, LoopRefusal):
        return k
    v = k if shared is not None else tile_load(site2.b, "the second dot's B operand", dot=i2)
    if isinstance(v, LoopRefusal):
        return v
    if not isinstance(site1.a, cst.Name) or any(site1.a.value in _assigned(s) for s in body):
        return refuse(site1.a, "the first dot's A operand is not a tensor defined before the loop (it is staged in "
                      "shared memory once)")
    if k.index > i1:
        return refuse(body[k.index], "the K tile is loaded after the first dot")
    summed: list[SummedScores] = []
    for index, statement in extra:
        call = next(c for c in calls_in(statement) if c in plan.dots)
        site = plan.dots[call]
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
            else None
        assigned = single_assign(statement)
        folded = assigned is not None and assigned == (scores, call) and isinstance(site.acc, cst.Name) \
            and site.acc.value == scores
        added = isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign) \
            and isinstance(small.target, cst.Name) and small.target.value == scores and small.value is call \
            and site.acc is None
        if not (folded or added) or site.scaled is not None:
            return refuse(call, f"a dot between the scores and the second dot is not `{scores} += tl.dot(q, k)`: "
                          "scores summed from several products are taken, nothing else")
        if not isinstance(site.a, cst.Name) or any(site.a.value in _assigned(s) for s in body):
            return refuse(site.a, f"the A operand of a product added to `{scores}` is not a tensor defined before the "
                          "loop")
        operand = _transposed(source, site.b)
        tile = tile_load(operand if operand is not None else site.b, f"the B operand of a product added to `{scores}`")
        if isinstance(tile, LoopRefusal):
            return tile
        if tile.index > index:
            return refuse(body[tile.index], "a K tile is loaded after its dot")
        summed.append(SummedScores(index, site.a.value, tile, operand is not None, folded))
    if v.index > i2:
        return refuse(body[v.index], "the V tile is loaded after the second dot")

    # The softmax: values derived from the scores, a reduction of them, the second dot's A operand among them.
    derived = {scores}
    reduced = False
    for statement in body[i1 + 1:i2]:
        if names_in(statement) & derived:
            for call in calls_in(statement):
                lang = language_name(source.qualified_name(call.func)) or ""
                method = call.func.attr.value if isinstance(call.func, cst.Attribute) else ""
                if (lang.rsplit(".", 1)[-1] in REDUCTIONS or method in REDUCTIONS) and names_in(call) & derived:
                    reduced = True
            derived |= _assigned(statement)
    if not reduced:
        return refuse(call1, f"`{scores}` feeds no reduction (tl.max/tl.sum) before the second dot: not the "
                      "online-softmax shape")
    # (a computation may run a stage early, for the next iteration: it reads its tile and values from before the loop)
    in_loop = {name for statement in body for name in _assigned(statement)} | {loop.target.value}
    for tile in (k, v):
        own = {tile.name} | {name for j in tile.prep for name in _assigned(body[j])}
        for j in tile.prep:
            late = sorted((tile_reads(body[j]) & in_loop) - own)
            if late:
                return refuse(body[j], f"the tile `{tile.name}` is computed with `{late[0]}`, which the loop assigns "
                              "(a computed K or V reads its tile and values from before the loop)")
    if not (names_in(site2.a) & derived):
        return refuse(site2.a, f"the second dot's A operand is not computed from `{scores}`")

    # The accumulator: read only by the second dot and by `acc = acc * ...` rescales between the dots.
    rescales: list[int] = []
    for i, statement in enumerate(body):
        if i == i2 or acc not in names_in(statement):
            continue
        if i1 < i < i2 and _rescale(statement, acc):
            rescales.append(i)
            continue
        return refuse(statement, f"`{acc}` is used here; in the pipelined loop it is available only after the "
                      "second dot's wgmma is waited for, where the `acc = acc * ...` rescales go")
    if any(scores in names_in(s) for s in body[i2 + 1:]) or \
            any(scores in names_in(s) for i, s in enumerate(body[:i1]) if i != zeroed):
        return refuse(s1, f"`{scores}` is used outside the softmax between the two dots")

    # The producer slice: statements the load addresses and masks need, transitively, within the loop.
    assigned_at: dict[str, int] = {}
    for i, statement in enumerate(body):
        for name in _assigned(statement):
            assigned_at.setdefault(name, i)
    needed: set[str] = set()
    tiles = [k, *(extra.k for extra in summed), v]
    for load in tiles:
        needed |= read_names(load.pointer) | (read_names(load.mask) if load.mask is not None else set())
    producer: set[int] = set()
    carried_state: set[str] = set()
    frontier = set(needed)
    while frontier:
        name = frontier.pop()
        i = assigned_at.get(name)
        if i is None or i in producer:
            continue
        statement = body[i]
        if not isinstance(statement, cst.SimpleStatementLine) or i in (
                *(t.index for t in tiles), i1, i2, *(extra.index for extra in summed)):
            return refuse(statement, "a load address depends on control flow or on a dot in the loop")
        # (an address computed after a load is taken in order, where nothing before it reads what it binds: it is
        # then this iteration's value, not one carried from the previous iteration, `k_ptrs += BLOCK_N * stride`)
        # (the names read: a keyword argument, `mask=`, is not a read of a variable `mask`)
        carried = any(_assigned(statement) & read_names(earlier) for earlier in body[:i])
        if (i > min(t.index for t in tiles) and carried) or (
                read_names(statement) & ({acc} | derived)):
            return refuse(statement, "a load address depends on a value computed after the loads or on the softmax")
        # (`idx_ptr = idx_ptr + stride`; not the loop variable, which the loop binds afresh: `start_n =
        # tl.multiple_of(start_n, BLOCK_N)`)
        advanced = _assigned(statement) - {loop.target.value}
        if advanced and (carried or _assigned(statement) & statement_reads(statement)):
            if not in_order:
                return refuse(statement, "a load address is advanced from the last iteration's value (the ring "
                              "computes each iteration's addresses from the loop variable)")
            carried_state |= advanced
        producer.add(i)
        frontier |= read_names(statement) - needed
        needed |= read_names(statement)
    inside = set(assigned_at) | {loop.target.value}
    invariants = sorted(needed - inside)
    return AttentionPlan(loop, loop.target.value, range_args, stages, site1.a.value, k, k_operand is not None, v,
                         scores, i1, acc, i2, site2.a, sorted(producer), rescales, invariants, scale, summed=summed,
                         shared_v=shared, pv_rescale=rescale_factor(site2.acc, acc),
                         carried=sorted(carried_state, key=lambda n: assigned_at[n]))


def rescale_factor(node: cst.BaseExpression | None, acc: str) -> cst.BaseExpression | None:
    """`x` of an accumulator rescaled in the dot, `acc * x` or `x * acc` (`rescaled`); None for `acc` itself."""
    if not rescaled(node, acc):
        return None
    assert isinstance(node, cst.BinaryOperation)
    return node.right if isinstance(node.left, cst.Name) and node.left.value == acc else node.left


def _rescale(statement: cst.BaseStatement, acc: str) -> bool:
    """`statement` rescales the accumulator: ``acc = acc * alpha[:, None]`` (a product on a line of its own) or its
    augmented spelling ``acc *= alpha[:, None]``, with a factor that does not read `acc`."""
    assigned = single_assign(statement)
    if assigned is not None:
        return assigned[0] == acc and isinstance(assigned[1], cst.BinaryOperation) \
            and isinstance(assigned[1].operator, cst.Multiply)
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
        return False
    small = statement.body[0]
    return isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.MultiplyAssign) \
        and isinstance(small.target, cst.Name) and small.target.value == acc and acc not in names_in(small.value)


def as_loop_plan(att: AttentionPlan, plan: LayoutPlan) -> LoopPlan:
    """The attention loop as a pipelining plan of tile loads and dot chains, the form the AMD expander takes for
    every loop: K and V are the ring operands; the first dot is fresh (its scores start from zero each iteration)
    and reads the loop-invariant Q from registers; the second reads the probabilities from registers and carries
    the accumulator. The producer carries only state advanced before the loads (`AttentionPlan.carried`: an address
    advanced after its load is refused by the attention plan; `transpile.passes.induction` reads such addresses from
    the loop variable first)."""
    body = loop_body(att.loop)

    def load(tile: TileLoad, transposed: bool) -> OperandLoad:
        other = next((a.value for a in tile.call.args if a.keyword is not None and a.keyword.value == "other"), None)
        return OperandLoad(tile.index, tile.name, "", tile.call, tile.pointer, tile.mask, other, transposed=transposed,
                           computed=tile.computed, prep=tile.prep, computed_as=tile.computed_as)

    def dot(index: int) -> cst.Call:
        return next(c for c in calls_in(body[index]) if c in plan.dots)

    p = " ".join(cst.Module([]).code_for_node(att.p).split())
    shared = att.shared_v is not None
    chains = [DotChain(att.scores_index, att.scores, False, (att.q, att.k.name), dot(att.scores_index), fresh=True,
                       transposed=(False, att.k_transposed) if shared else (False, False)),
              *(DotChain(extra.index, att.scores, extra.acc_in_dot, (extra.q, extra.k.name), dot(extra.index),
                         ) for extra in att.summed),
              DotChain(att.acc_index, att.acc, True, (p, att.v.name), dot(att.acc_index),
                       transposed=(False, not att.k_transposed) if shared else (False, False))]
    k = load(att.k, att.k_transposed)
    # (V the K tile itself: one ring, its slot read once in each form, `OperandLoad.twice`)
    k.twice = shared
    return LoopPlan(att.loop, att.var, att.range_args, att.num_stages,
                    [k, *(load(extra.k, extra.k_transposed) for extra in att.summed),
                     *([] if shared else [load(att.v, False)])], att.scores_index, att.acc, list(att.producer),
                    list(att.carried),
                    chains, attention=True)


#: What a scalar factor of the scores may be made of (`tl.dot(q, k) * (sm_scale * LOG2E)`): names, numbers and
#: arithmetic, no call and no subscript
SCALAR_FACTOR_NODES = (cst.Name, cst.Integer, cst.Float, cst.BinaryOperation, cst.LeftParen, cst.RightParen,
                       cst.BaseBinaryOp, cst.SimpleWhitespace, cst.ParenthesizedWhitespace, cst.Newline,
                       cst.TrailingWhitespace, cst.EmptyLine, cst.Comment)


def _scale_of(value: cst.BaseExpression, call: cst.Call, body: list[cst.BaseStatement], plan: LayoutPlan
              ) -> tuple[cst.BaseExpression, bool] | None:
    """`value` is `call * scale` or `scale * call` with `scale` a scalar the loop does not change (names, numbers and
    arithmetic, no tensor, nothing bound in the loop): (scale, whether it is on the left), else None. A chain of
    such factors after the dot, `tl.dot(q, k) * scale * RCP_LN2` (flash-linear-attention), is `(dot * scale) *
    RCP_LN2`: its scale is `scale * RCP_LN2` as a node of its own, which `scores * <scale>` writes back in the
    source's order (the products are made one after the other, as the source makes them)."""
    if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply)):
        return None
    if value.right is call:
        scale, left = value.left, True
    else:
        factors = []
        node: cst.BaseExpression = value
        while node is not call and isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply) \
                and not node.lpar:
            factors.append(node.right)
            node = node.left
        if node is not call or not factors:
            return None
        factors.reverse()
        scale, left = factors[0], False
        for factor in factors[1:]:
            scale = cst.BinaryOperation(scale, cst.Multiply(whitespace_before=cst.SimpleWhitespace(" "),
                                                            whitespace_after=cst.SimpleWhitespace(" ")), factor)
    names = read_names(scale)
    if not only_nodes(scale, SCALAR_FACTOR_NODES) or names & bound_names_of(body) or names & set(name_terms(plan)):
        return None
    return scale, left


def _shared_v(source: SourceFile, body: list[cst.BaseStatement], before: int, operand: cst.BaseExpression,
              k: cst.BaseExpression, k_transposed: bool) -> int | None:
    """The index of the statement that binds the second dot's B operand `operand` to the K tile `k` itself, read in
    the other orientation (``v = tl.trans(kv)`` where the scores read `kv`; ``v = kv`` where they read
    ``tl.trans(kv)``), bound once, before the dot at `before`; `before` itself where the dot reads it so
    (``tl.dot(p, tl.trans(kv))``); else None."""
    if not isinstance(k, cst.Name):
        return None
    if not isinstance(operand, cst.Name) or (k_transposed and operand.value == k.value):
        # written in the dot itself, `tl.dot(p, tl.trans(kv))` (or `tl.dot(p, kv)` where the scores read
        # `tl.trans(kv)`): the index is the dot's own statement
        read = operand if k_transposed else _transposed(source, operand)
        return before if isinstance(read, cst.Name) and read.value == k.value else None
    found = [i for i, statement in enumerate(body) if operand.value in assigned_names(statement)]
    if len(found) != 1 or found[0] >= before:
        return None
    assigned = single_assign(body[found[0]])
    if assigned is None:
        return None
    value = assigned[1]
    read = value if k_transposed else _transposed(source, value)
    return found[0] if isinstance(read, cst.Name) and read.value == k.value else None


def _smalls(statement: cst.CSTNode) -> list[cst.CSTNode]:
    found: list[cst.CSTNode] = []

    class _Smalls(cst.CSTVisitor):
        def visit_Break(self, node: cst.Break) -> None:
            found.append(node)

        def visit_Continue(self, node: cst.Continue) -> None:
            found.append(node)

        def visit_Return(self, node: cst.Return) -> None:
            found.append(node)

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

    statement.visit(_Smalls())
    return found


def trip_count_axis(source: SourceFile, function: cst.FunctionDef, loop: cst.For) -> int | None:
    """The grid axis whose program index bounds the trip count of `loop` (a causal attention loop whose key blocks
    end at its query block: `for start_n in range(0, (start_m + 1) * BLOCK_M, BLOCK_N)`, `start_m =
    tl.program_id(0)`), read through the function's top-level assignments before the loop; None where no single
    axis does (a bound read from memory alone, several axes). Values loaded from memory are not followed: they are
    data, whatever program loads them."""
    if not isinstance(loop.iter, cst.Call) or not isinstance(function.body, cst.IndentedBlock):
        return None
    bound = [a.value for a in loop.iter.args if a.keyword is None]
    if not bound:
        return None
    needed = set().union(*(names_in(arg) for arg in bound[1:] or bound))
    definitions: dict[str, list[cst.BaseExpression]] = {}
    for statement in function.body.body:
        if statement is loop:
            break
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                        and isinstance(small.targets[0].target, cst.Name):
                    definitions.setdefault(small.targets[0].target.value, []).append(small.value)
    axes: set[int] = set()
    seen: set[str] = set()
    while needed:
        name = needed.pop()
        if name in seen:
            continue
        seen.add(name)
        for value in definitions.get(name, []):
            if any(language_name(source.qualified_name(call.func)) in ("load", "core.load") for call in calls_in(value)):
                continue  # a value read from memory (a prompt's length): data, not the grid's shape
            for call in calls_in(value):
                if language_name(source.qualified_name(call.func)) == "program_id" and call.args \
                        and isinstance(call.args[0].value, cst.Integer):
                    axes.add(int(call.args[0].value.value))
            needed |= names_in(value) - seen
    return axes.pop() if len(axes) == 1 else None


class _SwapAxes(cst.CSTTransformer):
    """``v[:, None]`` <-> ``v[None, :]``: a 2-D broadcast expression read transposed."""

    def leave_Subscript(self, original_node: cst.Subscript, updated_node: cst.Subscript) -> cst.Subscript:
        if broadcast_axis(updated_node) is None:
            return updated_node
        first, second = updated_node.slice
        return updated_node.with_changes(slice=[first.with_changes(slice=second.slice),
                                                second.with_changes(slice=first.slice)])


def swapped_axes(node: cst.BaseExpression | None) -> cst.BaseExpression | None:
    return None if node is None else node.visit(_SwapAxes())  # type: ignore[return-value]


def transposed_k(plan: AttentionPlan, function: cst.FunctionDef, layouts: LayoutPlan, ring: str,
                 loop_names: bool = False) -> AttentionPlan | LoopRefusal:
    """The plan of a loop whose K tile is loaded as [HEAD_DIM, BLOCK_N] (``tl.dot(q, k)``), read as if it were loaded
    [BLOCK_N, HEAD_DIM] and transposed: its address and mask with every ``v[:, None]`` and ``v[None, :]`` swapped, and
    so are the definitions of the 2-D names they read (`AttentionPlan.k_definitions`). Refused where that is not the
    same tile transposed: a subscript other than those two broadcasts, a 2-D name not defined once by arithmetic on
    1-D vectors and scalars before the loop, or one the V addresses read too. `ring`: what copies K, for the
    refusal. `loop_names`: also a 2-D name the loop binds before the K load (its definition is then the loop's; the
    caller rewrites it where it is bound, `transpile.passes.transposed_keys`, or, where other statements read it too,
    writes its swapped definition into the load: `AttentionPlan.k_inline`)."""
    terms = name_terms(layouts)
    definitions, counts = top_definitions(function)
    v_names = set().union(*(names_in(n) for n in (plan.v.pointer, plan.v.mask) if n is not None)) \
        if plan.shared_v is None else set()  # (V the K tile itself: transposed with it)
    body = loop_body(plan.loop)
    bound_in_loop = set().union(*(assigned_names(body[i]) for i in plan.producer))
    # 2-D names the loop binds once, before the K load, from names bound once too (a paged kernel's `off_k =
    # kv_loc[None, :] * stride + offs_d[:, None]`, `kv_loc` loaded from its page table in the iteration): read at the
    # load, their swapped definitions give the same tile transposed
    in_loop: dict[str, cst.BaseExpression] = {}
    for i in plan.producer:
        assigned = single_assign(body[i])
        if loop_names and assigned is not None and i < plan.k.index and (
                counts.get(assigned[0], 0) == 1 or loop_local(function, assigned[0])):
            in_loop[assigned[0]] = assigned[1]
    swapped: dict[str, cst.BaseExpression] = {}
    settled_names: set[str] = set()
    inline: set[str] = set()

    def refuse(node: cst.CSTNode, why: str) -> LoopRefusal:
        return LoopRefusal(node, "attention loop: the K tile is loaded as [HEAD_DIM, BLOCK_N] (keys along its "
                           f"columns), which {ring} copies through its transposed addresses; {why}")

    pending = [n for n in (plan.k.pointer, plan.k.mask) if n is not None]
    while pending:
        node = pending.pop()
        if not elementwise(_scalar_calls_named(node, terms)):
            return refuse(node, "this address or mask is not arithmetic on index vectors and scalars")
        bad = next((sub for sub in subscripts(node) if broadcast_axis(sub) is None), None)
        if bad is not None:
            return refuse(bad, "this subscript is not `v[:, None]` or `v[None, :]`")
        for name in sorted(names_in(node)):
            term = terms.get(name)
            if term is not None and term.slice_of is not None and bare_use(node, name):
                return refuse(node, f"the 1-D `{name}` is broadcast here without a subscript")
            if term is None or term.slice_of is not None or term.find().rank == 1 or name in swapped:
                continue  # a scalar or a 1-D vector (the swapped broadcasts lay it along the other axis)
            definition = in_loop.get(name) if name in bound_in_loop else definitions.get(name)
            if name in bound_in_loop and sum(name in names_in(statement) for statement in body) != 2:
                if definition is not None and name not in v_names:
                    # (read elsewhere than by the K load: its swapped definition is written into the load, and the
                    # binding stays for the other readers)
                    inline.add(name)
                else:
                    definition = None
            settled = False
            if name not in bound_in_loop and (definition is None or counts.get(name, 0) != 1):
                # (bound before the loop in several lines or in a block around it: an inlined helper moves the
                # tile its caller made, `K_ptrs_1 = K_ptrs`, `K_ptrs_1 += lo * stride_kn`)
                definition = value_at_loop(function, plan.loop, name, counts)
                settled = definition is not None
                if settled:
                    settled_names |= {name} | names_in(definition)
            if definition is None or (counts.get(name, 0) != 1 and name not in in_loop and not settled) \
                    or name in v_names:
                return refuse(node, f"`{name}` is a 2-D tile it cannot re-evaluate transposed (it must be defined "
                              "once, before the loop or before the K load, and read by the K addresses only)")
            swapped[name] = swapped_axes(definition)  # type: ignore[assignment]
            pending.append(definition)
    k = dataclasses.replace(plan.k, pointer=swapped_axes(plan.k.pointer), mask=swapped_axes(plan.k.mask))
    return dataclasses.replace(plan, k=k, k_transposed=True, k_definitions=swapped, k_swapped=True,
                               k_settled=frozenset(settled_names), k_inline=frozenset(inline))


class _ScalarCalls(cst.CSTTransformer):
    """Each call that reads scalars only (`tl.cast(start_n, tl.int64)` in an induction's offset) named `_`: the same
    value in every element, whichever axis the tile's broadcasts lay along."""

    def __init__(self, terms: dict) -> None:
        super().__init__()
        self.terms = terms

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        for name in names_in(original_node):
            term = self.terms.get(name)
            if term is not None and (term.slice_of is not None or term.find().rank):
                return updated_node  # (reads a tensor)
        return cst.Name("_", lpar=updated_node.lpar, rpar=updated_node.rpar)


def _scalar_calls_named(node: cst.CSTNode, terms: dict) -> cst.CSTNode:
    return node.visit(_ScalarCalls(terms)) if calls_in(node) else node


def subscripts(node: cst.CSTNode) -> list[cst.Subscript]:
    return [n for n in preorder(node) if isinstance(n, cst.Subscript)]


def bare_use(node: cst.CSTNode, name: str) -> bool:
    """Whether `node` reads `name` other than subscripted."""
    bare = False

    class _Visit(cst.CSTVisitor):
        def visit_Subscript(self, sub: cst.Subscript) -> bool:
            return not (isinstance(sub.value, cst.Name) and sub.value.value == name)

        def visit_Name(self, n: cst.Name) -> None:
            nonlocal bare
            bare = bare or n.value == name

        def visit_Attribute(self, attribute: cst.Attribute) -> bool:
            attribute.value.visit(self)
            return False

    node.visit(_Visit())
    return bare


def loop_local(function: cst.FunctionDef, name: str) -> bool:
    """`name` is a temporary of loops: every loop body that binds it does so at its top level before any statement
    there reads it, and nothing outside those loops reads or binds it (the copies of one loop that unswitching or
    branch splitting made, each binding `off_k` for its own load: each copy's value is its own)."""
    loops, names = _loops_and_names(function)
    owners: list[cst.CSTNode] = []
    for node, _inside in loops:
        statements = list(node.body.body)
        first = next((i for i, st in enumerate(statements) if name in names_in(st) or name in assigned_names(st)),
                     None)
        if first is None:
            continue
        assigned = single_assign(statements[first])
        if assigned is None or assigned[0] != name or name in names_in(assigned[1]):
            continue
        if any(name in assigned_names(st) for st in statements[first + 1:]):
            continue
        owners.append(node)
    inside = set().union(*(names_inside for node, names_inside in loops if any(node is o for o in owners)))
    return bool(owners) and all(id(n) in inside for n in names.get(name, ()))


@functools.lru_cache(maxsize=8)
def _loops_and_names(function: cst.FunctionDef) -> tuple[list[tuple[cst.CSTNode, frozenset[int]]],
                                                         dict[str, list[cst.Name]]]:
    """The function's loops with an indented body, each with the ids of the Names inside it, and the function's
    Names by value (`loop_local` asks for many names of one function; a tree is never changed in place)."""
    loops = []
    names: dict[str, list[cst.Name]] = {}
    for node in preorder(function):
        if isinstance(node, cst.Name):
            names.setdefault(node.value, []).append(node)
        elif isinstance(node, (cst.For, cst.While)) and isinstance(node.body, cst.IndentedBlock):
            loops.append((node, frozenset(id(n) for n in preorder(node) if isinstance(n, cst.Name))))
    return loops, names


def loop_prefix(function: cst.FunctionDef, loop: cst.CSTNode) -> list[cst.BaseStatement]:
    """The statements that have run when `loop` starts, in order: in each block from the function's body down to the
    loop, those before the statement that holds the loop (compound ones whole)."""
    parents = parent_map(function)
    levels: list[list[cst.BaseStatement]] = []
    node: cst.CSTNode = loop
    while node is not function:
        parent = parents.get(node)
        if parent is None:
            return []
        if isinstance(parent, cst.IndentedBlock):
            statements = list(parent.body)
            levels.append(statements[:next(i for i, s in enumerate(statements) if s is node)])
        node = parent
    return [statement for level in reversed(levels) for statement in level]


def value_at_loop(function: cst.FunctionDef, loop: cst.CSTNode, name: str, counts: dict[str, int]
                  ) -> cst.BaseExpression | None:
    """The value `name` holds when `loop` starts, as one expression, where every binding of it is a line of the
    statements run before the loop (`loop_prefix`): the first `name = value`, the others `name += delta` (a pointer
    tile its caller made, moved by an inlined helper: `K_ptrs_1 = K_ptrs`, `K_ptrs_1 += lo * stride_kn`), and no
    name those read is bound again before the loop or in it (so the expression, evaluated at the loop, is that
    value). None otherwise."""
    prefix = loop_prefix(function, loop)
    lines = [(i, s) for i, s in enumerate(prefix) if name in assigned_names(s)]
    if not lines or len(lines) != counts.get(name, 0):
        return None
    value: cst.BaseExpression | None = None
    parts: list[tuple[int, cst.BaseExpression]] = []
    for i, statement in lines:
        assigned = single_assign(statement)
        if value is None:
            if assigned is None or name in names_in(assigned[1]):
                return None
            value = parenthesized(assigned[1])
            parts.append((i, assigned[1]))
            continue
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
            else None
        added = added_to(small)
        if added is None or added[0] != name or name in names_in(added[1]):
            return None
        value = cst.BinaryOperation(value, cst.Add(whitespace_before=cst.SimpleWhitespace(" "),
                                                   whitespace_after=cst.SimpleWhitespace(" ")), parenthesized(added[1]))
        parts.append((i, added[1]))
    in_loop = bound_names(loop)
    for i, part in parts:
        later = set().union(*(assigned_names(s) for s in prefix[i + 1:])) if i + 1 < len(prefix) else set()
        if names_in(part) & (later | in_loop):
            return None
    return value


def top_definitions(function: cst.FunctionDef) -> tuple[dict[str, cst.BaseExpression], dict[str, int]]:
    """`name = value` statements at the top level of `function`, and how often each name is bound anywhere in it."""
    definitions: dict[str, cst.BaseExpression] = {}
    for statement in function.body.body:  # type: ignore[union-attr]
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and \
                isinstance(statement.body[0], cst.Assign) and len(statement.body[0].targets) == 1 and \
                isinstance(statement.body[0].targets[0].target, cst.Name):
            definitions.setdefault(statement.body[0].targets[0].target.value, statement.body[0].value)
    counts: dict[str, int] = {}

    class _Bindings(cst.CSTVisitor):
        def _bind(self, target: cst.CSTNode) -> None:
            for bound in names_in(target):
                counts[bound] = counts.get(bound, 0) + 1

        def visit_Assign(self, node: cst.Assign) -> None:
            for target in node.targets:
                self._bind(target.target)

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            self._bind(node.target)

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            self._bind(node.target)

        def visit_For(self, node: cst.For) -> None:
            self._bind(node.target)

        def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
            self._bind(node.target)

    function.body.visit(_Bindings())
    return definitions, counts


def elementwise(node: cst.CSTNode) -> bool:
    """Only names, numbers, arithmetic, comparisons and `x[:, None]`-style subscripts (no calls, no attributes)."""
    allowed = (cst.Name, cst.Integer, cst.Float, cst.BinaryOperation, cst.UnaryOperation, cst.Comparison,
               cst.ComparisonTarget, cst.Subscript, cst.SubscriptElement, cst.Index, cst.Slice, cst.LeftParen,
               cst.RightParen, cst.LeftSquareBracket, cst.RightSquareBracket, cst.Comma, cst.Colon,
               cst.BaseBinaryOp, cst.BaseUnaryOp, cst.BaseCompOp, cst.MaybeSentinel, cst.ParenthesizedWhitespace,
               cst.SimpleWhitespace, cst.Newline, cst.EmptyLine, cst.Comment, cst.TrailingWhitespace)
    return only_nodes(node, allowed)
