"""Early stopping on a validation set with ReduceLROnPlateau: the scheduler steps on the validation
loss, the best weights are kept with copy.deepcopy(model.state_dict()), training stops after
`patience` epochs without improvement, and the best weights are restored with load_state_dict."""

import copy

import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(31)
X = rng.normal(size=(80, 5))
w = rng.normal(size=(5, 1))
Y = X @ w + rng.normal(0, 0.5, size=(80, 1))
X_train, Y_train = torch.tensor(X[:20], dtype=torch.float32), torch.tensor(Y[:20], dtype=torch.float32)
X_val, Y_val = torch.tensor(X[20:], dtype=torch.float32), torch.tensor(Y[20:], dtype=torch.float32)

model = nn.Sequential(nn.Linear(5, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.4, size=tuple(p.shape)), dtype=torch.float32))
optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=2, min_lr=1e-4)
loss_fn = nn.MSELoss()

best_loss, best_state, best_epoch = float("inf"), None, -1
patience, bad_epochs = 5, 0
for epoch in range(100):
    model.train()
    optimizer.zero_grad()
    train_loss = loss_fn(model(X_train), Y_train)
    train_loss.backward()
    optimizer.step()
    model.eval()
    with torch.no_grad():
        val_loss = loss_fn(model(X_val), Y_val).item()
    scheduler.step(val_loss)
    if val_loss < best_loss - 1e-4:
        best_loss, best_epoch, bad_epochs = val_loss, epoch, 0
        best_state = copy.deepcopy(model.state_dict())
    else:
        bad_epochs += 1
    if epoch % 5 == 0:
        lr = optimizer.param_groups[0]["lr"]
        print(f"epoch {epoch:2d} train {train_loss.item():.4f} val {val_loss:.4f} lr {lr:.5f}")
    if bad_epochs >= patience:
        print(f"early stopping at epoch {epoch}, best epoch {best_epoch}")
        break

print(f"last val {val_loss:.4f} best val {best_loss:.4f}")
model.load_state_dict(best_state)
with torch.no_grad():
    print(f"restored val {loss_fn(model(X_val), Y_val).item():.4f}")
print(list(best_state.keys())[:2], best_state["0.weight"].shape, scheduler.get_last_lr())
