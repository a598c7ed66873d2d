"""An advantage actor-critic on a toy chain MDP: a shared trunk with policy and value heads,
Categorical(logits) for log_prob and entropy, actions picked by inverse CDF from NumPy uniforms,
discounted returns; forward hooks record the trunk's activations, a full backward hook the
grad-norm of the value head's output, a tensor hook scales the advantage's gradient, retain_grad
keeps a non-leaf's gradient, and the hooks are removed by their handles."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical

rng = np.random.default_rng(23)
N_STATES, N_ACTIONS, GAMMA = 5, 3, 0.9


class ActorCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(N_STATES, 16), nn.Tanh())
        self.policy = nn.Linear(16, N_ACTIONS)
        self.value = nn.Linear(16, 1)

    def forward(self, x):
        h = self.trunk(x)
        return self.policy(h), self.value(h).squeeze(-1)


model = ActorCritic()
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.4, size=tuple(p.shape)), dtype=torch.float32))
optimizer = torch.optim.Adam(model.parameters(), lr=0.02)

activations, value_grads = [], []
h1 = model.trunk.register_forward_hook(lambda m, inp, out: activations.append(out.detach().abs().mean().item()))
h2 = model.value.register_full_backward_hook(lambda m, gin, gout: value_grads.append(gout[0].norm().item()))


def step_env(state, action):
    nxt = min(state + 1, N_STATES - 1) if action == 0 else max(state - 1, 0) if action == 1 else state
    return nxt, (1.0 if nxt == N_STATES - 1 else -0.1)


for episode in range(4):
    state, log_probs, values, rewards, entropies = 0, [], [], [], []
    for t in range(6):
        logits, value = model(F.one_hot(torch.tensor(state), N_STATES).float())
        dist = Categorical(logits=logits)
        cdf = dist.probs.detach().cumsum(0)
        action = int((cdf < float(rng.uniform())).sum().clamp(max=N_ACTIONS - 1))
        log_probs.append(dist.log_prob(torch.tensor(action)))
        entropies.append(dist.entropy())
        values.append(value)
        state, reward = step_env(state, action)
        rewards.append(reward)
    returns, g = [], 0.0
    for r in reversed(rewards):
        g = r + GAMMA * g
        returns.insert(0, g)
    returns = torch.tensor(returns)
    values = torch.stack(values)
    advantage = returns - values
    advantage.retain_grad()
    handle = advantage.register_hook(lambda grad: grad * 0.5)
    actor_loss = -(torch.stack(log_probs) * advantage.detach()).mean()
    critic_loss = advantage.pow(2).mean()
    loss = actor_loss + critic_loss - 0.01 * torch.stack(entropies).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    handle.remove()
    adv_grad = advantage.grad.abs().sum().item()
    print(episode, f"return {returns[0].item():.4f}", f"loss {loss.item():.5f}", f"adv grad {adv_grad:.5f}")

print(len(activations), f"{np.mean(activations):.5f}", len(value_grads), f"{value_grads[-1]:.5f}")
h1.remove()
h2.remove()
model(torch.eye(N_STATES))[1].sum().backward()
print(len(activations), len(value_grads))
with torch.no_grad():
    logits, values = model(torch.eye(N_STATES))
    print(F.softmax(logits, -1), values)
