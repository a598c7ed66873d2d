"""torch.autograd.grad and torch.autograd.backward (first-order), and the legacy Variable.

`grad(outputs, inputs)` walks the graph as backward does (autograd/engine.py), but returns the
gradients of `inputs` (leaves or not) instead of accumulating them into `.grad`. Being lazy, the
walk builds gradient nodes for the whole graph, and only those the requested gradients need run.
"""

from __future__ import annotations

from gradcraft.autograd.engine import release_graph
from gradcraft.engine.realize import realize
from gradcraft.errors import RuntimeError_, UserError
from gradcraft.ops import elementwise as ew
from gradcraft.ops.creation import ones_like, zeros_like
from gradcraft.ops.function import GRADIENTS, no_grad
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
    if create_graph:
        raise UserError("autograd.grad(create_graph=True) is not supported: gradients of gradients are not implemented")
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
    with no_grad():
        for t in reversed(order):
            g = grads.pop(id(t), None)
            if g is None:
                continue
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
            for inp, g_in in zip(node.inputs, GRADIENTS[node.op](node, t, g)):
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
    realize([r for r in results if r is not None] + list(outputs), keep_saved=bool(retain_graph))
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
    if create_graph:
        raise UserError("backward(create_graph=True) is not supported: gradients of gradients are not implemented")
    tensors = _sequence(tensors)
    grad_tensors = grad_tensors if grad_tensors is not None else grad_variables
    grad_tensors = (None,) * len(tensors) if grad_tensors is None else _sequence(grad_tensors)
    if len(grad_tensors) != len(tensors):
        raise RuntimeError_(f"got {len(grad_tensors)} gradients for {len(tensors)} tensors")
    if inputs is not None:
        inputs = _sequence(inputs)
        gradients = grad(tensors, inputs, grad_tensors, retain_graph=retain_graph, allow_unused=True)
        for inp, g in zip(inputs, gradients):
            if g is not None:
                inp.grad = g if inp.grad is None else (inp.grad + g).realize()
        return
    for i, (t, g) in enumerate(zip(tensors, grad_tensors)):
        t.backward(g, retain_graph=bool(retain_graph) or i < len(tensors) - 1)


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
