"""Tokenizer files: our own format, HF `tokenizer.json`, tiktoken rank files.

Our format (JSON, documented in docs/tokenizer.md):

    {"format": "gradcraft-tokenizer", "version": 1,
     "fingerprint": "<sha256 of the canonical content>", "vocab_size": N,
     "pattern_name": "gpt2", "pattern": "<regex or null>",
     "merge_mode": "merges", "byte_ids": [256 ids],
     "merges": [[left, right, new], ...],          # in rank order
     "special_tokens": {"<|endoftext|>": N-1},
     "extra_tokens": {}, "whole_piece": false}

`load_tokenizer` reads any of the three kinds and tells them apart by content; it also reads
K2's `tokenizer.bbpe`, `merges.txt` or `vocab.json` (tokenizer/k2.py).
"""

from __future__ import annotations

import base64
import json
import os

from gradcraft.atomic import write_text
from gradcraft.errors import UserError
from gradcraft.tokenizer.bpe import _ENTRY as _bpe_entry
from gradcraft.tokenizer.bpe import Tokenizer, _rebuild, bytes_to_unicode  # noqa: F401 (bytes_to_unicode: its old home)
from gradcraft.tokenizer.pretokenize import PATTERNS

FORMAT_NAME = "gradcraft-tokenizer"
FORMAT_VERSION = 1


# ------------------------------------------------------------- our own format
def save_tokenizer(tok: Tokenizer, path) -> None:
    doc = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "fingerprint": tok.full_fingerprint,
        "vocab_size": tok.vocab_size,
    }
    doc.update(tok.state())
    # One merge per line keeps the file diffable and readable.
    text = json.dumps(doc, indent=1, ensure_ascii=False)
    write_text(path, text + "\n")


def load_tokenizer(path, pattern: str | None = None, special_tokens=None) -> Tokenizer:
    """Load our format, an HF tokenizer.json, or a tiktoken rank file.

    `pattern` and `special_tokens` are only used for tiktoken rank files,
    which carry neither (default: gpt4 pattern, no special tokens)."""
    from gradcraft import validation

    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size > validation.MAX_TOKENIZER_BYTES:
                raise UserError(
                    f"tokenizer file {path} is larger than {validation.MAX_TOKENIZER_BYTES:,} bytes; "
                    "no tokenizer is that large: check the path"
                )
            raw = f.read()
    except FileNotFoundError:
        raise UserError(f"tokenizer file {path} not found") from None
    except OSError as e:
        raise UserError(f"cannot read tokenizer file {path}: {e.strerror}") from None
    if raw[:6] == b"BBPEV1" or raw.startswith(b"#version") or os.path.basename(path) == "vocab.json":
        from gradcraft.tokenizer.k2 import load_k2_tokenizer  # K2's tokenizer.bbpe, merges.txt or vocab.json

        return load_k2_tokenizer(path)
    if raw.lstrip()[:1] != b"{":
        return from_tiktoken(_parse_rank_file(raw, path), pattern=pattern or "gpt4", special_tokens=special_tokens)
    doc = validation.parse_json(raw, path)  # also refuses JSON nested too deeply to parse
    if not isinstance(doc, dict):
        raise UserError(f"{path} holds a JSON {type(doc).__name__}, not a tokenizer object")
    if doc.get("format") == FORMAT_NAME:
        return _from_ours(doc, path)
    if isinstance(doc.get("model"), dict):
        try:
            return from_hf_json(doc, source=path)
        except (AttributeError, TypeError, KeyError, ValueError, IndexError, MemoryError) as e:
            # a field of the wrong type or shape somewhere in the HF document
            raise UserError(f"{path} is a damaged HF tokenizer.json ({type(e).__name__}: {e})") from None
    raise UserError(f"{path} is neither a gradcraft tokenizer nor an HF tokenizer.json")


def _from_ours(doc: dict, path: str) -> Tokenizer:
    version = doc.get("version")
    if version != FORMAT_VERSION:
        raise UserError(
            f"{path} has tokenizer format version {version}; this gradcraft reads "
            f"version {FORMAT_VERSION} (upgrade gradcraft)"
        )
    try:
        tok = _rebuild(
            {
                **{
                    k: doc[k]
                    for k in (
                        "pattern",
                        "byte_ids",
                        "merges",
                        "special_tokens",
                        "merge_mode",
                        "extra_tokens",
                        "whole_piece",
                    )
                },
                "split_specials": bool(doc.get("split_specials", False)),
            }
        )
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, MemoryError) as e:
        raise UserError(f"{path} is a damaged gradcraft tokenizer file ({type(e).__name__}: {e})") from None
    if doc.get("fingerprint") != tok.full_fingerprint:
        raise UserError(f"{path} does not match its fingerprint: the file was edited or damaged")
    return tok


# ------------------------------------------------- HF byte-level tokenizer.json
def _hf_pre_tokenizer(pre, source) -> str:
    """HF pre_tokenizer JSON -> our pattern (regex or None)."""

    def byte_level(p):
        if p.get("add_prefix_space"):
            raise UserError(f"{source}: ByteLevel add_prefix_space=true is not supported")
        return p.get("use_regex", True)

    if pre is None:
        raise UserError(f"{source}: no pre_tokenizer; only byte-level BPE tokenizers are supported")
    if pre.get("type") == "ByteLevel":
        return PATTERNS["gpt2"] if byte_level(pre) else None
    if pre.get("type") == "Sequence":
        steps = pre.get("pretokenizers", [])
        if (
            len(steps) == 2
            and steps[0].get("type") == "Split"
            and steps[1].get("type") == "ByteLevel"
            and not byte_level(steps[1])
            and steps[0].get("behavior") == "Isolated"
            and not steps[0].get("invert")
            and "Regex" in steps[0].get("pattern", {})
        ):
            return steps[0]["pattern"]["Regex"]
    raise UserError(
        f"{source}: unsupported pre_tokenizer {pre.get('type')!r} "
        "(supported: ByteLevel, or Sequence[Split(Regex, Isolated), ByteLevel(use_regex=false)])"
    )


def from_hf_json(doc, source: str = "tokenizer.json") -> Tokenizer:
    """Import an HF `tokenizers` byte-level BPE (a dict or a path)."""
    if not isinstance(doc, dict):
        source = os.fspath(doc)
        with open(source, encoding="utf-8") as f:
            doc = json.load(f)
    model = doc.get("model") or {}
    if model.get("type") != "BPE":
        raise UserError(f"{source}: model type {model.get('type')!r} is not BPE")
    for key in ("continuing_subword_prefix", "end_of_word_suffix", "dropout"):
        if model.get(key):
            raise UserError(f"{source}: BPE option {key}={model[key]!r} is not supported")
    if model.get("byte_fallback"):
        raise UserError(f"{source}: byte_fallback BPE is not byte-level BPE")
    if doc.get("normalizer") is not None:
        raise UserError(f"{source}: normalizers are not supported (found {doc['normalizer'].get('type')!r})")
    pattern = _hf_pre_tokenizer(doc.get("pre_tokenizer"), source)

    from_unicode = {c: b for b, c in bytes_to_unicode().items()}
    vocab = {}
    try:
        for s, i in model["vocab"].items():
            vocab[bytes(from_unicode[c] for c in s)] = int(i)
    except KeyError:
        raise UserError(f"{source}: vocabulary entry {s!r} is not in byte-level form") from None
    specials = {t["content"]: int(t["id"]) for t in doc.get("added_tokens", [])}
    special_ids = set(specials.values())
    vocab = {b: i for b, i in vocab.items() if i not in special_ids}
    missing = [b for b in range(256) if bytes([b]) not in vocab]
    if missing:
        raise UserError(f"{source}: {len(missing)} of the 256 single bytes have no token; not a byte-level BPE")
    merges = []
    for m in model.get("merges", []):
        a, b = m.split(" ") if isinstance(m, str) else m
        ab, bb = (bytes(from_unicode[c] for c in x) for x in (a, b))
        if ab + bb not in vocab:
            raise UserError(f"{source}: merge {a!r} {b!r} makes a token missing from the vocabulary")
        merges.append((vocab[ab], vocab[bb], vocab[ab + bb]))
    made = {t for _, _, t in merges} | {vocab[bytes([b])] for b in range(256)}
    extra = {i: b for b, i in vocab.items() if i not in made}
    return Tokenizer(
        pattern=pattern,
        byte_ids=[vocab[bytes([b])] for b in range(256)],
        merges=merges,
        special_tokens=specials,
        merge_mode="merges",
        extra_tokens=extra,
        whole_piece=bool(model.get("ignore_merges")),
    )


def to_hf_json(tok: Tokenizer) -> dict:
    """Export as an HF tokenizer.json dict (byte-level BPE). A tiktoken-style
    ("ranks") tokenizer exports its recovered merges; HF then applies them as
    merge rules, which can differ from tiktoken on rare pieces."""
    uni = bytes_to_unicode()

    def u(b: bytes) -> str:
        return "".join(uni[x] for x in b)

    vocab = {u(b): i for i, b in sorted(tok.token_bytes.items())}
    merges = [f"{u(tok.token_bytes[a])} {u(tok.token_bytes[b])}" for a, b, _ in tok.merges]
    if tok.pattern == PATTERNS["gpt2"]:
        pre = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    elif tok.pattern is None:
        pre = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    else:
        pre = {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": tok.pattern}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            ],
        }
    added = [
        {
            "id": i,
            "content": s,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for s, i in sorted(tok.special_tokens.items(), key=lambda x: x[1])
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": pre,
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": tok.whole_piece,
            "vocab": vocab,
            "merges": merges,
        },
    }


def save_hf_json(tok: Tokenizer, path) -> None:
    write_text(path, json.dumps(to_hf_json(tok), ensure_ascii=False, indent=1) + "\n")


# ------------------------------------------------------- tiktoken rank files
def _parse_rank_file(raw: bytes, path: str) -> dict[bytes, int]:
    ranks = {}
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except ValueError:
            raise UserError(f"{path} line {n}: expected 'base64-token rank'; not a tokenizer file") from None
    if not ranks:
        raise UserError(f"{path} is empty; not a tokenizer file")
    return ranks


def save_tiktoken(tok: Tokenizer, path) -> None:
    """Write the ordinary tokens as a tiktoken rank file (rank = our id)."""
    lines = [f"{base64.b64encode(b).decode()} {i}" for i, b in sorted(tok.token_bytes.items())]
    write_text(path, "\n".join(lines) + "\n")


def _bpe_parts(ranks: dict[bytes, int], token: bytes, max_rank: int) -> list[bytes]:
    """tiktoken's merging of `token`, using only ranks below max_rank."""
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best, best_i = None, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best is None or r < best):
                best, best_i = r, i
        if best is None:
            break
        parts[best_i : best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    return parts


def from_tiktoken(ranks, pattern: str = "gpt4", special_tokens=None) -> Tokenizer:
    """Import a tiktoken vocabulary: a rank file path or {token bytes: rank}.

    tiktoken merges any adjacent pair whose concatenation is a token, lowest
    rank first, and the ids are the ranks; the result encodes like tiktoken
    ("ranks" mode). The merge that makes each token (needed for HF export)
    is recovered by running tiktoken's merging on the token's own bytes with
    only lower ranks: it ends in exactly two parts."""
    if not isinstance(ranks, dict):
        path = os.fspath(ranks)
        with open(path, "rb") as f:
            ranks = _parse_rank_file(f.read(), path)
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise UserError(f"tiktoken vocabulary lacks {len(missing)} of the 256 single bytes")
    merges, extra = [], {}
    for token, rank in sorted(ranks.items(), key=lambda x: x[1]):
        if len(token) < 2:
            continue
        parts = _bpe_parts(ranks, token, rank)
        if len(parts) == 2:
            merges.append((ranks[parts[0]], ranks[parts[1]], rank))
        else:
            extra[rank] = token
    if isinstance(special_tokens, (list, tuple)):
        first = max(ranks.values()) + 1
        special_tokens = {s: first + k for k, s in enumerate(special_tokens)}
    return Tokenizer(
        pattern=pattern,
        byte_ids=[ranks[bytes([b])] for b in range(256)],
        merges=merges,
        special_tokens=special_tokens or {},
        merge_mode="ranks",
        extra_tokens=extra,
        whole_piece=True,
    )


_bpe_entry.update(save=save_tokenizer, load=load_tokenizer)  # Tokenizer.save / Tokenizer.load
