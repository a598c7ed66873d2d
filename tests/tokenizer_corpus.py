"""A small deterministic corpus for tokenizer tests: words, code, numbers,
CJK, emoji, control characters, odd whitespace."""

import random

WORDS = (
    "the of and to in is it that for you was with on as have but be they at one this from "
    "def return self import class None True False print if else elif while lambda yield "
    "don't we'll I'm they've she's you'd it's CAPS Hello World naïve café Straße"
).split()
EXTRA = [
    "世界",
    "你好",
    "日本語",
    "😀",
    "👍🏽",
    "🇫🇷",
    "ℝ",
    "∑",
    "\t",
    "\u00a0",
    "\u2028",
    "\x00",
    "\x1b[0m",
    "\r\n",
    "<|endoftext|>",
]


def make_corpus(n_docs: int = 40, words_per_doc: int = 120, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for _ in range(n_docs):
        parts = []
        for _ in range(words_per_doc):
            r = rng.random()
            if r < 0.75:
                parts.append(rng.choice(WORDS))
            elif r < 0.85:
                parts.append(str(rng.randrange(10 ** rng.randrange(1, 7))))
            elif r < 0.92:
                parts.append(rng.choice(".,;:!?()[]{}=+-*/'\"#@"))
            else:
                parts.append(rng.choice(EXTRA))
            parts.append(rng.choice([" ", " ", " ", "  ", "\n", "\n    ", ""]))
        docs.append("".join(parts))
    return docs
