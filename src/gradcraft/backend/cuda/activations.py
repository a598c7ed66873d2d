"""Launchers for kernels/activations.cu: GELU, SiLU, SwiGLU and their gradients (backend/cpu/activations.py
is their reference)."""

from gradcraft.backend.cuda import launch as L
from gradcraft.backend.cuda.launch import i32, i64


def _elementwise(kernel, x, *rest, extra=()):
    x = L.as_contiguous(x)
    rest = [L.as_contiguous(r, x.dtype) for r in rest]
    y = L.empty(x.shape, x.dtype)
    if x.size:
        access = L.access(x.dtype, x, *rest, y)
        units = x.size // (16 // x.dtype.itemsize) if access == "v" else x.size
        L.run(
            "activations.cu",
            f"{kernel}_{access}_{L.suffix(x.dtype)}",
            L.grid_1d(units, 256, 2),
            256,
            (x, *rest, y, i64(x.size), *extra),
        )
    return y


def gelu(x, approximate="none"):
    return _elementwise("gelu_fwd", x, extra=(i32(approximate == "tanh"),))


def gelu_backward(x, g, approximate="none"):
    return _elementwise("gelu_bwd", x, g, extra=(i32(approximate == "tanh"),))


def silu(x):
    return _elementwise("silu_fwd", x)


def silu_backward(x, g):
    return _elementwise("silu_bwd", x, g)


def swiglu(h):
    h = L.as_contiguous(h)
    F = h.shape[-1] // 2
    y = L.empty(h.shape[:-1] + (F,), h.dtype)
    if y.size:
        access = L.access(h.dtype, h, y, width=F)
        units = y.size // (16 // h.dtype.itemsize) if access == "v" else y.size
        L.run(
            "activations.cu",
            f"swiglu_fwd_{access}_{L.suffix(h.dtype)}",
            L.grid_1d(units),
            256,
            (h, y, i64(y.size // F), i64(F)),
        )
    return y


def swiglu_backward(h, g):
    h = L.as_contiguous(h)
    g = L.as_contiguous(g, h.dtype)
    F = h.shape[-1] // 2
    dh = L.empty(h.shape, h.dtype)
    if g.size:
        access = L.access(h.dtype, h, g, dh, width=F)
        units = g.size // (16 // h.dtype.itemsize) if access == "v" else g.size
        L.run(
            "activations.cu",
            f"swiglu_bwd_{access}_{L.suffix(h.dtype)}",
            L.grid_1d(units),
            256,
            (h, g, dh, i64(g.size // F), i64(F)),
        )
    return dh


KERNELS = {
    "gelu": gelu,
    "gelu_backward": gelu_backward,
    "silu": silu,
    "silu_backward": silu_backward,
    "swiglu": swiglu,
    "swiglu_backward": swiglu_backward,
}
