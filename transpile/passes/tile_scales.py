"""Scale vectors that hold one value per output tile, read once as a scalar: a Triton-to-Triton rewrite of the
block-scaled GEMMs a variant keeps as Triton.

DeepSeek-style block-scaled GEMMs scale each step's product by one value per column group of B
(`acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]`, `b_s` loaded through `offs_bn // group_n`). Where a group holds
whole tiles (`group_n % BLOCK_N == 0`: 128 and 128 in every DeepSeek-style launch) the vector holds one value
`BLOCK_N` times, the tile's first column's (`transpile.analysis.tile_scales` finds it). Triton's own compile of the
same kernel given that scalar ran 1.10-1.30x the per-column kernel on an H100, ahead of both Gluon rings built with
the scalar (bench/RESULTS.md, "sm90: one B scale per tile"), so the kernel is kept as Triton and its main loop is
written twice, under the group test the launch decides:

    if group_n % BLOCK_N == 0:
        for k in ...:  # `b_s` loaded as one scalar and multiplied as such
    else:
        for k in ...:  # the loop as written

The test reads launch arguments only (a run-time integer and a constexpr), so every program of a launch takes the
same branch. Each rule that pipelines such a loop writes the same scalar (`scalar_scale`).

`tile_scale_loops(fn)` -> the loops of a kernel whose scaled accumulation has such a factor; `tile_scaled(fn, found)`
-> the kernel with those loops unswitched.
"""

from __future__ import annotations

import textwrap

import libcst as cst

from transpile.analysis.tile_scales import UniformFactor, uniform_factor
from transpile.cst_utils import added_to, broadcast_axis, compile_time, node_code, product_factors, single_assign
from transpile.cst_walk import nodes_of, preorder, semantic_preorder
from transpile.passes import replaced

_MODULE = cst.Module(body=[])


def tile_scale_loops(fn: cst.FunctionDef) -> list[tuple[cst.For, UniformFactor]]:
    """Each `for` loop of `fn` (outermost first) with a statement `acc += tl.dot(...) * ... * v[None, :]` whose
    factor `v` holds one value per tile (`analysis.tile_scales.uniform_factor`), where the group divisor and the tile
    width are parameters `fn` never rebinds and `v` is read by that statement alone. The statement may sit under
    compile-time tests in the loop (`if use_fp8_w8a8:` ... `if group_k > 0 and group_n > 0:`, the fused-MoE
    kernels' form): the kernel is then read as Triton compiles it where those tests take the statement's branches,
    every `if` of the same test decided alike (its scale addresses bound under the same tests before the loop). The
    index (second) is the statement's position in the loop's own body, -1 where it is nested."""
    nodes = semantic_preorder(fn.body)
    params = {p.name.value for p in fn.params.params}
    # (a column index divided by a parameter, `offs_n // group_n`, somewhere in the function: else nothing to find)
    if not any(isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.FloorDivide)
               and isinstance(n.right, cst.Name) and n.right.value in params for n in nodes):
        return []
    constexprs = {p.name.value for p in fn.params.params if p.annotation is not None
                  and "constexpr" in _code(p.annotation.annotation)}
    found = []
    for loop in nodes:
        if not isinstance(loop, cst.For) or not isinstance(loop.body, cst.IndentedBlock):
            continue
        for small, path in _accumulations(loop.body, ()):
            if any(not compile_time(test, constexprs) for test, _ in path):
                continue
            choices = {_code(test): taken for test, taken in path}
            view, loops = _resolved(fn, choices) if choices else (fn, {id(loop): loop})
            uniform = _uniform(view, loops.get(id(loop)), small)
            if uniform is not None:
                found.append((loop, uniform))
                break
    # (a loop inside another that is unswitched is unswitched with it: only the outermost are rewritten)
    return [item for item in found
            if not any(other[0] is not item[0] and any(n is item[0] for n in preorder(other[0].body))
                       for other in found)]


def _accumulations(block: cst.BaseSuite, path: tuple) -> list[tuple[cst.BaseSmallStatement, tuple]]:
    """The statements `acc += <one tl.dot> ...` of a loop's body, each with the `if` tests above it in the loop
    ((test, True) in its body, (test, False) in its `else`/`elif`); not those of a loop nested in it."""
    out: list[tuple[cst.BaseSmallStatement, tuple]] = []
    for statement in block.body if isinstance(block, cst.IndentedBlock) else ():
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
            small = statement.body[0]
            dots = [n for n in preorder(small) if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)
                    and n.func.attr.value == "dot"]
            added = added_to(small)
            # (a product of the dot and a vector loaded in the loop: `v[None, :]`, or a name broadcast so)
            if added is not None and len(dots) == 1 and any(
                    isinstance(f, cst.Name) or isinstance(f, cst.Subscript) and broadcast_axis(f) == 1
                    for f in product_factors(added[1])):
                out.append((small, path))
        elif isinstance(statement, cst.If):
            out += _if_accumulations(statement, path)
    return out


def _if_accumulations(node: cst.If, path: tuple) -> list[tuple[cst.BaseSmallStatement, tuple]]:
    out = _accumulations(node.body, (*path, (node.test, True)))
    if isinstance(node.orelse, cst.If):
        out += _if_accumulations(node.orelse, (*path, (node.test, False)))
    elif isinstance(node.orelse, cst.Else):
        out += _accumulations(node.orelse.body, (*path, (node.test, False)))
    return out


def _resolved(fn: cst.FunctionDef, choices: dict[str, bool]) -> tuple[cst.FunctionDef, dict[int, cst.For]]:
    """`fn` with every `if` whose test is a key of `choices` replaced by the branch that value takes, and the loops
    it rebuilt (id of the original -> its copy). Statements with nothing to decide are the original nodes."""
    loops: dict[int, cst.For] = {}

    def block(suite: cst.BaseSuite) -> cst.BaseSuite:
        if not isinstance(suite, cst.IndentedBlock):
            return suite
        body = statements(list(suite.body))
        return suite if all(a is b for a, b in zip(body, suite.body)) and len(body) == len(suite.body) \
            else suite.with_changes(body=body)

    def suite(body: cst.BaseSuite) -> list[cst.BaseStatement]:
        return statements(list(body.body)) if isinstance(body, cst.IndentedBlock) else []

    def branch(node: cst.If | cst.Else | None) -> list[cst.BaseStatement]:
        return [] if node is None else statements([node]) if isinstance(node, cst.If) else suite(node.body)

    def statements(body: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
        out: list[cst.BaseStatement] = []
        for statement in body:
            if isinstance(statement, cst.If) and _code(statement.test) in choices:
                out += suite(statement.body) if choices[_code(statement.test)] else branch(statement.orelse)
            elif isinstance(statement, cst.If):
                orelse = statement.orelse
                if isinstance(orelse, cst.If):
                    decided = statements([orelse])
                    orelse = decided[0] if len(decided) == 1 and isinstance(decided[0], cst.If) else \
                        (cst.Else(body=cst.IndentedBlock(body=decided)) if decided else None)
                elif isinstance(orelse, cst.Else):
                    orelse = orelse.with_changes(body=block(orelse.body))
                new = statement.with_changes(body=block(statement.body), orelse=orelse)
                out.append(statement if new.deep_equals(statement) else new)
            elif isinstance(statement, (cst.For, cst.While, cst.With)):
                inner = block(statement.body)
                new = statement if inner is statement.body else statement.with_changes(body=inner)
                if isinstance(statement, cst.For):
                    loops[id(statement)] = new  # type: ignore[assignment]
                out.append(new)
            else:
                out.append(statement)
        return out

    return fn.with_changes(body=block(fn.body)), loops


def _uniform(fn: cst.FunctionDef, loop: cst.For | None, small: cst.BaseSmallStatement) -> UniformFactor | None:
    """`uniform_factor` of `small` (at the top level of `loop`, in `fn`), where the group divisor and the tile width
    are parameters `fn` never rebinds and the vector is read by that statement alone."""
    if loop is None or not isinstance(loop.body, cst.IndentedBlock) or not any(
            isinstance(statement, cst.SimpleStatementLine) and any(n is small for n in statement.body)
            for statement in loop.body.body):
        return None
    dot = next(n for n in preorder(small) if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)
               and n.func.attr.value == "dot")
    uniform = uniform_factor(fn, loop, small, dot)
    added = added_to(small)
    if uniform is None and added is not None and any(isinstance(f, cst.Name) for f in product_factors(added[1])):
        # (a factor written without its `[None, :]`: taken where its width is the columns')
        uniform = uniform_factor(fn, loop, small, dot, _columns(fn, small))
    if uniform is None:
        return None
    params = {p.name.value for p in fn.params.params}
    targets = _bindings(fn)
    if uniform.group not in params or uniform.block not in params \
            or {uniform.group, uniform.block} & {n.value for n in targets}:
        return None
    # (the vector read nowhere else: the scalar takes its place in this product only; another loop may bind and
    # read a name of its own so, a copy of this one under another branch)
    in_loop = {id(n) for n in nodes_of(loop.body)}
    reads = [n for n in nodes_of(fn.body) if isinstance(n, cst.Name) and n.value == uniform.name
             and n not in targets]
    inside = [n for n in reads if id(n) in in_loop]
    if len(inside) != 1 or any(not _bound_in_own_loop(fn, n, uniform.name) for n in reads if id(n) not in in_loop):
        return None
    # (nor bound before the loop: Triton would carry it through the loop, a vector there and a scalar in the loop)
    others = [n for n in targets if n.value == uniform.name and id(n) not in in_loop]
    if any(not any(isinstance(f, cst.For) and f is not loop and any(n is m for m in nodes_of(f.body))
                   for f in nodes_of(fn.body)) for n in others):
        return None
    return uniform


def _columns(fn: cst.FunctionDef, small: cst.BaseSmallStatement) -> str | None:
    """The column count of the accumulator `small` adds to, where the function binds it once to `tl.zeros((rows,
    columns), ...)` with `columns` a name; None otherwise."""
    added = added_to(small)
    if added is None:
        return None
    found = set()
    for node in nodes_of(fn.body):
        value = node.value if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(
            node.targets[0].target, cst.Name) and node.targets[0].target.value == added[0] else None
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "zeros" \
                and value.args and isinstance(value.args[0].value, (cst.Tuple, cst.List)):
            sizes = [e.value for e in value.args[0].value.elements]
            found.add(sizes[1].value if len(sizes) == 2 and isinstance(sizes[1], cst.Name) else None)
    return found.pop() if len(found) == 1 else None


def _bound_in_own_loop(fn: cst.FunctionDef, read: cst.Name, name: str) -> bool:
    """`read` lies in a `for` loop that binds `name` at its top level (its value there is that loop's own)."""
    for node in preorder(fn.body):
        if isinstance(node, cst.For) and isinstance(node.body, cst.IndentedBlock) \
                and any(read is m for m in preorder(node.body)) \
                and any(single is not None and single[0] == name
                        for single in (single_assign(s) for s in node.body.body)):
            return True
    return False


def _bindings(fn: cst.FunctionDef) -> set[cst.Name]:
    """The names `fn` assigns (as targets, not reads)."""
    out: set[cst.Name] = set()
    for node in nodes_of(fn.body):
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else \
            [node.target] if isinstance(node, (cst.AugAssign, cst.AnnAssign, cst.For)) else []
        for target in targets:
            out.update(n for n in preorder(target) if isinstance(n, cst.Name))
    return out


def scalar_scale(body: list[cst.BaseStatement], original: cst.For, dot_index: int, uniform: UniformFactor,
                 tile: str | None = None) -> list[cst.BaseStatement]:
    """The loop body `body` (the loop `original` as written, or its translation) with the factor's vector loaded as
    one scalar, from `tile` (a name bound before the loop to `uniform.scalar`, the loop-invariant part of its address
    at the tile's first column) or from `uniform.scalar` itself, plus the rest of the address (`uniform.rest`), and
    multiplied as such (`b_s`, not `b_s[None, :]`)."""
    body = list(body)
    # (the factor as written or translated: `b_s[None, :]`, or the vector converted there, `gl.convert_layout(b_s,
    # ...)[None, :]`, and its load, `tl.load(...)` / `gl.load(...)`; where either is not found the loop stays as it
    # is, the scales per column: a load another rule rewrote, a buffer load, is left so)
    target = next((n for n in preorder(body[dot_index]) if isinstance(n, cst.Subscript)
                   and _code(n).replace(" ", "").endswith("[None,:]") and _reads_only(n.value, uniform.name)), None)
    original_body = original.body.body if isinstance(original.body, cst.IndentedBlock) else ()
    index = next((i for i, statement in enumerate(original_body)
                  if any(n is uniform.load for n in preorder(statement))), None)
    load = next((n for n in preorder(body[index]) if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)
                 and n.func.attr.value == "load"), None) if index is not None else None
    if target is None or load is None or index is None:
        return body
    body[dot_index] = body[dot_index].deep_replace(target, cst.Name(uniform.name))  # type: ignore[assignment]
    body[index] = body[index].deep_replace(load, _scalar_load(load, uniform, tile))  # type: ignore[assignment]
    return body


def _scalar_load(load: cst.Call, uniform: UniformFactor, tile: str | None = None) -> cst.Call:
    """`load` reading the factor's one value a tile: at `tile` (a name bound to `uniform.scalar`) or `uniform.scalar`,
    plus the rest of its address (`uniform.rest`)."""
    address: cst.BaseExpression = cst.Name(tile) if tile is not None else uniform.scalar
    if uniform.rest is not None:
        address = cst.BinaryOperation(address, cst.Add(), uniform.rest)
    return load.with_changes(args=[load.args[0].with_changes(value=address)])


def tile_scaled(fn: cst.FunctionDef, found: list[tuple[cst.For, UniformFactor]], min_warps: int = 0
                ) -> cst.FunctionDef:
    """`fn` with each loop of `found` written twice under a constexpr flag its launch sets from the group test
    (`@triton.heuristics`, placed right above the jit decorator so that it sees an autotune config's tile width):
    the scalar form where the groups hold whole tiles, the loop as written otherwise. A compile-time test, so that
    each form is a kernel of its own: under a run-time `if` the two loops shared one register allocation, the
    per-column loop's, and the scalar form lost what it saves (gfx942: 52 spills where the scalar kernel has none;
    gfx1250: 324 VGPRs against 238). The flag takes a name the kernel does not read. `min_warps`: the test also asks
    for a launch of at least that many warps (`Target.tile_scale_min_warps`; Triton's default, 4, where the launch
    names none)."""
    decorators = list(fn.decorators)
    jit = next((i for i, d in enumerate(decorators) if "jit" in _code(d.decorator)), None)
    params = {p.name.value: p for p in fn.params.params}
    if jit is None or fn.params.star_arg is not cst.MaybeSentinel.DEFAULT or fn.params.kwonly_params \
            or fn.params.star_kwarg is not None:
        return fn
    used = {n.value for n in preorder(fn) if isinstance(n, cst.Name)}
    flags: dict[tuple[str, str], str] = {}  # (group divisor, tile width) -> the flag of their test
    replacements: dict[cst.CSTNode, cst.CSTNode] = {}
    for loop, uniform in found:
        block = params.get(uniform.block)
        if block is None or block.annotation is None:
            continue
        # (the factor, `b_s[None, :]`, and its load, nodes of this loop wherever they sit in it)
        rewritten = replaced(loop, {uniform.factor: cst.Name(uniform.name),
                                    uniform.load: _scalar_load(uniform.load, uniform)})
        if rewritten.deep_equals(loop) or not isinstance(rewritten.body, cst.IndentedBlock):
            continue
        body = list(rewritten.body.body)
        test = (uniform.group, uniform.block)
        if test not in flags:
            flag = "TILE_SCALED"
            while flag in used:
                flag = f"{flag}_"
            used.add(flag)
            flags[test] = flag
        body = _without_dead_advances(fn, loop, body)
        scalar_loop = loop.with_changes(leading_lines=[], body=loop.body.with_changes(body=body))
        comment = (f"# triton-transpile: where a group of `{uniform.group}` columns holds whole tiles "
                   f"(`{flags[test]}`), `{uniform.name}` holds one value per tile: loaded once, as a scalar.")
        replacements[loop] = cst.If(
            test=cst.Name(flags[test]),
            body=cst.IndentedBlock(body=[scalar_loop.with_changes(leading_lines=[
                cst.EmptyLine(indent=True, comment=cst.Comment(line)) for line in _wrapped(comment)])]),
            orelse=cst.Else(body=cst.IndentedBlock(body=[loop.with_changes(leading_lines=[])])),
            leading_lines=loop.leading_lines)
    if not replacements:
        return fn
    out: cst.FunctionDef = replaced(fn, replacements)  # type: ignore[assignment]
    annotation = next(params[u.block].annotation for _, u in found if u.block in params)
    added = [cst.Param(cst.Name(flag), annotation=annotation, default=cst.Name("False"),
                       equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(" "),
                                             whitespace_after=cst.SimpleWhitespace(" ")))
             for flag in flags.values()]
    last = list(out.params.params)
    if last and last[-1].comma is cst.MaybeSentinel.DEFAULT:
        last[-1] = last[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    warps = f' and args.get("num_warps", 4) >= {min_warps}' if min_warps > 4 else ""
    entries = ", ".join(f'"{flag}": lambda args: args["{group}"] % args["{block}"] == 0{warps}'
                        for (group, block), flag in flags.items())
    heuristics = cst.Decorator(cst.parse_expression(f"triton.heuristics({{{entries}}})"))
    decorators.insert(jit, heuristics)
    return out.with_changes(params=out.params.with_changes(params=[*last, *added]), decorators=decorators)


def _without_dead_advances(fn: cst.FunctionDef, loop: cst.For, body: list[cst.BaseStatement]
                           ) -> list[cst.BaseStatement]:
    """`body` without the advances (`p += step`) of a name that only the vector's load read, which the scalar form
    no longer reads (aiter's `b_scale_ptrs += ...`): a name the function reads nowhere outside `loop` and the scalar
    body reads nowhere else."""
    out = []
    targets = _bindings(fn)
    in_loop = {id(n) for n in nodes_of(loop)}
    for statement in body:
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
            else None
        if isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
            name = small.target.value
            elsewhere = [n for other in body if other is not statement for n in preorder(other)
                         if isinstance(n, cst.Name) and n.value == name]
            outside = [n for n in nodes_of(fn.body) if isinstance(n, cst.Name) and n.value == name
                       and id(n) not in in_loop]
            # (outside: its one definition before the loop, as a target)
            if not elsewhere and all(n in targets for n in outside) and len(outside) <= 1:
                continue
        out.append(statement)
    return out


def _wrapped(comment: str, width: int = 100) -> list[str]:
    return textwrap.wrap(comment, width=width, subsequent_indent="# ")


def _code(node: cst.CSTNode) -> str:
    return node_code(_MODULE, node).strip()


def _reads_only(value: cst.BaseExpression, name: str) -> bool:
    """`name`, or `gl.convert_layout(name, layout)`."""
    if isinstance(value, cst.Name):
        return value.value == name
    return isinstance(value, cst.Call) and _code(value.func) == "gl.convert_layout" and bool(value.args) \
        and isinstance(value.args[0].value, cst.Name) and value.args[0].value.value == name


