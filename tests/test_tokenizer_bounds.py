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


def _naive_merges(counts: Counter, n_merges: int) -> list:
    """Textbook BPE: count every pair over all pieces, merge the most frequent (ties: the smaller
    pair), leftmost occurrences first; all the way down to pairs seen once."""
    words = {tuple(p.encode()): c for p, c in counts.items()}
    merges = []
    while len(merges) < n_merges:
        pairs = Counter()
        for w, c in words.items():
            for pair in zip(w, w[1:]):
                pairs[pair] += c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        new = 256 + len(merges)
        merges.append(best)
        merged = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(new)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + c
        words = merged
    return merges


def test_the_learner_equals_textbook_bpe_down_to_pairs_seen_once():
    """Pairs seen once are left out of the learner's tables and counted again when only they are
    left: the merges are still exactly textbook BPE's, on words and on hapax-heavy noise."""
    rng = random.Random(5)
    for alphabet, n_pieces in (("abcab", 30), ("abcdefghij", 40), ("xy", 6), ("ab", 25), ("abcd", 60)):
        counts = Counter()
        for _ in range(n_pieces):
            counts["".join(rng.choices(alphabet, k=rng.randint(1, 12)))] += rng.choice([1, 1, 1, 2, 5])
        n = 60
        assert learn_merges(counts, n) == _naive_merges(counts, n)


def test_pieces_seen_once_get_a_smaller_budget():
    by_bytes = {b"the": 9, b"and": 4, b"qzx": 1, b"vvw": 1, b"kkk": 1}
    assert train_module._most_frequent(by_bytes, 100, 6) == {b"the": 9, b"and": 4, b"kkk": 1, b"qzx": 1}
    assert train_module._most_frequent(by_bytes, 100, 100) == by_bytes  # it all fits
    assert train_module._most_frequent(by_bytes, 4, 100) == {b"the": 9}


def test_a_piece_over_the_limit_is_merged_in_parts(monkeypatch):
    from gradcraft.tokenizer import bpe

    tok = train(["abababab cdcdcd " * 50], vocab_size=270, special_tokens=[])
    text = "ab" * 40 + "c"  # one piece of 81 characters
    whole = tok.encode(text)
    monkeypatch.setattr(bpe, "MAX_PIECE_CHARS", 15)  # odd: the parts cut pairs "ab" apart
    tok._cache.clear()
    parts = [text[i : i + 15] for i in range(0, len(text), 15)]
    expected = [t for part in parts for t in tok._encode_piece(part)]
    assert tok.encode(text) == expected != whole  # the parts merge alone...
    assert tok.decode(expected) == text  # ...and decode back exactly
    assert tok.encode("abab cd") == [tok._encode_piece("abab")[0], *tok._encode_piece(" cd")]  # short: whole


def test_windowed_splitting_gives_the_pieces_of_one_pass(monkeypatch):
    """Counting and encoding cut long texts into windows at exact points only."""
    import numpy as np

    from gradcraft.tokenizer.parallel import encode_text_array

    monkeypatch.setattr(pretokenize, "SPLIT_WINDOW", 16)
    rng = random.Random(2)
    words = ["the", " cat", "\n", "  ", "12345", "!!", " é", "\t\n", "x\ny", "a b"]
    for pattern in ("gpt2", "gpt4", "k2"):
        text = "".join(rng.choices(words, k=400))
        compiled = pretokenize.compile_pattern(pattern)
        assert len(pretokenize.split_windows(text, compiled)) > 10
        assert pretokenize.count_pieces(text, compiled) == Counter(pretokenize.split_pieces(text, compiled))
        tok = train([text], vocab_size=300, pattern=pattern, special_tokens=[])
        assert encode_text_array(tok, text, np.uint32).tolist() == tok.encode(text)


def test_pieces_that_stand_for_the_same_bytes_are_counted_together(monkeypatch):
    """ "é" and its two bytes read as surrogateescape are one piece; so are b"ab" and "ab" (also when
    the budget applies, which converts only the kept pieces when no two can meet)."""
    counts = {"\udcc3\udca9": 2, "é": 2, "xy": 3}
    assert learn_merges(counts, 1) == [(0xC3, 0xA9)]  # 4 > 3
    assert learn_merges({b"ab": 2, "ab": 2, "cd": 3}, 1) == [(ord("a"), ord("b"))]
    monkeypatch.setattr(train_module, "MAX_LEARN_BYTES", 4)
    # ties: "ab" before "éé", whose 4 bytes (not 2 characters) are over the budget
    assert learn_merges({"zz": 9, "éé": 5, "ab": 5}, 3) == [(ord("z"), ord("z")), (ord("a"), ord("b"))]
    assert learn_merges({"zz": 9, "ab": 5, "éé": 5}, 3) == learn_merges({b"zz": 9, b"ab": 5, "éé".encode(): 5}, 3)


def test_the_chunk_plan_reads_windows_yet_cuts_as_over_the_whole_file(tmp_path):
    """plan_chunks reads each window it searches (not the file mapped whole): the same cuts as
    next_cut over all the bytes, a cut right at a window's start (LINE_CUT looks behind) included."""
    from gradcraft.tokenizer.parallel import plan_chunks

    rng = random.Random(3)
    data = b"".join(rng.choice([b"ab\n", b"c", b"\nd", b"x y", b"\xc3\xa9", b"zzzz", b"\n"]) for _ in range(3000))
    path = tmp_path / "input.txt"
    path.write_bytes(data)
    for step in (5, 7, 16, 50):
        ends, start = [], 0
        while start < len(data):
            start = pretokenize.next_cut(data, start, len(data), step, hard=True)
            ends.append(start)
        assert [c[3] for c in plan_chunks([str(path)], "gpt4", step)] == ends
