"""The common distributions side by side: log_prob, entropy, mean, variance, cdf where there is one,
batch and event shapes, and kl_divergence between pairs of the same family."""
import torch
from torch.distributions import (
    Bernoulli,
    Categorical,
    Exponential,
    Independent,
    Laplace,
    Normal,
    OneHotCategorical,
    Uniform,
    kl_divergence,
)

value = torch.tensor([0.2, 1.5, -0.7])
normal = Normal(torch.tensor([0.0, 1.0, -1.0]), torch.tensor([1.0, 0.5, 2.0]))
print("normal", normal.log_prob(value), normal.entropy(), normal.mean, normal.stddev)
laplace = Laplace(torch.tensor([0.0, 1.0, -1.0]), torch.tensor([1.0, 0.5, 2.0]))
print("laplace", laplace.log_prob(value), laplace.entropy(), laplace.variance, laplace.cdf(value))
uniform = Uniform(torch.tensor([-1.0, 0.0, -2.0]), torch.tensor([1.0, 2.0, 0.0]))
print("uniform", uniform.log_prob(value), uniform.entropy(), uniform.mean, uniform.variance, uniform.cdf(value))
exponential = Exponential(torch.tensor([0.5, 1.0, 3.0]))
print("exponential", exponential.log_prob(value.abs()), exponential.entropy(), exponential.mean, exponential.cdf(value.abs()))
bernoulli = Bernoulli(probs=torch.tensor([0.1, 0.5, 0.9]))
print("bernoulli", bernoulli.log_prob(torch.tensor([1.0, 0.0, 1.0])), bernoulli.entropy(), bernoulli.variance, bernoulli.logits)
coin = Bernoulli(logits=torch.tensor([-2.0, 0.0, 3.0]))
print("coin", coin.probs, coin.log_prob(torch.tensor([0.0, 1.0, 1.0])))
cat = Categorical(probs=torch.tensor([[0.2, 0.3, 0.5], [0.6, 0.2, 0.2]]))
print("categorical", cat.log_prob(torch.tensor([2, 0])), cat.entropy(), cat.batch_shape, cat.event_shape)
onehot = OneHotCategorical(logits=torch.tensor([[1.0, 2.0, 0.5]]))
print("onehot", onehot.log_prob(torch.tensor([[0.0, 1.0, 0.0]])), onehot.entropy(), onehot.event_shape, onehot.mean)
diag = Independent(Normal(torch.zeros(2, 3), torch.ones(2, 3) * 0.5), 1)
print("independent", diag.batch_shape, diag.event_shape, diag.log_prob(torch.ones(2, 3)), diag.entropy())

print(kl_divergence(normal, Normal(torch.zeros(3), torch.ones(3))))
print(kl_divergence(cat, Categorical(logits=torch.zeros(2, 3))))
print(kl_divergence(bernoulli, coin), kl_divergence(exponential, Exponential(torch.ones(3))))
print(kl_divergence(laplace, Laplace(torch.zeros(3), torch.ones(3))))
print(kl_divergence(Uniform(0.0, 1.0), Uniform(-1.0, 2.0)), kl_divergence(Uniform(-1.0, 2.0), Uniform(0.0, 1.0)))
print(kl_divergence(diag, Independent(Normal(torch.ones(2, 3), torch.ones(2, 3)), 1)))
print(normal.sample((5,)).shape, bernoulli.sample((2, 2)).shape, onehot.sample((4,)).shape, diag.rsample().shape)
