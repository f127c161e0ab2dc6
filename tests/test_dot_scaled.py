"""`tl.dot_scaled` (microscaled fp4/fp8 MMA): gfx950 issues its scaled MFMAs, gfx1250 its scaled WMMAs (and both
warp-pipeline the loop, the scale tiles in rings of their own); sm90, which has no microscaled MMA, upcasts the
operands in registers as Triton's own compile does (the cp.async ring copies the packed tiles, B is staged for the
wgmma, A read from registers); gfx942 keeps the kernel as Triton and says why, at the call."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import pytest

from transpile.engine import translate_source
from transpile.targets import get_target

MX_LOOP = '''import triton
import triton.language as tl


@triton.jit
def mx(a_ptr, b_ptr, as_ptr, bs_ptr, c_ptr, K, stride_am, stride_s, BM: tl.constexpr, BN: tl.constexpr,
       BK: tl.constexpr, FMT: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK // 2)
    rs = tl.arange(0, BK // 32)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * BN + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        a_s = tl.load(as_ptr + rm[:, None] * stride_s + (k // 32 + rs)[None, :])
        b_s = tl.load(bs_ptr + rn[:, None] * stride_s + (k // 32 + rs)[None, :])
        acc += tl.dot_scaled(a, a_s, FMT, b, b_s, FMT)
        a_ptrs += BK // 2
        b_ptrs += (BK // 2) * BN
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)
'''

ONE_SHOT = '''import triton
import triton.language as tl


@triton.jit
def mx1(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    c = tl.dot_scaled(a, None, "e4m3", b, None, "e5m2")
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], c)
'''


def _compile(result, values, tmp_path, monkeypatch):  # noqa: ANN001, ANN202
    from transpile.verify import verify

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    compiled = verify(dataclasses.replace(result), values, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]
    return [c for c in compiled if not c.kept]


def test_gfx950_pipelines_the_scaled_dot_loop_with_rings_for_the_scales() -> None:
    result = translate_source(MX_LOOP, "mx.py", get_target("gfx950"))
    (fn,) = result.functions
    assert fn.translated and fn.pipelined, result.diagnostics
    text = result.text
    # the accumulation folded into the dot; the MMA layout at the depth of the scaled instructions
    assert "acc = _dot_scaled(a, a_s, FMT, b, b_s, FMT, acc)" in text
    assert "_scaled_mma_layout(BM, [BN], gl.num_warps())" in text
    # both scale tiles copied direct to LDS beside the operands and read in the layout the instruction reads
    assert "a_s_ring = gl.allocate_shared_memory(" in text and "b_s_ring = gl.allocate_shared_memory(" in text
    assert "_scale_layout(0, acc.type.layout, [BM, BK // 32], FMT)" in text
    assert "_scale_layout(1, acc.type.layout, [BN, BK // 32], FMT)" in text
    assert "_scaled_operand_layout(0, acc.type.layout, FMT)" in text
    assert text.count("async_copy.buffer_load_to_shared(a_s_ring.index(") >= 2
    assert "mfma_scaled(a, a_scale, a_format, b, b_scale, b_format, acc)" in text


@pytest.mark.parametrize("target", ["gfx942"])
def test_targets_without_a_translation_keep_the_kernel_and_say_why_at_the_call(target: str) -> None:
    result = translate_source(MX_LOOP, "mx.py", get_target(target))
    (fn,) = result.functions
    assert not fn.translated
    assert not [d for d in result.diagnostics if d.code == "TT011"]  # (kept with the reason, not refused)
    (diagnostic,) = [d for d in result.diagnostics if d.code == "TT041"]
    assert diagnostic.line == 20  # the `tl.dot_scaled` call
    assert diagnostic.message.startswith(f"`mx` kept as Triton: `tl.dot_scaled` at line 20: {target} has no ")
    assert "upcasts the operands to bf16 in software" in diagnostic.message
    assert "tl.dot_scaled(a, a_s, FMT, b, b_s, FMT)" in result.text  # the source kernel, as written


def test_sm90_rings_the_packed_tiles_and_upcasts_them_for_the_wgmma() -> None:
    result = translate_source(MX_LOOP, "mx.py", get_target("sm90"), gluon_always=True)
    (fn,) = result.functions
    assert fn.translated and fn.pipelined, result.diagnostics
    text = result.text
    # the packed bytes in the ring, as loaded (K // 2 bytes a row for e2m1); B's upcast tile staged in two buffers of
    # the compute type, at the unpacked depth; A upcast into the wgmma's register operand layout
    assert "[NUM_STAGES, BM, BK // 2]" in text and "[NUM_STAGES, BK // 2, BN]" in text
    assert "b_staged = gl.allocate_shared_memory(\n" in text or "b_staged = gl.allocate_shared_memory(" in text
    assert '(BK // 2) * (2 if FMT == "e2m1" else 1)' in text and "a_staged" not in text
    assert '_upcast_scaled(a, a_s, FMT, 1, _scaled_compute_type(FMT, FMT), False)' in " ".join(text.split())
    assert "_register_a_layout(acc.type.layout, _scaled_compute_type(FMT, FMT))" in " ".join(text.split())
    assert '_upcast_scaled(b, b_s, FMT, 0, _scaled_compute_type(FMT, FMT), False)' in " ".join(text.split())
    # the ring runs where its shared memory fits; one ring (16-byte copies), then the translated loop
    assert "_tiles_fit(" in text and "elif (" not in text.split("def mx(")[1]
    # the translated loop and a dot outside a loop: the upcasting `_dot_scaled`, the plain MMA of bf16
    assert "acc = _dot_scaled(a, a_s, FMT, b, b_s, FMT, acc)" in text
    assert "_mma_layout(BM, [BN], gl.bfloat16, gl.num_warps())" in text
    one = translate_source(ONE_SHOT, "mx1.py", get_target("sm90"))
    assert one.functions[0].translated, one.diagnostics
    assert '_dot_scaled(a, None, "e4m3", b, None, "e5m2",' in " ".join(one.text.split())
    # by default the ring, measured slower than Triton's own compile, is not emitted: the reason names the figures
    kept = translate_source(MX_LOOP, "mx.py", get_target("sm90"))
    assert not kept.functions[0].translated
    (diagnostic,) = [d for d in kept.diagnostics if d.code == "TT041"]
    assert "0.89-0.94x Triton 3.6's own compile" in diagnostic.message and diagnostic.line == 15


def test_sm90_keeps_a_scaled_dot_whose_tiles_are_addressed_afresh_with_the_scaled_rings_figures() -> None:
    # `a` addressed afresh each iteration (no loop-carried tile of pointers, aiter's `_gemm_a8wfp4_kernel`): the ring
    # would not take that form, and would be kept anyway, being the scaled dot's ring measured slower; both said
    text = MX_LOOP.replace("        a = tl.load(a_ptrs)\n",
                           "        a = tl.load(a_ptr + rm[:, None] * stride_am + (k // 2 + rk)[None, :])\n")
    assert text != MX_LOOP
    kept = translate_source(text, "mx.py", get_target("sm90"))
    assert not kept.functions[0].translated
    (diagnostic,) = [d for d in kept.diagnostics if d.code == "TT041"]
    assert "the pointer tile of `a` is not a loop-carried tile of pointers" in diagnostic.message
    assert "0.89-0.94x Triton 3.6's own compile" in diagnostic.message


@pytest.mark.slow
@pytest.mark.parametrize("fmt, kind", [("e2m1", "u8"), ("e4m3", "fp8e4nv")])
def test_scaled_dots_compile_to_wgmma_on_sm90(fmt: str, kind: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "suite_mx_gemm.py"
    loop = translate_source(fixture.read_text(encoding="utf-8"), "suite_mx_gemm.py", get_target("sm90"),
                            gluon_always=True)
    assert loop.functions[0].pipelined, loop.diagnostics
    values = {"a_ptr": f"*{kind}", "b_ptr": f"*{kind}", "a_scale_ptr": "*u8", "b_scale_ptr": "*u8",
              "c_ptr": "*bf16", "FORMAT": fmt}
    (gluon,) = _compile(loop, values, tmp_path, monkeypatch)
    ptx = gluon.asm["ptx"]
    assert "wgmma.mma_async" in ptx and "cp.async" in ptx
    assert gluon.shared <= 227 * 1024
    one = translate_source(ONE_SHOT, "mx1.py", get_target("sm90"))
    values = {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e5", "c_ptr": "*fp32", "BM": 64, "BN": 64, "BK": 128,
              "num_warps": 4}
    (gluon,) = _compile(one, values, tmp_path, monkeypatch)
    assert "wgmma.mma_async" in gluon.asm["ptx"]
    # an operand the loop computes from its tile (a preshuffled B put back in order by reshapes): computed from
    # the slot after the copies' wait, then upcast
    shuffled = MX_LOOP.replace("        b = tl.load(b_ptrs)\n",
                               "        b = tl.load(b_ptrs)\n        b = b.reshape(BK // 4, 2, BN).reshape(BK // 2, BN)\n")
    ring = translate_source(shuffled, "mx.py", get_target("sm90"), gluon_always=True)
    assert ring.functions[0].pipelined, ring.diagnostics
    values = {"a_ptr": "*u8", "b_ptr": "*u8", "as_ptr": "*u8", "bs_ptr": "*u8", "c_ptr": "*fp32", "K": "i32",
              "stride_am": "i32", "stride_s": "i32", "BM": 128, "BN": 128, "BK": 128, "FMT": "e2m1", "num_warps": 8}
    (gluon,) = _compile(ring, values, tmp_path, monkeypatch)
    assert "wgmma.mma_async" in gluon.asm["ptx"] and "cp.async" in gluon.asm["ptx"]


@pytest.mark.parametrize("change, names", [
    ('tl.dot_scaled(a, a_s, FMT, b, b_s, FMT)', None),
    ('tl.dot_scaled(a, a_s, "bf16", b, b_s, FMT)', '"bf16"'),
    ('tl.dot_scaled(a, a_s, FMT, b, b_s, FMT, rhs_k_pack=False)', "rhs_k_pack"),
])
def test_formats_and_packings_the_scaled_mfma_does_not_take_keep_the_kernel(change: str, names: str | None) -> None:
    source = MX_LOOP.replace("tl.dot_scaled(a, a_s, FMT, b, b_s, FMT)", change)
    result = translate_source(source, "mx.py", get_target("gfx950"))
    assert not [d for d in result.diagnostics if d.code == "TT011"]
    kept = [d for d in result.diagnostics if d.code == "TT041" and "dot_scaled" in d.message]
    if names is None:
        assert not kept
        return
    (diagnostic,) = kept
    assert names in diagnostic.message and diagnostic.line == 20
    assert not result.functions[0].translated


def test_an_accumulator_of_another_type_is_not_folded_into_the_scaled_dot() -> None:
    from transpile.passes.canonical import canonicalize_text

    folded = canonicalize_text(MX_LOOP, "mx.py")
    assert "acc = tl.dot_scaled(a, a_s, FMT, b, b_s, FMT, acc)" in folded
    kept = canonicalize_text(MX_LOOP.replace("dtype=tl.float32", "dtype=tl.bfloat16"), "mx.py")
    assert "acc += tl.dot_scaled(a, a_s, FMT, b, b_s, FMT)" in kept


@pytest.mark.slow
def test_scaled_dots_compile_to_the_scaled_mfma_on_gfx950(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loop = translate_source(MX_LOOP, "mx.py", get_target("gfx950"))
    values = {"a_ptr": "*u8", "b_ptr": "*u8", "as_ptr": "*u8", "bs_ptr": "*u8", "c_ptr": "*fp32", "K": "i32",
              "stride_am": "i32", "stride_s": "i32", "BM": 128, "BN": 128, "BK": 128, "FMT": "e2m1", "num_warps": 8}
    (gluon,) = _compile(loop, values, tmp_path, monkeypatch)
    assert "v_mfma_scale_f32_32x32x64_f8f6f4" in gluon.asm["amdgcn"]
    # rows of packed bytes a run-time integer divided apart (`K // 2`): no launch proves them 16-byte aligned, so
    # they are not copied 16 bytes a lane (which did not compile)
    packed = translate_source(MX_LOOP.replace("rm[:, None] * stride_am", "rm[:, None] * (K // 2)"), "mx.py",
                              get_target("gfx950"))
    assert not packed.functions[0].translated
    (kept,) = [d for d in packed.diagnostics if d.code == "TT041"]
    assert "the tile `a` cannot be copied direct to LDS" in kept.message and "`K // 2`" in kept.message
    # no accumulator, no scales, two fp8 formats: zeros in the MMA layout, scales of 1
    one = translate_source(ONE_SHOT, "mx1.py", get_target("gfx950"))
    assert one.functions[0].translated, one.diagnostics
    values = {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e5", "c_ptr": "*fp32", "BM": 64, "BN": 64, "BK": 128,
              "num_warps": 4}
    (gluon,) = _compile(one, values, tmp_path, monkeypatch)
    assert "v_mfma_scale_f32_32x32x64_f8f6f4" in gluon.asm["amdgcn"]


@pytest.mark.slow
@pytest.mark.parametrize("fmt, kind", [("e2m1", "u8"), ("e4m3", "fp8e4nv")])
def test_scaled_dots_compile_to_the_scaled_wmma_on_gfx1250(fmt: str, kind: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """gfx1250's scaled WMMA (16x16x128) reads an e2m1 operand laid out for 64 bytes of K, an fp8 one for 128 (the
    fixture packs K by its format)."""
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "suite_mx_gemm.py"
    loop = translate_source(fixture.read_text(encoding="utf-8"), "suite_mx_gemm.py", get_target("gfx1250"))
    assert loop.functions[0].pipelined, loop.diagnostics
    assert "wmma_scaled(a, a_scale, a_format, b, b_scale, b_format, acc)" in loop.text
    values = {"a_ptr": f"*{kind}", "b_ptr": f"*{kind}", "a_scale_ptr": "*u8", "b_scale_ptr": "*u8",
              "c_ptr": "*bf16", "FORMAT": fmt}
    (gluon,) = _compile(loop, values, tmp_path, monkeypatch)
    assert "v_wmma_scale_f32_16x16x128_f8f6f4" in gluon.asm["amdgcn"]


def test_launches_whose_scaled_tiles_would_spill_run_the_source_kernel() -> None:
    from transpile.rules.base import source_when_holds

    result = translate_source(MX_LOOP, "mx.py", get_target("gfx1250"))
    (test,) = [t for t in result.functions[0].dispatch.source_when if "* 4" in t[0]]
    # (this kernel's tiles hold BK // 2 bytes of K: 128 at BK 256, as an fp8 tile of K 128 does)
    for values, spills in (({"BM": 256, "BN": 256, "BK": 256}, True), ({"BM": 256, "BN": 256, "BK": 128}, False),
                           ({"BM": 128, "BN": 128, "BK": 256}, False)):
        assert source_when_holds(*test, values) == spills, values
    # gfx950's lanes are twice as many: the same tiles take half the registers a lane, under its limit
    (test,) = [t for t in translate_source(MX_LOOP, "mx.py", get_target("gfx950")).functions[0].dispatch.source_when
               if "* 4" in t[0]]
    assert not source_when_holds(*test, {"BM": 256, "BN": 256, "BK": 256})
    assert source_when_holds(*test, {"BM": 256, "BN": 512, "BK": 256})


def test_launches_the_scaled_mfma_does_not_take_run_the_source_kernel() -> None:
    """A format the scaled MMA does not take (a constexpr "bf16" at one launch), a K block shallower than its
    instruction, scale rows of fewer than 4 bytes (no direct-to-LDS copy that narrow): each such launch runs the source
    kernel (each made a variant that did not compile)."""
    from transpile.rules.base import source_when_holds

    result = translate_source(MX_LOOP, "mx.py", get_target("gfx950"))
    tests = result.functions[0].dispatch.source_when

    def source(values: dict) -> bool:
        return any(source_when_holds(*test, values) for test in tests)

    assert not source({"BM": 128, "BN": 128, "BK": 128, "FMT": "e2m1"})
    assert source({"BM": 128, "BN": 128, "BK": 128, "FMT": "bf16"})
    assert source({"BM": 128, "BN": 128, "BK": 32, "FMT": "e2m1"})  # K 32: no scaled MFMA that shallow
    assert source({"BM": 16, "BN": 128, "BK": 64, "FMT": "e2m1"})  # 16-wide tiles: 16x16x128
    assert source({"BM": 128, "BN": 128, "BK": 64, "FMT": "e2m1"})  # scale rows of 2 bytes


B_SCALE_ONLY = MX_LOOP.replace("acc += tl.dot_scaled(a, a_s, FMT, b, b_s, FMT)",
                               'acc += tl.dot_scaled(a, None, FMT, b, b_s, FMT)')


def test_a_scale_of_none_leaves_the_other_in_its_own_position() -> None:
    """Only B scaled: B's scale ring is read in B's scale layout (it took A's position, whose shape is unknown)."""
    result = translate_source(B_SCALE_ONLY, "mx.py", get_target("gfx950"))
    assert result.functions[0].pipelined, result.diagnostics
    assert "_scale_layout(1, acc.type.layout, [BN, BK // 32], FMT)" in result.text
    assert "_scale_layout(0," not in result.text.split("def mx(")[1]


@pytest.mark.parametrize("change, reason", [
    # a row stride bound to a local name (`KP = K // 2`) is as unaligned as one written in place
    (("    rm = tl.arange(0, BM)\n", "    KP = stride_am // 2\n    rm = tl.arange(0, BM)\n"),
     "cannot be copied direct to LDS"),
    # a scale mask along K makes copies of a byte a lane
    (("a_s = tl.load(as_ptr + rm[:, None] * stride_s + (k // 32 + rs)[None, :])",
      "a_s = tl.load(as_ptr + rm[:, None] * stride_s + (k // 32 + rs)[None, :], mask=rs[None, :] < (K - k) // 32)"),
     "unmasked along K"),
])
def test_scale_and_operand_tiles_no_copy_takes_keep_the_loop(change: tuple[str, str], reason: str) -> None:
    source = MX_LOOP.replace(*change)
    if "KP" in change[1]:
        source = source.replace("rm[:, None] * stride_am", "rm[:, None] * KP")
    result = translate_source(source, "mx.py", get_target("gfx950"))
    assert not result.functions[0].pipelined
    assert any(reason in d.message for d in result.diagnostics), [d.message for d in result.diagnostics]
