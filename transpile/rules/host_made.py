"""TMA descriptors the launcher makes on the host, in place of the kernel making them on the device.

A Gluon kernel that reads its pointer tiles through TMA makes each descriptor in the kernel
(``tma.make_tensor_descriptor``): every program writes it to a global scratch buffer and fences it before its first
copy. The host can make the same descriptor whenever every part of it is a launch argument: the base a pointer
parameter, the shape, strides and block shape expressions of parameters. Measured on an H100 (Triton 3.6), the
block-scaled fp8 GEMM's kernel then ran 8% faster (206 -> 190 us at 4096^3, CUDA-graph replays), a 16-row decode GEMM's
as fast; but each launch pays for the descriptor objects and Triton's encoding of them, 25-60 us of host time, which
made eager launches of the decode GEMM 0.61x. So the launcher makes them only while a CUDA graph is captured (what
serving engines run their decode steps as), which pays that host time once. Matches, at the top level of a kernel
(not in a loop or a branch)::

    x_desc = tma.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[stride_xm, 1], block_shape=[BLOCK_M, BLOCK_K],
                                        layout=gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_K],
                                                                                    x_ptr.dtype.element_ty))

Emits the descriptor as a parameter of the kernel (``x_desc=None``, after the source's) and the statement under
``if x_desc is None:``, which Triton decides at compile time: a launch that passes a descriptor compiles a kernel
without the device-side one, a launch that passes none (eager launches; an autotuned kernel's where the autotuner
runs outside a capture) compiles the kernel as before. The launcher (`_HostMade` in `transpile/helpers/launchers.py`)
makes the descriptor from the launch's values with the same parts and layout, so the kernel reads the same tiles
either way.

Not matched (the descriptor stays in the kernel): a base that is not a parameter (an address offset per program, as
attention kernels' per-head bases are), a part that reads a local value or a parameter the kernel reassigns, a layout
other than the default one for the block, a last stride other than 1, a name assigned twice.
"""

from __future__ import annotations

from typing import NamedTuple

import libcst as cst
from libcst.helpers import get_full_name_for_node

from transpile.cst_utils import assigned_names, names_in
from transpile.cst_walk import semantic_preorder


class MadeDescriptor(NamedTuple):
    """A descriptor the launcher makes: the kernel's name for it (its parameter), the pointer parameter it
    addresses, and its shape, strides and block shape as source text over the kernel's parameters."""

    name: str
    base: str
    shape: tuple[str, ...]
    strides: tuple[str, ...]
    block: tuple[str, ...]

    def reads(self) -> list[str]:
        """The parameters its parts read, in the order they first appear."""
        seen: list[str] = []
        for part in (*self.shape, *self.strides, *self.block):
            for name in _names_in_order(cst.parse_expression(part)):
                if name not in seen:
                    seen.append(name)
        return seen


def _names_in_order(node: cst.CSTNode) -> list[str]:
    return [n.value for n in semantic_preorder(node) if isinstance(n, cst.Name)]


def _arithmetic(node: cst.BaseExpression, fixed: set[str]) -> bool:
    """Whether `node` is parameters of `fixed` and integers, added, subtracted, multiplied or floor-divided (the
    same value in Python, on the host, as in the kernel, for the non-negative sizes and strides a descriptor has)."""
    if isinstance(node, cst.Name):
        return node.value in fixed
    if isinstance(node, cst.Integer):
        return True
    if isinstance(node, cst.BinaryOperation):
        return (isinstance(node.operator, (cst.Add, cst.Subtract, cst.Multiply, cst.FloorDivide))
                and _arithmetic(node.left, fixed) and _arithmetic(node.right, fixed))
    return False


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node).strip()


def _list(node: cst.BaseExpression | None) -> list[cst.BaseExpression] | None:
    if not isinstance(node, (cst.List, cst.Tuple)) or any(isinstance(e, cst.StarredElement) for e in node.elements):
        return None
    return [e.value for e in node.elements]


def _made(line: cst.BaseStatement, params: set[str], fixed: set[str]) -> MadeDescriptor | None:
    """The descriptor `line` makes, if the host can make it (see the module's docstring)."""
    if not (isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 and isinstance(line.body[0], cst.Assign)):
        return None
    assign = line.body[0]
    if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
        return None
    call = assign.value
    if not (isinstance(call, cst.Call) and get_full_name_for_node(call.func) == "tma.make_tensor_descriptor"):
        return None
    positional = [a for a in call.args if a.keyword is None]
    keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    if len(positional) != 1 or set(keywords) != {"shape", "strides", "block_shape", "layout"}:
        return None
    base = positional[0].value
    if not (isinstance(base, cst.Name) and base.value in fixed):
        return None
    shape, strides, block = (_list(keywords[k]) for k in ("shape", "strides", "block_shape"))
    if shape is None or strides is None or block is None or not (len(shape) == len(strides) == len(block) >= 1):
        return None
    if not (isinstance(strides[-1], cst.Integer) and strides[-1].value == "1"):
        return None
    if not all(_arithmetic(part, fixed) for part in (*shape, *strides, *block)):
        return None
    # the layout the launcher makes too: the default NVMMA layout of the block for the base's element type
    layout = keywords["layout"]
    if not (isinstance(layout, cst.Call) and get_full_name_for_node(layout.func) == "gl.NVMMASharedLayout.get_default_for"
            and len(layout.args) == 2 and all(a.keyword is None for a in layout.args)):
        return None
    layout_block = _list(layout.args[0].value)
    if layout_block is None or [_code(b) for b in layout_block] != [_code(b) for b in block]:
        return None
    if _code(layout.args[1].value) != f"{base.value}.dtype.element_ty":
        return None
    name = assign.targets[0].target.value
    if name in params:
        return None
    return MadeDescriptor(name, base.value, tuple(_code(p) for p in shape), tuple(_code(p) for p in strides),
                          tuple(_code(p) for p in block))


#: over the first descriptor the launcher may make
_NOTE = ("# While a CUDA graph is captured, the launcher makes these descriptors on the host where the launch's",
         "# arguments give their parts (`_HostMade`): a kernel passed them does not make them here.")


def _guarded(line: cst.SimpleStatementLine, name: str, first: bool) -> cst.If:
    """`line` under `if <name> is None:`, its comments kept above the `if` (and, `first`, the note)."""
    note = [cst.EmptyLine(comment=cst.Comment(c)) for c in _NOTE] if first else []
    return cst.If(
        test=cst.parse_expression(f"{name} is None"),
        body=cst.IndentedBlock([line.with_changes(leading_lines=[])]),
        leading_lines=[*line.leading_lines, *note])


def host_made(function: cst.FunctionDef) -> tuple[cst.FunctionDef, tuple[MadeDescriptor, ...]]:
    """`function` (a Gluon kernel) with the descriptors its launcher can make taken as parameters, and those
    descriptors; `function` itself and () where there are none."""
    params = {p.name.value for p in (*function.params.params, *function.params.kwonly_params,
                                     *function.params.posonly_params)}
    if function.params.star_kwarg is not None or not isinstance(function.body, cst.IndentedBlock):
        return function, ()
    assigned: dict[str, int] = {}
    for statement in function.body.body:
        for name in assigned_names(statement):
            assigned[name] = assigned.get(name, 0) + 1
    # (parameters the kernel never reassigns: their values are the launch's)
    fixed = {p for p in params if p not in assigned}
    body = list(function.body.body)
    made: list[MadeDescriptor] = []
    for i, statement in enumerate(body):
        descriptor = _made(statement, params, fixed)
        if descriptor is None or assigned.get(descriptor.name) != 1 or _read_before(body[:i], descriptor.name):
            continue
        made.append(descriptor)
        body[i] = _guarded(statement, descriptor.name, len(made) == 1)  # type: ignore[arg-type]
    if not made:
        return function, ()
    added = [cst.Param(cst.Name(d.name), default=cst.Name("None"),
                       equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                             whitespace_after=cst.SimpleWhitespace("")))
             for d in made]
    params_node = function.params
    if params_node.kwonly_params:
        params_node = params_node.with_changes(kwonly_params=[*params_node.kwonly_params, *added])
    else:
        params_node = params_node.with_changes(params=[*params_node.params, *added])
    return function.with_changes(params=params_node, body=function.body.with_changes(body=body)), tuple(made)


def _read_before(statements: list[cst.BaseStatement], name: str) -> bool:
    return any(name in names_in(s) for s in statements)
