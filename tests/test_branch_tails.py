"""A name of one rank in one branch of a compile-time `if` and of another in the other (`passes/branch_tails.py`):
the code after the `if` is copied into each branch, the `else` copy's names renamed, so that every name has one
rank; the engine does it only where the layout analysis refused such a name, and keeps the source otherwise."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from transpile.engine import translate_source
from transpile.passes.branch_tails import split_branches
from transpile.targets import get_target
from transpile.verify import verify

HEAD = "import triton\nimport triton.language as tl\n\n\n"

# aiter's KV-cache style: a flat layout, or pairs of a reshaped tile, chosen by a constexpr flag
PAIRS = HEAD + '''@triton.jit
def store_pairs(x_ptr, y_ptr, FLAT: tl.constexpr, B: tl.constexpr):
    offs = tl.arange(0, B)
    x = tl.load(x_ptr + offs)
    if FLAT:
        ptrs = y_ptr + offs
    else:
        x = tl.reshape(x, (B // 2, 2))
        ptrs = y_ptr + tl.arange(0, B // 2)[:, None] * 2 + tl.arange(0, 2)[None, :]
    # the store reads the rank its branch gave
    tl.store(ptrs, x * 2,
             mask=x == x)
'''

# FlagGems' cross-entropy style: a weight of ones where none is given (`w_ptr is None`), else a loaded row
WEIGHTS = HEAD + '''@triton.jit
def weighted(x_ptr, w_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    rows = tl.arange(0, 4)
    x = tl.load(x_ptr + rows[:, None] * BLOCK + offs[None, :])
    if w_ptr is None:
        w = tl.full([BLOCK], 1.0, tl.float32)
    else:
        w = tl.load(w_ptr + offs)[None, :]
    tl.store(out_ptr + rows[:, None] * BLOCK + offs[None, :], x * w)
'''


def test_the_code_after_the_if_is_copied_into_each_branch() -> None:
    text, lines = split_branches(PAIRS, [9])
    assert text == HEAD + '''@triton.jit
def store_pairs(x_ptr, y_ptr, FLAT: tl.constexpr, B: tl.constexpr):
    offs = tl.arange(0, B)
    x = tl.load(x_ptr + offs)
    if FLAT:
        ptrs = y_ptr + offs
        # the store reads the rank its branch gave
        tl.store(ptrs, x * 2,
                 mask=x == x)
    else:
        x_2 = x
        x_2 = tl.reshape(x_2, (B // 2, 2))
        ptrs_2 = y_ptr + tl.arange(0, B // 2)[:, None] * 2 + tl.arange(0, 2)[None, :]
        # the store reads the rank its branch gave
        tl.store(ptrs_2, x_2 * 2,
                 mask=x_2 == x_2)
'''
    # every line maps to the one it came from: the copies to the tail's lines, the copy of `x` to the `else:`
    assert lines[11:14] == [14, 15, 16] and lines[14:16] == [11, 11] and lines[18:21] == [14, 15, 16]


def test_a_test_decided_at_run_time_is_left_alone() -> None:
    assert split_branches(PAIRS.replace("if FLAT:", "if tl.load(x_ptr) > 0:"), [9]) is None
    assert split_branches(PAIRS.replace("FLAT: tl.constexpr", "FLAT"), [9]) is None


@pytest.mark.parametrize("target", ["gfx950", "sm90"])
@pytest.mark.parametrize(("text", "values"), [
    (PAIRS, {"x_ptr": "*fp32", "y_ptr": "*fp32", "B": 64, "FLAT": False}),
    (WEIGHTS, {"x_ptr": "*fp32", "w_ptr": "*fp32", "out_ptr": "*fp32", "BLOCK": 64}),
], ids=["pairs", "weights"])
def test_kernels_whose_names_change_rank_per_branch_translate_and_compile(
        text: str, values: dict[str, object], target: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    result = translate_source(text, "k.py", get_target(target))
    (kernel,) = result.functions
    assert kernel.translated, [d.format() for d in result.diagnostics]
    assert not any("tensor after this `if` branch" in d.message for d in result.diagnostics)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    compiled = [c for c in verify(result, values) if c.kernel == kernel.name]
    assert compiled and all(c.ok for c in compiled), [(c.config, c.message) for c in compiled]


def test_a_function_still_refused_keeps_its_own_text() -> None:
    """Where the copies leave another refusal (`x[0]`, which Triton rejects too), the kernel is kept as written:
    not as the copies."""
    text = PAIRS.replace("    tl.store(ptrs, x * 2,", "    tl.store(y_ptr, x[0])\n    tl.store(ptrs, x * 2,")
    result = translate_source(text, "k.py", get_target("gfx950"))
    assert not result.functions[0].translated
    assert "x_2" not in result.text and "        x = tl.reshape(x, (B // 2, 2))\n" in result.text
    assert any("tensor after this `if` branch" in d.message and d.line == 9 for d in result.diagnostics)


# A helper that branches on whether a parameter is None (aiter's `_load_fn` with an optional second offset) and is
# called with a tensor in one place and None in another: refused for its two-rank name, it got no copies per kind of
# call; its branches take the code after the `if` first, then it is copied per kind (`transpile.passes.specialise`)
OPTIONAL = HEAD + '''@triton.jit
def _load_tile(ptr, rows, cols, n_rows):
    if cols is not None:
        offs = rows[:, None] * 64 + cols[None, :]
        mask = rows[:, None] < n_rows
    else:
        offs = rows
        mask = rows < n_rows
    x = tl.load(ptr + offs, mask=mask, other=0.0)
    return tl.sum(x * 2.0)


@triton.jit
def sums(x_ptr, out_ptr, n_rows, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    whole = _load_tile(x_ptr, rows, tl.arange(0, 64), n_rows)
    first = _load_tile(x_ptr, rows, None, n_rows)
    tl.store(out_ptr + tl.program_id(0), whole + first)
'''


@pytest.mark.parametrize("target", ["gfx950", "sm90"])
def test_a_helper_branching_on_an_optional_argument_is_split_then_specialised(
        target: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = translate_source(OPTIONAL, "k.py", get_target(target))
    assert all(f.translated for f in result.functions), [d.format() for d in result.diagnostics]
    assert not [d for d in result.diagnostics if d.code in ("TT010", "TT012")]
    assert "first = _load_tile_s(x_ptr, rows, None, n_rows)" in result.text
    assert "        offs_2 = rows\n" in result.text  # (the `else` branch's copy of the code after the `if`)
    compiled = verify(result, {"x_ptr": "*fp32", "out_ptr": "*fp32", "n_rows": "i32", "BLOCK": 64})
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


# An `elif` chain without `else` (flash-attention's bias: a vector per key, or a matrix, chosen by a string flag)
CHAIN = HEAD + '''@triton.jit
def biased(x_ptr, b_ptr, y_ptr, stride, KIND: tl.constexpr, B: tl.constexpr):
    rows = tl.arange(0, B)
    x = tl.load(x_ptr + rows[:, None] * B + rows[None, :])
    if KIND == "vector":
        b_ptrs = b_ptr + rows
    elif KIND == "matrix":
        b_ptrs = b_ptr + rows[:, None] * stride + rows[None, :]
    bias = tl.load(b_ptrs)
    tl.store(y_ptr + rows[:, None] * B + rows[None, :], x + bias)
'''


def test_an_elif_chain_gives_every_clause_and_a_new_else_the_code_after_it() -> None:
    """Each clause of `if`/`elif` gets its copy of the code after the chain, its names renamed, and so does an `else:`
    the chain lacked (the code after it runs when no test holds), where a name only the clauses bind is `None` (the
    source cannot compile a read of it there either); every line maps back to its own, the new `else:` to the
    `if`."""
    text, lines = split_branches(CHAIN, [9])
    assert text == HEAD + '''@triton.jit
def biased(x_ptr, b_ptr, y_ptr, stride, KIND: tl.constexpr, B: tl.constexpr):
    rows = tl.arange(0, B)
    x = tl.load(x_ptr + rows[:, None] * B + rows[None, :])
    if KIND == "vector":
        b_ptrs = b_ptr + rows
        bias = tl.load(b_ptrs)
        tl.store(y_ptr + rows[:, None] * B + rows[None, :], x + bias)
    elif KIND == "matrix":
        b_ptrs_2 = b_ptr + rows[:, None] * stride + rows[None, :]
        bias_2 = tl.load(b_ptrs_2)
        tl.store(y_ptr + rows[:, None] * B + rows[None, :], x + bias_2)
    else:
        b_ptrs_3 = None
        bias_3 = tl.load(b_ptrs_3)
        tl.store(y_ptr + rows[:, None] * B + rows[None, :], x + bias_3)
'''
    assert lines[9:] == [9, 10, 13, 14, 11, 12, 13, 14, 9, 9, 13, 14]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["gfx950", "sm90"])
def test_a_kernel_with_an_elif_chain_of_two_ranks_translates_and_compiles(target: str, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    result = translate_source(CHAIN, str(tmp_path / "k.py"), get_target(target))
    assert result.functions[0].translated, [d.format() for d in result.diagnostics]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for kind in ("vector", "matrix"):
        compiled = verify(result, {"x_ptr": "*fp32", "b_ptr": "*fp32", "y_ptr": "*fp32", "B": 32, "KIND": kind})
        assert compiled and all(c.ok for c in compiled), [(kind, c.label, c.message) for c in compiled]
