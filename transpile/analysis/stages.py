"""Stage plans for AMD warp pipelining: which statements of a main loop run in which stage, with which waits.

`plan_stages(source, fn, loop, plan, target)` combines the loop's pipelining facts (`transpile.analysis.pipeline`:
the dot, the tile loads feeding it, the producer slice) with its dataflow (`transpile.analysis.dataflow`: effects,
loop-carried values, ops that need a CTA-wide barrier) into a `StagePlan`:

- a ring of shared-memory (LDS) slots per operand, ``slots`` deep, filled ``distance`` iterations ahead of use;
- ordered stages, each a ``with gl.amd.warp_pipeline_stage(label, priority=p)`` block: ``load`` (the producer
  slice of a later iteration and its copies) and ``compute`` (operand reads from the ring, the MMA, the consumer);
- the wait that stands between the two stages for asynchronous copy engines;
- the prologue (``distance`` iterations prefetched before the loop) and the epilogue (the drain after it).

The lowering runs the two stages on two warp groups of 4 warps at once, one stage apart: while one group runs
``compute`` of iteration ``it`` (writing the slot of iteration ``it + slots - 1``), the other runs ``load`` of
``it + 1``... or ``it`` (reading slot ``it % slots`` or the next). With ``slots >= 3`` these slots always differ, so
the ring needs three slots at least, whatever the source asked for, and copies go ``distance = slots - 1`` iterations
ahead. For asynchronous engines the wait between the stages leaves ``slots - 3`` copy groups in flight: the group
that lags one stage behind must also have landed its part of the tile the other group reads next.

A loop that cannot be pipelined gets a `StageRefusal` naming the construct and the reason; the rule then keeps the
loop as it is and reports TT040.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from transpile.analysis.dataflow import Effect, LoopDataflow, loop_dataflow
from transpile.analysis.layouts import LayoutPlan
from transpile.analysis.pipeline import LoopPlan, LoopRefusal, plan_loop
from transpile.cst_utils import calls_in
from transpile.discover import JitFunction
from transpile.source import SourceFile

# Copy engines of the AMD targets and what they imply for the ring.
ENGINES = {
    "registers": "global loads into registers, stored into the LDS ring",
    "async_copy": "direct-to-LDS async copies (commit_group / wait_group)",
    "tdm": "TDM tensor copies into the LDS ring (tdm.async_wait)",
}
WAITS = {"registers": None, "async_copy": "async_copy.wait_group({n})", "tdm": "tdm.async_wait({n})"}
MIN_SLOTS = 3
PIPELINE_WARPS = 8


@dataclass
class Ring:
    operand: str  # the dot operand's variable, e.g. "a"
    shape: list[str]  # tile shape as source text
    elem_bits: dict[str, int]  # per autotune config / constexpr default: element bits where known ("" = default)

    def slot_elements(self, values: dict[str, object]) -> int | None:
        total = 1
        for dim in self.shape:
            value = values.get(dim, dim)
            try:
                total *= int(value)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                return None
        return total


@dataclass
class Stage:
    label: str
    priority: int
    lines: list[int]  # source lines of the statements the stage runs
    role: str


@dataclass
class StagePlan:
    line: int
    loop: LoopPlan = field(repr=False)
    dataflow: LoopDataflow = field(repr=False)
    engine: str
    slots: int
    distance: int
    stages: list[Stage]
    wait: str | None  # the wait between `load` and `compute`, or None
    rings: list[Ring]
    lds_limit: int
    configs: list[dict[str, object]]  # the constexpr values the ring size is evaluated for (autotune configs)

    @property
    def prologue(self) -> str:
        return f"{self.distance} iteration(s) prefetched into slots 0..{self.distance - 1}"

    @property
    def epilogue(self) -> str:
        return "the ring drains: the last iterations read what was prefetched; copies past the end are masked off"

    def ring_bytes(self, values: dict[str, object], elem_bits: int = 16) -> int | None:
        """LDS bytes of all the rings for one set of constexpr values, `elem_bits`-bit elements."""
        total = 0
        for ring in self.rings:
            elements = ring.slot_elements(values)
            if elements is None:
                return None
            total += self.slots * elements * elem_bits // 8
        return total


@dataclass
class StageRefusal:
    node: cst.CSTNode
    reason: str


def plan_stages(source: SourceFile, fn: JitFunction, loop: cst.For, plan: LayoutPlan, engine: str,
                lds_limit: int) -> StagePlan | StageRefusal | None:
    """The stage plan of `loop` for an AMD copy engine, a refusal, or None when the loop has no dot fed by loads."""
    requested = next((c.num_stages for c in fn.autotune_configs if c.num_stages), None)
    loop_plan = plan_loop(source, loop, plan, requested or MIN_SLOTS)
    if loop_plan is None:
        return None
    if isinstance(loop_plan, LoopRefusal):
        return StageRefusal(loop_plan.node, loop_plan.reason)
    flow = loop_dataflow(source, loop, plan)
    body = flow.statements
    # Barrier-needing ops may only start a stage; in a GEMM loop the consumer after the dot is one stage, so any such
    # op there would sit inside `compute` after the MMA.
    for facts in body:
        if facts.index in loop_plan.producer or facts.index in {load.index for load in loop_plan.loads}:
            continue
        if facts.index == loop_plan.dot_index:
            continue
        for node, what in facts.barriers:
            return StageRefusal(node, f"{what} in the loop body would fall inside the `compute` stage, after the MMA: "
                                "its internal barrier breaks the warp-group schedule (move it out of the loop)")
        if Effect.ATOMIC in facts.effects or Effect.GLOBAL_STORE in facts.effects:
            return StageRefusal(facts.node, "a store or atomic inside the main loop (the stages would reorder it "
                                "against the prefetched loads)")
    site = plan.dots[next(c for c in calls_in(body[loop_plan.dot_index].node) if c in plan.dots)]
    shapes = [site.a_shape, site.b_shape]
    rings: list[Ring] = []
    for load, shape in zip(loop_plan.loads, shapes):
        if not shape or any(dim is None for dim in shape):
            return StageRefusal(load.call, f"the shape of the `{load.name}` tile is not known from the source "
                                "(the LDS ring needs its block shape)")
        rings.append(Ring(load.name, [dim for dim in shape if dim is not None], {}))
    slots = max(MIN_SLOTS, loop_plan.num_stages)
    distance = slots - 1
    wait = WAITS[engine]
    if wait is not None:
        wait = wait.format(n=slots - 3)
    producer_lines = [body[i].line for i in loop_plan.producer]
    load_lines = [body[load.index].line for load in loop_plan.loads]
    consumer_lines = [f.line for f in body if f.index not in loop_plan.producer
                      and f.index not in {load.index for load in loop_plan.loads}]
    stages = [
        Stage("load", 1, sorted(producer_lines + load_lines),
              f"addresses and masks of iteration it + {distance}, "
              + ("global loads into registers" if engine == "registers" else "copies into the ring")),
        Stage("compute", 0, consumer_lines,
              "operand reads from the ring in the MMA operand layouts, the MMA"
              + (", stores of the prefetched registers into the ring" if engine == "registers" else "")),
    ]
    configs = [dict(c.values) for c in fn.autotune_configs] or [{}]
    return StagePlan(source.position(loop)[0], loop_plan, flow, engine, slots, distance, stages, wait, rings,
                     lds_limit, configs)
