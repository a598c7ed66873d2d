"""How an op becomes a graph node, and where gradient rules are registered.

`apply(opspec.OP, inputs, ...)` (the op's spec, backend/opspec.py) builds the node
for one kernel call and returns its output tensor(s); nothing runs until something
asks for the data.

`@gradient(opspec.OP)` registers the rule that turns the gradient of an op's output
into gradients of its inputs. Rules are written in Tensor ops, so the same
rule serves every device, and the gradient graph is lazy like the forward one.
"""

import threading
import weakref

from gradcraft.backend import OPTIONAL
from gradcraft.backend.opspec import SPECS
from gradcraft.device import get_backend
from gradcraft.engine.graph import Node
from gradcraft.tensor import node_of, lazy_output
from gradcraft.engine.lazy import live_readers, register_reader, storage_readers  # noqa: F401 (the ops' names)

GRADIENTS: dict = {}
_state = threading.local()
VIEW_OPS = frozenset(name for name, spec in SPECS.items() if spec.view)  # reshape, permute, expand, slice
# A lazy view keeps a weak reference to its output on its node (node.view_out): a view aliases its
# base when the base is written in place, and gradcraft/ops/inplace.py follows it to the ops built on
# it (and, for a recorded write, to the other views of the same base, which see the write).


def gradient(op: str):
    """Register `rule(node, out, grad) -> tuple of input gradients (None where there is none)` as the
    gradient of op (its spec, backend/opspec.py: `@gradient(opspec.RMS_NORM)`)."""

    def register(rule):
        GRADIENTS[op] = SPECS[op].grad_rule = rule
        return rule

    return register


def is_grad_enabled() -> bool:
    return getattr(_state, "grad_enabled", True)


class no_grad:
    """Context manager (and decorator) under which ops record no gradient graph."""

    def __enter__(self):
        self._previous = is_grad_enabled()
        _state.grad_enabled = False

    def __exit__(self, *exc):
        _state.grad_enabled = self._previous

    def __call__(self, fn):
        def wrapper(*args, **kwargs):
            with no_grad():
                return fn(*args, **kwargs)

        wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
        return wrapper


class enable_grad(no_grad):
    def __enter__(self):
        self._previous = is_grad_enabled()
        _state.grad_enabled = True


def apply(
    op: str,
    inputs: tuple,
    attrs: dict | None,
    shape,
    dtype,
    device=None,
    n_outputs: int = 1,
    saves_outputs: bool = False,
):
    """Build a node for `op` and return its output Tensor (a tuple when n_outputs > 1).

    An optional fused kernel the device's backend lacks (backend.OPTIONAL) is computed from
    primitives instead (ops/fallback.py), and its gradient follows theirs.

    For several outputs, `shape` and `dtype` are sequences with one entry per output. Such a node
    has no gradient unless `saves_outputs`: then its first output is differentiable and the others are
    what its gradient rule reads (`node.saved`), e.g. flash attention's log-sum-exp.
    """
    device = device or inputs[0].device
    if op in OPTIONAL and not get_backend(device).has_kernel(op):
        from gradcraft.ops.fallback import FALLBACKS  # (imports Tensor ops: not at module level)

        return FALLBACKS[op](*inputs, **(attrs or {}))
    node = Node(op, tuple(inputs), attrs or {}, device, n_outputs)  # (registers itself as the inputs' reader)
    first_dtype = dtype if n_outputs == 1 else dtype[0]
    requires_grad = (
        (n_outputs == 1 or saves_outputs)
        and op in GRADIENTS
        and is_grad_enabled()
        and any(t.requires_grad for t in inputs)
        and first_dtype.is_floating_point
    )
    if n_outputs == 1:
        out = lazy_output(node, 0, shape, dtype, device, requires_grad)
        if op in VIEW_OPS:
            node.view_out = weakref.ref(out)
        return out
    outputs = tuple(
        lazy_output(node, i, s, d, device, requires_grad and i == 0) for i, (s, d) in enumerate(zip(shape, dtype))
    )
    if requires_grad:
        node.saved = outputs[1:]
    return outputs


def view_output(node):
    """The tensor a lazy view node computes, while it exists and is still lazy (else None)."""
    out = node.view_out() if node.view_out is not None else None
    return out if out is not None and node_of(out) is node and not out.is_realized else None


# Tensors whose stale readers must be refused, not given the old data: the dropout state, because a
# dropout node's backward, built later, reads the state as it is then (ops/creation.py). ops/inplace.py
# asks refuses_stale_readers before it keeps old data for a reader.
# (By id: a WeakSet would compare tensors with ==, which is elementwise.)
_REFUSE_STALE_READERS: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()


def refuse_stale_readers(t) -> None:
    """After an in-place write to t, lazy ops built from its old contents refuse to run (instead of
    computing from a copy of them)."""
    _REFUSE_STALE_READERS[id(t)] = t


def refuses_stale_readers(t) -> bool:
    return _REFUSE_STALE_READERS.get(id(t)) is t
