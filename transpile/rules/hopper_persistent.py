"""sm90: the persistent form of a warp-specialised TMA ring (a kernel-level rewrite the TMA ring rule drives).

Matches: a kernel whose descriptor GEMM loop has the warp-specialised form (`hopper_pipeline`), where the loop is a
statement of the kernel's body (not nested), the program ids are read only as ``pid = tl.program_id(axis)``
statements before it, the kernel has no ``return`` and reads no ``tl.num_programs``, and every launch of the kernel
in its file passes a grid the tool can restate in the kernel's own terms (``lambda META: (triton.cdiv(M,
META["BLOCK_M"]), ...)``, through the launch's arguments), with a tile size the host can read from ``META``.
Emits: for accumulator tiles of 128x256 and more (the warp-specialised tiles), a kernel in which both partitions walk
the tiles of that grid (tile ``t`` of program ``p`` for ``t = p, p + nprog, ...``): the loader warp fills one ring
that runs on across tiles, so the next tile's copies start while the previous tile's epilogue runs; the default
partition runs, per tile, the kernel's own statements with the main loop replaced by the wgmma consumer. For smaller
tiles the kernel runs its translated body once per tile of the same walk. Either form computes every tile exactly
once under any grid (under the source's grid, each program takes its own tile); the file's launches get
``_persistent_grid(grid, ...)``, one program per SM for the warp-specialised tiles and the source's grid otherwise.
On an H100 a hand-written kernel of this form ran the descriptor GEMM at 0.95-1.04x cuBLAS (fp16/bf16, 4096^3 and
8192^3), against 0.89-0.99x for the non-persistent warp-specialised ring (bench/RESULTS.md: sm90: GEMMs).
Targets: sm90.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from transpile.cst_utils import assigned_names, calls_in, names_in
from transpile.cst_walk import preorder
from transpile.rules.hopper_schedule import PERSISTENT_LOADER_REGISTERS
from transpile.rules.layouts import declaration_lines
from transpile.rules.pipeline_text import code, indent

_GRID_CALLS = {"triton.cdiv": "gl.cdiv", "cdiv": "gl.cdiv", "min": "min", "max": "max"}


@dataclass
class PersistentForm:
    """What the TMA ring rule hands to the kernel-level rewrite (`build`)."""

    loop_statement: cst.BaseStatement  # the loop's replacement as emitted (with the non-persistent WS branch)
    plain_statement: cst.BaseStatement  # the same without that branch (ring / unpipelined loop only)
    grid: list[str]  # the launch grid's dimensions in the kernel's terms (Gluon text)
    host_condition: str  # `meta[...]` test of the tile size, for the launch (True: persistent grid)
    kernel_condition: str  # the same test in the kernel (compile time)
    ring_lines: list[str]  # allocate/init the rings and both barrier arrays
    ring_args: str  # "a_smem, b_smem, ready, empty"
    stages: str  # the ring depth's constexpr name
    stage_bytes: str  # bytes of one slot of both rings (constexpr expression)
    invalidate_lines: list[str]
    consumer_loop: list[str]  # the consumer's main loop (per tile), at indent 0, using `n_done`
    loader_loop: list[str]  # the loader's copies of one tile, at indent 0, using `n_done`
    ws_loader: str = ""  # the non-persistent form's loader function (module_functions), dropped when this is built


def eligible(fn, loop: cst.For, functions: dict | None = None) -> str | None:  # noqa: ANN001 - JitFunction
    """None when the kernel's shape allows the persistent form (see the module docstring), else why not.
    `functions`: the module's jit functions by name (a helper the kernel calls must not read program ids: the
    walk restates only the kernel's own)."""
    body = fn.node.body.body
    if loop not in body:
        return "the main loop is nested"
    index = body.index(loop)
    for i, statement in enumerate(body):
        for call in calls_in(statement):
            callee = code(call.func)
            if callee.endswith("num_programs"):
                return "the kernel reads tl.num_programs"
            if callee.endswith("program_id"):
                axis = [a for a in call.args if a.keyword is None or a.keyword.value == "axis"]
                if not (i < index and len(axis) == 1 and isinstance(axis[0].value, cst.Integer)):
                    return "a program id is read after the main loop or with an axis not written as a number"
    if any(isinstance(n, cst.Return) for n in preorder(fn.node)):
        return "the kernel returns early"
    seen: set[str] = set()
    pending = [fn.node]
    while pending:  # helpers called (transitively) must not read the program ids or their number
        node = pending.pop()
        for call in calls_in(node):
            callee = code(call.func)
            if callee.endswith(("program_id", "num_programs")) and node is not fn.node:
                return f"a helper it calls reads tl.{callee.rsplit('.', 1)[-1]}"
            name = callee.rsplit(".", 1)[-1]
            if functions and name in functions and name not in seen and name != fn.name:
                seen.add(name)
                pending.append(functions[name].node)
    return None


# ---- The launch grid, restated in the kernel's terms ----

def launch_grid(module: cst.Module, fn) -> list[str] | None:  # noqa: ANN001 - JitFunction
    """The grid every launch `kernel[grid](...)` of `fn` in `module` passes, as Gluon expressions of the kernel's
    parameters, or None (no launch in the file, launches that disagree, or a grid the tool cannot restate)."""
    grids: list[list[str]] = []
    for caller, assigned, call in _launches(module).get(fn.name, ()):
        if caller == fn.name:
            continue
        grid = call.func.slice[0].slice.value  # type: ignore[union-attr]
        if isinstance(grid, cst.Name) and grid.value in assigned:
            grid = assigned[grid.value]
        dims = _grid_dims(grid, call, fn)
        if dims is None:
            return None
        grids.append(dims)
    if not grids or any(g != grids[0] for g in grids):
        return None
    return grids[0]


_LAUNCHES: dict[int, tuple[cst.Module, dict]] = {}


def _launches(module: cst.Module) -> dict[str, list[tuple[str, dict[str, cst.BaseExpression], cst.Call]]]:
    """Every launch `name[grid](...)` in the functions of `module`, by the launched name: (the calling function's
    name, its single assignments (`_assignments`), the call). Made once per module, not once per kernel: a file's
    cost stays linear in its kernels."""
    entry = _LAUNCHES.get(id(module))
    if entry is not None and entry[0] is module:
        return entry[1]
    found: dict[str, list] = {}
    for function in module.body:
        if not isinstance(function, cst.FunctionDef):
            continue
        assigned = None
        for call in calls_in(function):
            func = call.func
            if isinstance(func, cst.Subscript) and isinstance(func.value, cst.Name) and len(func.slice) == 1:
                if assigned is None:
                    assigned = _assignments(function)
                found.setdefault(func.value.value, []).append((function.name.value, assigned, call))
    if len(_LAUNCHES) >= 2:  # (the modules of one translation; kept alive while cached)
        _LAUNCHES.clear()
    _LAUNCHES[id(module)] = (module, found)
    return found


def _assignments(function: cst.FunctionDef) -> dict[str, cst.BaseExpression]:
    """Names bound exactly once in `function` by `name = value` (else left out)."""
    found: dict[str, cst.BaseExpression] = {}
    seen: set[str] = set()
    for node in preorder(function):
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            name = node.targets[0].target.value
            if name in seen:
                found.pop(name, None)
            else:
                found[name] = node.value
            seen.add(name)
    return found


def _grid_dims(grid: cst.BaseExpression, call: cst.Call, fn) -> list[str] | None:  # noqa: ANN001
    meta = None
    if isinstance(grid, cst.Lambda):
        params = grid.params.params
        if len(params) != 1:
            return None
        meta = params[0].name.value
        grid = grid.body
    if not isinstance(grid, cst.Tuple):
        return None
    names = [p.name for p in fn.params]
    bound: dict[str, str] = {}  # host expression text -> kernel parameter
    if any(a.star for a in call.args):
        return None  # `*args`: which argument is which parameter is not written at the launch
    positional = [a for a in call.args if a.keyword is None]
    for arg, param in zip(positional, names):
        bound.setdefault(code(arg.value), param)
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value in names:
            bound.setdefault(code(arg.value), arg.keyword.value)
    constexprs = set(fn.constexpr_names)
    dims = []
    for element in grid.elements:
        text = _kernel_expr(element.value, meta, bound, constexprs)
        if text is None:
            return None
        dims.append(text)
    return dims if 1 <= len(dims) <= 3 else None


def _kernel_expr(node: cst.BaseExpression, meta: str | None, bound: dict[str, str], constexprs: set[str]
                 ) -> str | None:
    """A host grid expression as the kernel's expression, or None."""
    def walk(n: cst.BaseExpression) -> str | None:
        if isinstance(n, cst.Integer):
            return n.value
        if code(n) in bound:
            return bound[code(n)]
        if (meta is not None and isinstance(n, cst.Subscript) and isinstance(n.value, cst.Name)
                and n.value.value == meta and len(n.slice) == 1
                and isinstance(n.slice[0].slice.value, cst.SimpleString)):  # type: ignore[union-attr]
            key = n.slice[0].slice.value.evaluated_value  # type: ignore[union-attr]
            return key if key in constexprs else None
        if isinstance(n, cst.BinaryOperation) and isinstance(n.operator, (cst.Add, cst.Subtract, cst.Multiply,
                                                                          cst.FloorDivide)):
            left, right = walk(n.left), walk(n.right)
            if left is None or right is None:
                return None
            op = code(n.operator).strip()
            return f"({left} {op} {right})"
        if isinstance(n, cst.Call) and code(n.func) in _GRID_CALLS and all(a.keyword is None for a in n.args):
            args = [walk(a.value) for a in n.args]
            if any(a is None for a in args):
                return None
            return f"{_GRID_CALLS[code(n.func)]}({', '.join(args)})"  # type: ignore[arg-type]
        return None
    text = walk(node)
    if text is not None and text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
        text = text[1:-1]
    return text


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return False
    return depth == 0


def host_tile_condition(rows: str, cols: str, constexprs: set[str], minimum: int) -> str | None:
    """`rows * cols >= minimum` (kernel constexpr expressions) read from the launch's `meta`, or None."""
    parts = []
    for text in (rows, cols):
        try:
            node = cst.parse_expression(text)
        except cst.ParserSyntaxError:
            return None
        if isinstance(node, cst.Name) and node.value in constexprs:
            parts.append(f'meta["{node.value}"]')
        elif isinstance(node, cst.Integer):
            parts.append(node.value)
        else:
            return None
    return f"{parts[0]} * {parts[1]} >= {minimum}"


# ---- The kernel ----

def build(ctx, form: PersistentForm, original: cst.FunctionDef, updated: cst.FunctionDef  # noqa: ANN001
          ) -> cst.FunctionDef | None:
    """The persistent kernel (see the module docstring), or None where the translated body is not laid out as
    expected (the non-persistent form then stays)."""
    body = list(updated.body.body)
    at = next((i for i, s in enumerate(body) if s is form.loop_statement), None)
    first, count = ctx.declared  # the layout declarations the translation put first
    if at is None or at < first + count:
        return None
    prefix = body[:first + count]  # a docstring, then the declarations
    before, after = body[first + count:at], body[at + 1:]
    fname = ctx.function.name
    consumer_fn, loader_fn = f"_{fname}_tile_consumer", f"_{fname}_tile_loader"

    # Descriptors made in the kernel from its parameters are made once, before the tiles, and go to both
    # partitions as arguments; pid statements are restated per tile.
    hoisted: list[cst.BaseStatement] = []
    per_tile: list[cst.BaseStatement] = []
    for statement in before:
        if _makes_descriptor(statement) and not names_in(statement) & {
                n for s in before if s is not statement for n in assigned_names(s)}:
            hoisted.append(statement)
        else:
            per_tile.append(statement)
    axes = sorted({int(m) for s in per_tile for m in _PROGRAM_ID.findall(code(s))})
    if any(axis >= len(form.grid) for axis in axes) or any(_PROGRAM_ID.search(code(s)) for s in hoisted):
        return None
    descriptors = [n for s in hoisted for n in sorted(assigned_names(s))]
    params = [p.name for p in ctx.function.params]
    constexprs = set(ctx.function.constexpr_names)
    sig = ", ".join(f"{p}: gl.constexpr" if p in constexprs else p for p in params)
    args = ", ".join(params)
    walk = _tile_walk(form.grid)
    pid_lines = _pid_lines(axes, form.grid)

    line = ctx.source.position(original)[0]
    # The epilogue's one TMA store completes under the next tile's main loop where nothing else in the consumer
    # takes shared memory (a buffer still being stored from must not be reused).
    epilogue = [indent(_programs(code(s).strip("\n")), "        ") for s in [*per_tile, *after]]
    stores = sum(line.count("_tma_store(") for line in epilogue)
    deferred = stores == 1 and not any("_tma_load(" in line for line in epilogue)
    if deferred:
        epilogue = [line.replace("_tma_store(", "_tma_store_deferred(") for line in epilogue]
    consumer = [
        "@gluon.jit",
        f"def {consumer_fn}({sig}, {', '.join(descriptors)}, a_ring, b_ring, ready, empty):" if descriptors else
        f"def {consumer_fn}({sig}, a_ring, b_ring, ready, empty):",
        f'    """Default partition of `{fname}` (line {line} of the source) in its persistent, warp-specialised form:',
        "    for each tile of this program, the kernel's own statements, with the main loop waiting for the slots the",
        "    loader warp fills, running the wgmmas asynchronously (one in flight) and handing each slot back once the",
        '    wgmma that read it has completed."""',
        "    NUM_STAGES: gl.constexpr = a_ring.shape[0]",
        "    n_done = 0  # ring iterations this program has consumed: the ring runs on across tiles",
        *walk,
        *["    " + x for x in pid_lines],
        *epilogue[:len(per_tile)],
        *[indent(x, "        ") for x in form.consumer_loop],
        *epilogue[len(per_tile):],
        *(["    tma.store_wait(0)  # the last tile's store"] if deferred else []),
    ]
    # The layouts the consumer's statements name, declared as the kernel declares them (same number of warps).
    declared = declaration_lines(ctx, names_in(cst.parse_module("\n".join(consumer) + "\n")))
    consumer[6:6] = [f"    {line}" for line in declared]
    used = names_in(cst.parse_module("\n".join(form.loader_loop) + "\n"))
    slice_ = _backward_slice(per_tile, used)
    if slice_ is None:
        return None
    # The loader warp runs on few registers: it takes only the arguments its copies need.
    reads = used | {n for st in slice_ for n in names_in(st)} | {n for g in form.grid for n in
                                                                names_in(cst.parse_expression(g))}
    loader_params = [p for p in [*params, *descriptors] if p in reads]
    loader_sig = ", ".join(f"{p}: gl.constexpr" if p in constexprs else p for p in loader_params)
    loader = [
        "@gluon.jit",
        f"def {loader_fn}({loader_sig}, a_ring, b_ring, ready, empty):",
        f'    """Loader partition of `{fname}` (line {line} of the source) in its persistent, warp-specialised form:',
        "    one warp issues the TMA copies of every tile of this program, in order, into the ring slots the wgmma",
        '    warps hand back; it runs ahead of them across tile boundaries."""',
        "    NUM_STAGES: gl.constexpr = a_ring.shape[0]",
        "    n_done = 0  # ring iterations this program has filled",
        *walk,
        *["    " + x for x in pid_lines],
        *[indent(_programs(code(s).strip("\n")), "        ") for s in slice_],
        *[indent(x, "        ") for x in form.loader_loop],
    ]
    if form.ws_loader in ctx.module_functions:
        ctx.module_functions.remove(form.ws_loader)  # the non-persistent form's loader: not emitted
    ctx.helpers.discard("ws_wgmma_consumer")
    if deferred:
        ctx.need("tma_store_deferred")
    ctx.module_functions.append("\n".join(loader) + "\n")
    ctx.module_functions.append("\n".join(consumer) + "\n")

    desc_args = f"{', '.join(descriptors)}, " if descriptors else ""
    # The epilogue's shared-memory tiles live beside the ring (the consumer runs while the loader fills it): the
    # ring gets fewer slots where both would not fit.
    reserved = [f"{d}.block_type.nbytes" for line in epilogue for d in _SMEM_TILES.findall(line)]
    ring_lines = list(form.ring_lines)
    depth_at = next(i for i, line in enumerate(ring_lines) if line.startswith(f"{form.stages}: gl.constexpr = "))
    depth = ring_lines[depth_at].split(" = ", 1)[1]
    if reserved:
        ring_lines[depth_at] = (f"{form.stages}: gl.constexpr = _fit_stages({depth}, {form.stage_bytes}, "
                                f"{' + '.join(reserved)})")
        ctx.need("fit_stages")
    persistent = [
        *[code(s).strip("\n") for s in hoisted],
        f"if {form.kernel_condition}:",
        "    # Persistent and warp-specialised (triton-transpile): both partitions walk this program's tiles of the",
        "    # launch grid; the loader warp's ring runs on across tiles, so the next tile's copies overlap this one's",
        "    # epilogue. Launched with one program per SM (`_persistent_grid`); correct under any grid.",
        *["    " + x for x in ring_lines],
        "    gl.warp_specialize([",
        f"        ({consumer_fn}, ({args}, {desc_args}{form.ring_args})),",
        f"        ({loader_fn}, ({', '.join(loader_params)}, {form.ring_args})),",
        f"    ], [1], [{PERSISTENT_LOADER_REGISTERS}])",
        *["    " + x for x in form.invalidate_lines],
        "else:",
        "    # One tile per step of the same walk: under the source's grid, each program's own tile.",
        *walk,
        *["    " + x for x in pid_lines],
        *[indent(_programs(code(s).strip("\n")), "        ") for s in [*per_tile, form.plain_statement, *after]],
    ]
    # (after a placeholder statement: a module's leading comments would go to its header, not to the statement)
    new_body = [*prefix, *cst.parse_module("pass\n" + "\n".join(persistent) + "\n").body[1:]]
    return updated.with_changes(body=updated.body.with_changes(body=new_body))


def _makes_descriptor(statement: cst.BaseStatement) -> bool:
    return (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Assign)
            and isinstance(statement.body[0].value, cst.Call)
            and code(statement.body[0].value.func).endswith("make_tensor_descriptor"))


#: Calls a loader warp's producer slice may make: scalar arithmetic on the program ids (the non-persistent loader,
#: `hopper_pipeline._warp_specialised`, reads them as they are).
SCALAR_CALLS = frozenset({"gl.cdiv", "gl.program_id", "gl.num_programs", "min", "max", "gl.minimum", "gl.maximum",
                          "gl.multiple_of", "gl.max_contiguous"})
#: The persistent loader's slice: the same, less `tl.num_programs` (the walk restates only program ids), and Triton's
#: own tile swizzle (`tl.swizzle2d`, emitted `_swizzle2d`) on scalar program ids.
_LOADER_CALLS = SCALAR_CALLS - {"gl.num_programs"} | {"_swizzle2d"}


def _backward_slice(statements: list[cst.BaseStatement], used: set[str]) -> list[cst.BaseStatement] | None:
    """The statements (in order) that define names `used` reads, transitively; None when one is not plain scalar
    arithmetic (the loader warp takes no tensors)."""
    needed = set(used)
    chosen: list[cst.BaseStatement] = []
    for statement in reversed(statements):
        defined = assigned_names(statement)
        if not defined & needed:
            continue
        if not isinstance(statement, cst.SimpleStatementLine):
            return None
        for call in calls_in(statement):
            if code(call.func) not in _LOADER_CALLS:
                return None
        chosen.append(statement)
        needed |= names_in(statement)
    return list(reversed(chosen))


def _wrapped(text: str) -> str:
    """`text` in parentheses where an operator outside any call would bind it wrongly."""
    depth = 0
    for i, ch in enumerate(text):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth == 0 and ch == " " and text[i + 1:i + 2] in {"+", "-", "*", "/"}:
            return f"({text})"
    return text


def _tile_walk(grid: list[str]) -> list[str]:
    """The loop over this program's tiles: program `p` of `nprog` takes tiles p, p + nprog, ... of the grid."""
    lin = "gl.program_id(0)"
    nprog = "gl.num_programs(0)"
    if len(grid) > 1:
        lin += " + gl.program_id(1) * gl.num_programs(0)"
        nprog += " * gl.num_programs(1)"
    if len(grid) > 2:
        lin += " + gl.program_id(2) * gl.num_programs(0) * gl.num_programs(1)"
        nprog += " * gl.num_programs(2)"
    tiles = " * ".join(_wrapped(g) for g in grid)
    return [f"    for tile in range({lin}, {tiles}, {nprog}):"]


#: Tiles of a 2-D grid are walked in groups of this many rows of tiles (axis 0), column by column: the programs that
#: run at once then share the operand tiles of a few rows and columns in L2 (the order of tiles does not change what
#: each computes).
GROUP = 8


_SMEM_TILES = re.compile(r"_tma_(?:store|store_deferred|load)\((\w+)")
_PROGRAM_ID = re.compile(r"gl\.program_id\(\s*(?:axis\s*=\s*)?(\d)\s*\)")


def _programs(text: str) -> str:
    """`gl.program_id(k)` -> `program_k`, the program id of the tile being computed."""
    return _PROGRAM_ID.sub(lambda m: f"program_{m.group(1)}", text)


def _pid_lines(axes: list[int], grid: list[str]) -> list[str]:
    """The program ids of tile `tile` (axis 0 fastest, as the hardware numbers programs; a 2-D grid in groups of
    GROUP rows), at indent 4 (inside the tile loop)."""
    wrap = [_wrapped(g) for g in grid]
    if len(grid) == 2:
        lines = [f"    group_size = {GROUP} * {wrap[1]}",
                 f"    first = tile // group_size * {GROUP}",
                 f"    rows = min({wrap[0]} - first, {GROUP})"]
        values = {0: "first + tile % group_size % rows", 1: "tile % group_size // rows"}
    elif len(grid) == 1:
        lines, values = [], {0: "tile"}
    else:
        lines, values = [], {0: f"tile % {wrap[0]}", 1: f"tile // {wrap[0]} % {wrap[1]}",
                             2: f"tile // ({wrap[0]} * {wrap[1]})"}
    return [*lines, *[f"    program_{axis} = {values[axis]}" for axis in axes]]
