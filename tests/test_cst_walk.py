"""`transpile.cst_walk`: the read-only walk makes the same callbacks, in the same order, as libcst's own visit."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import ExpressionContextProvider, MetadataWrapper, ParentNodeProvider, ScopeProvider

from transpile import cst_walk

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "fixtures").glob("*.py")) + sorted((ROOT / "transpile").rglob("*.py"))


class _Recorder(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.events.append(("visit", id(node)))
        return not isinstance(node, cst.Lambda)  # a visitor may skip children

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.events.append(("leave", id(original_node)))

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        self.events.append(("visit_attribute", id(node), attribute))

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        self.events.append(("leave_attribute", id(original_node), attribute))


class _Names(cst.CSTVisitor):  # no attribute hooks: the walk without them
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def visit_Name(self, node: cst.Name) -> None:
        self.names.append(node.value)


def _libcst_visit(node: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    cst_walk.uninstall()
    try:
        node.visit(visitor)
    finally:
        cst_walk.install()


@pytest.mark.parametrize("path", SOURCES[::3], ids=lambda p: p.name)
def test_same_callbacks_as_libcst(path: Path) -> None:
    module = cst.parse_module(path.read_text(encoding="utf-8"))
    expected, got = _Recorder(), _Recorder()
    _libcst_visit(module, expected)
    cst_walk.walk(module, got)
    assert got.events == expected.events
    names_expected, names_got = _Names(), _Names()
    _libcst_visit(module, names_expected)
    module.visit(names_got)  # installed: CSTNode.visit walks
    assert names_got.names == names_expected.names


def test_parent_map_is_libcsts() -> None:
    module = cst.parse_module((ROOT / "fixtures" / "attention_fwd.py").read_text(encoding="utf-8"))
    parents = MetadataWrapper(module, unsafe_skip_copy=True).resolve(ParentNodeProvider)
    assert cst_walk.parent_map(module) == dict(parents)


def test_transformers_still_rebuild() -> None:
    module = cst.parse_module("x = 1\n")

    class _Rename(cst.CSTTransformer):
        def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
            return updated_node.with_changes(value="y")

    assert module.visit(_Rename()).code == "y = 1\n"


@pytest.mark.parametrize("path", SOURCES[::5], ids=lambda p: p.name)
def test_preorder_is_the_visit_order(path: Path) -> None:
    module = cst.parse_module(path.read_text(encoding="utf-8"))

    class _Order(cst.CSTVisitor):
        def __init__(self) -> None:
            super().__init__()
            self.nodes: list[cst.CSTNode] = []

        def on_visit(self, node: cst.CSTNode) -> bool:
            self.nodes.append(node)
            return True

    order = _Order()
    _libcst_visit(module, order)
    assert [id(n) for n in cst_walk.preorder(module)] == [id(n) for n in order.nodes]


class _Edits(cst.CSTTransformer):
    """Changes a few nodes (renames, a removal, a flattening, a removed optional and sentinel) and records the calls."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.events.append(("visit", id(node)))
        return not isinstance(node, cst.Lambda)

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):  # type: ignore[override]
        self.events.append(("leave", id(original_node), type(updated_node).__name__))
        if isinstance(updated_node, cst.Name) and updated_node.value in ("tl", "BLOCK_SIZE", "n_elements"):
            return updated_node.with_changes(value=updated_node.value.upper() + "_")
        if isinstance(updated_node, cst.Pass):
            return cst.RemovalSentinel.REMOVE  # an emptied line is dropped by libcst's body rules
        if isinstance(updated_node, cst.SimpleStatementLine) and any(isinstance(s, cst.Return) for s in updated_node.body):
            return cst.FlattenSentinel([updated_node, cst.parse_statement("flattened = 1")])
        if isinstance(updated_node, cst.Annotation):
            return cst.RemovalSentinel.REMOVE  # an optional field: None
        if isinstance(updated_node, cst.Comma):
            return cst.RemovalSentinel.REMOVE  # a sentinel field: MaybeSentinel.DEFAULT
        return updated_node


@pytest.mark.parametrize("path", SOURCES[::3], ids=lambda p: p.name)
def test_transform_is_libcsts_visit(path: Path) -> None:
    """`cst_walk.transform` makes libcst's calls in libcst's order and builds the same tree, sharing what it did not
    change with the input."""
    module = cst.parse_module(path.read_text(encoding="utf-8") + "\ndef f(a: int, b=1):\n    pass\n    return a\n")
    expected, got = _Edits(), _Edits()
    cst_walk.uninstall()
    try:
        want = module.visit(expected)
    except TypeError as exc:  # e.g. a required annotation (`x: int = 1`) removed: libcst refuses, and so must we
        with pytest.raises(TypeError, match=str(exc)):
            cst_walk.transform(module, got)
        return
    finally:
        cst_walk.install()
    result = cst_walk.transform(module, got)
    assert got.events == expected.events
    assert result.code == want.code and result.deep_equals(want)
    assert len(result.body) == len(module.body)
    same = [(s, r) for s, r in zip(module.body, result.body) if s.deep_equals(r)]
    assert same and all(s is r for s, r in same)


def test_transform_keeps_unchanged_trees() -> None:
    module = cst.parse_module("x = f(a, b)\n")
    assert cst_walk.transform(module, cst.CSTTransformer()) is module


@pytest.mark.parametrize("path", SOURCES[::4], ids=lambda p: p.name)
def test_metadata_is_libcsts(path: Path) -> None:
    """Scopes and expression contexts resolved through the walk (which skips the batched walk's no-op visits) are
    libcst's."""
    text = path.read_text(encoding="utf-8")

    def resolve(module: cst.Module) -> tuple[list, list]:
        resolved = MetadataWrapper(module, unsafe_skip_copy=True).resolve_many([ScopeProvider,
                                                                                ExpressionContextProvider])
        scopes, contexts = resolved[ScopeProvider], resolved[ExpressionContextProvider]
        nodes = [n for n in cst_walk.preorder(module) if isinstance(n, (cst.Name, cst.Attribute))]
        return ([sorted(q.name for q in scopes[n].get_qualified_names_for(n)) if scopes.get(n) else None
                 for n in nodes], [contexts.get(n) for n in nodes])

    cst_walk.uninstall()
    try:
        expected = resolve(cst.parse_module(text))
    finally:
        cst_walk.install()
    assert resolve(cst.parse_module(text)) == expected


@pytest.mark.parametrize("path", SOURCES[::2], ids=lambda p: p.name)
def test_positions_are_libcsts(path: Path) -> None:
    """`transpile.source.Positions` gives libcst's PositionProvider's positions, and its plain code generation (with
    the position bookkeeping skipped) libcst's code."""
    from libcst.metadata import PositionProvider

    from transpile.source import Positions

    module = cst.parse_module(path.read_text(encoding="utf-8"))
    cst_walk.uninstall()
    try:
        expected = dict(MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider))
        code = module.code
    finally:
        cst_walk.install()
    got = dict(MetadataWrapper(module, unsafe_skip_copy=True).resolve(Positions))
    assert list(got.items()) == list(expected.items())
    assert module.code == code
