"""sm90: the warp-specialised attention (a TMA loader warp, two consumer warpgroups in ping-pong): what it emits for
an autotuned flash-attention kernel, and the TT044 note naming why a kernel keeps the ring."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from transpile.engine import translate_source
from transpile.formatting import format_texts
from transpile.rules.hopper_attention_ws import EXAMPLE
from transpile.targets import get_target

ROOT = Path(__file__).resolve().parents[1]

KERNEL = EXAMPLE  # an autotuned causal attention kernel in the tutorial's style

_CACHE: dict[str, object] = {}


def _translate(text: str):  # noqa: ANN202 - TranslationResult, its text formatted as the command line writes it
    if text not in _CACHE:
        result = translate_source(text, "k.py", get_target("sm90"))
        result.text = format_texts([result.text])[0]
        _CACHE[text] = result
    return _CACHE[text]


def _notes(result) -> list[str]:  # noqa: ANN001
    return [d.message for d in result.diagnostics if d.code == "TT044"]


def test_kernel_is_warp_specialised() -> None:
    result = _translate(KERNEL)
    text = result.text
    assert _notes(result) and "warp-specialised for the 128x128, 4-warp config" in _notes(result)[0]
    # the partitions: the kernel's own code per consumer (rows split), the loader's TMA copies
    assert "def _attn_ws_consumer(" in text and "def _attn_ws_loader(" in text
    consumer = text[text.index("def _attn_ws_consumer("):text.index("def _attn_ws_loader(")]
    assert "ROWS: gl.constexpr = BM // NCONS" in consumer
    assert re.search(r"rows = pid \* BM \+ \(\s*consumer \* ROWS \+ gl\.arange\(0, ROWS", consumer)
    assert "acc = gl.zeros([ROWS, D]" in consumer and "m_i = gl.full(\n        [ROWS]," in consumer
    assert "hi = gl.minimum((pid + 1) * BM, seq)" in consumer  # scalar arithmetic keeps the CTA's rows
    assert "_ws_turn_wait(turn, it, consumer)" in consumer and "_ws_turn_pass(turn, consumer, NCONS)" in consumer
    assert "mbarrier.arrive(k_empty.index(slot))" in consumer
    assert "mbarrier.arrive(v_empty.index(prev_slot), pred=it > 0)" in consumer
    loader = text[text.index("def _attn_ws_loader("):]
    assert "_tma_async_load(k_desc, [start_n, 0], k_ready.index(slot), k_ring.index(slot))" in loader
    # the kernel: the form under its compile-time test, descriptors per head, the partitions, the ring otherwise
    kernel = text[text.index("def attn("):]
    assert "if BM == 128 and gl.num_warps() == 4:" in kernel
    # (the K address's terms followed through `base = head * s_h`)
    assert re.search(r"k_desc = tma\.make_tensor_descriptor\(\s*k_ptr \+ head \* s_h,\s*shape=\[seq, D\],\s*"
                     r"strides=\[s_n, 1\],\s*block_shape=\[BN, D\]", kernel)
    # the scalars the descriptors and the loop range read, made before them (the kernel's own statements)
    assert re.search(r"head = gl\.program_id\(1\)\n\s*hi = gl\.minimum", kernel.split("else:")[0])
    assert re.search(r"\],\s*\[4, 1\],\s*\[240, 24\],?\s*\)", kernel)
    assert '"BM": 128, "BN": 128}, num_warps=4' in text  # the form's config, beside the ring's
    assert "async_copy.wait_group" in kernel  # the ring, for the other configs


def test_fixture_is_warp_specialised() -> None:
    path = ROOT / "fixtures" / "attention_fwd.py"
    result = translate_source(path.read_text(), "fixtures/attention_fwd.py", get_target("sm90"))
    assert any("warp-specialised for" in n for n in _notes(result))
    assert "def _attn_fwd_kernel_ws_consumer(" in result.text


@pytest.mark.parametrize(("old", "new", "why"), [
    ("    acc = acc / l_i[:, None]\n", "    if pid * BM >= seq:\n        return\n    acc = acc / l_i[:, None]\n",
     "the kernel returns early"),
    ("    acc = acc / l_i[:, None]\n",
     "    tl.store(o_ptr + head, tl.sum(l_i, axis=0))\n    acc = acc / l_i[:, None]\n",
     "reduces along another axis than 1"),
    ("    cols = tl.arange(0, BN)\n", "    cols = tl.arange(0, BN)\n    extra = tl.arange(0, BM)\n",
     "2 `tl.arange(0, BM)` row vectors"),
    ("mask=keys[:, None] < seq, other=0.0)\n        qk", "other=0.0)\n        qk", "rows are not masked"),
    # Q through a descriptor: its tile has the CTA's rows, a consumer would read the other's
    ("    q = tl.load(q_ptr + base + rows[:, None] * s_n + dims[None, :], mask=rows[:, None] < seq, other=0.0)\n",
     "    q_desc = tl.make_tensor_descriptor(q_ptr + base, shape=[seq, D], strides=[s_n, 1], block_shape=[BM, D])\n"
     "    q = q_desc.load([pid * BM, 0])\n", "through a descriptor"),
    # a shape the split would not divide
    ("    l_i = tl.zeros([BM], dtype=tl.float32)\n", "    l_i = tl.zeros([2 * BM], dtype=tl.float32)\n",
     "arithmetic inside a list or tuple"),
])
def test_refusals_name_the_construct(old: str, new: str, why: str) -> None:
    assert old in KERNEL
    result = _translate(KERNEL.replace(old, new))
    notes = _notes(result)
    assert notes and "no warp-specialised form" in notes[0] and why in notes[0], notes
    line = next(d.line for d in result.diagnostics if d.code == "TT044")
    assert "for start_n in range" in KERNEL.replace(old, new).splitlines()[line - 1]  # at the loop
    assert "gl.warp_specialize" not in result.text


def test_kernel_launched_with_fixed_tiles_is_warp_specialised_at_its_128_row_launches() -> None:
    """No autotune table to add the form's config to: the launcher runs the launches whose `BM` is 128 at the
    form's 4 warps (`retile`), whatever warps the caller asks for; the others run the ring."""
    from transpile.rules.hopper_attention_ws import FIXED_TILE

    result = _translate(FIXED_TILE)
    (note,) = _notes(result)
    assert "warp-specialised for launches with `BM` = 128, which the launcher runs at 4 warps" in note
    assert "if BM == 128 and gl.num_warps() == 4:" in result.text
    assert re.search(r'retile=\("BM", 128, 4\)', result.text)
    assert "triton.Config(" not in result.text  # no config added: there is no autotune table


def _golden(name: str):  # noqa: ANN202 - the golden sm90 variant of a fixture, imported (compiles nothing)
    path = ROOT / "fixtures" / "expected" / "sm90" / f"{name}_sm90.py"
    spec = importlib.util.spec_from_file_location(f"attention_ws_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("block_m", "warps", "expected"), [
    (128, 8, 4),  # the caller's 8 warps: the form's two 4-warp consumers (and its loader warp)
    (128, 4, 4),
    (64, 4, 4),  # other tiles run the ring at the caller's warps
    (64, 8, 8),
])
def test_the_launcher_runs_128_row_launches_at_the_forms_warps(block_m: int, warps: int, expected: int) -> None:
    module = _golden("suite_gqa_attention")
    seen: list = []

    class Kernel:
        def __getitem__(self, grid):  # noqa: ANN001, ANN204
            return lambda *args, **kwargs: seen.append(kwargs["num_warps"])

    launcher = module.gqa_attn_fwd_kernel
    launcher.gluon_kernel = Kernel()
    n, d = 4096, 128
    strides = (16 * n * d, n * d, d)
    q, k, v, o = (_Tensor(4096 * (i + 1), (*strides, 1)) for i in range(4))
    launcher[(n // block_m, 64)](q, k, v, o, 0.1, 16, n, *strides, *strides, *strides, GROUP=4, HEAD_DIM=d,
                                 BLOCK_M=block_m, BLOCK_N=64, CAUSAL=True, num_warps=warps, num_stages=3)
    assert seen == [expected]


def test_descriptors_of_moved_pointers_cast_offsets_and_packed_prompts() -> None:
    """The descriptors' base through `k_ptr += z.to(tl.int64) * stride_kz + ...` (the pointer parameter as passed,
    the cast kept), and a mask on rows shorter than the address's (packed prompts: `start_n + offs_n < end` on rows
    `seq_start + start_n + offs_n`) as the extent `end + seq_start`."""
    gqa = (ROOT / "fixtures" / "expected" / "sm90" / "suite_gqa_attention_sm90.py").read_text()
    assert re.search(r"k_desc = tma\.make_tensor_descriptor\(\s*k_ptr \+ z\.to\(gl\.int64\) \* stride_kz \+ "
                     r"kv_h \* stride_kh,\s*shape=\[N_CTX, HEAD_DIM\]", gqa)
    varlen = (ROOT / "fixtures" / "expected" / "sm90" / "fx_attention_varlen_sm90.py").read_text()
    assert re.search(r"k_desc = tma\.make_tensor_descriptor\(\s*K \+ cur_kv_head \* stride_kh,\s*"
                     r"shape=\[end \+ seq_start, BLOCK_DMODEL\]", varlen)
    loader = varlen[varlen.index("def _prefill_attn_kernel_ws_loader("):]
    assert "[seq_start + start_n, 0]" in loader.split("@gluon.jit")[0]


class _Tensor:
    """A contiguous fp16 tensor as the launcher sees it (address, strides, element size)."""

    def __init__(self, address: int, strides: tuple[int, ...]) -> None:
        self.address, self.strides = address, strides

    def data_ptr(self) -> int:
        return self.address

    def stride(self) -> tuple[int, ...]:
        return self.strides

    def element_size(self) -> int:
        return 2


class _Kernel:
    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log

    def __getitem__(self, grid):  # noqa: ANN001, ANN204
        return lambda *args, **kwargs: self.log.append(self.name)


@pytest.mark.parametrize(("causal", "head_dim", "expected"), [
    (True, 64, "gluon"),  # the flag: the ring (or the form) leaves out the causal mask
    (False, 128, "gluon"),  # full attention from a head dimension of 128: the warp-specialised form's config
    (False, 64, "gluon"),  # ... and at 64: its three-consumer config
    (False, 32, "triton"),  # below: no form measured faster than the source
])
def test_the_launcher_runs_full_attention_from_head_dimension_64(causal: bool, head_dim: int, expected: str) -> None:
    """The golden's launcher: launches without `CAUSAL` run the Gluon kernel where `HEAD_DIM` >= 64 (the
    three-consumer form measured 1.10x the source on full d64 attention, the two-consumer one 0.95x)."""
    path = ROOT / "fixtures" / "expected" / "sm90" / "attention_fwd_sm90.py"
    spec = importlib.util.spec_from_file_location("attention_ws_launcher", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)  # imports triton and gluon; compiles nothing
    log: list = []
    launcher = module.attn_fwd_kernel
    launcher.gluon_kernel, launcher.triton_kernel = _Kernel("gluon", log), _Kernel("triton", log)
    n = 1024
    strides = (16 * n * head_dim, n * head_dim, head_dim, 1)
    q, k, v, o = (_Tensor(4096 * (i + 1), strides) for i in range(4))
    launcher[(8, 32)](q, k, v, o, 0.1, *strides, *strides, *strides, *strides, 16, n, HEAD_DIM=head_dim,
                      CAUSAL=causal)
    assert log == [expected]


def test_p_cast_to_the_v_tile_type_is_read_as_q_type() -> None:
    """``p = p.to(v.dtype)`` before the second dot (a public style): the tile's type is not a use of the tile; the
    ring and the consumers, which hold no register tile `v`, read Q's type."""
    text = KERNEL.replace("        acc = tl.dot(p.to(tl.float16), v, acc)\n",
                          "        p = p.to(v.dtype)\n        acc = tl.dot(p, v, acc)\n")
    result = _translate(text)
    assert any("warp-specialised for" in n for n in _notes(result))
    consumer = result.text[result.text.index("def _attn_ws_consumer("):result.text.index("def _attn_ws_loader(")]
    assert "p.to(q.dtype)" in consumer and "v.dtype" not in consumer


def test_k_loaded_transposed_is_read_through_its_row_major_view() -> None:
    """K loaded [HEAD_DIM, BLOCK_N] (`tl.dot(q, k)` on `k_ptr + offs_n[None, :] * stride_kn + offs_d[:, None]`): the
    descriptor reads the [BLOCK_N, HEAD_DIM] tile the ring copies it as; QK^T reads its transposed view."""
    path = ROOT / "fixtures" / "fx_attention_kt.py"
    result = translate_source(path.read_text(), "fixtures/fx_attention_kt.py", get_target("sm90"))
    assert any("warp-specialised for" in n for n in _notes(result))
    text = result.text
    assert ("k_desc = tma.make_tensor_descriptor(K + off_b * stride_kb + off_h * stride_kh, shape=[seqlen, HEAD_DIM], "
            "strides=[stride_kn, 1], block_shape=[BLOCK_N, HEAD_DIM], layout=k_layout)") in text
    consumer = text[text.index("def _attn_kt_fwd_ws_consumer("):text.index("def _attn_kt_fwd_ws_loader(")]
    assert "k_ring.index(slot).permute((1, 0))" in consumer


def test_k_addressed_through_a_2d_name_made_of_a_2d_name_is_re_evaluated_transposed() -> None:
    """K loaded [D, BN] through `k_ptrs = k_ptr + off_k`, `off_k` itself a 2-D name (a public inference style): the
    ring re-evaluates both transposed from their 1-D parts; converting `k_ptrs` as it is would read K untransposed
    (wrong addresses, and a copy that does not compile: found on a public kernel)."""
    text = KERNEL.replace(
        "    hi = tl.minimum((pid + 1) * BM, seq)\n",
        "    hi = tl.minimum((pid + 1) * BM, seq)\n    off_k = cols[None, :] * s_n + dims[:, None]\n"
        "    k_ptrs = k_ptr + base + off_k\n").replace(
        "        k = tl.load(k_ptr + base + keys[:, None] * s_n + dims[None, :], mask=keys[:, None] < seq, other=0.0)\n"
        "        qk = tl.dot(q, tl.trans(k))\n",
        "        k = tl.load(k_ptrs + start_n * s_n, mask=keys[None, :] < seq, other=0.0)\n        qk = tl.dot(q, k)\n")
    assert "off_k" in text and "tl.dot(q, k)" in text
    result = _translate(text)
    kernel = result.text[result.text.index("\ndef attn("):]
    assert "gl.convert_layout(k_ptrs" not in kernel and "gl.convert_layout(off_k" not in kernel
    assert "off_k_ring = cols_ring[:, None] * s_n + dims_ring[None, :]" in kernel  # keys down the rows
    assert "k_ptrs_ring = k_ptr + base + off_k_ring" in kernel
    assert any("warp-specialised for" in n for n in _notes(result))


def test_tuple_shapes_are_split_too() -> None:
    """`tl.zeros((BM, D))`: a tuple shape is a tile's shape as a list is."""
    text = KERNEL.replace("tl.zeros([BM, D], dtype=tl.float32)", "tl.zeros((BM, D), dtype=tl.float32)").replace(
        "tl.full([BM], ", "tl.full((BM,), ")
    assert text != KERNEL
    result = _translate(text)
    assert any("warp-specialised for" in n for n in _notes(result))
    consumer = result.text[result.text.index("def _attn_ws_consumer("):result.text.index("def _attn_ws_loader(")]
    assert "acc = gl.zeros((ROWS, D)," in consumer and "(ROWS,)" in consumer


def test_p_cast_spelt_before_the_dot_is_made_after_pv_retires() -> None:
    """``p = p.to(v.dtype)`` then ``acc = tl.dot(p, v, acc)`` (lightllm's spelling): the cast is the PV operand's,
    made where P is converted to the wgmma A-operand layout, after the previous PV retires, in both forms; made
    before, while PV is in flight, the warp-specialised form measured 1.25x slower on an H200."""
    old = "        acc = tl.dot(p.to(tl.float16), v, acc)\n"
    assert old in KERNEL
    result = _translate(KERNEL.replace(old, "        p = p.to(v.dtype)\n        acc = tl.dot(p, v, acc)\n"))
    text = result.text
    consumer = text[text.index("def _attn_ws_consumer("):text.index("def _attn_ws_loader(")]
    kernel = text[text.index("def attn("):text.index("def _attn_triton(")]  # (not the source kernel's copy)
    for loop in (consumer, kernel):
        assert "p = p.to(" not in loop
        assert re.search(r"p_prev = gl\.convert_layout\(p\.to\(\w+\.dtype\), p_layout\)", loop), loop
        retire = loop.index("warpgroup_mma_wait(0, deps=[acc")
        assert retire < loop.index("p_prev = gl.convert_layout(p.to(")
    # read again after the dot: the statement stays where the source has it
    kept = _translate(KERNEL.replace(old, "        p = p.to(v.dtype)\n        acc = tl.dot(p, v, acc)\n"
                                          "        l_i += tl.sum(p.to(tl.float32), axis=1) * 0\n"))
    assert "p = p.to(" in kept.text[kept.text.index("def attn("):kept.text.index("def _attn_triton(")]


def test_head_dimensions_up_to_64_get_three_consumers() -> None:
    """An autotuned kernel whose head dimension is a constexpr gets a 192-row config too: three 64-row consumer
    warpgroups (160 registers each) and the loader, under a compile-time test of the head dimension; other head
    dimensions make the autotuner skip that config (a compile-time assertion in the ring's branch)."""
    text = _translate(KERNEL).text
    kernel = text[text.index("def attn("):text.index("def _attn_triton(")]
    assert re.search(r"elif \(?\s*BM == 192\s+and gl\.num_warps\(\) == 4\s+and D <= 64", kernel)
    assert re.search(r"\],\s*\[4, 4, 1\],\s*\[160, 160, 24\],?\s*\)", kernel)
    assert re.search(r"    else:\n        gl\.static_assert\(\s*BM != 192", kernel)
    assert '"BM": 192, "BN": 128}, num_warps=4' in text
    # a fixed launch keeps the caller's rows: no three-consumer branch
    from transpile.rules.hopper_attention_ws import FIXED_TILE

    assert "BM == 192" not in _translate(FIXED_TILE).text
