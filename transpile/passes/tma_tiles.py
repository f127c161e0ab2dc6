"""sm90: pointer tiles read as TMA descriptors: a pointer GEMM rewritten, in Triton, into a descriptor GEMM.

Most public GEMMs address their operands with pointer tiles (``a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]
* stride_ak``, advanced after the loads or recomputed from the loop variable) and mask the ragged edges. On an H100
the sm90 rules pipeline such a loop only with a cp.async ring that runs slower than Triton's own pipeliner, so the
kernel was kept as Triton. A tile that is a rectangle of a 2-D row-major tensor is what a TMA descriptor reads:
``tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])`` and
``a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])``, the masks replaced by the descriptor's bounds (out-of-range elements
read as zero, as ``other=0`` gives them; stores are clipped as the mask clips them). The kernel so rewritten is a
descriptor GEMM, which the TMA ring (and its warp-specialised and persistent forms) pipelines.

What the analysis proves, per operand load ``x = tl.load(P, mask=m, other=0)`` of the kernel's one dot loop:
- ``P`` is ``base + rows[:, None] * s0 + cols[None, :] * s1`` (terms in any order, through names defined before or
  in the loop), ``base`` a pointer parameter, ``s1`` absent or a parameter (1 at launch: checked on the host), ``s0`` a
  parameter or an integer;
- each index vector is ``start + tl.arange(0, BLOCK)`` (hints such as ``tl.multiple_of`` are dropped), optionally
  ``% bound`` (rows that wrap around instead of being masked: those rows only feed accumulator rows the store
  masks off, so zeros there change nothing stored; not taken when the epilogue reduces);
- the pointer tile is advanced by ``step * s_d`` per iteration (or recomputed from the loop variable): the tile's
  coordinate in dimension ``d`` is then an expression of the loop variable;
- every term of the mask bounds one dimension (``rows[:, None] < E``) by a value that does not depend on the loop
  variable once the coordinate is added back (``offs_k[None, :] < K - k * BLOCK_K`` is ``k * BLOCK_K + offs_k < K``):
  that value is the descriptor's shape in that dimension. A dimension neither masked nor wrapped is refused (a
  descriptor needs the tensor's extent).
The epilogue's ``tl.store`` of a tile of the same form, masked by bounds on both dimensions, becomes a descriptor
store. Everything else stays as written.

A descriptor wants a unit inner stride, 16-byte aligned base and row strides, and (for the pipelined ring) 16-bit
elements; whether a launch meets that is known only on the host. So the kernel is rewritten only where the variant
can also keep the source kernel for the other launches: the engine emits the source kernel unchanged (renamed
``_<kernel>_triton``) and binds the kernel's name to a launcher (`_TMAOrTriton`) that checks each launch's tensors
and strides and runs one or the other. Kernels that call jit helpers are not rewritten (the Triton copy would need
Triton copies of the helpers).

`convert(source, facts)` returns the rewritten text (the kernels' statements replaced; a line map back to the
source's lines) and, per rewritten kernel, what the launcher checks; or None where no kernel is rewritten.
`refusals` of the result say why a kernel with a dot loop was not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import libcst as cst

from transpile.analysis.pipeline import scaled_accumulation
from transpile.cst_utils import (assigned_names, bound_names, bound_names_of, broadcast_axis, calls_in, names_in,
                                 product_factors, statement_reads, sum_terms)
from transpile.cst_walk import preorder
from transpile.discover import JitFunction, ModuleFacts, language_alias, language_name
from transpile.source import SourceFile, replaced_line_map

HINTS = ("multiple_of", "max_contiguous", "max_constancy")
# Calls whose result the epilogue may compute across rows or columns: with wrapped rows these would read them.
CROSS_TILE = ("sum", "max", "min", "reduce", "argmax", "argmin", "cumsum", "cumprod", "associative_scan", "xor_sum",
              "softmax", "dot", "dot_scaled", "trans", "permute", "reshape", "view", "split", "join", "gather",
              "interleave", "broadcast_to", "expand_dims", "atomic_add", "atomic_max", "atomic_min", "atomic_xchg",
              "atomic_cas", "atomic_and", "atomic_or", "atomic_xor",
              "histogram", "sort", "flip")
# Calls a dead address/mask statement may make (removed with it).
PURE = ("arange", "multiple_of", "max_contiguous", "max_constancy", "cdiv", "minimum", "maximum", "program_id",
        "num_programs", "where", "full", "zeros")
ZEROS = ("0", "0.0", "0.", "None")


# ---- Linear forms: sums of monomials (products of atoms) with integer coefficients ------------------------------

Linear = dict  # tuple[str, ...] (sorted atoms) -> int


def _lin_add(a: Linear, b: Linear, sign: int = 1) -> Linear:
    out = dict(a)
    for mono, coeff in b.items():
        out[mono] = out.get(mono, 0) + sign * coeff
        if out[mono] == 0:
            del out[mono]
    return out


def _lin_mul(a: Linear, b: Linear) -> Linear:
    out: Linear = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            mono = tuple(sorted(ma + mb))
            out[mono] = out.get(mono, 0) + ca * cb
            if out[mono] == 0:
                del out[mono]
    return out


def _lin_code(lin: Linear, constexprs: set[str] = frozenset()) -> str:  # type: ignore[assignment]
    """Source text of a linear form (constant last, block sizes last in a product; `0` when empty)."""
    if not lin:
        return "0"
    parts: list[str] = []
    for mono, coeff in sorted(lin.items(), key=lambda kv: (len(kv[0]) == 0, kv[0])):
        body = " * ".join(sorted(mono, key=lambda a: (a in constexprs or a.isupper(), a)))
        if not mono:
            text = str(abs(coeff))
        elif abs(coeff) == 1:
            text = body
        else:
            text = f"{abs(coeff)} * {body}"
        if not parts:
            parts.append(text if coeff > 0 else f"-{text}")
        else:
            parts.append(f"+ {text}" if coeff > 0 else f"- {text}")
    return " ".join(parts)


def _atoms(lin: Linear) -> set[str]:
    return {a for mono in lin for a in mono}


# ---- Results ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Tile:
    """One pointer tile read (or written) through a descriptor; what the host launcher checks for it."""

    param: str  # the pointer parameter
    row_stride: str  # parameter name or integer text: `* elements` must be a multiple of 16 bytes
    unit_stride: str | None  # parameter that must be 1 at launch (None: the source writes no stride there)
    offsets: tuple[str, ...] = ()  # parameters scaling scalar offsets of the base (multiples of 16 bytes)
    load: bool = True  # an operand load (16-bit elements for the ring) or the epilogue's store
    # an operand of a dot whose A tile is read row-major and whose B tile through a descriptor of its transposed
    # view: both K-major in shared memory, as wgmma reads 8-bit operands, so the launcher lets fp8 elements through
    fp8: bool = False


#: `Dispatch.lds`: the LDS bytes, the rings (shape, pointer parameter), and the fewest slots where not two
LdsNeed = tuple[int, tuple[tuple[tuple[str | int, ...], str], ...]] \
    | tuple[int, tuple[tuple[tuple[str | int, ...], str], ...], int]


@dataclass
class Dispatch:
    kernel: str
    params: tuple[str, ...]
    tiles: tuple[Tile, ...]
    helpers: tuple[str, ...] = ()  # jit helpers the kernel calls (directly or not): the Triton copy gets copies
    # (constexpr parameter, its default as code): the Gluon kernel runs only the launches that set it (a form that
    # pays only then: the attention ring on a causal mask); the others run the source kernel.
    when: tuple[str, str] | None = None
    # every tensor argument 16-byte aligned with contiguous rows (a form whose copies move 16 bytes, like cp.async
    # rings, which would not compile for other launches); the others run the source kernel
    aligned: bool = False
    # with `aligned`: the int parameters that scale the copies' addresses, multiples of 16 at the launches the
    # launcher lets through (Triton then compiles them as divisible by 16, which 16-byte copies need), and the inner
    # strides, 1 at those launches (a constexpr 1 then): `verify` compiles the Gluon kernel so specialised
    divisible: tuple[str, ...] = ()
    unit: tuple[str, ...] = ()
    # constexpr parameters and the least value with which a launch runs the Gluon kernel (a form measured faster
    # than the source only from there: the attention ring at a fixed tile, from a head dimension of 128)
    at_least: tuple[tuple[str, int], ...] = ()
    # with `when`: constexpr parameters and the least value with which a launch that does not set the flag runs the
    # Gluon kernel all the same (the warp-specialised attention: full attention from a head dimension of 128)
    unflagged_at_least: tuple[tuple[str, int], ...] = ()
    # why the launches that `aligned` turns away run the source kernel (the comment over its copy), when not the
    # copies' 16-byte moves
    reason: str = ""
    # the alignment launcher (`reason` is launch_alignment.REASON): the Gluon kernel takes 8- and 16-bit data too
    narrow: bool = False
    # the Gluon kernel reads through 32-bit buffer offsets: only launches whose tensors span less than 2 GB run it
    small: bool = False
    # the Gluon kernel runs with exactly this many warps (AMD's warp-pipelined loops: 8): launches that ask for
    # another count, or none, run the source kernel
    warps: int | None = None
    # AMD: the Gluon kernel is launched with its accumulators kept out of AGPRs (`llvm_fn_attrs`, as AMD's own Gluon
    # GEMMs are): with both register files the compiler splits a large accumulator and spills
    no_agprs: bool = False
    # AMD: launches with a tensor of one of these element types (torch's names) run the source kernel: the target
    # converts them for its matrix cores (gfx942's OCP fp8, through fp16), where the Gluon kernel measured heavier
    slow_dtypes: tuple[str, ...] = ()
    # AMD: (the target's LDS bytes, the rings as (shape as parameter names or numbers, the pointer parameter whose
    # element type they hold)[, the fewest slots where not two]): launches whose fewest ring slots would not fit run
    # the source kernel (the Gluon kernel would run its loop as translated, unpipelined)
    lds: LdsNeed | None = None
    # tests (Python source over the kernel's parameters) and (parameter, its default as code or None) for each name a
    # test reads: launches for which a test holds run the source kernel (AMD: the Gluon kernel pipelines the copy of
    # its loop for the other value only, `if AB_DTYPE is not None:` casting the operands before the dot; sm90: a loop
    # pipelined in order runs too few iterations)
    source_when: tuple[tuple[str, tuple[tuple[str, str | None], ...]], ...] = ()
    # the target is AMD's (the launcher is then `_WarpPipelinedOrTriton` where any of its own arguments, or
    # `source_when`, is given)
    amd: bool = False
    # (grid axis, least count): only launches whose grid has at least that many programs along the axis run the
    # Gluon kernel (a causal attention loop whose key blocks end at its query block `program_id(axis)`: a short
    # grid there means short prompts, for which the ring measured slower than the source kernel)
    grid_at_least: tuple[int, int] | None = None
    # (constexpr parameter, value, warps): launches that set the parameter to the value run the Gluon kernel with
    # that many warps (the warp-specialised attention of a kernel launched with fixed tiles: its form's warps)
    retile: tuple[str, int, int] | None = None
    # only launches (or autotune configs) whose grid has at most one program per SM run the Gluon kernel (a form
    # measured faster than the source only with few tiles: an operand computed in registers and staged for the wgmma)
    one_wave: bool = False

    @property
    def warp_pipelined(self) -> bool:
        """Whether the launcher is `_WarpPipelinedOrTriton`: an AMD launcher given any of that class's own arguments
        (warps, the 2 GB test, VGPR-only accumulators, slow element types, the LDS test) or a `source_when` test."""
        return self.amd and (self.warps is not None or self.small or self.no_agprs or bool(self.slow_dtypes)
                             or self.lds is not None or bool(self.source_when))


@dataclass
class Conversion:
    text: str
    line_map: list[int]  # 1-based line of the rewritten text -> 1-based line of the source (index 0 unused)
    dispatch: dict[str, Dispatch] = field(default_factory=dict)


@dataclass(frozen=True)
class Operand:
    """What the analysis found of one dot operand's pointer-tile load (`operand_tiles`)."""

    name: str  # the loaded name
    param: str  # the pointer parameter the tile is based on
    strides: tuple[str, str | None]  # (rows, columns): parameter names or integer text; None: unit, not written
    offsets: tuple[str, ...]  # parameters scaling scalar offsets of the base
    bounds: tuple[str, str]  # the extent the masks give each dimension (code)
    advancing: int | None  # the dimension the loop variable moves the tile along (None: none, or both)
    column_index: cst.CSTNode  # the `cols[None, :]` term of the address (a node of the parsed source)


class Refusal(Exception):
    pass


# ---- The analysis -------------------------------------------------------------------------------------------------

def convert(source: SourceFile, facts: ModuleFacts, refusals: dict[str, str] | None = None,
            skip: frozenset[str] = frozenset()) -> Conversion | None:
    """The rewritten text, or None where no kernel (but those in `skip`) is rewritten; `refusals` gets why a kernel
    was not, where the analysis got as far as its dot loop."""
    replacements: dict[cst.FunctionDef, cst.FunctionDef] = {}
    dispatch: dict[str, Dispatch] = {}
    for fn in facts.functions.values():
        if fn.name in skip or fn.is_helper or fn.jit_decorator is None:
            continue
        helpers = jit_callees(facts, fn.name)
        if any(facts.functions[h].jit_decorator is None for h in helpers):
            continue  # (a helper made jit by a call: its copy would need the call too)
        try:
            rewritten = _Kernel(source, facts, fn, helpers).rewrite()
        except Refusal as exc:
            if refusals is not None:
                refusals[fn.name] = str(exc)
            continue
        if rewritten is not None:
            replacements[fn.node], dispatch[fn.name] = rewritten
    if not replacements:
        return None
    module = source.module
    body = [replacements.get(s, s) for s in module.body]  # type: ignore[arg-type]
    text = module.with_changes(body=body).code
    return Conversion(text, replaced_line_map(module, source.text, replacements, text), dispatch)


def operand_tiles(source: SourceFile, facts: ModuleFacts, fn: JitFunction) -> tuple[list[Operand], cst.Call, bool]:
    """The analysis `convert` makes of a kernel's one dot loop, whatever the operands' element types: its two
    operand loads as pointer tiles (in load order), the dot, and whether the dot may run on tf32 (32-bit operands:
    not `input_precision="ieee"`). Raises `Refusal` where a load is not such a tile (and where there is no such
    loop, with an empty reason)."""
    kernel = _Kernel(source, facts, fn)
    kernel.facts_only = True
    kernel.rewrite()
    if len(kernel.operands) != 2 or kernel.dot is None:
        raise Refusal("")
    return kernel.operands, kernel.dot, kernel.tf32


class _Kernel:
    def __init__(self, source: SourceFile, facts: ModuleFacts, fn: JitFunction, helpers: tuple[str, ...] = ()
                 ) -> None:
        self.helpers = helpers
        self.loop_bindings: set[int] = set()  # ids of the bindings `_env` made from the loop's statements
        self.loop_assigned: set[str] = set()
        self.assigned_anywhere: set[str] = set()
        self.advancing: set[str] = set()  # pointer tiles advanced as `ptrs += step` (their own rule)
        self.facts_only = False  # `operand_tiles`: the analysis without the 16-bit test, nothing rewritten
        self.opaque: set[str] = set()
        # pointer parameters moved before the loop (`A += pid_b * stride_ab`, per batch) -> the parameters that
        # scale each move (the launcher checks them for 16-byte alignment): a tile's base, read as moved
        self.moved: dict[str, tuple[str, ...]] = {}
        self.operands: list[Operand] = []
        self.tf32 = False
        self.dot: cst.Call | None = None
        self.source = source
        self.facts = facts
        self.fn = fn
        self.params = [p.name for p in fn.params]
        self.constexprs = set(fn.constexpr_names)
        self.body = list(fn.node.body.body)  # type: ignore[union-attr]
        # One copy of a dot loop that an `if` at the kernel's top level holds (`_rewrite_copies`): the rewrite of
        # that copy alone, its body returned unassembled, and the extents other copies' masks give a dimension this
        # copy leaves unmasked ((pointer parameter, strides, dimension) -> bound)
        self.in_copy = False
        # `_split_before`: how many `if`s before the loop this kernel's body was split at; the copies must merge
        self.split_depth = 0
        self.require_merge = False
        self.sibling_bounds: dict[tuple[str, str | None, str | None, int], str] = {}
        self.found_bounds: dict[tuple[str, str | None, str | None, int], str] = {}

    def lang(self, call: cst.CSTNode) -> str | None:
        if not isinstance(call, cst.Call):
            return None
        return language_name(self.source.qualified_name(call.func))

    # -- finding the loop ---------------------------------------------------------------------------------------

    def rewrite(self) -> tuple[cst.FunctionDef, Dispatch] | None:
        try:
            return self._rewrite()
        except Refusal as refusal:
            split = self._split_before()
            if split is None:
                raise
            try:
                return split._rewrite_copies(len(split.body) - 1)
            except Refusal:
                raise refusal from None

    def _split_before(self) -> _Kernel | None:
        """The kernel with the code after an `if` before its dot statement that binds names in each branch (`if
        EVEN_MN: offs_m = <unmasked> else: offs_m = <wrapped>`) moved into both branches: a kernel whose dot loop
        is copied under that `if`, to be rewritten only where the copies then merge into one (the branches differed
        in what the descriptors' bounds replace); None where there is no such `if` (or this is such a kernel)."""
        if self.split_depth >= 2:
            return None
        site = next((i for i, s in enumerate(self.body) if self._has_dot(s)), None)
        ifs = [i for i, s in enumerate(self.body[:site]) if isinstance(s, cst.If) and s.orelse is not None
               and not isinstance(s.orelse, cst.If) and bound_names(s)] if site is not None else []
        if not ifs:
            return None
        at = ifs[-1]
        site_if = self.body[at]
        rest = self.body[at + 1:]
        assert isinstance(site_if, cst.If) and isinstance(site_if.orelse, cst.Else)
        merged_if = site_if.with_changes(
            body=site_if.body.with_changes(body=[*site_if.body.body, *rest]),  # type: ignore[union-attr]
            orelse=site_if.orelse.with_changes(body=site_if.orelse.body.with_changes(
                body=[*site_if.orelse.body.body, *rest])))
        split = _Kernel(self.source, self.facts, self.fn, self.helpers)
        split.body = [*self.body[:at], merged_if]
        split.split_depth = self.split_depth + 1
        split.require_merge = True
        split.in_copy = self.in_copy
        split.sibling_bounds = dict(self.sibling_bounds)
        return split

    def _rewrite(self) -> tuple[cst.FunctionDef, Dispatch] | None:
        loops = [i for i, s in enumerate(self.body) if isinstance(s, cst.For) and self._has_dot(s)]
        nested = [i for i, s in enumerate(self.body) if not isinstance(s, cst.For) and self._has_dot(s)]
        if not loops and len(nested) == 1 and isinstance(self.body[nested[0]], cst.If):
            return self._rewrite_copies(nested[0])
        if len(loops) != 1 or nested:
            return None
        at = loops[0]
        loop = self.body[at]
        assert isinstance(loop, cst.For)
        if not isinstance(loop.target, cst.Name) or not isinstance(loop.iter, cst.Call) or loop.orelse:
            return None
        if not ((isinstance(loop.iter.func, cst.Name) and loop.iter.func.value == "range")
                or self.lang(loop.iter) == "range"):
            return None
        args = [a.value for a in loop.iter.args if a.keyword is None]
        if not 1 <= len(args) <= 3 or any(a.star for a in loop.iter.args):
            return None
        self.var = loop.target.value
        one, zero = cst.Integer("1"), cst.Integer("0")
        self.lo, self.step = (zero, one) if len(args) == 1 else (args[0], args[2] if len(args) > 2 else one)
        self.tl = language_alias(self.source, self.fn.node) or "tl"
        inner = list(loop.body.body) if isinstance(loop.body, cst.IndentedBlock) else []
        if any(not isinstance(s, cst.SimpleStatementLine) or len(s.body) != 1 for s in inner):
            return None  # branches or several statements on a line in the loop: leave it
        if any(self.var in assigned_names(s) for s in inner):
            return None  # the loop variable is reassigned in the loop: it is not the iteration's value
        # What the loop and the whole kernel assign: a value read through a name must be the same wherever the
        # rewrite evaluates it (coordinates in the loop, bounds before it).
        self.loop_assigned = {n for s in inner for n in bound_names(s)}
        self.assigned_anywhere = {n for s in self.body for n in bound_names(s)}
        self.moved = _moved_pointers(self, at)
        self.assigned_anywhere -= set(self.moved)
        # Scalars a jit helper returns, unpacked once before the loop (`pid_m, pid_n = grouped_launch(pid, ...)`):
        # opaque values that do not change, read as themselves.
        counts: dict[str, int] = {}
        for s in self.body:
            for n in bound_names(s):
                counts[n] = counts.get(n, 0) + 1  # (statements binding it: an `if` counts once)
        self.opaque = {n for s in self.body[:at] if isinstance(s, cst.SimpleStatementLine)
                       for small in s.body if isinstance(small, cst.Assign) and len(small.targets) == 1
                       and isinstance(small.targets[0].target, cst.Tuple) and isinstance(small.value, cst.Call)
                       and isinstance(small.value.func, cst.Name) and (small.value.func.value in self.helpers
                                                                      or _scalar_looking(small.value, self))
                       for n in names_in(small.targets[0].target) if counts.get(n) == 1}
        # ... and scalars the branches of an `if` before the loop bind (`if GROUP_M == 1: pid_m, pid_n = pidx, pidy
        # else: pid_m, pid_n = tl.swizzle2d(...)`), which nothing after it assigns
        for s in self.body[:at]:
            if isinstance(s, cst.If) and not any(isinstance(n, (cst.For, cst.While)) for n in preorder(s)):
                bindings = _branch_assignments(s)
                for name, values in bindings.items():
                    if values and all(v is not None and _scalar_looking(v, self) for v in values) \
                            and counts.get(name) == 1 and not any(name in bound_names(t) for t in self.body[at:]):
                        self.opaque.add(name)
        self.before_env = self._env(self.body[:at])
        self.inner = inner
        self.loop = loop
        self.at = at
        return self._convert()

    def _rewrite_copies(self, at: int) -> tuple[cst.FunctionDef, Dispatch] | None:
        """The dot loop held by an `if` at the kernel's top level, once per branch (the copies the unswitch pass
        makes for a constexpr flag, `if EVEN_K: <loop> else: <loop>`, nested for two flags; a test of types; a
        run-time guard of one branch): each copy rewritten as a kernel of its own would be (the statements before
        the `if`, the copy, those after it), all of them or none. A copy that leaves a dimension unmasked (the
        flag's promise that the masks are not needed) takes the extent another copy's mask gives it."""
        site = self.body[at]
        copies = _loop_copies(site, self._has_dot)
        if not copies:
            raise Refusal("the `if` around the dot loop holds it in a form other than one loop per branch (a branch "
                          "with the loop beside an `if` that holds it again, or two loops)")
        head, tail = self.body[:at], self.body[at + 1:]
        done: dict[int, tuple[list[cst.BaseStatement], list[cst.BaseStatement], Dispatch, _Kernel]] = {}
        # (the extents known from copies around this `if` too; those found here go to them, refused or not)
        bounds: dict[tuple[str, str | None, str | None, int], str] = dict(self.sibling_bounds)
        pending = list(range(len(copies)))
        while pending:  # (again while a round finds extents: a copy may need one that another copy's refusal found)
            refused: list[tuple[int, Refusal]] = []
            known = len(bounds)
            for index in pending:
                sub = _Kernel(self.source, self.facts, self.fn, self.helpers)
                sub.in_copy = True
                sub.split_depth = self.split_depth
                sub.body = [*head, *copies[index], *tail]
                sub.sibling_bounds = dict(bounds)
                try:
                    result = sub.rewrite()
                except Refusal as exc:
                    refused.append((index, exc))
                    continue
                finally:
                    bounds.update(sub.found_bounds)
                    self.found_bounds.update(sub.found_bounds)
                if result is None:
                    return None
                body, dispatch = result  # type: ignore[misc]
                size = len(body) - len(head) - len(tail)
                done[index] = (body[len(head):len(head) + size], body[len(head) + size:], dispatch, sub)
            if refused and len(bounds) == known:
                raise refused[0][1]
            pending = [index for index, _ in refused]
        tails = {"".join(self.source.module.code_for_node(s) for s in done[i][1]) for i in done}
        if len(tails) != 1:
            raise Refusal("the copies of the dot loop would store their tiles differently after the `if`")
        new_tail = done[0][1]
        leaves = []
        for index in range(len(copies)):
            leaf, _, _, sub = done[index]
            keep = frozenset(id(s) for s in (*head, *new_tail))
            body = [*head, *leaf, *new_tail]
            # (a copy that is the loop: its dead address statements, in the loop too; one that holds copies of its
            # own under an `if`: those are done, the statements around them remain)
            looped = any(isinstance(s, cst.For) and sub._has_dot(s) for s in leaf)
            body = _drop_dead(body, sub, keep) if looped else _drop_top(body, sub, keep)
            leaves.append(body[len(head):len(body) - len(new_tail)])
        tiles: list[Tile] = []
        for index in range(len(copies)):
            tiles.extend(t for t in done[index][2].tiles if t not in tiles)
        texts = {"".join(self.source.module.code_for_node(s) for s in leaf) for leaf in leaves}
        if len(texts) == 1 and _every_path_copies(site, self._has_dot):
            # (the copies differed in their masks alone, which the descriptors' bounds replace: one loop, whatever
            # the flags say)
            merged: list[cst.BaseStatement] = leaves[0]
        elif self.require_merge:
            raise Refusal("the copies of the code after an `if` that binds its index vectors differ once read "
                          "through descriptors")
        else:
            merged = [_replace_copies(site, self._has_dot, leaves)]
        dispatch = self._dispatch(tiles)
        if self.in_copy:  # (copies inside a copy: the enclosing `_rewrite_copies` assembles and drops)
            return [*head, *merged, *new_tail], dispatch  # type: ignore[return-value]
        body = _drop_top([*head, *merged, *new_tail], self)
        node = self.fn.node.with_changes(body=self.fn.node.body.with_changes(body=body))
        return node, dispatch

    def _has_dot(self, node: cst.CSTNode) -> bool:
        return any(self.lang(c) in ("dot", "core.dot") for c in calls_in(node))

    def _env(self, statements: list[cst.BaseStatement], env: dict | None = None, loop: bool = False) -> dict:
        """name -> (defining expression, the names as they were bound there) for the last plain assignment, or None
        where it is not one expression."""
        env = dict(env or {})
        for s in statements:
            if isinstance(s, cst.SimpleStatementLine):
                for small in s.body:
                    if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                            and isinstance(small.targets[0].target, cst.Name):
                        env[small.targets[0].target.value] = binding = (small.value, dict(env))
                        if loop:
                            self.loop_bindings.add(id(binding))
                    elif isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name) \
                            and small.target.value in self.moved:
                        continue  # (a pointer parameter moved before the loop: read as moved, `_moved_pointers`)
                    elif isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name) \
                            and isinstance(small.operator, cst.AddAssign) and env.get(small.target.value) is not None:
                        env[small.target.value] = binding = (
                            cst.BinaryOperation(small.target, cst.Add(), small.value), dict(env))
                        if loop:
                            self.loop_bindings.add(id(binding))
                    else:
                        for name in assigned_names(s):
                            env[name] = None
            else:
                bound = bound_names(s)
                for name in bound:
                    env[name] = None
                if isinstance(s, cst.If):
                    # A name one branch alone assigns, once, from names bound before the `if` (`if not
                    # DIVISIBLE_M: mask_m = offs_m < M`): code that reads it runs only where that branch ran (Triton
                    # compiles a read of a name no branch taken bound as an error), so it reads that value.
                    for name, value in _branch_bindings(s).items():
                        if not names_in(value) & bound:
                            env[name] = (value, dict(env))
        return env

    # -- expressions ----------------------------------------------------------------------------------------------

    def strip(self, node: cst.BaseExpression) -> cst.BaseExpression:
        while True:
            if isinstance(node, cst.Call) and (self.lang(node) or "").rsplit(".", 1)[-1] in HINTS and node.args:
                node = node.args[0].value
                continue
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "to" \
                    and len(node.args) == 1 \
                    and self.source.code(node.args[0].value).strip().rsplit(".", 1)[-1] in ("int32", "int64"):
                node = node.func.value  # `idx.to(tl.int64)`: the same index, wider
                continue
            if node.lpar and isinstance(node, (cst.BinaryOperation, cst.Name, cst.Call, cst.Subscript)):
                node = node.with_changes(lpar=[], rpar=[])
                continue
            return node

    def lin(self, node: cst.BaseExpression, env: dict, depth: int = 0) -> Linear:
        """The linear form of a scalar or index-vector expression: `tl.arange(0, B)` is the atom `@arange:B`;
        names defined in `env` as vectors or loop-dependent values are expanded."""
        node = self.strip(node)
        if depth > 20:
            raise Refusal("an index expression nested too deep to read")
        if isinstance(node, cst.Integer):
            return {(): int(node.value, 0)} if int(node.value, 0) else {}
        if isinstance(node, (cst.Float, cst.Imaginary)):
            raise Refusal(f"a coordinate or bound with the non-integer `{self.source.code(node).strip()}`")
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
            return _lin_mul({(): -1}, self.lin(node.expression, env, depth + 1))
        if isinstance(node, cst.BinaryOperation):
            if isinstance(node.operator, (cst.Add, cst.Subtract)):
                return _lin_add(self.lin(node.left, env, depth + 1), self.lin(node.right, env, depth + 1),
                                1 if isinstance(node.operator, cst.Add) else -1)
            if isinstance(node.operator, cst.Multiply):
                return _lin_mul(self.lin(node.left, env, depth + 1), self.lin(node.right, env, depth + 1))
        if isinstance(node, cst.Call) and (self.lang(node) or "").rsplit(".", 1)[-1] == "arange":
            args = [a.value for a in node.args if a.keyword is None]
            if len(args) != 2 or self.source.code(args[0]).strip() != "0":
                raise Refusal("an index vector `tl.arange(a, b)` that does not start at 0")
            return {(f"@arange:{self.source.code(args[1]).strip()}",): 1}
        if isinstance(node, cst.Name):
            name = node.value
            if name in self.opaque:
                return {(name,): 1}
            if name in env:
                binding = env[name]
                if binding is None:
                    raise Refusal(f"`{name}` is assigned in a branch or several names at once: its value is not one expression")
                self.check_stable(name, binding)
                expanded = self.lin(binding[0], binding[1], depth + 1)
                # Keep scalar names defined before the loop as they are (the loop's coordinates read them).
                if binding is self.before_env.get(name) and not any(a.startswith("@") for a in _atoms(expanded)) \
                        and name not in self._assigned_after():
                    return {(name,): 1}
                return expanded
            if name != self.var and name in self.assigned_anywhere:
                raise Refusal(f"the parameter `{name}` is reassigned in the kernel: its value where the descriptor "
                              "reads it is not the one the tile was built from")
            return {(name,): 1}
        code = self.source.code(node).strip()
        if "arange" in code:
            raise Refusal(f"the index vector `{code}` is not a sum of a start and `tl.arange(0, BLOCK)`")
        if isinstance(node, cst.Subscript):
            raise Refusal(f"the tensor `{code}` is used as a coordinate or bound (a descriptor takes scalars)")
        for inner in names_in(node):  # an opaque scalar (`tl.load(p + e)`, `min(a, b)`): what it reads is stable
            if inner in env and env[inner] is not None:
                self.check_stable(inner, env[inner])
                if any(a.startswith("@") for a in _atoms(self.lin(env[inner][0], env[inner][1], depth + 1))):
                    raise Refusal(f"`{code}` reads the index vector `{inner}`: it is not a scalar")
            elif inner != self.var and inner in self.assigned_anywhere:
                raise Refusal(f"`{code}` reads `{inner}`, which the kernel reassigns")
        return {(code,): 1}

    def check_stable(self, name: str, binding: tuple) -> None:
        """A name the loop assigns, read through a definition from before the loop (or from before the loop's
        statement that assigns it), holds another value in later iterations: the rewrite would read the first."""
        if name in self.loop_assigned and id(binding) not in self.loop_bindings and name not in self.advancing:
            raise Refusal(f"`{name}` changes in the loop after the tiles read it (an index or offset advanced "
                          "there): only pointer tiles advanced as `ptrs += step` are followed")

    def _assigned_after(self) -> set[str]:
        names: set[str] = set()
        for s in self.body[self.at:]:
            names |= bound_names(s)
        return names

    def vector(self, node: cst.BaseExpression, env: dict) -> tuple[Linear, str, str | None]:
        """`start + tl.arange(0, B)` (optionally `% bound`): (start, B, bound)."""
        node, env = self.deref(node, env)
        wrap = None
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
            wrap = self.source.code(node.right).strip()
            if names_in(node.right) & (self._assigned_after() | {self.var}):
                raise Refusal("the bound of a wrapped index (`% bound`) changes in the loop")
            node = node.left
        lin = self.lin(node, env)
        aranges = [m for m in lin if any(a.startswith("@arange:") for a in m)]
        if len(aranges) != 1 or len(aranges[0]) != 1 or lin[aranges[0]] != 1:
            raise Refusal("an index vector is not `start + tl.arange(0, BLOCK)` (gathered rows, strided or scaled offsets)")
        block = aranges[0][0].split(":", 1)[1]
        start = {m: c for m, c in lin.items() if m != aranges[0]}
        return start, block, wrap

    # -- tiles ----------------------------------------------------------------------------------------------------

    def tile(self, pointer: cst.BaseExpression, env: dict, k_major_b: bool = False) -> dict:
        """`base + rows[:, None] * s0 + cols[None, :] * s1` -> its parts. `unit`: the axis whose stride is 1 (written
        so, not written, or a parameter the launcher checks is 1): the columns', or, for a tile contiguous along its
        first axis (a weight [N, K] read as a [BLOCK_K, BLOCK_N] B tile), the rows', read through a descriptor of
        the transposed view. `k_major_b`: the tile is the B operand of a dot that wants it K-major (8-bit operands,
        which wgmma reads K-major only): with both strides parameters, the first axis's is the one checked to be 1."""
        pointer, env = self.deref(pointer, env)
        split = tile_terms(pointer, self.strip)
        if split is None:
            raise Refusal("a term of the pointer tile multiplies two index vectors")
        base_terms, axes = split
        dims = {d: [((sub.value, env), rest, sub) for sub, rest in axes[d]] for d in (0, 1)}  # type: ignore[attr-defined]
        if len(dims[0]) != 1 or len(dims[1]) != 1:
            raise Refusal("the pointer tile is not `base + rows[:, None] * stride + cols[None, :]` with one index vector per dimension")
        pointers = [f for f in base_terms if len(f) == 1 and isinstance(f[0], cst.Name) and f[0].value in self.params
                    and self.fn.params[self.params.index(f[0].value)].is_constexpr is False
                    and f[0].value not in env and f[0].value not in self.assigned_anywhere]
        if len(pointers) != 1:
            raise Refusal("the pointer tile's base is not a pointer parameter of the kernel (offset before the loop, e.g. per batch)")
        param = pointers[0][0].value
        offsets = list(self.moved.get(param, ()))
        for f in base_terms:
            if f is pointers[0]:
                continue
            stride = [x.value for x in f if isinstance(x, cst.Name) and x.value in self.params]
            if not stride:
                raise Refusal("an offset of the pointer tile's base has no stride parameter to check for 16-byte alignment")
            offsets.append(stride[0])
        strides = []
        for dim in (0, 1):
            _vec, rest, _sub = dims[dim][0]
            if not rest:
                strides.append(None)
            elif len(rest) == 1 and isinstance(rest[0], (cst.Name, cst.Integer)):
                text = self.source.code(rest[0]).strip()
                if isinstance(rest[0], cst.Name) and text not in self.params:
                    raise Refusal("a stride of the pointer tile is not a parameter of the kernel")
                strides.append(text)
            else:
                raise Refusal("a stride of the pointer tile is not one parameter or integer")
        if strides[1] == "1":
            strides[1] = None  # `cols[None, :] * 1`
        if strides[0] == "1":
            strides[0] = None
        if strides[0] is None and (self.facts_only or strides[1] is None):
            raise Refusal("the pointer tile is contiguous along its rows (column-major): a descriptor reads row-major tiles")
        unit = 0 if strides[0] is None or (k_major_b and strides[1] is not None and not self.facts_only) else 1
        base = " + ".join([param, *[self.source.code(cst.BinaryOperation(*_binop(f))).strip() if len(f) > 1
                                    else self.source.code(f[0]).strip() for f in base_terms if f is not pointers[0]]])
        return {"param": param, "base": base, "offsets": tuple(offsets), "strides": strides, "unit": unit,
                "vectors": [dims[0][0][0], dims[1][0][0]], "subscripts": [dims[0][0][2], dims[1][0][2]]}

    def deref(self, node: cst.BaseExpression, env: dict) -> tuple[cst.BaseExpression, dict]:
        """`node` without hints and parentheses, names followed to their definitions (with the names bound there)."""
        node = self.strip(node)
        for _ in range(20):
            if not (isinstance(node, cst.Name) and env.get(node.value) is not None):
                break
            self.check_stable(node.value, env[node.value])
            node, env = env[node.value]
            node = self.strip(node)
        return node, env

    def bounds(self, mask: cst.BaseExpression | None, env: dict, coords: list[Linear],
               blocks: list[str] | None = None) -> list[str | None]:
        """Per dimension, the bound the mask puts on the tile's index (None: no bound)."""
        out: list[str | None] = [None, None]
        if mask is None:
            return out
        for term, env in _conjuncts(mask, self, env):
            if isinstance(term, cst.Comparison) and term.lpar:
                term = term.with_changes(lpar=[], rpar=[])
            outer = broadcast_axis(term)  # `(offs < M)[:, None]`, or `row_mask[:, None]` with a 1-D comparison
            if outer is not None:
                term, env = self.deref(term.value, env)  # type: ignore[union-attr]
            if not isinstance(term, cst.Comparison) or len(term.comparisons) != 1:
                raise Refusal("a term of the load's mask is not one comparison of an index with a bound")
            op = term.comparisons[0].operator
            left, right = term.left, term.comparisons[0].comparator
            if isinstance(op, cst.GreaterThan):
                left, right = right, left
            elif not isinstance(op, cst.LessThan):
                raise Refusal("a term of the load's mask is not `index < bound`")
            # left - right = J_d + c: the index (coord + J_d) is below coord - c.
            if outer is not None:  # a 1-D comparison broadcast: its vector side is the index, unbroadcast
                dim, vec, rest = outer, left, None
            else:
                dim, vec, rest = _vector_side(self.strip(left), self)
            vstart, block, _wrap = self.vector(vec, env)  # the vector as the mask reads it
            if blocks is not None and block != blocks[dim]:
                raise Refusal("the load's mask indexes a dimension with a vector of another length than the tile's")
            lhs = _lin_add(_lin_add(vstart, self.lin(rest, env)) if rest is not None else vstart,
                           self.lin(right, env), -1)
            bound = _lin_add(coords[dim], lhs, -1)
            if any(a.startswith("@") or _names(a) & (self.loop_assigned | {self.var}) for a in _atoms(bound)):
                raise Refusal("a bound in the load's mask depends on the loop variable beyond the tile's own offset")
            text = _lin_code(bound, self.constexprs)
            if out[dim] is not None and out[dim] != text:
                raise Refusal("the load's mask bounds one dimension twice")
            out[dim] = text
        return out

    # -- the rewrite ----------------------------------------------------------------------------------------------

    def _iteration_coord(self, start: Linear, advance: Linear | None) -> Linear:
        """The tile's coordinate at the iteration where the loop variable is `var`."""
        if advance is None:
            return start
        var = {(self.var,): 1}
        lo = self.lin(self.lo, self.before_env)
        step = self.lin(self.step, self.before_env)
        moved = _lin_add(var, lo, -1)  # var - lo
        if advance == step:
            return _lin_add(start, moved)
        if step == {(): 1}:
            return _lin_add(start, _lin_mul(advance, moved))
        raise Refusal("the pointer tile advances by a step that is not the loop's step")

    def _convert(self) -> tuple[cst.FunctionDef, Dispatch] | None:
        dot_index = next((i for i, s in enumerate(self.inner) if self._has_dot(s)), None)
        if dot_index is None:
            return None
        loads: dict[int, tuple[str, cst.Call]] = {}
        for i, s in enumerate(self.inner):
            small = s.body[0]  # type: ignore[attr-defined]
            if isinstance(small, cst.Assign) and isinstance(small.value, cst.Call) \
                    and self.lang(small.value) in ("load", "core.load") and len(small.targets) == 1 \
                    and isinstance(small.targets[0].target, cst.Name):
                loads[i] = (small.targets[0].target.value, small.value)
        dot = next(c for c in calls_in(self.inner[dot_index]) if self.lang(c) in ("dot", "core.dot"))
        # Operands the ring would not pipeline (it takes 16-bit ones; the launcher checks): tf32 asked for, or an
        # int32 accumulator (8-bit integers).
        tf32 = any(a.keyword is not None and (a.keyword.value, self.source.code(a.value).strip()) in (
            ("allow_tf32", "True"), ("input_precision", '"tf32"'), ("input_precision", "'tf32'")) for a in dot.args)
        self.tf32 = tf32 or dot_may_use_tf32(dot, self.source.code)
        self.dot = dot
        if not self.facts_only and (tf32 or any("int32" in self.source.code(c) for c in calls_in(self.fn.node)
                                                if (self.lang(c) or "").rsplit(".", 1)[-1] in ("zeros", "full"))):
            raise Refusal("operands that are not 16-bit (tf32 asked for, or an int32 accumulator): the TMA ring "
                          "pipelines 16-bit operands")
        # (the facts: the dot's own operands; the rewrite: whatever its statement reads, which it must all follow,
        # but the scales a block-scaled GEMM multiplies the product by, `acc += tl.dot(a, b) * a_s[:, None] * b_s`,
        # which stay loads of their own)
        small = self.inner[dot_index].body[0] if isinstance(self.inner[dot_index], cst.SimpleStatementLine) else None
        scaled = scaled_accumulation(small, dot) is not None
        b_operand = dot.args[1].value.value if len(dot.args) > 1 and isinstance(dot.args[1].value, cst.Name) else None
        transposed: set[str] = set()  # operands read through a descriptor of their transposed view
        dot_reads = names_in(dot if self.facts_only or scaled else self.inner[dot_index])
        operand_loads = {i: v for i, v in loads.items() if v[0] in dot_reads and i < dot_index}
        if len(operand_loads) != 2:
            return None
        wraps = False
        wrapped_names: set[str] = set()  # index vectors that wrap (`% M`): read as zeros past the bound
        new_statements: dict[int, str | cst.BaseStatement | None] = {}  # index in the loop body -> replacement text (None: removed)
        creations: list[str] = []
        tiles: list[Tile] = []
        used_names = names_in(self.fn.node)
        removed_pointers: set[str] = set()
        for i, (name, call) in sorted(operand_loads.items()):
            env = self._env(self.inner[:i], self.before_env, loop=True)
            positional = [a.value for a in call.args if a.keyword is None]
            keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
            # (cache and eviction hints are hints: a TMA copy takes none, and what it reads is the same)
            if set(keywords) - {"mask", "other", "pointer", "cache_modifier", "eviction_policy"}:
                raise Refusal("the load takes keywords other than `mask`, `other` and cache or eviction hints "
                              "(`boundary_check`, `volatile`)")
            pointer = positional[0] if positional else keywords.get("pointer")
            mask = positional[1] if len(positional) > 1 else keywords.get("mask")
            other = positional[2] if len(positional) > 2 else keywords.get("other")
            if pointer is None or (other is not None and self.source.code(other).strip() not in ZEROS):
                raise Refusal("the load has no pointer or an `other` value that is not 0")
            # How the pointer tile moves: `P += step` in the loop (P a name defined before the loop), or not at all.
            advance_dim, advance = None, None
            pname = pointer.value if isinstance(pointer, cst.Name) else None
            if pname is not None and pname not in env:
                raise Refusal("the pointer tile is not defined in the kernel")
            advances = [j for j, s in enumerate(self.inner) if pname and pname in assigned_names(s)]
            advanced = pname is not None and self.before_env.get(pname) is not None and bool(advances) \
                and env.get(pname) is self.before_env.get(pname)
            if advanced:
                if len(advances) != 1 or advances[0] < i:
                    raise Refusal("the pointer tile is advanced before its load or more than once")
                self.advancing.add(pname)  # (its advance is read below, not as a change of its value)
            elif pname is not None and len(advances) > 1:
                raise Refusal("the pointer tile is assigned more than once in the loop")
            tile = self.tile(pointer, env, k_major_b=scaled and b_operand == name)
            if advanced:
                small = self.inner[advances[0]].body[0]  # type: ignore[attr-defined]
                if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign):
                    step = small.value
                elif isinstance(small, cst.Assign) and isinstance(small.value, cst.BinaryOperation) \
                        and isinstance(small.value.operator, cst.Add) and isinstance(small.value.left, cst.Name) \
                        and small.value.left.value == pname:
                    step = small.value.right
                else:
                    raise Refusal("the pointer tile is not advanced as `ptrs += step`")
                factors = [self.source.code(f).strip() for f in product_factors(step, self.strip)]
                advance_dim = None
                for dim in (0, 1):
                    stride = tile["strides"][dim]
                    if stride is not None and stride in factors:
                        advance_dim = dim
                        factors.remove(stride)
                        break
                if advance_dim is None:
                    if tile["strides"][tile["unit"]] is not None:
                        raise Refusal("the pointer tile advances by a step that names neither of its strides")
                    advance_dim = tile["unit"]
                advance = self.lin(cst.parse_expression(" * ".join(factors) or "1"), self.before_env)
                if self.var in _atoms(advance) or names_in(step) & bound_names_of(self.inner):
                    raise Refusal("the pointer tile advances by a step that depends on the loop variable")
                new_statements[advances[0]] = None
                removed_pointers.add(pname)
            elif pname is not None and pname in bound_names_of(self.inner[:i]):
                j = max(j for j, s in enumerate(self.inner[:i]) if pname in assigned_names(s))
                new_statements[j] = None  # recomputed in the loop: its definition goes
                removed_pointers.add(pname)
            elif pname is not None:
                removed_pointers.add(pname)
            starts, blocks, coords, wrapped = [], [], [], []
            for dim in (0, 1):
                start, block, wrap = self.vector(*tile["vectors"][dim])
                starts.append(start)
                blocks.append(block)
                coords.append(self._iteration_coord(start, advance if dim == advance_dim else None))
                wrapped.append(wrap)
            bounds = self.bounds(mask, env, coords, blocks)
            for dim in (0, 1):
                if wrapped[dim] is not None:
                    if dim == advance_dim or (bounds[dim] is not None and bounds[dim] != wrapped[dim]):
                        raise Refusal("an index is both wrapped (`% bound`) and masked, or the wrapped index is the advancing one")
                    bounds[dim] = wrapped[dim]
                    wraps = True
                    vector = tile["vectors"][dim][0]
                    if isinstance(vector, cst.Name):
                        wrapped_names.add(vector.value)
                key = (tile["param"], tile["strides"][0], tile["strides"][1], dim)
                if bounds[dim] is None:
                    # (a copy of the loop for a flag that says the masks are not needed, `if EVEN_K:`: the extent
                    # another copy's mask gives that dimension of the same tensor; past it this copy read nothing
                    # the kernel meant to read)
                    bounds[dim] = self.sibling_bounds.get(key)
                if bounds[dim] is None:
                    raise Refusal(f"the {('rows', 'columns')[dim]} of `{name}` are neither masked nor wrapped: a descriptor needs the tensor's extent")
                self.found_bounds[key] = bounds[dim]  # (a wrapped dimension's bound is its extent too)
            desc = _fresh(f"{_stem(pname or name)}_desc", used_names)
            used_names.add(desc)
            # (a tile contiguous along its first axis: the descriptor of the transposed view, [cols, rows], and the
            # dot reads the loaded tile transposed back)
            order = (0, 1) if tile["unit"] == 1 else (1, 0)
            row_stride, unit_stride = tile["strides"][order[0]], tile["strides"][order[1]]
            creations.append(
                f"{desc} = {self.tl}.make_tensor_descriptor({tile['base']}, shape=[{bounds[order[0]]}, "
                f"{bounds[order[1]]}], strides=[{row_stride}, 1], block_shape=[{blocks[order[0]]}, {blocks[order[1]]}])")
            new_statements[i] = (f"{name} = {desc}.load([{_lin_code(coords[order[0]], self.constexprs)}, "
                                 f"{_lin_code(coords[order[1]], self.constexprs)}])")
            if tile["unit"] == 0:
                transposed.add(name)
            tiles.append(Tile(tile["param"], row_stride, unit_stride, tile["offsets"], True))
            s0 = tile["strides"][0]
            self.operands.append(Operand(name, tile["param"], (s0, tile["strides"][1]), tile["offsets"],
                                         (bounds[0], bounds[1]), _moving(coords, self.var), tile["subscripts"][1]))
        self._check_pointers(removed_pointers, new_statements)
        if self.facts_only:
            return None
        if transposed:
            new_statements[dot_index] = self._transposed_operands(dot_index, dot, transposed)
            a_operand = dot.args[0].value.value if isinstance(dot.args[0].value, cst.Name) else None
            if b_operand in transposed and a_operand not in transposed:
                tiles = [dataclasses.replace(t, fp8=True) for t in tiles]
        after = self.body[self.at + 1:]
        store = self._store(after, used_names, self._dot_accumulator(dot_index))
        if wraps:
            # Rows (or columns) past the bound read zeros instead of the wrapped-around rows: only accumulator rows
            # past the bound change, so the epilogue must not look across rows, nor store those rows anywhere: its
            # store goes through a descriptor bounded like the loads (clipped), and the wrapped indices are unread.
            across = {(self.lang(c) or "").rsplit(".", 1)[-1] for s in after for c in calls_in(s)} | {
                c.func.attr.value for s in after for c in calls_in(s) if isinstance(c.func, cst.Attribute)}
            helper_calls = {c.func.value for s in after for c in calls_in(s)
                            if isinstance(c.func, cst.Name) and c.func.value in self.helpers}
            if across & set(CROSS_TILE) or helper_calls or store is None or wrapped_names & {n for s in after for n in names_in(s)}:
                raise Refusal("rows that wrap around (`% M`) read zeros past the bound: the epilogue must store the "
                              "tile through a bounded store and not reduce, reshape or reuse the wrapped rows")
        # The new loop body.
        inner = list(self.inner)
        for j in sorted(new_statements, reverse=True):
            text = new_statements[j]
            if text is None:
                del inner[j]
            elif isinstance(text, cst.BaseStatement):
                inner[j] = text
            else:
                inner[j] = inner[j].with_changes(body=[cst.parse_statement(text).body[0]])  # type: ignore[attr-defined]
        loop = self.loop.with_changes(body=self.loop.body.with_changes(body=inner))
        body = list(self.body)
        comment = [cst.EmptyLine(indent=True, comment=cst.Comment(c)) for c in (
            "# triton-transpile: the pointer tiles as TMA descriptors, their bounds from the masks (out-of-bounds",
            "# elements read as zero, stores clipped); launches they cannot address run the source kernel.")]
        made = [cst.parse_statement(t) for t in creations]
        if store is not None:
            index, text, creation, tile = store
            made.append(cst.parse_statement(creation))
            body[self.at + 1 + index] = body[self.at + 1 + index].with_changes(
                body=[cst.parse_statement(text).body[0]])  # type: ignore[attr-defined]
            tiles.append(tile)
        made[0] = made[0].with_changes(leading_lines=comment)
        body[self.at:self.at + 1] = [*made, loop]
        if self.in_copy:  # (`_rewrite_copies` assembles the kernel and drops what no copy reads any more)
            return body, self._dispatch(tiles)  # type: ignore[return-value]
        body = _drop_dead(body, self)
        node = self.fn.node.with_changes(body=self.fn.node.body.with_changes(body=body))
        return node, self._dispatch(tiles)

    def _dispatch(self, tiles: list[Tile]) -> Dispatch:
        """What the launcher checks for the rewritten kernel: its parameters and the tiles read through descriptors."""
        return Dispatch(self.fn.name, tuple(self.params), tuple(tiles), self.helpers)

    def _transposed_operands(self, dot_index: int, dot: cst.Call, names: set[str]) -> cst.BaseStatement:
        """The dot's statement reading the tiles `names` (loaded through descriptors of their transposed views)
        transposed back (`tl.dot(a, tl.trans(b))`); refused where such a tile is read anywhere but as the dot's operand."""
        statement = self.inner[dot_index]

        def reads(node: cst.CSTNode, name: str) -> int:
            return sum(1 for n in preorder(node) if isinstance(n, cst.Name) and n.value == name)

        for name in names:
            elsewhere = [s for j, s in enumerate(self.inner) if j != dot_index and name not in assigned_names(s)]
            direct = sum(1 for a in dot.args[:2] if isinstance(a.value, cst.Name) and a.value.value == name)
            if any(reads(s, name) for s in [*elsewhere, *self.body[self.at + 1:]]) or reads(statement, name) != direct:
                raise Refusal(f"`{name}`, read through a descriptor of its transposed view, is read outside the dot")
        trans = cst.parse_expression(f"{self.tl}.trans")
        args = [a.with_changes(value=cst.Call(trans, [cst.Arg(a.value)])) if i < 2 and isinstance(a.value, cst.Name)
                and a.value.value in names else a for i, a in enumerate(dot.args)]
        # (the statement itself, not its text: the dot's `tl.dot` keeps its node, which the names are resolved by)
        return statement.deep_replace(dot, dot.with_changes(args=args))

    def _check_pointers(self, removed: set[str], replaced: dict[int, str | None]) -> None:
        """The pointer tiles the rewrite drops must have no other reader."""
        for j, s in enumerate(self.inner):
            if j in replaced:
                continue
            if names_in(s) & removed:
                raise Refusal("the pointer tile is read in the loop other than by its load")
        for s in self.body[self.at + 1:]:
            if names_in(s) & removed:
                raise Refusal("the pointer tile is read after the loop")

    def _dot_accumulator(self, dot_index: int) -> str | None:
        statement = self.inner[dot_index]
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
            return small.targets[0].target.value
        if isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
            return small.target.value  # `acc += tl.dot(a, b) * scales`
        return None

    def _store(self, after: list[cst.BaseStatement], used: set[str], acc: str | None
               ) -> tuple[int, str, str, Tile] | None:
        """The epilogue's one `tl.store(tile, value, mask=bounds)` at the function's top level, as a descriptor
        store, or None."""
        stores = [(i, s) for i, s in enumerate(after) if any(self.lang(c) in ("store", "core.store")
                                                             for c in calls_in(s))]
        if len(stores) != 1:
            return None
        i, statement = stores[0]
        if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
                and isinstance(statement.body[0], cst.Expr) and isinstance(statement.body[0].value, cst.Call)):
            return None
        call = statement.body[0].value
        env = self._env([*self.body[:self.at], *after[:i]])
        positional = [a.value for a in call.args if a.keyword is None]
        keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        if set(keywords) - {"mask", "pointer", "value"} or len(positional) > 3:
            return None
        pointer = positional[0] if positional else keywords.get("pointer")
        value = positional[1] if len(positional) > 1 else keywords.get("value")
        mask = positional[2] if len(positional) > 2 else keywords.get("mask")
        if pointer is None or value is None or acc is None:
            return None
        # The stored value is the whole tile: it is computed from the accumulator (a broadcast row would not be).
        seen, todo, reads = set(), [value], set()
        while todo:
            node = todo.pop()
            for n in names_in(node):
                if n not in seen:
                    seen.add(n)
                    reads.add(n)
                    binding = env.get(n)
                    if binding is not None and n != acc:
                        todo.append(binding[0])
        if acc not in reads:
            return None
        try:
            saved, self.before_env = self.before_env, env
            tile = self.tile(pointer, env)
            starts, blocks = [], []
            for dim in (0, 1):
                start, block, wrap = self.vector(*tile["vectors"][dim])
                if wrap is not None:
                    return None
                starts.append(start)
                blocks.append(block)
            bounds = self.bounds(mask, env, starts, blocks)
        except Refusal:
            return None
        finally:
            self.before_env = saved
        if None in bounds:
            return None
        if any(a.startswith("@") for s in starts for a in _atoms(s)):
            return None
        desc = _fresh(f"{_stem(tile['param'])}_desc", used)
        used.add(desc)
        creation = (f"{desc} = {self.tl}.make_tensor_descriptor({tile['base']}, shape=[{bounds[0]}, {bounds[1]}], "
                    f"strides=[{tile['strides'][0]}, 1], block_shape=[{blocks[0]}, {blocks[1]}])")
        # A descriptor store converts the value to the tensor's element type, as `tl.store` does.
        text = f"{desc}.store([{_lin_code(starts[0], self.constexprs)}, {_lin_code(starts[1], self.constexprs)}], {self.source.code(value).strip()})"
        # The store's coordinates and bounds are read before the loop (the descriptor) and after it (the store).
        for name in _names(creation):
            if name in self._assigned_after() and name not in self.params:
                return None
        return i, text, creation, Tile(tile["param"], tile["strides"][0], tile["strides"][1], tile["offsets"], False)


# ---- small helpers ------------------------------------------------------------------------------------------------

def tile_terms(address: cst.BaseExpression, strip: Callable[[cst.BaseExpression], cst.BaseExpression]
               ) -> tuple[list[list[cst.BaseExpression]], dict[int, list[tuple[cst.Subscript, list[cst.BaseExpression]]]]
                          ] | None:
    """A pointer tile's address as terms: (the factors of each term without an index vector, and per axis each
    `v[:, None]` (0) or `v[None, :]` (1) with the other factors of its term). None where a term multiplies two index
    vectors."""
    base: list[list[cst.BaseExpression]] = []
    axes: dict[int, list[tuple[cst.Subscript, list[cst.BaseExpression]]]] = {0: [], 1: []}
    for term in sum_terms(address, strip):
        factors = product_factors(term, strip)
        vectors = [(i, f) for i, f in enumerate(factors) if broadcast_axis(f) is not None]
        if len(vectors) > 1:
            return None
        if not vectors:
            base.append(factors)
            continue
        i, vector = vectors[0]
        axes[broadcast_axis(vector)].append((vector, [f for j, f in enumerate(factors) if j != i]))  # type: ignore[index,arg-type]
    return base, axes


def dot_may_use_tf32(dot: cst.Call, code: Callable[[cst.CSTNode], str]) -> bool:
    """Whether `tl.dot` may run 32-bit float operands on tf32 (Triton's default): not `allow_tf32=False`, not
    `input_precision="ieee"` or `"tf32x3"`."""
    return not any(a.keyword is not None and (a.keyword.value, code(a.value).strip().strip("'\"")) in (
        ("allow_tf32", "False"), ("input_precision", "ieee"), ("input_precision", "tf32x3")) for a in dot.args)


def _moving(coords: list[Linear], var: str) -> int | None:
    """The one dimension whose coordinate the loop variable moves (None: none, or both)."""
    moving = [d for d, c in enumerate(coords) if any(var in _names(a) for a in _atoms(c))]
    return moving[0] if len(moving) == 1 else None


def jit_callees(facts: ModuleFacts, name: str) -> tuple[str, ...]:
    """The jit functions of the file that `name` calls, directly or through others, in file order."""
    found: set[str] = set()
    todo = [name]
    while todo:
        caller = todo.pop()
        for other in facts.functions.values():
            if caller in other.called_by and other.name not in found:
                found.add(other.name)
                todo.append(other.name)
    return tuple(n for n in facts.functions if n in found)


def _names(text: str) -> set[str]:
    try:
        return names_in(cst.parse_expression(text)) if not text.startswith("@") else set()
    except Exception:  # noqa: BLE001 - an atom that is not an expression names nothing
        return {text}


def _binop(factors: list[cst.BaseExpression]) -> tuple:
    left = factors[0]
    for f in factors[1:-1]:
        left = cst.BinaryOperation(left, cst.Multiply(), f)
    return left, cst.Multiply(), factors[-1]


def _vector_side(node: cst.BaseExpression, k: _Kernel) -> tuple[int, cst.BaseExpression, cst.BaseExpression | None]:
    """`v[:, None]` or `v[:, None] + rest`: (dim, v, rest)."""
    terms = sum_terms(node, k.strip)
    vectors = [t for t in terms if broadcast_axis(t) is not None]
    if len(vectors) != 1:
        raise Refusal("a term of the load's mask compares no broadcast index vector (`offs[:, None]`)")
    vec = vectors[0]
    rest = [t for t in terms if t is not vec]
    rest_node = None
    for t in rest:
        rest_node = t if rest_node is None else cst.BinaryOperation(rest_node, cst.Add(), t)
    return broadcast_axis(vec), vec.value, rest_node  # type: ignore[return-value,union-attr]


def _conjuncts(node: cst.BaseExpression, k: _Kernel, env: dict) -> list[tuple[cst.BaseExpression, dict]]:
    """The terms of `a & b & ...`, each with the names bound where it is written."""
    node, env = k.deref(node, env)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitAnd):
        return [*_conjuncts(node.left, k, env), *_conjuncts(node.right, k, env)]
    return [(node, env)]


def _stem(name: str) -> str:
    for suffix in ("_ptrs", "_ptr", "_block_ptr", "ptrs", "ptr"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)].rstrip("_") or name
    return name


def _fresh(name: str, used: set[str]) -> str:
    out, n = name, 2
    while out in used:
        out, n = f"{name}{n}", n + 1
    return out


def _drop_dead(body: list[cst.BaseStatement], k: _Kernel, keep: frozenset[int] = frozenset()
               ) -> list[cst.BaseStatement]:
    """Drops the address and mask statements (pure: aranges, hints, arithmetic) that nothing reads any more, at the
    top of the function and in the rewritten loop: the pointer tiles, their offsets and masks. A value is read if a
    statement after its definition reads it (in the loop: any statement of the loop, or after it). Statements whose
    ids `keep` holds stay (those other copies of the loop share)."""
    body = list(body)
    at = next(i for i, s in enumerate(body) if isinstance(s, cst.For) and k._has_dot(s))
    loop = body[at]
    inner = list(loop.body.body)  # type: ignore[union-attr]
    header = loop.with_changes(body=cst.IndentedBlock(body=[]))  # type: ignore[union-attr]
    while True:
        after = [n for s in body[at + 1:] for n in statement_reads(s)]
        loop_reads = {n for s in [header, *inner] for n in statement_reads(s)} | set(after)
        body[at] = header  # (read through `header` and `inner` while the loop is being cut down)
        dead = None
        for i, s in enumerate(body):
            if i == at or id(s) in keep:
                continue
            later = {n for t in body[i + 1:] if t is not body[at] for n in statement_reads(t)}
            if i < at:
                later |= loop_reads
            if _removable(s, later, k):
                dead = ("top", i)
                break
        if dead is None:
            for i, s in enumerate(inner):
                others = statement_reads(header) | set(after) | {n for t in inner if t is not s for n in statement_reads(t)}
                if _removable(s, others, k):
                    dead = ("loop", i)
                    break
        if dead is None:
            break
        where, i = dead
        if where == "top":
            del body[i]
            at -= 1 if i < at else 0
        else:
            del inner[i]
    body[at] = loop.with_changes(body=loop.body.with_changes(body=inner))  # type: ignore[union-attr]
    return body


def _moved_pointers(k: _Kernel, at: int) -> dict[str, tuple[str, ...]]:
    """The kernel's parameters that statements at its top level before statement `at` move and nothing else
    assigns (`A += pid_b * stride_ab`, a batch's matrix), each read by no statement before its last move: a tile
    addressed from such a parameter starts at the moved address. Each move's terms name a parameter that scales it
    (`stride_ab`; `M` of `pid_b * M * K`), which the launcher checks for 16-byte alignment."""
    moved: dict[str, tuple[str, ...]] = {}
    for param in k.fn.params:
        name = param.name
        if param.is_constexpr is not False:
            continue
        binders = [i for i, s in enumerate(k.body) if name in bound_names(s)]
        if not binders or binders[-1] >= at:
            continue
        scales = [_move_scales(k, k.body[i], name) for i in binders]
        if any(found is None for found in scales):
            continue
        if not any(name in names_in(s) for i, s in enumerate(k.body[:binders[-1]]) if i not in binders):
            moved[name] = tuple(dict.fromkeys(f for found in scales for f in found))  # type: ignore[union-attr]
    return moved


def _move_scales(k: _Kernel, statement: cst.BaseStatement, name: str) -> list[str] | None:
    """For `name += <terms>`, a parameter scaling each term (the first a term multiplies by); None where the
    statement is another or a term has none."""
    small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
    if not (isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign)
            and isinstance(small.target, cst.Name) and small.target.value == name):
        return None
    scales = []
    for term in sum_terms(small.value, k.strip):
        found = [f.value for f in product_factors(term, k.strip) if isinstance(f, cst.Name)
                 and f.value in k.params and f.value != name]
        if not found:
            return None
        scales.append(found[0])
    return scales


#: calls whose result is a tensor (or read one): a value made with them is not a scalar a descriptor's coordinate takes
TENSOR_CALLS = ("arange", "zeros", "full", "load", "where", "broadcast_to", "reshape", "expand_dims", "view", "join",
                "cat", "trans", "permute", "dot", "sum", "max", "min", "cumsum", "zeros_like", "full_like", "split",
                "make_block_ptr", "advance", "make_tensor_descriptor", "gather")


def _scalar_looking(value: cst.BaseExpression, k: _Kernel) -> bool:
    """`value` makes no tensor: no subscript (`v[:, None]`) and no call that makes or reads one (`TENSOR_CALLS`,
    in Triton's language or as a method); names it reads are the kernel's parameters or bound to such values."""
    for node in preorder(value):
        if isinstance(node, cst.Subscript):
            return False
        if isinstance(node, cst.Call):
            name = (k.lang(node) or "").rsplit(".", 1)[-1] or (
                node.func.attr.value if isinstance(node.func, cst.Attribute) else "")
            if name in TENSOR_CALLS:
                return False
    return True


def _branch_assignments(site: cst.If, elements: bool = True) -> dict[str, list[cst.BaseExpression | None]]:
    """Names the branches of `site` bind (its `elif`s and `else`, nested `if`s) -> the value of each binding: a
    plain `name = value`'s value and, with `elements`, a tuple assignment's element where its value is a tuple of
    as many (`a, b = x, y`), else the whole value for each name (`a, b = f(x)`); None where the name is bound
    otherwise (in a loop or a `with`, on a line of several statements, a tuple assignment without `elements`)."""
    found: dict[str, list[cst.BaseExpression | None]] = {}

    def walk(statements: Sequence[cst.BaseStatement]) -> None:
        for statement in statements:
            if isinstance(statement, cst.If):
                for suite in _branches(statement):
                    walk(suite.body)  # type: ignore[attr-defined]
                continue
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) \
                and len(statement.body) == 1 else None
            target = small.targets[0].target if isinstance(small, cst.Assign) and len(small.targets) == 1 else None
            if isinstance(target, cst.Name):
                found.setdefault(target.value, []).append(small.value)  # type: ignore[union-attr]
            elif isinstance(target, cst.Tuple) and elements:
                value = small.value  # type: ignore[union-attr]
                items = [e.value for e in target.elements]
                values = [e.value for e in value.elements] if isinstance(value, cst.Tuple) \
                    and len(value.elements) == len(items) else [value] * len(items)
                for item, item_value in zip(items, values):
                    for name in names_in(item):
                        found.setdefault(name, []).append(item_value if isinstance(item, cst.Name) else None)
            else:
                for name in bound_names(statement):
                    found.setdefault(name, []).append(None)

    walk([site])
    return found


def _branch_bindings(site: cst.If) -> dict[str, cst.BaseExpression]:
    """Names bound exactly once in `site` (its branches, nested `if`s, no loops), by a plain `name = value`: name ->
    value."""
    return {name: values[0] for name, values in _branch_assignments(site, elements=False).items()
            if len(values) == 1 and values[0] is not None}


def _drop_top(body: list[cst.BaseStatement], k: _Kernel, keep: frozenset[int] = frozenset()
              ) -> list[cst.BaseStatement]:
    """Drops the top-level address and mask statements that no later statement reads (`_drop_dead` at the top of
    a kernel whose rewritten loops sit in the branches of an `if`), but those whose ids `keep` holds."""
    body = list(body)
    while True:
        dead = next((i for i, s in enumerate(body) if id(s) not in keep and _removable(
            s, {n for t in body[i + 1:] for n in statement_reads(t)}, k)), None)
        if dead is None:
            return body
        del body[dead]


def _loop_copies(site: cst.If, has_dot: Callable[[cst.CSTNode], bool]) -> list[list[cst.BaseStatement]]:
    """The statements of each branch of `site` (an `if`, its `elif`s and `else`, in order) whose dots are in one
    statement, a loop or an `if` (copies of their own, `_Kernel._rewrite_copies` again); empty where a branch holds
    dots otherwise."""
    copies: list[list[cst.BaseStatement]] = []
    for branch in _branches(site):
        statements = list(branch.body)  # type: ignore[union-attr]
        with_dots = [s for s in statements if has_dot(s)]
        if not with_dots:
            continue
        if len(with_dots) != 1 or not isinstance(with_dots[0], (cst.For, cst.If)):
            return []
        copies.append(statements)
    return copies


def _every_path_copies(site: cst.If, has_dot: Callable[[cst.CSTNode], bool]) -> bool:
    """Every way through `site` runs a copy of the loop: an `else` ends it, and every branch holds dots."""
    node: cst.If | cst.Else | None = site
    while isinstance(node, cst.If):
        if not any(has_dot(s) for s in node.body.body):  # type: ignore[union-attr]
            return False
        node = node.orelse
    return node is not None and any(has_dot(s) for s in node.body.body)  # type: ignore[union-attr]


def _branches(site: cst.If) -> list[cst.BaseSuite]:
    """The bodies of an `if`, its `elif`s and its `else`, in order."""
    suites: list[cst.BaseSuite] = []
    node: cst.If | cst.Else | None = site
    while node is not None:
        suites.append(node.body)
        node = node.orelse if isinstance(node, cst.If) else None
    return suites


def _replace_copies(site: cst.If, has_dot: Callable[[cst.CSTNode], bool], leaves: list[list[cst.BaseStatement]]
                    ) -> cst.If:
    """`site` with the branches `_loop_copies` found replaced by `leaves`, in the same order."""
    queue = list(leaves)

    def rebuilt(node: cst.If | cst.Else) -> cst.If | cst.Else:
        statements = list(node.body.body)  # type: ignore[union-attr]
        if any(has_dot(s) for s in statements):
            statements = queue.pop(0)
        changes: dict[str, object] = {"body": node.body.with_changes(body=statements)}
        if isinstance(node, cst.If) and node.orelse is not None:
            changes["orelse"] = rebuilt(node.orelse)
        return node.with_changes(**changes)

    return rebuilt(site)  # type: ignore[return-value]


def _removable(statement: cst.BaseStatement, reads: set[str], k: _Kernel) -> bool:
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Assign)):
        return False
    targets = assigned_names(statement)
    return bool(targets) and not targets & reads and all(
        (k.lang(c) or "").rsplit(".", 1)[-1] in PURE
        or (isinstance(c.func, cst.Attribute) and c.func.attr.value == "to" and k.lang(c) is None)  # `x.to(int64)`
        for c in calls_in(statement))
