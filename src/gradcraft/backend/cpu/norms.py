"""LayerNorm and RMSNorm and their fused gradients (cuda/kernels/norms.cu)."""

import math

import numpy as np

from gradcraft.backend.cpu.common import _HALF, _finish, _out, _wide
from gradcraft.backend.cpu.threads import _into, _parallel, _rowwise


def _rows(x, n_dims):
    """View x as (rows, features) over its last n_dims dimensions."""
    features = math.prod(x.shape[x.ndim - n_dims :])
    return x.reshape(-1, features)


def _norm_rows(x, weight, g, n_dims):
    """(rows, features) views of x (and g), the weight as a float row, and the float dtype."""
    rows = _rows(x, n_dims)
    grows = _rows(g, n_dims) if g is not None else None
    w = _wide(weight).reshape(1, -1) if weight is not None else None
    return rows, grows, w, (np.float32 if x.dtype in _HALF else x.dtype)


def _sum_blocks(partials: dict, features: int, dtype):
    """Sum per-block partial results (keyed by first row) in row order: the same result for any
    thread count, since the blocks do not depend on it. Zeros when there were no rows."""
    total = np.zeros(features, dtype)
    for key in sorted(partials):
        total += partials[key]
    return total


def _layer_norm(x, weight, bias, eps, n_dims):
    rows, _, wt, _ = _norm_rows(x, weight, None, n_dims)
    b = _wide(bias).reshape(1, -1) if bias is not None else None
    out = _out(rows.shape, x.dtype)

    def block(ob, xb):
        def compute(o):
            w = _wide(xb)
            np.subtract(w, w.mean(axis=1, keepdims=True), out=o)
            o *= 1.0 / np.sqrt((o * o).mean(axis=1, keepdims=True) + eps)
            if wt is not None:
                o *= wt
            if b is not None:
                o += b

        _into(ob, compute)

    _rowwise(block, out, rows, inner=1)
    return out.reshape(x.shape)


def _layer_norm_backward(x, weight, g, eps, n_dims):
    rows, grows, wt, fdt = _norm_rows(x, weight, g, n_dims)
    features = rows.shape[1]
    dx = _out(rows.shape, x.dtype)
    partials = {}

    def block(a, b):
        w, gw = _wide(rows[a:b]), _wide(grows[a:b])
        xhat = w - w.mean(axis=1, keepdims=True)
        rstd = 1.0 / np.sqrt((xhat * xhat).mean(axis=1, keepdims=True) + eps)
        xhat *= rstd
        partials[a] = ((gw * xhat).sum(axis=0), gw.sum(axis=0))
        dxhat = gw * wt if wt is not None else gw.copy()
        # dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
        proj = (dxhat * xhat).mean(axis=1, keepdims=True)
        dxhat -= dxhat.mean(axis=1, keepdims=True)
        xhat *= proj
        dxhat -= xhat
        dxhat *= rstd
        dx[a:b] = dxhat

    _parallel(block, rows.shape[0], features)
    norm_shape = x.shape[x.ndim - n_dims :]
    dweight = _sum_blocks({k: v[0] for k, v in partials.items()}, features, fdt)
    dbias = _sum_blocks({k: v[1] for k, v in partials.items()}, features, fdt)
    return (
        dx.reshape(x.shape),
        _finish(dweight.reshape(norm_shape), x.dtype),
        _finish(dbias.reshape(norm_shape), x.dtype),
    )


def _rms_norm(x, weight, eps, n_dims):
    rows, _, wt, _ = _norm_rows(x, weight, None, n_dims)
    out = _out(rows.shape, x.dtype)

    def block(ob, xb):
        def compute(o):
            w = _wide(xb)
            np.multiply(w, w, out=o)
            rstd = 1.0 / np.sqrt(o.mean(axis=1, keepdims=True) + eps)
            np.multiply(w, rstd, out=o)
            if wt is not None:
                o *= wt

        _into(ob, compute)

    _rowwise(block, out, rows, inner=1)
    return out.reshape(x.shape)


def _rms_norm_backward(x, weight, g, eps, n_dims):
    rows, grows, wt, fdt = _norm_rows(x, weight, g, n_dims)
    features = rows.shape[1]
    dx = _out(rows.shape, x.dtype)
    partials = {}

    def block(a, b):
        w, gw = _wide(rows[a:b]), _wide(grows[a:b])
        rstd = 1.0 / np.sqrt(np.einsum("ij,ij->i", w, w)[:, None] / features + eps)
        xhat = w * rstd
        dxhat = gw * wt if wt is not None else gw.copy()
        # dx = rstd * (dxhat - xhat * mean(dxhat * xhat)); xhat's buffer ends as the product
        proj = np.einsum("ij,ij->i", dxhat, xhat)[:, None] / features
        xhat *= gw
        partials[a] = xhat.sum(axis=0)
        np.multiply(w, rstd * proj, out=xhat)
        dxhat -= xhat
        dxhat *= rstd
        dx[a:b] = dxhat

    _parallel(block, rows.shape[0], features)
    dweight = _sum_blocks(partials, features, fdt).reshape(x.shape[x.ndim - n_dims :])
    return dx.reshape(x.shape), _finish(dweight, x.dtype)


KERNELS = {
    "layer_norm": _layer_norm,
    "layer_norm_backward": _layer_norm_backward,
    "rms_norm": _rms_norm,
    "rms_norm_backward": _rms_norm_backward,
}
