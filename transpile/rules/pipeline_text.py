"""Source-text helpers the pipeline rules share: node text, fresh names, and producer statements renamed for a
later iteration (``k`` -> ``k_next``)."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

_MODULE = cst.Module([])


def code(node: cst.CSTNode) -> str:
    """The source text of `node`, stripped."""
    return _MODULE.code_for_node(node).strip()


class _Rename(cst.CSTTransformer):
    def __init__(self, names: dict[str, str]) -> None:
        super().__init__()
        self.names = names

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        return updated_node.with_changes(value=self.names.get(updated_node.value, updated_node.value))


def rename(node: cst.CSTNode, names: dict[str, str]) -> str:
    """The source text of `node` with the identifiers in `names` replaced."""
    return code(node.visit(_Rename(names)))


def namer(taken: set[str]) -> Callable[[str], str]:
    """A source of names unused in the function: `base`, else `base_`, `base__`, ..."""

    def name(base: str) -> str:
        candidate = base
        while candidate in taken:
            candidate += "_"
        taken.add(candidate)
        return candidate

    return name
