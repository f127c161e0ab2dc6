#!/usr/bin/env python
"""Attention forward at seq 4096 (4 x 16 heads, fp16): the original fixture against sm90 variant files, in one run.

    python bench/prof_attention.py before=old/attention_fwd_sm90.py after=fixtures/expected/sm90/attention_fwd_sm90.py
    ncu --profile-from-start off -k regex:attn_fwd ... python bench/prof_attention.py --prof --d=128 after=...

Without --prof: d64/d128, full/causal; every kernel is timed `--rounds` times (default 7) in interleaved rounds
(`triton.testing.do_bench` medians, then the median of the rounds), each after its own autotuning; the ratio is
original time / variant time. With --prof: one launch of each kernel (after warm-up and autotuning) between
cudaProfilerStart/Stop, for ncu, at head dimension --d (full attention). --cfg=N pins every variant to its N-th
autotune config (the original is still autotuned), to compare variants without autotuning noise.
"""
import importlib.util
import statistics
import sys
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[1]


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


args = sys.argv[1:]
option = {a.split("=")[0]: a.split("=")[1] for a in args if a.startswith("--") and "=" in a}
mods = {"orig": load(ROOT / "fixtures/attention_fwd.py", "orig")}
for a in args:
    if not a.startswith("--"):
        label, path = a.split("=", 1)
        mods[label] = load(Path(path), f"variant_{label}")
        if "--cfg" in option:  # pin the variant to one autotune config (no autotuning noise)
            mods[label].attn_fwd_kernel.configs = [mods[label].attn_fwd_kernel.configs[int(option["--cfg"])]]
prof = "--prof" in args
shapes = [(int(option.get("--d", 128)), False)] if prof else [(64, False), (64, True), (128, False), (128, True)]
for d, causal in shapes:
    q, k, v = (torch.randn(4, 16, 4096, d, device="cuda", dtype=torch.float16) for _ in range(3))
    scale = d**-0.5
    reference = mods["orig"].attention(q, k, v, causal, scale)
    for label, m in mods.items():
        err = (m.attention(q, k, v, causal, scale).float() - reference.float()).abs().max().item()
        assert err < 1e-2, f"{label} d{d} causal={causal}: max error {err}"
    torch.cuda.synchronize()
    if prof:
        torch.cuda.cudart().cudaProfilerStart()
        for m in mods.values():
            m.attention(q, k, v, causal, scale)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        for label, m in mods.items():
            print(label, m.attn_fwd_kernel.best_config)
        continue
    times = {label: [] for label in mods}
    for _ in range(int(option.get("--rounds", 7))):
        for label, m in mods.items():
            times[label].append(triton.testing.do_bench(lambda: m.attention(q, k, v, causal, scale), warmup=25,
                                                        rep=100, return_mode="median"))
    med = {label: statistics.median(t) for label, t in times.items()}
    row = " ".join(f"{label} {med[label]:.3f} ({med['orig'] / med[label]:.3f}x)" for label in mods)
    print(f"d{d} {'causal' if causal else 'full  '}: {row}", flush=True)
    picks = (f"{label} BM{m.attn_fwd_kernel.best_config.kwargs['BLOCK_M']}w{m.attn_fwd_kernel.best_config.num_warps}"
             for label, m in mods.items())
    print("   picks: " + " | ".join(picks), flush=True)
