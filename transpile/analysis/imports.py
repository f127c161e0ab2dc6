"""The modules a kernel file imports helpers from, read from disk: their functions, and what it takes to copy one.

Kernel files import Triton helpers from other modules of their project (``from aiter.ops.triton.utils._triton.
moe_common import _write_zeros_to_output``). A Gluon kernel can call only Gluon functions (and helpers that do
nothing but elementwise math on what they are given), so such a helper must be translated beside the kernel: copied
into the variant. This module answers, as facts:

- `module_functions(path, origin)`: the functions of the module `origin` as imported by the file at `path` (a
  relative import from the file's package, an absolute one from the nearest enclosing directory that holds it), and
  the names that module gives libdevice and the math modules;
- `helper_closure(path, origin, name, importer)`: the top-level statements of that module (and of the modules it
  imports from) that the helper needs (the helper, the helpers and constants it reads, transitively), with the
  imports the importing module must add, or the reason the helper cannot be copied (a name defined in a way a copy
  cannot carry, a clash with a name the importing module binds otherwise).

Every file looked at is recorded with the running translation (`transpile.cache`): a translation that read another
module is stale when that module changes.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass
from pathlib import Path

from transpile import cache
from transpile.source import location

_BUILTINS = frozenset(dir(builtins))


def language_modules(tree: ast.Module) -> frozenset[str]:
    """Names a module gives libdevice and the math modules of `triton.language` (`import ... libdevice as tldevice`,
    `tl.math`, `libdevice`): their functions are elementwise."""
    names = {"tl.math", "tl.extra.libdevice", "libdevice", "tl.extra.cuda.libdevice"}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.endswith(("libdevice", ".math")):
                    names.add(alias.asname or alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("triton"):
            for alias in node.names:
                if alias.name in ("libdevice", "math"):
                    names.add(alias.asname or alias.name)
    return frozenset(names)


@dataclass(frozen=True)
class _Module:
    """One module file as read: its text's lines, its top-level statements by the names they bind, and its
    functions (top level and under module-level `if`/`try`)."""

    file: Path
    lines: tuple[str, ...]
    tree: ast.Module
    functions: dict[str, list[ast.FunctionDef]]
    math_modules: frozenset[str]
    top: dict[str, ast.stmt]  # name -> the top-level def, class, assignment or import that binds it
    rebound: frozenset[str] = frozenset()  # names bound by more than one statement at module level


_FOUND: dict[tuple[str, str], tuple[_Module | None, tuple[tuple[str, str | None], ...]]] = {}


def _module(path: str, origin: str) -> _Module | None:
    here = Path(location(path)).resolve().parent
    key = (str(here), origin)  # `path` may be relative: the same text names another file in another directory
    if key in _FOUND:
        found, probes = _FOUND[key]
        # Still the files it was read from (a long-lived process, tests): else read them again.
        if all(cache.look_up(Path(probe[0])) == probe for probe in probes):
            cache.record(probes)  # the files this answer depends on (transpile.cache)
            return found
    looked: list[tuple[str, str | None]] = []
    dots = len(origin) - len(origin.lstrip("."))
    parts = [p for p in origin.lstrip(".").split(".") if p]
    bases = [here.parents[dots - 2] if dots > 1 and len(here.parents) >= dots - 1 else here] if dots else \
        [here, *here.parents]
    found = None
    for base in bases:
        for candidate in (base.joinpath(*parts).with_suffix(".py") if parts else None,
                          base.joinpath(*parts, "__init__.py")):
            if candidate is None:
                continue
            looked.append(cache.look_up(candidate))
            if not candidate.is_file():
                continue
            try:
                text = candidate.read_text(encoding="utf-8", errors="replace")
                tree = ast.parse(text)
            except (SyntaxError, ValueError):
                continue
            functions: dict[str, list[ast.FunctionDef]] = {}
            top: dict[str, ast.stmt] = {}
            for statement in tree.body:
                for node in ([statement] if isinstance(statement, ast.FunctionDef) else
                             ast.walk(statement) if isinstance(statement, (ast.If, ast.Try)) else []):
                    if isinstance(node, ast.FunctionDef):
                        functions.setdefault(node.name, []).append(node)
                for name in _bound_at_top(statement):
                    top[name] = statement
                if isinstance(statement, ast.Try):
                    # `try: from triton.language.standard import zeros_like` / `except ImportError: pass`: the
                    # import of the `try` is what runs where the Triton of the variant is at hand
                    for inner in statement.body:
                        if isinstance(inner, (ast.Import, ast.ImportFrom)):
                            for name in _bound_at_top(inner):
                                top.setdefault(name, inner)
            counts: dict[str, int] = {}
            for statement in tree.body:
                for bound_name in _module_level_bound(statement):
                    counts[bound_name] = counts.get(bound_name, 0) + 1
            found = _Module(candidate, tuple(text.splitlines()), tree, functions, language_modules(tree), top,
                            frozenset(n for n, c in counts.items() if c > 1))
            break
        if found is not None and found.functions:
            break
    if len(_FOUND) > 1000:
        _FOUND.clear()
    _FOUND[key] = found, tuple(looked)
    cache.record(looked)
    return found


def defining_functions(path: str, origin: str, name: str, depth: int = 0
                       ) -> tuple[list[ast.FunctionDef], frozenset[str]]:
    """The definitions of `name` that the module `origin` (imported by the file at `path`) gives, following the
    modules that only import it in turn (`from ._kernels.rope import _rotate` re-exported), and the defining module's
    names for libdevice/math modules; ([], frozenset()) where none is found on disk."""
    found = _module(path, origin)
    if found is None or depth > 8:
        return [], frozenset()
    if name in found.functions:
        return found.functions[name], found.math_modules
    statement = found.top.get(name)
    binding = import_binding(statement, name) if isinstance(statement, ast.ImportFrom) else None
    if binding is None or binding[1] != name or binding[0].split(".")[0] in _EXTERNAL:
        return [], frozenset()
    return defining_functions(str(found.file), binding[0], name, depth + 1)


def module_functions(path: str, origin: str) -> tuple[dict[str, list[ast.FunctionDef]], frozenset[str]]:
    """The functions (by name; top level and under module-level `if`/`try`) of the module `origin` imported by the
    file at `path`, and that module's names for libdevice/math modules: a relative import from the file's package, an
    absolute one from the nearest enclosing directory that holds it. Empty when the module is not found on disk."""
    found = _module(path, origin)
    return (found.functions, found.math_modules) if found is not None else ({}, frozenset())


def _bound_at_top(statement: ast.stmt) -> list[str]:
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [statement.name]
    if isinstance(statement, ast.Assign):
        return [t.id for t in statement.targets if isinstance(t, ast.Name)]
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
        return [statement.target.id]
    if isinstance(statement, ast.Import):
        return [a.asname or a.name.split(".")[0] for a in statement.names]
    if isinstance(statement, ast.ImportFrom):
        return [a.asname or a.name for a in statement.names if a.name != "*"]
    return []


def import_binding(statement: ast.stmt, name: str) -> tuple[str, str] | None:
    """What an import statement binds `name` to: (module, attribute) for `from module import attribute [as name]`,
    (module, "") for `import module as name` (or `import name`); None where it does not bind `name`."""
    if isinstance(statement, ast.Import):
        for alias in statement.names:
            if alias.asname == name:
                return alias.name, ""
            if alias.asname is None and alias.name.split(".")[0] == name:
                return name, ""
    elif isinstance(statement, ast.ImportFrom):
        module = "." * statement.level + (statement.module or "")
        for alias in statement.names:
            if (alias.asname or alias.name) == name:
                return module, alias.name
    return None


def is_jit(fn: ast.FunctionDef, top: dict[str, ast.stmt]) -> bool:
    """`fn` is decorated `@triton.jit` (or with `jit` imported from triton, `@triton.jit(...)`)."""
    for decorator in fn.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr == "jit" and isinstance(target.value, ast.Name):
            binding = import_binding(top[target.value.id], target.value.id) if target.value.id in top else None
            if binding == ("triton", ""):
                return True
        elif isinstance(target, ast.Name) and target.id in top and import_binding(top[target.id], target.id) in (
                ("triton", "jit"), ("triton.runtime.jit", "jit")):
            return True
    return False


def free_names(statement: ast.stmt) -> set[str]:
    """Names a top-level statement reads from its module's globals: for a function, those its decorators, defaults,
    annotations and body read that are not its parameters, not assigned in it and not builtins."""
    loaded: set[str] = set()
    stored: set[str] = set()
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = statement.args
        for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if a is not None:
                stored.add(a.arg)
    for node in ast.walk(statement):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else stored).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not statement:
            stored.add(node.name)
    return {n for n in loaded - stored if n not in _BUILTINS}


@dataclass(frozen=True)
class HelperClosure:
    """What copying a helper into the importing module takes: the statements (source text, in the order of their
    modules' files) and the import statements (text) the copies read that the importing module lacks."""

    name: str
    origin: str
    file: Path
    statements: tuple[str, ...]
    imports: tuple[str, ...]
    defines: tuple[tuple[str, str], ...]  # (name, the statement that binds it in the copy), imports included


def _statement_text(module: _Module, statement: ast.stmt) -> str:
    first = min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", []))])
    last = statement.end_lineno or statement.lineno
    return "\n".join(module.lines[first - 1:last])


_EXTERNAL = ("triton", "torch", "math", "numpy", "typing", "functools")


def _qualified(binding: tuple[str, str] | None) -> str | None:
    """What an import binds, as one dotted name: `from triton import language as tl` and `import triton.language as
    tl` both bind `triton.language`."""
    if binding is None:
        return None
    module, attribute = binding
    return f"{module}.{attribute}" if attribute else module


def _tried_language_alias(module: _Module, name: str) -> str | None:
    """The `triton.language` attribute a module-level `try:` binds `name` to (`name = tl.attr`, `tl` imported as
    `triton.language`, the `except` defining a fallback), where the installed Triton has it; else None."""
    import triton.language as tl

    for statement in module.tree.body:
        if not isinstance(statement, ast.Try):
            continue
        for small in statement.body:
            if isinstance(small, ast.Assign) and [ast.unparse(t) for t in small.targets] == [name] \
                    and isinstance(small.value, ast.Attribute) and isinstance(small.value.value, ast.Name):
                root = module.top.get(small.value.value.id)
                binding = import_binding(root, small.value.value.id) if isinstance(
                    root, (ast.Import, ast.ImportFrom)) else None
                if binding is not None and _qualified(binding) == "triton.language" \
                        and hasattr(tl, small.value.attr):
                    return small.value.attr
    return None


def helper_closure(path: str, origin: str, name: str, importer: dict[str, tuple[str, str] | None]
                   ) -> HelperClosure | str:
    """The statements a copy of the helper `name` of the module `origin` (imported by the file at `path`) needs, or
    why it cannot be copied. `importer` is what the importing module binds at its top level: name -> (module,
    attribute) for names it imports, None for names it defines itself (the helper's own import is not in it)."""
    root = _module(path, origin)
    if root is None:
        return f"`{origin}` is not found on disk beside the file"
    chosen: dict[tuple[str, int], tuple[_Module, ast.stmt]] = {}  # in the order a copy must run them
    imports: dict[str, str] = {}
    defines: dict[str, str] = {}  # name -> its statement's text (two modules may define one name the same way)

    def visit(module: _Module, wanted: str, reader: str) -> str | None:  # (why not, or None)
        statement = module.top.get(wanted)
        where = f"`{module.file.name}`"
        if statement is None:
            tried = _tried_language_alias(module, wanted)
            if tried is not None and wanted not in importer:
                # `try: uint_to_uniform_float = tl.uint_to_uniform_float` / `except AttributeError:` a fallback: the
                # installed Triton has it, which the copy imports (FlagGems' random_utils)
                imports[wanted] = f"from triton.language import {tried}" + (f" as {wanted}" if tried != wanted else "")
                return None
            return None if wanted in _BUILTINS else \
                f"`{reader}` reads `{wanted}`, which {where} does not define at its top level"
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            binding = import_binding(statement, wanted)
            assert binding is not None
            source, attribute = binding
            if source.split(".")[0] in _EXTERNAL:
                if wanted in importer and _qualified(importer[wanted]) != _qualified(binding):
                    return (f"`{reader}` reads `{wanted}` as `{source}{'.' + attribute if attribute else ''}`, a name "
                            "this file binds otherwise")
                if wanted not in importer:
                    imports[wanted] = (f"from {source} import {attribute}" + (f" as {wanted}" if wanted != attribute
                                                                               else "")) if attribute else \
                        (f"import {source}" + (f" as {wanted}" if wanted != source else ""))
                return None
            if not attribute:
                return f"`{reader}` reads the module `{source}` (`{wanted}`), which a copy cannot carry"
            if attribute != wanted:
                return f"`{reader}` reads `{attribute}` of `{source}` under another name, `{wanted}`"
            other = _module(str(module.file), source)
            if other is None:
                return f"`{reader}` reads `{wanted}` from `{source}`, which is not found on disk"
            hop = (str(module.file), wanted)
            if hop in following:  # (modules importing the name from each other: no module defines it)
                return f"`{reader}` reads `{wanted}`, which the modules it is imported from import from each other"
            following.add(hop)
            try:
                return visit(other, wanted, reader)
            finally:
                following.discard(hop)  # (the chain being followed only: another reader may follow it again)
        key = (str(module.file), statement.lineno)
        if key in chosen or key in visiting:
            return None
        if wanted in module.rebound:
            return f"`{reader}` reads `{wanted}`, which {where} binds more than once"
        if isinstance(statement, ast.ClassDef):
            return f"`{reader}` reads the class `{wanted}` of {where}"
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)) and not is_jit(statement, module.top):
            return f"`{reader}` calls `{wanted}`, a Python function of {where}, not a `@triton.jit` one"
        if not isinstance(statement, (ast.FunctionDef, ast.Assign, ast.AnnAssign)):
            return f"`{wanted}`, read by `{reader}`, is bound by a statement of {where} a copy cannot carry"
        text = _statement_text(module, statement)
        if wanted in defines and defines[wanted] != text:
            return f"`{wanted}` is defined twice, differently, in the modules `{name}` reads"
        if wanted in importer and not (wanted == name and module is root):
            return f"`{reader}` reads `{wanted}`, a name this file binds itself"
        defines[wanted] = text
        visiting.add(key)
        for free in sorted(free_names(statement)):  # what it reads first: a constant before what reads it
            why = visit(module, free, wanted)
            if why is not None:
                return why
        chosen[key] = (module, statement)
        return None

    visiting: set[tuple[str, int]] = set()
    following: set[tuple[str, str]] = set()  # (module file, name) of the imports being followed
    why = visit(root, name, name)
    if why is not None:
        return why
    return HelperClosure(name, origin, root.file, tuple(_statement_text(m, s) for m, s in chosen.values()),
                         tuple(imports[n] for n in sorted(imports)), tuple(sorted({**defines, **imports}.items())))


def top_bindings(tree: ast.Module) -> dict[str, tuple[str, str] | None]:
    """What a module binds at its top level: name -> (module, attribute) for an import, None for anything else."""
    bound: dict[str, tuple[str, str] | None] = {}
    for statement in tree.body:
        for name in _module_level_bound(statement):
            binding = import_binding(statement, name) if isinstance(statement, (ast.Import, ast.ImportFrom)) else None
            bound[name] = binding if name not in bound or bound[name] == binding else None
    return bound


def _module_level_bound(statement: ast.stmt) -> list[str]:
    """Every name a top-level statement binds at module level: definitions, imports, assignment targets (tuples
    too), and those bound inside a module-level `if`/`try`/`with`/`for` (not inside functions or classes)."""
    names: list[str] = []
    stack: list[ast.AST] = [statement]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names += _bound_at_top(node)
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.append(node.id)
        stack.extend(ast.iter_child_nodes(node))
    return names
