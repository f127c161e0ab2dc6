"""Names a dot loop's iteration binds more than once (`transpile.passes.reassigned_names`): each binding but the last
named afresh with the reads that see it; values carried between iterations, bindings in branches and loops without a
dot left as written. The rewritten loop is also run against the source's, with torch standing in for Triton."""

from __future__ import annotations

import pytest

from transpile.discover import discover
from transpile.passes.reassigned_names import rename_reassigned
from transpile.source import parse_source

KERNEL = '''import triton
import triton.language as tl


@triton.jit
def qk(q_ptr, k_ptr, out_ptr, n, D: tl.constexpr, BK: tl.constexpr):
    rows = tl.arange(0, 16)
    acc = tl.zeros((16, 16), dtype=tl.float32)
    for k0 in range(0, D, BK):
        offs = k0 + tl.arange(0, BK)
        mask = offs < D
        q = tl.load(q_ptr + rows[:, None] * D + offs[None, :], mask=mask[None, :], other=0.0)
        mask = (rows[:, None] < n) & mask[None, :]
        k = tl.load(k_ptr + rows[:, None] * D + offs[None, :], mask=mask, other=0.0)
        acc = tl.dot(q, tl.trans(k), acc)
    tl.store(out_ptr + rows[:, None] * 16 + rows[None, :], acc)
'''


def rewrite(text: str) -> str | None:
    source = parse_source(text, "k.py")
    result = rename_reassigned(source, discover(source))
    return None if result is None else result[0]


def test_each_binding_but_the_last_gets_a_name_of_its_own() -> None:
    text = rewrite(KERNEL)
    assert text is not None
    lines = [line.strip() for line in text.splitlines()]
    assert "mask_1 = offs < D" in lines
    assert "q = tl.load(q_ptr + rows[:, None] * D + offs[None, :], mask=mask_1[None, :], other=0.0)" in lines
    assert "mask = (rows[:, None] < n) & mask_1[None, :]" in lines  # the last binding keeps the name
    assert "k = tl.load(k_ptr + rows[:, None] * D + offs[None, :], mask=mask, other=0.0)" in lines
    assert len(text.splitlines()) == len(KERNEL.splitlines())  # lines kept
    assert rewrite(text) is None  # idempotent


@pytest.mark.parametrize("edit, why", [
    (("        mask = offs < D\n",
      "        mask = offs < D\n        c = mask\n        mask = mask & (offs >= 0)\n"), None),
    (("        offs = k0 + tl.arange(0, BK)\n", "        offs = k0 + tl.arange(0, BK)\n        c = mask\n"),
     "read before its first binding: the previous iteration's value"),
    (("        mask = (rows[:, None] < n) & mask[None, :]\n",
      "        if n > 8:\n            mask = (rows[:, None] < n) & mask[None, :]\n"), "bound in a branch"),
    (("        acc = tl.dot(q, tl.trans(k), acc)\n", "        acc += q\n"), "a loop without a dot"),
    (("        mask = (rows[:, None] < n) & mask[None, :]\n",
      "        mask, m2 = (rows[:, None] < n) & mask[None, :], 0\n"), "bound with another name on its line"),
])
def test_what_is_left_as_written(edit: tuple[str, str], why: str | None) -> None:
    text = KERNEL.replace(*edit)
    assert text != KERNEL
    result = rewrite(text)
    if why is None:  # three bindings: two fresh names, in order
        assert result is not None
        lines = [line.strip() for line in result.splitlines()]
        assert ["mask_1 = offs < D", "c = mask_1", "mask_2 = mask_1 & (offs >= 0)"] == lines[10:13]
        assert "mask = (rows[:, None] < n) & mask_2[None, :]" in lines
        return
    assert result is None, why


def test_a_fresh_name_is_not_one_the_kernel_uses() -> None:
    text = rewrite(KERNEL.replace("rows = tl.arange(0, 16)", "rows = tl.arange(0, 16)\n    mask_1 = rows"))
    assert text is not None and "mask_2 = offs < D" in text and "mask_1 = rows" in text


def test_the_renamed_loop_computes_the_same_values() -> None:
    """The loop body, run as Python on torch tensors with `tl` standing in: the same loads' masks, before and after."""
    import torch

    class TL:
        float32 = torch.float32

        @staticmethod
        def arange(lo, hi):
            return torch.arange(lo, hi)

    def body(text: str) -> list[str]:
        lines = text.splitlines()
        start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("for k0"))
        return [line[8:] for line in lines[start + 1:start + 6] if "tl.load" not in line]

    results = []
    for text in (KERNEL, rewrite(KERNEL)):
        env = {"tl": TL, "rows": torch.arange(16), "n": 11, "D": 40, "k0": 32, "BK": 16}
        for line in body(text):
            exec(line, env)  # noqa: S102 - the test's own kernel text
        results.append((env["mask"], env.get("mask_1", env["mask"])))
    assert torch.equal(results[0][0], results[1][0])


# The Triton tutorial's attention backward, inlined: `offs_m` makes Q^T's address before the loop and is bound again
# in it for the rows the iteration reads (the statistics, the causal mask).
SHADOWED = '''import triton
import triton.language as tl


@triton.jit
def dkdv(Q, M, k, out_ptr, start_m, stride_tok, num_steps, BLOCK_M: tl.constexpr, D: tl.constexpr):
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, D)
    qT_ptrs = Q + offs_m[None, :] * stride_tok + offs_k[:, None]
    curr_m = start_m
    acc = tl.zeros((D, BLOCK_M), dtype=tl.float32)
    for blk in range(num_steps):
        qT = tl.load(qT_ptrs)
        offs_m = curr_m + tl.arange(0, BLOCK_M)
        m = tl.load(M + offs_m)
        acc += tl.dot(k, qT) - m[None, :]
        curr_m += BLOCK_M
        qT_ptrs += BLOCK_M * stride_tok
    tl.store(out_ptr + offs_k[:, None] * BLOCK_M + tl.arange(0, BLOCK_M)[None, :], acc)
'''


def test_a_name_the_loop_binds_again_after_its_value_made_an_address_gets_a_name_of_its_own() -> None:
    """The loop's `offs_m` is named afresh in the loop (one value, one layout a name); the address made before the
    loop keeps reading the first. Left as written where the loop reads the name before binding it, or code after the
    loop reads it."""
    text = rewrite(SHADOWED)
    assert text is not None
    lines = [line.strip() for line in text.splitlines()]
    assert "qT_ptrs = Q + offs_m[None, :] * stride_tok + offs_k[:, None]" in lines
    assert "offs_m_1 = curr_m + tl.arange(0, BLOCK_M)" in lines
    assert "m = tl.load(M + offs_m_1)" in lines
    assert rewrite(text) is None
    read_first = SHADOWED.replace("        qT = tl.load(qT_ptrs)\n", "        qT = tl.load(qT_ptrs + offs_m[None, :] * 0)\n")
    assert read_first != SHADOWED and rewrite(read_first) is None
    read_after = SHADOWED.replace("tl.arange(0, BLOCK_M)[None, :], acc)", "offs_m[None, :], acc)")
    assert read_after != SHADOWED and rewrite(read_after) is None


BRANCHED = '''import triton
import triton.language as tl


@triton.jit
def state_dx(b_ptr, s_ptr, out_ptr, dstate, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
             BD: tl.constexpr):
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BD if BD <= 128 else BK)
    b_ptrs = b_ptr + offs_m[:, None] * dstate + offs_k[None, :]
    s_ptrs = s_ptr + offs_k[:, None] * BN + offs_n[None, :]
    if BD <= 128:
        b = tl.load(b_ptrs, mask=offs_k[None, :] < dstate, other=0.0)
        s = tl.load(s_ptrs, mask=offs_k[:, None] < dstate, other=0.0)
        s = s.to(b_ptr.dtype.element_ty)
        acc = tl.dot(b, s)
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, dstate, BK):
            b = tl.load(b_ptrs, mask=offs_k[None, :] < dstate - k, other=0.0)
            s = tl.load(s_ptrs, mask=offs_k[:, None] < dstate - k, other=0.0)
            s = s.to(b_ptr.dtype.element_ty)
            acc += tl.dot(b, s)
            b_ptrs += BK
            s_ptrs += BK * BN
    tl.store(out_ptr + offs_m[:, None] * BN + offs_n[None, :], acc)
'''


def test_a_loop_in_a_branch_names_afresh_what_the_branch_beside_it_binds() -> None:
    """mamba's state kernels compute the product once where a flag allows (`if BD <= 128:`) and loop otherwise, with
    the same names: the loop's `b` and `s` (each binding of `s`, the load and its cast) take names of their own, so
    the loop's tiles have layouts of their own; `acc`, read after the `if`, keeps its name. A name read after the
    `if` is left as written."""
    text = rewrite(BRANCHED)
    assert text is not None
    lines = [line.strip() for line in text.splitlines()]
    assert "b_1 = tl.load(b_ptrs, mask=offs_k[None, :] < dstate - k, other=0.0)" in lines
    assert "s_1 = s_1.to(b_ptr.dtype.element_ty)" in lines and "acc += tl.dot(b_1, s_1)" in lines
    assert "b = tl.load(b_ptrs, mask=offs_k[None, :] < dstate, other=0.0)" in lines  # (the other branch as written)
    assert rewrite(text) is None
    read_after = BRANCHED.replace("tl.store(out_ptr + offs_m[:, None] * BN + offs_n[None, :], acc)",
                                  "tl.store(out_ptr + offs_m[:, None] * BN + offs_n[None, :], acc + s)")
    after = rewrite(read_after)
    assert after is None or "s_1" not in after
