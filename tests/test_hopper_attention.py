"""sm90 flash-attention pipeline: the two-dot loop plan (and its refusals), the golden's loop, its compile."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import libcst as cst
import pytest

from transpile.analysis.attention import AttentionPlan, plan_attention_loop
from transpile.analysis.layouts import analyse_layouts
from transpile.analysis.pipeline import LoopRefusal
from transpile.discover import discover
from transpile.engine import translate_source
from transpile.rules.hopper_attention import EXAMPLE
from transpile.source import parse_source
from transpile.targets import get_target

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "attention_fwd.py"


class _Pipelined:
    """The fixture's sm90 variant with the attention ring (`--gluon-always`: by default sm90 keeps attention kernels
    as Triton, the ring having measured no faster than Triton's own pipeliner; the ring is still what AMD's schedule
    shares and what `--gluon-always` emits, so its form is tested here)."""

    _text: str | None = None

    def read_text(self) -> str:
        if _Pipelined._text is None:
            _Pipelined._text = translate_source(FIXTURE.read_text(), "fixtures/attention_fwd.py", get_target("sm90"),
                                                gluon_always=True).text
        return _Pipelined._text


GOLDEN = _Pipelined()

SCORES = "        qk = tl.dot(q, tl.trans(k))\n"
RESCALE = "        acc = acc * alpha[:, None]\n"
SECOND = "        acc = tl.dot(p.to(tl.float16), v, acc)\n"
K_LOAD = "        k = tl.load(k_ptrs + start_n * stride_n, mask=mask, other=0.0)\n"


def _plan(text: str) -> tuple[AttentionPlan | LoopRefusal | None, object]:
    source = parse_source(text, "x.py")
    plans = analyse_layouts(discover(source))
    fn = plans["attn"].function
    loop = next(s for s in fn.node.body.body if isinstance(s, cst.For))  # type: ignore[union-attr]
    return plan_attention_loop(source, loop, plans["attn"], 3), source


def _refusal(text: str) -> tuple[str, int]:
    plan, source = _plan(text)
    assert isinstance(plan, LoopRefusal), plan
    return plan.reason, source.position(plan.node)[0]  # type: ignore[attr-defined]


def _line(text: str, fragment: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if fragment in line)


def test_example_loop_is_planned() -> None:
    plan, _ = _plan(EXAMPLE)
    assert isinstance(plan, AttentionPlan)
    assert (plan.q, plan.k.name, plan.k_transposed, plan.v.name, plan.scores, plan.acc) == ("q", "k", True, "v",
                                                                                             "qk", "acc")
    assert plan.num_stages == 3
    assert len(plan.rescales) == 1  # `acc = acc * alpha[:, None]` waits for the previous PV
    assert {"k_ptrs", "v_ptrs", "offs_n"} <= set(plan.invariants)
    assert len(plan.producer) == 1  # `mask = ...`: re-evaluated for the iterations being prefetched


def test_single_dot_loop_is_not_this_plans_business() -> None:
    text = EXAMPLE.replace(SECOND, "        acc += p\n")
    plan, _ = _plan(text)
    assert plan is None


def test_accumulator_read_after_the_second_dot_is_refused_at_that_line() -> None:
    text = EXAMPLE.replace(SECOND, SECOND + "        acc = acc + 1.0\n")
    reason, line = _refusal(text)
    assert "`acc` is used here" in reason
    assert line == _line(text, "acc = acc + 1.0")


def test_scores_without_a_reduction_are_refused() -> None:
    text = EXAMPLE.replace("tl.maximum(m_i, tl.max(qk, axis=1))", "m_i").replace("l_i * alpha + tl.sum(p, axis=1)",
                                                                               "l_i * alpha")
    reason, line = _refusal(text)
    assert "feeds no reduction" in reason
    assert line == _line(text, "qk = tl.dot(")


def test_k_operand_that_is_an_expression_is_refused() -> None:
    text = EXAMPLE.replace(SCORES, "        qk = tl.dot(q, tl.trans(k * 2))\n")
    reason, line = _refusal(text)
    assert "is an expression, not a tile loaded in the loop" in reason
    assert line == _line(text, "qk = tl.dot(")


@pytest.mark.parametrize("in_order, engine", [(False, "wgmma"), (True, "MMA")])
def test_k_tile_read_outside_its_dot_is_refused_naming_the_targets_mma(in_order: bool, engine: str) -> None:
    # (the AMD step expander plans with `in_order`: its refusal names no Hopper instruction)
    text = EXAMPLE.replace(SCORES, SCORES + "        k_sum = tl.sum(k, axis=0)\n")
    source = parse_source(text, "x.py")
    plans = analyse_layouts(discover(source))
    loop = next(s for s in plans["attn"].function.node.body.body if isinstance(s, cst.For))  # type: ignore[union-attr]
    plan = plan_attention_loop(source, loop, plans["attn"], 3, in_order=in_order)
    assert isinstance(plan, LoopRefusal), plan
    assert f"`k` is used outside its dot; the pipelined {engine} reads it straight from shared memory" in plan.reason
    assert source.position(plan.node)[0] == _line(text, "k = tl.load(")


def test_query_tile_loaded_in_the_loop_is_refused() -> None:
    text = EXAMPLE.replace(K_LOAD, K_LOAD + "        q = tl.load(q_ptr + offs_m[:, None] * stride_n + "
                           "offs_d[None, :] * stride_d)\n")
    reason, _ = _refusal(text)
    assert "A operand is not a tensor defined before the loop" in reason


def test_nonzero_fill_of_a_masked_load_is_refused() -> None:
    text = EXAMPLE.replace(K_LOAD, K_LOAD.replace("other=0.0", "other=1.0"))
    reason, line = _refusal(text)
    assert "non-zero `other`" in reason
    assert line == _line(text, "k = tl.load(")


def test_refusal_leaves_the_loop_translated_with_a_tt040_note() -> None:
    text = EXAMPLE.replace(RESCALE, "").replace(SECOND, SECOND + "        acc = acc * 0.5\n")
    result = translate_source(text, "x.py", get_target("sm90"), gluon_always=True)
    notes = [d for f in result.functions for d in f.diagnostics if d.code == "TT040"]
    assert len(notes) == 1 and "attention loop" in notes[0].message
    assert notes[0].line == _line(text, "acc = acc * 0.5")
    assert "warpgroup_mma_wait(1" not in result.text and "acc = _dot(p.to(gl.float16), v, acc)" in result.text


def _ring(text: str) -> str:
    """The golden's kernel (its configs other than the warp-specialised form's run the ring; the form's partitions,
    `test_attention_ws.py`, come before it)."""
    return text[text.index("\ndef attn_fwd_kernel("):]


def _pipelined_loop(text: str) -> str:
    """The body of the golden's pipelined main loop (`for it in range(num_iters):`), up to the final PV."""
    text = _ring(text)
    start = text.index("for it in range(num_iters):")
    end = text.index("# The last iteration's PV", start)
    return text[start:end]


def test_golden_loop_keeps_pv_in_flight_across_the_softmax() -> None:
    loop = _pipelined_loop(GOLDEN.read_text())
    issues = re.findall(r"= warpgroup_mma\((\w+), .*is_async=True\)", loop)
    assert issues == ["q_smem", "p_prev"]  # QK^T from the staged Q, then PV with P from registers
    waits = [int(n) for n in re.findall(r"warpgroup_mma_wait\((\d+),", loop)]
    assert waits[0] >= 1, "the first wait must leave the PV wgmma outstanding"
    assert loop.index("warpgroup_mma_wait(1") < loop.index("gl.max(") < loop.index("warpgroup_mma_wait(0")
    assert "_dot(" not in loop and "gl.load(" not in loop  # no per-iteration staging through registers
    assert "async_copy.wait_group(" in loop and loop.count("async_copy.commit_group()") == 2


def test_golden_stages_q_in_shared_memory_once_before_the_loop() -> None:
    text = _ring(GOLDEN.read_text())
    allocation = text.index("q_smem = gl.allocate_shared_memory(")
    assert allocation < text.index("for it in range(num_iters):")
    assert text.count("q_smem = ") == 1


def test_golden_loads_q_for_its_staging_in_a_copy_layout() -> None:
    text = _ring(GOLDEN.read_text())
    staging = text[text.index("q_layout: gl.constexpr = _copy_layout("):text.index("for it in range(num_iters):")]
    # 16 bytes per thread, from the re-evaluated address tile, masked as the original load
    assert "q_ptrs_stage = q_ptr + off_z * stride_qz + off_h * stride_qh + offs_m_stage[:, None] * stride_qm" in staging
    assert "gl.load(q_ptrs_stage, mask=offs_m_stage[:, None] < N_CTX, other=0.0))" in staging


def test_golden_address_tiles_are_re_evaluated_in_the_copy_layout_not_converted() -> None:
    text = _ring(GOLDEN.read_text())
    assert "gl.convert_layout(k_ptrs," not in text and "gl.convert_layout(v_ptrs," not in text
    assert "offs_n_ring = gl.convert_layout(offs_n, gl.SliceLayout(1, kv_layout))" in text  # 1-D parts converted
    assert "k_ptrs_ring = k_ptr + off_z * stride_kz + off_h * stride_kh + offs_n_ring[:, None] * stride_kn" in text


def test_address_tile_assigned_twice_is_converted() -> None:
    text = EXAMPLE.replace("    m_i = tl.full(", "    k_ptrs += 0\n    m_i = tl.full(")
    result = translate_source(text, "x.py", get_target("sm90"), gluon_always=True)
    assert "k_ptrs_ring = gl.convert_layout(k_ptrs, kv_layout)" in result.text
    assert "v_ptrs_ring = v_ptr + offs_n_ring[:, None] * stride_n + offs_d_ring[None, :] * stride_d" in result.text


def test_q_load_with_other_arguments_is_staged_from_registers() -> None:
    text = EXAMPLE.replace("offs_d[None, :] * stride_d)\n    k_ptrs", "offs_d[None, :] * stride_d, cache_modifier='.cg')\n    k_ptrs")
    assert text != EXAMPLE
    result = translate_source(text, "x.py", get_target("sm90"), gluon_always=True)
    assert "q.dtype), q)" in result.text and "_stage" not in result.text


def test_golden_last_pv_waits_for_every_copy() -> None:
    text = _ring(GOLDEN.read_text())
    tail = text[text.index("# The last iteration's PV"):text.index("    else:", text.index("# The last iteration's PV"))]
    assert tail.index("async_copy.wait_group(0)") < tail.index("_cta_barrier()") < tail.index("warpgroup_mma(")


@pytest.mark.slow
def test_golden_pipelined_branch_compiles_with_unit_strides(tmp_path: Path) -> None:
    """The CPU compile of tests/test_compile.py passes the strides as runtime ints (the translated branch); here they
    are constexpr 1 with 16-divisible sizes and aligned pointers, as the launcher passes contiguous tensors."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    path = tmp_path / "attention_fwd_sm90_variant.py"
    path.write_text(GOLDEN.read_text())
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    from triton.runtime.jit import JITFunction

    fn = module.attn_fwd_kernel.fn
    while not isinstance(fn, JITFunction):  # (the launcher's config split around it)
        fn = fn.fn
    # (each config's source twin, `_ConfigSplit.SOURCE`, runs the source kernel: not a Gluon compile)
    for config in [c for c in module.attn_fwd_kernel.configs if "_transpile_source" not in c.kwargs]:
        signature: dict[str, str] = {}
        constexprs: dict[str, object] = {}
        for name in fn.arg_names:
            if name.endswith("_ptr"):
                signature[name] = "*fp16"
            elif name == "sm_scale":
                signature[name] = "fp32"
            elif name in ("HEAD_DIM", "BLOCK_M", "BLOCK_N", "CAUSAL") or name.endswith(("_qk", "_kk", "_vk", "_ok")):
                signature[name] = "constexpr"
                constexprs[name] = {"HEAD_DIM": 128, "CAUSAL": True, **config.kwargs}.get(name, 1)
            else:
                signature[name] = "i32"
        attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
                 if signature[name] not in ("constexpr", "fp32")}
        source = GluonASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
        if config.kwargs["BLOCK_M"] == 192:  # the three-consumer config, for head dimensions up to 64 only: at 128
            # its compile-time assertion stops it, which the autotuner skips
            from triton.compiler.errors import CompileTimeAssertionFailure

            with pytest.raises(CompileTimeAssertionFailure, match="three-consumer form"):
                triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": config.num_warps})
            continue
        compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": config.num_warps})
        ptx = compiled.asm["ptx"]
        if config.num_warps == 4 and config.kwargs["BLOCK_M"] == 128:  # the warp-specialised form's config
            assert "cp.async.bulk.tensor" in ptx and "setmaxnreg" in ptx  # TMA copies, partitions' registers
        else:
            assert "cp.async.cg.shared.global" in ptx and ", 16" in ptx  # 16-byte copies of K and V
        assert "wgmma.mma_async" in ptx and "wgmma.wait_group.sync.aligned 1" in ptx


def test_contiguous_rows_need_no_compile_time_stride_test() -> None:
    text = EXAMPLE.replace("offs_d[None, :] * stride_d", "offs_d[None, :]")
    result = translate_source(text, "x.py", get_target("sm90"), gluon_always=True)
    kernel = result.text.split("\ndef attn(")[1].split("\ndef _attn_triton(")[0]  # (the source kernel follows)
    # no stride test: the one compile-time test is the query block's rows (BM, a constexpr each launch passes: the
    # translated loop, with its `_dot`s, for fewer than a wgmma's 64)
    assert "isinstance(" not in kernel and kernel.count(".shape[0] >= 64:") == 1
    assert "# Main loop, pipelined by triton-transpile" in result.text
    assert "qk, _ = warpgroup_mma_wait(1, deps=[qk, k_smem.index(slot)])" in result.text


FIXTURES_DIR = Path(__file__).resolve().parents[1] / "fixtures"


def test_the_grid_axis_that_bounds_a_causal_loop_is_found_through_assignments_not_loads() -> None:
    """`range(0, live * end, BLOCK_N)`, `end` from `block_start = BLOCK_M * start_m`, `start_m = tl.program_id(0)`:
    axis 0. The prompt's length is loaded by a program of axis 1 (its batch): data, not followed. A loop bounded by a
    loaded length alone: no axis."""
    from transpile.analysis.attention import trip_count_axis

    text = (FIXTURES_DIR / "fx_attention_varlen.py").read_text()
    for kernel, axis in ((text, 0), (text.replace("live * end", "seq_len"), None)):
        source = parse_source(kernel, "x.py")
        fn = discover(source).functions["prefill_attn_kernel"]
        loop = next(s for s in fn.node.body.body if isinstance(s, cst.For))
        assert trip_count_axis(source, fn.node, loop) == axis


def test_short_prompts_run_the_source_kernel() -> None:
    """The ring measured slower than the source kernel where every program runs one or two key blocks (packed
    prompts of 256 and 512 tokens on an H200): the launcher gives a launch to the Gluon kernel only where the grid
    has GRID_LEAST query blocks along the axis that bounds the loop, and TT043 says so."""
    from transpile.rules.hopper_attention import GRID_LEAST

    result = translate_source((FIXTURES_DIR / "fx_attention_varlen.py").read_text(), "x.py", get_target("sm90"))
    assert f"grid_at_least=(0, {GRID_LEAST})" in result.text
    (note,) = [d for d in result.diagnostics if d.code == "TT043"]
    assert f"whose grid has at least {GRID_LEAST} programs along axis 0" in note.message

    namespace: dict = {"triton": None, "_persistent_grid": None}
    launcher = get_target("sm90").snippet("launch_values") + get_target("sm90").snippet("tma_or_triton")
    exec(launcher, namespace)  # noqa: S102 - the launcher's own text, as variants hold it
    calls: list = []

    class Kernel:
        def __init__(self, name: str) -> None:
            self.name = name

        def __getitem__(self, grid):  # noqa: ANN001, ANN204
            return lambda *args, **kwargs: calls.append(self.name)

    launcher = namespace["_TMAOrTriton"](Kernel("gluon"), Kernel("triton"), params=("x", "BLOCK_M"), tiles=(),
                                         grid_at_least=(0, GRID_LEAST))
    for grid, kwargs, kernel in [
        ((2, 2048, 1), {}, "triton"),  # 64 prompts of 256 tokens: 2 query blocks
        ((GRID_LEAST, 256, 1), {}, "gluon"),
        (lambda meta: (4096 // meta["BLOCK_M"], 8), {"BLOCK_M": 128}, "gluon"),  # a grid function: 32 blocks
        (lambda meta: (512 // meta["BLOCK_M"], 8), {"BLOCK_M": 128}, "triton"),
        (lambda meta: (512 // meta["BLOCK_M"], 8), {}, "gluon"),  # an autotuned block size: the kernel decides
    ]:
        launcher[grid](0, **kwargs)
        assert calls.pop() == kernel, (grid, kwargs)


PADDED = ROOT / "fixtures" / "suite_padded_head_attention.py"


def test_a_head_dimension_bounded_by_a_runtime_value_is_copied_whole_by_launches_it_divides() -> None:
    """A head dimension padded to a power of two, every load masking it by the runtime `head_dim` (`offs_d < head_dim`):
    the ring copies 16 bytes along it, which compiles where the launch proves the bound a multiple of 16 (the mask is
    then constant over each 16-byte vector): the launcher tests `head_dim` with the strides. Another bound of the head
    dimension (`head_dim - 8`) is refused at the load, with the form named."""
    text = PADDED.read_text(encoding="utf-8")
    result = translate_source(text, "fixtures/suite_padded_head_attention.py", get_target("sm90"))
    assert [f.pipelined for f in result.functions if f.name == "padded_head_attn_kernel"] == [True]
    flat = " ".join(result.text.split())
    assert "mask=((start_n_next_ + offs_n_ring[:, None]) < seq_len) & (offs_d_ring[None, :] < head_dim))" in flat
    divisible = flat.split("divisible=(")[-1].split(")")[0]
    assert '"head_dim"' in divisible and '"stride_kn"' in divisible, divisible
    other = text.replace("& (offs_d[:, None] < head_dim),\n            other=0.0,\n        )\n        qk",
                         "& (offs_d[:, None] < head_dim - 8),\n            other=0.0,\n        )\n        qk")
    assert other != text
    kept = translate_source(other, "fixtures/suite_padded_head_attention.py", get_target("sm90"))
    reason = next(f.kept_reason for f in kept.functions if f.name == "padded_head_attn_kernel")
    assert reason is not None and "the loop at line 48" in reason and (
        "the mask bounds the contiguous index by `head_dim`, a runtime value, other than by `offs < bound`") in reason, \
        reason


def test_an_accumulator_rescaled_in_the_statement_that_adds_pv_is_rescaled_where_the_rescales_go() -> None:
    """`acc = acc * alpha[:, None] + tl.dot(p, v)` (canonically `tl.dot(p, v, acc * alpha[:, None])`): the ring's PV
    reads the accumulator itself, and `acc = acc * alpha[:, None]` runs after the previous PV's wait, as a rescale on
    a line of its own does; the rest of the loop is the same as for that spelling."""
    text = PADDED.read_text(encoding="utf-8")
    assert "acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)" in text
    apart = text.replace("        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)\n",
                         "        acc = acc * alpha[:, None]\n        acc = tl.dot(p.to(v.dtype), v, acc)\n")
    fused = translate_source(text, "k.py", get_target("sm90")).text
    split = translate_source(apart, "k.py", get_target("sm90")).text

    def ring(variant: str) -> str:
        loop = variant.split("for it in range(num_iters):")[1].split("\n    else:")[0]
        return "\n".join(line for line in loop.splitlines() if "acc" in line)

    assert ring(fused) == ring(split)
    assert "acc, _ = warpgroup_mma_wait(0, deps=[acc, v_smem.index(prev_slot)])" in ring(fused)
    lines = [line.strip() for line in ring(fused).splitlines()]
    assert lines.index("acc = acc * alpha[:, None]") > lines.index(
        "acc, _ = warpgroup_mma_wait(0, deps=[acc, v_smem.index(prev_slot)])")


@pytest.mark.parametrize("target", ["sm90", "gfx950"])
def test_scores_scaled_by_a_chain_of_factors_are_pipelined_with_the_products_in_the_sources_order(
        target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`qk = tl.dot(q, k) * sm_scale * LOG2E` (flash-linear-attention's parallel attention) is `(dot * sm_scale) *
    LOG2E`: one scale of two factors, multiplied in after the dot in that order (reassociated, `sm_scale * LOG2E`
    first, it would round otherwise). It was refused as a first dot that is not `s = tl.dot(q, k)` times a scalar."""
    import tempfile

    from transpile.verify import verify

    text = PADDED.read_text(encoding="utf-8")
    chained = text.replace(
        "        qk = tl.dot(q, k)\n        qk = tl.where(offs_m[:, None] >= (start_n + offs_n[None, :]), qk * qk_scale,",
        "        qk = tl.dot(q, k) * sm_scale * 1.4426950408889634\n"
        "        qk = tl.where(offs_m[:, None] >= (start_n + offs_n[None, :]), qk,")
    assert chained != text
    result = translate_source(chained, str(tmp_path / "k.py"), get_target(target))
    assert [f.pipelined for f in result.functions if f.name == "padded_head_attn_kernel"] == [True], \
        [d.format() for d in result.diagnostics]
    kernel = result.text.split("def _padded_head_attn_kernel_triton")[0]
    flat = " ".join(kernel.split())
    assert re.search(r"qk = qk \* sm_scale \* 1\.4426950408889634|\) \* sm_scale \* 1\.4426950408889634", flat), flat
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {"Q": "*fp16", "K": "*fp16", "V": "*fp16", "Out": "*fp16", "sm_scale": "fp32", "H": 32, "BLOCK_M": 128,
              "BLOCK_DMODEL": 128, "BLOCK_N": 64}
    compiled = [c for c in verify(result, values) if c.kernel == "padded_head_attn_kernel"]
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]
