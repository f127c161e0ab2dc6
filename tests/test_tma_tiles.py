"""sm90: pointer GEMMs read through TMA descriptors (transpile.passes.tma_tiles, the engine's launcher).

The analysis rewrites a pointer GEMM kernel, in Triton, into a descriptor GEMM: the tests check the rewritten text
for each way public code writes the tiles (advanced after the loads, recomputed from the loop variable, written into
the load, wrapped rows, a split-K range), its refusals, and what the variant holds: the Gluon kernel, the source
kernel byte for byte under another name, and the launcher that picks one per launch (its checks run here on
stand-in tensors; which kernel computes what is checked on the GPU by tests/gpu/check_fixtures.py).
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

from transpile.passes import tma_tiles
from transpile.passes.canonical import canonicalize
from transpile.discover import discover
from transpile.engine import format_results, translate_source
from transpile.source import parse_source
from transpile.targets import get_target

ROOT = Path(__file__).resolve().parents[1]
SM90 = get_target("sm90")

HEADER = "import torch\nimport triton\nimport triton.language as tl\n\n\n"
AUTOTUNE = (
    "@triton.autotune(configs=[triton.Config({'BM': 128, 'BN': 128, 'BK': 64}, num_warps=8, num_stages=3)],"
    " key=['M', 'N', 'K'])\n"
)
SIGNATURE = (
    "@triton.jit\n"
    "def gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,\n"
    "         BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):\n"
    "    pid_m = tl.program_id(0)\n"
    "    pid_n = tl.program_id(1)\n"
)
LAUNCH = (
    "\n\ndef matmul(a, b):\n"
    "    M, K = a.shape\n    N = b.shape[1]\n"
    "    c = torch.empty((M, N), device=a.device, dtype=a.dtype)\n"
    "    grid = lambda META: (triton.cdiv(M, META['BM']), triton.cdiv(N, META['BN']))\n"
    "    gemm[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))\n"
    "    return c\n"
)

ADVANCED = textwrap.indent(textwrap.dedent("""\
    offs_m = (pid_m * BM + tl.arange(0, BM)) % M
    offs_n = (pid_n * BN + tl.arange(0, BN)) % N
    offs_m = tl.max_contiguous(tl.multiple_of(offs_m, BM), BM)
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + (offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BK * stride_ak
        b_ptrs += BK * stride_bk
    offs_cm = pid_m * BM + tl.arange(0, BM)
    offs_cn = pid_n * BN + tl.arange(0, BN)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    tl.store(c_ptrs, acc.to(tl.float16), mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))
"""), "    ")

RECOMPUTED = textwrap.indent(textwrap.dedent("""\
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        kk = k + offs_k
        a_mask = (offs_m[:, None] < M) & (kk[None, :] < K)
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + kk[None, :] * stride_ak, mask=a_mask, other=0.0)
        b = tl.load(b_ptr + kk[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(kk[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
"""), "    ")


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
    return text[text.index("def gemm"):text.index("\n\n\ndef matmul") if "def matmul" in text else None]


def test_advanced_tiles_become_descriptor_loads_and_the_masked_store_a_descriptor_store() -> None:
    conversion, refusals = _convert(HEADER + SIGNATURE + ADVANCED)
    assert conversion is not None, refusals
    kernel = _kernel_text(conversion)
    # The masks give the bounds; the rows that wrap (`% M`) are bounded by M.
    assert ("a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], "
            "block_shape=[BM, BK])") in kernel
    assert ("b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1], "
            "block_shape=[BK, BN])") in kernel
    # The advance `a_ptrs += BK * stride_ak` is the column coordinate `k * BK`.
    assert "a = a_desc.load([pid_m * BM, k * BK])" in kernel
    assert "b = b_desc.load([k * BK, pid_n * BN])" in kernel
    assert "c_desc.store([pid_m * BM, pid_n * BN], acc.to(tl.float16))" in kernel
    # The pointer tiles, their index vectors and the advances are gone; nothing reads them.
    for gone in ("a_ptrs", "b_ptrs", "offs_k", "offs_m", "c_ptrs", "tl.load", "tl.store"):
        assert gone not in kernel, gone
    dispatch = conversion.dispatch["gemm"]
    assert [(t.param, t.row_stride, t.unit_stride, t.load) for t in dispatch.tiles] == [
        ("a_ptr", "stride_am", "stride_ak", True), ("b_ptr", "stride_bk", "stride_bn", True),
        ("c_ptr", "stride_cm", "stride_cn", False)]


def test_tiles_recomputed_from_the_loop_variable_take_it_as_their_coordinate() -> None:
    conversion, refusals = _convert(HEADER + SIGNATURE + RECOMPUTED)
    assert conversion is not None, refusals
    kernel = _kernel_text(conversion)
    assert "a = a_desc.load([pid_m * BM, k])" in kernel  # `range(0, K, BK)`: k is the element offset
    assert "b = b_desc.load([k, pid_n * BN])" in kernel
    assert "shape=[M, K]" in kernel and "shape=[K, N]" in kernel
    assert "kk = " not in kernel and "a_mask" not in kernel


def test_a_split_k_range_bounds_the_descriptor_by_the_range_end() -> None:
    body = RECOMPUTED.replace("    for k in range(0, K, BK):", "    k_end = min(pid_n * 64 + 64, K)\n"
                              "    for k in tl.range(pid_n * 64, k_end, BK):").replace("< K)", "< k_end)")
    conversion, refusals = _convert(HEADER + SIGNATURE + body)
    assert conversion is not None, refusals
    assert "shape=[M, k_end]" in _kernel_text(conversion)


@pytest.mark.parametrize(("change", "reason"), [
    # Rows gathered through an index tensor: not a rectangle of the tensor.
    (("offs_m = pid_m * BM + tl.arange(0, BM)", "offs_m = tl.load(c_ptr + pid_m * BM + tl.arange(0, BM))"),
     "not a sum of a start and `tl.arange(0, BLOCK)`"),
    # Rows neither masked nor wrapped: the descriptor would not know the tensor's extent.
    (("(offs_m[:, None] < M) & (kk[None, :] < K)", "kk[None, :] < K"), "neither masked nor wrapped"),
    # A mask that is not a bound.
    (("(offs_m[:, None] < M) & (kk[None, :] < K)", "(offs_m[:, None] < M) & (kk[None, :] != 3)"),
     "not `index < bound`"),
])
def test_refusals_name_what_a_descriptor_cannot_read(change: tuple[str, str], reason: str) -> None:
    old, new = change
    assert old in RECOMPUTED
    conversion, refusals = _convert(HEADER + SIGNATURE + RECOMPUTED.replace(old, new))
    assert conversion is None
    assert reason in refusals["gemm"]


def test_wrapped_rows_are_refused_when_the_epilogue_reduces_across_the_tile() -> None:
    body = ADVANCED.replace("    offs_cm = ", "    acc = acc - tl.max(acc, axis=0)[None, :]\n    offs_cm = ")
    conversion, refusals = _convert(HEADER + SIGNATURE + body)
    assert conversion is None and "wrap" in refusals["gemm"]


def _translate(text: str):
    result = translate_source(text, "k.py", SM90)
    format_results([result])
    return result


def test_an_autotuned_kernel_gets_the_gluon_kernel_the_source_kernel_and_the_launcher() -> None:
    source = HEADER + AUTOTUNE + SIGNATURE + ADVANCED + LAUNCH
    result = _translate(source)
    outcome = next(o for o in result.functions if o.name == "gemm")
    assert outcome.translated and outcome.pipelined and outcome.dispatch is not None
    text = result.text
    assert "@gluon.jit\ndef gemm(" in text
    assert "_tma_async_load(" in text  # the TMA ring
    assert "gemm = _TMAOrTriton(" in text and "    _gemm_triton,\n" in text
    # The source kernel, byte for byte but for its name.
    original = source[source.index("@triton.autotune"):source.index("\n\n\ndef matmul")]
    copy = original.replace("def gemm(", "def _gemm_triton(")
    formatted = _translate_formatted_source(copy)
    assert formatted in text
    # The host code launches `gemm[grid]` as before: the launcher applies the persistent grid itself.
    assert "    gemm[grid](" in text
    notes = [d for d in result.diagnostics if d.code == "TT042"]
    assert notes and notes[0].line == source[:source.index("    for k in")].count("\n") + 1


def _translate_formatted_source(code: str) -> str:
    """`code` laid out as the variant lays out the kept kernel (ruff at 88 columns)."""
    from transpile.formatting import format_texts

    return format_texts([HEADER + code + "\n"], None)[0][len(HEADER):].rstrip("\n")


def test_a_kernel_without_autotune_configs_is_kept_as_written_with_a_note() -> None:
    source = HEADER + SIGNATURE + ADVANCED + LAUNCH
    result = _translate(source)
    outcome = next(o for o in result.functions if o.name == "gemm")
    assert not outcome.translated and outcome.dispatch is None
    assert "_TMAOrTriton" not in result.text and "tl.make_tensor_descriptor" not in result.text
    notes = [d for d in outcome.diagnostics if d.code == "TT042"]
    assert notes and "warp-specialised ring" in notes[0].message
    # Diagnostics point at the source's lines, not at the rewritten text's.
    loop_line = source[:source.index("    for k in")].count("\n") + 1
    assert {d.line for d in outcome.diagnostics if d.code in ("TT041", "TT042")} == {loop_line}


class _Tensor:
    def __init__(self, address: int, size: int = 2) -> None:
        self.address, self.size = address, size

    def data_ptr(self) -> int:
        return self.address

    def element_size(self) -> int:
        return self.size


class _Kernel:
    """Stands in for a compiled kernel: records the launches the launcher gives it."""

    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.log.append((self.name, grid))


def _launcher(tmp_path: Path):
    result = _translate(HEADER + AUTOTUNE + SIGNATURE + ADVANCED + LAUNCH)
    path = tmp_path / "variant_sm90.py"
    path.write_text(result.text)
    spec = importlib.util.spec_from_file_location("variant_tma_launcher", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)  # imports triton and gluon; compiles nothing
    return module


@pytest.mark.parametrize(("a", "stride_am", "stride_ak", "expected"), [
    (_Tensor(4096), 704, 1, "gluon"),
    (_Tensor(4096), 700, 1, "triton"),  # rows of 1400 bytes: not 16-byte aligned
    (_Tensor(4104), 704, 1, "triton"),  # base address not 16-byte aligned
    (_Tensor(4096), 704, 2, "triton"),  # inner stride not 1
    (_Tensor(4096, size=4), 704, 1, "triton"),  # fp32 operands: the ring pipelines 16-bit ones
])
def test_the_launcher_runs_the_gluon_kernel_only_where_the_descriptors_can_address_the_tiles(
        tmp_path: Path, a, stride_am: int, stride_ak: int, expected: str) -> None:
    module = _launcher(tmp_path)
    log: list = []
    launcher = module.gemm
    launcher.gluon_kernel, launcher.triton_kernel = _Kernel("gluon", log), _Kernel("triton", log)
    b, c = _Tensor(8192), _Tensor(16384)
    grid = (8, 8)
    launcher[grid](a, b, c, 1000, 1104, 704, stride_am, stride_ak, 1104, 1, 1104, 1)
    assert [name for name, _ in log] == [expected]
    if expected == "gluon":  # the persistent form's grid: a function of the config, not the source's tuple
        assert callable(log[0][1])
    else:
        assert log[0][1] == grid


# Values that change where the rewrite would read them once (found in review): each is refused, with its reason.
@pytest.mark.parametrize(("body", "reason"), [
    # An index vector advanced after the loads: the tiles move although no pointer tile is advanced.
    (RECOMPUTED.replace("        kk = k + offs_k\n", "        kk = offs_k\n").replace(
        "        acc = tl.dot(a, b, acc)\n", "        acc = tl.dot(a, b, acc)\n        offs_k = offs_k + BK\n"),
     "`offs_k` changes in the loop"),
    # A parameter reassigned after the index vector was built from it.
    (RECOMPUTED.replace("    offs_n = pid_n * BN + tl.arange(0, BN)\n",
                        "    offs_n = pid_n * BN + tl.arange(0, BN)\n    pid_m = pid_m + 1\n").replace(
        "    pid_m = tl.program_id(0)\n", ""), "reassigned"),
    # A mask bound computed in the loop: the descriptor is made before it.
    (RECOMPUTED.replace("        kk = k + offs_k\n", "        kk = k + offs_k\n        k_end = tl.minimum(k + BK, K)\n")
     .replace("(kk[None, :] < K)", "(kk[None, :] < k_end)"), "depends on the loop variable"),
    # Wrapped rows and an epilogue that reduces across them (a method call).
    (ADVANCED.replace("    offs_cm = ", "    acc = acc - acc.max(axis=0)[None, :]\n    offs_cm = "), "wrap around"),
    # A per-column tensor as a bound.
    (RECOMPUTED.replace("(offs_n[None, :] < N)", "(offs_n[None, :] < tl.load(c_ptr + offs_n)[None, :])"),
     "used as a coordinate or bound"),
])
def test_values_that_change_where_the_rewrite_reads_them_are_refused(body: str, reason: str) -> None:
    signature = SIGNATURE if "pid_m = tl.program_id(0)" in body else SIGNATURE.replace(
        "    pid_m = tl.program_id(0)\n", "").replace("BK: tl.constexpr):", "BK: tl.constexpr, pid_m=0):")
    conversion, refusals = _convert(HEADER + signature + body)
    assert conversion is None, _kernel_text(conversion)
    assert reason in refusals["gemm"]


def test_a_store_of_something_else_than_the_accumulator_stays_a_pointer_store() -> None:
    """A broadcast row stored over the tile is not the tile a descriptor store writes: the loads are rewritten, the
    store stays as written."""
    body = RECOMPUTED.replace("    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc,",
                              "    bias = tl.load(c_ptr + offs_n)\n"
                              "    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,"
                              " bias[None, :],")
    conversion, refusals = _convert(HEADER + SIGNATURE + body)
    assert conversion is not None, refusals
    kernel = _kernel_text(conversion)
    assert "a_desc.load(" in kernel and "tl.store(" in kernel and "c_desc" not in kernel


def test_the_source_kernel_copy_calls_copies_of_its_jit_helpers() -> None:
    """The variant's helpers are Gluon (the Gluon kernel calls them); the source kernel's copy calls Triton copies."""
    helper = "@triton.jit\ndef _relu(x):\n    return tl.maximum(x, 0.0)\n\n\n"
    body = RECOMPUTED.replace("offs_n[None, :] * stride_cn, acc,", "offs_n[None, :] * stride_cn, _relu(acc),")
    assert body != RECOMPUTED
    result = _translate(HEADER + helper + AUTOTUNE + SIGNATURE + body + LAUNCH)
    outcome = next(o for o in result.functions if o.name == "gemm")
    assert outcome.dispatch is not None and outcome.dispatch.helpers == ("_relu",)
    text = result.text
    assert "@gluon.jit\ndef _relu(x):" in text  # the Gluon kernel's
    assert "@triton.jit\ndef _relu_triton(x):\n    return tl.maximum(x, 0.0)" in text
    copy = text[text.index("def _gemm_triton("):text.index("gemm = _TMAOrTriton(")]
    assert "_relu_triton(acc)" in copy and "_relu(acc)" not in copy.replace("_relu_triton(acc)", "")


def test_wrapped_rows_are_refused_when_the_epilogue_calls_a_helper() -> None:
    helper = "@triton.jit\ndef _relu(x):\n    return tl.maximum(x, 0.0)\n\n\n"
    body = ADVANCED.replace("tl.store(c_ptrs, acc.to(tl.float16)", "tl.store(c_ptrs, _relu(acc).to(tl.float16)")
    conversion, refusals = _convert(HEADER + helper + SIGNATURE + body)
    assert conversion is None and "wrap" in refusals["gemm"]


def test_the_launcher_can_be_copied(tmp_path: Path) -> None:
    """`copy`/`pickle` make the object without `__init__`: attribute look-ups must not recurse."""
    import copy

    module = _launcher(tmp_path)
    clone = copy.copy(module.gemm)
    assert clone.gluon_kernel is module.gemm.gluon_kernel and clone.triton_kernel is module.gemm.triton_kernel
    assert module.gemm.configs == module.gemm.gluon_kernel.configs  # the Gluon kernel's autotune table


# ---- Copies of the loop under an `if` (the unswitch pass's, one per value of a flag) and bases moved per batch ----

FLAG_SIGNATURE = SIGNATURE.replace("BK: tl.constexpr):", "BK: tl.constexpr, EVEN_K: tl.constexpr, SCALED: tl.constexpr):")
COPIES = textwrap.indent(textwrap.dedent("""\
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + (offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    if EVEN_K:
        for k in range(0, tl.cdiv(K, BK)):
            a = tl.load(a_ptrs, mask=offs_m[:, None] < M, other=0.0)
            b = tl.load(b_ptrs, mask=offs_n[None, :] < N, other=0.0)
            acc += tl.dot(a, b)
            a_ptrs += BK * stride_ak
            b_ptrs += BK * stride_bk
    else:
        for k in range(0, tl.cdiv(K, BK)):
            a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k * BK), other=0.0)
            b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BK) & (offs_n[None, :] < N), other=0.0)
            acc += tl.dot(a, b)
            a_ptrs += BK * stride_ak
            b_ptrs += BK * stride_bk
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
"""), "    ")


def test_copies_that_differ_in_their_masks_alone_become_one_descriptor_loop() -> None:
    """The copy for `EVEN_K` leaves K unmasked; the other copy's mask gives its extent. Read through descriptors the
    copies are the same loop, which replaces the `if`."""
    conversion, refusals = _convert(HEADER + FLAG_SIGNATURE + COPIES)
    assert conversion is not None, refusals
    kernel = _kernel_text(conversion)
    assert "if EVEN_K" not in kernel and kernel.count("for k in range") == 1, kernel
    assert "shape=[M, K]" in kernel and "shape=[K, N]" in kernel
    assert "a = a_desc.load([pid_m * BM, k * BK])" in kernel
    assert "a_ptrs" not in kernel and "offs_k" not in kernel and "tl.load" not in kernel
    assert [t.param for t in conversion.dispatch["gemm"].tiles] == ["a_ptr", "b_ptr", "c_ptr"]


def test_copies_that_compute_differently_keep_their_if_each_copy_rewritten() -> None:
    body = COPIES.replace("    else:\n        for k", "    elif SCALED:\n        for k").replace(
        "            acc += tl.dot(a, b)\n            a_ptrs += BK * stride_ak\n            b_ptrs += BK * stride_bk\n"
        "    tl.store", "            acc += tl.dot(a * 2.0, b)\n            a_ptrs += BK * stride_ak\n"
        "            b_ptrs += BK * stride_bk\n    tl.store")
    assert "elif SCALED" in body and "a * 2.0" in body
    conversion, refusals = _convert(HEADER + FLAG_SIGNATURE + body)
    assert conversion is not None, refusals
    kernel = _kernel_text(conversion)
    # (no `else`: a launch with neither flag runs no loop, so the copies stay under their tests)
    assert "if EVEN_K:" in kernel and "elif SCALED:" in kernel and kernel.count("for k in range") == 2
    assert kernel.count("a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K]") == 2
    assert "tl.load" not in kernel and "a_ptrs" not in kernel


def test_a_copy_no_other_copy_gives_an_extent_is_refused_with_its_reason() -> None:
    body = COPIES.replace("mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k * BK)", "mask=offs_k[None, :] < K - k * BK")
    body = body.replace("a = tl.load(a_ptrs, mask=offs_m[:, None] < M, other=0.0)", "a = tl.load(a_ptrs)")
    conversion, refusals = _convert(HEADER + FLAG_SIGNATURE + body)
    assert conversion is None and "rows of `a` are neither masked nor wrapped" in refusals["gemm"]


def test_a_branch_with_two_dot_loops_is_refused() -> None:
    loop = COPIES[COPIES.index("        for k"):COPIES.index("    else:")]
    body = COPIES.replace("    else:\n", "    else:\n" + loop.replace("        for k", "        for k2"), 1)
    conversion, refusals = _convert(HEADER + FLAG_SIGNATURE + body)
    assert conversion is None and "one loop per branch" in refusals["gemm"]


MOVED = RECOMPUTED.replace("    offs_m = pid_m", "    pid_b = tl.program_id(2)\n    a_ptr += pid_b * stride_ab\n"
                           "    b_ptr += pid_b * K * N\n    c_ptr += pid_b * stride_cb\n    offs_m = pid_m", 1)
MOVED_SIGNATURE = SIGNATURE.replace("stride_cn,\n", "stride_cn, stride_ab, stride_cb,\n")


def test_bases_moved_before_the_loop_are_read_as_moved_and_their_steps_checked_by_the_launcher() -> None:
    """`a_ptr += pid_b * stride_ab` (a batch's matrix): the descriptor starts at the moved base; the launcher
    checks the parameter that scales each move for 16-byte alignment, as it does an offset in the address."""
    conversion, refusals = _convert(HEADER + MOVED_SIGNATURE + MOVED)
    assert conversion is not None, refusals
    kernel = _kernel_text(conversion)
    assert "a_ptr += pid_b * stride_ab" in kernel
    assert "a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K]" in kernel
    tiles = {t.param: t.offsets for t in conversion.dispatch["gemm"].tiles}
    assert tiles == {"a_ptr": ("stride_ab",), "b_ptr": ("K",), "c_ptr": ("stride_cb",)}


def test_a_base_read_before_it_is_moved_is_refused() -> None:
    body = MOVED.replace("    a_ptr += pid_b * stride_ab\n", "    first = tl.load(a_ptr)\n    a_ptr += pid_b * stride_ab\n")
    conversion, refusals = _convert(HEADER + MOVED_SIGNATURE + body)
    assert conversion is None and "base is not a pointer parameter" in refusals["gemm"]


def test_a_flagged_batched_gemm_is_pipelined_through_descriptors_with_full_precision_asked() -> None:
    """The engine's whole path on FlagGems' style (suite_bmm_divisible): moved bases, the unswitch pass's eight
    copies, `allow_tf32=False` (the launcher runs launches whose tiles are not 16-bit on the source kernel)."""
    path = ROOT / "fixtures" / "suite_bmm_divisible.py"
    result = _translate(path.read_text())
    outcome = next(o for o in result.functions if o.name == "bmm_divisible_kernel")
    assert outcome.translated and outcome.pipelined and outcome.dispatch is not None
    assert [(t.param, t.offsets) for t in outcome.dispatch.tiles if t.load] == [("A", ("M",)), ("B", ("K",))]
    kernel = result.text[result.text.index("def bmm_divisible_kernel("):result.text.index("def _bmm_divisible_kernel_triton(")]
    assert "if DIVISIBLE_K" not in kernel and "warp_specialize" in kernel


def test_a_tile_order_picked_under_a_flag_and_cache_hints_are_read_through() -> None:
    """`pid_m, pid_n` bound in both branches of an `if` before the loop (scalars: no tensor made there) are the
    coordinates' scalars as they stand; a cache hint on a load is a hint, which a TMA copy does without."""
    body = RECOMPUTED.replace("    offs_m = pid_m * BM", "    if BM == 64:\n        tile_m, tile_n = pid_n, pid_m\n"
                              "    else:\n        tile_m, tile_n = tl.swizzle2d(pid_m, pid_n, 8, 8, 4)\n"
                              "    offs_m = tile_m * BM", 1).replace("offs_n = pid_n * BN", "offs_n = tile_n * BN")
    body = body.replace("mask=a_mask, other=0.0)", "mask=a_mask, other=0.0, cache_modifier='.cg')")
    assert "tile_n * BN" in body and "cache_modifier" in body
    conversion, refusals = _convert(HEADER + SIGNATURE + body)
    assert conversion is not None, refusals
    kernel = _kernel_text(conversion)
    assert "a = a_desc.load([tile_m * BM, k])" in kernel and "cache_modifier" not in kernel
    # ... but not a tensor bound so (an index vector is no coordinate)
    tensor = body.replace("tile_m, tile_n = pid_n, pid_m", "tile_m, tile_n = tl.arange(0, 2), pid_m")
    conversion, refusals = _convert(HEADER + SIGNATURE + tensor)
    assert conversion is None and "assigned in a branch" in refusals["gemm"]


def test_index_vectors_picked_under_a_flag_before_the_loop_are_read_as_one_descriptor_loop() -> None:
    """aiter's basic GEMM: `if EVEN_MN:` unmasked offsets, else wrapped ones (`% M`). The code after the `if` is
    rewritten once for each branch; read through descriptors (extent M from the wrapped copy) both are one loop."""
    signature = FLAG_SIGNATURE.replace("EVEN_K: tl.constexpr", "EVEN_MN: tl.constexpr")
    body = ADVANCED.replace(
        "    offs_m = (pid_m * BM + tl.arange(0, BM)) % M\n    offs_n = (pid_n * BN + tl.arange(0, BN)) % N\n"
        "    offs_m = tl.max_contiguous(tl.multiple_of(offs_m, BM), BM)\n",
        "    if EVEN_MN:\n        offs_m = pid_m * BM + tl.arange(0, BM)\n        offs_n = pid_n * BN + tl.arange(0, BN)\n"
        "    else:\n        offs_m = (pid_m * BM + tl.arange(0, BM)) % M\n        offs_n = (pid_n * BN + tl.arange(0, BN)) % N\n")
    assert "if EVEN_MN" in body
    conversion, refusals = _convert(HEADER + signature + body)
    assert conversion is not None, refusals
    kernel = _kernel_text(conversion)
    assert "if EVEN_MN" not in kernel and kernel.count("for k in range") == 1
    assert "shape=[M, K]" in kernel and "shape=[K, N]" in kernel and "offs_m" not in kernel
    # Branches that read other tensors stay as written, with the reason the loop first gave.
    other = body.replace("        offs_n = pid_n * BN + tl.arange(0, BN)\n",
                         "        offs_n = pid_n * BN + tl.arange(0, BN)\n        a_ptr = b_ptr\n", 1)
    conversion, refusals = _convert(HEADER + signature + other)
    assert conversion is None and "gemm" in refusals
