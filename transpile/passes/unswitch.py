"""Constexpr branches hoisted out of dot loops (loop unswitching), before anything is analysed.

Public kernels often switch their loads inside the main loop on a compile-time flag::

    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:                      # a @triton.heuristics or constexpr parameter
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc += tl.dot(a, b)

(31% of the dot loops of the public kernels counted for `shared/STYLES.md`: `EVEN_K`, `USE_TMA_LOAD`, `PRE_LOAD_V`,
`IS_EVEN_MN`, ...). The test is decided when the kernel is compiled, so the loop is the same as

    if EVEN_K:
        for k in ...:  (the loop with the `if EVEN_K:` branch's statements in place of the `if`)
    else:
        for k in ...:  (the loop with the `else:` branch's statements)

which Triton and Gluon compile to the same code (a constexpr `if` is resolved before lowering). The pipeline rules
read straight-line loop bodies; this pass gives them one per value of the flag, and each copy is pipelined (or kept)
on its own. Only `if` statements whose test reads nothing but the function's constexpr parameters (names, literals,
comparisons, `and`/`or`/`not`), that no statement of the function rebinds, and whose branches load, store, or
multiply (a `load`/`store`/`dot`/atomic call), or that assign a name the address or mask of such a call in the loop
is computed from (`mask_a = ...` under `if EVEN_K:`) or an operand of a dot (`a = a.to(AB_DTYPE)` under `if AB_DTYPE
is not None:`), are hoisted; so are tests of the element types of tiles the loop loads (`if a.dtype != b.dtype:`),
read before the loop as their pointers' (`a_ptr.dtype.element_ty`). Another branch of arithmetic only (a causal mask
under `if CAUSAL:`) is read by the analyses as it is, and the pipeline stages it whole. At most two flags are hoisted
out of one loop (four copies, of at most four dots each), three out of a loop of one dot (eight copies of a GEMM's
loop). A copy decides `if FLAG:` and `if not FLAG:` alike, whichever was hoisted. An `if` whose two branches are
the same statements once canonical (`if FAST_ACC: acc = tl.dot(a, b, acc) else: acc += tl.dot(a, b)`) is folded
into its first branch instead, at no copy's cost.

The rewrite is textual, line by line, so that every line of the copies maps back to the line it came from
(`unswitch` returns that map, in the form of `transpile.source.line_map`): diagnostics inside either copy point at
the user's line. Where a function is kept as Triton, the variant keeps it as written (not unswitched).
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterable

from transpile.discover import ModuleFacts

# Calls whose presence in a branch makes the branch worth hoisting: the loop's memory operations and matrix products.
_EFFECTS = re.compile(r"(^|\.)(load|store|dot|dot_scaled|atomic_\w+|async_\w+)$")
# Memory operations: a branch that computes what their addresses or masks read is hoisted too.
_MEMORY = re.compile(r"(^|\.)(load|store|atomic_\w+|async_\w+)$")
_DOT = re.compile(r"(^|\.)dot(_scaled)?$")
_LOAD = re.compile(r"(^|\.)load$")
_MAX_HOISTS = 3  # hoists per loop of the source: two flags, four copies
#: questions a Triton dtype answers at compile time (`k.dtype.is_fp8()`)
_DTYPE_TESTS = frozenset({"is_fp8", "is_fp8e4nv", "is_fp8e4b8", "is_fp8e4b15", "is_fp8e5", "is_fp8e5b16", "is_fp16",
                          "is_bf16", "is_fp32", "is_fp64", "is_floating", "is_int", "is_int_signed", "is_int_unsigned",
                          "is_int1", "is_int8", "is_int16", "is_int32", "is_int64", "is_uint8", "is_uint16",
                          "is_uint32", "is_uint64", "is_standard_floating"})
_MAX_GEMM_HOISTS = 7  # ... of a loop of one dot (a GEMM's, small): three flags, eight copies
_MAX_ROUNDS = 32  # loops rewritten per file
# A file indented by tabs: every line's indentation is tabs, then (continuation lines) spaces
_TAB_INDENTS = re.compile(r"(?:\t*(?: *)(?:[^ \t\n][^\n]*)?(?:\n|$))*")


def unswitch(text: str, facts: ModuleFacts) -> tuple[str, list[int]] | None:
    """`text` with constexpr branches hoisted out of the dot loops of its jit functions, and the new text's line map
    (new line -> line of `text`, as `transpile.source.line_map` gives it); None where nothing is hoisted."""
    if "\r" in text or ("\t" in text and not _TAB_INDENTS.fullmatch(text)):
        return None  # (the rewrite re-indents by the file's own unit: spaces, or tabs where lines start with tabs alone)
    if "dot" not in text or not _if_in_loop(text):  # (most files: no parse)
        return None
    names = set(facts.functions)
    lines = text.split("\n")
    origin = list(range(1, len(lines) + 1))  # line (index + 1) of `lines` -> line of `text`
    hoisted: dict[tuple[str, int], int] = {}  # (function, line of the loop in `text`) -> flags hoisted
    changed = False
    for _ in range(_MAX_ROUNDS):
        try:
            tree = ast.parse("\n".join(lines))
        except SyntaxError:  # (not expected: every rewrite keeps the text valid)
            return None
        sites = _sites(tree, names, lines, origin, hoisted)
        if not sites:
            break
        for function, loop, branch, dtypes, fold in sorted(sites, key=lambda site: -site[1].lineno):  # bottom up
            if fold:
                # `if fp8_fast_accum: acc = tl.dot(a, b, acc) else: acc += tl.dot(a, b)`, one statement once the
                # spellings are canonical: the loop keeps the branch's statements, with no copy for the flag
                lines, origin = _folded(lines, origin, branch)
                continue
            key = (function, origin[loop.lineno - 1])
            hoisted[key] = hoisted.get(key, 0) + 1
            lines, origin = _hoisted(lines, origin, loop, branch, dtypes)
        changed = True
    if not changed:
        return None
    lines = _renamed_copies(lines, origin, names, {key[1] for key in hoisted})
    return "\n".join(lines), [0, *origin, origin[-1] if origin else 1]


def _renamed_copies(lines: list[str], origin: list[int], names: set[str], copied: set[int]) -> list[str]:
    """`lines` with the names bound in the copies of a loop renamed in the copies that compute a tile another copy
    loads as it is: `a = tl.load(a_ptrs)` in one copy, `a = a.to(AB_DTYPE)` after it in another; or that reads a tile
    transposed that another copy reads as it is (`tl.trans(b_h)` under `if STATE_V_FIRST:`). A name has one layout
    in a function, and a computed operand is laid out as its dot reads it (the tile it is computed from, and what its
    load's address and mask read in the loop, `mask_k`), a loaded tile as its copies write it: the copies that compute
    take names of their own, each copy its own (`a_2`, `mask_k_2`: the first number free), read only there. Only
    names private to the copies are renamed (`_private`: each copy binds them before reading them, and the code
    after the copies binds them again before reading them), so no value changes. `copied`: the lines (of the source)
    of the loops that were copied."""
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:  # (not expected: every rewrite keeps the text valid)
        return lines
    edits: list[tuple[ast.Name, str]] = []
    for function in tree.body:
        if not isinstance(function, ast.FunctionDef) or function.name not in names:
            continue
        groups: dict[int, list[ast.For]] = {}
        for loop in _loops(function):
            if origin[loop.lineno - 1] in copied:
                groups.setdefault(origin[loop.lineno - 1], []).append(loop)
        params = _param_names(function)
        # (every Name of the function by its id, in source order: `_private` asks for each name's mentions)
        index: dict[str, list[ast.Name]] = {}
        for n in ast.walk(function):
            if isinstance(n, ast.Name):
                index.setdefault(n.id, []).append(n)
        for found in index.values():
            found.sort(key=lambda n: (n.lineno, n.col_offset))
        taken = set(index) | params
        parents = {id(child): node for node in ast.walk(function) for child in ast.iter_child_nodes(node)}
        for group in groups.values():
            group = sorted(group, key=lambda loop: loop.lineno)
            if len(group) < 2:
                continue
            targets = {n.id for loop in group for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
            local = sorted(n for n in {n.id for loop in group for n in ast.walk(loop) if isinstance(n, ast.Name)
                                       and isinstance(n.ctx, ast.Store)} - params - targets
                           if _private(function, parents, group, n, index))
            kinds = {name: [_binding_kind(loop, name) for loop in group] for name in local}
            computing = [any(kinds[name][i] == "computed" and "loaded" in kinds[name] for name in local)
                         for i in range(len(group))]
            # (and the copies that read a tile transposed that another copy reads as it is: `tl.trans(b_h)` where
            # the flag's other value loads `b_h` the other way round; a name's layout is that of its first form)
            reads = [_reads(loop) for loop in group]
            forms = [{name: (name in views, name in plain) for name in local} for views, plain in reads]
            computing = [computes or any(forms[i][name][0] and any(other[name]) and forms[i][name] != other[name]
                                         for name in local for other in forms)
                         for i, computes in enumerate(computing)]
            if not any(computing):
                continue
            for loop, computes in zip(group, computing):
                if not computes:
                    continue
                renames: dict[str, str] = {}  # (each copy its own: its anchors are its own tiles)
                for name in local:
                    number = 2
                    while f"{name}_{number}" in taken:
                        number += 1
                    renames[name] = f"{name}_{number}"
                    taken.add(renames[name])
                edits += [(n, renames[n.id]) for n in ast.walk(loop) if isinstance(n, ast.Name) and n.id in renames]
    if not edits:
        return lines
    edits = list({id(node): (node, new) for node, new in reversed(edits)}.values())  # (a name once: its innermost
    # group's copy, whose loops `_loops` lists first)
    lines = list(lines)
    # (right to left in each line: the offsets of the names before an edit stay valid; ast counts UTF-8 bytes)
    for node, new in sorted(edits, key=lambda edit: (edit[0].lineno, edit[0].col_offset), reverse=True):
        raw = lines[node.lineno - 1].encode("utf-8")
        lines[node.lineno - 1] = (raw[:node.col_offset] + new.encode() + raw[node.end_col_offset:]).decode("utf-8")
    return lines


def _private(function: ast.FunctionDef, parents: dict[int, ast.AST], group: list[ast.For], name: str,
             index: dict[str, list[ast.Name]]) -> bool:
    """The copies `group` of a loop hold `name` for themselves: each binds it, at its top level, before any read of
    it (`a = tl.load(...)`: not carried from an iteration to the next, nor read from before the loop), and after the
    statement that holds them the first mention of it binds it again, by a statement beside that one that does not
    read it (a peeled K tail: `a = tl.load(...)` after the loop). Not inside another loop of the function.
    `parents`: each node's parent in the function, by id; `index`: the function's Names by id, in source order."""

    def fresh(statement: ast.stmt) -> bool:
        """`statement` binds `name` by a plain assignment that does not read it."""
        return isinstance(statement, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in statement.targets) and not any(
            isinstance(n, ast.Name) and n.id == name for n in ast.walk(statement.value))

    def mentions(node: ast.AST) -> list[ast.Name]:
        """The Names `name` inside `node` (a statement: those within its span of the text), in source order."""
        found = index.get(name, [])
        if node is function:
            return found
        start, end = (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset)
        return [n for n in found if start <= (n.lineno, n.col_offset) and (n.end_lineno, n.end_col_offset) <= end]

    for loop in group:
        first = mentions(loop)
        if first and not any(statement is parents.get(id(first[0])) for statement in loop.body
                             if fresh(statement)):
            return False
    # the statement holding every copy (the unswitched `if`s), and the block it stands in
    chains = []
    for loop in group:
        chain, node = [], parents.get(id(loop))
        while node is not None and node is not function:
            chain.append(node)
            node = parents.get(id(node))
        chains.append(chain)
    common = [n for n in chains[0] if all(any(n is m for m in chain) for chain in chains[1:])]
    holder = next((n for n in common if isinstance(n, ast.stmt)), None)
    if holder is None or any(isinstance(n, (ast.For, ast.While)) for n in common):
        return False
    # (between each copy and the holder only the `if`s of the copies: not a loop around a copy, copied itself)
    if any(isinstance(n, (ast.For, ast.While)) for chain in chains for n in chain[:chain.index(holder)]):
        return False
    inside = {id(n) for loop in group for n in mentions(loop)}
    if any(id(n) not in inside for n in mentions(holder)):
        return False  # (read or bound beside the copies, inside the statement holding them)
    block = next((b for b in (getattr(parents.get(id(holder)), f, None) for f in ("body", "orelse", "finalbody"))
                  if isinstance(b, list) and any(s is holder for s in b)), None)
    if block is None:
        return False
    later = [n for n in mentions(function) if id(n) not in inside and (n.lineno, n.col_offset) > (
        holder.end_lineno or holder.lineno, holder.end_col_offset or 0)]
    if not later:
        return True
    after = block[next(i for i, s in enumerate(block) if s is holder) + 1:]
    return any(statement is parents.get(id(later[0])) and fresh(statement) for statement in after)


def _reads(loop: ast.For) -> tuple[set[str], set[str]]:
    """The names the loop reads as the tile of a transpose (`tl.trans(x)`, `tl.permute(x, ...)`, `x.T`,
    `x.trans(...)`, `x.permute(...)`), and those it reads otherwise."""
    views: dict[int, str] = {}  # the Names read as a transpose's tile, by id
    for node in ast.walk(loop):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Name) \
                and re.search(r"(^|\.)(trans|permute)$", _dotted(node.func)):
            views[id(node.args[0])] = node.args[0].id
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.attr in ("T", "trans", "permute"):
            views[id(node.value)] = node.value.id
    plain = {node.id for node in ast.walk(loop) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
             and id(node) not in views}
    return set(views.values()), plain


def _param_names(function: ast.FunctionDef) -> set[str]:
    """The names of the function's parameters."""
    return {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}


@functools.lru_cache(maxsize=256)
def _loop_bindings(loop: ast.For) -> dict[str, list[ast.stmt]]:
    """The statements under `loop` (itself included) that bind each name: assignments and loop targets (cached per
    loop: `_binding_kind` asks it of every name the loop reads)."""
    found: dict[str, list[ast.stmt]] = {}
    for n in ast.walk(loop):
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For)):
            names = {t.id for target in (n.targets if isinstance(n, ast.Assign) else [n.target])
                     for t in ast.walk(target) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
            for name in names:
                found.setdefault(name, []).append(n)
    return found


def _binding_kind(loop: ast.For, name: str) -> str:
    """How the loop binds `name`: "loaded" (its last binding a load: `a = tl.load(...)`, `a = desc.load(...)`, once or
    in both branches of a mask's choice; or another name the loop loads so, `b_op = b`), "computed" (otherwise:
    `a = a.to(T)` after the load), or "absent"."""
    bindings = _loop_bindings(loop).get(name, [])
    if not bindings:
        return "absent"
    last = max(bindings, key=lambda n: (n.lineno, n.col_offset))
    if isinstance(last, ast.Assign) and len(last.targets) == 1 and isinstance(last.targets[0], ast.Name) \
            and isinstance(last.value, ast.Call) and _LOAD.search(_dotted(last.value.func)):
        return "loaded"
    if isinstance(last, ast.Assign) and len(last.targets) == 1 and isinstance(last.targets[0], ast.Name) \
            and isinstance(last.value, ast.Name) and last.value.id != name \
            and _binding_kind(loop, last.value.id) == "loaded":
        return "loaded"  # (an alias of a loaded tile: `b_bf16 = b` where another copy casts, `b_bf16 = b.to(T)`)
    return "computed"


def _if_in_loop(text: str) -> bool:
    """Some `if` statement sits inside a `for` loop (by indentation; a cheap test before parsing)."""
    loops: list[int] = []  # indentation of the `for` statements around the current line
    for line in text.split("\n"):
        stripped = line.lstrip(" \t")
        if not stripped or stripped.startswith(("#", ")", "]", "}")):
            continue  # (a closing bracket at the statement's indentation ends a header written over lines)
        indent = len(line) - len(stripped)
        while loops and indent <= loops[-1]:
            loops.pop()
        if loops and stripped.startswith("if "):
            return True
        if stripped.startswith("for "):
            loops.append(indent)
    return False


def _sites(tree: ast.Module, names: set[str], lines: list[str], origin: list[int],
           hoisted: dict[tuple[str, int], int]) -> list[tuple[str, ast.For, ast.If | ast.expr, dict[str, str], bool]]:
    """The (function, dot loop, constexpr `if` (or the compile-time conjunct of the test of an `if` without `else`,
    `_flag_conjunct`), the loop's tile dtypes, whether the `if` is folded rather than hoisted) of this round: per loop
    the first branch, over loops none of which contains another (their rewrites do not overlap)."""
    found: list[tuple[str, ast.For, ast.If | ast.expr, dict[str, str], bool]] = []
    for function in tree.body:
        if not isinstance(function, ast.FunctionDef) or function.name not in names:
            continue
        flags = _constexpr_params(function)
        if not flags or not _has_dot(function):
            continue
        taken: list[ast.For] = []
        for loop in _loops(function):
            if any(t.lineno <= loop.lineno <= t.end_lineno or loop.lineno <= t.lineno <= loop.end_lineno
                   for t in taken):
                continue
            # Loops the pipeline rules can take: one dot per copy (a GEMM), two (attention's QK^T and PV), three
            # (latent attention's scores summed from two products) or four (attention's backward dK/dV: S^T, dV,
            # dP^T, dK). Others would be copied for nothing (kept as Triton anyway) and can grow a file severalfold.
            # A GEMM's loop (one dot) is copied for up to three flags (FlagGems' `bmm` masks its tiles by
            # `DIVISIBLE_K`, `DIVISIBLE_M` and `DIVISIBLE_N`).
            dots = _copy_dots(loop.body, flags)
            if not 1 <= dots <= 4 or _multiline_strings(loop) or not _body_on_own_lines(loop):
                continue
            # (an `if` whose branches are the same is folded first, at no copy's cost)
            same = [b for b in _branches(loop) if _same_branches(b) and _flag_test(b.test, flags)
                    and _else_line(lines, b) is not None]
            if same:
                found.append((function.name, loop, same[0], {}, True))
                taken.append(loop)
                continue
            if hoisted.get((function.name, origin[loop.lineno - 1]), 0) >= (
                    _MAX_GEMM_HOISTS if dots == 1 else _MAX_HOISTS):
                continue
            for branch in _branches(loop):
                dtypes = _tile_dtypes(function, loop, branch) if "dtype" in ast.unparse(branch.test) else {}
                if _flag_test(branch.test, flags, dtypes) and (_has_effects(branch) or _feeds_loads(branch, loop)) \
                        and _hoistable(branch, lines):
                    found.append((function.name, loop, branch, dtypes, False))
                    taken.append(loop)
                    break
                conjunct = _flag_conjunct(branch, flags)
                if conjunct is not None and (_has_effects(branch) or _feeds_loads(branch, loop)
                                             or _reads_operands(branch, loop)) and _hoistable(branch, lines):
                    # (`if COMPUTE_BIAS_GRAD and tile_n == 0:`: the loop copied per value of the flag's part)
                    found.append((function.name, loop, conjunct, {}, False))
                    taken.append(loop)
                    break
    return found


def _constexpr_params(function: ast.FunctionDef) -> set[str]:
    """The function's parameters annotated as constexpr (`tl.constexpr`, `gl.constexpr`, `constexpr`) that no
    statement of the function rebinds, and its constexpr locals (`_compile_time`) bound once, at its top level."""
    args = function.args
    params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]
              if a.annotation is not None and _is_constexpr(a.annotation)}
    # Constexpr locals of the function's top level (`is_x_scaled: tl.constexpr = XScale is not None`): decided when
    # the kernel is compiled, as their values read only constexpr parameters, literals, and whether a parameter is
    # None (Triton specialises a kernel on that)
    every = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    local: dict[str, int] = {}
    for statement in function.body:
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) \
                and _is_constexpr(statement.annotation) and statement.value is not None \
                and _compile_time(statement.value, params | set(local), every):
            local[statement.target.id] = statement.lineno
    stores: dict[str, int] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            stores[node.id] = stores.get(node.id, 0) + 1
    return {name for name in params if name not in stores} | {name for name in local if stores.get(name) == 1}


def _compile_time(value: ast.expr, flags: set[str], params: set[str]) -> bool:
    """`value` is known when the kernel is compiled: a test of `flags` (`_flag_test`), or of whether a parameter is
    None (`X is not None`)."""
    if isinstance(value, ast.Compare) and len(value.ops) == 1 and isinstance(value.ops[0], (ast.Is, ast.IsNot)) \
            and isinstance(value.left, ast.Name) and value.left.id in params \
            and isinstance(value.comparators[0], ast.Constant) and value.comparators[0].value is None:
        return True
    if isinstance(value, ast.BoolOp):
        return all(_compile_time(v, flags, params) for v in value.values)
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not):
        return _compile_time(value.operand, flags, params)
    return _flag_test(value, flags)


def _is_constexpr(annotation: ast.expr) -> bool:
    return (isinstance(annotation, ast.Attribute) and annotation.attr == "constexpr") or (
        isinstance(annotation, ast.Name) and annotation.id == "constexpr")


def _loops(function: ast.FunctionDef) -> list[ast.For]:
    """The `for` loops of the function, innermost first (the innermost dot loop around a branch is the one to copy),
    then in file order (nested functions left out)."""
    found: list[tuple[int, int, ast.For]] = []

    def walk(node: ast.AST, depth: int) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if isinstance(child, ast.For):
                found.append((-depth, child.lineno, child))
                walk(child, depth + 1)
            else:
                walk(child, depth)

    walk(function, 0)
    return [loop for _, _, loop in sorted(found, key=lambda item: item[:2])]


def _calls(node: ast.AST) -> list[str]:
    """The names of the functions called under `node` (`tl.load`, `desc.load`, `f`; `?` for other callees)."""
    return [_dotted(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)]


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return "?"


def _has_dot(node: ast.AST) -> bool:
    return _dot_count(node) > 0


def _dot_count(node: ast.AST) -> int:
    return sum(1 for name in _calls(node) if _DOT.search(name))


def _copy_dots(body: list[ast.stmt], flags: set[str]) -> int:
    """The most dots one copy of the loop can have: those outside constexpr branches, plus the larger of each such
    branch's two sides."""
    count = 0
    for stmt in body:
        if isinstance(stmt, ast.If) and _flag_test(stmt.test, flags):
            count += max(_copy_dots(stmt.body, flags), _copy_dots(stmt.orelse, flags))
        elif isinstance(stmt, (ast.If, ast.For, ast.While, ast.With)):
            count += _dot_count(stmt.test if isinstance(stmt, (ast.If, ast.While)) else ast.Module(body=[],
                                                                                                   type_ignores=[]))
            count += _copy_dots(stmt.body, flags) + _copy_dots(getattr(stmt, "orelse", []), flags)
        else:
            count += _dot_count(stmt)
    return count


def _has_effects(branch: ast.If) -> bool:
    return any(_EFFECTS.search(name) for stmt in [*branch.body, *branch.orelse] for name in _calls(stmt))


def _feeds_loads(branch: ast.If, loop: ast.For) -> bool:
    """The branch assigns a name that the address or mask of a memory operation of the loop depends on (`mask_a =
    offs_m[:, None] < M` under `if EVEN_K:`): the pipeline rules re-evaluate those one statement at a time; or it
    rebinds an operand of a dot of the loop (`a = a.to(AB_DTYPE)` under `if AB_DTYPE is not None:`): the pipeline
    rules feed the MMA the tile as loaded, so the copy of the loop where the branch is not taken is the one they take."""
    assigned = {n.id for stmt in [*branch.body, *branch.orelse] for n in ast.walk(stmt)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    if not assigned:
        return False
    operands = {arg.id for call in _dot_calls(loop)
                for arg in call.args[:6 if _dotted(call.func).endswith("_scaled") else 2] if isinstance(arg, ast.Name)}
    if assigned & operands:
        return True
    # (or a tile the loop loads that an operand is computed from: `qk = tl.dot(q_pe, k_pe.to(T))`, `k_pe` rebound
    # under `if (USE_ROPE and LAST_SPLIT) and start_n >= ...:`)
    sources = operands | {n.id for call in _dot_calls(loop) for arg in call.args[:2] for n in ast.walk(arg)
                          if isinstance(n, ast.Name)}
    computations = [n for n in ast.walk(loop) if isinstance(n, ast.Assign) and len(n.targets) == 1
                    and isinstance(n.targets[0], ast.Name)]
    while True:
        more = {r.id for n in computations if n.targets[0].id in sources  # type: ignore[union-attr]
                for r in ast.walk(n.value) if isinstance(r, ast.Name)} - sources
        if not more:
            break
        sources |= more
    if assigned & sources & _loaded(computations):  # (a product a later dot reads, masked under a flag, is staged whole instead)
        return True
    needed = {n.id for call in ast.walk(loop) if isinstance(call, ast.Call) and _MEMORY.search(_dotted(call.func))
              for arg in [*call.args, *(k.value for k in call.keywords)] for n in ast.walk(arg)
              if isinstance(n, ast.Name)}
    statements = [n for n in ast.walk(loop) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))]
    while True:  # (the names those names are computed from, in the loop)
        more = set()
        for stmt in statements:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(isinstance(n, ast.Name) and n.id in needed for t in targets for n in ast.walk(t)):
                more |= {n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name)} if stmt.value else set()
        if more <= needed:
            break
        needed |= more
    return bool(assigned & needed)


def _flag_conjunct(branch: ast.If, flags: set[str]) -> ast.expr | None:
    """The first conjunct decided at compile time (`_flag_test`: `COMPUTE_BIAS_GRAD`) of the test of an `if` without
    `else` that also tests run-time values (`if COMPUTE_BIAS_GRAD and tile_n == 0:`), on the header's line; else None.
    Where it is false the branch never runs: the loop copied per its value has a copy without the branch."""
    test = branch.test
    if branch.orelse or not (isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)) \
            or _flag_test(test, flags):
        return None
    return next((v for v in _conjuncts(test) if _flag_test(v, flags) and not isinstance(v, ast.Constant)
                 and v.lineno == v.end_lineno == branch.lineno), None)


def _conjuncts(test: ast.expr) -> list[ast.expr]:
    """The operands of `test`'s `and`s, nested ones too (`(A and B) and C`: A, B, C)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [c for v in test.values for c in _conjuncts(v)]
    return [test]


def _reads_operands(branch: ast.If, loop: ast.For) -> bool:
    """The branch reads a tile the loop loads into a name a dot of the loop reads (`bias_acc += tl.sum(lhs, axis=1)`
    beside `acc = tl.dot(lhs, rhs, acc)`): in the copy without the branch, the tile feeds the dot alone."""
    operands = {arg.id for call in _dot_calls(loop) for arg in call.args[:2] if isinstance(arg, ast.Name)}
    loaded = _loaded(stmt for stmt in loop.body if isinstance(stmt, ast.Assign))
    return any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in operands & loaded
               for stmt in branch.body for n in ast.walk(stmt))


def _dot_calls(node: ast.AST) -> list[ast.Call]:
    """The calls of `tl.dot` / `tl.dot_scaled` (any spelling) under `node`."""
    return [call for call in ast.walk(node) if isinstance(call, ast.Call) and _DOT.search(_dotted(call.func))]


def _loaded(assignments: Iterable[ast.Assign]) -> set[str]:
    """The names of `assignments` bound to a load's result (`a = tl.load(a_ptrs)`)."""
    return {t.id for n in assignments if isinstance(n.value, ast.Call) and _LOAD.search(_dotted(n.value.func))
            for t in n.targets if isinstance(t, ast.Name)}


def _multiline_strings(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Constant) and isinstance(n.value, (str, bytes)) and n.end_lineno != n.lineno
               for n in ast.walk(node))


def _body_on_own_lines(loop: ast.For) -> bool:
    return loop.body[0].lineno > loop.lineno


def _branches(loop: ast.For) -> list[ast.If]:
    """The `if` statements of the loop's body (nested ones too, not `elif` clauses), in file order."""
    found: list[ast.If] = []
    elifs: set[int] = set()
    for node in ast.walk(loop):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.If):
            if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
                elifs.add(id(node.orelse[0]))  # (a plain `else: if` too: it is hoisted with its parent, same text)
            found.append(node)
    return sorted((n for n in found if id(n) not in elifs), key=lambda n: n.lineno)


def _tile_dtypes(function: ast.FunctionDef, loop: ast.For, branch: ast.If) -> dict[str, str]:
    """The tiles the loop loads through a pointer parameter's tile (`a = tl.load(a_ptrs)`, `a_ptrs = A + ...` before
    the loop, or `tl.load(A + ...)`) and binds nowhere else before `branch`, each with that parameter: its element
    type, `A.dtype.element_ty`, is the tile's `dtype` there, known when the kernel is compiled (`if a.dtype !=
    b.dtype:`)."""
    params = {a.arg for a in [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]
              if a.annotation is None}
    before: dict[str, list[ast.expr]] = {}
    for stmt in function.body:
        if stmt is loop or (stmt.lineno <= loop.lineno <= stmt.end_lineno):
            break
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            before.setdefault(stmt.targets[0].id, []).append(stmt.value)

    def base(expr: ast.expr) -> str | None:
        while isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            expr = expr.left
        if isinstance(expr, ast.Name):
            if expr.id in params:
                return expr.id
            values = before.get(expr.id, [])
            return base(values[0]) if len(values) == 1 else None
        return None

    bound: dict[str, list[int]] = {}  # name -> lines the loop binds it on
    for node in ast.walk(loop):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        bound.setdefault(name.id, []).append(node.lineno)
    found: dict[str, str] = {}
    for stmt in loop.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and isinstance(stmt.value, ast.Call) and _LOAD.search(_dotted(stmt.value.func)) \
                and stmt.value.args:
            name, pointer = stmt.targets[0].id, base(stmt.value.args[0])
            # (the branch that reads `a.dtype` comes after the load, and the loop binds `a` nowhere between them)
            later = [line for line in bound.get(name, []) if line > stmt.lineno]
            if pointer is not None and min(bound[name]) == stmt.lineno and branch.lineno > stmt.end_lineno \
                    and not any(line < branch.lineno for line in later):
                found[name] = pointer
    return found


def _flag_test(test: ast.expr, flags: set[str], dtypes: dict[str, str] | None = None) -> bool:
    """A test decided at compile time: constexpr parameters, literals, comparisons, and/or/not; and the element types
    of tiles the loop loads (`a.dtype`, `dtypes`)."""
    if isinstance(test, ast.Attribute) and test.attr == "dtype" and isinstance(test.value, ast.Name):
        return test.value.id in (dtypes or {})
    if isinstance(test, ast.Call) and not test.args and not test.keywords and isinstance(test.func, ast.Attribute) \
            and test.func.attr in _DTYPE_TESTS:  # (`k.dtype.is_fp8()`: a question the element type answers)
        return _flag_test(test.func.value, flags, dtypes)
    if isinstance(test, ast.Name):
        return test.id in flags
    if isinstance(test, ast.Constant):
        return isinstance(test.value, (bool, int, float, str)) or test.value is None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _flag_test(test.operand, flags, dtypes)
    if isinstance(test, ast.BoolOp):
        return all(_flag_test(v, flags, dtypes) for v in test.values)
    if isinstance(test, ast.Compare):
        return all(_flag_test(v, flags, dtypes) for v in [test.left, *test.comparators])
    if isinstance(test, ast.BinOp) and isinstance(test.op, (ast.BitAnd, ast.BitOr)):  # `IS_EVEN_M & IS_EVEN_N`
        return _flag_test(test.left, flags, dtypes) and _flag_test(test.right, flags, dtypes)
    return False


def _hoistable(branch: ast.If, lines: list[str]) -> bool:
    """The branch's header and clauses sit on lines of their own (the textual rewrite needs it)."""
    if branch.test.lineno != branch.lineno or branch.test.end_lineno != branch.lineno:
        return False
    if branch.body[0].lineno == branch.lineno:
        return False
    clause = branch
    while clause.orelse:
        first = clause.orelse[0]
        header = _else_line(lines, clause)
        if header is None:
            return False
        if header == first.lineno:  # `elif ...:` (or an `else:` body on the header's line)
            if not (isinstance(first, ast.If) and _clause(lines[header - 1]) == "elif"):
                return False
            if first.test.end_lineno != first.lineno or first.body[0].lineno == first.lineno:
                return False
            clause = first
            continue
        return True
    return True


def _clause(line: str) -> str:
    word = line.strip().split(" ", 1)[0].split(":", 1)[0]
    return word


def _else_line(lines: list[str], branch: ast.If) -> int | None:
    """The line of the `else:`/`elif` clause after `branch`'s body (1-based), else None."""
    first = branch.orelse[0]
    if isinstance(first, ast.If) and _clause(lines[first.lineno - 1]) == "elif":
        return first.lineno
    for number in range(branch.body[-1].end_lineno + 1, first.lineno + 1):
        text = lines[number - 1]
        if _clause(text) == "else" and _indent(text) == branch.col_offset:
            return number
    return None


def _indent(line: str) -> int:
    """The characters of the line's indentation (spaces, or tabs: ast's columns count them as one each)."""
    return len(line) - len(line.lstrip(" \t"))


def _dedented(lines: list[str], origin: list[int], start: int, end: int, by: int) -> tuple[list[str], list[int]]:
    """Lines start..end (1-based, inclusive) with `by` columns of indentation removed (what a line has, at most)."""
    out = [line[min(by, _indent(line)):] for line in lines[start - 1:end]]
    return out, origin[start - 1:end]


def _specialised(lines: list[str], origin: list[int], loop: ast.For, test: str, value: bool
                 ) -> tuple[list[str], list[int]]:
    """The loop's lines with every outermost `if <test>:` (and `if not <test>:`) of its body replaced by the branch
    `value` takes (a branch on `not FLAG` reads names only the other copy binds: left in, it read as a refusal)."""
    first, last = loop.lineno, loop.end_lineno

    def signed(expr: ast.expr) -> tuple[str, bool]:  # (`not X` -> ("X", False))
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            return ast.unparse(expr.operand), False
        return ast.unparse(expr), True

    base, sign = signed(ast.parse(test, mode="eval").body)

    def polarity(branch: ast.If) -> bool | None:
        # (`if X:` and `if not X:` alike, whichever of them was hoisted)
        other, other_sign = signed(branch.test)
        return other_sign == sign if other == base else None

    def conjunct(branch: ast.If) -> tuple[bool, str] | None:
        # (`if FLAG and rest:` without `else`: (the polarity of FLAG there, the text of `rest`); its conjuncts on
        # the header's line)
        test = branch.test
        if branch.orelse or not (isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)) or any(
                v.lineno != branch.lineno or v.end_lineno != branch.lineno for v in test.values):
            return None
        header = lines[branch.lineno - 1]
        if not header.encode("utf-8")[:test.end_col_offset].isascii():  # (ast's columns count UTF-8 bytes)
            return None
        values = _conjuncts(test)
        for i, v in enumerate(values):
            other, other_sign = signed(v)
            if other == base:
                others = [w for j, w in enumerate(values) if j != i]
                rest = [f"({header[w.col_offset:w.end_col_offset]})" if isinstance(w, (ast.BoolOp, ast.NamedExpr))
                        else header[w.col_offset:w.end_col_offset] for w in others]
                return other_sign == sign, " and ".join(rest)
        return None

    branches = [b for b in _branches(loop) if polarity(b) is not None or conjunct(b) is not None]
    outermost = [b for b in branches
                 if not any(o is not b and o.lineno < b.lineno <= o.end_lineno for o in branches)]
    out: list[str] = []
    out_origin: list[int] = []
    cursor = first
    for branch in outermost:
        out += lines[cursor - 1:branch.lineno - 1]
        out_origin += origin[cursor - 1:branch.lineno - 1]
        indent = lines[branch.lineno - 1][:branch.col_offset]
        part = conjunct(branch) if polarity(branch) is None else None
        if part is not None:
            # (the flag's part of the test decided: the `if` on the rest where it holds, nothing where it does not)
            if value == part[0]:
                header = lines[branch.lineno - 1]
                new = [f"{indent}if {part[1]}:{header[branch.test.end_col_offset:].split(':', 1)[1]}",
                       *lines[branch.lineno:branch.end_lineno]]
                new_origin = origin[branch.lineno - 1:branch.end_lineno]
            else:
                new, new_origin = [], []
        elif value == polarity(branch):
            body_end = (_else_line(lines, branch) - 1) if branch.orelse else branch.end_lineno
            by = _indent(lines[branch.body[0].lineno - 1]) - len(indent)
            new, new_origin = _dedented(lines, origin, branch.lineno + 1, body_end, by)
        elif not branch.orelse:
            new, new_origin = [], []
        else:
            header = _else_line(lines, branch)
            if _clause(lines[header - 1]) == "elif":  # `elif X:` -> `if X:`, the rest as it is
                text = lines[header - 1]
                new = [indent + "if" + text.lstrip(" \t")[len("elif"):]]
                new_origin = [origin[header - 1]]
                more, more_origin = lines[header:branch.end_lineno], origin[header:branch.end_lineno]
                new, new_origin = new + more, new_origin + more_origin
            else:
                by = _indent(lines[branch.orelse[0].lineno - 1]) - len(indent)
                new, new_origin = _dedented(lines, origin, header + 1, branch.end_lineno, by)
        if not any(line.strip() and not line.strip().startswith("#") for line in new) and _alone(loop, branch):
            new = [*new, indent + "pass"]  # (only where the block would be left empty)
            new_origin = [*new_origin, origin[branch.lineno - 1]]
        out += new
        out_origin += new_origin
        cursor = branch.end_lineno + 1
    out += lines[cursor - 1:last]
    out_origin += origin[cursor - 1:last]
    return out, out_origin


def _same_branches(branch: ast.If) -> bool:
    """Both branches of the `if` run the same statements (compared as syntax trees: layout and comments aside)."""
    return bool(branch.orelse) and not (len(branch.orelse) == 1 and isinstance(branch.orelse[0], ast.If)) \
        and [ast.dump(s) for s in branch.body] == [ast.dump(s) for s in branch.orelse]


def _folded(lines: list[str], origin: list[int], branch: ast.If) -> tuple[list[str], list[int]]:
    """`lines` with `branch` (whose branches are the same) replaced by its first branch's statements, dedented."""
    indent = _indent(lines[branch.lineno - 1])
    by = _indent(lines[branch.body[0].lineno - 1]) - indent
    body, body_origin = _dedented(lines, origin, branch.lineno + 1, _else_line(lines, branch) - 1, by)
    return ([*lines[:branch.lineno - 1], *body, *lines[branch.end_lineno:]],
            [*origin[:branch.lineno - 1], *body_origin, *origin[branch.end_lineno:]])


def _alone(loop: ast.For, branch: ast.If) -> bool:
    """`branch` is the only statement of the block that holds it (in the loop)."""
    for node in ast.walk(loop):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and any(statement is branch for statement in block):
                return len(block) == 1
    return True


def _hoisted(lines: list[str], origin: list[int], loop: ast.For, branch: ast.If | ast.expr, dtypes: dict[str, str]
             ) -> tuple[list[str], list[int]]:
    """`lines` with `loop` replaced by `if <test>: <loop, branch taken> else: <loop, branch not taken>` (a tile's
    `a.dtype` read, before the loop, as its pointer's `A.dtype.element_ty`). `branch`: the `if`, or the compile-time
    conjunct of its test (`_flag_conjunct`)."""
    expr = branch.test if isinstance(branch, ast.If) else branch
    test = ast.unparse(expr)
    test_text = lines[expr.lineno - 1][expr.col_offset:expr.end_col_offset]
    if not test_text.isascii():  # (ast's columns count UTF-8 bytes)
        test_text = test
    for tile, pointer in dtypes.items():
        test_text = re.sub(rf"(?<![\w.]){re.escape(tile)}\.dtype\b", f"{pointer}.dtype.element_ty", test_text)
    indent = lines[loop.lineno - 1][:loop.col_offset]
    first = lines[loop.body[0].lineno - 1]
    unit = first[loop.col_offset:_indent(first)]  # the file's indentation unit (spaces, or a tab)
    taken, taken_origin = _specialised(lines, origin, loop, test, True)
    other, other_origin = _specialised(lines, origin, loop, test, False)

    def shifted(block: list[str]) -> list[str]:
        return [unit + line if line.strip() else line for line in block]

    at = origin[loop.lineno - 1]
    new = [*lines[:loop.lineno - 1],
           f"{indent}# triton-transpile: the loop, once for each value of `{test_text}` (known at compile time).",
           f"{indent}if {test_text}:", *shifted(taken), f"{indent}else:", *shifted(other), *lines[loop.end_lineno:]]
    new_origin = [*origin[:loop.lineno - 1], at, at, *taken_origin, at, *other_origin, *origin[loop.end_lineno:]]
    return new, new_origin


#: (for the passes that decide compile-time tests the same way: `branch_tails`)
constexpr_params = _constexpr_params
compile_time_test = _compile_time
