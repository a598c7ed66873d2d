"""The matrix product with batch broadcasting, on NumPy's BLAS (cuda/matmul.py: cuBLAS). blas.py
sets how many BLAS threads each product gets."""

import numpy as np

from gradcraft.backend.cpu.common import _finish, _out, _wide


def _matmul(a, b):
    wa, wb = _wide(a), _wide(b)
    if wb.ndim == 2:
        # (..., M, K) @ (K, N): one BLAS call on (batch*M, K); NumPy would loop over the batch.
        rows = wa.reshape(-1, wa.shape[-1])
        out = _out((rows.shape[0], wb.shape[1]), np.result_type(wa, wb))
        if 2 <= rows.shape[0] <= 32 and wb.flags.f_contiguous and not wb.flags.c_contiguous:
            # x @ W.T with a few rows (a decoding step): OpenBLAS computes W @ x.T 1.3-1.9x faster,
            # and at this size the transposed copy into `out` costs little (measured on 2 cores; from
            # about 128 rows on, the copy costs more than the product gains).
            out[...] = np.matmul(wb.T, rows.T).T
        else:
            np.matmul(rows, wb, out=out)
        out = out.reshape(wa.shape[:-1] + (wb.shape[1],))
        return _finish(out, a.dtype) if wa is not a else out
    if wb.ndim >= 2 and wb.strides[-1] != wb.itemsize and wb.shape[-1] > 1:
        # A transposed right operand (q @ k^T, g @ v^T) sends NumPy's batched matmul to a loop 2x
        # slower than BLAS on a contiguous copy, copy included.
        wb = np.ascontiguousarray(wb)
    if wa.ndim < 2 or wb.ndim < 2:
        return _finish(np.matmul(wa, wb), a.dtype)
    batch_a, batch_b = wa.shape[:-2], wb.shape[:-2]
    batch = batch_a if batch_a == batch_b else np.broadcast_shapes(batch_a, batch_b)
    out = _out(batch + (wa.shape[-2], wb.shape[-1]), wa.dtype if wa.dtype == wb.dtype else np.result_type(wa, wb))
    np.matmul(wa, wb, out=out)
    return _finish(out, a.dtype) if wa is not a else out


KERNELS = {"matmul": _matmul}
