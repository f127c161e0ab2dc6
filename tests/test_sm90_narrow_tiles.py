"""sm90 variants launched with dot tiles of fewer than 64 rows (decode-shaped GEMMs, short query blocks).

A warpgroup's wgmma takes 64 rows. Triton's own compile runs a narrower dot as mma.sync; so do the variants:
`_mma_layout` gives such a tile the mma.sync layout, `_dot` multiplies from registers there, and every wgmma ring
(TMA, cp.async, attention) tests its tile's rows at compile time.
The GEMM rings bind a constexpr `WGMMA` to that test and multiply narrow tiles with mma.sync from the same slots
(their copies stay pipelined); the attention ring runs the translated loop. Each form is compiled here at 16 and 32
rows (and at 64), and its PTX checked for the instruction it runs.
"""

from __future__ import annotations

import tempfile

import pytest

from transpile.engine import translate_source
from transpile.targets import get_target
from tests.conftest import FIXTURES_DIR as FIXTURES

ONE_DOT = (
    "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
    "def k(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):\n"
    "    m = tl.arange(0, M)\n    n = tl.arange(0, N)\n    k = tl.arange(0, K)\n"
    "    a = tl.load(a_ptr + m[:, None] * K + k[None, :])\n    b = tl.load(b_ptr + k[:, None] * N + n[None, :])\n"
    "    c = tl.dot(a, b)\n    tl.store(c_ptr + m[:, None] * N + n[None, :], c)\n"
)

POINTER_GEMM = (
    "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
    "def k(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,\n"
    "      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):\n"
    "    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)\n"
    "    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)\n"
    "    offs_k = tl.arange(0, BLOCK_K)\n"
    "    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]\n"
    "    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :]\n"
    "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n"
    "    for k in range(0, tl.cdiv(K, BLOCK_K)):\n"
    "        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k * BLOCK_K), other=0.0)\n"
    "        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_K) & (offs_n[None, :] < N), other=0.0)\n"
    "        acc = tl.dot(a, b, acc)\n"
    "        a_ptrs += BLOCK_K\n"
    "        b_ptrs += BLOCK_K * stride_bk\n"
    "    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :]\n"
    "    tl.store(c_ptrs, acc.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))\n"
)
# (sizes and strides as constants of 16-byte multiples: the ring's alignment test holds at compile time)
POINTER_VALUES = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": 4096, "K": 4096,
                  "stride_am": 4096, "stride_bk": 4096, "stride_cm": 4096, "BLOCK_N": 64, "BLOCK_K": 64}


def _compile(result, values: dict[str, object], monkeypatch: pytest.MonkeyPatch, tmp_path) -> list:
    from transpile.verify import verify

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    compiled = [c for c in verify(result, values, all_configs=False) if not c.kept]
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]
    return compiled


def _instructions(ptx: str) -> tuple[int, int]:
    return ptx.count("mma.sync.aligned"), ptx.count("wgmma.mma_async")


@pytest.mark.parametrize(("dtype", "rows"), [("*fp16", 16), ("*fp16", 32), ("*i8", 16), ("*fp32", 32),
                                             ("*fp16", 64)])
def test_a_dot_of_fewer_than_64_rows_runs_as_mma_sync(dtype: str, rows: int, monkeypatch, tmp_path) -> None:
    """The translated `tl.dot`: mma.sync below 64 rows (16-bit, 8-bit and tf32 operands), wgmma from 64."""
    result = translate_source(ONE_DOT, "x.py", get_target("sm90"))
    assert "if _is_mma_sync(acc.type.layout):" in result.text
    values = {"a_ptr": dtype, "b_ptr": dtype, "c_ptr": "*fp32", "M": rows, "N": 64, "K": 32}
    (kernel,) = _compile(result, values, monkeypatch, tmp_path)
    sync, wgmma = _instructions(kernel.asm["ptx"])
    assert (sync > 0, wgmma > 0) == ((True, False) if rows < 64 else (False, True)), (sync, wgmma)


@pytest.mark.parametrize("rows", [16, 32, 64])
def test_the_cp_async_ring_multiplies_narrow_tiles_with_mma_sync(rows: int, monkeypatch, tmp_path) -> None:
    """The cp.async ring (--gluon-always) binds `WGMMA` to its tile's rows test: from 64 rows it issues wgmmas from
    its slots, below that mma.sync from the same slots (read into registers, then a barrier before the refill); the
    copies stay pipelined either way."""
    from transpile.schedule_check import check_source

    result = translate_source(POINTER_GEMM, "x.py", get_target("sm90"), gluon_always=True)
    assert "WGMMA: gl.constexpr = acc.shape[0] >= 64" in result.text
    assert "acc = _mma_sync_slots(a_smem.index(slot), b_smem.index(slot), acc)" in result.text
    report = check_source(result.text)
    assert report.cases and report.findings == [], report.findings[:3]
    (kernel,) = _compile(result, {**POINTER_VALUES, "BLOCK_M": rows}, monkeypatch, tmp_path)
    ptx = kernel.asm["ptx"]
    sync, wgmma = _instructions(ptx)
    assert (sync > 0, wgmma > 0) == ((True, False) if rows < 64 else (False, True)), (sync, wgmma)
    assert "cp.async.commit_group" in ptx and "cp.async.wait_group" in ptx


@pytest.mark.parametrize("rows", [16, 32])
def test_the_tma_ring_multiplies_narrow_tiles_with_mma_sync(rows: int, goldens, monkeypatch, tmp_path) -> None:
    """suite_decode_linear launches 16- and 32-row tiles: its TMA ring runs mma.sync from its slots for them (the
    warp-specialised form is not taken: its condition tests the rows too), the copies still TMA."""
    from tests.conftest import VERIFY_VALUES

    golden = goldens.read("suite_decode_linear", "sm90")
    assert "WGMMA: gl.constexpr = x_desc.block_type.shape[0] >= 64" in golden
    assert "x_desc.block_type.shape[0] >= 64\n            and x_desc.block_type.shape[0] * w_desc" in golden
    result = translate_source((FIXTURES / "suite_decode_linear.py").read_text(), "suite_decode_linear.py",
                              get_target("sm90"))
    values = {**VERIFY_VALUES["suite_decode_linear.py"], "BLOCK_M": rows}
    for kernel in _compile(result, values, monkeypatch, tmp_path):
        ptx = kernel.asm["ptx"]
        sync, wgmma = _instructions(ptx)
        assert sync > 0 and wgmma == 0, (kernel.label, sync, wgmma)
        assert "cp.async.bulk.tensor" in ptx and "mbarrier.try_wait" in ptx


def test_the_checker_finds_a_narrow_ring_without_its_barrier(goldens) -> None:
    """The mma.sync branch reads the slots into registers in every warp: without the barrier after it, a warp may
    refill a slot another still reads, and the schedule checker says so."""
    from transpile.schedule_check import check_source

    golden = goldens.read("suite_decode_linear", "sm90")
    assert check_source(golden).findings == []
    start = golden.index("acc = _mma_sync_slots(")
    barrier = golden.index("_cta_barrier()", start)
    broken = golden[:barrier] + "pass" + golden[barrier + len("_cta_barrier()"):]
    findings = check_source(broken).findings
    assert findings and all("while another wave may still be reading it" in f.message for f in findings), findings


@pytest.mark.parametrize("rows", [16, 32])
def test_a_descriptor_gemm_launched_narrow_compiles(rows: int, monkeypatch, tmp_path) -> None:
    """An autotuned descriptor GEMM whose configs set 32 rows: its rings (single-partition, warp-specialised and
    persistent) compile at 16 and 32 rows, with mma.sync."""
    from tests.conftest import VERIFY_VALUES

    source = (FIXTURES / "suite_desc_linear.py").read_text()
    source = source.replace('configs=[triton.Config({"BLOCK_M": 128,', 'configs=[triton.Config({"BLOCK_M": 32,')
    result = translate_source(source, "suite_desc_linear.py", get_target("sm90"))
    assert "x_desc.block_type.shape[0] >= 64" in result.text
    values = {**VERIFY_VALUES["suite_desc_linear.py"], "BLOCK_M": rows}
    for kernel in _compile(result, values, monkeypatch, tmp_path):
        sync, wgmma = _instructions(kernel.asm["ptx"])
        assert sync > 0 and wgmma == 0, (kernel.label, sync, wgmma)


@pytest.mark.parametrize("rows", [16, 32])
def test_the_attention_ring_tests_its_rows(rows: int, monkeypatch, tmp_path) -> None:
    """A flash-attention kernel launched with query blocks of 16 or 32 rows runs its translated loop (mma.sync for
    both products)."""
    from tests.conftest import VERIFY_VALUES

    source = (FIXTURES / "suite_gqa_attention.py").read_text()
    result = translate_source(source, "suite_gqa_attention.py", get_target("sm90"))
    assert "if acc.shape[0] >= 64:" in result.text
    values = {**VERIFY_VALUES["suite_gqa_attention.py"], "BLOCK_M": rows, "BLOCK_N": 32, "num_warps": 4}
    compiled = _compile(result, values, monkeypatch, tmp_path)
    for kernel in compiled:
        sync, wgmma = _instructions(kernel.asm["ptx"])
        assert sync > 0 and wgmma == 0, (kernel.label, sync, wgmma)
