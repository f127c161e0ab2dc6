"""Device-side tensor descriptors: ``tl.make_tensor_descriptor`` and ``desc.load`` / ``desc.store``.

Two rewrites, one per copy engine:

* `DescriptorsAsPointers` (gfx942, gfx950, gfx1250 until its TDM rule set lands): no tensor-memory copy engine is
  used; the descriptor becomes the tuple ``(base, rows, cols, row_stride, col_stride)`` and each tile access a masked
  pointer load/store (out-of-bounds elements read as zero and are not written, as with a descriptor).
* `DescriptorsAsTMA` (sm90): a Hopper TMA descriptor built on the device (``tma.make_tensor_descriptor`` with an NVMMA
  shared layout), each load a TMA copy into shared memory completed on an mbarrier, each store a TMA store from
  shared memory.

Matches: rank-2 descriptors with literal ``shape``/``strides``/``block_shape`` lists and literal offset lists. On the
pointer path, ``desc.dtype``/``.shape``/``.strides``/``.block_shape`` become the base pointer's element type and the
lists the descriptor was made from (the tuple has no such attributes).
"""

from __future__ import annotations

import libcst as cst

from transpile.analysis.layouts import DescriptorInfo
from transpile.rules.base import Counterexample, Example, Rule, RuleContext, call, expr

DESCRIPTOR = (
    "import triton\nimport triton.language as tl\n\n@triton.jit\n"
    "def k(x_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):\n"
    "    desc = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])\n"
    "    tile = desc.load([tl.program_id(0) * BM, 0])\n"
    "    desc.store([tl.program_id(0) * BM, 0], tile * 2)\n"
)


def _offsets(ctx: RuleContext, original: cst.Call, updated: cst.Call) -> list[cst.BaseExpression] | None:
    first = updated.args[0].value if updated.args else None
    if isinstance(first, (cst.List, cst.Tuple)) and len(first.elements) == 2:
        return [e.value for e in first.elements]
    ctx.refuse(original, "TT010", "descriptor offsets must be a literal list such as `[off_m, off_k]`")
    return None


def _stored_value(updated: cst.Call) -> cst.BaseExpression | None:
    for i, arg in enumerate(updated.args):
        if (arg.keyword is not None and arg.keyword.value == "value") or (arg.keyword is None and i == 1):
            return arg.value
    return None


class _DescriptorDispatch:
    """The dispatch both copy engines share (a mixin, not a rule): descriptor creation, `desc.load(offsets)`,
    `desc.store(offsets, x)`."""

    def make(self, ctx: RuleContext, info: DescriptorInfo) -> cst.BaseExpression:
        raise NotImplementedError

    def load(self, ctx: RuleContext, original: cst.Call, desc: cst.BaseExpression,
             offsets: list[cst.BaseExpression], info: DescriptorInfo) -> cst.BaseExpression:
        raise NotImplementedError

    def store(self, ctx: RuleContext, desc: cst.BaseExpression, offsets: list[cst.BaseExpression],
              value: cst.BaseExpression) -> cst.BaseExpression:
        raise NotImplementedError

    def leave_Call(self, ctx: RuleContext, original: cst.Call, updated: cst.BaseExpression) -> cst.BaseExpression:
        if not isinstance(updated, cst.Call):
            return updated
        if ctx.language(original.func) in ("make_tensor_descriptor", "core.make_tensor_descriptor"):
            info = _info(ctx, original)
            return updated if info is None else self.make(ctx, info)
        op = ctx.plan.descriptor_ops.get(original)
        if op is None:
            return updated
        kind, info = op
        desc = updated.func.value  # type: ignore[attr-defined]
        offsets = _offsets(ctx, original, updated)
        if offsets is None:
            return updated
        if kind == "load":
            return self.load(ctx, original, desc, offsets, info)
        value = _stored_value(updated)
        if value is None:
            ctx.refuse(original, "TT010", "`desc.store` needs the stored value")
            return updated
        return self.store(ctx, desc, offsets, value)


_ATTRIBUTES = ("dtype", "shape", "strides", "block_shape")


HOST_DESCRIPTOR = (
    "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
    "def k(a_desc, c_ptr, BM: tl.constexpr, BK: tl.constexpr):\n"
    "    a = a_desc.load([tl.program_id(0) * BM, 0])\n"
    "    tl.store(c_ptr + tl.arange(0, BM)[:, None] * BK + tl.arange(0, BK)[None, :], a)\n"
    "    tl.store(c_ptr + tl.arange(0, BM), a_desc.gather(tl.arange(0, BM), 0))\n"
)
HOST_BUILT = "`a_desc.load(...)` reads a tensor descriptor the host built"


class DescriptorsAsPointers(_DescriptorDispatch, Rule):
    name = "descriptors-as-pointers"
    matches = "`tl.make_tensor_descriptor`, `desc.load([..])`, `desc.store([..], x)`"
    emits = "a `(base, rows, cols, row_stride, col_stride)` tuple and masked pointer tile loads/stores"
    examples = (
        Example(DESCRIPTOR, ("desc = (x_ptr, M, N, N, 1)",
                             "tile = _desc_load(desc, gl.program_id(0) * BM, 0, BM, BN, tile_layout)",
                             "_desc_store(desc, gl.program_id(0) * BM, 0, gl.convert_layout(tile * 2, "), "gfx942"),
        Example(DESCRIPTOR.replace("tile * 2", "tile.to(desc.dtype) * desc.block_shape[1] + desc.shape[0]"),
                ("_desc_store(desc, gl.program_id(0) * BM, 0, gl.convert_layout(tile.to(x_ptr.dtype.element_ty) * "
                 "(BM, BN)[1] + (M, N)[0], ",), "gfx950"),
    )
    counterexamples = (
        # a descriptor the host built and read otherwise than as `transpile.passes.host_descriptors` makes in the
        # kernel (a gather): its block shape and element type are the launch's, not the source's
        Counterexample(HOST_DESCRIPTOR, ("_desc_load(",), "TT010", HOST_BUILT, "gfx950"),
    )

    def make(self, ctx: RuleContext, info: DescriptorInfo) -> cst.BaseExpression:
        return expr(f"({', '.join([info.base, *info.shape, *info.strides])})")

    def load(self, ctx: RuleContext, original: cst.Call, desc: cst.BaseExpression,
             offsets: list[cst.BaseExpression], info: DescriptorInfo) -> cst.BaseExpression:
        ctx.need("desc_load")
        return call("_desc_load", desc, *offsets, *info.block_shape, ctx.layout(original))

    def store(self, ctx: RuleContext, desc: cst.BaseExpression, offsets: list[cst.BaseExpression],
              value: cst.BaseExpression) -> cst.BaseExpression:
        ctx.need("desc_store")
        return call("_desc_store", desc, *offsets, value)

    def leave_Attribute(self, ctx: RuleContext, original: cst.Attribute, updated: cst.BaseExpression
                        ) -> cst.BaseExpression:
        """``desc.dtype`` / ``.shape`` / ``.strides`` / ``.block_shape`` of a descriptor that is now a tuple: the
        element type of its base pointer, and the lists the descriptor was made from (tuples of the same values)."""
        if not isinstance(original.value, cst.Name) or original.attr.value not in _ATTRIBUTES:
            return updated
        info = ctx.plan.descriptors.get(original.value.value)
        if info is None:
            return updated
        if original.attr.value == "dtype":
            base = info.base if info.base.isidentifier() else f"({info.base})"
            return expr(f"{base}.dtype.element_ty")
        values = {"shape": info.shape, "strides": info.strides, "block_shape": info.block_shape}[original.attr.value]
        return expr(f"({', '.join(values)},)" if len(values) == 1 else f"({', '.join(values)})")

    def leave_SimpleStatementLine(self, ctx: RuleContext, original: cst.SimpleStatementLine, updated: cst.BaseStatement
                                  ) -> cst.BaseStatement:
        if _creates_descriptor(ctx, original) and isinstance(updated, cst.SimpleStatementLine):
            if updated.trailing_whitespace.comment is None:
                note = "# (base, rows, cols, row_stride, col_stride): tiles are read with masked pointer loads"
                return updated.with_changes(trailing_whitespace=cst.TrailingWhitespace(
                    whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(note)))
        return updated


class DescriptorsAsTMA(_DescriptorDispatch, Rule):
    name = "descriptors-as-tma"
    matches = "`tl.make_tensor_descriptor`, `desc.load([..])`, `desc.store([..], x)`"
    emits = "`tma.make_tensor_descriptor(..., layout=NVMMASharedLayout)`, `_tma_load`/`_tma_store` helpers"
    examples = (
        Example(DESCRIPTOR, ("desc = tma.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, "
                             "BN], layout=gl.NVMMASharedLayout.get_default_for([BM, BN], x_ptr.dtype.element_ty))",
                             "tile = _tma_load(desc, [gl.program_id(0) * BM, 0], tile_layout)"), "sm90"),
    )
    counterexamples = (
        Counterexample(HOST_DESCRIPTOR, ("tma.make_tensor_descriptor(", "_tma_load("), "TT010", HOST_BUILT, "sm90"),
    )

    def make(self, ctx: RuleContext, info: DescriptorInfo) -> cst.BaseExpression:
        base = info.base if info.base.isidentifier() else f"({info.base})"
        shared = f"gl.NVMMASharedLayout.get_default_for([{', '.join(info.block_shape)}], {base}.dtype.element_ty)"
        return call("tma.make_tensor_descriptor", info.base, shape=f"[{', '.join(info.shape)}]",
                    strides=f"[{', '.join(info.strides)}]", block_shape=f"[{', '.join(info.block_shape)}]",
                    layout=shared)

    def load(self, ctx: RuleContext, original: cst.Call, desc: cst.BaseExpression,
             offsets: list[cst.BaseExpression], info: DescriptorInfo) -> cst.BaseExpression:
        ctx.need("tma_load")
        return call("_tma_load", desc, _coords(offsets), ctx.layout(original))

    def store(self, ctx: RuleContext, desc: cst.BaseExpression, offsets: list[cst.BaseExpression],
              value: cst.BaseExpression) -> cst.BaseExpression:
        ctx.need("tma_store")
        # The tile goes to shared memory on its way to TMA, which takes it from any register layout: the conversion
        # to a blocked layout that the store's layout class asks for would only cost a shuffle through shared memory.
        if isinstance(value, cst.Call) and _dotted(value.func) == "gl.convert_layout" and value.args:
            value = value.args[0].value
        return call("_tma_store", desc, _coords(offsets), value)


def _dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return node.value if isinstance(node, cst.Name) else ""


def _coords(offsets: list[cst.BaseExpression]) -> cst.BaseExpression:
    code = cst.Module([]).code_for_node
    return expr(f"[{', '.join(code(o).strip() for o in offsets)}]")


def _info(ctx: RuleContext, original: cst.Call) -> DescriptorInfo | None:
    info = ctx.plan.descriptor_calls.get(original)
    if info is not None:
        return info
    for info in ctx.plan.descriptors.values():
        if info.node is original:
            return info
    return None


def _creates_descriptor(ctx: RuleContext, line: cst.SimpleStatementLine) -> bool:
    return any(
        isinstance(small, cst.Assign) and isinstance(small.value, cst.Call) and _info(ctx, small.value) is not None
        for small in line.body
    )
