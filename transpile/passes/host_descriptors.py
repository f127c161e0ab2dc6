"""Tensor descriptors the host builds, made in the kernel from their parts.

Kernels written for Triton's tensor-descriptor API take descriptors the host builds and launches them with
(`TensorDescriptor(x, shape, strides, block_shape)` from `triton.tools.tensor_descriptor`, its block shape often set
by an autotune config's `pre_hook`)::

    @triton.jit
    def matmul_kernel(a_desc, b_desc, c_desc, M, N, K, BLOCK_M: tl.constexpr, ...):
        ...
        a = a_desc.load([offs_am, offs_k])

A descriptor's element type, block shape and layout are then the launch's, not the source's, and a Gluon kernel's
copies need them where the source is translated. This pass gives such a kernel the descriptor's parts as parameters
and makes the descriptor in the kernel from them, the form the rules translate for every target::

    @triton.jit
    def matmul_kernel(a_desc_base, a_desc_shape_0, a_desc_shape_1, a_desc_stride_0,
                      a_desc_block_0: tl.constexpr, a_desc_block_1: tl.constexpr, ...):
        a_desc = tl.make_tensor_descriptor(a_desc_base, [a_desc_shape_0, a_desc_shape_1], [a_desc_stride_0, 1],
                                           [a_desc_block_0, a_desc_block_1])

The variant's Gluon kernel keeps that signature; the variant binds it under the source's (`_HostDescriptors` in
`transpile/helpers/launchers.py`), which takes the host's descriptors, as the source kernel does, and passes their
parts by these names (`parts`): callers and autotune `pre_hook`s are unchanged. The last stride is 1, as every host
descriptor's is (Triton's `TensorDescriptor` asserts it).

Only kernels (not helpers) are rewritten, and only a parameter that is not a constexpr, is never assigned, is read
only as a descriptor (`p.load([..])`, `p.store([..], v)`, `p.dtype`, `p.shape`, `p.strides`, `p.block_shape`) and
is loaded or stored with a list of offsets of one length (the rank). A kernel that hands its descriptor to a helper,
or calls a method the in-kernel form translates differently (`gather`, `scatter`, atomics), is left as written, and
the rules refuse it with the reason they give today. Where a part's name is already taken in the kernel, it is left
as written too.

`make_host_descriptors(source, facts)` returns the new module text and the functions it replaced (old node -> new),
or None when nothing changes; `parts(name, rank)` and `host_descriptors(original, translated)` are the names both
sides of the launch agree on.
"""

from __future__ import annotations

from typing import NamedTuple

import libcst as cst

from transpile.cst_utils import assigned_names, bound_names, is_docstring, names_in
from transpile.cst_walk import semantic_preorder
from transpile.discover import JitFunction, ModuleFacts, language_alias
from transpile.source import SourceFile

class HostDescriptors(NamedTuple):
    """A translated kernel's host descriptors: the source's parameters, and (descriptor parameter, rank) each (and
    True where the kernel reads one slice of it: `host_descriptors`)."""

    params: tuple[str, ...]
    descriptors: tuple[tuple[str, int] | tuple[str, int, bool], ...]


#: what a kernel may read of a host descriptor for this pass to make it in the kernel
_READS = ("load", "store", "dtype", "shape", "strides", "block_shape")
#: the methods that copy a block, whose first argument is the list of offsets (its length: the rank)
_COPIES = ("load", "store")


def parts(name: str, rank: int) -> tuple[list[str], list[str], list[str], str]:
    """The parameters a descriptor parameter `name` of `rank` dimensions becomes: its shape, its strides but the
    last (which is 1), its block shape (constexprs), and its base pointer. The launcher passes them by these names
    (`_DescriptorParts.parts` in `transpile/helpers/launchers.py`, which variants carry: the same names, tested)."""
    return ([f"{name}_shape_{i}" for i in range(rank)], [f"{name}_stride_{i}" for i in range(rank - 1)],
            [f"{name}_block_{i}" for i in range(rank)], f"{name}_base")


def _parts_rank(name: str, params: set[str] | list[str]) -> int:
    """The rank of the descriptor `name` whose parts (`parts`) are all among `params`, else 0."""
    rank = sum(1 for p in params if p.startswith(f"{name}_shape_") and p[len(name) + 7:].isdigit())
    shape, strides, block, base = parts(name, rank)
    return rank if rank and all(p in params for p in (*shape, *strides, *block, base)) else 0


def host_descriptors(original: list[str], translated: list[str], fn: cst.FunctionDef | None = None
                     ) -> tuple[tuple[str, int] | tuple[str, int, bool], ...]:
    """The host descriptors of a kernel whose source parameters are `original` and whose rewritten ones are
    `translated`: (parameter, rank) for each source parameter this pass replaced by its parts; (parameter, rank,
    True) for one `fn` (the rewritten kernel) reads one slice of (`_slice`: its block must be 1 along the first
    axis, which the launcher checks)."""
    made = [_assign(s) for s in fn.body.body] if fn is not None and isinstance(fn.body, cst.IndentedBlock) else []
    sliced = {pair[0] for pair in made if pair is not None and _sliced_made(*pair)}
    found: list[tuple[str, int] | tuple[str, int, bool]] = []
    for name in original:
        rank = _parts_rank(name, translated) if name not in translated else 0
        if rank:
            found.append((name, rank, True) if name in sliced else (name, rank))
    return tuple(found)


def descriptor_tuples(host: HostDescriptors) -> str:
    """The descriptors as the launcher and `_HostDescriptors` take them: `("a_desc", 2), ("x_desc", 3, True), `."""
    return "".join("(" + ", ".join([f'"{d[0]}"', *map(str, d[1:])]) + "), " for d in host.descriptors)


def _sliced_made(name: str, value: cst.BaseExpression) -> bool:
    """`value` makes the descriptor `name` as the slice of the host's at an offset (`name_base + (i) * ...`)."""
    return isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and \
        value.func.attr.value == "make_tensor_descriptor" and bool(value.args) and isinstance(
            value.args[0].value, cst.BinaryOperation) and _code(value.args[0].value).startswith(f"{name}_base + ")


def host_descriptor_names(fn: JitFunction) -> frozenset[str]:
    """The descriptors `fn` (as this pass rewrote it) makes from the parts of the host's: each `d` whose parts
    (`parts(d, rank)`) are all parameters of `fn` and that is not one itself."""
    params = {p.name for p in fn.params}
    return frozenset(name for name in (p[: -len("_base")] for p in params if p.endswith("_base"))
                     if name not in params and _parts_rank(name, params))


def make_host_descriptors(source: SourceFile, facts: ModuleFacts
                          ) -> tuple[str, dict[cst.CSTNode, cst.CSTNode]] | None:
    if ".load(" not in source.text and ".store(" not in source.text:
        return None
    done: dict[cst.CSTNode, cst.CSTNode] = {}
    body = []
    for statement in source.module.body:
        fn = next((f for f in facts.functions.values() if f.node is statement), None)
        new = _rewritten(source, fn) if fn is not None and not fn.is_helper else None
        if new is not None:
            done[statement] = new
        body.append(new or statement)
    if not done:
        return None
    return source.module.with_changes(body=body).code, done


def descriptor_rank(fn: cst.FunctionDef, name: str) -> int | None:
    """The rank of the descriptor parameter `name`, where `fn` reads it only as a descriptor (and loads or stores
    with offset lists of one length), else None."""
    read: set[int] = set()  # the Name nodes of `name` read as a descriptor
    ranks: set[int] = set()
    nodes = list(semantic_preorder(fn.body))
    for node in nodes:
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == name:
            if node.attr.value not in _READS:
                return None
            read.add(id(node.value))
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and isinstance(
                node.func.value, cst.Name) and node.func.value.value == name and node.func.attr.value in _COPIES:
            offsets = node.args[0].value if node.args and node.args[0].keyword is None else None
            if not isinstance(offsets, (cst.List, cst.Tuple)) or any(
                    isinstance(e, cst.StarredElement) for e in offsets.elements):
                return None
            ranks.add(len(offsets.elements))
    for node in nodes:
        if isinstance(node, cst.Name) and node.value == name and id(node) not in read:
            return None  # (assigned, handed to a helper, compared, ...)
    if len(ranks) != 1 or 0 in ranks:
        return None
    return ranks.pop()


def _rewritten(source: SourceFile, fn: JitFunction) -> cst.FunctionDef | None:
    node = fn.node
    if not isinstance(node.body, cst.IndentedBlock):
        return None
    alias = language_alias(source, node)
    if not alias:
        return None
    taken = names_in(node)
    descriptors: dict[str, int] = {}
    for param in fn.params:
        if param.is_constexpr or param.node.star or param.default is not None:
            continue  # (a default: its parts would need defaults too)
        rank = descriptor_rank(node, param.name)
        if rank is None:
            continue
        shape, strides, block, base = parts(param.name, rank)
        if any(n in taken for n in (*shape, *strides, *block, base)):
            continue
        descriptors[param.name] = rank
    if not descriptors:
        return None
    # rank-3 descriptors read one slice at a time (a unit block along the first axis, at one first offset):
    # rank-2 descriptors of that slice, made once its offset is known
    sliced: dict[str, tuple[str, int]] = {}  # name -> (first offset, top-level statement it follows, -1: none)
    for name in [n for n, rank in descriptors.items() if rank == 3]:
        found = _slice(node, name, alias)
        if found is not None:
            sliced[name] = found
    if sliced:
        node = node.with_changes(body=node.body.visit(_Sliced(set(sliced), alias)))
    params: list[cst.Param] = []
    made: list[cst.BaseStatement] = []
    later: list[tuple[int, cst.BaseStatement]] = []  # (top-level statement index to follow, statement)
    constexpr = cst.Annotation(cst.parse_expression(f"{alias}.constexpr"))
    for param in node.params.params:
        name = param.name.value
        if name not in descriptors:
            params.append(param)
            continue
        shape, strides, block, base = parts(name, descriptors[name])
        comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        params.extend(cst.Param(cst.Name(n), comma=comma) for n in (base, *shape, *strides))
        params.extend(cst.Param(cst.Name(n), annotation=constexpr, comma=comma) for n in block)
        if name in sliced:  # (the slice at the first offset: `block_0` is 1, which the launcher checks)
            offset, after = sliced[name]
            later.append((after, cst.parse_statement(
                f"{name} = {alias}.make_tensor_descriptor({base} + ({offset}) * {strides[0]}, [{shape[1]}, "
                f"{shape[2]}], [{strides[1]}, 1], [{block[1]}, {block[2]}])\n")))
            continue
        made.append(cst.parse_statement(
            f"{name} = {alias}.make_tensor_descriptor({base}, [{', '.join(shape)}], [{', '.join([*strides, '1'])}], "
            f"[{', '.join(block)}])\n"))
    if params and params[-1] is not node.params.params[-1] and node.params.params[-1].comma == cst.MaybeSentinel.DEFAULT:
        params[-1] = params[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    statements = list(node.body.body)
    at = 1 if statements and is_docstring(statements[0]) else 0
    comment = cst.EmptyLine(comment=cst.Comment(
        "# triton-transpile: the host's tensor descriptors, made here from the parts the launcher passes"))
    for after in sorted({a for a, _ in later}, reverse=True):  # (from the last, so that indices hold)
        group = [statement for a, statement in later if a == after]
        group[0] = group[0].with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(
            "# triton-transpile: the slices of the host's tensor descriptors this program reads, made here"))])
        statements[max(after + 1, at):max(after + 1, at)] = group
    if made:
        made[0] = made[0].with_changes(leading_lines=[comment])
        statements[at:at] = made
    return node.with_changes(params=node.params.with_changes(params=params),
                             body=node.body.with_changes(body=statements))


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _copy_call(node: cst.CSTNode, name: str) -> cst.Call | None:
    """`node` as a call `name.load([...])` or `name.store([...], v)` of the descriptor `name`, else None."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and isinstance(node.func.value, cst.Name) \
            and node.func.value.value == name and node.func.attr.value in _COPIES:
        return node
    return None


def _reshape_of(node: cst.BaseExpression, alias: str) -> tuple[cst.BaseExpression, list[str]] | None:
    """`tl.reshape(x, [a, b])` or `x.reshape(a, b)` (or a tuple of sizes): (x, the sizes' texts), else None."""
    if not isinstance(node, cst.Call):
        return None
    func = node.func
    args = [a.value for a in node.args if a.keyword is None]
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == alias \
            and func.attr.value == "reshape" and len(args) == 2 and isinstance(args[1], (cst.List, cst.Tuple)):
        return args[0], [_code(e.value) for e in args[1].elements]
    if isinstance(func, cst.Attribute) and func.attr.value == "reshape" and args:
        sizes = args[0].elements if len(args) == 1 and isinstance(args[0], (cst.List, cst.Tuple)) else None
        return func.value, [_code(e.value) for e in sizes] if sizes is not None else [_code(a) for a in args]
    return None


def _assign(statement: cst.BaseStatement) -> tuple[str, cst.BaseExpression] | None:
    """`x = value` on a line of its own: (x, value)."""
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(
            statement.body[0], cst.Assign) and len(statement.body[0].targets) == 1 and isinstance(
            statement.body[0].targets[0].target, cst.Name):
        return statement.body[0].targets[0].target.value, statement.body[0].value
    return None


def _store(statement: cst.BaseStatement, name: str) -> cst.Call | None:
    """`name.store([...], v)` on a line of its own."""
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(
            statement.body[0], cst.Expr):
        call = _copy_call(statement.body[0].value, name)
        return call if call is not None and call.func.attr.value == "store" else None  # type: ignore[union-attr]
    return None


def _slice(fn: cst.FunctionDef, name: str, alias: str) -> tuple[str, int] | None:
    """Where the rank-3 descriptor `name` is read one slice at a time: each load's tile reshaped to 2-D by the next
    statement (`x = name.load([i, m, k])`, `x = tl.reshape(x, [BM, BK])`), each store's value reading a name the
    statement before made by a reshape with a unit first size (`y = tl.reshape(acc, [1, BM, BN])`,
    `name.store([i, m, n], y.to(T))`), every first offset `i` the same, its names bound once, at the top level of
    the kernel, before any copy. Returns (`i`, the top-level statement the slice can be made after, -1 for the
    start), else None."""
    offsets: set[str] = set()
    matched = 0
    for block in (n for n in semantic_preorder(fn.body) if isinstance(n, cst.IndentedBlock)):
        body = list(block.body)
        for i, statement in enumerate(body):
            assigned = _assign(statement)
            call = _copy_call(assigned[1], name) if assigned is not None else None
            if call is not None and call.func.attr.value == "load":  # type: ignore[union-attr]
                reshaped = _assign(body[i + 1]) if i + 1 < len(body) else None
                shape = _reshape_of(reshaped[1], alias) if reshaped is not None else None
                if reshaped is None or reshaped[0] != assigned[0] or shape is None or not isinstance(
                        shape[0], cst.Name) or shape[0].value != assigned[0] or len(shape[1]) != 2:
                    return None
                offsets.add(_code(call.args[0].value.elements[0].value))  # type: ignore[attr-defined]
                matched += 1
            store = _store(statement, name)
            if store is not None:
                made = _assign(body[i - 1]) if i else None
                shape = _reshape_of(made[1], alias) if made is not None else None
                value = store.args[1].value if len(store.args) > 1 else None
                if made is None or shape is None or len(shape[1]) != 3 or shape[1][0] != "1" or value is None \
                        or made[0] not in names_in(value) or block is not fn.body \
                        or any(made[0] in names_in(later) for later in body[i + 1:]):
                    return None  # (the reshape goes: nothing after the store, at the kernel's top level, reads it)
                offsets.add(_code(store.args[0].value.elements[0].value))  # type: ignore[attr-defined]
                matched += 1
    copies = sum(1 for n in semantic_preorder(fn.body) if _copy_call(n, name) is not None)
    # (a `.shape`, `.strides` or `.block_shape` read is the rank-3 descriptor's, not the slice's: left rank 3;
    # `.dtype` is both's)
    geometry = any(isinstance(n, cst.Attribute) and isinstance(n.value, cst.Name) and n.value.value == name
                   and n.attr.value in ("shape", "strides", "block_shape") for n in semantic_preorder(fn.body))
    if len(offsets) != 1 or matched != copies or geometry:
        return None
    offset = offsets.pop()
    # the offset's names: parameters, or bound once at the kernel's top level before the first copy
    top = list(fn.body.body)  # type: ignore[union-attr]
    params = {p.name.value for p in fn.params.params}
    after = -1
    reads = names_in(cst.parse_expression(offset))
    if reads & params & bound_names(fn.body):
        return None  # (a parameter the kernel rebinds: the slice would be made from its first value)
    for read in reads - params:
        binds = [i for i, s in enumerate(top) if read in assigned_names(s)]
        nested = sum(1 for n in semantic_preorder(fn.body) if isinstance(n, (cst.AssignTarget, cst.AugAssign))
                     and read in names_in(n.target))
        if len(binds) != 1 or nested != 1:
            return None
        after = max(after, binds[0])
    first = next((i for i, s in enumerate(top) if any(_copy_call(n, name) for n in semantic_preorder(s))), None)
    if first is None or after >= first:
        return None
    return offset, after


def _without_first(offsets: cst.List | cst.Tuple) -> cst.List | cst.Tuple:
    """A copy's offsets without the first (the slice's): `[b, m, k]` -> `[m, k]`."""
    kept = list(offsets.elements[1:])
    kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return offsets.with_changes(elements=kept)


class _Sliced(cst.CSTTransformer):
    """The copies of sliced rank-3 descriptors (`_slice`) as copies of their rank-2 slices: a load and its reshape
    become a load of the slice; a store reads the reshape's operand, and the reshape goes (nothing else reads it)."""

    def __init__(self, names: set[str], alias: str) -> None:
        super().__init__()
        self.names = names
        self.alias = alias

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        out: list[cst.BaseStatement] = []
        skip = False
        for statement in updated.body:
            if skip:
                skip = False
                continue
            assigned = _assign(statement)
            for name in self.names:
                call = _copy_call(assigned[1], name) if assigned is not None else None
                if call is not None and call.func.attr.value == "load":  # type: ignore[union-attr]
                    load = call.with_changes(args=[call.args[0].with_changes(
                        value=_without_first(call.args[0].value)), *call.args[1:]])  # type: ignore[arg-type]
                    statement = statement.with_changes(body=[statement.body[0].with_changes(value=load)])
                    skip = True  # (the reshape to 2-D: the slice's tile is 2-D)
                    break
                store = _store(statement, name)
                if store is not None and out:
                    made = _assign(out[-1])
                    operand = _reshape_of(made[1], self.alias)[0]  # type: ignore[index]
                    operand = operand if isinstance(operand, cst.Name) else cst.parse_expression(f"({_code(operand)})")
                    value = store.args[1].value.visit(_Renamed(made[0], operand))  # type: ignore[index]
                    new = store.with_changes(args=[store.args[0].with_changes(
                        value=_without_first(store.args[0].value)),  # type: ignore[arg-type]
                        store.args[1].with_changes(value=value), *store.args[2:]])
                    statement = statement.with_changes(body=[statement.body[0].with_changes(value=new)])
                    out.pop()  # (the reshape to 3-D: nothing else reads it, `_slice`)
                    break
            out.append(statement)
        return updated.with_changes(body=out)


class _Renamed(cst.CSTTransformer):
    def __init__(self, name: str, value: cst.BaseExpression) -> None:
        super().__init__()
        self.name = name
        self.value = value

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self.value if updated.value == self.name else updated

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        return updated.with_changes(attr=original.attr)  # (`y.to(T)`: only variables, not attribute names)

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        return updated.with_changes(keyword=original.keyword)  # (nor keyword-argument names)
