"""`transpile.cst_walk`: the read-only walk makes the same callbacks, in the same order, as libcst's own visit."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, ParentNodeProvider

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
