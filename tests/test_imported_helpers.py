"""Triton helpers imported from other modules of the project are copied into the variant and translated there
(`transpile.passes.imported_helpers`), with the helpers and constants they read; helpers whose shapes come from
their arguments (`return tl.dot(a, b)`) take them where they run."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from transpile.engine import prepare, translate_source
from transpile.targets import get_target
from transpile.verify import verify

COMMON = '''import triton
from triton import language as tl
from triton.language.extra import libdevice

from .consts import ZERO

SCALE: tl.constexpr = tl.constexpr(2.0)


class NotAHelper:
    pass


@triton.jit
def _fill(c_ptr, offs_m, offs_n, stride_cm, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    tile = tl.full((BLOCK_M, BLOCK_N), ZERO, dtype=tl.float32)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], tile, mask=offs_n[None, :] < N)


@triton.jit
def write_zeros(c_ptr, offs_m, offs_n, stride_cm, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    _fill(c_ptr, offs_m, offs_n, stride_cm, N, BLOCK_M, BLOCK_N)


@triton.jit
def mm(a, b):
    return tl.dot(a, b) * SCALE


@triton.jit
def fast_exp(x):
    return libdevice.exp(x)


@triton.jit
def uses_class(x):
    return tl.zeros_like(x) + NotAHelper


def host_side(x):
    return x
'''

KERNEL = '''import triton
import triton.language as tl

from pkg.common import fast_exp, mm, write_zeros


@triton.jit
def k(a_ptr, b_ptr, c_ptr, flag_ptr, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    if tl.load(flag_ptr) == 0:
        write_zeros(c_ptr, offs, offs, BLOCK, N, BLOCK, BLOCK)
        return
    a = tl.load(a_ptr + offs[:, None] * BLOCK + offs[None, :])
    b = tl.load(b_ptr + offs[:, None] * BLOCK + offs[None, :])
    c = fast_exp(mm(a, b))
    tl.store(c_ptr + offs[:, None] * BLOCK + offs[None, :], c, mask=offs[None, :] < N)
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "consts.py").write_text("import triton.language as tl\n\nZERO = tl.constexpr(0.0)\n")
    (tmp_path / "pkg" / "common.py").write_text(COMMON)
    (tmp_path / "kernels.py").write_text(KERNEL)
    return tmp_path


@pytest.mark.parametrize("target", ["gfx950", "gfx942", "gfx1250", "sm90"])
def test_imported_helpers_are_copied_and_translated(project: Path, target: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel calls `write_zeros` (which calls `_fill`, reading a constant of a third module) and `mm` (a dot,
    scaled by a module constant): both are copied into the variant with what they read (the helpers' module binds
    `tl` by `from triton import language as tl`, the file by `import triton.language as tl`: the same module), the
    import keeps only the elementwise helper `fast_exp`, and the Gluon kernel compiles for the target."""
    path = str(project / "kernels.py")
    result = translate_source(KERNEL, path, get_target(target))
    outcomes = {o.name: o for o in result.functions}
    assert set(outcomes) == {"k", "write_zeros", "_fill", "mm"}, outcomes
    assert all(o.translated for o in outcomes.values()), {n: o.kept_reason for n, o in outcomes.items()}
    text = result.text
    assert "from pkg.common import fast_exp\n" in text
    assert "SCALE: tl.constexpr = tl.constexpr(2.0)" in text and "ZERO = tl.constexpr(0.0)" in text
    assert "copied here from that module" in text and "`pkg.common`" in text
    assert "NotAHelper" not in text and "host_side" not in text and "uses_class" not in text
    # the dot in the helper takes its shape from its operands where it runs
    assert "gl.zeros([a.shape[0], b.shape[1]]" in text
    monkeypatch.setattr(tempfile, "tempdir", str(project))
    compiled = verify(result, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "flag_ptr": "*i32", "N": "i32",
                               "BLOCK": 64}, all_configs=True)
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled]
    assert "k" in {c.kernel for c in compiled}  # the Gluon kernel, not only the source kept beside it


def test_copied_lines_map_to_the_import(project: Path) -> None:
    """Diagnostics about copied code point at the import line of the file the user translates."""
    prepared = prepare(KERNEL, str(project / "kernels.py"))
    fill = prepared.facts.functions["_fill"]
    assert prepared.source.position(fill.node)[0] == 4
    assert prepared.source.position(prepared.facts.functions["k"].node.name)[0] == 8


def test_helper_that_cannot_be_copied_stays_imported_with_the_reason(project: Path) -> None:
    """A helper reading a class of its module is not copied: the kernel calling it is kept as Triton and the reason
    names what stopped the copy."""
    text = KERNEL.replace("fast_exp, mm, write_zeros", "fast_exp, mm, uses_class, write_zeros").replace(
        "c = fast_exp(mm(a, b))", "c = uses_class(fast_exp(mm(a, b)))")
    result = translate_source(text, str(project / "kernels.py"), get_target("gfx950"))
    kernel = next(o for o in result.functions if o.name == "k")
    assert not kernel.translated
    assert "`uses_class` is imported from `pkg.common` and cannot be copied here (`uses_class` reads the class " \
           "`NotAHelper` of `common.py`)" in kernel.kept_reason
    assert "from pkg.common import fast_exp, uses_class\n" in result.text


def test_a_name_the_file_binds_otherwise_is_not_overwritten(project: Path) -> None:
    """The file defines its own `SCALE`: the copy of `mm`, which reads another `SCALE`, would change what the file's
    code reads. `mm` stays imported and the kernel is kept with the reason."""
    text = KERNEL.replace("from pkg.common", "SCALE = 3\nfrom pkg.common")
    result = translate_source(text, str(project / "kernels.py"), get_target("sm90"))
    kernel = next(o for o in result.functions if o.name == "k")
    assert not kernel.translated and "`mm` reads `SCALE`, a name this file binds itself" in kernel.kept_reason


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    for name, text in files.items():
        (tmp_path / "pkg" / name).write_text(text)
    return tmp_path


HEAD = "import triton\nimport triton.language as tl\n"
MM = "\n\n@triton.jit\ndef NAME(acc, a, b):\n    acc += tl.dot(a, b) * SCALE\n    return acc\n"
CALLER = HEAD + '''from pkg.IMPORTS


@triton.jit
def k(A, C, N: tl.constexpr):
    offs = tl.arange(0, N)
    a = tl.load(A + offs[:, None] * N + offs[None, :])
    acc = tl.zeros((N, N), dtype=tl.float32)
    CALLS
    tl.store(C + offs[:, None] * N + offs[None, :], acc)
'''


def test_a_constant_reading_another_modules_constant_is_copied_after_it(tmp_path: Path) -> None:
    """`SCALE = BASE * 2` with `BASE` from a third module: the copy binds `BASE` first (it runs at import)."""
    root = _package(tmp_path, {"consts.py": "BASE = 2.0\n",
                               "lib.py": HEAD + "from .consts import BASE\n\nSCALE = BASE * 2\n" +
                               MM.replace("NAME", "mm")})
    text = CALLER.replace("IMPORTS", "lib import mm").replace("CALLS", "acc = mm(acc, a, a)")
    result = translate_source(text, str(root / "kernels.py"), get_target("gfx950"))
    assert result.text.index("BASE = 2.0") < result.text.index("SCALE = BASE * 2") < result.text.index("def mm(")


def test_copies_that_would_bind_one_name_two_ways_are_not_both_made(tmp_path: Path) -> None:
    """`mm_a` reads `SCALE = 2.0` of one module, `mm_b` `SCALE = 5.0` of another: copying both would make `mm_a`
    read 5.0. The first is copied; the second stays imported (and its caller is kept, with the reason)."""
    root = _package(tmp_path, {"a.py": HEAD + "\nSCALE = 2.0\n" + MM.replace("NAME", "mm_a"),
                               "b.py": HEAD + "\nSCALE = 5.0\n" + MM.replace("NAME", "mm_b")})
    text = CALLER.replace("IMPORTS", "a import mm_a\nfrom pkg.b import mm_b").replace(
        "CALLS", "acc = mm_a(acc, a, a)\n    acc = mm_b(acc, a, a)")
    result = translate_source(text, str(root / "kernels.py"), get_target("gfx950"))
    assert "SCALE = 2.0" in result.text and "SCALE = 5.0" not in result.text
    assert "from pkg.b import mm_b" in result.text


@pytest.mark.parametrize("binding", ["SCALE, OTHER = 3.0, 1", "if True:\n    SCALE = 3.0"])
def test_a_name_the_file_binds_in_a_tuple_or_a_block_is_not_overwritten(tmp_path: Path, binding: str) -> None:
    root = _package(tmp_path, {"lib.py": HEAD + "\nSCALE = 2.0\n" + MM.replace("NAME", "mm")})
    text = CALLER.replace("IMPORTS", "lib import mm\n" + binding).replace("CALLS", "acc = mm(acc, a, a)")
    result = translate_source(text, str(root / "kernels.py"), get_target("gfx950"))
    assert "SCALE = 2.0" not in result.text and "from pkg.lib import mm" in result.text


def test_a_name_its_module_binds_twice_is_not_copied(tmp_path: Path) -> None:
    """`SCALE = 2.0` then `SCALE = SCALE * 2`: one statement would not carry the value; the helper stays imported."""
    root = _package(tmp_path, {"lib.py": HEAD + "\nSCALE = 2.0\nSCALE = SCALE * 2\n" + MM.replace("NAME", "mm")})
    text = CALLER.replace("IMPORTS", "lib import mm").replace("CALLS", "acc = mm(acc, a, a)")
    result = translate_source(text, str(root / "kernels.py"), get_target("gfx950"))
    kernel = next(o for o in result.functions if o.name == "k")
    assert not kernel.translated and "binds more than once" in kernel.kept_reason


def test_a_name_its_module_imports_under_try_is_imported_by_the_copy(tmp_path: Path) -> None:
    """`try: from triton.language.standard import zeros_like` / `except ImportError: pass` (FlagGems' topk, kept
    for older Tritons): the import of the `try` is what runs, and the copy of a helper that reads the name imports
    it too; without it the helper stayed imported ("does not define at its top level") and its callers were kept."""
    lib = HEAD + ("\ntry:\n    from triton.language.standard import zeros_like\nexcept ImportError:\n    pass\n"
                  "\n\n@triton.jit\ndef mm(acc, a, b):\n    acc += tl.dot(a, b) + zeros_like(acc)\n    return acc\n")
    root = _package(tmp_path, {"lib.py": lib})
    text = CALLER.replace("IMPORTS", "lib import mm").replace("CALLS", "acc = mm(acc, a, a)")
    result = translate_source(text, str(root / "kernels.py"), get_target("gfx950"))
    kernel = next(o for o in result.functions if o.name == "k")
    assert kernel.translated, kernel.kept_reason
    assert "from pkg.lib import mm" not in result.text and "def mm(" in result.text


def test_a_name_its_module_binds_to_tritons_own_under_try_is_imported_by_the_copy(tmp_path: Path) -> None:
    """`try: to_unit = tl.uint_to_uniform_float` / `except AttributeError:` a jit fallback (FlagGems' random_utils,
    whose `uniform` its multinomial kernels import): where the installed Triton has the function, the `try` is what
    runs, and the copy of a helper that reads the name imports Triton's; the callers were kept before ("does not
    define at its top level")."""
    lib = HEAD + ("\ntry:\n    to_unit = tl.uint_to_uniform_float\nexcept AttributeError:\n\n    @triton.jit\n"
                  "    def to_unit(x):\n        return x.to(tl.float32) * 2.3283064e-10\n"
                  "\n\n@triton.jit\ndef noise(seed, offs):\n    return to_unit(tl.randint(seed, offs))\n")
    root = _package(tmp_path, {"lib.py": lib})
    text = HEAD + '''from pkg.lib import noise


@triton.jit
def k(out_ptr, seed, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, noise(seed, offs))
'''
    for target in ("gfx950", "sm90"):
        result = translate_source(text, str(root / "kernels.py"), get_target(target))
        kernel = next(o for o in result.functions if o.name == "k")
        assert kernel.translated, kernel.kept_reason
        assert "from triton.language import uint_to_uniform_float as to_unit" in result.text
        assert "from pkg.lib import noise" not in result.text and "def noise(" in result.text


def test_a_name_two_modules_import_from_each_other_is_no_crash(tmp_path: Path) -> None:
    """`a.py: from pkg.b import SCALE`, `b.py: from pkg.a import SCALE` (packages whose `__init__` re-exports what
    their modules import, FlagGems' normal/randn): following the imports went round until Python's recursion limit
    (a crash over the corpus). The helper reading the name stays imported, with the reason."""
    lib = HEAD + "from pkg.b import SCALE\n" + MM.replace("NAME", "mm")
    other = HEAD + "from pkg.lib import SCALE\n"
    root = _package(tmp_path, {"lib.py": lib, "b.py": other})
    text = CALLER.replace("IMPORTS", "lib import mm").replace("CALLS", "acc = mm(acc, a, a)")
    result = translate_source(text, str(root / "kernels.py"), get_target("gfx950"))
    kernel = next(o for o in result.functions if o.name == "k")
    assert not kernel.translated
    assert "`mm` reads `SCALE`, which the modules it is imported from import from each other" in kernel.kept_reason


ROTATE = HEAD + '''

@triton.jit
def _rotate(x, mask, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr, HALF: tl.constexpr):
    x_rotated = tl.where(mask, x, -x)
    x_rotated = tl.reshape(x_rotated, (BLOCK_T, 2, HALF))
    x_rotated = tl.flip(x_rotated, 2)
    x_rotated = tl.reshape(x_rotated, (BLOCK_T, BLOCK_D))
    return tl.flip(x_rotated, 1)
'''


@pytest.mark.slow
def test_a_helper_its_module_re_exports_is_copied_from_where_it_is_defined(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`from pkg.rope import _rotate` where `pkg/rope.py` only imports it from `pkg/_kernels.py` (aiter's rope
    helpers): the helper, which reshapes and flips (more than elementwise math), is copied in and translated. Called as
    written, it mixed its mask's layout with the tile's (the variant did not compile: "Layout mismatch in
    broadcast")."""
    root = _package(tmp_path, {"_kernels.py": ROTATE, "rope.py": "from pkg._kernels import _rotate  # noqa: F401\n"})
    text = HEAD + '''from pkg.rope import _rotate


@triton.jit
def rope_kernel(x_ptr, y_ptr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    rows = tl.arange(0, BLOCK_T)
    dims = tl.arange(0, BLOCK_D)
    x = tl.load(x_ptr + rows[:, None] * BLOCK_D + dims[None, :])
    mask = (dims < BLOCK_D // 2)[None, :]
    tl.store(y_ptr + rows[:, None] * BLOCK_D + dims[None, :], _rotate(x, mask, BLOCK_T, BLOCK_D, BLOCK_D // 2))
'''
    result = translate_source(text, str(root / "kernels.py"), get_target("gfx950"))
    assert "from pkg.rope import _rotate" not in result.text and "def _rotate(" in result.text
    assert all(f.translated for f in result.functions), [(f.name, f.kept_reason) for f in result.functions]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.syspath_prepend(str(root))
    compiled = verify(result, {"x_ptr": "*fp32", "y_ptr": "*fp32", "BLOCK_T": 16, "BLOCK_D": 64})
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def test_a_helper_from_a_module_not_found_called_for_its_effects_is_refused(tmp_path: Path) -> None:
    """A function imported from a module the tool cannot find is taken for elementwise math where its value is used;
    called as a statement (its value discarded: a helper that stores, aiter's `_write_zeros_to_output` outside its
    tree), it is refused with its line (the variant called the Triton helper from Gluon, which did not compile)."""
    text = '''import triton
import triton.language as tl

from somepkg.helpers import zero_fill


@triton.jit
def k(x_ptr, y_ptr, n, FLAG: tl.constexpr, B: tl.constexpr):
    offs = tl.arange(0, B)
    if FLAG:
        zero_fill(y_ptr, offs, n, B)
        return
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)
'''
    path = tmp_path / "k.py"
    path.write_text(text)
    result = translate_source(text, str(path), get_target("gfx950"))
    assert not result.functions[0].translated
    assert any(d.code == "TT010" and d.line == 11 and "`zero_fill` is imported from `somepkg.helpers`, which the "
               "tool cannot read, and called for its effects" in d.message for d in result.diagnostics)
    used = text.replace("        zero_fill(y_ptr, offs, n, B)\n", "        tl.store(y_ptr + offs, zero_fill(offs))\n")
    assert translate_source(used, str(path), get_target("gfx950")).functions[0].translated


ELEMENTWISE_KERNEL = '''import triton
import triton.language as tl

from pkg.common import fast_exp


@triton.jit
def k(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < N)
    y = fast_exp(x * 2.0) + x
    tl.store(y_ptr + offs, y, mask=offs < N)
'''


def test_an_imported_elementwise_helper_keeps_its_arguments_layout(project: Path, monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    """An elementwise helper the file imports (`fast_exp`, left imported: a Gluon kernel calls it as it is) returns
    its tensor argument's layout, as a language op does: no conversion around the call. The variant compiles."""
    path = str(project / "kernels.py")
    result = translate_source(ELEMENTWISE_KERNEL, path, get_target("gfx950"))
    assert all(o.translated for o in result.functions)
    kernel = result.text.split("def k(", 1)[1].split("\nclass ", 1)[0]
    assert "y = fast_exp(x * 2.0) + x" in kernel and "convert_layout" not in kernel
    monkeypatch.setattr(tempfile, "tempdir", str(project))
    compiled = verify(result, {"x_ptr": "*fp32", "y_ptr": "*fp32", "N": "i32", "BLOCK": 256}, all_configs=True)
    assert compiled and all(c.ok for c in compiled), [c.message for c in compiled]


def test_an_imported_helper_that_transposes_or_mixes_ranks_is_converted(tmp_path: Path) -> None:
    """Helpers imported from the project that transpose (`x.T`) or are called with tensors of two ranks are not taken
    for elementwise ops: a transposed result is converted at the call, as before; the mixed ranks are refused, as
    before (rather than the rank-1 argument silently broadcast to the other's rank)."""
    (tmp_path / "ops.py").write_text('''import triton
import triton.language as tl


@triton.jit
def scaled_t(x, s):
    return x.T * s


@triton.jit
def cast_like(x, like):
    return x.to(like.dtype)
''')
    head = "import triton\nimport triton.language as tl\nfrom ops import cast_like, scaled_t\n\n\n"
    transposed = head + '''@triton.jit
def k(a_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs[:, None] * BLOCK + offs[None, :])
    t = scaled_t(a, 2.0)
    tl.store(out_ptr + offs[:, None] * BLOCK + offs[None, :], t)
'''
    (tmp_path / "k.py").write_text(transposed)
    variant = translate_source(transposed, str(tmp_path / "k.py"), get_target("gfx950")).text
    assert "t = gl.convert_layout(scaled_t(a, 2.0), " in variant
    mixed = head + '''@triton.jit
def k(a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs[:, None] * BLOCK + offs[None, :])
    b = tl.load(b_ptr + offs)
    c = cast_like(b, a)
    tl.store(out_ptr + offs, c)
'''
    (tmp_path / "k.py").write_text(mixed)
    result = translate_source(mixed, str(tmp_path / "k.py"), get_target("gfx950"))
    assert not result.functions[0].translated and "cast_like(b[None, :]" not in result.text



def test_explain_reads_imported_modules_from_beside_the_file_whatever_the_directory(tmp_path: Path,
                                                                                   monkeypatch) -> None:  # noqa: ANN001
    """`transpile explain` names the file by its path in the project (`pkg/gated.py`) but reads the modules it
    imports from beside the file itself, as a translation does (`set_location`), whichever directory it runs in: run
    elsewhere, it read FLA's `exp2` from nowhere and reported the loops kept (a conversion of the helper's result)
    where the variant pipelines them."""
    from transpile.explain import explain_file
    from transpile.source import location

    from tests.test_amd_pipeline import GATED_ATTENTION

    root = _package(tmp_path, {"gated.py": GATED_ATTENTION})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    tables = explain_file(root / "pkg" / "gated.py", get_target("gfx950"), "pkg/gated.py")
    assert any("`gated_attention` for gfx950: pipelined" in str(t.title) for t in tables)
    assert Path(location("pkg/gated.py")).resolve() == (root / "pkg" / "gated.py").resolve()
