"""`transpile explain`: per kernel, its loops with their dots and loads, its layouts, and what was emitted or why not."""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from rich.table import Table

from transpile.analysis.loops import loop_facts
from transpile.analysis.stages import ENGINES, StagePlan, StageRefusal, plan_stages
from transpile.engine import prepare, translate_source
from transpile.source import read_text
from transpile.targets import Target


def explain_file(path: Path, target: Target, display: str, gluon_always: bool = False) -> list[Table]:
    text = read_text(path)
    prepared = prepare(text, display)  # the canonical text: what the rules read (same lines as the source)
    result = translate_source(text, display, target, prepared=prepared, gluon_always=gluon_always)
    source, facts, plans = prepared.source, prepared.facts, prepared.plans
    outcomes = {o.name: o for o in result.functions}
    tables: list[Table] = []
    for fn in facts.functions.values():
        outcome = outcomes[fn.name]
        plan = plans[fn.name]
        kind = "helper" if fn.is_helper else "kernel"
        status = outcome.status
        table = Table(title=f"{display}:{source.position(fn.node)[0]} {kind} `{fn.name}` for {target.name}: {status}",
                      show_lines=False, title_justify="left")
        table.add_column("what")
        table.add_column("line")
        table.add_column("detail")
        if outcome.reason:
            table.add_row("kept", "", f"kept as Triton: {outcome.reason}")
        for loop in loop_facts(source, fn.node, plan):
            hints = ", ".join(f"{k}={v}" for k, v in loop.hints.items())
            detail = (f"{'  ' * loop.depth}{loop.kind}{f' ({hints})' if hints else ''}: {len(loop.dots)} dot(s)"
                      f"{' at ' + ', '.join(map(str, loop.dots)) if loop.dots else ''}, {len(loop.loads)} load(s)"
                      f"{' at ' + ', '.join(map(str, loop.loads)) if loop.loads else ''}")
            table.add_row("loop", str(loop.line), detail)
        for row in _stage_rows(source, fn, plan, target):
            table.add_row(*row)
        if not outcome.translated:  # the variant holds the source function: no Gluon dots or layouts to show
            for d in outcome.diagnostics:
                table.add_row(d.code, str(d.line), d.message)
            tables.append(table)
            continue
        for site in plan.dots.values():
            table.add_row("dot", str(source.position(site.node)[0]),
                          f"-> _dot: {target.mma}; tile [{', '.join(s or '?' for s in site.shape)}]")
        for name, kind_, root in plan.declarations:
            detail = "MMA accumulator layout" if kind_ == "mma" else (
                f"blocked layout for [{', '.join(s or '?' for s in (root.shape or []))}]")
            table.add_row("layout", "", f"{name}: {detail}")
        converts = len(plan.converts)
        if converts:
            table.add_row("converts", "", f"{converts} layout conversion(s) where constraints disagree")
        for d in outcome.diagnostics:
            table.add_row(d.code, str(d.line), d.message)
        tables.append(table)
    return tables


def stage_plans(source, fn, plan, target: Target) -> list[tuple[cst.For, StagePlan | StageRefusal | None]]:  # noqa: ANN001
    """Every `for` loop of `fn` with the warp-pipeline stage plan the target's AMD rule makes for it (none for
    targets without that rule): what `explain` prints and what the timeline draws."""
    from transpile.rules.amd_warp_pipeline import AMDWarpPipeline

    rule = next((r for r in target.rules if isinstance(r, AMDWarpPipeline)), None)
    if rule is None:
        return []
    loops: list[cst.For] = []

    class _Loops(cst.CSTVisitor):
        def visit_For(self, node: cst.For) -> None:
            loops.append(node)

    fn.node.visit(_Loops())
    return [(loop, plan_stages(source, fn, loop, plan, rule.engine, target.shared_memory_bytes)) for loop in loops]


def _stage_rows(source, fn, plan, target: Target) -> list[tuple[str, str, str]]:  # noqa: ANN001
    """The warp-pipeline stage plan of each main loop, for targets whose rules warp-pipeline (AMD)."""
    rows: list[tuple[str, str, str]] = []
    for loop, sp in stage_plans(source, fn, plan, target):
        line = str(source.position(loop)[0])
        if sp is None:
            continue
        if isinstance(sp, StageRefusal):
            rows.append(("stage plan", line, f"not pipelined ({source.position(sp.node)[0]}): {sp.reason}"))
            continue
        rows.append(("stage plan", line, f"{len(sp.stages)} stages on 2 warp groups (num_warps=8); copies: "
                     f"{ENGINES[sp.engine]}; ring of {sp.slots} slots, {sp.distance} iteration(s) ahead"))
        for i, stage in enumerate(sp.stages):
            rows.append((f"stage {i}", ", ".join(map(str, stage.lines)),
                         f'"{stage.label}" priority {stage.priority}: {stage.role}'))
            if i == 0:
                rows.append(("wait", "", sp.wait or "none: the compiler's barrier between the stages orders the "
                             "LDS reads before the next stores"))
        for ring in sp.rings:
            rows.append(("ring", "", f"`{ring.operand}`: {sp.slots} x [{', '.join(ring.shape)}]"))
        rows.append(("prologue", "", sp.prologue))
        rows.append(("epilogue", "", sp.epilogue))
        rows += _lds_rows(sp)
    return rows


def _lds_rows(sp: StagePlan) -> list[tuple[str, str, str]]:
    rows = []
    for i, values in enumerate(sp.configs):
        label = f"config {i}" if len(sp.configs) > 1 or values else "LDS"
        parts = []
        for bits in (16, 8):
            size = sp.ring_bytes(values, bits)
            if size is None:
                parts = ["block sizes known only at launch: checked at compile time"]
                break
            verdict = "fits" if size <= sp.lds_limit else "does not fit: that config runs the loop unpipelined"
            parts.append(f"{size} B at {bits}-bit elements ({verdict})")
        rows.append(("LDS", label, f"{'; '.join(parts)}; the target has {sp.lds_limit} B"))
    return rows
