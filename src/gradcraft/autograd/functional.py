"""torch.autograd.grad and torch.autograd.backward (create_graph for gradients of gradients), the legacy
Variable, and torch.autograd.functional's jacobian, hessian, vjp, jvp, vhp, hvp (at the end).

`grad(outputs, inputs)` walks the graph as backward does (autograd/engine.py), but returns the
gradients of `inputs` (leaves or not) instead of accumulating them into `.grad`. Being lazy, the
walk builds gradient nodes for the whole graph, and only those the requested gradients need run.
"""

from __future__ import annotations

from gradcraft.autograd.engine import backward as engine_backward, execution_order, release_graph
from gradcraft.engine.realize import realize as realize_graph
from gradcraft.errors import RuntimeError_, UserError
from gradcraft.ops import elementwise as ew
from gradcraft.ops.creation import ones_like, zeros_like
from gradcraft.autograd import hooks as tensor_hooks
from gradcraft.ops.function import GRADIENTS, enable_grad, no_grad
from gradcraft.ops.double_backward import second_order_rule
from gradcraft.ops.inplace import lost_saved_value
from gradcraft.ops.movement import merge_slice_gradients
from gradcraft.tensor import Tensor, node_of


def _sequence(x) -> tuple:
    return (x,) if isinstance(x, Tensor) else tuple(x)


def _topological(roots) -> list:
    """Tensors that lead to any root through differentiable ops, inputs before outputs."""
    order, seen = [], set()
    stack = [(r, False) for r in reversed(roots)]
    while stack:
        t, expanded = stack.pop()
        if expanded:
            order.append(t)
            continue
        if id(t) in seen:
            continue
        seen.add(id(t))
        stack.append((t, True))
        node = node_of(t)
        if node is not None:
            stack.extend((inp, False) for inp in node.inputs if inp.requires_grad and id(inp) not in seen)
    return order


def _initial_gradients(outputs, grad_outputs) -> dict:
    if grad_outputs is None:
        grad_outputs = (None,) * len(outputs)
    grad_outputs = _sequence(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise RuntimeError_(
            f"grad requires one gradient per output: got {len(grad_outputs)} for {len(outputs)} outputs"
        )
    grads: dict = {}
    for i, (out, g) in enumerate(zip(outputs, grad_outputs)):
        if not out.requires_grad:
            raise RuntimeError_(f"element {i} of tensors does not require grad and does not have a grad_fn")
        if g is None:
            if out.numel() != 1:
                raise RuntimeError_("grad can be implicitly created only for scalar outputs")
            g = ones_like(out)
        elif not isinstance(g, Tensor):
            g = ones_like(out) * g
        elif tuple(g.shape) != tuple(out.shape):
            raise RuntimeError_(
                f"Mismatch in shape: grad_output[{i}] has a shape of {list(g.shape)} and output[{i}] has a shape "
                f"of {list(out.shape)}."
            )
        grads[id(out)] = g if id(out) not in grads else ew.add(grads[id(out)], g)
    return grads


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    only_inputs: bool = True,
    allow_unused: bool | None = None,
    is_grads_batched: bool = False,
    materialize_grads: bool = False,
) -> tuple:
    """The gradients of the outputs (weighted by grad_outputs) with respect to each input."""
    if retain_graph is None:
        retain_graph = create_graph
    if is_grads_batched:
        raise UserError("autograd.grad(is_grads_batched=True) is not supported")
    if allow_unused is None:
        allow_unused = materialize_grads
    outputs, inputs = _sequence(outputs), _sequence(inputs)
    for inp in inputs:
        if not inp.requires_grad:
            raise RuntimeError_("One of the differentiated Tensors does not require grad")
    grads = _initial_gradients(outputs, grad_outputs)
    wanted = {id(inp) for inp in inputs}
    found: dict = {}
    order = _topological(outputs)
    hooked = tensor_hooks.has_hooks()
    if hooked:
        order = execution_order(order)
    # create_graph: the gradient rules' ops are recorded like any others, so the results can be
    # differentiated again
    with enable_grad() if create_graph else no_grad():
        for t in reversed(order):
            g = grads.pop(id(t), None)
            if g is None:
                continue
            if hooked:
                g = tensor_hooks.run_hooks(t, g)
            if id(t) in wanted:
                found[id(t)] = g
            node = node_of(t)
            if node is None:
                continue
            if lost_saved_value(node):
                raise RuntimeError_(
                    "one of the variables needed for gradient computation has been modified by an inplace "
                    f"operation (an input of {node.op}); clone it before the in-place operation"
                )
            rule = second_order_rule(node.op, GRADIENTS) if create_graph else GRADIENTS[node.op]
            for inp, g_in in zip(node.inputs, rule(node, t, g)):
                if g_in is None or not inp.requires_grad:
                    continue
                previous = grads.get(id(inp))
                if previous is None:
                    grads[id(inp)] = g_in
                else:
                    merged = merge_slice_gradients(previous, g_in)
                    grads[id(inp)] = merged if merged is not None else ew.add(previous, g_in)
        results = []
        for inp in inputs:
            g = found.get(id(inp))
            if g is None:
                if not allow_unused:
                    raise RuntimeError_(
                        "One of the differentiated Tensors appears to not have been used in the graph. "
                        "Set allow_unused=True if this is the desired behavior."
                    )
                results.append(zeros_like(inp) if materialize_grads else None)
            else:
                results.append(ew.cast(g, inp.dtype) if g.dtype != inp.dtype else g)
    realize_graph([r for r in results if r is not None] + list(outputs), keep_saved=bool(retain_graph))
    if not retain_graph:
        release_graph(order)
    return tuple(results)


def backward(
    tensors,
    grad_tensors=None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    grad_variables=None,
    inputs=None,
) -> None:
    """Accumulate the gradients of `tensors` into the leaves' .grad (or only into `inputs`')."""
    tensors = _sequence(tensors)
    grad_tensors = grad_tensors if grad_tensors is not None else grad_variables
    grad_tensors = (None,) * len(tensors) if grad_tensors is None else _sequence(grad_tensors)
    if len(grad_tensors) != len(tensors):
        raise RuntimeError_(f"got {len(grad_tensors)} gradients for {len(tensors)} tensors")
    if inputs is not None:
        inputs = _sequence(inputs)
        gradients = grad(
            tensors, inputs, grad_tensors, retain_graph=retain_graph, create_graph=create_graph, allow_unused=True
        )
        for inp, g in zip(inputs, gradients):
            if g is not None:
                inp.grad = g if inp.grad is None else (inp.grad + g).realize()
        return
    for i, (t, g) in enumerate(zip(tensors, grad_tensors)):
        t.backward(g, retain_graph=bool(retain_graph) or i < len(tensors) - 1, create_graph=create_graph)


class _VariableMeta(type):
    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, Tensor)


class Variable(metaclass=_VariableMeta):
    """The legacy torch.autograd.Variable: Variable(t, requires_grad=...) is a tensor sharing t's data,
    a leaf of its own (as in PyTorch, t itself is left as it was)."""

    def __new__(cls, data=None, requires_grad: bool = False, volatile: bool = False):
        t = data.detach() if isinstance(data, Tensor) else Tensor(data)
        if requires_grad:
            t.requires_grad_(True)
        return t


# ------------------------------------------------------------ torch.autograd.functional
# jacobian, hessian, vjp, jvp, vhp, hvp, composed from grad: a Jacobian row per output element
# (reverse mode), a Hessian as the Jacobian of a Jacobian built with create_graph=True, a
# Jacobian-vector product through the double-backward trick (the vector-Jacobian product is linear in
# its vector, so differentiating it with respect to that vector gives J v). Inputs and results follow
# PyTorch's conventions: a tensor or a tuple of tensors in, the same structure out, and results cut
# from the graph unless create_graph.


def _tuple(x, name: str) -> tuple[bool, tuple]:
    is_tuple = isinstance(x, (tuple, list))
    items = tuple(x) if is_tuple else (x,)
    for i, item in enumerate(items):
        if not isinstance(item, Tensor):
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


def _tensor_backward(
    self,
    gradient=None,
    retain_graph=None,
    create_graph: bool = False,
    inputs=None,
    realize: bool = True,
    on_grad_ready=None,
) -> None:
    """Accumulate d(self)/d(leaf) into `.grad` of every leaf that requires grad.

    With realize=False the gradients stay lazy, so the caller can fold them
    (and the optimizer update) into one schedule. retain_graph=True keeps the
    graph for another backward, as in PyTorch. on_grad_ready(leaf, buffer) is called as
    each leaf's gradient is issued, during the backward (data parallelism's buckets).
    """
    if inputs is not None:
        return backward(self, gradient, retain_graph, create_graph, inputs=inputs)
    engine_backward(self, gradient, realize, bool(retain_graph), on_grad_ready, create_graph=bool(create_graph))


# Tensor.backward and the gradient hooks (here, not in tensor.py: the Tensor sits below autograd)
_tensor_backward.__name__, _tensor_backward.__qualname__ = "backward", "Tensor.backward"
Tensor.backward = _tensor_backward
Tensor.register_hook = tensor_hooks.register_hook
Tensor.register_post_accumulate_grad_hook = tensor_hooks.register_post_accumulate_grad_hook
Tensor.retain_grad = tensor_hooks.retain_grad
Tensor.retains_grad = property(tensor_hooks.retains_grad)
