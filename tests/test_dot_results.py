"""`transpile.passes.dot_results`: a product that a later dot of the iteration reads, folded into a statement that casts,
scales or masks it, is named on the line before (`qk_dot = tl.dot(q, k)`), the statement reading the name; a dot
accumulating into a start the iteration makes that is not a zero tile is the product added to that start. Products a
planner reads as they are (a dot alone, a dot times names and numbers, a zero start), products no later dot reads,
and products accumulated into a carried value (a GEMM's) are left as written. Through the engine, a block-sparse
attention loop (scores started from the causal mask, block indices loaded through an advancing pointer, key columns
made from a loaded block index) is pipelined on gfx950 and the new line maps to the dot's."""

from __future__ import annotations

from pathlib import Path

import pytest

from transpile.discover import discover
from transpile.passes.dot_results import name_dot_results
from transpile.source import parse_source

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

KERNEL = '''import triton
import triton.language as tl


@triton.jit
def k(q_ptr, k_ptr, v_ptr, s_ptr, o_ptr, T, scale, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + offs_m[:, None] * D + offs_d[None, :])
    acc = tl.zeros((BM, D), dtype=tl.float32)
    for start in range(0, T, BN):
        kt = tl.load(k_ptr + offs_d[:, None] + (start + offs_n)[None, :] * D)
        v = tl.load(v_ptr + (start + offs_n)[:, None] * D + offs_d[None, :])
        k_scale = tl.load(s_ptr + start // BN)
        PRE
        # the scores of this key block
        SCORES
        p = tl.exp(qk)
        acc += tl.dot(p.to(tl.float16), v)
    tl.store(o_ptr + offs_m[:, None] * D + offs_d[None, :], acc)
'''


def rewritten(text: str) -> str | None:
    source = parse_source(text, "k.py")
    result = name_dot_results(source, discover(source))
    return None if result is None else result[0]


def kernel(pre: str, scores: str) -> str:
    return KERNEL.replace("        PRE\n", f"        {pre}\n" if pre else "").replace("SCORES", scores)


@pytest.mark.parametrize("pre, scores, reading", [
    # a cast and a scale loaded in the iteration (int8 attention's per-block scales)
    ("", "qk = tl.dot(q, kt).to(tl.float32) * (scale * k_scale)", "qk = qk_dot.to(tl.float32) * (scale * k_scale)"),
    # a product added to a start the iteration makes (a mask of -inf), scaled or not
    ("qk = tl.where(offs_n[None, :] < T - start, 0.0, float(\"-inf\"))", "qk += tl.dot(q, kt) * scale",
     "qk += qk_dot * scale"),
    ("qk = tl.where(offs_n[None, :] < T - start, 0.0, float(\"-inf\"))", "qk += tl.dot(q, kt)", "qk += qk_dot"),
    # the canonical form of that addition (`tl.dot(q, k, qk)`): the start added to the product
    ("qk = tl.where(offs_n[None, :] < T - start, 0.0, float(\"-inf\"))", "qk = tl.dot(q, kt, qk)",
     "qk = qk + qk_dot"),
    # a product inside a mask
    ("", "qk = tl.where(offs_n[None, :] < T - start, tl.dot(q, kt), 0.0)",
     "qk = tl.where(offs_n[None, :] < T - start, qk_dot, 0.0)"),
])
def test_a_folded_product_gets_a_line_of_its_own(pre: str, scores: str, reading: str) -> None:
    text = rewritten(kernel(pre, scores))
    assert text is not None
    lines = [line.strip() for line in text.splitlines()]
    at = lines.index("qk_dot = tl.dot(q, kt)")
    assert lines[at - 1] == "# the scores of this key block"  # (the comment stays above what it computes)
    assert lines[at + 1] == reading
    assert rewritten(text) is None  # idempotent


@pytest.mark.parametrize("pre, scores", [
    ("", "qk = tl.dot(q, kt)"),  # a product alone
    ("", "qk = tl.dot(q, kt) * scale"),  # a product times names and numbers: the planners take it
    ("", "qk = scale * tl.dot(q, kt)"),
    # a zero start: the scores made afresh, as the planners read them
    ("qk = tl.zeros((BM, BN), dtype=tl.float32)", "qk += tl.dot(q, kt)"),
    ("qk = tl.zeros((BM, BN), dtype=tl.float32)", "qk = tl.dot(q, kt, qk)"),
])
def test_products_the_planners_read_are_left_as_written(pre: str, scores: str) -> None:
    assert rewritten(kernel(pre, scores)) is None


def test_a_product_no_later_dot_reads_and_a_carried_accumulator_are_left_as_written() -> None:
    gemm = '''import triton
import triton.language as tl


@triton.jit
def k(a_ptr, b_ptr, s_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + offs_m[:, None] * K + (k0 + offs_k)[None, :])
        b = tl.load(b_ptr + (k0 + offs_k)[:, None] * BN + offs_n[None, :])
        s = tl.load(s_ptr + k0 // BK)
        acc += tl.dot(a, b).to(tl.float32) * s
        part = tl.dot(a, b).to(tl.float16) * s
        tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], part)
    tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc)
'''
    assert rewritten(gemm) is None


def test_block_sparse_attention_is_pipelined_and_the_new_line_maps_to_the_dot() -> None:
    """suite_block_sparse_attention: `qk += tl.dot(q, k)` onto the causal mask's start; the block index loaded through
    a pointer the loop advances; the key columns made from it (`cols = start_n + offs_n`), read both by the copies and
    by the mask, converted once before the loop. Pipelined on gfx950 (the variant is compiled with the goldens)."""
    from transpile.engine import prepare, translate_source
    from transpile.targets import get_target

    path = FIXTURES / "suite_block_sparse_attention.py"
    text = path.read_text()
    prepared = prepare(text, str(path))
    lines = prepared.source.text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip() == "qk_dot = tl.dot(q, k)")
    assert lines[at + 1].strip() == "qk += qk_dot"
    dot_line = next(i for i, line in enumerate(text.splitlines(), 1) if line.strip() == "qk += tl.dot(q, k)")
    assert prepared.source.line_map[at + 1] == dot_line and prepared.source.line_map[at + 2] == dot_line
    result = translate_source(text, str(path), get_target("gfx950"), prepared=prepared)
    assert "warp_pipeline_stage" in result.text and "qk_dot = " in result.text
    # the key columns' conversion is made once, before the loop: no conversion of `cols` inside it
    assert "offs_n_cvt = gl.convert_layout(offs_n" in result.text
    # the kernel as written is what the variant keeps for launches the Gluon kernel does not take
    assert "qk += tl.dot(q, k)" in result.text


def test_scores_summed_from_two_products_are_left_as_written() -> None:
    # latent attention: `qk += tl.dot(q_pe, k_pe)` after `qk = tl.dot(q, k)`, a form the planners read as summed scores
    assert rewritten(kernel("qk = tl.dot(q, kt)", "qk += tl.dot(q, kt * 2)")) is None


def test_sparse_attention_dq_is_pipelined_with_its_mask_made_before_the_loop() -> None:
    """suite_sparse_attention_bwd_dq, a loop of three chained dots: the scaled scores (`tl.dot(q, k.T) * qk_scale`)
    named on their own line, which the planner of chained dots reads; `n_mask = offs_n < L - idx_n * BLOCK_N` (a block
    index the iteration loads), read by the copies and by the probabilities, converted once, of `offs_n`, before the
    loop. Pipelined on gfx950 (the variant is compiled with the goldens)."""
    from transpile.engine import translate_source
    from transpile.targets import get_target

    path = FIXTURES / "suite_sparse_attention_bwd_dq.py"
    result = translate_source(path.read_text(), str(path), get_target("gfx950"))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    flat = " ".join(result.text.split())
    assert "qk_dot = _dot(" in flat and "qk = qk_dot * qk_scale" in flat
    assert "offs_n_cvt = gl.convert_layout(offs_n, gl.SliceLayout(0, mma_layout))" in flat
    assert "p = gl.where((offs_n_cvt < L - idx_n * BLOCK_N)[None, :], p, 0.0)" in flat
