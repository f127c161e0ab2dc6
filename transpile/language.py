"""What every public name of ``triton.language`` becomes in a Gluon variant: the one table the layout analysis and
the language rule read.

Each entry says how the name is spelled in Gluon (the same ``gl.`` name; a ``gl.`` name only Triton 3.9's Gluon has,
with what the older Gluon of the sm90 machines gets instead; Triton's own implementation compiled as a Gluon function;
a helper of this tool; the backend's libdevice), which rule handles it, or why it is refused. A refusal names what the
user can change in their source; the kernel is then kept as Triton (``engine``), never emitted half-translated.

``tests/test_language_table.py`` fails on any public name of the installed ``triton.language``, ``tl.math`` or libdevice
that is in neither column.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from dataclasses import dataclass

# How each spelling is emitted:
#   gl        `gl.<name>` (Gluon has it in Triton 3.6 and 3.9)
#   gl39      `gl.<name>` where the target needs Triton 3.9 anyway (AMD); `fallback` (a spelling of this table) on sm90
#   std       Triton's own `triton.language.standard.<name>`, compiled as a Gluon function by a module-level
#             `_<name> = gluon.jit(...)` line (Gluon has no `gl.<name>`; the implementation is Triton's, layout-generic)
#   helper    a `@gluon.jit` helper of this tool (snippet `text`), for standard functions whose Triton implementation
#             does not compile under Gluon (they build index tensors without a layout)
#   libdevice `gl.extra.libdevice.<name>` (the backend's libdevice: CUDA's on sm90, ROCm's on AMD)
#   method    a tensor method Gluon's tensors have (`x.broadcast_to(...)`)
#   triton    `triton.language.<name>` itself (enum values that Gluon's ops accept as they are)
#   own       rewritten by a rule of its own (dot, descriptors, ranges, transposes, barriers)
#   compile_time  a function of `triton.language` run when the kernel is compiled (a `constexpr_function`, such as
#             `tl.standard._log2`), which a Gluon kernel calls as the source spells it
#   keep      no Gluon form: the function calling it is kept as Triton (TT041), `text` saying why the source is best
#   refuse    refused (TT011) with `text` as the reason
KINDS = ("gl", "gl39", "std", "helper", "libdevice", "method", "triton", "own", "compile_time", "keep", "refuse")


@dataclass(frozen=True)
class Spelling:
    kind: str
    text: str = ""  # gl/gl39/std/libdevice/method/triton: the name; helper: the snippet key; refuse: the reason
    fallback: Spelling | None = None  # the spelling on targets whose Gluon is older (sm90: Triton 3.6)

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self.kind


def _gl(names: str) -> dict[str, Spelling]:
    return {n: Spelling("gl", n) for n in names.split()}


_NO_BLOCK_POINTERS = ("`tl.{}`: Gluon has no block pointers; address the tile with pointers or "
                      "`tl.make_tensor_descriptor`")
# Triton's older TMA API: a descriptor the host builds (`create_2d_tma_descriptor`) and passes as a pointer.
#: The words every diagnostic of a construct Triton's own compiler rejects for GPUs carries (a tensor indexed by an
#: integer, `x[0]`; a name `triton.language` does not have, `tl.extra.mlu`): the source is not Triton for the targets
#: the tool serves (Triton dialects of other backends write them), and `scripts/corpus_eval.py` counts such kernels
#: apart from the tool's own refusals.
NOT_TRITON = "which Triton's compiler rejects too"

# Triton removed it before 3.6 (neither 3.6 nor 3.9 has these names): the source compiles with neither either.
_REMOVED = f"{NOT_TRITON} (removed before Triton 3.6)"
_HOST_DESCRIPTORS = ("`tl.{}` reads a TMA descriptor the host built (Triton's older TMA API), " + _REMOVED + ": the "
                     "kernel does not say the tensor's base, shape and strides, which the Gluon copies need; make the "
                     "descriptor in the kernel "
                     "(`desc = tl.make_tensor_descriptor(base, [M, K], [stride, 1], [BLOCK_M, BLOCK_K])`, then "
                     "`desc.load([off_m, off_k])` / `desc.store(...)`)")
# CUDA's special registers read with inline PTX (`tl.extra.cuda`): Gluon helpers of the same assembly on sm90.
CUDA_REGISTERS = frozenset({"extra.cuda.globaltimer", "extra.cuda.smid"})
# Device-side creation of TMA descriptors in global memory, and its fence (`tl.extra.cuda`).
EXTRA_REFUSALS = {
    **{f"extra.cuda.{n}": (f"`tl.extra.cuda.{n}` builds a TMA descriptor in global memory on the device (Triton's older "
                           f"TMA API), {_REMOVED}; Gluon has no counterpart: make the descriptor with "
                           "`tl.make_tensor_descriptor(base, shape, strides, block_shape)`, which needs no fence")
       for n in ("experimental_device_tensormap_create1d", "experimental_device_tensormap_create2d")},
    "extra.cuda.experimental_tensormap_fenceproxy_acquire": (
        "`tl.extra.cuda.experimental_tensormap_fenceproxy_acquire` fences a TMA descriptor built in global memory on "
        f"the device (Triton's older TMA API), {_REMOVED}; Gluon has no counterpart: make the descriptor with "
        "`tl.make_tensor_descriptor(base, shape, strides, block_shape)`, which needs no fence"),
}
_SORT = ("a bitonic network over reshaped views of the tile: Triton's compiler derives each reshape's layout from its "
         "operand's, where a Gluon translation converts every reshaped result through shared memory (such a "
         "network, a 256-element argsort, ran at 10-16x the source's time on an H200), so the source kernel is what "
         "every target runs best")

TABLE: dict[str, Spelling] = {
    # ---- the language surface Gluon shares, Triton 3.6 and 3.9 alike --------------------------------------------
    **_gl("""
        program_id num_programs arange zeros zeros_like full load store where cdiv maximum minimum exp exp2 log log2
        sqrt sqrt_rn rsqrt abs cos sin erf floor ceil fma fdiv div_rn umulhi sum max min xor_sum reduce reduce_or
        associative_scan atomic_add atomic_max atomic_min atomic_and atomic_or atomic_xor atomic_xchg atomic_cas
        multiple_of max_contiguous max_constancy static_range static_assert static_print device_print device_assert
        cast permute reshape ravel expand_dims broadcast histogram inline_asm_elementwise map_elementwise
        add sub mul assume
        float16 bfloat16 float32 float64 int1 int8 int16 int32 int64 uint8 uint16 uint32 uint64
        float8e4nv float8e5 float8e4b15 float8e4b8 float8e5b16 constexpr tensor pointer_type block_type dtype void
        tuple tuple_type
    """),
    # ---- Gluon names only Triton 3.9 has ----------------------------------------------------------------------------
    "cumsum": Spelling("gl39", "cumsum", Spelling("std", "cumsum")),
    "cumprod": Spelling("gl39", "cumprod", Spelling("std", "cumprod")),
    "clamp": Spelling("gl39", "clamp", Spelling("helper", "clamp")),
    "gather": Spelling("gl39", "gather", Spelling("refuse", "`tl.gather` needs Triton 3.9's Gluon (its 3.6 Gluon "
                                                            "cannot lay out the result); the sm90 variant must "
                                                            "compile under 3.6")),
    "atomic_load": Spelling("gl39", "atomic_load", Spelling("refuse", "`tl.atomic_load` needs Triton 3.9")),
    "atomic_store": Spelling("gl39", "atomic_store", Spelling("refuse", "`tl.atomic_store` needs Triton 3.9")),
    "atomic_poll": Spelling("gl39", "atomic_poll", Spelling("refuse", "`tl.atomic_poll` needs Triton 3.9")),
    "split": Spelling("gl", "split"),
    "join": Spelling("gl", "join"),
    "interleave": Spelling("std", "interleave"),
    "to_tensor": Spelling("gl39", "to_tensor", Spelling("refuse", "`tl.to_tensor` needs Triton 3.9")),
    "expect_zero": Spelling("gl39", "expect_zero", Spelling("refuse", "`tl.expect_zero` needs Triton 3.9")),
    "aggregate_replace": Spelling("gl39", "aggregate_replace",
                                  Spelling("refuse", "`tl.aggregate_replace` needs Triton 3.9")),
    # ---- triton.language.standard: Triton's own implementation, compiled as a Gluon function ----------------------
    **{n: Spelling("std", n) for n in (
        "sigmoid flip swizzle2d rand randn randint rand4x randn4x randint4x philox philox_impl "
        "pair_uniform_to_normal uint_to_uniform_float"
    ).split()},
    # ---- standard functions whose Triton implementation Gluon cannot compile: helpers of this tool --------------
    "softmax": Spelling("helper", "softmax"),
    "argmax": Spelling("helper", "argmax"),
    "argmin": Spelling("helper", "argmin"),
    # ---- other spellings ------------------------------------------------------------------------------------------
    "view": Spelling("refuse", "`tl.view` may reorder the elements, in an order Triton's compiler picks: its Gluon "
                     "translation could not give the same tensor (write `tl.reshape` where the order matters)"),  # `tl.view` is the deprecated name of a reshape that may reorder
    "unsqueeze": Spelling("gl", "expand_dims"),
    "broadcast_to": Spelling("method", "broadcast_to"),
    "PropagateNan": Spelling("triton", "PropagateNan"),
    # ---- rules of their own ---------------------------------------------------------------------------------------
    **{n: Spelling("own") for n in "dot dot_scaled make_tensor_descriptor range trans debug_barrier".split()},
    # ---- refused, with what the user can do --------------------------------------------------------------------
    "make_block_ptr": Spelling("refuse", _NO_BLOCK_POINTERS.format("make_block_ptr")),
    "advance": Spelling("refuse", _NO_BLOCK_POINTERS.format("advance")),
    "sort": Spelling("keep", _SORT),
    "topk": Spelling("keep", _SORT),
    "bitonic_merge": Spelling("keep", _SORT),
    "cat": Spelling("refuse", "`tl.cat` (concatenation that may reorder elements) has no Gluon counterpart; "
                              "`tl.join` then `tl.reshape` concatenates in a defined order"),
    "squeeze": Spelling("refuse", "`tl.squeeze` has no Gluon counterpart; write `tl.reshape` to the smaller shape"),
    "load_tensor_descriptor": Spelling("refuse", "write `desc.load(offsets)` instead of `tl.load_tensor_descriptor`"),
    **{n: Spelling("refuse", _HOST_DESCRIPTORS.format(n)) for n in (
        "_experimental_descriptor_load", "_experimental_descriptor_store")},
    "_experimental_make_tensor_descriptor": Spelling("refuse", "`tl._experimental_make_tensor_descriptor` is the "
                                                     f"older name of `tl.make_tensor_descriptor`, {_REMOVED} (the "
                                                     "same arguments): write that"),
    "store_tensor_descriptor": Spelling("refuse", "write `desc.store(offsets, value)` instead of "
                                                  "`tl.store_tensor_descriptor`"),
    "tensor_descriptor": Spelling("refuse", "tensor-descriptor parameters (`tl.tensor_descriptor`) are not "
                                            "translated; make the descriptor in the kernel with "
                                            "`tl.make_tensor_descriptor`"),
    "tensor_descriptor_type": Spelling("refuse", "`tl.tensor_descriptor_type` is not translated"),
    "const": Spelling("refuse", "`tl.const` parameters have no Gluon counterpart; drop the annotation"),
    "constexpr_type": Spelling("refuse", "`tl.constexpr_type` is Triton's internal type of constexprs; annotate "
                                         "with `tl.constexpr`"),
    "condition": Spelling("refuse", "`tl.condition` is not translated"),
    "slice": Spelling("refuse", "`tl.slice` is Triton's internal slice object; slicing tensors is not supported"),
    "pi32_t": Spelling("refuse", "`tl.pi32_t` (Triton's internal pointer type) is not translated"),
    "str_to_ty": Spelling("refuse", "`tl.str_to_ty` is Triton's internal type parser; write the dtype (`tl.float16`)"),
    "target_info": Spelling("refuse", "`tl.target_info` queries are not translated; pass the value as a constexpr"),
    "TRITON_MAX_TENSOR_NUMEL": Spelling("refuse", "`tl.TRITON_MAX_TENSOR_NUMEL` is not translated; use the number "
                                                  "(a host-side constant)"),
}

# Submodules of triton.language: names inside them are looked up by their last part (`tl.core.load` is `load`).
MODULES = frozenset({"core", "standard", "math", "semantic", "random", "extra"})
# Module names a libdevice function is reached through (`tl.extra.cuda.libdevice.tanh`, `libdevice.tanh` imported
# from `triton.language.extra`, Triton 2's `tl.libdevice`).
LIBDEVICE_MODULES = ("extra.cuda.libdevice", "extra.hip.libdevice", "extra.libdevice", "libdevice", "math")

# Tensor methods (`x.argmax(1)`) whose implementation does not compile under Gluon: rewritten to the function form.
METHOD_FUNCTIONS = frozenset({"argmax", "argmin", "softmax", "sort", "topk"})


@functools.cache
def libdevice_names(backend: str) -> frozenset[str]:
    """Public functions of the installed Triton's libdevice for `backend` ("cuda" or "hip")."""
    names = _libdevice_source_names(backend)
    if names is not None:
        return names
    import importlib

    module = importlib.import_module(f"triton.language.extra.{backend}.libdevice")
    return frozenset(n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n)))


def _libdevice_source_names(backend: str) -> frozenset[str] | None:
    """`libdevice_names` read from the module's source, without importing Triton (about 80 ms in every process of a
    run): the public functions its top level defines, where that top level is function definitions, a docstring and
    ``from triton.language import core`` (a module, not callable) alone; else None (the module is imported)."""
    import ast
    import importlib.util
    from pathlib import Path

    try:
        spec = importlib.util.find_spec("triton")  # (a top-level package: found, not imported)
        if spec is None or not spec.submodule_search_locations:
            return None
        path = Path(list(spec.submodule_search_locations)[0]) / "language" / "extra" / backend / "libdevice.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (ImportError, ValueError, OSError, SyntaxError):
        return None
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            if not node.name.startswith("_"):
                names.add(node.name)
        elif not ((isinstance(node, ast.ImportFrom) and node.module == "triton.language" and node.level == 0
                   and [(a.name, a.asname) for a in node.names] == [("core", None)])
                  or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                      and isinstance(node.value.value, str))):
            return None
    return frozenset(names)


def lookup(lang: str, backend: str, min_triton: tuple[int, int]) -> Spelling | None:
    """The spelling of `tl.<lang>` (``lang`` as `language_name` gives it: ``math.exp``, ``extra.cuda.libdevice.tanh``)
    on a target of `backend` whose variants must compile under `min_triton`; None for a submodule itself (its
    attributes are looked up) or a name of no known kind."""
    module, _, name = lang.rpartition(".")
    if lang in MODULES or lang in LIBDEVICE_MODULES or lang.startswith("extra.") and lang.count(".") < 2:
        return None
    spelling = TABLE.get(name) if module in ("", "core", "standard", "math", "semantic", "random") else None
    if spelling is None and (module in LIBDEVICE_MODULES or module.endswith(".libdevice")):
        if not in_triton(module):  # (`tl.extra.mlu.libdevice`: another backend's)
            return Spelling("refuse", _not_triton(module))
        if name in libdevice_names(backend):
            return Spelling("libdevice", name)
        other = "cuda" if backend == "hip" else "hip"
        if name in libdevice_names(other):
            return Spelling("refuse", f"`libdevice.{name}` exists only in {other.upper()}'s libdevice; this target's "
                                      "has no such function")
        return Spelling("refuse", f"`{lang}` is not a libdevice function of this Triton")
    if spelling is None and lang in EXTRA_REFUSALS:
        return Spelling("refuse", EXTRA_REFUSALS[lang])
    if spelling is None and lang in CUDA_REGISTERS:
        # inline PTX, what Triton itself emits for it, on sm90; on AMD targets a helper that fails at compile time
        # where it is called, as Triton's compile of the PTX does (a branch a platform flag leaves out is not)
        return Spelling("helper", name if backend == "cuda" else f"{name}_not_amd")
    if spelling is None and name and (compile_time(lang) and (min_triton >= (3, 9) or name in CONSTEXPR_36)
                                      or python_function(lang)):
        # (a plain Python function of the language core, `tl.core.get_int_dtype`, is one in both versions)
        return Spelling("compile_time", lang)
    if spelling is None and name and not in_triton(lang):
        return Spelling("refuse", _not_triton(lang))
    if spelling is None:
        return Spelling("refuse", f"`tl.{lang}` has no Gluon translation in this tool") if name else None
    if spelling.fallback is not None and min_triton < (3, 9):
        return spelling.fallback
    return spelling



_MISSING = object()


@functools.cache
def _resolved(lang: str) -> object:
    """What `tl.<lang>` names in the installed `triton.language` (a submodule is imported to look into it), or
    `_MISSING`."""
    import triton.language

    value: object = triton.language
    for part in lang.split("."):
        if hasattr(value, part):
            value = getattr(value, part)
            continue
        module = getattr(value, "__name__", None)
        if module is None or not module.startswith("triton.language"):
            return _MISSING
        try:
            value = importlib.import_module(f"{module}.{part}")
        except ImportError:
            return _MISSING
    return value


def _not_triton(lang: str) -> str:
    return (f"`tl.{lang}` is not a name of `triton.language`, {NOT_TRITON} (another backend's dialect, or a "
            "misspelling): write it with the functions Triton has")


def in_triton(lang: str) -> bool:
    """`tl.<lang>` names something in the installed `triton.language`."""
    return _resolved(lang) is not _MISSING


#: The `constexpr_function`s of `triton.language.standard` Triton 3.6 (sm90's version) defines as such too (read in
#: its wheel); another Triton 3.9 one may be a `@jit` function there, which a Gluon kernel cannot call.
CONSTEXPR_36 = frozenset({"_get_flip_dim", "_get_int_dtype", "_is_power_of_two", "_log2", "_pick_sum_dtype"})


def compile_time(lang: str) -> bool:
    """`tl.<lang>` is a `constexpr_function` of `triton.language`: run by the compiler on constexpr arguments, in a
    Gluon kernel as in a Triton one."""
    from triton.runtime.jit import ConstexprFunction

    return isinstance(_resolved(lang), ConstexprFunction)


def python_function(lang: str) -> bool:
    """`tl.<lang>` is a plain Python function of `triton.language.core` (`get_int_dtype(bitwidth, signed)`): Triton's
    code generator, and Gluon's, call it as Python when the kernel is compiled."""
    found = _resolved(lang)
    return inspect.isfunction(found) and found.__module__ == "triton.language.core" and not any(
        getattr(found, flag, False) for flag in ("__triton_builtin__", "__triton_aggregate__"))


def refused_on_every_target(lang: str) -> bool:
    """A refusal that does not depend on the target: the layout analysis reports it once, for every target. What
    only some targets lack (Triton 3.6's Gluon on sm90, a function one backend's libdevice lacks) the language rule
    reports per target."""
    spelling = lookup(lang, "cuda", (3, 9))
    return (spelling is not None and spelling.kind == "refuse"
            and not (lang.startswith("extra.") or "libdevice" in lang))


def gluon_text(spelling: Spelling) -> str:
    """The expression that replaces the `tl.` name (for the kinds that are a plain rename)."""
    if spelling.kind in ("gl", "gl39"):
        return f"gl.{spelling.text}"
    if spelling.kind in ("std", "helper"):
        return f"_{spelling.text}"
    if spelling.kind == "libdevice":
        return f"gl.extra.libdevice.{spelling.text}"
    if spelling.kind == "triton":
        return spelling.text  # imported from triton.language by the target's import lines
    raise ValueError(spelling.kind)


def snippet_key(spelling: Spelling) -> str | None:
    """The module-level helper a spelling needs (`std_sigmoid`, `argmax`), or None."""
    if spelling.kind == "std":
        return f"std_{spelling.text}"
    if spelling.kind == "helper":
        return spelling.text
    return None


RANDOM = frozenset("rand randn randint rand4x randn4x randint4x philox philox_impl pair_uniform_to_normal "
                   "uint_to_uniform_float".split())  # in triton.language.random; the other `std` names in .standard


def std_snippet(name: str) -> str:
    module = "random" if name in RANDOM else "standard"
    return (f"\n# Triton's own `tl.{name}` (triton.language.{module}), compiled as a Gluon function.\n"
            f"_{name} = gluon.jit(tl_{module}.{name}.fn)\n")


# Gluon forms of language functions (`transpile/helpers/language.py`): key -> the definitions a variant carries
HELPERS = {
    "scalar_operand": ("_scalar_operand",),
    "softmax": ("_softmax",),
    "clamp": ("_clamp",),
    "globaltimer": ("_globaltimer",),
    "smid": ("_smid",),
    "globaltimer_not_amd": ("_globaltimer_not_amd",),
    "smid_not_amd": ("_smid_not_amd",),
    "index_along": ("_index_along",),
    "argmax": ("_argmax_combine", "_argmax_combine_last", "_argmax"),
    "argmin": ("_argmin_combine", "_argmin_combine_last", "_argmin"),
    "max_with_indices": ("_max_with_indices",),
    "min_with_indices": ("_min_with_indices",),
}
HELPER_NEEDS = {"argmax": ("index_along",), "argmin": ("index_along",), "max_with_indices": ("argmax", "index_along"),
                "min_with_indices": ("argmin", "index_along")}
CALLEES = frozenset({"index_along"})  # helpers other helpers call: emitted first


def snippet(key: str) -> str | None:
    """Source text of a language helper snippet (`std_sigmoid`, `argmax`, ...), or None for other keys."""
    if key.startswith("std_"):
        return std_snippet(key[4:])
    if key not in HELPERS:
        return None
    from transpile.helpers import Helper

    return Helper("language", HELPERS[key]).text()
