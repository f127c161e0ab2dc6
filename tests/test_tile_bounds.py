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
                            cdiv=lambda a, b: -(-a // b))
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
])
def test_terms_the_proof_does_not_take_stay(prelude: str, span: str, defs: str, mask: str, why: str) -> None:
    _, peel = peel_of(kernel(prelude, span, defs, mask))
    assert peel is None, why


def test_count_text_reads_the_kernels_names() -> None:
    _, peel = peel_of(kernel(*CASES["tutorial"]))
    assert peel.count == "gl.maximum(K, 0) // BK"
    _, peel = peel_of(kernel(*CASES["split_k"]))
    assert peel.count == "gl.maximum(K + BK * SPLIT - BK - BK * pid_k, 0) // (BK * SPLIT)"
