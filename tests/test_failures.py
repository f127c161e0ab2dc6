"""The failure classes of issue 9 that the fx_ fixtures show fixed, checked on their goldens and by compiles."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

from conftest import EXPECTED_DIR


def _golden(name: str, target: str) -> str:
    return (EXPECTED_DIR / target / f"{name}_{target}.py").read_text(encoding="utf-8")


def _pipelined(name: str, target: str) -> str:
    """The fixture's variant as the pipeline rules write it: its golden, or, where the profitability policy keeps
    the kernel as Triton (a form measured slower, or heavier in the machine code, than Triton's own), the
    `--gluon-always` translation."""
    text = _golden(name, target)
    if "# kept as Triton:" not in text:
        return text
    from transpile.engine import translate_source
    from transpile.targets import get_target

    source = (EXPECTED_DIR.parent / f"{name}.py").read_text(encoding="utf-8")
    return translate_source(source, f"{name}.py", get_target(target), gluon_always=True).text


@pytest.mark.parametrize("target", ["gfx942", "gfx950", "gfx1250", "sm90"])
@pytest.mark.parametrize("name", ["fx_attention_two_loops", "fx_two_gemms"])
def test_two_pipelined_loops_name_their_own_ring(name: str, target: str) -> None:
    text = _pipelined(name, target)
    assert "NUM_STAGES: gl.constexpr" in text and "NUM_STAGES_: gl.constexpr" in text
    assert text.count("NUM_STAGES: gl.constexpr") == 1 and text.count("NUM_STAGES_: gl.constexpr") == 1


@pytest.mark.parametrize("target", ["gfx942", "gfx950", "gfx1250"])
def test_amd_descriptor_attributes_are_translated(target: str) -> None:
    # (the Gluon kernel only: a launcher's source copy, `_linear_desc_kernel_triton`, keeps the Triton spellings)
    text = _pipelined("fx_desc_epilogue", target).split("def linear_desc_kernel")[1].split("_linear_desc_kernel_triton")[0]
    assert "acc.to(y_ptr.dtype.element_ty)" in text and "(BLOCK_M, BLOCK_N)[1]" in text
    assert "y_desc.dtype" not in text and "y_desc.block_shape" not in text


@pytest.mark.parametrize("target", ["gfx942", "gfx950", "gfx1250"])
def test_amd_attention_reads_k_loaded_as_head_dim_by_keys_from_its_ring(target: str) -> None:
    text = ast.unparse(ast.parse(_pipelined("fx_attention_kt", target)))  # one statement a line, whatever the layout
    # (K is loaded as its transpose, [BLOCK_N, HEAD_DIM], and read through a transposed view: transposed_keys)
    assert "k_ring = gl.allocate_shared_memory(K.dtype.element_ty, [NUM_STAGES, BLOCK_N, HEAD_DIM]" in text
    assert "k_t = k_ring.index(0).permute([1, 0]).load(gl.DotOperandLayout(1, mma_layout" in text or \
        "k_t = async_copy.load_shared_relaxed(k_ring.index(0).permute([1, 0]), gl.DotOperandLayout(1, mma_layout" in text
    assert "qk = _dot(q_op, k_t, " in text


def test_sm90_attention_with_k_as_head_dim_by_keys_copies_k_through_its_transposed_addresses() -> None:
    """K loaded as [HEAD_DIM, BLOCK_N]: the cp.async ring copies K rows along the head dimension, so it copies K
    through its transposed addresses into [BLOCK_N, HEAD_DIM] slots and QK^T reads a transposed view (a form once
    refused, and before that pipelined with a guard on the wrong stride)."""
    text = " ".join(_golden("fx_attention_kt", "sm90").split("def attn_kt_fwd")[1].split())
    assert "+ cols_ring[:, None] * stride_kn + offs_d_ring[None, :] )" in text
    assert "k_smem.index(slot).permute((1, 0))," in text
    assert "`k` is loaded [HEAD_DIM, BLOCK_N] in the source" in text


@pytest.mark.slow
def test_sm90_two_attention_loops_compile_pipelined(tmp_path: Path) -> None:
    """Both loops take the pipelined branch (head-dimension strides constexpr 1, sizes 16-divisible, as the launcher
    passes contiguous tensors): each ring has its own NUM_STAGES."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from transpile.engine import translate_source
    from transpile.targets import get_target

    # the golden keeps this kernel as Triton (profitability, 0.74x measured); --gluon-always emits both rings
    text = (EXPECTED_DIR.parent / "fx_attention_two_loops.py").read_text(encoding="utf-8")
    path = tmp_path / "fx_attention_two_loops_sm90_variant.py"
    path.write_text(translate_source(text, "fx_attention_two_loops.py", get_target("sm90"), gluon_always=True).text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    # (the Gluon kernel behind its alignment launcher, which --gluon-always keeps: see docs/OUTPUT.md)
    fn = getattr(module.attn_two_loops_fwd, "gluon_kernel", module.attn_two_loops_fwd)
    signature: dict[str, str] = {}
    constexprs: dict[str, object] = {}
    for name in fn.arg_names:
        if name.endswith("_ptr"):
            signature[name] = "*fp16"
        elif name == "sm_scale":
            signature[name] = "fp32"
        elif name in ("HEAD_DIM", "BLOCK_M", "BLOCK_N") or name.endswith("d"):
            signature[name] = "constexpr"
            constexprs[name] = {"HEAD_DIM": 64, "BLOCK_M": 128, "BLOCK_N": 64}.get(name, 1)
        else:
            signature[name] = "i32"
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
             if signature[name] not in ("constexpr", "fp32")}
    source = GluonASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8})
    ptx = compiled.asm["ptx"]
    assert "cp.async.cg.shared.global" in ptx and "wgmma.mma_async" in ptx


# The B address is recomputed from the loop variable *between* the two loads (a style of public MoE kernels):
# it is a producer statement of the iteration, not loop-carried state advanced after the loads.
ADDRESS_BETWEEN_LOADS = '''import triton
import triton.language as tl


@triton.jit
def gemm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    k_offs = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, K, BLOCK_K):
        k_idx = k + k_offs
        a_ptrs = a_ptr + rows[:, None] * stride_am + k_idx[None, :]
        a = tl.load(a_ptrs, mask=(rows[:, None] < M) & (k_idx[None, :] < K), other=0.0)
        b_ptrs = b_ptr + k_idx[:, None] * stride_bk + cols[None, :]
        b = tl.load(b_ptrs, mask=(k_idx[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :], acc.to(tl.float16),
             mask=(rows[:, None] < M) & (cols[None, :] < N))
'''


@pytest.mark.parametrize("target", ["gfx942", "gfx950", "gfx1250"])
def test_address_recomputed_between_the_loads_is_not_carried(target: str) -> None:
    from transpile.engine import translate_source
    from transpile.names import undefined_names
    from transpile.targets import get_target

    result = translate_source(ADDRESS_BETWEEN_LOADS, "x.py", get_target(target), gluon_always=True)
    (kernel,) = result.functions
    assert kernel.pipelined, kernel.kept_reason
    assert undefined_names(result.text) == []
    assert "b_ptrs_next = b_ptrs\n" not in result.text  # no carried copy of a value the iteration recomputes
    prologue = result.text.split("for i in gl.static_range(")[1].split("# Steady state")[0]
    # buffer copies (direct to LDS on gfx950, through registers on gfx942 and gfx1250): the base and the offsets,
    # made in each iteration before its copy
    assert prologue.index("b_ptrs_next_offs = ") < prologue.index("b_ptrs_next_offs,")
