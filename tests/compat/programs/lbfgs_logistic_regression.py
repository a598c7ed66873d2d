"""Logistic regression fitted by L-BFGS: optimizer.step(closure) with the closure recomputing the
loss (BCEWithLogitsLoss plus an L2 penalty), strong-Wolfe line search, a tolerance; loss, weights,
the iteration count from the optimizer state and the accuracy printed."""

import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(77)
X = rng.normal(size=(100, 3))
true_w = np.array([1.5, -2.0, 0.5])
y = (X @ true_w + 0.3 + rng.normal(0, 0.8, size=100) > 0).astype(np.float32)
X_t = torch.tensor(X, dtype=torch.float32)
y_t = torch.tensor(y).unsqueeze(1)


class LogisticRegression(nn.Module):
    def __init__(self, n_features):
        super().__init__()
        self.linear = nn.Linear(n_features, 1)

    def forward(self, x):
        return self.linear(x)


for line_search in (None, "strong_wolfe"):
    model = LogisticRegression(3)
    with torch.no_grad():
        model.linear.weight.zero_()
        model.linear.bias.zero_()
    criterion = nn.BCEWithLogitsLoss()
    optimizer = torch.optim.LBFGS(
        model.parameters(), lr=1 if line_search else 0.5, max_iter=50, tolerance_grad=1e-6, line_search_fn=line_search
    )

    def closure():
        optimizer.zero_grad()
        loss = criterion(model(X_t), y_t) + 1e-2 * model.linear.weight.pow(2).sum()
        loss.backward()
        return loss

    for step in range(3):
        loss = optimizer.step(closure)
        print(line_search, step, f"{loss.item():.5f}")
    print(model.linear.weight.data, model.linear.bias.data)
    with torch.no_grad():
        probs = torch.sigmoid(model(X_t))
        acc = ((probs > 0.5).float() == y_t).float().mean()
    print(f"accuracy {acc.item():.3f}")
