"""Compiled C kernels for the CPU backend (kernels.c), with the NumPy kernels as their fallback.

`kernels(reference, empty)` returns the kernel-table entries that replace the NumPy ones of
backend/cpu/<family>.py: each runs the C kernel on float32 arrays of a layout it takes, and hands any other
case (float64, half precision, a mask, a layout it does not take) to the NumPy kernel it replaces,
which stays the reference that tests/test_cpu_native.py checks it against.
"""

import math

import numpy as np

from gradcraft.backend import check_optimizer_state
from gradcraft.backend.cpu.native import linear_cross_entropy, sdpa
from gradcraft.backend.cpu.native.common import _check_targets, _f32, _over_rows, _ptr
from gradcraft.backend.cpu.native.compiler import library, status  # noqa: F401

_F32 = np.dtype(np.float32)
PARTIAL_ROWS = 64  # rows per partial sum of a norm's weight gradient (fixed: results do not depend on threads)


def _norm_params_fit(features: int, *params) -> bool:
    """The C norm kernels read `features` values of each weight/bias: they must hold exactly that."""
    return all(p is None or p.size == features for p in params)


def kernels(reference: dict, empty) -> dict:
    """The native entries of the CPU kernel table ({} without a compiled library). empty(shape,
    dtype) gives an output buffer (the CPU pool's)."""
    lib = library()
    if lib is None:
        return {}

    def silu(x):
        if not _f32(x):
            return reference["silu"](x)
        out = empty(x.shape, _F32)
        _over_rows(lambda a, b: lib.silu_f32(_ptr(x), _ptr(out), a, b), x.size, 1)
        return out

    def silu_backward(x, g):
        if not _f32(x, g) or x.shape != g.shape:
            return reference["silu_backward"](x, g)
        out = empty(x.shape, _F32)
        _over_rows(lambda a, b: lib.silu_backward_f32(_ptr(x), _ptr(g), _ptr(out), a, b), x.size, 1)
        return out

    def gelu(x, approximate="none"):
        if not _f32(x):
            return reference["gelu"](x, approximate)
        out = empty(x.shape, _F32)
        tanh_form = int(approximate == "tanh")
        _over_rows(lambda a, b: lib.gelu_f32(_ptr(x), _ptr(out), tanh_form, a, b), x.size, 1)
        return out

    def gelu_backward(x, g, approximate="none"):
        if not _f32(x, g) or x.shape != g.shape:
            return reference["gelu_backward"](x, g, approximate)
        out = empty(x.shape, _F32)
        tanh_form = int(approximate == "tanh")
        _over_rows(lambda a, b: lib.gelu_backward_f32(_ptr(x), _ptr(g), _ptr(out), tanh_form, a, b), x.size, 1)
        return out

    def last_axis(name, *extra):
        """softmax / log_softmax (forward: (x, axis)) or their gradients ((y, g, axis)) over the last axis;
        `extra` arguments go to the C kernel after the row length."""
        kernel = getattr(lib, f"{name}_f32")

        def run(*args, **kwargs):
            arrays, axis = (args, kwargs["axis"]) if "axis" in kwargs else (args[:-1], args[-1])
            x = arrays[0]
            if (
                not _f32(*arrays)
                or x.ndim == 0
                or axis not in (-1, x.ndim - 1)
                or any(a.shape != x.shape for a in arrays)
            ):
                return reference[name](*arrays, axis=axis)
            n = x.shape[-1]
            out = empty(x.shape, _F32)
            _over_rows(
                lambda a, b: kernel(*[_ptr(v) for v in arrays], _ptr(out), n, *extra, a, b), x.size // max(n, 1), n
            )
            return out

        return run

    def swiglu(h):
        if not _f32(h) or h.ndim == 0 or h.shape[-1] % 2:
            return reference["swiglu"](h)
        features = h.shape[-1] // 2
        out = empty(h.shape[:-1] + (features,), _F32)
        rows = out.size // max(features, 1)
        _over_rows(lambda a, b: lib.swiglu_f32(_ptr(h), _ptr(out), features, a, b), rows, 2 * features)
        return out

    def swiglu_backward(h, g):
        if not _f32(h, g) or h.ndim == 0 or h.shape[-1] % 2 or g.shape != h.shape[:-1] + (h.shape[-1] // 2,):
            return reference["swiglu_backward"](h, g)
        features = h.shape[-1] // 2
        out = empty(h.shape, _F32)
        rows = g.size // max(features, 1)
        _over_rows(
            lambda a, b: lib.swiglu_backward_f32(_ptr(h), _ptr(g), _ptr(out), features, a, b), rows, 2 * features
        )
        return out

    def rms_norm(x, weight, eps, n_dims):
        if not _f32(x, weight) or not _norm_params_fit(math.prod(x.shape[x.ndim - n_dims :]), weight):
            return reference["rms_norm"](x, weight, eps, n_dims)
        features = math.prod(x.shape[x.ndim - n_dims :])
        out = empty(x.shape, _F32)
        _over_rows(
            lambda a, b: lib.rms_norm_f32(_ptr(x), _ptr(weight), _ptr(out), features, eps, a, b),
            x.size // max(features, 1),
            features,
        )
        return out

    def rms_norm_backward(x, weight, g, eps, n_dims):
        if (
            not _f32(x, weight, g)
            or x.shape != g.shape
            or not _norm_params_fit(math.prod(x.shape[x.ndim - n_dims :]), weight)
        ):
            return reference["rms_norm_backward"](x, weight, g, eps, n_dims)
        norm_shape = x.shape[x.ndim - n_dims :]
        features, rows = math.prod(norm_shape), x.size // max(math.prod(norm_shape), 1)
        dx = empty(x.shape, _F32)
        partials = np.zeros((-(-rows // PARTIAL_ROWS), features), _F32)
        _over_rows(
            lambda a, b: lib.rms_norm_backward_f32(
                _ptr(x), _ptr(weight), _ptr(g), _ptr(dx), _ptr(partials), PARTIAL_ROWS, features, eps, a, b
            ),
            rows,
            features,
            PARTIAL_ROWS,
        )
        return dx, _sum_partials(partials, norm_shape, empty)

    def layer_norm(x, weight, bias, eps, n_dims):
        if not _f32(x, weight, bias) or not _norm_params_fit(math.prod(x.shape[x.ndim - n_dims :]), weight, bias):
            return reference["layer_norm"](x, weight, bias, eps, n_dims)
        features = math.prod(x.shape[x.ndim - n_dims :])
        out = empty(x.shape, _F32)
        _over_rows(
            lambda a, b: lib.layer_norm_f32(_ptr(x), _ptr(weight), _ptr(bias), _ptr(out), features, eps, a, b),
            x.size // max(features, 1),
            features,
        )
        return out

    def layer_norm_backward(x, weight, g, eps, n_dims):
        if (
            not _f32(x, weight, g)
            or x.shape != g.shape
            or not _norm_params_fit(math.prod(x.shape[x.ndim - n_dims :]), weight)
        ):
            return reference["layer_norm_backward"](x, weight, g, eps, n_dims)
        norm_shape = x.shape[x.ndim - n_dims :]
        features, rows = math.prod(norm_shape), x.size // max(math.prod(norm_shape), 1)
        dx = empty(x.shape, _F32)
        dweights, dbiases = (np.zeros((-(-rows // PARTIAL_ROWS), features), _F32) for _ in range(2))
        _over_rows(
            lambda a, b: lib.layer_norm_backward_f32(
                _ptr(x),
                _ptr(weight),
                _ptr(g),
                _ptr(dx),
                _ptr(dweights),
                _ptr(dbiases),
                PARTIAL_ROWS,
                features,
                eps,
                a,
                b,
            ),
            rows,
            features,
            PARTIAL_ROWS,
        )
        return dx, _sum_partials(dweights, norm_shape, empty), _sum_partials(dbiases, norm_shape, empty)

    def cross_entropy(logits, target, ignore_index, label_smoothing, valid_classes=None, float_loss=False):
        if not _f32(logits) or logits.ndim != 2:
            return reference["cross_entropy"](logits, target, ignore_index, label_smoothing, valid_classes, float_loss)
        n, width = logits.shape
        classes = width if valid_classes is None else valid_classes
        t = np.ascontiguousarray(target, dtype=np.int64)
        _check_targets(t, classes, ignore_index)
        loss = empty((n,), _F32)
        _over_rows(
            lambda a, b: lib.cross_entropy_f32(
                _ptr(logits), _ptr(t), _ptr(loss), classes, width, ignore_index, label_smoothing, a, b
            ),
            n,
            classes,
        )
        return loss

    def cross_entropy_backward(logits, target, g, ignore_index, label_smoothing, valid_classes=None, float_loss=False):
        if not _f32(logits) or logits.ndim != 2 or g.dtype != _F32:
            return reference["cross_entropy_backward"](logits, target, g, ignore_index, label_smoothing, valid_classes)
        n, width = logits.shape
        classes = width if valid_classes is None else valid_classes
        t = np.ascontiguousarray(target, dtype=np.int64)
        _check_targets(t, classes, ignore_index)
        gs = np.ascontiguousarray(np.broadcast_to(g, (n,)))  # (often a broadcast scalar: the mean's gradient)
        out = empty(logits.shape, _F32)
        _over_rows(
            lambda a, b: lib.cross_entropy_backward_f32(
                _ptr(logits), _ptr(t), _ptr(gs), _ptr(out), classes, width, ignore_index, label_smoothing, a, b
            ),
            n,
            width,
        )
        return out

    def masked_softmax(scores, mask=None, *, scale, causal, window):
        if mask is not None or not _f32(scores) or scores.ndim < 2:
            return reference["masked_softmax"](scores, mask, scale=scale, causal=causal, window=window)
        T, S = scores.shape[-2:]
        out = empty(scores.shape, _F32)
        _over_rows(
            lambda a, b: lib.masked_softmax_f32(
                _ptr(scores), _ptr(out), T, S, scale, int(bool(causal)), window or 0, a, b
            ),
            scores.size // max(T * S, 1),
            T * S,
        )
        return out

    def masked_softmax_backward(p, g, *, scale):
        if not _f32(p, g) or p.shape != g.shape:
            return reference["masked_softmax_backward"](p, g, scale=scale)
        S = p.shape[-1]
        out = empty(p.shape, _F32)
        _over_rows(
            lambda a, b: lib.softmax_backward_f32(_ptr(p), _ptr(g), _ptr(out), S, scale, a, b), p.size // max(S, 1), S
        )
        return out

    def rope(x, cos, sin, inverse):
        if x.dtype != _F32 or not 2 <= x.ndim <= 4 or x.shape[-1] % 2:
            return reference["rope"](x, cos, sin, inverse)
        view = x.reshape((1,) * (4 - x.ndim) + x.shape) if x.ndim < 4 else x
        N, H, T, D = view.shape
        strides = np.array([s // 4 for s in view.strides], np.int64)  # in elements
        c = np.ascontiguousarray(cos, dtype=_F32)
        s = np.ascontiguousarray(sin, dtype=_F32)
        out = empty(x.shape, _F32)
        _over_rows(
            lambda a, b: lib.rope_f32(
                _ptr(view), _ptr(strides), _ptr(c), _ptr(s), _ptr(out), H, T, D, int(bool(inverse)), a, b
            ),
            N,
            H * T * D,
        )
        return out

    return {
        "gelu": gelu,
        "gelu_backward": gelu_backward,
        "softmax": last_axis("softmax"),
        "softmax_backward": last_axis("softmax_backward", 1.0),
        "log_softmax": last_axis("log_softmax"),
        "log_softmax_backward": last_axis("log_softmax_backward"),
        "silu": silu,
        "silu_backward": silu_backward,
        "swiglu": swiglu,
        "swiglu_backward": swiglu_backward,
        "rms_norm": rms_norm,
        "rms_norm_backward": rms_norm_backward,
        "layer_norm": layer_norm,
        "layer_norm_backward": layer_norm_backward,
        "cross_entropy": cross_entropy,
        "cross_entropy_backward": cross_entropy_backward,
        "masked_softmax": masked_softmax,
        "masked_softmax_backward": masked_softmax_backward,
        "rope": rope,
        **sdpa.kernels(lib, reference, empty),
        **linear_cross_entropy.kernels(lib, reference, empty),
    }


def _sum_partials(partials, shape, empty):
    out = empty(shape, _F32)
    np.sum(partials, axis=0, out=out.reshape(-1))
    return out


def adamw_update(p, g, m, v, *, scale, step_size, bc2_sqrt, decay, beta1, beta2, eps) -> bool:
    """One parameter's AdamW update in C; False (nothing done) when it needs the NumPy kernel.
    The C kernel walks p.size elements of all four arrays, so sizes are checked first (UserError)."""
    check_optimizer_state([p], [g], [m], [v], "adamw_update")
    lib = library()
    if lib is None or not _f32(p, g, m, v):
        return False
    lib.adamw_f32(_ptr(p), _ptr(g), _ptr(m), _ptr(v), p.size, scale, step_size, bc2_sqrt, decay, beta1, beta2, eps)
    return True
