"""torch.amp.GradScaler: dynamic loss scaling for float16 training.

    scaler = gradcraft.amp.GradScaler("cuda")
    with gradcraft.autocast("cuda", dtype=gradcraft.float16):
        loss = model(x, y)
    scaler.scale(loss).backward()       # gradients of loss * scale: small ones survive float16
    scaler.unscale_(opt)                # optional: clip the true gradients next
    gradcraft.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)                    # skipped (returns None) when a gradient is inf or NaN
    scaler.update()                     # scale * backoff after a skip, * growth after growth_interval clean steps

The scale, the growth tracker and the inf/NaN flag are device tensors, and the arithmetic on them
is lazy ops, as PyTorch's (`_amp_foreach_non_finite_check_and_unscale_`, `_amp_update_scale_`):
unscale_ and update cause no host sync. step() reads the flag once (`.item()`) to decide whether
to run optimizer.step(), as PyTorch's GradScaler does for every optimizer without its own fused
handling: skipping an arbitrary optimizer's step on the device would need each optimizer to gate
every state update (step counts included) on the flag.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from enum import Enum

import gradcraft as gc


class OptState(Enum):
    READY = 0
    UNSCALED = 1
    STEPPED = 2


def _refresh_per_optimizer_state() -> dict:
    return {"stage": OptState.READY, "found_inf_per_device": {}}


class GradScaler:
    def __init__(
        self,
        device: str = "cuda",
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        self._device = device
        self._enabled = enabled
        if device == "cuda" and enabled and not gc.cuda.is_available():
            warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.", stacklevel=2)
            self._enabled = False
        if self._enabled:
            if growth_factor <= 1.0:
                raise AssertionError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise AssertionError("The backoff factor must be < 1.0.")
            self._init_scale = init_scale
            self._scale = None  # made on the outputs' device by the first scale()
            self._growth_factor = growth_factor
            self._backoff_factor = backoff_factor
            self._growth_interval = growth_interval
            self._init_growth_tracker = 0
            self._growth_tracker = None
            self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)

    def _check_scale_growth_tracker(self, funcname: str):
        fix = "This may indicate your script did not use scaler.scale(loss or outputs) earlier in the iteration."
        if self._scale is None:
            raise AssertionError(f"Attempted {funcname} but _scale is None.  " + fix)
        return self._scale, self._growth_tracker

    def _lazy_init_scale_growth_tracker(self, device) -> None:
        self._scale = gc.full((), self._init_scale, dtype=gc.float32, device=device)
        self._growth_tracker = gc.full((), self._init_growth_tracker, dtype=gc.int32, device=device)

    def scale(self, outputs):
        """outputs (a tensor, or a list/tuple/iterable of them, nested) multiplied by the scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, gc.Tensor):
            if self._scale is None:
                self._lazy_init_scale_growth_tracker(outputs.device)
            return outputs * self._scale.to(outputs.device)

        def apply_scale(val):
            if isinstance(val, gc.Tensor):
                if self._scale is None:
                    self._lazy_init_scale_growth_tracker(val.device)
                return val * self._scale.to(val.device)
            if isinstance(val, (list, tuple)):
                return type(val)(map(apply_scale, val))
            if hasattr(val, "__iter__") and not isinstance(val, (str, bytes, dict)):
                return map(apply_scale, val)
            raise ValueError("outputs must be a Tensor or an iterable of Tensors")

        return apply_scale(outputs)

    def _unscale_grads_(self, optimizer, inv_scale, allow_fp16: bool) -> dict:
        """Each gradient multiplied by inv_scale in place; per device, a float32 flag: 1.0 where a
        gradient held an inf or NaN before the multiply, else 0.0."""
        bad = {}
        with gc.no_grad():
            for group in optimizer.param_groups:
                for param in group["params"]:
                    grad = param.grad
                    if grad is None:
                        continue
                    if not allow_fp16 and grad.dtype == gc.float16:
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    bad.setdefault(grad.device, []).append(gc.logical_not(gc.isfinite(grad)).any())
                    grad.mul_(inv_scale.to(grad.device))
        found = {}
        for device, flags in bad.items():
            found[device] = gc.stack(flags).any().to(gc.float32)
        if not found:  # no gradient at all: nothing was inf (PyTorch's flag stays 0)
            found[self._scale.device] = gc.zeros((), dtype=gc.float32, device=self._scale.device)
        return found

    def unscale_(self, optimizer) -> None:
        """Divide optimizer's gradients by the scale (in place), recording whether any was inf/NaN."""
        if not self._enabled:
            return
        self._check_scale_growth_tracker("unscale_")
        optimizer_state = self._per_optimizer_states[id(optimizer)]
        if optimizer_state["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if optimizer_state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        # the reciprocal in float64, then float32, as PyTorch's
        inv_scale = self._scale.double().reciprocal().float()
        optimizer_state["found_inf_per_device"] = self._unscale_grads_(optimizer, inv_scale, False)
        optimizer_state["stage"] = OptState.UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """optimizer.step(*args, **kwargs) unless a gradient was inf/NaN (then None); unscales first
        if unscale_ was not called."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        self._check_scale_growth_tracker("step")
        optimizer_state = self._per_optimizer_states[id(optimizer)]
        if optimizer_state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if optimizer_state["stage"] is OptState.READY:
            self.unscale_(optimizer)
        if len(optimizer_state["found_inf_per_device"]) == 0:
            raise AssertionError("No inf checks were recorded for this optimizer.")
        retval = None
        if not sum(v.item() for v in optimizer_state["found_inf_per_device"].values()):
            retval = optimizer.step(*args, **kwargs)
        optimizer_state["stage"] = OptState.STEPPED
        return retval

    def update(self, new_scale=None) -> None:
        """The next iteration's scale: new_scale if given, else backed off after a skipped step and
        grown after growth_interval clean ones (on the device: no host sync)."""
        if not self._enabled:
            return
        scale, tracker = self._check_scale_growth_tracker("update")
        with gc.no_grad():
            if new_scale is not None:
                if isinstance(new_scale, float):
                    scale.fill_(new_scale)
                else:
                    reason = (
                        "new_scale should be a float or a 1-element torch.cuda.FloatTensor or "
                        "torch.FloatTensor with requires_grad=False."
                    )
                    if not isinstance(new_scale, gc.Tensor) or new_scale.numel() != 1 or new_scale.requires_grad:
                        raise AssertionError(reason)
                    scale.copy_(new_scale.reshape(()))
            else:
                found_infs = [
                    found.to(scale.device)
                    for state in self._per_optimizer_states.values()
                    for found in state["found_inf_per_device"].values()
                ]
                if len(found_infs) == 0:
                    raise AssertionError("No inf checks were recorded prior to update.")
                found = found_infs[0]
                for other in found_infs[1:]:
                    found = found + other
                self._update_scale(scale, tracker, found > 0)
        self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)

    def _update_scale(self, scale, tracker, found) -> None:
        """PyTorch's _amp_update_scale_, as where()s: after an inf, scale * backoff and the tracker
        to 0; else the tracker + 1, and on reaching growth_interval scale * growth (kept only if
        finite) and the tracker to 0."""
        successful = tracker + 1
        grow = successful == self._growth_interval
        grown = scale * self._growth_factor
        grown = gc.where(gc.isfinite(grown), grown, scale)
        new_scale = gc.where(found, scale * self._backoff_factor, gc.where(grow, grown, scale))
        new_tracker = gc.where(gc.logical_or(found, grow), gc.zeros_like(tracker), successful)
        scale.copy_(new_scale)
        tracker.copy_(new_tracker)

    def _get_scale_async(self):
        return self._scale

    def get_scale(self) -> float:
        """The current scale as a Python float (a host sync); 1.0 when disabled."""
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else float(self._scale.item())

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = new_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = new_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = new_interval

    def _get_growth_tracker(self) -> int:
        if not self._enabled:
            return 0
        return self._init_growth_tracker if self._growth_tracker is None else int(self._growth_tracker.item())

    def is_enabled(self) -> bool:
        return self._enabled

    def state_dict(self) -> dict:
        """scale, growth_factor, backoff_factor, growth_interval, _growth_tracker; {} when disabled."""
        if not self._enabled:
            return {}
        return {
            "scale": self.get_scale(),
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._get_growth_tracker(),
        }

    def load_state_dict(self, state_dict: dict) -> None:
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError(
                "The source state dict is empty, possibly because it was saved from a disabled instance of GradScaler."
            )
        self._init_scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._init_growth_tracker = int(state_dict["_growth_tracker"])
        with gc.no_grad():
            if self._scale is not None:
                self._scale.fill_(self._init_scale)
            if self._growth_tracker is not None:
                self._growth_tracker.fill_(self._init_growth_tracker)


class CudaGradScaler(GradScaler):
    """torch.cuda.amp.GradScaler: deprecated alias of GradScaler("cuda", ...)."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        warnings.warn(
            "`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use `torch.amp.GradScaler('cuda', args...)` "
            "instead.",
            FutureWarning,
            stacklevel=2,
        )
        super().__init__("cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled)
