"""AMD: copies of pointer tiles as buffer copies, from a scalar base and 32-bit offsets.

Matches: in a function a pipeline rule rewrote, `async_copy.global_load_to_shared(slot, X, mask=..., other=0)` (or
`_tile_load(ring, X, ...)`, the load into registers of gfx942 and gfx1250) where
every assignment to the tile of pointers `X` is `X = P + <offsets>` (`P` a pointer parameter, the same each time) or
`X += <increment>`, and `X` is read by nothing else.
Emits: `X_base = P`, `X_offs = <offsets>`; `X_base += <increment>` where the increment is a scalar (parameters,
constexprs), `X_offs += <increment>` where it is a tensor; `async_copy.buffer_load_to_shared(slot, X_base, X_offs,
mask=..., other=0)` (`_buffer_tile_load(ring, X_base, X_offs, mask=...)`; gfx1250's
`async_copy.global_to_shared(slot, X, ...)`, which has no buffer form, becomes `_lds_tile_copy(slot, X_base, X_offs,
mask=...)`: the same copy from `X_base + X_offs`, so that no tile of 64-bit pointers lives across the loop).

Why: a tile of 64-bit pointers costs two VGPRs per element and 64-bit adds per advance, and a masked direct-to-LDS
copy through pointers is a branch around each copy that writes zeros for the masked lanes (`s_and_saveexec`, then
`ds_write` of zeros); a buffer copy reads from a scalar base (SGPRs) at 32-bit offsets, and a masked lane's offset is
moved out of the buffer's range, where the hardware reads zeros: no branch. This is how Triton's own AMD backend and
AMD's hand-written Gluon GEMMs copy. Offsets are 32-bit and unsigned: the variant's launcher runs the Gluon kernel only
on launches whose tensors span less than 2 GB (`Dispatch.small`), as Triton's launcher specialises them.
Loads into registers in the warp-pipelined loop's stages take the same form: `gl.load(X + <scalars>, mask=...,
other=...)` of such a tile `X` (every other use an advance or another such load, one of them in a stage), and
`gl.load(P + <offsets>, ...)` written in a stage, become `_buffer_load(X_base, X_offs + <scalars>, mask=...,
other=...)` (the target's `buffer_load`; so do the other loads of `X`: its drain and the loop kept for launches
whose ring does not fit). A
block-scaled GEMM's scale vectors (`a_s = tl.load(a_s_ptrs + k * stride)`, held in the MMA's slice layout beside the
accumulator and its scaled product) otherwise kept two VGPRs an element across the loop and spilled where Triton's
own compile, which makes them buffer loads, did not (bench/RESULTS.md).
Targets: gfx942, gfx950, gfx1250.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from transpile.analysis.launch_alignment import pointer_params
from transpile.cst_utils import (assigned_names, broadcast_axis, names_in, product_factors, single_definitions,
                                 sum_terms)
from transpile.cst_walk import preorder
from transpile.rules.base import Counterexample, Example, Rule, RuleContext
from transpile.rules.copy_operands import DESCRIPTOR_GEMM
from transpile.rules.pipeline_text import code, namer

#: a copy through pointers -> the same copy from a scalar base at 32-bit offsets
BUFFER_COPIES = {"async_copy.global_load_to_shared": "async_copy.buffer_load_to_shared",
                 "async_copy.global_to_shared": "_lds_tile_copy",  # gfx1250: no buffer form; per-copy pointers
                 "_tile_load": "_buffer_tile_load"}
ZEROS = ("0", "0.0", "0.", "None")

#: the variant helpers that make the copies through registers, and their snippets
COPY_HELPERS = {"_tile_load": "register_copy", "_buffer_tile_load": "buffer_register_copy",
                "_lds_tile_copy": "lds_tile_copy"}

EXAMPLE = (
    "import triton\nimport triton.language as tl\n\n@triton.jit\n"
    "def k(a_ptr, b_ptr, c_ptr, K, stride_am, stride_bk, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):\n"
    "    offs_m = tl.arange(0, BM)\n    offs_n = tl.arange(0, BN)\n    offs_k = tl.arange(0, BK)\n"
    "    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]\n"
    "    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :]\n"
    "    acc = tl.zeros((BM, BN), dtype=tl.float32)\n"
    "    for k in range(0, tl.cdiv(K, BK)):\n"
    "        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)\n"
    "        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)\n"
    "        acc = tl.dot(a, b, acc)\n        a_ptrs += BK\n        b_ptrs += BK * stride_bk\n"
    "    tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc.to(tl.float16))\n"
)


class BufferCopies(Rule):
    name = "buffer-copies"
    matches = "direct-to-LDS copies of pointer tiles built as `pointer parameter + offsets`"
    emits = "`async_copy.buffer_load_to_shared(slot, base, offsets, mask=...)` with the base advanced as a scalar"
    examples = (
        Example(EXAMPLE, (
            "a_ptrs_next_base = a_ptr",
            "a_ptrs_next_base += BK",
            "b_ptrs_next_base += BK * stride_bk",
            "async_copy.buffer_load_to_shared(a_ring.index(i), a_ptrs_next_base, a_ptrs_next_offs, "
            "mask=(offs_k_a_cols[None, :] < K - k_next * BK) & (i < num_iters))",
            # the steady state copies only full tiles (the K tail peeled): no mask
            "async_copy.buffer_load_to_shared(a_ring.index(step), a_ptrs_next_base, a_ptrs_next_offs)",
        ), "gfx950"),
    )
    counterexamples = (
        # tiles read through tensor descriptors: no pointer parameter and offsets for this rule to copy by buffer
        # loads (their ring copies them by `_desc_buffer_copy`, from the descriptor's base)
        Counterexample(DESCRIPTOR_GEMM, ("buffer_load_to_shared(a_ring", "_base ="), target="gfx950",
                       gluon_always=True),
    )

    def leave_FunctionDef(self, ctx: RuleContext, original: cst.FunctionDef, updated: cst.FunctionDef
                          ) -> cst.FunctionDef:
        if not ctx.copy_rings:
            return updated
        pointers = pointer_params(ctx.facts, ctx.function)  # the parameters the kernel addresses memory from
        pointers = pointers | _aliases(updated, pointers)
        scalars = _scalar_names(updated, {p.name for p in ctx.function.params} | _constexpr_names(updated))
        staged = _staged_calls(updated)
        tensors = _tensor_names(updated)
        tiles = _tiles(updated, pointers, tensors, staged)
        name = namer(names_in(updated))
        names = {tile: (name(f"{tile}_base"), name(f"{tile}_offs")) for tile in tiles}
        wide = _wide_names(updated)
        rewritten = updated.visit(_Rewrite(names, pointers, scalars, wide, tensors, staged))
        if "_buffer_load(" in code(rewritten):
            ctx.need("buffer_load")
        if rewritten is not updated:
            ctx.launch_small = True
        called = {code(node.func) for node in preorder(rewritten) if isinstance(node, cst.Call)}
        for helper, snippet in COPY_HELPERS.items():
            if helper in called:
                ctx.need(snippet)
        return rewritten  # type: ignore[return-value]


def _aliases(function: cst.FunctionDef, pointers: set[str]) -> set[str]:
    """Names bound once, at the function's top level, to a pointer parameter (`A_arg = A`: the translation keeps a
    parameter the kernel rebinds, `A = A + offsets`, under a name of its own): bases of buffer copies as well."""
    statements = function.body.body  # type: ignore[union-attr]
    top = {name for statement in statements if isinstance(statement, cst.SimpleStatementLine)
           for name in assigned_names(statement)}
    return {name for name, value in single_definitions(function).items()
            if name in top and isinstance(value, cst.Name) and value.value in pointers}


def _distribute(term: cst.BaseExpression, tensors: set[str]) -> list[cst.BaseExpression]:
    """`term` as a sum of terms each either scalar or a tensor: a broadcast factor that sums a scalar and a vector,
    `(s + v)[None, :] * c`, becomes `s * c` and `v[None, :] * c` (recursively); other terms stay whole."""
    factors = product_factors(term)
    for i, factor in enumerate(factors):
        inner = factor.value if isinstance(factor, cst.Subscript) and broadcast_axis(factor) is not None else None
        if inner is None:
            continue
        parts = sum_terms(inner)
        if len(parts) < 2 or all(_tensor_term(p, tensors) for p in parts):
            continue
        out: list[cst.BaseExpression] = []
        for part in parts:
            new = factor.with_changes(value=part) if _tensor_term(part, tensors) else part  # type: ignore[union-attr]
            rest = [*factors[:i], new, *factors[i + 1:]]
            product = rest[0] if not isinstance(rest[0], cst.BinaryOperation) else _paren(rest[0])
            for other in rest[1:]:
                product = cst.BinaryOperation(product, cst.Multiply(),
                                              _paren(other) if isinstance(other, cst.BinaryOperation) else other)
            out.extend(_distribute(product, tensors))
        return out
    return [term]


def _tensor_term(term: cst.BaseExpression, tensors: set[str]) -> bool:
    """`term` reads a tensor: a name of one, or a call that makes one in place (`gl.arange(0, BK, layout=...)`, which
    copy layouts write into the copy where the source reads a vector the loop makes)."""
    if names_in(term) & tensors:
        return True
    return any(isinstance(node, cst.Call) and any(a.keyword is not None and a.keyword.value == "layout"
                                                  for a in node.args) for node in preorder(term))


def _paren(node: cst.BaseExpression) -> cst.BaseExpression:
    return node if getattr(node, "lpar", None) else node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _names_made_from(function: cst.FunctionDef, seed: Callable[[cst.BaseExpression], bool]) -> set[str]:
    """Names some assignment gives a value for which `seed` holds, or a value that reads such a name (to a fixed
    point: the order of the assignments does not matter)."""
    assignments = [n for n in preorder(function) if isinstance(n, (cst.Assign, cst.AugAssign, cst.AnnAssign))]
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for node in assignments:
            value = node.value
            if value is None:
                continue
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            pairs: list[tuple[cst.BaseExpression, cst.BaseExpression]] = []
            for target in targets:
                if isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List)) \
                        and len(target.elements) == len(value.elements):
                    # (`i_v, i_c = tl.program_id(0), tl.program_id(1).to(tl.int64)`: each name from its own value)
                    pairs += [(t.value, v.value) for t, v in zip(target.elements, value.elements)]
                else:
                    pairs.append((target, value))
            for target, part in pairs:
                if not (names_in(part) & found or seed(part)):
                    continue
                names = [target] if isinstance(target, cst.Name) else [
                    e.value for e in target.elements if isinstance(e.value, cst.Name)] \
                    if isinstance(target, (cst.Tuple, cst.List)) else []
                for name in names:
                    if name.value not in found:
                        found.add(name.value)
                        changed = True
    return found


_TENSOR_MAKERS = ("gl.arange", "gl.full", "gl.zeros", "gl.join", "gl.allocate_shared_memory")


def _tensor_names(function: cst.FunctionDef) -> set[str]:
    """Names that hold tensors: assigned from a call that makes one of a shape (`gl.arange`, `gl.full`, ...), a
    broadcast, or another such name (a load of a scalar address, `expert = gl.load(ids_ptr + pid)`, is a scalar)."""
    return _names_made_from(function, lambda value: any(
        (isinstance(n, cst.Call) and code(n.func) in _TENSOR_MAKERS)
        or (isinstance(n, cst.Subscript) and broadcast_axis(n) is not None) for n in preorder(value)))


def _wide_names(function: cst.FunctionDef) -> set[str]:
    """Names whose value is (or is made from) a 64-bit integer: an assignment that casts to `gl.int64` or reads
    such a name."""
    return _names_made_from(function, lambda value: "int64" in code(value))


#: calls whose result is a scalar where their arguments are
_SCALAR_CALLS = ("min", "max")


def _scalar_names(function: cst.FunctionDef, scalars: set[str]) -> set[str]:
    """`scalars` and the names the function binds only to arithmetic of them (`offs_ks_step = BLOCK_K // GROUP_K`):
    an advance by such a value moves a buffer load's scalar base."""
    assignments: dict[str, list[cst.BaseExpression | None]] = {}
    for node in preorder(function):
        if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            for target in targets:
                for name in names_in(target):
                    assignments.setdefault(name, []).append(node.value if isinstance(target, cst.Name) else None)
        elif isinstance(node, cst.For):  # (a loop variable: not a value of the function's scalars alone)
            for name in names_in(node.target):
                assignments.setdefault(name, []).append(None)

    def arithmetic(value: cst.BaseExpression | None, known: set[str]) -> bool:
        if value is None or any(isinstance(node, (cst.Subscript, cst.Lambda, cst.NamedExpr, cst.Attribute))
                                or (isinstance(node, cst.Call) and code(node.func) not in _SCALAR_CALLS)
                                for node in preorder(value)):
            return False
        return names_in(value) - {code(c.func) for c in preorder(value) if isinstance(c, cst.Call)} <= known

    found = set(scalars)
    changed = True
    while changed:
        changed = False
        for name, values in assignments.items():
            if name not in found and all(arithmetic(v, found) for v in values):
                found.add(name)
                changed = True
    return found


def _constexpr_names(function: cst.FunctionDef) -> set[str]:
    """Names the function declares `name: gl.constexpr = ...` (scalars known at compile time)."""
    found: set[str] = set()
    for node in preorder(function):
        if isinstance(node, cst.AnnAssign) and isinstance(node.target, cst.Name) \
                and code(node.annotation.annotation).endswith("constexpr"):
            found.add(node.target.value)
    return found


def _zero_other(call: cst.Call) -> bool:
    """The copy's `other` is absent or zero (a buffer copy's masked lanes read zeros)."""
    other = next((a for a in call.args[2:] if a.keyword is not None and a.keyword.value == "other"), None)
    positional_other = call.args[3] if len(call.args) > 3 and call.args[3].keyword is None else None
    other = other or positional_other
    return other is None or code(other.value) in ZEROS


def _copy_pointer(call: cst.Call) -> str | None:
    """The pointer-tile name a `global_load_to_shared(slot, X, ...)` copy reads, where its `other` is zero."""
    if code(call.func) not in BUFFER_COPIES or len(call.args) < 2 or call.args[1].keyword is not None:
        return None
    if not _zero_other(call):
        return None
    value = call.args[1].value
    return value.value if isinstance(value, cst.Name) else None


def _plain_load(call: cst.Call) -> bool:
    """`call` is `gl.load(address, mask=..., other=...)`, without a cache or eviction hint or `volatile`."""
    return code(call.func) == "gl.load" and bool(call.args) and call.args[0].keyword is None \
        and all(a.keyword is None or a.keyword.value in ("mask", "other") for a in call.args[1:])


def _load_pointer(call: cst.Call, tensors: set[str]) -> tuple[cst.BaseExpression, list[cst.BaseExpression]] | None:
    """(the pointer, its scalar terms) of `gl.load(X + <scalars>, mask=..., other=...)`: the first term of the address
    a name, the others reading no tensor; None for a load with other arguments (a cache or eviction hint, `volatile`)
    or another address."""
    if not _plain_load(call):
        return None
    terms = sum_terms(call.args[0].value)
    if not isinstance(terms[0], cst.Name) or any(_tensor_term(t, tensors) for t in terms[1:]):
        return None
    return terms[0], terms[1:]


def _base_term(value: cst.BaseExpression, pointers: set[str]) -> tuple[str, list[cst.BaseExpression]] | None:
    """`P + t1 + t2` -> ("P", [t1, t2]) where exactly one term is a pointer parameter and no other reads one."""
    terms = sum_terms(value)
    bases = [t for t in terms if isinstance(t, cst.Name) and t.value in pointers]
    if len(bases) != 1 or len(terms) < 2:
        return None
    rest = [t for t in terms if t is not bases[0]]
    if any(names_in(t) & {bases[0].value} for t in rest):
        return None
    return bases[0].value, rest  # type: ignore[attr-defined]


def _staged_calls(function: cst.FunctionDef) -> set[int]:
    """The ids of the calls inside the warp-pipelined loop's stages (`with gl.amd.warp_pipeline_stage(...)`)."""
    found: set[int] = set()
    for node in preorder(function):
        if isinstance(node, cst.With) and any(isinstance(item.item, cst.Call) and code(item.item.func).endswith(
                "warp_pipeline_stage") for item in node.items):
            found |= {id(n) for n in preorder(node.body) if isinstance(n, cst.Call)}
    return found


def _tiles(function: cst.FunctionDef, pointers: set[str], tensors: set[str], staged: set[int]) -> set[str]:
    """The pointer tiles whose every use is a zero-`other` copy, a load of it plus scalars (`_load_pointer`) or an
    advance, one of them a copy or a load in a stage (`staged`), and whose every assignment splits into the same
    pointer parameter plus offsets, a tensor among them."""
    copies: dict[str, int] = {}
    in_stage: set[str] = set()
    for node in preorder(function):
        if isinstance(node, cst.Call):
            tile = _copy_pointer(node)
            if tile is not None:
                in_stage.add(tile)
            loaded = _load_pointer(node, tensors) if tile is None else None
            if loaded is not None and loaded[0].value not in pointers:  # type: ignore[attr-defined]
                tile = loaded[0].value  # type: ignore[attr-defined]
                if id(node) in staged:
                    in_stage.add(tile)
            if tile is not None:
                copies[tile] = copies.get(tile, 0) + 1
    found: set[str] = set()
    for tile, copy_uses in copies.items():
        if tile not in in_stage:
            continue
        bases: set[str] = set()
        writes = 0
        names = 0
        ok = True
        for node in preorder(function):
            if isinstance(node, cst.Name) and node.value == tile:
                names += 1
            elif isinstance(node, cst.Assign) and any(isinstance(t.target, cst.Name) and t.target.value == tile
                                                      for t in node.targets):
                split = _base_term(node.value, pointers) if len(node.targets) == 1 else None
                ok = ok and split is not None and tile not in names_in(node.value) \
                    and any(_tensor_term(t, tensors) for t in split[1])
                bases.add(split[0] if split is not None else "")
                writes += 1
            elif isinstance(node, (cst.AugAssign, cst.AnnAssign)) and isinstance(node.target, cst.Name) \
                    and node.target.value == tile:
                ok = ok and isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.AddAssign) \
                    and tile not in names_in(node.value)
                writes += 1
        if ok and len(bases) == 1 and names == writes + copy_uses:
            found.add(tile)
    return found


class _Rewrite(cst.CSTTransformer):
    def __init__(self, names: dict[str, tuple[str, str]], pointers: set[str], scalars: set[str],
                 wide: set[str], tensors: set[str], staged: set[int]) -> None:
        super().__init__()
        self.staged = staged
        self.tensors = tensors
        self.names = names
        self.pointers = pointers
        self.scalars = scalars
        self.wide = wide

    def split(self, base: str, terms: list[cst.BaseExpression]) -> tuple[cst.BaseExpression, cst.BaseExpression]:
        """(the scalar base, the 32-bit offsets) of `base + sum(terms)`. Scalar terms, also those inside a broadcast
        index vector (`(k * BLOCK_K + offs_k)[None, :] * stride` is `k * BLOCK_K * stride` plus
        `offs_k[None, :] * stride`), are added to the offsets after the vector terms, which then stay the same from
        one iteration to the next: the compiler adds such a uniform part in scalar registers (measured: 200 -> 191
        instructions a loop of 3 steps, 128x128x64 on gfx950, against putting it in the 64-bit base). A 64-bit
        scalar goes into the base (the offsets are 32-bit)."""
        scalar: list[cst.BaseExpression] = []
        tensor: list[cst.BaseExpression] = []
        for term in terms:
            for part in _distribute(term, self.tensors):
                if _tensor_term(part, self.tensors):  # (an index vector the copy layouts write in place is a tensor)
                    tensor.append(part)
                else:
                    scalar.append(part)
        if not tensor:
            tensor, scalar = terms, []
        tensor += [t for t in scalar if not self.is_wide(t)]
        scalar = [t for t in scalar if self.is_wide(t)]
        pointer: cst.BaseExpression = cst.Name(base)
        for term in scalar:
            pointer = cst.BinaryOperation(pointer, cst.Add(), term)
        return pointer, self.offsets(tensor)

    def offsets(self, terms: list[cst.BaseExpression]) -> cst.BaseExpression:
        """The sum of `terms`, as 32-bit offsets: a sum that reads a 64-bit value is cast (the launcher runs the
        kernel only where every tensor spans less than 2 GB, so the offsets fit)."""
        total = terms[0]
        for term in terms[1:]:
            total = cst.BinaryOperation(total, cst.Add(), term)
        if any(self.is_wide(t) for t in terms):
            return cst.parse_expression(f"({code(total)}).to(gl.int32)")
        return total

    def is_wide(self, term: cst.BaseExpression) -> bool:
        """`term` is a 64-bit value: it reads a 64-bit name or casts to 64 bits itself (an induction's
        `gl.cast(start_n, gl.int64)`)."""
        return bool(names_in(term) & self.wide) or "int64" in code(term)

    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
                                  ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if len(updated.body) != 1:
            return updated
        small = updated.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name) \
                and small.targets[0].target.value in self.names:
            base_name, offs_name = self.names[small.targets[0].target.value]
            base, rest = _base_term(small.value, self.pointers)  # type: ignore[misc]
            pointer, offsets = self.split(base, rest)
            first = updated.with_changes(body=[cst.Assign([cst.AssignTarget(cst.Name(base_name))], pointer)])
            second = cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(offs_name))], offsets)])
            return cst.FlattenSentinel([first, second])
        if isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name) and small.target.value in self.names:
            base_name, offs_name = self.names[small.target.value]
            read = names_in(small.value)
            # (a 64-bit scalar, `BLOCK_K * stride_ak` with `stride_ak = tl.cast(stride, tl.int64)`, advances the
            # 64-bit base: added to the 32-bit offsets it would widen them, which a buffer copy does not take)
            scalar = read <= self.scalars or (bool(read & self.wide) and not read & self.tensors)
            if not scalar and read & self.wide:
                value = cst.parse_expression(f"({code(small.value)}).to(gl.int32)")
                return updated.with_changes(body=[small.with_changes(target=cst.Name(offs_name), value=value)])
            return updated.with_changes(body=[small.with_changes(target=cst.Name(base_name if scalar else offs_name))])
        return updated

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if _plain_load(updated):
            return self.load(updated, _load_pointer(updated, self.tensors), id(original) in self.staged)
        tile = _copy_pointer(updated)
        if tile is None and code(updated.func) in BUFFER_COPIES and len(updated.args) > 1 and _zero_other(updated):
            # the pointers written into the copy: `P + <offsets>`
            split = _base_term(updated.args[1].value, self.pointers)
            if split is None:
                return updated
            base, offsets = self.split(split[0], split[1])
        elif tile is None or tile not in self.names:
            return updated
        else:
            base, offsets = cst.Name(self.names[tile][0]), cst.Name(self.names[tile][1])  # type: ignore[assignment]
        # `other=0` left out: a masked lane's offset is moved out of the buffer's range, where the hardware reads
        # zeros; with `other` given, the compiler writes it into the slot on a branch of its own.
        rest = [a for a in updated.args[2:] if not (a.keyword is not None and a.keyword.value == "other")]
        rest = [a for i, a in enumerate(rest) if not (a.keyword is None and i == 1)]  # a positional `other`
        args = [updated.args[0], cst.Arg(base), cst.Arg(offsets), *rest]
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)  # (`other` was last: no comma left over)
        return updated.with_changes(func=cst.parse_expression(BUFFER_COPIES[code(updated.func)]), args=args)

    def load(self, call: cst.Call, tile: tuple[cst.Name, list[cst.BaseExpression]] | None, staged: bool) -> cst.Call:
        """`gl.load(X + <scalars>, ...)` of a tile split into base and offsets (`tile`: X and the scalars), or
        `gl.load(P + <offsets>, ...)` in a stage (`staged`), as `_buffer_load(base, offsets, ...)`; the load as it
        was otherwise."""
        if tile is not None and tile[0].value in self.names:
            first, scalars = tile
            base_name, offs_name = self.names[first.value]
            base: cst.BaseExpression = cst.Name(base_name)
            wide = [t for t in scalars if names_in(t) & self.wide]  # (64-bit scalars advance the base)
            for term in wide:
                base = cst.BinaryOperation(base, cst.Add(), term)
            offsets = self.offsets([cst.Name(offs_name), *(t for t in scalars if t not in wide)])
        else:
            split = _base_term(call.args[0].value, self.pointers) if staged else None
            if split is None or not any(_tensor_term(t, self.tensors) for t in split[1]):
                return call
            base, offsets = self.split(*split)
        return call.with_changes(func=cst.Name("_buffer_load"), args=[cst.Arg(base), cst.Arg(offsets), *call.args[1:]])
