"""Fused activations and their gradients: GELU (exact and tanh), SiLU, SwiGLU
(cuda/kernels/activations.cu)."""

import math

import numpy as np

from gradcraft.backend.cpu.common import _out, _wide
from gradcraft.backend.cpu.elementwise import _sigmoid
from gradcraft.backend.cpu.threads import _into, _rowwise


def _erf(x: np.ndarray) -> np.ndarray:
    if x.dtype == np.float64:
        return np.vectorize(math.erf, otypes=[np.float64])(x)
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7, below float32 resolution of gelu's output).
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return np.sign(x) * (1.0 - poly * np.exp(-x * x))


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _gelu_tanh_inner(w, out):
    """sqrt(2/pi) * (w + 0.044715 w^3) into out, as sqrt(2/pi) * w * (1 + 0.044715 w^2): NumPy's
    w ** 3 calls pow() for each element and is ~100x slower than two multiplies."""
    np.multiply(w, w, out=out)
    out *= 0.044715
    out += 1.0
    out *= w
    out *= _SQRT_2_OVER_PI
    return out


def _gelu(x, approximate="none"):
    def block(out, xb):
        def compute(o):
            w = _wide(xb)
            if approximate == "tanh":  # 0.5 w (1 + tanh(inner)), in place
                np.tanh(_gelu_tanh_inner(w, o), out=o)
            else:  # 0.5 w (1 + erf(w / sqrt 2))
                o[...] = _erf(w / math.sqrt(2.0))
            o += 1.0
            o *= w
            o *= 0.5

        _into(out, compute)

    return _rowwise(block, _out(x.shape, x.dtype), x)


def _gelu_backward(x, g, approximate="none"):
    def block(out, xb, gb):
        def compute(o):
            w, gw = _wide(xb), _wide(gb)
            if approximate == "tanh":
                # d = 0.5 (1 + t) + 0.5 w (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 w^2), t = tanh(inner)
                t = np.tanh(_gelu_tanh_inner(w, o), out=o)
                slope = np.multiply(w, w, dtype=o.dtype)
                slope *= 3 * 0.044715
                slope += 1.0
                slope *= w
                slope *= 0.5 * _SQRT_2_OVER_PI
                sech2 = np.multiply(t, t, dtype=o.dtype)
                np.subtract(1.0, sech2, out=sech2)
                sech2 *= slope
                t += 1.0
                t *= 0.5
                t += sech2
            else:  # cdf(w) + w * pdf(w)
                cdf = 0.5 * (1.0 + _erf(w / math.sqrt(2.0)))
                o[...] = cdf + w * np.exp(-0.5 * w * w) / math.sqrt(2.0 * math.pi)
            o *= gw

        _into(out, compute)

    return _rowwise(block, _out(x.shape, x.dtype), x, g)


def _silu(x):
    def block(out, xb):
        def compute(o):
            w = _wide(xb)
            _sigmoid(w, out=o)
            o *= w

        _into(out, compute)

    return _rowwise(block, _out(x.shape, x.dtype), x)


def _swiglu(h):
    """silu(gate) * up for h = [gate | up] along the last axis (SwiGLU's two projections, one matmul)."""
    f = h.shape[-1] // 2

    def block(out, hb):
        def compute(o):
            w = _wide(hb)
            gate = w[..., :f]
            _sigmoid(gate, out=o)
            o *= gate
            o *= w[..., f:]

        _into(out, compute)

    return _rowwise(block, _out(h.shape[:-1] + (f,), h.dtype), h, inner=1)


def _swiglu_backward(h, g):
    """The gradient shaped like h: d gate = g * up * silu'(gate), d up = g * silu(gate)."""
    f = h.shape[-1] // 2

    def block(out, hb, gb):
        def compute(o):
            w, gw = _wide(hb), _wide(gb)
            gate, up = w[..., :f], w[..., f:]
            dgate, dup = o[..., :f], o[..., f:]
            s = _sigmoid(gate, out=dup)
            np.subtract(1.0, s, out=dgate)  # silu' = s * (1 + gate * (1 - s))
            dgate *= gate
            dgate += 1.0
            dgate *= s
            dgate *= up
            dgate *= gw
            dup *= gate
            dup *= gw

        _into(out, compute)

    return _rowwise(block, _out(h.shape, h.dtype), h, g, inner=1)


def _silu_backward(x, g):
    # d/dx x*s(x) = s * (1 + x * (1 - s)), computed in place
    def block(out, xb, gb):
        def compute(o):
            w = _wide(xb)
            s = _sigmoid(w, out=o)
            d = np.subtract(1.0, s, dtype=s.dtype)
            d *= w
            d += 1.0
            s *= d
            s *= _wide(gb)

        _into(out, compute)

    return _rowwise(block, _out(x.shape, x.dtype), x, g)


KERNELS = {
    "gelu": _gelu,
    "gelu_backward": _gelu_backward,
    "silu": _silu,
    "silu_backward": _silu_backward,
    "swiglu": _swiglu,
    "swiglu_backward": _swiglu_backward,
}
