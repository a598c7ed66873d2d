"""Neural-network building blocks, named as in torch.nn. `gradcraft.nn.functional` holds the functional ops."""

from gradcraft.nn import functional, init, utils  # noqa: F401
from gradcraft.nn.activation import (
    ELU,
    GELU,
    Flatten,
    Identity,
    LeakyReLU,
    LogSoftmax,
    ReLU,
    Sigmoid,  # noqa: F401
    SiLU,
    Softmax,
    Softplus,
    Tanh,
    Unflatten,
)
from gradcraft.nn.layers import Dropout, Embedding, LayerNorm, Linear, RMSNorm  # noqa: F401
from gradcraft.nn.loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    L1Loss,
    MSELoss,  # noqa: F401
    NLLLoss,
    SmoothL1Loss,
)
from gradcraft.nn.module import Module, ModuleDict, ModuleList, Parameter, Sequential  # noqa: F401
from gradcraft.nn import parallel  # noqa: E402,F401  (torch.nn.parallel: DistributedDataParallel)
