"""`transpile.passes.operand_names`: a dot operand computed in the loop from a tile the loop loads (a cast, a cast of a
transpose) is named on a line of its own before the dot, the dot reading the name (transposed where the operand
was); operands that are names, transposes of names, computed from tiles the loop does not load, or through calls
other than casts and rearrangements are left as written. Through the engine, an attention loop whose scores' dot
reads such an operand is pipelined on gfx950, and the new line maps to the dot's."""

from __future__ import annotations

import pytest

from transpile.discover import discover
from transpile.passes.operand_names import name_dot_operands
from transpile.source import parse_source

KERNEL = '''import triton
import triton.language as tl


@triton.jit
def k(q_ptr, k_ptr, o_ptr, T, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + offs_m[:, None] * D + offs_d[None, :])
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for start in range(0, T, BN):
        kt = tl.load(k_ptr + (start + offs_n)[:, None] * D + offs_d[None, :])
        # the scores of this key block
        acc += tl.dot(q, OPERAND)
    tl.store(o_ptr + offs_m[:, None] * BN + offs_n[None, :], acc)
'''


def rewritten(text: str) -> str | None:
    source = parse_source(text, "k.py")
    result = name_dot_operands(source, discover(source))
    return None if result is None else result[0]


@pytest.mark.parametrize("operand, named, dot", [
    ("tl.trans(kt.to(q.dtype))", "kt_op = kt.to(q.dtype)", "acc += tl.dot(q, tl.trans(kt_op))"),
    ("kt.to(q.dtype).T", "kt_op = kt.to(q.dtype)", "acc += tl.dot(q, tl.trans(kt_op))"),
    # a cast of a transpose: the cast named, the dot reading its transpose
    ("tl.trans(kt).to(q.dtype)", "kt_op = kt.to(q.dtype)", "acc += tl.dot(q, tl.trans(kt_op))"),
    ("kt.trans(1, 0).to(tl.float16)", "kt_op = kt.to(tl.float16)", "acc += tl.dot(q, tl.trans(kt_op))"),
    ("(kt * 2.0).to(tl.float16).T", "kt_op = (kt * 2.0).to(tl.float16)", "acc += tl.dot(q, tl.trans(kt_op))"),
])
def test_a_computed_operand_gets_a_line_of_its_own(operand: str, named: str, dot: str) -> None:
    text = rewritten(KERNEL.replace("OPERAND", operand))
    assert text is not None
    lines = [line.strip() for line in text.splitlines()]
    at = lines.index(named)
    assert lines[at - 1] == "# the scores of this key block"  # (the dot's comment stays above what it computes)
    assert lines[at + 1] == dot
    assert rewritten(text) is None  # idempotent


@pytest.mark.parametrize("operand", [
    "tl.trans(kt)",  # the transpose of a name: the planners read it as it is
    "tl.trans(q.to(kt.dtype))",  # computed from a tile made before the loop (`kt` read for its type only)
    "tl.trans(tl.exp(kt))",  # through a call other than a cast or a rearrangement
    "tl.trans(tl.where(kt > 0, kt, 0.0))",
])
def test_other_operands_are_left_as_written(operand: str) -> None:
    assert rewritten(KERNEL.replace("OPERAND", operand)) is None


def test_an_operand_of_a_guarded_dot_is_named_before_the_guard() -> None:
    # (`if i_k >= 0: b_o += tl.dot(...)`, FLA's form: a test of scalars around the one dot; the cast runs either way)
    text = rewritten(KERNEL.replace("        acc += tl.dot(q, OPERAND)\n",
                                    "        if start > 0:\n            acc += tl.dot(q, tl.trans(kt).to(q.dtype))\n"))
    assert text is not None
    lines = [line.strip() for line in text.splitlines()]
    at = lines.index("kt_op = kt.to(q.dtype)")
    assert lines[at - 1] == "# the scores of this key block"
    assert lines[at + 1:at + 3] == ["if start > 0:", "acc += tl.dot(q, tl.trans(kt_op))"]
    assert rewritten(text) is None  # idempotent


@pytest.mark.parametrize("branch", [
    # two branches: which operand is computed is decided there
    "        if start > 0:\n            acc += tl.dot(q, tl.trans(kt.to(q.dtype)))\n"
    "        else:\n            acc += tl.dot(q, tl.trans(kt))\n",
    # a test that calls something, and a branch of two statements
    "        if tl.sum(kt) > 0:\n            acc += tl.dot(q, tl.trans(kt.to(q.dtype)))\n",
    "        if start > 0:\n            kt = kt * 2\n            acc += tl.dot(q, tl.trans(kt.to(q.dtype)))\n",
])
def test_an_operand_under_another_branch_of_the_loop_is_left_as_written(branch: str) -> None:
    assert rewritten(KERNEL.replace("        acc += tl.dot(q, OPERAND)\n", branch)) is None


def test_the_attention_loop_is_pipelined_and_the_new_line_maps_to_the_dot(tmp_path) -> None:
    from pathlib import Path

    from transpile.engine import prepare, translate_source
    from transpile.targets import get_target

    fixture = (Path(__file__).resolve().parent.parent / "fixtures" / "attention_fwd.py").read_text()
    assert "qk = tl.dot(q, tl.trans(k))" in fixture
    text = fixture.replace("qk = tl.dot(q, tl.trans(k))", "qk = tl.dot(q, k.to(q.dtype).T)")
    prepared = prepare(text, "attention_fwd.py")
    lines = prepared.source.text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip() == "k_op = k.to(q.dtype)")
    assert lines[at + 1].strip() == "qk = tl.dot(q, tl.trans(k_op))"
    dot_line = text.splitlines().index("        qk = tl.dot(q, k.to(q.dtype).T)") + 1
    assert prepared.source.line_map[at + 1] == dot_line and prepared.source.line_map[at + 2] == dot_line
    result = translate_source(text, "attention_fwd.py", get_target("gfx950"), prepared=prepared)
    assert "warp_pipeline_stage" in result.text and "k_op = " in result.text
    # the kernel as written is what the variant keeps for launches the Gluon kernel does not take
    assert "qk = tl.dot(q, k.to(q.dtype).T)" in result.text


LOADED_AND_CAST = '''import triton
import triton.language as tl


@triton.jit
def k(a_ptr, b_ptr, o_ptr, K, T: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        # both tiles cast to the dot's type as they are loaded
        a = tl.load(a_ptr + offs_m[:, None] * K + (k0 + offs_k)[None, :]).to(T)  # (a comment of the line)
        b = tl.load(b_ptr + (k0 + offs_k)[:, None] * BN + offs_n[None, :], mask=MASK, other=0.0).to(T)
        scale = tl.load(a_ptr + offs_m).to(tl.float32)
        acc += tl.dot(a, b)
    tl.store(o_ptr + offs_m[:, None] * BN + offs_n[None, :], acc)
'''


def test_an_operand_loaded_and_cast_on_one_line_is_split_into_the_load_and_the_cast() -> None:
    """`a = tl.load(...).to(T)` -> `a_tile = tl.load(...)` then `a = a_tile.to(T)`: the comments above stay above the
    load, the line's own comment goes with the cast; a load cast that no dot reads (`scale`) is left as written."""
    text = rewritten(LOADED_AND_CAST.replace("MASK", "offs_n[None, :] < BN"))
    assert text is not None
    lines = [line.strip() for line in text.splitlines()]
    at = lines.index("a_tile = tl.load(a_ptr + offs_m[:, None] * K + (k0 + offs_k)[None, :])")
    assert lines[at - 1] == "# both tiles cast to the dot's type as they are loaded"
    assert lines[at + 1] == "a = a_tile.to(T)  # (a comment of the line)"
    assert lines[at + 2] == "b_tile = tl.load(b_ptr + (k0 + offs_k)[:, None] * BN + offs_n[None, :], " \
                            "mask=offs_n[None, :] < BN, other=0.0)"
    assert lines[at + 3] == "b = b_tile.to(T)"
    assert lines[at + 4] == "scale = tl.load(a_ptr + offs_m).to(tl.float32)"
    assert rewritten(text) is None  # idempotent


def test_a_tile_an_operand_is_computed_from_is_split_and_an_address_index_is_not() -> None:
    """A gate loaded and cast beside its tile, which the operand is computed from (`ag = (a * tl.exp(g)).to(T)`), is
    split as the operand itself would be; an index vector loaded and cast to address a load (`rows`) is not (the
    traversal stops at loads: their addresses are not part of the operand's value)."""
    text = LOADED_AND_CAST.replace("MASK", "offs_n[None, :] < BN").replace(
        "        scale = tl.load(a_ptr + offs_m).to(tl.float32)\n        acc += tl.dot(a, b)",
        "        rows = tl.load(o_ptr + offs_m).to(tl.int64)\n"
        "        g = tl.load(a_ptr + rows[:, None] * K + (k0 + offs_k)[None, :]).to(tl.float32)\n"
        "        ag = (a * tl.exp(g)).to(T)\n"
        "        acc += tl.dot(ag, b)")
    out = rewritten(text)
    assert out is not None
    lines = [line.strip() for line in out.splitlines()]
    assert "g_tile = tl.load(a_ptr + rows[:, None] * K + (k0 + offs_k)[None, :])" in lines
    assert lines[lines.index("g_tile = tl.load(a_ptr + rows[:, None] * K + (k0 + offs_k)[None, :])") + 1] == \
        "g = g_tile.to(tl.float32)"
    assert "rows = tl.load(o_ptr + offs_m).to(tl.int64)" in lines
    assert rewritten(out) is None  # idempotent


def test_a_loaded_and_cast_operand_is_pipelined_through_the_engine() -> None:
    """Through the engine the loop is pipelined on gfx950 (the cast runs on the slot read: a computed operand), the
    new lines map to the line they came from (the variant is compiled with the goldens, test_compile)."""
    from pathlib import Path

    from transpile.engine import prepare, translate_source
    from transpile.targets import get_target

    fixture = (Path(__file__).resolve().parent.parent / "fixtures" / "suite_chunk_scores.py").read_text()
    load_line = next(i for i, line in enumerate(fixture.splitlines(), 1) if line.strip().startswith("q = tl.load("))
    prepared = prepare(fixture, "suite_chunk_scores.py")
    lines = prepared.source.text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("q_tile = tl.load("))
    assert lines[at + 1].strip() == "q = q_tile.to(dot_dtype)"
    assert prepared.source.line_map[at + 1] == load_line and prepared.source.line_map[at + 2] == load_line
    result = translate_source(fixture, "suite_chunk_scores.py", get_target("gfx950"), prepared=prepared)
    assert "warp_pipeline_stage" in result.text and "q = q_tile.to(dot_dtype)" in result.text
    assert not [d for d in result.diagnostics if d.code == "TT041"]
