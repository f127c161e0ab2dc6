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


# FLA's style: the operand cast to the element type of a tile the loop loads, through a pointer the loop makes
TYPED = '''import triton
import triton.language as tl


@triton.jit
def k(a_ptr, do, dv, T, BT: tl.constexpr, BV: tl.constexpr, V: tl.constexpr):
    o_t = tl.arange(0, BT)
    do += tl.program_id(0) * T * V
    b_A = tl.load(a_ptr + o_t[:, None] * BT + o_t[None, :])
    for i_v in range(tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        p_do = do + o_t[:, None] * V + o_v[None, :]
        b_do = tl.load(p_do)
        b_dv = tl.dot(b_A.to(b_do.dtype), b_do)
        tl.store(dv + o_t[:, None] * V + o_v[None, :], b_dv)
'''


def test_the_element_type_of_a_tile_the_loop_loads_is_its_pointers() -> None:
    text = rewritten(TYPED)
    assert text is not None
    lines = [line.strip() for line in text.splitlines()]
    hoisted = lines.index("b_A_dot = b_A.to(do.dtype.element_ty)")
    assert lines[hoisted - 2:hoisted] == [
        "# triton-transpile: the dot operand `b_A.to(b_do.dtype)`, the same every iteration, made once before the loop.",
        "# (`b_do.dtype` is `do.dtype.element_ty`, the element type of the tile's pointer.)"]
    assert lines[hoisted + 1].startswith("for i_v in range(")
    assert "b_dv = tl.dot(b_A_dot, b_do)" in lines
    assert rewritten(text) is None  # idempotent


@pytest.mark.parametrize("change", [
    ("    do += tl.program_id(0) * T * V\n", "    do = do.to(tl.pointer_type(tl.float32))\n"),  # a cast pointer
    ("        b_do = tl.load(p_do)\n", "        b_do = tl.load(p_do)\n        b_do = b_do * 2\n"),  # rebound tile
    ("        p_do = do + o_t", "        p_do = (do + 1).to(tl.pointer_type(tl.float32)) + o_t"),  # ... in the loop
])
def test_a_tile_type_not_known_before_the_loop_is_left(change: tuple[str, str]) -> None:
    assert change[0] in TYPED
    assert rewritten(TYPED.replace(*change)) is None


def test_the_element_type_of_a_value_cast_to_a_loaded_tiles_type_is_its_pointers() -> None:
    """FLA's `recompute_w_u_fwd_kernel`: `b_vb = (b_v * b_beta[:, None]).to(b_v.dtype)`, then `b_A.to(b_vb.dtype)`:
    `b_vb` has the element type of `v`, known before the loop."""
    text = TYPED.replace("        b_dv = tl.dot(b_A.to(b_do.dtype), b_do)\n",
                         "        b_dob = (b_do * 2).to(b_do.dtype)\n        b_dv = tl.dot(b_A.to(b_dob.dtype), b_dob)\n")
    out = rewritten(text)
    assert out is not None
    lines = [line.strip() for line in out.splitlines()]
    assert "b_A_dot = b_A.to(do.dtype.element_ty)" in lines and "b_dv = tl.dot(b_A_dot, b_dob)" in lines
    assert "# (`b_dob.dtype` is `do.dtype.element_ty`, the element type of the tile's pointer.)" in lines
    # (cast to a type the loop does not know before it: left as written)
    assert rewritten(text.replace(".to(b_do.dtype)\n", ".to(b_dv.dtype)\n")) is None


def test_a_tile_name_two_loops_bind_has_the_type_each_loop_loads() -> None:
    """aiter's extend attention reads `q.to(k.dtype)` in two loops, each loading its own `k` (the prefix from the
    KV cache, then the extension): in each loop, after its load, `k` has that load's pointer's element type."""
    second = ("    for i_v in range(tl.cdiv(V, BV)):\n        o_v = i_v * BV + tl.arange(0, BV)\n"
              "        b_do = tl.load(dv + o_t[:, None] * V + o_v[None, :])\n"
              "        b_dv = tl.dot(b_A.to(b_do.dtype), b_do)\n"
              "        tl.store(do + o_t[:, None] * V + o_v[None, :], b_dv)\n")
    out = rewritten(TYPED + second)
    assert out is not None
    lines = [line.strip() for line in out.splitlines()]
    assert "b_A_dot = b_A.to(do.dtype.element_ty)" in lines and "b_A_dot2 = b_A.to(dv.dtype.element_ty)" in lines
    assert lines.count("b_dv = tl.dot(b_A_dot, b_do)") == 1 and lines.count("b_dv = tl.dot(b_A_dot2, b_do)") == 1
    # (a dot before the loop's load reads the tile of the iteration before, or of before the loop: left as written)
    early = TYPED.replace("        b_do = tl.load(p_do)\n        b_dv = tl.dot(b_A.to(b_do.dtype), b_do)\n",
                          "        b_dv = tl.dot(b_A.to(b_do.dtype), b_do)\n        b_do = tl.load(p_do)\n")
    assert early != TYPED and rewritten(early) is None


FLAGGED = '''import triton
import triton.language as tl


@triton.jit
def mm(a_ptr, b_ptr, b2_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SECOND: tl.constexpr):
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a = tl.load(a_ptr + offs_m[:, None] * BK + offs_k[None, :])
    b_ptrs = b_ptr + offs_k[:, None] * BN + offs_n[None, :]
    b2_ptrs = b2_ptr + offs_k[:, None] * BN + offs_n[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        b = tl.load(b_ptrs)
        acc = tl.dot(a, b, acc)
        if SECOND:
            b2 = tl.load(b2_ptrs)
            acc = tl.dot(a.to(b2.dtype), b2, acc)
        b_ptrs += BK * BN
        b2_ptrs += BK * BN
    tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc.to(tl.float16))
'''


def test_an_operand_typed_by_a_tile_loaded_under_a_flag_is_made_before_its_copy_of_the_loop() -> None:
    """aiter's extend attention, `tl.dot(qpe.to(kpe.dtype), kpe, acc=qk)` with `kpe` loaded under `if BLOCK_DPE > 0:`:
    once the loop is copied per value of the flag, the copy that loads the tile makes the operand before it (the
    tile's pointer advanced by offsets in the loop keeps its element type)."""
    from transpile.engine import prepare

    text = prepare(FLAGGED, "k.py").source.text
    copy = text[text.index("if SECOND:"):text.index("else:")]
    assert "a_dot = a.to(b2_ptr.dtype.element_ty)" in copy and "acc = tl.dot(a_dot, b2, acc)" in copy
    assert copy.index("a_dot = a.to(") < copy.index("for k in range(")
