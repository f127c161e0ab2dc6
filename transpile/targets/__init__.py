"""Target families as data: an ordered rule list plus the parameters and helper snippets the rules emit.

``TARGETS`` maps every accepted spelling (names and aliases) to its `Target`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from transpile import language
from transpile.diagnostics import Diagnostic, TranspileError

if TYPE_CHECKING:
    from transpile.analysis.layouts import Term
    from transpile.helpers import Helper
    from transpile.rules.base import Rule, RuleContext


@dataclass(frozen=True)
class Target:
    name: str
    aliases: tuple[str, ...]
    backend: str  # "hip" | "cuda"
    arch: str | int  # GPUTarget arch: "gfx942" | 90
    warp_size: int
    mma: str  # what `tl.dot` becomes, for people
    copy_engine: str  # how tiles reach shared memory, for people
    shared_memory_bytes: int
    min_triton: tuple[int, int]  # the oldest Triton whose Gluon the output must compile under
    rules: tuple[Rule, ...]
    imports: tuple[str, ...]  # import lines the emitted module needs
    # helper name -> what a variant needing it carries (`transpile.helpers`), in emission order
    snippets: dict[str, Helper] = field(repr=False)
    # `tl.dot_scaled`: "" where the target's `_dot_scaled` snippet issues its microscaled MMA, else why the kernel
    # is kept as Triton
    scaled_mma: str = "has no translation of `tl.dot_scaled`"
    # `tl.dot_scaled` without a microscaled MMA: the `_dot_scaled` snippet upcasts both operands in registers (bf16,
    # or fp16 where one is fp16), applies the scales and runs the target's plain MMA, as Triton's own compile
    # decomposes the dot there; its MMA layout is the plain one of that type
    scaled_upcast: bool = False
    # snippets of this target that call others besides those SNIPPET_DEPENDENCIES lists for every target (each
    # brings its own SNIPPET_DEPENDENCIES)
    snippet_needs: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False)
    # AMD: an A operand tile contiguous along its first axis (K^T read as [BK, BT], `offs_k[:, None] + offs_t[None, :]
    # * stride`) is loaded as its transpose and read through a transposed view of its ring slot
    # (`transpile.passes.transposed_keys`); where False, such a loop's A tile stays as written (gfx942: that view's
    # MFMA operand reads measured heavier than Triton's own compile at 128-wide tiles, bench/RESULTS.md)
    transposed_a_operands: bool = False
    # The B scale read once per tile in the Triton kernels a variant keeps (`transpile.passes.tile_scales`): the
    # fewest warps a launch runs for that form to be taken (0: every launch whose groups hold whole tiles). sm90: 8,
    # since with 4 warps the registers it saves let a third CTA onto each SM (64x128 fp8 tiles: 197 -> 168
    # registers), and a grid just over two per SM then ends in a wave of few CTAs: 0.84x the source at 512 CTAs on an
    # H100, 1.00-1.06x elsewhere; with 8 warps 1.09-1.29x (bench/RESULTS.md)
    tile_scale_min_warps: int = 0

    def gpu_target(self):  # noqa: ANN201 - triton.backends.compiler.GPUTarget, imported lazily (slow import)
        from triton.backends.compiler import GPUTarget

        return GPUTarget(self.backend, self.arch, self.warp_size)

    def snippet(self, name: str) -> str:
        if name in self.snippets:
            return self.snippets[name].text()
        text = language.snippet(name)
        if text is None:
            raise KeyError(name)
        return text

    def snippet_order(self, needed: set[str]) -> list[str]:
        """Needed snippets plus what they call, in the target's fixed (dependency) order."""
        closure = set(needed)
        for name in list(needed):
            # (a snippet this target's own needs add brings what it calls: `_dot_scaled` -> `_dot` -> its helpers)
            own_needs = self.snippet_needs.get(name, ())
            calls = [*SNIPPET_DEPENDENCIES.get(name, ()), *own_needs,
                     *(d for extra in own_needs for d in SNIPPET_DEPENDENCIES.get(extra, ()))]
            # (a dependency on a snippet the target does not define is another target's: `float8_via_fp16`)
            closure |= {d for d in calls if d in self.snippets}
            closure |= set(language.HELPER_NEEDS.get(name, ()))
        own = [name for name in self.snippets if name in closure]
        # Language helpers (`tl.argmax`, `tl.sigmoid`, ...) after the target's, callees first, then by name.
        rest = sorted(closure - set(own), key=lambda n: (n not in language.CALLEES, n))
        return [*own, *rest]

    def mma_layout_expr(self, ctx: RuleContext, root: Term) -> str:
        """Declaration value of an MMA layout class: `_mma_layout(M, [N, ...], operand dtype, num_warps)`."""
        dots = root.dots or []
        ms = [d.shape[0] for d in dots if d.shape[0] is not None]
        ns: list[str] = []
        for d in dots:
            if d.shape[1] is not None and d.shape[1] not in ns:
                ns.append(d.shape[1])
        for d in dots:  # (chained dots: the N sizes of every dot of the chain, `RuleContext.mma_joint_ns`)
            ns += [n for n in ctx.mma_joint_ns.get(id(d.node), ()) if n not in ns]
        if any(d.scaled is not None for d in dots) and not self.scaled_upcast:
            # `tl.dot_scaled`: the instructions of the microscaled formats, whatever the operands' storage type
            # (packed fp4 bytes, fp8 as uint8)
            ctx.need("scaled_layouts")
            m = next((d.shape[0] for d in dots if d.shape[0] is not None), "None")
            rows = ", warps_along_m=True" if ctx.mma_warps_along_m else ""
            return f"_scaled_mma_layout({m}, [{', '.join(ns) if ns else 'None'}], gl.num_warps(){rows})"
        dtype = next((_operand_dtype(d) for d in dots if _operand_dtype(d) is not None), None)
        types = {_operand_dtype(d) for d in dots if _operand_dtype(d) is not None}
        # (`gl.float16` beside `q_ptr.dtype.element_ty` is one type in the launches that matter: attention's PV)
        split = _split_by_flag(ctx, dots) if len(types) > 1 else None
        if split is not None:
            # (the dots of each type in their own branch of one constexpr `if`, as an unswitched loop's copies are:
            # one of them runs in any compile, and the layout is chosen for its type when the kernel is compiled)
            dtype, types = split, {split}
        if split is None and len(types) > 1 and "gl.float32" in types:
            # One MMA layout is laid out for one operand type (its instruction's K depth): the layout takes the 16-bit
            # type, and an fp32 dot whose result meets it runs the fp32 instruction in a layout of the same tiles and
            # warps (`_dot`: `_other_depth`, `_with_depth`; an fp32 MFMA of fp16's shape does not exist).
            dtype = next(_operand_dtype(d) for d in dots if _operand_dtype(d) not in (None, "gl.float32"))
        if dtype is None:
            # (operands whose type the source does not spell, `b_q * exp2(b_g)` through a helper it imports: the
            # layout is laid out for 16-bit operands, and `_dot` runs operands of another width in the instruction of
            # their own depth, in a layout of the same tiles and warps: `_other_depth`, `_with_depth`)
            dtype = "gl.float16"
        ctx.need("mma_layout")
        m = ms[0] if ms else "None"
        rows = ", warps_along_m=True" if ctx.mma_warps_along_m else ""
        # (the operand the pipelined dots of the layout compute in registers, where every dot of the layout agrees,
        # or as a compile-time flag decides between copies of a loop: the warps along its axis)
        def side(d) -> str:  # noqa: ANN001 - a dot site
            return str(ctx.mma_computed.get(id(d.node)))

        computed = {side(d) for d in dots}
        if not ctx.mma_warps_along_m and computed != {"None"}:
            split = computed.pop() if len(computed) == 1 else _split_by_flag(ctx, dots, side)
            if split is not None:
                rows = f", computed_operand={split}"
        # the K block, where every dot of the layout has the same one (an fp8 K block shallower than the target's
        # deep instruction takes the plain one)
        ks = {d.a_shape[1] if d.a_shape is not None and len(d.a_shape) == 2 else None for d in dots}
        depth = f", k={ks.pop()}" if len(ks) == 1 and None not in ks and self.backend == "hip" else ""
        return f"_mma_layout({m}, [{', '.join(ns) if ns else 'None'}], {dtype}, gl.num_warps(){rows}{depth})"


def _operand_dtype(site) -> str | None:  # noqa: ANN001 - a dot site
    """The type a dot's MMA reads: its A operand's, or for a `tl.dot_scaled` (upcast, `Target.scaled_upcast`) the
    type its formats are upcast to (fp16 where one is fp16, else bf16)."""
    if site.scaled is None:
        return site.operand_dtype
    formats = [f.evaluated_value if hasattr(f, "evaluated_value") else None for f in (site.scaled[1], site.scaled[3])]
    return "gl.float16" if "fp16" in formats else "gl.bfloat16"


def _split_by_flag(ctx: RuleContext, dots: list, value=None) -> str | None:  # noqa: ANN001 - dot sites, a function
    """`(T if TEST else U)` where the dots of known operand type `T` all run where a compile-time test (of constexpr
    parameters alone: `if CAST_FP32:`) holds and those of `U` all where it fails, else None. The test may be written
    in several `if`s, each copy of a loop unswitched on another flag first (`if EVEN_K:` around `if AB_DTYPE is not
    None:` in each of its branches): the `if`s of one text decide alike. `value`: another text a dot gives (None
    where it gives none) to split so, in place of its operand type."""
    import libcst as cst

    from transpile.cst_utils import ELEMENT_TY, compile_time

    value = value or (lambda d: d.operand_dtype)
    typed = {id(d.node): value(d) for d in dots if value(d) is not None}
    constexprs = set(ctx.function.constexpr_names) | set(ctx.function.heuristics)
    params = {p.name for p in ctx.function.params}
    code = cst.Module([]).code_for_node

    def decided(test: cst.BaseExpression) -> bool:
        """Triton decides `test` when it compiles the kernel: it reads constexprs, literals and the element types of
        pointer parameters (`a_ptr.dtype.element_ty != b_ptr.dtype.element_ty`, a test the unswitch pass hoists)."""
        text = ELEMENT_TY.sub(lambda m: "True" if m.group(1) in params else m.group(0), code(test))
        return compile_time(cst.parse_expression(text), constexprs)

    paths: dict[int, set[tuple[str, bool]]] = {}  # dot -> (test, whether it holds there) of the `if`s around it

    def walk(node: cst.CSTNode, around: frozenset[tuple[str, bool]]) -> None:
        if id(node) in typed:
            paths[id(node)] = set(around)
        if isinstance(node, cst.If) and decided(node.test):
            test = code(node.test)
            walk(node.body, around | {(test, True)})
            if node.orelse is not None:
                walk(node.orelse, around | {(test, False)})
            return
        for child in node.children:
            walk(child, around)

    walk(ctx.function.node, frozenset())
    if set(paths) != set(typed):
        return None
    for test in sorted({t for path in paths.values() for t, _ in path}):
        sides: list[set[str]] = [set(), set()]
        for i, path in paths.items():
            held = {holds for t, holds in path if t == test}
            if len(held) != 1:
                break  # (a dot outside that test's `if`s)
            sides[0 if held.pop() else 1].add(typed[i])
        else:
            if all(len(side) == 1 for side in sides) and sides[0] != sides[1]:
                return f"({sides[0].pop()} if {test} else {sides[1].pop()})"
    return None


# Snippets that call other snippets.
SNIPPET_DEPENDENCIES: dict[str, tuple[str, ...]] = {  # what each snippet calls (closure of one step: list them all)
    "dot": ("mma_k_width", "mma_sync", "register_a_layout", "float8_via_fp16", "f8f6f4", "with_depth", "mma_layout"),
    "with_depth": ("mma_layout", "float8_via_fp16", "f8f6f4"),
    "mma_sync_slots": ("mma_sync",),
    "dot_acc": ("dot", "mma_sync", "acc_dtype", "mma_k_width", "float8_via_fp16", "f8f6f4"),
    "dot_scaled": ("scaled_layouts", "mma_layout", "float8_via_fp16", "f8f6f4"),
    "scaled_layouts": ("mma_layout", "float8_via_fp16", "f8f6f4"),
    "lds_ring": ("mma_k_width", "float8_via_fp16", "f8f6f4"),
    "lds_copy": ("copy_layout",),
    "desc_buffer_copy": ("copy_layout", "desc_tile"),
    "desc_buffer_load": ("desc_tile",),
    "register_copy": ("copy_layout",),
    "buffer_register_copy": ("copy_layout",),
    "mma_layout": ("float8_via_fp16", "f8f6f4"),
    "mma_k_width": ("float8_via_fp16", "f8f6f4"),
    "tma_load": ("tma_aliases",),
    "tma_or_triton": ("config_split", "launch_values", "tma_scratch"),
    "aligned_or_triton": ("config_split", "launch_values"),
    "host_descriptors": ("launch_values", "tma_scratch"),
    "made_on_host": ("host_made", "launch_values"),
    "warp_pipelined_or_triton": ("tma_or_triton", "config_split"),
    "one_wave_or_triton": ("tma_or_triton", "persistent_grid", "config_split"),
    "tma_store": ("tma_aliases",),
    "tma_store_deferred": ("tma_aliases",),
    "ws_wgmma_consumer": ("cta_barrier",),
}


def _registry() -> dict[str, Target]:
    from transpile.targets.amd import GFX942, GFX950, GFX1250
    from transpile.targets.hopper import SM90

    table: dict[str, Target] = {}
    for target in (GFX942, GFX950, GFX1250, SM90):
        for spelling in (target.name, *target.aliases):
            table[spelling] = target
    return table


TARGET_NAMES = ("gfx942", "gfx950", "gfx1250", "sm90")


def get_target(name: str) -> Target:
    table = _registry()
    key = name.strip().lower()
    if key not in table:
        choices = ", ".join(f"{t} ({'/'.join(table[t].aliases)})" if table[t].aliases else t for t in TARGET_NAMES)
        raise TranspileError(Diagnostic("<command line>", 1, 1, "TT004", f"unknown target `{name}`; choose from {choices}"))
    return table[key]


def all_targets() -> list[Target]:
    table = _registry()
    return [table[n] for n in TARGET_NAMES]
