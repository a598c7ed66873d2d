"""A node of the lazy graph: one kernel call waiting to run.

A node names a kernel of the backend contract, the input tensors it reads and
the attributes it needs (axes, shapes, constants). A node may have several
outputs (fused backward kernels return several gradients); each output is a
Tensor that points at (node, index). A differentiable node with several outputs
(flash attention: the output and its softmax statistics) differentiates its
first output; `saved` holds the others for its gradient rule.
"""

import itertools
import weakref

from gradcraft.engine.lazy import Storage, sweep_readers

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
        # The node reads each input at its memory's version now: if that memory is later written in
        # place, recomputing this node would silently use new data. It registers (weakly) as a
        # reader of that memory (engine/lazy.py), so a write can first give it a copy of the old data.
        versions = []
        ref = weakref.ref(self)
        for t in inputs:
            storage = t._storage
            if storage is None:
                storage = t._storage = Storage()
            versions.append(storage.version)
            readers = storage.readers
            if readers is None:
                storage.readers = [ref]
            else:
                readers.append(ref)
                if not len(readers) & 63:
                    sweep_readers(storage)
        self.input_versions = tuple(versions)
        self.saved = ()  # outputs 1.. of a differentiable multi-output node, for its gradient rule
        self.serial = next(_SERIALS)
        self.view_out = None  # a view op's output, weakly, where ops/inplace.py may need it (ops/function.py)
        # the id its outputs' values are kept under while a schedule runs (engine/fusion.py's groups
        # stand in for a node and keep its id)
        self.output_id = id(self)

    def __repr__(self) -> str:
        return f"Node({self.op}, {len(self.inputs)} inputs, {self.attrs})"
