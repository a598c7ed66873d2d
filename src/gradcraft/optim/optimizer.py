"""Optimizers: SGD and AdamW, with lazily built updates realized as one schedule.

`step()` builds every parameter's update as Tensor ops ending in `assign`, and
realizes them together: reads of the old values all run before the writes.
Learning rate and bias corrections live in 0-d device tensors whose buffers
are overwritten each step, so the update graph has the same shape and the
same kernels every step (what CUDA-graph capture needs).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import math

import numpy as np

from gradcraft import dtypes
from gradcraft.device import uncounted_transfers
from gradcraft.engine.realize import realize
from gradcraft.errors import UserError
from gradcraft.ops.creation import zeros
from gradcraft.ops.function import enable_grad, no_grad
from gradcraft.ops.optim import adamw_step, has_fused_optim
from gradcraft.tensor import Tensor


# While a compiled step function runs as written (gradcraft/compiled_step.py): a list that each fused
# optimizer stepping inside it joins, so that its host side (`prepare`) can run before each replay.
STEPPING: list | None = None
# Optimizers whose `prepare()` the compiled step already ran for the step being recorded.
PREPARED: set = set()


def stepped_on_host(what: str) -> None:
    """A step whose numbers live on the host (a scheduler's lr, an unfused optimizer's lr and step
    count, baked into its kernels) ran: a compiled step function that does this cannot be replayed."""
    if STEPPING is not None:
        STEPPING.append(what)


class _ParamState(dict):
    """optimizer.state: keyed by id(param) inside; `state[p]` and `p in state` take the parameter
    itself, as PyTorch's does."""

    def _key(self, key):
        return id(key) if isinstance(key, Tensor) else key

    def __getitem__(self, key):
        return super().__getitem__(self._key(key))

    def __setitem__(self, key, value):
        super().__setitem__(self._key(key), value)

    def __contains__(self, key):
        return super().__contains__(self._key(key))

    def get(self, key, default=None):
        return super().get(self._key(key), default)

    def setdefault(self, key, default=None):
        return super().setdefault(self._key(key), default)


class Optimizer:
    defaults: dict = {}

    def __init__(self, params: Iterable[Tensor] | Iterable[dict], **hyper: Any) -> None:
        params = list(params)
        if not params:
            raise UserError("the optimizer got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.param_groups = []
        for group in groups:
            merged = dict(self.defaults, **hyper)
            merged.update(group)
            merged["params"] = list(group["params"])
            self.param_groups.append(merged)
        self.state: dict[int, dict] = _ParamState()  # id(param) -> {"step": int, name: Tensor}
        self._scalars: dict[tuple, Tensor] = {}

    def _scalar(self, key, value: float, device, dtype) -> Tensor:
        """A 0-d device tensor holding `value`, updated in place (same buffer every step)."""
        t = self._scalars.get((key, device, dtype))
        if t is None:
            t = Tensor(np.array(value, dtype=dtype.np), device=device).realize()  # exact in its dtype
            self._scalars[(key, device, dtype)] = t
        else:
            t.copy_(np.array(value, dtype=t.dtype.np))  # written now, exactly (no gradient is recorded)
        return t

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None

    def step(self, closure=None, realize_now: bool = True):
        """One update of every parameter with a gradient. closure: PyTorch's optional callable that
        recomputes the loss (run with gradients enabled first); its value is returned."""
        stepped_on_host(f"{type(self).__name__}.step")
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        with no_grad():
            updates = []
            for gi, group in enumerate(self.param_groups):
                group.pop("_step", None)
                for p in group["params"]:
                    if p.grad is not None:
                        updates.extend(self._update(gi, group, p))
        if realize_now:
            realize(updates)
            return loss
        return updates

    def _update(self, group_index, group, p) -> list:
        raise NotImplementedError

    # ------------------------------------------------------------ state

    def state_dict(self) -> dict:
        """Hyper-parameters per group and per-parameter state as NumPy arrays, by parameter position."""
        index = {id(p): i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}
        state = {}
        for pid, s in self.state.items():
            state[index[pid]] = {k: (v.numpy().copy() if isinstance(v, Tensor) else v) for k, v in s.items()}
        groups = [{k: v for k, v in g.items() if k != "params" and not k.startswith("_")} for g in self.param_groups]
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        params = [p for g in self.param_groups for p in g["params"]]
        if len(state_dict["param_groups"]) != len(self.param_groups):
            raise UserError("optimizer state does not match: different number of parameter groups")
        for group, saved in zip(self.param_groups, state_dict["param_groups"]):
            group.update(saved)
        self.state = _ParamState()
        for i, s in state_dict["state"].items():
            p = params[int(i)]
            self.state[id(p)] = {
                k: (Tensor(v, device=p.device) if isinstance(v, np.ndarray) else v) for k, v in s.items()
            }


class SGD(Optimizer):
    defaults = {"lr": 1e-3, "momentum": 0.0, "weight_decay": 0.0}

    def _update(self, gi, group, p):
        # dampening, nesterov and maximize: torch.optim.SGD's options (optim/adaptive.py's SGD has them)
        g = p.grad
        if group["weight_decay"]:
            g = g + p * group["weight_decay"]
        if group.get("maximize"):
            g = -g
        out = []
        if group["momentum"]:
            state = self.state.setdefault(id(p), {"step": 0})
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = zeros(p.shape, dtype=p.dtype, device=p.device).realize()
                buf_new = g
            else:
                dampening = group.get("dampening", 0.0)
                buf_new = state["momentum_buffer"] * group["momentum"] + (g * (1.0 - dampening) if dampening else g)
            out.append(state["momentum_buffer"].assign(buf_new))
            g = g + buf_new * group["momentum"] if group.get("nesterov") else buf_new
        lr = self._scalar(("lr", gi), group["lr"], p.device, p.dtype)
        out.append(p.assign(p - lr * g))
        return out


class AdamW(Optimizer):
    """Adam with decoupled weight decay (Loshchilov & Hutter), PyTorch's formula and defaults.

    Each group is decayed by its own `weight_decay`, as in PyTorch (which parameters should be:
    gradcraft/optim/weight_decay.py).
    Moments are float32 whatever the parameters' dtype. `fused` (the default where the device has
    the multi-tensor kernel) updates every parameter of a group in one kernel launch instead of a
    dozen graph nodes per parameter; both paths compute the same formula.
    """

    defaults = {
        "lr": 1e-3,
        "betas": (0.9, 0.999),
        "eps": 1e-8,
        "weight_decay": 1e-2,
        "amsgrad": False,
        "maximize": False,
    }

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        if differentiable:
            raise UserError("AdamW: differentiable is not supported")
        # foreach and capturable only pick PyTorch's implementation; the update is the same
        hyper = {"amsgrad": amsgrad, "maximize": maximize}
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, **hyper)
        self.fused = fused

    def _state(self, p) -> dict:
        state = self.state.setdefault(id(p), {"step": 0})
        if "exp_avg" not in state:
            state["exp_avg"] = zeros(p.shape, dtype=dtypes.float32, device=p.device).realize()
            state["exp_avg_sq"] = zeros(p.shape, dtype=dtypes.float32, device=p.device).realize()
        return state

    def step(self, closure=None, realize_now: bool = True, grad_scale: Tensor | None = None, prepare: bool = True):
        """One update. grad_scale: the [norm, coefficient] tensor of `grad_norm_and_scale`, whose
        coefficient multiplies every gradient (clipping without touching the gradients).

        prepare=False: the fused path skips `prepare()` (the caller ran it: graph capture, where the
        host-side writes of lr and step must happen outside the recorded kernels)."""
        if self.fused is not False and self._fusable():
            loss = None
            if closure is not None:
                with enable_grad():
                    loss = closure()
            if STEPPING is not None:
                STEPPING.append(self)
            if id(self) in PREPARED:  # a compiled step's recording: its caller ran prepare()
                PREPARED.discard(id(self))
            elif prepare:
                self.prepare(with_grad_only=True)
            self._fused_step(grad_scale)
            return loss
        if grad_scale is not None:
            coef = grad_scale[1]
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad = p.grad * coef.to(p.grad.dtype)
        return super().step(closure, realize_now)

    def _fusable(self) -> bool:
        params = [p for g in self.param_groups for p in g["params"] if p.grad is not None]
        if not has_fused_optim(params):
            return False
        if any(g.get("amsgrad") or g.get("maximize") for g in self.param_groups):
            return False  # (the kernel has neither)
        for group in self.param_groups:  # one step count per group (the kernel takes one)
            steps = {self.state.get(id(p), {}).get("step", 0) for p in group["params"] if p.grad is not None}
            if len(steps) > 1:
                return False
        return True

    def prepare(self, with_grad_only: bool = False) -> None:
        """Host side of a fused step: count the step and write [lr, step] into each group's device buffer.
        with_grad_only: count only the parameters that have a gradient now (a step skips the others, and
        their step count stands still, as in PyTorch); else every parameter that requires grad (a
        captured step, prepared before its backward)."""
        for gi, group in enumerate(self.param_groups):
            params = [p for p in group["params"] if p.requires_grad and (p.grad is not None or not with_grad_only)]
            if not params:
                continue
            states = [self._state(p) for p in params]
            for state in states:
                state["step"] += 1
            lr_step = self._scalars.get(("lr_step", gi, params[0].device))
            if lr_step is None:
                lr_step = zeros(2, dtype=dtypes.float32, device=params[0].device).realize()
                self._scalars[("lr_step", gi, params[0].device)] = lr_step
            with uncounted_transfers():  # (host side: a compiled step runs it before each replay)
                lr_step.copy_(np.array([group["lr"], states[0]["step"]], dtype=np.float32))

    def _fused_step(self, grad_scale) -> None:
        """Device side: one multi-tensor launch per group."""
        for gi, group in enumerate(self.param_groups):
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            states = [self._state(p) for p in params]
            lr_step = self._scalars[("lr_step", gi, params[0].device)]
            beta1, beta2 = group["betas"]
            adamw_step(
                params,
                [p.grad for p in params],
                [s["exp_avg"] for s in states],
                [s["exp_avg_sq"] for s in states],
                lr_step,
                beta1=beta1,
                beta2=beta2,
                eps=group["eps"],
                weight_decay=group["weight_decay"],
                grad_scale=grad_scale,
            )

    def _update(self, gi, group, p):
        state = self._state(p)
        state["step"] += 1
        beta1, beta2 = group["betas"]
        step = state["step"]
        lr = group["lr"]
        decay = group["weight_decay"]
        # Step-dependent numbers go through device scalars, not kernel constants. A group's parameters
        # share them: all of a group's parameters are updated on the same steps (one with no gradient
        # on some step would count its own steps, as in PyTorch, through a plain constant instead).
        step_size, bc2_sqrt = lr / (1.0 - beta1**step), math.sqrt(1.0 - beta2**step)
        if step == group.setdefault("_step", {}).setdefault("now", step):
            shrink = self._scalar(("shrink", gi, decay), 1.0 - lr * decay, p.device, dtypes.float32)
            step_size = self._scalar(("step_size", gi), step_size, p.device, dtypes.float32)
            bc2_sqrt = self._scalar(("bc2_sqrt", gi), bc2_sqrt, p.device, dtypes.float32)
        else:
            shrink = 1.0 - lr * decay
        g = -p.grad.float() if group.get("maximize") else p.grad.float()
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m_new = m * beta1 + g * (1.0 - beta1)
        v_new = v * beta2 + g * g * (1.0 - beta2)
        updates = [m.assign(m_new), v.assign(v_new)]
        if group.get("amsgrad"):  # the running maximum of v in the denominator (state max_exp_avg_sq)
            if "max_exp_avg_sq" not in state:
                state["max_exp_avg_sq"] = zeros(p.shape, dtype=dtypes.float32, device=p.device).realize()
            v_new = state["max_exp_avg_sq"].maximum(v_new)
            updates.append(state["max_exp_avg_sq"].assign(v_new))
        denom = v_new.sqrt() / bc2_sqrt + group["eps"]
        p_new = p.float() * shrink - step_size * (m_new / denom)
        return updates + [p.assign(p_new)]
