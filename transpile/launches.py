"""How a variant's kernels are launched: the launcher each translated kernel whose Gluon form runs only some launches
is bound to (`Dispatch`: a flag, aligned tensors, TMA-readable tiles, the warps and sizes a measured form needs), the
source kernel and the Triton copies of its helpers that launcher runs for the other launches, the host launches
rewritten for a kernel's warps and persistent grid, and the launcher of a kernel kept as Triton that runs on a K-major
copy of B. The engine decides which kernel gets which; this module writes them."""

from __future__ import annotations

import re
import textwrap

import libcst as cst

from transpile import cst_walk
from transpile.passes.host_descriptors import HostDescriptors, descriptor_tuples
from transpile.analysis.launch_alignment import REASON as ALIGNMENT_REASON, address_params, column_major_access
from transpile.discover import JitFunction, ModuleFacts
from transpile.passes.kmajor_copy import LEAST_ELEMENTS, LEAST_OUTPUTS, LEAST_ROWS, KMajorLaunch, kmajor_kernel
from transpile.passes.tile_scales import tile_scale_loops, tile_scaled
from transpile.passes.tma_tiles import Dispatch, Tile, jit_callees
from transpile.rules.base import WARPGROUP_TEST, RuleContext
from transpile.rules.host_made import MadeDescriptor
from transpile.source import SourceFile
from transpile.targets import Target


class HostLaunches(cst.CSTTransformer):
    """Host code, launches ``kernel[grid](...)`` of translated kernels: one that needs a number of warps gets it
    (``num_warps=n``, in place of the launch's own or added where the launch gives none and no autotune config
    does); one in its persistent form goes through
    ``_persistent_grid(grid, lambda meta: <tile test>)`` (one program per SM for the configs of that form)."""

    def __init__(self, warps: dict[str, int], grids: dict[str, str], autotuned: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self.warps = warps
        self.grids = grids
        self.autotuned = autotuned

    def leave_Subscript(self, original_node: cst.Subscript, updated_node: cst.Subscript) -> cst.BaseExpression:
        if not (isinstance(updated_node.value, cst.Name) and updated_node.value.value in self.grids
                and len(updated_node.slice) == 1):
            return updated_node
        element = updated_node.slice[0]
        grid = element.slice.value  # type: ignore[union-attr]
        wrapped = cst.parse_expression(
            f"_persistent_grid({cst.Module([]).code_for_node(grid)}, "
            f"lambda meta: {self.grids[updated_node.value.value]})")
        return updated_node.with_changes(slice=[element.with_changes(slice=cst.Index(wrapped))])

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        func = updated_node.func
        if not (isinstance(func, cst.Subscript) and isinstance(func.value, cst.Name) and func.value.value in self.warps):
            return updated_node
        warps = self.warps[func.value.value]
        args = list(updated_node.args)
        for i, arg in enumerate(args):
            if arg.keyword is not None and arg.keyword.value == "num_warps":
                args[i] = arg.with_changes(value=cst.Integer(str(warps)))
                return updated_node.with_changes(args=args)
        if func.value.value in self.autotuned or any(arg.star == "**" for arg in args):
            return updated_node  # the autotune configs (rewritten) decide, or the `**` arguments may
        # no num_warps given: Triton would launch 4 warps, which the kernel's warp schedule does not allow
        return updated_node.with_changes(args=[*args, cst.Arg(
            cst.Integer(str(warps)), keyword=cst.Name("num_warps"), equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))])


def launch_dispatch(facts: ModuleFacts, fn: JitFunction, ctx: RuleContext) -> Dispatch | None:
    """The launcher's dispatch for a kernel whose Gluon form runs only some launches (`RuleContext.launch_checked`):
    those that set a constexpr flag (`RuleContext.launch_flag`), with aligned tensors; the others run the source
    kernel."""
    if not ctx.launch_checked:
        return None
    param = next((p for p in fn.params if p.name == ctx.launch_flag), None)
    if ctx.launch_flag is not None and param is None:
        return None
    return Dispatch(fn.name, tuple(p.name for p in fn.params), (), helpers=jit_callees(facts, fn.name),
                    when=(param.name, param.default or "None") if param is not None else None, aligned=True,
                    divisible=ctx.launch_divisible, unit=ctx.launch_unit, at_least=ctx.launch_at_least,
                    unflagged_at_least=ctx.launch_unflagged_at_least if param is not None else (),
                    small=ctx.launch_small, warps=ctx.launch_warps if not fn.autotune_configs else None,
                    no_agprs=ctx.launch_no_agprs, slow_dtypes=ctx.launch_slow_dtypes, lds=ctx.launch_lds,
                    source_when=ctx.launch_source_when, amd=ctx.target.backend == "hip",
                    grid_at_least=ctx.launch_grid_at_least,
                    retile=ctx.launch_retile, one_wave=ctx.launch_one_wave)


def alignment_dispatch(facts: ModuleFacts, fn: JitFunction, narrow: bool) -> Dispatch:
    """A kernel without a pipelined loop runs as Gluon on launches with 16-byte aligned rows and (unless `narrow`)
    elements of 4 bytes or more, as its source elsewhere (`transpile.analysis.launch_alignment`)."""
    return Dispatch(fn.name, tuple(p.name for p in fn.params), (), helpers=jit_callees(facts, fn.name), aligned=True,
                    divisible=launch_facts(facts, fn)[1], reason=ALIGNMENT_REASON, narrow=narrow)


def launch_facts(facts: ModuleFacts, fn: JitFunction) -> tuple[cst.Call | None, tuple[str, ...]]:
    """`fn`'s transposed access, if any, and the parameters its addresses read: the same for every target, found once
    per file (`ModuleFacts.memo`)."""
    key = ("launch_alignment", fn.name)
    if key not in facts.memo:
        facts.memo[key] = (column_major_access(facts, fn), address_params(facts, fn))
    return facts.memo[key]


def helper_copies(originals: dict[str, cst.FunctionDef], helpers: list[str], copied: dict[str, str], user: str,
                   taken: set[str]) -> list[cst.BaseStatement]:
    """Triton copies (`_<helper>_triton`) of the translated `helpers` (the functions the Triton function `user` calls,
    directly or not) that are not emitted yet (`copied` names every copy emitted, across the module), each calling the
    others' copies. Their names are distinct from each other, from `taken` and from the file's functions (`fin` and
    `_fin` would both give `_fin_triton`)."""
    used = {*originals, *taken, *copied.values()}
    new = [h for h in helpers if h not in copied]
    for helper in new:
        renamed = f"_{helper.lstrip('_')}_triton"
        while renamed in used:
            renamed = f"_{renamed}"
        copied[helper] = renamed
        used.add(renamed)
    renames = {h: copied[h] for h in helpers}
    blank = cst.EmptyLine(indent=False)
    return [calls_renamed(originals[h], renames).with_changes(name=cst.Name(copied[h]), leading_lines=[
        blank, blank, *[cst.EmptyLine(indent=False, comment=cst.Comment(c)) for c in textwrap.wrap(
            f"triton-transpile: the source helper `{h}`, for `{user}` (Triton code cannot call the Gluon one).",
            width=116, initial_indent="# ", subsequent_indent="# ")]]) for h in new]


def dispatch_statements(target: Target, originals: dict[str, cst.FunctionDef], name: str, dispatch: Dispatch,
                        persistent_grid: str | None,
               copied: dict[str, str] | None = None, host: HostDescriptors | None = None,
               made: tuple[MadeDescriptor, ...] = ()) -> list[cst.BaseStatement]:
    """After a kernel translated from its TMA-descriptor form, or one whose Gluon form runs only the launches that
    set a flag (`Dispatch.when`) or have aligned tensors (`Dispatch.aligned`): the source kernel, unchanged but for
    its name (and those of the jit helpers it calls, copied too, since the variant's own are Gluon), and the launcher
    (`_TMAOrTriton`) that the kernel's name then stands for."""
    copy = f"_{name}_triton"
    # Triton copies of the helpers it calls (those a kept function or another launcher's source kernel already has
    # copies of are not emitted again)
    copied = {} if copied is None else copied
    helpers = helper_copies(originals, list(dispatch.helpers), copied, copy, {copy})
    statement = calls_renamed(originals[name], {h: copied[h] for h in dispatch.helpers})
    # (its per-column scale read once per tile where the groups hold whole tiles, as a kernel kept as Triton reads
    # it: `transpile.passes.tile_scales`)
    scaled = tile_scale_loops(statement)
    statement = tile_scaled(statement, scaled, target.tile_scale_min_warps) if scaled else statement
    if dispatch.tiles:
        why = (f"its TMA descriptors need 16-bit operands{' (or 8-bit floats, read K-major)' if any(t.fp8 for t in dispatch.tiles) else ''}, "
               "a unit inner stride and 16-byte aligned addresses and row strides")
        checks = "each launch's tensors and strides"
    else:
        unflagged = " and ".join(f"`{n}` is at least {v}" for n, v in dispatch.unflagged_at_least)
        tests = [test for test, _ in dispatch.source_when] if dispatch.source_when and not dispatch.amd else []
        warpgroup = WARPGROUP_TEST[0] in tests  # (fewer warps than a wgmma's warpgroup: `rules.base.WARPGROUP_TEST`)
        slower = [test for test in tests if test != WARPGROUP_TEST[0]]
        why = (dispatch.reason.split(" and, on aligned rows,")[0] if dispatch.narrow else dispatch.reason) or " and ".join([*([f"it is faster than this kernel only where `{dispatch.when[0]}` is set"
                               + (f" or {unflagged}" if unflagged else "")]
                              if dispatch.when else []),
                            *([f"its wgmma needs `{n}` of at least {v} rows" if dispatch.one_wave else
                               f"it is faster than this kernel only where `{n}` is at least {v}"
                               for n, v in dispatch.at_least]),
                            *([f"it is faster than this kernel only where the grid has at least "
                               f"{dispatch.grid_at_least[1]} programs along axis {dispatch.grid_at_least[0]}"]
                              if dispatch.grid_at_least is not None else []),
                            *(["it is faster than this kernel only where its grid fits in one wave (at most one "
                               "program per SM)"] if dispatch.one_wave else []),
                            *([f"it is slower where `{'` or `'.join(slower)}`"] if slower else []),
                            *(["its wgmma needs a warpgroup of 4 warps (`num_warps < 4`)"] if warpgroup else []),
                            *(["its copies move 16 bytes: they need tensors with 16-byte aligned rows"]
                              if dispatch.aligned else [])])
        checks = (f"its tensors' alignment{'' if dispatch.narrow else ' and element size'} and that of the arguments "
                  "its addresses read") if dispatch.reason else \
            " and ".join([*([f"each launch's `{dispatch.when[0]}`"] if dispatch.when else []),
                               *([f"`{n}`" for n, _ in dispatch.at_least]),
                               *(["its grid"] if dispatch.grid_at_least is not None or dispatch.one_wave else []),
                               *([f"`{'`, `'.join(sorted({n for _, names in dispatch.source_when for n, _ in names}))}`"]
                                 if dispatch.source_when and not dispatch.amd else []),
                               *(["its tensors' alignment"] if dispatch.aligned else [])])
    unchanged = ("unchanged but for its per-column scale, read once per tile where the groups hold whole tiles "
                 "(`TILE_SCALED`)") if scaled else "unchanged"
    comments = textwrap.wrap(
        f"triton-transpile: the source kernel, {unchanged}, for the launches `{name}` above does not take: {why}. "
        f"`{name}` is bound below to a launcher that checks {checks} and runs one or the "
        "other (same arguments, same grid).", width=116, initial_indent="# ", subsequent_indent="# ")
    blank = cst.EmptyLine(indent=False)
    fallback = statement.with_changes(name=cst.Name(copy), leading_lines=[
        blank, blank, *[cst.EmptyLine(indent=False, comment=cst.Comment(c)) for c in comments]])

    def value(x: str | None) -> str:
        return "None" if x is None else x if x.isdigit() else f'"{x}"'

    def operand(tile: Tile) -> str:  # (an operand 16-bit, or "fp8": 8-bit floats too; False: the store)
        return '"fp8"' if tile.fp8 else str(tile.load)

    tiles = ", ".join(f"({value(t.param)}, {value(t.row_stride)}, {value(t.unit_stride)}, "
                      f"({''.join(value(o) + ', ' for o in t.offsets)}), {operand(t)})" for t in dispatch.tiles)
    # (a kernel taking host descriptors: the launcher takes the source's arguments, and the descriptors' parts that
    # its checks read by the Gluon kernel's names, `_launch_values`)
    params = "".join(f'"{p}", ' for p in (host.params if host is not None else dispatch.params))
    persistent = f"lambda meta: {persistent_grid}" if persistent_grid else "None"
    when = f', when=("{dispatch.when[0]}", {dispatch.when[1]})' if dispatch.when else ""
    when += ", aligned=True" if dispatch.aligned else ""
    for key, names in (("divisible", dispatch.divisible), ("unit", dispatch.unit)):
        when += f", {key}=({''.join(value(n) + ', ' for n in names)})" if names else ""
    if dispatch.at_least:
        when += f", at_least=({''.join(f'({value(n)}, {v}), ' for n, v in dispatch.at_least)})"
    if dispatch.unflagged_at_least:
        when += f", unflagged_at_least=({''.join(f'({value(n)}, {v}), ' for n, v in dispatch.unflagged_at_least)})"
    if dispatch.grid_at_least is not None:
        when += f", grid_at_least={dispatch.grid_at_least}"
    if dispatch.retile is not None:
        when += f", retile=({value(dispatch.retile[0])}, {dispatch.retile[1]}, {dispatch.retile[2]})"

    descriptors = f", descriptors=_DescriptorParts(({descriptor_tuples(host)}))" if host is not None else ""
    when += descriptors
    if made:  # (descriptors the launcher makes on the host: `transpile.rules.host_made`)
        when += f", made={_host_made(made)}"
    amd = ""
    amd += f", warps={dispatch.warps}" if dispatch.warps is not None else ""
    amd += ", small=True" if dispatch.small else ""
    amd += ", no_agprs=True" if dispatch.no_agprs else ""
    amd += f", slow_dtypes=({''.join(repr(t) + ', ' for t in dispatch.slow_dtypes)})" if dispatch.slow_dtypes else ""
    if dispatch.source_when:
        # (the launcher passes a test its names by keyword: those with a default after the others, as Python wants)
        tests = ", ".join(
            f"lambda {', '.join(n if d is None else f'{n}={d}' for n, d in _defaults_last(names))}: {test}"
            for test, names in dispatch.source_when)
        if dispatch.amd:  # (the AMD launcher's own arguments, then these)
            amd += f", source_when=({tests},)"
        else:
            when += f", source_when=({tests},)"
    if dispatch.lds is not None:  # (no trailing commas: the formatter keeps the tuples on few lines)
        least = f", {dispatch.lds[2]}" if len(dispatch.lds) > 2 else ""  # (the fewest slots, where not two)
        amd += f", lds=({dispatch.lds[0]}, {tuple(dispatch.lds[1])!r}{least})"
    if dispatch.reason == ALIGNMENT_REASON:
        divisible = "".join(value(n) + ", " for n in dispatch.divisible)
        launcher = cst.parse_statement(f"{name} = _AlignedOrTriton({name}, {copy}, params=({params})"
                                       f"{f', divisible=({divisible})' if divisible else ''}{descriptors}"
                                       f"{', narrow=True' if dispatch.narrow else ''})\n")
    else:
        launcher = cst.parse_statement(
            f"{name} = {'_WarpPipelinedOrTriton' if amd else '_OneWaveOrTriton' if dispatch.one_wave else '_TMAOrTriton'}"
            f"({name}, {copy}, params=({params}), "
            f"tiles=({tiles}{',' if tiles else ''}), persistent={persistent}{when}{amd})\n")
    return [*helpers, fallback, launcher.with_changes(leading_lines=[blank, blank])]


def made_on_host(name: str, params: list[str], made: tuple[MadeDescriptor, ...]) -> cst.BaseStatement:
    """`name = _MadeOnHost(name, params=(...), made=_HostMade((...)))`: the launcher of a kernel that has no other,
    making the descriptors `made` on the host (`transpile.rules.host_made`)."""
    blank = cst.EmptyLine(indent=False)
    comment = textwrap.wrap(
        f"triton-transpile: `{name}` makes its TMA descriptors in the kernel unless it is passed them; while a CUDA "
        "graph is captured, the launcher makes them on the host where the launch's arguments give their parts.",
        width=116, initial_indent="# ", subsequent_indent="# ")
    names = "".join(f'"{p}", ' for p in params)
    statement = cst.parse_statement(f"{name} = _MadeOnHost({name}, params=({names}), made={_host_made(made)})\n")
    return statement.with_changes(leading_lines=[blank, blank, *[cst.EmptyLine(indent=False, comment=cst.Comment(c))
                                                                  for c in comment]])


def _host_made(made: tuple[MadeDescriptor, ...]) -> str:
    """`_HostMade(((name, base, lambda <parameters>: ([shape], [strides], [block shape])), ...))`: the launchers'
    argument that makes the descriptors `made` on the host."""
    tuples = []
    for d in made:
        parts = ", ".join(f"[{', '.join(p)}]" for p in (d.shape, d.strides, d.block))
        tuples.append(f'("{d.name}", "{d.base}", lambda {", ".join(d.reads())}: ({parts})), ')
    return f"_HostMade(({''.join(tuples)}))"


def _defaults_last(names: tuple[tuple[str, str | None], ...]) -> list[tuple[str, str | None]]:
    """A launcher test's (name, default) pairs, those with a default after the others (a lambda's parameters)."""
    return sorted(names, key=lambda pair: pair[1] is not None)


# Triton's own wrappers applied by a call (`triton.autotune(configs=..., key=...)(k)`, under a module-level flag in
# aiter): they call the kernel's `run`, which the launchers implement as their launch.
_TRITON_WRAPPERS = re.compile(r"^(triton\.)?(autotune|heuristics)$")


def passed_as_value(facts: ModuleFacts, name: str) -> cst.Name | None:
    """The first place in the module that hands the kernel `name` to a call: `wrap_triton(name)`,
    `capture_triton(name)`, any function that may want Triton's own kernel object rather than a launcher. None where
    there is none (launches, attributes, tables of kernels and Triton's own `autotune`/`heuristics` applied by a call
    all take the launchers). One walk of the module per file."""
    key = ("names_passed_to_calls",)
    if key not in facts.memo:
        passed: dict[str, cst.Name] = {}
        parents = facts.source.parents
        for node in cst_walk.preorder(facts.source.module):
            if type(node) is cst.Name and isinstance(parents.get(node), cst.Arg):
                call = parents.get(parents[node])
                if isinstance(call, cst.Call) and isinstance(call.func, cst.Call) and _TRITON_WRAPPERS.search(
                        facts.source.code(call.func.func)):
                    continue  # `triton.autotune(...)(k)`: the launchers take Triton's wrappers (`run`)
                passed.setdefault(node.value, node)
        facts.memo[key] = passed
    return facts.memo[key].get(name)


def use_text(source: SourceFile, node: cst.CSTNode) -> str:
    """The call or statement around a use of a name, as written (for a reason: up to 60 characters)."""
    parents = source.parents
    around = node
    while around in parents and not isinstance(around, (cst.Call, cst.SimpleStatementLine)):
        around = parents[around]
    text = " ".join(source.code(around).split())
    return text if len(text) <= 60 else text[:57] + "..."


def binds_triton(module: cst.Module) -> bool:
    """The module says `import triton` at its top level."""
    return any(isinstance(small, cst.Import) and any(a.asname is None and a.name.value == "triton" for a in small.names)
               for statement in module.body if isinstance(statement, cst.SimpleStatementLine)
               for small in statement.body)


def kmajor_bound(statement: cst.FunctionDef, launch: KMajorLaunch,
                  renames: dict[str, str]) -> list[cst.BaseStatement]:
    """After a kernel kept as Triton whose B a K-major copy speeds up (`KernelOutcome.kmajor`): the kernel's copy that
    reads B's columns through a stride parameter, where it writes none, and the launcher its name is bound to."""
    blank = cst.EmptyLine(indent=False)
    name, out = launch.kernel, []
    target = name
    if launch.added is not None:
        target = f"_{name}_kmajor"
        copy = calls_renamed(kmajor_kernel(statement, launch, target), renames)
        comments = textwrap.wrap(
            f"triton-transpile: `{name}` as written but for `{launch.operand}`'s columns, read `{launch.added}` "
            "elements apart (the launcher below passes a K-major copy of B, its columns that far apart).",
            width=116, initial_indent="# ", subsequent_indent="# ")
        out.append(copy.with_changes(leading_lines=[blank, blank, *[
            cst.EmptyLine(indent=False, comment=cst.Comment(c)) for c in comments]]))
    n_stride = launch.n_stride or launch.added
    rows = f" (`{launch.rows}`)" if launch.rows else ""
    comments = textwrap.wrap(
        f"triton-transpile: Hopper's wgmma reads 8-bit and tf32 operands K-major only. Launches whose "
        f"`{launch.operand}` is a 2-D tensor of such elements with contiguous rows (N-contiguous), at least "
        f"{LEAST_ELEMENTS} of them{', a whole allocation' if launch.whole else ''}, with at least {LEAST_ROWS} rows "
        f"of A{rows} and {LEAST_OUTPUTS} outputs, and A's rows 16-byte aligned, run `{target}` on a K-major copy of "
        f"it made per launch, `{launch.k_stride}` and `{n_stride}` exchanged; the others run the kernel as given "
        "(smaller GEMMs ran slower with the copy).",
        width=116, initial_indent="# ", subsequent_indent="# ")
    def quoted(x: str) -> str:
        return x if x.isdigit() else f'"{x}"'

    def names(xs: tuple[str, ...]) -> str:
        return "(" + "".join(f"{quoted(x)}, " for x in xs) + ")"

    parts = [name, target, f"params={names(launch.params)}", f"operand={quoted(launch.operand)}",
             f"k_stride={quoted(launch.k_stride)}",
             f"n_stride={quoted(launch.n_stride)}" if launch.n_stride else f"added={quoted(launch.added or '')}"]
    parts += [f"extents={names(launch.extents)}"] if launch.extents else []
    parts += [f"rows={quoted(launch.rows)}"] if launch.rows else []
    parts += ["whole=True"] if launch.whole else []
    parts += [f"least_rows={LEAST_ROWS}", f"least=1 << {LEAST_ELEMENTS.bit_length() - 1}",
              f"least_outputs=1 << {LEAST_OUTPUTS.bit_length() - 1}"]
    parts += [f"unit={names(launch.unit)}"] if launch.unit else []
    parts += ["aligned=(" + "".join(f"({quoted(p)}, {quoted(r)}), " for p, r in launch.aligned) + ")"]
    parts += [] if launch.tf32 else ["tf32=False"]
    text = f"{name} = _KMajorCopy({', '.join(parts)})\n"
    out.append(cst.parse_statement(text).with_changes(leading_lines=[blank, blank, *[
        cst.EmptyLine(indent=False, comment=cst.Comment(c)) for c in comments]]))
    return out


def calls_renamed(function: cst.FunctionDef, renames: dict[str, str]) -> cst.FunctionDef:
    """`function` with the names in `renames` replaced where it reads them (calls of the helpers it copies)."""
    if not renames:
        return function

    class Rename(cst.CSTTransformer):
        def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
            return updated.with_changes(value=renames[updated.value]) if updated.value in renames else updated

    body = function.body.visit(Rename())
    return function.with_changes(body=body)
