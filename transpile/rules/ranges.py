"""``tl.range(...)`` loops -> plain ``range(...)`` loops.

Matches: ``for i in tl.range(start, end, step, num_stages=.., loop_unroll_factor=.., ...)``.
Emits: ``for i in range(start, end, step)``; Gluon pipelines explicitly, so the scheduling hints leave the call and
``num_stages`` stays readable as a comment (the pipelining rules read it from the source as the ring depth).
Targets: all.
"""

from __future__ import annotations

import libcst as cst

from transpile.rules.base import Counterexample, Example, Rule, RuleContext, expr

HINTS = ("num_stages", "loop_unroll_factor", "disallow_acc_multi_buffer", "flatten", "warp_specialize",
         "disable_licm")


STATIC_RANGE = (
    "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
    "def k(x_ptr, BLOCK: tl.constexpr):\n    acc = tl.zeros([BLOCK], dtype=tl.float32)\n"
    "    for i in tl.static_range(4):\n        acc += tl.load(x_ptr + i * BLOCK + tl.arange(0, BLOCK))\n"
    "    tl.store(x_ptr + tl.arange(0, BLOCK), acc)\n"
)


class Ranges(Rule):
    name = "ranges"
    matches = "`tl.range(...)` with scheduling hints"
    emits = "`range(...)`; `num_stages` kept as a comment on the loop"
    examples = (
        Example(
            "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x_ptr, n):\n"
            "    for i in tl.range(0, n, num_stages=3):\n        tl.store(x_ptr + i, i)\n",
            ("for i in range(0, n):  # tl.range(num_stages=3): ring depth for the pipelined variants",),
        ),
    )
    counterexamples = (
        # `tl.static_range` unrolls at compile time: it stays a static range, not a `range`
        Counterexample(STATIC_RANGE, ("for i in range(4)",)),
    )

    def leave_Call(self, ctx: RuleContext, original: cst.Call, updated: cst.BaseExpression) -> cst.BaseExpression:
        if ctx.language(original.func) not in ("range", "core.range") or not isinstance(updated, cst.Call):
            return updated
        args = [a for a in updated.args if a.keyword is None or a.keyword.value not in HINTS]
        if args:
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(func=expr("range"), args=args)

    def leave_For(self, ctx: RuleContext, original: cst.For, updated: cst.For) -> cst.BaseStatement:
        it = original.iter
        if not isinstance(it, cst.Call) or ctx.language(it.func) not in ("range", "core.range"):
            return updated
        hints = [f"{a.keyword.value}={ctx.source.code(a.value).strip()}" for a in it.args
                 if a.keyword is not None and a.keyword.value in HINTS]
        body = updated.body
        if not hints or not isinstance(body, cst.IndentedBlock) or body.header.comment is not None:
            return updated
        note = f"# tl.range({', '.join(hints)}): ring depth for the pipelined variants"
        header = body.header.with_changes(whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(note))
        return updated.with_changes(body=body.with_changes(header=header))
