"""Hoist layout conversions of a variable to where it is defined.

Matches: a variable assigned once, at the top level of a jit function, that the layout plan converts at its uses
(typically an index vector used both as ``offs_k[None, :]`` and ``offs_k[:, None]``).
Emits: one ``offs_k_col = gl.convert_layout(offs_k, ...)`` right after the definition and ``offs_k_col`` at each
use, instead of a conversion per use (which, inside the main loop, would cost a shared-memory round trip per
iteration). ``_col``/``_row`` name the vector's role in an expansion (``[:, None]``/``[None, :]``).
Targets: all.
"""

from __future__ import annotations

import functools

import libcst as cst

from transpile.cst_utils import assigned_names, names_in
from transpile.rules.base import Counterexample, Example, Rule, RuleContext, statement

MATMUL_K = (
    "import triton\nimport triton.language as tl\n\n@triton.jit\n"
    "def k(a_ptr, b_ptr, K, BM: tl.constexpr, BK: tl.constexpr):\n"
    "    offs_k = tl.arange(0, BK)\n    offs_m = tl.arange(0, BM)\n"
    "    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]\n"
    "    b_ptrs = b_ptr + offs_k[:, None] * BM + offs_m[None, :]\n"
    "    for k in range(0, K, BK):\n"
    "        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k)\n"
    "        tl.store(b_ptrs, b * 2, mask=offs_k[:, None] < K - k)\n"
    "    tl.store(a_ptrs, tl.load(a_ptrs) + 1)\n"
)


OFFSETS_IN_LOOP = (
    "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
    "def k(b_ptr, K, BM: tl.constexpr, BK: tl.constexpr):\n    offs_m = tl.arange(0, BM)\n"
    "    for k in range(0, K, BK):\n        offs_k = k + tl.arange(0, BK)\n"
    "        b_ptrs = b_ptr + offs_k[:, None] * BM + offs_m[None, :]\n"
    "        b = tl.load(b_ptrs, mask=offs_k[:, None] < K)\n"
    "        tl.store(b_ptrs, b * 2, mask=offs_k[:, None] < K)\n"
)


class HoistConversions(Rule):
    name = "hoist-conversions"
    matches = "conversions of a variable defined once at the top level of a jit function"
    emits = "one converted copy after the definition, used in place of per-use conversions"
    examples = (
        Example(MATMUL_K, ("offs_k_col = gl.convert_layout(offs_k, gl.SliceLayout(1, b_ptrs_layout))",
                           "b = gl.load(b_ptrs, mask=offs_k_col[:, None] < K - k)")),
    )
    counterexamples = (
        # a name the loop binds anew each iteration has no one definition to convert after
        Counterexample(OFFSETS_IN_LOOP, ("_col = gl.convert_layout(", "_row = gl.convert_layout(")),
    )

    def leave_Name(self, ctx: RuleContext, original: cst.Name, updated: cst.BaseExpression) -> cst.BaseExpression:
        hoisted = _plan(ctx).get(original)
        return cst.Name(hoisted[0]) if hoisted is not None else updated

    def leave_FunctionDef(self, ctx: RuleContext, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        # Keyed by the variable, not by statement index: other rules may have replaced a statement by several.
        inserts: dict[str, list[str]] = {}
        for _, new_name, variable, layout in _definitions(ctx).values():
            line = f"{new_name} = gl.convert_layout({variable}, {layout})"
            if line not in inserts.setdefault(variable, []):
                inserts[variable].append(line)
        if not inserts:
            return updated
        body: list[cst.BaseStatement] = []
        for stmt in updated.body.body:
            body.append(stmt)
            for variable in sorted(assigned_names(stmt) & inserts.keys()):
                body.extend(statement(line) for line in inserts[variable])
        return updated.with_changes(body=updated.body.with_changes(body=body))


def _plan(ctx: RuleContext) -> dict[cst.Name, tuple[str, str]]:
    """Converted Name nodes -> (hoisted variable, layout); computed once per function and kept on the context."""
    if ctx.hoisted is not None:
        return ctx.hoisted[0]
    hoisted: dict[cst.Name, tuple[str, str]] = {}
    definitions: dict[tuple[str, str], tuple[int, str, str, str]] = {}
    fn = ctx.function.node
    counts, where = _assignments(fn)
    taken = names_in(fn)
    # A tile a TMA store writes goes through shared memory from any register layout: the store rule drops its
    # conversion (`DescriptorsAsTMA.store`), which a hoisted copy would hide from it.
    tma_stores = any(rule.name == "descriptors-as-tma" for rule in ctx.target.rules)
    stored = {call.args[1].value for call, (op, _) in ctx.plan.descriptor_ops.items()
              if op == "store" and len(call.args) > 1} if tma_stores else set()
    for node, term in ctx.plan.converts.items():
        if not isinstance(node, cst.Name) or counts.get(node.value) != 1 or node.value not in where \
                or node in stored:
            continue
        layout = ctx.plan.layout_expr(term)
        key = (node.value, layout)
        if key not in definitions:
            suffix = "col" if layout.startswith("gl.SliceLayout(1,") else "row" if layout.startswith(
                "gl.SliceLayout(0,") else "cvt"
            new_name = f"{node.value}_{suffix}"
            while new_name in taken:
                new_name += "_"
            taken.add(new_name)
            definitions[key] = (where[node.value], new_name, node.value, layout)
        hoisted[node] = (definitions[key][1], layout)
    ctx.hoisted = (hoisted, definitions)
    return hoisted


def _definitions(ctx: RuleContext) -> dict[tuple[str, str], tuple[int, str, str, str]]:
    _plan(ctx)
    return ctx.hoisted[1]  # type: ignore[index]


def is_hoisted(ctx: RuleContext, node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Name) and node in _plan(ctx)


@functools.lru_cache(maxsize=1024)
def _assignments(fn: cst.FunctionDef) -> tuple[dict[str, int], dict[str, int]]:
    """How often each name is bound in `fn`, and the top-level statement index of single top-level bindings (once
    per function of the source tree, for every target: read-only)."""
    counts: dict[str, int] = {p.name.value: 1 for p in fn.params.params}
    top: dict[str, int] = {}

    def bind(target: cst.BaseExpression, index: int | None) -> None:
        if isinstance(target, cst.Name):
            counts[target.value] = counts.get(target.value, 0) + 1
            if index is not None:
                top[target.value] = index
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                bind(element.value, index)

    class _Binder(cst.CSTVisitor):
        def __init__(self) -> None:
            self.index: int | None = None

        def visit_Assign(self, node: cst.Assign) -> None:
            for t in node.targets:
                bind(t.target, self.index)

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            bind(node.target, self.index)

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            bind(node.target, None)

        def visit_For(self, node: cst.For) -> None:
            bind(node.target, None)

    binder = _Binder()
    for i, stmt in enumerate(fn.body.body):
        binder.index = i if isinstance(stmt, cst.SimpleStatementLine) else None
        stmt.visit(binder)
    return counts, top
