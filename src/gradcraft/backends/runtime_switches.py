"""torch.set_num_threads / get_num_threads (the CPU backend's kernel threads) and
torch.use_deterministic_algorithms / are_deterministic_algorithms_enabled (gradcraft's kernels are
deterministic on the CPU; the flag is kept and reported, as scripts set it for reproducibility)."""

from __future__ import annotations

_deterministic = {"mode": False, "warn_only": False}


def set_num_threads(int: int) -> None:  # noqa: A002  (PyTorch's parameter name)
    from gradcraft.backend.cpu import threads

    if int < 1:
        raise RuntimeError("set_num_threads expects a positive integer")
    threads.set_num_threads(int)


def get_num_threads() -> int:
    from gradcraft.backend.cpu import threads

    return threads.num_threads()


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    _deterministic["mode"], _deterministic["warn_only"] = bool(mode), bool(warn_only)


def are_deterministic_algorithms_enabled() -> bool:
    return _deterministic["mode"]


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    return _deterministic["warn_only"]
