"""sm90: the warp-specialised flash-attention forward (FA3's schedule) for an attention kernel's 4-warp configs.

Matches: a kernel whose one attention loop the cp.async attention ring pipelines (`hopper_attention`, with a score
mask it leaves out on most tiles), autotuned over its (rows, keys) tile, where:
- the loop is a statement of the kernel's body, and the kernel has no ``return`` and no barrier;
- the rows of the kernel's tiles are one ``tl.arange(0, BLOCK_M)`` (``BLOCK_M`` a constexpr parameter, the first dot's
  rows); ``BLOCK_M`` is otherwise read as a tile's shape (``tl.zeros([BLOCK_M, D])``) or in scalar arithmetic
  (``start_m * BLOCK_M``); nothing reduces, transposes or reshapes along the rows (reductions run along axis 1);
- the K and V tiles are ``base + rows[:, None] * stride + cols[None, :]`` (the inner stride the launcher makes 1),
  their rows ``start + tl.arange(0, BLOCK_N)`` moved by the loop variable, masked by ``rows < extent``: a TMA
  descriptor per (batch, head) reads them, out-of-range rows as zeros as ``other=0`` gives them;
- what the descriptors, their coordinates and the loop range read is computed before the loop by scalar statements.

Emits, in the kernel, under a compile-time test that the config has 128 rows and 4 warps (other configs keep the
ring), ``gl.warp_specialize`` of three partitions:
- a loader warp (`_<kernel>_ws_loader`, 24 registers): TMA copies of each iteration's K and V tiles into rings of
  `_fit_stages` slots, each slot waited for on its `empty` barrier (both consumers hand it back) and announced on
  its `ready` barrier (the copy's bytes);
- two consumer warpgroups (`_<kernel>_ws_consumer`, 240 registers each) that each run the kernel's own code (its
  prologue, the ring's loop, its epilogue) on 64 of the 128 rows: the row vector becomes ``C * ROWS +
  tl.arange(0, ROWS)``, tile shapes ``[ROWS, ...]``, while scalar arithmetic keeps the CTA's ``BLOCK_M`` (the loop
  range and the mask tests are the CTA's, so both consumers run the same iterations: rows of the other consumer's
  half that a causal mask would skip are masked as the source masks them). Q goes to shared memory once; per
  iteration QK^T and the previous PV are issued together, QK^T waited for with PV in flight across the softmax, and
  the two consumers take turns issuing their wgmmas (`turn` barriers), so that one's softmax overlaps the other's
  tensor-core work.
The kernel's autotune table gets a (128, 128) config with 4 warps (the autotuner then picks among the ring's configs
and this one per launch shape). A kernel launched with fixed tiles (a caller's ``BLOCK_M=128, num_warps=8``, as
LLM-serving code writes) takes the form at its own tiles: its launcher runs launches with ``BLOCK_M`` = 128 at 4 warps
(`Dispatch.retile`; the caller's 8 warps become the two consumers, plus the loader warp), the others run the ring.
A kernel that does not match keeps the ring, with a TT044 note naming why.
Targets: sm90.
"""

from __future__ import annotations

import functools
import textwrap

import libcst as cst

from transpile.analysis.attention import AttentionPlan
from transpile.analysis.layouts import REDUCTIONS, name_terms
from transpile.cst_utils import (assigned_names, bound_names, broadcast_axis, calls_in, is_docstring, names_in,
                                 product_factors, read_names, sum_terms, unparenthesized)
from transpile.cst_walk import preorder
from transpile.discover import TRITON_AUTOTUNE, decorator_target
from transpile.lowering.sm90 import TmaCopy
from transpile.rules.base import Counterexample, Example, Rule, RuleContext
from transpile.rules.hopper_attention import WSLoop, _elementwise, ring_tile
from transpile.rules.hopper_schedule import add_config
from transpile.rules.pipeline_text import code

#: The warp-specialised form's config: (rows, keys) tile, warps of the kernel (the default partition, consumer 0)
WS_TILE, WS_WARPS = (128, 128), 4
CONSUMERS, CONSUMER_REGS, LOADER_REGS = 2, 240, 24
#: Three consumers (192 rows) where the head dimension is at most 64 (FA3's d64 form; autotuned kernels only): a
#: third warpgroup's softmax hides more of the tensor cores' latency where each wgmma is short. Registers per
#: consumer thread: what three warpgroups and the loader leave of the 64K-register file.
WS3_TILE, WS3_HEAD_DIM, WS3_CONSUMER_REGS = (192, 128), 64, 160
#: Launches without the kernel's causal flag run the Gluon kernel from this head dimension on (measured: the
#: two-consumer form gains on full attention at 128, not at 64 (0.95x); the three-consumer form gains at 64, 1.10x)
WS_HEAD_DIM = 128
# Calls that read across rows or move data between them: the consumers would each see half of the rows.
ACROSS = {"trans", "permute", "reshape", "view", "split", "join", "interleave", "gather", "sort", "flip", "histogram",
          "broadcast_to", "expand_dims", "associative_scan", "cumsum", "cumprod", "debug_barrier", "atomic_add",
          "atomic_max", "atomic_min", "atomic_xchg", "atomic_cas", "atomic_and", "atomic_or", "atomic_xor"}
SHAPES = {"zeros", "full", "empty", "zeros_like", "full_like"}
DESCRIPTORS = {"make_tensor_descriptor", "make_block_ptr", "load_tensor_descriptor", "store_tensor_descriptor",
               "_experimental_descriptor_load", "_experimental_descriptor_store", "advance"}


# An autotuned causal attention kernel in the tutorial's style: one program per (query block, batch x head), K and V
# addressed per head and moved by `start_n` in the loop.
EXAMPLE = '''import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"BM": 128, "BN": 64}, num_warps=8, num_stages=3)],
    key=["seq", "D"],
)
@triton.jit
def attn(q_ptr, k_ptr, v_ptr, o_ptr, scale, s_h, s_n, seq, D: tl.constexpr, BM: tl.constexpr,
         BN: tl.constexpr):
    pid = tl.program_id(0)
    head = tl.program_id(1)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BN)
    dims = tl.arange(0, D)
    base = head * s_h
    q = tl.load(q_ptr + base + rows[:, None] * s_n + dims[None, :], mask=rows[:, None] < seq, other=0.0)
    m_i = tl.full([BM], -float("inf"), dtype=tl.float32)
    l_i = tl.zeros([BM], dtype=tl.float32)
    acc = tl.zeros([BM, D], dtype=tl.float32)
    hi = tl.minimum((pid + 1) * BM, seq)
    for start_n in range(0, hi, BN):
        keys = start_n + cols
        k = tl.load(k_ptr + base + keys[:, None] * s_n + dims[None, :], mask=keys[:, None] < seq, other=0.0)
        qk = tl.dot(q, tl.trans(k))
        qk = tl.where((rows[:, None] >= keys[None, :]) & (keys[None, :] < seq), qk * scale, -float("inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp2(qk - m_ij[:, None])
        alpha = tl.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        v = tl.load(v_ptr + base + keys[:, None] * s_n + dims[None, :], mask=keys[:, None] < seq, other=0.0)
        acc = tl.dot(p.to(tl.float16), v, acc)
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(o_ptr + base + rows[:, None] * s_n + dims[None, :], acc.to(tl.float16), mask=rows[:, None] < seq)
'''


# The same kernel launched with fixed tiles (a caller's `BM=128, num_warps=8`): the launcher runs its 128-row
# launches at the form's warps.
FIXED_TILE = EXAMPLE.replace('''@triton.autotune(
    configs=[triton.Config({"BM": 128, "BN": 64}, num_warps=8, num_stages=3)],
    key=["seq", "D"],
)
''', "")


# A kernel that leaves early: a consumer that returned would stop the other one's turns.
EARLY_EXIT = EXAMPLE.replace("""    pid = tl.program_id(0)
""", """    pid = tl.program_id(0)
    if pid * BM >= seq:
        return
""")


class HopperAttentionWarpSpecialize(Rule):
    name = "hopper-attention-warp-specialize"
    matches = ("an attention kernel the cp.async attention ring pipelines, autotuned over its tile or launched with "
               "fixed tiles, whose rows split in two and whose K/V tiles TMA descriptors can read")
    emits = ("one TMA loader warp and two consumer warpgroups of 64 rows each that take turns on the tensor cores "
             "(`gl.warp_specialize`), for a 128x128-tile, 4-warp config added to the autotune table, or for the "
             "128-row launches of a kernel launched with fixed tiles, which its launcher runs at 4 warps")
    examples = (
        Example(EXAMPLE, (
            "def _attn_ws_consumer(q_ptr, k_ptr, v_ptr, o_ptr, scale, s_h, s_n, seq, D: gl.constexpr, "
            "BM: gl.constexpr, BN: gl.constexpr, q_bufs, k_ring, v_ring, k_ready, k_empty, v_ready, v_empty, turn, "
            "consumer: gl.constexpr, NCONS: gl.constexpr):",
            "rows = pid * BM + (consumer * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, mma_layout)))",
            "_ws_turn_wait(turn, it, consumer)",
            "mbarrier.arrive(k_empty.index(slot))",
            "def _attn_ws_loader(k_desc, v_desc, k_ring, v_ring, k_ready, k_empty, v_ready, v_empty, num_iters, "
            "BN: gl.constexpr):",
            "if BM == 128 and gl.num_warps() == 4:",
            "k_desc = tma.make_tensor_descriptor(k_ptr + head * s_h, shape=[seq, D], strides=[s_n, 1], "
            "block_shape=[BN, D], layout=k_layout)",
            "], [4, 1], [240, 24])",
        ), "sm90"),
        # launched with fixed tiles: 128-row launches at the form's 4 warps
        Example(FIXED_TILE, (
            "if BM == 128 and gl.num_warps() == 4:",
            "], [4, 1], [240, 24])",
            'retile=("BM", 128, 4)',
        ), "sm90"),
    )
    counterexamples = (
        # a consumer that returned early would leave the other waiting for its turn (the ring stays)
        Counterexample(EARLY_EXIT, ("gl.warp_specialize(",), "TT044", "the kernel returns early", "sm90"),
    )

    def leave_FunctionDef(self, ctx: RuleContext, original: cst.FunctionDef, updated: cst.FunctionDef
                          ) -> cst.FunctionDef:
        ws = ctx.ws_attention
        if not isinstance(ws, WSLoop):
            return updated
        form = _Form(ctx, ws, original, updated)
        why = form.build()
        if why is not None:
            ctx.diagnostics.append(ctx.source.diagnostic(ws.plan.loop, "TT044", (
                f"attention loop: no warp-specialised form (the ring stays): {why}")))
            return updated
        head = form.tiles["k"]["block"][1]
        unflagged = ""
        if ctx.launch_flag is not None and head in form.constexprs and not ctx.gluon_always:
            # Full attention (without the causal flag) gains from this form at a head dimension of 128 (1.24x the
            # source on an H200, bench/RESULTS.md: sm90: attention), and at 64 from its three-consumer config
            # (1.10x); the ring alone did not (0.96-1.05x).
            least = WS3_HEAD_DIM if form.three else WS_HEAD_DIM
            ctx.launch_unflagged_at_least = ((head, least),)
            unflagged = (f"; launches without `{ctx.launch_flag}` run the Gluon kernel too where `{head}` is at "
                         f"least {least}")
        if ctx.launch_retile is not None:
            what = (f"warp-specialised for launches with `{form.bm}` = {WS_TILE[0]}, which the launcher runs at "
                    f"{WS_WARPS} warps whatever they ask for (a TMA loader warp, two consumer warpgroups of 64 rows in "
                    "ping-pong); other launches run the ring")
        else:
            what = (f"warp-specialised for the {WS_TILE[0]}x{WS_TILE[1]}, {WS_WARPS}-warp config (a TMA loader warp, "
                    "two consumer warpgroups of 64 rows in ping-pong)"
                    + (f" and, where `{head}` is at most {WS3_HEAD_DIM}, the {WS3_TILE[0]}x{WS3_TILE[1]} one (three "
                       "consumer warpgroups)" if form.three else "")
                    + "; the kernel's other configs run the ring")
        ctx.diagnostics.append(ctx.source.diagnostic(ws.plan.loop, "TT044", f"attention loop: {what}{unflagged}"))
        return form.function


class _Form:
    """The warp-specialised form of one kernel: `build` returns why not, or None and sets `function` (the kernel)
    and the module functions (the partitions) on the context."""

    def __init__(self, ctx: RuleContext, ws: WSLoop, original: cst.FunctionDef, updated: cst.FunctionDef) -> None:
        self.ctx, self.ws, self.original, self.updated = ctx, ws, original, updated
        self.plan: AttentionPlan = ws.plan
        self.function = updated
        self.params = {p.name: p for p in ctx.function.params}
        self.constexprs = set(ctx.function.constexpr_names)
        self.three = False  # the three-consumer config too (`_three_consumers`)

    # ---- checks ------------------------------------------------------------------------------------------------

    def build(self) -> str | None:
        ctx, plan = self.ctx, self.plan
        body = list(self.original.body.body)  # type: ignore[union-attr]
        if plan.loop not in body:
            return "the loop is not a statement of the kernel's body"
        if not ctx.function.autotune_configs and not ctx.launch_checked:
            return ("the kernel has no autotune table to add the form's 4-warp config to, nor a launcher that would "
                    "run its 128-row launches at 4 warps")
        tile = ring_tile(ctx, plan)
        if tile is None or any(t not in self.constexprs for t in tile):
            return "the scores' tile sizes are not constexpr parameters"
        self.bm, self.bn = tile
        for node in preorder(self.original.body):
            if isinstance(node, cst.Return):
                return "the kernel returns early (a consumer that leaves would stop the other one's turns)"
        why = self._rows()
        if why is not None:
            return why
        self.at = body.index(plan.loop)
        tiles = {}
        for key in ("k", "v"):
            tile_or_why = self._tile(key)
            if isinstance(tile_or_why, str):
                return tile_or_why
            tiles[key] = tile_or_why
        self.tiles = tiles
        needed = set()
        for t in tiles.values():
            needed |= t["reads"]
        needed |= read_names(cst.parse_expression(self.ws.count))
        chosen = self._slice(body[:self.at], needed)
        if isinstance(chosen, str):
            return chosen
        translated = self._translated_prologue()
        if isinstance(translated, str):
            return translated
        self.slice = [translated[i] for i in chosen]
        return self._emit()

    def _language(self, call: cst.Call) -> str:
        return (self.ctx.language(call.func) or "").rsplit(".", 1)[-1]

    def _rows(self) -> str | None:
        """The rows split between the consumers: one `tl.arange(0, BLOCK_M)`, `BLOCK_M` otherwise a shape or scalar
        arithmetic, nothing across rows."""
        bm = self.bm
        parents = self.ctx.source.parents
        aranges = 0
        # (the first dot's `tl.trans(k)`: K's tile, not the rows)
        scores = self.plan.loop.body.body[self.plan.scores_index]  # type: ignore[union-attr]
        k_views = {a.value for c in calls_in(scores) if self._language(c) == "dot" for a in c.args}
        for node in preorder(self.original.body):
            if isinstance(node, cst.Call):
                kind = self._language(node)
                if kind in ACROSS and node not in k_views:
                    return f"`{code(node.func)}` reads or moves data across the rows the consumers split"
                if kind in REDUCTIONS:
                    axis = next((a.value for a in node.args if a.keyword is not None and a.keyword.value == "axis"),
                                node.args[1].value if len(node.args) > 1 and node.args[1].keyword is None else None)
                    if axis is None or code(axis).strip() not in ("1", "-1"):
                        return f"`{code(node).strip()}` reduces along another axis than 1 (the rows split)"
                if kind == "arange" and len(node.args) >= 2 and code(node.args[1].value).strip() == bm:
                    aranges += 1
                # (a descriptor's tile has the CTA's rows: a consumer would read or write the other's; `desc.load`
                # is a method of no language module)
                if kind in DESCRIPTORS or (not kind and isinstance(node.func, cst.Attribute)
                                           and node.func.attr.value in ("load", "store", "gather", "scatter")):
                    return f"`{code(node.func).strip()}`: a tile read or written through a descriptor or block pointer"
            if isinstance(node, cst.Name) and node.value == bm:
                parent = parents.get(node)
                grand = parents.get(parent) if parent is not None else None
                if isinstance(parent, cst.BinaryOperation):
                    if self._in_sequence(node):  # `[2 * BLOCK_M, D]`: a shape the split would not divide
                        return f"`{bm}` is read in arithmetic inside a list or tuple"
                    continue  # scalar arithmetic: `start_m * BLOCK_M`
                if isinstance(parent, cst.Element) and isinstance(grand, (cst.List, cst.Tuple)) \
                        and self._shape_of_creation(grand):
                    continue  # a tile's shape: `tl.zeros([BLOCK_M, D])`
                if isinstance(parent, cst.Arg) and isinstance(grand, cst.Call) and (
                        self._language(grand) == "arange" or self._language(grand) in ("minimum", "maximum", "cdiv")):
                    continue
                return f"`{bm}` is read otherwise than as a tile's shape or in scalar arithmetic"
        if aranges != 1:
            return f"the kernel makes {aranges} `tl.arange(0, {bm})` row vectors (the consumers split one)"
        for node in preorder(self.original.body):
            if isinstance(node, cst.Call) and self._language(node) in SHAPES and node.args:
                shape = node.args[0].value
                if bm in names_in(shape) and not isinstance(shape, (cst.List, cst.Tuple)):
                    return f"a tile's shape `{code(shape).strip()}` is not a list"
        return None

    def _shape_of_creation(self, sequence: cst.CSTNode) -> bool:
        """`sequence` is the shape argument of `tl.zeros`/`tl.full`/`tl.empty`."""
        arg = self.ctx.source.parents.get(sequence)
        call = self.ctx.source.parents.get(arg) if isinstance(arg, cst.Arg) else None
        return isinstance(call, cst.Call) and self._language(call) in SHAPES and call.args[0] is arg

    def _in_sequence(self, node: cst.CSTNode) -> bool:
        parents = self.ctx.source.parents
        while node is not None and not isinstance(node, cst.BaseStatement):
            node = parents.get(node)
            if isinstance(node, (cst.List, cst.Tuple)):
                return True
        return False

    def _vector(self, node: cst.BaseExpression, depth: int = 0) -> tuple[list[str], str] | None:
        """`start + tl.arange(0, B)` (through names defined once): the start's terms (text) and B."""
        node = unparenthesized(node)
        if depth > 8:
            return None
        if isinstance(node, cst.Name):
            definition = self.ws.walk.definition(node.value)  # type: ignore[attr-defined]
            return None if definition is None else self._vector(definition, depth + 1)
        if isinstance(node, cst.Call):
            if self._language(node) == "arange" and len(node.args) == 2 and code(node.args[0].value).strip() == "0":
                return [], code(node.args[1].value).strip()
            return None
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
            for vec, start in ((node.left, node.right), (node.right, node.left)):
                found = self._vector(vec, depth + 1)
                if found is not None and self._vector(start, depth + 1) is None and _elementwise(start):
                    return [*found[0], code(unparenthesized(start)).strip()], found[1]
        return None

    def _scalar(self, term: cst.BaseExpression) -> str | None:
        """The Gluon text of a scalar address term: arithmetic on names, where a name may be cast to an integer type
        (`z.to(tl.int64) * stride_z`, the 64-bit offset of a batch); None for anything else."""
        casts: dict[cst.CSTNode, str] = {}
        for node in preorder(term):
            if not isinstance(node, cst.Call):
                continue
            func = node.func
            dtype = (self.ctx.language(node.args[0].value) or "") if len(node.args) == 1 else ""
            if not (isinstance(func, cst.Attribute) and func.attr.value == "to" and _elementwise(func.value)
                    and dtype.rsplit(".", 1)[-1] in ("int32", "int64") and node.args[0].keyword is None):
                return None
            value = code(func.value).strip()
            value = value if isinstance(unparenthesized(func.value), (cst.Name, cst.Integer)) else f"({value})"
            casts[node] = f"{value}.to(gl.{dtype.rsplit('.', 1)[-1]})"
        if not casts:
            return code(term).strip() if _elementwise(term) else None

        class Casts(cst.CSTTransformer):
            def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
                return cst.parse_expression(casts[original]) if original in casts else updated

        cast = term.visit(Casts())
        return code(cast).strip() if _elementwise(cast.visit(_NoCasts())) else None

    def _tile(self, key: str) -> dict | str:
        """The TMA descriptor of the K (or V) tiles: base, row stride, extent, block and per-iteration coordinates."""
        plan, walk = self.plan, self.ws.walk
        load = plan.k if key == "k" else plan.v
        what = key.upper()
        # (a K loaded [HEAD_DIM, BLOCK_N]: `plan.k` and its address terms are already those of its [BLOCK_N,
        # HEAD_DIM] view, the tile the descriptor reads, `hopper_attention._transposed_k`)
        other = next((a.value for a in load.call.args if a.keyword is not None and a.keyword.value == "other"), None)
        if other is not None and code(other).strip() not in ("0", "0.0", "0."):
            return f"the {what} load's `other` is not 0 (a descriptor reads zeros out of range)"
        loop_names = {plan.var}.union(*(assigned_names(plan.loop.body.body[i]) for i in plan.producer))  # type: ignore[union-attr]
        base: list[str] = []
        moving: list[cst.BaseExpression] = []
        rows, cols = [], []
        for term in walk.terms[key]:  # type: ignore[attr-defined]
            factors = product_factors(term)
            subs = [f for f in factors if isinstance(f, cst.Subscript)]
            rest = [f for f in factors if not isinstance(f, cst.Subscript)]
            if not subs:
                scalar = self._scalar(term)
                if read_names(term) & loop_names:
                    moving.append(term)
                elif scalar is not None:
                    base.append(scalar)
                else:
                    return f"a term of the {what} address (`{code(term).strip()}`) is not scalar arithmetic"
                continue
            if len(subs) != 1 or broadcast_axis(subs[0]) is None:
                return f"a term of the {what} address (`{code(term).strip()}`) is not `v[:, None] * stride`"
            (rows if broadcast_axis(subs[0]) == 0 else cols).append((subs[0].value, rest))
        if len(rows) != 1 or len(cols) != 1:
            return f"the {what} address is not `base + rows[:, None] * stride + cols[None, :]`"
        (row_vec, row_rest), (col_vec, col_rest) = rows[0], cols[0]
        if len(row_rest) != 1 or not isinstance(row_rest[0], cst.Name) or row_rest[0].value not in self.params:
            return f"the {what} rows' stride is not one parameter"
        stride = row_rest[0].value
        if col_rest and not (len(col_rest) == 1 and isinstance(col_rest[0], cst.Name)
                             and col_rest[0].value in self.ws.strides):
            return f"the {what} columns' stride is not the unit stride the launcher checks"
        row, col = self._vector(row_vec), self._vector(col_vec)
        if row is None or col is None:
            return f"a {what} index vector is not `start + tl.arange(0, BLOCK)`"
        coords = list(row[0])
        for term in moving:
            texts = [code(unparenthesized(f)).strip() for f in product_factors(term)]
            if stride not in texts or not _elementwise(term):
                return f"the {what} address moves by `{code(term).strip()}`, not by its rows' stride"
            texts.remove(stride)
            coords.append(" * ".join(texts) or "1")
        if any(read_names(cst.parse_expression(c)) & (loop_names - {plan.var}) for c in [*coords, *col[0]]):
            return f"the {what} tile's coordinates read a value the loop makes"
        pointers = [t for t in base if t in self.params and t not in self.constexprs]
        if len(pointers) != 1:
            return f"the {what} address's base is not one pointer parameter plus offsets"
        found = self._extent(load.mask, coords, col)
        if isinstance(found, str):
            return found
        extent = found[0]
        base.remove(pointers[0])
        return {"pointer": pointers[0], "base": " + ".join([pointers[0], *base]), "stride": stride, "extent": extent,
                "block": (row[1], col[1]), "coords": (_sum(coords), _sum(col[0])),
                "reads": set().union(*(read_names(cst.parse_expression(t)) for t in (*base, stride, extent,
                                                                                   *coords, *col[0])))}

    def _extent(self, mask: cst.BaseExpression | None, coords: list[str], col: tuple[list[str], str]
                ) -> tuple[str] | str:
        """The rows' bound the mask gives (`rows[:, None] < N_CTX`): the descriptor's extent; columns may be bounded
        by their block only. A message where the mask is not of that form."""
        if mask is None:
            return "the tile's rows are not masked: a descriptor needs their extent"
        pending = [mask]
        extent = None
        while pending:
            node = unparenthesized(pending.pop())
            if isinstance(node, cst.Name) and self.ws.walk.definition(node.value) is not None:  # type: ignore[attr-defined]
                pending.append(self.ws.walk.definition(node.value))  # type: ignore[attr-defined]
                continue
            if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitAnd):
                pending += [node.left, node.right]
                continue
            axis, vec, bound = None, None, None
            if isinstance(node, cst.Subscript) and broadcast_axis(node) is not None:
                axis, inner = broadcast_axis(node), unparenthesized(node.value)
                if isinstance(inner, cst.Name) and self.ws.walk.definition(inner.value) is not None:  # type: ignore[attr-defined]
                    inner = unparenthesized(self.ws.walk.definition(inner.value))  # type: ignore[attr-defined]
                if isinstance(inner, cst.Comparison) and len(inner.comparisons) == 1 \
                        and isinstance(inner.comparisons[0].operator, cst.LessThan):
                    vec, bound = inner.left, inner.comparisons[0].comparator
            elif isinstance(node, cst.Comparison) and len(node.comparisons) == 1 \
                    and isinstance(node.comparisons[0].operator, cst.LessThan):
                # `rows[:, None] < n`, or `(start + offs[:, None]) < n`: the rows `start + offs`
                terms = sum_terms(unparenthesized(node.left))
                subs = [t for t in terms if isinstance(t, cst.Subscript) and broadcast_axis(t) is not None]
                if len(subs) == 1 and all(t is subs[0] or _elementwise(t) and not calls_in(t) and not any(
                        isinstance(n, cst.Subscript) for n in preorder(t)) for t in terms):
                    axis, bound = broadcast_axis(subs[0]), node.comparisons[0].comparator
                    vec = subs[0].value
                    if len(terms) > 1:
                        vec = cst.BinaryOperation(vec, cst.Add(), cst.parse_expression(
                            " + ".join(f"({code(t).strip()})" for t in terms if t is not subs[0])))
            found = self._vector(vec) if vec is not None else None
            if found is None or bound is None or not _elementwise(bound):
                return f"a term of the mask (`{code(node).strip()}`) is not `rows[:, None] < extent`"
            bound_text = code(unparenthesized(bound)).strip()
            if axis == 1:
                if bound_text != col[1] or found[0]:
                    return "the mask bounds the tile's columns by another value than their block"
                continue
            # The mask's rows are the tile's rows less some terms (`start_n + offs_n < end` on rows `seq_start +
            # start_n + offs_n`): the descriptor's rows end that much further (`seq_start + end`).
            extra = _terms(coords)
            for term in _terms(found[0]):
                if term not in extra:
                    return f"the mask's rows (`{code(vec).strip()}`) are not the tile's rows"
                extra.remove(term)
            if any(t.startswith("-") for t in extra):
                return f"the mask's rows (`{code(vec).strip()}`) are not the tile's rows"
            bound_text = _sum([bound_text if _elementwise(cst.parse_expression(bound_text)) and len(
                sum_terms(cst.parse_expression(bound_text))) == 1 or not extra else f"({bound_text})", *extra])
            if extent is not None and extent != bound_text:
                return "the mask bounds the tile's rows twice"
            extent = bound_text
        if extent is None:
            return "the tile's rows are not masked: a descriptor needs their extent"
        return (extent,)

    def _slice(self, prologue: list[cst.BaseStatement], needed: set[str]) -> list[int] | str:
        """The statements before the loop that compute `needed` (those not parameters), all scalar."""
        tensors = set(name_terms(self.ctx.plan))
        needed = {n for n in needed if n not in self.params}
        chosen: list[int] = []
        for i in reversed(range(len(prologue))):
            statement = prologue[i]
            if not bound_names(statement) & needed:
                continue
            bound = bound_names(statement)
            if bound & tensors or read_names(statement) & tensors - bound:
                return (f"`{sorted(bound & needed)[0]}`, which the K/V descriptors or the loop range read, is computed "
                        "from tensors")
            # (a scalar `tl.load`, a prompt's start or length, is scalar: its name is no tensor)
            if any(self._language(c) in ("arange", "zeros", "full") for c in calls_in(statement)):
                return f"`{sorted(bound & needed)[0]}` is computed by a tensor operation"
            chosen.append(i)
            needed |= {n for n in read_names(statement) - bound if n not in self.params}
        missing = needed - set().union(*(bound_names(prologue[i]) for i in chosen)) - self._module_names
        if missing:
            return f"`{sorted(missing)[0]}` is not computed before the loop"
        return sorted(chosen)

    @functools.cached_property
    def _module_names(self) -> set[str]:
        return set().union(*(bound_names(s) for s in self.ctx.source.module.body)) | {"gl", "tl", "triton"}

    def _translated_prologue(self) -> list[cst.BaseStatement] | str:
        """The translated statements of the source's statements before the loop, in order (the layout declarations
        the translation adds are not among them)."""
        source = list(self.original.body.body)[:self.at]  # type: ignore[union-attr]
        final = list(self.updated.body.body)  # type: ignore[union-attr]
        ring = self.ws.ring[0]
        if ring not in final:
            return "the ring's statements are not in the translated kernel"
        final = final[:final.index(ring)]
        found: list[cst.BaseStatement] = []
        j = 0
        for statement in source:
            names = bound_names(statement)
            while j < len(final) and not (type(final[j]) is type(statement) and bound_names(final[j]) == names):
                j += 1
            if j == len(final):
                return "the translated statements before the loop do not line up with the source's"
            found.append(final[j])
            j += 1
        return found

    # ---- emission -----------------------------------------------------------------------------------------------

    def _emit(self) -> str | None:
        ctx, plan, w = self.ctx, self.plan, self.ws.names
        fn = ctx.function
        kernel = fn.name
        consumer, loader = f"_{kernel}_ws_consumer", f"_{kernel}_ws_loader"
        taken = set(ctx.facts.functions) | self._module_names
        if consumer in taken or loader in taken:
            return f"`{consumer}` or `{loader}` is a name of the module"
        k, v = self.tiles["k"], self.tiles["v"]
        bn, bm = self.bn, self.bm
        if k["block"][0] != bn or v["block"][0] != bn:
            return "the K/V tiles' rows are not the scores' key block"
        rows, cons, ncons = w["ROWS"], w["consumer"], w["NCONS"]
        params = [p.name for p in fn.params]
        signature = ", ".join(f"{p}: gl.constexpr" if p in self.constexprs else p for p in params)
        buffers = [w[x] for x in ("q_bufs", "k_ring", "v_ring", "k_ready", "k_empty", "v_ready", "v_empty", "turn")]

        # The consumer: the translated kernel with the ring's statements replaced by the consumer loop, rows split.
        final = list(self.updated.body.body)  # type: ignore[union-attr]
        ring_at = final.index(self.ws.ring[0])
        ring_end = ring_at + len(self.ws.ring)
        if final[ring_at:ring_end] != list(self.ws.ring):
            return "the ring's statements are not together in the translated kernel"
        loop_statements = list(cst.parse_module(self.ws.loop_text).body)
        docstring = final[0] if final and is_docstring(final[0]) else None
        consumer_body = [s for s in final[:ring_at] if s is not docstring] + loop_statements + final[ring_end:]
        split = _RowSplit(bm, rows, f"{cons} * {rows}")
        consumer_body = [s.visit(split) for s in consumer_body]  # type: ignore[misc]
        head = cst.parse_module(
            f"{rows}: gl.constexpr = {bm} // {ncons}  # this consumer's rows: {cons} * {rows} and on\n").body
        module = self.ctx.source.module
        consumer_text = "\n".join([
            "@gluon.jit",
            f"def {consumer}({signature}, {', '.join(buffers)}, {cons}: gl.constexpr, {ncons}: gl.constexpr):",
            *textwrap.wrap(f'"""Consumer partition `{cons}` of `{kernel}`\'s warp-specialised form: the kernel\'s own '
                           f"code on {rows} of its {bm} rows, with K and V tiles from the loader partition's ring and "
                           'wgmmas issued in turns with the other consumer."""', width=116, initial_indent="    ",
                           subsequent_indent="    "),
            *("    " + line if line.strip() else "" for statement in [*head, *consumer_body]
              for line in module.code_for_node(statement).splitlines()),
        ])
        # The loader: the loop's iterations, TMA copies of K and V into the rings.
        it = "it"
        value = self.ws.index(it)  # type: ignore[operator]
        coords = {key: self.tiles[key]["coords"] for key in ("k", "v")}
        loader_reads = set().union(*(read_names(cst.parse_expression(t)) for c in coords.values() for t in c),
                                   read_names(cst.parse_expression(value))) - {plan.var, it}
        loader_args = sorted(loader_reads)
        loader_params = ", ".join(f"{a}: gl.constexpr" if a in self.constexprs else a for a in loader_args)
        local = {"it", "slot", "phase", "NUM_STAGES", "k_desc", "v_desc", "k_ring", "v_ring", "k_ready", "k_empty",
                 "v_ready", "v_empty", "num_iters"}
        if local & (loader_reads | {plan.var}):
            return f"`{sorted(local & (loader_reads | {plan.var}))[0]}` is a name the loader partition uses itself"
        loader_text = "\n".join([
            "@gluon.jit",
            f"def {loader}(k_desc, v_desc, k_ring, v_ring, k_ready, k_empty, v_ready, v_empty, num_iters"
            + (f", {loader_params}" if loader_params else "") + "):",
            f'    """Loader partition of `{kernel}`\'s warp-specialised form: one warp issues the TMA copies of each '
            "iteration's",
            "    K and V tiles into the ring slots both consumers have handed back.\"\"\"",
            "    NUM_STAGES: gl.constexpr = k_ring.shape[0]",
            "    for it in range(num_iters):",
            f"        {plan.var} = {value}",
            "        slot = it % NUM_STAGES",
            "        # (a fresh mbarrier counts the phase before phase 0 as completed: the first pass does not wait)",
            "        phase = ((it // NUM_STAGES) & 1) ^ 1",
            *(line for key in ("k", "v") for line in (
                f"        mbarrier.wait({key}_empty.index(slot), phase)",
                # (each of K and V a ring with its own barriers: a TMA copy engine each)
                *(f"        {text}" for text in TmaCopy(f"{key}_ready", ((
                    f"{key}_desc", f"[{coords[key][0]}, {coords[key][1]}]", f"{key}_ring"),)).issue(None, "slot", None)),
            )),
        ])
        # The kernel: the scalars the descriptors and the loop range read, the descriptors, the rings and barriers,
        # the partitions.
        q_cols, d = k["block"][1], v["block"][1]
        dtype = f"{k['pointer']}.dtype.element_ty"
        stages, k_desc, v_desc, iters = w["WS_STAGES"], w["k_desc"], w["v_desc"], w["ws_iters"]
        k_layout, v_layout, q_layout, s_var = w["k_layout"], w["v_layout"], w["q_layout"], w["s"]
        kq_ring, kv_ring, k_ready, k_empty, v_ready, v_empty, turn, q_bufs = (
            w["k_ring"], w["v_ring"], w["k_ready"], w["k_empty"], w["v_ready"], w["v_empty"], w["turn"], w["q_bufs"])
        args = ", ".join(params)
        strides = [f"isinstance({s}, int)" for s in self.ws.strides]
        condition = " and ".join([f"{bm} == {WS_TILE[0]}", f"gl.num_warps() == {WS_WARPS}", *strides])
        self.three = self._three_consumers(q_cols)
        condition3 = " and ".join([f"{bm} == {WS3_TILE[0]}", f"gl.num_warps() == {WS_WARPS}",
                                   f"{q_cols} <= {WS3_HEAD_DIM}", *strides])

        def setup(consumers: int, regs: int) -> list[str]:
            return [
            "# Warp-specialised (FA3's schedule): a loader warp fills rings of K and V tiles by TMA; "
            f"{_WORDS[consumers]} consumer",
            f"# warpgroups each run this kernel on {bm} // {consumers} of its rows and take turns issuing their "
            "wgmmas, so that",
            "# one's softmax overlaps the others' tensor-core work. Other configs run the ring below.",
            f"{ncons}: gl.constexpr = {consumers}",
            *(module.code_for_node(s).strip("\n") for s in self.slice),
            f"{k_layout}: gl.constexpr = gl.NVMMASharedLayout.get_default_for([{bn}, {q_cols}], {dtype})",
            f"{v_layout}: gl.constexpr = gl.NVMMASharedLayout.get_default_for([{bn}, {d}], {dtype})",
            f"{q_layout}: gl.constexpr = gl.NVMMASharedLayout.get_default_for([{bm} // {ncons}, {q_cols}], {dtype})",
            "# TMA descriptors of this program's K and V (rows past the extent read as zeros, as the masks give).",
            f"{k_desc} = tma.make_tensor_descriptor({k['base']}, shape=[{k['extent']}, {q_cols}], "
            f"strides=[{k['stride']}, 1], block_shape=[{bn}, {q_cols}], layout={k_layout})",
            f"{v_desc} = tma.make_tensor_descriptor({v['base']}, shape=[{v['extent']}, {d}], "
            f"strides=[{v['stride']}, 1], block_shape=[{bn}, {d}], layout={v_layout})",
            "# Ring slots: as many as fit beside Q's tiles (and the consumers' layout conversions), 3 at most.",
            f"{stages}: gl.constexpr = _fit_stages(3, {bn} * ({q_cols} + {d}) * {dtype}.primitive_bitwidth // 8, "
            f"{bm} * {q_cols} * {dtype}.primitive_bitwidth // 8 + 32 * 1024)",
            f"{q_bufs} = gl.allocate_shared_memory({dtype}, [{ncons}, {bm} // {ncons}, {q_cols}], {q_layout})",
            f"{kq_ring} = gl.allocate_shared_memory({dtype}, [{stages}, {bn}, {q_cols}], {k_layout})",
            f"{kv_ring} = gl.allocate_shared_memory({dtype}, [{stages}, {bn}, {d}], {v_layout})",
            *(f"{b} = gl.allocate_shared_memory(gl.int64, [{stages}, 1], mbarrier.MBarrierLayout())"
              for b in (k_ready, k_empty, v_ready, v_empty)),
            f"{turn} = gl.allocate_shared_memory(gl.int64, [{ncons}, 1], mbarrier.MBarrierLayout())",
            f"for {s_var} in gl.static_range({ncons}):",
            f"    mbarrier.init({turn}.index({s_var}), count=1)",
            f"for {s_var} in gl.static_range({stages}):",
            f"    mbarrier.init({k_ready}.index({s_var}), count=1)",
            f"    mbarrier.init({v_ready}.index({s_var}), count=1)",
            "    # a slot is free again once every consumer is done with it",
            f"    mbarrier.init({k_empty}.index({s_var}), count={ncons})",
            f"    mbarrier.init({v_empty}.index({s_var}), count={ncons})",
            f"{iters} = {self.ws.count}",
            "gl.warp_specialize([",
            *(f"    ({consumer}, ({args}, {', '.join(buffers)}, {c}, {ncons}))," for c in range(consumers)),
            f"    ({loader}, ({k_desc}, {v_desc}, {kq_ring}, {kv_ring}, {k_ready}, {k_empty}, {v_ready}, {v_empty}, "
            f"{iters}" + "".join(f", {a}" for a in loader_args) + ")),",
            f"], [{', '.join([str(WS_WARPS)] * (consumers - 1))}, 1], "
            f"[{', '.join([str(regs)] * (consumers - 1))}, {LOADER_REGS}])",
            f"for {s_var} in gl.static_range({stages}):",
            *(f"    mbarrier.invalidate({b}.index({s_var}))" for b in (k_ready, k_empty, v_ready, v_empty)),
            ]

        def block(lines: list[str]) -> str:
            return "\n".join(f"    {line}" if line else "" for line in "\n".join(lines).splitlines())

        kept = [s for s in final if s is not docstring]
        text = f"if {condition}:\n{block(setup(CONSUMERS, CONSUMER_REGS))}\n"
        if self.three:
            text += f"elif {condition3}:\n{block(setup(3, WS3_CONSUMER_REGS))}\n"
        text += "else:\n    pass\n"
        kernel_body = cst.parse_module(text).body[0]
        assert isinstance(kernel_body, cst.If)
        if self.three:
            # (the autotuner skips the three-consumer config where the head dimension is larger: a compile-time
            # assertion, not a ring of 192 rows, which is no power of two)
            guard = cst.parse_module(f"gl.static_assert({bm} != {WS3_TILE[0]}, \"the {WS3_TILE[0]}-row config is the "
                                     f"three-consumer form's, for `{q_cols}` <= {WS3_HEAD_DIM}\")\n").body
            kept = [*guard, *kept]
        inner = kernel_body.orelse
        assert isinstance(inner, (cst.If, cst.Else))
        last = inner.orelse if isinstance(inner, cst.If) else inner
        assert isinstance(last, cst.Else)
        last = last.with_changes(body=last.body.with_changes(body=kept))
        kernel_body = kernel_body.with_changes(orelse=inner.with_changes(orelse=last) if isinstance(inner, cst.If)
                                               else last)
        self.function = self.updated.with_changes(body=self.updated.body.with_changes(
            body=[*([docstring] if docstring is not None else []), kernel_body]))
        ctx.module_functions += [consumer_text + "\n", loader_text + "\n"]
        for helper in ("ws_turns", "fit_stages", "tma_aliases", "mma_layout", "register_a_layout"):
            ctx.need(helper)
        return self._config()

    def _three_consumers(self, head: str) -> bool:
        """Whether the kernel gets the three-consumer config too: autotuned (a fixed launch keeps the caller's rows),
        its head dimension a constexpr parameter (the form's compile-time test reads it), and no config of its own
        with 192 rows (which the form's test would take)."""
        configs = self.ctx.function.autotune_configs
        return bool(configs) and head in self.constexprs and not any(
            c.values.get(self.bm) == WS3_TILE[0] for c in configs)

    def _config(self) -> str | None:
        """One more autotune config: the form's tile and warps; for a kernel launched with fixed tiles, launches of
        its 128 rows run at the form's warps (`Dispatch.retile`: the caller's 8 warps are the two consumers')."""
        ctx = self.ctx
        if not ctx.function.autotune_configs:
            ctx.launch_retile = (self.bm, WS_TILE[0], WS_WARPS)
            return None
        decorators = list(self.function.decorators)
        for i, (source, decorator) in enumerate(zip(self.original.decorators, decorators)):
            if ctx.source.qualified_name(decorator_target(source)) != TRITON_AUTOTUNE:
                continue
            configs = ctx.function.autotune_configs
            if not any(c.values.get(self.bm) == WS_TILE[0] and c.num_warps == WS_WARPS for c in configs):
                added = add_config(ctx, decorator, {self.bm: WS_TILE[0], self.bn: WS_TILE[1]}, WS_WARPS, 3,
                                   "the warp-specialised attention's tile: two 64-row consumer warpgroups and a "
                                   "loader warp")
                if added is None:
                    return "no config could be added to the kernel's autotune table"
                decorator = added[0]
            if self.three:
                added = add_config(ctx, decorator, {self.bm: WS3_TILE[0], self.bn: WS3_TILE[1]}, WS_WARPS, 3,
                                   "three 64-row consumer warpgroups and a loader warp, where the head dimension is "
                                   f"at most {WS3_HEAD_DIM}")
                if added is None:
                    return "no config could be added to the kernel's autotune table"
                decorator = added[0]
            decorators[i] = decorator
            self.function = self.function.with_changes(decorators=decorators)
            return None
        return "the kernel has no autotune table to add the form's 4-warp config to"


_WORDS = {2: "two", 3: "three"}


class _NoCasts(cst.CSTTransformer):
    """``(x).to(gl.int64)`` -> ``x``: what is left to check is arithmetic."""

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = updated.func
        return func.value if isinstance(func, cst.Attribute) and func.attr.value == "to" else updated


class _RowSplit(cst.CSTTransformer):
    """A consumer's share of the rows: ``gl.arange(0, BLOCK_M, ...)`` -> ``(C * ROWS + gl.arange(0, ROWS, ...))``,
    ``BLOCK_M`` in a shape list or as the first argument of `_mma_layout` -> ``ROWS``; scalar arithmetic keeps the
    CTA's ``BLOCK_M``."""

    def __init__(self, bm: str, rows: str, offset: str) -> None:
        super().__init__()
        self.bm, self.rows, self.offset = bm, rows, offset

    def _is_bm(self, node: cst.BaseExpression) -> bool:
        return isinstance(node, cst.Name) and node.value == self.bm

    def leave_Element(self, original_node: cst.Element, updated_node: cst.Element) -> cst.Element:
        if self._is_bm(updated_node.value):
            return updated_node.with_changes(value=cst.Name(self.rows))
        return updated_node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        func = code(updated_node.func)
        args = list(updated_node.args)
        if func == "gl.arange" and len(args) >= 2 and self._is_bm(args[1].value):
            args[1] = args[1].with_changes(value=cst.Name(self.rows))
            new = updated_node.with_changes(args=args)
            return cst.parse_expression(f"({self.offset} + {cst.Module([]).code_for_node(new)})")
        if func == "_mma_layout" and args and self._is_bm(args[0].value):
            args[0] = args[0].with_changes(value=cst.Name(self.rows))
            return updated_node.with_changes(args=args)
        return updated_node


def _terms(texts: list[str]) -> list[str]:
    """The terms of a sum of texts, each as written, zeros left out: `["a + b", "c"]` -> `["a", "b", "c"]`."""
    found = []
    for text in texts:
        for term in sum_terms(cst.parse_expression(text)):
            term_text = code(term).strip()
            if term_text != "0":
                found.append(term_text)
    return found


def _sum(terms: list[str]) -> str:
    kept = [t for t in terms if t != "0"]
    return " + ".join(kept) if kept else "0"
