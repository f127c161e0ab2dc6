"""Gluon helpers of the AMD targets with MFMA instructions (gfx942, gfx950): the accumulator layouts of `tl.dot`
and `tl.dot_scaled`. Copied into variants from here (`transpile.helpers`)."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.amd.cdna4 import get_mfma_scale_layout

# Target parameters (see `transpile.helpers`): the values here are gfx950's.
MFMA_VERSION = 4
# K depth of the instruction, by operand bit width
DEPTHS = {8: 32, 16: 16, 32: 2}


def FLOAT8_DEPTH(dtype):  # noqa: N802 - a target parameter: the K depth of an fp8 instruction
    return 64 if _f8f6f4(dtype) != "" else 16


def _f8f6f4(dtype):  # (the helper of `amd`, for this module's parameter)
    return {"fp8e4nv": "e4m3", "fp8e5": "e5m2"}.get(dtype.name, "")


def _float8_via_fp16(dtype):  # (the helper of `amd`, for this module's parameter)
    return dtype.is_floating() and dtype.primitive_bitwidth == 8 and dtype.name not in ("fp8e4nv", "fp8e5", "fp8e4b8", "fp8e5b16")


@gluon.constexpr_function
def _depth(dtype):
    """The K depth of {arch}'s 32x32 MFMA instruction for `dtype` operands (twice that at 16x16)."""
    if _float8_via_fp16(dtype):
        return DEPTHS[16]
    if dtype.is_floating() and dtype.primitive_bitwidth == 8:
        # {float8_why}
        return FLOAT8_DEPTH(dtype)
    return DEPTHS[dtype.primitive_bitwidth]


@gluon.constexpr_function
def _mma_layout(m, ns, dtype, num_warps, warps_along_m=False, k=None, computed_operand=None):
    """MFMA accumulator layout for [m, n] tiles of `dtype` operands: the instruction Triton chooses for `tl.dot` on
    {arch}, 32x32 (16x16 for tiles narrower than 32) with the K depth of `dtype`; warps split between M and N, at
    most 2 along M (Triton's own split follows the tile's aspect). With `warps_along_m` (and rows enough), every
    warp takes its own rows, 16x16 instructions where a warp has fewer than 32: reductions along a row then stay
    inside a warp. `k`: the dot's K block, where known: an fp8 block shallower than the deep instruction takes the
    plain one (K 16 at 32x32, 32 at 16x16). `computed_operand` (0 for A, 1 for B): the operand the loop computes in
    registers, in its MMA operand layout; every warp along the other axis holds a copy of that layout's elements and
    computes them again, so every warp goes along this operand's own axis (M for A, N for B) where its tile has 16
    rows (columns) a warp."""
    depth = _depth(dtype)
    n = min(ns) if all(n is not None for n in ns) else None
    along = 0 if warps_along_m else computed_operand  # (the axis every warp goes along: 0 M, 1 N; None: split)
    size = m if along == 0 else n if along == 1 else None
    if size is not None and size >= 16 * num_warps:
        # (32-wide instructions where each warp's share and the other axis allow them; with fewer rows (columns) for
        # a computed operand the split below stands: warps partly along its axis measured mixed)
        other = n if along == 0 else m
        instr_mn = 32 if size // num_warps >= 32 and other is not None and other >= 32 else 16
        instr_k = depth if instr_mn == 32 else depth * 2
        if k is not None and k < instr_k and dtype.primitive_bitwidth == 8 and dtype.is_floating():
            instr_k = 16 if instr_mn == 32 else 32
        return gl.amd.AMDMFMALayout(version=MFMA_VERSION, instr_shape=[instr_mn, instr_mn, instr_k], transposed=True,
                                    warps_per_cta=[num_warps, 1] if along == 0 else [1, num_warps])
    small = (m is not None and m < 32) or any(n is not None and n < 32 for n in ns)
    instr_mn = 16 if small else 32
    instr_k = depth * 2 if small else depth
    if k is not None and k < instr_k and dtype.primitive_bitwidth == 8 and dtype.is_floating():
        instr_k = 16 if instr_mn == 32 else 32
    rows = 128 if m is None else m
    warps_m = min(2 if num_warps > 1 else 1, max(1, rows // instr_mn))
    return gl.amd.AMDMFMALayout(version=MFMA_VERSION, instr_shape=[instr_mn, instr_mn, instr_k], transposed=True,
                                warps_per_cta=[warps_m, num_warps // warps_m])


@gluon.constexpr_function
def _other_depth(layout, dtype):
    """The MFMA accumulator `layout` was laid out for 16-bit operands and `dtype` is 32-bit, or the other way round (an
    fp32 dot beside 16-bit ones whose results meet: one layout). 8-bit operands take the layout as it is (their depth
    also follows the dot's K block)."""
    return dtype.primitive_bitwidth in (16, 32) and layout.instr_shape[2] != _with_depth(layout, dtype).instr_shape[2]


@gluon.constexpr_function
def _with_depth(layout, dtype):
    """`layout` (an MFMA accumulator layout) with the K depth of `dtype`'s instruction: the same tiles and warps, so
    the accumulator's elements lie where they did (a conversion between the two moves nothing)."""
    depth = _depth(dtype)
    instr_mn = layout.instr_shape[0]
    return gl.amd.AMDMFMALayout(version=layout.version, instr_shape=[instr_mn, instr_mn,
                                                                     depth if instr_mn == 32 else depth * 2],
                                transposed=layout.transposed, warps_per_cta=layout.warps_per_cta)


@gluon.constexpr_function
def _scaled_mma_layout(m, ns, num_warps, warps_along_m=False):
    """Accumulator layout of a `tl.dot_scaled` on gfx950: that of OCP fp8's deep f8f6f4 instructions (32x32x64,
    16x16x128), which the scaled MFMAs are, whatever the operands' storage type."""
    return _mma_layout(m, ns, gl.float8e4nv, num_warps, warps_along_m)


@gluon.constexpr_function
def _scaled_operand_layout(operand, mma_layout, fmt):
    """Register layout of operand `operand` (0: A, 1: B) of a scaled MFMA in format `fmt`: 16 bytes of K a lane (32
    fp4 values packed two a byte, or 16 fp8 ones)."""
    return gl.DotOperandLayout(operand, mma_layout, 16)


@gluon.constexpr_function
def _scale_layout(operand, mma_layout, shape, fmt):
    """Register layout of the e8m0 scales of operand `operand` (A's [M, K // 32], B's [N, K // 32]) that the scaled
    MFMA reads."""
    return get_mfma_scale_layout(_scaled_operand_layout(operand, mma_layout, fmt), shape)
