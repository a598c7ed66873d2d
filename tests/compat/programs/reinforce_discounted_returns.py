"""REINFORCE with discounted returns on a fixed set of episodes: a small policy network gives
Categorical(logits=...) over 3 actions, the returns G_t = r_t + gamma * G_{t+1} are computed
backwards and normalised with (G - mean) / (std + eps), the loss is -sum(log_prob * G); the
actions and rewards were drawn with NumPy (sampling draws differ between libraries)."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical

gamma = 0.9
eps = np.finfo(np.float32).eps.item()
rng = np.random.default_rng(19)
episodes = []
for _ in range(6):
    T = int(rng.integers(3, 7))
    episodes.append(
        (rng.normal(size=(T, 4)).astype(np.float32), rng.integers(0, 3, size=T), rng.normal(size=T).tolist())
    )


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 16)
        self.affine2 = nn.Linear(16, 3)
        self.saved_log_probs = []
        self.rewards = []

    def forward(self, x):
        return F.softmax(self.affine2(F.relu(self.affine1(x))), dim=-1)


policy = Policy()
with torch.no_grad():
    for p in policy.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.4, size=tuple(p.shape)), dtype=torch.float32))
optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)


def finish_episode():
    R = 0
    policy_loss = []
    returns = []
    for r in policy.rewards[::-1]:
        R = r + gamma * R
        returns.insert(0, R)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps)
    for log_prob, R in zip(policy.saved_log_probs, returns):
        policy_loss.append(-log_prob * R)
    optimizer.zero_grad()
    policy_loss = torch.cat(policy_loss).sum()
    policy_loss.backward()
    optimizer.step()
    del policy.rewards[:]
    del policy.saved_log_probs[:]
    return policy_loss.item(), returns


for i_episode, (states, actions, rewards) in enumerate(episodes):
    for state, action, reward in zip(states, actions, rewards):
        probs = policy(torch.from_numpy(state).float().unsqueeze(0))
        m = Categorical(probs)
        policy.saved_log_probs.append(m.log_prob(torch.tensor([int(action)])))
        policy.rewards.append(reward)
    loss, returns = finish_episode()
    print(f"Episode {i_episode}\tlength {len(actions)}\tloss {loss:.4f}\treturns[0] {returns[0].item():.4f}")

m = Categorical(policy(torch.from_numpy(episodes[0][0])))
print(m.probs[0].detach(), m.entropy().detach())
action = m.sample()
print(action.shape, m.log_prob(action).shape)
