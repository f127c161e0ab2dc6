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
