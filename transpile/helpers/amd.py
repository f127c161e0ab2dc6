"""Gluon helpers of the AMD targets (gfx942, gfx950, gfx1250): `tl.dot` and `tl.dot_scaled` on the matrix cores, the
LDS rings of warp-pipelined loops and the engines that copy tiles into them. Copied into variants from here
(`transpile.helpers`); the MFMA and WMMA accumulator layouts are in `cdna` and `gfx1250`."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.amd.cdna4 import async_copy, mfma, mfma_scaled

from transpile.helpers.common import _acc_dtype  # noqa: F401
from transpile.helpers.cdna import _mma_layout, _other_depth, _scale_layout, _scaled_operand_layout, _with_depth  # noqa: F401

# Target parameters (see `transpile.helpers`): the values here are gfx950's.
WARP_SIZE = 64
# consecutive K elements a lane holds of an MMA operand, by operand bit width
K_WIDTHS = {8: 16, 16: 8, 32: 1}
# fp8 kinds the matrix cores take (the others go through fp16)
FLOAT8_NATIVE = ("fp8e4nv", "fp8e5", "fp8e4b8", "fp8e5b16")
# the MMA instruction of `tl.dot` and of `tl.dot_scaled`
MMA = mfma
MMA_SCALED = mfma_scaled
# OCP fp8 dots go by the f8f6f4 instructions (a scaled MFMA without scales)
SCALED_FP8 = True
# the module of the target's buffer loads
BUFFER_OPS = gl.amd.cdna4


def FLOAT8_K_WIDTH(dtype, layout):  # noqa: N802 - a target parameter: the K width of an fp8 operand
    return 16 if _f8f6f4(dtype) != "" and (layout is None or layout.instr_shape[2] >= 64 * (32 // layout.instr_shape[0])) else 8


@gluon.constexpr_function
def _float8_via_fp16(dtype):
    """An fp8 kind {arch} has no matrix instructions for: its operands are converted to fp16 (as Triton does)."""
    return dtype.is_floating() and dtype.primitive_bitwidth == 8 and dtype.name not in FLOAT8_NATIVE


@gluon.constexpr_function
def _mma_k_width(dtype, layout=None):
    """Consecutive K elements each lane holds of a {arch} MFMA operand of `dtype` (for the accumulator `layout`,
    where given: its instruction's depth decides for fp8). None (an element type a constexpr parameter leaves unset,
    `AB_DTYPE=None`: the layouts of a loop's copy that casts to it are declared, but read only where it is set): any."""
    if dtype is None:
        return K_WIDTHS[16]
    if _float8_via_fp16(dtype):
        return K_WIDTHS[16]
    if dtype.is_floating() and dtype.primitive_bitwidth == 8:
        return FLOAT8_K_WIDTH(dtype, layout)
    return K_WIDTHS[dtype.primitive_bitwidth]


@gluon.constexpr_function
def _f8f6f4(dtype):
    """The format name of an OCP fp8 `dtype` for gfx950's f8f6f4 MFMAs ("e4m3", "e5m2"), else ""."""
    return {"fp8e4nv": "e4m3", "fp8e5": "e5m2"}.get(dtype.name, "")


@gluon.jit
def _dot(a, b, acc):
    """`tl.dot(a, b, acc)` on the matrix cores: both operands are converted to the dot-operand layouts of the
    accumulator's {instr} layout, then one `{instr_name}` accumulates into `acc`. Operands of another type than the
    layout was laid out for (an fp32 dot whose result meets a 16-bit dot's: one layout) run the instruction of their
    own depth in a layout of the same tiles and warps (`_with_depth`), conversions that move nothing."""
    if _other_depth(acc.type.layout, a.dtype):
        own: gl.constexpr = _with_depth(acc.type.layout, a.dtype)
        return gl.convert_layout(_dot(a, b, gl.convert_layout(acc, own)), acc.type.layout)
    k_width: gl.constexpr = _mma_k_width(a.dtype, acc.type.layout)
    a = gl.convert_layout(a, gl.DotOperandLayout(0, acc.type.layout, k_width))
    b = gl.convert_layout(b, gl.DotOperandLayout(1, acc.type.layout, k_width))
    if _float8_via_fp16(a.dtype):
        a = a.to(gl.float16)
        b = b.to(gl.float16)
    if SCALED_FP8:
        if _f8f6f4(a.dtype) != "" and _f8f6f4(b.dtype) != "" and k_width == 16:
            # OCP fp8: the f8f6f4 instructions, four times as deep as `mfma`'s (a scaled MFMA with no scales)
            return MMA_SCALED(a, None, _f8f6f4(a.dtype), b, None, _f8f6f4(b.dtype), acc.to(gl.float32)).to(acc.dtype)
    if acc.dtype.is_fp16() or acc.dtype.is_bf16():
        # A 16-bit accumulator (`out_dtype=tl.float16`): the matrix cores accumulate in fp32, as Triton's own
        # lowering of such a dot does, and the result is rounded back.
        return MMA(a, b, acc.to(gl.float32)).to(acc.dtype)
    return MMA(a, b, acc)



@gluon.jit
def _dot_acc(a, b, acc):
    """`acc + tl.dot(a, b)` in one MMA accumulating into `acc` where the product has the accumulator's type (as
    Triton's own compiler folds that addition), else the product added to it."""
    if acc.dtype == _acc_dtype(a.dtype):
        return _dot(a, b, acc)
    else:
        return acc + _dot(a, b, gl.zeros(acc.shape, _acc_dtype(a.dtype), layout=acc.type.layout))


@gluon.jit
def _dot_scaled(a, a_scale, a_format: gl.constexpr, b, b_scale, b_format: gl.constexpr, acc):
    """`tl.dot_scaled(a, a_scale, a_format, b, b_scale, b_format, acc)` on the {instr}s (the accumulator's layout gives
    the instruction): the operands and the e8m0 scales (one byte per 32 values along K) converted to the layouts the
    instruction reads (no conversion where they are read from shared memory in them). A scale of `None` is 1."""
    gl.static_assert((a_format == "e2m1" or a_format == "e4m3" or a_format == "e5m2")
                     and (b_format == "e2m1" or b_format == "e4m3" or b_format == "e5m2"),
                     "the {instr} takes e2m1, e4m3 and e5m2 operands")
    a = gl.convert_layout(a, _scaled_operand_layout(0, acc.type.layout, a_format))
    b = gl.convert_layout(b, _scaled_operand_layout(1, acc.type.layout, b_format))
    if a_scale is not None:
        a_scale = gl.convert_layout(a_scale, _scale_layout(0, acc.type.layout, a_scale.shape, a_format))
    if b_scale is not None:
        b_scale = gl.convert_layout(b_scale, _scale_layout(1, acc.type.layout, b_scale.shape, b_format))
    return MMA_SCALED(a, a_scale, a_format, b, b_scale, b_format, acc)


@gluon.constexpr_function
def _lds_ring_bytes(slots, *rings):
    """LDS bytes of the rings of a pipelined main loop: `slots` tiles of each ring, given as (shape, dtype) in turn
    (A, then B, then the operands of any further dot)."""
    bits = 0
    for shape, dtype in zip(rings[0::2], rings[1::2]):
        elements = 1
        for dim in shape:
            elements *= dim
        bits += elements * dtype.primitive_bitwidth
    return slots * bits // 8


@gluon.constexpr_function
def _ring_slots(limit, most, *rings):
    """Slots of the LDS rings of a warp-pipelined main loop (`rings` as `_lds_ring_bytes` takes them): the most of
    `most` down to 2 that fit in `limit` bytes (with 2, each iteration waits for the copies started one iteration
    before), else 0: the loop runs as translated."""
    for slots in range(most, 1, -1):
        if _lds_ring_bytes(slots, *rings) <= limit:
            return slots
    return 0


@gluon.constexpr_function
def _lds_layout(shape, dtype, operand):
    """Shared layout of a ring slot of MMA operand `operand` (0: A [M, K], 1: B [K, N]) stored from registers: K
    contiguous in the slot (B is transposed on its way in, as Triton's own AMD backend stores it), swizzled in vectors
    of the operand's k_width, so that each lane's operand read is one vector and a wavefront's reads spread over the
    banks."""
    vec = K_WIDTHS[dtype.primitive_bitwidth]
    # Rows of K shorter than the 128 bytes the banks span share a phase (`per_phase` rows of it), as in Triton's own
    # AMD layouts: a lane's stores into neighbouring rows are then a constant stride apart, which the compiler pairs
    # (`ds_write2_b32`), and the phases still spread a wavefront's reads over the banks.
    row_bytes = (shape[1] if operand == 0 else shape[0]) * dtype.primitive_bitwidth // 8
    per_phase = max(1, 128 // row_bytes)
    max_phase = max(1, min(16 // per_phase, (shape[1] if operand == 0 else shape[0]) // vec))
    return gl.SwizzledSharedLayout(vec=vec, per_phase=per_phase, max_phase=max_phase,
                                   order=[1, 0] if operand == 0 else [0, 1])


@gluon.constexpr_function
def _lds_copy_layout(shape, dtype, operand):
    """Shared layout of a ring slot filled by direct-to-LDS copies: plain row-major (the copy engine writes each
    lane's vector where the lane's address says; it cannot swizzle)."""
    return gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[1, 0])


@gluon.constexpr_function
def _copy_layout(shape, dtype, num_warps, rows=1):
    """Register layout of a tile copied to LDS: 16 bytes per lane along the contiguous last dimension (the widest
    global load and direct-to-LDS transfer), lanes across it first, warps down the rows; `rows` rows a lane where the
    tile has rows enough (a tile stored transposed: each lane then holds pairs along the stored contiguous axis)."""
    vec = min(128 // dtype.primitive_bitwidth, shape[1])
    if vec * dtype.primitive_bitwidth == 64:
        vec //= 2  # (a direct-to-LDS copy moves 4 or 16 bytes a lane, not 8: rows of 8 bytes go in two halves)
    if shape[0] * shape[1] < WARP_SIZE * vec:
        # (a tile of fewer vectors than a warp has lanes, FLA's 16 x 16 blocks: 4 bytes a lane, else the warp's lanes
        # would cover rows past the tile's, and a direct-to-LDS copy would write the same slot rows twice)
        vec = max(1, min(32 // dtype.primitive_bitwidth, shape[1]))
    lanes_n = min(WARP_SIZE, shape[1] // vec)
    lane_rows = rows if shape[0] >= rows * num_warps * (WARP_SIZE // lanes_n) else 1
    return gl.BlockedLayout([lane_rows, vec], [WARP_SIZE // lanes_n, lanes_n], [num_warps, 1], [1, 0])


@gluon.constexpr_function
def _transposed_copy_layout(shape, dtype, num_warps):
    """Register layout of a tile contiguous in memory along its first axis (read transposed), loaded through
    registers into its slot: `_copy_layout` of the tile as memory holds it, its axes swapped (16 bytes a lane down
    the columns, lanes along them first), so that the loads stay coalesced."""
    rows, cols = shape[1], shape[0]  # (the tile as memory holds it)
    vec = min(128 // dtype.primitive_bitwidth, cols)
    if rows * cols < WARP_SIZE * vec:
        vec = max(1, min(32 // dtype.primitive_bitwidth, cols))
    lanes = min(WARP_SIZE, cols // vec)
    return gl.BlockedLayout([vec, 1], [lanes, WARP_SIZE // lanes], [1, num_warps], [0, 1])


@gluon.jit
def _desc_tile(desc, off0, off1, BLOCK0: gl.constexpr, BLOCK1: gl.constexpr, layout: gl.constexpr,
               INSIDE: gl.constexpr):
    """The tile `desc.load([off0, off1])` reads, in `layout`: its 32-bit offsets from the descriptor's base, and the
    mask of its elements inside the descriptor's shape; `INSIDE` (0 or 1): an axis along which the caller knows the
    tile lies inside the shape (a steady state of full K tiles), whose test is left out."""
    base, size0, size1, stride0, stride1 = desc
    rows = off0 + gl.arange(0, BLOCK0, layout=gl.SliceLayout(1, layout))
    cols = off1 + gl.arange(0, BLOCK1, layout=gl.SliceLayout(0, layout))
    if INSIDE == 0:
        mask = gl.full([BLOCK0, BLOCK1], 1, gl.int1, layout) & (cols[None, :] < size1)
    elif INSIDE == 1:
        mask = gl.full([BLOCK0, BLOCK1], 1, gl.int1, layout) & (rows[:, None] < size0)
    else:
        mask = (rows[:, None] < size0) & (cols[None, :] < size1)
    return rows[:, None] * stride0 + cols[None, :] * stride1, mask


@gluon.jit
def _desc_buffer_copy(desc, off0, off1, dest, INSIDE: gl.constexpr = -1):
    """`desc.load([off0, off1])` straight into the LDS slot `dest` by buffer copies 16 bytes a lane, from the
    descriptor's scalar base at 32-bit offsets (a descriptor's base and row stride are 16-byte aligned, a requirement
    of `tl.make_tensor_descriptor`; the launcher runs this kernel where its shape's last dimension is a multiple of
    16 too, so that no lane's vector is cut by it). Elements outside the shape read as zero (masked lanes, without a
    branch); `INSIDE` (0 or 1): an axis along which the caller knows the tile lies inside the shape (a steady state
    of full K tiles), whose test is left out. The caller closes the commit group."""
    layout: gl.constexpr = _copy_layout(dest.shape, dest.dtype, gl.num_warps())
    offsets, mask = _desc_tile(desc, off0, off1, dest.shape[0], dest.shape[1], layout, INSIDE)
    async_copy.buffer_load_to_shared(dest, desc[0], offsets, mask=mask)


@gluon.jit
def _lds_tile_copy(dest, base, offsets, mask=None):
    """A direct-to-LDS copy of a tile into the slot `dest`, from the scalar pointer `base` at the 32-bit `offsets`
    (gfx1250 has no buffer form of the copy): the base advances as a scalar between iterations and the offsets stay,
    so no tile of 64-bit pointers lives across the loop. Masked lanes write zeros."""
    async_copy.global_to_shared(dest, base + offsets, mask=mask)


@gluon.jit
def _tile_load(ring, ptrs, mask=None, other=None):
    """A tile for a slot of `ring`, loaded into registers 16 bytes a lane (`ptrs` and `mask` are laid out by
    `_copy_layout` for the ring's tiles); the caller stores it into its slot a step later. This target has no
    direct-to-LDS copy of 16 bytes a lane."""
    return gl.load(ptrs, mask=mask, other=other)


@gluon.jit
def _buffer_tile_load(ring, base, offsets, mask=None):
    """A tile for a slot of `ring`, loaded into registers by a buffer load from the scalar base at 32-bit offsets
    (16 bytes a lane; masked lanes read zeros, without a branch); the caller stores it into its slot a step later."""
    return BUFFER_OPS.buffer_load(base, offsets, mask=mask)


@gluon.jit
def _desc_buffer_load(desc, off0, off1, BLOCK0: gl.constexpr, BLOCK1: gl.constexpr, layout: gl.constexpr,
                      INSIDE: gl.constexpr = -1):
    """`desc.load([off0, off1])` as one buffer load into registers, in `layout` (`_copy_layout`: 16 bytes a lane, a
    descriptor's base and row stride being 16-byte aligned): from the descriptor's scalar base at 32-bit offsets, so
    that no tile of 64-bit addresses is computed each step; elements outside the descriptor's shape read as zero
    (masked lanes, without a branch); `INSIDE` (0 or 1): an axis along which the caller knows the tile lies inside
    the shape (a steady state of full K tiles), whose test is left out. The caller stores the tile into its ring slot
    a step later."""
    offsets, mask = _desc_tile(desc, off0, off1, BLOCK0, BLOCK1, layout, INSIDE)
    return BUFFER_OPS.buffer_load(desc[0], offsets, mask=mask)


@gluon.jit
def _buffer_load(base, offsets, mask=None, other=None):
    """`gl.load(base + offsets, mask=mask, other=other)` as a buffer load: from the scalar base at 32-bit offsets, so
    that no tensor of 64-bit pointers lives across the loop (masked lanes read `other`, zero where it is None)."""
    return BUFFER_OPS.buffer_load(base, offsets, mask=mask, other=other)


@gluon.constexpr_function
def _lds_tdm_layout(shape, dtype, operand):
    """Shared layout of a ring slot filled by TDM: rows padded (8 elements after each row of A, 16 after each row
    of B) so that the operand reads of the WMMA lanes fall into different banks."""
    return gl.PaddedSharedLayout.with_identity_for([[shape[1], 8 if operand == 0 else 16]], shape, [1, 0])
