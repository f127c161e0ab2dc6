"""sm90: GEMMs of 8-bit or tf32 operands whose B tile is read N-contiguous run on a K-major copy of B.

Hopper's wgmma reads 8-bit and tf32 operands from shared memory only K-major (the transposed layouts are for 16-bit
ones). A kernel that loads B as ``b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :]`` from a row-major [K, N]
matrix gives Triton's compiler N-contiguous tiles: it loads them into registers and stores them transposed into
shared memory, outside its asynchronous copies, and runs such GEMMs at a fifth of the card's 8-bit rate (an H200:
int8 172-176 TOPS, block-scaled fp8 151 TFLOP/s, tf32 79 TFLOP/s at 4096-8192 cubed). The same kernel compiled for
K-contiguous B (``stride_bk == 1``) runs at 931, 665 and 266. A copy of B laid out K-major costs one pass over it
(13-39 us for 16-64 MB), a few percent of such a GEMM.

So the variant keeps the kernel as Triton and binds its name to a launcher (`_KMajorCopy`) that, for launches whose
B is a 2-D tensor with contiguous rows of 8-bit or (where the dot may use tf32) 32-bit floats, copies B K-major
(`_kmajor_copy`) and launches the kernel on the copy with the two strides exchanged. Where the kernel writes no
stride for B's columns (unit, as written), the launcher runs a copy of the kernel that reads one
(``offs_n[None, :] * <added parameter>``). Other launches run the kernel as given.

What the analysis proves (the pointer-tile analysis of `transpile.passes.tma_tiles`, `operand_tiles`): the dot's
operands are pointer-tile loads; B's tile moves along its rows with the loop (its rows are K) and its row stride is
a parameter; A's tile moves along its columns, contiguous there (unit, or a stride parameter the launcher finds 1);
the masks bound B's rows and columns by parameters (the launcher checks that they fit in the tensor: the copy holds
the tensor as the launch views it); B's pointer and stride parameters are read only to address B's tile (so
exchanging the strides changes nothing else). The launcher also wants A's rows 16-byte aligned: where they are not,
Triton cannot copy A asynchronously either, and B's layout no longer decides the loop's speed (lightllm's int8 GEMM
at 1000 x 4100 x 2100: 0.88x with the copy).

Where that analysis does not follow the loop (a branch in it, a persistent tile walk around it, masks whose bounds
move with the loop), the addresses alone are read (`_structural`): the kernel's one dot in a loop reads two loads, B's
at `P + rows[:, None] * S0 + cols[None, :] (* S1)`, A's contiguous along its columns; the extents unknown, only a B
that is a whole allocation is copied (`whole`), A's rows read from its tensor.

`kmajor_launch(source, facts, fn)` -> a `KMajorLaunch`, or the reason it does not apply ("" where the kernel has no
such dot loop); `kmajor_kernel(node, launch)` -> the copy of the kernel that reads a column stride.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from transpile.cst_utils import assigned_names, bound_names, statement_reads
from transpile.cst_walk import preorder
from transpile.discover import JitFunction, ModuleFacts
from transpile.passes.tma_tiles import Refusal, dot_may_use_tf32, operand_tiles, tile_terms
from transpile.source import SourceFile

#: Launches of fewer rows of A, fewer outputs, or whose B holds fewer elements, run the kernel as given: measured on
#: an H200 (bench/RESULTS.md), the copy's pass and its launch cost more than the K-major loop saves below about 128
#: rows, 512K outputs and 4M elements of B (0.32-0.80x at 16-256 rows of a 1024x1024 B; 0.46-0.51x for one kernel
#: at 1-16 rows of 4096x4096; 0.56-0.93x for two at 128x2048x2048, 16 output tiles on 132 SMs).
LEAST_ROWS = 128
LEAST_OUTPUTS = 1 << 19
LEAST_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class KMajorLaunch:
    kernel: str
    params: tuple[str, ...]
    operand: str  # B's pointer parameter
    k_stride: str  # the parameter of its row (K) stride
    n_stride: str | None  # the parameter of its column stride (None: unit as written; the copy adds `added`)
    added: str | None  # the column-stride parameter the kernel's copy adds
    extents: tuple[str, ...]  # the parameters the masks bound B's rows and columns by (none: `whole`)
    rows: str | None  # the parameter the masks bound A's rows by (M); None: A's tensor's rows (`whole`)
    unit: tuple[str, ...]  # parameters the launch must pass as 1 (A's column stride)
    aligned: tuple[tuple[str, str], ...]  # (pointer, row stride): A's rows, which must start 16-byte aligned
    tf32: bool  # the dot may run 32-bit float operands on tf32
    dot: cst.Call = field(compare=False, repr=False)  # the dot (the note's anchor)
    # B's `cols[None, :]` address term (None where its column stride is a parameter): the kernel's copy scales it
    column_index: cst.CSTNode | None = field(default=None, compare=False, repr=False)
    # the extents are not known (no masks by parameters, or a loop the pointer-tile analysis does not follow): only
    # launches whose B is a whole allocation take the copy (a read past its view reads past the allocation either way)
    whole: bool = False


def kmajor_launch(source: SourceFile, facts: ModuleFacts, fn: JitFunction) -> KMajorLaunch | str:
    """The copy's facts from the pointer-tile analysis (extents from the masks), else from the addresses alone
    (`_structural`: whole allocations only); else why not, the first analysis's reason first."""
    found = _from_tiles(source, facts, fn)
    if isinstance(found, KMajorLaunch):
        return found
    structural = _structural(source, fn)
    return structural if isinstance(structural, KMajorLaunch) else found or structural


def _from_tiles(source: SourceFile, facts: ModuleFacts, fn: JitFunction) -> KMajorLaunch | str:
    try:
        operands, dot, tf32 = operand_tiles(source, facts, fn)
    except Refusal as exc:
        return str(exc)
    positional = [a.value for a in dot.args if a.keyword is None]
    names = [p.value if isinstance(p, cst.Name) else None for p in positional[:2]]
    by_name = {o.name: o for o in operands}
    if len(names) != 2 or names[0] not in by_name or names[1] not in by_name:
        return "the dot's operands are not the loaded tiles themselves"
    a, b = by_name[names[0]], by_name[names[1]]  # type: ignore[index]
    params = [p.name for p in fn.params]
    if b.advancing != 0 or a.advancing != 1:
        return "the operand tiles do not move along K with the loop (B along its rows, A along its columns)"
    k_stride, n_stride = b.strides
    if k_stride not in params or (n_stride is not None and n_stride not in params):
        return "B's strides are not parameters of the kernel"
    if a.strides[1] is not None and a.strides[1] not in params:
        return "A's column stride is not a parameter of the kernel"
    if any(e not in params for e in b.bounds):
        return f"B's extents in its masks (`{b.bounds[0]}`, `{b.bounds[1]}`) are not parameters of the kernel"
    if a.bounds[0] not in params:
        return f"A's row extent in its mask (`{a.bounds[0]}`) is not a parameter of the kernel"
    if b.offsets:
        return "B's tile starts at an offset of its base (the copy would move it)"
    refused = _exclusive(fn, b.param, k_stride, n_stride, b.name)
    if refused:
        return refused
    added = None
    if n_stride is None:
        added = _added_stride(fn, k_stride)
        if added is None:
            return "B's columns are contiguous as written and the kernel takes `*` parameters (a column stride " \
                   "could not be added last)"
    return KMajorLaunch(fn.name, tuple(params), b.param, k_stride, n_stride, added, extents=b.bounds,
                        rows=a.bounds[0], unit=tuple(s for s in (a.strides[1],) if s is not None),
                        aligned=((a.param, a.strides[0]),), tf32=tf32, dot=dot,
                        column_index=b.column_index if n_stride is None else None)


def _exclusive(fn: JitFunction, pointer: str, k_stride: str, n_stride: str | None, loaded: str) -> str:
    """Why exchanging B's strides (and moving its pointer) could change anything but B's tile; "" where not."""
    names = {pointer, k_stride, *([n_stride] if n_stride else [])}
    moved = sorted(names & bound_names(fn.node.body))
    if moved:
        return f"`{moved[0]}` is assigned in the kernel"
    shared = _read_elsewhere(fn, names, loaded)
    return f"`{shared}` addresses more than B's tile (exchanging the strides would move the others)" if shared else ""


def _added_stride(fn: JitFunction, k_stride: str) -> str | None:
    """The name of the column-stride parameter the kernel's copy takes last; None where it takes `*` parameters."""
    params = fn.node.params
    if params.star_arg is not cst.MaybeSentinel.DEFAULT or params.kwonly_params or params.star_kwarg is not None:
        return None
    return _fresh(k_stride[:-1] + "n" if k_stride.endswith("k") else f"{k_stride}_n", [p.name for p in fn.params])


def _read_elsewhere(fn: JitFunction, names: set[str], loaded: str) -> str | None:
    """A name of `names` (or one computed from them) that a statement reads other than to build the pointer of the
    load that binds `loaded`: its value feeds something else. None where each only addresses that load."""
    statements = [s for s in preorder(fn.node.body) if isinstance(s, cst.SimpleStatementLine)]
    compound = [s for s in preorder(fn.node.body) if isinstance(s, cst.BaseCompoundStatement)]
    pending, seen = list(names), set(names)
    while pending:
        name = pending.pop()
        for s in compound:  # a loop bound or a branch test reading it
            header = [s.test] if isinstance(s, (cst.If, cst.While)) else [s.iter] if isinstance(s, cst.For) else []
            if any(name in statement_reads(cst.Expr(h)) for h in header):  # type: ignore[arg-type]
                return name
        for s in statements:
            if name not in statement_reads(s):
                continue
            targets = assigned_names(s)
            if loaded in targets and len(s.body) == 1:
                continue  # the load itself
            if not targets or len(s.body) != 1:
                return name  # read by a store, a call, an assert: not only an address
            for t in targets - seen:
                seen.add(t)
                pending.append(t)
    return None


def _fresh(name: str, used: list[str]) -> str:
    out, i = name, 1
    while out in used:
        out, i = f"{name}_{i}", i + 1
    return out


def kmajor_kernel(node: cst.FunctionDef, launch: KMajorLaunch, name: str) -> cst.FunctionDef:
    """The kernel (`node`, as analysed) named `name`, reading B's columns `launch.added` apart (its
    `cols[None, :]` term times that parameter), which it takes last (default 1)."""
    assert launch.added is not None and launch.column_index is not None
    column_index = launch.column_index

    class Scale(cst.CSTTransformer):
        def leave_Subscript(self, original: cst.Subscript, updated: cst.BaseExpression) -> cst.BaseExpression:
            if original is column_index:
                return cst.BinaryOperation(updated, cst.Multiply(), cst.Name(launch.added),  # type: ignore[arg-type]
                                           lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            return updated

    body = node.body.visit(Scale())
    params = node.params
    added = cst.Param(cst.Name(launch.added), default=cst.Integer("1"),
                      equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
    last = list(params.params)
    if last:
        last[-1] = last[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    params = params.with_changes(params=[*last, added])
    return node.with_changes(name=cst.Name(name), body=body, params=params)


def _strip(node: cst.BaseExpression) -> cst.BaseExpression:
    """`node` without parentheses and `tl.multiple_of`/`max_contiguous` hints (index hints change no address)."""
    while True:
        if getattr(node, "lpar", None):
            node = node.with_changes(lpar=[], rpar=[])
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.args \
                and node.func.attr.value in ("multiple_of", "max_contiguous", "max_constancy"):
            node = node.args[0].value
        else:
            return node


@dataclass(frozen=True)
class _Tile:
    pointer: str
    row_stride: str
    column_stride: str | None
    column_index: cst.CSTNode


def _tile(address: cst.BaseExpression, params: dict[str, bool]) -> _Tile | str:
    """`P + rows[:, None] * S0 + cols[None, :] (* S1)` with P, S0 (and S1) parameters (`params`: name -> constexpr)."""
    split = tile_terms(address, _strip)
    if split is None:
        return "a term of its address multiplies two index vectors"
    base, axes = split
    if len(base) != 1 or len(base[0]) != 1 or not isinstance(base[0][0], cst.Name) \
            or params.get(base[0][0].value) is not False:
        return "its address is not a pointer parameter plus a row and a column term (an offset of the base, a batch)"
    if len(axes[0]) != 1 or len(axes[1]) != 1:
        return "its address has not one row and one column term"
    strides: list[str | None] = []
    for axis in (0, 1):
        rest = axes[axis][0][1]
        if not rest:
            strides.append(None)
        elif len(rest) == 1 and isinstance(rest[0], cst.Name) and params.get(rest[0].value) is False:
            strides.append(rest[0].value)
        else:
            return "a stride of its address is not one parameter"
    if strides[0] is None:
        return "its rows are contiguous"
    return _Tile(base[0][0].value, strides[0], strides[1], axes[1][0][0])  # type: ignore[arg-type]


def _load_address(fn: JitFunction, source: SourceFile, name: str) -> cst.BaseExpression | str:
    """The address expression of the one `name = tl.load(P, ...)` of `fn`, P followed through its one plain
    assignment (`P += step` advances aside)."""
    assigns = [n for n in preorder(fn.node.body) if isinstance(n, cst.Assign) and len(n.targets) == 1
               and isinstance(n.targets[0].target, cst.Name) and n.targets[0].target.value == name]
    if len(assigns) != 1 or not isinstance(assigns[0].value, cst.Call) \
            or not source.code(assigns[0].value.func).strip().endswith("load"):
        return f"`{name}` is not bound once, by a load"
    call = assigns[0].value
    pointer = next((a.value for a in call.args if a.keyword is None or a.keyword.value == "pointer"), None)
    if pointer is None:
        return f"the load of `{name}` has no pointer"
    pointer = _strip(pointer)
    if isinstance(pointer, cst.Name):
        defined = [n for n in preorder(fn.node.body) if isinstance(n, cst.Assign) and len(n.targets) == 1
                   and isinstance(n.targets[0].target, cst.Name) and n.targets[0].target.value == pointer.value]
        if len(defined) != 1:
            return f"the pointer tile of `{name}` is not assigned once"
        return defined[0].value
    return pointer


def _structural(source: SourceFile, fn: JitFunction) -> KMajorLaunch | str:
    """The copy's facts from the addresses alone, where the pointer-tile analysis does not follow the loop (a branch
    in it, a persistent tile walk around it, masks it cannot read): the kernel's one dot in a loop reads two loads,
    B's address is `P + rows[:, None] * S0 + cols[None, :] (* S1)`, A's contiguous along its columns; the extents
    unknown (`whole`: the launcher then takes whole allocations only, and A's rows from its tensor)."""
    dots = [c for c in preorder(fn.node.body) if isinstance(c, cst.Call)
            and source.code(c.func).strip().rsplit(".", 1)[-1] == "dot"]
    in_loops = [d for d in dots if any(isinstance(p, (cst.For, cst.While)) for p in _ancestors(source, d))]
    if len(dots) != 1 or len(in_loops) != 1:
        return ""
    dot = dots[0]
    positional = [a.value for a in dot.args if a.keyword is None]
    if len(positional) < 2 or not all(isinstance(p, cst.Name) for p in positional[:2]):
        return "the dot's operands are not the loaded tiles themselves"
    params = {p.name: p.is_constexpr for p in fn.params}
    tiles = []
    for operand in positional[:2]:
        address = _load_address(fn, source, operand.value)  # type: ignore[attr-defined]
        if isinstance(address, str):
            return address
        tile = _tile(address, params)
        if isinstance(tile, str):
            return f"`{operand.value}`: {tile}"  # type: ignore[attr-defined]
        tiles.append(tile)
    a, b = tiles
    refused = _exclusive(fn, b.pointer, b.row_stride, b.column_stride, positional[1].value)  # type: ignore[attr-defined]
    if refused:
        return refused
    names = [p.name for p in fn.params]
    added = None
    if b.column_stride is None:
        added = _added_stride(fn, b.row_stride)
        if added is None:
            return "B's columns are contiguous as written and the kernel takes `*` parameters"
    tf32 = dot_may_use_tf32(dot, source.code)
    return KMajorLaunch(fn.name, tuple(names), b.pointer, b.row_stride, b.column_stride, added, extents=(), rows=None,
                        unit=tuple(s for s in (a.column_stride,) if s is not None),
                        aligned=((a.pointer, a.row_stride),), tf32=tf32, dot=dot,
                        column_index=b.column_index if b.column_stride is None else None, whole=True)


def _ancestors(source: SourceFile, node: cst.CSTNode) -> list[cst.CSTNode]:
    out, parents = [], source.parents
    while node in parents:
        node = parents[node]
        out.append(node)
    return out
