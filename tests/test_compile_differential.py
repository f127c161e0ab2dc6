"""scripts/compile_differential.py: each translated kernel compiled as its source and as its variant, with guessed
argument types, in a process per file; a file inside a package whose `__init__.py` needs a GPU still imports."""

from __future__ import annotations

import importlib.util
import json
import textwrap
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compile_differential.py"
spec = importlib.util.spec_from_file_location("compile_differential", SCRIPT)
compile_differential = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
spec.loader.exec_module(compile_differential)  # type: ignore[union-attr]

KERNEL = textwrap.dedent('''\
    import triton
    import triton.language as tl

    from ..common import twice


    @triton.jit
    def scale_kernel(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr, HAS_BIAS: tl.constexpr, DTYPE: tl.constexpr):
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offs < n
        y = twice(tl.load(x_ptr + offs, mask=mask))
        if HAS_BIAS:
            y += 1
        tl.store(y_ptr + offs, y.to(DTYPE), mask=mask)
''')


def test_constexprs_are_guessed_by_their_names() -> None:
    guess = compile_differential.guess_constexpr
    assert [guess(n) for n in ("BLOCK_SIZE_M", "HAS_BIAS", "IS_CAUSAL", "num_stages", "GROUP_SIZE_M", "HEAD_DIM")] \
        == [64, False, False, 2, 8, 64]


@pytest.mark.slow
def test_a_kernel_of_a_package_that_needs_a_gpu_to_import_is_compared(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The package's `__init__.py` raises (as operator libraries do without a GPU): the file is imported without it,
    its relative import of a jit helper works, the kernel compiles both ways; `DTYPE`, guessed as 64, makes the source
    fail for another kernel, counted apart and not as a failure of the variant."""
    package = tmp_path / "lib"
    (package / "ops").mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('No device were detected on your machine')\n")
    (package / "ops" / "__init__.py").write_text("")
    (package / "common.py").write_text("import triton\n\n\n@triton.jit\ndef twice(x):\n    return x * 2\n")
    (package / "ops" / "scale.py").write_text(KERNEL.replace("y.to(DTYPE)", "y"))
    (package / "ops" / "cast.py").write_text(KERNEL.replace("scale_kernel", "cast_kernel"))
    out = tmp_path / "diff.json"
    assert compile_differential.main([str(package / "ops"), "-t", "gfx950", "--jobs", "2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "kernels compiled both ways: 1" in text and "kernels whose source does not compile with the guess: 1" in text
    assert "variants failing" not in text and "files not importable" not in text.replace(
        "files not importable or typed: 0", "")
    records = {Path(r["file"]).name: r for r in json.loads(out.read_text())}
    (scale,) = records["scale.py"]["kernels"]
    assert scale["source_ok"] and scale["variant_ok"] and scale["kernel"] == "scale_kernel"
