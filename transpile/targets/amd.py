"""AMD rule sets: gfx942 (MI300, CDNA3), gfx950 (MI350, CDNA4), gfx1250 (CDNA5)."""

from __future__ import annotations

from transpile.rules.amd_warp_pipeline import GFX1250_POINTER_COPY, AMDWarpPipeline
from transpile.rules.buffer_copies import BufferCopies
from transpile.rules.copy_operands import CopyOperandLayouts
from transpile.rules.descriptors import DescriptorsAsPointers
from transpile.rules.dot import Dot
from transpile.rules.hoist import HoistConversions
from transpile.rules.language import Barrier, JitDecorator, LanguageNames, Transpose
from transpile.rules.layouts import CreationLayouts, HelperTupleConversions, LayoutDeclarations
from transpile.rules.ranges import Ranges
from transpile.targets import Target
from transpile.helpers import helper
from transpile.targets.snippets import COMMON, LAUNCHERS

GLUON_IMPORTS = (
    "from triton.experimental import gluon",
    "from triton.experimental.gluon import language as gl",
    # Only where a variant uses them (`tl.sigmoid` as Triton's own code, `tl.PropagateNan` values).
    "from triton.language import PropagateNan, random as tl_random, standard as tl_standard",
)

def _rules(engine: str, pointer_copy: str | None = None, late_reads: bool = False) -> tuple:
    """The rules in the order they apply to each node; `engine` copies tensor-descriptor tiles into LDS,
    `pointer_copy` pointer tiles where it is another engine, `late_reads`: attention's V read right before its dot
    (AMDWarpPipeline)."""
    return (JitDecorator(), LanguageNames(), Barrier(), Ranges(), Transpose(), CreationLayouts(),
            HelperTupleConversions(), Dot(), HoistConversions(), DescriptorsAsPointers(),
            AMDWarpPipeline(engine, pointer_copy, late_reads), LayoutDeclarations(), CopyOperandLayouts(),
            BufferCopies())

def _amd_target(name: str, aliases: tuple[str, ...], arch: str, warp_size: int, mma: str, copy: str, lds: int,
                mma_snippets: dict[str, str], imports: tuple[str, ...], k_widths: str, engine: str,
                buffer_ops: str, pointer_copy: str | None = None, scaled_mma: str = "", late_reads: bool = False,
                transposed_a_operands: bool = True) -> Target:
    """`buffer_ops`: the module of the target's buffer loads (`gl.amd.cdna3`, ...); `pointer_copy`: its direct-to-LDS
    copy of a pointer tile where the descriptor tiles go by another engine (gfx1250)."""
    snippets = {
        "blocked_layout": helper("common", "_blocked_layout", WARP_SIZE=warp_size, warp_size=warp_size),
        "acc_dtype": COMMON["acc_dtype"],
        "dot_acc": helper("amd", "_dot_acc"),
        "cta_barrier": COMMON["cta_barrier"],
        "expand_scalar": COMMON["expand_scalar"],
        **mma_snippets,
        "desc_load": COMMON["desc_load"],
        "launch_values": LAUNCHERS["launch_values"],
        "host_descriptors": LAUNCHERS["host_descriptors"],
        "aligned_or_triton": LAUNCHERS["aligned_or_triton"],
        "lds_ring": helper("amd", "_lds_ring_bytes", "_ring_slots", "_lds_layout", K_WIDTHS=k_widths),
        "copy_layout": helper("amd", "_copy_layout", WARP_SIZE=warp_size),
        "transposed_copy_layout": helper("amd", "_transposed_copy_layout", WARP_SIZE=warp_size),
        "lds_copy": helper("amd", "_lds_copy_layout"),
        "desc_tile": helper("amd", "_desc_tile"),
        "desc_buffer_copy": helper("amd", "_desc_buffer_copy"),
        "register_copy": helper("amd", "_tile_load"),
        "buffer_register_copy": helper("amd", "_buffer_tile_load", BUFFER_OPS=buffer_ops),
        "buffer_load": helper("amd", "_buffer_load", BUFFER_OPS=buffer_ops),
        "desc_buffer_load": helper("amd", "_desc_buffer_load", BUFFER_OPS=buffer_ops),
        "lds_tile_copy": helper("amd", "_lds_tile_copy"),
        "lds_tdm": helper("amd", "_lds_tdm_layout"),
        "desc_store": COMMON["desc_store"],
        "run_time_aligned": COMMON["run_time_aligned"],
        "persistent_grid": LAUNCHERS["persistent_grid"],
        "tma_or_triton": LAUNCHERS["tma_or_triton"],
        "tma_scratch": LAUNCHERS["tma_scratch"],
        "warp_pipelined_or_triton": LAUNCHERS["warp_pipelined_or_triton"],
        "config_split": LAUNCHERS["config_split"],
    }
    return Target(name=name, aliases=aliases, backend="hip", arch=arch, warp_size=warp_size, mma=mma,
                  copy_engine=copy, shared_memory_bytes=lds, min_triton=(3, 9), rules=_rules(engine, pointer_copy, late_reads),
                  imports=(*GLUON_IMPORTS, *imports), snippets=snippets, scaled_mma=scaled_mma,
                  transposed_a_operands=transposed_a_operands)


def _mfma(arch: str, version: int, depths: str, k_widths: str, instr_name: str,
          float8: tuple[int | str, int | str, str, str], scaled: bool = False) -> dict[str, str]:
    """The MFMA snippets of `arch`; `float8`: the K depth and k_width of fp8 operands (numbers, or expressions of
    `dtype`), why (a comment), and the fp8 kinds the instructions take (a tuple's text; the others go through fp16);
    `scaled`: OCP fp8 dots go by the f8f6f4 instructions (`_f8f6f4`)."""
    float8_depth, float8_k_width, float8_why, float8_native = float8
    snippets = {
        "float8_via_fp16": helper("amd", "_float8_via_fp16", FLOAT8_NATIVE=float8_native, arch=arch),
        "mma_layout": helper("cdna", "_depth", "_mma_layout", DEPTHS=depths, FLOAT8_DEPTH=str(float8_depth), MFMA_VERSION=version,
                             arch=arch, float8_why=float8_why),
        "mma_k_width": helper("amd", "_mma_k_width", K_WIDTHS=k_widths, FLOAT8_K_WIDTH=str(float8_k_width), arch=arch),
        "dot": helper("amd", "_dot", MMA=instr_name, MMA_SCALED="mfma_scaled", SCALED_FP8=scaled, instr="MFMA",
                      instr_name=instr_name),
        "with_depth": helper("cdna", "_other_depth", "_with_depth"),
    }
    if scaled:
        snippets = {"f8f6f4": helper("amd", "_f8f6f4"), **snippets,
                    "scaled_layouts": helper("cdna", "_scaled_mma_layout", "_scaled_operand_layout", "_scale_layout"),
                    "dot_scaled": helper("amd", "_dot_scaled", MMA_SCALED="mfma_scaled", instr="scaled MFMA")}
    return snippets


GFX942 = _amd_target(
    "gfx942", ("mi300",), "gfx942", 64, "MFMA (gl.amd.cdna3.mfma, AMDMFMALayout version 3)",
    "16-byte buffer loads into registers + shared-memory stores", 64 * 1024,
    _mfma("gfx942", 3, "{8: 16, 16: 8, 32: 2}", "{8: 8, 16: 4, 32: 1}", "mfma",
          (16, 8, "the fp8 instructions of gfx942 are as deep as its int8 ones", '("fp8e4b8", "fp8e5b16")')),
    ("from triton.experimental.gluon.language.amd.cdna3 import mfma",), "{8: 8, 16: 4, 32: 1}", "registers",
    "gl.amd.cdna3",
    scaled_mma="has no scaled MFMA (Triton's own compile upcasts the operands to bf16 in software)",
    transposed_a_operands=False,
)
GFX950 = _amd_target(
    "gfx950", ("mi350",), "gfx950", 64, "MFMA (gl.amd.cdna4.mfma, AMDMFMALayout version 4)",
    "direct-to-LDS async copies", 160 * 1024,
    _mfma("gfx950", 4, "{8: 32, 16: 16, 32: 2}", "{8: 16, 16: 8, 32: 1}", "mfma",
          ('64 if _f8f6f4(dtype) != "" else 16', '16 if _f8f6f4(dtype) != "" and (layout is None or layout.instr_shape[2] >= 64 * (32 // '
           'layout.instr_shape[0])) else 8',
           "OCP fp8 goes by the f8f6f4 instructions (K 64 at 32x32: `mfma_scaled` without scales); the fnuz kinds "
           "by gl.amd.cdna4.mfma at the depth of gfx942's instructions", '("fp8e4nv", "fp8e5", "fp8e4b8", "fp8e5b16")'),
          scaled=True),
    ("from triton.experimental.gluon.language.amd.cdna4 import async_copy, get_mfma_scale_layout, mfma, mfma_scaled",),
    "{8: 16, 16: 8, 32: 1}",
    "async_copy",
    "gl.amd.cdna4",
)
GFX1250 = _amd_target(
    "gfx1250", (), "gfx1250", 32, "WMMA (gl.amd.gfx1250.wmma, AMDWMMALayout version 3)",
    "TDM for descriptors; direct-to-LDS async copies for pointer tiles", 320 * 1024,
    {
        "float8_via_fp16": helper("amd", "_float8_via_fp16", FLOAT8_NATIVE='("fp8e4nv", "fp8e5")', arch="gfx1250"),
        "mma_layout": helper("gfx1250", "_depth", "_mma_layout"),
        "mma_k_width": helper("amd", "_mma_k_width", K_WIDTHS="{8: 8, 16: 8, 32: 2}",
                              FLOAT8_K_WIDTH="16 if layout is not None and layout.instr_shape[2] >= 128 else 8",
                              arch="gfx1250 WMMA"),
        "dot": helper("amd", "_dot", MMA="wmma", SCALED_FP8=False, instr="WMMA", instr_name="wmma"),
        "with_depth": helper("gfx1250", "_other_depth", "_with_depth"),
        "scaled_layouts": helper("gfx1250", "_scaled_mma_layout", "_scaled_operand_layout", "_scale_layout"),
        "dot_scaled": helper("amd", "_dot_scaled", MMA_SCALED="wmma_scaled", instr="scaled WMMA"),
    },
    # Pointer tiles go by direct-to-LDS async copies (`global_load_async_to_lds`, as Triton's own gfx1250 code copies
    # them) from a scalar base at 32-bit offsets (`_lds_tile_copy`: gfx1250 has no buffer form of the copy); their slots
    # are read with a plain `.load` (its async_copy has no `load_shared_relaxed`). Measured against the buffer loads
    # into registers they replace: bench/RESULTS.md.
    ("from triton.experimental.gluon.language.amd.gfx1250 import async_copy, get_wmma_scale_layout, tdm, wmma, "
     "wmma_scaled",), "{8: 8, 16: 8, 32: 2}",
    "tdm", "gl.amd.gfx1250", pointer_copy=GFX1250_POINTER_COPY,
    # An attention loop's V is read from its slot right before the P V dot, not a step ahead beside K: its 32-lane
    # waves would hold both of the next iteration's tiles across the stage boundary (bench/RESULTS.md)
    late_reads=True,
)
