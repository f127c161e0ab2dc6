"""``@triton.jit`` -> ``@gluon.jit`` and ``tl.<op>`` -> ``gl.<op>`` for the language surface both share.

Matches: the jit decorator and every ``triton.language`` name inside a jit function, however it was imported
(``tl.load``, ``T.load``, ``tl.math.exp``, ``from triton.language import load``).
Emits: ``gluon.jit`` and the ``gl.`` spelling; names with no counterpart are refused (TT011) by name and line.
Targets: all.
"""

from __future__ import annotations

import libcst as cst

from transpile.rules.base import Example, Rule, RuleContext, expr

# Names spelled the same in triton.language and in Gluon's language module, in Triton 3.6 and 3.9 alike.
SHARED = frozenset(
    """
    program_id num_programs arange zeros zeros_like full full_like load store where cdiv maximum minimum exp exp2 log
    log2 sqrt sqrt_rn rsqrt abs cos sin erf floor ceil fma fdiv div_rn umulhi sum max min xor_sum reduce reduce_or
    associative_scan atomic_add atomic_max atomic_min atomic_and atomic_or atomic_xor atomic_xchg atomic_cas
    multiple_of max_contiguous max_constancy static_range static_assert static_print device_print device_assert cast
    permute reshape ravel float16 bfloat16 float32 float64 int1 int8 int16 int32 int64 uint8 uint16 uint32 uint64
    float8e4nv float8e5 float8e4b15 float8e4b8 float8e5b16 constexpr tensor pointer_type dtype assume
    """.split()
)
# Only in Triton 3.9's Gluon: fine for the AMD targets (which need 3.9 anyway), refused where 3.6 must compile too.
NEWER = frozenset({"cumsum", "cumprod"})
# Submodules of triton.language: only the names inside them are translated.
SUBMODULES = frozenset({"math", "core", "standard", "semantic", "extra", "extra.cuda", "extra.libdevice"})
# Handled by their own rules (dot, descriptors, ranges, transposes, barriers).
OWN_RULE = frozenset({"dot", "make_tensor_descriptor", "range", "trans", "debug_barrier"})


def gluon_name(lang: str, target_min_triton: tuple[int, int]) -> str | None:
    """``math.exp`` -> ``gl.exp``; None when Gluon has no such name (for this target's minimum Triton)."""
    name = lang.rsplit(".", 1)[-1]
    module = lang.rsplit(".", 1)[0] if "." in lang else ""
    if module not in ("", "math", "core", "standard", "semantic"):
        return None
    if name in SHARED or (name in NEWER and target_min_triton >= (3, 9)):
        return f"gl.{name}"
    return None


class JitDecorator(Rule):
    name = "jit-decorator"
    matches = "`@triton.jit` (any import spelling), with or without arguments"
    emits = "`@gluon.jit` with the same arguments; `@triton.autotune`/`@triton.heuristics` stay as they are"
    examples = (
        Example(
            "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x_ptr):\n    tl.store(x_ptr, 1)\n",
            ("@gluon.jit", "gl.store(x_ptr, 1)"),
        ),
    )

    def leave_FunctionDef(self, ctx: RuleContext, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        decorators = []
        for before, after in zip(original.decorators, updated.decorators):
            if before is ctx.function.jit_decorator:
                target = after.decorator
                if isinstance(target, cst.Call):
                    after = after.with_changes(decorator=target.with_changes(func=expr("gluon.jit")))
                else:
                    after = after.with_changes(decorator=expr("gluon.jit"))
            decorators.append(after)
        return updated.with_changes(decorators=decorators)


class LanguageNames(Rule):
    name = "language-names"
    matches = "`triton.language` names inside jit functions: ops, math, dtypes, `constexpr`"
    emits = "the `gl.` name; refuses (TT011) a name Gluon lacks"
    examples = (
        Example(
            "from triton import jit\nfrom triton import language as T\n\n@jit\ndef k(x_ptr, BLOCK: T.constexpr):\n"
            "    x = T.load(x_ptr + T.arange(0, BLOCK))\n    T.store(x_ptr + T.arange(0, BLOCK), T.math.exp(x))\n",
            ("def k(x_ptr, BLOCK: gl.constexpr):", "gl.store(x_ptr + gl.arange(0, BLOCK, layout=x_layout), gl.exp(x))"),
        ),
        Example(
            "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x_ptr):\n"
            "    tl.store(x_ptr, tl.sigmoid(tl.load(x_ptr)))\n",
            ("x.py:6:21: TT011 `tl.sigmoid` has no Gluon translation in this tool",),
        ),
    )

    def leave_Attribute(self, ctx: RuleContext, original: cst.Attribute, updated: cst.BaseExpression) -> cst.BaseExpression:
        return self._rename(ctx, original, updated)

    def leave_Name(self, ctx: RuleContext, original: cst.Name, updated: cst.BaseExpression) -> cst.BaseExpression:
        return self._rename(ctx, original, updated)

    def _rename(self, ctx: RuleContext, original: cst.BaseExpression, updated: cst.BaseExpression) -> cst.BaseExpression:
        lang = ctx.language(original)
        if lang is None or lang == "":
            return updated
        short = lang.rsplit(".", 1)[-1]
        if short in OWN_RULE:
            return updated
        if lang in SUBMODULES:
            return updated  # `tl.math` inside `tl.math.exp`: the outer attribute is renamed as a whole
        new = gluon_name(lang, ctx.target.min_triton)
        if new is None:
            ctx.refuse(original, "TT011", f"`tl.{lang}` has no Gluon translation in this tool")
            return updated
        return expr(new)


class Barrier(Rule):
    name = "barrier"
    matches = "`tl.debug_barrier()`"
    emits = "`_cta_barrier()`: a module-level alias of `gl.barrier` (Triton 3.9) or `gl.thread_barrier` (3.6)"
    examples = (
        Example(
            "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x_ptr):\n    tl.debug_barrier()\n",
            ("_cta_barrier()", '_cta_barrier = getattr(gl, "barrier", None) or gl.thread_barrier'),
        ),
    )

    def leave_Call(self, ctx: RuleContext, original: cst.Call, updated: cst.BaseExpression) -> cst.BaseExpression:
        if ctx.language(original.func) in ("debug_barrier", "core.debug_barrier") and isinstance(updated, cst.Call):
            ctx.need("cta_barrier")
            return updated.with_changes(func=expr("_cta_barrier"))
        return updated


class Transpose(Rule):
    name = "transpose"
    matches = "`tl.trans(x)`, `x.trans()` and `x.T` on 2-D tensors"
    emits = "`gl.permute(x, [1, 0])` (Gluon derives the permuted layout)"
    examples = (
        Example(
            "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x_ptr, B: tl.constexpr):\n"
            "    o = tl.arange(0, B)\n    x = tl.load(x_ptr + o[:, None] * B + o[None, :])\n"
            "    tl.store(x_ptr + o[:, None] * B + o[None, :], tl.trans(x))\n",
            ("gl.convert_layout(gl.permute(x, [1, 0]), x_layout)",),
        ),
    )

    def leave_Call(self, ctx: RuleContext, original: cst.Call, updated: cst.BaseExpression) -> cst.BaseExpression:
        if not isinstance(updated, cst.Call):
            return updated
        if ctx.language(original.func) in ("trans", "core.trans"):
            if len(updated.args) != 1:
                return updated.with_changes(func=expr("gl.permute"))
            return cst.Call(expr("gl.permute"), [updated.args[0].with_changes(comma=cst.MaybeSentinel.DEFAULT),
                                                 cst.Arg(expr("[1, 0]"))])
        if original in ctx.plan.transposes:  # x.trans()
            base = updated.func.value  # type: ignore[attr-defined]
            return cst.Call(expr("gl.permute"), [cst.Arg(base), cst.Arg(expr("[1, 0]"))])
        return updated

    def leave_Attribute(self, ctx: RuleContext, original: cst.Attribute, updated: cst.BaseExpression) -> cst.BaseExpression:
        if original in ctx.plan.transposes and isinstance(updated, cst.Attribute):  # x.T
            return cst.Call(expr("gl.permute"), [cst.Arg(updated.value), cst.Arg(expr("[1, 0]"))])
        return updated

