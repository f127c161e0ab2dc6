"""Main-loop facts for software pipelining: which statements produce the MMA operands, which consume them.

For a loop ``for k in range(lo, hi[, step])`` of a jit function, `plan_loop` finds the dot (``acc = tl.dot(a, b,
acc)``), the tile loads that produce its operands, and the *producer slice*: the loop statements those loads'
addresses depend on (``off_k = k * BLOCK_K``). Everything else is the consumer. The plan is pure facts; a target's
pipeline rule turns it into a ring of shared-memory buffers filled ahead of use. When a loop cannot be pipelined
the result is a `LoopRefusal` with the reason and the node to point at; the loop then stays as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from transpile.analysis.layouts import LayoutPlan
from transpile.cst_utils import assigned_names, calls_in, names_in
from transpile.discover import language_name
from transpile.source import SourceFile


@dataclass
class OperandLoad:
    index: int  # statement index in the loop body
    name: str  # the variable the tile is bound to
    descriptor: str  # the descriptor variable it is loaded through
    call: cst.Call = field(repr=False)


@dataclass
class LoopPlan:
    loop: cst.For = field(repr=False)
    var: str
    range_args: list[cst.BaseExpression] = field(repr=False)
    num_stages: int
    loads: list[OperandLoad]  # A then B
    dot_index: int
    acc: str
    producer: list[int]  # statement indices the loads' coordinates depend on (pure scalar statements)


@dataclass
class LoopRefusal:
    node: cst.CSTNode
    reason: str


def plan_loop(source: SourceFile, loop: cst.For, plan: LayoutPlan, default_stages: int) -> LoopPlan | LoopRefusal | None:
    """The pipelining plan of `loop`, a refusal, or None when the loop has no dot fed by tile loads."""
    body = loop.body.body if isinstance(loop.body, cst.IndentedBlock) else []
    dots = [(i, s) for i, s in enumerate(body) if any(call in plan.dots for call in calls_in(s))]
    loads = {i: s for i, s in enumerate(body)
             if any(plan.descriptor_ops.get(c, ("",))[0] == "load" for c in calls_in(s))}
    if not dots or not loads:
        return None
    if len(dots) != 1:
        return LoopRefusal(dots[1][1], "more than one `tl.dot` in the loop (one accumulator chain is pipelined)")
    dot_index, dot_statement = dots[0]
    # The loop header: `for k in range(...)` or `tl.range(...)`.
    if not isinstance(loop.target, cst.Name) or not isinstance(loop.iter, cst.Call):
        return LoopRefusal(loop, "the loop is not `for <name> in range(...)`")
    lang = language_name(source.qualified_name(loop.iter.func))
    is_range = (isinstance(loop.iter.func, cst.Name) and loop.iter.func.value == "range") or lang in ("range",)
    if not is_range:
        return LoopRefusal(loop.iter, "the loop does not iterate over `range`/`tl.range`")
    range_args = [a.value for a in loop.iter.args if a.keyword is None]
    stages = default_stages
    for a in loop.iter.args:
        if a.keyword is not None and a.keyword.value == "num_stages":
            try:
                stages = int(source.code(a.value).strip())
            except ValueError:
                return LoopRefusal(a.value, "`num_stages` must be an integer literal")
    stages = max(stages, 2)
    for statement in body:
        if isinstance(statement, (cst.For, cst.While)):
            return LoopRefusal(statement, "a loop inside the main loop")
        if not isinstance(statement, cst.SimpleStatementLine):
            return LoopRefusal(statement, "control flow inside the main loop (if/with)")
        for small in statement.body:
            if isinstance(small, (cst.Break, cst.Continue, cst.Return)):
                return LoopRefusal(small, "data-dependent exit from the main loop")
    # The dot: `acc = tl.dot(a, b, acc)` with operands bound by tile loads in this loop.
    dot_call = next(c for c in calls_in(dot_statement) if c in plan.dots)
    site = plan.dots[dot_call]
    small = dot_statement.body[0] if isinstance(dot_statement, cst.SimpleStatementLine) else None
    if not (isinstance(small, cst.Assign) and small.value is dot_call and isinstance(small.targets[0].target, cst.Name)
            and isinstance(site.acc, cst.Name) and site.acc.value == small.targets[0].target.value):
        return LoopRefusal(dot_call, "the dot is not `acc = tl.dot(a, b, acc)` with a loop-carried accumulator")
    acc = site.acc.value
    operands: list[OperandLoad] = []
    for operand in (site.a, site.b):
        if not isinstance(operand, cst.Name):
            return LoopRefusal(operand, "a dot operand is an expression, not a loaded tile (it would need registers)")
        found = None
        for i, statement in loads.items():
            if assigned_names(statement) == {operand.value} and isinstance(statement.body[0], cst.Assign):  # type: ignore[union-attr]
                call = statement.body[0].value  # type: ignore[union-attr]
                op = plan.descriptor_ops.get(call) if isinstance(call, cst.Call) else None
                if op is not None and op[0] == "load" and isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name):  # type: ignore[union-attr]
                    found = OperandLoad(i, operand.value, call.func.value.value, call)  # type: ignore[union-attr]
        if found is None:
            return LoopRefusal(operand, f"the dot operand `{operand.value}` is not a tensor-descriptor tile load in "
                               "this loop")
        uses = sum(operand.value in names_in(s) for j, s in enumerate(body) if j not in (found.index,))
        if uses != 1:
            return LoopRefusal(operand, f"`{operand.value}` is used outside the dot; the pipelined wgmma reads it "
                               "straight from shared memory")
        operands.append(found)
    # The producer slice: statements the load coordinates need, transitively, within the loop.
    assigned_at = {name: i for i, s in enumerate(body) for name in assigned_names(s)}
    needed: set[str] = set()
    for load in operands:
        needed |= names_in(load.call.args[0].value) if load.call.args else set()
    producer: set[int] = set()
    frontier = set(needed)
    while frontier:
        name = frontier.pop()
        i = assigned_at.get(name)
        if i is None or i in producer:
            continue
        if i >= min(o.index for o in operands) and i not in [o.index for o in operands]:
            return LoopRefusal(body[i], "a load address depends on a value computed after the loads")
        if acc in names_in(body[i]) or i == dot_index:
            return LoopRefusal(body[i], "a load depends on this iteration's MMA result")
        producer.add(i)
        frontier |= names_in(body[i]) - needed
        needed |= names_in(body[i])
    if acc in needed:
        return LoopRefusal(dot_call, "a load depends on the accumulator")
    return LoopPlan(loop, loop.target.value, range_args, stages, operands, dot_index, acc, sorted(producer))

