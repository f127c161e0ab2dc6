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
import importlib.util
import os
import sys
import traceback
import zlib
from dataclasses import dataclass, field
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
    reference: Callable[..., Any]  # torch implementation, called like the wrapper
    shape: Shape  # sizes on the GPU
    small_shape: Shape  # sizes under the interpreter, which is slow
    options: dict[str, Any] = field(default_factory=dict)  # keyword arguments of the wrapper and the reference
    atol: float = 1e-2
    rtol: float = 1e-2


# ---------------------------------------------------------------------------------------------------------------------
# Inputs. Random tensors are drawn on the CPU from a per-case generator, so a case sees the same data whatever
# the device and whichever other cases run.


def _randn(gen, *size, dtype=torch.float16, device):
    return torch.randn(*size, generator=gen).to(device=device, dtype=dtype)


def _gemm_inputs(s, device, gen):
    return _randn(gen, s["M"], s["K"], device=device), _randn(gen, s["K"], s["N"], device=device)


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


def _moe_inputs(s, device, gen):
    """Each expert gets a random number of distinct tokens; the rest of its M slots are -1 padding."""
    a = _randn(gen, s["T"], s["K"], device=device)
    idx = torch.full((s["E"], s["M"]), -1, dtype=torch.int32)
    for e in range(s["E"]):
        count = int(torch.randint(s["M"] // 2, s["M"] + 1, (1,), generator=gen))
        idx[e, :count] = torch.randperm(s["T"], generator=gen)[:count].to(torch.int32)
    b = _randn(gen, s["E"], s["K"], s["N"], device=device) / s["K"] ** 0.5
    return a, idx.to(device), b


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


# ---------------------------------------------------------------------------------------------------------------------
# Torch references, computed in float64 (GEMMs) or float32 so that they are more accurate than the kernels.


def _ref_matmul(a, b, split_k=1):
    return a.double() @ b.double()


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
            )


CASES: list[Case] = [
    Case(
        name="matmul_grouped",
        fixture="matmul_grouped",
        wrapper="matmul",
        make_inputs=_gemm_inputs,
        reference=_ref_matmul,
        shape=dict(M=1000, N=1100, K=700),
        small_shape=dict(M=150, N=130, K=100),
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
    ),
    Case(
        name="canon_linear_desc_bias",
        fixture="canon_linear_desc_bias",
        wrapper="linear_bias",
        make_inputs=_bias_gemm_inputs,
        reference=lambda a, b, bias: _ref_matmul_bias_act(a, b, bias, activation="none"),
        shape=dict(M=1000, N=1096, K=712),
        small_shape=dict(M=150, N=136, K=104),
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
    ),
    Case(
        name="matmul_int8",
        fixture="matmul_int8",
        wrapper="int8_matmul_scaled",
        make_inputs=_int8_gemm_inputs,
        reference=_ref_int8_matmul_scaled,
        shape=dict(M=1000, N=1100, K=700),
        small_shape=dict(M=150, N=130, K=100),
    ),
    Case(
        name="moe_gather_gemm",
        fixture="moe_gather_gemm",
        wrapper="gather_gemm",
        make_inputs=_moe_inputs,
        reference=_ref_gather_gemm,
        shape=dict(T=2000, E=4, M=600, N=1100, K=700),
        small_shape=dict(T=100, E=3, M=70, N=90, K=100),
    ),
    *_attention_cases(),
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
]


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

    for value in vars(module).values():
        while value is not None:  # Heuristics -> Autotuner -> JIT function chains
            if isinstance(value, Autotuner):
                yield value
            value = getattr(value, "fn", None)


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
    return max((len(autotuner.configs) for autotuner in _autotuners(module)), default=1)


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
    """Runs one case and prints its line; returns whether it passed."""
    shape = case.small_shape if small else case.shape
    gen = torch.Generator().manual_seed(zlib.crc32(case.name.encode()))
    inputs = case.make_inputs(shape, device, gen)

    notes = [loaded.variant_error] if loaded.variant_error else []
    reference_err, variant_err = float("nan"), None
    try:
        got = _call(loaded.original, case, inputs)
        reference_err, ok = _compare(got, case.reference(*inputs, **case.options), case.atol, case.rtol)
        if not ok:
            notes.append("original differs from torch")
        if loaded.variant is not None:
            variant_err, ok = _compare(_call(loaded.variant, case, inputs), got, case.atol, case.rtol)
            if not ok:
                notes.append("variant differs from original")
    except Exception as exc:  # report it and go on with the other cases
        traceback.print_exc()
        notes.append(f"{type(exc).__name__}: {exc}".splitlines()[0])

    variant_text = "-" if variant_err is None else f"{variant_err:.3e}"
    shape_text = "x".join(f"{k}={v}" for k, v in shape.items())
    verdict = "FAIL  (" + "; ".join(notes) + ")" if notes else "PASS"
    print(
        f"{label:<34} {shape_text:<32} variant-vs-orig={variant_text:<10} orig-vs-torch={reference_err:.3e}  {verdict}",
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
        config_indices = range(_config_count(loaded.original)) if args.all_configs else [None]
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
