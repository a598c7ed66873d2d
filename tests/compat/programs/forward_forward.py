"""pytorch/examples mnist_forward_forward (Hinton's Forward-Forward), shrunk: `Layer(nn.Linear)` with
its own Adam optimizer, the input normalised by `x.norm(2, 1, keepdim=True) + 1e-4`, goodness
`pow(2).mean(1)`, the loss `torch.log(1 + torch.exp(torch.cat([-g_pos + threshold, g_neg -
threshold]))).mean()`, `overlay_y_on_x` writing `x_[range(x.shape[0]), y] = x.max()`, and
`predict` stacking the goodness per label and taking `argmax(1)`. Negative labels are a fixed
shift (the example draws them with randperm); data and weights from NumPy."""

import numpy as np
import torch
import torch.nn as nn
from torch.optim import Adam


def overlay_y_on_x(x, y):
    """Replace the first 10 pixels of data [x] with one-hot-encoded label [y]"""
    x_ = x.clone()
    x_[:, :4] *= 0.0
    x_[range(x.shape[0]), y] = x.max()
    return x_


class Net(torch.nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.layers = []
        for d in range(len(dims) - 1):
            self.layers += [Layer(dims[d], dims[d + 1])]

    def predict(self, x):
        goodness_per_label = []
        for label in range(4):
            h = overlay_y_on_x(x, label)
            goodness = []
            for layer in self.layers:
                h = layer(h)
                goodness += [h.pow(2).mean(1)]
            goodness_per_label += [sum(goodness).unsqueeze(1)]
        goodness_per_label = torch.cat(goodness_per_label, 1)
        return goodness_per_label.argmax(1)

    def train(self, x_pos, x_neg):
        h_pos, h_neg = x_pos, x_neg
        for i, layer in enumerate(self.layers):
            print("training layer", i, "...")
            h_pos, h_neg = layer.train(h_pos, h_neg)


class Layer(nn.Linear):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device, dtype)
        self.relu = torch.nn.ReLU()
        self.opt = Adam(self.parameters(), lr=0.03)
        self.threshold = 2.0
        self.num_epochs = 20

    def forward(self, x):
        x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(torch.mm(x_direction, self.weight.T) + self.bias.unsqueeze(0))

    def train(self, x_pos, x_neg):
        for i in range(self.num_epochs):
            g_pos = self.forward(x_pos).pow(2).mean(1)
            g_neg = self.forward(x_neg).pow(2).mean(1)
            # The following loss pushes pos (neg) samples to
            # values larger (smaller) than the self.threshold.
            loss = torch.log(1 + torch.exp(torch.cat([-g_pos + self.threshold, g_neg - self.threshold]))).mean()
            self.opt.zero_grad()
            # this backward just compute the derivative and hence
            # is not considered backpropagation.
            loss.backward()
            self.opt.step()
            if i % 10 == 0:
                print(f"  epoch {i} loss {loss.item():.4f}")
        return self.forward(x_pos).detach(), self.forward(x_neg).detach()


if __name__ == "__main__":
    rng = np.random.default_rng(6)
    x = torch.tensor(rng.normal(size=(40, 16)), dtype=torch.float32)
    y = torch.tensor(rng.integers(0, 4, size=40))
    x[torch.arange(40), 4 + y * 3] += 2.0
    x_te = torch.tensor(rng.normal(size=(20, 16)), dtype=torch.float32)
    y_te = torch.tensor(rng.integers(0, 4, size=20))
    x_te[torch.arange(20), 4 + y_te * 3] += 2.0

    net = Net([16, 20, 20])
    with torch.no_grad():
        for p in [q for layer in net.layers for q in layer.parameters()]:
            p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
    x_pos = overlay_y_on_x(x, y)
    y_neg = (y + 1) % 4
    x_neg = overlay_y_on_x(x, y_neg)
    print(x_pos[0, :6], x_neg[0, :6])

    net.train(x_pos, x_neg)

    print("train error:", 1.0 - net.predict(x).eq(y).float().mean().item())
    print("test error:", 1.0 - net.predict(x_te).eq(y_te).float().mean().item())
