"""AMD: warp-pipeline a GEMM main loop into two `gl.amd.warp_pipeline_stage` blocks over an LDS ring.

Matches: ``for k in range(...)`` / ``tl.range(..., num_stages=n)`` whose body loads the two operands of one
``acc = tl.dot(a, b, acc)`` (pointer tiles or tensor-descriptor tiles) -- the `StagePlan` of
`transpile.analysis.stages`.
Emits, under a compile-time test that a ring of at least 2 slots fits the target's LDS (else the loop runs as
translated): ``gl.static_assert`` that the kernel runs with 8 warps; a ring of ``NUM_STAGES`` (3 or 2) LDS slots per
operand; a prologue that copies the first ``NUM_STAGES`` iterations' tiles; a steady state unrolled by the ring
depth (constant slot indices) whose steps are two stages, ``mma`` (priority 0: the MMA on operands already in
registers, and the rest of the body) and ``mem`` (priority 1: the next iteration's operands from the ring, then the
copies of iteration ``it + NUM_STAGES`` into the slot just read), the copy wait before ``mma``; then the last
iterations unstaged. The steady state copies no iteration past the end and none in the K tail: mask terms that
`transpile.analysis.tile_bounds` proves true on its tiles are left out of its copies. The lowering runs the two
stages on two warp groups one stage apart, so that one group's memory traffic overlaps the other's MMAs.
Targets: gfx942, gfx950, gfx1250 (copy engines: registers, direct-to-LDS `async_copy`, TDM).
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Callable

import libcst as cst

from transpile.analysis.dataflow import Effect
from transpile.analysis.launch_alignment import last_axis_mask_params, offset_constexprs, pointer_tile_strides
from transpile.analysis.layouts import LayoutPlan, name_terms
from transpile.analysis.pipeline import (DotChain, LoopPlan, OperandLoad, advance_after, consumer_indices,
                                         flattened_guards, guard_reads, guarded_indices, local_pointer,
                                         loop_body)
from transpile.analysis.stages import (ARANGE, BUILTIN_ELEMENTWISE, OFFSETS, PIPELINE_WARPS, PURE_CALLS, WAITS,
                                      StagePlan, StageRefusal, arithmetic_step, hoistable_convert, plan_stages,
                                      prefetches, scalar_names)
from transpile.analysis.tile_bounds import TailPeel, descriptor_peel, descriptor_tile, leading_iterations, tail_peel
from transpile.analysis.uniform_mask import UniformMask, loop_uniform_masks, unmasked as unmasked_statement
from transpile.cst_utils import (added_to, assigned_names, broadcast_axis, calls_in, conjuncts,
                                 element_type_pointer, mask_index, names_in, parenthesized, product_factors,
                                 sum_terms, unparenthesized)
from transpile.cst_walk import preorder
from transpile.discover import JitFunction
from transpile.passes.tma_tiles import LdsNeed
from transpile.passes.tile_scales import scalar_scale
from transpile.rules.tile_scales import launch_tests, uniform_scale
from transpile.rules.base import (Counterexample, Example, Rule, RuleContext, branch_path, launch_evaluable,
                                  launch_terms, source_when_holds)
from transpile.rules.dot import SCALED_FORMATS, translated_dot
from transpile.rules.pipeline_text import (LoopRange, code, indent, later_load, loop_namer, next_names, rename,
                                           statements)
from transpile.source import SourceFile

EXAMPLE = (
    "import triton\nimport triton.language as tl\n\n@triton.jit\n"
    "def k(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):\n"
    "    offs_m = tl.arange(0, BM)\n    offs_n = tl.arange(0, BN)\n    offs_k = tl.arange(0, BK)\n"
    "    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]\n"
    "    b_ptrs = b_ptr + offs_k[:, None] * BN + offs_n[None, :]\n"
    "    acc = tl.zeros((BM, BN), dtype=tl.float32)\n"
    "    for k in tl.range(0, tl.cdiv(K, BK), num_stages=3):\n"
    "        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)\n"
    "        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)\n"
    "        acc = tl.dot(a, b, acc)\n        a_ptrs += BK\n        b_ptrs += BK * BN\n"
    "    tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc.to(tl.float16))\n"
)


class AMDWarpPipeline(Rule):
    name = "amd-warp-pipeline"
    matches = "a main loop whose dot operands are tile loads (pointer or tensor-descriptor tiles)"
    emits = "an LDS ring and two warp_pipeline_stage blocks (lds_read, copy_mma) run by two warp groups"
    examples = (
        Example(EXAMPLE, (
            'gl.static_assert(gl.num_warps() == 8, "the warp-pipelined main loop needs num_warps=8',
            "NUM_STAGES: gl.constexpr = _ring_slots(163840, 3, [BM, BK], a_ptr.dtype.element_ty, [BK, BN], "
            "b_ptr.dtype.element_ty)",
            "async_copy.wait_group(NUM_STAGES - 2)",
            'with gl.amd.warp_pipeline_stage("mma", priority=0):',
            'with gl.amd.warp_pipeline_stage("mem", priority=1):',
            "a = async_copy.load_shared_relaxed(a_ring.index((step + 1) % NUM_STAGES), gl.DotOperandLayout(0, "
            "acc.type.layout, _mma_k_width(a_ring.dtype, acc.type.layout)))",
            "for it in range(gl.maximum(num_rounds, 0) * NUM_STAGES, num_iters):",
        ), "gfx950"),
        # gfx942 has no direct-to-LDS copy of 16 bytes a lane: its pointer tiles go by 16-byte buffer loads into
        # registers one step before they are stored into their slot (`_buffer_tile_load`)
        Example(EXAMPLE, (
            "num_full = gl.minimum(num_iters, gl.maximum(K, 0) // BK)",
            "num_rounds = (num_full - 1) // NUM_STAGES - 1",
            "a_ring.index(step).store(a_staged)",
            # the steady state loads the first num_full iterations' tiles: their K-tail masks are left out
            "a_staged = _buffer_tile_load(a_ring, a_ptrs_next_base, a_ptrs_next_offs)",
            "a_staged = _buffer_tile_load(a_ring, a_ptrs_next_base, a_ptrs_next_offs, "
            "mask=(offs_k_a_cols[None, :] < K - k_next * BK) & ((it + NUM_STAGES + 1) < num_iters))",
        ), "gfx942"),
    )
    counterexamples = (
        # a row reduction of the accumulator each iteration: inside a warp with every warp along M, a form kept as
        # Triton by the profitability policy (measured)
        Counterexample(EXAMPLE.replace("        acc = tl.dot(a, b, acc)\n", "        acc = tl.dot(a, b, acc)\n"
                                       "        acc = acc - tl.max(acc, 1)[:, None]\n"),
                       ("warp_pipeline_stage",), "TT041", "reduction `tl.max` at line 16; a row reduction each "
                       "iteration stays inside a warp only with every warp along M", "gfx950"),
        # a column reduction: it crosses warps whatever their split, so only one warp group could run the ring
        Counterexample(EXAMPLE.replace("        acc = tl.dot(a, b, acc)\n", "        acc = tl.dot(a, b, acc)\n"
                                       "        acc = acc - tl.max(acc, 0)[None, :]\n"),
                       ("warp_pipeline_stage", "_cta_barrier()"), "TT041", "reduction `tl.max` at line 16 in the loop "
                       "body; it needs a CTA-wide barrier inside the step that runs the MMA, so the ring would be run "
                       "by one warp group", "gfx950"),
    )

    def __init__(self, engine: str = "registers", pointer_copy: str | None = None, late_reads: bool = False) -> None:
        self.engine = engine  # the target's copy engine for tensor-descriptor tiles (ENGINES in analysis.stages)
        # the target's direct-to-LDS copy of a pointer tile, where it is another engine than the descriptor tiles'
        # (gfx1250: TDM for descriptors, `async_copy.global_to_shared` for pointer tiles); None: as `engine` says
        self.pointer_copy = pointer_copy
        # whether an attention loop's V is read in the `mma` stage, right before its dot (`StagePlan.late`): gfx1250,
        # whose 32-lane waves held the next K and V across the stage boundary (317-512 VGPRs against the source's
        # 169-254, bench/RESULTS.md)
        self.late_reads = late_reads

    def stage_plan(self, source: SourceFile, fn: JitFunction, loop: cst.For, plan: LayoutPlan, lds_limit: int
                   ) -> StagePlan | StageRefusal | None:
        """The stage plan of `loop` with this target's copy engines (the one `explain` and the tables show); a loop
        with an iteration guard is planned on the guard's statements (`flattened_guards`: the expander runs the
        consumer's under the guard's test)."""
        with flattened_guards():
            return plan_stages(source, fn, loop, plan, self.engine, lds_limit,
                               pointer_engine="async_copy" if self.pointer_copy else None, late_reads=self.late_reads)

    def leave_For(self, ctx: RuleContext, original: cst.For, updated: cst.For):  # noqa: ANN201
        with flattened_guards():
            return self._leave_for(ctx, original, updated)

    def _leave_for(self, ctx: RuleContext, original: cst.For, updated: cst.For):  # noqa: ANN202
        stage_plan = self.stage_plan(ctx.source, ctx.function, original, ctx.plan, ctx.target.shared_memory_bytes)
        if stage_plan is None or (isinstance(stage_plan, StagePlan) and not isinstance(stage_plan.loop, LoopPlan)):
            return updated  # no dot fed by loads
        if isinstance(stage_plan, StageRefusal):
            # (a construct before the loop that the refusal names, with its line: the note goes on the loop, where
            # the kept kernel's reason looks for it)
            inside = ctx.source.position(original)[0] <= ctx.source.position(stage_plan.node)[0] \
                <= ctx.source.positions[original].end.line
            ctx.diagnostics.append(ctx.source.diagnostic(stage_plan.node if inside else original, "TT040",
                                                         f"main loop not pipelined: {stage_plan.reason}"))
            return updated
        several = SEVERAL_DOTS_HEAVIER.get(ctx.target.name)
        transposed = next((load for load in stage_plan.loop.loads if load.transposed or load.twice), None)
        if several is not None and transposed is not None and len(stage_plan.loop.chains) > 1 \
                and not stage_plan.loop.attention and not stage_plan.loop.chained \
                and not ctx.gluon_always:  # (chained dots: a form of their own)
            ctx.diagnostics.append(ctx.source.diagnostic(original, "TT040", "main loop not pipelined: its dots share "
                                                         f"the loop with other dots and read `{transposed.name}` "
                                                         f"transposed; {several}"))
            return updated
        along_k = _k_indexed(stage_plan.loop) if not stage_plan.loop.attention else None
        construct = f"here `{code(along_k)}` at line {ctx.source.position(along_k)[0]}" if along_k is not None \
            else stage_plan.staged if stage_plan.engine == "registers" else ""
        if stage_plan.register_copies:  # (the register-staged forms name the tile no launch copies 16 bytes a lane)
            construct = stage_plan.staged
        if stage_plan.groups == 1:
            construct = stage_plan.barrier_op
        elif stage_plan.warps_along_m:
            construct = stage_plan.row_reduction
        # Direct-to-LDS copies of descriptor tiles (gfx950) move each lane's 16 bytes whole: the launcher must vouch
        # for 16-byte rows and column offsets (`_descriptor_divisible`), or the loop is left as it is
        descriptor_launch: tuple[list[str], list[tuple[str, tuple[tuple[str, str | None], ...]]]] | None = None
        if stage_plan.engine == "async_copy" and any(load.kind == "descriptor" for load in stage_plan.loop.loads):
            found = _descriptor_divisible(ctx, stage_plan) if stage_plan.loop.kind == "descriptor" else (
                "its tiles are read through both pointers and tensor descriptors, whose direct-to-LDS copies need "
                "launch tests of their own (a ring copies one kind)")
            if isinstance(found, str):
                ctx.diagnostics.append(ctx.source.diagnostic(original, "TT040", f"main loop not pipelined: {found}"))
                return updated
            descriptor_launch = found
        elif stage_plan.engine == "registers" and stage_plan.loop.kind == "descriptor":
            # (gfx942's buffer loads of descriptor tiles are correct at any launch, but 16 bytes a lane, as measured,
            # only where those sizes are multiples of 16: the other launches run the source kernel where the
            # launcher can tell)
            found = _descriptor_divisible(ctx, stage_plan)
            descriptor_launch = found if not isinstance(found, str) else None
        masks_left_out, gathered = True, False
        if stage_plan.loop.attention:
            # (whether the steady state leaves out score masks the source evaluates every iteration, and whether the
            # copies' addresses read offsets the producer loads each iteration: a paged KV cache's block table)
            plan_ = stage_plan.loop
            consumer = consumer_indices(plan_.producer, {load.index for load in plan_.loads}, loop_body(original),
                                        guard_reads(plan_.loop))
            # (a mask added to the scores leaves its add in the steady state: measured at 0.80x on gfx1250, it does
            # not count here)
            masks_left_out = bool(_steady_masks(ctx, plan_, consumer, additive=False))
            # (a call of a jit helper there may load: `_effects` does not look into helpers)
            helpers = set(ctx.facts.functions)
            gathered = any(Effect.GLOBAL_LOAD in facts.effects or any(
                isinstance(call.func, cst.Name) and call.func.value in helpers for call in calls_in(facts.node))
                for facts in stage_plan.dataflow.statements if facts.index in plan_.producer)
        form = _form(stage_plan, masks_left_out, gathered)
        if ctx.slower_than_triton(original, form, construct):
            return updated  # the profitability policy keeps the kernel as Triton (UNPROFITABLE_RINGS in rules/base.py)
        narrow = _computed_axis_launches(ctx, stage_plan, COMPUTED_AXIS_LAUNCHES.get((ctx.target.name, form), ())) \
            or _computed_axis_launches(ctx, stage_plan, COMPUTED_ARITHMETIC_LAUNCHES.get((ctx.target.name, form), ()),
                                       arithmetic=True)
        if narrow:
            ctx.diagnostics.append(ctx.source.diagnostic(original, "TT040", f"main loop not pipelined: {narrow}"))
            return updated
        ctx.need("lds_ring")
        if stage_plan.engine == "async_copy":
            ctx.need("lds_copy")
        elif stage_plan.engine == "tdm":
            ctx.need("lds_tdm")
        one_group = stage_plan.groups == 1  # (the kernel's own warps, every wave running each step in order)
        if not one_group:
            ctx.num_warps = PIPELINE_WARPS
        if stage_plan.loop.attention and not one_group:
            # every warp along M: the softmax's row reductions stay inside a warp, so no stage holds a barrier
            ctx.mma_warps_along_m = True
            constexprs = {p.name: p.default for p in ctx.function.params if p.is_constexpr}
            rows, keys, head = _attention_sizes(ctx, stage_plan)
            # With fewer rows than 16 a warp the loop runs as translated: such launches (and autotune configs) run
            # the source kernel
            _source_below(ctx, rows, 16 * PIPELINE_WARPS)
            if keys in constexprs and head in constexprs:
                # ... and so do those whose K and V tiles would spill (`ATTENTION_TILE_LIMIT`)
                ctx.launch_source_when = tuple(dict.fromkeys((*ctx.launch_source_when, (
                    f"{_tile_factor(stage_plan)}{keys} * {head} > {ATTENTION_TILE_LIMIT[ctx.target.name]}",
                    tuple(dict.fromkeys(((keys, constexprs[keys]), (head, constexprs[head]))))))))
        if stage_plan.warps_along_m:
            # every warp along M: the loop's row reductions (of the accumulator, of its A tiles) stay inside a warp,
            # so the `mma` stage holds no barrier; with fewer rows than 16 a warp the source kernel runs
            ctx.mma_warps_along_m = True
            rows, cols = (str(d) for d in ctx.plan.dots[stage_plan.loop.chains[0].call].shape)
            _source_below(ctx, rows, 16 * PIPELINE_WARPS)
            fewest = ROW_FORM_MIN_COLUMNS.get(ctx.target.name)
            if fewest is not None:  # (each warp's 16 x N share too small)
                _source_below(ctx, cols, fewest)
        if stage_plan.loop.chained and not stage_plan.loop.attention and not one_group:
            # every warp along M: the products a later dot reads (`pT`, `dsT`) keep their rows in their warps and
            # reach that dot's operand layout in registers; with fewer rows than 16 a warp the source kernel runs
            ctx.mma_warps_along_m = True
            sites = [ctx.plan.dots[chain.call] for chain in stage_plan.loop.chains]
            joint = tuple(dict.fromkeys(str(site.shape[1]) for site in sites if site.shape[1] is not None))
            ctx.mma_joint_ns = {**ctx.mma_joint_ns, **{id(site.node): joint for site in sites}}
            _source_below(ctx, str(ctx.plan.dots[stage_plan.loop.chains[0].call].shape[0]), 16 * PIPELINE_WARPS)
        if _warps_follow_computed(stage_plan):
            # A computed operand is computed in its MMA operand layout, which every warp along the other axis holds
            # too: the MMA layout lays the warps along the computed operand's axis instead, so each element is
            # computed once (gfx950: 0.28-0.61x Triton's non-MFMA instructions per iteration where the split measured
            # 0.76-0.93x; bench/RESULTS.md)
            for call, position in _computed_sides(stage_plan.loop).items():
                site = ctx.plan.dots.get(call)
                if site is not None:
                    ctx.mma_computed = {**ctx.mma_computed, id(site.node): position}
        if descriptor_launch is not None or (stage_plan.engine == "registers" and stage_plan.loop.kind == "descriptor"):
            # Launches with output tiles under DESCRIPTOR_RING_MIN_TILE elements run the source kernel (their 8 warps
            # hold too little MMA work a step for the copies' address and mask arithmetic), and so do those whose
            # block sizes leave no room for two slots of each ring (the loop would run unpipelined), or that ask for
            # other warps than the pipeline's
            _source_tile_below(ctx, stage_plan, DESCRIPTOR_RING_MIN_TILE[ctx.target.name])
            ctx.launch_checked = True
            ctx.launch_small = True  # (its buffer loads address the tensors at 32-bit offsets: under 2 GB)
            # (direct-to-LDS copies move a lane's 16 bytes whole: rows and the shape's last dimension multiples of 16)
            ctx.launch_divisible = tuple(dict.fromkeys((*ctx.launch_divisible, *(descriptor_launch or ([], ()))[0])))
            ctx.launch_source_when = tuple(dict.fromkeys((*ctx.launch_source_when, *(
                descriptor_launch or ([], ()))[1])))
            if not one_group:
                ctx.launch_warps = PIPELINE_WARPS
            ctx.launch_lds = _lds_check(ctx, stage_plan)
        trips = _constant_trips(ctx, stage_plan.loop)
        few = _launch_test(ctx, f"{trips} <= {stage_plan.slots}") if trips is not None else None
        if few is not None:
            # A loop of no more iterations than the ring has slots, its count known when the kernel is compiled (a
            # head dimension's blocks): Triton's own compile unrolls it and issues every load up front, the ring
            # would only copy every iteration in its prologue, and the loop as translated measured heavier than the
            # source (occupancy 5 against 8 on gfx950: bench/RESULTS.md). Such launches run the source kernel.
            ctx.launch_source_when = tuple(dict.fromkeys((*ctx.launch_source_when, few)))
        registers = _register_test(ctx, stage_plan) or _chained_register_test(ctx, stage_plan)
        if registers is not None:  # launches whose accumulators and operand tiles would spill run the source kernel
            ctx.launch_source_when = tuple(dict.fromkeys((*ctx.launch_source_when, registers)))
        sides = _sides_depth_test(ctx, stage_plan)
        if sides is not None:  # ... and those of a tile read as both operands through too shallow dots
            ctx.launch_source_when = tuple(dict.fromkeys((*ctx.launch_source_when, sides)))
        computed = _computed_tile_test(ctx, stage_plan, original)
        if computed is not None:  # ... and so do those of larger tiles than a dot of two computed operands pays at
            ctx.launch_source_when = tuple(dict.fromkeys((*ctx.launch_source_when, computed)))
        # ... and launches the scaled MMA does not take (a format, a K block, scale rows it cannot copy)
        ctx.launch_source_when = tuple(dict.fromkeys((*ctx.launch_source_when, *_scaled_tests(ctx, stage_plan))))
        if stage_plan.engine in POINTER_COPIES and any(load.kind == "pointer" for load in stage_plan.loop.loads):
            # Direct-to-LDS copies of pointer tiles compile only where the launch proves 16-byte aligned rows, and
            # 16-byte buffer loads are 16-byte loads only there: the variant's launcher runs the source kernel on the
            # other launches.
            unit, divisible = tile_strides(ctx, stage_plan.loop)
            # an inner stride that is a constexpr (`stride_ak: tl.constexpr`, 1 at the launches real code makes):
            # launches of another value run the source kernel (its tile cannot be copied direct to LDS)
            constexprs = {p.name: p.default for p in ctx.function.params if p.is_constexpr}
            ctx.launch_source_when = tuple(dict.fromkeys((*ctx.launch_source_when, *(
                (f"{name} != 1", ((name, constexprs[name]),))
                for name in tile_strides(ctx, stage_plan.loop, constexprs=True)[0]))))
            # ... and a constexpr that scales an offset a tile's base parameter is moved by (`q += (bos * H + i_h) *
            # K`): launches where it is not a multiple of 16 cannot prove the moved base aligned
            pointers = [local_pointer(stage_plan.loop, load) for load in stage_plan.loop.loads
                        if load.kind == "pointer" and load.pointer is not None]
            ctx.launch_source_when = tuple(dict.fromkeys((*ctx.launch_source_when, *(
                (f"{name} % 16 != 0", ((name, constexprs[name]),))
                for name in offset_constexprs(ctx.function, pointers)))))
            masks = [load.mask for load in stage_plan.loop.loads if load.kind == "pointer" and load.mask is not None]
            divisible += [n for n in last_axis_mask_params(ctx.function, masks) if n not in divisible + unit]
            ctx.launch_checked = True  # (a kernel with several such loops: what each needs)
            ctx.launch_unit = tuple(dict.fromkeys((*ctx.launch_unit, *unit)))
            ctx.launch_divisible = tuple(n for n in dict.fromkeys((*ctx.launch_divisible, *divisible))
                                         if n not in ctx.launch_unit)
            if not one_group:
                ctx.launch_warps = PIPELINE_WARPS
            ctx.launch_no_agprs = True
            slow = SLOW_DTYPES.get(ctx.target.name, ())
            if any(load.computed for load in stage_plan.loop.loads):
                # (8-bit integer codes measured lighter only with the warps along the computed operand's axis)
                codes = COMPUTED_SLOW_DTYPES if _computed_across_warps(stage_plan) else (
                    "int8", "uint8", *COMPUTED_SLOW_DTYPES)
                slow += tuple(t for t in codes if t not in slow)
                # (and the tiles of the types a target's ring measured heavier computing from: by parameter)
                params = {p.name for p in ctx.function.params}
                for load in (load for load in stage_plan.loop.loads if load.computed):
                    pointer = element_type_pointer(ring_dtype(ctx, stage_plan.loop, load), params)
                    if pointer is not None:
                        slow += tuple(f"{pointer}={t}" for t in COMPUTED_TILE_SLOW_DTYPES.get(ctx.target.name, ())
                                      if f"{pointer}={t}" not in slow)
            if any(chain.integer_sum for chain in stage_plan.loop.chains):
                slow += tuple(t for t in INTEGER_SUM_SLOW_DTYPES if t not in slow)
            ctx.launch_slow_dtypes = tuple(dict.fromkeys((*ctx.launch_slow_dtypes, *slow)))
            # ... and so do those that cast the dots' operands to such a type through a constexpr parameter
            # (`a.to(AB_DTYPE)`, an unswitched copy's: gfx942's OCP fp8 converted through fp16 measured 1.31x)
            ctx.launch_source_when = tuple(dict.fromkeys((*ctx.launch_source_when, *_cast_type_tests(
                ctx, stage_plan, SLOW_DTYPES.get(ctx.target.name, ())))))
            ctx.launch_lds = _lds_check(ctx, stage_plan)
        if one_group:
            ctx.need("cta_barrier")
        loop_plan = stage_plan.loop
        uniform = uniform_scale(ctx, loop_plan, original, least_rows=0) if len(loop_plan.chains) == 1 \
            and loop_plan.chains[0].scaled_product and not loop_plan.attention else None
        if uniform is not None:
            # (B's scales held once per tile: one scalar a step, for launches whose column groups hold whole tiles;
            # `rules/tile_scales.py`)
            launch_tests(ctx, loop_plan, uniform, None)
            updated = updated.with_changes(body=updated.body.with_changes(body=scalar_scale(
                list(updated.body.body), original, loop_plan.dot_index, uniform)))  # type: ignore[union-attr]
        ctx.pipelined_loop(original, stage_plan)
        # (a warp-pipelined loop before this one that runs in the same launch: not a copy of it for another value of
        # a compile-time flag)
        after = any(not _exclusive(ctx, earlier, original) for earlier in ctx.pipelined[:-1])
        return cst.FlattenSentinel(statements(_emit(ctx, stage_plan, updated.with_changes(leading_lines=[]),
                                                    self.pointer_copy, after),
                                               updated.leading_lines))

    def leave_FunctionDef(self, ctx: RuleContext, original: cst.FunctionDef, updated: cst.FunctionDef
                          ) -> cst.FunctionDef:
        """Autotune configs of a kernel with a warp-pipelined loop launch it with 8 warps, but those for which a test
        of `RuleContext.launch_source_when` holds: the launcher runs the source kernel for them, at their warps."""
        if ctx.num_warps != PIPELINE_WARPS or not ctx.function.autotune_configs:
            return updated
        decorators = []
        for decorator in updated.decorators:
            changed = decorator.visit(_ConfigWarps(ctx.launch_source_when))
            if changed is not decorator and not changed.deep_equals(decorator):
                changed = changed.with_changes(leading_lines=[*changed.leading_lines, cst.EmptyLine(
                    comment=cst.Comment("# num_warps=8 in every config: the warp-pipelined main loop runs its stages on "
                                        "two groups of 4 warps."))])
            decorators.append(changed)
        return updated.with_changes(decorators=decorators)


#: Triton's names of torch's element types (`Dispatch.slow_dtypes` holds torch's; a constexpr type holds Triton's)
_TRITON_TYPE_NAMES = {"float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5", "float8_e4m3fnuz": "fp8e4b8",
                      "float8_e5m2fnuz": "fp8e5b16", "int8": "int8", "uint8": "uint8"}


def _cast_type_tests(ctx: RuleContext, sp: StagePlan, slow: tuple[str, ...]
                     ) -> list[tuple[str, tuple[tuple[str, str | None], ...]]]:
    """Launcher tests (`RuleContext.launch_source_when`) for the dots whose operands the loop casts to a type a
    constexpr parameter names (`a = a.to(AB_DTYPE)`): the launches that name one of the `slow` types (torch's names)."""
    names = tuple(_TRITON_TYPE_NAMES[t] for t in slow if t in _TRITON_TYPE_NAMES)
    constexprs = {p.name: p.default for p in ctx.function.params if p.is_constexpr}
    cast = sorted({t for chain in sp.loop.chains for position in (0, 1)
                   for t in [ctx.plan.dots[chain.call].operand_type(position)] if t in constexprs})
    return [(f"{p} is not None and {p}.name in {names!r}", ((p, constexprs[p]),)) for p in cast] if names else []


def ring_dtype(ctx: RuleContext, plan: LoopPlan, load: OperandLoad) -> str | None:
    """The element type of `load`'s ring: its dot operand's, or, for a computed operand, the loaded tile's."""
    chain, position = plan.use_of(load.name)
    if load.computed or position >= 2:  # (a scale tile: as loaded)
        return ctx.plan.loads[load.call].elem
    return ctx.plan.dots[chain.call].operand_type(position)


def _assigned_outside(function: cst.FunctionDef, loop: cst.CSTNode) -> set[str]:
    """Names `function` assigns anywhere but inside `loop`."""
    inside = {id(n) for n in preorder(loop)}
    found: set[str] = set()
    for node in preorder(function):
        if id(node) in inside:
            continue
        if isinstance(node, cst.Assign):
            for target in node.targets:
                found |= names_in(target.target)
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
            found |= names_in(node.target)
    return found


def _lds_check(ctx: RuleContext, sp: StagePlan) -> LdsNeed | None:
    """What the launcher needs to tell a launch whose block sizes leave no room for the fewest slots of each ring the
    loop pipelines with (two; three where a tile is read in its own iteration's `mma` stage, `StagePlan.late`: the
    Gluon kernel's guard then fails and its loop runs unpipelined, heavier than Triton's own compile): the LDS bytes,
    each ring's shape as parameter names or numbers and the pointer parameter whose element type it holds, and the
    fewest slots where not two; None where a shape or an element type is not that (the kernel's own check still
    holds)."""
    params = {p.name for p in ctx.function.params}
    rings = []
    for load, ring in zip(sp.loop.loads, sp.rings):
        pointer = element_type_pointer(ring_dtype(ctx, sp.loop, load), params)
        if load.kind not in ("pointer", "descriptor") or pointer is None:
            return None
        shape: list[str | int] = []
        for dim in ring.shape:
            dim = dim.strip()
            if dim.isdigit():
                shape.append(int(dim))
            elif dim in params:
                shape.append(dim)
            else:
                return None
        rings.append((tuple(shape), pointer))
    if ctx.launch_lds is not None and ctx.launch_lds[1] != tuple(rings):
        return None  # (several pipelined loops with other rings: each loop's own check holds)
    # (several loops with the same rings: the most slots any needs)
    late = sp.late or (ctx.launch_lds is not None and len(ctx.launch_lds) > 2)
    return (sp.lds_limit, tuple(rings), 3) if late else (sp.lds_limit, tuple(rings))


class _ConfigWarps(cst.CSTTransformer):
    """`num_warps=8` in each `triton.Config(...)` for which no test of `source_when` holds (on the config's values)."""

    def __init__(self, source_when: tuple[tuple[str, tuple[tuple[str, str | None], ...]], ...] = ()) -> None:
        super().__init__()
        self.source_when = source_when
        self.skip: list[bool] = []

    def visit_Call(self, node: cst.Call) -> None:
        values: dict[str, object] = {}
        if node.args and isinstance(node.args[0].value, cst.Dict):
            for element in node.args[0].value.elements:
                if isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString):
                    try:
                        values[element.key.evaluated_value] = ast.literal_eval(code(element.value))
                    except (ValueError, SyntaxError):
                        pass
        self.skip.append(any(source_when_holds(test, names, values) for test, names in self.source_when))

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        self.skip.pop()
        return updated_node

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        if updated_node.keyword is not None and updated_node.keyword.value == "num_warps" \
                and not (self.skip and self.skip[-1]):
            return updated_node.with_changes(value=cst.Integer(str(PIPELINE_WARPS)))
        return updated_node


def _exclusive(ctx: RuleContext, first: cst.CSTNode, second: cst.CSTNode) -> bool:
    """Whether `first` and `second` lie in different branches of one `if` of the function (the copies of a loop that
    unswitching made, one per value of a flag, also inside a loop around them): no launch runs both."""
    parents = ctx.source.parents

    def branches(node: cst.CSTNode) -> dict[int, bool]:
        """The `if`s around `node` (by id), each with whether `node` lies in its body."""
        found: dict[int, bool] = {}
        child, parent = node, parents.get(node)
        while parent is not None and not isinstance(parent, cst.FunctionDef):
            if isinstance(parent, cst.If):
                found[id(parent)] = parent.body is child
            child, parent = parent, parents.get(parent)
        return found

    around = branches(first)
    return any(branch in around and around[branch] != runs for branch, runs in branches(second).items())


def _emit(ctx: RuleContext, sp: StagePlan, updated: cst.For, pointer_copy: str | None, after: bool = False) -> str:
    """The pipelined loop; `pointer_copy`: the target's own direct-to-LDS copy call of a pointer tile (None: gfx950's,
    whose `async_copy` also has `load_shared_relaxed` for the slot reads; with another, slots are read by `.load`);
    `after`: another warp-pipelined loop runs before it in the same launch."""
    plan = sp.loop
    body = list(updated.body.body)  # type: ignore[union-attr]
    # The statements of an iteration guard (`if kbid:` around the iteration's work; its loads masked by the test,
    # `passes.iteration_guards`), read in its place as the planner read them (`loop_body`), which the consumer runs
    # under the guard's test
    guard = guarded_indices(plan.loop)
    guarded = set(guard[1]) if guard is not None else set()
    guard_test = ""
    if guard is not None:
        translated = body[guard[1].start]
        guard_test = code(translated.test)  # type: ignore[attr-defined]
        body[guard[1].start:guard[1].start + 1] = list(translated.body.body)  # type: ignore[attr-defined]
    name = loop_namer(ctx, plan.loop)
    prologue_i = name("i")  # the prologue's loop variable: a name the kernel does not use (a static_range
    # loop leaves its variable bound to the last value, which would change a kernel variable `i`)
    stages, rnd, step_, it, iters = (name("NUM_STAGES"), name("round_"), name("step"), name("it"),
                                     name("num_iters"))
    rings = {load.name: name(f"{load.name}_ring") for load in plan.loads}
    # Each tile load feeds one operand position of one or more dots (a gated GEMM's A tile feeds two)
    feeds = {load.name: plan.use_of(load.name) for load in plan.loads}
    dtypes = {load.name: ring_dtype(ctx, plan, load) for load in plan.loads}
    span = LoopRange.of(updated, sp.wide)
    count, index = span.count, span.value

    # Conversions of `<loop variable> + offsets` in the consumer (an attention mask's key offsets, laid along the
    # other axis of the scores) become `<loop variable> + <offsets converted once, before the loop>`.
    hoisted: list[str] = []
    converts: dict[tuple[str, str], tuple[str, str]] = {}  # (name, layout) -> (scalar sum, converted offsets)
    made: dict[tuple[str, str], str] = {}  # (offsets, layout) -> the name they are converted to before the loop
    loads_at = {load.index for load in plan.loads}
    scalars = scalar_names(ctx.plan, ctx.function)
    for facts in sp.dataflow.statements:
        if facts.index in loads_at or facts.index in plan.producer:
            continue  # (the producer's copies are laid out per tile: `copy_operands`)
        for node, what in facts.barriers:
            found = hoistable_convert(node, plan.loop, sp.dataflow, ctx.function, scalars) \
                if what == "layout conversion" else None
            layout = ctx.plan.layout_expr(ctx.plan.converts[node]) if found is not None else ""
            # (a name, or integer arithmetic of one: by its text, as the translated statement writes it)
            key = _convert_key(node)  # type: ignore[arg-type]
            if found is not None and (key, layout) not in converts:
                expression, offsets = found
                target = made.get((offsets, layout), "")
                if target:
                    pass  # (the same offsets in the same layout: converted once)
                elif offsets.startswith(ARANGE):  # (the range made before the loop, in the layout it is read in)
                    target = name(f"{key if isinstance(node, cst.Name) else 'keys'}_offs")
                    hoisted.append(f"{target} = gl.arange({offsets[len(ARANGE):]}, layout={layout})")
                else:
                    target = name(f"{offsets}_cvt")
                    hoisted.append(f"{target} = gl.convert_layout({offsets}, {layout})")
                made[(offsets, layout)] = target
                converts[(key, layout)] = (expression, target)
    if converts:
        body = [s if i in loads_at or i in plan.producer else s.visit(_Hoisted(converts)) for i, s in enumerate(body)]
    # Conversions of values the loop does not change (`shifter[:, None]`, `exp2(g)` of loop-invariant vectors:
    # `invariant_convert` in analysis/stages.py) are made once, before the loop, under names of their own.
    changed = {n for statement in body for n in assigned_names(statement)} | {plan.var}
    invariant = _Invariant(changed, name, ctx.plan.elementwise_imports)
    body = [s if i in loads_at or i in plan.producer or not isinstance(s, cst.SimpleStatementLine) else s.visit(invariant)
            for i, s in enumerate(body)]  # (a conversion in a branch is made where the branch runs)
    hoisted += [f"{target} = gl.convert_layout({value}, {layout})" for (value, layout), target in invariant.made.items()]

    # Producer statements re-evaluated for a later iteration, their names suffixed `_next`; carried producer state
    # (pointers advanced each iteration) runs on its own copy, started from the value the loop starts from.
    renames = next_names(plan.var, plan.producer, body, name)
    consumer = consumer_indices(plan.producer, {load.index for load in plan.loads}, body, guard_reads(plan.loop))
    # A dot operand computed from a loaded tile (dequantised weights) is computed in the `mem` stage, for the next
    # iteration, right after its tile is read from the ring (PREP_IN_MEM_STAGE), else in the `mma` stage.
    prep = sorted({i for load in plan.loads for i in load.prep}) if ctx.target.name in PREP_IN_MEM_STAGE else []
    in_mem = name("PREP_IN_MEM")  # the constexpr that says where (PREP_IN_MEM_STAGE)
    uses_var = any(plan.var in names_in(body[i]) for i in consumer)
    prep_uses_var = any(plan.var in names_in(body[i]) for i in prep)

    engine = sp.engine
    tdm_descs = {load.name: name(f"{load.descriptor}_tdm") for load in plan.loads} if engine == "tdm" else {}
    tdm_at = {load.name: name(f"{load.descriptor}_at") for load in plan.loads} if engine == "tdm" else {}
    # The K tail peeled: mask terms that hold on every tile of the first `full` iterations (`tail_peel`) are left out
    # of the steady state's copies, which copy no later iteration.
    peel = tail_peel(ctx.function, plan)
    # (buffer copies or loads of descriptor tiles: the axis along which the steady state's tiles lie inside the
    # descriptor's shape, per load, whose bound test `_desc_buffer_copy` / `_desc_buffer_load` then leaves out)
    inside: dict[int, int] = {}
    if engine in ("async_copy", "registers") and plan.kind == "descriptor" and peel is None:
        desc_peel = descriptor_peel(ctx.function, plan)
        if desc_peel is not None:
            peel, inside = TailPeel(desc_peel[0], {}), desc_peel[1]
    full = name("num_full")
    # Masks the consumer selects through (`qk = tl.where(valid, qk * scale, -inf)`: a flash-attention loop's key
    # bound and causal mask) that hold on every element of the leading iterations' tiles (`uniform_mask`,
    # `leading_iterations`): the steady state stops before the first iteration that needs one and leaves the where
    # and the statements building its mask out; the last iterations run them as written.
    uniform = _steady_masks(ctx, plan, consumer)
    steady_statements = {m.where_index: unmasked_statement(body[m.where_index]) for m, _ in uniform}
    unmasked = {i for m, _ in uniform for i in m.mask_indices}
    bounded = peel is not None or bool(uniform)
    # Copies through registers are prefetched: the tiles of an iteration are loaded one step before they are stored
    # into their slot, so that the global loads' latency is hidden behind a step of the other warp group's MMAs.
    prefetch = prefetches(engine, plan.kind)
    # Tiles read in the `mma` stage of their own iteration, right before the dot that reads them (`StagePlan.late`):
    # the copies then run NUM_STAGES - 1 iterations ahead, and the waits leave one group fewer in flight.
    late = set(sp.late)
    ahead = f"{stages} - 1" if late else stages

    def minus(n: int) -> str:
        """NUM_STAGES less `n` copy groups, less one more with late reads (the copies run one iteration less ahead)."""
        return f"{stages} - {n + 1 if late else n}"
    staged = {load.name: name(f"{load.name}_staged") for load in plan.loads}
    # The tiles of a loop of descriptor tiles staged through registers (gfx942) are buffer loads 16 bytes a lane
    # (`_desc_buffer_load` in `_copy_layout`: a descriptor's base and row stride are 16-byte aligned, a requirement
    # of `tl.make_tensor_descriptor`), as Triton's own AMD backend loads them, not masked pointer loads in the
    # translation's layout of 4 elements a lane (twice the loads and LDS stores, and 64-bit addresses each step).
    desc_copy_layouts = {load.name: name(f"{load.name}_copy_layout") for load in plan.loads
                         if engine == "registers" and plan.kind == "descriptor"}

    def copy(load: OperandLoad, iteration: str, slot_expr: str, pad: str, guard: bool) -> str:
        dest = f"{rings[load.name]}.index({slot_expr})"
        statement = body[load.index]
        if not guard and peel is not None and load.index in peel.dropped:
            statement = _without_terms(statement, load, peel.dropped[load.index], peel.terms.get(load.index))
        if engine == "registers" and load.name not in sp.register_copies:
            loaded = later_load(statement, renames, iteration, iters, load, guard)
            if load.name in desc_copy_layouts:
                # (a buffer load of the tile in its 16-byte copy layout, not the translation's masked pointer load)
                call = cst.parse_expression(loaded)
                axis = [cst.Arg(cst.Integer(str(inside[load.index])))] if not guard and load.index in inside else []
                loaded = code(call.with_changes(func=cst.Name("_desc_buffer_load"), args=[  # type: ignore
                    *call.args[:-1], call.args[-1].with_changes(value=cst.Name(desc_copy_layouts[load.name])), *axis]))
            if prefetch:  # into registers now, into the slot one step later
                return f"{pad}{staged[load.name]} = {loaded}"
            return f"{pad}{dest}.store({loaded})"
        if load.kind == "pointer":  # a copy call: the load's own arguments, the slot (or the ring) first
            # (a load converted to or from another layout, a name's layout in the other branch: the copies lay
            # their operands out themselves, `copy_operands`)
            statement = statement.visit(_Unconvert())
            call = cst.parse_expression(later_load(statement, renames, iteration, iters, load, guard))
            # (gfx950's direct-to-LDS copy takes the load's cache hint; gfx1250's copy of a pointer tile does not)
            keep = ("mask", "other", "cache_modifier") if engine == "async_copy" and not pointer_copy \
                else ("mask", "other")
            args = [a for a in call.args if a.keyword is None or a.keyword.value in keep]  # type: ignore[attr-defined]
            # (through registers, a computed operand's tile in its copy layout, `register_copies`: the buffer-load
            # ring's load into registers, stored into its slot at once)
            copier = cst.parse_expression(pointer_copy if engine == "async_copy" and pointer_copy
                                          else POINTER_COPIES["buffer_loads" if engine == "registers" else engine])
            if engine == "registers":
                ctx.need("register_copy")
                return f"{pad}{dest}.store({code(cst.Call(copier, [cst.Arg(cst.Name(rings[load.name])), *args]))})"
            if prefetch:  # into registers now, into the slot one step later
                return (f"{pad}{staged[load.name]} = "
                        f"{code(cst.Call(copier, [cst.Arg(cst.Name(rings[load.name])), *args]))}")
            return f"{pad}{code(cst.Call(copier, [cst.Arg(cst.parse_expression(dest)), *args]))}"
        call = body[load.index].body[0].value  # type: ignore[union-attr]  # `_desc_load(desc, off0, off1, ...)`
        offsets = [rename(a.value, renames) for a in call.args[1:3]]
        if engine == "async_copy":
            ctx.need("desc_buffer_copy")
            axis = f", {inside[load.index]}" if not guard and load.index in inside else ""
            return f"{pad}_desc_buffer_copy({load.descriptor}, {offsets[0]}, {offsets[1]}, {dest}{axis})"
        return (f"{pad}{tdm_at[load.name]} = tdm.update_tensor_descriptor({tdm_descs[load.name]}, "
                f"add_offsets=[{offsets[0]}, {offsets[1]}], clamp_bounds=True)")

    def fused(slot_expr: str, pad: str) -> list[str]:
        """One TDM operation for both tiles: warps 0-3 copy the first, warps 4-7 the second."""
        members = ", ".join(f"({tdm_at[load.name]}, {rings[load.name]}.index({slot_expr}), {hint})"
                            for load, hint in zip(plan.loads, ("0b00001111", "0b11110000")))
        return [f"{pad}tdm.async_load_fused([{members}])"]

    def store_staged(slot_expr: str, pad: str) -> list[str]:
        """The prefetched tiles into slot `slot_expr`."""
        return [f"{pad}{rings[load.name]}.index({slot_expr}).store({staged[load.name]})" for load in plan.loads]

    producer_loads = any(Effect.GLOBAL_LOAD in facts.effects for facts in sp.dataflow.statements
                         if facts.index in plan.producer)

    def producer(iteration: str, slot_expr: str, pad: str, guard: bool = True) -> list[str]:
        """The copies of `iteration` into `slot_expr` (with `prefetch`: its loads into registers): address and mask
        statements, the copies (one commit group or one fused TDM operation), then the advances of the carried
        pointers. Without `guard`, the iteration is known not to be past the end: no mask is added for it; with it,
        where the address statements load (a block table, a flag an iteration guard tests), they are evaluated for
        the last iteration in place of one past the end, whose copies are masked off, so that they read no entry
        past the table's."""
        at = f"gl.minimum({iteration}, gl.maximum({iters} - 1, 0))" if guard and producer_loads else iteration
        lines = [f"{pad}{renames[plan.var]} = {index(at)}"]
        lines += [indent(rename(body[i], renames), pad) for i in plan.producer_before()]
        lines += [copy(load, iteration, slot_expr, pad, guard) for load in plan.loads]
        if engine == "async_copy":
            lines.append(f"{pad}async_copy.commit_group()")
        elif engine == "tdm":
            lines += fused(slot_expr, pad)
        return lines + [indent(rename(body[i], renames), pad) for i in plan.producer_after()]

    # An operand name the function also assigns outside this loop (in the other branch of a run-time `if`, in a
    # peeled last iteration) holds a tile of another layout there, and Triton requires one type per name across the
    # branches of an `if`: the slot reads then take names of their own.
    outside = _assigned_outside(ctx.function.node, plan.loop)
    # A transposed operand (`tl.dot(x, tl.trans(w))`) is read from its slot through a transposed view, straight in
    # the MMA's operand layout, under a name of its own (`w_t`); the dot then takes it as it is.
    operand = {load.name: name(f"{load.name}_t") if load.transposed and not load.twice else
               name(f"{load.name}_op") if load.name in outside else load.name for load in plan.loads}
    op_renames = {k: v for k, v in operand.items() if k != v}
    # A tile fed to dots both as loaded and transposed (`OperandLoad.twice`) is read from its slot once in each form:
    # as loaded under its own name, transposed under `<name>_t`, which the dots that transpose it take.
    twice = {load.name: name(f"{load.name}_t") for load in plan.loads if load.twice}
    # A computed tile fed both ways (`b_q = (b_q * scale).to(T)`, read by `tl.dot(b_k, tl.trans(b_q))` and by
    # `tl.dot(b_ds, b_q)`): its computation, elementwise, runs on each read, the second time on the transposed view
    # under names of its own (`b_q_t`), which the dot that transposed it takes.
    twice_prep: dict[int, dict[str, str]] = {}  # prep statement -> the names of its copy on the transposed view
    read_twice: dict[str, str] = {}  # the name a dot transposes -> the name it reads instead
    for load in plan.loads:
        if load.twice and load.computed:
            view = {load.name: twice[load.name]}
            for i in load.prep:
                view.update({n: name(f"{n}_t") for n in assigned_names(body[i]) if n not in view})
            for i in load.prep:
                twice_prep.setdefault(i, {}).update(view)
            read_twice[load.computed_as] = view[load.computed_as]
        elif load.twice:
            read_twice[load.name] = twice[load.name]
    # (a computed tile the dot reads transposed, `tl.dot(q, k.T)` with `k = k_0.to(...)`: the slot is read transposed
    # under `k_0_t`, the computation runs on that view, and the dot takes `k` as it is)
    # A tile that is the A operand of one dot and the B operand of another (`OperandLoad.sides`) is read from its slot
    # once in each operand's layout: in the first dot's under its own name, in the other's under `<name>_a` or
    # `<name>_b` (the operand it is there), which the dots that read it so take.
    sides: dict[str, str] = {}
    for load in plan.loads:
        if load.sides:
            other = 1 - feeds[load.name][1]
            sides[load.name] = name(f"{load.name}_{'ab'[other]}")
            for chain in plan.chains:
                if chain.position_of(load.name) == other:
                    body[chain.index] = body[chain.index].visit(
                        _OperandRenamed(other, load.name, sides[load.name]))
    transposed = {load.computed_as or load.name: load.computed_as or load.name for load in plan.loads
                  if load.transposed and not load.twice} | read_twice
    for chain in plan.chains:
        if transposed:
            body[chain.index] = _untransposed(body[chain.index], transposed)
        if not chain.acc_in_dot and not chain.fresh and not chain.scaled_product \
                and ctx.plan.dots[chain.call].scaled is None:
            # `acc += tl.dot(a, b)`: the addition folded into the MMA (where the types allow)
            ctx.need("dot_acc")
            body[chain.index] = _guarded(body[chain.index], lambda s, acc=chain.acc: _folded(s, acc))
        if chain.scaled_product:
            body[chain.index] = _guarded(body[chain.index], lambda s, acc=chain.acc: _fused(s, acc))

    # The MMA layout of a dot: its accumulator's, or (`acc += tl.dot(a, b)`, a fresh dot, a dot adding to this
    # iteration's product: latent attention's `qk = tl.dot(q_pe, k_pe, qk)`, whose `qk` the loop makes) the dot
    # result's
    made_in_loop = {chain.acc for chain in plan.chains if chain.fresh}

    def chain_mma(chain: DotChain) -> str:
        if chain.acc_in_dot and chain.acc not in made_in_loop:
            return f"{chain.acc}.type.layout"
        return ctx.plan.layout_expr(ctx.plan.dots[chain.call].result)

    def mma_of(load: OperandLoad) -> str:
        return chain_mma(feeds[load.name][0])

    # A dot operand held in registers that the loop does not assign (attention's Q) is converted to its MMA operand
    # layout once, before the loop, under a name of its own.
    assigned_in_loop = {n for statement in body for n in assigned_names(statement)}
    for chain in plan.chains:
        for position, held in enumerate(chain.operands):
            if held in rings or not held.isidentifier() or held in assigned_in_loop or held in op_renames:
                continue
            op_renames[held] = name(f"{held}_op")
            layout = chain_mma(chain)
            hoisted.append(f"{op_renames[held]} = gl.convert_layout({held}, gl.DotOperandLayout({position}, {layout}, "
                           f"_mma_k_width({held}.dtype, {layout})))")

    relaxed = engine == "async_copy" and pointer_copy is None

    def side_feed(load: OperandLoad, position: int) -> tuple[DotChain, int]:
        """The first dot that reads the tile `load` as its operand `position` (0: A, 1: B)."""
        return next((chain, position) for chain in plan.chains if chain.position_of(load.name) == position)

    def form_feed(load: OperandLoad, transposed: bool) -> tuple[DotChain, int]:
        """The first dot that reads the tile `load` in that form (as loaded, or transposed), and where."""
        return next((chain, position) for chain in plan.chains for position, held in enumerate(chain.operands)
                    if held == load.name and chain.transposed[position] == transposed)

    def read_layout(load: OperandLoad, feed: tuple[DotChain, int] | None = None) -> str:
        """The layout a slot is read in: the MMA operand's (a computed operand's: the one its computation runs in,
        for the operand's element type, `LayoutAnalysis.operand_anchors`)."""
        if load.computed and not load.computed_as:
            return ctx.plan.layout_expr(ctx.plan.loads[load.call].term)
        if feed is not None:  # (a tile read in two forms: each in the layout of the dot that reads it so)
            mma = chain_mma(feed[0])
            return f"gl.DotOperandLayout({feed[1]}, {mma}, _mma_k_width({rings[load.name]}.dtype, {mma}))"
        chain, position = feeds[load.name]
        scaled = ctx.plan.dots[chain.call].scaled
        if scaled is not None:  # a scaled dot's operands and scales, in the layouts its instruction reads them in
            ctx.need("scaled_layouts")
            fmt = code(scaled[1] if position in (0, 2) else scaled[3])
            if position >= 2:
                return f"_scale_layout({position - 2}, {mma_of(load)}, [{', '.join(shapes[load.name])}], {fmt})"
            return f"_scaled_operand_layout({position}, {mma_of(load)}, {fmt})"
        return (f"gl.DotOperandLayout({feeds[load.name][1]}, {mma_of(load)}, _mma_k_width({rings[load.name]}.dtype, "
                f"{mma_of(load)}))")

    def read_line(load: OperandLoad, slot_expr: str, pad: str) -> str:
        """The tile `load` read from slot `slot_expr` into its operand name, in the layout its dot reads it in."""
        return f"{pad}{operand[load.name]} = {_read(_view(f'{rings[load.name]}.index({slot_expr})', load), relaxed)}" \
               f"{read_layout(load)})"

    def reads(slot_expr: str, pad: str, computed: bool | None = None) -> list[str]:
        """The operands of the dots from ring slot `slot_expr`, in the MMA operand layouts (`computed`: only the
        tiles of computed operands, or only the others)."""
        lines = []
        for load in plan.loads:
            if computed is not None and load.computed != computed or load.name in late:
                continue
            slot = f"{rings[load.name]}.index({slot_expr})"
            if load.sides:
                first = feeds[load.name][1]
                lines += [f"{pad}{operand[load.name]} = {_read(slot, relaxed)}"
                          f"{read_layout(load, feeds[load.name])})",
                          f"{pad}{sides[load.name]} = {_read(slot, relaxed)}"
                          f"{read_layout(load, side_feed(load, 1 - first))})"]
                continue
            if load.twice:
                lines += [f"{pad}{operand[load.name]} = {_read(slot, relaxed)}{read_layout(load, form_feed(load, False))})",
                          f"{pad}{twice[load.name]} = {_read(f'{slot}.permute([1, 0])', relaxed)}"
                          f"{read_layout(load, form_feed(load, True))})"]
                continue
            lines.append(read_line(load, slot_expr, pad))
        return lines

    def consumed(i: int, pad: str, steady: bool = False) -> str:
        """Statement `i` of the body as the consumer runs it (operands under their slot-read names; `steady`: a where
        whose mask holds there without it)."""
        statement = steady_statements.get(i, body[i]) if steady else body[i]
        text = rename(statement, op_renames) if op_renames else code(statement)
        if i in twice_prep:  # (and its copy on the transposed view of the slot)
            text = text.rstrip("\n") + "\n" + rename(statement, {**op_renames, **twice_prep[i]})
        return indent(text, pad)

    def prepare(iteration: str, pad: str) -> list[str]:
        """The computed operands of `iteration`, from its tiles just read."""
        lines = [f"{pad}{plan.var} = {index(iteration)}"] if prep_uses_var else []
        return lines + [consumed(i, pad) for i in prep]

    def consume(iteration: str, pad: str, slot_expr: str, steady: bool = False) -> list[str]:
        """The consumer's statements for `iteration`, whose tiles are in slot `slot_expr`; `steady`: with the masks
        that hold on the steady state's iterations left out."""
        lines = [f"{pad}{plan.var} = {index(iteration)}"] if uses_var else []
        run: list[str] = []  # consecutive statements of the computation, run here where it is not in `mem`
        pending = [load for load in plan.loads if load.name in late]  # (read right before their first reader)
        order = [i for i in consumer if not (steady and i in unmasked)]
        inside = [i for i in order if i in guarded]
        if inside:
            # The iteration guard's statements run as one block under its test, as the source runs them; the slot
            # reads and operand computations among them (pure: tiles and values from before the loop) go before it,
            # so that every wave keeps the ring's count and the block is not split
            at = order.index(inside[0])
            first = [i for i in inside if i in prep]
            order = [i for i in order[:at] if i not in guarded] + first + [-1] + [
                i for i in order[at:] if i not in guarded]
            pending_first = [load for load in pending if any(
                {load.name, operand[load.name]} & names_in(body[i]) for i in inside)]
        for i in order:
            if i == -1:
                for load in pending_first:
                    pending.remove(load)
                    lines.append(read_line(load, slot_expr, pad))
                if run:
                    lines += [f"{pad}if not {in_mem}:", *run]
                    run = []
                lines.append(f"{pad}if {guard_test}:")
                lines += [consumed(j, pad + "    ", steady) for j in inside if j not in prep]
                continue
            for load in [load for load in pending if {load.name, operand[load.name]} & names_in(body[i])]:
                pending.remove(load)
                lines.append(read_line(load, slot_expr, pad))
            statement = consumed(i, pad, steady)
            if i in prep:
                run.append(indent(statement, "    "))
                continue
            if run:
                lines += [f"{pad}if not {in_mem}:", *run]
                run = []
            lines.append(statement)
        return lines + ([f"{pad}if not {in_mem}:", *run] if run else [])

    wait = WAITS[engine]
    shapes = {load.name: ring.shape for load, ring in zip(plan.loads, sp.rings)}
    slots = (f"_ring_slots({sp.lds_limit}, {sp.slots}, "
             + ", ".join(f"[{', '.join(shapes[load.name])}], {dtypes[load.name]}" for load in plan.loads) + ")")
    layout_fn = {"registers": "_lds_layout", "buffer_loads": "_lds_layout", "async_copy": "_lds_copy_layout",
                 "tdm": "_lds_tdm_layout"}[engine]
    # (a transposed B slot holds its tile K-contiguous, as an A slot does: laid out as operand 0)
    layouts = {load.name: f"{layout_fn}([{', '.join(shapes[load.name])}], {dtypes[load.name]}, "
                          f"{0 if load.transposed else feeds[load.name][1]})"
               for load in plan.loads}
    for load in plan.loads:
        if load.name in desc_copy_layouts:
            # (a B tile stored K-major from registers: two K rows a lane, so that its stores pack K pairs)
            rows = 2 if feeds[load.name][1] == 1 and not load.transposed and ctx.target.warp_size == 64 else 1
            ctx.need("copy_layout")
            ctx.need("desc_buffer_load")
            hoisted.insert(0, f"{desc_copy_layouts[load.name]}: gl.constexpr = _copy_layout([{', '.join(shapes[load.name])}], "
                              f"{dtypes[load.name]}, gl.num_warps(){', 2' if rows == 2 else ''})")
    if engine in POINTER_COPIES or sp.register_copies:
        # The addresses and masks of the pointer tiles' copies are re-evaluated in 16-byte copy layouts
        # (`transpile.rules.copy_operands`, after the layout declarations); through registers, those of the tiles a
        # dot operand is computed from, in a copy layout along each tile's contiguous axis.
        for load in plan.loads:
            k = feeds[load.name][1]
            if engine == "registers" and load.name in sp.register_copies:
                ctx.copy_rings[rings[load.name]] = (", ".join(shapes[load.name]), dtypes[load.name], 1,
                                                    sp.register_copies[load.name])
            elif load.kind == "pointer" and engine in POINTER_COPIES:
                # (a B tile stored K-major from registers: two K rows a lane, so that its stores pack K pairs;
                # measured on gfx942, heavier on gfx1250's 32-lane waves)
                rows = 2 if engine == "buffer_loads" and k == 1 and not load.transposed \
                    and ctx.target.warp_size == 64 else 1
                ctx.copy_rings[rings[load.name]] = (", ".join(shapes[load.name]), dtypes[load.name], rows, 1)
                if load.name in sp.aligned_at_run_time:
                    ctx.aligned_at_run_time[rings[load.name]] = sp.aligned_at_run_time[load.name]
    lines = [
        *(f"{rings[load.name]} = gl.allocate_shared_memory({dtypes[load.name]}, [{stages}, "
          f"{', '.join(shapes[load.name])}], {layouts[load.name]})" for load in plan.loads),
        *(f"{tdm_descs[load.name]} = tdm.make_tensor_descriptor({load.descriptor}[0], [{load.descriptor}[1], "
          f"{load.descriptor}[2]], [{load.descriptor}[3], 1], [{', '.join(shapes[load.name])}], {layouts[load.name]})"
          for load in plan.loads if engine == "tdm"),
        *(["# Where the computed operands are computed: in `mem`, for the next iteration, from tiles of fewer than "
           "16 bits", "# (carried raw across the stage boundary, such a tile would be unpacked a byte a register), "
           "else in `mma`.",
           f"{in_mem}: gl.constexpr = " + " or ".join(f"{rings[load.name]}.dtype.primitive_bitwidth < 16"
                                                      for load in plan.loads if load.computed)] if prep else []),
        *hoisted,
        f"{iters} = {count}",
        *([f"# The first {full} iterations' tiles lie wholly inside the bounds their masks test along K: the",
           "# steady state copies them unmasked.", f"{full} = gl.minimum({iters}, {peel.count})"] if peel is not None else []),
        *_steady_bound(uniform, full, full if peel is not None else iters, peel.count if peel is not None else None),
        *(f"{renames[name_]} = {name_}" for name_ in plan.carried),
        f"# Prologue: the copies of the first {'NUM_STAGES - 1' if late else 'NUM_STAGES'} iterations, one slot each"
        + (", then the loads of the next one." if prefetch else "."),
        f"for {prologue_i} in gl.static_range({ahead}):\n" + "\n".join(
            producer(prologue_i, prologue_i, "    ") + (store_staged(prologue_i, "    ") if prefetch else [])),
        *(producer(stages, "", "") if prefetch else []),
    ]
    if wait is not None:
        lines.append(wait.format(n=minus(1)) + "  # the first iteration's copies have landed")
    lines += reads("0", "")
    if prep:
        lines += [f"if {in_mem}:", *prepare("0", "    ")]

    def step(iteration: str, slot: str, next_slot: str, pad: str, staged: bool) -> list[str]:
        """One iteration: the wait for the copies of the next one, the MMA (and the rest of the body) on operands
        in registers, then the next iteration's operands from the ring and the copies of iteration + NUM_STAGES into
        the slot this one was read from. `staged`: in the two warp-pipeline stages, with no copy past the end (the
        steady state); else plain statements, copies past the end masked off (the last iterations)."""
        lines = [f"{pad}" + wait.format(n=minus(2))] if wait is not None else []
        grouped = staged and sp.groups == 2  # (in `warp_pipeline_stage` blocks)
        if staged and sp.groups == 1:
            # (every wave's copies of the next iteration have landed, and every wave has read the slot refilled below)
            lines.append(f"{pad}_cta_barrier()")
        work = consume(iteration, pad + "    " if grouped else pad, slot, steady=staged)
        inner = pad + "    " if grouped else pad
        next_operands = reads(next_slot, inner)
        if prep and staged:  # (the steady state never reaches the last iteration)
            next_operands += [f"{inner}if {in_mem}:", *prepare(f"({iteration} + 1)", inner + "    ")]
        elif prep:  # no computation (nor its loads) for an iteration past the end; the raw tile read with it, so
            # that the operand's name holds one type on both sides of the branch
            deeper = inner + "        "
            next_operands = [*reads(next_slot, inner, computed=False), f"{inner}if {in_mem}:",
                             f"{inner}    if ({iteration} + 1) < {iters}:", *reads(next_slot, deeper, computed=True),
                             *prepare(f"({iteration} + 1)", deeper), f"{inner}else:",
                             *reads(next_slot, inner + "    ", computed=True)]
        # (prefetching: the tiles of iteration + NUM_STAGES, loaded a step ago, are stored; then the loads of the
        # one after)
        later = f"({iteration} + {stages} + 1)" if prefetch else f"({iteration} + {ahead})"
        # (with late reads the other warp group, a stage behind, still reads this iteration's slot: the refill goes
        # into the slot read a step earlier)
        refilled = (f"({slot} + {ahead}) % {stages}" if staged else f"({iteration} + {ahead}) % {stages}") if late \
            else slot

        def run(op: str) -> list[str]:
            if op == "consume":
                return work
            if op == "operands":
                return next_operands
            if op == "store_staged":
                return store_staged(slot, inner) if prefetch else []
            if op == "refill":
                return producer(later, refilled, inner, guard=not staged)
            raise ValueError(f"unknown op {op!r} in a warp-pipeline stage")

        for stage in sp.stages:  # the stages in the plan's order, each running its ops in order
            if grouped:
                lines.append(f'{pad}with gl.amd.warp_pipeline_stage("{stage.label}", priority={stage.priority}):')
            lines += [line for op in stage.ops for line in run(op)]
        return lines

    rounds = name("num_rounds")
    top = ([
        "# Steady state, unrolled by the ring depth so that every slot index is a constant; the wait at the top of each",
        "# step precedes the barrier at that stage boundary, so both warp groups' copies of the next iteration have",
    ] if sp.groups == 2 else [
        "# Steady state, unrolled by the ring depth so that every slot index is a constant; the wait and the barrier at",
        "# the top of each step: every wave's copies of the next iteration have landed, and no wave still reads the",
        "# slot this step refills. Its copies are never past the end"
        + (" nor in the K tail" if peel is not None else "")
        + (", and none needs the masks it leaves out" if uniform else "") + ": the last rounds run below.",
    ])
    loop = [
        *top,
        *(["# landed. Its copies are never past the end"
           + (" nor in the K tail" if peel is not None else "")
           + (", and none needs the masks it leaves out" if uniform else "") + ": the last rounds run below."]
          if sp.groups == 2 else []),
        # (prefetching, the last step's loads are of iteration (round + 1) * NUM_STAGES: one iteration fewer)
        f"{rounds} = ({full if bounded else iters} - 1) // {stages} - 1" if prefetch else
        f"{rounds} = {full if bounded else iters} // {stages} - 1",
        *(["# (One round, which a trip count known when the kernel is compiled can give, is folded by the compiler",
           "# into straight-line code; two loops so folded put the first one's last iterations, a loop, between",
           "# warp-pipeline stage borders, which Triton's warp pipeliner rejects. A loop after another",
           "# warp-pipelined loop runs such a round below.)",
           f"if {rounds} == 1:", f"    {rounds} = 0"] if sp.groups == 2 and after else []),
        f"for {rnd} in range({rounds}):",
        f"    for {step_} in gl.static_range({stages}):",
        f"        {it} = {rnd} * {stages} + {step_}",
        *step(it, step_, f"({step_} + 1) % {stages}", "        ", staged=True),
    ]
    lines.append("\n".join(loop))
    tail = [
        "# The last iterations (NUM_STAGES to 2 * NUM_STAGES - 1 of them"
        + (", and those that need the masks" if uniform else "") + "), their copies past the end masked off.",
        f"for {it} in range(gl.maximum({rounds}, 0) * {stages}, {iters}):",
        *step(it, f"{it} % {stages}", f"({it} + 1) % {stages}", "    ", staged=False),
    ]
    if wait is not None:
        tail.append(wait.format(n="0") + "  # no copy is left in flight after the loop")
    lines.append("\n".join(tail))
    if plan.advanced:
        lines += ["# The pointers the code after the loop reads, where the loop leaves them (the copies advanced their "
                  "own).", *advance_after(plan, iters)]
    pipelined = indent("\n".join(lines), "    ")
    original = indent(code(updated), "    ")
    how = {
        "registers": "loads the tiles of iteration it + NUM_STAGES into registers and stores them into the slot "
                     "iteration it was read from",
        "buffer_loads": "loads the tiles of iteration it + NUM_STAGES into registers (16-byte buffer loads) and stores "
                        "them into the slot iteration it was read from",
        "async_copy": "starts direct-to-LDS copies of the tiles of iteration it + NUM_STAGES into the slot iteration "
                      "it was read from (one commit group per iteration)",
        "tdm": "starts one fused TDM copy of the tiles of iteration it + NUM_STAGES into the slot iteration it was "
               "read from (warps 0-3 copy A, warps 4-7 copy B)",
    }[engine]
    if late:
        how = how.replace("it + NUM_STAGES into the slot iteration it was", "it + NUM_STAGES - 1 into the slot iteration "
                          "it - 1 was")
    paragraph = (
        "Main loop, warp-pipelined by triton-transpile: two warp groups of 4 warps run the two stages below one stage "
        "apart, so that one group's memory traffic overlaps the other's MMAs (s_setprio favours the memory stage). "
        "The operands of each iteration are read from a ring of NUM_STAGES LDS slots one step ahead: `mma` runs "
        f"iteration it's MMA on operands already in registers; `mem` reads iteration it + 1's operands and {how}. "
        "Tiles past the end read as zeros and are never used."
    ) if sp.groups == 2 else (
        "Main loop, software-pipelined by triton-transpile over a ring of NUM_STAGES LDS slots, its copies issued "
        f"NUM_STAGES iterations ahead. Every wave runs each step in order (one warp group: {sp.barrier_op} needs a "
        "CTA-wide barrier, which two groups a stage apart could not share): the MMA (and the rest of the body) on "
        f"operands already in registers, then iteration it + 1's operands from the ring, then the step {how}. Tiles "
        "past the end read as zeros and are never used."
    )
    if late:
        names = " and ".join(f"`{n}`" for n in sorted(late))
        paragraph += (f" {names} {'is' if len(late) == 1 else 'are'} read "
                      "in `mma` instead, from the slot of the iteration itself, right before the dot that reads it: "
                      "held from one step to the next across the stage boundary, the next iteration's tiles would "
                      "double the registers each 32-lane wave needs.")
    rows_test = rows_why = ""
    if sp.warps_along_m:  # (the row reductions inside a warp: 16 rows a warp at least, the MMA instruction's)
        rows, cols = (str(d) for d in ctx.plan.dots[plan.chains[0].call].shape)
        rows_test = f" and {_factor(rows)} >= 16 * gl.num_warps()"
        rows_why = ", or the warps do not each own 16 rows (the loop's row reductions would cross warps)"
        fewest = ROW_FORM_MIN_COLUMNS.get(ctx.target.name)
        if fewest is not None:
            rows_test += f" and {_factor(cols)} >= {fewest}"
            rows_why += f" or their {fewest} columns at least"
        paragraph += (" Every warp owns rows of its own (the MMA layout puts all warps along M), so the loop's row "
                      "reductions are lane shuffles inside a warp: the `mma` stage needs no barrier.")
    if plan.attention and sp.groups == 2:  # (every warp along M: 16 rows a warp at least, the MMA instruction's)
        rows, keys, head = _attention_sizes(ctx, sp)
        rows_test = (f" and {_factor(rows)} >= 16 * gl.num_warps() and {_tile_factor(sp)}{_factor(keys)} * "
                     f"{_factor(head)} <= {ATTENTION_TILE_LIMIT[ctx.target.name]}")
        rows_why = ", the warps do not each own 16 rows, or the K and V tiles each warp holds would spill"
        paragraph += (" Attention: every warp owns rows of its own (the MMA layout puts all warps along M), so the "
                      "softmax's row reductions are lane shuffles and P reaches the second MMA's operand layout in "
                      "registers: the `mma` stage needs no barrier.")
    header = [
        *textwrap.wrap(paragraph, 114, initial_indent="# ", subsequent_indent="# "),
        *([f'gl.static_assert(gl.num_warps() == {PIPELINE_WARPS}, "the warp-pipelined main loop needs num_warps='
           f'{PIPELINE_WARPS}: "\n                 "two warp groups of 4 warps alternate between its stages")']
          if sp.groups == 2 else []),
        f"{stages}: gl.constexpr = {slots}",
        f"if {stages} >= {3 if late else 2}{rows_test}:",
        pipelined,
        "else:",
        f"    # {'Three' if late else 'Two'} slots per operand do not fit the {sp.lds_limit // 1024} KiB of LDS with "
        "these block sizes"
        f"{rows_why}: the loop runs as translated.",
        original,
    ]
    return "\n".join(header) + "\n"


def _constant_trips(ctx: RuleContext, plan: LoopPlan) -> str | None:
    """The loop's trip count as constexpr arithmetic (`(K + BK - 1) // BK` of `range(tl.cdiv(K, BK))`), where its
    range reads only constexpr parameters and literals; else None."""
    constexprs = set(ctx.function.constexpr_names)

    def text(node: cst.BaseExpression) -> str | None:
        node = unparenthesized(node)
        if isinstance(node, cst.Integer):
            return node.value
        if isinstance(node, cst.Name):
            return node.value if node.value in constexprs else None
        if isinstance(node, cst.BinaryOperation) and isinstance(
                node.operator, (cst.Add, cst.Subtract, cst.Multiply, cst.FloorDivide)):
            left, right = text(node.left), text(node.right)
            op = {cst.Add: "+", cst.Subtract: "-", cst.Multiply: "*", cst.FloorDivide: "//"}[type(node.operator)]
            return f"({left} {op} {right})" if left is not None and right is not None else None
        if isinstance(node, cst.Call) and code(node.func).split(".")[-1] == "cdiv" and len(node.args) == 2 \
                and all(a.keyword is None for a in node.args):
            x, y = text(node.args[0].value), text(node.args[1].value)
            return f"(({x} + {y} - 1) // {y})" if x is not None and y is not None else None
        return None

    args = [text(a) for a in plan.range_args]
    if not args or len(args) > 3 or None in args:
        return None
    start, stop, step = (("0", args[0], "1") if len(args) == 1 else (args[0], args[1], "1") if len(args) == 2
                         else tuple(args))
    if step == "1":
        return f"({stop} - {start})" if start != "0" else stop
    return f"(({stop} - {start} + {step} - 1) // {step})"


def _steady_masks(ctx: RuleContext, plan: LoopPlan, consumer: list[int], additive: bool = True
                  ) -> list[tuple[UniformMask, list[tuple[str | None, str]]]]:
    """The consumer's uniform masks (`loop_uniform_masks`) whose every term holds on a number of leading iterations
    (`leading_iterations`), each with those counts: (the constexpr flag that adds the terms, or None; the count)."""
    found = []
    for mask in loop_uniform_masks(ctx.source, ctx.function, set(name_terms(ctx.plan)), plan.loop, plan.var,
                                   consumer, additive=additive):
        guards = list(dict.fromkeys(g for g, _ in mask.terms))
        counts = [(g, leading_iterations(ctx.function, plan, [t for h, t in mask.terms if h == g])) for g in guards]
        if all(count is not None for _, count in counts):
            found.append((mask, counts))  # type: ignore[arg-type]
    return found


def _steady_bound(uniform: list[tuple[UniformMask, list[tuple[str | None, str]]]], full: str, start: str,
                  peeled: str | None) -> list[str]:
    """The lines that bound the steady state (`full` iterations, `start` before the masks) by the uniform masks'
    counts, `num_full = gl.minimum(num_full, <count>)`, under `if FLAG:` for the terms a constexpr flag adds
    (`peeled`: the K-tail peel's count, which bounds it already)."""
    if not uniform:
        return []
    targets = ", ".join(f"`{mask.target}`" for mask, _ in uniform)
    lines = [f"# The masks of {targets} hold on every element of the first {full} iterations' tiles: the steady state",
             "# leaves them out, and the iterations that need them run below."]
    if start != full:
        lines.append(f"{full} = {start}")
    for _, counts in uniform:
        for guard, count in counts:
            if guard is None and count != peeled:
                lines.append(f"{full} = gl.minimum({full}, {count})")
            elif guard is not None:
                lines += [f"if {guard}:", f"    {full} = gl.minimum({full}, {count})"]
    return lines


def _without_terms(statement: cst.BaseStatement, load: OperandLoad, drop: tuple[int, ...],
                   expanded: tuple[cst.BaseExpression, ...] | None = None) -> cst.BaseStatement:
    """The load `statement` with the terms `drop` of its mask left out (its `other` too, where none is left); as
    written where its mask does not have the source's terms. `expanded`: the mask's terms where the peel expanded a
    name the kernel binds to several (`TailPeel.terms`)."""
    line = statement.body[0]  # type: ignore[attr-defined]
    call = line.value
    args = list(call.args)
    at = mask_index(args)
    if at is None or load.mask is None:
        return statement
    terms = conjuncts(args[at].value)
    if len(terms) != len(conjuncts(load.mask)):
        return statement
    if expanded is not None:
        terms = [t.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                 if isinstance(t, (cst.Comparison, cst.BinaryOperation, cst.BooleanOperation)) and not t.lpar else t
                 for t in expanded]
    kept = [t for i, t in enumerate(terms) if i not in drop]
    if len(kept) > 1:  # (terms joined by `&` again: a comparison among them in parentheses, `(a != 0) & (k >= 0)`)
        kept = [t.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                if isinstance(t, (cst.Comparison, cst.BinaryOperation, cst.BooleanOperation, cst.UnaryOperation))
                and not t.lpar else t for t in kept]
    if kept:
        mask = kept[0] if len(kept) > 1 or expanded is None else kept[0].with_changes(lpar=[], rpar=[])
        for term in kept[1:]:
            mask = cst.BinaryOperation(mask, cst.BitAnd(), term)
        args[at] = args[at].with_changes(value=mask)
    else:
        args = [a for i, a in enumerate(args) if i != at and not (a.keyword is not None and a.keyword.value == "other")
                and not (a.keyword is None and i > at)]
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return statement.with_changes(body=[line.with_changes(value=call.with_changes(args=args))])


#: Targets on which a dot operand computed from a loaded tile of fewer than 16 bits is computed in the `mem` stage, for
#: the next iteration, right after its tile is read from the ring (wider tiles: in the `mma` stage, a compile-time
#: choice in the variant): the MMA stage then gets its operands in registers as for a plain tile load (a raw 8-bit
#: tile carried across the stage boundary is unpacked a byte a register), and the computation overlaps the other warp
#: group's MMAs. gfx950, non-MFMA instructions per MFMA against Triton's own compile: int8 weights scaled to fp16
#: (bc_dequant_matmul) 0.67-0.81x in `mem`, 0.88-1.09x in `mma`; int16 cast to bf16 (tritonbench's bf16xint16 GEMM)
#: 1.07-1.43x in `mem`, 0.84-0.93x in `mma`. gfx942 (copies through registers, prefetched in `mem`): int8 0.84-0.92x
#: in `mma`, 0.94-1.64x with spills in `mem`. bench/RESULTS.md.
PREP_IN_MEM_STAGE = ("gfx950",)


#: Element types whose launches run the source kernel where a dot's product is added to an accumulator of a type the
#: kernel does not name (`DotChain.integer_sum`: aiter's `gemm_a8w8`, float32 unless the output is int8): 8-bit integer
#: operands make an int32 product added apart from the MMA each iteration, which spilled (gfx950, 256x128x64: 10
#: scratch instructions in the hot loop, 1.23x Triton's own non-MFMA instructions per iteration) where Triton's own
#: compile spills none; fp8 operands fold into the MFMA (0.73x at 256x128x64, 0.77x at 128x128x128).
INTEGER_SUM_SLOW_DTYPES = ("int8", "uint8")

#: Element types (torch's names) for which a ring with a computed operand (`OperandLoad.computed`) has not measured
#: lighter than Triton's own compile: fp8 codes; and 8-bit integer codes where the warps are not laid along the
#: computed operand's axis (`_computed_across_warps`): cast to a 16-bit type they measured 1.09x at 128x128x64 on
#: gfx950 and 1.09x at 64x64x64 on gfx942 with the warps split between M and N, and with every warp along the computed
#: operand's axis (`_mma_layout`'s `computed_operand`) 0.90-0.91x and 0.58-1.00x, scaled as well (bc_dequant_matmul)
#: 0.51-0.73x and 0.64-0.84x (bench/RESULTS.md). The launcher runs the source kernel for launches with tensors of
#: these types.
COMPUTED_SLOW_DTYPES = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
#: ... and, by target, the element types of a tile an operand is computed from whose launches run the source kernel
#: (`"param=type"` in the launcher's `slow_dtypes`: that tile's tensor alone): gfx942's ring computing a bf16 B from
#: fp32 states (mamba's `_chunk_state_bwd_dx_kernel`) measured 1.40x Triton's own non-MFMA instructions per iteration
#: at 128x128x64 (0.61-0.77x at 128x64x64 and 64x128x32; gfx950 0.73-0.78x, gfx1250 0.52-0.72x), as fp32 tiles cast
#: to fp16 did in its both-operand form (1.14x at 64x64x64): bench/RESULTS.md.
COMPUTED_TILE_SLOW_DTYPES = {"gfx942": ("float32",)}


#: Element types (torch's names) for which a target's warp-pipelined ring measured heavier than Triton's own compile
#: (bench/RESULTS.md): gfx942 takes OCP fp8 only converted through fp16 (four public fp8 GEMMs: 1.09-1.18x Triton's
#: non-MFMA instructions per MFMA); gfx1250 the fnuz fp8 kinds only converted through fp16 (1.11x on a 128x128x64
#: GEMM; its int8 rings, 1.12-1.23x with copies through registers, measure 0.48-0.63x with direct-to-LDS copies). The
#: launcher runs the source kernel for launches with such tensors.
SLOW_DTYPES = {"gfx942": ("float8_e4m3fn", "float8_e5m2"), "gfx1250": ("float8_e4m3fnuz", "float8_e5m2fnuz")}


#: Targets whose ring of several dots (a gated GEMM's gate and up products) measured heavier than Triton's own compile
#: for some config where a dot reads a tile transposed (a linear layer's [N, K] weights, `tl.dot(x, tl.trans(w))`;
#: bench/RESULTS.md): such loops stay kept as Triton there, with this reason. Triton pairs that tile's LDS reads
#: (`ds_read2_b64` from an unswizzled slot, transposed in registers), which the ring's swizzled slots do not; with
#: the tiles read as loaded ([K, N]) the same ring measured 0.19-0.85x (suite_swiglu_gemm, fx_two_gemms, and
#: suite_gated_linear with its weights read [K, N], from 32x64x64 to 256x128x32).
SEVERAL_DOTS_HEAVIER = {
    "gfx942": "on gfx942 that ring of 16-byte buffer loads measured 1.02-1.50x Triton's own non-MFMA instructions per "
              "MFMA at 8 warps (suite_gated_linear at 32x64x64, 64x64x32, 64x64x64, 128x128x32 and 256x128x32; 0.54-0.60x "
              "at 128x64x64 and 128x64x32): bench/RESULTS.md",
}


#: The most elements of a K (and V) tile the warp-pipelined attention loop takes per target: every warp reads the whole
#: K and V tiles of the next iteration into registers (all warps lie along M), so larger tiles spill. Measured on the
#: fixtures (8 warps, 128 rows, fp16, no AGPRs): gfx950 64x128 none, 128x128 350 VGPR spills (fx_attention_varlen);
#: gfx942 (whose copies are staged through registers too) 64x64 none, 64x128 148-248 (attention_fwd, fx_attention_kt
#: at head dimension 128); gfx1250 64x64 0.55-0.74x Triton's own non-MFMA instructions per loop iteration, 64x128
#: 0.80-0.82x without a causal mask (356-510 VGPRs against 234-246: 2 waves a SIMD against 4). Launches and autotune
#: configs above the limit run the source kernel.
ATTENTION_TILE_LIMIT = {"gfx950": 8192, "gfx942": 4096, "gfx1250": 4096}
# A GEMM loop with every warp along M for its row reductions (`StagePlan.warps_along_m`): the fewest accumulator
# columns for which each warp's share (16 rows x N) gives its MMAs work enough to hide the B tile every warp reads in
# full. Measured at 128 rows, 8 warps, bf16: N 32 1.92x (gfx950) and 1.39x (gfx942) Triton's own non-MFMA
# instructions per loop iteration, N 64 0.76x and 0.48x, N 128 0.77-0.84x and 0.63-0.81x; aiter's mHC kernel at N 32
# 2.30x and 1.98x (gfx1250: 0.58-0.69x at any N, no limit). Launches with fewer columns run the source kernel.
ROW_FORM_MIN_COLUMNS = {"gfx950": 64, "gfx942": 64}
# A loop holding several accumulators (a gated MLP's gate and up products) or a scaled dot: the most 32-bit registers
# a lane may hold for its accumulators ([M, N] fp32 each) and one step of its operand tiles (the `mem` stage reads the
# next step's while the `mma` stage uses this one's: 2 bytes an element, 1 for a scaled dot's) before the pipelined
# loop spills where Triton's own compile spills less. Measured at 8 warps: suite_swiglu_gemm (two accumulators) at
# 256x256x32 needs 280 (gfx950, 64 lanes: 1197 spills, the source 545; ratio 1.10) and 560 (gfx1250, 32 lanes: 1553,
# the source 597; 1.17), at 128x128x64 88 and 176 (no spills, 0.67 and 0.61); suite_mx_gemm on gfx1250 takes e2m1 at
# 256x256x128 (288: no spills) but not e4m3 (320: 213 spills, the source none); on gfx950 at 160 (e4m3 at
# 256x256x128) both compiles spill, the variant about as much (150 / 128). A loop of one plain accumulator is not
# tested: every GEMM fixture at 256x256x32 spills no more than its source (bench/RESULTS.md).
REGISTER_LIMIT = {"gfx950": 192, "gfx942": 192, "gfx1250": 300}
# A loop of chained dots (attention's backward: `DotChain.chained`), every warp along M: the most 32-bit registers a
# lane may hold for its accumulators, the operands held in registers across the loop (K and V), the products made
# each iteration (fp32), all split over the warps, and the ring tiles read as B operands, which every warp reads
# whole (once per form: Q and dO are read as loaded and transposed). Measured on suite_attention_bwd (8 warps, fp16;
# BLOCK_M x BLOCK_N x HEAD_DIM, the estimate, then VGPR spills variant / source): gfx950 32x128x64 128 (0 / 0),
# 64x128x64 208 (0 / 47), 32x128x128 240 (8 / 51), 64x128x128 384 (711 / 211); gfx1250 32x128x64 256 (0 / 0),
# 64x128x64 416 (0 / 0), 32x128x128 480 (122 / 0), 64x128x128 832 (1849 / 24). Launches above run the source kernel.
CHAINED_REGISTER_LIMIT = {"gfx950": 256, "gfx1250": 448}
# A loop whose dot's product is scaled before it is added (`DotChain.scaled_product`, block-scaled GEMMs): the same
# estimate with the product beside the accumulator, a scale per row and column, and the operand tiles four times (each
# is read whole by the warps along the other axis: 2 or 4 of the 8) and twice more where copied through registers
# (staged, then stored). Measured on lightllm's block-scaled fp8 GEMM (8 warps, K block 128; the estimate, then the
# variant's VGPR spills, the source having none): gfx950 32x128 56 (0), 128x64 80 (0), 128x128 129 (0), 64x256 145
# (15), 256x128 225 (140); gfx942 (e4m3fnuz, buffer loads) 64x128 104 (0), 128x128 161 (18).
SCALED_PRODUCT_LIMIT = {"gfx950": 136, "gfx942": 136}


# The shallowest K block (in values) a scaled MMA takes, by its tiles: (both sides at least 32, either under 32).
# gfx950's scaled MFMAs are 32x32x64 and 16x16x128 (the layout takes 16x16 for tiles narrower than 32): a shallower
# block did not compile; gfx1250's 16x16x128 WMMA compiled from a K block of 64.
SCALED_MIN_K = {"gfx950": (64, 128), "gfx1250": (64, 64)}


def _scaled_tests(ctx: RuleContext, sp: StagePlan) -> list[tuple[str, tuple[tuple[str, str | None], ...]]]:
    """Launch tests under which a scaled-dot loop runs the source kernel: a format the scaled MMA does not take (a
    constexpr format, "bf16" on one launch and "e2m1" on another), a K block shallower than its instruction, scale
    rows of fewer than 4 bytes (no direct-to-LDS copy that narrow). Tests of names that are not constexpr parameters
    are left out."""
    tests: list[tuple[str, tuple[tuple[str, str | None], ...]]] = []

    def add(test: str) -> None:
        found = _launch_test(ctx, test)
        if found is not None:
            tests.append(found)

    for chain in sp.loop.chains:
        site = ctx.plan.dots[chain.call]
        if site.scaled is None:
            continue
        for fmt in (site.scaled[1], site.scaled[3]):
            if isinstance(fmt, cst.Name):
                add(f"{fmt.value} not in {SCALED_FORMATS}")
        m, n = site.shape
        scale = site.scale_shapes[0] or site.scale_shapes[1]
        low, narrow = SCALED_MIN_K.get(ctx.target.name, (64, 128))
        if m is not None and n is not None and scale and scale[-1] is not None:
            k = f"({scale[-1]}) * 32"
            add(f"{k} < {low} or ({k} < {narrow} and (({m}) < 32 or ({n}) < 32))" if narrow > low else f"{k} < {low}")
        for name in chain.scales:
            if name:
                ring = next(r for load, r in zip(sp.loop.loads, sp.rings) if load.name == name)
                add(f"({ring.shape[-1]}) < 4")
    return tests


def _register_test(ctx: RuleContext, sp: StagePlan) -> tuple[str, tuple[tuple[str, str | None], ...]] | None:
    """The launch test under which a loop of several accumulators, of a scaled dot or of a scaled product runs the
    source kernel (`REGISTER_LIMIT`, `SCALED_PRODUCT_LIMIT`). None for another loop, or where its tile sizes are not
    constexpr parameters."""
    chains = [c for c in sp.loop.chains if not c.fresh]
    products = any(c.scaled_product for c in chains)
    scaled = products or any(ctx.plan.dots[c.call].scaled is not None for c in chains)
    limit = SCALED_PRODUCT_LIMIT.get(ctx.target.name) if products else REGISTER_LIMIT.get(ctx.target.name)
    staged = products and prefetches(sp.engine, sp.loop.kind)  # (tiles held in registers a step: buffer loads)
    if sp.loop.attention or sp.loop.chained or limit is None or not (scaled or len(chains) > 1):
        return None
    terms: list[str] = []
    for chain in chains:
        m, n = ctx.plan.dots[chain.call].shape
        if m is None or n is None:
            return None
        terms.append(f"({m}) * ({n}) * 4")
        if chain.scaled_product:  # (the product scaled before it is added: beside the accumulator, and the scales,
            terms.append(f"({m}) * ({n}) * 4 + (({m}) + ({n})) * 4")  # a value per row and per column at least)
    # (the operand tiles: read from their slots; where copied through registers, also held on their way there)
    for load, ring in zip(sp.loop.loads, sp.rings):
        if sp.loop.use_of(load.name)[1] < 2:  # (a scaled dot's scales are a few bytes a row)
            factor = (6 if staged else 4) if products else 1 if scaled else 2
            terms.append(f"({') * ('.join(ring.shape)}) * {factor}")
    return _launch_test(ctx, f"{' + '.join(terms)} > {limit * 4 * PIPELINE_WARPS * ctx.target.warp_size}")


#: The most output elements (M * N) a launch of a dot whose two operands are computed from their loaded tiles
#: (`a = a.to(T)`, `b = b.to(T)`: a copy of the loop for mixed input types, FlagGems' `mm_kernel_general`) pipelines
#: at: each step casts both tiles in the MMA operand layouts, which at 256x128 cost more than the ring saves.
#: Non-MFMA instructions per loop iteration against Triton's own compile, 8 warps: gfx950 0.43-0.91x up to 128x128
#: (16-bit casts, fp32 tiles cast to fp16), 1.02-1.29x at 256x128x32 (bench/RESULTS.md, "Copies of a loop that cast
#: their operands"). gfx942 keeps the form as Triton (UNPROFITABLE_RINGS: 0.62-1.31x, heavier at some tile for
#: every type measured).
COMPUTED_PAIR_TILE_LIMIT = {"gfx950": 128 * 128}


def _computed_tile_test(ctx: RuleContext, sp: StagePlan, loop: cst.For
                        ) -> tuple[str, tuple[tuple[str, str | None], ...]] | None:
    """The launch test under which a loop with a dot of two computed operands runs the source kernel
    (`COMPUTED_PAIR_TILE_LIMIT`), and only where the loop runs: with the tests of the `if`s that choose it (an
    unswitched copy's flags) where a launcher can read them. None for another loop, or where the tile sizes are not
    constexpr parameters."""
    limit = COMPUTED_PAIR_TILE_LIMIT.get(ctx.target.name)
    pair = _computed_pair(sp.loop) if limit is not None else None
    if pair is None:
        return None
    m, n = ctx.plan.dots[pair.call].shape
    tile = _launch_test(ctx, f"{m} * {n} > {limit}") if m is not None and n is not None else None
    path = branch_path(ctx, loop)
    where = launch_terms(ctx, [(node, taken) for node, taken in path or [] if launch_evaluable(ctx, node.test)])
    if tile is None or where is None:
        return tile
    return f"({where[0]}) and {tile[0]}", tuple(dict.fromkeys((*where[1], *tile[1])))


def _source_below(ctx: RuleContext, size: str, bound: int) -> None:
    """Launches whose constexpr `size` (a tile dimension) is below `bound` run the source kernel; nothing where `size`
    is not a constexpr parameter (a literal the form was checked against already)."""
    constexprs = {p.name: p.default for p in ctx.function.params if p.is_constexpr}
    if size in constexprs:
        ctx.launch_source_when = tuple(dict.fromkeys((*ctx.launch_source_when, (
            f"{size} < {bound}", ((size, constexprs[size]),)))))


#: The fewest output elements (BLOCK_M * BLOCK_N) a launch of a descriptor GEMM needs for its ring, per target
#: (8 warps; non-MFMA instructions per MFMA against Triton's own compile, every fixture kernel and config, and
#: suite_decode_linear's decode tiles, K blocks of 128). gfx942 (buffer loads a step ahead): from 64 x 64 up
#: 0.20-0.75x; below, 0.46-0.62x (64 x 32, 32 x 64 with 2 warps) but 1.17x and 2.23x (32 and 16 decode rows).
#: gfx950 (buffer copies direct to LDS): from 32 x 64 up 0.34-0.72x; 0.99x at 16 x 64. Fewer outputs leave the
#: 8 warps of the warp pipeline too little MMA work a step for their copies.
DESCRIPTOR_RING_MIN_TILE = {"gfx942": 64 * 64, "gfx950": 32 * 64, "gfx1250": 64 * 64}


def _descriptor_divisible(ctx: RuleContext, sp: StagePlan
                          ) -> tuple[list[str], list[tuple[str, tuple[tuple[str, str | None], ...]]]] | str:
    """What a launch must vouch for before the direct-to-LDS copies of a loop's descriptor tiles (a lane's 16-byte
    vector is copied whole or not at all): the parameters to be multiples of 16 (each descriptor's row stride and last
    dimension, and parameters its column offsets add), and tests under which the source kernel runs (a constexpr
    factor of a column offset not a multiple of 16); or why no launch can (a descriptor made otherwise, its base not
    a pointer parameter, a stride, size or column offset computed in the kernel)."""
    params = {p.name for p in ctx.function.params if not p.is_constexpr}
    constexprs = {p.name: p.default for p in ctx.function.params if p.is_constexpr}
    names: list[str] = []
    tests: list[tuple[str, tuple[tuple[str, str | None], ...]]] = []
    for load in sp.loop.loads:
        tile = descriptor_tile(ctx.function, load.descriptor)
        at = f"the descriptor `{load.descriptor}` of the tile `{load.name}` (line {ctx.source.position(load.call)[0]})"
        if tile is None:
            return f"{at} is not made once by `tl.make_tensor_descriptor` with list arguments"
        # (a pointer parameter, or the slice of one at `(i) * stride`, as a sliced host descriptor is made
        # (`transpile.passes.host_descriptors`): the stride then a multiple of 16 too)
        sliced = re.fullmatch(r"(\w+) \+ \(([^()]*)\) \* (\w+)", tile.base)
        if sliced is not None and sliced.group(1) in params and sliced.group(3) in params:
            names.append(sliced.group(3))
        elif tile.base not in params:
            return f"{at} has the base `{tile.base}`, not a pointer parameter: no launch can vouch for its alignment"
        if tile.strides[1] != "1":
            return f"{at} has its last stride `{tile.strides[1]}`, not 1"
        for value in (tile.strides[0], tile.shape[1]):
            if value.isdigit() and int(value) % 16 == 0:
                continue
            if value not in params:
                return (f"{at} has a row stride or last dimension `{value}` that is not a parameter of the kernel: "
                        "no launch can vouch for its rows as 16-byte vectors, which its direct-to-LDS copies move "
                        "whole")
            names.append(value)
        offsets = load.call.args[0].value if load.call.args else None
        column = offsets.elements[1].value if isinstance(offsets, (cst.List, cst.Tuple)) \
            and len(offsets.elements) == 2 else None
        found = _multiple_of_16(ctx, sp, column, params, constexprs, 3) if column is not None else None
        if found is None:
            return (f"{at} is read at a column offset{f' `{code(column)}`' if column is not None else ''} that no "
                    "launch can vouch for as a multiple of 16 elements (a sum of a loop variable stepped by a block "
                    "size, block-size multiples and parameters)")
        names += found[0]
        tests += found[1]
    return list(dict.fromkeys(names)), list(dict.fromkeys(tests))


def _multiple_of_16(ctx: RuleContext, sp: StagePlan, node: cst.BaseExpression, params: set[str],
                    constexprs: dict[str, str | None], depth: int
                    ) -> tuple[list[str], list[tuple[str, tuple[tuple[str, str | None], ...]]]] | None:
    """Whether the offset `node` is a multiple of 16 at launches a launcher can check: each of its terms a product
    with a constexpr factor (launches where that factor is not a multiple of 16 run the source kernel), a
    parameter (to be a multiple of 16), a literal multiple of 16, the loop variable of a `range` from such a start
    by such a step, or a name assigned once to such an offset. (The parameters, the tests), or None."""
    names: list[str] = []
    tests: list[tuple[str, tuple[tuple[str, str | None], ...]]] = []
    loop = sp.loop.loop
    for term in sum_terms(node):
        factors = product_factors(term)
        block = next((f.value for f in factors if isinstance(f, cst.Name) and f.value in constexprs), None)
        if block is not None:
            tests.append((f"{block} % 16 != 0", ((block, constexprs[block]),)))
            continue
        if isinstance(term, cst.Integer) and int(term.value) % 16 == 0:
            continue
        if isinstance(term, cst.Name) and term.value in params:
            names.append(term.value)
            continue
        if isinstance(term, cst.Name) and isinstance(loop.target, cst.Name) and term.value == loop.target.value:
            span = [a.value for a in loop.iter.args if a.keyword is None] if isinstance(loop.iter, cst.Call) else []
            if len(span) != 3:
                return None
            for part in (span[0], span[2]):
                found = _multiple_of_16(ctx, sp, part, params, constexprs, depth - 1) if depth else None
                if found is None:
                    return None
                names += found[0]
                tests += found[1]
            continue
        definitions = [n.value for n in preorder(ctx.function.node) if isinstance(n, cst.Assign)
                       and len(n.targets) == 1 and isinstance(n.targets[0].target, cst.Name)
                       and isinstance(term, cst.Name) and n.targets[0].target.value == term.value]
        # (a name advanced in place, `off_k += BLOCK_K`: each increment a multiple as well)
        updates = [n for n in preorder(ctx.function.node) if isinstance(n, cst.AugAssign)
                   and isinstance(n.target, cst.Name) and isinstance(term, cst.Name) and n.target.value == term.value]
        if depth and len(definitions) == 1 and all(isinstance(n.operator, (cst.AddAssign, cst.SubtractAssign))
                                                   for n in updates):
            found = [_multiple_of_16(ctx, sp, value, params, constexprs, depth - 1)
                     for value in (definitions[0], *(n.value for n in updates))]
            if all(f is not None for f in found):
                names += [n for f in found for n in f[0]]  # type: ignore[index]
                tests += [t for f in found for t in f[1]]  # type: ignore[index]
                continue
        return None
    return names, tests


#: The least K depth of the dots of a loop that reads a tile as both an A and a B operand (`OperandLoad.sides`) for
#: its ring: FLA's KDA dA/dv backward (`chunk_kda_bwd_kernel_dAv`, bf16, BT 64, V 2048, 8 warps) measured 0.87x
#: Triton's own non-MFMA instructions per loop iteration on gfx950 at BV 64 but 1.08x at BV 32 (its dots 32 deep: the
#: copies' address and mask arithmetic, 93 VALU a round against 27, outweighs four MFMA units a step).
SIDES_MIN_DEPTH = 64


def _sides_depth_test(ctx: RuleContext, sp: StagePlan) -> tuple[str, tuple[tuple[str, str | None], ...]] | None:
    """The launch test under which a loop that reads a tile as both operands runs the source kernel: a dot of it
    shallower than `SIDES_MIN_DEPTH` (its K a constexpr parameter or a number); None where no such test applies."""
    if not any(load.sides for load in sp.loop.loads):
        return None
    depths = {str(site.a_shape[-1]) for site in (ctx.plan.dots[chain.call] for chain in sp.loop.chains)
              if site.a_shape and site.a_shape[-1] is not None}
    if not depths:
        return None
    return _launch_test(ctx, " or ".join(f"({d}) < {SIDES_MIN_DEPTH}" for d in sorted(depths)))


def _source_tile_below(ctx: RuleContext, sp: StagePlan, bound: int) -> None:
    """Launches whose output tile (the first dot's M x N, constexpr parameters or numbers) holds fewer than `bound`
    elements run the source kernel."""
    constexprs = {p.name: p.default for p in ctx.function.params if p.is_constexpr}
    shape = [str(d) for d in ctx.plan.dots[sp.loop.chains[0].call].shape]
    if len(shape) != 2 or not all(d in constexprs or d.isdigit() for d in shape):
        return
    names = tuple((d, constexprs[d]) for d in dict.fromkeys(shape) if d in constexprs)
    if names:
        ctx.launch_source_when = tuple(dict.fromkeys((*ctx.launch_source_when, (
            f"{_factor(shape[0])} * {_factor(shape[1])} < {bound}", names))))


def _chained_register_test(ctx: RuleContext, sp: StagePlan) -> tuple[str, tuple[tuple[str, str | None], ...]] | None:
    """The launch test under which a loop of chained dots runs the source kernel (`CHAINED_REGISTER_LIMIT`); None
    where its sizes are not all known or not constexpr parameters."""
    limit = CHAINED_REGISTER_LIMIT.get(ctx.target.name)
    if not sp.loop.chained or sp.loop.attention or limit is None:
        return None
    lanes = PIPELINE_WARPS * ctx.target.warp_size
    split: list[str] = []  # bytes over all the lanes
    loads = {load.name for load in sp.loop.loads}
    for chain in sp.loop.chains:
        site = ctx.plan.dots[chain.call]
        m, n = site.shape
        if m is None or n is None:
            return None
        split.append(f"({m}) * ({n}) * 4")  # (an accumulator, or a product made afresh)
        for position, held in enumerate(chain.operands):
            shape = site.a_shape if position == 0 else site.b_shape
            if held in loads or not held.isidentifier() or (position == 0 and chain.chained):
                continue
            if not shape or any(dim is None for dim in shape):
                return None
            split.append(f"({') * ('.join(shape)}) * 2")  # (an operand held in registers: K, V)
    whole = [f"({') * ('.join(ring.shape)}) * {2 if load.twice or load.sides else 1} * 2"
             for load, ring in zip(sp.loop.loads, sp.rings)]
    return _launch_test(ctx, f"{' + '.join(split)} + {PIPELINE_WARPS} * ({' + '.join(whole)}) > {limit * 4 * lanes}")


def _launch_test(ctx: RuleContext, test: str) -> tuple[str, tuple[tuple[str, str | None], ...]] | None:
    """`test` as a test of `RuleContext.launch_source_when`: with the constexpr parameters it reads and their
    defaults; None where it reads no name or one that is not a constexpr parameter (no launch can be tested)."""
    constexprs = {p.name: p.default for p in ctx.function.params if p.is_constexpr}
    names = sorted(names_in(cst.parse_expression(test)))
    if not names or any(name not in constexprs for name in names):
        return None
    return test, tuple((name, constexprs[name]) for name in names)


#: The copy call of a pointer tile per copy engine (its arguments: the slot, then the load's); `copy_operands` lays
#: their addresses out per tile and `buffer_copies` turns gfx950's into buffer copies. (gfx1250's direct-to-LDS copy,
#: `async_copy.global_to_shared`, has no buffer form: it copies from per-lane pointers, as Triton's own code does.)
POINTER_COPIES = {"async_copy": "async_copy.global_load_to_shared", "buffer_loads": "_tile_load"}
GFX1250_POINTER_COPY = "async_copy.global_to_shared"


#: The profitability policy's names of a ring's copies, per copy engine
ENGINE_FORMS = {"registers": "register-staged ring", "buffer_loads": "buffer-load ring",
                "async_copy": "direct-to-LDS ring", "tdm": "tdm ring"}


def _form(sp: StagePlan, masks_left_out: bool = True, gathered: bool = False) -> str:
    """The ring's form, as the profitability policy names it (UNPROFITABLE_RINGS); `masks_left_out`: an attention
    loop's steady state leaves out score masks the source evaluates every iteration (`_steady_masks`); `gathered`: the
    addresses or masks of its K and V copies read a value the loop loads, or call a jit helper (a paged KV cache)."""
    copies = ENGINE_FORMS[sp.engine]
    if sp.warps_along_m:  # (every warp along M, so that the loop's row reductions stay inside a warp)
        return f"row-reduction ring, {copies}"
    if sp.groups == 1:  # (every wave running each step in order: its own policy, by what needs the barriers)
        return f"one warp group, {'layout conversions' if sp.barrier_converts else 'reductions'}, {copies}"
    if not sp.loop.attention and sp.engine != "registers" and guarded_indices(sp.loop.loop) is not None:
        return f"iteration-guard ring, {copies}"  # (a GEMM's work under `if flag:`, its copies masked by the flag)
    if sp.loop.attention:
        if sp.engine != "registers":  # (staged through registers: that ring's policy, whatever the form)
            if len(sp.loop.chains) > 2:  # (latent attention: scores summed from products)
                if gathered:  # (... over a paged KV cache)
                    return f"attention, more than two dots, copies reading loaded values, {copies}"
                return f"attention, more than two dots, {copies}"
            if gathered:
                return f"attention, copies reading loaded values, {copies}"
            if not masks_left_out:
                return f"attention, no mask left out, {copies}"
        return f"attention, {copies}"
    if sp.loop.chained and sp.engine != "registers":  # (staged through registers: that ring's policy)
        return f"chained-dot ring, {copies}"
    if any(chain.scaled_product for chain in sp.loop.chains) and sp.engine != "registers":
        return f"scaled-product ring, {copies}"  # (block-scaled GEMMs: `acc += tl.dot(a, b) * s`)
    if all(chain.fresh for chain in sp.loop.chains) and sp.engine != "registers" and not any(
            load.computed or load.kind == "descriptor" for load in sp.loop.loads):
        return f"fresh-product ring, {copies}"  # (other fresh rings: as their copies and operands say below)
    if sp.engine == "registers" and sp.loop.kind == "descriptor" and not any(load.computed for load in sp.loop.loads):
        return f"{copies}, descriptor tiles"  # (16-byte loads a step ahead: a descriptor vouches for its rows)
    if any(load.computed for load in sp.loop.loads):
        # (a computed operand's tile no launch copies 16 bytes a lane, loaded through registers in a copy layout
        # along its contiguous axis: `StagePlan.register_copies`, a policy of its own per form)
        staged = ", register-staged ring" if sp.register_copies else ""
        if any(chain.guarded for chain in sp.loop.chains):
            return f"computed-operand ring, guarded dot{staged}"
        if _k_indexed(sp.loop) is not None:
            return f"computed-operand ring, K-indexed vector{staged}"
        if _loads_in_computation(sp.loop):
            return f"computed-operand ring, loaded factor{staged}"
        if _computed_pair(sp.loop) is not None:
            return f"computed-operand ring, both operands{staged}"
        return f"computed-operand ring{staged}"
    if sp.engine == "async_copy" and any(load.kind == "descriptor" for load in sp.loop.loads):
        return f"{copies}, descriptor tiles"
    return copies


def _computed_pair(plan: LoopPlan) -> DotChain | None:
    """The first dot both of whose operands are computed from loaded tiles (`a = a.to(T)`, `b = (w * s).to(T)`)."""
    for chain in plan.chains:
        positions = {position for load in plan.loads if load.computed
                     for used, position in [plan.use_of(load.name)] if used is chain}
        if {0, 1} <= positions:
            return chain
    return None


#: Forms of a computed-operand ring measured lighter than Triton's own compile only where every warp lies along the
#: computed operand's axis (`_mma_layout`'s `computed_operand`: 16 rows of A, or columns of B, a warp, 128 at the
#: pipeline's 8 warps), by (target, form): the operand positions that need it (0: A, 1: B). Launches with fewer rows
#: (columns) run the source kernel. Non-MFMA (WMMA) instructions per loop iteration against Triton's own compile, 8
#: warps (bench/RESULTS.md, "Computed operands: the warps along their axis"): gfx1250, B computed (int8 and int16
#: codes cast or scaled) 0.52-0.62x at 128 columns, 1.13-1.43x at 64 (its split puts 4 warps along M); A computed
#: 0.25-0.44x at 64 rows and more. gfx942, GPTQ's unpacking (a vector laid along K) 0.63-0.75x at 128 columns,
#: 1.42x at 64. gfx950, A computed by arithmetic on two tiles (`(q * exp(-z)).to(T)`, FLA's `chunk_abc_fwd_kernel_V`
#: style, z fp32): 0.90-0.93x at 128 rows, 2.11-2.76x at 64 (4 warps along M: each A element computed twice, where
#: Triton computes it once in a blocked layout); gfx1250 0.94x and 1.51x (the gated GEMM fixture's 0.29-0.44x at 64
#: rows notwithstanding: the safe side). Those two apply to computations with arithmetic only
#: (`COMPUTED_ARITHMETIC_LAUNCHES`): a cast alone (int16 codes cast for A, tritonbench's `bf16xint16_matmul_kernel`)
#: measured 0.88x at 64 rows.
COMPUTED_AXIS_LAUNCHES: dict[tuple[str, str], tuple[int, ...]] = {
    ("gfx1250", "computed-operand ring"): (1,),
    ("gfx942", "computed-operand ring, K-indexed vector"): (0, 1),
}
COMPUTED_ARITHMETIC_LAUNCHES: dict[tuple[str, str], tuple[int, ...]] = {
    ("gfx950", "computed-operand ring"): (0,),
    ("gfx1250", "computed-operand ring"): (0,),
}


def _computed_axis_launches(ctx: RuleContext, sp: StagePlan, positions: tuple[int, ...], arithmetic: bool = False
                            ) -> str:
    """For the computed operands at `positions` (`COMPUTED_AXIS_LAUNCHES`; with `arithmetic`, those computed by more
    than a cast, `COMPUTED_ARITHMETIC_LAUNCHES`): launches whose operand axis is under 16 rows (columns) a warp run
    the source kernel (`_source_below`); why the loop is left as it is where that axis is neither a constexpr
    parameter nor a literal that size ("" where it is not)."""
    if not positions:
        return ""
    bound = 16 * PIPELINE_WARPS
    sides = _computed_sides(sp.loop)
    constexprs = {p.name for p in ctx.function.params if p.is_constexpr}
    for load in sp.loop.loads:
        if not load.computed or (arithmetic and arithmetic_step(loop_body(sp.loop.loop), load.prep) is None):
            continue
        chain, position = sp.loop.use_of(load.name)
        if position not in positions:
            continue
        site = ctx.plan.dots.get(chain.call)
        size = str(site.shape[position]) if site is not None and site.shape[position] is not None else ""
        if sides.get(chain.call) != position:
            return (f"both operands of the dot that reads `{load.name}` are computed from loaded tiles, and this form "
                    "runs lighter than Triton's own compile only with every warp along one computed operand's axis "
                    "(bench/RESULTS.md)")
        if size.isdigit() and int(size) >= bound:
            continue
        if size not in constexprs:
            axis = ("rows", "columns")[position]
            return (f"`{load.name}` is computed from a loaded tile, and this form runs lighter than Triton's own "
                    f"compile only with every warp along its {axis} ({bound} a launch at the pipeline's "
                    f"{PIPELINE_WARPS} warps), which `{size or '?'}` does not give (bench/RESULTS.md)")
        _source_below(ctx, size, bound)
    return ""


def _computed_across_warps(sp: StagePlan) -> bool:
    """Every dot of the loop that reads a computed operand computes it on one side, and the MMA layout lays the warps
    along that operand's axis (`_mma_layout`'s `computed_operand`; not where every warp lies along M for other
    reasons: attention, chained dots, row reductions)."""
    if not _warps_follow_computed(sp):
        return False
    sides = _computed_sides(sp.loop)
    return all(chain.call in sides for load in sp.loop.loads if load.computed
               for chain in sp.loop.chains if chain.position_of(load.name) is not None)


def _warps_follow_computed(sp: StagePlan) -> bool:
    """The loop's MMA layout may lay its warps along a computed operand's axis: no other reason puts every warp along
    M (attention, chained dots, row reductions)."""
    return not (sp.loop.attention or sp.loop.chained or sp.warps_along_m)


def _computed_sides(plan: LoopPlan) -> dict[cst.Call, int]:
    """The dots of the loop that read operands computed from loaded tiles on one side only: dot call -> that
    operand's position (0: A, 1: B). A dot computing both, or none, is not listed."""
    sides: dict[cst.Call, set[int]] = {}
    for load in plan.loads:
        for chain in plan.chains:
            position = chain.position_of(load.name) if load.computed else None
            if position is not None:
                sides.setdefault(chain.call, set()).add(position)
    return {call: positions.pop() for call, positions in sides.items() if len(positions) == 1}


def _loads_in_computation(plan: LoopPlan) -> bool:
    """A computed operand's computation loads from memory itself (`a = a * tl.load(s_ptr + k)`: a factor loaded in
    the stage that runs the MMA, where the ring's copies do not hide its latency)."""
    body = loop_body(plan.loop)
    return any(isinstance(call.func, (cst.Attribute, cst.Name)) and (
        call.func.attr.value if isinstance(call.func, cst.Attribute) else call.func.value) == "load"
        for load in plan.loads if load.computed for i in load.prep for call in calls_in(body[i]))


def _k_indexed(plan: LoopPlan) -> cst.Subscript | None:
    """A computed operand's computation reads a vector laid along the operand's K axis (`shifter[:, None]` for B,
    the bit offsets of packed weights): the broadcast (None where none does). The MMA operand layout holds K elements
    to a lane, which makes such arithmetic per element where a blocked layout has it per row."""
    body = loop_body(plan.loop)
    for load in plan.loads:
        if not load.computed:
            continue
        chain, position = plan.use_of(load.name)
        k_axis = 0 if position == 1 else 1
        nodes = [n for i in load.prep for n in preorder(body[i])] + list(preorder(chain.call))
        found = next((n for n in nodes if isinstance(n, cst.Subscript) and broadcast_axis(n) == k_axis), None)
        if found is not None:
            return found
    return None


def tile_strides(ctx: RuleContext, plan: LoopPlan, constexprs: bool = False) -> tuple[list[str], list[str]]:
    """The parameters of the loop's pointer tiles that the launcher requires to be 1 (inner strides) and multiples of
    16 (the others) before it runs the Gluon kernel (with `constexprs`, the constexpr parameters in those places)."""
    body = loop_body(plan.loop)
    tiles = [local_pointer(plan, load) for load in plan.loads if load.kind == "pointer" and load.pointer is not None]
    return pointer_tile_strides(ctx.function, tiles, [body[i] for i in plan.producer_after()], constexprs)


def _read(slot: str, relaxed: bool) -> str:
    """The operand read of a ring slot: `relaxed` after direct-to-LDS copies (the wait before it already orders
    them), where the target's async_copy has the relaxed read."""
    return f"async_copy.load_shared_relaxed({slot}, " if relaxed else f"{slot}.load("


def _view(slot: str, load: OperandLoad) -> str:
    """The view of a ring slot the MMA reads: the slot, or its transpose for a transposed operand."""
    return f"{slot}.permute([1, 0])" if load.transposed else slot


def _attention_sizes(ctx: RuleContext, sp: StagePlan) -> tuple[str, str, str]:
    """An attention loop's rows (the accumulator's), and its K tile's keys and head dimension, as source text."""
    keys, head = (dim.strip() for dim in sp.rings[0].shape)
    return str(ctx.plan.dots[sp.loop.chains[-1].call].shape[0]), keys, head


def _tile_factor(sp: StagePlan) -> str:
    """"2 * " where the attention loop's K ring is read twice (V the K tile itself, `OperandLoad.twice`: every warp
    holds both forms of the tile), else ""."""
    return "2 * " if sp.loop.loads[0].twice else ""


def _factor(text: str) -> str:
    """`text` as a factor of a product: parenthesised unless a name or a number."""
    return text if text.isidentifier() or text.isdigit() else f"({text})"


def _convert_key(node: cst.BaseExpression) -> str:
    """A converted value's key: its name, or the text of its arithmetic without outer parentheses."""
    if isinstance(node, cst.Name):
        return node.value
    return " ".join(code(node.with_changes(lpar=[], rpar=[])).split())


class _Hoisted(cst.CSTTransformer):
    """`gl.convert_layout(x, layout)` of an `x = <scalar> + offsets` (`<scalar>`: the loop variable, or integer
    arithmetic of it and scalar parameters; `hoistable_convert`), or of a bound of such a sum (`x < bound`) -> that
    expression of the offsets converted before the loop."""

    def __init__(self, converts: dict[tuple[str, str], tuple[str, str]]) -> None:
        super().__init__()
        self.converts = converts

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if code(updated.func) != "gl.convert_layout" or len(updated.args) != 2:
            return updated
        arg, layout = updated.args[0].value, " ".join(code(updated.args[1].value).split())
        found = self.converts.get((_convert_key(arg), layout))
        if found is not None:
            return cst.parse_expression(f"({found[0].replace(OFFSETS, found[1])})")
        return updated


class _Invariant(cst.CSTTransformer):
    """`gl.convert_layout(x, layout)` of an `x` that reads no name of `changed` (the names the loop assigns) through
    arithmetic, broadcasts, casts and elementwise math -> a name made before the loop (`made`: (x, layout) -> name)."""

    def __init__(self, changed: set[str], name, helpers: frozenset[str] = frozenset()) -> None:  # noqa: ANN001
        super().__init__()
        self.changed = changed
        self.name = name  # (the loop's namer)
        self.helpers = helpers  # helpers of elementwise math the module imports (`exp`)
        self.made: dict[tuple[str, str], str] = {}

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if code(updated.func) != "gl.convert_layout" or len(updated.args) != 2:
            return updated
        value = updated.args[0].value
        for n in preorder(value):
            if isinstance(n, cst.Name) and n.value in self.changed:
                return updated
            if isinstance(n, cst.Call) and not (isinstance(n.func, cst.Attribute) and n.func.attr.value == "to") \
                    and code(n.func).removeprefix("gl.") not in PURE_CALLS and code(n.func) not in self.helpers \
                    and code(n.func) not in BUILTIN_ELEMENTWISE:
                return updated
        key = (" ".join(code(value).split()), " ".join(code(updated.args[1].value).split()))
        if key not in self.made:
            base = next((n.value for n in preorder(value) if isinstance(n, cst.Name)), "value")
            self.made[key] = self.name(f"{base}_cvt")
        return cst.Name(self.made[key])


class _Unconvert(cst.CSTTransformer):
    """`gl.convert_layout(x, layout)` -> `x`, in parentheses where `x` is an operation that is not a whole argument
    (`gl.convert_layout(c < n, ...)[:, None]` -> `(c < n)[:, None]`: bare, the broadcast would take `n` alone)."""

    def __init__(self) -> None:
        super().__init__()
        self.wrapped: set[int] = set()  # ids of the parenthesised operations this made

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if code(updated.func) == "gl.convert_layout" and updated.args:
            value = parenthesized(updated.args[0].value)
            if value is not updated.args[0].value:
                self.wrapped.add(id(value))
            return value
        return updated

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        if id(updated.value) in self.wrapped:  # (a whole argument needs none)
            return updated.with_changes(value=updated.value.with_changes(lpar=[], rpar=[]))
        return updated


class _OperandRenamed(cst.CSTTransformer):
    """The translated dot (`_dot(a, b, acc)`) reading `old` as its operand `position`, reading `new` there instead."""

    def __init__(self, position: int, old: str, new: str) -> None:
        super().__init__()
        self.position, self.old, self.new = position, old, new

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        args = list(updated.args)
        if isinstance(updated.func, cst.Name) and updated.func.value == "_dot" and len(args) > self.position \
                and isinstance(args[self.position].value, cst.Name) and args[self.position].value.value == self.old:
            args[self.position] = args[self.position].with_changes(value=cst.Name(self.new))
            return updated.with_changes(args=args)
        return updated


class _Untranspose(cst.CSTTransformer):
    def __init__(self, names: dict[str, str]) -> None:
        super().__init__()
        self.names = names

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if code(updated.func) in ("gl.permute", "gl.trans") and updated.args \
                and isinstance(updated.args[0].value, cst.Name) and updated.args[0].value.value in self.names:
            return cst.Name(self.names[updated.args[0].value.value])
        return updated


def _untransposed(statement: cst.BaseStatement, names: dict[str, str]) -> cst.BaseStatement:
    """The translated dot statement with `gl.permute(w, [1, 0])` of the transposed operands read as `names[w]` (`w`
    itself, renamed with the slot reads; `w_t` for a tile read in both forms)."""
    return statement.visit(_Untranspose(names))  # type: ignore[return-value]


def _guarded(statement: cst.BaseStatement, rewrite: Callable[[cst.BaseStatement], cst.BaseStatement]
             ) -> cst.BaseStatement:
    """`rewrite` of a dot statement, inside the `if` that guards it where one does (`DotChain.guarded`: `if i_s >= 0:
    b_o += tl.dot(b_s, b_v)` keeps its test, the MMA runs where it holds)."""
    if isinstance(statement, cst.If):
        inner = statement.body.body[0]  # type: ignore[union-attr]
        return statement.with_changes(body=statement.body.with_changes(body=[rewrite(inner)]))
    return rewrite(statement)


def _fused(statement: cst.BaseStatement, acc: str) -> cst.BaseStatement:
    """The translated ``acc += p * s`` (``acc = acc + p * s``; `p` the scaled product) as ``acc = gl.fma(p, s, acc)``:
    Triton fuses that multiply-add (its default `enable_fp_fusion`), but in the unrolled steady state LLVM's vectoriser
    packs the three steps' products together first and no longer forms the FMA (three VALU a value instead of two:
    bench/RESULTS.md). The statement as it was where its last operation is not such a product."""
    found = added_to(statement.body[0]) if isinstance(statement, cst.SimpleStatementLine) else None
    added = found[1] if found is not None and found[0] == acc else None
    if not isinstance(added, cst.BinaryOperation) or not isinstance(added.operator, cst.Multiply):
        return statement
    left, right = (side.with_changes(lpar=[], rpar=[]) for side in (added.left, added.right))
    fused = cst.parse_statement(f"{acc} = gl.fma({code(left)}, {code(right)}, {acc})")
    return fused.with_changes(leading_lines=statement.leading_lines)  # type: ignore[union-attr]


def _folded(statement: cst.BaseStatement, acc: str) -> cst.BaseStatement:
    """The translated ``acc += _dot(a, b, <zeros>)`` (or ``acc = acc + ...``) as ``acc = _dot_acc(a, b, acc)``."""
    dot = translated_dot(statement)
    folded = cst.parse_statement(f"{acc} = _dot_acc({code(dot.args[0].value)}, {code(dot.args[1].value)}, {acc})")
    return folded.with_changes(leading_lines=statement.leading_lines)  # type: ignore[union-attr]
