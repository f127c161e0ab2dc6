"""sm90: tiles contiguous along their first axis read through TMA descriptors of their transposed view, 8-bit
operands K-major in the TMA ring, and the ring's form for a product scaled before it is accumulated
(`acc += tl.dot(a, b) * a_s[:, None] * b_s`: DeepSeek-style block-scaled fp8 GEMMs).

What the pointer-tile rewrite (`transpile.passes.tma_tiles`) writes for such tiles, what the launcher lets through
(fp8 only where both operands are K-major in shared memory), the profitability policy that keeps the block-scaled
ring as Triton by default (measured on an H200: bench/RESULTS.md), and the ring it emits under `--gluon-always`,
compiled for sm90 with fp8 operands.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from transpile.discover import discover
from transpile.engine import format_results, translate_source
from transpile.passes import tma_tiles
from transpile.passes.canonical import canonicalize
from transpile.rules.base import UNPROFITABLE_RINGS
from transpile.source import parse_source
from transpile.targets import get_target

SM90 = get_target("sm90")

HEADER = "import torch\nimport triton\nimport triton.language as tl\n\n\n"

# A serving-style block-scaled fp8 GEMM: both strides of B are parameters (the weight [N, K] is passed as B = w.T,
# whose stride along K is 1); a helper returns the program's tile coordinates.
BLOCK_SCALED = HEADER + textwrap.dedent("""\
    @triton.jit
    def tile_of(pid, n, BN: tl.constexpr):
        return pid // tl.cdiv(n, BN), pid % tl.cdiv(n, BN)


    @triton.jit
    def gemm(a_ptr, b_ptr, c_ptr, as_ptr, bs_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
             stride_cn, stride_asm, stride_bsk, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pid_m, pid_n = tile_of(tl.program_id(0), N, BN)
        offs_m = (pid_m * BM + tl.arange(0, BM)) % M
        offs_n = (pid_n * BN + tl.arange(0, BN)) % N
        offs_k = tl.arange(0, BK)
        a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
        as_ptrs = as_ptr + offs_m * stride_asm
        bs_ptrs = bs_ptr + pid_n
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)
            a_s = tl.load(as_ptrs + k)
            b_s = tl.load(bs_ptrs + k * stride_bsk)
            acc += tl.dot(a, b) * a_s[:, None] * b_s
            a_ptrs += BK * stride_ak
            b_ptrs += BK * stride_bk
        offs_cm = pid_m * BM + tl.arange(0, BM)
        offs_cn = pid_n * BN + tl.arange(0, BN)
        c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


    def matmul(a, b, a_s, b_s, c):
        M, K = a.shape
        N = b.shape[1]
        grid = (triton.cdiv(M, 128) * triton.cdiv(N, 128),)
        gemm[grid](a, b, c, a_s, b_s, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                   c.stride(1), a_s.stride(0), b_s.stride(0), BM=128, BN=128, BK=128, num_warps=8)
        return c
""")

FP8_VALUES = {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "c_ptr": "*bf16", "as_ptr": "*fp32", "bs_ptr": "*fp32",
              "BM": 128, "BN": 128, "BK": 128, "stride_ak": 1, "stride_bk": 1, "stride_cn": 1}


def _convert(text: str) -> tuple[tma_tiles.Conversion | None, dict[str, str]]:
    source = parse_source(text, "k.py")
    facts = discover(source)
    canonical = canonicalize(source, facts)
    if canonical != text:
        source = parse_source(canonical, "k.py")
        facts = discover(source)
    refusals: dict[str, str] = {}
    return tma_tiles.convert(source, facts, refusals), refusals


def _kernel_text(conversion: tma_tiles.Conversion) -> str:
    text = conversion.text
    return text[text.index("def gemm"):text.index("\n\n\ndef matmul")]


def test_the_b_tile_of_a_scaled_product_is_read_k_major_through_the_transposed_view() -> None:
    conversion, refusals = _convert(BLOCK_SCALED)
    assert conversion is not None, refusals
    kernel = _kernel_text(conversion)
    # A row-major; B [BK, BN] with its stride along K checked to be 1: a descriptor of the [N, K] view, read back
    # transposed by the dot.
    assert ("a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], "
            "block_shape=[BM, BK])") in kernel
    assert ("b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_bn, 1], "
            "block_shape=[BN, BK])") in kernel
    assert "a = a_desc.load([pid_m * BM, k * BK])" in kernel
    assert "b = b_desc.load([pid_n * BN, k * BK])" in kernel
    assert "acc += tl.dot(a, tl.trans(b)) * a_s[:, None] * b_s" in kernel
    # The scales stay loads of their own; the helper's coordinates are read as themselves.
    assert "a_s = tl.load(as_ptrs + k)" in kernel and "pid_m, pid_n = tile_of(" in kernel
    tiles = conversion.dispatch["gemm"].tiles
    assert [(t.param, t.row_stride, t.unit_stride, t.load, t.fp8) for t in tiles] == [
        ("a_ptr", "stride_am", "stride_ak", True, True), ("b_ptr", "stride_bn", "stride_bk", True, True),
        ("c_ptr", "stride_cm", "stride_cn", False, False)]


def test_a_tile_contiguous_along_its_rows_is_read_through_the_transposed_view() -> None:
    """Without a scaled product the first axis is the unit one only where the source writes no stride there; A
    so read is M-major, so the launcher keeps fp8 away (wgmma reads 8-bit operands K-major only)."""
    text = BLOCK_SCALED.replace("offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak",
                                "offs_m[:, None] + offs_k[None, :] * stride_ak").replace(
        "a_ptrs += BK * stride_ak", "a_ptrs += BK * stride_ak")
    assert text != BLOCK_SCALED
    conversion, refusals = _convert(text)
    assert conversion is not None, refusals
    kernel = _kernel_text(conversion)
    assert ("a_desc = tl.make_tensor_descriptor(a_ptr, shape=[K, M], strides=[stride_ak, 1], "
            "block_shape=[BK, BM])") in kernel
    assert "a = a_desc.load([k * BK, pid_m * BM])" in kernel
    assert "acc += tl.dot(tl.trans(a), tl.trans(b)) * a_s[:, None] * b_s" in kernel
    assert not any(t.fp8 for t in conversion.dispatch["gemm"].tiles)


def test_a_transposed_tile_read_outside_the_dot_is_refused() -> None:
    text = BLOCK_SCALED.replace("        acc += tl.dot(a, b) * a_s[:, None] * b_s\n",
                                "        acc += tl.dot(a, b) * a_s[:, None] * b_s\n"
                                "        acc += tl.sum(b.to(tl.float32), 0)[None, :]\n")
    assert text != BLOCK_SCALED
    conversion, refusals = _convert(text)
    assert conversion is None
    assert "read through a descriptor of its transposed view, is read outside the dot" in refusals["gemm"]


def _translate(text: str, gluon_always: bool = False):
    result = translate_source(text, "k.py", SM90, gluon_always=gluon_always)
    format_results([result])
    return result


def test_the_block_scaled_ring_is_kept_as_triton_with_its_measurement() -> None:
    result = _translate(BLOCK_SCALED)
    outcome = next(o for o in result.functions if o.name == "gemm")
    assert not outcome.translated
    # (the policy's own measurement, from its descriptor form: not the pointer rings' refusal of the loop as written)
    assert outcome.measured_keep and "on an H200 at 0.95-1.06x its source" in outcome.kept_reason, outcome.kept_reason
    assert "the pointer rings" not in outcome.kept_reason
    assert "bench/RESULTS.md" in outcome.kept_reason


def test_the_block_scaled_ring_under_gluon_always(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from transpile.verify import verify

    result = _translate(BLOCK_SCALED, gluon_always=True)
    outcome = next(o for o in result.functions if o.name == "gemm")
    assert outcome.translated and outcome.pipelined and outcome.dispatch is not None
    text = result.text
    kernel = text[text.index("@gluon.jit\ndef gemm("):text.index("def _gemm_triton(")]
    # Each step's product from zero, waited for in its iteration (it is read right after), then scaled and added;
    # its slot refilled after the wait.
    assert "use_acc=False" in kernel and "is_async=True" in kernel
    wait = kernel.index("product, _, _ = warpgroup_mma_wait(")
    assert kernel.index("acc += product * a_s[:, None] * b_s") > wait
    assert kernel.index("_tma_async_load(", wait) > wait
    assert "b_smem.index(slot).permute((1, 0))" in kernel
    assert "or (a_desc.dtype.is_fp8() and b_desc.dtype.is_fp8())" in kernel
    assert '"fp8"' in text[text.index("gemm = _TMAOrTriton("):]
    # No drain after the loop: every product was waited for in its iteration.
    loop_end = kernel.index("mbarrier.invalidate(ready.index(")
    assert "warpgroup_mma_wait(0, deps=[product])" not in kernel[:loop_end]
    # It compiles for sm90 with fp8 operands read K-major, and the policy's reason is what the default run gives.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    compiled = verify(dataclasses.replace(result), {**FP8_VALUES, "num_warps": 8}, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]
    gluon = [c for c in compiled if not c.kept and c.check == "compile"]
    assert gluon and "e4m3.e4m3" in gluon[0].asm["ptx"]  # fp8 wgmmas, both operands K-major
    assert "0.95-1.06x" in UNPROFITABLE_RINGS[("sm90", "TMA ring, scaled product")]


class _Tensor:
    def __init__(self, address: int, size: int, dtype: str) -> None:
        self.address, self.size, self.dtype = address, size, dtype

    def data_ptr(self) -> int:
        return self.address

    def element_size(self) -> int:
        return self.size


class _Kernel:
    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.log.append(self.name)


@pytest.mark.parametrize(("dtype", "size", "stride_bk", "stride_bn", "expected"), [
    ("torch.float8_e4m3fn", 1, 1, 4096, "gluon"),  # B K-major, as the ring reads 8-bit operands
    ("torch.float8_e5m2", 1, 1, 4096, "gluon"),
    ("torch.float8_e4m3fn", 1, 4096, 1, "triton"),  # B N-contiguous: the descriptor's unit stride is not 1
    ("torch.int8", 1, 1, 4096, "triton"),  # 8-bit integers: the ring takes floats
    ("torch.float8_e4m3fnuz", 1, 1, 4096, "triton"),  # AMD's fp8: not a Hopper type
    ("torch.bfloat16", 2, 1, 4096, "gluon"),
])
def test_the_launcher_lets_fp8_through_only_for_k_major_operands(
        tmp_path: Path, dtype: str, size: int, stride_bk: int, stride_bn: int, expected: str) -> None:
    path = tmp_path / "variant_sm90.py"
    path.write_text(_translate(BLOCK_SCALED, gluon_always=True).text)
    spec = importlib.util.spec_from_file_location("variant_kmajor_launcher", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    log: list = []
    launcher = module.gemm
    launcher.gluon_kernel, launcher.triton_kernel = _Kernel("gluon", log), _Kernel("triton", log)
    a, b = _Tensor(4096, size, dtype), _Tensor(1 << 20, size, dtype)
    c, scales = _Tensor(1 << 24, 2, "torch.bfloat16"), _Tensor(1 << 26, 4, "torch.float32")
    launcher[(8,)](a, b, c, scales, scales, 1024, 4096, 4096, 4096, 1, stride_bk, stride_bn, 4096, 1, 32, 32,
                   BM=128, BN=128, BK=128, num_warps=8)
    assert log == [expected]


DESCRIPTOR_NT = HEADER + textwrap.dedent("""\
    @triton.jit
    def gemm(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
        c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in tl.range(0, tl.cdiv(K, BK), num_stages=4):
            a = a_desc.load([tl.program_id(0) * BM, k * BK])
            b = b_desc.load([tl.program_id(1) * BN, k * BK])
            acc = tl.dot(a, b.T, acc)
        c_desc.store([tl.program_id(0) * BM, tl.program_id(1) * BN], acc.to(c_desc.dtype))
""")


@pytest.mark.parametrize("kind", ["fp8e4nv", "fp8e5", "fp16"])
def test_a_descriptor_gemm_with_b_read_k_major_runs_its_ring_on_fp8_too(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both slots K-major ([M, K] and [N, K], the latter read transposed): the ring's compile-time test lets 8-bit
    floats in, where before they ran the translated loop unpipelined; the wgmmas read both operands from the ring."""
    from transpile.verify import verify

    result = _translate(DESCRIPTOR_NT)
    outcome = result.functions[0]
    assert outcome.translated and outcome.pipelined
    assert "or (a_desc.dtype.is_fp8() and b_desc.dtype.is_fp8())" in result.text
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {"a_ptr": f"*{kind}", "b_ptr": f"*{kind}", "c_ptr": "*fp16", "BM": 128, "BN": 128, "BK": 128,
              "num_warps": 8}
    compiled = verify(dataclasses.replace(result), values, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]
    ptx = next(c for c in compiled if c.check == "compile").asm["ptx"]
    # the ring's wgmma left in flight (the translated loop waits for each one at once)
    assert "wgmma.wait_group.sync.aligned 1;" in ptx
    wgmma = [line for line in ptx.splitlines() if "wgmma.mma_async" in line]
    assert wgmma and all(("e4m3" if kind == "fp8e4nv" else "e5m2" if kind == "fp8e5" else "f16") in w for w in wgmma)
