"""Constexpr branches hoisted out of dot loops (`transpile.passes.unswitch`): which branches, the copies' text and
line map, diagnostics on the user's lines, the copies pipelined on AMD, kept kernels as written, compiles."""

from __future__ import annotations

import dataclasses
import tempfile
import textwrap
from pathlib import Path

import pytest

from transpile.passes.unswitch import unswitch
from transpile.schedule_check import check_source
from transpile.discover import discover
from transpile.engine import translate_source
from transpile.source import parse_source
from transpile.targets import get_target
from transpile.verify import verify

HEAD = '''import triton
import triton.language as tl


@triton.jit
def gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, {flags}):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
{body}
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
'''

EVEN_K = '''\
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            # the K tail
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)'''


def _kernel(body: str, flags: str = "EVEN_K: tl.constexpr") -> str:
    return HEAD.format(flags=flags, body=body)


def _unswitched(text: str) -> tuple[str, list[int]] | None:
    source = parse_source(text, "k.py")
    return unswitch(text, discover(source))


def test_flag_hoisted_with_each_branch_in_its_copy() -> None:
    text = _kernel(EVEN_K)
    new, lines = _unswitched(text)
    expected = textwrap.indent(textwrap.dedent('''\
        # triton-transpile: the loop, once for each value of `EVEN_K` (known at compile time).
        if EVEN_K:
            for k in range(0, tl.cdiv(K, BLOCK_K)):
                a = tl.load(a_ptrs)
                b = tl.load(b_ptrs)
                acc += tl.dot(a, b)
                a_ptrs += BLOCK_K * stride_ak
                b_ptrs += BLOCK_K * stride_bk
        else:
            for k in range(0, tl.cdiv(K, BLOCK_K)):
                # the K tail
                a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
                b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
                acc += tl.dot(a, b)
                a_ptrs += BLOCK_K * stride_ak
                b_ptrs += BLOCK_K * stride_bk
        '''), "    ")
    assert expected in new
    # Every line maps to the line it came from: the copies' statements to theirs, the new header to the loop's.
    old = text.split("\n")
    for number, line in enumerate(new.split("\n"), start=1):
        source_line = old[lines[number] - 1]
        if "triton-transpile" in line or line.strip() in ("if EVEN_K:", "else:"):
            assert source_line.strip().startswith("for k in range")
        else:
            assert source_line.strip() == line.strip(), (number, line, source_line)


def test_a_scaled_dot_loop_is_unswitched_too() -> None:
    """`tl.dot_scaled` counts as the loop's dot (aiter's MXFP4 GEMMs switch their loads on `EVEN_K`)."""
    text = _kernel(EVEN_K).replace("acc += tl.dot(a, b)", 'acc += tl.dot_scaled(a, None, "e4m3", b, None, "e4m3")')
    new, _ = _unswitched(text)
    compile(new, "k.py", "exec")
    assert new.count("for k in range(0, tl.cdiv(K, BLOCK_K)):") == 2
    assert new.count('acc += tl.dot_scaled(a, None, "e4m3", b, None, "e4m3")') == 2


def test_a_loop_header_written_over_lines_is_unswitched() -> None:
    """`for k in tl.range(\n    start, stop, num_stages=...\n):` (a formatter's layout of a long header): its closing
    bracket, at the loop's indentation, does not end the loop for the quick test before parsing."""
    text = _kernel(EVEN_K).replace("    for k in range(0, tl.cdiv(K, BLOCK_K)):\n",
                                   "    for k in tl.range(\n        0, tl.cdiv(K, BLOCK_K), num_stages=2\n    ):\n")
    assert "    ):\n        if EVEN_K:" in text
    new, _ = _unswitched(text)
    assert new.count("for k in tl.range(") == 2


def test_flag_without_else() -> None:
    """`if not FLAG:` without an else: its statements are in one copy and not in the other."""
    body = ("        a = tl.load(a_ptrs)\n"
            "        if not EVEN_K:\n"
            "            a = tl.load(a_ptrs, mask=offs_k[None, :] < K)\n"
            "        b = tl.load(b_ptrs)")
    new, _ = _unswitched(_kernel(body))
    compile(new, "k.py", "exec")
    taken, other = new.split("    if not EVEN_K:\n", 1)[1].split("\n    else:\n", 1)
    other = other.split("c_ptrs = ")[0]
    assert "mask=offs_k[None, :] < K" in taken and "mask=offs_k[None, :] < K" not in other
    assert "a = tl.load(a_ptrs)" in taken and "a = tl.load(a_ptrs)" in other


def test_a_branch_on_the_negated_flag_is_resolved_in_each_copy() -> None:
    """`if not EVEN_K:` after the hoisted `if EVEN_K:` (a masked score made in the `else` branch): each copy keeps the
    negated branch's statements or drops them as the flag decides, so no copy reads a name only the other binds
    (left in, `mask[None, :]` read as an unbound value and refused)."""
    body = ("        if EVEN_K:\n            a = tl.load(a_ptrs)\n        else:\n"
            "            mask = offs_k < K - k * BLOCK_K\n            a = tl.load(a_ptrs, mask=mask[None, :], other=0.0)\n"
            "        b = tl.load(b_ptrs)\n"
            "        if not EVEN_K:\n            a = tl.where(mask[None, :], a, 0.0)")
    new, _ = _unswitched(_kernel(body))
    compile(new, "k.py", "exec")
    taken, other = new.split("    if EVEN_K:\n", 1)[1].split("\n    else:\n", 1)
    other = other.split("c_ptrs = ")[0]
    assert "mask" not in taken and "if not EVEN_K" not in taken
    # (the copy that selects `a` after loading it takes names of its own: `unswitch._renamed_copies`)
    assert "a_2 = tl.where(mask_2[None, :], a_2, 0.0)" in other and "if not EVEN_K" not in other


def test_elif_chain() -> None:
    """EVEN_K, then MASK_M (an `elif`) in the copy where EVEN_K is false: three copies, no `if` left in a loop."""
    body = ("        if EVEN_K:\n"
            "            a = tl.load(a_ptrs)\n"
            "        elif MASK_M:\n"
            "            a = tl.load(a_ptrs, mask=offs_m[:, None] < M)\n"
            "        else:\n"
            "            a = tl.load(a_ptrs, mask=offs_k[None, :] < K)\n"
            "        b = tl.load(b_ptrs)")
    new, _ = _unswitched(_kernel(body, "EVEN_K: tl.constexpr, MASK_M: tl.constexpr"))
    compile(new, "k.py", "exec")
    assert new.count("for k in range") == 3
    loops = [chunk.split("\n    c_ptrs")[0] for chunk in new.split("for k in range(0, tl.cdiv(K, BLOCK_K)):")[1:]]
    for loop in loops:
        assert " if " not in loop.split("# triton-transpile")[0]
    assert sorted(loop.count("mask=") for loop in loops) == [0, 1, 1]


@pytest.mark.parametrize("body, flags", [
    # a run-time test
    ("        if k < 4:\n            a = tl.load(a_ptrs)\n        else:\n            a = tl.load(a_ptrs + 1)\n"
     "        b = tl.load(b_ptrs)", "EVEN_K: tl.constexpr"),
    # a constexpr branch of arithmetic only on neither an address, a mask nor a dot operand (a causal mask on the
    # scores, a clamped accumulator): the analyses read it as it is
    ("        a = tl.load(a_ptrs)\n        if EVEN_K:\n            acc = acc * 2\n        b = tl.load(b_ptrs)",
     "EVEN_K: tl.constexpr"),
    # a parameter without the constexpr annotation
    ("        if EVEN_K:\n            a = tl.load(a_ptrs)\n        else:\n            a = tl.load(a_ptrs + 1)\n"
     "        b = tl.load(b_ptrs)", "EVEN_K"),
])
def test_not_hoisted(body: str, flags: str) -> None:
    assert _unswitched(_kernel(body, flags)) is None


def test_rebound_flag_and_loop_without_dot_not_hoisted() -> None:
    text = _kernel(EVEN_K).replace("    pid_m = tl.program_id(0)", "    EVEN_K = EVEN_K and BLOCK_K > 16\n"
                                   "    pid_m = tl.program_id(0)")
    assert _unswitched(text) is None
    no_dot = _kernel(EVEN_K).replace("        acc += tl.dot(a, b)", "        acc += tl.sum(a) + tl.sum(b)")
    assert _unswitched(no_dot) is None


def test_copies_pipelined_on_amd_with_diagnostics_on_the_users_lines() -> None:
    text = _kernel(EVEN_K)
    result = translate_source(text, "k.py", get_target("gfx950"))
    (outcome,) = result.functions
    assert outcome.translated and outcome.pipelined
    assert result.text.count("warp-pipelined by triton-transpile") == 2
    # sm90 keeps it as Triton as written (the cp.async ring is not profitable there): the `if` stays in the loop,
    # and the note names the loop's own line
    sm90 = translate_source(text, "k.py", get_target("sm90"))
    assert not sm90.functions[0].translated
    assert "    for k in range(0, tl.cdiv(K, BLOCK_K)):\n        if EVEN_K:\n" in sm90.text
    loop_line = text.split("\n").index("    for k in range(0, tl.cdiv(K, BLOCK_K)):") + 1
    assert {d.line for d in sm90.functions[0].diagnostics if d.code == "TT041"} == {loop_line}
    assert "triton-transpile: the loop, once for each value" not in sm90.text


@pytest.mark.slow
@pytest.mark.parametrize("target", ["gfx942", "gfx950", "gfx1250"])
def test_copies_compile(target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _kernel(EVEN_K)
    result = translate_source(text, str(tmp_path / "k.py"), get_target(target))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32}
    for flag in (True, False):
        compiled = verify(dataclasses.replace(result), {**values, "EVEN_K": flag})
        assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]


def test_a_branch_that_chooses_a_load_mask_is_hoisted() -> None:
    """A constexpr branch of arithmetic only that computes what a load's mask reads (`mask_k` under `if EVEN_K:`): the
    pipeline re-evaluates masks one statement at a time, so the branch is hoisted like one that loads."""
    body = ("        if EVEN_K:\n            mask_k = offs_k < BLOCK_K\n        else:\n"
            "            mask_k = offs_k < K - k * BLOCK_K\n"
            "        a = tl.load(a_ptrs, mask=mask_k[None, :], other=0.0)\n"
            "        b = tl.load(b_ptrs, mask=mask_k[:, None], other=0.0)")
    new, _ = _unswitched(_kernel(body))
    compile(new, "k.py", "exec")
    assert new.count("for k in range") == 2 and "    if EVEN_K:\n        for k in range" in new


def test_a_branch_that_casts_a_dot_operand_is_hoisted_and_an_accumulator_branch_is_not() -> None:
    """`if AB_DTYPE is not None: a = a.to(AB_DTYPE)` rebinds a dot operand: hoisted (the copy without the cast is the
    one a ring takes). `if SATURATE: acc = ...` touches only the accumulator: left in the loop, staged whole."""
    body = ("        a = tl.load(a_ptrs)\n        b = tl.load(b_ptrs)\n"
            "        if AB_DTYPE is not None:\n            a = a.to(AB_DTYPE)\n            b = b.to(AB_DTYPE)\n"
            "        if SATURATE:\n            acc = tl.minimum(acc, 1.0)")
    new, _ = _unswitched(_kernel(body, "AB_DTYPE: tl.constexpr, SATURATE: tl.constexpr"))
    compile(new, "k.py", "exec")
    assert new.count("for k in range") == 2 and "    if AB_DTYPE is not None:\n        for k in range" in new
    assert new.count("if SATURATE:") == 2


def test_the_copy_that_reads_a_tile_transposed_takes_names_of_its_own() -> None:
    """A flag that loads a tile the other way round and reads it transposed in that copy (`if B_T: b = ...` then
    `tl.dot(a, tl.trans(b))`, FLA's `STATE_V_FIRST`): the copies read `b` in different forms, so the transposing
    copy renames what it binds (`b_2`); the other keeps the names as written."""
    body = ("        a = tl.load(a_ptrs)\n        b = tl.load(b_ptrs)\n"
            "        if B_T:\n            acc += tl.dot(a, tl.trans(b))\n        else:\n            acc += tl.dot(a, b)")
    new, _ = _unswitched(_kernel(body, "B_T: tl.constexpr"))
    compile(new, "k.py", "exec")
    transposed, plain = new.split("    if B_T:\n", 1)[1].split("\n    else:\n", 1)
    assert "b_2 = tl.load(b_ptrs)" in transposed and "tl.trans(b_2)" in transposed
    assert "b = tl.load(b_ptrs)" in plain and "_2" not in plain.split("c_ptrs = ")[0]
    # (copies that read every name in one form keep the names as written)
    same, _ = _unswitched(_kernel(body.replace("tl.dot(a, tl.trans(b))", "tl.dot(a, tl.trans(b)) * 3.0").replace(
        "tl.dot(a, b)", "tl.dot(a, tl.trans(b)) * 2.0"), "B_T: tl.constexpr"))
    assert "b_2" not in same


def test_the_copy_that_casts_what_another_copy_reads_through_an_alias_takes_names_of_its_own() -> None:
    """tritonbench's `bf16xint16_matmul_kernel`: each copy casts another operand and passes the other on by a plain
    name (`b_op = b` beside `a_op = a.to(T)`, and the other way round). An alias of a loaded tile counts as loaded,
    so each copy computes a name the other reads as loaded, and each takes names of its own; neither is then refused
    for names it shares with the other, and both are pipelined."""
    body = ("        a = tl.load(a_ptrs)\n        b = tl.load(b_ptrs)\n"
            "        if TRANSPOSE:\n            a_op = a.to(tl.float16)\n            b_op = b\n"
            "        else:\n            a_op = a\n            b_op = b.to(tl.float16)")
    text = _kernel(body, "TRANSPOSE: tl.constexpr").replace("acc += tl.dot(a, b)", "acc += tl.dot(a_op, b_op)")
    new, _ = _unswitched(text)
    compile(new, "k.py", "exec")
    first, second = new.split("    if TRANSPOSE:\n", 1)[1].split("\n    else:\n", 1)
    assert "a_op_2 = a_2.to(tl.float16)" in first and "b_op_2 = b_2\n" in first
    assert "a_op_3 = a_3\n" in second and "b_op_3 = b_3.to(tl.float16)" in second
    result = translate_source(text, "k.py", get_target("gfx950"))
    assert result.text.count('warp_pipeline_stage("mem"') == 2, result.diagnostics
    assert not [d for d in result.diagnostics if d.code in ("TT040", "TT045")], result.diagnostics
    # (each copy computes another operand: the MMA layout lays the warps along it, as the flag picks the copy)
    assert "computed_operand=(0 if TRANSPOSE else 1)" in " ".join(result.text.split())


def test_the_copy_of_a_loop_with_the_cast_takes_names_of_its_own_and_is_pipelined() -> None:
    """A name has one layout in a function: the copy that casts its tiles (`a = a.to(AB_DTYPE)`, laid out as the dot
    reads it) renames what it binds (`a_2`, `b_2`), and the AMD variant pipelines both copies; no launch runs the
    source kernel for the flag. It compiles for gfx950 where the flag is unset (the cast copy's layouts are declared
    with `AB_DTYPE` None) and where it casts, and its schedule holds."""
    body = ("        a = tl.load(a_ptrs)\n        b = tl.load(b_ptrs)\n"
            "        if AB_DTYPE is not None:\n            a = a.to(AB_DTYPE)\n            b = b.to(AB_DTYPE)")
    text = _kernel(body, "AB_DTYPE: tl.constexpr = None")
    new, _ = _unswitched(text)
    cast, plain = new.split("    if AB_DTYPE is not None:\n", 1)[1].split("\n    else:\n", 1)
    assert "a_2 = tl.load(a_ptrs)" in cast and "a_2 = a_2.to(AB_DTYPE)" in cast and "tl.dot(a_2, b_2)" in cast
    assert "a = tl.load(a_ptrs)" in plain and "_2" not in plain.split("c_ptrs = ")[0]
    result = translate_source(text, "k.py", get_target("gfx950"))
    (fn,) = [f for f in result.functions if f.name == "gemm"]
    assert fn.translated and fn.pipelined
    assert not [d for d in result.diagnostics if d.code in ("TT040", "TT045")], result.diagnostics
    assert result.text.count('warp_pipeline_stage("mem"') == 2 and "lambda AB_DTYPE" not in result.text
    assert not check_source(result.text).findings
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}
    for dtype in (None, "tl.bfloat16"):
        compiled = verify(result, {**sig, "AB_DTYPE": dtype}, all_configs=False)
        assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def test_copies_of_a_loop_unswitched_on_two_flags_run_the_source_kernel_by_the_flags_that_tell_them_apart() -> None:
    """A loop copied per value of two flags sits under two `if`s. Where the copies that cast are refused under both
    values of the other flag, the launcher's test is the cast's alone; where only one pair of values is refused, it
    is both tests. Launches of the other values run the Gluon kernel."""
    body = ("        if EVEN_K:\n            a = tl.load(a_ptrs)\n        else:\n"
            "            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)\n"
            "        b = tl.load(b_ptrs)\n"
            "        if CAST:\n            a = a.to(tl.float32).reshape(BLOCK_M, BLOCK_K).to(tl.float16)")
    text = _kernel(body, "EVEN_K: tl.constexpr, CAST: tl.constexpr")
    result = translate_source(text, "k.py", get_target("gfx950"))
    (fn,) = [f for f in result.functions if f.name == "gemm"]
    assert fn.translated and fn.pipelined, fn.kept_reason
    notes = [d for d in result.diagnostics if d.code == "TT045"]
    assert notes and all("except where `CAST` holds" in d.message for d in notes), notes
    assert "source_when=(lambda CAST: CAST,)" in result.text
    # (the reshape only where the K tail is masked: that copy alone runs the source kernel)
    one = text.replace("        if CAST:\n            a = a.to(tl.float32)", "        if CAST:\n            if EVEN_K:\n"
                       "                a = a.to(tl.float16)\n            else:\n                a = a.to(tl.float32)")
    result = translate_source(one, "k.py", get_target("gfx950"))
    notes = [d for d in result.diagnostics if d.code == "TT045"]
    assert len(notes) == 1 and "except where `not (EVEN_K) and CAST` holds" in notes[0].message, \
        [d.message[:120] for d in result.diagnostics]
    assert "source_when=(lambda CAST, EVEN_K: not (EVEN_K) and CAST,)" in result.text


def test_a_test_of_the_loaded_tiles_dtypes_is_hoisted_as_their_pointers_element_types() -> None:
    """`if a.dtype != b.dtype:` after `a = tl.load(a_ptrs)` (`a_ptrs = a_ptr + ...` before the loop): decided when
    the kernel compiles, as `a_ptr.dtype.element_ty != b_ptr.dtype.element_ty`, which the hoisted test reads before
    the loop; the AMD variant pipelines both copies. A tile rebound between its load and the test is not read so."""
    body = ("        a = tl.load(a_ptrs)\n        b = tl.load(b_ptrs)\n"
            "        if a.dtype != b.dtype:\n            a = a.to(tl.float16)\n            b = b.to(tl.float16)")
    text = _kernel(body, "EVEN_K: tl.constexpr")
    new, _ = _unswitched(text)
    compile(new, "k.py", "exec")
    assert "    if a_ptr.dtype.element_ty != b_ptr.dtype.element_ty:\n        for k in range" in new
    result = translate_source(text, "k.py", get_target("gfx950"))
    assert result.functions[0].pipelined
    # (both copies pipelined: the one that casts binds names of its own; its MMA layout is chosen by the same test,
    # and launches of tiles over 128x128 with mixed types run the source kernel: two operands cast each step)
    assert result.text.count('warp_pipeline_stage("mem"') == 2
    assert "(gl.float16 if a_ptr.dtype.element_ty != b_ptr.dtype.element_ty else a_ptr.dtype.element_ty)" \
        in result.text
    assert "source_when=(lambda a_ptr, b_ptr, BLOCK_M, BLOCK_N: (a_ptr.dtype != b_ptr.dtype) and " \
        "BLOCK_M * BLOCK_N > 16384,)" in result.text
    sig = {"b_ptr": "*fp16", "c_ptr": "*fp16", "BLOCK_K": 64, "EVEN_K": True}
    for a, tile, runs in (("*fp8e4nv", 128, "pipelined"), ("*bf16", 256, "source kernel at this launch"),
                          ("*fp16", 256, "pipelined")):
        (compiled,) = [c for c in verify(result, {**sig, "a_ptr": a, "BLOCK_M": tile, "BLOCK_N": 128},
                                         all_configs=False) if not c.label.startswith("_")]
        assert compiled.ok and ("source kernel runs it" in compiled.label) == (runs != "pipelined"), compiled.label
    rebound = body.replace("        b = tl.load(b_ptrs)\n", "        b = tl.load(b_ptrs)\n        a = a * 2\n")
    assert _unswitched(_kernel(rebound, "EVEN_K: tl.constexpr")) is None


def test_a_name_read_after_the_copies_keeps_its_name() -> None:
    """Only names the copies hold for themselves are renamed: `a` read after the loop (the last tile's values) keeps
    its name in every copy, and the copy that casts is then not pipelined (its launches run the source kernel);
    a peeled tail that binds `a` again before reading it leaves the copies free to rename it."""
    body = ("        a = tl.load(a_ptrs)\n        b = tl.load(b_ptrs)\n"
            "        if AB_DTYPE is not None:\n            a = a.to(AB_DTYPE)\n            b = b.to(AB_DTYPE)")
    read = _kernel(body, "AB_DTYPE: tl.constexpr = None").replace(
        "    c_ptrs = ", "    acc += tl.sum(a.to(tl.float32), axis=1)[:, None]\n    c_ptrs = ", 1)
    new, _ = _unswitched(read)
    assert "a_2" not in new and "b_2 = tl.load(b_ptrs)" in new
    tail = _kernel(body, "AB_DTYPE: tl.constexpr = None").replace(
        "    c_ptrs = ", "    a = tl.load(a_ptrs)\n    acc += tl.sum(a.to(tl.float32), axis=1)[:, None]\n    c_ptrs = ", 1)
    new, _ = _unswitched(tail)
    assert "a_2 = a_2.to(AB_DTYPE)" in new and "\n    a = tl.load(a_ptrs)\n" in new


def test_copies_inside_another_copied_loop_keep_a_name_it_reads_after_them() -> None:
    """A dot loop copied for `CAST` inside a tile loop copied for `HAS_S`: the tile loop reads `a` after the dot loop
    (the last tile), inside the statement that holds the copies, so no copy renames `a`."""
    text = '''import triton
import triton.language as tl


@triton.jit
def k(a_ptr, b_ptr, c_ptr, s_ptr, M, K, BLOCK: tl.constexpr, HAS_S: tl.constexpr, CAST: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.zeros((BLOCK, BLOCK), dtype=tl.float16)
    for m in range(0, M):
        if HAS_S:
            s = tl.load(s_ptr + m)
        else:
            s = 1.0
        acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
        for kk in range(0, K):
            a = tl.load(a_ptr + offs[:, None] * BLOCK + offs[None, :])
            b = tl.load(b_ptr + offs[:, None] * BLOCK + offs[None, :])
            if CAST:
                a = a.to(tl.float16)
            acc += tl.dot(a, b)
        tl.store(c_ptr + m + offs[:, None] * BLOCK + offs[None, :], acc * s + a.to(tl.float32))
'''
    unswitched = _unswitched(text)
    assert unswitched is None or "a_2" not in unswitched[0]
    (fn,) = translate_source(text, "k.py", get_target("gfx950")).functions
    assert not fn.pipelined or not fn.translated


def test_a_computed_operand_with_a_factor_loaded_each_iteration_is_kept() -> None:
    """`a = a * tl.load(s_ptr + k)`: the factor is loaded in the stage that runs the MMA, which measured 1.24x
    (gfx950) and 1.30x (gfx942) Triton's own instructions per iteration: kept as Triton, the reason naming it."""
    body = "        a = tl.load(a_ptrs)\n        b = tl.load(b_ptrs)\n        a = a * tl.load(c_ptr + k)"
    text = _kernel(body, "X: tl.constexpr")
    for target in ("gfx950", "gfx942"):
        (fn,) = [f for f in translate_source(text, "k.py", get_target(target)).functions if f.name == "gemm"]
        assert not fn.translated and "a value the computation loads itself each iteration" in fn.kept_reason


def test_a_file_indented_by_tabs_is_unswitched_with_tabs() -> None:
    """GPTQ-style files indent by tabs: the copies are indented by the file's own unit (a tab), so the text stays
    valid Python and every line maps back."""
    text = _kernel(EVEN_K).replace("    ", "\t")
    new, lines = _unswitched(text)
    compile(new, "k.py", "exec")
    assert "\tif EVEN_K:\n\t\tfor k in range(0, tl.cdiv(K, BLOCK_K)):\n\t\t\ta = tl.load(a_ptrs)\n" in new
    assert "\telse:\n\t\tfor k in range(0, tl.cdiv(K, BLOCK_K)):\n\t\t\t# the K tail\n" in new
    assert " " * 4 not in new.split("for k in range")[1]
    old = text.split("\n")
    for number, line in enumerate(new.split("\n"), start=1):
        if "triton-transpile" not in line and line.strip() not in ("if EVEN_K:", "else:"):
            assert old[lines[number] - 1].strip() == line.strip()


def test_a_file_mixing_tabs_and_spaces_in_one_indentation_is_left_as_it_is() -> None:
    text = _kernel(EVEN_K) + "\n\ndef host():\n  \treturn 1\n"  # (valid: one block, indented alike)
    compile(text, "k.py", "exec")
    assert _unswitched(text) is None
    assert _unswitched(_kernel(EVEN_K) + "\n\ndef host():\n\treturn 1\n") is not None


def test_a_constexpr_local_is_a_flag() -> None:
    """`HAS_SCALE: tl.constexpr = scale_ptr is not None` (aiter's MoE GEMMs) is known when the kernel is compiled (Triton
    specialises on None): a branch on it is hoisted; a constexpr local bound twice, or from a run-time value, is not."""
    body = ("        a = tl.load(a_ptrs)\n        b = tl.load(b_ptrs)\n"
            "        if HAS_SCALE:\n            b = b * tl.load(scale_ptr + offs_n)[None, :]")
    head = "    HAS_SCALE: tl.constexpr = scale_ptr is not None\n    acc = tl.zeros"
    text = _kernel(body, flags="scale_ptr").replace("    acc = tl.zeros", head, 1)
    new, _ = _unswitched(text)
    compile(new, "k.py", "exec")
    assert "    if HAS_SCALE:\n        for k in range" in new
    assert new.count("for k in range(0, tl.cdiv(K, BLOCK_K)):") == 2
    twice = text.replace(head, head.replace("acc = tl.zeros", "HAS_SCALE = False\n    acc = tl.zeros"))
    assert _unswitched(twice) is None
    runtime = text.replace("scale_ptr is not None", "M > 0")
    assert _unswitched(runtime) is None


# Masks named `None` under flags (`mask_a = None` where a tile needs no bound), three flags deep, the row bound made
# under an `if` before the loop (`if not EVEN_N: mask_n = ...`): FlagGems' batched GEMM on four backends writes this.
NONE_MASKS = '''import triton
import triton.language as tl


@triton.jit
def bmm_flags(x_ptr, y_ptr, out_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
              EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_K: tl.constexpr):
    batch = tl.program_id(2)
    x_ptr += batch * M * K
    y_ptr += batch * K * N
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    ks = tl.arange(0, BK)
    if not EVEN_M:
        row_ok = rows < M
    if not EVEN_N:
        col_ok = cols < N
    x_ptrs = x_ptr + rows[:, None] * K + ks[None, :]
    y_ptrs = y_ptr + ks[:, None] * N + cols[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for step in range(tl.cdiv(K, BK)):
        if EVEN_K:
            if EVEN_M:
                x_mask = None
            else:
                x_mask = row_ok[:, None]
            if EVEN_N:
                y_mask = None
            else:
                y_mask = col_ok[None, :]
        else:
            k_ok = ks < K - step * BK
            if EVEN_M:
                x_mask = k_ok[None, :]
            else:
                x_mask = row_ok[:, None] & k_ok[None, :]
            if EVEN_N:
                y_mask = k_ok[:, None]
            else:
                y_mask = k_ok[:, None] & col_ok[None, :]
        x = tl.load(x_ptrs, x_mask)
        y = tl.load(y_ptrs, y_mask)
        acc += tl.dot(x, y)
        x_ptrs += BK
        y_ptrs += BK * N
    out = out_ptr + batch * M * N + rows[:, None] * N + cols[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))
'''


def test_masks_named_none_are_left_out_of_the_loads_that_read_them() -> None:
    """After the flags are hoisted, a copy reads `x_mask = None` then `tl.load(x_ptrs, x_mask)`: the load is written
    without the mask, on the same line (the binding stays, dead); a name rebound between is left alone."""
    from transpile.passes.none_masks import drop_none_masks

    text = NONE_MASKS.replace("EVEN_K: tl.constexpr", "EVEN_K: tl.constexpr, HALF: tl.constexpr")
    source = parse_source(text, "k.py")
    assert drop_none_masks(source, discover(source)) is None  # (before unswitching, no binding is certain)
    unswitched, _ = _unswitched(NONE_MASKS)
    source = parse_source(unswitched, "k.py")
    dropped = drop_none_masks(source, discover(source))
    assert dropped is not None and dropped.count("\n") == unswitched.count("\n")
    assert dropped.count("x = tl.load(x_ptrs)\n") == 2 and dropped.count("y = tl.load(y_ptrs)\n") == 2
    assert dropped.count("x = tl.load(x_ptrs, x_mask)\n") == 6  # (the copies whose masks are tiles)
    rebound = '''import triton
import triton.language as tl


@triton.jit
def k(p, q, n, FLAG: tl.constexpr):
    m = None
    if FLAG:
        m = tl.arange(0, 16) < n
    tl.store(q + tl.arange(0, 16), tl.load(p + tl.arange(0, 16), m))
'''
    source = parse_source(rebound, "k.py")
    assert drop_none_masks(source, discover(source)) is None


@pytest.mark.slow
def test_three_flag_gemm_with_masks_named_none_is_pipelined_and_compiles(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    result = translate_source(NONE_MASKS, str(tmp_path / "k.py"), get_target("gfx950"))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    assert result.text.count("warp-pipelined by triton-transpile") == 8
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {"x_ptr": "*bf16", "y_ptr": "*bf16", "out_ptr": "*bf16", "BM": 128, "BN": 128, "BK": 64}
    for flags in ((True, True, True), (False, True, False), (True, False, True), (False, False, False)):
        compiled = verify(dataclasses.replace(result), {**values, **dict(zip(("EVEN_M", "EVEN_N", "EVEN_K"), flags))})
        assert compiled and all(c.ok for c in compiled), [(flags, c.message) for c in compiled if not c.ok]


def test_a_tile_loaded_only_under_a_flag_names_the_flag_copy_that_reads_it_unbound() -> None:
    """`if EVEN_K: a = tl.load(...)` with no `else` (aiter's preshuffled GEMMs): the loop's copy for `EVEN_K` false
    reads `a` and `b` unbound, as the source does at such a launch; the kernel is kept with that reason, not with
    "a limit of the tool's rewrite"."""
    body = ("        if EVEN_K:\n"
            "            a = tl.load(a_ptrs)\n"
            "            b = tl.load(b_ptrs)")
    result = translate_source(_kernel(body), "k.py", get_target("gfx950"))
    (fn,) = result.functions
    assert not fn.translated
    (kept,) = [d for d in result.diagnostics if d.code == "TT041"]
    assert "binds only under a branch on a compile-time flag" in kept.message, kept.message
    assert "limit of the tool" not in kept.message


def test_a_name_each_copy_binds_once_is_one_definition() -> None:
    """`bindings` counts along a path: the copies of an unswitched loop (the two branches of an `if` with an `else`)
    each binding `rows = start_m + offs_m` and looping over `start_m` bind them once, as the source did; a name the
    branches bind to different values, or one bound again after them, is rebound."""
    import libcst as cst

    from transpile.cst_utils import bindings

    fn = cst.parse_module(textwrap.dedent('''
        def f(offs_m, N):
            if EVEN:
                for start_m in range(0, N, 16):
                    rows = start_m + offs_m
            else:
                for start_m in range(0, N, 16):
                    rows = start_m + offs_m
            if FLAG:
                y = 1
            else:
                y = 2
            z = 0
            z = 1
    ''')).body[0]
    single, rebound = bindings(fn)
    assert cst.Module(body=[]).code_for_node(single["rows"]) == "start_m + offs_m"
    assert "start_m" not in rebound and "rows" not in rebound
    assert {"y", "z"} <= rebound and not {"y", "z"} & set(single)
    # (one value text in both branches that reads a name one branch binds, `offs = s + 1`, is not one value; nor is a
    # name one branch binds by a chained assignment, whose value the count does not record)
    fn = cst.parse_module(textwrap.dedent('''
        def f(s, P):
            if A:
                s = tl.arange(0, 16)
                offs = s + 1
            else:
                offs = s + 1
            if P:
                fill = other = tl.full([1], -1.0, tl.float32)
            else:
                fill = tl.zeros([1], dtype=tl.float32)
    ''')).body[0]
    single, rebound = bindings(fn)
    assert {"offs", "fill"} <= rebound and not {"offs", "fill"} & set(single)



def test_a_hoisted_negated_flag_decides_the_plain_test_in_each_copy() -> None:
    """`if not EVEN_K:` hoisted first: each copy also decides a later `if EVEN_K:` of the loop (torchao's HQQ kernel
    writes `if not TRANSPOSED:` for its loads and `if TRANSPOSED:` for its operand), not left in the copies."""
    body = ("        if not EVEN_K:\n"
            "            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)\n"
            "        else:\n            a = tl.load(a_ptrs)\n"
            "        b = tl.load(b_ptrs)\n"
            "        if EVEN_K:\n            b = b.to(tl.float16)")
    new, _ = _unswitched(_kernel(body))
    compile(new, "k.py", "exec")
    assert "if EVEN_K" not in new and new.count("if not EVEN_K") == 1
    taken, other = new.split("    if not EVEN_K:\n", 1)[1].split("\n    else:\n", 1)
    assert "b.to(tl.float16)" not in taken and "mask=" in taken
    assert "b_2 = b_2.to(tl.float16)" in other.split("c_ptrs = ")[0] or "b = b.to(tl.float16)" in other


SAME_BRANCHES = '''import triton
import triton.language as tl


@triton.jit
def gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
         FAST_ACC: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        # the same product either way once spelled alike
        if FAST_ACC:
            acc = tl.dot(a, b, acc)
        else:
            acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
'''


def test_a_branch_whose_two_sides_are_the_same_is_folded_without_a_copy() -> None:
    """`if FAST_ACC: acc = tl.dot(a, b, acc) else: acc += tl.dot(a, b)` is one statement once canonical: the loop
    keeps it, with no copy for the flag (which would take one of the copies a loop is allowed); the `EVEN_K` copies
    are pipelined, and the kernel's launches with either flag value run them."""
    from transpile.engine import prepare

    prepared = prepare(SAME_BRANCHES, "k.py")
    text = prepared.source.text
    assert "FAST_ACC:" not in text.split("acc = tl.zeros")[1] and text.count("for k in range") == 2
    assert text.count("acc = tl.dot(a, b, acc)") == 2 and "# the same product either way" in text
    result = translate_source(SAME_BRANCHES, "k.py", get_target("gfx950"))
    (outcome,) = result.functions
    assert outcome.translated and outcome.pipelined
    assert result.text.count("warp-pipelined by triton-transpile") == 2


DTYPE_QUESTION = '''import triton
import triton.language as tl


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, s, M, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, ROWS: tl.constexpr,
       EVEN: tl.constexpr):
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * BN + offs_n[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        if b.dtype.is_fp8():
            b = (b.to(tl.float32) * s).to(tl.float16)
        if (ROWS and EVEN) and k % 2 == 0:
            a = a * 2
        acc = tl.dot(a, b.to(tl.float16), acc)
        a_ptrs += BK
        b_ptrs += BK * BN
    tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc.to(tl.float16))
'''


def test_a_question_the_tiles_element_type_answers_and_flags_inside_a_run_time_test_are_hoisted() -> None:
    """aiter's latent decode attention dequantises its keys under `if k.dtype.is_fp8():`, a question the element
    type of `K_Buffer` answers when the kernel compiles: hoisted as `b_ptr.dtype.element_ty.is_fp8()`. Its rotary
    loop tests `(USE_ROPE and LAST_SPLIT) and start_n >= ...`: each flag among the conjuncts is hoisted, the copy where
    all hold keeps the run-time rest (`if k % 2 == 0:`), the others lose the branch."""
    result = _unswitched(DTYPE_QUESTION)
    assert result is not None
    text = result[0]
    assert "if b_ptr.dtype.element_ty.is_fp8():" in text and "if b.dtype.is_fp8():" not in text
    assert "if ROWS:" in text and "if EVEN:" in text and text.count("if k % 2 == 0:") == 2
    assert "and k % 2 == 0" not in text
