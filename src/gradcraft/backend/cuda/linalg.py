"""Matrix kernels over the last two axes (batched): CuPy's cuSOLVER routines, 16-bit inputs computed
in float32 (as backend/cpu/linalg.py). CuPy does not check for singular inputs: the results hold NaN
or infinities where the CPU raises LinAlgError."""

import cupy as cp

from gradcraft.backend.cuda import launch as L


def _slogdet(a):
    sign, logabs = cp.linalg.slogdet(L.wide(a))
    return L.finish(cp.stack([sign, logabs], axis=-1), a.dtype)


KERNELS = {
    "linalg_inv": lambda a, caller="linalg.inv": L.finish(cp.linalg.inv(L.wide(a)), a.dtype),
    "linalg_slogdet": _slogdet,
    "linalg_cholesky": lambda a: L.finish(cp.linalg.cholesky(L.wide(a)), a.dtype),
}
