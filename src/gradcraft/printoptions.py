"""torch.set_printoptions: precision, threshold, edgeitems, linewidth, profile ("default", "short",
"full") and sci_mode for printing tensors. Until it is called, tensors print with NumPy's defaults
(gradcraft's layout); the options apply to tensors only, NumPy's own printing is left alone."""

from __future__ import annotations

import math

_PROFILES = {
    "default": {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80},
    "short": {"precision": 2, "threshold": 1000, "edgeitems": 2, "linewidth": 80},
    "full": {"precision": 4, "threshold": math.inf, "edgeitems": 3, "linewidth": 80},
}
options: dict = {}  # NumPy printoptions for tensor reprs (empty: NumPy's defaults)


def set_printoptions(
    precision: int | None = None,
    threshold: float | None = None,
    edgeitems: int | None = None,
    linewidth: int | None = None,
    profile: str | None = None,
    sci_mode: bool | None = None,
) -> None:
    if profile is not None:
        if profile not in _PROFILES:
            raise ValueError(f"profile must be one of {sorted(_PROFILES)}, got {profile!r}")
        options.update(_PROFILES[profile])
    for name, value in (("precision", precision), ("threshold", threshold), ("edgeitems", edgeitems)):
        if value is not None:
            options[name] = value
    if linewidth is not None:
        options["linewidth"] = linewidth
    options["floatmode"] = "fixed"  # every element with `precision` decimals, as PyTorch prints them
    if sci_mode is not None:
        options["suppress"] = not sci_mode
    if options.get("threshold") == math.inf:
        options["threshold"] = 2**62
