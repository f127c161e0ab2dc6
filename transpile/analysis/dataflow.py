"""Statement-level facts of a loop body: def-use chains, loop-carried values, memory effects, barrier-needing ops.

`loop_dataflow(source, loop, plan)` reads one ``for`` loop of a jit function (the source tree, never edited) and
returns a `LoopDataflow`: per statement of the body, the names it defines and uses, for each use where the value
comes from (an earlier statement of the same iteration, the previous iteration, or outside the loop), its memory
effects (global load, global store, atomic, shared-memory traffic of the MMA operands) and the operations in it
that need a CTA-wide barrier on the layouts the kernel gets (cross-warp reductions, scans, layout conversions).
The stage planner (`transpile.analysis.stages`) cuts the loop where these facts allow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import libcst as cst

from transpile.analysis.layouts import BARRIER_REDUCTIONS, LayoutPlan
from transpile.analysis.pipeline import loop_body
from transpile.cst_utils import assigned_names, calls_in, names_in, per_loop
from transpile.discover import language_name
from transpile.source import SourceFile

SCANS = {"cumsum", "cumprod", "associative_scan", "sort", "histogram", "gather"}
ATOMICS_PREFIX = "atomic_"


class Effect(str, Enum):
    GLOBAL_LOAD = "global load"
    GLOBAL_STORE = "global store"
    ATOMIC = "atomic"
    SHARED = "shared memory (MMA operands)"


@dataclass(frozen=True)
class Use:
    """Where the value of `name` read by a statement comes from."""

    name: str
    source: str  # "iteration" (an earlier statement), "carried" (the previous iteration), "loop" (its variable), "outside"
    statement: int | None  # the defining statement's index (None: outside the loop)


@dataclass
class StatementFacts:
    index: int
    line: int
    node: cst.BaseStatement = field(repr=False)
    defines: set[str]
    uses: list[Use]
    effects: set[Effect]
    barriers: list[tuple[cst.CSTNode, str]] = field(repr=False)  # (node, what), e.g. "reduction `tl.max`"
    nested_loop: bool = False
    exits: bool = False  # break / continue / return


@dataclass
class LoopDataflow:
    statements: list[StatementFacts]
    carried: list[str]  # names read before this iteration assigns them, and assigned in the body

    def defining(self, index: int) -> set[int]:
        """Statements (same iteration or carried) whose values statement `index` reads."""
        return {u.statement for u in self.statements[index].uses if u.statement is not None}

    def slice_of(self, indices: set[int]) -> set[int]:
        """`indices` and every statement of this iteration they depend on, transitively (carried edges excluded)."""
        result, frontier = set(), list(indices)
        while frontier:
            i = frontier.pop()
            if i in result:
                continue
            result.add(i)
            frontier += [u.statement for u in self.statements[i].uses if u.source == "iteration"]
        return result


def _barrier_ops(source: SourceFile, plan: LayoutPlan, node: cst.CSTNode, assigned: set[str]
                 ) -> list[tuple[cst.CSTNode, str]]:
    found: list[tuple[cst.CSTNode, str]] = []
    for call in calls_in(node):
        lang = language_name(source.qualified_name(call.func))
        method = call.func.attr.value if isinstance(call.func, cst.Attribute) else None
        if lang in BARRIER_REDUCTIONS or (lang is None and method in BARRIER_REDUCTIONS
                                          and call not in plan.descriptor_ops):
            found.append((call, f"reduction `tl.{lang or method}`"))
        elif lang in SCANS or (lang is None and method in SCANS):
            found.append((call, f"scan `tl.{lang or method}`"))
        elif lang in ("trans", "permute") or call in plan.transposes:
            found.append((call, "transpose (a layout conversion through shared memory)"))
    for converted in _walk(node):
        if converted in plan.converts:
            if isinstance(converted, cst.Name) and converted.value not in assigned:
                continue  # a loop-invariant value: the translation converts it once, where it is defined
            found.append((converted, "layout conversion"))
    return found


def _effects(source: SourceFile, plan: LayoutPlan, node: cst.CSTNode) -> set[Effect]:
    effects: set[Effect] = set()
    for call in calls_in(node):
        lang = language_name(source.qualified_name(call.func)) or ""
        op = plan.descriptor_ops.get(call)
        if lang in ("load", "core.load") or (op is not None and op[0] == "load"):
            effects.add(Effect.GLOBAL_LOAD)
        elif lang in ("store", "core.store") or (op is not None and op[0] == "store"):
            effects.add(Effect.GLOBAL_STORE)
        elif lang.startswith(ATOMICS_PREFIX):
            effects.add(Effect.ATOMIC)
        if call in plan.dots:
            effects.add(Effect.SHARED)
    return effects


@per_loop
def loop_dataflow(source: SourceFile, loop: cst.For | cst.While, plan: LayoutPlan) -> LoopDataflow:
    body = loop_body(loop)
    loop_vars = names_in(loop.target) if isinstance(loop, cst.For) else set()
    assigned: dict[str, list[int]] = {}
    for i, statement in enumerate(body):
        for name in _defines(statement):
            assigned.setdefault(name, []).append(i)
    statements: list[StatementFacts] = []
    carried: list[str] = []
    for i, statement in enumerate(body):
        reads = _reads(statement)
        uses: list[Use] = []
        for name in sorted(reads):
            if name in loop_vars:
                uses.append(Use(name, "loop", None))
                continue
            defs = assigned.get(name, [])
            earlier = [j for j in defs if j < i]
            if earlier:
                uses.append(Use(name, "iteration", earlier[-1]))
            elif defs:
                uses.append(Use(name, "carried", defs[-1]))
                if name not in carried:
                    carried.append(name)
            else:
                uses.append(Use(name, "outside", None))
        exits = any(isinstance(n, (cst.Break, cst.Continue, cst.Return)) for n in _walk(statement))
        statements.append(StatementFacts(
            index=i, line=source.position(statement)[0], node=statement, defines=_defines(statement), uses=uses,
            effects=_effects(source, plan, statement), barriers=_barrier_ops(source, plan, statement, set(assigned)),
            nested_loop=isinstance(statement, (cst.For, cst.While)), exits=exits,
        ))
    return LoopDataflow(statements, carried)


def _defines(statement: cst.BaseStatement) -> set[str]:
    if isinstance(statement, cst.SimpleStatementLine):
        return assigned_names(statement)
    names: set[str] = set()
    for node in _walk(statement):
        if isinstance(node, cst.SimpleStatementLine):
            names |= assigned_names(node)
    return names


def _reads(statement: cst.BaseStatement) -> set[str]:
    """Names a statement reads: every name, less the plain assignment targets (augmented targets are read too)."""
    names = names_in(statement)
    if isinstance(statement, cst.SimpleStatementLine):
        for small in statement.body:
            if isinstance(small, cst.Assign):
                rhs = names_in(small.value)
                for target in small.targets:
                    names -= names_in(target.target) - rhs
    return names


def _walk(node: cst.CSTNode) -> list[cst.CSTNode]:
    found: list[cst.CSTNode] = []

    class _All(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            found.append(n)
            return True

    node.visit(_All())
    return found
