"""The sm90 `_dot` helper on a GPU: the translated loop of `dot_chain.py` against the source kernel, at every tile
and warp count below, outputs compared exactly (each dot's operands are 16-bit and exact in fp32). At BM=32, BN=128
and 4 warps a wgmma reading A staged through shared memory faulted (illegal address) under Triton 3.6; `_dot` reads
a 16-bit A from registers (`_dot_a_in_registers`). Exit status 1 if any case differs or fails.

    transpile tests/gpu/dot_chain.py -t sm90 --gluon-always --out-dir OUT --source-root tests/gpu
    python tests/gpu/check_dot_chain.py --variant OUT/dot_chain_sm90.py
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES = [(d, bm, bn, w) for d in (64, 128) for bm, bn, w in
         ((32, 128, 4), (16, 128, 4), (64, 128, 4), (128, 128, 4), (64, 64, 4), (32, 128, 8), (64, 128, 8))]


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one(variant: str, d: int, bm: int, bn: int, warps: int) -> str:
    """One case, in this process (a fault leaves the CUDA context unusable: `main` runs each in a child)."""
    import torch
    import triton

    source, translated = load(HERE / "dot_chain.py", "dot_chain"), load(variant, "dot_chain_sm90")
    torch.manual_seed(0)
    q = torch.randn(1024, d, device="cuda", dtype=torch.float16) * 0.3
    k = torch.randn(bn * 132, d, device="cuda", dtype=torch.float16) * 0.3
    expected = source.chain(q, k, bm, bn, warps)
    for _ in range(5):
        got = translated.chain(q, k, bm, bn, warps)
        if not torch.equal(got, expected):
            return f"DIFF max {(got - expected).abs().max().item():.3e}"
    ms = [triton.testing.do_bench(lambda m=m: m.chain(q, k, bm, bn, warps)) for m in (source, translated)]
    return f"PASS source {ms[0] * 1e3:.1f} us, translated {ms[1] * 1e3:.1f} us"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", required=True)
    parser.add_argument("--one", nargs=4, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(one(args.variant, *args.one))
        return 0
    failed = 0
    for case in CASES:
        run = subprocess.run([sys.executable, __file__, "--variant", args.variant, "--one", *map(str, case)],
                             capture_output=True, text=True)
        lines = run.stdout.strip().splitlines()
        result = lines[-1] if run.returncode == 0 and lines else f"FAIL {(run.stderr.strip().splitlines() or ['?'])[-1]}"
        failed += not result.startswith("PASS")
        print(f"D={case[0]} BM={case[1]} BN={case[2]} warps={case[3]}: {result}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
