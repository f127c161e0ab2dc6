"""sm90: GEMMs of 8-bit or tf32 operands whose B is read N-contiguous run on a K-major copy of B
(transpile.passes.kmajor_copy, the launcher `_KMajorCopy`).

The analysis finds B's pointer and stride parameters and the extents its masks give, or says why not; the variant
keeps the kernel as Triton and binds it to the launcher (with a copy of the kernel that reads a column stride where
the source writes none); the launcher's choice and its arguments are checked here on CPU tensors (the copy kernel
replaced by a torch copy: it runs only on a GPU, where tests/gpu/check_fixtures.py's `-kmajor` cases compare the
variant with the source); both kernels, the K-major launch and the copy kernel compile for sm90.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from transpile.engine import prepare, translate_source
from transpile.helpers import launchers
from transpile.passes.kmajor_copy import KMajorLaunch, kmajor_launch
from transpile.targets import get_target

ROOT = Path(__file__).resolve().parents[1]
SM90 = get_target("sm90")

KERNEL = textwrap.dedent('''\
    """int8 GEMM."""
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, BM: tl.constexpr, BN: tl.constexpr,
             BK: tl.constexpr):
        offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
        offs_n = tl.program_id(1) * BN + tl.arange(0, BN)
        offs_k = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.int32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + offs_m[:, None] * stride_am + (k + offs_k)[None, :],
                        mask=(offs_m[:, None] < M) & ((k + offs_k)[None, :] < K), other=0)
            b = tl.load(b_ptr + (k + offs_k)[:, None] * stride_bk + offs_n[None, :],
                        mask=((k + offs_k)[:, None] < K) & (offs_n[None, :] < N), other=0)
            acc = tl.dot(a, b, acc)
        tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc,
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
    ''')


def _launch(text: str) -> KMajorLaunch | str:
    prepared = prepare(text, "k.py")
    return kmajor_launch(prepared.source, prepared.facts, prepared.facts.functions["gemm"])


def test_analysis_finds_b_and_adds_a_column_stride() -> None:
    launch = _launch(KERNEL)
    assert isinstance(launch, KMajorLaunch), launch
    assert (launch.operand, launch.k_stride, launch.n_stride, launch.added) == ("b_ptr", "stride_bk", None, "stride_bn")
    assert launch.extents == ("K", "N") and launch.rows == "M" and launch.unit == () and launch.tf32
    assert launch.aligned == (("a_ptr", "stride_am"),)


def test_analysis_takes_written_strides() -> None:
    prepared = prepare((ROOT / "fixtures" / "matmul_int8.py").read_text(), "matmul_int8.py")
    launch = kmajor_launch(prepared.source, prepared.facts, prepared.facts.functions["int8_matmul_scaled_kernel"])
    assert isinstance(launch, KMajorLaunch), launch
    assert (launch.k_stride, launch.n_stride, launch.added, launch.unit) == ("stride_bk", "stride_bn", None,
                                                                              ("stride_ak",))


@pytest.mark.parametrize("change, reason", [
    # the row stride also addresses C: exchanging it would move C's rows
    (("stride_cm + offs_n", "stride_bk + offs_n"), "`stride_bk` addresses more than B's tile"),
    # ieee dots on fp32 would not take the copy; this one is still 8-bit-capable: a B read K-major is another matter
    (("acc = tl.dot(a, b, acc)", "acc = tl.dot(a, tl.trans(b), acc)"), "the dot's operands are not the loaded tiles"),
])
def test_analysis_refusals_name_the_reason(change: tuple[str, str], reason: str) -> None:
    text = KERNEL.replace(*change)
    assert text != KERNEL
    launch = _launch(text)
    assert isinstance(launch, str) and reason in launch, launch


PERSISTENT = textwrap.dedent('''\
    """fp8 GEMM, persistent: one loop over this program's tiles and their K steps, the store in a branch."""
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, BM: tl.constexpr, BN: tl.constexpr,
             BK: tl.constexpr):
        k_tiles = tl.cdiv(K, BK)
        tiles = tl.cdiv(M, BM) * tl.cdiv(N, BN)
        tile = tl.program_id(0) - tl.num_programs(0)
        ki = -1
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        offs_m = tl.arange(0, BM)
        offs_n = tl.arange(0, BN)
        for _ in range(0, k_tiles * tl.cdiv(tiles, tl.num_programs(0))):
            ki = tl.where(ki == k_tiles - 1, 0, ki + 1)
            if ki == 0:
                tile += tl.num_programs(0)
                offs_m = (tile // tl.cdiv(N, BN)) * BM + tl.arange(0, BM)
                offs_n = (tile % tl.cdiv(N, BN)) * BN + tl.arange(0, BN)
            offs_k = ki * BK + tl.arange(0, BK)
            a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]
            b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :]
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K, other=0.0)
            acc = tl.dot(a, b, acc)
            if ki == k_tiles - 1:
                tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc.to(tl.float16),
                         mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
                acc = tl.zeros((BM, BN), dtype=tl.float32)
    ''')


def test_addresses_alone_where_the_tiles_cannot_be_followed() -> None:
    """A loop with branches (a persistent tile walk flattened into the K loop): the addresses give the copy's facts,
    the extents do not (`whole`: only whole allocations are copied, A's rows from its tensor)."""
    prepared = prepare(PERSISTENT, "p.py")
    launch = kmajor_launch(prepared.source, prepared.facts, prepared.facts.functions["gemm"])
    assert isinstance(launch, KMajorLaunch), launch
    assert launch.whole and launch.rows is None and launch.extents == ()
    assert (launch.operand, launch.k_stride, launch.added, launch.aligned) == ("b_ptr", "stride_bk", "stride_bn",
                                                                               (("a_ptr", "stride_am"),))
    text = translate_source(PERSISTENT, "p.py", SM90).text
    assert "whole=True" in text and "(offs_n[None, :] * stride_bn)" in text
    # masks bounding B by an expression: the same, from the addresses
    bounded = _launch(KERNEL.replace("(offs_n[None, :] < N), other=0)", "(offs_n[None, :] < M + 1), other=0)"))
    assert isinstance(bounded, KMajorLaunch) and bounded.whole and bounded.extents == ()
    # a batch offset of B's base: not a 2-D matrix the copy could hold
    moved = PERSISTENT.replace("b_ptrs = b_ptr + offs_k", "b_ptrs = b_ptr + tile * stride_cm + offs_k")
    launch = kmajor_launch(*(lambda p: (p.source, p.facts, p.facts.functions["gemm"]))(prepare(moved, "q.py")))
    assert isinstance(launch, str) and "offset of the base" in launch, launch


def test_whole_allocations_only_where_the_extents_are_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    _copy_on_cpu(monkeypatch)
    kernel, copy_kernel = _Recorder(), _Recorder()
    launcher = launchers._KMajorCopy(kernel, copy_kernel, PARAMS, operand="b_ptr", k_stride="stride_bk",
                                     added="stride_bn", aligned=(("a_ptr", "stride_am"),), whole=True)
    a, c = torch.zeros(1024, 2048, dtype=torch.int8), torch.zeros(1024, 2048)
    wide = torch.zeros(2048, 4096, dtype=torch.int8)
    launcher[(1,)](a, wide[:, :2048], c, 1024, 2048, 2048, 2048, 4096, 2048)  # a view of a wider matrix
    launcher[(1,)](a[:64], wide, c, 64, 4096, 2048, 2048, 4096, 2048)  # A's tensor has 64 rows
    assert len(kernel.calls) == 2 and not copy_kernel.calls
    launcher[(1,)](a, wide, c, 1024, 4096, 2048, 2048, 4096, 2048)  # the whole allocation
    assert len(copy_kernel.calls) == 1


def test_ieee_dot_takes_no_tf32_copy() -> None:
    launch = _launch(KERNEL.replace("acc = tl.dot(a, b, acc)", 'acc = tl.dot(a, b, acc, input_precision="ieee")'))
    assert isinstance(launch, KMajorLaunch) and not launch.tf32


def _variant(tmp_path: Path, text: str, name: str):  # noqa: ANN202 - the imported variant module
    result = translate_source(text, f"{name}.py", SM90)
    path = tmp_path / f"{name}_sm90.py"
    path.write_text(result.text)
    spec = importlib.util.spec_from_file_location(f"{name}_sm90", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return result, module


def test_variant_binds_the_launcher_and_keeps_the_kernel(tmp_path: Path) -> None:
    result, module = _variant(tmp_path, KERNEL, "k8")
    assert any(d.code == "TT046" and d.line == 19 for d in result.diagnostics), result.diagnostics
    assert "def gemm(" in result.text and "def _gemm_kmajor(" in result.text
    assert "(offs_n[None, :] * stride_bn)" in result.text  # the copy's column stride, nowhere in the source
    assert result.text.count("(offs_n[None, :] * stride_bn)") == 1
    launcher = module.gemm
    assert isinstance(launcher, module._KMajorCopy) and launcher.kernel.fn.__name__ == "gemm"
    assert launcher.kmajor_kernel.fn.__name__ == "_gemm_kmajor"
    # a kernel handed to torch's `wrap_triton` stays Triton's own object: no launcher
    wrapped = translate_source(KERNEL + "\n\ndef run(a, b, c):\n    from torch.library import wrap_triton\n\n"
                               "    wrap_triton(gemm)[(1, 1)](a, b, c, 1, 1, 1, 1, 1, 1, BM=64, BN=64, BK=64)\n",
                               "kw.py", SM90)
    assert "_KMajorCopy" not in wrapped.text and not any(d.code == "TT046" for d in wrapped.diagnostics)
    # a file naming no 8-bit or tf32 data gets no launcher (16-bit launches would only pass through it)
    plain = translate_source(KERNEL.replace('"""int8 GEMM."""', '"""GEMM."""').replace("tl.int32", "tl.float32"),
                             "k16.py", SM90)
    assert "_KMajorCopy" not in plain.text and not any(d.code == "TT046" for d in plain.diagnostics)


class _Recorder:
    """A kernel stand-in: `[grid](*args, **kwargs)` records what it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, tuple, dict]] = []

    def __getitem__(self, grid):  # noqa: ANN001, ANN204
        return lambda *args, **kwargs: self.calls.append((grid, args, kwargs))


PARAMS = ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm", "BM", "BN", "BK")


def _copy_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    def copy(grid):  # noqa: ANN001, ANN202 - `_kmajor_copy[grid](src, dst, rows, cols, src_rows, dst_rows, BLOCK=)`
        def run(src, dst, rows, cols, src_rows, dst_rows, BLOCK):  # noqa: ANN001, ANN202, N803
            dst.copy_(src)
        return run

    monkeypatch.setattr(launchers, "_kmajor_copy", type("Copy", (), {"__getitem__": lambda self, g: copy(g)})())


@pytest.mark.parametrize("m, k, n, dtype, runs_copy", [
    (1024, 2048, 2048, torch.int8, True),
    (1024, 2048, 2048, torch.float32, True),
    (1024, 2048, 2048, torch.float16, False),  # 16-bit: wgmma reads it N-major
    (64, 2048, 2048, torch.int8, False),  # few rows of A
    (128, 2048, 2048, torch.int8, False),  # 128 x 2048 outputs: under the least
    (1024, 1024, 1024, torch.int8, False),  # B of 1M elements
])
def test_launcher_choice_and_arguments(monkeypatch: pytest.MonkeyPatch, m: int, k: int, n: int,
                                       dtype: torch.dtype, runs_copy: bool) -> None:
    _copy_on_cpu(monkeypatch)
    kernel, copy_kernel = _Recorder(), _Recorder()
    launcher = launchers._KMajorCopy(kernel, copy_kernel, PARAMS, operand="b_ptr", k_stride="stride_bk",
                                     added="stride_bn", extents=("K", "N"), rows="M")
    a = torch.zeros(m, k, dtype=dtype)
    b = torch.arange(k * n).reshape(k, n).to(dtype)
    c = torch.zeros(m, n)
    launcher[(8, 8)](a, b, c, m, n, k, k, n, n, BM=128, BN=128, BK=64)
    assert len((copy_kernel if runs_copy else kernel).calls) == 1
    assert not (kernel if runs_copy else copy_kernel).calls
    if runs_copy:
        grid, args, kwargs = copy_kernel.calls[0]
        copied = args[1]
        assert grid == (8, 8) and torch.equal(copied, b) and copied.stride() == (1, k)  # K-major, K rounded to 16
        assert args[7] == 1 and kwargs["stride_bn"] == k and kwargs["BM"] == 128  # strides exchanged
        assert args[0] is a and args[2] is c


def test_launcher_turns_away_what_the_copy_cannot_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    _copy_on_cpu(monkeypatch)
    kernel, copy_kernel = _Recorder(), _Recorder()
    launcher = launchers._KMajorCopy(kernel, copy_kernel, PARAMS, operand="b_ptr", k_stride="stride_bk",
                                     added="stride_bn", extents=("K", "N"), rows="M", aligned=(("a_ptr", "stride_am"),),
                                     tf32=False)
    a, c = torch.zeros(1024, 2048, dtype=torch.int8), torch.zeros(1024, 2048)
    b = torch.zeros(2048, 2048, dtype=torch.int8)
    launcher[(1,)](a, b, c, 1024, 2048, 2048, 2048, 2048 + 1, 2048)  # a row stride that is not B's
    launcher[(1,)](a, b, c, 1024, 4096, 2048, 2048, 2048, 2048)  # N past B's columns
    launcher[(1,)](a, b.t(), c, 1024, 2048, 2048, 2048, 2048, 2048)  # B K-major already
    launcher[(1,)](a, b.float(), c, 1024, 2048, 2048, 2048, 2048, 2048)  # fp32 with an ieee dot
    odd = torch.zeros(1024, 2040, dtype=torch.int8)
    launcher[(1,)](odd, b, c, 1024, 2048, 2040, 2040, 2048, 2048)  # A's rows not 16-byte aligned
    assert len(kernel.calls) == 5 and not copy_kernel.calls
    launcher[(1,)](a, b, c, 1024, 2048, 2048, 2048, 2048, 2048)  # the same launch with aligned rows: copied
    assert len(copy_kernel.calls) == 1


@pytest.mark.slow
@pytest.mark.parametrize("text, name, operands, out", [(KERNEL, "k8c", "*i8", "*i32"),
                                                     (PERSISTENT, "k8p", "*fp8e4nv", "*fp16")])
def test_kernels_and_copy_compile_for_sm90(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str,
                                          name: str, operands: str, out: str) -> None:
    import tempfile

    from transpile.verify import compile_kernel, verify

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result, _module = _variant(tmp_path, text, name)
    values = {"a_ptr": operands, "b_ptr": operands, "c_ptr": out, "M": "i32", "N": "i32", "K": "i32",
              "stride_am": "i32", "stride_bk": "i32", "stride_cm": "i32", "BM": 128, "BN": 128, "BK": 64,
              "num_warps": 8}
    compiled = verify(result, values)
    labels = [c.label for c in compiled if c.ok]
    assert any("K-major copy of `b_ptr`" in label for label in labels), [(c.label, c.message) for c in compiled]
    assert all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]
    kmajor = next(c for c in compiled if "K-major" in c.label)
    assert "wgmma" in kmajor.asm["ptx"]  # the K-major launch runs the tensor cores
    ok, message, _asm, _shared = compile_kernel(
        launchers._kmajor_copy, SM90, {"src": "*i8", "dst": "*i8", "rows": "i32", "cols": "i32", "src_rows": "i32",
                                       "dst_rows": "i32", "BLOCK": "constexpr"}, {"BLOCK": 64}, 4, triton_kernel=True)
    assert ok, message
