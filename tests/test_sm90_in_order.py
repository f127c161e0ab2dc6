"""sm90 loops pipelined in order (`IN_ORDER_STEADY`): a loop whose dots are made afresh or chained on earlier
products of the iteration (attention's backward dK/dV loop) gets a cp.async ring for the tiles it loads, the tiles it
does not change stored into shared memory once, and each dot an asynchronous wgmma issued as early as its operands
allow and waited for where its result is read (`transpile.lowering.sm90.wgmmas_in_order`). The launcher runs the
Gluon kernel for the launches it was measured faster on (8 warps, 16 iterations or more of the loop)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import libcst as cst
import pytest

from transpile.engine import translate_file
from transpile.lowering.sm90 import IN_ORDER_STEADY, wgmmas_in_order
from transpile.rules import hopper_cp_async
from transpile.rules.pipeline_text import namer
from transpile.schedule_check import check_source
from transpile.targets import get_target

ROOT = Path(__file__).resolve().parent.parent
SM90 = get_target("sm90")


def _order(text: str, deps: tuple[str, ...] = ("q_smem.index(slot)",)) -> list[str]:
    statements = list(cst.parse_module(text).body)
    return wgmmas_in_order(statements, namer(set()), deps)


def test_each_wgmma_is_issued_early_and_waited_for_where_it_is_read() -> None:
    """The dK/dV step: QK^T and dP^T (whose operands are ready at the top) are issued first, in the loop's order;
    the softmax waits for QK^T only (dP^T stays in flight), dS^T for dP^T only (dV stays in flight); dP^T, part of
    an expression, gets a name of its own; the iteration ends with one wait for the rest and the slots."""
    lines = _order(
        "m = gl.load(m_ptrs)\n"
        "qkT = warpgroup_mma(k_smem, q_smem.index(slot).permute((1, 0)), zeros, is_async=True)\n"
        "pT = gl.exp2(qkT - m[None, :])\n"
        "dv = _wgmma_a_regs(pT.to(gl.float16), do_smem.index(slot), dv)\n"
        "dpT = warpgroup_mma(v_smem, do_smem.index(slot).permute((1, 0)), zeros, is_async=True).to(gl.float32)\n"
        "dsT = pT * (dpT - delta[None, :])\n"
        "dk = _wgmma_a_regs(dsT.to(gl.float16), q_smem.index(slot), dk)\n",
        ("q_smem.index(slot)", "do_smem.index(slot)"))
    assert [line.split(" = ")[0] for line in lines if not line.startswith("#")] == [
        "qkT", "dpT_mma", "m", "qkT", "pT", "dv", "dpT_mma", "dpT", "dsT", "dk", "dv, dk, _, _"]
    assert "qkT = warpgroup_mma_wait(1, deps=[qkT])" in lines
    assert "dpT_mma = warpgroup_mma_wait(1, deps=[dpT_mma])" in lines
    assert "dpT = dpT_mma.to(gl.float32)" in lines
    assert lines[-1] == "dv, dk, _, _ = warpgroup_mma_wait(0, deps=[dv, dk, q_smem.index(slot), do_smem.index(slot)])"


def test_a_chain_on_one_accumulator_is_not_waited_for_and_a_rebinding_is() -> None:
    """Two wgmmas into one accumulator run in order on the tensor cores: the second is issued on the first without a
    wait. A statement that rebinds an outstanding result waits for it first; a wgmma reading a product waits for
    the wgmma that made it."""
    lines = _order(
        "acc = warpgroup_mma(a_smem, b_smem, acc, is_async=True)\n"
        "acc = warpgroup_mma(c_smem, d_smem, acc, is_async=True)\n"
        "acc = acc * 0.5\n")
    assert lines[:2] == ["acc = warpgroup_mma(a_smem, b_smem, acc, is_async=True)",
                         "acc = warpgroup_mma(c_smem, d_smem, acc, is_async=True)"]
    assert lines[2:4] == ["acc = warpgroup_mma_wait(0, deps=[acc])", "acc = acc * 0.5"]
    assert not any("warpgroup_mma_wait(0, deps=[acc, q_smem" in line for line in lines)  # nothing left in flight
    lines = _order("s = warpgroup_mma(q_smem, k_smem, zeros, is_async=True)\n"
                   "o = _wgmma_a_regs(s.to(gl.float16), v_smem, o)\n")
    assert lines[1] == "s = warpgroup_mma_wait(0, deps=[s])" and lines[2].startswith("o = _wgmma_a_regs(")


def test_a_wgmma_does_not_move_above_what_it_reads() -> None:
    lines = _order("b = x * 2\n"
                   "y = warpgroup_mma(a_smem, b, zeros, is_async=True)\n"
                   "z = w + 1\n")
    assert lines[:3] == ["b = x * 2", "y = warpgroup_mma(a_smem, b, zeros, is_async=True)", "z = w + 1"]


@pytest.fixture(scope="module")
def variant() -> str:
    return translate_file(ROOT / "fixtures" / "suite_attention_bwd.py", SM90).text


def test_the_backward_loop_is_pipelined_in_order(variant: str) -> None:
    ring = re.sub(r"\s+", " ", variant.split("NUM_STAGES: gl.constexpr", 1)[1].split("elif (", 1)[0])
    ring = ring.replace("( ", "(").replace(", )", ")")
    # K and V (the loop does not change them) are stored into shared memory once, before the loop
    assert ring.count("k_smem = gl.allocate_shared_memory(k_ring.dtype") == 1
    assert ring.count("v_smem = gl.allocate_shared_memory(v_ring.dtype") == 1
    assert ring.index("v_smem = gl.allocate") < ring.index("for it in range(")
    # every dot is an asynchronous wgmma from shared memory; those whose A the loop computes take it from registers
    assert ring.count("warpgroup_mma(k_smem,") == 1 and ring.count("warpgroup_mma(v_smem,") == 1
    assert ring.count("_wgmma_a_regs(") == 2
    assert "qkT = warpgroup_mma_wait(1, deps=[qkT])" in ring and "dpT_dot = warpgroup_mma_wait(1, " in ring
    assert "and BLOCK_N >= 64" in ring  # (a wgmma takes 64 rows a warpgroup: narrower tiles run the fallback)
    report = check_source(variant)
    assert report.cases and report.findings == [], "\n".join(map(str, report.findings))


def test_a_refill_before_the_wait_is_found() -> None:
    """The schedule the expander follows is the record's: a refill before the wait (and its barrier) overwrites the
    slot another warp may still read, and the checker finds it."""
    wrong = ("index", "slot", "refill", "wait", "consumer_before")
    with pytest.MonkeyPatch.context() as patch:
        original = hopper_cp_async.gemm_ring
        patch.setattr(hopper_cp_async, "gemm_ring",
                      lambda order, *args: original(wrong if order == IN_ORDER_STEADY else order, *args))
        text = translate_file(ROOT / "fixtures" / "suite_attention_bwd.py", SM90).text
    assert check_source(text).findings


def test_the_launcher_runs_the_gluon_kernel_where_it_was_measured_faster(variant: str, tmp_path: Path) -> None:
    """8 warps and 16 iterations or more: the Gluon kernel; 4 warps, or a loop of 8 iterations: the source."""
    torch = pytest.importorskip("torch")
    path = tmp_path / "variant.py"
    path.write_text(variant)
    spec = importlib.util.spec_from_file_location("in_order_variant", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    launcher = module.attn_bwd_dkdv_kernel
    assert re.search(r"source_when=\(lambda BLOCK_M, N_CTX: -\(-N_CTX // BLOCK_M\) < 16,\)", variant)

    def runs_gluon(T: int, warps: int) -> bool:
        q = torch.zeros(2, T, 64, dtype=torch.float16)
        m = torch.zeros(2, T)
        args = (q, q, q, q, m, m, q, q, 0.125, T, q.stride(0), q.stride(1))
        return launcher.addressable(args, dict(BLOCK_M=32, BLOCK_N=128, HEAD_DIM=64, num_warps=warps))

    assert runs_gluon(1024, 8)
    assert not runs_gluon(1024, 4)
    assert not runs_gluon(256, 8)  # (8 iterations of 32 queries)


@pytest.mark.parametrize(("loop", "test"), [
    ("range(0, N_CTX, BLOCK_M)", "-(-N_CTX // BLOCK_M) < 16"),
    ("range(tl.cdiv(V, BV))", "(-(-V // BV)) < 16"),
    ("range(lo, hi)", "(hi - lo) < 16"),
    ("range(n_blocks)", None),  # (a local: no launch can test it)
])
def test_the_trip_count_test_reads_the_loops_bounds(loop: str, test: str | None) -> None:
    source = (f"import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(x, N_CTX, V, lo, hi, "
              f"BLOCK_M: tl.constexpr, BV: tl.constexpr):\n    n_blocks = 4\n    for i in {loop}:\n        pass\n")
    module = cst.parse_module(source)
    function = next(s for s in module.body if isinstance(s, cst.FunctionDef))
    loop_node = next(s for s in function.body.body if isinstance(s, cst.For))

    class Param:
        def __init__(self, name: str, constexpr: bool) -> None:
            self.name, self.is_constexpr, self.default = name, constexpr, None

    class Ctx:
        class function:  # noqa: N801 - stands in for the JitFunction
            params = [Param(n, n.isupper() and n not in ("N_CTX", "V")) for n in
                      ("x", "N_CTX", "V", "lo", "hi", "BLOCK_M", "BV")]

    found = hopper_cp_async._trip_count_test(Ctx, loop_node, 16)  # type: ignore[arg-type]
    assert (found[0] if found else None) == test


def test_only_a_statement_of_one_dot_issues_it_asynchronously() -> None:
    """`name = <one dot>` becomes a wgmma from shared memory (its wait placed per statement); a dot inside an `if`,
    or one of two in a statement, stays the translated synchronous `_dot`."""
    dots = hopper_cp_async._SlotDots({"q": "q_smem"}, "slot", {"k"}, namer(set()))

    def rewritten(text: str) -> str:
        return cst.Module([dots.rewrite(cst.parse_statement(text))]).code.strip()

    assert rewritten("y = _dot(a, q, z)\n") == "y = _wgmma_a_regs(a, q_smem.index(slot), z)"
    assert rewritten("y = _dot(k, gl.permute(q, [1, 0]), z)\n") == (
        "y = warpgroup_mma(k_smem, q_smem.index(slot).permute((1, 0)), z, is_async=True)")
    assert rewritten("y = _dot(a, b, z)\n") == "y = _dot(a, b, z)"  # (B computed in the iteration)
    for text in ("if FLAG:\n    y = _dot(a, q, z)\n", "y = _dot(a, q, z) + _dot(b, q, z)\n"):
        assert rewritten(text) == text.strip()


def test_a_tile_addressed_afresh_is_copied_from_its_address_and_kept_by_default() -> None:
    """A tile the loop addresses afresh each iteration (`v_ptr + o_t[:, None] * V + (i * BV + arange)[None, :]`):
    with --gluon-always the in-order ring copies it from the address re-evaluated for a later iteration, under the
    test that its contiguous offsets start on a copy's boundary (`BV % 8 == 0`); by default the kernel is kept as
    Triton with the measurement (the copies take the translated layouts: 0.44-0.56x)."""
    path = ROOT / "fixtures" / "suite_chunk_products.py"
    always = translate_file(path, SM90, gluon_always=True).text
    flat = re.sub(r"\s+", " ", always)
    assert "(BV % 8 == 0)" in flat and "(V % 8 == 0)" in flat
    assert "gl.multiple_of(v_ptr + o_t[:, None] * V + o_v_next[None, :], [1, 16])" in flat
    assert re.search(r"b_u = warpgroup_mma\(b_a_smem, b_v_smem\.index\(slot\)", flat)
    assert check_source(always).findings == []
    kept = translate_file(path, SM90)
    reason = next(fn.kept_reason for fn in kept.functions if fn.name == "chunk_products_kernel")
    assert "`b_v` is addressed afresh each iteration" in reason and "0.44-0.56x" in reason
