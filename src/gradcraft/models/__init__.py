"""Decoder-only transformers: one configurable model and named presets."""

from gradcraft.models.config import PRESETS, ModelConfig, preset  # noqa: F401
from gradcraft.models.transformer import KVCache, Transformer, describe  # noqa: F401
