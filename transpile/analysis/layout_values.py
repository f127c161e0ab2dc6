"""The values the layout analysis computes with (`transpile.analysis.layouts`): layout variables (`Term`, a
union-find), the abstract values of a kernel's names (`Scalar`, `Tensor`, `Descriptor`, `Tup`), the facts it records
(`DotSite`, `DescriptorInfo`, the anchors, `LayoutPlan`), the language surface it knows (which calls are elementwise,
reductions, scans, creations), and the algebra of element types and shapes (promotion, broadcasting, unification).
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import libcst as cst

from transpile.discover import JitFunction
from transpile.source import SourceFile

# --------------------------------------------------------------------------------------------------------------------
# Terms (layout variables) and abstract values


_ids = itertools.count()


@dataclass(eq=False)
class Term:
    """A layout variable. Roots of the union-find carry the class's facts."""

    rank: int | None
    shape: list[str | None] | None = None
    slice_of: tuple[int, Term] | None = None  # SliceLayout(dim, parent)
    dots: list[DotSite] | None = None  # MMA anchor: the dots whose results live in this class
    origins: set[str] = field(default_factory=set)  # what put tensors in this class (for helpers' params)
    names: list[str] = field(default_factory=list)  # variable names bound to this class, for readable layout names
    reduced: set[int] = field(default_factory=set)  # axes a reduction of this class runs along
    # Reduced along its last axis only once, after a loop that accumulates it elementwise (a row sum of squares, a
    # Welford reduction): Triton's own warp arrangement (warps along the last axis first) serves that loop best
    accumulated_rows: bool = False
    fresh_rows: bool = False  # ... and along its last axis where it is not so accumulated (a softmax row's max)
    # A blocked layout and nothing else: a scan's operand (Triton lowers scans of blocked layouts only, "unsupported
    # scan layout" for a slice of one or an MMA layout)
    plain: bool = False
    # ... whose last dimension each thread holds whole: a `tl.split` operand (Triton: "SplitOp requires at least 2
    # elements per thread in the last dimension")
    whole_last: bool = False
    # A dot operand's own layout (`gl.DotOperandLayout(k, <the dot's MMA layout>, k_width of <dtype>)`), where the
    # analysis was asked to anchor it there (`LayoutAnalysis.operand_anchors`): a tile computed from a loaded one
    # (dequantised weights) is then computed in the layout the MMA reads, with no conversion before the dot.
    # (position, the class's key (the loaded tile's term), the operand's element type, the MMA layout's class)
    operand: tuple[int, Term, str, Term | None] | None = None
    parent: Term | None = None
    id: int = field(default_factory=lambda: next(_ids))

    def find(self) -> Term:
        root = self
        while root.parent is not None:
            root = root.parent
        node = self
        while node.parent is not None and node.parent is not root:  # path compression
            node.parent, node = root, node.parent
        return root


@dataclass(frozen=True)
class Scalar:
    """Not a tensor: Python values, constexprs, scalar pointers and integers."""

    param: str | None = None  # the jit function parameter this value is, when it is one (maybe a pointer)
    # a pointer made in the kernel (`tl.load(p).to(tl.pointer_type(tl.float16))`): its pointee type, as source text
    pointee: str | None = None
    # a helper's argument that is `None` (the literal, or a parameter's `None` default the call leaves): Triton
    # compiles the helper for it, its `if x is not None:` branches decided at compile time (kind "none")
    none: bool = False


@dataclass(frozen=True)
class Tensor:
    term: Term
    # Element type as kernel-level source text (``a_ptr.dtype.element_ty``, ``gl.float16``) where the analysis can
    # tell; for a tensor of pointers, the pointee's type.
    elem: str | None = None
    # This value's own shape as source text per dimension (None where unknown); classes mix shapes.
    shape: tuple[str | None, ...] | None = None
    # A tensor of pointers (`ptr + offsets`): adding integer offsets of unknown type keeps the pointee type
    # (`X + n_idx * stride + ih` points into `X` whatever `ih` is); a load of it is no pointer.
    pointer: bool = False

    def derive(self, elem: str | None = None, shape: tuple[str | None, ...] | None = None) -> Tensor:
        return Tensor(self.term, elem if elem is not None else self.elem, shape if shape is not None else self.shape,
                      self.pointer and elem is None)

    @property
    def rank(self) -> int | None:
        return self.term.find().rank


@dataclass(frozen=True)
class Descriptor:
    """A device-side tensor descriptor made by ``tl.make_tensor_descriptor``."""

    name: str
    info: DescriptorInfo


@dataclass(frozen=True)
class Tup:
    items: tuple[Value, ...]


Value = Scalar | Tensor | Descriptor | Tup
SCALAR = Scalar()
NONE = Scalar(none=True)


@dataclass
class DotSite:
    node: cst.Call
    a: cst.BaseExpression
    b: cst.BaseExpression
    acc: cst.BaseExpression | None
    out_dtype: cst.BaseExpression | None
    input_precision: cst.BaseExpression | None
    result: Term
    shape: list[str | None]  # [M, N] as source text where known
    operand_dtype: str | None = None  # element type of the A operand as kernel-level source text
    a_shape: tuple[str | None, ...] | None = None  # the operands' shapes as source text where known
    b_shape: tuple[str | None, ...] | None = None
    b_dtype: str | None = None
    # `tl.dot_scaled(lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format[, acc])`: the scale and format
    # arguments of A and B (a scale may be `None`), else None (a plain `tl.dot`)
    scaled: tuple[cst.BaseExpression | None, cst.BaseExpression, cst.BaseExpression | None,
                  cst.BaseExpression] | None = None
    # the scale tiles' shapes as source text where known ([M, K // 32] and [N, K // 32])
    scale_shapes: tuple[tuple[str | None, ...] | None, tuple[str | None, ...] | None] = (None, None)

    def operand_shape(self, k: int) -> tuple[str | None, ...] | None:
        """The shape of operand `k` (0: A, 1: B; a scaled dot's 2: A's scales, 3: B's)."""
        if k >= 2:
            return self.scale_shapes[k - 2]
        return self.a_shape if k == 0 else self.b_shape

    def operand_type(self, k: int) -> str | None:
        """The element type of operand `k` (0: A, 1: B)."""
        return self.operand_dtype if k == 0 else self.b_dtype


@dataclass
class DescriptorInfo:
    """What ``tl.make_tensor_descriptor(base, shape, strides, block_shape)`` said, as source text."""

    node: cst.Call
    base: str
    shape: list[str]
    strides: list[str]
    block_shape: list[str]


@dataclass(frozen=True)
class OperandAnchor:
    """A tile load that a dot operand is computed from (`b = (w.to(tl.float32) * scales).to(tl.float16)`), to be laid
    out in that operand's MMA layout: the loaded value gets a class of its own in `gl.DotOperandLayout(position,
    <the dot's MMA layout>, ...)`, so do the broadcasts (`scales[None, :]`) among `nodes` (the computation's nodes,
    by id), and whatever else meets it is converted where it does. The AMD pipelines read such a tile from its ring
    slot straight in that layout: its computation then needs no conversion next to the MMA."""

    load: cst.Call = field(compare=False)
    dot: cst.Call = field(compare=False)
    position: int
    nodes: frozenset[int] = frozenset()
    # names the computation reads that the loop does not assign: each use among `nodes` takes the layout the
    # computation gives it, the value converted there (once, before the loop, by the hoisting rule)
    invariant: frozenset[str] = frozenset()


@dataclass(frozen=True)
class StoreAnchor:
    """A store in a dot loop whose products are made afresh each iteration (`u = tl.dot(a, v)` then `tl.store(p, u)`),
    to be laid out in the stored value's MMA layout: its pointers and mask are converted to that layout at the store
    instead of the value to theirs, and the AMD pipelines re-evaluate them there from their definitions (a conversion
    of the value would cross warps next to the MMA)."""

    store: cst.Call = field(compare=False)


@dataclass
class Refusal:
    node: cst.CSTNode
    code: str
    message: str


# --------------------------------------------------------------------------------------------------------------------
# The plan


@dataclass
class LayoutPlan:
    """Layout facts of one jit function, keyed by nodes of the source tree."""

    function: JitFunction
    creations: dict[cst.CSTNode, Term] = field(default_factory=dict)  # arange/zeros/full/desc.load: `layout=`
    converts: dict[cst.CSTNode, Term] = field(default_factory=dict)  # wrap the node in convert_layout(node, ...)
    convert_sources: dict[cst.CSTNode, Term] = field(default_factory=dict)  # ... the class each converts from
    # Names the module imports bound to helpers of elementwise math alone (`exp` from FLA's `fla.ops.utils.op`): their
    # result has their tensor argument's layout
    elementwise_imports: frozenset[str] = frozenset()
    param_converts: dict[str, Term] = field(default_factory=dict)  # helpers: convert a tensor parameter on entry
    param_terms: dict[str, Term] = field(default_factory=dict)  # helpers: the class of each tensor parameter
    dots: dict[cst.Call, DotSite] = field(default_factory=dict)
    descriptors: dict[str, DescriptorInfo] = field(default_factory=dict)
    # every `tl.make_tensor_descriptor` call, by node (a name made in both branches of a constexpr `if`, `if
    # TRANSPOSE_A: a_desc = ...` / `else: a_desc = ...`, holds the last in `descriptors`; each call is made here)
    descriptor_calls: dict[cst.Call, DescriptorInfo] = field(default_factory=dict)
    descriptor_makes: dict[str, list[DescriptorInfo]] = field(default_factory=dict)  # ... by the name bound to
    descriptor_ops: dict[cst.Call, tuple[str, DescriptorInfo]] = field(default_factory=dict)  # desc.load/.store
    transposes: set[cst.CSTNode] = field(default_factory=set)  # `x.T` and `x.trans()` on tensors
    # `x.argmax(1)` and other tensor methods whose Triton body Gluon cannot compile: the rule calls the function form.
    method_calls: dict[cst.Call, str] = field(default_factory=dict)
    # Calls of jit helpers: the helper and the kinds of its arguments (`scalar`, `tensor(rank 2)`, ...), and for a
    # helper the kinds it was analysed with (its first call's): `transpile.passes.specialise` copies a helper per kind
    helper_calls: dict[cst.CSTNode, tuple[str, tuple[str, ...]]] = field(default_factory=dict)  # (a call, a combine_fn)
    kinds: tuple[str, ...] | None = None
    # Implicit broadcasts made explicit: the node (of rank `own`) gets `added` leading new axes (`x` -> `x[None, :]`),
    # the expansion Gluon needs where plain Triton broadcasts a lower-rank tensor against a higher-rank one like numpy.
    expansions: dict[cst.CSTNode, tuple[int, int]] = field(default_factory=dict)  # node -> (added, own)
    # Helpers returning tuples of tensors: `a, b = helper(...)` is followed by one conversion per tensor name (the
    # callee returns its own layouts), as (name, layout class) pairs keyed by the assignment.
    tuple_converts: dict[cst.Assign, list[tuple[str, Term]]] = field(default_factory=dict)
    # What each `tl.load` of a tensor gives (its layout class, element type and shape)
    loads: dict[cst.Call, Tensor] = field(default_factory=dict)
    # `tl.full(x.shape, ...)` / `tl.zeros(x.shape, ...)` of a tensor of unknown rank: filled in `x`'s own layout
    shaped_like: dict[cst.CSTNode, str] = field(default_factory=dict)
    # Reshapes back to another tile's shape from another rank (`tl.reshape(t3, x.shape)` after work on a 3-d view of
    # `x`: a bitonic network): Triton's compiler derives each reshape's layout from its operand's, where the
    # translation converts the result to a layout of its own through shared memory (`engine`: kept as Triton)
    round_trips: list[cst.CSTNode] = field(default_factory=list)
    # the operands of atomics that are scalars (a number, a scalar argument, a 0-d reduction) on a tile of pointers:
    # broadcast to the pointers' shape by the rule (Triton 3.6's Gluon does not broadcast them)
    scalar_operands: set[cst.CSTNode] = field(default_factory=set)
    refusals: list[Refusal] = field(default_factory=list)
    returns: Value | None = None
    all_returns: tuple[Value, ...] = ()  # every `return`'s value, in the order the walk met them
    # filled by `solve`
    names: dict[int, str] = field(default_factory=dict)  # root id -> declared layout constant name
    declarations: list[tuple[str, str, Term]] = field(default_factory=list)  # (name, kind, root)

    def layout_expr(self, term: Term) -> str:
        """Source text of the layout of `term`'s class, e.g. ``gl.SliceLayout(1, acc_layout)``."""
        root = term.find()
        if root.slice_of is not None:
            dim, parent = root.slice_of
            return f"gl.SliceLayout({dim}, {self.layout_expr(parent)})"
        return self.names[root.id]

    def is_mma(self, term: Term) -> bool:
        return term.find().dots is not None


# --------------------------------------------------------------------------------------------------------------------
# Language surface the analysis knows


ELEMENTWISE = {
    "abs", "cdiv", "ceil", "cos", "div_rn", "erf", "exp", "exp2", "fdiv", "floor", "fma", "log", "log2", "maximum",
    "minimum", "rsqrt", "sin", "sqrt", "sqrt_rn", "umulhi", "where", "cast", "clamp", "sigmoid", "add", "sub", "mul",
    "uint_to_uniform_float", "map_elementwise",
}  # fmt: skip
# Random numbers: elementwise over the offsets (the seed is a scalar); the `4x` forms give four such tensors.
RANDOM = {"rand", "randn", "randint"}
RANDOM4 = {"rand4x", "randn4x", "randint4x", "philox", "philox_impl", "pair_uniform_to_normal"}
SAME_AS_FIRST = {"multiple_of", "max_contiguous", "max_constancy", "softmax", "flip"}
SCANS = {"cumsum", "cumprod", "associative_scan"}
REDUCTIONS = {"sum", "max", "min", "xor_sum", "reduce", "reduce_or", "argmax", "argmin"}
# Reductions as the stage planner sees them: each needs data from other warps (softmax reduces twice inside).
BARRIER_REDUCTIONS = REDUCTIONS | {"softmax"}
SCALAR_FUNCS = {
    "program_id", "num_programs", "static_range", "range", "static_assert", "static_print", "device_print",
    "device_assert", "debug_barrier", "constexpr", "assume", "pointer_type", "swizzle2d",
}  # fmt: skip
CREATIONS = {"arange", "zeros", "full"}
LIKE = {"zeros_like", "full_like"}
OPAQUE = {"trans", "permute", "reshape", "view", "ravel", "join", "interleave"}
DOT_KEYWORDS = {"input", "other", "acc", "input_precision", "allow_tf32", "max_num_imprecise_acc", "out_dtype"}
DOT_SCALED_KEYWORDS = {"lhs", "lhs_scale", "lhs_format", "rhs", "rhs_scale", "rhs_format", "acc", "fast_math",
                       "lhs_k_pack", "rhs_k_pack", "out_dtype"}
ATOMICS = {"atomic_add", "atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor", "atomic_xchg", "atomic_cas"}


# Position of `keep_dims` in each reduction's signature (tl.sum(input, axis, keep_dims, dtype), tl.max(input, axis,
# return_indices, return_indices_tie_break_left, keep_dims), ...); one less for the method forms.
_KEEP_DIMS_INDEX = {"sum": 2, "xor_sum": 2, "max": 4, "min": 4, "argmax": 3, "argmin": 3, "reduce": 3, "reduce_or": 2}


# Calls an unseen helper may make and still run when a Gluon kernel calls it (elementwise math on the tensors it is
# given: no layouts of its own). Any other call (a dot, a load, a new tensor, a reduction) makes the helper one that
# Gluon code cannot call.
_ELEMENTWISE_ONLY = ELEMENTWISE | {
    "exp", "exp2", "log", "log2", "log1p", "expm1", "sin", "cos", "tan", "tanh", "erf", "erfc", "sqrt", "rsqrt", "abs",
    "where", "maximum", "minimum", "fma", "to", "cast", "sigmoid", "softplus", "floor", "ceil", "round", "trunc",
    "pow", "isnan", "isinf", "fmod", "div_rz", "rint", "inline_asm_elementwise", "constexpr", "static_assert",
    "device_assert", "static_print", "float", "int", "bool", "jit", "heuristics",
    "assume", "min", "max",  # (a hint, and the builtins: `tl.assume(group_size_m >= 0)`, `min(...)` in aiter's pid_grid)
}  # fmt: skip


def _beyond_elementwise(fn: ast.FunctionDef, math_modules: frozenset[str] = frozenset()) -> bool:
    """The function calls something other than elementwise math (see _ELEMENTWISE_ONLY); a call of a libdevice or
    math module's function (`tldevice.fast_expf`, the module's alias in `math_modules`) is elementwise."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and ast.unparse(func.value) in math_modules:
                continue
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name not in _ELEMENTWISE_ONLY:
                return True
    return False


def _reduced_elem(elem: str | None, reducer: str) -> str | None:
    """Element type of a reduction's result: int32 indices for argmax/argmin, sums of small ints widened to 32 bits."""
    if reducer in ("argmax", "argmin"):
        return "gl.int32"
    if elem in _SMALL_INTS and reducer in ("sum", "xor_sum"):
        return "gl.uint32" if elem.startswith("gl.uint") else "gl.int32"
    return elem


def _strip_module(lang: str) -> str:
    """``math.exp`` -> ``exp``; ``core.load`` -> ``load``."""
    return lang.rsplit(".", 1)[-1]


_IDENT = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


_SMALL_INTS = {"gl.int1", "gl.int8", "gl.int16", "gl.uint8", "gl.uint16"}
# Element types by promotion rank within their kind (Triton promotes to the wider of two; fp16 with bf16 to fp32).
_DTYPE_ORDER = {
    "gl.int1": (0, 1), "gl.int8": (0, 8), "gl.uint8": (0, 8), "gl.int16": (0, 16), "gl.uint16": (0, 16),
    "gl.int32": (0, 32), "gl.uint32": (0, 32), "gl.int64": (0, 64), "gl.uint64": (0, 64),
    "gl.float8e5": (1, 8), "gl.float8e4nv": (1, 8), "gl.float8e4b8": (1, 8), "gl.float8e5b16": (1, 8),
    "gl.float8e4b15": (1, 8), "gl.float16": (1, 16), "gl.bfloat16": (1, 16), "gl.float32": (1, 32),
    "gl.float64": (1, 64),
}  # fmt: skip


def _element_type_of(node: cst.BaseExpression) -> tuple[str, tuple[str, ...]] | None:
    """`(y, chain)` for a type read off a name: `y.dtype`, `y.type.element_ty`, `y.dtype.element_ty`,
    `y.type.element_ty.element_ty`; None for other expressions."""
    chain: list[str] = []
    while isinstance(node, cst.Attribute):
        chain.insert(0, node.attr.value)
        node = node.value
    if isinstance(node, cst.Name) and tuple(chain) in _TYPE_CHAINS:
        return node.value, tuple(chain)
    return None


#: methods of a tensor descriptor (`desc.load([...])`): on a kernel parameter, one the host built
_DESCRIPTOR_METHODS = ("load", "store", "gather", "scatter", "atomic_add", "atomic_min", "atomic_max", "atomic_and",
                       "atomic_or", "atomic_xor")

#: spellings of a type read off a value, and whether they name the pointee of pointers (`p.dtype.element_ty`) or the
#: value's own element type (`y.dtype`, `y.type.element_ty` of a tensor); `p.type.element_ty` of a scalar pointer
#: parameter is its pointee too
_TYPE_CHAINS = {("dtype",): False, ("type", "element_ty"): False, ("dtype", "element_ty"): True,
                ("type", "element_ty", "element_ty"): True}


def promote(a: str | None, b: str | None) -> str | None:
    """The element type of an arithmetic result of tensors of types `a` and `b` (source text; None = unknown). Of a
    known and an unknown type the result is unknown below 32 bits: `x_fp16 * g` with `g` made by a helper the tool
    cannot read may be fp32 (a dot of it was laid out for fp16 operands: found by compiling public code); fp32 with a
    type the kernel is given (`qk - m[:, None]`, `m` loaded) is fp32 for every type but fp64."""
    if a is None or b is None:
        return None
    if a == b:
        return a
    ka, kb = _DTYPE_ORDER.get(a), _DTYPE_ORDER.get(b)
    if ka is None and kb is None:
        return None  # two types only the kernel knows
    if ka is None or kb is None:
        known = ka if ka is not None else kb
        # a type only the kernel knows (`x_ptr.dtype.element_ty`, a pointee) wins over an integer type; against a
        # float type narrower than 32 bits (fp16 data times an fp32 gate) the result depends on what the kernel is
        # given; fp32 (a dot's product, a softmax's) wins over any type a kernel with dots reads but fp64
        if known[0] == 0:
            return a if ka is None else b
        return (b if ka is None else a) if known[1] >= 32 else None
    if ka[0] != kb[0]:
        return a if ka[0] > kb[0] else b  # float wins over int
    if ka[0] == 1 and ka[1] == kb[1]:
        return "gl.float32"  # fp16 with bf16, two fp8 kinds
    return a if ka[1] >= kb[1] else b


def _dim(x: str | None, y: str | None) -> str | None:
    """One dimension of two shapes that meet (a broadcast, or two uses of one layout class): a size-1 dimension
    takes the other's size, known or not (`rows[:, None]` of unknown length meeting `cols[None, :]` is unknown in
    both dimensions, not 1); of a known and an unknown size, the known one."""
    if x == "1":
        return y
    if y == "1":
        return x
    if x is not None and y is not None and ".shape[" in x and ".shape[" not in y:
        return y  # (a helper parameter's own size, `a.shape[0]`, where a block size names it too: the name reads better)
    return x if x is not None else y


def _broadcast(a: tuple[str | None, ...] | None, b: tuple[str | None, ...] | None) -> tuple[str | None, ...] | None:
    if a is None or b is None:
        # (a size-1 dimension of the known shape takes the unknown one's size, unknown: `x * s[None, :]` of a helper
        # parameter `x` it rebinds is not [1, N])
        known = a if a is not None else b
        return tuple(None if dim == "1" else dim for dim in known) if known is not None else None
    if len(a) != len(b):
        return a
    return tuple(_dim(x, y) for x, y in zip(a, b))


def _with_pointee(tensor: Tensor, other: Value, constexprs: Sequence[str] = (),
                  pointers: set[str] | frozenset[str] = frozenset()) -> Tensor:
    """`ptr + offsets`: a tensor of pointers whose pointee type is that of the parameter `ptr` (the outermost
    addition of a parameter wins: `a_ptr + (offs + start)` points into `a_ptr`; a constexpr parameter is no
    pointer)."""
    if isinstance(other, Scalar) and other.param is not None and other.param not in constexprs:
        if tensor.pointer and tensor.elem is not None and other.param not in pointers:
            return tensor  # (a tile of pointers moved by an integer parameter, `x_ptrs += stride_x_head`: same pointee)
        # (a tensor of pointers only where the parameter is an address base of the kernel's loads and stores: an
        # integer parameter, `cols - seq_len`, keeps the old reading of its type and is no pointer)
        return Tensor(tensor.term, f"{other.param}.dtype.element_ty", tensor.shape, pointer=other.param in pointers)
    if isinstance(other, Scalar) and other.pointee is not None:
        return Tensor(tensor.term, other.pointee, tensor.shape, pointer=True)
    return tensor


def _shape_of(node: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """`x` of a shape written `x.shape` or `x.type.get_block_shapes()`, else None."""
    if isinstance(node, cst.Attribute) and node.attr.value == "shape":
        return node.value
    if isinstance(node, cst.Call) and not node.args and isinstance(node.func, cst.Attribute) \
            and node.func.attr.value == "get_block_shapes" and isinstance(node.func.value, cst.Attribute) \
            and node.func.value.attr.value == "type":
        return node.func.value.value
    return None


def _kind(value: Value) -> str:
    if isinstance(value, Tensor):
        return f"tensor(rank {value.rank})"
    if isinstance(value, Descriptor):
        return "descriptor"
    if isinstance(value, Tup):
        return "tuple"
    if isinstance(value, Scalar) and value.none:
        return "none"
    return "scalar"


def _tuple_item(value: Tup, node: cst.Subscript, source: SourceFile) -> Value:
    element = node.slice[0].slice
    if isinstance(element, cst.Index):
        try:
            return value.items[int(source.code(element.value).strip())]
        except (ValueError, IndexError):
            return SCALAR
    return SCALAR


# --------------------------------------------------------------------------------------------------------------------
# Unification


def _compatible(a: Term, b: Term) -> bool:
    ra, rb = a.find(), b.find()
    if ra is rb:
        return True
    if ra.rank is not None and rb.rank is not None and ra.rank != rb.rank:
        return False
    if ra.slice_of is not None and rb.slice_of is not None:
        return ra.slice_of[0] == rb.slice_of[0] and _compatible(ra.slice_of[1], rb.slice_of[1])
    if (ra.slice_of is not None and rb.dots is not None) or (rb.slice_of is not None and ra.dots is not None):
        return False
    if (ra.plain and (rb.slice_of is not None or rb.dots is not None)) or (
            rb.plain and (ra.slice_of is not None or ra.dots is not None)):
        return False
    if ra.operand is not None or rb.operand is not None:  # a dot operand's own class meets only its own
        if ra.operand is None or rb.operand is None or ra.operand[0] != rb.operand[0]:
            return False
        if ra.operand[1].find() is rb.operand[1].find():
            return True
        # ... or another operand's of the same layout: the same position, element type and MMA layout (two B tiles
        # of dots of one MMA layout, `b_h` and `b_dh` multiplied elementwise: no conversion between them)
        return ra.operand[2] == rb.operand[2] and ra.operand[3] is not None and rb.operand[3] is not None \
            and ra.operand[3].find() is rb.operand[3].find()
    return True


def _unify(a: Term, b: Term) -> bool:
    """Merge the classes of `a` and `b` when their constraints allow it; False (and no change) otherwise."""
    if not _compatible(a, b):
        return False
    ra, rb = a.find(), b.find()
    if ra is rb:
        return True
    rb.parent = ra
    ra.rank = ra.rank if ra.rank is not None else rb.rank
    ra.shape = _join_shapes(ra.shape, rb.shape)
    ra.origins |= rb.origins
    ra.reduced |= rb.reduced
    ra.accumulated_rows |= rb.accumulated_rows
    ra.fresh_rows |= rb.fresh_rows
    ra.plain = ra.plain or rb.plain
    ra.whole_last = ra.whole_last or rb.whole_last
    if ra.operand is None or ra.operand[3] is None:  # (keep the one that knows its MMA layout)
        ra.operand = rb.operand or ra.operand
    ra.names.extend(n for n in rb.names if n not in ra.names)
    if rb.dots is not None:
        ra.dots = (ra.dots or []) + [d for d in rb.dots if d not in (ra.dots or [])]
    if ra.slice_of is None:
        ra.slice_of = rb.slice_of
    elif rb.slice_of is not None:
        _unify(ra.slice_of[1], rb.slice_of[1])
    return True


def _join_shapes(a: list[str | None] | None, b: list[str | None] | None) -> list[str | None] | None:
    if a is None or b is None or len(a) != len(b):
        return a if a is not None else b
    return [_dim(x, y) for x, y in zip(a, b)]


