"""Shared test setup: the fixture x target grid, golden files, and helpers that run the command line.

Tests that take a `fixture_name` and/or a `target_name` argument are parametrized over every fixture
(`fixtures/*.py`) and every target (`transpile.targets.all_targets()`) by `pytest_generate_tests` below.

`pytest --update-goldens` rewrites `fixtures/expected/<target>/<name>_<target>.py` from the current tool instead of
comparing against them (and runs the snapshot tests first, so that the compile tests read the new files).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pytest

from transpile.engine import TranslationResult, format_results, is_generated, translate_source
from transpile.project import Project, load_config
from transpile.targets import all_targets, get_target

# The command line's cache of translations (transpile.cache): one of the test session's own, never the user's. Runs
# of the same input within the session read it, so the tests check cached variants too (tests/test_cache.py checks
# that they are the fresh translation).
os.environ["TRANSPILE_CACHE_DIR"] = _SESSION_CACHE = tempfile.mkdtemp(prefix="transpile-test-cache-")
atexit.register(shutil.rmtree, _SESSION_CACHE, True)
# Triton's own compile cache, which `transpile verify` bypasses by default (TRITON_ALWAYS_COMPILE): the slow tier
# compiles many kernels more than once (a golden in test_compile, the same launch in test_isa, test_amd_pipeline and
# test_sm90_pipeline_goldens), and a cached compile is the same compile (Triton keys it on the source, the signature,
# the constexprs, the options and its own version; a failed compile is never cached). A quarter off the slow tier.
os.environ.setdefault("TRITON_ALWAYS_COMPILE", "0")

ROOT = Path(__file__).resolve().parents[1]
FIXTURES_DIR = ROOT / "fixtures"
EXPECTED_DIR = FIXTURES_DIR / "expected"
# The translator's inputs: fixtures/*.py, less any variant a local run of the tool wrote beside them.
FIXTURE_NAMES = sorted(path.stem for path in FIXTURES_DIR.glob("*.py")
                       if not is_generated(path.read_text(encoding="utf-8", errors="replace")))
TARGET_NAMES = [target.name for target in all_targets()]
VERIFY_VALUES: dict[str, dict[str, object]] = {
    name: values
    for name, values in json.loads((FIXTURES_DIR / "verify.json").read_text(encoding="utf-8")).items()
    if not name.startswith("_")
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="rewrite fixtures/expected/<target>/*.py from the current translator instead of comparing with them",
    )
    parser.addoption(
        "--shard",
        default=None,
        metavar="I/N",
        help="run only every N-th collected test from the I-th on (0 <= I < N): N runs, one per core, run them all",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "fixture_name" in metafunc.fixturenames:
        metafunc.parametrize("fixture_name", FIXTURE_NAMES)
    if "target_name" in metafunc.fixturenames:
        metafunc.parametrize("target_name", TARGET_NAMES)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--update-goldens"):
        # Write the goldens before anything reads them.
        items.sort(key=lambda item: item.path.name != "test_snapshots.py")
    shard = config.getoption("--shard")
    if shard:
        index, _, count = shard.partition("/")
        if not (index.isdigit() and count.isdigit() and int(index) < int(count)):
            raise pytest.UsageError(f"--shard takes I/N with 0 <= I < N, not {shard!r}")
        kept = [item for position, item in enumerate(items) if _shard_of(item, position, int(count)) == int(index)]
        chosen = {id(item) for item in kept}
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in chosen])
        items[:] = kept


def _shard_of(item: pytest.Item, position: int, count: int) -> int:
    """The shard that runs `item`: every test of one fixture and target in the same one (its translation, cached per
    process by `translate_fixture`, is then made once in the run), the fixture and target pairs dealt out in turn so
    that each shard gets its share of every slow parametrization; any other test by its position, every N-th."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    fixture, target = params.get("fixture_name"), params.get("target_name")
    if fixture in _FIXTURE_INDEX:
        # (fixture i and target j in shard (i + j) mod N: every target's pairs spread over the shards)
        return (_FIXTURE_INDEX[fixture] + (TARGET_NAMES.index(target) if target in TARGET_NAMES else 0)) % count
    return position % count


_FIXTURE_INDEX = {name: i for i, name in enumerate(FIXTURE_NAMES)}


# --------------------------------------------------------------------------------------------------------------------
# A quiet end: once Triton has compiled a kernel in the test process, its nanobind extension reports at interpreter
# teardown every object it still holds ("nanobind: leaked 4 instances! ... leaked 328 functions!", some 60 lines
# after pytest's summary). A run of pytest ends instead right after the atexit handlers, with pytest's exit status:
# its summary, junit file and exit code are as before.

_FINISHED: list[pytest.Session] = []
_EXITING: list[bool] = []


def pytest_sessionfinish(session: pytest.Session) -> None:
    _FINISHED[:] = [session]


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    # Only a process that is this pytest run (`pytest`, `python -m pytest`; not `pytest.main()` inside a program
    # that goes on, nor an xdist worker, whose controller reads its end).
    program = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    console = program.name in ("pytest", "py.test") or program.parts[-2:] == ("pytest", "__main__.py")
    if _FINISHED and console and not hasattr(config, "workerinput"):
        atexit.register(_exit_quietly)  # registered last, so called first


def _exit_quietly() -> None:
    if _EXITING:
        return  # (called again by the run of the handlers below)
    _EXITING.append(True)
    atexit._run_exitfuncs()  # every other handler, as at a normal exit (the session cache's removal, ...)
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        if stream is not None:
            stream.flush()
    os._exit(int(_FINISHED[0].exitstatus))


@pytest.fixture(scope="session")
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))


# --------------------------------------------------------------------------------------------------------------------
# Goldens


def golden_project(target_name: str) -> Project:
    """The project the CLI builds for `transpile fixtures/<f>.py --target T --out-dir fixtures/expected/T
    --source-root fixtures`, run in the repository root (the out-dir mirrors the tree below fixtures/)."""
    return Project(load_config(ROOT), [target_name], EXPECTED_DIR / target_name, [], source_root=FIXTURES_DIR)


@lru_cache(maxsize=None)
def translate_fixture(fixture_name: str, target_name: str) -> TranslationResult:
    """The fixture's variant exactly as the CLI writes it into fixtures/expected/ (same path, header command and
    layout: formatted by ruff at the repository's settings)."""
    source = FIXTURES_DIR / f"{fixture_name}.py"
    target = get_target(target_name)
    project = golden_project(target_name)
    result = translate_source(source.read_text(encoding="utf-8"), project.display(source), target,
                              project.command(source, target))
    problem = format_results([result], project.style)
    assert problem is None, f"the variant could not be formatted: {problem}"
    return result


class Goldens:
    """The golden files under fixtures/expected/."""

    directory = EXPECTED_DIR

    def path(self, fixture_name: str, target_name: str) -> Path:
        return EXPECTED_DIR / target_name / f"{fixture_name}_{target_name}.py"

    def read(self, fixture_name: str, target_name: str) -> str:
        path = self.path(fixture_name, target_name)
        if not path.is_file():
            pytest.fail(f"missing golden {path.relative_to(ROOT)}; run `python -m pytest --update-goldens`")
        return path.read_text(encoding="utf-8")

    def expected_files(self) -> set[Path]:
        return {self.path(f, t) for f in FIXTURE_NAMES for t in TARGET_NAMES}


@pytest.fixture(scope="session")
def goldens() -> Goldens:
    return Goldens()


@pytest.fixture(scope="session")
def translated():
    """`translated(fixture_name, target_name)` -> the TranslationResult the CLI writes into fixtures/expected/."""
    return translate_fixture


@pytest.fixture(scope="session")
def verify_values() -> dict[str, dict[str, object]]:
    """fixtures/verify.json: per fixture file, argument types and constexpr values for `transpile verify`."""
    return VERIFY_VALUES


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def fixture_names() -> list[str]:
    """Stems of the fixture files (fixtures/<name>.py), sorted."""
    return FIXTURE_NAMES


# --------------------------------------------------------------------------------------------------------------------
# Running the command line


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str
    exception: BaseException | None = None

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


class Cli:
    """Runs `transpile ARGS` in-process (typer's CliRunner, cwd = `self.cwd`) or as a real subprocess."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd

    def __call__(self, *args: str | os.PathLike[str]) -> CliResult:
        from typer.testing import CliRunner

        from transpile.cli.app import SUBCOMMANDS, app, tools

        argv = [str(a) for a in args]
        command = tools if argv and argv[0] in SUBCOMMANDS else app
        previous = Path.cwd()
        os.chdir(self.cwd)
        try:
            result = CliRunner().invoke(command, argv, prog_name="transpile")
        finally:
            os.chdir(previous)
        exception = result.exception if not isinstance(result.exception, SystemExit) else None
        return CliResult(result.exit_code, result.stdout, result.stderr, exception)

    def subprocess(self, *args: str | os.PathLike[str], env: dict[str, str] | None = None,
                   timeout: float = 300) -> CliResult:
        """`python -m transpile ARGS`: the real entry point, `main()`'s dispatch included."""
        completed = subprocess.run([sys.executable, "-m", "transpile", *map(str, args)], cwd=self.cwd,
                                   capture_output=True, text=True, timeout=timeout,
                                   env={**os.environ, **(env or {})})
        return CliResult(completed.returncode, completed.stdout, completed.stderr)


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """Runs the command line with the current directory set to the test's `tmp_path`."""
    return Cli(tmp_path)


@pytest.fixture
def repo_cli() -> Cli:
    """Runs the command line in the repository root (its pyproject.toml is the configuration)."""
    return Cli(ROOT)


@pytest.fixture(scope="session")
def tree():
    """`tree(directory)` -> {relative path: bytes} of every file under it (to assert what a run wrote or left)."""

    def read(directory: Path) -> dict[str, bytes]:
        return {p.relative_to(directory).as_posix(): p.read_bytes()
                for p in sorted(directory.rglob("*")) if p.is_file()}

    return read


@pytest.fixture
def fixture_copy(tmp_path: Path):
    """`fixture_copy("vector_add", ...)` copies fixtures into `tmp_path` and returns their paths there."""

    def copy(*names: str, into: Path | None = None) -> list[Path]:
        directory = into or tmp_path
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for name in names:
            destination = directory / f"{name}.py"
            destination.write_bytes((FIXTURES_DIR / f"{name}.py").read_bytes())
            paths.append(destination)
        return paths

    return copy
