"""Each row's next token (F.sample_tokens), in NumPy: gradcraft/sampling.py row by row; the reference
of kernels/sampling.cu."""

import numpy as np

from gradcraft.sampling import sample_row


def _sample_tokens(logits, temperature, top_k, top_p, uniform):
    """(B,) int64: row b's argmax where temperature[b] is 0, else its draw with uniform[b] (top_k[b]
    0: no top-k; top_p[b] 1: no nucleus)."""
    out = np.empty(logits.shape[0], dtype=np.int64)
    for b, row in enumerate(logits):
        t = float(temperature[b])
        if t == 0.0:
            out[b] = int(np.argmax(row))
        else:
            k = int(top_k[b])
            out[b] = sample_row(row, t, k if k > 0 else None, float(top_p[b]), float(uniform[b]))
    return out


KERNELS = {"sample_tokens": _sample_tokens}
