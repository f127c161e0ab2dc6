"""Two chained dots in a loop whose variant is the translated Gluon loop (`--gluon-always`), for `check_dot_chain.py`:
scores of a fixed [BN, D] tile against each [BM, D] block, then those scores (16-bit) times the block. Each dot is the
variant's `_dot` helper; at BM=32, BN=128 and 4 warps its A is [128, 32]."""

import torch
import triton
import triton.language as tl


@triton.jit
def chain_kernel(q_ptr, k_ptr, o_ptr, T, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    offs_n = tl.program_id(0) * BN + tl.arange(0, BN)
    offs_d = tl.arange(0, D)
    k = tl.load(k_ptr + offs_n[:, None] * D + offs_d[None, :])
    acc = tl.zeros([BN, D], dtype=tl.float32)
    for start in range(0, T, BM):
        offs_m = start + tl.arange(0, BM)
        q = tl.load(q_ptr + offs_m[:, None] * D + offs_d[None, :])
        s = tl.dot(k, tl.trans(q))
        p = tl.exp2(s * 0.01)
        acc += tl.dot(p.to(tl.float16), q)
    tl.store(o_ptr + offs_n[:, None] * D + offs_d[None, :], acc)


def chain(q, k, BM=32, BN=128, num_warps=4):
    T, D = q.shape
    o = torch.empty(k.shape[0], D, device=q.device, dtype=torch.float32)
    chain_kernel[(k.shape[0] // BN,)](q, k, o, T, BM=BM, BN=BN, D=D, num_warps=num_warps)
    return o
