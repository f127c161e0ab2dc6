"""Compile emitted kernels with Triton for their target, on the CPU (no GPU needed).

Argument types and constexpr values come from, in order: the values the user gives (``NAME=VALUE``; types such as
``*fp16``/``i32``/``fp32`` for runtime arguments, Python literals for constexprs), the kernel's ``@triton.autotune``
configs (each config is compiled), the parameter's default. Runtime arguments the user does not type default to
``i32`` unless their name says they are pointers (``*_ptr``) or the kernel addresses memory from them (``X + cols``),
which must be typed. Anything still missing is a
TT030 error that names it.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import itertools
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr
from dataclasses import dataclass
from pathlib import Path

from transpile.analysis.launch_alignment import pointer_params
from transpile.blocks import kernel_block_texts
from transpile.diagnostics import Diagnostic, TranspileError
from transpile.discover import AutotuneConfig, JitFunction, ModuleFacts, discover
from transpile.engine import TranslationResult
from transpile.formatting import FormatStyle
from transpile.rules.base import evaluate, source_when_holds
from transpile.passes.host_descriptors import descriptor_rank, parts as _descriptor_names
from transpile.source import SourceFile, parse_source
from transpile.targets import Target

_counter = itertools.count()


@dataclass
class CompiledKernel:
    kernel: str
    config: str  # which autotune config (or "given values")
    ok: bool
    message: str  # "" or the compiler's first error line
    asm: dict[str, str]  # stage -> text (ttgir, llir, amdgcn/ptx) when ok
    shared: int | None = None  # bytes of shared memory (LDS) the compiled kernel takes, when ok
    kept: bool = False  # the variant keeps this kernel as Triton: compiled as a Triton kernel for the target
    # "compile"; "schedule": the schedule checker's run of a warp-pipelined loop; "not run": a kernel in a module-level
    # block whose test is false on this machine (`if has_triton():` without a GPU), not compiled (`message`: why)
    check: str = "compile"

    @property
    def label(self) -> str:
        return f"{self.kernel}[{self.config}]"


def parse_values(items: list[str]) -> dict[str, object]:
    """``["a_ptr=*fp16", "BLOCK=128"]`` -> ``{"a_ptr": "*fp16", "BLOCK": 128}``."""
    values: dict[str, object] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise TranspileError(Diagnostic("<command line>", 1, 1, "TT030", f"expected NAME=VALUE, got `{item}`"))
        try:
            values[name.strip()] = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            values[name.strip()] = text.strip()
    return values


def _dtype_value(value: object) -> object:
    """A constexpr given as a Triton element type (``tl.float32``, ``triton.language.int32``) as that type; any other
    value as it is."""
    if isinstance(value, str):
        prefix = next((p for p in ("tl.", "triton.language.", "gl.") if value.startswith(p)), None)
        if prefix is not None:
            import triton.language as tl  # (Triton is an optional dependency: imported where a compile needs it)

            dtype = getattr(tl, value[len(prefix):], None)
            if isinstance(dtype, tl.dtype):
                return dtype
    return value


def _is_pointer_name(name: str) -> bool:
    return name.endswith("ptr") or name.endswith("_ptr") or name.endswith("_base")


def _configs(fn: JitFunction) -> list[tuple[str, AutotuneConfig | None]]:
    if not fn.autotune_configs:
        return [("given values", None)]
    return [(f"config {i}", c) for i, c in enumerate(fn.autotune_configs)]


def _added_configs(module, name: str, known: int) -> list[tuple[str, AutotuneConfig | None]]:  # noqa: ANN001
    """The autotune configs the variant added after the source's `known` ones (a rule's own tile, listed in the
    variant's header), so that they are compiled too."""
    obj = getattr(module, name, None)
    for _ in range(8):  # (decorators of decorators: a few levels at most)
        if obj is None or isinstance(getattr(obj, "configs", None), list):
            break
        obj = getattr(obj, "fn", None)  # @triton.heuristics wraps the autotuner's function, or is wrapped by it
    if obj is None or not isinstance(getattr(obj, "configs", None), list) or not known:
        return []
    # (not the source twins a launcher adds, `_ConfigSplit`: they run the source kernel, compiled as such)
    return [(f"config {i} (added)", AutotuneConfig(dict(c.kwargs), c.num_warps, c.num_stages, None))  # type: ignore[arg-type]
            for i, c in enumerate(obj.configs) if i >= known and "_transpile_source" not in c.kwargs]


def kernel_signature(fn: JitFunction, config: AutotuneConfig | None, values: dict[str, object], path: str,
                     line: int, pointers: set[str] = frozenset()) -> tuple[dict[str, str], dict[str, object], int]:  # type: ignore[assignment]
    """Signature, constexpr values and num_warps for one compile of `fn`; TT030 names what is missing. `pointers`:
    parameters the kernel uses as address bases, which need a type whatever their names."""
    signature: dict[str, str] = {}
    constexprs: dict[str, object] = {}
    missing: list[str] = []
    config_values = config.values if config is not None else {}
    for param in fn.params:
        name = param.name
        if param.is_constexpr or name in fn.heuristics:
            signature[name] = "constexpr"
            if name in values:
                constexprs[name] = _dtype_value(values[name])
            elif name in config_values:
                constexprs[name] = config_values[name]
            elif param.default is not None:
                constexprs[name] = ast.literal_eval(param.default) if _literal(param.default) else param.default
            else:
                missing.append(f"constexpr `{name}`")
            continue
        if name in values:
            value = values[name]
            if isinstance(value, int) and not isinstance(value, bool):
                # An integer value, as a launch passes it: 1 is specialised into the kernel as a constant (Triton's
                # launcher does so for unit strides); any other is a runtime integer of its width.
                if value == 1:
                    signature[name], constexprs[name] = "constexpr", 1
                else:
                    signature[name] = "i32" if -2**31 <= value < 2**31 else "i64"
            else:
                signature[name] = str(value)
        elif descriptor_rank(fn.node, name) is not None:
            missing.append(f"tensor descriptor `{name}` (give its type, e.g. {name}=tensordesc<fp16[BLOCK_M,BLOCK_K]>)")
        elif _is_pointer_name(name) or name in pointers:
            missing.append(f"pointer `{name}` (give its type, e.g. {name}=*fp16)")
        else:
            signature[name] = "i32"
    for name, kind in signature.items():  # (a descriptor's block sizes given by constexpr names)
        signature[name] = _resolved_descriptor(kind, constexprs)
    if missing:
        raise TranspileError(Diagnostic(path, line, 1, "TT030",
                                        f"`{fn.name}`: no type or value for " + ", ".join(missing)))
    num_warps = int(values.get("num_warps", (config.num_warps if config and config.num_warps else 4)))  # type: ignore[arg-type]
    return signature, constexprs, num_warps


def _literal(text: str) -> bool:
    try:
        ast.literal_eval(text)
        return True
    except (ValueError, SyntaxError):
        return False


def load_variant(result: TranslationResult, directory: Path | None = None):  # noqa: ANN201 - a module
    """Import the variant's text as a module (from a real file: Triton reads kernel source through inspect)."""
    directory = directory or Path(tempfile.mkdtemp(prefix="transpile-verify-"))
    name = f"_transpile_variant_{next(_counter)}_{Path(result.source_path).stem}_{result.target.name}"
    path = directory / f"{name}.py"
    path.write_text(result.text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    # The variant sits next to its source when written: modules the source imports from its own directory
    # (`from combine_utils import add`) are found there, and those of its package (`from .utils import add`,
    # `from mylib.utils import add`) from the package's.
    package, root = package_of(Path(result.source_path))
    added = [d for d in (str(Path(result.source_path).resolve().parent), root) if d and d not in sys.path]
    sys.path[:0] = added
    if package:
        module.__package__ = package
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the variant's own import failed: report, do not crash
        raise TranspileError(Diagnostic(result.source_path, 1, 1, "TT032",
                                        f"the {result.target.name} variant does not import: {type(exc).__name__}: {exc}")
                             ) from None
    finally:
        for directory in added:
            sys.path.remove(directory)
    return module


def package_of(path: Path) -> tuple[str, str]:
    """The dotted package a source file is a module of, and the directory its top package sits in (("", "") outside
    any package): from the outermost directory above it holding an `__init__.py`, through namespace packages (a
    directory without one) below it."""
    directory = path.resolve().parent
    parts = directory.parts
    top = next((i for i in range(1, len(parts)) if (Path(*parts[:i + 1]) / "__init__.py").exists()), None)
    if top is None:
        return "", ""
    return ".".join(parts[top:]), str(Path(*parts[:top]))


#: a tensor descriptor's type in a signature, as Triton spells it: `tensordesc<fp16[128,64]>`
_DESCRIPTOR_TYPE = re.compile(r"tensordesc<([^\[>]+)\[([^\]]*)\]>")


def descriptor_parts(signature: dict[str, str], constexprs: dict[str, object]
                     ) -> tuple[dict[str, str], dict[str, object]]:
    """The signature and constexprs of a Gluon kernel that takes each tensor descriptor of `signature` (a host
    descriptor parameter, `tensordesc<fp16[128,64]>`) in parts (`transpile.passes.host_descriptors`): its base
    pointer, its shape and strides but the last (ints), its block shape (constexprs). Others are unchanged."""
    out_signature: dict[str, str] = {}
    out_constexprs = dict(constexprs)
    for name, kind in signature.items():
        found = _DESCRIPTOR_TYPE.fullmatch(kind.replace(" ", ""))
        if found is None:
            out_signature[name] = kind
            continue
        block = [int(n) for n in found.group(2).split(",")]
        shape, strides, blocks, base = _descriptor_names(name, len(block))
        out_signature[base] = f"*{found.group(1)}"
        out_signature.update({n: "i32" for n in (*shape, *strides)})
        for part, size in zip(blocks, block):
            out_signature[part], out_constexprs[part] = "constexpr", size
    return out_signature, out_constexprs


def _resolved_descriptor(kind: str, constexprs: dict[str, object]) -> str:
    """`tensordesc<fp16[BLOCK_M,BLOCK_K]>` with its block sizes' constexpr names replaced by their values."""
    found = _DESCRIPTOR_TYPE.fullmatch(kind.replace(" ", ""))
    if found is None:
        return kind
    sizes = [str(constexprs.get(n, n)) for n in found.group(2).split(",")]
    return f"tensordesc<{found.group(1)}[{','.join(sizes)}]>"


def compile_kernel(jit_fn, target: Target, signature: dict[str, str], constexprs: dict[str, object],  # noqa: ANN001
                   num_warps: int, triton_kernel: bool = False, divisible: tuple[str, ...] = (),
                   pointer_range: tuple[str, ...] = (), num_stages: int | None = None,
                   no_agprs: bool = False) -> tuple[bool, str, dict[str, str], int | None]:
    """Compile one kernel for `target`: a Gluon kernel, or (`triton_kernel`) a `@triton.jit` kernel the variant kept.
    `divisible`: parameters compiled as a launch compiles arguments that are multiples of 16 (ints) or 16-byte
    aligned (pointers); `pointer_range`: pointers a launch knows to address less than 2 GB (AMD's buffer
    operations need it); `num_stages`: Triton's pipeliner depth for a `@triton.jit` kernel (its default if None);
    `no_agprs`: accumulators in VGPRs only (AMD: how the variant's launcher runs a warp-pipelined kernel)."""
    import triton
    from triton.compiler import ASTSource
    from triton.experimental.gluon._runtime import GluonASTSource

    os.environ.setdefault("TRITON_ALWAYS_COMPILE", "1")
    from triton.runtime.jit import JITFunction

    fn = jit_fn
    heuristics: dict[str, object] = {}  # (constexprs a `@triton.heuristics` wrapper computes per launch)
    while not isinstance(fn, JITFunction):  # unwrap @triton.autotune / @triton.heuristics
        if type(fn).__name__ == "Heuristics":
            heuristics.update(fn.values)
        if type(fn).__name__ == "_MadeOnHost":  # (the launcher that makes a kernel's descriptors on the host)
            fn = fn.kernel
            continue
        if type(fn).__name__ == "_HostDescriptors":  # (the Gluon kernel takes the host's descriptors in parts)
            signature, constexprs = descriptor_parts(signature, constexprs)
            divisible = (*divisible, *(f"{name}_base" for name in fn.descriptors.names))  # (16-byte aligned)
        fn = fn.fn
    kind = ASTSource if triton_kernel else GluonASTSource
    # (parameters the variant added after the source's, defaulting to None: descriptors the launcher may make on the
    # host, `transpile.rules.host_made`, compiled as a launch that passes none)
    added = [p.name for p in fn.params if p.name not in signature and p.has_default and p.default is None]
    signature = {**signature, **{name: "constexpr" for name in added}}
    constexprs = {**constexprs, **{name: None for name in added}}
    # (a flag the variant added to a kernel kept as Triton, which its launch computes from run-time values,
    # `TILE_SCALED` of `transpile.passes.tile_scales`: compiled from the values given, else in the form it adds)
    for name, heuristic in heuristics.items():
        if name in fn.arg_names and name not in signature:
            try:
                value = heuristic(dict(constexprs))  # type: ignore[operator]
            except Exception:  # noqa: BLE001 - a run-time value it reads is not known here
                value = True
            signature, constexprs = {**signature, name: "constexpr"}, {**constexprs, name: value}
    attrs: dict[tuple[int], list[list[object]]] = {}
    # (names of the other form of a kernel taking host descriptors, whole or in parts, are not its parameters)
    for name in (n for n in divisible if n in fn.arg_names):
        attrs.setdefault((fn.arg_names.index(name),), []).append(["tt.divisibility", 16])
    for name in (n for n in pointer_range if n in fn.arg_names):
        attrs.setdefault((fn.arg_names.index(name),), []).append(["tt.pointer_range", 32])
    source = kind(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    options: dict[str, object] = {"num_warps": num_warps}
    if triton_kernel and num_stages is not None:
        options["num_stages"] = num_stages
    if no_agprs:
        options["llvm_fn_attrs"] = (("amdgpu-agpr-alloc", "0,0"),)
    with _stderr_captured() as captured:
        try:
            compiled = triton.compile(source, target=target.gpu_target(), options=options)
        except Exception as exc:  # compiler errors come in many types; report the innermost cause
            failure = exc
        else:
            failure = None
    if failure is not None:
        return False, _error_summary(failure, captured()), {}, None
    return True, "", {k: v for k, v in compiled.asm.items() if isinstance(v, str)}, int(compiled.metadata.shared)


@contextmanager
def _stderr_captured() -> Iterator:
    """Everything written to standard error inside the block, Python's and MLIR's (the pass manager prints its
    diagnostics to file descriptor 2 directly, then raises only "PassManager::run failed"): yields a function that
    returns it once the block has ended. Where descriptor 2 cannot be redirected, Python's writes only."""
    python, native = io.StringIO(), [""]
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        saved = None
    if saved is None:
        with redirect_stderr(python):
            yield python.getvalue
        return
    with tempfile.TemporaryFile(mode="w+b") as spool:
        os.dup2(spool.fileno(), 2)
        try:
            with redirect_stderr(python):
                yield lambda: python.getvalue() + native[0]
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            spool.seek(0)
            native[0] = spool.read().decode("utf-8", "replace")


def _error_summary(exc: BaseException, stderr: str) -> str:
    """The innermost cause of a compile failure, with the MLIR diagnostic when the pass manager printed one."""
    inner: BaseException = exc
    while inner.__cause__ is not None:
        inner = inner.__cause__
    message = f"{type(inner).__name__}: {str(inner).strip().splitlines()[-1] if str(inner).strip() else ''}"
    mlir = next((ln.strip() for ln in stderr.splitlines() if "error:" in ln), "")
    # `/tmp/.../_transpile_variant_0_k_sm90.py:103:9: error: ...`: the line of the variant (the file verify wrote)
    mlir = re.sub(r"^\S*_transpile_variant_\S*?\.py:(\d+):(\d+): ", r"variant line \1:\2: ", mlir)
    return (f"{message} [{mlir}]" if mlir else message)[:600]


def verify(result: TranslationResult, values: dict[str, object], all_configs: bool = True,
           source_configs: bool = True) -> list[CompiledKernel]:
    """Compile every kernel of a variant (each autotune config, or the first): translated kernels as Gluon, kernels
    the variant keeps as Triton as Triton kernels. A name the variant reads without defining it (`transpile.names`)
    is a failure of the function that reads it, found before compiling. Without `source_configs`, the source's own
    kernels in the variant (kept as Triton, a launcher's source twin) compile at the first config only: their text is
    the source's; the Gluon kernels and the K-major copies the variant makes (`_KMajorCopy`) compile at every one."""
    from transpile.names import undefined_names

    undefined = [CompiledKernel(u.function, "names", False, f"line {u.line}: `{u.name}` is not defined", {})
                 for u in undefined_names(result.text)]
    directory = Path(tempfile.mkdtemp(prefix="transpile-verify-"))
    try:
        compiled = _verify(result, values, all_configs, load_variant(result, directory), source_configs)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return undefined + compiled


def schedule_checks(result: TranslationResult) -> list[CompiledKernel]:
    """The schedule checker's verdict on each warp-pipelined kernel of an AMD variant (`transpile.schedule_check`):
    one passing row per kernel, or one failing row per finding."""
    from transpile.schedule_check import check_source

    report = check_source(result.text)
    rows = [CompiledKernel(f.kernel, "schedule", False, f"line {f.line}: {f.message} ({f.case})", {},
                           check="schedule") for f in report.findings]
    failed = {f.kernel for f in report.findings}
    rows += [CompiledKernel(kernel, f"schedule ({cases} cases)", True, "", {}, check="schedule")
             for kernel, cases in report.cases.items() if kernel not in failed]
    return rows


def _kernel_facts(result: TranslationResult) -> dict[str, tuple[SourceFile, ModuleFacts, JitFunction]]:
    """Each jit function of the source by name, with the source and facts it was read from: the module's, or those of
    the module-level block it stands in (`transpile.blocks`)."""
    source = parse_source(result.original_text, result.source_path)
    facts = discover(source)
    found = {name: (source, facts, fn) for name, fn in facts.functions.items()}
    for block in kernel_block_texts(source):
        block_source = parse_source(block.text, result.source_path, block.lines)
        block_facts = discover(block_source)
        found.update({name: (block_source, block_facts, fn) for name, fn in block_facts.functions.items()
                      if name not in found})
    return found


def _not_defined(source: SourceFile, fn: JitFunction) -> str:
    """Why the imported variant has no `fn`: it stands in a module-level block that did not run here."""
    return (f"`{fn.name}` (line {source.position(fn.node.name)[0]}) stands in a module-level block that did not run "
            "when the variant was imported here (its test is false on this machine)")


def _verify(result: TranslationResult, values: dict[str, object], all_configs: bool, module,  # noqa: ANN001
            source_configs: bool = True) -> list[CompiledKernel]:
    kernels = _kernel_facts(result)
    outcomes: list[CompiledKernel] = []
    seen: set[str] = set()
    for outcome in result.functions:
        if outcome.is_helper:
            continue
        if outcome.name not in kernels:  # (a kernel under a module-level block, kept as written: TT007)
            continue
        source, facts, fn = kernels[outcome.name]
        if outcome.name in seen:
            continue  # (a kernel of one name in two branches of a module-level `if`: the one that ran is compiled)
        seen.add(outcome.name)
        if not hasattr(module, outcome.name):
            outcomes.append(CompiledKernel(outcome.name, "given values", True, _not_defined(source, fn), {},
                                           check="not run"))
            continue
        configs = _configs(fn) + _added_configs(module, outcome.name, len(fn.autotune_configs))
        configs = configs if all_configs else configs[:1]
        line = source.position(fn.node.name)[0]
        pointers = pointer_params(facts, fn)
        for position, (label, config) in enumerate(configs):
            kept = not outcome.translated
            kernel = getattr(module, outcome.name)
            if kept and position and not source_configs and not hasattr(kernel, "kmajor_kernel"):
                continue  # (the source's text: compiled at its first config; a K-major copy is the tool's, at each)
            signature, constexprs, num_warps = kernel_signature(fn, config, values, result.source_path, line,
                                                                pointers)
            # (what the launcher's tests read: host descriptors in the parts the Gluon kernel takes)
            parts = descriptor_parts(signature, constexprs)
            if hasattr(kernel, "kmajor_kernel"):  # sm90 `_KMajorCopy`: the kernel as given, and its K-major launch
                kmajor, kernel = kernel, kernel.kernel
                k_signature, k_constexprs = dict(signature), dict(constexprs)
                k_signature[kmajor.k_stride], k_constexprs[kmajor.k_stride] = "constexpr", 1
                k_signature[kmajor.n_stride or kmajor.added] = "i32"
                k_constexprs.pop(kmajor.n_stride or kmajor.added, None)
                ok, message, asm, shared = compile_kernel(kmajor.kmajor_kernel, result.target, k_signature,
                                                          k_constexprs, num_warps, triton_kernel=True)
                outcomes.append(CompiledKernel(outcome.name, f"{label} (K-major copy of `{kmajor.operand}`)", ok,
                                               message, asm, shared, True))
            other = _other_warps(outcome, values)
            if other is not None and _runs_source_at_other_warps(outcome):
                # What a launch at the user's warps runs: the source kernel (the launcher's choice), said so.
                ok, message, asm, shared = compile_kernel(kernel.triton_kernel, result.target, signature, constexprs,
                                                          other, triton_kernel=True)
                outcomes.append(CompiledKernel(
                    f"_{outcome.name}_triton", f"{label} (num_warps={other}: the launcher runs the source kernel; "
                    f"the Gluon kernel runs at {outcome.num_warps} only)", ok, message, asm, shared, True))
                continue
            if other is not None:
                wrong = _wrong_warps(outcome, other, bool(fn.autotune_configs))
                outcomes.append(CompiledKernel(outcome.name, label, False, wrong, {}))
                continue
            when = _source_tests(outcome, {**parts[1], **_tensors(parts[0]), "num_warps": num_warps})
            if when:  # a launch (or config) the launcher, or the autotuner's split, runs on the source kernel (both
                # compile below: the Gluon kernel's code for these values too)
                label += f" (`{when[0]}`: the source kernel runs it)"
            if not kept:
                num_warps = outcome.num_warps or num_warps  # the variant's autotune configs say so too
            if outcome.dispatch is not None and not kept:  # the launcher: its Gluon kernel, then the source's copy
                if "(added)" not in label and (source_configs or not position or when):
                    # (the source's copy keeps the source's autotune table: the configs the variant added are the
                    # Gluon kernel's alone; a config the launcher gives the source kernel compiles it in any case)
                    ok, message, asm, shared = compile_kernel(kernel.triton_kernel, result.target, signature,
                                                              constexprs, num_warps, triton_kernel=True)
                    outcomes.append(CompiledKernel(f"_{outcome.name}_triton", label, ok, message, asm, shared, True))
                kernel = kernel.gluon_kernel
                retile = outcome.dispatch.retile
                if retile is not None and constexprs.get(retile[0]) == retile[1] and num_warps != retile[2]:
                    num_warps = retile[2]  # what the launcher runs such a launch at (`Dispatch.retile`)
                    label += f" (`{retile[0]}` = {retile[1]}: the launcher runs it at num_warps={num_warps})"
            divisible: tuple[str, ...] = ()
            if outcome.dispatch is not None and outcome.dispatch.aligned and not kept:
                # The launcher runs the Gluon kernel only for launches with aligned tensors, the `divisible` ints
                # multiples of 16 and the `unit` ones 1: compile it as Triton specialises such a launch.
                label += " (aligned launch)"
                for name in outcome.dispatch.unit:
                    signature[name], constexprs[name] = "constexpr", 1
                divisible = (*[n for n, t in signature.items() if t.startswith("*")], *outcome.dispatch.divisible)
            ok, message, asm, shared = compile_kernel(
                kernel, result.target, signature, constexprs, num_warps, triton_kernel=kept, divisible=divisible,
                no_agprs=bool(outcome.dispatch is not None and outcome.dispatch.no_agprs and not kept))
            if not ok and "(added)" in label and "CompileTimeAssertionFailure" in message:
                # a config the variant added for other values (the three-consumer attention's 192 rows, for head
                # dimensions up to 64): its compile-time assertion makes the autotuner skip it, as Triton's does
                outcomes.append(CompiledKernel(outcome.name, label, True, "the autotuner skips this config at these "
                                               f"values ({message})", {}, None, kept, check="not run"))
                continue
            if not ok and when and not kept:
                # a launch the launcher gives the source kernel (compiled above) for a reason of this kind: the Gluon
                # kernel's copies need these values (an inner stride of 1) and never run with others
                outcomes.append(CompiledKernel(outcome.name, label, True, "the launcher runs the source kernel at "
                                               f"these values; its Gluon kernel does not compile for them ({message})",
                                               {}, None, kept, check="not run"))
                continue
            outcomes.append(CompiledKernel(outcome.name, label, ok, message, asm, shared, kept))
            made = getattr(getattr(module, outcome.name), "made", None)
            if ok and not kept and made is not None:
                # the same launch with the descriptors the launcher makes on the host (`transpile.rules.host_made`)
                host_signature, host_constexprs = _host_made(made, signature, constexprs)
                ok, message, asm, shared = compile_kernel(
                    kernel, result.target, host_signature, host_constexprs, num_warps, divisible=divisible,
                    no_agprs=bool(outcome.dispatch is not None and outcome.dispatch.no_agprs))
                outcomes.append(CompiledKernel(outcome.name, f"{label} (descriptors made on the host)", ok, message,
                                               asm, shared, kept))
    return outcomes


def _host_made(made, signature: dict[str, str], constexprs: dict[str, object]  # noqa: ANN001 - `_HostMade`
               ) -> tuple[dict[str, str], dict[str, object]]:
    """The signature and constexprs of a launch that passes the descriptors `made` (the variant's `_HostMade`)
    makes: each a `tensordesc<fp16[128,64],NVMMASharedLayout(...)>` of its base's element type, its block from the
    constexprs and the layout the launcher gives it."""
    from triton.experimental.gluon import language as gl

    signature, constexprs = dict(signature), dict(constexprs)
    for name, base, parts, names in made.made:
        kind = signature.get(base, "")
        if not kind.startswith("*"):
            continue
        # (the block shape reads constexprs only; the shape and strides, runtime values, any positive number)
        _, _, block = parts(**{n: constexprs[n] if isinstance(constexprs.get(n), int) else 16 for n in names})
        layout = gl.NVMMASharedLayout.get_default_for(list(block), gl.dtype(kind[1:]))
        signature[name] = f"tensordesc<{kind[1:]}[{','.join(map(str, block))}],{layout!r}>"
        constexprs.pop(name, None)
    return signature, constexprs


def _other_warps(outcome, values: dict[str, object]) -> int | None:  # noqa: ANN001 - outcomes.KernelOutcome
    """The user's `num_warps` (`-v num_warps=4`) where the variant's Gluon kernel runs at other warps only (AMD's
    warp-pipelined loops: 8), else None. Never replaced by the kernel's: a launch at the user's warps runs what the
    launcher gives it, or fails."""
    if not outcome.translated or not outcome.num_warps or "num_warps" not in values:
        return None
    try:
        warps = int(values["num_warps"])  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None
    return warps if warps != outcome.num_warps else None


def _runs_source_at_other_warps(outcome) -> bool:  # noqa: ANN001 - outcomes.KernelOutcome
    """Whether the variant's launcher runs the source kernel for launches at other warps than the Gluon kernel's."""
    return outcome.dispatch is not None and outcome.dispatch.warps == outcome.num_warps


def _wrong_warps(outcome, warps: int, autotuned: bool) -> str:  # noqa: ANN001 - outcomes.KernelOutcome
    how = (f"its autotune configs launch it with {outcome.num_warps}" if autotuned
           else f"it asserts `num_warps() == {outcome.num_warps}`")
    return (f"the variant's kernel runs at num_warps={outcome.num_warps} only ({how}): num_warps={warps} is not a "
            "launch of it")


def verify_file(path: Path, target: Target, values: dict[str, object], display: str, all_configs: bool = True,
                gluon_always: bool = False, style: FormatStyle | None = None) -> list[CompiledKernel]:
    """Translate `path` for `target` and compile the variant as the command line writes it (formatted at `style`;
    left as translated where ruff is missing or fails: the code compiled is the same), then run the schedule checker
    over its warp-pipelined loops."""
    from transpile.engine import format_results, translate_file

    result = translate_file(path, target, display, gluon_always=gluon_always)
    format_results([result], style)
    return verify(result, values, all_configs) + schedule_checks(result)


@dataclass
class IsaComparison:
    """One kernel and config compiled twice for an AMD target or sm90, as a launch specialises it: the source
    `@triton.jit` kernel and the variant's kernel, with the same argument types, constexprs and warps."""

    kernel: str
    config: str
    num_warps: int
    status: str  # the variant's: "pipelined", "translated" or "kept as Triton"
    source: object | None  # transpile.isa.AmdFigures | PtxFigures; None where the compile failed
    variant: object | None
    message: str = ""  # the first compile error, where one failed
    # The matrix work one iteration of the kernel's dot loop asks of a warp, in 16x16x32 MFMAs, from the dots'
    # shapes at this launch (None where they are not known): what the ratio is taken per, where a compile issues
    # more MFMA work than that (rows replicated across warps) or unrolls the loop
    work: float | None = None

    @property
    def label(self) -> str:
        return f"{self.kernel}[{self.config}]"

    @property
    def ratio(self) -> float | None:
        """The variant's hot-loop overhead over the source's (AMD): non-MFMA instructions per MFMA of work, or, where
        the loop's useful work is known (`work`), per loop iteration. The two agree unless a compile replicates MFMAs
        (Triton's own attention at 16 rows a warp issues 32-row MFMAs: 1.5x the work), where the first would count
        the replicated MFMAs as work done."""
        from transpile.isa import AmdFigures

        if not isinstance(self.source, AmdFigures) or not isinstance(self.variant, AmdFigures):
            return None
        if self.source.loop is None or self.variant.loop is None:
            return None
        src, var = self.source.loop.other_per_mma_eq, self.variant.loop.other_per_mma_eq
        if not src or var is None:
            return None
        per_iteration = self.per_iteration
        if per_iteration is not None:
            return round(per_iteration[1] / per_iteration[0], 2)
        return round(var / src, 2)

    @property
    def per_iteration(self) -> tuple[float, float] | None:
        """Non-MFMA instructions per iteration of the dot loop (source, variant), where the work of an iteration is
        known: a hot loop's iterations are its MFMA work over that (rounded down for the source: rows it replicates
        are not iterations; Triton does not unroll the loop), else None."""
        from transpile.isa import AmdFigures

        if not self.work or not isinstance(self.source, AmdFigures) or not isinstance(self.variant, AmdFigures) \
                or self.source.loop is None or self.variant.loop is None:
            return None
        figures = []
        for loop, variant in ((self.source.loop, False), (self.variant.loop, True)):
            share = loop.mma_eq / self.work
            iterations = int(share + 1e-6)
            if iterations < 1 or (variant and abs(share - round(share)) > 0.05):
                return None  # (not the loop the work was read from, or a variant that replicates: per MFMA)
            figures.append(round((loop.instructions - loop.mma) / iterations, 1))
        return figures[0], figures[1]

    def as_dict(self) -> dict[str, object]:
        per_iteration = self.per_iteration
        return {"kernel": self.kernel, "config": self.config, "num_warps": self.num_warps, "status": self.status,
                "source": None if self.source is None else self.source.as_dict(),  # type: ignore[attr-defined]
                "variant": None if self.variant is None else self.variant.as_dict(),  # type: ignore[attr-defined]
                "work_per_iteration": self.work,
                "other_per_iteration": None if per_iteration is None else list(per_iteration),
                "ratio": self.ratio, "message": self.message}


def _source_tests(outcome, constexprs: dict[str, object]) -> list[str]:  # noqa: ANN001 - outcomes.KernelOutcome
    """The tests of a translated kernel's `Dispatch.source_when` that hold at these constexprs: a launch for which any
    does runs the source kernel."""
    if outcome.dispatch is None or not outcome.translated:
        return []
    return [test for test, names in outcome.dispatch.source_when if _test_holds(test, names, constexprs)]


class _TensorType:
    """What a launcher's test reads of a tensor argument (`A.dtype != B.dtype`): its element type, here the
    signature's name of it (`bf16`)."""

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype


def _tensors(signature: dict[str, str]) -> dict[str, _TensorType]:
    """Stand-ins for the pointer arguments of a launch of this signature (`*bf16`), for the launcher's tests."""
    return {name: _TensorType(kind[1:]) for name, kind in signature.items() if kind.startswith("*")}


def _test_holds(test: str, names: tuple, constexprs: dict[str, object]) -> bool:
    """Whether a `Dispatch.source_when` test holds at these constexprs (their defaults where not given), as the
    launcher's test (a function with those defaults) decides."""
    values = dict(constexprs)
    for name, default in names:
        if name not in values and default is not None:
            values[name] = ast.literal_eval(default) if _literal(default) else default
    return source_when_holds(test, names, values)


def _loop_work(outcome, constexprs: dict[str, object], num_warps: int) -> float | None:  # noqa: ANN001
    """The matrix work of one iteration of the kernel's pipelined loop, per warp, in 16x16x32 MFMAs (M x N x K of each
    dot of the loop, from the stage plan the variant was emitted from, at these constexprs), or None where a size is
    not known or no loop was pipelined (AMD)."""

    def size(text: str | None) -> int | None:
        value = evaluate(text, constexprs) if text is not None else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    best = None
    for schedule in outcome.schedules:
        total = 0
        for shape in getattr(schedule, "dot_shapes", None) or []:
            m, n, k = (size(d) for d in shape)
            if m is None or n is None or k is None:
                total = 0
                break
            total += m * n * k
        if total and (best is None or total > best):
            best = total
    return best / (num_warps * 16 * 16 * 32) if best else None


def _figures(target: Target, asm: dict[str, str], shared: int | None):  # noqa: ANN202
    from transpile.isa import amd_figures, ptx_figures

    if target.backend == "hip":
        return amd_figures(asm.get("amdgcn", ""), shared)
    return ptx_figures(asm.get("ptx", ""), lds_bytes=shared)


def isa_compare(result: TranslationResult, values: dict[str, object], all_configs: bool = True,
                aligned: bool = True) -> list[IsaComparison]:
    """Compile every kernel of the variant and its source kernel for the variant's target and compare their machine
    code. Both compile as one launch specialises them: with `aligned`, every pointer 16-byte aligned (and, on AMD,
    addressing less than 2 GB, which lets buffer operations apply) and every runtime integer a multiple of 16, as for
    large aligned tensors; integers given as 1 (`-v stride_ak=1`) are constants. The source compiles at the
    variant's warps (a warp-pipelined AMD loop launches with 8: the variant's launch) and the config's `num_stages`,
    else Triton's default."""
    directory = Path(tempfile.mkdtemp(prefix="transpile-isa-"))
    try:
        variant = load_variant(result, directory)
        original = load_variant(TranslationResult(result.source_path, result.target, result.original_text, [],
                                                  result.source_sha256, result.original_text), directory)
        return _isa_compare(result, values, all_configs, aligned, variant, original)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


#: Triton's names of element types -> torch's (`Dispatch.slow_dtypes` holds torch's)
_TORCH_NAMES = {"fp8e4nv": "float8_e4m3fn", "fp8e5": "float8_e5m2", "fp8e4b8": "float8_e4m3fnuz",
                "fp8e5b16": "float8_e5m2fnuz", "i8": "int8", "u8": "uint8", "fp16": "float16", "bf16": "bfloat16",
                "fp32": "float32"}


_BITS = {"fp8": 8, "bf8": 8, "i8": 8, "u8": 8, "fp16": 16, "bf16": 16, "i16": 16, "u16": 16, "fp32": 32,
         "i32": 32, "u32": 32, "tf32": 32, "fp64": 64, "i64": 64, "u64": 64}


def _ring_bytes(lds: tuple, signature: dict[str, str], constexprs: dict[str, object]) -> int | None:
    """One slot of each ring of `Dispatch.lds` at a launch of this signature and these constexprs, in bytes, as the
    launcher computes it; None where a block size or an element type is not known here."""
    total = 0
    for shape, pointer in lds[1]:
        sizes = [constexprs.get(n) if isinstance(n, str) else n for n in shape]
        kind = signature.get(pointer, "").lstrip("*")
        bits = next((b for prefix, b in _BITS.items() if kind.startswith(prefix)), None)
        if bits is None or not all(isinstance(n, int) and not isinstance(n, bool) for n in sizes):
            return None
        elements = 1
        for n in sizes:
            elements *= n  # type: ignore[operator]
        total += elements * bits // 8
    return total


def _isa_compare(result: TranslationResult, values: dict[str, object], all_configs: bool, aligned: bool,
                 module, original) -> list[IsaComparison]:  # noqa: ANN001
    kernels = _kernel_facts(result)
    comparisons: list[IsaComparison] = []
    seen: set[str] = set()
    for outcome in result.functions:
        if outcome.is_helper or outcome.name in seen:
            continue
        seen.add(outcome.name)
        if outcome.name not in kernels:  # (a kernel under a module-level block, kept as written: TT007)
            continue
        source, facts, fn = kernels[outcome.name]
        if not hasattr(module, outcome.name):  # (its block did not run here: the compile rows say so)
            continue
        configs = _configs(fn) + _added_configs(module, outcome.name, len(fn.autotune_configs))
        configs = configs if all_configs else configs[:1]
        line = source.position(fn.node.name)[0]
        pointers = pointer_params(facts, fn)
        for label, config in configs:
            signature, constexprs, num_warps = kernel_signature(fn, config, values, result.source_path, line,
                                                                pointers)
            # (what the launcher's tests read: host descriptors in the parts the Gluon kernel takes)
            parts = descriptor_parts(signature, constexprs)
            status = outcome.status
            gluon = outcome.translated
            other = _other_warps(outcome, values)
            wrong = ""
            if other is not None and _runs_source_at_other_warps(outcome):
                gluon = False  # a launch the launcher gives the source kernel: that is the variant
                status = (f"source kernel at this launch (num_warps={other}; the Gluon kernel runs at "
                          f"{outcome.num_warps})")
            elif other is not None:
                wrong = _wrong_warps(outcome, other, bool(fn.autotune_configs))
            elif outcome.translated and outcome.num_warps:
                num_warps = outcome.num_warps
            if outcome.dispatch is not None and outcome.translated:
                # the launches the variant's launcher runs as Gluon have these strides 1: both compile so
                for name in outcome.dispatch.unit:
                    if name not in values:
                        signature[name], constexprs[name] = "constexpr", 1
                    elif values[name] != 1:  # a launch the launcher gives the source kernel: that is the variant
                        gluon = False
                        status = f"source kernel at this launch (`{name}` is not 1)"
            kinds = outcome.dispatch.slow_dtypes if outcome.dispatch is not None and outcome.translated else ()
            slow = [t for n, t in signature.items() if t.startswith("*") and (
                _TORCH_NAMES.get(t[1:]) in kinds or f"{n}={_TORCH_NAMES.get(t[1:])}" in kinds)]
            if slow and gluon:  # a launch the launcher gives the source kernel: that is the variant
                gluon = False
                status = f"source kernel at this launch (`{slow[0][1:]}` tensors)"
            need = _ring_bytes(outcome.dispatch.lds, *parts) \
                if outcome.dispatch is not None and outcome.dispatch.lds and outcome.translated else None
            least = outcome.dispatch.lds[2] if need is not None and len(outcome.dispatch.lds) > 2 else 2  # type: ignore
            if need is not None and least * need > outcome.dispatch.lds[0] and gluon:  # type: ignore[union-attr]
                gluon = False  # (the launcher gives it the source kernel)
                status = (f"source kernel at this launch ({('two', 'three')[least - 2]} ring slots need "
                          f"{least * need // 1024} KiB of LDS, "
                          f"{result.target.name} has {outcome.dispatch.lds[0] // 1024})")  # type: ignore[union-attr]
            when = _source_tests(outcome, {**parts[1], **_tensors(parts[0]), "num_warps": num_warps})
            if when and gluon:  # (the launcher, or the autotuner's split, gives it the source kernel)
                gluon = False
                status = f"source kernel at this launch (`{when[0]}`)"
                num_warps = config.num_warps if config is not None and config.num_warps else num_warps
            # (a host descriptor's parts too: the Gluon kernel's own parameters, `compile_kernel`)
            both = {**signature, **parts[0]}
            ptrs = tuple(n for n, t in both.items() if t.startswith("*")) if aligned else ()
            ints = tuple(n for n, t in both.items() if re.fullmatch(r"[iu](32|64)", t)) if aligned else ()
            in_range = ptrs if result.target.backend == "hip" else ()
            stages = config.num_stages if config is not None and config.num_stages else None
            kernel = getattr(module, outcome.name)
            if hasattr(kernel, "kmajor_kernel"):  # sm90 `_KMajorCopy`: the kernel as given
                kernel = kernel.kernel
            if outcome.dispatch is not None and outcome.translated:
                kernel = kernel.gluon_kernel
            figures: list[object | None] = []
            message = ""
            no_agprs = bool(outcome.dispatch is not None and outcome.dispatch.no_agprs and gluon)
            if not gluon and outcome.translated:
                # (the variant's copy of the source kernel, which its launcher runs: the source's own where it has
                # none, or one the tool rewrote, a per-column scale read once per tile)
                kernel = getattr(module, f"_{outcome.name}_triton", None) or getattr(original, outcome.name)
            for jit_fn, as_triton in ((getattr(original, outcome.name), True), (kernel, not gluon)):
                if wrong and not as_triton:
                    figures.append(None)
                    message = message or f"variant: {wrong}"
                    continue
                ok, error, asm, shared = compile_kernel(jit_fn, result.target, dict(signature), dict(constexprs),
                                                        num_warps, triton_kernel=as_triton, divisible=ptrs + ints,
                                                        pointer_range=in_range, num_stages=stages,
                                                        no_agprs=no_agprs and not as_triton)
                figures.append(_figures(result.target, asm, shared) if ok else None)
                if not ok and not message:
                    message = f"{'source' if len(figures) == 1 else 'variant'}: {error}"
            limit = result.target.shared_memory_bytes
            source_lds = getattr(figures[0], "lds_bytes", None)
            if result.target.backend == "hip" and source_lds is not None and source_lds > limit:
                # (Triton's launcher refuses it on the device: the comparison says nothing about a launch)
                status = f"{status}; the source needs {source_lds} bytes of LDS, more than the {limit} it has"
            comparisons.append(IsaComparison(outcome.name, label, num_warps, status, figures[0], figures[1],
                                             message, _loop_work(outcome, constexprs, num_warps)))
    return comparisons


def isa_compare_file(path: Path, target: Target, values: dict[str, object], display: str, all_configs: bool = True,
                     gluon_always: bool = False, aligned: bool = True) -> list[IsaComparison]:
    """Translate `path` for `target` and compare each kernel's machine code with its source's (`isa_compare`)."""
    from transpile.engine import translate_file

    result = translate_file(path, target, display, gluon_always=gluon_always)
    return isa_compare(result, values, all_configs, aligned)
