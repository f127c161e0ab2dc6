"""``tl.dot`` -> the target's matrix instruction.

Matches: ``tl.dot(a, b)`` and ``tl.dot(a, b, acc)`` (``out_dtype`` honoured when there is no accumulator).
Emits: ``_dot(a, b, acc)``, a small ``@gluon.jit`` helper written into the variant by the target (MFMA on gfx942 and
gfx950, WMMA on gfx1250, wgmma on sm90) that moves the operands into the layouts the instruction reads. The
accumulator lives in the target's MMA layout (the layout plan puts every tensor that meets it there too), so the
result needs no conversion. Without an accumulator the rule starts one from zeros in that layout.
Targets: all (each brings its own `_dot`).
"""

from __future__ import annotations

import libcst as cst

from transpile.analysis.layouts import DotSite
from transpile.cst_utils import calls_in, element_type_pointer
from transpile.passes.tma_tiles import dot_may_use_tf32
from transpile.rules.base import Counterexample, Example, Rule, RuleContext, bare, call, expr

# The operand formats of the microscaled MMAs (`tl.dot_scaled`'s "bf16"/"fp16" operands are upcast by Triton)
SCALED_FORMATS = ("e2m1", "e4m3", "e5m2")
# what a target that upcasts the operands of `tl.dot_scaled` (`Target.scaled_upcast`) takes besides
UPCAST_FORMATS = ("bf16", "fp16")

MATMUL = (
    "import triton\nimport triton.language as tl\n\n@triton.jit\n"
    "def k(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):\n"
    "    m = tl.arange(0, M)\n    n = tl.arange(0, N)\n    k = tl.arange(0, K)\n"
    "    a = tl.load(a_ptr + m[:, None] * K + k[None, :])\n    b = tl.load(b_ptr + k[:, None] * N + n[None, :])\n"
    "    c = tl.dot(a, b)\n    tl.store(c_ptr + m[:, None] * N + n[None, :], c)\n"
)


BROADCAST_PRODUCT = (
    "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
    "def k(a_ptr, b_ptr, c_ptr, BM: tl.constexpr):\n    r = tl.arange(0, BM)\n"
    "    a = tl.load(a_ptr + r[:, None] * BM + r[None, :])\n    b = tl.load(b_ptr + r[:, None] * BM + r[None, :])\n"
    "    c = tl.sum(a[:, :, None] * b[None, :, :], axis=1)\n"
    "    tl.store(c_ptr + r[:, None] * BM + r[None, :], c)\n"
)


class Dot(Rule):
    name = "dot"
    matches = "`tl.dot(a, b[, acc])`"
    emits = "`_dot(a, b, acc)` with the accumulator in the target's MMA layout"
    examples = (
        Example(MATMUL, ("c = _dot(a, b, gl.zeros([M, N], _acc_dtype(a_ptr.dtype.element_ty), layout=mma_layout))",
                         "mma_layout: gl.constexpr = _mma_layout(M, [N], a_ptr.dtype.element_ty, gl.num_warps(), k=K)",
                         "return mfma(a, b, acc)"), "gfx942"),
        Example(MATMUL, ("return wmma(a, b, acc)",), "gfx1250"),
        Example(MATMUL, ("acc = warpgroup_mma(a_smem, b_smem, acc, is_async=True)",), "sm90"),
    )
    counterexamples = (
        # a product written as a broadcast and a sum is not a dot: it stays elementwise work
        Counterexample(BROADCAST_PRODUCT, ("_dot(", "mma_layout")),
    )

    def leave_Call(self, ctx: RuleContext, original: cst.Call, updated: cst.BaseExpression) -> cst.BaseExpression:
        site = ctx.plan.dots.get(original)
        if site is None or not isinstance(updated, cst.Call):
            return updated
        if site.scaled is not None:
            return self._scaled(ctx, original, updated, site)
        ctx.need("dot")
        args = [a for a in updated.args if a.keyword is None]
        keywords = {a.keyword.value: a.value for a in updated.args if a.keyword is not None}
        a = keywords.get("input", args[0].value if args else None)
        b = keywords.get("other", args[1].value if len(args) > 1 else None)
        acc = keywords.get("acc", args[2].value if len(args) > 2 else None)
        if a is None or b is None:
            ctx.refuse(original, "TT010", "`tl.dot` needs both operands")
            return updated
        dtype = site.operand_dtype
        if not dot_may_use_tf32(original, cst.Module([]).code_for_node) and not (
                dtype is not None and dtype.startswith("gl.") and dtype not in ("gl.float32", "gl.float64")):
            # Operands that may be fp32, and the kernel asks for full-precision products, which no MMA of these
            # targets computes (for 16- and 8-bit operands the precision asked for changes nothing: FlagGems passes
            # `allow_tf32=False` whatever its inputs). Where the operands' type is the launch's, the AMD launcher runs
            # the source kernel for launches with fp32 tensors (`Dispatch.slow_dtypes`); otherwise the kernel stays.
            # (sm90, tiles read through TMA descriptors: that launcher runs fp32 launches on the source kernel)
            if ctx.descriptor_launches and dtype != "gl.float32":
                pass
            elif dtype == "gl.float32" or ctx.target.backend != "hip":
                ctx.keep_kernel_after_loops(
                    original, "`tl.dot` with full-precision fp32 products (`input_precision=\"ieee\"`, `\"tf32x3\"` or "
                    "`allow_tf32=False`)", "the matrix cores take fp32 operands as tf32 only; Triton's own compile "
                    "computes such products with FMAs (or three tf32 passes), as the kernel asks" + (
                        "" if dtype == "gl.float32" else " (its operands' type is the launch's, and this target's "
                        "launcher cannot send fp32 launches to the source kernel)"))
                return updated
            else:
                ctx.launch_checked = True
                # (the operands' type is that of the tensors they are loaded from, where the source says which:
                # `a_ptr.dtype.element_ty`; only an fp32 tensor of those sends a launch to the source kernel, not
                # the kernel's other fp32 tensors, FLA's gates; "name=type" in the launcher's slow types)
                params = {p.name for p in ctx.function.params}
                owners = [element_type_pointer(t, params) for t in (site.operand_dtype, site.b_dtype)]
                slow = tuple(f"{name}=float32" for name in dict.fromkeys(owners)) if None not in owners \
                    else ("float32",)
                ctx.launch_slow_dtypes = tuple(dict.fromkeys((*ctx.launch_slow_dtypes, *slow)))
        if acc is None or (isinstance(acc, cst.Name) and acc.value == "None"):
            layout = ctx.plan.layout_expr(site.result)
            m, n = site.shape
            if m is None or n is None:
                ctx.refuse(original, "TT010", "cannot tell the shape of this `tl.dot` result from the source; pass an "
                           "accumulator (`acc = tl.zeros([BLOCK_M, BLOCK_N], ...)`)")
                return updated
            out_dtype = keywords.get("out_dtype", args[4].value if len(args) > 4 else None)
            if out_dtype is not None:
                dtype: cst.BaseExpression = out_dtype
            else:
                ctx.need("acc_dtype")
                # (an operand type the analysis cannot name: the A operand's own, where it is a name, read at
                # compile time; an 8-bit integer product then gets its int32 accumulator)
                fallback = f"{a.value}.dtype" if isinstance(a, cst.Name) else "gl.float16"
                dtype = expr(f"_acc_dtype({site.operand_dtype or fallback})")
            acc = call("gl.zeros", f"[{m}, {n}]", dtype, layout=layout)
        return call("_dot", bare(a), bare(b), bare(acc))

    def _scaled(self, ctx: RuleContext, original: cst.Call, updated: cst.Call, site: DotSite) -> cst.BaseExpression:
        """`tl.dot_scaled(lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format[, acc])` ->
        `_dot_scaled(lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format, acc)`: the target's microscaled MMA."""
        if ctx.target.scaled_mma:
            ctx.keep_kernel(original, "`tl.dot_scaled`", f"{ctx.target.name} {ctx.target.scaled_mma}")
            return updated
        args = [a for a in updated.args if a.keyword is None]
        keywords = {a.keyword.value: a.value for a in updated.args if a.keyword is not None}

        def arg(index: int, key: str) -> cst.BaseExpression | None:
            return keywords.get(key, args[index].value if len(args) > index else None)

        for key, index in (("lhs_k_pack", 8), ("rhs_k_pack", 9)):
            packed = arg(index, key)
            if packed is not None and not (isinstance(packed, cst.Name) and packed.value == "True"):
                ctx.keep_kernel(original, f"`tl.dot_scaled(..., {key}=...)`",
                                "only fp4 packed along K (the default) is translated")
                return updated
        for key, index in (("lhs_format", 2), ("rhs_format", 5)):
            fmt = arg(index, key)
            if isinstance(fmt, cst.SimpleString) and fmt.evaluated_value not in SCALED_FORMATS \
                    and not (ctx.target.scaled_upcast and fmt.evaluated_value in UPCAST_FORMATS):
                ctx.keep_kernel(fmt, f"`tl.dot_scaled` with {key} {fmt.value}",
                                f"the microscaled MMA takes {', '.join(SCALED_FORMATS)} operands, and Triton's own "
                                "compile upcasts a 16-bit one in software as a Gluon form would")
                return updated
        a, a_scale, a_format = arg(0, "lhs"), arg(1, "lhs_scale"), arg(2, "lhs_format")
        b, b_scale, b_format = arg(3, "rhs"), arg(4, "rhs_scale"), arg(5, "rhs_format")
        acc = arg(6, "acc")
        if a is None or b is None or a_format is None or b_format is None:
            ctx.refuse(original, "TT010", "`tl.dot_scaled` needs both operands and both formats")
            return updated
        ctx.need("dot_scaled")
        if acc is None or (isinstance(acc, cst.Name) and acc.value == "None"):
            m, n = site.shape
            if m is None or n is None:
                ctx.refuse(original, "TT010", "cannot tell the shape of this `tl.dot_scaled` result from the source; "
                           "pass an accumulator (`acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)`)")
                return updated
            acc = call("gl.zeros", f"[{m}, {n}]", expr("gl.float32"), layout=ctx.plan.layout_expr(site.result))
        none = cst.Name("None")
        fast_math = arg(7, "fast_math")
        # (an upcasting target masks the values of a 0xFF scale to NaN unless `fast_math`; a microscaled MMA reads
        # the scales itself)
        extra = {"fast_math": bare(fast_math)} if fast_math is not None and ctx.target.scaled_upcast else {}
        return call("_dot_scaled", *(bare(v) for v in (a, a_scale or none, a_format, b, b_scale or none, b_format,
                                                       acc)), **extra)


def translated_dot(statement: cst.CSTNode) -> cst.Call:
    """The translated dot (`_dot(a, b, acc)`, written by `Dot`) in `statement`, which holds one."""
    return next(c for c in calls_in(statement) if isinstance(c.func, cst.Name) and c.func.value == "_dot")


def translated_scaled_dot(statement: cst.CSTNode) -> cst.Call | None:
    """The translated `tl.dot_scaled` (`_dot_scaled(a, a_scale, a_format, b, b_scale, b_format, acc[, fast_math=])`,
    written by `Dot`) in `statement`, if it holds one."""
    return next((c for c in calls_in(statement) if isinstance(c.func, cst.Name) and c.func.value == "_dot_scaled"),
                None)


def _scaled_args(dot: cst.Call) -> tuple[list[str], str]:
    """The seven positional arguments of a translated `_dot_scaled`, as text, and its `fast_math` (`False` unless
    given)."""
    code = cst.Module([]).code_for_node
    args = [code(a.value) for a in dot.args if a.keyword is None]
    fast = next((code(a.value) for a in dot.args if a.keyword is not None and a.keyword.value == "fast_math"), "False")
    return args, fast


def upcast_text(dot: cst.Call, position: int) -> str:
    """Operand `position` (0: A, 1: B) of a translated `_dot_scaled` upcast with its scale, as the Hopper helper
    `_upcast_scaled` computes it for its plain MMA (`Target.scaled_upcast`)."""
    args, fast = _scaled_args(dot)
    value, scale, fmt = args[3 * position: 3 * position + 3]
    return (f"_upcast_scaled({value}, {scale}, {fmt}, {1 - position}, _scaled_compute_type({args[2]}, {args[5]}), "
            f"{fast})")


def scaled_operand_type(dot: cst.Call, position: int, shape: list[str]) -> tuple[str, str]:
    """Element type and shape (as text) of operand `position` of a translated `_dot_scaled` once upcast
    (`upcast_text`), from the shape of the tile loaded for it: an e2m1 tile holds two values a byte along K."""
    args, _ = _scaled_args(dot)
    fmt = args[3 * position + 2]
    axis = 1 - position
    k = shape[axis]
    if fmt == '"e2m1"' or fmt == "'e2m1'":
        k = f"2 * ({k})" if not k.isidentifier() else f"2 * {k}"
    elif not (fmt.startswith(("'", '"'))):
        k = f"({k}) * (2 if {fmt} == \"e2m1\" else 1)"
    dims = list(shape)
    dims[axis] = k
    return f"_scaled_compute_type({args[2]}, {args[5]})", ", ".join(dims)
