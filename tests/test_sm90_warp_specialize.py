"""sm90: the warp-specialised form of the TMA ring (issue 10): a loader partition emitted before the kernel, the
kernel's warps running `_ws_wgmma_consumer`, chosen at compile time for large tiles; the tile it is for added to an
autotuned kernel's configs (and named in the header); loops that do more than copy and multiply keep the ring only."""

from __future__ import annotations

from pathlib import Path

import pytest

from transpile.engine import translate_source
from transpile.targets import get_target

ROOT = Path(__file__).resolve().parents[1]
HEAD = "import triton\nimport triton.language as tl\n\n\n"

PLAIN = HEAD + '''@triton.jit
def gemm(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    off_m = tl.program_id(0) * BM
    off_n = tl.program_id(1) * BN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = a_desc.load([off_m, k])
        b = b_desc.load([k, off_n])
        acc += tl.dot(a, b)
    c_desc.store([off_m, off_n], acc.to(tl.float16))
'''

SCALED = PLAIN.replace("        acc += tl.dot(a, b)\n", "        acc += tl.dot(a, b)\n        acc = acc * 0.5\n")


def _sm90(text: str) -> str:
    return translate_source(text, "x.py", get_target("sm90")).text


def test_plain_descriptor_loop_gets_the_warp_specialised_form_for_large_tiles() -> None:
    text = _sm90(PLAIN)
    loader = text.index("def _gemm_tma_loader(a_desc, b_desc, BK: gl.constexpr, off_m, off_n, a_ring, b_ring, ready, "
                        "empty, num_iters):")
    assert loader < text.index("def gemm("), "the loader partition is emitted before its kernel"
    assert "k = it * BK" in text[loader:text.index("def gemm(")], "the loop variable is recomputed per iteration"
    # (BM, a constexpr each launch passes, may be fewer than a wgmma's 64 rows: the form tests that too)
    assert "if (\n            a_desc.block_type.shape[0] >= 64\n            and a_desc.block_type.shape[0] * b_desc.block_type.shape[1] >= 32768\n" \
        "            and gl.num_warps() >= 8\n        ):" in text or \
        "if a_desc.block_type.shape[0] >= 64 and a_desc.block_type.shape[0] * b_desc.block_type.shape[1] >= 32768 and gl.num_warps() >= 8:" \
        in text
    assert "acc = gl.warp_specialize([" in text and "], [1], [24])[0]" in text
    assert "def _ws_wgmma_consumer(a_ring, b_ring, ready, empty, num_iters, acc, TRANS_A" in text
    assert "(_ws_wgmma_consumer, (a_smem, b_smem, ready, empty, num_iters, acc))," in text
    # Both forms are there: the single-partition ring serves the smaller tiles.
    assert "acc, _, _ = warpgroup_mma_wait(1, deps=[acc, a_smem.index(slot), b_smem.index(slot)])" in text
    assert "autotune configs added" not in text, "a kernel without @triton.autotune gets no configs"


def test_loop_with_more_than_the_dot_keeps_the_ring_only() -> None:
    text = _sm90(SCALED)
    assert "warpgroup_mma(a_smem.index(slot)" in text, "the ring still pipelines it"
    assert "warp_specialize" not in text and "_tma_loader" not in text


def test_autotuned_kernel_gets_the_tile_as_one_more_config_named_in_the_header() -> None:
    text = translate_source((ROOT / "fixtures" / "matmul_descriptor.py").read_text(), "fixtures/matmul_descriptor.py",
                            get_target("sm90")).text
    assert ("# autotune configs added to `matmul_bias_act_kernel` for sm90: BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, "
            "num_warps=8, num_stages=3") in text.split('"""')[0]
    configs = text[text.index("@triton.autotune("):text.index("key=[")]
    assert configs.count("triton.Config(") == 3, configs
    assert ('        triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=4, num_stages=4),\n'
            '        triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, num_warps=8, num_stages=3),\n'
            '    ],') in configs, "the new config is laid out like the others"
    # The AMD targets get nothing of it.
    amd = translate_source((ROOT / "fixtures" / "matmul_descriptor.py").read_text(), "fixtures/matmul_descriptor.py",
                           get_target("gfx950")).text
    assert "autotune configs added" not in amd and "warp_specialize" not in amd


@pytest.mark.slow
def test_every_config_compiles_the_added_one_too() -> None:
    from transpile.verify import verify_file

    values = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "bias_ptr": "*fp16", "ACTIVATION": "leaky_relu"}
    results = verify_file(ROOT / "fixtures" / "matmul_descriptor.py", get_target("sm90"), values,
                          "fixtures/matmul_descriptor.py")
    # (each also with the descriptors its launcher makes on the host)
    assert [r.config for r in results if r.check == "compile"] == [
        f"{c}{h}" for c in ("config 0", "config 1", "config 2 (added)") for h in ("", " (descriptors made on the host)")
    ], results
    assert all(r.ok for r in results), [r.message for r in results if not r.ok]


@pytest.mark.slow
def test_warp_specialised_branch_of_a_plain_kernel_compiles(tmp_path: Path) -> None:
    from transpile.verify import verify_file

    source = tmp_path / "gemm.py"
    source.write_text(PLAIN)
    values = {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*fp16", "BM": 128, "BN": 256, "BK": 64, "num_warps": 8}
    results = verify_file(source, get_target("sm90"), values, "gemm.py")
    # (the kernel as launched, and with the descriptors its launcher makes on the host)
    assert [r.ok for r in results if r.check == "compile"] == [True, True], [r.message for r in results]
    assert all(r.ok for r in results), [r.message for r in results if not r.ok]


LINEAR_NT = PLAIN.replace("b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])",
                          "w_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])"
                          ).replace("        b = b_desc.load([k, off_n])\n        acc += tl.dot(a, b)\n",
                                    "        w = w_desc.load([off_n, k])\n        acc += tl.dot(a, w.T)\n")


def test_transposed_operand_of_a_linear_layer_is_read_through_a_transposed_view() -> None:
    """`tl.dot(x, w.T)` with w loaded as [N, K] (a linear layer's weights): the ring holds w's tiles as loaded and the
    wgmma reads `slot.permute((1, 0))`; the warp-specialised form gets TRANS_B and takes N from w's first dimension.
    On gfx950 the ring reads the same transposed view of w's slots, which its buffer copies fill from the
    descriptor as loaded ([N, K], K along the rows' 16-byte vectors)."""
    assert "w.T" in LINEAR_NT
    text = _sm90(LINEAR_NT)
    assert "acc = warpgroup_mma(a_smem.index(slot), w_smem.index(slot).permute((1, 0)), acc, is_async=True)" in text
    assert "(_ws_wgmma_consumer, (a_smem, w_smem, ready, empty, num_iters, acc, False, True))," in text
    # (BM, a constexpr each launch passes, may be fewer than a wgmma's 64 rows: the form tests that too)
    assert "if (\n            a_desc.block_type.shape[0] >= 64\n            and a_desc.block_type.shape[0] * w_desc.block_type.shape[0] >= 32768\n" \
        "            and gl.num_warps() >= 8\n        ):" in text or \
        "if a_desc.block_type.shape[0] >= 64 and a_desc.block_type.shape[0] * w_desc.block_type.shape[0] >= 32768 and gl.num_warps() >= 8:" \
        in text
    amd = translate_source(LINEAR_NT, "x.py", get_target("gfx950")).text
    assert "_desc_buffer_copy(w_desc, off_n, k_next, w_ring.index(step), 1)" in amd
    assert "w_t = async_copy.load_shared_relaxed(w_ring.index((step + 1) % NUM_STAGES).permute([1, 0])," in amd


INLINE = PLAIN.replace("        a = a_desc.load([off_m, k])\n        b = b_desc.load([k, off_n])\n        acc += tl.dot(a, b)\n",
                       "        acc += tl.dot(a_desc.load([off_m, k]), b_desc.load([k, off_n]))\n")


def test_loads_written_inside_the_dot_are_the_ring_producers() -> None:
    """`acc += tl.dot(a_desc.load(...), b_desc.load(...))`: the loads inside the dot fill the ring like loads of
    their own statements (before, "a dot operand is an expression" kept the kernel as Triton). AMD keeps it."""
    assert "a = a_desc" not in INLINE
    text = _sm90(INLINE)
    assert "acc = warpgroup_mma(a_desc_tile_smem.index(slot), b_desc_tile_smem.index(slot), acc, is_async=True)" in text
    assert "_tma_async_load(a_desc, [off_m, k], ready.index(slot), a_ring.index(slot))" in text  # the loader
    amd = translate_source(INLINE, "x.py", get_target("gfx950")).text
    assert "@triton.jit\ndef gemm" in amd


LAUNCHED = PLAIN + '''

def run(a, b, c):
    M, K = a.shape
    N = b.shape[1]
    grid = lambda META: (triton.cdiv(M, META["BM"]), triton.cdiv(N, META["BN"]))
    gemm[grid](a, b, c, M, N, K, BM=128, BN=256, BK=64, num_warps=8)
'''


def test_kernel_launched_in_its_file_gets_the_persistent_form() -> None:
    text = _sm90(LAUNCHED)
    # both partitions walk the tiles of the launch grid, restated in the kernel's terms
    assert "def _gemm_tile_loader(M, N, K, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr" in text
    assert "def _gemm_tile_consumer(a_ptr, b_ptr, c_ptr, M, N, K, BM: gl.constexpr" in text
    walk = ("for tile in range(gl.program_id(0) + gl.program_id(1) * gl.num_programs(0), gl.cdiv(M, BM) * "
            "gl.cdiv(N, BN), gl.num_programs(0) * gl.num_programs(1)):")
    assert text.count(walk) == 3  # loader, consumer, and the kernel's own per-tile walk for the other configs
    assert "off_m = program_0 * BM" in text and "_tma_store_deferred(c_desc, [off_m, off_n]" in text
    assert 'gemm[_persistent_grid(grid, lambda meta: meta["BM"] * meta["BN"] >= 32768)](' in text
    assert "_ws_wgmma_consumer" not in text  # the non-persistent WS form is not emitted beside it


def test_launches_with_grids_that_disagree_keep_the_non_persistent_form() -> None:
    other = LAUNCHED + '''

def run_other(a, b, c):
    M, K = a.shape
    N = b.shape[1]
    gemm[(triton.cdiv(M, 128), triton.cdiv(N, 128))](a, b, c, M, N, K, BM=128, BN=128, BK=64)
'''
    text = _sm90(other)
    assert "_persistent_grid" not in text and "_ws_wgmma_consumer" in text


def test_launch_grid_is_restated_through_the_launch_arguments() -> None:
    import libcst as cst

    from transpile.discover import discover
    from transpile.rules.hopper_persistent import launch_grid
    from transpile.source import parse_source

    text = LAUNCHED.replace("gemm[grid](a, b, c, M, N, K,", "gemm[grid](a, b, c, M, N, K=K,").replace(
        "grid = lambda META: (triton.cdiv(M, META[\"BM\"]), triton.cdiv(N, META[\"BN\"]))",
        "grid = lambda META: (triton.cdiv(M, META[\"BM\"]) * triton.cdiv(N, META[\"BN\"]),)")
    module = cst.parse_module(text)
    fn = discover(parse_source(text, "x.py")).functions["gemm"]
    assert launch_grid(module, fn) == ["gl.cdiv(M, BM) * gl.cdiv(N, BN)"]
    host_only = text.replace("triton.cdiv(N, META[\"BN\"])", "triton.cdiv(b.shape[1], META[\"BN\"])")
    assert launch_grid(cst.parse_module(host_only), fn) is None  # b.shape[1] is no argument of the launch


def test_persistent_form_compiles(tmp_path: Path) -> None:
    from transpile.verify import verify_file

    source = tmp_path / "gemm.py"
    source.write_text(LAUNCHED)
    for bn in (256, 128):  # the persistent warp-specialised configs, and the per-tile walk of the others
        values = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "BM": 128, "BN": bn, "BK": 64,
                  "num_warps": 8}
        results = verify_file(source, get_target("sm90"), values, "gemm.py")
        # (the kernel as launched, and with the descriptors its launcher makes on the host)
        assert [r.ok for r in results if r.check == "compile"] == [True, True], [r.message for r in results]
        # and the schedule checker follows its partitions through every case without a finding
        (schedule,) = [r for r in results if r.check == "schedule"]
        assert schedule.ok and schedule.config.startswith("schedule ("), schedule.message


def test_helper_reading_program_ids_keeps_the_non_persistent_form() -> None:
    helper = LAUNCHED.replace("@triton.jit\ndef gemm(", '''@triton.jit
def _tile_m(BM: tl.constexpr):
    return tl.program_id(0) * BM


@triton.jit
def gemm(''').replace("off_m = tl.program_id(0) * BM", "off_m = _tile_m(BM)")
    assert "off_m = _tile_m(BM)" in helper
    text = _sm90(helper)
    assert "_persistent_grid" not in text and "_ws_wgmma_consumer" in text


def test_launch_with_star_arguments_keeps_the_non_persistent_form() -> None:
    star = LAUNCHED.replace("gemm[grid](a, b, c, M, N, K,", "gemm[grid](*(a, b, c), M, N, K,")
    text = _sm90(star)
    assert "_persistent_grid" not in text and "_ws_wgmma_consumer" in text
