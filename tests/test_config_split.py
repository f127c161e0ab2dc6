"""The AMD launcher of an autotuned warp-pipelined kernel splits its autotune configs (transpile/passes/tma_tiles.py,
`_ConfigSplit`): a config at 8 warps whose values pass the kernel's `source_when` tests and leave room for two ring
slots runs on the Gluon kernel, every other config on the source kernel at its own warps; and every launcher's
autotuner times each config's source twin against it, keeping the source where it is faster. Run by Triton's
interpreter, with two Triton kernels standing for the two (each writes its own mark), so that what each config
launched is read from memory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from transpile.targets import get_target

LAUNCHER = get_target("gfx950").snippet("launch_values") + get_target("gfx950").snippet("tma_or_triton") \
    + get_target("gfx950").snippet("tma_scratch")
WARP_PIPELINED_LAUNCHER = get_target("gfx950").snippet("warp_pipelined_or_triton") \
    + get_target("gfx950").snippet("config_split")
SM90 = get_target("sm90")
ONE_WAVE_LAUNCHER = "".join(SM90.snippet(n) for n in ("launch_values", "persistent_grid", "tma_or_triton",
                                                       "one_wave_or_triton", "config_split"))

RUN = '''
import torch
import triton
import triton.language as tl

@triton.jit
def gluon_stand_in(out_ptr, x_ptr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, 4), tl.full([4], 1, tl.int32))

@triton.jit
def source_kernel(out_ptr, x_ptr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, 4), tl.full([4], 2, tl.int32))
''' + LAUNCHER + WARP_PIPELINED_LAUNCHER + '''
# The interpreter has no benchmarker: each autotuner times a config by the mark its run leaves (1: the Gluon kernel,
# 1.0; 2: the source kernel, SOURCE_TIME), so that the split and the source twins can be told apart.
SOURCE_TIME = [2.0]
OUT = [None]

def timer(kernel_call, quantiles=None, **kwargs):
    OUT[0].zero_()
    kernel_call()
    t = 1.0 if int(OUT[0][0]) == 1 else SOURCE_TIME[0]
    return [t, t, t]

def launch(config, lds=None, source_when=(lambda BLOCK_M: BLOCK_M < 128,)):
    gluon = triton.autotune(configs=[config], key=[])(gluon_stand_in)
    gluon._do_bench = timer
    source = triton.autotune(configs=[triton.Config(config.kwargs, num_warps=4)], key=[])(source_kernel)
    kernel = _WarpPipelinedOrTriton(gluon, source, params=("out_ptr", "x_ptr", "BLOCK_M", "BLOCK_N"), tiles=(),
                                    source_when=source_when, lds=lds)
    out = OUT[0] = torch.zeros(4, dtype=torch.int32)
    kernel[(1,)](out, torch.zeros(16, dtype=torch.float16))
    return int(out[0])

assert launch(triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8)) == 1  # pipelined: the Gluon kernel
assert launch(triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=8)) == 2  # 8 rows a warp: the source's
assert launch(triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=4)) == 2  # 4 warps: the source's
# two slots of [BLOCK_M, BLOCK_N] fp16 tiles: 32 KiB fit 64 KiB, 128 KiB do not
rings = (65536, ((("BLOCK_M", "BLOCK_N"), "x_ptr"),))
assert launch(triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8), lds=rings, source_when=()) == 1
assert launch(triton.Config({"BLOCK_M": 256, "BLOCK_N": 256}, num_warps=8), lds=rings, source_when=()) == 2
# each config's source twin is timed against it: where the source runs faster, the autotuner keeps the twin
SOURCE_TIME[0] = 0.5
assert launch(triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8)) == 2
print("SPLIT")
'''


@pytest.mark.slow
def test_autotune_configs_run_where_the_gluon_kernel_pipelines_them(tmp_path: Path) -> None:
    (tmp_path / "run.py").write_text(RUN)
    result = subprocess.run([sys.executable, str(tmp_path / "run.py")], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TRITON_INTERPRET": "1"})
    assert result.returncode == 0 and "SPLIT" in result.stdout, result.stderr[-3000:]


ONE_WAVE_RUN = '''
import torch
import triton
import triton.language as tl

@triton.jit
def gluon_stand_in(out_ptr, M, BLOCK_M: tl.constexpr):
    tl.store(out_ptr + tl.program_id(0) + tl.arange(0, 1), tl.full([1], 1, tl.int32))

@triton.jit
def source_kernel(out_ptr, M, BLOCK_M: tl.constexpr):
    tl.store(out_ptr + tl.program_id(0) + tl.arange(0, 1), tl.full([1], 2, tl.int32))
''' + ONE_WAVE_LAUNCHER + '''
_sm_count = lambda: 4  # (a device of 4 SMs: the interpreter has none)
# The interpreter has no benchmarker: each autotuner times a config by the mark its run leaves (1: the Gluon kernel,
# 1.0; 2: the source kernel, SOURCE_TIME), so that the split and the source twins can be told apart.
SOURCE_TIME = [2.0]
OUT = [None]

def timer(kernel_call, quantiles=None, **kwargs):
    OUT[0].zero_()
    kernel_call()
    t = 1.0 if int(OUT[0][0]) == 1 else SOURCE_TIME[0]
    return [t, t, t]

def grid(meta):
    return (triton.cdiv(meta["M"], meta["BLOCK_M"]),)

def launch(M, configs=None, block=None, rows=8):
    out = OUT[0] = torch.zeros(64, dtype=torch.int32)
    least = (("BLOCK_M", rows),)  # (the wgmma's rows: fewer run the source kernel)
    if configs is None:  # fixed launch
        kernel = _OneWaveOrTriton(gluon_stand_in, source_kernel, params=("out_ptr", "M", "BLOCK_M"), tiles=(),
                                  at_least=least)
        kernel[grid](out, M, BLOCK_M=block)
    else:
        gluon = triton.autotune(configs=configs, key=["M"])(gluon_stand_in)
        gluon._do_bench = timer
        source = triton.autotune(configs=configs, key=["M"])(source_kernel)
        kernel = _OneWaveOrTriton(gluon, source, params=("out_ptr", "M", "BLOCK_M"), tiles=(), at_least=least)
        kernel[grid](out, M)
    return int(out[0])

assert launch(64, block=16) == 1   # 4 programs on 4 SMs: the Gluon kernel
assert launch(80, block=16) == 2   # 5 programs: the source kernel
one = [triton.Config({"BLOCK_M": 32}, num_warps=4)]
assert launch(128, configs=one) == 1  # the config's grid, 4 programs: Gluon
assert launch(256, configs=one) == 2  # 8: the source
assert launch(64, block=16, rows=32) == 2  # one wave, but fewer rows than the form takes: the source
assert launch(128, configs=one, rows=64) == 2  # the config's 32 rows: the source
SOURCE_TIME[0] = 0.5
assert launch(128, configs=one) == 2  # one wave, but the source twin is timed faster: the source

# A persistent launcher (one program per SM for the configs `persistent` selects): a source twin, timed faster,
# runs the source kernel on the source's grid, every program of it (8 here, on 4 SMs)
gluon = triton.autotune(configs=one, key=["M"])(gluon_stand_in)
gluon._do_bench = timer
source = triton.autotune(configs=one, key=["M"])(source_kernel)
kernel = _TMAOrTriton(gluon, source, params=("out_ptr", "M", "BLOCK_M"), tiles=(), persistent=lambda meta: True)
out = OUT[0] = torch.zeros(64, dtype=torch.int32)
kernel[grid](out, 256)
out.zero_()
kernel[grid](out, 256)  # (tuned: the chosen config alone runs)
assert out[:8].tolist() == [2] * 8 and out[8:].eq(0).all(), out.tolist()
SOURCE_TIME[0] = 2.0
gluon = triton.autotune(configs=one, key=["M"])(gluon_stand_in)
gluon._do_bench = timer
kernel = _TMAOrTriton(gluon, source, params=("out_ptr", "M", "BLOCK_M"), tiles=(), persistent=lambda meta: True)
out = OUT[0] = torch.zeros(64, dtype=torch.int32)
kernel[grid](out, 256)
out.zero_()
kernel[grid](out, 256)
assert out[:4].tolist() == [1] * 4 and out[4:].eq(0).all(), out.tolist()  # the Gluon kernel: one program per SM
# twins are made of the source's own configs, not of those the variant added for its Gluon forms
added = triton.Config({"BLOCK_M": 192}, num_warps=12)
gluon = triton.autotune(configs=one + [added], key=["M"])(gluon_stand_in)
kernel = _TMAOrTriton(gluon, source, params=("out_ptr", "M", "BLOCK_M"), tiles=())
marks = [c.kwargs.get("_transpile_source", False) for c in gluon.configs]
assert marks == [False, False, True] and gluon.configs[2].kwargs["BLOCK_M"] == 32, gluon.configs

# A pruner that builds its configs anew (GPTQ-triton's shrinks the block sizes to the problem) drops the twins' mark:
# the pruning runs apart on the twins, which keep it, so the source kernel is still timed against the Gluon kernel
def rebuild(configs, named_args, **kwargs):
    return [triton.Config({"BLOCK_M": c.kwargs["BLOCK_M"]}, num_warps=c.num_warps) for c in configs]

for source_time, mark in ((0.5, 2), (2.0, 1)):
    SOURCE_TIME[0] = source_time
    two = [triton.Config({"BLOCK_M": 32}, num_warps=4), triton.Config({"BLOCK_M": 16}, num_warps=4)]
    gluon = triton.autotune(configs=two, key=["M"], prune_configs_by={"early_config_prune": rebuild})(gluon_stand_in)
    gluon._do_bench = timer
    source = triton.autotune(configs=two, key=["M"])(source_kernel)
    kernel = _TMAOrTriton(gluon, source, params=("out_ptr", "M", "BLOCK_M"), tiles=())
    out = OUT[0] = torch.zeros(64, dtype=torch.int32)
    kernel[grid](out, 64)
    out.zero_()
    kernel[grid](out, 64)
    assert int(out[0]) == mark, (source_time, out.tolist())
    assert len(gluon.configs) == 4  # (restored after each pruning: two configs and their twins)
SOURCE_TIME[0] = 2.0

# Fewer warps than a wgmma's warpgroup (`rules.base.WARPGROUP_TEST`): each config or launch of 2 warps runs the
# source kernel, those of 4 and more the Gluon kernel, through either launcher
warpgroup = (lambda num_warps=4: num_warps < 4,)
for launcher in (_TMAOrTriton, _OneWaveOrTriton):
    for warps, mark in ((2, 2), (4, 1), (8, 1)):
        config = [triton.Config({"BLOCK_M": 32}, num_warps=warps)]
        gluon = triton.autotune(configs=config, key=["M"])(gluon_stand_in)
        gluon._do_bench = timer
        source = triton.autotune(configs=config, key=["M"])(source_kernel)
        kernel = launcher(gluon, source, params=("out_ptr", "M", "BLOCK_M"), tiles=(), source_when=warpgroup)
        out = OUT[0] = torch.zeros(64, dtype=torch.int32)
        kernel[grid](out, 128)
        assert int(out[0]) == mark, (launcher, warps, out.tolist())
    kernel = launcher(gluon_stand_in, source_kernel, params=("out_ptr", "M", "BLOCK_M"), tiles=(),
                      source_when=warpgroup)
    for extra, mark in (({"num_warps": 2}, 2), ({"num_warps": 4}, 1), ({}, 1)):
        out = OUT[0] = torch.zeros(64, dtype=torch.int32)
        kernel[grid](out, 64, BLOCK_M=16, **extra)
        assert int(out[0]) == mark, (launcher, extra, out.tolist())
print("ONE WAVE")
'''


@pytest.mark.slow
def test_one_wave_launcher_runs_the_gluon_kernel_only_for_grids_of_one_wave(tmp_path: Path) -> None:
    """`_OneWaveOrTriton` (an sm90 ring with an operand staged from registers): a fixed launch, and each autotune
    config, runs the Gluon kernel where its grid has at most one program per SM, else the source kernel."""
    (tmp_path / "run.py").write_text(ONE_WAVE_RUN)
    result = subprocess.run([sys.executable, str(tmp_path / "run.py")], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TRITON_INTERPRET": "1"})
    assert result.returncode == 0 and "ONE WAVE" in result.stdout, result.stderr[-3000:]
