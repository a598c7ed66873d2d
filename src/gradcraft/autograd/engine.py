"""Reverse-mode differentiation over the lazy graph.

`backward(loss)` walks the graph from `loss` in reverse topological order and
asks each op's gradient rule (registered in gradcraft.ops) for the gradients
of its inputs. The rules build more lazy nodes, so the whole gradient is one
graph; it is realized at the end in a single schedule, together with `loss`
itself, and every intermediate is freed after its last reader.
"""

import sys

from gradcraft.amp import policy as autocast_policy
from gradcraft.engine.graph import serial_now
from gradcraft.engine.realize import realize as realize_graph
from gradcraft.errors import RuntimeError_, UserError
from gradcraft.ops import elementwise as ew
from gradcraft.autograd import hooks as tensor_hooks
from gradcraft.ops.creation import ones
from gradcraft.ops.double_backward import second_order_rule
from gradcraft.ops.function import GRADIENTS, enable_grad, live_readers, no_grad
from gradcraft.ops.inplace import lost_saved_value
from gradcraft.ops.movement import merge_slice_gradients
from gradcraft.tensor import free_graph, graph_freed, node_of


# A backward pass through a tensor whose graph an earlier one freed (PyTorch: retain_graph=True).
_SECOND_BACKWARD = (
    "trying to backward through the graph a second time (its intermediate results were freed by the "
    "first backward); pass retain_graph=True to the first backward() if you need to"
)


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
        node = node_of(t)
        if node is not None:
            for inp in node.inputs:
                if inp.requires_grad:
                    if id(inp) not in seen:
                        stack.append((inp, False))
                elif graph_freed(inp):
                    raise RuntimeError_(_SECOND_BACKWARD)
    return order


def execution_order(order: list) -> list:
    """`order` (inputs before outputs) rearranged to the order in which PyTorch's engine runs the
    backward nodes, reversed: the latest-built node first, a leaf as soon as its last reader is done.
    Only observable through hooks, so only used when some are registered."""
    key = {}
    for t in order:
        node = node_of(t)
        if node is not None:
            key[id(t)] = node.serial
            for inp in node.inputs:
                if node_of(inp) is None:
                    key[id(inp)] = min(key.get(id(inp), node.serial), node.serial) - 0.5
    return sorted(order, key=lambda t: key.get(id(t), -1))


def backward(
    root, gradient=None, realize_now: bool = True, retain_graph: bool = False, on_grad_ready=None, create_graph=False
) -> None:
    """on_grad_ready(leaf, buffer): called for each leaf as soon as its gradient's last kernel has
    been issued, while the rest of the backward still runs (see realize's on_ready).
    create_graph: the gradient rules' ops are recorded (they are ordinary ops), so the leaves' .grad
    can be differentiated again; the forward graph is kept, as PyTorch's retain_graph defaults to it."""
    retain_graph = retain_graph or create_graph
    if not root.requires_grad and graph_freed(root):
        raise RuntimeError_(_SECOND_BACKWARD)
    if not root.requires_grad:
        raise UserError(
            "backward() called on a tensor that does not require grad (no input had requires_grad=True, "
            "or it was computed under no_grad)"
        )
    if gradient is None:
        if root.numel() != 1:
            raise UserError(
                f"backward() on a non-scalar tensor of shape {root.shape} needs a gradient argument "
                "of the same shape (or reduce it first, e.g. .sum())"
            )
        gradient = ones(root.shape, dtype=root.dtype, device=root.device)
    elif tuple(gradient.shape) != root.shape:
        raise UserError(f"backward(): gradient shape {tuple(gradient.shape)} does not match tensor shape {root.shape}")

    order = _topological(root)
    first_gradient_node = serial_now()  # nodes built after this are the gradient rules'
    grads = {id(root): gradient}
    leaves, retained = [], []
    hooked = tensor_hooks.has_hooks()
    if hooked:
        order = execution_order(order)
    # Each gradient in its forward op's dtype: not cast again by an autocast block around backward()
    with enable_grad() if create_graph else no_grad(), autocast_policy.suspended():
        for t in reversed(order):
            g = grads.pop(id(t), None)
            if g is None:
                continue
            if hooked:
                g = tensor_hooks.run_hooks(t, g, retained)
            node = node_of(t)
            if node is None:
                if t.grad is not None:
                    g = ew.add(t.grad, g)
                t.grad = ew.cast(g, t.dtype)
                leaves.append(t)
                continue
            if lost_saved_value(node):
                raise RuntimeError_(
                    f"one of the variables needed for gradient computation has been modified by an "
                    f"inplace operation (an input of {node.op}); clone it before the in-place "
                    f"operation, or do the operation out of place"
                )
            rule = second_order_rule(node.op, GRADIENTS) if create_graph else GRADIENTS[node.op]
            for inp, grad in zip(node.inputs, rule(node, t, g)):
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

        held = _held_by_caller(order, root, first_gradient_node)
        held += [t.grad for t in retained]
        realize_graph([leaf.grad for leaf in leaves] + [root] + held, keep_saved=retain_graph, on_ready=hook)
        if not retain_graph:
            release_graph(order)
    if hooked:
        tensor_hooks.run_post_accumulate_hooks(leaves)


def _held_by_caller(order, root, first_gradient_node: int) -> list:
    """Unrealized tensors of the graph that something outside it still references (the caller's
    `logits`): they are computed with the backward pass and keep their data, as PyTorch's eager
    forward pass kept it, so reading them after the optimizer has written the weights needs no copy
    of the old weights (ops/inplace.py). The count: references from the graph's own nodes, from
    `order`, from the gradient rules' nodes (built after `first_gradient_node`), from this loop and
    from getrefcount's argument are the graph's; any more are the caller's. A lazy op the caller
    built on a graph tensor outside the graph (the logits beside a fused loss) is the caller's too:
    it would otherwise keep the whole forward graph, and a lazy reader of every weight, alive until
    the caller drops it."""
    graph_nodes = {id(node_of(t)) for t in order if node_of(t) is not None}
    held = []
    for t in order:
        if t is root or node_of(t) is None or t.is_realized:
            continue
        inside = builtins_sum(
            1
            for node in live_readers(t)
            if id(node) in graph_nodes or node.serial > first_gradient_node
            for inp in node.inputs
            if inp is t
        )
        if sys.getrefcount(t) - 3 - inside > 0:
            held.append(t)
    return held


builtins_sum = sum


def release_graph(order) -> None:
    """After backward: realized intermediates become constants, freeing the graph behind them."""
    for t in order:
        node = node_of(t)
        if node is not None:
            # Saved outputs point back at their node: drop the cycle now, for lazy tensors too (a
            # flash-attention node's statistics would otherwise keep its inputs' graph, and a lazy
            # reader of every weight, alive until Python's cycle collector ran).
            node.saved = ()
            if t.is_realized:
                free_graph(t)  # (a second backward through it: PyTorch's retain_graph error)
