"""fp8 dots on the AMD matrix cores (found by a probe of 32 kernel styles): each target's instructions
take some fp8 kinds at some depths; the variants used the int8 depth for every 8-bit type and did not compile for
fp8 on gfx950 (32x32x32 has no fp8 instruction), nor for the fp8 kinds gfx942 (OCP e4m3/e5m2) and gfx1250 (the fnuz
kinds) have no instructions for, which Triton converts to fp16 for the dot."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import pytest

from transpile.engine import translate_source
from transpile.targets import get_target

GEMM = '''import triton
import triton.language as tl


@triton.jit
def mm8(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * K + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * BN + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK * BN
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)
'''


@pytest.mark.slow
@pytest.mark.parametrize("target", ["gfx942", "gfx950", "gfx1250"])
@pytest.mark.parametrize("kind", ["fp8e4nv", "fp8e5", "fp8e4b8", "i8"])
def test_fp8_and_int8_dots_compile_on_every_amd_target(target: str, kind: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch):
    from transpile.verify import verify

    source = GEMM if kind != "i8" else GEMM.replace("dtype=tl.float32", "dtype=tl.int32")
    result = translate_source(source, "mm8.py", get_target(target))
    assert result.functions[0].translated and result.functions[0].pipelined
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {"a_ptr": f"*{kind}", "b_ptr": f"*{kind}", "c_ptr": "*i32" if kind == "i8" else "*fp32", "K": "i32",
              "BM": 128, "BN": 128, "BK": 64}
    compiled = verify(dataclasses.replace(result), values, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]
    (gluon,) = [c for c in compiled if not c.kept]  # (not the source kernel the launcher keeps for other launches)
    mfma = [line for line in gluon.asm["ttgir"].splitlines() if "#mma = " in line]
    if target == "gfx950" and kind in ("fp8e4nv", "fp8e5"):
        assert "instrShape = [32, 32, 64]" in mfma[0]  # OCP fp8: the f8f6f4 instructions, through `mfma_scaled`
        assert "v_mfma_scale_f32_32x32x64_f8f6f4" in gluon.asm["amdgcn"]
    if target == "gfx950" and kind == "fp8e4b8":
        assert "instrShape = [32, 32, 16]" in mfma[0]  # the fnuz kinds: `mfma` at gfx942's depth
    if target == "gfx942" and kind in ("fp8e4nv", "fp8e5"):
        assert "instrShape = [32, 32, 8]" in mfma[0]  # through fp16, as Triton's lowering


@pytest.mark.slow
@pytest.mark.parametrize(("bm", "bk", "shape", "instruction"), [
    (128, 32, "[32, 32, 16]", "v_mfma_f32_32x32x16_fp8_fp8"),   # K block under the 64 of 32x32x64 f8f6f4
    (16, 64, "[16, 16, 32]", "v_mfma_f32_16x16x32_fp8_fp8"),    # under the 128 of 16x16x128
    (128, 64, "[32, 32, 64]", "v_mfma_scale_f32_32x32x64_f8f6f4"),
])
def test_gfx950_fp8_dot_shallower_than_the_deep_instruction(bm: int, bk: int, shape: str, instruction: str,
                                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An OCP fp8 dot whose K block is shallower than gfx950's f8f6f4 instruction takes the plain fp8 MFMA (a
    128x128x32 fp8 GEMM failed to compile in the compiler's lowering: found on tritonbench's fp8 tutorial GEMM)."""
    from transpile.verify import verify

    result = translate_source(GEMM, "mm8.py", get_target("gfx950"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "c_ptr": "*fp32", "K": "i32", "BM": bm, "BN": 128, "BK": bk}
    compiled = verify(dataclasses.replace(result), values, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]
    (gluon,) = [c for c in compiled if not c.kept]
    mfma = [line for line in gluon.asm["ttgir"].splitlines() if "#mma = " in line]
    assert f"instrShape = {shape}" in mfma[0]
    assert instruction in gluon.asm["amdgcn"]


def test_the_fp8_test_comes_with_every_amd_snippet_that_calls_it():
    """`_mma_layout`, `_mma_k_width` and `_dot` call `_float8_via_fp16` on the AMD targets; sm90 has no such snippet."""
    for target in ("gfx942", "gfx950", "gfx1250"):
        for needed in ({"mma_layout"}, {"mma_k_width"}, {"dot"}):
            order = get_target(target).snippet_order(needed)
            assert "float8_via_fp16" in order and order.index("float8_via_fp16") < order.index(next(iter(needed)))
    assert "float8_via_fp16" not in get_target("sm90").snippet_order({"dot", "mma_layout", "mma_k_width"})
