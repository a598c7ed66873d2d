"""nanoGPT idioms on a bigram-ish model: get_batch from a NumPy-drawn index list, estimate_loss under
torch.no_grad() with model.eval()/model.train(), get_lr with linear warmup then cosine decay to
min_lr written by hand, configure_optimizers with weight decay only on 2-D parameters, gradient
accumulation over micro-steps, clip_grad_norm_, and the optimizer's lr set per iteration."""

import inspect
import math

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

rng = np.random.default_rng(55)
text = "abcabdabcabeabcabd" * 20
chars = sorted(set(text))
encode = lambda s: [chars.index(c) for c in s]  # noqa: E731
data = torch.tensor(encode(text), dtype=torch.long)
n = int(0.9 * len(data))
train_data, val_data = data[:n], data[n:]
block_size, batch_size = 6, 4


def get_batch(split):
    d = train_data if split == "train" else val_data
    ix = torch.tensor(rng.integers(0, len(d) - block_size, size=(batch_size,)))
    x = torch.stack([d[i : i + block_size] for i in ix])
    y = torch.stack([d[i + 1 : i + 1 + block_size] for i in ix])
    return x, y


class TinyLM(nn.Module):
    def __init__(self, vocab, n_embd=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, n_embd)
        self.pos = nn.Embedding(block_size, n_embd)
        self.ln = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        x = self.tok(idx) + self.pos(torch.arange(T))
        logits = self.head(self.ln(x))
        loss = None if targets is None else F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        param_dict = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
        optim_groups = [
            {"params": decay_params, "weight_decay": weight_decay},
            {"params": nodecay_params, "weight_decay": 0.0},
        ]
        num_decay = sum(p.numel() for p in decay_params)
        num_nodecay = sum(p.numel() for p in nodecay_params)
        print(f"num decayed parameter tensors: {len(decay_params)}, with {num_decay:,} parameters")
        print(f"num non-decayed parameter tensors: {len(nodecay_params)}, with {num_nodecay:,} parameters")
        fused_available = "fused" in inspect.signature(torch.optim.AdamW).parameters
        extra_args = dict(fused=True) if fused_available and False else dict()
        return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, **extra_args)


model = TinyLM(len(chars))
with torch.no_grad():
    for name, p in model.named_parameters():
        if p.dim() >= 2:
            p.copy_(torch.tensor(rng.normal(0, 0.02 * 10, size=tuple(p.shape)), dtype=torch.float32))
        elif name.endswith("bias"):
            p.zero_()
learning_rate, min_lr, warmup_iters, lr_decay_iters, max_iters = 3e-2, 3e-3, 4, 20, 24
optimizer = model.configure_optimizers(0.1, learning_rate, (0.9, 0.95))
print(len(optimizer.param_groups), [g["weight_decay"] for g in optimizer.param_groups])


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


@torch.no_grad()
def estimate_loss(eval_iters=3):
    out = {}
    model.eval()
    for split in ["train", "val"]:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split)
            _, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean()
    model.train()
    return out


accum = 2
X, Y = get_batch("train")
for iter_num in range(max_iters):
    lr = get_lr(iter_num)
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr
    if iter_num % 8 == 0:
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}, lr {lr:.5f}")
    for micro_step in range(accum):
        _, loss = model(X, Y)
        loss = loss / accum
        X, Y = get_batch("train")
        loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
print(f"final micro loss {loss.item() * accum:.4f}, grad norm {norm:.4f}, lr {get_lr(max_iters):.4f}")
print(model.head.weight.grad is None, model.training)
