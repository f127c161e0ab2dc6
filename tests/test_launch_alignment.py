"""Kernels without a pipelined loop run as Gluon on launches with 16-byte aligned rows and as their source elsewhere
(`transpile.analysis.launch_alignment`): on an H100 the translations ran at 0.72-0.88x their sources on launches with
unaligned rows, where Triton compiles loads of one element per thread (bench/RESULTS.md: Launch dispatch). A transposed
copy (addresses contiguous along a tile's first axis) is kept as Triton."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from conftest import EXPECTED_DIR, FIXTURES_DIR
from transpile.analysis.launch_alignment import address_params
from transpile.discover import discover
from transpile.engine import translate_source
from transpile.source import parse_source
from transpile.targets import get_target

ROWS = '''import triton
import triton.language as tl


@triton.jit
def _scale(x, s):
    return x * s


@triton.jit
def rows_kernel(x_ptr, y_ptr, w_ptr, stride_x, stride_y, col0, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * stride_x
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.load(x_row + cols, mask=cols < n_cols, other=0.0)
    cols = tl.arange(0, BLOCK)
    w = tl.load(w_ptr + col0 + cols, mask=cols < n_cols, other=0.0)
    tl.store(y_ptr + row * stride_y + cols, _scale(acc, eps) * w, mask=cols < n_cols)
'''


def test_the_launch_checks_the_arguments_addresses_read_and_not_mask_bounds():
    source = parse_source(ROWS, "rows.py")
    facts = discover(source)
    params = address_params(facts, facts.functions["rows_kernel"])
    # pointers, strides and offsets that addresses read (through `x_row`, the loop variable's start and step); not
    # the loop bound, mask bounds, nor what a jit helper computes with (`eps`)
    assert params == ("x_ptr", "y_ptr", "w_ptr", "stride_x", "stride_y", "col0")


HELPER_ADDRESS = '''import triton
import triton.language as tl


@triton.jit
def _load_row(base, row, stride, cols, n):
    return tl.load(base + row * stride + cols, mask=cols < n, other=0.0)


@triton.jit
def k(x_ptr, y_ptr, stride, n, scale, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    x = _load_row(x_ptr, tl.program_id(0), stride, cols, n) * scale
    tl.store(y_ptr + tl.program_id(0) * BLOCK + cols, x, mask=cols < n)
'''


def test_arguments_a_helper_addresses_memory_with_are_checked():
    source = parse_source(HELPER_ADDRESS, "h.py")
    facts = discover(source)
    assert address_params(facts, facts.functions["_load_row"]) == ("base", "row", "stride", "cols")
    assert address_params(facts, facts.functions["k"]) == ("x_ptr", "y_ptr", "stride")  # not `n` nor `scale`


def test_a_kernel_without_a_dot_loop_is_launched_through_the_alignment_launcher():
    result = translate_source(ROWS, "rows.py", get_target("sm90"))
    text = " ".join(result.text.split())
    assert ('rows_kernel=_AlignedOrTriton(rows_kernel,_rows_kernel_triton,params=("x_ptr","y_ptr","w_ptr",'
            '"stride_x","stride_y","col0","n_cols","eps","BLOCK",),divisible=("x_ptr","y_ptr","w_ptr",'
            '"stride_x","stride_y","col0",)') in "".join(text.split())
    assert "@triton.jit def _rows_kernel_triton(" in text and "@triton.jit def _scale_triton(x, s):" in text
    assert "x_row + cols, mask=cols < n_cols" in text.split("def _rows_kernel_triton(")[1]
    assert "runs as Gluon where its tensors' rows are 16-byte aligned" in result.text.splitlines()[3]
    for target in ("gfx942", "gfx1250"):
        assert "= _AlignedOrTriton(" in translate_source(ROWS, "rows.py", get_target(target)).text
    # --gluon-always: every launch runs the Gluon kernel
    always = translate_source(ROWS, "rows.py", get_target("sm90"), gluon_always=True).text
    assert "_AlignedOrTriton" not in always and "_rows_kernel_triton" not in always


class _Tensor:
    """What the launcher reads of a torch tensor."""

    def __init__(self, address: int, strides: tuple[int, ...], size: int = 4) -> None:
        self.address, self.strides, self.size = address, strides, size

    def data_ptr(self) -> int:
        return self.address

    def element_size(self) -> int:
        return self.size

    def stride(self) -> tuple[int, ...]:
        return self.strides


class _Kernel:
    def __init__(self, name: str, calls: list[str]) -> None:
        self.name, self.calls = name, calls

    def __getitem__(self, grid):  # noqa: ANN001, ANN204
        return lambda *args, **kwargs: self.calls.append(self.name)


def _launcher(tmp_path: Path):  # noqa: ANN202 - the emitted launcher class, from a variant written to disk
    text = (EXPECTED_DIR / "sm90" / "rmsnorm_sm90.py").read_text(encoding="utf-8")
    path = tmp_path / "rmsnorm_variant.py"
    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("rmsnorm_variant", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["rmsnorm_variant"] = module
    spec.loader.exec_module(module)
    return module


def test_the_launcher_runs_the_gluon_kernel_only_on_aligned_launches(tmp_path: Path):
    module = _launcher(tmp_path)
    launcher = module.rms_norm_kernel
    assert isinstance(launcher, module._AlignedOrTriton)
    params, divisible = launcher.params, launcher.divisible
    assert divisible == ("x_ptr", "w_ptr", "y_ptr", "stride_x", "stride_y")
    calls: list[str] = []
    launcher = module._AlignedOrTriton(_Kernel("gluon", calls), _Kernel("triton", calls), params, divisible)

    def launch(row: int, address: int = 4096, **changed: object) -> str:
        values = {"x_ptr": _Tensor(address, (row, 1)), "w_ptr": _Tensor(address, (1,)),
                  "y_ptr": _Tensor(address, (row, 1)), "stride_x": row, "stride_y": row, "n_rows": 1000,
                  "n_cols": 4000, "eps": 1e-6, "BLOCK_SIZE": 4096}
        values.update(changed)
        launcher[(1,)](*list(values.values())[:-1], BLOCK_SIZE=values["BLOCK_SIZE"])
        return calls[-1]

    assert launch(4096) == "gluon"
    assert launch(3000) == "triton"  # rows of 6000 bytes (fp16): not 16-byte aligned
    assert launch(4096, address=4104) == "triton"
    assert launch(4096, stride_y=4104) == "triton"  # an address stride not a multiple of 16 elements
    assert launch(4096, n_cols=3001, n_rows=999) == "gluon"  # mask bounds are not addresses
    assert launch(4096, x_ptr=None) == "gluon"  # an absent optional pointer addresses nothing
    # 16-bit data: Triton's loads of 8 elements per thread beat the Gluon layouts' 4 (bench/RESULTS.md: Launch dispatch)
    assert launch(4096, x_ptr=_Tensor(4096, (4096, 1), size=2)) == "triton"
    assert launch(4096, y_ptr=_Tensor(4096, (4096, 1), size=1)) == "triton"
    # ... except for a kernel whose column reductions the Gluon layouts keep in each thread
    launcher = module._AlignedOrTriton(_Kernel("gluon", calls), _Kernel("triton", calls), params, divisible,
                                       narrow=True)
    assert launch(4096, x_ptr=_Tensor(4096, (4096, 1), size=2)) == "gluon"
    assert launch(3000, x_ptr=_Tensor(4096, (3000, 1), size=2)) == "triton"


def test_column_reductions_take_narrow_data_too() -> None:
    """A kernel reducing a tile along its first axis gets `narrow=True`; a row kernel does not."""
    rows = translate_source(ROWS, "rows.py", get_target("sm90")).text
    assert "narrow=True" not in rows and "their elements 32-bit or wider" in rows.splitlines()[3]
    text = (FIXTURES_DIR / "column_minmax.py").read_text(encoding="utf-8")
    columns = translate_source(text, "column_minmax.py", get_target("sm90")).text
    assert "narrow=True" in columns and "32-bit" not in columns.splitlines()[3]


TRANSPOSE = '''import triton
import triton.language as tl


@triton.jit
def transpose_kernel(x_ptr, y_ptr, M, N, stride_x, stride_y, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(x_ptr + rm[:, None] * stride_x + rn[None, :], mask=mask)
    out = y_ptr + rn[None, :] * stride_y + rm[:, None]
    tl.store(out, x, mask=mask)
'''


@pytest.mark.parametrize("target", ["sm90", "gfx950"])
def test_a_transposed_copy_is_kept_as_triton(target: str):
    result = translate_source(TRANSPOSE, "t.py", get_target(target))
    assert not result.functions[0].translated
    notes = [d for d in result.diagnostics if d.code == "TT041"]
    assert notes and notes[0].line == 12 and "the access at line 12 is contiguous along the first axis" in \
        notes[0].message
    plain = TRANSPOSE.replace("rn[None, :] * stride_y + rm[:, None]", "rm[:, None] * stride_y + rn[None, :]")
    assert translate_source(plain, "t.py", get_target(target)).functions[0].translated
    assert translate_source(TRANSPOSE, "t.py", get_target(target), gluon_always=True).functions[0].translated


def test_verify_asks_for_the_type_of_a_pointer_whatever_its_name():
    """`X`, `Lock`: address bases by use, not by name (verify took them for i32 and failed in the compiler)."""
    from transpile.analysis.launch_alignment import pointer_params

    text = ROWS.replace("x_ptr", "X")
    facts = discover(parse_source(text, "rows.py"))
    assert pointer_params(facts, facts.functions["rows_kernel"]) == {"X", "y_ptr", "w_ptr"}  # (X through x_row)
    # `Wt + col0 + cols`: two parameters, neither named as a pointer: neither is taken for one
    facts = discover(parse_source(text.replace("w_ptr", "Wt"), "rows.py"))
    assert pointer_params(facts, facts.functions["rows_kernel"]) == {"X", "y_ptr"}
    helper = discover(parse_source(HELPER_ADDRESS, "h.py"))
    # `base + row * stride + cols` in the helper: `base` (never compared nor multiplied), passed `x_ptr`
    assert pointer_params(helper, helper.functions["_load_row"]) == {"base"}
    assert pointer_params(helper, helper.functions["k"]) == {"x_ptr", "y_ptr"}
    # a block pointer's base (`make_block_ptr(base=X, ...)`, or positional) is one too
    blocks = discover(parse_source(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef copy(X, Y, M, N, s, BM: tl.constexpr):\n"
        "    src = tl.make_block_ptr(base=X, shape=(M, N), strides=(s, 1), offsets=(0, 0), block_shape=(BM, BM), "
        "order=(1, 0))\n"
        "    dst = tl.make_block_ptr(Y, (M, N), (s, 1), (0, 0), (BM, BM), (1, 0))\n"
        "    tl.store(dst, tl.load(src, boundary_check=(0, 1)), boundary_check=(0, 1))\n", "b.py"))
    assert pointer_params(blocks, blocks.functions["copy"]) == {"X", "Y"}


GEMV = '''import triton
import triton.language as tl


@triton.jit
def gemv_kernel(W, X, Y, M, K, stride_wm, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    acc = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        rk = k + tl.arange(0, BLOCK_K)
        w = tl.load(W + rm[:, None] * stride_wm + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        x = tl.load(X + rk, mask=rk < K, other=0.0)
        acc += tl.sum(w * x[None, :], axis=1)
    tl.store(Y + rm, acc, mask=rm < M)
'''


def test_a_vector_loaded_in_a_loop_beside_a_tile_gets_a_layout_of_its_own() -> None:
    """gemv written with tl.sum: x in the tile's column layout would be loaded again by every warp along the rows
    (0.47-0.85x measured); it is loaded in a blocked layout of its own, its addresses made afresh from the arange,
    and converted where it meets the tile (1.02-1.27x measured)."""
    result = translate_source(GEMV, "gemv.py", get_target("sm90"))
    (outcome,) = result.functions
    assert outcome.translated
    assert "x_layout: gl.constexpr = _blocked_layout([BLOCK_K], gl.num_warps())" in result.text
    assert "X + (k + gl.arange(0, BLOCK_K, layout=x_layout))" in result.text
    assert "mask=(k + gl.arange(0, BLOCK_K, layout=x_layout)) < K" in result.text
    assert "gl.convert_layout(x, gl.SliceLayout(0, w_layout))[None, :]" in result.text
    # the tile's own column vector keeps the slice layout
    assert "rk = k + gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, w_layout))" in result.text
    # the same vector loaded once, before the loop: left in the slice layout
    hoisted = GEMV.replace("        x = tl.load(X + rk, mask=rk < K, other=0.0)\n", "").replace(
        "    for k in range(0, K, BLOCK_K):\n", "    x = tl.load(X + tl.arange(0, BLOCK_K))\n"
        "    for k in range(0, K, BLOCK_K):\n")
    assert "convert_layout(x" not in translate_source(hoisted, "gemv.py", get_target("sm90")).text


def test_a_vector_the_rewrite_cannot_address_keeps_the_kernel_as_triton() -> None:
    """An index vector computed by a call other than `arange` (here `tl.where`) is not made afresh in another layout:
    the kernel is kept as Triton, with a note at the load."""
    clamped = GEMV.replace("        x = tl.load(X + rk, mask=rk < K, other=0.0)\n",
                           "        rx = tl.where(rk < K, rk, 0)\n        x = tl.load(X + rx)\n")
    (outcome,) = translate_source(clamped, "gemv.py", get_target("sm90")).functions
    assert not outcome.translated and "reads a vector in every iteration of a loop" in outcome.kept_reason
    assert [d.line for d in outcome.diagnostics if d.code == "TT041"] == [13]
    assert translate_source(clamped, "gemv.py", get_target("sm90"), gluon_always=True).functions[0].translated


@pytest.mark.slow
@pytest.mark.parametrize("target", ["sm90", "gfx942", "gfx950", "gfx1250"])
def test_a_vector_with_a_layout_of_its_own_compiles(target: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    from transpile.verify import verify

    result = translate_source(GEMV, str(tmp_path / "gemv.py"), get_target(target))
    assert result.functions[0].translated
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for dtype in ("*fp32", "*fp16"):
        compiled = verify(result, {"W": dtype, "X": dtype, "Y": dtype, "BLOCK_M": 16, "BLOCK_K": 256})
        assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]


ACCUMULATE_THEN_REDUCE = '''import triton
import triton.language as tl


@triton.jit
def mid_sum_kernel(x_ptr, y_ptr, M, N, stride_b, stride_m, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    base = x_ptr + tl.program_id(0) * stride_b
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, M, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        acc += tl.load(base + rows[:, None] * stride_m + cols[None, :], mask=rows[:, None] < M, other=0.0)
    tl.store(y_ptr + tl.program_id(0) * N + cols, tl.sum(acc, axis=0), mask=cols < N)
'''


def test_a_column_reduction_once_after_the_loop_keeps_the_default_layout() -> None:
    """The tile is accumulated in the loop and reduced along its columns once, after it: the reduced layout would
    only narrow the loads (0.40x with 16-bit data, 0.61-0.68x fp32 at few programs), so neither it nor `narrow`."""
    text = translate_source(ACCUMULATE_THEN_REDUCE, "mid.py", get_target("sm90")).text
    assert "reduced=[0]" not in text and "narrow=True" not in text
    # reduced in the loop, as often as the tile is loaded: the reduced layout and `narrow`
    in_loop = ACCUMULATE_THEN_REDUCE.replace("acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)",
                                             "acc = tl.zeros([BLOCK_N], dtype=tl.float32)").replace(
        "acc += tl.load(base + rows[:, None] * stride_m + cols[None, :], mask=rows[:, None] < M, other=0.0)",
        "acc += tl.sum(tl.load(base + rows[:, None] * stride_m + cols[None, :], mask=rows[:, None] < M, "
        "other=0.0), axis=0)").replace("tl.sum(acc, axis=0)", "acc")
    text = translate_source(in_loop, "mid.py", get_target("sm90")).text
    assert "reduced=[0]" in text and "narrow=True" in text


def test_a_vector_index_read_from_a_name_rebound_after_it_is_not_moved() -> None:
    """`rk = start + tl.arange(...)` then `start += BLOCK_K` before the load of x: writing rk's definition into the
    load would read the new `start` (a wrong result, found by a review helper); the kernel is kept as Triton."""
    stale = GEMV.replace("    for k in range(0, K, BLOCK_K):\n        rk = k + tl.arange(0, BLOCK_K)\n",
                         "    start = 0\n    for k in range(0, K, BLOCK_K):\n        rk = start + tl.arange(0, BLOCK_K)\n"
                         "        start += BLOCK_K\n")
    assert "start += BLOCK_K" in stale
    result = translate_source(stale, "gemv.py", get_target("sm90"))
    assert not result.functions[0].translated and "reads a vector in every iteration" in result.functions[0].kept_reason
    assert "(start + gl.arange" not in result.text
