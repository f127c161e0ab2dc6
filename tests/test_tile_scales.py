"""Scale vectors held once per output tile (`transpile.analysis.tile_scales`) and the sm90 TMA ring that loads them
as one scalar (`rules/hopper_pipeline.py`): valid and invalid examples, the variant's text, its launcher's tests and
its compilation for sm90."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from transpile.analysis.tile_scales import uniform_factor
from transpile.cst_walk import preorder
from transpile.engine import translate_source
from transpile.schedule_check import check_source
from transpile.targets import get_target
from transpile.verify import verify

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

# lightllm's, vLLM's and sglang's form: the scales' addresses made before the loop, per column
KERNEL = '''import triton
import triton.language as tl


@triton.jit
def k(A, B, C, As, Bs, M, N, K, group_n, group_k, s_am, s_bn, s_cm, s_asm, s_ask, s_bsk, s_bsn,
      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = A + offs_am[:, None] * s_am + offs_k[None, :]
    b_ptrs = B + offs_k[:, None] + offs_bn[None, :] * s_bn
    As_ptrs = As + offs_am * s_asm
    offs_bsn = offs_bn // group_n
    Bs_ptrs = Bs + offs_bsn * s_bsn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        offs_ks = k * BLOCK_K // group_k
        a_s = tl.load(As_ptrs + offs_ks * s_ask)
        b_s = tl.load(Bs_ptrs + offs_ks * s_bsk)
        acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(C + offs_cm[:, None] * s_cm + offs_cn[None, :], acc.to(C.dtype.element_ty),
             mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))
'''


def _factor(text: str):  # noqa: ANN202 - (UniformFactor | None, code of a node)
    module = cst.parse_module(text)
    fn = next(n for n in module.body if isinstance(n, cst.FunctionDef))
    loop = next(n for n in fn.body.body if isinstance(n, cst.For))
    line = next(s for s in loop.body.body if "tl.dot" in module.code_for_node(s))
    dot = next(n for n in preorder(line) if isinstance(n, cst.Call) and module.code_for_node(n.func) == "tl.dot")
    return uniform_factor(fn, loop, line.body[0], dot), module.code_for_node


def test_a_column_scale_read_per_group_of_whole_tiles_is_one_scalar_at_the_tiles_first_column() -> None:
    found, code = _factor(KERNEL)
    assert found is not None
    assert found.name == "b_s" and code(found.factor) == "b_s[None, :]"
    # (the loop-invariant terms of the address, at the tile's first column; the step's term stays in the loop)
    assert code(found.scalar) == "Bs + (((pid_n * BLOCK_N) % N) // group_n) * s_bsn"
    assert code(found.rest) == "offs_ks * s_bsk"
    assert found.test == "group_n % BLOCK_N != 0"
    # the same with the addresses written into the load (as the pointer-tile passes leave them)
    inline = KERNEL.replace("b_s = tl.load(Bs_ptrs + offs_ks * s_bsk)",
                            "b_s = tl.load((Bs + (offs_bn // group_n) * s_bsn) + offs_ks * s_bsk)")
    found, code = _factor(inline)
    assert found is not None and code(found.scalar) == "Bs + (((pid_n * BLOCK_N) % N) // group_n) * s_bsn"


# aiter's form: the scales' addresses advanced by the loop (`b_scale_ptrs += step`), the loop under a test of the split
CARRIED = KERNEL.replace("    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n    for k in range(0, tl.cdiv(K, BLOCK_K)):",
                         "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n    step = BLOCK_K // group_k\n"
                         "    for k in range(1, tl.cdiv(K, BLOCK_K) + 1):").replace(
    "        offs_ks = k * BLOCK_K // group_k\n", "").replace(
    "a_s = tl.load(As_ptrs + offs_ks * s_ask)", "a_s = tl.load(As_ptrs)").replace(
    "b_s = tl.load(Bs_ptrs + offs_ks * s_bsk)", "b_s = tl.load(Bs_ptrs)").replace(
    "        b_ptrs += BLOCK_K\n", "        b_ptrs += BLOCK_K\n        As_ptrs += step * s_ask\n        Bs_ptrs += step * s_bsk\n")


def test_scale_addresses_the_loop_advances_are_its_start_plus_the_advance_so_far() -> None:
    """`Bs_ptrs += step * s_bsk` after the load, each iteration (aiter's `_gemm_a8w8_blockscale_kernel`): the scalar
    is the start's first column plus the advance made before the iteration, from the loop's range (here from 1)."""
    assert CARRIED != KERNEL and "Bs_ptrs += step * s_bsk" in CARRIED
    found, code = _factor(CARRIED)
    assert found is not None
    assert code(found.scalar) == "Bs + (((pid_n * BLOCK_N) % N) // group_n) * s_bsn"
    assert code(found.rest) == "(k - 1) * (step * s_bsk)"
    # (read after its advance, or advanced twice: the advance so far is not the loop's count times the step)
    for text in (CARRIED.replace("        Bs_ptrs += step * s_bsk\n", "        Bs_ptrs += step * s_bsk\n"
                                 "        acc += tl.load(Bs_ptrs)[None, :]\n"),
                 CARRIED.replace("        Bs_ptrs += step * s_bsk\n", "        Bs_ptrs += step * s_bsk\n"
                                 "        Bs_ptrs += s_bsk\n")):
        assert text != CARRIED and _factor(text)[0] is None
    # (inside a loop that runs it again without binding the address afresh: the next run starts where the advances
    # left it, not at the start)
    lines = CARRIED.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("    step = BLOCK_K // group_k"))
    last = next(i for i, line in enumerate(lines) if line.startswith("    offs_cm"))
    nested = "\n".join(lines[:first] + ["    for rep in range(2):"] + ["    " + line if line else line
                                                                      for line in lines[first:last]] + lines[last:])
    module = cst.parse_module(nested)
    fn = next(n for n in module.body if isinstance(n, cst.FunctionDef))
    inner = [n for n in preorder(fn) if isinstance(n, cst.For)][1]
    line = next(s for s in inner.body.body if "tl.dot" in module.code_for_node(s))
    dot = next(n for n in preorder(line) if isinstance(n, cst.Call) and module.code_for_node(n.func) == "tl.dot")
    assert uniform_factor(fn, inner, line.body[0], dot) is None
    # gfx950 (`transpile verify F -t gfx950 --isa`, fp8, 128x128x128, 8 warps): 0.68 -> 0.63x Triton's own non-MFMA
    # instructions per iteration (the scale's buffer loads from a scalar base were already light), 234 -> 202 VGPRs
    result = translate_source(CARRIED, "k.py", get_target("gfx950"))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    flat = re.sub(r"\s+", "", result.text.split("def _k_triton(", 1)[0])
    assert "b_s=gl.load(Bs+(((pid_n*BLOCK_N)%N)//group_n)*s_bsn+(k-1)*(step*s_bsk))" in flat
    compiled = verify(result, {"A": "*fp8e4nv", "B": "*fp8e4nv", "C": "*bf16", "As": "*fp32", "Bs": "*fp32",
                               "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128}, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def test_a_scale_address_written_over_several_lines_is_one_expression_in_the_sm90_ring() -> None:
    """aiter writes the scale's addresses over several lines in parentheses (`b_scale_ptrs = (\\n b_scales_ptr\\n +
    ...)`): the scalar address the ring defines before it keeps them one expression (it stopped the sm90 variant
    with an internal error before), and the variant compiles."""
    text = CARRIED.replace("    Bs_ptrs = Bs + offs_bsn * s_bsn\n",
                           "    Bs_ptrs = (\n        Bs\n        + offs_bsn * s_bsn\n    )\n")
    assert text != CARRIED
    result = translate_source(text, "k.py", get_target("sm90"), gluon_always=True)
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    flat = re.sub(r"\s+", "", result.text)
    assert "b_s_ptr=(Bs+(((pid_n*BLOCK_N)%N)//group_n)*s_bsn)" in flat
    compiled = verify(result, {"A": "*fp8e4nv", "B": "*fp8e4nv", "C": "*bf16", "As": "*fp32", "Bs": "*fp32",
                               "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 8}, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


@pytest.mark.parametrize(("change", "why"), [
    (("offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N", "offs_bn = tl.arange(0, BLOCK_N) + pid_n"),
     "a tile that does not start at a multiple of its width"),
    (("offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N",
      "offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N // 2)) % N"), "an arange of another width"),
    (("b_s = tl.load(Bs_ptrs + offs_ks * s_bsk)", "b_s = tl.load(Bs_ptrs + offs_ks * s_bsk, mask=offs_bn < N)"),
     "a masked load (its mask is a vector too)"),
    (("Bs_ptrs = Bs + offs_bsn * s_bsn", "Bs_ptrs = Bs + offs_bn * s_bsn"), "a scale per column, no group"),
    (("a_s[:, None] * b_s[None, :]", "a_s[:, None] * b_s[:, None]"), "a factor along the rows"),
    (("        b_ptrs += BLOCK_K\n", "        b_ptrs += BLOCK_K\n        if k > 2:\n            Bs_ptrs += s_bsk\n"),
     "addresses the loop moves in some iterations only"),
    (("        b_ptrs += BLOCK_K\n", "        b_ptrs += BLOCK_K\n        Bs_ptrs += offs_bn\n"),
     "addresses the loop moves by a vector"),
    (("b_s = tl.load(Bs_ptrs + offs_ks * s_bsk)", "b_s = tl.load(Bs_ptrs + offs_ks * s_bsk + offs_bn % 2)"),
     "a vector term the loop does not make per group"),
])
def test_a_scale_vector_not_held_once_per_tile_is_left_as_it_is(change: tuple[str, str], why: str) -> None:
    text = KERNEL.replace(*change)
    assert text != KERNEL
    found, _ = _factor(text)
    assert found is None, why


def test_the_sm90_ring_loads_a_block_scaled_gemms_column_scale_once_per_tile_and_launches_whole_groups_only() -> None:
    """The fixture suite_block_fp8_linear (weight [N, K] read K-major, scales per 128 x 128 block, group sizes passed
    at launch), with --gluon-always (by default the kernel is kept, below): the TMA ring takes the scaled product (the
    single-partition form measured 1.14x its source at 4096^3 on an H100, where the per-column scales ran it at
    0.95-1.06x and kept it as Triton), the scale's address made once before the ring,
    its load a scalar each step, the product scaled by it; the launcher runs the source kernel where a group does not
    hold whole tiles or the tile has fewer than 128 rows."""
    text = (FIXTURES / "suite_block_fp8_linear.py").read_text()
    result = translate_source(text, "fixtures/suite_block_fp8_linear.py", get_target("sm90"), gluon_always=True)
    (fn,) = [f for f in result.functions if f.name == "block_fp8_linear_kernel"]
    assert fn.translated and fn.pipelined, fn.kept_reason
    out = result.text
    assert "w_s_ptr = ws_ptr + (((pid_n * BLOCK_N) % N) // group_n) * stride_wsn" in out
    kernel = out.split("def block_fp8_linear_kernel(", 1)[1]
    ring = kernel.split("for it in range(num_iters):", 1)[1].split("mbarrier.invalidate", 1)[0]
    assert "w_s = gl.load(w_s_ptr + k_group * stride_wsk)" in ring
    assert "acc += product * x_s[:, None] * w_s\n" in ring
    launcher = out.split("block_fp8_linear_kernel = _TMAOrTriton(", 1)[1]
    tests = re.findall(r"lambda [\w, ]+: [^,\n)]+", launcher.split("source_when=", 1)[1])
    assert tests == ["lambda BLOCK_N, group_n: group_n % BLOCK_N != 0", "lambda BLOCK_M: BLOCK_M < 128"]
    group, rows = (eval(t) for t in tests)  # noqa: S307 - the launcher's own tests, as it calls them
    assert not group(BLOCK_N=128, group_n=128) and not group(BLOCK_N=128, group_n=256)
    assert group(BLOCK_N=128, group_n=64) and rows(BLOCK_M=64) and not rows(BLOCK_M=128)
    # (the translated loop of the other operand types keeps the per-column scales)
    assert "w_s[None, :]" in kernel.split("for it in range(num_iters):", 1)[1]
    compiled = verify(result, {"x_ptr": "*fp8e4nv", "w_ptr": "*fp8e4nv", "y_ptr": "*bf16", "xs_ptr": "*fp32",
                               "ws_ptr": "*fp32", "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128}, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def test_the_block_scaled_ring_has_a_warp_specialised_form_whose_consumer_runs_the_loops_own_statements() -> None:
    """From 128 x 128 tiles on 8 warps, the block-scaled TMA ring (--gluon-always) runs warp-specialised: a loader warp fills the
    ring, and a consumer partition of the kernel's own runs the loop's statements around each wgmma (the scale loads
    before the slot's wait, the scaled sum after the slot is handed back), the kernel values they read passed to
    it. Measured on an H100 (bench/RESULTS.md): the fixture 1.13 -> 1.21x its source at 4096^3, bitwise equal."""
    text = (FIXTURES / "suite_block_fp8_linear.py").read_text()
    result = translate_source(text, "fixtures/suite_block_fp8_linear.py", get_target("sm90"), gluon_always=True)
    out = result.text
    consumer = out.split("def _block_fp8_linear_kernel_ws_consumer(", 1)[1].split("@gluon.jit", 1)[0]
    params = re.sub(r"\s+", "", consumer.split("):", 1)[0])
    assert params.rstrip(",").endswith("acc,a_ring,b_ring,ready,empty,num_iters")
    assert "mma_layout:gl.constexpr" in params and "w_s_ptr," in params and "BLOCK_K:gl.constexpr" in params
    steps = re.sub(r"\s+", "", consumer.split("for it in range(num_iters):", 1)[1])
    order = ["w_s=gl.load(w_s_ptr+k_group*stride_wsk)", "mbarrier.wait(ready.index(slot),(it//NUM_STAGES)&1)",
             "use_acc=False", "warpgroup_mma_wait(0,deps=[product,a_ring.index(slot),b_ring.index(slot)])",
             "mbarrier.arrive(empty.index(slot),count=1)", "acc+=product*x_s[:,None]*w_s", "return(acc,"]
    assert all(part in steps for part in order)
    assert [steps.index(part) for part in order] == sorted(steps.index(part) for part in order)
    kernel = out.split("def block_fp8_linear_kernel(", 1)[1]
    flat = re.sub(r"\s+", "", kernel)
    assert "ifx_desc.block_type.shape[0]*w_desc.block_type.shape[0]>=16384andgl.num_warps()>=8:" in flat
    assert "acc=gl.warp_specialize([(_block_fp8_linear_kernel_ws_consumer," in flat
    assert re.search(r"\[1\],\[24\],?\)\[0\]", flat)
    # (8 warps: the warp-specialised branch compiles, and the schedule checker runs both partitions)
    compiled = verify(result, {"x_ptr": "*fp8e4nv", "w_ptr": "*fp8e4nv", "y_ptr": "*bf16", "xs_ptr": "*fp32",
                               "ws_ptr": "*fp32", "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 8},
                      all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]
    # The schedule checker runs both partitions: it holds as emitted, and finds the slot handed back to the loader
    # before the wgmma that reads it has been waited for.
    report = check_source(out)
    assert report.findings == [] and report.cases.get("block_fp8_linear_kernel", 0) > 0, report
    release = "mbarrier.arrive(empty.index(slot), count=1)"
    head, tail = out.split("def _block_fp8_linear_kernel_ws_consumer(", 1)
    early = tail.replace(f"\n        {release}", "", 1).replace("        product = warpgroup_mma(",
                                                                  f"        {release}\n        product = warpgroup_mma(", 1)
    assert early != tail and early.count(release) == 1
    assert check_source(head + "def _block_fp8_linear_kernel_ws_consumer(" + early).findings


@pytest.mark.parametrize("read", ["acc = acc * (x_s[:, None] > 0)", "acc = acc * (k >= 0)"])
def test_a_value_the_scaled_loop_makes_and_the_kernel_reads_after_it_keeps_the_single_partition_ring(read: str
                                                                                                      ) -> None:
    """(--gluon-always) The consumer partition returns the accumulator only: where the kernel reads after the loop a value the loop's
    statements make (the last step's row scales) or the loop variable, the ring stays one partition."""
    text = (FIXTURES / "suite_block_fp8_linear.py").read_text().replace(
        "    offs_ym = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)\n",
        f"    offs_ym = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)\n    {read}\n")
    assert read in text
    result = translate_source(text, "fixtures/suite_block_fp8_linear.py", get_target("sm90"), gluon_always=True)
    (fn,) = [f for f in result.functions if f.name == "block_fp8_linear_kernel"]
    assert fn.pipelined, fn.kept_reason
    assert "_ws_consumer" not in result.text and "warp_specialize" not in result.text
    assert "acc += product * x_s[:, None] * w_s" in result.text


def test_by_default_sm90_keeps_a_block_scaled_gemm_whose_scale_holds_one_value_per_tile_as_triton_reads_it() -> None:
    """Triton's own compile of the loop with the B scale read once per tile ran the fixture at 1.18-1.29x its source
    on an H100 with 8 warps and 128x128x128 tiles, at or above the warp-specialised TMA ring (1.19-1.21x): the kernel
    is kept as Triton, in that form, with the measurement as its reason (not what the pointer rings refuse in the
    loop as written, which the descriptor form was tried for). The form is taken from 8 warps only: with 4, the
    registers it saves let a third CTA onto each SM and a grid of 512 CTAs ran at 0.84x the source."""
    text = (FIXTURES / "suite_block_fp8_linear.py").read_text()
    result = translate_source(text, "fixtures/suite_block_fp8_linear.py", get_target("sm90"))
    (fn,) = [f for f in result.functions if f.name == "block_fp8_linear_kernel"]
    assert not fn.translated and fn.measured_keep and fn.tile_scaled
    assert "1.18-1.29x" in fn.kept_reason and "the pointer rings" not in fn.kept_reason
    (note,) = [d for d in fn.diagnostics if d.code == "TT041"]
    assert "1.18-1.29x" in note.message and note.line == 28
    assert any(d.code == "TT047" and "at least 8 warps" in d.message for d in fn.diagnostics)
    assert "_TMAOrTriton" not in result.text and "gluon" not in result.text
    # (the heuristic as Triton runs it: a launch's keyword arguments, an autotune config's `num_warps` among them)
    found = re.search(r'"TILE_SCALED": (lambda args: [^}]*)}', result.text)
    assert found and 'args["group_n"] % args["BLOCK_N"] == 0 and args.get("num_warps", 4) >= 8' in found.group(1)
    heuristic = eval(found.group(1))  # noqa: S307
    assert heuristic({"group_n": 128, "BLOCK_N": 128, "num_warps": 8})
    assert not heuristic({"group_n": 128, "BLOCK_N": 128, "num_warps": 4})
    assert not heuristic({"group_n": 128, "BLOCK_N": 128}) and not heuristic({"group_n": 64, "BLOCK_N": 128,
                                                                                "num_warps": 8})
    for warps in (4, 8):
        compiled = verify(result, {"x_ptr": "*fp8e4nv", "w_ptr": "*fp8e4nv", "y_ptr": "*bf16", "xs_ptr": "*fp32",
                                   "ws_ptr": "*fp32", "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128,
                                   "num_warps": warps}, all_configs=False)
        assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def test_a_block_scaled_gemm_whose_scales_vary_across_a_tile_stays_kept() -> None:
    """Scales per column (no group): the ring would load the vector each step, measured no faster than Triton; the
    kernel is kept with that measurement."""
    text = (FIXTURES / "suite_block_fp8_linear.py").read_text().replace(
        "ws_ptrs = ws_ptr + (offs_n // group_n) * stride_wsn", "ws_ptrs = ws_ptr + offs_n * stride_wsn")
    fn = translate_source(text, "fixtures/suite_block_fp8_linear.py", get_target("sm90")).functions[0]
    assert not fn.pipelined and "0.95-1.06x" in fn.kept_reason


def test_the_gfx950_warp_pipeline_loads_the_column_scale_once_per_tile_too() -> None:
    """The same fixture on gfx950: the warp-pipelined ring loads `w_s` as one scalar a step (the address written into
    the load: Triton's AMD compile hoists its loop-invariant part), for launches whose groups hold whole tiles.
    Machine code (`transpile verify F -t gfx950 --isa`, 8 warps): 0.70x Triton's own non-MFMA instructions per loop
    iteration at 128 x 128 x 128 (0.91x with the scales per column), 0.55x at 64 x 128 x 128."""
    text = (FIXTURES / "suite_block_fp8_linear.py").read_text()
    result = translate_source(text, "fixtures/suite_block_fp8_linear.py", get_target("gfx950"))
    (fn,) = [f for f in result.functions if f.name == "block_fp8_linear_kernel"]
    assert fn.pipelined, fn.kept_reason
    kernel = result.text.split("def _block_fp8_linear_kernel_triton(", 1)[0]
    flat = re.sub(r"\s+", "", kernel)
    assert "w_s=gl.load(ws_ptr+(((pid_n*BLOCK_N)%N)//group_n)*stride_wsn+k_group*stride_wsk)" in flat
    assert "w_s[None,:]" not in flat
    assert "lambda BLOCK_N, group_n: group_n % BLOCK_N != 0" in result.text
    compiled = verify(result, {"x_ptr": "*fp8e4nv", "w_ptr": "*fp8e4nv", "y_ptr": "*bf16", "xs_ptr": "*fp32",
                               "ws_ptr": "*fp32", "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128}, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


# ---- kernels kept as Triton: the scalar written into Triton (`transpile.passes.tile_scales`) ----

def _kept(text: str, target: str = "gfx1250"):  # noqa: ANN202 - (TranslationResult, the kernel's outcome)
    result = translate_source(text, "k.py", get_target(target))
    (fn,) = [f for f in result.functions if f.name == "k"]
    return result, fn


def test_a_kept_block_scaled_gemm_loads_its_column_scale_once_per_tile_under_a_flag_its_launch_sets() -> None:
    """A kernel kept as Triton (gfx1250: its ring measured no lighter) gets the scalar in Triton: a flag the launch
    computes from the group test (`@triton.heuristics` right above the jit decorator, where it sees an autotune
    config's tile width) picks, at compile time, the loop with `b_s` loaded once, or the loop as written."""
    result, fn = _kept(KERNEL)
    assert not fn.translated and fn.tile_scaled
    text = result.text
    assert '@triton.heuristics({"TILE_SCALED": lambda args: args["group_n"] % args["BLOCK_N"] == 0})\n@triton.jit\n' \
        in text
    flat = re.sub(r"\s+", "", text)
    assert "BLOCK_K:tl.constexpr,TILE_SCALED:tl.constexpr=False)" in flat
    scalar, written = flat.split("ifTILE_SCALED:", 1)[1].split("else:", 1)
    assert "b_s=tl.load(Bs+(((pid_n*BLOCK_N)%N)//group_n)*s_bsn+offs_ks*s_bsk)" in scalar
    assert "acc+=tl.dot(a,b)*a_s[:,None]*b_s" in scalar and "b_s[None,:]" not in scalar
    # (the other branch is the loop as written)
    assert "b_s=tl.load(Bs_ptrs+offs_ks*s_bsk)" in written and "acc+=tl.dot(a,b)*a_s[:,None]*b_s[None,:]" in written
    assert any(d.code == "TT047" and d.line == 25 for d in fn.diagnostics), fn.diagnostics
    # (a kernel that already has the name gets another flag)
    taken, _ = _kept(KERNEL.replace("offs_ks = k", "TILE_SCALED = 0\n        offs_ks = k"))
    assert "ifTILE_SCALED_:" in re.sub(r"\s+", "", taken.text)


@pytest.mark.parametrize("change", [
    # the vector is read elsewhere too: the scalar cannot take its place there
    ("        a_ptrs += BLOCK_K\n", "        a_ptrs += BLOCK_K\n        tl.store(C + offs_bn, b_s)\n"),
    # the group divisor is rebound in the kernel: the launch's test would not be the loop's
    ("    pid_m = tl.program_id(0)\n", "    pid_m = tl.program_id(0)\n    group_n = group_n * 2\n"),
    # the kernel is handed to a wrapper that wants Triton's own kernel object, not one wrapped in a heuristic
    ("             mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))\n",
     "             mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))\n\n\nwrapped = wrap_triton(k)\n"),
])
def test_a_kept_kernel_whose_column_scale_is_not_only_its_products_factor_is_left_as_written(
        change: tuple[str, str]) -> None:
    result, fn = _kept(KERNEL.replace(*change))
    assert not fn.translated and not fn.tile_scaled and "TILE_SCALED" not in result.text


def test_the_kept_kernels_flagged_form_computes_what_the_source_computes_in_the_interpreter(tmp_path: Path) -> None:
    """Run by Triton's interpreter on CPU tensors (fp32 data): the variant's kernel, with groups of whole tiles (the
    scalar loop) and without (the loop as written), is bitwise equal to the source's at a ragged size."""
    result, _ = _kept(KERNEL)
    (tmp_path / "source.py").write_text(KERNEL)
    (tmp_path / "variant.py").write_text(result.text)
    script = textwrap.dedent('''
        import sys, torch, triton
        sys.path.insert(0, sys.argv[1])
        import source, variant
        M, N, K, BM, BN, BK = 40, 72, 80, 16, 16, 16
        g = torch.Generator().manual_seed(0)
        a, b = torch.randn(M, K, generator=g), torch.randn(N, K, generator=g)
        for group_n, group_k in ((32, 16), (24, 16)):
            a_s = torch.rand(M, triton.cdiv(K, group_k), generator=g)
            b_s = torch.rand(triton.cdiv(N, group_n), triton.cdiv(K, group_k), generator=g)
            outs = []
            for module in (source, variant):
                c = torch.zeros(M, N)
                grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))
                module.k[grid](a, b, c, a_s, b_s, M, N, K, group_n, group_k, a.stride(0), b.stride(0), c.stride(0),
                               a_s.stride(0), a_s.stride(1), b_s.stride(1), b_s.stride(0),
                               BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK)
                outs.append(c)
            assert torch.equal(outs[0], outs[1]), (group_n, (outs[0] - outs[1]).abs().max())
        print("EQUAL")
    ''')
    run = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    assert run.returncode == 0 and "EQUAL" in run.stdout, run.stdout + run.stderr


def test_the_kept_kernels_scalar_form_compiles_lighter_for_gfx1250() -> None:
    """The variant's kernel compiled as a launch with whole groups runs it (`verify` computes the flag from the
    values it is given, else compiles the form the flag adds): fewer global loads in the hot loop than the source's,
    and fewer VGPRs (the fixture, 8 warps: 8.25 -> 6.72 non-MFMA instructions per MFMA, 20 -> 4 global loads, 255 -> 218
    VGPRs)."""
    from transpile.verify import isa_compare_file
    values = json.loads((FIXTURES / "verify.json").read_text())["suite_block_fp8_linear.py"]
    comparisons = isa_compare_file(FIXTURES / "suite_block_fp8_linear.py", get_target("gfx1250"), values,
                                   "fixtures/suite_block_fp8_linear.py")
    (row,) = [c.as_dict() for c in comparisons if c.kernel == "block_fp8_linear_kernel"]
    assert row["status"] == "kept as Triton" and row["ratio"] is not None and row["ratio"] < 0.9, row
    source, variant = row["source"], row["variant"]
    assert variant["vgprs"] < source["vgprs"] and variant["hot_loop"]["global_loads"] < source["hot_loop"]["global_loads"], row


def test_a_column_scale_broadcast_without_its_none_axis_is_read_once_per_tile_where_its_width_is_the_columns() -> None:
    """torchao's spelling, `acc += tl.dot(a, b) * a_s[:, None] * b_s` with `b_s` a vector of the tile's columns
    (broadcast along the last axis): taken where the vector's tile width is the accumulator's column count, and
    written as the same product of the scalar."""
    bare = KERNEL.replace("acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]", "acc += tl.dot(a, b) * a_s[:, None] * b_s")
    result, fn = _kept(bare)
    assert fn.tile_scaled
    scalar = re.sub(r"\s+", "", result.text).split("ifTILE_SCALED:", 1)[1].split("else:", 1)[0]
    assert "b_s=tl.load(Bs+(((pid_n*BLOCK_N)%N)//group_n)*s_bsn+offs_ks*s_bsk)" in scalar
    assert "acc+=tl.dot(a,b)*a_s[:,None]*b_s" in scalar
    # (a row vector so broadcast would be read along the columns: its width is not theirs, it is left alone)
    rows = bare.replace("Bs_ptrs = Bs + offs_bsn * s_bsn", "Bs_ptrs = Bs + (offs_am // group_n) * s_bsn")
    _, fn = _kept(rows)
    assert not fn.tile_scaled
