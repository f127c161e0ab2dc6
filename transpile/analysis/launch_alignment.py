"""Which launches a translated kernel without a pipelined loop should run as Gluon.

Triton picks the layout of each global load and store when it compiles a launch, from what the launch tells it: with
16-byte aligned rows (tensors 16-byte aligned, strides and offsets multiples of 16, which Triton specialises on) each
thread moves 16 contiguous bytes; without, each thread reads one element per instruction, so that a warp's
instruction still covers contiguous addresses. A Gluon variant fixes its layouts in the source: they are the
aligned kind (up to 4 contiguous elements per thread). On an H100 (bench/RESULTS.md: Launch dispatch) the translations
of 85 kernels without a dot loop ran at 0.98-1.6x their sources on aligned launches, but 0.72-0.88x on launches with
unaligned rows (1001 x 3000 fp16 matrices: each load of a warp then strides over 4x the bytes it uses). So the
variant runs its Gluon kernel on aligned launches and the source kernel on the others, through a launcher
(`_AlignedOrTriton`) that checks the arguments `address_params` names: under 1 us of Python per launch.

`address_params` finds the parameters a launch must make aligned: those read by the addresses of the kernel's loads,
stores and atomics (through the local names they are computed from), and those it passes to the parameters a jit
helper addresses memory with. Ints among them must be multiples of 16, tensors 16-byte aligned; mask bounds
(`offs < n_cols`) are not addresses and are not checked.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import TypeVar

import libcst as cst

from transpile import cst_walk
from transpile.cst_utils import (
    assigned_names,
    broadcast_axis,
    call_arguments,
    calls_in,
    conjuncts,
    names_in,
    node_code,
    product_factors,
    sum_terms,
    unparenthesized,
)
from transpile.discover import JitFunction, ModuleFacts, language_name

_MODULE = cst.Module([])

#: The comment over the source kernel's copy: why the other launches run it.
REASON = ("its layouts move up to 4 contiguous elements per thread, which is slower than what Triton compiles for "
          "launches whose rows are not 16-byte aligned (one element per thread per load) and, on aligned rows, for "
          "8- and 16-bit data (16 bytes per thread)")

#: Calls whose first argument (or `pointer=`) is an address.
MEMORY = {"load", "store", "atomic_add", "atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor",
          "atomic_xchg", "atomic_cas"}


def address_params(facts: ModuleFacts, fn: JitFunction, _active: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """The non-constexpr parameters of `fn` that its memory addresses read, directly or through the jit helpers it
    passes them to, in order."""
    source = facts.source
    params = [p.name for p in fn.params if not p.is_constexpr]
    definitions: dict[str, list[cst.CSTNode]] = {}
    for node in cst_walk.nodes_of(fn.node):
        if isinstance(node, cst.Assign):
            for target in node.targets:
                for name in names_in(target.target):
                    definitions.setdefault(name, []).append(node.value)
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign)) and node.value is not None:
            for name in names_in(node.target):
                definitions.setdefault(name, []).append(node.value)
        elif isinstance(node, cst.For):
            # `for off in range(start, stop, step)`: the values are start + k * step; the bound does not move them
            values: list[cst.CSTNode] = [node.iter]
            if isinstance(node.iter, cst.Call) and node.iter.args:  # range, tl.range, tl.static_range
                args = [a.value for a in node.iter.args if a.keyword is None]
                values = [args[0], *args[2:]] if len(args) >= 2 else []
            for name in names_in(node.target):
                definitions.setdefault(name, []).extend(values)
    roots: list[cst.CSTNode] = [pointer for _, pointer in _addresses(facts, fn, MEMORY)]
    for call in calls_in(fn.node):
        callee = facts.callee(call.func)
        if callee is None or callee in _active | {fn.name}:
            continue
        helper = facts.functions[callee]
        addressed = set(address_params(facts, helper, _active | {fn.name}))
        for param, arg in call_arguments(call, [p.name for p in helper.params]):
            if param in addressed or arg.star:
                roots.append(arg.value)

    def reads(node: cst.CSTNode) -> set[str]:
        """The names `node` reads, but for the values it loads: a loaded tensor is data (its own address is a root;
        the mask it is loaded with bounds it, it does not move it)."""
        if isinstance(node, cst.Call) and (language_name(source.qualified_name(node.func)) or "").endswith("load"):
            return set()
        if isinstance(node, cst.Name):
            return {node.value}
        if isinstance(node, (cst.Attribute, cst.Arg)):  # not the attribute's or the keyword's name
            return reads(node.value)
        return set().union(*(reads(child) for child in node.children))

    read: set[str] = set()
    todo = [name for root in roots for name in reads(root)]
    while todo:
        name = todo.pop()
        if name in read:
            continue
        read.add(name)
        for value in definitions.get(name, []):
            todo.extend(reads(value))
    return tuple(p for p in params if p in read)


def column_major_access(facts: ModuleFacts, fn: JitFunction) -> cst.Call | None:
    """A load or store of a 2-D tile whose addresses are contiguous along its first axis (`ptr + rows[:, None] +
    cols[None, :] * stride`: a transposed copy), else None. The Gluon translation gives a tile one layout, whose
    warps' lanes run along the last axis: such an access is then uncoalesced, where Triton's compiler picks a layout
    per access and converts between them (0.50x its source on an H100, bench/RESULTS.md: Launch dispatch)."""
    single = _single_definitions(fn)
    for call, pointer in _addresses(facts, fn, {"load", "store"}):
        seen: set[str] = set()
        while isinstance(pointer, cst.Name) and pointer.value in single and pointer.value not in seen:
            seen.add(pointer.value)
            pointer = single[pointer.value]
        unit_axes = {broadcast_axis(term) for term in sum_terms(pointer)} - {None}
        if unit_axes == {0}:
            return call
    return None


T = TypeVar("T")


def _per_function(compute: Callable[[JitFunction], T]) -> Callable[[JitFunction], T]:
    """Memoise a pure reading of a function's definitions, by its node (identity): the launch checks ask for the same
    function's many times. Results are shared: read them, never change them."""
    cache: dict[cst.FunctionDef, T] = {}

    @functools.wraps(compute)
    def cached(fn: JitFunction) -> T:
        found = cache.get(fn.node)
        if found is None:
            if len(cache) > 10_000:
                cache.clear()
            found = cache[fn.node] = compute(fn)
        return found

    return cached


@_per_function
def _single_definitions(fn: JitFunction) -> dict[str, cst.BaseExpression]:
    """The value of each name that `fn` assigns exactly once with a plain `name = value` (anywhere in its body)."""
    return _single_definitions_in(fn.node)


@functools.lru_cache(maxsize=32)
def _single_definitions_in(root: cst.CSTNode) -> dict[str, cst.BaseExpression]:
    """The value of each name assigned exactly once under `root` with a plain `name = value` (read-only: cached per
    tree, which is never changed in place; the analyses ask for it per loop and per tile)."""
    return {name: node.value for name, node in _single_assignments_in(root).items()}


def _single_assignments_in(root: cst.CSTNode) -> dict[str, cst.Assign]:
    """The `name = value` statement of each name assigned exactly once under `root` with a plain assignment."""
    found: dict[str, list[cst.Assign]] = {}
    for node in cst_walk.preorder(root):
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            found.setdefault(node.targets[0].target.value, []).append(node)
    return {name: nodes[0] for name, nodes in found.items() if len(nodes) == 1}


def _addresses(facts: ModuleFacts, fn: JitFunction, calls: set[str], keyword: str = "pointer"
               ) -> list[tuple[cst.Call, cst.BaseExpression]]:
    """(call, its address) for each call of `fn` to one of the language functions `calls` (`tl.load`, ...): the first
    positional argument or `keyword=` (`pointer=`; `base=` for block pointers and descriptors)."""
    found = []
    for call in calls_in(fn.node):
        lang = language_name(facts.source.qualified_name(call.func))
        if lang is None or lang.rsplit(".", 1)[-1] not in calls:
            continue
        pointer = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == keyword),
                       call.args[0].value if call.args and call.args[0].keyword is None else None)
        if pointer is not None:
            found.append((call, pointer))
    return found


def pointer_params(facts: ModuleFacts, fn: JitFunction, _active: frozenset[str] = frozenset()) -> set[str]:
    """The parameters of `fn` that are address bases, whatever their names: the one parameter among the terms of a
    load's, store's or atomic's address (`X + cols` after `X += row * stride`; `x_row + cols` after `x_row = X +
    row * stride`), or passed to a parameter a jit helper uses so. Where several parameters are terms of one address
    (`base + row * stride + cols`), the one never compared, multiplied or divided, else those whose names say pointer
    (`*ptr`, `*_base`)."""
    params = {p.name for p in fn.params if not p.is_constexpr}
    single = _single_definitions(fn)

    def candidates(expression: cst.BaseExpression, seen: frozenset[str]) -> set[str]:
        found: set[str] = set()
        for term in sum_terms(expression):
            if not isinstance(term, cst.Name) or term.value in seen:
                continue
            if term.value in params:
                found.add(term.value)
            elif term.value in single:
                found |= candidates(single[term.value], seen | {term.value})
        return found

    # names compared, multiplied or divided somewhere are offsets, not pointers
    offsets: set[str] = set()
    for node in cst_walk.nodes_of(fn.node):
        if isinstance(node, cst.Comparison):
            offsets |= names_in(node)
        elif isinstance(node, cst.BinaryOperation) and not isinstance(node.operator, (cst.Add, cst.Subtract)):
            offsets |= names_in(node.left) | names_in(node.right)
    found: set[str] = set()
    # (a block pointer's or a tensor descriptor's base is an address base too: `make_block_ptr(base=X, ...)`)
    bases = _addresses(facts, fn, {"make_block_ptr", "make_tensor_descriptor"}, keyword="base")
    for _, pointer in [*_addresses(facts, fn, MEMORY), *bases]:
        names = candidates(pointer, frozenset())
        if len(names) > 1:
            names = (names - offsets) if len(names - offsets) == 1 else {n for n in names if n.endswith(
                ("ptr", "_base"))}
        found |= names
    for call in calls_in(fn.node):
        callee = facts.callee(call.func)
        if callee is None or callee in _active | {fn.name}:
            continue
        helper = facts.functions[callee]
        bases = pointer_params(facts, helper, _active | {fn.name})
        for param, arg in call_arguments(call, [p.name for p in helper.params]):
            if param in bases and isinstance(arg.value, cst.Name) and arg.value.value in params:
                found.add(arg.value.value)
    return found


def pointer_tile_strides(fn: JitFunction, tiles: list[cst.BaseExpression], advances: list[cst.BaseStatement],
                         constexprs: bool = False) -> tuple[list[str], list[str]]:
    """The integer parameters that scale the addresses of 2-D pointer tiles (`a_ptr + offs_m[:, None] * stride_am +
    offs_k[None, :] * stride_ak`, through the local names they are made of) and of the statements that advance them
    (`a_ptrs += BLOCK_K * stride_ak`): (the strides of the last axis, the others). A launch where the first are 1 and
    the others multiples of 16 (with 16-byte aligned tensors) has Triton compile rows of 16-byte aligned vectors,
    which direct-to-LDS copies need. With `constexprs`, the constexpr parameters in those places instead
    (`stride_ak: tl.constexpr`: each launch compiles its own value in)."""
    params = {p.name for p in fn.params if p.is_constexpr == constexprs}
    definitions = _single_definitions(fn)
    unit: list[str] = []
    other: list[str] = []

    def add(into: list[str], node: cst.CSTNode) -> None:
        for name in sorted(names_in(node) & params):
            if name not in into:
                into.append(name)

    every = all_definitions(fn)  # (`offs = tl.max_contiguous(tl.multiple_of(offs, B), B)` assigns twice)

    def is_vector(node: cst.CSTNode, seen: frozenset[str] = frozenset()) -> bool:
        """`node` reads an index vector (a `tl.arange`, through the names it is made of)."""
        if _reads_arange(node):
            return True
        return any(is_vector(every[n], seen | {n}) for n in sorted(names_in(node) & set(every) - seen))

    def walk(node: cst.BaseExpression, axis: int | None, seen: frozenset[str], vector: bool = False) -> None:
        if vector:  # inside an index vector: a factor beside the vector scales it, whatever else it reads offsets it
            for term in sum_terms(node):
                factors = product_factors(term)
                scaled = len(factors) > 1 and any(is_vector(f, seen) for f in factors)
                for factor in factors:
                    if scaled and not is_vector(factor, seen):
                        add(unit if axis == 1 else other, factor)  # `(offs_k * stride_ak)[None, :]`
                    else:
                        add(other, factor)
                        for name in sorted(names_in(factor) & set(definitions) - seen):
                            walk(definitions[name], axis, seen | {name}, vector=True)
            return
        for term in sum_terms(node):
            if isinstance(term, cst.Name) and term.value in definitions and term.value not in seen:
                walk(definitions[term.value], axis, seen | {term.value})
                continue
            factors = product_factors(term)
            term_axis = axis
            for factor in factors:
                if broadcast_axis(factor) is not None:
                    term_axis = broadcast_axis(factor)
                elif term_axis is None:  # an expression of one broadcast vector (`(offs_k[:, None] // 8)`)
                    inner = {broadcast_axis(n) for n in cst_walk.preorder(factor) if isinstance(n, cst.Subscript)}
                    if len(inner - {None}) == 1:
                        term_axis = (inner - {None}).pop()
            if term_axis is None and any(is_vector(f, seen) for f in factors):
                # a 1-D vector in a 2-D sum (`offs_k * stride_ak` beside `offs_m[:, None] * stride_am`): broadcast
                # implicitly, along the last axis
                for factor in factors:
                    if is_vector(factor, seen):
                        walk(factor, 1, seen, vector=True)
                    else:
                        add(unit, factor)
                continue
            for factor in factors:
                # The index vector (`offs_n[None, :]`, `(pid_n * BLOCK_N + offs)[None, :]`): what it reads offsets
                # the row or wraps it (`% N`): multiples of 16 keep its vectors aligned. A factor beside it scales
                # the axis: the stride, 1 for the last axis.
                vector = broadcast_axis(factor) is not None
                if vector:
                    walk(factor.value, term_axis, seen, vector=True)  # type: ignore[attr-defined]
                    continue
                local = names_in(factor) & set(definitions) - seen
                if local:  # a 2-D name made of others (`a_ptr + offs` with `offs = ...[:, None] + ...[None, :]`)
                    for name in sorted(local):
                        walk(definitions[name], term_axis, seen | {name})
                    continue
                add(unit if term_axis == 1 else other, factor)

    for tile in tiles:
        walk(tile, None, frozenset())
    for statement in advances:
        add(other, statement)
    # A base pointer the kernel moves (`a_ptr += batch * stride_ab`): what moves it must keep it 16-byte aligned.
    bases = set().union(*(_reads(tile, definitions) for tile in tiles))  # (through the definitions they are made of)
    for node in _aug_assigns_in(fn.node):
        if isinstance(node.target, cst.Name) and node.target.value in bases \
                and node.target.value in {p.name for p in fn.params}:
            add(other, node.value)
            if not constexprs:  # (and the arguments a local name it adds was made of: `Q += adj`)
                for name in vouching_params(fn, node.value) or []:
                    if name in params and name not in other:  # (the integer arguments; constexprs: the rule's)
                        other.append(name)
    return unit, [name for name in other if name not in unit]


def last_axis_mask_params(fn: JitFunction, masks: list[cst.BaseExpression]) -> list[str]:
    """The integer parameters that bound a tile's mask along its last axis (`offs_k[None, :] < K - k * BLOCK_K`,
    `offs_n[None, :] < N`): where they are multiples of 16, every vector of 8 (16-bit) elements along that axis is
    masked as a whole, which a copy that moves a lane's vector at once (direct-to-LDS) needs. Row bounds are not."""
    params = {p.name for p in fn.params if not p.is_constexpr}
    definitions = all_definitions(fn)  # (`k_left = K - k * BLOCK_K` in each of two loops: both values)
    found: list[str] = []

    def last_axis(node: cst.CSTNode, seen: frozenset[str] = frozenset()) -> bool:
        """The comparison runs along the tile's last axis: `v[None, :]`, or a 1-D vector broadcast implicitly (a
        rank-1 operand lines up with the last axis)."""
        subscripts = [broadcast_axis(sub) for sub in cst_walk.preorder(node) if isinstance(sub, cst.Subscript)]
        if 1 in subscripts:
            return True
        if 0 not in subscripts and not any(_is_2d(definitions[n]) for n in names_in(node) & set(definitions)):
            return True  # no broadcast at all: a 1-D comparison, implicitly along the last axis
        return any(last_axis(definitions[n], seen | {n}) for n in sorted(names_in(node) & set(definitions) - seen)
                   if _is_2d(definitions[n]))

    # (a bound the kernel loads, `K = tl.load(sizes + g)`: its value, not the arguments its address reads, bounds the
    # tile; `run_time_alignment` tests it in the kernel)
    unloaded = {name: value for name, value in definitions.items() if not any(map(is_load, calls_in(value)))}
    for mask in masks:
        for conjunct in conjuncts(mask):
            if last_axis(conjunct):
                for name in sorted(_reads(conjunct, unloaded) & params):
                    if name not in found:
                        found.append(name)
    return found


@_per_function
def all_definitions(fn: JitFunction) -> dict[str, cst.BaseExpression]:
    """Every value `fn` assigns to each name (plain, augmented or annotated), as one tuple expression per name: what
    reads a name may read any of them (read-only: cached per function tree)."""
    return _all_definitions_in(fn.node)


@functools.lru_cache(maxsize=32)
def _all_definitions_in(root: cst.CSTNode) -> dict[str, cst.BaseExpression]:
    values: dict[str, list[cst.BaseExpression]] = {}
    for node in cst_walk.preorder(root):
        if isinstance(node, cst.Assign):
            for target in node.targets:
                for name in names_in(target.target):
                    values.setdefault(name, []).append(node.value)
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign)) and node.value is not None:
            for name in names_in(node.target):
                values.setdefault(name, []).append(node.value)
        elif isinstance(node, cst.For) and isinstance(node.target, cst.Name) and isinstance(node.iter, cst.Call):
            # a loop variable takes the values its range's bounds and step make (`for k in range(K, 0, -BLOCK_K)`)
            values.setdefault(node.target.value, []).extend(a.value for a in node.iter.args if a.keyword is None)
    return {name: cst.Tuple([cst.Element(v) for v in vs]) for name, vs in values.items()}


def is_load(call: cst.Call) -> bool:
    """`call` loads from memory (`tl.load`, a descriptor's `load`, `load` imported)."""
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "load" \
        or isinstance(call.func, cst.Name) and call.func.value == "load"


@functools.lru_cache(maxsize=32)
def _aug_assigns_in(root: cst.CSTNode) -> tuple[cst.AugAssign, ...]:
    """The augmented assignments under `root`, in order (read-only: cached per tree, which the analyses ask for per
    tile)."""
    return tuple(node for node in cst_walk.nodes_of(root) if isinstance(node, cst.AugAssign))


@functools.lru_cache(maxsize=4096)
def _reads_arange(node: cst.CSTNode) -> bool:
    """`node` makes an index vector itself (a `tl.arange` in it; cached per node: trees are never changed in
    place, and the analyses ask it of the same definitions for every tile)."""
    return any(isinstance(n, cst.Call) and node_code(_MODULE, n.func).endswith("arange")
               for n in cst_walk.preorder(node))


def _is_2d(node: cst.CSTNode) -> bool:
    return any(isinstance(sub, cst.Subscript) and broadcast_axis(sub) is not None for sub in cst_walk.preorder(node))


def _reads(node: cst.CSTNode, definitions: dict[str, cst.BaseExpression], seen: frozenset[str] = frozenset()
           ) -> set[str]:
    names = names_in(node)
    for name in names & set(definitions) - seen:
        names |= _reads(definitions[name], definitions, seen | {name})
    return names


def tile_base(fn: JitFunction, tile: cst.BaseExpression, pointers: set[str]) -> str | None:
    """The pointer parameter a tile of pointers is addressed from (`a_ptr + offs_m[:, None] * stride + ...`, through
    the names it is made of), or None: a tile whose base the kernel loads from memory or computes otherwise, whose
    alignment no launch can tell."""
    definitions = _single_definitions(fn)
    found: set[str] = set()

    rest: list[cst.BaseExpression] = []

    def walk(node: cst.BaseExpression, seen: frozenset[str]) -> None:
        for term in sum_terms(node):
            if isinstance(term, cst.Name) and term.value in pointers:
                found.add(term.value)  # a parameter added as it is: the base
            elif isinstance(term, cst.Name) and term.value in definitions and term.value not in seen:
                walk(definitions[term.value], seen | {term.value})
            else:
                rest.append(term)

    walk(tile, frozenset())
    if len(found) != 1:
        return None
    (base,) = found
    return base if not any(base in names_in(term) for term in rest) else None


def moved_unvouched(fn: JitFunction, name: str) -> bool:
    """Whether the kernel moves the pointer parameter `name` (`q += tl.load(offsets + pid)`, `q = q + off`) by a
    scalar it loads that no launch vouches for as a multiple of 16 bytes (`_unvouched_load`). The compile cannot
    prove the moved base aligned, and a copy of 16 bytes a lane from it does not compile: the kernel tests it
    (`run_time_alignment`). A move by a tensor (`b_ptr += (stride * offs_n)[None, :]`) is left to the checks that
    name it."""
    every = all_definitions(fn)
    for node in cst_walk.nodes_of(fn.node):
        moved: cst.BaseExpression | None = None
        if isinstance(node, cst.AugAssign) and isinstance(node.target, cst.Name) and node.target.value == name \
                and isinstance(node.operator, (cst.AddAssign, cst.SubtractAssign)):
            moved = node.value
        elif isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name) \
                and node.targets[0].target.value == name:
            terms = _signed_terms(node.value)
            if not any(isinstance(t, cst.Name) and t.value == name for t in terms):
                return True  # (a base made afresh: nothing vouches for it)
            moved = _sum_of([t for t in terms if not (isinstance(t, cst.Name) and t.value == name)])
        if moved is not None and not _tensor(moved, every) and _unvouched_load(fn, moved, every):
            return True
    return False


def _sum_of(values: list[cst.BaseExpression]) -> cst.BaseExpression | None:
    """The sum of `values` (None for none)."""
    if not values:
        return None
    total = values[0]
    for value in values[1:]:
        total = cst.BinaryOperation(total, cst.Add(), value)
    return total


def _tensor(node: cst.CSTNode, every: dict[str, cst.BaseExpression], seen: frozenset[str] = frozenset()) -> bool:
    """`node` makes or reads a vector (an index vector, a broadcast), through the names it reads."""
    if _is_2d(node) or _reads_arange(node):
        return True
    return any(_tensor(every[n], every, seen | {n}) for n in sorted(names_in(node) & set(every) - seen))


def vouching_params(fn: JitFunction, node: cst.BaseExpression, depth: int = 0) -> list[str] | None:
    """The arguments whose being multiples of 16 makes the scalar offset `node` one: each term an integer argument, a
    product with one, with a literal multiple of 16 or with a local name assigned once to such a sum (`r *
    stride_x_dh`, `stride_x_dh = dil_h * stride_x_h`), or such a name itself (`adj = (stride_h * (bhid % H) +
    stride_z * (bhid // H)).to(tl.int64)`, the tutorial's); a cast is looked through. Integer arguments come first
    in a product; a constexpr one is named where no integer argument scales the term (the launcher checks the first,
    `pointer_tile_strides`; a constexpr's launches are tested by the rule, `offset_constexprs`). None where a term is
    none of these (a loaded offset)."""
    runtime = {p.name for p in fn.params if not p.is_constexpr}
    constexprs = {p.name for p in fn.params if p.is_constexpr}
    definitions = _single_definitions(fn)
    found: list[str] = []

    def local(name: str) -> list[str] | None:
        return vouching_params(fn, definitions[name], depth + 1) if name in definitions and depth < 4 else None

    for term in _signed_terms(node):
        term = unparenthesized(term)
        while isinstance(term, cst.Call) and isinstance(term.func, cst.Attribute) and term.func.attr.value == "to":
            term = unparenthesized(term.func.value)  # (a cast: `(...).to(tl.int64)`)
        if isinstance(term, cst.BinaryOperation) and isinstance(term.operator, (cst.Add, cst.Subtract)):
            inner = vouching_params(fn, term, depth + 1) if depth < 4 else None
            if inner is None:
                return None
            found += inner
            continue
        factors = product_factors(term) if isinstance(term, cst.BinaryOperation) else [term]
        if any(isinstance(f, cst.Integer) and int(f.value, 0) % 16 == 0 for f in factors):
            continue
        names = [f.value for f in factors if isinstance(f, cst.Name)]
        scaling = next((n for n in names if n in runtime), None) or next((n for n in names if n in constexprs), None)
        if scaling is not None:
            found.append(scaling)
            continue
        inner = next((v for v in (local(n) for n in names) if v is not None), None)
        if inner is None:
            return None
        found += inner
    return list(dict.fromkeys(found))


def offset_constexprs(fn: JitFunction, tiles: list[cst.BaseExpression]) -> list[str]:
    """The constexpr parameters that vouch for the offsets by which the kernel moves the parameters its pointer
    tiles are addressed from (`q += (bos * H + i_h) * K`: `K`): launches where one is not a multiple of 16 cannot
    prove the moved base aligned, and run the source kernel."""
    constexprs = {p.name for p in fn.params if p.is_constexpr}
    params = {p.name for p in fn.params}
    every = all_definitions(fn)
    found: list[str] = []
    for tile in tiles:
        base = tile_base(fn, tile, params)
        if base is None:
            continue
        offsets = [node.value for node in _aug_assigns_in(fn.node)
                   if isinstance(node.target, cst.Name) and node.target.value == base]
        for offset in [*offsets, *_scalar_offsets(fn, tile, base)]:
            if _tensor(offset, every):
                continue
            found += [n for n in vouching_params(fn, offset) or [] if n in constexprs]
    return list(dict.fromkeys(found))


def unvouched_offset(fn: JitFunction, tile: cst.BaseExpression, base: str) -> bool:
    """Whether the address of `tile`, followed through the names assigned once that make it (`qb = q + tl.load(off +
    pid)`, then `qb + offs_m[:, None] * stride`), adds to its base parameter `base` a scalar it loads that no launch
    vouches for (`_unvouched_load`): a tensor term is the other checks' (strides, contiguity)."""
    every = all_definitions(fn)
    return any(_unvouched_load(fn, term, every) for term in _scalar_offsets(fn, tile, base))


def _scalar_offsets(fn: JitFunction, tile: cst.BaseExpression, base: str) -> list[cst.BaseExpression]:
    """The scalar terms the address of `tile` adds to its base parameter `base`, through the names assigned once it
    is made of (`qb = q + off`, then `qb + offs_m[:, None] * stride`: `off`); its tensor terms left out."""
    definitions = _single_definitions(fn)
    every = all_definitions(fn)
    scalars: list[cst.BaseExpression] = []

    def walk(node: cst.BaseExpression, seen: frozenset[str]) -> None:
        for term in sum_terms(node):
            if isinstance(term, cst.Name) and term.value == base:
                continue
            if isinstance(term, cst.Name) and term.value in definitions and term.value not in seen:
                walk(definitions[term.value], seen | {term.value})
            elif not _tensor(term, every):
                scalars.append(term)

    walk(tile, frozenset())
    return scalars


def _unvouched_load(fn: JitFunction, offset: cst.BaseExpression, every: dict[str, cst.BaseExpression]) -> bool:
    """The scalar offset reads a value the kernel loads (through the names it is made of) and no argument vouches for
    it (`vouching_params`): neither the launch nor the compile can prove it a multiple of 16 bytes. (An offset of
    values the kernel computes from its arguments and constexprs, a local constexpr, is the compile's to prove.)"""
    if vouching_params(fn, offset) is not None:
        return False

    def loads(node: cst.CSTNode, seen: frozenset[str]) -> bool:
        if any(map(is_load, calls_in(node))):
            return True
        return any(loads(every[n], seen | {n}) for n in sorted(names_in(node) & set(every) - seen))

    return loads(offset, frozenset())


def last_axis_reads_memory(fn: JitFunction, tile: cst.BaseExpression) -> bool:
    """Whether the offsets of a 2-D tile of pointers along its last (contiguous) axis read a value loaded from memory
    (`row_offs[None, :]` with `row_offs = tl.load(starts + pid) + offs`): no launch can make those provably aligned,
    so the tile cannot be copied 16 bytes a lane (a direct-to-LDS copy of such a tile does not compile). A loaded
    value that only picks a block (`pid_n * BLOCK_N`, where `pid_n` is computed from a token count the kernel loads,
    as MoE kernels compute their grid) keeps the offsets a multiple of the block: the compiler proves that (a
    product's divisibility is its factors'), so it does not count."""
    definitions = all_definitions(fn)
    blocks = _block_extents(fn)

    def shifts(node: cst.CSTNode, seen: frozenset[str]) -> bool:
        """`node`, an offset, reads a loaded value other than as a multiple of a block extent."""
        node = node.value if isinstance(node, cst.Element) else node
        if isinstance(node, cst.Tuple):  # every value a name is assigned (`all_definitions`)
            return any(shifts(element.value, seen) for element in node.elements)
        for term in sum_terms(node):  # (parentheses off)
            factors = product_factors(term)
            if len(factors) > 1 and any(_is_block(f, blocks) for f in factors):
                continue  # `pid_n * BLOCK_N`: a multiple of the block, whatever `pid_n` is
            if len(factors) == 1 and isinstance(term, cst.BinaryOperation) \
                    and isinstance(term.operator, cst.Modulo):
                if shifts(term.left, seen):  # (`% N`: a launch makes `N` a multiple of 16)
                    return True
                continue
            if any(map(is_load, calls_in(term))):
                return True
            if any(shifts(definitions[n], seen | {n}) for n in sorted(names_in(term) - seen) if n in definitions):
                return True
        return False

    def walk(node: cst.BaseExpression, seen: frozenset[str]) -> bool:
        if isinstance(node, cst.Tuple):  # every value a name is assigned (`all_definitions`)
            return any(walk(element.value, seen) for element in node.elements)
        for term in sum_terms(node):
            if isinstance(term, cst.Name) and term.value in definitions and term.value not in seen:
                if walk(definitions[term.value], seen | {term.value}):
                    return True
                continue
            factors = product_factors(term)
            if any(broadcast_axis(f) == 1 and shifts(f.value, seen) for f in factors):  # type: ignore[attr-defined]
                return True
        return False

    return walk(tile, frozenset())


def last_axis_selected(fn: JitFunction, tile: cst.BaseExpression) -> str | None:
    """The name of a vector along a 2-D tile of pointers' last (contiguous) axis that a select makes without a
    contiguity hint after it (`cols = tl.where(cols < N, cols, 0)`, no `tl.max_contiguous(...)` among its values): the
    compiler cannot prove such offsets contiguous, so the tile is not copied 16 bytes a lane (a direct-to-LDS copy of
    it does not compile). None where no such vector is read."""
    definitions = all_definitions(fn)

    def call_names(value: cst.BaseExpression) -> set[str]:
        value = value.value if isinstance(value, cst.Element) else value
        return {node_code(_MODULE, c.func).rsplit(".", 1)[-1] for c in calls_in(value)}

    vectors: dict[str, bool] = {}

    def vector(name: str, seen: frozenset[str] = frozenset()) -> bool:
        """`name` holds a vector (made from an `arange`, through the values it is assigned), not a scalar: a select
        of scalars (a block index `pid_n = tl.where(...)`) leaves `pid_n * BLOCK_N + tl.arange(...)` contiguous."""
        if name not in vectors:
            values = definitions.get(name)
            vectors[name] = values is not None and any(
                "arange" in call_names(v) or any(vector(n, seen | {name}) for n in names_in(v.value) - seen - {name})
                for v in values.elements)  # type: ignore[attr-defined]
        return vectors[name]

    def selected(name: str, seen: frozenset[str]) -> str | None:
        values = definitions.get(name)
        if values is None or not vector(name):
            return None
        calls = [call_names(v) for v in values.elements]  # type: ignore[attr-defined]
        if any("max_contiguous" in c for c in calls):
            return None  # (the kernel vouches for its contiguity)
        if any("where" in c for c in calls):
            return name
        for value in values.elements:  # type: ignore[attr-defined]
            for read in sorted(names_in(value.value) - seen):
                found = selected(read, seen | {read})
                if found is not None:
                    return found
        return None

    def walk(node: cst.BaseExpression, seen: frozenset[str]) -> str | None:
        for term in sum_terms(node):
            if isinstance(term, cst.Name) and term.value in definitions and term.value not in seen:
                for value in definitions[term.value].elements:  # type: ignore[attr-defined]
                    found = walk(value.value, seen | {term.value})
                    if found is not None:
                        return found
                continue
            for factor in product_factors(term):
                if broadcast_axis(factor) == 1:
                    for name in sorted(names_in(factor.value)):  # type: ignore[attr-defined]
                        found = selected(name, frozenset({name}))
                        if found is not None:
                            return found
        return None

    return walk(tile, frozenset())


def _block_extents(fn: JitFunction) -> set[str]:
    """The constexpr parameters `fn` makes index vectors of (`tl.arange(0, BLOCK_N)`): powers of two the compiler
    knows, so a product with one is a multiple of it."""
    constexprs = {p.name for p in fn.params if p.is_constexpr}
    found: set[str] = set()
    for node in cst_walk.nodes_of(fn.node):
        if isinstance(node, cst.Call) and node_code(_MODULE, node.func).endswith("arange") and len(node.args) == 2 \
                and isinstance(node.args[1].value, cst.Name) and node.args[1].value.value in constexprs:
            found.add(node.args[1].value.value)
    return found


def _is_block(node: cst.BaseExpression, blocks: set[str]) -> bool:
    return isinstance(node, cst.Name) and node.value in blocks


def first_axis_contiguous(fn: JitFunction, tile: cst.BaseExpression) -> bool:
    """Whether a 2-D tile of pointers steps by one element along its first axis (`base + offs_d[:, None] +
    offs_n[None, :] * stride`: a column-major tile, K^T loaded as [HEAD_DIM, BLOCK_N]; a block pointer of order
    `(0, 1)`, lowered to `offs[:, None] * p_stride0` with `p_stride0 = 1`): its 16-byte vectors would run down the
    columns, which the copy layouts (16 bytes along the last axis) do not take."""
    definitions = _single_definitions(fn)
    return _some_term(tile, definitions, lambda factors: any(
        broadcast_axis(f) == 0 and not _scaled_inside(f.value, definitions) for f in factors) and all(  # type: ignore[attr-defined]
        _is_one(f, definitions) for f in factors if broadcast_axis(f) is None))


def _scaled_inside(node: cst.BaseExpression, definitions: dict[str, cst.BaseExpression]) -> bool:
    """Whether the vector `node` broadcast in a tile (`(stride_h * offs_h)[:, None]`) scales its every term by a
    factor other than 1: the tile's axis is then strided by that factor, not contiguous (FlagGems' conv kernels write
    their strides inside the broadcast; `pointer_tile_strides` reads them there)."""
    return all(len(factors) > 1 and not all(_is_one(f, definitions) for f in factors[1:])
               and not all(_is_one(f, definitions) for f in factors[:-1])
               for factors in map(product_factors, sum_terms(node)))


def fixed_last_axis_stride(fn: JitFunction, tile: cst.BaseExpression) -> str | None:
    """The stride that scales a 2-D tile of pointers along its last axis where it is known when the kernel is
    compiled and is not 1 (`offs_t[None, :] * (H * K)`, a block pointer's `p_stride1 = H * K`: literals and products
    of constexprs; a constexpr alone may be 1), else None. No launch can make it 1, so the tile's vectors along that
    axis are one element wide."""
    definitions = _single_definitions(fn)
    constexprs = {p.name for p in fn.params if p.is_constexpr}
    found: list[str] = []

    def fixed(node: cst.BaseExpression, seen: frozenset[str] = frozenset()) -> bool:
        node = unparenthesized(node)
        if isinstance(node, cst.Integer):
            return True
        if isinstance(node, cst.Name):
            if node.value in constexprs:
                return True
            return node.value in definitions and node.value not in seen and fixed(definitions[node.value],
                                                                                   seen | {node.value})
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Multiply, cst.Add)):
            return fixed(node.left, seen) and fixed(node.right, seen)
        return False

    def single(node: cst.BaseExpression, seen: frozenset[str] = frozenset()) -> bool:
        """`node` is one constexpr (a stride parameter made constexpr, `stride_xk: tl.constexpr`: 1 at launches of
        contiguous rows), itself or through a name assigned it once."""
        node = unparenthesized(node)
        if isinstance(node, cst.Name) and node.value in constexprs:
            return True
        return isinstance(node, cst.Name) and node.value in definitions and node.value not in seen and single(
            definitions[node.value], seen | {node.value})

    def test(factors: list[cst.BaseExpression]) -> bool:
        if not any(broadcast_axis(f) == 1 for f in factors):
            return False
        others = [f for f in factors if broadcast_axis(f) is None]
        if others and all(fixed(f) for f in others) and not all(_is_one(f, definitions) for f in others) \
                and not (len(others) == 1 and single(others[0])):
            found.append(" * ".join(node_code(_MODULE, f) for f in others))
            return True
        return False

    _some_term(tile, definitions, test)
    return found[0] if found else None


def base_moved_along_last_axis(fn: JitFunction, tile: cst.BaseExpression) -> str | None:
    """The move of a pointer parameter the tile is addressed from that lays a strided vector along the tile's last
    axis (`weight_pointer += (weight_n_stride * offs_co)[None, :]` before the loop, FlagGems' conv kernels: the
    parameter becomes a 2-D tile whose columns are `weight_n_stride` apart), as written; else None. The tile's own
    address then hides that stride, and no launch makes it 1 for real tensors."""
    params = {p.name for p in fn.params if not p.is_constexpr}
    definitions = _single_definitions(fn)
    bases = _reads(tile, definitions)  # (the names the tile reads, through the definitions they are made of)
    for node in _aug_assigns_in(fn.node):
        if isinstance(node.target, cst.Name) and node.target.value in bases and node.target.value in params:
            for sub in cst_walk.preorder(node.value):
                if isinstance(sub, cst.Subscript) and broadcast_axis(sub) == 1 and _scaled_inside(sub.value,
                                                                                                  definitions):
                    written = re.sub(r"\(\s+", "(", re.sub(r"\s+\)", ")", " ".join(node_code(_MODULE, sub).split())))
                    text = f"{node.target.value} += {written}"
                    return text if len(text) <= 80 else text[:77] + "..."
    return None


def _is_one(node: cst.BaseExpression, definitions: dict[str, cst.BaseExpression],
            seen: frozenset[str] = frozenset()) -> bool:
    """`node` is the literal 1, itself or through the names it is assigned once (`p_stride1 = 1`)."""
    node = unparenthesized(node)
    if isinstance(node, cst.Integer):
        return node.value == "1"
    if isinstance(node, cst.Name) and node.value in definitions and node.value not in seen:
        return _is_one(definitions[node.value], definitions, seen | {node.value})
    return False


def divided_stride(fn: JitFunction, tile: cst.BaseExpression) -> bool:
    """Whether a 2-D tile of pointers scales a broadcast index vector by a run-time integer divided or shifted
    (`rm[:, None] * (K // 2)`: rows of packed fp4 bytes): a launch specialises `K` as a multiple of 16, not `K // 2`,
    so the compiler cannot prove 16-byte aligned rows and a copy of 16 bytes a lane does not compile."""
    params = {p.name for p in fn.params if not p.is_constexpr}
    definitions = _single_definitions(fn)

    def divided(node: cst.CSTNode, seen: frozenset[str] = frozenset()) -> bool:
        """`node` divides or shifts a run-time integer (`K // 2`, `tl.cdiv(K, 2)`), itself or through the local
        names it reads (`KP = K // 2`)."""
        for n in cst_walk.preorder(node):
            if isinstance(n, cst.BinaryOperation) and isinstance(n.operator, (cst.FloorDivide, cst.RightShift)) \
                    and names_in(n) & params:
                return True
            if isinstance(n, cst.Call) and node_code(_MODULE, n.func).endswith("cdiv") and names_in(n) & params:
                return True
        return any(divided(definitions[name], seen | {name})
                   for name in sorted(names_in(node) & set(definitions) - seen - params))

    return _some_term(tile, definitions, lambda factors: any(broadcast_axis(f) is not None for f in factors) and any(
        divided(f) for f in factors if broadcast_axis(f) is None))


def last_axis_divided(tile: cst.BaseExpression, definitions: dict[str, cst.BaseExpression]) -> str:
    """The floor division (or right shift) of an index vector laid along a 2-D pointer tile's last axis (`offs_bsk =
    (k + offs) // B_SCALE_K_GROUP`, then `offs_bsk[None, :] * stride_bsk`: neighbouring columns share an address),
    through the names of `definitions`; "" where there is none. (`divided_stride`'s twin along the columns; a scalar
    divided, `(k // 32 + rs)[None, :]`, leaves each column its own address.)"""

    def vector(node: cst.CSTNode, seen: frozenset[str]) -> bool:
        """`node` reads an index vector (a `tl.arange`, through the names it is made of), not a scalar alone."""
        return _reads_arange(node) or any(vector(definitions[name], seen | {name})
                                          for name in sorted(names_in(node) & set(definitions) - seen))

    def division(node: cst.CSTNode, seen: frozenset[str]) -> str:
        for n in cst_walk.preorder(node):
            if isinstance(n, cst.BinaryOperation) and isinstance(n.operator, (cst.FloorDivide, cst.RightShift)) \
                    and vector(n.left, frozenset()):
                return " ".join(node_code(_MODULE, n).split())
        return next((found for name in sorted(names_in(node) & set(definitions) - seen)
                     if (found := division(definitions[name], seen | {name}))), "")

    def walk(node: cst.CSTNode, seen: frozenset[str]) -> str:
        for n in cst_walk.preorder(node):
            if isinstance(n, cst.Subscript) and broadcast_axis(n) == 1:
                found = division(n.value, seen)
                if found:
                    return found
        return next((found for name in sorted(names_in(node) & set(definitions) - seen)
                     if (found := walk(definitions[name], seen | {name}))), "")

    return walk(tile, frozenset())


def _some_term(node: cst.BaseExpression, definitions: dict[str, cst.BaseExpression],
               test: Callable[[list[cst.BaseExpression]], bool], seen: frozenset[str] = frozenset()) -> bool:
    """Whether `test` holds on the factors of some term of the sum `node`, through the names it adds
    (`a_ptrs = a_ptr + offs`: the terms of `offs`'s definition)."""
    for term in sum_terms(node):
        if isinstance(term, cst.Name) and term.value in definitions and term.value not in seen:
            if _some_term(definitions[term.value], definitions, test, seen | {term.value}):
                return True
            continue
        if test(product_factors(term)):
            return True
    return False


def address_head(fn: JitFunction, tile: cst.BaseExpression) -> str | None:
    """The name first in a tile of pointers' address, through the tensors it is made of (`a_ptrs = a_ptr + ...`:
    `a_ptr`): the base, as Triton code writes `pointer + offsets`; None where the first term is not a name."""
    definitions = _single_definitions(fn)
    node, seen = tile, set()
    while True:
        head = unparenthesized(sum_terms(node)[0])
        if not isinstance(head, cst.Name):
            return None
        value = definitions.get(head.value)
        if value is None or head.value in seen or not isinstance(unparenthesized(sum_terms(value)[0]), cst.Name):
            return head.value  # (a parameter, a name assigned more than once, or one a load or a call makes)
        seen.add(head.value)
        node = value


def run_time_alignment(fn: JitFunction, tile: cst.BaseExpression, mask: cst.BaseExpression | None,
                       loop: cst.For) -> tuple[str, tuple[str, ...]] | None:
    """What the kernel must test at run time, before `loop`, for a tile of pointers no launch can vouch for (its base
    not a pointer parameter: a pointer the kernel loads, `a_ptr = tl.load(a_ptrs + g).to(tl.pointer_type(...))` in a
    grouped GEMM, or a name assigned more than once) to be copied 16 bytes a lane: (its base, the integers that must
    be multiples of 16 bytes of its elements: row strides, K advances and bounds along its last axis that the kernel
    computes or loads, `lda`, `K`). Where the test holds, the loop's copies read them through values the compiler
    knows aligned (`_aligned_ptr`, `_aligned_int`). The base may be a pointer parameter the kernel moves before the
    loop (`q += (bos * H + i_h) * K`, `bos` loaded from a varlen batch's sequence offsets). None where the tile is not
    of that form: a base that is not one scalar name first in its address, a local name scaling its last axis or
    added to it, one the loop changes, or one assigned after the tile is made (a test before the loop would read
    another value than the tile's)."""
    # (a name the loop assigns once holds that value where the loop reads it, whatever the copies of the loop that an
    # unswitched flag made elsewhere in the function assign)
    definitions = {**_single_definitions(fn), **_single_definitions_in(loop)}
    every = all_definitions(fn)
    params = {p.name for p in fn.params}
    in_loop = assigned_names(loop)  # (its variable, and what its body assigns)

    def assigned_scalars(name: str) -> bool:
        """Every value the kernel assigns `name` is a scalar (no index vector, no broadcast), the loop none."""
        values = every.get(name)
        return name not in in_loop and values is not None and not any(
            _is_2d(v) or _reads_arange(v) for v in values.elements)  # type: ignore[attr-defined]

    def scalar(name: str) -> bool:
        """A local name whose every value is a scalar, that the loop does not change."""
        return name not in params and assigned_scalars(name)

    def moved_parameter(name: str) -> bool:
        """A pointer parameter the kernel moves before the loop, every value a scalar (`q += (bos * H + i_h) * K`,
        `bos` loaded from a varlen batch's offsets): no launch can vouch for it, the kernel tests it."""
        return name in params and assigned_scalars(name)

    def tensor(node: cst.CSTNode) -> bool:
        return _tensor(node, every)

    ints: list[str] = []
    terms: list[cst.BaseExpression] = []

    followed: list[str] = [tile.value] if isinstance(tile, cst.Name) else []  # (the names the address is made of)

    def expand(node: cst.BaseExpression, seen: frozenset[str]) -> None:
        for term in sum_terms(node):
            if isinstance(term, cst.Name) and term.value in definitions and term.value not in seen \
                    and tensor(definitions[term.value]):
                followed.append(term.value)
                expand(definitions[term.value], seen | {term.value})  # (a tile of pointers or of offsets)
            else:
                terms.append(term)

    expand(tile, frozenset())
    if not terms or not isinstance(terms[0], cst.Name) or not (scalar(terms[0].value)
                                                                or moved_parameter(terms[0].value)):
        return None
    base = terms[0].value
    for term in terms[1:]:
        factors = product_factors(term)
        axes = {broadcast_axis(f) for f in factors} - {None}
        local = names_in(term) - {base}
        if base in names_in(term):
            return None
        if axes == {0}:  # a row offset: what scales the index vector must keep rows 16-byte aligned
            for factor in factors:
                if broadcast_axis(factor) is None and names_in(factor) & in_loop:
                    return None  # (a row stride the loop changes: tested once, before it, it would not hold)
                if broadcast_axis(factor) is None and isinstance(factor, cst.Name) and scalar(factor.value):
                    ints.append(factor.value)
                elif broadcast_axis(factor) is None and {n for n in names_in(factor) if scalar(n)}:
                    return None
            continue
        if {n for n in local if scalar(n)}:
            return None  # (a local name along the contiguous axis, or a scalar offset: not tested here)
    if isinstance(tile, cst.Name):  # what the loop advances the tile by (`b_ptrs += BLOCK_K * ldb`)
        for node in cst_walk.preorder(loop.body):
            if isinstance(node, cst.AugAssign) and isinstance(node.target, cst.Name) \
                    and node.target.value == tile.value:
                ints += [n for n in sorted(names_in(node.value)) if scalar(n)]
    if mask is not None:  # bounds along the last axis: each lane's vector masked whole
        loop_var = loop.target.value if isinstance(loop.target, cst.Name) else ""

        def bound(node: cst.BaseExpression, depth: int = 0) -> bool:
            """`node`, a bound along the contiguous axis, is a multiple of 16 bytes of elements wherever the names
            it adds are (collected into `ints`; arguments the launcher checks, constexprs the compile knows):
            sums of such names and of products with a block size or an argument in them."""
            for term in _signed_terms(node):
                if isinstance(term, cst.Integer):
                    if int(term.value, 0) != 0:
                        return False
                elif isinstance(term, cst.Name):
                    name = term.value
                    if name in params:
                        continue  # (an argument, or a constexpr: `last_axis_mask_params`, the compile)
                    if name in in_loop and name != loop_var and name in definitions and depth < 4:
                        if not bound(definitions[name], depth + 1):  # (`k_left = K - k * BLOCK_K` in the loop)
                            return False
                        continue
                    if not scalar(name):
                        return False
                    ints.append(name)
                elif isinstance(term, cst.BinaryOperation) and isinstance(term.operator, cst.Multiply):
                    factors = product_factors(term)
                    if not any(isinstance(f, cst.Integer) and int(f.value, 0) % 16 == 0
                               or isinstance(f, cst.Name) and f.value in params for f in factors):
                        return False
                    ints.extend(f.value for f in factors if isinstance(f, cst.Name) and scalar(f.value))
                else:
                    return False  # (`K // 2`, a call: not known a multiple)
            return True

        def along_last(node: cst.CSTNode) -> bool | None:
            """Whether a comparison of a tile runs along its last axis (None: along the first)."""
            axes = {broadcast_axis(n) for n in cst_walk.preorder(node) if isinstance(n, cst.Subscript)} - {None}
            if not axes:
                return True if tensor(node) else None  # (a 1-D vector lines up with the last axis)
            return True if 1 in axes else None

        work: list[tuple[cst.BaseExpression, bool | None, int]] = [(c, None, 0) for c in conjuncts(mask)]
        while work:
            conjunct, axis, depth = work.pop()
            conjunct = unparenthesized(conjunct)
            if isinstance(conjunct, cst.Subscript) and broadcast_axis(conjunct) is not None:
                # (`mk[None, :]`: a 1-D mask made before or in the loop, broadcast along an axis)
                work.append((conjunct.value, broadcast_axis(conjunct) == 1 or None, depth))
                continue
            if isinstance(conjunct, cst.Name):
                value = definitions.get(conjunct.value)
                if value is None or depth > 4:
                    return None  # (a mask assigned more than once: not followed)
                work += [(c, axis, depth + 1) for c in conjuncts(value)]
                continue
            if axis is None:
                axis = along_last(conjunct)
            if not axis:
                continue  # (rows: any bound)
            if not isinstance(conjunct, cst.Comparison) or len(conjunct.comparisons) != 1 \
                    or not isinstance(conjunct.comparisons[0].operator, (cst.LessThan, cst.GreaterThan)):
                return None
            sides = [conjunct.left, conjunct.comparisons[0].comparator]
            fixed = [side for side in sides if not tensor(side)]
            if len(fixed) != 1 or not bound(fixed[0]):
                return None
    # Tested once, before the loop, each must hold there the value the tiles were made from: no assignment of it
    # between the tile's definition (the loop's start, for a tile the loop makes) and the loop, nor after the loop
    # (an enclosing loop would run it before the next test, the tile made before).
    # (the earliest assignment of the names the address is made of: `q_rows = q + ...` before the loop, `p_q = q_rows
    # + ...` in it)
    order = {id(node): i for i, node in enumerate(cst_walk.nodes_of(fn.node))}
    singles = _single_assignments_in(fn.node)
    made = [singles[n] for n in followed if n in singles]
    start = min([order[id(loop)], *(order[id(m)] for m in made)])
    sites = _assignment_sites(fn)
    for name in (base, *ints):
        if any(order[id(site)] > start for site in sites.get(name, ())):
            return None
    return base, tuple(dict.fromkeys(ints))


def _assignment_sites(fn: JitFunction) -> dict[str, list[cst.CSTNode]]:
    """The nodes of `fn` that assign each name (plain, augmented, annotated assignments and loop targets)."""
    sites: dict[str, list[cst.CSTNode]] = {}
    for node in cst_walk.nodes_of(fn.node):
        targets: list[cst.CSTNode] = []
        if isinstance(node, cst.Assign):
            targets = [t.target for t in node.targets]
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, (cst.For, cst.CompFor)):
            targets = [node.target]
        elif isinstance(node, cst.NamedExpr):
            targets = [node.target]
        for target in targets:
            for name in names_in(target):
                sites.setdefault(name, []).append(node)
    return sites


def _signed_terms(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The terms of a sum or difference, signs dropped (`K - k * BLOCK_K`: [K, k * BLOCK_K]): a multiple of 16
    bytes of elements wherever each term is one."""
    node = unparenthesized(node)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Subtract)):
        return [*_signed_terms(node.left), *_signed_terms(node.right)]
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return _signed_terms(node.expression)
    return [node]
