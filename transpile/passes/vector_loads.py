"""Vectors loaded in a loop beside a 2-D tile: a layout of their own, converted, instead of one load per warp.

A matrix-vector product written without `tl.dot` loads a vector in every iteration of its loop and broadcasts it
against a 2-D tile::

    for k in range(0, K, BLOCK_K):
        rk = k + tl.arange(0, BLOCK_K)
        w = tl.load(W + rm[:, None] * stride_wm + rk[None, :], mask=...)
        x = tl.load(X + rk, mask=rk < K, other=0.0)
        acc += tl.sum(w * x[None, :], axis=1)

The layout analysis gives `rk`, and so `x`, the layout of the tile's columns: a slice of the tile's layout, which
every warp along the tile's rows holds in full, so every warp loads the whole vector again on every iteration.
Triton's compiler loads it once, spread over all the warps, and converts it to the slice (through shared memory). The
Gluon kernel as translated ran 0.47-0.85x its source on an H100 (fp32 and 16-bit alike); the same kernel with the
vector loaded in a blocked layout of its own and converted ran 1.02-1.27x (bench/RESULTS.md: sm90: kernels without a dot loop).

`own_layout_loads` finds such loads (`replicated_loads`) and writes their addresses, mask and `other` afresh from
the `arange`s they are computed from (`X + (k + tl.arange(0, BLOCK_K))`: Gluon then makes the index vector in the
new layout instead of converting a tensor of pointers), on the same lines; the layout analysis, told which loads
these are, gives each a blocked class of its own (`plain`, like a scan's operand) and converts it where it meets the
tile. A load whose addresses read anything else that is a tensor (a loaded index, a value computed by a call) is not
rewritten; `replicated_vector_load` then finds it, and the engine keeps its kernel as Triton.
"""

from __future__ import annotations

from typing import NamedTuple

import libcst as cst

from transpile import cst_walk
from transpile.cst_utils import (assigned_names, bindings, block_statements, broadcast_axis, calls_in, module_code,
                                 names_in, sum_terms)
from transpile.analysis.launch_alignment import _addresses
from transpile.discover import JitFunction, ModuleFacts, language_name
from transpile.source import SourceFile


def load_calls(facts: ModuleFacts, fn: JitFunction) -> list[cst.Call]:
    """`fn`'s `tl.load` calls in preorder (the indices `LayoutAnalysis.own_loads` names)."""
    return [call for call, _ in _addresses(facts, fn, {"load"})]


def _language(facts: ModuleFacts, call: cst.Call) -> str | None:
    lang = language_name(facts.source.qualified_name(call.func))
    return lang.rsplit(".", 1)[-1] if lang is not None else None


def _loops(statements) -> list[cst.For | cst.While]:  # noqa: ANN001 - the loop statements, nested ones too
    found: list[cst.For | cst.While] = []
    for statement in statements:
        if isinstance(statement, cst.BaseCompoundStatement) and not isinstance(statement, (cst.FunctionDef,
                                                                                            cst.ClassDef)):
            if isinstance(statement, (cst.For, cst.While)):
                found.append(statement)
            found += _loops(block_statements(statement))
            orelse = getattr(statement, "orelse", None)
            while orelse is not None:
                found += _loops(block_statements(orelse))
                orelse = getattr(orelse, "orelse", None)
    return found


def replicated_loads(facts: ModuleFacts, fn: JitFunction, plan) -> list[cst.Call]:  # noqa: ANN001 - LayoutPlan
    """The loads inside a loop of `fn` of a vector (rank 1) whose index vectors are all slices of a 2-D class."""
    return [call for call, _ in _replicated(facts, fn, plan)]


def _replicated(facts: ModuleFacts, fn: JitFunction, plan) -> list[tuple[cst.Call, _Reach]]:  # noqa: ANN001
    """`replicated_loads`, each with the definitions that reach it (`_reaching`)."""
    loops = _loops(fn.node.body.body)
    if not loops:
        return []
    in_loop = {id(call) for loop in loops for call in calls_in(loop.body)}
    candidates = [(c, pointer) for c, pointer in _addresses(facts, fn, {"load"}) if id(c) in in_loop]
    if not candidates:
        return []
    single, rebound = bindings(fn.node)
    found = []
    for call, pointer in candidates:
        # (the definitions that reach the load: those its loop makes before it too)
        reach = _reaching(loops, call, single, rebound)
        seen: set[str] = set()
        pending, aranges, rank2 = [pointer], [], False
        while pending:  # the address, through the names it is computed from
            node = pending.pop()
            if any(broadcast_axis(term) is not None for term in sum_terms(node)) or any(
                    isinstance(sub, cst.Subscript) for sub in cst_walk.preorder(node)):
                rank2 = True  # a tile's addresses (`rows[:, None]`), or something the test cannot follow
                break
            for inner in cst_walk.preorder(node):
                if isinstance(inner, cst.Call) and inner in plan.creations:
                    aranges.append(plan.creations[inner])
                elif isinstance(inner, cst.Name) and inner.value in reach.single and inner.value not in seen:
                    seen.add(inner.value)
                    pending.append(reach.single[inner.value])
        if rank2 or not aranges:
            continue
        roots = [term.find() for term in aranges]
        if all(root.rank == 1 and root.slice_of is not None and root.slice_of[1].find().rank == 2 for root in roots):
            found.append((call, reach))
    return found


def replicated_vector_load(facts: ModuleFacts, fn: JitFunction, plan) -> cst.Call | None:  # noqa: ANN001
    """The first of `replicated_loads` left in `fn` after `own_layout_loads` (its addresses read a tensor other than
    `arange`s), else None: every warp along the tile's other axis would load the whole vector again on every
    iteration, so the engine keeps such a kernel as Triton. Found once per file (the same for every target)."""
    key = ("replicated_loads", fn.name, id(plan))
    if key not in facts.memo:
        loads = replicated_loads(facts, fn, plan)
        facts.memo[key] = (plan, loads[0] if loads else None)  # (the plan kept alive: its id stays its own)
    return facts.memo[key][1]


class _Inline(cst.CSTTransformer):
    """Names computed from `arange`s replaced by their (parenthesised) definitions; `failed` where a definition reads
    a tensor made otherwise (a load, a call other than `arange`, a subscript)."""

    def __init__(self, facts: ModuleFacts, single: dict[str, cst.BaseExpression], rebound: set[str],
                 depth: int = 0, local: frozenset[str] = frozenset(), loop_rebound: frozenset[str] = frozenset(),
                 function_rebound: set[str] | None = None) -> None:
        super().__init__()
        self.facts, self.single, self.rebound, self.depth = facts, single, rebound, depth
        # (`local`: the names whose definitions the loop around the load makes; such a definition, moved to the load,
        # reads there what it reads where the loop makes it but for the names the loop binds, `loop_rebound`; a
        # definition made before the loop is checked against `function_rebound`)
        self.local, self.loop_rebound = local, loop_rebound
        self.function_rebound = rebound if function_rebound is None else function_rebound
        self.failed = False

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        definition = self.single.get(original.value)
        if definition is None or not self._made_from_aranges(definition, set()):
            if self.depth and original.value in self.rebound:
                # read by a definition moved to the load: a name bound again in between (`start += BLOCK_K` after
                # `rk = start + tl.arange(...)`) would read another value there
                self.failed = True
            return updated
        if self.depth > 8 or not self._inlinable(definition):
            self.failed = True
            return updated
        inner = _Inline(self.facts, self.single, set(self.loop_rebound) if original.value in self.local
                        else self.function_rebound, self.depth + 1, self.local, self.loop_rebound,
                        self.function_rebound)
        value = definition.visit(inner)
        self.failed |= inner.failed
        return value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])  # type: ignore[union-attr]

    def _made_from_aranges(self, node: cst.BaseExpression, seen: set[str]) -> bool:
        for inner in cst_walk.preorder(node):
            if isinstance(inner, cst.Call) and _language(self.facts, inner) == "arange":
                return True
            if isinstance(inner, cst.Name) and inner.value in self.single and inner.value not in seen:
                seen.add(inner.value)
                if self._made_from_aranges(self.single[inner.value], seen):
                    return True
        return False

    def _inlinable(self, node: cst.BaseExpression) -> bool:
        for inner in cst_walk.preorder(node):
            if isinstance(inner, cst.Call) and _language(self.facts, inner) not in ("arange", "multiple_of",
                                                                                     "max_contiguous"):
                return False
            if isinstance(inner, (cst.Subscript, cst.Lambda, cst.NamedExpr, cst.Await, cst.Yield)):
                return False
        return True


class _Reach(NamedTuple):
    """What `_reaching` finds for a load in a loop."""

    single: dict[str, cst.BaseExpression]  # the definitions that reach it
    rebound: set[str]  # the names a definition made before the loop may not read when moved to it
    local: frozenset[str]  # the names whose definitions the innermost loop around it makes before it
    loop_rebound: frozenset[str]  # the names such a definition may not read when moved to it (the loop binds them)


def _reaching(loops: list[cst.For | cst.While], call: cst.Call,
              single: dict[str, cst.BaseExpression], rebound: set[str]) -> _Reach:
    """The definitions that reach `call`, a load in a loop, and the names not to be read by a definition moved to it:
    the function's single definitions, and those of the innermost loop around the call that its body binds once, on a
    line of its own before the call's statement (`o_k = i_s + tl.arange(0, BS)`, bound again in a second loop of the
    kernel: bound twice in the function, once here). A name the loop binds otherwise (after the call, carried, twice)
    is neither. Also the loop's definitions, and the names a definition of the loop may not read when moved to the
    call (those the loop binds otherwise: a name bound before the loop, however often, holds one value in it)."""
    around = [lp for lp in loops if any(c is call for c in calls_in(lp.body))]  # (outermost first)
    none = _Reach(single, rebound, frozenset(), frozenset())
    if not around:
        return none
    loop = around[-1]
    statements = list(block_statements(loop))
    body_single, body_rebound = bindings(cst.FunctionDef(name=cst.Name("_"), params=cst.Parameters(),
                                                         body=loop.body))
    bound_here: set[str] = set()
    for statement in statements:
        bound_here |= assigned_names(statement)
    # (the lines before the call's statement, and in the block of an `if` that holds it, `if USE_G:`, the lines
    # before it there)
    before: set[str] = set()
    block = statements
    while True:
        at = next((i for i, st in enumerate(block) if any(c is call for c in calls_in(st))), None)
        if at is None:
            return none
        before |= set().union(*(assigned_names(st) for st in block[:at] if isinstance(st, cst.SimpleStatementLine)))
        if not isinstance(block[at], cst.If):
            break
        inner = [b for b in (block[at].body, getattr(block[at].orelse, "body", None))
                 if b is not None and any(c is call for c in calls_in(b))]
        if not inner or not isinstance(inner[0], cst.IndentedBlock):
            break
        block = list(inner[0].body)
    local = {name: value for name, value in body_single.items() if name in before}
    here = {name: value for name, value in single.items() if name not in bound_here}
    here.update(local)
    # (the loop variables of the loops around the call hold at the call what they hold at a definition in the loop)
    targets = {name for lp in around if isinstance(lp, cst.For) for name in names_in(lp.target)}
    in_loop = (body_rebound | bound_here) - set(local) - targets
    return _Reach(here, (rebound - set(local) - targets) | in_loop, frozenset(local), frozenset(in_loop))


def own_layout_loads(source: SourceFile, facts: ModuleFacts, plans: dict) -> tuple[str, dict[str, frozenset[int]]] | None:
    """The source with every replicated vector load's addresses, mask and `other` written from their `arange`s, and
    those loads per function (indices among its loads), for `analyse_layouts(..., own_loads=)`; None where none."""
    replacements: dict[cst.Call, cst.Call] = {}
    own: dict[str, frozenset[int]] = {}
    for fn in facts.functions.values():
        plan = plans.get(fn.name)
        if plan is None:
            continue
        flagged = _replicated(facts, fn, plan)
        if not flagged:
            continue
        loads = load_calls(facts, fn)
        indices = set()
        for call, reach in flagged:
            inline = _Inline(facts, reach.single, reach.rebound, local=reach.local, loop_rebound=reach.loop_rebound)
            new = call.with_changes(args=[a.with_changes(value=a.value.visit(inline))
                                          if a.keyword is None or a.keyword.value in ("pointer", "mask", "other")
                                          else a for a in call.args])
            if inline.failed:
                continue
            old_text, new_text = source.code(call), cst.Module(body=[]).code_for_node(new)
            if new_text.count("\n") != old_text.count("\n"):  # (the rewrite keeps every line where it was)
                continue
            replacements[call] = new
            indices.add(loads.index(call))
        if indices:
            own[fn.name] = frozenset(indices)
    if not replacements:
        return None

    class Replace(cst.CSTTransformer):
        def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
            return replacements.get(original, updated)

    changed = {facts.functions[name].node for name in own}  # (only these top-level statements are rebuilt)
    module = source.module
    return module_code(module.with_changes(body=[cst_walk.transform(s, Replace()) if s in changed else s
                                                 for s in module.body])), own
