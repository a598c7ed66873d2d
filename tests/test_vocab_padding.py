"""Vocabulary padding (ModelConfig.vocab_pad_multiple): the output layer's training matmuls run over a
vocabulary padded with zero rows (gpt2's 50257 -> 50304), and the loss leaves the padding out.

A padded model must be the unpadded one with different matmul sizes: same logits, loss and gradients,
true-vocabulary weights everywhere users see them (state dict, checkpoints, HF export), sampling
over the true vocabulary only, and exact resume.
"""

import json

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file, save_file

import gradcraft as gc
import gradcraft.nn.functional as F
from gradcraft.backend import cpu
from gradcraft.backend.cpu import native as cpu_native
from gradcraft.data.tokenfile import write_token_file
from gradcraft.errors import UserError
from gradcraft.inference.generate import SamplingParams, generate, generate_batch
from gradcraft.inference.text import load_model
from gradcraft.models import ModelConfig, Transformer
from gradcraft.models.config import preset
from gradcraft.models.hf import export_hf, import_hf
from gradcraft.training import checkpoint as ckpt
from gradcraft.training.log import read_log
from gradcraft.training.trainer import TrainConfig, train

V = 70  # padded to 128 by the default multiple of 64

FAMILIES = {
    "gpt2": dict(norm="layernorm", mlp="gelu", positions="learned", bias=True, tie_embeddings=True),
    "llama": dict(
        norm="rmsnorm", mlp="swiglu", positions="rope", bias=False, tie_embeddings=False, n_kv_heads=2, norm_eps=1e-6
    ),
    "moe_window": dict(
        norm="rmsnorm",
        mlp="swiglu",
        positions="rope",
        bias=False,
        tie_embeddings=True,
        attention_pattern="LG",
        window=3,
        ffn_pattern="MD",
        n_experts=4,
        experts_per_token=2,
    ),
}


def config(family, **over):
    return ModelConfig(**{**dict(vocab_size=V, seq_len=16, dim=32, n_layers=2, n_heads=4), **FAMILIES[family], **over})


def random_weights(model, seed=0):
    """Random values for every parameter (norm gains and biases too), as NumPy arrays by name."""
    rng = np.random.default_rng(seed)
    return {
        k: (
            rng.standard_normal(p.shape) * (0.3 if p.ndim > 1 else 0.5)
            + (1.0 if "norm" in k and k.endswith("weight") else 0.0)
        ).astype(np.float32)
        for k, p in model.state_dict().items()
    }


def padded_and_unpadded(family, seed=0):
    """The same weights in a model with the default padding and in one without."""
    padded, plain = Transformer(config(family)), Transformer(config(family, vocab_pad_multiple=1))
    weights = random_weights(plain, seed)
    padded.load_state_dict(weights)
    plain.load_state_dict(weights)
    return padded, plain


# ------------------------------------------------------------------ the config


def test_padded_vocab_size():
    assert preset("gpt2-124m").padded_vocab_size == 50304
    assert preset("gpt2-124m").vocab_size == 50257  # what tokenizers and checkpoints see
    assert preset("llama-15m").padded_vocab_size == 32000  # already a multiple: no padding
    assert ModelConfig(vocab_size=50257, vocab_pad_multiple=128).padded_vocab_size == 50304
    for none in (0, 1):
        assert ModelConfig(vocab_size=50257, vocab_pad_multiple=none).padded_vocab_size == 50257
    with pytest.raises(UserError, match="vocab_pad_multiple"):
        ModelConfig(vocab_pad_multiple=-1)
    old = ModelConfig().to_dict()
    del old["vocab_pad_multiple"]  # a config.json written before the field existed
    assert ModelConfig.from_dict(old).vocab_pad_multiple == 64


# ------------------------------------------------------------------ cross-entropy over the valid classes


@pytest.mark.parametrize("dtype", [gc.float32, gc.float64])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_valid_classes_is_the_loss_of_the_sliced_input(dtype, smoothing, reduction):
    rng = np.random.default_rng(0)
    N, C, W = 9, 61, 64
    data = rng.standard_normal((N, W)) * 3
    data[:, C:] = 40.0  # padding that would dominate the softmax if it were read
    target = rng.integers(0, C, N)
    target[::4] = -100  # ignored rows
    x = gc.tensor(data, dtype=dtype, requires_grad=True)
    loss = F.cross_entropy(x, gc.tensor(target), reduction=reduction, label_smoothing=smoothing, valid_classes=C)
    loss.sum().backward()
    ref_x = torch.tensor(data[:, :C], requires_grad=True)
    ref = torch.nn.functional.cross_entropy(ref_x, torch.tensor(target), reduction=reduction, label_smoothing=smoothing)
    ref.sum().backward()
    tol = 1e-5 if dtype == gc.float32 else 1e-12
    np.testing.assert_allclose(loss.numpy(), ref.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(x.grad.numpy()[:, :C], ref_x.grad.numpy(), rtol=10 * tol, atol=tol)
    assert not x.grad.numpy()[:, C:].any()  # the padding gets no gradient


def test_cross_entropy_valid_classes_nd_input_and_errors():
    rng = np.random.default_rng(1)
    data = rng.standard_normal((2, 8, 3)).astype(np.float32)  # (N, C, d): classes on dim 1
    target = rng.integers(0, 5, (2, 3))
    got = F.cross_entropy(gc.tensor(data), gc.tensor(target), valid_classes=5).item()
    want = torch.nn.functional.cross_entropy(torch.tensor(data[:, :5]), torch.tensor(target)).item()
    assert got == pytest.approx(want, rel=1e-6)
    for bad in (0, 9):
        with pytest.raises(UserError, match="valid_classes"):
            F.cross_entropy(gc.tensor(data), gc.tensor(target), valid_classes=bad)
    with pytest.raises(IndexError):  # a target in the padding is out of range
        F.cross_entropy(gc.tensor(data[:, :, 0]), gc.tensor(np.array([1, 6])), valid_classes=5).item()


@pytest.mark.skipif(cpu_native.library() is None, reason="no compiled CPU kernels")
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_native_kernels_match_numpy_with_valid_classes(smoothing):
    """The C kernels (NaN-filled outputs, so a skipped element fails) against the NumPy references."""
    reference = cpu.CPUBackend().reference_kernels
    native = cpu_native.kernels(reference, lambda shape, dtype: np.full(shape, np.nan, dtype))
    rng = np.random.default_rng(2)
    N, C, W = 33, 1000, 1024
    logits = (rng.standard_normal((N, W)) * 4).astype(np.float32)
    target = rng.integers(0, C, N)
    target[::5] = -100
    g = rng.standard_normal(N).astype(np.float32)
    attrs = dict(ignore_index=-100, label_smoothing=smoothing, valid_classes=C)
    np.testing.assert_allclose(
        native["cross_entropy"](logits, target, **attrs),
        reference["cross_entropy"](logits, target, **attrs),
        rtol=2e-5,
        atol=2e-6,
    )
    got = native["cross_entropy_backward"](logits, target, g, **attrs)
    np.testing.assert_allclose(
        got, reference["cross_entropy_backward"](logits, target, g, **attrs), rtol=2e-5, atol=2e-6
    )
    assert not got[:, C:].any()
    sliced = np.ascontiguousarray(logits[:, :C])  # and both equal the loss without the padding
    np.testing.assert_allclose(
        got[:, :C],
        reference["cross_entropy_backward"](sliced, target, g, ignore_index=-100, label_smoothing=smoothing),
        rtol=2e-5,
        atol=2e-6,
    )


# ------------------------------------------------------------------ the model


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_padded_model_equals_unpadded_model(family, monkeypatch):
    padded, plain = padded_and_unpadded(family)
    widths = []
    real_linear_cross_entropy = F.linear_cross_entropy

    def recording_linear_cross_entropy(x, weight, *args, **kwargs):
        widths.append(weight.shape[0])  # the classes of the output layer + loss
        return real_linear_cross_entropy(x, weight, *args, **kwargs)

    monkeypatch.setattr(F, "linear_cross_entropy", recording_linear_cross_entropy)

    rng = np.random.default_rng(1)
    idx = rng.integers(0, V, (3, 10))
    targets = rng.integers(0, V, (3, 10))
    targets[0, :3] = -100  # ignored positions
    results = []
    for model in (padded, plain):
        logits, loss = model(gc.tensor(idx), gc.tensor(targets), label_smoothing=0.1)
        loss.backward()
        results.append(
            (
                logits.numpy(),
                loss.item(),
                model(gc.tensor(idx)).numpy(),
                {name: p.grad.numpy() for name, p in model.named_parameters()},
            )
        )
    assert widths == [128, V]  # the padded model's loss did run over the padded vocabulary
    (logits, loss, inference, grads), (ref_logits, ref_loss, ref_inference, ref_grads) = results
    assert logits.shape == inference.shape == (3, 10, V)
    np.testing.assert_allclose(logits, ref_logits, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(inference, ref_inference, rtol=1e-6, atol=1e-6)
    assert loss == pytest.approx(ref_loss, rel=1e-6)
    assert grads.keys() == ref_grads.keys()
    for name in grads:  # every parameter has its true shape, the embedding and output head included
        # (the two models' products have other shapes, so other BLAS blockings and thread counts: float32
        # rounding of sums whose terms are as large as the gradient's largest entries, hence the atol)
        scale = float(np.abs(ref_grads[name]).max())
        np.testing.assert_allclose(grads[name], ref_grads[name], rtol=1e-5, atol=1e-5 * scale, err_msg=name)


def test_padded_model_in_mixed_precision():
    padded, plain = padded_and_unpadded("llama", seed=3)
    idx = np.random.default_rng(2).integers(0, V, (2, 12))
    losses = [
        m(gc.tensor(idx[:, :-1]), gc.tensor(idx[:, 1:]), compute_dtype=gc.bfloat16)[1].item() for m in (padded, plain)
    ]
    assert losses[0] == pytest.approx(losses[1], rel=1e-3)


@pytest.mark.parametrize("family", ["gpt2", "moe_window"])
def test_sampling_sees_only_the_true_vocabulary(family):
    padded, plain = padded_and_unpadded(family, seed=4)
    # a flat distribution (high temperature, no top-k): any padding column would get picked
    params = SamplingParams(max_tokens=12, temperature=50.0, top_k=None, seed=0)
    prompts = [[1, 2, 3], [4, 5, 6]]
    out, _ = generate(padded, prompts, params)
    assert all(0 <= t < V for row in out for t in row)
    assert out == generate(plain, prompts, params)[0]
    if family == "gpt2":  # the static caches' decoding step (the CUDA-graph path), run on the CPU
        greedy = SamplingParams(max_tokens=6, temperature=None)
        assert generate_batch(padded, prompts, greedy, static=True)[0] == generate(plain, prompts, greedy)[0]


# ------------------------------------------------------------------ files


def test_checkpoint_round_trip_keeps_the_true_vocabulary(tmp_path):
    padded, plain = padded_and_unpadded("llama", seed=5)
    assert padded.state_dict()["tok_emb.weight"].shape == (V, 32)
    assert padded.state_dict()["lm_head.weight"].shape == (V, 32)
    opt = gc.optim.AdamW(padded.parameters(), lr=1e-3)
    idx = gc.tensor(np.random.default_rng(6).integers(0, V, (2, 9)))
    padded(idx, idx)[1].backward()
    opt.step()
    sampler = {"kind": "random", "rng": np.random.default_rng(0).bit_generator.state}
    state = {"sampler": sampler, "rng": gc.get_rng_state()}  # what the trainer saves, at least
    path = ckpt.save_checkpoint(str(tmp_path), 1, padded, opt, state=state)
    weights = load_file(f"{path}/model.safetensors")
    assert weights["tok_emb.weight"].shape == weights["lm_head.weight"].shape == (V, 32)
    for model in (Transformer(config("llama")), plain):  # into a padded model and an unpadded one
        ckpt.load_checkpoint(path, model, gc.optim.AdamW(model.parameters(), lr=1e-3))
        np.testing.assert_array_equal(model(idx).numpy(), padded(idx).numpy())


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_hf_export_has_the_true_vocabulary(family, tmp_path):
    padded, plain = padded_and_unpadded(family, seed=7)
    export_hf(padded, str(tmp_path))
    with open(tmp_path / "config.json") as f:
        assert json.load(f)["vocab_size"] == V
    weights = load_file(str(tmp_path / "model.safetensors"))
    embedding = "transformer.wte.weight" if family == "gpt2" else "model.embed_tokens.weight"
    assert weights[embedding].shape == (V, 32)
    if family == "llama":
        assert weights["lm_head.weight"].shape == (V, 32)
    back = import_hf(str(tmp_path))
    assert back.config.padded_vocab_size == 128
    idx = gc.tensor(np.random.default_rng(8).integers(0, V, (2, 7)))
    np.testing.assert_allclose(back(idx, idx)[1].item(), plain(idx, idx)[1].item(), rtol=1e-6)


def test_weights_saved_before_padding_existed_load(tmp_path):
    """A run folder from before vocab_pad_multiple: its config.json lacks the field."""
    _, plain = padded_and_unpadded("gpt2", seed=9)
    old = plain.config.to_dict()
    del old["vocab_pad_multiple"]
    (tmp_path / "config.json").write_text(json.dumps(old))
    save_file(ckpt.weights_to_numpy(plain), str(tmp_path / "model.safetensors"))
    model, _ = load_model(str(tmp_path / "config.json"), str(tmp_path / "model.safetensors"))
    assert model.config.padded_vocab_size == 128
    idx = gc.tensor(np.random.default_rng(10).integers(0, V, (1, 8)))
    np.testing.assert_array_equal(model(idx).numpy(), plain(idx).numpy())


# ------------------------------------------------------------------ training


@pytest.fixture(scope="module")
def odd_dataset(tmp_path_factory):
    """A token file whose vocabulary (70) is not a multiple of 64."""
    folder = tmp_path_factory.mktemp("odd")
    rng = np.random.default_rng(0)
    pattern = rng.integers(0, V, size=40)
    tokens = np.concatenate([np.where(rng.random(40) < 0.1, rng.integers(0, V, 40), pattern) for _ in range(60)])
    write_token_file(str(folder / "tokens.bin"), tokens.astype(np.uint16), vocab_size=V, fingerprint="odd")
    return str(folder / "tokens.bin")


def _train(dataset, model_dir, pad, **over):
    tc = TrainConfig(
        dataset=dataset,
        model_dir=str(model_dir),
        steps=8,
        batch_size=4,
        warmup_steps=2,
        max_lr=3e-3,
        checkpoint_every=4,
        progress=False,
        **over,
    )
    mc = config("gpt2", seq_len=16, dropout=0.1, vocab_pad_multiple=pad)
    train(tc, mc, resume=(model_dir / "checkpoints").exists(), log=lambda msg: None)
    return [(r["step"], float(r["loss"]), float(r["grad_norm"])) for r in read_log(str(model_dir / "training_log.csv"))]


def test_training_with_padding_resumes_exactly_and_matches_no_padding(odd_dataset, tmp_path):
    straight = _train(odd_dataset, tmp_path / "straight", 64)
    _train(odd_dataset, tmp_path / "split", 64, stop_after=4)
    split = _train(odd_dataset, tmp_path / "split", 64)
    assert split == straight  # bitwise
    unpadded = _train(odd_dataset, tmp_path / "unpadded", 1)
    np.testing.assert_allclose(
        np.array(straight)[:, 1:].astype(float), np.array(unpadded)[:, 1:].astype(float), rtol=1e-4
    )
    weights = load_file(str(tmp_path / "straight" / "model.safetensors"))  # GPT-2: in Hugging Face's layout
    assert weights["transformer.wte.weight"].shape[0] == V
