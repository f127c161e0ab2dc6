"""What became of each jit function of a translated file (`KernelOutcome`): read by the engine, the policy that keeps
kernels as Triton (`transpile.policy`), the launchers (`transpile.launches`), `explain` and the command line."""

from __future__ import annotations

from dataclasses import dataclass, field

from transpile.diagnostics import Diagnostic
from transpile.passes.kmajor_copy import KMajorLaunch
from transpile.passes.tma_tiles import Dispatch


KEPT = "kept as Triton"


@dataclass
class KernelOutcome:
    """What became of one jit function of a file for one target: translated (and pipelined) or kept as Triton, with
    the diagnostics, the reason, and how the variant launches it."""

    name: str
    is_helper: bool
    translated: bool  # the variant holds a Gluon form of it (else its source `@triton.jit` function, kept)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    num_warps: int | None = None  # the warps the variant must be launched with (a warp-pipelined loop needs 8)
    pipelined: bool = False  # a pipeline rule rewrote one of its loops
    kept_reason: str = ""  # why it is kept as Triton (when not translated)
    # kept by the profitability policy alone: every loop left unpipelined is a form measured slower than Triton's own
    # (`rules.base.UNPROFITABLE_RINGS`), its reason that measurement
    measured_keep: bool = False
    module_functions: list[str] = field(default_factory=list)  # emitted right before it (see RuleContext)
    added_configs: list[str] = field(default_factory=list)  # autotune configs the variant added (see RuleContext)
    # sm90 persistent form: the `meta` test under which its launches take one program per SM (`_persistent_grid`)
    persistent_grid: str | None = None
    schedules: list[object] = field(default_factory=list)  # what its pipelined loops were emitted from (RuleContext)
    # sm90: the kernel was rewritten with its pointer tiles as TMA descriptors (`transpile.passes.tma_tiles`): the
    # variant also keeps the source kernel, and a launcher picks one per launch
    dispatch: Dispatch | None = None
    ws_config: bool = False  # sm90: an autotune config of its compiles the warp-specialised ring (RuleContext)
    # sm90, kept as Triton: launches with 8-bit or tf32 B read N-contiguous run it on a K-major copy of B
    # (`transpile.passes.kmajor_copy`)
    kmajor: KMajorLaunch | None = None
    # kept as Triton: its scaled accumulation's per-column factor holds one value per tile where the group test
    # holds, and its loop is unswitched on that test (`transpile.passes.tile_scales`)
    tile_scaled: bool = False

    @property
    def status(self) -> str:
        """"pipelined", "translated" or "kept as Triton"."""
        return KEPT if not self.translated else "pipelined" if self.pipelined else "translated"

    @property
    def reason(self) -> str:
        return self.kept_reason if not self.translated else ""
