"""Gluon helpers of every target: layouts of plain tiles, `tl.dot`'s accumulator type, descriptors without a
copy engine. Copied into variants from here (`transpile.helpers`); `WARP_SIZE` is a target parameter."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

# Target parameters (see `transpile.helpers`): the values here are the AMD targets' of the CDNA family.
WARP_SIZE = 64


@gluon.constexpr_function
def _blocked_layout(shape, num_warps, reduced=(), warps_last=False):
    """Blocked layout for a tile of `shape` (0: size unknown here). Each thread holds a vector of up to 4
    elements of the contiguous last dimension, no more than its share of the tile (a small tile is spread over all
    the threads instead of being replicated); the {warp_size} lanes of a warp cover the last dimension first; warps
    split the first dimensions (with `warps_last`, the last one first, as Triton arranges them). Loads and stores of
    row-major tiles coalesce. `reduced`: axes other than the last that the tile is reduced along (a column
    reduction); lanes and warps then go to the other axes first, so that each thread reduces whole columns itself."""
    rank = len(shape)
    size = [s if s else WARP_SIZE * 4 * num_warps for s in shape]
    elements = 1
    for s in size:
        elements *= s
    share = (size[-1] if reduced else elements) // (WARP_SIZE * num_warps)
    size_per_thread = [1] * (rank - 1) + [max(1, min(4, size[-1], share))]
    threads_per_warp = [1] * rank
    lanes = WARP_SIZE
    for dim in reversed(range(rank)):
        threads_per_warp[dim] = min(lanes, max(1, size[dim] // size_per_thread[dim]))
        lanes //= threads_per_warp[dim]
    threads_per_warp[0] *= lanes
    warps_per_cta = [1] * rank
    warps = num_warps
    order = list(reversed(range(rank))) if warps_last else list(range(rank))
    for dim in [d for d in order if d not in reduced] + [d for d in order if d in reduced]:
        warps_per_cta[dim] = min(warps, max(1, size[dim] // (size_per_thread[dim] * threads_per_warp[dim])))
        warps //= warps_per_cta[dim]
    warps_per_cta[0] *= warps
    return gl.BlockedLayout(size_per_thread, threads_per_warp, warps_per_cta, list(reversed(range(rank))))


@gluon.constexpr_function
def _acc_dtype(operand_dtype):
    """Accumulator type of `tl.dot` without `out_dtype`: int32 for integer operands, float32 otherwise."""
    return gl.int32 if operand_dtype.is_int() else gl.float32


@gluon.jit
def _expand_scalar(value, shape: gl.constexpr, layout: gl.constexpr):
    """`value[None]` (`value[None, None]`, ...) of a 0-d tensor: Triton expands it to a tensor of `shape` (ones);
    Gluon cannot expand a value that has no layout, so the tensor is filled with it in `layout`."""
    return gl.full(shape, value, value.dtype, layout)


# A CTA-wide barrier: `gl.barrier` in Triton 3.9, `gl.thread_barrier` before it.
_cta_barrier = getattr(gl, "barrier", None) or gl.thread_barrier


@gluon.jit
def _desc_load(desc, off0, off1, BLOCK0: gl.constexpr, BLOCK1: gl.constexpr, layout: gl.constexpr):
    """`desc.load([off0, off1])` without a tensor-memory engine: a masked pointer load of the tile; elements outside
    the descriptor's shape read as zero, as with a descriptor."""
    base, size0, size1, stride0, stride1 = desc
    rows = off0 + gl.arange(0, BLOCK0, layout=gl.SliceLayout(1, layout))
    cols = off1 + gl.arange(0, BLOCK1, layout=gl.SliceLayout(0, layout))
    mask = (rows[:, None] < size0) & (cols[None, :] < size1)
    return gl.load(base + rows[:, None] * stride0 + cols[None, :] * stride1, mask=mask, other=0)


@gluon.jit
def _desc_store(desc, off0, off1, value):
    """`desc.store([off0, off1], value)` without a tensor-memory engine: a masked pointer store of the tile;
    elements outside the descriptor's shape are not written."""
    base, size0, size1, stride0, stride1 = desc
    layout: gl.constexpr = value.type.layout
    rows = off0 + gl.arange(0, value.shape[0], layout=gl.SliceLayout(1, layout))
    cols = off1 + gl.arange(0, value.shape[1], layout=gl.SliceLayout(0, layout))
    mask = (rows[:, None] < size0) & (cols[None, :] < size1)
    gl.store(base + rows[:, None] * stride0 + cols[None, :] * stride1, value.to(base.dtype.element_ty), mask=mask)


@gluon.jit
def _aligned_ptr(ptr):
    """`ptr` rounded down to 16 bytes, as a value the compiler knows 16-byte aligned: `ptr` itself wherever `ptr` is
    aligned (a pipelined loop tests that at run time of a base pointer the kernel loads, and reads its copies'
    addresses from this value there). Made afresh, so that the hint binds this value alone, not `ptr`."""
    return gl.multiple_of((ptr.to(gl.int64) // 16 * 16).to(ptr.dtype), 16)


@gluon.constexpr_function
def _elements_in_16_bytes(dtype, other=None):
    """Elements of `dtype` in 16 bytes; with `other`, of the narrower of the two (a multiple of it is one of both)."""
    bits = dtype.primitive_bitwidth if other is None else min(dtype.primitive_bitwidth, other.primitive_bitwidth)
    return 128 // bits


@gluon.jit
def _aligned_int(value, dtype: gl.constexpr, other: gl.constexpr = None):
    """`value` (a count of `dtype` elements: a row stride, a bound; of `dtype` and `other` where two tiles read it)
    rounded down to a multiple of 16 bytes of them, as a value the compiler knows to be one: `value` itself wherever
    it is such a multiple (see `_aligned_ptr`)."""
    n: gl.constexpr = _elements_in_16_bytes(dtype, other)
    return gl.multiple_of(value // n * n, n)
