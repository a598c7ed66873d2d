"""Tensor.register_hook and Tensor.retain_grad, as in PyTorch.

A hook is called with a tensor's gradient once the backward pass (or autograd.grad) has summed every
contribution to it, before that gradient flows on to the tensor's inputs (or, for a leaf, before it
is accumulated into .grad); a hook that returns a tensor replaces the gradient. `retain_grad()` keeps
a non-leaf's gradient in its .grad, after its hooks have run (PyTorch runs it last too).

Hooks are kept here, by tensor identity, with a weak reference that drops them with the tensor.
"""

from __future__ import annotations

import itertools
import weakref

from gradcraft.errors import RuntimeError_

_ids = itertools.count()
_HOOKS: dict = {}  # id(tensor) -> (weak reference, {handle id: hook})
_RETAINED: dict = {}  # id(tensor) -> weak reference, for retain_grad()
_POST: dict = {}  # id(leaf) -> (weak reference, {handle id: hook}): post-accumulate-grad hooks


class RemovableHandle:
    """What register_*hook returns: `.remove()` unregisters the hook (also as a context manager)."""

    def __init__(self, hooks_dict: dict, extra_dicts: tuple = ()) -> None:
        self.id = next(_ids)
        self._dicts = (weakref.ref(hooks_dict),) + tuple(weakref.ref(d) for d in extra_dicts)

    def remove(self) -> None:
        for ref in self._dicts:
            hooks = ref()
            if hooks is not None:
                hooks.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


class _HookDict(dict):
    """A dict that can be weakly referenced (a handle must not keep a dead tensor's hooks alive)."""


def _forget(key: int, table: dict):
    return lambda _ref: table.pop(key, None)


def register_hook(self, hook) -> RemovableHandle:
    """Tensor.register_hook(hook): hook(grad) -> Tensor or None."""
    if not self.requires_grad:
        raise RuntimeError_("cannot register a hook on a tensor that doesn't require gradient")
    key = id(self)
    entry = _HOOKS.get(key)
    if entry is None or entry[0]() is not self:
        entry = _HOOKS[key] = (weakref.ref(self, _forget(key, _HOOKS)), _HookDict())
    handle = RemovableHandle(entry[1])
    entry[1][handle.id] = hook
    return handle


def register_post_accumulate_grad_hook(self, hook) -> RemovableHandle:
    """Tensor.register_post_accumulate_grad_hook(hook): hook(tensor) after the leaf's .grad holds this
    backward's gradient (its return value is ignored), as PyTorch's. The hooks run in the order
    backward reached the leaves, once their gradients are computed."""
    if not self.requires_grad:
        raise RuntimeError_("cannot register a hook on a tensor that doesn't require gradient")
    if not self.is_leaf:
        raise RuntimeError_("post accumulate grad hooks cannot be registered on non-leaf tensors")
    key = id(self)
    entry = _POST.get(key)
    if entry is None or entry[0]() is not self:
        entry = _POST[key] = (weakref.ref(self, _forget(key, _POST)), _HookDict())
    handle = RemovableHandle(entry[1])
    entry[1][handle.id] = hook
    return handle


def run_post_accumulate_hooks(leaves) -> None:
    for leaf in leaves:
        entry = _POST.get(id(leaf))
        if entry is not None and entry[0]() is leaf:
            for hook in list(entry[1].values()):
                hook(leaf)


def retain_grad(self) -> None:
    """Tensor.retain_grad(): a non-leaf keeps its gradient in .grad (a no-op on a leaf)."""
    if not self.requires_grad:
        raise RuntimeError_("can't retain_grad on Tensor that has requires_grad=False")
    if self.is_leaf:
        return
    key = id(self)
    _RETAINED[key] = weakref.ref(self, _forget(key, _RETAINED))


def retains_grad(self) -> bool:
    ref = _RETAINED.get(id(self))
    return ref is not None and ref() is self


def has_hooks() -> bool:
    """Whether any tensor hook or retain_grad is registered (the backward loop's quick test)."""
    return bool(_RETAINED) or any(entry[1] for table in (_HOOKS, _POST) for entry in table.values())


def run_hooks(tensor, grad, retained: list | None = None):
    """The tensor's hooks applied to its summed gradient; the gradient to use from here on. A tensor
    that retains its gradient gets it in .grad (accumulated, as PyTorch's), and is added to `retained`
    (to be computed with the backward pass)."""
    key = id(tensor)
    entry = _HOOKS.get(key)
    if entry is not None and entry[0]() is tensor:
        for hook in list(entry[1].values()):
            result = hook(grad)
            if result is not None:
                if tuple(result.shape) != tuple(grad.shape):
                    raise RuntimeError_(
                        f"hook returned a gradient of shape {list(result.shape)}, expected {list(grad.shape)}"
                    )
                grad = result
    if retained is not None and retains_grad(tensor) and not tensor.is_leaf:
        tensor.grad = grad if tensor.grad is None else tensor.grad + grad
        retained.append(tensor)
    return grad
