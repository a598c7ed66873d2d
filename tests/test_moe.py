"""Mixture of experts and sliding windows: routing, capacity, auxiliary losses, gradients, HF parity."""

import numpy as np
import pytest
import torch

import gradcraft as gc
from gradcraft.models import ModelConfig, Transformer
from gradcraft.models.hf import export_hf, import_hf
from gradcraft.models.moe import MoE, reference_dispatch
from test_models import _hf_logits, randomize


def make_moe(capacity_factor, seed=0, dim=12, ffn=10, experts=4, k=2):
    gc.manual_seed(seed)
    moe = MoE(dim, ffn, experts, k, capacity_factor, init_std=0.5, out_std=0.5)
    return moe


def numpy_moe(moe, x, capacity=None):
    """Reference forward: loop over tokens; an assignment counts only if the reference dispatch keeps it."""
    W = moe.router.weight.numpy()
    gate_up, down = moe.gate_up.numpy().astype(np.float64), moe.down.numpy().astype(np.float64)
    xf = x.reshape(-1, x.shape[-1]).astype(np.float64)
    logits = xf @ W.T
    top = np.argsort(-logits, axis=1, kind="stable")[:, : moe.top_k]
    kept = reference_dispatch(top, moe.n_experts, capacity if capacity else xf.shape[0])
    out = np.zeros_like(xf)
    for n in range(xf.shape[0]):
        sel = logits[n, top[n]]
        w = np.exp(sel - sel.max())
        w /= w.sum()
        for s, e in enumerate(top[n]):
            if kept[n, s]:
                h = gate_up[e] @ xf[n]
                g, u = h[: moe.ffn_dim], h[moe.ffn_dim :]
                out[n] += w[s] * (down[e] @ (g / (1 + np.exp(-g)) * u))
    return out.reshape(x.shape), logits, top, kept


@pytest.mark.parametrize("capacity_factor", [None, 1.0, 0.5])
def test_moe_output_and_dropped_tokens_match_a_reference(capacity_factor):
    moe = make_moe(capacity_factor)
    x = np.random.default_rng(1).standard_normal((3, 10, 12)).astype(np.float32)
    out = moe(gc.tensor(x)).numpy()
    capacity = moe.capacity(30) if capacity_factor else None
    ref, _, _, kept = numpy_moe(moe, x, capacity)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    if capacity_factor == 0.5:
        assert not kept.all()  # the limit really dropped assignments (and the outputs still agree)
    np.testing.assert_allclose(moe.aux["kept_fraction"].item(), kept.mean(), rtol=1e-6)


def test_auxiliary_losses_equal_the_numpy_formulas():
    moe = make_moe(None)
    x = np.random.default_rng(2).standard_normal((2, 16, 12)).astype(np.float32)
    moe(gc.tensor(x))
    _, logits, top, _ = numpy_moe(moe, x)
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    fraction = np.zeros(4)
    for e in range(4):
        fraction[e] = (top == e).any(axis=1).mean()
    balance = 4 * np.sum(fraction * probs.mean(0))
    lse = np.log(np.exp(logits).sum(1))
    np.testing.assert_allclose(moe.aux["balance"].item(), balance, rtol=1e-5)
    np.testing.assert_allclose(moe.aux["z"].item(), np.mean(lse**2), rtol=1e-5)
    np.testing.assert_allclose(moe.aux["load"].numpy(), fraction / 2, rtol=1e-6)


def test_router_and_expert_gradients_match_pytorch():
    moe = make_moe(None)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 8, 12)).astype(np.float32)
    upstream = rng.standard_normal((2, 8, 12)).astype(np.float32)
    xg = gc.tensor(x, requires_grad=True)
    out = moe(xg)
    ((out * gc.tensor(upstream)).sum() + moe.aux["balance"] * 0.5 + moe.aux["z"] * 0.1).backward()

    W = torch.tensor(moe.router.weight.numpy(), requires_grad=True)
    GU = torch.tensor(moe.gate_up.numpy(), requires_grad=True)
    D = torch.tensor(moe.down.numpy(), requires_grad=True)
    xt = torch.tensor(x, requires_grad=True)
    xf = xt.reshape(-1, 12)
    logits = xf @ W.T
    top_v, top_i = logits.topk(2, dim=-1)
    w = top_v.softmax(-1)
    y = torch.zeros_like(xf)
    for e in range(4):
        rows, slots = torch.where(top_i == e)
        h = xf[rows] @ GU[e].T
        g, u = h.chunk(2, -1)
        y = y.index_add(0, rows, (torch.nn.functional.silu(g) * u) @ D[e].T * w[rows, slots, None])
    probs = logits.softmax(-1)
    fraction = torch.nn.functional.one_hot(top_i, 4).sum(1).float().mean(0)
    balance = 4 * (fraction * probs.mean(0)).sum()
    z = (logits.logsumexp(-1) ** 2).mean()
    ((y.reshape(2, 8, 12) * torch.tensor(upstream)).sum() + balance * 0.5 + z * 0.1).backward()
    np.testing.assert_allclose(out.numpy(), y.detach().reshape(2, 8, 12).numpy(), rtol=1e-4, atol=1e-5)
    for ours, theirs, name in (
        (moe.router.weight, W, "router"),
        (moe.gate_up, GU, "gate_up"),
        (moe.down, D, "down"),
        (xg, xt, "input"),
    ):
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


def small(**over):
    base = dict(
        vocab_size=61,
        seq_len=24,
        dim=32,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        ffn_dim=24,
        norm="rmsnorm",
        norm_eps=1e-6,
        mlp="swiglu",
        positions="rope",
        bias=False,
        tie_embeddings=False,
    )
    base.update(over)
    return ModelConfig(**base)


@pytest.mark.parametrize(
    "name,over",
    [
        ("mistral", dict(attention_pattern="LL", window=4)),
        ("ministral", dict(attention_pattern="LG", window=3)),
        ("mixtral", dict(ffn_pattern="MM", n_experts=4, experts_per_token=2, capacity_factor=None)),
        ("mixtral_window", dict(ffn_pattern="MM", capacity_factor=None, attention_pattern="LL", window=5)),
    ],
)
def test_hf_sliding_window_and_moe_families_give_the_same_logits(name, over, tmp_path):
    cfg = small(**over)
    model = Transformer(cfg)
    randomize(model, seed=4)
    export_hf(model, str(tmp_path))
    idx = np.random.default_rng(5).integers(0, cfg.vocab_size, size=(2, 14))
    np.testing.assert_allclose(model(gc.tensor(idx)).numpy(), _hf_logits(str(tmp_path), idx), rtol=1e-4, atol=1e-4)
    back = import_hf(str(tmp_path))
    np.testing.assert_allclose(back(gc.tensor(idx)).numpy(), model(gc.tensor(idx)).numpy(), rtol=1e-5, atol=1e-5)


def test_toy_v1_shaped_model_trains_and_balance_loss_keeps_experts_in_use():
    cfg = small(
        n_layers=4,
        attention_pattern="LLLG",
        window=6,
        ffn_pattern="DMDM",
        n_experts=4,
        experts_per_token=2,
        capacity_factor=1.25,
        tie_embeddings=True,
        moe_balance=0.05,
    )
    gc.manual_seed(0)
    model = Transformer(cfg)
    opt = gc.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    data = np.random.default_rng(6).integers(0, cfg.vocab_size, size=(8, cfg.seq_len + 1))
    x, y = gc.tensor(data[:, :-1]), gc.tensor(data[:, 1:])
    losses = []
    for _ in range(40):
        _, loss = model(x, y)
        gc.realize(loss, model.last_losses["cross_entropy"])  # realize what we log with the forward pass
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(model.last_losses["cross_entropy"].item())
    assert losses[-1] < losses[0] - 1.0
    for _, layer in model.moe_layers():
        load = layer.aux["load"].numpy()
        assert load.max() < 0.45, load  # ideal 0.25 each; collapse would push one expert towards 0.5+


@pytest.mark.parametrize("offset,save", [(0, True), (5, False)])
def test_blockwise_windowed_attention_equals_masking_the_full_matrix(offset, save):
    """Without a flash kernel (the CPU), T > 2 * window runs block by block; the flash reference
    kernels mask the whole (T, S) matrix."""
    import gradcraft.nn.functional as F
    from gradcraft.ops.attention import sdpa_kernel

    rng = np.random.default_rng(7)
    q = rng.standard_normal((2, 4, 37, 8))
    k, v = (rng.standard_normal((2, 2, 37 + offset, 8)) for _ in range(2))
    grads = []
    for choice in ("math", "flash"):
        leaves = [gc.tensor(a, requires_grad=True) for a in (q, k, v)]
        with sdpa_kernel(choice):
            out = F.scaled_dot_product_attention(*leaves, is_causal=True, window=8, save_weights=save)
        assert (out._node.op == "cat") == (choice == "math")
        (out * gc.tensor(np.linspace(-1, 1, out.numel()).reshape(out.shape))).sum().backward()
        grads.append([out.numpy()] + [leaf.grad.numpy() for leaf in leaves])
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
