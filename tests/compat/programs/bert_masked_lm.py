"""A HuggingFace-free BERT-style masked language model, as in the from-scratch BERT tutorials: token,
segment and learned position embeddings, a sinusoidal table kept with `register_buffer`, self
attention written out with `masked_fill(mask == 0, -1e9)` on a padding mask (and a `torch.triu`
causal mask checked against it), GELU feed-forward blocks, `nn.init.trunc_normal_` in `_init_weights`,
the MLM head tied to the token embedding, labels set to -100 where not masked, cross entropy with
`ignore_index=-100`, AdamW with a LambdaLR warm-up, `clip_grad_norm_`, and
`torch.save(model.state_dict(), io.BytesIO())` reloaded into a fresh model."""

import io
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, CLS, SEP, MASK = 0, 1, 2, 3
vocab_size, d_model, n_heads, n_layers, max_len = 20, 16, 2, 2, 12


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=512):
        super().__init__()
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0)
        self.register_buffer("pe", pe)

    def forward(self, x):
        return self.pe[:, : x.size(1)]


class MultiHeadedAttention(nn.Module):
    def __init__(self, h, d_model, dropout=0.0):
        super().__init__()
        assert d_model % h == 0
        self.d_k = d_model // h
        self.h = h
        self.linear_layers = nn.ModuleList([nn.Linear(d_model, d_model) for _ in range(3)])
        self.output_linear = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(p=dropout)

    def attention(self, query, key, value, mask=None):
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(query.size(-1))
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        p_attn = F.softmax(scores, dim=-1)
        p_attn = self.dropout(p_attn)
        return torch.matmul(p_attn, value), p_attn

    def forward(self, query, key, value, mask=None):
        batch_size = query.size(0)
        query, key, value = [
            l(x).view(batch_size, -1, self.h, self.d_k).transpose(1, 2)
            for l, x in zip(self.linear_layers, (query, key, value))
        ]
        x, attn = self.attention(query, key, value, mask=mask)
        x = x.transpose(1, 2).contiguous().view(batch_size, -1, self.h * self.d_k)
        return self.output_linear(x)


class TransformerBlock(nn.Module):
    def __init__(self, hidden, attn_heads, feed_forward_hidden):
        super().__init__()
        self.attention = MultiHeadedAttention(h=attn_heads, d_model=hidden)
        self.norm1 = nn.LayerNorm(hidden)
        self.norm2 = nn.LayerNorm(hidden)
        self.ffn = nn.Sequential(nn.Linear(hidden, feed_forward_hidden), nn.GELU(), nn.Linear(feed_forward_hidden, hidden))

    def forward(self, x, mask):
        x = self.norm1(x + self.attention(x, x, x, mask=mask))
        return self.norm2(x + self.ffn(x))


class BERT(nn.Module):
    def __init__(self):
        super().__init__()
        self.token = nn.Embedding(vocab_size, d_model, padding_idx=PAD)
        self.segment = nn.Embedding(2, d_model)
        self.position = PositionalEncoding(d_model, max_len=max_len)
        self.blocks = nn.ModuleList([TransformerBlock(d_model, n_heads, d_model * 4) for _ in range(n_layers)])
        self.mlm_norm = nn.LayerNorm(d_model)
        self.mlm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.mlm_head.weight = self.token.weight  # weight tying
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.trunc_normal_(module.weight, mean=0.0, std=0.02, a=-0.04, b=0.04)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.trunc_normal_(module.weight, std=0.02)

    def forward(self, x, segment_info):
        mask = (x > 0).unsqueeze(1).repeat(1, x.size(1), 1).unsqueeze(1)
        x = self.token(x) + self.position(x) + self.segment(segment_info)
        for block in self.blocks:
            x = block(x, mask)
        return self.mlm_head(self.mlm_norm(x))


rng = np.random.default_rng(8)
model = BERT()
print(model.mlm_head.weight is model.token.weight, bool(model.blocks[0].ffn[0].weight.abs().max() <= 0.04))
print([k for k in model.state_dict().keys()][:5], "position.pe" in model.state_dict())
with torch.no_grad():
    for name, p in model.named_parameters():
        if p.dim() > 1:
            p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))


def make_batch(batch_size=4):
    tokens = rng.integers(4, vocab_size, size=(batch_size, max_len))
    lengths = rng.integers(6, max_len + 1, size=batch_size)
    tokens[:, 0] = CLS
    for i, n in enumerate(lengths):
        tokens[i, n - 1] = SEP
        tokens[i, n:] = PAD
    input_ids = torch.tensor(tokens)
    segments = (torch.arange(max_len).unsqueeze(0) >= torch.tensor(lengths).unsqueeze(1) // 2).long()
    labels = input_ids.clone()
    probability_matrix = torch.tensor(rng.uniform(size=(batch_size, max_len)), dtype=torch.float32)
    special = (input_ids == PAD) | (input_ids == CLS) | (input_ids == SEP)
    probability_matrix.masked_fill_(special, value=0.0)
    masked_indices = probability_matrix > 0.7
    labels[~masked_indices] = -100  # We only compute loss on masked tokens
    input_ids[masked_indices] = MASK
    return input_ids, segments, labels


warmup = 3
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.98), weight_decay=0.01)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min((step + 1) / warmup, 1.0))
for step in range(6):
    input_ids, segments, labels = make_batch()
    logits = model(input_ids, segments)
    loss = F.cross_entropy(logits.view(-1, vocab_size), labels.view(-1), ignore_index=-100)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    n_masked = (labels != -100).sum().item()
    print(f"step {step} loss {loss.item():.4f} masked {n_masked} grad_norm {norm.item():.4f} lr {scheduler.get_last_lr()[0]:.5f}")

T = 5
causal = torch.triu(torch.ones(T, T), diagonal=1).bool()
scores = torch.tensor(rng.normal(size=(T, T)), dtype=torch.float32)
a = scores.masked_fill(causal, float("-inf")).softmax(-1)
b = scores.masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf")).softmax(-1)
print(torch.allclose(a, b), a[1], torch.triu(torch.ones(3, 3), diagonal=-1))

buffer = io.BytesIO()
torch.save(model.state_dict(), buffer)
buffer.seek(0)
model2 = BERT()
model2.load_state_dict(torch.load(buffer))
model.eval()
model2.eval()
input_ids, segments, labels = make_batch(2)
with torch.no_grad():
    out1, out2 = model(input_ids, segments), model2(input_ids, segments)
print(torch.equal(out1, out2), out1.argmax(dim=-1)[0])
