"""Score masks all true on most tiles (`transpile.analysis.uniform_mask`): the scalar test the analysis derives, the
masks it refuses, the branch the sm90 attention ring emits (compiled), the profitability policy and the config it
adds; and, evaluated over every tile of ragged problems, that the test holds only where every score passes."""

from __future__ import annotations

import re

import libcst as cst
import pytest

from transpile.analysis.uniform_mask import uniform_masks, unmasked
from transpile.engine import translate_source
from transpile.targets import get_target

KERNEL = '''import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=3)],
                 key=["N_CTX"])
@triton.jit
def attn(q_ptr, k_ptr, v_ptr, o_ptr, stride_n, N_CTX, qk_scale, D: tl.constexpr, BLOCK_M: tl.constexpr,
         BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + offs_m[:, None] * stride_n + offs_d[None, :], mask=offs_m[:, None] < N_CTX, other=0.0)
    k_ptrs = k_ptr + offs_n[:, None] * stride_n + offs_d[None, :]
    v_ptrs = v_ptr + offs_n[:, None] * stride_n + offs_d[None, :]
    m_i = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    for start_n in range(0, N_CTX, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_ptrs + start_n * stride_n, mask=cols[:, None] < N_CTX, other=0.0)
        qk = tl.dot(q, tl.trans(k))
MASK
        m_ij = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp2(qk - m_ij[:, None])
        alpha = tl.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        v = tl.load(v_ptrs + start_n * stride_n, mask=cols[:, None] < N_CTX, other=0.0)
        acc = tl.dot(p.to(tl.float16), v, acc)
        m_i = m_ij
    tl.store(o_ptr + offs_m[:, None] * stride_n + offs_d[None, :], acc / l_i[:, None], mask=offs_m[:, None] < N_CTX)
'''

CAUSAL_MASK = '''        valid = cols[None, :] < N_CTX
        if CAUSAL:
            valid = valid & (offs_m[:, None] >= cols[None, :])
        qk = tl.where(valid, qk * qk_scale, -float("inf"))'''


def _kernel(mask: str) -> str:
    return KERNEL.replace("MASK", mask)


def _masks(mask: str, additive: bool = False):  # noqa: ANN202
    module = cst.parse_module(_kernel(mask))
    fn = next(s for s in module.body if isinstance(s, cst.FunctionDef))
    loop = next(s for s in fn.body.body if isinstance(s, cst.For))
    outer = {}
    for s in fn.body.body:
        if isinstance(s, cst.SimpleStatementLine) and isinstance(s.body[0], cst.Assign):
            outer[s.body[0].targets[0].target.value] = s.body[0].value
    body = list(loop.body.body)
    tensors = {"offs_m", "offs_n", "offs_d", "cols", "q", "k", "v", "qk", "valid", "keep", "m_i", "l_i", "acc", "p",
               "alpha", "m_ij", "k_ptrs", "v_ptrs", "bound"}
    return uniform_masks(body, list(range(3, len(body))), "start_n", outer, tensors, {"CAUSAL"}, {"tl"},
                         additive=additive)


def test_causal_mask_gives_the_tile_test_term_by_term():
    [mask] = _masks(CAUSAL_MASK)
    assert mask.target == "qk" and mask.mask_indices == [3, 4] and mask.where_index == 5
    assert mask.test_lines("uniform") == [
        "uniform = start_n + BLOCK_N - 1 < N_CTX",
        "if CAUSAL:",
        "    uniform = uniform & ((start_m * BLOCK_M) >= start_n + BLOCK_N - 1)",
    ]


def test_inline_mask_and_a_vector_defined_before_the_loop():
    [mask] = _masks('        qk = tl.where((offs_m[:, None] >= cols[None, :]) & (cols[None, :] < N_CTX), qk, 0.0)')
    assert mask.mask_indices == []
    assert mask.test_lines("u") == ["u = ((start_m * BLOCK_M) >= start_n + BLOCK_N - 1) & (start_n + BLOCK_N - 1 < "
                                    "N_CTX)"]


@pytest.mark.parametrize("mask, steady", [
    ('        qk += tl.where(cols[None, :] < N_CTX, 0, -float("inf"))', "qk += 0"),
    ('        qk = qk * qk_scale + tl.where(offs_m[:, None] >= cols[None, :], 0, -1.0e6)', "qk = qk * qk_scale + 0"),
    ('        qk = tl.where(cols[None, :] < N_CTX, 0.0, -1.0e6) + qk', "qk = 0.0 + qk"),
])
def test_a_mask_added_to_the_scores_is_all_true_under_the_same_test(mask: str, steady: str) -> None:
    """`qk += tl.where(valid, 0, -inf)` (and `qk = e + tl.where(valid, 0, other)`, e reading `qk`) is the select form
    written as an addition: where the tile test holds it adds the where's zero, as the source does (the same
    arithmetic, no compare nor select). Only where asked (`additive`); a where adding a nonzero is left alone."""
    assert _masks(mask) == []
    [found] = _masks(mask, additive=True)
    assert found.target == "qk" and found.terms
    statement = cst.parse_module(_kernel(mask)).body[-1]
    loop = next(s for s in statement.body.body if isinstance(s, cst.For))  # type: ignore[attr-defined]
    text = cst.Module([]).code_for_node(unmasked(loop.body.body[found.where_index])).strip()
    assert text == steady
    assert _masks(mask.replace(", 0, ", ", 1, ").replace("0.0, -1", "1.0, -1"), additive=True) == []


@pytest.mark.parametrize("mask, why", [
    ('        valid = cols[None, :] < N_CTX\n        qk = tl.where(valid, qk, -1.0)\n        qk = qk + valid',
     "the mask is read by another statement"),
    ('        qk = tl.where(cols[None, :] != N_CTX, qk, -1.0)', "`!=` has no interval test"),
    ('        bound = tl.load(k_ptr + offs_n)\n        qk = tl.where(cols[None, :] < bound[None, :], qk, -1.0)',
     "a bound that is a tensor"),
    ('        qk = tl.where(cols[None, :] * 2 < N_CTX, qk, -1.0)', "a scaled index vector"),
    ('        qk = tl.where(qk > 0, qk, -1.0)', "a mask on the scores themselves"),
    ('        N2 = N_CTX - start_n\n        qk = tl.where(offs_n[None, :] < N2, qk, -1.0)', "a scalar the loop computes"),
])
def test_masks_without_a_tile_test_are_left_alone(mask, why):  # noqa: ANN001
    assert _masks(mask) == [], why


def test_a_vector_the_loop_changes_is_not_read_through_its_first_definition():
    text = CAUSAL_MASK + "\n        offs_m += 1"
    assert _masks(text) == []


def _sm90(text: str, gluon_always: bool = False):  # noqa: ANN202
    return translate_source(text, "attn.py", get_target("sm90"), gluon_always=gluon_always)


def test_sm90_ring_branches_on_the_test_and_keeps_the_mask_where_it_may_drop_scores():
    result = _sm90(_kernel(CAUSAL_MASK))
    text = result.text
    assert "cp.async" in text and "_cp_async_load" in text  # the ring is emitted by default now
    lines = [ln.strip() for ln in text.splitlines()]
    i = lines.index("uniform = start_n + BLOCK_N - 1 < N_CTX")
    assert lines[i + 1:i + 6] == ["if CAUSAL:", "uniform = uniform & ((start_m * BLOCK_M) >= start_n + BLOCK_N - 1)",
                                  "if uniform:", "qk = qk * qk_scale", "else:"]
    assert "qk = gl.where(valid, qk * qk_scale, -float(\"inf\"))" in lines[i + 6:i + 20]
    # the added config, named in the header
    assert 'triton.Config({"BLOCK_M": 128, "BLOCK_N": 128}, num_warps=8, num_stages=3)' in text
    assert "# autotune configs added to `attn` for sm90: BLOCK_M=128, BLOCK_N=128, num_warps=8" in text
    # idempotent: the same text a second time
    assert _sm90(_kernel(CAUSAL_MASK)).text == text


def test_sm90_ring_without_a_uniform_mask_stays_triton():
    result = _sm90(_kernel('        qk = tl.where(qk > 0, qk, -1.0)'))
    assert "_cp_async_load" not in result.text
    assert any(d.code == "TT041" and "cannot leave out a causal mask" in d.message for d in result.diagnostics)


@pytest.mark.parametrize("causal", [False, True])
def test_where_the_test_holds_every_score_passes_the_mask(causal: bool):
    """The derived test, run as Python over every tile of ragged problems, against the mask element by element:
    wherever it holds, no score is masked (it is sufficient), and it holds on most tiles."""
    [mask] = _masks(CAUSAL_MASK)
    code = compile("\n".join(mask.test_lines("uniform")), "<test>", "exec")
    for n_ctx, bm, bn in ((333, 64, 32), (1000, 128, 64), (256, 64, 64), (5, 16, 16)):
        held = tiles = 0
        for start_m in range(-(-n_ctx // bm)):
            for start_n in range(0, n_ctx, bn):
                scope = {"start_m": start_m, "start_n": start_n, "BLOCK_M": bm, "BLOCK_N": bn, "N_CTX": n_ctx,
                         "CAUSAL": causal}
                exec(code, scope)
                every = all(col < n_ctx and (not causal or row >= col)
                            for row in range(start_m * bm, start_m * bm + bm)
                            for col in range(start_n, start_n + bn))
                assert not scope["uniform"] or every, (n_ctx, bm, bn, start_m, start_n)
                held += bool(scope["uniform"])
                tiles += 1
        if n_ctx >= 256:
            assert held >= tiles // 3


def test_a_flag_guarded_causal_mask_dispatches_on_the_flag(tmp_path):  # noqa: ANN001
    """`if CAUSAL:` guards the comparison of rows against keys: the variant keeps the source kernel and binds the
    kernel's name to the launcher, which runs the Gluon kernel only for launches that set the flag."""
    import importlib.util

    result = _sm90(_kernel(CAUSAL_MASK))
    text = result.text
    assert "def _attn_triton(" in text and 'when=("CAUSAL", None),' in text and "aligned=True" in text
    # (full launches from a head dimension of 64: the warp-specialised form's three-consumer config,
    # `test_attention_ws.py`)
    assert ("# `attn` runs as Gluon where (`CAUSAL` is set or `D` >= 64) and its tensors' rows are 16-byte aligned, "
            "its source kernel (`_attn_triton`) elsewhere") in text
    path = tmp_path / "attn_sm90.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("attn_sm90", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ran = []

    class _Kernel:
        def __init__(self, name: str) -> None:
            self.name = name

        def __getitem__(self, grid):  # noqa: ANN001, ANN204
            return lambda *args, **kwargs: ran.append(self.name)

    launcher = module.attn
    launcher.gluon_kernel, launcher.triton_kernel = _Kernel("gluon"), _Kernel("triton")
    torch = pytest.importorskip("torch")
    rows = torch.empty(8, 64, dtype=torch.float16)
    launcher[(1,)](rows, rows, rows, rows, 64, 100, 0.1, D=64, CAUSAL=True)
    launcher[(1,)](rows, rows, rows, rows, 64, 100, 0.1, D=32, CAUSAL=False)
    launcher[(1,)](rows, rows, rows, rows, 64, 100, 0.1, 64, 128, 64, True)  # positional
    launcher[(1,)](None, rows, rows, rows, 64, 100, 0.1, D=64, CAUSAL=True)  # not a tensor: K's base pointer is
    launcher[(1,)](rows, None, rows, rows, 64, 100, 0.1, D=64, CAUSAL=True)  # checked (`divisible`)
    assert ran == ["gluon", "triton", "gluon", "gluon", "triton"]
    del ran[3:]
    odd = torch.empty(8, 68, dtype=torch.float16)[:, :64]  # rows 136 bytes apart: cp.async cannot copy them
    seventy_two = torch.empty(8, 72, dtype=torch.float16)  # 144 bytes: aligned, but not specialised as such
    launcher[(1,)](rows, rows, rows, rows, 64, 8, 0.1, D=64, CAUSAL=True)
    launcher[(1,)](rows, odd, rows, rows, 64, 8, 0.1, D=64, CAUSAL=True)
    launcher[(1,)](rows, rows.t(), rows, rows, 64, 8, 0.1, D=64, CAUSAL=True)  # last stride not 1
    launcher[(1,)](seventy_two, seventy_two, seventy_two, seventy_two, 72, 8, 0.1, D=72, CAUSAL=True)
    # a row stride the copies scale by that is not a multiple of 16 (`divisible`): Triton would not compile the
    # 16-byte copies for it
    launcher[(1,)](rows, rows, rows, rows, 72, 8, 0.1, D=64, CAUSAL=True)
    assert ran[3:] == ["gluon", "triton", "triton", "triton", "triton"]
    # --gluon-always: every aligned launch runs the Gluon kernel, with or without the flag (the others still run the
    # source kernel: the ring's 16-byte copies would not compile for them)
    flat = " ".join(_sm90(_kernel(CAUSAL_MASK), gluon_always=True).text.split())
    assert "_TMAOrTriton(" in flat and "aligned=True" in flat and not re.search(r"(?<!source_)when=\(", flat)


def test_an_unguarded_causal_mask_runs_every_launch_as_gluon():
    mask = '''        qk = tl.where((offs_m[:, None] >= cols[None, :]) & (cols[None, :] < N_CTX), qk * qk_scale, -1e9)'''
    text = _sm90(_kernel(mask)).text
    assert "_cp_async_load" in text and not re.search(r"(?<!source_)when=\(", text)
    assert "aligned=True, divisible=(" in text  # (alignment only)


def test_a_sequence_end_mask_alone_keeps_the_kernel_as_triton():
    result = _sm90(_kernel('        qk = tl.where(cols[None, :] < N_CTX, qk * qk_scale, -float("inf"))'))
    assert "_cp_async_load" not in result.text
    assert any(d.code == "TT041" for d in result.diagnostics)


SCALED = CAUSAL_MASK.replace("qk * qk_scale", "qk")


def _scaled_kernel() -> str:
    return _kernel(SCALED).replace("        qk = tl.dot(q, tl.trans(k))\n",
                                   "        qk = tl.dot(q, tl.trans(k)) * qk_scale\n")


def test_scores_scaled_by_a_scalar_are_scaled_after_the_wait_and_the_mask_only_where_needed():
    text = _sm90(_scaled_kernel()).text
    lines = [ln.strip() for ln in text.splitlines()]
    wait = lines.index("qk, _ = warpgroup_mma_wait(1, deps=[qk, k_smem.index(slot)])")
    assert lines[wait + 1] == "qk = qk * qk_scale"
    i = lines.index("uniform = start_n + BLOCK_N - 1 < N_CTX")
    assert lines[i + 3] == "if not uniform:"  # `qk = tl.where(valid, qk, ...)`: nothing to do where all pass


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True])
def test_scaled_scores_variant_compiles(tmp_path, causal: bool):  # noqa: ANN001
    """The Gluon kernel of the scaled variant compiles for sm90 as a launch specialises it (pointers and integer
    arguments divisible by 16, which the cp.async copies of 16 bytes need), for both values of the flag."""
    _compile_sm90(_scaled_kernel(), tmp_path, causal)


@pytest.mark.slow
def test_a_key_vector_the_kernel_also_reads_along_columns_is_copied_along_rows(tmp_path):  # noqa: ANN001
    """`offs_n` read as `offs_n[None, :]` before the loop (its layout class: columns) and as `offs_n[:, None]` in
    the K/V addresses: the ring's copy of it is the row slice of the copy layout (it compiles)."""
    text = _kernel(CAUSAL_MASK).replace(
        "    m_i = tl.full(", "    first = tl.sum(tl.where(offs_n[None, :] < N_CTX, qk_scale, 0.0), axis=1)\n    m_i = tl.full(")
    text = text.replace("acc / l_i[:, None]", "acc / l_i[:, None] + first[:, None] * 0")
    out = _sm90(text).text
    assert "gl.SliceLayout(1, kv_layout)" in out and "_cp_async_load" in out
    _compile_sm90(text, tmp_path, True)


def _compile_sm90(kernel_text: str, tmp_path, causal: bool) -> None:  # noqa: ANN001
    import importlib.util
    import os

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    os.environ.setdefault("TRITON_ALWAYS_COMPILE", "1")
    path = tmp_path / "attn_scaled_sm90.py"
    path.write_text(_sm90(kernel_text).text)
    spec = importlib.util.spec_from_file_location("attn_scaled_sm90", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from triton.runtime.jit import JITFunction

    fn = module.attn.gluon_kernel
    while not isinstance(fn, JITFunction):  # (the autotuner around it)
        fn = fn.fn
    constexprs = {"D": 64, "BLOCK_M": 128, "BLOCK_N": 64, "CAUSAL": causal}
    signature = {n: "constexpr" if n in constexprs else "*fp16" if n.endswith("_ptr") else
                 "fp32" if n == "qk_scale" else "i32" for n in fn.arg_names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names)
             if signature[n] in ("*fp16", "i32")}
    compiled = triton.compile(GluonASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
                              target=GPUTarget("cuda", 90, 32), options={"num_warps": 8})
    assert "wgmma.mma_async" in compiled.asm["ptx"]


def _loop_vector_kernel(k_pointer: str) -> str:
    text = _kernel(CAUSAL_MASK).replace("        cols = start_n + offs_n\n",
                                        "        cols = start_n + tl.arange(0, BLOCK_N)\n")
    return text.replace("k_ptrs + start_n * stride_n, mask", f"{k_pointer}, mask")


def test_an_index_vector_made_in_the_loop_is_made_again_in_the_copy_layout():
    text = _sm90(_loop_vector_kernel("k_ptr + cols[:, None] * stride_n + offs_d[None, :]")).text
    lines = [ln.strip() for ln in text.splitlines()]
    assert "cols_next = start_n_next + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, kv_layout))" in " ".join(
        " ".join(lines).split())
    assert "_cp_async_load" in text
    # the copies' row stride must be a multiple of 16 at the launches the Gluon kernel takes (verify compiles so)
    assert re.search(r'divisible=\(\s*"k_ptr",\s*"stride_n",\s*"v_ptr",\s*\)', text)


def test_an_index_vector_made_in_the_loop_and_read_along_both_axes_keeps_the_kernel_as_triton():
    result = _sm90(_loop_vector_kernel("k_ptr + cols[:, None] * stride_n + cols[None, :] * 0 + offs_d[None, :]"))
    assert "_cp_async_load" not in result.text
    assert any(d.code == "TT041" and "index vector made in the loop" in d.message for d in result.diagnostics)


# ---- Regressions from the review of this analysis ----

def test_a_scalar_reassigned_after_the_row_vector_was_made_from_it_gives_no_test():
    text = _kernel(CAUSAL_MASK).replace(
        "    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)\n",
        "    m0 = start_m * BLOCK_M\n    offs_m = m0 + tl.arange(0, BLOCK_M)\n    m0 = tl.minimum(m0 + BLOCK_M, N_CTX)\n")
    assert "uniform" not in _sm90(text).text  # (the causal term read `m0` at the where: the end of the block)


def test_a_where_whose_value_is_not_the_masked_tensor_is_left_alone():
    mask = ('        bias = tl.where(offs_m[:, None] >= cols[None, :], 0.0, float("-inf"))\n'
            '        qk = qk * qk_scale + bias')
    assert "uniform" not in _sm90(_kernel(mask)).text


def test_a_mask_read_outside_the_loop_stays_where_it_is():
    module = cst.parse_module(_kernel(CAUSAL_MASK))
    fn = next(s for s in module.body if isinstance(s, cst.FunctionDef))
    loop = next(s for s in fn.body.body if isinstance(s, cst.For))
    body = list(loop.body.body)
    outer = {s.body[0].targets[0].target.value: s.body[0].value for s in fn.body.body
             if isinstance(s, cst.SimpleStatementLine) and isinstance(s.body[0], cst.Assign)}
    tensors = {"offs_m", "offs_n", "cols", "qk", "valid"}
    found = uniform_masks(body, list(range(3, len(body))), "start_n", outer, tensors, {"CAUSAL"}, {"tl"},
                          outside={"valid"})
    assert found == []


def test_a_loop_with_a_negative_step_is_not_pipelined():
    text = _kernel(CAUSAL_MASK).replace("for start_n in range(0, N_CTX, BLOCK_N):",
                                        "for start_n in range(N_CTX - BLOCK_N, -1, -BLOCK_N):")
    result = _sm90(text)
    assert "_cp_async_load" not in result.text
    assert any("not a positive number or constexpr" in d.message for d in result.diagnostics)


def test_a_row_vector_of_its_own_does_not_redefine_a_layout_constant():
    text = _kernel(CAUSAL_MASK.replace("offs_m[:, None] >= cols", "rows[:, None] >= cols")).replace(
        "    offs_n = tl.arange(0, BLOCK_N)\n",
        "    offs_n = tl.arange(0, BLOCK_N)\n    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)\n")
    out = _sm90(text).text
    assert "uniform" in out
    constants = [ln.split(":")[0].strip() for ln in out.splitlines() if ": gl.constexpr =" in ln]
    assert len(constants) == len(set(constants)), constants


def test_the_added_config_keeps_the_first_configs_other_options():
    text = _kernel(CAUSAL_MASK).replace(
        'triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=3)',
        'triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=3, pre_hook=None, maxnreg=128)')
    out = _sm90(text).text
    assert ('triton.Config({"BLOCK_M": 128, "BLOCK_N": 128}, num_warps=8, num_stages=3, pre_hook=None, maxnreg=128)'
            in " ".join(out.split()))


def test_a_causal_mask_written_as_a_difference_counts_as_rows_against_keys():
    [mask] = _masks('        qk = tl.where(offs_m[:, None] - cols[None, :] >= 0, qk, -1.0e6)')
    assert [t for _, t in mask.pairs] == ["(start_m * BLOCK_M) - (start_n + BLOCK_N - 1) >= 0"]
    assert "_cp_async_load" in _sm90(_kernel('        qk = tl.where(offs_m[:, None] - cols[None, :] >= 0, qk, -1.0e6)')).text


def test_triton_copies_of_helpers_whose_names_differ_by_an_underscore_stay_apart():
    helpers = ("@triton.jit\ndef fin(x):\n    return x * 2.0\n\n\n@triton.jit\ndef _fin(x):\n    return x + 1.0\n\n\n")
    text = _kernel(CAUSAL_MASK).replace("@triton.autotune(", helpers + "@triton.autotune(", 1)
    text = text.replace("acc / l_i[:, None], mask=", "fin(_fin(acc / l_i[:, None])), mask=")
    out = _sm90(text).text
    copies = re.findall(r"^def (_\w*_triton)\(", out, re.M)
    assert len(copies) == len(set(copies)) == 3, copies
    kernel_copy = out[out.index("def _attn_triton("):]
    called = set(re.findall(r"(_+fin_triton)\(", kernel_copy))
    assert len(called) == 2, called


@pytest.mark.slow
def test_verify_compiles_the_gluon_kernel_as_an_aligned_launch_does(translated, verify_values, monkeypatch,  # noqa: ANN001
                                                                    tmp_path):  # noqa: ANN001
    """A kernel behind an aligned launcher runs as Gluon only for launches with 16-byte aligned tensors, its copies'
    strides multiples of 16 and its inner strides 1: `verify` compiles it so specialised, so the ring's cp.async
    branch (behind `isinstance(stride, int)`, a stride of 1 made a constexpr) is what it compiles."""
    import tempfile

    from transpile.verify import verify

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for name in ("attention_fwd", "suite_gqa_attention"):
        compiled = verify(translated(name, "sm90"), verify_values[f"{name}.py"], all_configs=False)
        gluon = [c for c in compiled if not c.kept]
        assert gluon and all(c.ok and "(aligned launch)" in c.label for c in gluon), [c.message for c in gluon]
        # (the GQA kernel's 128-row launch runs at 4 warps, `retile`: its warp-specialised form, TMA copies)
        copy = "cp.async.bulk.tensor" if name == "suite_gqa_attention" else "cp.async.cg.shared.global"
        assert all(copy in c.asm["ptx"] for c in gluon)


# ---- K loaded as [HEAD_DIM, BLOCK_N] ----

def _kt_kernel(kt_ptrs: str, k_mask: str = "cols[None, :] < N_CTX") -> str:
    text = _kernel(CAUSAL_MASK).replace(
        "    k_ptrs = k_ptr + offs_n[:, None] * stride_n + offs_d[None, :]\n", f"    kt_ptrs = {kt_ptrs}\n")
    return text.replace("k = tl.load(k_ptrs + start_n * stride_n, mask=cols[:, None] < N_CTX, other=0.0)",
                        f"k = tl.load(kt_ptrs + start_n * stride_n, mask={k_mask}, other=0.0)").replace(
        "qk = tl.dot(q, tl.trans(k))", "qk = tl.dot(q, k)")


def test_a_k_tile_loaded_transposed_is_copied_through_its_transposed_addresses():
    """`tl.dot(q, k)` on K loaded [D, BLOCK_N]: the ring copies K as [BLOCK_N, D] (the addresses and the mask with
    their broadcasts swapped) and QK^T reads the slot as a transposed view; the translated loop keeps the source's
    own [D, BLOCK_N] addresses."""
    result = _sm90(_kt_kernel("k_ptr + offs_n[None, :] * stride_n + offs_d[:, None]"))
    flat = " ".join(result.text.split())
    assert "_cp_async_load" in flat
    assert "kt_ptrs_ring = k_ptr + offs_n_ring[:, None] * stride_n + offs_d_ring[None, :]" in flat
    assert ("if i < num_iters: _cp_async_load(k_smem.index(i), kt_ptrs_ring + start_n_next * stride_n, "
            "mask=cols_next[:, None] < N_CTX)") in flat
    assert "k_smem.index(slot).permute((1, 0))" in flat
    assert "gl.allocate_shared_memory(q.dtype, [NUM_STAGES, BLOCK_N, D]" in flat
    assert not any(d.code == "TT040" for d in result.diagnostics)


@pytest.mark.parametrize("kt_ptrs, mask, why", [
    ("k_ptr + offs_n[None, :] * stride_n + offs_d[:, None]", "tl.broadcast_to(cols[None, :], (D, BLOCK_N)) < N_CTX",
     "not arithmetic on index vectors"),
    # bound again in a branch: no one value at the loop (moved on a line of its own, it has one: `value_at_loop`)
    ("k_ptr + offs_n[None, :] * stride_n + offs_d[:, None]\n    if N_CTX > 64:\n        kt_ptrs += stride_n",
     "cols[None, :] < N_CTX", "`kt_ptrs` is a 2-D tile it cannot re-evaluate transposed"),
])
def test_a_k_tile_loaded_transposed_that_cannot_be_read_transposed_is_refused(kt_ptrs: str, mask: str, why: str):
    result = _sm90(_kt_kernel(kt_ptrs, mask))
    assert "_cp_async_load" not in result.text
    assert any(d.code == "TT041" and why in d.message for d in result.diagnostics), \
        [d.message for d in result.diagnostics]


# ---- Scores accumulated into a zero tile made in the iteration (the tutorial style) ----

@pytest.mark.parametrize("start, zero", [
    ("qk = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)", True),
    ("qk = tl.full([BLOCK_M, BLOCK_N], 0.0, dtype=tl.float32)", True),
    # not a zero start: the product named on its own line (`passes/dot_results.py`), then added to the start
    ("qk = tl.full([BLOCK_M, BLOCK_N], 1.0, dtype=tl.float32)", False),
    ("qk = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)\n        qk = qk + qk_scale", False),  # changed before
])
def test_scores_accumulated_into_a_zero_tile_made_in_the_iteration(start: str, zero: bool):
    """`qk = tl.zeros(...)` then `qk += tl.dot(q, k)`: the scores start from zero each iteration, as `qk = tl.dot(q,
    k)` does; the ring starts its QK^T wgmma from that tile. Another start (not zero, or changed before the dot) is
    added to the product, a wgmma of its own from zero."""
    text = _kernel(CAUSAL_MASK).replace("        qk = tl.dot(q, tl.trans(k))\n",
                                        f"        {start}\n        qk += tl.dot(q, tl.trans(k))\n")
    result = _sm90(text)
    flat = " ".join(result.text.split())
    assert "_cp_async_load" in flat, [d.message for d in result.diagnostics]
    if zero:
        assert "k_smem.index(slot).permute((1, 0)), qk, is_async=True)" in flat
    else:
        assert "qk = qk + qk_dot" in flat and "k_smem.index(slot).permute((1, 0)), qk, is_async=True)" not in flat


def test_the_prologue_loop_variable_is_not_a_kernel_variable():
    """A static_range loop leaves its variable bound to its last value: the ring's prologue must not use a name the
    kernel reads (here the query block `i`, which the uniform test and the store read after the prologue)."""
    text = _kernel(CAUSAL_MASK).replace("    start_m = tl.program_id(0)\n    offs_m = start_m * BLOCK_M",
                                        "    i = tl.program_id(0)\n    offs_m = i * BLOCK_M")
    assert "    i = tl.program_id(0)\n" in text
    flat = " ".join(_sm90(text).text.split())
    assert "_cp_async_load" in flat
    assert "for i in gl.static_range" not in flat and "for i_ in gl.static_range(NUM_STAGES - 1):" in flat
    assert "uniform = uniform & ((i * BLOCK_M) >= start_n + BLOCK_N - 1)" in flat


# ---- Found by the session-10 probe of attention styles (kernels written in the public styles) ----

def _plain(text: str) -> str:
    """The template without its autotune table (a kernel whose launches fix the tile)."""
    start = text.index("@triton.autotune(")
    return text[:start] + text[text.index("@triton.jit"):]


def test_a_window_mask_keeps_the_kernel_as_triton():
    mask = ('        qk = tl.where((offs_m[:, None] - cols[None, :] < 256) & (offs_m[:, None] >= cols[None, :]), '
            'qk * qk_scale, -1e9)')
    result = _sm90(_kernel(mask))
    assert "_cp_async_load" not in result.text
    assert any(d.code == "TT041" and "bounds keys from both sides" in d.message for d in result.diagnostics)


def test_a_fixed_tile_runs_as_gluon_only_from_a_head_dimension_of_128(tmp_path):  # noqa: ANN001
    result = _sm90(_plain(_kernel(CAUSAL_MASK)))
    flat = " ".join(result.text.split())
    assert "_cp_async_load" in flat and re.search(r'at_least=\(\s*\(\s*"D",\s*128\s*\),\s*\)', flat)
    assert any(d.code == "TT043" and "whose `D` is at least 128" in d.message for d in result.diagnostics)
    # a head dimension written as a number below 128: no constexpr to dispatch on, the kernel stays Triton
    literal = _plain(_kernel(CAUSAL_MASK)).replace("D: tl.constexpr, ", "").replace("tl.arange(0, D)", "tl.arange(0, 64)")
    literal = literal.replace("[BLOCK_M, D]", "[BLOCK_M, 64]")
    result = _sm90(literal)
    assert "_cp_async_load" not in result.text
    assert any(d.code == "TT041" and "at a tile the kernel fixes" in d.message for d in result.diagnostics)


@pytest.mark.parametrize("k_address, k_mask, why", [
    ("k_ptr + cols[:, None] * stride_n + (offs_d * 1)[None, :]", "cols[:, None] < N_CTX", "contiguous index"),
    # (`offs_d[None, :] < N_CTX` would be a runtime head dimension, copied whole for launches where it is a multiple
    # of 16: a bound computed from a parameter is not)
    ("k_ptrs + start_n * stride_n", "(cols[:, None] < N_CTX) & (offs_d[None, :] < N_CTX // 2)",
     "bounds the contiguous"),
])
def test_a_contiguous_index_the_copies_cannot_prove_aligned_is_refused(k_address: str, k_mask: str, why: str):
    text = _kernel(CAUSAL_MASK).replace("k = tl.load(k_ptrs + start_n * stride_n, mask=cols[:, None] < N_CTX",
                                        f"k = tl.load({k_address}, mask={k_mask}")
    result = _sm90(text)
    assert "_cp_async_load" not in result.text
    assert any(d.code == "TT041" and why in d.message for d in result.diagnostics), [d.message for d in
                                                                                    result.diagnostics]


def test_an_int_offset_added_to_the_base_pointer_is_checked_by_the_launcher():
    text = _kernel(CAUSAL_MASK).replace("def attn(q_ptr, k_ptr, v_ptr, o_ptr, stride_n,",
                                        "def attn(q_ptr, k_ptr, v_ptr, o_ptr, kv_offset, stride_n,")
    text = text.replace("    k_ptrs = k_ptr +", "    k_ptr += kv_offset\n    k_ptrs = k_ptr +")
    flat = " ".join(_sm90(text).text.split())
    assert "_cp_async_load" in flat and re.search(r'divisible=\([^)]*"kv_offset"', flat)


def test_a_mask_named_mask_and_a_hinted_loop_variable_still_leave_the_mask_out():
    """`mask` is also the keyword of `tl.load(..., mask=...)` (not a read of the variable); `start_n =
    tl.multiple_of(start_n, BLOCK_N)` rebinds the loop variable to the same value."""
    text = _kernel(CAUSAL_MASK.replace("valid", "mask")).replace(
        "        cols = start_n + offs_n\n", "        start_n = tl.multiple_of(start_n, BLOCK_N)\n        cols = start_n + offs_n\n")
    result = _sm90(text)
    flat = " ".join(result.text.split())
    assert "_cp_async_load" in flat and "if uniform:" in flat, [d.message for d in result.diagnostics]


def test_a_kernel_kept_by_the_safety_net_does_not_also_say_it_runs_as_gluon():
    """K addresses advanced at the top of the loop: the ring's copies would read a name it never defines, the engine
    keeps the kernel as Triton (TT041), and the ring's TT043 ("runs as Gluon for the launches ...") goes with it."""
    text = _kernel(CAUSAL_MASK).replace(
        "    k_ptrs = k_ptr + offs_n[:, None] * stride_n + offs_d[None, :]\n",
        "    k_ptrs = k_ptr + offs_n[:, None] * stride_n + offs_d[None, :] - BLOCK_N * stride_n\n").replace(
        "        k = tl.load(k_ptrs + start_n * stride_n,", "        k_ptrs += BLOCK_N * stride_n\n        k = tl.load(k_ptrs,")
    assert "k_ptrs += BLOCK_N * stride_n" in text
    result = _sm90(text)
    codes = {d.code for d in result.diagnostics}
    assert "TT043" not in codes and "TT041" in codes
