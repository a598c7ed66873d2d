"""What the CUDA kernel tests share (tests/test_cuda.py, test_cuda_rows.py, test_cuda_attention.py,
test_cuda_linear.py): the CUDA backend against the CPU backend (the reference), kernel by kernel and
op by op.

Skipped without a GPU. Outputs of the handwritten kernels are poisoned (NaN bits) before each run,
so a kernel that skips elements fails (the `gpu` fixture, in conftest.py). Inputs are random draws,
odd sizes on purpose, from a seed that is new every session and printed with every failure
(GRADCRAFT_TEST_SEED=N repeats a session's inputs). bf16 results are compared element by element with
a tolerance that follows from bf16's precision (test_cuda.py's close_bf16), against a float32
reference computed from the same bf16-rounded inputs.
"""

import os

import numpy as np
import pytest

from gradcraft.device import get_backend, is_available

CUDA_ONLY = [pytest.mark.cuda, pytest.mark.skipif(not is_available("cuda"), reason="needs CuPy and an NVIDIA GPU")]

# The modules whose tests together run every contract kernel (test_every_contract_kernel_ran).
KERNEL_TEST_MODULES = ("test_cuda", "test_cuda_rows", "test_cuda_attention", "test_cuda_linear")

BF16 = np.dtype("bfloat16")
TOL = {
    np.dtype(np.float64): (1e-9, 1e-11),
    np.dtype(np.float32): (2e-4, 2e-5),
    BF16: (2e-2, 2e-2),
    np.dtype(np.float16): (4e-3, 2e-3),
}
SEEN: set = set()  # contract kernels these tests ran on the GPU (conftest.py's cuda_backend adds them)


def cpu():
    return get_backend("cpu")


SEED = int(os.environ.get("GRADCRAFT_TEST_SEED") or np.random.SeedSequence().entropy % (1 << 31))
_rng = np.random.default_rng(SEED)


def reseed():
    """Restart rng() from SEED (before each test: a test's inputs do not depend on the tests before it)."""
    global _rng
    _rng = np.random.default_rng(SEED)


def rng():
    return _rng


def close(got, expected, dtype=None, scale=1.0, what=""):
    what = f"{what} (GRADCRAFT_TEST_SEED={SEED})"
    dtype = np.dtype(dtype or expected.dtype)
    rtol, atol = TOL.get(dtype, (0, 0))
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
    assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype} != {expected.dtype}"
    if expected.dtype.kind in "fc" or expected.dtype == BF16:
        np.testing.assert_allclose(
            got.astype(np.float64), expected.astype(np.float64), rtol=rtol * scale, atol=atol * scale, err_msg=what
        )
    else:
        np.testing.assert_array_equal(got, expected, err_msg=what)


def both(gpu, op, *args, **attrs):
    """Run one kernel on both backends; numpy args are copied to the GPU. Returns (gpu, cpu) as numpy."""
    expected = cpu().reference_kernels[op](*args, **attrs)  # the NumPy kernel, not a compiled C one
    got = gpu.run(op, [gpu.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args], attrs)
    if isinstance(expected, tuple):
        return tuple(gpu.to_numpy(g) for g in got), expected
    return gpu.to_numpy(got), np.asarray(expected)


def check(gpu, op, *args, tol_scale=1.0, **attrs):
    got, expected = both(gpu, op, *args, **attrs)
    if isinstance(expected, tuple):
        for i, (g, e) in enumerate(zip(got, expected)):
            close(g, e, scale=tol_scale, what=f"{op} output {i}")
    else:
        close(got, expected, scale=tol_scale, what=op)


def randn(shape, dtype=np.float32, r=None, scale=1.0, shift=0.0):
    """Normal draws, scaled and shifted in float64 and only then rounded to `dtype`."""
    return ((r or rng()).standard_normal(shape) * scale + shift).astype(dtype)


FLOATS = [np.float32, BF16]


def rel_err(got, expected):
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    assert np.isfinite(got).all(), "non-finite values (an unwritten or corrupted element)"
    return np.linalg.norm(got - expected) / max(np.linalg.norm(expected), 1e-30)


def misaligned(gpu, a):
    """A contiguous CUDA copy of numpy `a` starting one element past an aligned address (scalar kernels)."""
    import cupy as cp

    buf = cp.empty(a.size + 1, dtype=a.dtype)
    view = buf[1:].reshape(a.shape)
    view[...] = gpu.from_numpy(a)
    return view
