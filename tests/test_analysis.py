"""Layout-plan facts on small kernels: classes, slices, MMA anchors, conversions, and refusals with their lines.

`transpile.analysis.layouts.analyse_layouts(discover(parse_source(text, "x.py")))` gives one `LayoutPlan` per jit
function; these tests read its facts through the source positions of the nodes they are keyed by.
"""

from __future__ import annotations

import re

import libcst as cst

from transpile.analysis.layouts import LayoutPlan, analyse_layouts
from transpile.discover import discover
from transpile.engine import translate_source
from transpile.source import SourceFile, parse_source
from transpile.targets import get_target

HEAD = "import triton\nimport triton.language as tl\n\n\n"

MATMUL = HEAD + '''@triton.jit
def mm(a_ptr, b_ptr, c_ptr, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * BLOCK_N + offs_n[None, :]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * BLOCK_N
    c = acc.to(tl.float16)
    tl.store(c_ptr + offs_m[:, None] * BLOCK_N + offs_n[None, :], c)
'''

ROWS = HEAD + '''@triton.jit
def rows(x_ptr, out_ptr, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    r = tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + r[:, None] * N + c[None, :])
    m = tl.max(x, axis=1)
    total = tl.zeros([BLOCK_M], dtype=tl.float32) + m
    tl.store(out_ptr + r, total)
    tl.store(out_ptr + c, tl.sum(x, axis=1))
'''

BROADCAST = HEAD + '''@triton.jit
def bad_broadcast(x_ptr, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    r = tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + r[:, None] * N + c[None, :])
    y = x + c
    tl.store(x_ptr + r[:, None] * N + c[None, :], y)
'''

SORT = HEAD + '''@triton.jit
def scale(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 2)


@triton.jit
def gate(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(x_ptr + offs, tl.sort(x))
'''

DESCRIPTOR_HELPER = HEAD + '''@triton.jit
def load_tile(desc, off):
    return desc.load([off, 0])


@triton.jit
def copy(a_ptr, c_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    desc = tl.make_tensor_descriptor(a_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    x = load_tile(desc, 0)
    r = tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_N)
    tl.store(c_ptr + r[:, None] * N + c[None, :], x)
'''

TENSOR_HELPER = HEAD + '''@triton.jit
def row_sum(x):
    return tl.sum(x, axis=1)


@triton.jit
def k(x_ptr, out_ptr, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    r = tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + r[:, None] * N + c[None, :])
    tl.store(out_ptr + r, row_sum(x))
    tl.store(out_ptr + r, row_sum(r))
'''

BIAS_HELPER = HEAD + '''@triton.jit
def add_bias(x, b_ptr, BLOCK_N: tl.constexpr):
    c = tl.arange(0, BLOCK_N)
    return x + tl.load(b_ptr + c)[None, :]


@triton.jit
def k(x_ptr, b_ptr, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    r = tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + r[:, None] * N + c[None, :])
    tl.store(x_ptr + r[:, None] * N + c[None, :], add_bias(x, b_ptr, BLOCK_N))
'''


def analyse(text: str) -> tuple[SourceFile, dict[str, LayoutPlan]]:
    source = parse_source(text, "x.py")
    return source, analyse_layouts(discover(source))


def creations(source: SourceFile, plan: LayoutPlan) -> dict[str, str]:
    """Creation call text -> its layout expression."""
    return {source.code(node).strip(): plan.layout_expr(term) for node, term in plan.creations.items()}


def converts(source: SourceFile, plan: LayoutPlan) -> list[tuple[str, int, int, str]]:
    """(converted expression, line, column, target layout), in source order."""
    return sorted((source.code(node).strip(), *source.position(node), plan.layout_expr(term))
                  for node, term in plan.converts.items())


def refusals(source: SourceFile, plan: LayoutPlan) -> list[tuple[str, int, int]]:
    return [(r.code, *source.position(r.node)) for r in plan.refusals]


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# --------------------------------------------------------------------------------------------------------------------
# Matmul: the accumulator's class, the k-offsets used both ways


def test_matmul_offs_k_used_both_ways_and_the_stored_tile_get_one_conversion_each() -> None:
    source, plans = analyse(MATMUL)
    plan = plans["mm"]
    line = line_of(MATMUL, "b_ptrs = b_ptr + offs_k[:, None]")
    store = line_of(MATMUL, "tl.store(c_ptr")
    # `offs_k[None, :]` (line before) fixes offs_k in SliceLayout(0, ...); the `[:, None]` use needs SliceLayout(1,
    # ...): one conversion, at that use. The MMA result leaves through pointers of their own (coalesced) layout: one
    # conversion of the stored tile. None anywhere else.
    assert converts(source, plan) == [("c", store, 67, "a_ptrs_layout"),
                                      ("offs_k", line, 22, "gl.SliceLayout(1, a_ptrs_layout)")]
    assert refusals(source, plan) == []


def test_matmul_accumulator_class_is_mma() -> None:
    source, plans = analyse(MATMUL)
    plan = plans["mm"]
    (site,) = plan.dots.values()
    assert plan.is_mma(site.result)
    assert site.shape == ["BLOCK_M", "BLOCK_N"]
    assert site.operand_dtype == "a_ptr.dtype.element_ty"
    zeros = next(node for node in plan.creations if "zeros" in source.code(node))
    assert plan.is_mma(plan.creations[zeros])
    assert plan.creations[zeros].find() is site.result.find()  # `acc += tl.dot(...)`: one class
    assert creations(source, plan)["tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)"] == "mma_layout"
    declared = [(name, kind) for name, kind, _ in plan.declarations]
    assert declared == [("a_ptrs_layout", "blocked"), ("mma_layout", "mma")]


def test_matmul_index_vectors_are_slices_of_the_pointer_layout_not_of_the_accumulator() -> None:
    source, plans = analyse(MATMUL)
    assert creations(source, plans["mm"]) == {
        "tl.arange(0, BLOCK_M)": "gl.SliceLayout(1, a_ptrs_layout)",
        "tl.arange(0, BLOCK_N)": "gl.SliceLayout(0, a_ptrs_layout)",
        "tl.arange(0, BLOCK_K)": "gl.SliceLayout(0, a_ptrs_layout)",
        "tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)": "mma_layout",
    }


def test_matmul_translation_declares_the_mma_layout_and_converts_once() -> None:
    text = translate_source(MATMUL, "x.py", get_target("gfx942"), gluon_always=True).text
    assert "mma_layout: gl.constexpr = _mma_layout(BLOCK_M, [BLOCK_N], a_ptr.dtype.element_ty, gl.num_warps(), k=BLOCK_K)" in text
    assert "acc = gl.zeros([BLOCK_M, BLOCK_N], dtype=gl.float32, layout=mma_layout)" in text
    assert text.count("gl.convert_layout(offs_k,") == 1  # hoisted out of the use, never per iteration


# --------------------------------------------------------------------------------------------------------------------
# Reductions


def test_reduction_result_is_a_slice_of_its_input_layout() -> None:
    source, plans = analyse(ROWS)
    plan = plans["rows"]
    layouts = creations(source, plan)
    # `tl.max(x, axis=1)` is in SliceLayout(1, layout(x)); `tl.zeros([BLOCK_M]) + m` joins its class.
    assert layouts["tl.zeros([BLOCK_M], dtype=tl.float32)"] == "gl.SliceLayout(1, x_layout)"
    assert layouts["tl.arange(0, BLOCK_M)"] == "gl.SliceLayout(1, x_layout)"
    assert layouts["tl.arange(0, BLOCK_N)"] == "gl.SliceLayout(0, x_layout)"
    assert [(name, kind) for name, kind, _ in plan.declarations] == [("x_layout", "blocked")]


def test_reduction_stored_through_the_other_axis_is_converted() -> None:
    source, plans = analyse(ROWS)
    line = line_of(ROWS, "tl.store(out_ptr + c, tl.sum(x, axis=1))")
    # A row reduction (SliceLayout(1)) stored through column offsets (SliceLayout(0)): one conversion, of the value.
    assert converts(source, plans["rows"]) == [("tl.sum(x, axis=1)", line, 27, "gl.SliceLayout(0, x_layout)")]


# --------------------------------------------------------------------------------------------------------------------
# Refusals


def test_rank_mismatch_broadcast_is_expanded_like_numpy() -> None:
    # Triton broadcasts `x + c` (rank 2 with rank 1) like numpy: `c` is a row. The plan expands it (tests/
    # test_broadcast.py has the emitted code and its compiles).
    source, plans = analyse(BROADCAST)
    plan = plans["bad_broadcast"]
    assert plan.refusals == []
    assert [(source.code(n).strip(), e) for n, e in plan.expansions.items()] == [("c", (1, 1))]

    result = translate_source(BROADCAST, "x.py", get_target("gfx942"))
    (outcome,) = result.functions
    assert outcome.translated
    assert "y = x + c[None, :]" in result.text


def test_sort_keeps_the_kernel_as_triton_saying_why() -> None:
    """`tl.sort` (and `tl.topk`, a bitonic network over reshaped views, as `tl.sort` on a reshaped tile writes one
    too): the source kernel is what every target runs best (such networks measured 10-16x slower as Gluon), so the
    kernel is kept, with the reason at the call (TT041), not refused; the rest of the module translates."""
    source, plans = analyse(SORT)
    assert refusals(source, plans["gate"]) == [] and refusals(source, plans["scale"]) == []
    line = line_of(SORT, "tl.sort(x)")
    for target in ("sm90", "gfx950"):
        result = translate_source(SORT, "x.py", get_target(target))
        assert {f.name: f.translated for f in result.functions} == {"scale": True, "gate": False}
        assert not [d for d in result.diagnostics if d.code in ("TT010", "TT011", "TT012")]
        (kept,) = [d for d in result.diagnostics if d.code == "TT041"]
        assert (kept.line, kept.col) == (line, 28)
        assert kept.message.startswith(f"`gate` kept as Triton: `tl.sort` at line {line}: a bitonic network over "
                                       "reshaped views of the tile")
        text = result.text
        assert "# kept as Triton: `gate` (the comments above them say why)" in text.splitlines()[:5]
        kept_source = SORT[SORT.index("@triton.jit\ndef gate"):].rstrip()
        assert kept_source in text  # the source function, byte for byte
        assert "@gluon.jit\ndef scale(x_ptr, BLOCK: gl.constexpr):" in text
        compile(text, "gate.py", "exec")  # the variant still parses
    # a sort of a reshaped tile, stored back through the rank-1 pointers
    grouped = SORT.replace("tl.store(x_ptr + offs, tl.sort(x))",
                           "groups = tl.sort(tl.reshape(x, (2, 4, BLOCK // 8)), dim=2)\n"
                           "    tl.store(x_ptr + offs, tl.reshape(groups, (BLOCK,)))")
    result = translate_source(grouped, "x.py", get_target("gfx950"))
    assert not [d for d in result.diagnostics if d.code in ("TT010", "TT011", "TT012")], result.diagnostics
    (kept,) = [d for d in result.diagnostics if d.code == "TT041"]
    assert kept.line == line_of(grouped, "tl.sort(") and "bitonic network" in kept.message


def test_helper_called_with_a_descriptor_is_refused() -> None:
    source, plans = analyse(DESCRIPTOR_HELPER)
    helper = plans["load_tile"]
    assert [(code, line) for code, line, _ in refusals(source, helper)] == [("TT010", line_of(DESCRIPTOR_HELPER,
                                                                                                "def load_tile"))]
    assert "takes a tensor descriptor argument `desc`" in helper.refusals[0].message

    result = translate_source(DESCRIPTOR_HELPER, "x.py", get_target("gfx942"))
    outcomes = {f.name: f for f in result.functions}
    assert not outcomes["load_tile"].translated and outcomes["load_tile"].is_helper
    # Gluon cannot call Triton: its caller is kept as Triton too, naming the helper.
    assert not outcomes["copy"].translated
    assert any("calls the helper `load_tile`, which is kept as Triton" in d.message
               for d in outcomes["copy"].diagnostics)
    assert "# kept as Triton: `load_tile`, `copy` (the comments above them say why)" in result.text


def test_helper_called_with_inconsistent_kinds_is_refused() -> None:
    source, plans = analyse(TENSOR_HELPER)
    codes = [code for code, *_ in refusals(source, plans["k"])]
    assert codes == ["TT012"]
    assert refusals(source, plans["k"])[0][1] == line_of(TENSOR_HELPER, "row_sum(r)")


def test_helper_tensor_parameter_is_converted_on_entry_and_its_result_at_the_call() -> None:
    source, plans = analyse(BIAS_HELPER)
    helper = plans["add_bias"]
    # `x + tl.load(...)[None, :]` constrains the parameter `x`: the helper brings it into its own layout on entry.
    assert {name: helper.layout_expr(term) for name, term in helper.param_converts.items()} == {"x": "x_layout"}
    assert creations(source, helper) == {"tl.arange(0, BLOCK_N)": "gl.SliceLayout(0, x_layout)"}
    # The caller cannot know the layout the helper returns: the result is converted at the call.
    line = line_of(BIAS_HELPER, "add_bias(x, b_ptr, BLOCK_N))")
    assert converts(source, plans["k"]) == [("add_bias(x, b_ptr, BLOCK_N)", line, 51, "x_layout")]
    assert refusals(source, helper) == [] and refusals(source, plans["k"]) == []


ELEMENTWISE_HELPER = HEAD + '''@triton.jit
def _tanh(x):
    return 2 * tl.sigmoid(2 * x) - 1


@triton.jit
def k(x_ptr, y_ptr, N, BLOCK_N: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + offs, mask=offs < N)
    y = 30.0 * _tanh(x / 30.0)
    tl.store(y_ptr + offs, y, mask=offs < N)
'''


def test_an_elementwise_helpers_result_stays_in_its_arguments_layout() -> None:
    """A helper whose result is elementwise in a tensor parameter it leaves as given (no conversion on entry) returns
    that argument's layout (Gluon gives it at the call): the caller neither converts the result nor names a layout
    for it; a helper that converts its parameter on entry still has its result converted (the test above)."""
    source, plans = analyse(ELEMENTWISE_HELPER)
    assert plans["_tanh"].param_converts == {}
    assert converts(source, plans["k"]) == []
    text = translate_source(ELEMENTWISE_HELPER, "x.py", get_target("gfx950")).text
    assert "y = 30.0 * _tanh(x / 30.0)" in text and "convert_layout" not in text
    # (a helper whose `return`s give different parameters, by a compile-time flag: its result is still converted)
    picked = HEAD + '''@triton.jit
def pick(x, y, FLAG: tl.constexpr):
    if FLAG:
        return x
    return y


@triton.jit
def kern(a_ptr, out_ptr, N, FLAG: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs[:, None] * N + offs[None, :])
    x = tl.sum(a, axis=0)
    y = tl.sum(a, axis=1)
    r = pick(x, y, FLAG)
    tl.store(out_ptr + offs, r + x)
'''
    assert "r = gl.convert_layout(pick(x, y, FLAG), " in translate_source(picked, "x.py", get_target("gfx950")).text


def test_plan_is_keyed_by_nodes_of_the_source_tree() -> None:
    source, plans = analyse(MATMUL)
    nodes = set()

    class Collect(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            nodes.add(id(node))
            return True

    source.module.visit(Collect())
    plan = plans["mm"]
    assert all(id(node) in nodes for node in [*plan.creations, *plan.converts, *plan.dots])


COLUMNS = HEAD + '''@triton.jit
def column_max(x_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = tl.arange(0, BLOCK_M)
    best = tl.full([BLOCK_N], -float("inf"), dtype=tl.float32)
    for start in range(0, M, BLOCK_M):
        mask = ((start + rows)[:, None] < M) & (cols[None, :] < N)
        x = tl.load(x_ptr + (start + rows)[:, None] * N + cols[None, :], mask=mask, other=-float("inf"))
        best = tl.maximum(best, tl.max(x, axis=0))
    tl.store(out_ptr + cols, best, mask=cols < N)
'''

HELPER_TILE = HEAD + '''@triton.jit
def _load_tile(ptr, rows, cols, stride, mask):
    return tl.load(ptr + rows[:, None] * stride + cols[None, :], mask=mask, other=0.0)


@triton.jit
def copy(x_ptr, y_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = _load_tile(x_ptr, rows, cols, N, mask)
    tl.store(y_ptr + rows[:, None] * N + cols[None, :], x, mask=mask)
'''


def test_column_reduction_keeps_its_axis_inside_each_thread() -> None:
    """A tile reduced along axis 0 (a column reduction) gets `reduced=[0]`: the layout puts lanes and warps along
    the columns, so that each thread reduces whole columns (Triton's own choice; the default layout, warps along
    the rows, ran 0.56x on an H100). Row reductions keep the default layout."""
    for target in ("sm90", "gfx942"):
        text = translate_source(COLUMNS, "x.py", get_target(target)).text
        assert "_blocked_layout([BLOCK_M, BLOCK_N], gl.num_warps(), reduced=[0])" in text, text
        assert "reduced=" not in translate_source(ROWS, "x.py", get_target(target)).text.split("def rows")[1]


def test_helper_tile_takes_its_size_from_its_arguments() -> None:
    """`rows[:, None]` meeting `cols[None, :]` in a helper is a tile of the sizes of the vectors passed, read where
    the helper runs (`rows.shape[0]`: a constexpr, as Triton's JIT specialises a helper per call), so that its layout
    is the caller's and the arguments' conversions are no-ops; not a [1, 1] tile (a [1, 1] layout replicated the
    caller's tile and converted it back and forth: 0.46x on an H100), nor one of unknown size."""
    text = translate_source(HELPER_TILE, "x.py", get_target("sm90")).text
    helper = text.split("def _load_tile")[1].split("@gluon.jit")[0]
    assert "_blocked_layout([rows.shape[0], cols.shape[0]], gl.num_warps())" in helper, helper
    assert "[1, 1]" not in helper and "None, None]" not in helper.replace("[:, None]", "").replace("[None, :]", "")


ALIASED_HELPER = HEAD + '''@triton.jit
def _square(x):
    return x * x


act = _square


@triton.jit
def mm_act(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK, BLOCK], dtype=tl.float32)
    for k in range(4):
        a = tl.load(a_ptr + offs[:, None] * BLOCK + offs[None, :])
        b = tl.load(b_ptr + offs[:, None] * BLOCK + offs[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + offs[:, None] * BLOCK + offs[None, :], act(acc))
'''


def test_helper_called_through_a_module_level_alias_is_a_helper() -> None:
    """`act = _square; act(acc)`: the call runs the helper `_square`, so the helper is not a kernel of its own, its
    result is converted to the layout the store's pointers have, and keeping the kernel as Triton keeps it too."""
    facts = discover(parse_source(ALIASED_HELPER, "x.py"))
    assert facts.aliases == {"act": "_square"}
    assert facts.functions["_square"].called_by == {"mm_act"} and facts.functions["_square"].is_helper
    text = translate_source(ALIASED_HELPER, "x.py", get_target("gfx942"), gluon_always=True).text
    assert "gl.convert_layout(act(acc)," in text, text
    kept = translate_source(ALIASED_HELPER, "x.py", get_target("sm90")).text
    assert "@triton.jit\ndef _square" in kept and "@gluon.jit\ndef _square" not in kept, kept


CALL_FORM = HEAD + '''def _scale(x_ptr, y_ptr, n, FACTOR: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * FACTOR, mask=mask)


_scale = triton.jit(_scale)
_scale = triton.heuristics({"FACTOR": lambda args: 2.0})(_scale)


def scale(x, y):
    _scale[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
'''


def test_jit_applied_as_a_call_is_a_kernel() -> None:
    """`f = triton.jit(f)` after `def f` (unsloth's and ml-cross-entropy's style) makes `f` a kernel: it is
    translated, and the call becomes `gluon.jit(f)`; a `triton.heuristics(...)(f)` call names constexprs as the
    decorator does. Before, such a file had "no @triton.jit kernels" (TT003)."""
    facts = discover(parse_source(CALL_FORM, "x.py"))
    assert list(facts.functions) == ["_scale"] and facts.functions["_scale"].heuristics == ["FACTOR"]
    # By default such a kernel would run behind the alignment launcher, bound after `def _scale`, which the
    # `triton.jit` call would then wrap (the variant did not import; found by importing public variants): kept.
    kept = translate_source(CALL_FORM, "x.py", get_target("sm90"))
    assert not kept.functions[0].translated and "its `triton.jit` is applied by a call" in kept.functions[0].kept_reason
    compile(kept.text, "x.py", "exec")
    assert "\n_scale = triton.jit(_scale)\n" in kept.text and "_AlignedOrTriton" not in kept.text
    text = translate_source(CALL_FORM, "x.py", get_target("sm90"), gluon_always=True).text
    assert "\n_scale = gluon.jit(_scale)\n" in text and "def _scale(x_ptr, y_ptr, n, FACTOR: gl.constexpr" in text
    assert '_scale = triton.heuristics({"FACTOR": lambda args: 2.0})(_scale)' in text
    assert "gl.arange(0, BLOCK, layout=" in text


RANK_BY_BRANCH = '''import triton
import triton.language as tl


@triton.jit
def update(s_ptr, x_ptr, d_ptr, b_ptr, n, m, PER_ROW: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.arange(0, BN)
    mask = (rows[:, None] < n) & (cols[None, :] < m)
    s = tl.load(s_ptr + rows[:, None] * m + cols[None, :], mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=cols < m, other=0.0)
    if PER_ROW:
        d = tl.load(d_ptr + rows, mask=rows < n, other=0.0)
        db = b[None, :] * d[:, None]
    else:
        d = tl.load(d_ptr)
        db = b * d
    tl.store(s_ptr + rows[:, None] * m + cols[None, :], s + db, mask=mask)
'''


def test_a_name_of_another_rank_in_each_branch_is_refused_by_the_analysis() -> None:
    """`db` 2-D under `if PER_ROW:` and 1-D else (Triton compiles the branch taken): one layout per name cannot hold
    both, so the analysis refuses it, the `if` named (found in a public state-update kernel: the variant did not
    compile); the translation then gives each branch its own copy of the code after the `if`
    (`passes/branch_tails.py`, `tests/test_branch_tails.py`), where `db` of the `else` is `db_2`."""
    source, plans = analyse(RANK_BY_BRANCH)
    assert refusals(source, plans["update"]) == [("TT010", line_of(RANK_BY_BRANCH, "if PER_ROW:"), 5)]
    result = translate_source(RANK_BY_BRANCH, "x.py", get_target("gfx950"))
    assert [f.translated for f in result.functions] == [True]
    assert "db_2 = b * d_2" in result.text


SPLIT_METHOD = '''import triton
import triton.language as tl


@triton.jit
def pack(q_ptr, out_ptr, n, BLOCK: tl.constexpr):
    start = tl.program_id(0) * BLOCK
    offs = start + tl.arange(0, BLOCK)
    q = tl.load(q_ptr + offs, mask=offs < n, other=0)
    lo, hi = q.reshape((BLOCK // 2, 2)).split()
    flat = tl.reshape(lo << 4 | (hi & 0xF), (BLOCK // 2,))
    out = start // 2 + tl.arange(0, BLOCK // 2)
    tl.store(out_ptr + out, flat, mask=out < n // 2)
'''


def test_split_as_a_method_is_split() -> None:
    """`x.split()` is `tl.split(x)`: two tensors in the slice of the operand's layout, so that what is made of them
    (a reshape stored through 1-D addresses) has a layout; read as a scalar before, the store mixed two layouts (a
    public 4-bit quantisation kernel's variant did not compile)."""
    result = translate_source(SPLIT_METHOD, "x.py", get_target("sm90"))
    text = result.text
    assert re.search(r"lo, hi = gl\.convert_layout\(q\.reshape\(\(BLOCK // 2, 2\)\), \w+\)\.split\(\)\n", text)
    assert re.search(r"flat = gl\.convert_layout\(gl\.reshape\(lo << 4 \| \(hi & 0xF\), \(BLOCK // 2,\)\), \w+\)",
                     text)


INLINE_ASM_PAIR = '''import triton
import triton.language as tl


@triton.jit
def _halves(x):
    return tl.inline_asm_elementwise("mov.b32 {$0, $1}, $2;", "=h,=h,r", args=[x], dtype=(tl.float16, tl.float16),
                                     is_pure=True, pack=1)


@triton.jit
def unpack(w_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    lo, hi = _halves(tl.load(w_ptr + offs, mask=offs < n, other=0))
    tl.store(out_ptr + offs, lo + hi, mask=offs < n)
'''


def test_inline_asm_with_several_results_is_a_tuple() -> None:
    """`tl.inline_asm_elementwise(..., dtype=(f16, f16))` returns two tensors in the arguments' layout: nothing
    converts the tuple (a layout conversion of it did not compile)."""
    text = translate_source(INLINE_ASM_PAIR, "x.py", get_target("sm90")).text
    kernel = text[text.index("def unpack("):]
    assert "    lo, hi = _halves(gl.load(" in kernel and "gl.convert_layout(_halves(" not in kernel


def test_a_dot_keyword_tl_dot_does_not_take_is_refused() -> None:
    """`tl.dot(q, k, trans_b=True)` (Triton 1.x): translated without it, the variant computed Q K for Q K^T (square
    tiles compiled and gave wrong results): the kernel is kept, the keyword named."""
    text = '''import triton
import triton.language as tl


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, B: tl.constexpr):
    offs = tl.arange(0, B)
    a = tl.load(a_ptr + offs[:, None] * B + offs[None, :])
    b = tl.load(b_ptr + offs[:, None] * B + offs[None, :])
    tl.store(c_ptr + offs[:, None] * B + offs[None, :], tl.dot(a, b, trans_b=True))
'''
    source, plans = analyse(text)
    assert refusals(source, plans["mm"]) == [("TT010", line_of(text, "trans_b"), 70)]
    result = translate_source(text, "x.py", get_target("gfx942"))
    assert [f.translated for f in result.functions] == [False]
    # (Triton's own compiler rejects it too: the kernel counts as a source that is not Triton's)
    assert "`trans_b=` is not an argument of `tl.dot`, which Triton's compiler rejects too" in result.text
