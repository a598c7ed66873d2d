"""Rotary position embedding (cuda/kernels/rope.cu)."""

import numpy as np

from gradcraft.backend.cpu.common import _HALF, _out, _wide
from gradcraft.backend.cpu.threads import _into, _rowwise


def _rope(x, cos, sin, inverse):
    """Rotate pairs (x[..., i], x[..., i + D/2]) by the angles whose cos/sin are given as (T, D/2).

    As x * [cos, cos] + swap_halves(x) * [-sin, sin] on a contiguous copy of each block: the halves
    of a head are short runs (16 floats for D = 32), and NumPy's loops over such short runs are 2x
    slower than over whole rows."""
    half = x.shape[-1] // 2
    wdtype = np.float32 if x.dtype in _HALF else x.dtype
    c, s = _wide(cos).astype(wdtype, copy=False), _wide(sin).astype(wdtype, copy=False)
    cos2 = np.concatenate([c, c], axis=-1)  # (T, D)
    sin2 = np.concatenate([s, -s] if inverse else [-s, s], axis=-1)  # (rotation by -angle: inverse)

    def block(out, xb):
        def compute(o):
            w = np.ascontiguousarray(_wide(xb))
            swapped = np.empty_like(w)
            swapped[..., :half] = w[..., half:]
            swapped[..., half:] = w[..., :half]
            swapped *= sin2
            np.multiply(w, cos2, out=o)
            o += swapped

        _into(out, compute)

    # the blocks keep (T, D) whole: cos and sin broadcast over the leading axes only
    return _rowwise(block, _out(x.shape, x.dtype), x, inner=2)


KERNELS = {"rope": _rope}
