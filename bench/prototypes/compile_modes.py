"""Compile every MODE of sm90_pointer_gemm.py for sm90 on the CPU (launcher specialization: strides 1, 16-divisible ints)."""
import os, sys
os.environ["TRITON_ALWAYS_COMPILE"] = "1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
import sm90_pointer_gemm as p
t = GPUTarget("cuda", 90, 32)
base = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32", "stride_am": "i32",
        "stride_ak": "constexpr", "stride_bk": "i32", "stride_bn": "constexpr", "stride_cm": "i32", "stride_cn": "constexpr"}
for cfg in p.CONFIGS:
    for mode in (1, 2, 3):
        for vec in (4, 8):
            ce = {k: v for k, v in cfg.items() if k != "num_warps"} | {"MODE": mode, "NUM_STAGES": 3, "VEC": vec,
                                                                        "stride_ak": 1, "stride_bn": 1, "stride_cn": 1}
            sig = dict(base) | {k: "constexpr" for k in ce}
            attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(sig) if n in ("a_ptr", "b_ptr", "c_ptr", "K", "stride_am", "stride_bk", "stride_cm", "M", "N")}
            try:
                c = triton.compile(GluonASTSource(fn=p.matmul_kernel, signature=sig, constexprs=ce, attrs=attrs), target=t,
                                   options={"num_warps": cfg["num_warps"]})
                import re
                print(cfg["BLOCK_SIZE_M"], mode, vec, "ok shared", c.metadata.shared, "cp.async.cg x16:", c.asm["ptx"].count("cp.async.cg.shared.global [") , "ld.global.v4", c.asm["ptx"].count("ld.global.v4"), c.asm["ptx"].count("ld.global.v2"))
            except Exception as e:
                print(cfg["BLOCK_SIZE_M"], mode, vec, "FAIL", str(e).splitlines()[-1][:300])
