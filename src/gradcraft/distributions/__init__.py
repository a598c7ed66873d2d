"""torch.distributions: probability distributions with sample, rsample, log_prob, entropy and
moments, and kl_divergence, by PyTorch's names and formulas.

    distribution.py   the Distribution base class and shared helpers
    continuous.py     Normal, Uniform, Exponential, Laplace
    discrete.py       Bernoulli, Categorical, OneHotCategorical
    independent.py    Independent
    multivariate.py   MultivariateNormal (Cholesky-based)
    kl.py             kl_divergence, register_kl
"""

from gradcraft.distributions.continuous import Exponential, Laplace, Normal, Uniform
from gradcraft.distributions.discrete import Bernoulli, Categorical, OneHotCategorical
from gradcraft.distributions.distribution import Distribution
from gradcraft.distributions.independent import Independent
from gradcraft.distributions.kl import kl_divergence, register_kl
from gradcraft.distributions.multivariate import MultivariateNormal

__all__ = [
    "Bernoulli",
    "Categorical",
    "Distribution",
    "Exponential",
    "Independent",
    "Laplace",
    "MultivariateNormal",
    "Normal",
    "OneHotCategorical",
    "Uniform",
    "kl_divergence",
    "register_kl",
]
