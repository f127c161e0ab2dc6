"""Scale vectors that hold one value per output tile: a block-scaled GEMM's B scales, read per column group.

DeepSeek-style block-scaled GEMMs (lightllm's, vLLM's and sglang's `w8a8_block_fp8_matmul` kernels) scale each
step's product by one value per row of A and per column group of B::

    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    Bscale_ptrs = Bscale + (offs_bn // group_n) * stride_Bscale_n
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        ...
        b_s = tl.load(Bscale_ptrs + offs_ks * stride_Bscale_k)
        acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]

Where the group is a whole number of tiles (`group_n % BLOCK_N == 0`, 128 and 128 in every such launch), the
columns of a tile share one group, and `b_s` holds one value `BLOCK_N` times: the tile's first column's. In the wgmma
accumulator layout each thread holds 64 of its columns, so the vector costs 64 loads and 64 registers a step where
one scalar does (an H100 ran lightllm's kernel 1.18-1.35x faster with the scalar, the rest of the loop unchanged:
bench/RESULTS.md). `uniform_factor` finds such a factor and the scalar address: the loop-invariant terms of the
vector address, their names' definitions written out, with the tile's `tl.arange` term left out (the first column),
valid for the launches with `group % BLOCK == 0` (the launcher runs the source kernel for the others). A column past
the matrix's edge (`% N` wraps it) reads the tile's scale instead of another: its output is never stored. An address
the loop advances by a scalar after the load (`b_scale_ptrs += step`, aiter's form) is its start plus the advance made
before the iteration, `(k - start) * step` from the loop's range.

Facts only: the rules write the scalar form.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from transpile.cst_utils import (added_to, bound_names, broadcast_axis, names_in, parenthesized, product_factors,
                                 single_assign, single_definitions, sum_terms)
from transpile.cst_walk import preorder


@dataclass(frozen=True)
class UniformFactor:
    """A factor `name[None, :]` of a scaled accumulation whose vector holds one value per tile."""

    name: str  # the loaded vector (`b_s`)
    load: cst.Call  # its load in the loop (`tl.load(Bscale_ptrs + offs_ks * stride_Bscale_k)`)
    factor: cst.Subscript | cst.Name  # `b_s[None, :]` in the accumulation (`b_s`, broadcast so, with `columns`)
    scalar: cst.BaseExpression  # the loop-invariant terms of its address at the tile's first column (names, numbers)
    rest: cst.BaseExpression | None  # the other terms (`offs_ks * stride_Bscale_k`), scalars the loop computes
    group: str  # the divisor of the column index (`group_n`)
    block: str  # the tile's width (`BLOCK_N`)

    @property
    def test(self) -> str:
        """The launches the scalar is not valid for (groups that do not hold whole tiles)."""
        return f"{self.group} % {self.block} != 0"


def uniform_factor(fn: cst.FunctionDef, loop: cst.For, accumulation: cst.BaseSmallStatement,
                   dot: cst.Call, columns: str | None = None) -> UniformFactor | None:
    """The factor `v[None, :]` of `acc += tl.dot(a, b) * ... * v[None, :]` (`accumulation`) that holds one value per
    tile (see the module docstring), else None. `v` must be loaded in `loop` without a mask from an address whose
    terms the loop computes (`offs_ks * stride`) are scalars of names and numbers, and whose other terms, through the
    names bound once before the loop that they read, hold `tl.arange` only in `((pid * BLOCK + tl.arange(0, BLOCK))
    [% N]) // group`. With `columns` (the accumulator's column count, `BLOCK_N` of its `tl.zeros`), a factor written
    without its `[None, :]` (`* b_s`, torchao's form: a vector broadcast along the last axis) is taken too, where its
    tile width is that count."""
    added = added_to(accumulation)
    if added is None:
        return None
    body = loop.body.body if isinstance(loop.body, cst.IndentedBlock) else ()
    once = single_definitions(fn)
    changing = bound_names(loop)  # (what the loop computes, its variable included)
    for factor in product_factors(added[1]):
        bare = isinstance(factor, cst.Name) and columns is not None
        if any(n is dot for n in preorder(factor)) or not bare and (
                broadcast_axis(factor) != 1 or not isinstance(factor.value, cst.Name)):  # type: ignore[attr-defined]
            continue
        name = factor.value if bare else factor.value.value  # type: ignore[attr-defined]
        loads = [value for statement in body for assign in [single_assign(statement)] if assign is not None
                 and assign[0] == name for value in [assign[1]]]
        if len(loads) != 1 or not _plain_load(loads[0]):
            continue
        load = loads[0]
        address = load.args[0].value
        # (the terms of the address the loop does not compute hold the columns' addresses; the others are scalars)
        terms = sum_terms(address)
        # (an address the loop advances by a scalar each iteration, `b_scale_ptrs += step`, aiter's form: its start,
        # and the advance as a function of the loop variable)
        for term in list(terms):
            carried = _advanced(fn, loop, term, changing) if isinstance(term, cst.Name) else None
            if carried is not None:
                terms.remove(term)
                terms += list(carried)
        fixed = [t for t in terms if not names_in(t) & changing]
        rest = [t for t in terms if names_in(t) & changing]
        if not fixed or any(_vector(t, once, 0) or any(isinstance(n, (cst.Call, cst.Subscript)) for n in preorder(t))
                            for t in rest):
            continue
        scalar = _scalar(_joined(fixed), once, changing)
        if scalar is None:
            continue
        expression, group, block = scalar
        if bare and block != columns:
            continue  # (a vector along another axis, or of another width: not the tile's columns)
        return UniformFactor(name, load, factor, expression, _joined(rest) if rest else None, group, block)
    return None


def _advanced(fn: cst.FunctionDef, loop: cst.For, name: cst.Name, changing: set[str]
              ) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """For a name the loop advances by a loop-invariant step at its top level, after every read of it (`p += step`),
    and binds once before it, in the function's own block (`p = base + ...`): (that start, the advance made before
    the iteration of the loop variable, `((k - start) // step_k) * (step)`); None for any other name. The loop must
    run over `range`/`tl.range` (its start and step from there)."""
    body = list(loop.body.body) if isinstance(loop.body, cst.IndentedBlock) else []
    steps = [small for statement in body if isinstance(statement, cst.SimpleStatementLine)
             for small in statement.body if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign)
             and isinstance(small.target, cst.Name) and small.target.value == name.value]
    bound = [n for n in preorder(loop.body) if name.value in _targets(n)]
    if len(steps) != 1 or len(bound) != 1 or names_in(steps[0].value) & changing:
        return None
    position = next(i for i, statement in enumerate(body) if any(n is steps[0] for n in preorder(statement)))
    if any(name.value in names_in(statement) for statement in body[position + 1:]):
        return None  # (read after its advance: the advance made so far differs there)
    # (the statements that run before the loop, in its block and in each block around it: a loop under `if pid_k *
    # S < K:`; of those, one binds the name, a plain assignment; other copies of the loop, under the other arm of a
    # compile-time test, may advance it too)
    earlier = _before(fn, loop)
    before = [single_assign(statement) for statement in earlier]
    starts = [(value, statement) for found, statement in zip(before, earlier) if found is not None
              and found[0] == name.value for value in [found[1]]]
    if len(starts) != 1 or sum(name.value in _targets(n) for statement in earlier for n in preorder(statement)) != 1:
        return None
    # (a loop around this one runs it again from where the previous run's advances left the name, unless it binds
    # the name afresh first: the start must lie inside every loop around)
    if any(isinstance(n, (cst.For, cst.While)) and n is not loop and any(m is loop for m in preorder(n.body))
           and not any(m is starts[0][1] for m in preorder(n.body)) for n in preorder(fn.body)):
        return None
    iterated = loop.iter
    if not (isinstance(iterated, cst.Call) and _callee(iterated.func) in ("range", "tl.range")):
        return None
    args = [a.value for a in iterated.args if a.keyword is None]
    start = args[0] if len(args) >= 2 else cst.Integer("0")
    step = args[2] if len(args) >= 3 else None
    if not isinstance(loop.target, cst.Name):
        return None
    count: cst.BaseExpression = cst.BinaryOperation(loop.target, cst.Subtract(), parenthesized(start)) \
        if not (isinstance(start, cst.Integer) and start.value == "0") else loop.target
    if step is not None:
        count = cst.BinaryOperation(parenthesized(count), cst.FloorDivide(), parenthesized(step))
    return starts[0][0], cst.BinaryOperation(parenthesized(count), cst.Multiply(), parenthesized(steps[0].value))


def _before(fn: cst.FunctionDef, loop: cst.For) -> list[cst.BaseStatement]:
    """The statements that run before `loop` in its own block and in the blocks around it, in the function."""
    found: list[cst.BaseStatement] = []

    def walk(block: cst.BaseSuite) -> bool:
        body = list(block.body) if isinstance(block, cst.IndentedBlock) else []
        for i, statement in enumerate(body):
            if statement is loop or any(n is loop for n in preorder(statement)):
                found.extend(body[:i])
                if statement is loop:
                    return True
                for child in preorder(statement):
                    if child is not statement and isinstance(child, cst.IndentedBlock) and any(
                            n is loop for n in preorder(child)):
                        return walk(child)
                return False
        return False

    return found if walk(fn.body) else []


def _targets(node: cst.CSTNode) -> set[str]:
    """The names an assignment (or a `for` header) binds; none for any other node."""
    if not isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.For)):
        return set()
    targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
    return {n.value for target in targets for n in preorder(target) if isinstance(n, cst.Name)}


def _callee(node: cst.BaseExpression) -> str:
    """`tl.range` of an attribute chain of names, `range` of a name; "" otherwise."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name):
        return f"{node.value.value}.{node.attr.value}"
    return ""


def _joined(terms: list[cst.BaseExpression]) -> cst.BaseExpression:
    """`a + b + c` of the terms (a difference in parentheses: `sum_terms` takes them off)."""
    terms = [parenthesized(t) if isinstance(t, cst.BinaryOperation) and isinstance(t.operator, cst.Subtract) else t
             for t in terms]
    out = terms[0]
    for term in terms[1:]:
        out = cst.BinaryOperation(out, cst.Add(), term)
    return out


def _plain_load(value: cst.BaseExpression) -> bool:
    """`tl.load(address)`: one argument, no mask."""
    return isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
        and value.func.attr.value == "load" and len(value.args) == 1 and value.args[0].keyword is None


def _scalar(address: cst.BaseExpression, once: dict[str, cst.BaseExpression], changing: set[str]
            ) -> tuple[cst.BaseExpression, str, str] | None:
    """The address with each name that holds a tile's column vector expanded to its definition and the `tl.arange`
    term left out, the group divisor and the tile width; None where the vector part is not of that form (or reads a
    name the loop computes, `changing`)."""
    failed = False

    class Inline(cst.CSTTransformer):
        """Names bound once, before the loop, to vectors: their definitions, parenthesised (`depth` levels deep at
        most: a definition that reads its own name, `x = x + 1` of a parameter `x`, is not followed for ever)."""

        def __init__(self, depth: int) -> None:
            self.depth = depth

        def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
            nonlocal failed
            value = once.get(original.value)
            if value is None or not _vector(value, once, 0):
                return updated
            if original.value in changing or self.depth >= 8:
                failed = True
                return updated
            return parenthesized(value.visit(Inline(self.depth + 1)))  # type: ignore[arg-type]

    expanded = address.visit(Inline(0))
    if failed:
        return None
    found: list[tuple[str, str]] = []

    class First(cst.CSTTransformer):
        """`(first + tl.arange(0, BLOCK)) [% N] // group` -> `first [% N] // group`."""

        def leave_BinaryOperation(self, original: cst.BinaryOperation, updated: cst.BinaryOperation
                                  ) -> cst.BaseExpression:
            if isinstance(updated.operator, cst.FloorDivide) and isinstance(updated.right, cst.Name):
                first = _first_column(updated.left)
                if first is not None:
                    found.append((updated.right.value, first[1]))
                    return updated.with_changes(left=first[0])
            return updated

    result = expanded.visit(First())
    # (a scalar of names and numbers only: the rules write it as it is in any dialect)
    if any(isinstance(n, (cst.Call, cst.Subscript)) for n in preorder(result)) or len(set(found)) != 1:
        return None
    if getattr(result, "lpar", None):
        result = result.with_changes(lpar=[], rpar=[])  # (a whole expression: no parentheses around it)
    return result, found[0][0], found[0][1]  # type: ignore[return-value]


def _vector(value: cst.BaseExpression, once: dict[str, cst.BaseExpression], depth: int) -> bool:
    """Whether `value` reads a `tl.arange`, itself or through names bound once."""
    if depth > 8:
        return False
    for n in preorder(value):
        if _is_arange(n):
            return True
        if isinstance(n, cst.Name) and n.value in once and _vector(once[n.value], once, depth + 1):
            return True
    return False


def _is_arange(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "arange"


def _first_column(node: cst.BaseExpression) -> tuple[cst.BaseExpression, str] | None:
    """`(pid * BLOCK + tl.arange(0, BLOCK)[.to(type)]) [% N]` -> (`pid * BLOCK [% N]`, "BLOCK"): the tile's first
    column; None for any other form. The tile starts at a multiple of `BLOCK` (`pid * BLOCK` or `BLOCK * pid`)."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
        inner = _first_column(node.left)
        if inner is None or any(_is_arange(n) for n in preorder(node.right)):
            return None
        return node.with_changes(left=parenthesized(inner[0])), inner[1]
    if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add)):
        return None
    for start, vector in ((node.left, node.right), (node.right, node.left)):
        if isinstance(vector, cst.Call) and isinstance(vector.func, cst.Attribute) and vector.func.attr.value == "to" \
                and _is_arange(vector.func.value):
            # (`tl.arange(0, BLOCK).to(tl.int64)`, the fused-MoE kernels' wide offsets: the first column's scalar
            # is the start, in the width its own terms give, as the source computes it before the add)
            vector = vector.func.value
        if not _is_arange(vector):
            continue
        args = vector.args  # type: ignore[attr-defined]
        if len(args) != 2 or not isinstance(args[0].value, cst.Integer) or args[0].value.value != "0" \
                or not isinstance(args[1].value, cst.Name):
            return None
        block = args[1].value.value
        if isinstance(start, cst.BinaryOperation) and isinstance(start.operator, cst.Multiply) and block in (
                getattr(start.left, "value", None), getattr(start.right, "value", None)) \
                and not any(_is_arange(n) for n in preorder(start)):
            return start, block
    return None
