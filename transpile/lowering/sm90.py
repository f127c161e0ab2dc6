"""The sm90 expander: an `Sm90Ring` schedule lowered to the statements of a pipelined GEMM loop.

The schedule says what runs and in which order (`Sm90Ring.steady`: the ops of one steady-state iteration; the copies
run `NUM_STAGES - 1` iterations ahead, started by a prologue; a drain retires the last wgmma and copies); the engines
say how each op is written:

- copy engines fill a ring slot with one iteration's operand tiles and make it visible to the wgmma: `TmaCopy` (a TMA
  copy per operand, one `ready` mbarrier per slot with the slot's bytes expected on it) and `CpAsyncCopy` (a cp.async
  copy per operand, one commit group per iteration, `wait_group` and a CTA barrier before the read);
- the MMA engine `Wgmma` issues `warpgroup_mma(..., is_async=True)` from the slots, retires all but the wgmmas left in
  flight (`warpgroup_mma_wait`) and drains them after the loop.

The same engines write the warp-specialised partitions (`partition_loop`: the TMA ring's loader, both partitions
of the persistent form, and the consumer of the block-scaled ring, which runs the loop's own statements around each
wgmma, `SCALED_CONSUMER_STEPS`), so a copy or a wait is written in one place for every form that does it. (The
consumer of the other non-persistent warp-specialised rings is a helper every such kernel shares, `_ws_wgmma_consumer`
of `transpile/helpers/hopper.py`: CONSUMER_STEPS written once as code.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import libcst as cst

from transpile.analysis.attention import AttentionPlan
from transpile.cst_utils import assigned_names, calls_in, read_names
from transpile.rules.pipeline_text import code, indent

#: The ops of one steady-state iteration of a GEMM ring, in order (`Sm90Ring.steady`):
#: index — the loop variable's value, where the consumer reads it; consumer_before / consumer_after — the loop's own
#: statements before and after the dot; slot — the ring slot of this iteration; wait — the copy engine's wait for the
#: slot's tiles; mma — the async wgmma from the slot; retire — `warpgroup_mma_wait(in flight)`: the wgmma before has
#: finished reading its slot; barrier — with two warpgroups, both have (so neither refills a slot the other reads);
#: refill — the copies of iteration `it + NUM_STAGES - 1` into the slot just retired.
GEMM_STEADY = ("index", "consumer_before", "slot", "wait", "mma", "retire", "barrier", "consumer_after", "refill")
#: ... with an operand computed in registers from a ring slot (`Wgmma.staged`: dequantised weights): the consumer's
#: statements before the dot run after the wait (they read the slot), and stage — the computed operands are stored
#: to shared memory, where the wgmma reads them — comes before the wgmma.
GEMM_STEADY_STAGED = ("index", "slot", "wait", "consumer_before", "stage", "mma", "retire", "barrier",
                      "consumer_after", "refill")
#: ... with the operands of a scaled dot upcast in registers (`tl.dot_scaled` on Hopper): the loop's statements that
#: read no ring tile (its loads of the scales) run before the wait (consumer_early), so that their loads are in flight
#: while the copies land; those that read a slot after it.
GEMM_STEADY_SCALED = ("index", "slot", "consumer_early", "wait", "consumer_before", "stage", "mma", "retire",
                      "barrier", "consumer_after", "refill")
#: ... of a loop whose dots run in its own order (`IN_ORDER`: a dot made afresh each iteration, or one whose A operand
#: the iteration computes from earlier products, attention's backward): once the slot's copies have landed, the
#: refill of the slot the previous iteration read (every warp is past that iteration: the wait's barrier), then the
#: loop's statements as written (consumer_before), each dot a wgmma from the slots waited for at once.
IN_ORDER_STEADY = ("index", "slot", "wait", "refill", "consumer_before")
#: The ops of one steady-state iteration of a flash-attention ring (`AttentionStep`), in order: index,
#: consumer_before; acquire — pick the K slot and the previous iteration's V slot and wait until their tiles have
#: landed (the form's own lines); qk — the QK^T wgmma; pv — the previous iteration's PV wgmma; issued — the form's
#: lines after both are issued; retire_qk — wait for QK^T only (PV keeps the tensor cores busy during the softmax);
#: k_read — the form's release of the K slot; scale — the scores' scale where the source has one; softmax; retire_pv;
#: v_read; convert — the accumulator back to its layout; rescale; keep_p — P in the wgmma A-operand layout for the
#: next iteration's PV; consumer_after.
ATTENTION_STEADY = ("index", "consumer_before", "acquire", "qk", "pv", "issued", "retire_qk", "k_read", "scale",
                    "softmax", "retire_pv", "v_read", "convert", "rescale", "keep_p", "consumer_after")
#: The loader partition of a warp-specialised ring: wait until the consumer hands the slot back, then copy.
LOADER_STEPS = ("index", "producer_before", "slot", "wait_empty", "copy", "producer_after")
#: The consumer partition of the persistent form: wait, multiply, retire, and hand the retired slot back.
CONSUMER_STEPS = ("slot", "wait", "mma", "retire", "barrier", "release")
#: The consumer partition of a warp-specialised ring whose loop scales each step's product (`acc += tl.dot(a, b) *
#: a_s[:, None] * b_s`, block-scaled 8-bit GEMMs): the loop's statements before the dot (the scale loads, in flight
#: while the slot's copies land), the wgmma from zero waited for at once, the slot handed back as soon as every
#: warpgroup is past that wait, then the loop's statements after the dot (the scaled sum, in registers).
SCALED_CONSUMER_STEPS = ("index", "consumer_before", "slot", "wait", "mma", "retire", "barrier", "release",
                         "consumer_after")


#: The rows of a warpgroup's wgmma. A dot tile of fewer rows gets the mma.sync layout (`_mma_layout`), whose operands
#: are registers, not shared-memory slots: every wgmma form tests its tile's rows at compile time (`wgmma_rows`); the
#: GEMM rings then multiply narrower tiles (decode-shaped GEMMs of 16 or 32 rows) with mma.sync from their slots
#: (`Wgmma.wgmma_flag`), the other forms run the translated loop.
WGMMA_ROWS = 64


def wgmma_rows(rows: str, least: int | None = None) -> str | None:
    """The compile-time test that a dot tile of `rows` rows (an expression the kernel can evaluate where the test
    goes: `acc.shape[0]`, a descriptor's block shape) takes wgmma; None where every launch is known to give enough
    (`least`: the fewest rows a launch can have, where known: `hopper_schedule.least_value`)."""
    if least is not None and least >= WGMMA_ROWS:
        return None
    return f"{rows} >= {WGMMA_ROWS}"


@dataclass(frozen=True)
class LoopText:
    """The source pieces of the loop being pipelined, as text: what the expander needs besides the schedule."""

    var: str  # the loop variable
    index: Callable[[str], str]  # the loop variable's value at an iteration index (`k * BK`)
    acc: str  # the accumulator
    acc_in: str  # the accumulator the dot adds to
    consumer_before: Sequence[str] = ()  # the loop's statements before the dot (not the copies' producer slice)
    consumer_after: Sequence[str] = ()
    producer_var: str = ""  # the producer's copy of the loop variable (`k_next`)
    producer_before: Sequence[str] = ()  # the copies' producer slice, renamed for a later iteration
    producer_after: Sequence[str] = ()  # loop-carried producer state advanced after the copies (`off_k += BK`)
    uses_var: bool = False  # whether the consumer statements read the loop variable
    consumer_early: Sequence[str] = ()  # (GEMM_STEADY_SCALED) statements before the dot that read no ring slot


@dataclass(frozen=True)
class RingNames:
    """The names the pipelined loop binds (fresh names: none shadows a kernel variable)."""

    stages: str = "NUM_STAGES"
    it: str = "it"
    slot: str = "slot"
    next_it: str = "next_it"
    next_slot: str = "next_slot"
    iters: str = "num_iters"
    prologue: str = "i"


@dataclass(frozen=True)
class TmaCopy:
    """Copy engine: one TMA copy per operand into its ring (`copies`: descriptor, coordinates, ring), completing on
    the slot's `ready` mbarrier, which expects the bytes of every copy."""

    ready: str
    copies: tuple[tuple[str, str, str], ...]
    prologue_note: str = "# Prologue: start the copies of the first NUM_STAGES - 1 iterations."
    carried_note: str = "  # the producer's own copy of loop-carried state"

    @property
    def nbytes(self) -> str:
        return " + ".join(f"{descriptor}.block_type.nbytes" for descriptor, _, _ in self.copies)

    def issue(self, iteration: str | None, slot: str, in_range: str | None) -> list[str]:
        """The copies of `iteration` into `slot`; predicated off where `in_range` is given (past the loop's end)."""
        pred = f", {in_range}" if in_range else ""
        return [f"mbarrier.expect({self.ready}.index({slot}), {self.nbytes}{pred})",
                *(f"_tma_async_load({descriptor}, {coords}, {self.ready}.index({slot}), {ring}.index({slot}){pred})"
                  for descriptor, coords, ring in self.copies)]

    def wait(self, slot: str, phase: str) -> list[str]:
        """Before the wgmma reads `slot`: its copies have landed (the barrier's `phase`)."""
        return [f"mbarrier.wait({self.ready}.index({slot}), {phase})"]

    def drain(self) -> list[str]:
        return []  # every copy was waited for; the barriers are invalidated by the ring's owner


@dataclass(frozen=True)
class CpAsyncCopy:
    """Copy engine: one cp.async copy per operand (`copy(iteration, slot)` writes them, each masked off past the
    loop's end: a cp.async copy is masked by its own mask, which the rule builds with its alignment hints) and one
    commit group per iteration; before the read, `wait_group` leaves the `NUM_STAGES - 2` younger groups in flight
    and a CTA barrier makes every thread's copies visible."""

    copy: Callable[[str, str], Sequence[str]]
    in_flight: str  # the groups left in flight at the wait (`NUM_STAGES - 2`)
    prologue_note: str = ""
    carried_note: str = ""

    def issue(self, iteration: str, slot: str, in_range: str | None) -> list[str]:
        """(`in_range` is in each copy's mask already: see the class.)"""
        return [*self.copy(iteration, slot), "async_copy.commit_group()"]

    def wait(self, slot: str, phase: str) -> list[str]:
        return ["# This iteration's group has landed (NUM_STAGES - 2 younger ones may still be in flight); the barrier",
                "# makes every thread's copies visible before the wgmma reads the slot.",
                f"async_copy.wait_group({self.in_flight})",
                "_cta_barrier()"]

    def drain(self) -> list[str]:
        return ["async_copy.wait_group(0)"]


@dataclass(frozen=True)
class Product:
    """One dot of an iteration with several (a gated GEMM's gate and up products): its accumulator, the accumulator
    the dot adds to, and its two operands as the wgmma reads them, for a slot."""

    acc: str
    acc_in: str
    views: Callable[[str], tuple[str, str]]


@dataclass(frozen=True)
class Staged:
    """A wgmma operand computed in registers each iteration (from a ring slot read into registers: dequantised
    weights, a cast tile): stored into one of two shared-memory buffers (`buffer`, by iteration parity) and read by
    the wgmma from there. Two buffers, because the wgmma left in flight still reads the previous iteration's."""

    value: str  # the operand as the loop computes it
    buffer: str  # the two-slot shared-memory buffer (`in_registers`: the name the operand is bound to)
    # an A operand the wgmma reads from registers (`value` in the accumulator's operand layout): bound to a name,
    # not stored
    in_registers: bool = False


@dataclass(frozen=True)
class Wgmma:
    """MMA engine: asynchronous wgmma from ring slots, `in_flight` iterations' wgmmas left running at each retire.
    A loop of one dot issues one wgmma an iteration (`views`, on `LoopText.acc`); one of several (`products`) issues
    each in order, and its retire leaves `in_flight` times as many wgmmas running (a wait counts wgmmas, not
    iterations)."""

    in_flight: int
    views: Callable[[str], tuple[str, str]]  # the two operands as the wgmma reads them, for a slot
    rings: tuple[str, ...] = ()  # the rings whose slots a retire names as its dependencies ((): the accumulator only)
    products: tuple[Product, ...] = ()  # several dots an iteration ((): the loop's one dot)
    # False: each wgmma starts from zero (`use_acc=False`) into a product of the iteration, which the loop's own
    # statement then adds to its accumulator (`acc += tl.dot(a, b) * scales`, block-scaled GEMMs); `in_flight` is
    # then 0, the product being read right after its wait
    use_acc: bool = True
    staged: tuple[Staged, ...] = ()  # operands computed in registers, stored for the wgmma (`stage`)
    stage_index: str = "stage"  # the name of the staging buffers' slot in an iteration (`it % 2`)
    # A constexpr the ring binds to its tile's rows test (`wgmma_rows`), where a launch may give fewer rows than a
    # wgmma takes: the ring then multiplies with mma.sync when it is false (`narrow`), from the same slots
    wgmma_flag: str = ""
    # The engine runs in a warp-specialised consumer: a retired slot goes back to the loader (its `empty` barrier),
    # not to a refill below
    hands_back: bool = False

    def stage(self, it: str) -> list[str]:
        """Store the computed operands into this iteration's staging slot (the wgmma that read that slot two
        iterations ago has retired: `retire` leaves one in flight), fence them for the wgmma's async proxy, and make
        every thread's stores visible before any warpgroup reads the whole tile."""
        if not self.staged:
            return []
        return [f"{self.stage_index} = {it} % 2",
                *(f"{s.buffer} = {s.value}" if s.in_registers else f"{s.buffer}.index({self.stage_index}).store({s.value})"
                  for s in self.staged),
                "fence_async_shared()",
                "_cta_barrier()"]

    def issue(self, loop: LoopText, slot: str) -> list[str]:
        fresh = "" if self.use_acc else "use_acc=False, "
        if self.products:
            return [f"{p.acc} = warpgroup_mma({', '.join(p.views(slot))}, {p.acc_in}, {fresh}is_async=True)"
                    for p in self.products]
        a, b = self.views(slot)
        return [f"{loop.acc} = warpgroup_mma({a}, {b}, {loop.acc_in}, {fresh}is_async=True)"]

    def _accs(self, acc: str) -> list[str]:
        return list(dict.fromkeys(p.acc for p in self.products)) if self.products else [acc]

    def retire(self, acc: str, slot: str) -> list[str]:
        accs = self._accs(acc)
        count = self.in_flight * max(1, len(self.products))
        if not self.rings:
            return [f"{', '.join(accs)} = warpgroup_mma_wait({count}, deps=[{', '.join(accs)}])"]
        held = [f"{ring}.index({slot})" for ring in self.rings]
        held += [f"{s.buffer}.index({self.stage_index})" for s in self.staged if not s.in_registers]
        deps = ", ".join(held)
        kept = ", ".join(accs + ["_"] * len(held))
        which = "iteration's wgmmas have" if len(self.products) > 1 else "wgmma has"
        if self.in_flight == 0 and self.hands_back:
            return ["# This iteration's product is complete (the loop reads it below), and its slots no longer read.",
                    f"{kept} = warpgroup_mma_wait(0, deps=[{', '.join(accs)}, {deps}])"]
        if self.in_flight == 0:
            return ["# This iteration's product is complete (the loop reads it below), and its slot free: refill that",
                    "# slot below (with two warpgroups, once both are done with it: the barrier).",
                    f"{kept} = warpgroup_mma_wait(0, deps=[{', '.join(accs)}, {deps}])"]
        return [f"# The previous {which} now finished reading its slot: refill that slot below (with two",
                "# warpgroups, once both have: the barrier keeps one from refilling a slot the other still reads).",
                f"{kept} = warpgroup_mma_wait({count}, deps=[{', '.join(accs)}, {deps}])"]

    def barrier(self) -> list[str]:
        return ["if gl.num_warps() > 4:\n    _cta_barrier()"]

    def sync_issue(self, loop: LoopText, slot: str) -> list[str]:
        """mma.sync from the slots (a tile of fewer rows than a wgmma takes), read into registers: done once it
        returns."""
        pairs = [(p.acc, p.acc_in, p.views(slot)) for p in self.products] if self.products \
            else [(loop.acc, loop.acc_in, self.views(slot))]
        return [f"{acc} = _mma_sync_slots({a}, {b}, {acc_in})" for acc, acc_in, (a, b) in pairs]

    def narrow(self, loop: LoopText, slot: str) -> list[str]:
        """`mma`, `retire` and `barrier` of a tile of fewer rows than a wgmma takes: `sync_issue`, then a barrier:
        no warp refills the slot (below) while another still reads it."""
        return ["# Fewer rows than a warpgroup's wgmma takes: mma.sync, its operands read from the slot into",
                "# registers; every warp has read the slot before any refills it (the barrier).",
                *self.sync_issue(loop, slot), "_cta_barrier()"]

    def drain(self, acc: str) -> list[str]:
        if self.in_flight == 0:
            return []  # every wgmma was waited for in its iteration (its product may not even exist: no iteration)
        accs = ", ".join(self._accs(acc))
        wait = f"{accs} = warpgroup_mma_wait(0, deps=[{accs}])"
        return [f"if {self.wgmma_flag}:\n    {wait}" if self.wgmma_flag else wait]


def _block(lines: Sequence[str], pad: str = "    ") -> list[str]:
    """`lines` (each may hold several) indented by `pad`."""
    return [indent(line, pad) for line in lines]


def producer(loop: LoopText, copy: TmaCopy | CpAsyncCopy, iteration: str, slot: str, iters: str) -> list[str]:
    """The copies of a later `iteration` into `slot`, with the producer slice that computes their addresses; copies
    past the loop's end (`iteration >= iters`) are predicated off."""
    return [f"{loop.producer_var} = {loop.index(iteration)}", *loop.producer_before,
            *copy.issue(iteration, slot, f"{iteration} < {iters}"), *loop.producer_after]


def gemm_ring(steady: Sequence[str], loop: LoopText, names: RingNames, copy: TmaCopy | CpAsyncCopy, mma: Wgmma,
              carried: Sequence[tuple[str, str]]) -> list[str]:
    """The pipelined loop: the producer's own copies of loop-carried state (`carried`: copy, value), the prologue
    that starts the copies of the first `NUM_STAGES - 1` iterations, the steady state (the ops of `steady`, in order)
    and the drain."""
    n = names
    lines = [f"{copy_name} = {value}{copy.carried_note}" for copy_name, value in carried]
    if copy.prologue_note:
        lines.append(copy.prologue_note)
    lines.append(f"for {n.prologue} in gl.static_range({n.stages} - 1):\n"
                 + "\n".join(_block(producer(loop, copy, n.prologue, n.prologue, n.iters))))
    body: list[str] = []
    # mma, retire and barrier one after the other (as GEMM_STEADY has them), with mma.sync for narrow tiles: one test
    grouped = bool(mma.wgmma_flag) and "mma" in steady and \
        tuple(steady[steady.index("mma"):steady.index("mma") + 3]) == ("mma", "retire", "barrier")
    for op in steady:
        if op == "index":
            if loop.uses_var:
                body.append(f"{loop.var} = {loop.index(n.it)}")
        elif op == "consumer_before":
            body += loop.consumer_before
        elif op == "consumer_early":
            body += loop.consumer_early
        elif op == "consumer_after":
            body += loop.consumer_after
        elif op == "slot":
            body.append(f"{n.slot} = {n.it} % {n.stages}")
        elif op == "wait":
            body += copy.wait(n.slot, f"({n.it} // {n.stages}) & 1")
        elif op == "stage":
            body += mma.stage(n.it)
        elif op == "mma" and grouped:
            # (a launch may give fewer rows than a wgmma takes: the three ops, or mma.sync in their place)
            wgmma = [*mma.issue(loop, n.slot), *mma.retire(loop.acc, n.slot), *mma.barrier()]
            body.append("\n".join([f"if {mma.wgmma_flag}:", *_block(wgmma), "else:",
                                   *_block(mma.narrow(loop, n.slot))]))
        elif op in ("retire", "barrier") and grouped:
            pass  # (written with the mma above)
        elif op in ("mma", "retire", "barrier") and mma.wgmma_flag:
            # (the three apart, in an order the schedule gives: each in its own test; mma.sync's read is done with
            # the mma, its barrier stands in the barrier's place)
            sync = {"mma": mma.sync_issue(loop, n.slot), "retire": [], "barrier": ["_cta_barrier()"]}[op]
            own = {"mma": mma.issue, "retire": lambda lp, s: mma.retire(lp.acc, s),
                   "barrier": lambda lp, s: mma.barrier()}[op](loop, n.slot)
            body.append("\n".join([f"if {mma.wgmma_flag}:", *_block(own),
                                   *(["else:", *_block(sync)] if sync else [])]))
        elif op == "mma":
            body += mma.issue(loop, n.slot)
        elif op == "retire":
            body += mma.retire(loop.acc, n.slot)
        elif op == "barrier":
            body += mma.barrier()
        elif op == "refill":
            body += [f"{n.next_it} = {n.it} + {n.stages} - 1", f"{n.next_slot} = {n.next_it} % {n.stages}",
                     *producer(loop, copy, n.next_it, n.next_slot, n.iters)]
        else:
            raise ValueError(f"unknown op {op!r} in a GEMM ring's steady state")
    lines.append("\n".join([f"for {n.it} in range({n.iters}):", *_block(body)]))
    lines += [*mma.drain(loop.acc), *copy.drain()]
    return lines


def partition_loop(steps: Sequence[str], loop: LoopText, copy: TmaCopy, mma: Wgmma | None, count: str | None,
                   position: str = "it") -> list[str]:
    """One partition's loop over the ring in a warp-specialised form (`LOADER_STEPS` or `CONSUMER_STEPS`), in the
    partition's own names (`it`, `slot`, `NUM_STAGES`, `ready`, `empty`, `num_iters`: set to `count` first unless
    None); `position` is the ring position of iteration `it` (`n_done + it` where the ring runs on across a
    program's tiles)."""
    body: list[str] = []
    bare = position[1:-1] if position.startswith("(") and position.endswith(")") else position
    phase = f"({position} // NUM_STAGES) & 1"
    for op in steps:
        if op == "index":
            body.append(f"{loop.var} = {loop.index('it')}")
        elif op == "producer_before":
            body += loop.producer_before
        elif op == "producer_after":
            body += loop.producer_after
        elif op == "consumer_before":
            body += loop.consumer_before
        elif op == "consumer_after":
            body += loop.consumer_after
        elif op == "slot":
            body.append(f"slot = {position} % NUM_STAGES")
        elif op == "wait_empty":
            body += ["# A fresh mbarrier counts as having completed the phase before phase 0: the first pass does not "
                     "wait.", f"mbarrier.wait(empty.index(slot), ({phase}) ^ 1)"]
        elif op == "copy":
            body += copy.issue(None, "slot", None)
        elif op == "wait":
            body += copy.wait("slot", phase)
        elif op in ("mma", "retire") and mma is None:
            raise ValueError(f"op {op!r} in a partition without an MMA engine (a loader)")
        elif op == "mma":
            body += mma.issue(loop, "slot")  # type: ignore[union-attr]
        elif op == "retire":
            body += mma.retire(loop.acc, "slot")  # type: ignore[union-attr]
        elif op == "barrier":
            which = "This" if mma is not None and mma.in_flight == 0 else "The previous"
            body += [f"# {which} wgmma has completed (in every warpgroup, past the barrier): hand its slot back.",
                     "if gl.num_warps() > 4:\n    _cta_barrier()"]
        elif op == "release" and mma is not None and mma.in_flight == 0:
            body.append("mbarrier.arrive(empty.index(slot), count=1)")  # (waited for at once: this iteration's slot)
        elif op == "release":
            body.append(f"mbarrier.arrive(empty.index(({bare} + NUM_STAGES - 1) % NUM_STAGES), pred=it > 0)")
        else:
            raise ValueError(f"unknown op {op!r} in a warp-specialised partition")
    head = [f"num_iters = {count}"] if count is not None else []
    return [*head, "\n".join(["for it in range(num_iters):", *_block(body)])]


@dataclass(frozen=True)
class AttentionStep:
    """One iteration of a pipelined flash-attention loop, as both sm90 forms run it: the cp.async ring
    (`hopper_attention`) and each consumer partition of the warp-specialised form (`hopper_attention_ws`). The step
    issues the QK^T wgmma and the previous iteration's PV wgmma, waits for QK^T only (PV keeps the tensor cores busy
    during the softmax), scales the scores where the source does, runs the softmax, waits for PV, converts the
    accumulator back to its layout, rescales it and keeps this iteration's P (in the wgmma A-operand layout) for the
    next iteration's PV.

    The fields are what the two forms share: the loop's names, its statements as the rule wrote them (indented for
    the loop body) and the layouts. What differs is passed to `lines`."""

    plan: AttentionPlan
    order: Sequence[str]  # the ops of one iteration, in order (the schedule's `steady`: ATTENTION_STEADY)
    it: str
    iters: str
    index: Callable[[str], str]  # the loop variable's value at an iteration (`LoopRange.value`)
    uses_var: bool  # the statements read the loop variable
    slot: str  # this iteration's K slot
    prev_slot: str  # the previous iteration's V slot (its PV is issued here)
    p_prev: str
    zeros: str  # the QK^T accumulator's initial value
    p_text: str  # P as the PV dot reads it
    pv_layout: str
    p_layout: str
    acc_layout: str
    before: list[str]
    softmax: list[str]
    rescales: list[str]
    after: list[str]
    # An iteration guard (`if kbid:` around the iteration's work, `analysis.guards`): its test, and the consumer's
    # statements before and after the dots that run under it (`before` and `after` then hold the others)
    guard: str = ""
    guarded_before: list[str] = field(default_factory=list)
    guarded_after: list[str] = field(default_factory=list)

    def lines(self, *, q: str, k_ring: str, v_ring: str, in_flight: int | str, acquire: Sequence[str],
              issued: Sequence[str] = (), k_read: Sequence[str] = (), v_read: Sequence[str] = ()) -> Iterator[str]:
        """The loop header and the ops of `order`, loop body indented. Per form:
        `q`, `k_ring`, `v_ring`: Q's shared buffer and the K and V rings (the ring: its `_smem` buffers; a consumer:
        its own slot of the Q buffers and the loader's rings);
        `in_flight`: the wgmmas left in flight by the wait for QK^T (the ring: its schedule's `mma_in_flight`; a
        consumer: 1);
        `acquire`: the lines that pick the slots and wait until their tiles have landed (the ring: `wait_group` and a
        barrier; a consumer: the `ready` mbarriers, then its turn);
        `issued`: the lines right after the two wgmmas are issued (a consumer passes the turn on);
        `k_read`, `v_read`: the lines after the wait for QK^T and for PV, which release the slot it read (a consumer
        arrives on the `empty` mbarrier; the ring refills its slots after the step, in its own lines)."""
        plan = self.plan
        k_operand = f"{k_ring}.index({self.slot})"
        if plan.k_transposed:
            k_operand += ".permute((1, 0))"
        yield f"for {self.it} in range({self.iters}):"
        order = list(self.order)
        if self.guard:
            # The iteration's work under its guard: from the QK^T wgmma on, everything but the statements after the
            # dots that run whatever the test (pointer moves). Where the test fails the previous iteration's PV is
            # still issued and retired (its P is that iteration's), and the next one's is of a zero P; the slots
            # were waited for above and are refilled after the step either way, so the ring keeps its count.
            at = order.index("qk")
            tail = [op for op in order[at:] if op != "consumer_after"]
            inside = list(self._ops(tail, q, k_ring, v_ring, k_operand, in_flight, acquire, issued, k_read, v_read))
            skipped = list(self._ops([op for op in tail if op in ("pv", "issued", "retire_pv", "v_read", "convert")],
                                     q, k_ring, v_ring, k_operand, in_flight, acquire, issued, k_read, v_read))
            yield from self._ops(order[:at], q, k_ring, v_ring, k_operand, in_flight, acquire, issued, k_read,
                                 v_read)
            yield f"    if {self.guard}:"
            yield from ("    " + line for line in [*self.guarded_before, *inside, *self.guarded_after])
            yield "    else:"
            yield from ("    " + line for line in skipped)
            yield f"        {self.p_prev} = gl.zeros_like({self.p_prev})"
            if "consumer_after" in order:
                yield from self.after
            return
        yield from self._ops(order, q, k_ring, v_ring, k_operand, in_flight, acquire, issued, k_read, v_read)

    def _ops(self, order: Sequence[str], q: str, k_ring: str, v_ring: str, k_operand: str, in_flight: int | str,
             acquire: Sequence[str], issued: Sequence[str], k_read: Sequence[str], v_read: Sequence[str]
             ) -> Iterator[str]:
        plan = self.plan
        for op in order:
            if op == "index":
                if self.uses_var:
                    yield f"    {plan.var} = {self.index(self.it)}"
            elif op == "consumer_before":
                yield from self.before
            elif op == "acquire":
                yield from acquire
            elif op == "qk":
                yield f"    {plan.scores} = warpgroup_mma({q}, {k_operand}, {self.zeros}, is_async=True)"
            elif op == "pv":
                yield (f"    {plan.acc} = warpgroup_mma({self.p_prev}, {v_ring}.index({self.prev_slot}), "
                       f"gl.convert_layout({plan.acc}, {self.pv_layout}), is_async=True)")
            elif op == "issued":
                yield from issued
            elif op == "retire_qk":
                yield "    # Wait for QK^T only: the previous iteration's PV keeps the tensor cores busy during the softmax."
                yield (f"    {plan.scores}, _ = warpgroup_mma_wait({in_flight}, deps=[{plan.scores}, "
                       f"{k_ring}.index({self.slot})])")
            elif op == "k_read":
                yield from k_read
            elif op == "scale":
                if plan.scores_scale is not None:
                    factor, left = plan.scores_scale
                    yield (f"    {plan.scores} = {code(factor)} * {plan.scores}" if left else
                           f"    {plan.scores} = {plan.scores} * {code(factor)}")
            elif op == "softmax":
                yield from self.softmax
            elif op == "retire_pv":
                yield (f"    {plan.acc}, _ = warpgroup_mma_wait(0, deps=[{plan.acc}, "
                       f"{v_ring}.index({self.prev_slot})])")
            elif op == "v_read":
                yield from v_read
            elif op == "convert":
                yield f"    {plan.acc} = gl.convert_layout({plan.acc}, {self.acc_layout})"
            elif op == "rescale":
                yield from self.rescales
            elif op == "keep_p":
                yield f"    {self.p_prev} = gl.convert_layout({self.p_text}, {self.p_layout})"
            elif op == "consumer_after":
                yield from self.after
            else:
                raise ValueError(f"unknown op {op!r} in a flash-attention ring's steady state")


#: The calls that issue an asynchronous wgmma in a loop pipelined in order (`IN_ORDER_STEADY`): A from shared memory,
#: or from registers through `_wgmma_a_regs` (transpile/helpers/hopper.py).
WGMMA_ISSUES = ("warpgroup_mma", "_wgmma_a_regs")


@dataclass
class _Unit:
    statement: cst.BaseStatement
    token: str = ""  # an issued wgmma: the name its (asynchronous) result is bound to
    acc: str = ""  # ... and the accumulator it adds to, where that is a name (a chain on one accumulator)

    @property
    def reads(self) -> set[str]:
        statement = self.statement
        if not isinstance(statement, cst.SimpleStatementLine):
            return read_names(statement)  # (a compound statement: what it binds counts as read too)
        names: set[str] = set()
        for small in statement.body:
            if isinstance(small, cst.Assign):
                names |= read_names(small.value)
                names |= {n for t in small.targets if not isinstance(t.target, (cst.Name, cst.Tuple))
                          for n in read_names(t.target)}
            elif isinstance(small, cst.AugAssign):
                names |= read_names(small.value) | read_names(small.target)
            elif isinstance(small, cst.AnnAssign):
                names |= read_names(small.value) if small.value is not None else set()
            else:
                names |= read_names(small)
        return names

    @property
    def writes(self) -> set[str]:
        return assigned_names(self.statement)


def wgmmas_in_order(statements: Sequence[cst.BaseStatement], name: Callable[[str], str],
                    retire_deps: Sequence[str] = ()) -> list[str]:
    """The statements of one iteration of a loop pipelined in order, each wgmma issued as early as its operands allow
    and waited for where its result is first read (the MMA engine of `IN_ORDER_STEADY`).

    A statement that issues a wgmma (`WGMMA_ISSUES`, asynchronous) is split where the wgmma is part of an expression
    (`d = warpgroup_mma(v, ...).to(gl.float32)`: the wgmma is bound to a name of its own, `name("d_mma")`, and the
    statement reads that). Each wgmma moves up past the statements it does not depend on (it neither reads what they
    bind nor binds what they read), and after the wgmmas whose operands are ready as early (so the issue order is the
    loop's among wgmmas ready together, and a wait for one result leaves the ones issued after it in flight:
    `warpgroup_mma_wait(n)` waits until at most n are). Before a
    statement that reads or rebinds an outstanding result, one wait retires it and every earlier one; a wgmma into an
    accumulator still in flight is chained on it without a wait (the tensor cores run a chain in order). The last
    wait, at the end of the iteration, retires the rest: with `retire_deps` (the iteration's ring slots) among its
    dependencies, no slot is refilled while a wgmma reads it."""
    units: list[_Unit] = []
    for statement in statements:
        call = _issue(statement)
        if call is None:
            units.append(_Unit(statement))
            continue
        small = statement.body[0]  # type: ignore[union-attr]
        target = small.targets[0].target.value  # type: ignore[union-attr]
        acc = call.args[2].value if len(call.args) > 2 else None
        acc_name = acc.value if isinstance(acc, cst.Name) else ""
        if small.value is call:  # (`x = warpgroup_mma(...)`)
            units.append(_Unit(statement, target, acc_name))
            continue
        token = name(f"{target}_mma")
        units.append(_Unit(cst.parse_statement(f"{token} = {code(call)}\n"), token, acc_name))
        units.append(_Unit(statement.deep_replace(call, cst.Name(token))))  # type: ignore[arg-type]
    order: list[_Unit] = []
    place = {id(unit): i for i, unit in enumerate(units)}
    ready: dict[int, int] = {}  # an issued wgmma (id of its unit) -> the place in `units` of the last unit it needs
    for unit in units:
        if not unit.token:
            order.append(unit)
            continue
        needs = [i for i, placed in enumerate(order) if _depends(unit, placed)]
        at = needs[-1] + 1 if needs else 0
        ready[id(unit)] = max((place[id(order[i])] for i in needs), default=-1)
        # (a wgmma placed already whose operands were ready no later than this one's stays before it)
        before = [i for i in range(at, len(order)) if order[i].token and ready[id(order[i])] <= ready[id(unit)]]
        order.insert(before[-1] + 1 if before else at, unit)
    lines: list[str] = []
    outstanding: list[str] = []
    for unit in order:
        touched = (unit.reads | unit.writes) - ({unit.acc} if unit.token else set())
        needed = [i for i, token in enumerate(outstanding) if token in touched]
        if needed:
            last = max(needed)
            retired = outstanding[:last + 1]
            lines.append(f"{', '.join(retired)} = warpgroup_mma_wait({len(outstanding) - last - 1}, "
                         f"deps=[{', '.join(retired)}])")
            outstanding = outstanding[last + 1:]
        lines.append(code(unit.statement))
        if unit.token:
            outstanding = [t for t in outstanding if t != unit.token] + [unit.token]
    if outstanding:
        kept = ", ".join(outstanding + ["_"] * len(retire_deps))
        lines += ["# Every wgmma of the iteration has finished (and read its slots) before the next refills one.",
                  f"{kept} = warpgroup_mma_wait(0, deps=[{', '.join([*outstanding, *retire_deps])}])"]
    return lines


def _issue(statement: cst.BaseStatement) -> cst.Call | None:
    """The wgmma call a statement `name = ...` issues (one at most), else None."""
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Assign) and len(statement.body[0].targets) == 1
            and isinstance(statement.body[0].targets[0].target, cst.Name)):
        return None
    calls = [n for n in calls_in(statement.body[0].value)
             if isinstance(n.func, cst.Name) and n.func.value in WGMMA_ISSUES]
    return calls[0] if len(calls) == 1 else None


def _depends(unit: _Unit, before: _Unit) -> bool:
    """`unit` cannot move above `before`: it reads what `before` binds, or binds what `before` reads or binds."""
    return bool(unit.reads & before.writes or unit.writes & (before.reads | before.writes))
