"""`transpile explain`: per kernel, its loops with their dots and loads, its layouts, and what was emitted or why not."""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from rich.table import Table

from transpile.analysis.loops import loop_facts
from transpile.analysis.stages import ENGINES, StagePlan, StageRefusal
from transpile.engine import KernelOutcome, for_amd, prepare, prepare_blocks, translate_source
from transpile.lowering.sm90 import CONSUMER_STEPS, LOADER_STEPS, SCALED_CONSUMER_STEPS
from transpile.rules.base import evaluate, source_when_holds
from transpile.rules.hopper_schedule import WS_CONSUMER, Sm90Ring
from transpile.source import read_text, set_location
from transpile.targets import Target


def explain_file(path: Path, target: Target, display: str, gluon_always: bool = False) -> list[Table]:
    text = read_text(path)
    set_location(display, path)  # (helpers imported from beside it are read from there, as a translation reads them)
    prepared = prepare(text, display)  # the canonical text: what the rules read (same lines as the source)
    if target.backend == "hip":  # (what the AMD rules translate: `for_amd`)
        prepared = for_amd(prepared, target)
    result = translate_source(text, display, target, prepared=prepared, gluon_always=gluon_always)
    outcomes: dict[str, KernelOutcome] = {}
    for o in result.functions:
        outcomes.setdefault(o.name, o)  # (a kernel of one name in two branches of a module-level `if`: the first)
    # the module, or the module-level blocks its kernels stand in, each translated as a module (`transpile.blocks`)
    blocks = [for_amd(p, target) if target.backend == "hip" else p for p in prepare_blocks(prepared)]
    functions = [(p.source, fn, p.plans[fn.name]) for p in [prepared, *blocks] for fn in p.facts.functions.values()]
    tables: list[Table] = []
    for source, fn, plan in functions:
        outcome = outcomes.get(fn.name)
        if outcome is None:
            continue
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
        for row in _stage_rows(source, fn, plan, target, outcome):
            table.add_row(*row)
        for row in _ring_rows(outcome):
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
            detail = "MMA accumulator layout" if kind_ == "mma" else "MMA operand layout" if kind_ == "operand" else (
                f"blocked layout for [{', '.join(s or '?' for s in (root.shape or []))}]")
            table.add_row("layout", "", f"{name}: {detail}")
        converts = len(plan.converts)
        if converts:
            table.add_row("converts", "", f"{converts} layout conversion(s) where constraints disagree")
        for d in outcome.diagnostics:
            table.add_row(d.code, str(d.line), d.message)
        tables.append(table)
    return tables


def stage_plans(source, fn, plan, target: Target, emitted: list[StagePlan] | None = None  # noqa: ANN001
                ) -> list[tuple[cst.For, StagePlan | StageRefusal | None]]:
    """Every `for` loop of `fn` with the warp-pipeline stage plan the target's AMD rule makes for it (none for
    targets without that rule): what `explain` prints, refusals included. `emitted`: the plans the rule recorded
    for the loops it rewrote (`KernelOutcome.schedules`), taken for the loops at their lines, in order, instead of
    planning those again (the timeline draws the same)."""
    from transpile.rules.amd_warp_pipeline import AMDWarpPipeline

    rule = next((r for r in target.rules if isinstance(r, AMDWarpPipeline)), None)
    if rule is None:
        return []
    loops: list[cst.For] = []

    class _Loops(cst.CSTVisitor):
        def visit_For(self, node: cst.For) -> None:
            loops.append(node)

    fn.node.visit(_Loops())
    by_line: dict[int, list[StagePlan]] = {}
    for sp in emitted or []:
        by_line.setdefault(sp.line, []).append(sp)
    found: list[tuple[cst.For, StagePlan | StageRefusal | None]] = []
    for loop in loops:
        recorded = by_line.get(source.position(loop)[0])
        found.append((loop, recorded.pop(0) if recorded else
                      rule.stage_plan(source, fn, loop, plan, target.shared_memory_bytes)))
    return found


def _stage_rows(source, fn, plan, target: Target, outcome) -> list[tuple[str, str, str]]:  # noqa: ANN001
    """The warp-pipeline stage plan of each main loop, for targets whose rules warp-pipeline (AMD): the plan the
    variant's loop was emitted from where it was (`KernelOutcome.schedules`), else what the rule plans for it (a
    refusal, or a plan the variant does not use: the kernel kept as Triton)."""
    rows: list[tuple[str, str, str]] = []
    emitted = [s for s in outcome.schedules if isinstance(s, StagePlan)] if outcome.translated else []
    for loop, sp in stage_plans(source, fn, plan, target, emitted):
        line = str(source.position(loop)[0])
        if sp is None:
            continue
        if isinstance(sp, StageRefusal):
            rows.append(("stage plan", line, f"not pipelined ({source.position(sp.node)[0]}): {sp.reason}"))
            continue
        used = "as emitted" if any(sp is e for e in emitted) else "planned; the variant does not emit it"
        groups = ("2 warp groups (num_warps=8)" + (f"; every warp along M, so that the row reductions stay inside "
                                                     f"a warp ({sp.row_reduction})" if sp.warps_along_m else "")
                  if sp.groups == 2 else f"1 warp group, every wave in step (the kernel's warps; {sp.barrier_op} "
                  "needs a CTA-wide barrier)")
        rows.append(("stage plan", line, f"{len(sp.stages)} stages on {groups}; copies: "
                     f"{ENGINES[sp.engine]}; ring of {sp.slots} slots, {sp.distance} iteration(s) ahead ({used})"))
        for i, stage in enumerate(sp.stages):
            rows.append((f"stage {i}", ", ".join(map(str, stage.lines)),
                         f'"{stage.label}" priority {stage.priority}: {stage.role}'
                         + (f" (in order: {' -> '.join(stage.ops)})" if stage.ops else "")))
            if i == 0:
                rows.append(("wait", "", sp.wait or "none: the compiler's barrier between the stages orders the "
                             "LDS reads before the next stores"))
        for ring in sp.rings:
            rows.append(("ring", "", f"`{ring.operand}`: {sp.slots} x [{', '.join(ring.shape)}]"))
        for tile, (base, ints) in sp.aligned_at_run_time.items():
            tested = ", ".join(f"`{n}`" for n in (base, *ints))
            rows.append(("run-time test", "", f"`{tile}`: the kernel loads {tested}; the pipelined loop runs where "
                         "they are multiples of 16 bytes, the loop as translated elsewhere"))
        rows.append(("prologue", "", sp.prologue))
        rows.append(("epilogue", "", sp.epilogue))
        rows += _lds_rows(sp)
    return rows


def _ring_rows(outcome) -> list[tuple[str, str, str]]:  # noqa: ANN001 - KernelOutcome
    """The sm90 rings the variant's loops were emitted with (what the timeline draws)."""
    rows: list[tuple[str, str, str]] = []
    for ring in outcome.schedules if outcome.translated else []:
        if not isinstance(ring, Sm90Ring):
            continue
        what = {"tma": "TMA ring, one `ready` mbarrier per slot (expect-tx of the tile bytes, wait on its phase)",
                "cp.async": "cp.async ring, one commit group per iteration",
                "attention": f"flash-attention ring: `{ring.q}` in shared memory, K and V by cp.async (a commit group "
                             "each)"}[ring.form]
        operands = ", ".join(f"`{o.name}` ({o.engine}{', read transposed' if o.transposed else ''})"
                             for o in ring.operands)
        rows.append(("ring", str(ring.line), f"{what}; NUM_STAGES = {ring.depth.text} slots of {operands}, filled "
                     "NUM_STAGES - 1 iterations ahead"))
        rows.append(("iteration", "", "the ops of one iteration, in the order written: " + " -> ".join(ring.steady)))
        if ring.form == "attention":
            rows.append(("wgmma", "", f"QK^T and the previous PV asynchronous; warpgroup_mma_wait("
                         f"{ring.mma_in_flight}) for QK^T with PV in flight during the softmax, "
                         "warpgroup_mma_wait(0) before the rescale"))
        else:
            rows.append(("wgmma", "", f"asynchronous from the slot; warpgroup_mma_wait({ring.mma_in_flight}) leaves "
                         f"{ring.mma_in_flight} in flight, then the slot it read is refilled"))
        if ring.wait_groups is not None:
            rows.append(("wait", "", f"async_copy.wait_group({ring.wait_groups.text('NUM_STAGES')}) and a CTA barrier "
                         "before the wgmmas read a slot"))
        ws = ring.ws
        if ws is not None:
            rows.append(("partitions", "", f"if {ws.condition}: loader `{ws.loader}` ({ws.warps} warp, "
                         f"{ws.registers} registers) waits `empty[slot]`, expects and copies into the slot; "
                         f"`{ws.consumer or WS_CONSUMER}` waits `ready[slot]`, multiplies, "
                         + ("runs the loop's own statements and arrives on the slot's `empty` once its product is "
                            "complete" if ring.product else "arrives on the previous slot's `empty`")
                         + ("; both walk the program's tiles (persistent)" if ws.persistent else "")
                         + f"; loader: {' -> '.join(LOADER_STEPS)}; consumer: "
                         + " -> ".join(SCALED_CONSUMER_STEPS if ring.product else CONSUMER_STEPS)
                         + "; else one partition (the iteration above)"))
        tests = outcome.dispatch.source_when if outcome.dispatch is not None else ()
        for config in ring.configs:
            # (a config a test of the launcher holds at runs the source kernel: `num_warps < 4`, a loop too short)
            held = [test for test, names in tests if source_when_holds(
                test, names, {**{n: evaluate(d, {}) for n, d in names if d is not None}, **config.values,
                              "num_warps": config.num_warps})]
            if held:
                rows.append(("config", config.label, f"{config.text}: the source kernel (the launcher's `{held[0]}`)"))
                continue
            form = ("" if ws is None else
                    {True: "warp-specialised; ", False: "single partition; ", None: "form decided at launch; "}[
                        ws.selects(config.values, config.num_warps)])
            rows.append(("config", config.label, f"{config.text}: {form}ring depth "
                         f"{ring.depth.for_config(config.values, config.num_warps)}"))
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
