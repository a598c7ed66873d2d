"""The sampling functions (randint, multinomial, normal, bernoulli, poisson, rand with a Generator):
what their results must be whatever the generator (shapes, dtypes, ranges, exact cases), and that
a seeded Generator reproduces its draws."""
import torch

g = torch.Generator().manual_seed(1234)
a = torch.randint(10, (3, 4), generator=g)
b = torch.randint(5, 8, (6,), generator=g)
c = torch.randint(low=0, high=2, size=(100,))
print(a.shape, a.dtype == torch.int64, bool(((a >= 0) & (a < 10)).all()))
print(b.shape, b.min().item() >= 5, b.max().item() <= 7, set(c.tolist()) <= {0, 1})
print(torch.randint(0, 10, (2,), dtype=torch.int32).dtype == torch.int32)

g1 = torch.Generator().manual_seed(7)
g2 = torch.Generator().manual_seed(7)
print(torch.equal(torch.rand(5, generator=g1), torch.rand(5, generator=g2)))
print(torch.equal(torch.randn(3, 3, generator=g1), torch.randn(3, 3, generator=g2)))
print(torch.equal(torch.randperm(10, generator=g1), torch.randperm(10, generator=g2)))
state = g1.get_state()
first = torch.rand(4, generator=g1)
g1.set_state(state)
print(torch.equal(first, torch.rand(4, generator=g1)), g1.initial_seed())

probs = torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
print(torch.multinomial(probs, 4, replacement=True))
print(sorted(torch.multinomial(torch.tensor([0.1, 0.2, 0.3, 0.4]), 4).tolist()))
print(torch.tensor([5.0, 1.0, 0.0]).multinomial(2).shape)
try:
    torch.multinomial(torch.tensor([0.5, 0.5]), 3)
except RuntimeError:
    print("RuntimeError: cannot draw 3 of 2 without replacement")

print(torch.normal(torch.arange(1.0, 4.0), torch.zeros(3)))
print(torch.normal(2.0, 0.0, size=(2, 2)))
print(torch.normal(mean=torch.zeros(4, 2), std=1.0).shape)
print(torch.bernoulli(torch.tensor([0.0, 1.0, 1.0, 0.0])))
print(torch.zeros(5).bernoulli_(1.0), torch.ones(3).bernoulli_(0.0))
print(torch.poisson(torch.zeros(4)), torch.poisson(torch.full((3,), 2.0)).shape)
u = torch.rand(1000, generator=g)
print(bool((u >= 0).all() and (u < 1).all()), abs(u.mean().item() - 0.5) < 0.05)
