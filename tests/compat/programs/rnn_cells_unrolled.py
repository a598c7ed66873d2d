"""nn.RNN (relu), nn.GRU and their cells: the same weights loaded into a layer and a cell (state_dict
keys renamed), the cell unrolled by hand over an unbatched sequence gives the layer's outputs;
initial hidden states given explicitly; a small sequence-sum regression trained with nn.RNN."""
import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(41)


def fill(module, scale=0.4):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.tensor(rng.normal(0, scale, size=tuple(p.shape)), dtype=torch.float32))


for layer_cls, cell_cls, kwargs in [(nn.RNN, nn.RNNCell, {"nonlinearity": "relu"}), (nn.GRU, nn.GRUCell, {})]:
    layer = layer_cls(3, 5, **kwargs)
    fill(layer)
    cell = cell_cls(3, 5, **kwargs)
    cell.load_state_dict({k.replace("_l0", ""): v for k, v in layer.state_dict().items()})
    print(layer, cell, list(cell.state_dict()))
    seq = torch.tensor(rng.normal(size=(6, 3)), dtype=torch.float32)  # unbatched: (time, features)
    h0 = torch.tensor(rng.normal(size=(1, 5)), dtype=torch.float32)
    out, h_n = layer(seq, h0)
    h = h0[0]
    steps = []
    for x in seq:
        h = cell(x, h)
        steps.append(h)
    print(tuple(out.shape), tuple(h_n.shape), torch.allclose(torch.stack(steps), out, atol=1e-6))
    print([round(v, 4) for v in out[-1].tolist()])

# regression: the running sum of a sequence, read from the last output of a two-layer RNN
X = torch.tensor(rng.normal(size=(8, 5, 1)), dtype=torch.float32)
y = X.sum(dim=1)
rnn = nn.RNN(1, 6, num_layers=2, batch_first=True)
head = nn.Linear(6, 1)
fill(rnn, 0.3)
fill(head, 0.3)
opt = torch.optim.SGD(list(rnn.parameters()) + list(head.parameters()), lr=0.05, momentum=0.5)
for step in range(12):
    out, h_n = rnn(X)
    loss = nn.functional.mse_loss(head(out[:, -1]), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 3 == 0:
        print(step, round(loss.item(), 4), torch.allclose(out[:, -1], h_n[-1]))
