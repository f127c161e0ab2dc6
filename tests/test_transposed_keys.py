"""`transpile.passes.transposed_keys` (AMD): a flash-attention K tile loaded as [HEAD_DIM, BLOCK_N] is loaded as its
transpose, [BLOCK_N, HEAD_DIM], and transposed in the scores' dot, so that the rings copy it 16 bytes along the head
dimension: the address and mask broadcasts swapped, 2-D names replaced by their swapped definitions, lines kept;
the rewritten Triton run by the interpreter gives the source's outputs bit for bit."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from transpile.engine import prepare
from transpile.passes.transposed_keys import transpose_key_tiles

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
KT = (FIXTURES / "fx_attention_kt.py").read_text(encoding="utf-8")


def rewritten(text: str, a_operands: bool = False) -> str | None:
    prepared = prepare(text, "k.py")
    return transpose_key_tiles(prepared.source, prepared.facts, prepared.plans, a_operands)


def test_k_is_loaded_transposed_and_transposed_in_the_dot() -> None:
    text = rewritten(KT)
    assert text is not None
    assert len(text.splitlines()) == len(prepare(KT, "k.py").source.text.splitlines())  # lines kept
    loop = text.split("for start_n in range(0, end_n, BLOCK_N):")[1]
    # `kt_ptrs` (K + ... + cols[None, :] * stride_kn + offs_d[:, None]) read through its swapped definition
    assert ("k = tl.load((K + off_b * stride_kb + off_h * stride_kh + cols[:, None] * stride_kn + offs_d[None, :]) "
            "+ start_n * stride_kn, mask=offs_n[:, None] < seqlen, other=0.0)") in loop
    assert "qk = tl.dot(q, tl.trans(k))" in loop
    assert "kt_ptrs = K +" in text  # (the name stays defined as written)
    assert rewritten(text) is None  # idempotent: the loop now reads K transposed


def test_left_alone_where_k_is_not_the_transposed_tile() -> None:
    # a 2-D address bound again in a branch has no one value at the loop to re-evaluate transposed (moved on a line
    # of its own it has: `test_a_tile_moved_before_the_loop`); a K loaded [BLOCK_N, HEAD_DIM] needs nothing
    twice = KT.replace("    q = tl.load(q_ptrs", "    if seqlen > 64:\n        kt_ptrs = kt_ptrs + 0\n    q = tl.load(q_ptrs")
    assert twice != KT and rewritten(twice) is None
    # nor where a scalar the move reads is bound again after it
    moved = KT.replace("    q = tl.load(q_ptrs", "    kt_ptrs += nheads * stride_kn\n    nheads = 1\n    q = tl.load(q_ptrs")
    assert moved != KT and rewritten(moved) is None
    assert rewritten((FIXTURES / "attention_fwd.py").read_text(encoding="utf-8")) is None
    # a vector the address's definition reads is bound again in the loop: read at the load, it would hold another
    # value than where the address was made
    rebound = KT.replace("        offs_n = start_n + cols\n", "        offs_n = start_n + cols\n        cols = offs_n - start_n\n")
    assert rebound != KT and rewritten(rebound) is None


def test_a_tile_moved_before_the_loop() -> None:
    # `kt_ptrs = ...` then `kt_ptrs += ...` on a line of its own, as an inlined helper moves the tile its caller made
    # (FlagGems' `K_block_ptr += lo * stride_k_seqlen`): re-evaluated transposed as one sum at the load
    moved = KT.replace("    q = tl.load(q_ptrs", "    kt_ptrs += 0 * stride_kn\n    q = tl.load(q_ptrs")
    text = rewritten(moved)
    assert text is not None
    loop = text.split("for start_n in range(0, end_n, BLOCK_N):")[1]
    assert ("k = tl.load(((K + off_b * stride_kb + off_h * stride_kh + cols[:, None] * stride_kn + offs_d[None, :]) "
            "+ (0 * stride_kn)) + start_n * stride_kn, mask=offs_n[:, None] < seqlen, other=0.0)") in loop


RUN = """
import importlib.util, sys
import torch

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

for config in (0, 1):  # each autotune config pinned (the interpreter has no benchmarker)
    source, rewritten = load(sys.argv[1], "source"), load(sys.argv[2], "rewritten")
    for module in (source, rewritten):
        module.attn_kt_fwd.configs = [module.attn_kt_fwd.configs[config]]
    for causal in (False, True):
        torch.manual_seed(config)
        q, k, v = (torch.randn(1, 2, 90, 32, dtype=torch.float16) for _ in range(3))
        expected = source.attention(q, k, v, causal, 0.125)
        got = rewritten.attention(q, k, v, causal, 0.125)
        assert torch.equal(expected, got), (config, causal, (expected.float() - got.float()).abs().max())
print("SAME")
"""


def _run_both(tmp_path: Path, source: str, run: str, a_operands: bool = False) -> subprocess.CompletedProcess:
    """`run` under Triton's interpreter, given the source module's path and its rewritten one's."""
    (tmp_path / "source.py").write_text(source)
    (tmp_path / "rewritten.py").write_text(rewritten(source, a_operands) or "")
    (tmp_path / "run.py").write_text(run)
    return subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path / "source.py"),
                           str(tmp_path / "rewritten.py")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TRITON_INTERPRET": "1"})


@pytest.mark.slow
def test_the_rewritten_kernel_computes_what_the_source_computes(tmp_path: Path) -> None:
    result = _run_both(tmp_path, KT, RUN)
    assert result.returncode == 0 and "SAME" in result.stdout, result.stderr[-3000:]


PAGED = '''import torch
import triton
import triton.language as tl


@triton.jit
def paged_prefill(Q, K, V, Out, Page_table, sm_scale, seq_len, stride_qt, stride_kt, stride_vt, stride_ot,
                  D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + offs_m[:, None] * stride_qt + offs_d[None, :], mask=offs_m[:, None] < seq_len, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    for start_n in range(0, seq_len, BLOCK_N):
        # the keys' rows, gathered through the page table
        kv_loc = tl.load(Page_table + start_n + offs_n, mask=(start_n + offs_n) < seq_len, other=0)
        off_k = kv_loc[None, :] * stride_kt + offs_d[:, None]
        k = tl.load(K + off_k, mask=(start_n + offs_n[None, :]) < seq_len, other=0.0)
        qk = tl.dot(q, k)
        qk = tl.where((start_n + offs_n[None, :]) < seq_len, qk * sm_scale, -1.0e8)
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(V + kv_loc[:, None] * stride_vt + offs_d[None, :], mask=(start_n + offs_n[:, None]) < seq_len,
                    other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_ij
    tl.store(Out + offs_m[:, None] * stride_ot + offs_d[None, :], (acc / l_i[:, None]).to(Out.dtype.element_ty),
             mask=offs_m[:, None] < seq_len)


def attention(q, k, v, page_table, sm_scale):
    out = torch.empty_like(q)
    grid = (triton.cdiv(q.shape[0], 128),)
    paged_prefill[grid](q, k, v, out, page_table, sm_scale, q.shape[0], q.stride(0), k.stride(0), v.stride(0),
                        out.stride(0), D=q.shape[1], BLOCK_M=128, BLOCK_N=64, num_warps=8)
    return out
'''


def test_a_paged_k_address_bound_in_the_loop_is_rewritten_where_it_is_bound() -> None:
    # (lightllm's prefill with a prompt cache: the keys' rows come through a page table loaded in the iteration, and
    # the 2-D address is a name the loop binds): that statement is rewritten transposed, the load reads it as it is
    text = rewritten(PAGED)
    assert text is not None
    loop = text.split("for start_n in range(0, seq_len, BLOCK_N):")[1]
    assert "off_k = kv_loc[:, None] * stride_kt + offs_d[None, :]" in loop
    assert "k = tl.load(K + off_k, mask=(start_n + offs_n[:, None]) < seq_len, other=0.0)" in loop
    assert "qk = tl.dot(q, tl.trans(k))" in loop
    from transpile.engine import translate_source
    from transpile.targets import get_target

    result = translate_source(PAGED, "k.py", get_target("gfx950"))
    assert [f.pipelined for f in result.functions if f.name == "paged_prefill"] == [True]
    # read elsewhere too, the name is not rewritten (nor the tile transposed)
    twice = PAGED.replace("        qk = tl.dot(q, k)\n", "        qk = tl.dot(q, k) + tl.sum(off_k, 0)[None, :] * 0\n")
    assert "off_k = kv_loc[:, None]" not in (rewritten(twice) or "")


def test_a_name_bound_after_the_loads_like_a_keyword_of_an_address_load_is_no_carried_address() -> None:
    # (lightllm's llama prefill names its causal mask `mask`, and its page-table load passes `mask=`: a keyword is
    # not a read of that name, so the mask's statement is not in the addresses' slice, and nothing is carried)
    text = PAGED.replace("        qk = tl.where((start_n + offs_n[None, :]) < seq_len, qk * sm_scale, -1.0e8)\n",
                         "        mask = (start_n + offs_n[None, :]) < seq_len\n"
                         "        qk = tl.where(mask, qk * sm_scale, -1.0e8)\n")
    assert text != PAGED
    from transpile.engine import translate_source
    from transpile.targets import get_target

    result = translate_source(text, "k.py", get_target("gfx950"))
    assert [f.pipelined for f in result.functions if f.name == "paged_prefill"] == [True], result.functions[0].kept_reason


PAGED_RUN = RUN.split("for config in")[0] + """
source, rewritten = load(sys.argv[1], "source"), load(sys.argv[2], "rewritten")
torch.manual_seed(0)
q, k, v = (torch.randn(150, 32, dtype=torch.float16) for _ in range(3))
pages = torch.randperm(150).to(torch.int32)
expected = source.attention(q, k, v, pages, 0.125)
got = rewritten.attention(q, k, v, pages, 0.125)
assert torch.equal(expected, got), (expected.float() - got.float()).abs().max()
print("SAME")
"""


@pytest.mark.slow
def test_the_rewritten_paged_kernel_computes_what_the_source_computes(tmp_path: Path) -> None:
    result = _run_both(tmp_path, PAGED, PAGED_RUN)
    assert result.returncode == 0 and "SAME" in result.stdout, result.stdout + result.stderr


# Latent attention's shared keys and values, V written in the second dot itself (`tl.dot(p, tl.trans(kv))`, lightllm's
# deepseek2 decoding): one tile, read transposed by the scores once loaded as its transpose, as loaded by PV.
SHARED_INLINE = PAGED.replace(
    "        v = tl.load(V + kv_loc[:, None] * stride_vt + offs_d[None, :], mask=(start_n + offs_n[:, None]) < seq_len,\n"
    "                    other=0.0)\n"
    "        acc = tl.dot(p.to(v.dtype), v, acc)\n",
    "        acc = tl.dot(p.to(k.dtype), tl.trans(k), acc)\n")


def test_v_written_as_the_k_tile_transposed_in_the_dot_is_the_k_tile() -> None:
    from transpile.analysis.attention import AttentionPlan, plan_attention_loop
    from transpile.analysis.dot_loops import dot_loops

    assert SHARED_INLINE != PAGED
    prepared = prepare(SHARED_INLINE, "k.py")
    fn = prepared.facts.functions["paged_prefill"]
    (loop,) = dot_loops(prepared.facts, fn)
    plan = plan_attention_loop(prepared.source, loop.node, prepared.plans[fn.name], 2, in_order=True)
    assert isinstance(plan, AttentionPlan) and plan.v is plan.k and plan.shared_v == plan.acc_index
    text = rewritten(SHARED_INLINE)
    assert text is not None
    loop_text = text.split("for start_n in range(0, seq_len, BLOCK_N):")[1]
    assert "qk = tl.dot(q, tl.trans(k))" in loop_text
    assert "acc = tl.dot(p.to(k.dtype), k, acc)" in loop_text  # as loaded now: [BLOCK_N, D]
    assert rewritten(text) is None  # idempotent


# The same loop in both branches of a flag (as the branch-splitting pass copies a loop): `off_k` and `kv_loc` are
# bound twice in the function, once in each copy of the loop, each copy's value its own.
def test_a_paged_address_bound_in_each_copy_of_the_loop_is_rewritten_in_each() -> None:
    head, loop = PAGED.split("    for start_n in range(0, seq_len, BLOCK_N):\n")
    loop, tail = loop.split("    tl.store(")
    body = "    for start_n in range(0, seq_len, BLOCK_N):\n" + loop
    split = (head.replace("BLOCK_N: tl.constexpr):", "BLOCK_N: tl.constexpr, FLAG: tl.constexpr):")
             + "    if FLAG:\n" + "\n".join("    " + line if line else line for line in body.splitlines()) + "\n"
             + "    else:\n" + "\n".join("    " + line if line else line for line in body.splitlines()) + "\n"
             + "    tl.store(" + tail)
    text = rewritten(split)
    assert text is not None
    # (each copy's names its own, `off_k_1` and `off_k_2`: passes/reassigned_names.py)
    rows = re.compile(r"off_k(_\d)? = kv_loc(_\d)?\[:, None\] \* stride_kt \+ offs_d\[None, :\]")
    assert len(rows.findall(text)) == 2
    assert len(re.findall(r"qk(_\d)? = tl\.dot\(q, tl\.trans\(k(_\d)?\)\)", text)) == 2
    # read after the loops too, the name is no temporary of theirs: left alone
    after = split.replace("    tl.store(", "    acc += tl.sum(off_k, 0)[None, :] * 0\n    tl.store(", 1)
    assert not re.search(r"off_k = kv_loc(_\d)?\[:, None\]", rewritten(after) or "")


def test_a_key_mask_shared_by_the_copies_and_the_scores_is_recomputed_in_the_scores_layout() -> None:
    # (lightllm's deepseek2 decoding: `seq_n_mask = offs_n_new < cur_batch_end_index` masks the K load and the scores;
    # the copies and the scores lay the keys out differently, and a conversion between them would need a cross-warp
    # barrier inside the `mma` stage): the offsets are converted once before the loop, the bound applied to them
    from transpile.engine import translate_source
    from transpile.targets import get_target

    text = PAGED.replace("    for start_n in range(0, seq_len, BLOCK_N):\n",
                         "    seq_end = tl.minimum(seq_len, 1 << 20)\n"
                         "    for start_n in range(0, seq_len, BLOCK_N):\n"
                         "        keys = start_n + offs_n\n"
                         "        key_mask = keys < seq_end\n").replace(
        "        k = tl.load(K + off_k, mask=(start_n + offs_n[None, :]) < seq_len, other=0.0)\n",
        "        k = tl.load(K + off_k, mask=key_mask[None, :], other=0.0)\n").replace(
        "        qk = tl.where((start_n + offs_n[None, :]) < seq_len, qk * sm_scale, -1.0e8)\n",
        "        qk = tl.where(key_mask[None, :], qk * sm_scale, -1.0e8)\n")
    assert text.count("key_mask[None, :]") == 2
    result = translate_source(text, "k.py", get_target("gfx950"))
    outcome = next(f for f in result.functions if f.name == "paged_prefill")
    assert outcome.pipelined, outcome.kept_reason
    assert "offs_n_cvt = gl.convert_layout(offs_n, " in result.text
    assert "((start_n + offs_n_cvt) < seq_end)" in result.text
    from transpile.verify import verify

    values = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "Out": "*bf16", "Page_table": "*i32", "sm_scale": "fp32",
              "D": 128, "BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8}
    compiled = [c for c in verify(result, values, all_configs=False) if not c.kept and c.check == "compile"]
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled]
    # a bound the loop computes is no scalar made once: the conversion stays, and so does the refusal
    moving = text.replace("        key_mask = keys < seq_end\n", "        key_mask = keys < seq_end - start_n * 0\n")
    assert moving != text
    outcome = next(f for f in translate_source(moving, "k.py", get_target("gfx950")).functions
                   if f.name == "paged_prefill")
    assert not outcome.pipelined


def test_sm90_ring_loads_a_paged_kernels_page_rows_in_its_copy_layout() -> None:
    # (sm90 makes the swap itself: its cp.async ring re-evaluates the loop's address statements for the iteration it
    # copies ahead; the page-table load is one of them, made again with its index vectors in the copies' layout, and
    # the 2-D address the loop binds is bound transposed there, V's address, bound after the softmax, beside it)
    from transpile.engine import translate_source
    from transpile.targets import get_target

    path = FIXTURES / "suite_paged_prefill.py"
    result = translate_source(path.read_text(encoding="utf-8"), "fixtures/suite_paged_prefill.py", get_target("sm90"))
    assert [f.pipelined for f in result.functions if f.name == "paged_prefill_kernel"] == [True]
    text = " ".join(result.text.split())
    refill = text.split("next_it = it + NUM_STAGES - 1")[1].split("_cp_async_load(v_smem")[0]
    assert ("kv_loc_next = gl.load( Req_to_tokens + cur_batch * stride_req + start_n_next_ + "
            "(gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, kv_layout))), mask=(start_n_next_ + "
            "(gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, kv_layout)))) < block_end, other=0, )") in refill
    assert "off_k_next = kv_loc_next[:, None] * stride_kt + cur_kv_head * stride_kh + offs_d_ring[None, :]" in refill
    assert "off_v_next = kv_loc_next[:, None] * stride_vt" in refill
    assert "_cp_async_load(k_smem.index(prev_slot), K + off_k_next, mask=(start_n_next_ + offs_n_ring[:, None]) " \
        "< block_end)" in refill
    # a page-table row that depends on the softmax's running maximum cannot be loaded ahead: refused, and named
    other = path.read_text(encoding="utf-8").replace(
        "        kv_loc = tl.load(\n            Req_to_tokens + cur_batch * stride_req + start_n + offs_n,",
        "        kv_loc = tl.load(\n            Req_to_tokens + cur_batch * stride_req + start_n + offs_n + "
        "(tl.max(m_i, 0) > 1e30).to(tl.int32),")
    assert other != path.read_text(encoding="utf-8")
    kept = translate_source(other, "fixtures/suite_paged_prefill.py", get_target("sm90"))
    reason = next(f.kept_reason for f in kept.functions if f.name == "paged_prefill_kernel")
    assert reason is not None and "a load address depends on a value computed after the loads or on the softmax" \
        in reason, reason


# K computed from its tile before the dot (a cast, a scale by a scalar): the computation is elementwise, so it runs the
# same on the tile loaded transposed, and the dot reads the computed name transposed
COMPUTED = KT.replace("        qk = tl.dot(q, k)\n",
                      "        k_op = (k * 0.5).to(tl.float16)\n        qk = tl.dot(q, k_op)\n")


def test_a_k_computed_elementwise_from_its_tile_is_read_transposed_where_the_dot_reads_it() -> None:
    assert COMPUTED != KT
    text = rewritten(COMPUTED)
    assert text is not None
    loop = text.split("for start_n in range(0, end_n, BLOCK_N):")[1]
    assert "mask=offs_n[:, None] < seqlen, other=0.0)" in loop.split("k_op =")[0]  # (the tile loaded transposed)
    assert "k_op = (k * 0.5).to(tl.float16)\n        qk = tl.dot(q, tl.trans(k_op))" in loop
    assert rewritten(text) is None  # idempotent
    # the cast spelled in the dot is named first (`passes.operand_names`), then read transposed the same way
    cast = rewritten(KT.replace("qk = tl.dot(q, k)", "qk = tl.dot(q, k.to(tl.float16))"))
    assert cast is not None and "qk = tl.dot(q, tl.trans(k_op))" in cast


def test_a_k_computed_with_a_vector_is_left_as_written() -> None:
    # a scale per head-dimension element broadcast along the tile's rows would meet the transposed tile along its
    # columns
    scaled = KT.replace("        qk = tl.dot(q, k)\n",
                        "        k_op = (k * offs_d[:, None].to(tl.float16)).to(tl.float16)\n"
                        "        qk = tl.dot(q, k_op)\n")
    assert scaled != KT and rewritten(scaled) is None


@pytest.mark.slow
def test_the_rewritten_kernel_with_a_computed_k_computes_what_the_source_computes(tmp_path: Path) -> None:
    result = _run_both(tmp_path, COMPUTED, RUN)
    assert result.returncode == 0 and "SAME" in result.stdout, result.stderr[-3000:]


# A GEMM-like loop (no attention): the B operand of the scores' dot read as [BK, BT], contiguous along its first axis
# (chunked linear attention's keys; a block pointer of order (0, 1) lowers to this form).
INTRA = (FIXTURES / "suite_chunk_intra.py").read_text(encoding="utf-8")


def test_a_b_operand_contiguous_along_its_first_axis_is_loaded_transposed() -> None:
    """The address bound in the loop is rewritten where it is bound, the load's mask swapped, the dot reads the
    tile's transpose; lines kept, idempotent; the A operand and the tiles after the loop are left as written."""
    text = rewritten(INTRA)
    assert text is not None
    assert len(text.splitlines()) == len(INTRA.splitlines())
    loop = text.split("for i_k in range(tl.cdiv(K, BK)):")[1].split("# causal inside the chunk")[0]
    assert "p_k = k + o_k[None, :] + o_t[:, None] * (H * K)" in loop
    assert "b_k = tl.load(p_k, mask=m_k[None, :] & m_t[:, None], other=0.0)" in loop
    assert "b_A = tl.dot(b_q, tl.trans(b_k), b_A)" in loop  # (canonical: the accumulation in the dot)
    assert "p_q = q + o_t[:, None] * (H * K) + o_k[None, :]" in loop  # (contiguous along its last axis)
    assert rewritten(text) is None


@pytest.mark.parametrize("change", [
    # read other than as a B operand: as an A operand too, or by a reduction
    ("        b_A += tl.dot(b_q, b_k)\n", "        b_A += tl.dot(b_q, b_k)\n        b_A += tl.sum(b_k, 0)[None, :]\n"),
    # its address read by another load too
    ("        b_A += tl.dot(b_q, b_k)\n", "        b_A += tl.dot(b_q, b_k)\n        b_A += tl.sum(tl.load(p_k), 0)[None, :]\n"),
    # its address reads a 2-D name the loop does not bind once
    ("        p_k = k + o_k[:, None] + o_t[None, :] * (H * K)\n",
     "        p_k = k + o_k[:, None] + o_t[None, :] * (H * K)\n        p_k2 = p_k\n"),
    # a subscript other than the two broadcasts
    ("o_t[None, :] * (H * K)\n", "tl.reshape(o_t, (1, BT)) * (H * K)\n"),
])
def test_a_first_axis_contiguous_operand_is_left_where_it_is_not_the_same_tile_transposed(change) -> None:
    text = INTRA.replace(*change)
    assert text != INTRA
    rewritten_text = rewritten(text)
    assert rewritten_text is None or "tl.trans(b_k)" not in rewritten_text


INTRA_RUN = """
import importlib.util, sys
import torch

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

source, rewritten = load(sys.argv[1], "source"), load(sys.argv[2], "rewritten")
torch.manual_seed(0)
q, k, v = (torch.randn(1, 100, 2, 128, dtype=torch.float16) / 4 for _ in range(3))
expected, got = source.chunk_intra(q, k, v), rewritten.chunk_intra(q, k, v)
assert torch.equal(expected, got), (expected.float() - got.float()).abs().max()
print("SAME")
"""


@pytest.mark.slow
def test_the_rewritten_chunk_kernel_computes_what_the_source_computes(tmp_path: Path) -> None:
    result = _run_both(tmp_path, INTRA, INTRA_RUN)
    assert result.returncode == 0 and "SAME" in result.stdout, result.stderr[-3000:]


STATES = (FIXTURES / "suite_chunk_states.py").read_text(encoding="utf-8")


def test_an_a_operand_contiguous_along_its_first_axis_is_loaded_transposed_where_the_target_asks() -> None:
    """K^T as the A operand of a chunk's state update: left as written for gfx942 (`a_operands` False), else loaded
    as [BT, BK] and read through `tl.trans`; the B tile and the store's address as written; idempotent."""
    assert rewritten(STATES) is None
    text = rewritten(STATES, a_operands=True)
    assert text is not None
    assert len(text.splitlines()) == len(STATES.splitlines())
    loop = text.split("for i_t in range(NT):")[1]
    assert "p_k = k + o_k[None, :] + o_t[:, None] * (H * K)" in loop
    assert "b_k = tl.load(p_k, mask=m_k[None, :] & m_t[:, None], other=0.0)" in loop
    assert "b_h = tl.dot(tl.trans(b_k), b_v, b_h)" in loop  # (canonical: the accumulation in the dot)
    assert "p_v = v + o_t[:, None] * (H * V) + o_v[None, :]" in loop
    assert "p_h = h + i_t * H * K * V + o_k[:, None] * V + o_v[None, :]" in loop
    assert rewritten(text, a_operands=True) is None


STATES_RUN = """
import importlib.util, sys
import torch

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

source, rewritten = load(sys.argv[1], "source"), load(sys.argv[2], "rewritten")
torch.manual_seed(0)
k, v = (torch.randn(1, 150, 2, 96, dtype=torch.float16) / 4 for _ in range(2))
expected, got = source.chunk_states(k, v), rewritten.chunk_states(k, v)
assert torch.equal(expected, got), (expected - got).abs().max()
print("SAME")
"""


@pytest.mark.slow
def test_the_rewritten_chunk_states_kernel_computes_what_the_source_computes(tmp_path: Path) -> None:
    result = _run_both(tmp_path, STATES, STATES_RUN, a_operands=True)
    assert result.returncode == 0 and "SAME" in result.stdout, result.stderr[-3000:]


# Attention's backward as the Triton tutorial writes it: Q read transposed through run-time strides, `qT_ptrs = Q +
# offs_m[None, :] * stride_tok + offs_d[:, None] * stride_d`, beside K, V and dO made with `offs_d[None, :] *
# stride_d`, and read as loaded by one dot and transposed by another.
BWD = (FIXTURES / "suite_attention_bwd.py").read_text(encoding="utf-8")
TUTORIAL_BWD = BWD
for old, new in [
        ("sm_scale, N_CTX, stride_bh, stride_tok,", "sm_scale, N_CTX, stride_bh, stride_tok, stride_d,"),
        ("offs_n[:, None] * stride_tok + offs_d[None, :]", "offs_n[:, None] * stride_tok + offs_d[None, :] * stride_d"),
        ("q_ptrs = Q + bh * stride_bh + offs_m[:, None] * stride_tok + offs_d[None, :]",
         "qT_ptrs = Q + bh * stride_bh + offs_m[None, :] * stride_tok + offs_d[:, None] * stride_d"),
        ("do_ptrs = DO + bh * stride_bh + offs_m[:, None] * stride_tok + offs_d[None, :]",
         "do_ptrs = DO + bh * stride_bh + offs_m[:, None] * stride_tok + offs_d[None, :] * stride_d"),
        ("q = tl.load(q_ptrs, mask=rows[:, None] < N_CTX, other=0.0)",
         "qT = tl.load(qT_ptrs, mask=rows[None, :] < N_CTX, other=0.0)"),
        ("qkT = tl.dot(k, tl.trans(q))", "qkT = tl.dot(k, qT)"),
        ("dk += tl.dot(dsT.to(tl.float16), q)", "dk += tl.dot(dsT.to(tl.float16), tl.trans(qT))"),
        ("q_ptrs += BLOCK_M * stride_tok", "qT_ptrs += BLOCK_M * stride_tok"),
        ("sm_scale, T, q.stride(0), q.stride(1),", "sm_scale, T, q.stride(0), q.stride(1), q.stride(2),")]:
    assert old in TUTORIAL_BWD, old
    TUTORIAL_BWD = TUTORIAL_BWD.replace(old, new)


def test_a_tile_read_transposed_through_run_time_strides_is_loaded_as_its_transpose() -> None:
    """Q^T's first axis is strided by `stride_d`, the last-axis stride of K, V, dO, dK and dV: loaded as [BLOCK_M,
    HEAD_DIM], its dots swap their forms; dO (its last axis `stride_d`) stays as written. An A operand, it is read as
    loaded, so gfx942's text changes too."""
    for a_operands in (False, True):
        text = rewritten(TUTORIAL_BWD, a_operands)
        assert text is not None
        loop = text.split("for start_m in range(0, N_CTX, BLOCK_M):")[1]
        # (the address swapped where it is bound, before the loop, and moved in it by `+=` of scalars)
        assert "qT_ptrs = Q + bh * stride_bh + offs_m[:, None] * stride_tok + offs_d[None, :] * stride_d" in text
        assert "qT = tl.load(qT_ptrs, mask=rows[:, None] < N_CTX, other=0.0)" in loop, loop
        assert "qkT = tl.dot(k, tl.trans(qT))" in loop
        assert "tl.dot(dsT.to(tl.float16), qT" in loop
        assert "do_ptrs = DO + bh * stride_bh + offs_m[:, None] * stride_tok + offs_d[None, :] * stride_d" in text
        assert rewritten(text, a_operands) is None


def test_a_tile_read_for_its_type_too_is_loaded_as_its_transpose() -> None:
    """`dsT.to(qT.dtype)` (FlagGems' spelling) reads Q^T's element type, the same read transposed: still rewritten;
    a read of its values outside the dots (`tl.where(..., qT, 0.0)`) leaves it as written."""
    typed = TUTORIAL_BWD.replace("dk += tl.dot(dsT.to(tl.float16), tl.trans(qT))",
                                 "dk += tl.dot(dsT.to(qT.dtype), tl.trans(qT))")
    assert typed != TUTORIAL_BWD
    text = rewritten(typed, True)
    assert text is not None and "tl.dot(dsT.to(qT.dtype), qT" in text
    valued = typed.replace("        qkT = tl.dot(k, qT)\n",
                           "        qT = tl.where(rows[None, :] < N_CTX, qT, 0.0)\n        qkT = tl.dot(k, qT)\n")
    assert valued != typed and rewritten(valued, True) is None


def test_a_tile_whose_last_axis_is_the_usual_one_is_left_as_written() -> None:
    """The same kernel with every tile but Q^T strided along its first axis by `stride_d`: Q^T is then the tile read
    as the others are, and nothing changes."""
    text = TUTORIAL_BWD.replace("offs_d[None, :] * stride_d", "offs_d[None, :] * stride_e").replace(
        "stride_tok, stride_d,", "stride_tok, stride_d, stride_e,")
    assert rewritten(text, True) is None


TUTORIAL_BWD_RUN = """
import importlib.util, sys
import torch

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

source, rewritten = load(sys.argv[1], "source"), load(sys.argv[2], "rewritten")
torch.manual_seed(0)
BH, T, D = 2, 100, 64
q, k, v, do = (torch.randn(BH, T, D, dtype=torch.float16) / 4 for _ in range(4))
m = torch.randn(BH, T, dtype=torch.float32).abs() + 4
delta = torch.randn(BH, T, dtype=torch.float32) / 4
expected = source.attention_bwd_dkdv(q, k, v, do, m, delta, 0.125)
got = rewritten.attention_bwd_dkdv(q, k, v, do, m, delta, 0.125)
for e, g in zip(expected, got):
    assert torch.equal(e, g), (e.float() - g.float()).abs().max()
print("SAME")
"""


@pytest.mark.slow
def test_the_rewritten_tutorial_backward_computes_what_the_source_computes(tmp_path: Path) -> None:
    result = _run_both(tmp_path, TUTORIAL_BWD, TUTORIAL_BWD_RUN, a_operands=True)
    assert result.returncode == 0 and "SAME" in result.stdout, result.stderr[-3000:]


@pytest.mark.slow
def test_the_tutorial_backward_is_pipelined_on_gfx950_and_compiles(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Read as its transpose, Q is the fixture's tile (suite_attention_bwd): the dK/dV loop is pipelined, its
    launcher runs the Gluon kernel where `stride_d` is 1, and the variant compiles."""
    import json
    import tempfile

    from transpile.engine import translate_source
    from transpile.targets import get_target
    from transpile.verify import verify

    result = translate_source(TUTORIAL_BWD, "bwd.py", get_target("gfx950"))
    assert result.functions[0].pipelined, result.functions[0].kept_reason
    # (the launcher runs the source kernel where it is not 1)
    assert re.search(r'unit=\("stride_d", ?\)', result.text), result.text
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {**json.loads((FIXTURES / "verify.json").read_text(encoding="utf-8"))["suite_attention_bwd.py"],
              "stride_d": 1}
    compiled = verify(result, values)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]
