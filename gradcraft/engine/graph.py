"""A node of the lazy graph: one kernel call waiting to run.

A node names a kernel of the backend contract, the input tensors it reads and
the attributes it needs (axes, shapes, constants). A node may have several
outputs (fused backward kernels return several gradients); each output is a
Tensor that points at (node, index). A differentiable node with several outputs
(flash attention: the output and its softmax statistics) differentiates its
first output; `saved` holds the others for its gradient rule.
"""

import itertools

# Creation order of nodes: backward() tells the nodes its gradient rules built from the caller's.
_SERIALS = itertools.count()


def serial_now() -> int:
    """A number below the serial of every node built from now on."""
    return next(_SERIALS)


class Node:
    __slots__ = (
        "op",
        "inputs",
        "attrs",
        "n_outputs",
        "device",
        "input_versions",
        "saved",
        "serial",
        "view_out",
        "output_id",
        "__weakref__",
    )

    def __init__(self, op: str, inputs: tuple, attrs: dict, device: str, n_outputs: int = 1):
        self.op = op
        self.inputs = inputs
        self.attrs = attrs
        self.n_outputs = n_outputs
        self.device = device
        # Versions of the realized inputs when the node was built: if one is later
        # modified in place, recomputing this node would silently use new data.
        # (a list first: faster than a generator; a lazy input without a Storage yet is at version 0)
        self.input_versions = tuple([0 if t._storage is None else t._storage.version for t in inputs])
        self.saved = ()  # outputs 1.. of a differentiable multi-output node, for its gradient rule
        self.serial = next(_SERIALS)
        self.view_out = None  # a view op's output, weakly, where ops/inplace.py may need it (ops/function.py)
        # the id its outputs' values are kept under while a schedule runs (engine/fusion.py's groups
        # stand in for a node and keep its id)
        self.output_id = id(self)

    def __repr__(self) -> str:
        return f"Node({self.op}, {len(self.inputs)} inputs, {self.attrs})"
