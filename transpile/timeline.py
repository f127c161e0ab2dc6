"""Timelines of warp-pipelined loops: which warp group runs which stage of which iteration, when.

Drawn from the `StagePlan` the AMD warp-pipeline rules emit (`transpile.analysis.stages`), so the picture is the
schedule of the code, not a separate description of it. The lowering runs the plan's stages on two warp groups one
stage apart: at step ``t`` group ``g`` runs stage ``(t - g) mod S`` of iteration ``(t - g) div S``. A stage that
reads operands reads ring slot ``it mod slots``; the stage that issues the copies fills slot
``(it + distance) mod slots``; the plan's wait (asynchronous copy engines) stands after the read stage.

`render_svg(panels)` writes a self-contained SVG (no dependency); `render_text(panel)` the same grid as rich text.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from transpile.analysis.stages import StagePlan

GROUPS = 2
_COLORS = ("#cfe2ff", "#d1e7dd", "#fff3cd", "#f8d7da", "#e2d9f3", "#d3d3d3")
_READS = ("lds_read",)


@dataclass(frozen=True)
class Cell:
    """One stage of one iteration on one warp group."""

    step: int
    group: int
    stage: int
    label: str
    iteration: int
    note: str  # the ring slots it reads or fills
    wait: str | None  # a wait this stage ends with, or None


@dataclass(frozen=True)
class Panel:
    """The timeline of one pipelined loop."""

    title: str
    cells: tuple[Cell, ...]
    steps: int
    stages: tuple[str, ...]


def plan_panel(sp: StagePlan, title: str, iterations: int = 3) -> Panel:
    """The cells of `iterations` iterations of the loop `sp` plans, on its two warp groups."""
    labels = tuple(s.label for s in sp.stages)
    count = len(labels)
    copy_stage = next((i for i, s in enumerate(sp.stages) if s.label.startswith("copy")), None)
    cells: list[Cell] = []
    steps = iterations * count + GROUPS - 1
    for step in range(steps):
        for group in range(GROUPS):
            local = step - group
            if local < 0:
                continue
            iteration, stage = divmod(local, count)
            if iteration >= iterations:
                continue
            label = labels[stage]
            notes = []
            if label in _READS:
                notes.append(f"reads slot {iteration % sp.slots}")
            if stage == copy_stage:
                notes.append(f"fills slot {(iteration + sp.distance) % sp.slots} (it {iteration + sp.distance})")
            wait = sp.wait.format(n=max(sp.slots - 3, 0)) if sp.wait and stage == 0 else None
            cells.append(Cell(step, group, stage, label, iteration, "; ".join(notes), wait))
    return Panel(title, tuple(cells), steps, labels)


def render_text(panel: Panel) -> list[str]:
    """The panel as lines of text: one row per warp group, one column per step."""
    width = max(len(_cell_text(c)) for c in panel.cells) + 2
    lines = [panel.title, " " * 10 + "".join(f"step {s}".ljust(width) for s in range(panel.steps))]
    for group in range(GROUPS):
        row = {c.step: c for c in panel.cells if c.group == group}
        lines.append(f"group {group}".ljust(10) + "".join(
            (_cell_text(row[s]) if s in row else "-").ljust(width) for s in range(panel.steps)))
    for cell in (c for c in panel.cells if c.group == 0 and (c.note or c.wait)):
        detail = "; ".join(x for x in (cell.note, f"then {cell.wait}" if cell.wait else "") if x)
        lines.append(f"  {_cell_text(cell)}: {detail}")
    return lines


def _cell_text(cell: Cell) -> str:
    return f"{cell.label}[it {cell.iteration}]"


def render_svg(panels: list[Panel]) -> str:
    """All panels stacked in one SVG document."""
    col, row_h, left, top = 150, 56, 90, 40
    parts: list[str] = []
    y = 10
    width = left + max(p.steps for p in panels) * col + 20
    for panel in panels:
        parts.append(f'<text x="10" y="{y + 16}" font-size="14" font-weight="bold">{escape(panel.title)}</text>')
        y += top
        for step in range(panel.steps):
            parts.append(f'<text x="{left + step * col + 4}" y="{y - 6}" font-size="11" fill="#555">step {step}</text>')
        for group in range(GROUPS):
            gy = y + group * row_h
            parts.append(f'<text x="10" y="{gy + row_h // 2}" font-size="12">warp group {group}</text>')
            for cell in (c for c in panel.cells if c.group == group):
                x = left + cell.step * col
                color = _COLORS[cell.stage % len(_COLORS)]
                parts.append(f'<rect x="{x}" y="{gy + 2}" width="{col - 6}" height="{row_h - 8}" rx="4" '
                             f'fill="{color}" stroke="#333"/>')
                parts.append(f'<text x="{x + 6}" y="{gy + 18}" font-size="12" font-weight="bold">'
                             f'{escape(cell.label)} it {cell.iteration}</text>')
                if cell.note:
                    parts.append(f'<text x="{x + 6}" y="{gy + 34}" font-size="10">{escape(cell.note)}</text>')
                if cell.wait:
                    wx = x + col - 7
                    parts.append(f'<line x1="{wx}" y1="{gy}" x2="{wx}" y2="{gy + row_h - 4}" stroke="#c00" '
                                 f'stroke-width="3"><title>{escape(cell.wait)}</title></line>')
                    parts.append(f'<text x="{x + 6}" y="{gy + 46}" font-size="9" fill="#c00">'
                                 f'{escape(cell.wait)}</text>')
        y += GROUPS * row_h + 20
    height = y + 10
    body = "\n".join(parts)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'font-family="monospace">\n<rect width="100%" height="100%" fill="white"/>\n{body}\n</svg>\n')


def file_panels(text: str, display: str, target) -> list[Panel]:  # noqa: ANN001 (a transpile.targets.Target)
    """A panel for every loop of `text` the target's warp-pipeline rule pipelines (none for other targets)."""
    from transpile.engine import prepare
    from transpile.explain import stage_plans

    prepared = prepare(text, display)  # the canonical text the rules read (same lines as the source)
    panels: list[Panel] = []
    for fn in prepared.facts.functions.values():
        for _, sp in stage_plans(prepared.source, fn, prepared.plans[fn.name], target):
            if isinstance(sp, StagePlan):
                title = (f"{display}:{sp.line} `{fn.name}` on {target.name}: {len(sp.stages)} stages, ring of "
                         f"{sp.slots} slots, copies {sp.distance} iteration(s) ahead")
                panels.append(plan_panel(sp, title))
    return panels
