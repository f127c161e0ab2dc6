"""The undefined-name check (transpile/names.py): on known-bad snippets, and over every golden variant."""

from __future__ import annotations

import ast

import libcst as cst
import pytest

from transpile.names import undefined_in_statements, undefined_names
from conftest import EXPECTED_DIR


def _names(text: str) -> list[str]:
    return [u.name for u in undefined_names(text)]


def test_golden_has_no_undefined_name(fixture_name: str, target_name: str) -> None:
    path = EXPECTED_DIR / target_name / f"{fixture_name}_{target_name}.py"
    found = undefined_names(path.read_text(encoding="utf-8"))
    assert not found, "\n".join(f"{path}:{u}" for u in found)


@pytest.mark.parametrize(("text", "expected"), [
    # a helper called but never emitted (the sm90 descriptor golden once called `_tma_load` without defining it)
    ("def k(d):\n    return _tma_load(d, [0, 0])\n", ["_tma_load"]),
    # a tile read in a pipelined branch that only the other branch loads
    ("def k(p, C):\n    if C:\n        acc = v + 1\n    else:\n        v = p\n        acc = v\n    return acc\n", ["v"]),
    # used before it is bound, inside a loop (Triton carries only values defined before the loop)
    ("def k(n):\n    for i in range(n):\n        x = y\n        y = i\n", ["y"]),
    ("def k(n):\n    acc = 0\n    for i in range(n):\n        acc += i\n    return acc\n", []),
    ("import math\nG = 2\n\ndef k(xs, *a, z=G, **kw):\n    t = [x * y for x in xs for y in a if y > math.pi]\n"
     "    f = lambda q: q + z\n    if (w := len(t)) > 1:\n        return f(w), kw, print\n    return helper()\n\n"
     "def helper():\n    return G\n", []),
    ("def k(a):\n    b = a\n    if a:\n        c = 1\n    return b, c\n", []),  # a constexpr `if` may bind it
    ("def k(a):\n    a += b\n", ["b"]),
    # a closure reads its enclosing function's names when called: `n` bound after `grid` is defined (a public
    # launch wrapper's style); a method's `__class__`; a name bound nowhere is still reported
    ("def f(x):\n    def grid(meta):\n        return (n // meta['B'],)\n    n = len(x)\n    return grid\n", []),
    ("class C:\n    def m(self):\n        return __class__\n", []),
    ("def f(x):\n    def grid(meta):\n        return (m // meta['B'],)\n    n = len(x)\n    return grid\n", ["m"]),
])
def test_undefined_names(text: str, expected: list[str]) -> None:
    assert _names(text) == expected


@pytest.mark.parametrize("text", [
    "def k(d):\n    return _tma_load(d, [0, 0])\n\n\ndef j(p):\n    return q + _tma_load\n",
    "import math\nx = y; y = 1\n\ndef k(a):\n    if a:\n        c = 1\n    return b, c, math.pi, z\n\nz = w\n",
    "def k(a):\n    return u\n\ndef k(a):\n    return u\n",  # the same function twice: both reported
    # assignment expressions and declarations (looked for only in the statements whose text holds them)
    "x = (n := 3)\n\ndef k(a):\n    if (w := a) > 1:\n        return w, n, m\n\ndef j():\n    global G\n"
    "    def i():\n        nonlocal_ = 1\n        return H, nonlocal_\n    return G, u, i\n",
])
def test_undefined_in_statements_is_undefined_names(text: str) -> None:
    """The per-statement check the engine runs gives the names of the whole-text check, in the same order, with and
    without the statements' texts."""
    module = cst.parse_module(text)
    statements = [ast.parse(module.code_for_node(s)).body for s in module.body]
    whole = [(u.function, u.name) for u in undefined_names(text)]
    assert [(u.function, u.name) for _, u in undefined_in_statements(statements)] == whole
    texts = [module.code_for_node(s) for s in module.body]
    statements = [ast.parse(t).body for t in texts]
    assert [(u.function, u.name) for _, u in undefined_in_statements(statements, texts=texts)] == whole
    assert whole


# A module that imports only from triton (`from triton import jit, language as tl`, tritonbench's GEMM kernels): the
# launch helpers a variant carries ask `triton.runtime.driver` for the device, so the variant binds `triton` itself.
FROM_TRITON = '''from triton import jit, language as tl


@jit
def gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
'''


@pytest.mark.parametrize("target", ["gfx942", "gfx950", "gfx1250"])
def test_a_variant_of_a_module_importing_only_from_triton_binds_triton(target: str) -> None:
    from transpile.engine import translate_source
    from transpile.targets import get_target

    result = translate_source(FROM_TRITON, "k.py", get_target(target))
    assert result.functions[0].pipelined and "triton.runtime.driver" in result.text
    assert _names(result.text) == []
    assert result.text.count("\nimport triton\n") == 1
    # ... and a module that binds it already gets no second import
    bound = translate_source("import triton\n" + FROM_TRITON, "k.py", get_target(target))
    assert bound.text.count("import triton\n") == 1 and _names(bound.text) == []
