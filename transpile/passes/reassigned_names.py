"""A name a dot loop's iteration binds more than once, each binding but the last given a name of its own.

Kernels reuse a name for a value they build in steps, within one iteration::

    for k_start in range(0, head_dim, BLOCK_K):
        k_offsets = k_start + tl.arange(0, BLOCK_K)
        k_mask = k_offsets < head_dim
        q = tl.load(q_ptrs, mask=(rows[:, None] < seq_len) & k_mask[None, :], other=0.0)
        k_mask = (cols[:, None] < seq_len) & k_mask[None, :]          # (Liger-Kernel's neighborhood attention)
        k = tl.load(k_ptrs, mask=k_mask, other=0.0)

The pipeline planners re-evaluate each load's address and mask for a later iteration, statement by statement; a name
bound twice in an iteration reads as one value assigned both before and after the loads. This pass names each binding
but the last afresh (`k_mask_1`), with the reads that see it::

        k_mask_1 = k_offsets < head_dim
        q = tl.load(q_ptrs, mask=(rows[:, None] < seq_len) & k_mask_1[None, :], other=0.0)
        k_mask = (cols[:, None] < seq_len) & k_mask_1[None, :]

The last binding keeps the name, so code after the loop reads what it read. Only a name that the loads' addresses and
masks read (directly or through the statements that bind what they read), that the loop's own statements (not a
branch of them) bind, each time by a plain `name = value`, and that the iteration does not read before its first
binding (a value carried from the previous iteration, an accumulator, is left as written) is renamed; nothing in a
loop that runs no dot itself (a persistent loop around the dot loop). Lines are kept.

A name a line outside a loop binds (before it at the function's top level, or in a branch beside it: the same product
computed once where a flag allows, looped otherwise), that the loop binds again before reading it and that nothing
after the loop reads (the Triton tutorial's attention backward: `offs_m` makes Q^T's address before the loop, then the
rows each iteration reads), is named afresh in the loop too: the address made before the loop reads the first
value, the iteration its own, and each name has one layout in the variant (one name for both would need a layout
conversion inside the pipelined loop).

`rename_reassigned(source, facts)` returns the new module text and the functions it replaced (old node -> new), or
None when nothing changes.
"""

from __future__ import annotations

import libcst as cst

from transpile.analysis.dot_loops import is_dot_call
from transpile.cst_utils import assigned_names, names_in, read_names, single_assign, substituted
from transpile.cst_walk import semantic_preorder
from transpile.discover import ModuleFacts
from transpile.passes import rewrite_functions
from transpile.source import SourceFile


def rename_reassigned(source: SourceFile, facts: ModuleFacts) -> tuple[str, dict[cst.CSTNode, cst.CSTNode]] | None:
    return rewrite_functions(source.module, {fn.node for fn in facts.functions.values()},
                             lambda fn: _Loops(source, fn))


class _Loops(cst.CSTTransformer):
    def __init__(self, source: SourceFile, fn: cst.FunctionDef) -> None:
        super().__init__()
        self.source = source
        self.changed = False
        self.taken = names_in(fn)
        # (the names each loop of the function's top level, or of its `if`s, shadows: bound outside it, bound again in
        # it and read there only after that binding, read nowhere after it)
        self.shadowed = _shadowed(fn)

    def fresh(self, base: str) -> str:
        i = 1
        while f"{base}_{i}" in self.taken:
            i += 1
        self.taken.add(f"{base}_{i}")
        return f"{base}_{i}"

    def runs_dot(self, node: cst.CSTNode) -> bool:
        """`node` runs a dot itself (in its statements or their branches), not only in a loop nested in it."""
        if isinstance(node, cst.Call) and is_dot_call(self.source, node):
            return True
        return any(self.runs_dot(child) for child in node.children if not isinstance(child, (cst.For, cst.While)))

    def feeding_loads(self, body: list[cst.BaseStatement]) -> set[str]:
        """The names the addresses and masks of the body's loads read, directly or through the statements that bind
        them (the producer slice the pipelined copies re-evaluate): other values (attention's scores and running
        maxima, rebound step by step) are left as written."""
        needed: set[str] = set()
        for node in semantic_preorder(cst.IndentedBlock(body=body)):
            if isinstance(node, cst.Call) and isinstance(node.func, (cst.Attribute, cst.Name)) and (
                    node.func.attr.value if isinstance(node.func, cst.Attribute) else node.func.value) == "load":
                for arg in node.args:
                    needed |= names_in(arg.value)
        frontier = set(needed)
        while frontier:
            name = frontier.pop()
            for statement in body:
                if isinstance(statement, cst.SimpleStatementLine) and name in assigned_names(statement):
                    new = read_names(statement) - needed
                    needed |= new
                    frontier |= new
        return needed

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.For:
        if not isinstance(updated_node.body, cst.IndentedBlock) or not self.runs_dot(original_node.body):
            return updated_node  # (a loop around a dot loop, a persistent tile loop, is left as written)
        body = list(updated_node.body.body)
        bindings: dict[str, list[int]] = {}
        nested: set[str] = set()  # names some compound statement of the body (or a line of several) binds
        for i, statement in enumerate(body):
            assign = single_assign(statement)
            plain = assign is not None and isinstance(statement, cst.SimpleStatementLine) \
                and isinstance(statement.body[0], cst.Assign)
            for name in assigned_names(statement) if isinstance(statement, cst.SimpleStatementLine) else ():
                if plain and assign[0] == name:  # type: ignore[index]
                    bindings.setdefault(name, []).append(i)
                else:
                    nested.add(name)
            if not isinstance(statement, cst.SimpleStatementLine):
                nested |= _bound_in(statement)
        loop_names = names_in(updated_node.target)
        feeding = self.feeding_loads(body)
        changed = False
        renamed: set[str] = set()
        for name in sorted(self.shadowed.get(original_node, ())):
            at = bindings.get(name, [])
            if not at or name in nested or name in loop_names \
                    or any(name in read_names(s) for s in body[:at[0]]) or _reads_own(body[at[0]], name):
                continue
            # (its value before the loop is the one the tiles' addresses made there read; the iteration's own value,
            # each binding of it (`x = tl.load(...)`, then `x = x.to(T)`), under a name of its own, so that each name
            # has one value, and one layout, in the variant)
            new = self.fresh(name)
            for j in range(at[0], len(body)):
                if j in at:
                    body[j] = _with_value(_renamed_target(body[j], name, new),
                                          substituted(_value(body[j]), {name: cst.Name(new)}))
                else:
                    body[j] = substituted(body[j], {name: cst.Name(new)})
            renamed.add(name)
            changed = self.changed = True
        for name, at in sorted(bindings.items()):
            if len(at) < 2 or name in nested or name in loop_names or name not in feeding or name in renamed:
                continue
            # (read before its first binding: the previous iteration's value)
            if any(name in read_names(s) for s in body[:at[0]]) or _reads_own(body[at[0]], name):
                continue
            for first, second in zip(at, at[1:]):
                new = self.fresh(name)
                values = {name: cst.Name(new)}
                body[first] = _renamed_target(body[first], name, new)
                for j in range(first + 1, second):
                    body[j] = substituted(body[j], values)
                body[second] = _with_value(body[second], substituted(_value(body[second]), values))
            changed = self.changed = True
        if not changed:
            return updated_node
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))


def _shadowed(fn: cst.FunctionDef) -> dict[cst.For, set[str]]:
    """For each loop at the top level of `fn`, or in a branch of `if`s there: the names a line outside it binds (a
    line before it at the top level, or in a branch beside it: mamba's `if BLOCK_SIZE_DSTATE <= 128:` computes the
    product once, its `else:` loops), that it binds again, and that no statement after it reads (after the loop in
    its block, and after each `if` around it: the loop's value never leaves it)."""
    found: dict[cst.For, set[str]] = {}

    def outside(loop: cst.For) -> set[str]:
        """The names the simple lines of the function outside `loop` bind."""
        inside = {id(node) for node in semantic_preorder(loop)}
        return set().union(*(assigned_names(node) for node in semantic_preorder(fn.body)
                             if isinstance(node, cst.SimpleStatementLine) and id(node) not in inside))

    def walk(block: list[cst.BaseStatement], after: set[str]) -> None:
        for i, statement in enumerate(block):
            later = after | set().union(*(names_in(s) for s in block[i + 1:]))
            if isinstance(statement, cst.For):
                names = (_bound_in(statement) & outside(statement)) - later - names_in(statement.target)
                if names:
                    found[statement] = names
            elif isinstance(statement, cst.If):
                branch: cst.If | cst.Else | None = statement
                while branch is not None:
                    body = branch.body
                    if isinstance(body, cst.IndentedBlock):
                        walk(list(body.body), later | (names_in(branch.test) if isinstance(branch, cst.If)
                                                       else set()))
                    branch = branch.orelse if isinstance(branch, cst.If) else None

    top = list(fn.body.body)  # type: ignore[union-attr]
    walk(top, set())
    return found


def _bound_in(statement: cst.BaseStatement) -> set[str]:
    names: set[str] = set()
    for node in semantic_preorder(statement):
        if isinstance(node, cst.SimpleStatementLine):
            names |= assigned_names(node)
        elif isinstance(node, cst.For):
            names |= names_in(node.target)
    return names


def _value(statement: cst.BaseStatement) -> cst.BaseExpression:
    return statement.body[0].value  # type: ignore[attr-defined,union-attr]


def _with_value(statement: cst.BaseStatement, value: cst.BaseExpression) -> cst.BaseStatement:
    small = statement.body[0]  # type: ignore[attr-defined]
    return statement.with_changes(body=[small.with_changes(value=value)])  # type: ignore[attr-defined]


def _renamed_target(statement: cst.BaseStatement, name: str, new: str) -> cst.BaseStatement:
    small = statement.body[0]  # type: ignore[attr-defined]
    target = small.targets[0].with_changes(target=cst.Name(new))
    return statement.with_changes(body=[small.with_changes(targets=[target])])  # type: ignore[attr-defined]


def _reads_own(statement: cst.BaseStatement, name: str) -> bool:
    """`name = f(name)`: the binding reads the value before it."""
    return name in names_in(_value(statement))
