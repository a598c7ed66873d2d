"""Products with one row, x (1, K) @ W^T for a row-major weight W (N, K): a single sequence's
decoding step, where cuBLAS's GEMM kernels cost up to twice the read of W (kernels/gemv.cu).

`gemm` (matmul.py) hands a product here when every row of the left operand meets the same weight
(no batch stride on it), the weight is a transposed view of a row-major (N, K) matrix, there are at
most MAX_ROWS rows and N < MAX_COLUMNS; anything else goes to cuBLAS. The limits are measured
(`python bench/decode_kernels.py`, BENCHMARK.md): on an H200 in bf16 this kernel takes 2.0-3.2 us
where cuBLAS takes 3.2-7.1 us at one row, but cuBLAS wins from 8 rows on (its tensor-core tiles
use each loaded weight for every row) and on the output layer (N = 32000 and more, where both
approach bandwidth). The kernel itself takes up to 8 rows (GEMV_MAX_ROWS), for such measurements.
"""

import cupy as cp
import numpy as np

from gradcraft.backend.cuda import compiler
from gradcraft.backend.cuda import launch as L

FILE = "gemv.cu"
MAX_ROWS = 1  # rows taken here (the kernel's GEMV_MAX_ROWS is 8)
MAX_COLUMNS = 16384  # an output layer's N and above: cuBLAS
THREADS = 128  # 4 warps a block
_TYPES = {np.dtype(np.float32), *L.HALF}


def applies(rows: int, N: int, K: int, a_t: bool, b_t: bool, ldb: int, stride_b: int, dtype) -> bool:
    """Whether gemm's product (a's rows stacked, `rows` of them; b = W^T (K, N) with leading
    dimension ldb) is a GEMV this module takes."""
    shape = 1 <= rows <= MAX_ROWS and N < MAX_COLUMNS and not a_t and b_t and ldb == K and stride_b == 0
    return shape and np.dtype(dtype) in _TYPES


def outputs_per_warp(N: int, K: int) -> int:
    """2 for wide layers of short rows (gate+up, gpt2's fc: 2.6-2.8 us against 3.3-3.5 with 1), else 1."""
    return 2 if K <= 1024 and N >= 3072 else 1


def gemv(x, ldx: int, w, out, rows: int, N: int, K: int, function=None, outputs: int | None = None) -> None:
    """out (rows, N), C-contiguous = x (rows, K; row r at x + r * ldx) @ w^T for w (N, K) C-contiguous.
    function: where to get the kernels instead (a benchmark's module built with another -DGEMV_UNROLL;
    function(name) gives one); outputs: the output columns per warp (1 or 2; default by shape)."""
    per_access = 16 // x.itemsize
    vector = K % per_access == 0 and ldx % per_access == 0 and L.aligned(x, w)
    outputs = outputs or outputs_per_warp(N, K)
    name = f"gemv_{'v' if vector else 's'}{outputs}_{L.suffix(x.dtype)}"
    fn = function(name) if function is not None else compiler.function(FILE, name, cp.cuda.Device().id)
    blocks = -(-N // (THREADS // 32 * outputs))
    fn((blocks,), (THREADS,), (x, L.i64(ldx), w, out, L.i32(rows), L.i32(N), L.i32(K)))
