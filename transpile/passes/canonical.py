"""Canonical spellings of a source before it is analysed: a pure, line-preserving rewrite of the jit functions.

Real Triton code writes the same dot and the same operands in several ways. The analyses and the pipeline rules
read one spelling; this pass rewrites the others into it, statement by statement, on the same lines (comments,
blank lines and line numbers stay where they were, so every diagnostic still points at the user's source):

- ``acc += tl.dot(a, b)``, ``acc = acc + tl.dot(a, b)``, ``acc = tl.dot(a, b) + acc`` and
  ``acc = tl.dot(a, b, acc=acc)`` become ``acc = tl.dot(a, b, acc)``; keyword arguments (``out_dtype=``,
  ``input_precision=``, ``allow_tf32=``, ...) are kept. An accumulation is folded into the dot only where the
  function starts the accumulator from ``tl.zeros``/``tl.full`` with a dtype the dot can accumulate in: ``int32``,
  ``float32`` (not for 8-bit integer operands, whose dot result is ``int32``), or the dot's own ``out_dtype``.
- ``acc += tl.dot(a, b) * scale`` is left as it is: scaling the dot result is not scaling the accumulator. The
  pipeline analysis names it in its TT040 note ("dot result scaled before accumulation").
- ``b.T`` becomes ``tl.trans(b)`` (with the file's own name for ``triton.language``).
- A load's ``other=_0``, where the function binds ``_0`` once, to a zero tile of ones in every dimension
  (``_0 = tl.zeros((1, 1), dtype=C.dtype.element_ty)``, Inductor's mm template), becomes ``other=0``: the load
  casts it to the tile's element type either way, and a literal is what the copy engines take (a tile of another
  layout in their copies did not compile).

Loop headers need no rewrite: ``range(0, K, BLOCK_K)``, ``range(tl.cdiv(K, BLOCK_K))`` and ``tl.range(...,
num_stages=, flatten=, warp_specialize=, loop_unroll_factor=)`` are read alike by the loop analysis
(`transpile.analysis.pipeline.loop_header`).

`canonicalize(source, facts)` returns the rewritten module text (the input text itself when nothing changes).
"""

from __future__ import annotations

import libcst as cst

from transpile.cst_utils import module_code, names_int8, rescaled, single_definitions
from transpile.cst_walk import transform
from transpile.discover import ModuleFacts, discover, language_alias, language_name
from transpile.source import SourceFile, parse_source

# Accumulator dtypes (as the tail of their source text) a dot accumulates in without an `out_dtype`.
_FOLD_DTYPES = ("float32", "fp32", "int32")


def canonicalize_text(text: str, path: str = "<string>") -> str:
    """The canonical text of a source file (parses it; for tests and tools)."""
    source = parse_source(text, path)
    return canonicalize(source, discover(source))


def canonicalize(source: SourceFile, facts: ModuleFacts) -> str:
    functions = {fn.node for fn in facts.functions.values()}
    if not functions:
        return source.text
    # Only the jit functions change (they are top-level statements): the rest of the module is not visited, and
    # its text comes from the per-statement cache the emitter shares.
    canonical = _Canonical(source, functions)
    module = source.module
    return module_code(module.with_changes(body=[transform(s, canonical) if s in functions else s
                                                      for s in module.body]))


class _Canonical(cst.CSTTransformer):
    def __init__(self, source: SourceFile, functions: set[cst.FunctionDef]) -> None:
        super().__init__()
        self.source = source
        self.functions = functions
        self.depth = 0  # > 0 inside a jit function
        self.accumulators: dict[str, str] = {}  # accumulator name -> dtype text of its tl.zeros/tl.full start
        self.int8 = False  # the function mentions 8-bit integer types
        self.lang = ""  # the function's name for triton.language (`tl`)
        self.zero_tiles: set[str] = set()  # names bound once to a zero tile of ones (`_0 = tl.zeros((1, 1), ...)`)

    # -- scope --------------------------------------------------------------------------------------------------

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        if node in self.functions:
            self.depth += 1
            self.accumulators = _accumulator_dtypes(self.source, node)
            self.int8 = names_int8(node)
            self.lang = language_alias(self.source, node)
            self.zero_tiles = _zero_tiles(self.source, node)
        return True

    # -- `other=_0` (a zero tile of ones) -> `other=0` -----------------------------------------------------------

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if self.depth == 0 or not self.zero_tiles or language_name(
                self.source.qualified_name(original_node.func)) not in ("load", "core.load"):
            return updated_node
        positional = [i for i, a in enumerate(updated_node.args) if a.keyword is None]
        at = next((i for i, a in enumerate(updated_node.args) if a.keyword is not None and a.keyword.value == "other"),
                  positional[2] if len(positional) > 2 else None)
        if at is None:
            return updated_node
        arg = updated_node.args[at]
        if not (isinstance(arg.value, cst.Name) and arg.value.value in self.zero_tiles):
            return updated_node
        args = list(updated_node.args)
        args[at] = arg.with_changes(value=cst.Integer("0"))
        return updated_node.with_changes(args=args)

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        if original_node in self.functions:
            self.depth -= 1
        return updated_node

    # -- `b.T` -> `tl.trans(b)` ---------------------------------------------------------------------------------

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        if self.depth == 0 or not self.lang or original_node.attr.value != "T":
            return updated_node
        if self.source.qualified_name(original_node) is not None and \
                language_name(self.source.qualified_name(original_node)) is not None:
            return updated_node  # a module attribute, not a tensor's transpose
        value = updated_node.value.with_changes(lpar=[], rpar=[]) if isinstance(
            updated_node.value, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) else updated_node.value
        return cst.Call(func=cst.Attribute(cst.Name(self.lang), cst.Name("trans")), args=[cst.Arg(value)],
                        lpar=updated_node.lpar, rpar=updated_node.rpar)

    # -- accumulations into the dot ------------------------------------------------------------------------------

    def leave_AugAssign(self, original_node: cst.AugAssign, updated_node: cst.AugAssign) -> cst.BaseSmallStatement:
        if self.depth == 0 or not isinstance(updated_node.operator, cst.AddAssign):
            return updated_node
        target = updated_node.target
        if not isinstance(target, cst.Name):
            return updated_node
        folded = self._fold(original_node.value, updated_node.value, target.value)
        if folded is None:
            return updated_node
        return cst.Assign(targets=[cst.AssignTarget(target)], value=folded,
                          semicolon=updated_node.semicolon)

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        if self.depth == 0 or len(updated_node.targets) != 1:
            return updated_node
        target = updated_node.targets[0].target
        if not isinstance(target, cst.Name):
            return updated_node
        name = target.value
        original, value = original_node.value, updated_node.value
        # `acc = tl.dot(a, b, acc=acc)`
        if isinstance(value, cst.Call) and self._is_dot(original):
            moved = _acc_keyword_to_positional(value, name)
            return updated_node if moved is None else updated_node.with_changes(value=moved)
        # `acc = acc + tl.dot(a, b)` / `acc = tl.dot(a, b) + acc`
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add) and not value.lpar \
                and isinstance(original, cst.BinaryOperation):
            for dot_orig, dot_new, other in ((original.right, value.right, value.left),
                                             (original.left, value.left, value.right)):
                if isinstance(other, cst.Name) and other.value == name:
                    folded = self._fold(dot_orig, dot_new, name)
                    if folded is not None:
                        return updated_node.with_changes(value=folded)
                elif rescaled(other, name) and not other.lpar:
                    # `acc = acc * alpha[:, None] + tl.dot(p, v)` (the online softmax's rescale and PV in one
                    # line): the rescaled accumulator is the dot's, `tl.dot(p, v, acc * alpha[:, None])`
                    folded = self._fold(dot_orig, dot_new, name, other)
                    if folded is not None:
                        return updated_node.with_changes(value=folded)
        return updated_node

    def _is_dot(self, node: cst.BaseExpression, name: str = "dot") -> bool:
        """`node` calls `tl.<name>` (`tl.dot`, or `tl.dot_scaled`)."""
        return isinstance(node, cst.Call) and language_name(self.source.qualified_name(node.func)) in (
            name, f"core.{name}")

    def _fold(self, original: cst.BaseExpression, value: cst.BaseExpression, acc: str,
              start: cst.BaseExpression | None = None) -> cst.Call | None:
        """`tl.dot(a, b[, kw=...])` with `acc` (or `start`, an expression of it) passed as its accumulator, or None
        when it must stay apart."""
        if self._is_dot(original, "dot_scaled") and isinstance(value, cst.Call) and not value.lpar:
            # `tl.dot_scaled(lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format)`: fp32 products, folded into
            # an fp32 accumulator as its seventh argument
            positional = [a for a in value.args if a.keyword is None]
            keywords = {a.keyword.value for a in value.args if a.keyword is not None}
            if len(positional) != 6 or any(a.star for a in value.args) or keywords & {"acc", "out_dtype"} \
                    or not all(a.keyword is None for a in value.args[:6]) \
                    or _tail(self.accumulators.get(acc) or "") not in ("float32", "fp32"):
                return None
            return _insert_acc(value, acc, 6, start)
        if not (self._is_dot(original) and isinstance(value, cst.Call)) or value.lpar:
            return None
        positional = [a for a in value.args if a.keyword is None]
        keywords = {a.keyword.value: a for a in value.args if a.keyword is not None}
        if len(positional) != 2 or any(a.star for a in value.args) or "acc" in keywords:
            return None
        if not all(a.keyword is None for a in value.args[:2]):
            return None
        dtype = self.accumulators.get(acc)
        if dtype is None:
            return None
        out = keywords.get("out_dtype")
        if out is not None:
            if _tail(_MODULE.code_for_node(out.value)) != _tail(dtype):
                return None
        elif _tail(dtype) not in _FOLD_DTYPES or (_tail(dtype) in ("float32", "fp32") and self.int8):
            return None
        return _insert_acc(value, acc, start=start)


_MODULE = cst.Module([])


def _tail(dtype: str) -> str:
    return dtype.strip().rsplit(".", 1)[-1]


def _insert_acc(call: cst.Call, acc: str, at: int = 2, start: cst.BaseExpression | None = None) -> cst.Call:
    """`call` with `acc` (or the expression `start`) as positional argument `at` (after the operands, before any
    keyword; a dot's third)."""
    args = list(call.args)
    last = args[at - 1]
    new = cst.Arg(cst.Name(acc) if start is None else start,
                  comma=last.comma if last.comma is not cst.MaybeSentinel.DEFAULT else cst.MaybeSentinel.DEFAULT)
    if len(args) > at and new.comma is cst.MaybeSentinel.DEFAULT:
        new = new.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    args[at - 1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    args.insert(at, new)
    return call.with_changes(args=args)


def _acc_keyword_to_positional(call: cst.Call, acc: str) -> cst.Call | None:
    """`tl.dot(a, b, acc=acc, ...)` -> `tl.dot(a, b, acc, ...)`; None when the call is not that."""
    args = list(call.args)
    index = next((i for i, a in enumerate(args) if a.keyword is not None and a.keyword.value == "acc"), None)
    if index is None or len(args) < 3 or any(a.keyword is not None for a in args[:2]) or any(a.star for a in args):
        return None
    arg = args.pop(index)
    if not (isinstance(arg.value, cst.Name) and arg.value.value == acc):
        return None
    if index == len(args):  # it was the last argument: the one now last takes its comma (trailing or none)
        args[-1] = args[-1].with_changes(comma=arg.comma)
    moved = cst.Arg(arg.value, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    if len(args) == 2:
        moved = moved.with_changes(comma=args[1].comma)
    if args[1].comma is cst.MaybeSentinel.DEFAULT or len(args) == 2:
        args[1] = args[1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    args.insert(2, moved)
    return call.with_changes(args=args)


def _accumulator_dtypes(source: SourceFile, fn: cst.FunctionDef) -> dict[str, str]:
    """Names the function starts from `tl.zeros(shape, dtype)` / `tl.full(shape, value, dtype)`, or from a copy of
    such a name: their dtype text."""
    found: dict[str, str] = {}

    class _Visitor(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name):
                return
            value = node.value
            if isinstance(value, cst.Name) and value.value in found:
                # a copy of such a start (`b_o_2 = b_o`, the accumulator of a branch's copy of the code after a
                # compile-time `if`, `passes/branch_tails.py`) starts from it
                found.setdefault(node.targets[0].target.value, found[value.value])
                return
            if not isinstance(value, cst.Call):
                return
            lang = language_name(source.qualified_name(value.func))
            position = {"zeros": 1, "core.zeros": 1, "full": 2, "core.full": 2}.get(lang or "")
            if position is None:
                return
            positional = [a.value for a in value.args if a.keyword is None]
            keywords = {a.keyword.value: a.value for a in value.args if a.keyword is not None}
            dtype = keywords.get("dtype", positional[position] if len(positional) > position else None)
            if dtype is not None:
                found[node.targets[0].target.value] = source.code(dtype).strip()

    fn.visit(_Visitor())
    return found


def _zero_tiles(source: SourceFile, fn: cst.FunctionDef) -> set[str]:
    """Names `fn` binds exactly once (not parameters), to `tl.zeros(shape, ...)` or `tl.full(shape, 0, ...)` with a
    shape of ones."""
    params = {p.name.value for p in fn.params.params}
    found = set()
    for name, value in single_definitions(fn).items():
        if name in params or not isinstance(value, cst.Call) or not value.args:
            continue
        kind = language_name(source.qualified_name(value.func))
        shape = value.args[0].value
        ones = isinstance(shape, (cst.Tuple, cst.List)) and shape.elements and all(
            isinstance(e.value, cst.Integer) and e.value.value == "1" for e in shape.elements)
        zero = kind == "zeros" or (kind == "full" and len(value.args) > 1 and isinstance(value.args[1].value, (
            cst.Integer, cst.Float)) and float(value.args[1].value.value) == 0.0)
        if ones and zero:
            found.add(name)
    return found
