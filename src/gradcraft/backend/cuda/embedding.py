"""Launchers for kernels/embedding.cu: the table lookup and its deterministic gradient.
backend/cpu/embedding.py is their reference."""

import cupy as cp
import numpy as np

from gradcraft.backend.cuda import launch as L
from gradcraft.backend.cuda.launch import i32, i64


def embedding(weight, idx):
    weight, idx = L.as_contiguous(weight), L.as_contiguous(idx, np.int64)
    D = int(np.prod(weight.shape[1:]))
    out = L.empty(idx.shape + weight.shape[1:], weight.dtype)
    n = idx.size
    if n and D:
        row_bytes = D * weight.dtype.itemsize  # copied in the widest unit that divides it and the alignment
        unit = next(u for u in (16, 8, 4, 2, 1) if row_bytes % u == 0 and L.aligned(weight, out, to=u))
        args = (weight, idx, out, i64(n), i32(row_bytes // unit), i64(weight.shape[0]))
        L.run("embedding.cu", f"embedding_fwd_{unit}", min(-(-n // 8), 65535 * 8), 256, args)
    return out


def embedding_backward(idx, g, num_embeddings):
    """The table's gradient: a stable sort of the ids, then chunks of 32 sorted positions summed per
    warp (embedding.cu); every row that no id names stays zero."""
    D = g.shape[-1]
    flat = L.as_contiguous(idx, np.int64).reshape(-1)
    g = L.as_contiguous(g)
    out = cp.zeros((num_embeddings, D), dtype=g.dtype)
    n = flat.size
    if n and D:
        order = cp.argsort(flat).astype(np.int64, copy=False)  # CuPy's sort is stable: equal ids keep their order
        access = L.access(g.dtype, g, out, width=D)
        vectors = D // (16 // g.dtype.itemsize) if access == "v" else D
        chunks = -(-n // 32)
        part = cp.empty((chunks, 2, D), dtype=L.acc_dtype(g.dtype))  # (only the slots a run leaves are read)
        tasks = chunks * -(-vectors // 32)  # a warp each: 32 positions x 32 accesses of a row
        grid = min(-(-tasks // 8), 65535 * 8)
        sizes = (i64(n), i32(D), i64(num_embeddings))
        kernel = f"{access}_{L.suffix(g.dtype)}"
        L.run("embedding.cu", f"embedding_bwd_chunk_{kernel}", grid, 256, (flat, order, g, out, part, *sizes))
        L.run("embedding.cu", f"embedding_bwd_join_{kernel}", grid, 256, (flat, order, out, part, *sizes))
    return out


KERNELS = {"embedding": embedding, "embedding_backward": embedding_backward}
