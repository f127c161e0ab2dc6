"""Implicit broadcasting, helpers returning tuples of tensors and element types the kernel computes.

Triton broadcasts like numpy (trailing dimensions align, so a vector against a matrix is a row); Gluon wants every
expansion written out with the operand in the matching slice layout. Each case translates a small kernel, asserts the
expansion the tool inserted, and (slow tests) compiles the variant with Triton for an AMD and the Hopper target.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from transpile.analysis.layouts import promote
from transpile.engine import TranslationResult, translate_source
from transpile.targets import get_target
from transpile.verify import verify

HEAD = "import triton\nimport triton.language as tl\n\n\n"

ROWS = HEAD + '''@triton.jit
def rows(x_ptr, w_ptr, y_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_N)
    mask = (r[:, None] < M) & (c < N)
    x = tl.load(x_ptr + r[:, None] * N + c, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + c, mask=c < N, other=0.0).to(tl.float32)
    y = x * w + w * x
    y = y * (w + 1.0) - tl.maximum(y, w)
    y = tl.where(c < N, y, 0.0)
    y += w
    y = y * 2.0 + tl.program_id(0)
    tl.store(y_ptr + r[:, None] * N + c, y, mask=mask)
'''

LOADS = HEAD + '''@triton.jit
def loads(x_ptr, b_ptr, y_ptr, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    r = tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_N)
    bias = tl.load(b_ptr + c, mask=c < N, other=0.0)
    ptrs = x_ptr + r[:, None] * N + c[None, :]
    x = tl.load(ptrs, mask=c < N, other=bias)
    tl.store(y_ptr + r[:, None] * N + c[None, :], bias, mask=c < N)
    tl.store(y_ptr + N * BLOCK_M + r[:, None] * N + c[None, :], x, mask=c < N)
'''

# A row statistic broadcast the numpy way (as a row): valid Triton for square tiles; the reduction (a slice along
# dimension 1) is converted to the slice along dimension 0 before the expansion.
SQUARE = HEAD + '''@triton.jit
def square(x_ptr, y_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    offs = r[:, None] * BLOCK + r[None, :]
    x = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, x - tl.max(x, axis=1))
'''

RANK3 = HEAD + '''@triton.jit
def rank3(x_ptr, s_ptr, y_ptr, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr):
    a = tl.arange(0, A)
    b = tl.arange(0, B)
    c = tl.arange(0, C)
    offs = a[:, None, None] * (B * C) + b[None, :, None] * C + c[None, None, :]
    s = tl.load(s_ptr + c)
    x = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, x * s)
'''

TUPLE = HEAD + '''@triton.jit
def _stats(x, n):
    mean = tl.sum(x, axis=1) / n
    var = tl.sum(x * x, axis=1) / n - mean * mean
    return mean, var


@triton.jit
def normalise(x_ptr, y_ptr, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    r = tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_N)
    offs = r[:, None] * N + c[None, :]
    x = tl.load(x_ptr + offs, mask=c[None, :] < N, other=0.0).to(tl.float32)
    mean, var = _stats(x, N)
    tl.store(y_ptr + offs, (x - mean[:, None]) / tl.sqrt(var[:, None] + 1e-5), mask=c[None, :] < N)
'''

TUPLE_NOT_UNPACKED = HEAD + '''@triton.jit
def _pair(x):
    return x + 1.0, x * 2.0


@triton.jit
def keeps_tuple(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    t = _pair(tl.load(x_ptr + offs))
    tl.store(x_ptr + offs, t[0])
'''

# The dot operands' element types come from what the kernel computes: a cast to another tensor's type and a
# zero-initialised fp16 tile, not from pointer parameters.
DTYPES = HEAD + '''@triton.jit
def dtypes(x_ptr, y_ptr, o_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    offs = r[:, None] * BLOCK + r[None, :]
    y = tl.load(y_ptr + offs)
    x = tl.exp(tl.load(x_ptr + offs).to(tl.float32))
    h = tl.zeros([BLOCK, BLOCK], dtype=tl.float16) + 1.0
    acc = tl.dot(x.to(y.dtype), y)
    acc2 = tl.dot(h, y.to(tl.float16))
    tl.store(o_ptr + offs, (acc + acc2).to(tl.float16))
'''

# Operands loaded by helpers: the helper's `ptr.dtype.element_ty` becomes the caller's pointer argument's.
HELPER_DTYPES = HEAD + '''@triton.jit
def _load_tile(ptr, offs, stride):
    return tl.load(ptr + offs[:, None] * stride + offs[None, :])


@triton.jit
def _load_pair(a_ptr, b_ptr, offs, stride):
    return _load_tile(a_ptr, offs, stride), tl.load(b_ptr + offs[:, None] * stride + offs[None, :])


@triton.jit
def helper_dtypes(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK, BLOCK], dtype=tl.float32)
    acc = tl.dot(_load_tile(a_ptr, offs, BLOCK), _load_tile(b_ptr, offs, BLOCK), acc)
    x, y = _load_pair(a_ptr, b_ptr, offs, BLOCK)
    acc = tl.dot(x, y, acc)
    tl.store(c_ptr + offs[:, None] * BLOCK + offs[None, :], acc)
'''

# A dot in a helper whose A operand is a tensor argument: its type is the parameter's own `a.dtype`.
HELPER_PARAM_DTYPE = HEAD + '''@triton.jit
def _mm(a, b_ptr, offs, BLOCK: tl.constexpr):
    b = tl.load(b_ptr + offs[:, None] * BLOCK + offs[None, :])
    return tl.dot(a, b, tl.zeros([BLOCK, BLOCK], dtype=tl.float32))


@triton.jit
def helper_param_dtype(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs[:, None] * BLOCK + offs[None, :])
    tl.store(c_ptr + offs[:, None] * BLOCK + offs[None, :], _mm(a, b_ptr, offs, BLOCK))
'''

AUGMENT_LOWER = HEAD + '''@triton.jit
def grows(x_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + r)
    m = tl.load(x_ptr + r[:, None] * BLOCK + r[None, :])
    v += m
    tl.store(x_ptr + r, tl.sum(v, axis=0))
'''

SCANS = HEAD + '''@triton.jit
def _add(a, b):
    return a + b


@triton.jit
def _add_pairs(a, i, b, j):
    return a + b, i + j


@triton.jit
def scans(x_ptr, y_ptr, z_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs[:, None] * BLOCK + offs[None, :])
    s = tl.sum(x, axis=1)
    c = tl.associative_scan(s, 0, _add)
    d = s.cumsum(0)
    e, f = tl.associative_scan((tl.max(x, axis=0), offs), 0, _add_pairs)
    tl.store(y_ptr + offs, c + d)
    tl.store(z_ptr + offs, e + f)
'''

SPLITS = HEAD + '''@triton.jit
def splits(x_ptr, y_ptr, z_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    pair = tl.arange(0, 2)
    x = tl.load(x_ptr + offs[:, None] * 2 + pair[None, :])
    a, b = tl.split(x)
    c, d = tl.split(tl.join(a, b * 2))
    tl.store(y_ptr + offs, a * b)
    tl.store(z_ptr + offs, c + d)
'''


def translate(text: str, target: str = "gfx942") -> TranslationResult:
    # --gluon-always: these tests read the Gluon code (the sm90 pointer ring is otherwise kept as Triton)
    return translate_source(text, "k.py", get_target(target), gluon_always=True)


def body(result: TranslationResult) -> list[str]:
    return [line.strip() for line in result.text.splitlines()]


def test_rank1_against_rank2_is_a_row_in_every_elementwise_form() -> None:
    result = translate(ROWS)
    assert all(f.translated for f in result.functions), result.diagnostics
    lines = body(result)
    for expected in (
        "mask = (r[:, None] < M) & (c < N)[None, :]",
        "x = gl.load(x_ptr + r[:, None] * N + c[None, :], mask=mask, other=0.0).to(gl.float32)",
        "w = gl.load(w_ptr + c, mask=c < N, other=0.0).to(gl.float32)",  # rank 1 with rank 1: unchanged
        "y = x * w[None, :] + w[None, :] * x",  # either side
        "y = y * (w + 1.0)[None, :] - gl.maximum(y, w[None, :])",  # an operation in parentheses; a call
        "y = gl.where((c < N)[None, :], y, 0.0)",
        "y += w[None, :]",
        "y = y * 2.0 + gl.program_id(0)",  # rank-0 scalars broadcast without help
        "gl.store(y_ptr + r[:, None] * N + c[None, :], y, mask=mask)",
    ):
        assert expected in lines, expected
    # `c` is used both as a row and as itself: one layout, the column slice of the tile's.
    assert "c = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mask_layout))" in lines


def test_masks_other_and_stored_values_broadcast_to_the_pointer_tile() -> None:
    lines = body(translate(LOADS))
    assert "x = gl.load(ptrs, mask=(c < N)[None, :], other=bias[None, :])" in lines
    assert "gl.store(y_ptr + r[:, None] * N + c[None, :], bias[None, :], mask=(c < N)[None, :])" in lines
    assert "gl.store(y_ptr + N * BLOCK_M + r[:, None] * N + c[None, :], x, mask=(c < N)[None, :])" in lines


def test_a_row_reduction_broadcast_as_a_row_is_converted_then_expanded() -> None:
    lines = body(translate(SQUARE))
    assert ("gl.store(y_ptr + offs, x - gl.convert_layout(gl.max(x, axis=1), gl.SliceLayout(0, offs_layout))"
            "[None, :])") in lines


def test_rank1_against_rank3_gets_two_leading_axes() -> None:
    lines = body(translate(RANK3))
    assert "gl.store(y_ptr + offs, x * s[None, None, :])" in lines
    assert "s = gl.load(s_ptr + c)" in lines


def test_helper_tuple_of_tensors_is_unpacked_and_converted() -> None:
    result = translate(TUPLE)
    assert all(f.translated for f in result.functions), result.diagnostics
    lines = body(result)
    at = lines.index("mean, var = _stats(x, N)")
    assert lines[at + 1: at + 3] == [
        "mean = gl.convert_layout(mean, gl.SliceLayout(1, offs_layout))",
        "var = gl.convert_layout(var, gl.SliceLayout(1, offs_layout))",
    ]
    assert "return mean, var" in lines


def test_helper_tuple_not_unpacked_is_refused_with_what_to_write() -> None:
    result = translate(TUPLE_NOT_UNPACKED)
    refused = {f.name for f in result.functions if not f.translated}
    assert refused == {"keeps_tuple", "_pair"}  # the helper stays Triton with its only caller
    messages = [d.message for d in result.diagnostics]
    assert any("unpack it into names where it is called (`a, b = _pair(...)`)" in m for m in messages), messages


def test_in_place_update_of_the_lower_rank_side_is_refused() -> None:
    result = translate(AUGMENT_LOWER)
    (outcome,) = result.functions
    assert not outcome.translated
    assert any("`v` (rank 1) is updated in place with a rank-2 tensor" in d.message for d in result.diagnostics)


RANK3_SCORES = HEAD + '''@triton.jit
def scores(q_ptr, r_ptr, o_ptr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    rows = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, D)
    q = tl.load(q_ptr + rows[:, None] * D + dims[None, :])
    r = tl.load(r_ptr + cols[:, None] * D + dims[None, :])
    qk = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    qk += tl.sum(q[:, None, :] * r[None, :, :], 2)
    tl.store(o_ptr + rows[:, None] * BLOCK_N + cols[None, :], qk)
'''


@pytest.mark.parametrize("target", ["gfx950", "sm90"])
def test_scores_accumulated_from_a_rank3_broadcast(target: str) -> None:
    """`qk += <rank-3 broadcast>` (kernl's attention): summed over the third axis first, as kernels write it, the
    update translates; the rank-3 product itself added to the rank-2 `qk` is refused at its line, saying what to
    write (Gluon gives a name one layout)."""
    result = translate(RANK3_SCORES, target)
    assert all(f.translated for f in result.functions), [d.format() for d in result.diagnostics]
    assert "qk += gl.sum(" in "\n".join(body(result))
    unsummed = RANK3_SCORES.replace("tl.sum(q[:, None, :] * r[None, :, :], 2)", "q[:, None, :] * r[None, :, :]")
    result = translate(unsummed, target)
    (refusal,) = [d for d in result.diagnostics if d.code == "TT010"]
    assert refusal.line == 13 and refusal.message.startswith(
        "`qk` (rank 2) is updated in place with a rank-3 tensor; assign the broadcast result to a new name")


def test_dot_operand_types_come_from_computed_values() -> None:
    result = translate(DTYPES)
    assert all(f.translated for f in result.functions), result.diagnostics
    assert not any("element type" in d.message for d in result.diagnostics)
    # `x.to(y.dtype)`: y's type is its pointer's pointee.
    assert "mma_layout: gl.constexpr = _mma_layout(BLOCK, [BLOCK], y_ptr.dtype.element_ty, gl.num_warps(), k=BLOCK)" in body(
        result)


def test_dot_operand_types_come_through_helpers() -> None:
    result = translate(HELPER_DTYPES, "sm90")
    assert all(f.translated for f in result.functions), result.diagnostics
    assert "mma_layout: gl.constexpr = _mma_layout(BLOCK, [BLOCK], a_ptr.dtype.element_ty, gl.num_warps())" in body(
        result)


def test_dot_operand_type_of_a_helper_parameter_is_its_dtype() -> None:
    result = translate(HELPER_PARAM_DTYPE, "sm90")
    assert all(f.translated for f in result.functions), result.diagnostics
    assert "mma_layout: gl.constexpr = _mma_layout(BLOCK, [BLOCK], a.dtype, gl.num_warps())" in body(result)


def test_promotion_of_element_types() -> None:
    assert promote("gl.float16", "gl.bfloat16") == "gl.float32"
    assert promote("gl.float16", "gl.float32") == "gl.float32"
    assert promote("gl.int32", "gl.float16") == "gl.float16"
    assert promote("gl.int8", "gl.int32") == "gl.int32"
    assert promote("x_ptr.dtype.element_ty", "gl.int32") == "x_ptr.dtype.element_ty"
    assert promote("gl.int32", "x_ptr.dtype.element_ty") == "x_ptr.dtype.element_ty"
    # unknown, or only the kernel knows: a dot of it is not laid out for a guessed type
    assert promote(None, "gl.float32") is None
    assert promote("x_ptr.dtype.element_ty", "gl.float16") is None
    assert promote("x_ptr.dtype.element_ty", "y_ptr.dtype.element_ty") is None
    assert promote("x_ptr.dtype.element_ty", "x_ptr.dtype.element_ty") == "x_ptr.dtype.element_ty"


COMPILES = [
    ("rows", ROWS, {"x_ptr": "*fp16", "w_ptr": "*fp16", "y_ptr": "*fp32", "BLOCK_M": 16, "BLOCK_N": 128}),
    ("loads", LOADS, {"x_ptr": "*fp16", "b_ptr": "*fp16", "y_ptr": "*fp16", "BLOCK_M": 16, "BLOCK_N": 64}),
    ("square", SQUARE, {"x_ptr": "*fp32", "y_ptr": "*fp32", "BLOCK": 64}),
    ("rank3", RANK3, {"x_ptr": "*fp32", "s_ptr": "*fp32", "y_ptr": "*fp32", "A": 4, "B": 8, "C": 32}),
    ("tuple", TUPLE, {"x_ptr": "*fp16", "y_ptr": "*fp32", "BLOCK_M": 16, "BLOCK_N": 128}),
    ("dtypes", DTYPES, {"x_ptr": "*fp16", "y_ptr": "*fp16", "o_ptr": "*fp16", "BLOCK": 64}),
    ("helper_dtypes", HELPER_DTYPES, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "BLOCK": 64}),
    ("helper_param_dtype", HELPER_PARAM_DTYPE, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "BLOCK": 64}),
    ("scans", SCANS, {"x_ptr": "*fp32", "y_ptr": "*fp32", "z_ptr": "*fp32", "BLOCK": 64}),
    ("splits", SPLITS, {"x_ptr": "*fp32", "y_ptr": "*fp32", "z_ptr": "*fp32", "BLOCK": 64}),
]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["gfx942", "sm90"])
@pytest.mark.parametrize(("name", "text", "values"), COMPILES, ids=[c[0] for c in COMPILES])
def test_broadcast_kernels_compile(name: str, text: str, values: dict[str, object], target: str,
                                   monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    result = translate(text, target)
    assert all(f.translated for f in result.functions), result.diagnostics
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    compiled = verify(result, values, all_configs=True)
    assert compiled
    failures = [f"{c.label}: {c.message}" for c in compiled if not c.ok]
    assert not failures, "\n".join(failures)


def _implicit_gemm() -> str:
    """fixtures/matmul_grouped.py with its K and N offsets broadcast implicitly (`offs_k < K - ...`), as much
    public code writes them."""
    text = (Path(__file__).resolve().parents[1] / "fixtures" / "matmul_grouped.py").read_text()
    implicit = text.replace("offs_bn[None, :]", "offs_bn").replace("offs_k[None, :]", "offs_k")
    assert implicit.count("offs_k < K - k * BLOCK_SIZE_K") == 1
    return implicit


def test_pipelined_loops_keep_the_expansions() -> None:
    lines = body(translate(_implicit_gemm(), "sm90"))
    # The cp.async ring re-evaluates the mask for iteration `k_next`: the expansion comes with it.
    assert any("(offs_k_ring < K - k_next * BLOCK_SIZE_K)[None, :]" in line for line in lines)
    assert "a = gl.load(a_ptrs, mask=(offs_k < K - k * BLOCK_SIZE_K)[None, :], other=0.0)" in lines
    assert any("with gl.amd.warp_pipeline_stage" in line for line in body(translate(_implicit_gemm(), "gfx950")))


@pytest.mark.slow
@pytest.mark.parametrize("target", ["gfx950", "sm90"])
def test_pipelined_gemm_with_implicit_broadcasts_compiles(target: str, monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    result = translate(_implicit_gemm(), target)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    compiled = verify(result, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16"}, all_configs=True)
    # two configs; on gfx950 each also for the source kernel the launcher keeps for unaligned launches
    assert len([c for c in compiled if not c.kept]) == 2 and len(compiled) == (4 if target == "gfx950" else 2)
    assert all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]


BRANCH_RANKS = '''import triton
import triton.language as tl


@triton.jit
def store_tile_kernel(y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr, AS_3D: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.arange(0, BN)
    y = tl.zeros([BM, BN], dtype=tl.float32) + rows[:, None].to(tl.float32)
    if AS_3D:
        y = tl.expand_dims(y, 0)
        tl.store(y_ptr + tl.arange(0, 1)[:, None, None] + rows[None, :, None] * N + cols[None, None, :], y)
    else:
        tl.store(y_ptr + rows[:, None] * N + cols[None, :], y, mask=(rows[:, None] < M) & (cols[None, :] < N))
'''


def test_a_branch_that_rebinds_a_name_to_another_rank_leaves_the_other_branch_alone() -> None:
    """`y = tl.expand_dims(y, 0)` under a constexpr flag (unsloth's TMA-store style): the `else` branch still sees
    the rank-2 `y`, and after a loop `m = tl.max(m, 1)` rebinds a name to a new layout class."""
    from transpile.engine import translate_source
    from transpile.targets import get_target

    result = translate_source(BRANCH_RANKS, "x.py", get_target("sm90"))
    assert [f.translated for f in result.functions] == [True], result.diagnostics
    assert "y = gl.expand_dims(y, 0)" in result.text
    (store,) = [line for line in result.text.splitlines() if "gl.store(y_ptr + rows[:, None] * N" in line]
    assert ", y, mask=" in store  # the rank-2 `y`, not expanded again


GROUP_QUANT = '''import triton
import triton.language as tl


@triton.jit
def group_quant_kernel(x_ptr, q_ptr, s_ptr, n, BLOCK: tl.constexpr, GROUP: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    xg = tl.reshape(x, (BLOCK // GROUP, GROUP))
    scale = tl.max(tl.abs(xg), axis=1) / 127.0
    q = xg / tl.broadcast_to(tl.expand_dims(scale, 1), (BLOCK // GROUP, GROUP))
    tl.store(q_ptr + offs, tl.reshape(q, (BLOCK,)).to(tl.int8), mask=offs < n)
    tl.store(s_ptr + tl.program_id(0) * (BLOCK // GROUP) + tl.arange(0, BLOCK // GROUP), scale)
'''


def test_a_reshaped_tile_is_laid_out_for_its_reshaped_shape():
    """The class of `tl.reshape(x, (BLOCK // GROUP, GROUP))` is sized by the shape the call names, and a broadcast's
    size-1 dimensions take the new sizes: it was `_blocked_layout([0, 1], ...)`, one column per thread of a 64-wide
    group (0.38x its source on an H100)."""
    from transpile.engine import translate_source
    from transpile.targets import get_target

    text = translate_source(GROUP_QUANT, "q.py", get_target("sm90")).text
    assert "_blocked_layout([BLOCK // GROUP, GROUP], gl.num_warps())" in text
    assert "_blocked_layout([0, 1]" not in text


def test_a_scan_of_a_reduced_row_is_scanned_in_a_blocked_layout() -> None:
    """Triton lowers scans of blocked layouts only ("TODO: unsupported scan layout" for a slice of one): a row sum
    scanned (`tl.associative_scan(tl.sum(x, 1), ...)`, `s.cumsum(0)`, a tuple of a reduced row and an index vector)
    is converted into a blocked layout of its own first (found by compiling public code; `scans` compiles below)."""
    lines = body(translate(SCANS, "gfx950"))
    assert "s_cvt = gl.convert_layout(s, c_layout)" in lines
    assert "c = gl.associative_scan(s_cvt, 0, _add)" in lines
    assert "c_layout: gl.constexpr = _blocked_layout([BLOCK], gl.num_warps())" in lines
    scanned = [line for line in lines if "associative_scan(" in line or "cumsum(" in line]
    assert len(scanned) == 3 and all("_cvt" in line for line in scanned), scanned


@pytest.mark.parametrize("target", ["gfx942", "sm90"])
def test_a_split_operand_holds_its_last_dimension_whole_in_each_thread(target: str) -> None:
    """`tl.split` needs both halves of the last dimension in one thread ("SplitOp requires at least 2 elements per
    thread"); a [BLOCK, 2] tile of 64 rows gave each thread one element on AMD (found by compiling public code; the
    kernel compiles below). The loaded pair tile and a `tl.join` result are laid out so. The halves a split gives
    are in the slice of its operand's layout along the last axis, which is what a join takes to give that layout
    back: no conversion on the way (Triton 3.6 and 3.9 alike; a conversion per split cost the sm90 variant 17% of
    a pair swap's time on an H200)."""
    lines = body(translate(SPLITS, target))
    assert "x_layout: gl.constexpr = _blocked_layout([0, 2], gl.num_warps())" in lines
    assert "# thread holds its last dimension whole (which split needs)." in lines
    assert "a, b = gl.split(x)" in lines and "c, d = gl.split(gl.join(a, b * 2))" in lines, lines
    assert not any("convert_layout" in line for line in lines if "split" in line or "join" in line)
    assert "_blocked_layout([BLOCK, 2]" not in "\n".join(lines)


def test_a_zero_dimensional_tensor_is_a_scalar() -> None:
    """`tl.zeros([], dtype)` (a running total carried across chunks) has no layout and is not broadcast: the variant
    had `b_z[None]`, which Gluon cannot expand (found by compiling public code)."""
    text = HEAD + '''@triton.jit
def running_sum(s, o, T, BT: tl.constexpr):
    b_z = tl.zeros([], dtype=tl.float32)
    for i in range(tl.cdiv(T, BT)):
        offs = i * BT + tl.arange(0, BT)
        x = tl.load(s + offs, mask=offs < T, other=0.0).to(tl.float32)
        y = tl.cumsum(x, axis=0) + b_z
        b_z += tl.sum(x, 0)
        tl.store(o + offs, y, mask=offs < T)
'''
    result = translate_source(text, "k.py", get_target("gfx950"))
    assert result.functions[0].translated
    assert "b_z = gl.zeros([], dtype=gl.float32)\n" in result.text and "b_z[" not in result.text


GATED = HEAD + '''@triton.jit
def gated(q_ptr, k_ptr, g_ptr, o_ptr, BC: tl.constexpr, BK: tl.constexpr):
    r = tl.arange(0, BC)
    c = tl.arange(0, BK)
    q = tl.load(q_ptr + r[:, None] * BK + c[None, :])
    k = tl.load(k_ptr + r[:, None] * BK + c[None, :])
    g = tl.load(g_ptr + r[:, None] * BK + c[None, :]).to(tl.float32)
    a = tl.dot(q * tl.exp(g), tl.trans(k))
    tl.store(o_ptr + r[:, None] * BC + r[None, :], a)
'''


def test_a_dot_of_pointee_data_times_an_fp32_gate_is_laid_out_for_fp32() -> None:
    """`tl.dot(q * g, k)` with `q` loaded (its pointee type) and `g` fp32: the product is fp32 for every pointee but
    fp64 (fp16 data gives fp32 operands; the source itself compiles only where `k` is fp32 too). The AMD variant had
    once laid the dot out for the pointee (fp16: no fp32 MFMA of that shape, found by compiling public code); it is
    laid out for fp32."""
    for target in ("gfx942", "sm90"):
        result = translate_source(GATED, "k.py", get_target(target), gluon_always=True)
        assert result.functions[0].translated, [d.message for d in result.diagnostics]
        assert "gl.float32, gl.num_warps()" in result.text and "q_ptr.dtype.element_ty, gl.num_warps()" not in \
            result.text


def test_a_function_the_tool_cannot_read_is_taken_for_elementwise(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`fast_exp = tl.exp` at module level, called on a vector that is then expanded: its result had been taken for a
    scalar and `fast_exp(b_g)[:, None]` did not compile (found by compiling public code). It is converted to the
    slice layout its use needs."""
    text = HEAD.replace("\n\n\n", "\nfast_exp = tl.exp\n\n\n") + '''@triton.jit
def decay(h_ptr, g_ptr, BK: tl.constexpr, BV: tl.constexpr):
    o_k = tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    b_h = tl.load(h_ptr + o_k[:, None] * BV + o_v[None, :])
    b_g = tl.load(g_ptr + tl.arange(0, BK))
    b_h *= fast_exp(b_g)[:, None]
    tl.store(h_ptr + o_k[:, None] * BV + o_v[None, :], b_h)
'''
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for target in ("sm90", "gfx950"):
        result = translate_source(text, str(tmp_path / "k.py"), get_target(target))
        assert "b_h *= gl.convert_layout(fast_exp(b_g), gl.SliceLayout(1, b_h_layout))[:, None]" in result.text
        compiled = verify(result, {"h_ptr": "*fp32", "g_ptr": "*fp32", "BK": 64, "BV": 64})
        assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def test_expanding_a_zero_dimensional_value(monkeypatch, tmp_path: Path) -> None:
    """`s[None]` of a 0-d tensor (`tl.sum(x, 0)`, `tl.program_id(0)`): Triton expands it to a tensor of ones; Gluon
    cannot expand a value without a layout, so the tensor is filled in at the layout its uses need (`gl.full` for a
    name, `_expand_scalar` for an expression, evaluated once). `tl.full(x.shape, ...)` takes the shape of `x` and
    the layout its uses need. Both were refused (TT010) in 41 public functions."""
    text = HEAD + '''@triton.jit
def center(x_ptr, y_ptr, sums_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs).to(tl.float32)
    s = tl.sum(x, 0)
    tl.store(y_ptr + offs, x - s[None])
    tl.store(sums_ptr + tl.program_id(0)[None], tl.max(x, 0)[None])
    ones = tl.full(x.shape, 1.0, tl.float32)
    tl.store(y_ptr + offs, ones + x + tl.zeros(x.type.get_block_shapes(), tl.float32))
    tile = x[:, None] + tl.program_id(0)[None, None]
    tl.store(y_ptr + offs[:, None] + offs[None, :], tile)
'''
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for target in ("sm90", "gfx942"):
        result = translate_source(text, str(tmp_path / "k.py"), get_target(target))
        assert result.functions[0].translated, [d.format() for d in result.diagnostics]
        assert "gl.store(y_ptr + offs, x - gl.full([1], s, s.dtype, layout=" in result.text
        assert "gl.store(sums_ptr + _expand_scalar(gl.program_id(0), [1], " in result.text
        assert "_expand_scalar(gl.max(x, 0), [1], " in result.text
        assert "ones = gl.full(x.shape, 1.0, gl.float32, layout=" in result.text
        assert "gl.zeros(x.type.get_block_shapes(), gl.float32, layout=" in result.text
        assert "tile = x[:, None] + _expand_scalar(gl.program_id(0), [1, 1], " in result.text
        compiled = verify(result, {"x_ptr": "*fp16", "y_ptr": "*fp32", "sums_ptr": "*fp32", "BLOCK": 256})
        assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def test_expanding_a_zero_dimensional_value_along_an_axis_it_lacks(monkeypatch, tmp_path: Path) -> None:
    """`alpha[:, None]` of a 0-d tensor names an axis `alpha` does not have: Triton up to 3.6 reads the `:` as nothing
    and the None as a new axis (a tensor of one element; 3.9 rejects it), as paged-attention decode kernels write a
    running maximum's rescale (`m = float("-inf")`, then `m_new = tl.maximum(tl.max(qk, axis=0), m)` in the loop,
    `alpha = tl.exp2((m - m_new) * log2e)`, `log2e` a local constexpr). Where the analysis is sure the value is 0-d
    (a reduction of a rank-1 tile along its axis, elementwise math of it, a name bound only to such values and
    numbers) it is translated as 3.6 reads it; where it is not (what a function of another module returns), refused
    at the expression, saying what to write."""
    text = HEAD + '''@triton.jit
def decode(q_ptr, k_ptr, o_ptr, seq_len, BLOCK_N: tl.constexpr, HEAD: tl.constexpr):
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD)
    q = tl.load(q_ptr + offs_d)
    acc = tl.zeros([BLOCK_N, HEAD], dtype=tl.float32)
    m_i = float("-inf")
    log2e: tl.constexpr = 1.4426950408889634
    for start in range(0, seq_len, BLOCK_N):
        rows = start + offs_n
        k = tl.load(k_ptr + rows[:, None] * HEAD + offs_d[None, :], mask=rows[:, None] < seq_len, other=0.0)
        qk = tl.sum((q[None, :] * k).to(tl.float32), axis=1)
        m_new = tl.maximum(tl.max(qk, axis=0), m_i)
        alpha = tl.exp2((m_i - m_new) * log2e)
        acc *= alpha[:, None]
        acc += tl.exp2(qk - m_new)[:, None] * k
        m_i = m_new
    tl.store(o_ptr + offs_d, tl.sum(acc, axis=0))
'''
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for target in ("sm90", "gfx950"):
        result = translate_source(text, str(tmp_path / "k.py"), get_target(target))
        assert result.functions[0].translated, [d.format() for d in result.diagnostics]
        assert "acc *= gl.full([1], alpha, alpha.dtype, layout=gl.SliceLayout(0, acc_layout))[" in result.text
        compiled = {c.kernel: c for c in verify(result, {"q_ptr": "*fp16", "k_ptr": "*fp16", "o_ptr": "*fp32",
                                                          "seq_len": "i32", "BLOCK_N": 32, "HEAD": 64})}
        assert compiled["decode"].ok, compiled["decode"].message
        # (the source kernel, for unaligned launches, is what Triton 3.9 itself rejects)
        assert "too many indices for tensor of rank 0" in compiled["_decode_triton"].message
    opaque = HEAD.replace("import triton.language as tl\n", "import triton.language as tl\nimport lib\n") + '''@triton.jit
def center(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs).to(tl.float32)
    s = lib.scale(n)
    tl.store(y_ptr + offs, x - s[:, None])
'''
    result = translate_source(opaque, "k.py", get_target("sm90"))
    assert not result.functions[0].translated
    assert any(d.code == "TT010" and d.line == 11 and "`s[:, None]` expands a 0-d value along an axis" in d.message
               for d in result.diagnostics), [d.format() for d in result.diagnostics]


def test_an_fp32_dot_beside_a_pointee_typed_dot_in_one_layout_compiles(monkeypatch, tmp_path: Path) -> None:
    """`c = tl.dot(a, b)` on loaded data and `d = tl.dot(a.to(tl.float32), b.to(tl.float32))`, then `c + d`: one
    matrix-core layout is declared for both, at the loaded type's depth (an fp32 MFMA of fp16's depth does not exist;
    found by compiling public code). The fp32 dot runs its own instruction in a layout of the same tiles and warps
    (`_dot`: `_other_depth`), and the variant compiles; PV in attention (`p.to(tl.float16)` beside `q_ptr`'s type)
    is not affected (the attention goldens are unchanged)."""
    text = HEAD + '''@triton.jit
def two_dots(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    offs = r[:, None] * BLOCK + r[None, :]
    a = tl.load(a_ptr + offs)
    b = tl.load(b_ptr + offs)
    c = tl.dot(a, b)
    d = tl.dot(a.to(tl.float32), b.to(tl.float32))
    tl.store(c_ptr + offs, c + d)
'''
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for target in ("gfx942", "sm90"):
        result = translate_source(text, str(tmp_path / "k.py"), get_target(target))
        assert result.functions[0].translated, [d.format() for d in result.diagnostics]
        assert "if _other_depth(acc.type.layout, a.dtype):" in result.text
        compiled = {c.kernel: c for c in verify(result, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32",
                                                          "BLOCK": 64})}
        assert compiled["two_dots"].ok, compiled["two_dots"].message


@pytest.mark.slow
def test_dots_of_two_types_under_a_constexpr_flag_get_the_layout_of_the_compiled_branch(monkeypatch,
                                                                                        tmp_path: Path) -> None:
    """The operands cast to fp32 under a flag (`if CAST_FP32: x = x.to(tl.float32)`, Liger-Kernel's mHC matmul): the
    loop is copied per value of the flag, and the two copies' dots, of two operand types, add into one accumulator.
    The matrix-core layout is declared for the type of the branch the compile takes (`(gl.float32 if CAST_FP32 else
    x_ptr.dtype.element_ty)`), and both compiles of the variant build, where the kernel was refused before. Dots of
    two types outside such a branch are still refused (the test above)."""
    text = HEAD + '''@triton.jit
def mm_cast(x_ptr, w_ptr, out_ptr, N, K, M, stride_xn, stride_wk, stride_on,
            BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_M: tl.constexpr, CAST_FP32: tl.constexpr):
    n_offs = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    m_offs = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    acc = tl.zeros((BLOCK_N, BLOCK_M), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_offs = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + n_offs[:, None] * stride_xn + k_offs[None, :],
                    mask=(n_offs[:, None] < N) & (k_offs[None, :] < K), other=0.0)
        w = tl.load(w_ptr + k_offs[:, None] * stride_wk + m_offs[None, :],
                    mask=(k_offs[:, None] < K) & (m_offs[None, :] < M), other=0.0)
        if CAST_FP32:
            x = x.to(tl.float32)
            w = w.to(tl.float32)
        acc += tl.dot(x, w)
    tl.store(out_ptr + n_offs[:, None] * stride_on + m_offs[None, :], acc,
             mask=(n_offs[:, None] < N) & (m_offs[None, :] < M))
'''
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for target in ("gfx950", "sm90"):
        result = translate_source(text, str(tmp_path / "k.py"), get_target(target), gluon_always=True)
        assert result.functions[0].translated, [d.format() for d in result.diagnostics]
        assert "(gl.float32 if CAST_FP32 else x_ptr.dtype.element_ty)" in result.text
        for flag in (True, False):
            compiled = verify(result, {"x_ptr": "*bf16", "w_ptr": "*bf16", "out_ptr": "*fp32", "BLOCK_N": 64,
                                       "BLOCK_K": 32, "BLOCK_M": 64, "CAST_FP32": flag})
            assert compiled and all(c.ok for c in compiled), [(flag, c.label, c.message) for c in compiled]


SOFTMAX_ROWS = HEAD + '''@triton.jit
def _normalised(x):
    x = x - tl.max(x, axis=1)[:, None]
    e = tl.exp(x)
    return e / tl.sum(e, axis=1)[:, None]


@triton.jit
def softmax_rows(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.arange(0, BN)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=mask, other=-float("inf")).to(tl.float32)
    z = x - tl.max(x, axis=1)[:, None]
    num = tl.exp(z)
    y = num / tl.sum(num, axis=1)[:, None]
    tl.store(y_ptr + rows[:, None] * N + cols[None, :], y + _normalised(x), mask=mask)
'''


@pytest.mark.slow
@pytest.mark.parametrize("target", ["sm90", "gfx950"])
def test_reductions_expanded_with_none_indices_translate_in_kernels_and_helpers(target: str, tmp_path: Path,
                                                                                 monkeypatch) -> None:
    """`x - tl.max(x, axis=1)[:, None]`, as every softmax writes it, in the kernel and in a helper it calls: both are
    translated (the reduction's slice layout expanded back to the tile's) and compile."""
    result = translate_source(SOFTMAX_ROWS, str(tmp_path / "k.py"), get_target(target))
    assert all(o.translated for o in result.functions), [d.format() for d in result.diagnostics]
    assert not any(d.code in ("TT010", "TT011", "TT012") for d in result.diagnostics)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    compiled = verify(result, {"x_ptr": "*fp16", "y_ptr": "*fp32", "BM": 16, "BN": 128})
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


FP8_UNDER_A_FLAG = HEAD + '''@triton.jit
def attn_fp8(Q, K, V, Out, n_keys, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
             USE_FP8: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + offs_m[:, None] * D + offs_d[None, :])
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    for start_n in range(0, n_keys, BLOCK_N):
        k = tl.load(K + (start_n + offs_n)[None, :] * D + offs_d[:, None])
        v = tl.load(V + (start_n + offs_n)[:, None] * D + offs_d[None, :])
        qk = tl.dot(q, k)
        p = tl.exp(qk - tl.max(qk, axis=1)[:, None])
        if USE_FP8:
            p = p.to(tl.float8e5)
            v = v.to(tl.float8e5)
        else:
            p = p.to(tl.float16)
        acc += tl.dot(p, v)
    tl.store(Out + offs_m[:, None] * D + offs_d[None, :], acc)
'''


@pytest.mark.slow
def test_a_dot_on_fp8_under_a_flag_beside_fp16_gets_the_layout_of_the_compiled_branch(tmp_path: Path,
                                                                                       monkeypatch) -> None:
    """PV on fp8 where a flag holds and fp16 where it does not (kernl's attention): the copies of the loop hold dots of
    two operand types, and the matrix-core layout is declared for the branch the compile takes; both compile."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {"Q": "*fp16", "K": "*fp16", "V": "*fp16", "Out": "*fp32", "BLOCK_M": 64, "BLOCK_N": 64, "D": 64}
    for target, flags in (("sm90", (True, False)), ("gfx950", (True, False))):
        result = translate_source(FP8_UNDER_A_FLAG, str(tmp_path / "k.py"), get_target(target), gluon_always=True)
        assert result.functions[0].translated, [d.format() for d in result.diagnostics]
        assert "(gl.float8e5 if USE_FP8 else gl.float16)" in result.text
        for flag in flags:
            compiled = verify(result, {**values, "USE_FP8": flag})
            assert compiled and all(c.ok for c in compiled), [(target, flag, c.label, c.message) for c in compiled]


def test_an_expanded_expression_written_over_several_lines(monkeypatch, tmp_path: Path) -> None:
    """`(pid * stride)[None]` written over several lines (public conv2d kernels; its refusal note once crashed the
    emitter): the expression is evaluated once, in `_expand_scalar`, and the variant compiles."""
    text = HEAD + '''@triton.jit
def k(x_ptr, y_ptr, stride, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    base = (
        pid * stride
    )[None]
    tl.store(y_ptr + base + offs, tl.load(x_ptr + offs))
'''
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = translate_source(text, str(tmp_path / "k.py"), get_target("sm90"))
    assert result.functions[0].translated, [d.format() for d in result.diagnostics]
    assert "base=_expand_scalar((pid*stride),[1],base_layout)" in "".join(result.text.split())
    compiled = verify(result, {"x_ptr": "*fp32", "y_ptr": "*fp32", "BLOCK": 128})
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


MAYBE_NUMBER = HEAD + '''@triton.jit
def _scale(x, s):
    return x * s


@triton.jit
def scaled(x_ptr, s_ptr, y_ptr, N, HAS_S: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < N)
    if HAS_S:
        s = tl.load(s_ptr + offs, mask=offs < N)
    else:
        s = 1.0
    tl.store(y_ptr + offs, _scale(x, s), mask=offs < N)
'''


@pytest.mark.slow
@pytest.mark.parametrize("target", ["gfx942", "sm90"])
def test_a_helper_argument_that_may_be_a_number_is_converted_only_when_a_tensor(
        target: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`s` is a tensor when `HAS_S` is set and `1.0` otherwise: the helper converted
    it on entry unconditionally, and `gl.convert_layout` refused the scalar (found by compiling public code). The
    conversion is decided at compile time; both launches compile."""
    result = translate(MAYBE_NUMBER, target)
    assert all(f.translated for f in result.functions), result.diagnostics
    lines = body(result)
    assert "x = gl.convert_layout(x, x_layout)" in lines
    at = lines.index("if isinstance(s, gl.tensor):  # a caller may pass a number (a constexpr or a scalar)")
    assert lines[at + 1:at + 3] == ["if s.type.is_block():", "s = gl.convert_layout(s, x_layout)"]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {"x_ptr": "*fp32", "s_ptr": "*fp32", "y_ptr": "*fp32", "BLOCK": 64}
    for flag in (True, False):
        compiled = verify(result, {**values, "HAS_S": flag}, all_configs=True)
        failures = [f"{c.label}: {c.message}" for c in compiled if not c.ok]
        assert compiled and not failures, "\n".join(failures)


WELFORD = HEAD + '''@triton.jit
def _combine(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    n = n_a + n_b
    share = n_b / tl.maximum(n, 1.0)
    delta = mean_b - mean_a
    return mean_a + delta * share, m2_a + m2_b + delta * delta * n_a * share, n


@triton.jit
def welford(x_ptr, mean_ptr, var_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    mean = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    m2 = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    count = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        inside = (rows[:, None] < M) & (cols[None, :] < N)
        x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=inside, other=0.0)
        seen = count + inside.to(tl.float32)
        delta = x - mean
        mean = tl.where(inside, mean + delta / tl.maximum(seen, 1.0), mean)
        m2 = tl.where(inside, m2 + delta * (x - mean), m2)
        count = seen
    row_mean, row_m2, row_n = tl.reduce((mean, m2, count), axis=1, combine_fn=_combine)
    tl.store(mean_ptr + rows, row_mean, mask=rows < M)
    tl.store(var_ptr + rows, row_m2 / row_n, mask=rows < M)
'''


def test_a_reduction_of_a_tuple_of_tiles(monkeypatch, tmp_path: Path) -> None:
    """`tl.reduce((mean, m2, count), axis=1, combine_fn=...)` (a Welford reduction): the operands share one layout
    and the results are a tuple of rows in its slice; refused before as a 0-d expansion (the results were taken for
    scalars). The tiles are accumulated in the loop and reduced along
    their last axis once after it: their layout has Triton's warp arrangement (`warps_last=True`), which measured
    1.0x where warps along the rows ran 0.57-0.81x (an H200)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for target in ("sm90", "gfx950"):
        result = translate_source(WELFORD, str(tmp_path / "k.py"), get_target(target))
        assert result.functions[-1].translated, [d.format() for d in result.diagnostics]
        assert "row_mean, row_m2, row_n = gl.reduce((mean, m2, count), axis=1, combine_fn=_combine)" in \
            " ".join(result.text.split()).replace("( ", "(").replace(" )", ")")
        assert "_blocked_layout([BLOCK_M, BLOCK_N], gl.num_warps(), warps_last=True)" in result.text
        compiled = verify(result, {"x_ptr": "*fp32", "mean_ptr": "*fp32", "var_ptr": "*fp32", "BLOCK_M": 4,
                                   "BLOCK_N": 512})
        assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def test_rows_reduced_inside_the_loop_keep_warps_along_the_rows() -> None:
    """A tile reduced along its last axis inside the loop (an online softmax's row max) keeps the warps on its rows,
    where the reduction stays inside a warp; only tiles reduced once, after the loop, take `warps_last`."""
    text = HEAD + '''@triton.jit
def online_max(x_ptr, y_ptr, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=cols[None, :] < N, other=float("-inf"))
        m = tl.maximum(m, tl.max(x, 1))
    tl.store(y_ptr + rows, m)
'''
    result = translate_source(text, "k.py", get_target("sm90"))
    assert result.functions[0].translated
    assert "warps_last" not in result.text.split("def online_max")[1]


# Element types real kernels leave for the tool to work out: a pointer tile whose offsets add a tensor of integer
# type the analysis cannot name (a convolution's decoded rows), a probability tile in fp32 made from the scores and a
# loaded row statistic, and casts spelt `.to(x.type.element_ty)` / `.to(p.type.element_ty)`.
BWD_SPELLINGS = HEAD + '''@triton.jit
def dkdv(Q, K, V, DO, LSE, DELTA, DK, DV, T, stride_t,
         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, HEAD_DIM)
    k = tl.load(K + rows[:, None] * stride_t + cols[None, :])
    v = tl.load(V + rows[:, None] * stride_t + cols[None, :])
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    for start in range(0, T, BLOCK_M):
        offs = start + tl.arange(0, BLOCK_M)
        qT = tl.load(Q + offs[None, :] * stride_t + cols[:, None])
        lse = tl.load(LSE + offs)
        pT = tl.math.exp2(tl.dot(k, qT) - lse[None, :])
        do = tl.load(DO + offs[:, None] * stride_t + cols[None, :])
        dv += tl.dot(pT.to(do.type.element_ty), do)
        delta = tl.load(DELTA + offs)
        dsT = pT * (tl.dot(v, tl.trans(do)) - delta[None, :])
        dk += tl.dot(dsT.to(qT.type.element_ty), tl.trans(qT))
    tl.store(DK + rows[:, None] * stride_t + cols[None, :], dk.to(DK.type.element_ty))
    tl.store(DV + rows[:, None] * stride_t + cols[None, :], dv.to(DV.type.element_ty))
'''

DECODED_ROWS = HEAD + '''@triton.jit
def conv_rows(X, W, Y, M, C, K_out, H, W_in, pad, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_K: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    image = offs_m[:, None] // (H * W_in)
    row = (offs_m[:, None] % (H * W_in)) // W_in - pad
    batch = tl.program_id(2)[None]
    x_base = X + image * (C * H * W_in) + row * W_in + batch[:, None]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, C, BLOCK_K):
        x = tl.load(x_base + (k0 + offs_k)[None, :] * (H * W_in), mask=(row >= 0) & (row < H), other=0.0)
        w = tl.load(W + offs_n[None, :] * C + (k0 + offs_k)[:, None])
        acc = tl.dot(x, w, acc)
    tl.store(Y + offs_m[:, None] * K_out + offs_n[None, :], acc.to(Y.type.element_ty))
'''


@pytest.mark.parametrize("target", ["gfx950", "sm90"])
@pytest.mark.parametrize("source", [BWD_SPELLINGS, DECODED_ROWS], ids=["bwd_spellings", "decoded_rows"])
def test_element_types_real_kernels_leave_implicit(source: str, target: str) -> None:
    result = translate(source, target)
    assert all(f.translated for f in result.functions), [d.message for d in result.diagnostics]
    # the dots are laid out for the operands' own (pointee) type, read off the pointer parameters
    text = result.text
    assert "_mma_layout(" in text and ("Q.dtype.element_ty, gl.num_warps()" in text
                                       or "X.dtype.element_ty, gl.num_warps()" in text), text


def test_promotion_of_fp32_against_a_type_only_the_kernel_knows() -> None:
    # fp32 (a product, a softmax) against a loaded type: fp32 for every type a kernel with dots reads but fp64
    assert promote("lse_ptr.dtype.element_ty", "gl.float32") == "gl.float32"
    assert promote("gl.float32", "lse_ptr.dtype.element_ty") == "gl.float32"
    assert promote("gl.float16", "lse_ptr.dtype.element_ty") is None


@pytest.mark.slow
@pytest.mark.parametrize("target", ["gfx950", "sm90"])
def test_element_types_real_kernels_leave_implicit_compile(target: str, monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    bf16 = {p: "*bf16" for p in ("Q", "K", "V", "DO", "DK", "DV")}
    cases = [(BWD_SPELLINGS, {**bf16, "LSE": "*fp32", "DELTA": "*fp32", "BLOCK_M": 64, "BLOCK_N": 64,
                              "HEAD_DIM": 64}),
             (DECODED_ROWS, {"X": "*fp16", "W": "*fp16", "Y": "*fp16", "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}),
             (GATED, {"q_ptr": "*fp32", "k_ptr": "*fp32", "g_ptr": "*fp32", "o_ptr": "*fp32", "BC": 64, "BK": 32})]
    for source, values in cases:
        result = translate(source, target)
        compiled = verify(result, values, all_configs=True)
        assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]


HOST_DESCRIPTOR = HEAD + '''@triton.jit
def host_desc(a_desc, b_desc, c_ptr, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = a_desc.load([tl.program_id(0) * BLOCK_M, k])
        b = b_desc.load([k, tl.program_id(1) * BLOCK_N])
        acc = tl.dot(a, b, acc)
    rows = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    tl.store(c_ptr + rows[:, None] * BLOCK_N + cols[None, :], acc)
    tl.store(c_ptr + rows, a_desc.gather(rows, 0))
'''


@pytest.mark.parametrize("target", ["gfx950", "sm90"])
def test_a_tensor_descriptor_the_host_built_is_named_with_its_line(target: str) -> None:
    """`a_desc.load([...])` on a kernel parameter (a `TensorDescriptor` the host made) that the kernel also reads
    otherwise than as the pass makes in the kernel (`gather`): its element type, block shape and layout are the
    launch's. The refusal names the call, its line and the in-kernel form to write instead (it said only that the
    dot's element type was unknown)."""
    result = translate_source(HOST_DESCRIPTOR, "k.py", get_target(target))
    assert not result.functions[0].translated
    first = result.diagnostics[0]
    assert (first.code, first.line, first.col) == ("TT010", 9, 13), first
    assert first.message.startswith("`a_desc.load(...)` reads a tensor descriptor the host built")
    assert "tl.make_tensor_descriptor(" in first.message


def test_an_integer_parameter_added_to_offsets_is_no_pointer() -> None:
    """`rn[None, :] - seq_len` (a position bias) with `seq_len` an integer parameter: no tensor of pointers, so the
    float tile it is added to keeps a float type; it had been given `seq_len.dtype.element_ty` as its type, and the
    dot of it was laid out for that (did not compile; found in review)."""
    text = HEAD + '''@triton.jit
def biased(X, W, W2, Y, seq_len, slope, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    x = tl.load(X + rm[:, None] * BLOCK_K + rk[None, :])
    w = tl.load(W + rk[:, None] * BLOCK_N + rn[None, :])
    w2 = tl.load(W2 + rn[:, None] * BLOCK_K + rk[None, :])
    s = tl.dot(x, w)
    s = s + slope * (rn[None, :] - seq_len)
    o = tl.dot(s, w2)
    tl.store(Y + rm[:, None] * BLOCK_K + rk[None, :], o)
'''
    for target in ("gfx950", "sm90"):
        result = translate_source(text, "k.py", get_target(target), gluon_always=True)
        assert "seq_len.dtype.element_ty" not in result.text


INDEXED = HEAD + '''@triton.jit
def first_of_block(x_ptr, out_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.store(out_ptr, x[0])


@triton.jit
def halves(x_ptr, out_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.store(out_ptr + tl.arange(0, BLOCK // 2), x[: BLOCK // 2] + x[BLOCK // 2 :])
'''


def test_indexing_a_tensor_is_refused_as_a_construct_triton_rejects_too(tmp_path: Path) -> None:
    """`x[0]` and `x[:BLOCK // 2]` (Triton dialects of other backends, as FlagGems' Cambricon and Ascend kernels
    write them): refused at the expression, saying that Triton's own compiler rejects it too, and what to write. The
    claim is checked: Triton compiles neither kernel for gfx950."""
    import importlib.util

    import triton
    from triton.backends.compiler import GPUTarget

    from transpile.language import NOT_TRITON

    result = translate_source(INDEXED, "k.py", get_target("gfx950"))
    for fn, line, written in (("first_of_block", 8, "x[0]"), ("halves", 14, "x[: BLOCK // 2]")):
        assert not next(f for f in result.functions if f.name == fn).translated
        assert any(d.code == "TT010" and d.line == line and d.message.startswith(f"`{written}` indexes or slices a "
                                                                                 f"tensor, {NOT_TRITON}")
                   for d in result.diagnostics), [d.format() for d in result.diagnostics]
    path = tmp_path / "indexed.py"
    path.write_text(INDEXED)
    spec = importlib.util.spec_from_file_location("indexed", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    for kernel in (module.first_of_block, module.halves):
        source = triton.compiler.ASTSource(kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32"}, constexprs={"BLOCK": 64})
        with pytest.raises(Exception, match="unsupported tensor index"):
            triton.compile(source, target=GPUTarget("hip", "gfx950", 64))


def test_a_refused_reshape_leaves_a_tensor_of_its_rank_behind() -> None:
    """`tl.view(x, (R, N))` is refused (its element order is the compiler's); the names computed from it are still
    tensors of their ranks: `tl.sum(tl.trans(v), axis=0)[:, None]` draws no second refusal (it was reported as
    expanding a 0-d value)."""
    text = HEAD + '''@triton.jit
def row_means(x_ptr, mean_ptr, M, N: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    x = tl.load(x_ptr + rows[:, None] * N + tl.arange(0, N)[None, :], mask=rows[:, None] < M, other=0.0)
    v = tl.view(x, (ROWS, N))
    mean = tl.sum(tl.trans(v), axis=0) / N
    tl.store(mean_ptr + rows[:, None], mean[:, None], mask=rows[:, None] < M)
'''
    result = translate_source(text, "k.py", get_target("gfx950"))
    assert not result.functions[0].translated
    refusals = [d for d in result.diagnostics if d.severity.value == "refusal"]
    assert [(d.code, d.line) for d in refusals] == [("TT011", 9)], [d.format() for d in result.diagnostics]


def test_broadcasting_a_zero_dimensional_value_fills_a_tensor_in_its_layout(monkeypatch: pytest.MonkeyPatch,
                                                                            tmp_path: Path) -> None:
    """`tl.broadcast_to(prev, (BLOCK,))` of a loaded scalar and of a reduction's result (the carry of a chunked
    cumulative max, FlagGems' style): Triton splats a 0-d tensor; the translation fills a tensor of the shape with it in
    its layout (`gl.full` for a name, `_expand_scalar` for an expression). A number is still refused (its type is not
    the source's to give). The variants compile for an AMD target and sm90."""
    text = HEAD + '''@triton.jit
def running_max(x_ptr, y_ptr, carry_ptr, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    prev = tl.load(carry_ptr + tl.program_id(0))
    x = tl.load(x_ptr + offs, mask=offs < N, other=0.0)
    prev_b = tl.broadcast_to(prev, (BLOCK,))
    top = tl.broadcast_to(tl.max(x, axis=0), [BLOCK])
    tl.store(y_ptr + offs, tl.maximum(x, prev_b) + top, mask=offs < N)
'''
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for target in ("gfx950", "sm90"):
        result = translate_source(text, str(tmp_path / "k.py"), get_target(target))
        assert result.functions[0].translated, [d.format() for d in result.diagnostics]
        assert "prev_b = gl.full([BLOCK], prev, prev.dtype, layout=offs_layout)" in result.text
        assert "top = _expand_scalar(gl.max(x, axis=0), [BLOCK], offs_layout)" in result.text
        compiled = verify(result, {"x_ptr": "*fp32", "y_ptr": "*fp32", "carry_ptr": "*fp32", "N": "i32",
                                   "BLOCK": 256})
        assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]
    number = text.replace("tl.broadcast_to(prev, (BLOCK,))", "tl.broadcast_to(0.0, (BLOCK,))")
    result = translate_source(number, "k.py", get_target("gfx950"))
    assert any(d.code == "TT010" and d.line == 10 and "`tl.broadcast_to` of a scalar" in d.message
               for d in result.diagnostics), [d.format() for d in result.diagnostics]


SCALED_BY_FLAG = HEAD + '''@triton.jit
def scaled_gemm(a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, K, stride_bk, stride_bsk, group_k: tl.constexpr,
                group_n: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                use_int8: tl.constexpr, use_fp8: tl.constexpr):
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :]
    if use_int8:
        b_scale_ptrs = b_scale_ptr + offs_n[None, :]
        b_scale = tl.load(b_scale_ptrs)
    if use_fp8:
        if group_k > 0:
            a_scale_ptrs = a_scale_ptr + offs_m
            b_scale_ptrs = b_scale_ptr + offs_n // group_n
        else:
            a_scale = tl.load(a_scale_ptr)
            b_scale = tl.load(b_scale_ptr)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(tl.cdiv(K, BK)):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        if use_int8:
            acc = tl.dot(a, b.to(tl.float16), acc=acc)
        elif use_fp8:
            if group_k > 0:
                offs_ks = k * BK // group_k
                a_scale = tl.load(a_scale_ptrs + offs_ks * K)
                b_scale = tl.load(b_scale_ptrs + offs_ks * stride_bsk)
                acc += tl.dot(a, b) * a_scale[:, None] * b_scale[None, :]
            else:
                acc = tl.dot(a, b, acc=acc)
        else:
            acc += tl.dot(a, b)
        a_ptrs += BK
        b_ptrs += BK * stride_bk
    tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc.to(tl.float16))
'''


def test_a_name_one_constexpr_branch_rebinds_to_another_rank_is_read_as_that_branch_leaves_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """MoE GEMMs' style: `b_scale_ptrs` per column (rank 2) under `if use_int8:`, per group (rank 1) under
    `if use_fp8: if group_k > 0: ... else: ...`, then read under the same flags in the loop. The `else` that leaves it
    alone no longer brings the rank-2 value back after the `if` (an `if` without `else` did not either), so the loop's
    `b_scale[None, :]` is a row, not a rank-3 tensor (it was refused: `acc` updated in place with a rank-3 tensor).
    The variant compiles for the fp8 per-group, fp8 per-tensor and int8 launches."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = translate_source(SCALED_BY_FLAG, str(tmp_path / "k.py"), get_target("gfx950"))
    assert result.functions[0].translated, [d.format() for d in result.diagnostics]
    assert not [d for d in result.diagnostics if d.code == "TT010"], [d.format() for d in result.diagnostics]
    common = {"c_ptr": "*fp16", "a_scale_ptr": "*fp32", "b_scale_ptr": "*fp32", "BM": 64, "BN": 64, "BK": 64,
              "group_n": 128}
    for values in ({"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "use_int8": 0, "use_fp8": 1, "group_k": 128},
                   {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "use_int8": 0, "use_fp8": 1, "group_k": 0},
                   {"a_ptr": "*fp16", "b_ptr": "*i8", "use_int8": 1, "use_fp8": 0, "group_k": 0}):
        compiled = verify(result, common | values)
        assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


AXIS_HELPERS = HEAD + '''@triton.jit
def _amax(x, axis):
    x = tl.where(x == x, x, float("inf"))
    return tl.max(x, axis=axis)


@triton.jit
def _pair_max(value, index, axis=None, keep_dims=False):
    return tl.max(value, axis=axis, keep_dims=keep_dims), tl.max(index, axis=axis, keep_dims=keep_dims)


@triton.jit
def _scaled_amax(x, axis):
    return _amax(x, axis) * 2.0


@triton.jit
def row_amax(x_ptr, y_ptr, z_ptr, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=cols[None, :] < N, other=0.0)
    tl.store(y_ptr + rows, _amax(x, 1) + _scaled_amax(x, 1))
    top, where = _pair_max(x, cols[None, :] + rows[:, None] * 0, axis=1)
    tl.store(z_ptr + rows, top + where)
'''


def test_a_reduction_axis_every_call_of_its_helper_gives_as_one_integer(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    """`tl.max(x, axis=axis)` in a helper whose every call passes `axis` the same integer (positionally, by keyword,
    over a `None` default, or passing on a parameter of the calling helper that has one; torchao's and FlagGems'
    reduction helpers): Triton compiles the helper with that constant, and so does the analysis (it was refused:
    "reduction axis must be an integer literal"); `keep_dims=keep_dims` over a `False` default keeps no dimension (it
    was read as `True`). Calls that disagree keep the refusal, which now says what would do. The variants compile for
    gfx950 and sm90."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for target in ("gfx950", "sm90"):
        result = translate_source(AXIS_HELPERS, str(tmp_path / "k.py"), get_target(target))
        assert all(f.translated for f in result.functions), [d.format() for d in result.diagnostics]
        assert "return gl.max(x, axis=axis)" in result.text
        compiled = verify(result, {"x_ptr": "*fp32", "y_ptr": "*fp32", "z_ptr": "*fp32", "BLOCK_M": 16, "BLOCK_N": 64})
        assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]
    mixed = AXIS_HELPERS + "    tl.store(z_ptr + cols, _amax(x, 0))\n"
    result = translate_source(mixed, "k.py", get_target("gfx950"))
    assert any(d.code == "TT010" and d.line == 8 and "a parameter of a helper that every call passes the same integer"
               in d.message for d in result.diagnostics), [d.format() for d in result.diagnostics]


def test_a_program_id_expanded_with_colons_is_a_tensor_of_ones() -> None:
    """`pid_n[None, :]` of a program id (or a scalar computed from ids and parameters), as torchao's and tritonbench's
    kernels write it: Triton up to 3.6 reads each `:` of a 0-d tensor as nothing and each None as a new axis (3.9
    rejects it), so the Gluon kernel fills a tensor of ones; a value the analysis cannot see (what a helper of
    another module returns) keeps the refusal."""
    text = HEAD + '''@triton.jit
def scales(s_ptr, M, N, BLOCK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    groups = tl.cdiv(N, BLOCK)
    col = pid_n % groups
    rows = pid_m * BLOCK + tl.arange(0, BLOCK)
    offs = rows[:, None] * N + col[None, :]
    mask = (rows[:, None] < M) & (col < groups)[None, :]
    tl.store(s_ptr + offs, 1.0, mask=mask)
'''
    for target in ("gfx950", "sm90"):
        result = translate_source(text, "k.py", get_target(target))
        assert result.functions[0].translated, [d.format() for d in result.diagnostics]
        assert "gl.full([1], col, col.dtype, layout=" in result.text
        compiled = {c.kernel: c for c in verify(result, {"s_ptr": "*fp32", "BLOCK": 64})}
        assert compiled["scales"].ok, compiled["scales"].message
        # (the source kernel, for unaligned launches, is what Triton 3.9 itself rejects)
        assert "too many indices for tensor of rank 0" in compiled["_scales_triton"].message
    opaque = text.replace("    col = pid_n % groups\n", "    col = lib.bucket(pid_n, groups)\n").replace(
        "import triton.language as tl\n", "import triton.language as tl\nimport lib\n")
    refused = translate_source(opaque, "k.py", get_target("gfx950"))
    assert not refused.functions[0].translated
    assert any("`col[None, :]` expands a 0-d value" in d.message for d in refused.diagnostics)


def test_a_fill_shaped_like_a_tensor_of_unknown_rank_takes_its_layout(monkeypatch, tmp_path: Path) -> None:
    """`tl.full(inp.shape, value, dtype=inp.dtype)` in a helper no function of the file calls (the pointwise helpers
    code generators such as FlagGems' `pointwise_dynamic` wrap): the rank of `inp` is unknown, and the fill takes
    `inp`'s own layout (`layout=inp.type.layout`); `tl.full(s.shape, ...)` of a 0-d value (a scalar loaded through a
    pointer parameter, `tl.where` of it) is the value itself in Gluon, no layout. Both were refused (TT010: "needs a
    literal shape list")."""
    text = HEAD + '''@triton.jit
def fill_like(inp, value):
    return tl.full(inp.shape, value, dtype=inp.dtype)


@triton.jit
def clamp_scale(x_ptr, y_ptr, amax_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    amax = tl.load(amax_ptr)
    safe = tl.where(amax == 0, 1.0, amax)
    top = tl.full(safe.shape, 448.0, safe.dtype)
    tl.store(y_ptr + offs, x * (top / safe), mask=offs < n)
'''
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for target in ("sm90", "gfx950"):
        result = translate_source(text, str(tmp_path / "k.py"), get_target(target))
        assert not [d for d in result.diagnostics if d.code == "TT010"], [d.format() for d in result.diagnostics]
        assert "return gl.full(inp.shape, value, dtype=inp.dtype, layout=inp.type.layout)" in result.text
        assert "top = gl.full(safe.shape, 448.0, safe.dtype)\n" in result.text
        compiled = {c.kernel: c for c in verify(result, {"x_ptr": "*fp32", "y_ptr": "*fp32", "amax_ptr": "*fp32",
                                                          "n": "i32", "BLOCK": 256})}
        assert compiled["clamp_scale"].ok, compiled["clamp_scale"].message


# A name that holds a vector in the loop and is rebound after it to a scalar read from memory (the style of
# chunked state-space scans: a per-position scale in the loop, the chunk's last decay after it).
REBOUND_SCALAR = HEAD + '''@triton.jit
def rebound(x_ptr, d_ptr, last_ptr, y_ptr, T, BM: tl.constexpr, BK: tl.constexpr):
    rows = tl.arange(0, BM)
    ks = tl.arange(0, BK)
    acc = tl.zeros((BM, BK), dtype=tl.float32)
    for k in range(0, T, BK):
        scale = tl.exp(tl.load(d_ptr + k + ks, mask=k + ks < T, other=0.0))
        acc += tl.load(x_ptr + rows[:, None] * T + (k + ks)[None, :], mask=(k + ks)[None, :] < T, other=0.0) \\
            * scale[None, :]
    last = tl.load(last_ptr)
    if last > 0:
        scale = tl.exp(last)
        acc = acc * scale
    tl.store(y_ptr + rows[:, None] * BK + ks[None, :], acc)
'''


@pytest.mark.parametrize("target", ["gfx950", "sm90"])
def test_a_name_rebound_to_a_loaded_scalar_is_a_scalar_after(target: str, monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    """A scalar read from memory replaces the vector the name held: `acc * scale` multiplies by the scalar (the
    translation broadcast it as a row, `scale[None, :]`, which does not compile)."""
    result = translate_source(REBOUND_SCALAR, str(tmp_path / "k.py"), get_target(target))
    assert result.functions[0].translated, [d.format() for d in result.diagnostics]
    assert "acc = acc * scale\n" in result.text and "scale[None, :]\n" in result.text
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    compiled = verify(result, {"x_ptr": "*fp32", "d_ptr": "*fp32", "last_ptr": "*fp32", "y_ptr": "*fp32", "BM": 16,
                               "BK": 32})
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


# Tiles of pointers moved by an integer parameter each iteration (`x_ptrs += stride_x_head`: a loop over heads, the
# style of mamba's chunk-state backward): the pointee stays the tile's.
MOVED_BY_PARAM = HEAD + '''@triton.jit
def heads(x_ptr, d_ptr, out_ptr, nheads, stride_x_head, stride_d_head, BM: tl.constexpr, BN: tl.constexpr,
          BK: tl.constexpr):
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    x_ptrs = x_ptr + offs_m[:, None] * BK + offs_k[None, :]
    d_ptrs = d_ptr + offs_k[:, None] * BN + offs_n[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for h in range(nheads):
        x = tl.load(x_ptrs)
        d = tl.load(d_ptrs).to(x_ptrs.dtype.element_ty)
        acc += tl.dot(x, d)
        x_ptrs += stride_x_head
        d_ptrs += stride_d_head
    tl.store(out_ptr + offs_m[:, None] * BN + offs_n[None, :], acc)
'''


@pytest.mark.parametrize("target", ["gfx950", "sm90"])
def test_a_pointer_tile_moved_by_an_integer_parameter_keeps_its_pointee(target: str, monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    """The element type of `tl.load(x_ptrs)` after `x_ptrs += stride_x_head` is x_ptr's (it read
    `stride_x_head.dtype.element_ty`, and the sm90 variant of mamba's `_chunk_state_bwd_db_kernel` did not compile),
    and the sm90 launcher tests the parameters that move the tiles."""
    result = translate_source(MOVED_BY_PARAM, str(tmp_path / "k.py"), get_target(target), gluon_always=True)
    assert result.functions[0].translated, [d.format() for d in result.diagnostics]
    assert "stride_x_head.dtype" not in result.text and "stride_d_head.dtype" not in result.text
    assert "x_ptr.dtype.element_ty" in result.text
    # (compiled as emitted by default; on sm90 its launcher runs the Gluon kernel where the integer parameters that
    # move the tiles are multiples of 16, as a launch specialises them: the cp.async copies take no 2-byte copy)
    result = translate_source(MOVED_BY_PARAM, str(tmp_path / "k.py"), get_target(target))
    if target == "sm90":
        assert {"stride_x_head", "stride_d_head"} <= set(result.functions[0].dispatch.divisible)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    compiled = verify(result, {"x_ptr": "*fp16", "d_ptr": "*fp32", "out_ptr": "*fp32", "nheads": "i32",
                               "stride_x_head": "i32", "stride_d_head": "i32", "BM": 64, "BN": 64, "BK": 32})
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]
