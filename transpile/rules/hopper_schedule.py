"""The schedule of an sm90 pipelined loop: what the sm90 pipeline rules decide for it and emit from.

Each of the three sm90 rings (`hopper_pipeline`: the TMA ring and its warp-specialised form; `hopper_cp_async`: the
cp.async ring of pointer GEMMs; `hopper_attention`: the cp.async K/V ring of flash attention) builds one `Sm90Ring`
for the loop it rewrites, writes the loop from it through the expander of `transpile.lowering.sm90` (the order of one
iteration's ops, the ring depth, the wgmmas left in flight, the cp.async groups waited for, the warp-specialised
form's condition, loader warps and registers) and records it on the rule context
(`RuleContext.pipelined_loop`). `transpile.timeline` draws the recorded objects, so the timeline is the schedule of
the emitted code, not a second description of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from transpile.lowering.sm90 import GEMM_STEADY
from transpile.rules.pipeline_text import RingDepth, code

#: `warpgroup_mma_wait(MMA_IN_FLIGHT, ...)` after each wgmma of a GEMM ring: one wgmma stays in flight, so the slot
#: the one before it read is free. (`_ws_wgmma_consumer`, a fixed snippet, waits the same; a test checks it.)
MMA_IN_FLIGHT = 1
#: The warp-specialised ring's loader partition: one warp with few registers (`gl.warp_specialize(..., [1], [24])`).
LOADER_WARPS = 1
LOADER_REGISTERS = 24
PERSISTENT_LOADER_REGISTERS = 40  # the persistent form's loader also walks the tiles (24 measured slower, 8192^3)
#: The default partition of the warp-specialised ring (a helper snippet of the sm90 target).
WS_CONSUMER = "_ws_wgmma_consumer"
# Accumulator tiles of at least this many elements, on 8 warps or more, run the warp-specialised form (128x256 on 8
# warps: measured faster than the single-partition ring on an H100, bench/RESULTS.md; at 128x128 it was not).
WS_MIN_TILE = 128 * 256
# ... and for a loop that scales each step's product (block-scaled 8-bit GEMMs, one B scale per tile): from 128x128 on
# 8 warps (measured on an H100 at 128x128x128: 1.07-1.12x the single-partition ring, bench/RESULTS.md)
SCALED_WS_MIN_TILE = 128 * 128
WS_MIN_WARPS = 8
# The tile that form is for, added to an autotuned kernel's configs: (BLOCK_M, BLOCK_N, BLOCK_K), warps, ring depth.
WS_CONFIG = ((128, 256, 64), 8, 3)
# The tile added to an autotuned flash-attention kernel whose cp.async ring leaves out the score mask on most tiles:
# (rows, keys), warps, ring depth. On an H100 it took d128 full attention from 0.98x to 1.03x (bench/RESULTS.md).
ATTENTION_CONFIG = ((128, 128), 8, 3)


@dataclass(frozen=True)
class RingOperand:
    """One ring of shared-memory tiles: the dot operand it holds and the copy engine that fills it."""

    name: str  # the tile's variable in the source (`a`, `k`)
    engine: str  # "TMA" or "cp.async"
    transposed: bool = False  # the wgmma reads a transposed view of the slot (`tl.trans(w)`)


@dataclass(frozen=True)
class WaitGroups:
    """`async_copy.wait_group(per_stage * NUM_STAGES - less)`: the cp.async commit groups left in flight."""

    per_stage: int
    less: int

    def text(self, stages: str) -> str:
        return f"{stages} - {self.less}" if self.per_stage == 1 else f"{self.per_stage} * {stages} - {self.less}"

    def value(self, stages: int) -> int:
        return self.per_stage * stages - self.less


@dataclass(frozen=True)
class WarpSpecialised:
    """The warp-specialised form of the TMA ring, chosen at compile time: a loader partition of `warps` warp(s)
    fills the ring through `empty`/`ready` mbarriers while the kernel's warps (`WS_CONSUMER`) wait, multiply and hand
    slots back. `rows` x `cols` is the accumulator tile as the kernel reads it (descriptor block shapes); `dims`
    the block-shape entries they are (constexpr names or numbers), which the configs' values decide."""

    loader: str  # the loader partition's function
    rows: str
    cols: str
    dims: tuple[str, str]
    warps: int = LOADER_WARPS
    registers: int = LOADER_REGISTERS
    min_tile: int = WS_MIN_TILE
    min_warps: int = WS_MIN_WARPS
    # The persistent form (`hopper_persistent`): both partitions walk the program's tiles; `consumer` is then the
    # kernel's own default-partition function instead of WS_CONSUMER.
    persistent: bool = False
    consumer: str = ""
    # the test that the tile has a wgmma's rows, where a launch may give fewer (`lowering.sm90.wgmma_rows`)
    rows_test: str = ""

    @property
    def condition(self) -> str:
        """The emitted compile-time test."""
        rows = f"{self.rows_test} and " if self.rows_test else ""
        return f"{rows}{self.rows} * {self.cols} >= {self.min_tile} and gl.num_warps() >= {self.min_warps}"

    def selects(self, values: dict[str, object], num_warps: int | None) -> bool | None:
        """Whether a config with these constexpr values and warps compiles this form (None: not known here)."""
        sizes = []
        for dim in self.dims:
            value = values.get(dim, dim)
            try:
                sizes.append(int(value))  # type: ignore[arg-type]
            except (TypeError, ValueError):
                return None
        if num_warps is None:
            return None
        # (a rows test: the first dimension is the tile's rows, which a wgmma takes 64 of a warpgroup)
        wide = not self.rows_test or sizes[0] >= 64
        return wide and sizes[0] * sizes[1] >= self.min_tile and num_warps >= self.min_warps


@dataclass(frozen=True)
class RingConfig:
    """An autotune config the ring is compiled for."""

    label: str
    values: dict[str, object]
    num_warps: int | None
    added: str = ""  # why the tool added it (the warp-specialised ring's tile), or "" for the kernel's own

    @property
    def text(self) -> str:
        """`BLOCK_M=128, BLOCK_N=256, num_warps=8` (and why the tool added it)."""
        values = ", ".join(f"{k}={v}" for k, v in self.values.items())
        warps = f"num_warps={self.num_warps}" if self.num_warps is not None else "num_warps from the launch"
        added = f"; {self.added}" if self.added else ""
        return (f"{values}, {warps}" if values else warps) + added


@dataclass
class Sm90Ring:
    """An sm90 pipelined loop as its rule emits it.

    `form`: "tma" (a TMA ring, one mbarrier `ready` per slot, with the warp-specialised form `ws` where the loop
    only copies and multiplies), "cp.async" (a cp.async ring of pointer tiles, one commit group per iteration) or
    "attention" (the K/V cp.async ring of flash attention: Q in shared memory, QK^T and the previous iteration's PV
    issued together, QK^T waited for with PV in flight).
    """

    form: str
    kernel: str
    line: int  # the loop's line in the source
    depth: RingDepth
    operands: tuple[RingOperand, ...]
    mma_in_flight: int = MMA_IN_FLIGHT
    wait_groups: WaitGroups | None = None  # cp.async rings: the commit groups left in flight at the top of the loop
    ws: WarpSpecialised | None = None
    configs: list[RingConfig] = field(default_factory=list)
    q: str = ""  # attention: the loop-invariant operand kept in shared memory
    # each wgmma makes the iteration's product from zero, which the loop's own statement adds to the accumulator
    # (`acc += tl.dot(a, b) * a_s[:, None] * b_s`: block-scaled GEMMs); `mma_in_flight` is then 0
    product: bool = False
    # The ops of one steady-state iteration, in the order the expander writes them (`transpile.lowering.sm90`:
    # GEMM_STEADY for the GEMM rings, ATTENTION_STEADY for flash attention).
    steady: tuple[str, ...] = GEMM_STEADY


def kernel_configs(function) -> list[RingConfig]:  # noqa: ANN001 - JitFunction
    """The kernel's autotune configs (none: block sizes and warps come with each launch)."""
    return [RingConfig(f"config {i}", dict(c.values), c.num_warps) for i, c in enumerate(function.autotune_configs)]


def least_value(function, size: object) -> int | None:  # noqa: ANN001 - JitFunction
    """The least value a tile size takes in the kernel: `size` itself where it is a literal, the least of the values
    every autotune config sets it to where it is a constexpr they all set (launches outside the autotuner do not
    happen), else None (each launch passes its own)."""
    text = str(size) if size is not None else ""
    if text.isdigit():
        return int(text)
    values = [c.values.get(text) for c in function.autotune_configs]
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return min(values)  # type: ignore[type-var]
    return None


def least_rows(ctx, call: cst.Call) -> int | None:  # noqa: ANN001 - RuleContext (an import cycle)
    """The least rows of the dot `call`'s tile in the kernel (`least_value` of its first dimension), or None."""
    site = ctx.plan.dots.get(call)
    return least_value(ctx.function, site.shape[0] if site is not None else None)


def add_config(ctx,  # noqa: ANN001 - RuleContext (an import cycle)
               decorator: cst.Decorator, sizes: dict[str, int], warps: int, depth: int, why: str
               ) -> tuple[cst.Decorator, RingConfig] | None:
    """`@triton.autotune(configs=[...])` with one more `triton.Config`: the first config's values with the tile
    `sizes`, `warps` warps and ring depth `depth`. None where the tile sizes are not plain names that every config
    sets to integers, the configs are not a literal list, or a config with that tile and warps is there already."""
    call = decorator.decorator
    if not isinstance(call, cst.Call):
        return None
    configs = ctx.function.autotune_configs
    if not configs or any(not isinstance(c.values.get(x), int) for c in configs for x in sizes):
        return None
    if any(all(c.values[x] == v for x, v in sizes.items()) and c.num_warps == warps for c in configs):
        return None
    arg = next((a for a in call.args if a.keyword is not None and a.keyword.value == "configs"), None)
    if arg is None or not isinstance(arg.value, cst.List) or not arg.value.elements:
        return None
    values = dict(configs[0].values)
    values.update(sizes)
    first = arg.value.elements[0].value
    config_call = code(first.func) if isinstance(first, cst.Call) else "triton.Config"
    text = ", ".join(f"{key!r}: {value!r}" for key, value in values.items()).replace("'", '"')
    # The first config's other options (`pre_hook=`, `maxnreg=`, `num_ctas=`) go with the new one too.
    others = "".join(f", {a.keyword.value}={code(a.value)}" for a in getattr(first, "args", ())
                     if a.keyword is not None and a.keyword.value not in ("num_warps", "num_stages", "kwargs"))
    new = cst.parse_expression(f"{config_call}({{{text}}}, num_warps={warps}, num_stages={depth}{others})")
    elements = list(arg.value.elements)
    last = elements[-1]
    # The new config goes last, laid out like the others: the separator between two configs (one per line, or a
    # space) before it, the last config's own trailing comma and closing layout after it.
    separator = elements[-2].comma if len(elements) > 1 else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    elements[-1] = last.with_changes(comma=separator)
    elements.append(cst.Element(new, comma=last.comma))
    ctx.added_configs.append(", ".join(f"{x}={v}" for x, v in sizes.items())
                             + f", num_warps={warps}, num_stages={depth} ({why})")
    new_arg = arg.with_changes(value=arg.value.with_changes(elements=elements))
    config = RingConfig(f"config {len(configs)}", values, warps, f"added: {why}")
    return decorator.with_changes(decorator=call.with_changes(args=[new_arg if a is arg else a for a in call.args])), \
        config
