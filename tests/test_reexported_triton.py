"""Triton imported through a project module that re-exports it (vLLM's `from vllm.triton_utils import tl, triton`, a
shim for platforms without Triton): its kernels are Triton kernels, read as if `triton` and `triton.language` were
imported directly; a module that merely has a name `triton` (JAX Pallas' `from jax.experimental.pallas import
triton`) is not Triton."""

from __future__ import annotations

import pytest

from transpile.diagnostics import TranspileError
from transpile.discover import discover
from transpile.engine import translate_source
from transpile.source import parse_source
from transpile.targets import get_target

SHIM = '''import torch

from vllm.triton_utils import tl, triton


@triton.jit
def add_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)


def add_one(x):
    y = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
    return y
'''


def test_reexported_triton_reads_as_triton() -> None:
    source = parse_source(SHIM, "k.py")
    assert ("vllm.triton_utils.triton", "triton") in source.reexports
    assert set(discover(source).functions) == {"add_kernel"}


@pytest.mark.parametrize("target", ["gfx950", "sm90"])
def test_reexported_triton_kernel_is_translated(target: str) -> None:
    result = translate_source(SHIM, "k.py", get_target(target))
    assert [f.name for f in result.functions if f.translated] == ["add_kernel"]
    assert "@gluon.jit\ndef add_kernel(" in result.text
    assert "from vllm.triton_utils import tl, triton\n" in result.text  # (the host code's imports, as written)


def test_a_name_triton_that_decorates_nothing_is_not_triton() -> None:
    text = "from jax.experimental.pallas import triton as plgpu\n\n\ndef f(x):\n    return plgpu.TritonCompilerParams()\n"
    source = parse_source(text, "p.py")
    assert source.reexports == []
    with pytest.raises(TranspileError, match="TT003"):
        translate_source(text, "p.py", get_target("sm90"))
