"""Small read-only queries over libcst trees that several analyses and rules share."""

from __future__ import annotations

import ast
import functools
import io
import re
import sys
import tokenize
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import TypeVar

import libcst as cst

from transpile.cst_walk import TOKENS, children, preorder, semantic_preorder

T = TypeVar("T")


# Nodes are immutable and hash by identity: the analyses and rules ask for the names of the same statements several
# times (about three on average), and a libcst visit is the slow part. Bounded so a long directory run stays small.
_NAMES_CACHE: dict[cst.CSTNode, frozenset[str]] = {}


def names_in(node: cst.CSTNode) -> set[str]:
    """Every identifier that occurs in `node` (a fresh set the caller may change)."""
    cached = _NAMES_CACHE.get(node)
    if cached is None:
        cached = frozenset(n.value for n in semantic_preorder(node) if type(n) is cst.Name)
        if len(_NAMES_CACHE) > 100_000:
            _NAMES_CACHE.clear()
        _NAMES_CACHE[node] = cached
    return set(cached)


_CALLS_CACHE: dict[cst.CSTNode, tuple[cst.Call, ...]] = {}


def calls_in(node: cst.CSTNode) -> list[cst.Call]:
    """Every call in `node`, outermost first (a fresh list the caller may change; cached like `names_in`)."""
    cached = _CALLS_CACHE.get(node)
    if cached is None:
        cached = tuple(n for n in semantic_preorder(node) if type(n) is cst.Call)
        if len(_CALLS_CACHE) > 100_000:
            _CALLS_CACHE.clear()
        _CALLS_CACHE[node] = cached
    return list(cached)


def assigned_names(statement: cst.CSTNode) -> set[str]:
    """Names a statement binds: a simple statement line's plain, augmented and annotated assignments (tuple targets
    too); a compound statement's (`if`, `with`, a loop), on any path through it, its loop targets included."""
    names: set[str] = set()
    if isinstance(statement, cst.SimpleStatementLine):
        for small in statement.body:
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    names |= names_in(target.target)
            elif isinstance(small, (cst.AugAssign, cst.AnnAssign)):
                names |= names_in(small.target)
    elif isinstance(statement, (cst.BaseCompoundStatement, cst.Else)):
        for node in preorder(statement):
            if node is not statement and isinstance(node, (cst.SimpleStatementLine, cst.For)):
                names |= assigned_names(node)
        if isinstance(statement, cst.For):
            names |= names_in(statement.target)
    return names


# Generated code, per node and module layout: the emitter needs the text of every top-level statement of a variant
# (the names it uses decide the imports) and then the whole module; statements the rules left alone are the same
# node objects for every target, so their text is made once. Keyed by the node itself (identity), so it stays alive.
_CODE_CACHE: dict[tuple[cst.CSTNode, str, str], str] = {}
_TOKEN_NAMES_CACHE: dict[cst.CSTNode, tuple[frozenset[str], frozenset[str]]] = {}


def node_code(module: cst.Module, node: cst.CSTNode) -> str:
    """``module.code_for_node(node)``, made once per node and layout (indentation, line end)."""
    key = (node, module.default_indent, module.default_newline)
    code = _CODE_CACHE.get(key)
    if code is None:
        code = module.code_for_node(node)
        if len(_CODE_CACHE) > 20_000:
            _CODE_CACHE.clear()
        _CODE_CACHE[key] = code
    return code


_AST_CACHE: dict[tuple[cst.CSTNode, str, str], list[ast.stmt]] = {}


def node_ast(module: cst.Module, node: cst.BaseStatement) -> list[ast.stmt]:
    """``ast.parse(node_code(module, node)).body`` for a top-level statement, made once per node and layout (lines
    count from the statement's first line). Shared: read it, never change it."""
    key = (node, module.default_indent, module.default_newline)
    parsed = _AST_CACHE.get(key)
    if parsed is None:
        parsed = ast.parse(node_code(module, node)).body
        if len(_AST_CACHE) > 20_000:
            _AST_CACHE.clear()
        _AST_CACHE[key] = parsed
    return parsed


def module_code(module: cst.Module) -> str:
    """``module.code``, from the cached text of its statements (`node_code`): the same text, piece by piece."""
    code = "".join(node_code(module, node) for part in (module.header, module.body, module.footer) for node in part)
    if module.has_trailing_newline:
        return code or module.default_newline  # libcst keeps the newline of an empty module
    # libcst drops the last token, always a line end: `\r\n`, `\n` or `\r`
    return code[:-2] if code.endswith("\r\n") else code[:-1] if code else code


def code_names(module: cst.Module, statements: list[cst.BaseStatement], attributes: bool) -> set[str]:
    """Identifiers in the code of `statements` (not in strings or comments); with `attributes=False`, not the names
    after a dot (`gl.extra.libdevice.tanh` uses `gl` only). Tokenizing the generated text is many times faster than a
    libcst visit of the same statements; each statement's names are found once, both kinds in one pass (a statement
    cannot end with a dot, so reading them one by one gives what reading them together gives)."""
    names: set[str] = set()
    which = 0 if attributes else 1
    for statement in statements:
        found = _TOKEN_NAMES_CACHE.get(statement)
        if found is None:
            found = _TOKEN_NAMES_CACHE[statement] = _token_names(node_code(module, statement))
            if len(_TOKEN_NAMES_CACHE) > 20_000:
                _TOKEN_NAMES_CACHE.clear()
                _TOKEN_NAMES_CACHE[statement] = found
        names |= found[which]
    return names


def _token_names(code: str) -> tuple[frozenset[str], frozenset[str]]:
    """(every NAME token, the NAME tokens not right after a `.`) of `code`."""
    if _C_TOKENS is not None:
        return _c_token_names(code)
    names: set[str] = set()
    unqualified: set[str] = set()
    previous = ""
    skip = (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        kind = token.type
        if kind == tokenize.NAME:
            names.add(token.string)
            if previous != ".":
                unqualified.add(token.string)
        if kind not in skip:
            previous = token.string
    return frozenset(names), frozenset(unqualified)


# Python 3.11's C tokenizer (what `tokenize._generate_tokens_from_c_tokenizer` reads): the same NAME tokens, and the
# same other tokens but comments and blank lines (which `_token_names` passes over), as the pure-Python `tokenize`,
# several times faster (tests/test_cst_walk.py compares them). Other versions (its interface changed in 3.12) use
# `tokenize`.
try:
    if sys.version_info[:2] != (3, 11):
        raise ImportError
    from _tokenize import TokenizerIter as _C_TOKENS  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - other Python versions
    _C_TOKENS = None


def _c_token_names(code: str) -> tuple[frozenset[str], frozenset[str]]:
    names: set[str] = set()
    unqualified: set[str] = set()
    previous = ""
    name, skip = tokenize.NAME, (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)
    for string, kind, *_ in _C_TOKENS(code):
        if kind == name:
            names.add(string)
            if previous != ".":
                unqualified.add(string)
        if kind not in skip:
            previous = string
    return frozenset(names), frozenset(unqualified)


_ANALYSES_CACHE: dict[tuple, tuple[object, object, object]] = {}


#: whether a loop's iteration guard is read as the iteration's own statements (`analysis.pipeline.flattened_guards`):
#: part of every `per_loop` key, since a loop's statements differ with it
GUARDS_FLATTENED: ContextVar[bool] = ContextVar("guards_flattened", default=False)


def per_loop(analysis: Callable[..., T]) -> Callable[..., T]:
    """Memoise a pure analysis ``analysis(source, node, plan, *rest)`` of a node of the source tree: every target
    asks for the same loop's plan and dataflow, which do not depend on the target. Results are shared: read them,
    never change them. Keyed by the node (identity), `rest` and keyword options; a hit needs the same source and plan
    objects."""

    @functools.wraps(analysis)
    def memoised(source, node, plan, *rest, **options):  # type: ignore[no-untyped-def]
        key = (analysis, node, GUARDS_FLATTENED.get(), *rest, *sorted(options.items()))
        hit = _ANALYSES_CACHE.get(key)
        if hit is not None and hit[0] is source and hit[1] is plan:
            return hit[2]  # type: ignore[return-value]
        result = analysis(source, node, plan, *rest, **options)
        if len(_ANALYSES_CACHE) > 20_000:
            _ANALYSES_CACHE.clear()
        _ANALYSES_CACHE[key] = (source, plan, result)
        return result

    return memoised


def single_assign(statement: cst.CSTNode) -> tuple[str, cst.BaseExpression] | None:
    """``name = value`` (a line of one statement) as (name, value), else None."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
        return small.targets[0].target.value, small.value
    return None


#: The nodes of integer arithmetic (+, -, *, //) of names and integers, parentheses and whitespace included: with
#: `only_nodes`, an expression of scalars when its names are (`start_n * BLOCK_N`)
INTEGER_ARITHMETIC = (cst.Name, cst.Integer, cst.BinaryOperation, cst.LeftParen, cst.RightParen, cst.Add, cst.Subtract,
                      cst.Multiply, cst.FloorDivide, cst.SimpleWhitespace, cst.ParenthesizedWhitespace, cst.Newline,
                      cst.TrailingWhitespace, cst.EmptyLine, cst.Comment)


def only_nodes(node: cst.CSTNode, allowed: tuple[type, ...]) -> bool:
    """Whether `node` and every node below it (whitespace and punctuation included) is one of the `allowed` types."""
    return all(isinstance(n, allowed) for n in preorder(node))


class _Substitute(cst.CSTTransformer):
    def __init__(self, values: dict[str, cst.BaseExpression]) -> None:
        super().__init__()
        self.values = values

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self.values.get(updated.value, updated)

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        return updated.with_changes(attr=original.attr)  # `x.dtype`: `dtype` is no variable

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        return updated.with_changes(keyword=original.keyword)  # `mask=...`: a parameter's name, no variable


def substituted(node: T, values: dict[str, cst.BaseExpression]) -> T:
    """`node` with the variables named in `values` replaced by those expressions (attribute names and keyword-argument
    names are left alone)."""
    return node.visit(_Substitute(values))  # type: ignore[attr-defined,return-value]


def unparenthesized(node: cst.BaseExpression) -> cst.BaseExpression:
    """`node` without its own parentheses (for use as a whole call argument or operand)."""
    return node.with_changes(lpar=[], rpar=[]) if getattr(node, "lpar", None) else node


_OPERATIONS = (cst.BinaryOperation, cst.Comparison, cst.UnaryOperation, cst.BooleanOperation)


def parenthesized(node: cst.BaseExpression) -> cst.BaseExpression:
    """`node` in parentheses where it is an operation without its own (the argument of a `gl.convert_layout` taken out
    of the call, `gl.convert_layout(c < n, ...)[:, None]` -> `(c < n)[:, None]`: bare, the subscript would take `n`)."""
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()]) \
        if isinstance(node, _OPERATIONS) and not node.lpar else node


#: 8-bit integer element types, by their names in Triton and torch
INT8_TYPES = ("int8", "uint8")


def names_int8(node: cst.CSTNode) -> bool:
    """`node` names an 8-bit integer type in its code (`tl.int8`, `torch.uint8`, `"int8"`), not in a comment (an
    autotune table's `# good for int8`)."""
    return any(isinstance(n, cst.Attribute) and n.attr.value in INT8_TYPES
               or isinstance(n, cst.Name) and n.value in INT8_TYPES
               or isinstance(n, cst.SimpleString) and n.evaluated_value in INT8_TYPES for n in preorder(node))


#: A pointer's element type read in a test, `A.dtype.element_ty` (group 1: the pointer's name)
ELEMENT_TY = re.compile(r"(?<![\w.])(\w+)\.dtype\.element_ty\b")


def element_type_pointer(text: str | None, params: set[str]) -> str | None:
    """The pointer parameter whose element type `text` is (`a_ptr.dtype.element_ty` -> "a_ptr"), None where it is
    not one of `params`' element type."""
    found = ELEMENT_TY.fullmatch(text or "")
    return found.group(1) if found is not None and found.group(1) in params else None


def compile_time(test: cst.BaseExpression, constexprs: set[str]) -> bool:
    """`test` reads only the names `constexprs` and literals, with no call, subscript or attribute: Triton decides it
    when it compiles the kernel."""
    allowed = constexprs | {"True", "False", "None"}
    return not any(isinstance(n, (cst.Call, cst.Subscript, cst.Attribute)) or (
        isinstance(n, cst.Name) and n.value not in allowed) for n in preorder(test))


# The rules build their output from a few hundred distinct snippets of text (`gl.load`, `gl.constexpr`, a layout),
# parsed thousands of times over a directory: each is parsed once. libcst nodes are immutable (a change makes a new
# node), so the same parsed node may sit in several trees.
@functools.lru_cache(maxsize=4096)
def expr(text: str) -> cst.BaseExpression:
    return cst.parse_expression(text)


@functools.lru_cache(maxsize=4096)
def statement(text: str) -> cst.BaseStatement:
    return cst.parse_statement(text)


def sum_terms(node: cst.BaseExpression, strip: Callable[[cst.BaseExpression], cst.BaseExpression] = unparenthesized
              ) -> list[cst.BaseExpression]:
    """The terms of `a + (b + c)`: [a, b, c] (each as `strip` leaves it: parentheses off by default)."""
    node = strip(node)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        return [*sum_terms(node.left, strip), *sum_terms(node.right, strip)]
    return [node]


def conjuncts(node: cst.BaseExpression, strip: Callable[[cst.BaseExpression], cst.BaseExpression] = unparenthesized
              ) -> list[cst.BaseExpression]:
    """The terms of `a & (b & c)`: [a, b, c] (a mask written as a conjunction)."""
    node = strip(node)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitAnd):
        return [*conjuncts(node.left, strip), *conjuncts(node.right, strip)]
    return [node]


def product_factors(node: cst.BaseExpression,
                    strip: Callable[[cst.BaseExpression], cst.BaseExpression] = unparenthesized
                    ) -> list[cst.BaseExpression]:
    """The factors of `a * (b * c)`: [a, b, c]."""
    node = strip(node)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        return [*product_factors(node.left, strip), *product_factors(node.right, strip)]
    return [node]


def broadcast_axis(node: cst.BaseExpression) -> int | None:
    """The axis a vector is laid along in a 2-D broadcast: 0 for `v[:, None]`, 1 for `v[None, :]`, else None."""
    if not isinstance(node, cst.Subscript) or len(node.slice) != 2:
        return None
    parts = tuple("none" if isinstance(e.slice, cst.Index) and isinstance(e.slice.value, cst.Name)
                  and e.slice.value.value == "None" else "all" if isinstance(e.slice, cst.Slice)
                  and e.slice.lower is None and e.slice.upper is None and e.slice.step is None else "?"
                  for e in node.slice)
    return {("all", "none"): 0, ("none", "all"): 1}.get(parts)  # type: ignore[arg-type]


# Nodes are immutable: the names a node reads or binds are found once per node (the TMA rewrite asks for those of the
# same statements many times while it cuts a loop down), by a walk of its semantic nodes (`cst_walk`'s token types
# hold no name). Bounded like `names_in`.
_READS_CACHE: dict[cst.CSTNode, frozenset[str]] = {}
_BOUND_CACHE: dict[cst.CSTNode, frozenset[str]] = {}


def read_names(node: cst.CSTNode) -> set[str]:
    """Variables `node` reads or binds (not attribute names or keyword-argument names)."""
    cached = _READS_CACHE.get(node)
    if cached is None:
        found: set[str] = set()
        stack = [node]
        tokens = TOKENS
        while stack:
            n = stack.pop()
            kind = type(n)
            if kind is cst.Name:
                found.add(n.value)  # type: ignore[attr-defined]
            elif kind is cst.Attribute or kind is cst.Arg:
                stack.append(n.value)  # type: ignore[attr-defined]  # not the attribute's or the keyword's name
            else:
                stack.extend(c for c in children(n) if type(c) not in tokens)
        cached = frozenset(found)
        if len(_READS_CACHE) > 100_000:
            _READS_CACHE.clear()
        _READS_CACHE[node] = cached
    return set(cached)


#: Attributes read for a value's metadata, not its data (`A.dtype.element_ty`, `x.shape`)
METADATA = ("dtype", "type", "shape", "element_ty")


def value_names(node: cst.CSTNode) -> set[str]:
    """The variables whose values `node` computes with (`read_names`), not those it reads only for their metadata
    (`A.dtype.element_ty`, `b.to(a.dtype)`)."""
    if isinstance(node, cst.Attribute) and node.attr.value in METADATA:
        return set()
    if not any(isinstance(n, cst.Attribute) and n.attr.value in METADATA for n in preorder(node)):
        return read_names(node)
    if isinstance(node, (cst.Attribute, cst.Arg)):
        return value_names(node.value)  # (not the attribute's or the keyword's name)
    return set().union(*(value_names(child) for child in node.children))


def statement_reads(statement: cst.BaseStatement) -> set[str]:
    """Variables a statement reads: an assignment's value (an augmented one's target too), anything in others."""
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        small = statement.body[0]
        if isinstance(small, cst.Assign):
            return read_names(small.value)
        if isinstance(small, cst.AnnAssign) and small.value is not None:
            return read_names(small.value)
        if isinstance(small, cst.AugAssign):
            return read_names(small.target) | read_names(small.value)
    return read_names(statement)


def bound_names(node: cst.CSTNode) -> set[str]:
    """Variables assigned anywhere in `node` (assignments, augmented and annotated assignments, loop targets)."""
    cached = _BOUND_CACHE.get(node)
    if cached is None:
        found: set[str] = set()
        for n in semantic_preorder(node):
            kind = type(n)
            if kind is cst.AssignTarget or kind is cst.AugAssign or kind is cst.AnnAssign or kind is cst.For:
                found |= read_names(n.target)  # type: ignore[attr-defined]
        cached = frozenset(found)
        if len(_BOUND_CACHE) > 100_000:
            _BOUND_CACHE.clear()
        _BOUND_CACHE[node] = cached
    return set(cached)


def is_docstring(statement: cst.BaseStatement) -> bool:
    """`statement` is a string on its own line (a docstring where it comes first in a body)."""
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def bound_names_of(statements: list[cst.BaseStatement]) -> set[str]:
    return set().union(*(bound_names(s) for s in statements)) if statements else set()


def call_arguments(call: cst.Call, params: Sequence[str]) -> list[tuple[str | None, cst.Arg]]:
    """Each argument of `call` with the parameter (of the names `params`, in order) it binds: its keyword, or the
    parameter at its position; None for `*args`/`**kwargs` and positions past the parameters."""
    return [(arg.keyword.value if arg.keyword is not None else
             params[position] if arg.star == "" and position < len(params) else None, arg)
            for position, arg in enumerate(call.args)]


def single_definitions(fn: cst.FunctionDef) -> dict[str, cst.BaseExpression]:
    """The value of each name that `fn` assigns exactly once with a plain `name = value` (anywhere in its body; a
    name also bound otherwise, by `+=`, a tuple target or a loop, is left out)."""
    return bindings(fn)[0]


def bindings(fn: cst.FunctionDef) -> tuple[dict[str, cst.BaseExpression], set[str]]:
    """`single_definitions`, and the names `fn` binds more than once other than as `for` targets (`start = 0`, then
    `start += BLOCK` in the loop): their value where a definition reads them may not be their value elsewhere.

    Bindings are counted along a path: the two branches of an `if` with an `else` are alternatives, so a name each
    binds once (with the same value text, the same loop target) is bound once. Those are the copies of a loop that
    the unswitch pass writes per value of a compile-time flag (`rows = start_m + offs_m` in each)."""

    class Tally:
        def __init__(self) -> None:
            self.counts: dict[str, int] = {}
            self.loops: dict[str, int] = {}  # name -> `for` loops that bind it
            self.values: dict[str, cst.BaseExpression] = {}
            self.mixed: set[str] = set()  # names the alternatives bind to different values

        def then(self, other: "Tally") -> None:  # `other`'s statements run after these
            for name, count in other.counts.items():
                self.counts[name] = self.counts.get(name, 0) + count
            for name, count in other.loops.items():
                self.loops[name] = self.loops.get(name, 0) + count
            self.values.update(other.values)
            self.mixed |= other.mixed

        def either(self, other: "Tally") -> None:  # `other`'s statements run instead of these
            names = set(self.counts) | set(other.counts)
            # bound by one alternative only: after the `if`, the value the name had before it on the other path
            one_sided = {n for n in names if bool(self.counts.get(n)) != bool(other.counts.get(n))}
            for name in names - one_sided:
                mine, theirs = self.values.get(name), other.values.get(name)
                if mine is None or theirs is None or not mine.deep_equals(theirs):
                    self.mixed.add(name)  # (two values, or one the walk does not record: `x = y = e`)
            for name, count in other.counts.items():
                self.counts[name] = max(self.counts.get(name, 0), count)
            for name, count in other.loops.items():
                self.loops[name] = max(self.loops.get(name, 0), count)
            for name, value in other.values.items():
                self.values.setdefault(name, value)
            self.mixed |= other.mixed
            # one value text in both alternatives, but reading a name they bind differently (`offs = s + 1`, `s`
            # bound in one of them): not one value
            changed = True
            while changed:  # (through chains of such values)
                changed = False
                for name in names - one_sided - self.mixed:
                    value = self.values.get(name)
                    if value is not None and names_in(value) & (one_sided | self.mixed):
                        self.mixed.add(name)
                        changed = True

    def bind(tally: Tally, target: cst.BaseExpression, weight: int, loop: bool = False) -> None:
        if isinstance(target, cst.Name):
            if loop:
                tally.loops[target.value] = tally.loops.get(target.value, 0) + 1
            else:
                tally.counts[target.value] = tally.counts.get(target.value, 0) + weight
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                bind(tally, element.value, 2, loop)

    def walk(statements) -> Tally:  # noqa: ANN001 - statements only, not their expressions (cheap on big kernels)
        tally = Tally()
        for statement in statements:
            if isinstance(statement, cst.SimpleStatementLine):
                for node in statement.body:
                    if isinstance(node, cst.Assign):
                        for target in node.targets:
                            bind(tally, target.target, 1)
                            if len(node.targets) == 1 and isinstance(target.target, cst.Name):
                                tally.values[target.target.value] = node.value
                    elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
                        bind(tally, node.target, 2)
                    elif any(isinstance(n, (cst.NamedExpr, cst.CompFor)) for n in preorder(node)):
                        for n in preorder(node):  # (rare: walrus and comprehension targets)
                            if isinstance(n, (cst.NamedExpr, cst.CompFor)):
                                bind(tally, n.target, 2)
            elif isinstance(statement, cst.If) and statement.orelse is not None:
                branch = walk(block_statements(statement))
                orelse = statement.orelse
                branch.either(walk([orelse] if isinstance(orelse, cst.If) else block_statements(orelse)))
                tally.then(branch)
            elif isinstance(statement, cst.BaseCompoundStatement):
                if isinstance(statement, cst.For):
                    bind(tally, statement.target, 2, loop=True)
                if isinstance(statement, cst.With):
                    for item in statement.items:
                        if item.asname is not None:
                            bind(tally, item.asname.name, 2)
                tally.then(walk(block_statements(statement)))
                orelse = getattr(statement, "orelse", None)
                while orelse is not None:
                    tally.then(walk(block_statements(orelse)))
                    orelse = getattr(orelse, "orelse", None)
        return tally

    tally = walk(fn.body.body)  # type: ignore[union-attr]
    counts, loop_targets = tally.counts, tally.loops
    single = {name: value for name, value in tally.values.items()
              if counts.get(name) == 1 and name not in loop_targets and name not in tally.mixed}
    rebound = {name for name, count in counts.items() if count > 1 or (count and name in loop_targets)}
    rebound |= {name for name, loops in loop_targets.items() if loops > 1}  # (two loops over `k`)
    rebound |= tally.mixed
    return single, rebound


def block_statements(statement: cst.CSTNode) -> list[cst.BaseStatement]:
    """The statements of a compound statement's indented body (none for other forms: `match`, one-line suites)."""
    body = getattr(statement, "body", None)
    return list(body.body) if isinstance(body, cst.IndentedBlock) else []


def added_to(small: cst.BaseSmallStatement | None) -> tuple[str, cst.BaseExpression] | None:
    """(acc, e) of ``acc += e``, ``acc = acc + e`` or ``acc = e + acc``, else None."""
    if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign) \
            and isinstance(small.target, cst.Name):
        return small.target.value, small.value
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name) \
            and isinstance(small.value, cst.BinaryOperation) and isinstance(small.value.operator, cst.Add):
        name = small.targets[0].target.value
        sides = (small.value.left, small.value.right)
        for side, other in (sides, sides[::-1]):
            if isinstance(other, cst.Name) and other.value == name:
                return name, side
    return None


def rescaled(node: cst.BaseExpression | None, acc: str) -> bool:
    """`node` is ``acc * x`` or ``x * acc``, `x` not reading `acc` (an accumulator rescaled: the online softmax's
    ``acc * alpha[:, None]``)."""
    if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply)):
        return False
    sides = (node.left, node.right)
    return any(isinstance(side, cst.Name) and side.value == acc and acc not in names_in(other)
               for side, other in (sides, sides[::-1]))


def mask_index(args: Sequence[cst.Arg]) -> int | None:
    """Where a load call's mask is among its arguments (`mask=`, or the second positional one), or None."""
    at = next((i for i, a in enumerate(args) if a.keyword is not None and a.keyword.value == "mask"), None)
    positional = [i for i, a in enumerate(args) if a.keyword is None]
    return at if at is not None else positional[1] if len(positional) > 1 else None
