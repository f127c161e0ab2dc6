"""Block pointers lowered to pointer tiles before anything is analysed (Gluon has no block pointers).

``tl.make_block_ptr(base, shape, strides, offsets, block_shape, order)`` names a tile of a strided tensor;
``tl.advance`` moves it; ``tl.load``/``tl.store`` with ``boundary_check`` read and write it with the dimensions listed
there checked against ``shape``. Triton's own compiler lowers them to pointer arithmetic and masks (its
RewriteTensorPointer pass) before it lays anything out; this pass writes the same lowering into the source, so that
the analyses and rules see the pointer tiles they know (and the TMA rewrite on sm90 sees rectangles):

    p = tl.make_block_ptr(x + off, (M, N), (stride_m, 1), (row, 0), (BM, BN), (1, 0))
    b = tl.load(p, boundary_check=(0, 1), padding_option="zero")
    p = tl.advance(p, (0, BN))

becomes

    p = x + off
    p_row = row
    p_col = 0
    b = tl.load(p + (p_row + tl.arange(0, BM))[:, None] * stride_m + (p_col + tl.arange(0, BN))[None, :],
                mask=((p_row + tl.arange(0, BM))[:, None] < M) & ((p_col + tl.arange(0, BN))[None, :] < N),
                other=0.0)
    p_col = p_col + BN

- The block pointer's name is bound to its base pointer (so ``p.dtype.element_ty`` still names the element type);
  each dimension's offset is a scalar of its own, which ``tl.advance`` adds to (carried through loops as any scalar).
- A checked dimension is masked against its shape; also against 0 where the offset is not provably non-negative
  (Triton checks both bounds). ``padding_option="zero"``/``"nan"`` becomes ``other=0.0``/``float("nan")``.
- Shapes and strides are written where they are read when their names cannot change (parameters never assigned,
  constants, locals assigned once at the top of the function); otherwise bound to names where the pointer is made.
- ``order`` only guides Triton's layout choice for the tile; the pointer tile's addresses carry the same information.

A function is lowered only where every block pointer is made with literal tuples, advanced by literal tuples, and
otherwise only loaded, stored, advanced, copied under another name (``K_block_ptr_1 = K_block_ptr``: the inliner binds
a helper's parameter so; the copy starts from the original's offsets where it is made) or asked for its
``dtype``/``type``, all in that function (a ``X = None`` at the top of the function before compile-time ``if``s
make ``X`` is a placeholder, dropped): one passed to or returned from a function or kept in a tuple is left as
written (the kernel then stays Triton, TT011, with the reason `refusals` gives).

`lower_block_pointers(source, facts)` returns (the rewritten text, its line map, refusals) or None where no function
changes; positions map back to the source's lines through the line map.
"""

from __future__ import annotations

import dataclasses
import functools

import libcst as cst

from transpile.cst_utils import (_token_names, calls_in, compile_time, expr, module_code, names_in, node_code,
                                 unparenthesized)
from transpile.cst_walk import preorder, transform
from transpile.discover import ModuleFacts, discover, language_alias, language_name
from transpile.source import SourceFile, parse_source, replaced_line_map

_MAKE_PARAMS = ("base", "shape", "strides", "offsets", "block_shape", "order")
_AXIS_NAMES = {1: ("off",), 2: ("row", "col")}
_EMPTY = cst.Module([])


def _code(node: cst.CSTNode) -> str:
    return node_code(_EMPTY, node)


@dataclasses.dataclass
class _Record:
    """What one block-pointer name stands for: rank, tile sizes, shape and stride texts (expressions that may be
    read anywhere, or the names they were bound to), and the names of its per-dimension offsets."""
    rank: int
    base: str  # the base pointer's text where it may be read anywhere, else the block pointer's own name
    block: list[str]
    shape: list[str]
    strides: list[str]
    offsets: list[str]
    nonneg: list[bool]


@dataclasses.dataclass
class Refusal:
    """Why the block pointers of `function` are not lowered, at `node` (of the tree `source` parsed)."""
    function: str
    node: cst.CSTNode
    reason: str
    source: SourceFile = dataclasses.field(repr=False)

    @functools.cached_property
    def line(self) -> int:  # (positions are made only when a diagnostic needs one)
        return self.source.position(self.node)[0]


def lower_block_pointers(source: SourceFile, facts: ModuleFacts
                         ) -> tuple[str, list[int] | None, list[Refusal]] | None:
    """The module text with the block pointers of every jit function that allows it lowered (see the module
    docstring), its line map (`transpile.source.line_map`; None where the text is the source's), and why the other
    functions are not lowered; None where no jit function makes a block pointer."""
    refusals: list[Refusal] = []
    replaced: dict[cst.CSTNode, cst.CSTNode] = {}
    taken = set(_token_names(source.text)[0])
    written, text = source.module, source.text  # (what the functions left as they are are written from)
    spelled = _method_advances(source, facts)
    if spelled is not None:
        source = parse_source(spelled, source.path, source.line_map, source.inlined)
        facts = discover(source)
    for fn in facts.functions.values():
        node = fn.node
        if not _makes_block_pointers(source, node):
            continue
        lowering = _Function(source, node, taken)
        result = lowering.lower()
        if isinstance(result, Refusal):
            refusals.append(result)
        elif result is not None:
            note = cst.EmptyLine(indent=False, comment=cst.Comment(
                "# triton-transpile: block pointers written as pointer tiles with masks, as Triton lowers them "
                "(Triton 3.9 and Gluon have none)."))
            replaced[node] = result.with_changes(leading_lines=[*result.leading_lines, note])
    if not replaced and not refusals:
        return None
    if not replaced:
        return text, None, refusals
    module = source.module
    # (the functions not lowered as the user spelled them: `_method_advances` changes nothing but calls, in place)
    text = module_code(module.with_changes(body=[replaced.get(s, w) for s, w in zip(module.body, written.body)]))
    return text, replaced_line_map(module, source.text, replaced, text), refusals


def _method_advances(source: SourceFile, facts: ModuleFacts) -> str | None:
    """The module text with each block pointer's `advance` method written as the language's function
    (`gQ.advance([m * BLOCK_M, 0])` -> `tl.advance(gQ, [m * BLOCK_M, 0])`: Triton's tensor method calls it), on the
    same lines, where a function advances a name it binds to a block pointer so; None where none does."""
    rewritten: dict[cst.CSTNode, cst.CSTNode] = {}
    for fn in facts.functions.values():
        if not _makes_block_pointers(source, fn.node):
            continue  # (the lowering leaves such functions as written: their spelling stays)
        lang = language_alias(source, fn.node)
        pointers = {t.target.value for n in preorder(fn.node) if isinstance(n, cst.Assign) for t in n.targets
                    if isinstance(t.target, cst.Name) and isinstance(n.value, cst.Call)
                    and language_name(source.qualified_name(n.value.func)) in (
                        "make_block_ptr", "core.make_block_ptr", "advance", "core.advance")}
        if not lang or not pointers:
            continue
        node = transform(fn.node, _AdvanceMethod(pointers, lang))
        if node is not fn.node:
            rewritten[fn.node] = node
    if not rewritten:
        return None
    return module_code(source.module.with_changes(body=[rewritten.get(s, s) for s in source.module.body]))


def _makes_block_pointers(source: SourceFile, node: cst.FunctionDef) -> bool:
    return any(language_name(source.qualified_name(c.func)) in ("make_block_ptr", "core.make_block_ptr")
               for c in calls_in(node))


class _AdvanceMethod(cst.CSTTransformer):
    """`p.advance(offsets)` -> `tl.advance(p, offsets)` for the block pointers `pointers`."""

    def __init__(self, pointers: set[str], lang: str) -> None:
        super().__init__()
        self.pointers, self.lang = pointers, lang

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = updated.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "advance" and isinstance(func.value, cst.Name)
                and func.value.value in self.pointers and len(updated.args) == 1 and updated.args[0].keyword is None):
            return updated
        return updated.with_changes(func=cst.Attribute(cst.Name(self.lang), cst.Name("advance")), args=[
            cst.Arg(func.value, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
            updated.args[0].with_changes(comma=cst.MaybeSentinel.DEFAULT)])


class _Function:
    def __init__(self, source: SourceFile, node: cst.FunctionDef, taken: set[str]) -> None:
        self.source = source
        self.node = node
        self.taken = taken
        self.params = {p.name.value for p in (*node.params.params, *node.params.kwonly_params,
                                               *node.params.posonly_params)}
        self.constexprs = {p.name.value for p in (*node.params.params, *node.params.kwonly_params)
                           if p.annotation is not None and "constexpr" in _code(p.annotation.annotation)}
        self.assignments: dict[str, int] = {}  # name -> times bound anywhere in the function
        self.top_once: set[str] = set()  # bound once, by a statement at the top of the body
        self.loop_targets: dict[str, cst.For] = {}
        self.values: dict[str, cst.BaseExpression] = {}  # single top-level `name = value`
        self.nodes = preorder(node.body)
        self.binding_names = {id(n.target) for n in self.nodes if isinstance(n, cst.AssignTarget)}
        self.statement_loops: dict[int, tuple[cst.For, int]] = {}  # id(small statement) -> (loop, index in its body)
        for loop in self.nodes:
            if isinstance(loop, cst.For) and isinstance(loop.body, cst.IndentedBlock):
                for i, statement in enumerate(loop.body.body):
                    if isinstance(statement, cst.SimpleStatementLine):
                        for small in statement.body:
                            self.statement_loops[id(small)] = (loop, i)
        self.placeholders: set[int] = set()  # ids of `X = None` statements the lowering drops
        self._scan_bindings()

    # -- helpers --------------------------------------------------------------------------------------------------

    def lang(self, node: cst.CSTNode) -> str | None:
        if not isinstance(node, cst.Call):
            return None
        name = language_name(self.source.qualified_name(node.func))
        return name[5:] if name is not None and name.startswith("core.") else name

    def refuse(self, node: cst.CSTNode, why: str) -> Refusal:
        return Refusal(self.node.name.value, node, why, self.source)

    def fresh(self, text: str) -> str:
        while text in self.taken:
            text += "_"
        self.taken.add(text)
        return text

    def _scan_bindings(self) -> None:
        top = set()
        self.top_assigns: set[int] = set()  # ids of the assignments that are statements of the body's top level
        for statement in self.node.body.body:  # type: ignore[union-attr]
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, cst.Assign):
                        self.top_assigns.add(id(small))
                    if isinstance(small, cst.Assign) and len(small.targets) == 1:
                        target = small.targets[0].target
                        if isinstance(target, cst.Name):
                            top.add(target.value)
                            self.values[target.value] = small.value
                        elif isinstance(target, cst.Tuple) and isinstance(small.value, cst.Tuple) \
                                and len(target.elements) == len(small.value.elements):
                            for t, v in zip(target.elements, small.value.elements):
                                if isinstance(t.value, cst.Name):
                                    top.add(t.value.value)
                                    self.values[t.value.value] = v.value
        for node in self.nodes:
            targets: list[cst.BaseExpression] = []
            if isinstance(node, cst.AssignTarget):
                targets = [node.target]
            elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
                targets = [node.target]
            elif isinstance(node, cst.For):
                targets = [node.target]
                if isinstance(node.target, cst.Name):
                    self.loop_targets[node.target.value] = node
            elif isinstance(node, (cst.WithItem,)) and node.asname is not None:
                targets = [node.asname.name]
            elif isinstance(node, cst.NamedExpr):
                targets = [node.target]
            for target in targets:
                for name in preorder(target):
                    if isinstance(name, cst.Name):
                        self.assignments[name.value] = self.assignments.get(name.value, 0) + 1
        self.top_once = {n for n in top if self.assignments.get(n) == 1 and n not in self.params}

    def stable(self, node: cst.BaseExpression) -> bool:
        """An expression whose value is the same wherever the function reads it."""
        for sub in preorder(node):
            if isinstance(sub, cst.Name):
                continue
            if not isinstance(sub, (cst.Integer, cst.BinaryOperation, cst.UnaryOperation, cst.LeftParen,
                                    cst.RightParen, cst.BaseBinaryOp, cst.BaseUnaryOp, cst.ParenthesizedWhitespace,
                                    cst.SimpleWhitespace, cst.Newline, cst.TrailingWhitespace, cst.Comment,
                                    cst.EmptyLine)):
                return False
        for name in names_in(node):
            if name in self.params:
                if self.assignments.get(name):
                    return False
            elif name not in self.top_once and self.assignments.get(name):
                return False
        return True

    def nonneg(self, node: cst.BaseExpression, seen: frozenset[str] = frozenset()) -> bool:
        """A value that cannot be negative: literals, program ids, constexpr parameters (tile sizes), loop variables
        counting up from such a value, and sums, products, quotients and remainders of those."""
        node = unparenthesized(node)
        if isinstance(node, cst.Integer):
            return True
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Multiply,
                                                                                cst.FloorDivide, cst.Modulo)):
            return self.nonneg(node.left, seen) and self.nonneg(node.right, seen)
        if isinstance(node, cst.Call):
            return self.lang(node) in ("program_id", "num_programs")
        if isinstance(node, cst.Name) and node.value not in seen:
            name = node.value
            if name in self.constexprs and not self.assignments.get(name):
                return True
            loop = self.loop_targets.get(name)
            if loop is not None and self.assignments.get(name) == 1:
                it = loop.iter
                if isinstance(it, cst.Call) and (_code(it.func) == "range" or self.lang(it) in (
                        "range", "static_range")):
                    args = [a for a in it.args if a.keyword is None]
                    if len(args) == 1:
                        return True
                    if len(args) in (2, 3):
                        return all(self.nonneg(a.value, seen | {name}) for a in (args[0], *args[2:]))
                return False
            if name in self.top_once:
                return self.nonneg(self.values[name], seen | {name})
        return False

    # -- the lowering ---------------------------------------------------------------------------------------------

    def lower(self) -> cst.FunctionDef | Refusal | None:
        makes: dict[str, list[tuple[cst.Assign, dict[str, cst.BaseExpression]]]] = {}
        advances: dict[str, list[tuple[cst.Assign, str, list[cst.BaseExpression]]]] = {}
        allowed: set[int] = set()  # ids of Name nodes read where a block pointer may be
        inline: list[cst.Call] = []
        aliases: list[tuple[cst.Assign, str, cst.Name]] = []
        nones: dict[str, list[cst.Assign]] = {}
        for node in self.nodes:
            kind = self.lang(node)
            if kind in ("load", "store") and isinstance(node, cst.Call) and node.args:
                first = node.args[0]
                if first.keyword is None or first.keyword.value == "pointer":
                    if isinstance(first.value, cst.Name):
                        allowed.add(id(first.value))
                    elif self.lang(first.value) in ("make_block_ptr", "advance"):
                        inline.append(first.value)  # type: ignore[arg-type]
            elif kind == "advance" and isinstance(node, cst.Call) and node.args \
                    and isinstance(node.args[0].value, cst.Name):
                allowed.add(id(node.args[0].value))
            elif isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) \
                    and node.attr.value in ("dtype", "type"):
                allowed.add(id(node.value))
            elif isinstance(node, cst.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0].target, cst.Name):
                name = node.targets[0].target.value
                which = self.lang(node.value)
                if which == "make_block_ptr":
                    args = self._arguments(node.value, _MAKE_PARAMS)  # type: ignore[arg-type]
                    if isinstance(args, Refusal):
                        return args
                    makes.setdefault(name, []).append((node, args))
                elif which == "advance":
                    step = self._advance(node.value)  # type: ignore[arg-type]
                    if isinstance(step, Refusal):
                        return step
                    advances.setdefault(name, []).append((node, *step))
                elif isinstance(node.value, cst.Name) and node.value.value == "None":
                    nones.setdefault(name, []).append(node)  # `K_block_ptr = None` before a flag makes it: below
                elif isinstance(node.value, cst.Name) and node.value.value != name:
                    aliases.append((node, name, node.value))  # `K_block_ptr_1 = K_block_ptr`: decided below
        # A copy of a block pointer made here under another name (`K_block_ptr_1 = K_block_ptr`: the inliner binds a
        # helper's parameter so, `_attn_fwd_inner(..., K_block_ptr, ...)`) is an advance of it by nothing.
        for node, name, value in aliases:
            if value.value in makes:
                rank = len(makes[value.value][0][1]["block_shape"].elements)  # type: ignore[attr-defined]
                advances.setdefault(name, []).append((node, value.value, [cst.Integer("0")] * rank))
                allowed.add(id(value))
        # every make_block_ptr / advance call is one of the forms above
        known = {id(a.value) for sites in makes.values() for a, _ in sites}
        known |= {id(a.value) for sites in advances.values() for a, _, _ in sites}
        known |= {id(c) for c in inline}
        for node in self.nodes:
            if self.lang(node) in ("make_block_ptr", "advance") and id(node) not in known:
                return self.refuse(node, "this block pointer is not assigned to a name or read by `tl.load`/"
                                         "`tl.store` where it is made")
        if not makes and not inline:
            return None
        names = set(makes) | set(advances)
        derived = {src for name, sites in advances.items() for _, src, _ in sites if src != name}  # advanced into another
        self.affine = self._affine(makes, advances, inline)
        records: dict[str, _Record] = {}
        bound: dict[str, tuple[list[str], list[str]]] = {}  # name -> (shape names, stride names) where bound
        for name, sites in makes.items():
            advanced = (name in advances and name not in self.affine) or name in derived or any(
                self.lang(c) == "advance" and _code(c.args[0].value).strip() == name for c in inline)
            record = self._record(name, [args for _, args in sites], bound, advanced)
            if isinstance(record, Refusal):
                return record
            records[name] = record
        for name, sites in advances.items():
            sources = {src for _, src, _ in sites}
            if name in makes:
                if sources != {name}:
                    return self.refuse(sites[0][0], f"`{name}` is made by `tl.make_block_ptr` and also advanced "
                                                    "from another block pointer")
                continue
            others = sources - {name}  # (made from one block pointer, then advanced from itself: a copy advanced)
            if len(others) != 1 or next(iter(others)) not in makes:
                return self.refuse(sites[0][0], f"`{name}` is advanced from a block pointer not made in this "
                                                "function (or from several)")
            src = records[next(iter(others))]
            records[name] = dataclasses.replace(src, base=name, offsets=self._offset_names(name, src.rank),
                                                nonneg=list(src.nonneg))
        for name, sites in advances.items():
            record = records[name]
            if name in self.affine:
                loop, deltas = self.affine[name]
                record.nonneg = [ok and self.nonneg(d) and self.nonneg(loop.target) for ok, d in zip(record.nonneg, deltas)]
                continue
            for _, _, deltas in sites:
                if len(deltas) != record.rank:
                    return self.refuse(sites[0][0], f"`tl.advance` of the rank-{record.rank} block pointer `{name}` "
                                                    f"by {len(deltas)} offsets")
                record.nonneg = [ok and self.nonneg(d) for ok, d in zip(record.nonneg, deltas)]
        # reads of a block pointer's name
        for node in self.nodes:
            if isinstance(node, cst.Name) and node.value in names and id(node) not in allowed:
                if id(node) in self.binding_names:
                    continue
                return self.refuse(node, f"the block pointer `{node.value}` is used here other than by `tl.load`, "
                                         "`tl.store`, `tl.advance` or `.dtype`")
        # `X = None` at the top of the function, where every `make_block_ptr` of `X` stands under compile-time
        # `if`s (tritonbench's attention: `K_block_ptr = None`, made under `if not ENABLE_TMA:`): a placeholder that
        # only names `X` in the other branch, which reads it nowhere (only loads, stores and advances read a block
        # pointer here); the lowering drops it
        placeholders = {name for name, sites in nones.items() if name in makes and all(
            id(site) in self.top_assigns for site in sites) and all(self._under_flags(site) for site, _ in makes[name])}
        self.placeholders = {id(site) for name in placeholders for site in nones[name]}
        for name in sorted(names):  # (in name order: the message names the first, the same in every run)
            if self.assignments.get(name, 0) != len(makes.get(name, ())) + len(advances.get(name, ())) + (
                    len(nones[name]) if name in placeholders else 0):
                return self.refuse(self.node, f"`{name}` holds a block pointer and, elsewhere, another value")
        return transform(self.node, _Rewrite(self, records, bound))  # type: ignore[return-value]

    def _under_flags(self, node: cst.CSTNode) -> bool:
        """Every `if` around `node` (in the function) tests constexpr parameters and literals only, and no loop is."""
        parents = self.source.parents
        at = parents.get(node)
        while at is not None and at is not self.node:
            if isinstance(at, (cst.For, cst.While)):
                return False
            if isinstance(at, cst.If) and not compile_time(at.test, self.constexprs):
                return False
            at = parents.get(at)
        return True

    def _affine(self, makes: dict, advances: dict, inline: list[cst.Call]) -> dict[str, tuple[cst.For, list]]:
        """Block pointers advanced once per iteration of one loop by amounts the loop does not change, made before
        it and not read after it: name -> (loop, deltas). Their loads in the loop read ``offset + i * delta`` for the
        loop's iteration ``i`` (the addresses other kernels write from the loop variable), instead of an offset
        carried from iteration to iteration."""
        found: dict[str, tuple[cst.For, list]] = {}
        inline_advanced = {_code(c.args[0].value).strip() for c in inline if self.lang(c) == "advance"}
        for name, sites in advances.items():
            if len(sites) != 1 or name not in makes or name in inline_advanced:
                continue
            assign, source, deltas = sites[0]
            if source != name:
                continue
            loop, index = self._enclosing_loop(assign)
            if loop is None or not isinstance(loop.target, cst.Name) or self._iteration(loop) is None:
                continue
            if any(self._inside(make, loop) for make, _ in makes[name]):
                continue
            if not all(self.stable(d) or names_in(d) <= self.constexprs for d in deltas):
                continue
            body = list(loop.body.body)  # type: ignore[union-attr]
            if any(name in names_in(statement) for statement in body[index + 1:]):
                continue  # read after the advance in the same iteration
            after = self._statements_after(loop)
            if after is None or any(name in names_in(statement) for statement in after):
                continue
            found[name] = (loop, deltas)
        return found

    def _enclosing_loop(self, assign: cst.Assign) -> tuple[cst.For | None, int]:
        """The `for` loop whose body holds the statement of `assign` at its top level, and its index there."""
        return self.statement_loops.get(id(assign), (None, -1))

    def _inside(self, node: cst.CSTNode, loop: cst.For) -> bool:
        return any(sub is node for sub in preorder(loop))

    def _statements_after(self, loop: cst.For) -> list[cst.CSTNode] | None:
        """Every statement that may run after `loop` (those after it in each enclosing block, and the enclosing
        loops whole); None where that cannot be told."""
        after: list[cst.CSTNode] = []
        path = self._path(self.node, loop)
        if path is None:
            return None
        for parent, child in zip(path, path[1:]):
            block = getattr(parent, "body", None)
            statements = list(getattr(block, "body", ())) if block is not None and not isinstance(block, (list, tuple)) \
                else list(block or ())
            if child in statements:
                after += statements[statements.index(child) + 1:]
            if isinstance(parent, (cst.For, cst.While)) and parent is not loop:
                after.append(parent)
            orelse = getattr(parent, "orelse", None)
            if orelse is not None and orelse is not child:
                after.append(orelse)
        return after

    def _path(self, root: cst.CSTNode, target: cst.CSTNode) -> list[cst.CSTNode] | None:
        if root is target:
            return [root]
        for child in root.children:
            found = self._path(child, target)
            if found is not None:
                return [root, *found]
        return None

    def _iteration(self, loop: cst.For) -> str | None:
        """The loop's iteration count so far as an expression of its variable: `k` for `range(n)`, `(k - a) // s`
        for `range(a, b, s)`; None for other iterables."""
        it = loop.iter
        if not (isinstance(it, cst.Call) and (_code(it.func) == "range" or self.lang(it) == "range")):
            return None
        args = [a for a in it.args if a.keyword is None]
        k = loop.target.value  # type: ignore[attr-defined]
        if not 1 <= len(args) <= 3 or any(a.star for a in it.args):
            return None
        start = _code(args[0].value).strip() if len(args) >= 2 else "0"
        step = _code(args[2].value).strip() if len(args) == 3 else "1"
        if not all(self.stable(a.value) or names_in(a.value) <= self.constexprs for a in args[:1] + args[2:3]) \
                and len(args) >= 2:
            return None
        shifted = k if start == "0" else f"({k} - {_paren(start)})"
        return shifted if step == "1" else f"{shifted} // {_paren(step)}"

    def _arguments(self, call: cst.Call, params: tuple[str, ...]) -> dict[str, cst.BaseExpression] | Refusal:
        args: dict[str, cst.BaseExpression] = {}
        for position, arg in enumerate(call.args):
            if arg.star:
                return self.refuse(call, "`tl.make_block_ptr` with `*args`: its shape cannot be read from the source")
            key = arg.keyword.value if arg.keyword is not None else params[position] if position < len(params) \
                else None
            if key is None:
                return self.refuse(call, "`tl.make_block_ptr` with more arguments than it takes")
            args[key] = arg.value
        missing = [p for p in params[:5] if p not in args]
        if missing:
            return self.refuse(call, f"`tl.make_block_ptr` without `{missing[0]}`")
        rank = None
        for key in ("shape", "strides", "offsets", "block_shape"):
            value = args[key]
            if not isinstance(value, (cst.Tuple, cst.List)) or any(isinstance(e, cst.StarredElement)
                                                                   for e in value.elements):
                return self.refuse(value, f"the block pointer's `{key}` is not a literal tuple: the tool lowers "
                                          "block pointers to pointer tiles one dimension at a time")
            if rank is not None and len(value.elements) != rank:
                return self.refuse(value, f"the block pointer's `{key}` has {len(value.elements)} entries, not {rank}")
            rank = len(value.elements)
        return args

    def _advance(self, call: cst.Call) -> tuple[str, list[cst.BaseExpression]] | Refusal:
        if len(call.args) != 2 or any(a.star for a in call.args) or not isinstance(call.args[0].value, cst.Name):
            return self.refuse(call, "`tl.advance` of something other than a block pointer's name")
        offsets = call.args[1].value
        if not isinstance(offsets, (cst.Tuple, cst.List)) or any(isinstance(e, cst.StarredElement)
                                                                 for e in offsets.elements):
            return self.refuse(offsets, "`tl.advance` by offsets that are not a literal tuple")
        return call.args[0].value.value, [e.value for e in offsets.elements]

    def _offset_names(self, name: str, rank: int) -> list[str]:
        axes = _AXIS_NAMES.get(rank, tuple(f"off{d}" for d in range(rank)))
        return [self.fresh(f"{name}_{axis}") for axis in axes]

    def _record(self, name: str, sites: list[dict[str, cst.BaseExpression]],
                bound: dict[str, tuple[list[str], list[str]]], advanced: bool) -> _Record | Refusal:
        first = sites[0]
        rank = len(first["block_shape"].elements)  # type: ignore[attr-defined]
        texts = {key: [[_code(e.value).strip() for e in args[key].elements] for args in sites]  # type: ignore[attr-defined]
                 for key in ("block_shape", "shape", "strides")}
        other = next((args for args, t in zip(sites, texts["block_shape"]) if t != texts["block_shape"][0]), None)
        if other is not None:
            return self.refuse(other["block_shape"], f"`{name}` is made with different tile sizes in different "
                                                     "places")
        stable = all(self.stable(e.value) for args in sites for key in ("shape", "strides")
                     for e in args[key].elements)  # type: ignore[attr-defined]
        same = all(t == texts[key][0] for key in ("shape", "strides") for t in texts[key])
        nonneg = [all(self.nonneg(args["offsets"].elements[d].value) for args in sites)  # type: ignore[attr-defined]
                  for d in range(rank)]
        offset_texts = [[_code(e.value).strip() for e in args["offsets"].elements] for args in sites]  # type: ignore[attr-defined]
        if not advanced and all(t == offset_texts[0] for t in offset_texts) \
                and all(self.stable(e.value) for e in first["offsets"].elements):  # type: ignore[attr-defined]
            offsets = offset_texts[0]  # never advanced: the offsets are read where they are written
        else:
            offsets = self._offset_names(name, rank)
        bases = {_code(args["base"]).strip() for args in sites}
        base = next(iter(bases)) if len(bases) == 1 and self.stable(first["base"]) else name
        if stable and same:
            shape, strides = texts["shape"][0], texts["strides"][0]
        else:
            shape = [self.fresh(f"{name}_shape{d}") for d in range(rank)]
            strides = [self.fresh(f"{name}_stride{d}") for d in range(rank)]
            bound[name] = (shape, strides)
        return _Record(rank, base, texts["block_shape"][0], shape, strides, offsets, nonneg)


def _loop_step(iteration: str, delta: str, loop: cst.For) -> str:
    """`iteration * delta`, written `k` where the loop counts `range(0, n, delta)` (k is then the offset itself)."""
    it = loop.iter
    args = [a for a in it.args if a.keyword is None]  # type: ignore[attr-defined]
    k = loop.target.value  # type: ignore[attr-defined]
    if len(args) == 3 and _code(args[2].value).strip() == delta:
        start = _code(args[0].value).strip()
        return k if start == "0" else f"({k} - {_paren(start)})"
    return f"{_paren(iteration)} * {_paren(delta)}"


def _paren(text: str) -> str:
    """`text` as an operand of `*`/`+`: parenthesised unless it is a name, attribute or number."""
    return text if text.replace("_", "").replace(".", "").isalnum() else f"({text})"


class _Rewrite(cst.CSTTransformer):
    def __init__(self, fn: _Function, records: dict[str, _Record], bound: dict[str, tuple[list[str], list[str]]]
                 ) -> None:
        super().__init__()
        self.fn = fn
        self.records = records
        self.bound = bound
        self.loops: list[cst.For] = []

    def visit_For(self, node: cst.For) -> None:
        self.loops.append(node)

    def leave_For(self, original: cst.For, updated: cst.For) -> cst.For:
        self.loops.pop()
        return updated

    def _affine_offsets(self, name: str, offsets: list[str]) -> list[str]:
        affine = self.fn.affine.get(name)
        if affine is None or not any(loop is affine[0] for loop in self.loops):
            return offsets
        loop, deltas = affine
        step = self.fn._iteration(loop)
        out = []
        for offset, delta in zip(offsets, deltas):
            d = _code(delta).strip()
            if d == "0":
                out.append(offset)
                continue
            moved = step if d == "1" else _loop_step(step, d, loop)  # type: ignore[arg-type]
            out.append(moved if offset == "0" else f"{offset} + {moved}")
        return out

    def _language(self, call: cst.Call) -> str:
        func = call.func
        return _code(func.value) if isinstance(func, cst.Attribute) else "tl"  # type: ignore[attr-defined]

    # -- statements: make and advance ------------------------------------------------------------------------

    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
                                  ) -> cst.BaseStatement | cst.FlattenSentinel:
        if len(updated.body) != 1 or not isinstance(updated.body[0], cst.Assign):
            return updated
        if id(original.body[0]) in self.fn.placeholders:  # `K_block_ptr = None`: dropped (`_Function.lower`)
            return cst.RemoveFromParent() if not updated.leading_lines else cst.FlattenSentinel([])
        assign = updated.body[0]
        target = assign.targets[0].target if len(assign.targets) == 1 else None
        if not isinstance(target, cst.Name) or target.value not in self.records:
            return updated
        name = target.value
        record = self.records[name]
        lines: list[str] = []
        value = original.body[0].value  # type: ignore[attr-defined]
        which = self.fn.lang(value) if isinstance(assign.value, cst.Call) else None
        if isinstance(assign.value, cst.Name) and assign.value.value in self.records:  # a copy: `X_1 = X`
            src = self.records[assign.value.value]
            lines.append(f"{name} = {src.base}")
            lines += [f"{record.offsets[d]} = {src.offsets[d]}" for d in range(record.rank)]
        elif which == "make_block_ptr":
            args = self.fn._arguments(assign.value, _MAKE_PARAMS)
            assert not isinstance(args, Refusal)
            if record.base == name:
                lines.append(f"{name} = {_code(args['base']).strip()}")
            for d in range(record.rank):
                value = _code(args['offsets'].elements[d].value).strip()  # type: ignore[attr-defined]
                if record.offsets[d] != value:
                    lines.append(f"{record.offsets[d]} = {value}")
            if name in self.bound:
                shape, strides = self.bound[name]
                for d in range(record.rank):
                    lines.append(f"{shape[d]} = {_code(args['shape'].elements[d].value).strip()}")  # type: ignore[attr-defined]
                    lines.append(f"{strides[d]} = {_code(args['strides'].elements[d].value).strip()}")  # type: ignore[attr-defined]
        elif which == "advance" and name in self.fn.affine:
            return cst.RemoveFromParent()  # (its loads read the loop's iteration)
        elif which == "advance":
            source, deltas = self.fn._advance(assign.value)  # type: ignore[misc]
            src = self.records[source]
            if source != name:
                lines.append(f"{name} = {src.base}")
            for d, delta in enumerate(deltas):
                text = _code(delta).strip()
                if source == name and text == "0":
                    continue
                lines.append(f"{record.offsets[d]} = {src.offsets[d]}" + ("" if text == "0" else f" + {_paren(text)}"))
        else:
            return updated
        if not lines:
            return cst.RemoveFromParent() if not updated.leading_lines else cst.FlattenSentinel([])
        statements = list(cst.parse_module("\n".join(lines) + "\n").body)
        statements[0] = statements[0].with_changes(leading_lines=updated.leading_lines)
        statements[-1] = statements[-1].with_changes(trailing_whitespace=updated.trailing_whitespace)  # type: ignore[call-arg]
        return cst.FlattenSentinel(statements)

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        value = updated.value
        if isinstance(value, cst.Name) and value.value in self.records and original.attr.value in ("dtype", "type"):
            base = self.records[value.value].base
            if base != value.value:
                return updated.with_changes(value=expr(_paren(base)))
        return updated

    # -- loads and stores ------------------------------------------------------------------------------------

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        kind = self.fn.lang(original)
        if kind not in ("load", "store") or not updated.args:
            return updated
        first = original.args[0].value
        if isinstance(first, cst.Name):
            if first.value not in self.records:
                return updated
            record = self.records[first.value]
            base, offsets, nonneg = _paren(record.base), self._affine_offsets(first.value, list(record.offsets)), \
                list(record.nonneg)
        else:
            which = self.fn.lang(first)
            if which == "make_block_ptr":
                args = self.fn._arguments(first, _MAKE_PARAMS)  # type: ignore[arg-type]
                assert not isinstance(args, Refusal)
                block = [_code(e.value).strip() for e in args["block_shape"].elements]  # type: ignore[attr-defined]
                record = _Record(len(block), "", block, [_code(e.value).strip() for e in args["shape"].elements],  # type: ignore[attr-defined]
                                 [_code(e.value).strip() for e in args["strides"].elements], [], [])  # type: ignore[attr-defined]
                base = _paren(_code(args["base"]).strip())
                offsets = [_code(e.value).strip() for e in args["offsets"].elements]  # type: ignore[attr-defined]
                nonneg = [self.fn.nonneg(e.value) for e in args["offsets"].elements]  # type: ignore[attr-defined]
            elif which == "advance":
                source, deltas = self.fn._advance(first)  # type: ignore[arg-type,misc]
                record = self.records[source]
                base = _paren(record.base)
                offsets = [o if _code(d).strip() == "0" else f"{o} + {_paren(_code(d).strip())}"
                           for o, d in zip(record.offsets, deltas)]
                nonneg = [ok and self.fn.nonneg(d) for ok, d in zip(record.nonneg, deltas)]
            else:
                return updated
        tl = self._language(updated)
        keywords = {a.keyword.value: a for a in updated.args if a.keyword is not None}
        check = keywords.get("boundary_check")
        dims: list[int] = []
        if check is not None:
            value = check.value
            elements = value.elements if isinstance(value, (cst.Tuple, cst.List)) else [value]
            for e in elements:
                node = e.value if isinstance(e, cst.BaseElement) else e
                if not isinstance(node, cst.Integer):
                    return updated  # (the language rule refuses the keyword: not lowered)
                dims.append(int(node.value))
        rank = record.rank
        index = [f"({o} + {tl}.arange(0, {b}))" if o != "0" else f"{tl}.arange(0, {b})"
                 for o, b in zip(offsets, record.block)]

        def spread(d: int) -> str:
            if rank == 1:
                return index[d]
            return index[d] + "[" + ", ".join(":" if k == d else "None" for k in range(rank)) + "]"

        terms = [base]
        for d in range(rank):
            stride = record.strides[d]
            terms.append(spread(d) if stride == "1" else f"{spread(d)} * {_paren(stride)}")
        address = " + ".join(terms)
        masks = []
        for d in dims:
            if not 0 <= d < rank:
                return updated
            if not nonneg[d]:
                masks.append(f"({spread(d)} >= 0)")
            masks.append(f"({spread(d)} < {_paren(record.shape[d])})")
        made = [address]
        rest = [a for a in updated.args[1:] if a.keyword is None or a.keyword.value not in (
            "boundary_check", "padding_option")]
        value: list[cst.Arg] = []
        if kind == "store":
            value = [rest.pop(0) if rest and rest[0].keyword is None else keywords["value"]]
            rest = [a for a in rest if a.keyword is None or a.keyword.value != "value"]
        if masks:
            mask = masks[0] if len(masks) == 1 else " & ".join(masks)
            made.append("mask=" + (mask[1:-1] if len(masks) == 1 else mask))
            padding = keywords.get("padding_option")
            if kind == "load" and padding is not None:
                text = _code(padding.value).strip().strip("'\"")
                if text == "zero":
                    made.append("other=0.0")
                elif text == "nan":
                    made.append('other=float("nan")')
        parsed = list(expr(f"f({', '.join(made)})").args)  # type: ignore[attr-defined]
        args = [parsed[0], *value, *parsed[1:], *rest]
        tight = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
        fixed = [a.with_changes(comma=cst.MaybeSentinel.DEFAULT, equal=tight) if a.keyword is not None
                 else a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in args]
        return updated.with_changes(args=fixed)
