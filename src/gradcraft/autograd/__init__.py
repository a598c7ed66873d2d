"""torch.autograd: custom Functions, grad and backward over gradcraft's lazy graph.

engine.py      reverse-mode differentiation over the lazy graph (what Tensor.backward runs)
function.py    Function (forward/backward written by the user), once_differentiable
functional.py  grad(outputs, inputs), backward(tensors), Variable (create_graph: ops/double_backward.py),
               and torch.autograd.functional's jacobian, hessian, vjp, jvp, vhp, hvp
hooks.py       Tensor.register_hook, retain_grad
"""

from gradcraft.autograd import function  # noqa: F401
from gradcraft.autograd.function import Function, FunctionCtx, InplaceFunction, once_differentiable
from gradcraft.autograd.functional import Variable, backward, grad
from gradcraft.autograd.grad_mode import inference_mode, set_grad_enabled
from gradcraft.autograd.gradcheck import gradcheck, gradgradcheck
from gradcraft.ops.function import enable_grad, is_grad_enabled, no_grad

__all__ = [
    "Function",
    "FunctionCtx",
    "InplaceFunction",
    "Variable",
    "backward",
    "enable_grad",
    "grad",
    "gradcheck",
    "gradgradcheck",
    "inference_mode",
    "is_grad_enabled",
    "no_grad",
    "once_differentiable",
    "set_grad_enabled",
]
