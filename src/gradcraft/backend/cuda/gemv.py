"""Products with one row, x (1, K) @ W^T for a row-major weight W (N, K): a single sequence's
decoding step, where cuBLAS's GEMM kernels cost up to twice the read of W (kernels/gemv.cu).

`gemm` (matmul.py) hands a product here when every row of the left operand meets the same weight
(no batch stride on it), the weight is a transposed view of a row-major (N, K) matrix, there are at
most MAX_ROWS rows and N < MAX_COLUMNS; anything else goes to cuBLAS. The limits are measured
(`python bench/decode_kernels.py`, BENCHMARK.md): on an H200 in bf16 this kernel takes 2.0-3.2 us
where cuBLAS takes 3.2-7.1 us at one row, but cuBLAS wins from 8 rows on (its tensor-core tiles
use each loaded weight for every row) and on the output layer (N = 32000 and more, where both
approach bandwidth). The kernel itself takes up to 8 rows (GEMV_MAX_ROWS), for such measurements.

`norm_linear` (the backend's kernel of that name, F.norm_linear) is the same product for one row
with the residual add and the norm before it and the bias and activation after it, in one launch:
every block normalizes the row into shared memory, then its warps compute their columns as the GEMV
does (backend/cpu/gemv.py is the reference). `supported` says where the op layer takes it.
"""

import cupy as cp
import numpy as np

from gradcraft.backend.cuda import compiler, elementwise
from gradcraft.backend.cuda import launch as L
from gradcraft.backend.cuda import pdl
from gradcraft.backend.cpu.gemv import unpack

FILE = "gemv.cu"
MAX_ROWS = 1  # rows taken here (the kernel's GEMV_MAX_ROWS is 8)
MAX_COLUMNS = 16384  # an output layer's N and above: cuBLAS, unless N is an odd width (below)
THREADS = 128  # 4 warps a block
_TYPES = {np.dtype(np.float32), *L.HALF}


def applies(rows: int, N: int, K: int, a_t: bool, b_t: bool, ldb: int, stride_b: int, dtype) -> bool:
    """Whether gemm's product (a's rows stacked, `rows` of them; b = W^T (K, N) with leading
    dimension ldb) is a GEMV this module takes."""
    # An output layer of an odd width (gpt2's 50257, not a multiple of 64) sends cuBLAS to a GEMV kernel
    # of its own at ~2.7 TB/s (29.4 us on an H200, bf16), where this one takes ~24 us; at 32000 or
    # 50304 cuBLAS's GEMM kernels are as fast as this one or faster (bench/decode_kernels.py).
    wide_ok = N < MAX_COLUMNS or N % 64 != 0
    shape = 1 <= rows <= MAX_ROWS and wide_ok and not a_t and b_t and ldb == K and stride_b == 0
    return shape and np.dtype(dtype) in _TYPES


def outputs_per_warp(N: int, K: int) -> int:
    """2 for wide layers of short rows (gate+up, gpt2's fc: 2.6-2.8 us against 3.3-3.5 with 1), else 1;
    an output layer (N >= MAX_COLUMNS) is faster with 1 again (gpt2's 50257 x 768: 22.0 us against
    25.1 with 2, bench/decode_kernels.py --shapes head, on an H200)."""
    return 2 if K <= 1024 and 3072 <= N < MAX_COLUMNS else 1


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
    _launch(fn, blocks, THREADS, (x, L.i64(ldx), w, out, L.i32(rows), L.i32(N), L.i32(K)))


def _launch(fn, blocks: int, threads: int, args: tuple, shared_mem: int = 0) -> None:
    """Both kernel families call pdl_wait() before reading what an earlier kernel writes and write
    nothing before it (kernels/gemv.cu), so on sm_90+ with GRADCRAFT_PDL=1 they launch with
    programmatic dependent launch (pdl.py: the weight loads overlap the previous kernel's tail); by
    default, and elsewhere, through CuPy as every other kernel."""
    if pdl.available():
        pdl.launch(fn, (blocks,), (threads,), args, shared_mem=shared_mem)
    else:
        fn((blocks,), (threads,), args, shared_mem=shared_mem)


# ---------------------------------------------------------------- norm_linear

# The normalized row lives in shared memory as K floats: 11264 of them are 44 KiB, under the 48 KiB a
# block gets without asking (beside the reduction's 128 bytes), and above every hidden size of the
# models here (and llama-7B's 11008).
MAX_K = 11264
# 8 warps a block: each block's normalization (a few KB read, two or three barriers) then serves 8 or
# 16 output columns. Where that leaves fewer blocks than the GPU has SMs (gpt2's proj: N = 768, 96
# blocks on an H200's 132 SMs), 4 warps a block, so that every SM pulls its share of W. Chosen
# without measurement; `bench/decode_kernels.py --only norm_linear` times 128 threads beside.
NORM_LINEAR_THREADS = 256
_NORMS = {None: 0, "rms_norm": 1, "layer_norm": 2}
_ACTIVATIONS = {None: 0, "gelu": 1, "gelu_tanh": 2}  # swiglu: the `g` kernels


def supported(rows: int, N: int, K: int, dtype, activation) -> bool:
    """Whether norm_linear takes this case: one row, float32/bf16/fp16, K <= MAX_K (the row in shared
    memory), and either N < MAX_COLUMNS (the fused kernel) or an output layer that the GEMV takes
    (N % 64 != 0, see `applies`) without an activation: there one block normalizes the row and the
    GEMV follows (`wide`; the fused kernel's prologue, repeated in each of ~3000 blocks, measured no
    faster than separate add and norm kernels before the GEMV, ~29 us for gpt2's 50257 x 768)."""
    width_ok = activation != "swiglu" or N % 2 == 0
    narrow = 1 <= N < MAX_COLUMNS and width_ok
    return rows == 1 and (narrow or wide(N, activation)) and 1 <= K <= MAX_K and np.dtype(dtype) in _TYPES


def wide(N: int, activation) -> bool:
    """An output layer norm_linear runs as two launches: the normalized row by one block, then the GEMV."""
    return N >= MAX_COLUMNS and N % 64 != 0 and activation is None


def norm_linear(*arrays, residual, norm, eps, norm_bias, bias, activation, threads=None, function=None):
    """The backend's `norm_linear` (backend/cpu/gemv.py's inputs and attributes): y (1, N), N/2 columns
    with swiglu, or (y, x + residual) with a residual. threads: per block (a multiple of 32, at most
    256; default NORM_LINEAR_THREADS, or 128 where that leaves SMs without a block); function: where
    to get the kernels instead (as gemv's)."""
    x, res, nw, nb, w, b = (
        None if a is None else L.contiguous(a) for a in unpack(arrays, residual, norm, norm_bias, bias)
    )
    rows, K = x.shape
    N = w.shape[0]
    if not supported(rows, N, K, x.dtype, activation) or w.shape[1] != K:
        raise ValueError(f"norm_linear: no CUDA kernel for {rows} rows of {K} and an ({N}, {w.shape[1]}) weight")
    glu = activation == "swiglu"
    y = L.empty((rows, N // 2 if glu else N), x.dtype)
    s = L.empty((rows, K), x.dtype) if residual else None
    per_access = 16 // x.itemsize
    if wide(N, activation):
        n = L.empty((rows, K), x.dtype)
        vector = K % per_access == 0 and L.aligned(x, res, nw, nb, n, s)
        name = f"norm_row_{'v' if vector else 's'}_{L.suffix(x.dtype)}"
        fn = function(name) if function is not None else compiler.function(FILE, name, cp.cuda.Device().id)
        args = (x, L.ptr(res), L.ptr(nw), L.ptr(nb), n, L.ptr(s), L.i32(K), L.f64(eps), L.i32(_NORMS[norm]))
        fn((1,), (threads or NORM_LINEAR_THREADS,), args, shared_mem=4 * K)
        gemv(n, K, w, y, rows, N, K, function=function)
        if b is not None:  # (no model here has a biased output layer: the add, as the composed op does it)
            y = elementwise.KERNELS["add"](y, b)
        return (y, s) if residual else y
    columns, per_warp = (N // 2, 1) if glu else (N, outputs_per_warp(N, K))
    if threads is None:
        threads = NORM_LINEAR_THREADS
        if -(-columns // (threads // 32 * per_warp)) < L.sm_count():
            threads = 128
    vector = K % per_access == 0 and L.aligned(x, res, nw, nb, w, s)  # (bias and y: one value at a time)
    name = f"norm_linear_{'v' if vector else 's'}{'g' if glu else per_warp}_{L.suffix(x.dtype)}"
    fn = function(name) if function is not None else compiler.function(FILE, name, cp.cuda.Device().id)
    blocks = -(-columns // (threads // 32 * per_warp))
    args = (x, L.ptr(res), L.ptr(nw), L.ptr(nb), w, L.ptr(b), y, L.ptr(s), L.i32(N), L.i32(K), L.f64(eps))
    _launch(fn, blocks, threads, args + (L.i32(_NORMS[norm]), L.i32(_ACTIVATIONS.get(activation, 0))), shared_mem=4 * K)
    return (y, s) if residual else y


KERNELS = {"norm_linear": norm_linear}
