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
from gradcraft.nn.conv import Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d  # noqa: E402, F401
from gradcraft.nn.normalization import BatchNorm1d, BatchNorm2d, Dropout1d, Dropout2d, GroupNorm  # noqa: E402, F401
from gradcraft.nn.pooling import (  # noqa: E402, F401
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AdaptiveMaxPool1d,
    AdaptiveMaxPool2d,
    AvgPool1d,
    AvgPool2d,
    MaxPool1d,
    MaxPool2d,
)
from gradcraft.nn.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase  # noqa: E402, F401
from gradcraft.nn.attention import MultiheadAttention, NonDynamicallyQuantizableLinear  # noqa: E402, F401
from gradcraft.nn.transformer_layers import (  # noqa: E402, F401
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from gradcraft.nn import parallel  # noqa: E402,F401  (torch.nn.parallel: DistributedDataParallel)
from gradcraft.nn.loss import KLDivLoss  # noqa: F401, E402
from gradcraft.nn.containers import ParameterDict, ParameterList  # noqa: F401,E402
from gradcraft.nn.upsampling import (  # noqa: F401,E402
    PixelShuffle,
    PixelUnshuffle,
    Upsample,
    UpsamplingBilinear2d,
    UpsamplingNearest2d,
)
from gradcraft.nn.extra_layers import GLU, EmbeddingBag, PReLU  # noqa: F401,E402
from gradcraft.nn.margin_losses import (  # noqa: F401,E402
    CosineEmbeddingLoss,
    HingeEmbeddingLoss,
    MarginRankingLoss,
    MultiLabelSoftMarginLoss,
    MultiMarginLoss,
    SoftMarginLoss,
    TripletMarginLoss,
)
from gradcraft.nn.padding import (  # noqa: F401, E402
    CircularPad1d,
    CircularPad2d,
    CircularPad3d,
    ConstantPad1d,
    ConstantPad2d,
    ConstantPad3d,
    ReflectionPad1d,
    ReflectionPad2d,
    ReflectionPad3d,
    ReplicationPad1d,
    ReplicationPad2d,
    ReplicationPad3d,
    ZeroPad1d,
    ZeroPad2d,
    ZeroPad3d,
)
from gradcraft.nn.instancenorm import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d  # noqa: F401, E402
from gradcraft.nn.distance import CosineSimilarity, PairwiseDistance  # noqa: F401, E402
from gradcraft.nn.activation_more import (  # noqa: F401, E402
    CELU,
    SELU,
    Hardshrink,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    LogSigmoid,
    Mish,
    ReLU6,
    Softmin,
    Softshrink,
    Softsign,
    Tanhshrink,
    Threshold,
)
from gradcraft.nn.extra_layers import Bilinear, Softmax2d  # noqa: F401,E402
from gradcraft.nn.fold import Fold, Unfold  # noqa: F401,E402
from gradcraft.nn.likelihood_losses import GaussianNLLLoss, PoissonNLLLoss  # noqa: F401,E402
