"""Helpers called with scalars in one place and tensors in another, copied once per kind of call.

Triton's JIT compiles a helper anew for every combination of argument types it is called with::

    @triton.jit
    def u64_to_lohi(x):
        return (x >> 32).to(tl.uint32), (x & 0xFFFFFFFF).to(tl.uint32)

    ...  c0, c1 = u64_to_lohi(seed)              # a scalar here
    ...  c2, c3 = u64_to_lohi(offsets.to(tl.uint64))  # a tensor of offsets there

A Gluon helper's layouts, though, are those of one kind of call: the layout analysis reads a helper at its first call
(`LayoutAnalysis.helper_kinds`) and refused the others (TT012). This pass does what the JIT does, in the source: for
each other combination of argument kinds (`scalar`, `tensor(rank 2)`, a tuple, a descriptor) the helper gets a copy
named after the kinds that differ (`u64_to_lohi_s`: scalars; `_compare_and_swap_2d`: rank-2 tensors), written right
after the helper, and the calls of that combination call the copy. Each copy is then analysed, translated (or kept)
on its own. The rewrite is made on the text as the user wrote it, with only the helpers imported from the project's
other modules copied in (`transpile.passes.imported_helpers`), before any other pass, so the copy is also what a
kept kernel calls (as Triton compiles it: one specialisation each); every line of a copy maps back to the helper's
line it copies, so diagnostics inside it point at the user's line.

Only helpers defined at the top level of the file (or copied in from another module), called by their own name and
translated at their first call's kinds are copied (a helper reached through an alias, one refused for another
construct, keeps its TT012: its copies would be kept as Triton too, and the kept kernels would be written with them).
"""

from __future__ import annotations

import libcst as cst

from transpile import cst_walk
from transpile.analysis.layouts import LayoutPlan
from transpile.discover import ModuleFacts

#: Short names of argument kinds, for the copies' names.
_SHORT = {"scalar": "s", "tuple": "t", "descriptor": "desc", "none": "n"}


def kind_conflicts(plans: dict[str, LayoutPlan]) -> bool:
    """Some helper of the file is called with two combinations of argument kinds (a TT012 refusal)."""
    return any(r.code == "TT012" for plan in plans.values() for r in plan.refusals)


def specialise_helpers(facts: ModuleFacts, plans: dict[str, LayoutPlan], excluded: frozenset[str] = frozenset()
                       ) -> tuple[str, list[int], dict[str, str]] | None:
    """The text of `facts`' source with a copy of each helper (but those `excluded`) per other combination of argument
    kinds its calls pass (`plans`: the layout analysis of that source), the new text's line map (as
    `transpile.source.line_map` gives it: new line -> line of the old text) and each copy's helper; None where no
    helper needs a copy."""
    source = facts.source
    text = source.text
    lines = text.split("\n")
    defined = {s.name.value: s for s in source.module.body if isinstance(s, cst.FunctionDef)}
    # (every name the file uses: a copy named like a kernel's parameter or local would be hidden by it there)
    taken = set(defined) | {n.value for n in cst_walk.preorder(source.module) if isinstance(n, cst.Name)}
    copies: dict[tuple[str, tuple[str, ...]], str] = {}  # (helper, kinds) -> the copy's name
    renames: list[tuple[int, int, int, str]] = []  # (line, start column, end column, new name), 0-based columns
    for plan in plans.values():
        for call, (helper, kinds) in plan.helper_calls.items():
            own = plans.get(helper)
            if own is None or own.kinds is None or own.kinds == kinds or helper not in defined or helper in excluded:
                continue
            if any(r.code != "TT012" for r in own.refusals):
                continue  # (the helper is not translated at its own kinds either: a copy would only be kept too)
            # (a call of the helper by its name, or the helper passed as a scan's or reduction's combine function)
            # (or by a module-level alias, `next_power_of_2 = next_power_of_2_bitwise`: the call names the copy)
            named = call.func if isinstance(call, cst.Call) else call
            if not isinstance(named, cst.Name) or (named.value != helper and facts.aliases.get(named.value) != helper):
                continue
            key = (helper, kinds)
            if key not in copies:
                copies[key] = _name(helper, own.kinds, kinds, taken)
                taken.add(copies[key])
            line, column = source.position(named)
            renames.append((line - 1, column - 1, column - 1 + len(named.value), copies[key]))
    if not copies:
        return None
    for line, start, end, new in sorted(renames, reverse=True):  # right to left: earlier columns stay valid
        lines[line] = lines[line][:start] + new + lines[line][end:]
    origin = list(range(1, len(lines) + 1))
    blank = "\r" if text.count("\r\n") > text.count("\n") // 2 else ""  # (a file of CRLF lines: CRLF blank lines)
    # The copies, each after its helper (the last helper first, so that earlier line numbers stay valid)
    by_helper: dict[str, list[str]] = {}
    for (helper, _kinds), name in copies.items():
        by_helper.setdefault(helper, []).append(name)
    placed = sorted(by_helper, key=lambda h: source.positions[defined[h]].end.line, reverse=True)
    for helper in placed:
        node = defined[helper]
        first = source.positions[node.decorators[0] if node.decorators else node].start.line
        last = source.positions[node].end.line
        block = lines[first - 1:last]
        def_line = source.positions[node.name].start.line
        inserted: list[str] = []
        inserted_origin: list[int] = []
        for name in by_helper[helper]:
            copy = list(block)
            i = def_line - first
            column = source.positions[node.name].start.column
            copy[i] = copy[i][:column] + name + copy[i][column + len(helper):]
            inserted += [blank, blank, *copy]
            inserted_origin += [last, last, *range(first, last + 1)]
        lines[last:last] = inserted
        origin[last:last] = inserted_origin
    return "\n".join(lines), [0, *origin, origin[-1] if origin else 1], {name: h for (h, _), name in copies.items()}


def _name(helper: str, kinds: tuple[str, ...], other: tuple[str, ...], taken: set[str]) -> str:
    """The copy's name: the helper's, then the kinds where `other` differs from the helper's own `kinds`."""
    parts = []
    for own, theirs in zip(kinds, other):
        if own != theirs:
            parts.append(_SHORT.get(theirs) or theirs.removeprefix("tensor(rank ").removesuffix(")") + "d")
    if len(parts) > 1 and set(parts) == {"s"}:  # (numbers all: once, `_combine_s` for a combine function's)
        parts = parts[:1]
    base = f"{helper}_{''.join(parts) or 'k'}"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}{n}", n + 1
    return name
