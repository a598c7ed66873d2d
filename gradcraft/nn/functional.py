"""The functional API, named as torch.nn.functional."""

from gradcraft.ops.elementwise import gelu, relu, sigmoid, silu, tanh  # noqa: F401
from gradcraft.ops.losses import (binary_cross_entropy, binary_cross_entropy_with_logits,  # noqa: F401
                                  cosine_similarity, elu, huber_loss, l1_loss, leaky_relu, normalize,
                                  smooth_l1_loss, softplus)
from gradcraft.ops.movement import pad  # noqa: F401
from gradcraft.ops.nn import (cross_entropy, dropout, embedding, layer_norm, linear, log_softmax,  # noqa: F401
                              mse_loss, nll_loss, one_hot, rms_norm, rope_frequencies, rotary_embedding,
                              scaled_dot_product_attention, softmax, swiglu)
