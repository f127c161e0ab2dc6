"""Discovery: which functions of a module are Triton kernels, whatever the import spelling.

Names are resolved through libcst's QualifiedNameProvider, so ``@triton.jit``, ``@jit`` after ``from triton import
jit``, ``tl.load`` and ``T.load`` after ``from triton import language as T`` are all recognised the same way.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

import libcst as cst

from transpile import cst_walk
from transpile.cst_utils import calls_in
from transpile.source import SourceFile

TRITON_JIT = "triton.jit"
TRITON_AUTOTUNE = "triton.autotune"
TRITON_HEURISTICS = "triton.heuristics"
TRITON_CONFIG = "triton.Config"
LANGUAGE_PREFIXES = ("triton.language.",)


def language_name(qualified: str | None) -> str | None:
    """``triton.language.math.exp`` -> ``math.exp``; None when the name is not from triton.language."""
    if qualified is None:
        return None
    for prefix in LANGUAGE_PREFIXES:
        if qualified.startswith(prefix):
            return qualified[len(prefix) :]
    return None


@dataclass
class Param:
    name: str
    is_constexpr: bool
    default: str | None  # source text of the default value
    node: cst.Param = field(repr=False)


@dataclass
class AutotuneConfig:
    """One ``triton.Config``: constexpr values (literals only) and launch options."""

    values: dict[str, object]
    num_warps: int | None
    num_stages: int | None
    node: cst.Call = field(repr=False)


@dataclass
class JitFunction:
    """A ``@triton.jit`` function with what its decorators say about it."""

    name: str
    node: cst.FunctionDef = field(repr=False)
    params: list[Param]
    jit_decorator: cst.Decorator | None = field(repr=False)  # None: made jit by a call (`f = triton.jit(f)`)
    autotune_configs: list[AutotuneConfig]
    autotune_keys: list[str]
    heuristics: list[str]  # constexpr names computed by @triton.heuristics
    called_by: set[str] = field(default_factory=set)  # other jit functions of the file that call this one
    # the `num_stages` every launch of the file passes (`kernel[grid](..., num_stages=4)`, a literal), where it has
    # launches and they agree: the ring depth a kernel without autotune configs asks for
    launch_stages: int | None = None

    @property
    def is_helper(self) -> bool:
        """A jit function other jit functions call; a kernel is launched from the host."""
        return bool(self.called_by)

    @property
    def num_stages(self) -> int | None:
        """The `num_stages` of the first autotune config that gives one (the ring depth the source asks for)."""
        return next((c.num_stages for c in self.autotune_configs if c.num_stages), None)

    @property
    def constexpr_names(self) -> list[str]:
        return [p.name for p in self.params if p.is_constexpr]


@dataclass
class ModuleFacts:
    source: SourceFile
    functions: dict[str, JitFunction]  # in file order
    # Module-level names bound once to a jit function (`act = _relu_squared`): a call `act(x)` calls that helper.
    aliases: dict[str, str] = field(default_factory=dict)
    # `f = triton.jit(f)` statements (the call form of the decorator), with the function they make jit.
    jit_statements: dict[cst.SimpleStatementLine, str] = field(default_factory=dict)
    # Names bound to one of several jit functions under a module-level `if`/`try`/`with` (`_chosen_aliases`).
    chosen: dict[str, set[str]] = field(default_factory=dict)
    # Target-independent analyses of this file, made once and shared by every target (`dot_loops`).
    memo: dict = field(default_factory=dict, repr=False, compare=False)

    def callee(self, func: cst.BaseExpression) -> str | None:
        """The jit function of this file that a call of `func` runs (through an alias too), else None."""
        if not isinstance(func, cst.Name):
            return None
        name = self.aliases.get(func.value, func.value)
        return name if name in self.functions else None

    @property
    def kernels(self) -> list[JitFunction]:
        return [f for f in self.functions.values() if not f.is_helper]

    @property
    def helpers(self) -> list[JitFunction]:
        return [f for f in self.functions.values() if f.is_helper]


def language_alias(source: SourceFile, fn: cst.FunctionDef) -> str:
    """The name the function calls triton.language by (`tl` in `tl.dot`), or "" when it uses none."""
    for call in calls_in(fn):
        func = call.func
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and \
                language_name(source.qualified_name(func)) is not None:
            return func.value.value
    return ""


def decorator_target(decorator: cst.Decorator) -> cst.BaseExpression:
    dec = decorator.decorator
    return dec.func if isinstance(dec, cst.Call) else dec


def _literal(source: SourceFile, node: cst.BaseExpression) -> object:
    try:
        return ast.literal_eval(source.code(node).strip())
    except (ValueError, SyntaxError):
        return None


def _autotune(source: SourceFile, call: cst.Call) -> tuple[list[AutotuneConfig], list[str]]:
    configs: list[AutotuneConfig] = []
    keys: list[str] = []
    for arg in call.args:
        name = arg.keyword.value if arg.keyword else None
        if name == "key" or (name is None and configs and not keys):
            value = _literal(source, arg.value)
            if isinstance(value, (list, tuple)):
                keys = [str(k) for k in value]
            continue
        if name not in (None, "configs") or not isinstance(arg.value, (cst.List, cst.Tuple)):
            continue
        for element in arg.value.elements:
            config = element.value
            if not isinstance(config, cst.Call) or source.qualified_name(config.func) != TRITON_CONFIG:
                continue
            values: dict[str, object] = {}
            num_warps = num_stages = None
            for i, carg in enumerate(config.args):
                key = carg.keyword.value if carg.keyword else None
                if (key == "kwargs" or (key is None and i == 0)) and isinstance(carg.value, cst.Dict):
                    for entry in carg.value.elements:
                        if isinstance(entry, cst.DictElement):
                            k = _literal(source, entry.key)
                            if isinstance(k, str):
                                values[k] = _literal(source, entry.value)
                elif key == "num_warps" or (key is None and i == 1):
                    num_warps = _literal(source, carg.value)  # type: ignore[assignment]
                elif key == "num_stages" or (key is None and i == 2):
                    num_stages = _literal(source, carg.value)  # type: ignore[assignment]
            configs.append(AutotuneConfig(values, num_warps, num_stages, config))
    return configs, keys


def _heuristics(source: SourceFile, call: cst.Call) -> list[str]:
    names: list[str] = []
    for arg in call.args:
        if isinstance(arg.value, cst.Dict):
            for entry in arg.value.elements:
                if isinstance(entry, cst.DictElement):
                    key = _literal(source, entry.key)
                    if isinstance(key, str):
                        names.append(key)
    return names


def _params(source: SourceFile, fn: cst.FunctionDef) -> list[Param]:
    params: list[Param] = []
    for p in [*fn.params.posonly_params, *fn.params.params, *fn.params.kwonly_params]:
        is_constexpr = False
        if p.annotation is not None:
            ann = p.annotation.annotation
            qn = source.qualified_name(ann)
            is_constexpr = qn in ("triton.language.constexpr", "triton.language.core.constexpr") or (
                isinstance(ann, (cst.Attribute, cst.Name)) and source.code(ann).endswith("constexpr")
            )
        default = source.code(p.default).strip() if p.default is not None else None
        params.append(Param(p.name.value, is_constexpr, default, p))
    return params


def _call_forms(source: SourceFile) -> dict[str, dict[str, object]]:
    """Decorators applied as calls at module level, after the function: `f = triton.jit(f)`,
    `f = triton.heuristics({...})(f)`, `f = triton.autotune(...)(f)` (unsloth's and ml-cross-entropy's style). Per
    function name: "jit" (the statement), "heuristics", "autotune" (the decorator calls)."""
    found: dict[str, dict[str, object]] = {}
    for statement in source.module.body:
        if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
                and isinstance(statement.body[0], cst.Assign) and len(statement.body[0].targets) == 1):
            continue
        target, value = statement.body[0].targets[0].target, statement.body[0].value
        if not (isinstance(target, cst.Name) and isinstance(value, cst.Call) and len(value.args) == 1
                and isinstance(value.args[0].value, cst.Name) and value.args[0].value.value == target.value):
            continue
        entry = found.setdefault(target.value, {})
        if source.qualified_name(value.func) == TRITON_JIT:
            entry["jit"] = statement
        elif isinstance(value.func, cst.Call):
            qn = source.qualified_name(value.func.func)
            if qn == TRITON_HEURISTICS:
                entry["heuristics"] = value.func
            elif qn == TRITON_AUTOTUNE:
                entry["autotune"] = value.func
    return {name: entry for name, entry in found.items() if "jit" in entry}


def nested_kernels(source: SourceFile) -> list[tuple[cst.FunctionDef, cst.CSTNode]]:
    """@triton.jit functions defined below module level, each with the statement that holds it (an `if`, `try`,
    `with` or `for` block, a function or a class): `discover` reads module-level definitions only."""
    found: list[tuple[cst.FunctionDef, cst.CSTNode]] = []

    def visit(node: cst.CSTNode, holder: cst.CSTNode | None) -> None:
        for child in node.children:
            if isinstance(child, cst.FunctionDef):
                if holder is not None and any(source.qualified_name(decorator_target(d)) == TRITON_JIT
                                              for d in child.decorators):
                    found.append((child, holder))
                visit(child, child)
            elif isinstance(child, cst.ClassDef):
                visit(child, child)
            elif isinstance(child, (cst.If, cst.Try, cst.With, cst.For, cst.While)):
                visit(child, holder or child)
            elif isinstance(child, (cst.IndentedBlock, cst.Else, cst.ExceptHandler, cst.Finally,
                                    cst.SimpleStatementSuite)):
                visit(child, holder)

    visit(source.module, None)
    return found


def discover(source: SourceFile) -> ModuleFacts:
    functions: dict[str, JitFunction] = {}
    call_forms = _call_forms(source)
    jit_statements: dict[cst.SimpleStatementLine, str] = {}
    for statement in source.module.body:
        if not isinstance(statement, cst.FunctionDef):
            continue
        jit = None
        configs: list[AutotuneConfig] = []
        keys: list[str] = []
        heuristics: list[str] = []
        applied = call_forms.get(statement.name.value)
        if applied is not None and not statement.decorators:
            jit_statements[applied["jit"]] = statement.name.value  # type: ignore[index]
            if "autotune" in applied:
                configs, keys = _autotune(source, applied["autotune"])  # type: ignore[arg-type]
            if "heuristics" in applied:
                heuristics = _heuristics(source, applied["heuristics"])  # type: ignore[arg-type]
            name = statement.name.value
            functions[name] = JitFunction(name, statement, _params(source, statement), None, configs, keys,
                                          heuristics)
            continue
        for decorator in statement.decorators:
            qn = source.qualified_name(decorator_target(decorator))
            if qn == TRITON_JIT:
                jit = decorator
            elif qn == TRITON_AUTOTUNE and isinstance(decorator.decorator, cst.Call):
                configs, keys = _autotune(source, decorator.decorator)
            elif qn == TRITON_HEURISTICS and isinstance(decorator.decorator, cst.Call):
                heuristics = _heuristics(source, decorator.decorator)
        if jit is None:
            continue
        name = statement.name.value
        functions[name] = JitFunction(name, statement, _params(source, statement), jit, configs, keys, heuristics)

    chosen = _chosen_aliases(source.module, functions)
    facts = ModuleFacts(source, functions, _aliases(source.module, functions), jit_statements, chosen=chosen)
    # Call graph between jit functions: a function another one calls is a helper.
    for fn in functions.values():
        for call in calls_in(fn.node):
            callee = facts.callee(call.func)
            if callee is not None and callee != fn.name:
                functions[callee].called_by.add(fn.name)
            if isinstance(call.func, cst.Name):  # a name bound to one of several helpers at import time
                for name in chosen.get(call.func.value, ()):
                    if name != fn.name:
                        functions[name].called_by.add(fn.name)
            for arg in call.args:  # a combine function passed to tl.reduce / tl.associative_scan is called too
                passed = facts.callee(arg.value)
                if passed is not None and passed != fn.name:
                    functions[passed].called_by.add(fn.name)
    for helper, callers in source.inlined.items():  # called where it was inlined (the code kept as written calls it)
        if helper in functions:
            functions[helper].called_by |= {c for c in callers if c in functions}
    for name, stages in _launch_stages(source.module, functions).items():
        functions[name].launch_stages = stages
    return facts


def _launch_stages(module: cst.Module, functions: dict[str, JitFunction]) -> dict[str, int]:
    """The `num_stages` literal of each kernel whose launches in the module (`kernel[grid](...)`) all pass the same
    one."""
    found: dict[str, set[int | None]] = {}
    for node in cst_walk.preorder(module):
        if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Subscript)
                and isinstance(node.func.value, cst.Name) and node.func.value.value in functions):
            continue
        arg = next((a for a in node.args if a.keyword is not None and a.keyword.value == "num_stages"), None)
        value = arg.value if arg is not None else None
        found.setdefault(node.func.value.value, set()).add(
            int(value.value) if isinstance(value, cst.Integer) and value.value.isdigit() else None)
    return {name: next(iter(values)) for name, values in found.items()  # type: ignore[misc]
            if len(values) == 1 and None not in values}


def _chosen_aliases(module: cst.Module, functions: dict[str, JitFunction]) -> dict[str, set[str]]:
    """Names bound to jit functions inside module-level `if`/`try`/`with` blocks (`if IS_HIP: rnd = _round_a`
    `else: rnd = _round_b`): a call of the name calls one of them, chosen at import time, so each is a helper of the
    caller (not a kernel of its own: the variant would bind it to a launcher that the caller could not call)."""
    chosen: dict[str, set[str]] = {}
    for statement in module.body:
        if not isinstance(statement, (cst.If, cst.Try, cst.With)):
            continue
        for node in cst_walk.preorder(statement):
            if isinstance(node, cst.Assign) and isinstance(node.value, cst.Name) and node.value.value in functions:
                for target in node.targets:
                    if isinstance(target.target, cst.Name) and target.target.value not in functions:
                        chosen.setdefault(target.target.value, set()).add(node.value.value)
    return chosen


def _aliases(module: cst.Module, functions: dict[str, JitFunction]) -> dict[str, str]:
    """`act = _relu_squared` at module level, the name bound nowhere else in the module's top level: `act` is
    another name of the jit function (kernels that pick their activation from a table of helpers do this)."""
    bound: dict[str, list[str | None]] = {}
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign):
                    for target in small.targets:
                        if isinstance(target.target, cst.Name):
                            value = small.value.value if isinstance(small.value, cst.Name) else None
                            bound.setdefault(target.target.value, []).append(value)
                elif isinstance(small, (cst.AnnAssign, cst.AugAssign)) and isinstance(small.target, cst.Name):
                    bound.setdefault(small.target.value, []).append(None)
        elif isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            bound.setdefault(statement.name.value, []).append(None)
    return {name: values[0] for name, values in bound.items()
            if len(values) == 1 and values[0] in functions and name not in functions}

