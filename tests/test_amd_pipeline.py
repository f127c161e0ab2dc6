"""AMD warp pipelining: loop dataflow, stage plans on small loops (stages, waits, rings, refusals with their codes and
lines), and the compiled GEMM-family variants (warp-pipeline lowering in the AMDGCN, LDS use against the target).

The compile tests build each golden variant for its AMD target with Triton on the CPU and read the code object's
assembly: `s_setprio` per stage, the split of the CTA into two warp groups (the extra `s_barrier` / on gfx1250
`s_barrier_signal`/`s_barrier_wait` pairs), the copy engine's instructions, and `metadata.shared`.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from transpile.analysis.dataflow import Effect, loop_dataflow
from transpile.analysis.layouts import analyse_layouts
from transpile.analysis.pipeline import LoopPlan, operand_anchors
from transpile.analysis.stages import StagePlan, StageRefusal, plan_stages
from transpile.discover import discover
from transpile.engine import translate_source
from transpile.schedule_check import check_source
from transpile.passes.canonical import canonicalize_text
from transpile.source import parse_source
from transpile.targets import get_target
from transpile.verify import verify

HEAD = "import triton\nimport triton.language as tl\n\n\n"


def _mma_stages(text: str) -> list[str]:
    """The text of every `mma` warp-pipeline stage of a variant, up to its `mem` stage."""
    return [loop.split('with gl.amd.warp_pipeline_stage("mem"', 1)[0]
            for loop in text.split('with gl.amd.warp_pipeline_stage("mma", priority=0):')[1:]]


GEMM = HEAD + '''@triton.jit
def mm(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * BN + offs_n[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BK), num_stages=NUM):
        k_left = K - k * BK
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        BODY
        a_ptrs += BK
        b_ptrs += BK * BN
    tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc.to(tl.float16))
'''


def gemm(body: str = "acc = acc * 1.0", stages: int = 3) -> str:
    return GEMM.replace("BODY", body).replace("NUM", str(stages))


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def stage_plan(text: str, engine: str = "registers", lds: int = 64 * 1024, anchored: bool = False
               ) -> StagePlan | StageRefusal | None:
    """The first loop's stage plan; `anchored`: with the layouts the AMD targets translate with (computed operands in
    their MMA layouts, `operand_anchors`)."""
    source = parse_source(text, "x.py")
    facts = discover(source)
    plans = analyse_layouts(facts)
    if anchored:
        plans = analyse_layouts(facts, operand_anchors=operand_anchors(source, facts, plans, 3))
    fn = next(iter(facts.functions.values()))
    loop = next(n for n in fn.node.body.body if isinstance(n, cst.For))
    return plan_stages(source, fn, loop, plans[fn.name], engine, lds)


def assert_holds_and_compiles(result, values: dict[str, object]) -> None:  # noqa: ANN001 - a TranslationResult
    """The variant's schedule holds in every case the checker runs, and it compiles at `values`."""
    report = check_source(result.text)
    assert report.cases and not report.findings, report.findings[:3]
    compiled = verify(result, values, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def attention_plan(text: str):  # noqa: ANN201 - (SourceFile, AttentionPlan | LoopRefusal | None)
    """The source and the in-order attention plan (the AMD expander's) of the first loop of `text`'s kernel."""
    from transpile.analysis.attention import plan_attention_loop

    source = parse_source(text, "x.py")
    facts = discover(source)
    fn = next(iter(facts.functions.values()))
    loop = next(n for n in fn.node.body.body if isinstance(n, cst.For))
    return source, plan_attention_loop(source, loop, analyse_layouts(facts)[fn.name], 2, in_order=True)


def test_dataflow_of_a_gemm_loop() -> None:
    text = gemm()
    source = parse_source(text, "x.py")
    facts = discover(source)
    fn = facts.functions["mm"]
    loop = next(n for n in fn.node.body.body if isinstance(n, cst.For))
    flow = loop_dataflow(source, loop, analyse_layouts(facts)["mm"])
    assert flow.carried == ["a_ptrs", "b_ptrs", "acc"]  # read before this iteration assigns them (first read first)
    by_line = {f.line: f for f in flow.statements}
    load_a = by_line[line_of(text, "a = tl.load")]
    assert Effect.GLOBAL_LOAD in load_a.effects and load_a.defines == {"a"}
    sources = {u.name: (u.source, u.statement) for u in load_a.uses}
    assert sources["a_ptrs"] == ("carried", flow.statements.index(by_line[line_of(text, "a_ptrs += BK")]))
    assert sources["k_left"] == ("iteration", 0)
    assert sources["offs_k"] == ("outside", None)
    assert Effect.SHARED in by_line[line_of(text, "tl.dot")].effects
    assert flow.slice_of({2}) == {0, 2}  # the B load needs k_left, nothing else of this iteration


def test_dataflow_names_barrier_ops() -> None:
    text = gemm("s = tl.sum(acc, axis=1)")
    source = parse_source(text, "x.py")
    facts = discover(source)
    loop = next(n for n in facts.functions["mm"].node.body.body if isinstance(n, cst.For))
    flow = loop_dataflow(source, loop, analyse_layouts(facts)["mm"])
    barriers = [what for f in flow.statements for _, what in f.barriers]
    assert barriers == ["reduction `tl.sum`"]


@pytest.mark.parametrize(("engine", "stages", "wait"), [
    ("registers", 3, None),
    ("async_copy", 4, "async_copy.wait_group(2)"),
    ("tdm", 3, "tdm.async_wait(0)"),
])
def test_stage_plan_of_a_pointer_gemm(engine: str, stages: int, wait: str | None) -> None:
    text = gemm(stages=stages)
    sp = stage_plan(text, engine)
    assert isinstance(sp, StagePlan)
    # Pointer tiles go by the target's direct-to-LDS copies (gfx950), else by 16-byte buffer loads through registers
    # (gfx942; gfx1250, whose TDM needs a descriptor): the launcher runs the kernel where the launch proves the
    # 16-byte alignment they need.
    assert sp.engine == ("async_copy" if engine == "async_copy" else "buffer_loads")
    assert [(s.label, s.priority) for s in sp.stages] == [("mma", 0), ("mem", 1)]
    assert line_of(text, "tl.dot") in sp.stages[0].lines and line_of(text, "acc * 1.0") in sp.stages[0].lines
    assert line_of(text, "a_ptrs += BK") in sp.stages[1].lines and line_of(text, "k_left =") in sp.stages[1].lines
    assert sp.slots == stages and sp.distance == stages
    assert sp.wait == (wait if engine == "async_copy" else None)
    assert sp.loop.carried == ["a_ptrs", "b_ptrs"]
    assert [r.shape for r in sp.rings] == [["BM", "BK"], ["BK", "BN"]]
    assert sp.ring_bytes({"BM": 128, "BN": 128, "BK": 64}) == stages * (128 * 64 + 64 * 128) * 2


def test_ring_has_three_slots_at_least() -> None:
    sp = stage_plan(gemm(stages=2))
    assert isinstance(sp, StagePlan) and sp.slots == 3


DESCRIPTOR_GEMM = HEAD + '''@triton.jit
def mm(a_ptr, b_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BK), num_stages=4):
        a = a_desc.load([0, k * BK])
        b = b_desc.load([k * BK, 0])
        acc = tl.dot(a, b, acc)
    a_desc.store([0, 0], acc.to(tl.float16))
'''


@pytest.mark.parametrize(("engine", "wait"), [("async_copy", "async_copy.wait_group(2)"), ("tdm", "tdm.async_wait(2)")])
def test_descriptor_tiles_use_the_targets_copy_engine(engine: str, wait: str) -> None:
    sp = stage_plan(DESCRIPTOR_GEMM, engine)
    assert isinstance(sp, StagePlan)
    assert sp.engine == engine and sp.slots == 4
    assert sp.wait == wait


def test_descriptor_tiles_staged_through_registers_are_buffer_loads_a_step_ahead() -> None:
    """gfx942 has no TDM and no direct-to-LDS copy of 16 bytes a lane: a loop of descriptor tiles is staged through
    registers, as buffer loads 16 bytes a lane in the copy layout (a descriptor vouches for 16-byte rows), issued a
    step before they are stored into their slot. Launches with output tiles under 64 x 64, with rings that do not fit
    twice in the LDS, with other warps than the pipeline's, or with sizes that are not multiples of 16 (loads of
    fewer bytes a lane) run the source kernel; the buffer loads' 32-bit offsets need tensors under 2 GB. The variant compiles for gfx942 and its schedule holds."""
    sp = stage_plan(DESCRIPTOR_GEMM, "registers")
    assert isinstance(sp, StagePlan) and sp.engine == "registers"
    assert [op for stage in sp.stages for op in stage.ops] == ["consume", "operands", "store_staged", "refill"]
    result = translate_source(DESCRIPTOR_GEMM, "x.py", get_target("gfx942"))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    text = result.text
    assert "a_copy_layout: gl.constexpr = _copy_layout([BM, BK], a_ptr.dtype.element_ty, gl.num_warps())" in text
    assert "b_copy_layout: gl.constexpr = _copy_layout([BK, BN], b_ptr.dtype.element_ty, gl.num_warps(), 2)" in text
    loop = text.split("for round_ in range(num_rounds):", 1)[1].split("# The last iterations", 1)[0]
    mem = loop.split('warp_pipeline_stage("mem"', 1)[1]
    # (the tiles loaded a step ago stored first, then the loads of the next iteration, in the copy layout)
    assert mem.index("a_ring.index(step).store(a_staged)") < mem.index("a_staged = _desc_buffer_load(")
    # (in the steady state the bound test along K is left out: its tiles lie inside the shape)
    assert "a_staged = _desc_buffer_load(a_desc, 0, k_next * BK, BM, BK, a_copy_layout, 1)" in mem, mem
    assert "b_staged = _desc_buffer_load(b_desc, k_next * BK, 0, BK, BN, b_copy_layout, 0)" in mem, mem
    assert "_desc_load(" not in loop
    assert "source_when=(lambda BM, BN: BM * BN < 4096, lambda BK: BK % 16 != 0,)" in text and "small=True" in text
    assert 'divisible=("K", "N", )' in text  # (16 bytes a lane, as measured, where the sizes are multiples of 16)
    assert "lds=(65536, ((('BM', 'BK'), 'a_ptr'), (('BK', 'BN'), 'b_ptr')))" in text
    report = check_source(text)
    assert report.cases and not report.findings, report
    compiled = verify(result, {"a_ptr": "*fp16", "b_ptr": "*fp16", "BM": 64, "BN": 64, "BK": 64}, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def test_descriptor_tiles_copied_direct_to_lds_on_gfx950() -> None:
    """gfx950 copies descriptor tiles straight into LDS by buffer copies from the descriptor's base, 16 bytes a lane
    (`_desc_buffer_copy`); the steady state leaves out the bound test along K (its tiles lie inside the shape:
    `descriptor_peel`), the prologue and the last iterations keep it. Launches whose row strides and last dimensions
    are not multiples of 16 (a vector cut by the shape), or with output tiles under 32 x 64, run the source kernel.
    It compiles for gfx950 and its schedule holds."""
    result = translate_source(DESCRIPTOR_GEMM, "x.py", get_target("gfx950"))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    text = result.text
    steady = text.split("for round_ in range(num_rounds):", 1)[1].split("# The last iterations", 1)[0]
    tail = text.split("# The last iterations", 1)[1]
    assert "_desc_buffer_copy(a_desc, 0, k_next * BK, a_ring.index(step), 1)" in steady
    assert "_desc_buffer_copy(b_desc, k_next * BK, 0, b_ring.index(step), 0)" in steady
    assert "_desc_buffer_copy(a_desc, 0, k_next * BK, a_ring.index(it % NUM_STAGES))" in tail
    assert "num_full = gl.minimum(num_iters, gl.maximum(K, 0) // BK)" in text
    assert 'divisible=("K", "N", )' in text
    # (A's column offset `k * BK`: launches whose K block is not a multiple of 16 run the source kernel)
    assert "source_when=(lambda BM, BN: BM * BN < 2048, lambda BK: BK % 16 != 0,)" in text
    report = check_source(text)
    assert report.cases and not report.findings, report
    compiled = verify(result, {"a_ptr": "*fp16", "b_ptr": "*fp16", "BM": 64, "BN": 64, "BK": 64}, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


@pytest.mark.parametrize(("change", "needle"), [
    # a column offset from a parameter: the launcher checks it too
    (("a = a_desc.load([0, k * BK])", "a = a_desc.load([0, k_start + k * BK])"), 'divisible=("K", "k_start", "N", )'),
    # ... computed in the kernel otherwise: no launch can vouch for it
    (("a = a_desc.load([0, k * BK])", "a = a_desc.load([0, k * BK + tl.program_id(0) * 3])"),
     "is read at a column offset `k * BK + tl.program_id(0) * 3` that no launch can vouch for"),
])
def test_descriptor_copies_direct_to_lds_only_where_a_launch_vouches_for_whole_vectors(change, needle) -> None:
    text = DESCRIPTOR_GEMM.replace("def mm(a_ptr, b_ptr, M, N, K,", "def mm(a_ptr, b_ptr, M, N, K, k_start,")
    text = text.replace(*change)
    assert change[1] in text
    result = translate_source(text, "x.py", get_target("gfx950"))
    fn = result.functions[0]
    assert needle in (result.text if fn.pipelined else fn.kept_reason), fn.kept_reason


def test_a_loop_of_pointer_and_descriptor_tiles_is_not_copied_direct_to_lds() -> None:
    text = DESCRIPTOR_GEMM.replace("def mm(a_ptr, b_ptr, M, N, K,", "def mm(a_ptr, b_ptr, M, N, K, stride_bk,").replace(
        "        b = b_desc.load([k * BK, 0])\n",
        "        b = tl.load(b_ptr + (k * BK + tl.arange(0, BK))[:, None] * stride_bk + tl.arange(0, BN)[None, :])\n")
    result = translate_source(text, "x.py", get_target("gfx950"))
    fn = result.functions[0]
    assert not fn.pipelined and "read through both pointers and tensor descriptors" in fn.kept_reason, fn.kept_reason


def test_gfx942_descriptor_buffer_loads_are_launch_checked_in_every_ring_form() -> None:
    """The row-reduction ring reads descriptor tiles by the same 32-bit buffer loads: its launcher checks the 2 GB
    bound and the tile size too."""
    text = DESCRIPTOR_GEMM.replace("        acc = tl.dot(a, b, acc)\n",
                                   "        acc = tl.dot(a, b, acc)\n        acc = acc - tl.max(acc, axis=1)[:, None]\n")
    result = translate_source(text, "x.py", get_target("gfx942"), gluon_always=True)
    assert result.functions[0].pipelined and "_desc_buffer_load(" in result.text
    assert "small=True" in result.text and "BM * BN < 4096" in result.text


def test_a_descriptor_whose_row_stride_the_kernel_computes_is_not_copied_direct_to_lds() -> None:
    text = DESCRIPTOR_GEMM.replace("strides=[K, 1], block_shape=[BM, BK]", "strides=[K * 2, 1], block_shape=[BM, BK]")
    result = translate_source(text, "x.py", get_target("gfx950"))
    fn = result.functions[0]
    assert not fn.pipelined
    assert "the descriptor `a_desc` of the tile `a` (line 11) has a row stride or last dimension `K * 2`" \
        in fn.kept_reason, fn.kept_reason


@pytest.mark.parametrize(("body", "needle", "reason"), [
    ("a_ptrs += tl.max(tl.max(acc, axis=1), axis=0).to(tl.int32)", "a_ptrs += tl.max",
     "a load depends on this iteration's MMA result"),
    ("tl.atomic_add(c_ptr + offs_m, tl.sum(acc, axis=1))", "tl.atomic_add", "a store or atomic inside the main loop"),
    ("break", "break", "data-dependent exit from the main loop"),
    ("for j in range(3):\n            acc = acc * 1.0", "for j in", "a loop inside the main loop"),
    ("if k > 3:\n            tl.atomic_add(c_ptr + offs_m, tl.max(acc, axis=1))", "tl.atomic_add(c_ptr + offs_m, tl.max",
     "inside the main loop runs `atomic_add` in a branch"),
])
def test_refusals_name_the_construct_and_line(body: str, needle: str, reason: str) -> None:
    text = gemm(body)
    sp = stage_plan(text)
    assert isinstance(sp, StageRefusal)
    assert reason in sp.reason
    result = translate_source(text, "x.py", get_target("gfx950"), gluon_always=True)
    notes = [d for f in result.functions for d in f.diagnostics if d.code == "TT040"]
    assert [(d.line, reason in d.message) for d in notes] == [(line_of(text, needle), True)]
    assert "warp_pipeline_stage" not in result.text  # the loop stays as translated


def assert_one_group(sp: object, op: str) -> None:
    """`sp` pipelines its loop on one warp group because of the op `op` names (its CTA-wide barrier would fall
    inside the `mma` stage of the warp pipeline)."""
    assert isinstance(sp, StagePlan) and sp.groups == 1 and op in sp.barrier_op, sp


@pytest.mark.parametrize("target", ["gfx950", "gfx942", "gfx1250"])
def test_a_column_reduction_in_the_loop_runs_the_ring_on_one_warp_group(target: str) -> None:
    """A column reduction of the accumulator each iteration needs a CTA-wide barrier: two warp groups a stage apart
    could not share it, so the same ring is run by one warp group (every wave in step, at the kernel's own warps).
    That form is kept as Triton by default, with its measurement; --gluon-always emits it, and it compiles and holds."""
    text = gemm("s = tl.sum(acc, axis=0)\n        acc = acc - s[None, :]")
    line = line_of(text, "tl.sum")
    assert_one_group(stage_plan(text), f"reduction `tl.sum` at line {line} in the loop body")
    result = translate_source(text, "x.py", get_target(target))
    fn = result.functions[0]
    assert not fn.pipelined and "one warp group" in fn.kept_reason and f"line {line}" in fn.kept_reason
    assert "0.8x" in fn.kept_reason  # (the measurement that keeps it)
    result = translate_source(text, "x.py", get_target(target), gluon_always=True)
    assert result.functions[0].pipelined
    loop = result.text.split("Main loop, software-pipelined", 1)[1]
    assert "warp_pipeline_stage" not in loop and "gl.num_warps() == 8" not in result.text
    assert "_cta_barrier()" in loop and "one warp group: reduction `tl.sum`" in " ".join(
        line.strip("# ") for line in loop.splitlines())
    report = check_source(result.text)
    assert report.cases and not report.findings, report
    compiled = verify(result, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "BM": 128, "BN": 128, "BK": 64},
                      all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


@pytest.mark.parametrize("body", [
    "s = tl.sum(acc, axis=1)\n        acc = acc - s[:, None]",  # of the accumulator
    "rows = tl.max(acc.to(tl.float32), 1)\n        acc = acc - rows[:, None]",  # through an elementwise cast
])
def test_a_row_reduction_puts_every_warp_along_m(body: str) -> None:
    """A row reduction of the accumulator (or of the A tile) stays inside a warp where every warp owns whole rows: the
    loop is warp-pipelined as any GEMM loop, its MMA layout with every warp along M, and launches with fewer rows than
    16 a warp (or, on gfx950 and gfx942, fewer than 64 columns) run the source kernel. Kept as Triton by default on
    gfx950 (measured 0.76-0.84x), emitted on gfx942 and gfx1250; --gluon-always emits it, and it compiles and holds."""
    text = gemm(body)
    reduced = "tl.sum" if "tl.sum" in body else "tl.max"
    sp = stage_plan(text)
    assert isinstance(sp, StagePlan) and sp.groups == 2 and sp.warps_along_m, sp
    assert f"reduction `{reduced}` at line {line_of(text, reduced)}" in sp.row_reduction
    fn = translate_source(text, "x.py", get_target("gfx950")).functions[0]
    assert not fn.pipelined and "every warp along M" in fn.kept_reason and "0.84x" in fn.kept_reason
    # (gfx942 and gfx1250: emitted by default, measured 0.48-0.81x and 0.58-0.69x)
    assert translate_source(text, "x.py", get_target("gfx1250")).functions[0].pipelined
    gfx942 = translate_source(text, "x.py", get_target("gfx942"))
    assert gfx942.functions[0].pipelined
    # (narrow tiles: each warp's 16 x N share too small to hide the B reads; such launches run the source kernel)
    assert "and BN >= 64:" in gfx942.text and "lambda BN: BN < 64" in gfx942.text
    result = translate_source(text, "x.py", get_target("gfx950"), gluon_always=True)
    assert result.functions[0].pipelined
    assert "warps_along_m=True" in result.text and 'warp_pipeline_stage("mma"' in result.text
    # (else the loop runs as translated; such launches run the source kernel)
    assert "if NUM_STAGES >= 2 and BM >= 16 * gl.num_warps() and BN >= 64:" in result.text
    assert "lambda BM: BM < 128" in result.text and "lambda BN: BN < 64" in result.text
    report = check_source(result.text)
    assert report.cases and not report.findings, report
    compiled = verify(result, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "BM": 128, "BN": 128, "BK": 64},
                      all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


@pytest.mark.parametrize("body", [
    # the reduced value reads the B tile (its rows are not the accumulator's)
    "acc = acc * tl.sum(b.to(tl.float32), axis=1)[None, :]",
    # the accumulator rebound by a transpose or a reshape before it is reduced: its rows lie elsewhere
    "x2 = tl.trans(acc)\n        acc = acc + tl.sum(x2, axis=1)[None, :]",
    "acc = tl.reshape(acc, (BN, BM))\n        s = tl.sum(acc, axis=1)\n        acc = tl.reshape(acc, (BM, BN))",
])
def test_a_row_reduction_of_another_tile_is_not_taken_as_warp_local(body: str) -> None:
    text = gemm(body)
    sp = stage_plan(text)
    assert not (isinstance(sp, StagePlan) and sp.warps_along_m), sp


ATTENTION = HEAD + '''@triton.jit
def attn(q_ptr, k_ptr, v_ptr, o_ptr, N_CTX, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + offs_m[:, None] * D + offs_d[None, :])
    m_i = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    for start_n in range(0, N_CTX, BLOCK_N):
        offs_kv = start_n + offs_n
        k = tl.load(k_ptr + offs_kv[:, None] * D + offs_d[None, :], mask=offs_kv[:, None] < N_CTX, other=0.0)
        qk = tl.dot(q, tl.trans(k))
        qk = tl.where(offs_kv[None, :] < N_CTX, qk, -float("inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp2(qk - m_ij[:, None])
        alpha = tl.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        v = tl.load(v_ptr + offs_kv[:, None] * D + offs_d[None, :], mask=offs_kv[:, None] < N_CTX, other=0.0)
        acc = tl.dot(p.to(tl.float16), v, acc)
        COLUMNS
        m_i = m_ij
    tl.store(o_ptr + offs_m[:, None] * D + offs_d[None, :], (acc / l_i[:, None]).to(tl.float16))
'''


def test_attention_stage_plan() -> None:
    text = ATTENTION.replace("COLUMNS", "pass")
    sp = stage_plan(text)
    # the attention loop is a loop of two dot chains for the one expander: K and V are its rings, the scores' dot
    # is fresh (no accumulator carried), Q and P come from registers
    assert isinstance(sp, StagePlan) and isinstance(sp.loop, LoopPlan) and sp.loop.attention
    assert [(c.fresh, c.acc_in_dot, c.operands) for c in sp.loop.chains] == [
        (True, False, ("q", "k")), (False, True, ("p.to(tl.float16)", "v"))]
    assert [(s.label, s.priority) for s in sp.stages] == [("mma", 0), ("mem", 1)]
    assert line_of(text, "m_ij =") in sp.stages[0].lines and line_of(text, "acc = acc * alpha") in sp.stages[0].lines
    assert [r.shape for r in sp.rings] == [["BLOCK_N", "D"], ["BLOCK_N", "D"]]
    variant = translate_source(text, "x.py", get_target("gfx1250"), gluon_always=True).text
    assert variant.count("with gl.amd.warp_pipeline_stage(") == 2
    assert "warps_along_m=True" in variant
    # Q converted to its operand layout once, before the loop; the rows test beside the ring's
    assert "q_op = gl.convert_layout(q, gl.DotOperandLayout(0, mma_layout" in variant.replace("\n", "")
    # (gfx1250 reads V in `mma`: three slots at least, `test_gfx1250_attention_reads_v_right_before_its_dot`)
    assert "if NUM_STAGES >= 3 and BLOCK_M >= 16 * gl.num_warps() and BLOCK_N * D <= 4096:" in variant
    assert "lambda BLOCK_M: BLOCK_M < 128" in variant and "lambda BLOCK_N, D: BLOCK_N * D > 4096" in variant
    # the conversion of `start_n + offs_n` for the score mask is made once, before the loop, on `offs_n`
    assert "offs_n_cvt = gl.convert_layout(offs_n, gl.SliceLayout(0, mma_layout))" in variant
    assert "(start_n + offs_n_cvt)[None, :] < N_CTX" in variant


def test_gfx1250_attention_reads_v_right_before_its_dot() -> None:
    """gfx1250's 32-lane waves would hold the next iteration's K and V, each warp the whole tile, across the stage
    boundary: its attention ring reads V in `mma`, from the iteration's own slot, right before the P V dot
    (`StagePlan.late`). The other warp group, a stage behind, still reads that slot while this one refills, so the
    refill goes into the slot read a step earlier, the copies run NUM_STAGES - 1 iterations ahead with a slot more, and
    the waits leave one group fewer in flight. The schedule checker proves it, and finds the race in the same loop
    refilling the slot it reads; gfx950 (64-lane waves) still reads K and V a step ahead. It compiles for gfx1250."""
    text = ATTENTION.replace("COLUMNS", "pass")
    source = parse_source(text, "x.py")
    facts = discover(source)
    fn = next(iter(facts.functions.values()))
    loop = next(n for n in fn.node.body.body if isinstance(n, cst.For))
    sp = plan_stages(source, fn, loop, analyse_layouts(facts)[fn.name], "async_copy", 320 * 1024, late_reads=True)
    assert isinstance(sp, StagePlan) and sp.late == ("v",), sp
    assert (sp.slots, sp.distance, sp.wait) == (4, 3, "async_copy.wait_group(1)")
    assert "`v` from its own slot right before the dot that reads it" in sp.stages[0].role
    variant = translate_source(text, "x.py", get_target("gfx1250"), gluon_always=True).text
    flat = " ".join(variant.split())
    steady = flat.split("for round_ in range(num_rounds):", 1)[1].split("# The last iterations", 1)[0]
    mma, mem = steady.split('with gl.amd.warp_pipeline_stage("mem", priority=1):')
    assert "v = v_ring.index(step).load(" in mma and mma.index("v = v_ring.index(step)") < mma.index("_dot(p")
    assert "v_ring.index((step + 1)" not in flat and "k_t = k_ring.index((step + 1) % NUM_STAGES)" in mem
    assert "k_ring.index((step + NUM_STAGES - 1) % NUM_STAGES)" in mem and "(it + NUM_STAGES - 1) * BLOCK_N" in mem
    assert "async_copy.wait_group(NUM_STAGES - 3)" in steady and "for i in gl.static_range(NUM_STAGES - 1):" in flat
    assert "_ring_slots(327680, 4," in flat and "if NUM_STAGES >= 3 and" in flat
    # (the launcher runs the source kernel where three slots do not fit: `lds`'s third figure)
    assert "lds=(327680, ((('BLOCK_N', 'D'), 'k_ptr'), (('BLOCK_N', 'D'), 'v_ptr')), 3)" in flat
    report = check_source(variant)
    assert report.cases and not report.findings, report
    racy = check_source(variant.replace("k_ring.index((step + NUM_STAGES - 1) % NUM_STAGES)", "k_ring.index(step)")
                        .replace("v_ring.index((step + NUM_STAGES - 1) % NUM_STAGES)", "v_ring.index(step)"))
    assert any("overwritten" in f.message for f in racy.findings), racy
    gfx950 = " ".join(translate_source(text, "x.py", get_target("gfx950")).text.split())
    assert "v_ring.index((step + 1) % NUM_STAGES)" in gfx950 and "_ring_slots(163840, 3," in gfx950
    compiled = verify(translate_source(text, "x.py", get_target("gfx1250"), gluon_always=True),
                      {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "o_ptr": "*fp16", "BLOCK_M": 128,
                       "BLOCK_N": 64, "D": 64, "num_warps": 8}, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


@pytest.mark.parametrize("change, form", [
    (None, ""),
    # the mask added to the scores: left out of the steady state (`qk += 0` there) on gfx950; on gfx1250 the add
    # it leaves measured 0.80x
    (("        qk = tl.where(offs_kv[None, :] < N_CTX, qk, -float(\"inf\"))\n",
      "        qk += tl.where(offs_kv[None, :] < N_CTX, 0, -float(\"inf\"))\n"), "a mask added to the scores leaves"),
    # no mask to leave out: the scores are taken whole (a loop of the blocks before the diagonal)
    (("        qk = tl.where(offs_kv[None, :] < N_CTX, qk, -float(\"inf\"))\n", ""), "would leave out no score mask"),
    # K and V rows from a block table the loop loads (a paged KV cache)
    (("        offs_kv = start_n + offs_n\n",
      "        offs_kv = start_n + offs_n\n        kv_loc = tl.load(table_ptr + offs_kv, mask=offs_kv < N_CTX, other=0)\n"
      ), "read values the loop loads each iteration"),
])
def test_gfx1250_pipelines_attention_where_its_steady_state_leaves_masks_out(change, form) -> None:
    """gfx1250's attention ring is lighter than Triton's own loop by the score masks its steady state leaves out
    (0.55-0.74x on six fixtures); with no such mask (0.84-1.11x), with rows gathered from loaded offsets (0.84x) or
    with scores summed from several products (spills) it is kept as Triton, the reason naming the form. gfx950 pipelines
    every one of them."""
    text = ATTENTION.replace("COLUMNS", "pass").replace("o_ptr, N_CTX", "o_ptr, table_ptr, N_CTX")
    if change is not None:
        assert change[0] in text
        text = text.replace(*change)
        if "kv_loc" in change[1]:
            text = text.replace("k_ptr + offs_kv[:, None] * D", "k_ptr + kv_loc[:, None] * D").replace(
                "v_ptr + offs_kv[:, None] * D", "v_ptr + kv_loc[:, None] * D")
    result = translate_source(text, "x.py", get_target("gfx1250"))
    function = result.functions[0]
    if not form:
        assert function.pipelined, function.kept_reason
        assert "# The masks of `qk` hold on every element of the first num_full iterations" in result.text
        report = check_source(result.text)
        assert report.cases and not report.findings, report
    else:
        assert not function.pipelined and form in function.kept_reason, function.kept_reason
        assert "0.8" in function.kept_reason
    gfx950 = translate_source(text, "x.py", get_target("gfx950"))
    assert gfx950.functions[0].pipelined
    if "qk += tl.where" in text:  # (the steady state adds the where's zero; the last iterations the where)
        steady = gfx950.text.split("for round_ in range(num_rounds):", 1)[1].split("# The last iterations", 1)[0]
        assert "qk += 0\n" in steady and "gl.where" not in steady


def test_gfx1250_keeps_attention_whose_copies_read_a_helpers_load_as_triton() -> None:
    # (the block table loaded by a jit helper the producer calls: the loop's dataflow does not look into helpers, so
    # the call counts as a load; measured 0.90x with suite_paged_prefill so rewritten)
    text = ATTENTION.replace("COLUMNS", "pass").replace("o_ptr, N_CTX", "o_ptr, table_ptr, N_CTX").replace(
        "        offs_kv = start_n + offs_n\n",
        "        offs_kv = start_n + offs_n\n        kv_loc = _rows(table_ptr, offs_kv, N_CTX)\n").replace(
        "k_ptr + offs_kv[:, None] * D", "k_ptr + kv_loc[:, None] * D").replace(
        "v_ptr + offs_kv[:, None] * D", "v_ptr + kv_loc[:, None] * D").replace(
        "@triton.jit\ndef attn(", "@triton.jit\ndef _rows(table_ptr, offs, n):\n"
        "    return tl.load(table_ptr + offs, mask=offs < n, other=0)\n\n\n@triton.jit\ndef attn(")
    assert "_rows(table_ptr, offs_kv, N_CTX)" in text and "def _rows(" in text
    kept = next(f for f in translate_source(text, "x.py", get_target("gfx1250")).functions if f.name == "attn")
    assert not kept.pipelined and "a helper it calls may" in kept.kept_reason, kept.kept_reason


def test_gfx1250_keeps_latent_attention_as_triton() -> None:
    text = LATENT.replace("SUMMED", "qk += tl.dot(q_pe, tl.trans(k_pe))")
    kept = translate_source(text, "x.py", get_target("gfx1250")).functions[0]
    assert not kept.pipelined and "its loop runs more than two dots" in kept.kept_reason, kept.kept_reason
    assert "spilled 40 VGPRs" in kept.kept_reason


@pytest.mark.parametrize("target", ["gfx950", "gfx942"])
def test_key_offsets_made_in_the_loop_from_a_range_are_made_before_it(target: str) -> None:
    # `offs_kv = start_n + tl.arange(0, BLOCK_N)` (the range written in the sum, as public attention kernels write it):
    # the range is made once before the loop, in the layout the score mask reads it in, instead of converting the
    # offsets in the `mma` stage each iteration
    text = ATTENTION.replace("COLUMNS", "pass").replace("offs_kv = start_n + offs_n",
                                                        "offs_kv = start_n + tl.arange(0, BLOCK_N)")
    sp = stage_plan(text)
    assert isinstance(sp, StagePlan) and sp.groups == 2 and not sp.barrier_op, sp
    result = translate_source(text, "x.py", get_target(target))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    variant = " ".join(result.text.split())
    assert "offs_kv_offs = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_layout))" in variant
    assert "(start_n + offs_kv_offs)[None, :]" in variant
    report = check_source(result.text)
    assert report.cases and not report.findings, report


@pytest.mark.parametrize("target", ["gfx950", "gfx942"])
def test_a_bound_of_key_offsets_written_in_place_is_made_from_a_range_made_before_the_loop(target: str) -> None:
    # FLA's sparse attention backward masks the scores by `(o_c < NC)[None, :]`: the comparison itself is what is laid
    # out along the scores' columns. It is made of the range made once before the loop, in that layout, as the
    # offsets' own conversion is; no conversion is left in the `mma` stage, so both warp groups run the pipeline
    text = ATTENTION.replace("COLUMNS", "pass").replace("offs_kv = start_n + offs_n",
                                                        "offs_kv = start_n + tl.arange(0, BLOCK_N)").replace(
        "qk = tl.where(offs_kv[None, :] < N_CTX, qk, -float(\"inf\"))",
        "qk = tl.where((offs_kv < N_CTX)[None, :], qk, -float(\"inf\"))")
    assert "(offs_kv < N_CTX)[None, :]" in text
    sp = stage_plan(text)
    assert isinstance(sp, StagePlan) and sp.groups == 2 and not sp.barrier_op, sp
    result = translate_source(text, "x.py", get_target(target))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    variant = " ".join(result.text.split())
    assert "keys_offs = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_layout))" in variant
    assert "((start_n + keys_offs) < N_CTX)[None, :]" in variant
    report = check_source(result.text)
    assert report.cases and not report.findings, report
    assert_holds_and_compiles(result, {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "o_ptr": "*fp16",
                                       "N_CTX": "i32", "BLOCK_M": 128, "BLOCK_N": 64, "D": 64})
    # a bound read from the loaded tile is no scalar: the comparison stays converted where it is made
    text = text.replace("(offs_kv < N_CTX)[None, :]", "(offs_kv < tl.sum(k, axis=1).to(tl.int32))[None, :]")
    sp = stage_plan(text)
    assert not isinstance(sp, StagePlan) or sp.barrier_op, sp


def test_key_offsets_summed_with_a_scalar_bound_before_the_loop_are_converted_before_it() -> None:
    # FLA's intra-chunk kernels: `o_j = i_t * BT + i_j * BC + o_i`, `i_t` a scalar the kernel binds before the loop. The
    # sum's scalar part reads it where the iteration reads it, so the conversion of `o_i` is made once before the loop
    text = ATTENTION.replace("COLUMNS", "pass").replace(
        "    for start_n in range(0, N_CTX, BLOCK_N):",
        "    first = tl.program_id(1) * BLOCK_N\n    for start_n in range(0, N_CTX - first, BLOCK_N):").replace(
        "offs_kv = start_n + offs_n", "offs_kv = first + start_n + offs_n")
    sp = stage_plan(text)
    assert isinstance(sp, StagePlan) and sp.groups == 2 and not sp.barrier_op, sp
    result = translate_source(text, "x.py", get_target("gfx950"))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    variant = " ".join(result.text.split())
    assert "offs_n_cvt = gl.convert_layout(offs_n, gl.SliceLayout(0, mma_layout))" in variant
    assert "(first + start_n + offs_n_cvt)[None, :] < N_CTX" in variant
    assert_holds_and_compiles(result, {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "o_ptr": "*fp16",
                                       "N_CTX": "i32", "BLOCK_M": 128, "BLOCK_N": 64, "D": 64})
    # a scalar the loop assigns is no invariant part of the sum: the offsets stay converted where they are made
    text = text.replace("        offs_kv = first + start_n + offs_n",
                        "        first = first + 0 * start_n\n        offs_kv = first + start_n + offs_n")
    sp = stage_plan(text)
    assert not isinstance(sp, StagePlan) or sp.barrier_op, sp


def test_decode_style_attention_over_block_indices_with_an_augmented_rescale() -> None:
    # lightllm's decode style: the loop runs over block indices (`offs_kv = start_n * BLOCK_N + offs_n`) and the
    # accumulator is rescaled by `acc *= alpha[:, None]`. The rescale is the attention's (its augmented spelling), and
    # the mask's conversion of `start_n * BLOCK_N + offs_n` is made once, of `offs_n`, before the loop.
    text = ATTENTION.replace("COLUMNS", "pass").replace(
        "for start_n in range(0, N_CTX, BLOCK_N):", "for start_n in range(0, tl.cdiv(N_CTX, BLOCK_N)):").replace(
        "offs_kv = start_n + offs_n", "offs_kv = start_n * BLOCK_N + offs_n").replace(
        "acc = acc * alpha[:, None]", "acc *= alpha[:, None]")
    sp = stage_plan(text)
    assert isinstance(sp, StagePlan) and sp.loop.attention, sp
    assert line_of(text, "acc *= alpha") in sp.stages[0].lines
    result = translate_source(text, "x.py", get_target("gfx950"))
    assert [f.pipelined for f in result.functions if f.name == "attn"] == [True]
    variant = result.text
    assert "offs_n_cvt = gl.convert_layout(offs_n, gl.SliceLayout(0, mma_layout))" in variant
    assert "(start_n * BLOCK_N + offs_n_cvt)[None, :] < N_CTX" in variant
    assert "acc *= alpha[:, None]" in variant
    from transpile.schedule_check import check_source

    report = check_source(variant)
    assert report.cases and report.findings == [], report.findings[:3]
    values = {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "o_ptr": "*fp16", "N_CTX": "i32", "BLOCK_M": 128,
              "BLOCK_N": 32, "D": 64, "num_warps": 8}
    compiled = verify(result, values)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]
    # sm90's attention ring takes the same rescale: after the wait for the PV wgmma, on the accumulator converted back
    hopper = translate_source(text, "x.py", get_target("sm90"), gluon_always=True)
    lines = [line.strip() for line in hopper.text.splitlines()]
    at = lines.index("acc *= alpha[:, None]")
    assert lines[at - 2].startswith("acc, _ = warpgroup_mma_wait(0, deps=[acc,") and \
        lines[at - 1] == "acc = gl.convert_layout(acc, mma_layout)", lines[at - 3:at + 1]
    compiled = verify(hopper, {**values, "BLOCK_N": 64}, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


@pytest.mark.parametrize("offsets", ["start_n * BLOCK_N + offs_n * N_CTX", "start_n * offs_m[0] + offs_n"])
def test_mask_offsets_from_tensors_are_not_read_as_a_scalar_sum(offsets: str) -> None:
    # `x = <scalar> + offs` is hoisted only where `<scalar>` is integer arithmetic of the loop variable and scalar
    # parameters: a product with a tensor on either side is converted where it is made (refused in the stage)
    text = ATTENTION.replace("COLUMNS", "pass").replace(
        "for start_n in range(0, N_CTX, BLOCK_N):", "for start_n in range(0, tl.cdiv(N_CTX, BLOCK_N)):").replace(
        "offs_kv = start_n + offs_n", f"offs_kv = {offsets}")
    assert_one_group(stage_plan(text), "a layout conversion of `offs_kv`")


def test_attention_mask_offsets_bound_twice_are_not_hoisted() -> None:
    # `offs_kv` rebound after `start_n + offs_n`: its conversion is not that of `start_n + offs_n`
    text = ATTENTION.replace("COLUMNS", "pass").replace(
        "        offs_kv = start_n + offs_n\n", "        offs_kv = start_n + offs_n\n        offs_kv = offs_kv + 0 * N_CTX\n")
    assert_one_group(stage_plan(text), "a layout conversion of `offs_kv`")


def test_attention_with_a_column_reduction_runs_on_one_warp_group() -> None:
    text = ATTENTION.replace("COLUMNS", "l_i = l_i + tl.sum(tl.sum(p, axis=0), axis=0) * 0.0")
    line = line_of(text, "tl.sum(tl.sum(p, axis=0), axis=0)")
    assert_one_group(stage_plan(text), f"reduction `tl.sum` at line {line} inside the attention loop")
    result = translate_source(text, "x.py", get_target("gfx942"))
    assert not result.functions[0].pipelined and f"line {line}" in result.functions[0].kept_reason
    result = translate_source(text, "x.py", get_target("gfx942"), gluon_always=True)
    assert result.functions[0].pipelined and "warp_pipeline_stage" not in result.text
    report = check_source(result.text)
    assert report.cases and not report.findings, report
    compiled = verify(result, {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "o_ptr": "*fp16", "N_CTX": "i32",
                               "BLOCK_M": 128, "BLOCK_N": 64, "D": 64}, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


SOFT_CAP = ATTENTION.replace("@triton.jit\ndef attn(", """@triton.jit
def _tanh(x):
    return 2 * tl.sigmoid(2 * x) - 1


@triton.jit
def attn(""").replace("        qk = tl.dot(q, tl.trans(k))\n",
                      "        qk = tl.dot(q, tl.trans(k))\n        qk = 30.0 * _tanh(qk / 30.0)\n").replace("COLUMNS", "pass")


@pytest.mark.parametrize("target", ["gfx950", "gfx942"])
def test_attention_with_scores_capped_by_an_elementwise_helper_is_pipelined(target: str) -> None:
    """Logit soft-capping through a jit helper (`qk = cap * _tanh(qk / cap)`, aiter's extend attention): the helper is
    elementwise in its argument, so its result stays in the scores' MMA layout (no conversion, which would need a
    CTA-wide barrier in the `mma` stage); the loop is warp-pipelined, compiles, and its schedule holds."""
    result = translate_source(SOFT_CAP, "x.py", get_target(target))
    (kernel,) = [f for f in result.functions if f.name == "attn"]
    assert kernel.pipelined, kernel.kept_reason
    assert "qk = 30.0 * _tanh(qk / 30.0)" in result.text and "convert_layout(_tanh" not in result.text
    report = check_source(result.text)
    assert report.cases and not report.findings, report
    compiled = verify(result, {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "o_ptr": "*fp16", "N_CTX": "i32",
                               "BLOCK_M": 128, "BLOCK_N": 64, "D": 64}, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


LATENT = ATTENTION.replace("def attn(q_ptr, ", "def attn(q_ptr, qpe_ptr, kpe_ptr, ").replace(
    "    q = tl.load(q_ptr + offs_m[:, None] * D + offs_d[None, :])\n",
    "    q = tl.load(q_ptr + offs_m[:, None] * D + offs_d[None, :])\n"
    "    q_pe = tl.load(qpe_ptr + offs_m[:, None] * 32 + tl.arange(0, 32)[None, :])\n").replace(
    "        qk = tl.dot(q, tl.trans(k))\n",
    "        k_pe = tl.load(kpe_ptr + offs_kv[:, None] * 32 + tl.arange(0, 32)[None, :], mask=offs_kv[:, None] < N_CTX,"
    " other=0.0)\n        qk = tl.dot(q, tl.trans(k))\n        SUMMED\n").replace("COLUMNS", "pass")


@pytest.mark.parametrize("summed", ["qk += tl.dot(q_pe, tl.trans(k_pe))", "qk = tl.dot(q_pe, tl.trans(k_pe), qk)"])
def test_latent_attention_scores_summed_from_two_products(summed: str) -> None:
    # multi-head latent attention: the scores are the nope part's product plus the rotary part's, both K tiles loaded
    # in the loop, both A operands loop-invariant: one more dot chain, adding to the fresh scores, and one more ring
    text = LATENT.replace("SUMMED", summed)
    sp = stage_plan(text)
    assert isinstance(sp, StagePlan) and sp.loop.attention
    assert [(c.fresh, c.acc, c.operands) for c in sp.loop.chains] == [
        (True, "qk", ("q", "k")), (False, "qk", ("q_pe", "k_pe")), (False, "acc", ("p.to(tl.float16)", "v"))]
    assert [r.operand for r in sp.rings] == ["k", "k_pe", "v"]
    variant = translate_source(text, "x.py", get_target("gfx950"), gluon_always=True).text
    assert variant.count("with gl.amd.warp_pipeline_stage(") == 2
    # both register operands converted once before the loop, in the scores' MMA layout (the loop makes `qk`)
    flat = variant.replace("\n", "").replace(" ", "")
    assert "q_pe_op=gl.convert_layout(q_pe,gl.DotOperandLayout(0,mma_layout" in flat
    assert "qk=_dot(q_pe_op,k_pe_t,qk)" in flat or "qk=_dot_acc(q_pe_op,k_pe_t,qk)" in flat
    # sm90's attention rings take two dots only: the loop is none of theirs, and the reason says what it is
    sm90 = translate_source(text, "x.py", get_target("sm90"))
    assert "warpgroup_mma" not in sm90.text
    kept = [d.message for d in sm90.diagnostics if d.code == "TT041"]
    assert kept and "an attention loop of latent attention's form: its scores are summed from 2 products" in kept[0]


def test_latent_attention_rotary_part_under_a_flag() -> None:
    # aiter's extend/decode kernels: the rotary product only `if BLOCK_DPE > 0:` (a constexpr), inside the loop. The
    # loop has three dots in that copy: unswitching hoists the flag, and that copy pipelines with three chains
    text = LATENT.replace("BLOCK_N: tl.constexpr, D: tl.constexpr", "BLOCK_N: tl.constexpr, D: tl.constexpr, "
                          "HAS_PE: tl.constexpr").replace(
        "        k_pe = tl.load(", "        if HAS_PE:\n            k_pe = tl.load(").replace(
        "        SUMMED\n", "        if HAS_PE:\n            qk += tl.dot(q_pe, tl.trans(k_pe))\n")
    result = translate_source(text, "x.py", get_target("gfx950"), gluon_always=True)
    assert result.text.count("if HAS_PE:") >= 1 and result.text.count("with gl.amd.warp_pipeline_stage(") == 4
    assert "qk = _dot_acc(q_pe_op, k_pe_t, qk)" in result.text


def test_latent_attention_product_of_a_value_made_in_the_loop_is_refused() -> None:
    text = LATENT.replace("SUMMED", "qk += tl.dot(q_pe * 2.0, tl.trans(k_pe))")
    sp = stage_plan(text)
    assert isinstance(sp, StageRefusal)
    assert "the A operand of a product added to `qk` is not a tensor defined before the loop" in sp.reason


SHARED_KV = HEAD + '''@triton.jit
def attn(q_ptr, kv_ptr, o_ptr, N_CTX, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + offs_m[:, None] * D + offs_d[None, :])
    m_i = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    kv_ptrs = kv_ptr + offs_n[None, :] * D + offs_d[:, None]
    for start_n in range(0, N_CTX, BLOCK_N):
        kv = tl.load(kv_ptrs + start_n * D, mask=(start_n + offs_n[None, :]) < N_CTX, other=0.0)
        qk = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        qk += tl.dot(q, kv)
        qk = tl.where((start_n + offs_n[None, :]) < N_CTX, qk, -float("inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp2(qk - m_ij[:, None])
        alpha = tl.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        v = tl.trans(kv)
        acc += tl.dot(p.to(v.dtype), v)
        m_i = m_ij
    tl.store(o_ptr + offs_m[:, None] * D + offs_d[None, :], (acc / l_i[:, None]).to(tl.float16))
'''


def test_latent_attention_with_values_that_are_the_keys() -> None:
    # DeepSeek-style latent attention reads one tile for K and V (`v = tl.trans(kv)`, lightllm's deepseek2 kernels):
    # loaded as its transpose first (K read [HEAD_DIM, BLOCK_N]), one ring whose slot is read in each form; every warp
    # holds both forms, so the tile limit counts it twice
    result = translate_source(SHARED_KV, "x.py", get_target("gfx950"))
    assert [f.pipelined for f in result.functions if f.name == "attn"] == [True]
    text = result.text
    assert "kv_ring = gl.allocate_shared_memory(" in text and " v_ring" not in text
    # (`v`, a transpose read by the dot and for its element type, is read as `tl.trans(kv)`: passes/operand_aliases)
    assert "_dot(p.to(kv.dtype), kv, acc)" in text and "qk = _dot(q_op, kv_t, qk)" in text
    assert "2 * BLOCK_N * D <= 8192" in text and "lambda BLOCK_N, D: 2 * BLOCK_N * D > 8192" in text
    from transpile.schedule_check import check_source

    report = check_source(text)
    assert report.cases and report.findings == [], report.findings[:3]
    compiled = verify(result, {"q_ptr": "*fp16", "kv_ptr": "*fp16", "o_ptr": "*fp16", "N_CTX": "i32", "BLOCK_M": 128,
                               "BLOCK_N": 32, "D": 64, "num_warps": 8})
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def test_an_address_advanced_after_its_load_is_not_read_as_this_iteration_s() -> None:
    # the planner takes an address computed after an earlier tile's load (the rotary K's under a hoisted flag), but
    # not one a load before it reads: that is the previous iteration's value, carried (`k_ptrs += ...` after the
    # load), which the copies of a later iteration cannot re-evaluate
    from transpile.analysis.pipeline import LoopRefusal

    text = ATTENTION.replace("COLUMNS", "pass").replace(
        "    for start_n in range(0, N_CTX, BLOCK_N):\n        offs_kv = start_n + offs_n\n",
        "    offs_kv = offs_n\n    for start_n in range(0, N_CTX, BLOCK_N):\n").replace(
        "        m_i = m_ij\n", "        m_i = m_ij\n        offs_kv = offs_kv + BLOCK_N\n")
    _, refusal = attention_plan(text)
    assert isinstance(refusal, LoopRefusal) and "a value computed after the loads" in refusal.reason


def test_accumulator_rescaled_in_the_pv_line() -> None:
    # `acc = acc * alpha[:, None] + tl.dot(p, v)`: canonically `tl.dot(p, v, acc * alpha[:, None])`, which the
    # AMD expander writes as it is
    text = ATTENTION.replace("COLUMNS", "pass").replace(
        "        acc = acc * alpha[:, None]\n", "").replace(
        "        acc = tl.dot(p.to(tl.float16), v, acc)\n", "        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v)\n")
    sp = stage_plan(canonicalize_text(text))
    assert isinstance(sp, StagePlan) and sp.loop.attention
    variant = translate_source(text, "x.py", get_target("gfx950"), gluon_always=True).text
    assert "acc = _dot(p.to(gl.float16), v, acc * alpha[:, None])" in variant


def test_pipelined_variant_shape_and_idempotence() -> None:
    text = gemm()
    first = translate_source(text, "x.py", get_target("gfx942"), gluon_always=True).text
    assert first.count("with gl.amd.warp_pipeline_stage(") == 2
    assert 'gl.static_assert(gl.num_warps() == 8, "the warp-pipelined main loop needs num_warps=8' in first
    assert "a_ptrs_next_base += BK" in first and "k_left_next = K - k_next * BK" in first
    assert translate_source(text, "x.py", get_target("gfx942"), gluon_always=True).text == first


# --------------------------------------------------------------------------------------------------------------------
# Compiled variants of the GEMM-family fixtures


GEMM_FIXTURES = ["matmul_grouped", "matmul_descriptor", "matmul_int8", "moe_gather_gemm", "matmul_splitk",
                 "attention_fwd", "suite_cast_operand_gemm"]
SPLIT = {  # the warp-group split the lowering adds: extra barriers behind a branch on the warp id
    "gfx942": ("s_barrier", "s_cbranch_execz"),
    "gfx950": ("s_barrier", "s_cbranch_execz"),
    "gfx1250": ("s_barrier_signal -1", "s_barrier_wait -1"),
}
ENGINE_INSTRUCTIONS = {("matmul_descriptor", "gfx1250"): "tensor_load_to_lds"}


@pytest.mark.slow
@pytest.mark.parametrize("always", [False, True], ids=["default", "gluon-always"])
@pytest.mark.parametrize("amd_target", ["gfx942", "gfx950", "gfx1250"])
@pytest.mark.parametrize("fixture", GEMM_FIXTURES)
def test_gemm_variant_is_warp_pipelined_in_the_code_object(fixture: str, amd_target: str, always: bool, goldens,
                                                           translated, verify_values, monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    """Each GEMM-family fixture's variant (the golden; with --gluon-always, the forms the profitability policy keeps
    as Triton by default) compiles for its AMD target in every autotune config, and wherever its ring fits the LDS
    (two slots at least) the code object is warp-pipelined: `s_setprio 1` and `0`, the warp-group split, the copy
    engine's instructions, LDS for the ring and no more than the target has. By default a kernel is either so, or
    kept as Triton with the measurement that keeps it."""
    target_name = amd_target
    target = get_target(target_name)
    if always:
        source_text = (Path(__file__).resolve().parents[1] / "fixtures" / f"{fixture}.py").read_text()
        result = translate_source(source_text, f"fixtures/{fixture}.py", target, gluon_always=True)
    else:
        result = dataclasses.replace(translated(fixture, target_name), text=goldens.read(fixture, target_name))
    kernel = next(f for f in result.functions if not f.is_helper)
    if not kernel.pipelined:
        assert not always, kernel.kept_reason
        assert "measured" in kernel.kept_reason and "bench/RESULTS.md" in kernel.kept_reason, kernel.kept_reason
        return
    assert re.search(r"gl\.static_assert\(\s*gl\.num_warps\(\) == 8", result.text)  # (as the formatter lays it out)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = verify_values[f"{fixture}.py"]
    every = verify(result, values, all_configs=True)
    assert all(c.ok for c in every), [c.message for c in every if not c.ok]
    compiled = [c for c in every if not c.kept]  # (not the launcher's fallback)
    assert compiled
    source = parse_source(result.original_text, "x.py")
    facts = discover(source)
    fn = next(f for f in facts.functions.values() if not f.is_helper)
    loop = next(n for n in _loops(fn.node))
    # (the layouts the AMD targets translate with: a computed operand's computation in its MMA operand layout)
    plans = analyse_layouts(facts, operand_anchors=operand_anchors(source, facts, analyse_layouts(facts), 3))
    sp = plan_stages(source, fn, loop, plans[fn.name], "registers", target.shared_memory_bytes)
    assert isinstance(sp, StagePlan)
    elem_bits = 8 if fixture == "matmul_int8" else 16
    pipelined = fitting = 0
    labels = [c.label for c in compiled]
    for i, config in enumerate(sp.configs if fn.autotune_configs else [values]):
        ring = sp.ring_bytes({**values, **config}, elem_bits)
        least = ring * 2 // sp.slots if ring is not None else ring
        fits = least is not None and least <= target.shared_memory_bytes
        if sp.loop.attention:  # all 8 warps along M: 16 rows each at least
            fits = fits and int({**values, **config}["BLOCK_M"]) >= 16 * 8  # type: ignore[call-overload]
        label = f"config {i}" if fn.autotune_configs else "given values"
        c = next((c for c in compiled if f"[{label}" in c.label), None)
        if c is None:  # the launcher's autotuner split runs this config on the source kernel
            assert not fits and any(f"[{label}" in k.label and k.kept for k in every), (label, labels)
            continue
        asm = c.asm["amdgcn"]
        fitting += fits
        if "s_setprio" not in asm:  # the compile-time test chose the translated loop: it had to
            assert not fits, f"{c.label} is not pipelined"
            continue
        pipelined += 1
        assert re.search(r"s_setprio 1\b", asm) and re.search(r"s_setprio 0\b", asm), c.label
        for marker in SPLIT[target_name]:
            assert marker in asm, f"{c.label}: no `{marker}` (warp-group split)"
        assert c.shared is not None and c.shared <= target.shared_memory_bytes, f"{c.label}: {c.shared} B of LDS"
        if least is not None:
            assert c.shared >= least, f"{c.label}: LDS {c.shared} B is less than the ring's {least} B"
        instruction = ENGINE_INSTRUCTIONS.get((fixture, target_name))
        if target_name == "gfx950" and sp.loop.kind in ("pointer", "descriptor") and sp.engine == "async_copy":
            instruction = "buffer_load_dwordx4"  # direct to LDS: `buffer_load_dwordx4 v, s[..], 0 offen lds`
            assert re.search(r"buffer_load_dwordx4 .* lds", asm), f"{c.label}: no direct-to-LDS buffer copy"
        if instruction:
            assert instruction in asm, f"{c.label}: no `{instruction}`"
    assert pipelined == fitting, "a config whose ring fits the LDS is not warp-pipelined"
    assert pipelined, "no config of this kernel is warp-pipelined"


def _loops(node: cst.CSTNode) -> list[cst.For]:
    found: list[cst.For] = []

    class _Loops(cst.CSTVisitor):
        def visit_For(self, n: cst.For) -> None:
            found.append(n)

    node.visit(_Loops())
    return found


# The K offsets as a 64-bit vector shared by both tiles (`tl.arange(...).to(tl.int64)`, vllm's scaled GEMM style):
# each tile's copy re-evaluates it in its own copy layout.
INT64_OFFSETS = HEAD + '''@triton.jit
def mm64(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, BM: tl.constexpr, BN: tl.constexpr,
         BK: tl.constexpr):
    offs_m = (tl.program_id(0) * BM + tl.arange(0, BM)).to(tl.int64)
    offs_n = (tl.program_id(1) * BN + tl.arange(0, BN)).to(tl.int64)
    offs_k = tl.arange(0, BK).to(tl.int64)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k * BK), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BK) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK * stride_bk
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.float16))
'''


@pytest.mark.slow
@pytest.mark.parametrize("amd_target", ["gfx942", "gfx950"])
def test_a_vector_cast_to_64_bits_is_laid_out_per_tile(amd_target: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    result = translate_source(INT64_OFFSETS, "mm64.py", get_target(amd_target))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    assert "gl.SliceLayout(1, b_ring_copy_layout)).to(gl.int64)" in " ".join(result.text.split())
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "BM": 128, "BN": 128, "BK": 64}
    compiled = verify(dataclasses.replace(result), values, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]


# Strides cast to 64 bits before use (`stride_bk = tl.cast(stride_in_bk, tl.int64)`, aiter's batched GEMMs): the
# advance `b_ptrs += BK * stride_bk` is a 64-bit scalar, which goes into the copies' base (added to their 32-bit
# offsets it widened them, and the buffer copy did not compile).
INT64_STRIDES = HEAD + '''@triton.jit
def mm64s(a_ptr, b_ptr, c_ptr, M, N, K, stride_in_am, stride_in_bk, BM: tl.constexpr, BN: tl.constexpr,
          BK: tl.constexpr):
    stride_am = tl.cast(stride_in_am, tl.int64)
    stride_bk = tl.cast(stride_in_bk, tl.int64)
    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
    offs_n = tl.program_id(1) * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK * stride_bk
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.float16))
'''


@pytest.mark.slow
@pytest.mark.parametrize("amd_target", ["gfx942", "gfx950"])
def test_a_64_bit_stride_advances_the_copies_base(amd_target: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    result = translate_source(INT64_STRIDES, "mm64s.py", get_target(amd_target))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    assert "b_ptrs_next_base += BK * stride_bk" in result.text
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "BM": 128, "BN": 128, "BK": 64}
    compiled = verify(dataclasses.replace(result), values, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]


@pytest.mark.slow
@pytest.mark.parametrize("amd_target", ["gfx950", "gfx1250"])
def test_a_cache_hint_is_kept_where_the_copy_takes_one(amd_target: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`tl.load(..., cache_modifier=".cg")` (aiter's B tiles): gfx950's direct-to-LDS copy takes the hint, gfx1250's
    copy of a pointer tile has no such argument (passing it did not compile)."""
    source = INT64_STRIDES.replace("b = tl.load(b_ptrs)", 'b = tl.load(b_ptrs, cache_modifier=".cg")')
    result = translate_source(source, "mm64s.py", get_target(amd_target))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    copies = [line for line in " ".join(result.text.split()).split("b_ring.index(")[1:]
              if line.startswith(("i), b_ptrs", "step), b_ptrs"))]
    assert copies and all(('cache_modifier=".cg"' in c.split(")")[1]) == (amd_target == "gfx950") for c in copies)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "BM": 128, "BN": 128, "BK": 64}
    compiled = verify(dataclasses.replace(result), values, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]


def _carried_offsets(after: str = "") -> str:
    """INT64_OFFSETS with `offsets_k += BLOCK_K` carried through the loop and the masks computed from it."""
    return INT64_OFFSETS.replace("for k in range(0, tl.cdiv(K, BK)):\n", "for k in range(0, tl.cdiv(K, BK)):\n"
                                 "        k_mask = offs_k < K\n").replace(
        "(offs_k[None, :] < K - k * BK)", "k_mask[None, :]").replace("(offs_k[:, None] < K - k * BK)",
                                                                      "k_mask[:, None]").replace(
        "        b_ptrs += BK * stride_bk\n", "        b_ptrs += BK * stride_bk\n        offs_k += BK\n" + after)


def test_a_carried_offset_tensor_is_read_from_the_loop_variable() -> None:
    """`offsets_k += BLOCK_K` each iteration (vLLM's scaled_mm): `transpile.passes.induction` reads it as
    `offs_k + k * BK`, which the copies re-evaluate for any iteration and the K-tail peel proves in bounds."""
    result = translate_source(_carried_offsets(), "mm64.py", get_target("gfx950"))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    flat = " ".join(result.text.split())
    assert "k_mask = (offs_k + k * BK) < K" in flat
    assert flat.count("offs_k += BK") == 1  # only in the source kernel the launcher keeps for other launches
    assert "num_full = gl.minimum(num_iters, gl.maximum(K, 0) // BK)" in flat


def test_a_carried_offset_tensor_read_after_the_loop_is_refused() -> None:
    """Read after the loop, the carried tensor's last value matters: it is not read from the loop variable then, and
    a carried tensor cannot be laid out for the 16-byte copies; the kernel is kept as Triton and says why."""
    text = _carried_offsets().replace("    tl.store(c_ptr + offs_m", "    tl.store(c_ptr + offs_k[:, None] + offs_m")
    result = translate_source(text, "mm64.py", get_target("gfx950"))
    assert not result.functions[0].translated  # kept as Triton
    assert "`offs_k` is a tensor the loop carries from one iteration to the next" in result.functions[0].kept_reason


BRANCHED_ROWS = INT64_OFFSETS.replace(
    "    offs_m = (tl.program_id(0) * BM + tl.arange(0, BM)).to(tl.int64)\n",
    "    if EVEN_M:\n"
    "        offs_m = tl.program_id(0) * BM + tl.arange(0, BM)\n"
    "    else:\n"
    "        offs_m = (tl.program_id(0) * BM + tl.arange(0, BM)) % M\n").replace(
    "         BK: tl.constexpr):", "         BK: tl.constexpr, EVEN_M: tl.constexpr):")


@pytest.mark.parametrize("amd_target", ["gfx942", "gfx950"])
def test_a_vector_an_if_defines_before_the_loop_is_converted_once_for_the_copies(amd_target: str) -> None:
    """`if EVEN_M: offs_m = ... else: offs_m = (...) % M` (AMD's own aiter GEMMs): no single definition to lay out
    per tile, so the copies read it converted to their layout, once, before the loop (it was read in the loop's
    layout, and the variant did not compile: "Layout mismatch in broadcast")."""
    result = translate_source(BRANCHED_ROWS, "mm64.py", get_target(amd_target))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    flat = " ".join(result.text.split())
    assert "offs_m_a_rows = gl.convert_layout(offs_m, gl.SliceLayout(1, a_ring_copy_layout))" in flat


@pytest.mark.slow
@pytest.mark.parametrize("amd_target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("even", [True, False])
def test_a_vector_an_if_defines_compiles(amd_target: str, even: bool, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    result = translate_source(BRANCHED_ROWS, "mm64.py", get_target(amd_target))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "BM": 128, "BN": 128, "BK": 64, "EVEN_M": even}
    compiled = verify(dataclasses.replace(result), values, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]


BRANCHED_COLUMNS = INT64_OFFSETS.replace(
    "    offs_n = (tl.program_id(1) * BN + tl.arange(0, BN)).to(tl.int64)\n",
    "    if EVEN_N:\n"
    "        offs_n = tl.program_id(1) * BN + tl.arange(0, BN)\n"
    "    else:\n"
    "        offs_n = (tl.program_id(1) * BN + tl.arange(0, BN)) % N\n").replace(
    "         BK: tl.constexpr):", "         BK: tl.constexpr, EVEN_N: tl.constexpr):")


def test_a_contiguous_axis_an_if_defines_before_the_loop_is_read_in_a_copy_of_the_loop_per_branch() -> None:
    """The same along B's contiguous axis (`if EVEN_N: offs_n = ... else: offs_n = (...) % N`, aiter's
    `gemm_a16w16`): one value converted before the loop proves no 16-byte vectors, which direct-to-LDS copies need
    (such a variant did not compile: "the load can only be vectorized to 1 element"). The code after the `if` is
    copied into its branches (`passes.branch_tails.contiguous_axis_sites`), so each copy of the loop re-evaluates its
    one definition in the copy layout, wrapped or not (the launch makes `N` a multiple of 16)."""
    assert BRANCHED_COLUMNS != INT64_OFFSETS
    result = translate_source(BRANCHED_COLUMNS, "mm64.py", get_target("gfx950"))
    kernel = result.functions[0]
    assert kernel.pipelined, kernel.kept_reason
    flat = " ".join(result.text.split())
    assert flat.count("gl.amd.warp_pipeline_stage(\"mem\"") == 2  # (one pipelined loop per branch)
    assert "% N" in flat and "gl.convert_layout(offs_n" not in flat
    assert "N" in kernel.dispatch.divisible  # (the launcher runs the source kernel where N is not a multiple of 16)


@pytest.mark.slow
@pytest.mark.parametrize("even", [True, False])
def test_a_contiguous_axis_an_if_defines_compiles_with_direct_copies(even: bool, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    result = translate_source(BRANCHED_COLUMNS, "mm64.py", get_target("gfx950"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "BM": 128, "BN": 128, "BK": 64, "EVEN_N": even}
    compiled = verify(dataclasses.replace(result), values, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]


# ---- accumulations the kernel writes apart from the dot, transposed operands ----------------------------------------

ACC_TYPE = GEMM.replace("BK: tl.constexpr):", "BK: tl.constexpr, ACC: tl.constexpr):").replace(
    "dtype=tl.float32)", "dtype=ACC)")


@pytest.mark.parametrize("spelling", ["acc += tl.dot(a, b)", "acc = acc + tl.dot(a, b)", "acc = tl.dot(a, b) + acc"])
def test_an_accumulation_of_unknown_dtype_is_folded_where_the_types_allow(spelling: str) -> None:
    """Canonicalisation cannot fold `acc += tl.dot(a, b)` into the dot when the kernel does not name the accumulator's
    dtype; the ring takes it as it is, reads its operands in the dot result's MMA layout, and `_dot_acc` folds the add
    into the MMA at compile time where the product has the accumulator's type."""
    text = ACC_TYPE.replace("acc = tl.dot(a, b, acc)", spelling).replace("BODY", "acc = acc * 1.0").replace("NUM", "3")
    sp = stage_plan(text)
    assert isinstance(sp, StagePlan) and not sp.loop.acc_in_dot and sp.loop.acc == "acc"
    variant = translate_source(text, "x.py", get_target("gfx950")).text
    assert "acc = _dot_acc(a, b, acc)" in variant and "def _dot_acc(a, b, acc):" in variant
    assert "gl.DotOperandLayout(0, mma_layout, _mma_k_width(a_ring.dtype, mma_layout))" in variant


def test_a_scaled_accumulation_is_a_scaled_product_and_an_8_bit_integer_sum_is_marked() -> None:
    scaled = ACC_TYPE.replace("acc = tl.dot(a, b, acc)", "acc += tl.dot(a, b) * 0.5").replace(
        "BODY", "acc = acc * 1.0").replace("NUM", "3")
    sp = stage_plan(scaled)
    assert isinstance(sp, StagePlan) and sp.loop.chains[0].scaled_product
    int8 = ACC_TYPE.replace("acc = tl.dot(a, b, acc)", "acc += tl.dot(a, b)").replace(
        "BODY", "acc = acc * 1.0").replace("NUM", "3").replace("a_ptrs = a_ptr +", "a_ptrs = a_ptr.to(tl.pointer_type(tl.int8)) +")
    sp = stage_plan(int8)
    assert isinstance(sp, StagePlan) and sp.loop.chains[0].integer_sum and not sp.loop.chains[0].scaled_product


def test_a_transposed_operand_is_read_through_a_transposed_view_of_its_slot() -> None:
    """`tl.dot(a, tl.trans(w))` with w loaded [BN, BK]: the ring holds w as loaded, laid out K-contiguous like an A
    slot, and the MMA reads `slot.permute([1, 0])` under the name `w_t`."""
    text = gemm().replace("b_ptrs = b_ptr + offs_k[:, None] * BN + offs_n[None, :]",
                          "b_ptrs = b_ptr + offs_n[:, None] * K + offs_k[None, :]").replace(
        "b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)",
        "b = tl.load(b_ptrs, mask=offs_k[None, :] < k_left, other=0.0)").replace(
        "acc = tl.dot(a, b, acc)", "acc = tl.dot(a, tl.trans(b), acc)").replace("b_ptrs += BK * BN", "b_ptrs += BK")
    sp = stage_plan(text)
    assert isinstance(sp, StagePlan) and sp.loop.loads[1].transposed
    assert sp.rings[1].shape == ["BN", "BK"]
    variant = translate_source(text, "x.py", get_target("gfx950")).text
    assert "b_t = async_copy.load_shared_relaxed(\n" in variant or "b_t = async_copy.load_shared_relaxed(" in variant
    assert ".permute([1, 0])" in variant and "acc = _dot(a, b_t, acc)" in variant
    assert "_lds_copy_layout([BN, BK], b_ptr.dtype.element_ty, 0)" in variant


def test_several_dots_with_shared_tiles_get_one_ring_per_tile() -> None:
    """A gated GEMM (`gate = tl.dot(x, wg, gate)`, `up = tl.dot(x, wu, up)`): one ring per tile load (x's shared by
    both dots), every ring in `_ring_slots`, each dot on its own accumulator. gfx942 pipelines it too, but keeps as
    Triton, with the measured reason, the form whose dots read their weights transposed (suite_gated_linear's
    `tl.dot(x, tl.trans(w_gate))`), which measured heavier than Triton's own compile there."""
    text = gemm().replace("    acc = tl.zeros((BM, BN), dtype=tl.float32)\n",
                          "    acc = tl.zeros((BM, BN), dtype=tl.float32)\n    up = tl.zeros((BM, BN), dtype=tl.float32)\n"
                          "    c_ptrs = b_ptr + offs_k[:, None] * BN + offs_n[None, :] + K * BN\n").replace(
        "        acc = tl.dot(a, b, acc)\n",
        "        c = tl.load(c_ptrs, mask=offs_k[:, None] < k_left, other=0.0)\n        acc = tl.dot(a, b, acc)\n"
        "        up = tl.dot(a, c, up)\n").replace("        b_ptrs += BK * BN\n",
                                                 "        b_ptrs += BK * BN\n        c_ptrs += BK * BN\n").replace(
        "acc.to(tl.float16))", "(acc * up).to(tl.float16))")
    sp = stage_plan(text)
    assert isinstance(sp, StagePlan)
    assert [load.name for load in sp.loop.loads] == ["a", "b", "c"]
    assert [(chain.acc, chain.operands) for chain in sp.loop.chains] == [("acc", ("a", "b")), ("up", ("a", "c"))]
    variant = translate_source(text, "x.py", get_target("gfx950")).text
    call = variant[variant.index("NUM_STAGES: gl.constexpr = _ring_slots("):]
    call = " ".join(call[:call.index(")\n")].split())
    assert call.endswith("163840, 3, [BM, BK], a_ptr.dtype.element_ty, [BK, BN], b_ptr.dtype.element_ty, [BK, BN], "
                         "b_ptr.dtype.element_ty"), call
    assert "up = _dot(a, c, up)" in variant and "acc = _dot(a, b, acc)" in variant
    assert variant.count("c_ring.index(") >= 3
    assert translate_source(text, "x.py", get_target("gfx942")).functions[0].pipelined
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "suite_gated_linear.py"
    kept = translate_source(fixture.read_text(encoding="utf-8"), "suite_gated_linear.py", get_target("gfx942"))
    assert "warp_pipeline_stage" not in kept.text
    assert any("share the loop with other dots and read `w_gate` transposed" in d.message
               for f in kept.functions for d in f.diagnostics)
    assert translate_source(fixture.read_text(encoding="utf-8"), "suite_gated_linear.py",
                            get_target("gfx950")).functions[0].pipelined


@pytest.mark.slow
def test_gfx1250_direct_to_lds_pointer_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gfx1250's ring copies pointer tiles straight into LDS with its own async copy, from a scalar base at 32-bit
    offsets (`_lds_tile_copy`: no tile of 64-bit pointers lives across the loop), one commit group per iteration,
    slots read with a plain `.load` (gfx1250's async_copy has no `load_shared_relaxed`) and no cdna4 `_desc_buffer_copy`;
    it compiles, the schedule checker follows it, and its hot loop is lighter than Triton's own at 128x128x64."""
    from transpile.schedule_check import check_source
    from transpile.verify import isa_compare

    result = translate_source(INT64_OFFSETS.replace(".to(tl.int64)", ""), "mm.py", get_target("gfx1250"))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    text = " ".join(result.text.split())
    assert "_lds_tile_copy(a_ring.index(" in text and "async_copy.commit_group()" in text
    assert "async_copy.global_to_shared(dest, base + offsets, mask=mask)" in text
    assert "load_shared_relaxed" not in text and "_desc_buffer_copy" not in text and "_buffer_tile_load" not in text
    report = check_source(result.text)
    assert report.cases and report.findings == [], report.findings
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "BM": 128, "BN": 128, "BK": 64}
    (comparison,) = isa_compare(dataclasses.replace(result), values, all_configs=False)
    assert comparison.variant is not None and comparison.variant.spills == 0, comparison.message
    assert comparison.ratio is not None and comparison.ratio < 0.8, comparison.ratio


def test_an_if_of_arithmetic_in_the_loop_is_staged_whole_with_the_mma() -> None:
    """A run-time `if` that only computes (clamping the accumulator past a bound): one statement of the consumer, in
    the `mma` stage, and the variant compiles."""
    text = gemm("if k_left < 4096:\n            acc = tl.minimum(acc, 65504.0)")
    sp = stage_plan(text)
    assert isinstance(sp, StagePlan), sp
    result = translate_source(text, "x.py", get_target("gfx950"))
    assert result.functions[0].pipelined
    mma = result.text.split('warp_pipeline_stage("mma", priority=0):', 1)[1].split("warp_pipeline_stage", 1)[0]
    assert "if k_left < 4096:" in mma and "acc = gl.minimum(acc, 65504.0)" in mma
    values = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "BM": 128, "BN": 128, "BK": 64, "num_warps": 8}
    compiled = verify(result, values)
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("body", [
    # a recurrent state stored every few iterations (FLA's `chunk_h`: `if i_t % NTS == 0: tl.store(p_h, b_h)`)
    "if k % 2 == 0:\n            tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc.to(tl.float16))",
    # a row statistic of the accumulator stored each iteration, a gate loaded on a run-time test
    "tl.store(c_ptr + offs_m, tl.sum(acc, axis=1))",
    "if k > 3:\n            acc = acc * tl.load(c_ptr + k)",
])
def test_stores_and_loads_in_the_loop_or_a_branch_of_it_run_in_the_consumer(target: str, body: str) -> None:
    """A plain store, or an `if` whose branch stores or loads (neither a ring's tile nor what a ring's address
    reads), runs whole in the stage that runs the MMA, in the iteration's order, the copies of later iterations
    already issued: as Triton's own pipeliner orders them. The variant compiles and its schedule holds."""
    text = gemm(body, stages=2)
    sp = stage_plan(text)
    assert isinstance(sp, StagePlan), sp
    # (`--gluon-always`: a store of the accumulator in a blocked layout converts it in the stage that runs the MMA,
    # a form the profitability policy keeps as Triton)
    result = translate_source(text, "x.py", get_target(target), gluon_always=True)
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    loop = result.text.split("# Main loop, ", 1)[1]
    assert body.splitlines()[0].strip().replace("tl.", "gl.") in loop
    assert_holds_and_compiles(result, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "BM": 128, "BN": 128,
                                       "BK": 64})


def test_a_store_in_a_loop_that_asks_for_no_pipelining_is_refused() -> None:
    # (`num_stages=1`: a later iteration may load what this one stores, which the copies issued ahead would miss)
    text = gemm("if k % 2 == 0:\n            tl.store(c_ptr + offs_m, tl.sum(acc, axis=1))", stages=1)
    sp = stage_plan(text)
    assert isinstance(sp, StageRefusal) and "a store inside a loop that asks for `num_stages=1`" in sp.reason


def test_an_if_that_chooses_a_mask_at_run_time_is_refused_at_its_line() -> None:
    """An `if` on a run-time value that assigns a load's mask would be re-evaluated for a later iteration statement by
    statement: the refusal names the `if` and its line."""
    text = GEMM.replace("NUM", "3").replace("        BODY\n", "").replace(
        "        k_left = K - k * BK\n",
        "        if k * BK + BK > K:\n            k_left = K - k * BK\n        else:\n            k_left = BK\n")
    sp = stage_plan(text)
    assert isinstance(sp, StageRefusal)
    assert sp.reason.startswith(f"`k_left`, which a tile load of the loop reads, is assigned in the `if` at line "
                                f"{line_of(text, 'if k * BK')}")


KLOOP_ARANGE = HEAD + '''@triton.jit
def mm(A, B, C, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, BM: tl.constexpr, BN: tl.constexpr,
       BK: tl.constexpr):
    ram = tl.max_contiguous(tl.multiple_of((tl.program_id(0) * BM + tl.arange(0, BM)) % M, BM), BM)
    rbn = tl.max_contiguous(tl.multiple_of((tl.program_id(1) * BN + tl.arange(0, BN)) % N, BN), BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for start_k in range(0, K, BK):
        rk = start_k + tl.arange(0, BK)
        a = tl.load(A + (ram[:, None] * stride_am + rk[None, :] * stride_ak))
        b = tl.load(B + (rk[:, None] * stride_bk + rbn[None, :] * stride_bn))
        acc += tl.dot(a, b, out_dtype=tl.float32)
    tl.store(C + ram[:, None] * N + rbn[None, :], acc.to(tl.float16))
'''


@pytest.mark.parametrize("target", ["gfx950", "gfx942", "gfx1250"])
def test_a_k_index_made_in_the_loop_keeps_its_broadcast_in_the_copies(target: str, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """`rk = start_k + tl.arange(0, BK)` read as `rk[None, :] * stride_ak` (FlagGems' mm): the copies split it into
    a scalar `start_k * stride_ak` and the vector `gl.arange(...)[None, :] * stride_ak`, which keeps its broadcast
    (it was dropped, and the variant did not compile: rank mismatch)."""
    result = translate_source(KLOOP_ARANGE, "x.py", get_target(target))
    assert result.functions[0].pipelined
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {"A": "*fp16", "B": "*fp16", "C": "*fp16", "BM": 128, "BN": 128, "BK": 64, "num_warps": 8}
    compiled = [c for c in verify(result, values) if not c.kept]
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]


def test_a_rebound_pointer_parameter_is_still_a_buffer_copy_base(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`A = A + (offsets)` before the loop (FlagGems' backend mm kernels): the translation keeps the parameter as
    `A_arg = A`, and the gfx950 copies read from that scalar base at 32-bit offsets (`buffer_load_to_shared`), not
    from a tile of 64-bit pointers advanced per lane (2.48x Triton's non-MFMA instructions per MFMA before); an
    `other=_0` zero tile of ones reads as `other=0` (it did not compile)."""
    text = KLOOP_ARANGE.replace('''    for start_k in range(0, K, BK):
        rk = start_k + tl.arange(0, BK)
        a = tl.load(A + (ram[:, None] * stride_am + rk[None, :] * stride_ak))
        b = tl.load(B + (rk[:, None] * stride_bk + rbn[None, :] * stride_bn))
''', '''    rk = tl.arange(0, BK)
    A = A + (ram[:, None] * stride_am + rk[None, :] * stride_ak)
    B = B + (rk[:, None] * stride_bk + rbn[None, :] * stride_bn)
    for k in range(0, tl.cdiv(K, BK)):
        _0 = tl.zeros((1, 1), dtype=C.dtype.element_ty)
        a = tl.load(A, mask=rk[None, :] < K - k * BK, other=_0)
        b = tl.load(B, mask=rk[:, None] < K - k * BK, other=_0)
        A += BK * stride_ak
        B += BK * stride_bk
''')
    result = translate_source(text, "x.py", get_target("gfx950"))
    assert result.functions[0].pipelined
    assert "async_copy.buffer_load_to_shared(" in result.text and "A_arg" in result.text
    assert "global_load_to_shared(" not in result.text.split("def mm(", 1)[1]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {"A": "*fp16", "B": "*fp16", "C": "*fp16", "BM": 128, "BN": 128, "BK": 64, "num_warps": 8}
    compiled = [c for c in verify(result, values) if not c.kept]
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]


# --------------------------------------------------------------------------------------------------------------------
# Dot operands computed from a loaded tile (dequantised weights, casts)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _fixture(name: str) -> str:
    return (FIXTURES / f"{name}.py").read_text(encoding="utf-8")


def test_a_computed_operand_is_read_from_its_slot_in_the_layout_its_computation_runs_in() -> None:
    """`b = (w.to(tl.float32) * scales).to(tl.float16)` before `acc += tl.dot(a, b)`: the ring holds `w` as loaded
    (int8), its slot is read in the B operand's MMA layout, and the computation runs in that layout (its class is the
    operand's, the loop-invariant `scales` converted once before the loop): nothing converts in the MMA stage. On
    gfx950 the computation of a tile of fewer than 16 bits runs in `mem`, for the next iteration (a compile-time
    choice by the ring's element type)."""
    result = translate_source(_fixture("bc_dequant_matmul"), "fixtures/bc_dequant_matmul.py", get_target("gfx950"))
    kernel = next(f for f in result.functions if f.name == "dequant_matmul_kernel")
    assert kernel.pipelined
    text = re.sub(r"\s+", "", result.text)  # (the translation, not yet laid out by the formatter)

    def has(needle: str, where: str = text) -> bool:
        return re.sub(r"\s+", "", needle) in where

    assert has("w_layout: gl.constexpr = gl.DotOperandLayout(1, mma_layout, _mma_k_width(gl.float16, mma_layout))")
    assert has("w_ring = gl.allocate_shared_memory(w_ptr.dtype.element_ty,")
    assert has("w = async_copy.load_shared_relaxed(w_ring.index(0), w_layout)")
    assert has("scales_row = gl.convert_layout(scales, gl.SliceLayout(0, w_layout))")
    assert has("PREP_IN_MEM: gl.constexpr = w_ring.dtype.primitive_bitwidth < 16")
    steady = text.split("forround_inrange(num_rounds):", 1)[1].split("#Thelastiterations", 1)[0]
    mma, mem = steady.split('withgl.amd.warp_pipeline_stage("mem",priority=1):')
    assert has("if not PREP_IN_MEM: b = (w.to(gl.float32) * scales_row[None, :]).to(gl.float16)", mma)
    assert has("if PREP_IN_MEM: b = (w.to(gl.float32) * scales_row[None, :]).to(gl.float16)", mem)
    assert "gl.convert_layout" not in steady
    # with the warps along N (the computed B's axis) the launcher runs 8-bit codes as Gluon too; fp8 codes run the
    # source kernel (COMPUTED_SLOW_DTYPES)
    assert kernel.dispatch is not None and "int8" not in kernel.dispatch.slow_dtypes
    assert "float8_e4m3fn" in kernel.dispatch.slow_dtypes and has("computed_operand=1,")
    # gfx942 computes in `mma` (no PREP_IN_MEM); gfx1250 runs launches of 128 columns or more (`BLOCK_N < 128` runs
    # the source kernel: its split measured heavier there)
    gfx942 = translate_source(_fixture("bc_dequant_matmul"), "fixtures/bc_dequant_matmul.py", get_target("gfx942"))
    assert next(f for f in gfx942.functions if f.name == "dequant_matmul_kernel").pipelined
    assert "PREP_IN_MEM" not in gfx942.text
    gfx1250 = translate_source(_fixture("bc_dequant_matmul"), "fixtures/bc_dequant_matmul.py", get_target("gfx1250"))
    narrow = next(f for f in gfx1250.functions if f.name == "dequant_matmul_kernel")
    assert narrow.pipelined and ("BLOCK_N < 128", (("BLOCK_N", None),)) in narrow.dispatch.source_when


def test_computed_operands_that_are_not_pipelined_say_why() -> None:
    """An operand computed from two loaded tiles, and one unpacked by a vector laid along K (GPTQ's per-row shifts,
    measured heavier than Triton's blocked unpacking), are kept as Triton with the construct named."""
    two = gemm().replace("acc = tl.dot(a, b, acc)", "acc = tl.dot(a, b * a[:, :1], acc)")
    sp = stage_plan(two, "async_copy", 160 * 1024)
    assert isinstance(sp, StageRefusal) and "computed from 2 tiles loaded in the loop (`a`, `b`)" in sp.reason
    result = translate_source(_fixture("suite_w4a16_gptq"), "fixtures/suite_w4a16_gptq.py", get_target("gfx950"))
    (kernel,) = [f for f in result.functions if not f.is_helper and f.name.endswith("kernel")]
    # (the kernel's own broadcast and its line, then the measured kernels')
    assert not kernel.pipelined and "a vector laid along K (here `" in kernel.kept_reason
    assert "` at line " in kernel.kept_reason and "GPTQ's `shifter[:, None]`" in kernel.kept_reason
    assert "measured 0.73-0.84x" in kernel.kept_reason and "1.55x at 64 columns" in kernel.kept_reason


def test_an_operand_cast_from_another_tile_s_type_is_computed_from_one_tile() -> None:
    """`w = b.to(a.dtype)` reads `a` for its type only: the operand is computed from `b` alone."""
    result = translate_source(_fixture("suite_cast_operand_gemm"), "fixtures/suite_cast_operand_gemm.py",
                              get_target("gfx950"))
    (kernel,) = [f for f in result.functions if f.name == "cast_operand_gemm_kernel"]
    assert kernel.pipelined
    (schedule,) = kernel.schedules
    assert [(load.name, load.computed) for load in schedule.loop.loads] == [("a", False), ("b", True)]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["gfx950", "gfx942"])
@pytest.mark.parametrize(("fixture", "values"), [
    ("bc_dequant_matmul", {"a_ptr": "*fp16", "w_ptr": "*i8", "scale_ptr": "*fp32", "c_ptr": "*fp16"}),
    ("suite_cast_operand_gemm", {"a_ptr": "*fp16", "b_ptr": "*i8", "c_ptr": "*fp16"}),
    ("suite_cast_operand_gemm", {"a_ptr": "*bf16", "b_ptr": "*i16", "c_ptr": "*bf16"}),
])
def test_computed_operand_rings_compile_for_both_placements(fixture: str, values: dict[str, str], target: str,
                                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Gluon kernel compiles with 8-bit codes (computed in `mem` on gfx950) and 16-bit ones (in `mma`), in every
    config, warp-pipelined, even where the launcher would run the source kernel for the launch."""
    result = translate_source(_fixture(fixture), f"fixtures/{fixture}.py", get_target(target))
    functions = [dataclasses.replace(f, dispatch=dataclasses.replace(f.dispatch, slow_dtypes=()))
                 if f.dispatch is not None else f for f in result.functions]
    result = dataclasses.replace(result, functions=functions)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    sizes = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64} if fixture == "bc_dequant_matmul" else {}
    compiled = [c for c in verify(result, {**values, **sizes}, all_configs=True) if not c.kept]
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]
    assert all("s_setprio 1" in c.asm["amdgcn"] for c in compiled if "dequant_matmul" in c.label
               or "cast_operand" in c.label)


def test_explain_reads_the_layouts_the_amd_rules_translate_with() -> None:
    """`transpile explain` shows the stage plan of a computed operand's loop (its layouts are the ones the variant
    uses) and names the operand layout."""
    from rich.console import Console

    from transpile.explain import explain_file

    console = Console(width=200, record=True)
    for table in explain_file(FIXTURES / "bc_dequant_matmul.py", get_target("gfx950"), "bc_dequant_matmul.py"):
        console.print(table)
    text = console.export_text()
    assert "kernel `dequant_matmul_kernel` for gfx950: pipelined" in text
    assert '"mma" priority 0' in text and "w_layout: MMA operand layout" in text


@pytest.mark.parametrize("amd_target", ["gfx950", "gfx1250"])
def test_launches_whose_accumulators_would_spill_run_the_source_kernel(amd_target: str) -> None:
    """A loop with two accumulators (a gated MLP's gate and up): at 256x256x32 they and a step of operands need 280
    registers a lane on gfx950 (560 on gfx1250's 32-lane waves), which spilled twice as much as Triton's own compile:
    such launches run the source kernel; 128x128x64 runs the pipelined loop."""
    from transpile.rules.base import source_when_holds

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "suite_swiglu_gemm.py"
    result = translate_source(fixture.read_text(encoding="utf-8"), "suite_swiglu_gemm.py", get_target(amd_target))
    (fn,) = [f for f in result.functions if f.pipelined]
    (test,) = fn.dispatch.source_when
    assert source_when_holds(*test, {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 32})
    assert not source_when_holds(*test, {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64})
    # one accumulator: no such test (every GEMM fixture at 256x256x32 spills no more than its source)
    single = translate_source(INT64_STRIDES, "mm64s.py", get_target(amd_target))
    assert single.functions[0].pipelined and not single.functions[0].dispatch.source_when


PASSES = HEAD + '''@triton.jit
def passes_gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PASSES: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    TOP
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for i in range(PASSES):
        RESET
        b_ptrs = b_ptr + i * K * stride_bk + offs_k[:, None] * stride_bk + offs_n[None, :]
        for j in range(0, tl.cdiv(K, BK)):
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - j * BK, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - j * BK, other=0.0)
            acc += tl.dot(a, b)
            a_ptrs += BK
            b_ptrs += BK * stride_bk
    AFTER
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
'''


A_PTRS = "a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]"


def passes(reset: str = A_PTRS, after: str = "pass") -> str:
    """The kernel with `a_ptrs` assigned per pass (`reset`), else once before the passes."""
    return PASSES.replace("TOP", "pass" if reset == A_PTRS else A_PTRS).replace("RESET", reset).replace("AFTER", after)


def test_the_innermost_dot_loop_is_pipelined_and_the_loop_around_it_is_not_refused() -> None:
    """A dot loop inside another loop (passes over packed weights, a persistent tile loop): the inner loop is the one
    pipelined; the outer loop is not a dot loop of its own ("a loop inside the main loop" kept such kernels)."""
    result = translate_source(passes(), "x.py", get_target("gfx950"))
    assert result.functions[0].translated and result.functions[0].pipelined, result.functions[0].kept_reason
    assert result.text.count("with gl.amd.warp_pipeline_stage(") == 2
    assert "a loop inside the main loop" not in result.text
    # (the pointers the pipelined copies start from are those the outer loop assigns, per pass)
    assert "+ i * K * stride_bk" in result.text.split("b_ptrs_next_offs = ", 1)[1].split("\n", 1)[0]


def test_a_pointer_a_loop_around_carries_into_the_next_run_is_refused() -> None:
    """The pipelined copies start from the carried pointer's definition: where a loop around the pipelined loop
    carries the value it ends with into its next run (assigned once, before both), the kernel is kept, saying so."""
    result = translate_source(passes("pass"), "x.py", get_target("gfx950"))
    assert not result.functions[0].translated
    assert "`a_ptrs`, which the loop computes for its loads, is carried into the next iteration of the loop at " \
        "line 15" in result.functions[0].kept_reason


def test_a_pointer_read_after_the_loop_is_advanced_after_it_by_the_trip_count() -> None:
    """A carried pointer that the code after the loop reads, advanced by a loop-invariant step: the copies advance
    their own copy, and the variant advances the pointer by the trip count after the loop (inside the loop around)."""
    result = translate_source(passes(A_PTRS, "tl.store(c_ptr + offs_m, tl.sum(tl.load(a_ptrs), axis=1))"), "x.py",
                              get_target("gfx950"))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    gluon = result.text.split("@gluon.jit", 1)[1]
    advance = gluon.index("a_ptrs += gl.maximum(num_iters, 0) * (BK)")
    assert gluon.index("async_copy.wait_group(0)") < advance < gluon.index("gl.sum(gl.load(a_ptrs)")


def test_an_operand_computed_with_the_other_operands_dtype_is_computed_from_one_tile() -> None:
    """`tl.dot(a, (b * s).to(a.dtype))` reads `a` for its type only: the operand is computed from `b` alone (it
    counted as computed from two tiles, a refusal)."""
    text = gemm().replace("acc = tl.dot(a, b, acc)", "acc = tl.dot(a, (b * 2.0).to(a.dtype), acc)")
    result = translate_source(text, "x.py", get_target("gfx950"))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    assert "computed from 2 tiles" not in result.text


FRESH = HEAD + '''@triton.jit
def tile_products(a_ptr, v_ptr, u_ptr, T, V, stride_a, stride_v, stride_u, BT: tl.constexpr, BV: tl.constexpr):
    pid = tl.program_id(0)
    o_t = pid * BT + tl.arange(0, BT)
    o_a = tl.arange(0, BT)
    m_t = o_t < T
    b_a = tl.load(a_ptr + o_t[:, None] * stride_a + o_a[None, :], mask=m_t[:, None], other=0.0)
    for i_v in range(tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        m_v = m_t[:, None] & (o_v[None, :] < V)
        b_v = tl.load(v_ptr + o_t[:, None] * stride_v + o_v[None, :], mask=m_v, other=0.0)
        b_u = tl.dot(b_a, b_v)
        tl.STORE(u_ptr + o_t[:, None] * stride_u + o_v[None, :], b_u.to(u_ptr.dtype.element_ty), mask=m_v)
'''


def test_a_product_made_afresh_and_stored_each_iteration_is_pipelined() -> None:
    """`u = tl.dot(A, v)` then `tl.store(.., u)` each iteration (a chunked linear-attention kernel's tiles of the
    output, with A held in registers): the loads of V are pipelined, A is converted to its operand layout once before
    the loop, and the store takes the product's layout, its addresses computed there (a conversion of the product
    would cross warps next to the MMA)."""
    result = translate_source(FRESH.replace("STORE", "store"), "x.py", get_target("gfx950"))
    fn = result.functions[0]
    assert fn.translated and fn.pipelined, fn.kept_reason
    loop = result.text.split('with gl.amd.warp_pipeline_stage("mma", priority=0):', 1)[1].split("with gl.amd", 1)[0]
    assert "gl.store(" in loop and "gl.convert_layout" not in loop
    assert "b_a_op = gl.convert_layout(b_a, gl.DotOperandLayout(0, mma_layout," in result.text
    (schedule,) = fn.schedules
    assert schedule.loop.chains[0].fresh and schedule.loop.chains[0].operands == ("b_a", "b_v")


def test_an_atomic_of_the_fresh_product_or_a_store_beside_an_accumulator_is_refused() -> None:
    atomic = translate_source(FRESH.replace("STORE", "atomic_add"), "x.py", get_target("gfx950")).functions[0]
    assert not atomic.translated and not atomic.pipelined
    stored = translate_source(gemm("tl.store(c_ptr + offs_m, tl.sum(acc, axis=1))"), "x.py", get_target("gfx950"))
    assert not stored.functions[0].pipelined


def test_conversions_of_values_the_loop_does_not_change_are_made_before_it() -> None:
    """A conversion in the loop body of a loop-invariant value (`shifter[:, None]`, `tl.exp2(g)[:, None]`, a cast
    of one) is no barrier of the `mma` stage: the rule converts it once, before the loop (`_Invariant`). A value the
    loop changes, or one read through a load, is not."""
    from transpile.analysis.stages import invariant_convert
    from transpile.rules.amd_warp_pipeline import _Invariant

    text = HEAD + (
        "@triton.jit\ndef k(p, n, s_ptr, BK: tl.constexpr):\n"
        "    s = tl.load(s_ptr + tl.arange(0, BK))\n"
        "    for i in range(n):\n"
        "        x = s[:, None] * tl.exp2(s)[None, :].to(tl.float32) + i\n"
        "        y = x + tl.load(p + i)\n")
    source = parse_source(text, "x.py")
    facts = discover(source)
    plans = analyse_layouts(facts)
    fn = facts.functions["k"]
    loop = next(n for n in fn.node.body.body if isinstance(n, cst.For))
    flow = loop_dataflow(source, loop, plans["k"])
    nodes = {source.code(n): n for n in cst_walk_nodes(loop) if isinstance(n, cst.BaseExpression)}
    assert invariant_convert(source, nodes["s[:, None]"], loop, flow)
    assert invariant_convert(source, nodes["tl.exp2(s)[None, :].to(tl.float32)"], loop, flow)
    assert not invariant_convert(source, nodes["x"], loop, flow)  # (assigned in the loop)
    assert not invariant_convert(source, nodes["tl.load(p + i)"], loop, flow)
    names = iter(["s_cvt", "s_cvt_1"])
    body = cst.parse_statement("y = gl.convert_layout(s[:, None], L) + gl.convert_layout(x, L) + "
                               "gl.convert_layout(s[:, None], L) + gl.convert_layout(gl.load(q)[:, None], L)\n")
    invariant = _Invariant({"x", "i", "y"}, lambda base: next(names))
    assert cst.Module([body.visit(invariant)]).code.strip() == (
        "y = s_cvt + gl.convert_layout(x, L) + s_cvt + gl.convert_layout(gl.load(q)[:, None], L)")
    assert invariant.made == {("s[:, None]", "L"): "s_cvt"}


def cst_walk_nodes(node: cst.CSTNode) -> list[cst.CSTNode]:
    from transpile.cst_walk import preorder

    return list(preorder(node))


def test_a_running_offset_the_store_reads_is_advanced_by_the_consumer_too() -> None:
    """`o_v = off + arange` read by the store, `off += BV` at the end: the consumer runs both (transitively, every
    producer statement whose value it reads), so each tile is stored at its own offset (it stored every one at 0)."""
    text = FRESH.replace("STORE", "store").replace(
        "        o_v = i_v * BV + tl.arange(0, BV)\n", "        o_v = off + tl.arange(0, BV)\n").replace(
        "    for i_v in range(", "    off = 0\n    for i_v in range(").replace("mask=m_v)\n", "mask=m_v)\n        off += BV\n")
    result = translate_source(text, "x.py", get_target("gfx950"))
    assert result.functions[0].translated and result.functions[0].pipelined, result.functions[0].kept_reason
    mma = result.text.split('with gl.amd.warp_pipeline_stage("mma", priority=0):', 1)[1].split("with gl.amd", 1)[0]
    assert "o_v = off + gl.arange(" in mma and "off += BV" in mma
    mem = result.text.split('with gl.amd.warp_pipeline_stage("mem", priority=1):', 1)[1].split("# The last", 1)[0]
    assert "off_next += BV" in mem and "off += BV" not in mem


SQUARE = HEAD + '''@triton.jit
def scaled_square(a_ptr, b_ptr, s_ptr, c_ptr, K, stride_am, stride_bk, B: tl.constexpr, BK: tl.constexpr,
                  HAS_S: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    offs_k = tl.arange(0, BK)
    s = tl.load(s_ptr + tl.arange(0, B))
    a_ptrs = a_ptr + offs[:, None] * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs[None, :]
    acc = tl.zeros((B, B), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc += tl.dot(a, b)
        UPDATE
        a_ptrs += BK
        b_ptrs += BK * stride_bk
    tl.store(c_ptr + offs[:, None] * B + offs[None, :], acc.to(tl.float16))
'''


@pytest.mark.parametrize("update,hoisted", [
    ("acc = acc * tl.exp2(s)[:, None] + tl.exp2(s)[None, :]", True),
    # `tl.sigmoid` is a helper of the variant, not `gl.sigmoid`: neither the plan nor the rule take it as elementwise
    ("acc = acc * tl.sigmoid(s)[:, None] + tl.sigmoid(s)[None, :]", False),
    # in a branch, the conversion is made where the branch runs (`s` may not exist where it does not)
    ("if HAS_S:\n            acc = acc * tl.exp2(s)[:, None] + tl.exp2(s)[None, :]", False),
])
def test_a_vector_read_along_both_axes_is_converted_before_the_loop_or_kept(update: str, hoisted: bool) -> None:
    fn, text = None, SQUARE.replace("UPDATE", update)
    result = translate_source(text, "x.py", get_target("gfx950"))
    fn = result.functions[0]
    if hoisted:
        assert fn.translated and fn.pipelined, fn.kept_reason
        assert "_cvt = gl.convert_layout(gl.exp2(s)" in result.text
        mma = result.text.split('with gl.amd.warp_pipeline_stage("mma", priority=0):', 1)[1].split("with gl.amd")[0]
        assert "convert_layout" not in mma
    else:
        assert not fn.pipelined and "one warp group" in fn.kept_reason


@pytest.mark.parametrize("edit,reason", [
    # a recurrence through memory the kernel marks by asking for no pipelining
    ((("range(tl.cdiv(V, BV))", "tl.range(0, tl.cdiv(V, BV), num_stages=1)"),),
     "a store inside a loop that asks for `num_stages=1`"),
    # ... or by a launch of the kernel
    ((("mask=m_v)\n", "mask=m_v)\n\n\ndef run(a, v, u):\n    tile_products[(1,)](a, v, u, 64, 64, 64, 64, 64, "
                      "BT=64, BV=64, num_warps=8, num_stages=1)\n"),),
     "a store inside a loop that asks for `num_stages=1`"),
    # the register operand also read outside the dot
    ((("        tl.store(", "        b_u = b_u + tl.sum(b_a.to(tl.float32), axis=1)[:, None]\n        tl.store("),),
     "`b_a`, a dot operand held in registers across the loop, is also used outside the dot"),
])
def test_fresh_product_loops_the_ring_cannot_take_are_kept(edit: tuple, reason: str) -> None:
    text = FRESH.replace("STORE", "store")
    for old, new in edit:
        assert old in text
        text = text.replace(old, new)
    fn = translate_source(text, "x.py", get_target("gfx950")).functions[0]
    assert not (fn.translated and fn.pipelined) and reason in fn.kept_reason


def test_values_only_the_copies_compute_are_not_read_stale_after_the_loop() -> None:
    """A name the loop's producer assigns plainly (`k_left = K - k * BK`) and the consumer never reads is computed by
    the pipelined copies only: read after the loop it would hold its value from before."""
    text = gemm().replace("    acc = tl.zeros((BM, BN), dtype=tl.float32)\n",
                          "    acc = tl.zeros((BM, BN), dtype=tl.float32)\n    k_left = 0\n").replace(
        "acc.to(tl.float16))", "acc.to(tl.float16) + k_left)")
    fn = translate_source(text, "x.py", get_target("gfx950")).functions[0]
    assert not fn.pipelined and "`k_left`, which the loop computes for its loads, is read after it" in fn.kept_reason
    # `x = f(x)` in a loop around reads the value the last run left before assigning it: not afresh
    wrapped = passes("a_ptrs = a_ptrs + 0").replace("    pass\n    acc = tl.zeros", "    " + A_PTRS + "\n    acc = tl.zeros")
    fn = translate_source(wrapped, "x.py", get_target("gfx950")).functions[0]
    assert not fn.pipelined and "`a_ptrs`, which the loop computes for its loads, is carried into the next" \
        in fn.kept_reason



def test_a_value_the_copies_compute_read_in_another_branch_of_an_if_around_the_loop_is_refused() -> None:
    """`for g: if g % 2 == 0: <the dot loop, k_left = ...> else: <reads k_left>`: the other branch runs in a later
    pass and would read the value from before the pipelined loop."""
    text = passes().replace("        " + A_PTRS + "\n", "        if i % 2 == 0:\n            " + A_PTRS + "\n")
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if "if i % 2 == 0:" in line)
    end = next(i for i, line in enumerate(lines) if line.startswith("    AFTER") or line.strip() == "pass" and i > start)
    body = [("    " + line if line.strip() else line) for line in lines[start + 2:end]]
    body = [line.replace("K - j * BK, other", "k_left, other") for line in body]
    body.insert(2, "                k_left = K - j * BK")
    text = "\n".join(lines[:start + 2] + body + ["        else:", "            acc += k_left"] + lines[end:])
    text = text.replace("    acc = tl.zeros((BM, BN), dtype=tl.float32)\n",
                        "    acc = tl.zeros((BM, BN), dtype=tl.float32)\n    k_left = 0\n")
    compile(text, "x.py", "exec")
    fn = translate_source(text, "x.py", get_target("gfx950")).functions[0]
    assert not fn.pipelined and "`k_left`, which the loop computes for its loads, is read in another branch" \
        in fn.kept_reason
    # assigned afresh before the `if` in each pass (FlagGems' stream-K `A_base`): no stale value to read there
    renewed = text.replace("        if i % 2 == 0:\n", "        k_left = K\n        if i % 2 == 0:\n")
    fn = translate_source(renewed, "x.py", get_target("gfx950")).functions[0]
    assert fn.translated and fn.pipelined, fn.kept_reason


def test_a_depth_the_launch_gives_is_a_ring_of_the_default_depth() -> None:
    """`tl.range(..., num_stages=NUM_STAGES)` with a constexpr parameter (aiter's blockscale GEMMs, gemlite): the ring
    takes the default depth, fitted to the LDS as any depth is (it was refused as "not an integer literal")."""
    text = gemm().replace("num_stages=3", "num_stages=NUM_STAGES").replace(
        "BK: tl.constexpr):", "BK: tl.constexpr, NUM_STAGES: tl.constexpr):")
    plan = stage_plan(text)
    assert isinstance(plan, StagePlan) and plan.slots == 3
    fn = translate_source(text, "x.py", get_target("gfx950")).functions[0]
    assert fn.translated and fn.pipelined, fn.kept_reason


FIXTURES_DIR = Path(__file__).resolve().parents[1] / "fixtures"


def test_chained_dots_read_earlier_products_in_registers_and_a_tile_in_both_forms() -> None:
    """Attention's backward dK/dV loop (fixtures/suite_attention_bwd.py): four dots, the probabilities and dS
    computed from this iteration's products feed the next dots as A operands in registers (`DotChain.chained`), and Q
    and dO each feed one dot as loaded and another transposed (`OperandLoad.twice`): one ring each, its slot read in
    both forms. Every warp holds whole rows (warps along M), the per-row statistics are loaded straight in the
    scores' slice layout (no conversion inside a stage), and a launch with fewer rows than 16 a warp, or whose
    tiles would spill, runs the source kernel."""
    text = (FIXTURES_DIR / "suite_attention_bwd.py").read_text(encoding="utf-8")
    result = translate_source(text, "suite_attention_bwd.py", get_target("gfx950"))
    fn = next(f for f in result.functions if f.name == "attn_bwd_dkdv_kernel")
    assert fn.translated and fn.pipelined, fn.kept_reason
    (schedule,) = fn.schedules
    plan = schedule.loop
    assert plan.chained and [c.chained for c in plan.chains] == [False, True, False, True]
    assert [c.fresh for c in plan.chains] == [True, False, True, False]
    assert {ld.name: (ld.transposed, ld.twice) for ld in plan.loads} == {"q": (True, True), "do": (False, True)}
    assert plan.chains[1].operands == ("pT.to(tl.float16)", "do")
    loop = result.text.split('with gl.amd.warp_pipeline_stage("mma", priority=0):', 1)[1].split("# The last", 1)[0]
    assert "gl.convert_layout" not in loop
    for read in ("q = async_copy.load_shared_relaxed(q_ring.index(", "q_t = async_copy.load_shared_relaxed(q_ring.index(",
                 "do_t = async_copy.load_shared_relaxed(do_ring.index("):
        assert read in result.text
    assert "qkT = _dot(k_op, q_t," in result.text and "dk = _dot(dsT.to(gl.float16), q, dk)" in result.text
    assert "warps_along_m=True" in result.text
    assert "lambda BLOCK_N: BLOCK_N < 128" in result.text
    assert "> 524288" in result.text  # (CHAINED_REGISTER_LIMIT: 256 registers a lane on gfx950)


def test_chained_operand_masked_under_a_constexpr_flag() -> None:
    """Attention's backward as the serving libraries write it: the probabilities masked under a constexpr flag
    (`if CAUSAL: pT = tl.where(...)`, a branch of arithmetic the pipeline stages whole) still feed the next dot as a
    chained A operand; the loop is pipelined for gfx950, compiles, and its schedule holds. A dot operand computed
    from a loaded tile through such a branch is still refused, naming the branch."""
    text = (FIXTURES_DIR / "suite_attention_bwd.py").read_text(encoding="utf-8")
    text = text.replace("HEAD_DIM: tl.constexpr):", "HEAD_DIM: tl.constexpr,\n"
                        "                         CAUSAL: tl.constexpr):")
    text = text.replace("        pT = tl.math.exp2(qkT - m[None, :])\n",
                        "        pT = tl.math.exp2(qkT - m[None, :])\n        if CAUSAL:\n"
                        "            pT = tl.where(rows[None, :] >= offs_n[:, None], pT, 0.0)\n")
    assert text.count("if CAUSAL:") == 1
    result = translate_source(text, "x.py", get_target("gfx950"))
    fn = next(f for f in result.functions if f.name == "attn_bwd_dkdv_kernel")
    assert fn.translated and fn.pipelined, fn.kept_reason
    (schedule,) = fn.schedules
    assert schedule.loop.chained and [c.chained for c in schedule.loop.chains] == [False, True, False, True]
    assert "if CAUSAL:" in result.text.split('with gl.amd.warp_pipeline_stage("mma", priority=0):', 1)[1]
    report = check_source(result.text)
    assert report.cases and not report.findings, report
    compiled = verify(result, {"Q": "*fp16", "K": "*fp16", "V": "*fp16", "DO": "*fp16", "M": "*fp32",
                               "Delta": "*fp32", "DK": "*fp16", "DV": "*fp16", "sm_scale": "fp32", "N_CTX": "i32",
                               "BLOCK_M": 32, "BLOCK_N": 128, "HEAD_DIM": 64, "CAUSAL": True}, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]
    # (a computed operand of a loaded tile, through the branch: `dv += tl.dot(q2.to(...), do)`, `q2` masked under it)
    computed = text.replace("        dv += tl.dot(pT.to(tl.float16), do)\n",
                            "        q2 = q * 2.0\n        if CAUSAL:\n            q2 = tl.where(q2 > 0, q2, 0.0)\n"
                            "        dv += tl.dot(tl.trans(q2).to(tl.float16), do)\n")
    fn = translate_source(computed, "x.py", get_target("gfx950")).functions[0]
    assert not fn.pipelined


def test_attention_backward_loop_unswitched_on_a_load_flag_pipelines_both_copies() -> None:
    """A load switched on a compile-time flag (`if EVEN_M: do = tl.load(do_ptrs)`) in attention's backward loop (four
    dots): the loop is copied per value, and both copies are pipelined on gfx950, their per-row vectors loaded
    straight in the scores' slice layout (the names each copy binds once, `rows = start_m + offs_m`, are one
    definition). They compile and their schedules hold."""
    text = (FIXTURES_DIR / "suite_attention_bwd.py").read_text(encoding="utf-8")
    text = text.replace("HEAD_DIM: tl.constexpr):", "HEAD_DIM: tl.constexpr,\n"
                        "                         EVEN_M: tl.constexpr):")
    text = text.replace("        do = tl.load(do_ptrs, mask=rows[:, None] < N_CTX, other=0.0)\n",
                        "        if EVEN_M:\n            do = tl.load(do_ptrs)\n        else:\n"
                        "            do = tl.load(do_ptrs, mask=rows[:, None] < N_CTX, other=0.0)\n")
    result = translate_source(text, "x.py", get_target("gfx950"))
    fn = next(f for f in result.functions if f.name == "attn_bwd_dkdv_kernel")
    assert fn.translated and fn.pipelined, fn.kept_reason
    assert len(fn.schedules) == 2 and all(s.loop.chained for s in fn.schedules)
    assert not any("gl.convert_layout" in stage for stage in _mma_stages(result.text))
    report = check_source(result.text)
    assert report.cases and not report.findings, report
    compiled = verify(result, {"Q": "*fp16", "K": "*fp16", "V": "*fp16", "DO": "*fp16", "M": "*fp32",
                               "Delta": "*fp32", "DK": "*fp16", "DV": "*fp16", "sm_scale": "fp32", "N_CTX": "i32",
                               "BLOCK_M": 32, "BLOCK_N": 128, "HEAD_DIM": 64, "EVEN_M": False}, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def test_chained_dots_are_kept_where_measured_heavier() -> None:
    text = (FIXTURES_DIR / "suite_attention_bwd.py").read_text(encoding="utf-8")
    for target, figures in (("gfx942", "0.70-0.99x"), ("gfx1250", "0.91-1.08x")):
        fn = translate_source(text, "suite_attention_bwd.py", get_target(target)).functions[0]
        assert not fn.pipelined and figures in fn.kept_reason and "earlier dots' products" in fn.kept_reason


def test_a_dot_operand_from_loaded_tiles_alone_is_no_chained_operand() -> None:
    """A chained A operand is computed from an earlier dot's product; an expression of loaded tiles alone stays the
    computed-operand form (one tile) or is refused (two)."""
    text = (FIXTURES_DIR / "suite_attention_bwd.py").read_text(encoding="utf-8").replace(
        "dv += tl.dot(pT.to(tl.float16), do)", "dv += tl.dot((q * 2.0).to(tl.float16), do)")
    fn = translate_source(text, "x.py", get_target("gfx950")).functions[0]
    assert not fn.pipelined
    assert not any(c.chained and "q * 2.0" in c.operands[0] for s in fn.schedules for c in s.loop.chains)


def test_a_tile_read_transposed_from_memory_is_named_in_the_keep_reason() -> None:
    """Q loaded already transposed (`[HEAD_DIM, BLOCK_M]`, `offs_m[None, :] * stride_tok`, as the Triton tutorial's
    backward loads it), contiguous along its first axis: loaded as its transpose (`passes/transposed_keys.py`) and
    pipelined. With its head dimension strided by a parameter no other tile has on its last axis, which axis is
    contiguous is the launch's, and its last axis is dO's row stride, which no launch of real tensors has 1: its
    copies would go through registers, and the keep reason names the tile, its line and that stride."""
    text = (FIXTURES_DIR / "suite_attention_bwd.py").read_text(encoding="utf-8")
    text = text.replace("q_ptrs = Q + bh * stride_bh + offs_m[:, None] * stride_tok + offs_d[None, :]",
                        "q_ptrs = Q + bh * stride_bh + offs_m[None, :] * stride_tok + offs_d[:, None]")
    text = text.replace("q = tl.load(q_ptrs, mask=rows[:, None] < N_CTX, other=0.0)",
                        "qT = tl.load(q_ptrs, mask=rows[None, :] < N_CTX, other=0.0)")
    text = text.replace("qkT = tl.dot(k, tl.trans(q))", "qkT = tl.dot(k, qT)")
    text = text.replace("dk += tl.dot(dsT.to(tl.float16), q)", "dk += tl.dot(dsT.to(tl.float16), tl.trans(qT))")
    line = line_of(text, "qT = tl.load(")
    fn = translate_source(text, "x.py", get_target("gfx950")).functions[0]
    assert fn.pipelined, fn.kept_reason
    # with the head dimension's stride a parameter too, which axis is contiguous is the launch's: the token axis
    # cannot be, being dO's row stride
    strided = text.replace("offs_d[:, None]\n", "offs_d[:, None] * stride_d\n").replace(
        "stride_bh, stride_tok,", "stride_bh, stride_tok, stride_d,")
    assert strided.count("* stride_d\n") == 1
    fn = translate_source(strided, "x.py", get_target("gfx950")).functions[0]
    assert not fn.translated
    assert f"the tile `qT` at line {line} has its last axis strided by `stride_tok`, a row stride of the loop's tiles" \
        in fn.kept_reason, fn.kept_reason


def test_chained_dots_share_one_mma_instruction_shape() -> None:
    """The dots of a chained loop are laid out for all their N sizes at once: with 32 rows a warp or more, a product
    of N 16 and a dot of N 64 took 16x16 and 32x32 instructions, and the product's conversion to the next dot's
    operand layout went through shared memory with a barrier inside the `mma` stage (found in review)."""
    text = (FIXTURES_DIR / "suite_attention_bwd.py").read_text(encoding="utf-8")
    result = translate_source(text, "suite_attention_bwd.py", get_target("gfx950"))
    layouts = re.findall(r"mma_layout\w*: gl\.constexpr = _mma_layout\(\s*BLOCK_N,\s*\[([^\]]*)\]", result.text)
    assert layouts and all(set(ns.replace(" ", "").split(",")) == {"BLOCK_M", "HEAD_DIM"} for ns in layouts), layouts


# A block-scaled GEMM in the style of serving code (per-row scales of A per K block, per-column-block scales of B),
# its scale pointers advanced in the loop by a step the kernel computes (`STEP`), the product scaled before it is
# added (`SCALED`).
BLOCK_SCALED = HEAD + '''@triton.jit
def bs_gemm(a_ptr, b_ptr, c_ptr, as_ptr, bs_ptr, M, N, K, stride_am, stride_bk, stride_cm, stride_as_m,
            stride_as_k, stride_bs_k, stride_bs_n, GROUP_N: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
            BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = (pid_m * BM + tl.arange(0, BM)) % M
    offs_n = (pid_n * BN + tl.arange(0, BN)) % N
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :]
    as_ptrs = as_ptr + offs_m * stride_as_m
    bs_ptrs = bs_ptr + (offs_n // GROUP_N) * stride_bs_n
    step = BK // 128
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)
        a_s = tl.load(as_ptrs)
        b_s = tl.load(bs_ptrs)
        SCALED
        a_ptrs += BK
        b_ptrs += BK * stride_bk
        as_ptrs += step * stride_as_k
        bs_ptrs += step * stride_bs_k
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(tl.bfloat16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
'''
BLOCK_SCALED_VALUES = {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "c_ptr": "*bf16", "as_ptr": "*fp32",
                       "bs_ptr": "*fp32", "GROUP_N": 128, "BM": 128, "BN": 128, "BK": 128}


def block_scaled(scaled: str = "acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]") -> str:
    return BLOCK_SCALED.replace("SCALED", scaled)


@pytest.mark.parametrize("scaled", [
    "acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]",
    "acc = acc + (tl.dot(a, b) * a_s[:, None]) * b_s[None, :]",
    "acc += tl.dot(a, b).to(tl.float32) * (a_s[:, None] * b_s[None, :])",
])
def test_a_product_scaled_before_it_is_added_is_pipelined(scaled: str) -> None:
    """`acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]` (DeepSeek-style block-scaled fp8 GEMMs): the MMA starts from
    zero each iteration, the scales are loaded in the MMA's slice layout (no conversion next to the MMA) by buffer
    loads whose scalar base the loop advances, and the scaled product is added by one FMA a value."""
    result = translate_source(block_scaled(scaled), "bs.py", get_target("gfx950"))
    fn = result.functions[0]
    assert fn.pipelined, fn.kept_reason
    (schedule,) = fn.schedules
    (chain,) = schedule.loop.chains
    assert chain.scaled_product and chain.acc == "acc" and not chain.acc_in_dot and not chain.fresh
    mma = result.text.split('with gl.amd.warp_pipeline_stage("mma", priority=0):', 1)[1].split("with gl.amd", 1)[0]
    assert "acc = gl.fma(" in mma and "_dot_acc" not in mma and "gl.convert_layout" not in mma
    assert "a_s = _buffer_load(as_ptrs_base, as_ptrs_offs)" in mma
    assert "as_ptrs_base += step * stride_as_k" in mma and "as_ptrs_offs +=" not in result.text
    assert "as_ptrs_offs = offs_m * stride_as_m" in result.text


@pytest.mark.parametrize("scaled", [
    "acc += tl.dot(a, b) + a_s[:, None]",   # an addition: not a scaled product
    "acc += tl.dot(a, b) * acc",            # the scale reads the accumulator
    "acc += a_s[:, None] / tl.dot(a, b)",   # the product divides
])
def test_other_accumulations_around_a_dot_are_not_scaled_products(scaled: str) -> None:
    result = translate_source(block_scaled(scaled), "bs.py", get_target("gfx950"))
    assert not result.functions[0].pipelined


def test_scaled_products_keep_their_measured_limits() -> None:
    """Launches whose accumulator, scaled product and tiles would spill run the source kernel (measured on gfx950 and
    gfx942); gfx1250 keeps the kernel as Triton, with the measurement; sm90 names the form."""
    from transpile.rules.base import source_when_holds

    fn = translate_source(block_scaled(), "bs.py", get_target("gfx950")).functions[0]
    (test,) = [t for t in fn.dispatch.source_when if "BM" in t[0]]
    assert not source_when_holds(*test, {"BM": 128, "BN": 128, "BK": 128})
    assert source_when_holds(*test, {"BM": 256, "BN": 128, "BK": 128})
    assert source_when_holds(*test, {"BM": 64, "BN": 256, "BK": 128})
    gfx942 = translate_source(block_scaled(), "bs.py", get_target("gfx942")).functions[0]
    (test,) = [t for t in gfx942.dispatch.source_when if "BM" in t[0]]
    assert not source_when_holds(*test, {"BM": 64, "BN": 128, "BK": 128})
    assert source_when_holds(*test, {"BM": 128, "BN": 128, "BK": 128})
    gfx1250 = translate_source(block_scaled(), "bs.py", get_target("gfx1250")).functions[0]
    assert not gfx1250.pipelined and "0.78-1.14x" in gfx1250.kept_reason
    sm90 = translate_source(block_scaled(), "bs.py", get_target("sm90")).functions[0]
    assert not sm90.pipelined and "scaled before it is accumulated" in sm90.kept_reason


@pytest.mark.slow
def test_block_scaled_variants_compile_with_buffer_loads_of_their_scales() -> None:
    for target in ("gfx950", "gfx942"):
        result = translate_source(block_scaled(), "bs.py", get_target(target))
        values = {**BLOCK_SCALED_VALUES, "BM": 64} if target == "gfx942" else BLOCK_SCALED_VALUES
        if target == "gfx942":
            values = {**values, "a_ptr": "*fp8e4b8", "b_ptr": "*fp8e4b8"}
        from transpile.verify import schedule_checks

        checked = [c for c in verify(result, values) if not c.kept] + schedule_checks(result)
        assert all(c.ok for c in checked), [c.message for c in checked]
        assert any(c.check == "schedule" for c in checked)  # (the schedule checker ran the warp-pipelined loop)
        compiled = [c for c in checked if c.check == "compile"]
        asm = compiled[0].asm.get("amdgcn", "")
        assert "buffer_load_dword" in asm and "v_pk_fma_f32" in asm


@pytest.mark.slow
def test_gfx1250_fp8_dots_of_a_128_deep_k_block_take_the_128_deep_wmma() -> None:
    """As Triton's own compile: fp8 operands with a K block of at least 128 go by `v_wmma_f32_16x16x128_fp8_fp8`
    (16 bytes of K a lane), half the instructions of the 16x16x64 one."""
    result = translate_source(block_scaled(), "bs.py", get_target("gfx1250"), gluon_always=True)
    assert result.functions[0].pipelined
    compiled = [c for c in verify(result, BLOCK_SCALED_VALUES) if not c.kept and c.check == "compile"]
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled]
    asm = compiled[0].asm.get("amdgcn", "")
    assert "v_wmma_f32_16x16x128_fp8_fp8" in asm and "v_wmma_f32_16x16x64_fp8_fp8" not in asm


# MoE kernels compute their grid from a token count they load (`num_pid_m = tl.cdiv(tl.load(num_tokens_ptr),
# BM)`), so the block a program takes along N reads memory; but only as `pid_n * BN`, a multiple of the block, which
# the compiler proves (aiter's `_fused_moe_kernel`): the tiles are still copied direct to LDS 16 bytes a lane.
LOADED_GRID = HEAD + '''@triton.jit
def moe_mm(a_ptr, b_ptr, c_ptr, num_tokens_ptr, expert_ids_ptr, N, K, stride_am, stride_be, stride_bk, stride_cm,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(tl.load(num_tokens_ptr), BM)
    pid_m = pid % num_pid_m
    pid_n = pid // num_pid_m
    expert = tl.load(expert_ids_ptr + pid_m)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = (pid_n * BN + tl.arange(0, BN)) % N
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + expert * stride_be + offs_k[:, None] * stride_bk + offs_n[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK * stride_bk
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc.to(tl.float16))
'''


@pytest.mark.slow
def test_a_block_picked_from_a_loaded_count_is_copied_direct_to_lds(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    result = translate_source(LOADED_GRID, "moe_mm.py", get_target("gfx950"))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    assert "async_copy.global_load_to_shared(" in result.text or "buffer_load_to_shared(" in result.text
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "num_tokens_ptr": "*i32",
              "expert_ids_ptr": "*i32", "BM": 128, "BN": 128, "BK": 64}
    compiled = verify(dataclasses.replace(result), values, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]


@pytest.mark.parametrize(("offset", "reason"), [
    # an offset loaded and added along the contiguous axis: no launch can vouch for its alignment
    ("offs_n = tl.load(starts_ptr + pid_n) + tl.arange(0, BN)",
     "the tile `b` at line 21 is addressed along its contiguous axis from loaded offsets"),
    # the loaded value picks the block: still aligned
    ("offs_n = tl.load(starts_ptr + pid_n) * BN + tl.arange(0, BN)", None),
    # a select clamps the columns: the compiler cannot prove them contiguous (a direct-to-LDS copy would not compile)
    ("offs_n = pid_n * BN + tl.arange(0, BN)\n    offs_n = tl.where(offs_n < N, offs_n, 0)",
     "the tile `b` at line 22 is addressed along its contiguous axis by `offs_n`, which a `where` makes"),
    # a select of the block index, a scalar, leaves the columns contiguous (FlagGems' `bmm`)
    ("pid_n = tl.where(pid_n < 0, 0, pid_n)\n    offs_n = pid_n * BN + tl.arange(0, BN)", None),
    # ... unless a contiguity hint follows it, as the persistent-matmul tutorial writes it
    ("offs_n = pid_n * BN + tl.arange(0, BN)\n    offs_n = tl.where(offs_n < N, offs_n, 0)\n"
     "    offs_n = tl.max_contiguous(tl.multiple_of(offs_n, BN), BN)", None),
])
def test_loaded_offsets_along_the_contiguous_axis(offset: str, reason: str | None) -> None:
    text = LOADED_GRID.replace("starts_ptr", "x").replace(
        "def moe_mm(a_ptr,", "def moe_mm(starts_ptr, a_ptr,").replace(
        "    offs_n = (pid_n * BN + tl.arange(0, BN)) % N", f"    {offset}")
    result = translate_source(text, "moe_mm.py", get_target("gfx950"))
    assert result.functions[0].pipelined == (reason is None), result.functions[0].kept_reason
    if reason:
        assert reason in result.functions[0].kept_reason


# A block pointer read transposed (order `(0, 1)`, fla's chunked kernels' K^T tile) is lowered to pointer tiles
# whose strides are names (`p_k_stride0 = 1`, `p_k_stride1 = H * K`): its vectors run down the first axis, and a
# direct-to-LDS copy of 16 bytes a lane along the last one does not compile ("can only be vectorized to 1 element").
# As the B operand it is loaded as its transpose, [BT, BK] (`transpile.passes.transposed_keys`), and the dot reads
# `tl.trans` of that: the ring copies it 16 bytes a lane along K.
TRANSPOSED_BLOCK = HEAD + '''@triton.jit
def chunk(q, k, o, T, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr):
    i_t, i_h = tl.program_id(0), tl.program_id(1)
    q += i_h * K
    k += i_h * K
    b_A = tl.zeros([BT, BT], dtype=tl.float32)
    for i_k in range(tl.cdiv(K, BK)):
        p_q = tl.make_block_ptr(q, (T, K), (H * K, 1), (i_t * BT, i_k * BK), (BT, BK), (1, 0))
        p_k = tl.make_block_ptr(k, (K, T), (1, H * K), (i_k * BK, i_t * BT), (BK, BT), (0, 1))
        b_q = tl.load(p_q, boundary_check=(0, 1))
        b_k = tl.load(p_k, boundary_check=(0, 1))
        b_A = tl.dot(b_q, b_k, acc=b_A)
    o_t = i_t * BT + tl.arange(0, BT)
    tl.store(o + o_t[:, None] * BT + tl.arange(0, BT)[None, :], b_A, mask=o_t[:, None] < T)
'''


@pytest.mark.parametrize("target", ["gfx950", "gfx942", "gfx1250"])
def test_a_block_pointer_read_transposed_is_copied_as_its_transpose(target: str, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    result = translate_source(TRANSPOSED_BLOCK, "chunk.py", get_target(target))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    # ([BT, BK] slots, read as B through their transposed view)
    assert "b_k_ring = gl.allocate_shared_memory(k.dtype.element_ty, [NUM_STAGES, BT, BK]," in result.text
    assert re.search(r"b_k_ring\.index\(0\)\.permute\(\[1, 0\]\)(\.load\(|, )gl\.DotOperandLayout\(1, b_A",
                     result.text), result.text
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    compiled = verify(result, {"q": "*fp16", "k": "*fp16", "o": "*fp32", "T": "i32", "H": 4, "K": 512, "BT": 64,
                               "BK": 64})
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


@pytest.mark.parametrize("target", ["gfx950", "gfx1250"])
def test_a_tile_read_transposed_as_an_a_operand_is_copied_as_its_transpose(target: str, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """An A tile contiguous along M (K^T as the A operand of a chunk's state update) is loaded as its transpose,
    [BT, BK] slots read as A through their transposed view, on the targets whose MMA reads that view cheaply."""
    # ([BK, BT] @ [BT, BK], BT == BK: the K^T tile as A)
    text = TRANSPOSED_BLOCK.replace("b_A = tl.dot(b_q, b_k, acc=b_A)", "b_A = tl.dot(b_k, b_q, acc=b_A)")
    result = translate_source(text, "chunk.py", get_target(target))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    assert "b_k_ring = gl.allocate_shared_memory(k.dtype.element_ty, [NUM_STAGES, BT, BK]," in result.text
    assert re.search(r"b_k_ring\.index\(0\)\.permute\(\[1, 0\]\)(\.load\(|, )gl\.DotOperandLayout\(0, b_A",
                     result.text), result.text
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    compiled = verify(result, {"q": "*fp16", "k": "*fp16", "o": "*fp32", "T": "i32", "H": 4, "K": 512, "BT": 64,
                               "BK": 64})
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def test_a_tile_read_transposed_as_an_a_operand_stays_as_written_on_gfx942() -> None:
    """gfx942 reads an A operand through a transposed view of its slot at a cost above Triton's own compile at
    128-wide tiles (bench/RESULTS.md): its K^T tile as the A operand is left as written, and the loop kept."""
    text = TRANSPOSED_BLOCK.replace("b_A = tl.dot(b_q, b_k, acc=b_A)", "b_A = tl.dot(b_k, b_q, acc=b_A)")
    result = translate_source(text, "chunk.py", get_target("gfx942"))
    assert not result.functions[0].pipelined
    assert "is contiguous along its first axis" in result.functions[0].kept_reason
    # (its B form is taken on gfx942 too)
    assert translate_source(TRANSPOSED_BLOCK, "chunk.py", get_target("gfx942")).functions[0].pipelined


def test_a_last_axis_strided_by_constexprs_is_not_copied_direct_to_lds() -> None:
    text = TRANSPOSED_BLOCK.replace(
        "p_k = tl.make_block_ptr(k, (K, T), (1, H * K), (i_k * BK, i_t * BT), (BK, BT), (0, 1))",
        "p_k = k + (i_k * BK + tl.arange(0, BK))[:, None] * 1 + (i_t * BT + tl.arange(0, BT))[None, :] * (H * K)"
    ).replace("b_k = tl.load(p_k, boundary_check=(0, 1))", "b_k = tl.load(p_k)")
    result = translate_source(text, "chunk.py", get_target("gfx950"))
    assert result.functions[0].pipelined, result.functions[0].kept_reason  # (read as its transpose, as above)
    text = text.replace("[:, None] * 1 +", "[:, None] * 2 +")
    result = translate_source(text, "chunk.py", get_target("gfx950"))
    assert not result.functions[0].pipelined
    assert "the tile `b_k` at line 15 has its last axis strided by `H * K`" in result.functions[0].kept_reason


@pytest.mark.slow
def test_a_constexpr_inner_stride_runs_the_source_kernel_where_it_is_not_1(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`stride_bn: tl.constexpr` (Liger's fused MoE kernels pass their inner strides so, 1 at every launch they make):
    the Gluon kernel copies the B tile direct to LDS, which needs that stride 1; a launch of another value runs the
    source kernel (the variant did not compile at 64: "can only be vectorized to 1 element(s)")."""
    text = (Path(__file__).resolve().parents[1] / "fixtures" / "matmul_grouped.py").read_text().replace(
        "    stride_bn,\n", "    stride_bn: tl.constexpr,\n", 1)
    result = translate_source(text, "mg.py", get_target("gfx950"))
    (kernel,) = [f for f in result.functions if f.name == "matmul_kernel"]
    assert kernel.pipelined and ("stride_bn != 1", (("stride_bn", None),)) in kernel.dispatch.source_when
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64,
              "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}
    for stride, gluon in ((1, True), (64, False)):
        compiled = [c for c in verify(result, {**values, "stride_bn": stride}, all_configs=False)
                    if c.kernel == "matmul_kernel"]
        assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]
        assert all(("`stride_bn != 1`: the source kernel runs it" in c.config) != gluon for c in compiled)
        assert all((c.check == "compile") == gluon for c in compiled), [(c.config, c.check) for c in compiled]


# A fourth compile-time flag choosing loads: a loop of one dot is copied for three flags (eight copies) and the fourth
# stays in each copy, where the refusal names it as a compile-time test (not as a run-time branch); a run-time flag is
# named as one.
THREE_FLAGS = HEAD + '''@triton.jit
def mm3(a_ptr, b_ptr, s_ptr, c_ptr, K, even, EVEN_K: tl.constexpr, EVEN_N: tl.constexpr, SCALED: tl.constexpr,
        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * BN + offs_n[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        if EVEN_K:
            a = tl.load(a_ptrs)
        else:
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)
        if EVEN_N:
            b = tl.load(b_ptrs)
        else:
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)
        if SCALED:
            a = a * tl.load(s_ptr + k)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK * BN
    tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc.to(tl.float16))
'''


FOUR_FLAGS = THREE_FLAGS.replace(" SCALED: tl.constexpr,", " SCALED: tl.constexpr, SHIFTED: tl.constexpr,").replace(
    "        acc = tl.dot(a, b, acc)\n", "        if SHIFTED:\n            b = b + tl.load(s_ptr + k + 1)\n"
    "        acc = tl.dot(a, b, acc)\n")


@pytest.mark.parametrize(("text", "flag", "reason"), [
    (FOUR_FLAGS, "SHIFTED", "the dot operand is computed from `b_2`, which the `if` at line LINE on `SHIFTED` "
                            "assigns, decided at compile time, but the loop was not copied once per value"),
    # (a branch on a run-time value that computes an operand from its tile)
    (THREE_FLAGS, "even", "the dot operand is computed from `a`, which the `if` at line LINE assigns (a branch on a "
                          "run-time value"),
])
def test_a_branch_on_flags_the_loop_was_not_copied_for_is_named_so(text: str, flag: str, reason: str) -> None:
    test = "if SHIFTED:" if "SHIFTED" in text else "if SCALED:"
    result = translate_source(text.replace(test, f"if {flag}:"), "mm3.py", get_target("gfx950"))
    outcome = result.functions[0]
    line = line_of(text, test)
    assert not outcome.pipelined and reason.replace("LINE", str(line)) in outcome.kept_reason, outcome.kept_reason


def test_a_gemm_loop_is_copied_for_three_flags() -> None:
    """Three compile-time flags choosing a GEMM's loads: the loop (one dot) is copied once per value of each, eight
    copies, each planned on its own (the copies where `SCALED` holds compute A from a loaded scale)."""
    result = translate_source(THREE_FLAGS, "mm3.py", get_target("gfx950"))
    assert result.text.count("the loop, once for each value of") == 7  # (one `if` of copies per hoist: 1 + 2 + 4)
    assert result.text.count("warp-pipelined by triton-transpile") == 4  # (the four copies where `SCALED` fails)
    assert result.functions[0].pipelined
    assert any(d.code == "TT045" and "except where `SCALED` holds" in d.message for d in result.diagnostics)


# Strides written inside the broadcasts (`(stride_am * offs_m)[:, None]`, FlagGems' conv kernels) and masks
# broadcast as comparisons (`(offs_k < K)[:, None]`) of a vector the other tile lays along its other axis: the layout
# rule converts the comparison (`gl.convert_layout(offs_k < K, ...)[:, None]`), which the copies re-evaluate without
# the conversion, in parentheses (without them the broadcast took `K` alone and the variant did not compile).
INSIDE_BROADCASTS = HEAD + '''@triton.jit
def mm_masks(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, BM: tl.constexpr, BN: tl.constexpr,
             BK: tl.constexpr):
    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
    offs_n = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        offs_k = k * BK + tl.arange(0, BK)
        a = tl.load(a_ptr + (stride_am * offs_m)[:, None] + offs_k[None, :], mask=(offs_k < K)[None, :], other=0.0)
        b = tl.load(b_ptr + (stride_bk * offs_k)[:, None] + offs_n[None, :], mask=(offs_k < K)[:, None], other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
'''


@pytest.mark.slow
@pytest.mark.parametrize("inside", [True, False], ids=["strides-inside", "strides-outside"])
def test_strides_inside_broadcasts_and_converted_mask_comparisons_compile(inside: bool, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    text = INSIDE_BROADCASTS if inside else INSIDE_BROADCASTS.replace(
        "(stride_am * offs_m)[:, None]", "offs_m[:, None] * stride_am").replace(
        "(stride_bk * offs_k)[:, None]", "offs_k[:, None] * stride_bk")
    result = translate_source(text, "mm_masks.py", get_target("gfx950"))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    assert "(offs_k < K)[:, None]" in " ".join(result.text.split()).replace("( ", "(").replace(" )", ")")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "BM": 128, "BN": 128, "BK": 64}
    compiled = verify(dataclasses.replace(result), values, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]


def test_a_pointer_moved_along_the_last_axis_by_a_strided_vector_is_named() -> None:
    """FlagGems' conv weights: `weight_pointer += (weight_n_stride * offs_co)[None, :]` before the loop makes the
    parameter a tile whose columns are `weight_n_stride` apart, which the tile's own address does not show."""
    text = INSIDE_BROADCASTS.replace(
        "    acc = tl.zeros((BM, BN), dtype=tl.float32)\n",
        "    b_ptr += (stride_cm * offs_n)[None, :]\n    acc = tl.zeros((BM, BN), dtype=tl.float32)\n").replace(
        "(stride_bk * offs_k)[:, None] + offs_n[None, :]", "(stride_bk * offs_k)[:, None]")
    result = translate_source(text, "mm_masks.py", get_target("gfx950"))
    assert not result.functions[0].pipelined
    assert ("the tile `b` at line 15 is addressed from a pointer moved along the tile's last axis by a strided vector "
            "(`b_ptr += (stride_cm * offs_n)[None, :]`)") in result.functions[0].kept_reason


# `acc += tl.dot(a, b)` into a float32 accumulator the canonicalisation leaves apart (a bias added first): where the
# dot may run on 8-bit integers (the kernel names `tl.int8`), the int32 product would be added apart from the MMA,
# which spilled: the loop is pipelined and launches with 8-bit integer tensors run the source kernel (sm90 keeps the
# loop, naming the reason). A comment that says "int8" (kernl's autotune table, "# good for int8") or an operand cast
# to a float type before the dot (an int4 weight unpacked into bf16) is not such a dot.
INTEGER_NAMED = HEAD + '''@triton.jit
def mm(a_ptr, b_ptr, c_ptr, bias_ptr, K, stride_am, stride_bk, BM: tl.constexpr, BN: tl.constexpr,
       BK: tl.constexpr):
    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
    offs_n = tl.program_id(1) * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    acc += tl.load(bias_ptr + offs_n)[None, :].to(tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)
        acc += tl.dot(OPERANDS)
        a_ptrs += BK
        b_ptrs += BK * stride_bk
    OUTPUT
'''
_STORE = "tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc.to(tl.float16))"


@pytest.mark.parametrize(("operands", "output", "integer"), [
    # the output's type names int8 (aiter's `acc_dtype = ... if c_ptr.type.element_ty != tl.int8 else ...`)
    ("a, b", f"if c_ptr.dtype.element_ty != tl.int8:\n        {_STORE}", True),
    # "int8" in a comment only
    ("a, b", f"{_STORE}  # int8 outputs are not supported", False),
    # the operands cast to bf16 before the dot, the kernel's other tiles int8
    ("a.to(tl.bfloat16), b.to(tl.bfloat16)", f"if c_ptr.dtype.element_ty != tl.int8:\n        {_STORE}", False),
])
def test_a_dot_on_8_bit_integers_only_where_its_operands_may_be(operands: str, output: str, integer: bool) -> None:
    text = INTEGER_NAMED.replace("OPERANDS", operands).replace("OUTPUT", output)
    for target in ("gfx950", "gfx942", "gfx1250") if integer else ("gfx950",):
        kernel = translate_source(text, "mm.py", get_target(target)).functions[0]
        assert kernel.pipelined, kernel.kept_reason
        assert kernel.dispatch is not None
        assert not integer or {"int8", "uint8"} <= set(kernel.dispatch.slow_dtypes), (target, kernel.dispatch)
    sp = stage_plan(text, anchored=True)
    assert isinstance(sp, StagePlan) and sp.loop.chains[0].integer_sum == integer
    hopper = translate_source(text, "mm.py", get_target("sm90")).functions[0]
    if integer:
        assert not hopper.pipelined and "on 8-bit integer operands" in hopper.kept_reason


# Two dots into one accumulator, each over its own tiles (a GEMM over two halves of K, a fused gate/up backward's
# `acc = tl.dot(d_gate, w_gate, acc=acc)` then `acc = tl.dot(d_up, w_up, acc=acc)`, Liger-Kernel's MoE): one
# accumulator chain of two MMAs, each with rings of its own, run in order in the `mma` stage.
SPLIT_K = HEAD + '''@triton.jit
def two_halves(a_ptr, b_ptr, c_ptr, K, stride_am, stride_bk, stride_cm, BM: tl.constexpr, BN: tl.constexpr,
               BK: tl.constexpr):
    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
    offs_n = tl.program_id(1) * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a1 = tl.load(a_ptr + offs_m[:, None] * stride_am + (k + offs_k)[None, :])
        b1 = tl.load(b_ptr + (k + offs_k)[:, None] * stride_bk + offs_n[None, :])
        acc = tl.dot(a1, b1, acc=acc)
        a2 = tl.load(a_ptr + offs_m[:, None] * stride_am + (K + k + offs_k)[None, :])
        b2 = tl.load(b_ptr + (K + k + offs_k)[:, None] * stride_bk + offs_n[None, :])
        acc = tl.dot(a2, b2, acc=acc)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc.to(c_ptr.dtype.element_ty))
'''


@pytest.mark.parametrize("target", ["gfx950", "gfx1250"])
def test_two_dots_into_one_accumulator_are_one_chain(target: str) -> None:
    from transpile.schedule_check import check_source

    result = translate_source(SPLIT_K, "halves.py", get_target(target))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    mma = result.text.split('warp_pipeline_stage("mma"', 1)[1].split("warp_pipeline_stage(", 1)[0]
    assert mma.index("acc = _dot(a1, b1, acc)") < mma.index("acc = _dot(a2, b2, acc)")
    report = check_source(result.text)
    assert report.cases and report.findings == [], report.findings
    # the checker counts each MMA of the chain: the second dot fed the first's tiles again is found
    broken = result.text.replace("acc = _dot(a2, b2, acc)", "acc = _dot(a1, b1, acc)")
    assert any("the same tile again" in f.message or "uses tile" in f.message
               for f in check_source(broken).findings)
    # a second dot that adds to the accumulator apart from the MMA is still refused, with that reason
    added = SPLIT_K.replace("acc = tl.dot(a2, b2, acc=acc)", "acc += tl.dot(a2, b2) * 2.0")
    kept = translate_source(added, "halves.py", get_target(target)).functions[0]
    assert not kept.pipelined and "two dots accumulate into `acc`" in kept.kept_reason


@pytest.mark.slow
def test_two_dots_into_one_accumulator_compile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = translate_source(SPLIT_K, "halves.py", get_target("gfx950"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "BM": 128, "BN": 128, "BK": 64}
    compiled = verify(dataclasses.replace(result), values, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]



GATHER_THEN_MASK = HEAD + '''@triton.jit
def gather_mm(a_ptr, b_ptr, idx_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        rows = tl.load(idx_ptr + k * BK + offs_k, mask=k * BK + offs_k < K, other=0)
        a = tl.load(a_ptr + offs_m[:, None] * K + (k * BK + offs_k)[None, :])
        b = tl.load(b_ptr + rows[:, None] * BN + offs_n[None, :])
        acc = tl.dot(a, b, acc)
        mask = k * BK < K
        acc = tl.where(mask, acc, 0.0)
    tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc.to(tl.float16))
'''


def test_a_keyword_argument_is_not_a_read_of_the_name_it_spells() -> None:
    # `mask=` of the row-index load in the producer slice names no variable: the consumer's own `mask = ...` (aiter's
    # paged MQA-logits kernels) is not producer state carried into the next iteration (its pipelined copy read
    # `mask` before the kernel defined it, and the kernel was kept as Triton)
    text = canonicalize_text(GATHER_THEN_MASK, "x.py")
    sp = stage_plan(text)
    assert isinstance(sp, StagePlan) and sp.loop.carried == [], sp
    result = translate_source(GATHER_THEN_MASK, "x.py", get_target("gfx950"), gluon_always=True)
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    assert "mask_next" not in result.text


# A decode kernel's dequantised KV cache (aiter's paged-attention style): K and V are computed from their loaded tiles
# (`k = k_0.to(tl.float32) * k_scale if k_0.dtype.is_fp8() else k_0`), and the scores' dot reads K transposed.
DEQUANT_KV = HEAD + '''@triton.jit
def attn(q_ptr, k_ptr, v_ptr, o_ptr, N_CTX, k_scale, v_scale, compute_type: tl.constexpr, BLOCK_M: tl.constexpr,
         BLOCK_N: tl.constexpr, D: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + offs_m[:, None] * D + offs_d[None, :]).to(compute_type)
    m_i = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    for start_n in range(0, N_CTX, BLOCK_N):
        offs_kv = start_n + offs_n
        k_0 = tl.load(k_ptr + offs_kv[:, None] * D + offs_d[None, :], mask=offs_kv[:, None] < N_CTX, other=0.0)
        KEYS
        qk = tl.dot(q, k.T)
        qk = tl.where(offs_kv[None, :] < N_CTX, qk, -float("inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp2(qk - m_ij[:, None])
        alpha = tl.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        v_0 = tl.load(v_ptr + offs_kv[:, None] * D + offs_d[None, :], mask=offs_kv[:, None] < N_CTX, other=0.0)
        v = v_0.to(tl.float32) * v_scale if v_0.dtype.is_fp8() else v_0
        v = v.to(compute_type)
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_ij
    tl.store(o_ptr + offs_m[:, None] * D + offs_d[None, :], (acc / l_i[:, None]).to(tl.float16))
'''
DEQUANT_K = "k = k_0.to(tl.float32) * k_scale if k_0.dtype.is_fp8() else k_0\n        k = k.to(compute_type)"


def test_attention_keys_and_values_computed_from_their_tiles_are_pipelined() -> None:
    # each ring holds its tile as loaded; V's computation runs in the MMA operand's layout (an operand anchor), K's on
    # the slot read transposed, straight in the B operand's layout, where the dot then takes `k` as it is
    text = DEQUANT_KV.replace("KEYS", DEQUANT_K)
    sp = stage_plan(text, "async_copy", 160 * 1024, anchored=True)
    assert isinstance(sp, StagePlan) and sp.loop.attention, sp
    k, v = sp.loop.loads
    assert (k.name, k.transposed, k.computed, k.computed_as) == ("k_0", True, True, "k")
    assert (v.name, v.transposed, v.computed, v.computed_as) == ("v_0", False, True, "")
    assert [r.shape for r in sp.rings] == [["BLOCK_N", "D"], ["BLOCK_N", "D"]]
    result = translate_source(text, "x.py", get_target("gfx950"))
    assert [f.pipelined for f in result.functions if f.name == "attn"] == [True]
    variant = result.text
    assert "k_0_t = async_copy.load_shared_relaxed(k_0_ring.index(0).permute([1, 0]), gl.DotOperandLayout(1," \
        in variant
    assert "k = k_0_t.to(gl.float32) * k_scale if k_0_t.dtype.is_fp8() else k_0_t" in variant
    assert variant.count("qk = _dot(q_op, k, ") == 2  # (the steady state's and the last iterations')
    report = check_source(result.text)
    assert report.cases and report.findings == [], report.findings[:3]


@pytest.mark.parametrize(("keys", "reason"), [
    ("k = (k_0 * k_scale).to(compute_type) + k_0[:1, :]", "is not elementwise"),
    ("k = (k_0 * offs_d[None, :]).to(compute_type)", "is not elementwise"),
    ("k = (k_0 * kv_bias).to(compute_type)", "it reads the tensor `kv_bias`"),
])
def test_keys_computed_otherwise_than_elementwise_are_refused(keys: str, reason: str) -> None:
    text = DEQUANT_KV.replace("KEYS", keys).replace(  # (a loop-invariant tile for the computation to read)
        "    for start_n", "    kv_bias = tl.load(k_ptr + offs_n[:, None] * D + offs_d[None, :])\n    for start_n")
    sp = stage_plan(text, "async_copy", 160 * 1024, anchored=True)
    assert isinstance(sp, StageRefusal) and "the dot reads `k` transposed, computed from the tile `k_0`" in sp.reason \
        and reason in sp.reason, sp


def test_keys_computed_with_a_value_the_loop_assigns_are_refused() -> None:
    # (a computed K or V may be computed a stage early, for the next iteration: from its tile and values from before
    # the loop only; here a value the loop carries and updates)
    text = DEQUANT_KV.replace("KEYS", "k = (k_0 * alpha_k).to(compute_type)").replace(
        "    for start_n", "    alpha_k = tl.zeros([BLOCK_N, D], dtype=tl.float32)\n    for start_n").replace(
        "        m_i = m_ij\n", "        m_i = m_ij\n        alpha_k = alpha_k + l_i[0]\n")
    source, refusal = attention_plan(text)
    assert "the tile `k_0` is computed with `alpha_k`, which the loop assigns" in refusal.reason, refusal
    assert source.position(refusal.node)[0] == line_of(text, "k = (k_0 * alpha_k)")


@pytest.mark.slow
def test_attention_with_a_dequantised_kv_cache_compiles_and_is_lighter_than_its_source() -> None:
    from transpile.verify import isa_compare

    result = translate_source(DEQUANT_KV.replace("KEYS", DEQUANT_K), "x.py", get_target("gfx950"))
    values = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "o_ptr": "*fp16", "N_CTX": "i32",
              "k_scale": "fp32", "v_scale": "fp32", "compute_type": "tl.bfloat16", "BLOCK_M": 128, "BLOCK_N": 64,
              "D": 128, "num_warps": 8}
    (comparison,) = isa_compare(dataclasses.replace(result), values, all_configs=False)
    assert comparison.status == "pipelined" and comparison.variant is not None, comparison.message
    assert comparison.variant.spills == 0 and comparison.ratio is not None and comparison.ratio <= 0.8, \
        (comparison.ratio, comparison.variant)


def test_key_offsets_from_a_block_index_the_iteration_computes_are_converted_before_the_loop() -> None:
    # aiter's paged decode: `kv_blk_idx = kv_blk_start + b`, `blk_seq_offs = kv_blk_idx * KV_BLK_SZ + blk_offs`, read
    # by the scores' mask in the MMA layout: the offsets are converted once, before the loop, and the sum is made of
    # the iteration's block index where the mask reads it
    text = ATTENTION.replace("COLUMNS", "pass").replace(
        "for start_n in range(0, N_CTX, BLOCK_N):", "first = tl.program_id(1) * 4\n    for start_n in range(0, 4):").replace(
        "offs_kv = start_n + offs_n", "blk = first + start_n\n        offs_kv = blk * BLOCK_N + offs_n")
    result = translate_source(text, "x.py", get_target("gfx950"))
    assert [f.pipelined for f in result.functions if f.name == "attn"] == [True]
    assert "offs_n_cvt = gl.convert_layout(offs_n, gl.SliceLayout(0, mma_layout))" in result.text
    assert "(blk * BLOCK_N + offs_n_cvt)[None, :] < N_CTX" in result.text


def test_a_block_index_carried_from_the_last_iteration_is_not_read_as_this_one_s() -> None:
    # `blk` read by the offsets before the iteration binds it holds the last iteration's: no sum of this iteration's
    text = ATTENTION.replace("COLUMNS", "blk = first + start_n + 1").replace(
        "for start_n in range(0, N_CTX, BLOCK_N):", "first = tl.program_id(1) * 4\n    blk = first\n"
        "    for start_n in range(0, 4):").replace("offs_kv = start_n + offs_n", "offs_kv = blk * BLOCK_N + offs_n")
    result = translate_source(text, "x.py", get_target("gfx950"))
    assert "(blk * BLOCK_N + offs_n_cvt)" not in result.text


def test_an_alibi_bias_of_the_key_offsets_is_made_from_offsets_converted_before_the_loop() -> None:
    # an ALiBi bias reads the key distance in the scores' layout, `(offs_kv - N_CTX + 1)[None, :]`: the offsets are
    # converted once before the loop (shared with the mask's), the distance made of them where the bias reads it
    text = ATTENTION.replace("COLUMNS", "pass").replace(
        "m_ij = tl.maximum(m_i, tl.max(qk, axis=1))",
        "qk += (slope[:, None] * (offs_kv - N_CTX + 1)[None, :]).to(tl.float32)\n"
        "        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))").replace(
        "    for start_n in", "    slope = tl.load(q_ptr + offs_m).to(tl.float32)\n    for start_n in")
    result = translate_source(text, "x.py", get_target("gfx950"))
    assert [f.pipelined for f in result.functions if f.name == "attn"] == [True]
    kernel = result.text[result.text.index("def attn("):]
    kernel = kernel[:kernel.index("\n@")] if "\n@" in kernel else kernel
    assert kernel.count("gl.convert_layout(offs_n, ") == 1
    assert "((start_n + offs_n_cvt) - N_CTX + 1))[None, :]" in kernel  # (written as the mask's sum is)
    report = check_source(result.text)
    assert report.cases and report.findings == [], report.findings[:3]


def test_a_loop_counted_in_64_bits_is_pipelined_counting_its_iterations_in_32() -> None:
    # lightllm's decoding (`sm_id = tl.program_id(0).to(tl.int64)`), FLA's varlen kernels (`bos = tl.load(cu_seqlens
    # + i_n).to(tl.int64)`): the bounds are 64-bit, so is the source's loop variable. The pipelined loop counts its
    # iterations and indexes its slots in 32 bits, and makes the loop variable from the iteration in 64, as the source
    # has it (an int32 value carried into a name the loop then assigns in 64 bits does not compile)
    text = ATTENTION.replace("COLUMNS", "pass").replace(
        "for start_n in range(0, N_CTX, BLOCK_N):",
        "first = tl.program_id(1).to(tl.int64)\n    count = first * 0 + tl.cdiv(N_CTX, BLOCK_N)\n"
        "    for start_n in range(0, count):").replace(
        "offs_kv = start_n + offs_n", "offs_kv = start_n * BLOCK_N + offs_n")
    sp = stage_plan(text, "async_copy")
    assert isinstance(sp, StagePlan) and sp.wide
    result = translate_source(text, "x.py", get_target("gfx950"))
    assert [f.pipelined for f in result.functions if f.name == "attn"] == [True]
    kernel = result.text[result.text.index("def attn("):]
    assert "num_iters = gl.cast(count, gl.int32)" in kernel
    assert "start_n = gl.cast(it, gl.int64)" in kernel and "start_n_next = gl.cast(" in kernel
    assert_holds_and_compiles(result, {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "o_ptr": "*fp16",
                                       "N_CTX": "i32", "BLOCK_M": 128, "BLOCK_N": 64, "D": 64})


def test_an_operand_computed_from_two_tiles_has_a_ring_for_each() -> None:
    """`xg = (x * tl.exp(g)).to(x.dtype)`: A computed from two tiles of one shape loaded side by side. Each has a ring,
    both slots are read in the layout the computation runs in (A's operand layout), and the computation stays in the
    consumer. gfx1250 keeps it as Triton with its computed-operand measurement; sm90 names the tile."""
    text = _fixture("gated_operand_gemm")
    result = translate_source(text, "fixtures/gated_operand_gemm.py", get_target("gfx950"))
    (kernel,) = [f for f in result.functions if f.name == "gated_matmul_kernel"]
    assert kernel.pipelined
    flat = re.sub(r"\s+", "", result.text)
    for ring in ("x_ring", "g_ring", "w_ring"):
        assert f"{ring}=gl.allocate_shared_memory(" in flat
    assert "x=async_copy.load_shared_relaxed(x_ring.index((step+1)%NUM_STAGES),x_layout)" in flat
    assert "g=async_copy.load_shared_relaxed(g_ring.index((step+1)%NUM_STAGES),x_layout)" in flat
    steady = flat.split("forround_inrange(num_rounds):", 1)[1].split("#Thelastiterations", 1)[0]
    assert "gl.convert_layout" not in steady
    assert translate_source(text, "fixtures/gated_operand_gemm.py", get_target("gfx942")).functions[0].pipelined
    # (gfx1250: a computed A at any rows, the warps along M where 128 rows allow)
    gfx1250 = translate_source(text, "fixtures/gated_operand_gemm.py", get_target("gfx1250"))
    assert gfx1250.functions[0].pipelined and "computed_operand=0" in _layout_call(gfx1250.text)
    sm90 = translate_source(text, "fixtures/gated_operand_gemm.py", get_target("sm90")).functions[0]
    assert not sm90.pipelined and "computed from several tiles loaded in the loop (`g` among them)" in sm90.kept_reason
    # (and in the in-order form of a product made afresh each iteration)
    fresh = text.replace("acc = tl.dot(xg, w, acc)", "s = tl.dot(xg, w)\n        acc += s * 0.5")
    sm90 = translate_source(fresh, "fixtures/gated_operand_gemm.py", get_target("sm90")).functions[0]
    assert not sm90.pipelined and "(`g` among them)" in sm90.kept_reason
    # tiles of different shapes (a vector broadcast along K, `x * s[None, :]` loaded as [1, BLOCK_K]) stay refused
    vector = text.replace("g_ptrs = g_ptr + offs_m[:, None] * stride_gm + offs_k[None, :]",
                          "g_ptrs = g_ptr + offs_k[None, :]").replace(
        "g = tl.load(g_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)",
        "g = tl.load(g_ptrs, mask=offs_k[None, :] < k_left, other=0.0)")
    assert vector != text
    sp = stage_plan(vector, "async_copy", 160 * 1024)
    assert isinstance(sp, StageRefusal) and "computed from 2 tiles loaded in the loop (`x`, `g`)" in sp.reason
    assert "tiles of one shape" in sp.reason


def test_a_tile_cast_where_it_is_loaded_is_a_computed_tile_with_a_ring() -> None:
    """FLA's gated kernels load the gate cast where it is loaded, `b_g = tl.load(p_g, ...).to(tl.float32)`, and compute
    the operand from it: the load and the cast are split (`passes/operand_names.py`, as for an operand cast where it is
    loaded), so the ring holds the tile as loaded and the cast runs with the computation, in the operand's layout (no
    conversion in the steady state, both warp groups). Cast at the slot read instead, the fp32 gate was held across the
    stage boundary (56 VGPR spills at 128x128x64 on gfx950). A B operand cast where it is loaded is split likewise."""
    text = _fixture("gated_operand_gemm").replace(
        "g = tl.load(g_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)",
        "g = tl.load(g_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0).to(tl.float32)"
    ).replace("xg = (x * tl.exp(g.to(tl.float32))).to(x.dtype)", "xg = (x * tl.exp(g)).to(x.dtype)")
    assert ".to(tl.float32)\n" in text
    values = {"x_ptr": "*fp16", "g_ptr": "*fp16", "w_ptr": "*fp16", "out_ptr": "*fp16", "M": "i32", "N": "i32",
              "K": "i32", "stride_xm": "i32", "stride_gm": "i32", "stride_wk": "i32", "stride_om": "i32"}
    for form in (text, text.replace("w = tl.load(w_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), "
                                    "other=0.0)", "w = tl.load(w_ptrs, mask=(offs_k[:, None] < k_left) & "
                                    "(offs_n[None, :] < N), other=0.0).to(x.dtype)")):
        result = translate_source(form, "fixtures/gated_operand_gemm.py", get_target("gfx950"))
        (kernel,) = [f for f in result.functions if f.name == "gated_matmul_kernel"]
        assert kernel.pipelined, kernel.kept_reason
        flat = re.sub(r"\s+", "", result.text)
        assert "g_tile=async_copy.load_shared_relaxed(g_tile_ring.index((step+1)%NUM_STAGES),x_layout)" in flat
        steady = flat.split("forround_inrange(num_rounds):", 1)[1].split("#Thelastiterations", 1)[0]
        assert "g=g_tile.to(gl.float32)" in steady and "gl.convert_layout" not in steady
        assert "gl.warp_pipeline_stage(\"mem\"" in steady.replace("gl.amd.", "gl.")
        assert_holds_and_compiles(result, values)
    assert "w=w_tile.to(x.dtype)" in steady


STEPPED_GATE = HEAD + (
    '@triton.jit\n'
    'def gated_out(scale, q, z, h, o, T, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,\n'
    '              BV: tl.constexpr):\n'
    '    i_v, i_t = tl.program_id(0), tl.program_id(1)\n'
    '    o_t = i_t * BT + tl.arange(0, BT)\n'
    '    o_v = i_v * BV + tl.arange(0, BV)\n'
    '    m_t = o_t < T\n'
    '    b_o = tl.zeros([BT, BV], dtype=tl.float32)\n'
    '    for i_k in range(tl.cdiv(K, BK)):\n'
    '        o_k = i_k * BK + tl.arange(0, BK)\n'
    '        m_tk = m_t[:, None] & (o_k[None, :] < K)\n'
    '        b_q = tl.load(q + o_t[:, None] * K + o_k[None, :], mask=m_tk, other=0.0)\n'
    '        b_q = (b_q * scale).to(b_q.dtype)\n'
    '        b_z = tl.load(z + o_t[:, None] * K + o_k[None, :], mask=m_tk, other=0.0)\n'
    '        b_q = (b_q * tl.exp(-b_z)).to(b_q.dtype)\n'
    '        b_h = tl.load(h + o_k[:, None] * V + o_v[None, :], mask=(o_k[:, None] < K) & (o_v[None, :] < V), '
    'other=0.0)\n'
    '        b_o += tl.dot(b_q, b_h)\n'
    '    tl.store(o + o_t[:, None] * V + o_v[None, :], b_o.to(o.dtype.element_ty), mask=m_t[:, None] & '
    '(o_v[None, :] < V))\n'
)


def test_an_operand_computed_in_steps_from_two_tiles_is_one_layout_class() -> None:
    """FLA's `chunk_abc_fwd_kernel_V` style: `b_q` scaled, then multiplied by `exp(-b_z)`, `b_z` another tile loaded
    after the first step. Each tile an operand is computed from had a layout class of its own until the dot, and two
    such classes never met (a conversion between them): the loop was kept ("not laid out in the MMA operand's
    layout"). They are one class per operand now (`anchor_term`, by the dot and the position): both slots are read in
    A's layout and no conversion runs in the `mma` stage. gfx950 (`transpile verify F -t gfx950 --isa`, bf16 q and h,
    fp32 z, 8 warps): 0.90x Triton's own non-MFMA instructions per loop iteration at 128 x 64 x 64, 0.93x at
    128 x 128 x 64, but 2.11-2.76x at 64 rows (4 warps along M compute each A element twice, where Triton computes it
    once in a blocked layout): launches under 128 rows run the source kernel (`COMPUTED_AXIS_LAUNCHES`)."""
    result = translate_source(STEPPED_GATE, "gated_out.py", get_target("gfx950"))
    fn = result.functions[0]
    assert fn.pipelined, fn.kept_reason
    assert {load.name for load in fn.schedules[0].loop.loads if load.computed} == {"b_q", "b_z"}
    flat = re.sub(r"\s+", "", result.text)
    assert "b_q=async_copy.load_shared_relaxed(b_q_ring.index(0),b_q_layout)" in flat
    assert "b_z=async_copy.load_shared_relaxed(b_z_ring.index(0),b_q_layout)" in flat
    assert not any("gl.convert_layout" in stage for stage in _mma_stages(result.text))
    assert "lambdaBT:BT<128," in flat  # (the launcher: fewer rows run the source kernel)
    assert_holds_and_compiles(result, {"scale": "fp32", "q": "*bf16", "z": "*fp32", "h": "*bf16", "o": "*bf16",
                                       "T": "i32", "K": 512, "V": 128, "BT": 128, "BK": 64, "BV": 64})


def test_a_gate_cast_where_it_is_loaded_and_applied_in_place_is_split_from_its_load() -> None:
    """FLA's WY kernels (`recompute_w_u_fwd_gdn2_kernel`): `b_gk = tl.load(...).to(tl.float32)` applied in place,
    `b_kb *= exp2(b_gk)`, and the operand cast in the dot, `tl.dot(b_A, b_kb.to(b_k.dtype))`. The pass that splits a
    load from its cast traced operands by name and through plain assignments only, so the gate's load stayed a cast
    load and the loop was kept (a conversion of its mask). It reads the names of an operand written as an expression
    and updates in place now: `b_gk_tile` has a ring, cast where its slot is read. gfx950, 64 x 64 x 64 / 64 x 64 x
    128 (BT x BT times BT x BK, bf16, 8 warps): 0.99x / 0.59x Triton's own non-MFMA instructions per loop iteration."""
    text = HEAD + (
        '@triton.jit\n'
        'def wy_w(k, b, gk, A, w, T, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr):\n'
        '    i_t = tl.program_id(0)\n'
        '    o_t = i_t * BT + tl.arange(0, BT)\n'
        '    m_t = o_t < T\n'
        '    b_A = tl.load(A + o_t[:, None] * BT + tl.arange(0, BT)[None, :], mask=m_t[:, None], other=0.0)\n'
        '    for i_k in range(tl.cdiv(K, BK)):\n'
        '        o_k = i_k * BK + tl.arange(0, BK)\n'
        '        m_kk = m_t[:, None] & (o_k[None, :] < K)\n'
        '        b_k = tl.load(k + o_t[:, None] * K + o_k[None, :], mask=m_kk, other=0.0)\n'
        '        b_b = tl.load(b + o_t[:, None] * K + o_k[None, :], mask=m_kk, other=0.0)\n'
        '        b_kb = b_k * b_b\n'
        '        b_gk = tl.load(gk + o_t[:, None] * K + o_k[None, :], mask=m_kk, other=0.0).to(tl.float32)\n'
        '        b_kb *= tl.exp2(b_gk)\n'
        '        b_w = tl.dot(b_A, b_kb.to(b_k.dtype))\n'
        '        tl.store(w + o_t[:, None] * K + o_k[None, :], b_w.to(w.dtype.element_ty), mask=m_kk)\n'
    )
    result = translate_source(text, "wy.py", get_target("gfx950"))
    fn = result.functions[0]
    assert fn.pipelined, fn.kept_reason
    assert {load.name for load in fn.schedules[0].loop.loads if load.computed} == {"b_k", "b_b", "b_gk_tile"}
    flat = re.sub(r"\s+", "", result.text)
    assert "b_gk=b_gk_tile.to(gl.float32)" in flat
    assert not any("gl.convert_layout" in stage for stage in _mma_stages(result.text))
    assert_holds_and_compiles(result, {"k": "*bf16", "b": "*bf16", "gk": "*fp32", "A": "*bf16", "w": "*bf16",
                                       "T": "i32", "K": 512, "BT": 64, "BK": 128})


SHORT_K = '''import triton
import triton.language as tl


@triton.jit
def short_k(q, h, o, stride_q, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
            BV: tl.constexpr):
    pid = tl.program_id(0)
    o_t = pid * BT + tl.arange(0, BT)
    o_v = tl.arange(0, BV)
    acc = tl.zeros([BT, BV], dtype=tl.float32)
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        b_q = tl.load(q + o_t[:, None] * stride_q + o_k[None, :])
        b_h = tl.load(h + o_k[:, None] * V + o_v[None, :])
        acc += tl.dot(b_q, b_h)
    tl.store(o + o_t[:, None] * V + o_v[None, :], acc.to(tl.float16))
'''


@pytest.mark.parametrize("target", ["gfx950", "gfx942"])
def test_launches_of_a_few_iterations_known_at_compile_time_run_the_source(target: str) -> None:
    """A loop whose trip count reads constexprs alone (a head dimension's blocks, `range(tl.cdiv(K, BK))`): the
    launches where it runs no more iterations than the ring has slots run the source kernel, which Triton unrolls
    (the ring would only copy every iteration in its prologue, measured with more LDS and VGPRs, fewer waves)."""
    from transpile.rules.base import source_when_holds

    out = translate_source(SHORT_K, "short.py", get_target(target))
    (fn,) = out.functions
    assert fn.pipelined
    tests = [t for t in fn.dispatch.source_when if "BK - 1" in t[0]]
    assert [t[0] for t in tests] == ["((K + BK - 1) // BK) <= 3"]
    assert source_when_holds(*tests[0], {"K": 128, "BK": 64})
    assert source_when_holds(*tests[0], {"K": 192, "BK": 64})
    assert not source_when_holds(*tests[0], {"K": 512, "BK": 64})
    # a trip count the launch gives at run time is the ring's to take
    runtime = SHORT_K.replace("K: tl.constexpr, V", "K, V")
    (fn,) = translate_source(runtime, "short.py", get_target(target)).functions
    assert fn.pipelined and not [t for t in fn.dispatch.source_when if "BK - 1" in t[0]]


def test_a_tile_masked_by_its_columns_against_its_rows_is_not_copied_direct_to_lds() -> None:
    # a causal mask inside a chunk, in the load (`(k * BK + offs_k)[None, :] <= offs_m[:, None]`): it changes value
    # inside a row where no bound proves it true, and a direct-to-LDS copy of 16 bytes takes one mask value a vector
    # (Triton refused to lower such a copy); the copies go through registers, and the reason names the mask
    text = gemm().replace("a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)",
                          "a = tl.load(a_ptrs, mask=(k * BK + offs_k)[None, :] <= offs_m[:, None], other=0.0)")
    sp = stage_plan(text, engine="async_copy")
    assert isinstance(sp, StagePlan) and sp.engine == "registers", sp
    assert "is masked by `(k * BK + offs_k)[None, :] <= offs_m[:, None]`, which compares its columns with its rows" \
        in sp.staged, sp.staged
    plain = stage_plan(gemm(), engine="async_copy")
    assert isinstance(plain, StagePlan) and plain.engine == "async_copy", plain


@pytest.mark.parametrize("bound", ["(start_n + offs_n) < N_CTX", "offs_n < N_CTX - start_n"])
def test_a_key_mask_of_offsets_from_before_the_loop_is_made_before_it(bound: str) -> None:
    # `mask_n = (start_n + offs_n) < N_CTX` (aiter's extend attention, the loop variable rebound to a hint of itself)
    # or `offs_n < N_CTX - start_n`, read by the copies and by the scores: its conversion into the scores' layout is
    # made once, of `offs_n`, before the loop; the warp pipeline keeps both groups (no barrier in `mma`)
    text = ATTENTION.replace("COLUMNS", "pass").replace(
        "        offs_kv = start_n + offs_n\n",
        f"        start_n = tl.multiple_of(start_n, BLOCK_N)\n        offs_kv = start_n + offs_n\n"
        f"        mask_n = {bound}\n").replace(
        "qk = tl.where(offs_kv[None, :] < N_CTX, qk, -float(\"inf\"))",
        "qk = tl.where(mask_n[None, :], qk, -float(\"inf\"))").replace(
        "mask=offs_kv[:, None] < N_CTX", "mask=mask_n[:, None]")
    sp = stage_plan(text)
    assert isinstance(sp, StagePlan) and sp.groups == 2 and not sp.barrier_op, sp
    result = translate_source(text, "x.py", get_target("gfx950"))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    variant = " ".join(result.text.split())
    assert "offs_n_cvt = gl.convert_layout(offs_n, gl.SliceLayout(0, mma_layout))" in variant, variant
    assert f"gl.where(({bound.replace('offs_n', 'offs_n_cvt')})[None, :], qk" in variant, variant


FLA_BLOCKS = HEAD + '''@triton.jit
def intra(a_ptr, b_ptr, o_ptr, T, BC: tl.constexpr, BV: tl.constexpr):
    i_v, i_c = tl.program_id(0), tl.program_id(1).to(tl.int64)
    o_r = i_c * BC + tl.arange(0, BC)
    o_v = i_v * BV + tl.arange(0, BV)
    acc = tl.zeros([BC, BV], dtype=tl.float32)
    for i_j in range(0, i_c):
        o_j = i_j * BC + tl.arange(0, BC)
        a = tl.load(a_ptr + o_r[:, None] * T + o_j[None, :], mask=(o_r[:, None] < T) & (o_j[None, :] < T), other=0.0)
        b = tl.load(b_ptr + o_j[:, None] * BV + o_v[None, :], mask=o_j[:, None] < T, other=0.0)
        acc += tl.dot(a, b)
    tl.store(o_ptr + o_r[:, None] * BV + o_v[None, :], acc.to(o_ptr.dtype.element_ty), mask=o_r[:, None] < T)
'''


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_small_blocks_addressed_in_64_bits_are_copied_with_32_bit_offsets(target: str) -> None:
    """FLA's intra-chunk kernels: 16 x 16 blocks, addressed from a program id cast to 64 bits in a tuple assignment
    (`i_v, i_c = tl.program_id(0), tl.program_id(1).to(tl.int64)`). The buffer copies' offsets, made from it, are
    cast to 32 bits (the launcher runs the kernel only on tensors under 2 GB), and a tile of fewer 16-byte vectors
    than a warp has lanes is copied 4 bytes a lane, so that no two lanes of a warp write one slot row."""
    result = translate_source(FLA_BLOCKS, "x.py", get_target(target))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    assert ".to(gl.int32)" in result.text.split("def intra(", 1)[1]
    compiled = verify(result, {"a_ptr": "*bf16", "b_ptr": "*bf16", "o_ptr": "*bf16", "T": "i32", "BC": 16, "BV": 64},
                      all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


@pytest.mark.parametrize("target", ["gfx942", "gfx950", "gfx1250"])
@pytest.mark.parametrize("guard", ["k % 3 != 1", "k != 0"])
def test_a_dot_accumulated_under_a_scalar_test_is_pipelined_guarded(target: str, guard: str) -> None:
    """FLA's `if i_s >= 0: b_o += tl.dot(b_s, b_v)`: the one accumulation under a test of scalars stays under its test
    in the stage that runs the MMA; the tiles are copied and read for every iteration, the MMA runs where the test
    holds. The schedule holds for iterations that skip it (the stage barriers are met all the same: `schedule_check`)
    and the variant compiles. (Measured, 128x128x64 bf16, `--isa`: 0.78x, 0.75x, 0.66x the source's non-MFMA
    instructions per iteration on gfx942, gfx950, gfx1250.)"""
    text = gemm("pass", stages=2).replace("        acc = tl.dot(a, b, acc)\n",
                                           f"        if {guard}:\n            acc += tl.dot(a, b)\n")
    sp = stage_plan(text)
    assert isinstance(sp, StagePlan) and [c.guarded for c in sp.loop.chains] == [True]
    result = translate_source(text, "x.py", get_target(target))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    mma = result.text.split('warp_pipeline_stage("mma", priority=0):', 1)[1].split("warp_pipeline_stage", 1)[0]
    assert f"if {guard}:\n" in mma and "acc = _dot" in mma.split(f"if {guard}:\n", 1)[1]
    assert_holds_and_compiles(result, {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16", "K": "i32", "BM": 128,
                                       "BN": 128, "BK": 64})


def test_a_dot_under_a_test_of_tensors_or_with_other_statements_is_refused() -> None:
    # (a test that reads a tensor decides per element; a branch of more than the accumulation is not a guard)
    for body in ("        if tl.sum(a) > 0:\n            acc += tl.dot(a, b)\n",
                 "        if k > 0:\n            acc += tl.dot(a, b)\n            acc = acc * 2.0\n"):
        text = gemm("pass", stages=2).replace("        acc = tl.dot(a, b, acc)\n", body)
        sp = stage_plan(text)
        assert isinstance(sp, StageRefusal) and "runs `dot` in a branch" in sp.reason, sp


TWO_LOOPS_LOCAL_ADDRESSES = HEAD + '''@triton.jit
def two_loops(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        o_k = k * BK + tl.arange(0, BK)
        p_a = a_ptr + offs_m[:, None] * K + o_k[None, :]
        p_b = b_ptr + o_k[:, None] * BN + offs_n[None, :]
        a = tl.load(p_a, mask=o_k[None, :] < K, other=0.0)
        b = tl.load(p_b, mask=o_k[:, None] < K, other=0.0)
        acc += tl.dot(a, b)
    for k in range(0, tl.cdiv(K, BK)):
        o_k = k * BK + tl.arange(0, BK)
        p_a = a_ptr + offs_m[:, None] * K + o_k[None, :]
        p_b = b_ptr + o_k[:, None] * BN + offs_n[None, :]
        a = tl.load(p_a, mask=o_k[None, :] < K, other=0.0)
        b = tl.load(p_b, mask=o_k[:, None] < K, other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc.to(tl.float16))
'''


def test_addresses_each_loop_makes_afresh_are_read_as_that_loop_makes_them() -> None:
    """FLA's kernels of two loops, each making `p_dA` afresh: the name has two definitions in the function, but the
    loop's own (`local_pointer`) traces the tile to its pointer parameter, so its copies go direct to LDS (before:
    "not traced to one pointer parameter", staged through registers)."""
    sp = stage_plan(TWO_LOOPS_LOCAL_ADDRESSES, "async_copy")
    assert isinstance(sp, StagePlan) and sp.engine == "async_copy" and not sp.staged, sp
    result = translate_source(TWO_LOOPS_LOCAL_ADDRESSES, "x.py", get_target("gfx950"))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    assert result.text.count("_to_shared(") >= 8  # (direct-to-LDS copies in both loops: two tiles, prologue and steady)
    assert_holds_and_compiles(result, {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16", "K": "i32", "BM": 128,
                                       "BN": 128, "BK": 64})


def test_a_tile_indexed_along_its_contiguous_axis_through_a_floor_division_is_not_copied_16_bytes() -> None:
    """aiter's block-scaled GEMMs read B's scales at `offs_bsk = (k + offs) // B_SCALE_K_GROUP` along the tile's last
    axis: neighbouring columns share an address, so no lane has 16 contiguous bytes (its direct-to-LDS copy did not
    compile once the loop's own address traced the tile to its parameter): the tile is named, its copies staged."""
    text = TWO_LOOPS_LOCAL_ADDRESSES.replace(
        "        p_b = b_ptr + o_k[:, None] * BN + offs_n[None, :]\n",
        "        o_n = (k * BN + offs_n) // 2\n        p_b = b_ptr + o_k[:, None] * BN + o_n[None, :]\n", 1)
    sp = stage_plan(text, "async_copy")
    assert isinstance(sp, StagePlan) and sp.engine == "registers", sp
    assert "is indexed along its contiguous axis through a floor division (`(k * BN + offs_n) // 2`)" in sp.staged


# Two GEMM loops one after the other, their trip count a constexpr (FLA's kernels make K and V constexprs).
TWO_CONSTANT_LOOPS = textwrap.dedent('''\
    import triton
    import triton.language as tl


    @triton.jit
    def two_gemms(a_ptr, b_ptr, c_ptr, d_ptr, stride_am, stride_bk, stride_cm,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, K: tl.constexpr):
        offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
        offs_n = tl.program_id(1) * BN + tl.arange(0, BN)
        offs_k = tl.arange(0, BK)
        acc = tl.zeros([BM, BN], dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            a = tl.load(a_ptr + offs_m[:, None] * stride_am + (k * BK + offs_k)[None, :])
            b = tl.load(b_ptr + (k * BK + offs_k)[:, None] * stride_bk + offs_n[None, :])
            acc += tl.dot(a, b)
        tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc.to(tl.float16))
        acc2 = tl.zeros([BM, BN], dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            a = tl.load(a_ptr + offs_m[:, None] * stride_am + (k * BK + offs_k)[None, :])
            b = tl.load(b_ptr + (k * BK + offs_k)[:, None] * stride_bk + offs_n[None, :])
            acc2 += tl.dot(a, b)
        tl.store(d_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc2.to(tl.float16))
    ''')


@pytest.mark.parametrize("k", [512, 1024])
def test_two_warp_pipelined_loops_of_one_constant_round_compile(k: int) -> None:
    # At K = 512 each steady state is one round, which the compiler folds into straight-line code: the first loop's
    # last iterations (a loop) then sat between the stage borders of the two, and Triton's warp pipeliner refused the
    # kernel ("loop op cannot appear inside a warp_pipeline_stage region"). The second loop runs such a round in its
    # last iterations instead.
    result = translate_source(TWO_CONSTANT_LOOPS, "two.py", get_target("gfx950"))
    assert result.text.count('warp_pipeline_stage("mma"') == 2
    assert result.text.count("if num_rounds_ == 1:") == 1 and "if num_rounds == 1:" not in result.text
    values = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "d_ptr": "*fp16", "stride_am": "i32",
              "stride_bk": "i32", "stride_cm": "i32", "BM": 128, "BN": 128, "BK": 64, "K": k}
    assert_holds_and_compiles(result, values)


# FLA's chunk_fwd_kernel_o style: keys read transposed from memory ([BK, BT], K contiguous) as the B operand, in a loop
# unswitched on a compile-time flag (each copy binds its own `p_k` and `b_k`).
TRANSPOSED_KEYS_UNSWITCHED = textwrap.dedent('''\
    import triton
    import triton.language as tl


    @triton.jit
    def chunk_o(q, k, h, o, a, T, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                BV: tl.constexpr, STATE_V_FIRST: tl.constexpr):
        i_v, i_t = tl.program_id(0), tl.program_id(1)
        o_t = i_t * BT + tl.arange(0, BT)
        m_t = o_t < T
        o_v = i_v * BV + tl.arange(0, BV)
        b_o = tl.zeros([BT, BV], dtype=tl.float32)
        b_A = tl.zeros([BT, BT], dtype=tl.float32)
        for i_k in range(tl.cdiv(K, BK)):
            o_k = i_k * BK + tl.arange(0, BK)
            m_k = o_k < K
            p_q = q + o_t[:, None] * K + o_k[None, :]
            p_k = k + o_k[:, None] + o_t[None, :] * K
            if STATE_V_FIRST:
                p_h = h + o_v[:, None] * K + o_k[None, :]
                m_h = (o_v[:, None] < V) & m_k[None, :]
            else:
                p_h = h + o_k[:, None] * V + o_v[None, :]
                m_h = m_k[:, None] & (o_v[None, :] < V)
            b_q = tl.load(p_q, mask=m_t[:, None] & m_k[None, :], other=0.0)
            b_k = tl.load(p_k, mask=m_k[:, None] & m_t[None, :], other=0.0)
            b_h = tl.load(p_h, mask=m_h, other=0.0)
            if STATE_V_FIRST:
                b_o += tl.dot(b_q, tl.trans(b_h))
            else:
                b_o += tl.dot(b_q, b_h)
            b_A += tl.dot(b_q, b_k)
        tl.store(o + o_t[:, None] * V + o_v[None, :], b_o.to(tl.float16), mask=m_t[:, None])
        tl.store(a + o_t[:, None] * BT + tl.arange(0, BT)[None, :], b_A.to(tl.float16), mask=m_t[:, None])
    ''')


@pytest.mark.parametrize("state_v_first", [False, True])
def test_keys_read_transposed_in_each_unswitched_copy_are_copied_as_their_transpose(state_v_first: bool) -> None:
    # (each copy of the loop makes its own `p_k` and loads its own `b_k`: counted in that copy, the tile is read as its
    # transpose there, and both copies are pipelined; before, the names bound twice in the function kept the tile
    # as written and the register-staged ring's measurement kept the kernel)
    result = translate_source(TRANSPOSED_KEYS_UNSWITCHED, "chunk_o.py", get_target("gfx950"))
    assert result.text.count('warp_pipeline_stage("mma"') == 2
    # (the copy that reads `b_h` transposed takes names of its own: `b_k_2`)
    assert len(re.findall(r"b_k\w*_ring_?\.index\(0\)\.permute\(\[1, 0\]\)", result.text)) == 2
    values = {"q": "*fp16", "k": "*fp16", "h": "*fp16", "o": "*fp16", "a": "*fp16", "T": "i32", "K": 4096, "V": 64,
              "BT": 64, "BK": 64, "BV": 64, "STATE_V_FIRST": state_v_first}
    assert_holds_and_compiles(result, values)


# FLA's backward style: `b_v` the B operand of one dot, read transposed, and the A operand of another, as loaded.
A_AND_TRANSPOSED_B = textwrap.dedent('''\
    import triton
    import triton.language as tl


    @triton.jit
    def dqk(v, do, h, ds_out, dk_out, T, V, BT: tl.constexpr, BV: tl.constexpr, BK: tl.constexpr):
        o_t = tl.program_id(0) * BT + tl.arange(0, BT)
        m_t = o_t < T
        o_k = tl.arange(0, BK)
        b_ds = tl.zeros([BT, BT], dtype=tl.float32)
        b_dk = tl.zeros([BT, BK], dtype=tl.float32)
        for i_v in range(tl.cdiv(V, BV)):
            o_v = i_v * BV + tl.arange(0, BV)
            m_v = o_v < V
            b_v = tl.load(v + o_t[:, None] * V + o_v[None, :], mask=m_t[:, None] & m_v[None, :], other=0.0)
            b_do = tl.load(do + o_t[:, None] * V + o_v[None, :], mask=m_t[:, None] & m_v[None, :], other=0.0)
            b_h = tl.load(h + o_v[:, None] * BK + o_k[None, :], mask=m_v[:, None], other=0.0)
            b_ds += tl.dot(b_do, tl.trans(b_v))
            b_dk += tl.dot(b_v, b_h)
        tl.store(ds_out + o_t[:, None] * BT + tl.arange(0, BT)[None, :], b_ds.to(tl.float16), mask=m_t[:, None])
        tl.store(dk_out + o_t[:, None] * BK + o_k[None, :], b_dk.to(tl.float16), mask=m_t[:, None])
    ''')


@pytest.mark.parametrize("target", ["gfx950", "gfx1250"])
def test_a_tile_read_as_a_and_transposed_as_b_is_read_in_each_form(target: str) -> None:
    result = translate_source(A_AND_TRANSPOSED_B, "dqk.py", get_target(target))
    assert result.text.count('warp_pipeline_stage("mma"') == 1
    text = "".join(result.text.split())
    # (one ring; its slot read as loaded in the A layout of `b_dk`'s dot and transposed in the B layout of `b_ds`'s)
    assert re.search(r"b_v=[\w.]*\(b_v_ring\.index\(0\),gl\.DotOperandLayout\(0,b_dk\.type\.layout", text) \
        or "b_v=b_v_ring.index(0).load(gl.DotOperandLayout(0,b_dk.type.layout" in text
    assert (re.search(r"b_v_t=[\w.]*\(b_v_ring\.index\(0\)\.permute\(\[1,0\]\),gl\.DotOperandLayout\(1,"
                      r"b_ds\.type\.layout", text)
            or "b_v_t=b_v_ring.index(0).permute([1,0]).load(gl.DotOperandLayout(1,b_ds.type.layout" in text)
    assert "_dot(b_do,b_v_t,b_ds)" in text
    values = {"v": "*fp16", "do": "*fp16", "h": "*fp16", "ds_out": "*fp16", "dk_out": "*fp16", "T": "i32",
              "V": "i32", "BT": 64, "BV": 64, "BK": 64}
    assert_holds_and_compiles(result, values)


def test_a_tile_read_as_loaded_as_both_a_and_b_is_read_in_each_layout() -> None:
    # (`b_v` the B operand of `b_ds += tl.dot(b_do, b_v)` and the A operand of `b_dk += tl.dot(b_v, b_h)`: one ring,
    # its slot read in each operand's layout, `OperandLoad.sides`; it was refused before)
    text = A_AND_TRANSPOSED_B.replace("b_ds += tl.dot(b_do, tl.trans(b_v))", "b_ds += tl.dot(b_do, b_v)").replace(
        "b_ds = tl.zeros([BT, BT]", "b_ds = tl.zeros([BT, BV]").replace("BV: tl.constexpr, BK", "BV: tl.constexpr, BK")
    text = text.replace("b_do = tl.load(do + o_t[:, None] * V + o_v[None, :]",
                        "b_do = tl.load(do + o_t[:, None] * BT + tl.arange(0, BT)[None, :]").replace(
        "tl.store(ds_out + o_t[:, None] * BT + tl.arange(0, BT)[None, :]", "tl.store(ds_out + o_t[:, None] * BV + o_k[None, :]")
    result = translate_source(text, "dqk.py", get_target("gfx950"))
    fn = next(f for f in result.functions if f.name == "dqk")
    assert fn.pipelined, fn.kept_reason
    (v,) = [load for load in fn.schedules[0].loop.loads if load.name == "b_v"]
    assert v.sides
    flat = "".join(result.text.split())
    assert "b_ds=_dot(b_do,b_v,b_ds)" in flat and "b_dk=_dot(b_v_a,b_h,b_dk)" in flat  # (`b_v_a`: its A read)
    assert_holds_and_compiles(result, {"v": "*fp16", "do": "*fp16", "h": "*fp16", "ds_out": "*fp16",
                                       "dk_out": "*fp16", "T": "i32", "V": "i32", "BT": 64, "BV": 64, "BK": 64})


GATED_OUTPUT = '''import triton
import triton.language as tl


@triton.jit
def gated_output(q, g, h, o, stride_q, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                 BV: tl.constexpr, V_FIRST: tl.constexpr):
    pid = tl.program_id(0)
    o_t = pid * BT + tl.arange(0, BT)
    o_v = tl.arange(0, BV)
    acc = tl.zeros([BT, BV], dtype=tl.float32)
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        if V_FIRST:
            p_h = h + o_v[:, None] * K + o_k[None, :]
        else:
            p_h = h + o_k[:, None] * V + o_v[None, :]
        b_q = tl.load(q + o_t[:, None] * stride_q + o_k[None, :])
        b_g = tl.load(g + o_t[:, None] * stride_q + o_k[None, :]).to(tl.float32)
        b_qg = (b_q * tl.exp2(b_g)).to(b_q.dtype)
        b_h = tl.load(p_h)
        if i_k >= 0:
            if V_FIRST:
                acc += tl.dot(b_qg, tl.trans(b_h).to(b_qg.dtype))
            else:
                acc += tl.dot(b_qg, b_h.to(b_qg.dtype))
    tl.store(o + o_t[:, None] * V + o_v[None, :], acc.to(tl.float16))
'''


def _one_copy(text: str, v_first: bool) -> str:
    """`GATED_OUTPUT` written for one value of its flag (what the unswitch pass makes of each copy)."""
    keep, drop = ("p_h = h + o_v[:, None] * K + o_k[None, :]", "p_h = h + o_k[:, None] * V + o_v[None, :]")
    dot = "acc += tl.dot(b_qg, tl.trans(b_h).to(b_qg.dtype))"
    if not v_first:
        keep, drop, dot = drop, keep, "acc += tl.dot(b_qg, b_h.to(b_qg.dtype))"
    text = text.replace(f"        if V_FIRST:\n            {keep if v_first else drop}\n        else:\n"
                        f"            {drop if v_first else keep}\n", f"        {keep}\n")
    return re.sub(r"            if V_FIRST:\n.*\n            else:\n.*\n", f"            {dot}\n", text)


@pytest.mark.parametrize("form", ["inline", "flag"])
def test_a_computed_operand_read_transposed_is_computed_on_its_slot_s_transposed_view(form: str) -> None:
    """FLA's `chunk_gla_fwd_kernel_o` reads its state `tl.trans(b_h).to(T)` where the state is stored V-first: a cast
    of a transposed tile. The operand-names pass writes it `b_h_op = b_h.to(T)`, `tl.trans(b_h_op)`; the GEMM planner
    reads it as a computed tile the dot reads transposed: the ring holds the tile as loaded, the slot is read through a
    transposed view straight in the MMA operand's layout and cast there, with no conversion in the steady state. With
    the flag left in (each value a copy of the loop), the copies' names are their own where one copy reads the state
    transposed and the other as is, so both copies are pipelined."""
    text = _one_copy(GATED_OUTPUT, True) if form == "inline" else GATED_OUTPUT
    text = text.replace("        if i_k >= 0:\n            acc +=", "        acc +=").replace(
        "        if i_k >= 0:\n            if V_FIRST:\n                acc += tl.dot(b_qg, tl.trans(b_h).to(b_qg.dtype))\n"
        "            else:\n                acc +=",
        "        if V_FIRST:\n            acc += tl.dot(b_qg, tl.trans(b_h).to(b_qg.dtype))\n        else:\n            acc +=")
    assert "i_k >= 0" not in text
    values = {"q": "*bf16", "g": "*fp32", "h": "*bf16", "o": "*fp16", "stride_q": "i32", "K": 256, "V": 64, "BT": 64,
              "BK": 64, "BV": 64, "V_FIRST": True}
    result = translate_source(text, "gated.py", get_target("gfx950"))
    (fn,) = result.functions
    assert fn.pipelined, fn.kept_reason
    flat = re.sub(r"\s+", "", result.text)
    steady = flat.split("forround_inrange(num_rounds):", 1)[1].split("#Thelastiterations", 1)[0]
    assert ".permute([1,0])" in steady and "gl.convert_layout" not in steady
    assert re.search(r"b_h\w*_op\d*=b_h\w*_t\.to\(b_qg\w*\.dtype\)", steady)
    assert len(re.findall(r"forround_+inrange\(num_rounds_*\):", flat)) == (2 if form == "flag" else 1)
    assert "gl.warp_pipeline_stage(\"mem\"" in steady.replace("gl.amd.", "gl.")
    assert not [d for d in result.diagnostics if d.code in ("TT040", "TT045")], result.diagnostics
    assert_holds_and_compiles(result, values)
    if form == "flag":
        assert_holds_and_compiles(result, {**values, "V_FIRST": False})
    # on gfx942 and gfx1250 a cast operand's ring is kept, for the measurements they name
    for target, why in (("gfx942", "0.62-1.31x"), ("gfx1250", "1.21-1.82x")):
        (kept,) = translate_source(text, "gated.py", get_target(target)).functions
        assert not kept.pipelined and why in kept.kept_reason


def test_a_computed_operand_of_a_guarded_dot_is_kept_with_its_measurement() -> None:
    """The same loops with the dot under `if i_k >= 0:` (FLA's kernel as written): the operand of a guarded dot is named
    before the guard and the ring is planned (`--gluon-always` emits it pipelined in both copies; it compiles), but
    Triton does not pipeline a loop whose dot sits under an `if`, and its lean loop measured lighter than the ring,
    which computes the operand in the MMA operand's layout: the kernel is kept, with the figures."""
    for target in ("gfx950", "gfx942"):
        (kept,) = translate_source(GATED_OUTPUT, "gated.py", get_target(target)).functions
        assert not kept.pipelined and "Triton's own compile does not software-pipeline" in kept.kept_reason
    result = translate_source(GATED_OUTPUT, "gated.py", get_target("gfx950"), gluon_always=True)
    flat = re.sub(r"\s+", "", result.text)
    assert len(re.findall(r"forround_+inrange\(num_rounds_*\):", flat)) == 2 and "ifi_k>=0:" in flat
    values = {"q": "*bf16", "g": "*fp32", "h": "*bf16", "o": "*fp16", "stride_q": "i32", "K": 256, "V": 64, "BT": 64,
              "BK": 64, "BV": 64}
    for v_first in (True, False):
        assert_holds_and_compiles(result, {**values, "V_FIRST": v_first})


def test_a_transposed_computed_operand_that_is_not_elementwise_is_refused() -> None:
    # a row sum of the state before the dot: not elementwise, so not computed on the transposed view as read
    text = _one_copy(GATED_OUTPUT, True).replace("        if i_k >= 0:\n            acc +=", "        acc +=").replace(
        "acc += tl.dot(b_qg, tl.trans(b_h).to(b_qg.dtype))",
        "b_hs = (b_h - tl.sum(b_h, axis=1)[:, None]).to(b_qg.dtype)\n        acc += tl.dot(b_qg, tl.trans(b_hs))")
    sp = stage_plan(text, "async_copy", 160 * 1024, anchored=True)
    assert isinstance(sp, StageRefusal), sp
    assert "reads `b_hs` transposed, computed from the tile `b_h`" in sp.reason and "elementwise" in sp.reason


GATE_GRADIENT = '''import triton
import triton.language as tl


@triton.jit
def gate_gradient(k, dk, h, dh, gn, dv, dw, dg, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                  BK: tl.constexpr, BV: tl.constexpr):
    o_t = tl.program_id(0) * BT + tl.arange(0, BT)
    o_v = tl.arange(0, BV)
    b_gn = tl.load(gn + o_v)
    b_dv = tl.zeros([BT, BV], dtype=tl.float32)
    b_dw = tl.zeros([BT, BV], dtype=tl.float32)
    b_dg = tl.zeros([BV], dtype=tl.float32)
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        b_k = tl.load(k + o_t[:, None] * K + o_k[None, :])
        b_dk = tl.load(dk + o_t[:, None] * K + o_k[None, :])
        b_h = tl.load(h + o_k[:, None] * V + o_v[None, :])
        b_dh = tl.load(dh + o_k[:, None] * V + o_v[None, :])
        b_dv += tl.dot(b_k, b_dh.to(b_k.dtype))
        b_dw += tl.dot(b_dk.to(b_k.dtype), b_h.to(b_k.dtype))
        b_dg += tl.sum((b_h * b_dh) * tl.exp(b_gn), axis=0)
    tl.store(dv + o_t[:, None] * V + o_v[None, :], b_dv.to(tl.float16))
    tl.store(dw + o_t[:, None] * V + o_v[None, :], b_dw.to(tl.float16))
    tl.store(dg + tl.program_id(0) * V + o_v, b_dg)
'''


def prepared_stage_plan(text: str) -> StagePlan | StageRefusal | None:
    """The first loop's stage plan on gfx950's direct-to-LDS engine, after the passes the engine runs first (operands
    computed inside a dot's arguments named on lines of their own) and with the AMD targets' layouts."""
    from transpile.engine import prepare

    prepared = prepare(text, "x.py")
    source, facts = prepared.source, prepared.facts
    plans = analyse_layouts(facts, operand_anchors=operand_anchors(source, facts, analyse_layouts(facts), 3))
    fn = next(iter(facts.functions.values()))
    loop = next(n for n in fn.node.body.body if isinstance(n, cst.For))
    return plan_stages(source, fn, loop, plans[fn.name], "async_copy", 160 * 1024)


def test_a_sum_along_k_of_b_tiles_stays_inside_each_warp_and_both_groups_run() -> None:
    """FLA's gate gradients, `tl.sum((b_h * b_dh) * exp(b_gn), axis=0)` of two B tiles (the states of two dots): in the
    B operand's layout each warp holds whole columns along K, so the sum is lane shuffles inside a warp, no barrier
    next to the MMA, and both warp groups run the warp pipeline. The two B tiles, of one position, element type and
    MMA layout, share one layout (no conversion between them), and the gate vector broadcast against them is converted
    once, before the loop, to the operand layout's slice. The hot loop writes nothing to LDS itself (its copies go
    direct to LDS): no reduction through shared memory."""
    from transpile.verify import isa_compare

    sp = prepared_stage_plan(GATE_GRADIENT)
    assert isinstance(sp, StagePlan) and sp.groups == 2 and not sp.barrier_op, sp
    result = translate_source(GATE_GRADIENT, "gate.py", get_target("gfx950"))
    (fn,) = result.functions
    assert fn.pipelined, fn.kept_reason
    flat = re.sub(r"\s+", "", result.text)
    steady = flat.split("forround_inrange(num_rounds):", 1)[1].split("#Thelastiterations", 1)[0]
    assert "gl.convert_layout" not in steady and "gl.sum((b_h*b_dh)*" in steady
    assert re.search(r"=gl\.convert_layout\(gl\.exp\(b_gn\),gl\.SliceLayout\(0,b_h_layout\)\)", flat)
    values = {"k": "*fp16", "dk": "*fp16", "h": "*fp16", "dh": "*fp16", "gn": "*fp32", "dv": "*fp16", "dw": "*fp16",
              "dg": "*fp32", "K": 1024, "V": 64, "BT": 64, "BK": 64, "BV": 64}
    assert_holds_and_compiles(result, values)
    (c,) = isa_compare(result, values, all_configs=False)
    assert c.status == "pipelined" and c.variant is not None and c.variant.vgpr_spills == 0
    assert c.variant.loop is not None and c.variant.loop.ds_writes == 0 and c.variant.loop.lds_direct > 0, c.variant


@pytest.mark.parametrize("change, named", [
    # along N: the warps split N in the B operand's layout, so the sum crosses them
    ("tl.sum((b_h * b_dh) * tl.exp(b_gn), axis=0)", "tl.sum((b_h * b_dh) * tl.exp(b_gn)[None, :], axis=1)"),
    # an A tile's K axis against a B tile's: not one layout
    ("tl.sum((b_h * b_dh) * tl.exp(b_gn), axis=0)", "tl.sum(tl.trans(b_k) * b_dh, axis=0)"),
])
def test_a_sum_that_crosses_the_warps_of_a_b_tile_is_named(change: str, named: str) -> None:
    text = GATE_GRADIENT.replace(change, named).replace("b_dg = tl.zeros([BV]", "b_dg = tl.zeros([BT]" if "axis=1"
                                                         in named else "b_dg = tl.zeros([BV]")
    if "axis=1" in named:
        text = text.replace("tl.store(dg + tl.program_id(0) * V + o_v, b_dg)", "tl.store(dg + o_t, b_dg)")
    sp = prepared_stage_plan(text)
    assert isinstance(sp, StagePlan) and sp.groups == 1 and sp.barrier_op, sp


def test_a_sum_along_k_through_an_imported_elementwise_helper(tmp_path: Path) -> None:
    """FLA imports its `exp` (`from fla.ops.utils.op import exp`, a jit helper of elementwise math): the sum along K
    reads `exp(b_gn)` as it reads `tl.exp(b_gn)`, and the helper's call on the loop-invariant vector is converted once
    before the loop; both warp groups run, and the variant compiles with the helper imported."""
    (tmp_path / "op.py").write_text("import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
                                    "def exp(x):\n    return tl.exp(x.to(tl.float32))\n")
    text = GATE_GRADIENT.replace("import triton.language as tl\n", "import triton.language as tl\n\nfrom op import exp\n",
                                 1).replace("tl.exp(b_gn)", "exp(b_gn)")
    path = tmp_path / "gate.py"
    path.write_text(text)
    result = translate_source(text, str(path), get_target("gfx950"))
    (fn,) = result.functions
    assert fn.pipelined, fn.kept_reason
    flat = re.sub(r"\s+", "", result.text)
    steady = flat.split("forround_inrange(num_rounds):", 1)[1].split("#Thelastiterations", 1)[0]
    assert "gl.convert_layout" not in steady and "fromopimportexp" in flat
    assert "=gl.convert_layout(exp(b_gn),gl.SliceLayout(0,b_h_layout))" in flat
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        assert_holds_and_compiles(result, {"k": "*fp16", "dk": "*fp16", "h": "*fp16", "dh": "*fp16", "gn": "*fp32",
                                           "dv": "*fp16", "dw": "*fp16", "dg": "*fp32", "K": 256, "V": 64, "BT": 64,
                                           "BK": 64, "BV": 64})
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("op", None)


# ---------------------------------------------------------------------------------------------------------------------
# Computed operands: the warps along the computed operand's axis

CAST_GEMM = HEAD + '''@triton.jit
def mm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, TRANSPOSE: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(a_ptr + rm[:, None] * stride_am + kk[None, :], mask=kk[None, :] < K, other=0)
        b = tl.load(b_ptr + kk[:, None] * stride_bk + rn[None, :], mask=kk[:, None] < K, other=0)
        if TRANSPOSE:
            a_op = a.to(tl.bfloat16)
            b_op = b
        else:
            a_op = a
            b_op = b.to(tl.bfloat16)
        acc = tl.dot(a_op, b_op, acc)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc.to(tl.bfloat16))
'''


def _layout_call(text: str) -> str:
    """The variant's MMA layout declaration (its call, parentheses balanced), on one line."""
    start = text.index("mma_layout: gl.constexpr = _mma_layout(") + len("mma_layout: gl.constexpr = ")
    depth, end = 0, start
    for end, char in enumerate(text[start:], start):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == ")" and depth == 0:
            break
    return " ".join(text[start:end + 1].split())


@pytest.mark.parametrize("target", ["gfx950", "gfx942", "gfx1250"])
def test_a_computed_operand_lays_the_warps_along_its_axis_per_copy(target: str) -> None:
    """Each copy of the loop (unswitched on `TRANSPOSE`) computes another operand, and its copy names of its own
    (`b_op = b` against `b_op = b.to(T)`) let both be pipelined; the MMA layout lays the warps along the computed
    operand's axis, as the flag picks the copy."""
    result = translate_source(CAST_GEMM, "cast.py", get_target(target))
    (outcome,) = result.functions
    assert outcome.pipelined, outcome.kept_reason
    assert result.text.count("warp_pipeline_stage(\"mma\"") == 2
    assert "computed_operand=(0 if TRANSPOSE else 1)" in _layout_call(result.text)


@pytest.mark.parametrize("target, launch_test, int8", [
    ("gfx950", None, False), ("gfx942", None, False), ("gfx1250", "BN < 128", False)])
def test_what_launches_a_computed_b_operand_runs(target: str, launch_test: str | None, int8: bool) -> None:
    """A B computed from its tile (`b.to(T)`): gfx950 and gfx942 run every launch as Gluon, 8-bit integer codes too
    (measured lighter with the warps along N); gfx1250 only launches with 128 columns or more (every warp along N:
    its split measured heavier at 64)."""
    text = CAST_GEMM.replace("TRANSPOSE: tl.constexpr", "TRANSPOSE: tl.constexpr = False")
    text = text.replace("""        if TRANSPOSE:
            a_op = a.to(tl.bfloat16)
            b_op = b
        else:
            a_op = a
            b_op = b.to(tl.bfloat16)
""", "        a_op = a\n        b_op = b.to(tl.bfloat16)\n")
    result = translate_source(text, "cast.py", get_target(target))
    (outcome,) = result.functions
    assert outcome.pipelined and outcome.dispatch is not None, outcome.kept_reason
    assert "computed_operand=1" in _layout_call(result.text)
    assert ("int8" in outcome.dispatch.slow_dtypes) == int8
    tests = [test for test, _ in outcome.dispatch.source_when]
    assert (launch_test in tests) if launch_test else not any("128" in t for t in tests), tests


def test_a_computed_a_operand_runs_every_launch_on_gfx1250() -> None:
    """A computed A (`a.to(T)`): gfx1250's split already puts most warps along M; every launch runs the Gluon kernel,
    the warps all along M where 128 rows allow."""
    text = CAST_GEMM.replace("""        if TRANSPOSE:
            a_op = a.to(tl.bfloat16)
            b_op = b
        else:
            a_op = a
            b_op = b.to(tl.bfloat16)
""", "        a_op = a.to(tl.bfloat16)\n        b_op = b\n")
    result = translate_source(text, "cast.py", get_target("gfx1250"))
    (outcome,) = result.functions
    assert outcome.pipelined and outcome.dispatch is not None, outcome.kept_reason
    assert "computed_operand=0" in _layout_call(result.text)
    assert not any("128" in test for test, _ in outcome.dispatch.source_when)


GPTQ_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "suite_w4a16_gptq.py"


@pytest.mark.parametrize("target, pipelined", [("gfx942", True), ("gfx950", False), ("gfx1250", False)])
def test_an_operand_unpacked_by_a_vector_along_k_runs_where_every_warp_lies_along_n(target: str,
                                                                                    pipelined: bool) -> None:
    """GPTQ's unpacking (`(qw >> shifter[:, None]) & 0xF`): gfx942 pipelines it for launches with 128 columns or more
    (0.63-0.75x with every warp along N), gfx950 and gfx1250 keep it with their figures."""
    result = translate_source(GPTQ_FIXTURE.read_text(), "fixtures/suite_w4a16_gptq.py", get_target(target))
    (outcome,) = [f for f in result.functions if f.name == "w4a16_gptq_kernel"]
    assert outcome.pipelined == pipelined, outcome.kept_reason
    if pipelined:
        assert any(test == "BLOCK_N < 128" for test, _ in outcome.dispatch.source_when)
    else:
        assert "vector laid along K" in outcome.kept_reason or "computed from a loaded tile" in outcome.kept_reason


@pytest.mark.slow
@pytest.mark.parametrize("target", ["gfx950", "gfx942", "gfx1250"])
def test_computed_operand_layouts_put_every_warp_along_the_axis(target: str, tmp_path: Path) -> None:
    """`_mma_layout(..., computed_operand=)` as the target copies it: every warp along M (A) or N (B) where the tile
    has 16 rows (columns) a warp, the split otherwise; the same instruction depth either way."""
    import importlib.util
    import sys

    from triton.experimental.gluon import language as gl

    tgt = get_target(target)
    names = [n for n in tgt.snippets if tgt.snippets[n].module != "launchers"]
    path = tmp_path / f"helpers_{target}.py"
    path.write_text("\n".join([*tgt.imports, *(tgt.snippet(n) for n in tgt.snippet_order(set(names)))]))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    helpers = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = helpers
    spec.loader.exec_module(helpers)

    def along(layout) -> list[int]:  # noqa: ANN001 - the warps along (M, N)
        if hasattr(layout, "warps_per_cta"):
            return list(layout.warps_per_cta)
        m = 1 << sum(1 for base in layout.warp_bases if base[0])
        return [m, (1 << len(layout.warp_bases)) // m]

    split = along(helpers._mma_layout(128, [128], gl.float16, 8))
    assert split not in ([8, 1], [1, 8])
    assert along(helpers._mma_layout(128, [128], gl.float16, 8, computed_operand=0)) == [8, 1]
    assert along(helpers._mma_layout(128, [128], gl.float16, 8, computed_operand=1)) == [1, 8]
    assert along(helpers._mma_layout(256, [64], gl.float16, 8, computed_operand=0)) == [8, 1]
    # (fewer rows or columns than 16 a warp: the split)
    assert along(helpers._mma_layout(64, [128], gl.float16, 8, computed_operand=0)) == split
    assert along(helpers._mma_layout(128, [64], gl.float16, 8, computed_operand=1)) == split
    assert along(helpers._mma_layout(128, [128], gl.float16, 8, computed_operand=None)) == split
    depth = helpers._mma_layout(128, [128], gl.float16, 8).instr_shape[2]
    ours = helpers._mma_layout(256, [256], gl.float16, 8, computed_operand=1)
    assert ours.instr_shape[2] in (depth, depth * 2)


BRANCHED_STATES = HEAD + '''@triton.jit
def state_dx(b_ptr, s_ptr, out_ptr, dstate, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
             BD: tl.constexpr):
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BD if BD <= 128 else BK)
    b_ptrs = b_ptr + offs_m[:, None] * dstate + offs_k[None, :]
    s_ptrs = s_ptr + offs_k[:, None] * BN + offs_n[None, :]
    if BD <= 128:
        b = tl.load(b_ptrs, mask=offs_k[None, :] < dstate, other=0.0)
        s = tl.load(s_ptrs, mask=offs_k[:, None] < dstate, other=0.0)
        s = s.to(b_ptr.dtype.element_ty)
        acc = tl.dot(b, s)
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, dstate, BK):
            b = tl.load(b_ptrs, mask=offs_k[None, :] < dstate - k, other=0.0)
            s = tl.load(s_ptrs, mask=offs_k[:, None] < dstate - k, other=0.0)
            s = s.to(b_ptr.dtype.element_ty)
            acc += tl.dot(b, s)
            b_ptrs += BK
            s_ptrs += BK * BN
    tl.store(out_ptr + offs_m[:, None] * BN + offs_n[None, :], acc)
'''


@pytest.mark.parametrize("target, by_tile", [("gfx950", ()), ("gfx942", ("s_ptr=float32",)), ("gfx1250", ())])
def test_a_loop_beside_the_branch_that_computes_it_once_is_pipelined(target: str, by_tile: tuple[str, ...]) -> None:
    """mamba's state kernels: the product computed once under `if BD <= 128:`, looped otherwise, with the same names
    and K offsets of a size a compile-time test picks (`tl.arange(0, BD if BD <= 128 else BK)`). The loop's names are
    its own (`passes/reassigned_names.py`) and the size is kept as written, so the loop is pipelined; on gfx942 launches
    whose computed tile is fp32 run the source kernel (that parameter's tensor alone: `"s_ptr=float32"`)."""
    result = translate_source(BRANCHED_STATES, "states.py", get_target(target))
    (outcome,) = result.functions
    assert outcome.pipelined, outcome.kept_reason
    assert "(BD if BD <= 128 else BK)" in result.text
    assert tuple(t for t in outcome.dispatch.slow_dtypes if "=" in t) == by_tile


def test_the_launcher_runs_the_source_kernel_for_one_parameter_of_a_slow_type() -> None:
    """`slow_dtypes` entries "name=type" send to the source kernel the launches where that parameter's tensor has
    that type; other tensors of the type do not."""
    import torch

    from transpile.helpers.launchers import _WarpPipelinedOrTriton

    class Kernel:
        def __init__(self, name: str) -> None:
            self.name = name

    launcher = _WarpPipelinedOrTriton(Kernel("gluon"), Kernel("triton"), ("a_ptr", "s_ptr", "n"), (),
                                      slow_dtypes=("s_ptr=float32",))
    fp32, bf16 = torch.zeros(64, dtype=torch.float32), torch.zeros(64, dtype=torch.bfloat16)
    assert launcher.addressable((bf16, bf16, 64), {}) and launcher.addressable((fp32, bf16, 64), {})
    assert not launcher.addressable((bf16, fp32, 64), {})


@pytest.mark.slow
def test_a_computed_operand_of_a_transposed_tile_is_loaded_in_a_copy_layout_along_its_contiguous_axis() -> None:
    """FLA's keys and gates read as [BK, BT] (`k + o_k[:, None] + o_t[None, :] * K`, contiguous along the first
    axis: no launch copies them 16 bytes a lane) with the dot's A computed from them: the stage plan records them as
    copied through registers along axis 0 (`register_copies`), and the ring (`--gluon-always`) loads them in
    `_transposed_copy_layout` (lanes down the columns) as buffer loads stored into their slots, where the computation
    reads them in the MMA operand's layout; it compiles on every AMD target. By default each target keeps the kernel
    as Triton and says why: that ring measured heavier than Triton's own compile (gfx950, gfx942; gfx1250 on a
    public FLA kernel)."""
    path = Path(__file__).resolve().parents[1] / "fixtures" / "fla_gated_state.py"
    text = path.read_text()
    sp = stage_plan(text, "async_copy", anchored=True)
    assert isinstance(sp, StagePlan) and sp.engine == "registers"
    assert sp.register_copies == {"b_k": 0, "b_g": 0}
    values = {"k": "*bf16", "v": "*bf16", "g": "*fp32", "h": "*fp32", "K": 128, "V": 128, "BT": 64, "BK": 64, "BV": 64}
    for target in ("gfx950", "gfx942", "gfx1250"):
        variant = translate_source(text, str(path), get_target(target), gluon_always=True)
        flat = "".join(variant.text.split())  # (the text before formatting: compared without whitespace)
        assert variant.functions[0].pipelined
        assert "b_k_ring_copy_layout:gl.constexpr=_transposed_copy_layout([BK,BT],k.dtype.element_ty," \
               "gl.num_warps())" in flat
        assert "def _transposed_copy_layout(shape, dtype, num_warps):" in variant.text
        assert "b_k_ring.index(step).store(_buffer_tile_load(b_k_ring," in flat
        assert "b_kg=(b_k*gl.exp(b_g.to(gl.float32))).to(b_k.dtype)" in flat
        assert_holds_and_compiles(variant, values)
        kept = translate_source(text, str(path), get_target(target)).functions[0]
        assert not kept.translated and "computed from a tile no launch copies 16 bytes a lane" in kept.kept_reason
        assert "`b_k` at line 33 is contiguous along its first axis" in kept.kept_reason


# Gated linear attention's parallel form (FLA's `parallel_simple_gla_fwd_kernel`): a gate vector loaded in the
# loop and broadcast against the scores; two loops bind the same index names (`o_k`, `m_k`).
GATED_ATTENTION = HEAD + (
    '@triton.jit\n'
    'def gated_attention(q, k, v, g, o, T, BT: tl.constexpr, BS: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):\n'
    '    i_t = tl.program_id(0)\n'
    '    o_q = i_t * BT + tl.arange(0, BT)\n'
    '    o_kk = tl.arange(0, BK)\n'
    '    o_vv = tl.arange(0, BV)\n'
    '    m_q = o_q < T\n'
    '    b_q = tl.load(q + o_q[:, None] * BK + o_kk[None, :], mask=m_q[:, None], other=0.0)\n'
    '    b_gq = tl.load(g + o_q, mask=m_q, other=0.0).to(tl.float32)\n'
    '    b_o = tl.zeros([BT, BV], dtype=tl.float32)\n'
    '    # keys before the query block\n'
    '    for i_s in range(0, i_t * BT, BS):\n'
    '        o_k = i_s + tl.arange(0, BS)\n'
    '        m_k = o_k < T\n'
    '        b_k = tl.load(k + o_kk[:, None] + o_k[None, :] * BK, mask=m_k[None, :], other=0.0)\n'
    '        b_v = tl.load(v + o_k[:, None] * BV + o_vv[None, :], mask=m_k[:, None], other=0.0)\n'
    '        b_s = tl.dot(b_q, b_k)\n'
    '        b_gk = tl.load(g + o_k, mask=m_k, other=0.0)\n'
    '        b_s *= tl.exp2(b_gq[:, None] - b_gk[None, :])\n'
    '        b_o += tl.dot(b_s.to(b_q.dtype), b_v)\n'
    "    # the query block's own keys, masked\n"
    '    for i_s in range(i_t * BT, tl.minimum((i_t + 1) * BT, T), BS):\n'
    '        o_k = i_s + tl.arange(0, BS)\n'
    '        m_k = o_k < T\n'
    '        b_k = tl.load(k + o_kk[:, None] + o_k[None, :] * BK, mask=m_k[None, :], other=0.0)\n'
    '        b_v = tl.load(v + o_k[:, None] * BV + o_vv[None, :], mask=m_k[:, None], other=0.0)\n'
    '        b_s = tl.dot(b_q, b_k)\n'
    '        b_gk = tl.load(g + o_k, mask=m_k, other=0.0)\n'
    '        b_s *= tl.exp2(b_gq[:, None] - b_gk[None, :])\n'
    '        b_s = tl.where(o_q[:, None] >= o_k[None, :], b_s, 0.0)\n'
    '        b_o += tl.dot(b_s.to(b_q.dtype), b_v)\n'
    '    tl.store(o + o_q[:, None] * BV + o_vv[None, :], b_o.to(o.dtype.element_ty), mask=m_q[:, None])\n'
)


def test_a_vector_whose_index_names_two_loops_bind_is_loaded_in_the_scores_slice_layout() -> None:
    """The gate `b_gk = tl.load(g + o_k, mask=m_k)` of gated attention, in two loops that each bind `o_k` and `m_k`
    (bound twice in the kernel, once in each loop, before the load): its addresses are written from the loop's own
    definitions (`transpile.passes.vector_loads`), so that on AMD it is loaded straight in the scores' slice layout
    and no conversion (a CTA-wide barrier) falls inside the `mma` stage; both loops are pipelined, their schedules
    hold and the variant compiles. (Before, the gate took `o_k`'s layout, the V tile's rows, and was converted each
    iteration: the loops were kept as Triton.)"""
    result = translate_source(GATED_ATTENTION, "gated.py", get_target("gfx950"))
    fn = result.functions[0]
    assert fn.pipelined and len(fn.schedules) == 2, fn.kept_reason
    assert not any("gl.convert_layout" in stage for stage in _mma_stages(result.text))
    assert result.text.count("g + (i_s + gl.arange(0, BS, layout=gl.SliceLayout(0, mma_layout)))") >= 2
    report = check_source(result.text)
    assert report.cases and not report.findings, report
    compiled = verify(result, {"q": "*bf16", "k": "*bf16", "v": "*bf16", "g": "*fp32", "o": "*bf16", "T": "i32",
                               "BT": 128, "BS": 64, "BK": 64, "BV": 64}, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def test_a_loop_index_bound_after_the_vector_load_is_not_moved_into_it() -> None:
    """A name the loop binds after the load (or carries into the next iteration) does not hold at the load what its
    definition there says: the load's addresses stay as written."""
    from transpile.passes.vector_loads import own_layout_loads

    text = GATED_ATTENTION.replace(
        "        b_gk = tl.load(g + o_k, mask=m_k, other=0.0)\n        b_s *= tl.exp2(b_gq[:, None] - b_gk[None, :])\n"
        "        b_o += tl.dot(b_s.to(b_q.dtype), b_v)\n    # the query",
        "        b_gk = tl.load(g + o_k, mask=m_k, other=0.0)\n        b_s *= tl.exp2(b_gq[:, None] - b_gk[None, :])\n"
        "        b_o += tl.dot(b_s.to(b_q.dtype), b_v)\n        o_k = o_k + 1\n    # the query", 1)
    assert text != GATED_ATTENTION
    source = parse_source(text, "gated.py")
    facts = discover(source)
    rewritten = own_layout_loads(source, facts, analyse_layouts(facts))
    first = (rewritten[0] if rewritten is not None else text).split("# the query")[0]
    assert "b_gk = tl.load(g + o_k, mask=m_k, other=0.0)" in first


# FLA's parallel attention (`parallel_attn_fwd_kernel`): K read as [K, BS] through a pointer the loop names (`p_k`),
# from a base bound in both branches of `if IS_VARLEN:`, and a gate vector added to the scores under `if USE_G:`.
GATED_FLASH_ATTENTION = HEAD + (
    '@triton.jit\n'
    'def gated_flash_attention(q, k, v, o, g, cu_seqlens, scale, T, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,\n'
    '                          BT: tl.constexpr, BS: tl.constexpr, USE_G: tl.constexpr, IS_VARLEN: tl.constexpr):\n'
    '    i_t, i_bh = tl.program_id(0), tl.program_id(1)\n'
    '    i_b, i_h = i_bh // H, i_bh % H\n'
    '    if IS_VARLEN:\n'
    '        bos, eos = tl.load(cu_seqlens + i_b).to(tl.int64), tl.load(cu_seqlens + i_b + 1).to(tl.int64)\n'
    '        T = (eos - bos).to(tl.int32)\n'
    '    else:\n'
    '        bos, eos = (i_b * T).to(tl.int64), (i_b * T + T).to(tl.int64)\n'
    '    o_q = i_t * BT + tl.arange(0, BT)\n'
    '    o_d = tl.arange(0, K)\n'
    '    o_v = tl.arange(0, V)\n'
    '    m_q = o_q < T\n'
    '    b_q = tl.load(q + (bos * H + i_h) * K + o_q[:, None] * (H * K) + o_d[None, :], mask=m_q[:, None], other=0.0)\n'
    '    b_o = tl.zeros([BT, V], dtype=tl.float32)\n'
    '    b_m = tl.full([BT], float("-inf"), dtype=tl.float32)\n'
    '    b_acc = tl.zeros([BT], dtype=tl.float32)\n'
    '    if USE_G:\n'
    '        b_gq = tl.load(g + bos * H + i_h + o_q * H, mask=m_q, other=0.0).to(tl.float32)\n'
    '    else:\n'
    '        b_gq = None\n'
    '    for i_s in range(0, i_t * BT, BS):\n'
    '        o_k = i_s + tl.arange(0, BS)\n'
    '        m_k = o_k < T\n'
    '        # K read as [K, BS]: the transposed tile, its head dimension contiguous\n'
    '        p_k = k + (bos * H + i_h) * K + o_d[:, None] + o_k[None, :] * (H * K)\n'
    '        p_v = v + (bos * H + i_h) * V + o_k[:, None] * (H * V) + o_v[None, :]\n'
    '        b_k = tl.load(p_k, mask=m_k[None, :], other=0.0)\n'
    '        b_v = tl.load(p_v, mask=m_k[:, None], other=0.0)\n'
    '        b_s = tl.dot(b_q, b_k) * scale\n'
    '        if USE_G:\n'
    '            b_gk = tl.load(g + (bos + o_k) * H + i_h, mask=m_k, other=0).to(tl.float32)\n'
    '            b_s += b_gq[:, None] - b_gk[None, :]\n'
    '        b_m, b_mp = tl.maximum(b_m, tl.max(b_s, 1)), b_m\n'
    '        b_r = tl.math.exp2(b_mp - b_m)\n'
    '        b_p = tl.math.exp2(b_s - b_m[:, None])\n'
    '        b_acc = b_acc * b_r + tl.sum(b_p, 1)\n'
    '        b_o = b_o * b_r[:, None] + tl.dot(b_p.to(b_q.dtype), b_v)\n'
    '    b_o = b_o / b_acc[:, None]\n'
    '    tl.store(o + (bos * H + i_h) * V + o_q[:, None] * (H * V) + o_v[None, :], b_o.to(o.dtype.element_ty),\n'
    '             mask=m_q[:, None])\n'
)


def test_flash_attention_with_a_gate_vector_and_keys_read_transposed_from_a_varlen_base_is_pipelined() -> None:
    """Both copies of the attention loop (per value of `USE_G`) are pipelined on gfx950: K's address, bound in the
    loop, reads `bos`, bound in both branches of `if IS_VARLEN:` before it, which holds one value in the loop (so K is
    loaded as its transpose, `passes/transposed_keys.py`); and the gate `b_gk`, loaded each iteration and added to the
    scores, is loaded straight in their slice layout (an attention loop is one whose products meet such vectors,
    `product_loops`): no conversion inside the `mma` stage. (Before, the copy with the gate was kept for the
    conversion and the other for K staged through registers.) The schedules hold and the variant compiles; the
    machine code (`transpile verify F -t gfx950 --isa`, BT 128, BS 64, d128, bf16, 8 warps) runs 0.65-0.67x Triton's
    own non-MFMA instructions per iteration, no spills (bench/RESULTS.md)."""
    result = translate_source(GATED_FLASH_ATTENTION, "gattn.py", get_target("gfx950"))
    fn = result.functions[0]
    assert fn.pipelined and len(fn.schedules) == 2 and all(s.loop.attention for s in fn.schedules), fn.kept_reason
    assert not any("gl.convert_layout" in stage for stage in _mma_stages(result.text))
    assert "(bos + (i_s + gl.arange(0, BS, layout=gl.SliceLayout(0, mma_layout)))) * H" in result.text
    report = check_source(result.text)
    assert report.cases and not report.findings, report
    compiled = verify(result, {"q": "*bf16", "k": "*bf16", "v": "*bf16", "o": "*bf16", "g": "*fp32",
                               "cu_seqlens": "*i32", "scale": "fp32", "T": "i32", "H": 8, "K": 64, "V": 64, "BT": 128,
                               "BS": 64, "USE_G": True, "IS_VARLEN": False}, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


# FLA's parallel attention backward, its dQ loop (`parallel_attn_bwd_kernel_dq`): three chained dots, the gate's
# pointer named inside `if USE_G:` in the loop, and the gate's gradient summed along the rows of the product.
GATED_ATTENTION_DQ = HEAD + (
    '@triton.jit\n'
    'def gated_attention_dq(q, k, v, do, lse, delta, g, dq, dg, scale, T, H: tl.constexpr, K: tl.constexpr,\n'
    '                       V: tl.constexpr, BT: tl.constexpr, BS: tl.constexpr, USE_G: tl.constexpr):\n'
    '    i_t, i_bh = tl.program_id(0), tl.program_id(1)\n'
    '    i_b, i_h = i_bh // H, i_bh % H\n'
    '    bos = i_b * T\n'
    '    o_q = i_t * BT + tl.arange(0, BT)\n'
    '    o_d = tl.arange(0, K)\n'
    '    o_v = tl.arange(0, V)\n'
    '    m_q = o_q < T\n'
    '    b_q = tl.load(q + (bos * H + i_h) * K + o_q[:, None] * (H * K) + o_d[None, :], mask=m_q[:, None], other=0.0)\n'
    '    b_do = tl.load(do + (bos * H + i_h) * V + o_q[:, None] * (H * V) + o_v[None, :], mask=m_q[:, None], other=0.0)\n'
    '    b_lse = tl.load(lse + bos * H + i_h + o_q * H, mask=m_q, other=0.0)\n'
    '    b_delta = tl.load(delta + bos * H + i_h + o_q * H, mask=m_q, other=0.0)\n'
    '    b_dq = tl.zeros([BT, K], dtype=tl.float32)\n'
    '    if USE_G:\n'
    '        b_gq = tl.load(g + bos * H + i_h + o_q * H, mask=m_q, other=0.0).to(tl.float32)\n'
    '        b_dg = tl.zeros([BT], dtype=tl.float32)\n'
    '    else:\n'
    '        b_gq = None\n'
    '        b_dg = None\n'
    '    for i_s in range(0, i_t * BT, BS):\n'
    '        o_k = i_s + tl.arange(0, BS)\n'
    '        m_k = o_k < T\n'
    '        p_k = k + (bos * H + i_h) * K + o_d[:, None] + o_k[None, :] * (H * K)\n'
    '        p_v = v + (bos * H + i_h) * V + o_v[:, None] + o_k[None, :] * (H * V)\n'
    '        b_k = tl.load(p_k, mask=m_k[None, :], other=0.0)\n'
    '        b_v = tl.load(p_v, mask=m_k[None, :], other=0.0)\n'
    '        b_s = tl.dot(b_q, b_k) * scale\n'
    '        if USE_G:\n'
    '            p_gk = g + bos * H + i_h + o_k * H\n'
    '            b_gk = tl.load(p_gk, mask=m_k, other=0.0).to(tl.float32)\n'
    '            b_s += b_gq[:, None] - b_gk[None, :]\n'
    '        b_p = tl.math.exp2(b_s - b_lse[:, None])\n'
    '        b_dp = tl.dot(b_do, b_v)\n'
    '        b_ds = b_p * (b_dp.to(tl.float32) - b_delta[:, None])\n'
    '        b_dq += tl.dot(b_ds.to(b_k.dtype), tl.trans(b_k))\n'
    '        if USE_G:\n'
    '            b_dg += tl.sum(b_ds, 1)\n'
    '    tl.store(dq + (bos * H + i_h) * K + o_q[:, None] * (H * K) + o_d[None, :], b_dq.to(dq.dtype.element_ty),\n'
    '             mask=m_q[:, None])\n'
    '    if USE_G:\n'
    '        tl.store(dg + bos * H + i_h + o_q * H, b_dg.to(dg.dtype.element_ty), mask=m_q)\n'
)


def test_chained_dots_with_a_row_sum_and_a_gate_named_inside_a_branch_are_pipelined() -> None:
    """Both copies of the dQ loop (per value of `USE_G`) are warp-pipelined on gfx950: the gate's addresses, named
    `p_gk` inside `if USE_G:` in the loop, are written from that definition, so that `b_gk` loads in the scores' slice
    layout; and `b_dg += tl.sum(b_ds, 1)`, a row sum of a product, stays inside each warp (chained dots put every warp
    along M), so the `mma` stage holds no barrier. (Before, the copy with the gate was kept.) The schedules hold and the
    variant compiles; the machine code (`transpile verify F -t gfx950 --isa`, BT 128, BS 32, d128, bf16, 8 warps) runs
    0.58x / 0.56x Triton's own non-MFMA instructions per iteration (`USE_G` True / False), no spills."""
    result = translate_source(GATED_ATTENTION_DQ, "gdq.py", get_target("gfx950"))
    fn = result.functions[0]
    assert fn.pipelined and len(fn.schedules) == 2 and all(s.loop.chained for s in fn.schedules), fn.kept_reason
    assert all(s.groups == 2 for s in fn.schedules)
    assert not any("gl.convert_layout" in stage for stage in _mma_stages(result.text))
    report = check_source(result.text)
    assert report.cases and not report.findings, report
    compiled = verify(result, {"q": "*bf16", "k": "*bf16", "v": "*bf16", "do": "*bf16", "lse": "*fp32",
                               "delta": "*fp32", "g": "*fp32", "dq": "*fp32", "dg": "*fp32", "scale": "fp32",
                               "T": "i32", "H": 8, "K": 64, "V": 64, "BT": 128, "BS": 32, "USE_G": True},
                      all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


TOKEN_DKV = HEAD + (
    '@triton.jit\n'
    'def token_dkv(q, k, v, do, lse, delta, dk, dv, scale, T, TC, HQ: tl.constexpr, G: tl.constexpr, K: tl.constexpr,\n'
    '              V: tl.constexpr, BC: tl.constexpr, BS: tl.constexpr):\n'
    '    i_c, i_bh = tl.program_id(0), tl.program_id(1)\n'
    '    i_h = i_bh % (HQ // G)\n'
    '    o_c = i_c * BC + tl.arange(0, BC)\n'
    '    o_d = tl.arange(0, K)\n'
    '    o_v = tl.arange(0, V)\n'
    '    o_g = i_h * G + tl.arange(0, G)\n'
    '    m_c = o_c < TC\n'
    '    b_k = tl.load(k + o_c[:, None] * K + o_d[None, :], mask=m_c[:, None], other=0.0)\n'
    '    b_v = tl.load(v + o_c[:, None] * V + o_v[None, :], mask=m_c[:, None], other=0.0)\n'
    '    b_dk = tl.zeros([BC, K], dtype=tl.float32)\n'
    '    b_dv = tl.zeros([BC, V], dtype=tl.float32)\n'
    '    for i in range(i_c * BC * BS, T):\n'
    '        b_q = tl.load(q + i * HQ * K + o_g[:, None] * K + o_d[None, :]).to(b_k.dtype)\n'
    '        b_do = tl.load(do + i * HQ * V + o_g[:, None] * V + o_v[None, :])\n'
    '        b_lse = tl.load(lse + i * HQ + o_g)\n'
    '        b_delta = tl.load(delta + i * HQ + o_g)\n'
    '        b_s = tl.dot(b_k, tl.trans(b_q)) * scale\n'
    '        b_p = tl.exp(b_s - b_lse[None, :])\n'
    '        b_p = tl.where((i >= max(0, (o_c + 1) * BS - 1))[:, None], b_p, 0)\n'
    '        b_dv += tl.dot(b_p.to(b_do.dtype), b_do)\n'
    '        b_dp = tl.dot(b_v, tl.trans(b_do))\n'
    '        b_ds = b_p * (b_dp - b_delta[None, :])\n'
    '        b_dk += tl.dot(b_ds.to(b_q.dtype), b_q)\n'
    '    tl.store(dk + o_c[:, None] * K + o_d[None, :], b_dk.to(dk.dtype.element_ty), mask=m_c[:, None])\n'
    '    tl.store(dv + o_c[:, None] * V + o_v[None, :], b_dv.to(dv.dtype.element_ty), mask=m_c[:, None])\n'
)

_TOKEN_DKV_VALUES = {"q": "*bf16", "k": "*bf16", "v": "*bf16", "do": "*bf16", "lse": "*fp32", "delta": "*fp32",
                     "dk": "*bf16", "dv": "*bf16", "scale": "fp32", "T": "i32", "TC": "i32", "HQ": 128, "G": 32,
                     "K": 64, "V": 64, "BC": 128, "BS": 64}


def test_a_cast_tile_fed_to_dots_both_ways_is_read_in_each_form() -> None:
    """FLA's compression dK/dV in its per-token style: `b_q = tl.load(...).to(b_k.dtype)` is read by `tl.dot(b_k,
    tl.trans(b_q))` and by `tl.dot(b_ds.to(b_q.dtype), b_q)`. The ring holds the tile once; its slot is read in
    each form and the cast runs on each read (`b_q_t` from `b_q_tile_t`, the transposed view). The causal mask's loop-invariant
    vector (`max(0, (o_c + 1) * BS - 1)`, Python's `max`) is converted once, before the loop. Before, the loop was
    kept ("`b_q` feeds two dots in different forms"). gfx950, 128 keys x 32 query heads, d64, bf16, 8 warps
    (`transpile verify F -t gfx950 --isa`): 0.48x Triton's own non-MFMA instructions per iteration, no spills."""
    result = translate_source(TOKEN_DKV, "tdkv.py", get_target("gfx950"))
    fn = result.functions[0]
    assert fn.pipelined and len(fn.schedules) == 1 and fn.schedules[0].loop.chained, fn.kept_reason
    assert fn.schedules[0].groups == 2
    (q,) = [load for load in fn.schedules[0].loop.loads if load.computed]
    assert q.twice and q.computed_as
    # (the load's tile is `b_q_tile` once the cast has a line of its own)
    assert re.search(r"b_q_tile_t = async_copy\.load_shared_relaxed\(\s*b_q_tile_ring\.index\(0\)\.permute\(\[1, "
                     r"0\]\)", result.text)
    assert "b_q_t = b_q_tile_t.to(b_k_op.dtype)" in result.text and "b_q = b_q_tile.to(b_k_op.dtype)" in result.text
    assert re.search(r"b_s_dot = _dot\(\s*b_k_op,\s*b_q_t,", result.text)
    assert not any("gl.convert_layout" in stage for stage in _mma_stages(result.text))
    report = check_source(result.text)
    assert report.cases and not report.findings, report
    compiled = verify(result, _TOKEN_DKV_VALUES, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def test_a_tile_computed_by_arithmetic_and_fed_both_ways_is_kept_with_the_measurement() -> None:
    """The same loop with Q scaled before both dots (`b_q = (b_q * scale).to(b_k.dtype)`): each form would run the
    arithmetic on the whole tile in every warp; measured 0.92-1.80x, so the loop stays Triton, naming the line."""
    text = TOKEN_DKV.replace("o_d[None, :]).to(b_k.dtype)\n",
                             "o_d[None, :])\n        b_q = (b_q * scale).to(b_k.dtype)\n")
    assert text != TOKEN_DKV
    fn = translate_source(text, "tdkv.py", get_target("gfx950")).functions[0]
    assert not fn.pipelined
    assert "computed from the tile `b_q` by arithmetic (line 21)" in fn.kept_reason
    assert "0.92-1.80x" in fn.kept_reason

DAV = HEAD + (
    '@triton.jit\n'
    'def dav(v, do, A, dv, dA, scale, T, HV: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr):\n'
    '    i_t, i_hv = tl.program_id(0), tl.program_id(1)\n'
    '    o_t = i_t * BT + tl.arange(0, BT)\n'
    '    m_t = o_t < T\n'
    '    v += i_hv * V\n'
    '    do += i_hv * V\n'
    '    dv += i_hv * V\n'
    '    p_A = A + i_hv * BT + tl.arange(0, BT)[:, None] + o_t[None, :] * (HV * BT)\n'
    '    b_A = tl.load(p_A, mask=m_t[None, :], other=0.0)\n'
    '    b_A = tl.where(o_t[:, None] <= o_t[None, :], b_A, 0).to(do.dtype.element_ty)\n'
    '    b_dA = tl.zeros([BT, BT], dtype=tl.float32)\n'
    '    for i_v in range(tl.cdiv(V, BV)):\n'
    '        o_v = i_v * BV + tl.arange(0, BV)\n'
    '        m_v = o_v < V\n'
    '        p_v = v + o_v[:, None] + o_t[None, :] * (HV * V)\n'
    '        p_do = do + o_t[:, None] * (HV * V) + o_v[None, :]\n'
    '        b_v = tl.load(p_v, mask=m_v[:, None] & m_t[None, :], other=0.0)\n'
    '        b_do = tl.load(p_do, mask=m_t[:, None] & m_v[None, :], other=0.0)\n'
    '        b_dA += tl.dot(b_do, b_v)\n'
    '        b_dv = tl.dot(b_A, b_do)\n'
    '        tl.store(dv + o_t[:, None] * (HV * V) + o_v[None, :], b_dv.to(dv.dtype.element_ty),\n'
    '                 mask=m_t[:, None] & m_v[None, :])\n'
    '    b_dA = tl.where(o_t[:, None] >= o_t[None, :], b_dA * scale, 0.0)\n'
    '    tl.store(dA + o_t[:, None] * (HV * BT) + tl.arange(0, BT)[None, :], b_dA.to(dA.dtype.element_ty),\n'
    '             mask=m_t[:, None])\n'
)


@pytest.mark.parametrize("target", ["gfx950", "gfx1250"])
def test_a_tile_that_is_the_a_operand_of_one_dot_and_the_b_operand_of_another_is_read_in_each_layout(
        target: str) -> None:
    """FLA's KDA dA/dv backward: `b_do` is the A operand of `b_dA += tl.dot(b_do, b_v)` and the B operand of `b_dv =
    tl.dot(b_A, b_do)`, whose product is stored each iteration. One ring holds `b_do`; its slot is read in each
    operand's layout (`b_do_b` for the second dot), and the store of the fresh product is laid out in its MMA layout
    (its pointers follow it) instead of converting the product. Before, the loop was kept ("`b_do` is the A operand
    of one dot and the B operand of another"). `transpile verify F -t T --isa` (bf16, V 1024, 8 warps): gfx950 0.68x
    (BT x BV 64 x 64), 0.53x at 128 x 64; gfx1250 0.56x (64 x 64); no spills in the hot loop. Launches whose dots
    are less than 64 deep run the source kernel (`SIDES_MIN_DEPTH`: FLA's own kernel measured 1.08x at BV 32)."""
    assert "(BT) < 64 or (BV) < 64" in translate_source(DAV, "dav.py", get_target(target)).text
    result = translate_source(DAV, "dav.py", get_target(target))
    fn = result.functions[0]
    assert fn.pipelined and len(fn.schedules) == 1, fn.kept_reason
    (do,) = [load for load in fn.schedules[0].loop.loads if load.name == "b_do"]
    assert do.sides and not do.twice
    assert re.search(r"b_dv = _dot\(\s*b_A_op,\s*b_do_b,", result.text)
    assert re.search(r"b_dA = _dot\(\s*b_do,\s*b_v_t,\s*b_dA", result.text)  # (b_v read as its transpose)
    assert not any("gl.convert_layout" in stage for stage in _mma_stages(result.text))
    report = check_source(result.text)
    assert report.cases and not report.findings, report
    compiled = verify(result, {"v": "*bf16", "do": "*bf16", "A": "*bf16", "dv": "*bf16", "dA": "*fp32",
                               "scale": "fp32", "T": "i32", "HV": 8, "V": 1024, "BT": 64, "BV": 64},
                      all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]



def test_a_static_range_loop_is_kept_saying_triton_unrolls_it() -> None:
    """A dot loop over `tl.static_range` (Liger's mHC GEMM-and-norm kernels): Triton's frontend unrolls it, so the
    reason does not claim that Triton's compiler pipelines it."""
    text = HEAD + (
        "@triton.jit\n"
        "def mm(a_ptr, b_ptr, c_ptr, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):\n"
        "    offs_m = tl.arange(0, BM)\n"
        "    offs_n = tl.arange(0, BN)\n"
        "    acc = tl.zeros((BM, BN), dtype=tl.float32)\n"
        "    for k0 in tl.static_range(0, K, BK):\n"
        "        offs_k = k0 + tl.arange(0, BK)\n"
        "        a = tl.load(a_ptr + offs_m[:, None] * K + offs_k[None, :])\n"
        "        b = tl.load(b_ptr + offs_k[:, None] * BN + offs_n[None, :])\n"
        "        acc = tl.dot(a, b, acc)\n"
        "    tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc)\n")
    fn = translate_source(text, "mm.py", get_target("gfx950")).functions[0]
    assert not fn.pipelined
    assert "the loop at line 10 is not pipelined for gfx950 (the loop does not iterate over `range`" in fn.kept_reason
    assert fn.kept_reason.endswith("Triton's compiler unrolls it at compile time (`tl.static_range`) and pipelines no "
                                   "copy either")


PICKED_STEP = HEAD + '''@triton.jit
def mm(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, WIDE: tl.constexpr):
    if WIDE:
        STEP: tl.constexpr = BK * 2
    else:
        STEP: tl.constexpr = BK
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, STEP)
    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * BN + offs_n[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, STEP)):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc = tl.dot(a, b, acc)
        a_ptrs += STEP
        b_ptrs += STEP * BN
    tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc.to(tl.float16))
'''


@pytest.mark.parametrize("target", ["gfx950", "gfx942"])
def test_a_block_size_each_branch_of_a_flag_binds_is_one_constexpr(target: str) -> None:
    """`STEP: tl.constexpr` bound once in each branch of a compile-time `if` is the value the flag picks: the tiles'
    shapes and the rings' slots read `(BK * 2 if WIDE else BK)`, and the variant compiles for both values."""
    sp = stage_plan(PICKED_STEP)
    assert isinstance(sp, StagePlan), sp
    assert [ring.shape for ring in sp.rings] == [["BM", "(BK * 2 if WIDE else BK)"], ["(BK * 2 if WIDE else BK)", "BN"]]
    result = translate_source(PICKED_STEP, "x.py", get_target(target))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    for wide in (False, True):
        assert_holds_and_compiles(result, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "BM": 128,
                                           "BN": 128, "BK": 32, "WIDE": wide, "num_warps": 8})


GATHERED_ROWS = HEAD + '''@triton.jit
def mm(a_ptr, b_ptr, c_ptr, idx_ptr, M, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
       GATHER: tl.constexpr):
    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
    offs_m = offs_m % M
    if GATHER:
        offs_m = tl.load(idx_ptr + offs_m)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * BN + offs_n[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK * BN
    tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc.to(tl.float16))
'''


def test_rows_a_flag_may_gather_are_converted_once_for_the_copies() -> None:
    """`offs_m` is bound three times before the loop, the last under `if GATHER:` (MoE kernels' gathered token
    rows): a tensor either way, read along the rows of the A tile, so the copies read it converted once to their
    layout's row slice before the loop (it was read as a scalar, and the variant did not compile)."""
    result = translate_source(GATHERED_ROWS, "x.py", get_target("gfx950"))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    assert "gl.convert_layout(offs_m, gl.SliceLayout(1, a_ring_copy_layout))" in result.text
    for gather in (False, True):
        assert_holds_and_compiles(result, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "idx_ptr": "*i32",
                                           "BM": 128, "BN": 128, "BK": 64, "GATHER": gather, "num_warps": 8})


BIAS_GRADIENT = HEAD + '''@triton.jit
def tgmm(lhs_ptr, rhs_ptr, out_ptr, bias_ptr, M, tile_n, BK: tl.constexpr, BN: tl.constexpr, BM: tl.constexpr,
         BIAS_GRAD: tl.constexpr):
    offs_k = tl.arange(0, BK)
    offs_n = tl.arange(0, BN)
    offs_m = tl.arange(0, BM)
    lhs_ptrs = lhs_ptr + offs_k[:, None] * M + offs_m[None, :]
    rhs_ptrs = rhs_ptr + offs_m[:, None] * BN + offs_n[None, :]
    acc = tl.zeros((BK, BN), dtype=tl.float32)
    bias_acc = tl.zeros((BK,), dtype=tl.float32)
    for _ in range(tl.cdiv(M, BM)):
        lhs = tl.load(lhs_ptrs)
        rhs = tl.load(rhs_ptrs)
        acc = tl.dot(lhs, rhs, acc=acc)
        if BIAS_GRAD and tile_n == 0:  # the bias gradient, once per row of tiles
            bias_acc += tl.sum(lhs, axis=1)
        lhs_ptrs += BM
        rhs_ptrs += BM * BN
    tl.store(out_ptr + offs_k[:, None] * BN + offs_n[None, :], acc.to(tl.float16))
    if BIAS_GRAD and tile_n == 0:
        tl.store(bias_ptr + offs_k, bias_acc)
'''


def test_a_test_of_a_flag_and_a_run_time_value_copies_the_loop_per_value_of_the_flag() -> None:
    """aiter's grouped GEMM gradient `tgmm`: `if COMPUTE_BIAS_GRAD and tile_n == 0:` sums the A tile outside the dot.
    The loop is copied per value of the flag's part of the test: the copy without the branch is pipelined, and
    launches with the flag set run the source kernel (TT045)."""
    result = translate_source(BIAS_GRADIENT, "x.py", get_target("gfx950"))
    fn = result.functions[0]
    assert fn.pipelined, fn.kept_reason
    assert any(d.code == "TT045" and "except where `BIAS_GRAD` holds" in d.message for d in result.diagnostics)
    text = result.text
    assert "if tile_n == 0:  # the bias gradient, once per row of tiles" in text  # (the flag's copy keeps the rest)
    assert_holds_and_compiles(result, {"lhs_ptr": "*fp16", "rhs_ptr": "*fp16", "out_ptr": "*fp16",
                                       "bias_ptr": "*fp32", "BK": 128, "BN": 128, "BM": 64, "BIAS_GRAD": False,
                                       "num_warps": 8})


def test_gfx950_keeps_latent_attention_over_a_paged_cache_as_triton() -> None:
    """Latent attention (scores summed with a rotary product) whose K and V rows are gathered through a block table
    the loop loads (aiter's extend attention at 192-wide keys): the ring spilled 97 VGPRs on gfx950 where Triton's
    compile spills none, so that form is kept, with the measurement; without the table it is pipelined."""
    paged = LATENT.replace("SUMMED", "qk += tl.dot(q_pe, tl.trans(k_pe))").replace(
        "def attn(q_ptr, ", "def attn(table_ptr, q_ptr, ").replace(
        "        offs_kv = start_n + offs_n\n",
        "        offs_kv = start_n + offs_n\n        kv_loc = tl.load(table_ptr + offs_kv, mask=offs_kv < N_CTX, other=0)\n"
    ).replace("k_ptr + offs_kv[:, None] * D", "k_ptr + kv_loc[:, None] * D").replace(
        "v_ptr + offs_kv[:, None] * D", "v_ptr + kv_loc[:, None] * D").replace(
        "kpe_ptr + offs_kv[:, None] * 32", "kpe_ptr + kv_loc[:, None] * 32")
    assert paged.count("kv_loc[:, None]") == 3
    kept = translate_source(paged, "x.py", get_target("gfx950")).functions[0]
    assert not kept.pipelined and "spilled 97 VGPRs" in kept.kept_reason, kept.kept_reason
    plain = translate_source(LATENT.replace("SUMMED", "qk += tl.dot(q_pe, tl.trans(k_pe))"), "x.py",
                             get_target("gfx950")).functions[0]
    assert plain.pipelined, plain.kept_reason
