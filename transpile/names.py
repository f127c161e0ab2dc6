"""Undefined names in a generated variant: every name a function (or the module) reads must be bound before.

The check is flow-sensitive the way the Triton frontend is: inside a function, statements are read in order and a
name is defined once an earlier statement (or a parameter, an import, a module global, a builtin) binds it; the two
branches of an ``if`` are read separately, each from what was defined before it (a name bound in either branch is
defined after it: a constexpr ``if`` keeps only one branch); a loop body is read once, from what was defined before
the loop (Triton carries a value through a loop only when it is defined before it). Comprehensions, lambdas and
nested functions see their own parameters and targets. A bug such as a pipelined branch that reads a tile it never
loaded, or a helper called but never emitted, shows up as ``UndefinedName(line, col, name, function)``.

`undefined_names(text)` is pure: it parses the text with `ast` and never imports it. `undefined_in_statements` does
the same for a module given as its top-level statements, each parsed on its own (the engine parses the statements
that are the same for every target once).
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass

_BUILTINS = frozenset(dir(builtins)) | {"__file__", "__name__", "__doc__", "__spec__", "__builtins__"}


@dataclass(frozen=True)
class UndefinedName:
    line: int
    col: int
    name: str
    function: str  # the enclosing function, or "<module>"

    def __str__(self) -> str:
        return f"{self.line}:{self.col + 1}: `{self.name}` is used in `{self.function}` but never defined before"


def _targets(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}


def _module_bindings(tree: ast.Module, walrus: bool = True) -> set[str]:
    """Every name bound at module level, anywhere in it (functions are called after the module has run). `walrus`
    False: the code holds no assignment expression (its text no `:=`), so none is looked for."""
    names: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    names.add(alias.asname or alias.name.split(".")[0])
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    names.update(_targets(target))
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                names.update(_targets(node.target))
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    if item.optional_vars is not None:
                        names.update(_targets(item.optional_vars))
            elif isinstance(node, ast.Try):
                for handler in node.handlers:
                    if handler.name:
                        names.add(handler.name)
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(node, field, None)
                if isinstance(inner, list) and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                      ast.ClassDef)):
                    visit(inner)
            if isinstance(node, ast.Try):
                for handler in node.handlers:
                    visit(handler.body)
        if walrus:
            for node in ast.walk(ast.Module(body=statements, type_ignores=[])):
                if isinstance(node, ast.NamedExpr):
                    names.update(_targets(node.target))

    visit(tree.body)
    return names


class _Checker:
    def __init__(self, globals_: set[str], functions: set[str] | None = None) -> None:
        self.globals = globals_
        self.functions = functions  # the module-level functions whose bodies are read (None: all)
        self.found: list[UndefinedName] = []
        self.declarations = True  # False: the statement being read holds no `global`/`nonlocal` (by its text)
        # Per enclosing function being read: every name its body binds. A nested function reads them when it is
        # called (a closure: `def grid(meta): return (cdiv(n, ...),)` before `n = x.numel()`), not where defined.
        # (each made only when a nested function asks: most functions have none, and the walk costs)
        self.enclosing: list[list] = []  # [body, arguments, the names or None]

    # Expressions --------------------------------------------------------------------------------------------------
    def expression(self, node: ast.AST | None, defined: set[str], function: str) -> None:
        if node is None:
            return
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load) and node.id not in defined and node.id not in self.globals and \
                    node.id not in _BUILTINS:
                self.found.append(UndefinedName(node.lineno, node.col_offset, node.id, function))
            elif isinstance(node.ctx, ast.Store):
                defined.add(node.id)  # a walrus target
            return
        if isinstance(node, ast.Lambda):
            inner = set(defined) | _arguments(node.args)
            self.defaults(node.args, defined, function)
            self.expression(node.body, inner, function)
            return
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inner = set(defined)
            for generator in node.generators:
                self.expression(generator.iter, inner, function)
                inner |= _targets(generator.target)
                for condition in generator.ifs:
                    self.expression(condition, inner, function)
            if isinstance(node, ast.DictComp):
                self.expression(node.key, inner, function)
                self.expression(node.value, inner, function)
            else:
                self.expression(node.elt, inner, function)
            return
        if isinstance(node, ast.NamedExpr):
            self.expression(node.value, defined, function)
            defined |= _targets(node.target)
            return
        for child in ast.iter_child_nodes(node):
            self.expression(child, defined, function)

    def defaults(self, args: ast.arguments, defined: set[str], function: str) -> None:
        for default in [*args.defaults, *args.kw_defaults]:
            self.expression(default, defined, function)
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if arg is not None and arg.annotation is not None:
                self.expression(arg.annotation, defined, function)

    # Statements ---------------------------------------------------------------------------------------------------
    def block(self, statements: list[ast.stmt], defined: set[str], function: str) -> set[str]:
        for statement in statements:
            defined = self.statement(statement, defined, function)
        return defined

    def statement(self, node: ast.stmt, defined: set[str], function: str) -> set[str]:
        expr = self.expression
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                expr(decorator, defined, function)
            self.defaults(node.args, defined, function)
            expr(node.returns, defined, function)
            if function == "<module>" and self.functions is not None and node.name not in self.functions:
                return defined | {node.name}
            inner = set(defined) | _arguments(node.args) | {node.name}
            if self.declarations:
                inner |= _declared(node.body)
            for scope in self.enclosing:
                if scope[2] is None:
                    scope[2] = _bound_in(scope[0]) | scope[1]
                inner |= scope[2]
            self.enclosing.append([node.body, _arguments(node.args), None])
            try:
                self.block(node.body, inner, node.name)
            finally:
                self.enclosing.pop()
            return defined | {node.name}
        if isinstance(node, ast.ClassDef):
            for child in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
                expr(child, defined, function)
            self.block(node.body, set(defined) | {"__class__"}, node.name)  # (`__class__` in a method: the class)
            return defined | {node.name}
        if isinstance(node, ast.Assign):
            expr(node.value, defined, function)
            for target in node.targets:
                self.store(target, defined, function)
            return defined | set().union(*(_targets(t) for t in node.targets))
        if isinstance(node, ast.AugAssign):
            expr(node.value, defined, function)
            if isinstance(node.target, ast.Name):
                expr(ast.copy_location(ast.Name(node.target.id, ast.Load()), node.target), defined, function)
            else:
                self.store(node.target, defined, function)
            return defined | _targets(node.target)
        if isinstance(node, ast.AnnAssign):
            expr(node.value, defined, function)
            expr(node.annotation, defined, function)
            self.store(node.target, defined, function)
            return defined | _targets(node.target) if node.value is not None else defined
        if isinstance(node, (ast.For, ast.AsyncFor)):
            expr(node.iter, defined, function)
            body = self.block(node.body, defined | _targets(node.target), function)
            orelse = self.block(node.orelse, set(defined), function)
            return defined | body | orelse
        if isinstance(node, ast.While):
            expr(node.test, defined, function)
            body = self.block(node.body, set(defined), function)
            orelse = self.block(node.orelse, set(defined), function)
            return defined | body | orelse
        if isinstance(node, ast.If):
            expr(node.test, defined, function)
            then = self.block(node.body, set(defined), function)
            orelse = self.block(node.orelse, set(defined), function)
            return then | orelse
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                expr(item.context_expr, defined, function)
                if item.optional_vars is not None:
                    defined = defined | _targets(item.optional_vars)
            return self.block(node.body, set(defined), function)
        if isinstance(node, ast.Try):
            body = self.block(node.body, set(defined), function)
            for handler in node.handlers:
                expr(handler.type, defined, function)
                body |= self.block(handler.body, defined | ({handler.name} if handler.name else set()), function)
            body |= self.block(node.orelse, set(body), function)
            return self.block(node.finalbody, body, function)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return defined | {a.asname or a.name.split(".")[0] for a in node.names}
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return defined | set(node.names)
        if isinstance(node, ast.Delete):
            return defined
        for child in ast.iter_child_nodes(node):
            expr(child, defined, function)
        return defined

    def store(self, target: ast.AST, defined: set[str], function: str) -> None:
        """Reads inside an assignment target (`x[i] = ...`, `a.b = ...`)."""
        if isinstance(target, (ast.Subscript, ast.Attribute)):
            self.expression(target, defined, function)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self.store(element, defined, function)
        elif isinstance(target, ast.Starred):
            self.store(target.value, defined, function)


def _arguments(args: ast.arguments) -> set[str]:
    return {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a is not None}


def _bound_in(body: list[ast.stmt]) -> set[str]:
    """Names a function body binds anywhere in its own scope (assignments, loops, imports, definitions; not inside
    nested functions, classes or comprehensions)."""
    names: set[str] = set()
    pending: list[ast.AST] = list(body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {a.asname or a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        pending.extend(ast.iter_child_nodes(node))
    return names


def _declared(body: list[ast.stmt]) -> set[str]:
    """Names a function declares `global`/`nonlocal`, and the nested functions and classes it defines (they may be
    called before their definition is read, e.g. by a decorator-built registry)."""
    names: set[str] = set()
    for node in body:
        for inner in ast.walk(node):
            if isinstance(inner, (ast.Global, ast.Nonlocal)):
                names |= set(inner.names)
    return names


def undefined_names(text: str, functions: set[str] | None = None) -> list[UndefinedName]:
    """The names `text` reads without defining them first, in source order (empty for correct code). With
    `functions`, the bodies of the other module-level functions are not read (nothing is reported inside them)."""
    tree = ast.parse(text)
    checker = _Checker(_module_bindings(tree), functions)
    checker.block(tree.body, set(), "<module>")
    return sorted(set(checker.found), key=lambda u: (u.line, u.col, u.name))


# The module-level names each top-level statement binds, per parsed statement (`cst_utils.node_ast` gives the same
# list for a statement every target shares). Keyed by the list's id, holding the list so that the id stays its own.
_BINDINGS: dict[int, tuple[list[ast.stmt], frozenset[str]]] = {}


def _statement_bindings(parsed: list[ast.stmt], walrus: bool = True) -> frozenset[str]:
    cached = _BINDINGS.get(id(parsed))
    if cached is None or cached[0] is not parsed:
        cached = (parsed, frozenset(_module_bindings(ast.Module(body=parsed, type_ignores=[]), walrus)))
        if len(_BINDINGS) > 20_000:
            _BINDINGS.clear()
        _BINDINGS[id(parsed)] = cached
    return cached[1]


def undefined_in_statements(statements: list[list[ast.stmt]], functions: set[str] | None = None,
                            texts: list[str] | None = None) -> list[tuple[int, UndefinedName]]:
    """`undefined_names` of a module given as its top-level statements, each parsed on its own (`ast.parse` of the
    statement's text: one or more `ast.stmt`, lines counted from the statement's first line). Gives (index of the
    statement, name) pairs in source order: the same names as `undefined_names` of the whole text, in the same order,
    with lines relative to their statement. `texts`, the statements' texts where the caller has them, spare the walks
    for assignment expressions and `global`/`nonlocal` declarations of a statement whose text holds none."""
    globals_: set[str] = set()
    for i, parsed in enumerate(statements):
        globals_ |= _statement_bindings(parsed, texts is None or ":=" in texts[i])
    checker = _Checker(globals_, functions)
    found: set[tuple[int, UndefinedName]] = set()
    defined: set[str] = set()
    for index, parsed in enumerate(statements):
        checker.declarations = texts is None or "global" in texts[index] or "nonlocal" in texts[index]
        defined = checker.block(parsed, defined, "<module>")
        found.update((index, u) for u in checker.found)
        checker.found = []
    return sorted(found, key=lambda item: (item[0], item[1].line, item[1].col, item[1].name))
