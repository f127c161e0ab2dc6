"""Loop facts for `transpile explain`: each loop of a kernel with the dots and loads inside it."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from transpile.analysis.layouts import LayoutPlan
from transpile.discover import language_name
from transpile.source import SourceFile

PIPELINE_HINTS = ("num_stages", "loop_unroll_factor", "warp_specialize")


@dataclass
class LoopFacts:
    line: int
    kind: str  # "range", "tl.range", "static_range", "while"
    hints: dict[str, str]  # scheduling hints given in the source (num_stages=3, ...)
    dots: list[int] = field(default_factory=list)  # lines
    loads: list[int] = field(default_factory=list)
    stores: list[int] = field(default_factory=list)
    depth: int = 0


def loop_facts(source: SourceFile, fn: cst.FunctionDef, plan: LayoutPlan) -> list[LoopFacts]:
    loops: list[LoopFacts] = []
    stack: list[LoopFacts] = []

    class _Walker(cst.CSTVisitor):
        def visit_For(self, node: cst.For) -> None:
            kind, hints = "for", {}
            if isinstance(node.iter, cst.Call):
                lang = language_name(source.qualified_name(node.iter.func))
                if lang is not None:
                    kind = f"tl.{lang}"
                elif isinstance(node.iter.func, cst.Name):
                    kind = node.iter.func.value
                hints = {a.keyword.value: source.code(a.value).strip() for a in node.iter.args
                         if a.keyword is not None and a.keyword.value in PIPELINE_HINTS}
            facts = LoopFacts(source.position(node)[0], kind, hints, depth=len(stack))
            loops.append(facts)
            stack.append(facts)

        def leave_For(self, node: cst.For) -> None:
            stack.pop()

        def visit_While(self, node: cst.While) -> None:
            facts = LoopFacts(source.position(node)[0], "while", {}, depth=len(stack))
            loops.append(facts)
            stack.append(facts)

        def leave_While(self, node: cst.While) -> None:
            stack.pop()

        def visit_Call(self, node: cst.Call) -> None:
            if not stack:
                return
            line = source.position(node)[0]
            lang = language_name(source.qualified_name(node.func))
            op = plan.descriptor_ops.get(node)
            if node in plan.dots:
                stack[-1].dots.append(line)
            elif lang in ("load", "core.load") or (op is not None and op[0] == "load"):
                stack[-1].loads.append(line)
            elif lang in ("store", "core.store") or (op is not None and op[0] == "store") or (
                lang is not None and lang.startswith("atomic_")
            ):
                stack[-1].stores.append(line)

    fn.visit(_Walker())
    return loops
