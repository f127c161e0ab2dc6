"""The pipelined loops are written in the op order their schedule records: the sm90 expander
(`transpile.lowering.sm90`: the GEMM rings and warp-specialised partitions through the copy and MMA engines, the
flash-attention step) and the AMD warp-pipelined loop (each stage's ops, `Stage.ops`). Each order the tool uses holds
under the schedule checker; each wrong order (a refill before the retire that frees its slot, a wgmma before its
wait, no barrier between two warpgroups, a loader that copies before its slot is handed back, a refill in the MMA
stage, the next operands read before this iteration's MMA or not at all) is written as asked and found by the
checker, so the order really is data the output follows."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from transpile.engine import translate_file
from transpile.lowering import sm90
from transpile.lowering.sm90 import (
    ATTENTION_STEADY,
    CONSUMER_STEPS,
    GEMM_STEADY,
    LOADER_STEPS,
    CpAsyncCopy,
    LoopText,
    RingNames,
    TmaCopy,
    Wgmma,
    gemm_ring,
    partition_loop,
)
from transpile.rules import hopper_attention, hopper_cp_async, hopper_pipeline
from transpile.rules.hopper_schedule import Sm90Ring
from transpile.schedule_check import check_source
from transpile.targets import get_target

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SM90 = get_target("sm90")


def _swap(order: tuple[str, ...], first: str, second: str) -> tuple[str, ...]:
    """`order` with `second` moved to just before `first`."""
    moved = [op for op in order if op != second]
    moved.insert(moved.index(first), second)
    return tuple(moved)


def _translate(module, fixture: str, steady: tuple[str, ...] | None = None, gluon_always: bool = False,  # noqa: ANN001
               **steps: tuple[str, ...]) -> str:
    """The sm90 variant of `fixture` with the rule `module` expanding its rings in the order `steady` (and the
    partitions in `steps`: LOADER_STEPS=..., CONSUMER_STEPS=...); the rule is as it was afterwards."""
    with pytest.MonkeyPatch.context() as patch:
        if steady is not None:
            patch.setattr(module, "gemm_ring", lambda _order, *args: gemm_ring(steady, *args))
        for name, value in steps.items():
            patch.setattr(module, name, value)
        return translate_file(FIXTURES / fixture, SM90, gluon_always=gluon_always).text


# (rule module, fixture, --gluon-always): a TMA ring with its warp-specialised and persistent forms, a TMA ring in a
# kernel that walks its own tiles, and a cp.async ring (kept as Triton by default: measured slower than Triton's own
# pipeliner; emitted with --gluon-always)
RINGS = {
    "tma": (hopper_pipeline, "matmul_descriptor.py", False),
    "tma in a tile loop": (hopper_pipeline, "suite_desc_persistent.py", False),
    "cp.async": (hopper_cp_async, "matmul_splitk.py", True),
}


@pytest.mark.parametrize("ring", RINGS)
def test_the_order_the_tool_uses_holds(ring: str) -> None:
    module, fixture, always = RINGS[ring]
    text = _translate(module, fixture, GEMM_STEADY, gluon_always=always)
    assert "warpgroup_mma(" in text
    report = check_source(text)
    assert report.cases and report.findings == [], "\n".join(map(str, report.findings))


WRONG = {
    "refill before the retire that frees its slot": _swap(GEMM_STEADY, "retire", "refill"),
    "wgmma before the wait for its tiles": _swap(GEMM_STEADY, "wait", "mma"),
}


@pytest.mark.parametrize("ring", RINGS)
@pytest.mark.parametrize("wrong", WRONG)
def test_a_wrong_order_is_written_and_found(ring: str, wrong: str) -> None:
    module, fixture, always = RINGS[ring]
    right = _translate(module, fixture, GEMM_STEADY, gluon_always=always)
    text = _translate(module, fixture, WRONG[wrong], gluon_always=always)
    assert text != right  # the order is what the expander follows
    assert check_source(text).findings, f"{wrong}: not found in\n{text}"


def test_two_warpgroups_need_the_barrier() -> None:
    """Without the barrier after the retire, one warpgroup refills a slot the other's wgmma still reads (the
    checker follows one and two warpgroups)."""
    steady = tuple(op for op in GEMM_STEADY if op != "barrier")
    text = _translate(hopper_pipeline, "matmul_descriptor.py", steady)
    findings = check_source(text).findings
    assert findings and all("while another wave may still be reading it" in str(f) for f in findings), findings
    assert all("num_warps=8" in f.case for f in findings)  # one warpgroup's own wait ends its reads


def test_partitions_follow_their_steps() -> None:
    """The warp-specialised loader copies only into slots handed back; a loader that copies first, or a consumer
    that hands a slot back before retiring the wgmma that reads it, is found (the persistent form: both partitions
    from `partition_loop`)."""
    right = _translate(hopper_pipeline, "matmul_descriptor.py")
    assert "_tile_consumer" in right and "_tile_loader" in right and check_source(right).findings == []
    early_copy = _swap(LOADER_STEPS, "wait_empty", "copy")
    text = _translate(hopper_pipeline, "matmul_descriptor.py", LOADER_STEPS=early_copy)
    assert text != right and check_source(text).findings
    early_release = _swap(CONSUMER_STEPS, "retire", "release")
    text = _translate(hopper_pipeline, "matmul_descriptor.py", CONSUMER_STEPS=early_release)
    assert text != right and check_source(text).findings
    # One thread arrives for the partition: with two warpgroups, the barrier after the retire is what makes the
    # other warpgroup's reads of the slot over before it is handed back.
    no_barrier = tuple(op for op in CONSUMER_STEPS if op != "barrier")
    text = _translate(hopper_pipeline, "matmul_descriptor.py", CONSUMER_STEPS=no_barrier)
    findings = check_source(text).findings
    assert text != right and findings and all("is handed back" in f.message and "num_warps=8" in f.case
                                              for f in findings), findings


LOOP_BODY = """        off_k = k * BLOCK_K
        a = a_desc.load([off_m, off_k])
        b = b_desc.load([off_k, off_n])
        acc = tl.dot(a, b, acc)
"""
# The descriptor GEMM's loop written other ways: the expander indents every line of a statement that spans lines
# and keeps comments with their statements.
BODIES = {
    "carried offset advanced after the copies, behind a comment": (
        "        a = a_desc.load([off_m, off_k])\n        b = b_desc.load([off_k, off_n])\n"
        "        acc = tl.dot(a, b, acc)\n        # the next K block\n        off_k += BLOCK_K\n", "off_k_next"),
    "an if block after the dot": (LOOP_BODY + "        if k == 3:\n            acc = acc * 2.0\n", "acc"),
    "a comment before a producer statement": (
        "        # this iteration's K offset\n" + LOOP_BODY, "off_k_next"),
}


@pytest.mark.parametrize("body", BODIES)
def test_statements_keep_their_shape(tmp_path: Path, body: str) -> None:
    text, name = BODIES[body]
    source = (FIXTURES / "matmul_descriptor.py").read_text(encoding="utf-8")
    assert LOOP_BODY in source
    source = source.replace(LOOP_BODY, text)
    if "off_k +=" in text:
        source = source.replace("    for k in tl.range(", "    off_k = 0\n    for k in tl.range(")
    path = tmp_path / "kernel.py"
    path.write_text(source, encoding="utf-8")
    variant = translate_file(path, SM90).text
    tree = ast.parse(variant)
    report = check_source(variant)
    assert report.cases and report.findings == [], "\n".join(map(str, report.findings))
    # the statement runs in every iteration of every loop that copies (a producer statement) or multiplies (the
    # loop's own statement), the prologue's included
    loops = [n for n in ast.walk(tree) if isinstance(n, ast.For)
             and ("mbarrier.expect(" if name == "off_k_next" else "warpgroup_mma(") in ast.unparse(n)
             and not any(isinstance(m, ast.For) and m is not n for m in ast.walk(n))]
    assert loops
    for loop in loops:
        if name == "acc":
            assert "if k == 3:" in ast.unparse(loop)
            continue
        # (the producer's copy `off_k_next`; the warp-specialised loader's own `off_k`)
        assigned = {t.id for n in ast.walk(loop) if isinstance(n, (ast.Assign, ast.AugAssign))
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
        assert assigned & {"off_k", "off_k_next"}, ast.unparse(loop)
        if "off_k +=" in text:  # advanced in every iteration, not once after the loop
            assert "off_k_next += BLOCK_K" in ast.unparse(loop) or "off_k += BLOCK_K" in ast.unparse(loop)


def test_indent_leaves_strings_as_they_are() -> None:
    from transpile.rules.pipeline_text import indent

    text = 'x = """a\n  b\n"""\nif x:\n    y = 1'
    assert indent(text, "    ") == '    x = """a\n  b\n"""\n    if x:\n        y = 1'
    assert indent("a\n\n b", "  ") == "  a\n\n   b"


def test_rings_record_the_order_they_were_written_in() -> None:
    result = translate_file(FIXTURES / "matmul_descriptor.py", SM90)
    rings = [s for f in result.functions for s in getattr(f, "schedules", ()) if isinstance(s, Sm90Ring)]
    assert rings and all(r.steady == GEMM_STEADY for r in rings)


LOOP = LoopText("k", lambda it: f"{it} * BK", "acc", "acc", producer_var="k_next")


def test_engines_write_their_ops() -> None:
    tma = TmaCopy("ready", (("a_desc", "[m, k_next]", "a_smem"), ("b_desc", "[k_next, n]", "b_smem")))
    assert tma.issue("i", "i", "i < n") == [
        "mbarrier.expect(ready.index(i), a_desc.block_type.nbytes + b_desc.block_type.nbytes, i < n)",
        "_tma_async_load(a_desc, [m, k_next], ready.index(i), a_smem.index(i), i < n)",
        "_tma_async_load(b_desc, [k_next, n], ready.index(i), b_smem.index(i), i < n)",
    ]
    assert tma.issue(None, "slot", None)[0] == "mbarrier.expect(ready.index(slot), a_desc.block_type.nbytes + " \
        "b_desc.block_type.nbytes)"
    cp = CpAsyncCopy(lambda it, slot: [f"_cp_async_load(a_smem.index({slot}), a_ptrs, mask={it} < n)"],
                     "NUM_STAGES - 2", 16, 8)
    assert cp.issue("j", "s", "j < n")[-1] == "async_copy.commit_group()"
    assert cp.wait("s", "0")[-2:] == ["async_copy.wait_group(NUM_STAGES - 2)", "_cta_barrier()"]
    mma = Wgmma(1, lambda s: (f"a.index({s})", f"b.index({s})"), ("a", "b"))
    assert mma.issue(LOOP, "s") == ["acc = warpgroup_mma(a.index(s), b.index(s), acc, is_async=True)"]
    assert mma.retire("acc", "s")[-1] == "acc, _, _ = warpgroup_mma_wait(1, deps=[acc, a.index(s), b.index(s)])"
    assert Wgmma(1, mma.views).retire("acc", "s") == ["acc = warpgroup_mma_wait(1, deps=[acc])"]


def test_an_unknown_op_is_an_error() -> None:
    tma = TmaCopy("ready", (("a_desc", "[0, k]", "a_smem"),))
    mma = Wgmma(1, lambda s: (f"a.index({s})", f"b.index({s})"))
    with pytest.raises(ValueError, match="'prefetch'"):
        gemm_ring((*GEMM_STEADY, "prefetch"), LOOP, RingNames(), tma, mma, [])
    with pytest.raises(ValueError, match="'prefetch'"):
        partition_loop(("slot", "prefetch"), LOOP, tma, mma, "n")
    assert sm90.GEMM_STEADY.count("refill") == 1


def test_attention_follows_its_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """The flash-attention step is written in the order its schedule records (ATTENTION_STEADY); a step without
    the wait for PV (its V slot is then refilled while the wgmma may still read it) is written so and found."""
    right = translate_file(FIXTURES / "attention_fwd.py", SM90).text
    assert "warpgroup_mma(" in right and check_source(right).findings == []
    rings = [s for f in translate_file(FIXTURES / "attention_fwd.py", SM90).functions for s in f.schedules
             if isinstance(s, Sm90Ring)]
    assert rings and all(r.steady == ATTENTION_STEADY for r in rings if r.form == "attention")
    no_wait = tuple(op for op in ATTENTION_STEADY if op != "retire_pv")
    monkeypatch.setattr(hopper_attention, "ATTENTION_STEADY", no_wait)
    text = translate_file(FIXTURES / "attention_fwd.py", SM90).text
    assert text != right and check_source(text).findings


def test_explain_shows_the_order_written() -> None:
    from rich.console import Console

    from transpile.explain import explain_file

    console = Console(width=400, record=True)
    for table in explain_file(FIXTURES / "matmul_descriptor.py", SM90, "matmul_descriptor.py"):
        console.print(table)
    assert "in the order written: " + " -> ".join(GEMM_STEADY) in console.export_text()
    # AMD: the stage plan the variant's loop was emitted from (not planned again), its stages' ops in order
    console = Console(width=400, record=True)
    for table in explain_file(FIXTURES / "canon_gemm_nt.py", get_target("gfx950"), "canon_gemm_nt.py"):
        console.print(table)
    text = console.export_text()
    assert "(as emitted)" in text and "(in order: consume)" in text
    assert "(in order: operands -> refill)" in text  # (gfx950's direct-to-LDS copies: nothing staged)


# The AMD warp-pipelined loop: each iteration waits for its copies, then runs the plan's stages in order, each its
# ops in order (`Stage.ops`: MMA_OPS, MEM_OPS of `transpile.analysis.stages`).
AMD_WRONG = {
    "the refill in the MMA stage, before the MMA": (("refill", "consume"), ("operands", "store_staged")),
    "the next operands read before this iteration's MMA": (("operands", "consume"), ("store_staged", "refill")),
    "no read of the next operands": (("consume",), ("store_staged", "refill")),
}


def _amd(target: str, ops: tuple[tuple[str, ...], tuple[str, ...]] | None = None) -> str:
    from transpile.analysis import stages

    with pytest.MonkeyPatch.context() as patch:
        if ops is not None:
            patch.setattr(stages, "MMA_OPS", ops[0])
            patch.setattr(stages, "MEM_OPS", ops[1])
        return translate_file(FIXTURES / "canon_gemm_nt.py", get_target(target)).text


@pytest.mark.parametrize("target", ["gfx950", "gfx942", "gfx1250"])
def test_amd_stages_follow_their_ops(target: str) -> None:
    right = _amd(target)
    report = check_source(right)
    assert "warp_pipeline_stage" in right and report.cases and report.findings == []
    for wrong, ops in AMD_WRONG.items():
        text = _amd(target, ops)
        assert text != right, wrong
        assert check_source(text).findings, f"{target}: {wrong}: not found"
    with pytest.raises(ValueError, match="'prefetch'"):
        _amd(target, (("consume",), ("operands", "prefetch")))
