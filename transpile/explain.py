"""`transpile explain`: per kernel, its loops with their dots and loads, its layouts, and what was emitted or why not."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from transpile.analysis.layouts import analyse_layouts
from transpile.analysis.loops import loop_facts
from transpile.discover import discover
from transpile.engine import translate_source
from transpile.source import parse_source, read_text
from transpile.targets import Target


def explain_file(path: Path, target: Target, display: str) -> list[Table]:
    text = read_text(path)
    result = translate_source(text, display, target)
    source = parse_source(text, display)
    facts = discover(source)
    plans = analyse_layouts(facts)
    outcomes = {o.name: o for o in result.functions}
    tables: list[Table] = []
    for fn in facts.functions.values():
        outcome = outcomes[fn.name]
        plan = plans[fn.name]
        kind = "helper" if fn.is_helper else "kernel"
        status = "translated" if outcome.translated else "NOT translated"
        table = Table(title=f"{display}:{source.position(fn.node)[0]} {kind} `{fn.name}` for {target.name}: {status}",
                      show_lines=False, title_justify="left")
        table.add_column("what")
        table.add_column("line")
        table.add_column("detail")
        for loop in loop_facts(source, fn.node, plan):
            hints = ", ".join(f"{k}={v}" for k, v in loop.hints.items())
            detail = (f"{'  ' * loop.depth}{loop.kind}{f' ({hints})' if hints else ''}: {len(loop.dots)} dot(s)"
                      f"{' at ' + ', '.join(map(str, loop.dots)) if loop.dots else ''}, {len(loop.loads)} load(s)"
                      f"{' at ' + ', '.join(map(str, loop.loads)) if loop.loads else ''}")
            table.add_row("loop", str(loop.line), detail)
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
