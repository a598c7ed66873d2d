"""InstanceNorm1d/2d/3d, as in torch.nn: no affine parameters and no running statistics by default;
with `affine=True` a per-channel weight and bias, with `track_running_stats=True` the running_mean,
running_var and num_batches_tracked buffers (used in eval mode)."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from gradcraft.errors import ValueError_
from gradcraft.nn.normalization import _BatchNorm
from gradcraft.ops.instance_norm import instance_norm
from gradcraft.typing import DTypeLike, Device

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor


class _InstanceNorm(_BatchNorm):
    _spatial = 2

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = False,
        track_running_stats: bool = False,
        device: Device = None,
        dtype: DTypeLike = None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias)

    def forward(self, input: Tensor) -> Tensor:
        if input.ndim not in (self._spatial + 1, self._spatial + 2):
            raise ValueError_(f"expected {self._spatial + 1}D or {self._spatial + 2}D input (got {input.ndim}D input)")
        unbatched = input.ndim == self._spatial + 1
        x = input.unsqueeze(0) if unbatched else input
        if x.shape[1] != self.num_features:
            if self.affine:
                raise ValueError_(
                    f"expected input's size at dim=1 to match num_features ({self.num_features}), "
                    f"but got: {x.shape[1]}."
                )
            warnings.warn(
                "input's size at dim=1 does not match num_features. You can silence this warning by not passing "
                "in num_features, which is not used because affine=False",
                stacklevel=2,
            )
        out = instance_norm(
            x,
            self.running_mean,
            self.running_var,
            self.weight,
            self.bias,
            self.training or not self.track_running_stats,
            self.momentum if self.momentum is not None else 0.0,
            self.eps,
        )
        return out.squeeze(0) if unbatched else out


class InstanceNorm1d(_InstanceNorm):
    _spatial = 1


class InstanceNorm2d(_InstanceNorm):
    _spatial = 2


class InstanceNorm3d(_InstanceNorm):
    _spatial = 3
