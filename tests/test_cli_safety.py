"""The command line is safe to run from anywhere and to interrupt (issue 30): interrupted writes leave nothing behind,
the project root comes from the files, orphaned variants are reported, `verify` keeps the user's warps, write and
configuration errors are located messages (exit 2, no traceback), text is never taken for markup, odd inputs (FIFOs,
BOMs, coding cookies) are handled, and the conventions of a command line hold (readable help, usage errors, `-v`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from test_cli import MIXED, assert_clean_exit, diagnostics

# --------------------------------------------------------------------------------------------------------------------
# 3. An interrupted write leaves no temporary file

INTERRUPT = textwrap.dedent('''\
    import os, signal, sys, tempfile

    SIGNAL = getattr(signal, sys.argv[1])
    # A shell starts a background job with SIGINT ignored (CI runs one test shard with `&`), and Python then leaves
    # it ignored: put back the handler Python installs in a terminal, where Ctrl-C reaches the run.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    real = tempfile.mkstemp


    def mkstemp(*args, **kwargs):
        """The signal arrives the moment a variant's temporary file exists."""
        fd, name = real(*args, **kwargs)
        if name.endswith(".tmp"):
            os.kill(os.getpid(), SIGNAL)
        return fd, name


    tempfile.mkstemp = mkstemp
    sys.argv = ["transpile", "vector_add.py", "-t", "gfx942,sm90", "--no-cache"]
    from transpile.cli.app import main

    main()
''')


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_an_interrupted_write_leaves_no_temporary_file(signal_name: str, tmp_path: Path, fixture_copy, cli) -> None:
    fixture_copy("vector_add")
    (tmp_path / "interrupt.py").write_text(INTERRUPT, encoding="utf-8")
    done = subprocess.run([sys.executable, "interrupt.py", signal_name], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == {"SIGINT": 130, "SIGTERM": 143}[signal_name], done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    left = sorted(p.name for p in tmp_path.iterdir())
    assert not [name for name in left if name.endswith(".tmp")], left
    # The variant being written when the signal came is whole (the signal waited for it); the other is not begun.
    assert left == ["interrupt.py", "vector_add.py", "vector_add_gfx942.py"], left
    written = (tmp_path / "vector_add_gfx942.py").read_text(encoding="utf-8")
    assert_clean_exit(cli("vector_add.py", "-t", "gfx942", "--no-cache", "--check"), 0)
    assert written == (tmp_path / "vector_add_gfx942.py").read_text(encoding="utf-8")


# --------------------------------------------------------------------------------------------------------------------
# 4. The project root comes from the files, not from the current directory

@pytest.mark.parametrize("marker", ["pyproject", "git"])
def test_the_same_output_from_any_directory(marker: str, tmp_path: Path, cli, fixture_copy, tree) -> None:
    """Run from the project root, from outside the project and from a subdirectory: the same variants, byte for
    byte; `--check` finds them up to date from anywhere. A nested pyproject.toml without the tool's table (a
    sub-package's) does not make a root of its own."""
    project = tmp_path / "proj"
    fixture_copy("vector_add", into=project / "pkg" / "kernels")
    if marker == "pyproject":
        (project / "pyproject.toml").write_text('[tool.triton-transpile]\ntargets = ["gfx942"]\n', encoding="utf-8")
        (project / "pkg" / "pyproject.toml").write_text('[project]\nname = "pkg"\n', encoding="utf-8")
        targets: list[str] = []
    else:
        (project / ".git").mkdir()
        targets = ["-t", "gfx942"]
    Cli = type(cli)
    assert_clean_exit(Cli(project)("pkg/kernels", *targets), 0)
    variant = project / "pkg" / "kernels" / "vector_add_gfx942.py"
    header = variant.read_text(encoding="utf-8").splitlines()
    assert header[0].endswith("from pkg/kernels/vector_add.py: do not edit by hand."), header[0]
    assert header[2] == "# regenerate: transpile pkg/kernels/vector_add.py --target gfx942"
    before = tree(project)
    for cwd, path in ((tmp_path, "proj/pkg/kernels"), (project / "pkg", "kernels/vector_add.py"),
                      (project / "pkg" / "kernels", ".")):
        result = Cli(cwd)(path, *targets, "--check")
        assert_clean_exit(result, 0)
        assert diagnostics(result.stderr) == [], (cwd, result.stderr)
        result = Cli(cwd)(path, *targets)
        assert_clean_exit(result, 0)
        assert "1 unchanged" in result.stderr, (cwd, result.stderr)
        assert tree(project) == before, cwd


def test_paths_of_two_projects_are_a_usage_error(tmp_path: Path, cli, fixture_copy, tree) -> None:
    for name in ("a", "b"):
        fixture_copy("vector_add", into=tmp_path / name)
        (tmp_path / name / "pyproject.toml").write_text('[tool.triton-transpile]\ntargets = ["sm90"]\n',
                                                        encoding="utf-8")
    before = tree(tmp_path)
    result = cli("a/vector_add.py", "b/vector_add.py")
    assert_clean_exit(result, 2)
    ((path, _, _, code, message),) = diagnostics(result.stderr)
    assert (path, code) == ("<command line>", "TT004") and "different projects" in message
    assert tree(tmp_path) == before


# --------------------------------------------------------------------------------------------------------------------
# 5. --check reports orphaned variants

@pytest.mark.parametrize("out_dir", [None, "generated"])
def test_check_reports_orphaned_variants(out_dir: str | None, tmp_path: Path, cli, fixture_copy) -> None:
    """A variant whose source was deleted or renamed is reported (TT022 at the source path in its header, exit 1)
    when a directory is checked, beside the sources or under the out-dir; never deleted."""
    config = '[tool.triton-transpile]\ntargets = ["gfx942"]\n' + (f'out-dir = "{out_dir}"\n' if out_dir else "")
    (tmp_path / "pyproject.toml").write_text(config, encoding="utf-8")
    fixture_copy("vector_add", "softmax", "rmsnorm", into=tmp_path / "src")
    assert_clean_exit(cli("src"), 0)
    assert_clean_exit(cli("src", "--check"), 0)
    (tmp_path / "src" / "softmax.py").unlink()  # deleted
    (tmp_path / "src" / "vector_add.py").rename(tmp_path / "src" / "add.py")  # renamed
    where = f"{out_dir}/src" if out_dir else "src"
    result = cli("src", "--check")
    assert_clean_exit(result, 1)
    prefix = "# Generated by triton-transpile 0.1.0 for gfx942 from "
    assert sorted(diagnostics(result.stderr)) == [
        (f"{where}/add_gfx942.py", 1, 1, "TT021", "variant is missing; run `transpile src/add.py --target gfx942`"),
        (f"{where}/softmax_gfx942.py", 1, len(prefix) + 1, "TT022", "variant is orphaned (its source "
         f"`src/softmax.py` does not exist); delete it (`rm {where}/softmax_gfx942.py`) or restore its source"),
        (f"{where}/vector_add_gfx942.py", 1, len(prefix) + 1, "TT022", "variant is orphaned (its source "
         f"`src/vector_add.py` does not exist); delete it (`rm {where}/vector_add_gfx942.py`) or restore its "
         "source"),
    ]
    assert "2 orphaned" in result.stderr
    assert (tmp_path / where / "softmax_gfx942.py").is_file()  # reported, not deleted
    # From another directory too, and in the JSON report.
    result = type(cli)(tmp_path.parent)(f"{tmp_path.name}/src", "--check", "--output-format", "json")
    assert result.exit_code == 1
    orphans = [o for o in json.loads(result.stdout)["outcomes"] if o["status"] == "orphaned"]
    assert sorted(o["variant"] for o in orphans) == [f"{where}/softmax_gfx942.py", f"{where}/vector_add_gfx942.py"]


# --------------------------------------------------------------------------------------------------------------------
# 6. verify keeps the user's num_warps

@pytest.mark.slow
def test_verify_compiles_what_runs_at_the_users_warps(repo_cli) -> None:
    """A warp-pipelined AMD kernel runs as Gluon at 8 warps only; its launcher runs the source kernel at others:
    `-v num_warps=4` compiles that, at 4 warps, and says so; the Gluon kernel is not reported as compiling."""
    result = repo_cli.subprocess("verify", "fixtures/matmul_splitk.py", "-t", "gfx950", "--values-file",
                                 "fixtures/verify.json", "-v", "num_warps=4", env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if "gfx950" in line and "schedule" not in line]
    assert len(rows) == 1, result.stdout
    # the variant's loop, whatever the launch runs, is still followed by the schedule checker
    assert re.search(r"gfx950\s+│ matmul_splitk_kernel\s+│ schedule \(\d+ cases\)\s+│ holds", result.stdout), result.stdout
    assert re.search(r"_matmul_splitk_kernel_triton \(kept as Triton\)\s+│ given values \(num_warps=4: the launcher "
                     r"runs the source kernel; the Gluon kernel runs at 8 only\)\s+│ compiles", rows[0]), rows[0]


@pytest.mark.slow
def test_verify_fails_where_the_users_warps_cannot_run_the_variant(repo_cli) -> None:
    """An autotuned warp-pipelined kernel: its configs launch it with 8 warps; `-v num_warps=4` is no launch of the
    variant: reported as failing, never compiled at 8 instead."""
    result = repo_cli.subprocess("verify", "fixtures/matmul_grouped.py", "-t", "gfx950", "--values-file",
                                 "fixtures/verify.json", "--first-config", "-v", "num_warps=4", env={"COLUMNS": "250"})
    assert result.exit_code == 1, result.output
    assert re.search(r"matmul_kernel\s+│ config 0\s+│ fails: the variant's kernel runs at num_warps=8 only \(its "
                     r"autotune configs launch it with 8\): num_warps=4 is not a launch of it", result.stdout), \
        result.stdout
    assert "compiles" not in result.stdout


# --------------------------------------------------------------------------------------------------------------------
# 7. Write and configuration errors: a located message, exit 2, nothing written, no traceback

def test_out_dir_naming_a_file(tmp_path: Path, cli, fixture_copy, tree) -> None:
    fixture_copy("vector_add", "softmax")
    (tmp_path / "out").write_text("a file\n", encoding="utf-8")
    before = tree(tmp_path)
    for out_dir in ("out", "out/sub"):
        result = cli("vector_add.py", "softmax.py", "-t", "gfx942", "--out-dir", out_dir)
        assert_clean_exit(result, 2)
        assert sorted(diagnostics(result.stderr)) == [
            (f"{out_dir}/{name}_gfx942.py", 1, 1, "TT008", "cannot write the gfx942 variant: `out` is not a "
             "directory; nothing was written") for name in ("softmax", "vector_add")]
        assert tree(tmp_path) == before


def test_a_read_only_out_dir(tmp_path: Path, cli, fixture_copy, tree, monkeypatch: pytest.MonkeyPatch) -> None:
    fixture_copy("vector_add", "softmax")
    (tmp_path / "out").mkdir()
    real = os.access
    read_only = (tmp_path / "out").resolve()
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if Path(path).resolve() == read_only
                        and mode & os.W_OK else real(path, mode, **kw))  # (the tests may run as root)
    before = tree(tmp_path)
    result = cli("vector_add.py", "softmax.py", "-t", "gfx942", "--out-dir", "out")
    assert_clean_exit(result, 2)
    assert sorted(d[:4] for d in diagnostics(result.stderr)) == [
        ("out/softmax_gfx942.py", 1, 1, "TT008"), ("out/vector_add_gfx942.py", 1, 1, "TT008")]
    assert "the directory `out` is not writable (permission denied)" in result.stderr
    assert tree(tmp_path) == before


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_directory_for_real(tmp_path: Path, cli, fixture_copy) -> None:
    fixture_copy("vector_add")
    (tmp_path / "out").mkdir(mode=0o555)
    try:
        result = cli("vector_add.py", "-t", "gfx942", "--out-dir", "out")
    finally:
        (tmp_path / "out").chmod(0o755)
    assert_clean_exit(result, 2)
    assert [d[3] for d in diagnostics(result.stderr)] == ["TT008"]


def test_a_write_that_fails_midway(tmp_path: Path, cli, fixture_copy, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that fails after the checks (a full disk): TT008 with the system's reason, exit 2, no traceback."""
    import transpile.project

    def full(path: Path, text: str, encoding: str = "utf-8") -> None:
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(transpile.project, "write_atomic", full)
    fixture_copy("vector_add")
    result = cli("vector_add.py", "-t", "gfx942")
    assert_clean_exit(result, 2)
    ((path, line, col, code, message),) = diagnostics(result.stderr)
    assert (path, line, col, code) == ("vector_add_gfx942.py", 1, 1, "TT008")
    assert message.startswith("cannot write the gfx942 variant: No space left on device")
    assert not (tmp_path / "vector_add_gfx942.py").exists()


def test_a_timeline_that_cannot_be_written(tmp_path: Path, cli) -> None:
    (tmp_path / "k.py").write_text(MIXED, encoding="utf-8")
    (tmp_path / "afile").write_text("", encoding="utf-8")
    result = cli("explain", "k.py", "-t", "gfx950", "--timeline", "afile/t.svg")
    assert_clean_exit(result, 2)
    assert diagnostics(result.stderr) == [("afile/t.svg", 1, 1, "TT008", "cannot write the timeline: `afile` is not a "
                                           "directory")]
    assert result.stdout == ""  # said before any work


BAD_PYPROJECTS = {
    "section_not_a_table": (b"[tool]\ntriton-transpile = 3\n", 2, 1, "must be a table"),
    "tool_not_a_table": (b"tool = 3\n", 1, 1, "`tool` must be a table, not `3`"),
    "not_utf8": (b'[tool.triton-transpile]\n# caf\xe9\ntargets = ["sm90"]\n', 2, 6, "not UTF-8 text"),
    "not_toml": (b'[tool.triton-transpile]\ntargets = ["sm90"] x\n', 2, 20, "not valid TOML: Expected newline"),
    "unclosed": (b'[tool.triton-transpile]\ntargets = ["sm90"\n', 2, 18, "not valid TOML: Unclosed array"),
}


@pytest.mark.parametrize("kind", list(BAD_PYPROJECTS))
def test_a_bad_pyproject_is_a_located_tt005(kind: str, tmp_path: Path, cli, fixture_copy, tree) -> None:
    data, line, col, message = BAD_PYPROJECTS[kind]
    (tmp_path / "pyproject.toml").write_bytes(data)
    fixture_copy("vector_add")
    before = tree(tmp_path)
    result = cli("vector_add.py", "-t", "gfx942")
    assert_clean_exit(result, 2)
    ((path, *found, text),) = diagnostics(result.stderr)
    assert (Path(path).name, *found) == ("pyproject.toml", line, col, "TT005"), result.stderr
    assert message in text, text
    assert tree(tmp_path) == before


# --------------------------------------------------------------------------------------------------------------------
# 8. Text is never taken for rich markup

def test_brackets_in_messages_and_paths_are_printed_as_they_are(tmp_path: Path, cli, fixture_copy) -> None:
    fixture_copy("vector_add")
    result = cli("vector_add.py")
    assert_clean_exit(result, 2)
    assert diagnostics(result.stderr) == [("<command line>", 1, 1, "TT004",
                                           "no target: pass --target (or set `targets` in [tool.triton-transpile])")]
    weird = tmp_path / "weird[bold]"
    fixture_copy("vector_add", into=weird)
    (weird / "bad.py").write_text("import triton\n\n\n@triton.jit\ndef k(x_ptr:\n    pass\n", encoding="utf-8")
    result = cli("weird[bold]/bad.py", "-t", "gfx942")
    assert_clean_exit(result, 2)
    assert [d[:4] for d in diagnostics(result.stderr)] == [("weird[bold]/bad.py", 5, 6, "TT001")]
    result = cli("weird[bold]/vector_add.py", "-t", "gfx942", "--check")
    assert_clean_exit(result, 1)
    assert diagnostics(result.stderr) == [("weird[bold]/vector_add_gfx942.py", 1, 1, "TT021", "variant is missing; run "
                                           "`transpile 'weird[bold]/vector_add.py' --target gfx942`")]


# --------------------------------------------------------------------------------------------------------------------
# 9. FIFOs, BOMs, coding cookies; usage errors as JSON

@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_fifo_named_py_is_never_opened(tmp_path: Path, cli, fixture_copy) -> None:
    fixture_copy("vector_add", into=tmp_path / "src")
    os.mkfifo(tmp_path / "src" / "pipe.py")
    named = cli.subprocess("src/pipe.py", "-t", "gfx942", timeout=120)  # (before: blocked forever)
    assert named.exit_code == 2, named.output
    assert diagnostics(named.stderr) == [("src/pipe.py", 1, 1, "TT002", "is not a regular file (a named pipe); not "
                                          "read")]
    walked = cli.subprocess("src", "-t", "gfx942", timeout=120)
    assert walked.exit_code == 2, walked.output
    assert diagnostics(walked.stderr) == [("src/pipe.py", 1, 1, "TT002", "is not a regular file (a named pipe); "
                                           "skipped, not read")]
    assert (tmp_path / "src" / "vector_add_gfx942.py").is_file()  # the other files are translated


def test_a_source_with_a_bom_is_translated_and_its_variant_keeps_it(tmp_path: Path, cli, fixture_copy) -> None:
    (plain,) = fixture_copy("vector_add", into=tmp_path / "plain")
    (tmp_path / "bom").mkdir()
    (tmp_path / "bom" / "vector_add.py").write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    for directory in ("plain", "bom"):
        assert_clean_exit(cli(f"{directory}/vector_add.py", "-t", "gfx942"), 0)
    with_bom = (tmp_path / "bom" / "vector_add_gfx942.py").read_bytes()
    without = (tmp_path / "plain" / "vector_add_gfx942.py").read_bytes()
    assert with_bom.startswith(b"\xef\xbb\xbf# Generated by triton-transpile")
    assert with_bom[3:].replace(b"bom/", b"plain/") == without
    result = cli("bom/vector_add.py", "-t", "gfx942", "--check")
    assert_clean_exit(result, 0)
    # A variant that lost its BOM is stale (and written back with it).
    (tmp_path / "bom" / "vector_add_gfx942.py").write_bytes(with_bom[3:])
    result = cli("bom/vector_add.py", "-t", "gfx942", "--check")
    assert_clean_exit(result, 1)
    assert "the source begins with a BOM, the variant does not" in result.stderr
    assert_clean_exit(cli("bom/vector_add.py", "-t", "gfx942"), 0)
    assert (tmp_path / "bom" / "vector_add_gfx942.py").read_bytes() == with_bom


def test_a_coding_cookie_is_honoured(tmp_path: Path, cli, fixture_copy) -> None:
    """A latin-1 source (PEP 263 cookie) is read as latin-1; its variant is UTF-8, where the cookie, below the header,
    is a comment Python does not read: the text is the same."""
    (plain,) = fixture_copy("vector_add", into=tmp_path / "plain")
    source = b"# -*- coding: latin-1 -*-\n# caf\xe9 cr\xe8me\n" + plain.read_bytes()
    (tmp_path / "latin.py").write_bytes(source)
    result = cli("latin.py", "-t", "gfx942")
    assert_clean_exit(result, 0)
    variant = (tmp_path / "latin_gfx942.py").read_bytes()
    assert "# café crème\n" in variant.decode("utf-8")
    compile(variant, "latin_gfx942.py", "exec")  # bytes: as Python reads the file (UTF-8)
    assert_clean_exit(cli("latin.py", "-t", "gfx942", "--check"), 0)
    (tmp_path / "bad.py").write_bytes(b"# -*- coding: no-such-codec -*-\n" + plain.read_bytes())
    result = cli("bad.py", "-t", "gfx942")
    assert_clean_exit(result, 2)
    assert [d[:4] for d in diagnostics(result.stderr)] == [("bad.py", 1, 1, "TT002")]


@pytest.mark.parametrize("args", [
    [], ["vector_add.py", "-t", "gfx942", "--bogus"], ["vector_add.py", "-t", "gfx942", "--diff", "--check"],
    ["vector_add.py"], ["verify", "vector_add.py"]], ids=["no-paths", "unknown-option", "diff+check", "no-target",
                                                           "verify-no-target"])
def test_usage_errors_under_json_output_are_json(args: list[str], tmp_path: Path, cli, fixture_copy) -> None:
    fixture_copy("vector_add")
    for form in (["--output-format", "json"], ["--output-format=json"]):
        result = cli(*args, *form)
        assert_clean_exit(result, 2)
        report = json.loads(result.stdout)
        assert report["exit_code"] == 2 and report["outcomes"] == []
        ((diagnostic),) = report["diagnostics"]
        assert (diagnostic["path"], diagnostic["code"], diagnostic["severity"]) == ("<command line>", "TT004", "error")


# --------------------------------------------------------------------------------------------------------------------
# 10. Command-line conventions

def test_help_shows_readable_metavars(cli) -> None:  # noqa: ANN001 - the conftest fixture
    for args, usage in ((["-h"], "Usage: transpile [OPTIONS] PATH..."), (["verify", "-h"], "Usage: transpile verify "
                        "[OPTIONS] FILE"), (["explain", "-h"], "Usage: transpile explain [OPTIONS] FILE")):
        result = cli(*args)
        assert result.exit_code == 0 and result.stdout.startswith(usage), result.stdout
        assert not re.search(r"\{(paths|file|PATH|FILE)\}|<list\[|<path>|<str>", result.stdout), result.stdout
    text = cli("-h").stdout
    for shown in ("-t, --target TARGET", "--out-dir DIR", "--exclude GLOB", "--output-format FORMAT", "-v, --verbose"):
        assert shown in text, shown
    assert "-v, --value NAME=VALUE" in cli("verify", "-h").stdout
    assert "--timeline FILE.svg" in cli("explain", "-h").stdout


@pytest.mark.parametrize("args", [["vector_add.py"], ["explain", "vector_add.py"], ["verify", "vector_add.py"]],
                         ids=["run", "explain", "verify"])
@pytest.mark.parametrize("value", ["", ","])
def test_an_empty_target_is_a_usage_error(args: list[str], value: str, tmp_path: Path, cli, fixture_copy,
                                          tree) -> None:
    """`-t ''` names no target: an error, not a silent fall back to the configured targets."""
    (tmp_path / "pyproject.toml").write_text('[tool.triton-transpile]\ntargets = ["sm90"]\n', encoding="utf-8")
    fixture_copy("vector_add")
    before = tree(tmp_path)
    result = cli(*args, "-t", value)
    assert_clean_exit(result, 2)
    assert diagnostics(result.stderr) == [("<command line>", 1, 1, "TT004", f"--target `{value}` names no target; "
                                           "choose from gfx942, gfx950, gfx1250, sm90")]
    assert tree(tmp_path) == before


CONFIG_ERRORS = {
    # docs/CLI.md: a value of the wrong type is TT005 (a string is not a list of targets)
    "targets_a_string": ('[tool.triton-transpile]\n\n  targets = "gfx942"\n', 3, 3, "`targets` must be a list"),
    "unknown_key": ('[project]\nname = "x"\n\n[tool.triton-transpile]\ntargets = ["sm90"]\noutdir = "x"\n', 6, 1,
                    "unknown key `outdir`"),
    "exclude": ('[tool.triton-transpile]\ntargets = ["sm90"]\nexclude = "legacy"\n', 3, 1, "`exclude` must be a list"),
    "gluon_always": ('[tool.triton-transpile]\ntargets = ["sm90"]\n\ngluon-always = "yes"\n', 4, 1,
                     "`gluon-always` must be true or false"),
    "dotted_key": ('[tool]\nruff.line-length = 100\ntriton-transpile.targets = 3\n', 3, 1, "`targets` must be a list"),
    "inline_table": ('[tool]\ntriton-transpile = { exclude = 3 }\n', 2, 1, "`exclude` must be a list"),
    "unknown_target": ('[tool.triton-transpile]\n# the targets\ntargets = ["gfx9000"]\n', 3, 1,
                       "unknown target `gfx9000`"),
}


@pytest.mark.parametrize("kind", list(CONFIG_ERRORS))
def test_configuration_errors_point_at_their_key(kind: str, tmp_path: Path, cli, fixture_copy, tree) -> None:
    text, line, col, message = CONFIG_ERRORS[kind]
    (tmp_path / "pyproject.toml").write_text(text, encoding="utf-8")
    fixture_copy("vector_add")
    before = tree(tmp_path)
    result = cli("vector_add.py")
    assert_clean_exit(result, 2)
    ((path, *found, text_),) = diagnostics(result.stderr)
    assert (Path(path).name, *found) == ("pyproject.toml", line, col, "TT004" if kind == "unknown_target" else
                                         "TT005"), result.stderr
    assert text_.startswith(message), text_
    assert tree(tmp_path) == before


def test_a_misspelt_tool_table_is_pointed_out(tmp_path: Path, cli, fixture_copy) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.triton_transpile]\ntargets = ["sm90"]\n',
                                             encoding="utf-8")
    fixture_copy("vector_add")
    note = ("pyproject.toml", 4, 1, "TT009",
            "[tool.triton_transpile] is not read: did you mean [tool.triton-transpile]?")
    result = cli("vector_add.py")  # the table's targets are not read: no target
    assert_clean_exit(result, 2)
    assert [(Path(d[0]).name, *d[1:]) for d in diagnostics(result.stderr)] == [
        note,
        ("<command line>", 1, 1, "TT004", "no target: pass --target (or set `targets` in [tool.triton-transpile])")]
    result = cli("vector_add.py", "-t", "gfx942")  # a note: the run goes on
    assert_clean_exit(result, 0)
    assert [(Path(d[0]).name, *d[1:]) for d in diagnostics(result.stderr)] == [note]


def test_verbose_lists_every_variant(tmp_path: Path, cli, fixture_copy) -> None:
    fixture_copy("vector_add", "softmax")
    result = cli("vector_add.py", "softmax.py", "-t", "gfx942,sm90", "-v")
    assert_clean_exit(result, 0)
    listed = [line for line in result.stderr.splitlines() if line.endswith(": written")]
    assert sorted(listed) == [f"{name}_{target}.py: written" for name in ("softmax", "vector_add")
                              for target in ("gfx942", "sm90")]
    result = cli("vector_add.py", "-t", "gfx942", "--verbose")
    assert "vector_add_gfx942.py: unchanged" in result.stderr.splitlines()
