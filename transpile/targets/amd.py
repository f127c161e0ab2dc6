"""AMD rule sets: gfx942 (MI300, CDNA3), gfx950 (MI350, CDNA4), gfx1250 (CDNA5)."""

from __future__ import annotations

from transpile.rules.amd_warp_pipeline import GFX1250_POINTER_COPY, AMDWarpPipeline
from transpile.rules.buffer_copies import BufferCopies
from transpile.rules.copy_operands import CopyOperandLayouts
from transpile.rules.descriptors import DescriptorsAsPointers
from transpile.rules.dot import Dot
from transpile.rules.hoist import HoistConversions
from transpile.rules.language import Barrier, JitDecorator, LanguageNames, Transpose
from transpile.rules.layouts import CreationLayouts, HelperTupleConversions, LayoutDeclarations
from transpile.rules.ranges import Ranges
from transpile.targets import Target
from transpile.targets import snippets as s

GLUON_IMPORTS = (
    "from triton.experimental import gluon",
    "from triton.experimental.gluon import language as gl",
    # Only where a variant uses them (`tl.sigmoid` as Triton's own code, `tl.PropagateNan` values).
    "from triton.language import PropagateNan, random as tl_random, standard as tl_standard",
)

def _rules(engine: str, pointer_copy: str | None = None) -> tuple:
    """The rules in the order they apply to each node; `engine` copies tensor-descriptor tiles into LDS,
    `pointer_copy` pointer tiles where it is another engine (AMDWarpPipeline)."""
    return (JitDecorator(), LanguageNames(), Barrier(), Ranges(), Transpose(), CreationLayouts(),
            HelperTupleConversions(), Dot(), HoistConversions(), DescriptorsAsPointers(), AMDWarpPipeline(engine, pointer_copy),
            LayoutDeclarations(), CopyOperandLayouts(), BufferCopies())

MFMA_LAYOUT = '''
@gluon.constexpr_function
def _mma_layout(m, ns, dtype, num_warps, warps_along_m=False, k=None):
    """MFMA accumulator layout for [m, n] tiles of `dtype` operands, the choice Triton makes for `tl.dot` on
    {arch}: 32x32 instructions (16x16 for tiles narrower than 32) with the K depth of `dtype`, and warps split between
    M and N. With `warps_along_m` (and rows enough), every warp takes its own rows, 16x16 instructions where a warp
    has fewer than 32: reductions along a row then stay inside a warp. `k`: the dot's K block, where known: an fp8
    block shallower than the deep instruction takes the plain one (K 16 at 32x32, 32 at 16x16)."""
    if _float8_via_fp16(dtype):
        depth = {depths}[16]
    elif dtype.is_floating() and dtype.primitive_bitwidth == 8:
        # {float8_why}
        depth = {float8_depth}
    else:
        depth = {depths}[dtype.primitive_bitwidth]
    if warps_along_m and m is not None and m >= 16 * num_warps:
        instr_mn = 32 if m // num_warps >= 32 and all(n is not None and n >= 32 for n in ns) else 16
        instr_k = depth if instr_mn == 32 else depth * 2
        if k is not None and k < instr_k and dtype.primitive_bitwidth == 8 and dtype.is_floating():
            instr_k = 16 if instr_mn == 32 else 32
        return gl.amd.AMDMFMALayout(version={version}, instr_shape=[instr_mn, instr_mn, instr_k], transposed=True,
                                    warps_per_cta=[num_warps, 1])
    small = (m is not None and m < 32) or any(n is not None and n < 32 for n in ns)
    instr_mn = 16 if small else 32
    instr_k = depth * 2 if small else depth
    if k is not None and k < instr_k and dtype.primitive_bitwidth == 8 and dtype.is_floating():
        instr_k = 16 if instr_mn == 32 else 32
    rows = 128 if m is None else m
    warps_m = min(2 if num_warps > 1 else 1, max(1, rows // instr_mn))
    return gl.amd.AMDMFMALayout(version={version}, instr_shape=[instr_mn, instr_mn, instr_k], transposed=True,
                                warps_per_cta=[warps_m, num_warps // warps_m])
'''

MFMA_K_WIDTH = '''
@gluon.constexpr_function
def _mma_k_width(dtype, layout=None):
    """Consecutive K elements each lane holds of a {arch} MFMA operand of `dtype` (for the accumulator `layout`,
    where given: its instruction's depth decides for fp8)."""
    if _float8_via_fp16(dtype):
        return {k_widths}[16]
    if dtype.is_floating() and dtype.primitive_bitwidth == 8:
        return {float8_k_width}
    return {k_widths}[dtype.primitive_bitwidth]
'''

FLOAT8_VIA_FP16 = '''
@gluon.constexpr_function
def _float8_via_fp16(dtype):
    """An fp8 kind {arch} has no matrix instructions for: its operands are converted to fp16 (as Triton does)."""
    return dtype.is_floating() and dtype.primitive_bitwidth == 8 and dtype.name not in {float8_native}
'''

MFMA_DOT = '''
@gluon.jit
def _dot(a, b, acc):
    """`tl.dot(a, b, acc)` on the matrix cores: both operands are converted to the dot-operand layouts of the
    accumulator's {instr} layout, then one `{instr_name}` accumulates into `acc`."""
    k_width: gl.constexpr = _mma_k_width(a.dtype, acc.type.layout)
    a = gl.convert_layout(a, gl.DotOperandLayout(0, acc.type.layout, k_width))
    b = gl.convert_layout(b, gl.DotOperandLayout(1, acc.type.layout, k_width))
    if _float8_via_fp16(a.dtype):
        a = a.to(gl.float16)
        b = b.to(gl.float16)
{scaled}    if acc.dtype.is_fp16() or acc.dtype.is_bf16():
        # A 16-bit accumulator (`out_dtype=tl.float16`): the matrix cores accumulate in fp32, as Triton's own
        # lowering of such a dot does, and the result is rounded back.
        return {instr_name}(a, b, acc.to(gl.float32)).to(acc.dtype)
    return {instr_name}(a, b, acc)
'''

# gfx950: OCP fp8 operands go by the deep f8f6f4 instructions (32x32x64, 16x16x128), which Gluon issues as a scaled
# MFMA; with no scales (scale 1) it is the plain product, as Triton's own lowering of an fp8 `tl.dot` there.
F8F6F4 = '''
@gluon.constexpr_function
def _f8f6f4(dtype):
    """The format name of an OCP fp8 `dtype` for gfx950's f8f6f4 MFMAs ("e4m3", "e5m2"), else ""."""
    return {"fp8e4nv": "e4m3", "fp8e5": "e5m2"}.get(dtype.name, "")
'''
SCALED_DOT = '''    if _f8f6f4(a.dtype) != "" and _f8f6f4(b.dtype) != "" and k_width == 16:
        # OCP fp8: the f8f6f4 instructions, four times as deep as `mfma`'s (a scaled MFMA with no scales)
        return mfma_scaled(a, None, _f8f6f4(a.dtype), b, None, _f8f6f4(b.dtype), acc.to(gl.float32)).to(acc.dtype)
'''

# `tl.dot_scaled` by the scaled MFMAs (gfx950: `mfma_scaled`, 32x32x64 or 16x16x128) or WMMAs (gfx1250: `wmma_scaled`,
# 16x16x128), A and B scaled per 32 values along K by e8m0 bytes, as Triton's own lowering of it there. The layouts
# are target snippets; `_dot_scaled`'s text is shared.
SCALED_MFMA_LAYOUTS = '''
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
'''
SCALED_WMMA_LAYOUTS = '''
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
'''
DOT_SCALED = '''
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
    return {instr_name}(a, a_scale, a_format, b, b_scale, b_format, acc)
'''

WMMA_LAYOUT = '''
@gluon.constexpr_function
def _mma_layout(m, ns, dtype, num_warps, warps_along_m=False, k=None):
    """WMMA accumulator layout for [m, n] tiles of `dtype` operands, the choice Triton makes for `tl.dot` on gfx1250:
    16x16 instructions with the K depth of `dtype`; the first warp bit goes to N, the others to M. With
    `warps_along_m` (and rows enough) every warp bit goes to M: reductions along a row then stay inside a warp. (`k`,
    the dot's K block: every K block a dot takes is at least one instruction deep here.)"""
    instr_k = {8: 64, 16: 32, 32: 4}[16 if _float8_via_fp16(dtype) else dtype.primitive_bitwidth]
    if warps_along_m and m is not None and m >= 16 * num_warps:
        warp_bases = []
        while (1 << len(warp_bases)) < num_warps:
            warp_bases.append([1 << len(warp_bases), 0])
        return gl.amd.AMDWMMALayout(3, True, warp_bases, [], [16, 16, instr_k])
    warp_bases = [[0, 1]] if num_warps > 1 else []
    while (1 << len(warp_bases)) < num_warps:
        warp_bases.append([1 << (len(warp_bases) - 1), 0])
    return gl.amd.AMDWMMALayout(3, True, warp_bases, [], [16, 16, instr_k])
'''


LDS_RING = '''
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
    vec = {k_widths}[dtype.primitive_bitwidth]
    # Rows of K shorter than the 128 bytes the banks span share a phase (`per_phase` rows of it), as in Triton's own
    # AMD layouts: a lane's stores into neighbouring rows are then a constant stride apart, which the compiler pairs
    # (`ds_write2_b32`), and the phases still spread a wavefront's reads over the banks.
    row_bytes = (shape[1] if operand == 0 else shape[0]) * dtype.primitive_bitwidth // 8
    per_phase = max(1, 128 // row_bytes)
    max_phase = max(1, min(16 // per_phase, (shape[1] if operand == 0 else shape[0]) // vec))
    return gl.SwizzledSharedLayout(vec=vec, per_phase=per_phase, max_phase=max_phase,
                                   order=[1, 0] if operand == 0 else [0, 1])
'''

LDS_COPY = '''
@gluon.constexpr_function
def _lds_copy_layout(shape, dtype, operand):
    """Shared layout of a ring slot filled by direct-to-LDS copies: plain row-major (the copy engine writes each
    lane's vector where the lane's address says; it cannot swizzle)."""
    return gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[1, 0])
'''

DESC_COPY = '''
@gluon.jit
def _desc_copy(desc, off0, off1, dest):
    """`desc.load([off0, off1])` straight into the LDS slot `dest`; elements outside the descriptor's shape read as
    zero. A tile whose columns all lie inside the shape goes by direct-to-LDS async copies (16 bytes a lane: a tensor
    descriptor's base and row stride are 16-byte aligned, a requirement of `tl.make_tensor_descriptor`, which the
    hints pass on); a tile cut by the last column (or at a column offset not a multiple of the vector) goes through
    registers, since a direct-to-LDS copy moves a lane's
    whole vector or nothing. The caller closes the commit group."""
    base, size0, size1, stride0, stride1 = desc
    layout: gl.constexpr = _copy_layout(dest.shape, dest.dtype, gl.num_warps())
    vec: gl.constexpr = 128 // dest.dtype.primitive_bitwidth
    rows = off0 + gl.arange(0, dest.shape[0], layout=gl.SliceLayout(1, layout))
    cols = off1 + gl.arange(0, dest.shape[1], layout=gl.SliceLayout(0, layout))
    if (off1 % vec == 0) and (off1 + dest.shape[1] <= size1):
        row_offsets = gl.multiple_of(rows * stride0, vec)
        ptrs = base + (row_offsets[:, None] + cols[None, :] * stride1)
        ptrs = gl.max_contiguous(gl.multiple_of(ptrs, [1, 16]), [1, vec])  # 16 bytes: pointer hints count bytes
        in_rows = gl.full(dest.shape, 1, gl.int1, layout) & (rows[:, None] < size0)
        async_copy.global_load_to_shared(dest, ptrs, mask=in_rows, other=0.0)
    else:
        mask = (rows[:, None] < size0) & (cols[None, :] < size1)
        dest.store(gl.load(base + rows[:, None] * stride0 + cols[None, :] * stride1, mask=mask, other=0))
'''

LDS_TILE_COPY = '''
@gluon.jit
def _lds_tile_copy(dest, base, offsets, mask=None):
    """A direct-to-LDS copy of a tile into the slot `dest`, from the scalar pointer `base` at the 32-bit `offsets`
    (gfx1250 has no buffer form of the copy): the base advances as a scalar between iterations and the offsets stay,
    so no tile of 64-bit pointers lives across the loop. Masked lanes write zeros."""
    async_copy.global_to_shared(dest, base + offsets, mask=mask)
'''

COPY_LAYOUT = '''
@gluon.constexpr_function
def _copy_layout(shape, dtype, num_warps, rows=1):
    """Register layout of a tile copied to LDS: 16 bytes per lane along the contiguous last dimension (the widest
    global load and direct-to-LDS transfer), lanes across it first, warps down the rows; `rows` rows a lane where the
    tile has rows enough (a tile stored transposed: each lane then holds pairs along the stored contiguous axis)."""
    vec = min(128 // dtype.primitive_bitwidth, shape[1])
    if vec * dtype.primitive_bitwidth == 64:
        vec //= 2  # (a direct-to-LDS copy moves 4 or 16 bytes a lane, not 8: rows of 8 bytes go in two halves)
    lanes_n = min({warp_size}, shape[1] // vec)
    lane_rows = rows if shape[0] >= rows * num_warps * ({warp_size} // lanes_n) else 1
    return gl.BlockedLayout([lane_rows, vec], [{warp_size} // lanes_n, lanes_n], [num_warps, 1], [1, 0])
'''

REGISTER_COPY = '''
@gluon.jit
def _tile_load(ring, ptrs, mask=None, other=None):
    """A tile for a slot of `ring`, loaded into registers 16 bytes a lane (`ptrs` and `mask` are laid out by
    `_copy_layout` for the ring's tiles); the caller stores it into its slot a step later. This target has no
    direct-to-LDS copy of 16 bytes a lane."""
    return gl.load(ptrs, mask=mask, other=other)
'''

BUFFER_REGISTER_COPY = '''
@gluon.jit
def _buffer_tile_load(ring, base, offsets, mask=None):
    """A tile for a slot of `ring`, loaded into registers by a buffer load from the scalar base at 32-bit offsets
    (16 bytes a lane; masked lanes read zeros, without a branch); the caller stores it into its slot a step later."""
    return {arch}.buffer_load(base, offsets, mask=mask)
'''

LDS_TDM = '''
@gluon.constexpr_function
def _lds_tdm_layout(shape, dtype, operand):
    """Shared layout of a ring slot filled by TDM: rows padded (8 elements after each row of A, 16 after each row
    of B) so that the operand reads of the WMMA lanes fall into different banks."""
    return gl.PaddedSharedLayout.with_identity_for([[shape[1], 8 if operand == 0 else 16]], shape, [1, 0])
'''


from transpile.passes.tma_tiles import LAUNCHER, WARP_PIPELINED_LAUNCHER  # noqa: E402
from transpile.rules.hopper_persistent import PERSISTENT_GRID  # noqa: E402


def _amd_target(name: str, aliases: tuple[str, ...], arch: str, warp_size: int, mma: str, copy: str, lds: int,
                mma_snippets: dict[str, str], imports: tuple[str, ...], k_widths: str, engine: str,
                buffer_ops: str, pointer_copy: str | None = None, scaled_mma: str = "") -> Target:
    """`buffer_ops`: the module of the target's buffer loads (`gl.amd.cdna3`, ...); `pointer_copy`: its direct-to-LDS
    copy of a pointer tile where the descriptor tiles go by another engine (gfx1250)."""
    snippets = {
        "blocked_layout": s.BLOCKED_LAYOUT.format(warp_size=warp_size),
        "acc_dtype": s.ACC_DTYPE,
        "dot_acc": s.DOT_ACC,
        "cta_barrier": s.CTA_BARRIER,
        "expand_scalar": s.EXPAND_SCALAR,
        **mma_snippets,
        "desc_load": s.DESC_LOAD,
        "aligned_or_triton": s.ALIGNED_LAUNCHER,
        "lds_ring": LDS_RING.format(k_widths=k_widths),
        "copy_layout": COPY_LAYOUT.format(warp_size=warp_size),
        "lds_copy": LDS_COPY,
        "desc_copy": DESC_COPY,
        "register_copy": REGISTER_COPY,
        "buffer_register_copy": BUFFER_REGISTER_COPY.format(arch=buffer_ops),
        "lds_tile_copy": LDS_TILE_COPY,
        "lds_tdm": LDS_TDM,
        "desc_store": s.DESC_STORE,
        "persistent_grid": PERSISTENT_GRID,
        "tma_or_triton": LAUNCHER,
        "warp_pipelined_or_triton": WARP_PIPELINED_LAUNCHER,
    }
    return Target(name=name, aliases=aliases, backend="hip", arch=arch, warp_size=warp_size, mma=mma,
                  copy_engine=copy, shared_memory_bytes=lds, min_triton=(3, 9), rules=_rules(engine, pointer_copy),
                  imports=(*GLUON_IMPORTS, *imports), snippets=snippets, scaled_mma=scaled_mma)


def _mfma(arch: str, version: int, depths: str, k_widths: str, instr_name: str,
          float8: tuple[int | str, int | str, str, str], scaled: bool = False) -> dict[str, str]:
    """The MFMA snippets of `arch`; `float8`: the K depth and k_width of fp8 operands (numbers, or expressions of
    `dtype`), why (a comment), and the fp8 kinds the instructions take (a tuple's text; the others go through fp16);
    `scaled`: OCP fp8 dots go by the f8f6f4 instructions (`_f8f6f4`)."""
    float8_depth, float8_k_width, float8_why, float8_native = float8
    snippets = {
        "float8_via_fp16": FLOAT8_VIA_FP16.format(arch=arch, float8_native=float8_native),
        "mma_layout": MFMA_LAYOUT.format(arch=arch, version=version, depths=depths, float8_depth=float8_depth,
                                         float8_why=float8_why),
        "mma_k_width": MFMA_K_WIDTH.format(arch=arch, k_widths=k_widths, float8_k_width=float8_k_width),
        "dot": MFMA_DOT.format(instr="MFMA", instr_name=instr_name, scaled=SCALED_DOT if scaled else ""),
    }
    if scaled:
        snippets = {"f8f6f4": F8F6F4, **snippets, "scaled_layouts": SCALED_MFMA_LAYOUTS,
                    "dot_scaled": DOT_SCALED.format(instr="scaled MFMA", instr_name="mfma_scaled")}
    return snippets


GFX942 = _amd_target(
    "gfx942", ("mi300",), "gfx942", 64, "MFMA (gl.amd.cdna3.mfma, AMDMFMALayout version 3)",
    "16-byte buffer loads into registers + shared-memory stores", 64 * 1024,
    _mfma("gfx942", 3, "{8: 16, 16: 8, 32: 2}", "{8: 8, 16: 4, 32: 1}", "mfma",
          (16, 8, "the fp8 instructions of gfx942 are as deep as its int8 ones", '("fp8e4b8", "fp8e5b16")')),
    ("from triton.experimental.gluon.language.amd.cdna3 import mfma",), "{8: 8, 16: 4, 32: 1}", "registers",
    "gl.amd.cdna3",
    scaled_mma="has no scaled MFMA (Triton's own compile upcasts the operands to bf16 in software)",
)
GFX950 = _amd_target(
    "gfx950", ("mi350",), "gfx950", 64, "MFMA (gl.amd.cdna4.mfma, AMDMFMALayout version 4)",
    "direct-to-LDS async copies", 160 * 1024,
    _mfma("gfx950", 4, "{8: 32, 16: 16, 32: 2}", "{8: 16, 16: 8, 32: 1}", "mfma",
          ('64 if _f8f6f4(dtype) != "" else 16', '16 if _f8f6f4(dtype) != "" and (layout is None or layout.instr_shape[2] >= 64 * (32 // '
           'layout.instr_shape[0])) else 8',
           "OCP fp8 goes by the f8f6f4 instructions (K 64 at 32x32: `mfma_scaled` without scales); the fnuz kinds "
           "by gl.amd.cdna4.mfma at the depth of gfx942's instructions", '("fp8e4nv", "fp8e5", "fp8e4b8", "fp8e5b16")'),
          scaled=True),
    ("from triton.experimental.gluon.language.amd.cdna4 import async_copy, get_mfma_scale_layout, mfma, mfma_scaled",),
    "{8: 16, 16: 8, 32: 1}",
    "async_copy",
    "gl.amd.cdna4",
)
GFX1250 = _amd_target(
    "gfx1250", (), "gfx1250", 32, "WMMA (gl.amd.gfx1250.wmma, AMDWMMALayout version 3)",
    "TDM for descriptors; direct-to-LDS async copies for pointer tiles", 320 * 1024,
    {
        "float8_via_fp16": FLOAT8_VIA_FP16.format(arch="gfx1250", float8_native='("fp8e4nv", "fp8e5")'),
        "mma_layout": WMMA_LAYOUT,
        "mma_k_width": MFMA_K_WIDTH.format(arch="gfx1250 WMMA", k_widths="{8: 8, 16: 8, 32: 2}", float8_k_width=8),
        "dot": MFMA_DOT.format(instr="WMMA", instr_name="wmma", scaled=""),
        "scaled_layouts": SCALED_WMMA_LAYOUTS,
        "dot_scaled": DOT_SCALED.format(instr="scaled WMMA", instr_name="wmma_scaled"),
    },
    # Pointer tiles go by direct-to-LDS async copies (`global_load_async_to_lds`, as Triton's own gfx1250 code copies
    # them) from a scalar base at 32-bit offsets (`_lds_tile_copy`: gfx1250 has no buffer form of the copy); their slots
    # are read with a plain `.load` (its async_copy has no `load_shared_relaxed`). Measured against the buffer loads
    # into registers they replace: bench/RESULTS.md.
    ("from triton.experimental.gluon.language.amd.gfx1250 import async_copy, get_wmma_scale_layout, tdm, wmma, "
     "wmma_scaled",), "{8: 8, 16: 8, 32: 2}",
    "tdm", "gl.amd.gfx1250", pointer_copy=GFX1250_POINTER_COPY,
)
