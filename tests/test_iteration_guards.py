"""Iteration guards: a dot loop whose iteration's work runs under one run-time test (`if kbid:`, block-skipping
sparse attention). The facts (`analysis.guards`), the pass that masks the branch's loads with the test
(`passes.iteration_guards`), the AMD warp pipeline that runs the consumer's statements under the test while every
iteration copies and reads its slots, the schedule checker's reading of such a branch, and the kept reason where no
form takes the loop (Triton's own compile does not pipeline those loads either)."""

from __future__ import annotations

import re
from pathlib import Path

import libcst as cst
import pytest

from transpile.analysis.guards import guard_shape, guard_term, iteration_guard
from transpile.discover import discover
from transpile.engine import prepare, translate_source
from transpile.passes.iteration_guards import mask_guarded_loads
from transpile.schedule_check import check_source
from transpile.source import parse_source
from transpile.targets import get_target
from transpile.verify import verify

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "suite_skip_block_attention.py"

HEAD = "import triton\nimport triton.language as tl\n\n\n"

GUARDED_GEMM = HEAD + '''@triton.jit
def mm(a_ptr, b_ptr, c_ptr, flags, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * BN + offs_n[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        live = tl.load(flags + k // BK)
        if live != 0 and k >= 0:
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k, other=0.0)
            b = tl.load(b_ptrs)
            acc = tl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK * BN
    tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc.to(tl.float16))
'''


def _loop(text: str) -> cst.For:
    module = cst.parse_module(text)
    return next(n for n in module.body[-1].body.body if isinstance(n, cst.For))  # type: ignore[attr-defined]


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


@pytest.mark.parametrize(("test", "term"), [
    ("kbid", "(kbid != 0)"),
    ("not skip", "(skip == 0)"),
    ("i_s <= t and i_s >= 0", "((i_s <= t) & (i_s >= 0))"),
    ("(a > 0) or b", "((a > 0) | (b != 0))"),
])
def test_guard_term_is_the_test_as_a_mask(test: str, term: str) -> None:
    assert guard_term(cst.parse_expression(test)) == term


@pytest.mark.parametrize("change", [
    # an `else`: which work an iteration runs is decided two ways
    ("            acc = tl.dot(a, b, acc)\n", "            acc = tl.dot(a, b, acc)\n        else:\n            acc += 1.0\n"),
    # the branch rebinds a name the test reads
    ("            acc = tl.dot(a, b, acc)\n", "            acc = tl.dot(a, b, acc)\n            live = 0\n"),
    # a dot outside the branch too
    ("        a_ptrs += BK\n", "        acc = tl.dot(a_ptrs.to(tl.float16), b_ptrs.to(tl.float16), acc)\n"
                             "        a_ptrs += BK\n"),
    # a test that calls
    ("        if live != 0 and k >= 0:\n", "        if tl.load(flags) != 0:\n"),
    # a pointer the branch advances (tiles stored compactly, moved only where one is read): a copy made ahead could
    # not tell where a later iteration's tile lies
    ("            acc = tl.dot(a, b, acc)\n", "            acc = tl.dot(a, b, acc)\n            b_ptrs += BK * BN\n"),
])
def test_guard_shape_refuses_what_is_not_one_guard(change: tuple[str, str]) -> None:
    assert guard_shape(_loop(GUARDED_GEMM)) is not None
    assert change[0] in GUARDED_GEMM
    assert guard_shape(_loop(GUARDED_GEMM.replace(*change))) is None


def test_pass_masks_every_load_of_the_branch_with_the_test() -> None:
    source = parse_source(GUARDED_GEMM, "x.py")
    done = mask_guarded_loads(source, discover(source))
    assert done is not None
    text = done[0]
    assert "a = tl.load(a_ptrs, mask=(offs_k[None, :] < K - k) & ((live != 0) & (k >= 0)), other=0.0)" in text
    assert "b = tl.load(b_ptrs, mask=((live != 0) & (k >= 0)))" in text
    assert "live = tl.load(flags + k // BK)\n" in text  # (the test's own load, outside the branch, as written)
    assert text.count("\n") == GUARDED_GEMM.count("\n")  # (lines kept)
    # ... which is what makes the loop read as guarded
    assert iteration_guard(_loop(GUARDED_GEMM)) is None
    assert iteration_guard(_loop(text)) is not None


def test_pass_leaves_a_positional_mask_and_a_compile_time_test() -> None:
    positional = GUARDED_GEMM.replace("tl.load(a_ptrs, mask=offs_k[None, :] < K - k, other=0.0)",
                                      "tl.load(a_ptrs, offs_k[None, :] < K - k, 0.0)")
    source = parse_source(positional, "x.py")
    assert mask_guarded_loads(source, discover(source)) is None
    flag = GUARDED_GEMM.replace("        if live != 0 and k >= 0:\n", "        if BM > 16:\n")
    source = parse_source(flag, "x.py")
    assert mask_guarded_loads(source, discover(source)) is None


def test_kept_source_is_the_source_as_written() -> None:
    """The pass feeds the pipeline; a kernel kept as Triton keeps its loads as the source wrote them, and its reason
    does not claim that Triton's compiler pipelines them (sm90's GEMM rings take no guard)."""
    prepared = prepare(FIXTURE.read_text(), str(FIXTURE))
    assert "(kbid != 0)" in prepared.source.text
    result = translate_source(GUARDED_GEMM, "x.py", get_target("sm90"))
    assert "(live != 0)" not in result.text
    kept = next(f for f in result.functions if f.name == "mm")
    assert not kept.pipelined and kept.kept_reason.endswith(
        "Triton's compiler does not pipeline the loads under its `if` either")


@pytest.mark.parametrize("target", ["gfx950", "gfx942"])
def test_amd_pipeline_runs_the_guard_in_its_consumer(target: str) -> None:
    result = translate_source(FIXTURE.read_text(), str(FIXTURE), get_target(target))
    assert [f.pipelined for f in result.functions if f.name == "skip_block_attn_kernel"] == [True]
    variant = result.text
    lines = [line.strip() for line in variant.splitlines()]
    # the copies of a later iteration test its own flag, loaded ahead with them ...
    assert any(re.fullmatch(r"kbid_next = gl.load\(K_bid_ptr \+ start_n_next_* // BLOCK_N\)", line) for line in lines)
    assert "mask=kbid_next != 0," in lines or any("& (kbid_next != 0)" in line for line in lines)
    # ... and the consumer runs the iteration's work under its flag, after the slots are read
    stage = next(i for i, line in enumerate(lines) if line.startswith('with gl.amd.warp_pipeline_stage("mma"'))
    at = lines.index("if kbid:", stage)
    assert lines[at - 1] == "kbid = gl.load(K_bid_ptr + start_n // BLOCK_N)"
    assert "m_i = m_ij" in lines[at:at + 40]
    report = check_source(variant)
    assert report.cases and report.findings == [], report.findings[:3]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["gfx950", "gfx942"])
def test_amd_guarded_pipeline_compiles(target: str) -> None:
    result = translate_source(FIXTURE.read_text(), str(FIXTURE), get_target(target))
    values = {"Q": "*fp16", "K": "*fp16", "V": "*fp16", "Out": "*fp16", "block_flags": "*i8", "sm_scale": "fp32",
              "HEAD_DIM": 64, "BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8}
    compiled = verify(result, values)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


@pytest.mark.parametrize(("body", "only"), [
    ("qk = _dot(q, k_t, zeros)\nacc = _dot(p.to(v.dtype), v, acc)\nm_i = m_ij", True),
    ("qk = _dot(q, k_t, zeros)\nk_t = async_copy.load_shared_relaxed(ring.index(0), layout)", False),
    ("acc = _dot(a, b, acc)\n_cta_barrier()", False),
    ("async_copy.global_load_to_shared(ring.index(0), ptrs)", False),
])
def test_checker_reads_a_branch_of_mmas_alone_as_taken(body: str, only: bool) -> None:
    """An `if` on a value the iteration loads whose branch runs MMAs alone is run as taken every iteration (the
    case that reads every slot it reads); one that also reads a slot, copies or waits at a barrier stays a branch the
    checker runs both ways."""
    import ast

    from transpile.schedule_check import _only_mmas

    assert _only_mmas(ast.parse(body).body, {}) is only


@pytest.mark.parametrize("target", ["gfx950", "gfx942", "gfx1250"])
def test_amd_guarded_gemm_kept_with_its_figures_and_emitted_on_request(target: str) -> None:
    """A GEMM whose work runs under a run-time test measured heavier than Triton's own compile (the kept reason
    names it); `--gluon-always` emits the ring, whose steady-state copies keep the test's two comparisons apart
    (the K-tail term left out of a three-term mask: the terms joined again in parentheses)."""
    kept = translate_source(GUARDED_GEMM, "x.py", get_target(target))
    mm = next(f for f in kept.functions if f.name == "mm")
    assert not mm.pipelined and "an iteration guard" in mm.kept_reason and "1.14x (gfx950)" in mm.kept_reason
    emitted = translate_source(GUARDED_GEMM, "x.py", get_target(target), gluon_always=True)
    assert [f.pipelined for f in emitted.functions if f.name == "mm"] == [True]
    lines = [line.strip() for line in emitted.text.splitlines()]
    stage = next(i for i, line in enumerate(lines) if line.startswith('with gl.amd.warp_pipeline_stage("mma"'))
    assert lines[stage + 2:stage + 5] == ["live = gl.load(flags + k // BK)", "if live != 0 and k >= 0:",
                                          "acc = _dot(a, b, acc)"]
    steady = [line for line in lines[stage:] if "(a_ring" in line and "mask=" in line and "num_iters" not in line]
    assert steady and all("mask=(live_next != 0) & (k_next >= 0)" in line for line in steady), steady
    report = check_source(emitted.text)
    assert report.cases and report.findings == [], report.findings[:3]


def test_sm90_attention_ring_runs_the_guard_on_request() -> None:
    """sm90's attention ring (emitted with --gluon-always: measured slower where few blocks are read): the step's work from the QK^T wgmma
    on under the test; where it fails, the previous iteration's PV (of its own P) still issued and retired and the
    next P zero; the copies of a later iteration masked by its flag, loaded for at most the last iteration."""
    kept = translate_source(FIXTURE.read_text(), str(FIXTURE), get_target("sm90"))
    assert "0.72x the source where 30% of the key blocks are read" in next(
        f for f in kept.functions if f.name == "skip_block_attn_kernel").kept_reason
    result = translate_source(FIXTURE.read_text(), str(FIXTURE), get_target("sm90"), gluon_always=True)
    assert [f.pipelined for f in result.functions if f.name == "skip_block_attn_kernel"] == [True]
    lines = [line.strip() for line in result.text.splitlines()]
    at = lines.index("if kbid:", lines.index("for it in range(num_iters):"))
    otherwise = lines.index("else:", at)
    assert any(line.startswith("qk = warpgroup_mma(") for line in lines[at + 1:at + 4])
    skipped = lines[otherwise + 1:otherwise + 12]
    assert skipped[0].startswith("acc = warpgroup_mma(") and "p_prev = gl.zeros_like(p_prev)" in skipped
    assert any(re.fullmatch(r"start_n_next_* = gl\.minimum\(next_it, gl\.maximum\(num_iters - 1, 0\)\) \* BLOCK_N",
                            line) for line in lines)
    assert any("& (kbid_next != 0)" in line for line in lines)
    report = check_source(result.text)
    assert report.cases and report.findings == [], report.findings[:3]
