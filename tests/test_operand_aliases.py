"""`transpile.passes.operand_aliases`: a dot operand read through a name that renames or transposes a tile
(`arg = b` / `arg = b.T` in each copy of a loop unswitched on the operand's orientation) is read as the tile; and a
descriptor made in both branches of a constexpr `if` is translated in both (sm90), its loop kept as Triton where
the branches give it different block shapes (a ring's slots take one), with the reason."""

from __future__ import annotations

import pytest

from transpile.engine import prepare, translate_source
from transpile.targets import get_target

KERNEL = '''import triton
import triton.language as tl


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
       TRANS_B: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    if TRANS_B:  # B stored [N, K]
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    off_m = tl.program_id(0) * BM
    off_n = tl.program_id(1) * BN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = a_desc.load([off_m, k * BK])
        if TRANS_B:
            b = b_desc.load([off_n, k * BK])
            op_b = b.T
        else:
            b = b_desc.load([k * BK, off_n])
            op_b = b
        acc = tl.dot(a, op_b, acc)
    c_desc.store([off_m, off_n], acc.to(tl.float16))
'''


def test_each_copy_of_the_loop_multiplies_the_loaded_tile() -> None:
    text = prepare(KERNEL, "mm.py").source.text
    assert "op_b" not in text
    # (the copy that reads the tile transposed takes names of its own: `passes/unswitch.py`)
    assert "acc = tl.dot(a_2, tl.trans(b_2), acc)" in text and "acc = tl.dot(a, b, acc)" in text


def test_a_name_read_elsewhere_is_left_as_written() -> None:
    text = KERNEL.replace("        acc = tl.dot(a, op_b, acc)\n",
                          "        acc = tl.dot(a, op_b, acc)\n        acc += tl.sum(op_b.to(tl.float32))\n")
    assert "op_b" in prepare(text, "mm.py").source.text


def test_a_descriptor_made_in_both_branches_is_translated_in_both_and_its_loop_kept() -> None:
    result = translate_source(KERNEL, "mm.py", get_target("sm90"))
    (kernel,) = [f for f in result.functions if f.name == "mm"]
    assert not kernel.translated
    assert "the descriptor `b_desc` is made with 2 block shapes (in the branches of an `if`)" in kernel.kept_reason
    forced = translate_source(KERNEL, "mm.py", get_target("sm90"), gluon_always=True)
    gluon = forced.text.split("\ndef mm(")[1].split("\ndef ")[0]
    assert gluon.count("tma.make_tensor_descriptor(b_ptr") == 2 and "tl.make_tensor_descriptor" not in gluon


@pytest.mark.slow
@pytest.mark.parametrize("trans_b", [False, True])
def test_both_orientations_compile(trans_b: bool) -> None:
    from transpile.verify import verify

    result = translate_source(KERNEL, "mm.py", get_target("sm90"), gluon_always=True)
    compiled = verify(result, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "BM": 128, "BN": 128, "BK": 64,
                               "TRANS_B": trans_b}, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


TRANSPOSE_AXES = '''import triton
import triton.language as tl


@triton.jit
def dk(k_ptr, u_ptr, da_ptr, out_ptr, T, D: tl.constexpr, BC: tl.constexpr):
    o_d = tl.arange(0, D)
    o_c = tl.program_id(0) * BC + tl.arange(0, BC)
    da = tl.load(da_ptr + o_c[:, None] * BC + tl.arange(0, BC)[None, :])
    acc = tl.zeros([BC, D], dtype=tl.float32)
    for i in range(0, T, BC):
        o_kv = i + tl.arange(0, BC)
        kt = tl.load(k_ptr + o_d[:, None] + o_kv[None, :] * D)
        k = tl.trans(kt, 1, 0)
        acc = tl.dot(da.to(k.dtype), k, acc)
    tl.store(out_ptr + o_c[:, None] * D + o_d[None, :], acc)
'''


def test_a_transpose_spelling_its_axes_and_read_for_its_dtype_is_read_as_the_tile() -> None:
    """deltaformer's backward: `k = tl.trans(kt, 1, 0)` read by the dot and for its element type (`da.to(k.dtype)`):
    the dot reads `tl.trans(kt)`, the element type is `kt`'s, and the line goes."""
    text = prepare(TRANSPOSE_AXES, "dk.py").source.text
    assert "acc = tl.dot(da.to(kt.dtype), tl.trans(kt), acc)" in text and "k = tl.trans" not in text


def test_a_transpose_read_for_its_dtype_after_the_dot_is_left_as_written() -> None:
    text = TRANSPOSE_AXES.replace("        acc = tl.dot(da.to(k.dtype), k, acc)\n",
                                  "        acc = tl.dot(da.to(k.dtype), k, acc)\n        da = da.to(k.dtype)\n")
    assert "k = tl.trans(kt, 1, 0)" in prepare(text, "dk.py").source.text
