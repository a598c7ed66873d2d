"""Neural-network building blocks, named as in torch.nn. `gradcraft.nn.functional` holds the functional ops."""

from gradcraft.nn import functional, init  # noqa: F401
from gradcraft.nn.layers import Dropout, Embedding, LayerNorm, Linear, RMSNorm  # noqa: F401
from gradcraft.nn.module import Module, ModuleList, Parameter, Sequential  # noqa: F401
