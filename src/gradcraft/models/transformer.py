"""One configurable decoder-only transformer: GPT-2 style, LLaMA style, and what lies between.

Pre-norm blocks: x = x + attn(norm(x)); x = x + mlp(norm(x)). Shapes in the
comments: B batch, T time, C model dim, H query heads, Hkv key/value heads,
D head dim, V vocabulary.
"""

import gradcraft as gc
import gradcraft.nn.functional as F
from gradcraft import dtypes
from gradcraft.errors import UserError
from gradcraft.models.config import ModelConfig
from gradcraft.models.moe import MoE
from gradcraft.nn import Dropout, Embedding, LayerNorm, Linear, Module, ModuleList, Parameter, RMSNorm, init


def make_norm(cfg: ModelConfig) -> Module:
    if cfg.norm == "layernorm":
        return LayerNorm(cfg.dim, eps=cfg.norm_eps, bias=cfg.bias)
    return RMSNorm(cfg.dim, eps=cfg.norm_eps)


def norm_then(norm: Module, x, residual, linear_weight, linear_bias=None, activation=None):
    """(activation(norm(x + residual) @ W^T + b), x + residual) through F.norm_linear: on a GPU, a
    one-row decoding step does the add, the norm, the product, the bias and the activation in one
    kernel; elsewhere the same ops one by one. residual None: x is the stream as it is."""
    dtype = x.dtype
    kind = "layer_norm" if isinstance(norm, LayerNorm) else "rms_norm"
    bias = norm.bias.to(dtype) if kind == "layer_norm" and norm.bias is not None else None
    out = F.norm_linear(
        x,
        linear_weight.to(dtype),
        linear_bias.to(dtype) if linear_bias is not None else None,
        residual=residual,
        norm=kind,
        norm_weight=norm.weight.to(dtype),
        norm_bias=bias,
        eps=norm.eps,
        activation=activation,
    )
    return out if residual is not None else (out, x)


class KVCache:
    """Keys and values seen so far by one attention layer, (B, Hkv, S, D) each.

    A sliding-window layer keeps only its last `window` positions.
    """

    def __init__(self, window: int | None = None):
        self.k = None
        self.v = None
        self.window = window
        self.seen = 0  # positions appended so far (a windowed cache holds fewer)

    def extend(self, k, v):
        """Append this step's keys/values; returns the keys/values attention should read."""
        self.seen += k.shape[2]
        if self.k is not None:
            k = gc.cat([self.k, k], dim=2)
            v = gc.cat([self.v, v], dim=2)
        full_k, full_v = k, v
        if self.window is not None and k.shape[2] > self.window:
            k, v = k[:, :, -self.window :], v[:, :, -self.window :]
        self.k, self.v = k, v
        return full_k, full_v

    def tensors(self) -> list:
        return [t for t in (self.k, self.v) if t is not None]

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.shape[2]


class StaticKVCache:
    """Keys and values in fixed buffers, (B, Hkv, L, D) each, written in place at `position` (an
    int64 tensor the caller advances between steps: one element shared by every row, or (B,), one
    position per row, as a server batching requests of different lengths needs). Every decoding
    step then has the same shapes and reads and writes the same buffers, so a CUDA graph captured
    from one step replays all the others (inference/generate.py, inference/batching.py). Attention
    reads the filled slots only (F.kv_cache_attention). For one new token per step.

    A sliding-window layer (`window=w`) keeps a ring of L = w positions: position p lives at p % w,
    so the buffer always holds exactly the keys the window can see, however long the sequence."""

    def __init__(self, k, v, position, window: int | None = None):
        self.k, self.v, self.position, self.window = k, v, position, window
        self.writes = []

    @classmethod
    def from_cache(cls, cache: KVCache, length: int, position):
        """The contents of a (prefilled) KVCache, padded to `length` positions (a windowed cache:
        arranged as the ring of its window)."""
        k, v = ring_layout(cache) if cache.window is not None else (cache.k, cache.v)
        size = cache.window if cache.window is not None else length
        pad = (0, 0, 0, size - k.shape[2])
        return cls(F.pad(k, pad).realize(), F.pad(v, pad).realize(), position, cache.window)

    def extend(self, k, v):
        """Write this step's keys/values (B, Hkv, 1, D) at slot position % L (F.kv_cache_write);
        returns the written buffers (realize `tensors()` with the step). Attention reads the writes
        themselves, so each layer's new contents are in place before it attends."""
        self.writes = [F.kv_cache_write(self.k, k, self.position), F.kv_cache_write(self.v, v, self.position)]
        return tuple(self.writes)

    def attend(self, q, k, v, rope=None):
        """This step's attention: its keys/values (B, Hkv, 1, D) written at slot position % L, the
        query and key rotated first by rope ((cos, sin) at each row's position), and the query (B, H,
        1, D) attending to the filled slots: F.kv_cache_attention with key and value, one kernel
        where the device has it. Realizing the result realizes the writes."""
        y = F.kv_cache_attention(q, self.k, self.v, self.position, key=k, value=v, rotary=rope)
        self.writes = [y]
        return y

    def tensors(self) -> list:
        return self.writes


def ring_layout(cache: KVCache):
    """A windowed KVCache's keys and values (the last min(seen, w) positions, oldest first) moved to
    their ring slots: position p at p % w."""
    held, shift = cache.k.shape[2], (cache.seen - cache.k.shape[2]) % cache.window
    if held < cache.window or shift == 0:
        return cache.k, cache.v  # not wrapped yet: position p is already at index p

    def roll(t):  # index i holds position seen - held + i, which belongs at (shift + i) % w
        return gc.cat([t[:, :, held - shift :], t[:, :, : held - shift]], dim=2)

    return roll(cache.k), roll(cache.v)


def _rotate(x, rope):
    """Rotary embedding of x (B, H, T, D). rope: (cos, sin) of the T positions, (T, D/2), or, when
    decoding one token per row at per-row positions, (B, D/2): the rows then take the kernel's
    position axis (B and T swap around the call)."""
    cos, sin = rope
    if x.shape[2] == 1 and cos.shape[0] == x.shape[0] and x.shape[0] != 1:
        return F.rotary_embedding(x.transpose(0, 2), cos, sin).transpose(0, 2)
    return F.rotary_embedding(x, cos, sin)


class Attention(Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.window = cfg.layer_window(layer)
        # q, k and v in one matmul: (C) -> (H + 2 Hkv) * D
        self.qkv = Linear(cfg.dim, (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim, bias=cfg.bias)
        self.proj = Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=cfg.bias)
        self.attn_dropout = cfg.attn_dropout  # on the attention weights, inside the attention op
        self.dropout = Dropout(cfg.resid_dropout)  # on the residual branch, after the projection

    def forward(self, x, rope=None, cache: KVCache | None = None):
        return self.attend(self.qkv(x), rope, cache)

    def attend(self, qkv, rope=None, cache: KVCache | None = None):
        """The layer from its q/k/v projection (B, T, (H + 2 Hkv) D) on: rotation, attention, output
        projection."""
        B, T, _ = qkv.shape
        H, Hkv, D = self.n_heads, self.n_kv_heads, self.head_dim
        q = qkv[..., : H * D].reshape(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = qkv[..., H * D : (H + Hkv) * D].reshape(B, T, Hkv, D).transpose(1, 2)  # (B, Hkv, T, D)
        v = qkv[..., (H + Hkv) * D :].reshape(B, T, Hkv, D).transpose(1, 2)
        if isinstance(cache, StaticKVCache):
            # one token a row: rotation, the cache writes and attention over the filled slots in one op
            y = cache.attend(q, k, v, rope)
            return self.dropout(self.proj(y.transpose(1, 2).reshape(B, T, H * D)))
        if rope is not None:
            q, k = _rotate(q, rope), _rotate(k, rope)
        if cache is not None:
            k, v = cache.extend(k, v)
        window = self.window
        if window is not None and k.shape[2] > window + T - 1:
            # Keys older than any query's window are never read: drop them before attention.
            k, v = k[:, :, -(window + T - 1) :], v[:, :, -(window + T - 1) :]
        # Training keeps the attention weights for the backward pass where no flash kernel runs.
        save = self.training and gc.is_grad_enabled()
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            dropout_p=self.attn_dropout if self.training else 0.0,
            is_causal=True,
            window=window,
            save_weights=save,
        )
        y = y.transpose(1, 2).reshape(B, T, H * D)  # (B, H, T, D) -> (B, T, C)
        return self.dropout(self.proj(y))


class MLP(Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.kind = cfg.mlp
        self.approximate = cfg.gelu_approximate
        if cfg.mlp == "gelu":
            self.fc = Linear(cfg.dim, cfg.ffn_dim, bias=cfg.mlp_bias)
        else:  # SwiGLU: gate and up projections in one matmul
            self.fc = Linear(cfg.dim, 2 * cfg.ffn_dim, bias=cfg.mlp_bias)
            self.beta = Parameter(gc.ones(1)) if cfg.learned_beta else None
        self.proj = Linear(cfg.ffn_dim, cfg.dim, bias=cfg.mlp_bias)
        self.ffn_dim = cfg.ffn_dim
        self.dropout = Dropout(cfg.resid_dropout)

    @property
    def fused_activation(self):
        """The activation as F.norm_linear names it, or None where it has none (a learned Swish beta)."""
        if self.kind == "gelu":
            return "gelu_tanh" if self.approximate == "tanh" else "gelu"
        return "swiglu" if self.beta is None else None

    def forward(self, x):
        return self.after_fc(self.fc(x))

    def after_fc(self, h, activated: bool = False):
        """The layer from its first projection h on (its activation already applied if `activated`)."""
        if activated:
            return self.dropout(self.proj(h))
        if self.kind == "gelu":
            h = F.gelu(h, approximate=self.approximate)
        else:
            if self.beta is not None:  # Swish with a learned beta: gate * sigmoid(beta * gate)
                gate, up = h[..., : self.ffn_dim], h[..., self.ffn_dim :]
                h = gate * (gate * self.beta.to(gate.dtype)).sigmoid() * up
            else:
                h = F.swiglu(h)  # silu(gate) * up in one kernel
        return self.dropout(self.proj(h))


class Block(Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.norm1 = make_norm(cfg)
        self.attn = Attention(cfg, layer)
        self.norm2 = make_norm(cfg)
        if cfg.is_moe(layer):
            out_std = init.scaled_residual_std(cfg.init_std, cfg.n_layers)
            self.mlp = MoE(
                cfg.dim, cfg.ffn_dim, cfg.n_experts, cfg.experts_per_token, cfg.capacity_factor, cfg.init_std, out_std
            )
        else:
            self.mlp = MLP(cfg)

    def forward(self, x, rope=None, cache=None):
        x = x + self.attn(self.norm1(x), rope, cache)
        if isinstance(self.mlp, MoE) and isinstance(cache, StaticKVCache):
            # Decoding through fixed buffers: no capacity limit, so a sequence's tokens never depend
            # on what else is in the batch, and no routing count is read on the host.
            return x + self.mlp(self.norm2(x), dropless=True)
        return x + self.mlp(self.norm2(x))

    def decode(self, x, residual, rope, cache):
        """forward() for one token per row through static caches, with each residual add put off
        into the next norm: the stream is x + residual (residual None: x), and so is the result's.
        Each norm then meets the product after it in one F.norm_linear (on a GPU at one row: one
        kernel for add, norm, product, bias and activation instead of five)."""
        attn = self.attn
        qkv, x = norm_then(self.norm1, x, residual, attn.qkv.weight, attn.qkv.bias)
        h = attn.attend(qkv, rope, cache)
        mlp = self.mlp
        if isinstance(mlp, MoE):
            x = x + h
            return x, mlp(self.norm2(x), dropless=True)
        activation = mlp.fused_activation
        a, x = norm_then(self.norm2, x, h, mlp.fc.weight, mlp.fc.bias, activation)
        return x, mlp.after_fc(a, activated=activation is not None)


class Transformer(Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.tok_emb = Embedding(cfg.vocab_size, cfg.dim)
        self.pos_emb = Embedding(cfg.seq_len, cfg.dim) if cfg.positions == "learned" else None
        self.drop = Dropout(cfg.embd_dropout)
        self.blocks = ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = make_norm(cfg)
        self.lm_head = None if cfg.tie_embeddings else Linear(cfg.dim, cfg.vocab_size, bias=False)
        self._rope_cache = {}
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2's init: N(0, 0.02) weights, zero biases, residual projections scaled by 1/sqrt(2 L)."""
        std = self.config.init_std
        for name, p in self.named_parameters():
            if ".mlp.gate_up" in name or ".mlp.down" in name or ".mlp.router" in name:
                continue  # experts initialise themselves (see MoE)
            if name.endswith(".bias"):
                init.zeros_(p)
            elif "norm" in name or name.endswith(".beta"):
                init.ones_(p)
            elif name.endswith("proj.weight"):
                init.normal_(p, std=init.scaled_residual_std(std, self.config.n_layers))
            else:
                init.normal_(p, std=std)

    def rope_tables(self, start: int, length: int, device):
        key = (device, start, length)
        if key not in self._rope_cache:
            if len(self._rope_cache) > 64:
                self._rope_cache.clear()
            self._rope_cache[key] = tuple(
                t.realize()
                for t in F.rope_frequencies(
                    length, self.config.head_dim, self.config.rope_base, device=device, start=start
                )
            )
        return self._rope_cache[key]

    def forward(
        self,
        idx,
        targets=None,
        caches: list | None = None,
        label_smoothing: float = 0.0,
        compute_dtype=None,
        start: int | None = None,
        position=None,
    ):
        """idx (B, T) token ids -> logits (B, T, V); with targets, (logits, mean cross-entropy loss).

        With `caches` (one KVCache per layer, see `new_caches`), idx holds only the new tokens and
        positions continue from `start` (default: what the caches hold; pass it when sliding-window
        caches keep fewer positions than were seen). `compute_dtype=gc.bfloat16` runs the
        activations and matmuls in bf16 over fp32 weights (mixed precision); the loss is fp32.
        With StaticKVCaches (`static_caches`), `position` is the one-element int64 tensor of the new
        token's position (a device value, so that the step can be replayed as a CUDA graph).
        """
        B, T = idx.shape
        if position is not None:
            if T != 1 or targets is not None or not caches:
                raise UserError(
                    "position= decodes one new token per sequence through static caches "
                    f"(got {T} tokens{', targets' if targets is not None else ''}); "
                    "use start= for the growing caches"
                )
            return self._forward_at(idx, caches, position, compute_dtype)
        if start is None:
            start = caches[0].seen if caches else 0
        if start + T > self.config.seq_len and self.config.positions == "learned":
            raise UserError(f"a sequence of {start + T} tokens exceeds the context length {self.config.seq_len}")
        x = self.tok_emb(idx)  # (B, T, C)
        rope = None
        if self.pos_emb is not None:
            x = x + self.pos_emb(gc.arange(start, start + T, device=idx.device))
        else:
            rope = self.rope_tables(start, T, idx.device)
        if compute_dtype is not None:
            x = x.to(compute_dtype)
        x = self.drop(x)
        for i, block in enumerate(self.blocks):
            x = block(x, rope, caches[i] if caches else None)
        x = self.norm(x)
        weight = self.tok_emb.weight if self.lm_head is None else self.lm_head.weight
        weight = weight.to(x.dtype)
        if targets is None:
            return x @ weight.mT  # (B, T, V)
        V, padded = self.config.vocab_size, self.config.padded_vocab_size
        if padded != V:
            # cuBLAS picks slow kernels for an odd vocabulary (gpt2's 50257): the three matmuls of
            # the output layer in a training step run over zero rows up to a round size instead,
            # and the loss leaves the padding out (valid_classes) rather than copying the logits
            # without it. Weights, gradients and the logits returned keep the true vocabulary.
            pad = gc.zeros(padded - V, weight.shape[1], dtype=weight.dtype, device=weight.device)
            weight = gc.cat([weight, pad])  # (Vp, C): one copy (F.pad would fill, then copy)
        # The output layer and the loss in one op: where the device has the fused kernel, the (B T, Vp)
        # logits are never held whole (they and their gradient are computed chunk by chunk in the
        # forward pass); the float32 loss is read from bf16 logits either way. The logits returned are
        # lazy: computed only if the caller reads them.
        loss = F.linear_cross_entropy(
            x.reshape(B * T, -1), weight, targets.reshape(B * T), label_smoothing=label_smoothing, valid_classes=V
        )
        logits = x @ weight.mT  # (B, T, Vp)
        if padded != V:
            logits = logits[..., :V]  # a view
        self.last_losses = {"cross_entropy": loss}
        moe = self.moe_layers()
        if moe and (self.config.moe_balance or self.config.moe_zloss):
            # The auxiliary losses of every MoE layer join the loss being minimised.
            for i, layer in moe:
                self.last_losses[f"moe{i}_balance"] = layer.aux["balance"]
                self.last_losses[f"moe{i}_z"] = layer.aux["z"]
                loss = loss + self.config.moe_balance * layer.aux["balance"] + self.config.moe_zloss * layer.aux["z"]
        return logits, loss

    def _forward_at(self, idx, caches, position, compute_dtype):
        """One token per sequence at the device-held `position` ((1,) or (B,)), through
        StaticKVCaches: logits (B, 1, V)."""
        x = self.tok_emb(idx)  # (B, 1, C)
        rope = residual = None
        if self.pos_emb is not None:
            positions = self.pos_emb(position).reshape(-1, 1, x.shape[2])  # (B' 1, C)
            if compute_dtype is None:  # added in the first block's norm kernel (the stream is x + residual)
                residual = positions.expand(x.shape)
            else:
                x = x + positions
        else:
            cos, sin = self.rope_tables(0, self.config.seq_len, idx.device)
            rope = (cos[position], sin[position])  # (B', D/2): gathered on the device
        if compute_dtype is not None:
            x = x.to(compute_dtype)
        for block, cache in zip(self.blocks, caches):
            x, residual = block.decode(x, residual, rope, cache)
        weight = self.tok_emb.weight if self.lm_head is None else self.lm_head.weight
        return norm_then(self.norm, x, residual, weight)[0]

    def static_caches(self, caches: list, position) -> list:
        """StaticKVCaches holding what prefilled KVCaches hold, for decoding at `position` (rings
        for sliding-window layers)."""
        return [StaticKVCache.from_cache(c, self.config.seq_len, position) for c in caches]

    def slot_caches(self, slots: int) -> list:
        """Zeroed StaticKVCaches of `slots` rows (a ring of the window for sliding-window layers),
        each row a sequence at its own position (the (slots,) int64 `position` they share, set with
        `cache.position = ...` or written in place). A server allocates them once."""
        cfg, device = self.config, self.tok_emb.weight.device
        position = gc.zeros(slots, dtype=dtypes.int64, device=device).realize()
        out = []
        for i in range(cfg.n_layers):
            window = cfg.layer_window(i)
            shape = (slots, cfg.n_kv_heads, window or cfg.seq_len, cfg.head_dim)
            k = gc.zeros(*shape, dtype=self.tok_emb.weight.dtype, device=device).realize()
            v = gc.zeros(*shape, dtype=self.tok_emb.weight.dtype, device=device).realize()
            out.append(StaticKVCache(k, v, position, window))
        return out

    def moe_layers(self) -> list:
        """(layer index, MoE module) of every mixture-of-experts layer."""
        return [(i, block.mlp) for i, block in enumerate(self.blocks) if isinstance(block.mlp, MoE)]

    def active_parameters(self) -> int:
        """Parameters used for one token: all but the experts a token is not routed to."""
        total = self.num_parameters()
        for _, layer in self.moe_layers():
            total -= layer.gate_up.numel() + layer.down.numel() + layer.router.weight.numel()
            total += layer.active_parameters()
        return total

    def new_caches(self) -> list:
        return [KVCache(self.config.layer_window(i)) for i in range(self.config.n_layers)]

    def flops_per_token(self) -> float:
        """Training FLOPs per token: 6 per parameter (forward + backward) plus the attention scores
        (the estimate of the PaLM paper, as nanoGPT uses for MFU)."""
        cfg = self.config
        return 6 * self.num_parameters() + 12 * cfg.n_layers * cfg.dim * cfg.seq_len


def describe(model: Transformer) -> str:
    cfg = model.config
    total = model.num_parameters()
    active = model.active_parameters()
    moe = (
        f" ({active / 1e6:.2f}M active per token; {len(model.moe_layers())} MoE layers of {cfg.n_experts} experts, "
        f"top-{cfg.experts_per_token})"
        if active != total
        else ""
    )
    return (
        f"{total / 1e6:.2f}M parameters{moe}: {cfg.n_layers} layers, dim {cfg.dim}, {cfg.n_heads} heads "
        f"({cfg.n_kv_heads} kv), ffn {cfg.ffn_dim} {cfg.mlp}, {cfg.norm}, {cfg.positions} positions, "
        f"context {cfg.seq_len}, vocab {cfg.vocab_size}"
    )
