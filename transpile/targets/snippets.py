"""Module-level helpers the rules emit into variants, as source text (shared by the target families).

Each is small, documented and self-contained: a variant imports only triton (and torch where its source did).
`WARP_SIZE` and other per-target numbers are baked in by `format` so that the helpers need no target query.
"""

BLOCKED_LAYOUT = '''
@gluon.constexpr_function
def _blocked_layout(shape, num_warps, reduced=(), warps_last=False):
    """Blocked layout for a tile of `shape` (0: size unknown here). Each thread holds a vector of up to 4
    elements of the contiguous last dimension, no more than its share of the tile (a small tile is spread over all
    the threads instead of being replicated); the {warp_size} lanes of a warp cover the last dimension first; warps
    split the first dimensions (with `warps_last`, the last one first, as Triton arranges them). Loads and stores of
    row-major tiles coalesce. `reduced`: axes other than the last that the tile is reduced along (a column
    reduction); lanes and warps then go to the other axes first, so that each thread reduces whole columns itself."""
    rank = len(shape)
    size = [s if s else {warp_size} * 4 * num_warps for s in shape]
    elements = 1
    for s in size:
        elements *= s
    share = (size[-1] if reduced else elements) // ({warp_size} * num_warps)
    size_per_thread = [1] * (rank - 1) + [max(1, min(4, size[-1], share))]
    threads_per_warp = [1] * rank
    lanes = {warp_size}
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
'''

ACC_DTYPE = '''
@gluon.constexpr_function
def _acc_dtype(operand_dtype):
    """Accumulator type of `tl.dot` without `out_dtype`: int32 for integer operands, float32 otherwise."""
    return gl.int32 if operand_dtype.is_int() else gl.float32
'''

DOT_ACC = '''
@gluon.jit
def _dot_acc(a, b, acc):
    """`acc + tl.dot(a, b)` in one MMA accumulating into `acc` where the product has the accumulator's type (as
    Triton's own compiler folds that addition), else the product added to it."""
    if acc.dtype == _acc_dtype(a.dtype):
        return _dot(a, b, acc)
    else:
        return acc + _dot(a, b, gl.zeros(acc.shape, _acc_dtype(a.dtype), layout=acc.type.layout))
'''

EXPAND_SCALAR = '''
@gluon.jit
def _expand_scalar(value, shape: gl.constexpr, layout: gl.constexpr):
    """`value[None]` (`value[None, None]`, ...) of a 0-d tensor: Triton expands it to a tensor of `shape` (ones);
    Gluon cannot expand a value that has no layout, so the tensor is filled with it in `layout`."""
    return gl.full(shape, value, value.dtype, layout)
'''

CTA_BARRIER = '''
# A CTA-wide barrier: `gl.barrier` in Triton 3.9, `gl.thread_barrier` before it.
_cta_barrier = getattr(gl, "barrier", None) or gl.thread_barrier
'''

DESC_LOAD = '''
@gluon.jit
def _desc_load(desc, off0, off1, BLOCK0: gl.constexpr, BLOCK1: gl.constexpr, layout: gl.constexpr):
    """`desc.load([off0, off1])` without a tensor-memory engine: a masked pointer load of the tile; elements outside
    the descriptor's shape read as zero, as with a descriptor."""
    base, size0, size1, stride0, stride1 = desc
    rows = off0 + gl.arange(0, BLOCK0, layout=gl.SliceLayout(1, layout))
    cols = off1 + gl.arange(0, BLOCK1, layout=gl.SliceLayout(0, layout))
    mask = (rows[:, None] < size0) & (cols[None, :] < size1)
    return gl.load(base + rows[:, None] * stride0 + cols[None, :] * stride1, mask=mask, other=0)
'''

DESC_STORE = '''
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
'''

#: The host launcher of a kernel without a pipelined loop (`transpile.analysis.launch_alignment`).
ALIGNED_LAUNCHER = '''
class _AlignedOrTriton:
    """`kernel[grid](*args, **kwargs)`: the Gluon kernel for launches whose rows are 16-byte aligned (the `divisible`
    arguments, which its addresses read: tensors 16-byte aligned, ints multiples of 16; None, an absent optional
    pointer, reads nothing) and whose tensors hold elements of 4 bytes or more, the source's Triton kernel for the
    others. Triton compiles loads of one element per thread where rows are not aligned, and of 16 bytes per thread
    (8 16-bit elements) where they are: both faster there than the Gluon kernel's layouts of up to 4 contiguous
    elements per thread. With `narrow` (a kernel whose column reductions its layouts keep inside each thread, which
    Triton's do not) the Gluon kernel also takes aligned launches of 8- and 16-bit data."""

    def __init__(self, gluon_kernel, triton_kernel, params, divisible=(), narrow=False):
        self.gluon_kernel = gluon_kernel
        self.triton_kernel = triton_kernel
        self.params = params
        self.divisible = divisible
        self.narrow = narrow
        self.checked = tuple((params.index(name), name) for name in divisible)

    def aligned(self, args, kwargs):
        for index, name in self.checked:
            value = args[index] if index < len(args) else kwargs.get(name)
            if hasattr(value, "data_ptr"):
                if value.data_ptr() % 16:
                    return False
                if not self.narrow and hasattr(value, "element_size") and value.element_size() < 4:
                    return False
            elif isinstance(value, int) and not isinstance(value, bool) and value % 16:
                return False
        return True

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            kernel = self.gluon_kernel if self.aligned(args, kwargs) else self.triton_kernel
            return kernel[grid](*args, **kwargs)

        return launch

    def __getattr__(self, name):  # `best_config`, `fn`, ...: the Gluon kernel's
        if name.startswith("__") or "gluon_kernel" not in self.__dict__:  # (copies made without __init__)
            raise AttributeError(name)
        return getattr(self.gluon_kernel, name)
'''
