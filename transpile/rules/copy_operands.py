"""AMD: the addresses and masks of direct-to-LDS copies, re-evaluated in each tile's 16-byte copy layout.

Matches: in a function a pipeline rule gave copy rings (`RuleContext.copy_rings`), each
`async_copy.global_load_to_shared(ring.index(...), pointers, mask=..., other=...)` (gfx950: direct to LDS;
gfx1250: `async_copy.global_to_shared`) or
`staged = _tile_load(ring, pointers, mask=..., other=...)` (gfx942, gfx1250: into registers, stored a step later).
Emits: the copy's pointers and mask computed in `_copy_layout(tile shape, dtype, num_warps)` (16 bytes a lane along the
contiguous dimension: gfx950's direct-to-LDS transactions move 4, 12 or 16 bytes, not the 8 of the kernel's blocked
layouts, and a 16-byte global load is the widest), with no layout conversion in the loop. Each tensor the copy reads is re-evaluated from its definition in
the layout its use asks for: a 2-D tile in the copy layout, a 1-D vector broadcast as `v[None, :]` or `v[:, None]` in
the matching slice of it (a vector the A and B tiles share along different axes gets one copy each). Tensors defined
before the ring become definitions at the start of the ring's branch (`offs_k_a_cols = gl.arange(0, BLOCK_K,
layout=gl.SliceLayout(0, a_ring_copy_layout))`); those the loop defines each iteration are written into the copy.
The carried pointer tile a ring starts from (`a_ptrs_next = a_ptrs`) and the producer's own tile definitions are
re-evaluated the same way. Where a value cannot be re-evaluated (a tensor assigned twice before the loop, a call
whose layout this rule does not know), the kernel is refused (TT010) and kept as Triton: its copies would not compile.
Targets: gfx942, gfx950, gfx1250.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

import libcst as cst

from transpile.cst_utils import (METADATA, bound_names, is_docstring, names_in, parenthesized, substituted,
                                 value_names)
from transpile.cst_walk import preorder
from transpile.rules.base import Counterexample, Example, Rule, RuleContext
from transpile.rules.pipeline_text import code, namer, renamed

#: the copy calls whose addresses are laid out per tile: a direct-to-LDS copy, a copy through registers
COPIES = ("async_copy.global_load_to_shared", "async_copy.global_to_shared", "_tile_load")
#: calls whose result takes the layout of a `layout=` argument
_LAID_OUT = {"gl.arange", "gl.full", "gl.zeros", "gl.zeros_like", "gl.full_like"}
#: calls that make a tensor of a shape of their own (a name defined through one is a tensor, not a scalar; a load
#: or a `where` is a tensor where what it reads is one)
_TENSOR_CALLS = (*_LAID_OUT, "gl.broadcast_to", "gl.expand_dims")
#: calls that change the shape or the layout of what they read: their result cannot be re-evaluated argument by
#: argument in another layout
_SHAPING = ("gl.sum", "gl.max", "gl.min", "gl.reduce", "gl.reshape", "gl.permute", "gl.trans", "gl.join",
            "gl.split", "gl.associative_scan", "gl.cumsum", "gl.argmax", "gl.argmin", "gl.gather", "gl.histogram")


class Unsupported(Exception):
    """A value the copy reads cannot be re-evaluated in the copy layout."""


@dataclass(frozen=True)
class Context:
    """The layout an expression is re-evaluated in: a 2-D copy layout, or its slice along `axis` (`dim` removed)."""

    layout: str
    dim: int | None = None  # None: the 2-D layout; 0: `v[None, :]` (SliceLayout(0, ...)); 1: `v[:, None]`
    tag: str = ""  # the tile's name in the names of the values made for it (`a` for `a_ring`)

    @property
    def text(self) -> str:
        return self.layout if self.dim is None else f"gl.SliceLayout({self.dim}, {self.layout})"

    @property
    def suffix(self) -> str:
        return f"_{self.tag}" + {None: "", 0: "_cols", 1: "_rows"}[self.dim]


EXAMPLE = (
    "import triton\nimport triton.language as tl\n\n@triton.jit\n"
    "def k(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, BM: tl.constexpr, BN: tl.constexpr, "
    "BK: tl.constexpr):\n"
    "    rows = tl.program_id(0) * BM + tl.arange(0, BM)\n    cols = tl.program_id(1) * BN + tl.arange(0, BN)\n"
    "    offs_k = tl.arange(0, BK)\n    acc = tl.zeros((BM, BN), dtype=tl.float32)\n"
    "    for k in range(0, tl.cdiv(K, BK)):\n        kk = k * BK + offs_k\n"
    "        a = tl.load(a_ptr + rows[:, None] * stride_am + kk[None, :], mask=kk[None, :] < K, other=0.0)\n"
    "        b = tl.load(b_ptr + kk[:, None] * stride_bk + cols[None, :], mask=kk[:, None] < K, other=0.0)\n"
    "        acc += tl.dot(a, b)\n"
    "    tl.store(c_ptr + rows[:, None] * BN + cols[None, :], acc.to(tl.float16))\n"
)


# A GEMM whose tiles are read through tensor descriptors made in the kernel (the counterexample of the pointer-tile
# copy rules: its ring copies by `_desc_buffer_copy`)
DESCRIPTOR_GEMM = (
    "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
    "def k(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):\n"
    "    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])\n"
    "    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])\n"
    "    acc = tl.zeros((BM, BN), dtype=tl.float32)\n"
    "    for k in tl.range(0, tl.cdiv(K, BK), num_stages=3):\n"
    "        a = a_desc.load([0, k * BK])\n        b = b_desc.load([k * BK, 0])\n        acc = tl.dot(a, b, acc)\n"
    "    tl.store(c_ptr + tl.arange(0, BM)[:, None] * N + tl.arange(0, BN)[None, :], acc.to(tl.float16))\n"
)


class CopyOperandLayouts(Rule):
    name = "copy-operand-layouts"
    matches = "direct-to-LDS copies of pointer tiles in a pipelined loop"
    emits = "their pointers and masks re-evaluated in a 16-byte copy layout per tile, hoisted to the ring's branch"
    examples = (
        Example(EXAMPLE, (
            "a_ring_copy_layout: gl.constexpr = _copy_layout([BM, BK], a_ptr.dtype.element_ty, gl.num_warps())",
            "offs_k_a_cols = gl.arange(0, BK, layout=gl.SliceLayout(0, a_ring_copy_layout))",
            "offs_k_b_rows = gl.arange(0, BK, layout=gl.SliceLayout(1, b_ring_copy_layout))",
            "mask=((k_next * BK + offs_k_a_cols)[None, :] < K) & (i < num_iters)",
        ), "gfx950"),
    )
    counterexamples = (
        # tiles read through tensor descriptors (`_desc_buffer_copy`): no pointer tile to lay out for the copies
        Counterexample(DESCRIPTOR_GEMM, ("_ring_copy_layout",), target="gfx950", gluon_always=True),
    )

    def leave_FunctionDef(self, ctx: RuleContext, original: cst.FunctionDef, updated: cst.FunctionDef
                          ) -> cst.FunctionDef:
        if not ctx.copy_rings:
            return updated
        try:
            rewriter = _Rewriter(updated, ctx.copy_rings, ctx.aligned_at_run_time)
            rewritten = rewriter.function()
        except Unsupported as exc:
            why = (f"its pipelined loop would copy pointer tiles in 16-byte vectors, but {exc}: the copies cannot be "
                   "laid out for 16-byte transactions")
            if ctx.gluon_always:
                ctx.refuse(original, "TT010", why)
                return updated
            # Not pipelined, then: the kernel stays Triton, whose compiler pipelines the loop (never slower), the
            # reason said per loop (`policy.keep_unpipelined`), as for a loop no pipeline rule takes
            for loop in ctx.pipelined:
                ctx.unprofitable[loop] = why
            ctx.pipelined.clear()
            return updated
        ctx.need("copy_layout")
        if any(axis == 0 for *_, axis in ctx.copy_rings.values()):
            ctx.need("transposed_copy_layout")
        if rewriter.tested:
            ctx.need("run_time_aligned")
        return rewritten


class _Rewriter:
    def __init__(self, function: cst.FunctionDef, rings: dict[str, tuple[str, str, int, int]],
                 aligned: dict[str, tuple[str, tuple[str, ...]]] | None = None) -> None:
        self.function_node = function
        self.rings = rings  # ring variable -> (tile shape text, element type text, rows a lane, contiguous axis)
        self.aligned = aligned or {}  # ring variable -> (base, integers) tested at run time
        self.tested = False  # (a ring branch runs under such a test)
        self.name = namer(names_in(function))
        # Parameters the kernel rebinds (`A = A + (offs_m[:, None] * stride_am + ...)`, a pointer parameter made
        # into its tile): a copy's address re-evaluated from that definition reads the parameter under a name of
        # its own, bound at the start of the function.
        params = {p.name.value for p in (*function.params.params, *function.params.kwonly_params)}
        rebound = params & set().union(*(bound_names(n) for n in preorder(function.body)
                                         if isinstance(n, (cst.Assign, cst.AugAssign, cst.AnnAssign))))
        self.aliases = {p: self.name(f"{p}_arg") for p in sorted(rebound)}

    # ---- the function -----------------------------------------------------------------------------------------
    def function(self) -> cst.FunctionDef:
        body = self._block(list(self.function_node.body.body), [])
        read = set().union(*(names_in(s) for s in body))
        used = sorted(p for p, alias in self.aliases.items() if alias in read)  # (fresh names: read where used)
        if used:
            lines = [cst.parse_statement(f"{self.aliases[p]} = {p}") for p in used]
            lines[0] = lines[0].with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(
                "# Parameters the kernel rebinds, by their values at entry: its pipelined copies' addresses are "
                "computed from them."))])
            at = 1 if body and is_docstring(body[0]) else 0
            body = [*body[:at], *lines, *body[at:]]
        return self.function_node.with_changes(body=self.function_node.body.with_changes(body=body))

    def _block(self, statements: list[cst.BaseStatement], before: list[cst.BaseStatement]
               ) -> list[cst.BaseStatement]:
        out = list(statements)
        for i, statement in enumerate(statements):
            if isinstance(statement, (cst.For, cst.While)) and isinstance(statement.body, cst.IndentedBlock):
                # a ring inside a loop (a persistent kernel's tile loop): the loop body's earlier statements, then
                # the function's, define what it reads
                out[i] = statement.with_changes(body=statement.body.with_changes(
                    body=self._block(list(statement.body.body), [*before, *statements[:i]])))
                continue
            if not isinstance(statement, cst.If):
                continue
            if any(bound_names(s) & set(self.rings) for s in statement.body.body
                   if isinstance(s, cst.SimpleStatementLine)):
                ring = self._ring(statement.body, [*before, *statements[:i]])
                out[i] = statement.with_changes(body=self._tested(ring, statement))
                continue
            inner = statement.body.with_changes(body=self._block(list(statement.body.body),
                                                                 [*before, *statements[:i]]))
            orelse = statement.orelse
            if isinstance(orelse, cst.Else):
                orelse = orelse.with_changes(body=orelse.body.with_changes(
                    body=self._block(list(orelse.body.body), [*before, *statements[:i]])))
            elif isinstance(orelse, cst.If):
                (orelse,) = self._block([orelse], [*before, *statements[:i]])  # type: ignore[assignment]
            out[i] = statement.with_changes(body=inner, orelse=orelse)
        return out

    # ---- a ring branch whose tiles' alignment the kernel tests ---------------------------------------------------
    def _tested(self, branch: cst.IndentedBlock, statement: cst.If) -> cst.IndentedBlock:
        """`branch` run where the bases and integers of its copied tiles that the kernel loads are 16-byte aligned
        (`RuleContext.aligned_at_run_time`), reading them through values the compiler knows aligned; elsewhere the
        loop as translated (the `else` of `statement`)."""
        mine = bound_names(branch)
        found = [self.aligned[ring] for ring in self.rings if ring in mine and ring in self.aligned]
        if not found:
            return branch
        if not isinstance(statement.orelse, cst.Else):
            raise Unsupported("its ring branch has no loop as translated to fall back to")
        names: dict[str, str] = {}
        lines: list[str] = []
        tests: list[str] = []
        # (an integer two tiles read, `K` bounding A's columns and B's rows: a multiple of 16 bytes of both types)
        readers: dict[str, list[str]] = {}
        for base, ints in found:
            for value in ints:
                readers.setdefault(value, [])
                if base not in readers[value]:
                    readers[value].append(base)
        crowded = next((value for value, bases in readers.items() if len(bases) > 2), None)
        if crowded is not None:  # (`_aligned_int` takes two element types)
            raise Unsupported(f"`{crowded}` bounds or strides the tiles of three rings, tested in the kernel")
        for base, ints in found:
            if base not in names:
                names[base] = self.name(f"{base}_16")
                lines.append(f"{names[base]} = _aligned_ptr({base})")
                tests.append(f"({names[base]}.to(gl.int64) == {base}.to(gl.int64))")
            for value in ints:
                if value not in names:
                    names[value] = self.name(f"{value}_16")
                    types = ", ".join(f"{b}.dtype.element_ty" for b in readers[value])
                    lines.append(f"{names[value]} = _aligned_int({value}, {types})")
                    tests.append(f"({names[value]} == {value})")
        listed = ", ".join(f"`{n}`" for n in names)
        comment = [cst.EmptyLine(comment=cst.Comment(text)) for text in textwrap.wrap(
            f"{listed}: values the kernel computes or loads, which no launch can vouch for as multiples of 16 bytes. "
            "The pipelined loop runs where they are (its copies read them through values the compiler knows aligned, "
            "equal to them there); elsewhere the loop runs as translated.", 100, initial_indent="# ",
            subsequent_indent="# ")]
        header = [cst.parse_statement(line) for line in lines]
        header[0] = header[0].with_changes(leading_lines=comment)
        test = cst.parse_expression(" & ".join(tests))
        fallback = list(statement.orelse.body.body)  # type: ignore[union-attr]
        fallback[0] = fallback[0].with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(
            "# Those values are not multiples of 16 bytes: the loop runs as translated."))])
        guarded = cst.If(test=test, body=renamed(branch, names), orelse=cst.Else(
            body=statement.orelse.body.with_changes(body=fallback)))  # type: ignore[union-attr]
        self.tested = True
        return branch.with_changes(body=[*header, guarded])

    # ---- one ring branch --------------------------------------------------------------------------------------
    def _ring(self, branch: cst.IndentedBlock, before: list[cst.BaseStatement]) -> cst.IndentedBlock:
        self.outside = _definitions(before, self.aliases)  # the values names hold at the ring, by name
        # names an `if`/`with` before the ring binds (`if EVEN_MN: offs_am = ... else: offs_am = ... % M`): no one
        # value to re-evaluate, so the copies convert the value itself, once, before the loop
        self.branched = _branch_values(before, set(self.outside))
        # (and the value each held before that `if`, where a branch reads it or leaves it: `offs_x_m = ... % M`,
        # then `if GATHER: offs_x_m = tl.load(GatherIndx + offs_x_m)`: a tensor either way)
        self.prior: dict[str, cst.BaseExpression] = {}
        for name in self.branched:
            last = max(i for i, statement in enumerate(before) if name in bound_names(statement))
            value = _definitions(before[:last], self.aliases).get(name)
            if value is not None:
                self.prior[name] = value
        # (a name the function binds once, in one branch (`if not DIVISIBLE_N: mask_n = offs_n < N`), holds that value
        # wherever the loop reads it: a compile that skips the branch cannot read it)
        parameters = {p.name.value for p in self.function_node.params.params}
        for name, values in list(self.branched.items()):
            if len(values) == 1 and name not in parameters:
                self.outside[name] = values[0]
                del self.branched[name]
        self.inside = _same_definitions(branch)
        # Tensors the loop carries from one iteration to the next (`offsets_k += BLOCK_K`) other than the pointer
        # tiles: their values per iteration cannot be re-evaluated in another layout from a definition.
        self.carried = _carried(branch)
        self.hoisted: dict[tuple[str, Context], str] = {}
        self.lines: list[str] = []
        layouts: dict[str, str] = {}
        mine = bound_names(branch)
        for ring, (shape, dtype, rows, axis) in self.rings.items():
            if ring not in mine:  # another loop's ring (the loop in the other copy of an unswitched branch)
                continue
            layouts[ring] = self.name(f"{ring}_copy_layout")
            if axis == 0:  # (a tile contiguous along its first axis, loaded through registers)
                self.lines.append(f"{layouts[ring]}: gl.constexpr = _transposed_copy_layout([{shape}], {dtype}, "
                                  "gl.num_warps())")
                continue
            self.lines.append(f"{layouts[ring]}: gl.constexpr = _copy_layout([{shape}], {dtype}, gl.num_warps()"
                              f"{f', rows={rows}' if rows != 1 else ''})")
        # Which tile context each copied pointer name is read in (a carried tile, or one the producer defines).
        self.pointer_context: dict[str, Context] = {}
        for call in _calls(branch):
            ring = _copied_ring(call)
            if ring in layouts and isinstance(call.args[1].value, cst.Name):
                name = call.args[1].value.value
                context = Context(layouts[ring], None, _tag(ring))
                if self.pointer_context.setdefault(name, context) != context:
                    raise Unsupported(f"`{name}` is copied into two rings")
        rewritten = branch.visit(_Sites(self, layouts))
        assert isinstance(rewritten, cst.IndentedBlock)
        header = list(cst.parse_module("\n".join(self.lines) + "\n").body)
        header[0] = header[0].with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(
            "# The copies move 16 bytes a lane: what their addresses and masks read, in each tile's copy layout."))])
        return rewritten.with_changes(body=[*header, *rewritten.body])

    # ---- re-evaluation ----------------------------------------------------------------------------------------
    def tensor(self, name: str, seen: frozenset[str] = frozenset()) -> bool:
        """Whether `name` holds a tensor (its definition makes or reads one), as far as the function shows."""
        if name in seen:
            return False
        value = self.inside.get(name) or self.outside.get(name)
        if value is None and name in getattr(self, "carried", {}):  # advanced in the loop: a tensor if it starts as one
            return any(self.tensor(n, seen | {name}) for n in self.carried[name] - {name})
        if value is None and name in getattr(self, "branched", {}):  # a tensor in any branch is a tensor
            prior = self.prior.get(name)
            return any(self._tensor_value(v, seen | {name}) for v in self.branched[name]) or (
                prior is not None and self._tensor_value(prior, seen | {name}))
        if value is None:
            return False  # a parameter, a loop variable, a constexpr
        return self._tensor_value(value, seen | {name})

    def _tensor_value(self, value: cst.BaseExpression, seen: frozenset[str]) -> bool:
        for node in preorder(value):
            if isinstance(node, cst.Call) and code(node.func) in _TENSOR_CALLS:
                return True
            if isinstance(node, cst.Subscript) and _axis(node) is not None:
                return True
        return any(self.tensor(n, seen) for n in value_names(value) - seen)

    def expression(self, node: cst.BaseExpression, context: Context) -> cst.BaseExpression:
        """`node` re-evaluated in `context`."""
        if isinstance(node, cst.Name):
            return self._name(node, context)
        if isinstance(node, (cst.Integer, cst.Float, cst.SimpleString)):
            return node
        if isinstance(node, cst.Subscript):
            axis = _axis(node)
            if axis is not None and context.dim is None:  # `v[None, :]`: v along axis 1, the slice without dim 0
                inner = self.expression(node.value, Context(context.layout, 1 - axis, context.tag))
                return node.with_changes(value=parenthesized(inner))  # (a conversion re-evaluated as `c < n`)
            if not (value_names(node) & self._tensors(node)):
                return node
            raise Unsupported(f"`{code(node)}` (an index or a broadcast this rule does not follow)")
        if isinstance(node, cst.BinaryOperation):
            return node.with_changes(left=self.expression(node.left, context),
                                     right=self.expression(node.right, context))
        if isinstance(node, cst.UnaryOperation):
            return node.with_changes(expression=self.expression(node.expression, context))
        if isinstance(node, cst.Comparison):
            return node.with_changes(left=self.expression(node.left, context), comparisons=[
                c.with_changes(comparator=self.expression(c.comparator, context)) for c in node.comparisons])
        if isinstance(node, cst.Call):
            return self._call(node, context)
        if isinstance(node, cst.Attribute):
            if not value_names(node.value) & self._tensors(node.value) or node.attr.value in METADATA:
                return node
            raise Unsupported(f"`{code(node)}`")
        if not (value_names(node) & self._tensors(node)):
            return node
        raise Unsupported(f"`{code(node)}` (an expression this rule does not re-evaluate)")

    def _tensors(self, node: cst.CSTNode) -> set[str]:
        return {n for n in value_names(node) if self.tensor(n)}

    def _name(self, node: cst.Name, context: Context) -> cst.BaseExpression:
        name = node.value
        if name in self.carried and name not in self.pointer_context and (self.tensor(name) or any(
                self.tensor(n) for n in self.carried[name])):  # (a scalar offset the loop advances is read as is)
            source = re.sub(r"_next(_\d+)?$", "", name)  # (the copies' own copy of the kernel's value)
            source = source if source in names_in(self.function_node) else name
            raise Unsupported(f"`{source}` is a tensor the loop carries from one iteration to the next")
        if not self.tensor(name):
            return node
        if name in self.inside:  # the producer's: each iteration's value, written into the copy
            value = self.expression(self.inside[name], context)
            return cst.parse_expression(f"({code(value)})")
        if name not in self.outside and name in self.branched:
            if context.dim != 1:  # (along the copies' contiguous last axis, or a whole tile)
                raise Unsupported(f"`{name}` is assigned in the branches of an `if` before the loop and indexes the "
                                  "tile's contiguous axis: no single definition proves the 16-byte vectors its copies "
                                  "need")
            key = (name, context)
            if key not in self.hoisted:  # (a one-time conversion before the loop)
                self.hoisted[key] = self.name(f"{name}{context.suffix}")
                self.lines.append(f"{self.hoisted[key]} = gl.convert_layout({name}, {context.text})")
            return cst.Name(self.hoisted[key])
        if name not in self.outside:
            raise Unsupported(f"`{name}` is not assigned exactly once before the loop")
        key = (name, context)
        if key not in self.hoisted:
            value = self.expression(self.outside[name], context)
            if isinstance(value, cst.Name):  # an alias (a layout conversion that is none in the copy layout)
                self.hoisted[key] = value.value
                return value
            hoisted = self.name(f"{name}{context.suffix}")
            self.hoisted[key] = hoisted
            self.lines.append(f"{hoisted} = {code(value)}")
        return cst.Name(self.hoisted[key])

    def _call(self, node: cst.Call, context: Context) -> cst.BaseExpression:
        func = code(node.func)
        if func in _LAID_OUT:
            args = [a.with_changes(value=cst.parse_expression(context.text))
                    if a.keyword is not None and a.keyword.value == "layout" else a for a in node.args]
            return node.with_changes(args=args)
        if func == "gl.convert_layout":
            return self.expression(node.args[0].value, context)
        if func in ("gl.multiple_of", "gl.max_contiguous", "gl.max_constancy"):  # hints hold in any layout
            value = self.expression(node.args[0].value, context)
            return node.with_changes(args=[node.args[0].with_changes(value=value), *node.args[1:]])
        if not (value_names(node) & self._tensors(node)) and not any(code(c.func) in _TENSOR_CALLS
                                                                   for c in _calls(node)):
            return node  # a scalar: `gl.program_id(0)`, `gl.cdiv(K, BLOCK_K)`
        if func in _SHAPING or func.endswith((".reshape", ".permute", ".trans", ".sum", ".max", ".min")) \
                or any(a.keyword is not None and a.keyword.value in ("layout", "axis") for a in node.args):
            raise Unsupported(f"`{func}(...)` (a call that shapes or lays out its result)")
        # An elementwise call (`gl.load`, `gl.where`, `gl.minimum`, `gl.cdiv`, `x.to(...)`, a jit helper on
        # scalars): its tensor arguments re-evaluated in the context, its result follows them.
        receiver = node.func.value if isinstance(node.func, cst.Attribute) and not (
            isinstance(node.func.value, cst.Name) and node.func.value.value == "gl") else None  # `x.to(...)`
        args = [a.with_changes(value=self.expression(a.value, context)) for a in node.args]
        if receiver is not None:
            return node.with_changes(func=node.func.with_changes(value=self.expression(receiver, context)),
                                     args=args)
        return node.with_changes(args=args)


class _Sites(cst.CSTTransformer):
    """The statements and copies of one ring branch that read its tiles' addresses and masks."""

    def __init__(self, rewriter: _Rewriter, layouts: dict[str, str]) -> None:
        super().__init__()
        self.rewriter = rewriter
        self.layouts = layouts

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        ring = _copied_ring(updated)
        if ring not in self.layouts:
            return updated
        context = Context(self.layouts[ring], None, _tag(ring))
        args = list(updated.args)
        for i, arg in enumerate(args[2:], start=2):
            if arg.keyword is None or arg.keyword.value == "mask":
                args[i] = arg.with_changes(value=self.rewriter.expression(arg.value, context))
        pointer = args[1].value
        if not isinstance(pointer, cst.Name):
            args[1] = args[1].with_changes(value=self.rewriter.expression(pointer, context))
        return updated.with_changes(args=args)

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        target = updated.targets[0].target
        if len(updated.targets) == 1 and isinstance(target, cst.Name) \
                and target.value in self.rewriter.pointer_context:
            context = self.rewriter.pointer_context[target.value]
            value = updated.value
            if isinstance(value, cst.Name) and value.value in self.rewriter.outside:
                value = self.rewriter.outside[value.value]  # the tile the ring starts from, made afresh here
            return updated.with_changes(value=self.rewriter.expression(value, context))
        return updated

    def leave_AugAssign(self, original: cst.AugAssign, updated: cst.AugAssign) -> cst.AugAssign:
        if isinstance(updated.target, cst.Name) and updated.target.value in self.rewriter.pointer_context:
            context = self.rewriter.pointer_context[updated.target.value]
            return updated.with_changes(value=self.rewriter.expression(updated.value, context))
        return updated


def _tag(ring: str) -> str:
    """`a` for `a_ring`."""
    return ring[: -len("_ring")] if ring.endswith("_ring") else ring


def _copied_ring(call: cst.Call) -> str | None:
    """`ring` of `async_copy.global_load_to_shared(ring.index(...), ...)` or `_tile_load(ring, ...)`."""
    if code(call.func) not in COPIES or len(call.args) < 2:
        return None
    dest = call.args[0].value
    if isinstance(dest, cst.Name):
        return dest.value
    if isinstance(dest, cst.Call) and isinstance(dest.func, cst.Attribute) and isinstance(dest.func.value, cst.Name):
        return dest.func.value.value
    return None


def _axis(node: cst.Subscript) -> int | None:
    """1 for `v[None, :]` (laid along axis 1), 0 for `v[:, None]`, else None."""
    if len(node.slice) != 2:
        return None
    kinds = []
    for element in node.slice:
        if isinstance(element.slice, cst.Index) and code(element.slice.value) == "None":
            kinds.append("none")
        elif isinstance(element.slice, cst.Slice) and element.slice.lower is None and element.slice.upper is None:
            kinds.append("all")
        else:
            return None
    return {("none", "all"): 1, ("all", "none"): 0}.get(tuple(kinds))  # type: ignore[arg-type]


def _calls(node: cst.CSTNode) -> list[cst.Call]:
    return [n for n in preorder(node) if isinstance(n, cst.Call)]


def _definitions(statements: list[cst.BaseStatement], aliases: dict[str, str] | None = None
                 ) -> dict[str, cst.BaseExpression]:
    """The value each name holds after `statements` (those before a ring), as an expression over names that hold
    their final values: `x = f(...)` then `x = g(x)` (or `x += e`) is `g((f(...)))`, and a value that read the
    earlier `x` reads `(f(...))` in its place. A name bound inside a compound statement (a loop, an `if`) or by a
    tuple target holds no single value and maps to nothing. `aliases`: parameters the function rebinds -> the names
    their values at entry are bound to (a first rebinding reads the parameter by that name)."""
    values: dict[str, cst.BaseExpression | None] = {}
    aliases = aliases or {}

    def substitute(node: cst.BaseExpression, name: str, value: cst.BaseExpression) -> cst.BaseExpression:
        """`node` with `name` (as a variable) replaced by `value`, parenthesized."""
        wrapped = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()]) \
            if isinstance(value, (cst.BinaryOperation, cst.Comparison, cst.UnaryOperation)) and not value.lpar \
            else value
        return substituted(node, {name: wrapped})

    def assign(name: str, value: cst.BaseExpression | None) -> None:
        old = values.get(name)
        for other, other_value in list(values.items()):  # values that read the old `name` keep reading it
            if other != name and other_value is not None and name in names_in(other_value):
                values[other] = substitute(other_value, name, old) if old is not None else None
        if value is not None and name in names_in(value):
            if old is None and name not in values and name in aliases:  # the parameter's value at entry
                old = cst.Name(aliases[name])
            value = substitute(value, name, old) if old is not None else None
        values[name] = value

    for statement in statements:
        for node in _small(statement):
            if isinstance(node, cst.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0].target, cst.Name):
                assign(node.targets[0].target.value, node.value)
            elif isinstance(node, cst.AnnAssign) and isinstance(node.target, cst.Name):
                assign(node.target.value, node.value)
            elif isinstance(node, cst.AugAssign) and isinstance(node.target, cst.Name):
                name = node.target.value
                operator = cst.parse_expression(f"a {code(node.operator).rstrip('=').strip()} b")
                assign(name, operator.with_changes(left=cst.Name(name), right=node.value))  # type: ignore[union-attr]
            else:
                for name in bound_names(node):
                    assign(name, None)
    return {name: value for name, value in values.items() if value is not None}


def _branch_values(statements: list[cst.BaseStatement], known: set[str]) -> dict[str, list[cst.BaseExpression]]:
    """Names (not in `known`) whose last binding among `statements` is inside an `if`/`with`, with every value the
    statement's branches assign them (plain `name = value`); a name also bound otherwise there maps to nothing."""
    found: dict[str, list[cst.BaseExpression]] = {}
    earlier: set[str] = set()  # names bound before the statement at hand
    for statement in statements:
        if isinstance(statement, cst.SimpleStatementLine):
            for name in bound_names(statement):
                found.pop(name, None)
            earlier |= bound_names(statement)
            continue
        if not isinstance(statement, (cst.If, cst.With)):
            for name in bound_names(statement):
                found.pop(name, None)
            earlier |= bound_names(statement)
            continue
        values: dict[str, list[cst.BaseExpression]] = {}
        other: set[str] = set()
        for node in preorder(statement):
            if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
                values.setdefault(node.targets[0].target.value, []).append(node.value)
            elif isinstance(node, (cst.AugAssign, cst.AnnAssign)) and isinstance(node.target, cst.Name):
                other.add(node.target.value)
            elif isinstance(node, (cst.For, cst.CompFor, cst.AsName)):
                other |= names_in(node.target if not isinstance(node, cst.AsName) else node.name)
        for name in bound_names(statement):
            found.pop(name, None)
            if name in values and name not in other:
                # (a value bound before the `if` is one more it may hold after it: `a = None`, then `if X: a = ...`)
                found[name] = values[name] + ([cst.Name("None")] if name in earlier else [])
        for name, v in found.items():  # (a value reading a name bound again since held another one there)
            if name not in bound_names(statement) and any(names_in(value) & bound_names(statement) for value in v):
                v.append(cst.Name("None"))
        earlier |= bound_names(statement)
    return {name: v for name, v in found.items() if name not in known}


#: attributes of a tensor that are not tensors: its element type, its shape
def _small(statement: cst.BaseStatement) -> list[cst.CSTNode]:
    if isinstance(statement, cst.SimpleStatementLine):
        return list(statement.body)
    return [statement]


def _carried(branch: cst.CSTNode) -> dict[str, set[str]]:
    """Names the ring's branch advances (`x += ...`), with the names their plain assignments there read."""
    advanced = {node.target.value for node in preorder(branch)
                if isinstance(node, cst.AugAssign) and isinstance(node.target, cst.Name)}
    reads: dict[str, set[str]] = {name: set() for name in advanced}
    for node in preorder(branch):
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name) \
                and node.targets[0].target.value in advanced:
            reads[node.targets[0].target.value] |= names_in(node.value)
    return reads


def _same_definitions(branch: cst.CSTNode) -> dict[str, cst.BaseExpression]:
    """Names the ring's branch assigns only with `name = value` and always the same value text (the producer's
    statements, written once for the prologue, once for the steady state and once for the last iterations)."""
    values: dict[str, cst.BaseExpression] = {}
    texts: dict[str, set[str]] = {}
    other: set[str] = set()
    for node in preorder(branch):
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            name = node.targets[0].target.value
            values[name] = node.value
            texts.setdefault(name, set()).add(code(node.value))
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign)) and isinstance(node.target, cst.Name):
            other.add(node.target.value)
        elif isinstance(node, (cst.For, cst.CompFor)) and isinstance(node.target, cst.Name):
            other.add(node.target.value)
    return {name: value for name, value in values.items() if len(texts[name]) == 1 and name not in other}
