#!/usr/bin/env python
"""Numerical check of the fixture kernels and of their translated Gluon variants.

For every case: build seeded random inputs with ragged sizes, run the original fixture's host wrapper and
compare it with a torch reference. With --variant-dir, also import the translated module
``DIR/<fixture>_<target>.py`` (same host wrapper, same kernel names, Gluon kernels), run the same wrapper on
the same inputs and compare it with the original. One line per case; exit status 1 if any case fails.

    python tests/gpu/check_fixtures.py                                    # originals, on the GPU
    python tests/gpu/check_fixtures.py --variant-dir out --target sm90    # variants against originals
    python tests/gpu/check_fixtures.py --interpret --case softmax         # Triton interpreter, on the CPU

--case takes a case name or a fixture name (all of that fixture's cases) and may be repeated. --interpret
uses each case's small sizes, the interpreter being slow. --all-configs runs the cases of autotuned
fixtures once per autotune config (lines NAME@cfgI) rather than only with the config the autotuner picks.
"""

from __future__ import annotations

import argparse
import functools
import math
import importlib.util
import os
import sys
import traceback
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch  # importing torch does not import triton, so TRITON_INTERPRET can still be set below
import torch.nn.functional as F

FIXTURES_DIR = Path(__file__).resolve().parents[2] / "fixtures"

Shape = dict[str, int]


@dataclass(frozen=True)
class Case:
    name: str
    fixture: str  # module stem in fixtures/
    wrapper: str  # host function of that module to call
    make_inputs: Callable[[Shape, torch.device, torch.Generator], tuple]  # positional arguments of the wrapper
    reference: Callable[..., Any] | None  # torch implementation, called like the wrapper (None: random output,
    # such as dropout's, only the variant is compared with the original)
    shape: Shape  # sizes on the GPU
    small_shape: Shape  # sizes under the interpreter, which is slow
    options: dict[str, Any] = field(default_factory=dict)  # keyword arguments of the wrapper and the reference
    atol: float = 1e-2
    rtol: float = 1e-2
    # Benchmark (bench/bench_fixtures.py): realistic sizes and the floating-point operations of one call at them.
    # Every fixture with a dot loop has them; the benchmark times the original and the variant at bench_shape.
    bench_shape: Shape | None = None
    flops: Callable[[Shape], float] | None = None


# ---------------------------------------------------------------------------------------------------------------------
# Inputs. Random tensors are drawn on the CPU from a per-case generator, so a case sees the same data whatever
# the device and whichever other cases run.


def _randn(gen, *size, dtype=torch.float16, device):
    return torch.randn(*size, generator=gen).to(device=device, dtype=dtype)


def _gemm_inputs(s, device, gen):
    return _randn(gen, s["M"], s["K"], device=device), _randn(gen, s["K"], s["N"], device=device)


def _linear_weight_inputs(s, device, gen):
    # an `nn.Linear` weight: [N, K], K-contiguous
    return _randn(gen, s["M"], s["K"], device=device), _randn(gen, s["N"], s["K"], device=device)


def _batched_gemm_inputs(s, device, gen):
    return _randn(gen, s["B"], s["M"], s["K"], device=device), _randn(gen, s["B"], s["K"], s["N"], device=device)


def _grouped_gemm_inputs(s, device, gen):
    # problems of several shapes: rows of A 16-byte aligned or not (K odd in the last), B's rows likewise (N)
    shapes = [(s["M"], s["N"], s["K"]), (s["M"] // 2 + 3, s["N"] // 2, s["K"] + 8),
              (s["M"] // 3, s["N"] + 3, s["K"] - 3)]
    return ([_randn(gen, m, k, device=device) for m, _, k in shapes],
            [_randn(gen, k, n, device=device) for _, n, k in shapes])


def _bias_gemm_inputs(s, device, gen):
    a, b = _gemm_inputs(s, device, gen)
    return a, b, _randn(gen, s["N"], device=device)


def _int8_gemm_inputs(s, device, gen):
    a = torch.randint(-128, 128, (s["M"], s["K"]), generator=gen, dtype=torch.int8)
    b = torch.randint(-128, 128, (s["K"], s["N"]), generator=gen, dtype=torch.int8)
    # Scales of about 1e-2 bring the int32 sums (about 1e5) to outputs of order 10, well inside fp16.
    scale_a = torch.rand(s["M"], generator=gen) * 1e-2 + 5e-3
    scale_b = torch.rand(s["N"], generator=gen) * 1e-2 + 5e-3
    return tuple(t.to(device) for t in (a, b, scale_a, scale_b))


def _fp8_gemm_inputs(s, device, gen):
    """fp8 (e4m3) operands with per-row and per-column float32 scales, as `_int8_gemm_inputs` gives int8 ones."""
    a = torch.randn(s["M"], s["K"], generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(s["K"], s["N"], generator=gen).to(torch.float8_e4m3fn)
    scale_a = torch.rand(s["M"], generator=gen) * 1e-2 + 5e-3
    scale_b = torch.rand(s["N"], generator=gen) * 1e-2 + 5e-3
    return tuple(t.to(device) for t in (a, b, scale_a, scale_b))


def _moe_inputs(s, device, gen):
    """Each expert gets a random number of distinct tokens; the rest of its M slots are -1 padding."""
    a = _randn(gen, s["T"], s["K"], device=device)
    idx = torch.full((s["E"], s["M"]), -1, dtype=torch.int32)
    for e in range(s["E"]):
        count = int(torch.randint(s["M"] // 2, s["M"] + 1, (1,), generator=gen))
        idx[e, :count] = torch.randperm(s["T"], generator=gen)[:count].to(torch.int32)
    b = _randn(gen, s["E"], s["K"], s["N"], device=device) / s["K"] ** 0.5
    return a, idx.to(device), b


def _two_gemms_inputs(s, device, gen):
    x = _randn(gen, s["M"], s["K"], device=device)
    scale = s["K"] ** -0.5  # outputs of order 1 (the product of two projections stays well inside fp16)
    return x, _randn(gen, s["K"], s["N"], device=device) * scale, _randn(gen, s["K"], s["N"], device=device) * scale


def _attention_inputs(s, device, gen):
    size = (s["Z"], s["H"], s["N_CTX"], s["HEAD_DIM"])
    return tuple(_randn(gen, *size, device=device) for _ in range(3))


def _rows_inputs(dtype):
    def make(s, device, gen):
        return (_randn(gen, s["M"], s["N"], dtype=dtype, device=device),)

    return make


def _norm_inputs(with_bias):
    def make(s, device, gen):
        # Off-centre rows (mean ~1, std ~2), so that a wrong mean or variance shows.
        x = (torch.randn(s["B"], s["M"], s["N"], generator=gen) * 2 + 1).to(device=device, dtype=torch.float16)
        weight = torch.rand(s["N"], generator=gen).to(device=device, dtype=torch.float16)
        if not with_bias:
            return x, weight
        return x, weight, _randn(gen, s["N"], device=device)

    return make


def _bias_rows_inputs(s, device, gen):
    return _randn(gen, s["M"], s["N"], device=device), _randn(gen, s["N"], device=device)


def _elementwise_pair_inputs(s, device, gen):
    return tuple(_randn(gen, s["n"], dtype=torch.float32, device=device) for _ in range(2))


def _bc_rotary_inputs(s, device, gen):
    q = _randn(gen, s["T"], s["H"], s["D"], device=device)
    angles = torch.rand(s["P"], s["D"] // 2, generator=gen) * 6.28
    positions = torch.randint(0, s["P"], (s["T"],), generator=gen)
    return q, angles.cos().to(device), angles.sin().to(device), positions.to(device)


def _bc_logits_inputs(s, device, gen):
    logits = (torch.randn(s["M"], s["V"], generator=gen) * 3).to(device=device, dtype=torch.float16)
    return logits, torch.randint(0, s["V"], (s["M"],), generator=gen).to(device)


def _bc_dequant_inputs(s, device, gen):
    a = _randn(gen, s["M"], s["K"], device=device)
    w = torch.randint(-128, 128, (s["K"], s["N"]), generator=gen, dtype=torch.int8).to(device)
    scales = (torch.rand(s["N"], generator=gen) * 1e-2 + 5e-3).to(device)
    return a, w, scales


def _gated_operand_inputs(s, device, gen):
    # (a gate near 1: exp of small values, as a decay's log)
    x = _randn(gen, s["M"], s["K"], device=device)
    g = (0.1 * torch.randn(s["M"], s["K"], generator=gen)).to(device=device, dtype=torch.float16)
    return x, g, _randn(gen, s["K"], s["N"], device=device)


def _cast_operand_inputs(s, device, gen):
    # (fp16: Triton's interpreter casts integers to bf16 by their bits)
    a = _randn(gen, s["M"], s["K"], device=device)
    b = torch.randint(-8, 8, (s["K"], s["N"]), generator=gen, dtype=torch.int16).to(device)
    return a, b


def _gptq_inputs(s, device, gen):
    K, N, group = s["K"], s["N"], s["G"]
    a = _randn(gen, s["M"], K, device=device) * 0.1
    q = torch.randint(0, 16, (K, N), generator=gen, dtype=torch.int32)
    packed = torch.zeros(K // 8, N, dtype=torch.int32)
    for i in range(8):  # row k in word k // 8, bits 4 * (k % 8)
        packed |= q[i::8] << (4 * i)
    z = torch.randint(0, 15, (K // group, N), generator=gen, dtype=torch.int32)
    zeros = torch.zeros(K // group, N // 8, dtype=torch.int32)
    for i in range(8):
        zeros |= z[:, i::8] << (4 * i)
    scales = (torch.rand(K // group, N, generator=gen) * 1e-2 + 5e-3).half()
    return a, packed.to(device), scales.to(device), zeros.to(device), group


def _bc_int4_inputs(s, device, gen):
    a = _randn(gen, s["M"], s["K"], device=device)
    q = torch.randint(0, 16, (s["K"], s["N"]), generator=gen, dtype=torch.uint8)
    packed = q[0::2] | (q[1::2] << 4)
    scales = torch.rand(s["N"], generator=gen) * 2e-1 + 5e-2
    return a, packed.to(device), scales.to(device)


def _bc_layer_norm_inputs(s, device, gen):
    x = (torch.randn(s["M"], s["N"], generator=gen) * 2 + 1).to(device=device, dtype=torch.float16)
    return x, _randn(gen, s["N"], device=device), _randn(gen, s["N"], device=device)


# ---------------------------------------------------------------------------------------------------------------------
# Torch references, computed in float64 (GEMMs) or float32 so that they are more accurate than the kernels.


def _ref_matmul(a, b, split_k=1):
    return a.double() @ b.double()


def _ref_linear_weight(a, w):
    return a.double() @ w.double().T


def _ref_grouped_gemm(a_list, b_list):
    return [a.double() @ b.double() for a, b in zip(a_list, b_list)]


def _ref_bmm(a, b):
    return torch.bmm(a.double(), b.double())


def _ref_rms_linear(x, w):
    xd = x.double()
    return (xd * torch.rsqrt((xd * xd).mean(dim=1, keepdim=True) + 1e-6)) @ w.double()


def _ref_matmul_bias_act(a, b, bias, activation="leaky_relu"):
    c = a.double() @ b.double() + bias.double()
    return F.leaky_relu(c, 0.01) if activation == "leaky_relu" else c


def _ref_int8_matmul_scaled(a, b, scale_a, scale_b):
    return (a.double() @ b.double()) * scale_a.double()[:, None] * scale_b.double()[None, :]


def _ref_gather_gemm(a, idx, b):
    # Padding slots (-1) read an extra all-zero row appended to A.
    a_padded = torch.cat([a.double(), a.new_zeros(1, a.shape[1], dtype=torch.float64)])
    rows = torch.where(idx < 0, a.shape[0], idx).long()
    return torch.bmm(a_padded[rows], b.double())


def _ref_attention(q, k, v, causal, sm_scale):
    scores = (q.double() @ k.double().transpose(-1, -2)) * sm_scale
    if causal:
        n = q.shape[2]
        future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v.double()


def _ref_linear(x, w, bias=None):
    y = x.double() @ w.double()
    return y if bias is None else y + bias.double()


def _ref_gated_mlp(x, w_gate, w_up):
    gate = x.double() @ w_gate.double()
    return gate * torch.sigmoid(gate) * (x.double() @ w_up.double())


def _ref_layer_norm(x, weight, bias, eps):
    x32 = x.float()
    mean = x32.mean(dim=-1)
    rstd = torch.rsqrt(x32.var(dim=-1, unbiased=False) + eps)
    y = F.layer_norm(x32, (x.shape[-1],), weight.float(), bias.float(), eps)
    return y, mean.reshape(-1), rstd.reshape(-1)


def _ref_rms_norm(x, weight, eps=1e-6):
    x32 = x.float()
    return x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()


def _ref_bias_gelu(x, bias):
    return F.gelu(x.float() + bias.float(), approximate="tanh")


def _ref_residual_add_clamp(x, residual, alpha=0.5, lo=-1.0, hi=1.0):
    return torch.clamp(x + alpha * residual, lo, hi)


def _ref_column_minmax(x):
    x32 = x.float()
    return x32.amax(dim=0), x32.amin(dim=0), x32.abs().amax(dim=0)


def _ref_bc_rotary(q, cos, sin, positions):
    half = q.shape[-1] // 2
    c, si = cos[positions][:, None, :].double(), sin[positions][:, None, :].double()
    x1, x2 = q[..., :half].double(), q[..., half:].double()
    return torch.cat([x1 * c - x2 * si, x2 * c + x1 * si], dim=-1)


def _ref_bc_cross_entropy(logits, target, scale=1.0):
    return F.cross_entropy(logits.float() * scale, target, reduction="none")


def _ref_bc_dequant_matmul(a, w, scales):
    return a.double() @ (w.float() * scales).half().double()


def _ref_gated_matmul(x, g, w):
    return (x.double() * torch.exp(g.double())).half().double() @ w.double()


def _ref_cast_operand_gemm(a, b):
    return (a.double() @ b.to(a.dtype).double()).to(a.dtype)


def _ref_w4a16_gptq(a, packed, scales, zeros, group):
    K = packed.shape[0] * 8
    q = torch.stack([(packed >> (4 * i)) & 0xF for i in range(8)], dim=1).reshape(K, -1)
    z = torch.stack([(zeros >> (4 * i)) & 0xF for i in range(8)], dim=2).reshape(zeros.shape[0], -1) + 1
    rows = torch.arange(K, device=packed.device) // group
    w = ((q - z[rows]).float() * scales[rows].float()).half()
    return a.double() @ w.double()


def _ref_bc_int4_matmul(a, packed, scales):
    q = torch.stack([packed & 0xF, packed >> 4], dim=1).reshape(-1, packed.shape[1])  # rows 2i, 2i + 1
    return a.double() @ ((q.float() - 8.0) * scales).half().double()


def _ref_bc_layer_norm(x, weight, bias, eps=1e-5):
    return F.layer_norm(x.float(), (x.shape[-1],), weight.float(), bias.float(), eps)


# ---------------------------------------------------------------------------------------------------------------------
# Benchmark sizes and operation counts (bench/bench_fixtures.py).

GEMM_BENCH: Shape = dict(M=4096, N=4096, K=4096)


def _gemm_flops(s: Shape) -> float:
    return 2.0 * s["M"] * s["N"] * s["K"]


def _attention_flops(causal: bool):
    def flops(s: Shape) -> float:  # two GEMMs of N_CTX x N_CTX x HEAD_DIM per head; causal: half of them
        return 4.0 * s["Z"] * s["H"] * s["N_CTX"] ** 2 * s["HEAD_DIM"] * (0.5 if causal else 1.0)

    return flops


# ---------------------------------------------------------------------------------------------------------------------
# Inputs and references of the suite_ fixtures.


def _scaled_gemm_inputs(s, device, gen):
    """fp16 A [M, K] and B [K, N] scaled by 1/sqrt(K): outputs of order 1 (epilogues with nonlinearities)."""
    a, b = _gemm_inputs(s, device, gen)
    return a, b / s["K"] ** 0.5


def _scaled_bias_gemm_inputs(s, device, gen):
    a, b = _scaled_gemm_inputs(s, device, gen)
    return a, b, _randn(gen, s["N"], device=device)


def _ref_linear_gelu(x, w, bias):
    return F.gelu(x.double() @ w.double() + bias.double(), approximate="tanh")


def _swiglu_inputs(s, device, gen):
    a, wg = _scaled_gemm_inputs(s, device, gen)
    return a, wg, _randn(gen, s["K"], s["N"], device=device) / s["K"] ** 0.5


def _ref_swiglu_gemm(x, wg, wu):
    g = x.double() @ wg.double()
    return F.silu(g) * (x.double() @ wu.double())


def _gated_linear_inputs(s, device, gen):
    """x [M, K] and the gate and up weights stored [N, K] (linear layers), scaled to keep the products near 1."""
    scale = s["K"] ** 0.5
    return (_randn(gen, s["M"], s["K"], device=device), _randn(gen, s["N"], s["K"], device=device) / scale,
            _randn(gen, s["N"], s["K"], device=device) / scale)


def _ref_gated_linear(x, wg, wu):
    g = x.double() @ wg.double().T
    return F.silu(g) * (x.double() @ wu.double().T)


def _bmm_inputs(s, device, gen):
    return (_randn(gen, s["B"], s["M"], s["K"], device=device), _randn(gen, s["B"], s["K"], s["N"], device=device))


def _bmm_flops(s: Shape) -> float:
    return 2.0 * s["B"] * s["M"] * s["N"] * s["K"]


def _linear_nk_inputs(dtype, with_bias=False):
    """x [M, K] and a weight stored [N, K] (torch.nn.Linear), optionally a bias [N]."""

    def make(s, device, gen):
        x = _randn(gen, s["M"], s["K"], dtype=dtype, device=device)
        w = _randn(gen, s["N"], s["K"], dtype=dtype, device=device)
        return (x, w, _randn(gen, s["N"], dtype=dtype, device=device)) if with_bias else (x, w)

    return make


def _ref_linear_nk(x, w, bias=None):
    y = x.double() @ w.double().T
    return y if bias is None else y + bias.double()


def _fp32_gemm_inputs(s, device, gen):
    return (_randn(gen, s["M"], s["K"], dtype=torch.float32, device=device),
            _randn(gen, s["K"], s["N"], dtype=torch.float32, device=device))


def _fp8_blockscale_inputs(s, device, gen):
    kb, nb = -(-s["K"] // 128), -(-s["N"] // 128)
    a = torch.randn(s["M"], s["K"], generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(s["K"], s["N"], generator=gen).to(torch.float8_e4m3fn)
    a_scale = torch.rand(s["M"], kb, generator=gen) * 0.1 + 0.02
    b_scale = torch.rand(kb, nb, generator=gen) * 0.1 + 0.02
    return tuple(t.to(device) for t in (a, b, a_scale, b_scale))


def _ref_fp8_blockscale(a, b, a_scale, b_scale):
    k, n = a.shape[1], b.shape[1]
    a_full = a.double() * a_scale.double().repeat_interleave(128, dim=1)[:, :k]
    b_full = b.double() * b_scale.double().repeat_interleave(128, dim=0)[:k].repeat_interleave(128, dim=1)[:, :n]
    return a_full @ b_full


def _block_fp8_linear_inputs(s, device, gen):
    """x [M, K] and w [N, K] e4m3; x's scales per row and 128-wide K block, w's per 128 x 128 block."""
    kb, nb = -(-s["K"] // 128), -(-s["N"] // 128)
    x = torch.randn(s["M"], s["K"], generator=gen).to(torch.float8_e4m3fn)
    w = torch.randn(s["N"], s["K"], generator=gen).to(torch.float8_e4m3fn)
    x_scale = torch.rand(s["M"], kb, generator=gen) * 0.1 + 0.02
    w_scale = torch.rand(nb, kb, generator=gen) * 0.1 + 0.02
    return tuple(t.to(device) for t in (x, w, x_scale, w_scale))


def _ref_block_fp8_linear(x, w, x_scale, w_scale, **_):
    k, n = x.shape[1], w.shape[0]
    x_full = x.double() * x_scale.double().repeat_interleave(128, dim=1)[:, :k]
    w_full = w.double() * w_scale.double().repeat_interleave(128, dim=0)[:n].repeat_interleave(128, dim=1)[:, :k]
    return x_full @ w_full.T


# MX (OCP microscaling) GEMM: e2m1 values two a byte (the low nibble first) along K, one e8m0 scale byte (2^(s - 127))
# per 32 values along K.
_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def _mx_inputs(s, device, gen):
    m, n, k = s["M"], s["N"], s["K"]
    a = torch.randint(0, 256, (m, k // 2), generator=gen, dtype=torch.int32).to(torch.uint8)
    b = torch.randint(0, 256, (k // 2, n), generator=gen, dtype=torch.int32).to(torch.uint8)
    a_scale = torch.randint(122, 132, (m, k // 32), generator=gen, dtype=torch.int32).to(torch.uint8)
    b_scale = torch.randint(122, 132, (n, k // 32), generator=gen, dtype=torch.int32).to(torch.uint8)
    return tuple(t.to(device) for t in (a, b, a_scale, b_scale))


def _e2m1_values(packed, axis):
    """The fp4 values of `packed` bytes, two a byte along `axis` (low nibble first), as float64."""
    table = torch.tensor(_E2M1, dtype=torch.float64, device=packed.device)
    codes = packed.to(torch.int64)
    halves = [codes & 0xF, codes >> 4]
    values = [table[h & 0x7] * torch.where(h >= 8, -1.0, 1.0).to(torch.float64) for h in halves]
    return torch.stack(values, dim=axis + 1).flatten(axis, axis + 1)


def _ref_mx_gemm(a, b, a_scale, b_scale):
    a_full = _e2m1_values(a, 1) * torch.exp2(a_scale.double() - 127).repeat_interleave(32, dim=1)
    b_full = _e2m1_values(b, 0) * torch.exp2(b_scale.double() - 127).repeat_interleave(32, dim=1).T
    return a_full @ b_full


def _mx_flops(s):
    return 2.0 * s["M"] * s["N"] * s["K"]


def _lora_inputs(s, device, gen):
    x, w = _gemm_inputs(s, device, gen)
    lora_a = _randn(gen, s["K"], s["R"], device=device) / s["K"] ** 0.5
    lora_b = _randn(gen, s["R"], s["N"], device=device)
    return x, w, lora_a, lora_b


def _ref_lora(x, w, lora_a, lora_b, scaling=0.5):
    x64 = x.double()
    return x64 @ w.double() + scaling * (x64 @ lora_a.double()) @ lora_b.double()


def _lora_flops(s: Shape) -> float:
    return 2.0 * s["M"] * s["K"] * (s["N"] + s["R"]) + 2.0 * s["M"] * s["R"] * s["N"]


def _moe_sorted_inputs(s, device, gen, block_m=64):
    """Top-1 routing of T tokens to E experts; each expert's tokens padded to block_m with the id T."""
    a = _randn(gen, s["T"], s["K"], device=device)
    b = _randn(gen, s["E"], s["K"], s["N"], device=device) / s["K"] ** 0.5
    expert_of = torch.randint(0, s["E"], (s["T"],), generator=gen)
    sorted_ids, expert_ids = [], []
    for e in range(s["E"]):
        tokens = torch.nonzero(expert_of == e).flatten().to(torch.int32)
        blocks = -(-len(tokens) // block_m)
        padded = torch.full((blocks * block_m,), s["T"], dtype=torch.int32)
        padded[: len(tokens)] = tokens
        sorted_ids.append(padded)
        expert_ids += [e] * blocks
    return a, b, torch.cat(sorted_ids).to(device), torch.tensor(expert_ids, dtype=torch.int32).to(device)


def _ref_moe_sorted(a, b, sorted_ids, expert_ids, block_m=64):
    out = torch.zeros(a.shape[0], b.shape[2], dtype=torch.float64, device=a.device)
    for block, expert in enumerate(expert_ids.tolist()):
        ids = sorted_ids[block * block_m:(block + 1) * block_m].long()
        ids = ids[ids < a.shape[0]]
        out[ids] = a[ids].double() @ b[expert].double()
    return out


def _moe_sorted_flops(s: Shape) -> float:
    return 2.0 * s["T"] * s["N"] * s["K"]


def _moe_fp8_inputs(s, device, gen, block_m=64):
    """Top-1 routing of T tokens to E experts (as `_moe_sorted_inputs`), e4m3 data: a [T, K] with a scale per token
    and 128-wide K block, w [E, N, K] with one per 128 x 128 block of each expert."""
    kb, nb = -(-s["K"] // 128), -(-s["N"] // 128)
    a = torch.randn(s["T"], s["K"], generator=gen).to(torch.float8_e4m3fn)
    w = torch.randn(s["E"], s["N"], s["K"], generator=gen).to(torch.float8_e4m3fn)
    a_scale = torch.rand(s["T"], kb, generator=gen) * 0.1 + 0.02
    w_scale = torch.rand(s["E"], nb, kb, generator=gen) * 0.1 + 0.02
    expert_of = torch.randint(0, s["E"], (s["T"],), generator=gen)
    sorted_ids, expert_ids = [], []
    for e in range(s["E"]):
        tokens = torch.nonzero(expert_of == e).flatten().to(torch.int32)
        blocks = -(-len(tokens) // block_m)
        padded = torch.full((blocks * block_m,), s["T"], dtype=torch.int32)
        padded[: len(tokens)] = tokens
        sorted_ids.append(padded)
        expert_ids += [e] * blocks
    return (*(t.to(device) for t in (a, w, a_scale, w_scale)), torch.cat(sorted_ids).to(device),
            torch.tensor(expert_ids, dtype=torch.int32).to(device))


def _ref_moe_fp8(a, w, a_scale, w_scale, sorted_ids, expert_ids, block_m=64, **_):
    k, n = a.shape[1], w.shape[1]
    a_full = a.double() * a_scale.double().repeat_interleave(128, dim=1)[:, :k]
    out = torch.zeros(a.shape[0], n, dtype=torch.float64, device=a.device)
    for block, expert in enumerate(expert_ids.tolist()):
        ids = sorted_ids[block * block_m:(block + 1) * block_m].long()
        ids = ids[ids < a.shape[0]]
        scale = w_scale[expert].double().repeat_interleave(128, dim=0)[:n].repeat_interleave(128, dim=1)[:, :k]
        out[ids] = a_full[ids] @ (w[expert].double() * scale).T
    return out


def _gqa_inputs(s, device, gen):
    q = _randn(gen, s["Z"], s["H"], s["N_CTX"], s["HEAD_DIM"], device=device)
    kv = (s["Z"], s["H_KV"], s["N_CTX"], s["HEAD_DIM"])
    return q, _randn(gen, *kv, device=device), _randn(gen, *kv, device=device)


def _moe_rows_inputs(s, device, gen):
    """Tokens sorted by expert: E experts with ragged counts (one empty, one shorter than a tile) summing to T."""
    weights = torch.rand(s["E"], generator=gen)
    weights[1] = 0.0
    counts = (weights / weights.sum() * s["T"]).floor().to(torch.int64)
    counts[2] = min(int(counts[2]), 5)
    counts[0] += s["T"] - int(counts.sum())
    return (_randn(gen, s["T"], s["K"], device=device), _randn(gen, s["E"], s["N"], s["K"], device=device),
            [int(c) for c in counts])


def _ref_moe_rows(x, w, counts):
    out, start = [], 0
    for e, count in enumerate(counts):
        out.append(x[start:start + count].double() @ w[e].double().T)
        start += count
    return torch.cat(out)


def _ref_gqa(q, k, v, causal, sm_scale):
    group = q.shape[1] // k.shape[1]
    return _ref_attention(q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1), causal, sm_scale)


def _linear_attn_inputs(s, device, gen):
    size = (s["B"], s["H"], s["T"], s["D"])
    return tuple(_randn(gen, *size, device=device) * 0.5 for _ in range(3))


def _ref_linear_attn(q, k, v, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (q.double() @ k.double().transpose(-1, -2)) * scale
    return scores.tril() @ v.double()


def _linear_attn_flops(s: Shape) -> float:  # per 64-row chunk: q k^T, scores v, q S and k^T v
    return 4.0 * s["B"] * s["H"] * s["T"] * s["D"] * (64 + s["D"])


def _ref_online_softmax(x):
    return torch.softmax(x.float(), dim=-1)


def _add_rmsnorm_inputs(s, device, gen):
    x = _randn(gen, s["M"], s["N"], device=device)
    residual = _randn(gen, s["M"], s["N"], device=device)
    return x, residual, torch.rand(s["N"], generator=gen).to(device=device, dtype=torch.float16)


def _ref_add_rmsnorm(x, residual, weight, eps=1e-6):
    h = x.float() + residual.float()
    return _ref_rms_norm(h, weight, eps), h


def _cross_entropy_inputs(s, device, gen):
    logits = torch.randn(s["M"], s["V"], generator=gen) * 3
    target = torch.randint(0, s["V"], (s["M"],), generator=gen)
    target[::7] = -100  # ignored rows
    return logits.to(device), target.to(device)


def _ref_cross_entropy(logits, target, ignore_index=-100):
    lse = torch.logsumexp(logits.double(), dim=-1)
    loss = F.cross_entropy(logits.double(), target, ignore_index=ignore_index, reduction="none")
    return loss, lse


def _glu_inputs(s, device, gen):
    return (_randn(gen, s["M"], 2 * s["N"], device=device),)


def _ref_glu(x, act="gelu"):
    a, b = x.float().chunk(2, dim=-1)
    return (F.gelu(a) if act == "gelu" else F.silu(a)) * b


def _ref_row_sumsq(x):
    return x.double().pow(2).sum(dim=-1)


def _layernorm_bwd_inputs(s, device, gen):
    x = (torch.randn(s["M"], s["N"], generator=gen) * 2 + 1).to(torch.float16)
    dy = torch.randn(s["M"], s["N"], generator=gen).to(torch.float16)
    w = torch.rand(s["N"], generator=gen).to(torch.float16)
    mean = x.float().mean(dim=-1)
    rstd = torch.rsqrt(x.float().var(dim=-1, unbiased=False) + 1e-5)
    return tuple(t.to(device) for t in (dy, x, w, mean, rstd))


def _ref_layernorm_bwd(dy, x, w, mean, rstd):
    xhat = (x.double() - mean.double()[:, None]) * rstd.double()[:, None]
    wdy = w.double() * dy.double()
    c1 = (xhat * wdy).mean(dim=-1, keepdim=True)
    c2 = wdy.mean(dim=-1, keepdim=True)
    return (wdy - (xhat * c1 + c2)) * rstd.double()[:, None]


def _vector_inputs(s, device, gen):
    return (_randn(gen, s["n"], dtype=torch.float32, device=device),)


def _ref_top1_route(logits):
    prob, expert = torch.softmax(logits.float(), dim=1).max(dim=1)
    return expert.to(torch.int32), prob


def _ref_column_sum(x):
    return x.double().sum(dim=0)


# ---------------------------------------------------------------------------------------------------------------------
# The cases. GPU sizes are ragged with respect to every tile size in the fixtures; descriptor operands keep
# 16-byte aligned rows (multiples of 8 fp16 elements), as TMA requires.


def _attention_cases():
    for causal in (False, True):
        for head_dim in (64, 128):
            yield Case(
                name=f"attention_fwd-{'causal' if causal else 'full'}-d{head_dim}",
                fixture="attention_fwd",
                wrapper="attention",
                make_inputs=_attention_inputs,
                reference=_ref_attention,
                shape=dict(Z=2, H=3, N_CTX=1000, HEAD_DIM=head_dim),
                small_shape=dict(Z=1, H=2, N_CTX=150, HEAD_DIM=head_dim),
                options=dict(causal=causal, sm_scale=head_dim**-0.5),
                atol=5e-3,  # outputs are averages of N(0, 1) values, mostly well below 1
                bench_shape=dict(Z=4, H=16, N_CTX=4096, HEAD_DIM=head_dim),
                flops=_attention_flops(causal),
            )


def _attention_stage_cases():
    """The tutorial-style kernel whose key loop is a helper called per causal stage."""
    for causal in (False, True):
        for head_dim in (64, 128):
            yield Case(
                name=f"suite_attn_inner_stages-{'causal' if causal else 'full'}-d{head_dim}",
                fixture="suite_attn_inner_stages",
                wrapper="attention",
                make_inputs=_attention_inputs,
                reference=_ref_attention,
                shape=dict(Z=2, H=3, N_CTX=1000, HEAD_DIM=head_dim),
                small_shape=dict(Z=1, H=2, N_CTX=150, HEAD_DIM=head_dim),
                options=dict(causal=causal, sm_scale=head_dim**-0.5),
                atol=5e-3,
                bench_shape=dict(Z=4, H=16, N_CTX=4096, HEAD_DIM=head_dim),
                flops=_attention_flops(causal),
            )


def _varlen_lengths(s: Shape, gen) -> list[int]:
    """Prompt lengths of a packed batch: B prompts of L tokens, or (LMIN < L) one of L and the others drawn between
    LMIN and L."""
    if s.get("LMIN", s["L"]) >= s["L"]:
        return [s["L"]] * s["B"]
    # (the first one L long: the longest prompt, which sets the grid, is the same for every draw)
    return [s["L"], *torch.randint(s["LMIN"], s["L"] + 1, (s["B"] - 1,), generator=gen).tolist()]


def _varlen_attention_inputs(s, device, gen):
    lengths = _varlen_lengths(s, gen)
    total = sum(lengths)
    q = _randn(gen, total, s["H"], s["D"], device=device)
    k = _randn(gen, total, s["HKV"], s["D"], device=device)
    v = _randn(gen, total, s["HKV"], s["D"], device=device)
    starts = torch.tensor([0, *lengths[:-1]]).cumsum(0).to(device=device, dtype=torch.int32)
    return q, k, v, torch.empty_like(q), starts, torch.tensor(lengths, device=device, dtype=torch.int32), max(lengths)


def _ref_varlen_attention(q, k, v, o, b_start_loc, b_seq_len, max_input_len):
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    group = q.shape[1] // k.shape[1]
    for start, length in zip(b_start_loc.tolist(), b_seq_len.tolist()):
        rows = slice(start, start + length)
        qb = q[rows].double().transpose(0, 1)
        kb = k[rows].double().transpose(0, 1).repeat_interleave(group, 0)
        vb = v[rows].double().transpose(0, 1).repeat_interleave(group, 0)
        scores = (qb @ kb.transpose(-1, -2)) * q.shape[-1] ** -0.5
        future = torch.ones(length, length, dtype=torch.bool, device=q.device).triu(1)
        out[rows] = (torch.softmax(scores.masked_fill(future, float("-inf")), -1) @ vb).transpose(0, 1)
    return out


def _varlen_flops(s: Shape) -> float:  # causal: half of two GEMMs of L x L x D per head and prompt (mean length)
    mean = s["L"] if s.get("LMIN", s["L"]) >= s["L"] else (s["L"] + s["LMIN"]) / 2
    return 4.0 * s["B"] * s["H"] * mean**2 * s["D"] * 0.5


def _varlen_cases():
    """Prefill attention over packed prompts (fx_attention_varlen): short prompts are where a ring's fill and
    drain cost shows; one case per batch of the serving mixes, each checked and timed."""
    for label, batch in (("64x256", dict(B=64, L=256, LMIN=256)), ("32x512", dict(B=32, L=512, LMIN=512)),
                         ("16x1024", dict(B=16, L=1024, LMIN=1024)), ("4x4096", dict(B=4, L=4096, LMIN=4096)),
                         ("mixed", dict(B=8, L=2000, LMIN=64))):
        yield Case(
            name=f"fx_attention_varlen-{label}",
            fixture="fx_attention_varlen",
            wrapper="prefill_attention",
            make_inputs=_varlen_attention_inputs,
            reference=_ref_varlen_attention,
            # (a longest prompt of 17 query blocks: the launcher gives such launches to the Gluon kernel)
            shape=dict(B=5, L=2100, LMIN=1, H=8, HKV=2, D=128),
            small_shape=dict(B=2, L=150, LMIN=1, H=2, HKV=1, D=128),
            atol=5e-3,
            bench_shape=dict(**batch, H=32, HKV=8, D=128),
            flops=_varlen_flops,
        )


def _mla_inputs(s, device, gen):
    b, t, h = s["B"], s["T"], s["H"]
    q_nope = _randn(gen, b, t, h, s["DN"], device=device)
    q_pe = _randn(gen, b, t, h, s["DR"], device=device)
    k_nope = _randn(gen, b, t, h, s["DN"], device=device)
    k_pe = _randn(gen, b, t, s["DR"], device=device)
    v = _randn(gen, b, t, h, s["DV"], device=device)
    return q_nope, q_pe, k_nope, k_pe, v, (s["DN"] + s["DR"]) ** -0.5


def _ref_mla(q_nope, q_pe, k_nope, k_pe, v, sm_scale):
    q = torch.cat([q_nope, q_pe], -1).double().transpose(1, 2)  # [B, H, T, DN + DR]
    k_rope = k_pe[:, :, None, :].expand(-1, -1, k_nope.shape[2], -1)
    k = torch.cat([k_nope, k_rope], -1).double().transpose(1, 2)
    scores = (q @ k.transpose(-1, -2)) * sm_scale
    t = q.shape[2]
    future = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    return (torch.softmax(scores.masked_fill(future, float("-inf")), -1) @ v.double().transpose(1, 2)).transpose(1, 2)


def _mla_flops(s: Shape) -> float:  # causal: half of (T x T x (DN + DR)) + (T x T x DV) per batch and head
    return 2.0 * s["B"] * s["H"] * s["T"] ** 2 * (s["DN"] + s["DR"] + s["DV"]) * 0.5


def _fx_cases():
    """The fx_ fixtures (failure classes of issue 9): ragged sizes."""
    yield from _varlen_cases()
    for label, size in (("short", dict(B=16, T=512)), ("long", dict(B=2, T=4096))):
        yield Case(
            name=f"fx_mla_prefill-{label}",
            fixture="fx_mla_prefill",
            wrapper="mla_prefill",
            make_inputs=_mla_inputs,
            reference=_ref_mla,
            shape=dict(B=2, T=1000, H=4, DN=128, DR=64, DV=128),
            small_shape=dict(B=1, T=150, H=2, DN=128, DR=64, DV=128),
            atol=5e-3,
            bench_shape=dict(**size, H=16, DN=128, DR=64, DV=128),
            flops=_mla_flops,
        )
    for causal in (False, True):
        for head_dim in (64, 128):
            yield Case(
                name=f"fx_attention_kt-{'causal' if causal else 'full'}-d{head_dim}",
                fixture="fx_attention_kt",
                wrapper="attention",
                make_inputs=_attention_inputs,
                reference=_ref_attention,
                shape=dict(Z=2, H=3, N_CTX=1000, HEAD_DIM=head_dim),
                small_shape=dict(Z=1, H=2, N_CTX=150, HEAD_DIM=head_dim),
                options=dict(causal=causal, sm_scale=head_dim**-0.5),
                atol=5e-3,
                bench_shape=dict(Z=4, H=16, N_CTX=4096, HEAD_DIM=head_dim),
                flops=_attention_flops(causal),
            )
    for causal in (False, True):
        for head_dim in (64, 128):
            yield Case(
                name=f"fx_attention_moved_ptrs-{'causal' if causal else 'full'}-d{head_dim}",
                fixture="fx_attention_moved_ptrs",
                wrapper="attention",
                make_inputs=_attention_inputs,
                reference=_ref_attention,
                shape=dict(Z=2, H=3, N_CTX=1000, HEAD_DIM=head_dim),
                small_shape=dict(Z=1, H=2, N_CTX=150, HEAD_DIM=head_dim),
                options=dict(causal=causal, sm_scale=head_dim**-0.5),
                atol=5e-3,
                bench_shape=dict(Z=4, H=16, N_CTX=4096, HEAD_DIM=head_dim),
                flops=_attention_flops(causal),
            )
    yield Case(
        name="fx_attention_v_late",
        fixture="fx_attention_v_late",
        wrapper="attention",
        make_inputs=_attention_inputs,
        reference=_ref_attention,
        shape=dict(Z=2, H=3, N_CTX=1000, HEAD_DIM=64),
        small_shape=dict(Z=1, H=2, N_CTX=150, HEAD_DIM=64),
        options=dict(causal=False, sm_scale=64**-0.5),
        atol=5e-3,
        bench_shape=dict(Z=4, H=16, N_CTX=4096, HEAD_DIM=64),
        flops=_attention_flops(False),
    )
    yield Case(
        name="fx_attention_two_loops",
        fixture="fx_attention_two_loops",
        wrapper="attention",
        make_inputs=_attention_inputs,
        reference=_ref_attention,
        shape=dict(Z=2, H=3, N_CTX=1000, HEAD_DIM=64),
        small_shape=dict(Z=1, H=2, N_CTX=150, HEAD_DIM=64),
        options=dict(causal=True, sm_scale=64**-0.5),
        atol=5e-3,
        bench_shape=dict(Z=4, H=16, N_CTX=4096, HEAD_DIM=64),
        flops=_attention_flops(True),
    )
    for with_bias in (False, True):
        yield Case(
            name=f"fx_desc_epilogue-{'bias' if with_bias else 'plain'}",
            fixture="fx_desc_epilogue",
            wrapper="linear",
            make_inputs=_bias_gemm_inputs if with_bias else _gemm_inputs,
            reference=_ref_linear,
            shape=dict(M=1000, N=1096, K=712),
            small_shape=dict(M=150, N=136, K=104),
            bench_shape=GEMM_BENCH if with_bias else None,
            flops=_gemm_flops if with_bias else None,
        )
    yield Case(
        name="fx_two_gemms",
        fixture="fx_two_gemms",
        wrapper="gated_mlp",
        make_inputs=_two_gemms_inputs,
        reference=_ref_gated_mlp,
        shape=dict(M=1000, N=1100, K=700),
        small_shape=dict(M=150, N=130, K=100),
        atol=2e-2,
        bench_shape=GEMM_BENCH,
        flops=lambda sh: 2 * _gemm_flops(sh),  # two GEMMs sharing the activation operand
    )


def _lang_gated_inputs(s, device, gen):
    return tuple(_randn(gen, s["n"], dtype=torch.float16, device=device) * 3 for _ in range(2))


def _ref_lang_gated_act(gate, up, activation="silu", limit=20.0):
    g = gate.float()
    act = torch.nn.functional.gelu(g, approximate="tanh") if activation == "gelu_tanh" else torch.nn.functional.silu(g)
    return torch.clamp(act * up.float(), -limit, limit).to(gate.dtype)


def _lang_router_inputs(s, device, gen):
    return (_randn(gen, s["T"], s["E"], device=device) * 2,)


def _ref_lang_router(logits):
    x = logits.float()
    probs = torch.softmax(x, dim=1)
    weight = probs.max(dim=1).values
    return x.argmax(dim=1).to(torch.int32), weight, probs / weight[:, None]


def _pairs_inputs(s, device, gen):
    return (_randn(gen, s["n"], 2, dtype=torch.float32, device=device),)


def _ref_swap_pairs(x):
    return torch.stack([x[:, 1] + x[:, 0], x[:, 0] + x[:, 0]], dim=1)


def _scan_inputs(s, device, gen):
    # Factors near 1 keep the cumulative products in range.
    return ((1 + 0.01 * _randn(gen, s["M"], s["N"], dtype=torch.float32, device=device)),)


def _ref_scans(x):
    return torch.cumprod(x, dim=1), torch.cummax(x, dim=1).values


def _bucket_inputs(s, device, gen):
    return (torch.randint(0, 64, (s["n"],), generator=gen, dtype=torch.int32).to(device),)


def _ref_bucket_histogram(ids, num_buckets=64):
    return torch.bincount(ids.long(), minlength=num_buckets).to(torch.int32)


CASES: list[Case] = [
    Case(
        name="matmul_grouped",
        fixture="matmul_grouped",
        wrapper="matmul",
        make_inputs=_gemm_inputs,
        reference=_ref_matmul,
        shape=dict(M=1000, N=1100, K=700),
        small_shape=dict(M=150, N=130, K=100),
        bench_shape=GEMM_BENCH,
        flops=_gemm_flops,
    ),
    Case(
        # tensor descriptors the host builds, block shapes set by the autotune configs' pre_hook; rows 16-byte
        # aligned, as the host's descriptors require
        name="host_descriptor_gemm",
        fixture="host_descriptor_gemm",
        wrapper="linear",
        make_inputs=_linear_weight_inputs,
        reference=_ref_linear_weight,
        shape=dict(M=1000, N=1096, K=712),
        small_shape=dict(M=150, N=136, K=104),
        bench_shape=GEMM_BENCH,
        flops=_gemm_flops,
    ),
    Case(
        # problems whose addresses and leading dimensions the kernel loads: aligned ones run the pipelined loop,
        # the others (odd K or N) the loop as translated
        name="grouped_gemm_ptr_array",
        fixture="grouped_gemm_ptr_array",
        wrapper="grouped_gemm",
        make_inputs=_grouped_gemm_inputs,
        reference=_ref_grouped_gemm,
        shape=dict(M=1000, N=1096, K=712),
        small_shape=dict(M=150, N=136, K=104),
        bench_shape=dict(M=2048, N=2048, K=2048),
        flops=lambda s: 2.0 * sum(m * n * k for m, n, k in (
            (s["M"], s["N"], s["K"]), (s["M"] // 2 + 3, s["N"] // 2, s["K"] + 8),
            (s["M"] // 3, s["N"] + 3, s["K"] - 3))),
    ),
    Case(
        # rank-3 host descriptors read one matrix of the batch at a time (a unit block along the batch axis)
        name="host_descriptor_bmm",
        fixture="host_descriptor_bmm",
        wrapper="bmm",
        make_inputs=_batched_gemm_inputs,
        reference=_ref_bmm,
        shape=dict(B=3, M=1000, N=1096, K=712),
        small_shape=dict(B=2, M=150, N=136, K=104),
        bench_shape=dict(B=8, M=2048, N=2048, K=2048),
        flops=lambda s: 2.0 * s["B"] * s["M"] * s["N"] * s["K"],
    ),
    *(
        Case(
            name=f"matmul_descriptor-{activation}",
            fixture="matmul_descriptor",
            wrapper="matmul_bias_act",
            make_inputs=_bias_gemm_inputs,
            reference=_ref_matmul_bias_act,
            shape=dict(M=1000, N=1096, K=712),
            small_shape=dict(M=150, N=136, K=104),
            options=dict(activation=activation),
            bench_shape=GEMM_BENCH if activation == "leaky_relu" else None,
            flops=_gemm_flops if activation == "leaky_relu" else None,
        )
        for activation in ("leaky_relu", "none")
    ),
    *(
        Case(
            name=name,
            fixture=name,
            wrapper="matmul",
            make_inputs=_gemm_inputs,
            reference=_ref_matmul,
            shape=dict(M=1000, N=1100, K=700),
            small_shape=dict(M=150, N=130, K=100),
            bench_shape=GEMM_BENCH,
            flops=_gemm_flops,
        )
        for name in ("canon_gemm_iadd", "canon_gemm_recompute")
    ),
    Case(
        name="canon_gemm_nt",
        fixture="canon_gemm_nt",
        wrapper="linear",
        make_inputs=lambda s, device, gen: (_randn(gen, s["M"], s["K"], device=device),
                                            _randn(gen, s["N"], s["K"], device=device)),
        reference=lambda x, w: x.double() @ w.double().T,
        shape=dict(M=1000, N=1100, K=700),
        small_shape=dict(M=150, N=130, K=100),
        bench_shape=GEMM_BENCH,
        flops=_gemm_flops,
    ),
    Case(
        name="canon_linear_desc_bias",
        fixture="canon_linear_desc_bias",
        wrapper="linear_bias",
        make_inputs=_bias_gemm_inputs,
        reference=lambda a, b, bias: _ref_matmul_bias_act(a, b, bias, activation="none"),
        shape=dict(M=1000, N=1096, K=712),
        small_shape=dict(M=150, N=136, K=104),
        bench_shape=GEMM_BENCH,
        flops=_gemm_flops,
    ),
    Case(
        name="canon_desc_carried_nt",
        fixture="canon_desc_carried_nt",
        wrapper="linear_nt",
        make_inputs=_linear_nk_inputs(torch.float16),
        reference=_ref_linear_nk,
        shape=dict(M=1000, N=1096, K=712),
        small_shape=dict(M=150, N=136, K=104),
        bench_shape=GEMM_BENCH,
        flops=_gemm_flops,
    ),
    Case(
        name="suite_desc_inline",
        fixture="suite_desc_inline",
        wrapper="linear_inline",
        make_inputs=_linear_nk_inputs(torch.float16, with_bias=True),
        reference=_ref_linear_nk,
        shape=dict(M=1000, N=1096, K=712),
        small_shape=dict(M=150, N=136, K=104),
        bench_shape=GEMM_BENCH,
        flops=_gemm_flops,
    ),
    Case(
        name="suite_desc_persistent",
        fixture="suite_desc_persistent",
        wrapper="matmul_persistent",
        make_inputs=_gemm_inputs,
        reference=_ref_matmul,
        shape=dict(M=1000, N=1096, K=712),
        small_shape=dict(M=150, N=136, K=104),
        bench_shape=GEMM_BENCH,
        flops=_gemm_flops,
    ),
    Case(
        name="matmul_splitk",
        fixture="matmul_splitk",
        wrapper="matmul_splitk",
        make_inputs=_gemm_inputs,
        reference=_ref_matmul,
        shape=dict(M=250, N=330, K=4100),
        small_shape=dict(M=70, N=100, K=600),
        options=dict(split_k=4),
        rtol=1e-3,
        bench_shape=dict(M=2048, N=2048, K=8192),  # split-K's natural shape: small output, long K
        flops=_gemm_flops,
    ),
    Case(
        name="matmul_int8",
        fixture="matmul_int8",
        wrapper="int8_matmul_scaled",
        make_inputs=_int8_gemm_inputs,
        reference=_ref_int8_matmul_scaled,
        shape=dict(M=1000, N=1100, K=700),
        small_shape=dict(M=150, N=130, K=100),
        bench_shape=GEMM_BENCH,
        flops=_gemm_flops,
    ),
    Case(
        name="moe_gather_gemm",
        fixture="moe_gather_gemm",
        wrapper="gather_gemm",
        make_inputs=_moe_inputs,
        reference=_ref_gather_gemm,
        shape=dict(T=2000, E=4, M=600, N=1100, K=700),
        small_shape=dict(T=100, E=3, M=70, N=90, K=100),
        bench_shape=dict(T=16384, E=8, M=2048, N=4096, K=4096),
        flops=lambda s: 2.0 * s["E"] * s["M"] * s["N"] * s["K"],
    ),
    *_attention_cases(),
    *_attention_stage_cases(),
    *_fx_cases(),
    Case(
        name="vector_add",
        fixture="vector_add",
        wrapper="add",
        make_inputs=_elementwise_pair_inputs,
        reference=torch.add,
        shape=dict(n=98_432 + 17),
        small_shape=dict(n=5_000),
        atol=1e-6,
        rtol=1e-6,
    ),
    *(
        Case(
            name=name,
            fixture="softmax",
            wrapper=name,
            make_inputs=_rows_inputs(torch.float32),
            reference=reference,
            shape=dict(M=1823, N=781),
            small_shape=dict(M=37, N=181),
            atol=1e-5,
            rtol=1e-4,
        )
        for name, reference in (
            ("softmax", lambda x: torch.softmax(x, dim=-1)),
            ("log_softmax", lambda x: torch.log_softmax(x, dim=-1)),
        )
    ),
    Case(
        name="layernorm",
        fixture="layernorm",
        wrapper="layer_norm",
        make_inputs=_norm_inputs(with_bias=True),
        reference=_ref_layer_norm,
        shape=dict(B=3, M=401, N=3000),
        small_shape=dict(B=2, M=3, N=1500),
        options=dict(eps=1e-5),
    ),
    Case(
        name="rmsnorm",
        fixture="rmsnorm",
        wrapper="rms_norm",
        make_inputs=_norm_inputs(with_bias=False),
        reference=_ref_rms_norm,
        shape=dict(B=3, M=407, N=2500),
        small_shape=dict(B=2, M=9, N=1500),  # 18 rows > 16 programs: exercises the persistent loop
        options=dict(eps=1e-6),
    ),
    Case(
        name="fused_helpers",
        fixture="fused_helpers",
        wrapper="bias_gelu",
        make_inputs=_bias_rows_inputs,
        reference=_ref_bias_gelu,
        shape=dict(M=1000, N=1100),
        small_shape=dict(M=70, N=300),
    ),
    Case(
        name="import_aliases",
        fixture="import_aliases",
        wrapper="residual_add_clamp",
        make_inputs=_elementwise_pair_inputs,
        reference=_ref_residual_add_clamp,
        shape=dict(n=1_000_003),
        small_shape=dict(n=5_000),
        options=dict(alpha=0.75, lo=-1.5, hi=2.0),
        atol=1e-6,
        rtol=1e-6,
    ),
    *(
        Case(
            name=f"column_minmax-{kind}",
            fixture="column_minmax",
            wrapper="column_minmax",
            make_inputs=_rows_inputs(torch.float16),
            reference=_ref_column_minmax,
            shape=shape,
            small_shape=small_shape,
            atol=0.0,
            rtol=0.0,
        )
        for kind, shape, small_shape in (
            ("ragged", dict(M=3000, N=1100), dict(M=150, N=300)),
            ("even", dict(M=3000, N=1024), dict(M=150, N=256)),  # EVEN_N: N % BLOCK_N == 0
        )
    ),
    Case(
        name="bc_norm_rows",
        fixture="bc_norm_rows",
        wrapper="rms_norm_rows",
        make_inputs=_bias_rows_inputs,
        reference=_ref_rms_norm,
        shape=dict(M=1001, N=1500),
        small_shape=dict(M=37, N=300),
        options=dict(eps=1e-6),
    ),
    Case(
        name="bc_rotary",
        fixture="bc_rotary",
        wrapper="rotary",
        make_inputs=_bc_rotary_inputs,
        reference=_ref_bc_rotary,
        shape=dict(T=1000, H=12, D=128, P=4096),
        small_shape=dict(T=20, H=5, D=64, P=64),
    ),
    Case(
        name="bc_cross_entropy",
        fixture="bc_cross_entropy",
        wrapper="cross_entropy",
        make_inputs=_bc_logits_inputs,
        reference=_ref_bc_cross_entropy,
        shape=dict(M=1003, V=5000),
        small_shape=dict(M=9, V=1500),
        options=dict(scale=0.5),
    ),
    Case(
        # A computed from two tiles loaded side by side (x and its gate g): a ring each, both read in A's layout
        name="gated_operand_gemm",
        fixture="gated_operand_gemm",
        wrapper="gated_matmul",
        make_inputs=_gated_operand_inputs,
        reference=_ref_gated_matmul,
        shape=dict(M=1000, N=1100, K=900),
        small_shape=dict(M=70, N=90, K=100),
        bench_shape=GEMM_BENCH,
        flops=_gemm_flops,
    ),
    Case(
        name="bc_dequant_matmul",
        fixture="bc_dequant_matmul",
        wrapper="dequant_matmul",
        make_inputs=_bc_dequant_inputs,
        reference=_ref_bc_dequant_matmul,
        shape=dict(M=1000, N=1100, K=900),
        small_shape=dict(M=70, N=90, K=100),
        bench_shape=GEMM_BENCH,
        flops=_gemm_flops,
    ),
    Case(
        name="bc_dequant_matmul-int4",
        fixture="bc_dequant_matmul",
        wrapper="int4_matmul",
        make_inputs=_bc_int4_inputs,
        reference=_ref_bc_int4_matmul,
        shape=dict(M=1000, N=1100, K=902),
        small_shape=dict(M=70, N=90, K=100),
        bench_shape=GEMM_BENCH,
        flops=_gemm_flops,
    ),
    Case(
        name="suite_cast_operand_gemm",
        fixture="suite_cast_operand_gemm",
        wrapper="cast_operand_gemm",
        make_inputs=_cast_operand_inputs,
        reference=_ref_cast_operand_gemm,
        shape=dict(M=1000, N=1100, K=900),
        small_shape=dict(M=70, N=90, K=100),
        bench_shape=GEMM_BENCH,
        flops=_gemm_flops,
    ),
    Case(
        name="suite_w4a16_gptq",
        fixture="suite_w4a16_gptq",
        wrapper="w4a16_gptq",
        make_inputs=_gptq_inputs,
        reference=_ref_w4a16_gptq,
        shape=dict(M=1000, N=1024, K=1024, G=128),
        small_shape=dict(M=70, N=128, K=256, G=128),
        bench_shape=dict(M=4096, N=4096, K=4096, G=128),
        flops=_gemm_flops,
    ),
    Case(
        name="bc_tuple_helper",
        fixture="bc_tuple_helper",
        wrapper="layer_norm_rows",
        make_inputs=_bc_layer_norm_inputs,
        reference=_ref_bc_layer_norm,
        shape=dict(M=1001, N=3000),
        small_shape=dict(M=37, N=300),
        options=dict(eps=1e-5),
    ),
    *(
        Case(
            name=f"lang_gated_act-{activation}",
            fixture="lang_gated_act",
            wrapper="gated_act",
            make_inputs=_lang_gated_inputs,
            reference=_ref_lang_gated_act,
            shape=dict(n=1_000_003),
            small_shape=dict(n=3_000),
            options=dict(activation=activation, limit=4.0),
        )
        for activation in ("silu", "gelu_tanh")
    ),
    Case(
        name="lang_router",
        fixture="lang_router",
        wrapper="top1_router",
        make_inputs=_lang_router_inputs,
        reference=_ref_lang_router,
        shape=dict(T=5003, E=60),
        small_shape=dict(T=37, E=60),
        atol=1e-4,
        rtol=1e-4,
    ),
    Case(
        name="bc_logsumexp_rows",
        fixture="bc_logsumexp_rows",
        wrapper="logsumexp_rows",
        make_inputs=_rows_inputs(torch.float16),
        reference=lambda x: torch.logsumexp(x.float(), dim=1),
        shape=dict(M=1001, N=3000),
        small_shape=dict(M=37, N=600),
        atol=1e-3,
        rtol=1e-4,
    ),
    Case(
        name="lang_shapes-swap_pairs",
        fixture="lang_shapes",
        wrapper="swap_pairs",
        make_inputs=_pairs_inputs,
        reference=_ref_swap_pairs,
        shape=dict(n=100_003),
        small_shape=dict(n=700),
        atol=1e-6,
        rtol=1e-6,
    ),
    Case(
        name="lang_shapes-scans",
        fixture="lang_shapes",
        wrapper="scans",
        make_inputs=_scan_inputs,
        reference=_ref_scans,
        shape=dict(M=1001, N=1000),
        small_shape=dict(M=7, N=300),
        atol=1e-4,
        rtol=1e-4,
    ),
    Case(
        name="lang_shapes-bucket_histogram",
        fixture="lang_shapes",
        wrapper="bucket_histogram",
        make_inputs=_bucket_inputs,
        reference=_ref_bucket_histogram,
        shape=dict(n=1_000_003),
        small_shape=dict(n=5_000),
        atol=0.0,
        rtol=0.0,
    ),
    Case(
        name="lang_scan_dropout",
        fixture="lang_scan_dropout",
        wrapper="scan_dropout",
        make_inputs=_rows_inputs(torch.float16),
        reference=None,  # random: the variant is compared with the original (same seed, same Philox stream)
        shape=dict(M=1001, N=1500),
        small_shape=dict(M=70, N=200),
        options=dict(p=0.25, seed=77),
        atol=1e-3,
        rtol=1e-4,
    ),
]


def _segment_inputs(s, device, gen):
    return (_randn(gen, s["G"], s["M"], s["K"], device=device), _randn(gen, s["G"], s["K"], s["N"], device=device))


def _ref_segment_gemm(a, b):
    return (a.double() @ b.double()).sum(dim=0)


def _chunk_products_inputs(s, device, gen):
    T, V = s["T"], s["V"]
    a = _randn(gen, T, 64, device=device) / 8  # each chunk's [64, 64] block, by the chunk's rows
    return a, _randn(gen, T, V, device=device), torch.rand(T, generator=gen).to(device=device, dtype=torch.float32)


def _ref_chunk_products(a, v, beta):
    T = v.shape[0]
    u = torch.empty_like(v, dtype=torch.float64)
    for start in range(0, T, 64):
        rows = slice(start, min(start + 64, T))
        n = rows.stop - rows.start
        u[rows] = beta.double()[rows, None] * (a.double()[rows, :n] @ v.double()[rows])
    return u


def _chunk_scores_inputs(s, device, gen):
    shape = (s["B"], s["T"], s["D"])
    return _randn(gen, *shape, device=device, dtype=s.get("dtype", torch.float16)), \
        _randn(gen, *shape, device=device, dtype=s.get("dtype", torch.float16))


def _ref_chunk_scores(q, k, chunk_size=128):
    batch, seqlen, _ = q.shape
    chunks = -(-seqlen // chunk_size)
    s = torch.zeros((batch, chunks, chunk_size, chunk_size), dtype=torch.float64, device=q.device)
    for c in range(chunks):
        rows = slice(c * chunk_size, min((c + 1) * chunk_size, seqlen))
        n = rows.stop - rows.start
        s[:, c, :n, :n] = q.double()[:, rows] @ k.double()[:, rows].transpose(1, 2)
    return s


def _chunk_intra_inputs(s, device, gen):
    shape = (s["B"], s["T"], s["H"], s["D"])
    return tuple(_randn(gen, *shape, device=device) / 4 for _ in range(3))


def _chunk_states_inputs(s, device, gen):
    shape = (s["B"], s["T"], s["H"], s["D"])
    return tuple(_randn(gen, *shape, device=device) / 4 for _ in range(2))


def _ref_chunk_states(k, v, BT=64):
    B, T, H, K = k.shape
    NT = -(-T // BT)
    h = torch.zeros(B, NT, H, K, v.shape[-1], dtype=torch.float64, device=k.device)
    state = torch.zeros(B, H, K, v.shape[-1], dtype=torch.float64, device=k.device)
    for t in range(NT):
        h[:, t] = state
        rows = slice(t * BT, min((t + 1) * BT, T))
        kc, vc = (x.double()[:, rows].transpose(1, 2) for x in (k, v))  # [B, H, rows, D]
        state = state + kc.transpose(-1, -2) @ vc
    return h


def _ref_chunk_intra(q, k, v, scale=None, BT=64):
    B, T, H, K = q.shape
    scale = K**-0.5 if scale is None else scale
    o = torch.zeros(v.shape, dtype=torch.float64, device=q.device)
    for start in range(0, T, BT):
        rows = slice(start, min(start + BT, T))
        qc, kc, vc = (x.double()[:, rows].transpose(1, 2) for x in (q, k, v))  # [B, H, rows, D]
        a = (qc @ kc.transpose(-1, -2) * scale).tril()
        # the kernel multiplies the scores in the inputs' 16-bit type
        a = a.to(v.dtype).double()
        o[:, rows] = (a @ vc).transpose(1, 2)
    return o


def _attention_bwd_inputs(s, device, gen):
    """q, k, v, dO of s["BH"] heads of s["T"] tokens at head dimension 64, and what the forward leaves: each query
    row's log2-sum-exp2 of its scores (m) and rowsum(dO * O) (delta)."""
    BH, T, D = s["BH"], s["T"], 64
    q, k, v, do = (_randn(gen, BH, T, D, device=device) / 4 for _ in range(4))
    scores = q.float() @ k.float().transpose(1, 2)
    m = torch.logsumexp(scores * math.log(2.0), dim=-1) / math.log(2.0)
    out = torch.exp2(scores - m[..., None]) @ v.float()
    delta = (do.float() * out).sum(-1)
    return q, k, v, do, m.contiguous(), delta.contiguous(), 0.125


def _ref_attention_bwd(q, k, v, do, m, delta, sm_scale):
    p = torch.exp2(q.double() @ k.double().transpose(1, 2) - m.double()[..., None])
    dv = p.transpose(1, 2) @ do.double()
    ds = p * (do.double() @ v.double().transpose(1, 2) - delta.double()[..., None])
    return (ds.transpose(1, 2) @ q.double()) * sm_scale, dv


def _block_sparse_inputs(s, device, gen):
    """q, k, v [Z, H, N_CTX, HEAD_DIM] and, per (batch, head) and block of 128 queries, an ascending list of key blocks
    of 64: the two diagonal blocks and each earlier block with probability DENSITY."""
    z, h, n, d = s["Z"], s["H"], s["N_CTX"], s["HEAD_DIM"]
    q, k, v = (_randn(gen, z, h, n, d, device=device) for _ in range(3))
    rows, key_blocks = -(-n // 128), -(-n // 64)
    idx = torch.zeros(z * h, rows, key_blocks, dtype=torch.int32)
    cnt = torch.zeros(z * h, rows, dtype=torch.int32)
    for zh in range(z * h):
        for m in range(rows):
            earlier = torch.nonzero(torch.rand(2 * m, generator=gen) < s["DENSITY"]).flatten().tolist()
            listed = earlier + [b for b in (2 * m, 2 * m + 1) if b < key_blocks]
            idx[zh, m, :len(listed)] = torch.tensor(listed, dtype=torch.int32)
            cnt[zh, m] = len(listed)
    return q, k, v, idx.to(device), cnt.to(device), 1.0 / d ** 0.5


def _ref_block_sparse(q, k, v, block_idx, block_cnt, sm_scale):
    z, h, n, _ = q.shape
    allowed = torch.zeros(z * h, n, n, dtype=torch.bool, device=q.device)
    for zh in range(z * h):
        for m in range(block_idx.shape[1]):
            for b in block_idx[zh, m, :int(block_cnt[zh, m])].tolist():
                allowed[zh, 128 * m:128 * (m + 1), 64 * b:64 * (b + 1)] = True
    allowed &= torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    scores = (q.double() @ k.double().transpose(-1, -2)) * sm_scale
    scores = scores.masked_fill(~allowed.view(z, h, n, n), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v.double()


def _skip_block_inputs(s, device, gen):
    """q [Z, H, QO, D], k and v [Z, H, KV, D] fp16, and a flag per (query block of 128, key block of 64): each set
    with probability DENSITY (some query blocks then read no key block at all, and write zeros)."""
    z, h, qo, kv, d = s["Z"], s["H"], s["QO"], s["KV"], s["HEAD_DIM"]
    q = _randn(gen, z, h, qo, d, device=device)
    k, v = (_randn(gen, z, h, kv, d, device=device) for _ in range(2))
    flags = (torch.rand(z * h, -(-qo // 128), -(-kv // 64), generator=gen) < s["DENSITY"]).to(torch.int8)
    return q, k, v, flags.to(device), 1.0 / d ** 0.5


def _ref_skip_block(q, k, v, flags, sm_scale):
    z, h, qo, _ = q.shape
    kv = k.shape[2]
    allowed = flags.bool().repeat_interleave(128, dim=1)[:, :qo].repeat_interleave(64, dim=2)[:, :, :kv]
    scores = (q.double() @ k.double().transpose(-1, -2)) * sm_scale
    scores = scores.masked_fill(~allowed.view(z, h, qo, kv), float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v.double()
    return torch.nan_to_num(out, nan=0.0)  # (a query block that reads no key block: zeros)


def _sparse_dq_allowed(lut, n, block_m=128, block_n=64):
    """[BH, n, n]: the keys each query's block lists (keys past the end left out)."""
    bh = lut.shape[0]
    allowed = torch.zeros(bh, n, n, dtype=torch.bool, device=lut.device)
    for b in range(bh):
        for m in range(lut.shape[1]):
            for blk in lut[b, m].tolist():
                allowed[b, block_m * m:block_m * (m + 1), block_n * blk:block_n * (blk + 1)] = True
    return allowed


def _sparse_dq_inputs(s, device, gen):
    """q, k, v, do [BH, L, D]; a table of TOPK distinct key blocks of 64 per block of 128 queries; the base-2 row
    log-sum-exps and deltas of the forward over the listed keys (computed here, in float64)."""
    bh, n, d, topk = s["BH"], s["L"], s["D"], s["TOPK"]
    q, k, v, do = (_randn(gen, bh, n, d, device=device) for _ in range(4))
    rows, key_blocks = -(-n // 128), -(-n // 64)
    lut = torch.stack([torch.stack([torch.randperm(key_blocks, generator=gen)[:topk] for _ in range(rows)])
                       for _ in range(bh)]).to(torch.int32).to(device)
    sm_scale = 1.0 / d ** 0.5
    scores = (q.double() @ k.double().transpose(1, 2)) * sm_scale
    scores = scores.masked_fill(~_sparse_dq_allowed(lut, n), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.softmax(scores, dim=-1) @ v.double()
    delta = (do.double() * out).sum(-1)
    return q, k, v, do, (lse / math.log(2)).float(), delta.float(), lut, sm_scale


def _ref_sparse_dq(q, k, v, do, lse, delta, lut, sm_scale):
    scores = (q.double() @ k.double().transpose(1, 2)) * sm_scale
    p = torch.exp(scores - lse.double()[..., None] * math.log(2))
    p = p.masked_fill(~_sparse_dq_allowed(lut, q.shape[1]), 0.0)
    ds = p * (do.double() @ v.double().transpose(1, 2) - delta.double()[..., None])
    return (ds @ k.double()) * sm_scale


def _chunk_state_output_inputs(s, device, gen):
    """C [T, S] and X [T, D] fp16, the chunks' fp32 states [chunks, S, D] (scaled to outputs of order 1), decays
    exp(a_cum) in (0, 1], and CB [chunks, chunk, chunk] fp16, zero above each diagonal."""
    t, d, n, chunk = s["T"], s["D"], s["S"], s["CHUNK"]
    chunks = -(-t // chunk)
    c = _randn(gen, t, n, device=device)
    states = (torch.randn(chunks, n, d, generator=gen) / n ** 0.5).to(device)
    a_cum = -torch.rand(t, generator=gen).to(device)
    cb = (torch.randn(chunks, chunk, chunk, generator=gen).tril() / chunk ** 0.5).to(torch.float16).to(device)
    x = _randn(gen, t, d, device=device)
    return c, states, a_cum, cb, x, chunk


def _gated_state_inputs(s, device, gen):
    """Keys and values [B, T, K] / [B, T, V] fp16, log-gates in (-1, 0] fp32 (decays exp(g) in (0.37, 1])."""
    b, t, k, v = s["B"], s["T"], s["K"], s["V"]
    keys = (torch.randn(b, t, k, generator=gen) / t ** 0.5).to(torch.float16).to(device)
    values = torch.randn(b, t, v, generator=gen).to(torch.float16).to(device)
    gates = -torch.rand(b, t, k, generator=gen).to(device)
    return keys, values, gates


def _ref_gated_state(k, v, g):
    kg = (k.double() * torch.exp(g.double())).to(k.dtype).double()  # (the kernel rounds k * exp(g) to k's type)
    return torch.einsum("btk,btv->bkv", kg, v.double())


def _ref_chunk_state_output(c, states, a_cum, cb, x, chunk_size):
    t = c.shape[0]
    out = torch.empty(x.shape, dtype=torch.float64, device=x.device)
    for i, start in enumerate(range(0, t, chunk_size)):
        n = min(chunk_size, t - start)
        rows = slice(start, start + n)
        out[rows] = (c[rows].double() @ states[i].double()) * torch.exp(a_cum[rows].double())[:, None] \
            + cb[i, :n, :n].double() @ x[rows].double()
    return out


def _suite_gemm_case(name, wrapper="matmul", **kw):
    """A plain [M, K] x [K, N] fp16 GEMM fixture of the suite: ragged sizes, 4096^3 on the benchmark."""
    fixture = kw.pop("fixture", name)
    options = dict(make_inputs=_gemm_inputs, reference=_ref_matmul, shape=dict(M=1000, N=1100, K=700),
                   small_shape=dict(M=150, N=130, K=100), bench_shape=GEMM_BENCH, flops=_gemm_flops)
    options.update(kw)
    return Case(name=name, fixture=fixture, wrapper=wrapper, **options)


SUITE_CASES: list[Case] = [
    _suite_gemm_case("suite_gemm_kaddr"),
    _suite_gemm_case("suite_gemm_evenk"),
    _suite_gemm_case("suite_gemm_peeled_tail"),
    # (rows 16-byte aligned, K not a multiple of the block: the launch the Gluon kernel runs, with its tail peeled)
    _suite_gemm_case("suite_gemm_peeled_tail-aligned", fixture="suite_gemm_peeled_tail", shape=dict(M=1000, N=1104,
                     K=720), bench_shape=None),
    _suite_gemm_case("suite_gemm_acc_type", wrapper="matmul_acc_type"),
    _suite_gemm_case("suite_gemm_flag_masks"),
    # column offsets picked by a flag before the loop (aiter's basic GEMM): wrapped, then M, N and K multiples of the
    # blocks (the `EVEN_MN` and `EVEN_K` copies)
    _suite_gemm_case("suite_gemm_even_mn"),
    _suite_gemm_case("suite_gemm_even_mn-even", fixture="suite_gemm_even_mn", shape=dict(M=1024, N=1152, K=704),
                     small_shape=dict(M=256, N=128, K=128), bench_shape=None, flops=None),
    _suite_gemm_case("suite_gemm_evenk-even", fixture="suite_gemm_evenk", shape=dict(M=1000, N=1100, K=704),
                     small_shape=dict(M=150, N=130, K=96), bench_shape=None, flops=None),
    # aiter's and FlagGems' basic GEMM: the tile order picked under a flag, wrapped rows, cache hints; ragged, then K
    # a multiple of both configs' BLOCK_K (the `EVEN_K` copy)
    _suite_gemm_case("suite_gemm_hinted"),
    _suite_gemm_case("suite_gemm_hinted-even", fixture="suite_gemm_hinted", shape=dict(M=1000, N=1104, K=704),
                     small_shape=dict(M=150, N=136, K=128), bench_shape=None, flops=None),
    _suite_gemm_case("suite_alias_gemm", wrapper="matmul_relu_squared", make_inputs=_scaled_gemm_inputs,
                     reference=lambda a, b: torch.relu(a.double() @ b.double()) ** 2),
    _suite_gemm_case("suite_gemm_persistent", wrapper="matmul_persistent"),
    # the same walk in one flat loop over tiles x K steps (`transpile.passes.tile_loops` nests it)
    _suite_gemm_case("suite_gemm_persistent_flat", wrapper="matmul_persistent_flat"),
    # an autotune table with 2-warp configs beside 4- and 8-warp ones: the launcher gives those to the source kernel
    # (descriptors: row strides of 16 bytes, so K and N multiples of 8)
    _suite_gemm_case("suite_gemm_small_warps", shape=dict(M=1000, N=1096, K=712), small_shape=dict(M=150, N=136, K=104)),
    _suite_gemm_case("suite_blockptr_gemm"),
    _suite_gemm_case("suite_gemm_bias_gelu", wrapper="linear_gelu", make_inputs=_scaled_bias_gemm_inputs,
                     reference=_ref_linear_gelu),
    _suite_gemm_case("suite_swiglu_gemm", wrapper="swiglu_gemm", make_inputs=_swiglu_inputs,
                     reference=_ref_swiglu_gemm, flops=lambda s: 2 * _gemm_flops(s)),
    _suite_gemm_case("suite_gated_linear", wrapper="gated_linear", make_inputs=_gated_linear_inputs,
                     reference=_ref_gated_linear, flops=lambda s: 2 * _gemm_flops(s)),
    # A row reduction beside the dot each iteration (the RMS norm of x, fused)
    _suite_gemm_case("suite_rms_linear", wrapper="rms_linear", reference=_ref_rms_linear),
    # A K loop per segment inside a loop over the segments: the innermost loop is the one pipelined.
    _suite_gemm_case("suite_segment_gemm", wrapper="segment_gemm", make_inputs=_segment_inputs,
                     reference=_ref_segment_gemm, shape=dict(G=3, M=1000, N=1100, K=704),
                     small_shape=dict(G=2, M=150, N=130, K=96), bench_shape=dict(G=4, M=2048, N=2048, K=2048),
                     flops=lambda s: 2.0 * s["G"] * s["M"] * s["N"] * s["K"]),
    # A product made afresh each iteration and stored (no accumulator carried), A held in registers.
    Case(name="suite_chunk_products", fixture="suite_chunk_products", wrapper="chunk_products",
         make_inputs=_chunk_products_inputs, reference=_ref_chunk_products, shape=dict(T=1000, V=304),
         small_shape=dict(T=100, V=80), bench_shape=dict(T=1 << 16, V=1024),
         flops=lambda s: 2.0 * s["T"] * 64 * s["V"]),
    # ... at sizes the sm90 ring pipelined in order takes (aligned rows, 16 column blocks: a `--gluon-always` variant's
    # launcher runs its Gluon kernel there; by default the kernel is kept as Triton, measured slower)
    Case(name="suite_chunk_products-aligned", fixture="suite_chunk_products", wrapper="chunk_products",
         make_inputs=_chunk_products_inputs, reference=_ref_chunk_products, shape=dict(T=1000, V=1024),
         small_shape=dict(T=100, V=80)),
    # Products within chunks of a sequence (state-space-model style), operands loaded and cast on one line
    # (`tl.load(...).to(dot_dtype)`); a short last chunk, a head dimension not a multiple of the tiles'.
    Case(name="suite_chunk_scores", fixture="suite_chunk_scores", wrapper="chunk_scores",
         make_inputs=_chunk_scores_inputs, reference=_ref_chunk_scores, shape=dict(B=3, T=1000, D=72),
         small_shape=dict(B=1, T=150, D=40), bench_shape=dict(B=8, T=16384, D=128),
         flops=lambda s: 2.0 * s["B"] * s["T"] * 128 * s["D"]),
    # ... few programs (one batch, two chunks: the pipeline's fill and drain) and bf16 inputs (a bf16 dot; fp16
    # under the interpreter, whose bf16 dots are not exact)
    Case(name="suite_chunk_scores-short", fixture="suite_chunk_scores", wrapper="chunk_scores",
         make_inputs=_chunk_scores_inputs, reference=_ref_chunk_scores,
         shape=dict(B=1, T=256, D=64, dtype=torch.bfloat16), small_shape=dict(B=1, T=130, D=64, dtype=torch.float16)),
    # Intra-chunk scores of chunked linear attention, the keys read transposed ([BK, BT], contiguous along the
    # first axis), then the causal scores times V; a short last chunk, a key dimension of several blocks.
    Case(name="suite_chunk_intra", fixture="suite_chunk_intra", wrapper="chunk_intra",
         make_inputs=_chunk_intra_inputs, reference=_ref_chunk_intra, shape=dict(B=2, T=1000, H=3, D=256),
         small_shape=dict(B=1, T=100, H=2, D=128), bench_shape=dict(B=8, T=8192, H=16, D=256), atol=2e-2, rtol=2e-2,
         flops=lambda s: 2.0 * s["B"] * s["T"] * 64 * s["H"] * s["D"] * 2),
    # Chunk states of chunked linear attention: the keys read transposed ([BK, BT], contiguous along the first axis)
    # as the A operand of the state's update, the state stored each chunk; a short last chunk, ragged head dimensions.
    Case(name="suite_chunk_states", fixture="suite_chunk_states", wrapper="chunk_states",
         make_inputs=_chunk_states_inputs, reference=_ref_chunk_states, shape=dict(B=2, T=1000, H=3, D=96),
         small_shape=dict(B=1, T=100, H=2, D=64), bench_shape=dict(B=8, T=8192, H=16, D=128), atol=2e-2, rtol=2e-2,
         flops=lambda s: 2.0 * s["B"] * s["T"] * s["H"] * s["D"] * s["D"]),
    # Block-sparse causal attention: key blocks listed per query block, read through a pointer the loop advances,
    # the scores started from the causal mask; a ragged last block (1000 tokens), several heads.
    Case(name="suite_block_sparse_attention", fixture="suite_block_sparse_attention", wrapper="block_sparse_attention",
         make_inputs=_block_sparse_inputs, reference=_ref_block_sparse,
         shape=dict(Z=2, H=3, N_CTX=1000, HEAD_DIM=128, DENSITY=0.3),
         small_shape=dict(Z=1, H=2, N_CTX=300, HEAD_DIM=64, DENSITY=0.5), atol=5e-3,
         bench_shape=dict(Z=2, H=16, N_CTX=8192, HEAD_DIM=128, DENSITY=0.3),
         flops=lambda s: 4.0 * s["Z"] * s["H"] * s["N_CTX"] ** 2 * s["HEAD_DIM"] * 0.5 * s["DENSITY"]),
    # ... short sequences (two query blocks a head): the ring's fill and drain
    Case(name="suite_block_sparse_attention-short", fixture="suite_block_sparse_attention",
         wrapper="block_sparse_attention", make_inputs=_block_sparse_inputs, reference=_ref_block_sparse,
         shape=dict(Z=4, H=16, N_CTX=256, HEAD_DIM=128, DENSITY=1.0),
         small_shape=dict(Z=1, H=1, N_CTX=200, HEAD_DIM=64, DENSITY=1.0), atol=5e-3,
         bench_shape=dict(Z=32, H=16, N_CTX=512, HEAD_DIM=128, DENSITY=1.0),
         flops=lambda s: 4.0 * s["Z"] * s["H"] * s["N_CTX"] ** 2 * s["HEAD_DIM"] * 0.5 * s["DENSITY"]),
    # Block-skipping sparse attention: every key block walked, the flagged-off ones skipped under `if kbid:` (their
    # K and V tiles loaded in the branch); ragged query and key lengths, query blocks that read nothing.
    Case(name="suite_skip_block_attention", fixture="suite_skip_block_attention", wrapper="skip_block_attention",
         make_inputs=_skip_block_inputs, reference=_ref_skip_block,
         shape=dict(Z=2, H=3, QO=1000, KV=900, HEAD_DIM=64, DENSITY=0.4),
         small_shape=dict(Z=1, H=2, QO=200, KV=300, HEAD_DIM=64, DENSITY=0.5), atol=5e-3,
         bench_shape=dict(Z=2, H=16, QO=8192, KV=8192, HEAD_DIM=128, DENSITY=0.3),
         flops=lambda s: 4.0 * s["Z"] * s["H"] * s["QO"] * s["KV"] * s["HEAD_DIM"] * s["DENSITY"]),
    # ... every block read (the guard always holds), head dimension 64
    Case(name="suite_skip_block_attention-dense", fixture="suite_skip_block_attention",
         wrapper="skip_block_attention", make_inputs=_skip_block_inputs, reference=_ref_skip_block,
         shape=dict(Z=4, H=8, QO=256, KV=512, HEAD_DIM=128, DENSITY=1.0),
         small_shape=dict(Z=1, H=1, QO=130, KV=200, HEAD_DIM=64, DENSITY=1.0), atol=5e-3,
         bench_shape=dict(Z=2, H=16, QO=4096, KV=4096, HEAD_DIM=64, DENSITY=1.0),
         flops=lambda s: 4.0 * s["Z"] * s["H"] * s["QO"] * s["KV"] * s["HEAD_DIM"] * s["DENSITY"]),
    # ... short sequences (8 key blocks, half of them read): the ring's fill and drain
    Case(name="suite_skip_block_attention-short", fixture="suite_skip_block_attention",
         wrapper="skip_block_attention", make_inputs=_skip_block_inputs, reference=_ref_skip_block,
         shape=dict(Z=8, H=8, QO=300, KV=500, HEAD_DIM=128, DENSITY=0.5),
         small_shape=dict(Z=1, H=1, QO=100, KV=130, HEAD_DIM=64, DENSITY=0.5), atol=5e-3,
         bench_shape=dict(Z=16, H=16, QO=512, KV=512, HEAD_DIM=128, DENSITY=0.5),
         flops=lambda s: 4.0 * s["Z"] * s["H"] * s["QO"] * s["KV"] * s["HEAD_DIM"] * s["DENSITY"]),
    # The dQ pass of block-sparse attention's backward: a table of key blocks per query block, the block index
    # loaded in the iteration masking loads and probabilities; a ragged last block (1000 tokens).
    Case(name="suite_sparse_attention_bwd_dq", fixture="suite_sparse_attention_bwd_dq",
         wrapper="sparse_attention_bwd_dq", make_inputs=_sparse_dq_inputs, reference=_ref_sparse_dq,
         shape=dict(BH=6, L=1000, D=64, TOPK=8), small_shape=dict(BH=2, L=300, D=64, TOPK=3), atol=2e-2, rtol=2e-2,
         bench_shape=dict(BH=32, L=8192, D=64, TOPK=32),
         flops=lambda s: 6.0 * s["BH"] * s["L"] * s["TOPK"] * 64 * s["D"]),
    # A linear-attention state: keys and gates read transposed ([BK, BT]), the dot's A computed from them; a ragged
    # sequence and head size.
    Case(name="fla_gated_state", fixture="fla_gated_state", wrapper="gated_state", make_inputs=_gated_state_inputs,
         reference=_ref_gated_state, shape=dict(B=3, T=1000, K=100, V=120), small_shape=dict(B=2, T=150, K=64, V=64),
         atol=3e-2, rtol=2e-2, bench_shape=dict(B=64, T=4096, K=128, V=128),
         flops=lambda s: 2.0 * s["B"] * s["T"] * s["K"] * s["V"]),
    # A chunked scan's output: an fp32 (tf32) product with the chunk's state and 16-bit products inside the chunk
    # into one accumulator (two operand types, one MMA layout); a ragged last chunk, a chunk size given at launch.
    Case(name="suite_chunk_state_output", fixture="suite_chunk_state_output", wrapper="chunk_state_output",
         make_inputs=_chunk_state_output_inputs, reference=_ref_chunk_state_output,
         shape=dict(T=1000, D=200, S=64, CHUNK=256), small_shape=dict(T=300, D=64, S=32, CHUNK=128), atol=3e-2,
         rtol=2e-2, bench_shape=dict(T=65536, D=2048, S=64, CHUNK=256),
         flops=lambda s: 2.0 * s["T"] * s["D"] * (s["S"] + s["CHUNK"] / 2)),
    # Attention's backward dK/dV pass: four chained dots, Q and dO each read as loaded and transposed.
    Case(name="suite_attention_bwd", fixture="suite_attention_bwd", wrapper="attention_bwd_dkdv",
         make_inputs=_attention_bwd_inputs, reference=_ref_attention_bwd, shape=dict(BH=6, T=1000),
         small_shape=dict(BH=2, T=150), bench_shape=dict(BH=32, T=4096), atol=3e-2, rtol=3e-2,
         flops=lambda s: 4 * 2.0 * s["BH"] * s["T"] * s["T"] * 64),
    # ... at sizes the sm90 launcher runs the Gluon kernel for (aligned rows, 16 query blocks or more), and one it
    # does not (8 query blocks: the source kernel)
    Case(name="suite_attention_bwd-aligned", fixture="suite_attention_bwd", wrapper="attention_bwd_dkdv",
         make_inputs=_attention_bwd_inputs, reference=_ref_attention_bwd, shape=dict(BH=6, T=1024),
         small_shape=dict(BH=2, T=256), bench_shape=None, atol=3e-2, rtol=3e-2),
    # Rows of each expert from tables in memory: data-dependent row starts and bounds, per-expert base offsets.
    _suite_gemm_case("suite_moe_grouped_rows", wrapper="moe_grouped_rows", make_inputs=_moe_rows_inputs,
                     reference=_ref_moe_rows, shape=dict(E=6, T=1000, N=1100, K=700),
                     small_shape=dict(E=4, T=150, N=130, K=100), bench_shape=dict(E=8, T=8192, N=4096, K=4096),
                     flops=lambda s: 2.0 * s["T"] * s["N"] * s["K"]),
    _suite_gemm_case("suite_bmm", wrapper="bmm", make_inputs=_bmm_inputs, reference=_ref_matmul,
                     shape=dict(B=3, M=500, N=600, K=300), small_shape=dict(B=2, M=70, N=90, K=50),
                     bench_shape=dict(B=8, M=2048, N=2048, K=2048), flops=_bmm_flops),
    # FlagGems' style: masks chosen under launch flags, the K offsets advanced in the branch that needs them; ragged
    # sizes, then multiples of both configs' tiles (the DIVISIBLE_* copies)
    _suite_gemm_case("suite_bmm_divisible", wrapper="bmm", make_inputs=_bmm_inputs, reference=_ref_matmul,
                     shape=dict(B=3, M=500, N=600, K=300), small_shape=dict(B=2, M=70, N=90, K=50),
                     bench_shape=dict(B=8, M=2048, N=2048, K=2048), flops=_bmm_flops),
    _suite_gemm_case("suite_bmm_divisible-even", fixture="suite_bmm_divisible", wrapper="bmm",
                     make_inputs=_bmm_inputs, reference=_ref_matmul, shape=dict(B=2, M=512, N=640, K=384),
                     small_shape=dict(B=2, M=128, N=128, K=128), bench_shape=None, flops=None),
    # Descriptor operands keep 16-byte aligned rows (K and N multiples of 8).
    _suite_gemm_case("suite_desc_linear", wrapper="linear", make_inputs=_linear_nk_inputs(torch.float16),
                     reference=_ref_linear_nk, shape=dict(M=1000, N=1096, K=712),
                     small_shape=dict(M=150, N=136, K=104)),
    # Decode batches: the launch sizes the row block to the batch (16, 32, then 64 rows).
    *(_suite_gemm_case(f"suite_decode_linear{suffix}", fixture="suite_decode_linear", wrapper="decode_linear",
                       make_inputs=_linear_nk_inputs(torch.float16), reference=_ref_linear_nk,
                       shape=dict(M=m, N=1096, K=712), small_shape=dict(M=m, N=136, K=104),
                       bench_shape=dict(M=bench, N=8192, K=8192))
      for suffix, m, bench in (("", 13, 16), ("-32rows", 29, 32), ("-64rows", 200, 128))),
    _suite_gemm_case("suite_linear_trans_b", wrapper="linear",
                     make_inputs=_linear_nk_inputs(torch.float16, with_bias=True), reference=_ref_linear_nk),
    # TF32 keeps 10 mantissa bits: errors of about 1e-3 relative on sums of 700 products.
    _suite_gemm_case("suite_gemm_tf32", wrapper="matmul_tf32", make_inputs=_fp32_gemm_inputs, atol=0.1, rtol=1e-2),
    _suite_gemm_case("suite_splitk_atomic", wrapper="matmul_splitk_atomic", shape=dict(M=250, N=330, K=4100),
                     small_shape=dict(M=70, N=100, K=600), bench_shape=dict(M=2048, N=2048, K=8192),
                     options=dict(split_k=4), rtol=1e-3),
    _suite_gemm_case("suite_fp8_blockscale", wrapper="fp8_blockscale_matmul", make_inputs=_fp8_blockscale_inputs,
                     reference=_ref_fp8_blockscale, atol=5e-2, rtol=2e-2),
    _suite_gemm_case("suite_mx_gemm", wrapper="mx_gemm", make_inputs=_mx_inputs, reference=_ref_mx_gemm,
                     shape=dict(M=1000, N=1100, K=768), small_shape=dict(M=150, N=130, K=256),
                     bench_shape=dict(M=4096, N=4096, K=8192), flops=_mx_flops, atol=5e-1, rtol=2e-2),
    _suite_gemm_case("suite_int8_rowscale", wrapper="int8_matmul_rowscale", make_inputs=_int8_gemm_inputs,
                     reference=_ref_int8_matmul_scaled),
    _suite_gemm_case("suite_scaled_mm_carried", wrapper="scaled_mm_carried", make_inputs=_int8_gemm_inputs,
                     reference=_ref_int8_matmul_scaled),
    # (an accumulator typed from the output's type: the AMD variants run fp8 launches, int8 ones the source kernel)
    _suite_gemm_case("suite_a8w8_output_acc", wrapper="a8w8_matmul", make_inputs=_fp8_gemm_inputs,
                     reference=_ref_int8_matmul_scaled, atol=5e-2, rtol=2e-2),
    _suite_gemm_case("suite_a8w8_output_acc-int8", fixture="suite_a8w8_output_acc", wrapper="a8w8_matmul",
                     make_inputs=_int8_gemm_inputs, reference=_ref_int8_matmul_scaled, atol=5e-2, rtol=2e-2),
    _suite_gemm_case("suite_scaled_mm_carried-small", fixture="suite_scaled_mm_carried", wrapper="scaled_mm_carried",
                     make_inputs=_int8_gemm_inputs, reference=_ref_int8_matmul_scaled,
                     shape=dict(M=40, N=1100, K=700), small_shape=dict(M=17, N=130, K=100), bench_shape=None,
                     flops=None),
    # Sizes at which the sm90 variants run the K-major copy of B (`_KMajorCopy`: at least 128 rows of A, 512K outputs
    # and 4M elements of B, A's rows 16-byte aligned), ragged (K a multiple of 16 but of no block); the cases above run
    # the source kernel there (fewer elements).
    *[_suite_gemm_case(f"{fixture}-kmajor", fixture=fixture, wrapper=wrapper, make_inputs=inputs, reference=reference,
                       shape=dict(M=1000, N=2100, K=2096), small_shape=dict(M=150, N=130, K=100), bench_shape=None,
                       flops=None, **tolerance)
      for fixture, wrapper, inputs, reference, tolerance in (
          ("matmul_int8", "int8_matmul_scaled", _int8_gemm_inputs, _ref_int8_matmul_scaled, {}),
          ("suite_int8_rowscale", "int8_matmul_rowscale", _int8_gemm_inputs, _ref_int8_matmul_scaled, {}),
          ("suite_scaled_mm_carried", "scaled_mm_carried", _int8_gemm_inputs, _ref_int8_matmul_scaled, {}),
          ("suite_fp8_blockscale", "fp8_blockscale_matmul", _fp8_blockscale_inputs, _ref_fp8_blockscale,
           dict(atol=5e-2, rtol=2e-2)),
          ("suite_gemm_tf32", "matmul_tf32", _fp32_gemm_inputs, _ref_matmul, dict(atol=0.3, rtol=1e-2)))],
    # a serving-style block-scaled fp8 linear layer (weight [N, K], scales per 128 x 128 block, group sizes passed at
    # launch): K ragged, then the 64-row tile with 4 warps (the launcher runs the source kernel there)
    _suite_gemm_case("suite_block_fp8_linear", wrapper="block_fp8_linear", make_inputs=_block_fp8_linear_inputs,
                     reference=_ref_block_fp8_linear, shape=dict(M=1000, N=1104, K=720),
                     small_shape=dict(M=150, N=136, K=208), atol=5e-2, rtol=2e-2),
    _suite_gemm_case("suite_block_fp8_linear-m64", fixture="suite_block_fp8_linear", wrapper="block_fp8_linear",
                     make_inputs=_block_fp8_linear_inputs, reference=_ref_block_fp8_linear,
                     shape=dict(M=1000, N=1104, K=720), small_shape=dict(M=150, N=136, K=208),
                     options=dict(block_m=64, num_warps=4), atol=5e-2, rtol=2e-2),
    # the serving engines' fused-MoE kernel, block-scaled fp8: 64-row blocks on 4 warps (where every target's
    # variant runs its copy of the source kernel, the B scale read once per tile), then 128 on 8
    _suite_gemm_case("suite_moe_fp8_blockscale", wrapper="fused_moe_fp8", make_inputs=_moe_fp8_inputs,
                     reference=_ref_moe_fp8, shape=dict(T=2000, E=4, N=1104, K=720),
                     small_shape=dict(T=200, E=3, N=136, K=208), bench_shape=dict(T=16384, E=8, N=4096, K=4096),
                     flops=_moe_sorted_flops, atol=5e-2, rtol=2e-2),
    _suite_gemm_case("suite_moe_fp8_blockscale-m128", fixture="suite_moe_fp8_blockscale", wrapper="fused_moe_fp8",
                     make_inputs=functools.partial(_moe_fp8_inputs, block_m=128), reference=_ref_moe_fp8,
                     shape=dict(T=2000, E=4, N=1104, K=720), small_shape=dict(T=200, E=3, N=136, K=208),
                     bench_shape=dict(T=16384, E=8, N=4096, K=4096), flops=_moe_sorted_flops,
                     options=dict(block_m=128, num_warps=8), atol=5e-2, rtol=2e-2),
    _suite_gemm_case("suite_lora", wrapper="lora_linear", make_inputs=_lora_inputs, reference=_ref_lora,
                     shape=dict(M=1000, N=1100, K=700, R=16), small_shape=dict(M=150, N=130, K=100, R=16),
                     bench_shape=dict(M=4096, N=4096, K=4096, R=16), flops=_lora_flops),
    _suite_gemm_case("suite_moe_sorted", wrapper="moe_sorted_gemm", make_inputs=_moe_sorted_inputs,
                     reference=_ref_moe_sorted, shape=dict(T=2000, E=4, N=1100, K=700),
                     small_shape=dict(T=200, E=3, N=90, K=100), bench_shape=dict(T=16384, E=8, N=4096, K=4096),
                     flops=_moe_sorted_flops),
    *(
        Case(
            name=f"suite_gqa_attention-{'causal' if causal else 'full'}-d{head_dim}",
            fixture="suite_gqa_attention",
            wrapper="gqa_attention",
            make_inputs=_gqa_inputs,
            reference=_ref_gqa,
            # (17 query blocks of 128: the launcher's grid check gives such launches to the Gluon kernel)
            shape=dict(Z=2, H=8, H_KV=2, N_CTX=2100, HEAD_DIM=head_dim),
            small_shape=dict(Z=1, H=4, H_KV=2, N_CTX=150, HEAD_DIM=head_dim),
            options=dict(causal=causal, sm_scale=head_dim**-0.5),
            atol=5e-3,
            bench_shape=dict(Z=4, H=16, H_KV=4, N_CTX=4096, HEAD_DIM=head_dim),
            flops=_attention_flops(causal),
        )
        for causal, head_dim in ((False, 128), (True, 64), (True, 128))
    ),
    Case(
        name="suite_linear_attn",
        fixture="suite_linear_attn",
        wrapper="linear_attention",
        make_inputs=_linear_attn_inputs,
        reference=_ref_linear_attn,
        shape=dict(B=2, H=3, T=1000, D=64),
        small_shape=dict(B=1, H=2, T=150, D=64),
        atol=5e-2,
        rtol=2e-2,
        bench_shape=dict(B=4, H=16, T=4096, D=64),
        flops=_linear_attn_flops,
    ),
    Case(name="suite_online_softmax", fixture="suite_online_softmax", wrapper="softmax",
         make_inputs=_rows_inputs(torch.float32), reference=_ref_online_softmax, shape=dict(M=1823, N=5000),
         small_shape=dict(M=37, N=2100), atol=1e-5, rtol=1e-4),
    Case(name="suite_add_rmsnorm", fixture="suite_add_rmsnorm", wrapper="add_rms_norm",
         make_inputs=_add_rmsnorm_inputs, reference=_ref_add_rmsnorm, shape=dict(M=1001, N=3000),
         small_shape=dict(M=9, N=1500), options=dict(eps=1e-6)),
    Case(name="suite_cross_entropy", fixture="suite_cross_entropy", wrapper="cross_entropy",
         make_inputs=_cross_entropy_inputs, reference=_ref_cross_entropy, shape=dict(M=301, V=32003),
         small_shape=dict(M=9, V=5000), atol=1e-4, rtol=1e-4),
    *(
        Case(name=f"suite_geglu-{act}", fixture="suite_geglu", wrapper="glu", make_inputs=_glu_inputs,
             reference=_ref_glu, shape=dict(M=1000, N=1500), small_shape=dict(M=30, N=1100), options=dict(act=act))
        for act in ("gelu", "silu")
    ),
    Case(name="suite_row_sumsq", fixture="suite_row_sumsq", wrapper="row_sumsq", make_inputs=_rows_inputs(torch.float16),
         reference=_ref_row_sumsq, shape=dict(M=1001, N=3000), small_shape=dict(M=37, N=600), atol=1e-3, rtol=1e-4),
    Case(name="suite_layernorm_bwd", fixture="suite_layernorm_bwd", wrapper="layer_norm_bwd_dx",
         make_inputs=_layernorm_bwd_inputs, reference=_ref_layernorm_bwd, shape=dict(M=1001, N=3000),
         small_shape=dict(M=9, N=1500)),
    # tl.rand's stream has no torch equivalent: p=0 keeps everything (checked against torch); p=0.3 compares the
    # variant with the original only.
    Case(name="suite_dropout-p0", fixture="suite_dropout", wrapper="dropout", make_inputs=_vector_inputs,
         reference=lambda x, p, seed: x, shape=dict(n=98_432 + 17), small_shape=dict(n=5_000),
         options=dict(p=0.0, seed=7), atol=0.0, rtol=0.0),
    Case(name="suite_dropout-p0.3", fixture="suite_dropout", wrapper="dropout", make_inputs=_vector_inputs,
         reference=None, shape=dict(n=98_432 + 17), small_shape=dict(n=5_000), options=dict(p=0.3, seed=7),
         atol=1e-6, rtol=1e-6),
    Case(name="suite_atomic_colsum", fixture="suite_atomic_colsum", wrapper="column_sum",
         make_inputs=_rows_inputs(torch.float16), reference=_ref_column_sum, shape=dict(M=3001, N=1100),
         small_shape=dict(M=150, N=300), atol=1e-3, rtol=1e-4),
    # The hash has no torch twin: the variant is compared with the original only, bit for bit.
    Case(name="suite_seeded_hash", fixture="suite_seeded_hash", wrapper="seeded_hash", make_inputs=_vector_inputs,
         reference=None, shape=dict(n=1_000_003), small_shape=dict(n=5_000), options=dict(seed=0x1234_5678_9ABC),
         atol=0.0, rtol=0.0),
    # (16 chunks a row: the chunk count is an address stride the aligned launch needs to be a multiple of 16)
    Case(name="suite_top1_router", fixture="suite_top1_router", wrapper="top1_route",
         make_inputs=_rows_inputs(torch.float32), reference=_ref_top1_route, shape=dict(M=3001, N=60),
         small_shape=dict(M=70, N=60), atol=1e-5, rtol=1e-4),
    Case(name="suite_welford_rows", fixture="suite_welford_rows", wrapper="welford_rows",
         make_inputs=_rows_inputs(torch.float32), reference=lambda x: (x.float().mean(dim=1),
                                                                      x.float().var(dim=1, unbiased=False)),
         shape=dict(M=1001, N=3000), small_shape=dict(M=9, N=1500), atol=1e-3, rtol=1e-3),
    Case(name="suite_chunk_totals", fixture="suite_chunk_totals", wrapper="chunked_cumsum",
         make_inputs=_rows_inputs(torch.float32), reference=lambda x: torch.cumsum(x, dim=1),
         shape=dict(M=129, N=16 * 1024 - 5), small_shape=dict(M=5, N=2500), atol=1e-2, rtol=1e-3),
]
CASES += SUITE_CASES


def _paged_inputs(s, device, gen):
    """Requests of `T` tokens (ragged: each `RAGGED` x 37 tokens shorter than the one before, at least 1) with their
    keys and values at shuffled rows of a pool; `H` query heads over `HKV` key/value heads of `D`."""
    b, t, h, hkv, d = s["B"], s["T"], s["H"], s["HKV"], s["D"]
    lens = [max(1, t - (i * 37 * s.get("RAGGED", 1)) % max(1, t // 2)) for i in range(b)]
    total = sum(lens)
    pool = total + 64  # (rows no request uses)
    rows = torch.randperm(pool, generator=gen)[:total].to(torch.int32)
    table = torch.zeros(b, -(-max(lens) // 64) * 64, dtype=torch.int32)  # (a serving table: rows of a padded width)
    start = 0
    for i, n in enumerate(lens):
        table[i, :n] = rows[start:start + n]
        start += n
    q = _randn(gen, total, h, d, device=device)
    k_pool = _randn(gen, pool, hkv, d, device=device)
    v_pool = _randn(gen, pool, hkv, d, device=device)
    return (q, k_pool, v_pool, table.to(device), torch.tensor(lens, dtype=torch.int32, device=device), max(lens),
            d ** -0.5)


def _ref_paged_prefill(q, k_pool, v_pool, req_to_tokens, seq_lens, max_len, sm_scale):
    out = torch.empty_like(q, dtype=torch.float64)
    group = q.shape[1] // k_pool.shape[1]
    start = 0
    for i, n in enumerate(seq_lens.tolist()):
        rows = req_to_tokens[i, :n].long()
        qi = q[start:start + n].double().transpose(0, 1)  # [H, n, D]
        ki = k_pool[rows].double().repeat_interleave(group, 1).transpose(0, 1)
        vi = v_pool[rows].double().repeat_interleave(group, 1).transpose(0, 1)
        scores = (qi @ ki.transpose(-1, -2)) * sm_scale
        future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        out[start:start + n] = (torch.softmax(scores.masked_fill(future, float("-inf")), -1) @ vi).transpose(0, 1)
        start += n
    return out


def _paged_flops(s: Shape) -> float:  # causal: half of two T x T x D GEMMs per request and head
    return 2.0 * s["B"] * s["H"] * s["T"] ** 2 * s["D"]


# Causal attention at a head dimension padded to a power of two (the loads mask it by the runtime `head_dim`).
for _d in (96, 80):
    for _z, _n in ((16, 512), (4, 2048), (4, 4096), (2, 8192)):
        CASES.append(Case(name=f"suite_padded_head_attention-d{_d}-{_z}x{_n}", fixture="suite_padded_head_attention",
                          wrapper="attention", make_inputs=_attention_inputs, reference=_ref_attention,
                          shape=dict(Z=2, H=3, N_CTX=min(_n, 2048) + 5, HEAD_DIM=_d),
                          small_shape=dict(Z=1, H=2, N_CTX=150, HEAD_DIM=_d),
                          options=dict(causal=True, sm_scale=_d**-0.5), atol=5e-3,
                          bench_shape=dict(Z=_z, H=32, N_CTX=_n, HEAD_DIM=_d), flops=_attention_flops(True)))


# Paged prefill at the sequence mixes of serving (many short prompts ... few long ones), equal lengths on the bench.
PAGED_MIXES = {"64x256": (64, 256), "32x512": (32, 512), "16x1024": (16, 1024), "4x2048": (4, 2048),
               "4x4096": (4, 4096), "2x8192": (2, 8192)}
for _mix, (_b, _t) in PAGED_MIXES.items():
    CASES.append(Case(name=f"suite_paged_prefill-{_mix}", fixture="suite_paged_prefill", wrapper="paged_prefill",
                      make_inputs=_paged_inputs, reference=_ref_paged_prefill,
                      shape=dict(B=min(_b, 4), T=min(_t, 2048) + 3, H=4, HKV=2, D=128, RAGGED=1),
                      small_shape=dict(B=2, T=150, H=2, HKV=1, D=128, RAGGED=1),
                      atol=5e-3, bench_shape=dict(B=_b, T=_t, H=32, HKV=8, D=128, RAGGED=0), flops=_paged_flops))

# Realistic sizes for the cases without a dot loop (elementwise, row-wise, reductions), so that the benchmark times
# every translated kernel against its original too: a translated kernel that is memory-bound must not lose
# bandwidth to its explicit layouts ("never slower" holds for them as for the pipelined loops). No flop count:
# these kernels are timed by their ratio alone.
_ROWS = dict(M=8192, N=4096)
MEMORY_BENCH: dict[str, Shape] = {
    "vector_add": dict(n=1 << 25),
    "softmax": _ROWS,
    "log_softmax": _ROWS,
    "layernorm": dict(B=4, M=2048, N=4096),
    "rmsnorm": dict(B=4, M=2048, N=4096),
    "fused_helpers": _ROWS,
    "import_aliases": dict(n=1 << 25),
    "column_minmax-ragged": dict(M=8192, N=4100),
    "column_minmax-even": _ROWS,
    "bc_norm_rows": _ROWS,
    "bc_rotary": dict(T=8192, H=32, D=128, P=8192),
    "bc_cross_entropy": dict(M=4096, V=32000),
    "bc_tuple_helper": _ROWS,
    "lang_gated_act-silu": dict(n=1 << 25),
    "lang_gated_act-gelu_tanh": dict(n=1 << 25),
    "lang_router": dict(T=65536, E=64),
    "bc_logsumexp_rows": _ROWS,
    "lang_shapes-swap_pairs": dict(n=1 << 25),
    "lang_shapes-scans": dict(M=8192, N=1024),
    "lang_shapes-bucket_histogram": dict(n=1 << 24),
    "lang_scan_dropout": dict(M=8192, N=2048),
    "suite_online_softmax": dict(M=8192, N=8192),
    "suite_add_rmsnorm": _ROWS,
    "suite_cross_entropy": dict(M=4096, V=32000),
    "suite_geglu-gelu": _ROWS,
    "suite_geglu-silu": _ROWS,
    "suite_row_sumsq": _ROWS,
    "suite_layernorm_bwd": _ROWS,
    "suite_dropout-p0.3": dict(n=1 << 25),
    "suite_atomic_colsum": _ROWS,
    "suite_chunk_totals": dict(M=2048, N=16 * 1024),
    "suite_seeded_hash": dict(n=1 << 25),
    "suite_top1_router": dict(M=1 << 20, N=64),
    "suite_welford_rows": _ROWS,
}
CASES = [replace(c, bench_shape=MEMORY_BENCH[c.name]) if c.name in MEMORY_BENCH else c for c in CASES]


# ---------------------------------------------------------------------------------------------------------------------
# Running and comparing.


def _import_file(path: Path, module_name: str):
    if not path.exists():
        raise FileNotFoundError(f"no such module: {path}")
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def _autotuners(module):
    from triton.runtime.autotuner import Autotuner  # not at the top: TRITON_INTERPRET must be set first

    values = []
    for value in vars(module).values():  # a TMA launcher (`_TMAOrTriton`) stands for a Gluon and a Triton kernel
        values += [value.gluon_kernel, value.triton_kernel] if _is_launcher(value) else [value]
    for value in values:
        while value is not None:  # Heuristics -> Autotuner -> JIT function chains
            if isinstance(value, Autotuner):
                yield value
            value = getattr(value, "fn", None)


def _is_launcher(value) -> bool:
    """A launcher standing for a Gluon and a Triton kernel: TMA (`_TMAOrTriton`) or row alignment (`_AlignedOrTriton`,
    kernels without a pipelined loop)."""
    return type(value).__name__ in ("_TMAOrTriton", "_AlignedOrTriton")


def _launchers(module) -> list:
    return [v for v in vars(module).values() if _is_launcher(v)]


def _count_paths(module) -> dict[str, int]:
    """Counts, from now on, the launches of the module's launchers (`_TMAOrTriton`) that take the Gluon kernel ("tma",
    printed as gluon) and those that take the source's Triton kernel ("triton")."""
    counts = {"tma": 0, "triton": 0}
    for launcher in _launchers(module):
        method = "aligned" if type(launcher).__name__ == "_AlignedOrTriton" else "addressable"
        check = getattr(type(launcher), method)

        def counted(args, kwargs, _launcher=launcher, _check=check):
            ok = _check(_launcher, args, kwargs)
            counts["tma" if ok else "triton"] += 1
            return ok

        setattr(launcher, method, counted)
        if hasattr(type(launcher), "long_enough"):  # a grid too short for the Gluon kernel: the source kernel after all

            def long_enough(grid, args, kwargs, _launcher=launcher, _check=type(launcher).long_enough):
                ok = _check(_launcher, grid, args, kwargs)
                if not ok:
                    counts["tma"] -= 1
                    counts["triton"] += 1
                return ok

            setattr(launcher, "long_enough", long_enough)
        split = getattr(getattr(launcher, "gluon_kernel", None), "fn", None)
        if type(split).__name__ == "_ConfigSplit":  # a pinned config (--all-configs) the split gives the source kernel

            def pick(args, kwargs, _split=split, _pick=type(split).pick, _tuner=launcher.gluon_kernel):
                fn, kwargs = _pick(_split, args, kwargs)
                if fn is _split.triton_fn and len(_tuner.configs) == 1:  # (not the autotuner's timing runs)
                    counts["tma"] -= 1
                    counts["triton"] += 1
                return fn, kwargs

            setattr(split, "pick", pick)
    return counts


def _aligned(shape: Shape, multiple: int = 8) -> Shape:
    """A shape as ragged as `shape` for the tiles but with every size a multiple of 8 (16-byte rows of 16-bit
    elements): the launches a TMA launcher gives to its Gluon kernel; of 16 (strides multiples of 16 elements): those
    the alignment launcher gives to its."""
    return {k: v if k in ("B", "H", "E", "split_k") else -(-v // multiple) * multiple for k, v in shape.items()}


def _time_configs_as_equal(kernel_call, quantiles=None, **kwargs):
    kernel_call()
    return [1.0, 1.0, 1.0]


def _prepare_autotuners(module, config_index: int | None, interpret: bool) -> None:
    """Pins every autotuned kernel of the module to its config number ``config_index`` (its last one if it has
    fewer). Without a pin under the interpreter, which has no benchmarker, gives each autotuner one that runs
    a config once and times all configs as equal, so the first one is kept."""
    for autotuner in _autotuners(module):
        if config_index is not None:
            autotuner.configs = [autotuner.configs[min(config_index, len(autotuner.configs) - 1)]]
        elif interpret:
            autotuner._do_bench = _time_configs_as_equal


def _config_count(module) -> int:
    """The autotune configs of the module's kernels, leaving out the source twins a variant's launcher adds
    (`_ConfigSplit.SOURCE`: they run the source kernel)."""
    return max((len([c for c in autotuner.configs if "_transpile_source" not in c.kwargs])
                for autotuner in _autotuners(module)), default=1)


def _outputs(result) -> tuple[torch.Tensor, ...]:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def _compare(actual, expected, atol: float, rtol: float) -> tuple[float, bool]:
    """Max absolute error over all outputs, and whether every element is within atol + rtol * |expected|."""
    actual, expected = _outputs(actual), _outputs(expected)
    if len(actual) != len(expected):
        return float("nan"), False
    errors, ok = [torch.zeros((), dtype=torch.float64)], True
    for a, e in zip(actual, expected):
        if a.shape != e.shape:
            return float("nan"), False
        a, e = a.double().cpu(), e.double().cpu()
        if a.numel():
            errors.append((a - e).abs().max())  # NaN if any element is NaN
        ok = ok and torch.isclose(a, e, atol=atol, rtol=rtol).all().item()
    return torch.stack(errors).max().item(), ok


def _call(module, case: Case, inputs: tuple):
    # Clone the inputs so that no run can see what another one did to them.
    args = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    result = getattr(module, case.wrapper)(*args, **case.options)
    if any(t.is_cuda for t in _outputs(result)):
        torch.cuda.synchronize()
    return result


@dataclass
class Loaded:
    """The modules that one fixture's cases run."""

    original: ModuleType
    variant: ModuleType | None = None  # None when no variant is checked, or when it could not be loaded
    variant_error: str | None = None  # why the variant asked for could not be loaded


def load_fixture(fixture: str, args: argparse.Namespace, config_index: int | None) -> Loaded:
    """Imports the fixture (and its variant) afresh, its autotuned kernels pinned to ``config_index`` if given."""
    loaded = Loaded(_import_file(FIXTURES_DIR / f"{fixture}.py", f"fixture_{fixture}"))
    if args.variant_dir is not None:
        try:
            path = args.variant_dir / f"{fixture}_{args.target}.py"
            loaded.variant = _import_file(path, f"variant_{args.target}_{fixture}")
        except Exception as exc:  # a variant that does not even import fails all its cases
            traceback.print_exc()
            loaded.variant_error = f"variant not loaded: {type(exc).__name__}: {exc}".splitlines()[0]
    for module in filter(None, (loaded.original, loaded.variant)):
        _prepare_autotuners(module, config_index, args.interpret)
    return loaded


def run_case(case: Case, loaded: Loaded, device: torch.device, small: bool, label: str) -> bool:
    """Runs one case and prints its line; returns whether it passed. A variant with TMA launchers runs the case a
    second time at the case's shape with sizes rounded up to multiples of 8 (label `+aligned`): the first run's
    rows are usually not 16-byte aligned, so that its launches take the source kernel; the second's take the Gluon
    kernel, and must (the line says how many launches took which)."""
    shape = case.small_shape if small else case.shape
    ok = _run_case(case, loaded, device, shape, label)
    launchers = _launchers(loaded.variant) if loaded.variant is not None else []
    if any(getattr(launcher, "tiles", None) for launcher in launchers) \
            and _aligned(shape) != shape:  # (a launcher that dispatches on a flag (`when`) reads no tiles)
        ok &= _run_case(case, loaded, device, _aligned(shape), f"{label}+aligned", must_tma=True)
    elif any(type(launcher).__name__ == "_AlignedOrTriton" for launcher in launchers) \
            and _aligned(shape, 16) != shape:  # rows of a multiple of 16 elements: the Gluon kernel's launches, where
        # the case's sizes are all its addresses read (the launch counts say which kernel ran)
        ok &= _run_case(case, loaded, device, _aligned(shape, 16), f"{label}+aligned")
    return ok


def _run_case(case: Case, loaded: Loaded, device: torch.device, shape: Shape, label: str,
              must_tma: bool = False) -> bool:
    paths = _count_paths(loaded.variant) if loaded.variant is not None else {}
    gen = torch.Generator().manual_seed(zlib.crc32(case.name.encode()))
    inputs = case.make_inputs(shape, device, gen)

    notes = [loaded.variant_error] if loaded.variant_error else []
    reference_err, variant_err = float("nan"), None
    try:
        got = _call(loaded.original, case, inputs)
        if case.reference is not None:
            reference_err, ok = _compare(got, case.reference(*inputs, **case.options), case.atol, case.rtol)
            if not ok:
                notes.append("original differs from torch")
        if loaded.variant is not None:
            variant_err, ok = _compare(_call(loaded.variant, case, inputs), got, case.atol, case.rtol)
            if not ok:
                notes.append("variant differs from original")
    except Exception as exc:  # report it and go on with the other cases
        if type(exc).__name__ == "CompileTimeAssertionFailure" and "@cfg" in label:
            # a config pinned at values its kernel asserts against (the three-consumer attention's 192 rows at a
            # head dimension above 64): the autotuner skips such a config, as it skips one that does not fit
            print(f"{label:<34} SKIP  (the kernel asserts against this config here; the autotuner skips it: "
                  f"{str(exc).splitlines()[-1][:120]})", flush=True)
            return True
        traceback.print_exc()
        notes.append(f"{type(exc).__name__}: {exc}".splitlines()[0])

    if must_tma and not paths.get("tma"):
        notes.append("no launch took the Gluon kernel")
    if paths and (paths["tma"] or paths["triton"]):
        notes_path = f"  [launches: {paths['tma']} gluon, {paths['triton']} triton]"
    else:
        notes_path = ""
    variant_text = "-" if variant_err is None else f"{variant_err:.3e}"
    shape_text = "x".join(f"{k}={v}" for k, v in shape.items())
    verdict = "FAIL  (" + "; ".join(notes) + ")" if notes else "PASS"
    print(
        f"{label:<34} {shape_text:<32} variant-vs-orig={variant_text:<10} orig-vs-torch={reference_err:.3e}  {verdict}"
        f"{notes_path}",
        flush=True,
    )
    return not notes


def _select(names: list[str] | None) -> list[Case]:
    if not names:
        return CASES
    known = {c.name for c in CASES} | {c.fixture for c in CASES}
    unknown = [n for n in names if n not in known]
    if unknown:
        sys.exit(f"unknown case(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return [c for c in CASES if c.name in names or c.fixture in names]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cuda", "cpu"), help="default: cpu with --interpret, else cuda")
    parser.add_argument("--interpret", action="store_true", help="run Triton's interpreter (small sizes)")
    parser.add_argument("--case", action="append", metavar="NAME", help="case or fixture name (repeatable)")
    parser.add_argument("--variant-dir", type=Path, help="directory holding the translated <fixture>_<target>.py")
    parser.add_argument("--target", default="sm90", help="target suffix of the variant files (default: sm90)")
    parser.add_argument(
        "--all-configs",
        action="store_true",
        help="run the cases of autotuned fixtures once per autotune config (NAME@cfgI), not just with the best one",
    )
    parser.add_argument("--list", action="store_true", help="print the case names and exit")
    args = parser.parse_args(argv)

    if args.list:
        for case in CASES:
            print(f"{case.name:<28} {case.fixture}.{case.wrapper}")
        return 0
    device = torch.device(args.device or ("cpu" if args.interpret else "cuda"))
    if device.type == "cpu" and not args.interpret:
        parser.error("Triton runs on the CPU only through its interpreter: add --interpret")
    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"  # read when triton is first imported, by the fixtures below

    cases = _select(args.case)
    all_ok = True
    for fixture in dict.fromkeys(c.fixture for c in cases):  # each fixture once, in table order
        loaded = load_fixture(fixture, args, config_index=None)
        # The variant's table may hold configs of its own after the original's (the original then runs its last).
        configs = max(_config_count(m) for m in (loaded.original, loaded.variant) if m is not None)
        config_indices = range(configs) if args.all_configs else [None]
        for index in config_indices:
            if index is not None:
                loaded = load_fixture(fixture, args, config_index=index)
            for case in cases:
                if case.fixture == fixture:
                    label = case.name if len(config_indices) == 1 else f"{case.name}@cfg{index}"
                    all_ok &= run_case(case, loaded, device, args.interpret, label)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
