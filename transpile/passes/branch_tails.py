"""A name of one rank in one branch of a compile-time `if` and of another rank in the other: each branch gets its
own copy of the code after the `if`, and the other branch's names their own names, before anything is analysed.

Public kernels switch a tile's shape on a constexpr flag::

    if FLASH_LAYOUT:
        k_out_ptrs = key_cache_ptr + d_offs * stride_d            # rank 1
    else:
        k_pe = tl.reshape(k_pe, (BLOCK_D // X, X))
        k_out_ptrs = key_cache_ptr + dx_offs[:, None] * stride_d + x_offs[None, :]   # rank 2
    tl.store(k_out_ptrs, k_pe)

(aiter's KV-cache kernels, FlagGems' cross-entropy backward with `if w_ptr is None:`, MoE kernels). Triton compiles
the branch the test takes and the code after it with that rank; a Gluon translation gives each name one layout, and
the layout analysis refused such a name ("a rank-1 tensor after this `if` branch and a rank-2 tensor after the
other"). Since the test is decided when the kernel is compiled, the function is the same as::

    if FLASH_LAYOUT:
        k_out_ptrs = ...
        tl.store(k_out_ptrs, k_pe)
    else:
        k_pe_2 = k_pe
        k_pe_2 = tl.reshape(k_pe_2, (BLOCK_D // X, X))
        k_out_ptrs_2 = ...
        tl.store(k_out_ptrs_2, k_pe_2)

in which every name has one rank. The engine applies this pass only to the `if` statements the layout analysis
refused so (`engine.prepare`), whose tests read nothing but constexpr parameters, literals and whether a parameter is
None, with or without `else` or `elif` clauses: every clause gets its copy, and a chain without `else` gets one (the code
after it runs when no test holds; a name only the clauses bind is `None` there, where the source could not read it
either). In each copy, an `if` the clause's own tests decide (`if KIND == "vector":` tested again inside the loop,
flash-attention's bias) is replaced by the branch it takes; one that fails with no `else` by `None` for the names only
it binds. The names the `else` branch and its copy of the code after the
`if` bind are renamed there (`name_2`, or the first free number), those bound before the `if` first copied
(`k_pe_2 = k_pe`). The rewrite is textual, line by line, so that every line maps back to the one it came from (the
copies of the code after the `if` to their lines, the copies of names to the `else:` line).
"""

from __future__ import annotations

import ast
import io
import tokenize

from transpile.passes.unswitch import compile_time_test, constexpr_params


def split_branches(text: str, sites: list[int]) -> tuple[str, list[int]] | None:
    """`text` with each compile-time `if` at a line of `sites` (1-based) given its own copies of the code after it,
    and the line map (new line -> line of `text`, index 0 unused); None where no site could be split."""
    lines = text.splitlines(keepends=True)
    origin = list(range(len(lines) + 1))
    done = False
    for site in sorted(set(sites), reverse=True):  # (from the bottom up: a rewrite leaves the lines above it alone)
        try:
            tree = ast.parse("".join(lines))
        except SyntaxError:
            return None
        at = next((n for n in range(1, len(origin)) if origin[n] == site), None)
        found = _site(tree, at) if at is not None else None
        if found is None:
            continue
        rewritten = _split(lines, origin, *found)
        if rewritten is not None:
            lines, origin = rewritten
            done = True
    return ("".join(lines), origin) if done else None


def contiguous_axis_sites(text: str, functions: set[str]) -> list[int]:
    """The lines of the `if` statements of `functions` before a dot loop, in the loop's block or one around it, whose
    branches assign a name that a tile load of the loop reads along the tile's last axis (`offs_bn[None, :]` in the
    pointer's definitions, aiter's `if EVEN_MN: offs_bn = ... else: offs_bn = (...) % N`). The AMD rings copy 16 bytes
    a lane along that axis, which only one definition of the name can prove; with the code after such an `if` copied
    into its branches (`split_branches`: the names of the copies after the first renamed, so that each is bound once)
    each copy of the loop reads one. `split_branches` passes over those whose tests are not decided at compile
    time. A function with two or more such `if`s gives none (their copies would multiply the function's tail)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    sites: list[int] = []
    for function in tree.body:
        if not isinstance(function, ast.FunctionDef) or function.name not in functions:
            continue
        values: dict[str, list[ast.expr]] = {}
        for node in ast.walk(function):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        values.setdefault(target.id, []).append(node.value)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, ast.Name) \
                    and node.value is not None:
                values.setdefault(node.target.id, []).append(node.value)
        tensors = _tensors(values)
        # (per dot loop, the names its tiles read along their last axis: a loop after several `if`s is read once)
        loop_axes = {id(loop): _last_axis_names(loop, values, tensors) for loop in ast.walk(function)
                     if isinstance(loop, ast.For) and _dots(loop)}
        found = []
        for block in _blocks(function):
            for i, statement in enumerate(block):
                if not isinstance(statement, ast.If):
                    continue
                bound = _branch_bound(statement)
                axes = set().union(*(loop_axes.get(id(loop), set()) for later in block[i + 1:]
                                     for loop in ast.walk(later) if isinstance(loop, ast.For)))
                if bound & axes:
                    found.append(statement.lineno)
        if len(found) == 1:  # (two would make four copies of the function's tail, before any loop is unswitched)
            sites += found
    return sites


def _branch_bound(statement: ast.If) -> set[str]:
    """The names every clause of the `if` (its `elif`s and its `else`, which it must have) assigns at its own
    level: one definition per branch (a name one branch alone binds keeps its value from before the `if` in the
    other)."""
    if not statement.orelse:
        return set()
    clauses: list[set[str]] = []
    for block in [statement.body, statement.orelse]:
        if block is statement.orelse and len(block) == 1 and isinstance(block[0], ast.If) \
                and block[0].col_offset == statement.col_offset:  # (an `elif`)
            clauses.append(_branch_bound(block[0]))
            continue
        clauses.append({t.id for inner in block if isinstance(inner, ast.Assign)
                        for t in inner.targets if isinstance(t, ast.Name)})
    return set.intersection(*clauses)


def _dots(loop: ast.For) -> bool:
    return any(isinstance(n, ast.Call) and ast.unparse(n.func).split(".")[-1] == "dot" for n in ast.walk(loop))


def _last_axis_names(loop: ast.For, values: dict[str, list[ast.expr]], tensors: set[str]) -> set[str]:
    """The names the pointers of the tile loads of the loop's dot operands read along the tile's last axis
    (`v[None, :]`), through the definitions (`values`) of the names they read, and what those names are computed
    from; tensors only (`tensors`, `_tensors(values)`)."""
    # (the loads of the dots' operand tiles: `a = tl.load(a_ptrs)` and `tl.dot(a, b.to(T))`)
    operands = {n.id for call in ast.walk(loop) if isinstance(call, ast.Call) and ast.unparse(call.func).split(".")[-1]
                in ("dot", "dot_scaled") for arg in call.args[:2] for n in ast.walk(arg) if isinstance(n, ast.Name)}
    pending = [node.value.args[0] for node in ast.walk(loop) if isinstance(node, ast.Assign)
               and isinstance(node.value, ast.Call) and node.value.args
               and ast.unparse(node.value.func).split(".")[-1] == "load"
               and any(isinstance(t, ast.Name) and t.id in operands for t in node.targets)]
    seen: set[str] = set()
    # (a pointer tile itself, `b_ptrs`, is read along both axes)
    pointers = {n.id for expression in pending for n in ast.walk(expression) if isinstance(n, ast.Name)}
    seeds: set[str] = set()
    while pending:
        expression = pending.pop()
        for node in ast.walk(expression):
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple) and len(node.slice.elts) == 2 \
                    and isinstance(node.slice.elts[0], ast.Constant) and node.slice.elts[0].value is None \
                    and isinstance(node.slice.elts[1], ast.Slice):
                seeds |= {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
            if isinstance(node, ast.Name) and node.id not in seen:
                seen.add(node.id)
                pending += values.get(node.id, [])
    axes: set[str] = set()
    pending_names = sorted(seeds)
    while pending_names:
        name = pending_names.pop()
        if name in axes:
            continue
        axes.add(name)
        for value in values.get(name, []):
            pending_names += [n.id for n in ast.walk(value) if isinstance(n, ast.Name)]
    # (a scalar such as `pid_n` only moves the tile by whole blocks: one value per branch of it changes no vector)
    return (axes | pointers) & tensors


def _tensors(values: dict[str, list[ast.expr]]) -> set[str]:
    """The names some definition of which makes a tensor: reads `tl.arange`, a load, a broadcast (`v[:, None]`) or
    another such name."""
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, definitions in values.items():
            if name in found:
                continue
            for value in definitions:
                if any(isinstance(n, ast.Call) and ast.unparse(n.func).split(".")[-1] in ("arange", "load", "zeros",
                                                                                            "full")
                       or isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Tuple)
                       or isinstance(n, ast.Name) and n.id in found for n in ast.walk(value)):
                    found.add(name)
                    changed = True
                    break
    return found


def _site(tree: ast.Module, line: int) -> tuple[ast.FunctionDef, ast.If, list[ast.stmt]] | None:
    """The `if` statement at `line` of a top-level function, its function, and the statements after it in its
    block; None where there is none, or its test is not decided at compile time, or it has an `elif`."""
    for function in tree.body:
        if not isinstance(function, ast.FunctionDef):
            continue
        for block in _blocks(function):
            for i, statement in enumerate(block):
                if isinstance(statement, ast.If) and statement.lineno == line:
                    flags = constexpr_params(function)
                    every = {a.arg for a in [*function.args.posonlyargs, *function.args.args,
                                             *function.args.kwonlyargs]}
                    clause: ast.If = statement
                    while True:  # (every test of an `elif` chain decided at compile time)
                        if not compile_time_test(clause.test, flags, every):
                            return None
                        if not (clause.orelse and _is_elif(clause)):
                            break
                        clause = clause.orelse[0]  # type: ignore[assignment]
                    return function, statement, block[i + 1:]
    return None


def _is_elif(statement: ast.If) -> bool:
    """`statement.orelse` is an `elif` clause, not an `else:` block holding an `if` (told by the columns)."""
    inner = statement.orelse[0]
    return isinstance(inner, ast.If) and inner.col_offset == statement.col_offset


def _blocks(node: ast.AST) -> list[list[ast.stmt]]:
    """Every statement block under a function (its body, and the bodies of its compound statements), not inside
    nested functions or classes."""
    found: list[list[ast.stmt]] = []
    for field in ("body", "orelse", "finalbody"):
        block = getattr(node, field, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            found.append(block)
            for statement in block:
                if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    found += _blocks(statement)
    for handler in getattr(node, "handlers", []):
        found += _blocks(handler)
    return found


def _split(lines: list[str], origin: list[int], function: ast.FunctionDef, branch: ast.If, tail: list[ast.stmt]
           ) -> tuple[list[str], list[int]] | None:
    found = _clauses(lines, branch)
    if found is None:
        return None
    clauses, has_else = found
    for node in ast.walk(function):  # (a string over several lines would be re-indented)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.end_lineno != node.lineno:
            if branch.lineno <= node.lineno <= (tail[-1].end_lineno if tail else branch.end_lineno):
                return None
    body_start = branch.body[0].lineno
    step = _indent(lines[body_start - 1]) - _indent(lines[branch.lineno - 1])
    if step <= 0:
        return None
    unit = lines[body_start - 1][_indent(lines[branch.lineno - 1]):_indent(lines[body_start - 1])]
    end = branch.end_lineno or branch.lineno
    tail_end = max([end, *(s.end_lineno or s.lineno for s in tail)])
    tail_lines = list(range(end + 1, tail_end + 1))
    if_indent = lines[branch.lineno - 1][:_indent(lines[branch.lineno - 1])]
    newline = "\r\n" if lines[0].endswith("\r\n") else "\n"
    tests, bodies = _chain(branch)
    if not has_else:  # (an `if`/`elif` chain without `else`: the code after it runs there too)
        clauses.append((None, None, None))
        bodies.append([])

    # The copies end where the `if`'s block ends, and what a later clause's copy binds under new names would be lost
    # there: a name read after the block (an accumulator the block fills), or bound before the `if` inside a loop
    # around it (whose next iteration reads it: a persistent GEMM's `tile_id += NUM_SMS`), is given back its value at
    # the end of that copy (`tile_id = tile_id_2`).
    in_loop = any(isinstance(node, (ast.For, ast.While)) and node.lineno < branch.lineno <= (node.end_lineno or 0)
                  for node in ast.walk(function))
    later = {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and n.lineno > tail_end}
    taken = {n.id for n in ast.walk(function) if isinstance(n, ast.Name)} | {a.arg for a in ast.walk(function)
                                                                          if isinstance(a, ast.arg)}
    params = {a.arg for a in [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]}
    # (not the names a sibling clause of an `if` around this one binds: `if A: x = ... else: if B: ...` leaves `x`
    # unbound in the inner `if`'s copies)
    def holds(block: list[ast.stmt]) -> bool:
        return any(s.lineno <= branch.lineno <= (s.end_lineno or s.lineno) for s in block)

    siblings = {id(node) for outer in ast.walk(function) if isinstance(outer, ast.If) and outer is not branch
                and (holds(outer.body) or holds(outer.orelse))
                for block in (outer.body, outer.orelse) if not holds(block)
                for statement in block for node in ast.walk(statement)}
    before = {node.id for statement in function.body for node in ast.walk(statement)
              if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
              and (node.lineno < branch.lineno) and id(node) not in siblings}
    before |= {node.id for node in ast.walk(branch.test) if isinstance(node, ast.Name)}

    chain_bound = {n.id for n in ast.walk(branch) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    tail_reads = {n.id for statement in tail for n in ast.walk(statement)
                  if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}

    out: list[str] = lines[:branch.lineno - 1]
    out_origin: list[int] = origin[:len(out) + 1]
    renamed_any = False
    for index, (header, first, last) in enumerate(clauses):
        rows = list(range(first, last + 1)) if first is not None else []
        # Tests of the flags this clause decides, where the copy tests them again (`if KIND == "vector":` inside the
        # loop after the chain): the branch this clause takes, in place of the `if`.
        fold = _Fold(lines, _facts(tests, index), function)
        fold.block(bodies[index])
        fold.block(tail)
        # The first branch keeps its names. Another: the names it and its copy of the code after the `if` bind,
        # renamed there, and the names the code after the `if` reads that only other clauses bind (`None` here: read
        # where this branch leaves them unbound, the source fails to compile too; the copy may read them only under a
        # test that fails here).
        bound: set[str] = set()
        for n_node in ast.walk(function) if index else ():
            if isinstance(n_node, ast.Name) and isinstance(n_node.ctx, ast.Store) and (
                    (first is not None and first <= n_node.lineno <= last) or end < n_node.lineno <= tail_end):
                bound.add(n_node.id)
        unbound = sorted((tail_reads & chain_bound) - bound - before - params) if index else []
        bound |= set(unbound)
        renames: dict[str, str] = {}
        for name in sorted(bound):
            number = 2
            while f"{name}_{number}" in taken:
                number += 1
            renames[name] = f"{name}_{number}"
            taken.add(renames[name])
        given_back = sorted(n for n in renames if n in later or (in_loop and (n in before or n in params)))
        renamed_any = renamed_any or bool(renames)
        copied = sorted(n for n in renames if n in params or n in before)
        edits = _rename_edits(lines, {*rows, *tail_lines}, renames) if renames else {}
        if header is None:  # (the `else:` the chain lacked)
            out.append(f"{if_indent}else:{newline}")
            out_origin.append(origin[branch.lineno])
            body_indent = if_indent + unit
            at = branch.lineno
        else:
            for n in range(header, first):
                out.append(lines[n - 1])
                out_origin.append(origin[n])
            body_indent = lines[first - 1][:_indent(lines[first - 1])]
            at = header
        for name in copied:  # (each copy starts from the values before the `if`)
            out.append(f"{body_indent}{renames[name]} = {name}{newline}")
            out_origin.append(origin[at])
        for name in unbound:
            out.append(f"{body_indent}{renames[name]} = None{newline}")
            out_origin.append(origin[at])
        for n in rows:
            if n not in fold.drop:
                out.append(fold.line(n, _renamed(lines[n - 1], edits.get(n, [])), renames))
                out_origin.append(origin[n])
        for n in tail_lines:
            if n not in fold.drop:
                out.append(_indented(fold.line(n, _renamed(lines[n - 1], edits.get(n, [])), renames), unit))
                out_origin.append(origin[n])
        for name in given_back:
            out.append(f"{body_indent}{name} = {renames[name]}{newline}")
            out_origin.append(origin[tail_end])
    if not renamed_any:
        return None
    out += lines[tail_end:]
    out_origin += origin[tail_end + 1:]
    return out, out_origin


def _chain(branch: ast.If) -> tuple[list[ast.expr], list[list[ast.stmt]]]:
    """The tests of `branch`'s `if`/`elif` clauses, and the blocks of its clauses (the `else` block last, if any)."""
    tests: list[ast.expr] = [branch.test]
    bodies: list[list[ast.stmt]] = [branch.body]
    clause = branch
    while clause.orelse:
        if _is_elif(clause):
            clause = clause.orelse[0]  # type: ignore[assignment]
            tests.append(clause.test)
            bodies.append(clause.body)
            continue
        bodies.append(clause.orelse)
        break
    return tests, bodies


def _facts(tests: list[ast.expr], index: int) -> dict[str, tuple[str, set[object]]]:
    """What the clause at `index` of a chain of `tests` knows of the flags: its own test holds and the earlier ones
    fail. Per flag: ("eq", {value}) where it equals a literal, ("ne", {values}) where it equals none of them, "truthy"
    or "falsy" where it was tested bare (`if FLAG:`, `if not FLAG:`)."""
    facts: dict[str, tuple[str, set[object]]] = {}
    for i, test in enumerate(tests[:index + 1]):
        holds = i == index
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name) \
                and isinstance(test.comparators[0], ast.Constant) and isinstance(test.ops[0], (ast.Eq, ast.NotEq)):
            name, value = test.left.id, test.comparators[0].value
            equal = holds == isinstance(test.ops[0], ast.Eq)
            known = facts.get(name)
            if known is not None and known[0] != "ne":
                continue
            facts[name] = ("eq", {value}) if equal else ("ne", (known[1] if known else set()) | {value})
        elif isinstance(test, ast.Name) and test.id not in facts:
            facts[test.id] = ("truthy" if holds else "falsy", set())
        elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Name) \
                and test.operand.id not in facts:  # (`if not TIE_HDIM:`)
            facts[test.operand.id] = ("falsy" if holds else "truthy", set())
    return facts


def _decide(test: ast.expr, facts: dict[str, tuple[str, set[object]]]) -> bool | None:
    """`test` under `facts` (`_facts`): True, False, or None where they do not decide it."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _decide(test.operand, facts)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        values = [_decide(v, facts) for v in test.values]
        if isinstance(test.op, ast.And):
            return False if False in values else None if None in values else True
        return True if True in values else None if None in values else False
    if isinstance(test, ast.Name) and test.id in facts:
        kind, values = facts[test.id]
        return {"truthy": True, "falsy": False}.get(kind, bool(next(iter(values))) if kind == "eq" else None)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq)):
        left, right = test.left, test.comparators[0]
        if isinstance(right, ast.Name) and isinstance(left, ast.Constant):
            left, right = right, left
        if not (isinstance(left, ast.Name) and left.id in facts and isinstance(right, ast.Constant)):
            return None
        kind, values = facts[left.id]
        if kind == "eq":
            same: bool | None = right.value in values
        elif kind == "ne":
            same = False if right.value in values else None
        else:
            return None
        if same is None:
            return None
        return same if isinstance(test.ops[0], ast.Eq) else not same
    return None


class _Fold:
    """The lines of a clause's copy with the `if` statements its facts decide replaced by the branch they take: the
    lines dropped, and per kept line the indentation removed and a keyword rewritten (`elif` -> `if`, a test that
    fails with no `else` -> `pass`)."""

    def __init__(self, lines: list[str], facts: dict[str, tuple[str, set[object]]], function: ast.FunctionDef
                 ) -> None:
        self.lines = lines
        self.function = function
        self.facts = facts
        self.drop: set[int] = set()
        self.dedent: dict[int, int] = {}
        self.keyword: dict[int, str] = {}

    def block(self, statements: list[ast.stmt], dedent: int = 0) -> None:
        for statement in statements:
            self.statement(statement, dedent)

    def statement(self, statement: ast.stmt, dedent: int, head: int | None = None) -> None:
        """`head`: where the `if` starts whose failing tests led here (an `elif` clause's, its chain's `if`)."""
        end = statement.end_lineno or statement.lineno
        head = statement.lineno if head is None else head
        if isinstance(statement, ast.If) and self.facts:
            taken = _decide(statement.test, self.facts)
            if taken is not None:
                column = _indent(self.lines[statement.lineno - 1])
                if taken:
                    chosen, start = statement.body, statement.body[0].lineno
                    stop = statement.body[-1].end_lineno or statement.body[-1].lineno
                elif statement.orelse and _is_elif(statement):
                    inner = statement.orelse[0]
                    self.drop |= set(range(statement.lineno, inner.lineno))
                    self.keyword[inner.lineno] = "if"
                    self.statement(inner, dedent, head)
                    return
                elif statement.orelse:
                    chosen, start = statement.orelse, statement.orelse[0].lineno
                    stop = end
                else:
                    # (a name only this `if` binds, read after it, is None there: where the source reads it, it
                    # cannot compile either; elsewhere the copy reads it under a test that fails)
                    stores = [n for n in ast.walk(self.function) if isinstance(n, ast.Name)
                              and isinstance(n.ctx, ast.Store)]
                    only = sorted({n.id for n in stores if head <= n.lineno <= end}
                                  - {n.id for n in stores if not head <= n.lineno <= end})
                    self.drop |= set(range(statement.lineno + 1, end + 1))
                    self.keyword[statement.lineno] = "none:" + ",".join(only) if only else "pass"
                    self.dedent[statement.lineno] = dedent
                    return
                self.drop |= set(range(statement.lineno, start)) | set(range(stop + 1, end + 1))
                inner_dedent = dedent + _indent(self.lines[start - 1]) - column
                for n in range(start, stop + 1):
                    self.dedent[n] = inner_dedent
                self.block(chosen, inner_dedent)
                return
        for n in range(statement.lineno, end + 1):
            self.dedent.setdefault(n, dedent)
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(statement, field, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                self.block(inner, dedent)
        for handler in getattr(statement, "handlers", []):
            self.block(handler.body, dedent)

    def line(self, number: int, text: str, renames: dict[str, str] | None = None) -> str:
        keyword = self.keyword.get(number)
        newline = "\r\n" if text.endswith("\r\n") else "\n"
        if keyword == "if":
            at = _indent(text)
            text = text[:at] + "if" + text[at + len("elif"):]
        elif keyword == "pass":
            text = text[:_indent(text)] + "pass" + newline
        elif keyword is not None and keyword.startswith("none:"):
            names = [(renames or {}).get(n, n) for n in keyword[len("none:"):].split(",")]
            text = text[:_indent(text)] + " = ".join(names) + " = None" + newline
        cut = self.dedent.get(number, 0)
        if not text.strip() or not cut or text[:cut].strip():
            return text  # (a blank line keeps its newline: one line out per line in, as the line map counts them)
        return text[cut:]


def _clauses(lines: list[str], branch: ast.If
             ) -> tuple[list[tuple[int | None, int | None, int | None]], bool] | None:
    """The clauses of `branch` (`if`, each `elif`, then `else`): per clause its header's first line, and the first and
    last lines of its block (to the line before the next clause; 1-based), and whether the last is an `else`; None
    where a clause is not found."""
    found: list[tuple[int, int]] = [(branch.lineno, branch.body[0].lineno)]
    clause = branch
    has_else = False
    while clause.orelse:
        if _is_elif(clause):
            clause = clause.orelse[0]  # type: ignore[assignment]
            found.append((clause.lineno, clause.body[0].lineno))
            continue
        else_line = _else_line(lines, clause)
        if else_line is None:
            return None
        found.append((else_line, clause.orelse[0].lineno))
        has_else = True
        break
    end = branch.end_lineno or branch.lineno
    out: list[tuple[int | None, int | None, int | None]] = []
    for i, (header, first) in enumerate(found):
        last = found[i + 1][0] - 1 if i + 1 < len(found) else end
        out.append((header, first, last))
    return out, has_else


def _indented(line: str, unit: str) -> str:
    return line if not line.strip() else unit + line


def _rename_edits(lines: list[str], rows: set[int], renames: dict[str, str]) -> dict[int, list[tuple[int, int, str]]]:
    """Per line of `rows` (1-based), the spans of the names of `renames` that are variables there (not attributes,
    not keyword arguments, not inside strings or comments), read from the tokens of the whole text."""
    edits: dict[int, list[tuple[int, int, str]]] = {}
    depth = 0
    previous: tokenize.TokenInfo | None = None
    tokens = tokenize.generate_tokens(io.StringIO("".join(lines)).readline)
    significant: list[tokenize.TokenInfo] = []
    try:
        for token in tokens:
            if token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT,
                                  tokenize.DEDENT, tokenize.ENDMARKER):
                significant.append(token)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return {}
    for i, token in enumerate(significant):
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
        elif token.type == tokenize.OP and token.string in ")]}":
            depth -= 1
        previous = significant[i - 1] if i else None
        if token.type != tokenize.NAME or token.string not in renames or token.start[0] not in rows:
            continue
        following = significant[i + 1] if i + 1 < len(significant) else None
        if previous is not None and previous.string == ".":
            continue  # an attribute
        if following is not None and following.string == "=" and depth > 0:
            continue  # a keyword argument
        edits.setdefault(token.start[0], []).append((token.start[1], token.end[1], renames[token.string]))
    return edits


def _renamed(line: str, edits: list[tuple[int, int, str]]) -> str:
    for start, stop, name in sorted(edits, reverse=True):
        line = line[:start] + name + line[stop:]
    return line


def _else_line(lines: list[str], branch: ast.If) -> int | None:
    """The line of the `else:` clause after `branch`'s first block (1-based), else None."""
    first = branch.orelse[0]
    for number in range((branch.body[-1].end_lineno or branch.body[-1].lineno) + 1, first.lineno):
        text = lines[number - 1]
        if text.strip().startswith("else") and text.strip().rstrip().endswith(":") \
                and _indent(text) == branch.col_offset:
            return number
    return None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))
