"""The functional API, named as torch.nn.functional."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

from gradcraft.ops import losses as _losses
from gradcraft.ops import nn as _nn
from gradcraft.ops.elementwise import gelu, relu as _relu, sigmoid, silu as _silu, tanh  # noqa: F401
from gradcraft.ops.losses import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,  # noqa: F401
    cosine_similarity,
    huber_loss,
    l1_loss,
    normalize,
    smooth_l1_loss,
    softplus,
)
from gradcraft.ops.kv_cache import kv_cache_attention, kv_cache_write  # noqa: F401
from gradcraft.ops.kl_div import kl_div  # noqa: F401
from gradcraft.ops.moe import moe_permute, moe_unpermute  # noqa: F401
from gradcraft.ops.sampling import greedy_advance, sample_tokens  # noqa: F401

from gradcraft.ops.movement import pad  # noqa: F401
from gradcraft.ops.cross_entropy import cross_entropy, linear_cross_entropy, mse_loss, nll_loss  # noqa: F401
from gradcraft.ops.nn import (
    embedding,
    layer_norm,
    linear,
    norm_linear,
    log_softmax,
    one_hot,
    rms_norm,
    rope_frequencies,
    rotary_embedding,
    scaled_dot_product_attention,
    softmax,
    swiglu,
)


def _maybe_inplace(input, result, inplace: bool):
    """PyTorch's `inplace=True`: the result written into input (gradcraft/ops/inplace.py)."""
    if not inplace:
        return result
    from gradcraft.ops.inplace import write

    return write(input, result)


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    return _maybe_inplace(input, _relu(input), inplace)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    return _maybe_inplace(input, _losses.leaky_relu(input, negative_slope), inplace)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    return _maybe_inplace(input, _losses.elu(input, alpha), inplace)


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    return _maybe_inplace(input, _silu(input), inplace)


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    return _maybe_inplace(input, _nn.dropout(input, p, training), inplace)


# ---------------------------------------------------------------- convolution, pooling, normalisation
from gradcraft.ops.conv import conv1d, conv2d, conv_transpose1d, conv_transpose2d  # noqa: E402, F401
from gradcraft.ops.normalization import batch_norm, group_norm  # noqa: E402, F401
from gradcraft.ops.pooling import (  # noqa: E402, F401
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_max_pool1d,
    adaptive_max_pool2d,
    avg_pool1d,
    avg_pool2d,
    max_pool1d,
    max_pool2d,
)


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    from gradcraft.ops.normalization import dropout1d as _dropout1d

    return _maybe_inplace(input, _dropout1d(input, p, training), inplace)


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    from gradcraft.ops.normalization import dropout2d as _dropout2d

    return _maybe_inplace(input, _dropout2d(input, p, training), inplace)


# ---------------------------------------------------------------- resizing, more activations, losses, padding modes
from gradcraft.nn.upsampling import (  # noqa: E402, F401
    interpolate,
    pixel_shuffle,
    pixel_unshuffle,
    upsample,
    upsample_bilinear,
    upsample_nearest,
)
from gradcraft.nn.extra_layers import embedding_bag, glu, gumbel_softmax, prelu  # noqa: E402, F401
from gradcraft.nn.margin_losses import (  # noqa: E402, F401
    cosine_embedding_loss,
    hinge_embedding_loss,
    margin_ranking_loss,
    multi_margin_loss,
    multilabel_soft_margin_loss,
    soft_margin_loss,
    triplet_margin_loss,
)
from gradcraft.ops.pad_modes import pad  # noqa: E402, F401, F811  (F.pad with 'reflect', 'replicate', 'circular')
from gradcraft.ops.instance_norm import instance_norm  # noqa: E402, F401
from gradcraft.ops.distance import pairwise_distance  # noqa: E402, F401
from gradcraft.ops.activations_more import (  # noqa: E402, F401
    celu,
    hardshrink,
    hardsigmoid,
    hardswish,
    hardtanh,
    logsigmoid,
    mish,
    relu6,
    selu,
    softmin,
    softshrink,
    softsign,
    tanhshrink,
    threshold,
)
from gradcraft.nn.extra_layers import bilinear  # noqa: E402, F401
from gradcraft.nn.fold import fold, unfold  # noqa: E402, F401
from gradcraft.nn.likelihood_losses import gaussian_nll_loss, poisson_nll_loss  # noqa: E402, F401
from gradcraft.nn.grid_sample import affine_grid, grid_sample  # noqa: E402, F401
