"""Neural-network building blocks. `gradcraft.nn.functional` holds the functional ops."""

from gradcraft.nn import functional  # noqa: F401
