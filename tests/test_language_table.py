"""The language table covers every public name of the installed triton.language: each is translated (to a Gluon name
that exists, a standard function that exists, a helper the tool emits, a libdevice function) or refused with a reason
of its own; and the translations compile (tests/test_compile.py compiles the lang_* fixtures for every target)."""

from __future__ import annotations

import inspect
import types

import pytest
import triton.experimental.gluon.language as gl
import triton.language as tl

from transpile import language
from transpile.engine import translate_source
from transpile.targets import all_targets, get_target

GENERIC = "has no Gluon translation in this tool"
# Names of triton.language that are modules, or typing leftovers of its source files (not language).
NOT_LANGUAGE = {"List", "T", "wraps", "TypeVar", "Sequence", "Optional", "Union", "Callable", "annotations", "builtins"}


def _public(module: types.ModuleType) -> list[str]:
    return sorted(n for n in dir(module) if not n.startswith("_") and n not in NOT_LANGUAGE
                  and not inspect.ismodule(getattr(module, n)))


@pytest.mark.parametrize("target", [t.name for t in all_targets()])
def test_every_public_name_is_translated_or_refused_with_a_reason(target: str) -> None:
    t = get_target(target)
    missing, generic = [], []
    for prefix, module in (("", tl), ("math.", tl.math), ("core.", tl.core), ("standard.", tl.standard)):
        for name in _public(module):
            spelling = language.lookup(prefix + name, t.backend, t.min_triton)
            if spelling is None:
                missing.append(prefix + name)
            elif spelling.kind == "refuse" and (spelling.text == f"`tl.{prefix}{name}` {GENERIC}"
                                                or f"{name}`" not in spelling.text):
                generic.append(f"{prefix}{name}: {spelling.text}")
    # tl.core's and tl.standard's internals (helpers of the implementation) may fall to the generic refusal; the
    # public top-level and math names may not.
    assert not missing, missing
    assert not [g for g in generic if not g.startswith(("core.", "standard."))], generic


@pytest.mark.parametrize("target", [t.name for t in all_targets()])
def test_translations_name_what_exists(target: str) -> None:
    t = get_target(target)
    for name, spelling in language.TABLE.items():
        spelling = language.lookup(name, t.backend, t.min_triton)
        assert spelling is not None, name
        if spelling.kind in ("gl", "gl39"):
            assert hasattr(gl, spelling.text), f"gl.{spelling.text}"
        elif spelling.kind == "std":
            module = tl.random if spelling.text in language.RANDOM else tl.standard
            assert hasattr(getattr(module, spelling.text), "fn"), spelling.text
            assert f"tl_{module.__name__.rsplit('.', 1)[-1]}" in " ".join(t.imports)
        elif spelling.kind == "helper":
            assert language.snippet(spelling.text) is not None
        elif spelling.kind == "method":
            assert hasattr(gl.tensor, spelling.text)
        elif spelling.kind == "refuse":
            assert spelling.text != f"`tl.{name}` {GENERIC}" and f"{name}`" in spelling.text, name


def test_sm90_gets_the_spelling_triton_3_6_has() -> None:
    sm90, gfx950 = get_target("sm90"), get_target("gfx950")
    assert language.lookup("cumsum", gfx950.backend, gfx950.min_triton) == language.Spelling("gl39", "cumsum",
                                                                                             language.Spelling("std", "cumsum"))
    assert language.lookup("cumsum", sm90.backend, sm90.min_triton) == language.Spelling("std", "cumsum")
    assert language.lookup("clamp", sm90.backend, sm90.min_triton).kind == "helper"
    assert language.lookup("gather", sm90.backend, sm90.min_triton).kind == "refuse"


@pytest.mark.parametrize("backend", ["cuda", "hip"])
def test_libdevice_names_read_from_the_source_are_the_modules(backend: str) -> None:
    """`language.libdevice_names` reads the installed libdevice's source (importing Triton in every process of a run
    costs about 80 ms): the same names as the imported module's public callables."""
    import importlib

    module = importlib.import_module(f"triton.language.extra.{backend}.libdevice")
    imported = frozenset(n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n)))
    assert language._libdevice_source_names(backend) == imported
    assert language.libdevice_names(backend) == imported


def test_libdevice_spellings_per_backend() -> None:
    for lang in ("extra.cuda.libdevice.tanh", "extra.libdevice.tanh", "math.tanh", "extra.hip.libdevice.tanh"):
        assert language.lookup(lang, "cuda", (3, 6)) == language.Spelling("libdevice", "tanh")
        assert language.lookup(lang, "hip", (3, 9)) == language.Spelling("libdevice", "tanh")
    cuda_only = language.lookup("extra.cuda.libdevice.cbrt", "hip", (3, 9))
    assert cuda_only.kind == "refuse" and "CUDA" in cuda_only.text
    assert language.lookup("extra.cuda.libdevice.cbrt", "cuda", (3, 6)).kind == "libdevice"


SOURCE = '''import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def k(x_ptr, i_ptr, B: tl.constexpr):
    offs = tl.arange(0, B)
    x = tl.load(x_ptr + offs)
    y = tl.sigmoid(x) + libdevice.tanh(x) + tl.clamp(x, 0.0, 1.0) + tl.cumsum(x, 0)
    tl.store(x_ptr + offs, y)
    tl.store(i_ptr, x.argmax(0))
'''


def test_rewrites_per_target() -> None:
    sm90 = translate_source(SOURCE, "x.py", get_target("sm90")).text
    assert "y = _sigmoid(x) + gl.extra.libdevice.tanh(x) + _clamp(x, 0.0, 1.0) + _cumsum(x, 0)" in sm90
    assert "_sigmoid = gluon.jit(tl_standard.sigmoid.fn)" in sm90
    assert "from triton.language import standard as tl_standard" in sm90.splitlines()
    assert "gl.store(i_ptr, _argmax(x, 0))" in sm90  # the method's Triton body does not compile under Gluon
    assert sm90.index("def _index_along") < sm90.index("def _argmax(")  # callee first
    # the source kernel kept for unaligned launches (`_k_triton`) still reads `libdevice`; without it (every launch
    # Gluon) nothing does any more
    assert "from triton.language.extra import libdevice" in sm90 and "def _k_triton(" in sm90
    always = translate_source(SOURCE, "x.py", get_target("sm90"), gluon_always=True).text
    assert "from triton.language.extra import libdevice" not in always
    amd = translate_source(SOURCE, "x.py", get_target("gfx950")).text
    assert "y = _sigmoid(x) + gl.extra.libdevice.tanh(x) + gl.clamp(x, 0.0, 1.0) + gl.cumsum(x, 0)" in amd
    assert "def _clamp" not in amd


KEEP_DIMS = '''import triton
import triton.language as tl


@triton.jit
def k(x_ptr, y_ptr, BM: tl.constexpr, BN: tl.constexpr):
    offs = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    x = tl.load(x_ptr + offs)
    e = tl.exp(x - tl.max(x, axis=1, keep_dims=True))
    tl.store(y_ptr + offs, e / e.sum(1, keep_dims=True))
'''


def test_reductions_with_keep_dims_stay_in_the_input_layout() -> None:
    result = translate_source(KEEP_DIMS, "x.py", get_target("sm90"))
    assert [f.translated for f in result.functions] == [True], result.diagnostics
    assert "e = gl.exp(x - gl.max(x, axis=1, keep_dims=True))" in result.text
    assert "gl.store(y_ptr + offs, e / e.sum(1, keep_dims=True))" in result.text
    assert "convert_layout" not in result.text  # the kept dimension brings the result back to x's layout


OLD_TMA = '''import triton
import triton.language as tl


@triton.jit
def copy_tile(in_desc, out_desc, BM: tl.constexpr, BN: tl.constexpr):
    tile = tl._experimental_descriptor_load(in_desc, [0, 0], [BM, BN], tl.float16)
    tl._experimental_descriptor_store(out_desc, tile, [0, 0])
'''


@pytest.mark.parametrize("target", ["sm90", "gfx950"])
def test_the_older_tma_api_is_refused_with_what_to_write(target: str) -> None:
    """Host-built descriptors (`tl._experimental_descriptor_load/store`) and device-built ones (`tl.extra.cuda`'s
    tensormap calls) name the in-kernel descriptor that replaces them, at the call."""
    result = translate_source(OLD_TMA, "old_tma.py", get_target(target))
    refusals = [d for d in result.diagnostics if d.code == "TT011"]
    assert [d.line for d in refusals] == [7, 8]
    assert all("tl.make_tensor_descriptor(base" in d.message for d in refusals)
    for name in ("experimental_device_tensormap_create2d", "experimental_tensormap_fenceproxy_acquire"):
        spelling = language.lookup(f"extra.cuda.{name}", "cuda", (3, 6))
        assert spelling.kind == "refuse" and "tl.make_tensor_descriptor" in spelling.text
    assert "tl.make_tensor_descriptor" in language.lookup("_experimental_make_tensor_descriptor", "cuda", (3, 6)).text


def test_a_name_triton_does_not_have_is_refused_as_not_triton(tmp_path) -> None:
    """`tl.empty`, `tl.cidv`, `tl.extra.mlu.libdevice` (other backends' dialects, misspellings: found in public operator
    libraries) are refused saying Triton's compiler rejects them too, which it does (compiled here for gfx950); a name
    Triton has but the table does not (for sm90, a `constexpr_function` of Triton 3.9 that Triton 3.6 lacks) keeps
    the generic refusal."""
    import importlib.util

    import triton
    from triton.backends.compiler import GPUTarget

    for name in ("empty", "cidv", "extra.mlu.libdevice"):
        spelling = language.lookup(name, "hip", (3, 9))
        assert spelling is not None and spelling.kind == "refuse", name
        assert spelling.text.startswith(f"`tl.{name}` is not a name of `triton.language`, {language.NOT_TRITON}")
    assert language.lookup("extra.mlu.libdevice.philox", "hip", (3, 9)).text.startswith(  # (Cambricon's libdevice)
        f"`tl.extra.mlu.libdevice` is not a name of `triton.language`, {language.NOT_TRITON}")
    assert language.lookup("standard._softmax_keep_dims_warning", "cuda", (3, 6)).text == (
        f"`tl.standard._softmax_keep_dims_warning` {GENERIC}")
    assert language.in_triton("extra.cuda.libdevice") and language.in_triton("math.exp")
    text = ("import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(y_ptr, BLOCK: tl.constexpr):\n"
            "    tl.store(y_ptr + tl.arange(0, BLOCK), tl.empty([BLOCK], dtype=tl.float32))\n")
    result = translate_source(text, "k.py", get_target("gfx950"))
    assert not result.functions[0].translated
    assert any(d.code == "TT011" and d.line == 7 and language.NOT_TRITON in d.message for d in result.diagnostics)
    path = tmp_path / "k.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("k_empty", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    with pytest.raises(Exception, match="empty"):
        triton.compile(triton.compiler.ASTSource(module.k, {"y_ptr": "*fp32"}, constexprs={"BLOCK": 64}),
                       target=GPUTarget("hip", "gfx950", 64))


def test_a_compile_time_function_of_triton_language_is_called_as_written(monkeypatch, tmp_path) -> None:
    """`tl.standard._log2(BLOCK)` (a `constexpr_function` of Triton's, which public kernels call) runs when the kernel
    is compiled, in a Gluon kernel as in a Triton one: the variants call it as the source spells it, and compile. For
    sm90 only the ones Triton 3.6 (which its variants must compile under) defines as such too: each is one in the
    installed Triton."""
    import tempfile

    from transpile.verify import verify

    text = ("import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef halving(x_ptr, y_ptr, BLOCK: tl.constexpr):\n"
            "    STEPS: tl.constexpr = tl.standard._log2(BLOCK)\n    offs = tl.arange(0, BLOCK)\n"
            "    x = tl.load(x_ptr + offs)\n    for _ in tl.static_range(STEPS):\n        x = x * 0.5\n"
            "    tl.store(y_ptr + offs, x)\n")
    assert language.lookup("standard._log2", "hip", (3, 9)) == language.Spelling("compile_time", "standard._log2")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = translate_source(text, str(tmp_path / "k.py"), get_target("gfx950"))
    assert result.functions[0].translated, [d.format() for d in result.diagnostics]
    assert "STEPS: gl.constexpr = tl.standard._log2(BLOCK)" in result.text
    compiled = verify(result, {"x_ptr": "*fp32", "y_ptr": "*fp32", "BLOCK": 256})
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]
    sm90 = translate_source(text, str(tmp_path / "k.py"), get_target("sm90"))
    assert sm90.functions[0].translated, [d.format() for d in sm90.diagnostics]
    assert "STEPS: gl.constexpr = tl.standard._log2(BLOCK)" in sm90.text
    compiled = verify(sm90, {"x_ptr": "*fp32", "y_ptr": "*fp32", "BLOCK": 256})
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]
    assert all(language.compile_time(f"standard.{name}") for name in language.CONSTEXPR_36)


def test_the_older_tma_api_is_refused_as_triton_itself_refuses_it() -> None:
    """Triton's older TMA API (`tl._experimental_descriptor_load`, the device-side tensormap builders) is gone from the
    installed Triton (and from 3.6): a kernel calling it compiles with neither, and its refusal says so (counted apart
    from the tool's own refusals, `NOT_TRITON`), with the way to the descriptor API both have."""
    import triton.language.extra.cuda as cuda

    from transpile.language import EXTRA_REFUSALS, NOT_TRITON, TABLE

    for name in ("_experimental_descriptor_load", "_experimental_descriptor_store",
                 "_experimental_make_tensor_descriptor"):
        assert not hasattr(tl, name)
        assert NOT_TRITON in TABLE[name].text and "tl.make_tensor_descriptor" in TABLE[name].text
    for name, message in EXTRA_REFUSALS.items():
        assert not hasattr(cuda, name.rsplit(".", 1)[-1])
        assert NOT_TRITON in message


STAMP = '''import triton
import triton.language as tl

IS_CUDA = tl.constexpr({flag})


@triton.jit
def stamp_kernel(out_ptr):
    pid = tl.program_id(0)
    if IS_CUDA:
        tl.store(out_ptr + pid, tl.extra.cuda.globaltimer() + tl.extra.cuda.smid())
    else:
        tl.store(out_ptr + pid, pid.to(tl.int64))
'''


@pytest.mark.parametrize("target", ["sm90", "gfx950"])
def test_cuda_special_registers(target: str, tmp_path, monkeypatch) -> None:
    """`tl.extra.cuda.globaltimer()` and `smid()` (tritonbench's profiling helpers, under a platform flag): on sm90
    the Gluon helpers read the registers with the PTX Triton emits; on an AMD target a helper that fails to compile
    where it is called, as Triton's compile of PTX there does, and compiles where the flag leaves the call out."""
    import tempfile

    from transpile.verify import verify

    text = STAMP.format(flag=target == "sm90")
    result = translate_source(text, str(tmp_path / "stamp.py"), get_target(target))
    assert result.functions[0].translated, [d.format() for d in result.diagnostics]
    if target == "sm90":
        assert "_globaltimer() + _smid()" in result.text and "%globaltimer" in result.text
    else:
        assert "_globaltimer_not_amd() + _smid_not_amd()" in result.text
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    compiled = verify(result, {"out_ptr": "*i64"})
    assert compiled and all(c.ok for c in compiled), [(c.kernel, c.message) for c in compiled if not c.ok]
    if target != "sm90":  # (where the flag keeps the call, the variant fails to compile, as Triton's does)
        live = translate_source(STAMP.format(flag=True), str(tmp_path / "live.py"), get_target(target))
        failed = [c for c in verify(live, {"out_ptr": "*i64"}) if c.kernel == "stamp_kernel"]
        assert failed and not failed[0].ok and "not on AMD targets" in failed[0].message


BITS = '''import triton
import triton.language as tl


@triton.jit
def flip_sign_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    idtype = tl.core.get_int_dtype(bitwidth=x.dtype.primitive_bitwidth, signed=True)
    bits = x.to(idtype, bitcast=True) ^ -1
    tl.store(y_ptr + offs, bits.to(x.dtype, bitcast=True))
'''


@pytest.mark.parametrize("target", ["sm90", "gfx950"])
def test_a_python_function_of_the_language_core_runs_at_compile_time(target: str, tmp_path, monkeypatch) -> None:
    """`tl.core.get_int_dtype(bitwidth, signed)` (lightllm's bitonic top-k): a plain Python function that Triton's code
    generator, and Gluon's, call when the kernel is compiled; kept as written (refused before: no Gluon translation)."""
    import tempfile

    from transpile.verify import verify

    result = translate_source(BITS, str(tmp_path / "bits.py"), get_target(target))
    assert result.functions[0].translated, [d.format() for d in result.diagnostics]
    assert "idtype = tl.core.get_int_dtype(bitwidth=x.dtype.primitive_bitwidth, signed=True)" in result.text
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    compiled = verify(result, {"x_ptr": "*fp32", "y_ptr": "*fp32", "BLOCK": 256})
    assert compiled and all(c.ok for c in compiled), [(c.kernel, c.message) for c in compiled if not c.ok]
