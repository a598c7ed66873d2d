"""Tokenizer files (ours, HF tokenizer.json, tiktoken ranks) and token files.

HF `tokenizers` and `tiktoken` are the oracles: a vocabulary trained or built
there must encode here to exactly the same ids, and our export must load there.
"""

import base64
import json
import os
import random

import numpy as np
import pytest

from gradcraft.data.tokenfile import HEADER_BYTES, read_token_file, write_token_file
from gradcraft.errors import UserError
from gradcraft.tokenizer import Tokenizer, from_hf_json, from_tiktoken, to_hf_json, train
from gradcraft.tokenizer.formats import save_hf_json, save_tiktoken
from gradcraft.tokenizer.pretokenize import PATTERNS
from tokenizer_corpus import make_corpus

hf = pytest.importorskip("tokenizers")
tiktoken = pytest.importorskip("tiktoken")

CORPUS = make_corpus()
TEST_TEXTS = make_corpus(n_docs=15, seed=1) + ["日本語 😀 x" * 50, "    indented\n\tcode()\n", "naïve café 12345"]


# ------------------------------------------------------------- our own format
def test_save_load_identity(tmp_path):
    tok = train(CORPUS, vocab_size=500, pattern="gpt4", special_tokens=["<|endoftext|>", "<|pad|>"])
    path = tmp_path / "tok.json"
    tok.save(path)
    doc = json.loads(path.read_text())
    assert doc["format"] == "gradcraft-tokenizer" and doc["version"] == 1
    back = Tokenizer.load(path)
    assert back.fingerprint == tok.fingerprint and len(tok.fingerprint) == 16
    assert back.state() == tok.state()
    for t in TEST_TEXTS:
        assert back.encode(t, allowed_special="all") == tok.encode(t, allowed_special="all")
    assert [p.name for p in tmp_path.iterdir()] == ["tok.json"]  # no temp files left


def test_load_rejects_damaged_files(tmp_path):
    tok = train(CORPUS[:5], vocab_size=300)
    path = tmp_path / "tok.json"
    tok.save(path)
    doc = json.loads(path.read_text())
    doc["merges"][0][0] = 7
    path.write_text(json.dumps(doc))
    with pytest.raises(UserError, match="fingerprint"):
        Tokenizer.load(path)
    doc["version"] = 99
    path.write_text(json.dumps(doc))
    with pytest.raises(UserError, match="version 99"):
        Tokenizer.load(path)
    path.write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        Tokenizer.load(path)
    with pytest.raises(UserError, match="not found"):
        Tokenizer.load(tmp_path / "missing.json")


# ------------------------------------------------------------------------- HF
def hf_trained(pattern: str):
    from tokenizers import Regex, decoders, models, pre_tokenizers, trainers

    tk = hf.Tokenizer(models.BPE())
    if pattern == "gpt2":
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tk.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(PATTERNS[pattern]), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=700,
        special_tokens=["<|endoftext|>"],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tk.train_from_iterator(CORPUS, trainer)
    return tk


@pytest.mark.parametrize("pattern", ["gpt2", "gpt4"])
def test_hf_trained_vocab_encodes_identically(tmp_path, pattern):
    tk = hf_trained(pattern)
    path = tmp_path / "tokenizer.json"
    tk.save(str(path))
    ours = Tokenizer.load(path)
    assert ours.merge_mode == "merges" and "<|endoftext|>" in ours.special_tokens
    for text in TEST_TEXTS + CORPUS[:5]:
        # HF always matches added tokens in raw text: compare with allowed_special="all"
        assert ours.encode(text, allowed_special="all") == tk.encode(text).ids
        assert ours.decode(tk.encode(text).ids) == text


@pytest.mark.parametrize("pattern", ["gpt2", "gpt4", "none"])
def test_our_export_loads_in_hf(tmp_path, pattern):
    tok = train(CORPUS, vocab_size=600, pattern=pattern)
    path = tmp_path / "tokenizer.json"
    save_hf_json(tok, path)
    tk = hf.Tokenizer.from_file(str(path))
    for text in TEST_TEXTS:
        ids = tok.encode(text, allowed_special="all")
        assert tk.encode(text).ids == ids
        assert tk.decode(ids, skip_special_tokens=False) == text
    again = from_hf_json(to_hf_json(tok))
    assert again.fingerprint == tok.fingerprint


def test_hf_import_rejects_other_models():
    with pytest.raises(UserError, match="not BPE"):
        from_hf_json({"model": {"type": "WordPiece"}})


# ------------------------------------------------------------------- tiktoken
def tiktoken_encoding(ranks: dict, pattern: str):
    return tiktoken.Encoding(
        name="test",
        pat_str=PATTERNS[pattern],
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": max(ranks.values()) + 1},
    )


@pytest.mark.parametrize("pattern", ["gpt2", "gpt4"])
def test_tiktoken_rank_file_encodes_identically(tmp_path, pattern):
    tok = train(CORPUS, vocab_size=700, pattern=pattern, special_tokens=[])
    path = tmp_path / "vocab.tiktoken"
    save_tiktoken(tok, path)
    ranks = {base64.b64decode(t): int(r) for t, r in (line.split() for line in path.read_text().splitlines())}
    enc = tiktoken_encoding(ranks, pattern)
    ours = Tokenizer.load(path) if pattern == "gpt4" else from_tiktoken(path, pattern=pattern)
    assert ours.merge_mode == "ranks"
    for text in TEST_TEXTS:
        assert ours.encode_ordinary(text) == enc.encode_ordinary(text)


def test_tiktoken_rank_semantics_on_hand_made_vocab():
    # Ranks chosen so that merge-rule BPE and tiktoken's rank BPE disagree:
    # "bc" is cheaper than "ab", so "abc" is reached as a + bc, and "abcd"
    # then needs abc + d although no rule (abc, d) was ever "learned".
    ranks = {bytes([b]): b for b in range(256)}
    for k, t in enumerate([b"bc", b"ab", b"abc", b"cd", b"abcd", b"bcd", b"aa", b"aaa"]):
        ranks[t] = 256 + k
    enc = tiktoken_encoding(ranks, "gpt2")
    ours = from_tiktoken(ranks, pattern="gpt2")
    rng = random.Random(0)
    for _ in range(500):
        text = "".join(rng.choice("abcd ") for _ in range(rng.randrange(1, 30)))
        assert ours.encode_ordinary(text) == enc.encode_ordinary(text), text


# ----------------------------------------------------------------- token files
@pytest.mark.parametrize("vocab_size,dtype", [(500, np.uint16), (65536, np.uint16), (70000, np.uint32)])
def test_token_file_round_trip(tmp_path, vocab_size, dtype):
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, vocab_size, size=10_000)
    path = tmp_path / "t.bin"
    chunks = (tokens[i : i + 999] for i in range(0, tokens.size, 999))  # streamed
    n = write_token_file(path, chunks, vocab_size=vocab_size, fingerprint="abcdef0123456789")
    assert n == tokens.size
    got, header = read_token_file(path)
    assert got.dtype == dtype and header.dtype == dtype and header.count == tokens.size
    assert header.fingerprint == "abcdef0123456789" and header.vocab_size == vocab_size
    np.testing.assert_array_equal(got, tokens)
    assert os.path.getsize(path) == HEADER_BYTES + tokens.size * np.dtype(dtype).itemsize
    assert [p.name for p in tmp_path.iterdir()] == ["t.bin"]


def test_token_file_empty_and_array(tmp_path):
    write_token_file(tmp_path / "e.bin", np.zeros(0, np.int64), vocab_size=10)
    got, header = read_token_file(tmp_path / "e.bin")
    assert got.size == 0 and header.count == 0
    write_token_file(tmp_path / "a.bin", np.array([1, 2, 70000]))
    assert read_token_file(tmp_path / "a.bin")[0].dtype == np.uint32


def test_token_file_errors(tmp_path):
    path = tmp_path / "t.bin"
    write_token_file(path, np.arange(100), vocab_size=100)
    data = path.read_bytes()
    cases = {
        b"NOTTOKEN" + data[8:]: "not a gradcraft token file (bad magic)",
        data[:-10]: "is truncated: header says 100 tokens, file holds 95",
        data + b"\0\0": "longer than its header says",
        data[:8] + (7).to_bytes(4, "little") + data[12:]: "format version 7",
        data[:20]: "truncated",
    }
    for content, message in cases.items():
        path.write_bytes(content)
        with pytest.raises(UserError) as e:
            read_token_file(path)
        assert message in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(UserError, match="not found"):
        read_token_file(tmp_path / "nope.bin")


def test_token_file_write_failure_leaves_nothing(tmp_path):
    def tokens():
        yield np.arange(10)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_token_file(tmp_path / "t.bin", tokens(), vocab_size=100)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="does not fit"):
        write_token_file(tmp_path / "t.bin", [np.array([70000])], vocab_size=100)
    assert list(tmp_path.iterdir()) == []
