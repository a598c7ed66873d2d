"""nanoGPT's train.py setup and loop on a tiny GPT: the TF32 switches, `ctx` as torch.amp.autocast in
bfloat16 (asked for on the CPU here), torch.cuda.amp.GradScaler(enabled=(dtype == 'float16')),
gradient accumulation, unscale_ + clip_grad_norm_, scaler.step/update, and estimate_loss under ctx."""
import math
from contextlib import nullcontext

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size=13, block_size=8, n_layer=2, n_head=2, n_embd=16):
        super().__init__()
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(vocab_size, n_embd),
                wpe=nn.Embedding(block_size, n_embd),
                h=nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)]),
                ln_f=nn.LayerNorm(n_embd),
            )
        )
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


device = "cpu"
dtype = "bfloat16"
gradient_accumulation_steps = 2
grad_clip = 1.0
torch.backends.cuda.matmul.allow_tf32 = True  # allow tf32 on matmul
torch.backends.cudnn.allow_tf32 = True  # allow tf32 on cudnn
device_type = "cuda" if "cuda" in device else "cpu"
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = nullcontext() if dtype == "float32" else torch.amp.autocast(device_type=device_type, dtype=ptdtype)
print(torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision() == "high")

rng = np.random.default_rng(49)
data = np.array([(i * 7 + i // 5) % 13 for i in range(400)])
model = GPT()
with torch.no_grad():
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            p.zero_()
        elif "ln" in name:
            p.fill_(1.0)
        else:
            p.copy_(torch.tensor(rng.normal(0, 0.2, size=tuple(p.shape)), dtype=torch.float32))


def get_batch():
    ix = rng.integers(0, len(data) - 9, size=4)
    x = torch.tensor(np.stack([data[i : i + 8] for i in ix]), dtype=torch.long)
    y = torch.tensor(np.stack([data[i + 1 : i + 9] for i in ix]), dtype=torch.long)
    return x, y


@torch.no_grad()
def estimate_loss(batches):
    model.eval()
    losses = torch.zeros(len(batches))
    for k, (X, Y) in enumerate(batches):
        with ctx:
            logits, loss = model(X, Y)
        losses[k] = loss.item()
    model.train()
    return losses.mean()


val_batches = [get_batch() for _ in range(3)]
scaler = torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
X, Y = get_batch()
for iter_num in range(8):
    lr = 1e-2 * 0.5 * (1.0 + math.cos(math.pi * iter_num / 8))
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr
    for micro_step in range(gradient_accumulation_steps):
        with ctx:
            logits, loss = model(X, Y)
            loss = loss / gradient_accumulation_steps
        X, Y = get_batch()
        scaler.scale(loss).backward()
    if grad_clip != 0.0:
        scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    lossf = loss.item() * gradient_accumulation_steps
    # after bf16 updates two libraries round differently in the last bit: bf16's spacing near 2.0 is
    # 0.016, so only the first loss (before any update) is printed to two decimals
    digits = 2 if iter_num == 0 else 1
    print(f"iter {iter_num}: loss {lossf:.{digits}f}, norm {norm.item():.1f}, bf16 logits {logits.dtype == torch.bfloat16}")
print(f"val loss {estimate_loss(val_batches).item():.2f}", scaler.is_enabled(), scaler.get_scale())
