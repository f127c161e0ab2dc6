"""sm90 cp.async rings: pointer tiles a ring copies in 16-byte vectors, rebuilt in copy layouts in the ring's branch.

A ring whose copies move 16 bytes per thread needs its pointer tiles in a layout with 8 x 16-bit elements per
thread along the contiguous dimension; the kernel's blocked layouts hold 4 (the
kernel's other loads, and the ring's fallback loop, keep them). The statements before the ring that compute the
index vectors and pointer tiles the ring reads are copied at the start of the ring's branch with `_ring` names, in
`_copy_layout` layouts; the ring's fresh tiles (`a_ptrs_next = a_ptrs`) take the translated definition of the tile
they start from (`FreshTiles`). Where that slice cannot be copied safely, nothing is rebuilt. (The AMD direct-to-LDS
rings re-evaluate each copy's addresses and masks per tile instead: `transpile.rules.copy_operands`.)
"""

from __future__ import annotations

import libcst as cst

from transpile.cst_utils import bound_names, bound_names_of, read_names, statement_reads
from transpile.rules.pipeline_text import code, renamed


def blocked_tile_layouts(function: cst.FunctionDef, tiles: dict[str, str]) -> dict[str, tuple[str, str]]:
    """`name: gl.constexpr = _blocked_layout([shape], gl.num_warps())` declarations of the ring's tile shapes:
    layout name -> (shape text, element type)."""
    found: dict[str, tuple[str, str]] = {}
    for statement in function.body.body:
        text = code(statement)
        for shape, dtype in tiles.items():
            if text.endswith(f" = _blocked_layout([{shape}], gl.num_warps())") and ": gl.constexpr = " in text:
                (bound,) = bound_names(statement)
                found[bound] = (shape, dtype)
    return found


def in_copy_layouts(before: list[cst.BaseStatement], ring: cst.If, layouts: dict[str, tuple[str, str]],
                     name, bits: int) -> cst.If | None:  # noqa: ANN001 - namer
    """The ring branch of `ring` with the values it reads that are built (before it) from the blocked `layouts`
    rebuilt at its start in copy layouts, or None where that slice of the function cannot be copied safely
    (a definition inside a compound statement, or one that reads a name reassigned before the ring)."""
    branch = ring.body
    needed = read_names(branch) - bound_names(branch)
    # Which earlier statements compute values in (or derived from) the blocked layouts.
    derived: set[str] = set()
    facts: list[tuple[set[str], set[str], str]] = []  # (bound names, read names, "copy" | "opaque" | "other")
    for statement in before:
        bound, reads = bound_names(statement), statement_reads(statement)
        simple = isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
            and isinstance(statement.body[0], (cst.Assign, cst.AnnAssign, cst.AugAssign)) and len(bound) == 1
        if bound & set(layouts) or not reads & (set(layouts) | derived):
            kind = "other"
            derived -= bound
        else:
            kind = "copy" if simple else "opaque"
            derived |= bound
        facts.append((bound, reads, kind))
    # The statements the ring needs, walking back from its reads.
    keep: list[int] = []
    for i in reversed(range(len(before))):
        bound, reads, kind = facts[i]
        if not bound & needed:
            continue
        if kind == "opaque":
            return None
        if kind == "copy":
            keep.append(i)
            needed = (needed - bound) | reads
        else:
            needed -= bound
    if not keep:
        return None
    renames: dict[str, str] = {}
    lines: list[str] = []
    used = set().union(*(facts[i][1] for i in keep))
    for layout, (shape, dtype) in layouts.items():
        if layout in used:
            renames[layout] = name(layout[: -len("_layout")] + "_copy_layout" if layout.endswith("_layout")
                                   else layout + "_copy")
            extra = "" if bits == 128 else f", {bits}"
            lines.append(f"{renames[layout]}: gl.constexpr = _copy_layout([{shape}], {dtype}, gl.num_warps(){extra})")
    for i in sorted(keep):
        bound, reads, _ = facts[i]
        if any(reads_name not in renames and reads_name in bound_names_of(before[i + 1:])
               for reads_name in reads):
            return None  # the copy would read a value reassigned after the original statement
        small = before[i].body[0]  # type: ignore[attr-defined]
        (target,) = bound
        value = renamed(small.value, renames)
        if isinstance(small, cst.AugAssign) and target not in renames:
            operator = code(small.operator).rstrip("=").strip()
            renames[target] = name(f"{target}_ring")
            lines.append(f"{renames[target]} = {target} {operator} ({value})")
            continue
        renames.setdefault(target, name(f"{target}_ring"))
        text = code(renamed(small, renames))
        lines.append(text)
    header = (f"# The ring copies {bits // 8} bytes per thread: the index vectors and pointer tiles it reads are rebuilt "
              f"in copy\n# layouts ({bits // 16} x 16-bit elements per thread); the fallback loop keeps the blocked "
              "layouts.\n")
    prelude = list(cst.parse_module("pass\n" + header + "\n".join(lines) + "\n").body)[1:]  # comment kept
    branch = renamed(branch, renames)
    return ring.with_changes(body=branch.with_changes(body=[*prelude, *branch.body]))


class FreshTiles(cst.CSTTransformer):
    """`a_ptrs_next = a_ptrs` -> `a_ptrs_next = <the translated value of the one `a_ptrs = ...` outside loops>`."""

    def __init__(self, function: cst.FunctionDef, fresh: dict[str, str]) -> None:
        super().__init__()
        self.fresh = fresh
        self.values: dict[str, cst.BaseExpression] = {}
        wanted = set(fresh.values())
        values = self.values

        class Definitions(cst.CSTVisitor):
            def visit_For(self, node: cst.For) -> bool:
                return False

            def visit_Assign(self, node: cst.Assign) -> None:
                target = node.targets[0].target
                if len(node.targets) == 1 and isinstance(target, cst.Name) and target.value in wanted:
                    values[target.value] = node.value

            def visit_AugAssign(self, node: cst.AugAssign) -> None:
                # (advanced outside the loops, as a pipelined loop leaves a pointer the code after it reads: its
                # definition is no longer its value everywhere, so its copies start from its value)
                if isinstance(node.target, cst.Name) and node.target.value in wanted:
                    advanced.add(node.target.value)

        advanced: set[str] = set()
        function.body.visit(Definitions())
        for name in advanced:
            values.pop(name, None)

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        target, value = updated_node.targets[0].target, updated_node.value
        if isinstance(target, cst.Name) and target.value in self.fresh and isinstance(value, cst.Name) \
                and value.value == self.fresh[target.value] and value.value in self.values:
            return updated_node.with_changes(value=self.values[value.value])
        # (`a_ptrs_next = gl.convert_layout(a_ptrs, <copy layout>)`: a tile whose layout gives a thread too few
        # contiguous bytes for a copy, converted once)
        if isinstance(target, cst.Name) and target.value in self.fresh and isinstance(value, cst.Call) \
                and code(value.func) == "gl.convert_layout" and isinstance(value.args[0].value, cst.Name) \
                and value.args[0].value.value == self.fresh[target.value] and value.args[0].value.value in self.values:
            first = value.args[0].with_changes(value=self.values[value.args[0].value.value])
            return updated_node.with_changes(value=value.with_changes(args=[first, *value.args[1:]]))
        return updated_node
