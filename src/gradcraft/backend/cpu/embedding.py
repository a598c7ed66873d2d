"""Embedding lookup and its gradient (cuda/kernels/embedding.cu)."""

import numpy as np

from gradcraft.backend.cpu.common import _finish, _out, _wide, stats


def _embedding(weight, idx):
    return stats.track(np.take(weight, idx, axis=0))


def _embedding_backward(idx, g, num_embeddings):
    dim = g.shape[-1]
    flat_idx = idx.reshape(-1)
    flat_g = _wide(g).reshape(-1, dim)
    out = _out((num_embeddings, dim), flat_g.dtype)
    out.fill(0)
    if not len(flat_idx):
        return _finish(out, g.dtype)
    # Sort by row, then sum each run of equal rows level by level: every row's first occurrence, then
    # the second ones of the rows that have two, ... (a sequential sum in the original order).
    # np.add.reduceat over axis 0 took ~15x longer; np.add.at ~8x.
    order = np.argsort(flat_idx, kind="stable")
    rows, starts, counts = np.unique(flat_idx[order], return_index=True, return_counts=True)
    rank = np.arange(len(order)) - np.repeat(starts, counts)  # occurrence number within its row
    slot = np.repeat(np.arange(len(rows)), counts)  # the row's place in `rows`
    sums = flat_g[order[rank == 0]]
    for level in range(1, int(counts.max())):
        sel = rank == level
        sums[slot[sel]] += flat_g[order[sel]]  # a row appears at most once per level
    out[rows] = sums
    return _finish(out, g.dtype)


KERNELS = {"embedding": _embedding, "embedding_backward": _embedding_backward}
