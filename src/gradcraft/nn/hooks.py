"""Module hooks, as torch.nn.Module's: forward pre-hooks, forward hooks and full backward hooks.

Module.__call__ comes here once a module has a hook. The order is PyTorch's: forward pre-hooks (they
may replace the positional arguments), then, with backward hooks, the tensor arguments pass through an
identity Function, forward runs, the forward hooks (they may replace the output), and the output's
top-level tensors pass through a second identity Function. The second one's backward sees the
gradients of the outputs (grad_output); the first one's, the gradients of the tensor arguments
(grad_input), and there the backward hooks run: `hook(module, grad_input, grad_output)` may return
new grad_input. Backward pre-hooks run with grad_output and may replace it.
"""

from __future__ import annotations

from collections import OrderedDict

from gradcraft.autograd.function import Function
from gradcraft.autograd.hooks import RemovableHandle
from gradcraft.ops.function import is_grad_enabled
from gradcraft.tensor import Tensor

_KINDS = ("_forward_pre_hooks", "_forward_hooks", "_backward_hooks", "_backward_pre_hooks")


def hooks_of(module, kind: str) -> OrderedDict:
    table = module.__dict__.get(kind)
    if table is None:
        table = _HookTable()
        object.__setattr__(module, kind, table)
        object.__setattr__(module, "_hooked", True)  # Module.__call__'s one test for hooks
    return table


class _HookTable(OrderedDict):
    """An OrderedDict that a handle can reference weakly."""


def add_hook(module, kind: str, hook, prepend: bool = False, **flags) -> RemovableHandle:
    table = hooks_of(module, kind)
    handle = RemovableHandle(table)
    table[handle.id] = (hook, flags)
    if prepend:
        table.move_to_end(handle.id, last=False)
    return handle


def call(module, args: tuple, kwargs: dict):
    """module(*args, **kwargs) with its hooks."""
    d = module.__dict__
    for hook, flags in list(d.get("_forward_pre_hooks", {}).values()):
        if flags.get("with_kwargs"):
            result = hook(module, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError(
                        f"forward pre-hook must return None or a tuple of (new_args, new_kwargs), but got {result}."
                    )
                args, kwargs = result
        else:
            result = hook(module, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
    backward_hooks = (d.get("_backward_hooks") or d.get("_backward_pre_hooks")) and is_grad_enabled()
    state = None
    if backward_hooks:
        state = _BackwardState(module)
        args = _wrap(args, _InputHook, state)
    output = module.forward(*args, **kwargs)
    for hook, flags in list(d.get("_forward_hooks", {}).values()):
        result = hook(module, args, kwargs, output) if flags.get("with_kwargs") else hook(module, args, output)
        if result is not None:
            output = result
    if state is not None:
        output = _wrap(output, _OutputHook, state)
    return output


class _BackwardState:
    def __init__(self, module) -> None:
        self.module = module
        self.n_inputs = 0  # the tensor arguments that require grad (0: hooks run at the outputs)
        self.grad_outputs = None


def _wrap(values, function, state: _BackwardState):
    """values (one tensor or a tuple) with its top-level tensors passed through function."""
    single = isinstance(values, Tensor)
    items = (values,) if single else values
    if not isinstance(items, tuple):
        return values
    positions = [i for i, v in enumerate(items) if isinstance(v, Tensor)]
    if function is _InputHook:
        state.n_inputs = sum(items[i].requires_grad for i in positions)
    if not any(items[i].requires_grad for i in positions):
        return values
    wrapped = function.apply(state, *(items[i] for i in positions))
    wrapped = wrapped if isinstance(wrapped, tuple) else (wrapped,)
    items = list(items)
    for i, w in zip(positions, wrapped):
        items[i] = w
    return items[0] if single else tuple(items)


def _run_backward_hooks(state: _BackwardState, grad_input: tuple) -> tuple:
    d = state.module.__dict__
    for hook, _ in list(d.get("_backward_hooks", {}).values()):
        result = hook(state.module, grad_input, state.grad_outputs)
        if result is not None:
            result = result if isinstance(result, tuple) else (result,)
            if len(result) != len(grad_input):
                raise RuntimeError(
                    f"Backward hook returned an invalid number of grad_input, got {len(result)}, but expected "
                    f"{len(grad_input)}"
                )
            grad_input = result
    return grad_input


class _OutputHook(Function):
    @staticmethod
    def forward(ctx, state, *tensors):
        ctx.state = state
        ctx.set_materialize_grads(False)
        outputs = tuple(t.view_as(t) for t in tensors)
        return outputs if len(outputs) > 1 else outputs[0]

    @staticmethod
    def backward(ctx, *grads):
        state = ctx.state
        module = state.module
        for hook, _ in list(module.__dict__.get("_backward_pre_hooks", {}).values()):
            result = hook(module, grads)
            if result is not None:
                grads = result if isinstance(result, tuple) else (result,)
        state.grad_outputs = grads
        if state.n_inputs == 0:  # no argument requires grad: the hooks run now, with grad_input None
            _run_backward_hooks(state, (None,))
        return (None,) + tuple(grads)


class _InputHook(Function):
    @staticmethod
    def forward(ctx, state, *tensors):
        ctx.state = state
        ctx.set_materialize_grads(False)
        ctx.n = len(tensors)
        outputs = tuple(t.view_as(t) for t in tensors)
        return outputs if len(outputs) > 1 else outputs[0]

    @staticmethod
    def backward(ctx, *grads):
        return (None,) + tuple(_run_backward_hooks(ctx.state, grads))


def attach(module_class: type) -> None:
    """Module.register_forward_pre_hook / register_forward_hook / register_full_backward_hook /
    register_full_backward_pre_hook (and the older register_backward_hook, run as a full one)."""

    def register_forward_pre_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False):
        return add_hook(self, "_forward_pre_hooks", hook, prepend, with_kwargs=with_kwargs)

    def register_forward_hook(
        self, hook, *, prepend: bool = False, with_kwargs: bool = False, always_call: bool = False
    ):
        return add_hook(self, "_forward_hooks", hook, prepend, with_kwargs=with_kwargs)

    def register_full_backward_hook(self, hook, prepend: bool = False):
        return add_hook(self, "_backward_hooks", hook, prepend)

    def register_full_backward_pre_hook(self, hook, prepend: bool = False):
        return add_hook(self, "_backward_pre_hooks", hook, prepend)

    def register_backward_hook(self, hook):
        return add_hook(self, "_backward_hooks", hook)

    for fn in (
        register_forward_pre_hook,
        register_forward_hook,
        register_full_backward_hook,
        register_full_backward_pre_hook,
        register_backward_hook,
    ):
        fn.__qualname__ = f"Module.{fn.__name__}"
        setattr(module_class, fn.__name__, fn)


# grad_fn shows the identity nodes under PyTorch's name for them
_OutputHook.__name__ = _InputHook.__name__ = "BackwardHookFunction"
