"""Gluon forms of `triton.language` functions that Gluon lacks or spells otherwise (`tl.argmax`, `tl.softmax`,
`tl.clamp`, ...), for every target. Copied into variants from here (`transpile.helpers`)."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def _scalar_operand(pointer, value):
    """A scalar operand of an atomic as a tensor of the pointers' shape and layout, of their element type (Triton
    3.6's Gluon does not broadcast it; Triton converts the value to that type too)."""
    if pointer.type.is_block():
        return gl.full(pointer.shape, value, pointer.dtype.element_ty, layout=pointer.type.layout)
    else:
        return value  # (one pointer: a scalar operand as it is)


@gluon.jit
def _softmax(x, dim: gl.constexpr = None, keep_dims: gl.constexpr = False, ieee_rounding: gl.constexpr = False):
    """`tl.softmax`: exp(x - max) / sum(exp(x - max)) along `dim` (0 when None), in `x`'s layout."""
    if dim is None:
        axis: gl.constexpr = 0
    else:
        axis: gl.constexpr = dim
    if len(x.shape) == 1:
        num = gl.exp(x - gl.max(x, 0))
        den = gl.sum(num, 0)
    else:
        num = gl.exp(x - gl.max(x, axis, keep_dims=True))
        den = gl.sum(num, axis, keep_dims=True)
    return gl.fdiv(num, den, ieee_rounding)


@gluon.jit
def _clamp(x, min, max, propagate_nan: gl.constexpr = None):
    """`tl.clamp` (Gluon has `gl.clamp` from Triton 3.9 on): `x` limited to [min, max]."""
    return gl.minimum(gl.maximum(x, min), max)


@gluon.jit
def _globaltimer():
    """`tl.extra.cuda.globaltimer()`: the GPU's nanosecond timer (PTX `%globaltimer`), read as Triton reads it."""
    return gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)


@gluon.jit
def _smid():
    """`tl.extra.cuda.smid()`: the multiprocessor the program runs on (PTX `%smid`), read as Triton reads it."""
    return gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=gl.int32, is_pure=True, pack=1)


@gluon.jit
def _globaltimer_not_amd():
    """`tl.extra.cuda.globaltimer()` on an AMD target: PTX, which no AMD target takes; compiled only where it is
    called (a branch a platform flag leaves out, `elif IS_CUDA:`, is not), where Triton's compile fails too."""
    gl.static_assert(False, "tl.extra.cuda.globaltimer reads a CUDA register: not on AMD targets")
    return 0


@gluon.jit
def _smid_not_amd():
    """`tl.extra.cuda.smid()` on an AMD target: as `_globaltimer_not_amd`."""
    gl.static_assert(False, "tl.extra.cuda.smid reads a CUDA register: not on AMD targets")
    return 0


@gluon.jit
def _index_along(x, axis: gl.constexpr):
    """int32 tensor of `x`'s shape and layout holding each element's index along `axis` (rank 1 or 2)."""
    gl.static_assert(len(x.shape) <= 2, "argmax/argmin: tensors of rank 1 or 2")
    if len(x.shape) == 1:
        index = gl.arange(0, x.shape[0], layout=x.type.layout)
    else:
        index = gl.arange(0, x.shape[axis], layout=gl.SliceLayout(1 - axis, x.type.layout))
        index = gl.broadcast(gl.expand_dims(index, 1 - axis), x)[0]
    return index


@gluon.jit
def _argmax_combine(value1, index1, value2, index2):
    pick = (value1 > value2) | ((value1 == value2) & (index1 < index2))
    return gl.where(pick, value1, value2), gl.where(pick, index1, index2)


@gluon.jit
def _argmax_combine_last(value1, index1, value2, index2):
    pick = value1 > value2
    return gl.where(pick, value1, value2), gl.where(pick, index1, index2)


@gluon.jit
def _argmax(x, axis: gl.constexpr, tie_break_left: gl.constexpr = True, keep_dims: gl.constexpr = False):
    """`tl.argmax`: the index of the largest element along `axis` (the first one on ties unless
    `tie_break_left=False`), reduced in `x`'s layout."""
    # (a negative axis counts from the last)
    dim: gl.constexpr = axis if axis >= 0 else axis + len(x.shape)
    if tie_break_left:
        _, index = gl.reduce((x, _index_along(x, dim)), dim, _argmax_combine, keep_dims=keep_dims)
    else:
        _, index = gl.reduce((x, _index_along(x, dim)), dim, _argmax_combine_last, keep_dims=keep_dims)
    return index


@gluon.jit
def _argmin_combine(value1, index1, value2, index2):
    pick = (value1 < value2) | ((value1 == value2) & (index1 < index2))
    return gl.where(pick, value1, value2), gl.where(pick, index1, index2)


@gluon.jit
def _argmin_combine_last(value1, index1, value2, index2):
    pick = value1 < value2
    return gl.where(pick, value1, value2), gl.where(pick, index1, index2)


@gluon.jit
def _argmin(x, axis: gl.constexpr, tie_break_left: gl.constexpr = True, keep_dims: gl.constexpr = False):
    """`tl.argmin`: the index of the smallest element along `axis` (the first one on ties unless
    `tie_break_left=False`), reduced in `x`'s layout."""
    # (a negative axis counts from the last)
    dim: gl.constexpr = axis if axis >= 0 else axis + len(x.shape)
    if tie_break_left:
        _, index = gl.reduce((x, _index_along(x, dim)), dim, _argmin_combine, keep_dims=keep_dims)
    else:
        _, index = gl.reduce((x, _index_along(x, dim)), dim, _argmin_combine_last, keep_dims=keep_dims)
    return index


@gluon.jit
def _max_with_indices(x, axis: gl.constexpr, tie_break_left: gl.constexpr = True, keep_dims: gl.constexpr = False):
    """`tl.max(x, axis, return_indices=True)`: the largest element along `axis` and its index (the first one on
    ties unless `return_indices_tie_break_left=False`), reduced in `x`'s layout (the values in `x`'s type, as
    Triton 3.9 returns them)."""
    # (a negative axis counts from the last)
    dim: gl.constexpr = axis if axis >= 0 else axis + len(x.shape)
    if tie_break_left:
        return gl.reduce((x, _index_along(x, dim)), dim, _argmax_combine, keep_dims=keep_dims)
    else:
        return gl.reduce((x, _index_along(x, dim)), dim, _argmax_combine_last, keep_dims=keep_dims)


@gluon.jit
def _min_with_indices(x, axis: gl.constexpr, tie_break_left: gl.constexpr = True, keep_dims: gl.constexpr = False):
    """`tl.min(x, axis, return_indices=True)`: the smallest element along `axis` and its index (the first one on
    ties unless `return_indices_tie_break_left=False`), reduced in `x`'s layout (the values in `x`'s type, as
    Triton 3.9 returns them)."""
    # (a negative axis counts from the last)
    dim: gl.constexpr = axis if axis >= 0 else axis + len(x.shape)
    if tie_break_left:
        return gl.reduce((x, _index_along(x, dim)), dim, _argmin_combine, keep_dims=keep_dims)
    else:
        return gl.reduce((x, _index_along(x, dim)), dim, _argmin_combine_last, keep_dims=keep_dims)
