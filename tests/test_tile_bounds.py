"""The K-tail peel's proof (`transpile.analysis.tile_bounds`), checked by evaluation: for each spelling of a K-tail
mask that public GEMMs write, the kernel is analysed as the pipeline rules analyse it, and the count of leading
iterations it gives is compared, over many sizes, with the iterations on which the mask term is true for every
element of the tile (the mask evaluated with torch, from the kernel's own statements). The count must never exceed
the truth (a dropped mask on a tile that needs it reads past the end) and, for these spellings, must equal it."""

from __future__ import annotations

import itertools
import types

import libcst as cst
import pytest
import torch

from transpile.analysis.layouts import analyse_layouts
from transpile.analysis.pipeline import LoopPlan, plan_loop
from transpile.analysis.tile_bounds import tail_peel
from transpile.cst_utils import conjuncts
from transpile.discover import discover
from transpile.source import parse_source

KERNEL = '''import triton
import triton.language as tl


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, M, K, pid_k, SPLIT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
       BK: tl.constexpr):
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
PRELUDE
    a_ptrs = a_ptr + offs_m[:, None] * K + tl.arange(0, BK)[None, :]
    b_ptrs = b_ptr + tl.arange(0, BK)[:, None] * BN + offs_n[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(RANGE):
DEFS
        a = tl.load(a_ptrs, mask=MASK, other=0.0)
        b = tl.load(b_ptrs)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK * BN
    tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc.to(tl.float16))
'''

# (prelude, range, in-loop definitions, mask): the spellings of a K-tail mask in public GEMMs
CASES = {
    "tutorial": ("offs_k = tl.arange(0, BK)", "0, tl.cdiv(K, BK)", "",
                 "(offs_m[:, None] < M) & (offs_k[None, :] < K - k * BK)"),
    "k_is_offset": ("offs_k = tl.arange(0, BK)", "0, K, BK", "", "offs_k[None, :] + k < K"),
    "offsets_in_loop": ("", "0, tl.cdiv(K, BK)", "kk = k * BK + tl.arange(0, BK)", "kk[None, :] < K"),
    "remaining": ("offs_k = tl.multiple_of(tl.arange(0, BK), BK)", "0, tl.cdiv(K, BK)", "k_left = K - k * BK",
                  "offs_k[None, :] < k_left"),
    "split_k": ("offs_k = pid_k * BK + tl.arange(0, BK)", "0, tl.cdiv(K, BK * SPLIT)", "",
                "offs_k[None, :] < K - k * (BK * SPLIT)"),
    "strided_range": ("offs_k = tl.arange(0, BK)", "pid_k, tl.cdiv(K, BK), SPLIT", "",
                      "offs_k[None, :] < K - k * BK"),
    "less_equal": ("offs_k = tl.arange(0, BK)", "0, tl.cdiv(K, BK)", "", "offs_k[None, :] <= K - 1 - k * BK"),
    "named_mask": ("offs_k = tl.arange(0, BK)", "0, tl.cdiv(K, BK)", "k_mask = offs_k < K - k * BK",
                   "(offs_m[:, None] < M) & k_mask[None, :]"),
    # a name the loop assigns (once, before the load) and the kernel assigns elsewhere too (a second loop)
    "rebound_elsewhere": ("offs_k = tl.arange(0, BK)\n    k_left = K\n    k_left = k_left + 1", "0, tl.cdiv(K, BK)",
                          "k_left = K - k * BK", "offs_k[None, :] < k_left"),
    "builtin_min": ("offs_k = tl.arange(0, BK)\n    k_end = min(K, 4096)", "0, k_end, BK", "",
                    "offs_k[None, :] + k < k_end"),
    "scaled": ("offs_k = tl.arange(0, BK)", "0, tl.cdiv(K, BK)", "", "offs_k[None, :] * 2 < K - k * BK"),
    # the form `transpile.passes.induction` writes for a carried `offs_k += BK`, on a widened index (vLLM)
    "carried_widened": ("offs_k = tl.arange(0, BK).to(tl.int64)", "0, tl.cdiv(K, BK)",
                        "k_mask = (offs_k + k * BK) < K", "(offs_m[:, None] < M) & k_mask[None, :]"),
    "reversed": ("k_end = K", "0, tl.cdiv(K, BK)", "", "k_end - k * BK > tl.arange(0, BK)[None, :]"),
    # a bound the kernel loads once, before the loop (a grouped GEMM's per-problem `K`; `tl.load(K)` evaluates to K)
    "loaded_bound": ("offs_k = tl.arange(0, BK)\n    k_end = tl.load(K)", "0, tl.cdiv(K, BK)", "",
                     "offs_k[None, :] < k_end - k * BK"),
}


def kernel(prelude: str, span: str, defs: str, mask: str) -> str:
    return (KERNEL.replace("PRELUDE", f"    {prelude}" if prelude else "").replace("RANGE", span)
            .replace("DEFS", f"        {defs}" if defs else "").replace("MASK", mask))


def peel_of(text: str):  # noqa: ANN201
    source = parse_source(text, "x.py")
    facts = discover(source)
    fn = facts.functions["mm"]
    loop = next(n for n in fn.node.body.body if isinstance(n, cst.For))
    plan = plan_loop(source, loop, analyse_layouts(facts)["mm"], 3)
    return plan, tail_peel(fn, plan) if isinstance(plan, LoopPlan) else None


_TL = types.SimpleNamespace(arange=lambda lo, hi: torch.arange(lo, hi), multiple_of=lambda x, _: x, int64=torch.int64,
                            cdiv=lambda a, b: -(-a // b), load=lambda value: value)
_GL = types.SimpleNamespace(maximum=max, minimum=min)


def full_iterations(prelude: str, span: str, defs: str, term: str, values: dict[str, int], count: str
                    ) -> tuple[int, int]:
    """(the iterations `count` claims, as the variant computes it; how many leading iterations `term` is true on for
    the whole tile)."""
    scope = {"tl": _TL, "offs_m": torch.arange(0, values["BM"]), **values}
    if prelude:
        exec("\n".join(line.strip() for line in prelude.splitlines()), scope)  # noqa: S102
    iterations = list(eval(f"range({span})", scope))  # noqa: S307
    claimed = min(len(iterations), eval(count, {**scope, "gl": _GL}))  # noqa: S307
    for j, k in enumerate(iterations):
        scope["k"] = k
        if defs:
            exec(defs, scope)  # noqa: S102
        if not bool(torch.all(eval(term, scope))):  # noqa: S307
            return claimed, j
    return claimed, len(iterations)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_count_is_the_iterations_whose_tiles_are_full(case: str) -> None:
    prelude, span, defs, mask = CASES[case]
    plan, peel = peel_of(kernel(prelude, span, defs, mask))
    assert peel is not None, case
    load = plan.loads[0]
    assert list(peel.dropped) == [load.index]
    terms = [cst.Module([]).code_for_node(t) for t in conjuncts(load.mask)]
    dropped = [terms[i] for i in peel.dropped[load.index]]
    assert len(dropped) == 1 and "M" not in dropped[0].replace("BM", "")  # the row bound is never dropped
    checked = 0
    for K, BK, SPLIT, pid_k in itertools.product((1, 15, 16, 31, 32, 33, 64, 100, 127, 128, 129, 4096, 4097),
                                                  (16, 32, 64), (1, 2, 4), (0, 1, 3)):
        if pid_k >= SPLIT:
            continue
        values = {"K": K, "BK": BK, "SPLIT": SPLIT, "pid_k": pid_k, "M": 64, "BM": 16}
        claimed, truth = full_iterations(prelude, span, defs, dropped[0], values, peel.count)
        assert claimed == truth, (case, values, peel.count)
        checked += 1
    assert checked == 234


@pytest.mark.parametrize("prelude, span, defs, mask, why", [
    ("offs_k = tl.arange(0, BK)", "0, tl.cdiv(K, BK)", "", "offs_m[:, None] < M", "does not read the loop variable"),
    ("offs_k = tl.arange(0, BK)", "0, tl.cdiv(K, BK)", "", "offs_k[None, :] < k * BK", "holds more as k grows"),
    ("offs_k = tl.arange(0, BK)", "0, K, M", "", "offs_k[None, :] + k < K", "a step that is not constexpr"),
    ("offs_k = tl.arange(0, BK)", "0, tl.cdiv(K, BK)", "offs_k = offs_k + 0", "offs_k[None, :] < K - k * BK",
     "a name assigned twice"),
    ("offs_k = tl.arange(0, BK)", "0, tl.cdiv(K, BK)", "", "offs_k[None, :] * offs_k[None, :] < K - k * BK",
     "a vector squared"),
    ("offs_k = tl.arange(0, BK)", "0, tl.cdiv(K, BK)", "", "offs_k[None, :] < (K - k * BK) // 2",
     "a division"),
    ("offs_k = tl.arange(0, BK) % K", "0, tl.cdiv(K, BK)", "", "offs_k[None, :] < K - k * BK", "a wrapped vector"),
    ("offs_k = tl.arange(0, BK)", "0, tl.cdiv(K, BK)", "k_mask = (offs_k < K - k * BK) & (offs_k < M)",
     "k_mask[None, :]", "a named mask with a term that does not read the loop variable"),
    ("offs_k = tl.arange(0, BK)", "0, tl.cdiv(K, BK)", "k_left = K - k * BK\n        k_left += 0",
     "offs_k[None, :] < k_left", "a name the loop assigns twice"),
    ("offs_k = tl.arange(0, BK)", "0, tl.cdiv(K, BK)", "k_end = tl.load(K)", "offs_k[None, :] < k_end - k * BK",
     "a bound loaded in the loop"),
    ("offs_k = tl.arange(0, BK)\n    k_end = tl.load(offs_k)", "0, tl.cdiv(K, BK)", "",
     "offs_k[None, :] < k_end - k * BK", "a load of a vector of addresses"),
])
def test_terms_the_proof_does_not_take_stay(prelude: str, span: str, defs: str, mask: str, why: str) -> None:
    _, peel = peel_of(kernel(prelude, span, defs, mask))
    assert peel is None, why


def test_count_text_reads_the_kernels_names() -> None:
    _, peel = peel_of(kernel(*CASES["tutorial"]))
    assert peel.count == "gl.maximum(K, 0) // BK"
    _, peel = peel_of(kernel(*CASES["split_k"]))
    assert peel.count == "gl.maximum(K + BK * SPLIT - BK - BK * pid_k, 0) // (BK * SPLIT)"


# ---- the scores' masks of a flash-attention loop (`leading_iterations`, over `loop_uniform_masks`) -----------------
ATTENTION = '''import triton
import triton.language as tl


@triton.jit
def attn(q_ptr, k_ptr, o_ptr, N_CTX, start_m, lo, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
         CAUSAL: tl.constexpr):
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    q = tl.load(q_ptr + offs_m[:, None] * 16 + tl.arange(0, 16)[None, :])
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start_n in range(RANGE):
        k = tl.load(k_ptr + (start_n + offs_n)[None, :] * 16 + tl.arange(0, 16)[:, None])
        qk = tl.dot(q, k)
MASK
        acc += qk
    tl.store(o_ptr + offs_m[:, None] * BLOCK_N + offs_n[None, :], acc)
'''

# (range, the statements that mask the scores): the spellings of flash-attention kernels
ATTENTION_CASES = {
    "tutorial": ("0, N_CTX, BLOCK_N", "valid = (start_n + offs_n)[None, :] < N_CTX\nif CAUSAL:\n"
                 "    valid = valid & (offs_m[:, None] >= (start_n + offs_n)[None, :])\n"
                 "qk = tl.where(valid, qk * 2.0, -float('inf'))"),
    "inline_causal": ("0, (start_m + 1) * BLOCK_M, BLOCK_N",
                      "qk = tl.where(offs_m[:, None] >= (start_n + offs_n[None, :]), qk, -1.0e8)"),
    "from_lo": ("lo, N_CTX, BLOCK_N", "qk = tl.where((start_n + offs_n[None, :]) < N_CTX, qk, -1.0e8)"),
}


def _attention_masks(span: str, mask: str):  # noqa: ANN202
    from transpile.analysis.layouts import name_terms
    from transpile.analysis.tile_bounds import leading_iterations
    from transpile.analysis.uniform_mask import loop_uniform_masks

    text = ATTENTION.replace("RANGE", span).replace("MASK", "\n".join(f"        {line}" for line in mask.splitlines()))
    source = parse_source(text, "x.py")
    facts = discover(source)
    fn = facts.functions["attn"]
    loop = next(n for n in fn.node.body.body if isinstance(n, cst.For))
    plan = types.SimpleNamespace(loop=loop, var="start_n")  # (what the proof reads of a loop plan)
    masks = loop_uniform_masks(source, fn, set(name_terms(analyse_layouts(facts)["attn"])), loop, "start_n",
                               list(range(len(loop.body.body))))
    assert len(masks) == 1
    guards = list(dict.fromkeys(g for g, _ in masks[0].terms))
    return {g: leading_iterations(fn, plan, [t for h, t in masks[0].terms if h == g]) for g in guards}


@pytest.mark.parametrize("case", sorted(ATTENTION_CASES))
def test_the_masks_hold_on_the_iterations_the_steady_state_runs(case: str) -> None:
    """The count of leading iterations a score mask holds on, for every tile element, equals the truth: the AMD
    steady state leaves the mask out on those iterations (`rules/amd_warp_pipeline._steady_masks`)."""
    span, mask = ATTENTION_CASES[case]
    counts = _attention_masks(span, mask)
    assert all(c is not None for c in counts.values()), counts
    checked = 0
    for N_CTX, start_m, BLOCK_M, BLOCK_N, lo_blocks, causal in itertools.product(
            (1, 63, 64, 65, 200, 256, 1000), (0, 1, 2, 5), (16, 64, 128), (16, 32, 64), (0, 1, 3), (False, True)):
        values = {"N_CTX": N_CTX, "start_m": start_m, "BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N,
                  "lo": lo_blocks * BLOCK_N, "CAUSAL": causal}
        scope = {**values, "tl": _TL, "gl": _GL}
        iterations = list(eval(f"range({span})", scope))  # noqa: S307
        claimed = len(iterations)
        for guard, count in counts.items():
            if guard is None or scope[guard]:
                claimed = min(claimed, eval(count, scope))  # noqa: S307
        truth = len(iterations)
        offs_m = start_m * BLOCK_M + torch.arange(0, BLOCK_M)
        for j, start_n in enumerate(iterations):
            qk = torch.ones(BLOCK_M, BLOCK_N)
            local = {**scope, "offs_m": offs_m, "offs_n": torch.arange(0, BLOCK_N), "start_n": start_n, "qk": qk,
                     "tl": types.SimpleNamespace(where=torch.where)}
            exec(mask.replace("float('inf')", "1.0e30"), local)  # noqa: S102
            if not bool(torch.all(local["qk"] == qk * (2.0 if "2.0" in mask else 1.0))):
                truth = j
                break
        assert claimed == truth, (case, values, counts)
        checked += 1
    assert checked == 7 * 4 * 3 * 3 * 3 * 2


# ---- tensor-descriptor tiles (`descriptor_peel`): the bound along the axis the loop moves ----------------------------

DESC_KERNEL = '''import triton
import triton.language as tl


@triton.jit
def mm(a_ptr, b_ptr, M, N, K, pid_k, SPLIT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(RANGE):
DEFS
        a = a_desc.load([0, OFFSET])
        b = b_desc.load([OFFSET, 0])
        acc = tl.dot(a, b, acc)
    a_desc.store([0, 0], acc.to(tl.float16))
'''

# (range, in-loop definitions, the K offset of both loads)
DESC_CASES = {
    "block_index": ("0, tl.cdiv(K, BK)", "", "k * BK"),
    "k_is_offset": ("0, K, BK", "", "k"),
    "offset_in_loop": ("0, tl.cdiv(K, BK)", "off_k = k * BK", "off_k"),
    "split_k": ("0, tl.cdiv(K, BK * SPLIT)", "", "(k * SPLIT + pid_k) * BK"),
}


@pytest.mark.parametrize("case", sorted(DESC_CASES))
def test_descriptor_tiles_inside_their_shape_for_the_count(case: str) -> None:
    """The count of leading iterations whose descriptor tiles lie inside the shape along K equals the truth (the
    offset plus the block within K), over many sizes; the axis is K's in each tile."""
    from transpile.analysis.tile_bounds import descriptor_peel

    span, defs, offset = DESC_CASES[case]
    text = (DESC_KERNEL.replace("RANGE", span).replace("DEFS", f"        {defs}" if defs else "")
            .replace("OFFSET", offset))
    source = parse_source(text, "x.py")
    facts = discover(source)
    fn = facts.functions["mm"]
    loop = next(n for n in fn.node.body.body if isinstance(n, cst.For))
    plan = plan_loop(source, loop, analyse_layouts(facts)["mm"], 3, transposed_operands=True)
    assert isinstance(plan, LoopPlan), plan
    found = descriptor_peel(fn, plan)
    assert found is not None, case
    count, axes = found
    assert sorted(axes.values()) == [0, 1]  # (K is A's columns and B's rows)
    for K, BK, SPLIT, pid_k in itertools.product((1, 15, 16, 33, 64, 127, 128, 129, 4097), (16, 64), (1, 2, 4),
                                                  (0, 1, 3)):
        if pid_k >= SPLIT:
            continue
        scope = {"tl": _TL, "K": K, "BK": BK, "SPLIT": SPLIT, "pid_k": pid_k}
        iterations = list(eval(f"range({span})", scope))  # noqa: S307
        claimed = min(len(iterations), eval(count, {**scope, "gl": _GL}))  # noqa: S307
        truth = len(iterations)
        for j, k in enumerate(iterations):
            scope["k"] = k
            if defs:
                exec(defs, scope)  # noqa: S102
            if eval(offset, scope) + BK > K:  # noqa: S307
                truth = j
                break
        assert claimed == truth, (case, K, BK, SPLIT, pid_k, count)


def test_a_descriptor_offset_not_moved_by_the_loop_is_not_taken() -> None:
    from transpile.analysis.tile_bounds import descriptor_peel

    text = DESC_KERNEL.replace("RANGE", "0, tl.cdiv(K, BK)").replace("DEFS", "").replace("OFFSET", "pid_k * BK")
    source = parse_source(text, "x.py")
    facts = discover(source)
    fn = facts.functions["mm"]
    loop = next(n for n in fn.node.body.body if isinstance(n, cst.For))
    plan = plan_loop(source, loop, analyse_layouts(facts)["mm"], 3, transposed_operands=True)
    assert isinstance(plan, LoopPlan)
    assert descriptor_peel(fn, plan) is None
