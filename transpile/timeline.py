"""Timelines of pipelined loops: which warp group or partition runs what of which iteration, when, the ring slot
each copy fills and each MMA reads, and the waits between them.

Drawn from the schedule each pipeline rule emitted the loop from, recorded on the translation
(`KernelOutcome.schedules`), so the picture is the schedule of the code, not a separate description of it:

- AMD (`transpile.analysis.stages.StagePlan`): the lowering runs the plan's stages on two warp groups one stage
  apart: at step ``t`` group ``g`` runs stage ``(t - g) mod S`` of iteration ``(t - g) div S``. A stage that reads
  operands reads ring slot ``it mod slots`` (attention's ``lds_read``) or the next iteration's, ``(it + 1) mod slots``
  (a GEMM's ``mem``: operands one step ahead); the stage that issues the copies fills slot ``(it + distance) mod
  slots``; the plan's wait (asynchronous copy engines) stands after the read stage (attention) or before the MMA
  (a GEMM: after ``mem``, ahead of the next iteration).
- sm90 (`transpile.rules.hopper_schedule.Sm90Ring`): one row per partition (the kernel's warps; with warp
  specialisation the loader warp and the wgmma warps) and one per ring slot. Each partition runs its blocks in
  program order, each block one step, at the earliest step its waits allow (a block waits for what a block of an
  earlier step signalled; a copy lands by the step after it was issued), so the columns are the order the barriers
  allow, not measured time. A slot row shows the copy filling it (from its issue to the wait that consumes it) and
  the wgmmas reading it (until the wait that retires them).

`render_svg(panels)` writes a self-contained SVG (no dependency); `render_text(panel)` the same grid as text.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from html import escape

from transpile.analysis.stages import StagePlan
from transpile.lowering.sm90 import IN_ORDER_STEADY
from transpile.rules.hopper_schedule import WS_CONSUMER, Sm90Ring

GROUPS = 2
AMD_ROWS = ("warp group 0", "warp group 1")
ITERATIONS = 3
_COLORS = ("#cfe2ff", "#d1e7dd", "#fff3cd", "#f8d7da", "#e2d9f3", "#d3d3d3")
_SLOT_COLORS = {"fill": "#e7f1ff", "read": "#e3f4ea", "stall": "#f2f2f2"}
_STYLES = {"stall": "dim", "fill": "black on #e7f1ff", "read": "black on #e3f4ea"}  # rich styles of slot cells
_ARROWS = {"landed": "#1f5fbf", "free": "#c00"}  # a copy landed (`ready`); a slot handed back (`empty`)
_READS = {"lds_read": 0, "mem": 1}  # stage -> which iteration's operands it reads (this one, or the next)


@dataclass(frozen=True)
class Cell:
    """One block of one iteration on one row (a warp group, a partition or a ring slot)."""

    step: int
    group: int  # the row
    stage: int  # the colour (the block's index among the panel's stages)
    label: str
    iteration: int
    note: str  # the ring slots it reads or fills
    wait: str | None  # a wait this block ends (AMD) or starts (sm90) with, or None
    span: int = 1  # steps it lasts
    kind: str = "stage"  # "stage": a block of code; "stall": blocked on a wait; "fill"/"read": a ring slot's state


@dataclass(frozen=True)
class Panel:
    """The timeline of one pipelined loop (one form of it, for a loop emitted in two)."""

    title: str
    cells: tuple[Cell, ...]
    steps: int
    stages: tuple[str, ...]
    rows: tuple[str, ...] = AMD_ROWS
    notes: tuple[str, ...] = ()  # lines under the title: the form, the configs that compile it, the waits
    wait_at: str = "end"  # where a cell's wait stands: "end" (AMD, after the stage) or "start" (sm90)
    # A partition's signal another partition waits for: (event, from step, from row, to step, to row); event
    # "landed" (a copy completed its `ready` barrier) or "free" (an `empty` barrier arrived on).
    arrows: tuple[tuple[str, int, int, int, int], ...] = ()
    line: int = 0  # the loop's line in the source
    copy: int = 0  # which copy of a loop unswitched on a constexpr flag (`transpile.passes.unswitch`): 0, 1, ...


def plan_panel(sp: StagePlan, title: str, iterations: int = ITERATIONS) -> Panel:
    """The cells of `iterations` iterations of the loop `sp` plans, on its two warp groups (one, every wave in step,
    where an op of the loop needs a CTA-wide barrier: `StagePlan.groups`)."""
    groups = sp.groups
    labels = tuple(s.label for s in sp.stages)
    count = len(labels)
    copy_stage = next((i for i, s in enumerate(sp.stages) if s.label.startswith("copy") or s.label == "mem"), None)
    wait_stage = count - 1 if labels[0] == "mma" else 0  # a GEMM waits before its MMA: after the previous `mem`
    cells: list[Cell] = []
    steps = iterations * count + groups - 1
    for step in range(steps):
        for group in range(groups):
            local = step - group
            if local < 0:
                continue
            iteration, stage = divmod(local, count)
            if iteration >= iterations:
                continue
            label = labels[stage]
            notes = []
            if label in _READS:
                read = iteration + _READS[label]
                notes.append(f"reads slot {read % sp.slots}" + (f" (it {read})" if read != iteration else ""))
            if stage == copy_stage:
                notes.append(f"fills slot {(iteration + sp.distance) % sp.slots} (it {iteration + sp.distance})")
            wait = sp.wait if sp.wait and stage == wait_stage else None
            cells.append(Cell(step, group, stage, label, iteration, "; ".join(notes), wait))
    return Panel(title, tuple(cells), steps, labels, line=sp.line,
                 **({} if groups == GROUPS else {"rows": ("all waves",)}))


# --------------------------------------------------------------------------------------------------------------------
# sm90


@dataclass(frozen=True)
class _Op:
    """A block of a partition's program: what it runs, the wait it starts with, and what it synchronises."""

    row: int
    label: str
    iteration: int
    note: str
    wait: str | None = None
    needs: tuple[tuple[str, int], ...] = ()  # events it waits for (given by blocks at earlier steps)
    gives: tuple[tuple[str, int], ...] = ()  # events it signals
    blocked: str = ""  # what a stall before it waits on
    issues: tuple[int, ...] = ()  # iterations whose copies it issues (into their ring slots)
    reads: tuple[int, ...] = ()  # iterations whose slots its wgmmas start reading
    frees: tuple[int, ...] = ()  # iterations whose wgmmas are known complete here (their slots free)


@dataclass(frozen=True)
class _Form:
    """One form of an sm90 ring as drawn: its depth, the warps of the configs that compile it, and who they are."""

    name: str
    depth: int
    warps: frozenset[int | None]
    notes: tuple[str, ...]


def ring_panels(ring: Sm90Ring, display: str, iterations: int = ITERATIONS) -> list[Panel]:
    """The panels of an sm90 ring: one per form a config compiles (both forms of a warp-specialised TMA ring where
    the block sizes come with the launch)."""
    panels = []
    for form in _forms(ring):
        ops, rows, copy = _program(ring, form, iterations)
        what = {"tma": "TMA ring", "cp.async": "cp.async ring", "attention": "flash-attention K/V cp.async ring"}
        operands = ", ".join(f"`{o.name}`{' (read transposed)' if o.transposed else ''}" for o in ring.operands)
        title = (f"{display}:{ring.line} `{ring.kernel}` on sm90: {what[ring.form]} of {form.depth} slots ({operands}),"
                 f" {form.name}")
        panels.append(_panel(title, form, ops, rows, form.depth, copy, ring.form == "attention", ring.line))
    return panels


def _forms(ring: Sm90Ring) -> list[_Form]:
    """The forms to draw, each with the configs that compile it (decided by the same facts as the emitted test)."""
    configs, ws = ring.configs, ring.ws
    if ring.form == "tma" and ws is not None:
        choices = [(c, ws.selects(c.values, c.num_warps)) for c in configs]
        candidates = [("warp-specialised form", [(c, s) for c, s in choices if s is not False]),
                      ("single-partition form", [(c, s) for c, s in choices if s is not True])]
    else:
        candidates = [("single partition", [(c, True) for c in configs])]
    forms = []
    for name, chosen in candidates:
        if configs and not chosen:
            continue  # no config compiles this form
        depths = {c.label: ring.depth.for_config(c.values, c.num_warps) for c, _ in chosen}
        depth = next(iter(depths.values()), ring.depth.stages)
        notes = []
        if ring.form == "tma" and ws is not None:
            notes.append(f"chosen at compile time: {ws.condition}")
        if name == "warp-specialised form":
            notes.append(f"partitions: `{ws.loader}` ({ws.warps} warp, {ws.registers} registers) fills the ring; "
                         f"`{ws.consumer or WS_CONSUMER}` (the kernel's warps) waits, multiplies and hands slots back")
            if ws.persistent:
                notes.append("persistent: both partitions walk the program's tiles (one program per SM); the ring "
                             "runs on across tiles, so the next tile's copies overlap this tile's epilogue")
        if not configs:
            both = " which form compiles (both are drawn)" if len(candidates) > 1 else ""
            notes.append(f"no autotune configs: the block sizes and warps of each launch decide{both}")
        else:
            notes.append("compiled by " + "; ".join(
                f"{c.label} ({c.text})" + ("" if sure is not None else ", if its sizes allow")
                for c, sure in chosen))
        if len(set(depths.values())) > 1:
            listed = ", ".join(f"{label}: {d}" for label, d in depths.items())
            notes.append(f"ring depth per config: {listed}; drawn with {depth}")
        if ring.form == "attention":
            notes.append(f"`{ring.q}` stays in shared memory; each iteration issues QK^T and the previous iteration's "
                         f"PV and waits for QK^T only (warpgroup_mma_wait({ring.mma_in_flight})): PV runs during the "
                         "softmax; after the loop the last PV")
        elif ring.steady == IN_ORDER_STEADY:
            notes.append("copies run NUM_STAGES - 1 iterations ahead; the loop's statements run in order, each dot an "
                         "asynchronous wgmma issued as early as its operands allow and waited for where its result is "
                         "read; all are done by the end of the iteration, and the next refills a slot only after its "
                         "copies' wait and barrier; after the loop async_copy.wait_group(0)")
        else:
            notes.append(f"copies run NUM_STAGES - 1 iterations ahead; each wgmma is asynchronous and "
                         f"warpgroup_mma_wait({ring.mma_in_flight}) leaves {ring.mma_in_flight} in flight; after the "
                         "loop warpgroup_mma_wait(0)" + ("; async_copy.wait_group(0)" if ring.form == "cp.async"
                                                         else ""))
        if "stage" in ring.steady:
            notes.append("a dot operand is computed in registers from its slot after the copies' wait and stored into "
                         "one of two staging buffers (by iteration parity), fenced, before the wgmma reads it")
        if ring.form == "cp.async":
            notes.append("under a run-time test: 16-byte copies (rows 16-byte aligned); the same ring with 8-byte "
                         "copies under a weaker one; else the translated loop")
        warps = frozenset({c.num_warps for c, _ in chosen} or {None})
        forms.append(_Form(name, depth, warps, tuple(notes)))
    return forms


def _barrier(warps: frozenset[int | None]) -> str:
    """The `if gl.num_warps() > 4: _cta_barrier()` of the emitted loop, for the warps of the drawn configs."""
    if all(w is not None and w > 4 for w in warps):
        return "CTA barrier"
    if all(w is not None and w <= 4 for w in warps):
        return ""
    return "CTA barrier if > 4 warps"


def _program(ring: Sm90Ring, form: _Form, iterations: int) -> tuple[list[list[_Op]], list[str], str]:
    """Each partition's blocks over `iterations` iterations, as the emitted loop runs them; the partitions' row
    names; the copy engine's name."""
    S = form.depth
    ahead = S - 1
    k = ring.mma_in_flight
    barrier = _barrier(form.warps)
    warps = sorted(w for w in form.warps if w is not None)
    warp_text = f"{'/'.join(map(str, warps))} warps" if warps else "num_warps warps"
    if ring.form == "attention":
        return _attention_program(ring, S, iterations, barrier), [f"kernel ({warp_text})"], "cp.async"
    engine = ring.operands[0].engine
    retire_wait = f"warpgroup_mma_wait({k})" + (f"; {barrier}" if barrier else "")

    def retire(it: int, row: int, ws: bool) -> _Op:
        done = it - k
        if done < 0:
            return _Op(row, "mma_wait", it, "no earlier wgmma" + ("; no arrive (it 0)" if ws else ""), retire_wait)
        note = f"wgmma it {done} done" + (f"; arrive empty[{done % S}]" if ws else f": slot {done % S} free")
        return _Op(row, "mma_wait", it, note, retire_wait, gives=(("free", done),), frees=(done,))

    if form.name == "warp-specialised form":
        ws = ring.ws
        loader: list[_Op] = []
        for j in range(iterations + ahead):
            slot, phase = j % S, (j // S) & 1
            wait = f"mbarrier.wait(empty[{slot}], {phase ^ 1})" + (" (passes: fresh)" if j < S else "")
            loader.append(_Op(0, "load", j, f"expect ready[{slot}]; {engine} it {j} -> slot {slot}", wait,
                              needs=(("free", j - S),) if j >= S else (), gives=(("landed", j),),
                              blocked=f"empty[{slot}]: slot {slot} read by wgmma it {j - S}", issues=(j,)))
        consumer: list[_Op] = []
        for it in range(iterations):
            slot, phase = it % S, (it // S) & 1
            consumer.append(_Op(1, "mma", it, f"wgmma reads slot {slot} (async)",
                                f"mbarrier.wait(ready[{slot}], {phase})", needs=(("landed", it),),
                                blocked=f"ready[{slot}]: {engine} it {it}", reads=(it,)))
            consumer.append(retire(it, 1, True))
        rows = [f"loader ({ws.warps} warp)", f"consumer ({warp_text})"]
        return [loader, consumer], rows, engine
    # One partition: the kernel's warps issue the copies, wait, multiply and refill.
    copy = "expect ready[{slot}]; TMA" if engine == "TMA" else "cp.async"
    first = ", ".join(str(j) for j in range(ahead))
    ops = [_Op(0, "prologue", 0, f"{engine} it {first} -> slots {first}", None,
               gives=tuple(("landed", j) for j in range(ahead)), issues=tuple(range(ahead)))]
    for it in range(iterations):
        slot, phase = it % S, (it // S) & 1
        wait = ""
        for step in ring.steady:  # the ops of one iteration, in the order the expander wrote them
            if step == "wait":  # (drawn as what the wgmma that follows waits for)
                wait = (f"mbarrier.wait(ready[{slot}], {phase})" if engine == "TMA"
                        else f"async_copy.wait_group({ring.wait_groups.value(S)}); CTA barrier")
            elif step == "mma":
                ops.append(_Op(0, "mma", it, f"wgmma reads slot {slot} (async)", wait or None,
                               needs=(("landed", it),), blocked=f"{engine} it {it}", reads=(it,)))
                wait = ""
            elif step == "consumer_before" and ring.steady == IN_ORDER_STEADY:
                ops.append(_Op(0, "mma", it, f"the loop's wgmmas read slot {slot}, each waited for where read",
                               wait or None, needs=(("landed", it),), blocked=f"{engine} it {it}", reads=(it,)))
                ops.append(_Op(0, "mma_wait", it, f"wgmmas of it {it} done: slot {slot} free",
                               "warpgroup_mma_wait(0)", gives=(("free", it),), frees=(it,)))
                wait = ""
            elif step == "retire":  # (with the barrier after it in its text)
                ops.append(retire(it, 0, False))
            elif step == "refill":
                nxt = it + ahead
                fill = copy.format(slot=nxt % S)
                commit = "; commit_group" if engine == "cp.async" else ""
                ops.append(_Op(0, "refill", it, f"{fill} it {nxt} -> slot {nxt % S}{commit}", wait or None,
                               gives=(("landed", nxt),), issues=(nxt,)))
                wait = ""
    return [ops], [f"kernel ({warp_text}, one partition)"], engine


def _attention_program(ring: Sm90Ring, S: int, iterations: int, barrier: str) -> list[list[_Op]]:
    ahead = S - 1
    groups = ring.wait_groups.value(S)
    first = ", ".join(str(j) for j in range(ahead))
    ops = [_Op(0, "prologue", 0, f"V slot {S - 1} = 0; K,V it {first} -> slots {first}", None,
               gives=tuple(("landed", j) for j in range(-1, ahead)), issues=tuple(range(-1, ahead)))]
    for it in range(iterations):
        slot, prev = it % S, (it - 1) % S
        ops.append(_Op(0, "mma", it, f"QK^T: K slot {slot}; PV it {it - 1}: V slot {prev}",
                       f"async_copy.wait_group({groups}); CTA barrier", needs=(("landed", it), ("landed", it - 1)),
                       blocked=f"K of it {it}", reads=(it, -1) if it == 0 else (it,)))
        ops.append(_Op(0, "softmax", it, f"QK^T done; online softmax; PV it {it - 1} in flight",
                       f"warpgroup_mma_wait({ring.mma_in_flight})"))
        ops.append(_Op(0, "rescale", it, f"PV it {it - 1} done: slot {prev} free", "warpgroup_mma_wait(0)",
                       frees=(it - 1,)))
        nxt = it + ahead
        ops.append(_Op(0, "refill", it, f"K,V it {nxt} -> slot {nxt % S}; 2 groups", barrier or None,
                       issues=(nxt,), gives=(("landed", nxt),)))
    return [ops]


def _panel(title: str, form: _Form, programs: list[list[_Op]], rows: list[str], S: int, engine: str,
           attention: bool, line: int) -> Panel:
    """Place the partitions' blocks (see the module docstring) and derive the slot rows from them."""
    given: dict[tuple[str, int], int] = {}
    position = [0] * len(programs)
    placed: list[tuple[int, _Op]] = []
    stalls: list[tuple[int, int, _Op]] = []
    last = len(programs) - 1  # the partition that runs the wgmmas: the window ends with its last block
    step = 0
    while position[last] < len(programs[last]):
        for row, program in enumerate(programs):
            if position[row] >= len(program):
                continue
            op = program[position[row]]
            if all(given.get(e, step + 1) <= step for e in op.needs):
                placed.append((step, op))
                position[row] += 1
                for event in op.gives:
                    given[event] = step + 1
            else:
                stalls.append((step, row, op))
        step += 1
        if step > 1000:
            raise RuntimeError(f"the schedule of {title} does not progress (a wait nothing signals)")
    steps = step
    labels = tuple(dict.fromkeys(op.label for program in programs for op in program))
    cells: list[Cell] = []
    for at, op in placed:
        cells.append(Cell(at, op.row, labels.index(op.label), op.label, op.iteration, op.note, op.wait))
    # Consecutive stalls of one partition on one block are one cell.
    merged: dict[tuple[int, int], list[int]] = {}
    for at, row, op in stalls:
        merged.setdefault((row, id(op)), []).append(at)
    ops_by_id = {id(op): op for _, _, op in stalls}
    for (row, key), ats in merged.items():
        op = ops_by_id[key]
        cells.append(Cell(min(ats), row, 0, "wait", op.iteration, op.blocked, None, max(ats) - min(ats) + 1, "stall"))
    # Ring slots: a copy fills its slot from its issue until the block that consumes it; the wgmmas read it until
    # the block that knows them complete.
    issued = {j: at for at, op in placed for j in op.issues}
    consumed = {j: at for at, op in placed for j in op.reads}
    freed = {j: at for at, op in placed for j in op.frees}
    base = len(rows)
    for j, at in sorted(issued.items()):
        slot = j % S
        end = consumed.get(j, steps)
        if j == -1:
            label, note = "zeros", "V of it -1 (zero P)"
        else:
            label = engine
            note = f"ready[{slot}] phase {(j // S) & 1}" if engine == "TMA" else "one commit group" if not attention \
                else "K, V: two groups"
        cells.append(Cell(at, base + slot, 0, label, j, note, None, max(end - at, 1), "fill"))
        if j in consumed:
            end = freed.get(j, steps - 1)
            what = ("K (QK^T), V (PV)" if attention else "A and B") if j >= 0 else "V (PV of it -1)"
            cells.append(Cell(consumed[j], base + slot, 1, "wgmma", j, f"reads {what}", None,
                              end - consumed[j] + 1, "read"))
    slot_rows = [f"slot {s}" + (" (K, V)" if attention else "") for s in range(S)]
    # Signals between partitions (the warp-specialised ring's `ready` and `empty` barriers).
    given_by = {e: (at, op.row) for at, op in placed for e in op.gives}
    arrows = tuple((e[0], *given_by[e], at, op.row) for at, op in placed for e in op.needs
                   if e in given_by and given_by[e][1] != op.row)
    return Panel(title, tuple(cells), steps, labels, tuple(rows + slot_rows), form.notes, "start", arrows, line)


# --------------------------------------------------------------------------------------------------------------------
# Rendering


def _cell_text(cell: Cell) -> str:
    return f"{cell.label}[it {cell.iteration}]"


def _segments(panel: Panel) -> list[list[tuple[str, str | None]]]:
    """The text of the panel, line by line, as (text, rich style) pieces: the title and notes, one row per warp
    group, partition or ring slot with one column per step, then what each block (of the first warp group on AMD,
    of every partition on sm90) does and waits for."""
    width = max(len(_cell_text(c)) for c in panel.cells) + 2
    label = max(len(r) for r in panel.rows) + 2
    lines: list[list[tuple[str, str | None]]] = [[(panel.title, "bold")], *([(f"  {n}", "dim")] for n in panel.notes),
                                                  [(" " * label + "".join(f"step {s}".ljust(width)
                                                                          for s in range(panel.steps)), "dim")]]
    for group, name in enumerate(panel.rows):
        pieces: list[tuple[str, str | None]] = [("-".ljust(width), "dim")] * panel.steps
        for c in (c for c in panel.cells if c.group == group):
            style = _STYLES.get(c.kind) or f"black on {_COLORS[c.stage % len(_COLORS)]}"
            for s in range(c.step, min(c.step + c.span, panel.steps)):
                pieces[s] = ((_cell_text(c) if s == c.step else "...").ljust(width), style)
        lines.append([(name.ljust(label), None), *pieces])
    shown = (lambda c: c.group == 0) if panel.wait_at == "end" else (lambda c: c.kind == "stage")
    for cell in sorted((c for c in panel.cells if shown(c) and (c.note or c.wait)), key=lambda c: (c.step, c.group)):
        if panel.wait_at == "end":
            line = [(f"  {_cell_text(cell)}: {cell.note}", None)] if cell.note else [(f"  {_cell_text(cell)}: ", None)]
            if cell.wait:
                line.append(("; then " if cell.note else "then ", None))
                line.append((cell.wait, "red"))
        else:
            line = [(f"  step {cell.step} {panel.rows[cell.group].split(' ')[0]} {_cell_text(cell)}: ", None)]
            if cell.wait:
                line += [(f"[{cell.wait}]", "red"), (" ", None)]
            line.append((cell.note, None))
        lines.append(line)
    return lines


def render_text(panel: Panel) -> list[str]:
    """The panel as lines of plain text (see `_segments`)."""
    return ["".join(text for text, _ in line).rstrip() if i > 0 else line[0][0]
            for i, line in enumerate(_segments(panel))]


def render_rich(panel: Panel):  # noqa: ANN201 - rich.text.Text
    """The panel as rich text for the terminal: the lines of `render_text`, the cells in the SVG's colours and the
    waits in red."""
    from rich.text import Text

    text = Text()
    for i, line in enumerate(_segments(panel)):
        if i:
            text.append("\n")
        for piece, style in line:
            text.append(piece, style=style)
    return text


def _column(panel: Panel) -> int:
    """The width of a step's column: 150 px, or what the longest line of a one-step cell needs."""
    need = 0
    for c in panel.cells:
        if c.span == 1:
            need = max(need, 7.44 * len(f"{c.label} it {c.iteration}"), 6.2 * len(c.note), 5.6 * len(c.wait or ""))
    return max(150, int(need) + 16)


# The SVG's widest: steps that do not fit are drawn in bands of steps one below the other (each with the rows'
# names), rather than scaled down (the text would be too small to read).
MAX_WIDTH = 1600
_CHAR = 0.61  # width of a character of the monospace font, in units of its size (DejaVu Sans Mono: 0.602)


def _text_width(text: str, size: float) -> float:
    return _CHAR * size * len(text)


def _bands(steps: int, left: int, col: int) -> list[range]:
    """The steps of each band: as few bands as fit `MAX_WIDTH`, of equal length (but the last)."""
    fit = max(1, (MAX_WIDTH - left - 20) // col)
    count = -(-steps // fit)
    per = -(-steps // count)
    return [range(start, min(start + per, steps)) for start in range(0, steps, per)]


def _wrapped(text: str, size: float, width: float) -> list[str]:
    """`text` in lines that fit `width` px at font `size`, broken after "; " or ", " or at a space."""
    chars = max(20, int(width / (_CHAR * size)))
    lines: list[str] = []
    while len(text) > chars:
        cut = max(text.rfind("; ", 0, chars), text.rfind(", ", 0, chars))
        cut = cut + 1 if cut > 0 else text.rfind(" ", 0, chars)
        if cut <= 0:
            cut = chars
        lines.append(text[:cut].rstrip())
        text = "  " + text[cut:].lstrip()
    return [*lines, text]


def render_svg(panels: list[Panel]) -> str:
    """All panels stacked in one SVG document, at most `MAX_WIDTH` px wide (wider timelines are drawn in bands of
    steps, long titles and notes on several lines)."""
    row_h, top = 56, 40
    layouts = []
    width = 0
    for panel in panels:
        col = _column(panel)
        # the rows' names (font size 12) end 12 px before the first step's column
        left = max(90, int(10 + max(_text_width(r, 12) for r in panel.rows)) + 12)
        bands = _bands(panel.steps, left, col)
        layouts.append((panel, col, left, bands))
        text = max([_text_width(panel.title, 14), *(_text_width(n, 11) for n in panel.notes)])
        width = max(width, left + len(bands[0]) * col + 20, min(MAX_WIDTH, int(text) + 30))
    parts: list[str] = []
    y = 10
    for panel, col, left, bands in layouts:
        for i, line in enumerate(_wrapped(panel.title, 14, width - 30)):
            y += 18 if i else 0
            parts.append(f'<text x="10" y="{y + 16}" font-size="14" font-weight="bold">{escape(line)}</text>')
        for note in panel.notes:
            for line in _wrapped(note, 11, width - 30):
                y += 16
                parts.append(f'<text x="10" y="{y + 16}" font-size="11" fill="#333">{escape(line)}</text>')
        band_top: dict[int, tuple[int, range]] = {}  # step -> (the y of its band's first row, the band's steps)
        for band in bands:
            y += top
            for step in band:
                band_top[step] = (y, band)
                x = left + (step - band.start) * col
                parts.append(f'<text x="{x + 4}" y="{y - 6}" font-size="11" fill="#555">step {step}</text>')
            for group, name in enumerate(panel.rows):
                gy = y + group * row_h
                parts.append(f'<text x="10" y="{gy + row_h // 2}" font-size="12">{escape(name)}</text>')
                for cell in (c for c in panel.cells if c.group == group):
                    first, last = max(cell.step, band.start), min(cell.step + cell.span, band.stop)
                    if first < last:
                        parts += _svg_cell(panel, cell, left + (first - band.start) * col, gy, col, row_h,
                                           first, last - first)
            y += len(panel.rows) * row_h
        for event, from_step, from_row, to_step, to_row in panel.arrows:
            parts += _svg_arrow(event, band_top, from_step, from_row, to_step, to_row, left, col, row_h)
        y += 20
    height = y + 10
    body = "\n".join(parts)
    defs = ""
    if any(p.arrows for p in panels):
        defs = "<defs>" + "".join(
            f'<marker id="{event}" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
            f'<path d="M0,0 L8,4 L0,8 z" fill="{color}"/></marker>' for event, color in _ARROWS.items()) + "</defs>\n"
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'font-family="monospace">\n{defs}<rect width="100%" height="100%" fill="white"/>\n{body}\n</svg>\n')


def _svg_arrow(event: str, band_top: dict[int, tuple[int, range]], from_step: int, from_row: int, to_step: int,
               to_row: int, left: int, col: int, row_h: int) -> list[str]:
    """A signal from one partition's block to another's: from the source cell's edge facing the target row to the
    target cell's edge facing the source row; across bands, from the source to its band's right end, and from the
    target band's left end to the target."""
    color = _ARROWS[event]
    down = to_row > from_row
    (y1, band1), (y2, band2) = band_top[from_step], band_top[to_step]
    x1, y1 = left + (from_step - band1.start + 1) * col - 14, y1 + from_row * row_h + (row_h - 6 if down else 2)
    x2, y2 = left + (to_step - band2.start) * col + 12, y2 + to_row * row_h + (2 if down else row_h - 6)
    style = f'stroke="{color}" stroke-width="1.5"'
    if band1 is band2:
        return [f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" {style} marker-end="url(#{event})"/>']
    dashed = f'{style} stroke-dasharray="4 3"'
    return [f'<line x1="{x1}" y1="{y1}" x2="{left + len(band1) * col}" y2="{y1}" {dashed}/>',
            (f'<line x1="{left - 8}" y1="{y2 - 8 if down else y2 + 8}" x2="{x2}" y2="{y2}" {dashed} '
             f'marker-end="url(#{event})"/>')]


def _svg_cell(panel: Panel, cell: Cell, x: int, gy: int, col: int, row_h: int, first: int | None = None,
              span: int | None = None) -> list[str]:
    """The cell's box, or the part of it from step `first` for `span` steps (a cell cut by the end of a band: its
    text in the first part, "... label it N" in the others)."""
    first = cell.step if first is None else first
    span = cell.span if span is None else span
    parts = []
    color = _SLOT_COLORS.get(cell.kind) or _COLORS[cell.stage % len(_COLORS)]
    dash = ' stroke-dasharray="4 3"' if cell.kind == "stall" else ""
    parts.append(f'<rect x="{x}" y="{gy + 2}" width="{span * col - 6}" height="{row_h - 8}" rx="4" '
                 f'fill="{color}" stroke="#333"{dash}/>')
    if first != cell.step:
        parts.append(f'<text x="{x + 6}" y="{gy + 18}" font-size="12" fill="#555">'
                     f'... {escape(cell.label)} it {cell.iteration}</text>')
        return parts
    parts.append(f'<text x="{x + 6}" y="{gy + 18}" font-size="12" font-weight="bold">'
                 f'{escape(cell.label)} it {cell.iteration}</text>')
    if cell.note:
        parts.append(f'<text x="{x + 6}" y="{gy + 34}" font-size="10">{escape(cell.note)}</text>')
    if cell.wait:
        wx = x + col - 7 if panel.wait_at == "end" else x + 1
        parts.append(f'<line x1="{wx}" y1="{gy}" x2="{wx}" y2="{gy + row_h - 4}" stroke="#c00" '
                     f'stroke-width="3"><title>{escape(cell.wait)}</title></line>')
        parts.append(f'<text x="{x + 6}" y="{gy + 46}" font-size="9" fill="#c00">'
                     f'{escape(cell.wait)}</text>')
    return parts


# --------------------------------------------------------------------------------------------------------------------
# Files


def result_panels(result, display: str) -> list[Panel]:  # noqa: ANN001 - transpile.engine.TranslationResult
    """A panel for every loop a pipeline rule rewrote in the variant `result` (for the kernels it translated), two
    for an sm90 ring emitted in two forms."""
    target = result.target
    panels: list[Panel] = []
    for outcome in result.functions:
        if not outcome.translated:
            continue  # the variant holds the source function: Triton pipelines it
        copies: dict[int, int] = {}  # line -> loops drawn at it (a loop unswitched on a flag: one per value)
        for schedule in outcome.schedules:
            if not isinstance(schedule, (StagePlan, Sm90Ring)):
                continue
            copy = copies[schedule.line] = copies.get(schedule.line, -1) + 1
            which = f" (copy {copy + 1}: the loop once per value of a compile-time test)" if copy else ""
            if isinstance(schedule, StagePlan):
                sp = schedule
                title = (f"{display}:{sp.line} `{outcome.name}` on {target.name}: {len(sp.stages)} stages, ring of "
                         f"{sp.slots} slots, copies {sp.distance} iteration(s) ahead{which}")
                panels.append(dataclasses.replace(plan_panel(sp, title), copy=copy))
            else:
                panels += [dataclasses.replace(p, title=p.title + which, copy=copy)
                           for p in ring_panels(schedule, display)]
    return panels


def file_panels(text: str, display: str, target, gluon_always: bool = False,  # noqa: ANN001 (Target)
                tma_tiles: bool = True) -> list[Panel]:
    """The panels of the variant of `text` for `target` (see `result_panels`)."""
    from transpile.engine import translate_source

    return result_panels(translate_source(text, display, target, gluon_always=gluon_always, tma_tiles=tma_tiles),
                         display)
