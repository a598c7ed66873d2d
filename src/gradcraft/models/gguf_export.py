"""A model and its tokenizer as one GGUF file, for llama.cpp and the tools built on it (ollama, LM Studio).

Written with the `gguf` package (by llama.cpp's authors; the `gguf` extra), in the layout llama.cpp's
own convert_hf_to_gguf.py writes:

- LLaMA-style models (rmsnorm, swiglu, rope, no biases; GQA allowed) as the `llama` architecture. Our
  q/k rows rotate halves (as HF's LLaMA); llama.cpp's `llama` rotates adjacent pairs, so the q and k
  projections' rows are permuted per head exactly as convert_hf_to_gguf.py permutes HF's.
- GPT-2-style models (layernorm, gelu, learned positions, biases) as the `gpt2` architecture, q/k/v
  fused as ours (attn_qkv). llama.cpp computes GELU with the tanh approximation.
- The tokenizer as a byte-level BPE (`tokenizer.ggml.model` "gpt2"): tokens in GPT-2's byte-to-unicode
  form, merges, special tokens as control tokens, <|endoftext|> as bos/eos; the pre-tokenizer named for
  llama.cpp by our split pattern (gpt2: "gpt-2", gpt4: "llama-bpe", whose regex is cl100k's).

Weights: f32, or f16 for the matrices (norms and biases stay f32, as llama.cpp's converter keeps them).
Quantised types are not written yet. Sliding-window attention and mixtures of experts are refused.
"""

import numpy as np

from gradcraft.errors import UserError
from gradcraft.models.hf import family_of

OUTTYPES = ("f32", "f16")
PRE_TOKENIZERS = {"gpt2": "gpt-2", "gpt4": "llama-bpe"}  # our split pattern -> llama.cpp's name for it


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """Rows of each head from halves-rotated order to pairs-rotated order (convert_hf_to_gguf.py's permute)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tensors(model) -> tuple[str, dict]:
    """(llama.cpp architecture, {GGUF tensor name: float32 array}) of our model."""
    cfg = model.config
    family = family_of(cfg)  # a UserError for an architecture with no HF (and so no llama.cpp) equivalent
    if family not in ("gpt2", "llama"):
        raise UserError(
            f"export --format gguf writes LLaMA- and GPT-2-style models; this one is {family} "
            "(sliding-window attention or experts): export --format hf, which llama.cpp's convert_hf_to_gguf.py reads"
        )
    ours = {k: np.asarray(v.float().numpy(), dtype=np.float32) for k, v in model.state_dict().items()}
    out = {"token_embd.weight": ours["tok_emb.weight"], "output_norm.weight": ours["norm.weight"]}
    if not cfg.tie_embeddings:  # tied: llama.cpp uses token_embd for the output, as we do
        out["output.weight"] = ours["lm_head.weight"]
    H, Hkv, D = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    for i in range(cfg.n_layers):
        a, b = f"blocks.{i}.", f"blk.{i}."
        out[b + "attn_norm.weight"] = ours[a + "norm1.weight"]
        out[b + "ffn_norm.weight"] = ours[a + "norm2.weight"]
        if family == "gpt2":
            for ours_name, name in (("attn.qkv", "attn_qkv"), ("attn.proj", "attn_output"), ("mlp.fc", "ffn_up")):
                out[b + name + ".weight"] = ours[a + ours_name + ".weight"]
                out[b + name + ".bias"] = ours[a + ours_name + ".bias"]
            out[b + "ffn_down.weight"] = ours[a + "mlp.proj.weight"]
            out[b + "ffn_down.bias"] = ours[a + "mlp.proj.bias"]
            out[b + "attn_norm.bias"] = ours[a + "norm1.bias"]
            out[b + "ffn_norm.bias"] = ours[a + "norm2.bias"]
            continue
        qkv, gate_up, F = ours[a + "attn.qkv.weight"], ours[a + "mlp.fc.weight"], cfg.ffn_dim
        out[b + "attn_q.weight"] = _permute(qkv[: H * D], H)
        out[b + "attn_k.weight"] = _permute(qkv[H * D : (H + Hkv) * D], Hkv)
        out[b + "attn_v.weight"] = qkv[(H + Hkv) * D :]
        out[b + "attn_output.weight"] = ours[a + "attn.proj.weight"]
        out[b + "ffn_gate.weight"], out[b + "ffn_up.weight"] = gate_up[:F], gate_up[F:]
        out[b + "ffn_down.weight"] = ours[a + "mlp.proj.weight"]
    if family == "gpt2":
        out["position_embd.weight"] = ours["pos_emb.weight"]
        out["output_norm.bias"] = ours["norm.bias"]
    return ("gpt2" if family == "gpt2" else "llama"), out


def tokenizer_fields(tok, vocab_size: int) -> dict:
    """The tokenizer.ggml.* values: tokens (by id, padded with unused ones up to the model's vocabulary),
    their types, merges, the pre-tokenizer's name and the end-of-text id."""
    from gradcraft.tokenizer import to_hf_json
    from gradcraft.tokenizer.pretokenize import PATTERNS

    pre = next((llama for ours, llama in PRE_TOKENIZERS.items() if tok.pattern == PATTERNS[ours]), None)
    if pre is None:
        raise UserError(
            f"llama.cpp has no pre-tokenizer for this tokenizer's split pattern ({tok.pattern_name!r}); "
            f"GGUF export takes tokenizers made with --pattern {' or '.join(PRE_TOKENIZERS)}"
        )
    doc = to_hf_json(tok)
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]
    types = [5] * vocab_size  # llama.cpp's UNUSED, for ids past the tokenizer's (a padded vocabulary)
    for text, i in doc["model"]["vocab"].items():
        tokens[i], types[i] = text, 1  # NORMAL
    for special in doc.get("added_tokens", []):
        tokens[special["id"]], types[special["id"]] = special["content"], 3  # CONTROL
    merges = [m if isinstance(m, str) else " ".join(m) for m in doc["model"].get("merges", [])]
    return {"pre": pre, "tokens": tokens, "types": types, "merges": merges, "eot": tok.eot_id}


def export_gguf(model, tokenizer, path: str, outtype: str = "f16", name: str = "gradcraft") -> None:
    """Write `path` (a .gguf file): the model's config, weights (f32 or f16) and tokenizer."""
    import gguf

    if outtype not in OUTTYPES:
        raise UserError(f"--outtype must be one of {', '.join(OUTTYPES)}, got {outtype!r}")
    if tokenizer is None:
        raise UserError("a GGUF file carries its tokenizer, and this run folder has none; give a run that has one")
    cfg = model.config
    arch, tensors = gguf_tensors(model)
    vocab = tokenizer_fields(tokenizer, cfg.vocab_size)
    writer = gguf.GGUFWriter(path, arch=arch)
    writer.add_name(name)
    writer.add_context_length(cfg.seq_len)
    writer.add_embedding_length(cfg.dim)
    writer.add_block_count(cfg.n_layers)
    writer.add_feed_forward_length(cfg.ffn_dim)
    writer.add_head_count(cfg.n_heads)
    if arch == "llama":
        writer.add_head_count_kv(cfg.n_kv_heads)
        writer.add_rope_dimension_count(cfg.head_dim)
        writer.add_rope_freq_base(cfg.rope_base)
        writer.add_layer_norm_rms_eps(cfg.norm_eps)
        if cfg.head_dim * cfg.n_heads != cfg.dim:
            writer.add_key_length(cfg.head_dim)
            writer.add_value_length(cfg.head_dim)
    else:
        writer.add_layer_norm_eps(cfg.norm_eps)
    writer.add_vocab_size(cfg.vocab_size)
    f16 = outtype == "f16"
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if f16 else gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(vocab["pre"])
    writer.add_token_list(vocab["tokens"])
    writer.add_token_types(vocab["types"])
    writer.add_token_merges(vocab["merges"])
    if vocab["eot"] is not None:
        writer.add_bos_token_id(vocab["eot"])
        writer.add_eos_token_id(vocab["eot"])
    writer.add_add_bos_token(False)  # our prompts start with the text itself
    for tensor_name, value in tensors.items():
        writer.add_tensor(tensor_name, value.astype(np.float16) if f16 and value.ndim == 2 else value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
