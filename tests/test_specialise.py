"""Helpers called with scalars in one place and tensors in another (`transpile.passes.specialise`).

Triton's JIT specialises a helper per combination of argument types; a Gluon helper's layouts are those of one kind
of call, so the tool copies the helper per other combination (TT012 was the refusal: 45 public functions on gfx950,
philox `u64_to_lohi`, bitonic `_compare_and_swap`, ...). Each case translates a small kernel, checks the copies and
the calls, and compiles the variant with Triton for an AMD target and sm90.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from transpile.engine import prepare, translate_source
from transpile.targets import get_target
from transpile.verify import verify

HEAD = "import triton\nimport triton.language as tl\n\n\n"

SPLIT = HEAD + '''@triton.jit
def u64_to_lohi(x):
    return (x >> 32).to(tl.uint32), (x & 0xFFFFFFFF).to(tl.uint32)


@triton.jit
def _scale(x, s):
    return x * s


@triton.jit
def seeds(out_ptr, y_ptr, seed, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    c0, c1 = u64_to_lohi(seed.to(tl.uint64))
    lo, hi = u64_to_lohi(offs.to(tl.uint64) * 3)
    tl.store(out_ptr + offs, (lo ^ c0 ^ c1 ^ hi).to(tl.int32), mask=offs < n)
    rows = tl.arange(0, 16)
    x = tl.load(y_ptr + rows[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :])
    x = _scale(x, _scale(rows, 2)[:, None].to(tl.float32))
    tl.store(y_ptr + rows[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :], _scale(x, 0.5))
'''

VALUES = {"out_ptr": "*i32", "y_ptr": "*fp32", "seed": "i64", "BLOCK": 128}


def test_a_helper_called_with_scalars_and_tensors_is_copied_per_kind(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for target in ("sm90", "gfx950"):
        result = translate_source(SPLIT, str(tmp_path / "k.py"), get_target(target))
        assert all(f.translated for f in result.functions), [d.format() for d in result.diagnostics]
        assert not [d for d in result.diagnostics if d.code == "TT012"]
        text = result.text
        # the first call's kinds keep the name; the others call a copy named after the kinds that differ
        assert "c0, c1 = u64_to_lohi(seed.to(gl.uint64))" in text
        assert "lo, hi = u64_to_lohi_1d(offs.to(gl.uint64) * 3)" in text
        assert "def u64_to_lohi_1d(x):" in text
        # (the inner call of `_scale` is analysed first: rank-1 and a number; the others are rank 2)
        assert "_scale_2d2d(x, gl.convert_layout(_scale(rows, 2), " in text
        assert "_scale_2d(x, 0.5)" in text
        # the kept source kernel the launcher runs calls the Triton copies of the same helpers
        assert "lo, hi = _u64_to_lohi_1d_triton(offs.to(tl.uint64) * 3)" in text
        compiled = verify(result, VALUES)
        assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def test_a_copy_maps_back_to_the_helper_s_lines() -> None:
    """Every line of a copy is the helper's line it copies: a diagnostic inside the copy points at the user's line,
    and the lines after the copies keep theirs."""
    prepared = prepare(SPLIT, "k.py")
    source = prepared.source
    copy = prepared.facts.functions["u64_to_lohi_1d"].node
    helper_line = SPLIT.split("\n").index("def u64_to_lohi(x):") + 1
    assert source.position(copy.name)[0] == helper_line
    kernel = prepared.facts.functions["seeds"].node
    assert source.position(kernel.name)[0] == SPLIT.split("\n").index(
        "def seeds(out_ptr, y_ptr, seed, n, BLOCK: tl.constexpr):") + 1


def test_a_kept_kernel_calls_the_copy_of_its_kind(monkeypatch, tmp_path: Path) -> None:
    """A kernel kept as Triton (a construct with no Gluon translation) that calls a helper with scalars, beside a
    translated one that calls it with tensors: the kept kernel is written calling the scalar copy, kept as Triton
    with it, and the translated kernel calls the Gluon helper."""
    text = HEAD + '''@triton.jit
def _twice(x):
    return x * 2


@triton.jit
def vec_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, _twice(tl.load(x_ptr + offs)))


@triton.jit
def kept_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    x = tl.sort(tl.load(x_ptr + tl.arange(0, BLOCK)))
    tl.store(y_ptr + tl.arange(0, BLOCK), x + _twice(tl.program_id(0)))
'''
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = translate_source(text, str(tmp_path / "k.py"), get_target("gfx942"))
    outcomes = {f.name: f for f in result.functions}
    assert outcomes["vec_kernel"].translated and outcomes["_twice"].translated
    assert not outcomes["kept_kernel"].translated and not outcomes["_twice_s"].translated
    assert "x + _twice_s(tl.program_id(0)))" in result.text
    assert "@triton.jit\ndef _twice_s(x):\n    return x * 2" in result.text
    compiled = verify(result, {"x_ptr": "*fp32", "y_ptr": "*fp32", "BLOCK": 128})
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def test_a_file_whose_helpers_agree_is_not_rewritten() -> None:
    """One kind per helper: the text the analyses read is the file's own (nothing copied)."""
    text = HEAD + '''@triton.jit
def _twice(x):
    return x * 2


@triton.jit
def k(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, _twice(tl.load(x_ptr + offs)) + _twice(tl.load(y_ptr + offs)))
'''
    prepared = prepare(text, "k.py")
    assert prepared.source.text == text and set(prepared.facts.functions) == {"_twice", "k"}
