"""Autocast's state and op policy: which dtype each op computes in inside `gradcraft.autocast`.

PyTorch's autocast sits at the dispatcher: every op on a tensor of an autocast-enabled device type
casts its floating-point inputs per a fixed policy before it runs, and the ops it runs internally
are not cast again. gradcraft does the same at the top of each listed op's public function:

    def exp(x):
        if policy.state.on:
            return policy.call("exp", exp, (x,), {})
        ...

`state.on` is a thread-local bool, so with autocast off an op pays one attribute read. `call`
casts the inputs (a `cast` node each, so gradients flow back through the casts in the parameters'
own dtype), then runs the op with autocast suspended on this thread: its internal ops (a mean built
from sum, attention built from matmuls) are not cast again, as PyTorch's inner ops are not. The
backward pass runs with autocast suspended too (gradcraft/autograd.py): each gradient is computed
in the dtype its forward op used.

The policy, per device type, as PyTorch's (aten/src/ATen/autocast_mode.h; the CUDA lists are the
"Autocast Op Reference" of PyTorch's AMP documentation; the CPU lists what PyTorch's CPU autocast
does, checked against it op by op in tests/test_autocast.py):
- "lower": floating inputs cast to the autocast dtype (matmuls, linear, attention; gradcraft's
  linear_cross_entropy too: its product in the lower dtype, its loss in float32 as always).
- "fp32": floating inputs of a lower precision cast to float32 (losses, and on CUDA softmax, the
  norms, exp/log/pow and the sum-like reductions).
- "promote": floating inputs cast to the widest of their dtypes.
- "banned": refused under autocast (binary_cross_entropy on CUDA: use the logits form).
An op called with an explicit dtype= is not autocast (it computes in the dtype asked for). float64
tensors and integer tensors are never cast.
"""

from __future__ import annotations

import threading

from gradcraft import dtypes

_LOWER_CPU = (
    "matmul mm bmm linear linear_cross_entropy addmm baddbmm einsum scaled_dot_product_attention"
    " conv1d conv2d conv3d prelu"
)
_FP32_CPU = (
    "prod mse_loss nll_loss cross_entropy l1_loss smooth_l1_loss huber_loss binary_cross_entropy"
    " binary_cross_entropy_with_logits kl_div cosine_embedding_loss margin_ranking_loss cdist"
)
_PROMOTE_CPU = "cat stack index_copy"
_LOWER_CUDA = (
    "matmul mm bmm mv linear linear_cross_entropy addmm addmv addr baddbmm addbmm einsum scaled_dot_product_attention"
    " conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d prelu chain_matmul multi_dot"
)
_FP32_CUDA = (
    "acos asin cosh sinh tan erfinv exp expm1 log log10 log1p log2 pow reciprocal rsqrt"
    " softmax softmin log_softmax layer_norm group_norm rms_norm norm normalize renorm cosine_similarity"
    " sum prod cumsum cumprod dist cdist pdist softplus binary_cross_entropy_with_logits cross_entropy nll_loss"
    " mse_loss l1_loss smooth_l1_loss kl_div hinge_embedding_loss margin_ranking_loss multilabel_margin_loss"
    " multi_margin_loss poisson_nll_loss soft_margin_loss triplet_margin_loss cosine_embedding_loss"
)
_PROMOTE_CUDA = "addcdiv addcmul atan2 bilinear cross dot grid_sampler index_put scatter_add tensordot"


def _table(lower: str, fp32: str, promote: str, banned: str = "") -> dict:
    rules = {}
    for rule, names in (("lower", lower), ("fp32", fp32), ("promote", promote), ("banned", banned)):
        rules.update(dict.fromkeys(names.split(), rule))
    return rules


POLICY = {
    "cpu": _table(_LOWER_CPU, _FP32_CPU, _PROMOTE_CPU),
    "cuda": _table(_LOWER_CUDA, _FP32_CUDA, _PROMOTE_CUDA, "binary_cross_entropy"),
}
DEVICE_TYPES = tuple(POLICY)
SUPPORTED_DTYPES = (dtypes.bfloat16, dtypes.float16)
_ELIGIBLE = (dtypes.float32, dtypes.bfloat16, dtypes.float16)
_BANNED = (
    "{op} is unsafe to autocast: its float16 inputs lose precision. Compute it on logits with "
    "binary_cross_entropy_with_logits (BCEWithLogitsLoss), or run it outside autocast with float32 inputs"
)


class _State(threading.local):
    """This thread's autocast settings: per device type, enabled and the lower dtype."""

    on = False  # some device type's autocast is enabled here and not suspended: the ops' one check

    def __init__(self):
        self.enabled = dict.fromkeys(DEVICE_TYPES, False)
        self.dtype = {"cpu": dtypes.bfloat16, "cuda": dtypes.float16}  # PyTorch's defaults
        self.cache_enabled = True
        self.nesting = 0
        self.suspended = 0

    def refresh(self) -> None:
        self.on = not self.suspended and any(self.enabled.values())

    def key(self) -> tuple:
        """The settings as a hashable value (part of a compiled step's signature)."""
        return (self.on, tuple(sorted(self.enabled.items())), tuple((k, v.name) for k, v in sorted(self.dtype.items())))


state = _State()


def device_type(device: str) -> str:
    kind = str(device).split(":")[0]
    if kind not in POLICY:
        raise RuntimeError(f"User specified an unsupported autocast device_type '{device}'")
    return kind


def _cast_one(t, rule: str, target):
    if getattr(t, "dtype", None) not in _ELIGIBLE or not hasattr(t, "shape"):
        return t  # numbers, integer and bool tensors, float64
    dtype = target if rule != "fp32" else dtypes.float32
    return t if t.dtype == dtype else t.to(dtype)


def _tensors(args, kwargs):
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, (list, tuple)):
            yield from (x for x in a if hasattr(x, "device"))
        elif hasattr(a, "device") and hasattr(a, "dtype"):
            yield a


def cast_inputs(op: str, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """args and kwargs with their floating tensors cast per op's rule (unchanged where none applies)."""
    first = next(_tensors(args, kwargs), None)
    if first is None or kwargs.get("dtype") is not None:
        return args, kwargs
    kind = str(first.device).split(":")[0]
    if not state.enabled.get(kind):
        return args, kwargs
    rule = POLICY[kind].get(op)
    if rule is None:
        return args, kwargs
    if rule == "banned":
        raise RuntimeError(_BANNED.format(op=op))
    if rule == "fp32" and "dtype" in kwargs:
        # PyTorch's fp32_set_opt_dtype: an op that takes dtype= is asked for float32 instead of given a
        # float32 copy (cross_entropy then reads half-precision logits as they are: no (N, C) copy)
        return (args, {**kwargs, "dtype": dtypes.float32}) if first.dtype in _ELIGIBLE else (args, kwargs)
    target = state.dtype[kind]
    if rule == "promote":
        target = None
        for t in _tensors(args, kwargs):
            if t.dtype in _ELIGIBLE:
                target = t.dtype if target is None else dtypes.promote_types(target, t.dtype)
        if target is None:
            return args, kwargs

    def convert(a):
        if isinstance(a, (list, tuple)):
            return type(a)(_cast_one(x, rule, target) for x in a)
        return _cast_one(a, rule, target)

    return tuple(convert(a) for a in args), {k: convert(v) for k, v in kwargs.items()}


def call(op: str, fn, args: tuple, kwargs: dict):
    """fn(*args, **kwargs) with its inputs cast per the policy, autocast suspended while it runs."""
    args, kwargs = cast_inputs(op, args, kwargs)
    with suspended():
        return fn(*args, **kwargs)


class suspended:
    """Autocast off on this thread within the block (an op's insides, the backward pass)."""

    def __enter__(self):
        state.suspended += 1
        state.on = False
        return self

    def __exit__(self, *exc):
        state.suspended -= 1
        state.refresh()
        return False
