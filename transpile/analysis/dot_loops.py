"""Dot loops: the loops of each jit function that run a `tl.dot`, the loops Triton's own compiler software-pipelines.

A kernel whose dot loop no pipeline rule pipelines on a target is kept as Triton in the variant (the engine's "never
slower by default" policy): this module finds those loops, whatever the spelling of the dot (`acc += tl.dot(a, b)`,
`acc = acc + tl.dot(a, b)`, `tl.dot(a, b, acc)`, `tl.dot(a, b, acc=acc)`, `tl.dot_scaled(...)`), and also loops that
call a jit helper of the same file which runs a dot itself (directly or through further helpers).

A dot loop is the innermost `for` loop around a dot: in a persistent kernel (`for tile in ...: for k in ...: dot`)
only the K loop counts. A dot inside a `tl.static_range` loop (unrolled by the compiler) belongs to the loop around
it; a dot whose only loops are unrolled or `while` loops makes that loop a dot loop too: the translated Gluon loop
stages both operands through shared memory and waits for every tile (measured at 0.28x on an H100 for a LoRA kernel
whose dots sit in a `tl.static_range` inside the K loop), while Triton keeps its own schedule.
Pure: reads the tree, never edits it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from transpile.cst_utils import calls_in
from transpile.discover import JitFunction, ModuleFacts, language_name
from transpile.source import SourceFile

DOT_NAMES = ("dot", "dot_scaled")
UNROLLED = ("static_range",)


@dataclass
class DotLoop:
    """One loop that runs a dot: the loop node of the tree the rules see, and its source line."""

    node: cst.For = field(repr=False)
    line: int
    dots: list[int]  # lines of the dots (or of the helper calls that run them) directly in this loop
    via: list[str] = field(default_factory=list)  # helpers called from the loop that run a dot


def is_dot_call(source: SourceFile, node: cst.Call) -> bool:
    return language_name(source.qualified_name(node.func)) in DOT_NAMES


def dot_loops(facts: ModuleFacts, fn: JitFunction) -> list[DotLoop]:
    """The dot loops of `fn`, in source order (found once per file and function: read them, do not change them)."""
    key = ("dot_loops", fn.name)
    if key not in facts.memo:
        facts.memo[key] = _dot_loops(facts, fn)
    return list(facts.memo[key])


def _dot_loops(facts: ModuleFacts, fn: JitFunction) -> list[DotLoop]:
    if "runs_dot" not in facts.memo:
        facts.memo["runs_dot"] = _functions_running_dots(facts)
    runs_dot = facts.memo["runs_dot"]
    source = facts.source
    found: list[DotLoop] = []
    stack: list[tuple[DotLoop, bool]] = []  # (loop, unrolled or `while`: its dots belong to a loop around it)

    class _Walker(cst.CSTVisitor):
        def visit_For(self, node: cst.For) -> None:
            stack.append((DotLoop(node, source.position(node)[0], []), is_unrolled(source, node)))

        def leave_For(self, original_node: cst.For) -> None:
            entry, _ = stack.pop()
            if entry.dots:
                found.append(entry)

        def visit_While(self, node: cst.While) -> None:
            stack.append((DotLoop(node, source.position(node)[0], []), True))  # type: ignore[arg-type]

        def leave_While(self, original_node: cst.While) -> None:
            self.leave_For(original_node)  # type: ignore[arg-type]

        def visit_Call(self, node: cst.Call) -> None:
            if not stack:
                return
            # the innermost loop Triton pipelines (not unrolled, not `while`), else the innermost loop
            entry = next((e for e, unrolled in reversed(stack) if not unrolled), stack[-1][0])
            callee = facts.callee(node.func)
            if is_dot_call(source, node):
                entry.dots.append(source.position(node)[0])
            elif callee in runs_dot and callee != fn.name:
                entry.dots.append(source.position(node)[0])
                if callee not in entry.via:
                    entry.via.append(callee)

    fn.node.body.visit(_Walker())
    return sorted(found, key=lambda loop: loop.line)


def is_unrolled(source: SourceFile, node: cst.For) -> bool:
    """A `tl.static_range` loop: unrolled by the compiler, its dots belong to the loop around it."""
    return isinstance(node.iter, cst.Call) and language_name(source.qualified_name(node.iter.func)) in UNROLLED


def _functions_running_dots(facts: ModuleFacts) -> set[str]:
    """Jit functions of the file that run a dot, directly or through the helpers they call."""
    source = facts.source
    direct = {name for name, fn in facts.functions.items() if any(
        is_dot_call(source, c) for c in calls_in(fn.node))}
    changed = True
    while changed:
        changed = False
        for name, fn in facts.functions.items():
            if name in direct:
                continue
            if any(facts.callee(c.func) in direct for c in calls_in(fn.node)):
                direct.add(name)
                changed = True
    return direct
