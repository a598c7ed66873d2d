"""Adam, RMSprop and Adagrad with PyTorch's formulas, defaults and state names, and SGD with
PyTorch's dampening and Nesterov momentum.

Like the other optimizers, a step builds every update as Tensor ops ending in `assign` and realizes
them in one schedule (Optimizer.step). Weight decay here is PyTorch's L2 penalty added to the
gradient, for every parameter of the group (AdamW is the decoupled form).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

import math

from gradcraft import dtypes
from gradcraft.ops.creation import zeros
from gradcraft.optim.optimizer import SGD as _PlainSGD
from gradcraft.optim.optimizer import Optimizer


def _check(lr, eps, betas, weight_decay):
    """PyTorch's ValueErrors for out-of-range hyper-parameters."""
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    for i, beta in enumerate(betas):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {beta}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")


def _math_dtype(p):
    """State and arithmetic in float32 (float64 for float64 parameters), whatever the parameter's dtype."""
    return dtypes.float64 if p.dtype == dtypes.float64 else dtypes.float32


def _zeros_like(p):
    return zeros(p.shape, dtype=_math_dtype(p), device=p.device).realize()


def _counted_state(optimizer, p, initial: float = 0.0, **buffers: bool) -> dict:
    """p's state, its step counted: the buffers named (PyTorch's names) whose flag is true are made
    on first use, filled with `initial`."""
    state = optimizer.state.setdefault(id(p), {"step": 0})
    for name, wanted in buffers.items():
        if wanted and name not in state:
            state[name] = _zeros_like(p) if initial == 0 else (_zeros_like(p) + initial).realize()
    state["step"] += 1
    return state


def _grad(group, p):
    g = p.grad.to(_math_dtype(p))
    if group.get("maximize"):  # (negated before the L2 term is added, in PyTorch's order)
        g = -g
    if group["weight_decay"]:
        g = g + p.to(_math_dtype(p)) * group["weight_decay"]
    return g


class Adam(Optimizer):
    """torch.optim.Adam: m and v moments (exp_avg, exp_avg_sq), bias-corrected; amsgrad keeps the
    running maximum of v (max_exp_avg_sq)."""

    defaults = {
        "lr": 1e-3,
        "betas": (0.9, 0.999),
        "eps": 1e-8,
        "weight_decay": 0.0,
        "amsgrad": False,
        "maximize": False,
        "decoupled_weight_decay": False,  # (True: AdamW's decay)
    }

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1e-3,
        betas: tuple = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        amsgrad: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
        decoupled_weight_decay: bool = False,
    ) -> None:
        _check(lr, eps, betas, weight_decay)
        super().__init__(
            params,
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            amsgrad=amsgrad,
            maximize=maximize,
            decoupled_weight_decay=decoupled_weight_decay,
        )

    def _update(self, gi, group, p):
        state = _counted_state(self, p, exp_avg=True, exp_avg_sq=True, max_exp_avg_sq=group["amsgrad"])
        beta1, beta2 = group["betas"]
        step = state["step"]
        x = p.to(_math_dtype(p))
        if group["decoupled_weight_decay"] and group["weight_decay"]:
            x = x * (1.0 - group["lr"] * group["weight_decay"])
            g = _grad(dict(group, weight_decay=0.0), p)
        else:
            g = _grad(group, p)
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m_new = m * beta1 + g * (1.0 - beta1)
        v_new = v * beta2 + g * g * (1.0 - beta2)
        out = [m.assign(m_new), v.assign(v_new)]
        if group["amsgrad"]:
            v_max = state["max_exp_avg_sq"]
            v_new = v_max.maximum(v_new)
            out.append(v_max.assign(v_new))
        step_size = group["lr"] / (1.0 - beta1**step)
        denom = v_new.sqrt() / math.sqrt(1.0 - beta2**step) + group["eps"]
        out.append(p.assign((x - step_size * (m_new / denom)).to(p.dtype)))
        return out


class RMSprop(Optimizer):
    """torch.optim.RMSprop: square_avg (and grad_avg when centered, momentum_buffer with momentum)."""

    defaults = {
        "lr": 1e-2,
        "alpha": 0.99,
        "eps": 1e-8,
        "weight_decay": 0.0,
        "momentum": 0.0,
        "centered": False,
        "maximize": False,
    }

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0,
        momentum: float = 0,
        centered: bool = False,
        capturable: bool = False,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
    ) -> None:
        _check(lr, eps, (), weight_decay)
        if not 0.0 <= momentum:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if not 0.0 <= alpha:
            raise ValueError(f"Invalid alpha value: {alpha}")
        hyper = {"alpha": alpha, "eps": eps, "weight_decay": weight_decay, "momentum": momentum, "centered": centered}
        super().__init__(params, lr=lr, maximize=maximize, **hyper)

    def _update(self, gi, group, p):
        momentum = group["momentum"] > 0
        state = _counted_state(self, p, square_avg=True, momentum_buffer=momentum, grad_avg=group["centered"])
        alpha = group["alpha"]
        g = _grad(group, p)
        sq = state["square_avg"]
        sq_new = sq * alpha + g * g * (1.0 - alpha)
        out = [sq.assign(sq_new)]
        if group["centered"]:
            ga = state["grad_avg"]
            ga_new = ga * alpha + g * (1.0 - alpha)
            out.append(ga.assign(ga_new))
            avg = (sq_new - ga_new * ga_new).sqrt() + group["eps"]
        else:
            avg = sq_new.sqrt() + group["eps"]
        if group["momentum"] > 0:
            buf = state["momentum_buffer"]
            buf_new = buf * group["momentum"] + g / avg
            out.append(buf.assign(buf_new))
            update = buf_new
        else:
            update = g / avg
        out.append(p.assign((p.to(_math_dtype(p)) - group["lr"] * update).to(p.dtype)))
        return out


class Adagrad(Optimizer):
    """torch.optim.Adagrad: sum of squared gradients (state "sum"), learning-rate decay per step."""

    defaults = {
        "lr": 1e-2,
        "lr_decay": 0.0,
        "weight_decay": 0.0,
        "initial_accumulator_value": 0.0,
        "eps": 1e-10,
        "maximize": False,
    }

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1e-2,
        lr_decay: float = 0,
        weight_decay: float = 0,
        initial_accumulator_value: float = 0,
        eps: float = 1e-10,
        foreach: bool | None = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        _check(lr, eps, (), weight_decay)
        if not 0.0 <= lr_decay:
            raise ValueError(f"Invalid lr_decay value: {lr_decay}")
        if not 0.0 <= initial_accumulator_value:
            raise ValueError(f"Invalid initial_accumulator_value value: {initial_accumulator_value}")
        super().__init__(
            params,
            lr=lr,
            lr_decay=lr_decay,
            weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value,
            eps=eps,
            maximize=maximize,
        )

    def _update(self, gi, group, p):
        state = _counted_state(self, p, group["initial_accumulator_value"], sum=True)
        g = _grad(group, p)
        clr = group["lr"] / (1.0 + (state["step"] - 1) * group["lr_decay"])
        total = state["sum"]
        total_new = total + g * g
        return [
            total.assign(total_new),
            p.assign((p.to(_math_dtype(p)) - clr * g / (total_new.sqrt() + group["eps"])).to(p.dtype)),
        ]


class SGD(_PlainSGD):
    """torch.optim.SGD: the base class's update (optim/optimizer.py) with the dampening, Nesterov and
    maximize options in its defaults, and PyTorch's check of them."""

    defaults = dict(_PlainSGD.defaults, dampening=0.0, nesterov=False, maximize=False)

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        if differentiable:
            from gradcraft.errors import UserError

            raise UserError("SGD: differentiable=True is not supported")
        # foreach and fused only pick PyTorch's implementation; the update is the same
        hyper = dict(momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov)
        super().__init__(params, lr=lr, maximize=maximize, **hyper)
        for group in self.param_groups:
            if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
                from gradcraft.errors import UserError

                raise UserError("Nesterov momentum requires a momentum and zero dampening")
