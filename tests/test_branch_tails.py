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
# called with a tensor in one place and None in another: it is copied per kind of call (`transpile.passes.specialise`;
# `None` is a kind of its own), and each copy is analysed for the branch its call compiles, so the code after the `if`
# need not be copied into the branches (it was, when both branches were analysed in every copy)
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
def test_a_helper_branching_on_an_optional_argument_is_specialised(
        target: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = translate_source(OPTIONAL, "k.py", get_target(target))
    assert all(f.translated for f in result.functions), [d.format() for d in result.diagnostics]
    assert not [d for d in result.diagnostics if d.code in ("TT010", "TT012")]
    assert "first = _load_tile_n(x_ptr, rows, None, n_rows)" in result.text
    assert "offs_2" not in result.text  # (no branch needs its own copy of the code after the `if`)
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


# The same flag tested again after the chain, inside the loop (flash-attention's Triton kernels: a bias per key or a
# matrix, chosen by `BIAS_TYPE` before the loop and loaded under the same tests in it)
BIAS = HEAD + '''@triton.jit
def scores_bias(Q, K, Bias, Out, n_keys, stride_bm, BIAS_TYPE: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, D: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    if BIAS_TYPE == "vector":
        b_ptrs = Bias + offs_n
    elif BIAS_TYPE == "matrix":
        b_ptrs = Bias + (offs_m[:, None] * stride_bm + offs_n[None, :])
    q = tl.load(Q + offs_m[:, None] * D + offs_d[None, :])
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start_n in range(0, n_keys, BLOCK_N):
        k = tl.load(K + (start_n + offs_n)[:, None] * D + offs_d[None, :])
        qk = tl.dot(q, tl.trans(k))
        if BIAS_TYPE != "none":
            if BIAS_TYPE == "vector":
                bias = tl.load(b_ptrs + start_n).to(tl.float32)
                bias = bias[None, :]
            elif BIAS_TYPE == "matrix":
                bias = tl.load(b_ptrs + start_n).to(tl.float32)
            qk = qk + bias
        acc += qk
    tl.store(Out + offs_m[:, None] * BLOCK_N + offs_n[None, :], acc)
'''


def test_the_flags_a_clause_decides_are_decided_in_its_copy() -> None:
    """In each clause's copy, an `if` its test decides is replaced by the branch it takes (dedented); one that fails
    with no `else` by `None` for the names only it binds (where the source reads them, it cannot compile either);
    undecided tests stay."""
    text, lines = split_branches(BIAS, [11])
    copies = text.split("    elif BIAS_TYPE == \"matrix\":\n")[1].split("    else:\n")
    vector = text.split("    elif BIAS_TYPE == \"matrix\":\n")[0]
    assert "            bias = tl.load(b_ptrs + start_n).to(tl.float32)\n            bias = bias[None, :]\n" \
           "            qk = qk + bias\n" in vector and "BIAS_TYPE != " not in vector.split("for start_n")[1]
    assert "            bias_2 = tl.load(b_ptrs_2 + start_n_2).to(tl.float32)\n            qk_2 = qk_2 + bias_2\n" \
        in copies[0] and "bias_2[None, :]" not in copies[0]
    assert "            if BIAS_TYPE != \"none\":\n                bias_3 = None\n                qk_3 = qk_3 + bias_3\n" \
        in copies[1] and "        b_ptrs_3 = None\n" in copies[1]
    assert len(lines) == text.count("\n") + 1


def test_a_function_the_copies_leave_refused_does_not_keep_the_others_from_splitting() -> None:
    """Two kernels with a name of two ranks per branch; the second is refused for another construct too (an argument
    of `tl.dot` Triton no longer has): the first is split and translated all the same, the second kept with its
    reasons."""
    second = BIAS.split("@triton.jit\n")[1].replace("def scores_bias(", "def scores_bias_old(").replace(
        "tl.dot(q, tl.trans(k))", "tl.dot(q, k, trans_b=True)")
    result = translate_source(BIAS + "\n\n@triton.jit\n" + second, "k.py", get_target("gfx950"), gluon_always=True)
    outcomes = {o.name: o for o in result.functions}
    assert outcomes["scores_bias"].translated, [d.format() for d in result.diagnostics]
    assert not outcomes["scores_bias_old"].translated
    assert any("trans_b=" in d.message for d in outcomes["scores_bias_old"].diagnostics)


# A name rebound to another rank under an `if` without `else` (kernl's attention mask: a vector, made a matrix under
# `if IS_MATRIX_MASK:`)
NO_ELSE = HEAD + '''@triton.jit
def doubled(x_ptr, n, MATRIX: tl.constexpr, B: tl.constexpr):
    offs = tl.arange(0, B)
    ptrs = x_ptr + offs
    if MATRIX:
        ptrs = x_ptr + offs[:, None] * B + offs[None, :]
    v = tl.load(ptrs)
    tl.store(ptrs + n, v * 2)
'''


def test_an_if_without_else_gets_an_else_with_the_code_after_it() -> None:
    text, _ = split_branches(NO_ELSE, [9])
    assert text == HEAD + '''@triton.jit
def doubled(x_ptr, n, MATRIX: tl.constexpr, B: tl.constexpr):
    offs = tl.arange(0, B)
    ptrs = x_ptr + offs
    if MATRIX:
        ptrs = x_ptr + offs[:, None] * B + offs[None, :]
        v = tl.load(ptrs)
        tl.store(ptrs + n, v * 2)
    else:
        v_2 = tl.load(ptrs)
        tl.store(ptrs + n, v_2 * 2)
'''


def test_what_a_clause_knows_decides_only_what_follows_from_it() -> None:
    """A bare flag that failed is falsy (`if FLAG:` and `not FLAG` decided); `FLAG == True` failing says nothing of
    `if FLAG:` (FLAG may be 2); a string flag equal to one literal decides every comparison with literals, and one
    that equals none of two literals decides only those."""
    import ast

    from transpile.passes.branch_tails import _decide, _facts

    def decided(tests: list[str], index: int, test: str) -> bool | None:
        return _decide(ast.parse(test, mode="eval").body,
                       _facts([ast.parse(t, mode="eval").body for t in tests], index))

    assert decided(["FLAG"], 1, "FLAG") is False and decided(["FLAG"], 1, "not FLAG") is True
    assert decided(["FLAG == True"], 1, "FLAG") is None
    assert decided(["K == 'v'", "K == 'm'"], 0, "K != 'none'") is True
    assert decided(["K == 'v'", "K == 'm'"], 1, "K == 'v'") is False
    assert decided(["K == 'v'", "K == 'm'"], 2, "K == 'm' or K == 'v'") is False
    assert decided(["K == 'v'", "K == 'm'"], 2, "K != 'none'") is None
    assert decided(["K == 'v'"], 0, "K == 'v' and OTHER") is None


@pytest.mark.slow
@pytest.mark.parametrize("target", ["gfx950", "sm90"])
@pytest.mark.parametrize(("case", "values", "flag", "settings"), [
    ("chain", {"x_ptr": "*fp32", "b_ptr": "*fp32", "y_ptr": "*fp32", "B": 32}, "KIND", ("vector", "matrix")),
    ("bias", {"Q": "*fp16", "K": "*fp16", "Bias": "*fp16", "Out": "*fp32", "BLOCK_M": 64, "BLOCK_N": 64, "D": 64},
     "BIAS_TYPE", ("vector", "matrix", "none")),
    ("no_else", {"x_ptr": "*fp32", "n": "i32", "B": 32}, "MATRIX", (True, False)),
])
def test_split_kernels_translate_and_compile_for_every_value_of_the_flag(
        case: str, values: dict, flag: str, settings: tuple, target: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An `elif` chain, a flag tested again after the chain (`--gluon-always`: its loop is kept as Triton by
    default), and an `if` without `else`: translated, and compiled for each value of the flag."""
    text = {"chain": CHAIN, "bias": BIAS, "no_else": NO_ELSE}[case]
    result = translate_source(text, str(tmp_path / "k.py"), get_target(target), gluon_always=case == "bias")
    assert result.functions[0].translated, [d.format() for d in result.diagnostics]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for setting in settings:
        compiled = verify(result, {**values, flag: setting})
        assert compiled and all(c.ok for c in compiled), [(setting, c.label, c.message) for c in compiled]


def test_a_blank_line_in_a_decided_branch_keeps_its_line() -> None:
    """Dedenting the branch a clause's test decides keeps its blank lines: one line out per line in, as the line map
    counts them."""
    text = BIAS.replace("                bias = bias[None, :]\n", "\n                bias = bias[None, :]\n")
    out, lines = split_branches(text, [11])
    assert out.count("\n") == len(lines) - 1
    assert "            bias = tl.load(b_ptrs + start_n).to(tl.float32)\n\n            bias = bias[None, :]\n" in out


# --------------------------------------------------------------------------------------------------------------------
# Names a dot loop's tiles read along their last axis (`contiguous_axis_sites`): aiter's basic GEMM picks its column
# offsets by a flag before the loop, which no one definition of the name proves 16-byte copies for.

EVEN_MN = (Path(__file__).resolve().parents[1] / "fixtures" / "suite_gemm_even_mn.py").read_text(encoding="utf-8")


def test_an_if_that_picks_a_tiles_last_axis_before_the_loop_is_a_site() -> None:
    from transpile.passes.branch_tails import contiguous_axis_sites

    line = next(i for i, text in enumerate(EVEN_MN.splitlines(), 1) if text.strip() == "if EVEN_MN:")
    assert contiguous_axis_sites(EVEN_MN, {"gemm_even_mn_kernel"}) == [line]
    assert contiguous_axis_sites(EVEN_MN, set()) == []
    # rows alone (A's `offs_am[:, None]`): one definition per branch is converted along the rows as it is; no site
    rows = EVEN_MN.replace("        offs_bn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)\n", "").replace(
        "        offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N\n", "").replace(
        "    offs_k = tl.arange(0, BLOCK_SIZE_K)\n",
        "    offs_k = tl.arange(0, BLOCK_SIZE_K)\n    offs_bn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)\n")
    assert rows != EVEN_MN and contiguous_axis_sites(rows, {"gemm_even_mn_kernel"}) == []
    # a pointer tile chosen in the branches is read along both axes
    pointers = EVEN_MN.replace("    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)\n",
                               "    if ADD_BIAS:\n        b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :]\n"
                               "    else:\n        b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :]\n")
    assert pointers != EVEN_MN and contiguous_axis_sites(pointers, {"gemm_even_mn_kernel"}) == []  # (two: none)
    one = rows.replace("    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)\n",
                       "    if ADD_BIAS:\n        b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :]\n"
                       "    else:\n        b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :]\n")
    line = next(i for i, text in enumerate(one.splitlines(), 1) if text.strip() == "if ADD_BIAS:")
    assert one != rows and contiguous_axis_sites(one, {"gemm_even_mn_kernel"}) == [line]


def test_the_loop_after_such_an_if_is_copied_into_its_branches_and_pipelined() -> None:
    from transpile.engine import prepare

    prepared = prepare(EVEN_MN, "fixtures/suite_gemm_even_mn.py")
    text = prepared.source.text
    assert text.count(" in range(tl.cdiv(K, BLOCK_SIZE_K)):") == 4  # (EVEN_MN's branches, then EVEN_K's)
    assert "offs_bn_2 = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N" in text
    result = translate_source(EVEN_MN, "fixtures/suite_gemm_even_mn.py", get_target("gfx950"))
    assert [f.name for f in result.functions if f.pipelined] == ["gemm_even_mn_kernel"]
    # a test decided at run time: the code after it is not copied (and the loop is kept as Triton, as before)
    runtime = EVEN_MN.replace("    if EVEN_MN:\n        offs_am", "    if M > 0:\n        offs_am")
    assert runtime != EVEN_MN
    assert prepare(runtime, "k.py").source.text.count(" in range(tl.cdiv(K, BLOCK_SIZE_K)):") == 2


SAME = """
import importlib.util, sys
import torch

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

source, split = load(sys.argv[1], "source"), load(sys.argv[2], "split")
torch.manual_seed(0)
for M, N, K in ((256, 256, 128), (200, 136, 100)):  # EVEN_MN and EVEN_K, then neither
    a, b = torch.randn(M, K), torch.randn(K, N)
    bias = torch.randn(N)
    for with_bias in (None, bias):
        expected = source.matmul(a, b, with_bias)
        got = split.matmul(a, b, with_bias)
        assert torch.equal(expected, got), (M, N, K, (expected - got).abs().max())
print("SAME")
"""


@pytest.mark.slow
def test_the_split_kernel_computes_what_the_source_computes(tmp_path: Path) -> None:
    """The copies run by Triton's interpreter give the source's outputs bit for bit, for both values of each flag."""
    import os
    import subprocess
    import sys

    from transpile.engine import prepare

    (tmp_path / "source.py").write_text(EVEN_MN)
    (tmp_path / "split.py").write_text(prepare(EVEN_MN, "k.py").source.text)
    (tmp_path / "run.py").write_text(SAME)
    result = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path / "source.py"),
                             str(tmp_path / "split.py")], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "TRITON_INTERPRET": "1"})
    assert result.returncode == 0 and "SAME" in result.stdout, result.stderr[-3000:]


# The `if` inside a block whose values live on after it: a persistent GEMM's tile loop (its next iteration reads
# `tile_id`, which the copy after the `if` advances) and a block that fills an accumulator the function stores after
# it. The else copy's renamed names are given back at its end (`tile_id = tile_id_2`).
PERSISTENT = HEAD + '''@triton.jit
def persistent_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                      BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                      EVEN_MN: tl.constexpr, NUM_SMS: tl.constexpr):
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_tiles = tl.cdiv(M, BLOCK_SIZE_M) * num_pid_n
    tile_id = tl.program_id(0)
    for _ in range(0, tl.cdiv(num_tiles - tl.program_id(0), NUM_SMS)):
        pid_m = tile_id // num_pid_n
        pid_n = tile_id % num_pid_n
        offs_k = tl.arange(0, BLOCK_SIZE_K)
        if EVEN_MN:
            offs_am = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
            offs_bn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        else:
            offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
            offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
        a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
        b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
        accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for k in range(tl.cdiv(K, BLOCK_SIZE_K)):
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
            accumulator = tl.dot(a, b, acc=accumulator)
            a_ptrs += BLOCK_SIZE_K * stride_ak
            b_ptrs += BLOCK_SIZE_K * stride_bk
        offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
        offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        tl.store(c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :], accumulator,
                 mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))
        tile_id += NUM_SMS


def matmul(a, b, bias=None):
    import torch

    M, K = a.shape
    N = b.shape[1]
    c = torch.zeros((M, N), dtype=a.dtype)
    persistent_kernel[(2,)](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                            c.stride(1), BLOCK_SIZE_M=32, BLOCK_SIZE_N=32, BLOCK_SIZE_K=32,
                            EVEN_MN=(M % 32 == 0 and N % 32 == 0), NUM_SMS=2)
    return c + (bias if bias is not None else 0)
'''

NESTED = EVEN_MN.replace(
    "    if EVEN_MN:\n        offs_am", "    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)\n"
    "    if K > 0:\n      if EVEN_MN:\n        offs_am").replace(
    "    else:\n        offs_am", "      else:\n        offs_am").replace(
    "    a_ptrs = a_ptr", "      a_ptrs = a_ptr").replace("    b_ptrs = b_ptr", "      b_ptrs = b_ptr").replace(
    "    if ADD_BIAS:\n        accumulator = tl.load(bias_ptr + offs_bn).to(dtype=tl.float32)\n"
    "        accumulator = tl.broadcast_to(accumulator[None, :], (BLOCK_SIZE_M, BLOCK_SIZE_N))\n"
    "    else:\n        accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)\n",
    "      if ADD_BIAS:\n        accumulator += tl.load(bias_ptr + offs_bn).to(dtype=tl.float32)[None, :]\n").replace(
    "    for k in range(tl.cdiv(K, BLOCK_SIZE_K)):", "      for k in range(tl.cdiv(K, BLOCK_SIZE_K)):")


def test_an_if_in_a_block_whose_names_live_on_gives_them_back_in_each_copy() -> None:
    from transpile.engine import prepare

    assert NESTED != EVEN_MN and "    if K > 0:\n      if EVEN_MN:" in NESTED
    text = prepare(PERSISTENT, "k.py").source.text
    assert "tile_id = tile_id_2" in text  # (the tile loop's next iteration reads it)
    assert "accumulator = accumulator_2" in prepare(NESTED, "k.py").source.text  # (the store after the block does)
    for kernel in (PERSISTENT, NESTED):
        result = translate_source(kernel, "k.py", get_target("gfx950"))
        assert all(f.pipelined for f in result.functions), [f.kept_reason for f in result.functions]


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["persistent", "nested"])
def test_the_split_kernel_with_names_living_on_computes_what_the_source_computes(kernel: str, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from transpile.engine import prepare

    text = {"persistent": PERSISTENT, "nested": NESTED}[kernel]
    (tmp_path / "source.py").write_text(text)
    (tmp_path / "split.py").write_text(prepare(text, "k.py").source.text)
    (tmp_path / "run.py").write_text(SAME)
    result = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path / "source.py"),
                             str(tmp_path / "split.py")], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "TRITON_INTERPRET": "1"})
    assert result.returncode == 0 and "SAME" in result.stdout, result.stderr[-3000:]


# FlagGems' log-softmax style: one tile in the first clause, a loop per column block in the others, each binding the
# same names afresh (the inner `if` is the site: a name of two ranks after it)
SIBLINGS = HEAD + '''@triton.jit
def modes(x_ptr, y_ptr, n, MODE: tl.constexpr, B: tl.constexpr):
    if MODE == 0:
        offs = tl.arange(0, B)
        x = tl.load(x_ptr + offs)
        tl.store(y_ptr + offs, x)
    else:
        if MODE == 1:
            x = tl.load(x_ptr + tl.arange(0, B))
        else:
            x = tl.load(x_ptr + tl.arange(0, B)[:, None] * B + tl.arange(0, B)[None, :])
        tl.store(y_ptr, tl.sum(x))
'''


def test_a_name_a_sibling_clause_binds_is_not_copied_into_the_branches() -> None:
    """The names the first clause of an outer `if` binds are unbound in its `else`: the inner `if`'s copies bind
    them afresh (no `x_2 = x` of a name that clause never bound, which would not compile for MODE 2)."""
    text, _ = split_branches(SIBLINGS, [12])
    assert "= x\n" not in text and "= offs\n" not in text
    assert '''        else:
            x_2 = tl.load(x_ptr + tl.arange(0, B)[:, None] * B + tl.arange(0, B)[None, :])
            tl.store(y_ptr, tl.sum(x_2))
''' in text


# A decay per row, or one shared by every row, chosen by a constexpr flag and tested again further down (the style of
# selective-scan state updates): `decay` is a rank-1 tensor in one branch and a scalar in the other.
SHARED = HEAD + '''@triton.jit
def update_state(state_ptr, decay_ptr, x_ptr, out_ptr, ROWS: tl.constexpr, COLS: tl.constexpr,
                 SHARED_DECAY: tl.constexpr):
    rows = tl.arange(0, ROWS)
    cols = tl.arange(0, COLS)
    state = tl.load(state_ptr + rows[:, None] * COLS + cols[None, :])
    x = tl.load(x_ptr + cols)
    if not SHARED_DECAY:
        decay = tl.load(decay_ptr + rows)
    else:
        decay = tl.load(decay_ptr)
    decay = tl.exp(decay)
    if not SHARED_DECAY:
        state = state * decay[:, None] + x[None, :]
    else:
        state = state * decay + x[None, :]
    tl.store(out_ptr + rows[:, None] * COLS + cols[None, :], state)
'''


@pytest.mark.parametrize("target", ["gfx950", "sm90"])
def test_a_tensor_in_one_branch_and_a_scalar_in_the_other_is_split(
        target: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The scalar branch used to take the other branch's rank (a name keeps the tensor it held), and the variant
    broadcast the scalar as a row vector: `convert_layout` of a scalar, which does not compile. Each branch now gets
    its copy of the code after it, and the `if not SHARED_DECAY:` tested again is decided in each."""
    result = translate_source(SHARED, str(tmp_path / "k.py"), get_target(target))
    (kernel,) = result.functions
    assert kernel.translated, [d.format() for d in result.diagnostics]
    text = result.text.split("def _update_state_triton")[0]  # (the Gluon kernel, not the source's copy after it)
    assert "decay_2 = gl.load(decay_ptr)" in text and "state_2 = state_2 * decay_2 + x[None, :]" in text, text
    assert text.count("if not SHARED_DECAY:") == 1, text  # (the later test is decided in both copies)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {"state_ptr": "*fp32", "decay_ptr": "*fp32", "x_ptr": "*fp32", "out_ptr": "*fp32", "ROWS": 16,
              "COLS": 32}
    for shared in (False, True):
        compiled = verify(result, {**values, "SHARED_DECAY": shared})
        assert compiled and all(c.ok for c in compiled), [(shared, c.label, c.message) for c in compiled]


# A name both branches bind, of two ranks, that nothing reads after the `if` (here each branch stores its own tile;
# an unswitched loop's two copies bind their names so too): it needs no one layout, so the kernel translates as
# written, its `if` not split; a read after the `if` is still refused (and split)
UNREAD = HEAD + '''@triton.jit
def store_either(x_ptr, y_ptr, FLAT: tl.constexpr, B: tl.constexpr):
    offs = tl.arange(0, B)
    if FLAT:
        ptrs = y_ptr + offs
        tl.store(ptrs, tl.load(x_ptr + offs))
    else:
        ptrs = y_ptr + tl.arange(0, B // 2)[:, None] * 2 + tl.arange(0, 2)[None, :]
        tl.store(ptrs, tl.load(x_ptr + tl.arange(0, B // 2)[:, None] * 2 + tl.arange(0, 2)[None, :]))
    tl.store(y_ptr, 1.0)
'''


@pytest.mark.parametrize("target", ["gfx950", "sm90"])
def test_a_name_of_two_ranks_nothing_reads_after_the_if_is_not_refused(
        target: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    result = translate_source(UNREAD, "k.py", get_target(target))
    (kernel,) = result.functions
    assert kernel.translated, [d.format() for d in result.diagnostics]
    assert "ptrs_2" not in result.text  # (translated as written: no copies)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    compiled = verify(result, {"x_ptr": "*fp32", "y_ptr": "*fp32", "B": 64, "FLAT": False})
    assert compiled and all(c.ok for c in compiled), [(c.config, c.message) for c in compiled]
    read = UNREAD.replace("    tl.store(y_ptr, 1.0)\n", "    tl.store(ptrs, 1.0)\n")
    assert split_branches(read, [8]) is not None
    refused = translate_source(read, "k.py", get_target(target))
    assert refused.functions[0].translated and "ptrs_2" in refused.text  # (read after it: split, then translated)
