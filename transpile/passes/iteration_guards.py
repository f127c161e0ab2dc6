"""The loads under a dot loop's iteration guard masked by the guard's test.

A loop whose iteration's work runs under one run-time test (`transpile.analysis.guards`: block-sparse attention's
`if kbid:`) loads its tiles inside the `if`. A pipelined copy of such a tile runs ahead of the iteration that reads
it, outside any branch: this pass ands the test into the mask of every load in the branch, so that the copy of an
iteration the guard skips moves nothing (and reads no address the test was there to keep it from)::

        kbid = tl.load(kbid_ptr + start_n // BLOCK_N)
        if kbid:
            k = tl.load(k_ptrs, mask=(k_mask) & (kbid != 0))
            k_scale = tl.load(k_scale_ptr, mask=(kbid != 0))

The loads still run in the branch, so the kernel computes what it did (a masked load reads nothing, and the branch
runs only where the test holds). Only loops whose test reads a name other than the kernel's constexpr parameters are
rewritten (a compile-time test is unswitched: `transpile.passes.unswitch`), and only loads with a mask given by keyword
or none at all (`tl.load(p, m)` is left: the loop is then not read as guarded). Lines are kept.

`mask_guarded_loads(source, facts)` returns the new module text and the functions it replaced (old node -> new), or
None when nothing changes.
"""

from __future__ import annotations

import libcst as cst

from transpile.analysis.guards import guard_shape, guard_term, load_mask
from transpile.cst_utils import names_in
from transpile.cst_walk import preorder
from transpile.discover import JitFunction, ModuleFacts, language_name
from transpile.passes import rewrite_functions
from transpile.source import SourceFile


def mask_guarded_loads(source: SourceFile, facts: ModuleFacts) -> tuple[str, dict[cst.CSTNode, cst.CSTNode]] | None:
    return rewrite_functions(source.module, {fn.node for fn in facts.functions.values()},
                             lambda node: _rewriter(source, facts, node))


def _rewriter(source: SourceFile, facts: ModuleFacts, node: cst.FunctionDef) -> cst.CSTTransformer | None:
    fn = next((f for f in facts.functions.values() if f.node is node), None)
    if fn is None:
        return None
    targets: dict[int, str] = {}  # id(load call) -> the guard's term
    for loop in preorder(node):
        if not isinstance(loop, (cst.For, cst.While)):
            continue
        guard = guard_shape(loop)
        if guard is None or not names_in(guard.test) - _compile_time(fn):
            continue
        term = guard_term(guard.test)
        loads = [call for call in preorder(guard.body) if isinstance(call, cst.Call)
                 and language_name(source.qualified_name(call.func)) in ("load", "core.load")]
        if not loads or any(len([a for a in call.args if a.keyword is None]) > 1 for call in loads):
            continue  # (a positional mask: left as written, and the loop is not read as guarded)
        for call in loads:
            targets[id(call)] = term
    return _Mask(targets) if targets else None


def _compile_time(fn: JitFunction) -> set[str]:
    return {p.name for p in fn.params if p.is_constexpr} | set(fn.heuristics)


class _Mask(cst.CSTTransformer):
    def __init__(self, targets: dict[int, str]) -> None:
        super().__init__()
        self.targets = targets
        self.changed = False

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        term = self.targets.get(id(original))
        if term is None:
            return updated
        self.changed = True
        mask = load_mask(updated)
        if mask is None:
            new = cst.Arg(keyword=cst.Name("mask"), value=cst.parse_expression(term),
                          equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                                whitespace_after=cst.SimpleWhitespace("")))
            args = list(updated.args)
            if args and args[-1].comma is cst.MaybeSentinel.DEFAULT:
                args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            elif args and isinstance(args[-1].comma, cst.Comma):
                # (a trailing comma: the mask goes after it, keeping the call's lines)
                new = new.with_changes(comma=args[-1].comma)
                args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            return updated.with_changes(args=[*args, new])
        anded = cst.BinaryOperation(left=_wrapped(mask), operator=cst.BitAnd(
            whitespace_before=cst.SimpleWhitespace(" "), whitespace_after=cst.SimpleWhitespace(" ")),
            right=cst.parse_expression(term))
        return updated.with_changes(args=[a.with_changes(value=anded) if a.value is mask else a
                                          for a in updated.args])


def _wrapped(node: cst.BaseExpression) -> cst.BaseExpression:
    if getattr(node, "lpar", None):
        return node
    if isinstance(node, (cst.Name, cst.Attribute, cst.Subscript, cst.Call)):
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
