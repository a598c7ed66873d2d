"""The kernel contract's optional fused kernels: a backend with only the primitives still trains,
through the op layer's fallbacks (gradcraft/ops/fallback.py), to the full backend's losses."""

import numpy as np
import pytest

import gradcraft as gc
import gradcraft.nn.functional as F
from gradcraft.backend import KERNELS, OPTIONAL, OPTIONAL_PAIRS, PRIMITIVES
from gradcraft.device import get_backend
from gradcraft.models import ModelConfig, Transformer
from gradcraft.ops.fallback import CAPABILITY_GATED, FALLBACKS


def test_contract_splits_primitives_from_optional_kernels():
    assert PRIMITIVES.isdisjoint(OPTIONAL) and PRIMITIVES | OPTIONAL == KERNELS
    # every optional forward kernel is composed from primitives, or asked for only where present
    assert set(OPTIONAL_PAIRS) == set(FALLBACKS) | CAPABILITY_GATED
    assert set(get_backend("cpu").kernels) == KERNELS  # the CPU backend has them all


def test_contract_rejects_a_fused_kernel_without_its_backward(monkeypatch):
    backend = get_backend("cpu")
    table = {name: kernel for name, kernel in backend.kernels.items() if name != "rms_norm_backward"}
    monkeypatch.setattr(backend, "kernels", table)
    with pytest.raises(NotImplementedError, match="rms_norm_backward"):
        backend.check_contract()


def _train(family: dict, steps: int = 3) -> list:
    gc.manual_seed(0)
    cfg = ModelConfig(vocab_size=37, vocab_pad_multiple=1, seq_len=8, dim=16, n_layers=2, n_heads=4, **family)
    model = Transformer(cfg)
    opt = gc.optim.AdamW(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, cfg.vocab_size, size=(2, cfg.seq_len))  # one batch, learned step by step
    targets = rng.integers(0, cfg.vocab_size, size=(2, cfg.seq_len))
    losses = []
    for _ in range(steps):
        _, loss = model(gc.tensor(idx), gc.tensor(targets))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


FAMILIES = {
    "gpt2": dict(norm="layernorm", mlp="gelu", positions="learned"),
    "llama": dict(norm="rmsnorm", mlp="swiglu", positions="rope", n_kv_heads=2, bias=False),
    "gelu_erf_window": dict(mlp="gelu", gelu_approximate="none", attention_pattern="LG", window=3),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_primitives_only_backend_trains_to_the_full_backends_losses(family, monkeypatch):
    full = _train(FAMILIES[family])
    backend = get_backend("cpu")
    ran = set()
    table = {name: kernel for name, kernel in backend.kernels.items() if name in PRIMITIVES}
    monkeypatch.setattr(backend, "kernels", table)
    monkeypatch.setattr(backend, "run", lambda op, args, attrs: ran.add(op) or table[op](*args, **attrs))
    composed = _train(FAMILIES[family])
    assert ran <= PRIMITIVES and "matmul" in ran
    np.testing.assert_allclose(composed, full, rtol=2e-5, atol=1e-6)
    assert composed[-1] < composed[0]  # it learns


def test_fallbacks_match_the_fused_kernels_forward_and_backward(primitives_only):
    """Each fallback against the CPU's fused NumPy kernel, values and input gradients."""
    fused = primitives_only.reference_kernels
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 5, 8)).astype(np.float32)
    g = rng.standard_normal((3, 5, 8)).astype(np.float32)
    cases = [
        (
            "softmax",
            lambda t: F.softmax(t, -1),
            lambda a: fused["softmax"](a, 2),
            lambda a: fused["softmax_backward"](fused["softmax"](a, 2), g, 2),
        ),
        ("log_softmax", lambda t: F.log_softmax(t, 1), lambda a: fused["log_softmax"](a, 1), None),
        ("gelu", lambda t: F.gelu(t), lambda a: fused["gelu"](a), lambda a: fused["gelu_backward"](a, g)),
        ("silu", lambda t: F.silu(t), lambda a: fused["silu"](a), lambda a: fused["silu_backward"](a, g)),
        (
            "rms_norm",
            lambda t: F.rms_norm(t, (8,), eps=1e-5),
            lambda a: fused["rms_norm"](a, np.ones(8, np.float32), 1e-5, 1),
            None,
        ),
        (
            "layer_norm",
            lambda t: F.layer_norm(t, (5, 8)),
            lambda a: fused["layer_norm"](a, np.ones((5, 8), np.float32), np.zeros((5, 8), np.float32), 1e-5, 2),
            None,
        ),
    ]
    for name, op, forward, backward in cases:
        t = gc.tensor(x, requires_grad=True)
        out = op(t)
        np.testing.assert_allclose(out.numpy(), forward(x), rtol=1e-5, atol=1e-6, err_msg=name)
        (out * gc.tensor(g)).sum().backward()
        if backward is not None:
            np.testing.assert_allclose(t.grad.numpy(), backward(x), rtol=1e-4, atol=1e-5, err_msg=name)


def test_cross_entropy_fallback_with_smoothing_ignored_rows_and_padding(primitives_only):
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((6, 10)).astype(np.float32)
    target = np.array([1, -100, 3, 0, 6, -100])
    got = F.cross_entropy(
        gc.tensor(logits), gc.tensor(target), label_smoothing=0.1, valid_classes=7, reduction="none"
    ).numpy()
    expected = primitives_only.reference_kernels["cross_entropy"](logits, target, -100, 0.1, 7)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
