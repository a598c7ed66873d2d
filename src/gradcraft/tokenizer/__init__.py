"""Byte-level BPE tokenizer: train, encode, decode, save, load, import/export.

    from gradcraft.tokenizer import train, Tokenizer
    tok = train(texts, vocab_size=8192, pattern="gpt4")
    ids = tok.encode("hello world")
    tok.save("tokenizer.json"); tok = Tokenizer.load("tokenizer.json")

Files: pretokenize.py (split patterns), bpe.py (Tokenizer, encode/decode),
train.py (learning merges), formats.py (our file, HF tokenizer.json,
tiktoken rank files), parallel.py (multi-process counting and encoding).
"""

from gradcraft.tokenizer import k2 as _k2  # noqa: F401 (registers K2's pre-tokenizer)
from gradcraft.tokenizer.bpe import Tokenizer
from gradcraft.tokenizer.formats import (
    from_hf_json,
    from_tiktoken,
    load_tokenizer,
    save_hf_json,
    save_tiktoken,
    save_tokenizer,
    to_hf_json,
)
from gradcraft.tokenizer.pretokenize import PATTERNS
from gradcraft.tokenizer.train import train

__all__ = [
    "Tokenizer",
    "train",
    "load_tokenizer",
    "save_tokenizer",
    "from_hf_json",
    "to_hf_json",
    "save_hf_json",
    "from_tiktoken",
    "save_tiktoken",
    "PATTERNS",
]
