"""Pre-tokenization: cut text into pieces before byte-pair merging.

BPE never merges across a piece boundary, so the split pattern decides which
tokens can exist at all (e.g. with `gpt2`, " the" can be one token but "e t"
cannot). Three named patterns are built in:

    gpt2   the pattern of GPT-2's encoder (also HF ByteLevel's `use_regex=True`)
    gpt4   the cl100k_base pattern of tiktoken: case-insensitive contractions,
           digits in groups of at most three, newlines kept apart
    none   no split: each text (each document) is one piece
    k2     the hand-written pre-tokenizer of K2's tokenizer (tokenizer/k2.py, docs/k2.md): a
           contraction ' + one or two letters, letter runs, digits in groups of at most three,
           whitespace runs that leave their last character to a piece of its own, any other
           character alone; "letter" and "whitespace" are K2's own code-point tables

Any other string is taken as a regex (the `regex` module's syntax, which has
`\\p{L}` classes and possessive quantifiers, like the Oniguruma regexes that
HF `tokenizers` uses).

Special tokens are cut out of the text before the pattern is applied, and
only those the caller allows (see `split_special`).

>>> split_pieces("Hello world!!", compile_pattern("gpt2"))
['Hello', ' world', '!!']
"""

from __future__ import annotations

from collections import Counter
import re

import regex

PATTERNS = {
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    "gpt4": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+""",  # noqa: E501
    "none": None,
    # K2's letters (code-point ranges of its unicode_utils), digits and whitespace, in its rule order
    "k2": (
        r"""(?s)'[a-zA-Z\u00aa-\u02af\u0370-\u04ff\u0590-\u08ff\u0900-\u0dff\u1e00-\u1eff\u3040-\u30ff"""
        r"""\u3400-\u9fff\uac00-\ud7a3\uf900-\ufaff]{1,2}"""
        r"""|[a-zA-Z\u00aa-\u02af\u0370-\u04ff\u0590-\u08ff\u0900-\u0dff\u1e00-\u1eff\u3040-\u30ff"""
        r"""\u3400-\u9fff\uac00-\ud7a3\uf900-\ufaff]+"""
        r"""|[0-9\uff10-\uff19]{1,3}"""
        r"""|[ \t\n\r\v\f\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+\Z"""
        r"""|[ \t\n\r\v\f\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+"""
        r"""(?=[ \t\n\r\v\f\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000])|."""
    ),
}

# The same patterns for pure-ASCII text, written for the standard `re` module
# (no \p{..} classes there), which runs them about 2.4x faster than `regex`
# runs the originals. Equal results on ASCII text: \p{L} is [A-Za-z], \p{N} is
# [0-9], and `regex`'s \s is [\t-\r ] (not \x1c-\x1f, unlike `re`'s \s);
# tests/test_tokenizer.py fuzzes the two against each other.
ASCII_PATTERNS = {
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\t-\r A-Za-z0-9]+|[\t-\r ]+(?![^\t-\r ])|[\t-\r ]+""",
    "gpt4": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\nA-Za-z0-9]?+[A-Za-z]+|[0-9]{1,3}| ?[^\t-\r A-Za-z0-9]++[\r\n]*|[\t-\r ]*[\r\n]|[\t-\r ]+(?![^\t-\r ])|[\t-\r ]+""",  # noqa: E501
    "k2": r"""(?s)'[a-zA-Z]{1,2}|[a-zA-Z]+|[0-9]{1,3}|[ \t\n\r\v\f]+\Z|[ \t\n\r\v\f]+(?=[ \t\n\r\v\f])|.""",
}

# Patterns for which a cut right after "\n", before a visible ASCII character,
# never falls inside a piece: no alternative of these patterns can span a
# newline followed by a letter, digit or punctuation mark. That lets big files
# be encoded in independent chunks with exactly the tokens of one pass.
CHUNKABLE = {"gpt2", "gpt4", "k2"}

# Where a long text may be cut into chunks that are pre-tokenized on their own
# (bounded memory on any input; docs/tokenizer.md, "Long lines"), best first:
#
#   LINE_CUT   right after a newline between two visible ASCII characters
#              (a line that ends in "x\n", a next line that starts with "y"):
#              no gpt2/gpt4 piece spans it. (A newline after whitespace is
#              not a cut point: gpt2's `\s+(?!\S)` leaves the last newline of
#              "\n\n" + "y" to a piece of its own, which a chunk ending in
#              "\n\n" would not.)
#   SPACE_CUT  right after a visible ASCII character (! to ~) that is followed
#              by a space: for gpt2/gpt4 the piece holding a non-whitespace
#              character ends there (a space only ever starts a piece or
#              extends a whitespace run), and no alternative looks further
#              than one character past that piece, so the pieces on both
#              sides are exactly those of one pass. This is what splits one
#              huge line (minified code, a JSON dump) into chunks.
#   hard cut   only when neither occurs in a whole window (one "word" of
#              megabytes, or megabytes without an ASCII space): at a UTF-8
#              character boundary. The piece that spans it becomes two pieces,
#              so the tokens next to that one cut can differ from one pass;
#              the bytes decode back exactly all the same.
#
# Special-token strings are not looked at: one that holds "\n" + a visible
# character, or a visible character + " ", can be cut in two (the default
# <|endoftext|> cannot).
LINE_CUT = r"(?<=[!-~])\n[!-~]"
SPACE_CUT = r"[!-~] "
_CUT_RX = {
    str: (re.compile(LINE_CUT), re.compile(SPACE_CUT)),
    bytes: (re.compile(LINE_CUT.encode()), re.compile(SPACE_CUT.encode())),
}


def next_cut(buf, start: int, size: int, step: int, *, hard: bool = True) -> int:
    """End of the chunk of `buf` (str, bytes or mmap; `size` long) that starts
    at `start`: the first LINE_CUT in [start + step, start + 2 * step), else the
    first SPACE_CUT there, else (hard) a hard cut at start + 2 * step, so a
    chunk never exceeds 2 * step; with hard=False the first LINE_CUT or
    SPACE_CUT further on (exact, unbounded), else the end.

    >>> next_cut("aa bb\\ncc dd", 0, 11, 3)
    6
    >>> next_cut("aaaa bbbb", 0, 9, 2)
    4
    """
    lo = start + step
    if lo >= size:
        return size
    hi = min(size, lo + step)
    rxs = _CUT_RX[str if isinstance(buf, str) else bytes]
    for rx in rxs:
        m = rx.search(buf, lo, min(size, hi + 1))
        if m:
            return m.start() + 1
    if hi >= size:
        return size
    if hard:
        cut = hi
        if not isinstance(buf, str):  # not inside a UTF-8 sequence (continuation bytes are 10xxxxxx)
            while cut > hi - 3 and buf[cut] & 0xC0 == 0x80:
                cut -= 1
        return cut
    found = [m.start() + 1 for m in (rx.search(buf, hi) for rx in rxs) if m]
    return min(found) if found else size


def split_text(text: str, pattern, step: int, *, hard: bool = False) -> list[str]:
    """Cut an in-memory text into parts of about `step` characters at the
    points of `next_cut` (only for CHUNKABLE patterns; others: one part).
    hard=False (the default) keeps the exact result of one pass whatever the
    input; hard=True bounds every part to 2 * step characters."""
    if resolve_pattern(pattern)[0] not in CHUNKABLE or len(text) <= step:
        return [text] if text else []
    parts, start = [], 0
    while start < len(text):
        end = next_cut(text, start, len(text), step, hard=hard)
        parts.append(text[start:end])
        start = end
    return parts


def resolve_pattern(pattern: str | None) -> tuple[str, str | None]:
    """Name or regex -> (name, regex). Unknown names are taken as regexes.

    >>> resolve_pattern("none")
    ('none', None)
    """
    if pattern is None:
        return "none", None
    if pattern in PATTERNS:
        return pattern, PATTERNS[pattern]
    for name, rx in PATTERNS.items():
        if rx == pattern:
            return name, rx
    if not isinstance(pattern, str):
        raise ValueError(f"the split pattern must be a string (a regex), got {type(pattern).__name__}")
    try:
        regex.compile(pattern)  # fail here, with the regex error, not mid-encode
    except (regex.error, OverflowError, RecursionError) as e:
        raise ValueError(f"the split pattern {pattern[:60]!r} is not a valid regex ({e})") from None
    return "custom", pattern


class Splitter:
    """A compiled split pattern: `findall(text)` -> pieces. Uses the fast
    ASCII form of a named pattern when the text is pure ASCII (most code)."""

    def __init__(self, pattern: str | None):
        self.name, self.pattern = resolve_pattern(pattern)
        self._full = regex.compile(self.pattern)
        ascii_rx = ASCII_PATTERNS.get(self.name)
        self._ascii = re.compile(ascii_rx) if ascii_rx else self._full

    def findall(self, text: str) -> list[str]:
        return (self._ascii if text.isascii() else self._full).findall(text)


# Patterns whose pieces a Splitter subclass cuts its own way, by name: K2's (tokenizer/k2.py registers
# K2Splitter here when the package is imported, so this module does not import k2.py, which builds on it).
SPLITTERS: dict = {}


def compile_pattern(pattern: str | None) -> Splitter | None:
    """A `Splitter`, or None for the `none` pattern."""
    name, rx = resolve_pattern(pattern)
    if name in SPLITTERS:
        return SPLITTERS[name](rx)
    return None if rx is None else Splitter(rx)


def split_pieces(text: str, compiled) -> list[str]:
    """Cut text into pre-tokens; with no pattern the whole text is one piece."""
    if compiled is None:
        return [text] if text else []
    return compiled.findall(text)


def special_regex(specials) -> regex.Pattern | None:
    """A regex that finds any of the given special-token strings (longest first,
    so that "<|a|>" and "<|a|>x" both work)."""
    specials = sorted(set(specials), key=lambda s: (-len(s), s))
    if not specials:
        return None
    return regex.compile("|".join(regex.escape(s) for s in specials))


def split_special(text: str, finder) -> list[tuple[str, bool]]:
    """Split text into (chunk, is_special) parts around the special tokens that
    `finder` (from `special_regex`) matches.

    >>> split_special("a<|endoftext|>b", special_regex(["<|endoftext|>"]))
    [('a', False), ('<|endoftext|>', True), ('b', False)]
    """
    if finder is None:
        return [(text, False)] if text else []
    parts, start = [], 0
    for m in finder.finditer(text):
        if m.start() > start:
            parts.append((text[start : m.start()], False))
        parts.append((m.group(), True))
        start = m.end()
    if start < len(text):
        parts.append((text[start:], False))
    return parts


# Learning sees pieces of at most this many characters: a longer one (a line without spaces, the
# `none` pattern's whole document) is cut into parts of this length for counting, so that the merge
# learner holds one entry per distinct part, not one position per byte of a 2 MiB "word" (repeated
# parts collapse into one counted entry). Only pairs across a cut are not counted; encoding still
# merges whole pieces.
LEARN_PIECE_CHARS = 256


def count_pieces(text: str, compiled, special_finder=None) -> Counter:
    """Distinct pieces of one text with their counts (pieces longer than LEARN_PIECE_CHARS cut into
    parts of that length); special-token strings are cut out (they are never part of a merge)."""
    counts = Counter()
    for chunk, is_special in split_special(text, special_finder):
        if is_special:
            continue
        for window in split_windows(chunk, compiled):
            pieces = split_pieces(window, compiled)
            if pieces and max(map(len, pieces)) > LEARN_PIECE_CHARS:
                n = LEARN_PIECE_CHARS
                pieces = [p[i : i + n] for p in pieces for i in range(0, len(p), n)]
            counts.update(pieces)
            cap_counts(counts)  # a chunk of random bytes alone has more distinct pieces than the cap
    return counts


# The list of pieces of a text costs 50 to 80 bytes per piece, up to one piece per character (random
# bytes): texts longer than this are cut at exact points (split_text, hard=False) and split a window
# at a time.
SPLIT_WINDOW = 1 << 16


def split_windows(text: str, compiled) -> list[str]:
    """`text` cut at exact points (no piece changes) into windows of about SPLIT_WINDOW characters
    (a window without such a point runs on to the next one), for a pattern that allows it."""
    if len(text) <= 2 * SPLIT_WINDOW or compiled is None:
        return [text]
    return split_text(text, compiled.name, SPLIT_WINDOW)


# At most this many distinct pieces are held while counting (about 130 bytes each): beyond it the
# pieces seen once are dropped (lossy counting: a piece that recurs is seen again and kept), so text
# with no repeated words (random bytes, hashes, base64) cannot grow the table without bound. A few MB
# of ordinary text have 30k to 60k distinct pieces.
MAX_DISTINCT_PIECES = 1 << 17


def cap_counts(counts: Counter, limit: int | None = None) -> Counter:
    """Drop the pieces seen once when `counts` holds more than `limit` distinct pieces (in place)."""
    limit = MAX_DISTINCT_PIECES if limit is None else limit
    if len(counts) > limit:
        for piece in [p for p, c in counts.items() if c == 1]:
            del counts[piece]
    return counts
