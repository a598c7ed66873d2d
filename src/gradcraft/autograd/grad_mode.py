"""torch.autograd.grad_mode: set_grad_enabled and inference_mode, over no_grad / enable_grad
(gradcraft/ops/function.py). gradcraft has no inference tensors: inference_mode records no graph,
as no_grad does."""

from __future__ import annotations

import functools

from gradcraft.ops.function import enable_grad, is_grad_enabled, no_grad


class set_grad_enabled:
    """Turn recording on or off: at once (`set_grad_enabled(False)` as a statement), and back to
    the previous state at the end of a `with` block."""

    def __init__(self, mode: bool) -> None:
        self.prev = is_grad_enabled()
        self.mode = bool(mode)
        self._inner = enable_grad() if self.mode else no_grad()
        self._inner.__enter__()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        self._inner.__exit__(*exc)

    def __call__(self, fn):
        self._inner.__exit__(None, None, None)  # (as a decorator: only while fn runs)
        mode = self.mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)

        return wrapper

    def clone(self) -> set_grad_enabled:
        return set_grad_enabled(self.mode)


class inference_mode:
    """Like no_grad (mode=False: nothing changes); a context manager or a decorator."""

    def __init__(self, mode: bool = True) -> None:
        self.mode = mode

    def __enter__(self) -> None:
        self._inner = no_grad() if self.mode else None
        if self._inner is not None:
            self._inner.__enter__()

    def __exit__(self, *exc) -> None:
        if self._inner is not None:
            self._inner.__exit__(*exc)

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with inference_mode(self.mode):
                return fn(*args, **kwargs)

        return wrapper


def is_inference_mode_enabled() -> bool:
    return False
