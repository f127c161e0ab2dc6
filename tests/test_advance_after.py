"""Pointers a pipelined loop advances that the code after it reads (a peeled K tail): the copies advance a copy of
their own, so the expanders bind each pointer after the loop to where the loop leaves it, `p += iterations * step`
(`LoopPlan.advanced`, `transpile.analysis.pipeline.advance_after`); a step the loop computes is still refused."""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from transpile.analysis.dot_loops import dot_loops
from transpile.analysis.pipeline import LoopPlan, LoopRefusal, advance_after, plan_loop
from transpile.engine import prepare, translate_source
from transpile.targets import get_target

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "suite_gemm_peeled_tail.py"
TEXT = FIXTURE.read_text(encoding="utf-8")


def _plan(text: str, advances_after: bool) -> LoopPlan | LoopRefusal | None:
    prepared = prepare(text, "k.py")
    fn = prepared.facts.functions["peeled_tail_matmul_kernel"]
    loop = next(iter(dot_loops(prepared.facts, fn)))
    return plan_loop(prepared.source, loop.node, prepared.plans[fn.name], 3, advances_after=advances_after)


def test_the_pointers_the_tail_reads_are_advanced_after_the_loop() -> None:
    refused = _plan(TEXT, advances_after=False)
    assert isinstance(refused, LoopRefusal) and "`a_ptrs`, which the loop computes for its loads, is read after it" \
        in refused.reason
    plan = _plan(TEXT, advances_after=True)
    assert isinstance(plan, LoopPlan)
    assert [(name, cst.Module([]).code_for_node(step)) for name, step in plan.advanced] == [
        ("a_ptrs", "BLOCK_K * stride_ak"), ("b_ptrs", "BLOCK_K * stride_bk")]
    assert advance_after(plan, "num_iters") == ["a_ptrs += gl.maximum(num_iters, 0) * (BLOCK_K * stride_ak)",
                                                "b_ptrs += gl.maximum(num_iters, 0) * (BLOCK_K * stride_bk)"]


def test_a_step_the_loop_computes_is_refused() -> None:
    text = TEXT.replace("        a_ptrs += BLOCK_K * stride_ak\n", "        a_ptrs += (k + 1 - k) * BLOCK_K * stride_ak\n")
    assert text != TEXT
    refused = _plan(text, advances_after=True)
    assert isinstance(refused, LoopRefusal) and "`a_ptrs`, which the loop computes for its loads, is read after it" \
        in refused.reason


def test_each_expander_advances_them_after_its_loop() -> None:
    for target in ("gfx950", "gfx942", "gfx1250"):
        result = translate_source(TEXT, "k.py", get_target(target))
        assert [f.pipelined for f in result.functions] == [True], target
        after = result.text.split("# The pointers the code after the loop reads, where the loop leaves them")[1]
        assert after.split("\n")[1:3] == ["        a_ptrs += gl.maximum(num_iters, 0) * (BLOCK_K * stride_ak)",
                                          "        b_ptrs += gl.maximum(num_iters, 0) * (BLOCK_K * stride_bk)"], target
    # sm90 keeps the kernel as Triton by default (only its cp.async pointer ring takes it: measured slower); the
    # ring --gluon-always emits advances them too
    kept = translate_source(TEXT, "k.py", get_target("sm90"))
    assert "only the cp.async pointer ring would pipeline it" in (kept.functions[0].kept_reason or "")
    ring = translate_source(TEXT, "k.py", get_target("sm90"), gluon_always=True).text
    assert "_cp_async_load(" in ring and "a_ptrs += gl.maximum(num_iters, 0) * (BLOCK_K * stride_ak)" in ring
