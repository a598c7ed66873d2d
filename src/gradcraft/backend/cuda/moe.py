"""Mixture of experts: tokens to their experts' rows and back (backend/cpu/moe.py's rules)."""

import cupy as cp

from gradcraft.backend.cuda import launch as L


def _moe_permute(x, slot, rows):
    """backend/cpu/moe.py's _moe_permute: one scatter of token rows to their expert slots (no atomics)."""
    out = cp.zeros((rows, x.shape[1]), dtype=x.dtype)
    out[slot.reshape(-1)] = cp.repeat(x, slot.shape[1], axis=0)
    return out


def _moe_permute_backward(g, slot):
    return L.finish(L.wide(g)[slot].sum(axis=1), g.dtype)


# (Elementwise products and sums, not cp.einsum: einsum calls cuBLAS through CuPy's bindings, which
# refuse while a CUDA graph is being captured.)


def _moe_unpermute(y, slot, w):
    wy = L.wide(y)
    return L.finish((wy[slot] * L.wide(w).astype(wy.dtype)[:, :, None]).sum(axis=1), y.dtype)


def _moe_unpermute_backward(y, slot, w, g):
    wy, wg = L.wide(y), L.wide(g)
    dy = cp.zeros(wy.shape, dtype=wy.dtype)
    dy[slot.reshape(-1)] = (L.wide(w).astype(wy.dtype)[:, :, None] * wg[:, None, :]).reshape(-1, wy.shape[1])
    dw = (wy[slot] * wg[:, None, :]).sum(axis=-1)
    return L.finish(dy, y.dtype), L.finish(dw, w.dtype)


KERNELS = {
    "moe_permute": _moe_permute,
    "moe_permute_backward": _moe_permute_backward,
    "moe_unpermute": _moe_unpermute,
    "moe_unpermute_backward": _moe_unpermute_backward,
}
