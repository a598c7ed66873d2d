"""Reverse-mode differentiation over the lazy graph.

`backward(loss)` walks the graph from `loss` in reverse topological order and
asks each op's gradient rule (registered in gradcraft.ops) for the gradients
of its inputs. The rules build more lazy nodes, so the whole gradient is one
graph; it is realized at the end in a single schedule, together with `loss`
itself, and every intermediate is freed after its last reader.
"""

import weakref

from gradcraft.engine.realize import realize
from gradcraft.errors import RuntimeError_, UserError
from gradcraft.ops import elementwise as ew
from gradcraft.ops.function import GRADIENTS, no_grad
from gradcraft.ops.inplace import MODIFIED_SAVED
from gradcraft.ops.movement import merge_slice_gradients


# Tensors whose graph a backward pass has freed (PyTorch: a second backward needs retain_graph=True),
# by id (a WeakSet would compare tensors with ==, which is elementwise).
_FREED: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()


def _was_freed(t) -> bool:
    return _FREED.get(id(t)) is t
_SECOND_BACKWARD = ("trying to backward through the graph a second time (its intermediate results were freed by the "
                    "first backward); pass retain_graph=True to the first backward() if you need to")


def _topological(root) -> list:
    """Tensors that lead to root through differentiable ops, inputs before outputs."""
    order, seen = [], set()
    stack = [(root, False)]
    while stack:
        t, expanded = stack.pop()
        if expanded:
            order.append(t)
            continue
        if id(t) in seen:
            continue
        seen.add(id(t))
        stack.append((t, True))
        if t._node is not None:
            for inp in t._node.inputs:
                if inp.requires_grad:
                    if id(inp) not in seen:
                        stack.append((inp, False))
                elif _FREED and inp._node is None and inp.dtype.is_floating_point and _was_freed(inp):
                    raise RuntimeError_(_SECOND_BACKWARD)
    return order


def backward(root, gradient=None, realize_now: bool = True, retain_graph: bool = False) -> None:
    if not root.requires_grad and _was_freed(root):
        raise RuntimeError_(_SECOND_BACKWARD)
    if not root.requires_grad:
        raise UserError("backward() called on a tensor that does not require grad (no input had requires_grad=True, "
                        "or it was computed under no_grad)")
    if gradient is None:
        if root.numel() != 1:
            raise UserError(f"backward() on a non-scalar tensor of shape {root.shape} needs a gradient argument "
                            "of the same shape (or reduce it first, e.g. .sum())")
        from gradcraft.ops.creation import ones
        gradient = ones(root.shape, dtype=root.dtype, device=root.device)
    elif tuple(gradient.shape) != root.shape:
        raise UserError(f"backward(): gradient shape {tuple(gradient.shape)} does not match tensor shape {root.shape}")

    order = _topological(root)
    grads = {id(root): gradient}
    leaves = []
    with no_grad():
        for t in reversed(order):
            g = grads.pop(id(t), None)
            if g is None:
                continue
            if t._node is None:
                if t.grad is not None:
                    g = ew.add(t.grad, g)
                t.grad = ew.cast(g, t.dtype)
                leaves.append(t)
                continue
            if MODIFIED_SAVED and t._node in MODIFIED_SAVED:
                raise RuntimeError_(f"one of the variables needed for gradient computation has been modified by an "
                                    f"inplace operation (an input of {t._node.op}); clone it before the in-place "
                                    f"operation, or do the operation out of place")
            rule = GRADIENTS[t._node.op]
            for inp, grad in zip(t._node.inputs, rule(t._node, t, g)):
                if grad is None or not inp.requires_grad:
                    continue
                previous = grads.get(id(inp))
                if previous is None:
                    grads[id(inp)] = grad
                else:
                    merged = merge_slice_gradients(previous, grad)
                    grads[id(inp)] = merged if merged is not None else ew.add(previous, grad)

    if realize_now:
        realize([leaf.grad for leaf in leaves] + [root], keep_saved=retain_graph)
        if not retain_graph:
            release_graph(order)


def release_graph(order) -> None:
    """After backward: realized intermediates become constants, freeing the graph behind them."""
    for t in order:
        if t._node is not None and t._buf is not None:
            t._node.saved = ()  # (saved outputs point back at their node: drop the cycle now)
            t._node = None
            t._requires_grad = False
            _FREED[id(t)] = t
