"""The schedule checker (`transpile.schedule_check`): every pipelined variant the tool emits (AMD warp-pipelined
loops, Hopper mbarrier/TMA/cp.async rings with or without warp specialisation) holds in every case, and each way of
breaking a ring (a wait one group short, a slot one off, a copy in the wrong stage, a slot handed back before the wgmma
that reads it completes, a phase off by one, a copy left in flight) is found, with its line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from transpile.schedule_check import check_source, pipelined_kernels

ROOT = Path(__file__).resolve().parent.parent
EXPECTED = ROOT / "fixtures" / "expected"
PIPELINED = sorted(
    p for target in ("gfx950", "gfx942", "gfx1250") for p in (EXPECTED / target).glob("*.py")
    if "warp_pipeline_stage" in p.read_text(encoding="utf-8")
)


HOPPER = sorted(p for p in (EXPECTED / "sm90").glob("*.py")
                if pipelined_kernels(ast.parse(p.read_text(encoding="utf-8"))))


def test_every_target_has_pipelined_goldens() -> None:
    for target in ("gfx950", "gfx942", "gfx1250"):
        assert any(p.parent.name == target for p in PIPELINED), target
    # the Hopper forms: TMA rings with and without warp specialisation, attention (two consumers), cp.async rings
    names = {p.stem for p in HOPPER}
    assert {"matmul_descriptor_sm90", "attention_fwd_sm90", "fx_attention_kt_sm90"} <= names, names


@pytest.mark.parametrize("path", PIPELINED + HOPPER, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_pipelined_variant_holds(path: Path) -> None:
    report = check_source(path.read_text(encoding="utf-8"))
    assert report.cases, "no warp-pipelined kernel found"
    # each kernel is followed over ring depths 2..most, 0 to 3 rounds and more, with and without a K tail
    assert all(cases >= 2 * 10 for cases in report.cases.values()), report.cases
    assert report.findings == [], "\n".join(map(str, report.findings))


GFX950 = (EXPECTED / "gfx950" / "canon_gemm_nt_gfx950.py").read_text(encoding="utf-8")
GFX942 = (EXPECTED / "gfx942" / "canon_gemm_nt_gfx942.py").read_text(encoding="utf-8")

# (source, what the emitter writes, a broken version, a phrase of the finding)
BROKEN = {
    "steady-state wait one group short": (
        GFX950, "async_copy.wait_group(NUM_STAGES - 2)\n                with",
        "async_copy.wait_group(NUM_STAGES - 1)\n                with", "is read before every wave's wait"),
    "prologue wait leaves the first copies in flight": (
        GFX950, "async_copy.wait_group(\n            NUM_STAGES - 1\n        )", "async_copy.wait_group(NUM_STAGES)",
        "is read before every wave's wait"),
    "reads the slot being refilled": (
        GFX950, "x_ring.index((step + 1) % NUM_STAGES)", "x_ring.index(step)", "uses tile"),
    "copies into the slot about to be read": (
        GFX950, "x_ring.index(step),", "x_ring.index((step + 1) % NUM_STAGES),", "while another wave may still be"),
    "no wait after the loop": (
        GFX950, "async_copy.wait_group(0)", "pass", "still in flight when the kernel ends"),
    "register-staged store one slot ahead": (
        GFX942, "x_ring.index(step).store", "x_ring.index((step + 1) % NUM_STAGES).store",
        "while another wave may still be"),
    "register-staged read of the slot being stored": (
        GFX942, "x_ring.index((step + 1) % NUM_STAGES).load", "x_ring.index(step).load", "uses tile"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_rings_are_found(name: str) -> None:
    source, written, broken, phrase = BROKEN[name]
    assert written in source, "the golden no longer has the line this test breaks"
    report = check_source(source.replace(written, broken, 1))
    assert report.findings, name
    assert any(phrase in f.message for f in report.findings), [str(f) for f in report.findings[:3]]
    # a finding names the kernel, a line of the variant and the case
    finding = report.findings[0]
    assert finding.kernel == "linear_nt_kernel" and finding.line > 0 and "NUM_STAGES=" in finding.case


TWO_STAGE = '''
@gluon.jit
def k(a_ptr, K, offs, layout):
    NUM_STAGES: gl.constexpr = _ring_slots(65536, 3, [64, 64], a_ptr.dtype.element_ty)
    ring = gl.allocate_shared_memory(gl.float16, [NUM_STAGES, 64, 64], layout)
    acc = gl.zeros((64, 64), dtype=gl.float32, layout=layout)
    num_iters = gl.cdiv(K, 64)
    for i in gl.static_range(NUM_STAGES):
        async_copy.buffer_load_to_shared(ring.index(i), a_ptr, offs)
        async_copy.commit_group()
    async_copy.wait_group(NUM_STAGES - 1)
    a = async_copy.load_shared_relaxed(ring.index(0), layout)
    for it in range(num_iters):
        async_copy.wait_group(NUM_STAGES - 2)
        with gl.amd.warp_pipeline_stage("mma", priority=0):
            acc = _dot(a, a, acc)
            COPY_IN_MMA
        with gl.amd.warp_pipeline_stage("mem", priority=1):
            a = async_copy.load_shared_relaxed(ring.index((it + 1) % NUM_STAGES), layout)
            COPY_IN_MEM
    async_copy.wait_group(0)
'''
COPY = "async_copy.buffer_load_to_shared(ring.index(it % NUM_STAGES), a_ptr, offs); async_copy.commit_group()"


def test_a_copy_in_the_stage_the_other_group_reads_in_is_found() -> None:
    """The warp groups run a stage apart: a copy into slot it % S issued in the MMA stage of iteration it overlaps the
    other group's read of that slot (iteration it's operands, read in its memory stage of it - 1). In lockstep the
    barrier between the stages would order them; the checker follows both groups."""
    good = check_source(TWO_STAGE.replace("COPY_IN_MMA", "pass").replace("COPY_IN_MEM", COPY))
    assert good.findings == [] and good.cases["k"] > 0
    bad = check_source(TWO_STAGE.replace("COPY_IN_MMA", COPY).replace("COPY_IN_MEM", "pass"))
    assert any("while another wave may still be reading it" in f.message for f in bad.findings), bad.findings


def test_what_the_checker_cannot_follow_is_a_finding() -> None:
    report = check_source(TWO_STAGE.replace("COPY_IN_MMA", "pass").replace(
        "COPY_IN_MEM", COPY).replace("async_copy.wait_group(NUM_STAGES - 2)", "async_copy.wait_group(K)"))
    assert report.findings and "cannot follow" in report.findings[0].message
    assert "a wait whose count the checker cannot evaluate" in report.findings[0].message


SM90 = EXPECTED / "sm90"
IADD = (SM90 / "canon_gemm_iadd_sm90.py").read_text(encoding="utf-8")  # warp-specialised TMA ring, and one without
ATTENTION = (SM90 / "attention_fwd_sm90.py").read_text(encoding="utf-8")  # a loader and two consumers
CP_ASYNC = (SM90 / "fx_attention_kt_sm90.py").read_text(encoding="utf-8")  # a cp.async ring
GROUPED = (SM90 / "matmul_grouped_sm90.py").read_text(encoding="utf-8")

BROKEN_HOPPER = {
    "a second wgmma left in flight when its slot is handed back": (
        IADD, "accumulator = warpgroup_mma_wait(1, deps=[accumulator])",
        "accumulator = warpgroup_mma_wait(2, deps=[accumulator])", "while the wgmma of line"),
    "the slot just read is handed back": (
        IADD, "empty.index((n_done + it + NUM_STAGES - 1) % NUM_STAGES), pred=it > 0",
        "empty.index(slot), pred=it >= 0", "while the wgmma of line"),
    "the consumer waits for the wrong phase": (
        IADD, "mbarrier.wait(ready.index(slot), ((n_done + it) // NUM_STAGES) & 1)",
        "mbarrier.wait(ready.index(slot), (((n_done + it) // NUM_STAGES) & 1) ^ 1)", "deadlock"),
    "the loader does not wait for a free slot": (
        IADD, "mbarrier.wait(empty.index(slot), (((n_done + it) // NUM_STAGES) & 1) ^ 1)", "pass",
        "more arrivals on an mbarrier than its count"),
    "the wgmma reads a slot before its TMA copy's phase": (
        GROUPED, "mbarrier.wait(ready.index(slot), (it // NUM_STAGES) & 1)", "pass",
        "before this partition has waited for the mbarrier phase"),
    "a cp.async wait one group short": (
        CP_ASYNC, "async_copy.wait_group(2 * NUM_STAGES - 3)", "async_copy.wait_group(2 * NUM_STAGES - 2)",
        "is read before every wave's wait"),
    "a consumer hands K back before its QK^T completes": (
        ATTENTION, ("        qk, _ = warpgroup_mma_wait(1, deps=[qk, k_ring.index(slot)])\n"
        "        mbarrier.arrive(k_empty.index(slot))"),
        ("        mbarrier.arrive(k_empty.index(slot))\n"
        "        qk, _ = warpgroup_mma_wait(1, deps=[qk, k_ring.index(slot)])"), "while the wgmma of line"),
}


@pytest.mark.parametrize("name", sorted(BROKEN_HOPPER))
def test_broken_hopper_rings_are_found(name: str) -> None:
    source, written, broken, phrase = BROKEN_HOPPER[name]
    assert written in source, "the golden no longer has the line this test breaks"
    report = check_source(source.replace(written, broken, 1))
    assert any(phrase in f.message for f in report.findings), [str(f) for f in report.findings[:3]]
