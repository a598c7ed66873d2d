"""Regularisation as GPT-2 and nanoGPT do it: dropout after the embeddings, on the attention weights and on
the residual branch (each its own rate, all off in eval mode, masks reproduced on resume), and weight
decay on every weight of two or more dimensions (gradcraft/optim/weight_decay.py)."""

import hashlib
import json
import os

import numpy as np
import pytest

import gradcraft as gc
from gradcraft.errors import UserError
from gradcraft.models import ModelConfig, Transformer, preset
from gradcraft.models.config import PRESETS
from gradcraft.models.hf import config_from_hf, hf_config
from gradcraft.ops.creation import advance_dropout
from gradcraft.optim.weight_decay import decay_split, describe_decay, weight_decay_groups


def tiny(**over):
    values = dict(vocab_size=64, dim=32, n_heads=2, n_layers=2, seq_len=16)
    values.update(over)
    return preset("toy-v0", **values)


# ------------------------------------------------------------------ the config


def test_each_dropout_defaults_to_dropout_and_round_trips():
    cfg = tiny(dropout=0.2, attn_dropout=0.0, embd_dropout=0.05)
    assert (cfg.dropout, cfg.attn_dropout, cfg.resid_dropout, cfg.embd_dropout) == (0.2, 0.0, 0.2, 0.05)
    assert ModelConfig.from_dict(json.loads(cfg.to_json())) == cfg  # gradcraft_config.json and checkpoints
    old = {
        k: v
        for k, v in tiny(dropout=0.1).to_dict().items()
        if k not in ("attn_dropout", "resid_dropout", "embd_dropout")
    }
    back = ModelConfig.from_dict(old)  # a run folder from before the three fields
    assert (back.attn_dropout, back.resid_dropout, back.embd_dropout) == (0.1, 0.1, 0.1)
    assert not tiny().uses_dropout and tiny(embd_dropout=0.1).uses_dropout
    with pytest.raises(UserError, match=r"attn_dropout must be a number in \[0, 1\)"):
        tiny(attn_dropout=1.0)


def test_hf_export_keeps_the_dropouts_hf_has():
    gpt = ModelConfig(
        vocab_size=64, dim=32, n_heads=2, n_layers=1, seq_len=16, dropout=0.1, attn_dropout=0.2, embd_dropout=0.05
    )
    hf = hf_config(gpt)
    assert (hf["resid_pdrop"], hf["attn_pdrop"], hf["embd_pdrop"]) == (0.1, 0.2, 0.05)
    back = config_from_hf(hf)
    assert (back.resid_dropout, back.attn_dropout, back.embd_dropout) == (0.1, 0.2, 0.05)
    llama = tiny(attn_dropout=0.1)  # LLaMA family: HF has attention dropout only
    assert hf_config(llama)["attention_dropout"] == 0.1
    assert config_from_hf(hf_config(llama)).attn_dropout == 0.1


# ------------------------------------------------------------------ where the masks are drawn


def _streams_of_one_forward(cfg) -> int:
    """How many dropout masks one training forward draws (the device's stream count)."""
    gc.manual_seed(0)
    model = Transformer(cfg)
    advance_dropout("cpu")
    model(gc.randint(0, 64, (2, 16)), gc.randint(0, 64, (2, 16)))[1].realize()
    return gc.get_rng_state()["dropout"]["cpu"][1]


def test_embedding_and_residual_dropout_draw_one_mask_per_site():
    assert _streams_of_one_forward(tiny()) == 0
    assert _streams_of_one_forward(tiny(embd_dropout=0.1)) == 1  # after the embeddings
    assert _streams_of_one_forward(tiny(resid_dropout=0.1)) == 2 * 2  # after each attention and MLP projection
    assert _streams_of_one_forward(tiny(dropout=0.1, attn_dropout=0.0)) == 1 + 2 * 2


def test_attention_dropout_draws_masks_in_every_layer():
    assert _streams_of_one_forward(tiny(attn_dropout=0.1)) == 2  # one mask stream per layer's attention
    assert _streams_of_one_forward(tiny(dropout=0.1)) == 1 + 2 * 2 + 2


def _logits(model, idx, step=True):
    if step:
        advance_dropout("cpu")
    return model(idx).numpy()


@pytest.mark.parametrize("rates", [dict(dropout=0.3, attn_dropout=0.0), dict(dropout=0.3), dict(attn_dropout=0.3)])
def test_eval_mode_is_deterministic_and_equals_no_dropout(rates):
    gc.manual_seed(3)
    model = Transformer(tiny(**rates))
    plain = Transformer(tiny())
    plain.load_state_dict(model.state_dict())
    idx = gc.randint(0, 64, (2, 16))
    a, b = _logits(model, idx), _logits(model, idx)
    assert np.abs(a - b).max() > 1e-3  # training: new masks every step
    model.eval()
    a, b = _logits(model, idx), _logits(model, idx)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, plain.eval()(idx).numpy(), rtol=1e-5, atol=1e-6)
    model.train()
    assert np.abs(_logits(model, idx) - a).max() > 1e-3  # and back on


# ------------------------------------------------------------------ resume reproduces the masks


def _tokens(tmp_path):
    from gradcraft.data.tokenfile import write_token_file

    path = tmp_path / "tokens.bin"
    if not path.exists():
        write_token_file(
            str(path), np.random.default_rng(0).integers(0, 64, size=4000).astype(np.uint16), vocab_size=64
        )
    return str(path)


def _train(tmp_path, name, cfg, resume=False, **over):
    from gradcraft.training.trainer import TrainConfig, train

    notes = []
    tc = TrainConfig(
        dataset=_tokens(tmp_path),
        model_dir=str(tmp_path / name),
        steps=6,
        batch_size=4,
        warmup_steps=2,
        checkpoint_every=3,
        progress=False,
        cuda_graph="off",
        **over,
    )
    train(tc, cfg, resume=resume, log=notes.append)
    from safetensors.numpy import load_file

    last = sorted(os.listdir(tmp_path / name / "checkpoints"))[-1]
    return load_file(str(tmp_path / name / "checkpoints" / last / "model.safetensors")), notes


@pytest.mark.parametrize("rates", [dict(dropout=0.2, attn_dropout=0.0), dict(dropout=0.2)])
def test_resume_reproduces_the_dropout_masks(tmp_path, rates):
    """6 steps straight, and 3 steps then a resume for the other 3: the same parameters, bit for bit;
    without dropout's state in the checkpoint a resumed run would draw other masks."""
    cfg = tiny(**rates)
    straight, _ = _train(tmp_path, "straight", cfg)
    _train(tmp_path, "split", cfg, stop_after=3)
    split, notes = _train(tmp_path, "split", cfg, resume=True)
    assert any("resuming from" in n for n in notes)
    assert straight.keys() == split.keys()
    for name in straight:
        np.testing.assert_array_equal(split[name], straight[name], err_msg=name)
    other, _ = _train(tmp_path, "other-seed", cfg, seed=1)
    assert any(np.abs(other[k] - straight[k]).max() > 0 for k in straight)  # (the check can fail)


# ------------------------------------------------------------------ weight decay


def _shrunk(name: str) -> ModelConfig:
    """The preset's architecture (layers, patterns, families, tying) at a size that builds in milliseconds."""
    cfg = PRESETS[name]
    heads, kv = cfg["n_heads"], cfg.get("n_kv_heads") or cfg["n_heads"]
    return preset(
        name, vocab_size=50, seq_len=16, dim=4 * heads, ffn_dim=16, window=min(cfg.get("window", 0), 8), n_kv_heads=kv
    )


def _nanogpt_lists(cfg: ModelConfig) -> tuple[list, list]:
    """The parameters written out by what each one is, and nanoGPT's rule applied by hand: decayed =
    matmul weights, embeddings and an untied head (2+ dims); not = norm gains, biases, Swish betas."""
    decay, keep = ["tok_emb.weight"], []
    if cfg.positions == "learned":
        decay.append("pos_emb.weight")
    norm = ["weight", "bias"] if cfg.norm == "layernorm" and cfg.bias else ["weight"]
    for i in range(cfg.n_layers):
        b = f"blocks.{i}."
        keep += [b + "norm1." + n for n in norm]
        decay.append(b + "attn.qkv.weight")
        keep += [b + "attn.qkv.bias"] if cfg.bias else []
        decay.append(b + "attn.proj.weight")
        keep += [b + "attn.proj.bias"] if cfg.bias else []
        keep += [b + "norm2." + n for n in norm]
        if cfg.is_moe(i):
            decay += [b + "mlp.gate_up", b + "mlp.down", b + "mlp.router.weight"]
            continue
        decay.append(b + "mlp.fc.weight")
        keep += [b + "mlp.fc.bias"] if cfg.mlp_bias else []
        keep += [b + "mlp.beta"] if cfg.learned_beta else []
        decay.append(b + "mlp.proj.weight")
        keep += [b + "mlp.proj.bias"] if cfg.mlp_bias else []
    keep += ["norm." + n for n in norm]
    if not cfg.tie_embeddings:
        decay.append("lm_head.weight")
    return decay, keep


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_decay_split_of_every_preset_is_nanogpts_rule(name):
    cfg = _shrunk(name)
    model = Transformer(cfg)
    decayed, kept = decay_split(model)
    expected_decay, expected_keep = _nanogpt_lists(cfg)
    assert sorted(n for n, _ in decayed) == sorted(expected_decay)
    assert sorted(n for n, _ in kept) == sorted(expected_keep)
    assert all(p.ndim >= 2 for _, p in decayed) and all(p.ndim < 2 for _, p in kept)
    # every parameter once (the tied head is the embedding: counted once)
    assert sum(p.numel() for _, p in decayed + kept) == model.num_parameters()
    # the other convention: the embedding tables (and so a tied head) out, an untied head still in
    no_emb, _ = decay_split(model, decay_embeddings=False)
    assert sorted(n for n, _ in no_emb) == sorted(set(expected_decay) - {"tok_emb.weight", "pos_emb.weight"})


def test_decay_groups_decay_what_the_rule_says():
    """One AdamW step with zero gradients: only decay moves a weight, by lr * wd * w exactly."""
    from gradcraft.optim import AdamW

    gc.manual_seed(0)
    model = Transformer(tiny(bias=True))
    groups = weight_decay_groups(model, 0.5)
    assert describe_decay(groups).startswith(f"weight decay 0.5 on {len(groups[0]['params'])} tensors (")
    before = {n: p.numpy().copy() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = gc.zeros(*p.shape)
    AdamW(groups, lr=0.1).step()
    decayed = {n for n, _ in decay_split(model)[0]}
    for n, p in model.named_parameters():
        factor = 1 - 0.1 * 0.5 if n in decayed else 1.0
        np.testing.assert_allclose(p.numpy(), before[n] * factor, rtol=1e-6, err_msg=n)


def test_training_prints_the_split_and_a_resume_keeps_the_checkpoints_split(tmp_path):
    cfg = tiny()
    _, notes = _train(tmp_path, "run", cfg, stop_after=3)
    decayed, kept = decay_split(Transformer(cfg))
    line = (
        f"weight decay 0.1 on {len(decayed)} tensors ({sum(p.numel() for _, p in decayed):,} parameters); "
        f"none on {len(kept)} tensors ({sum(p.numel() for _, p in kept):,} parameters)"
    )
    assert line in notes
    with pytest.raises(UserError, match="--decay_embeddings false splits the parameters differently"):
        _train(tmp_path, "run", cfg, resume=True, decay_embeddings=False)
    # a checkpoint from before the rule (its groups carry no names) never decayed the embeddings:
    # made here by a run without embedding decay, its group names then removed
    _train(tmp_path, "old", cfg, stop_after=3, decay_embeddings=False)
    ckpt = tmp_path / "old" / "checkpoints" / "step_00000003"
    state = json.loads((ckpt / "state.json").read_text())
    for group in state["optimizer"]["param_groups"]:
        del group["names"]
    (ckpt / "state.json").write_text(json.dumps(state))
    manifest = json.loads((ckpt / "manifest.json").read_text())
    manifest["state.json"] = hashlib.sha256((ckpt / "state.json").read_bytes()).hexdigest()
    (ckpt / "manifest.json").write_text(json.dumps(manifest))
    resumed, notes = _train(tmp_path, "old", cfg, resume=True)
    assert any("from before embeddings were decayed" in n for n in notes)
    assert json.loads((tmp_path / "old" / "train_config.json").read_text())["decay_embeddings"] is False
    straight, _ = _train(tmp_path, "straight", cfg, decay_embeddings=False)
    for name in straight:  # the same run as one that never decayed its embeddings
        np.testing.assert_array_equal(resumed[name], straight[name], err_msg=name)


def test_cli_flags_reach_the_config_and_the_optimizer(dataset, tmp_path, capsys):
    from gradcraft.cli.main import main

    out = tmp_path / "run"
    common = [
        "train",
        "--dataset",
        dataset,
        "--model_dir",
        str(out),
        "--preset",
        "toy-v0",
        "--embed_dim",
        "32",
        "--num_heads",
        "2",
        "--num_layers",
        "2",
        "--seq_len",
        "16",
        "--batch_size",
        "4",
        "--no_progress",
    ]
    assert (
        main(
            [
                *common,
                "--steps",
                "2",
                "--dropout",
                "0.2",
                "--attn_dropout",
                "0",
                "--embd_dropout",
                "0.05",
                "--decay_embeddings",
                "false",
                "--checkpoint_every",
                "1",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    saved = json.loads((out / "gradcraft_config.json").read_text())
    rates = (saved["dropout"], saved["attn_dropout"], saved["resid_dropout"], saved["embd_dropout"])
    assert rates == (0.2, 0, 0.2, 0.05)
    assert json.loads((out / "train_config.json").read_text())["decay_embeddings"] is False
    assert "weight decay 0.1 on 8 tensors" in err and "(embeddings not decayed)" in err  # 4 matrices a layer
    hf = json.loads((out / "config.json").read_text())  # a LLaMA-family run folder: HF's attention_dropout
    assert hf["attention_dropout"] == 0
    assert main([*common, "--steps", "3", "--resume", "--attn_dropout", "0.1"]) == 2
    assert "--attn_dropout 0.1 differs from 0" in capsys.readouterr().err
    assert main([*common, "--steps", "3", "--resume", "--decay_embeddings", "true"]) == 2
    assert "--decay_embeddings true splits the parameters differently" in capsys.readouterr().err
    assert main([*common, "--steps", "3", "--resume"]) == 0  # the run's own settings
