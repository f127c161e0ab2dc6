"""The sm90 variants of the GEMM fixtures hold a pipelined main loop (issue #4): the descriptor goldens, and the
pointer GEMMs translated with --gluon-always (their goldens keep the kernel as Triton: the profitability policy).

The main loop is the `for` statement that issues the wgmma; it must issue it asynchronously and keep one in flight
(`warpgroup_mma_wait(1, ...)` inside the loop, `wait(0)` only after it), and fill its shared-memory ring ahead of
use: TMA and per-slot mbarriers for descriptor kernels, cp.async commit/wait groups for pointer kernels.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from transpile.engine import translate_source
from transpile.targets import get_target

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _gluon_always(gemm: str):  # noqa: ANN202 - TranslationResult
    """The sm90 variant with --gluon-always: pointer GEMMs are kept as Triton by default (the profitability policy,
    UNPROFITABLE_RINGS), the ring is emitted on request."""
    text = (FIXTURES / f"{gemm}.py").read_text(encoding="utf-8")
    # The pointer rings as a pointer GEMM the TMA rewrite (tests/test_tma_tiles.py) refuses gets them.
    return translate_source(text, f"fixtures/{gemm}.py", get_target("sm90"), gluon_always=True, tma_tiles=False)

DESCRIPTOR_GEMMS = ["matmul_descriptor"]
# int8: wgmma reads an 8-bit B operand K-major from shared memory, which a cp.async copy of the N-contiguous tile does
# not write; its main loop stays translated (TT040). A ring staged through registers (B stored K-major) was measured
# and not kept (bench/RESULTS.md: Profitability: no faster at 4096^3, 5x slower unaligned). Drop the mark once a ring handles it.
POINTER_GEMMS = ["matmul_grouped", "matmul_splitk", "moe_gather_gemm",
                 pytest.param("matmul_int8", marks=pytest.mark.xfail(
                     strict=True, reason="issue #4: 8-bit B operand needs K-major shared memory; cp.async ring not emitted"))]


def _main_loop(text: str) -> str:
    """Code of the innermost `for` loop that issues a wgmma itself (the 16-bit path: the loop kept for 8- and 32-bit
    operands calls the synchronous `_dot` helper instead), one statement a line (`ast.unparse`: whatever the layout
    of the variant)."""
    loops = []
    kernels = [f for f in ast.parse(text).body if isinstance(f, ast.FunctionDef) and not f.name.startswith("_")]
    for node in (n for f in kernels for n in ast.walk(f)):  # not the helpers (a warp-specialised form's partitions)
        if isinstance(node, ast.For):
            calls = {c.func.id for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
            if "warpgroup_mma" in calls:
                loops.append(ast.unparse(node))
    assert loops, "no loop issues `warpgroup_mma` directly: the main loop is not pipelined"
    return min(loops, key=len)


def _assert_async_wgmma(loop: str) -> None:
    assert "is_async=True" in loop and "warpgroup_mma(" in loop, "the main loop issues no asynchronous wgmma"
    assert "warpgroup_mma_wait(1," in loop, "the main loop does not keep one wgmma in flight (wait(1))"
    assert "warpgroup_mma_wait(0," not in loop, "the main loop waits for every wgmma (wait(0))"
    assert "_dot(" not in loop, "the main loop still stages operands through the synchronous `_dot` helper"


@pytest.mark.parametrize("gemm", DESCRIPTOR_GEMMS)
def test_descriptor_gemm_is_a_tma_ring(goldens, gemm: str) -> None:
    loop = _main_loop(goldens.read(gemm, "sm90"))
    _assert_async_wgmma(loop)
    assert "mbarrier.wait(" in loop and "mbarrier.expect(" in loop and "_tma_async_load(" in loop


@pytest.mark.parametrize("gemm", POINTER_GEMMS)
def test_pointer_gemm_is_a_cp_async_ring(goldens, gemm: str) -> None:
    # By default: Triton's pipeliner is faster than this ring (matmul_grouped: read through TMA descriptors instead).
    golden = goldens.read(gemm, "sm90")
    assert "# kept as Triton:" in golden or "= _TMAOrTriton(" in golden
    loop = _main_loop(_gluon_always(gemm).text)
    _assert_async_wgmma(loop)
    assert "commit_group()" in loop and "wait_group(" in loop, "no cp.async commit/wait groups in the main loop"


def test_pointer_gemm_rings_have_copy_layouts_and_the_fallback_keeps_blocked_ones(goldens) -> None:
    """Two rings, then the translated loop: 16-byte copies under the 16-byte alignment test, 8-byte copies under the
    8-byte one (rows and sizes multiples of 4 elements). Each ring reads tiles in `_copy_layout`s of its copy width that
    it builds itself; the kernel's layout declarations, and so the fallback loop's plain loads, stay 4-wide
    `_blocked_layout`s (a fallback loading 8-wide tiles ran at 0.78x of the original on unaligned sizes)."""
    text = _gluon_always("matmul_grouped").text
    kernel = next(node for node in ast.walk(ast.parse(text))
                  if isinstance(node, ast.FunctionDef) and node.name == "matmul_kernel")
    ring16 = next(node for node in kernel.body if isinstance(node, ast.If))
    before = kernel.body[:kernel.body.index(ring16)]
    blocked = {node.target.id for node in before if isinstance(node, ast.AnnAssign)
               and "_blocked_layout(" in (ast.get_source_segment(text, node) or "")}
    assert blocked, "the kernel declares no blocked tile layouts"
    assert not any("_copy_layout(" in (ast.get_source_segment(text, node) or "") for node in before)
    assert len(ring16.orelse) == 1 and isinstance(ring16.orelse[0], ast.If), "no second (8-byte) ring"
    ring8 = ring16.orelse[0]
    segment = lambda nodes: "\n".join(ast.get_source_segment(text, node) or "" for node in nodes)  # noqa: E731
    for ring, width, vec in ((ring16, 16, 8), (ring8, 8, 4)):
        test, pipelined = ast.get_source_segment(text, ring.test) or "", segment(ring.body)
        assert f"a_ptr.to(gl.int64) % {width} == 0" in test and f"stride_am % {vec} == 0" in test
        assert f"K % {vec} == 0" in test and "stride_ak == 1" in test
        assert "_cp_async_load(" in pipelined and f"gl.multiple_of(a_ptrs_next, [1, {width}]), [1, {vec}])" in pipelined
        bits = "" if width == 16 else f", {8 * width})"
        assert f"gl.num_warps(){bits}" in pipelined and "_copy_layout(" in pipelined
        ring_names = {node.id for node in ast.walk(ast.parse(pipelined)) if isinstance(node, ast.Name)}
        assert not blocked & ring_names, f"the ring reads values in the blocked layouts {sorted(blocked & ring_names)}"
    fallback = segment(ring8.orelse)
    assert "gl.load(" in fallback and "_dot(" in fallback and "_ring" not in fallback and "_copy_layout" not in fallback


@pytest.mark.slow
def test_each_autotune_config_gets_its_own_ring_depth(goldens, translated, verify_values,
                                                       monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """matmul_grouped's configs ask for 3 and 4 stages (and its loop gives none): the compiled rings hold 3 slots of
    128x64 / 64x256 tiles for the first config and 4 slots of 64x32 / 32x128 tiles for the second."""
    import tempfile

    from transpile.verify import verify

    result = _gluon_always("matmul_grouped")
    text = result.text
    assert "NUM_STAGES: gl.constexpr = _autotune_stages([BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, " \
           "gl.num_warps()], [[128, 256, 64, 8, 8, 3], [64, 128, 32, 8, 4, 4]], 3)" in text
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    compiled = verify(result, verify_values["matmul_grouped.py"], all_configs=True)
    assert [c.ok for c in compiled] == [True, True], [c.message for c in compiled]
    for c, (slots, a, b) in zip(compiled, [(3, "128x64", "64x256"), (4, "64x32", "32x128")]):
        ttgir = c.asm["ttgir"]
        assert f"memdesc<{slots}x{a}xf16" in ttgir and f"memdesc<{slots}x{b}xf16" in ttgir, c.label
        other = 7 - slots
        assert f"memdesc<{other}x{a}xf16" not in ttgir, c.label


@pytest.mark.parametrize("gemm, products", [("suite_gated_linear", 2), ("suite_linear_trans_b", 1),
                                             ("canon_gemm_nt", 1)])
def test_gated_and_transposed_pointer_gemms_get_the_cp_async_ring(goldens, verify_values, gemm: str,
                                                                  products: int) -> None:
    """Weights read transposed (`x @ w.T`: the wgmma reads a transposed view of the slot) and a gated GEMM's two
    products from one A tile (two wgmmas an iteration; the retire leaves both of this iteration's running). By default
    they stay Triton with the measured reason (H200: 0.81x, 0.92x: bench/RESULTS.md, Profitability); with
    --gluon-always the ring compiles and the schedule checker finds every slot read after its copy and refilled only
    after the wgmmas that read it retired."""
    from transpile.schedule_check import check_source
    from transpile.verify import verify

    golden = goldens.read(gemm, "sm90")
    assert "# kept as Triton:" in golden and "0.69x-0.96x" in golden, golden[:2000]
    result = _gluon_always(gemm)
    loop = _main_loop(result.text)
    if products == 1:
        _assert_async_wgmma(loop)
    assert loop.count("warpgroup_mma(") == products and loop.count("is_async=True") == products
    assert ".permute((1, 0))" in loop
    assert f"warpgroup_mma_wait({products}, deps=[" in loop
    report = check_source(result.text)
    assert report.cases and report.findings == [], report.findings[:3]
    compiled = verify(result, verify_values[f"{gemm}.py"], all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def test_a_tile_also_read_after_the_dot_is_read_from_its_slot() -> None:
    """The A tile summed by rows after the dot: the ring reads it from this iteration's slot into registers once the
    wgmma is issued (the slot is refilled only after that wgmma retired); the ring compiles and the schedule checker
    finds no read of a slot before its copy landed nor a refill of a slot still read."""
    from transpile.rules.hopper_cp_async import ROW_SUMS
    from transpile.schedule_check import check_source
    from transpile.verify import verify

    result = translate_source(ROW_SUMS, "x.py", get_target("sm90"), gluon_always=True)
    loop = _main_loop(result.text)
    _assert_async_wgmma(loop)
    lines = loop.splitlines()
    read = next(i for i, line in enumerate(lines) if line.strip().startswith("a = a_smem.index(slot).load("))
    assert read > next(i for i, line in enumerate(lines) if "warpgroup_mma_wait(" in line)
    assert read < next(i for i, line in enumerate(lines) if "_cp_async_load(" in line)
    report = check_source(result.text)
    assert report.cases and report.findings == [], report.findings[:3]
    compiled = verify(result, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "K": "i32", "N": "i32",
                               "stride_am": "i32", "stride_bk": "i32", "BM": 128, "BN": 128, "BK": 64,
                               "num_warps": 4}, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


@pytest.mark.parametrize(("weights", "warps"), [("*i8", 4), ("*i8", 8), ("*i32", 4)])
def test_an_operand_computed_from_its_slot_is_staged_for_the_wgmma(weights: str, warps: int) -> None:
    """Dequantised weights (`b = (w.to(tl.float32) * scales[None, :]).to(tl.float16)`): the ring copies the raw tile,
    reads it from its slot into registers only after the copies' wait, computes the operand there and stores it into
    one of two staging buffers (by iteration parity: the wgmma left in flight still reads the other), fenced and
    barriered before the wgmma; the ring is at least 3 slots deep. It compiles for int8 and int32 weights, at one and
    two warpgroups, and the schedule checker finds no read of a slot before its copy landed nor a refill or restage
    of a buffer a wgmma still reads. By default the variant binds the kernel's name to the one-wave launcher, which
    runs the source kernel for grids of more than one program per SM."""
    import re

    from transpile.rules.hopper_cp_async import DEQUANT
    from transpile.schedule_check import check_source
    from transpile.verify import verify

    default = translate_source(DEQUANT, "x.py", get_target("sm90"))
    assert "w_staged.index(stage).store(b)" in default.text
    assert "k = _OneWaveOrTriton(k, _k_triton, params=(" in default.text
    assert 'at_least=(("BM", 64), )' in default.text  # (a wgmma's 64 rows a warpgroup: narrower launches, the source)
    assert "class _OneWaveOrTriton(_TMAOrTriton):" in default.text and "class _ConfigSplit:" in default.text
    result = translate_source(DEQUANT, "x.py", get_target("sm90"), gluon_always=True)
    loop = _main_loop(result.text)
    _assert_async_wgmma(loop)
    lines = [line.strip() for line in loop.splitlines()]

    def first(prefix: str) -> int:
        return next(i for i, line in enumerate(lines) if line.startswith(prefix))

    assert first("async_copy.wait_group(") < first("w = w_smem.index(slot).load(") < first("b = (")
    assert first("b = (") < first("w_staged.index(stage).store(b)") < first("fence_async_shared()") \
        < first("acc = warpgroup_mma(") < first("acc, _, _, _ = warpgroup_mma_wait(1")
    assert re.search(r"NUM_STAGES: gl.constexpr = 3\b", result.text)
    report = check_source(result.text)
    assert report.cases and report.findings == [], report.findings[:3]
    compiled = verify(result, {"a_ptr": "*fp16", "b_ptr": weights, "s_ptr": "*fp32", "c_ptr": "*fp16", "K": "i32",
                               "N": "i32", "stride_am": "i32", "stride_bk": "i32", "BM": 128, "BN": 128, "BK": 64,
                               "num_warps": warps}, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


@pytest.mark.parametrize("cast", [
    # the operand cast to the other operand's type, which the wgmma reads from its slot (lightllm's
    # `tl.dot(a, b.to(a.dtype))`): the type is the slot's, `a_smem.dtype` (no register `a` exists)
    ("        b = (w.to(tl.float32) * scales[None, :]).to(tl.float16)\n        acc = tl.dot(a, b, acc)\n",
     "        b = w.to(tl.float32) * scales[None, :]\n        acc = tl.dot(a, b.to(a.dtype), acc)\n"),
    ("        b = (w.to(tl.float32) * scales[None, :]).to(tl.float16)\n",
     "        b = (w.to(tl.float32) * scales[None, :]).to(a.dtype)\n"),
])
def test_an_operand_cast_to_the_type_of_a_slot_operand_reads_the_slot_type(cast: tuple[str, str]) -> None:
    from transpile.rules.hopper_cp_async import DEQUANT
    from transpile.verify import verify

    text = DEQUANT.replace(*cast)
    assert text != DEQUANT
    result = translate_source(text, "x.py", get_target("sm90"), gluon_always=True)
    loop = _main_loop(result.text)
    assert "a_smem.dtype)" in loop and "a.dtype" not in loop
    assert not any(d.code == "TT041" for d in result.diagnostics), [d.message for d in result.diagnostics]
    compiled = verify(result, {"a_ptr": "*fp16", "b_ptr": "*i8", "s_ptr": "*fp32", "c_ptr": "*fp16", "K": "i32",
                               "N": "i32", "stride_am": "i32", "stride_bk": "i32", "BM": 128, "BN": 128, "BK": 64,
                               "num_warps": 4}, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def test_a_ring_in_a_copy_of_an_unswitched_loop_leaves_the_fallback_loop_in_its_layouts() -> None:
    """A dot loop unswitched on a compile-time flag puts each ring in a block of its own (`if EVEN_K:`): only the
    ring's branches are rebuilt in copy layouts, so the fallback loop beside each ring reads the blocked names it
    was translated with (a mask made before the loop, `a_mask`, not the ring's `a_mask_ring`), and it compiles."""
    from transpile.rules.hopper_cp_async import EXAMPLE
    from transpile.verify import verify

    text = EXAMPLE.replace("def k(a_ptr,", "def k(M, a_ptr,").replace(
        ", BK: tl.constexpr):", ", BK: tl.constexpr, EVEN_K: tl.constexpr):").replace(
        "    acc = tl.zeros((BM, BN), dtype=tl.float32)\n",
        "    acc = tl.zeros((BM, BN), dtype=tl.float32)\n    a_mask = offs_m[:, None] < M\n").replace(
        "        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)\n",
        "        if EVEN_K:\n            a = tl.load(a_ptrs, mask=a_mask, other=0.0)\n        else:\n"
        "            a = tl.load(a_ptrs, mask=a_mask & (offs_k[None, :] < K - k * BK), other=0.0)\n")
    result = translate_source(text, "x.py", get_target("sm90"), gluon_always=True)
    kernel = result.text.split("\ndef k(")[1].split("\ndef ")[0]
    copies = kernel.split("if EVEN_K:", 1)[1]
    assert "a_mask_ring = " in copies  # (each ring rebuilds the mask in its copy layout)
    fallback_loops = [part.split("for k in ", 1)[1] for part in copies.split("else:") if "for k in " in part
                      and "gl.load(a_ptrs" in part]
    assert fallback_loops and all("a_mask_ring" not in loop.split("tl.store")[0].split("gl.store")[0]
                                  for loop in fallback_loops)
    for even in (True, False):
        compiled = verify(result, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "K": "i32",
                                   "N": "i32", "stride_am": "i32", "stride_bk": "i32", "BM": 128, "BN": 128, "BK": 64,
                                   "EVEN_K": even}, all_configs=False)
        assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


TUPLE_HELPER = 'import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef _prep(x):\n    return x.to(tl.float16), tl.max(x, axis=1)\n\n\n@triton.jit\ndef k(a_ptr, b_ptr, c_ptr, m_ptr, K, N, stride_am, stride_bk, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):\n    offs_m = tl.arange(0, BM)\n    offs_n = tl.arange(0, BN)\n    offs_k = tl.arange(0, BK)\n    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]\n    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :]\n    acc = tl.zeros((BM, BN), dtype=tl.float32)\n    mx = tl.zeros((BM,), dtype=tl.float32)\n    for k in range(0, tl.cdiv(K, BK)):\n        x = tl.load(a_ptrs)\n        b = tl.load(b_ptrs)\n        a, m = _prep(x)\n        acc = tl.dot(a, b, acc)\n        mx = tl.maximum(mx, m)\n        a_ptrs += BK\n        b_ptrs += BK * stride_bk\n    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.float16))\n    tl.store(m_ptr + offs_m, mx)\n'


def test_a_loop_the_translation_adds_statements_to_is_refused_not_crashed() -> None:
    """`a, m = _prep(x)`, a jit helper returning a tuple, gets a conversion of each result after it in the translation:
    the loop body's statements no longer line up with the loop plan's (the source's), so the cp.async ring refuses
    the loop with that reason (it used to index the translated body with the plan's indices: a KeyError on aiter's
    fp4 GEMMs)."""
    result = translate_source(TUPLE_HELPER, "x.py", get_target("sm90"), gluon_always=True)
    assert any(d.code == "TT040" and "layout conversions of a helper's results" in d.message
               for d in result.diagnostics), [d.message for d in result.diagnostics]
    assert "_cp_async_load(" not in result.text
