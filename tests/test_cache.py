"""The persistent cache of translations (transpile.cache): a cached variant is the fresh translation, byte for byte
and with the same statuses and diagnostics; anything the translation read that changed (the source, a module a
kernel imports a helper from, the tool itself) is a miss; --no-cache and TRANSPILE_NO_CACHE=1 turn it off."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import transpile.project
from transpile import cache as cache_module

FIXTURES = ["vector_add", "softmax", "matmul_grouped", "attention_fwd", "suite_lora", "lang_router", "bc_rotary",
            "import_aliases", "fx_two_gemms"]


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv("TRANSPILE_CACHE_DIR", str(directory))
    monkeypatch.delenv("TRANSPILE_NO_CACHE", raising=False)
    return directory


def _entries(directory: Path) -> list[Path]:
    return sorted(directory.rglob("*.json")) if directory.exists() else []


def _run(cli, tree, root: Path, *extra: str) -> tuple[int, list, list, dict]:
    if (root / "out").exists():
        shutil.rmtree(root / "out")
    result = cli("src", "--target", "gfx950,sm90", "--out-dir", "out", "--output-format", "json", *extra)
    report = json.loads(result.stdout)
    return result.exit_code, report["outcomes"], report["diagnostics"], tree(root / "out")


def _no_translation(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("translated although the cache holds the variant")

    monkeypatch.setattr(transpile.project, "prepare", fail)
    monkeypatch.setattr(transpile.project, "translate_source", fail)


def test_a_cached_run_is_the_fresh_run(tmp_path: Path, cli, tree, fixture_copy, cache_dir: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    fixture_copy(*FIXTURES, into=tmp_path / "src")
    (tmp_path / "src" / "broken.py").write_text("import triton\n\n@triton.jit\ndef k(:\n", encoding="utf-8")
    fresh = _run(cli, tree, tmp_path, "--no-cache")
    assert not _entries(cache_dir)
    cold = _run(cli, tree, tmp_path)  # in worker processes (9 files and more)
    assert len(_entries(cache_dir)) == 2 * (len(FIXTURES) + 1)  # the syntax error too
    _no_translation(monkeypatch)
    warm = _run(cli, tree, tmp_path)
    assert fresh == cold == warm
    assert fresh[0] == 2 and any(d["code"] == "TT001" for d in fresh[2])


def test_one_process_fills_the_cache_the_same(tmp_path: Path, cli, tree, fixture_copy, cache_dir: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    fixture_copy("suite_lora", "attention_fwd", into=tmp_path / "src")
    fresh = _run(cli, tree, tmp_path, "--no-cache")
    assert _run(cli, tree, tmp_path) == fresh
    _no_translation(monkeypatch)
    assert _run(cli, tree, tmp_path) == fresh


KERNEL = """import triton
import triton.language as tl
from pkg.ops import helper


@triton.jit
def k(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(x_ptr + offs, helper(x))
"""

ELEMENTWISE = "import triton\n\n\n@triton.jit\ndef helper(x):\n    return x * 2\n"
DOT = "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef helper(x):\n    return tl.dot(x, x)\n"


@pytest.mark.parametrize("before", [None, ELEMENTWISE])
def test_a_changed_module_the_kernel_imports_from_is_a_miss(before: str | None, tmp_path: Path, cli, tree,
                                                            cache_dir: Path) -> None:
    """`from pkg.ops import helper`: the translation reads pkg/ops.py (a helper beyond elementwise math keeps the
    kernel as Triton). Writing, changing or removing that file makes the cached variant a miss."""
    source = tmp_path / "src" / "pkg"
    source.mkdir(parents=True)
    (source / "kern.py").write_text(KERNEL, encoding="utf-8")
    ops = source / "ops.py"
    variant = "out/pkg/kern_sm90.py"

    def run() -> str:
        result = cli("src/pkg/kern.py", "--target", "sm90", "--out-dir", "out", "--source-root", "src")
        assert result.exit_code == 0, result.output
        return (tmp_path / variant).read_text(encoding="utf-8")

    def fresh() -> str:
        assert cli("src/pkg/kern.py", "--target", "sm90", "--out-dir", "out", "--source-root", "src",
                   "--no-cache").exit_code == 0
        return (tmp_path / variant).read_text(encoding="utf-8")

    if before is not None:
        ops.write_text(before, encoding="utf-8")
    first = run()
    assert "kept as Triton" not in first
    ops.write_text(DOT, encoding="utf-8")
    second = run()
    assert "kept as Triton" in second and second == fresh()
    if before is not None:
        ops.unlink()
        gone = run()
        assert gone == fresh()
        # (read, the elementwise helper keeps its argument's layout; unread, its result is converted at the call)
        assert "gl.convert_layout(helper(x)" in gone and "gl.convert_layout(helper(x)" not in first
    assert run() == fresh()


def test_no_cache_and_the_environment_turn_it_off(tmp_path: Path, cli, fixture_copy, cache_dir: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    fixture_copy("vector_add")
    assert cli("vector_add.py", "-t", "sm90", "--no-cache").exit_code == 0
    assert not _entries(cache_dir)
    monkeypatch.setenv("TRANSPILE_NO_CACHE", "1")
    assert cli("vector_add.py", "-t", "sm90").exit_code == 0
    assert not _entries(cache_dir)
    monkeypatch.setenv("TRANSPILE_NO_CACHE", "0")
    assert cli("vector_add.py", "-t", "sm90").exit_code == 0
    assert len(_entries(cache_dir)) == 1


def test_a_damaged_entry_is_a_miss(tmp_path: Path, cli, tree, fixture_copy, cache_dir: Path) -> None:
    fixture_copy("softmax", "matmul_grouped", into=tmp_path / "src")
    fresh = _run(cli, tree, tmp_path)
    entries = _entries(cache_dir)
    entries[0].write_text("{not json", encoding="utf-8")
    entries[1].write_text(entries[1].read_text(encoding="utf-8").replace('"key": "', '"key": "x'), encoding="utf-8")
    assert _run(cli, tree, tmp_path) == fresh


def test_the_key_covers_every_input() -> None:
    cache = cache_module.TranslationCache(Path("unused"), "f" * 64)
    args = ("text", "src/a.py", "sm90", "transpile src/a.py --target sm90", False)
    keys = {cache.key(*args)}
    for i, changed in enumerate(("text2", "src/b.py", "gfx942", "transpile src/a.py --target sm90 --out-dir x",
                                 True)):
        keys.add(cache.key(*args[:i], changed, *args[i + 1:]))
    keys.add(cache_module.TranslationCache(Path("unused"), "e" * 64).key(*args))
    assert len(keys) == 7


def test_the_fingerprint_is_the_tool_s_sources(tmp_path: Path) -> None:
    """Any change of a file of the `transpile` package (a rule, a table) makes another tool: every entry a miss."""
    package = Path(cache_module.__file__).resolve().parent
    copy = tmp_path / "transpile"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert cache_module.fingerprint_of(copy) == cache_module.tool_fingerprint()
    rule = copy / "rules" / "dot.py"
    rule.write_text(rule.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    assert cache_module.fingerprint_of(copy) != cache_module.tool_fingerprint()
