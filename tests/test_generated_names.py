"""Names the sm90 and AMD rewrites bind in a kernel must not change the kernel's own values (found by a probe of GEMM
styles): a `static_range` loop leaves its variable bound to its last value, and the warp-specialised
loader function binds its own parameters. Also: a 16-bit accumulator on the AMD matrix cores."""

from __future__ import annotations

import ast
import dataclasses
import json
import tempfile
from pathlib import Path

import pytest

from conftest import EXPECTED_DIR
from transpile.engine import translate_source
from transpile.targets import get_target
from transpile.verify import verify

SOURCE = (EXPECTED_DIR.parent / "suite_desc_linear.py").read_text(encoding="utf-8")
VALUES = {"x_ptr": "*fp16", "w_ptr": "*fp16", "y_ptr": "*fp16"}


def _scaled(name: str) -> str:
    """The fixture with a kernel value named `name` made before the main loop and read after it."""
    text = SOURCE.replace("    for k in range(0, K, BLOCK_K):", f"    {name} = 1.5\n    for k in range(0, K, BLOCK_K):")
    text = text.replace("y_desc.store([off_m, off_n], acc.to(tl.float16))",
                        f"y_desc.store([off_m, off_n], (acc * {name}).to(tl.float16))")
    assert text != SOURCE and f"    {name} = 1.5\n" in text
    return text


def test_the_barrier_loops_do_not_rebind_a_kernel_variable_s():
    plain = translate_source(SOURCE, "suite_desc_linear.py", get_target("sm90")).text
    assert "for s in gl.static_range(NUM_STAGES):" in plain  # the barrier loops, where `s` is free
    text = translate_source(_scaled("s"), "suite_desc_linear.py", get_target("sm90")).text
    assert "gl.warp_specialize(" in text and "acc * s" in " ".join(text.split())
    assert "for s in gl.static_range" not in text and "for s_ in gl.static_range(NUM_STAGES):" in text


@pytest.mark.parametrize("name", ["ready", "empty", "slot", "num_iters"])
def test_a_kernel_value_named_like_the_loaders_own_keeps_the_kernel_out_of_the_loader(name: str):
    """Passed to the loader function, a kernel value `ready` would be a duplicate parameter (the variant would not
    import) or would be shadowed by the loader's own (wrong tiles): the warp-specialised forms are not used."""
    text = translate_source(_scaled(name), "suite_desc_linear.py", get_target("sm90")).text
    ast.parse(text)
    compile(text, "variant.py", "exec")  # (a duplicate parameter is a compile-time error, not a parse error)
    assert "gl.warp_specialize(" not in text


@pytest.mark.slow
@pytest.mark.parametrize("target", ["gfx942", "gfx950", "gfx1250"])
def test_a_16_bit_accumulator_compiles_on_the_amd_matrix_cores(target: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch):
    from transpile.verify import verify

    source = (EXPECTED_DIR.parent / "suite_bmm.py").read_text(encoding="utf-8")
    text = source.replace("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
                          "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)")
    text = text.replace("acc += tl.dot(a, b)", "acc += tl.dot(a, b, out_dtype=tl.float16)")
    assert "out_dtype=tl.float16" in text
    result = translate_source(text, "suite_bmm.py", get_target(target), gluon_always=target != "gfx950")
    assert "acc.to(gl.float32)" in result.text and "_dot(" in result.text.split("def bmm_kernel")[1]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = json.loads((EXPECTED_DIR.parent / "verify.json").read_text(encoding="utf-8"))["suite_bmm.py"]
    compiled = verify(dataclasses.replace(result), values, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]


# ---- Kernels without a dot loop (a probe of 78 such kernels) ----

ELEMENTWISE = '''import triton
import triton.language as tl


@triton.jit
def kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
BODY
'''


def _elementwise(body: str, before: str = "") -> str:
    return before + ELEMENTWISE.replace("BODY", body)


def test_a_module_that_defines_a_helper_name_of_the_variant_keeps_its_kernels_as_triton():
    """`_sigmoid` is the name of the variant's helper for `tl.sigmoid`: the module's own `_sigmoid` would rebind it
    (the kernel computed `_sigmoid(x) - _sigmoid(x)`, always zero)."""
    own = "\n\n@triton.jit\ndef _sigmoid(x):\n    return 1.0 / (1.0 + tl.exp(-x))\n"
    text = _elementwise("    tl.store(y_ptr + offs, _sigmoid(x) - tl.sigmoid(x), mask=mask)") + own
    for target in ("sm90", "gfx942"):
        result = translate_source(text, "k.py", get_target(target))
        assert not any(o.translated for o in result.functions)
        assert any(d.code == "TT041" and "the module defines `_sigmoid`" in d.message for d in result.diagnostics)
    plain = translate_source(_elementwise("    tl.store(y_ptr + offs, tl.sigmoid(x), mask=mask)"), "k.py",
                             get_target("sm90"))
    assert all(o.translated for o in plain.functions) and "_sigmoid = gluon.jit(" in plain.text


@pytest.mark.parametrize("target", ["sm90", "gfx950"])
def test_a_kernel_variable_named_gl_is_named_afresh(target: str):
    """A local `gl` (FLA's PaTH attention names a gate gradient so) would shadow the Gluon language the variant reads
    by that name: it is renamed at every mention in the kernel, and the variant computes what the source does."""
    result = translate_source(_elementwise("    gl = x * 2.0\n    gl += gl.to(tl.float32)\n"
                                           "    tl.store(y_ptr + offs, gl, mask=mask)"), "k.py", get_target(target))
    assert result.functions[0].translated, result.functions[0].kept_reason
    kernel = result.text.split("def ", 1)[1]
    assert "gl_1 = x * 2.0" in kernel and "gl_1 += gl_1.to(gl.float32)" in kernel and "gl_1, mask=mask" in kernel
    assert not any("it binds `gl`" in d.message for d in result.diagnostics)
    compiled = verify(result, {"x_ptr": "*fp32", "y_ptr": "*fp32", "BLOCK": 256}, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def test_a_kernel_parameter_named_gl_keeps_the_kernel_as_triton():
    """A parameter keeps its name (a caller may pass it by keyword): the kernel is kept, with the reason."""
    text = _elementwise("    tl.store(y_ptr + offs, x * gl, mask=mask)").replace("(x_ptr,", "(x_ptr, gl,", 1)
    assert "(x_ptr, gl," in text
    result = translate_source(text, "k.py", get_target("sm90"))
    assert not result.functions[0].translated
    assert any("it binds `gl`" in d.message for d in result.diagnostics)


def test_a_kernel_variable_named_like_a_layout_constant_is_not_taken_by_one():
    text = _elementwise("    offs_layout = x > 0.0\n    tl.store(y_ptr + offs, tl.where(offs_layout, x, 0.0), mask=mask)")
    result = translate_source(text, "k.py", get_target("sm90"))
    assert result.functions[0].translated
    assert "offs_layout: gl.constexpr" not in result.text and "offs_layout_2: gl.constexpr" in result.text


@pytest.mark.parametrize("body, why", [
    ("    m, i = tl.max(x, return_indices=True)\n    tl.store(y_ptr + offs, x + m + i, mask=mask)",
     "over the whole tensor (no axis)"),
    ("    m, i = x.max(0, return_indices=True)\n    tl.store(y_ptr + offs, x + m + i, mask=mask)",
     "(the method form) is not translated"),
    ("    t = x[:, None, None] + x[None, :, None]\n    m, i = tl.max(t, 2, return_indices=True)\n"
     "    tl.store(y_ptr + offs, tl.sum(i, 1), mask=mask)", "with indices of a rank-3 tile"),
    ("    tl.store(y_ptr + offs, tl.reshape(x, (BLOCK,), can_reorder=True), mask=mask)", "can_reorder=True"),
    # the method form too (it compiled to a Gluon reshape with `can_reorder`, which Gluon rejects; public code)
    ("    tl.store(y_ptr + offs, x.reshape(BLOCK, can_reorder=True), mask=mask)", "can_reorder=True"),
    ("    tl.store(y_ptr + offs, tl.view(x, (BLOCK,)), mask=mask)", "`tl.view` may reorder"),
])
def test_calls_whose_gluon_form_differs_are_refused(body: str, why: str):
    result = translate_source(_elementwise(body), "k.py", get_target("sm90"))
    assert not result.functions[0].translated
    assert any(d.code == "TT011" and why in d.message for d in result.diagnostics), [d.message for d in
                                                                                    result.diagnostics]


def test_max_and_min_with_indices_are_translated(monkeypatch, tmp_path):
    """`tl.max(x, axis, return_indices=True)` (a router's top-1 expert, an argmax with its value): Gluon's `max` returns
    no indices, so the values and indices are reduced together (`_max_with_indices`, Triton's own combine: the first
    index on ties unless `return_indices_tie_break_left=False`; the values in the input's type, as Triton 3.9 returns
    them). Refused before (TT011: 29 public functions)."""
    body = ("    m, i = tl.max(x, -1, return_indices=True)\n"
            "    lo, j = tl.min(x, axis=0, return_indices_tie_break_left=False, return_indices=True)\n"
            "    tl.store(y_ptr + offs, x + m + lo + (i + j).to(tl.float32), mask=mask)")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for target in ("sm90", "gfx950"):
        result = translate_source(_elementwise(body), str(tmp_path / "k.py"), get_target(target))
        assert result.functions[0].translated, [d.format() for d in result.diagnostics]
        assert "m, i = _max_with_indices(x, -1)" in result.text  # (a negative axis: counted from the last there)
        assert "lo, j = _min_with_indices(x, 0, tie_break_left=False)" in result.text
        compiled = verify(result, {"x_ptr": "*bf16", "y_ptr": "*fp32", "BLOCK": 256})
        assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def test_a_scalar_atomic_operand_is_broadcast_to_the_pointers():
    """Triton 3.6's Gluon does not broadcast the scalar of `tl.atomic_add(ptrs, 1)` (did not compile on the GPU)."""
    text = _elementwise("    tl.atomic_add(y_ptr + (x > 0.0).to(tl.int32), 1, mask=mask)")
    result = translate_source(text, "k.py", get_target("sm90"))
    assert "gl.atomic_add(y_ptr + (x > 0.0).to(gl.int32), _scalar_operand(y_ptr + (x > 0.0).to(gl.int32), 1)," \
        in " ".join(result.text.split())
    assert "def _scalar_operand(" in result.text


@pytest.mark.slow
def test_a_reduced_atomic_operand_is_broadcast_to_the_pointers(monkeypatch, tmp_path):  # noqa: ANN001
    """The 0-d result of a reduction added through a one-element tile of pointers (`tl.atomic_add(out_ptr +
    tl.arange(0, 1), tl.sum(x))`, tritonbench's sum kernels): broadcast too, and the variant compiles (it did not:
    "expected expand_dims input to be a distributed_type")."""
    import tempfile

    from transpile.verify import verify

    text = _elementwise("    tl.atomic_add(y_ptr + tl.arange(0, 1), tl.sum(x, axis=0))")
    result = translate_source(text, "k.py", get_target("sm90"))
    assert "_scalar_operand(y_ptr + gl.arange(0, 1, layout=" in " ".join(result.text.split())
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    compiled = verify(result, {"x_ptr": "*fp32", "y_ptr": "*fp32", "BLOCK": 256})
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


OPTIONAL_BIAS = '''import triton
import triton.language as tl


@triton.jit
def _affine(x, w, b, scale, HAS_BIAS: tl.constexpr):
    y = x * w * scale
    if HAS_BIAS:
        y += b
    return y


@triton.jit
def _shift(x, s=None):
    if s is not None:
        x = x + s
    return x


@triton.jit
def kernel(x_ptr, w_ptr, b_ptr, y_ptr, n, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    if HAS_BIAS:
        b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    else:
        b = None
    tl.store(y_ptr + offs, _shift(_affine(x, w, b, 0.5, HAS_BIAS)), mask=mask)
'''


@pytest.mark.slow
@pytest.mark.parametrize("target", ["sm90", "gfx942"])
@pytest.mark.parametrize("has_bias", [False, True])
def test_a_helper_argument_that_may_be_none_is_converted_only_when_it_is_a_tensor(
        target: str, has_bias: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`b = None` when a flag is off, or a `None` default: Triton passes a constexpr None, which the helper's entry
    conversion `gl.convert_layout(b, ...)` does not take (the variant did not compile); `is not None` is decided at
    compile time. The other tensor parameters are converted as before."""
    from transpile.verify import verify

    result = translate_source(OPTIONAL_BIAS, "k.py", get_target(target))
    flat = " ".join(result.text.split())
    assert "if b is not None: # a caller may pass None b = gl.convert_layout(b, " in flat
    assert "if s is not None: # a caller may pass None s = gl.convert_layout(s, " not in flat  # not a tensor here
    assert "x = gl.convert_layout(x, " in flat and "if x is not None" not in flat
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {"x_ptr": "*fp32", "w_ptr": "*fp32", "b_ptr": "*fp32", "y_ptr": "*fp32", "HAS_BIAS": has_bias,
              "BLOCK": 1024}
    compiled = verify(dataclasses.replace(result), values, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]


@pytest.mark.parametrize("target", ["gfx942", "gfx950", "gfx1250"])
def test_a_launch_without_num_warps_gets_the_warps_of_the_warp_pipelined_loop(target: str):
    """The warp-pipelined loop needs 8 warps (the kernel asserts it); a launch that gives no `num_warps` would launch
    Triton's default 4 and fail to compile (found by a probe of kernel styles). (gfx942 and gfx1250 keep
    this kernel as Triton by default, its ring being register-staged: --gluon-always emits it.)"""
    source = (EXPECTED_DIR.parent / "suite_bmm.py").read_text(encoding="utf-8")
    text = source.replace("num_warps=8, num_stages=3)", "num_stages=3)")
    assert text != source
    always = target != "gfx950"
    variant = " ".join(translate_source(text, "suite_bmm.py", get_target(target), gluon_always=always).text.split())
    assert "gl.num_warps() == 8" in variant
    assert "num_stages=3, num_warps=8)" in variant
    kwargs = text.replace("num_stages=3)", "**launch)").replace("def bmm(", "launch = {}\n\n\ndef bmm(")
    variant = " ".join(translate_source(kwargs, "suite_bmm.py", get_target(target), gluon_always=always).text.split())
    assert "**launch)" in variant and "num_warps=8)" not in variant  # `**launch` may give it


POINTER_ARRAY = '''import triton
import triton.language as tl


@triton.jit
def group_gemm(ptrs, c_ptr, K, lda, ldb, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a_ptr = tl.load(ptrs).to(tl.pointer_type(tl.float16))
    b_ptr = tl.load(ptrs + 1).to(tl.pointer_type(tl.float16))
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * lda + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * ldb + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc += tl.dot(tl.load(a_ptrs), tl.load(b_ptrs))
        a_ptrs += BK
        b_ptrs += BK * ldb
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)
'''


@pytest.mark.slow
@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_tiles_of_a_pointer_made_in_the_kernel_have_its_pointee_type(target: str, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch):
    """`tl.load(ptrs).to(tl.pointer_type(tl.float16))` (grouped GEMMs reading their operands' addresses from memory):
    the tiles loaded through it are fp16; the dot was laid out for the int32 of the offsets (did not compile)."""
    from transpile.verify import verify

    text = POINTER_ARRAY.replace("acc += tl.dot(tl.load(a_ptrs), tl.load(b_ptrs))",
                                 "a = tl.load(a_ptrs)\n        b = tl.load(b_ptrs)\n        acc += tl.dot(a, b)")
    # (the tiles' addresses are loaded from memory: staged through registers, a ring kept as Triton by default)
    result = translate_source(text, "g.py", get_target(target), gluon_always=True)
    assert "_mma_layout(BM, [BN], gl.float16, gl.num_warps(), k=BK)" in " ".join(result.text.split()) and \
        "gl.int32" not in result.text.split("def group_gemm")[1]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    compiled = verify(dataclasses.replace(result), {"ptrs": "*i64", "c_ptr": "*fp32", "K": "i32", "lda": "i32",
                                                    "ldb": "i32", "BM": 64, "BN": 64, "BK": 32}, all_configs=False)
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled if not c.ok]


def test_a_module_that_rebinds_a_builtin_its_helpers_call_keeps_its_kernels_as_triton():
    """An operator library's `def max(inp)` beside its kernel: the variant's layout helper calls Python's `max`, which
    would call the module's function (found by compiling public code: `max() takes 1 positional argument`)."""
    own = "\n\ndef max(inp):\n    return inp\n"
    text = _elementwise("    tl.store(y_ptr + offs, tl.max(x, 0) + x, mask=mask)") + own
    for target in ("sm90", "gfx950"):
        result = translate_source(text, "k.py", get_target(target))
        assert not any(o.translated for o in result.functions)
        assert any(d.code == "TT041" and "the module defines `max`, a Python builtin the Gluon variant's helpers "
                   "call" in d.message for d in result.diagnostics)
    # a builtin the helpers do not call (`round`) changes nothing
    kept = translate_source(_elementwise("    tl.store(y_ptr + offs, x, mask=mask)") + "\n\ndef round(x):\n"
                            "    return x\n", "k.py", get_target("sm90"))
    assert all(o.translated for o in kept.functions)


def test_layouts_are_declared_after_the_local_constexprs_they_read():
    """`UNROLL: tl.constexpr = 4` at the top of the kernel, and a module-level `UNROLL = 4` (a plain int): a layout
    declared above the local read the module's and did not compile (found by compiling public code)."""
    text = ("import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
            "def scale_kernel(DY, DX, N, scale, BLOCK: tl.constexpr):\n    UNROLL: tl.constexpr = 4\n\n"
            "    pid = tl.program_id(0)\n    off = pid * UNROLL * BLOCK + tl.arange(0, UNROLL * BLOCK)\n"
            "    dy = tl.load(DY + off, mask=off < N, other=0.0)\n    tl.store(DX + off, dy * scale, mask=off < N)\n"
            "\n\nUNROLL = 4\n")
    result = translate_source(text, "k.py", get_target("gfx950"))
    body = result.text.split("def scale_kernel(")[1]
    assert body.index("UNROLL: gl.constexpr = 4") < body.index("off_layout: gl.constexpr = _blocked_layout(")
