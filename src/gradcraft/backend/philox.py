"""Attention-weight dropout masks: Philox4x32-10 in NumPy, the reference of kernels/philox.cuh's
`philox4x32` and of the masks the flash-attention kernels draw.

Why a second generator: element-wise dropout (backend/cpu/dropout.py `_dropout`) uses NumPy's Philox4x64
stream, one 53-bit number per element. Attention weights are T x S per head, recomputed in forward
and in both backward kernels, so their masks must be cheap to draw inside a tile: Philox4x32-10
(Salmon et al., SC 2011; 32-bit multiplies only) gives 4 x 32 bits per call, read here as eight
16-bit numbers, one per element of a row segment of 8 keys. An element is kept when its number is
>= round(p * 65536): p is applied in steps of 2^-16, and the kept weights are scaled by
1 / (1 - threshold / 65536) so that the expectation is exact.

Numbering: the weight of query i and key j in head row `bh` (b * H + h) of a (B, H, T, S) attention
uses Philox counter (c0, c1) = the 64-bit index (bh * T + i) * ceil(S / 8) + j // 8, c2 = the low 32
bits of the device's dropout counter (the training step), c3 = the node's stream id, key = the
64-bit dropout seed split in two; its number is 16-bit half j % 2 of word (j % 8) // 2. So a mask is
a function of (seed, step, stream, b, h, i, j) alone, whichever kernel or block computes it.
"""

import numpy as np

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)
_LO = np.uint64(0xFFFFFFFF)


def philox4x32(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 of the counters (arrays broadcast together, uint32 values) under key (k0, k1):
    the four output words, uint32 arrays."""
    c = [np.asarray(x, dtype=np.uint64) & _LO for x in (c0, c1, c2, c3)]
    c0, c1, c2, c3 = np.broadcast_arrays(*c)
    k0, k1 = np.uint32(k0), np.uint32(k1)
    with np.errstate(over="ignore"):
        for _ in range(10):
            p0, p1 = _M0 * c0, _M1 * c2  # exact: both factors < 2^32
            c0, c1, c2, c3 = (
                (p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0),
                p1 & _LO,
                (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1),
                p0 & _LO,
            )
            k0, k1 = k0 + _W0, k1 + _W1
    return tuple(x.astype(np.uint32) for x in (c0, c1, c2, c3))


def threshold(p: float) -> int:
    """The 16-bit threshold under which an element is dropped."""
    return min(65535, int(round(p * 65536.0)))


def keep_scale(p: float) -> float:
    """What kept weights are multiplied by: 1 / (1 - the probability actually applied)."""
    return 65536.0 / (65536.0 - threshold(p))


def attention_keep(
    rows: int, T: int, S: int, i0: int, t: int, j0: int, s: int, state, stream: int, p: float
) -> np.ndarray:
    """The keep mask (bool, (rows, t, s)) of queries i0..i0+t and keys j0..j0+s of `rows` head rows of a
    (B, H, T, S) attention (rows = B * H), for the dropout state [seed, counter] and a stream id."""
    seed, counter = (int(v) & 0xFFFFFFFFFFFFFFFF for v in state)
    groups = -(-S // 8)
    g0, g1 = j0 // 8, -(-(j0 + s) // 8)  # the 8-key groups that the keys j0..j0+s lie in
    row = (
        np.arange(rows, dtype=np.uint64)[:, None] * np.uint64(T) + np.arange(i0, i0 + t, dtype=np.uint64)[None, :]
    )  # (rows, t) global query rows
    index = row[:, :, None] * np.uint64(groups) + np.arange(g0, g1, dtype=np.uint64)  # (rows, t, g)
    words = philox4x32(index & _LO, index >> np.uint64(32), counter & 0xFFFFFFFF, stream, seed & 0xFFFFFFFF, seed >> 32)
    halves = np.stack(words, axis=-1).view(np.uint16)  # little-endian: low half first, (rows, t, g, 8)
    numbers = halves.reshape(rows, t, (g1 - g0) * 8)[:, :, j0 - g0 * 8 : j0 - g0 * 8 + s]
    return numbers >= threshold(p)


def attention_dropout(
    x: np.ndarray, state, *, p: float, stream: int, T: int, S: int, i0: int = 0, j0: int = 0
) -> np.ndarray:
    """x (..., t, s): attention weights of queries i0.. and keys j0.. of a (B, H, T, S) attention, the
    leading axes flattening to B * H head rows; zeroed where dropped, scaled by keep_scale(p)."""
    t, s = x.shape[-2], x.shape[-1]
    rows = x.size // (t * s) if x.size else 0
    keep = attention_keep(rows, T, S, i0, t, j0, s, state, stream, p).reshape(x.shape)
    return np.where(keep, x * x.dtype.type(keep_scale(p)), x.dtype.type(0))
