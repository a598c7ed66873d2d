"""Cross-entropy over class rows and its gradient (cuda/kernels/cross_entropy.cu); the fused output
layer + loss is linear_cross_entropy.py's."""

import numpy as np

from gradcraft.backend.cpu.common import _HALF, _finish, _out, _wide
from gradcraft.backend.cpu.threads import _CE_BLOCK, _into, _parallel


def _cross_entropy(logits, target, ignore_index, label_smoothing, valid_classes=None, float_loss=False):
    """Per-row loss of (N, C) logits against (N,) class ids; ignored rows give 0 (float32 with
    float_loss, else the logits' dtype).

    loss = logsumexp(x) - x[target]; with smoothing eps: (1 - eps) * that + eps * (logsumexp(x) - mean(x)).
    Only the first valid_classes columns (None: all) are classes; the rest (padding) are not read.
    Computed block by block of rows, so the exp temporaries stay in cache, on several threads.
    """
    n, width = logits.shape
    classes = width if valid_classes is None else valid_classes
    wdtype = np.float32 if logits.dtype in _HALF else logits.dtype
    loss = np.empty(n, dtype=wdtype)
    valid = target != ignore_index
    safe = np.where(valid, target, 0)

    def block(a, b):
        rows = _wide(logits[a:b, :classes])
        tmp = np.subtract(rows, rows.max(axis=1)[:, None], dtype=wdtype)
        picked = tmp[np.arange(b - a), safe[a:b]]
        mean_shifted = tmp.mean(axis=1) if label_smoothing else None
        np.exp(tmp, out=tmp)
        lse = np.log(tmp.sum(axis=1))
        nll = lse - picked
        if label_smoothing:
            nll = (1.0 - label_smoothing) * nll + label_smoothing * (lse - mean_shifted)
        loss[a:b] = nll

    _parallel(block, n, classes, _CE_BLOCK)
    loss[~valid] = 0.0
    return _finish(loss, np.dtype(np.float32) if float_loss and logits.dtype in _HALF else logits.dtype)


def _cross_entropy_backward(logits, target, g, ignore_index, label_smoothing, valid_classes=None, float_loss=False):
    """d loss / d logits = g * (softmax(x) - (1 - eps) onehot(target) - eps / C), block by block of
    rows on several threads; g / sum(exp) scales each row in the same pass as the normalization.
    Columns past valid_classes (padding) get 0."""
    n, width = logits.shape
    classes = width if valid_classes is None else valid_classes
    out = _out(logits.shape, logits.dtype)
    valid = target != ignore_index
    safe = np.where(valid, target, 0)
    wdtype = np.float32 if logits.dtype in _HALF else logits.dtype
    scale = (_wide(g) * valid).astype(wdtype)

    def block(a, b):
        def compute(p):
            rows = _wide(logits[a:b, :classes])
            np.subtract(rows, rows.max(axis=1)[:, None], out=p)
            np.exp(p, out=p)
            p *= (scale[a:b] / p.sum(axis=1))[:, None]
            p[np.arange(b - a), safe[a:b]] -= (1.0 - label_smoothing) * scale[a:b]
            if label_smoothing:
                p -= (label_smoothing / classes) * scale[a:b, None]

        _into(out[a:b, :classes], compute)
        out[a:b, classes:] = 0

    _parallel(block, n, width, _CE_BLOCK)
    return out


KERNELS = {"cross_entropy": _cross_entropy, "cross_entropy_backward": _cross_entropy_backward}
