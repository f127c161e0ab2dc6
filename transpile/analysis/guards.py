"""Iteration guards: a dot loop whose iteration's work runs under one run-time test.

Block-sparse attention and its backward skip the key blocks a table marks empty::

    for start_n in range(lo, hi, BLOCK_N):
        kbid = tl.load(kbid_ptr + start_n // BLOCK_N)
        if kbid:                                    # the iteration guard
            k = tl.load(k_ptrs, mask=k_mask)
            qk = tl.dot(q, k)
            ...
            acc = tl.dot(p, v, acc)
        k_ptrs += BLOCK_N * stride_kn

(SpargeAttn, LightX2V's sparse linear attention, native sparse attention's `if i_s <= i_t and i_s >= 0:`). Triton's own
compiler does not pipeline the loads inside such an `if` (each is a synchronous copy in the branch, on AMD and
Hopper alike). `iteration_guard` finds the `if`: the one statement of the loop body (no `else`) holding every dot of
the loop, whose test reads nothing the branch rebinds. `guard_term` is the test as a mask term (`(kbid != 0)`):
`transpile.passes.iteration_guards` ands it into the mask of every load in the branch, so that a copy of the branch's
tiles made for any iteration moves nothing where the guard fails, and the pipeline may then read the branch's
statements as the iteration's own (`analysis.pipeline.loop_body` under `flattened_guards`) and run the consumer's under
the test (the AMD warp pipeline's expander). Pure facts: nothing here edits a tree.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from transpile.cst_utils import assigned_names, mask_index, names_in
from transpile.cst_walk import preorder

_DOTS = ("dot", "dot_scaled")


def _call_name(call: cst.Call) -> str:
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return func.value if isinstance(func, cst.Name) else ""


def _runs_dot(node: cst.CSTNode) -> bool:
    return any(isinstance(n, cst.Call) and _call_name(n) in _DOTS for n in preorder(node))


def guard_shape(loop: cst.For | cst.While) -> cst.If | None:
    """The `if` that guards the iteration of `loop` (the only statement of its body that runs a dot, with no `else`,
    its test rebinding nothing and reading nothing its branch rebinds, its branch free of loops and exits), else
    None. Whether its loads carry the guard is `iteration_guard`'s question."""
    if not isinstance(loop.body, cst.IndentedBlock):
        return None
    holding = [s for s in loop.body.body if _runs_dot(s)]
    if len(holding) != 1 or not isinstance(holding[0], cst.If):
        return None
    guard = holding[0]
    if guard.orelse is not None or not isinstance(guard.body, cst.IndentedBlock):
        return None
    if any(isinstance(n, (cst.NamedExpr, cst.Call)) for n in preorder(guard.test)):
        return None  # (a test that calls or binds: evaluated once, as the source does)
    rebound = set().union(*(assigned_names(s) for s in guard.body.body))
    if names_in(guard.test) & rebound:
        return None
    for node in preorder(guard.body):
        if isinstance(node, (cst.For, cst.While, cst.Break, cst.Continue, cst.Return, cst.With, cst.Try)):
            return None
    # A value the branch carries to the next iteration that a load's address or mask reads (`K_ptrs += step` under
    # the test: keys stored compactly, advanced only where a block is read): a copy made ahead for a later iteration
    # could not tell where that iteration's tile lies.
    addressed = set().union(*(names_in(arg.value) for call in loads_in(guard.body) for arg in call.args), set())
    if _carried(guard.body.body) & addressed:
        return None
    return guard


def _carried(statements: Sequence[cst.BaseStatement]) -> set[str]:
    """Names the statements update from their own value (`x += d`, `x = x + d`)."""
    found: set[str] = set()
    for statement in statements:
        for node in preorder(statement):
            if isinstance(node, cst.AugAssign) and isinstance(node.target, cst.Name):
                found.add(node.target.value)
            elif isinstance(node, cst.Assign):
                targets = {t.target.value for t in node.targets if isinstance(t.target, cst.Name)}
                found |= targets & names_in(node.value)
    return found


def guard_term(test: cst.BaseExpression) -> str:
    """`test`, the guard's test, as a term of a tile's mask: comparisons parenthesised, `and`/`or` as `&`/`|`, `not x`
    as `x == 0`, any other value as `(x != 0)` (an integer flag loaded from a table)."""
    test = _strip(test)
    if isinstance(test, cst.BooleanOperation):
        op = "&" if isinstance(test.operator, cst.And) else "|"
        return f"({guard_term(test.left)} {op} {guard_term(test.right)})"
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return f"({_code(test.expression)} == 0)"
    if isinstance(test, cst.Comparison):
        return f"({_code(test)})"
    return f"({_code(test)} != 0)"


def _strip(node: cst.BaseExpression) -> cst.BaseExpression:
    return node.with_changes(lpar=[], rpar=[]) if getattr(node, "lpar", None) else node


def _code(node: cst.BaseExpression) -> str:
    return cst.Module([]).code_for_node(_strip(node))


def loads_in(node: cst.CSTNode) -> list[cst.Call]:
    """The `load` calls below `node` (pointer loads and descriptor loads alike, by name)."""
    return [n for n in preorder(node) if isinstance(n, cst.Call) and _call_name(n) == "load"]


def load_mask(call: cst.Call) -> cst.BaseExpression | None:
    """The mask a `tl.load` call passes (by keyword, or second positionally: `mask_index`), else None."""
    at = mask_index(call.args)
    return call.args[at].value if at is not None else None


def carries_guard(mask: cst.BaseExpression | None, term: str) -> bool:
    """`mask` is the guard's term, or a conjunction whose last term it is (as the pass writes it)."""
    if mask is None:
        return False
    want = _code(cst.parse_expression(term))
    mask = _strip(mask)
    if _code(mask) == want:
        return True
    return isinstance(mask, cst.BinaryOperation) and isinstance(mask.operator, cst.BitAnd) \
        and _code(mask.right) == want


def iteration_guard(loop: cst.For | cst.While) -> cst.If | None:
    """The iteration guard of `loop` (`guard_shape`) where its branch loads and every load there carries the guard's
    term in its mask (what `passes.iteration_guards` writes), else None. (A branch that only accumulates a dot of
    tiles loaded outside it, `if k != 0: acc = tl.dot(a, b, acc)`, is a guarded dot: `analysis.pipeline.guarded_dot`.)"""
    guard = guard_shape(loop)
    if guard is None:
        return None
    term = guard_term(guard.test)
    loads = loads_in(guard.body)
    return guard if loads and all(carries_guard(load_mask(call), term) for call in loads) else None
