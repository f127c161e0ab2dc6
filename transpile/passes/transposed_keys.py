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

import libcst as cst

from transpile.analysis.attention import (AttentionPlan, loop_local, plan_attention_loop, top_definitions,
                                          transposed_k)
from transpile.analysis.dot_loops import dot_loops
from transpile.analysis.layouts import LayoutPlan
from transpile.analysis.stages import not_elementwise
from transpile.cst_utils import assigned_names, bound_names, calls_in, names_in, single_assign, substituted
from transpile.discover import ModuleFacts, language_alias
from transpile.passes import Replace
from transpile.source import SourceFile


def transpose_key_tiles(source: SourceFile, facts: ModuleFacts, plans: dict[str, LayoutPlan]) -> str | None:
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
                continue
            body = list(loop.node.body.body)  # type: ignore[union-attr]
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
                outside = {n: d for n, d in view.k_definitions.items() if n not in in_loop}
                for statement in body:
                    assigned = single_assign(statement)
                    if assigned is not None and assigned[0] in view.k_definitions and assigned[0] in in_loop:
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
    body = list(loop.body.body)  # type: ignore[union-attr]
    before_load = set().union(*(assigned_names(s) for s in body[:view.k.index]))
    for name, definition in view.k_definitions.items():
        if name in params:
            return False
        for read in names_in(definition) - set(view.k_definitions):
            if read in view.k_settled:
                continue  # (its value when the loop starts, which the definition reads: `value_at_loop`)
            if read in in_loop and read in before_load and loop_local(function, read):
                continue  # (bound before the load in each copy of the loop that binds it: this copy's value)
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
