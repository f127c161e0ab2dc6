"""Layout inference: which explicit Gluon layout every tensor of a kernel gets.

Plain Triton leaves layouts to the compiler; Gluon wants them spelled out. This analysis walks a jit function's body in
source order and collects layout *classes*: sets of tensors that must share one layout because an elementwise op,
a load/store, an assignment to the same name or a loop-carried value ties them together (a union-find over `Term`s).
Two structural constraints shape the classes:

* ``x[:, None]`` (expand_dims) needs ``x`` in ``SliceLayout(1, L)`` where ``L`` is the layout of the result, and a
  reduction ``tl.sum(x, axis=1)`` yields a tensor in ``SliceLayout(1, layout(x))``;
* ``tl.dot`` yields a tensor in the target's MMA layout (an *anchor*); every class holding a dot result gets the MMA
  layout, so epilogues, masks and pointer tiles that meet the accumulator are built in it directly.

A constraint that cannot hold (``offs_k`` used both as ``offs_k[None, :]`` and ``offs_k[:, None]``, a permuted
tensor meeting another class) becomes a ``convert_layout`` at that one site. Classes with no anchor get a blocked
layout computed from the class's tile shape. The result is a `LayoutPlan`: facts only, the rewrite rules read it.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import libcst as cst

from transpile import language

from transpile.analysis.imports import helper_closure, language_modules, module_functions, top_bindings
from transpile.cst_utils import bound_names, names_in, substituted
from transpile.discover import JitFunction, ModuleFacts, language_name
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
    param_converts: dict[str, Term] = field(default_factory=dict)  # helpers: convert a tensor parameter on entry
    dots: dict[cst.Call, DotSite] = field(default_factory=dict)
    descriptors: dict[str, DescriptorInfo] = field(default_factory=dict)
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
    refusals: list[Refusal] = field(default_factory=list)
    returns: Value | None = None
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


# --------------------------------------------------------------------------------------------------------------------
# The analysis


class LayoutAnalysis:
    """Analyses every jit function of a module; helpers are analysed at their first call site (argument kinds)."""

    def __init__(self, facts: ModuleFacts, own_loads: dict[str, frozenset[int]] | None = None,
                 operand_anchors: dict[str, list[OperandAnchor | StoreAnchor]] | None = None) -> None:
        self.facts = facts
        # Per function, the loaded tiles that dot operands are computed from, whose computation runs in the MMA
        # operand's layout (`OperandAnchor`, for the AMD pipelines of computed operands)
        self.operand_anchors = operand_anchors or {}
        self.source: SourceFile = facts.source
        self.plans: dict[str, LayoutPlan] = {}
        # Per function, the loads (by index among its `tl.load` calls, in preorder) whose values get a blocked layout
        # of their own, converted where they meet another layout (`transpile.passes.vector_loads`).
        self.own_loads = own_loads or {}
        self.helper_kinds: dict[str, tuple[Value, ...]] = {}
        self.module_names = _module_level_names(self.source.module)
        self.unseen_functions = _unseen_functions(self.source.module, set(facts.functions) | set(facts.aliases),
                                                  self.source.path)

    def run(self) -> dict[str, LayoutPlan]:
        for fn in self.facts.kernels:
            self.analyse(fn, None)
        for fn in self.facts.helpers:  # helpers no kernel reached: analyse with scalar parameters
            if fn.name not in self.plans:
                self.analyse(fn, None)
        for plan in self.plans.values():
            _solve(plan, self)
        return self.plans

    def analyse(self, fn: JitFunction, arg_kinds: tuple[Value, ...] | None) -> LayoutPlan:
        if fn.name in self.plans:
            return self.plans[fn.name]
        plan = LayoutPlan(fn)
        if arg_kinds is not None:
            plan.kinds = tuple(_kind(k) for k in arg_kinds)
        self.plans[fn.name] = plan
        walker = _FunctionWalker(self, plan, arg_kinds)
        for _ in range(2):  # a second walk settles kinds of names that a later statement makes tensors
            walker.walk_body(fn.node.body)
        walker.finish()
        return plan


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


def _unseen_functions(module: cst.Module, jit_names: set[str], path: str) -> dict[str, str]:
    """Names a module binds to Triton code the tool does not translate and a Gluon kernel cannot call, with where it
    is: a function defined inside a module-level `if`/`try`/`with` (a helper picked by an environment variable), or
    imported from another module of the project (`from fla.ops.utils.op import safe_dot`, the file found on disk),
    whose body does more than elementwise math (a `tl.dot`: the Gluon kernel calling it did not compile). Helpers
    that only compute elementwise (`exp2`), aliases, and modules not found stay callable, as before."""
    found: dict[str, str] = {}
    local: dict[str, list[ast.FunctionDef]] = {}
    imports = ast.parse(cst.Module([s for s in module.body if isinstance(s, cst.SimpleStatementLine)
                                    and any(isinstance(x, (cst.Import, cst.ImportFrom)) for x in s.body)]).code)
    math_modules = language_modules(imports)
    for statement in module.body:
        if isinstance(statement, (cst.If, cst.Try, cst.With)):
            tree = ast.parse(cst.Module([statement]).code)
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef):
                    local.setdefault(node.name, []).append(node)
    for name, defs in local.items():
        if any(_beyond_elementwise(d, math_modules) for d in defs):
            found[name] = "defined under a module-level `if`/`try`/`with`"
    bindings: dict[str, tuple[str, str] | None] | None = None
    for _statement, _alias, bound, origin, _imported in imported_helpers(module, path):
        if bindings is None:
            bindings = top_bindings(ast.parse(module.code))
        why = helper_closure(path, origin, bound, {n: b for n, b in bindings.items() if n != bound})
        found.setdefault(bound, f"imported from `{origin}`" + (f" and cannot be copied here ({why})"
                                                                if isinstance(why, str) else ""))
    return {name: how for name, how in found.items() if name not in jit_names}


def imported_helpers(module: cst.Module, path: str
                     ) -> list[tuple[cst.SimpleStatementLine, cst.ImportAlias, str, str, str]]:
    """The Triton helpers a module imports from other modules of its project (found on disk) that do more than
    elementwise math, which a Gluon kernel cannot call: (import statement, alias, name bound here, module as
    imported, name there) each."""
    out = []
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if not isinstance(small, cst.ImportFrom) or isinstance(small.names, cst.ImportStar):
                continue
            origin = "." * len(small.relative) + (cst.Module([]).code_for_node(small.module)
                                                  if small.module is not None else "")
            if origin == "triton" or origin.startswith(("triton.", "torch")):
                continue
            defs, their_math = module_functions(path, origin)
            for alias in small.names:
                bound = alias.asname.name if alias.asname is not None else alias.name
                imported = cst.Module([]).code_for_node(alias.name)
                if isinstance(bound, cst.Name) and any(_beyond_elementwise(d, their_math)
                                                       for d in defs.get(imported, [])):
                    out.append((statement, alias, bound.value, origin, imported))
    return out


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


def _module_level_names(module: cst.Module) -> set[str]:
    names: set[str] = set()
    for statement in module.body:
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            names.add(statement.name.value)
        elif isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                targets: list[cst.BaseExpression] = []
                if isinstance(small, cst.Assign):
                    targets = [t.target for t in small.targets]
                elif isinstance(small, cst.AnnAssign):
                    targets = [small.target]
                for t in targets:
                    if isinstance(t, cst.Name):
                        names.add(t.value)
    return names


class _FunctionWalker:
    def __init__(self, analysis: LayoutAnalysis, plan: LayoutPlan, arg_kinds: tuple[Value, ...] | None) -> None:
        self.analysis = analysis
        self.source = analysis.source
        self.plan = plan
        self.fn = plan.function
        self.env: dict[str, Value] = {}
        self.name_terms: dict[str, Term] = {}
        self.memo: dict[tuple[cst.CSTNode, str], Term] = {}
        self.param_terms: dict[str, Term] = {}
        self.refused: set[tuple[int, str]] = set()
        self.opaque_nodes: set[cst.CSTNode] = set()
        self.returns: list[Value] = []
        self.tuple_calls: dict[cst.Call, str] = {}  # calls of helpers that return tensors in a tuple
        self.loops: list[cst.CSTNode] = []  # the loops around the statement being walked, outermost first
        self._loop_assigned: dict[str, list[cst.CSTNode]] | None = None
        own = analysis.own_loads.get(self.fn.name)
        self.own_loads: set[int] = set()
        if own:
            from transpile.passes.vector_loads import load_calls

            self.own_loads = {id(call) for i, call in enumerate(load_calls(analysis.facts, self.fn)) if i in own}
        # Computed operands' tile loads and the nodes of their computation (`OperandAnchor`), by id
        anchors = analysis.operand_anchors.get(self.fn.name, [])
        self.anchors: dict[int, OperandAnchor] = {id(a.load): a for a in anchors if isinstance(a, OperandAnchor)}
        self.store_anchors = {id(a.store) for a in anchors if isinstance(a, StoreAnchor)}
        self.anchored_nodes = {n: a for a in self.anchors.values() for n in a.nodes}
        self.anchor_terms: dict[OperandAnchor, Term] = {}
        self.lazy_uses: dict[int, tuple[cst.Name, Term, Term]] = {}  # node id -> (node, its class, the value's)
        self.unpacked: set[cst.BaseExpression] = set()  # ... unpacked into names right away
        param_names = [p.name for p in self.fn.params]
        self.allowed_shape_names = set(param_names) | analysis.module_names
        # Constexprs the function binds at its top level (`PACK: tl.constexpr = 2 if FORMAT == "e2m1" else 1`) from
        # parameters and module names: a shape that reads one is written with its definition (the layouts are
        # declared before it is bound).
        self.local_constexprs: dict[str, cst.BaseExpression] = {}
        for statement in self.fn.node.body.body if isinstance(self.fn.node.body, cst.IndentedBlock) else ():
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
            if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name) and small.value is not None \
                    and self.source.code(small.annotation.annotation).strip().endswith("constexpr") \
                    and all(n in self.allowed_shape_names or n in self.local_constexprs
                            for n in names_in(small.value)):
                value = substituted(small.value, self.local_constexprs)
                self.local_constexprs[small.target.value] = value if isinstance(
                    value, (cst.Name, cst.Integer)) else value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        # a scalar parameter is a scalar here (not a tensor a generic walk of a helper does not know)
        self.scalar_params = arg_kinds is not None or not self.fn.called_by
        from transpile.analysis.launch_alignment import pointer_params

        self.pointers = pointer_params(analysis.facts, self.fn)  # the parameters the loads and stores address from
        for i, name in enumerate(param_names):
            kind = arg_kinds[i] if arg_kinds is not None and i < len(arg_kinds) else SCALAR
            if isinstance(kind, Tensor):
                term = Term(rank=kind.rank, origins={f"param:{name}"}, names=[name])
                self.param_terms[name] = term
                self.name_terms[name] = term
                # The element type as the call site translated it into this helper's names, else the parameter's own
                # `.dtype` (valid where the layouts are declared: the top of the helper). Shapes stay unknown.
                self.env[name] = Tensor(term, kind.elem or f"{name}.dtype", kind.shape)
            elif isinstance(kind, Descriptor):
                self.refuse(self.fn.node, "TT010", f"helper `{self.fn.name}` takes a tensor descriptor argument "
                            f"`{name}`; pass the base pointer and strides instead")
                self.env[name] = SCALAR
            else:
                self.env[name] = Scalar(param=name)

    # ---- bookkeeping ----------------------------------------------------------------------------------------------

    def refuse(self, node: cst.CSTNode, code: str, message: str) -> None:
        key = (id(node), code)
        if key not in self.refused:
            self.refused.add(key)
            self.plan.refusals.append(Refusal(node, code, message))

    def fresh(self, node: cst.CSTNode, tag: str, **kwargs: object) -> Term:
        key = (node, tag)
        if key not in self.memo:
            self.memo[key] = Term(**kwargs)  # type: ignore[arg-type]
        return self.memo[key]

    def anchor_term(self, anchor: OperandAnchor, shape: tuple[str | None, ...] | None = None) -> Term:
        """The class of the tile `anchor` loads (made at its load, of `shape`), a dot operand's own: until the dot
        is reached its MMA layout is the tile's own term, as a key."""
        term = self.anchor_terms.get(anchor)
        if term is None:
            term = Term(rank=2, shape=list(shape) if shape else None, origins={"operand"})
            term.operand = (anchor.position, term, "", None)
            self.anchor_terms[anchor] = term
        return term

    def created(self, node: cst.CSTNode, rank: int | None, shape: list[str | None] | None) -> Term:
        """A creation site (arange, zeros, full, a descriptor load): it gets `layout=` its class's layout."""
        term = self.fresh(node, "create", rank=rank, shape=shape, origins={"creation"})
        self.plan.creations[node] = term
        return term

    def unify_or_convert(self, target: Term, node: cst.BaseExpression, value: Term) -> None:
        """Make the tensor `node` (of class `value`) live in `target`'s class, or convert it at this site."""
        if not _unify(target, value):
            self.plan.converts[node] = target

    def dtype_text(self, node: cst.BaseExpression) -> str | None:
        """``tl.float16`` -> ``gl.float16``; ``c_ptr.dtype.element_ty`` as is; None for anything local."""
        lang = language_name(self.source.qualified_name(node))
        if lang is not None:
            return f"gl.{lang.rsplit('.', 1)[-1]}"
        spelt = _element_type_of(node)
        if spelt is not None:
            name, chain = spelt
            local = self.env.get(name)
            if isinstance(local, Tensor) and local.elem is not None and local.pointer == _TYPE_CHAINS[chain]:
                return local.elem  # `x.to(y.dtype)`, `x.to(y.type.element_ty)`: the type the analysis knows for `y`
            if chain == ("type", "element_ty") and isinstance(local, Scalar) and local.param == name \
                    and self.scalar_params and name not in self.fn.constexpr_names:
                return f"{name}.dtype.element_ty"  # (`p.type.element_ty` of a pointer parameter: one spelling)
        return self.shape_text(node)

    def shape_text(self, node: cst.BaseExpression) -> str | None:
        text = self.source.code(node).strip()
        if all(name in self.allowed_shape_names for name in _IDENT.findall(text)):
            return text
        names = names_in(node)
        if self.local_constexprs and names & self.local_constexprs.keys() and all(
                n in self.allowed_shape_names or n in self.local_constexprs for n in names):
            return self.source.code(substituted(node, self.local_constexprs)).strip()
        return None

    # ---- statements -----------------------------------------------------------------------------------------------

    def walk_body(self, body: cst.BaseSuite | list[cst.BaseStatement]) -> None:
        statements = body.body if isinstance(body, (cst.IndentedBlock, cst.SimpleStatementSuite)) else body
        for statement in statements:
            self.walk_statement(statement)

    def walk_statement(self, statement: cst.CSTNode) -> None:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                self.walk_small(small)
        elif isinstance(statement, cst.If):
            self.eval(statement.test)
            env, terms = dict(self.env), dict(self.name_terms)
            self.walk_body(statement.body)
            orelse = statement.orelse
            if orelse is not None:
                # A name the first branch rebound to another rank (`y = tl.expand_dims(y, 0)` under a constexpr
                # flag) keeps its old value in the other branch, which starts from the state before the `if`.
                for name, value in list(self.env.items()):
                    old = env.get(name)
                    if (isinstance(value, Tensor) and isinstance(old, Tensor) and None not in (value.rank, old.rank)
                            and value.rank != old.rank):
                        self.env[name] = old
                        if name in terms:
                            self.name_terms[name] = terms[name]
            then = dict(self.env)
            if isinstance(orelse, cst.If):
                self.walk_statement(orelse)
            elif isinstance(orelse, cst.Else):
                self.walk_body(orelse.body)
            if orelse is not None:
                # A name both branches leave as tensors of different ranks (`db = b[None, :] * d[:, None]` under
                # `if PER_ROW:`, `db = b * d` else): Triton compiles the branch a constexpr test takes, with either
                # rank after it; the translation gives each name one layout.
                for name, value in self.env.items():
                    other = then.get(name)
                    if (isinstance(value, Tensor) and isinstance(other, Tensor) and other is not env.get(name)
                            and value is not env.get(name) and None not in (value.rank, other.rank)
                            and value.rank != other.rank):
                        self.refuse(statement, "TT010", (
                            f"`{name}` is a rank-{other.rank} tensor after this `if` branch and a rank-{value.rank} "
                            "tensor after the other; the Gluon translation gives a name one layout: give each "
                            "rank its own name"))
                        break
        elif isinstance(statement, cst.For):
            self.eval(statement.iter)
            self.bind_target(statement.target, SCALAR, None)
            self.loops.append(statement)
            for _ in range(2):  # loop-carried values: the second walk sees what the first one bound
                self.walk_body(statement.body)
            self.loops.pop()
            if statement.orelse is not None:
                self.walk_body(statement.orelse.body)
        elif isinstance(statement, cst.While):
            self.loops.append(statement)
            for _ in range(2):
                self.eval(statement.test)
                self.walk_body(statement.body)
            self.loops.pop()
        elif isinstance(statement, cst.With):
            for item in statement.items:
                self.eval(item.item)
            self.walk_body(statement.body)
        elif isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            self.refuse(statement, "TT010", f"nested definition `{statement.name.value}` inside a jit function")
        elif isinstance(statement, (cst.Try, cst.Match)):
            self.refuse(statement, "TT010", "`try`/`match` is not supported inside a jit function")

    def walk_small(self, small: cst.BaseSmallStatement) -> None:
        if isinstance(small, cst.Assign):
            value = self.eval(small.value)
            for target in small.targets:
                self.bind_target(target.target, value, small.value)
            self.unpack_helper_tuple(small, value)
        elif isinstance(small, cst.AnnAssign):
            value = self.eval(small.value) if small.value is not None else SCALAR
            self.bind_target(small.target, value, small.value)
        elif isinstance(small, cst.AugAssign):
            current = self.eval(small.target)
            adds = isinstance(small.operator, (cst.AddAssign, cst.SubtractAssign))
            incoming = self.eval(small.value)
            if (isinstance(current, Tensor) and isinstance(incoming, Tensor) and current.rank is not None
                    and incoming.rank is not None and current.rank < incoming.rank):
                self.refuse(small, "TT010", f"`{self.source.code(small.target).strip()}` (rank {current.rank}) is "
                            f"updated in place with a rank-{incoming.rank} tensor; assign the broadcast result to a "
                            "new name")
                return
            value = self.binary(current, small.target, incoming, small.value, adds)
            self.bind_target(small.target, value, small.value)
        elif isinstance(small, cst.Expr):
            self.eval(small.value)
        elif isinstance(small, cst.Return):
            if small.value is not None:
                self.returns.append(self.eval(small.value))
        elif isinstance(small, cst.Assert):
            self.eval(small.test)

    def bind_target(self, target: cst.BaseExpression, value: Value, value_node: cst.BaseExpression | None) -> None:
        if isinstance(target, cst.Name):
            name = target.value
            if isinstance(value, Tensor):
                known = self.name_terms.get(name)
                if known is not None and None not in (known.find().rank, value.rank) \
                        and known.find().rank != value.rank:
                    # Rebound to a tensor of another rank (`m = tl.max(m, 1)` after a loop that carried `m` as a
                    # tile): a new value with its own layout class. Triton allows it only in straight-line code
                    # (a loop-carried value keeps its type), so no loop sees both.
                    del self.name_terms[name]
                    self.env.pop(name, None)
                if name in self.name_terms:
                    existing = self.name_terms[name]
                    if value_node is not None:
                        self.unify_or_convert(existing, value_node, value.term)
                    else:
                        _unify(existing, value.term)
                else:
                    self.name_terms[name] = value.term
                    value.term.find().names.append(name)
                previous = self.env.get(name)
                elem = value.elem or (previous.elem if isinstance(previous, Tensor) else None)
                shape = value.shape or (previous.shape if isinstance(previous, Tensor) else None)
                self.env[name] = Tensor(self.name_terms[name], elem, shape)
            elif isinstance(value, Descriptor):
                self.env[name] = Descriptor(name, value.info)
                self.plan.descriptors[name] = value.info
            else:
                previous = self.env.get(name)
                self.env[name] = previous if isinstance(previous, Tensor) else value
        elif isinstance(target, (cst.Tuple, cst.List)):
            items = value.items if isinstance(value, Tup) else None
            elements = [e.value for e in target.elements]
            value_elements: list[cst.BaseExpression | None] = [None] * len(elements)
            if isinstance(value_node, (cst.Tuple, cst.List)) and len(value_node.elements) == len(elements):
                value_elements = [e.value for e in value_node.elements]
            for i, element in enumerate(elements):
                item = items[i] if items is not None and i < len(items) else SCALAR
                self.bind_target(element, item, value_elements[i])
        elif isinstance(target, cst.Subscript):
            self.eval(target)

    # ---- expressions ----------------------------------------------------------------------------------------------

    def eval(self, node: cst.BaseExpression | None) -> Value:
        if node is None:
            return SCALAR
        if isinstance(node, cst.Name):
            value = self.env.get(node.value, SCALAR)
            anchor = self.anchored_nodes.get(id(node))
            if anchor is not None and isinstance(value, Tensor) and node.value in anchor.invariant:
                # a loop-invariant tensor read by a computed operand's computation: its layout here is decided by
                # that computation (`finish` converts the value where the two differ)
                use = self.lazy_uses.get(id(node))
                if use is None:
                    term = Term(rank=value.rank, shape=list(value.shape) if value.shape else None, origins={"use"})
                    use = self.lazy_uses[id(node)] = (node, term, value.term)
                return Tensor(use[1], value.elem, value.shape, value.pointer)
            return value
        if isinstance(node, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString,
                             cst.FormattedString, cst.Ellipsis, cst.Lambda)):
            return SCALAR
        if isinstance(node, cst.Attribute):
            return self.eval_attribute(node)
        if isinstance(node, cst.BinaryOperation):
            adds = isinstance(node.operator, (cst.Add, cst.Subtract))
            return self.binary(self.eval(node.left), node.left, self.eval(node.right), node.right, adds)
        if isinstance(node, cst.UnaryOperation):
            return self.eval(node.expression)
        if isinstance(node, cst.BooleanOperation):
            return self.binary(self.eval(node.left), node.left, self.eval(node.right), node.right)
        if isinstance(node, cst.Comparison):
            value = self.eval(node.left)
            left = node.left
            for target in node.comparisons:
                value = self.binary(value, left, self.eval(target.comparator), target.comparator)
                left = target.comparator
            return value.derive(elem="gl.int1") if isinstance(value, Tensor) else value
        if isinstance(node, cst.Subscript):
            return self.eval_subscript(node)
        if isinstance(node, cst.Call):
            return self.eval_call(node)
        if isinstance(node, cst.IfExp):
            self.eval(node.test)
            return self.binary(self.eval(node.body), node.body, self.eval(node.orelse), node.orelse)
        if isinstance(node, (cst.Tuple, cst.List)):
            return Tup(tuple(self.eval(e.value) for e in node.elements))
        return SCALAR

    def binary(self, left: Value, left_node: cst.BaseExpression, right: Value, right_node: cst.BaseExpression,
               adds: bool = False) -> Value:
        """Result of an elementwise op; `adds` for `+`/`-` (pointer arithmetic keeps the pointee type)."""
        if isinstance(left, Tensor) and isinstance(right, Tensor):
            lr, rr = left.rank, right.rank
            if lr is not None and rr is not None and lr != rr:
                if lr < rr:
                    left = self.expand_to_rank(left_node, left, rr)
                else:
                    right = self.expand_to_rank(right_node, right, lr)
            self.unify_or_convert(left.term, right_node, right.term)
            shape = _broadcast(left.shape, right.shape)
            offsets = right if left.pointer else left
            if adds and left.pointer != right.pointer and _DTYPE_ORDER.get(offsets.elem or "", (0, 0))[0] == 0:
                # pointers plus integer offsets (or offsets of a type the analysis cannot name): the pointee
                return Tensor(left.term, (left if left.pointer else right).elem, shape, pointer=True)
            return Tensor(left.term, promote(left.elem, right.elem), shape)
        constexprs = self.fn.constexpr_names  # (a constexpr is never the pointer: `base + HALF + cols`)
        if isinstance(left, Tensor):
            return _with_pointee(left, right, constexprs, self.pointers) if adds else left
        if isinstance(right, Tensor):
            return _with_pointee(right, left, constexprs, self.pointers) if adds else right
        if adds and isinstance(left, Scalar) and (left.param is not None or left.pointee is not None):
            return left  # `a_ptr + pid * stride` is still (an offset of) the parameter a_ptr
        return SCALAR

    def eval_attribute(self, node: cst.Attribute) -> Value:
        if language_name(self.source.qualified_name(node)) is not None:
            return SCALAR
        base = self.eval(node.value)
        if isinstance(base, Tensor) and node.attr.value == "T":
            self.plan.transposes.add(node)
            return self.opaque(node, base.rank, tuple(reversed(base.shape)) if base.shape else None, base.elem)
        return SCALAR

    def eval_subscript(self, node: cst.Subscript) -> Value:
        base = self.eval(node.value)
        indices = []
        for element in node.slice:
            index = element.slice
            if isinstance(index, cst.Index):
                if isinstance(index.value, cst.Name) and index.value.value == "None":
                    indices.append(None)
                else:
                    self.eval(index.value)
                    indices.append("index")
            elif isinstance(index, cst.Slice) and index.lower is None and index.upper is None and index.step is None:
                indices.append(":")
            else:
                indices.append("slice")
        if isinstance(base, Tup):
            return SCALAR if len(indices) != 1 else _tuple_item(base, node, self.source)
        if not isinstance(base, Tensor):
            if indices and all(i is None for i in indices) and isinstance(base, Scalar):
                # `s[None]` of a 0-d tensor (a reduction to a scalar, a program id): Triton's expansion gives a
                # tensor of ones; Gluon cannot expand a value without a layout, so it is filled in at the layout
                # (rules.layouts.CreationLayouts.leave_Subscript)
                shape = ["1"] * len(indices)
                return Tensor(self.created(node, rank=len(indices), shape=shape), None, shape=tuple(shape))
            if None in indices and isinstance(base, Scalar) and all(i in (None, ":") for i in indices):
                written = " ".join(self.source.code(node).split())  # (one line: diagnostics become comments)
                self.refuse(node, "TT010", f"`{written}` expands a 0-d value along an axis it does not have "
                            "(`:`): write `value[None]` (a tensor of one element) or `tl.full([1], value, dtype)`")
            return SCALAR
        if any(i in ("index", "slice") for i in indices):
            self.refuse(node, "TT010", "indexing or slicing a tensor is not supported; only `[:, None]`-style "
                        "expansion is")
            return base
        if None not in indices:
            return base
        # x[None, :] etc.: each None is an expand_dims, applied left to right.
        rank = base.rank
        in_shape = list(base.shape or [None] * (rank or 1))
        shape: list[str | None] = []
        src_dims = iter(in_shape)
        for i in indices:
            shape.append("1" if i is None else next(src_dims, None))
        final_rank = len(indices) if rank is None else rank + indices.count(None)
        return self.expansion(node, "expand", node.value, base, indices, final_rank, shape)

    def expansion(self, key: cst.CSTNode, tag: str, operand: cst.BaseExpression, base: Tensor,
                  indices: list[str | None], final_rank: int, shape: list[str | None]) -> Tensor:
        """`operand[indices]` where each None is an expand_dims: the operand must be in the matching slice layout."""
        result = self.fresh(key, tag, rank=final_rank, shape=shape, origins={"expand"})
        anchor = self.anchored_nodes.get(id(key))
        if anchor is not None and final_rank == 2 and result.operand is None:
            # a broadcast inside a computed operand's computation: in the operand's class, the vector converted to
            # its slice (once, before the loop, where it is loop-invariant)
            result.operand = (anchor.position, self.anchor_term(anchor), "", None)
        # Build the chain of slices from the result down to the operand: x = Slice(d0, Slice(d1, ... result)).
        expected = result
        current_rank = final_rank
        for position in reversed([p for p, i in enumerate(indices) if i is None]):
            current_rank -= 1
            expected = Term(rank=current_rank, slice_of=(position, expected), origins={"slice"})
        self.unify_or_convert(expected, operand, base.term)
        return Tensor(result, base.elem, tuple(shape), base.pointer)

    def expand_to_rank(self, node: cst.BaseExpression, value: Tensor, rank: int) -> Tensor:
        """Triton's implicit broadcast, made explicit: `value` (the tensor `node`) gets leading new axes up to `rank`
        (numpy's rule: trailing dimensions align, so a vector against a matrix is a row, `x[None, :]`)."""
        own = value.rank
        if own is None or own >= rank:
            return value
        added = rank - own
        self.plan.expansions[node] = (added, own)
        shape = ["1"] * added + list(value.shape or [None] * own)
        return self.expansion(node, "broadcast", node, value, [None] * added + [":"] * own, rank, shape)

    def broadcast_args(self, nodes: list[cst.BaseExpression], values: list[Value]) -> list[Value]:
        """The tensors among `values` expanded to the highest rank among them (every operand of one elementwise
        call broadcasts against all the others)."""
        ranks = [v.rank for v in values if isinstance(v, Tensor) and v.rank is not None]
        if not ranks:
            return values
        top = max(ranks)
        return [self.expand_to_rank(n, v, top) if isinstance(v, Tensor) else v for n, v in zip(nodes, values)]

    def opaque(self, node: cst.CSTNode, rank: int | None, shape: tuple[str | None, ...] | None,
               elem: str | None = None) -> Tensor:
        """A tensor whose layout Gluon derives in a way the plan does not model: convert it to its class's layout."""
        term = self.fresh(node, "opaque", rank=rank, shape=list(shape) if shape else None, origins={"opaque"})
        self.plan.converts[node] = term  # type: ignore[index]
        self.opaque_nodes.add(node)
        return Tensor(term, elem, shape)

    # ---- calls ----------------------------------------------------------------------------------------------------

    def eval_call(self, node: cst.Call) -> Value:
        func = node.func
        lang = language_name(self.source.qualified_name(func))
        if lang is not None:
            return self.eval_language_call(node, _strip_module(lang), lang)
        if self.source.qualified_name(func) == "triton.cdiv":
            return self.elementwise(node)
        callee = self.analysis.facts.callee(func)
        if callee is not None:
            return self.eval_helper_call(node, callee)
        if isinstance(func, cst.Name) and func.value in self.analysis.unseen_functions:
            how = self.analysis.unseen_functions[func.value]
            self.refuse(node, "TT010", f"`{func.value}` is {how}: a Gluon kernel cannot call a Triton helper that "
                        "does more than elementwise math unless it is translated beside it (define it at the top "
                        "level of this file, or of a module whose helpers the tool can copy)"
                        if how.startswith("imported") else
                        f"`{func.value}` is {how}, where the tool cannot read it: if it is Triton code, a Gluon kernel "
                        "cannot call it (bring the helper into this file at module level)")
        if isinstance(func, cst.Attribute):
            base = self.eval(func.value)
            method = func.attr.value
            if isinstance(base, Tensor):
                return self.eval_method(node, base, method)
            if isinstance(base, Descriptor):
                return self.eval_descriptor_op(node, base, method)
            if method in _DESCRIPTOR_METHODS and isinstance(base, Scalar) and base.param == self.source.code(
                    func.value).strip() and self.scalar_params and base.param not in self.fn.constexpr_names:
                # `desc.load([...])` on a kernel parameter: a `TensorDescriptor` the host built and passed in
                self.refuse(node, "TT010", f"`{base.param}.{method}(...)` reads a tensor descriptor the host built "
                            f"(`TensorDescriptor` passed as `{base.param}`): its element type, block shape and layout "
                            "are the launch's, not the source's, and the Gluon copies need them; build it in the "
                            f"kernel (`{base.param} = tl.make_tensor_descriptor(base, [M, K], [stride, 1], "
                            "[BLOCK_M, BLOCK_K])`) and pass the base pointer and strides instead")
                return SCALAR
            if method in ("to", "cast") and node.args:  # a scalar made a pointer: `p.to(tl.pointer_type(tl.float16))`
                target = node.args[0].value
                if isinstance(target, cst.Call) and (language_name(self.source.qualified_name(target.func)) or ""
                                                     ).endswith("pointer_type") and target.args:
                    return Scalar(pointee=self.dtype_text(target.args[0].value))
        values = [self.eval(arg.value) for arg in node.args]
        tensors = [v for v in values if isinstance(v, Tensor)]
        if tensors:
            # A function the tool cannot read (an imported `exp = tl.exp`, chosen at import time) called with tensors:
            # taken for elementwise, its result converted to the layout its uses give it (Gluon lays out the result
            # as the function does; taken for a scalar, `exp(x)[:, None]` did not compile).
            ranks = [t.rank for t in tensors if t.rank is not None]
            rank = max(ranks) if ranks else None
            shape = next((t.shape for t in tensors if t.rank == rank and t.shape), None)
            return self.opaque(node, rank, shape, None)
        return SCALAR

    def args(self, node: cst.Call) -> tuple[list[cst.BaseExpression], dict[str, cst.BaseExpression]]:
        positional = [a.value for a in node.args if a.keyword is None and not a.star]
        keywords = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
        return positional, keywords

    def arg(self, node: cst.Call, index: int, name: str) -> cst.BaseExpression | None:
        positional, keywords = self.args(node)
        if name in keywords:
            return keywords[name]
        return positional[index] if index < len(positional) else None

    def elementwise(self, node: cst.Call, skip: int = 10**9) -> Value:
        result: Value = SCALAR
        result_node: cst.BaseExpression | None = None
        positional, keywords = self.args(node)
        nodes = [*positional, *keywords.values()]
        values = [self.eval(arg) for arg in nodes]
        values[:skip] = self.broadcast_args(nodes[:skip], values[:skip])
        for i, (arg, value) in enumerate(zip(nodes, values)):
            if i >= skip:
                continue
            if isinstance(value, Tensor):
                if isinstance(result, Tensor) and result_node is not None:
                    result = self.binary(result, result_node, value, arg)
                else:
                    result, result_node = value, arg
        return result

    def operand_of_access(self, node: cst.Call, pointer: Tensor, arg: cst.BaseExpression, value: Tensor, key: str
                          ) -> Tensor:
        """A mask, `other` or stored value of a load/store/atomic broadcast to the pointer tile's rank."""
        if pointer.rank is not None and value.rank is not None and value.rank > pointer.rank:
            self.refuse(arg, "TT010", f"`{key}=` has rank {value.rank} but the pointers rank {pointer.rank}; broadcast "
                        "the pointers explicitly (e.g. `ptrs[None, :] + zeros`)")
            return value
        return self.expand_to_rank(arg, value, pointer.rank) if pointer.rank is not None else value

    def eval_language_call(self, node: cst.Call, name: str, full: str) -> Value:
        spelling = language.lookup(full, "cuda", (3, 9))  # the form of the result; the rule spells it per target
        if spelling is not None and spelling.kind == "libdevice":
            return self.elementwise(node)
        if spelling is None or spelling.kind == "refuse":
            if spelling is not None and language.refused_on_every_target(full):
                self.refuse(node, "TT011", spelling.text)
            for a in node.args:
                self.eval(a.value)
            return SCALAR
        if name in RANDOM:
            return self.elementwise(node)
        if name in RANDOM4:
            value = self.elementwise(node)
            return Tup((value,) * (2 if name == "pair_uniform_to_normal" else 4))
        if name in ("expand_dims", "unsqueeze"):
            return self.expand_dims(node)
        if name == "broadcast_to":
            return self.broadcast_to(node)
        if name == "broadcast":
            value = self.elementwise(node)
            return Tup((value, value))
        if name == "split":
            return self.split(node, self.arg(node, 0, "a"))
        if name == "gather":
            source = self.eval(self.arg(node, 0, "src"))
            index = self.eval(self.arg(node, 1, "index"))
            self.eval(self.arg(node, 2, "axis"))
            if not isinstance(index, Tensor):
                return SCALAR
            return Tensor(index.term, source.elem if isinstance(source, Tensor) else None, index.shape)
        if name == "histogram":
            for a in node.args:
                self.eval(a.value)
            bins = self.arg(node, 1, "num_bins")
            shape = [self.shape_text(bins) if bins is not None else None]
            return Tensor(self.created(node, rank=1, shape=shape), "gl.int32", shape=tuple(shape))
        if name == "inline_asm_elementwise":
            args_node = self.arg(node, 2, "args")
            values = self.eval(args_node)
            for a in node.args:
                if a.value is not args_node:
                    self.eval(a.value)
            items = values.items if isinstance(values, Tup) else (values,)
            tensors = [v for v in items if isinstance(v, Tensor)]
            if not tensors:
                return SCALAR
            dtype = self.arg(node, 3, "dtype")
            if isinstance(dtype, (cst.Tuple, cst.List)):  # several results: a tuple of tensors of the args' layout
                return Tup(tuple(tensors[0].derive(elem=self.dtype_text(e.value)) for e in dtype.elements))
            elem = self.dtype_text(dtype) if dtype is not None else None
            return tensors[0].derive(elem=elem)
        if name in CREATIONS:
            return self.creation(node, name)
        if name in LIKE:
            return self.elementwise(node, skip=1)
        if name in ("load", "atomic_load"):
            pointer_node = self.arg(node, 0, "pointer")
            pointer = self.eval(pointer_node)
            anchor = self.anchors.get(id(node))
            if anchor is not None and isinstance(pointer, Tensor) and pointer.rank == 2:
                # A tile a dot operand is computed from: a class of its own, the operand's (`OperandAnchor`)
                own = self.anchor_term(anchor, pointer.shape)
                self.unify_or_convert(own, pointer_node, pointer.term)
                pointer = Tensor(own, pointer.elem, pointer.shape)
            elif id(node) in self.own_loads and isinstance(pointer, Tensor) and pointer.rank == 1 \
                    and id(node) not in self.anchored_nodes:  # (in a computed operand's computation: its layout)
                # A vector in a blocked layout of its own (its addresses computed afresh from `arange`s), converted
                # where it meets the tile it is broadcast against: not loaded again by every warp of that tile.
                own = self.fresh(node, "own_load", rank=1, shape=list(pointer.shape) if pointer.shape else None,
                                 origins={"own_load"}, plain=True)
                self.unify_or_convert(own, pointer_node, pointer.term)
                pointer = Tensor(own, pointer.elem, pointer.shape)
            for key, index in (("mask", 1), ("other", 2)):
                arg = self.arg(node, index, key)
                value = self.eval(arg)
                if isinstance(pointer, Tensor) and isinstance(value, Tensor) and arg is not None:
                    value = self.operand_of_access(node, pointer, arg, value, key)
                    self.unify_or_convert(pointer.term, arg, value.term)
            if isinstance(pointer, Tensor):
                self.plan.loads[node] = pointer
            return Tensor(pointer.term, pointer.elem, pointer.shape) if isinstance(pointer, Tensor) else SCALAR
        if name == "store" or name in ATOMICS:
            pointer = self.eval(self.arg(node, 0, "pointer"))
            keys = (("value", 1), ("mask", 2)) if name == "store" else (("val", 1), ("mask", 2))
            if name == "atomic_cas":
                keys = (("cmp", 1), ("val", 2))
            anchored = id(node) in self.store_anchors
            stored: Tensor | None = None
            for key, index in keys:
                arg = self.arg(node, index, key)
                value = self.eval(arg)
                if isinstance(pointer, Tensor) and isinstance(value, Tensor) and arg is not None:
                    value = self.operand_of_access(node, pointer, arg, value, key)
                    if anchored and key == "value":  # (`StoreAnchor`: the pointers follow the value)
                        stored = value
                        self.unify_or_convert(value.term, self.arg(node, 0, "pointer"), pointer.term)
                    elif anchored and stored is not None:  # (... and so does the mask)
                        self.unify_or_convert(stored.term, arg, value.term)
                    elif key in ("value", "val") and value.term.find().dots and not pointer.term.find().dots:
                        # An MMA result goes out through pointers of their own (blocked, coalesced) layout: one
                        # conversion of the tile, as Triton's coalescing does, instead of a store pattern that
                        # follows the matrix instruction's registers.
                        self.plan.converts[arg] = pointer.term
                    else:
                        self.unify_or_convert(pointer.term, arg, value.term)
            for a in node.args:
                if a.keyword is not None and a.keyword.value in ("sem", "scope", "cache_modifier", "eviction_policy"):
                    self.eval(a.value)
            return Tensor(pointer.term, pointer.elem, pointer.shape) if (name != "store" and isinstance(pointer, Tensor)) \
                else SCALAR
        if name in REDUCTIONS:
            return self.reduction(node, self.arg(node, 0, "input"), self.arg(node, 1, "axis"))
        if name in SCANS:
            return self.scan(node, self.arg(node, 0, "input"))
        if name in SAME_AS_FIRST:
            first = self.eval(self.arg(node, 0, "input"))
            for a in node.args[1:]:
                self.eval(a.value)
            return first
        if name in OPAQUE:
            value = self.eval(self.arg(node, 0, "input"))
            for a in node.args[1:]:
                self.eval(a.value)
            if not isinstance(value, Tensor):
                return SCALAR
            rank = value.rank
            shape = tuple(reversed(value.shape)) if name == "trans" and value.shape else None
            if name in ("reshape", "view"):
                shape_node = self.arg(node, 1, "shape")
                rank = len(shape_node.elements) if isinstance(shape_node, (cst.List, cst.Tuple)) else None
                if isinstance(shape_node, (cst.List, cst.Tuple)):
                    shape = tuple(self.shape_text(e.value) for e in shape_node.elements)
            if name == "ravel":
                rank = 1
            if name == "join":  # two tensors of one shape -> that shape with a new last dimension of 2
                rank = rank + 1 if rank is not None else None
                shape = (*value.shape, "2") if value.shape else None
            return self.opaque(node, rank, shape, value.elem)
        if name in ("dot", "dot_scaled"):
            return self.dot(node, scaled=name == "dot_scaled")
        if name == "make_tensor_descriptor":
            return self.descriptor(node)
        if name in ELEMENTWISE:
            return self.elementwise(node)
        for a in node.args:
            self.eval(a.value)
        return SCALAR

    def expand_dims(self, node: cst.Call) -> Value:
        """`tl.expand_dims(x, axis)`: as `x[:, None]` (the operand in the matching slice layout)."""
        operand = self.arg(node, 0, "input")
        base = self.eval(operand)
        axis_node = self.arg(node, 1, "axis")
        self.eval(axis_node)
        if not isinstance(base, Tensor) or operand is None:
            return base
        try:
            axis = int(self.source.code(axis_node).strip()) if axis_node is not None else None
        except ValueError:
            axis = None
        if axis is None or base.rank is None:
            self.refuse(node, "TT010", "`tl.expand_dims` needs an integer literal axis (or write `x[:, None]`)")
            return base
        if axis < 0:
            axis += base.rank + 1
        indices: list[str | None] = [":"] * base.rank
        indices.insert(axis, None)
        in_shape = list(base.shape or [None] * base.rank)
        shape = [*in_shape[:axis], "1", *in_shape[axis:]]
        return self.expansion(node, "expand", operand, base, indices, base.rank + 1, shape)

    def shape_of_args(self, args: Sequence[cst.Arg]) -> tuple[str | None, ...] | None:
        """The shape a `broadcast_to`/`reshape` call names: one list/tuple argument or the dimensions one by one."""
        positional = [a.value for a in args if a.keyword is None]
        if len(positional) == 1 and isinstance(positional[0], (cst.List, cst.Tuple)):
            return tuple(self.shape_text(e.value) for e in positional[0].elements)
        return tuple(self.shape_text(p) for p in positional) if positional else None

    def broadcast_to(self, node: cst.Call) -> Value:
        """`tl.broadcast_to(x, shape)`: `x`'s layout class with the new shape (Triton broadcasts size-1 dimensions of
        a tensor of the same rank)."""
        base = self.eval(node.args[0].value) if node.args else SCALAR
        for a in node.args[1:]:
            self.eval(a.value)
        if not isinstance(base, Tensor):
            self.refuse(node, "TT010", "`tl.broadcast_to` of a scalar: write `tl.full(shape, value, dtype)`")
            return SCALAR
        return self.broadcast(base, self.shape_of_args(node.args[1:]))

    @staticmethod
    def broadcast(base: Tensor, shape: tuple[str | None, ...] | None) -> Tensor:
        """`base` broadcast to `shape`, in its own class, whose layout is sized for the broadcast tile (its size-1
        dimensions take the new sizes: a [G, 1] class holding a [G, GROUP] tile would give each thread one column)."""
        root = base.term.find()
        if shape is not None and root.rank == len(shape):
            root.shape = _join_shapes(root.shape, list(shape))
        return Tensor(base.term, base.elem, shape, base.pointer)

    def creation(self, node: cst.Call, name: str) -> Value:
        for a in node.args:
            self.eval(a.value)
        if name == "arange":
            start = self.arg(node, 0, "start")
            end = self.arg(node, 1, "end")
            shape: list[str | None] = [None]
            if start is not None and end is not None:
                start_text, end_text = self.shape_text(start), self.shape_text(end)
                if start_text == "0":
                    shape = [end_text]
                elif start_text is not None and end_text is not None:
                    shape = [f"{end_text} - {start_text}"]
            return Tensor(self.created(node, rank=1, shape=shape), "gl.int32", shape=tuple(shape))
        shape_node = self.arg(node, 0, "shape")
        dtype_node = self.arg(node, 1 if name == "zeros" else 2, "dtype")
        elem = self.dtype_text(dtype_node) if dtype_node is not None else None
        if isinstance(shape_node, (cst.List, cst.Tuple)) and not shape_node.elements:
            return SCALAR  # `tl.zeros([], dtype)`: a 0-d tensor is a scalar (no layout, nothing to broadcast)
        if isinstance(shape_node, (cst.List, cst.Tuple)):
            dims = [self.shape_text(e.value) for e in shape_node.elements]
            return Tensor(self.created(node, rank=len(dims), shape=dims), elem, shape=tuple(dims))
        like_node = _shape_of(shape_node)
        if like_node is not None:
            # `tl.full(x.shape, ...)` (`x.type.get_block_shapes()`): the shape of a tensor the analysis knows the rank
            # of (Gluon reads it as Triton does; only the layout is added)
            like = self.eval(like_node)
            if isinstance(like, Tensor) and like.rank is not None:
                dims = list(like.shape) if like.shape is not None else [None] * like.rank
                return Tensor(self.created(node, rank=like.rank, shape=dims), elem, shape=tuple(dims))
        self.refuse(node, "TT010", f"`tl.{name}` needs a literal shape list (e.g. `[BLOCK_M, BLOCK_N]`) so that its "
                    "layout can be chosen")
        return Tensor(self.created(node, rank=None, shape=None))

    def accumulated(self, node: cst.BaseExpression | None) -> bool:
        """`node` reads a name carried out of a loop that does not run this statement (`acc += tl.load(...)` in a
        loop, then `tl.sum(acc, axis=0)` after it): the value is reduced once per many loads of it. A name the
        innermost loop around the statement assigns (or, outside loops, one no loop assigns) is fresh there."""
        if node is None:
            return False
        from transpile import cst_walk
        from transpile.cst_utils import bound_names, names_in

        if self._loop_assigned is None:
            self._loop_assigned = {}
            for loop in cst_walk.preorder(self.fn.node):
                if isinstance(loop, (cst.For, cst.While)):
                    for name in bound_names(loop.body):
                        self._loop_assigned.setdefault(name, []).append(loop)
        innermost = id(self.loops[-1]) if self.loops else None
        for name in names_in(node):
            loops = {id(loop) for loop in self._loop_assigned.get(name, ())}
            if loops and innermost not in loops:
                return True
        return False

    def reduction(self, node: cst.Call, input_node: cst.BaseExpression | None, axis_node: cst.BaseExpression | None
                  ) -> Value:
        value = self.eval(input_node)
        for a in node.args:
            if a.value is not input_node:
                self.eval(a.value)
        self.check_combine(node)
        reducer = _strip_module(self.source.code(node.func).strip())
        index = _KEEP_DIMS_INDEX.get(reducer, 99) - (1 if input_node is not None and input_node is not
                                                        self.arg(node, 0, "input") else 0)  # methods: no input arg
        keep_dims = self.arg(node, index, "keep_dims")
        keeps = keep_dims is not None and self.source.code(keep_dims).strip() != "False"
        if isinstance(value, Tup) and reducer == "reduce" and isinstance(input_node, (cst.Tuple, cst.List)) \
                and len(input_node.elements) == len(value.items) and value.items \
                and all(isinstance(v, Tensor) for v in value.items):
            # `tl.reduce((a, b, c), axis, combine_fn)` (a Welford reduction): the operands in one layout, reduced
            # together; a tuple of results in one layout
            items = value.items
            first = items[0]
            for item, element in zip(items[1:], input_node.elements[1:]):
                self.unify_or_convert(first.term, element.value, item.term)  # type: ignore[union-attr]
            if axis_node is None or (isinstance(axis_node, cst.Name) and axis_node.value == "None"):
                return Tup(tuple(SCALAR for _ in input_node.elements))
            result = self.reduction_result(node, first, axis_node, keeps, reducer, input_node)
            if not isinstance(result, Tensor):
                return Tup(tuple(SCALAR for _ in input_node.elements))
            return Tup(tuple(Tensor(result.term, item.elem, result.shape) for item in items))  # type: ignore[union-attr]
        if not isinstance(value, Tensor):
            return SCALAR
        if axis_node is None or (isinstance(axis_node, cst.Name) and axis_node.value == "None"):
            return SCALAR
        indices = self.arg(node, 2, "return_indices") if reducer in ("max", "min") and index == 4 else None
        indexed = indices is not None and self.source.code(indices).strip() != "False"
        if (indexed or reducer in ("argmax", "argmin")) and value.rank is not None and value.rank > 2:
            self.refuse(node, "TT011", f"`tl.{reducer}` with indices of a rank-{value.rank} tile is not translated "
                        "(the index helper takes tiles of rank 1 or 2): reshape the tile to two axes first")
            return value
        if indexed:
            # `tl.max(x, axis, return_indices=True)`: the values and their int32 indices, reduced alike
            result = self.reduction_result(node, value, axis_node, keeps, reducer, input_node)
            if isinstance(result, Tensor):
                return Tup((result, Tensor(result.term, "gl.int32", result.shape)))
            return Tup((result, SCALAR))
        return self.reduction_result(node, value, axis_node, keeps, reducer, input_node)

    def reduction_result(self, node: cst.Call, value: Value, axis_node: cst.BaseExpression | None, keeps: bool,
                         reducer: str, input_node: cst.BaseExpression | None) -> Value:
        """The result of the reduction `node` of `value` along `axis_node`."""
        try:
            axis = int(self.source.code(axis_node).strip())
        except ValueError:
            self.refuse(axis_node, "TT010", "reduction axis must be an integer literal")
            return value
        rank = value.rank
        if rank is not None and axis < 0:
            axis += rank
        if rank is not None and 0 <= axis < rank and (axis == rank - 1 or not self.accumulated(input_node)):
            # A column reduction as often as its tile is loaded: its layout keeps the axis inside each thread
            # (`_blocked_layout(..., reduced=)`), which saves shuffles and a shared-memory round trip each time. Once,
            # after a loop that accumulates the tile, that layout only narrows the loads (0.40-0.68x, bench/RESULTS.md: sm90: kernels without a dot loop).
            value.term.find().reduced.add(axis)
            if axis == rank - 1 and rank > 1:
                if self.accumulated(input_node):
                    value.term.find().accumulated_rows = True
                else:
                    value.term.find().fresh_rows = True
        if keeps:
            # Gluon reduces into the slice layout and expands it back: the result is in the input's layout.
            if rank == 1:
                self.refuse(node, "TT010", "`keep_dims=True` on a rank-1 tensor: reduce to a scalar and use it as is")
                return value
            kept_shape = tuple("1" if i == axis else d for i, d in enumerate(value.shape)) if value.shape else None
            return Tensor(value.term, _reduced_elem(value.elem, reducer), kept_shape)
        if rank == 1:
            return SCALAR  # reducing a vector gives a scalar
        shape = value.shape
        out_shape = [s for i, s in enumerate(shape) if i != axis] if shape else None
        term = self.fresh(node, "reduce", rank=None if rank is None else rank - 1, shape=out_shape,
                          slice_of=(axis, value.term), origins={"slice"})
        return Tensor(term, _reduced_elem(value.elem, reducer), tuple(out_shape) if out_shape is not None else None)

    def scan(self, node: cst.Call, input_node: cst.BaseExpression | None) -> Value:
        """A scan (`tl.cumsum`, `tl.associative_scan`): its operands and results in a class of a blocked layout, the
        operands converted where their class is a slice (a reduced row) or an MMA layout."""
        value = self.eval(input_node)
        for a in node.args:
            if a.value is not input_node:
                self.eval(a.value)
        self.check_combine(node)
        items = value.items if isinstance(value, Tup) else (value,)
        nodes = (list(e.value for e in input_node.elements) if isinstance(value, Tup) and isinstance(
            input_node, (cst.Tuple, cst.List)) and len(input_node.elements) == len(items) else None)
        if not all(isinstance(v, Tensor) for v in items) or input_node is None or (isinstance(value, Tup) and nodes
                                                                                    is None):
            return value
        first = items[0]
        term = self.fresh(node, "scan", rank=first.rank, shape=list(first.shape) if first.shape else None,
                          origins={"scan"}, plain=True)
        for item, item_node in zip(items, nodes or [input_node]):
            self.unify_or_convert(term, item_node, item.term)  # type: ignore[union-attr]
        results = tuple(Tensor(term, v.elem, v.shape) for v in items)  # type: ignore[union-attr]
        return Tup(results) if isinstance(value, Tup) else results[0]

    def check_combine(self, node: cst.Call) -> None:
        """A scan's or `tl.reduce`'s combine function that the tool cannot read (imported from another module, whose
        body makes tensors of its own): the Gluon scan would call it as Triton code, which does not compile."""
        for a in node.args:
            fn = self.analysis.facts.functions.get(a.value.value) if isinstance(a.value, cst.Name) else None
            if fn is not None:
                # A combine function runs on the elements: a use of the helper with scalars (a helper also called
                # with tensors gets a copy per kind: `transpile.passes.specialise`)
                scalars = tuple("scalar" for _ in fn.params)
                self.plan.helper_calls[a.value] = (fn.name, scalars)
                previous = self.analysis.helper_kinds.get(fn.name)
                if previous is None:
                    self.analysis.helper_kinds[fn.name] = tuple(SCALAR for _ in fn.params)
                elif tuple(_kind(k) for k in previous) != scalars:
                    self.refuse(a.value, "TT012", f"`{fn.name}` is the combine function here, called on the "
                                f"elements (scalars), but elsewhere with argument kinds {[_kind(k) for k in previous]}"
                                "; Gluon layouts need one kind per helper")
            if fn is not None and _beyond_elementwise(
                    ast.parse(cst.Module([fn.node]).code).body[0],  # type: ignore[arg-type]
                    language_modules(ast.parse(self.source.text))):
                self.refuse(a.value, "TT010", f"`{fn.name}`, the combine function here, does more than elementwise "
                            "math (it makes or reads tensors of its own): Gluon runs a combine function on the "
                            "scan's scalar elements, where that does not compile")
            elif isinstance(a.value, cst.Name) and a.value.value in self.analysis.unseen_functions:
                self.refuse(a.value, "TT010", f"`{a.value.value}` is {self.analysis.unseen_functions[a.value.value]}"
                            " (Triton code the tool does not translate) and does more than elementwise math: as the "
                            "combine function of a Gluon scan or reduction it does not compile (bring it into this "
                            "file at module level)")

    def split(self, node: cst.Call, operand: cst.BaseExpression | None) -> Value:
        """`tl.split(x)` and `x.split()`: two tensors, each converted after the line (like a helper's tuple)."""
        value = self.eval(operand)
        if not isinstance(value, Tensor):
            return SCALAR
        whole = self.fresh(node, "split", rank=value.rank, shape=list(value.shape) if value.shape else None,
                           origins={"split"}, plain=True, whole_last=True)
        self.unify_or_convert(whole, operand, value.term)  # type: ignore[arg-type]
        rank = value.rank - 1 if value.rank is not None else None
        shape = value.shape[:-1] if value.shape else None
        # Like a helper returning two tensors: `a, b = tl.split(x)`, each name converted after the line.
        self.tuple_calls[node] = "tl.split"
        return Tup(tuple(Tensor(self.fresh(node, f"item{i}", rank=rank, origins={"opaque"}), value.elem, shape)
                         for i in range(2)))

    def eval_method(self, node: cst.Call, base: Tensor, method: str) -> Value:
        if method == "split" and not node.args:  # `x.split()`: as `tl.split(x)`
            return self.split(node, node.func.value)  # type: ignore[attr-defined]
        if method in SCANS:
            return self.scan(node, node.func.value)  # type: ignore[attr-defined]
        if method in language.METHOD_FUNCTIONS:
            # `x.argmax(1)`: Triton's method body does not compile under Gluon; the rule calls the function form.
            self.plan.method_calls[node] = method
            if method in REDUCTIONS:
                return self.reduction(node, node.func.value, self.arg(node, 0, "axis"))  # type: ignore[attr-defined]
            for a in node.args:
                self.eval(a.value)
            return base
        if method == "broadcast_to":
            for a in node.args:
                self.eval(a.value)
            return self.broadcast(base, self.shape_of_args(node.args))
        if method in ("to", "cast"):
            for a in node.args:
                self.eval(a.value)
            dtype = self.arg(node, 0, "dtype")
            return Tensor(base.term, self.dtype_text(dtype) if dtype is not None else None, base.shape)
        if method in REDUCTIONS:
            return self.reduction(node, node.func.value, self.arg(node, 0, "axis"))  # type: ignore[attr-defined]
        if method in ("trans", "permute", "reshape", "view"):
            if method == "trans" and not node.args:
                self.plan.transposes.add(node)
            for a in node.args:
                self.eval(a.value)
            rank = base.rank
            shape = tuple(reversed(base.shape)) if method == "trans" and base.shape else None
            if method in ("reshape", "view"):
                named = self.shape_of_args([a for a in node.args if a.keyword is None])
                rank = len(named) if named is not None else None
                shape = named
            return self.opaque(node, rank, shape, base.elem)
        for a in node.args:
            self.eval(a.value)
        return base

    def dot(self, node: cst.Call, scaled: bool = False) -> Value:
        """`tl.dot(a, b[, acc])`, or (`scaled`) `tl.dot_scaled(lhs, lhs_scale, lhs_format, rhs, rhs_scale,
        rhs_format[, acc])`: a tensor in the MMA layout."""
        keywords = DOT_SCALED_KEYWORDS if scaled else DOT_KEYWORDS
        unknown = [a for a in node.args if a.keyword is not None and a.keyword.value not in keywords]
        if unknown:  # (`trans_b=True`, of Triton 1.x: dropped, it gave Q K instead of Q K^T)
            what = "tl.dot_scaled" if scaled else "tl.dot"
            self.refuse(unknown[0], "TT010", f"`{unknown[0].keyword.value}=` is not an argument of `{what}` (it "
                        f"takes {', '.join(sorted(keywords))})" + ("" if scaled else "; transpose an operand with "
                                                                     "`tl.trans`"))
        if scaled:
            a_node, b_node, acc_node = self.arg(node, 0, "lhs"), self.arg(node, 3, "rhs"), self.arg(node, 6, "acc")
        else:
            a_node, b_node, acc_node = self.arg(node, 0, "input"), self.arg(node, 1, "other"), self.arg(node, 2, "acc")
        a = self.eval(a_node)
        b = self.eval(b_node)
        scales: list[Value] = []
        if scaled:  # (the scales keep layouts of their own: the dot converts them to the instruction's)
            for index, key in ((1, "lhs_scale"), (4, "rhs_scale")):
                scale = self.arg(node, index, key)
                scales.append(self.eval(scale) if scale is not None else SCALAR)
        for operand in (a_node, b_node):  # operands are converted to the dot-operand layout anyway
            if operand in self.opaque_nodes:
                self.plan.converts.pop(operand, None)  # type: ignore[arg-type]
        shape: list[str | None] = [None, None]
        if isinstance(a, Tensor) and a.shape:
            shape[0] = a.shape[0]
        if isinstance(b, Tensor) and b.shape and len(b.shape) == 2:
            shape[1] = b.shape[1]
        site = self.plan.dots.get(node)
        if site is None:
            result = Term(rank=2, shape=list(shape), origins={"mma"})
            out_dtype = self.arg(node, 10, "out_dtype") if scaled else self.arg(node, 4, "out_dtype")
            precision = None if scaled else self.arg(node, 3, "input_precision")
            site = DotSite(node, a_node, b_node, acc_node, out_dtype, precision, result, shape)  # type: ignore[arg-type]
            if scaled:
                site.scaled = (self.arg(node, 1, "lhs_scale"), self.arg(node, 2, "lhs_format"),
                               self.arg(node, 4, "rhs_scale"), self.arg(node, 5, "rhs_format"))
                site.scale_shapes = tuple(s.shape if isinstance(s, Tensor) else None  # type: ignore[assignment]
                                          for s in scales)
            site.operand_dtype = a.elem if isinstance(a, Tensor) else None
            site.b_dtype = b.elem if isinstance(b, Tensor) else None
            site.a_shape = a.shape if isinstance(a, Tensor) else None
            site.b_shape = b.shape if isinstance(b, Tensor) else None
            result.dots = [site]
            self.plan.dots[node] = site
        for anchor in self.anchors.values():  # the MMA layout and element type of the operands computed here
            term = self.anchor_terms.get(anchor)
            operand = (a, b)[anchor.position]
            # (only where the computation keeps the tile's class: a transpose or a reshape on the way makes another)
            if anchor.dot is node and term is not None and isinstance(operand, Tensor) \
                    and operand.term.find() is term.find():
                term.find().operand = (anchor.position, term, site.operand_type(anchor.position) or "", site.result)
        acc = self.eval(acc_node)
        if isinstance(acc, Tensor) and acc_node is not None:
            self.unify_or_convert(site.result, acc_node, acc.term)
            if acc.shape and len(acc.shape) == 2:
                site.shape = [_dim(site.shape[0], acc.shape[0]), _dim(site.shape[1], acc.shape[1])]
        for key in ("fast_math", "lhs_k_pack", "rhs_k_pack", "out_dtype") if scaled else (
                "out_dtype", "input_precision", "max_num_imprecise_acc", "allow_tf32"):
            self.eval(self.arg(node, 99, key))
        return Tensor(site.result, self.dot_result_dtype(site, acc), tuple(site.shape))

    def dot_result_dtype(self, site: DotSite, acc: Value) -> str | None:
        """The result's element type: `out_dtype=`, else the accumulator's, else what Triton picks for the operands."""
        if site.out_dtype is not None:
            return self.dtype_text(site.out_dtype)
        if isinstance(acc, Tensor) and acc.elem is not None:
            return acc.elem
        if site.scaled is not None:  # (`tl.dot_scaled` computes in fp32 alone)
            return "gl.float32"
        operand = site.operand_dtype
        if operand in _DTYPE_ORDER:
            return "gl.int32" if operand.startswith(("gl.int", "gl.uint")) else "gl.float32"
        return None

    def descriptor(self, node: cst.Call) -> Value:
        for a in node.args:
            self.eval(a.value)

        def texts(index: int, key: str) -> list[str] | None:
            arg = self.arg(node, index, key)
            if isinstance(arg, (cst.List, cst.Tuple)):
                return [self.source.code(e.value).strip() for e in arg.elements]
            return None

        base = self.arg(node, 0, "base")
        shape, strides, block = texts(1, "shape"), texts(2, "strides"), texts(3, "block_shape")
        if base is None or shape is None or strides is None or block is None:
            self.refuse(node, "TT010", "`tl.make_tensor_descriptor` needs literal `shape`, `strides` and "
                        "`block_shape` lists")
            return SCALAR
        if len(block) != 2:
            self.refuse(node, "TT010", f"rank-{len(block)} tensor descriptors are not supported (rank 2 is)")
            return SCALAR
        info = DescriptorInfo(node, self.source.code(base).strip(), shape, strides, block)
        return Descriptor("", info)

    def eval_descriptor_op(self, node: cst.Call, desc: Descriptor, method: str) -> Value:
        for a in node.args:
            self.eval(a.value)
        if method == "load":
            self.plan.descriptor_ops[node] = ("load", desc.info)
            shape = [t if all(n in self.allowed_shape_names for n in _IDENT.findall(t)) else None
                     for t in desc.info.block_shape]
            base = desc.info.base
            elem = f"{base}.dtype.element_ty" if base in self.allowed_shape_names else None
            return Tensor(self.created(node, rank=len(shape), shape=shape), elem, tuple(shape))
        if method == "store":
            self.plan.descriptor_ops[node] = ("store", desc.info)
            value_node = self.arg(node, 1, "value")
            value = self.eval(value_node)
            if isinstance(value, Tensor) and value_node is not None:
                # the stored tile is converted to a blocked layout of the block shape on the way out
                target = self.fresh(node, "store", rank=2, shape=list(desc.info.block_shape), origins={"creation"})
                self.plan.converts[value_node] = target
            return SCALAR
        self.refuse(node, "TT010", f"tensor descriptor method `.{method}` is not supported (load and store are)")
        return SCALAR

    def eval_helper_call(self, node: cst.Call, name: str) -> Value:
        callee = self.analysis.facts.functions[name]
        positional, keywords = self.args(node)
        kinds: list[Value] = [self.eval(a) for a in positional]
        for param in callee.params[len(positional):]:
            kinds.append(self.eval(keywords[param.name]) if param.name in keywords else SCALAR)
        kinds_t = tuple(kinds)
        self.plan.helper_calls[node] = (name, tuple(_kind(k) for k in kinds_t))
        previous = self.analysis.helper_kinds.get(name)
        if previous is None:
            self.analysis.helper_kinds[name] = kinds_t
        elif [_kind(k) for k in previous] != [_kind(k) for k in kinds_t]:
            self.refuse(node, "TT012", f"`{name}` is called here with argument kinds {[_kind(k) for k in kinds_t]} "
                        f"but elsewhere with {[_kind(k) for k in previous]}; Gluon layouts need one kind per helper")
        if name == self.fn.name:
            self.refuse(node, "TT010", f"recursive call of `{name}`")
            return SCALAR
        plan = self.analysis.analyse(callee, self.in_callee_terms(callee, positional, keywords, kinds_t))
        result = plan.returns
        if isinstance(result, Tensor):
            return self.opaque(node, result.rank, None, self.caller_elem(result.elem, callee, positional))
        if isinstance(result, Tup) and any(isinstance(i, Tensor) for i in result.items):
            # Each tensor of the tuple arrives in the callee's layout: the caller converts it after unpacking.
            items = tuple(self.fresh(node, f"item{i}", rank=item.rank, origins={"opaque"}) if isinstance(item, Tensor)
                          else None for i, item in enumerate(result.items))
            self.tuple_calls[node] = name
            return Tup(tuple(
                Tensor(t, self.caller_elem(item.elem, callee, positional)) if t is not None and isinstance(item, Tensor)
                else SCALAR for t, item in zip(items, result.items)))
        return result if result is not None else SCALAR

    def in_callee_terms(self, callee: JitFunction, positional: list[cst.BaseExpression],
                        keywords: dict[str, cst.BaseExpression], kinds: tuple[Value, ...]) -> tuple[Value, ...]:
        """Tensor arguments with their element types rewritten in the helper's own names: `a_ptr.dtype.element_ty`
        with `a_ptr` passed as `ptr` becomes `ptr.dtype.element_ty`, `gl.float16` stays (so that the helper's dots
        know their operand types). What does not translate is unknown."""
        passed: dict[str, str] = {}  # caller parameter name -> the helper parameter it is passed as
        for i, param in enumerate(callee.params):
            arg = positional[i] if i < len(positional) else keywords.get(param.name)
            if isinstance(arg, cst.Name) and arg.value not in passed:
                passed[arg.value] = param.name

        def translate(text: str | None) -> str | None:
            if text is None or text.startswith("gl."):
                return text
            match = re.fullmatch(r"([A-Za-z_][A-Za-z_0-9]*)\.dtype\.element_ty", text)
            if match and match.group(1) in passed:
                return f"{passed[match.group(1)]}.dtype.element_ty"
            return None

        out: list[Value] = []
        rebound = bound_names(callee.node.body)
        for param, kind in zip(callee.params, kinds):
            if isinstance(kind, Tensor):
                # A tensor parameter's shape is its own, read where the helper runs (`a.shape[0]`: a constexpr in
                # Gluon as in Triton), as Triton's JIT specialises a helper per call; unknown where the helper
                # assigns the name again (the text would then read another tensor).
                rank = kind.rank
                shape = tuple(f"{param.name}.shape[{i}]" for i in range(rank)) \
                    if rank is not None and param.name not in rebound else None
                kind = Tensor(kind.term, translate(kind.elem), shape)
            out.append(kind)
        out.extend(kinds[len(out):])
        return tuple(out)

    def caller_elem(self, elem: str | None, callee: JitFunction, positional: list[cst.BaseExpression]) -> str | None:
        """A helper result's element type in the caller's terms: `gl.float16` as is; `p.dtype.element_ty` of the
        helper's pointer parameter `p` becomes that of the caller's pointer parameter passed for it."""
        if elem is None or elem.startswith("gl."):
            return elem
        match = re.fullmatch(r"([A-Za-z_][A-Za-z_0-9]*)\.dtype\.element_ty", elem)
        names = [p.name for p in callee.params]
        if match and match.group(1) in names and names.index(match.group(1)) < len(positional):
            arg = self.eval(positional[names.index(match.group(1))])
            if isinstance(arg, Scalar) and arg.param is not None:
                return f"{arg.param}.dtype.element_ty"
        return None

    def unpack_helper_tuple(self, assign: cst.Assign, value: Value) -> None:
        """`a, b = helper(...)` of a helper returning tensors: convert each tensor name once after the line."""
        if not (isinstance(value, Tup) and assign.value in self.tuple_calls):
            return
        if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, (cst.Tuple, cst.List)):
            return
        elements = [e.value for e in assign.targets[0].target.elements]  # type: ignore[attr-defined]
        if len(elements) != len(value.items) or not all(isinstance(e, cst.Name) for e in elements):
            return
        self.unpacked.add(assign.value)
        self.plan.tuple_converts[assign] = [
            (e.value, self.name_terms[e.value]) for e, item in zip(elements, value.items)  # type: ignore[attr-defined]
            if isinstance(item, Tensor) and e.value in self.name_terms  # type: ignore[attr-defined]
        ]

    # ---- end of function ------------------------------------------------------------------------------------------

    def finish(self) -> None:
        plan = self.plan
        for node, use, value in self.lazy_uses.values():
            self.unify_or_convert(use, node, value)
        plan.returns = self.returns[0] if self.returns else None
        for call_node, name in self.tuple_calls.items():
            if call_node not in self.unpacked:
                what = f"`{name}`" if name.startswith("tl.") else f"helper `{name}`"
                self.refuse(call_node, "TT010", f"{what} returns a tuple holding tensors; unpack it into "
                            f"names where it is called (`a, b = {name}(...)`)")
        for name, term in self.param_terms.items():
            root = term.find()
            if root.slice_of is not None or root.dots is not None or root.origins - {f"param:{name}"}:
                plan.param_converts[name] = term


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
    if a is None or b is None or len(a) != len(b):
        return a if a is not None else b
    return tuple(_dim(x, y) for x, y in zip(a, b))


def _with_pointee(tensor: Tensor, other: Value, constexprs: Sequence[str] = (),
                  pointers: set[str] | frozenset[str] = frozenset()) -> Tensor:
    """`ptr + offsets`: a tensor of pointers whose pointee type is that of the parameter `ptr` (the outermost
    addition of a parameter wins: `a_ptr + (offs + start)` points into `a_ptr`; a constexpr parameter is no
    pointer)."""
    if isinstance(other, Scalar) and other.param is not None and other.param not in constexprs:
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
        return ra.operand is not None and rb.operand is not None and ra.operand[0] == rb.operand[0] \
            and ra.operand[1].find() is rb.operand[1].find()
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


# --------------------------------------------------------------------------------------------------------------------
# Solving: a concrete, named layout per class


def _solve(plan: LayoutPlan, analysis: LayoutAnalysis) -> None:
    """Name the layout of every class a creation site or a convert needs, in order of first use."""
    used: list[Term] = []
    seen: set[int] = set()

    def need(term: Term) -> None:
        root = term.find()
        if root.slice_of is not None:
            need(root.slice_of[1])
            return
        if root.id not in seen:
            seen.add(root.id)
            used.append(root)

    unpacked = [term for pairs in plan.tuple_converts.values() for _, term in pairs]
    for term in [*plan.creations.values(), *plan.param_converts.values(), *plan.converts.values(), *unpacked]:
        need(term)
    for site in plan.dots.values():
        need(site.result)
    # (and the function's own variables: a loop's `cols_layout = cols < n` is not a layout constant)
    from transpile.cst_utils import names_in

    taken: set[str] = set(p.name for p in plan.function.params) | analysis.module_names | names_in(plan.function.node)
    # (an MMA operand's layout names its MMA layout: declared after it)
    def anchored(root: Term) -> bool:
        return root.operand is not None and root.operand[3] is not None and root.operand[2] != ""

    used.sort(key=anchored)
    for root in used:
        kind = "mma" if root.dots is not None else "operand" if anchored(root) else "blocked"
        base = _layout_name(root, kind)
        name = base
        suffix = 2
        while name in taken:
            name = f"{base}_{suffix}"
            suffix += 1
        taken.add(name)
        plan.names[root.id] = name
        plan.declarations.append((name, kind, root))


def _layout_name(root: Term, kind: str) -> str:
    if kind == "mma":
        return "mma_layout"
    for name in root.names:
        if not name.startswith("_"):
            return f"{name}_layout"
    return "mma_layout" if kind == "mma" else f"blocked_{root.rank or 1}d"


def analyse_layouts(facts: ModuleFacts, own_loads: dict[str, frozenset[int]] | None = None,
                    operand_anchors: dict[str, list[OperandAnchor | StoreAnchor]] | None = None) -> dict[str, LayoutPlan]:
    return LayoutAnalysis(facts, own_loads, operand_anchors).run()


def name_terms(plan: LayoutPlan) -> dict[str, Term]:
    """Variable name -> the root of its layout class, for the names the layout plan bound to tensors."""
    terms: list[Term] = [*plan.creations.values(), *plan.converts.values(), *(s.result for s in plan.dots.values())]
    roots: dict[str, Term] = {}
    seen: set[int] = set()
    while terms:
        root = terms.pop().find()
        if root.id in seen:
            continue
        seen.add(root.id)
        for name in root.names:
            roots.setdefault(name, root)
        if root.slice_of is not None:
            terms.append(root.slice_of[1])
    return roots
