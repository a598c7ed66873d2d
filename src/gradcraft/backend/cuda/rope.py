"""Launcher for kernels/rope.cu: rotary position embeddings (and their inverse, the gradient).
backend/cpu/rope.py is its reference."""

from gradcraft.backend.cuda import launch as L
from gradcraft.backend.cuda.launch import i32, i64


def rope(x, cos, sin, inverse):
    x = L.as_contiguous(x)
    T, D = x.shape[-2], x.shape[-1]
    half = D // 2
    rows = x.size // max(D, 1)
    y = L.empty(x.shape, x.dtype)
    if rows and half:
        tables = (L.acc_param(cos, x), L.acc_param(sin, x))
        args = (x, *tables, y, i64(rows), i32(T), i32(half), i32(bool(inverse)))
        L.run("rope.cu", f"rope_{L.suffix(x.dtype)}", L.grid_1d(rows * half), 256, args)
    return y


KERNELS = {"rope": rope}
