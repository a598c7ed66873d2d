"""torch.autograd.gradcheck: a function's gradients (its backward, a custom Function's included)
against central finite differences, element by element. For small float64 inputs, as in PyTorch."""

from __future__ import annotations

import numpy as np

from gradcraft.autograd.functional import grad
from gradcraft.errors import RuntimeError_
from gradcraft.ops.function import no_grad
from gradcraft.tensor import Tensor


class GradcheckError(RuntimeError_):
    """The analytical and numerical Jacobians differ."""


def _outputs(result) -> tuple:
    return (result,) if isinstance(result, Tensor) else tuple(result)


def _numerical(func, inputs, i, eps) -> list:
    """d(output o)/d(input i) for every output, by central differences: (n_in, n_out) arrays."""
    base = inputs[i].detach().numpy().astype(np.float64)
    columns = []
    for index in range(base.size):
        values = []
        for sign in (1, -1):
            moved = base.copy().reshape(-1)
            moved[index] += sign * eps
            args = list(inputs)
            args[i] = Tensor(moved.reshape(base.shape), dtype=inputs[i].dtype, device=inputs[i].device)
            with no_grad():
                values.append([o.detach().numpy().astype(np.float64).reshape(-1) for o in _outputs(func(*args))])
        columns.append([(plus - minus) / (2 * eps) for plus, minus in zip(*values)])
    n_out = [len(c) for c in columns[0]] if columns else []
    return [np.stack([c[o] for c in columns]) if columns else np.zeros((0, n_out[o])) for o in range(len(n_out))]


def gradcheck(
    func,
    inputs,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
    check_grad_dtypes: bool = False,
    check_batched_grad: bool = False,
    check_batched_forward_grad: bool = False,
    check_forward_ad: bool = False,
    check_backward_ad: bool = True,
    fast_mode: bool = False,
    masked: bool | None = None,
) -> bool:
    """True when every input's analytical Jacobian matches the numerical one (else GradcheckError,
    or False with raise_exception=False)."""
    inputs = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    differentiable = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if not differentiable:
        raise ValueError(
            "gradcheck expects at least one input tensor to require gradient, "
            "but none of the them have requires_grad=True."
        )
    outputs = _outputs(func(*inputs))
    for i in differentiable:
        numerical = _numerical(func, inputs, i, eps)
        for o, out in enumerate(outputs):
            flat = out.reshape(-1)
            rows = []
            for j in range(flat.numel()):
                if not out.requires_grad:
                    rows.append(np.zeros(inputs[i].numel()))
                    continue
                (g,) = grad(flat[j], inputs[i], retain_graph=True, allow_unused=True)
                rows.append(np.zeros(inputs[i].numel()) if g is None else g.numpy().astype(np.float64).reshape(-1))
            analytical = np.stack(rows, axis=1) if rows else np.zeros((inputs[i].numel(), 0))
            if not np.allclose(analytical, numerical[o], rtol=rtol, atol=atol):
                if not raise_exception:
                    return False
                raise GradcheckError(
                    f"Jacobian mismatch for output {o} with respect to input {i},\n"
                    f"numerical:{Tensor(numerical[o])}\nanalytical:{Tensor(analytical)}\n"
                )
    return True


def gradgradcheck(
    func,
    inputs,
    grad_outputs=None,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    gen_non_contig_grad_outputs: bool = False,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
    check_grad_dtypes: bool = False,
    check_batched_grad: bool = False,
    check_fwd_over_rev: bool = False,
    check_rev_over_rev: bool = True,
    fast_mode: bool = False,
    masked: bool = False,
) -> bool:
    """gradcheck of the function's gradient (a vector-Jacobian product built with create_graph=True),
    with respect to the inputs and to grad_outputs (random normal ones when not given, as PyTorch)."""
    from gradcraft.ops.function import enable_grad

    inputs = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    differentiable = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    outputs = [o for o in _outputs(func(*inputs)) if o.requires_grad]
    if grad_outputs is None:
        rng = np.random.default_rng(0)
        grad_outputs = tuple(
            Tensor(rng.standard_normal(tuple(o.shape)), dtype=o.dtype, device=o.device, requires_grad=True)
            for o in outputs
        )
    grad_outputs = _outputs(grad_outputs)
    n = len(inputs)

    def vjp(*args):
        with enable_grad():
            ins = [
                a
                if not isinstance(a, Tensor) or a.requires_grad or i not in differentiable
                else a.detach().requires_grad_(True)
                for i, a in enumerate(args[:n])
            ]
            outs = [o for o in _outputs(func(*ins)) if o.requires_grad]
            wrt = [ins[i] for i in differentiable]
            grads = grad(outs, wrt, list(args[n:]), create_graph=True, allow_unused=True, materialize_grads=True)
        return tuple(grads)

    return gradcheck(vjp, inputs + tuple(grad_outputs), eps=eps, atol=atol, rtol=rtol, raise_exception=raise_exception)
