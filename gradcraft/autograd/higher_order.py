"""torch.autograd.functional: jacobian, hessian, vjp, jvp, vhp, hvp.

Each is composed from autograd.grad: a Jacobian row per output element (reverse mode), a Hessian as
the Jacobian of a Jacobian built with create_graph=True, a Jacobian-vector product through the
double-backward trick (the vector-Jacobian product is linear in its vector, so differentiating it
with respect to that vector gives J v). Inputs and results follow PyTorch's conventions: a tensor or
a tuple of tensors in, the same structure out, and results cut from the graph unless create_graph.
"""

from __future__ import annotations

from gradcraft.errors import RuntimeError_


def _tuple(x, name: str) -> tuple[bool, tuple]:
    from gradcraft.ops.function import tensor_class

    is_tuple = isinstance(x, (tuple, list))
    items = tuple(x) if is_tuple else (x,)
    for i, item in enumerate(items):
        if not isinstance(item, tensor_class()):
            raise TypeError(
                f"The {name} given to the function must be either a Tensor or a tuple of Tensors but "
                f"the value at index {i} has type {type(item)}."
            )
    return is_tuple, items


def _prepare(inputs: tuple, create_graph: bool) -> tuple:
    """The inputs as fresh differentiable tensors (a view keeps an outer graph when create_graph)."""
    if create_graph:
        return tuple(t.view_as(t) if t.requires_grad else t.detach().requires_grad_(True) for t in inputs)
    return tuple(t.detach().requires_grad_(True) for t in inputs)


def _finish(items: tuple, create_graph: bool) -> tuple:
    return tuple(t if t is None or create_graph else t.detach() for t in items)


def _grads(outputs, inputs, grad_outputs, create_graph: bool) -> tuple:
    """autograd.grad with zeros for the inputs an output does not depend on."""
    from gradcraft.autograd.gradients import grad
    from gradcraft.ops.creation import zeros_like

    pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o.requires_grad]
    if not pairs:
        return tuple(zeros_like(i) for i in inputs)
    found = grad(
        [o for o, _ in pairs],
        inputs,
        [g for _, g in pairs],
        retain_graph=True,
        create_graph=create_graph,
        allow_unused=True,
    )
    return tuple(zeros_like(i) if g is None else g for i, g in zip(inputs, found))


def _unpack(result, outer: bool, inner: bool | None = None):
    if inner is not None and not inner:
        result = tuple(r[0] for r in result)
    return result if outer else result[0]


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False, strategy="reverse-mode"):
    """d func(inputs) / d inputs: for one input and one output a tensor of shape out.shape + in.shape;
    tuples of them for tuples, indexed [output][input]."""
    if strategy not in ("reverse-mode", "forward-mode"):
        raise ValueError('Expected strategy to be either "forward-mode" or "reverse-mode".')
    from gradcraft.ops.creation import zeros_like
    from gradcraft.ops.movement import stack

    is_inputs_tuple, inputs = _tuple(inputs, "inputs")
    inputs = _prepare(inputs, create_graph)
    is_outputs_tuple, outputs = _tuple(func(*inputs), "outputs of the user-provided function")
    result = []
    for out in outputs:
        flat = out.reshape(-1)
        rows = [[] for _ in inputs]
        for k in range(flat.numel()):
            element = flat[k]
            if strict and not element.requires_grad:
                raise RuntimeError_(
                    f"Output {len(result)} of the user-provided function is independent of input 0. "
                    "This is not allowed in strict mode."
                )
            grads = _grads((element,), inputs, (None,), create_graph)
            for row, g in zip(rows, grads):
                row.append(g)
        per_input = []
        for inp, row in zip(inputs, rows):
            if row:
                jac = stack(row).reshape(tuple(out.shape) + tuple(inp.shape))
            else:
                jac = (
                    zeros_like(out)
                    .reshape(tuple(out.shape) + (1,) * inp.ndim)
                    .expand(*(tuple(out.shape) + tuple(inp.shape)))
                )
            per_input.append(jac if create_graph else jac.detach())
        result.append(tuple(per_input))
    return _unpack(tuple(result), is_outputs_tuple, is_inputs_tuple)


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False, outer_jacobian_strategy="reverse-mode"):
    """The second derivatives of a function with one scalar output: shape in.shape + in.shape, or a
    tuple of tuples [i][j] for a tuple of inputs."""
    is_inputs_tuple, inputs = _tuple(inputs, "inputs")

    def scalar_function(*inp):
        out = func(*inp)
        is_tuple, outs = _tuple(out, "outputs of the user-provided function")
        if is_tuple or outs[0].numel() != 1:
            raise RuntimeError_("The function given to hessian should return a single Tensor with a single element")
        return outs[0].reshape(())

    def jacobian_function(*inp):
        return jacobian(scalar_function, inp, create_graph=True)

    result = jacobian(jacobian_function, inputs, create_graph=create_graph, strict=strict)
    return _unpack(result, is_inputs_tuple, is_inputs_tuple)


def _vector(v, like: tuple, name: str) -> tuple:
    from gradcraft.ops.creation import ones_like

    if v is None:
        if len(like) != 1 or like[0].numel() != 1:
            raise RuntimeError_(f"The vector v can only be None if the {name} is a single Tensor with a single element")
        return (ones_like(like[0]),)
    _, v = _tuple(v, "v")
    if len(v) != len(like):
        raise RuntimeError_(f"v is a tuple of invalid length: should be {len(like)} but got {len(v)}.")
    for a, b in zip(v, like):
        if tuple(a.shape) != tuple(b.shape):
            raise RuntimeError_(f"Mismatch in shape: v has shape {list(a.shape)}, expected {list(b.shape)}")
    return v


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), v^T J)."""
    is_inputs_tuple, inputs = _tuple(inputs, "inputs")
    inputs = _prepare(inputs, create_graph)
    is_outputs_tuple, outputs = _tuple(func(*inputs), "outputs of the user-provided function")
    v = _vector(v, outputs, "user-provided function's output")
    grads = _grads(outputs, inputs, v, create_graph)
    return _unpack(_finish(outputs, create_graph), is_outputs_tuple), _unpack(
        _finish(grads, create_graph), is_inputs_tuple
    )


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), J v), through the double-backward trick."""
    from gradcraft.ops.creation import zeros_like

    is_inputs_tuple, inputs = _tuple(inputs, "inputs")
    inputs = _prepare(inputs, True)
    v = _vector(v, inputs, "input")
    is_outputs_tuple, outputs = _tuple(func(*inputs), "outputs of the user-provided function")
    dummies = tuple(zeros_like(o).requires_grad_(True) for o in outputs)
    vjps = _grads(outputs, inputs, dummies, True)
    jvps = _grads(vjps, dummies, v, create_graph)
    return _unpack(_finish(outputs, create_graph), is_outputs_tuple), _unpack(
        _finish(jvps, create_graph), is_outputs_tuple
    )


def _scalar_output(func, inputs):
    is_outputs_tuple, outputs = _tuple(func(*inputs), "outputs of the user-provided function")
    if is_outputs_tuple or outputs[0].numel() != 1:
        raise RuntimeError_("The function given to hvp/vhp should return a single Tensor with a single element")
    return outputs[0]


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), v^T H) for a function with one scalar output."""
    is_inputs_tuple, inputs = _tuple(inputs, "inputs")
    inputs = _prepare(inputs, True)
    v = _vector(v, inputs, "input")
    output = _scalar_output(func, inputs)
    first = _grads((output,), inputs, (None,), True)
    second = _grads(first, inputs, v, create_graph)
    return _unpack(_finish((output,), create_graph), False), _unpack(_finish(second, create_graph), is_inputs_tuple)


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), H v): the Hessian is symmetric, so this is vhp's product."""
    return vhp(func, inputs, v, create_graph, strict)
