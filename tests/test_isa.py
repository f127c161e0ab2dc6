"""`transpile verify --isa`: the machine-code figures of a kernel and its variant (transpile/isa.py), and the AMD
profitability bar: a warp-pipelined variant's hot loop is never heavier than Triton's own compile of its source.

The parsing tests read small assembly texts written here; the compile tests (marked slow) compile fixtures for the
AMD targets on the CPU, as `verify --isa` does.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from transpile.isa import amd_figures, hot_loop, loop_mix, ptx_figures
from transpile.targets import get_target

ASM = """
	.text
k:
	s_load_dwordx2 s[0:1], s[2:3], 0x0
	s_mov_b32 s4, 0
.LBB0_1:                                ; %.lr.ph
                                        ; =>This Inner Loop Header: Depth=1
	s_waitcnt vmcnt(2)
	s_barrier
	v_mfma_f32_32x32x16_f16 v[0:15], v[32:35], v[36:39], v[0:15]
	v_mfma_f32_32x32x16_f16 v[16:31], v[32:35], v[40:43], v[16:31]
	s_setprio 1
	ds_read_b128 v[32:35], v44
	ds_read_b64_tr_b16 v[36:37], v45 offset:1024
	v_cndmask_b32_e64 v46, v47, v48, s[6:7]
	buffer_load_dwordx4 v46, s[8:11], 0 offen lds
	s_add_u32 s8, s8, 0x80 ; a comment after an instruction
	s_setprio 0
	s_cmp_lg_u32 s4, s5
	s_cbranch_scc1 .LBB0_1
; %bb.2:
	v_mfma_f32_32x32x16_f16 v[0:15], v[32:35], v[36:39], v[0:15]
	global_store_dwordx4 v[50:51], v[0:3], off
	s_endpgm
; NumVgprs: 52
; NumAgprs: 0
; TotalNumVgprs: 52
; ScratchSize: 0
; Occupancy: 8
	.vgpr_spill_count: 0
	.sgpr_spill_count: 0
"""


def test_hot_loop_reads_loop_marks_on_the_lines_below_the_label() -> None:
    """LLVM writes a loop header's marks on comment lines under a long label (`.LBB0_1: ; %.lr.ph` then `; =>This
    Inner Loop Header`): the loop is found from them, not from any backward branch."""
    body = hot_loop(ASM)
    assert body[0] == "s_waitcnt vmcnt(2)" and body[-1] == "s_cbranch_scc1 .LBB0_1"
    assert not any("global_store" in line for line in body)


ROTATED = """
	s_mov_b32 s4, 0
.LBB0_3:                                ; =>This Loop Header: Depth=1
	s_add_i32 s4, s4, 1
	s_branch .LBB0_6
.LBB0_5:                                ;   in Loop: Header=BB0_6 Depth=2
	s_add_i32 s5, s5, -1
	s_cbranch_scc0 .LBB0_7
.LBB0_6:                                ;   Parent Loop BB0_3 Depth=1
                                        ; =>  This Inner Loop Header: Depth=2
	v_mfma_f32_32x32x8_f16 v[0:15], v[32:33], v[34:35], v[0:15]
	ds_read_b64 v[32:33], v40
	s_branch .LBB0_5
.LBB0_7:                                ;   in Loop: Header=BB0_3 Depth=1
	v_cvt_f16_f32_e32 v50, v0
	global_store_dwordx2 v[52:53], v[50:51], off
	s_cbranch_scc1 .LBB0_3
	s_endpgm
"""


def test_hot_loop_takes_a_rotated_inner_loop_whose_latch_jumps_to_a_block_before_its_header() -> None:
    """LLVM may lay a loop's latch block before its header (`.LBB0_5: ; in Loop: Header=BB0_6`, the back edge then
    jumps there): that block's loop is the inner one, not the tile loop around it with its epilogue (a persistent
    GEMM's stores)."""
    body = hot_loop(ROTATED)
    assert body[0] == "s_add_i32 s5, s5, -1" and body[-1] == "s_branch .LBB0_5", body
    assert not any("global_store" in line for line in body)


def test_loop_mix_counts_each_kind() -> None:
    mix = loop_mix(hot_loop(ASM))
    assert (mix.mma, mix.lds_direct, mix.global_loads, mix.ds_reads, mix.ds_writes) == (2, 1, 0, 2, 0)
    assert (mix.waits, mix.barriers, mix.setprio, mix.valu) == (1, 1, 2, 1)
    assert mix.salu == 2  # s_add_u32, s_cmp_lg_u32 (branches are not counted as SALU)
    assert mix.instructions == 13
    # two 32x32x16 MFMAs are four 16x16x32 ones of work; 11 other instructions
    assert mix.mma_eq == 4.0 and mix.other_per_mma_eq == 2.75


def test_gfx1250_asynchronous_copies_are_direct_to_lds() -> None:
    """`global_load_async_to_lds_b128` (gfx1250's copy of a pointer tile into LDS) is a direct-to-LDS copy, not a
    load into registers (it was counted as one)."""
    mix = loop_mix(["global_load_async_to_lds_b128 v1, v[2:3], off", "global_load_b128 v[4:7], v[2:3], off"])
    assert (mix.lds_direct, mix.global_loads) == (1, 1)


def test_amd_figures_read_the_assemblers_comments() -> None:
    figures = amd_figures(ASM, lds_bytes=65536)
    assert (figures.vgprs, figures.agprs, figures.occupancy, figures.spills, figures.lds_bytes) == (52, 0, 8, 0,
                                                                                                   65536)
    data = figures.as_dict()
    assert data["hot_loop"]["other_per_mma_eq"] == 2.75 and json.dumps(data)


def test_a_kernel_without_an_mma_loop_has_no_hot_loop() -> None:
    assert amd_figures("k:\n\ts_endpgm\n").loop is None


def test_the_ratio_is_taken_per_loop_iteration_where_a_compile_replicates_mfmas() -> None:
    """Triton's own attention at 16 rows a warp issues 32-row MFMAs (24 units of work where an iteration asks 16): per
    MFMA its overhead would look lower than it is. Where the loop's work is known the ratio is per iteration (the
    variant's loop unrolled by its ring depth: 48 units, 3 iterations); else, and where the variant itself issues
    work that is not a whole number of iterations, per MFMA."""
    from transpile.isa import AmdFigures, HotLoop
    from transpile.verify import IsaComparison

    source = AmdFigures(loop=HotLoop(instructions=416, mma=12, mma_eq=24.0))
    variant = AmdFigures(loop=HotLoop(instructions=723, mma=48, mma_eq=48.0))
    per_mma = IsaComparison("k", "config 0", 8, "pipelined", source, variant)
    assert per_mma.ratio == round((675 / 48) / (404 / 24), 2) == 0.84 and per_mma.per_iteration is None
    per_iteration = IsaComparison("k", "config 0", 8, "pipelined", source, variant, work=16.0)
    assert per_iteration.per_iteration == (404.0, 225.0) and per_iteration.ratio == 0.56
    replicated = AmdFigures(loop=HotLoop(instructions=723, mma=40, mma_eq=40.0))
    assert IsaComparison("k", "c", 8, "pipelined", source, replicated, work=16.0).per_iteration is None
    # without replication the two agree: a GEMM loop whose work is its MFMAs
    gemm = IsaComparison("k", "c", 8, "pipelined", AmdFigures(loop=HotLoop(instructions=80, mma=16, mma_eq=16.0)),
                         AmdFigures(loop=HotLoop(instructions=136, mma=48, mma_eq=48.0)), work=16.0)
    assert gemm.ratio == round((88 / 48) / (64 / 16), 2)


def test_ptx_counts() -> None:
    ptx = """
    cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r2, %r3}], [%r4];
    cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd2, {%r5, %r6}], [%r7];
    @%p1 cp.async.cg.shared.global [%r8], [%rd3], 16;
    wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%f1}, %rd4, %rd5, 1, 1, 1, 0, 1;
    wgmma.wait_group.sync.aligned 1;
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r9], %r10;
    bar.sync 0;
    """
    figures = ptx_figures(ptx)
    assert (figures.tma_loads, figures.tma_stores, figures.cp_async, figures.wgmma, figures.wgmma_waits,
            figures.mbarrier_waits, figures.barriers) == (1, 1, 1, 1, 1, 1, 1)


# --------------------------------------------------------------------------------------------------------------------
# Compiled: the variant against its source

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
VALUES = json.loads((FIXTURES / "verify.json").read_text(encoding="utf-8"))

# The dot-loop fixtures the AMD rules would pipeline: the GEMM family, and attention (gfx950 and gfx942; gfx1250 keeps
# it as Triton, as it does where K is read [HEAD_DIM, BLOCK_N]: fx_attention_kt, fx_attention_varlen).
PIPELINED = ["attention_fwd", "fx_attention_two_loops", "fx_attention_v_late", "suite_attn_inner_stages",
             "fx_attention_kt", "fx_attention_moved_ptrs", "fx_attention_varlen", "suite_gqa_attention", "matmul_grouped", "canon_gemm_iadd", "canon_gemm_nt", "suite_linear_trans_b", "suite_moe_grouped_rows", "canon_gemm_recompute", "suite_gemm_evenk", "suite_gemm_kaddr", "suite_gemm_flag_masks",
             "matmul_int8", "matmul_splitk", "moe_gather_gemm", "suite_bmm", "suite_bmm_divisible", "suite_alias_gemm", "fx_two_gemms",
             "suite_gemm_bias_gelu", "suite_int8_rowscale", "suite_scaled_mm_carried", "suite_gemm_acc_type", "suite_gated_linear", "suite_swiglu_gemm", "suite_gemm_persistent", "suite_splitk_atomic",
             "suite_gemm_persistent_flat", "suite_moe_sorted", "matmul_descriptor", "canon_linear_desc_bias", "fx_desc_epilogue",
             "suite_desc_persistent", "suite_cast_operand_gemm", "suite_mx_gemm", "suite_segment_gemm",
             "suite_chunk_products", "suite_attention_bwd", "fx_mla_prefill", "suite_fp8_blockscale",
             "suite_rms_linear", "suite_paged_prefill", "suite_padded_head_attention", "suite_gemm_peeled_tail",
             "suite_gemm_even_mn", "suite_desc_linear", "canon_desc_carried_nt", "suite_decode_linear",
             "suite_gemm_small_warps", "grouped_gemm_ptr_array", "gated_operand_gemm",
             "suite_a8w8_output_acc", "suite_chunk_states", "bc_dequant_matmul", "suite_w4a16_gptq",
             "suite_block_fp8_linear"]
# Fixtures whose dot reads an operand computed from a loaded tile (a cast, a dequantisation): the computation's
# arithmetic, the same in both, dilutes the ring's gain, so their bar is "never heavier" (at most 1.0x) on every target
# (bench/RESULTS.md: computed operands).
COMPUTED = {"suite_cast_operand_gemm", "gated_operand_gemm", "bc_dequant_matmul", "suite_w4a16_gptq"}
# Fixtures whose dot's product is scaled before it is added (block-scaled GEMMs): the same bar, for the same reason
# (the scaling's multiply-adds, one per value in both; bench/RESULTS.md: block-scaled GEMMs).
SCALED_PRODUCTS = {"suite_fp8_blockscale", "suite_block_fp8_linear"}


@pytest.mark.slow
@pytest.mark.parametrize("target", ["gfx950", "gfx942", "gfx1250"])
@pytest.mark.parametrize("fixture", PIPELINED)
def test_a_pipelined_variant_is_never_heavier_than_its_source(fixture: str, target: str,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    """For every config the variant pipelines by default: the hot loop's non-MFMA instructions per MFMA of work at
    most 0.8x the source's (Triton 3.9's own compile, same constexprs, warps and aligned launch; on gfx942, whose
    pointer copies go through registers, at most 1.0x), no more VGPR spills, and on gfx950 direct-to-LDS copies. A form that cannot meet this is kept as Triton by the profitability policy
    (UNPROFITABLE_RINGS), or its launcher runs the source kernel for the element types where it does not.
    A config whose source needs more LDS than the target has (it would not launch) is not compared."""
    from transpile.engine import translate_file
    from transpile.targets import get_target
    from transpile.verify import isa_compare

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    result = translate_file(FIXTURES / f"{fixture}.py", get_target(target), f"fixtures/{fixture}.py")
    if not any(f.pipelined for f in result.functions):
        pytest.skip(f"{fixture} is kept as Triton for {target}")
    comparisons = isa_compare(result, VALUES.get(f"{fixture}.py", {}))
    assert comparisons
    for c in comparisons:
        _never_heavier(c, fixture, target)


def _never_heavier(c, fixture: str, target: str) -> None:  # noqa: ANN001 - a verify.IsaComparison
    """The bar of a pipelined launch: at most 0.8x the source's non-MFMA instructions per loop iteration (1.0x on
    gfx942, for computed operands and for scaled products), no more VGPR spills, direct-to-LDS copies on gfx950."""
    if c.status != "pipelined":
        return
    assert c.source is not None and c.variant is not None, c.message
    # gfx942's pointer copies go through registers (no direct-to-LDS copy of 16 bytes a lane): never heavier;
    # gfx950's and gfx1250's go straight into LDS
    bar = 1.0 if target == "gfx942" or fixture in COMPUTED | SCALED_PRODUCTS else 0.8
    assert c.ratio is not None and c.ratio <= bar, (c.label, c.ratio)
    # no more VGPR spills (to scratch memory); SGPR spills go to VGPR lanes (`v_writelane`), not to memory
    assert (c.variant.vgpr_spills or 0) <= (c.source.vgpr_spills or 0), (c.label, c.variant.vgpr_spills)
    assert (c.variant.scratch_bytes or 0) <= (c.source.scratch_bytes or 0), (c.label, c.variant.scratch_bytes)
    if target == "gfx950":
        assert c.variant.loop is not None and c.variant.loop.lds_direct > 0, c.label


# The GEMM fixtures whose block sizes their launch gives (fixtures/verify.json, not an autotune table): also at the
# two standard tiles of 8 warps. gfx950 at both; gfx1250 at the larger, where registers run out first (gfx942 at
# both: bench/RESULTS.md, "Fixture kernels at the standard tiles"; left out here for the test run's time).
TILED = ["canon_gemm_nt", "suite_linear_trans_b", "canon_gemm_recompute", "suite_gemm_evenk", "suite_gemm_flag_masks",
         "matmul_splitk", "moe_gather_gemm", "suite_bmm", "fx_two_gemms", "suite_swiglu_gemm", "suite_gemm_persistent",
         "suite_splitk_atomic", "suite_moe_sorted"]
TILES = {"128x128x64": {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8},
         "256x256x32": {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 32, "num_warps": 8}}


@pytest.mark.slow
@pytest.mark.parametrize("target, tile", [("gfx950", "128x128x64"), ("gfx950", "256x256x32"),
                                          ("gfx1250", "256x256x32")])
@pytest.mark.parametrize("fixture", TILED)
def test_a_pipelined_variant_at_the_standard_tiles(fixture: str, target: str, tile: str,
                                                   monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """As above, at 128x128x64 and 256x256x32 with 8 warps: pipelined and at the bar, or the source kernel at that
    launch (a loop whose accumulators would spill, `REGISTER_LIMIT`)."""
    from transpile.engine import translate_file
    from transpile.targets import get_target
    from transpile.verify import isa_compare

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    result = translate_file(FIXTURES / f"{fixture}.py", get_target(target), f"fixtures/{fixture}.py")
    assert any(f.pipelined for f in result.functions), fixture
    comparisons = isa_compare(result, {**VALUES.get(f"{fixture}.py", {}), **TILES[tile]})
    assert comparisons
    for c in comparisons:
        _never_heavier(c, fixture, target)


@pytest.mark.slow
def test_verify_isa_command_line(tmp_path: Path) -> None:
    """`transpile verify --isa` prints both kernels' figures side by side (JSON too); the 256x256x32 tile of the
    tutorial-style GEMM is a third lighter than Triton's own hot loop on gfx950 and spills nothing."""
    from typer.testing import CliRunner

    from transpile.cli.app import tools

    args = ["verify", str(FIXTURES / "suite_gemm_evenk.py"), "-t", "gfx950", "--isa", "-v", "a_ptr=*fp16",
            "-v", "b_ptr=*fp16", "-v", "c_ptr=*fp16", "-v", "BLOCK_M=256", "-v", "BLOCK_N=256", "-v", "BLOCK_K=32",
            "-v", "EVEN_K=True"]
    result = CliRunner().invoke(tools, [*args, "--output-format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout[result.stdout.index("{"):])
    (row,) = data["targets"]["gfx950"]
    assert row["status"] == "pipelined" and row["num_warps"] == 8
    variant, source = row["variant"], row["source"]
    assert variant["vgpr_spills"] == 0 and variant["agprs"] == 0
    assert variant["hot_loop"]["lds_direct"] > 0 and variant["hot_loop"]["other_per_mma_eq"] <= 1.3
    assert row["ratio"] <= 0.8 and source["hot_loop"]["other_per_mma_eq"] > variant["hot_loop"]["other_per_mma_eq"]
    text = CliRunner().invoke(tools, args)
    assert text.exit_code == 0 and "non-MFMA per 16x16x32 MFMA" in text.stdout and "direct-to-LDS" in text.stdout


# --------------------------------------------------------------------------------------------------------------------
# The launcher of a warp-pipelined AMD kernel (run here with stand-in kernels and tensors: no GPU needed)


class _Kernel:
    def __init__(self, name: str, calls: list) -> None:
        self.name, self.calls = name, calls

    def __getitem__(self, grid):  # noqa: ANN001, ANN204
        return lambda *args, **kwargs: self.calls.append((self.name, kwargs))


class _Tensor:
    """What the launcher reads of a tensor: its address, strides, shape and element size."""

    def __init__(self, shape: tuple[int, ...], strides: tuple[int, ...], address: int = 4096, size: int = 2,
                 dtype: str = "torch.float16"):
        self.shape, self._strides, self.address, self.size, self.dtype = shape, strides, address, size, dtype

    def data_ptr(self) -> int:
        return self.address

    def stride(self) -> tuple[int, ...]:
        return self._strides

    def numel(self) -> int:
        total = 1
        for n in self.shape:
            total *= n
        return total

    def element_size(self) -> int:
        return self.size


def _launcher():  # noqa: ANN202
    target = get_target("gfx950")

    namespace: dict = {"triton": None, "_persistent_grid": None}
    exec(target.snippet("launch_values") + target.snippet("tma_or_triton") + target.snippet("warp_pipelined_or_triton"),
         namespace)  # noqa: S102 - the launcher's own text, as variants hold it
    return namespace["_WarpPipelinedOrTriton"]


def test_the_warp_pipelined_launcher_runs_the_source_kernel_where_two_ring_slots_do_not_fit() -> None:
    """gfx942's 64 KiB of LDS: a 128x256x128 tile of 1-byte elements needs 96 KiB for two slots of its rings (the
    Gluon kernel would run its loop unpipelined): the source kernel. 128x128x128 (64 KiB) fits: the Gluon kernel.
    Block sizes an autotuner picks (not among the arguments): the Gluon kernel, whose own check then decides."""
    calls: list = []
    rings = ((("BM", "BK"), "a"), (("BK", "BN"), "b"))
    launcher = _launcher()(_Kernel("gluon", calls), _Kernel("triton", calls), params=("a", "b", "K"), tiles=(),
                           persistent=None, warps=8, lds=(65536, rings))
    a, b = _Tensor((4096, 4096), (4096, 1), size=1), _Tensor((4096, 4096), (4096, 1), size=1)
    for sizes, kernel in (({"BM": 128, "BN": 256, "BK": 128}, "triton"), ({"BM": 128, "BN": 128, "BK": 128}, "gluon"),
                          ({}, "gluon")):
        launcher[(1,)](a, b, 4096, num_warps=8, **sizes)
        assert calls.pop()[0] == kernel, sizes
    launcher[(1,)](_Tensor((4096, 4096), (4096, 1), size=2), b, 4096, num_warps=8, BM=128, BN=128, BK=128)
    assert calls.pop()[0] == "triton"  # 16-bit A: 96 KiB


def test_the_warp_pipelined_launcher_counts_three_slots_where_the_ring_reads_a_tile_late() -> None:
    """A ring that reads a tile in its own iteration's `mma` stage (gfx1250's attention V, `StagePlan.late`) needs
    three slots to pipeline (`lds`'s third figure): a launch where two fit and three do not runs the source kernel,
    not the Gluon kernel's loop unpipelined."""
    calls: list = []
    rings = ((("BN", "D"), "k"), (("BN", "D"), "v"))
    launcher = _launcher()(_Kernel("gluon", calls), _Kernel("triton", calls), params=("k", "v"), tiles=(),
                           persistent=None, warps=8, lds=(65536, rings, 3))
    k = v = _Tensor((4096, 128), (128, 1), size=2)
    for sizes, kernel in (({"BN": 64, "D": 64}, "gluon"),  # 16 KiB a slot of both rings: 48 KiB
                          ({"BN": 64, "D": 128}, "triton")):  # 32 KiB: two slots fit, three do not
        launcher[(1,)](k, v, num_warps=8, **sizes)
        assert calls.pop()[0] == kernel, sizes


def test_the_warp_pipelined_launcher_runs_the_gluon_kernel_only_where_it_compiles_and_pays() -> None:
    """Aligned tensors under 2 GB, unit inner strides, 8 warps: the Gluon kernel, with accumulators kept out of
    AGPRs. Another warp count (or none: Triton's default 4, from another module), an unaligned row, a tensor of 2 GB
    or more, a tensor of an element type the target converts (gfx942's OCP fp8): the source kernel, with the
    arguments as given."""
    calls: list = []
    launcher = _launcher()(_Kernel("gluon", calls), _Kernel("triton", calls), params=("a", "b", "K", "stride_ak"),
                           tiles=(), persistent=None, aligned=True, divisible=("K",), unit=("stride_ak",), warps=8,
                           small=True, no_agprs=True, slow_dtypes=("float8_e4m3fn",))
    a, b = _Tensor((4096, 4096), (4096, 1)), _Tensor((4096, 4096), (4096, 1))
    launcher[(1,)](a, b, 4096, 1, num_warps=8)
    assert calls.pop() == ("gluon", {"num_warps": 8, "llvm_fn_attrs": (("amdgpu-agpr-alloc", "0,0"),)})
    for args, kwargs in [
        ((a, b, 4096, 1), {"num_warps": 4}),  # a caller's own 4 warps
        ((a, b, 4096, 1), {}),  # no num_warps: Triton's default
        ((a, b, 4100, 1), {"num_warps": 8}),  # K not a multiple of 16
        ((a, b, 4096, 2), {"num_warps": 8}),  # a strided inner dimension
        ((_Tensor((4096, 4095), (4095, 1)), b, 4096, 1), {"num_warps": 8}),  # rows not 16-byte aligned
        ((_Tensor((65536, 32768), (32768, 1)), b, 4096, 1), {"num_warps": 8}),  # 4 GB: past 32-bit offsets
        ((_Tensor((4096, 4096), (4096, 1), size=1, dtype="torch.float8_e4m3fn"), b, 4096, 1), {"num_warps": 8}),
    ]:
        launcher[(1,)](*args, **kwargs)
        assert calls.pop() == ("triton", kwargs), (args, kwargs)


def test_the_warp_pipelined_launcher_runs_the_source_kernel_where_a_compile_time_test_holds() -> None:
    """`source_when`: the Gluon kernel pipelines its loop for one value of a constexpr test only (the copy of an
    unswitched loop that casts its operands to `AB_DTYPE`): launches for which the test holds, by the argument, the
    keyword or the parameter's default, run the source kernel; so does a launch that leaves a name the test reads to a
    heuristic (no default, not passed)."""
    calls: list = []
    launcher = _launcher()(_Kernel("gluon", calls), _Kernel("triton", calls), params=("a", "b", "AB_DTYPE", "SPLIT"),
                           tiles=(), persistent=None, warps=8,
                           source_when=(lambda AB_DTYPE=None: AB_DTYPE is not None, lambda SPLIT: SPLIT > 1))
    a, b = _Tensor((4096, 4096), (4096, 1)), _Tensor((4096, 4096), (4096, 1))
    for args, kwargs, kernel in [
        ((a, b), {"SPLIT": 1, "num_warps": 8}, "gluon"),  # AB_DTYPE by its default (None)
        ((a, b, None, 1), {"num_warps": 8}, "gluon"),
        ((a, b), {"AB_DTYPE": "bf16", "SPLIT": 1, "num_warps": 8}, "triton"),
        ((a, b, None, 4), {"num_warps": 8}, "triton"),
        ((a, b), {"num_warps": 8}, "triton"),  # SPLIT from a heuristic: undecided here
    ]:
        launcher[(1,)](*args, **kwargs)
        assert calls.pop()[0] == kernel, (args, kwargs)


@pytest.mark.parametrize("target", ["gfx942", "gfx1250"])
def test_lds_slots_share_a_phase_across_rows_shorter_than_the_banks(target: str, tmp_path: Path) -> None:
    """`_lds_layout` (the variant's own helper, run as the variant runs it): K rows of 64 bytes (a [32, 256] fp16 B
    tile stored K-major) share a swizzle phase two by two, so a lane's stores into neighbouring rows pair up
    (`ds_write2_b32`): kernl's 128x256x32 batched matmul on gfx942 went from 1.07x to 0.98x Triton's non-MFMA
    instructions per MFMA. Rows of 128 bytes or more keep one phase each, as before."""
    import importlib.util
    import types

    from transpile.targets import get_target

    module = tmp_path / f"lds_ring_{target}.py"  # (Gluon reads a helper's source from its file, as in a variant)
    module.write_text("from triton.experimental import gluon\nfrom triton.experimental.gluon import language as gl\n"
                      + get_target(target).snippet("lds_ring"), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(module.stem, module)
    loaded = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(loaded)  # type: ignore[union-attr]
    layout = loaded._lds_layout
    fp16, int8 = types.SimpleNamespace(primitive_bitwidth=16), types.SimpleNamespace(primitive_bitwidth=8)

    def phases(shape, dtype, operand):  # noqa: ANN001, ANN202
        made = layout.fn(shape, dtype, operand) if hasattr(layout, "fn") else layout(shape, dtype, operand)
        return made.per_phase, made.max_phase

    vec = {"gfx942": 4, "gfx1250": 8}[target]  # fp16's k_width: the swizzle's vector
    assert phases([32, 256], fp16, 1) == (2, min(8, 32 // vec))  # B [K, N]: K rows of 64 bytes
    assert phases([128, 32], fp16, 0) == (2, min(8, 32 // vec))  # A [M, K]
    assert phases([64, 128], fp16, 1) == (1, min(16, 64 // vec))  # 128-byte rows: one phase each
    assert phases([128, 64], int8, 0)[0] == 2
