"""torch.autograd.Function: an op whose forward and backward the user writes.

    class Exp(Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, grad):
            (y,) = ctx.saved_tensors
            return grad * y

    y = Exp.apply(x)

forward runs with gradient recording off; its outputs join the graph through the nodes of
gradcraft/ops/custom.py, whose gradient rule calls backward with the gradients of every output (zeros
for an output that got none, unless ctx.set_materialize_grads(False)) and takes one gradient per
forward argument (None for non-tensors and inputs that need none). The newer style, a forward without
ctx and a `setup_context(ctx, inputs, output)`, works too. backward records its ops only when the
backward pass was asked to (create_graph=True), so a backward written in tensor ops gives gradients of
gradients; `once_differentiable` runs it without recording.
"""

from __future__ import annotations

import functools

from gradcraft.errors import RuntimeError_
from gradcraft.ops import custom
from gradcraft.ops.creation import zeros_like
from gradcraft.ops.function import is_grad_enabled, no_grad
from gradcraft.tensor import Tensor, version

_SAVED_FREED = (
    "Trying to backward through the graph a second time (or directly access saved tensors after they have "
    "already been freed). Saved intermediate values of the graph are freed when you call .backward() or "
    "autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second time or "
    "if you need to access saved tensors after calling backward."
)


class FunctionCtx:
    """The `ctx` of forward and backward: any attribute can be set on it to pass state along."""

    def __init__(self):
        self._saved = None
        self._saved_versions = ()
        self._freed = False
        self.needs_input_grad = ()
        self.materialize_grads = True
        self._non_differentiable = ()
        self._dirty = ()

    def save_for_backward(self, *tensors) -> None:
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(
                    f"save_for_backward can only save variables, but argument {len(tensors)} is not a Tensor"
                )
        self._saved = tensors
        self._saved_versions = tuple(None if t is None else version(t) for t in tensors)

    @property
    def saved_tensors(self) -> tuple:
        if self._freed:
            raise RuntimeError_(_SAVED_FREED)
        if self._saved is None:
            return ()
        for t, saved_version in zip(self._saved, self._saved_versions):
            if t is not None and version(t) != saved_version:
                raise RuntimeError_(
                    "one of the variables needed for gradient computation has been modified by an inplace "
                    f"operation: [{t.dtype.name} {list(t.shape)}] is at version {version(t)}; expected version "
                    f"{saved_version} instead"
                )
        return tuple(self._saved)

    saved_variables = saved_tensors

    def mark_non_differentiable(self, *tensors) -> None:
        self._non_differentiable = tensors

    def mark_dirty(self, *tensors) -> None:
        self._dirty = tensors

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = bool(value)


class _Record:
    """One call of a Function: what its backward needs (ops/custom.py's record)."""

    def __init__(self, cls, ctx, args, outputs):
        self.cls, self.ctx, self.args, self.outputs = cls, ctx, args, outputs
        self.grads: dict = {}
        self.name = f"{cls.__name__}Backward"

    def collect(self, index, grad) -> None:
        previous = self.grads.get(index)
        self.grads[index] = grad if previous is None else previous + grad

    def backward(self, node) -> list:
        grads = []
        for i, value in enumerate(self.outputs):
            g = self.grads.pop(i, None)
            if g is None and self.ctx.materialize_grads and isinstance(value, Tensor):
                g = zeros_like(value)
            grads.append(g)
        result = self.cls.backward(self.ctx, *grads)
        if not isinstance(result, tuple):
            result = (result,)
        n_args = len(self.args)
        if len(result) < n_args or any(r is not None for r in result[n_args:]):
            raise RuntimeError_(
                f"function {self.name} returned an incorrect number of gradients (expected {n_args}, got {len(result)})"
            )
        tensor_grads = []
        for position, (arg, g) in enumerate(zip(self.args, result)):
            if not isinstance(arg, Tensor):
                if g is not None:
                    raise RuntimeError_(
                        f"function {self.name} returned a gradient different than None at position {position + 1}, "
                        "but the corresponding forward input was not a Variable"
                    )
                continue
            tensor_grads.append(None if g is None else self._checked(g, arg, position))
        return tensor_grads

    def _checked(self, g, arg, position):
        if not isinstance(g, Tensor):
            raise TypeError(
                f"function {self.name} returned a {type(g).__name__} as gradient {position}; expected a Tensor"
            )
        if tuple(g.shape) != tuple(arg.shape):
            extra = len(g.shape) - len(arg.shape)
            sizes_match = extra >= 0 and all(a in (1, b) for a, b in zip(arg.shape, g.shape[extra:]))
            if not sizes_match:
                raise RuntimeError_(
                    f"Function {self.name} returned an invalid gradient at index {position} - got {list(g.shape)} "
                    f"but expected shape compatible with {list(arg.shape)}"
                )
            if extra:
                g = g.sum(dim=tuple(range(extra)))
            dims = tuple(i for i, (a, b) in enumerate(zip(arg.shape, g.shape)) if a == 1 and b != 1)
            if dims:
                g = g.sum(dim=dims, keepdim=True)
        if g.dtype != arg.dtype:
            g = g.to(arg.dtype)
        return g


class Function:
    """Subclass with @staticmethod forward(ctx, *args) and backward(ctx, *grads); call `.apply`."""

    def __init__(self, *args, **kwargs):
        pass

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError(
            "You must implement either the backward or vjp method for your custom autograd.Function to use it "
            "with backward mode AD."
        )

    vjp = backward

    @classmethod
    def apply(cls, *args, **kwargs):
        ctx = FunctionCtx()
        recording = is_grad_enabled()
        ctx.needs_input_grad = tuple(recording and isinstance(a, Tensor) and a.requires_grad for a in args)
        new_style = cls.setup_context is not Function.setup_context
        with no_grad():
            if new_style:
                result = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, result)
            else:
                result = cls.forward(ctx, *args, **kwargs)
        tensor_inputs = tuple(a for a in args if isinstance(a, Tensor))
        if not any(ctx.needs_input_grad):
            return result
        outputs = result if isinstance(result, tuple) else (result,)
        record = _Record(cls, ctx, args, outputs)
        hub = custom.hub(record, tensor_inputs)
        excluded = {id(t) for t in ctx._non_differentiable}
        wrapped = tuple(
            custom.output(value, hub, record, i)
            if isinstance(value, Tensor) and value.dtype.is_floating_point and id(value) not in excluded
            else value
            for i, value in enumerate(outputs)
        )
        record.hub = hub
        return wrapped if isinstance(result, tuple) else wrapped[0]


class InplaceFunction(Function):
    def __init__(self, inplace: bool = False):
        self.inplace = inplace


def once_differentiable(fn):
    """A backward that is not itself differentiable (gradcraft's backward never records anyway)."""

    @functools.wraps(fn)
    def wrapper(ctx, *args):
        with no_grad():
            return fn(ctx, *args)

    return wrapper


BackwardCFunction = FunctionCtx
