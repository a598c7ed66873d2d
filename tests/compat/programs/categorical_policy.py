"""A REINFORCE-style update of a five-armed bandit policy: Categorical(logits) from a
linear layer, log_prob of chosen actions weighted by their returns, an entropy bonus; actions and
returns are fixed arrays (random draws differ between libraries), sample() shapes checked."""
import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Categorical

rng = np.random.default_rng(17)
states = torch.tensor(rng.normal(size=(16, 3)), dtype=torch.float32)
actions = torch.tensor(rng.integers(0, 5, size=16))
returns = torch.tensor(rng.normal(size=16), dtype=torch.float32)

policy = nn.Linear(3, 5)
with torch.no_grad():
    policy.weight.copy_(torch.tensor(rng.normal(0, 0.5, size=(5, 3)), dtype=torch.float32))
    policy.bias.zero_()
optimizer = torch.optim.RMSprop(policy.parameters(), lr=0.01)

for step in range(15):
    dist = Categorical(logits=policy(states))
    loss = -(dist.log_prob(actions) * returns).mean() - 0.01 * dist.entropy().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 5 == 0:
        print(step, f"{loss.item():.5f}", f"{dist.entropy().mean().item():.5f}")

dist = Categorical(logits=policy(states))
print(dist.batch_shape, dist.event_shape, dist.probs.sum(dim=-1)[:3].detach())
print(dist.probs[0].detach(), dist.logits[0].detach())
drawn = dist.sample()
print(drawn.shape, drawn.dtype == torch.int64, bool(((drawn >= 0) & (drawn < 5)).all()))
print(dist.sample((4,)).shape, dist.mode[:5])
uniform = Categorical(probs=torch.ones(4))
print(uniform.entropy(), uniform.log_prob(torch.tensor([0, 3])), uniform.probs)
