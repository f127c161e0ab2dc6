"""The shape of a dot's result where no accumulator names it (issue 26: "cannot tell the shape of this `tl.dot` result",
13 public kernels): the translation needs [M, N] for the accumulator it makes and for the MMA layout declared at the
function's top. The analysis now follows the shape

- through helpers, as Triton's JIT specialises a helper per call: a helper's result shape (`[BLOCK_K, idx.shape[0]]`)
  in the caller's terms, its parameters replaced by what the call passes (FlagGems' paged KV loads, a tuple of K and V
  tiles from a helper that calls another);
- through `x.permute((1, 0))` and `tl.permute(x, [1, 0])` with literal axes (aiter's MLA decode);
- through a constexpr bound once under an `if` (`shape0: tl.constexpr = BLOCK_M * D // BLOCK_R`, sage attention's
  Hadamard rotation), written with its definition where the layouts are declared.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from transpile.engine import translate_source
from transpile.targets import get_target

HEAD = "import triton\nimport triton.language as tl\n\n\n"

PAGED = HEAD + '''@triton.jit
def _slots(index, limit, table_ptr, page: tl.constexpr):
    clamped = tl.minimum(index, limit - 1)
    return tl.load(table_ptr + clamped // page) * page + clamped % page


@triton.jit
def _kv_tiles(index, limit, table_ptr, k_ptr, v_ptr, stride, page: tl.constexpr, HEAD_DIM: tl.constexpr):
    slots = _slots(index, limit, table_ptr, page)
    k = tl.load(k_ptr + tl.arange(0, HEAD_DIM)[:, None] + slots[None, :] * stride)
    v = tl.load(v_ptr + tl.arange(0, HEAD_DIM)[None, :] + slots[:, None] * stride)
    return k, v


@triton.jit
def paged_scores_kernel(q_ptr, k_ptr, v_ptr, table_ptr, o_ptr, n_keys, stride, page: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + rows[:, None] * HEAD_DIM + dims[None, :])
    cols = tl.arange(0, BLOCK_N)
    k, v = _kv_tiles(cols, n_keys, table_ptr, k_ptr, v_ptr, stride, page, HEAD_DIM=HEAD_DIM)
    s = tl.dot(q, k)
    p = tl.exp(s - tl.max(s, axis=1)[:, None])
    o = tl.dot(p.to(v.dtype), v)
    tl.store(o_ptr + rows[:, None] * HEAD_DIM + dims[None, :], o)
'''

PERMUTED = HEAD + '''@triton.jit
def permuted_scores_kernel(q_ptr, k_ptr, s_ptr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
                           K_BY_ROWS: tl.constexpr):
    rows = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, D)
    q = tl.load(q_ptr + rows[:, None] * D + dims[None, :])
    k = tl.load(k_ptr + cols[:, None] * D + dims[None, :])
    if K_BY_ROWS:
        s = tl.dot(q, k.permute((1, 0)))
    else:
        s = tl.dot(q, tl.permute(k, [1, 0]))
    tl.store(s_ptr + rows[:, None] * BLOCK_N + cols[None, :], s)
'''

ROTATED = HEAD + '''@triton.jit
def rotate_kernel(x_ptr, r_ptr, y_ptr, BLOCK_M: tl.constexpr, D: tl.constexpr, BLOCK_R: tl.constexpr,
                  ROTATE: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    x = tl.load(x_ptr + rows[:, None] * D + dims[None, :])
    if ROTATE:
        r = tl.load(r_ptr + tl.arange(0, BLOCK_R)[:, None] * BLOCK_R + tl.arange(0, BLOCK_R)[None, :])
        groups: tl.constexpr = BLOCK_M * D // BLOCK_R
        y = tl.dot(x.reshape((groups, BLOCK_R)), r)
        y = y.reshape((BLOCK_M, D))
    else:
        y = x.to(tl.float32)
    tl.store(y_ptr + rows[:, None] * D + dims[None, :], y)
'''

ACCUM_HELPER = HEAD + '''@triton.jit
def _accum_dot(accum, a, b):
    return accum + tl.dot(a, b)


@triton.jit
def helper_gemm_kernel(a_ptr, b_ptr, c_ptr, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rows[:, None] * K + (k + ks)[None, :])
        b = tl.load(b_ptr + (k + ks)[:, None] * BLOCK_N + cols[None, :])
        acc = _accum_dot(acc, a, b)
    tl.store(c_ptr + rows[:, None] * BLOCK_N + cols[None, :], acc)
'''

CASES = {
    # the first row: a helper returning `accum + tl.dot(a, b)` on its parameters (attorch's `math.py`)
    "accum_helper": (ACCUM_HELPER, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "K": "i32", "BLOCK_M": 64,
                                    "BLOCK_N": 64, "BLOCK_K": 32}),
    "paged": (PAGED, {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "table_ptr": "*i32", "o_ptr": "*fp32",
                      "n_keys": "i32", "stride": "i32", "page": 16, "BLOCK_M": 64, "BLOCK_N": 64, "HEAD_DIM": 64}),
    "permuted": (PERMUTED, {"q_ptr": "*fp16", "k_ptr": "*fp16", "s_ptr": "*fp32", "BLOCK_M": 64, "BLOCK_N": 64,
                            "D": 64, "K_BY_ROWS": 1}),
    "rotated": (ROTATED, {"x_ptr": "*fp16", "r_ptr": "*fp16", "y_ptr": "*fp32", "BLOCK_M": 64, "D": 64,
                          "BLOCK_R": 32, "ROTATE": 1}),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("target", ["gfx950", "sm90"])
def test_the_dot_shape_is_known(case: str, target: str) -> None:
    # (`--gluon-always`: the paged K tile is read down its columns, which keeps the default variant Triton)
    result = translate_source(CASES[case][0], f"{case}.py", get_target(target), gluon_always=True)
    assert not [d for d in result.diagnostics if d.code in ("TT010", "TT012")], [d.format() for d in result.diagnostics]
    # (a helper the kernel inlines stays Triton for the source kernel the variant keeps beside it)
    assert all(o.translated or "it is inlined where" in o.kept_reason for o in result.functions), [
        (o.name, o.kept_reason) for o in result.functions]


def test_a_helpers_result_shape_is_written_in_the_callers_terms() -> None:
    text = translate_source(PAGED, "paged.py", get_target("gfx950"), gluon_always=True).text
    # K is [HEAD_DIM, cols.shape[0]] in the helper's terms: [HEAD_DIM, BLOCK_N] in the kernel's, where its layouts are
    # declared; the dot's accumulator and MMA layout read the same sizes
    assert "_mma_layout(BLOCK_M, [BLOCK_N], " in text
    assert "gl.zeros([BLOCK_M, BLOCK_N], " in text


def test_a_constexpr_bound_under_an_if_is_written_with_its_definition() -> None:
    text = translate_source(ROTATED, "rotated.py", get_target("gfx950")).text
    assert "_mma_layout((BLOCK_M * D // BLOCK_R), [BLOCK_R], " in text


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("target", ["gfx950", "sm90"])
def test_the_variants_compile(case: str, target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    from transpile.verify import verify

    text, values = CASES[case]
    result = translate_source(text, str(tmp_path / f"{case}.py"), get_target(target), gluon_always=True)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    compiled = verify(result, values)
    assert compiled and all(c.ok for c in compiled), [(c.kernel, c.message) for c in compiled if not c.ok]


WGRAD = HEAD + '''@triton.jit
def wgrad_kernel(x_ptr, g_ptr, w_ptr, n, width, pad, stride_x, stride_g, BLOCK_C: tl.constexpr,
                 BLOCK_O: tl.constexpr, BLOCK_N: tl.constexpr):
    c = tl.arange(0, BLOCK_C)
    o = tl.arange(0, BLOCK_O)
    x_ptr += (c * stride_x)[:, None]
    g_ptr += o[None, :]
    acc = tl.zeros((BLOCK_C, BLOCK_O), dtype=tl.float32)
    for w in range(0, width):
        shift = c - pad + w
        for start in range(0, n, BLOCK_N):
            rows = start + tl.arange(0, BLOCK_N)
            x = tl.load(x_ptr + rows[None, :] + shift[:, None], mask=rows[None, :] < n)
            g = tl.load(g_ptr + (rows * stride_g)[:, None], mask=rows[:, None] < n)
            acc += tl.dot(x, g, allow_tf32=False)
    tl.store(w_ptr + c[:, None] * BLOCK_O + o[None, :], acc)
'''


@pytest.mark.parametrize("target", ["gfx950", "sm90"])
def test_a_tensor_of_pointers_bound_to_a_name_keeps_its_pointee(target: str) -> None:
    """`x_ptr += offs[:, None]` makes `x_ptr` a tensor of pointers into x; `x_ptr + rows + shift`, where `shift`
    reads an integer parameter (`c - pad + w`), still points into x (FlagGems' convolution weight gradient: the dot's
    operand type was lost, TT010)."""
    result = translate_source(WGRAD, "wgrad.py", get_target(target), gluon_always=True)
    assert not [d for d in result.diagnostics if d.code == "TT010"], [d.format() for d in result.diagnostics]
    if target == "sm90":
        # (`allow_tf32=False` on operands whose type is the launch's: no sm90 launcher sends fp32 launches to the
        # source kernel, so the kernel is kept, saying why)
        assert "full-precision fp32 products" in result.functions[0].kept_reason, result.functions[0]
    else:
        assert "_mma_layout(BLOCK_C, [BLOCK_O], x_ptr.dtype.element_ty, " in result.text


UNIT_DIVISOR = HEAD + '''@triton.jit
def packed_rows_kernel(a_ptr, b_ptr, c_ptr, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    M_DIVISOR: tl.constexpr = 1
    PACKED_M: tl.constexpr = BLOCK_M // M_DIVISOR
    rows = tl.arange(0, PACKED_M)
    cols = tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros([PACKED_M, BLOCK_N], dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rows[:, None] * K + (k + ks)[None, :])
        b = tl.load(b_ptr + (k + ks)[:, None] * BLOCK_N + cols[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rows[:, None] * BLOCK_N + cols[None, :], acc)
'''


def test_a_shape_through_local_constexprs_of_one_is_folded() -> None:
    """`PACKED_M: tl.constexpr = BLOCK_M // M_DIVISOR` with `M_DIVISOR: tl.constexpr = 1` (aiter's MoE GEMMs): the
    tile has `BLOCK_M` rows, not `(BLOCK_M // 1)`, so a rule that tests the rows at launch finds the parameter."""
    from transpile.engine import prepare

    prepared = prepare(UNIT_DIVISOR, "k.py")
    site = next(iter(prepared.plans["packed_rows_kernel"].dots.values()))
    assert [str(d) for d in site.shape] == ["BLOCK_M", "BLOCK_N"]
    text = translate_source(UNIT_DIVISOR, "k.py", get_target("gfx950")).text
    assert "// 1" not in text


# A helper that rebinds its parameter (`x = x * s[None, :]`) returns a shape the analysis cannot write in the
# helper's terms (`x.shape[0]` would read the new `x`): the broadcast of that unknown shape with `s[None, :]` is
# unknown along the rows, not 1 (the accumulator was made [1, BN], and the variant failed to compile).
REBOUND = HEAD + '''@triton.jit
def scaled(x, s):
    x = x * s[None, :]
    return x


@triton.jit
def kern(x_ptr, s_ptr, o_ptr, BM: tl.constexpr, BN: tl.constexpr):
    o_m = tl.arange(0, BM)
    o_n = tl.arange(0, BN)
    x = tl.load(x_ptr + o_m[:, None] * BN + o_n[None, :])
    s = tl.load(s_ptr + o_n)
    y = scaled(x, s)
    y = tl.dot(y.to(tl.float16), x.to(tl.float16))
    tl.store(o_ptr + o_m[:, None] * BN + o_n[None, :], y)
'''


@pytest.mark.parametrize("target", ["sm90", "gfx950"])
def test_a_broadcast_with_an_unknown_shape_is_not_taken_as_one_row(target: str) -> None:
    result = translate_source(REBOUND, "k.py", get_target(target))
    assert "gl.zeros([1, BN]" not in result.text
    assert [d for d in result.diagnostics if d.code == "TT010" and "shape of this `tl.dot` result" in d.message]
