"""Reverse-mode differentiation over the lazy graph.

`backward(loss)` walks the graph from `loss` in reverse topological order and
asks each op's gradient rule (registered in gradcraft.ops) for the gradients
of its inputs. The rules build more lazy nodes, so the whole gradient is one
graph; it is realized at the end in a single schedule, together with `loss`
itself, and every intermediate is freed after its last reader.
"""

from gradcraft.engine.realize import realize
from gradcraft.errors import UserError
from gradcraft.ops import elementwise as ew
from gradcraft.ops.function import GRADIENTS, no_grad
from gradcraft.ops.movement import merge_slice_gradients


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
            stack.extend((inp, False) for inp in t._node.inputs if inp.requires_grad and id(inp) not in seen)
    return order


def backward(root, gradient=None, realize_now: bool = True, on_grad_ready=None) -> None:
    """on_grad_ready(leaf, buffer): called for each leaf as soon as its gradient's last kernel has
    been issued, while the rest of the backward still runs (see realize's on_ready)."""
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
        hook = None
        if on_grad_ready is not None:
            owners: dict[int, list] = {}
            for leaf in leaves:
                owners.setdefault(id(leaf.grad), []).append(leaf)

            def hook(target, buffer):
                for leaf in owners.get(id(target), ()):
                    on_grad_ready(leaf, buffer)
        realize([leaf.grad for leaf in leaves] + [root], keep_saved=False, on_ready=hook)
        release_graph(order)


def release_graph(order) -> None:
    """After backward: realized intermediates become constants, freeing the graph behind them."""
    for t in order:
        if t._node is not None and t._buf is not None:
            t._node.saved = ()  # (saved outputs point back at their node: drop the cycle now)
            t._node = None
            t._requires_grad = False
