"""Mixture of experts: tokens to their experts' rows and back (gradcraft/ops/moe's kernels)."""

import numpy as np

from gradcraft.backend.cpu.common import _finish, _out, _wide


def _moe_permute(x, slot, rows):
    """(rows, C) buffer whose row slot[n, j] holds token x[n] (zeros elsewhere). Slots are distinct
    but for the last row, where dropped assignments all land (and which the caller discards)."""
    out = _out((rows, x.shape[1]), x.dtype)
    out.fill(0)
    out[slot.reshape(-1)] = np.repeat(x, slot.shape[1], axis=0)
    return out


def _moe_permute_backward(g, slot):
    """d x[n] = sum_j g[slot[n, j]]: a gather per token, no scatter."""
    return _finish(_wide(g)[slot].sum(axis=1), g.dtype)


def _moe_unpermute(y, slot, w):
    """out[n] = sum_j w[n, j] * y[slot[n, j]] (y's last row is zeros for dropped assignments)."""
    wy = _wide(y)
    return _finish(np.einsum("njc,nj->nc", wy[slot], _wide(w).astype(wy.dtype)), y.dtype)


def _moe_unpermute_backward(y, slot, w, g):
    wy, wg = _wide(y), _wide(g)
    dy = np.zeros(wy.shape, dtype=wy.dtype)
    dy[slot.reshape(-1)] = (_wide(w).astype(wy.dtype)[:, :, None] * wg[:, None, :]).reshape(-1, wy.shape[1])
    dw = np.einsum("njc,nc->nj", wy[slot], wg)
    return _finish(dy, y.dtype), _finish(dw, w.dtype)


KERNELS = {
    "moe_permute": _moe_permute,
    "moe_permute_backward": _moe_permute_backward,
    "moe_unpermute": _moe_unpermute,
    "moe_unpermute_backward": _moe_unpermute_backward,
}
