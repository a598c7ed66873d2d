"""Special tokens that overlap, touch text or sit inside a merge; and streamed text cut at stop strings.

Specials: at each position the longest allowed special token wins ("<|a|>x" over "<|a|>"), the text
between specials is encoded on its own (no merge reaches across a special), and a special's string
that is not allowed is ordinary text. The reference is written here from that definition: a scan
that tries the allowed specials longest first at every position.

Streams: TextStream (what `generate`, the CLI and the server stream) is fed token by token; at every
step the text streamed so far must be a prefix of the final text, the final text must be the text
cut before the first stop string, and the pieces joined must equal it. Stop strings of every length
(1 to 6 characters) are split across tokens in every way, including inside multi-byte characters.
"""

import itertools

import numpy as np
import pytest

from gradcraft.inference.text import TextStream
from gradcraft.tokenizer import Tokenizer, train

SPECIALS = ["<|a|>", "<|a|>x", "<|a|>xy", "<|b", "<|b|>", "ab"]
FRAGMENTS = ["<|a|>", "x", "y", "<|", "a|>", "<|b", "|>", "hello ", "ab", "a", "b", " ", "é", "<", "|"]


@pytest.fixture(scope="module")
def tok():
    corpus = ["ab abab xyxy hello <|a|> <| |> a|> <<||>> " * 20, "ababab aab abb éé xy\n" * 20]
    # (train's specials are cut out of the training text; "ab" is a special and also a likely merge)
    return train(corpus, vocab_size=300, pattern="gpt2", special_tokens=SPECIALS)


def reference_encode(tok, text, allowed):
    """Longest allowed special first at each position; the ordinary runs between them on their own."""
    order = sorted(allowed, key=len, reverse=True)
    ids, run, i = [], [], 0
    while i < len(text):
        hit = next((s for s in order if text.startswith(s, i)), None)
        if hit is None:
            run.append(text[i])
            i += 1
            continue
        ids += tok.encode_ordinary("".join(run)) + [tok.special_tokens[hit]]
        run, i = [], i + len(hit)
    return ids + tok.encode_ordinary("".join(run))


def _texts(n, seed=0):
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(FRAGMENTS, size=rng.integers(1, 12))) for _ in range(n)]


ALLOWED = {"all": SPECIALS, "short_only": ["<|a|>", "<|b"], "long_only": ["<|a|>xy", "<|b|>"], "none": []}


@pytest.mark.parametrize("allowed", list(ALLOWED))
def test_the_longest_allowed_special_wins_and_text_around_it_is_encoded_alone(tok, allowed):
    specials = ALLOWED[allowed]
    for text in _texts(300) + ["<|a|>xyz", "<|a|>x<|a|>", "<|b|>|>", "<|a|><|a|>xy", "aab", "<|<|a|>>"]:
        got = tok.encode(text, allowed_special=set(specials) if specials else ())
        assert got == reference_encode(tok, text, specials), text
        assert tok.decode(got) == text


def test_overlapping_specials_examples(tok):
    s = tok.special_tokens
    assert tok.encode("<|a|>x", allowed_special="all") == [s["<|a|>x"]]
    assert tok.encode("<|a|>xyx", allowed_special="all") == [s["<|a|>xy"]] + tok.encode_ordinary("x")
    assert tok.encode("<|a|>x", allowed_special={"<|a|>"}) == [s["<|a|>"]] + tok.encode_ordinary("x")
    assert tok.encode("<|b|>", allowed_special="all") == [s["<|b|>"]]
    assert tok.encode("<|b|", allowed_special="all") == [s["<|b"]] + tok.encode_ordinary("|")


def test_a_special_inside_a_would_be_merge_splits_it(tok):
    """ "ab" is a special here and "ab" a merge of the training text: allowed, it is the special, and
    "xab"'s merges never reach across it; not allowed, it is ordinary text and merges as such."""
    s = tok.special_tokens
    assert tok.encode("aabb", allowed_special="all") == tok.encode_ordinary("a") + [s["ab"]] + tok.encode_ordinary("b")
    assert s["ab"] not in tok.encode("aabb")
    assert tok.decode(tok.encode("aabb")) == "aabb"


def test_specials_survive_a_save_and_reload(tok, tmp_path):
    path = tmp_path / "tok.json"
    tok.save(str(path))
    back = Tokenizer.load(str(path))
    for text in _texts(100, seed=1):
        assert back.encode(text, allowed_special="all") == tok.encode(text, allowed_special="all")


# ------------------------------------------------------------------ streaming


class _PieceTokenizer:
    """A tokenizer stand-in whose tokens are given byte strings (the stream only decodes)."""

    def __init__(self, pieces):
        self.pieces = pieces

    def decode_bytes(self, ids):
        return b"".join(self.pieces[i] for i in ids)


def _splits(data: bytes, cuts):
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


def _stream(pieces, stops):
    tokenizer = _PieceTokenizer(pieces)
    stream = TextStream(tokenizer, stops)
    streamed = ""
    history = []
    for i in range(len(pieces)):
        piece, stopped = stream.push(i)
        streamed += piece
        history.append(streamed)
        if stopped:
            break
    streamed += stream.finish()
    return streamed, history, stream


def _expected(text, stops):
    cut = min((text.find(s) for s in stops if s in text), default=-1)
    return text[:cut] if cut >= 0 else text


STOPS = ["\n", "##", "END", "STOP", "<end>", "ééé", "\n\nQ:", "x😀y"]


@pytest.mark.parametrize("stop", STOPS)
def test_stop_strings_split_across_tokens_stream_a_prefix_of_the_final_text(stop):
    """Every way of cutting the text into 2 to 4 tokens (byte cuts, so inside characters too)."""
    rng = np.random.default_rng(len(stop))
    for prefix, suffix in [("ab", "cd"), ("", "tail"), ("é" + stop[:-1], "zz"), ("x" * 3, stop + "more")]:
        text = prefix + stop + suffix
        data = text.encode()
        positions = range(1, len(data))
        cut_sets = list(itertools.combinations(positions, 1)) + list(itertools.combinations(positions, 2))
        cut_sets += [tuple(sorted(rng.choice(positions, size=3, replace=False))) for _ in range(30)]
        for cuts in cut_sets:
            pieces = _splits(data, cuts)
            # alone (the stream holds back exactly len(stop) - 1 characters), and with a shorter
            # stop string that never comes (a longer one would hold back more and hide a short hold)
            for stops in ((stop,), (stop, "\x00")):
                streamed, history, stream = _stream(pieces, stops)
                final = _expected(text, (stop,))
                assert streamed == final == stream.visible, (cuts, pieces)
                for sofar in history:
                    assert final.startswith(sofar), (cuts, sofar)
                assert stream.stopped


def test_several_stop_strings_the_first_in_the_text_wins_and_the_stream_never_retracts():
    rng = np.random.default_rng(5)
    stops = ("STOP", "TOP!", "P!", "ÉÉ")
    alphabet = ["S", "T", "O", "P", "!", "É", "a", " "]
    for _ in range(300):
        text = "".join(rng.choice(alphabet, size=rng.integers(1, 14)))
        data = text.encode()
        cuts = sorted(set(rng.integers(1, max(len(data), 2), size=rng.integers(0, 5)).tolist()) - {len(data)})
        streamed, history, _ = _stream(_splits(data, cuts), stops)
        final = _expected(text, stops)
        assert streamed == final
        assert all(final.startswith(h) for h in history)
