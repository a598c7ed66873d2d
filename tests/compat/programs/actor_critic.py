"""pytorch/examples reinforcement_learning/actor_critic, with fixed episodes instead of gym: a shared
layer with an action head (softmax) and a value head, `SavedAction` namedtuples, Categorical
`log_prob`, returns normalised with `eps = np.finfo(np.float32).eps.item()`, the policy loss
-log_prob * advantage and the value loss `F.smooth_l1_loss(value, torch.tensor([R]))`, summed with
`torch.stack(...).sum()`. The actions come from NumPy (the libraries' samplers differ)."""

from collections import namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical

gamma = 0.99
SavedAction = namedtuple("SavedAction", ["log_prob", "value"])
rng = np.random.default_rng(4)


class Policy(nn.Module):
    """
    implements both actor and critic in one model
    """

    def __init__(self):
        super(Policy, self).__init__()
        self.affine1 = nn.Linear(4, 32)

        # actor's layer
        self.action_head = nn.Linear(32, 2)

        # critic's layer
        self.value_head = nn.Linear(32, 1)

        # action & reward buffer
        self.saved_actions = []
        self.rewards = []

    def forward(self, x):
        """
        forward of both actor and critic
        """
        x = F.relu(self.affine1(x))

        # actor: choses action to take from state s_t
        # by returning probability of each action
        action_prob = F.softmax(self.action_head(x), dim=-1)

        # critic: evaluates being in the state s_t
        state_values = self.value_head(x)

        # return values for both actor and critic as a tuple of 2 values:
        # 1. a list with the probability of each action over the action space
        # 2. the value from state s_t
        return action_prob, state_values


model = Policy()
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
optimizer = optim.Adam(model.parameters(), lr=3e-2)
eps = np.finfo(np.float32).eps.item()


def select_action(state, action):
    state = torch.from_numpy(state).float()
    probs, state_value = model(state)

    # create a categorical distribution over the list of probabilities of actions
    m = Categorical(probs)

    # and sample an action using the distribution (drawn here by NumPy)
    action = torch.tensor(action)

    # save to action buffer
    model.saved_actions.append(SavedAction(m.log_prob(action), state_value))

    # the action to take (left or right)
    return action.item()


def finish_episode():
    """
    Training code. Calculates actor and critic loss and performs backprop.
    """
    R = 0
    saved_actions = model.saved_actions
    policy_losses = []  # list to save actor (policy) loss
    value_losses = []  # list to save critic (value) loss
    returns = []  # list to save the true values

    # calculate the true value using rewards returned from the environment
    for r in model.rewards[::-1]:
        # calculate the discounted value
        R = r + gamma * R
        returns.insert(0, R)

    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps)

    for (log_prob, value), R in zip(saved_actions, returns):
        advantage = R - value.item()

        # calculate actor (policy) loss
        policy_losses.append(-log_prob * advantage)

        # calculate critic (value) loss using L1 smooth loss
        value_losses.append(F.smooth_l1_loss(value, torch.tensor([R])))

    # reset gradients
    optimizer.zero_grad()

    # sum up all the values of policy_losses and value_losses
    loss = torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()

    # perform backprop
    loss.backward()
    optimizer.step()

    # reset rewards and action buffer
    del model.rewards[:]
    del model.saved_actions[:]
    return loss.item()


running_reward = 10
for i_episode in range(1, 6):
    state = rng.normal(size=4)
    ep_reward = 0
    length = int(rng.integers(4, 9))
    for t in range(1, length + 1):
        action = select_action(state, int(rng.integers(0, 2)))
        state, reward = rng.normal(size=4), float(1.0 if action == 1 else 0.5)
        model.rewards.append(reward)
        ep_reward += reward
    running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
    loss = finish_episode()
    print("Episode {}\tLast reward: {:.2f}\tAverage reward: {:.2f}\tloss {:.4f}".format(i_episode, ep_reward, running_reward, loss))

probs, value = model(torch.from_numpy(rng.normal(size=(3, 4))).float())
print(probs.detach(), value.squeeze(-1).detach(), Categorical(probs).entropy().detach())
