"""Mixture-of-experts feed-forward layer: a linear router, top-k SwiGLU experts, a capacity limit.

Each token goes to its top-k experts, weighted by a softmax over the selected experts' router
logits (Mixtral's rule). Every assignment gets a row in an (E * capacity, C) buffer: expert e's
rows, filled in token order (a running count per expert, no sort). Two kernels move the tokens
(`moe_permute`: tokens to their rows; `moe_unpermute`: each token's k rows back, weighted), and
each expert runs one batched matmul over its own rows. Nothing computes every expert on every token.

Capacity: with capacity_factor c, an expert takes at most ceil(c * N * k / E) assignments of the
N tokens; later tokens (in token order) that overflow it are dropped from that expert and, when
all their experts drop them, pass through on the residual alone. Shapes are then fixed, so no
host synchronisation is needed. capacity_factor=None lets every expert take all of its tokens
(the largest load is read back to size the buffers).

Auxiliary losses (stored in `self.aux` after each forward, added to the loss by the model):
  balance = E * sum_e f_e * P_e   f_e: assignments to expert e / N;  P_e: mean router probability
                                  (HF Mixtral's load_balancing_loss; equals k at perfect balance)
  z       = mean_n logsumexp(router_logits_n)^2
"""

import math

import numpy as np

import gradcraft as gc
import gradcraft.nn.functional as F
from gradcraft.nn import Linear, Module, Parameter, init


class MoE(Module):
    def __init__(
        self,
        dim: int,
        ffn_dim: int,
        n_experts: int,
        top_k: int,
        capacity_factor: float | None,
        init_std: float = 0.02,
        out_std: float = 0.02,
    ):
        super().__init__()
        self.dim, self.ffn_dim, self.n_experts, self.top_k = dim, ffn_dim, n_experts, top_k
        self.capacity_factor = capacity_factor
        self.router = Linear(dim, n_experts, bias=False)
        # Expert weights stacked on a leading expert axis (HF Mixtral's layout): gate and up in one
        # matrix per expert, as in our dense SwiGLU.
        self.gate_up = Parameter(gc.zeros(n_experts, 2 * ffn_dim, dim))
        self.down = Parameter(gc.zeros(n_experts, dim, ffn_dim))
        init.normal_(self.router.weight, std=init_std)
        init.normal_(self.gate_up, std=init_std)
        init.normal_(self.down, std=out_std)
        self.aux = {}

    def capacity(self, n_tokens: int) -> int:
        if not self.capacity_factor:
            return n_tokens  # top-k experts are distinct: an expert sees each token at most once
        return max(1, math.ceil(self.capacity_factor * n_tokens * self.top_k / self.n_experts))

    def forward(self, x, dropless: bool = False):
        """dropless: every expert takes all of its tokens, sized without reading counts on the host
        (capacity N: each expert's buffer has a row per token). Decoding uses it: a token's output
        then never depends on the other tokens of the batch."""
        B, T, C = x.shape
        N, E, K = B * T, self.n_experts, self.top_k
        xf = x.reshape(N, C)
        logits = self.router(xf).float()  # (N, E)
        top_logits, top_idx = logits.topk(K, dim=-1)  # (N, K)
        weights = F.softmax(top_logits, dim=-1)  # softmax over the selected experts only
        self.aux = self._aux_losses(logits, top_idx)

        # Each (token, slot) assignment's row in the (E * cap + 1, C) expert buffer: expert e's rows are
        # e * cap .. e * cap + cap - 1, filled in token order; what overflows goes to the last row.
        A = N * K
        flat_expert = top_idx.reshape(A)
        with gc.no_grad():
            onehot = F.one_hot(flat_expert, E)  # (A, E)
            position = (onehot.cumsum(0) * onehot).sum(-1) - 1  # rank of each assignment within its expert
            if dropless:
                cap = N
            else:
                cap = self.capacity(N) if self.capacity_factor else max(1, int(onehot.sum(0).max().item()))
            kept = position < cap
            slot = (flat_expert * cap + position).masked_fill(kept.logical_not(), E * cap).reshape(N, K)
        self.aux["kept_fraction"] = kept.float().mean()

        expert_in = F.moe_permute(xf, slot, E * cap + 1)[: E * cap].reshape(E, cap, C)
        h = expert_in @ self.gate_up.to(x.dtype).mT  # (E, cap, 2F): one batched matmul for all experts
        h = F.swiglu(h)  # silu(gate) * up, gate and up the two halves of the last axis
        expert_out = h @ self.down.to(x.dtype).mT  # (E, cap, C)
        padded = F.pad(expert_out.reshape(E * cap, C), (0, 0, 0, 1))  # the dropped row reads zeros
        return F.moe_unpermute(padded, slot, weights.to(x.dtype)).reshape(B, T, C)

    def _aux_losses(self, logits, top_idx) -> dict:
        E = self.n_experts
        probs = F.softmax(logits, dim=-1)  # (N, E)
        with gc.no_grad():
            assigned = F.one_hot(top_idx, E).sum(1).float()  # (N, E): 1 where the token chose e
            fraction = assigned.mean(0)  # f_e
        balance = (fraction * probs.mean(0)).sum() * E
        z = (logits.logsumexp(-1) ** 2).mean()
        return {"balance": balance, "z": z, "load": fraction / self.top_k}

    def active_parameters(self) -> int:
        """Parameters one token uses: the router and top_k experts."""
        per_expert = (self.gate_up.numel() + self.down.numel()) // self.n_experts
        return self.router.weight.numel() + self.top_k * per_expert


def reference_dispatch(top_idx: np.ndarray, n_experts: int, capacity: int) -> np.ndarray:
    """Which (token, slot) assignments an expert keeps: the first `capacity` in token order
    (a plain-loop reference for the tests)."""
    kept = np.zeros(top_idx.shape, dtype=bool)
    used = [0] * n_experts
    for n in range(top_idx.shape[0]):
        for s in range(top_idx.shape[1]):
            e = top_idx[n, s]
            if used[e] < capacity:
                kept[n, s] = True
                used[e] += 1
    return kept
