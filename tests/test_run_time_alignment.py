"""Pointer tiles whose base the kernel loads (a grouped GEMM's per-problem pointers, stored as integers): no launch can
vouch for their 16-byte alignment, so the AMD pipelines test it in the kernel, before the loop
(`transpile.analysis.launch_alignment.run_time_alignment`, `transpile.rules.copy_operands`): where the base, the row
strides and the bounds along the contiguous axis are multiples of 16 bytes, the pipelined loop runs, its copies reading
them through values the compiler knows aligned; elsewhere the loop as translated. Also: a pointer a loop nested
between the pipelined loop and an outer loop makes afresh is not carried stale into the next run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import libcst as cst
import pytest

from transpile.analysis.launch_alignment import run_time_alignment
from transpile.cst_walk import preorder
from transpile.discover import discover
from transpile.engine import translate_source
from transpile.source import parse_source
from transpile.targets import get_target

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "grouped_gemm_ptr_array.py"

KERNEL = '''import triton
import triton.language as tl


@triton.jit
def grouped(addrs, strides, sizes, c_ptr, G, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    for g in range(G):
        K = tl.load(sizes + g)
        lda = tl.load(strides + g)
        a_ptr = tl.load(addrs + g).to(tl.pointer_type(tl.float16))
        b_ptr = tl.load(addrs + G + g).to(tl.pointer_type(tl.float16))
        offs_m = tl.arange(0, BM)
        offs_n = tl.arange(0, BN)
        offs_k = tl.arange(0, BK)
        a_ptrs = a_ptr + offs_m[:, None] * lda + offs_k[None, :]
        b_ptrs = b_ptr + offs_k[:, None] * BN + offs_n[None, :]
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)
            acc += tl.dot(a, b)
            a_ptrs += BK
            b_ptrs += BK * BN
        tl.store(c_ptr + g * BM * BN + offs_m[:, None] * BN + offs_n[None, :], acc.to(tl.float16))
'''


def _loop_tiles(text: str) -> tuple[object, cst.For, dict[str, cst.BaseExpression], dict[str, cst.BaseExpression]]:
    """The kernel, its innermost dot loop, and each tile load's pointer and mask there, by the name loaded into."""
    source = parse_source(text, "k.py")
    facts = discover(source)
    fn = next(iter(facts.functions.values()))
    loops = [n for n in preorder(fn.node) if isinstance(n, cst.For) and "tl.dot" in source.code(n)]
    loop = loops[-1]
    pointers, masks = {}, {}
    for node in preorder(loop.body):
        if isinstance(node, cst.Assign) and isinstance(node.value, cst.Call) \
                and source.code(node.value.func) == "tl.load":
            name = node.targets[0].target.value  # type: ignore[attr-defined]
            pointers[name] = node.value.args[0].value
            masks[name] = next(a.value for a in node.value.args if a.keyword and a.keyword.value == "mask")
    return fn, loop, pointers, masks


def test_the_fixtures_tiles_are_tested_by_their_bases_rows_and_bounds() -> None:
    fn, loop, pointers, masks = _loop_tiles(FIXTURE.read_text(encoding="utf-8"))
    # A: rows `lda` apart, masked along K by the loaded `K`; B: rows `ldb` apart (its advance too), masked by `N`
    assert run_time_alignment(fn, pointers["a"], masks["a"], loop) == ("a_ptr", ("lda", "K"))
    assert run_time_alignment(fn, pointers["b"], masks["b"], loop) == ("b_ptr", ("ldb", "N"))


def test_a_mask_named_before_its_load_is_followed() -> None:
    text = KERNEL.replace("            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)\n",
                          "            mk = offs_k < K - k * BK\n            a = tl.load(a_ptrs, mask=mk[None, :], other=0.0)\n")
    assert text != KERNEL
    fn, loop, pointers, masks = _loop_tiles(text)
    assert run_time_alignment(fn, pointers["a"], masks["a"], loop) == ("a_ptr", ("lda", "K"))


@pytest.mark.parametrize("change, why", [
    (("offs_k[None, :] < K - k * BK, other=0.0)\n            b =", "offs_k[None, :] < K - 1 - k * BK, other=0.0)\n"
      "            b ="), "a bound not a sum of tested names and block multiples"),
    ((("        for k in range(0, tl.cdiv(K, BK)):\n", "        k_left = K + BK\n        for k in range(0, tl.cdiv(K, BK)):\n"
       "            k_left = k_left - BK\n"), ("mask=offs_k[None, :] < K - k * BK, other=0.0)\n            b =",
                                              "mask=offs_k[None, :] < k_left, other=0.0)\n            b =")),
     "a bound the loop changes"),
    (("        a_ptrs = a_ptr + offs_m[:, None] * lda + offs_k[None, :]\n",
      "        a_ptrs = a_ptr + offs_m[:, None] * lda + offs_k[None, :]\n        lda = tl.load(strides + G + g)\n"),
     "a row stride assigned again after the tile is made"),
    (("offs_k[None, :]", "offs_k[None, :] * lda"), "a loaded name scales the contiguous axis"),
    (("a_ptr + offs_m", "a_ptr + K + offs_m"), "a loaded scalar added to the base"),
    (("            a_ptrs += BK\n", "            a_ptrs += BK\n            lda += 1\n"), "the loop changes a row stride"),
])
def test_a_tile_the_test_cannot_cover_is_not_taken(change: tuple, why: str) -> None:
    text = KERNEL
    for old, new in change if isinstance(change[0], tuple) else (change,):
        assert old in text, old
        text = text.replace(old, new)
    fn, loop, pointers, masks = _loop_tiles(text)
    assert run_time_alignment(fn, pointers["a"], masks["a"], loop) is None, why


def test_the_pipelined_loop_runs_under_the_test_and_the_loop_as_translated_elsewhere() -> None:
    out = translate_source(KERNEL, "k.py", get_target("gfx950"))
    assert out.functions[0].pipelined
    text = out.text
    assert "a_ptr_16 = _aligned_ptr(a_ptr)" in text
    assert "lda_16 = _aligned_int(lda, a_ptr.dtype.element_ty)" in text
    assert "K_16 = _aligned_int(K, a_ptr.dtype.element_ty)" in text
    assert "(a_ptr_16.to(gl.int64) == a_ptr.to(gl.int64))" in text and "& (lda_16 == lda)" in text
    # the copies read the aligned values; B's base is tested too, its row stride a constexpr
    assert "a_ptr_16 + offs_m_a_rows[:, None] * lda_16" in text
    assert "b_ptr_16 = _aligned_ptr(b_ptr)" in text and "BN_16" not in text
    # the steady state leaves out the K masks of the tiles wholly inside the loaded `K` (read through the outer
    # loop's variable: invariant in this loop)
    assert "num_full = gl.minimum(num_iters, gl.maximum(K_16, 0) // BK)" in text
    # the loop as translated: under the failed test, and where the rings do not fit the LDS
    assert text.count("for k in range(0, gl.cdiv(K, BK)):") == 2
    assert "def _aligned_ptr(ptr):" in text and "def _aligned_int(value, dtype: gl.constexpr, other" in text
    # idempotent: the variant is what a second run writes
    assert translate_source(KERNEL, "k.py", get_target("gfx950")).text == text


def test_a_pointer_made_afresh_in_a_loop_between_is_not_stale() -> None:
    """The grouped GEMM's tile pointers are made in the `while` over tiles, inside the loop over problems: each run of
    the pipelined loop starts from them. Made before the loop over problems instead, they would be carried."""
    fn_text = FIXTURE.read_text(encoding="utf-8")
    assert translate_source(fn_text, "g.py", get_target("gfx950")).functions[0].pipelined
    moved = KERNEL.replace("        a_ptrs = a_ptr + offs_m[:, None] * lda + offs_k[None, :]\n", "").replace(
        "    for g in range(G):\n",
        "    a_ptrs = addrs.to(tl.pointer_type(tl.float16)) + tl.arange(0, BM)[:, None] * 64 + tl.arange(0, BK)[None, :]\n"
        "    for g in range(G):\n")
    out = translate_source(moved, "k.py", get_target("gfx950"))
    assert not out.functions[0].pipelined
    assert "is carried into the next iteration of the loop at line" in "\n".join(d.message for d in out.diagnostics)


def test_sm90_keeps_it_naming_the_loaded_values() -> None:
    """sm90's cp.async ring has no in-kernel test for such values (its alignment hints sit on the carried tile
    pointers, which its fallback loop reads too): the kernel is kept, with a reason that says why, not the pointer
    rings' measurement (of tiles Triton's own compile copies 16 bytes a lane); `--gluon-always` translates the loop."""
    text = FIXTURE.read_text(encoding="utf-8")
    kept = translate_source(text, "g.py", get_target("sm90"))
    assert not kept.functions[0].pipelined
    reason = "\n".join(d.message for d in kept.diagnostics)
    assert "addressed from values the kernel loads (`K`, `N`, `a_ptr`, `b_ptr`, `lda`, `ldb`)" in reason
    assert "2 bytes a lane" in reason and "0.69x" not in reason
    translated = translate_source(text, "g.py", get_target("sm90"), gluon_always=True)
    assert not translated.functions[0].pipelined
    assert "_cp_async" not in translated.text


# A and B both [rows, K], K-contiguous (`tl.dot(a, tl.trans(b))`): the loaded `K` bounds both tiles' columns, and
# their rows are `lda` apart
NT_KERNEL = KERNEL.replace("b_ptrs = b_ptr + offs_k[:, None] * BN + offs_n[None, :]",
                           "b_ptrs = b_ptr + offs_n[:, None] * lda + offs_k[None, :]").replace(
    "b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)",
    "b = tl.load(b_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)").replace(
    "acc += tl.dot(a, b)", "acc += tl.dot(a, tl.trans(b))").replace("b_ptrs += BK * BN", "b_ptrs += BK")


def test_an_integer_two_tiles_read_is_a_multiple_for_both_types() -> None:
    assert NT_KERNEL.count("lda") > KERNEL.count("lda")
    out = translate_source(NT_KERNEL, "k.py", get_target("gfx950"))
    assert out.functions[0].pipelined
    assert "K_16 = _aligned_int(K, a_ptr.dtype.element_ty, b_ptr.dtype.element_ty)" in out.text
    assert "lda_16 = _aligned_int(lda, a_ptr.dtype.element_ty, b_ptr.dtype.element_ty)" in out.text


@pytest.mark.slow
def test_the_two_type_test_compiles(tmp_path: Path) -> None:
    source = tmp_path / "k.py"
    source.write_text(NT_KERNEL, encoding="utf-8")
    values = ["-v", "addrs=*i64", "-v", "strides=*i32", "-v", "sizes=*i32", "-v", "c_ptr=*fp16", "-v", "G=i32",
              "-v", "BM=128", "-v", "BN=128", "-v", "BK=64", "-v", "num_warps=8"]
    done = subprocess.run([sys.executable, "-m", "transpile", "verify", str(source), "-t", "gfx950", "--isa", *values],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pipelined" in done.stdout and "direct-to-LDS copies" in done.stdout


@pytest.mark.parametrize("target", ["gfx950", "gfx942", "gfx1250"])
def test_the_fixtures_launches_reach_the_gluon_kernel(target: str) -> None:
    """The launcher checks only what a launch can tell: the loaded values' alignment is the kernel's to test, so
    neither the number of problems nor the arrays the sizes are read from keep a launch on the source kernel."""
    import importlib.util

    import torch

    path = FIXTURE.parent / "expected" / target / f"grouped_gemm_ptr_array_{target}.py"
    spec = importlib.util.spec_from_file_location(f"grouped_{target}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    launcher = module.grouped_gemm_kernel
    kwargs = dict(NUM_SM=304, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8)
    for problems in (3, 16):
        addrs = [torch.zeros(problems, dtype=torch.int64) for _ in range(3)]
        arrays = [torch.zeros(3 * problems, dtype=torch.int32) for _ in range(2)]
        assert launcher.addressable((*addrs, *arrays, problems), kwargs), problems
    # (another module's 4-warp launch still runs the source kernel)
    assert not launcher.addressable((*addrs, *arrays, 3), {**kwargs, "num_warps": 4})


# A pointer parameter the kernel moves by an offset it loads (a packed batch's per-sequence start, in elements): no
# launch vouches for the moved base, and Triton 3.9 refused the direct-to-LDS copies of the variant that took it as
# the launch's ("the load can only be vectorized to 1 element(s)"): the kernel tests it instead.
MOVED_KERNEL = '''import triton
import triton.language as tl


@triton.jit
def moved(q, w, o, offsets, K, stride_q, stride_w, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    q += tl.load(offsets + pid)
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        p_q = q + offs_m[:, None] * stride_q + (k * BK + offs_k)[None, :]
        p_w = w + (k * BK + offs_k)[:, None] * stride_w + offs_n[None, :]
        a = tl.load(p_q)
        b = tl.load(p_w)
        acc = tl.dot(a, b, acc)
    tl.store(o + pid * BM * BN + offs_m[:, None] * BN + offs_n[None, :], acc)
'''


def test_a_parameter_moved_by_a_loaded_offset_is_tested_in_the_kernel() -> None:
    from transpile.analysis.launch_alignment import moved_unvouched

    fn, loop, pointers, _ = _loop_tiles(MOVED_KERNEL.replace("a = tl.load(p_q)", "a = tl.load(p_q, mask=None)")
                                        .replace("b = tl.load(p_w)", "b = tl.load(p_w, mask=None)"))
    assert moved_unvouched(fn, "q") and not moved_unvouched(fn, "w")
    assert run_time_alignment(fn, pointers["a"], None, loop) == ("q", ())
    out = translate_source(MOVED_KERNEL, "k.py", get_target("gfx950"))
    assert out.functions[0].pipelined
    assert "q_16 = _aligned_ptr(q)" in out.text and "if (q_16.to(gl.int64) == q.to(gl.int64)):" in out.text
    assert "w_16" not in out.text  # (w is the launch's: its launcher checks it)
    # moved by a product with an integer argument, or by a local name assigned once to such a sum (the tutorial's
    # `adj`): the launch's, the launcher checking that argument (`M`, read nowhere else)
    for vouched in ("q += tl.load(offsets + pid) * stride_q", "q += pid * BM * stride_q", "q += K",
                    "off = (pid * M).to(tl.int64)\n    q += off"):
        text = MOVED_KERNEL.replace("q += tl.load(offsets + pid)", vouched).replace("K, stride_q", "K, M, stride_q")
        source = parse_source(text, "k.py")
        assert not moved_unvouched(next(iter(discover(source).functions.values())), "q"), vouched
        out = translate_source(text, "k.py", get_target("gfx950"))
        assert "_aligned_ptr(q)" not in out.text
        if "M)" in vouched:
            assert '"M",' in out.text.split("divisible=(", 2)[2].split(")", 1)[0]
    # by a product with a constexpr: launches where it is not a multiple of 16 run the source kernel
    scaled = translate_source(MOVED_KERNEL.replace("q += tl.load(offsets + pid)", "q += tl.load(offsets + pid) * BM"),
                              "k.py", get_target("gfx950"))
    assert "_aligned_ptr(q)" not in scaled.text
    assert "BM % 16 != 0" in [t[0] for t in scaled.functions[0].dispatch.source_when]
    # a loaded value, through a local name too, or a base made from the parameter and one: tested in the kernel
    for tested in ("off = tl.load(offsets + pid)\n    q += off", "q = q + tl.load(offsets + pid) + 3"):
        text = MOVED_KERNEL.replace("q += tl.load(offsets + pid)", tested)
        source = parse_source(text, "k.py")
        assert moved_unvouched(next(iter(discover(source).functions.values())), "q"), tested
        assert "q_16 = _aligned_ptr(q)" in translate_source(text, "k.py", get_target("gfx950")).text, tested
    local = MOVED_KERNEL.replace("q += tl.load(offsets + pid)", "qb = q + tl.load(offsets + pid)").replace(
        "p_q = q + offs_m", "p_q = qb + offs_m")
    assert "qb_16 = _aligned_ptr(qb)" in translate_source(local, "k.py", get_target("gfx950")).text


def test_a_base_assigned_after_the_tile_is_made_is_not_tested() -> None:
    """The test runs before the loop: a base moved again between the tile's definition and the loop would be
    tested at another value than the tile's."""
    text = MOVED_KERNEL.replace("        p_q = q + offs_m[:, None] * stride_q + (k * BK + offs_k)[None, :]\n", "")
    text = text.replace("    acc = tl.zeros", "    p_q = q + offs_m[:, None] * stride_q + offs_k[None, :]\n"
                        "    q += 8\n    acc = tl.zeros").replace("        acc = tl.dot(a, b, acc)\n",
                                                                "        acc = tl.dot(a, b, acc)\n        p_q += BK\n")
    text = text.replace("a = tl.load(p_q)", "a = tl.load(p_q, mask=None)")
    fn, loop, pointers, _ = _loop_tiles(text.replace("b = tl.load(p_w)", "b = tl.load(p_w, mask=None)"))
    assert run_time_alignment(fn, pointers["a"], None, loop) is None
    fn, loop, pointers, _ = _loop_tiles(text.replace("    q += 8\n", "").replace(
        "b = tl.load(p_w)", "b = tl.load(p_w, mask=None)"))
    assert run_time_alignment(fn, pointers["a"], None, loop) == ("q", ())
    # ... nor one moved after a tile the loop's addresses are made from (`q_rows`, then `p_q = q_rows + ...`)
    rows = MOVED_KERNEL.replace("    acc = tl.zeros", "    q_rows = q + offs_m[:, None] * stride_q\n"
                                "    q += tl.load(offsets + pid + 1)\n    acc = tl.zeros").replace(
        "p_q = q + offs_m[:, None] * stride_q + ", "p_q = q_rows + ")
    fn, loop, pointers, _ = _loop_tiles(rows.replace("a = tl.load(p_q)", "a = tl.load(p_q, mask=None)").replace(
        "b = tl.load(p_w)", "b = tl.load(p_w, mask=None)"))
    assert run_time_alignment(fn, pointers["a"], None, loop) is None
    kept = translate_source(rows, "k.py", get_target("gfx950")).functions[0]
    assert not kept.pipelined and "addressed from `q` moved by an offset no launch vouches for" in kept.kept_reason


@pytest.mark.slow
def test_the_moved_base_variant_compiles(tmp_path: Path) -> None:
    source = tmp_path / "k.py"
    source.write_text(MOVED_KERNEL, encoding="utf-8")
    values = ["-v", "q=*fp16", "-v", "w=*fp16", "-v", "o=*fp32", "-v", "offsets=*i64", "-v", "K=i32",
              "-v", "stride_q=i32", "-v", "stride_w=i32", "-v", "BM=128", "-v", "BN=128", "-v", "BK=64",
              "-v", "num_warps=8"]
    done = subprocess.run([sys.executable, "-m", "transpile", "verify", str(source), "-t", "gfx950,gfx942", "--isa",
                           *values], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("pipelined") == 2 and "does not compile" not in done.stdout
