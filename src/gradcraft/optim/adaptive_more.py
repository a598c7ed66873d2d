"""Adadelta, Adamax, NAdam and RAdam with PyTorch's formulas, defaults, state names and arguments.

Each update is written in Tensor ops ending in `assign`, realized with the others in one schedule
(Optimizer.step), as in optim/adaptive.py. Maximize negates the gradient before the L2 weight decay
is added, in PyTorch's order; NAdam and RAdam also take PyTorch's `decoupled_weight_decay` (the
parameter shrinks by lr * weight_decay first, AdamW's form).
"""

from __future__ import annotations

from collections.abc import Iterable

import math

from gradcraft.optim.adaptive import _counted_state, _math_dtype
from gradcraft.optim.optimizer import Optimizer
from gradcraft.tensor import Tensor


def _check(lr, eps=0.0, betas=(0.0, 0.0), weight_decay=0.0, rho=None):
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
    if rho is not None and not 0.0 <= rho <= 1.0:
        raise ValueError(f"Invalid rho value: {rho}")


def _gradient(group, p, decay: bool = True):
    """p's gradient in the math dtype, negated for maximize, then with the L2 term (PyTorch's order)."""
    g = p.grad.to(_math_dtype(p))
    if group.get("maximize"):
        g = -g
    if decay and group["weight_decay"]:
        g = g + p.to(_math_dtype(p)) * group["weight_decay"]
    return g


def _decoupled(group, p):
    """(the parameter to update, the gradient): decoupled decay shrinks the parameter instead."""
    x = p.to(_math_dtype(p))
    if group["weight_decay"] and group["decoupled_weight_decay"]:
        return x * (1.0 - group["lr"] * group["weight_decay"]), _gradient(group, p, decay=False)
    return x, _gradient(group, p)


class Adadelta(Optimizer):
    """torch.optim.Adadelta: running averages of squared gradients (square_avg) and of squared
    updates (acc_delta)."""

    defaults = {"lr": 1.0, "rho": 0.9, "eps": 1e-6, "weight_decay": 0, "maximize": False}

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0,
        foreach: bool | None = None,
        *,
        capturable: bool = False,
        maximize: bool = False,
        differentiable: bool = False,
    ) -> None:
        _check(lr, eps, weight_decay=weight_decay, rho=rho)
        super().__init__(params, lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize)

    def _update(self, gi, group, p):
        state = _counted_state(self, p, square_avg=True, acc_delta=True)
        rho, eps = group["rho"], group["eps"]
        g = _gradient(group, p)
        sq, acc = state["square_avg"], state["acc_delta"]
        sq_new = sq * rho + g * g * (1.0 - rho)
        delta = (acc + eps).sqrt() / (sq_new + eps).sqrt() * g
        acc_new = acc * rho + delta * delta * (1.0 - rho)
        p_new = p.to(_math_dtype(p)) - delta * group["lr"]
        return [sq.assign(sq_new), acc.assign(acc_new), p.assign(p_new.to(p.dtype))]


class Adamax(Optimizer):
    """torch.optim.Adamax: Adam with the infinity norm (exp_inf = max(beta2 * exp_inf, |g| + eps))."""

    defaults = {"lr": 2e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0, "maximize": False}

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 2e-3,
        betas: tuple = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        foreach: bool | None = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
    ) -> None:
        _check(lr, eps, betas, weight_decay)
        super().__init__(params, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, maximize=maximize)

    def _update(self, gi, group, p):
        state = _counted_state(self, p, exp_avg=True, exp_inf=True)
        beta1, beta2 = group["betas"]
        g = _gradient(group, p)
        m, u = state["exp_avg"], state["exp_inf"]
        m_new = m + (g - m) * (1.0 - beta1)  # lerp, as PyTorch writes it
        u_new = (u * beta2).maximum(g.abs() + group["eps"])
        clr = group["lr"] / (1.0 - beta1 ** state["step"])
        p_new = p.to(_math_dtype(p)) - clr * (m_new / u_new)
        return [m.assign(m_new), u.assign(u_new), p.assign(p_new.to(p.dtype))]


class NAdam(Optimizer):
    """torch.optim.NAdam: Adam with Nesterov momentum and the momentum schedule
    mu_t = beta1 * (1 - 0.96 ** (t * momentum_decay) / 2); state mu_product, exp_avg, exp_avg_sq."""

    defaults = {
        "lr": 2e-3,
        "betas": (0.9, 0.999),
        "eps": 1e-8,
        "weight_decay": 0,
        "momentum_decay": 4e-3,
        "decoupled_weight_decay": False,
        "maximize": False,
    }

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 2e-3,
        betas: tuple = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        momentum_decay: float = 4e-3,
        decoupled_weight_decay: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
    ) -> None:
        _check(lr, eps, betas, weight_decay)
        if not 0.0 <= momentum_decay:
            raise ValueError(f"Invalid momentum_decay value: {momentum_decay}")
        super().__init__(
            params,
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            momentum_decay=momentum_decay,
            decoupled_weight_decay=decoupled_weight_decay,
            maximize=maximize,
        )

    def _update(self, gi, group, p):
        state = _counted_state(self, p, exp_avg=True, exp_avg_sq=True)
        beta1, beta2 = group["betas"]
        lr, step, decay = group["lr"], state["step"], group["momentum_decay"]
        x, g = _decoupled(group, p)
        mu = beta1 * (1.0 - 0.5 * 0.96 ** (step * decay))
        mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((step + 1) * decay))
        state["mu_product"] = state.get("mu_product", 1.0) * mu
        mu_product = state["mu_product"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m_new = m + (g - m) * (1.0 - beta1)
        v_new = v * beta2 + g * g * (1.0 - beta2)
        denom = (v_new / (1.0 - beta2**step)).sqrt() + group["eps"]
        x = x - (lr * (1.0 - mu) / (1.0 - mu_product)) * (g / denom)
        x = x - (lr * mu_next / (1.0 - mu_product * mu_next)) * (m_new / denom)
        return [m.assign(m_new), v.assign(v_new), p.assign(x.to(p.dtype))]


class RAdam(Optimizer):
    """torch.optim.RAdam: Adam whose adaptive term is switched on, rectified, once the variance of
    its estimate is finite (rho_t > 5); plain momentum SGD before."""

    defaults = {
        "lr": 1e-3,
        "betas": (0.9, 0.999),
        "eps": 1e-8,
        "weight_decay": 0,
        "decoupled_weight_decay": False,
        "maximize": False,
    }

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1e-3,
        betas: tuple = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        decoupled_weight_decay: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
    ) -> None:
        _check(lr, eps, betas, weight_decay)
        super().__init__(
            params,
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            decoupled_weight_decay=decoupled_weight_decay,
            maximize=maximize,
        )

    def _update(self, gi, group, p):
        state = _counted_state(self, p, exp_avg=True, exp_avg_sq=True)
        beta1, beta2 = group["betas"]
        lr, step = group["lr"], state["step"]
        x, g = _decoupled(group, p)
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m_new = m + (g - m) * (1.0 - beta1)
        v_new = v * beta2 + g * g * (1.0 - beta2)
        bias_correction2 = 1.0 - beta2**step
        m_hat = m_new / (1.0 - beta1**step)
        rho_inf = 2.0 / (1.0 - beta2) - 1.0
        rho_t = rho_inf - 2.0 * step * beta2**step / bias_correction2
        if rho_t > 5.0:
            rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            adaptive = math.sqrt(bias_correction2) / (v_new.sqrt() + group["eps"])
            x = x - m_hat * lr * adaptive * rect
        else:
            x = x - m_hat * lr
        return [m.assign(m_new), v.assign(v_new), p.assign(x.to(p.dtype))]
