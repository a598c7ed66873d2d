"""torch.autograd.functional (jacobian, hessian, vjp, jvp, vhp, hvp: higher_order.py), and what this
module held before those: grad, backward and Variable (gradients.py)."""

from gradcraft.autograd.gradients import Variable, backward, grad  # noqa: F401
from gradcraft.autograd.higher_order import hessian, hvp, jacobian, jvp, vhp, vjp  # noqa: F401
