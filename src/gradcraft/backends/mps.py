"""torch.backends.mps: Apple's Metal device, which gradcraft has no backend for."""


def is_available() -> bool:
    return False


def is_built() -> bool:
    return False
