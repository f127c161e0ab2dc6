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

from transpile.cst_utils import names_in
from transpile.cst_walk import semantic_preorder
from transpile.discover import JitFunction, ModuleFacts, language_alias
from transpile.source import SourceFile

class HostDescriptors(NamedTuple):
    """A translated kernel's host descriptors: the source's parameters, and (descriptor parameter, rank) each."""

    params: tuple[str, ...]
    descriptors: tuple[tuple[str, int], ...]


#: what a kernel may read of a host descriptor for this pass to make it in the kernel
_READS = ("load", "store", "dtype", "shape", "strides", "block_shape")
#: the methods that copy a block, whose first argument is the list of offsets (its length: the rank)
_COPIES = ("load", "store")


def parts(name: str, rank: int) -> tuple[list[str], list[str], list[str], str]:
    """The parameters a descriptor parameter `name` of `rank` dimensions becomes: its shape, its strides but the
    last (which is 1), its block shape (constexprs), and its base pointer. The launcher passes them by these names
    (`_HostDescriptors.parts` in `transpile/helpers/launchers.py`, which variants carry: the same names, tested)."""
    return ([f"{name}_shape_{i}" for i in range(rank)], [f"{name}_stride_{i}" for i in range(rank - 1)],
            [f"{name}_block_{i}" for i in range(rank)], f"{name}_base")


def host_descriptors(original: list[str], translated: list[str]) -> tuple[tuple[str, int], ...]:
    """The host descriptors of a kernel whose source parameters are `original` and whose rewritten ones are
    `translated`: (parameter, rank) for each source parameter this pass replaced by its parts."""
    found = []
    for name in original:
        if name in translated or f"{name}_base" not in translated:
            continue
        rank = sum(1 for p in translated if p.startswith(f"{name}_shape_") and p[len(name) + 7:].isdigit())
        shape, strides, block, base = parts(name, rank)
        if rank and all(p in translated for p in (*shape, *strides, *block, base)):
            found.append((name, rank))
    return tuple(found)


def host_descriptor_names(fn: JitFunction) -> frozenset[str]:
    """The descriptors `fn` (as this pass rewrote it) makes from the parts of the host's: each `d` whose parts
    (`parts(d, rank)`) are all parameters of `fn` and that is not one itself."""
    params = {p.name for p in fn.params}
    found = set()
    for param in params:
        name = param[: -len("_base")] if param.endswith("_base") else ""
        rank = sum(1 for p in params if p.startswith(f"{name}_shape_") and p[len(name) + 7:].isdigit())
        if name and rank and name not in params and all(
                p in params for part in parts(name, rank)[:3] for p in part):
            found.add(name)
    return frozenset(found)


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
        if param.is_constexpr or param.node.star:
            continue
        rank = descriptor_rank(node, param.name)
        if rank is None:
            continue
        shape, strides, block, base = parts(param.name, rank)
        if any(n in taken for n in (*shape, *strides, *block, base)):
            continue
        descriptors[param.name] = rank
    if not descriptors:
        return None
    params: list[cst.Param] = []
    made: list[cst.BaseStatement] = []
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
        made.append(cst.parse_statement(
            f"{name} = {alias}.make_tensor_descriptor({base}, [{', '.join(shape)}], [{', '.join([*strides, '1'])}], "
            f"[{', '.join(block)}])\n"))
    if params and params[-1] is not node.params.params[-1] and node.params.params[-1].comma == cst.MaybeSentinel.DEFAULT:
        params[-1] = params[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    statements = list(node.body.body)
    at = 1 if statements and _is_docstring(statements[0]) else 0
    comment = cst.EmptyLine(comment=cst.Comment(
        "# triton-transpile: the host's tensor descriptors, made here from the parts the launcher passes"))
    made[0] = made[0].with_changes(leading_lines=[comment])
    statements[at:at] = made
    return node.with_changes(params=node.params.with_changes(params=params),
                             body=node.body.with_changes(body=statements))


def _is_docstring(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(
        statement.body[0], cst.Expr) and isinstance(statement.body[0].value, (cst.SimpleString,
                                                                               cst.ConcatenatedString))
