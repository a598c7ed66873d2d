"""Karpathy's makemore part 2/3 (the MLP of Bengio et al. 2003 on character names), shrunk: `stoi`/
`itos`, `build_dataset` with a rolling context, `g = torch.Generator().manual_seed(2147483647)`,
parameters as raw tensors with `requires_grad = True`, the embedding lookup `C[X]`, `emb.view(-1, ...)`,
a hand-written batch norm with `bnmean_running` updated under `torch.no_grad()`, `F.cross_entropy`,
`p.grad = None` and `p.data += -lr * p.grad`, `loss.log10().item()`, `@torch.no_grad() def
split_loss(split)`, an `F.one_hot` check that C[X] is one_hot @ C, and sampling with
`torch.multinomial(probs, num_samples=1, generator=g)`. Parameters come from NumPy and batches are
taken in order (the generators differ); the samples are only checked, not compared."""

import random

import numpy as np
import torch
import torch.nn.functional as F

words = "emma olivia ava isabella sophia charlotte mia amelia harper evelyn abigail emily elizabeth mila ella avery".split()
chars = sorted(list(set("".join(words))))
stoi = {s: i + 1 for i, s in enumerate(chars)}
stoi["."] = 0
itos = {i: s for s, i in stoi.items()}
vocab_size = len(itos)
print(vocab_size, len(words))

block_size = 3  # context length: how many characters do we take to predict the next one?


def build_dataset(words):
    X, Y = [], []
    for w in words:
        context = [0] * block_size
        for ch in w + ".":
            ix = stoi[ch]
            X.append(context)
            Y.append(ix)
            context = context[1:] + [ix]  # crop and append

    X = torch.tensor(X)
    Y = torch.tensor(Y)
    print(X.shape, Y.shape)
    return X, Y


random.seed(42)
random.shuffle(words)
n1 = int(0.8 * len(words))
n2 = int(0.9 * len(words))
Xtr, Ytr = build_dataset(words[:n1])
Xdev, Ydev = build_dataset(words[n1:n2])
Xte, Yte = build_dataset(words[n2:])

n_embd = 6  # the dimensionality of the character embedding vectors
n_hidden = 32  # the number of neurons in the hidden layer of the MLP

g = torch.Generator().manual_seed(2147483647)  # for reproducibility
rng = np.random.default_rng(2147483647)
C = torch.tensor(rng.normal(size=(vocab_size, n_embd)), dtype=torch.float32)
W1 = torch.tensor(rng.normal(size=(n_embd * block_size, n_hidden)), dtype=torch.float32) * (5 / 3) / ((n_embd * block_size) ** 0.5)
b1 = torch.tensor(rng.normal(size=n_hidden), dtype=torch.float32) * 0.01
W2 = torch.tensor(rng.normal(size=(n_hidden, vocab_size)), dtype=torch.float32) * 0.01
b2 = torch.tensor(rng.normal(size=vocab_size), dtype=torch.float32) * 0
bngain = torch.ones((1, n_hidden))
bnbias = torch.zeros((1, n_hidden))
bnmean_running = torch.zeros((1, n_hidden))
bnstd_running = torch.ones((1, n_hidden))

parameters = [C, W1, b1, W2, b2, bngain, bnbias]
print(sum(p.nelement() for p in parameters))  # number of parameters in total
for p in parameters:
    p.requires_grad = True

max_steps = 30
batch_size = 16
lossi = []

for i in range(max_steps):
    # minibatch construct
    ix = (torch.arange(batch_size) * 7 + i * 5) % Xtr.shape[0]
    Xb, Yb = Xtr[ix], Ytr[ix]  # batch X,Y

    # forward pass
    emb = C[Xb]  # embed the characters into vectors
    embcat = emb.view(emb.shape[0], -1)  # concatenate the vectors
    # Linear layer
    hpreact = embcat @ W1 + b1  # hidden layer pre-activation
    # BatchNorm layer
    bnmeani = hpreact.mean(0, keepdim=True)
    bnstdi = hpreact.std(0, keepdim=True)
    hpreact = bngain * (hpreact - bnmeani) / bnstdi + bnbias
    with torch.no_grad():
        bnmean_running = 0.999 * bnmean_running + 0.001 * bnmeani
        bnstd_running = 0.999 * bnstd_running + 0.001 * bnstdi
    # Non-linearity
    h = torch.tanh(hpreact)  # hidden layer
    logits = h @ W2 + b2  # output layer
    loss = F.cross_entropy(logits, Yb)  # loss function

    # backward pass
    for p in parameters:
        p.grad = None
    loss.backward()

    # update
    lr = 0.1 if i < 20 else 0.01  # step learning rate decay
    for p in parameters:
        p.data += -lr * p.grad

    # track stats
    if i % 10 == 0:  # print every once in a while
        print(f"{i:7d}/{max_steps:7d}: {loss.item():.4f}")
    lossi.append(loss.log10().item())

print(torch.tensor(lossi).view(-1, 10).mean(1))
emb_check = F.one_hot(Xtr[:5], num_classes=vocab_size).float() @ C
print(torch.allclose(emb_check, C[Xtr[:5]]), F.one_hot(torch.tensor([3, 0, 1])), F.one_hot(Ytr[:4]).shape)


@torch.no_grad()  # this decorator disables gradient tracking
def split_loss(split):
    x, y = {
        "train": (Xtr, Ytr),
        "val": (Xdev, Ydev),
        "test": (Xte, Yte),
    }[split]
    emb = C[x]  # (N, block_size, n_embd)
    embcat = emb.view(emb.shape[0], -1)  # concat into (N, block_size * n_embd)
    hpreact = embcat @ W1 + b1
    hpreact = bngain * (hpreact - bnmean_running) / bnstd_running + bnbias
    h = torch.tanh(hpreact)  # (N, n_hidden)
    logits = h @ W2 + b2  # (N, vocab_size)
    loss = F.cross_entropy(logits, y)
    print(split, loss.item())


split_loss("train")
split_loss("val")

# sample from the model
g = torch.Generator().manual_seed(2147483647 + 10)
samples = []
for _ in range(5):
    out = []
    context = [0] * block_size  # initialize with all ...
    while True:
        emb = C[torch.tensor([context])]  # (1,block_size,d)
        h = torch.tanh((emb.view(1, -1) @ W1 + b1 - bnmean_running) / bnstd_running * bngain + bnbias)
        logits = h @ W2 + b2
        probs = F.softmax(logits, dim=1)
        ix = torch.multinomial(probs, num_samples=1, generator=g).item()
        context = context[1:] + [ix]
        out.append(ix)
        if ix == 0 or len(out) > 12:
            break
    samples.append("".join(itos[i] for i in out))
print(all(set(s) <= set(stoi) for s in samples), len(samples))
