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
        # (the inner call of `_scale` is analysed first: rank-1 and a number; the others are rank 2. Elementwise in
        # `rows`, its result keeps rows' layout, which is made where the broadcast needs it: no conversion)
        assert "_scale_2d2d(x, _scale(rows, 2)[:, None].to(gl.float32))" in text
        assert "rows = gl.arange(0, 16, layout=gl.SliceLayout(1, x_layout))" in text
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


def test_a_combine_function_also_called_with_tiles_gets_a_copy_for_the_elements(monkeypatch, tmp_path: Path) -> None:
    """A Welford combine called with tiles in the loop and passed to `tl.reduce` (which calls it on scalar elements):
    the reduction takes a copy for the elements (`welford_combine_s`); one Gluon helper for both did not compile
    ("expected convert_layout input to be a distributed_type"). Found by a review."""
    text = HEAD + '''@triton.jit
def welford_combine(mean_1, m2_1, w_1, mean_2, m2_2, w_2):
    delta = mean_2 - mean_1
    new_w = w_1 + w_2
    share = tl.where(new_w == 0.0, 0.0, w_2 / new_w)
    return mean_1 + delta * share, m2_1 + m2_2 + delta * delta * w_1 * share, new_w


@triton.jit
def welford_rows(x_ptr, mean_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    mean = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    m2 = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    w = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=mask, other=0.0)
        mean, m2, w = welford_combine(mean, m2, w, x, tl.zeros_like(x), mask.to(tl.float32))
    mean_r, m2_r, w_r = tl.reduce((mean, m2, w), 1, welford_combine)
    tl.store(mean_ptr + rows, mean_r + m2_r / w_r, mask=rows < M)
'''
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = translate_source(text, str(tmp_path / "k.py"), get_target("sm90"))
    assert all(f.translated for f in result.functions), [d.format() for d in result.diagnostics]
    assert "gl.reduce((mean, m2, w), 1, welford_combine_s)" in result.text
    compiled = verify(result, {"x_ptr": "*fp32", "mean_ptr": "*fp32", "BLOCK_M": 4, "BLOCK_N": 256})
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def test_a_copy_is_not_named_like_a_kernel_s_own_name(monkeypatch, tmp_path: Path) -> None:
    """A kernel parameter named `rescale_2d`: the copy of `rescale` for rank-2 tensors is `rescale_2d2`, since the
    parameter would hide a copy of that name (the Gluon kernel called a float; found by a review)."""
    text = HEAD + '''@triton.jit
def rescale(x, s):
    return x * s


@triton.jit
def kern(x_ptr, out_ptr, rescale_2d, BLOCK: tl.constexpr):
    rows = tl.arange(0, 16)
    cols = tl.arange(0, BLOCK)
    f = rescale(rescale_2d, 2.0)
    x = tl.load(x_ptr + rows[:, None] * BLOCK + cols[None, :])
    tl.store(out_ptr + rows[:, None] * BLOCK + cols[None, :], rescale(x, f))
'''
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = translate_source(text, str(tmp_path / "k.py"), get_target("sm90"))
    assert "def rescale_2d2(x, s):" in result.text and "rescale_2d2(x, f)" in result.text
    compiled = verify(result, {"x_ptr": "*fp32", "out_ptr": "*fp32", "rescale_2d": "fp32", "BLOCK": 64})
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def test_a_helper_imported_from_another_module_is_copied_per_kind_too(monkeypatch, tmp_path: Path) -> None:
    # (aiter's routing kernels import such helpers and call them with a scalar and with a tensor): the helper is copied
    # into the file first (`transpile.passes.imported_helpers`), then per kind of call, as the file's own helpers are
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "helpers.py").write_text(HEAD + '''@triton.jit
def _cdiv_pow2(ptr, i, log2_k):
    n = tl.load(ptr + i)
    return (n + ((1 << log2_k) - 1)) >> log2_k
''')
    kernel = HEAD.rstrip("\n") + "\nfrom pkg.helpers import _cdiv_pow2\n\n\n" + '''@triton.jit
def blocks(counts_ptr, out_ptr, total, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    per_block = _cdiv_pow2(counts_ptr, offs, 4)
    first = _cdiv_pow2(counts_ptr, total, 4)
    tl.store(out_ptr + offs, per_block + first, mask=offs < n)
'''
    path = tmp_path / "kernels.py"
    path.write_text(kernel)
    values = {"counts_ptr": "*i32", "out_ptr": "*i32", "total": "i32", "n": "i32", "BLOCK": 128}
    for target in ("gfx950", "sm90"):
        result = translate_source(kernel, str(path), get_target(target))
        assert all(f.translated for f in result.functions), [d.format() for d in result.diagnostics]
        assert not [d for d in result.diagnostics if d.code == "TT012"]
        assert "first = _cdiv_pow2_s(counts_ptr, total, 4)" in result.text
        assert "def _cdiv_pow2_s(ptr, i, log2_k):" in result.text
        assert "from pkg" not in result.text  # (self-contained: both copies are in the variant)
        compiled = verify(result, values)
        assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


ALIASED = HEAD + '''@triton.jit
def _pow2_above(val, floor: tl.constexpr):
    bits = tl.cast(val, tl.uint32, bitcast=True)
    exp = tl.maximum((bits >> 23) & 0xFF, 127 + floor)
    return tl.cast(exp << 23, tl.float32, bitcast=True), exp


pow2_above = _pow2_above


@triton.jit
def scale_rows(x_ptr, s_ptr, e_ptr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * 16 + tl.arange(0, 16)
    x = tl.load(x_ptr + rows[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :])
    one, _ = _pow2_above(1.0, 0)
    scales, exps = pow2_above(tl.max(tl.abs(x), axis=1) * one, 0)
    tl.store(s_ptr + rows, scales)
    tl.store(e_ptr + rows, exps.to(tl.int32))
'''


def test_a_helper_called_through_a_module_alias_is_copied_too(monkeypatch, tmp_path: Path) -> None:
    """`pow2_above = _pow2_above` at module level, one call by each name with other kinds (gemlite's mxfp scale
    kernels): the call through the alias names the copy of its kinds (TT012 before)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for target in ("sm90", "gfx950"):
        result = translate_source(ALIASED, str(tmp_path / "k.py"), get_target(target))
        assert all(f.translated for f in result.functions), [d.format() for d in result.diagnostics]
        assert "scales, exps = _pow2_above_1d(" in result.text
        compiled = verify(result, {"x_ptr": "*fp32", "s_ptr": "*fp32", "e_ptr": "*i32", "BLOCK": 64})
        assert compiled and all(c.ok for c in compiled), [(c.kernel, c.message) for c in compiled if not c.ok]


GATED = HEAD + '''@triton.jit
def _gate(x, USE_EXP2: tl.constexpr):
    return tl.exp2(x) if USE_EXP2 else tl.exp(x)


@triton.jit
def decay_kernel(g_ptr, h_ptr, n_chunks, BLOCK: tl.constexpr, USE_EXP2: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    h = tl.zeros([BLOCK], dtype=tl.float32)
    g_last = tl.load(g_ptr)
    for c in range(n_chunks):
        g = tl.load(g_ptr + c * BLOCK + offs)
        h = h * _gate(g_last - g, USE_EXP2) + 1.0
        g_last = _gate(g_last, USE_EXP2)
    tl.store(h_ptr + offs, h * g_last)
'''


def test_a_helper_rebinding_a_0d_value_in_a_loop_is_copied_for_it(monkeypatch, tmp_path: Path) -> None:
    """`g_last = _gate(g_last)` of a 0-d value in a loop, `_gate(g_last - g)` of a tile beside it (aiter's gated delta
    rule): the scalar call's result is what the helper gives for a scalar, so `g_last` stays 0-d through the loop's
    second walk and the helper is copied for it (TT012 before: the result was taken for the tile's kind)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for target in ("sm90", "gfx950"):
        result = translate_source(GATED, str(tmp_path / "k.py"), get_target(target))
        assert all(f.translated for f in result.functions), [d.format() for d in result.diagnostics]
        assert not [d for d in result.diagnostics if d.code == "TT012"]
        compiled = verify(result, {"g_ptr": "*fp32", "h_ptr": "*fp32", "n_chunks": "i32", "BLOCK": 64, "USE_EXP2": 1})
        assert compiled and all(c.ok for c in compiled), [(c.kernel, c.message) for c in compiled if not c.ok]


# A helper's optional tensor passed in one call and left `None` in another (FLA's mesa-net `chunk_update_once(...,
# b_lamb)` and `(..., None)`): Triton compiles each call's helper with its `if b_lamb is not None:` decided, so the
# branch that reads `b_lamb` as a tensor is never compiled where it is `None`.
OPTIONAL = HEAD + '''@triton.jit
def scaled(x, s, bias=None):
    if s is not None:
        x = x * s[None, :]
    if bias is None:
        y = x
    else:
        y = x + bias[:, None]
    return y


@triton.jit
def update(b_p, b_k, b_lamb):
    b_o = tl.dot(b_p.to(b_k.dtype), b_k)
    if b_lamb is not None:
        b_o += b_lamb[None, :] * b_p
    return b_o


@triton.jit
def kern(x_ptr, s_ptr, o_ptr, BM: tl.constexpr, BN: tl.constexpr):
    o_m = tl.arange(0, BM)
    o_n = tl.arange(0, BN)
    x = tl.load(x_ptr + o_m[:, None] * BN + o_n[None, :])
    s = tl.load(s_ptr + o_n)
    y = x + scaled(x, s) + scaled(x, None)
    for i in range(2):
        y = update(y, x.to(tl.float16), s)
    y = update(y, x.to(tl.float16), None)
    tl.store(o_ptr + o_m[:, None] * BN + o_n[None, :], y)
'''


def test_a_helper_s_argument_left_none_decides_its_none_tests(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for target in ("sm90", "gfx950"):
        result = translate_source(OPTIONAL, str(tmp_path / "k.py"), get_target(target), gluon_always=True)
        # (`update` and its copy are inlined where the kernel calls them)
        assert all(f.translated for f in result.functions if not f.name.startswith("update")), \
            [d.format() for d in result.diagnostics]
        assert not [d for d in result.diagnostics if d.code in ("TT010", "TT012")]
        text = result.text
        # the call passing `None` calls a copy of kind "none", which converts nothing it does not read
        assert "scaled_n(x, None)" in text and "scaled(x, s)" in text
        copy = text[text.index("def scaled_n("):]
        assert "convert_layout" not in copy[:copy.index("return y")]
        # the inlined call binds `b_lamb = None`: its branch is left as written, never compiled
        assert "b_lamb = None" in text
        compiled = verify(result, {"x_ptr": "*fp32", "s_ptr": "*fp32", "o_ptr": "*fp32", "BM": 64, "BN": 64})
        assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled if not c.ok]


# A test of which arguments are `None` that leaves a name of another rank in each branch (`t` is [M, N] where both
# offsets are given, [M] where only one is): Triton compiles each call's branch alone, so each call's copy is
# analysed for the branch it takes (a tensor argument is not `None`; `and`/`or` read left to right).
CHAIN = HEAD + '''@triton.jit
def _offsets(first, second, stride):
    if first is not None and second is not None:
        t = first[:, None] * stride + second[None, :]
    elif not (first is None or second is not None):
        t = first * stride
    else:
        t = second
    return t


@triton.jit
def kern(x_ptr, o_ptr, BM: tl.constexpr, BN: tl.constexpr):
    o_m = tl.arange(0, BM)
    o_n = tl.arange(0, BN)
    y = tl.load(x_ptr + _offsets(o_m, o_n, BN))
    r = tl.load(x_ptr + _offsets(o_m, None, BN)) + tl.load(x_ptr + _offsets(None, o_m, BN))
    tl.store(o_ptr + o_m[:, None] * BN + o_n[None, :], y + r[:, None])
'''


def test_a_chain_of_none_tests_is_decided_per_call(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for target in ("sm90", "gfx950"):
        result = translate_source(CHAIN, str(tmp_path / "k.py"), get_target(target))
        assert all(f.translated for f in result.functions), [d.format() for d in result.diagnostics]
        assert not [d for d in result.diagnostics if d.code in ("TT010", "TT012")]
        assert "_offsets(o_m, o_n, BN)" in result.text and "_offsets_n(o_m, None, BN)" in result.text
        compiled = verify(result, {"x_ptr": "*fp32", "o_ptr": "*fp32", "BM": 64, "BN": 64})
        assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled if not c.ok]
