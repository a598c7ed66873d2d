"""Matrix products through cuBLAS (cublasGemmStridedBatchedEx), with batch broadcasting.

float32 (TF32 tensor cores when enabled), float16 and bfloat16 (fp32 accumulation) go to one
strided-batched GEMM call. Row-major C = A @ B is computed as the column-major C^T = B^T A^T, and
operands whose last two dimensions are a transposed view (x @ w.mT) are passed with a transpose
flag instead of being copied. float64 and integer products use cupy.matmul.
"""

import ctypes
import ctypes.util
import functools

import cupy as cp
import numpy as np

from gradcraft.backend import tf32
from gradcraft.backend.cuda import gemv
from gradcraft.backend.cuda import launch as L

_CUDA_TYPE = {np.dtype(np.float32): 0, np.dtype(np.float16): 2, np.dtype("bfloat16"): 14}
_COMPUTE_32F, _COMPUTE_32F_FAST_TF32 = 68, 77
_ONE, _ZERO = np.array(1.0, dtype=np.float32), np.array(0.0, dtype=np.float32)


def set_tf32(enabled: bool) -> None:
    """Let float32 matmuls use TF32 tensor cores (10-bit mantissa inputs, fp32 accumulation)."""
    tf32.set_enabled(enabled)


def tf32_enabled() -> bool:
    return tf32.enabled


def _layout(a: cp.ndarray):
    """(transposed, ld) when a's last two dims are a plain or transposed matrix in memory, else None."""
    rows, cols = a.shape[-2:]
    item = a.itemsize
    s0, s1 = a.strides[-2:]
    if (cols == 1 or s1 == item) and (rows == 1 or (s0 % item == 0 and s0 >= cols * item)):
        return False, max(cols, s0 // item if rows > 1 else cols, 1)
    if (rows == 1 or s0 == item) and (cols == 1 or (s1 % item == 0 and s1 >= rows * item)):
        return True, max(rows, s1 // item if cols > 1 else rows, 1)
    return None


def _batch_stride(a: cp.ndarray, batch: tuple):
    """One element stride that walks a's batch dims (broadcast to `batch`) in order, or None."""
    lead = a.shape[:-2]
    if all(n == 1 for n in lead):
        return 0
    full = cp.broadcast_to(a, batch + a.shape[-2:])
    strides = [s // a.itemsize for n, s in zip(full.shape[:-2], full.strides[:-2]) if n != 1]
    sizes = [n for n in full.shape[:-2] if n != 1]
    for i in range(len(sizes) - 1):
        if strides[i] != strides[i + 1] * sizes[i + 1]:
            return None
    return strides[-1] if strides else 0


def _operand(a: cp.ndarray, batch: tuple):
    layout, stride = _layout(a), _batch_stride(a, batch)
    if layout is None or stride is None or any(s < 0 for s in a.strides):
        a = cp.ascontiguousarray(cp.broadcast_to(a, batch + a.shape[-2:]))
        layout, stride = _layout(a), _batch_stride(a, batch)
    return a, layout[0], layout[1], stride


def gemm(
    a: cp.ndarray,
    b: cp.ndarray,
    out_dtype=None,
    allow_tf32: bool = True,
    out: cp.ndarray | None = None,
    accumulate: bool = False,
) -> cp.ndarray:
    """a (..., M, K) @ b (..., K, N) for float32/float16/bfloat16 operands of one dtype, ndim >= 2.
    out: a C-contiguous array of the result's shape to write into (its dtype is the result's);
    accumulate: add the product to what out holds (cuBLAS's beta = 1)."""
    M, K = a.shape[-2:]
    N = b.shape[-1]
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    count = int(np.prod(batch, dtype=np.int64))
    if out is None:
        out_dtype = np.dtype(out_dtype or a.dtype)
        out = L.empty(batch + (M, N), out_dtype)
    else:
        out_dtype = out.dtype
        if out.shape != batch + (M, N) or not out.flags.c_contiguous:
            raise ValueError(f"gemm: out must be C-contiguous of shape {batch + (M, N)}, got {out.shape}")
    if out.size == 0:
        return out
    if K == 0:
        if not accumulate:
            out.fill(0)
        return out
    a, a_t, lda, stride_a = _operand(a, batch)
    b, b_t, ldb, stride_b = _operand(b, batch)
    rows = count * M  # a's rows, when its batches follow each other evenly (stride M * lda)
    if (
        not accumulate
        and out_dtype == a.dtype == b.dtype
        and (count == 1 or stride_a == M * lda)
        and gemv.applies(rows, N, K, a_t, b_t, ldb, stride_b, a.dtype)
    ):
        gemv.gemv(a, lda, b, out, rows, N, K)  # a decoding step's few tokens: a read of the weight
        return out
    compute = _COMPUTE_32F_FAST_TF32 if (tf32.enabled and allow_tf32 and a.dtype == np.float32) else _COMPUTE_32F
    handle = cp.cuda.device.get_cublas_handle()
    lib = _cublas()
    # cuBLAS itself can be captured into a CUDA graph, but CuPy's bindings refuse during capture, so the
    # two calls go straight to libcublas through ctypes. The stream is set on every call: the current
    # one is the capturing stream while a graph is recorded.
    _check(lib.cublasSetStream_v2(handle, cp.cuda.get_current_stream().ptr), "cublasSetStream")
    # column-major: C^T (N x M) = op(B^T) (N x K) @ op(A^T) (K x M)
    _check(
        lib.cublasGemmStridedBatchedEx(
            handle,
            int(b_t),
            int(a_t),
            N,
            M,
            K,
            _ONE.ctypes.data,
            b.data.ptr,
            _CUDA_TYPE[b.dtype],
            ldb,
            stride_b,
            a.data.ptr,
            _CUDA_TYPE[a.dtype],
            lda,
            stride_a,
            (_ONE if accumulate else _ZERO).ctypes.data,
            out.data.ptr,
            _CUDA_TYPE[out_dtype],
            N,
            M * N,
            count,
            compute,
            -1,
        ),
        "cublasGemmStridedBatchedEx",
    )
    return out


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} failed with cuBLAS status {status}")


def mapped_library(prefix: str) -> str | None:
    """The path of the shared library whose file name starts with `prefix` ("libcublas.so") among
    those this process has loaded (its memory map): the very copy CuPy uses, not another one found
    on the system."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            if line.rsplit("/", 1)[-1].strip().startswith(prefix):
                return line.split(None, 5)[-1].strip()
    return None


@functools.lru_cache(maxsize=1)
def _cublas():
    """libcublas as CuPy loaded it (found in this process's memory map), with the two signatures we call."""
    from cupy_backends.cuda.libs import cublas  # noqa: F401  (loads libcublas)

    cp.cuda.device.get_cublas_handle()
    lib = ctypes.CDLL(mapped_library("libcublas.so") or ctypes.util.find_library("cublas"))
    p, i, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
    lib.cublasSetStream_v2.argtypes = [p, p]
    lib.cublasSetStream_v2.restype = i
    lib.cublasGemmStridedBatchedEx.argtypes = [
        p,
        i,
        i,
        i,
        i,
        i,
        p,
        p,
        i,
        i,
        i64,
        p,
        i,
        i,
        i64,
        p,
        p,
        i,
        i,
        i64,
        i,
        i,
        i,
    ]
    lib.cublasGemmStridedBatchedEx.restype = i
    return lib


def matmul(a: cp.ndarray, b: cp.ndarray) -> cp.ndarray:
    """np.matmul semantics (1-D operands, batch broadcasting); half precision accumulates in fp32."""
    if a.dtype != b.dtype or a.dtype not in _CUDA_TYPE:
        wa, wb = L.wide(a), L.wide(b)
        return L.finish(cp.matmul(wa, wb), a.dtype if a.dtype in L.HALF else np.result_type(wa, wb))
    squeeze = []
    if a.ndim == 1:
        a, squeeze = a[None, :], squeeze + [-2]
    if b.ndim == 1:
        b, squeeze = b[:, None], squeeze + [-1]
    out = gemm(a, b)
    for axis in squeeze:  # -2 (a was 1-D) first, then -1 (b was 1-D)
        out = out.squeeze(axis)
    return out


KERNELS = {"matmul": matmul}
