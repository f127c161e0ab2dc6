"""`transpile.passes.transposed_keys` (AMD): a flash-attention K tile loaded as [HEAD_DIM, BLOCK_N] is loaded as its
transpose, [BLOCK_N, HEAD_DIM], and transposed in the scores' dot, so that the rings copy it 16 bytes along the head
dimension: the address and mask broadcasts swapped, 2-D names replaced by their swapped definitions, lines kept;
the rewritten Triton run by the interpreter gives the source's outputs bit for bit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from transpile.engine import prepare
from transpile.passes.transposed_keys import transpose_key_tiles

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
KT = (FIXTURES / "fx_attention_kt.py").read_text(encoding="utf-8")


def rewritten(text: str) -> str | None:
    prepared = prepare(text, "k.py")
    return transpose_key_tiles(prepared.source, prepared.facts, prepared.plans)


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
    # a 2-D address assigned twice cannot be re-evaluated transposed; a K loaded [BLOCK_N, HEAD_DIM] needs nothing
    twice = KT.replace("    q = tl.load(q_ptrs", "    kt_ptrs = kt_ptrs + 0\n    q = tl.load(q_ptrs")
    assert rewritten(twice) is None
    assert rewritten((FIXTURES / "attention_fwd.py").read_text(encoding="utf-8")) is None
    # a vector the address's definition reads is bound again in the loop: read at the load, it would hold another
    # value than where the address was made
    rebound = KT.replace("        offs_n = start_n + cols\n", "        offs_n = start_n + cols\n        cols = offs_n - start_n\n")
    assert rebound != KT and rewritten(rebound) is None


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


@pytest.mark.slow
def test_the_rewritten_kernel_computes_what_the_source_computes(tmp_path: Path) -> None:
    (tmp_path / "source.py").write_text(KT)
    (tmp_path / "rewritten.py").write_text(rewritten(KT) or "")
    (tmp_path / "run.py").write_text(RUN)
    result = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path / "source.py"),
                             str(tmp_path / "rewritten.py")], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TRITON_INTERPRET": "1"})
    assert result.returncode == 0 and "SAME" in result.stdout, result.stderr[-3000:]
