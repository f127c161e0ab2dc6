"""Scale vectors held once per output tile, loaded as one scalar: the rewrite both GEMM rings make of a block-scaled
GEMM's column scales (`analysis.tile_scales` finds them).

`b_s = tl.load(Bscale_ptrs + offs_ks * stride)` with `Bscale_ptrs` per column of the tile (`offs_bn // group_n`) and
`acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]` become a load of the tile's first column's scale and a product
by that scalar, for launches whose column groups hold whole tiles (`group_n % BLOCK_N == 0`, which the launcher
tests: the source kernel runs the others). The sm90 TMA ring defines the scalar address once before the ring (written
into the loop's load it ran 1.08-1.19x against 1.18-1.35x); the AMD warp pipeline writes it into the load (Triton's
AMD compile hoists it: the same instructions either way).
"""

from __future__ import annotations

import libcst as cst

from transpile.analysis.pipeline import LoopPlan, loop_body
from transpile.analysis.tile_scales import UniformFactor, uniform_factor
from transpile.cst_utils import names_in
from transpile.rules.base import RuleContext

#: The fewest rows a tile of the block-scaled TMA ring with one scale per tile runs (`uniform_scale`, sm90); launches
#: of fewer run the source kernel. On an H100 (bench/RESULTS.md, "sm90: one B scale per tile") lightllm's
#: block-scaled fp8 GEMM ran 1.18-1.35x its source at 128 x 128 tiles with 8 warps, but 0.94-0.97x at 64 x 128 with
#: 4 warps from 1024 rows (Triton's own compile of that tile is its fastest).
SCALED_TILE_ROWS = 128


def uniform_scale(ctx: RuleContext, plan: LoopPlan, loop: cst.For, least_rows: int = SCALED_TILE_ROWS
                  ) -> UniformFactor | None:
    """The factor of the loop's (first dot's) scaled accumulation that holds one value per tile, where the tile width
    and the group divisor are parameters the launcher can read, and the tile's rows a constexpr parameter or a
    literal of at least `least_rows`."""
    body = loop_body(loop)
    statement = body[plan.dot_index]
    small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
    if small is None:
        return None
    found = uniform_factor(ctx.function.node, loop, small, plan.chains[0].call)
    params = {p.name for p in ctx.function.params}
    if found is None or found.group not in params or found.block not in params:
        return None
    rows = str(ctx.plan.dots[plan.chains[0].call].shape[0])
    constexprs = {p.name for p in ctx.function.params if p.is_constexpr}
    if rows not in constexprs and not (rows.isdigit() and int(rows) >= least_rows):
        return None
    return found


def launch_tests(ctx: RuleContext, plan: LoopPlan, uniform: UniformFactor, least_rows: int | None
                 ) -> None:
    """The launcher's tests (`RuleContext.launch_source_when`) under which the source kernel runs: groups that do
    not hold whole tiles, and (`least_rows`) tiles of fewer rows."""
    defaults = {p.name: p.default for p in ctx.function.params}
    rows = str(ctx.plan.dots[plan.chains[0].call].shape[0])
    tests = [uniform.test, *([f"{rows} < {least_rows}"] if least_rows and not rows.isdigit() else [])]
    for test in tests:
        names = sorted(names_in(cst.parse_expression(test)))
        ctx.launch_source_when = tuple(dict.fromkeys((*ctx.launch_source_when, (
            test, tuple((n, defaults.get(n)) for n in names)))))
