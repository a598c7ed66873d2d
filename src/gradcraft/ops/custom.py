"""The graph nodes of a user-defined autograd Function (gradcraft.autograd.Function).

The Function's forward runs without recording; its outputs are then tied into the graph through
`passthrough` nodes, whose kernel returns its first input and only reads the others:

    hub      = passthrough(token, *tensor inputs)   (a 0-element tensor; reads the inputs)
    output_i = passthrough(value_i, hub)            (value_i: what forward returned)

Backward reaches every output's node before the hub (the hub is their input), so the outputs'
rules only collect their gradients into the record; the hub's rule then calls the record's
backward once, with all of them, and returns the gradients of the inputs. `record` is any object
with `collect(index, grad)` and `backward(node) -> one gradient (or None) per tensor input`
(gradcraft/autograd/function.py's).
"""

from gradcraft import dtypes
from gradcraft.backend import opspec
from gradcraft.ops.creation import zeros
from gradcraft.ops.function import apply, gradient


def hub(record, tensor_inputs: tuple):
    """The node every output of one call hangs from; its inputs are the call's tensor inputs."""
    token = zeros(0, dtype=dtypes.float32, device=tensor_inputs[0].device)
    return apply(opspec.PASSTHROUGH, (token, *tensor_inputs), {"record": record, "index": -1}, (0,), dtypes.float32)


def output(value, hub_tensor, record, index: int):
    """Output `index` of the call: value's data, differentiable through the hub."""
    return apply(
        opspec.PASSTHROUGH,
        (value, hub_tensor),
        {"record": record, "index": index},
        value.shape,
        value.dtype,
        device=value.device,
    )


@gradient(opspec.PASSTHROUGH)
def _passthrough_grad(node, out, grad):
    record, index = node.attrs["record"], node.attrs["index"]
    if index >= 0:  # an output: hand its gradient to the record; the hub gets a placeholder
        record.collect(index, grad)
        return (None, zeros(0, dtype=dtypes.float32, device=node.inputs[1].device))
    return (None, *record.backward(node))
