"""Byte-level BPE: round trips, special tokens, determinism, the incremental
trainer against a naive one, chunked/parallel encoding against one pass."""

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gradcraft.errors import UserError
from gradcraft.tokenizer import Tokenizer, train
from gradcraft.tokenizer import bpe, parallel
from gradcraft.tokenizer.pretokenize import compile_pattern, split_pieces
from gradcraft.tokenizer.train import count_pieces, learn_merges
from tokenizer_corpus import make_corpus

PATTERNS = ["gpt2", "gpt4", "none"]
CORPUS = make_corpus()


@pytest.fixture(scope="module", params=PATTERNS)
def tok(request):
    return train(CORPUS, vocab_size=600, pattern=request.param)


SAMPLES = [
    "",
    "a",
    "hello world",
    "  leading and trailing  ",
    "line\nbreaks\r\n\r\nand\ttabs",
    "日本語のテキスト、世界",
    "emoji 😀👍🏽🇫🇷 and ZWJ 👩‍👩‍👧",
    "\x00\x01\x1b[31mred\x7f",
    "don't WE'LL it's 12345678 3.14159",
    "x" * 5000,
    " " * 3000 + "y",
    "ab" * 2000,
    "<|endoftext|>",
    "a<|endoftext|>b",
    "<|endoftext|><|endoftext|>",
]


@pytest.mark.parametrize("text", SAMPLES)
def test_round_trip_samples(tok, text):
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert all(0 <= i < tok.vocab_size for i in ids)


@settings(max_examples=150, deadline=None)
@given(st.text())
def test_round_trip_any_text(text):
    for t in _TOKS:
        assert t.decode(t.encode(text)) == text


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=300))
def test_round_trip_any_bytes(data):
    for t in _TOKS:
        assert t.decode_bytes(t.encode_bytes(data)) == data


_TOKS = [train(CORPUS[:10], vocab_size=400, pattern=p) for p in PATTERNS]


def test_invalid_utf8_and_lone_surrogates(tok):
    for data in [b"\xff\xfe", b"abc\x80def", b"\xed\xa0\x80", b"caf\xc3", b"\xc3(\xa0\xa1 ok", bytes(range(256))]:
        assert tok.decode_bytes(tok.encode_bytes(data)) == data
        assert tok.decode(tok.encode_bytes(data), errors="surrogateescape") == data.decode("utf-8", "surrogateescape")
    text = "a\ud800b"  # a str can hold a lone surrogate: must encode, not crash
    assert tok.decode(tok.encode(text), errors="surrogatepass") == text


def test_long_piece_heap_matches_scan(tok, monkeypatch):
    text = "".join(CORPUS[:3])
    fast = tok.encode_ordinary(text)
    monkeypatch.setattr(bpe, "LONG_PIECE", 10**9)  # force the quadratic scan everywhere
    slow = bpe._rebuild(tok.state())
    assert slow.encode_ordinary(text) == fast


def test_id_layout_and_specials():
    tok = train(CORPUS, vocab_size=300, special_tokens=["<|endoftext|>", "<|pad|>"])
    assert tok.vocab_size == 300
    assert [tok.decode_bytes([i]) for i in range(256)] == [bytes([i]) for i in range(256)]
    assert [t for _, _, t in tok.merges] == list(range(256, 298))
    assert tok.special_tokens == {"<|endoftext|>": 298, "<|pad|>": 299}
    assert tok.eot_id == 298


def test_special_tokens_only_when_allowed(tok):
    eot = tok.special_tokens["<|endoftext|>"]
    text = "x<|endoftext|>y"
    assert eot not in tok.encode(text)
    assert tok.decode(tok.encode(text)) == text
    assert tok.encode(text, allowed_special="all") == tok.encode("x") + [eot] + tok.encode("y")
    assert tok.encode(text, allowed_special={"<|endoftext|>"}).count(eot) == 1
    with pytest.raises(ValueError):
        tok.encode(text, allowed_special={"<|nope|>"})


def test_special_tokens_never_merged():
    # With no split pattern the trainer would happily merge across "<|endoftext|>";
    # special tokens are cut out of the training text first.
    text = "ab<|endoftext|>ab<|endoftext|>" * 200
    tok = train([text], vocab_size=300, pattern="none")
    for i, b in tok.token_bytes.items():
        assert b"<|endoftext|>" not in b
        assert not (b.startswith(b"b<") or b.endswith(b"|>a"))
    assert tok.special_tokens["<|endoftext|>"] not in tok.encode_ordinary(text)


def test_vocab_size_too_small():
    with pytest.raises(UserError, match="too small"):
        train(["abc"], vocab_size=256, special_tokens=["<|endoftext|>"])


def test_decode_bad_id(tok):
    with pytest.raises(ValueError, match="not in the vocabulary"):
        tok.decode([0, tok.vocab_size + 5])
    with pytest.raises(ValueError, match="token id -1 is not"):
        tok.decode([5, -1])
    assert tok.decode(np.array(tok.encode("héllo"), dtype=np.uint16)) == "héllo"


def test_runs_out_of_pairs():
    tok = train(["ab ab ab"], vocab_size=1000, special_tokens=[])
    assert tok.vocab_size < 1000
    assert tok.encode("ab") == [256]


def naive_merges(counts: Counter, n_merges: int) -> list[tuple[int, int]]:
    """Reference trainer: recount every pair before every merge."""
    words = {tuple(p.encode()): c for p, c in counts.items()}
    merges = []
    for k in range(n_merges):
        pairs = Counter()
        for w, c in words.items():
            for p in zip(w, w[1:]):
                pairs[p] += c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        new_words = Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(256 + k)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words[tuple(out)] += c
        words = new_words
    return merges


@pytest.mark.parametrize("pattern", ["gpt2", "none"])
def test_incremental_trainer_matches_naive(pattern):
    rx = compile_pattern(pattern)
    counts = Counter()
    for doc in CORPUS[:8]:
        counts.update(count_pieces(doc.replace("<|endoftext|>", ""), rx))
    assert learn_merges(counts, 150) == naive_merges(counts, 150)


def test_none_pattern_trains_fast_on_long_documents():
    # one 1 MB piece: each merge must visit only its occurrences
    import time

    text = "".join(CORPUS) * 25
    t = time.perf_counter()
    tok = train([text], vocab_size=600, pattern="none", special_tokens=[])
    assert time.perf_counter() - t < 20
    assert tok.decode(tok.encode(text[:20000])) == text[:20000]


def test_deterministic_and_worker_independent(monkeypatch):
    big = CORPUS * 8
    a = train(big, vocab_size=500, pattern="gpt4", workers=1)
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 20_000)
    from gradcraft.tokenizer.parallel import count_pieces_parallel

    serial = Counter()
    for doc in big:
        serial.update(count_pieces(doc, compile_pattern("gpt4"), None))
    par = count_pieces_parallel(big, "gpt4", [], workers=2)
    assert par == serial
    b = train(big, vocab_size=500, pattern="gpt4", workers=1)
    assert a.merges == b.merges and a.fingerprint == b.fingerprint
    c = train(list(reversed(big)), vocab_size=500, pattern="gpt4")
    assert c.fingerprint == a.fingerprint


@pytest.mark.parametrize("pattern", ["gpt2", "gpt4", "none"])
@pytest.mark.parametrize("workers", [1, 2])
def test_chunked_parallel_encoding_matches_one_pass(tmp_path, pattern, workers):
    tok = train(CORPUS, vocab_size=500, pattern=pattern)
    paths, texts = [], []
    for k, doc in enumerate(CORPUS[:12]):
        p = tmp_path / f"{k}.txt"
        data = (doc * 3).encode("utf-8") + (b"\xff\xfe tail" if k % 4 == 0 else b"")
        p.write_bytes(data)
        paths.append(str(p))
        texts.append(data)
    chunks = parallel.plan_chunks(paths, pattern, chunk_bytes=200)
    if pattern != "none":
        assert len(chunks) > len(paths)  # really cut into chunks
    got = {}
    for (doc, _, _, _), arr in parallel.encode_chunks(tok, chunks, workers, dtype=np.uint32):
        got.setdefault(doc, []).extend(arr.tolist())
    for k, data in enumerate(texts):
        assert got[k] == tok.encode_bytes(data)


def test_pieces_split_as_documented():
    assert split_pieces("Hello world!!", compile_pattern("gpt2")) == ["Hello", " world", "!!"]
    assert split_pieces("x 1234567", compile_pattern("gpt4")) == ["x", " ", "123", "456", "7"]
    assert split_pieces("a b", compile_pattern("none")) == ["a b"]


def test_pickle_round_trip(tok):
    import pickle

    t2 = pickle.loads(pickle.dumps(tok))
    assert t2.fingerprint == tok.fingerprint
    assert t2.encode(CORPUS[0]) == tok.encode(CORPUS[0])


@pytest.mark.parametrize("name", ["gpt2", "gpt4"])
def test_ascii_fast_path_equals_full_pattern(name):
    import random
    import re

    import regex
    from gradcraft.tokenizer.pretokenize import ASCII_PATTERNS
    from gradcraft.tokenizer.pretokenize import PATTERNS as RX

    full, fast = regex.compile(RX[name]), re.compile(ASCII_PATTERNS[name])
    rng = random.Random(0)
    alphabet = [chr(c) for c in range(128)] + list("aZ09 \n'sSdDlLvVtTmMrReE") * 3
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(300))) for _ in range(2000)]
    texts += [doc for doc in CORPUS if doc.isascii()] + ["don't I'LL we've 'S 'Ve x's 12345 \r\n\r\n  \t\x0b\x1c\x1f"]
    for t in texts:
        assert fast.findall(t) == full.findall(t), repr(t)


# ------------------------------------------------- merge order, without optional libraries


def naive_encode_piece(data: bytes, merges) -> list[int]:
    """Reference BPE on one piece, from the definition: while some adjacent pair is a merge rule,
    apply the rule of lowest rank, at its leftmost occurrence first and then every other one."""
    rank = {(a, b): (r, t) for r, (a, b, t) in reversed(list(enumerate(merges)))}  # first rule wins
    ids = list(data)
    while True:
        ranked = [rank[p] for p in zip(ids, ids[1:]) if p in rank]
        if not ranked:
            return ids
        r, t = min(ranked)
        pair, out, i = merges[r][:2], [], 0
        while i < len(ids):
            if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
                out.append(t)
                i += 2
            else:
                out.append(ids[i])
                i += 1
        ids = out


def test_merges_apply_by_rank_not_left_to_right():
    # "bc" ranks before "ab": "abc" is a + bc, never ab + c; then (a, bc) is a rule of its own.
    a, b, c, d = (ord(ch) for ch in "abcd")
    merges = [(b, c, 256), (a, b, 257), (a, 256, 258), (257, c, 259), (c, d, 260), (258, d, 261)]
    tok = Tokenizer(pattern="none", merges=merges)
    assert tok.encode_ordinary("abc") == [258]  # left-to-right would give ab + c -> 259
    assert tok.encode_ordinary("abcd") == [261]
    assert tok.encode_ordinary("cd") == [260] and tok.encode_ordinary("ab") == [257]
    assert tok.encode_ordinary("abab") == [257, 257]
    rng = np.random.default_rng(0)
    for _ in range(300):
        text = "".join(rng.choice(list("abcd"), size=rng.integers(1, 25)))
        assert tok.encode_ordinary(text) == naive_encode_piece(text.encode(), merges), text


@pytest.mark.parametrize("pattern", ["gpt2", "none"])
def test_trained_tokenizer_encodes_as_the_naive_reference(pattern):
    tok = train(CORPUS[:10], vocab_size=500, pattern=pattern, special_tokens=[])
    assert tok.merge_mode == "merges" and len(tok.merges) > 100
    rx = compile_pattern(pattern)
    for text in CORPUS[10:14] + SAMPLES[:10]:
        text = text[:2000]
        want = [
            t
            for piece in split_pieces(text, rx)
            for t in naive_encode_piece(piece.encode("utf-8", "surrogatepass"), tok.merges)
        ]
        assert tok.encode_ordinary(text) == want
