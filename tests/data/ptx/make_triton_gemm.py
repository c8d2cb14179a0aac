"""Regenerate the Triton GEMM fixtures (compiler-made PTX) without a GPU.

    python -m venv /tmp/triton && /tmp/triton/bin/pip install triton==3.9.0
    /tmp/triton/bin/python tests/data/ptx/make_triton_gemm.py

Triton 3.9 emits `.version 9.4`: that file is kept as emitted
(triton_gemm_sm90a_v94.ptx, which ptxas 13.5 assembles and the GPU test runs), and
copies with the version lowered to 9.0 are the family fixtures (nothing in them
needs 9.4; they were made when the pinned ptxas was 13.0).
Triton is not a dependency of the project; only its output is kept.
"""

from __future__ import annotations

import re
from pathlib import Path

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

HERE = Path(__file__).resolve().parent


@triton.jit
def matmul_tma(a_desc, b_desc, c_desc, M, N, K,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # C = A · Bᵀ with A [M, K], B [N, K], tiles moved by TMA descriptors.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, K, BLOCK_K, num_stages=3):
        a = a_desc.load([pid_m * BLOCK_M, k])
        b = b_desc.load([pid_n * BLOCK_N, k])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(tl.bfloat16))


SIGNATURE = {
    "a_desc": "tensordesc<bf16[128, 64]>", "b_desc": "tensordesc<bf16[128, 64]>",
    "c_desc": "tensordesc<bf16[128, 128]>", "M": "i32", "N": "i32", "K": "i32",
    "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr",
}


def compile_ptx(cc: int) -> str:
    src = ASTSource(matmul_tma, SIGNATURE, constexprs={"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64})
    kernel = triton.compile(src, target=GPUTarget("cuda", cc, 32), options={"num_warps": 4, "num_stages": 3})
    return kernel.asm["ptx"]


def lower_version(ptx: str) -> str:
    return re.sub(r"^\.version \d+\.\d+$", ".version 9.0", ptx, count=1, flags=re.M)


def main() -> None:
    sm90 = compile_ptx(90)
    (HERE / "triton_gemm_sm90a_v94.ptx").write_text(sm90)
    (HERE / "triton_gemm_sm90a.ptx").write_text(lower_version(sm90))
    (HERE / "triton_gemm_sm100a.ptx").write_text(lower_version(compile_ptx(100)))


if __name__ == "__main__":
    main()
