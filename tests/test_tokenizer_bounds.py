"""The tokenizer learner's memory bounds keep vocabularies sane: long pieces are counted
in parts, the distinct-piece table is capped, and the learner takes the most frequent pieces up to
a byte budget; what is learned still round-trips and starts with the frequent pairs. (Memory itself
is measured by bench/tokenizer_memory.py, not in a timed test.)"""

import importlib
import random
from collections import Counter

from gradcraft.tokenizer import pretokenize
from gradcraft.tokenizer.train import learn_merges, train

train_module = importlib.import_module("gradcraft.tokenizer.train")  # (the package exports train())


def test_a_line_without_spaces_is_counted_in_parts():
    text = "abcdefgh" * 1000  # one 8000-character "word"
    counts = pretokenize.count_pieces(text, pretokenize.compile_pattern("gpt4"))
    assert max(map(len, counts)) <= pretokenize.LEARN_PIECE_CHARS
    assert sum(len(p) * c for p, c in counts.items()) == len(text)  # every character counted once
    assert len(counts) <= 2  # the repeated parts collapse into one counted entry (and the remainder)


def test_learning_on_one_long_line_gives_a_sane_vocabulary():
    rng = random.Random(0)
    syllables = ["ka", "lo", "mi", "nu", "po"]
    line = "".join(rng.choice(syllables) for _ in range(20000))
    tok = train([line], vocab_size=300, special_tokens=[])
    assert tok.vocab_size == 300
    assert tok.decode(tok.encode(line)) == line
    assert len(tok.encode(line)) < len(line) / 3  # the syllables and their pairs were learned


def test_random_bytes_learn_without_error_and_round_trip():
    data = random.Random(1).randbytes(50_000)
    tok = train([data], vocab_size=280, special_tokens=[])
    text = data.decode("utf-8", "surrogateescape")
    assert tok.encode_bytes(data) == tok.encode(text)
    assert tok.decode_bytes(tok.encode(text)) == data


def test_the_distinct_piece_cap_drops_singletons_first():
    counts = Counter({f"w{i}": 1 for i in range(100)})
    counts.update({"the": 50, "and": 20})
    pretokenize.cap_counts(counts, limit=10)
    assert counts == Counter({"the": 50, "and": 20})
    small = Counter({"a": 1, "b": 1})
    assert pretokenize.cap_counts(small, limit=10) == small  # under the cap: untouched


def test_the_learner_keeps_the_most_frequent_pieces_within_its_budget(monkeypatch):
    counts = Counter({"the": 1000, "then": 400, "other": 300})
    counts.update({"".join(random.Random(i).choices("xyzqj", k=40)): 1 for i in range(500)})
    full = learn_merges(counts, 5)
    monkeypatch.setattr(train_module, "MAX_LEARN_BYTES", 64)
    bounded = learn_merges(counts, 5)
    assert full[0] == bounded[0] == (ord("h"), ord("e"))  # "the", "then", "other": 1700 each, ties to (h, e)
    assert any(ord(c) in pair for pair in full for c in "xyzqj")  # the full sample learns the noise too...
    assert not any(ord(c) in pair for pair in bounded for c in "xyzqj")  # ...the budget keeps the frequent words


def test_int_pair_keys_break_ties_like_tuples():
    """Equal counts: the smaller (left, right) first, whatever the insertion order."""
    counts = Counter({"ba": 3, "ab": 3, "cd": 3})
    assert learn_merges(counts, 3) == [(ord("a"), ord("b")), (ord("b"), ord("a")), (ord("c"), ord("d"))]
