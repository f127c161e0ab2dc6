"""What keeps a translated kernel as Triton, in one place: `decide` runs the per-kernel checks in order, each naming
its reason (the first that keeps the kernel is the one reported), and `propagate_kept` follows the call graph (a kept
kernel keeps the helpers only it calls as Triton, a kept helper its callers). The loops' own checks (a loop no
pipeline rule takes, a ring measured slower than Triton's, `rules/base.py: UNPROFITABLE_RINGS`) come to `decide`
through the rule context; `keep_unpipelined` turns them into the kernel's reason."""

from __future__ import annotations

import dataclasses
import re

import libcst as cst

from transpile import cst_walk
from transpile.analysis.attention import AttentionPlan, plan_attention_loop
from transpile.analysis.dot_loops import DotLoop, dot_loops
from transpile.analysis.guards import guard_shape, loads_in
from transpile.analysis.layouts import OPAQUE, REDUCTIONS, SCANS, LayoutPlan
from transpile.analysis.pipeline import LoopRefusal, plan_loop
from transpile.cst_utils import bound_names, calls_in, names_in
from transpile.diagnostics import Severity
from transpile.discover import JitFunction, ModuleFacts, language_name
from transpile.launches import alignment_dispatch, launch_facts, passed_as_value, use_text
from transpile.language import NOT_TRITON
from transpile.outcomes import KernelOutcome
from transpile.passes.reserved_names import RESERVED_NAMES
from transpile.passes.tma_tiles import Dispatch, jit_callees
from transpile.passes.vector_loads import replicated_vector_load
from transpile.rules.base import WARPGROUP_TEST, RuleContext, branch_path, launch_evaluable, launch_terms
from transpile.source import SourceFile
from transpile.targets import Target


_NUM_WARPS = re.compile(r"\bnum_warps\s*=\s*(\w+)")


#: Calls whose first argument is a tensor (a dot, a reduction or scan, a shape change): a parameter passed there is
#: one. (The layout analysis's own sets, and the calls it reads otherwise.)
_TENSOR_FIRST = frozenset(REDUCTIONS | SCANS | OPAQUE | {"dot", "dot_scaled", "broadcast_to", "expand_dims", "sort",
                                                         "softmax", "split", "flip"})


def decide(source: SourceFile, facts: ModuleFacts, plans: dict[str, LayoutPlan], fn: JitFunction, ctx: RuleContext,
           outcome: KernelOutcome, dispatch: dict[str, Dispatch], gluon_always: bool) -> None:
    """Whether the kernel `fn`, as the target's rules rewrote it (`ctx`), stays translated, and how its variant is
    launched: sets `outcome.translated` (with the reason where it is kept as Triton) and `outcome.dispatch`. The checks
    run in order, the first that keeps the kernel giving the reason: the translation's refusals, the rules' own keep,
    too few warps for a wgmma, a name the Gluon translation reserves, an unpipelined dot loop Triton pipelines, forms
    of the translated code measured slower than Triton's (reshape networks, vectors reloaded per warp, transposed
    accesses), a construct the rules keep after those (`RuleContext.keep_after_loops`: full-precision fp32 products),
    then what a launcher cannot take (a helper picked at import time, `triton.jit` applied by a call, the kernel
    handed to `wrap_triton`)."""
    plan = plans[fn.name]
    target = ctx.target
    refusals = [d for d in outcome.diagnostics if d.severity is not Severity.NOTE]
    reserved = sorted(RESERVED_NAMES & (bound_names(fn.node) | {p.name for p in fn.params}))
    library = tensor_parameter(source, fn) if refusals else None
    if library is not None:
        # A helper of a library module: a kernel takes pointers and numbers, never a tensor
        param, node = library
        keep_as_triton(outcome, source, fn.node.name, fn.name,
                       f"it is a helper for other modules, not a kernel: no function of this file calls or launches it, "
                       f"and its parameter `{param}` is used as a tensor at line {source.position(node)[0]}; a module whose "
                       "kernel imports it translates its own copy, at the kinds that kernel passes", alone=True)
    elif refusals:
        outcome.translated = False
        # (a construct Triton's own compiler rejects, where there is one, first: what else the translation would
        # refuse matters only once the source is Triton)
        first = next((d for d in refusals if NOT_TRITON in d.message), refusals[0])
        outcome.kept_reason = f"it is not translated for {target.name}: {first.message}"
    elif ctx.keep is not None:
        keep_as_triton(outcome, source, ctx.keep[0], fn.name, ctx.keep[1], drop=())
    elif target.backend == "cuda" and (few := few_warps(fn, facts, plans, all_few=bool(
            ctx.pipelined and not gluon_always))) is not None:
        # (a pipelined kernel with configs or launches of 4 warps or more as well: its launcher runs the others on
        # the source kernel, below)
        warps = (f"{few}, and its dots would run as wgmma, which takes a warpgroup of 4 warps (Triton runs them "
                 "as mma.sync there)")
        if not gluon_always and not ctx.pipelined:
            # (what keeps its loops at 4 warps and more as well: the reason a user can act on comes first)
            keep_unpipelined(ctx, outcome)
        if outcome.translated:
            keep_as_triton(outcome, source, fn.node, fn.name, warps, drop=())
        else:
            outcome.kept_reason = f"{outcome.kept_reason}; besides, {warps}"
    elif reserved:
        keep_as_triton(outcome, source, fn.node, fn.name, f"it binds `{reserved[0]}`, the name its Gluon translation "
                       "reads the Gluon language by", drop=())
    elif gluon_always:
        # (the launches the pipelined form is not written for, --gluon-always or not: a dispatch `launch_dispatch`
        # made holds the rules' tests already, a TMA dispatch is given them here)
        if fn.name in dispatch:
            _tma_dispatch_tests(ctx, outcome)
    else:
        keep_unpipelined(ctx, outcome)
        if ctx.launch_source_when and outcome.dispatch is not None and fn.name not in dispatch:
            outcome.dispatch = dataclasses.replace(outcome.dispatch, source_when=ctx.launch_source_when,
                                                   amd=ctx.target.backend == "hip")
        else:
            _tma_dispatch_tests(ctx, outcome)
        if target.backend == "cuda" and outcome.translated and few_warps(fn, facts, plans) is not None:
            # A pipelined kernel some of whose configs or launches run fewer than 4 warps: its launcher runs those
            # on the source kernel (tested per launch and per autotune config), the others on the pipelined one
            outcome.dispatch = dataclasses.replace(
                outcome.dispatch, source_when=tuple(dict.fromkeys((*outcome.dispatch.source_when, WARPGROUP_TEST)))
            ) if outcome.dispatch is not None else Dispatch(fn.name, tuple(p.name for p in fn.params), (),
                                                            helpers=jit_callees(facts, fn.name),
                                                            source_when=(WARPGROUP_TEST,))
        access = launch_facts(facts, fn)[0] if outcome.translated and not outcome.pipelined else None
        vector = (replicated_vector_load(facts, fn, plan) if outcome.translated and not outcome.pipelined
                  and access is None else None)
        trip = round_trip(fn, facts, plans) if outcome.translated and not outcome.pipelined else None
        if trip is not None:
            where, node = trip
            line = source.position(node)[0]
            keep_as_triton(outcome, source, node, fn.name,
                           f"{where} reshapes a tile back to another tile's shape from another rank at line {line} "
                           "(a network over a reshaped view, such as a bitonic sort): Triton's compiler derives each "
                           "reshape's layout from its operand's, where the Gluon translation converts every such result "
                           "through shared memory (a 256-element argsort: 10-16x the source's time on an H200; on gfx950 "
                           "256 VGPRs and 200 AGPRs at occupancy 1 against 44 VGPRs at 8, and with layouts sized for the "
                           "tile still 2.3x the instructions, 892 LDS accesses against 48)", drop=(),
                           note=" (--gluon-always translates it)")
        elif vector is not None:
            line = source.position(vector)[0]
            keep_as_triton(outcome, source, vector, fn.name,
                           f"the load at line {line} reads a vector in every iteration of a loop, in the layout of a 2-D "
                           "tile's rows or columns, which every warp along the tile's other axis would load again, where "
                           "Triton's compiler spreads it over the warps (a matrix-vector product written with `tl.sum`: "
                           "0.47-0.85x measured)", drop=(), note=" (--gluon-always translates it)")
        elif access is not None:
            line = source.position(access)[0]
            keep_as_triton(outcome, source, access, fn.name,
                           f"the access at line {line} is contiguous along the first axis of its tile (a transposed copy): "
                           "a Gluon layout would leave it uncoalesced, where Triton's compiler picks a layout per access",
                           drop=(), note=" (--gluon-always translates it)")
        elif outcome.translated and outcome.dispatch is None and not fn.is_helper and not outcome.pipelined:
            outcome.dispatch = alignment_dispatch(facts, fn, column_reduced(plan))
    if outcome.translated and ctx.keep_after_loops is not None:
        # (full-precision fp32 products no MMA computes: after the loops' reasons, which name a measurement where
        # there is one; with `--gluon-always` too, since the translation would compute other values)
        keep_as_triton(outcome, source, ctx.keep_after_loops[0], fn.name, ctx.keep_after_loops[1], drop=())
    chosen = sorted(n.value for n in cst_walk.preorder(fn.node)
                    if isinstance(n, cst.Name) and n.value in facts.chosen) if facts.chosen else []
    if outcome.translated and outcome.dispatch is not None and chosen:
        # The source kernel's copy would call `rnd`, which the module binds to a Gluon helper at import time
        keep_as_triton(outcome, source, fn.node, fn.name,
                       f"it calls `{chosen[0]}`, a helper the module picks at import time (under an `if`), and its Gluon "
                       "form runs only some launches: the source kernel kept for the others would call the Gluon helper")
    if outcome.translated and outcome.dispatch is not None and fn.name in facts.jit_statements.values():
        # `k = triton.jit(k)` (and wrappers applied the same way) after the definition: the launcher would be
        # bound before those lines, which then wrap the launcher (the variant did not import)
        keep_as_triton(outcome, source, fn.node, fn.name,
                       "its `triton.jit` is applied by a call after the definition, and its Gluon form runs only some "
                       "launches (a launcher picks it per launch), which that call would wrap")
    passed = passed_as_value(facts, fn.name) if outcome.translated and outcome.dispatch is not None else None
    if passed is not None:
        # `wrap_triton(k)[grid](...)` (torch.library), a kernel stored or handed on: the launcher the variant would
        # bind its name to is not a kernel object of Triton's, which such code (torch's wrappers) insists on
        keep_as_triton(outcome, source, passed, fn.name,
                       f"its Gluon form runs only some launches (a launcher picks it per launch), and line "
                       f"{source.position(passed)[0]} uses the kernel other than to launch it "
                       f"(`{use_text(source, passed)}`): "
                       "torch's `wrap_triton` and the like take only Triton's own kernel objects (launched as "
                       f"`{fn.name}[grid](...)` it would run as Gluon)", drop=())


def keep_as_triton(outcome: KernelOutcome, source: SourceFile, node: cst.CSTNode, name: str, reason: str, *,
          drop: tuple[str, ...] = ("TT043",), note: str = "", alone: bool = False, target: str = "") -> None:
    """Keep the function `name` as Triton for `reason`: its TT041 note at `node` (saying for which `target` where
    given, `note` after the reason), the notes of codes `drop` left out (a TT043 "runs as Gluon for the launches ..."
    no longer holds), or, `alone`, the TT041 note as its only diagnostic."""
    outcome.translated = False
    outcome.kept_reason = reason
    kept = source.diagnostic(node, "TT041", f"`{name}` kept as Triton{f' for {target}' if target else ''}: "
                                            f"{reason}{note}")
    outcome.diagnostics = [kept] if alone else sorted({*(d for d in outcome.diagnostics if d.code not in drop), kept})


def _tma_dispatch_tests(ctx: RuleContext, outcome: KernelOutcome) -> None:
    """A TMA dispatch (`dispatch`, from `with_tma_tiles`) carries the rules' launch tests too: one scale per tile
    where the groups hold whole tiles (`hopper_pipeline`)."""
    if ctx.launch_source_when and outcome.dispatch is not None and ctx.target.backend == "cuda":
        outcome.dispatch = dataclasses.replace(outcome.dispatch, source_when=tuple(dict.fromkeys((
            *outcome.dispatch.source_when, *ctx.launch_source_when))))


def keep_unpipelined(ctx: RuleContext, outcome: KernelOutcome) -> None:
    """Never slower by default: a function with a dot loop that no pipeline rule pipelined on this target is kept as
    Triton (Triton's compiler pipelines that loop; the translated Gluon loop waits for every tile). Its TT040 notes
    become one TT041 note per such loop."""
    source, target = ctx.source, ctx.target
    unpipelined = [loop for loop in dot_loops(ctx.facts, ctx.function)
                   if not any(loop.node is done for done in ctx.pipelined)]
    if not unpipelined:
        return
    switched = launch_switched(ctx, unpipelined)
    if switched is not None:
        # Each loop left unpipelined is the copy of a loop for one value of a compile-time test (a loop unswitched on
        # a constexpr flag) whose other copy is pipelined: the launcher runs the source kernel for those launches.
        ctx.launch_source_when = tuple(dict.fromkeys((*ctx.launch_source_when, *switched)))
        for loop, (test, _) in zip(unpipelined, switched):
            outcome.diagnostics.append(source.diagnostic(loop.node, "TT045", (
                f"the loop at line {loop.line} is pipelined for {target.name} except where `{test}` holds ("
                f"{loop_reason(ctx, loop)}): launches for which it holds run the source kernel")))
        return
    reasons: list[str] = []
    for loop in unpipelined:
        reason = loop_reason(ctx, loop)
        reasons.append(f"the loop at line {loop.line} is not pipelined for {target.name} ({reason})")
    outcome.translated = False
    outcome.measured_keep = all(any(loop.node is node for node in ctx.unprofitable) for loop in unpipelined)
    # (a loop whose tiles are loaded under an iteration guard, `if kbid:`: Triton's own compile copies them in the
    # branch, synchronously, as the translated loop would)
    triton = ["Triton's compiler does not pipeline the loads under its `if` either" if _guarded_loads(loop.node)
              else "Triton's compiler unrolls it at compile time (`tl.static_range`) and pipelines no copy either"
              if _static_range(ctx.source, loop.node) else
              "the loop loads nothing from memory (its dots read values it computes), so Triton's compiler pipelines "
              "no copy in it either" if _loads_nothing(ctx, loop.node)
              else "Triton's compiler pipelines it" for loop in unpipelined]
    # (dict.fromkeys: the copies of a loop unswitched on a constexpr flag share its line, and often the reason)
    outcome.kept_reason = "; ".join(dict.fromkeys(reasons)) + "; " + "; ".join(dict.fromkeys(triton))
    outcome.diagnostics = sorted({*(d for d in outcome.diagnostics if d.code != "TT040"), *(
        source.diagnostic(loop.node, "TT041", f"`{ctx.function.name}` kept as Triton: {text}; {how} "
                          "(--gluon-always emits the Gluon translation)")
        for loop, text, how in zip(unpipelined, reasons, triton))})


def _loads_nothing(ctx: RuleContext, loop: cst.CSTNode) -> bool:
    """Whether `loop` reads no memory itself: no `load` call, nor a call of a jit function (which may load)."""
    return not loads_in(loop) and not any(
        isinstance(call.func, cst.Name) and call.func.value in ctx.facts.functions for call in calls_in(loop))


def _static_range(source: SourceFile, loop: cst.CSTNode) -> bool:
    """Whether `loop` is `for k in tl.static_range(...)`: unrolled by Triton's frontend, never software-pipelined."""
    return isinstance(loop, cst.For) and isinstance(loop.iter, cst.Call) \
        and language_name(source.qualified_name(loop.iter.func)) == "static_range"


def _guarded_loads(loop: cst.CSTNode) -> bool:
    """Whether `loop` has an iteration guard (`analysis.guards.guard_shape`) that loads tiles."""
    guard = guard_shape(loop) if isinstance(loop, (cst.For, cst.While)) else None
    return guard is not None and bool(loads_in(guard.body))


def launch_switched(ctx: RuleContext, loops: list[DotLoop]
                     ) -> list[tuple[str, tuple[tuple[str, str | None], ...]]] | None:
    """Per loop of `loops`, a test under which the launch may run it, as a launcher can evaluate it (Python source
    over the kernel's parameters, and each name with its default): the conjunction of the tests of the `if`s around
    it that read parameters alone (`EVEN_K`, `not (PREQUANT)`; a copy of a loop unswitched on several flags sits under
    one `if` per flag), less those the copies that run it share. None unless every such loop stands under such `if`s
    (in no other loop) and some pipelined loop takes, at one of those `if`s, the other branch than each of them (so
    that the launches that run it pass none of the tests), and the variant has a launcher for its warp-pipelined
    loop."""
    if not ctx.launch_checked or not ctx.launch_warps or not ctx.pipelined:
        return None

    def term(node: cst.If, taken: bool) -> tuple[str, bool]:
        return ctx.source.code(node.test).strip(), taken  # (a copy of the `if` in another copy: the same test)

    around = [branch_path(ctx, loop.node) for loop in loops]
    if any(p is None for p in around):
        return None
    tests = [[(node, taken) for node, taken in p if launch_evaluable(ctx, node.test)]  # type: ignore[union-attr]
             for p in around]
    done = [{term(node, taken) for node, taken in p} for p in (branch_path(ctx, n) for n in ctx.pipelined)
            if p is not None]

    def excludes(t: list[tuple[cst.If, bool]], p: set[tuple[str, bool]]) -> bool:
        """A launch that runs the pipelined loop of `if`s `p` fails the test `t`."""
        return any((code, not taken) in p for code, taken in (term(n, k) for n, k in t))

    # the pipelined loops the launches still reach: where each test fails
    reached = [p for p in done if all(excludes(t, p) for t in tests)]
    if any(not t for t in tests) or not reached:
        return None
    found = []
    for t in tests:
        for i in range(len(t) - 1, -1, -1):  # (the outermost `if` first: `branch_path` lists the innermost first)
            fewer = t[:i] + t[i + 1:]
            if fewer and all(excludes(fewer, p) for p in reached):
                t = fewer  # (a flag the copies share: `EVEN_K` above `if CAST:`, when `CAST` alone tells them apart)
        found.append(launch_terms(ctx, t))
    return found  # type: ignore[return-value]


def loop_reason(ctx: RuleContext, loop: DotLoop) -> str:
    """Why `loop` is not pipelined: the profitability policy, a pipeline rule's TT040 note inside it, or no rule."""
    for node, reason in ctx.unprofitable.items():
        if node is loop.node:
            return reason
    position = ctx.source.positions.get(loop.node)
    first, last = (position.start.line, position.end.line) if position is not None else (loop.line, loop.line)
    prefix = "main loop not pipelined: "
    for d in sorted(ctx.diagnostics):
        if d.code == "TT040" and first <= d.line <= last:
            return d.message[len(prefix):] if d.message.startswith(prefix) else d.message
    if loop.via:
        helpers = ", ".join(f"`{h}`" for h in loop.via)
        return f"its dot runs in the helper {helpers}, which no pipeline rule looks into"
    if len(loop.dots) > 1:
        # what the shared planner reads in the loop: the construct it stops at, or the dots it would pipeline
        where = ", ".join(str(line) for line in sorted(set(loop.dots)))
        attention = plan_attention_loop(ctx.source, loop.node, ctx.plan, 3, in_order=True) \
            if isinstance(loop.node, cst.For) else None
        if isinstance(attention, AttentionPlan) and (attention.summed or attention.shared_v is not None):
            body = list(loop.node.body.body)  # type: ignore[union-attr]
            scores = ", ".join(str(ctx.source.position(body[i])[0])
                               for i in (attention.scores_index, *(extra.index for extra in attention.summed)))
            forms = [f"its scores are summed from {len(attention.summed) + 1} products (lines {scores})"
                     if attention.summed else "",
                     f"its V is its K tile itself (line {ctx.source.position(body[attention.shared_v])[0]})"
                     if attention.shared_v is not None else ""]
            return (f"an attention loop of latent attention's form: {' and '.join(f for f in forms if f)}; the "
                    f"{ctx.target.name} attention rings take one QK^T product and a V tile loaded apart (the AMD warp "
                    "pipeline takes this form)")
        planned = plan_loop(ctx.source, loop.node, ctx.plan, 3, transposed_operands=True, accumulations=True,
                            several_dots=True, computed_operands=True, fresh_dots=True, chained_dots=True)
        if isinstance(planned, LoopRefusal):
            shape = f"; the loop planner stops at line {ctx.source.position(planned.node)[0]}: {planned.reason}"
        elif planned is not None:
            kinds = "chained (a product feeds the next dot)" if planned.chained else "independent"
            held = len({chain.acc for chain in planned.chains})
            form = (f"{len(planned.chains)} {kinds} accumulator chains" if held == len(planned.chains) else
                    f"{len(planned.chains)} dots adding into {held} accumulator{'s' if held > 1 else ''} in turn")
            shape = (f": they are {form}, a form the loop planner reads and no {ctx.target.name} ring is written for "
                     "(the AMD warp pipeline takes such loops)")
        else:
            shape = "; no dot of it is fed by a tile loaded in the loop"
        measured = ""
        if ctx.target.name == "sm90":
            # (what the translation without a ring runs, `--gluon-always`: each dot one wgmma, waited for at once)
            measured = ("; translated without a ring, each dot runs as one wgmma waited for at once and no copy runs "
                        "ahead: such loops measured 0.26x and 0.67x their source on an H100 (suite_lora, "
                        "suite_linear_attn) and 0.22-0.50x on chained dots on an H200 (bench/RESULTS.md), so the "
                        "loop stays as Triton pipelines it")
        return (f"its {len(loop.dots)} dots (lines {where}) are neither one GEMM nor the two chained dots of "
                f"attention, the loops the {ctx.target.name} pipeline rules take{shape}{measured}")
    if isinstance(loop.node, cst.While):
        return ("a `while` loop: the pipeline rules take counted loops (`for k in range(0, K, BLOCK_K)`, "
                "`tl.range(...)`), whose trip count they can split into a prologue and a steady state")
    # No rule said why: the shared loop planner names the construct that no ring takes, and its line.
    planned = plan_loop(ctx.source, loop.node, ctx.plan, 3, transposed_operands=True, accumulations=True)
    if isinstance(planned, LoopRefusal):
        return f"{planned.reason}, at line {ctx.source.position(planned.node)[0]}"
    if planned is not None and any(load.kind == "pointer" for load in planned.loads) and ctx.target.name == "sm90":
        return ("a pointer-tile GEMM that no sm90 ring of this tool takes here; the rings of pointer tiles measured "
                "at most even with Triton's own pipeline on an H100 (cp.async 0.69-0.96x, TMA in one partition "
                "0.79-1.04x: bench/RESULTS.md)")
    return "no pipeline rule matches this loop"


def propagate_kept(facts: ModuleFacts, outcomes: dict[str, KernelOutcome], source: SourceFile, target: Target,
                    inlined: set[tuple[str, str]] = frozenset()) -> None:  # type: ignore[assignment]
    """Keeping a function as Triton keeps others along the call graph: a `@triton.jit` function cannot call a Gluon
    helper, nor Gluon code a Triton one. So every caller of a kept helper is kept, and the helpers a kept function
    calls are kept unless a translated function calls them too: then the kept one calls Triton copies of them
    (`_triton_copies`), and the translated ones the Gluon helper."""
    changed = True
    while changed:
        changed = False
        for fn in facts.functions.values():
            outcome = outcomes[fn.name]
            if outcome.translated:
                continue
            for callee in callees(fn, facts):
                kept = outcomes[callee]
                if kept.translated and not copyable(facts, outcomes, callee):
                    keep_as_triton(kept, source, facts.functions[callee].node.name, callee,
                                   f"it is called by `{fn.name}`, which is kept as Triton (Triton code cannot call Gluon)",
                                   drop=("TT040",), target=target.name)
                    changed = True
            for caller in sorted(fn.called_by):
                kept = outcomes[caller]
                if kept.translated and (fn.name, caller) not in inlined:
                    keep_as_triton(kept, source, facts.functions[caller].node.name, caller,
                                   f"it calls the helper `{fn.name}`, which is kept as Triton (Gluon code cannot call Triton)",
                                   drop=("TT040",), target=target.name)
                    changed = True


def copyable(facts: ModuleFacts, outcomes: dict[str, KernelOutcome], helper: str) -> bool:
    """A translated helper a kept function may call a Triton copy of: a translated function calls it too, and it is
    defined once, by a `def` under `@triton.jit` (not picked at import time, nor jit-applied by a call)."""
    fn = facts.functions[helper]
    if helper in facts.chosen or any(helper in names for names in facts.chosen.values()) \
            or helper in facts.jit_statements.values():
        return False
    return any(outcomes[caller].translated for caller in fn.called_by if caller in outcomes)


def callees(fn: JitFunction, facts: ModuleFacts) -> list[str]:
    return [name for name, other in facts.functions.items() if fn.name in other.called_by]


def round_trip(fn: JitFunction, facts: ModuleFacts, plans: dict[str, LayoutPlan]
                ) -> tuple[str, cst.CSTNode] | None:
    """(which function, the reshape) of the first reshape back from another rank (`LayoutPlan.round_trips`) in `fn`
    or a helper it calls, directly or not; None where there is none."""
    seen: set[str] = set()
    todo = [fn.name]
    while todo:
        name = todo.pop(0)
        if name in seen or name not in plans:
            continue
        seen.add(name)
        if plans[name].round_trips:
            return ("it" if name == fn.name else f"its helper `{name}`"), plans[name].round_trips[0]
        todo += callees(facts.functions[name], facts)
    return None


def tensor_parameter(source: SourceFile, fn: JitFunction) -> tuple[str, cst.CSTNode] | None:
    """(parameter, where) for a jit function no function of the file calls and the file does not launch, which uses a
    parameter as a tensor (an axis taken, `x[:, None]`; reduced; passed to a dot) before binding it to anything but a
    transformation of itself: a helper of a library module (attorch's `math.py`), whose kernels live in the modules
    that import it. None for anything else."""
    if fn.called_by or re.search(rf"\b{re.escape(fn.name)}\s*\[", source.text):
        return None
    params = {p.name for p in fn.params}
    body = fn.node.body.body if isinstance(fn.node.body, cst.IndentedBlock) else []
    for statement in body:  # (a parameter counts until a statement binds its name again: `x = tl.load(x)`)
        for node in cst_walk.preorder(statement):
            # (`x[:, None]` needs an axis; a kernel's number may be expanded, `seq_len[None]`)
            if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name) and node.value.value in params \
                    and any(isinstance(e.slice, cst.Slice) for e in node.slice):
                return node.value.value, node
            if isinstance(node, cst.Call) and node.args and node.args[0].keyword is None \
                    and isinstance(node.args[0].value, cst.Name) and node.args[0].value.value in params:
                name = language_name(source.qualified_name(node.func)) or ""
                if name.rsplit(".", 1)[-1] in _TENSOR_FIRST:
                    return node.args[0].value.value, node
        params -= bound_names(statement) - transformed_in_place(source, statement)
    return None


def transformed_in_place(source: SourceFile, statement: cst.CSTNode) -> set[str]:
    """Names every assignment in `statement` binds to a value computed from the name itself without a load (`x =
    x.to(tl.float32)`, `x = -x`): still the value the caller passed."""
    kept: set[str] = set()
    dropped: set[str] = set()
    for node in cst_walk.preorder(statement):
        if isinstance(node, (cst.Assign, cst.AugAssign)):
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            loads = any(isinstance(c, cst.Call) and (language_name(source.qualified_name(c.func)) or "").endswith(
                "load") for c in cst_walk.preorder(node.value))
            for target in targets:
                if isinstance(target, cst.Name):
                    same = target.value in names_in(node.value) or isinstance(node, cst.AugAssign)
                    (kept if same and not loads else dropped).add(target.value)
    return kept - dropped


def few_warps(fn: JitFunction, facts: ModuleFacts, plans: dict[str, LayoutPlan], all_few: bool = False) -> str | None:
    """Where `fn` (or a helper it calls) has a dot, an autotune config or launch of it in the file with fewer than 4
    warps (`num_warps=2`, or `num_warps=w` over `for w in [1, 2, 4]`; in the decorator, or in a module-level list or
    function it reads), said in words; else None. With `all_few`, only
    where every config or launch the file writes with a warp count has fewer than 4 (none could run a wgmma)."""
    if not any(plans[name].dots for name in [fn.name, *jit_callees(facts, fn.name)] if name in plans):
        return None
    key = ("num_warps_texts",)
    if key not in facts.memo:  # per file: module-level assignments by name, launches by kernel
        assigned: dict[str, str] = {}
        launches: dict[str, list[str]] = {}
        for statement in facts.source.module.body:
            if isinstance(statement, cst.FunctionDef) and statement.name.value not in facts.functions:
                # a function that builds the config table (`configs=get_autotune_config()`, the matmul tutorial's)
                assigned[statement.name.value] = facts.source.code(statement)
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, cst.Assign):
                        for target in small.targets:
                            if isinstance(target.target, cst.Name):
                                assigned[target.target.value] = facts.source.code(statement)
            if not isinstance(statement, cst.FunctionDef) or statement.name.value not in facts.functions:
                for call in calls_in(statement):
                    func = call.func
                    if isinstance(func, cst.Subscript) and isinstance(func.value, cst.Name):
                        launches.setdefault(func.value.value, []).append(facts.source.code(call))
        facts.memo[key] = (assigned, launches)
    assigned, launches = facts.memo[key]
    texts = [facts.source.code(d) for d in fn.node.decorators]
    # the module-level names the decorators read, and those their definitions read (a table built by a function
    # from another list, two levels at most)
    names = [n for d in fn.node.decorators for n in names_in(d) if n in assigned]
    for _ in range(2):
        names += [n for m in list(names) for n in re.findall(r"\b\w+\b", assigned[m]) if n in assigned and n not in names]
    texts += [assigned[n] for n in dict.fromkeys(names)]
    counts = []
    for text in [*texts, *launches.get(fn.name, [])]:
        for value in _NUM_WARPS.findall(text):
            counts += [int(value)] if value.isdigit() else [
                int(n) for m in re.finditer(rf"\bfor\s+{value}\s+in\s+[\[(]([\d,\s]+)[\])]", text)
                for n in re.findall(r"\d+", m.group(1))]
    few = [n for n in counts if n < 4]
    if not few:
        return None
    if not all_few or len(few) == len(counts):
        return f"a config or launch of it in this file runs {min(few)} warp{'s' if min(few) > 1 else ''}"
    return None


def column_reduced(plan: LayoutPlan) -> bool:
    """The function reduces a tile along an axis other than its last (`_blocked_layout(..., reduced=[0])`: the axis
    kept inside each thread, where Triton's layout spreads it over lanes): such kernels ran 1.2-1.8x their sources on
    an H100 with 8-, 16- and 32-bit data alike (bench/RESULTS.md: Launch dispatch), so their launcher takes narrow data."""
    pending = [t.find() for t in [*plan.creations.values(), *plan.converts.values()]]
    roots: dict[int, object] = {}
    while pending:  # the classes laid out in the function, and the parents of their slices
        root = pending.pop()
        if id(root) not in roots:
            roots[id(root)] = root
            if root.slice_of is not None:
                pending.append(root.slice_of[1].find())
    return any(r.rank is not None and r.reduced and r.rank - 1 not in r.reduced for r in roots.values())
