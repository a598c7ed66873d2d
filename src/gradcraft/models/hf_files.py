"""A Hugging Face checkpoint folder read from local files (no downloads): its config.json, its
weights (model.safetensors, the shards a model.safetensors.index.json lists, or pytorch_model.bin)
and its tokenizer.json, as our ModelConfig, our state dict and our Tokenizer (gradcraft/models/hf.py
converts the names and layouts). The families are hf.py's: GPT-2, LLaMA, Mistral, Ministral, Mixtral.
"""

import json
import os

import numpy as np

from gradcraft.errors import UserError
from gradcraft.models.config import ModelConfig
from gradcraft.models.hf import config_from_hf, from_hf_state

HOLDS = "an HF checkpoint folder holds config.json, model.safetensors (or pytorch_model.bin) and tokenizer.json"


def read_hf_config(folder: str) -> ModelConfig:
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        raise UserError(f"{folder} has no config.json; {HOLDS}")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise UserError(f"{path} is not readable JSON ({e})") from None
    if not isinstance(doc, dict) or "model_type" not in doc:
        raise UserError(f"{path} is not a Hugging Face config (it names no model_type)")
    try:
        config = config_from_hf(doc)
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"{path} is not a Hugging Face config gradcraft reads ({type(e).__name__}: {e})") from None
    config.extra = dict(config.extra, imported_from="hf", hf_model_type=doc["model_type"])
    return config


def read_hf_tensors(folder: str) -> dict:
    """name -> float32 array, from whichever weights file the folder holds."""
    from safetensors.numpy import load_file

    single, index = os.path.join(folder, "model.safetensors"), os.path.join(folder, "model.safetensors.index.json")
    tensors = {}
    try:
        if os.path.isfile(single):
            tensors = load_file(single)
        elif os.path.isfile(index):
            with open(index, encoding="utf-8") as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
            for shard in shards:
                tensors.update(load_file(os.path.join(folder, shard)))
        elif os.path.isfile(os.path.join(folder, "pytorch_model.bin")):
            tensors = _read_torch_bin(os.path.join(folder, "pytorch_model.bin"))
        else:
            raise UserError(f"{folder} has no model.safetensors, model.safetensors.index.json or pytorch_model.bin")
    except UserError:
        raise
    except Exception as e:  # safetensors' and torch's own error types for damaged files
        raise UserError(f"the weights in {folder} are unreadable ({type(e).__name__}: {e})") from None
    return {k: np.asarray(v, dtype=np.float32) if v.dtype != np.float32 else v for k, v in tensors.items()}


def _read_torch_bin(path: str) -> dict:
    try:
        import torch
    except ModuleNotFoundError:
        raise UserError(
            f"{path} is a PyTorch pickle, which needs torch to read; install torch, or convert the folder to "
            "model.safetensors"
        ) from None
    state = torch.load(path, map_location="cpu", weights_only=True)  # weights only: no code from the file
    return {k: v.float().numpy() for k, v in state.items() if hasattr(v, "float")}


def our_state(config: ModelConfig, tensors: dict) -> dict:
    """Our state dict from an HF folder's tensors; GPT-2 checkpoints saved from the bare GPT2Model
    (OpenAI's own `gpt2`) name their tensors without the `transformer.` prefix."""
    if config.extra.get("hf_model_type") == "gpt2" and "transformer.wte.weight" not in tensors:
        tensors = {k if k.startswith("lm_head.") else f"transformer.{k}": v for k, v in tensors.items()}
    if not config.tie_embeddings and "lm_head.weight" not in tensors:
        raise UserError("the Hugging Face weights lack lm_head.weight, and config.json does not tie the embeddings")
    return from_hf_state(config, tensors)


def read_hf_tokenizer(folder: str):
    """The folder's tokenizer.json as our Tokenizer (byte-level BPE: GPT-2's, LLaMA 3's, Mistral's tekken)."""
    from gradcraft.tokenizer import load_tokenizer

    path = os.path.join(folder, "tokenizer.json")
    if not os.path.isfile(path):
        raise UserError(f"{folder} has no tokenizer.json; {HOLDS}")
    try:
        return load_tokenizer(path)
    except UserError as e:
        raise UserError(
            f"the tokenizer {path} cannot be read as byte-level BPE ({e}); gradcraft reads GPT-2 style "
            "tokenizers (SentencePiece ones, as LLaMA 2's, are not supported)"
        ) from None
