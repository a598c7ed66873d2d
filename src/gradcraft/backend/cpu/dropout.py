"""Dropout with Philox masks that match the CUDA kernels bit for bit (cuda/kernels/dropout.cu), and
the explicit attention path's dropout with the flash kernels' mask (backend/philox.py)."""

import numpy as np

from gradcraft.backend import philox
from gradcraft.backend.cpu.common import _finish, _wide


def _dropout(x, state=None, *, p, stream=0, seed=None):
    """Zero where the element's uniform number is < p, scale the rest by 1/(1-p).

    state: int64 [seed, counter] (the device's random state, gradcraft/ops/creation.py), read when the
    kernel runs; stream: the layer's place in its step. Element i's number is the i-th of NumPy's
    Philox stream with counter [0, counter, stream, 0] and key [seed, 0], as dropout.cu computes it,
    so the mask is a function of (seed, counter, stream, i) and CPU and CUDA masks are bit-identical.
    `seed=` without a state means state [seed, 0] (kernel tests)."""
    seed, counter = (int(v) & 0xFFFFFFFFFFFFFFFF for v in (state if state is not None else (seed, 0)))
    bits = np.random.Philox(counter=[0, counter, stream, 0], key=[seed, 0])
    keep = np.random.Generator(bits).random(x.shape) >= p
    w = _wide(x)
    return _finish(np.where(keep, w * (1.0 / (1.0 - p)), 0.0).astype(w.dtype), x.dtype)


def _attention_dropout(x, state, *, p, stream, T, S, i0=0, j0=0):
    """Attention weights x (..., t, s) of queries i0.. and keys j0.. of a (B, H, T, S) attention, dropped
    with the flash kernels' mask (backend/philox.py) and scaled; the explicit path's dropout."""
    return _finish(philox.attention_dropout(_wide(x), state, p=p, stream=stream, T=T, S=S, i0=i0, j0=j0), x.dtype)


KERNELS = {"dropout": _dropout, "attention_dropout": _attention_dropout}
