"""Canonicalisation before analysis (transpile/passes/canonical.py): each spelling, input -> output, on the same
lines, with comments kept; the spellings that must not be folded stay as they are."""

from __future__ import annotations

import pytest

from transpile.passes.canonical import canonicalize_text
from transpile.engine import prepare, translate_source
from transpile.targets import get_target

HEAD = (
    "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
    "def k(a_ptr, b_ptr, c_ptr, s, BM: tl.constexpr):\n"
    "    acc = tl.zeros((BM, BM), dtype={dtype})\n"
    "    a = tl.load(a_ptr)\n    b = tl.load(b_ptr)\n"
)
TAIL = "    tl.store(c_ptr, acc)\n"


def _canonical(line: str, dtype: str = "tl.float32") -> str:
    text = HEAD.format(dtype=dtype) + line + TAIL
    out = canonicalize_text(text)
    assert out.count("\n") == text.count("\n"), "canonicalisation must keep every line where it was"
    head = HEAD.format(dtype=dtype)
    assert out.startswith(head) and out.endswith(TAIL)
    return out[len(head):-len(TAIL)]


@pytest.mark.parametrize("source, canonical", [
    ("    acc += tl.dot(a, b)\n", "    acc = tl.dot(a, b, acc)\n"),
    ("    acc += tl.dot(a, b)  # accumulate\n", "    acc = tl.dot(a, b, acc)  # accumulate\n"),
    ("    acc = acc + tl.dot(a, b)\n", "    acc = tl.dot(a, b, acc)\n"),
    ("    acc = tl.dot(a, b) + acc\n", "    acc = tl.dot(a, b, acc)\n"),
    ("    acc = tl.dot(a, b, acc=acc)\n", "    acc = tl.dot(a, b, acc)\n"),
    ("    acc = tl.dot(a, b, acc=acc, out_dtype=tl.float32)\n", "    acc = tl.dot(a, b, acc, out_dtype=tl.float32)\n"),
    ("    acc = tl.dot(a, b, out_dtype=tl.float32, acc=acc)\n", "    acc = tl.dot(a, b, acc, out_dtype=tl.float32)\n"),
    ('    acc += tl.dot(a, b, input_precision="tf32")\n', '    acc = tl.dot(a, b, acc, input_precision="tf32")\n'),
    ("    acc += tl.dot(a, b, allow_tf32=False)\n", "    acc = tl.dot(a, b, acc, allow_tf32=False)\n"),
    ("    acc += tl.dot(a, b.T)\n", "    acc = tl.dot(a, tl.trans(b), acc)\n"),
    ("    acc = tl.dot(a, tl.trans(b), acc)\n", "    acc = tl.dot(a, tl.trans(b), acc)\n"),
    # the online softmax's rescale and PV in one line: the rescaled accumulator is the dot's
    ("    acc = acc * s[:, None] + tl.dot(a, b)\n", "    acc = tl.dot(a, b, acc * s[:, None])\n"),
    ("    acc = tl.dot(a, b) + s * acc\n", "    acc = tl.dot(a, b, s * acc)\n"),
    ("    acc += tl.dot(\n        a,  # rows\n        b,\n    )\n",
     "    acc = tl.dot(\n        a,  # rows\n        b, acc,\n    )\n"),
])
def test_dot_spellings_become_one(source: str, canonical: str) -> None:
    assert _canonical(source) == canonical


@pytest.mark.parametrize("source, dtype", [
    ("    acc += tl.dot(a, b) * s\n", "tl.float32"),  # the dot result scaled before accumulation: not acc scaled
    ("    acc += tl.dot(a, b).to(tl.float32)\n", "tl.float32"),
    ("    acc += tl.dot(a, b)\n", "tl.float16"),  # the fp32 dot result would not fit the fp16 accumulator
    ("    acc -= tl.dot(a, b)\n", "tl.float32"),
    ("    acc = other + tl.dot(a, b)\n", "tl.float32"),
    ("    acc = acc * acc + tl.dot(a, b)\n", "tl.float32"),  # (not a rescale: a product of the accumulator)
    ("    acc = acc * s + tl.dot(a, b)\n", "tl.float16"),
])
def test_spellings_left_alone(source: str, dtype: str) -> None:
    assert _canonical(source, dtype) == source


def test_int8_operands_keep_a_float_accumulator_apart() -> None:
    """int8 x int8 gives an int32 dot: folding it into a float32 accumulator would not compile."""
    line = "    acc += tl.dot(a.to(tl.int8), b.to(tl.int8))\n"
    assert _canonical(line) == line
    assert _canonical(line, "tl.int32") == "    acc = tl.dot(a.to(tl.int8), b.to(tl.int8), acc)\n"


def test_int8_named_in_a_comment_only_folds() -> None:
    """A comment that says "int8" (an autotune table's `# good for int8`) names no 8-bit type: the dot is folded; a
    kernel that names one in code keeps a float32 accumulator apart."""
    line = "    acc += tl.dot(a, b)  # good for int8 too\n"
    assert _canonical(line) == "    acc = tl.dot(a, b, acc)  # good for int8 too\n"
    named = "    acc += tl.dot(a, b)\n    q = b.to(tl.int8)\n"
    assert _canonical(named) == named


def test_out_dtype_must_match_the_accumulator() -> None:
    line = "    acc += tl.dot(a, b, out_dtype=tl.float16)\n"
    assert _canonical(line, "tl.float16") == "    acc = tl.dot(a, b, acc, out_dtype=tl.float16)\n"
    assert _canonical(line, "tl.float32") == line


def test_language_alias_and_host_code() -> None:
    """The file's own name for triton.language is used; code outside jit functions is never touched."""
    text = ("import triton\nfrom triton import language as T\n\n\n@triton.jit\n"
            "def k(p, BM: T.constexpr):\n    acc = T.zeros((BM, BM), dtype=T.float32)\n"
            "    x = T.load(p)\n    acc += T.dot(x, x.T)\n    T.store(p, acc)\n\n\n"
            "def host(x):\n    y = x.T\n    y += x\n    return y\n")
    out = canonicalize_text(text)
    assert "    acc = T.dot(x, T.trans(x), acc)\n" in out
    assert "    y = x.T\n    y += x\n" in out


def test_prepare_keeps_the_original_text_and_hash() -> None:
    text = ("import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
            "def k(a_ptr, b_ptr, c_ptr, BM: tl.constexpr):\n"
            "    offs = tl.arange(0, BM)\n    tile = offs[:, None] * BM + offs[None, :]\n"
            "    acc = tl.zeros((BM, BM), dtype=tl.float32)\n"
            "    a = tl.load(a_ptr + tile)\n    b = tl.load(b_ptr + tile)\n"
            "    acc += tl.dot(a, b)\n    tl.store(c_ptr + tile, acc)\n")
    prepared = prepare(text, "k.py")
    assert prepared.text == text
    assert prepared.original_source.text == text
    assert "acc = tl.dot(a, b, acc)" in prepared.source.text
    result = translate_source(text, "k.py", get_target("gfx942"), prepared=prepared)
    import hashlib
    assert f"# source-sha256: {hashlib.sha256(text.encode()).hexdigest()}" in result.text
    assert "acc = _dot(a, b, acc)" in result.text


def test_unchanged_source_is_not_reparsed() -> None:
    text = HEAD.format(dtype="tl.float32") + "    acc = tl.dot(a, b, acc)\n" + TAIL
    prepared = prepare(text, "k.py")
    assert prepared.original is None and prepared.source.text == text


def test_a_copy_of_a_float32_start_folds_like_the_start() -> None:
    """`acc_2 = acc`, then `acc_2 = acc_2 * s[:, None] + tl.dot(a, b)`: the copy a branch gets of the code after a
    compile-time `if` (`passes/branch_tails.py`, `passes/unswitch.py`) starts from the float32 zeros as `acc` does,
    and its online-softmax PV folds into the dot as the original's does; a copy of another start does not."""
    assert _canonical("    acc_2 = acc\n    acc_2 = acc_2 * s[:, None] + tl.dot(a, b)\n") == \
        "    acc_2 = acc\n    acc_2 = tl.dot(a, b, acc_2 * s[:, None])\n"
    assert _canonical("    acc_2 = acc\n    acc_2 += tl.dot(a, b)\n", dtype="tl.float16") == \
        "    acc_2 = acc\n    acc_2 += tl.dot(a, b)\n"
