"""Explicit layouts from the layout plan (`transpile.analysis.layouts`).

Matches: tensor creation sites (``tl.arange``, ``tl.zeros``, ``tl.full``), the start of each jit function, every
node the plan marks for a conversion or an expansion, and ``a, b = helper(...)`` of helpers returning tensor tuples.
Emits: ``layout=`` arguments; one ``<name>_layout: gl.constexpr = ...`` declaration per layout class at the top of the
function, computed at compile time by the emitted ``@gluon.constexpr_function`` helpers from the function's own
constexpr block sizes and ``gl.num_warps()``; ``gl.convert_layout`` where two constraints disagree; ``x[None, :]``
where Triton broadcasts a lower-rank tensor implicitly (the engine applies conversions and expansions to every node);
``a = gl.convert_layout(a, ...)`` after unpacking a helper's tuple.
Targets: all.
"""

from __future__ import annotations

import libcst as cst

from transpile import cst_walk
from transpile.cst_utils import assigned_names, bound_names, call_arguments, calls_in, is_docstring, names_in
from transpile.analysis.layouts import Term

from transpile.rules.base import Counterexample, Example, Rule, RuleContext, bare, call, statement, with_keyword

CREATIONS = ("arange", "zeros", "full", "histogram")


BROADCAST_NUMBER = (
    "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
    "def k(y_ptr, BLOCK: tl.constexpr):\n"
    "    tl.store(y_ptr + tl.arange(0, BLOCK), tl.broadcast_to(0.0, (BLOCK,)))\n"
)


class CreationLayouts(Rule):
    name = "creation-layouts"
    matches = "`tl.arange`, `tl.zeros`, `tl.full` in a jit function"
    emits = "the same call with `layout=` the layout of its class (a slice of a 2-D layout for `x[:, None]` uses)"
    examples = (
        Example(
            "import triton\nimport triton.language as tl\n\n@triton.jit\n"
            "def k(x_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):\n"
            "    rows = tl.arange(0, BLOCK_M)\n    cols = tl.arange(0, BLOCK_N)\n"
            "    ptrs = x_ptr + rows[:, None] * N + cols[None, :]\n"
            "    tl.store(ptrs, tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32), mask=rows[:, None] < M)\n",
            (
                "ptrs_layout: gl.constexpr = _blocked_layout([BLOCK_M, BLOCK_N], gl.num_warps())",
                "rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, ptrs_layout))",
                "cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, ptrs_layout))",
                "gl.zeros([BLOCK_M, BLOCK_N], dtype=gl.float32, layout=ptrs_layout)",
            ),
        ),
    )
    counterexamples = (
        # a number broadcast: its element type is not the source's to give (a 0-d tensor is filled in its layout)
        Counterexample(BROADCAST_NUMBER, ("gl.full([BLOCK], 0.0",), "TT010", "`tl.broadcast_to` of a scalar"),
    )

    def leave_Call(self, ctx: RuleContext, original: cst.Call, updated: cst.BaseExpression) -> cst.BaseExpression:
        like = ctx.plan.shaped_like.get(original)
        if like is not None and isinstance(updated, cst.Call):  # (`tl.full(x.shape, ...)`, x of unknown rank)
            return with_keyword(updated, "layout", cst.parse_expression(f"{like}.type.layout"))
        if original not in ctx.plan.creations or not isinstance(updated, cst.Call):
            return updated
        lang = ctx.language(original.func)
        if lang is not None and lang.rsplit(".", 1)[-1] == "broadcast_to":
            # `tl.broadcast_to(s, shape)` of a 0-d tensor: filled with it in its layout, as `s[None]` is
            value, rest = updated.args[0].value, updated.args[1:]
            if isinstance(updated.func, cst.Attribute) and len(updated.args) < len(original.args):
                value, rest = updated.func.value, updated.args  # (spelt as a method by now: `s.broadcast_to(shape)`)
            positional = [a.value for a in rest if a.keyword is None]
            if len(positional) == 1 and isinstance(positional[0], (cst.List, cst.Tuple)):
                positional = [e.value for e in positional[0].elements]
            shape = cst.List([cst.Element(d) for d in positional])
            return _filled(ctx, original, value, shape)
        if lang is None or lang.rsplit(".", 1)[-1] not in CREATIONS:
            return updated  # descriptor loads: the descriptor rules use the layout
        return with_keyword(updated, "layout", ctx.layout(original))

    def leave_Subscript(self, ctx: RuleContext, original: cst.Subscript, updated: cst.BaseExpression
                        ) -> cst.BaseExpression:
        """`s[None]` (or `s[None, :]`) of a 0-d tensor (the analysis made it a creation): the tensor of ones filled
        with `s` in its layout, `gl.full` inline for a name, `_expand_scalar` (the value evaluated once) for an
        expression."""
        if original not in ctx.plan.creations or not isinstance(updated, cst.Subscript):
            return updated
        # (one axis per None: a `:` of a 0-d value takes no axis, as Triton up to 3.6 reads `pid[None, :]`)
        shape = cst.List([cst.Element(cst.Integer("1")) for e in updated.slice
                          if isinstance(e.slice, cst.Index) and isinstance(e.slice.value, cst.Name)
                          and e.slice.value.value == "None"])
        return _filled(ctx, original, updated.value, shape)


def _filled(ctx: RuleContext, original: cst.CSTNode, value: cst.BaseExpression, shape: cst.List) -> cst.Call:
    """A tensor of `shape` filled with the 0-d tensor `value`, in the layout of `original`'s class: `gl.full` inline
    for a name, `_expand_scalar` (the value evaluated once) for an expression."""
    layout = cst.parse_expression(ctx.layout(original))
    if isinstance(value, cst.Name):
        return cst.Call(cst.parse_expression("gl.full"), [
            cst.Arg(shape), cst.Arg(value), cst.Arg(cst.Attribute(value, cst.Name("dtype"))),
            cst.Arg(layout, keyword=cst.Name("layout"), equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))])
    ctx.need("expand_scalar")
    return cst.Call(cst.Name("_expand_scalar"), [cst.Arg(value), cst.Arg(shape), cst.Arg(layout)])


class LayoutDeclarations(Rule):
    name = "layout-declarations"
    matches = "each jit function with at least one layout class"
    emits = "`<name>_layout: gl.constexpr = ...` declarations at the top of the body; helper parameters converted on entry"
    examples = CreationLayouts.examples
    counterexamples = (
        # a kernel kept as Triton declares no layouts
        Counterexample(BROADCAST_NUMBER, ("_layout: gl.constexpr",), "TT010", "`tl.broadcast_to` of a scalar"),
    )

    def leave_FunctionDef(self, ctx: RuleContext, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        plan = ctx.plan
        lines: list[str] = []
        optional, numbers = _optional_params(ctx)
        entry = [f"if {param} is not None:  # a caller may pass None\n"
                 f"    {param} = gl.convert_layout({param}, {plan.layout_expr(term)})" if param in optional else
                 f"if isinstance({param}, gl.tensor):  # a caller may pass a number (a constexpr or a scalar)\n"
                 f"    if {param}.type.is_block():\n"
                 f"        {param} = gl.convert_layout({param}, {plan.layout_expr(term)})" if param in numbers else
                 f"{param} = gl.convert_layout({param}, {plan.layout_expr(term)})"
                 for param, term in plan.param_converts.items()]
        # Per statement: those the rules left alone are the source's own nodes, their names found once for every target.
        used = (set().union(*(names_in(s) for s in updated.body.body))
                if isinstance(updated.body, cst.IndentedBlock) else names_in(updated.body))
        used |= {n for line in entry for n in names_in(statement(line))}
        lines = declaration_lines(ctx, used)
        if not lines and not entry:
            return updated
        new = [
            *_commented(lines, "# Layouts, computed at compile time from the block sizes and the number of warps.", *(
                ["# A `gl.split` operand's layout is made as for a tile of unknown (0) leading sizes, so that each",
                 "# thread holds its last dimension whole (which split needs)."]
                if any(root.whole_last for name, _, root in plan.declarations if name in used) else [])),
            *_commented(entry, "# Tensor arguments arrive in the caller's layouts: bring them to this helper's."),
        ]
        body = list(updated.body.body)
        at = 1 if body and is_docstring(body[0]) else 0
        # After the function's own definitions of names the layouts read (`UNROLL: tl.constexpr = 4` at the top of the
        # body: read before it, the name is the module's): where no statement before those uses a layout.
        reads = {n for line in [*lines, *entry] for n in names_in(statement(line))} - {
            p.name for p in ctx.function.params}  # (a parameter rebound, `a_ptr += offset`, keeps its dtype)
        declared = {line.split(":", 1)[0] for line in lines}
        last = max((i for i, s in enumerate(body[at:], at) if bound_names(s) & reads), default=None)
        if last is not None and not any(names_in(s) & declared for s in body[at:last + 1]):
            at = last + 1
        body[at:at] = new
        ctx.declared = (at, len(new))
        # Keep a blank line between the declarations and the code they precede.
        if at + len(new) < len(body):
            following = body[at + len(new)]
            if not following.leading_lines:  # type: ignore[union-attr]
                body[at + len(new)] = following.with_changes(leading_lines=[cst.EmptyLine(indent=False)])  # type: ignore[union-attr]
        return updated.with_changes(body=updated.body.with_changes(body=body))


def declaration_lines(ctx: RuleContext, used: set[str]) -> list[str]:
    """`<name>: gl.constexpr = <layout>` for each layout of the function's plan that `used` names."""
    lines = []
    for name, kind, root in ctx.plan.declarations:
        if name not in used:  # e.g. a store conversion a target's rule made unnecessary
            continue
        if kind == "mma":
            value = ctx.target.mma_layout_expr(ctx, root)
        elif kind == "operand":  # (anchored for an AMD pipeline: `LayoutAnalysis.operand_anchors`)
            position, _, dtype, mma = root.operand
            ctx.need("mma_k_width")
            layout = ctx.plan.layout_expr(mma)
            value = f"gl.DotOperandLayout({position}, {layout}, _mma_k_width({dtype}, {layout}))"
        else:
            ctx.need("blocked_layout")
            # An unknown size is written 0 (Triton 3.6 cannot pass a list holding None to a constexpr function).
            dims = list(root.shape or [None] * (root.rank or 1))
            if root.whole_last:  # the other dimensions' sizes left out: each thread then holds the last one whole
                dims = [None] * (len(dims) - 1) + dims[-1:]
            shape = ", ".join(s if s is not None else "0" for s in dims)
            value = f"_blocked_layout([{shape}], gl.num_warps(){_reduced_argument(root)})"
        lines.append(f"{name}: gl.constexpr = {value}")
    return lines


TUPLE_OF_SCALARS = (
    "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
    "def lohi(x):\n    return x >> 32, x & 0xFFFFFFFF\n\n\n@triton.jit\n"
    "def k(y_ptr, seed, BLOCK: tl.constexpr):\n    hi, lo = lohi(seed)\n"
    "    tl.store(y_ptr + tl.arange(0, BLOCK), tl.zeros([BLOCK], dtype=tl.int64) + hi + lo)\n"
)


class HelperTupleConversions(Rule):
    name = "helper-tuple-conversions"
    matches = "`a, b = helper(...)` where the jit helper returns a tuple holding tensors"
    emits = "the line, then `a = gl.convert_layout(a, <layout of a>)` for each tensor name (the helper returns its own)"
    examples = (
        Example(
            "import triton\nimport triton.language as tl\n\n@triton.jit\n"
            "def split_scale(x, s):\n    return x * s, x + s\n\n@triton.jit\n"
            "def k(x_ptr, y_ptr, BLOCK: tl.constexpr):\n    offs = tl.arange(0, BLOCK)\n"
            "    x = tl.load(x_ptr + offs)\n    a, b = split_scale(x, 2.0)\n    tl.store(y_ptr + offs, a + b)\n",
            (
                "a, b = split_scale(x, 2.0)",
                "a = gl.convert_layout(a, offs_layout)",
                "b = gl.convert_layout(b, offs_layout)",
            ),
        ),
    )
    counterexamples = (
        # a helper returning a tuple of scalars: nothing to convert
        Counterexample(TUPLE_OF_SCALARS, ("gl.convert_layout(hi", "gl.convert_layout(lo")),
    )

    def leave_SimpleStatementLine(
        self, ctx: RuleContext, original: cst.SimpleStatementLine, updated: cst.BaseStatement
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        lines: list[cst.BaseStatement] = []
        for small in original.body:
            for name, term in ctx.plan.tuple_converts.get(small, ()):  # type: ignore[call-overload]
                lines.append(statement(f"{name} = gl.convert_layout({name}, {ctx.plan.layout_expr(term)})"))
        if not lines:
            return updated
        return cst.FlattenSentinel([updated, *lines])


def convert(node: cst.BaseExpression, layout: str) -> cst.Call:
    return call("gl.convert_layout", bare(node), layout)


def expand(node: cst.BaseExpression, added: int, own: int) -> cst.Subscript:
    """Triton's implicit broadcast written out: `x` -> `x[None, :]` (`added` new leading axes of a rank-`own` value)."""
    if not isinstance(node, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) or getattr(node, "lpar", None):
        node = bare(node).with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])  # type: ignore[union-attr]
    elements = ["None"] * added + [":"] * own
    template = cst.parse_expression(f"_[{', '.join(elements)}]")
    assert isinstance(template, cst.Subscript)
    return template.with_changes(value=node)


def _optional_params(ctx: RuleContext) -> tuple[set[str], set[str]]:
    """Parameters of a helper that may not be a tensor: (those that may be None, those that may be a number).
    None: a `None` default, or a call of this file passing `None` or a name the caller binds to `None` somewhere (`b
    = None` when a flag is off); Triton makes such an argument a constexpr None, which `gl.convert_layout` does not
    take; `is not None` is decided at compile time. A number: a name the caller binds to one somewhere (`s = 1.0`
    where a flag leaves out a scale tensor; `flip = order`, a constexpr parameter of the caller); whether it is a tensor of a layout is decided at compile time too."""
    function = ctx.function
    names = [p.name for p in function.params]
    optional = {p.name for p in function.params if p.default == "None"}
    numbers: set[str] = set()
    for caller in function.called_by:
        caller_fn = ctx.facts.functions.get(caller)
        if caller_fn is None:
            continue
        none_names: set[str] = set()
        number_names: set[str] = set()
        for s in cst_walk.preorder(caller_fn.node):
            if isinstance(s, cst.SimpleStatementLine):
                for a in s.body:
                    if isinstance(a, cst.Assign) and isinstance(a.value, cst.Name) and a.value.value == "None":
                        none_names |= assigned_names(s)
                    elif isinstance(a, cst.Assign) and (_number(a.value) or (
                            isinstance(a.value, cst.Name) and a.value.value in caller_fn.constexpr_names)):
                        # (`flip = order` where a constexpr test leaves the bitonic network's direction a number)
                        number_names |= assigned_names(s)
        for node in calls_in(caller_fn.node):
            if ctx.facts.callee(node.func) != function.name:
                continue
            for param, arg in call_arguments(node, names):
                if param is None:
                    continue
                if isinstance(arg.value, cst.Name) and (arg.value.value == "None" or arg.value.value in none_names):
                    optional.add(param)
                elif isinstance(arg.value, cst.Name) and arg.value.value in number_names:
                    numbers.add(param)
    return optional, numbers - optional


def _number(node: cst.BaseExpression) -> bool:
    """A number literal, signed or not (`1.0`, `-1`, `float("-inf")` is not one)."""
    while isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus)):
        node = node.expression
    return isinstance(node, (cst.Integer, cst.Float))


def _commented(lines: list[str], *comments: str) -> list[cst.BaseStatement]:
    """`lines` as statements, the first preceded by `comments`."""
    statements = [statement(line) for line in lines]
    if statements:
        comment_lines = [cst.EmptyLine(comment=cst.Comment(comment)) for comment in comments]
        statements[0] = statements[0].with_changes(leading_lines=comment_lines)  # type: ignore[union-attr]
    return statements


def _reduced_argument(root: Term) -> str:
    """`, reduced=[0]` for a class reduced along an axis other than its last (a column reduction): the blocked layout
    then keeps that axis inside each thread where the tile allows, so that the reduction needs no shuffles and no
    shared-memory round trip between warps (Triton's own layout for such a loop). Nothing for row reductions, which
    the default layout (lanes along the last axis) already serves, but for a tile a loop accumulates elementwise and
    reduces along its last axis only after it (`, warps_last=True`): there Triton's own arrangement, warps along the
    last axis first, ran a Welford row reduction at 1.0x where warps along the rows ran it at 0.57-0.81x (H200)."""
    if root.rank is None or not root.reduced:
        return ""
    if root.rank - 1 in root.reduced:
        return ", warps_last=True" if root.accumulated_rows and not root.fresh_rows and root.reduced == {root.rank - 1} \
            else ""
    return f", reduced={sorted(root.reduced)}"
