"""Helpers that run a dot, inlined where they are called, before anything is analysed.

Public attention kernels keep their main loop in a helper (`_attn_fwd_inner(acc, l_i, m_i, q, K_block_ptr, ...)`,
called once per stage of a causal mask; Triton's tutorial writes it so) and GEMM kernels their step
(`acc = mac_loop(...)`). The pipeline rules read one function: a dot in a helper is a dot they do not see, and a block
pointer passed to a helper is one the lowering to pointer tiles cannot follow. So this pass writes the body of such a
helper in place of each call statement, as Triton's own compiler inlines every `@triton.jit` call:

    acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, K_block_ptr, V_block_ptr, start_m, BLOCK_M, 1, offs_m)

becomes the helper's statements with its parameters read as the arguments (a name passed for a parameter the helper
never assigns is read under the caller's name; a literal is read as that literal, so that `if STAGE == 1:` is decided
here; an argument assigned back by the call, `acc` above, is the parameter itself), its other names renamed where the
caller uses them already, and its `return` assigned to the call's targets. The helper stays in the file, a helper of
the functions that inlined it (`SourceFile.inlined`, which `discover` reads): a kernel kept as Triton, and the source
kernel a launcher keeps beside a translated one, are kept as written and call it.

Only whole statements are inlined: `x = helper(...)`, `a, b = helper(...)`, `helper(...)`, in the function's body at
any depth, of a helper with a dot (directly or through helpers it calls) whose only `return` is its last statement.
Other calls stay as written (the pipeline rules then name the helper in their reason).

`inline_dot_helpers(source, facts)` returns the new text, its line map (an inlined body maps to the call's line) and
the functions that inlined each helper, or None where nothing is inlined.
"""

from __future__ import annotations

import ast

import libcst as cst

from transpile.cst_utils import (
    bindings,
    bound_names,
    calls_in,
    is_docstring,
    module_code,
    names_in,
    node_code,
    parenthesized,
    read_names,
    substituted,
)
from transpile.cst_walk import preorder
from transpile.discover import ModuleFacts, language_name
from transpile.source import SourceFile, pieces_line_map

_DOTS = ("dot", "core.dot", "dot_scaled", "core.dot_scaled")
_BLOCK_POINTERS = ("make_block_ptr", "core.make_block_ptr", "advance", "core.advance")
_ROUNDS = 4  # helpers calling helpers: inlined from the outside in, this deep


def inline_dot_helpers(source: SourceFile, facts: ModuleFacts
                       ) -> tuple[str, list[int], dict[str, frozenset[str]]] | None:
    dots = _dot_helpers(source, facts)
    dotted = dots | _block_pointer_helpers(source, facts)
    if not dotted:
        return None
    functions = {fn.name: fn.node for fn in facts.functions.values()}
    functions_before = dict(functions)
    changed: set[str] = set()
    for _ in range(_ROUNDS):
        progress = False
        for name, node in list(functions.items()):
            inliner = _Inliner(facts, functions, dotted, name, dots)
            new = node.visit(inliner)
            if inliner.inlined:
                functions[name] = new  # type: ignore[assignment]
                changed.add(name)
                progress = True
        if not progress:
            break
    if not changed:
        return None
    module = source.module
    body: list[cst.BaseStatement] = []
    pieces: list[tuple[str, str, int]] = [(node_code(module, n), node_code(module, n), 0) for n in module.header]
    for statement in module.body:
        old = node_code(module, statement)
        name = statement.name.value if isinstance(statement, cst.FunctionDef) else None
        new = functions.get(name, statement) if name in changed else statement  # type: ignore[arg-type]
        pieces.append((old, node_code(module, new), 0))
        body.append(new)
    pieces += [(node_code(module, n), node_code(module, n), 0) for n in module.footer]
    text = module_code(module.with_changes(body=body))
    inlined: dict[str, set[str]] = {}
    for name in changed:
        for helper in _called(functions_before[name], facts) - _called(functions[name], facts):
            inlined.setdefault(helper, set()).add(name)
    return text, pieces_line_map(source.text, text, pieces), {h: frozenset(c) for h, c in inlined.items()}


def _called(node: cst.FunctionDef, facts: ModuleFacts) -> set[str]:
    return {c for c in (facts.callee(call.func) for call in calls_in(node)) if c is not None}


def _dot_helpers(source: SourceFile, facts: ModuleFacts) -> set[str]:
    """The jit functions that run a dot, directly or through the helpers they call."""
    found = {fn.name for fn in facts.functions.values()
             if any(language_name(source.qualified_name(c.func)) in _DOTS for c in calls_in(fn.node))}
    grew = True
    while grew:
        grew = False
        for fn in facts.functions.values():
            if fn.name not in found and _called(fn.node, facts) & found:
                found.add(fn.name)
                grew = True
    return found


def _block_pointer_helpers(source: SourceFile, facts: ModuleFacts) -> set[str]:
    """The jit functions that make or advance a block pointer (`return tl.make_block_ptr(...)`), or that a caller
    passes one (`x = _load_tile(p_x)`): Gluon has no block pointers, and the lowering to pointer tiles follows one
    within a function."""
    def block_calls(node: cst.CSTNode) -> list[cst.Call]:
        return [c for c in calls_in(node) if language_name(source.qualified_name(c.func)) in _BLOCK_POINTERS
                or isinstance(c.func, cst.Attribute) and c.func.attr.value == "advance"]

    found = {fn.name for fn in facts.functions.values() if block_calls(fn.node)}
    grew = True
    while grew:  # (a block pointer a helper returns, `src = _rows(...)`, passed on to another: `_read(src)`)
        grew = False
        for fn in facts.functions.values():
            made = {node.targets[0].target.value for node in preorder(fn.node) if isinstance(node, cst.Assign)
                    and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name)
                    and isinstance(node.value, cst.Call) and (node.value in block_calls(node.value)
                                                              or facts.callee(node.value.func) in found)}
            for call in calls_in(fn.node):
                callee = facts.callee(call.func)
                if callee is not None and callee != fn.name and callee not in found and any(
                        isinstance(a.value, cst.Name) and a.value.value in made for a in call.args):
                    found.add(callee)
                    grew = True
    return found


def _returns_last_only(fn: cst.FunctionDef) -> bool:
    """Its only `return` is its body's last statement (or it has none), and it defines nothing inside."""
    tree = ast.parse(cst.Module([fn.with_changes(decorators=[], leading_lines=[])]).code).body[0]
    body = tree.body  # type: ignore[attr-defined]
    returns = [n for n in ast.walk(tree) if isinstance(n, ast.Return)]
    nested = [n for n in ast.walk(tree) if n is not tree and isinstance(
        n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.Yield, ast.Global, ast.Nonlocal))]
    return not nested and (not returns or (len(returns) == 1 and isinstance(body[-1], ast.Return)))


class _Inliner(cst.CSTTransformer):
    """Replaces the call statements of dot helpers (and block-pointer helpers) in one function by the helpers'
    bodies. `dots`: the helpers that run a dot."""

    def __init__(self, facts: ModuleFacts, functions: dict[str, cst.FunctionDef], dotted: set[str],
                 caller: str, dots: set[str]) -> None:
        super().__init__()
        self.facts = facts
        self.functions = functions
        self.dotted = dotted
        self.dots = dots
        self.caller = caller
        self.taken = names_in(functions[caller])  # names the caller uses (grows with each inlined body)
        self.inlined = 0

    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
                                  ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if len(updated.body) != 1:
            return updated
        small = updated.body[0]
        targets: cst.BaseExpression | None = None
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.value, cst.Call):
            targets, call = small.targets[0].target, small.value
            names = [e.value for e in targets.elements] if isinstance(targets, (cst.Tuple, cst.List)) else \
                [targets] if isinstance(targets, cst.Name) else None
            if names is None or not all(isinstance(n, cst.Name) for n in names):
                return updated
        elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            call = small.value
        else:
            return updated
        helper = self.facts.callee(call.func)
        if helper is None or helper not in self.dotted or helper == self.caller or helper not in self.functions:
            return updated
        fn = self.functions[helper]
        if not _returns_last_only(fn):
            return updated
        statements = self.inline(fn, call, targets)
        if statements is None:
            return updated
        self.inlined += 1
        why = "the pipeline rules read its loop where it runs" if helper in self.dots else \
            "its block pointers are lowered to pointer tiles where they are made and read"
        note = cst.EmptyLine(comment=cst.Comment(f"# `{helper}(...)`, inlined ({why})"))
        statements[0] = statements[0].with_changes(
            leading_lines=[*updated.leading_lines, note, *statements[0].leading_lines])
        return cst.FlattenSentinel(statements)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        """A block-pointer helper whose body is one `return <expression>` (`return tl.load(p, boundary_check=...)`),
        called inside an expression: the expression, its parameters read as the arguments."""
        helper = self.facts.callee(updated.func)
        if helper is None or helper in self.dots or helper not in self.dotted or helper == self.caller \
                or helper not in self.functions:
            return updated
        fn = self.functions[helper]
        body = [s for s in fn.body.body if not is_docstring(s)]  # type: ignore[attr-defined]
        if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine) or len(body[0].body) != 1 \
                or not isinstance(body[0].body[0], cst.Return) or body[0].body[0].value is None:
            return updated
        returned = body[0].body[0].value
        params = list(fn.params.params)
        if fn.params.star_arg not in (None, cst.MaybeSentinel.DEFAULT) or fn.params.kwonly_params \
                or fn.params.star_kwarg is not None or fn.params.posonly_params or any(a.star for a in updated.args):
            return updated
        args: dict[str, cst.BaseExpression] = {}
        for position, arg in enumerate(updated.args):
            name = arg.keyword.value if arg.keyword is not None else (
                params[position].name.value if position < len(params) else None)
            if name is None or name in args:
                return updated
            args[name] = arg.value
        for p in params:
            if p.name.value not in args:
                if p.default is None:
                    return updated
                args[p.name.value] = p.default
        reads = [n.value for n in preorder(returned) if isinstance(n, cst.Name)]
        if any(reads.count(name) > 1 and not (isinstance(arg, cst.Name) or _literal(arg))
               for name, arg in args.items()):
            return updated  # (an expression read twice would be evaluated twice)
        # The helper's globals (`SCALE`, `tl`) must mean the same in the caller: not a name the caller assigns.
        if (read_names(returned) - set(args)) & bound_names(self.functions[self.caller]):
            return updated
        self.inlined += 1
        values = {name: parenthesized(arg) for name, arg in args.items()}
        return parenthesized(substituted(returned, values))

    def inline(self, fn: cst.FunctionDef, call: cst.Call, targets: cst.BaseExpression | None
               ) -> list[cst.BaseStatement] | None:
        params = [p for p in fn.params.params]
        if fn.params.star_arg not in (None, cst.MaybeSentinel.DEFAULT) or fn.params.kwonly_params \
                or fn.params.star_kwarg is not None or fn.params.posonly_params:
            return None
        args: dict[str, cst.BaseExpression] = {}
        for position, arg in enumerate(call.args):
            if arg.star:
                return None
            name = arg.keyword.value if arg.keyword is not None else (
                params[position].name.value if position < len(params) else None)
            if name is None or name in args:
                return None
            args[name] = arg.value
        for p in params:
            if p.name.value not in args:
                if p.default is None:
                    return None
                args[p.name.value] = p.default
        body = list(fn.body.body)  # type: ignore[attr-defined]
        if body and is_docstring(body[0]):
            body = body[1:]
        returned: cst.BaseExpression | None = None
        last = body[-1] if body else None
        if isinstance(last, cst.SimpleStatementLine) and any(isinstance(s, cst.Return) for s in last.body):
            if not isinstance(last.body[-1], cst.Return):
                return None  # (never: the return ends the function)
            returned = last.body[-1].value  # type: ignore[attr-defined]
            rest = list(last.body[:-1])  # (`tl.store(...); return`: the statements before it stay)
            body = [*body[:-1], *([last.with_changes(body=rest)] if rest else [])]
            if returned is None and targets is not None:
                return None
        assigned = bound_names(fn.body)
        own = assigned | {p.name.value for p in params} | names_in(fn.body)
        # The helper's globals (`SCALE`, `tl`) must mean the same in the caller: not a name the caller assigns.
        if (read_names(fn.body) - assigned - {p.name.value for p in params}) & bound_names(self.functions[self.caller]):
            return None
        target_names = [e.value.value for e in targets.elements] if isinstance(targets, (cst.Tuple, cst.List)) \
            else [targets.value] if isinstance(targets, cst.Name) else []  # type: ignore[union-attr]
        returned_items = list(returned.elements) if isinstance(returned, cst.Tuple) else None
        values: dict[str, cst.BaseExpression] = {}
        prologue: list[cst.BaseStatement] = []
        used_args = [a.value for a in args.values() if isinstance(a, cst.Name)]
        for p in params:
            name, arg = p.name.value, args[p.name.value]
            if name not in assigned and ((_literal(arg) and not _as_base(fn.body, name)) or (
                    isinstance(arg, cst.Name) and (arg.value == name or arg.value not in own))):
                # read as the argument itself (a negative literal in parentheses: `x ** P` with P = -1)
                values[name] = arg.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()]) \
                    if isinstance(arg, cst.UnaryOperation) and not arg.lpar else arg
                continue
            if name in assigned and isinstance(arg, cst.Name) and arg.value in target_names \
                    and used_args.count(arg.value) == 1 and (arg.value == name or arg.value not in own) \
                    and self.returns_as(returned, returned_items, target_names, name, arg.value):
                values[name] = arg  # the caller's variable, assigned back by the call: the helper updates it
                continue
            fresh = self.fresh(name)
            values[name] = cst.Name(fresh)
            if p.annotation is not None and name not in assigned \
                    and cst.Module([]).code_for_node(p.annotation.annotation).endswith("constexpr"):
                # (a constexpr parameter bound to an expression, `4 - STAGE`: still a constexpr, so that the
                # helper's `if STAGE == 2:` is decided at compile time, as in the helper)
                prologue.append(cst.SimpleStatementLine([cst.AnnAssign(cst.Name(fresh), p.annotation,
                                                                       self.remade(arg))]))
                continue
            prologue.append(cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(fresh))],
                                                                self.remade(arg))]))
        for name in sorted(assigned - set(values)):
            if name in self.taken:
                values[name] = cst.Name(self.fresh(name))
        self.taken |= {v.value for v in values.values() if isinstance(v, cst.Name)} | assigned
        statements = [substituted(s, values) for s in body]
        statements = _folded(statements)
        epilogue: list[cst.BaseStatement] = []
        if returned is not None and targets is not None:
            value = substituted(returned, values)
            if isinstance(value, cst.Tuple) and len(value.elements) == len(target_names) and len(target_names) > 1:
                pairs = [(t, e.value) for t, e in zip(target_names, value.elements)
                         if not (isinstance(e.value, cst.Name) and e.value.value == t)]
                if len(pairs) == 1:
                    epilogue.append(_assign(cst.Name(pairs[0][0]), pairs[0][1]))
                elif pairs:
                    epilogue.append(_assign(cst.Tuple([cst.Element(cst.Name(t)) for t, _ in pairs]),
                                            cst.Tuple([cst.Element(v) for _, v in pairs])))
            elif not (isinstance(value, cst.Name) and isinstance(targets, cst.Name) and value.value == targets.value):
                epilogue.append(_assign(targets, value))
        elif returned is None and targets is not None:
            return None  # (the source assigns the result of a helper that returns nothing)
        out = [*prologue, *statements, *epilogue]
        return out or [cst.SimpleStatementLine([cst.Pass()])]

    def remade(self, arg: cst.BaseExpression) -> cst.BaseExpression:
        """The value a copy of the argument starts from: a block pointer the caller makes once, from values it never
        assigns again, is made again (`tl.make_block_ptr(...)`, the same call: block pointers are values), so that the
        lowering to pointer tiles sees where the copy is made; anything else is read by name."""
        if not isinstance(arg, cst.Name):
            return arg
        definitions, rebound = self.definitions
        made = definitions.get(arg.value)
        if not (isinstance(made, cst.Call) and language_name(
                self.facts.source.qualified_name(made.func)) == "make_block_ptr"):
            return arg
        params = {p.name.value for p in self.functions[self.caller].params.params}
        for name in read_names(made):
            if name in rebound or (name not in definitions and name in bound_names(self.functions[self.caller])) \
                    or (name in params and name in bound_names(self.functions[self.caller])):
                return arg
        return made

    @property
    def definitions(self) -> tuple[dict[str, cst.BaseExpression], set[str]]:
        return bindings(self.functions[self.caller])

    def returns_as(self, returned: cst.BaseExpression | None, items: list[cst.Element] | None, targets: list[str],
                   param: str, arg: str) -> bool:
        """The helper returns `param` where the call assigns `arg` (so `param` may be `arg` all along)."""
        if returned is None:
            return False
        if items is not None:
            return len(items) == len(targets) and any(
                isinstance(e.value, cst.Name) and e.value.value == param and t == arg for e, t in zip(items, targets))
        return isinstance(returned, cst.Name) and returned.value == param and targets == [arg]

    def fresh(self, name: str) -> str:
        if name not in self.taken:
            self.taken.add(name)
            return name
        i = 1
        while f"{name}_{i}" in self.taken:
            i += 1
        self.taken.add(f"{name}_{i}")
        return f"{name}_{i}"


def _as_base(node: cst.CSTNode, name: str) -> bool:
    """`name` is read as the base of an attribute, subscript or call (`P.value`): a literal cannot stand there."""
    return any(isinstance(n, (cst.Attribute, cst.Subscript)) and isinstance(n.value, cst.Name)
               and n.value.value == name or isinstance(n, cst.Call) and isinstance(n.func, cst.Name)
               and n.func.value == name for n in preorder(node))


def _assign(target: cst.BaseAssignTargetExpression, value: cst.BaseExpression) -> cst.SimpleStatementLine:
    return cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(target)], value)])


def _literal(node: cst.BaseExpression) -> bool:
    if isinstance(node, (cst.Integer, cst.Float, cst.SimpleString)):
        return True
    if isinstance(node, cst.Name):
        return node.value in ("True", "False", "None")
    return isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) and _literal(node.expression)


def _constant(test: cst.BaseExpression) -> object:
    """The value of a test made only of literals (`1 == 2`, `True and 3 > 1`); `_NOT` where it reads anything else."""
    try:
        tree = ast.parse(cst.Module([]).code_for_node(test), mode="eval")
    except SyntaxError:
        return _NOT
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Expression, ast.Constant, ast.Compare, ast.BoolOp, ast.UnaryOp, ast.BinOp,
                                 ast.cmpop, ast.boolop, ast.unaryop, ast.operator)):
            return _NOT
    try:
        return bool(eval(compile(tree, "<test>", "eval"), {"__builtins__": {}}))  # noqa: S307 - literals only
    except Exception:  # noqa: BLE001 - a division by zero, ...: leave the test to Triton
        return _NOT


_NOT = object()


def _folded(statements: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """`if` statements whose test the inlined literals decide, replaced by the branch taken (at any depth)."""
    out: list[cst.BaseStatement] = []
    for statement in statements:
        if isinstance(statement, cst.If):
            taken = _branch(statement)
            if taken is not None:
                out.extend(_folded(taken))
                continue
        out.append(statement.visit(_FoldInside()) if isinstance(statement, cst.BaseCompoundStatement) else statement)
    return out


def _branch(statement: cst.If) -> list[cst.BaseStatement] | None:
    value = _constant(statement.test)
    if value is _NOT:
        return None
    if value:
        return _statements(statement.body)
    orelse = statement.orelse
    if orelse is None:
        return []
    if isinstance(orelse, cst.If):
        taken = _branch(orelse)
        return taken if taken is not None else [orelse]
    return _statements(orelse.body)


def _statements(block: cst.BaseSuite) -> list[cst.BaseStatement]:
    """A block's statements; a one-line suite (`if c: x = 1`) as one statement line."""
    if isinstance(block, cst.SimpleStatementSuite):
        return [cst.SimpleStatementLine(list(block.body))]
    return list(block.body)  # type: ignore[attr-defined]


class _FoldInside(cst.CSTTransformer):
    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        body = _folded(list(updated.body))
        return updated.with_changes(body=body or [cst.SimpleStatementLine([cst.Pass()])])

