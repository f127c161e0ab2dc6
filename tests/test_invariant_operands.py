"""`transpile.passes.invariant_operands`: a dot operand computed the same way every iteration (a cast, a transpose of
a tile made before the loop) is made once before the loop, under a note, and the dots read the name; operands that
read what the loop binds, or call anything but casts and rearrangements, are left as written."""

from __future__ import annotations

import pytest

from transpile.discover import discover
from transpile.passes.invariant_operands import hoist_invariant_operands
from transpile.source import parse_source

KERNEL = '''import triton
import triton.language as tl


@triton.jit
def k(q_ptr, k_ptr, o_ptr, T, scale, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + offs_m[:, None] * D + offs_d[None, :]) * scale
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    # the scores of every key block
    for start in range(0, T, BN):
        kt = tl.load(k_ptr + (start + offs_n)[:, None] * D + offs_d[None, :])
        acc += tl.dot(OPERAND, tl.trans(kt))
    tl.store(o_ptr + offs_m[:, None] * BN + offs_n[None, :], acc)
'''


def rewritten(text: str) -> str | None:
    source = parse_source(text, "k.py")
    result = hoist_invariant_operands(source, discover(source))
    return None if result is None else result[0]


def test_a_cast_of_a_tile_made_before_the_loop_is_made_once() -> None:
    text = rewritten(KERNEL.replace("OPERAND", "q.to(tl.float16)"))
    assert text is not None
    lines = [line.strip() for line in text.splitlines()]
    hoisted = lines.index("q_dot = q.to(tl.float16)")
    assert lines[hoisted - 2:hoisted] == [
        "# the scores of every key block",
        "# triton-transpile: the dot operand `q.to(tl.float16)`, the same every iteration, made once before the loop."]
    assert lines[hoisted + 1] == "for start in range(0, T, BN):"
    assert "acc += tl.dot(q_dot, tl.trans(kt))" in lines
    assert rewritten(text) is None  # idempotent


def test_one_name_for_an_operand_two_dots_read() -> None:
    text = rewritten(KERNEL.replace("OPERAND", "q.to(tl.float16)").replace(
        "        acc += tl.dot(q_dot_placeholder", "").replace(
        "        acc += tl.dot(q.to(tl.float16), tl.trans(kt))\n",
        "        acc += tl.dot(q.to(tl.float16), tl.trans(kt))\n        acc += tl.dot(q.to(tl.float16), tl.trans(kt))\n"))
    assert text is not None
    assert text.count("q_dot = q.to(tl.float16)") == 1 and text.count("tl.dot(q_dot, tl.trans(kt))") == 2


@pytest.mark.parametrize("operand", [
    "q",  # a name already
    "tl.trans(kt)",  # reads the loop's own tile
    "(q * start).to(tl.float16)",  # reads the loop variable
    "tl.load(q_ptr + offs_m[:, None] * D + offs_d[None, :])",  # a load, not a rearrangement
    "tl.exp(q).to(tl.float16)",  # arithmetic through a call other than a cast
])
def test_other_operands_are_left_as_written(operand: str) -> None:
    assert rewritten(KERNEL.replace("OPERAND", operand)) is None
