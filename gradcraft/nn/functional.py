"""The functional API, named as torch.nn.functional."""

from gradcraft.ops.elementwise import gelu, relu, sigmoid, silu, tanh  # noqa: F401
from gradcraft.ops.movement import pad  # noqa: F401
from gradcraft.ops.nn import (cross_entropy, dropout, embedding, layer_norm, linear,  # noqa: F401
                              linear_cross_entropy, log_softmax, mse_loss, nll_loss, one_hot, rms_norm,
                              rope_frequencies, rotary_embedding, scaled_dot_product_attention, softmax, swiglu)
