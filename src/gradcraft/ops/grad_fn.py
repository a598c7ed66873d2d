"""Tensor.grad_fn: the graph node that made a tensor, as PyTorch shows it.

An object per node, of a class named as PyTorch names its backward node (`MulBackward0`, a custom
Function's `MyFnBackward`), with `name()` and `next_functions` (one `(node, 0)` per input: the
input's grad_fn, an `AccumulateGrad` for a leaf that requires grad, None for a constant). None for
leaves and for tensors that do not require grad. The same node gives the same object.
"""

import weakref

from gradcraft.backend.opspec import SPECS
from gradcraft.tensor import node_of

_CLASSES: dict = {}
_NODES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class BackwardNode:
    """A node of the backward graph (torch.autograd.graph.Node's reading side)."""

    def __init__(self, inputs):
        self._inputs = inputs

    def name(self) -> str:
        return type(self).__name__

    @property
    def next_functions(self) -> tuple:
        return tuple((_function_of(t), 0) for t in self._inputs)

    @property
    def metadata(self) -> dict:
        return {}

    def __repr__(self) -> str:
        return f"<{self.name()} object at {hex(id(self))}>"


class AccumulateGrad(BackwardNode):
    """Where a leaf's gradient is accumulated into its .grad (`variable` is the leaf)."""

    def __init__(self, variable):
        super().__init__(())
        self.variable = variable


def _node_class(name: str) -> type:
    cls = _CLASSES.get(name)
    if cls is None:
        cls = _CLASSES[name] = type(name, (BackwardNode,), {})
    return cls


def _torch_name(op: str) -> str:
    return SPECS[op].torch_node  # (the op's spec, backend/opspec.py)


def _function_of(t):
    """The next_functions entry for an input: its grad_fn, AccumulateGrad, or None."""
    if t is None or not t.requires_grad:
        return None
    if node_of(t) is None:
        return AccumulateGrad(t)
    return grad_fn(t)


def grad_fn(t):
    """Tensor.grad_fn (None for leaves and tensors outside any gradient graph)."""
    node = node_of(t)
    if node is None or not t.requires_grad:
        return None
    found = _NODES.get(node)
    if found is not None:
        return found
    if node.op == "passthrough":  # a custom autograd Function's output (ops/custom.py)
        record = node.attrs["record"]
        inputs = tuple(a for a in record.args if hasattr(a, "requires_grad"))
        fn = _node_class(record.name)(inputs)
    else:
        fn = _node_class(_torch_name(node.op))(tuple(node.inputs))
    _NODES[node] = fn
    return fn
