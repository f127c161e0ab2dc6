"""Block pointers lowered to pointer tiles before analysis (`transpile.passes.block_pointers`): the lowered text,
the offsets a loop reads from its own variable, bounds checked as Triton checks them, refusals that name the line and
the reason, and variants (kept kernels included) that compile under Triton 3.9, which has no block pointers."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from transpile.engine import prepare, translate_source
from transpile.targets import get_target
from transpile.verify import verify

HEADER = "import triton\nimport triton.language as tl\n\n\n"

GEMM = HEADER + textwrap.dedent('''\
    @triton.jit
    def gemm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        a_blk = tl.make_block_ptr(base=a_ptr, shape=(M, K), strides=(sam, sak),
                                  offsets=(pid_m * BM, 0), block_shape=(BM, BK), order=(1, 0))
        b_blk = tl.make_block_ptr(b_ptr, (K, N), (sbk, sbn), (0, pid_n * BN), (BK, BN), (1, 0))
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_blk, boundary_check=(0, 1), padding_option="zero")
            b = tl.load(b_blk, boundary_check=(0, 1), padding_option="zero")
            acc += tl.dot(a, b)
            a_blk = tl.advance(a_blk, (0, BK))
            b_blk = tl.advance(b_blk, [BK, 0])
        c_blk = tl.make_block_ptr(c_ptr, (M, N), (scm, scn), (pid_m * BM, pid_n * BN), (BM, BN), (1, 0))
        tl.store(c_blk, acc.to(c_ptr.dtype.element_ty), boundary_check=(0, 1))
''')


def lowered(text: str) -> str:
    return prepare(text, "k.py").original_source.text


def test_gemm_reads_its_tiles_from_the_loop_variable() -> None:
    text = lowered(GEMM)
    assert "make_block_ptr" not in text and "advance" not in text and "boundary_check" not in text
    # advanced once per iteration by the loop's own step: the offset is the loop variable itself
    assert ("a = tl.load(a_ptr + (pid_m * BM + tl.arange(0, BM))[:, None] * sam + (k + tl.arange(0, BK))[None, :] "
            "* sak, mask=((pid_m * BM + tl.arange(0, BM))[:, None] < M) & ((k + tl.arange(0, BK))[None, :] < K), "
            "other=0.0)") in text
    assert "b = tl.load(b_ptr + (k + tl.arange(0, BK))[:, None] * sbk" in text
    # offsets known non-negative (program ids, tile sizes, a loop counting up from 0): no `>= 0` test
    assert ">= 0" not in text
    # the store's element type through the base pointer, masked on both dimensions, no `other`
    assert ("tl.store(c_ptr + (pid_m * BM + tl.arange(0, BM))[:, None] * scm + (pid_n * BN + tl.arange(0, BN))"
            "[None, :] * scn, acc.to(c_ptr.dtype.element_ty), mask=") in text
    assert "block pointers written as pointer tiles" in text


def test_carried_offsets_signed_bounds_and_padding() -> None:
    text = lowered(HEADER + textwrap.dedent('''\
        @triton.jit
        def shift(x, y, T, start, BT: tl.constexpr):
            p = tl.make_block_ptr(x, (T,), (1,), (start,), (BT,), (0,))
            q = tl.advance(p, (BT,))
            a = tl.load(p, boundary_check=(0,), padding_option="nan")
            b = tl.load(q, boundary_check=(0,))
            while start < T:
                p = tl.advance(p, (-BT,))
                start += BT
            tl.store(y + tl.arange(0, BT), a + b + tl.load(p, boundary_check=(0,), padding_option="zero"))
    '''))
    # `start` is a runtime int: the offset may be negative, so it is tested against 0 too, as Triton does
    assert "p_off = start" in text and "q = x" in text and "q_off = p_off + BT" in text
    assert ('a = tl.load(x + (p_off + tl.arange(0, BT)), mask=((p_off + tl.arange(0, BT)) >= 0) & '
            '((p_off + tl.arange(0, BT)) < T), other=float("nan"))') in text
    # no padding option: masked, no `other`
    assert "b = tl.load(q + (q_off + tl.arange(0, BT)), mask=((q_off + tl.arange(0, BT)) >= 0) & " in text
    assert "other" not in text.split("b = tl.load")[1].split("\n")[0]
    # advanced in a `while` loop: carried as a scalar
    assert "p_off = p_off + (-BT)" in text


@pytest.mark.parametrize("target", ["sm90", "gfx942", "gfx950", "gfx1250"])
def test_refusal_names_the_reason_and_line(target: str) -> None:
    """A block pointer passed to a helper of several statements called inside an expression (neither a whole
    statement nor one `return` the call can be replaced by): refused, naming the use and its line."""
    text = HEADER + textwrap.dedent('''\
        @triton.jit
        def _load(p):
            v = tl.load(p, boundary_check=(0,))
            return v * 2


        @triton.jit
        def passes(x, y, N, B: tl.constexpr):
            p = tl.make_block_ptr(x, (N,), (1,), (tl.program_id(0) * B,), (B,), (0,))
            tl.store(y + tl.arange(0, B), _load(p) + 1)
    ''')
    result = translate_source(text, "k.py", get_target(target))
    outcome = next(o for o in result.functions if o.name == "passes")
    assert not outcome.translated
    messages = [d.format() for d in outcome.diagnostics if d.code == "TT011"]
    assert any("k.py:13:" in m and "not in `passes`: the block pointer `p` is used here other than by `tl.load`"
               in m and "line 14" in m for m in messages), messages
    assert "make_block_ptr" in result.text  # the source kernel is kept as written


BLOCK_HELPERS = HEADER + textwrap.dedent('''\
    @triton.jit
    def _rows(base, M, N, stride, pid, BM: tl.constexpr, BN: tl.constexpr):
        return tl.make_block_ptr(base, (M, N), (stride, 1), (pid * BM, 0), (BM, BN), (1, 0))


    @triton.jit
    def _read(block):
        return tl.load(block, boundary_check=(0, 1), padding_option="zero")


    @triton.jit
    def _write(block, value):
        tl.store(block, value.to(block.dtype.element_ty), boundary_check=(0, 1))


    @triton.jit
    def scale_rows(x, y, M, N, sx, sy, BM: tl.constexpr, BN: tl.constexpr):
        pid = tl.program_id(0)
        src = _rows(x, M, N, sx, pid, BM, BN)
        dst = tl.make_block_ptr(y, (M, N), (sy, 1), (pid * BM, 0), (BM, BN), (1, 0))
        _write(dst, _read(src) * 2.0)
''')


@pytest.mark.parametrize("target", ["sm90", "gfx950"])
def test_block_pointers_made_read_and_written_in_helpers_are_lowered_in_the_kernel(
        target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A block pointer returned from a helper (`src = _rows(...)`), read by a helper inside an expression (one
    `return tl.load(...)`) and written by a helper called as a statement: each helper is inlined where it is called
    (Gluon has none, and the lowering follows a block pointer within one function), so the kernel is translated, with
    pointer tiles and masks, and compiles; the helpers stay for Triton code kept as written."""
    result = translate_source(BLOCK_HELPERS, str(tmp_path / "k.py"), get_target(target))
    outcome = next(o for o in result.functions if o.name == "scale_rows")
    assert outcome.translated, [d.format() for d in result.diagnostics]
    start = result.text.index("def scale_rows")
    kernel = result.text[start:result.text.index("\n\n\n", start)]
    assert "make_block_ptr" not in kernel and "_read(" not in kernel and "= _rows(" not in kernel
    assert "`_write(...)`, inlined (its block pointers are lowered to pointer tiles where they are made and read)" \
        in kernel
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    # (the source kernel the launcher keeps for unaligned launches is what Triton 3.9 rejects: block pointers)
    compiled = [c for c in verify(result, {"x": "*fp16", "y": "*fp16", "BM": 64, "BN": 64}) if c.kernel == "scale_rows"]
    assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


def test_the_refusal_names_the_same_block_pointer_in_every_run() -> None:
    """Two names each holding a block pointer and another value: the message names the first by name order, whatever
    the interpreter's hash seed (it named either, so variants differed between runs and `--check` called them
    stale)."""
    text = HEADER + textwrap.dedent('''\
        @triton.jit
        def twice(x, y, N, B: tl.constexpr):
            p_b = tl.make_block_ptr(x, (N,), (1,), (0,), (B,), (0,))
            p_a = tl.make_block_ptr(y, (N,), (1,), (0,), (B,), (0,))
            tl.store(p_a, tl.load(p_b, boundary_check=(0,)), boundary_check=(0,))
            p_b = 0
            p_a = 0
    ''')
    outputs = set()
    for seed in ("1", "2", "3"):
        run = subprocess.run([sys.executable, "-c", "import sys; from transpile.engine import translate_source; "
                              "from transpile.targets import get_target; "
                              "print(translate_source(sys.stdin.read(), 'k.py', get_target('gfx942')).text)"],
                             input=text, capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": seed})
        outputs.add(run.stdout)
    assert len(outputs) == 1
    assert "`p_a` holds a block pointer and, elsewhere, another value" in outputs.pop()


def test_two_tile_sizes_under_one_name_are_refused() -> None:
    text = HEADER + textwrap.dedent('''\
        @triton.jit
        def k(x, y, N, B: tl.constexpr):
            p = tl.make_block_ptr(x, (N,), (1,), (0,), (B,), (0,))
            a = tl.load(p, boundary_check=(0,))
            p = tl.make_block_ptr(x, (N,), (1,), (0,), (2 * B,), (0,))
            tl.store(y + tl.arange(0, B), a)
    ''')
    prepared = prepare(text, "k.py")
    assert [(r.function, r.line, r.reason) for r in prepared.block_pointers] == [
        ("k", 9, "`p` is made with different tile sizes in different places")]


def test_variants_compile_under_triton_39(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton 3.9 has no block pointers: the source does not compile there; the variant, whose kept kernel is the
    lowered one, does, for every target."""
    from transpile.verify import verify

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {n: "*fp16" for n in ("a_ptr", "b_ptr", "c_ptr")} | {"BM": 64, "BN": 64, "BK": 32}
    for target in ("sm90", "gfx950"):
        compiled = verify(translate_source(GEMM, str(tmp_path / "k.py"), get_target(target)), values)
        assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


# A block pointer copied under another name, the copy advanced in a loop while the original moves on: what the inliner
# writes for a helper called twice with the kernel's block pointers (`_attn_fwd_inner(..., K_block_ptr, ...)`, the
# Triton tutorial's attention, tritonbench's and applied-ai's kernels): `K_block_ptr_1 = K_block_ptr`.
COPIED = HEADER + textwrap.dedent('''\
    @triton.jit
    def two_halves(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        a_blk = tl.make_block_ptr(a_ptr, (M, K), (sam, sak), (pid_m * BM, 0), (BM, BK), (1, 0))
        b_blk = tl.make_block_ptr(b_ptr, (K, N), (sbk, sbn), (0, pid_n * BN), (BK, BN), (1, 0))
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        a_1 = a_blk
        b_1 = b_blk
        for k in range(0, K // 2, BK):
            acc += tl.dot(tl.load(a_1, boundary_check=(0, 1)), tl.load(b_1, boundary_check=(0, 1)))
            a_1 = tl.advance(a_1, (0, BK))
            b_1 = tl.advance(b_1, (BK, 0))
        a_blk = tl.advance(a_blk, (0, K // 2))
        b_blk = tl.advance(b_blk, (K // 2, 0))
        a_2 = a_blk
        b_2 = b_blk
        for k in range(K // 2, K, BK):
            acc += tl.dot(tl.load(a_2, boundary_check=(0, 1)), tl.load(b_2, boundary_check=(0, 1)))
            a_2 = tl.advance(a_2, (0, BK))
            b_2 = tl.advance(b_2, (BK, 0))
        c_blk = tl.make_block_ptr(c_ptr, (M, N), (scm, scn), (pid_m * BM, pid_n * BN), (BM, BN), (1, 0))
        tl.store(c_blk, acc.to(c_ptr.dtype.element_ty), boundary_check=(0, 1))
''')


def test_a_block_pointer_copied_under_another_name_is_lowered() -> None:
    text = lowered(COPIED)
    assert "make_block_ptr" not in text and "tl.advance" not in text
    # the copy starts from the original's offsets where the copy is made (after the original's advance, the second)
    assert "a_1 = a_ptr" in text and "a_2 = a_ptr" in text
    lines = text.splitlines()
    advanced = next(i for i, line in enumerate(lines) if "a_blk_col = a_blk_col + (K // 2)" in line)
    copied = next(i for i, line in enumerate(lines) if "a_2_col = a_blk_col" in line)
    assert advanced < copied


@pytest.mark.slow
def test_a_block_pointer_copied_under_another_name_compiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from transpile.verify import verify

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = {n: "*fp16" for n in ("a_ptr", "b_ptr", "c_ptr")} | {"BM": 64, "BN": 64, "BK": 32}
    for target in ("sm90", "gfx950"):
        result = translate_source(COPIED, str(tmp_path / "k.py"), get_target(target), gluon_always=True)
        assert all(d.code != "TT011" for f in result.functions for d in f.diagnostics)
        compiled = verify(result, values)
        assert compiled and all(c.ok for c in compiled), [(c.label, c.message) for c in compiled]


# `X = None` first, then made under a compile-time flag (tritonbench's attention kernels: `K_block_ptr = None`, made
# under `if not ENABLE_TMA:`): the placeholder names the block pointer in the other branch only; lowered, it is
# dropped. Under a run-time test it stays refused (the name would be unbound after the `if` on the other path).
FLAGGED = HEADER + textwrap.dedent('''\
    @triton.jit
    def gemm_flag(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn, USE_DESC: tl.constexpr,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        a_blk = None
        b_blk = None
        if not USE_DESC:
            a_blk = tl.make_block_ptr(a_ptr, (M, K), (sam, sak), (pid_m * BM, 0), (BM, BK), (1, 0))
            b_blk = tl.make_block_ptr(b_ptr, (K, N), (sbk, sbn), (0, pid_n * BN), (BK, BN), (1, 0))
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            if not USE_DESC:
                acc += tl.dot(tl.load(a_blk, boundary_check=(0, 1)), tl.load(b_blk, boundary_check=(0, 1)))
                a_blk = tl.advance(a_blk, (0, BK))
                b_blk = tl.advance(b_blk, (BK, 0))
        c_blk = tl.make_block_ptr(c_ptr, (M, N), (scm, scn), (pid_m * BM, pid_n * BN), (BM, BN), (1, 0))
        tl.store(c_blk, acc.to(c_ptr.dtype.element_ty), boundary_check=(0, 1))
''')


def test_a_none_placeholder_before_a_flag_makes_the_block_pointer_is_dropped() -> None:
    text = lowered(FLAGGED)
    assert "make_block_ptr" not in text and "a_blk = None" not in text
    assert "    if not USE_DESC:\n        a_blk_row = pid_m * BM\n" in text
    runtime = FLAGGED.replace("if not USE_DESC:\n    a_blk", "if pid_m > 0:\n    a_blk").replace(
        "    if not USE_DESC:\n        a_blk = tl.make", "    if pid_m > 0:\n        a_blk = tl.make")
    assert "if pid_m > 0:" in runtime
    result = translate_source(runtime, "k.py", get_target("gfx950"))
    messages = [d.message for f in result.functions for d in f.diagnostics if d.code == "TT011"]
    assert any("holds a block pointer and, elsewhere, another value" in m for m in messages), messages


def test_the_advance_method_is_the_advance_function() -> None:
    """`p.advance(offsets)`, Triton's tensor method (FlagGems' varlen attention loads `tl.load(gQ.advance([m *
    BLOCK_M, 0]))`), is lowered as `tl.advance(p, offsets)` is: the variants are the same, and a kernel kept as
    Triton keeps the method as written."""
    method = GEMM.replace("a_blk = tl.advance(a_blk, (0, BK))", "a_blk = a_blk.advance((0, BK))").replace(
        "tl.load(b_blk, boundary_check", "tl.load(b_blk.advance([0, 0]), boundary_check")
    function = GEMM.replace("tl.load(b_blk, boundary_check", "tl.load(tl.advance(b_blk, [0, 0]), boundary_check")
    assert method != function
    for target in ("gfx950", "sm90"):
        ours, theirs = (translate_source(t, "g.py", get_target(target)) for t in (method, function))
        assert not any(d.code == "TT011" for d in ours.diagnostics), ours.diagnostics
        body = [line for line in ours.text.splitlines() if not line.startswith("# ")]
        assert body == [line for line in theirs.text.splitlines() if not line.startswith("# ")]
    # a block pointer the lowering refuses (returned from the kernel's helper): the method stays as the user wrote it
    kept = method.replace("def gemm(", "def _ident(p):\n    return p\n\n\n@triton.jit\ndef gemm(").replace(
        "    acc = tl.zeros(", "    b_blk = _ident(b_blk)\n    acc = tl.zeros(")
    result = translate_source(kept, "g.py", get_target("gfx950"))
    assert not next(f for f in result.functions if f.name == "gemm").translated
    assert "a_blk = a_blk.advance((0, BK))" in result.text and "tl.advance(a_blk" not in result.text


SCORES = HEADER + textwrap.dedent('''\
    @triton.jit
    def scores(Q, K, S, n_keys, stride_qm, stride_kn, stride_sm,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
        start_m = tl.program_id(0) * BLOCK_M
        Q_block_ptr = tl.make_block_ptr(Q, (BLOCK_M, D), (stride_qm, 1), (start_m, 0), (BLOCK_M, D), (1, 0))
        K_block_ptr = tl.make_block_ptr(K, (n_keys, D), (stride_kn, 1), (0, 0), (BLOCK_N, D), (1, 0))
        q = tl.load(Q_block_ptr)
        qk = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for start_n in range(0, n_keys, BLOCK_N):
            k = tl.load(K_block_ptr)
            qk += tl.dot(q, tl.trans(k))
            K_block_ptr = tl.advance(K_block_ptr, (BLOCK_N, 0))
        rows = start_m + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_N)
        tl.store(S + rows[:, None] * stride_sm + cols[None, :], qk)
''')


@pytest.mark.parametrize("target", ["gfx950", "sm90"])
def test_dot_operands_loaded_through_block_pointers_have_their_pointees_type(target: str) -> None:
    """`q = tl.load(Q_block_ptr)` then `qk += tl.dot(q, tl.trans(k))` (attorch's attention: "cannot tell the element
    type of this dot's operands"): the lowered loads read the block pointers' base pointers, whose pointee is the
    operands' type, which the matrix-core layout is declared with."""
    result = translate_source(SCORES, "scores.py", get_target(target), gluon_always=True)
    assert not [d for d in result.diagnostics if d.code in ("TT010", "TT011")], [d.format() for d in result.diagnostics]
    assert all(f.translated for f in result.functions)
    assert "_mma_layout(BLOCK_M, [BLOCK_N], Q.dtype.element_ty" in result.text
