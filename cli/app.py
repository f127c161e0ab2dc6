"""The `transpile` command line: argument parsing (Typer), output (rich), exit codes. Logic lives in `transpile/`.

Exit codes: 0 fine, 1 a check failed (stale/missing/orphaned variant, a kernel that does not compile,
`--fail-on-write` wrote something), 2 bad usage or bad input.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer
from typer.core import TyperCommand
from rich.console import Console
from rich.table import Table
from rich.text import Text

from transpile import __version__
from transpile.diagnostics import Diagnostic, TranspileError
from transpile.project import Project, Run, cannot_write, project_config, tune_gc, write_atomic
from transpile.source import read_text

HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(add_completion=False, rich_markup_mode=None, context_settings=HELP_OPTIONS)
tools = typer.Typer(add_completion=False, rich_markup_mode=None, no_args_is_help=True, context_settings=HELP_OPTIONS)

# No markup: paths, messages and kernel code hold brackets (`[tool.triton-transpile]`, `weird[bold]/k.py`, `x[i]`)
# that rich would take for style tags; styles are given as such (`Text`).
out = Console(highlight=False, soft_wrap=True, markup=False)
err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)

TARGET_HELP = "gfx942|gfx950|gfx1250|sm90 (aliases mi300, mi350, hopper); repeat or comma-separate for several"
SUBCOMMANDS = ("explain", "verify")
GLUON_ALWAYS_HELP = ("Emit the translated Gluon even for kernels kept as Triton by default (a dot loop no pipeline "
                     "rule pipelines, or only a ring measured slower than Triton's own).")


def _targets(values: list[str] | None) -> list[str]:
    """The targets `-t` names (`-t gfx942 -t sm90,gfx950`); TT004 for a value that names none (`-t ''`): it must not
    fall back to the configured targets."""
    names = []
    for value in values or []:
        found = [t.strip() for t in value.split(",") if t.strip()]
        if not found:
            from transpile.targets import all_targets

            raise TranspileError(Diagnostic("<command line>", 1, 1, "TT004", f"--target `{value}` names no target; "
                                            f"choose from {', '.join(t.name for t in all_targets())}"))
        names += found
    return names


def _print_diagnostics(diagnostics: list[Diagnostic]) -> None:
    for d in diagnostics:
        style = {"error": "red", "refusal": "yellow", "note": "dim"}[d.severity.value]
        err.print(Text(d.format(), style=style))


def _fail(diagnostic: Diagnostic, as_json: bool = False, notes: list[Diagnostic] | None = None) -> None:
    """Ends the command with exit 2 and the `diagnostic` (after `notes`): as text on stderr, or (`--output-format
    json`) as the JSON object a run prints, with no outcomes."""
    if as_json:
        out.print_json(json.dumps(Run(diagnostics=[*(notes or []), diagnostic]).as_dict()))
    else:
        _print_diagnostics([*(notes or []), diagnostic])
    raise typer.Exit(2)


def _project(paths: list[Path], target: list[str] | None, as_json: bool = False, **options: object) -> Project:
    """The project of `paths` with the targets of the command line (else its configuration's); exit 2 with the
    reason where there is none (and the configuration's notes: a misspelt table explains a missing target)."""
    config = None
    try:
        config = project_config(paths)
        out_dir, exclude = options.pop("out_dir", None), options.pop("exclude", [])
        return Project(config, _targets(target), out_dir, exclude, **options)  # type: ignore[arg-type]
    except TranspileError as exc:
        _fail(exc.diagnostic, as_json, config.notes if config is not None else [])
        raise  # (not reached)


def _wants_json(args: list[str]) -> bool:
    return "--output-format=json" in args or any(
        a == "--output-format" and b == "json" for a, b in zip(args, args[1:]))


class _Command(TyperCommand):
    """A command whose usage errors (a missing argument, an unknown option, a bad value) are the JSON object that
    `--output-format json` asks for, on stdout, exit 2 (as text, as click words them, otherwise)."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:  # noqa: ANN001 - a click Context
        as_json = _wants_json(args)
        try:
            return super().parse_args(ctx, args)
        except Exception as exc:
            # (click's UsageError, or the copy of click that typer carries: the same class under another module)
            if not as_json or not any(c.__name__ == "UsageError" for c in type(exc).__mro__):
                raise
            message = exc.format_message()  # type: ignore[attr-defined]
            _fail(Diagnostic("<command line>", 1, 1, "TT004", message), as_json=True)
            raise  # (not reached)

    # Help as a command line's conventions write it: `transpile [OPTIONS] PATH...`, `-t, --target TARGET` (typer would
    # write `{paths}...` and `<list[Path]>`).

    def collect_usage_pieces(self, ctx) -> list[str]:  # noqa: ANN001 - a click Context
        arguments = [_argument_name(p) for p in self.get_params(ctx) if p.param_type_name == "argument"]
        return [self.options_metavar, *arguments] if self.options_metavar else arguments

    def format_options(self, ctx, formatter) -> None:  # noqa: ANN001 - a click Context and HelpFormatter
        arguments = [(_argument_name(p), (getattr(p, "help", None) or "") + ("  [required]" if p.required else ""))
                     for p in self.get_params(ctx) if p.param_type_name == "argument"]
        options = [record for p in self.get_params(ctx) if p.param_type_name == "option"
                   for record in [p.get_help_record(ctx)] if record is not None]
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


def _argument_name(param) -> str:  # noqa: ANN001 - a click Argument
    name = param.metavar or param.name.upper()
    return name + "..." if param.nargs != 1 and not name.endswith("...") else name


def _version(value: bool) -> None:
    if value:
        out.print(f"triton-transpile {__version__}", markup=False)
        raise typer.Exit(0)


@app.command(
    cls=_Command,
    help="Write Gluon variants of the Triton kernels in PATH... (files or directories), one per target: "
    "`dir/name.py` -> `dir/name_<target>.py`. Subcommands: `transpile explain FILE -t T`, "
    "`transpile verify FILE -t T`.",
)
def translate(
    paths: list[Path] = typer.Argument(..., metavar="PATH",
                                       help="Python files or directories (searched for *.py with kernels)."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the tool's version and exit."),
    target: Optional[list[str]] = typer.Option(None, "--target", "-t", metavar="TARGET", help=TARGET_HELP),
    out_dir: Optional[Path] = typer.Option(
        None, "--out-dir", metavar="DIR",
        help="Write variants here instead of beside sources, mirroring the source tree."
    ),
    source_root: Optional[Path] = typer.Option(
        None, "--source-root", metavar="DIR",
        help="With --out-dir: the directory whose tree is mirrored (default: the project root, found from PATH...: the "
        "nearest pyproject.toml with [tool.triton-transpile], else with a pyproject.toml or .git; outside any "
        "project, the common parent of PATH...).",
    ),
    diff: bool = typer.Option(False, "--diff", help="Write nothing; print unified diffs of what would change."),
    check: bool = typer.Option(False, "--check", help="Write nothing; exit 1 listing missing or stale variants."),
    exclude: Optional[list[str]] = typer.Option(None, "--exclude", metavar="GLOB",
                                                help="Glob of paths to skip (repeatable)."),
    skip_files_without_kernels: bool = typer.Option(
        False, "--skip-files-without-kernels", help="Pass over named files that hold no kernels (pre-commit)."
    ),
    fail_on_write: bool = typer.Option(False, "--fail-on-write", help="Exit 1 when a variant was written (pre-commit)."),
    output_format: str = typer.Option("text", "--output-format", metavar="FORMAT", help="text or json."),
    gluon_always: bool = typer.Option(False, "--gluon-always", help=GLUON_ALWAYS_HELP),
    no_cache: bool = typer.Option(
        False, "--no-cache", help="Translate every file; neither read nor write the cache of translations "
        "(~/.cache/triton-transpile, TRANSPILE_CACHE_DIR; TRANSPILE_NO_CACHE=1 does the same)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="List every variant with what was done to it "
                                 "(written, unchanged, ...), not only the counts."),
) -> None:
    if output_format not in ("text", "json"):
        _fail(Diagnostic("<command line>", 1, 1, "TT004", f"unknown output format `{output_format}` (text, json)"))
    as_json = output_format == "json"
    if diff and check:
        _fail(Diagnostic("<command line>", 1, 1, "TT004", "--diff and --check exclude each other"), as_json)
    project = _project(paths, target, as_json, out_dir=out_dir, exclude=list(exclude or []),
                       gluon_always=gluon_always, source_root=source_root, cache=not no_cache)
    mode = "diff" if diff else "check" if check else "write"
    run = project.run(paths, mode, skip_files_without_kernels, progress=sys.stderr.isatty() and output_format == "text")
    if output_format == "json":
        out.print_json(json.dumps(run.as_dict()))
    else:
        _report(run, mode, verbose)
    code = run.exit_code
    if code == 0 and fail_on_write and any(o.status == "written" for o in run.outcomes):
        code = 1
    raise typer.Exit(code)


def _report(run: Run, mode: str, verbose: bool = False) -> None:
    _print_diagnostics(run.diagnostics)
    for outcome in run.outcomes:
        if mode == "diff" and outcome.diff:
            _print_diff(outcome.diff)
        elif mode == "check" and outcome.status == "orphaned":
            err.print(f"{outcome.variant}:{outcome.line}:{outcome.col}: TT022 variant is orphaned ({outcome.reason}); "
                      f"delete it (`{outcome.command}`) or restore its source", highlight=False)
        elif mode == "check" and outcome.status in ("missing", "stale"):
            code = "TT021" if outcome.status == "missing" else "TT020"
            reason = f" ({outcome.reason})" if outcome.reason else ""
            err.print(f"{outcome.variant}:1:1: {code} variant is {outcome.status}{reason}; "
                      f"run `{outcome.command}`", highlight=False)
    if verbose:  # (missing, stale, orphaned and failed variants have their messages above)
        for outcome in run.outcomes:
            if outcome.status in ("written", "unchanged", "up-to-date", "would-write", "skipped"):
                err.print(f"{outcome.variant}: {outcome.status}", highlight=False)
    counts: dict[str, int] = {}
    for outcome in run.outcomes:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no kernel files"
    err.print(f"{summary} ({run.seconds:.2f}s)", style="dim", highlight=False)


def _print_diff(text: str) -> None:
    if not out.is_terminal:
        sys.stdout.write(text)
        return
    for line in text.splitlines():
        style = "green" if line.startswith("+") else "red" if line.startswith("-") else "cyan" if line.startswith("@@") else None
        out.print(line, style=style, markup=False, highlight=False)


@tools.command(cls=_Command, help="Show each kernel's loops, their dots and loads, the layouts, and what was emitted "
               "or why not.")
def explain(
    file: Path = typer.Argument(..., metavar="FILE", help="A Python file with Triton kernels."),
    target: list[str] = typer.Option(..., "--target", "-t", metavar="TARGET", help=TARGET_HELP),
    timeline: Optional[Path] = typer.Option(
        None, "--timeline", metavar="FILE.svg",
        help="Also write the timeline of every pipelined loop (warp groups or partitions, ring "
        "slots, waits) as an SVG file."),
    gluon_always: bool = typer.Option(False, "--gluon-always", help=GLUON_ALWAYS_HELP),
) -> None:
    from transpile.explain import explain_file
    from transpile.timeline import file_panels, render_rich, render_svg

    if timeline is not None and (timeline.suffix.lower() != ".svg" or timeline.is_dir()):
        # (a mistyped path must never overwrite a kernel: `--timeline kernels/matmul.py`)
        _fail(Diagnostic(str(timeline), 1, 1, "TT004", "--timeline writes an SVG picture: give a file path ending in "
                         "`.svg`" + (" (this is a directory)" if timeline.is_dir() else "")))
    if timeline is not None and cannot_write(timeline):
        _fail(Diagnostic(str(timeline), 1, 1, "TT008", f"cannot write the timeline: {cannot_write(timeline)}"))
    project = _project([file], target, gluon_always=gluon_always)
    _print_diagnostics(project.config.notes)
    try:
        reports = [explain_file(file, t, project.display(file), project.gluon_always) for t in project.targets]
        text = read_text(file)
        panels = [p for t in project.targets
                  for p in file_panels(text, project.display(file), t, project.gluon_always)]
    except TranspileError as exc:
        _fail(exc.diagnostic)
    for report in reports:
        for table in report:
            out.print(table)
    for panel in panels:
        out.print(render_rich(panel), highlight=False)
    if timeline is not None:
        if not panels:
            err.print(f"{project.display(file)}: no loop is pipelined for {', '.join(target)}; no timeline "
                      "written", markup=False, highlight=False)
            raise typer.Exit(1)
        try:
            write_atomic(timeline, render_svg(panels))
        except OSError as exc:
            _fail(Diagnostic(str(timeline), 1, 1, "TT008", f"cannot write the timeline: {exc.strerror or exc}"))
        out.print(f"timeline written to {timeline}")


@tools.command(cls=_Command, help="Compile each emitted kernel with Triton for the target, on the CPU.")
def verify(
    file: Path = typer.Argument(..., metavar="FILE", help="A Python file with Triton kernels."),
    target: list[str] = typer.Option(..., "--target", "-t", metavar="TARGET", help=TARGET_HELP),
    value: Optional[list[str]] = typer.Option(None, "--value", "-v", metavar="NAME=VALUE",
                                              help="NAME=VALUE: `a_ptr=*fp16`, `M=i32`, `BLOCK=128` (repeatable)."),
    values_file: Optional[Path] = typer.Option(None, "--values-file", metavar="FILE",
                                               help="JSON of NAME: VALUE (or FILE_NAME: {NAME: VALUE})."),
    first_config: bool = typer.Option(False, "--first-config", help="Compile only the first autotune config."),
    gluon_always: bool = typer.Option(False, "--gluon-always", help=GLUON_ALWAYS_HELP),
    isa: bool = typer.Option(
        False, "--isa", help="Also compile each source kernel as its variant's launch does and compare the machine "
        "code: registers, spills, LDS, occupancy and the hot loop's instruction mix (AMD), PTX counts (sm90)."),
    unaligned: bool = typer.Option(
        False, "--unaligned", help="With --isa: compile without the aligned-launch specialisation (16-byte aligned "
        "pointers under 2 GB, integers that are multiples of 16)."),
    output_format: str = typer.Option("text", "--output-format", metavar="FORMAT", help="text or json."),
) -> None:
    from transpile.verify import parse_values, verify_file

    if output_format not in ("text", "json"):
        _fail(Diagnostic("<command line>", 1, 1, "TT004", f"unknown output format `{output_format}` (text, json)"))
    as_json = output_format == "json"
    if importlib.util.find_spec("triton") is None:
        _fail(Diagnostic("<command line>", 1, 1, "TT033", "verify compiles the variants with Triton, which is not "
                         "installed here: `pip install 'triton-transpile[verify]'` (Triton 3.6 or newer; translating "
                         "needs no Triton)"), as_json)
    if unaligned and not isa:
        _fail(Diagnostic("<command line>", 1, 1, "TT004", "--unaligned applies to --isa only"), as_json)
    try:
        values: dict[str, object] = {}
        if values_file is not None:
            if values_file.exists() and not values_file.is_file():  # (a named pipe would block the read)
                raise OSError(f"`{values_file}` is not a regular file")
            data = json.loads(values_file.read_text(encoding="utf-8"))
            values.update(data.get(file.name, data) if isinstance(data.get(file.name), dict) else data)
        values.update(parse_values(list(value or [])))
        project = _project([file], target, as_json, gluon_always=gluon_always)
        if not as_json:
            _print_diagnostics(project.config.notes)
        if isa:
            _verify_isa(file, project, values, not first_config, not unaligned, output_format)
        table = Table("target", "kernel", "config", "result", title=f"verify {project.display(file)}")
        failed = False
        for t in project.targets:
            for compiled in verify_file(file, t, values, project.display(file), not first_config,
                                        project.gluon_always, project.style):
                failed |= not compiled.ok
                passed = "holds" if compiled.check == "schedule" else "compiles"
                result = (Text.assemble(("not compiled", "yellow"), f": {compiled.message}")
                          if compiled.check == "not run" else Text(passed, style="green") if compiled.ok
                          else Text.assemble(("fails", "red"), f": {compiled.message}"))
                kernel = f"{compiled.kernel} (kept as Triton)" if compiled.kept else compiled.kernel
                table.add_row(t.name, kernel, compiled.config, result)
    except TranspileError as exc:
        _fail(exc.diagnostic, as_json)
    except (OSError, json.JSONDecodeError) as exc:
        _fail(Diagnostic(str(values_file), 1, 1, "TT002", f"cannot read the values file: {exc}"), as_json)
    out.print(table)
    raise typer.Exit(1 if failed else 0)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `transpile` console script and of `python -m transpile`."""
    args = list(sys.argv[1:] if argv is None else argv)
    tune_gc()
    if argv is None:  # the process is the command's own
        _stop_on_sigterm()
    try:
        if args and args[0] in SUBCOMMANDS:
            tools(args, prog_name="transpile")
        else:
            app(args, prog_name="transpile")
    except SystemExit as exc:
        if argv is not None or "triton" not in sys.modules:
            raise
        code = exc.code
    else:
        if argv is not None or "triton" not in sys.modules:
            return
        code = 0
    # The process compiled kernels (`verify`): it ends here, without Python's shutdown, where Triton's compiler
    # bindings print dozens of "leaked" lines about objects Python still held (nothing is left to write or close).
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


def _stop_on_sigterm() -> None:
    """SIGTERM (`kill`, a CI job cancelled) ends the run as Ctrl-C does: by an exception, so that cleanups run (no
    temporary file is left: `transpile.atomic`) and nothing is half-written; exit status 143 (128 + SIGTERM). Worker
    processes forked later keep the default action."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGTERM"):
        pid = os.getpid()

        def stop(signum: int, frame: object) -> None:
            if os.getpid() != pid:  # a worker process: die as before
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
                return
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, stop)


__all__ = ["main"]


def _verify_isa(file: Path, project: Project, values: dict[str, object], all_configs: bool, aligned: bool,
                output_format: str) -> None:
    """`verify --isa`: the machine code of each kernel beside its source's; exits 1 if a compile failed."""
    from transpile.verify import isa_compare_file

    results = {t.name: isa_compare_file(file, t, values, project.display(file), all_configs, project.gluon_always,
                                        aligned) for t in project.targets}
    failed = any(c.source is None or c.variant is None for cs in results.values() for c in cs)
    if output_format == "json":
        out.print_json(json.dumps({"file": project.display(file), "aligned": aligned,
                                   "targets": {t: [c.as_dict() for c in cs] for t, cs in results.items()}}))
        raise typer.Exit(1 if failed else 0)
    for name, comparisons in results.items():
        for c in comparisons:
            out.print(_isa_table(name, c))
            if c.message:
                err.print(f"{project.display(file)}: {c.label}: does not compile: {c.message}", markup=False,
                          highlight=False)
    raise typer.Exit(1 if failed else 0)


def _isa_table(target: str, c) -> Table:  # noqa: ANN001 - transpile.verify.IsaComparison
    from transpile.isa import AmdFigures

    title = f"{target} {c.label}: {c.status}, {c.num_warps} warps"
    per_iteration = c.per_iteration
    if c.ratio is not None:
        title += (f"; hot loop {c.ratio:.2f}x the source's non-MFMA instructions per "
                  f"{'MFMA' if per_iteration is None else 'loop iteration'}")
    table = Table("", "source (Triton)", "variant", title=title, title_justify="left")
    figures = [f.as_dict() if f is not None else None for f in (c.source, c.variant)]
    amd = isinstance(c.source, AmdFigures) or isinstance(c.variant, AmdFigures)
    rows = (("vgprs", "VGPRs"), ("agprs", "AGPRs"), ("vgpr_spills", "spills (VGPR)"), ("scratch_bytes", "scratch bytes"),
            ("lds_bytes", "LDS bytes"), ("occupancy", "occupancy (waves/SIMD)")) if amd else (
        ("lds_bytes", "shared bytes"), ("wgmma", "wgmma"), ("wgmma_waits", "wgmma waits"), ("mma_sync", "mma.sync"),
        ("cp_async", "cp.async"), ("tma_loads", "TMA loads"), ("tma_stores", "TMA stores"),
        ("mbarrier_waits", "mbarrier waits"), ("barriers", "CTA barriers"))
    for key, label in rows:
        table.add_row(label, *("-" if f is None or f.get(key) is None else str(f[key]) for f in figures))
    if amd:
        loops = [f.get("hot_loop") if f is not None else None for f in figures]
        for key, label in (("instructions", "hot loop: instructions"), ("mma", "  MFMA/WMMA"),
                           ("mma_eq", "  MFMA work (16x16x32 units)"), ("lds_direct", "  direct-to-LDS copies"),
                           ("tensor_copies", "  TDM copies"), ("global_loads", "  loads into registers"),
                           ("ds_reads", "  LDS reads"), ("ds_writes", "  LDS writes"), ("waits", "  waits"),
                           ("barriers", "  barriers"), ("setprio", "  s_setprio"), ("valu", "  VALU"),
                           ("salu", "  SALU"), ("scratch", "  scratch"),
                           ("other_per_mma_eq", "  non-MFMA per 16x16x32 MFMA")):
            table.add_row(label, *("-" if loop is None else str(loop[key]) for loop in loops))
        if per_iteration is not None:
            table.add_row(f"  non-MFMA per iteration ({c.work:g} MFMA work)", *(str(x) for x in per_iteration))
    return table
