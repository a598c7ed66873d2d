"""Our decoder against an independent PyTorch implementation and against HF transformers."""

import numpy as np
import pytest
import torch

import gradcraft as gc
from gradcraft.benchmarks import torch_reference
from gradcraft.models import ModelConfig, Transformer
from gradcraft.models.hf import export_hf, import_hf

FAMILIES = {
    "gpt": dict(norm="layernorm", mlp="gelu", positions="learned", bias=True, tie_embeddings=True),
    "llama_gqa": dict(
        norm="rmsnorm", mlp="swiglu", positions="rope", bias=False, tie_embeddings=False, n_kv_heads=2, norm_eps=1e-6
    ),
    "k2_learned_beta": dict(
        norm="rmsnorm",
        mlp="swiglu",
        learned_beta=True,
        positions="learned",
        bias=False,
        tie_embeddings=False,
        ffn_dim=50,
    ),
    "gpt_erf_untied_nobias": dict(
        norm="layernorm", mlp="gelu", gelu_approximate="none", positions="learned", bias=False, tie_embeddings=False
    ),
    "hybrid_window": dict(
        norm="rmsnorm", mlp="swiglu", positions="rope", bias=False, n_kv_heads=1, attention_pattern="LG", window=3
    ),
}


def small_config(family, **over):
    base = dict(vocab_size=61, seq_len=16, dim=32, n_layers=2, n_heads=4)
    base.update(FAMILIES[family])
    base.update(over)
    return ModelConfig(**base)


def randomize(model, seed=0):
    """Random weights everywhere (norm gains and biases too), so every parameter matters."""
    rng = np.random.default_rng(seed)
    model.load_state_dict(
        {
            k: rng.standard_normal(p.shape).astype(np.float32) * (0.3 if p.ndim > 1 else 0.5)
            + (1.0 if "norm" in k and k.endswith("weight") else 0.0)
            for k, p in model.state_dict().items()
        }
    )


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_logits_loss_and_gradients_match_an_independent_torch_model(family):
    cfg = small_config(family)
    model = Transformer(cfg)
    randomize(model)
    rng = np.random.default_rng(1)
    idx = rng.integers(0, cfg.vocab_size, size=(3, 10))
    targets = rng.integers(0, cfg.vocab_size, size=(3, 10))
    logits, loss = model(gc.tensor(idx), gc.tensor(targets))
    loss.backward()

    params = {k: torch.tensor(v.numpy(), requires_grad=True) for k, v in model.state_dict().items()}
    ref_logits = torch_reference.forward(cfg, params, torch.tensor(idx))
    ref_loss = torch.nn.functional.cross_entropy(
        ref_logits.reshape(-1, cfg.vocab_size), torch.tensor(targets).reshape(-1)
    )
    ref_loss.backward()
    np.testing.assert_allclose(logits.numpy(), ref_logits.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(loss.item(), ref_loss.item(), rtol=1e-5)
    for name, p in model.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), params[name].grad.numpy(), rtol=1e-3, atol=1e-5, err_msg=name)


HF_FAMILIES = {
    "gpt": ("GPT2LMHeadModel", dict()),
    "llama_gqa": ("LlamaForCausalLM", dict()),
    "llama_tied": ("LlamaForCausalLM", dict(tie_embeddings=True, n_kv_heads=4)),
}


def _hf_logits(directory, idx):
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        return model(torch.tensor(idx)).logits.numpy()


@pytest.mark.parametrize("name", sorted(HF_FAMILIES))
def test_export_to_hf_transformers_gives_the_same_logits(name, tmp_path):
    arch, over = HF_FAMILIES[name]
    family = "gpt" if arch.startswith("GPT2") else "llama_gqa"
    cfg = small_config(family, **over)
    model = Transformer(cfg)
    randomize(model, seed=2)
    export_hf(model, str(tmp_path))
    idx = np.random.default_rng(3).integers(0, cfg.vocab_size, size=(2, 12))
    np.testing.assert_allclose(model(gc.tensor(idx)).numpy(), _hf_logits(str(tmp_path), idx), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_import_from_hf_transformers_gives_the_same_logits(arch, tmp_path):
    import transformers

    torch.manual_seed(0)
    if arch == "gpt2":
        hf_cfg = transformers.GPT2Config(vocab_size=70, n_positions=20, n_embd=32, n_layer=2, n_head=4)
        hf_model = transformers.GPT2LMHeadModel(hf_cfg)
    else:
        hf_cfg = transformers.LlamaConfig(
            vocab_size=70,
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=20,
        )
        hf_model = transformers.LlamaForCausalLM(hf_cfg)
    with torch.no_grad():  # non-trivial norms and biases
        for name, p in hf_model.named_parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.3)
    hf_model.save_pretrained(str(tmp_path), safe_serialization=True)
    model = import_hf(str(tmp_path))
    idx = np.random.default_rng(4).integers(0, 70, size=(2, 9))
    np.testing.assert_allclose(model(gc.tensor(idx)).numpy(), _hf_logits(str(tmp_path), idx), rtol=1e-4, atol=1e-4)


def test_tiny_model_overfits_a_small_corpus():
    gc.manual_seed(0)
    cfg = small_config("llama_gqa", dim=32, n_layers=2)
    model = Transformer(cfg)
    opt = gc.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    data = np.random.default_rng(5).integers(0, cfg.vocab_size, size=(4, 17))
    x, y = gc.tensor(data[:, :-1]), gc.tensor(data[:, 1:])
    first = None
    for _ in range(150):
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        first = first if first is not None else loss.item()
    assert first > 3.5  # ~ log(61) at the start
    assert loss.item() < 0.1  # memorised the 64 target tokens
