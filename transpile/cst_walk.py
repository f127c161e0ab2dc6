"""A read-only libcst traversal that does not rebuild the tree.

libcst visits a tree with one method for visitors and transformers alike: every node's
``_visit_and_replace_children`` visits the children and then constructs (and validates) a new copy of the node. A
`CSTVisitor` throws that copy away, yet paying for it is most of the cost of every read-only walk: the metadata
providers (scopes and qualified names), the analyses' visitors, `names_in`, `calls_in`, ... This module walks the same
children, in the same (lexical) order, with the same callbacks (``on_visit``, ``on_visit_attribute``,
``on_leave_attribute``, ``on_leave``), without constructing anything. `install` makes ``CSTNode.visit`` use it for
`CSTVisitor` instances (a `CSTTransformer` still goes through libcst's own code); `walk` is the same for callers that
want it explicitly.

`transform` is ``node.visit(transformer)`` for a `CSTTransformer` that returns the nodes it does not change: libcst
copies every node of the tree, changed or not; `transform` walks the same children with the same callbacks and
rebuilds only the nodes below which something changed (with libcst's own ``_visit_and_replace_children``, handed the
children's results, so removals and flattening behave as in libcst). A transformer thus sees, as ``updated_node``,
the original node itself where nothing below it changed, and the result shares every unchanged subtree with the
input (caches keyed by node, like `cst_utils.node_code`, then hit for them).

Each node type's fields, in the order libcst visits them, are read once from its ``_visit_and_replace_children`` by
running it on a stand-in whose every field records its name (`_fields`).
"""

from __future__ import annotations

import functools

import libcst
from libcst import CSTNode, CSTTransformer, CSTValidationError, CSTVisitor, FlattenSentinel, Module, RemovalSentinel
from libcst._batched_visitor import BatchableCSTVisitor, _BatchedCSTVisitor
from libcst._nodes.internal import CodegenState
from libcst.metadata import scope_provider
from libcst.metadata.scope_provider import ScopeVisitor

# Fields that libcst visits without attribute callbacks when they are None (`format_spec=... if x is not None else
# None`); every other optional field gets its callbacks whether or not it is set.
_SILENT_WHEN_NONE = {("FormattedStringExpression", "format_spec"), ("TemplatedStringExpression", "format_spec")}

# The node types that can hold no `Name` (and so no expression, statement or call): whitespace, comments,
# punctuation, brackets, operators, number and string literals. Their children are only such nodes. A walk skips them
# for a visitor without methods for any of them: every callback there would be a no-op. (tests/test_cst_walk.py
# derives the set from libcst's field types.)
TOKENS: frozenset[type] = frozenset(getattr(libcst, name) for name in (
    "Add", "AddAssign", "And", "AssignEqual", "Asynchronous", "BitAnd", "BitAndAssign", "BitInvert", "BitOr",
    "BitOrAssign", "BitXor", "BitXorAssign", "Break", "Colon", "Comma", "Comment", "Continue", "Divide", "DivideAssign",
    "Dot", "Ellipsis", "EmptyLine", "Equal", "Float", "FloorDivide", "FloorDivideAssign", "FormattedStringText",
    "GreaterThan", "GreaterThanEqual", "Imaginary", "ImportStar", "In", "Integer", "Is", "IsNot", "LeftCurlyBrace",
    "LeftParen", "LeftShift", "LeftShiftAssign", "LeftSquareBracket", "LessThan", "LessThanEqual", "MatrixMultiply",
    "MatrixMultiplyAssign", "Minus", "Modulo", "ModuloAssign", "Multiply", "MultiplyAssign", "Newline", "Not",
    "NotEqual", "NotIn", "Or", "ParamSlash", "ParamStar", "ParenthesizedWhitespace", "Pass", "Plus", "Power",
    "PowerAssign", "RightCurlyBrace", "RightParen", "RightShift", "RightShiftAssign", "RightSquareBracket",
    "Semicolon", "SimpleString", "SimpleWhitespace", "Subtract", "SubtractAssign", "TemplatedStringText",
    "TrailingWhitespace",
) if hasattr(libcst, name))

_FIELDS: dict[type, tuple[str, ...]] = {}


class _Shapes(dict):
    """What a field's value is, by its type: 1 a node, 2 a sequence (of nodes), 0 anything else (None,
    `MaybeSentinel`). Looked up once per type: `isinstance` against `CSTNode`, an abstract base class, costs several
    times a dictionary look-up, and the walks below ask it of every field of every node."""

    def __missing__(self, kind: type) -> int:
        shape = self[kind] = 1 if issubclass(kind, CSTNode) else 2 if issubclass(kind, (tuple, list)) else 0
        return shape


_SHAPE: dict[type, int] = _Shapes()
_ORIGINAL_VISIT = CSTNode.visit
_ORIGINAL_RECORD = CodegenState.record_syntactic_position
_ORIGINAL_GET_VISITORS = BatchableCSTVisitor.get_visitors
_ORIGINAL_SCOPE_LEAVE = ScopeVisitor.on_leave


class _Recorder(CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.fields: list[str] = []

    def on_visit_attribute(self, node: CSTNode, attribute: str) -> None:
        self.fields.append(attribute)


class _StandIn:
    """Every attribute is this object: a child that visits as itself, an empty sequence, never None."""

    def __getattr__(self, name: str) -> "_StandIn":
        return self

    def visit(self, visitor: object) -> "_StandIn":
        return self

    def __iter__(self):
        return iter(())


def _fields(kind: type) -> tuple[str, ...]:
    fields = _FIELDS.get(kind)
    if fields is None:
        recorder = _Recorder()
        try:
            kind._visit_and_replace_children(_StandIn(), recorder)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - the constructor at its end rejects the stand-ins: the names are recorded
            pass
        fields = _FIELDS[kind] = tuple(recorder.fields)
    return fields


def _signature(kind: type) -> tuple:
    """What `_has_attribute_hooks` and `skipped` read of a visitor class: its libcst base, which of the dispatching
    methods it overrides, and the names of the ``visit_``/``leave_`` methods of its own. Many visitor classes are
    defined inside functions, a new class per call: their answers are kept per signature, not per class."""
    signature = kind.__dict__.get("_cst_walk_signature")  # kept on the class itself (visitor classes come and go)
    if signature is None:
        base = CSTTransformer if issubclass(kind, CSTTransformer) else CSTVisitor
        own = frozenset(name for cls in kind.__mro__ if cls not in base.__mro__ for name in vars(cls)
                        if name.startswith(("visit_", "leave_")))
        signature = (base, tuple(getattr(kind, method) is getattr(base, method) for method in _DISPATCH), own)
        kind._cst_walk_signature = signature  # type: ignore[attr-defined]
    return signature


_DISPATCH = ("on_visit", "on_leave", "on_visit_attribute", "on_leave_attribute")
_HOOKS: dict[tuple, bool] = {}
_SKIPPED: dict[tuple, frozenset[type]] = {}


def _has_attribute_hooks(visitor: CSTVisitor | CSTTransformer) -> bool:
    """Whether `visitor` reacts to ``on_visit_attribute``/``on_leave_attribute`` at all: it overrides them, or it
    defines a ``visit_<Node>_<field>``/``leave_<Node>_<field>`` method of its own (`CSTVisitor` and `CSTTransformer`
    define them all as no-ops; node type names hold no underscore)."""
    signature = _signature(type(visitor))
    hooks = _HOOKS.get(signature)
    if hooks is None:
        _, inherited, own = signature
        hooks = _HOOKS[signature] = not (inherited[2] and inherited[3]) or any(name.count("_") >= 2 for name in own)
    return hooks


def skipped(visitor: CSTVisitor | CSTTransformer) -> frozenset[type]:
    """The node types (`TOKENS`) whose subtrees a walk with `visitor` may skip: all those below which (themselves
    included) it has no method for any node type (`tokens_without`), when it dispatches with libcst's own
    ``on_visit``/``on_leave`` and attribute callbacks (else none). A visitor may give its own set as
    ``cst_walk_skip``."""
    own = getattr(visitor, "cst_walk_skip", None)
    if own is not None:
        return own
    signature = _signature(type(visitor))
    skip = _SKIPPED.get(signature)
    if skip is None:
        _, inherited, names = signature
        methods = {name.split("_")[1] for name in names}
        skip = tokens_without({t for t in TOKENS if t.__name__ in methods}) if all(inherited) else frozenset()
        _SKIPPED[signature] = skip
    return skip


def tokens_without(handled: set[type] | frozenset[type]) -> frozenset[type]:
    """The `TOKENS` types whose subtrees hold no node of a type in `handled`: a token holds other tokens (a `Comma`
    its whitespace, a bare `*` parameter (`ParamStar`) its `Comma`, an `Integer` its parentheses), so a walk for a
    visitor with a method for `Comma` skips neither `Comma` nor `ParamStar`."""
    below = _tokens_below()
    return frozenset(t for t in TOKENS if t not in handled and not below[t] & handled)


_TOKENS_BELOW: dict[type, frozenset[type]] = {}


def _tokens_below() -> dict[type, frozenset[type]]:
    """Each `TOKENS` type and the token types that may lie below it, by libcst's field annotations (read once)."""
    if not _TOKENS_BELOW:
        import inspect
        import typing

        def referenced(annotation: object) -> set[type]:
            if typing.get_origin(annotation) is None:
                if not (inspect.isclass(annotation) and issubclass(annotation, CSTNode)):
                    return set()
                found, stack = set(), [annotation]
                while stack:
                    kind = stack.pop()
                    found |= {kind} & TOKENS
                    stack.extend(kind.__subclasses__())
                return found
            return set().union(*(referenced(a) for a in typing.get_args(annotation)))

        direct = {t: set().union(*(referenced(a) for a in typing.get_type_hints(t).values())) for t in TOKENS}
        for kind in TOKENS:
            seen: set[type] = set()
            stack = list(direct[kind])
            while stack:
                other = stack.pop()
                if other not in seen:
                    seen.add(other)
                    stack.extend(direct[other])
            _TOKENS_BELOW[kind] = frozenset(seen)
    return _TOKENS_BELOW


def walk(node: CSTNode, visitor: CSTVisitor) -> None:
    """``node.visit(visitor)`` for a read-only visitor, without building a copy of the tree."""
    if type(visitor) is _BatchedCSTVisitor and _batched_noop_below(node, visitor):
        # The metadata providers the tool resolves (ScopeProvider, ExpressionContextProvider) only define
        # `visit_Module`, which walks the tree with a visitor of their own: every other callback of the batched walk
        # would find no method to call.
        visitor.on_visit(node)
        visitor.on_leave(node)
        return
    if _has_attribute_hooks(visitor):
        hooked = _attribute_hooked(visitor)
        if hooked is None:
            _walk_with_hooks(node, visitor, skipped(visitor))
        else:
            _walk_with_some_hooks(node, visitor, skipped(visitor), hooked)
    else:
        _walk(node, visitor, skipped(visitor))


def _attribute_hooked(visitor: CSTVisitor) -> frozenset[str] | None:
    """The names of the node types for which `visitor` has ``visit_<Node>_<field>``/``leave_<Node>_<field>`` methods,
    when its attribute callbacks are libcst's own (which call those methods, where they exist, and do nothing else);
    None where it overrides them. libcst's scope analysis has them for `ClassDef` only."""
    _, inherited, own = _signature(type(visitor))
    if not (inherited[2] and inherited[3]):
        return None
    return frozenset(name.split("_")[1] for name in own if name.count("_") >= 2)


def _batched_noop_below(node: CSTNode, visitor: _BatchedCSTVisitor) -> bool:
    """Whether libcst's batched visitor has nothing to call below `node`: `node` is a module (no module lies below
    one), the visitor has no before/after hooks and only `visit_Module`/`leave_Module` methods."""
    if not isinstance(node, Module) or visitor.before_visit is not None or visitor.after_leave is not None:
        return False
    return all(name in ("visit_Module", "leave_Module") for name, methods in visitor.visitor_methods.items() if methods)


def _walk(node: CSTNode, visitor: CSTVisitor, skip: frozenset[type]) -> None:
    if visitor.on_visit(node):
        fields = _FIELDS.get(type(node))
        for name in fields if fields is not None else _fields(type(node)):
            value = getattr(node, name)
            shape = _SHAPE[type(value)]
            if shape == 1:
                if type(value) not in skip:
                    _walk(value, visitor, skip)
            elif shape == 2:
                for child in value:
                    if type(child) not in skip:
                        _walk(child, visitor, skip)
    visitor.on_leave(node)


def _walk_with_hooks(node: CSTNode, visitor: CSTVisitor, skip: frozenset[type]) -> None:
    if visitor.on_visit(node):
        kind = type(node)
        fields = _FIELDS.get(kind)
        for name in fields if fields is not None else _fields(kind):
            value = getattr(node, name)
            if value is None and (kind.__name__, name) in _SILENT_WHEN_NONE:
                continue
            visitor.on_visit_attribute(node, name)
            shape = _SHAPE[type(value)]
            if shape == 1:
                if type(value) not in skip:
                    _walk_with_hooks(value, visitor, skip)
            elif shape == 2:
                for child in value:
                    if type(child) not in skip:
                        _walk_with_hooks(child, visitor, skip)
            visitor.on_leave_attribute(node, name)
    visitor.on_leave(node)


def _walk_with_some_hooks(node: CSTNode, visitor: CSTVisitor, skip: frozenset[type], hooked: frozenset[str]) -> None:
    """`_walk_with_hooks` without the attribute callbacks of the node types whose callbacks do nothing (libcst's own
    callbacks, and no method for the type: `_attribute_hooked`)."""
    if visitor.on_visit(node):
        kind = type(node)
        fields = _FIELDS.get(kind)
        hooks = kind.__name__ in hooked
        for name in fields if fields is not None else _fields(kind):
            value = getattr(node, name)
            if hooks:
                if value is None and (kind.__name__, name) in _SILENT_WHEN_NONE:
                    continue
                visitor.on_visit_attribute(node, name)
            shape = _SHAPE[type(value)]
            if shape == 1:
                if type(value) not in skip:
                    _walk_with_some_hooks(value, visitor, skip, hooked)
            elif shape == 2:
                for child in value:
                    if type(child) not in skip:
                        _walk_with_some_hooks(child, visitor, skip, hooked)
            if hooks:
                visitor.on_leave_attribute(node, name)
    visitor.on_leave(node)


def preorder(root: CSTNode) -> list[CSTNode]:
    """`root` and every node below it, in the order a visitor's ``on_visit`` sees them."""
    found: list[CSTNode] = []
    stack = [root]
    while stack:
        node = stack.pop()
        found.append(node)
        kind = type(node)
        fields = _FIELDS.get(kind)
        children: list[CSTNode] = []
        for name in fields if fields is not None else _fields(kind):
            value = getattr(node, name)
            shape = _SHAPE[type(value)]
            if shape == 1:
                children.append(value)
            elif shape == 2:
                children.extend(value)
        stack.extend(reversed(children))
    return found


@functools.lru_cache(maxsize=64)
def nodes_of(root: CSTNode) -> tuple[CSTNode, ...]:
    """`preorder(root)` as a tuple, cached per tree (libcst trees are never changed in place): for the analyses that
    scan a whole function for each tile or loop they are asked about."""
    return tuple(preorder(root))


def semantic_preorder(root: CSTNode) -> list[CSTNode]:
    """`preorder` without the nodes of `TOKENS` types (whitespace, punctuation, literals, ...) below `root`: every
    name, expression, statement and call, in the same order."""
    found: list[CSTNode] = []
    stack = [root]
    tokens, shapes, fields_of = TOKENS, _SHAPE, _FIELDS
    append, push, pop = found.append, stack.append, stack.pop
    while stack:
        node = pop()
        append(node)
        kind = type(node)
        fields = fields_of.get(kind)
        # The children go onto the stack last first, so that they come off it in order.
        for name in reversed(fields if fields is not None else _fields(kind)):
            value = getattr(node, name)
            shape = shapes[type(value)]
            if shape == 1:
                if type(value) not in tokens:
                    push(value)
            elif shape == 2:
                for child in reversed(value):
                    if type(child) not in tokens:
                        push(child)
    return found


def children(node: CSTNode) -> list[CSTNode]:
    """The children of `node`, in the order a visitor sees them (tokens included)."""
    kind = type(node)
    fields = _FIELDS.get(kind)
    children: list[CSTNode] = []
    for name in fields if fields is not None else _fields(kind):
        value = getattr(node, name)
        shape = _SHAPE[type(value)]
        if shape == 1:
            children.append(value)
        elif shape == 2:
            children.extend(value)
    return children


def parent_map(root: CSTNode) -> dict[CSTNode, CSTNode]:
    """Each node below `root` mapped to its parent (what libcst's `ParentNodeProvider` gives)."""
    parents: dict[CSTNode, CSTNode] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        kind = type(node)
        fields = _FIELDS.get(kind)
        for name in fields if fields is not None else _fields(kind):
            value = getattr(node, name)
            shape = _SHAPE[type(value)]
            children = (value,) if shape == 1 else value if shape == 2 else ()
            for child in children:
                parents[child] = node
                stack.append(child)
    return parents


class _Replay(CSTTransformer):
    """Gives libcst's ``_visit_and_replace_children`` of one node the results `transform` already has for its
    children, in the order libcst visits them (nothing is visited again)."""

    def __init__(self, results: list) -> None:
        super().__init__()
        self.results = iter(results)

    def on_visit(self, node: CSTNode) -> bool:
        return False

    def on_leave(self, original_node: CSTNode, updated_node: CSTNode):  # type: ignore[override]
        return next(self.results)

    def on_visit_attribute(self, node: CSTNode, attribute: str) -> None:
        pass

    def on_leave_attribute(self, original_node: CSTNode, attribute: str) -> None:
        pass


def transform(node: CSTNode, transformer: CSTTransformer):  # type: ignore[no-untyped-def]
    """``node.visit(transformer)``, rebuilding only the nodes below which the transformer changed something (see the
    module docstring). A transformer that reacts to attribute callbacks goes through libcst's own visit."""
    if _has_attribute_hooks(transformer):
        return _ORIGINAL_VISIT(node, transformer)
    return _transform(node, transformer, skipped(transformer))


def _transform(node: CSTNode, transformer: CSTTransformer, skip: frozenset[type]):  # type: ignore[no-untyped-def]
    updated = node
    if transformer.on_visit(node):
        kind = type(node)
        fields = _FIELDS.get(kind)
        results: list = []
        changed = False
        for name in fields if fields is not None else _fields(kind):
            value = getattr(node, name)
            shape = _SHAPE[type(value)]
            if shape == 1:
                result = value if type(value) in skip else _transform(value, transformer, skip)
                results.append(result)
                changed = changed or result is not value
            elif shape == 2:
                for child in value:
                    result = child if type(child) in skip else _transform(child, transformer, skip)
                    results.append(result)
                    changed = changed or result is not child
        if changed:
            updated = node._visit_and_replace_children(_Replay(results))
    result = transformer.on_leave(node, updated)
    if _SHAPE[type(result)] != 1 and not isinstance(result, (RemovalSentinel, FlattenSentinel)):
        raise CSTValidationError("Expected a node of type CSTNode or a RemovalSentinel, "
                                 f"but got a return value of {type(result).__name__}")
    return result


def _visit(self: CSTNode, visitor):  # type: ignore[no-untyped-def]
    kind = type(visitor)
    read_only = kind.__dict__.get("_cst_walk_read_only")  # kept on the class (`isinstance` against an ABC is slow)
    if read_only is None:
        read_only = isinstance(visitor, CSTVisitor)
        kind._cst_walk_read_only = read_only
    if read_only:
        walk(self, visitor)
        return self
    return _ORIGINAL_VISIT(self, visitor)


class _NoPosition:
    """What ``CodegenState.record_syntactic_position`` gives when no position is recorded (plain code generation):
    libcst's is a generator-based context manager that only yields, made anew for most nodes of every `code`."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_POSITION = _NoPosition()


def _no_position(self: CodegenState, node: CSTNode, *, start_node: CSTNode | None = None,
                 end_node: CSTNode | None = None) -> _NoPosition:
    return _NO_POSITION


_VISITOR_NAMES: dict[type, tuple[str, ...]] = {}


def _get_visitors(self: BatchableCSTVisitor):  # type: ignore[no-untyped-def]
    """``BatchableCSTVisitor.get_visitors``: the same methods in the same (name) order, their names found once per
    class (libcst's runs `inspect.getmembers` over the instance for every metadata provider of every resolve)."""
    names = _VISITOR_NAMES.get(type(self))
    if names is None:
        methods = _ORIGINAL_GET_VISITORS(self)
        _VISITOR_NAMES[type(self)] = tuple(methods)
        return methods
    return {name: getattr(self, name) for name in names}


_ASSIGNMENT_LIKE: dict[type, bool] = {}


def _scope_on_leave(self: ScopeVisitor, original_node: CSTNode) -> None:
    """``ScopeVisitor.on_leave`` with its `isinstance` against 18 node classes (abstract base classes, each check
    several times the cost of a dictionary look-up) asked once per node type."""
    self.provider.set_metadata(original_node, self.scope)
    kind = type(original_node)
    assignment_like = _ASSIGNMENT_LIKE.get(kind)
    if assignment_like is None:
        assignment_like = _ASSIGNMENT_LIKE[kind] = isinstance(original_node, scope_provider._ASSIGNMENT_LIKE_NODES)
    if assignment_like:
        self.scope._assignment_count += 1
    CSTVisitor.on_leave(self, original_node)


# The libcst code `_scope_on_leave` stands for (as of libcst 1.x): where it reads otherwise, libcst's own stays.
_SCOPE_LEAVE_NAMES = ("provider", "set_metadata", "scope", "isinstance", "_ASSIGNMENT_LIKE_NODES", "_assignment_count",
                      "super", "on_leave")


def install() -> None:
    """Read-only visits of every libcst node (``node.visit(some_CSTVisitor)``) walk without rebuilding the tree; plain
    code generation (``Module.code``, ``code_for_node``) skips the position bookkeeping it does not do anyway (the
    position providers' states keep their own).

    libcst's scope analysis (`ScopeVisitor`, under `ScopeProvider`) skips the token subtrees too, but for string
    literals (it reads annotations written as strings): its own ``on_leave`` records the scope of every node it
    leaves, so the scope map then has no entries for whitespace, punctuation and number literals, which nothing asks
    about (`SourceFile.qualified_name` asks for names and attributes); every other node gets the same scope, and
    assignments are counted alike (no token is one). A batched visitor's methods (the metadata providers') are found
    by name once per class (`_get_visitors`), and the scope analysis asks whether a node is assignment-like once per
    node type (`_scope_on_leave`); a walk calls the attribute callbacks of a visitor that keeps libcst's own only for
    the node types it has ``visit_<Node>_<field>`` methods for (`_attribute_hooked`)."""
    if CSTNode.visit is not _visit:
        CSTNode.visit = _visit  # type: ignore[method-assign]
    if CodegenState.record_syntactic_position is not _no_position:
        CodegenState.record_syntactic_position = _no_position  # type: ignore[method-assign]
    ScopeVisitor.cst_walk_skip = tokens_without({libcst.SimpleString})  # type: ignore[attr-defined]
    BatchableCSTVisitor.get_visitors = _get_visitors  # type: ignore[method-assign]
    if _ORIGINAL_SCOPE_LEAVE.__code__.co_names == _SCOPE_LEAVE_NAMES and ScopeVisitor.__mro__[1] is CSTVisitor:
        ScopeVisitor.on_leave = _scope_on_leave  # type: ignore[method-assign]


def uninstall() -> None:
    CSTNode.visit = _ORIGINAL_VISIT  # type: ignore[method-assign]
    CodegenState.record_syntactic_position = _ORIGINAL_RECORD  # type: ignore[method-assign]
    BatchableCSTVisitor.get_visitors = _ORIGINAL_GET_VISITORS  # type: ignore[method-assign]
    ScopeVisitor.on_leave = _ORIGINAL_SCOPE_LEAVE  # type: ignore[method-assign]
    if "cst_walk_skip" in ScopeVisitor.__dict__:
        del ScopeVisitor.cst_walk_skip  # type: ignore[attr-defined]


__all__ = ["TOKENS", "children", "install", "parent_map", "preorder", "semantic_preorder", "skipped", "tokens_without",
           "transform", "uninstall", "walk"]
