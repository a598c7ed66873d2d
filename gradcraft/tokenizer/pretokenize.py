"""Pre-tokenization: cut text into pieces before byte-pair merging.

BPE never merges across a piece boundary, so the split pattern decides which
tokens can exist at all (e.g. with `gpt2`, " the" can be one token but "e t"
cannot). Three named patterns are built in:

    gpt2   the pattern of GPT-2's encoder (also HF ByteLevel's `use_regex=True`)
    gpt4   the cl100k_base pattern of tiktoken: case-insensitive contractions,
           digits in groups of at most three, newlines kept apart
    none   no split: each text (each document) is one piece

Any other string is taken as a regex (the `regex` module's syntax, which has
`\\p{L}` classes and possessive quantifiers, like the Oniguruma regexes that
HF `tokenizers` uses).

Special tokens are cut out of the text before the pattern is applied, and
only those the caller allows (see `split_special`).

>>> split_pieces("Hello world!!", compile_pattern("gpt2"))
['Hello', ' world', '!!']
"""

from __future__ import annotations

import re

import regex

PATTERNS = {
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    "gpt4": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+""",
    "none": None,
}

# The same patterns for pure-ASCII text, written for the standard `re` module
# (no \p{..} classes there), which runs them about 2.4x faster than `regex`
# runs the originals. Equal results on ASCII text: \p{L} is [A-Za-z], \p{N} is
# [0-9], and `regex`'s \s is [\t-\r ] (not \x1c-\x1f, unlike `re`'s \s);
# tests/test_tokenizer.py fuzzes the two against each other.
ASCII_PATTERNS = {
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\t-\r A-Za-z0-9]+|[\t-\r ]+(?![^\t-\r ])|[\t-\r ]+""",
    "gpt4": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\nA-Za-z0-9]?+[A-Za-z]+|[0-9]{1,3}| ?[^\t-\r A-Za-z0-9]++[\r\n]*|[\t-\r ]*[\r\n]|[\t-\r ]+(?![^\t-\r ])|[\t-\r ]+""",
}

# Patterns for which a cut right after "\n", before a visible ASCII character,
# never falls inside a piece: no alternative of these patterns can span a
# newline followed by a letter, digit or punctuation mark. That lets big files
# be encoded in independent chunks with exactly the tokens of one pass.
CHUNKABLE = {"gpt2", "gpt4"}


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
    regex.compile(pattern)  # fail here, with the regex error, not mid-encode
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


def compile_pattern(pattern: str | None) -> Splitter | None:
    """A `Splitter`, or None for the `none` pattern."""
    _, rx = resolve_pattern(pattern)
    return None if rx is None else Splitter(rx)


def split_pieces(text: str, compiled) -> list[str]:
    """Cut text into pre-tokens; with no pattern the whole text is one piece."""
    if compiled is None:
        return [text] if text else []
    return compiled.findall(text)


def special_regex(specials) -> "regex.Pattern | None":
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
            parts.append((text[start:m.start()], False))
        parts.append((m.group(), True))
        start = m.end()
    if start < len(text):
        parts.append((text[start:], False))
    return parts
