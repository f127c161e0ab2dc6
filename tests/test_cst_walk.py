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
        index = {n: i for i, n in enumerate(cst_walk.preorder(module))}
        return ([sorted(q.name for q in scopes[n].get_qualified_names_for(n)) if scopes.get(n) else None
                 for n in nodes], [contexts.get(n) for n in nodes],
                # every node but whitespace, punctuation and number literals: the same kind of scope, of the same node
                [(type(scopes.get(n)).__name__, index.get(getattr(scopes.get(n), "node", None)))
                 for n in cst_walk.semantic_preorder(module)])

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


def test_tokens_hold_no_name() -> None:
    """`cst_walk.TOKENS` is every libcst node type whose fields (by their annotations) can hold no `Name`: the walk
    skips exactly the subtrees where a visitor without methods for them has nothing to do."""
    import dataclasses
    import inspect
    import typing

    nodes = {c for c in (getattr(cst, n) for n in dir(cst)) if inspect.isclass(c) and issubclass(c, cst.CSTNode)
             and dataclasses.is_dataclass(c) and not inspect.isabstract(c) and not c.__name__.startswith("Base")}

    def concrete(kind: type) -> set[type]:
        found, stack = set(), [kind]
        while stack:
            k = stack.pop()
            found |= {k} & nodes
            stack.extend(k.__subclasses__())
        return found

    def referenced(annotation: object) -> set[type]:
        if typing.get_origin(annotation) is None:
            return concrete(annotation) if inspect.isclass(annotation) and issubclass(annotation, cst.CSTNode) else set()
        return set().union(*(referenced(a) for a in typing.get_args(annotation)))

    fields = {k: [referenced(a) for a in typing.get_type_hints(k).values()] for k in nodes}
    holds_name = {cst.Name}
    while True:
        more = {k for k in nodes - holds_name if any(refs & holds_name for refs in fields[k])}
        if not more:
            break
        holds_name |= more
    assert cst_walk.TOKENS == frozenset(nodes - holds_name)


class _Typed(cst.CSTVisitor):
    """Default dispatch, methods for a few node types, a token type (Comma) among them."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple] = []

    def visit_Name(self, node: cst.Name) -> None:
        self.events.append(("Name", id(node)))

    def leave_Call(self, original_node: cst.Call) -> None:
        self.events.append(("Call", id(original_node)))

    def visit_Comma(self, node: cst.Comma) -> None:
        self.events.append(("Comma", id(node)))

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Arg_keyword(self, node: cst.Arg) -> None:
        self.events.append(("Arg.keyword", id(node)))


@pytest.mark.parametrize("path", SOURCES[::3], ids=lambda p: p.name)
def test_skipping_tokens_changes_no_callback(path: Path) -> None:
    module = cst.parse_module(path.read_text(encoding="utf-8"))
    expected, got = _Typed(), _Typed()
    _libcst_visit(module, expected)
    cst_walk.walk(module, got)
    assert got.events == expected.events
    assert cst.Comma not in cst_walk.skipped(got) and cst.SimpleWhitespace in cst_walk.skipped(got)
    assert cst_walk.skipped(_Recorder()) == frozenset()  # its own on_visit: every node
    assert [id(n) for n in cst_walk.semantic_preorder(module)] == [
        id(n) for n in cst_walk.preorder(module) if type(n) not in cst_walk.TOKENS]


class _TypedEdits(cst.CSTTransformer):
    """Default dispatch: renames names, drops the space after commas (a token type it has a method for)."""

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        return updated_node.with_changes(value=updated_node.value + "_") if len(updated_node.value) < 3 else updated_node

    def leave_Comma(self, original_node: cst.Comma, updated_node: cst.Comma) -> cst.Comma:
        return updated_node.with_changes(whitespace_after=cst.SimpleWhitespace(""))


@pytest.mark.parametrize("path", SOURCES[::3], ids=lambda p: p.name)
def test_transform_skipping_tokens_is_libcsts_visit(path: Path) -> None:
    module = cst.parse_module(path.read_text(encoding="utf-8"))
    cst_walk.uninstall()
    try:
        want = module.visit(_TypedEdits())
    finally:
        cst_walk.install()
    assert cst.Comma not in cst_walk.skipped(_TypedEdits()) and cst.Integer in cst_walk.skipped(_TypedEdits())
    got = cst_walk.transform(module, _TypedEdits())
    assert got.code == want.code and got.deep_equals(want)


def test_tokens_holding_a_handled_token_are_walked() -> None:
    """A token holds other tokens (a bare `*` parameter its comma, a `/` its comma, a parenthesised number its
    parentheses, an operator its whitespace): a visitor with a method for one of them gets every callback libcst
    gives, and a transformer edits every one of them."""
    module = cst.parse_module("def f(a, /, b, *, c=(1), **k):\n    return f(a, b, c=(2)) + [x, (3),]\n")
    expected, got = _Typed(), _Typed()
    _libcst_visit(module, expected)
    cst_walk.walk(module, got)
    assert got.events == expected.events and sum(e[0] == "Comma" for e in got.events) == 9
    skipped = cst_walk.skipped(_Typed())
    assert {cst.ParamStar, cst.ParamSlash, cst.Comma} & skipped == set() and cst.Integer in skipped
    cst_walk.uninstall()
    try:
        want = module.visit(_TypedEdits())
    finally:
        cst_walk.install()
    got_tree = cst_walk.transform(module, _TypedEdits())
    assert got_tree.code == want.code and got_tree.deep_equals(want) and "*,c" in got_tree.code
    assert cst.LeftParen not in cst_walk.tokens_without({cst.SimpleWhitespace})
    assert cst.Integer not in cst_walk.tokens_without({cst.LeftParen})
    assert cst_walk.tokens_without(set()) == cst_walk.TOKENS


GOLDENS = sorted((ROOT / "fixtures" / "expected").rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES + GOLDENS[::7], ids=lambda p: str(p.relative_to(ROOT)))
def test_code_names_with_the_c_tokenizer_are_tokenizes(path: Path) -> None:
    """`cst_utils.code_names` reads NAME tokens with Python 3.11's C tokenizer: the same names (with and without those
    after a dot) as the `tokenize` module gives, for whole files and for each top-level statement of them."""
    from transpile import cst_utils

    if cst_utils._C_TOKENS is None:
        pytest.skip("the C tokenizer is read on Python 3.11 only")
    module = cst.parse_module(path.read_text(encoding="utf-8"))
    texts = [module.code, *(module.code_for_node(s) for s in module.body)]
    fast = [cst_utils._token_names(text) for text in texts]
    c_tokens, cst_utils._C_TOKENS = cst_utils._C_TOKENS, None
    try:
        assert [cst_utils._token_names(text) for text in texts] == fast
    finally:
        cst_utils._C_TOKENS = c_tokens
