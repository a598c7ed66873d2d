"""`inference_mode`, PyTorch's faster no_grad: here the same as `no_grad` (gradcraft's no_grad already
records nothing), with `is_inference_mode_enabled()` telling whether it is on. Tensors made inside it
are ordinary tensors (PyTorch's "inference tensors" refuse later use in autograd; these do not)."""

import functools
import threading

from gradcraft.ops.function import no_grad

_state = threading.local()


def is_inference_mode_enabled() -> bool:
    return getattr(_state, "enabled", False)


class inference_mode:
    """Context manager or decorator (`@inference_mode()`, `@inference_mode`); `mode=False` changes
    nothing."""

    def __new__(cls, mode=True):
        if callable(mode):  # used bare as a decorator: @inference_mode
            return cls()(mode)
        return super().__new__(cls)

    def __init__(self, mode: bool = True) -> None:
        self.mode = bool(mode)

    def __enter__(self) -> None:
        self._previous = is_inference_mode_enabled()
        self._no_grad = no_grad() if self.mode else None
        if self._no_grad is not None:
            self._no_grad.__enter__()
            _state.enabled = True

    def __exit__(self, *exc) -> None:
        if self._no_grad is not None:
            self._no_grad.__exit__(*exc)
        _state.enabled = self._previous

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with inference_mode(self.mode):
                return fn(*args, **kwargs)

        return wrapper

    def clone(self) -> "inference_mode":
        return inference_mode(self.mode)
