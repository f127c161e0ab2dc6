"""NVIDIA Hopper (sm90) rule set: wgmma for `tl.dot`, TMA for tensor descriptors.

The output must compile under Triton 3.6 (the GPU machines) and 3.9 (the newest release): where the two spell an
API differently, the helpers go through module-level aliases (see docs/DESIGN.md).
"""

from __future__ import annotations

from transpile.rules.descriptors import DescriptorsAsTMA
from transpile.rules.dot import Dot
from transpile.rules.hoist import HoistConversions
from transpile.rules.hopper_attention import HopperAttentionPipeline
from transpile.rules.hopper_attention_ws import HopperAttentionWarpSpecialize
from transpile.rules.hopper_cp_async import HopperCpAsyncPipeline
from transpile.rules.hopper_pipeline import HopperTMAPipeline
from transpile.rules.language import Barrier, JitDecorator, LanguageNames, Transpose
from transpile.rules.layouts import CreationLayouts, HelperTupleConversions, LayoutDeclarations
from transpile.rules.ranges import Ranges
from transpile.targets import Target
from transpile.helpers import helper
from transpile.targets.snippets import COMMON, LAUNCHERS

RULES = (JitDecorator(), LanguageNames(), Barrier(), Ranges(), Transpose(), CreationLayouts(), HelperTupleConversions(),
         Dot(), HoistConversions(), DescriptorsAsTMA(), HopperAttentionPipeline(), HopperTMAPipeline(),
         LayoutDeclarations(), HopperCpAsyncPipeline(), HopperAttentionWarpSpecialize())

IMPORTS = (
    "from triton.experimental import gluon",
    "from triton.experimental.gluon import language as gl",
    "from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, "
    "warpgroup_mma, warpgroup_mma_wait",
    "from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2",
    # Only where a variant uses them (`tl.sigmoid` as Triton's own code, `tl.PropagateNan` values).
    "from triton.language import PropagateNan, random as tl_random, standard as tl_standard",
)

SM90 = Target(
    name="sm90",
    aliases=("hopper",),
    backend="cuda",
    arch=90,
    warp_size=32,
    mma="wgmma (hopper.warpgroup_mma, NVMMADistributedLayout version [3, 0])",
    copy_engine="TMA for descriptors; cp.async for pointer tiles",
    shared_memory_bytes=227 * 1024,
    min_triton=(3, 6),
    scaled_mma="",
    scaled_upcast=True,
    tile_scale_min_warps=8,
    snippet_needs={"dot_scaled": ("dot",)},
    rules=RULES,
    imports=IMPORTS,
    snippets={
        "blocked_layout": helper("common", "_blocked_layout", WARP_SIZE=32, warp_size=32),
        "acc_dtype": COMMON["acc_dtype"],
        "cta_barrier": COMMON["cta_barrier"],
        "expand_scalar": COMMON["expand_scalar"],
        "mma_layout": helper("hopper", "_mma_layout", "_mma_sync_warps"),
        "mma_k_width": helper("hopper", "_mma_k_width"),
        "mma_sync": helper("hopper", "_is_mma_sync", "_mma_sync_operand"),
        "dot": helper("hopper", "_dot_a_in_registers", "_dot"),
        "with_depth": helper("hopper", "_with_depth", "_other_depth"),
        "dot_scaled": helper("hopper", "_scaled_compute_type", "_upcast_scaled", "_dot_scaled"),
        "mma_sync_slots": helper("hopper", "_mma_sync_slots"),
        "wgmma_a_regs": helper("hopper", "_wgmma_a_regs"),
        "register_a_layout": helper("hopper", "_register_a_layout"),
        "tma_aliases": helper("hopper", "_tma_async_load", "_tma_async_store"),
        "ws_wgmma_consumer": helper("hopper", "_ws_wgmma_consumer"),
        "ws_turns": helper("hopper", "_ws_turn_wait", "_ws_turn_pass"),
        "cp_async": helper("hopper", "_cp_async_load"),
        "copy_layout": helper("hopper", "_copy_layout"),
        "autotune_stages": helper("hopper", "_autotune_stages"),
        "tma_load": helper("hopper", "_tma_load"),
        "tma_store": helper("hopper", "_tma_store"),
        "tma_store_deferred": helper("hopper", "_tma_store_deferred"),
        "fit_stages": helper("hopper", "_fit_stages"),
        "tiles_fit": helper("hopper", "_tiles_fit"),
        "persistent_grid": LAUNCHERS["persistent_grid"],
        "tma_or_triton": LAUNCHERS["tma_or_triton"],
        "tma_scratch": LAUNCHERS["tma_scratch"],
        "host_made": LAUNCHERS["host_made"],
        "made_on_host": LAUNCHERS["made_on_host"],
        "one_wave_or_triton": LAUNCHERS["one_wave_or_triton"],
        "config_split": LAUNCHERS["config_split"],
        "launch_values": LAUNCHERS["launch_values"],
        "host_descriptors": LAUNCHERS["host_descriptors"],
        "aligned_or_triton": LAUNCHERS["aligned_or_triton"],
        "kmajor_copy": LAUNCHERS["kmajor_copy"],
    },
)
