"""torch.nn.parallel: DistributedDataParallel over the default process group
(gradcraft.distributed.init_process_group), and DataParallel (one process: the module itself).

DDP broadcasts rank 0's parameters and buffers when it is built (and the buffers before each
forward, with broadcast_buffers), so every rank starts equal. During its forward each parameter is
read through a custom autograd Function whose backward, once the parameter's whole gradient is
known, sums it (with what .grad already holds) over the ranks and divides by their number: after
backward every rank's .grad is the average, as PyTorch's DDP leaves it. Under `no_sync()` nothing is
sent and gradients accumulate locally; the next synchronized backward averages the total.
"""

from __future__ import annotations

import contextlib

from gradcraft.autograd.function import Function
from gradcraft.nn.module import Module
from gradcraft.ops.collective import all_reduce as _sum_in_place
from gradcraft.ops.collective import default_group
from gradcraft.ops.function import is_grad_enabled, no_grad

_NOT_INITIALIZED = "Default process group has not been initialized, please make sure to call init_process_group."


class _AverageAcrossRanks(Function):
    """The identity on a parameter; its gradient (plus the parameter's .grad) averaged over the ranks."""

    @staticmethod
    def forward(ctx, p, group):
        ctx.p, ctx.group = p, group
        return p.detach()

    @staticmethod
    def backward(ctx, grad):
        p, group = ctx.p, ctx.group
        total = grad.clone() if p.grad is None else grad + p.grad
        total = total.contiguous().realize()
        _sum_in_place(group, [total])
        p.grad = None  # (the average replaces what was accumulated: it includes it)
        return total / group.world, None


def _broadcast_from_rank0(group, tensors) -> None:
    with no_grad():
        for t in tensors:
            if group.rank != 0:
                t.zero_()
        _sum_in_place(group, list(tensors))


class DistributedDataParallel(Module):
    def __init__(
        self,
        module,
        device_ids=None,
        output_device=None,
        dim: int = 0,
        broadcast_buffers: bool | None = None,
        init_sync: bool = True,
        process_group=None,
        bucket_cap_mb=None,
        find_unused_parameters: bool = False,
        check_reduction: bool = False,
        gradient_as_bucket_view: bool = False,
        static_graph: bool = False,
        delay_all_reduce_named_params=None,
        param_to_hook_all_reduce=None,
        mixed_precision=None,
        device_mesh=None,
        skip_all_reduce_unused_params: bool = False,
        bucket_cap_mb_list=None,
        batched_grad_copy: bool = False,
        forward_sync_buffers: bool | None = None,
    ) -> None:
        super().__init__()
        group = process_group if process_group is not None else default_group()
        if group is None:
            raise ValueError(_NOT_INITIALIZED)
        self.module = module
        self.device_ids = device_ids
        self.output_device = output_device
        self.dim = dim
        self.broadcast_buffers = True if broadcast_buffers is None else broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        object.__setattr__(self, "process_group", group)
        object.__setattr__(self, "_sync", True)
        if init_sync and group.world > 1:
            _broadcast_from_rank0(group, [p for p in module.parameters()] + self._buffers_to_sync())

    def _buffers_to_sync(self) -> list:
        return [b for b in self.module.buffers() if b is not None and b.dtype.is_floating_point]

    def forward(self, *inputs, **kwargs):
        group = self.process_group
        if self.broadcast_buffers and group.world > 1:
            buffers = self._buffers_to_sync()
            if buffers:
                _broadcast_from_rank0(group, buffers)
        if not (self._sync and is_grad_enabled() and group.world > 1):
            return self.module(*inputs, **kwargs)
        hooked: dict = {}
        swapped = []
        for m in self.module.modules():
            for name, p in m._parameters.items():
                if p is None or not p.requires_grad:
                    continue
                if id(p) not in hooked:
                    hooked[id(p)] = _AverageAcrossRanks.apply(p, group)
                object.__setattr__(m, name, hooked[id(p)])
                swapped.append((m, name, p))
        try:
            return self.module(*inputs, **kwargs)
        finally:
            for m, name, p in swapped:
                object.__setattr__(m, name, p)

    @contextlib.contextmanager
    def no_sync(self):
        """Within the block, backward accumulates gradients locally (nothing is sent)."""
        previous = self._sync
        object.__setattr__(self, "_sync", False)
        try:
            yield
        finally:
            object.__setattr__(self, "_sync", previous)


class DataParallel(Module):
    """One process: the module runs as it is (PyTorch's DataParallel without several GPUs)."""

    def __init__(self, module, device_ids=None, output_device=None, dim: int = 0) -> None:
        super().__init__()
        self.module = module
        self.device_ids, self.output_device, self.dim = device_ids, output_device, dim

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)


__all__ = ["DataParallel", "DistributedDataParallel"]
