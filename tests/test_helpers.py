"""The helpers variants carry (`transpile/helpers/`), as code: the copy each target takes of them, the layouts they
choose against the ones Triton's own compiler chooses for the same `tl.dot`, and the host launchers' decisions."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

import pytest
import triton

from transpile import language
from transpile.helpers import Helper, helper
from transpile.targets import all_targets, get_target

HELPERS = Path(__file__).resolve().parents[1] / "transpile" / "helpers"


def _parameters(module: str) -> set[str]:
    """The target parameters of a helper module: its top-level names in capitals."""
    text = (HELPERS / f"{module}.py").read_text()
    return set(re.findall(r"^(?:def )?([A-Z][A-Z0-9_]+)\b", text, re.M))


def _module_from(path: Path, text: str):  # noqa: ANN202 - a module
    """`text` written to `path` and imported from there (Triton reads a jit function's source from its file)."""
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _target_module(target_name: str, tmp_path: Path):  # noqa: ANN202 - a module
    """Every helper of a target, as a variant holds them, in a module of their own (imported from a file: Triton reads
    a jit function's source)."""
    target = get_target(target_name)
    names = [n for n in target.snippets if target.snippets[n].module != "launchers"]  # (host code: the variant's
    # own `import triton` precedes them)
    text = "\n".join([*target.imports, *(target.snippet(n) for n in target.snippet_order(set(names)))])
    path = tmp_path / f"helpers_{target_name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("target", [t.name for t in all_targets()])
def test_every_helper_of_a_target_is_filled_in(target: str) -> None:
    """No target parameter and no `{field}` is left in what a target copies, and each copy is valid Python."""
    t = get_target(target)
    for name, held in t.snippets.items():
        text = t.snippet(name)
        names = {node.id for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Name)}
        left = _parameters(held.module) & names
        assert not left, (name, left)
        assert not re.search(r"\{[a-z_]+\}", text), (name, text)
    for key in language.HELPERS:
        compile(language.snippet(key), key, "exec")


def test_a_parameter_test_keeps_its_branch_or_drops_it() -> None:
    """`if SCALED_FP8:` in `_dot`: gfx950 keeps its body (OCP fp8 by the scaled MFMA), gfx942 has no such block; a
    parameter called (`FLOAT8_DEPTH(dtype)`) becomes the target's expression; `{arch}` its name."""
    gfx950, gfx942 = get_target("gfx950").snippet("dot"), get_target("gfx942").snippet("dot")
    assert "mfma_scaled(a, None" in gfx950 and "if SCALED_FP8" not in gfx950
    assert "mfma_scaled" not in gfx942 and "_f8f6f4" not in gfx942
    assert "return mfma(a, b, acc)" in gfx942
    assert 'return 64 if _f8f6f4(dtype) != "" else 16' in get_target("gfx950").snippet("mma_layout")
    assert "return 16\n" in get_target("gfx942").snippet("mma_layout")
    assert "on\n    gfx942, 32x32" in get_target("gfx942").snippet("mma_layout")
    assert "return wmma(a, b, acc)" in get_target("gfx1250").snippet("dot")


def test_a_helper_takes_the_comment_right_above_it_and_not_the_modules() -> None:
    text = helper("common", "_cta_barrier").text()
    assert text.startswith("\n# A CTA-wide barrier")
    assert "Target parameters" not in helper("common", "_blocked_layout", WARP_SIZE=32).text()
    with pytest.raises(KeyError, match="defines no _nothing"):
        Helper("common", ("_nothing",)).text()


# `tl.dot` of [M, K] x [K, N] fp16 tiles, compiled by Triton for a target to read the accumulator layout it chooses.
DOT_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b))
'''

SHAPES = [(128, 128, 64, 8), (128, 64, 32, 4), (64, 128, 64, 4), (256, 128, 64, 8), (16, 64, 64, 4), (32, 32, 32, 4),
          (128, 256, 64, 8), (64, 256, 64, 8), (256, 256, 64, 8), (64, 64, 64, 8)]
# Where the AMD helpers split the warps otherwise than Triton: `_mma_layout` puts at most 2 warps along M (the same
# instructions, another assignment of tiles to warps; Triton follows the tile's aspect). Listed so that a change of
# either side is seen. Triton's split was measured in the helper (gfx950 and gfx942, every pipelined fixture config,
# `verify --isa`, 2026-11-30): 74 of 77 configs unchanged, 3 heavier (suite_gated_linear 0.34 -> 0.62x Triton's
# non-MFMA instructions per MFMA, suite_swiglu_gemm 0.33 -> 0.59, suite_moe_grouped_rows 0.26 -> 0.46), none lighter.
AMD_OTHER_WARPS = {(64, 128, 64, 4): ([1, 4], [2, 2]), (256, 128, 64, 8): ([4, 2], [2, 4]),
                   (32, 32, 32, 4): ([4, 1], [1, 4]), (64, 256, 64, 8): ([1, 8], [2, 4]),
                   (64, 64, 64, 8): ([4, 2], [2, 4])}


@pytest.mark.slow
@pytest.mark.parametrize("target", ["gfx942", "gfx950", "sm90"])
def test_the_mma_layout_is_the_one_triton_chooses(target: str, tmp_path: Path) -> None:
    """`_mma_layout(m, [n], fp16, warps)` as the target copies it against the accumulator layout of Triton's own
    compile of the same `tl.dot` (its TTGIR): the instruction shape and version agree; the warps too, but for the
    AMD splits listed above. (sm90 below 64 rows: Triton takes Ampere's mma, which a wgmma variant does not run.)"""
    from triton.experimental.gluon import language as gl

    from transpile.verify import compile_kernel

    helpers = _target_module(target, tmp_path)
    module = _module_from(tmp_path / "dot_kernel.py", DOT_KERNEL)
    for m, n, k, warps in SHAPES:
        if target == "sm90" and m < 64:
            continue
        ok, error, asm, _ = compile_kernel(module.dot_kernel, get_target(target),
                                           {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32"},
                                           {"M": m, "N": n, "K": k}, warps, triton_kernel=True)
        assert ok, error
        found = re.search(r"#ttg\.(amd_mfma|nvidia_mma)<\{([^}]*)\}>", asm["ttgir"])
        fields = dict(re.findall(r"(\w+) = (\[[^\]]*\]|\w+)", found.group(2)))
        ours = helpers._mma_layout(m, [n], gl.float16, warps)
        where = (target, m, n, k, warps, found.group(0), ours)
        assert fields["instrShape"] == str(list(ours.instr_shape)), where
        warps_split = (fields["warpsPerCTA"], str(list(ours.warps_per_cta)))
        if target == "sm90":
            assert warps_split[0] == warps_split[1], where
        else:
            assert int(fields["version"]) == ours.version, where
            expected = tuple(map(str, AMD_OTHER_WARPS.get((m, n, k, warps), (ours.warps_per_cta,) * 2)))
            assert warps_split == expected, where


def test_the_aligned_launcher_runs_the_source_kernel_on_unaligned_rows() -> None:
    """`_AlignedOrTriton`: 16-byte aligned tensors of 4-byte elements and ints that are multiples of 16 take the
    Gluon kernel; an offset view, an odd size or 2-byte elements (without `narrow`) take the source's."""
    import torch

    from transpile.helpers.launchers import _AlignedOrTriton

    calls: list[str] = []

    class Kernel:
        def __init__(self, name: str) -> None:
            self.name = name

        def __getitem__(self, grid):  # noqa: ANN001, ANN204
            return lambda *args, **kwargs: calls.append(self.name)

    launcher = _AlignedOrTriton(Kernel("gluon"), Kernel("triton"), ("x", "n"), divisible=("x", "n"))
    x = torch.zeros(64, dtype=torch.float32)
    for args, kernel in [((x, 64), "gluon"), ((x[1:], 63), "triton"), ((x, 63), "triton"),
                         ((x.to(torch.float16), 64), "triton")]:
        launcher[(1,)](*args)
        assert calls.pop() == kernel, args
    narrow = _AlignedOrTriton(Kernel("gluon"), Kernel("triton"), ("x", "n"), divisible=("x", "n"), narrow=True)
    narrow[(1,)](x.to(torch.float16), 64)
    assert calls.pop() == "gluon"


def test_triton_s_own_wrappers_applied_to_a_launcher_keep_its_choice() -> None:
    """`triton.heuristics(...)(kernel)` and `triton.autotune(...)(kernel)` written after the kernel (aiter's conv
    kernels, autotuned under a module-level flag) call the kernel's `run`: the launchers' `run` makes the same choice
    as their launch, for the launch and for a warmup."""
    import torch

    from transpile.helpers.launchers import _AlignedOrTriton, _WarpPipelinedOrTriton

    calls: list[tuple[str, bool, dict]] = []

    class Kernel:
        arg_names = ["x", "n", "BLOCK"]

        def __init__(self, name: str) -> None:
            self.name = name

        def __getitem__(self, grid):  # noqa: ANN001, ANN204
            return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)

        def run(self, *args, grid, warmup, **kwargs):  # noqa: ANN001, ANN201
            calls.append((self.name, warmup, kwargs))

    x = torch.zeros(64, dtype=torch.float32)
    for launcher in (_AlignedOrTriton(Kernel("gluon"), Kernel("triton"), ("x", "n"), divisible=("x", "n")),
                     _WarpPipelinedOrTriton(Kernel("gluon"), Kernel("triton"), ("x", "n"), (), warps=8,
                                            aligned=True, divisible=("x", "n"))):
        wrapped = triton.heuristics(values={"BLOCK": lambda args: 32})(launcher)
        warps = {"num_warps": 8} if isinstance(launcher, _WarpPipelinedOrTriton) else {}
        for args, kernel in [((x, 64), "gluon"), ((x[1:], 63), "triton")]:
            wrapped[(1,)](*args, **warps)
            name, warmup, kwargs = calls.pop()
            assert (name, warmup, kwargs["BLOCK"]) == (kernel, False, 32), (launcher, args)
            launcher.warmup(*args, grid=(1,), **warps)
            assert calls.pop()[:2] == (kernel, True), (launcher, args)
        if warps:  # (a launch at other warps runs the source kernel)
            wrapped[(1,)](x, 64, num_warps=4)
            assert calls.pop()[0] == "triton"


def test_the_persistent_grid_is_the_grid_where_the_config_is_not_persistent() -> None:
    from transpile.helpers.launchers import _persistent_grid

    grid = _persistent_grid(lambda meta: (meta["tiles"], 2), lambda meta: False)
    assert grid({"tiles": 7}) == (7, 2)


def test_only_reads_of_a_parameter_take_its_value(tmp_path: Path, monkeypatch) -> None:
    """A keyword, a parameter and a definition spelled like a target parameter keep their spelling; its reads (a
    default value, an argument, an operand) take the value."""
    import transpile.helpers as helpers

    (tmp_path / "fake.py").write_text(
        "SIZE = 1\n\n\ndef f(x, size=SIZE):\n    return g(SIZE=x, other=SIZE, more=SIZE + 1)\n\n\n"
        "def SIZE_OF(x):  # noqa: N802\n    return x\n")
    monkeypatch.setattr(helpers, "_HERE", tmp_path)
    helpers._module.cache_clear()
    helpers._text.cache_clear()
    try:
        text = helpers.helper("fake", "f", SIZE=64).text()
    finally:
        helpers._module.cache_clear()
        helpers._text.cache_clear()
    assert "def f(x, size=64):\n    return g(SIZE=x, other=64, more=64 + 1)\n" in text


def test_the_sm90_dot_reads_a_16_bit_a_from_registers(tmp_path: Path) -> None:
    """`_dot` of the translated loop of tests/gpu/dot_chain.py (scores [128, 32] at BM=32, BN=128, then those scores
    times a [32, 64] block) compiled for sm90 at 4 warps: each wgmma takes a 16-bit A in registers (a staged A of
    [128, 32] faulted on an H200 under Triton 3.6: tests/gpu/check_dot_chain.py runs the variant there), its B from
    shared memory; with 8-bit operands, A is staged through shared memory as before."""
    from transpile.engine import translate_source
    from transpile.verify import compile_kernel

    source = Path(__file__).parent / "gpu" / "dot_chain.py"
    result = translate_source(source.read_text(), str(source), get_target("sm90"), gluon_always=True)
    assert "_dot_a_in_registers" in result.text and "def chain_kernel" in result.text
    module = _module_from(tmp_path / "dot_chain_sm90.py", result.text)
    signature = {"q_ptr": "*fp16", "k_ptr": "*fp16", "o_ptr": "*fp32", "T": "i32"}
    ok, error, asm, _ = compile_kernel(module.chain_kernel, get_target("sm90"), signature,
                                       {"BM": 32, "BN": 128, "D": 64}, 4)
    assert ok, error
    a_types = re.findall(r"ttng\.warp_group_dot [^\n]*?\} : (\S+)", asm["ttgir"])
    assert len(a_types) == 2, asm["ttgir"]
    assert all(kind.startswith("tensor<") for kind in a_types), a_types  # (A a register tensor, not a memdesc)
    helpers = _target_module("sm90", tmp_path)
    from triton.experimental.gluon import language as gl

    layout = helpers._mma_layout(128, [64], gl.float16, 4)
    assert helpers._dot_a_in_registers(layout, gl.float16)
    assert not helpers._dot_a_in_registers(layout, gl.float8e4nv)
    split = helpers._mma_layout(64, [256], gl.float16, 8)  # (8 warps on 64 rows: two warpgroups side by side in N)
    assert helpers._dot_a_in_registers(split, gl.float16) == (split.warps_per_cta[1] == 1)


MIXED_DEPTH_KERNEL = '''import triton
import triton.language as tl


@triton.jit
def mixed_kernel(a_ptr, b_ptr, x_ptr, y_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a = tl.load(a_ptr + offs_m[:, None] * BK + offs_k[None, :])
    b = tl.load(b_ptr + offs_k[:, None] * BN + offs_n[None, :])
    x = tl.load(x_ptr + offs_m[:, None] * BK + offs_k[None, :])
    y = tl.load(y_ptr + offs_k[:, None] * BN + offs_n[None, :])
    acc = tl.dot(a, b)
    acc = tl.dot(x, y, acc)  # (PRECISION)
    tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc)
'''


@pytest.mark.parametrize("target", [t.name for t in all_targets()])
def test_dots_of_two_operand_types_into_one_accumulator_compile(target: str, tmp_path: Path) -> None:
    """A 16-bit dot and an fp32 (tf32) dot whose results meet share one MMA layout, laid out for one of the two
    types (the source names neither: both are the launch's pointer types). `_dot` runs the other type's instruction
    in `_with_depth`'s layout of the same tiles and warps: the translation compiles for the target at fp16 + fp32 and
    at fp32 + fp16, and `_other_depth` says which dot needs it. A kernel asking for full-precision fp32 products
    (`allow_tf32=False`) of operands whose type the launch gives runs its fp32 launches on the source kernel (AMD:
    `slow_dtypes`), or is kept as Triton (sm90, whose launchers do not test types)."""
    from triton.experimental.gluon import language as gl

    from transpile.engine import translate_source
    from transpile.verify import compile_kernel

    result = translate_source(MIXED_DEPTH_KERNEL, "mixed.py", get_target(target), gluon_always=True)
    assert result.functions[0].translated, result.functions[0].kept_reason
    module = _module_from(tmp_path / f"mixed_{target}.py", result.text)
    warps = 4 if target == "sm90" else 8
    for first, second in (("*fp16", "*fp32"), ("*fp32", "*bf16")):
        signature = {"a_ptr": first, "b_ptr": first, "x_ptr": second, "y_ptr": second, "c_ptr": "*fp32"}
        ok, error, _, _ = compile_kernel(module.mixed_kernel, get_target(target), signature,
                                         {"BM": 128, "BN": 64, "BK": 32}, warps)
        assert ok, (first, second, error)
    helpers = _target_module(target, tmp_path)
    layout = helpers._mma_layout(128, [64], gl.float16, warps)
    assert not helpers._other_depth(layout, gl.float16) and not helpers._other_depth(layout, gl.bfloat16)
    assert helpers._other_depth(layout, gl.float32)
    own = helpers._with_depth(layout, gl.float32)
    assert list(own.instr_shape[:2]) == list(layout.instr_shape[:2]) and own.instr_shape[2] != layout.instr_shape[2]
    assert not helpers._other_depth(own, gl.float32) and helpers._other_depth(own, gl.float16)
    precise = translate_source(MIXED_DEPTH_KERNEL.replace("acc)  # (PRECISION)", "acc, allow_tf32=False)"),
                               "mixed.py", get_target(target), gluon_always=True)
    (outcome,) = precise.functions
    if target == "sm90":
        assert not outcome.translated and "full-precision fp32 products" in outcome.kept_reason, outcome
    else:
        # (launches where the precise dot's own tensors are fp32 run the source kernel: "x_ptr=float32",
        # "y_ptr=float32"; the other dot's tensors may be fp32 as they like)
        assert outcome.translated and outcome.dispatch is not None
        assert {t for t in outcome.dispatch.slow_dtypes if "float32" in t} == {"x_ptr=float32", "y_ptr=float32"}


UNNAMED_TYPE_KERNEL = '''import triton
import triton.language as tl


@triton.jit
def lora_kernel(a_ptr, b_ptr, c_ptr, s_ptr, o_ptr, K, N, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                BR: tl.constexpr):
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_r = tl.arange(0, BR)
    offs_k = tl.arange(0, BK)
    acc = tl.zeros((BM, BR), dtype=tl.float32)
    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * BR + offs_r[None, :]
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)
        acc = tl.dot(a, b, acc=acc)
        a_ptrs += BK
        b_ptrs += BK * BR
    ar = acc.to(c_ptr.dtype.element_ty)
    ar *= tl.load(s_ptr).to(ar.dtype)
    c_ptrs = c_ptr + offs_r[:, None] * N + offs_n[None, :]
    for n in range(0, tl.cdiv(N, BN)):
        lb = tl.load(c_ptrs, mask=offs_n[None, :] < N - n * BN, other=0.0)
        tl.store(o_ptr + offs_m[:, None] * N + offs_n[None, :] + n * BN, tl.dot(ar, lb))
        c_ptrs += BN
'''


@pytest.mark.parametrize("target", [t.name for t in all_targets()])
def test_a_dot_of_operands_whose_type_the_source_does_not_spell_compiles(target: str, tmp_path: Path) -> None:
    """LoRA's second product reads `ar`, cast to a pointer's type and then to its own (`tl.load(s).to(ar.dtype)`):
    the source spells no type the analysis reads. The MMA layout is laid out for 16-bit operands, and `_dot` runs
    32-bit ones in the instruction of their own depth: the translation compiles at fp16 and at fp32."""
    from transpile.engine import translate_source
    from transpile.verify import compile_kernel

    result = translate_source(UNNAMED_TYPE_KERNEL, "lora.py", get_target(target), gluon_always=True)
    assert result.functions[0].translated, result.functions[0].kept_reason
    module = _module_from(tmp_path / f"lora_{target}.py", result.text)
    warps = 4 if target == "sm90" else 8
    for second in ("*fp16", "*fp32"):
        signature = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": second, "s_ptr": "*fp32", "o_ptr": "*fp32",
                     "K": "i32", "N": "i32"}
        kernel = getattr(module.lora_kernel, "gluon_kernel", module.lora_kernel)  # (AMD: its launcher's kernel)
        # (as the launcher runs it: aligned pointers, sizes that are multiples of 16, tensors under 2 GB)
        pointers = tuple(name for name, kind in signature.items() if kind.startswith("*"))
        ok, error, _, _ = compile_kernel(kernel, get_target(target), signature,
                                         {"BM": 128, "BN": 64, "BK": 64, "BR": 32}, warps,
                                         divisible=(*pointers, "K", "N"), pointer_range=pointers)
        assert ok, (second, error)
