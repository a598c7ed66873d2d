"""Weights in the Hugging Face layout: export to and import from `config.json` + `model.safetensors`.

Families: GPT-2 (`GPT2LMHeadModel`), LLaMA (`LlamaForCausalLM`), Mistral (sliding window in every
layer), Ministral (per-layer sliding/full attention) and Mixtral (mixture of experts in every layer,
no capacity limit). Our model
fuses q/k/v into one matrix and gate/up into another; HF keeps them apart, and
GPT-2's Conv1D stores weights as (in, out). This module does those
conversions (and writes the tokenizer's `tokenizer.json` + `tokenizer_config.json` for
`AutoTokenizer`), so a checkpoint trained here loads in transformers and the reverse.
"""

import json
import os

import numpy as np
from safetensors.numpy import load_file, save

from gradcraft.atomic import atomic_file, write_json, write_text
from gradcraft.errors import UserError
from gradcraft.models.config import ModelConfig
from gradcraft.models.transformer import Transformer


def family_of(cfg: ModelConfig) -> str:
    if cfg.mlp_bias != cfg.bias:
        raise UserError(
            "this architecture (biases in the MLP but not in attention, or the reverse) has no Hugging Face equivalent"
        )
    if (
        (cfg.norm, cfg.mlp, cfg.positions) == ("layernorm", "gelu", "learned")
        and cfg.bias
        and cfg.n_kv_heads == cfg.n_heads
    ):
        return "gpt2"
    if (cfg.norm, cfg.mlp, cfg.positions) == ("rmsnorm", "swiglu", "rope") and not cfg.bias and not cfg.learned_beta:
        pattern = set(cfg.attention_pattern)
        if "M" in cfg.ffn_pattern:
            if set(cfg.ffn_pattern) != {"M"} or pattern == {"L", "G"}:
                raise UserError(
                    "Mixtral has mixture-of-experts in every layer and one attention kind: this "
                    "model's ffn_pattern/attention_pattern has no Hugging Face equivalent"
                )
            return "mixtral"
        if not pattern or pattern == {"G"}:
            return "llama"
        return "mistral" if pattern == {"L"} else "ministral"
    raise UserError(
        "this architecture has no Hugging Face equivalent: export needs GPT-2 style "
        "(layernorm, gelu, learned positions, biases) or LLaMA style (rmsnorm, swiglu, rope, no biases)"
    )


ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "ministral": "MinistralForCausalLM",
    "mixtral": "MixtralForCausalLM",
}


# ------------------------------------------------------------------ configs


def hf_config(cfg: ModelConfig) -> dict:
    family = family_of(cfg)
    if family == "gpt2":
        return {
            "architectures": ["GPT2LMHeadModel"],
            "model_type": "gpt2",
            "vocab_size": cfg.vocab_size,
            "n_positions": cfg.seq_len,
            "n_embd": cfg.dim,
            "n_layer": cfg.n_layers,
            "n_head": cfg.n_heads,
            "n_inner": cfg.ffn_dim,
            "layer_norm_epsilon": cfg.norm_eps,
            "activation_function": "gelu_new" if cfg.gelu_approximate == "tanh" else "gelu",
            "resid_pdrop": cfg.resid_dropout,
            "embd_pdrop": cfg.embd_dropout,
            "attn_pdrop": cfg.attn_dropout,
            "tie_word_embeddings": cfg.tie_embeddings,
            "initializer_range": cfg.init_std,
        }
    out = {
        "architectures": [ARCHITECTURES[family]],
        "model_type": family,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.dim,
        "intermediate_size": cfg.ffn_dim,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,
        "max_position_embeddings": cfg.seq_len,
        "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_base,
        "hidden_act": "silu",
        "tie_word_embeddings": cfg.tie_embeddings,
        "attention_bias": False,
        "mlp_bias": False,
        "initializer_range": cfg.init_std,
        # HF's LLaMA family has attention-weight dropout only (none after the embeddings or projections)
        "attention_dropout": cfg.attn_dropout,
    }
    if family in ("mistral", "ministral", "mixtral"):
        out["sliding_window"] = cfg.window if "L" in cfg.attention_pattern else None
    if family == "ministral":
        out["layer_types"] = ["sliding_attention" if c == "L" else "full_attention" for c in cfg.attention_pattern]
    if family == "mixtral":
        out.update(
            num_local_experts=cfg.n_experts,
            num_experts_per_tok=cfg.experts_per_token,
            router_aux_loss_coef=cfg.moe_balance,
            output_router_logits=False,
        )
    return out


def config_from_hf(hf: dict) -> ModelConfig:
    kind = hf.get("model_type")
    if kind == "gpt2":
        act = hf.get("activation_function", "gelu_new")
        return ModelConfig(
            vocab_size=hf["vocab_size"],
            seq_len=hf["n_positions"],
            dim=hf["n_embd"],
            n_layers=hf["n_layer"],
            n_heads=hf["n_head"],
            ffn_dim=hf.get("n_inner") or 4 * hf["n_embd"],
            norm="layernorm",
            norm_eps=hf.get("layer_norm_epsilon", 1e-5),
            mlp="gelu",
            gelu_approximate="tanh" if act in ("gelu_new", "gelu_pytorch_tanh") else "none",
            positions="learned",
            bias=True,
            tie_embeddings=hf.get("tie_word_embeddings", True),
            dropout=hf.get("resid_pdrop", 0.0),
            attn_dropout=hf.get("attn_pdrop", 0.0),
            resid_dropout=hf.get("resid_pdrop", 0.0),
            embd_dropout=hf.get("embd_pdrop", 0.0),
        )
    if kind in ("llama", "mistral", "ministral", "mixtral"):
        n_layers = hf["num_hidden_layers"]
        pattern, window, moe = "", 0, {}
        if kind != "llama" and hf.get("sliding_window"):
            window = hf["sliding_window"]
            types = hf.get("layer_types") or ["sliding_attention"] * n_layers
            pattern = "".join("L" if t == "sliding_attention" else "G" for t in types)
        if kind == "mixtral":  # HF has no capacity limit
            moe = dict(
                ffn_pattern="M" * n_layers,
                n_experts=hf["num_local_experts"],
                experts_per_token=hf["num_experts_per_tok"],
                capacity_factor=None,
            )
        return ModelConfig(
            vocab_size=hf["vocab_size"],
            seq_len=hf.get("max_position_embeddings", 2048),
            dim=hf["hidden_size"],
            n_layers=n_layers,
            n_heads=hf["num_attention_heads"],
            n_kv_heads=hf.get("num_key_value_heads") or hf["num_attention_heads"],
            ffn_dim=hf["intermediate_size"],
            norm="rmsnorm",
            norm_eps=hf.get("rms_norm_eps", 1e-6),
            mlp="swiglu",
            positions="rope",
            rope_base=hf.get("rope_theta", 10000.0),
            bias=False,
            tie_embeddings=hf.get("tie_word_embeddings", False),
            attention_pattern=pattern,
            window=window,
            attn_dropout=hf.get("attention_dropout", 0.0),
            resid_dropout=0.0,
            embd_dropout=0.0,
            **moe,
        )
    raise UserError(
        f"unsupported Hugging Face model_type {kind!r}; gpt2, llama, mistral, ministral and mixtral can be imported"
    )


# ------------------------------------------------------------------ weights


def to_hf_state(model: Transformer) -> dict:
    cfg = model.config
    family = family_of(cfg)
    ours = {k: v.float().numpy() for k, v in model.state_dict().items()}
    H, Hkv, D, Fd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.ffn_dim
    out = {}
    if family == "gpt2":
        out["transformer.wte.weight"] = ours["tok_emb.weight"]
        out["transformer.wpe.weight"] = ours["pos_emb.weight"]
        for i in range(cfg.n_layers):
            a, b = f"blocks.{i}.", f"transformer.h.{i}."
            for ours_name, hf_name in (("norm1", "ln_1"), ("norm2", "ln_2")):
                out[b + hf_name + ".weight"] = ours[a + ours_name + ".weight"]
                out[b + hf_name + ".bias"] = ours[a + ours_name + ".bias"]
            for ours_name, hf_name in (
                ("attn.qkv", "attn.c_attn"),
                ("attn.proj", "attn.c_proj"),
                ("mlp.fc", "mlp.c_fc"),
                ("mlp.proj", "mlp.c_proj"),
            ):
                out[b + hf_name + ".weight"] = ours[a + ours_name + ".weight"].T  # Conv1D keeps (in, out)
                out[b + hf_name + ".bias"] = ours[a + ours_name + ".bias"]
        out["transformer.ln_f.weight"] = ours["norm.weight"]
        out["transformer.ln_f.bias"] = ours["norm.bias"]
        if not cfg.tie_embeddings:
            out["lm_head.weight"] = ours["lm_head.weight"]
    else:
        out["model.embed_tokens.weight"] = ours["tok_emb.weight"]
        for i in range(cfg.n_layers):
            a, b = f"blocks.{i}.", f"model.layers.{i}."
            qkv = ours[a + "attn.qkv.weight"]
            out[b + "self_attn.q_proj.weight"] = qkv[: H * D]
            out[b + "self_attn.k_proj.weight"] = qkv[H * D : (H + Hkv) * D]
            out[b + "self_attn.v_proj.weight"] = qkv[(H + Hkv) * D :]
            out[b + "self_attn.o_proj.weight"] = ours[a + "attn.proj.weight"]
            if family == "mixtral":
                out[b + "block_sparse_moe.gate.weight"] = ours[a + "mlp.router.weight"]
                for e in range(cfg.n_experts):
                    expert = b + f"block_sparse_moe.experts.{e}."
                    out[expert + "w1.weight"] = ours[a + "mlp.gate_up"][e, :Fd]
                    out[expert + "w3.weight"] = ours[a + "mlp.gate_up"][e, Fd:]
                    out[expert + "w2.weight"] = ours[a + "mlp.down"][e]
            else:
                gate_up = ours[a + "mlp.fc.weight"]
                out[b + "mlp.gate_proj.weight"] = gate_up[:Fd]
                out[b + "mlp.up_proj.weight"] = gate_up[Fd:]
                out[b + "mlp.down_proj.weight"] = ours[a + "mlp.proj.weight"]
            out[b + "input_layernorm.weight"] = ours[a + "norm1.weight"]
            out[b + "post_attention_layernorm.weight"] = ours[a + "norm2.weight"]
        out["model.norm.weight"] = ours["norm.weight"]
        if not cfg.tie_embeddings:
            out["lm_head.weight"] = ours["lm_head.weight"]
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def from_hf_state(cfg: ModelConfig, hf: dict) -> dict:
    """Our state dict (name -> array) from HF tensors."""
    family = family_of(cfg)

    def take(name):
        if name not in hf:
            raise UserError(f"the Hugging Face weights lack {name}")
        return np.asarray(hf[name], dtype=np.float32)

    ours = {}
    if family == "gpt2":
        ours["tok_emb.weight"] = take("transformer.wte.weight")
        ours["pos_emb.weight"] = take("transformer.wpe.weight")
        for i in range(cfg.n_layers):
            a, b = f"blocks.{i}.", f"transformer.h.{i}."
            for ours_name, hf_name in (("norm1", "ln_1"), ("norm2", "ln_2")):
                ours[a + ours_name + ".weight"] = take(b + hf_name + ".weight")
                ours[a + ours_name + ".bias"] = take(b + hf_name + ".bias")
            for ours_name, hf_name in (
                ("attn.qkv", "attn.c_attn"),
                ("attn.proj", "attn.c_proj"),
                ("mlp.fc", "mlp.c_fc"),
                ("mlp.proj", "mlp.c_proj"),
            ):
                ours[a + ours_name + ".weight"] = take(b + hf_name + ".weight").T
                ours[a + ours_name + ".bias"] = take(b + hf_name + ".bias")
        ours["norm.weight"] = take("transformer.ln_f.weight")
        ours["norm.bias"] = take("transformer.ln_f.bias")
    else:
        ours["tok_emb.weight"] = take("model.embed_tokens.weight")
        for i in range(cfg.n_layers):
            a, b = f"blocks.{i}.", f"model.layers.{i}."
            ours[a + "attn.qkv.weight"] = np.concatenate([take(b + f"self_attn.{n}_proj.weight") for n in "qkv"])
            ours[a + "attn.proj.weight"] = take(b + "self_attn.o_proj.weight")
            if family == "mixtral":
                ours[a + "mlp.router.weight"] = take(b + "block_sparse_moe.gate.weight")
                experts = [b + f"block_sparse_moe.experts.{e}." for e in range(cfg.n_experts)]
                ours[a + "mlp.gate_up"] = np.stack(
                    [np.concatenate([take(x + "w1.weight"), take(x + "w3.weight")]) for x in experts]
                )
                ours[a + "mlp.down"] = np.stack([take(x + "w2.weight") for x in experts])
            else:
                ours[a + "mlp.fc.weight"] = np.concatenate(
                    [take(b + "mlp.gate_proj.weight"), take(b + "mlp.up_proj.weight")]
                )
                ours[a + "mlp.proj.weight"] = take(b + "mlp.down_proj.weight")
            ours[a + "norm1.weight"] = take(b + "input_layernorm.weight")
            ours[a + "norm2.weight"] = take(b + "post_attention_layernorm.weight")
        ours["norm.weight"] = take("model.norm.weight")
    if not cfg.tie_embeddings:
        ours["lm_head.weight"] = take("lm_head.weight")
    return {k: np.ascontiguousarray(v) for k, v in ours.items()}


def hf_family(cfg: ModelConfig) -> str | None:
    """The Hugging Face family of this architecture, or None when transformers has no class for it."""
    try:
        return family_of(cfg)
    except UserError:
        return None


def hf_exact_family(cfg: ModelConfig) -> str | None:
    """The Hugging Face family that computes what this model computes, or None: transformers has no
    class for the architecture, or its experts have a capacity limit that HF's Mixtral lacks."""
    family = hf_family(cfg)
    if family == "mixtral" and cfg.capacity_factor:
        return None
    return family


def export_hf(model: Transformer, directory: str, metadata: dict | None = None, eot_id: int | None = None) -> None:
    """Write `config.json`, `generation_config.json` and `model.safetensors` that transformers'
    from_pretrained() loads.

    `metadata` (strings) joins the safetensors header, e.g. the tokenizer fingerprint. `eot_id`: the
    tokenizer's end-of-text id, where our generation stops; it becomes HF's bos/eos/pad ids (None is
    written as null, so that transformers does not fall back to its own defaults, LLaMA's 1 and 2, which
    are byte tokens here). The weights go first, config.json last: a new folder has a config.json only
    once its weights are complete."""
    os.makedirs(directory, exist_ok=True)
    config = hf_config(model.config)  # raises UserError first for an architecture HF has no class for
    ids = special_token_ids(eot_id)
    config.update(ids)
    with atomic_file(os.path.join(directory, "model.safetensors")) as f:
        f.write(save(to_hf_state(model), metadata={**(metadata or {}), "format": "pt"}))
    write_json(os.path.join(directory, "generation_config.json"), dict(ids, do_sample=False))
    write_json(os.path.join(directory, "config.json"), config)


def special_token_ids(eot_id: int | None) -> dict:
    """HF's bos/eos/pad ids for a tokenizer whose one special token is end-of-text (GPT-2's way)."""
    return {"bos_token_id": eot_id, "eos_token_id": eot_id, "pad_token_id": eot_id}


def is_hf_config(config: dict) -> bool:
    """A Hugging Face config.json (it names its model_type); gradcraft's own config has no such key."""
    return "model_type" in config


def is_hf_state(weights: dict) -> bool:
    """Weights in the Hugging Face layout rather than ours (our names start with tok_emb/blocks/norm)."""
    return "tok_emb.weight" not in weights


def hf_tokenizer_files(tok, seq_len: int | None = None) -> dict | None:
    """{file name: JSON document} of the tokenizer as `AutoTokenizer.from_pretrained` reads it
    (`tokenizer.json` + `tokenizer_config.json`), or None when HF would encode differently than we
    do (a tiktoken-style vocabulary whose merges HF would apply as rules): then write none."""
    from gradcraft.tokenizer import from_hf_json, to_hf_json

    doc = to_hf_json(tok)
    try:
        if from_hf_json(json.loads(json.dumps(doc))).fingerprint != tok.fingerprint:
            return None
    except UserError:
        return None
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False,
        "add_prefix_space": False,
    }
    if seq_len:
        config["model_max_length"] = seq_len
    if tok.eot_id is not None:
        config.update(eos_token="<|endoftext|>", bos_token="<|endoftext|>", unk_token="<|endoftext|>")
    return {"tokenizer.json": doc, "tokenizer_config.json": config}


def write_hf_tokenizer(tok, directory: str, seq_len: int | None = None) -> bool:
    """Write the tokenizer's HF files into `directory`; False (nothing written) when HF cannot express it."""
    files = hf_tokenizer_files(tok, seq_len)
    if files is None:
        return False
    for name, doc in files.items():
        write_text(os.path.join(directory, name), json.dumps(doc, ensure_ascii=False, indent=1) + "\n")
    return True


def import_hf(directory: str) -> Transformer:
    """Build our model from a Hugging Face model directory (config.json + model.safetensors), in eval
    mode as `from_pretrained` returns it (the config's dropouts act only after `model.train()`)."""
    config_path = os.path.join(directory, "config.json")
    weights_path = os.path.join(directory, "model.safetensors")
    for path in (config_path, weights_path):
        if not os.path.exists(path):
            raise UserError(
                f"{path} does not exist; a Hugging Face model directory holds config.json and model.safetensors"
            )
    with open(config_path) as f:
        cfg = config_from_hf(json.load(f))
    model = Transformer(cfg)
    model.load_state_dict(from_hf_state(cfg, load_file(weights_path)))
    return model.eval()
