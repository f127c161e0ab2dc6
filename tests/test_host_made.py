"""TMA descriptors the launcher makes on the host (transpile/rules/host_made.py, `_HostMade` in
transpile/helpers/launchers.py): which descriptors a Gluon kernel may take as parameters, the launcher making them
from a launch's arguments with the kernel's own parts and layout, and the variant compiling both ways (the kernel
given descriptors makes none on the device)."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import libcst as cst
import pytest
import torch

from transpile.engine import translate_file
from transpile.rules.host_made import MadeDescriptor, host_made
from transpile.targets import get_target
from transpile.verify import verify

KERNEL = '''
@gluon.jit
def k(x_ptr, y_ptr, M, K, stride_xm, BLOCK_M: gl.constexpr, BLOCK_K: gl.constexpr):
    pid = gl.program_id(0)
    # the tiles as TMA descriptors
    x_desc = tma.make_tensor_descriptor(
        x_ptr,
        shape=[M, K // 2],
        strides=[stride_xm, 1],
        block_shape=[BLOCK_M, BLOCK_K],
        layout=gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_K], x_ptr.dtype.element_ty),
    )
    y_desc = tma.make_tensor_descriptor(
        y_ptr,
        shape=[M, K],
        strides=[K, 1],
        block_shape=[BLOCK_M, BLOCK_K],
        layout=gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_K], y_ptr.dtype.element_ty),
    )
    tile = _tma_load(x_desc, [pid * BLOCK_M, 0], layout)
    _tma_store(y_desc, [pid * BLOCK_M, 0], tile)
'''


def _function(text: str) -> cst.FunctionDef:
    statement = cst.parse_module(text).body[0]
    assert isinstance(statement, cst.FunctionDef)
    return statement


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def test_descriptors_of_parameters_become_parameters_made_on_the_host() -> None:
    function, made = host_made(_function(KERNEL))
    assert made == (MadeDescriptor("x_desc", "x_ptr", ("M", "K // 2"), ("stride_xm", "1"), ("BLOCK_M", "BLOCK_K")),
                    MadeDescriptor("y_desc", "y_ptr", ("M", "K"), ("K", "1"), ("BLOCK_M", "BLOCK_K")))
    assert made[0].reads() == ["M", "K", "stride_xm", "BLOCK_M", "BLOCK_K"]
    code = _code(function)
    assert "BLOCK_K: gl.constexpr, x_desc=None, y_desc=None):" in code
    # each made under a test Triton decides at compile time; the comments above it stay there
    assert "    # the tiles as TMA descriptors\n" in code and "    if x_desc is None:\n        x_desc = tma." in code
    assert "    if y_desc is None:\n        y_desc = tma." in code
    assert code.count("_HostMade") == 1  # (the note, over the first)
    # a second run finds nothing more to take (the descriptors are parameters now)
    again, more = host_made(function)
    assert more == () and again is function


@pytest.mark.parametrize(("change", "why"), [
    (("x_ptr,\n        shape=[M, K // 2]", "x_ptr + pid * stride_xm,\n        shape=[M, K // 2]"),
     "a base offset per program"),
    (("pid = gl.program_id(0)", "pid = gl.program_id(0)\n    stride_xm = stride_xm * 2"), "a parameter the kernel reassigns"),
    (("shape=[M, K // 2]", "shape=[pid, K // 2]"), "a local value in the shape"),
    (("shape=[M, K // 2]", "shape=[M, gl.cdiv(K, 2)]"), "a call in the shape"),
    (("strides=[stride_xm, 1]", "strides=[stride_xm, stride_xm]"), "a last stride not 1"),
    (("get_default_for([BLOCK_M, BLOCK_K], x_ptr.dtype.element_ty)", "get_default_for([BLOCK_M, BLOCK_K], "
      "gl.float16)"), "a layout of another element type"),
    (("    tile = _tma_load", "    x_desc = y_desc\n    tile = _tma_load"), "a name assigned twice"),
])
def test_descriptors_the_host_cannot_make_stay_in_the_kernel(change: tuple[str, str], why: str) -> None:
    text = KERNEL.replace(*change, 1)
    assert text != KERNEL
    _, made = host_made(_function(text))
    assert [d.name for d in made] == ["y_desc"], why


def test_a_descriptor_made_in_a_branch_stays_in_the_kernel() -> None:
    text = KERNEL.replace("    x_desc = tma.make_tensor_descriptor(", "    if M > 0:\n        x_desc = "
                          "tma.make_tensor_descriptor(", 1)
    function = cst.parse_module(text.replace("\n        ", "\n            ").replace(
        "if M > 0:\n            x_desc", "if M > 0:\n        x_desc")).body[0]
    _, made = host_made(function)  # type: ignore[arg-type]
    assert [d.name for d in made] == ["y_desc"]


LAUNCHERS = "".join(get_target("sm90").snippet(n) for n in ("launch_values", "tma_or_triton", "tma_scratch",
                                                             "config_split", "host_made"))


def _launchers() -> dict[str, object]:
    scope: dict[str, object] = {}
    exec(compile(LAUNCHERS, "launchers", "exec"), scope)  # noqa: S102 - the helpers' own code, as variants carry it
    return scope


MADE = ("(('x_desc', 'x_ptr', lambda M, K, stride_xm, BLOCK_M, BLOCK_K: ([M, K // 2], [stride_xm, 1], "
        "[BLOCK_M, BLOCK_K])),)")


def test_the_launcher_makes_the_kernels_descriptor_from_the_launch() -> None:
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    scope = _launchers()
    made = scope["_HostMade"](eval(MADE))  # type: ignore[operator]
    x = torch.empty(256, 512, dtype=torch.float16)
    values = {"x_ptr": x, "M": 256, "K": 1024, "stride_xm": 512, "BLOCK_M": 128, "BLOCK_K": 64}
    descriptor = made.descriptors(values)["x_desc"]
    assert isinstance(descriptor, TensorDescriptor) and descriptor.base is x
    assert (list(descriptor.shape), list(descriptor.strides), list(descriptor.block_shape)) == \
        ([256, 512], [512, 1], [128, 64])
    # the layout the kernel would give it: the block's default for the element type
    assert descriptor.layout == gl.NVMMASharedLayout.get_default_for([128, 64], gl.float16)
    fp8 = made.descriptors({**values, "x_ptr": x.to(torch.float8_e4m3fn)})["x_desc"]
    assert fp8.layout == gl.NVMMASharedLayout.get_default_for([128, 64], gl.float8e4nv)
    # a part the launch does not give (a constexpr left at its default), a row stride TMA cannot address (14
    # bytes), an element type it has no descriptor for: left to the kernel
    assert made.descriptors({k: v for k, v in values.items() if k != "BLOCK_K"}) == {}
    assert made.descriptors({**values, "stride_xm": 7}) == {}
    assert made.descriptors({**values, "x_ptr": x.to(torch.float64)}) == {}


class _Recorded:
    """Stands for a kernel: `kernel[grid](*args, **kwargs)` records the keyword arguments it was launched with."""

    def __init__(self) -> None:
        self.launches: list[dict[str, object]] = []

    def __getitem__(self, grid: object) -> object:
        return lambda *args, **kwargs: self.launches.append(kwargs)


def test_a_launch_of_the_gluon_kernel_passes_the_descriptors_made() -> None:
    scope = _launchers()
    gluon, source = _Recorded(), _Recorded()
    launcher = scope["_TMAOrTriton"](  # type: ignore[operator]
        gluon, source, params=("x_ptr", "M", "K", "stride_xm", "BLOCK_M", "BLOCK_K"),
        tiles=(("x_ptr", "stride_xm", None, (), True),), made=scope["_HostMade"](eval(MADE)))  # type: ignore[operator]
    x = torch.empty(256, 512, dtype=torch.float16)
    # an eager launch (no CUDA graph captured): the kernel makes its descriptor
    launcher[(2,)](x, 256, 1024, 512, BLOCK_M=128, BLOCK_K=64)
    assert list(gluon.launches[0]) == ["BLOCK_M", "BLOCK_K"]
    scope["_HostMade"].wanted = staticmethod(lambda: True)  # type: ignore[attr-defined] # (as while capturing)
    launcher[(2,)](x, 256, 1024, 512, BLOCK_M=128, BLOCK_K=64)
    assert list(gluon.launches[1]) == ["BLOCK_M", "BLOCK_K", "x_desc"] and not source.launches
    launcher[(2,)](x, 256, 1024, 512, BLOCK_M=128)  # (BLOCK_K at the kernel's default: the kernel makes it)
    assert list(gluon.launches[2]) == ["BLOCK_M"]
    launcher[(2,)](x[:, 1:], 256, 1024, 512, BLOCK_M=128, BLOCK_K=64)  # misaligned: the source kernel
    assert len(gluon.launches) == 3 and len(source.launches) == 1 and "x_desc" not in source.launches[0]


@pytest.mark.slow
def test_the_variant_compiles_with_descriptors_made_on_the_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               verify_values) -> None:
    root = Path(__file__).resolve().parents[1]
    path = root / "fixtures" / "suite_block_fp8_linear.py"
    # (its TMA ring: --gluon-always, since by default sm90 keeps this loop in a measured-faster Triton form)
    result = translate_file(path, get_target("sm90"), gluon_always=True)
    assert 'made=_HostMade(' in result.text and "    if x_desc is None:\n" in result.text
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    compiled = verify(dataclasses.replace(result), verify_values["suite_block_fp8_linear.py"])
    gluon = [c for c in compiled if c.kernel == "block_fp8_linear_kernel" and c.asm.get("ptx")]
    device, host = ([c for c in gluon if ("made on the host" in c.label) == on_host] for on_host in (False, True))
    assert len(device) == 1 and len(host) == 1 and host[0].ok, [c.message for c in host]
    # the kernel passed descriptors makes none: no descriptor written to global memory and fenced
    assert "tensormap" in device[0].asm["ptx"] and "tensormap" not in host[0].asm["ptx"]


LAUNCHERS_ONLY_MADE = "".join(get_target("sm90").snippet(n) for n in ("launch_values", "host_made", "made_on_host"))


class _Runs:
    """Stands for a kernel's function under an autotuner: `run` records the keyword arguments it was given."""

    arg_names = ("x_ptr", "M", "K", "stride_xm", "BLOCK_M", "BLOCK_K")

    def __init__(self) -> None:
        self.runs: list[dict[str, object]] = []

    def run(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        self.runs.append(kwargs)


class _Autotuned(_Recorded):
    configs = ()

    def __init__(self) -> None:
        super().__init__()
        self.fn = _Runs()


def test_a_kernel_without_another_launcher_gets_one_that_makes_its_descriptors() -> None:
    scope: dict[str, object] = {}
    exec(compile(LAUNCHERS_ONLY_MADE, "launchers", "exec"), scope)  # noqa: S102
    params = ("x_ptr", "M", "K", "stride_xm", "BLOCK_M", "BLOCK_K")
    kernel = _Recorded()
    launcher = scope["_MadeOnHost"](kernel, params=params, made=scope["_HostMade"](eval(MADE)))  # type: ignore[operator]
    x = torch.empty(256, 512, dtype=torch.float16)
    launcher[(2,)](x, 256, 1024, 512, BLOCK_M=128, BLOCK_K=64)  # eager: the kernel makes its descriptor
    assert list(kernel.launches[0]) == ["BLOCK_M", "BLOCK_K"]
    scope["_HostMade"].wanted = staticmethod(lambda: True)  # type: ignore[attr-defined] # (as while capturing)
    launcher[(2,)](x, 256, 1024, 512, BLOCK_M=128, BLOCK_K=64)
    assert list(kernel.launches[1]) == ["BLOCK_M", "BLOCK_K", "x_desc"]
    # autotuned: the autotuner's runs of each config get the descriptors made at that config's block sizes
    tuned = _Autotuned()
    scope["_MadeOnHost"](tuned, params=params, made=scope["_HostMade"](eval(MADE)))  # type: ignore[operator]
    tuned.fn.run(x, 256, 1024, 512, BLOCK_M=64, BLOCK_K=32)
    assert list(tuned.fn.fn.runs[0]) == ["BLOCK_M", "BLOCK_K", "x_desc"]
    assert list(tuned.fn.fn.runs[0]["x_desc"].block_shape) == [64, 32]
