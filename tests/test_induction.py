"""Index tensors a dot loop advances by a constant (`transpile.passes.induction`): which are rewritten as functions
of the loop variable, how each loop header is read, and every case that must be left as written. The rewritten
loops are also evaluated against the source's, iteration by iteration, with torch standing in for Triton."""

from __future__ import annotations

import types

import pytest
import torch

from transpile.discover import discover
from transpile.passes.induction import rewrite_inductions
from transpile.source import parse_source

KERNEL = '''import triton
import triton.language as tl


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, K, lo, BK: tl.constexpr):
    offs = tl.arange(0, BK)
    PRELUDE
    a_ptrs = a_ptr + offs
    b_ptrs = b_ptr + offs
    acc = tl.zeros((BK, BK), dtype=tl.float32)
    for k in range(RANGE):
        mask = offs < K
        a = tl.load(a_ptrs, mask=mask)
        b = tl.load(b_ptrs, mask=mask)
        acc = tl.dot(a, b, acc)
        # advance
        ADVANCE
        a_ptrs += BK
        b_ptrs += BK
    AFTER
    tl.store(c_ptr, acc)
'''


def rewrite(span: str, advance: str = "offs += BK", prelude: str = "", after: str = "") -> str | None:
    text = (KERNEL.replace("RANGE", span).replace("ADVANCE", advance).replace("PRELUDE", prelude or "pass")
            .replace("AFTER", after or "pass"))
    source = parse_source(text, "k.py")
    result = rewrite_inductions(source, discover(source))
    return None if result is None else result[0]


def loop_lines(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("for k"))
    return [line.strip() for line in lines[start:start + 9]]


@pytest.mark.parametrize("span, advance, read", [
    ("0, tl.cdiv(K, BK)", "offs += BK", "mask = (offs + k * BK) < K"),
    ("tl.cdiv(K, BK)", "offs = offs + BK", "mask = (offs + k * BK) < K"),
    ("0, K, BK", "offs += BK", "mask = (offs + k) < K"),  # the loop steps by the advance itself
    ("lo, K, BK", "offs += BK", "mask = (offs + (k - lo)) < K"),
    ("0, K, BK", "offs += 2 * BK", "mask = (offs + (k // BK) * (2 * BK)) < K"),
    ("lo, tl.cdiv(K, BK)", "offs += BK", "mask = (offs + (k - lo) * BK) < K"),
])
def test_an_advanced_index_is_read_from_the_loop_variable(span: str, advance: str, read: str) -> None:
    text = rewrite(span, advance)
    assert text is not None
    lines = loop_lines(text)
    assert lines[1] == read
    assert not any(line.startswith("offs") for line in lines)  # the advance is gone
    assert "# advance" in lines and lines[lines.index("# advance") + 1] == "a_ptrs += BK"  # its comment stays
    again = parse_source(text, "k.py")
    assert rewrite_inductions(again, discover(again)) is None  # idempotent: nothing left to rewrite


@pytest.mark.parametrize("span, advance, prelude, after, why", [
    ("0, tl.cdiv(K, BK)", "offs += BK", "", "tl.store(c_ptr + offs, acc)", "read after the loop"),
    ("0, tl.cdiv(K, BK)", "offs += k", "", "", "an advance that changes in the loop"),
    ("0, tl.cdiv(K, BK)", "offs += BK\n        offs += BK", "", "", "advanced twice"),
    ("0, tl.cdiv(K, BK)", "offs += BK\n        c = offs", "", "", "read after its advance"),
    ("0, tl.cdiv(K, BK)", "offs *= 2", "", "", "not an addition"),
    ("0, tl.cdiv(K, BK)", "offs += BK", "offs = offs + 1", "", "assigned twice before the loop"),
])
def test_what_is_left_as_written(span: str, advance: str, prelude: str, after: str, why: str) -> None:
    assert rewrite(span, advance, prelude, after) is None, why


def test_a_pointer_ring_is_left_to_the_rules() -> None:
    """The tile pointers (`a_ptrs += BK`) are the pointer rings' carried state: never rewritten."""
    text = rewrite("0, tl.cdiv(K, BK)")
    assert text is not None and "a_ptrs += BK" in text and "b_ptrs += BK" in text


def test_a_loop_without_a_dot_is_left_as_written() -> None:
    text = KERNEL.replace("acc = tl.dot(a, b, acc)", "acc += a + b").replace("RANGE", "0, tl.cdiv(K, BK)") \
        .replace("ADVANCE", "offs += BK").replace("PRELUDE", "pass").replace("AFTER", "pass")
    source = parse_source(text, "k.py")
    assert rewrite_inductions(source, discover(source)) is None


@pytest.mark.parametrize("span, advance", [("0, tl.cdiv(K, BK)", "offs += BK"), ("0, K, BK", "offs += BK"),
                                           ("lo, K, BK", "offs += BK"), ("0, K, BK", "offs += 2 * BK"),
                                           ("lo, tl.cdiv(K, BK)", "offs += BK")])
def test_the_rewritten_loop_reads_the_same_values(span: str, advance: str) -> None:
    """Both loops run in Python with torch for `tl`: the masks of every iteration are equal."""
    text = rewrite(span, advance)
    assert text is not None
    original = KERNEL.replace("RANGE", span).replace("ADVANCE", advance).replace("PRELUDE", "pass") \
        .replace("AFTER", "pass")
    tl = types.SimpleNamespace(arange=lambda lo, hi: torch.arange(lo, hi), cdiv=lambda a, b: -(-a // b),
                               zeros=lambda *a, **k: 0, load=lambda p, mask: mask.clone(), dot=lambda a, b, acc: acc
                               + [a], store=lambda *a: None, float32=None, constexpr=int)
    for K, BK, lo in ((100, 16, 0), (100, 16, 2), (257, 32, 1), (64, 64, 0)):
        masks = []
        for code in (original, text):
            body = code.split("def mm(")[1].split("):\n", 1)[1]
            scope = {"tl": tl, "K": K, "BK": BK, "lo": lo, "a_ptr": 0, "b_ptr": 0, "c_ptr": 0}
            exec(body.replace("tl.zeros((BK, BK), dtype=tl.float32)", "[]").replace("    ", "", 1)  # noqa: S102
                 .replace("\n    ", "\n"), scope)
            masks.append(scope["acc"])
        assert len(masks[0]) == len(masks[1]) > 0
        assert all(torch.equal(x, y) for x, y in zip(*masks)), (span, advance, K, BK, lo)


def test_an_offset_tensor_made_from_index_vectors_is_read_from_the_loop_variable() -> None:
    """`w_offs = offs[:, None] * 2 + offs[None, :]` (made from an `arange` vector, not by one) advanced by a
    loop-invariant `K * BK`: its reads become `(w_offs + k * (K * BK))`, its advance is dropped."""
    text = KERNEL.replace("PRELUDE", "w_offs = offs[:, None] * 2 + offs[None, :]").replace(
        "RANGE", "0, tl.cdiv(K, BK)").replace("ADVANCE", "w_offs += K * BK").replace("AFTER", "pass").replace(
        "b = tl.load(b_ptrs, mask=mask)", "b = tl.load(b_ptr + w_offs, mask=mask)")
    source = parse_source(text, "k.py")
    result = rewrite_inductions(source, discover(source))
    assert result is not None
    assert "b = tl.load(b_ptr + (w_offs + k * (K * BK)), mask=mask)" in result[0]
    assert "w_offs += K * BK" not in result[0]


ATTENTION_ADVANCED = '''import torch
import triton
import triton.language as tl


@triton.jit
def attn(q_ptr, k_ptr, v_ptr, o_ptr, N_CTX, qk_scale, lo,
         HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=offs_m[:, None] < N_CTX, other=0.0)
    k_ptrs = k_ptr + offs_d[:, None] + offs_n[None, :] * HEAD_DIM
    v_ptrs = v_ptr + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    k_ptrs += lo * HEAD_DIM
    v_ptrs += lo * HEAD_DIM
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in range(lo, N_CTX, BLOCK_N):
        valid = (start_n + offs_n) < N_CTX
        k = tl.load(k_ptrs, mask=valid[None, :], other=0.0)
        qk = tl.dot(q, k)
        qk = tl.where(valid[None, :], qk * qk_scale, -1.0e6)
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(v_ptrs, mask=valid[:, None], other=0.0)
        acc = tl.dot(p.to(tl.float16), v, acc)
        m_i = m_ij
        k_ptrs += BLOCK_N * HEAD_DIM
        v_ptrs += BLOCK_N * HEAD_DIM
    acc = acc / l_i[:, None]
    tl.store(o_ptr + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc.to(tl.float16), mask=offs_m[:, None] < N_CTX)


def run(q, k, v, lo):
    o = torch.zeros_like(q)
    attn[(triton.cdiv(q.shape[0], 16),)](q, k, v, o, q.shape[0], 0.25, lo, HEAD_DIM=16, BLOCK_M=16, BLOCK_N=16)
    return o
'''

RUN_BOTH = """
import importlib.util, sys
import torch

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

source, rewritten = load(sys.argv[1], "source"), load(sys.argv[2], "rewritten")
for n_ctx, lo in ((40, 0), (70, 16), (33, 0)):
    torch.manual_seed(n_ctx)
    q, k, v = (torch.randn(n_ctx, 16, dtype=torch.float16) for _ in range(3))
    assert torch.equal(source.run(q, k, v, lo), rewritten.run(q, k, v, lo)), (n_ctx, lo)
print("SAME")
"""


def test_an_attention_loop_reads_its_advanced_pointer_tiles_from_the_loop_variable(tmp_path) -> None:
    """In a flash-attention loop (two dots and the online softmax's `max`), pointer tiles advanced after their loads
    (`k_ptrs += BLOCK_N * HEAD_DIM`, started at `lo` before the loop) are read at the iteration's offset, in 64 bits
    (the attention rules read an iteration's addresses from the loop variable; no pointer ring carries them); run by
    Triton's interpreter, the rewritten kernel gives the source's outputs bit for bit, on ragged lengths."""
    import os
    import subprocess
    import sys

    source = parse_source(ATTENTION_ADVANCED, "k.py")
    text, _ = rewrite_inductions(source, discover(source))
    assert "k_ptrs += BLOCK_N * HEAD_DIM" not in text and "v_ptrs += BLOCK_N * HEAD_DIM" not in text
    assert "tl.load((k_ptrs + ((tl.cast(start_n, tl.int64) - lo) // BLOCK_N) * (BLOCK_N * HEAD_DIM))" in text
    assert "k_ptrs += lo * HEAD_DIM" in text  # (before the loop: where the tiles start)
    (tmp_path / "source.py").write_text(ATTENTION_ADVANCED)
    (tmp_path / "rewritten.py").write_text(text)
    (tmp_path / "run.py").write_text(RUN_BOTH)
    result = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path / "source.py"),
                             str(tmp_path / "rewritten.py")], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TRITON_INTERPRET": "1"})
    assert result.returncode == 0 and "SAME" in result.stdout, result.stderr[-3000:]


@pytest.mark.parametrize("header, extra", [
    ("range(lo, N_CTX, step=BLOCK_N)", ""),  # a keyword step: not read
    ("range(0, N_CTX - lo, BLOCK_N)", "        start_n = start_n + lo\n"),  # the variable rebased in the body
    ("range(lo, N_CTX, BLOCK_N)", "        lo = start_n\n"),  # the header's start assigned in the body
])
def test_an_attention_loop_whose_index_cannot_be_read_from_its_header_is_left_as_written(header: str,
                                                                                          extra: str) -> None:
    text = ATTENTION_ADVANCED.replace("for start_n in range(lo, N_CTX, BLOCK_N):\n",
                                      f"for start_n in {header}:\n{extra}")
    assert header in text
    source = parse_source(text, "k.py")
    result = rewrite_inductions(source, discover(source))
    assert result is None or "k_ptrs += BLOCK_N * HEAD_DIM" in result[0]


def test_a_hint_on_the_loop_variable_keeps_the_rewrite() -> None:
    """`start_n = tl.multiple_of(start_n, BLOCK_N)` keeps the value: the pointers are still read from it."""
    text = ATTENTION_ADVANCED.replace("for start_n in range(lo, N_CTX, BLOCK_N):\n",
                                      "for start_n in range(lo, N_CTX, BLOCK_N):\n"
                                      "        start_n = tl.multiple_of(start_n, BLOCK_N)\n")
    source = parse_source(text, "k.py")
    result = rewrite_inductions(source, discover(source))
    assert result is not None and "k_ptrs += BLOCK_N * HEAD_DIM" not in result[0]


BRANCHED = '''import triton
import triton.language as tl


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, K, BK: tl.constexpr, EVEN_K: tl.constexpr):
    offs = tl.arange(0, BK)
    a_ptrs = a_ptr + offs
    b_ptrs = b_ptr + offs
    acc = tl.zeros((BK, BK), dtype=tl.float32)
    for k in range(tl.cdiv(K, BK)):
        if EVEN_K:
            mask = offs >= 0
        else:
            mask = offs < K
            offs += BK
        a = tl.load(a_ptrs, mask=mask)
        b = tl.load(b_ptrs, mask=mask)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK
    tl.store(c_ptr, acc)
'''


@pytest.mark.parametrize("change, rewritten", [
    ("", True),
    # read outside the branch that advances it: the branch taken or not, other reads see other values
    ("        b = tl.load(b_ptrs, mask=mask)\n", False),
    ("if EVEN_K:", False),  # (with the edit below: a test decided at run time)
])
def test_an_index_advanced_in_a_compile_time_branch_is_read_from_the_loop_variable(change: str,
                                                                                  rewritten: bool) -> None:
    """FlagGems' style: the K offsets advanced in the `else:` of `if DIVISIBLE_K:`, read in that branch alone. Triton
    takes the branch in every iteration or in none, so inside it the offsets are the loop variable's again."""
    text = BRANCHED
    if change.startswith("        b = "):
        text = text.replace(change, "        b = tl.load(b_ptrs + offs, mask=mask)\n")
    elif change:
        text = text.replace(change, "if K > 0:")
    source = parse_source(text, "k.py")
    result = rewrite_inductions(source, discover(source))
    if not rewritten:
        assert result is None
        return
    assert result is not None
    lines = [line.strip() for line in result[0].splitlines()]
    assert "mask = (offs + k * BK) < K" in lines
    assert "offs += BK" not in lines
    assert "mask = offs >= 0" in lines  # the other branch as written
    again = parse_source(result[0], "k.py")
    assert rewrite_inductions(again, discover(again)) is None
