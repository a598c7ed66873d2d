"""`linear_bias` and `linear_bias_backward` through cuBLASLt's epilogues (contract in backend/cpu/linear.py):

    linear_bias(x (M, K), w (N, K), b (N,)) -> x @ w^T + b        the bias added by the product's epilogue
    linear_bias_backward(g (M, N), x (M, K)) -> (g^T @ x, g summed over rows)
                                                  the bias gradient summed by the weight gradient's product

As the products of matmul.py, in column-major terms: x @ w^T + b is D (N x M) = op_T(w) @ x + b, the
bias broadcast along D's columns (CUBLASLT_EPILOGUE_BIAS: one value per row of D); dw is
D (K x N) = x^T @ op_T(g), and CUBLASLT_EPILOGUE_BGRADB sums B = op_T(g) over the product's k (the M
rows) into one value per column of D, which is db. Without them, a training step's bias add writes
and reads the (M, N) output once more, and the add's gradient reads the output gradient once more
(gpt2-124m: 48 adds and 48 sums a step, ~2.5 ms on the H200).

cuBLASLt is reached through ctypes, as matmul.py reaches cuBLAS (libcublasLt is already in the
process: libcublas loads it). Descriptors and the heuristic's algorithm are cached per shape, dtype,
layout and pointer alignment. Where the heuristic offers no algorithm for a case, the product and the
add (or the sum) run as separate kernels: the same values up to summation order.
"""

import ctypes
import ctypes.util
import functools

import cupy as cp
import numpy as np

from gradcraft.backend.cuda import elementwise, matmul, reduce
from gradcraft.backend.cuda import launch as L

# cublasLt.h
_EPILOGUE_BIAS, _EPILOGUE_BGRADB = 4, 512
_DESC_TRANSA, _DESC_TRANSB, _DESC_EPILOGUE, _DESC_BIAS_POINTER = 3, 4, 7, 8
_PREF_MAX_WORKSPACE = 1
_PREF_MIN_ALIGNMENT = (5, 6, 7, 8)  # A, B, C, D
_OP_N, _OP_T = 0, 1
_CUDA_R_32F = 0
WORKSPACE_BYTES = 32 * 2**20  # what cuBLAS asks for on Hopper
FEW_ROWS = 16


class _Heuristic(ctypes.Structure):
    """cublasLtMatmulHeuristicResult_t: the algorithm (8 opaque words) and what it needs."""

    _fields_ = [
        ("algo", ctypes.c_uint64 * 8),
        ("workspace_size", ctypes.c_size_t),
        ("state", ctypes.c_int),
        ("waves", ctypes.c_float),
        ("reserved", ctypes.c_int * 4),
    ]


def supported(dtype) -> bool:
    """Whether the fused kernels take this dtype here (the library loads, a float type cuBLAS multiplies)."""
    return np.dtype(dtype) in matmul._CUDA_TYPE and _lt() is not None


def linear_bias(x, w, b):
    M, K = x.shape
    N = w.shape[0]
    x, w, b = L.contiguous(x), L.contiguous(w), L.contiguous(b)
    out = L.empty((M, N), x.dtype)
    if M == 0 or N == 0:
        return out
    # A decoding step's few rows: the GEMV kernel of matmul.gemm reads the weight faster than a GEMM.
    if M > FEW_ROWS and K > 0 and _matmul(_EPILOGUE_BIAS, _OP_T, _OP_N, N, M, K, w, K, x, K, out, N, b):
        return out
    return elementwise.KERNELS["add"](matmul.gemm(x, w.T), b)


def linear_bias_backward(g, x):
    M, N = g.shape
    K = x.shape[1]
    g, x = L.contiguous(g), L.contiguous(x)
    dw = L.empty((N, K), x.dtype)
    db = L.empty((N,), g.dtype)
    if M > 0 and N > 0 and K > 0 and _matmul(_EPILOGUE_BGRADB, _OP_N, _OP_T, K, N, M, x, K, g, N, dw, K, db):
        return dw, db
    return matmul.gemm(g.T, x, out=dw), reduce.KERNELS["sum"](g, (0,), False)


def _matmul(epilogue, trans_a, trans_b, m, n, k, a, lda, b, ldb, d, ldd, bias) -> bool:
    """Column-major D (m x n, ld ldd) = op(A) @ op(B) with the epilogue and its bias pointer; False
    when cuBLASLt offers no algorithm for the case (nothing has run then)."""
    lib = _lt()
    key = (
        epilogue,
        trans_a,
        trans_b,
        m,
        n,
        k,
        lda,
        ldb,
        ldd,
        a.dtype.name,
        d.dtype.name,
        matmul.tf32_enabled(),
        tuple(_alignment(p.data.ptr) for p in (a, b, d, bias)),
        cp.cuda.Device().id,
    )
    plan = _plan(key)
    if plan is None:
        return False
    desc, layout_a, layout_b, layout_d, algo, workspace_size = plan
    pointer = ctypes.c_void_p(bias.data.ptr)
    _check(lib.cublasLtMatmulDescSetAttribute(desc, _DESC_BIAS_POINTER, ctypes.byref(pointer), 8), "bias pointer")
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
    _check(
        lib.cublasLtMatmul(
            _handle(cp.cuda.Device().id),
            desc,
            ctypes.byref(one),
            a.data.ptr,
            layout_a,
            b.data.ptr,
            layout_b,
            ctypes.byref(zero),
            d.data.ptr,
            layout_d,
            d.data.ptr,
            layout_d,
            ctypes.byref(algo),
            _workspace(cp.cuda.Device().id) if workspace_size else None,
            workspace_size,
            cp.cuda.get_current_stream().ptr,
        ),
        "cublasLtMatmul",
    )
    return True


@functools.cache
def _plan(key):
    """(descriptor, layouts of A, B and D, algorithm, workspace bytes) for a case, or None."""
    epilogue, trans_a, trans_b, m, n, k, lda, ldb, ldd, in_dtype, out_dtype, tf32, alignments, device = key
    lib = _lt()
    in_type, out_type = matmul._CUDA_TYPE[np.dtype(in_dtype)], matmul._CUDA_TYPE[np.dtype(out_dtype)]
    compute = matmul._COMPUTE_32F_FAST_TF32 if (tf32 and np.dtype(in_dtype) == np.float32) else matmul._COMPUTE_32F
    desc = ctypes.c_void_p()
    _check(lib.cublasLtMatmulDescCreate(ctypes.byref(desc), compute, _CUDA_R_32F), "cublasLtMatmulDescCreate")
    for attribute, value in ((_DESC_TRANSA, trans_a), (_DESC_TRANSB, trans_b)):
        v = ctypes.c_int32(value)
        _check(lib.cublasLtMatmulDescSetAttribute(desc, attribute, ctypes.byref(v), 4), "transpose")
    v = ctypes.c_uint32(epilogue)
    _check(lib.cublasLtMatmulDescSetAttribute(desc, _DESC_EPILOGUE, ctypes.byref(v), 4), "epilogue")
    # stored shapes (before the transposes): op_T(A) is m x k, so A is k x m
    shape_a = (k, m) if trans_a == _OP_T else (m, k)
    shape_b = (n, k) if trans_b == _OP_T else (k, n)
    layouts = []
    for dtype, (rows, cols), ld in ((in_type, shape_a, lda), (in_type, shape_b, ldb), (out_type, (m, n), ldd)):
        layout = ctypes.c_void_p()
        _check(lib.cublasLtMatrixLayoutCreate(ctypes.byref(layout), dtype, rows, cols, ld), "layout")
        layouts.append(layout)
    preference = ctypes.c_void_p()
    _check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(preference)), "preference")
    size = ctypes.c_uint64(WORKSPACE_BYTES)
    _check(lib.cublasLtMatmulPreferenceSetAttribute(preference, _PREF_MAX_WORKSPACE, ctypes.byref(size), 8), "ws")
    for attribute, alignment in zip(_PREF_MIN_ALIGNMENT, alignments[:2] + alignments[2:3] * 2):
        v = ctypes.c_uint32(alignment)
        _check(lib.cublasLtMatmulPreferenceSetAttribute(preference, attribute, ctypes.byref(v), 4), "alignment")
    # The heuristic reads the bias pointer's value for its alignment: an address of the same alignment.
    v = ctypes.c_void_p(alignments[3])
    _check(lib.cublasLtMatmulDescSetAttribute(desc, _DESC_BIAS_POINTER, ctypes.byref(v), 8), "bias pointer")
    result = _Heuristic()
    count = ctypes.c_int(0)
    status = lib.cublasLtMatmulAlgoGetHeuristic(
        _handle(device), desc, layouts[0], layouts[1], layouts[2], layouts[2], preference, 1,
        ctypes.byref(result), ctypes.byref(count),
    )  # fmt: skip
    lib.cublasLtMatmulPreferenceDestroy(preference)
    if status != 0 or count.value < 1:
        return None
    return desc, layouts[0], layouts[1], layouts[2], result.algo, int(result.workspace_size)


def _alignment(address: int) -> int:
    """The largest power of two up to 256 that divides address (what cuBLASLt's heuristic may assume)."""
    return min(256, address & -address) if address else 256


@functools.cache
def _handle(device: int) -> ctypes.c_void_p:
    handle = ctypes.c_void_p()
    with cp.cuda.Device(device):
        _check(_lt().cublasLtCreate(ctypes.byref(handle)), "cublasLtCreate")
    return handle


@functools.cache
def _workspace(device: int) -> int:
    """One workspace per device for the life of the process, from cudaMalloc (not the pool: a graph
    captured later replays the address it recorded)."""
    with cp.cuda.Device(device):
        return cp.cuda.runtime.malloc(WORKSPACE_BYTES)


def _check(status: int, what: str) -> None:
    matmul._check(status, f"cuBLASLt {what}")


@functools.cache
def _lt():
    """libcublasLt as libcublas loaded it (found in this process's memory map), or None."""
    matmul._cublas()
    path = matmul.mapped_library("libcublasLt.so") or ctypes.util.find_library("cublasLt")
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    p, i, u64, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_int64
    signatures = {
        "cublasLtCreate": [p],
        "cublasLtMatmulDescCreate": [p, i, i],
        "cublasLtMatmulDescSetAttribute": [p, i, p, ctypes.c_size_t],
        "cublasLtMatrixLayoutCreate": [p, i, u64, u64, i64],
        "cublasLtMatmulPreferenceCreate": [p],
        "cublasLtMatmulPreferenceSetAttribute": [p, i, p, ctypes.c_size_t],
        "cublasLtMatmulPreferenceDestroy": [p],
        "cublasLtMatmulAlgoGetHeuristic": [p, p, p, p, p, p, p, i, p, p],
        "cublasLtMatmul": [p, p, p, p, p, p, p, p, p, p, p, p, p, p, ctypes.c_size_t, p],
    }
    for name, argtypes in signatures.items():
        function = getattr(lib, name)
        function.argtypes = argtypes
        function.restype = i
    return lib


KERNELS = {"linear_bias": linear_bias, "linear_bias_backward": linear_bias_backward}
