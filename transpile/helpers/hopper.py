"""Gluon helpers of Hopper (sm90): wgmma layouts and the wgmma `tl.dot`, TMA and cp.async copies, the turns of
warp-specialised consumers. Copied into variants from here (`transpile.helpers`). They compile under Triton 3.6 and
3.9 alike: where the two name an operation differently, a module-level alias picks the name the running Triton has."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

from transpile.helpers.common import _cta_barrier  # noqa: F401


@gluon.constexpr_function
def _mma_layout(m, ns, dtype, num_warps):
    """wgmma accumulator layout for [m, n] tiles of `dtype` operands: warps stacked along M (a warpgroup per 64 rows),
    the instruction as wide in N as every dot of this layout allows (at most 256), K = 32 bytes of `dtype`. A tile of
    fewer than 64 rows (a warpgroup's wgmma takes 64) gets the mma.sync layout instead, as Triton's own compile
    gives it: 16 x 8 instructions, warps split between M and N as Triton splits them (`_mma_sync_warps`)."""
    widths = [n for n in ns if n is not None] or [128]
    rows = 128 if m is None else m
    if rows < 64:
        return gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=_mma_sync_warps(rows, min(widths), num_warps),
                                         instr_shape=[16, 8])
    warps_m = max(4, min(num_warps, rows // 16))
    warps_n = num_warps // warps_m
    instr_n = min(256, min(widths) // warps_n)  # warps side by side in N split the tile's columns
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[warps_m, warps_n],
                                     instr_shape=[16, instr_n, 256 // dtype.primitive_bitwidth])


@gluon.constexpr_function
def _with_depth(layout, dtype):
    """`layout` (a wgmma accumulator layout) with the K depth of `dtype`'s instruction, 32 bytes: the same tiles and
    warps, so the accumulator's elements lie where they did (a conversion between the two moves nothing)."""
    return gl.NVMMADistributedLayout(version=layout.version, warps_per_cta=layout.warps_per_cta,
                                     instr_shape=[16, layout.instr_shape[1], 256 // dtype.primitive_bitwidth])


@gluon.constexpr_function
def _other_depth(layout, dtype):
    """The wgmma accumulator `layout` was laid out for operands of another depth than `dtype`'s (an fp32 dot beside
    16-bit ones whose results meet: one layout). An mma.sync layout names no depth."""
    return layout.version[0] == 3 and layout.instr_shape[2] != 256 // dtype.primitive_bitwidth


@gluon.constexpr_function
def _mma_sync_warps(m, n, num_warps):
    """Warps of an mma.sync accumulator of [m, n]: doubled along M while M has more 16-row instructions per warp than
    N has pairs of 8-column ones (and M has rows left for another warp), else along N (Triton's `warpsPerTileV2`)."""
    warps = [1, 1]
    while warps[0] * warps[1] < num_warps:
        if m // 16 // warps[0] >= n // 16 // warps[1] and warps[0] < m // 16:
            warps[0] *= 2
        else:
            warps[1] *= 2
    return warps


@gluon.constexpr_function
def _is_mma_sync(layout):
    """True for an mma.sync (version 2) accumulator layout (`_mma_layout` of fewer than 64 rows)."""
    return layout.version[0] == 2


@gluon.constexpr_function
def _mma_sync_operand(layout, index, dtype):
    """Register layout of operand `index` (0: A, 1: B) of an mma.sync into `layout`, 32 bits of `dtype` per register."""
    return gl.DotOperandLayout(operand_index=index, parent=layout, k_width=32 // dtype.primitive_bitwidth)


@gluon.constexpr_function
def _mma_k_width(shape, dtype, k_major):
    """NVMMA shared layout of a wgmma operand; 8- and 32-bit B operands must be K-major (stored transposed)."""
    transposed = k_major and dtype.primitive_bitwidth != 16
    return gl.NVMMASharedLayout.get_default_for(shape, dtype, transposed=transposed)


@gluon.constexpr_function
def _dot_a_in_registers(layout, dtype):
    """The wgmma of `_dot` reads a 16-bit A from registers when the accumulator's warps all lie along M. (Staged
    through shared memory instead, a [128, 32] 16-bit A, 64-byte swizzled, read by the two m64 steps of one
    warpgroup, made the kernel fault with an illegal address under Triton 3.6 on an H200; from registers it is exact
    and as fast: tests/test_helpers.py.)"""
    return dtype.primitive_bitwidth == 16 and layout.warps_per_cta[1] == 1


@gluon.jit
def _dot(a, b, acc):
    """`tl.dot(a, b, acc)` as one wgmma, the result waited for at once: B staged through shared memory in the NVMMA
    layout the tensor cores read (fenced, so that the async proxy sees the stores), a 16-bit A from registers in the
    accumulator's operand layout (`_dot_a_in_registers`; another A staged as B is). An accumulator of fewer than 64
    rows (`_mma_layout`) takes mma.sync instead, its operands in registers. Operands of another type than the layout
    was laid out for (an fp32 dot whose result meets a 16-bit dot's: one layout) run the wgmma of their own depth in a
    layout of the same tiles and warps (`_with_depth`), conversions that move nothing."""
    if _other_depth(acc.type.layout, a.dtype):
        own: gl.constexpr = _with_depth(acc.type.layout, a.dtype)
        return gl.convert_layout(_dot(a, b, gl.convert_layout(acc, own)), acc.type.layout)
    if _is_mma_sync(acc.type.layout):
        a = gl.convert_layout(a, _mma_sync_operand(acc.type.layout, 0, a.dtype))
        b = gl.convert_layout(b, _mma_sync_operand(acc.type.layout, 1, b.dtype))
        acc = mma_v2(a, b, acc)
    elif _dot_a_in_registers(acc.type.layout, a.dtype):
        a = gl.convert_layout(a, _register_a_layout(acc.type.layout, a.dtype))
        b_smem = gl.allocate_shared_memory(b.dtype, b.shape, _mma_k_width(b.shape, b.dtype, True), b)
        fence_async_shared()
        acc = warpgroup_mma(a, b_smem, acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=[acc])
    else:
        a_smem = gl.allocate_shared_memory(a.dtype, a.shape, _mma_k_width(a.shape, a.dtype, False), a)
        b_smem = gl.allocate_shared_memory(b.dtype, b.shape, _mma_k_width(b.shape, b.dtype, True), b)
        fence_async_shared()
        acc = warpgroup_mma(a_smem, b_smem, acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=[acc])
    return acc


@gluon.constexpr_function
def _scaled_compute_type(a_format, b_format):
    """The type a `tl.dot_scaled`'s operands are upcast to where there is no microscaled MMA: fp16 if either operand
    is fp16, else bf16 (as Triton's own compile decomposes the dot, `DecomposeScaledBlocked`)."""
    return gl.float16 if a_format == "fp16" or b_format == "fp16" else gl.bfloat16


@gluon.jit
def _upcast_scaled(x, scale, fmt: gl.constexpr, k_axis: gl.constexpr, dtype: gl.constexpr,
                   fast_math: gl.constexpr):
    """A `tl.dot_scaled` operand as the `dtype` tile it stands for: e2m1 values (two a byte, packed along K, axis
    `k_axis`) unpacked, other formats converted, then each run of values along K multiplied by its e8m0 scale
    (`scale` [rows, K // group] for A and B alike, the group 32 for MX formats: the byte put in a float's exponent,
    2^(s - 127)); a scale byte of 0xFF makes its values NaN unless `fast_math`. A scale of `None` is 1. B ([K, N])
    is scaled as its transpose."""
    if fmt == "e2m1":
        x = gl.fp4_to_fp(x, dtype, k_axis)
    else:
        x = x.to(dtype)
    if scale is not None:
        if k_axis == 0:
            x = gl.permute(x, (1, 0))
        rows: gl.constexpr = x.shape[0]
        k: gl.constexpr = x.shape[1]
        groups: gl.constexpr = scale.shape[1]
        x3 = gl.reshape(x, (rows, groups, k // groups))
        if dtype == gl.bfloat16:
            factor = (scale.to(gl.int16) << 7).to(gl.bfloat16, bitcast=True)
        else:
            factor = (scale.to(gl.int32) << 23).to(gl.float32, bitcast=True).to(dtype)
        factor = gl.expand_dims(gl.convert_layout(factor, gl.SliceLayout(2, x3.type.layout)), 2)
        x3 = x3 * factor
        if not fast_math:
            nan = gl.expand_dims(gl.convert_layout(scale == 255, gl.SliceLayout(2, x3.type.layout)), 2)
            x3 = gl.where(nan, float("nan"), x3)
        x = gl.reshape(x3, (rows, k))
        if k_axis == 0:
            x = gl.permute(x, (1, 0))
    return x


@gluon.jit
def _dot_scaled(a, a_scale, a_format: gl.constexpr, b, b_scale, b_format: gl.constexpr, acc,
                fast_math: gl.constexpr = False):
    """`tl.dot_scaled(a, a_scale, a_format, b, b_scale, b_format, acc)` on Hopper, which has no microscaled MMA: both
    operands upcast in registers to bf16 (fp16 where either is fp16) with their scales applied (`_upcast_scaled`),
    then the wgmma of `_dot`, as Triton's own compile decomposes the dot."""
    dtype: gl.constexpr = _scaled_compute_type(a_format, b_format)
    a = _upcast_scaled(a, a_scale, a_format, 1, dtype, fast_math)
    b = _upcast_scaled(b, b_scale, b_format, 0, dtype, fast_math)
    return _dot(a, b, acc)


@gluon.jit
def _mma_sync_slots(a, b, acc):
    """mma.sync of two tiles in shared memory (ring slots, or views of them) into `acc` (an mma.sync layout: tiles of
    fewer than 64 rows): each is read into the registers the instruction takes, then multiplied. The read is done
    when this returns: the caller's barrier is all that keeps a slot from being refilled while another warp reads."""
    a_regs = a.load(_mma_sync_operand(acc.type.layout, 0, a.dtype))
    b_regs = b.load(_mma_sync_operand(acc.type.layout, 1, b.dtype))
    return mma_v2(a_regs, b_regs, acc)


@gluon.jit
def _wgmma_a_regs(a, b, acc):
    """An asynchronous wgmma of `a` in registers (converted to the dot-operand layout of the accumulator's) and `b` in
    shared memory (a ring slot, or a view of one) into `acc`. The caller waits for it (`warpgroup_mma_wait`) before
    it reads the result or lets `b` be overwritten."""
    a = gl.convert_layout(a, gl.DotOperandLayout(operand_index=0, parent=acc.type.layout,
                                                 k_width=32 // a.dtype.primitive_bitwidth))
    return warpgroup_mma(a, b, acc, is_async=True)


@gluon.constexpr_function
def _register_a_layout(mma_layout, dtype):
    """Layout of a wgmma A operand held in registers: the dot-operand layout of the accumulator layout, 32 bits of
    `dtype` per register (k_width)."""
    return gl.DotOperandLayout(operand_index=0, parent=mma_layout, k_width=32 // dtype.primitive_bitwidth)


# TMA copies: `tma.async_load`/`tma.async_store` in Triton 3.9, `async_copy_*` before it.
_tma_async_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_async_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global


@gluon.jit
def _ws_turn_wait(turn, t, C: gl.constexpr):
    """Wait for consumer partition `C`'s `t`-th turn to issue its wgmmas: consumer 0 goes first (a fresh mbarrier
    counts as having completed the phase before phase 0), then each waits for the one before it to pass the turn."""
    if C == 0:
        mbarrier.wait(turn.index(C), (t & 1) ^ 1)
    else:
        mbarrier.wait(turn.index(C), t & 1)


@gluon.jit
def _ws_turn_pass(turn, C: gl.constexpr, NCONS: gl.constexpr):
    """Consumer partition `C` has issued its wgmmas: the next consumer's turn."""
    mbarrier.arrive(turn.index((C + 1) % NCONS))


@gluon.jit
def _ws_wgmma_consumer(a_ring, b_ring, ready, empty, num_iters, acc, TRANS_A: gl.constexpr = False,
                       TRANS_B: gl.constexpr = False):
    """Default partition of a warp-specialised TMA ring: waits for each slot the loader warp filled, runs the wgmma
    on it asynchronously with one left in flight, and hands the slot of the previous wgmma (now completed, in every
    warpgroup once the barrier has passed) back to the loader. TRANS_A/TRANS_B: the dot reads that operand's tile
    transposed (`tl.trans(w)`). Returns the accumulator as a 1-tuple (Triton 3.6's `warp_specialize` flattens the
    default partition's results)."""
    NUM_STAGES: gl.constexpr = a_ring.shape[0]
    for it in range(num_iters):
        slot = it % NUM_STAGES
        mbarrier.wait(ready.index(slot), (it // NUM_STAGES) & 1)
        a = a_ring.index(slot)
        if TRANS_A:
            a = a.permute((1, 0))
        b = b_ring.index(slot)
        if TRANS_B:
            b = b.permute((1, 0))
        acc = warpgroup_mma(a, b, acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=[acc])
        if gl.num_warps() > 4:
            _cta_barrier()
        mbarrier.arrive(empty.index((it + NUM_STAGES - 1) % NUM_STAGES), pred=it > 0)
    acc = warpgroup_mma_wait(0, deps=[acc])
    return (acc, )


# cp.async copies into shared memory: `async_copy.async_load` in Triton 3.9, `async_copy_global_to_shared` before it.
_cp_async_load = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared


@gluon.constexpr_function
def _copy_layout(shape, dtype, num_warps, bits=128):
    """Blocked layout for a tile that cp.async copies into shared memory: each thread holds `bits` contiguous bits of
    the last dimension (by default 16 bytes, 8 x 16-bit elements: the copy engine's widest and fastest copy), the 32
    lanes of a warp cover the last dimension first, warps split the first dimension."""
    rank = len(shape)
    size = list(shape)
    size_per_thread = [1] * (rank - 1) + [min(bits // dtype.primitive_bitwidth, size[-1])]
    threads_per_warp = [1] * rank
    lanes = 32
    for dim in reversed(range(rank)):
        threads_per_warp[dim] = min(lanes, max(1, size[dim] // size_per_thread[dim]))
        lanes //= threads_per_warp[dim]
    threads_per_warp[0] *= lanes
    warps_per_cta = [1] * rank
    warps = num_warps
    for dim in range(rank):
        warps_per_cta[dim] = min(warps, max(1, size[dim] // (size_per_thread[dim] * threads_per_warp[dim])))
        warps //= warps_per_cta[dim]
    warps_per_cta[0] *= warps
    return gl.BlockedLayout(size_per_thread, threads_per_warp, warps_per_cta, list(reversed(range(rank))))


@gluon.constexpr_function
def _autotune_stages(config, table, default):
    """The ring depth of the autotune config being compiled: `table` holds one row per config, its constexpr values
    (and number of warps) followed by its `num_stages`; `config` is those values as compiled. `default` where no row
    matches (a launch outside the autotuner)."""
    key = [getattr(v, "value", v) for v in config]
    for row in table:
        values = [getattr(v, "value", v) for v in row]
        if values[:-1] == key:
            return values[-1]
    return default


@gluon.jit
def _tma_load(desc, coords, layout: gl.constexpr):
    """`desc.load(coords)`: one TMA copy of the tile into shared memory, completed on an mbarrier, then read into
    registers in `layout`. Out-of-bounds elements read as zero."""
    smem = gl.allocate_shared_memory(desc.dtype, desc.block_type.shape, desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, desc.block_type.nbytes)
    _tma_async_load(desc, coords, bar, smem)
    mbarrier.wait(bar, 0)
    mbarrier.invalidate(bar)
    return smem.load(layout)


@gluon.jit
def _tma_store(desc, coords, value):
    """`desc.store(coords, value)`: the tile goes to shared memory, a fence makes it visible to the TMA engine, one
    TMA store writes it (out-of-bounds elements are not written) and completes before returning."""
    smem = gl.allocate_shared_memory(desc.dtype, desc.block_type.shape, desc.layout, value.to(desc.dtype))
    fence_async_shared()
    _tma_async_store(desc, coords, smem)
    tma.store_wait(0)


@gluon.constexpr_function
def _fit_stages(depth, stage_bytes, reserved_bytes):
    """The ring depth of a persistent kernel: `depth`, or fewer where the slots of `stage_bytes` and the
    `reserved_bytes` its epilogue keeps in shared memory at the same time would not fit in an SM's 227 KiB (less
    1 KiB for the barriers); at least 2."""
    fit = (227 * 1024 - 1024 - reserved_bytes) // stage_bytes
    return max(2, min(depth, fit))


@gluon.constexpr_function
def _tiles_fit(*tiles):
    """Whether shared-memory tiles fit in an SM's 227 KiB (less 1 KiB for barriers and scratch): `tiles` as
    (count, shape, dtype) triples in turn."""
    bits = 0
    for count, shape, dtype in zip(tiles[0::3], tiles[1::3], tiles[2::3]):
        elements = count
        for dim in shape:
            elements *= dim
        bits += elements * dtype.primitive_bitwidth
    return bits // 8 <= 227 * 1024 - 1024


@gluon.jit
def _tma_store_deferred(desc, coords, value):
    """`desc.store(coords, value)` in a loop over tiles: waits for the previous TMA store of this call site (which
    reads the same shared-memory buffer) before writing the tile there, and returns with this store in flight, so
    that it completes under the next tile's main loop. The caller waits for the last one (`tma.store_wait(0)`)."""
    tma.store_wait(0)
    smem = gl.allocate_shared_memory(desc.dtype, desc.block_type.shape, desc.layout, value.to(desc.dtype))
    fence_async_shared()
    _tma_async_store(desc, coords, smem)
