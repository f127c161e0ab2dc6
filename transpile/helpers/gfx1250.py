"""Gluon helpers of gfx1250 (WMMA instructions): the accumulator layouts of `tl.dot` and `tl.dot_scaled`. Copied
into variants from here (`transpile.helpers`)."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.amd.gfx1250 import get_wmma_scale_layout


def _float8_via_fp16(dtype):  # (the helper of `amd`, for this module's layouts)
    return dtype.is_floating() and dtype.primitive_bitwidth == 8 and dtype.name not in ("fp8e4nv", "fp8e5")


@gluon.constexpr_function
def _depth(dtype):
    """The K depth of gfx1250's 16x16 WMMA instruction for `dtype` operands (fp8 kinds the instructions do not take go
    through fp16)."""
    return {8: 64, 16: 32, 32: 4}[16 if _float8_via_fp16(dtype) else dtype.primitive_bitwidth]


@gluon.constexpr_function
def _mma_layout(m, ns, dtype, num_warps, warps_along_m=False, k=None, computed_operand=None):
    """WMMA accumulator layout for [m, n] tiles of `dtype` operands, the choice Triton makes for `tl.dot` on gfx1250:
    16x16 instructions with the K depth of `dtype`; the first warp bit goes to N, the others to M. With
    `warps_along_m` (and rows enough) every warp bit goes to M: reductions along a row then stay inside a warp. (`k`,
    the dot's K block: every K block a dot takes is at least one instruction deep here; fp8 operands go by the
    16x16x128 instruction where it is at least 128, as Triton's own compile does: half the instructions of 16x16x64.)
    `computed_operand` (0 for A, 1 for B): the operand the loop computes in registers, in its MMA operand layout;
    every warp along the other axis would compute its elements again, so every warp bit goes along this operand's
    own axis (M for A, N for B) where its tile has 16 rows (columns) a warp."""
    instr_k = _depth(dtype)
    if instr_k == 64 and dtype.is_floating() and k is not None and k >= 128:
        instr_k = 128
    n = min(ns) if all(n is not None for n in ns) else None
    along = 0 if warps_along_m else computed_operand  # (the axis every warp bit goes along: 0 M, 1 N; None: split)
    size = m if along == 0 else n if along == 1 else None
    if size is not None and size >= 16 * num_warps:
        warp_bases = []
        while (1 << len(warp_bases)) < num_warps:
            step = 1 << len(warp_bases)
            warp_bases.append([step, 0] if along == 0 else [0, step])
        return gl.amd.AMDWMMALayout(3, True, warp_bases, [], [16, 16, instr_k])
    warp_bases = [[0, 1]] if num_warps > 1 else []
    while (1 << len(warp_bases)) < num_warps:
        warp_bases.append([1 << (len(warp_bases) - 1), 0])
    return gl.amd.AMDWMMALayout(3, True, warp_bases, [], [16, 16, instr_k])


@gluon.constexpr_function
def _other_depth(layout, dtype):
    """The WMMA accumulator `layout` was laid out for 16-bit operands and `dtype` is 32-bit, or the other way round (an
    fp32 dot beside 16-bit ones whose results meet: one layout). 8-bit operands take the layout as it is."""
    return dtype.primitive_bitwidth in (16, 32) and layout.instr_shape[2] != _with_depth(layout, dtype).instr_shape[2]


@gluon.constexpr_function
def _with_depth(layout, dtype):
    """`layout` (a WMMA accumulator layout) with the K depth of `dtype`'s instruction: the same tiles and warps, so the
    accumulator's elements lie where they did (a conversion between the two moves nothing)."""
    return gl.amd.AMDWMMALayout(3, layout.transposed, layout.warp_bases, layout.reg_bases, [16, 16, _depth(dtype)])


@gluon.constexpr_function
def _scaled_mma_layout(m, ns, num_warps, warps_along_m=False):
    """Accumulator layout of a `tl.dot_scaled` on gfx1250: the scaled WMMA's 16x16x128, the warps as `tl.dot`'s."""
    base = _mma_layout(m, ns, gl.float8e4nv, num_warps, warps_along_m)
    return gl.amd.AMDWMMALayout(3, True, base.warp_bases, base.reg_bases, [16, 16, 128])


@gluon.constexpr_function
def _scaled_operand_layout(operand, mma_layout, fmt):
    """Register layout of operand `operand` (0: A, 1: B) of a scaled WMMA in format `fmt`, 16 bytes of K a lane: an
    e2m1 operand (two values a byte) is laid out for the instruction's 64 bytes of K, an fp8 one for its 128."""
    parent = mma_layout
    if fmt == "e2m1":
        parent = gl.amd.AMDWMMALayout(3, True, mma_layout.warp_bases, mma_layout.reg_bases, [16, 16, 64])
    return gl.DotOperandLayout(operand, parent, 16)


@gluon.constexpr_function
def _scale_layout(operand, mma_layout, shape, fmt):
    """Register layout of the e8m0 scales of operand `operand` (A's [M, K // 32], B's [N, K // 32]) that the scaled
    WMMA reads."""
    return get_wmma_scale_layout(_scaled_operand_layout(operand, mma_layout, fmt), shape)
