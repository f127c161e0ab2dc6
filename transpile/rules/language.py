"""``@triton.jit`` -> ``@gluon.jit`` and ``tl.<op>`` -> ``gl.<op>`` for the language surface both share.

Matches: the jit decorator and every ``triton.language`` name inside a jit function, however it was imported
(``tl.load``, ``T.load``, ``tl.math.exp``, ``from triton.language import load``).
Emits: ``gluon.jit`` and the ``gl.`` spelling; names with no counterpart are refused (TT011) by name and line.
Targets: all.
"""

from __future__ import annotations

import libcst as cst

from transpile import language
from transpile.cst_utils import call_arguments
from transpile.rules.base import Counterexample, Example, Rule, RuleContext, expr

NOT_TRITON_KERNEL = (
    "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
    "def k(y_ptr, BLOCK: tl.constexpr):\n"
    "    tl.store(y_ptr + tl.arange(0, BLOCK), tl.empty([BLOCK], dtype=tl.float32))\n"
)
# A tensor indexed by an integer (another backend's dialect), after a barrier and a transpose: the kernel is kept
INDEXED_KERNEL = (
    "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
    "def k(x_ptr, BLOCK: tl.constexpr):\n"
    "    o = tl.arange(0, BLOCK)\n    x = tl.load(x_ptr + o[:, None] * BLOCK + o[None, :])\n"
    "    tl.debug_barrier()\n    tl.store(x_ptr + o[:, None] * BLOCK + o[None, :], tl.trans(x))\n"
    "    tl.store(x_ptr, x[0])\n"
)

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
    counterexamples = (
        # a kernel kept as Triton (a name Triton does not have) keeps its decorator and body as written
        Counterexample(NOT_TRITON_KERNEL, ("@gluon.jit", "gl.store("), "TT011", "is not a name of `triton.language`"),
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
    emits = ("the spelling of the language table (`transpile/language.py`): the `gl.` name, Triton's own standard "
             "function compiled as a Gluon function, a helper, the backend's libdevice; refuses (TT011) with the "
             "table's reason")
    examples = (
        Example(
            "from triton import jit\nfrom triton import language as T\n\n@jit\ndef k(x_ptr, BLOCK: T.constexpr):\n"
            "    x = T.load(x_ptr + T.arange(0, BLOCK))\n    T.store(x_ptr + T.arange(0, BLOCK), T.math.exp(x))\n",
            ("def k(x_ptr, BLOCK: gl.constexpr):", "gl.store(x_ptr + gl.arange(0, BLOCK, layout=x_layout), gl.exp(x))"),
        ),
        Example(
            "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x_ptr):\n"
            "    tl.store(x_ptr, tl.sigmoid(tl.load(x_ptr)))\n",
            ("_sigmoid = gluon.jit(tl_standard.sigmoid.fn)", "gl.store(x_ptr, _sigmoid(gl.load(x_ptr)))"),
        ),
        Example(
            "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x_ptr, B: tl.constexpr):\n"
            "    x = tl.load(x_ptr + tl.arange(0, B))\n    tl.store(x_ptr + tl.arange(0, B), tl.sort(x))\n",
            ("# triton-transpile: the kernel `k` is kept as Triton for gfx942: `tl.sort` at line 7: a bitonic network over",),
        ),
    )
    counterexamples = (
        Counterexample(NOT_TRITON_KERNEL, ("gl.empty(",), "TT011", "`tl.empty` is not a name of `triton.language`, "
                       "which Triton's compiler rejects too"),
    )

    def leave_Attribute(self, ctx: RuleContext, original: cst.Attribute, updated: cst.BaseExpression) -> cst.BaseExpression:
        return self._rename(ctx, original, updated)

    def leave_Name(self, ctx: RuleContext, original: cst.Name, updated: cst.BaseExpression) -> cst.BaseExpression:
        return self._rename(ctx, original, updated)

    def _rename(self, ctx: RuleContext, original: cst.BaseExpression, updated: cst.BaseExpression) -> cst.BaseExpression:
        lang = ctx.language(original)
        if lang is None or lang == "":
            return updated
        spelling = language.lookup(lang, ctx.target.backend, ctx.target.min_triton)
        if spelling is None or spelling.kind in ("own", "method", "compile_time"):
            return updated  # a submodule inside `tl.math.exp` (renamed as a whole), a rule of its own, or as written
        if spelling.kind == "refuse":
            if not language.refused_on_every_target(lang):  # else the layout analysis refused it already
                ctx.refuse(original, "TT011", spelling.text)
            return updated
        if spelling.kind == "keep":
            ctx.keep_kernel(original, f"`tl.{lang}`", spelling.text)
            return updated
        key = language.snippet_key(spelling)
        if key is not None:
            ctx.need(key)
        return expr(language.gluon_text(spelling))

    def leave_Call(self, ctx: RuleContext, original: cst.Call, updated: cst.BaseExpression) -> cst.BaseExpression:
        """`x.argmax(1)` -> `_argmax(x, 1)` (tensor methods whose Triton code Gluon cannot compile);
        `tl.broadcast_to(x, shape)` -> `x.broadcast_to(shape)` (Gluon has the method, not the function)."""
        if not isinstance(updated, cst.Call):
            return updated
        method = ctx.plan.method_calls.get(original)
        if method is not None and isinstance(updated.func, cst.Attribute):
            spelling = language.lookup(method, ctx.target.backend, ctx.target.min_triton)
            if spelling is None or spelling.kind == "refuse":
                ctx.refuse(original, "TT011", spelling.text if spelling else f"`x.{method}()` is not translated")
                return updated
            key = language.snippet_key(spelling)
            if key is not None:
                ctx.need(key)
            return cst.Call(expr(language.gluon_text(spelling)), [cst.Arg(updated.func.value), *updated.args])
        lang = ctx.language(original.func)
        short = (lang or "").rsplit(".", 1)[-1]
        keywords = {a.keyword.value: a for a in updated.args if a.keyword is not None}
        if lang is None and isinstance(updated.func, cst.Attribute) and updated.func.attr.value in ("max", "min") \
                and "return_indices" in keywords \
                and cst.Module([]).code_for_node(keywords["return_indices"].value).strip() != "False":
            method = updated.func.attr.value
            ctx.refuse(original, "TT011", f"`x.{method}(..., return_indices=True)` (the method form) is not "
                       f"translated: write `tl.{method}(x, axis, return_indices=True)`")
            return updated
        if short in ("max", "min"):
            indexed = _with_indices(updated, short)
            if indexed == "no axis":
                ctx.refuse(original, "TT011", f"`tl.{short}(..., return_indices=True)` over the whole tensor (no "
                           "axis) is not translated: reduce along an axis, or flatten it first")
                return updated
            if isinstance(indexed, cst.Call):
                ctx.need(f"{short}_with_indices")
                return indexed
        if short.startswith("atomic_") and short not in ("atomic_cas",):
            # `tl.atomic_add(ptrs, 1, mask=m)`, `tl.atomic_add(ptrs, tl.sum(x))`: a scalar value broadcast to the
            # pointers (Triton 3.6's Gluon does not)
            positional = [a for a in updated.args if a.keyword is None]
            value = keywords.get("val") or (positional[1] if len(positional) > 1 else None)
            pointer = keywords.get("pointer") or (positional[0] if positional else None)
            index = list(updated.args).index(value) if value is not None else -1
            scalar = 0 <= index < len(original.args) and original.args[index].value in ctx.plan.scalar_operands
            if value is not None and pointer is not None and (_scalar_literal(value.value) or scalar):
                ctx.need("scalar_operand")
                wrapped = cst.Call(cst.Name("_scalar_operand"), [cst.Arg(pointer.value), cst.Arg(value.value)])
                updated = updated.with_changes(args=[a.with_changes(value=wrapped) if a is value else a
                                                     for a in updated.args])
        method_reshape = isinstance(original.func, cst.Attribute) and original.func.attr.value == "reshape" \
            and lang is None  # `x.reshape(..., can_reorder=True)`
        if (short == "reshape" or method_reshape) and "can_reorder" in keywords and \
                cst.Module([]).code_for_node(keywords["can_reorder"].value).strip() != "False":
            ctx.refuse(original, "TT011", "`tl.reshape(..., can_reorder=True)` lets Triton's compiler reorder the "
                       "elements; Gluon's reshape keeps them in order, which need not give the same tensor")
            return updated
        spelling = language.lookup(lang, ctx.target.backend, ctx.target.min_triton) if lang else None
        if spelling is not None and spelling.kind == "method" and updated.args and updated.args[0].keyword is None:
            first, *rest = updated.args
            return cst.Call(cst.Attribute(first.value, cst.Name(spelling.text)),
                            [a.with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT) for a in rest])
        return updated


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
    counterexamples = (
        Counterexample(INDEXED_KERNEL, ("_cta_barrier()",), "TT010", "`x[0]` indexes or slices a tensor"),
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
    counterexamples = (
        Counterexample(INDEXED_KERNEL, ("gl.permute(",), "TT010", "`x[0]` indexes or slices a tensor"),
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


def _scalar_literal(node: cst.BaseExpression) -> bool:
    """A number, or a sign applied to one."""
    while isinstance(node, cst.UnaryOperation):
        node = node.expression
    return isinstance(node, (cst.Integer, cst.Float))


#: `tl.max`/`tl.min`'s parameters, in order.
_MAX_PARAMS = ("input", "axis", "return_indices", "return_indices_tie_break_left", "keep_dims")


def _with_indices(call: cst.Call, short: str) -> cst.Call | str | None:
    """`tl.max(x, axis, return_indices=True, ...)` (or `tl.min`) as `_max_with_indices(x, axis, tie_break_left=...,
    keep_dims=...)`, which returns the values and their indices as Triton's does (Gluon's `max` returns no indices);
    None where the call does not ask for indices, "no axis" where it reduces the whole tensor."""
    bound = {param: arg for param, arg in call_arguments(call, _MAX_PARAMS) if param is not None}
    flag = bound.get("return_indices")
    if flag is None or cst.Module([]).code_for_node(flag.value).strip() == "False":
        return None
    if "axis" not in bound or cst.Module([]).code_for_node(bound["axis"].value).strip() == "None":
        return "no axis"
    args = [cst.Arg(bound[p].value) for p in ("input", "axis") if p in bound]
    for param, keyword in (("return_indices_tie_break_left", "tie_break_left"), ("keep_dims", "keep_dims")):
        if param in bound:
            args.append(cst.Arg(bound[param].value, keyword=cst.Name(keyword), equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))))
    return cst.Call(cst.Name(f"_{short}_with_indices"), args)
