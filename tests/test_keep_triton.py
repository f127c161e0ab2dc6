"""Never slower by default: kernels whose dot loop is not pipelined on a target, and refused kernels, are kept as
Triton in the variant (byte for byte, under a comment and a TT041 note); `--gluon-always` emits Gluon anyway."""

from __future__ import annotations

import re
import tempfile
import textwrap
from pathlib import Path

import pytest

from transpile.engine import translate_source
from transpile.rules.base import WARPGROUP_TEST
from transpile.targets import get_target

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

# A dot in a `tl.static_range` loop: no pipeline rule takes it, on any target.
UNROLLED = textwrap.dedent('''\
    import triton
    import triton.language as tl


    @triton.jit
    def _scale(x, s):
        return x * s


    @triton.jit
    def unrolled_gemm(a_ptr, b_ptr, c_ptr, s, K: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        acc = tl.zeros([BLOCK, BLOCK], dtype=tl.float32)
        for k in tl.static_range(0, K, BLOCK):  # unrolled: Triton schedules it itself
            a = tl.load(a_ptr + offs[:, None] * K + (k + offs)[None, :])
            b = tl.load(b_ptr + (k + offs)[:, None] * BLOCK + offs[None, :])
            acc += tl.dot(a, b)
        tl.store(c_ptr + offs[:, None] * BLOCK + offs[None, :], _scale(acc, s).to(tl.float16))


    @triton.jit
    def double(x_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 2)
    ''')


def _function_text(text: str, name: str) -> str:
    start = text.index(f"@triton.jit\ndef {name}(")
    end = text.find("\n\n\n", start)
    return text[start:end if end != -1 else len(text)].rstrip()


@pytest.mark.parametrize("target", ["gfx942", "gfx950", "gfx1250", "sm90"])
def test_unpipelined_dot_loop_kernel_is_kept_byte_for_byte(target: str) -> None:
    result = translate_source(UNROLLED, "k.py", get_target(target))
    outcomes = {f.name: f for f in result.functions}
    assert not outcomes["unrolled_gemm"].translated and outcomes["double"].translated
    # the helper used only by the kept kernel stays Triton with it (Gluon cannot call Triton and vice versa)
    assert not outcomes["_scale"].translated
    assert _function_text(UNROLLED, "unrolled_gemm") in result.text
    assert _function_text(UNROLLED, "_scale") in result.text
    assert "@gluon.jit\ndef double(" in result.text
    assert "# kept as Triton: `_scale`, `unrolled_gemm`" in result.text or \
        "# kept as Triton: `unrolled_gemm`, `_scale`" in result.text
    notes = [d for d in outcomes["unrolled_gemm"].diagnostics if d.code == "TT041"]
    assert notes and notes[0].line == UNROLLED.splitlines().index(
        "    for k in tl.static_range(0, K, BLOCK):  # unrolled: Triton schedules it itself") + 1
    assert f"not pipelined for {target}" in notes[0].message
    compile(result.text, "k_variant.py", "exec")


def test_gluon_always_emits_the_translation() -> None:
    result = translate_source(UNROLLED, "k.py", get_target("gfx942"), gluon_always=True)
    assert all(f.translated for f in result.functions)
    assert "@triton.jit" not in result.text and "def unrolled_gemm(" in result.text


def test_gluon_always_config_key(tmp_path: Path, cli) -> None:
    (tmp_path / "k.py").write_text(UNROLLED, encoding="utf-8")
    result = cli("k.py", "-t", "gfx942")
    assert result.exit_code == 0
    assert "@triton.jit\ndef unrolled_gemm(" in (tmp_path / "k_gfx942.py").read_text()
    (tmp_path / "pyproject.toml").write_text('[tool.triton-transpile]\ngluon-always = true\n', encoding="utf-8")
    result = cli("k.py", "-t", "gfx942")
    assert result.exit_code == 0
    variant = (tmp_path / "k_gfx942.py").read_text()
    assert "@triton.jit" not in variant and "@gluon.jit\ndef unrolled_gemm(" in variant


def test_explain_says_kept(tmp_path: Path, cli) -> None:
    (tmp_path / "k.py").write_text(UNROLLED, encoding="utf-8")
    result = cli("explain", "k.py", "-t", "sm90")
    assert result.exit_code == 0
    assert "kernel `unrolled_gemm` for sm90: kept as Triton" in result.stdout
    assert "kernel `double` for sm90: translated" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("target", ["gfx942", "sm90"])
def test_kept_variant_compiles(target: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from transpile.verify import verify

    result = translate_source(UNROLLED, "k.py", get_target(target))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    compiled = verify(result, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "x_ptr": "*fp32", "s": "fp32",
                               "K": 128, "BLOCK": 64}, all_configs=True)
    assert sorted(c.kernel for c in compiled) == ["_double_triton", "double", "unrolled_gemm"]
    assert all(c.ok for c in compiled), [c.message for c in compiled]
    kept = {c.kernel: c.kept for c in compiled}
    # `double` has no dot loop: its source kernel is kept too, for launches with unaligned rows
    assert kept == {"_double_triton": True, "double": False, "unrolled_gemm": True}
    assert all(c.asm.get("ttgir") for c in compiled)


UNSEEN_HEAD = "import os\n\nimport triton\nimport triton.language as tl\nfrom mylib.ops import safe_dot\n\n"
UNSEEN_KERNEL = '''

@triton.jit
def k(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs[:, None] * BLOCK + offs[None, :])
    b = tl.load(b_ptr + offs[:, None] * BLOCK + offs[None, :])
    c = CALL(a, b)
    tl.store(c_ptr + offs[:, None] * BLOCK + offs[None, :], c)
'''
CONDITIONAL = '''if os.environ.get("FAST") == "1":
    @triton.jit
    def mm(a, b):
        return tl.dot(a, b, allow_tf32=False)
else:
    @triton.jit
    def mm(a, b):
        return tl.dot(a, b)
'''


@pytest.mark.parametrize("call, defined, how", [
    ("mm", CONDITIONAL, "defined under a module-level `if`/`try`/`with`"),
])
def test_kernel_calling_a_dot_helper_the_tool_does_not_translate_is_kept_as_triton(
        call: str, defined: str, how: str, tmp_path: Path) -> None:
    """A helper defined under a module-level `if` that runs a dot: the Gluon kernel calling that Triton code did not
    compile. The kernel is kept as Triton with a TT010 at the call. (A helper imported from another module is copied
    into the variant: tests/test_imported_helpers.py.)"""
    (tmp_path / "mylib").mkdir()
    (tmp_path / "mylib" / "ops.py").write_text("import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
                                               "def safe_dot(a, b):\n    return tl.dot(a, b)\n\n\n@triton.jit\n"
                                               "def exp2(x):\n    return tl.exp2(x)\n")
    path = str(tmp_path / "kernels.py")
    text = UNSEEN_HEAD + defined + UNSEEN_KERNEL.replace("CALL", call)
    for target in ("sm90", "gfx942"):
        result = translate_source(text, path, get_target(target))
        kernel = next(f for f in result.functions if f.name == "k")
        assert not kernel.translated, result.text
        assert f"`{call}` is {how}" in kernel.kept_reason
        assert "@triton.jit\ndef k(" in result.text


def test_a_combine_function_the_tool_does_not_translate_keeps_its_scan_as_triton(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A scan's or `tl.reduce`'s combine function (here imported from another module, and copied into the variant)
    whose body makes a tensor of its own (`tl.zeros_like`): Gluon runs it on the scan's scalar elements, where that
    does not compile ("full() missing ... layout"; found by compiling public code). Such a kernel is kept as Triton
    with a TT010 at the argument; an elementwise combine function imported the same way stays callable."""
    (tmp_path / "combine.py").write_text(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef add_relu(a, b):\n"
        "    return tl.maximum(a + b, tl.zeros_like(a))\n\n\n@triton.jit\ndef last(a, b):\n"
        "    return tl.where(b != 0, b, a)\n")
    head = "import triton\nimport triton.language as tl\nfrom combine import add_relu, last\n\n\n"
    body = ("@triton.jit\ndef k(x_ptr, y_ptr, BLOCK: tl.constexpr):\n    offs = tl.arange(0, BLOCK)\n"
            "    x = tl.load(x_ptr + offs)\n    tl.store(y_ptr + offs, CALL)\n")
    for call, kept in (("tl.associative_scan(x, 0, add_relu)", True), ("tl.reduce(x, 0, add_relu) + offs", True),
                       ("tl.associative_scan(x, 0, last)", False)):
        result = translate_source(head + body.replace("CALL", call), str(tmp_path / "kernels.py"), get_target("sm90"))
        kernel = next(f for f in result.functions if f.name == "k")
        assert kernel.translated is not kept, (call, kernel.kept_reason)
        if kept:
            assert "`add_relu`, the combine function here, does more than elementwise math" in kernel.kept_reason
        else:  # verify imports the variant with the source's directory on the path, as running it next to it does
            from transpile.verify import verify

            monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
            compiled = verify(result, {"x_ptr": "*fp32", "y_ptr": "*fp32", "BLOCK": 64}, all_configs=True)
            assert compiled and all(c.ok for c in compiled), [c.message for c in compiled]


def test_elementwise_or_unfound_imported_helpers_stay_callable(tmp_path: Path) -> None:
    """An imported helper that only computes elementwise (`exp2`), or one whose module is not on disk, is called from
    the translated kernel as before (Gluon runs such Triton helpers on its tensors)."""
    (tmp_path / "mylib").mkdir()
    (tmp_path / "mylib" / "ops.py").write_text("import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
                                               "def exp2(x):\n    return tl.exp2(x)\n")
    kernel = ("import triton\nimport triton.language as tl\nfrom mylib.ops import exp2\nfrom elsewhere import f\n\n\n"
              "@triton.jit\ndef k(x_ptr, BLOCK: tl.constexpr):\n    offs = tl.arange(0, BLOCK)\n"
              "    tl.store(x_ptr + offs, f(exp2(tl.load(x_ptr + offs))))\n")
    result = translate_source(kernel, str(tmp_path / "kernels.py"), get_target("sm90"))
    assert result.functions[0].translated, result.functions[0].kept_reason


def test_name_the_source_never_defines_is_not_blamed_on_the_tool() -> None:
    """A kernel reading a name its own source never defines is kept as Triton (its translation could not compile
    either) and the reason says the source lacks it, not that the rewrite lost it."""
    text = ("import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(x_ptr, BLOCK: tl.constexpr):\n"
            "    offs = tl.arange(0, BLOCK)\n    acc += tl.load(x_ptr + offs)\n    tl.store(x_ptr + offs, acc)\n")
    kernel = translate_source(text, "x.py", get_target("sm90")).functions[0]
    assert not kernel.translated and kernel.kept_reason == "it reads `acc`, which its source never defines"


def test_a_while_k_loop_is_kept_with_a_reason_that_says_so():
    from test_amd_float8 import GEMM

    text = GEMM.replace("    for k in range(0, K, BK):\n", "    k = 0\n    while k < K:\n").replace(
        "        b_ptrs += BK * BN\n", "        b_ptrs += BK * BN\n        k += BK\n")
    assert "while k < K:" in text and "k += BK" in text
    for target in ("sm90", "gfx942"):
        result = translate_source(text, "w.py", get_target(target))
        assert not result.functions[0].translated
        assert any("a `while` loop: the pipeline rules take counted loops" in d.message for d in result.diagnostics)


FEW_WARPS = '''import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BT": 64}, num_warps=w) for w in [1, 2, 4]], key=["T"])
@triton.jit
def chunk_kernel(q, k, o, T, BT: tl.constexpr, BK: tl.constexpr):
    r = tl.arange(0, BT)
    c = tl.arange(0, BK)
    b_q = tl.load(q + r[:, None] * BK + c[None, :])
    b_k = tl.load(k + r[:, None] * BK + c[None, :])
    tl.store(o + r[:, None] * BT + r[None, :], tl.dot(b_q, tl.trans(b_k)))
'''


@pytest.mark.parametrize("configs, kept", [
    ('[triton.Config({"BT": 64}, num_warps=w) for w in [1, 2, 4]]', True),  # a comprehension over a list
    ('[triton.Config({"BT": 64}, num_warps=2)]', True),
    ('[triton.Config({"BT": 64}, num_warps=4), triton.Config({"BT": 64}, num_warps=8)]', False),
])
def test_sm90_dot_with_fewer_than_4_warps_is_kept_as_triton(configs: str, kept: bool) -> None:
    """wgmma takes a warpgroup: a config of 1 or 2 warps would not compile (Triton uses mma.sync there)."""
    text = FEW_WARPS.replace('[triton.Config({"BT": 64}, num_warps=w) for w in [1, 2, 4]]', configs)
    (outcome,) = translate_source(text, "k.py", get_target("sm90")).functions
    assert outcome.translated is not kept
    if kept:
        assert "takes a warpgroup of 4 warps" in outcome.kept_reason
    # AMD's MFMA layouts take any number of warps
    assert translate_source(text, "k.py", get_target("gfx950")).functions[0].translated


FEW_WARPS_LOOP = '''import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BM": 64}, num_warps=w) for w in [2, 4, 8]], key=["K"])
@triton.jit
def mm(a_ptr, b_ptr, c_ptr, K, stride_am, stride_bk, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + (k * BK + offs_k)[None, :])
        b = tl.load(b_ptr + (k * BK + offs_k)[:, None] * stride_bk + offs_n[None, :])
        acc += tl.dot(a, b) * 0.5
    tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc)
'''


def test_sm90_few_warps_and_a_loop_kept_at_any_warps_name_the_loop_first() -> None:
    """A kernel autotuned over 2, 4 and 8 warps whose loop no sm90 ring takes at any warp count: the loop's reason
    (what a user can change) comes first, the warp count after it."""
    (outcome,) = translate_source(FEW_WARPS_LOOP, "mm.py", get_target("sm90")).functions
    assert not outcome.translated
    loop, _, warps = outcome.kept_reason.partition("; besides, ")
    assert loop.startswith("the loop at line 12 is not pipelined for sm90 (the dot's result is scaled"), loop
    assert "runs 2 warps" in warps and "takes a warpgroup of 4 warps" in warps


def test_sm90_pipelined_kernel_with_some_2_warp_configs_runs_those_on_the_source() -> None:
    """A descriptor GEMM (pipelined on sm90) whose autotune table also has 2-warp configs: translated, its launcher
    tests each config's and launch's warps (`num_warps < 4` runs the source kernel); with every config under 4 warps
    nothing could run the wgmma and the kernel is kept, the warps named."""
    text = (FIXTURES / "suite_gemm_small_warps.py").read_text(encoding="utf-8")
    (outcome,) = translate_source(text, "k.py", get_target("sm90")).functions
    assert outcome.translated and outcome.pipelined
    assert WARPGROUP_TEST in outcome.dispatch.source_when
    few = re.sub(r"num_warps=[48]", "num_warps=2", text)
    (outcome,) = translate_source(few, "k.py", get_target("sm90")).functions
    assert not outcome.translated and "runs 2 warps" in outcome.kept_reason
    assert "takes a warpgroup of 4 warps" in outcome.kept_reason


def test_sm90_configs_built_by_a_function_are_read_for_their_warps() -> None:
    """The matmul tutorial builds its table in a function (`configs=get_autotune_config()`): its 2-warp configs are
    seen there too, and run the source kernel; with only 2-warp configs the kernel is kept."""
    text = (FIXTURES / "suite_gemm_small_warps.py").read_text(encoding="utf-8")
    start, end = text.index("@triton.autotune("), text.index('    key=["M", "N", "K"],\n)')
    table = text[start:end].replace("@triton.autotune(\n    configs=[", "def get_autotune_config():\n    return [")
    text = (text[:start] + table.rstrip().rstrip(",") + "\n\n\n@triton.autotune(\n    configs=get_autotune_config(),\n"
            + text[end:])
    (outcome,) = translate_source(text, "k.py", get_target("sm90")).functions
    assert outcome.translated and outcome.pipelined
    assert WARPGROUP_TEST in outcome.dispatch.source_when
    (outcome,) = translate_source(re.sub(r"num_warps=[48]", "num_warps=2", text), "k.py", get_target("sm90")).functions
    assert not outcome.translated and "runs 2 warps" in outcome.kept_reason


CHOSEN_HELPER = '''import triton
import triton.language as tl

USE_A = True


@triton.jit
def _half_up(x):
    return x + 0.5


@triton.jit
def _half_down(x):
    return x - 0.5


if USE_A:
    rnd = _half_up
else:
    rnd = _half_down


@triton.jit
def round_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, rnd(tl.load(x_ptr + offs, mask=m)), mask=m)
'''


@pytest.mark.parametrize("target", ["sm90", "gfx942"])
def test_a_helper_picked_at_import_time_is_a_helper_and_its_caller_stays_triton(target: str) -> None:
    """`if USE_A: rnd = _half_up else: rnd = _half_down`: both are helpers of the kernel calling `rnd` (they were
    taken for kernels and bound to launchers the kernel could not call), and that kernel is kept as Triton: the
    source copy behind a launcher would call `rnd`, bound to the Gluon helper."""
    result = translate_source(CHOSEN_HELPER, "k.py", get_target(target))
    outcomes = {o.name: o for o in result.functions}
    assert outcomes["_half_up"].is_helper and outcomes["_half_down"].is_helper
    assert not any(o.translated for o in outcomes.values())
    assert "picks at import time" in outcomes["round_kernel"].kept_reason
    assert "_AlignedOrTriton" not in result.text and "@gluon.jit" not in result.text


def test_imported_helpers_are_read_beside_the_file_whatever_its_path_is_shown_as(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch
                                                                                  ) -> None:
    """A file translated by a path shown relative to its project root (not the current directory) still has its
    imported helpers read from beside it: the helper making a tensor of its own is found and copied, and the kernel
    using it as a combine function kept with its reason (before, the module was not found from the shown path, and the Gluon kernel called the
    Triton helper). Scalar helpers with `tl.assume` and `min` (aiter's `pid_grid`) stay callable."""
    from transpile.engine import translate_file

    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "combine.py").write_text(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef add_relu(a, b):\n"
        "    return tl.maximum(a + b, tl.zeros_like(a))\n\n\n@triton.jit\ndef grid(pid, n, G: tl.constexpr):\n"
        "    g = min(n - pid, G)\n    tl.assume(g >= 0)\n    return pid % g\n")
    kernel = ("import triton\nimport triton.language as tl\nfrom combine import add_relu, grid\n\n\n"
              "@triton.jit\ndef k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n    pid = grid(tl.program_id(0), n, 4)\n"
              "    offs = pid * BLOCK + tl.arange(0, BLOCK)\n    x = tl.load(x_ptr + offs)\n"
              "    tl.store(y_ptr + offs, CALL)\n")
    (tmp_path / "proj" / "kernels.py").write_text(kernel.replace("CALL", "tl.associative_scan(x, 0, add_relu)"))
    (tmp_path / "proj" / "scalar.py").write_text(kernel.replace("CALL", "x * 2"))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # the shown paths below are not paths from here
    kept = next(f for f in translate_file(tmp_path / "proj" / "kernels.py", get_target("sm90"), "kernels.py").functions
                if f.name == "k")
    assert not kept.translated and "`add_relu`, the combine function here" in kept.kept_reason
    assert "def add_relu(a, b):" in translate_file(tmp_path / "proj" / "kernels.py", get_target("sm90"),
                                                   "kernels.py").text  # (copied from beside the file)
    callable_ = translate_file(tmp_path / "proj" / "scalar.py", get_target("sm90"), "scalar.py").functions[0]
    assert callable_.translated, callable_.kept_reason


SHARED_HELPER = '''import triton
import triton.language as tl


@triton.jit
def swz(pid, n, G: tl.constexpr):
    return (pid % G) * (n // G) + pid // G


@triton.jit
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = swz(tl.program_id(0), n, 4)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2)


@triton.jit
def sort_rows(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = swz(tl.program_id(0), n, 4)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.sort(tl.load(x_ptr + offs)))
'''


def test_a_helper_shared_by_a_kept_and_a_translated_kernel_is_copied_for_the_kept_one() -> None:
    """`swz` is called by `scale` (translated) and `sort_rows` (kept: `tl.sort`). It stays a Gluon helper for
    `scale`, and `sort_rows` calls a Triton copy `_swz_triton` (before, `swz` was kept, and `scale` with it)."""
    for target in ("sm90", "gfx950"):
        result = translate_source(SHARED_HELPER, "k.py", get_target(target))
        outcomes = {f.name: f for f in result.functions}
        assert outcomes["scale"].translated and outcomes["swz"].translated, outcomes["scale"].kept_reason
        assert not outcomes["sort_rows"].translated
        kept = result.text[result.text.index("def sort_rows("):]
        assert "pid = _swz_triton(tl.program_id(0), n, 4)" in kept
        assert result.text.count("def _swz_triton(") == 1
        copy = result.text[result.text.index("def _swz_triton("):]
        assert "@triton.jit\ndef _swz_triton(" in result.text and "return (pid % G)" in copy


@pytest.mark.slow
def test_a_helper_shared_by_a_kept_and_a_translated_kernel_compiles(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from transpile.verify import verify

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = translate_source(SHARED_HELPER, str(tmp_path / "k.py"), get_target("gfx950"))
    compiled = verify(result, {"x_ptr": "*fp32", "y_ptr": "*fp32", "BLOCK": 64}, all_configs=True)
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]


LIBRARY = textwrap.dedent('''\
    import triton
    import triton.language as tl


    @triton.jit
    def row_softmax(x, NEG: tl.constexpr):
        x = x.to(tl.float32)
        if NEG:
            x = -x
        x = x - tl.max(x, axis=1)[:, None]
        return tl.exp(x) / tl.sum(tl.exp(x), axis=1)[:, None]


    @triton.jit
    def linear_step(acc, a, b):
        return acc + tl.dot(a, b)


    @triton.jit
    def row_sums(x, y_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x + offs[:, None] * BLOCK + offs[None, :])
        tl.store(y_ptr + offs, tl.sum(x, axis=1))
''')


def test_helpers_of_a_library_module_are_kept_saying_so() -> None:
    """A jit function no function of its file calls or launches, whose parameter is used as a tensor (expanded,
    reduced, a dot operand) is a helper that other modules import (attorch's `math.py`): kept as Triton with that
    reason at its name, not refused with the analysis's guesses about a "scalar" parameter. A kernel whose pointer
    parameter is rebound by a load (`x = tl.load(x + ...)`) is still a kernel."""
    result = translate_source(LIBRARY, "lib.py", get_target("gfx950"))
    outcomes = {f.name: f for f in result.functions}
    for name, param, line in (("row_softmax", "x", 10), ("linear_step", "a", 16)):
        outcome = outcomes[name]
        assert not outcome.translated
        assert outcome.kept_reason.startswith("it is a helper for other modules, not a kernel"), outcome.kept_reason
        assert f"its parameter `{param}` is used as a tensor at line {line}" in outcome.kept_reason
        assert [(d.code, d.line) for d in outcome.diagnostics] == [("TT041", LIBRARY.split("\n").index(
            f"def {name}({param if name == 'row_softmax' else 'acc'}" + (", NEG: tl.constexpr):" if name ==
                                                                          "row_softmax" else ", a, b):")) + 1)]
    assert outcomes["row_sums"].translated


def test_a_kernel_expanding_its_number_parameter_is_still_a_kernel() -> None:
    """`seq_len[None]` expands a kernel's number (a 0-d value in Triton): not a sign of a library helper; a kernel
    launched from another module (nothing here launches it) with a refusal keeps that refusal as its reason."""
    text = textwrap.dedent('''\
        import triton
        import triton.language as tl


        @triton.jit
        def k(x_ptr, seq_len, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs, mask=offs < seq_len[None])
            tl.store(x_ptr + offs, tl.cat(x, x, can_reorder=True))
    ''')
    result = translate_source(text, "k.py", get_target("sm90"))
    assert result.functions[0].kept_reason.startswith("it is not translated for sm90"), result.functions[0].kept_reason


# A pointer GEMM whose tile addresses are made afresh in each iteration: the sm90 cp.async ring does not take that
# form, and where it takes pointer GEMMs it measured slower than Triton's own pipeliner.
FRESH_ADDRESSES = textwrap.dedent('''\
    import triton
    import triton.language as tl


    @triton.jit
    def fresh_gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, BM: tl.constexpr,
                   BN: tl.constexpr, BK: tl.constexpr):
        offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
        offs_n = tl.program_id(1) * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            offs_k = k * BK + tl.arange(0, BK)
            a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :], mask=offs_k[None, :] < K, other=0.0)
            b = tl.load(b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :], mask=offs_k[:, None] < K, other=0.0)
            acc = tl.dot(a, b, acc)
        tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc)
''')


def test_sm90_pointer_gemm_of_another_address_form_is_kept_by_the_policy() -> None:
    result = translate_source(FRESH_ADDRESSES, "fresh.py", get_target("sm90"))
    (kernel,) = [f for f in result.functions if f.name == "fresh_gemm"]
    assert not kernel.translated
    # kept by the measurement, the construct that the ring does not take named first
    assert "the pointer tile of `a` is not a loop-carried tile of pointers; a pointer-tile GEMM" in kernel.kept_reason
    assert "0.69x-0.96x" in kernel.kept_reason and "bench/RESULTS.md" in kernel.kept_reason
    always = translate_source(FRESH_ADDRESSES, "fresh.py", get_target("sm90"), gluon_always=True)
    (kernel,) = [f for f in always.functions if f.name == "fresh_gemm"]
    messages = " ".join(d.message for d in kernel.diagnostics)
    assert "not a loop-carried tile of pointers" in messages and "0.69x-0.96x" not in messages


WRAPPED = textwrap.dedent('''\
    import torch
    import triton
    import triton.language as tl
    from torch.library import wrap_triton


    @triton.jit
    def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


    def scale(x):
        y = torch.empty_like(x)
        wrap_triton(scale_kernel)[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
    ''')


@pytest.mark.parametrize("target", ["sm90", "gfx950"])
def test_kernel_handed_to_wrap_triton_keeps_its_triton_object(target: str) -> None:
    """`wrap_triton(k)[grid](...)` (torch.library) takes only Triton's own kernel objects: a kernel whose Gluon form
    would run behind a launcher (here the alignment launcher) stays Triton, saying where and why; a plain launch of the
    same kernel is translated."""
    result = translate_source(WRAPPED, "w.py", get_target(target))
    kept = {f.name: f for f in result.functions}["scale_kernel"]
    assert not kept.translated
    assert "line 15 uses the kernel other than to launch it (`wrap_triton(scale_kernel)`)" in kept.kept_reason
    assert "_AlignedOrTriton" not in result.text and "@triton.jit\ndef scale_kernel" in result.text
    plain = translate_source(WRAPPED.replace("wrap_triton(scale_kernel)", "scale_kernel"), "p.py", get_target(target))
    assert {f.name: f for f in plain.functions}["scale_kernel"].translated


@pytest.mark.parametrize("wrapper", ['triton.autotune(configs=[triton.Config({"BLOCK": 1024})], key=["n"])',
                                     'triton.heuristics(values={"BLOCK": lambda args: 1024})'])
def test_triton_s_own_wrappers_applied_by_a_call_take_the_launcher(wrapper: str) -> None:
    """`k = triton.autotune(...)(k)` after the kernel (aiter, under a module-level flag): Triton's wrappers call the
    launcher's `run`, which makes the launcher's choice, so the kernel is translated."""
    text = WRAPPED.replace("from torch.library import wrap_triton\n", "").replace(
        "\n\ndef scale(x):", f"\n\nif FLAG:\n    scale_kernel = {wrapper}(scale_kernel)\n\n\ndef scale(x):"
    ).replace("wrap_triton(scale_kernel)", "scale_kernel").replace(", BLOCK=1024)", ")")
    text = "FLAG = True\n" + text
    result = translate_source(text, "w.py", get_target("gfx950"))
    assert {f.name: f for f in result.functions}["scale_kernel"].translated
    assert "scale_kernel = _AlignedOrTriton(" in result.text
    assert f"if FLAG:\n    scale_kernel = {wrapper}(scale_kernel)\n" in result.text


def test_a_construct_triton_rejects_is_the_reason_before_what_else_the_translation_refuses() -> None:
    """A kernel on Triton's removed TMA API whose other branch loads the tile by pointers: the branch's name is a
    scalar (the removed call) in one branch and a tile in the other, which the layout analysis refuses first; the
    kept kernel's reason names the removed API, the construct that keeps the source from compiling at all."""
    from transpile.language import NOT_TRITON

    text = textwrap.dedent('''\
        import triton
        import triton.language as tl


        @triton.jit
        def copy_tile(desc, x_ptr, out_ptr, USE_TMA: tl.constexpr, B: tl.constexpr):
            offs = tl.arange(0, B)
            if USE_TMA:
                tile = tl._experimental_descriptor_load(desc, [0, 0], [B, B], tl.float16)
            else:
                tile = tl.load(x_ptr + offs[:, None] * B + offs[None, :])
            tl.store(out_ptr + offs[:, None] * B + offs[None, :], tile)
        ''')
    for target in ("gfx950", "sm90"):
        result = translate_source(text, "k.py", get_target(target))
        (kernel,) = result.functions
        assert not kernel.translated and NOT_TRITON in (kernel.kept_reason or ""), kernel.kept_reason
        assert any("tensor after this `if` branch" in d.message for d in result.diagnostics), \
            [d.message for d in result.diagnostics]


@pytest.mark.parametrize("fixture", ["suite_lora", "suite_linear_attn"])
def test_a_loop_of_several_dots_no_sm90_ring_takes_names_the_translations_measurement(fixture: str) -> None:
    """sm90 keeps a loop of several dots that is neither one GEMM nor attention, and says what its translation without
    a ring measured (each dot one wgmma waited for at once); the AMD targets, whose warp pipeline reads such loops,
    do not carry that measurement."""
    text = (FIXTURES / f"{fixture}.py").read_text(encoding="utf-8")
    result = translate_source(text, f"{fixture}.py", get_target("sm90"))
    kept = [f for f in result.functions if not f.pipelined and f.kept_reason]
    assert kept and all("are neither one GEMM nor the two chained dots of attention" in f.kept_reason for f in kept)
    assert all("measured 0.26x and 0.67x their source on an H100" in f.kept_reason for f in kept)
    for target in ("gfx950", "gfx942"):
        amd = translate_source(text, f"{fixture}.py", get_target(target))
        assert not any("wgmma waited for at once" in (f.kept_reason or "") for f in amd.functions)


# A dot loop that loads nothing (an iterative solver on tiles loaded before it): nothing to pipeline, and the keep
# reason says so instead of claiming that Triton's compiler pipelines it.
SOLVER = textwrap.dedent('''\
    import triton
    import triton.language as tl


    @triton.jit
    def solver(a_ptr, x_ptr, steps, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        a = tl.load(a_ptr + offs[:, None] * BLOCK + offs[None, :])
        x = tl.load(x_ptr + offs[:, None] * BLOCK + offs[None, :]).to(tl.float32)
        for i in range(steps):
            x = x - 0.5 * tl.dot(a, x.to(tl.float16))
        tl.store(x_ptr + offs[:, None] * BLOCK + offs[None, :], x.to(tl.float16))
    ''')


@pytest.mark.parametrize("target", ["gfx950", "sm90"])
def test_a_dot_loop_that_loads_nothing_is_kept_saying_so(target: str) -> None:
    result = translate_source(SOLVER, "k.py", get_target(target))
    notes = [d for d in result.diagnostics if d.code == "TT041"]
    assert notes and "the loop loads nothing from memory" in notes[0].message
    assert "Triton's compiler pipelines it" not in notes[0].message
