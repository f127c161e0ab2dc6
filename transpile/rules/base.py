"""The rule protocol and the context rules read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import libcst as cst

from transpile.analysis.layouts import LayoutPlan
from transpile.passes.host_descriptors import host_descriptor_names
from transpile.cst_utils import expr, statement  # noqa: F401 - the rules' snippet parsers, re-exported
from transpile.cst_utils import ELEMENT_TY, names_in
from transpile.cst_utils import unparenthesized as bare  # noqa: F401 - re-exported for the rules
from transpile.diagnostics import Diagnostic
from transpile.discover import JitFunction, ModuleFacts, language_name
from transpile.passes.tma_tiles import LdsNeed

if TYPE_CHECKING:
    from transpile.targets import Target


@dataclass(frozen=True)
class Example:
    """A rule's before/after example: translating `before` (a whole module) must produce every line of `after`
    (matched after stripping indentation) for `target`."""

    before: str
    after: tuple[str, ...]
    target: str = "gfx942"


@dataclass(frozen=True)
class Counterexample:
    """A module a rule must leave alone (Fixit's "valid" code, for a rewrite): translating `before` for `target` writes
    none of the lines `absent` (what the rule's rewrite would write, matched inside lines after stripping
    indentation), and, where `code` is given, reports a diagnostic of that code whose message contains `reason` (the
    construct and why, as a user reads it). `gluon_always`: translate as `--gluon-always` does (a kept kernel's loop
    then shows what the rule itself refused)."""

    before: str
    absent: tuple[str, ...]
    code: str = ""
    reason: str = ""
    target: str = "gfx942"
    gluon_always: bool = False


@dataclass
class RuleContext:
    """What the rules of one jit function read, and where they record what the module needs."""

    facts: ModuleFacts
    function: JitFunction
    plan: LayoutPlan
    target: Target
    helpers: set[str]  # module-level helper snippets the emitted code calls (names from the target's snippets)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    num_warps: int | None = None  # set by a rule whose output needs this many warps (a warp-pipelined loop: 8)
    mma_warps_along_m: bool = False  # set by a rule that needs every warp along M in the MMA layout (row reductions)
    # ... and the N sizes of dots whose products feed one another (chained dots): every MMA layout of those dots is
    # chosen for all of them, so that they take one instruction shape and a product reaches the next dot's operand
    # layout inside its warp (two shapes, 16x16 beside 32x32, convert through shared memory with a barrier)
    mma_joint_ns: dict[int, tuple[str, ...]] = field(default_factory=dict)  # id(dot call) -> the N sizes
    # ... and the operand a pipelined dot computes in registers (0: A, 1: B): its MMA layout lays the warps along that
    # operand's axis, so that no two warps compute the same elements (`_mma_layout`'s `computed_operand`)
    mma_computed: dict[int, int] = field(default_factory=dict)  # id(dot call) -> the operand's position
    copy_tiles: dict[str, str] = field(default_factory=dict)  # sm90 cp.async ring: tile shape text -> element type
    # AMD rings of pointer tiles whose copies `copy_operands` lays out (direct to LDS, or through registers): ring
    # variable -> (tile shape text, element type text, rows a lane, the axis along which the tile is contiguous)
    copy_rings: dict[str, tuple[str, str, int, int]] = field(default_factory=dict)
    # ring -> (its tile's base, integers), for tiles whose alignment the kernel tests at run time
    # (`StagePlan.aligned_at_run_time`, `copy_operands`)
    aligned_at_run_time: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    fresh_tiles: dict[str, str] = field(default_factory=dict)  # sm90 cp.async ring: fresh copy -> pointer tile
    # Names a pipeline rule emitted, per loop (id of the source `For`): a second pipelined loop of the function names
    # its constexpr ring depth, rings and counters apart from the first (`pipeline_text.loop_namer`).
    generated: dict[int, set[str]] = field(default_factory=dict)
    gluon_always: bool = False  # --gluon-always: emit every pipeline and translation, even those measured slower
    # sm90: the kernel's pointer tiles are read through TMA descriptors (`transpile.passes.tma_tiles`), so its
    # launcher runs the Gluon kernel only for launches whose loaded tiles are 16- or 8-bit (the others: the source)
    descriptor_launches: bool = False
    pipelined: list[cst.For] = field(default_factory=list)  # loops (nodes of the source tree) a pipeline rule rewrote
    # The schedule each of those loops was emitted from, in the same order (an AMD `StagePlan`, an sm90 `Sm90Ring`):
    # what `transpile explain --timeline` draws.
    schedules: list[object] = field(default_factory=list)
    unprofitable: dict[cst.For, str] = field(default_factory=dict)  # loops left alone by the profitability policy
    # A construct this target has no Gluon form of, where the source kernel is what the target runs best (sm90's
    # `tl.dot_scaled`: no microscaled MMA): (node, reason); the kernel is kept as Triton with the reason (TT041)
    keep: tuple[cst.CSTNode, str] | None = None
    # ... and one whose reason comes after those of the kernel's loops (`keep_kernel_after_loops`, `policy.decide`)
    keep_after_loops: tuple[cst.CSTNode, str] | None = None
    # Module-level functions a rule emits right before this function (a warp-specialised loop's loader partition).
    module_functions: list[str] = field(default_factory=list)
    # The operand tile shapes (constexpr names, A then B) of a warp-specialised ring: its tile becomes a config.
    ws_tiles: tuple[list[str], list[str]] | None = None
    # sm90: one of the kernel's autotune configs (its own or one added) compiles the warp-specialised ring
    ws_config: bool = False
    # sm90: the persistent form of a warp-specialised ring (`hopper_persistent.PersistentForm`), when the kernel and
    # its launches allow it; its launches then go through `_persistent_grid` (engine).
    persistent: object | None = None
    # the statements `LayoutDeclarations` put at the top of the body: (index of the first, how many)
    declared: tuple[int, int] = (0, 0)
    # sm90: the (rows, keys) tile size names of an attention ring on masked scores: its tile becomes a config.
    attention_tile: tuple[str, str] | None = None
    # sm90: what the attention ring leaves for the warp-specialised attention (`hopper_attention.WSLoop`)
    ws_attention: object | None = None
    # sm90: a constexpr flag only with which the kernel's Gluon form pays: the variant keeps the source kernel for
    # launches without it, behind the launcher (`_TMAOrTriton`, engine).
    launch_flag: str | None = None
    # compile-time tests under which the kernel's loop is not pipelined, with the parameters they read and their
    # defaults: launches for which one holds run the source kernel (`Dispatch.source_when`)
    launch_source_when: tuple[tuple[str, tuple[tuple[str, str | None], ...]], ...] = ()
    # sm90: the kernel's Gluon form runs only the launches a launcher lets through (the flag above, tensors with
    # 16-byte aligned rows); the variant keeps the source kernel for the others.
    launch_checked: bool = False
    # ... and the int parameters those launches have as multiples of 16 (`Dispatch.divisible`) or as 1 (`unit`)
    launch_divisible: tuple[str, ...] = ()
    launch_unit: tuple[str, ...] = ()
    # ... and the constexpr parameters those launches set to at least a value (`Dispatch.at_least`)
    launch_at_least: tuple[tuple[str, int], ...] = ()
    # ... and (grid axis, count): launches with fewer programs along the axis run the source kernel
    launch_grid_at_least: tuple[int, int] | None = None
    # ... and, with a flag, the constexpr parameters and values with which launches without it run the Gluon kernel
    launch_unflagged_at_least: tuple[tuple[str, int], ...] = ()
    # ... and (constexpr parameter, value, warps): launches with that value run the Gluon kernel at those warps
    launch_retile: tuple[str, int, int] | None = None
    launch_one_wave: bool = False  # `Dispatch.one_wave`: the Gluon kernel runs only grids of one wave
    # the Gluon kernel reads tiles through 32-bit buffer offsets: launches with a tensor spanning 2 GB or more run
    # the source kernel (`Dispatch.small`)
    launch_small: bool = False
    # AMD: the Gluon kernel runs with this many warps only (a warp-pipelined loop): other launches of a kernel without
    # autotune configs run the source kernel (`Dispatch.warps`)
    launch_warps: int | None = None
    # AMD: the Gluon kernel compiles with its accumulators in VGPRs only (`Dispatch.no_agprs`)
    launch_no_agprs: bool = False
    # AMD: launches with tensors of these element types run the source kernel (`Dispatch.slow_dtypes`)
    launch_slow_dtypes: tuple[str, ...] = ()
    # AMD: the LDS a launch needs for the fewest slots of each ring (`Dispatch.lds`)
    launch_lds: LdsNeed | None = None
    # Autotune configs a rule added to this kernel's table (described for the variant's header).
    added_configs: list[str] = field(default_factory=list)
    # `HoistConversions`' plan for this function, made once (`hoist._plan`): the converted names -> (hoisted
    # variable, layout), and the hoisted definitions
    hoisted: tuple[dict, dict] | None = None

    @property
    def source(self):  # noqa: ANN201 - SourceFile; avoid an import cycle in annotations
        return self.facts.source

    def language(self, node: cst.CSTNode) -> str | None:
        """``tl.math.exp`` -> ``math.exp`` for a node of the source tree, else None."""
        return language_name(self.source.qualified_name(node))

    def layout(self, node: cst.CSTNode) -> str:
        return self.plan.layout_expr(self.plan.creations[node])

    def refuse(self, node: cst.CSTNode, code: str, message: str) -> None:
        self.diagnostics.append(self.source.diagnostic(node, code, message))

    def keep_kernel_after_loops(self, node: cst.CSTNode, construct: str, reason: str) -> None:
        """`keep_kernel` for a construct whose reason comes after the loops' own (a kernel whose dot loop no rule
        pipelines, or only a form measured slower would, says so first): `RuleContext.keep_after_loops`."""
        if self.keep_after_loops is None:
            self.keep_after_loops = (node, f"{construct} at line {self.source.position(node)[0]}: {reason}")

    def keep_kernel(self, node: cst.CSTNode, construct: str, reason: str) -> None:
        """Keep the function as Triton (TT041, `RuleContext.keep`) for `construct` at `node`: the first such call
        gives the reason, "`construct` at line N: reason"."""
        if self.keep is None:
            self.keep = (node, f"{construct} at line {self.source.position(node)[0]}: {reason}")

    def need(self, helper: str) -> None:
        self.helpers.add(helper)

    def pipelined_loop(self, original: cst.For, schedule: object) -> None:
        """A pipeline rule rewrote `original` (the loop of the source tree) from `schedule`: the kernel is pipelined
        there."""
        self.pipelined.append(original)
        self.schedules.append(schedule)

    def slower_than_triton(self, original: cst.For, copy_engine: str, construct: str = "") -> bool:
        """The profitability policy: True when a GEMM ring of `copy_engine` on this target was measured slower than
        Triton's own pipeliner (UNPROFITABLE_RINGS) and --gluon-always is not given. The loop is then left alone
        and its kernel kept as Triton, with the measurement as the reason (`construct`: what in this loop makes it
        that form, where the reason names one)."""
        reason = UNPROFITABLE_RINGS.get((self.target.name, copy_engine))
        if self.target.name == "sm90" and host_descriptor_names(self.function):
            # (its descriptors made in the kernel from the host's parts: `transpile.passes.host_descriptors`)
            reason = UNPROFITABLE_RINGS[("sm90", "host descriptors")]
        if reason is None or self.gluon_always:
            return False
        self.unprofitable[original] = reason.replace("{construct}", f"{construct}; " if construct else "")
        return True


#: Pipelines measured slower than the loop Triton's own compiler pipelines, by (target, copy engine of a GEMM ring).
#: By default such a loop is not rewritten: its kernel is kept as Triton (TT041). `--gluon-always` emits the ring.
#: The measurements are in bench/RESULTS.md ("Profitability"); keyed on the copy engine, never on kernel names.
UNPROFITABLE_GFX1250_COMPUTED = (
    "a dot operand is computed from a loaded tile (dequantised, cast), and on gfx1250 that ring's hot loop "
    "measured 1.21-1.82x Triton's own non-MFMA instructions per WMMA (int8 weights scaled to fp16, 64x64x64 to "
    "256x256x32 with 8 warps, the computation in either stage; GPTQ's unpacking 0.83-2.09x with every warp along "
    "N): bench/RESULTS.md")
UNPROFITABLE_RINGS: dict[tuple[str, str], str] = {
    ("sm90", "host descriptors"): (
        "{construct}its tensor descriptors are the host's (`TensorDescriptor` arguments), which the Gluon kernel makes "
        "in the kernel from their parts: on an H200 the TMA ring ran the host-descriptor GEMM fixture at 1.07x "
        "Triton 3.6's own compile at 4096^3, but each launch costs the host 15-25 us more (a descriptor scratch "
        "buffer, the parts passed as 15 more arguments), 0.57-0.80x where launches are host-bound (512^3 to "
        "2048^3): bench/RESULTS.md"),
    ("sm90", "cp.async, scaled dot"): (
        "{construct}the cp.async ring that takes it (the packed tiles copied, both operands upcast in registers as "
        "Triton's own compile decomposes the dot, B staged for the wgmma and A read from registers) ran the MX GEMM "
        "fixture on an H200 at 0.89-0.94x Triton 3.6's own compile for e2m1 operands and 0.97-1.04x for e4m3, from "
        "64 to 8192 rows (bench/RESULTS.md: Microscaled GEMMs)"),
    ("sm90", "cp.async"): (
        "only the cp.async pointer ring would pipeline it, and on an H100 that ring ran GEMMs at 0.69x-0.96x the "
        "speed of Triton 3.6's own pipeliner, which builds the same ring with better occupancy (on an H200 0.81x "
        "with B read transposed, 0.92x for a gated GEMM's two products): bench/RESULTS.md"),
    ("sm90", "TMA ring, scaled product"): (
        "the dot's product is scaled before it is added to the accumulator (`acc += tl.dot(a, b) * s`, a block-scaled "
        "GEMM): the TMA ring that takes it (each step's wgmma from zero, waited for, then scaled and added) ran "
        "lightllm's block-scaled fp8 GEMM on an H200 at 0.95-1.06x its source from 128 rows with 8 warps and "
        "128x128 tiles, 0.51-0.99x with 4 warps and 64x128, 0.47-0.58x at 64 rows, its B scales loaded per column; "
        "a warp-specialised form and one that scales a product while the next wgmma runs were no faster "
        "(bench/RESULTS.md; where the B scales hold one value per tile, the next entry)"),
    ("sm90", "TMA ring, one scale per tile"): (
        "{construct}the dot's product is scaled by a B scale that holds one value per tile where the groups hold "
        "whole tiles (`offs_n // group_n`): Triton's own compile of the loop with that scale read once per tile, the "
        "form the kept kernel takes (TT047), ran the block-scaled fp8 linear fixture on an H100 at 1.18-1.29x its "
        "source from 256 to 8192 rows with 8 warps and 128x128x128 tiles, where the warp-specialised TMA ring that "
        "takes the loop ran 1.19-1.21x (0.99-1.07x the ring; an earlier run, 1.06-1.22x the single-partition ring and "
        "1.00-1.18x the warp-specialised one: bench/RESULTS.md)"),
    ("sm90", "cp.async, cast operands"): (
        "its dot operands are computed from their tiles by a cast alone to a type the launch passes "
        "(`a = a_tile.to(dot_dtype)`): the ring that stages "
        "such operands for the wgmma, faster than Triton's own only for grids of one wave where the computation "
        "dequantises, ran suite_chunk_scores (operands cast to the dot's type) on an H100 at 0.99-1.01x Triton 3.6's "
        "own compile at the grids it takes, while its launcher's checks cost the host about 20 us a call (0.51x "
        "at a host-bound launch of 8 x 16384 positions): bench/RESULTS.md"),
    ("sm90", "cp.async in order, fresh addresses"): (
        "{construct}the cp.async ring that pipelines its loop in order copies such tiles in the layouts the "
        "translation gives their addresses (4 bytes a copy where the dot's layout holds 2 elements a thread), and "
        "ran suite_chunk_products (a product made afresh each iteration from such a tile, and stored) on an H200 at "
        "0.44-0.56x Triton 3.6's own pipeliner (bench/RESULTS.md: Attention's backward)"),
    ("sm90", "cp.async, address form"): (
        "{construct}a pointer-tile GEMM, which Triton 3.6's own pipeliner builds as the tool's cp.async ring would; "
        "where that ring takes such loops (16-bit operands) it ran GEMMs at 0.69x-0.96x the speed of Triton's own "
        "on an H100 (bench/RESULTS.md), so this one stays as Triton pipelines it"),
    ("sm90", "cp.async attention"): (
        "only the cp.async attention ring would pipeline it, and on an H100 that ring ran flash attention no faster "
        "than Triton 3.6's own pipeliner where it cannot leave out a causal mask on most tiles (medians of six runs "
        "0.97-0.98x for full attention and causal d128, 1.04x for causal d64; 0.74x in a kernel with several dot "
        "loops, which fills and drains the ring in each): bench/RESULTS.md"),
    ("sm90", "cp.async attention, iteration guard"): (
        "only the cp.async attention ring would pipeline it, running the iteration's work under its run-time test "
        "(an iteration guard, `if kbid:`) with every iteration's copies masked by that iteration's test, and on an "
        "H100 that ring ran the fixture suite_skip_block_attention at 0.72x the source where 30% of the key blocks are "
        "read (8192 tokens, d128), 1.00x at 512 tokens and 1.23x where every block is read (4096 tokens, d64): the "
        "copies of skipped blocks and the ring's waits cost what the skipped work saves (bench/RESULTS.md: Iteration "
        "guards)"),
    ("sm90", "cp.async attention, window mask"): (
        "only the cp.async attention ring would pipeline it, and where the score mask bounds keys from both sides "
        "(a sliding window and causal) few key blocks can leave it out: 0.89x (head dim 64) and 0.93x (128) of "
        "Triton 3.6's own pipeliner on an H100 (bench/RESULTS.md: Profitability)"),
    ("sm90", "cp.async attention, fixed tile"): (
        "only the cp.async attention ring would pipeline it, and at a tile the kernel fixes (no autotune table to "
        "add a wider one to) that ring ran causal attention at head dimension 64 at 0.82-0.91x Triton 3.6's own "
        "pipeliner in 6 of 15 kernel styles on an H100 (1.07-1.45x at 128); its head dimension here is not a "
        "constexpr parameter the launch could be dispatched on (bench/RESULTS.md: Profitability)"),
    # AMD: judged by the machine code (no AMD GPU here): the hot loop's non-MFMA instructions per 16x16x32 MFMA of
    # work against Triton 3.9's own compile of the source at the same constexprs, warps and aligned-launch
    # specialisation (`transpile verify --isa`, `scripts/amd_isa_table.py`; bench/RESULTS.md: AMD hot loops).
    **{(target, "register-staged ring"): (
        "{construct}no launch proves its tiles aligned for 16-byte copies (a tile addressed from pointers the kernel "
        "loads, or along its contiguous axis from loaded offsets, read transposed from memory, or with rows a run-time "
        "integer divides apart, `K // 2`): they would be staged through registers by plain "
        "loads, and that ring's hot loop measured heavier than Triton's own in 46 of 48 fixture kernels and configs "
        "(1.2-5.9x the non-MFMA instructions per MFMA; each step waits for its global loads before storing them; "
        "loaded a step ahead instead, an element a lane, the tiles held in registers spilled 6-1,865 VGPRs): "
        "bench/RESULTS.md")
       for target in ("gfx942", "gfx950", "gfx1250")},
    # A GEMM loop whose work runs under a run-time test (`if flag:` around its loads and dot, an iteration guard:
    # docs/PIPELINES.md), its copies masked by the test of their own iteration (the attention form of it passes):
    **{(target, f"iteration-guard ring, {copies}"): (
        "its work runs under a run-time test (an iteration guard), which the ring would run with every iteration's "
        "copies masked by that iteration's test, and that ring's hot loop measured 1.14x (gfx950), 1.08x (gfx942) and "
        "0.92x (gfx1250) Triton's own non-MFMA instructions per loop iteration on a GEMM of that form (128x128x64, 8 "
        "warps, tests/test_iteration_guards.py): not under the 0.8x a machine-code measure must show before a form "
        "is emitted without the GPU to time it (bench/RESULTS.md)")
       for target in ("gfx942", "gfx950", "gfx1250") for copies in ("buffer-load ring", "direct-to-LDS ring")},
    # ("gfx942", "buffer-load ring") and ("gfx1250", "direct-to-LDS ring") are not listed: 16-byte buffer loads into
    # registers, B stored K-major, measured 0.42-0.96x (gfx942), gfx1250's direct-to-LDS copies of pointer tiles
    # 0.32-0.51x, Triton's non-MFMA instructions per MFMA in every fixture kernel and config whose source fits the LDS,
    # but for the element types their launchers give the source kernel (`SLOW_DTYPES` in
    # rules/amd_warp_pipeline.py; bench/RESULTS.md).
    # ("gfx1250", "computed-operand ring") is not listed: with every warp along the computed operand's axis it
    # measured 0.25-0.62x (`COMPUTED_AXIS_LAUNCHES` in rules/amd_warp_pipeline.py: the launches it runs)
    **{("gfx1250", form): UNPROFITABLE_GFX1250_COMPUTED
       for form in ("computed-operand ring, K-indexed vector",
                    "computed-operand ring, loaded factor", "computed-operand ring, both operands",
                    "computed-operand ring, guarded dot")},
    # A computed operand's tile copied through registers (read transposed, or gathered along its contiguous axis):
    # loaded in a copy layout along its contiguous axis, stored into its slot, the loop's other tiles as translated.
    **{(target, f"computed-operand ring{form}, register-staged ring"): (
        "a dot operand is computed from a tile no launch copies 16 bytes a lane ({construct}read transposed from "
        "memory, or gathered along its contiguous axis), which the ring would load through registers and store into "
        "its slot, the loop's other tiles with it: that ring measured 1.11x (gfx950, whose Triton copies such tiles "
        "direct to LDS) and 0.95-1.87x (gfx942) Triton's own non-MFMA instructions per loop iteration on the fixture "
        "fla_gated_state (keys and gates read as [BK, BT], 8 warps), and on gfx1250 0.49-0.69x there but 1.11x and "
        "1.74x on FLA's `chunk_rwkv6_bwd_kernel_dh` (BK 32 and 64): bench/RESULTS.md")
       for target in ("gfx942", "gfx950", "gfx1250")
       for form in ("", ", guarded dot", ", K-indexed vector", ", loaded factor", ", both operands")},
    **{(target, "computed-operand ring, guarded dot"): (
        "a dot accumulated under a test of scalars (`if i_k >= 0: b_o += tl.dot(b_qg, ...)`) reads an operand computed "
        "from a loaded tile: Triton's own compile does not software-pipeline a loop whose dot sits under an `if`, and "
        "its loop computes the operand in a blocked layout and moves it through LDS in few instructions, where the "
        "ring computes it in the MMA operand's layout, which repeats the work for every warp along N: that ring measured "
        "2.03-2.69x on gfx950 (FLA's `chunk_gla_fwd_kernel_o` at 64x64x64 for both `STATE_V_FIRST` values, its form at "
        "64 and 128 rows) and 3.0x on gfx942 Triton's own non-MFMA instructions per loop iteration (8 warps): "
        "bench/RESULTS.md")
       for target in ("gfx942", "gfx950")},
    ("gfx942", "computed-operand ring, both operands"): (
        "both operands of a dot are computed from their loaded tiles (`a = a.to(T)`, `b = b.to(T)`), cast each step in "
        "the MMA operand layouts, and on gfx942 that ring measured 0.62-1.31x Triton's own non-MFMA instructions per "
        "loop iteration, heavier at every tile size for some types (fp32 tiles cast to fp16 1.14x at 64x64x64, 16-bit "
        "casts 1.00-1.21x from 128x128, fp16 cast to fp8 1.31x; 8 warps): bench/RESULTS.md"),
    **{(target, "computed-operand ring, loaded factor"): (
        "a dot operand is computed from a loaded tile and a value the computation loads itself each iteration "
        "(`a = a * tl.load(s_ptr + k)`), a load the stage running the MMA waits for: that ring measured 1.24x (gfx950) "
        "and 1.30x (gfx942) Triton's own non-MFMA instructions per loop iteration (128x128x64, fp16, 8 warps): "
        "bench/RESULTS.md")
       for target in ("gfx942", "gfx950")},
    # ("gfx942", "computed-operand ring, K-indexed vector") is not listed: with every warp along N it measured
    # 0.63-0.75x (`COMPUTED_AXIS_LAUNCHES` in rules/amd_warp_pipeline.py: the launches it runs)
    ("gfx950", "computed-operand ring, K-indexed vector"): (
        "a dot operand is computed from a loaded tile with a vector laid along K ({construct}GPTQ's `shifter[:, "
        "None]`: packed 4-bit weights unpacked by per-row shifts), which the MMA operand layout makes per-element "
        "arithmetic: that ring measured 0.73-0.84x Triton's own non-MFMA instructions per loop iteration with every "
        "warp along N (128 columns: the fixture suite_w4a16_gptq and a public GPTQ GEMM, 64x128x64 to 256x128x32, "
        "8 warps), 1.55x at 64 columns, whose compile unpacks in a blocked layout: not under the 0.8x a machine-code "
        "measure must show at every tile: bench/RESULTS.md"),
    **{(target, "attention, register-staged ring"): (
        "its K or V tile cannot be copied 16 bytes a lane (addressed from loaded pointers, or K read as [HEAD_DIM, "
        "BLOCK_N] through addresses that are not the transposed tile's), so the warp-pipelined attention ring would "
        "stage it through registers, and that ring measured 0.77-1.76x (gfx950), 0.59-1.51x (gfx942) and "
        "1.32-1.52x (gfx1250) Triton's own non-MFMA instructions per loop iteration on the fixture fx_attention_kt "
        "(K staged so before it was read transposed): bench/RESULTS.md")
       for target in ("gfx942", "gfx950", "gfx1250")},
    **{("gfx1250", f"scaled-product ring, {copies}"): (
        "the dot's product is scaled before it is added to the accumulator (`acc += tl.dot(a, b) * s`, a block-scaled "
        "GEMM), and on gfx1250 that ring's hot loop measured 0.78-1.14x Triton's own non-MFMA instructions per loop "
        "iteration (the fixture suite_fp8_blockscale and lightllm's block-scaled fp8 GEMM, 64x128x128 and 128x128x128 "
        "with 8 warps; the scale vectors loaded nearly twice as often as in the source's WMMA layout): "
        "bench/RESULTS.md")
       for copies in ("direct-to-LDS ring", "tdm ring")},
    # gfx1250's attention ring is emitted where its steady state leaves out score masks the source evaluates every
    # iteration (0.55-0.74x on six fixtures, no spills; "gfx1250's attention ring" in bench/RESULTS.md); not where
    # there is no such mask, nor for latent attention:
    ("gfx1250", "attention, no mask left out, direct-to-LDS ring"): (
        "only the warp-pipelined attention ring would pipeline it, its steady state would leave out no score mask "
        "selected through `tl.where` (the source evaluates none each iteration, or none the ring can prove holds on "
        "its leading iterations; a mask added to the scores leaves its add), and on gfx1250 such a ring's hot loop "
        "measured 0.80-1.11x Triton's own non-MFMA instructions per loop iteration (a tutorial-style loop of the "
        "blocks before the diagonal, a pointer a helper moves, a sequence-end mask added to the scores; 128x64 "
        "tiles, 8 warps): not under the 0.8x a machine-code measure must show before a form is emitted without the "
        "GPU to time it (bench/RESULTS.md)"),
    ("gfx1250", "attention, copies reading loaded values, direct-to-LDS ring"): (
        "only the warp-pipelined attention ring would pipeline it, the addresses or masks of its K and V copies read "
        "values the loop loads each iteration (or a helper it calls may: a paged KV cache's block table), and on "
        "gfx1250 such a ring's hot loop measured 0.84x Triton's own non-MFMA instructions per loop iteration "
        "(suite_paged_prefill, 128x64 tiles, 8 warps; the address work of the gathered copies outweighs the masks "
        "it leaves out), 0.90x with the block table loaded in a helper, 0.92x where a flag loaded each iteration "
        "skips key blocks (suite_skip_block_attention, d64, at 4 waves a SIMD against the source's 7): not under the 0.8x a machine-code measure "
        "must show before a form is emitted without the GPU to time it (bench/RESULTS.md)"),
    ("gfx1250", "attention, more than two dots, direct-to-LDS ring"): (
        "only the warp-pipelined attention ring would pipeline it, its loop runs more than two dots, and on gfx1250 "
        "the one such loop measured (latent attention, its scores summed with a rotary product) spilled 40 VGPRs "
        "at 192-wide keys where Triton's own compile spills none (fx_mla_prefill, 128x64 tiles, 8 warps; "
        "bench/RESULTS.md)"),
    # Latent attention over a paged KV cache (scores summed from a rotary product, K and V rows gathered through an
    # index the loop loads): on gfx950 the ring spilled where Triton's compile does not; on gfx1250 both of the
    # entries above hold.
    ("gfx950", "attention, more than two dots, copies reading loaded values, direct-to-LDS ring"): (
        "only the warp-pipelined attention ring would pipeline it, its loop runs more than two dots (scores summed "
        "with a rotary product) and the addresses of its K and V copies read values the loop loads (a paged KV "
        "cache), and on gfx950 such a ring's hot loop spilled 97 VGPRs where Triton's own compile spills none "
        "(aiter's extend attention at 192-wide keys, 128 + 64, 128x64 tiles, 8 warps; 0.52x Triton's non-MFMA "
        "instructions per loop iteration, none spilled, without the rotary part: bench/RESULTS.md)"),
    ("gfx1250", "attention, more than two dots, copies reading loaded values, direct-to-LDS ring"): (
        "only the warp-pipelined attention ring would pipeline it, its loop runs more than two dots, and on gfx1250 "
        "the one such loop measured (latent attention, its scores summed with a rotary product) spilled 40 VGPRs "
        "at 192-wide keys where Triton's own compile spills none (fx_mla_prefill, 128x64 tiles, 8 warps); the "
        "addresses of its K and V copies read values the loop loads besides (a paged KV cache), a ring that "
        "measured 0.84x Triton's own non-MFMA instructions per loop iteration on gfx1250 (suite_paged_prefill): "
        "bench/RESULTS.md"),
    # A loop whose body holds an op that needs a CTA-wide barrier (a reduction, a layout conversion, a transpose) that
    # would fall inside the `mma` stage: pipelined over the same ring by one warp group (`StagePlan.groups`), every
    # wave running each step in order at the kernel's own warps.
    **{(target, f"one warp group, {kind}, {copies}"): (
        "{construct}it needs a CTA-wide barrier inside the step that runs the MMA, so the ring would be run by one "
        "warp group (every wave in step, no warp pipeline), and that form's hot loop measured "
        + ("1.29-1.99x Triton's own non-MFMA instructions per loop iteration on gfx950 (aiter's four paged MQA-logits "
           "kernels, K's scales transposed each iteration), 3.17x with 384 VGPR spills (aiter's preshuffled "
           "block-scale GEMM, its weight tile reshaped and permuted each iteration)" if kind == "layout conversions"
           else "0.79x and 0.92x Triton's own non-MFMA instructions per loop iteration on gfx950, 0.65x on gfx1250, "
           "0.71x and 0.97x with 1 and 18 VGPR spills on gfx942 (a GEMM that subtracts its accumulator's row maxima "
           "each iteration; an RMS norm fused into a GEMM, summing the squares of its A tile: 128x128x64, bf16, 4 "
           "warps)")
        + ": not under the 0.8x, free of spills, that a machine-code measure must show before a form is emitted "
        "without the GPU to time it (bench/RESULTS.md)")
       for target in ("gfx942", "gfx950", "gfx1250") for kind in ("reductions", "layout conversions")
       for copies in ("register-staged ring", "buffer-load ring", "direct-to-LDS ring")},
    # A GEMM loop whose row reductions (of its accumulator, of its A tiles) stay inside a warp with every warp along M:
    # warp-pipelined so, launches with fewer rows than 16 a warp, or (gfx950, gfx942) fewer than 64 columns
    # (ROW_FORM_MIN_COLUMNS in rules/amd_warp_pipeline.py), running the source kernel. gfx942 (0.48-0.81x from 64
    # columns, no spills) and gfx1250 (0.58-0.69x) are not listed.
    **{("gfx950", f"row-reduction ring, {copies}"): (
        "{construct}a row reduction each iteration stays inside a warp only with every warp along M, and the "
        "warp-pipelined ring so laid out measured 0.76x, 0.77x and 0.84x Triton's own non-MFMA instructions per loop "
        "iteration on gfx950 (GEMMs that subtract their accumulator's row maxima, 128x64x64 and 128x128x64, and one "
        "that sums its A tile's squares, 128x128x64; bf16, 8 warps): not under the 0.8x a machine-code measure must "
        "show in every case before a form is emitted without the GPU to time it (bench/RESULTS.md)")
       for copies in ("register-staged ring", "buffer-load ring", "direct-to-LDS ring")},
    # ("gfx950", "attention, direct-to-LDS ring") and ("gfx942", "attention, buffer-load ring") are not listed: the
    # attention loop warp-pipelined as a GEMM loop of two dot chains (K and V rings copied as the GEMM rings are, all
    # warps along M) measured 0.53-0.72x (gfx950) and 0.44-0.73x (gfx942) Triton's own non-MFMA instructions per loop
    # iteration on every attention fixture whose tile gives each of 8 warps 16 rows; launches and autotune configs
    # with fewer rows run the source kernel (bench/RESULTS.md).
    # A loop of chained dots (`DotChain.chained`: attention's backward dK/dV, products reaching the next dot in
    # registers, all warps along M): suite_attention_bwd (BLOCK_M x BLOCK_N x HEAD_DIM 16x128x64 / 32x128x64 /
    # 64x128x64 / 32x128x128, 8 warps) measured 0.82 / 0.57 / 0.50 / 0.45x (gfx950, emitted; no spills where the
    # source has none, 0 / 12 where it has 48 / 46) Triton's own non-MFMA instructions per loop iteration.
    ("gfx942", "chained-dot ring, buffer-load ring"): (
        "its dots read earlier dots' products of the iteration (attention's backward), and on gfx942 that ring "
        "measured 0.70-0.99x Triton's own non-MFMA instructions per loop iteration and spilled where Triton's compile "
        "spills less (suite_attention_bwd, 16x128x64 to 64x128x64 tiles, 8 warps: 4 and 305 VGPR spills against 0 "
        "and 20): bench/RESULTS.md"),
    ("gfx1250", "chained-dot ring, direct-to-LDS ring"): (
        "its dots read earlier dots' products of the iteration (attention's backward), and on gfx1250 that ring "
        "measured 0.91-1.08x Triton's own non-MFMA instructions per loop iteration (suite_attention_bwd, 16x128x64 "
        "to 64x128x64 tiles, 8 warps): under the 0.8x a machine-code measure must show before a form is emitted "
        "without the GPU to time it (bench/RESULTS.md)"),
    # A loop whose dots make their products afresh each iteration and store them (`DotChain.fresh`: chunked
    # linear-attention kernels' tiles of the output): suite_chunk_products at 32x64 / 64x64 / 64x128 / 128x64 (8 warps)
    # measured 0.54-0.84x (gfx950, emitted), 1.10-1.51x but 0.60x at 128x64 (gfx942) and 0.57-0.92x (gfx1250) Triton's
    # own non-MFMA instructions per loop iteration (bench/RESULTS.md).
    **{(target, f"fresh-product ring, {copies}"): (
        f"its dots make their products afresh each iteration and the loop stores them, and on {target} that ring "
        f"measured {figures} Triton's own non-MFMA instructions per loop iteration (suite_chunk_products, 32x64 to "
        f"128x64 tiles, 8 warps){margin}: bench/RESULTS.md")
       for target, copies, figures, margin in (
           ("gfx942", "buffer-load ring", "1.10-1.51x (0.60x at 128x64)", ""),
           ("gfx1250", "direct-to-LDS ring", "0.57-0.92x",
            ": not under the 0.8x a machine-code measure must show in every config before a form is emitted without "
            "the GPU to time it"))},
    ("gfx1250", "tdm ring"): (
        "its descriptor tiles would go by TDM copies into a warp-pipelined ring, whose hot loop measured 0.89-0.98x "
        "Triton's own non-MFMA instructions per MFMA in the 8 fixture kernels and configs: under the 0.8x a "
        "machine-code measure must show before a form is emitted without the GPU to time it (bench/RESULTS.md)"),
    # ("gfx950", direct-to-LDS pointer tiles) is not listed: its rings measured 0.55-0.80x Triton's non-MFMA
    # instructions per MFMA in every fixture kernel and config (bench/RESULTS.md).
    # ("sm90", "cp.async attention, causal mask") is not listed: the ring of a one-loop kernel that leaves out a
    # causal score mask on the tiles where every score passes it (`transpile.analysis.uniform_mask`) ran causal
    # attention at 1.04-1.24x on an H100 (bench/RESULTS.md: sm90: attention).
}


class Rule:
    """Base class. Subclasses set the class attributes and implement the ``leave_*`` hooks they need."""

    name: ClassVar[str] = ""
    matches: ClassVar[str] = ""
    emits: ClassVar[str] = ""
    examples: ClassVar[tuple[Example, ...]] = ()
    # Modules the rule must not rewrite (a loop of another form, a construct it refuses), with the reason it gives
    counterexamples: ClassVar[tuple[Counterexample, ...]] = ()

    def leave_Call(self, ctx: RuleContext, original: cst.Call, updated: cst.BaseExpression) -> cst.BaseExpression:
        return updated

    def leave_Attribute(
        self, ctx: RuleContext, original: cst.Attribute, updated: cst.BaseExpression
    ) -> cst.BaseExpression:
        return updated

    def leave_Name(self, ctx: RuleContext, original: cst.Name, updated: cst.BaseExpression) -> cst.BaseExpression:
        return updated

    def leave_For(self, ctx: RuleContext, original: cst.For, updated: cst.For) -> cst.BaseStatement:
        return updated

    def leave_SimpleStatementLine(
        self, ctx: RuleContext, original: cst.SimpleStatementLine, updated: cst.BaseStatement
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        return updated

    def leave_FunctionDef(self, ctx: RuleContext, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        return updated


def call(func: str, *args: cst.BaseExpression | str, **kwargs: cst.BaseExpression | str) -> cst.Call:
    """Build ``func(args..., key=value...)`` from nodes or source text."""

    def node(value: cst.BaseExpression | str) -> cst.BaseExpression:
        return expr(value) if isinstance(value, str) else value

    arguments = [cst.Arg(node(a)) for a in args]
    arguments += [
        cst.Arg(node(v), keyword=cst.Name(k), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
        for k, v in kwargs.items()
    ]
    return cst.Call(func=expr(func), args=arguments)


def with_keyword(node: cst.Call, key: str, value: cst.BaseExpression | str) -> cst.Call:
    """`node` with keyword argument `key` set to `value` (replaced when present, else appended)."""
    value_node = expr(value) if isinstance(value, str) else value
    args = list(node.args)
    for i, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == key:
            args[i] = arg.with_changes(value=value_node)
            return node.with_changes(args=args)
    if args:
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    args.append(
        cst.Arg(
            value_node,
            keyword=cst.Name(key),
            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
        )
    )
    return node.with_changes(args=args)


def without_keywords(node: cst.Call, keys: set[str]) -> cst.Call:
    args = [a for a in node.args if a.keyword is None or a.keyword.value not in keys]
    if args:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return node.with_changes(args=args)


def positional_or_keyword(node: cst.Call, index: int, key: str) -> cst.Arg | None:
    positional = [a for a in node.args if a.keyword is None and not a.star]
    for arg in node.args:
        if arg.keyword is not None and arg.keyword.value == key:
            return arg
    return positional[index] if index < len(positional) else None


#: The launcher's test (`RuleContext.launch_source_when`) for launches and autotune configs of fewer than 4 warps, which
#: a wgmma cannot run on (a warpgroup is 4 warps): they run the source kernel.
WARPGROUP_TEST = ("num_warps < 4", (("num_warps", "4"),))


def evaluate(text: str, values: dict[str, object]) -> object | None:
    """The value of the source text `text` (a constexpr expression: `BLOCK_M < 128`, `BLOCK_N * HEAD_DIM`) at these
    constexpr `values`, or None where it reads another name or fails."""
    try:
        return eval(compile(text, "<constexpr>", "eval"), {"__builtins__": {}}, dict(values))  # noqa: S307
    except Exception:  # noqa: BLE001 - an expression of values these do not fix
        return None


#: Names a launcher test reads that are not the kernel's parameters (`A.dtype.element_ty`, `X is not None`)
_NOT_PARAMETERS = frozenset({"None", "True", "False", "dtype", "element_ty"})


def branch_path(ctx: RuleContext, node: cst.CSTNode) -> list[tuple[cst.If, bool]] | None:
    """The `if`s around `node` up to its function, innermost first, each with whether `node` runs where its test holds
    (the `else` clause or an `elif`: where it fails); None where a loop holds it."""
    found: list[tuple[cst.If, bool]] = []
    parents = ctx.source.parents
    branch, parent = node, parents.get(node)
    while parent is not None and not isinstance(parent, cst.FunctionDef):
        if isinstance(parent, (cst.For, cst.While)):
            return None
        if isinstance(parent, cst.If):
            found.append((parent, parent.body is branch))
        branch, parent = parent, parents.get(parent)
    return found


def launch_evaluable(ctx: RuleContext, test: cst.BaseExpression) -> bool:
    """A launcher can evaluate `test`: it reads parameters alone (constexprs that no heuristic computes, and the
    others: a pointer's element type, `A.dtype.element_ty`, as the launch's tensor's `A.dtype`)."""
    fn = ctx.function
    names = names_in(test) - _NOT_PARAMETERS
    params = {p.name for p in fn.params if not (p.is_constexpr and p.name in fn.heuristics)}
    return bool(names) and names <= params


def launch_terms(ctx: RuleContext, path: list[tuple[cst.If, bool]]
                 ) -> tuple[str, tuple[tuple[str, str | None], ...]] | None:
    """The conjunction of the `if`s of `path` (as `branch_path` gives them) as a launcher test, with each name it reads
    and its default (None for a parameter that is not a constexpr); None where `path` is empty."""
    if not path:
        return None
    pointers = {p.name for p in ctx.function.params if not p.is_constexpr}
    defaults = {p.name: p.default for p in ctx.function.params if p.is_constexpr}
    terms, names = [], set()
    for node, taken in reversed(path):  # (the outermost `if` first)
        test = ctx.source.code(node.test).strip()
        test = ELEMENT_TY.sub(lambda m: f"{m.group(1)}.dtype" if m.group(1) in pointers else m.group(0), test)
        if not taken:
            test = f"not ({test})"
        elif len(path) > 1 and not test.isidentifier():
            test = f"({test})"
        terms.append(test)
        names |= names_in(node.test) - _NOT_PARAMETERS
    return " and ".join(terms), tuple((n, defaults.get(n)) for n in sorted(names))


def source_when_holds(test: str, names: tuple[tuple[str, str | None], ...], values: dict[str, object]) -> bool:
    """Whether a test of `RuleContext.launch_source_when` holds at these constexpr `values` (False where it reads a
    name they do not set)."""
    return all(name in values for name, _ in names) and bool(evaluate(test, values))
