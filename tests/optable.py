"""The op table: one row per op, checked against PyTorch by tests/test_ops.py.

Each row names the op, a function `fn(lib, *args)` written once for both
libraries (gradcraft's API uses PyTorch's names, so `lib.F.softmax(x, dim=1)`
means the same thing in both), the sample inputs, and tolerances.

An input spec is one of:
  (2, 3)            a random float tensor of that shape that requires grad
  Pos((2, 3))       the same, with values in [0.5, 1.5] (for log, sqrt, pow, ...)
  Scaled((2, 3), s) the same as (2, 3), times s (tiny or huge rows: where a norm's eps matters or not)
  Values(rows)      a float tensor of exactly these values that requires grad (infinities, huge numbers)
  Ints(high, shape) a constant int64 tensor with values in [0, high)
  Fixed((2, 3))     a random float tensor that is a constant (no gradient)
  Mask((2, 3))      a constant bool tensor
  Const(value)      a plain Python value passed as is
"""

from dataclasses import dataclass, field
from collections.abc import Callable

import numpy as np


@dataclass(frozen=True)
class Pos:
    shape: tuple


@dataclass(frozen=True)
class Scaled:
    shape: tuple
    scale: float


@dataclass(frozen=True)
class Values:
    """A float tensor of exactly these values (nested tuples) that requires grad: the edge cases
    (infinities, huge magnitudes) random inputs never draw."""

    data: tuple

    @property
    def shape(self):
        return np.shape(self.data)


def float_data(spec, rng):
    """The float64 values of a differentiable input spec: (shape), Pos, Scaled or Values."""
    if isinstance(spec, Values):
        return np.array(spec.data, dtype=np.float64)
    if isinstance(spec, Pos):
        return rng.uniform(0.5, 1.5, size=spec.shape)
    if isinstance(spec, Scaled):
        return rng.standard_normal(spec.shape) * spec.scale
    return rng.standard_normal(spec)


def input_shape(spec):
    return spec.shape if isinstance(spec, (Pos, Scaled, Values)) else spec


@dataclass(frozen=True)
class Ints:
    high: int
    shape: tuple


@dataclass(frozen=True)
class Const:
    value: object


@dataclass(frozen=True)
class Fixed:
    """A constant random float tensor (no gradient)."""

    shape: tuple


@dataclass(frozen=True)
class Mask:
    """A constant bool tensor (about half True)."""

    shape: tuple


@dataclass
class OpInfo:
    name: str
    fn: Callable
    samples: list
    grad: bool = True
    rtol32: float = 1e-4
    atol32: float = 1e-5
    rtol64: float = 1e-7
    atol64: float = 1e-9
    noncontiguous: bool = True  # also run with inputs that are strided views
    tags: set = field(default_factory=set)


def unary(name, method, domain=False, **kw):
    shapes = [Pos((3, 4)) if domain else (3, 4), Pos((2, 3, 5)) if domain else (2, 3, 5), Pos(()) if domain else ()]
    return OpInfo(name, lambda m, x: getattr(x, method)(), [(s,) for s in shapes], **kw)


def binary(name, fn, domain=False, **kw):
    a = Pos if domain else (lambda s: s)
    samples = [(a((3, 4)), a((3, 4))), (a((2, 3, 4)), a((4,))), (a((3, 1)), a((1, 5))), (a((2, 1, 3)), a(()))]
    return OpInfo(name, fn, samples, **kw)


def _sdpa(m, q, k, v, **kw):
    return m.F.scaled_dot_product_attention(q, k, v, **kw)


def _rope(m, x, cos, sin):
    if m.name == "gradcraft":
        return m.F.rotary_embedding(x, cos, sin)
    # The reference: rotate-half RoPE written out in torch.
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return m.T.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def _causal_fewer_queries(m, q, k, v):
    """Causal attention of T queries over S >= T keys, the queries being the last T positions (a
    KV cache): gradcraft's is_causal; for torch (whose is_causal aligns to the first keys) a mask."""
    if m.name == "gradcraft":
        return _sdpa(m, q, k, v, is_causal=True)
    T, S = q.shape[-2], k.shape[-2]
    i = m.T.arange(T).reshape(T, 1)
    j = m.T.arange(S).reshape(1, S)
    return _sdpa(m, q, k, v, attn_mask=j <= i + S - T)


def _window_mask(m, T, w):
    i = m.T.arange(T).reshape(T, 1)
    j = m.T.arange(T).reshape(1, T)
    return (j <= i) & (j > i - w)


INF = float("inf")

OPS = [
    # ---- unary
    unary("neg", "neg"),
    unary("exp", "exp"),
    unary("log", "log", domain=True),
    unary("sqrt", "sqrt", domain=True),
    unary("rsqrt", "rsqrt", domain=True),
    unary("abs", "abs"),
    unary("sin", "sin"),
    unary("cos", "cos"),
    unary("tanh", "tanh"),
    unary("sigmoid", "sigmoid"),
    unary("relu", "relu"),
    OpInfo("gelu", lambda m, x: m.F.gelu(x), [((3, 4),), ((2, 3, 5),)]),
    OpInfo("gelu_tanh", lambda m, x: m.F.gelu(x, approximate="tanh"), [((3, 4),), ((2, 3, 5),)]),
    OpInfo("silu", lambda m, x: m.F.silu(x), [((3, 4),), ((2, 3, 5),), ((),)]),
    OpInfo(
        "swiglu",
        lambda m, x: (
            m.F.swiglu(x)
            if m.name == "gradcraft"
            else m.F.silu(x[..., : x.shape[-1] // 2]) * x[..., x.shape[-1] // 2 :]
        ),
        [((3, 8),), ((2, 3, 10),), ((6,),)],
    ),
    OpInfo("square", lambda m, x: x.square(), [((3, 4),)]),
    OpInfo("reciprocal", lambda m, x: x.reciprocal(), [(Pos((3, 4)),)]),
    # ---- binary (broadcasting)
    binary("add", lambda m, a, b: a + b),
    binary("sub", lambda m, a, b: a - b),
    binary("mul", lambda m, a, b: a * b),
    binary("div", lambda m, a, b: a / b, domain=True),
    binary("pow", lambda m, a, b: a**b, domain=True),
    binary("maximum", lambda m, a, b: m.T.maximum(a, b)),
    binary("minimum", lambda m, a, b: m.T.minimum(a, b)),
    binary("logaddexp", lambda m, a, b: m.T.logaddexp(a, b)),
    OpInfo(
        "logaddexp_extremes",  # equal infinities (NaN gradients, as in PyTorch), one side -inf, huge, far apart
        lambda m, a, b: a.logaddexp(b),
        [
            (
                Values(((-INF, -INF, INF, INF, 0.0), (1e30, -1e30, 80.0, 3.0, 1e-3))),
                Values(((-INF, 0.0, INF, -INF, -INF), (1e30, 5.0, -80.0, 3.0, -1e-3))),
            )
        ],
    ),
    OpInfo(
        "logaddexp_out",
        lambda m, a, b: m.T.logaddexp(a, b, out=m.T.empty(0, dtype=a.dtype)),
        [(Fixed((3, 4)), Fixed((4,)))],
        grad=False,
    ),
    # ---- inverse trigonometric / hyperbolic, sinh, cosh, hypot, atan2 (gradcraft/ops/trig.py)
    *(
        OpInfo(name, lambda m, x, name=name: getattr(m.T, name)(x), [(Scaled((3, 4), 0.3),), (Scaled((2, 1, 3), 0.3),)])
        for name in ("asin", "acos", "atan", "asinh", "atanh", "sinh", "cosh")
    ),
    OpInfo("acosh", lambda m, x: x.acosh(), [(Pos((3, 4)),), (Values((1.5, 3.0, 40.0)),)]),
    OpInfo(
        "inverse_trig_edges",  # the poles (infinite gradients), outside the domain (NaN), 0, infinities
        lambda m, x: m.T.stack([x.asin(), x.acos(), x.atan(), x.asinh(), x.arccosh(), x.atanh(), x.sinh(), x.cosh()]),
        [(Values((-1.0, 1.0, 0.0, 2.0, -3.0, INF, -INF, 1e-30, 60.0)),)],
    ),
    binary("atan2", lambda m, a, b: m.T.atan2(a, b)),
    binary("hypot", lambda m, a, b: m.T.hypot(a, b)),
    OpInfo(
        "atan2_hypot_edges",  # the origin (NaN gradients), signed zeros, axes, huge and tiny values, infinities
        lambda m, a, b: m.T.stack([a.arctan2(b), a.hypot(b)]),
        [
            (
                Values((0.0, 0.0, -0.0, 1.0, -1.0, 0.0, 1e30, 1e-15, INF, 2.0)),
                Values((0.0, -0.0, -1.0, 0.0, 0.0, -2.0, 1e30, 3e-15, 1.0, -INF)),
            )
        ],
    ),
    OpInfo(
        "trig_out_inplace",
        lambda m, a, b: m.T.stack(
            [m.T.arcsin(a, out=m.T.empty(0, dtype=a.dtype)), m.T.hypot(a, b, out=m.T.empty(0)), a.clone().atan2_(b)]
        ),
        [(Fixed((3, 4)), Fixed((3, 4)))],
        grad=False,
    ),
    OpInfo("trig_inplace_grad", lambda m, x: (x * 0.5).asin_().sinh_() + (x * 1.0).atan2_(x + 2.0), [((3, 4),)]),
    # ---- matrices (gradcraft/ops/linalg_solve.py): inverse, determinants, solve, Cholesky; batched
    OpInfo("linalg_inv", lambda m, a: m.T.linalg.inv(a), [((3, 3),), ((2, 4, 4),)], rtol32=1e-3, atol32=1e-4),
    OpInfo(
        "linalg_det_slogdet_logdet",
        lambda m, a: m.T.stack([m.T.linalg.det(a), *m.T.linalg.slogdet(a), m.T.logdet(a @ a.mT), a.det()]),
        [((2, 3, 3),), ((1, 1),)],
        rtol32=1e-3,
        atol32=1e-4,
    ),
    OpInfo(
        "linalg_solve",
        lambda m, a, b, v: m.T.cat(
            [
                x.reshape(-1)
                for x in (m.T.linalg.solve(a, b), m.T.linalg.solve(a, b, left=False), m.T.linalg.solve(a, v))
            ]
        ),
        [((2, 3, 3), (2, 3, 3), (3,)), ((3, 3), (2, 3, 3), (3, 1)), ((2, 3, 3), (3, 3), (2, 3))],
        rtol32=1e-3,
        atol32=1e-4,
    ),
    OpInfo(
        "linalg_cholesky",  # (of a symmetric positive-definite matrix made from the input)
        lambda m, x: (
            m.T.linalg.cholesky(x @ x.mT + 3 * m.T.eye(x.shape[-1], device=x.device))
            + m.T.linalg.cholesky(x @ x.mT + 2 * m.T.eye(x.shape[-1], device=x.device), upper=True)
        ),
        [((3, 3),), ((2, 4, 4),)],
        rtol32=1e-3,
        atol32=1e-4,
    ),
    OpInfo("scalar_ops", lambda m, x: (2.0 - x) * 3 / (x + 4) + x**2 - 1.5**x, [((3, 4),)]),
    OpInfo(
        "compare",
        lambda m, a, b: (
            (a < b).float()
            + (a >= b).float() * 2
            + (a == a).float()
            + (a != b).float()
            + (a > 0.1).float()
            + (a <= b).float()
        ),
        [((3, 4), (3, 4)), ((2, 3), (3,))],
        grad=False,
    ),
    OpInfo(
        "where", lambda m, c, a, b: m.T.where(c, a, b), [(Mask((3, 4)), (3, 4), (3, 4)), (Mask((3, 1)), (1, 4), (3, 4))]
    ),
    OpInfo("masked_fill", lambda m, x, c: x.masked_fill(c, -2.5), [((3, 4), Mask((3, 4))), ((2, 3), Mask((3,)))]),
    OpInfo("clamp", lambda m, x: x.clamp(-0.5, 0.7), [((3, 4),), ((5,),)]),
    OpInfo("clamp_min", lambda m, x: x.clamp(min=0.1), [((3, 4),)]),
    # ---- reductions
    OpInfo("sum", lambda m, x: x.sum(), [((3, 4),), ((2, 3, 4),)]),
    OpInfo("sum_dim", lambda m, x: x.sum(1), [((3, 4),), ((2, 3, 4),)]),
    OpInfo("sum_dims_keepdim", lambda m, x: x.sum((0, 2), keepdim=True), [((2, 3, 4),)]),
    OpInfo("mean", lambda m, x: x.mean(-1), [((3, 4),), ((2, 3, 4),)]),
    OpInfo("mean_all", lambda m, x: x.mean(), [((3, 4),)]),
    OpInfo("amax", lambda m, x: x.amax(1), [((3, 4),), ((2, 3, 4),)]),
    OpInfo("amin_keepdim", lambda m, x: x.amin(-1, keepdim=True), [((3, 4),)]),
    OpInfo("max_all", lambda m, x: x.max(), [((3, 4),)]),
    OpInfo("max_dim", lambda m, x: x.max(1).values, [((3, 4),), ((2, 5, 3),)]),
    OpInfo("min_dim_keepdim", lambda m, x: x.min(0, keepdim=True).values, [((3, 4),)]),
    OpInfo("var", lambda m, x: x.var(1), [((3, 4),), ((2, 3, 4),)]),
    OpInfo("var_biased", lambda m, x: x.var(-1, unbiased=False, keepdim=True), [((3, 4),)]),
    OpInfo("var_correction", lambda m, x: x.var(dim=(0, 1), correction=0), [((2, 3, 4),)]),
    OpInfo("std", lambda m, x: x.std(0), [((3, 4),)]),
    OpInfo("logsumexp", lambda m, x: x.logsumexp(-1), [((3, 4),), ((2, 3, 4),)]),
    OpInfo("logsumexp_dims", lambda m, x: x.logsumexp((0, 2), keepdim=True), [((2, 3, 4),)]),
    OpInfo("argmax", lambda m, x: x.argmax(1), [((3, 4),), ((2, 3, 4),)], grad=False),
    OpInfo("argmax_all", lambda m, x: x.argmax(), [((3, 4),)], grad=False),
    OpInfo("argmin", lambda m, x: x.argmin(-1, keepdim=True), [((3, 4),)], grad=False),
    OpInfo("cumsum", lambda m, x: x.cumsum(1), [((3, 4),), ((2, 3, 4),)]),
    OpInfo("topk_values", lambda m, x: x.topk(2, dim=-1).values, [((3, 5),), ((2, 4, 3),)]),
    OpInfo("topk_indices", lambda m, x: x.topk(3, dim=0, largest=False).indices, [((5, 4),)], grad=False),
    # ---- matmul
    OpInfo(
        "matmul",
        lambda m, a, b: a @ b,
        [
            ((3, 4), (4, 5)),
            ((2, 3, 4), (4, 5)),
            ((2, 3, 4), (2, 4, 5)),
            ((2, 1, 3, 4), (3, 4, 2)),
            ((4,), (4, 5)),
            ((3, 4), (4,)),
        ],
        rtol32=2e-4,
    ),
    OpInfo("linear", lambda m, x, w, b: m.F.linear(x, w, b), [((2, 3, 4), (5, 4), (5,))], rtol32=2e-4),
    # ---- movement
    OpInfo("reshape", lambda m, x: x.reshape(4, -1) * 1.0, [((2, 3, 4),)]),
    OpInfo("view_flatten", lambda m, x: x.flatten(1) * 1.0, [((2, 3, 4),)]),
    OpInfo("permute", lambda m, x: x.permute(2, 0, 1) * 1.0, [((2, 3, 4),)]),
    OpInfo("transpose", lambda m, x: x.transpose(0, 1) @ x, [((3, 4),)]),
    OpInfo("T", lambda m, x: x.T * 1.0, [((3, 4),)]),
    OpInfo("expand", lambda m, x: x.expand(2, 3, 4) * 1.0, [((3, 1),), ((1, 4),)]),
    OpInfo("squeeze_unsqueeze", lambda m, x: x.unsqueeze(1).squeeze(0).unsqueeze(-1) * 2.0, [((1, 3, 4),)]),
    OpInfo("getitem_int_slice", lambda m, x: x[1, ::2] * 1.0, [((3, 5),), ((3, 4, 2),)]),
    OpInfo("getitem_steps", lambda m, x: x[..., 1:4:2, None] * 1.0, [((2, 3, 5),)]),
    OpInfo("getitem_negative", lambda m, x: x[-1, -3:] * 1.0, [((3, 5),)]),
    OpInfo("getitem_gather", lambda m, x, i: x[i] * 1.0, [((5, 3), Ints(5, (4,))), ((5, 3), Ints(5, (2, 3)))]),
    OpInfo("getitem_gather_mixed", lambda m, x, i, j: x[:, i, j] * 1.0, [((2, 4, 5), Ints(4, (3,)), Ints(5, (3,)))]),
    OpInfo("slices_tiling_an_axis", lambda m, x: x[..., :3] * x[..., 3:6] + x[..., 6:], [((4, 9),), ((2, 4, 9),)]),
    OpInfo("slices_overlapping", lambda m, x: x[:, :4] * 2 + x[:, 2:6] + x[1:, ::2][:, :2].sum(), [((3, 6),)]),
    OpInfo("gather", lambda m, x, i: x.gather(1, i), [((3, 5), Ints(5, (3, 2)))]),
    OpInfo("cat", lambda m, a, b: m.T.cat([a, b], dim=1), [((2, 3), (2, 4)), ((2, 1, 3), (2, 2, 3))]),
    OpInfo("stack", lambda m, a, b: m.T.stack([a, b], dim=-1), [((2, 3), (2, 3))]),
    OpInfo("split", lambda m, x: x.split(2, dim=1)[1] * 2 + x.split([1, 4], dim=1)[0].sum(), [((3, 5),)]),
    OpInfo("chunk", lambda m, x: x.chunk(3, dim=0)[2] * 3.0, [((7, 2),)]),
    OpInfo("pad", lambda m, x: m.F.pad(x, (1, 2, 0, 1), value=0.5), [((3, 4),), ((2, 3, 4),)]),
    OpInfo("tril", lambda m, x: x.tril(), [((4, 4),), ((2, 3, 5),)]),
    OpInfo("triu", lambda m, x: x.triu(1), [((4, 4),)]),
    OpInfo("flip", lambda m, x: x.flip(0, 1) * 1.0, [((3, 4),)]),
    OpInfo("repeat", lambda m, x: x.repeat(2, 1, 3), [((3, 2),)]),
    OpInfo("repeat_interleave", lambda m, x: x.repeat_interleave(2, dim=1), [((2, 3, 2),)]),
    OpInfo("one_hot", lambda m, i: m.F.one_hot(i, 6), [(Ints(6, (2, 3)),)], grad=False),
    OpInfo("cast_roundtrip", lambda m, x: x.double().float() * 2.0, [((3, 4),)]),
    # ---- fused NN ops
    OpInfo("softmax", lambda m, x: m.F.softmax(x, dim=-1), [((3, 5),), ((2, 3, 4),)]),
    OpInfo("softmax_dim0", lambda m, x: x.softmax(0), [((3, 5),)]),
    OpInfo("log_softmax", lambda m, x: m.F.log_softmax(x, dim=1), [((3, 5),), ((2, 3, 4),)]),
    OpInfo("cross_entropy", lambda m, x, t: m.F.cross_entropy(x, t), [((4, 7), Ints(7, (4,)))]),
    OpInfo(
        "cross_entropy_sum_smooth",
        lambda m, x, t: m.F.cross_entropy(x, t, reduction="sum", label_smoothing=0.1),
        [((5, 6), Ints(6, (5,)))],
    ),
    OpInfo(
        "cross_entropy_none_ignore",
        lambda m, x, t: m.F.cross_entropy(x, t.masked_fill(t == 0, -100), reduction="none"),
        [((6, 4), Ints(4, (6,)))],
    ),
    OpInfo(
        "cross_entropy_mean_ignore_smooth",
        lambda m, x, t: m.F.cross_entropy(x, t.masked_fill(t == 1, 3), ignore_index=3, label_smoothing=0.2),
        [((6, 4), Ints(4, (6,)))],
    ),
    OpInfo("cross_entropy_nd", lambda m, x, t: m.F.cross_entropy(x, t), [((2, 5, 3), Ints(5, (2, 3)))]),
    OpInfo(
        "layer_norm", lambda m, x, w, b: m.F.layer_norm(x, (5,), w, b), [((3, 5), (5,), (5,)), ((2, 3, 5), (5,), (5,))]
    ),
    OpInfo("layer_norm_noaffine_2d", lambda m, x: m.F.layer_norm(x, (3, 4), eps=1e-3), [((2, 3, 4),)]),
    OpInfo("rms_norm", lambda m, x, w: m.F.rms_norm(x, (5,), w, eps=1e-6), [((3, 5), (5,)), ((2, 3, 5), (5,))]),
    # rows whose mean square is near eps (there eps changes the result by a third) and far above it
    OpInfo(
        "rms_norm_tiny_rows",
        lambda m, x, w: m.F.rms_norm(x, (6,), w, eps=1e-5),
        [(Scaled((4, 6), 2e-3), (6,)), (Scaled((2, 3, 6), 3e-3), Const(None))],
    ),
    OpInfo("rms_norm_huge_rows", lambda m, x, w: m.F.rms_norm(x, (6,), w, eps=1e-5), [(Scaled((4, 6), 1e3), (6,))]),
    OpInfo(
        "layer_norm_tiny_rows",
        lambda m, x, w, b: m.F.layer_norm(x, (6,), w, b, eps=1e-5),
        [(Scaled((4, 6), 3e-3), (6,), (6,))],
    ),
    OpInfo("layer_norm_tiny_rows_noaffine", lambda m, x: m.F.layer_norm(x, (6,), eps=1e-4), [(Scaled((3, 6), 1e-2),)]),
    OpInfo(
        "layer_norm_huge_rows",
        lambda m, x, w, b: m.F.layer_norm(x, (6,), w, b, eps=1e-5),
        [(Scaled((4, 6), 1e3), (6,), (6,))],
    ),
    OpInfo("embedding", lambda m, i, w: m.F.embedding(i, w), [(Ints(7, (2, 5)), (7, 3)), (Ints(4, (6,)), (4, 2))]),
    OpInfo("rope", _rope, [((2, 3, 4, 6), (4, 3), (4, 3))], tags={"const_inputs_1_2"}),
    OpInfo("sdpa", lambda m, q, k, v: _sdpa(m, q, k, v), [((2, 2, 4, 3), (2, 2, 4, 3), (2, 2, 4, 3))]),
    OpInfo(
        "sdpa_causal",
        lambda m, q, k, v: _sdpa(m, q, k, v, is_causal=True),
        [((1, 3, 5, 4), (1, 3, 5, 4), (1, 3, 5, 2))],
    ),
    OpInfo(
        "sdpa_causal_fewer_queries",
        _causal_fewer_queries,
        [((1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4)), ((2, 2, 1, 4), (2, 2, 6, 4), (2, 2, 6, 3))],
    ),
    OpInfo(
        "sdpa_gqa",
        lambda m, q, k, v: _sdpa(m, q, k, v, is_causal=True, enable_gqa=True),
        [((2, 4, 5, 3), (2, 2, 5, 3), (2, 2, 5, 3))],
    ),
    OpInfo(
        "sdpa_mask_scale",
        lambda m, q, k, v, mask: _sdpa(m, q, k, v, attn_mask=mask, scale=0.3),
        [((1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4), Fixed((1, 1, 3, 5)))],
    ),
    OpInfo(
        "sdpa_window",
        lambda m, q, k, v: (
            _sdpa(m, q, k, v, window=2, is_causal=True)
            if m.name == "gradcraft"
            else _sdpa(m, q, k, v, attn_mask=_window_mask(m, 6, 2))
        ),
        [((1, 2, 6, 4), (1, 2, 6, 4), (1, 2, 6, 4))],
    ),
    OpInfo(
        "sdpa_saved_weights_gqa_causal",
        lambda m, q, k, v: _sdpa(
            m, q, k, v, is_causal=True, enable_gqa=True, **({"save_weights": True} if m.name == "gradcraft" else {})
        ),
        [((2, 4, 5, 3), (2, 2, 5, 3), (2, 2, 5, 3))],
    ),
    OpInfo(
        "sdpa_saved_weights_mask",
        lambda m, q, k, v, mask: _sdpa(
            m, q, k, v, attn_mask=mask, scale=0.3, **({"save_weights": True} if m.name == "gradcraft" else {})
        ),
        [((1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4), Fixed((1, 1, 3, 5)))],
    ),
    OpInfo(
        "sdpa_saved_weights_window",
        lambda m, q, k, v: (
            _sdpa(m, q, k, v, window=2, is_causal=True, save_weights=True)
            if m.name == "gradcraft"
            else _sdpa(m, q, k, v, attn_mask=_window_mask(m, 6, 2))
        ),
        [((1, 2, 6, 4), (1, 2, 6, 4), (1, 2, 6, 4))],
    ),
    OpInfo("mse_loss", lambda m, a, b: m.F.mse_loss(a, b), [((3, 4), (3, 4))]),
]
