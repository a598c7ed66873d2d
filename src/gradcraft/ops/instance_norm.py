"""F.instance_norm: each (sample, channel) normalised over its spatial positions. As PyTorch does it,
the batch is folded into the channels, (N, C, ...) -> (1, N*C, ...), and batch_norm runs on that;
the running statistics (when given) move toward the mean over the batch of each channel's statistics."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradcraft.errors import ValueError_
from gradcraft.ops.function import no_grad
from gradcraft.ops.normalization import batch_norm

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


def instance_norm(
    input: Tensor,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    if input.ndim < 3:
        raise ValueError_(
            f"instance_norm: expected an input of at least 3 dimensions (N, C, ...), got shape {input.shape}"
        )
    if use_input_stats:
        spatial = input.numel() // max(1, input.shape[0] * input.shape[1])
        if spatial <= 1:
            raise ValueError_(f"Expected more than 1 spatial element when training, got input size {list(input.shape)}")
    n, c = input.shape[:2]
    folded = input.reshape(1, n * c, *input.shape[2:])

    def repeated(t):
        return None if t is None else t.repeat(n)

    rm, rv = repeated(running_mean), repeated(running_var)
    out = batch_norm(folded, rm, rv, repeated(weight), repeated(bias), use_input_stats, momentum, eps)
    with no_grad():
        if running_mean is not None and use_input_stats:
            running_mean.copy_(rm.reshape(n, c).mean(0))
        if running_var is not None and use_input_stats:
            running_var.copy_(rv.reshape(n, c).mean(0))
    return out.reshape(input.shape)
