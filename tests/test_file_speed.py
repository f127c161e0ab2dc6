"""A file's cost is linear in its kernels (issue 30: 200 kernels in one file took 151 s, 100 took 8.7 s).

`many_kernels(copies, fixtures)` writes one module holding `copies` copies of the fixture files named, each copy's
module-level names (kernels, helpers, host functions, constants) renamed with a suffix of its own and the imports
gathered at the top. As a script it writes such a file, to time the command line on it:

    python tests/test_file_speed.py 200 /tmp/many.py [fixture,fixture,...]   # 200 kernels (default: every fixture)
    time python -m transpile /tmp/many.py -t gfx950,sm90 --diff --no-cache > /dev/null

The test counts the Python calls a translation makes (cProfile's count: the same on a loaded machine as on an idle
one, unlike its time) for 2 and 8 copies: linear work gives 4x.
"""

from __future__ import annotations

import ast
import cProfile
import difflib
import io
import pstats
import sys
import tokenize
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _module_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def _renamed(text: str, names: set[str], suffix: str) -> str:
    """`text` with every name in `names` (not after a dot: attributes keep theirs) given `suffix`."""
    tokens = []
    previous = None
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.NAME and token.string in names and not (previous and previous.string == "."):
            token = token._replace(string=token.string + suffix)
        tokens.append(token)
        if token.type not in (tokenize.NL, tokenize.COMMENT):
            previous = token
    return tokenize.untokenize(tokens)


def many_kernels(copies: int, fixtures: list[str], kernels: int | None = None) -> str:
    """One module with `copies` renamed copies of each of `fixtures` (fixtures/<name>.py), imports at the top; with
    `kernels`, only as many copies as make that many `@triton.jit` functions (the last copy perhaps in part)."""
    imports: list[str] = []
    bodies: list[str] = []
    made = 0
    for copy in range(copies):
        for name in fixtures:
            if kernels is not None and made >= kernels:
                break
            text = (FIXTURES / f"{name}.py").read_text(encoding="utf-8")
            text = _renamed(text, _module_names(ast.parse(text)), f"_c{copy}")
            tree = ast.parse(text)
            lines = text.splitlines(keepends=True)
            dropped: set[int] = set()
            for i, node in enumerate(tree.body):
                docstring = i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                if isinstance(node, (ast.Import, ast.ImportFrom)) or docstring:
                    if not docstring:
                        statement = "".join(lines[node.lineno - 1:node.end_lineno])
                        if statement not in imports:
                            imports.append(statement)
                    dropped.update(range(node.lineno - 1, node.end_lineno))
            body = "".join(line for i, line in enumerate(lines) if i not in dropped).strip("\n")
            bodies.append(f"# {name}, copy {copy}\n{body}\n")
            made += sum(line.startswith(("@triton.jit", "@jit")) for line in text.splitlines())
    return '"""Many kernels."""\n\n' + "".join(imports) + "\n\n" + "\n\n".join(bodies)


def _calls(text: str, target: str) -> int:
    from transpile.engine import translate_source
    from transpile.targets import get_target

    profile = cProfile.Profile()
    profile.enable()
    try:
        translate_source(text, "many.py", get_target(target))
    finally:
        profile.disable()
    return pstats.Stats(profile).total_calls


def test_generated_file_is_the_fixtures_renamed() -> None:
    text = many_kernels(2, ["vector_add", "matmul_descriptor"])
    tree = ast.parse(text)
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert len(functions) == len(set(functions)) and "add_kernel_c0" in functions and "add_kernel_c1" in functions
    assert "add_kernel_c1[grid](x, y, output, n_elements, BLOCK_SIZE=1024)" in text
    assert text.count("import triton.language as tl\n") == 1


def test_translation_work_is_linear_in_the_kernels_of_a_file() -> None:
    """8 copies of a file cost at most 4.5x what 2 copies do (4x: linear). On sm90 every kernel looked for its
    launches by walking every function of the module (`hopper_persistent.launch_grid`): 5.0x here, 17x for 200
    kernels against 100."""
    fixtures = ["matmul_descriptor", "vector_add"]  # a persistent-ring GEMM with its launch, a small kernel
    _calls(many_kernels(1, fixtures), "sm90")  # (the caches of text snippets and layouts filled)
    two, eight = (_calls(many_kernels(n, fixtures), "sm90") for n in (2, 8))
    assert eight < 4.5 * two, f"8 copies made {eight / two:.2f}x the calls of 2 copies"


def test_line_maps_diff_only_the_rewritten_functions(monkeypatch) -> None:  # noqa: ANN001
    """A rewrite that replaces functions (block pointers lowered, pointer tiles read through TMA descriptors) maps
    the lines of each replaced function to its replacement's, not the whole file to the whole file: difflib's matcher
    is quadratic in a file's repeated lines (blank lines, `)`). The map is the same."""
    import transpile.source as source_module
    from transpile.engine import prepare, with_tma_tiles

    text = many_kernels(4, ["suite_blockptr_gemm", "suite_gemm_kaddr"])
    functions = [n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)]
    largest = max(n.end_lineno - min([n.lineno, *(d.lineno for d in n.decorator_list)]) + 1 for n in functions)
    sizes: list[int] = []
    maps: list[tuple[str, str, list[int]]] = []

    class Recording(difflib.SequenceMatcher):
        def __init__(self, isjunk, a, b, autojunk=True) -> None:  # noqa: ANN001
            sizes.append(max(len(a), len(b)))
            super().__init__(isjunk, a, b, autojunk)

    original = source_module.replaced_line_map

    def recorded(module, old, replaced, new):  # noqa: ANN001, ANN202
        lines = original(module, old, replaced, new)
        maps.append((old, new, lines))
        return lines

    monkeypatch.setattr(source_module.difflib, "SequenceMatcher", Recording)
    for module in ("transpile.passes.block_pointers", "transpile.passes.tma_tiles"):
        monkeypatch.setattr(sys.modules[module], "replaced_line_map", recorded)
    prepared = prepare(text, "many.py")
    with_tma_tiles(prepared)
    assert len(maps) == 2  # the block pointers lowered; the tiles read through descriptors
    # (a replacement may be longer than its function: lowered block pointers take more lines)
    assert sizes and max(sizes) <= 2 * largest < len(text.splitlines()) / 4, (max(sizes), largest)
    monkeypatch.undo()
    for old, new, lines in maps:
        assert lines == source_module.line_map(old, new)


if __name__ == "__main__":
    count, out = int(sys.argv[1]), Path(sys.argv[2])
    names = sys.argv[3].split(",") if len(sys.argv) > 3 else sorted(
        p.stem for p in FIXTURES.glob("*.py") if "@triton.jit" in p.read_text(encoding="utf-8"))
    per_copy = sum((FIXTURES / f"{n}.py").read_text(encoding="utf-8").count("@triton.jit") for n in names)
    text = many_kernels(-(-count // per_copy), names, count)
    out.write_text(text, encoding="utf-8")
    kernels = sum(line.startswith(("@triton.jit", "@jit")) for line in text.splitlines())
    print(f"{out}: {kernels} kernels, {text.count(chr(10))} lines", file=sys.stderr)
