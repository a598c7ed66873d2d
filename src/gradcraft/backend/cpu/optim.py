"""The optimizer's multi-tensor kernels outside the graph: AdamW in place, and the global gradient
norm (cuda/kernels/adamw.cu, gradnorm.cu). The C AdamW (native/) takes each parameter it can."""

import math

import numpy as np

from gradcraft.backend import check_optimizer_state
from gradcraft.backend.cpu import native
from gradcraft.backend.cpu.common import _wide
from gradcraft.backend.cpu.threads import _BLOCK, _parallel


def _adamw_step(
    params, grads, exp_avgs, exp_avg_sqs, lr_step, *, beta1, beta2, eps, weight_decay, grad_scale=None
) -> None:
    check_optimizer_state(params, grads, exp_avgs, exp_avg_sqs)  # before any write: UserError
    lr, step = float(lr_step[0]), float(lr_step[1])
    consts = dict(
        scale=float(grad_scale[0]) if grad_scale is not None else 1.0,
        step_size=lr / (1.0 - beta1**step),
        bc2_sqrt=math.sqrt(1.0 - beta2**step),
        decay=1.0 - lr * weight_decay if weight_decay else 1.0,
        beta1=beta1,
        beta2=beta2,
        eps=eps,
    )
    # Every parameter cut into flat chunks: the chunks of all parameters are shared among the threads,
    # and each chunk's temporaries stay in cache.
    chunks = []
    for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
        if native.adamw_update(p, g, m, v, **consts):
            continue
        if not (p.flags.c_contiguous and m.flags.c_contiguous and v.flags.c_contiguous):
            _adamw_update(p, g, m, v, **consts)  # (flat views need contiguous buffers)
            continue
        fp, fg, fm, fv = p.reshape(-1), g.reshape(-1), m.reshape(-1), v.reshape(-1)
        chunks += [
            (fp[a : a + _BLOCK], fg[a : a + _BLOCK], fm[a : a + _BLOCK], fv[a : a + _BLOCK])
            for a in range(0, fp.size, _BLOCK)
        ]

    _parallel(lambda a, b: [_adamw_update(*chunk, **consts) for chunk in chunks[a:b]], len(chunks), _BLOCK)


def _adamw_update(p, g, m, v, *, scale, step_size, bc2_sqrt, decay, beta1, beta2, eps) -> None:
    """PyTorch's AdamW on one chunk, in place (m and v are float32; p may be half)."""
    w = _wide(p)
    gw = _wide(g)
    if scale != 1.0:
        gw = gw * np.float32(scale)
    if decay != 1.0:
        w *= np.float32(decay)
    t = np.multiply(gw, np.float32(1.0 - beta1), dtype=m.dtype)
    m *= np.float32(beta1)
    m += t
    np.multiply(gw, np.float32(1.0 - beta2), out=t)
    t *= gw
    v *= np.float32(beta2)
    v += t
    np.sqrt(v, out=t)  # the denominator sqrt(v) / sqrt(1 - beta2^step) + eps
    t /= np.float32(bc2_sqrt)
    t += np.float32(eps)
    np.divide(m, t, out=t)
    t *= np.float32(step_size)
    w -= t
    if w is not p:
        p[...] = w


def _grad_norm(grads, max_norm: float = 0.0):
    total = sum(
        float(np.dot(g.reshape(-1).astype(np.float32, copy=False), g.reshape(-1).astype(np.float32, copy=False)))
        for g in grads
    )
    norm = math.sqrt(total)
    coef = min(1.0, max_norm / (norm + 1e-6)) if max_norm > 0 else 1.0
    return np.array([norm, coef], dtype=np.float32)


def _scale_many(arrays, scale) -> None:
    s = np.float32(np.asarray(scale).reshape(-1)[0])
    for a in arrays:
        if a.dtype == np.float32:
            a *= s
        else:
            a[...] = (a.astype(np.float32) * s).astype(a.dtype)
