"""A read-only libcst traversal that does not rebuild the tree.

libcst visits a tree with one method for visitors and transformers alike: every node's
``_visit_and_replace_children`` visits the children and then constructs (and validates) a new copy of the node. A
`CSTVisitor` throws that copy away, yet paying for it is most of the cost of every read-only walk: the metadata
providers (scopes and qualified names), the analyses' visitors, `names_in`, `calls_in`, ... This module walks the same
children, in the same (lexical) order, with the same callbacks (``on_visit``, ``on_visit_attribute``,
``on_leave_attribute``, ``on_leave``), without constructing anything. `install` makes ``CSTNode.visit`` use it for
`CSTVisitor` instances (a `CSTTransformer` still goes through libcst's own code); `walk` is the same for callers that
want it explicitly.

Each node type's fields, in the order libcst visits them, are read once from its ``_visit_and_replace_children`` by
running it on a stand-in whose every field records its name (`_fields`).
"""

from __future__ import annotations

from libcst import CSTNode, CSTVisitor

# Fields that libcst visits without attribute callbacks when they are None (`format_spec=... if x is not None else
# None`); every other optional field gets its callbacks whether or not it is set.
_SILENT_WHEN_NONE = {("FormattedStringExpression", "format_spec"), ("TemplatedStringExpression", "format_spec")}

_FIELDS: dict[type, tuple[str, ...]] = {}
_ORIGINAL_VISIT = CSTNode.visit


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


def _has_attribute_hooks(visitor: CSTVisitor) -> bool:
    """Whether `visitor` reacts to ``on_visit_attribute``/``on_leave_attribute`` at all: it overrides them, or it
    defines a ``visit_<Node>_<field>``/``leave_<Node>_<field>`` method of its own (`CSTVisitor` defines them all as
    no-ops; node type names hold no underscore)."""
    kind = type(visitor)
    hooks = kind.__dict__.get("_cst_walk_attribute_hooks")  # kept on the class itself (visitor classes come and go)
    if hooks is None:
        own = [cls for cls in kind.__mro__ if cls not in CSTVisitor.__mro__]
        hooks = (kind.on_visit_attribute is not CSTVisitor.on_visit_attribute
                 or kind.on_leave_attribute is not CSTVisitor.on_leave_attribute
                 or any(name.startswith(("visit_", "leave_")) and name.count("_") >= 2
                        for cls in own for name in vars(cls)))
        kind._cst_walk_attribute_hooks = hooks  # type: ignore[attr-defined]
    return hooks


def walk(node: CSTNode, visitor: CSTVisitor) -> None:
    """``node.visit(visitor)`` for a read-only visitor, without building a copy of the tree."""
    if _has_attribute_hooks(visitor):
        _walk_with_hooks(node, visitor)
    else:
        _walk(node, visitor)


def _walk(node: CSTNode, visitor: CSTVisitor) -> None:
    if visitor.on_visit(node):
        fields = _FIELDS.get(type(node))
        for name in fields if fields is not None else _fields(type(node)):
            value = getattr(node, name)
            if isinstance(value, CSTNode):
                _walk(value, visitor)
            elif isinstance(value, (tuple, list)):
                for child in value:
                    _walk(child, visitor)
    visitor.on_leave(node)


def _walk_with_hooks(node: CSTNode, visitor: CSTVisitor) -> None:
    if visitor.on_visit(node):
        kind = type(node)
        fields = _FIELDS.get(kind)
        for name in fields if fields is not None else _fields(kind):
            value = getattr(node, name)
            if value is None and (kind.__name__, name) in _SILENT_WHEN_NONE:
                continue
            visitor.on_visit_attribute(node, name)
            if isinstance(value, CSTNode):
                _walk_with_hooks(value, visitor)
            elif isinstance(value, (tuple, list)):
                for child in value:
                    _walk_with_hooks(child, visitor)
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
            if isinstance(value, CSTNode):
                children.append(value)
            elif isinstance(value, (tuple, list)):
                children.extend(value)
        stack.extend(reversed(children))
    return found


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
            children = (value,) if isinstance(value, CSTNode) else value if isinstance(value, (tuple, list)) else ()
            for child in children:
                parents[child] = node
                stack.append(child)
    return parents


def _visit(self: CSTNode, visitor):  # type: ignore[no-untyped-def]
    if isinstance(visitor, CSTVisitor):
        walk(self, visitor)
        return self
    return _ORIGINAL_VISIT(self, visitor)


def install() -> None:
    """Read-only visits of every libcst node (``node.visit(some_CSTVisitor)``) walk without rebuilding the tree."""
    if CSTNode.visit is not _visit:
        CSTNode.visit = _visit  # type: ignore[method-assign]


def uninstall() -> None:
    CSTNode.visit = _ORIGINAL_VISIT  # type: ignore[method-assign]


__all__ = ["install", "parent_map", "preorder", "uninstall", "walk"]
