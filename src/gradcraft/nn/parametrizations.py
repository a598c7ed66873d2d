"""torch.nn.utils.parametrizations: the ready-made parametrizations (weight_norm)."""

from gradcraft.nn.weight_norm import parametrized_weight_norm as weight_norm  # noqa: F401
