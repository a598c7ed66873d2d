"""Learning a byte-level BPE vocabulary.

The standard incremental algorithm:

1. Count the distinct pieces of the training text (a piece that occurs a
   million times is processed once, with weight 1e6).
2. Count every adjacent pair of tokens over those pieces, and index
   pair -> pieces that contain it.
3. Repeatedly take the most frequent pair from a max-heap, give it the next
   id, and rewrite only the pieces that contain it, updating the counts of the
   pairs around each rewrite. Heap entries are not removed when a count
   changes: a popped entry whose count is out of date is pushed again with
   the current count ("lazy invalidation"). A count only goes up for pairs
   that contain the new token, and those are pushed right away, so every
   pair's heap entry is >= its true count and the first valid entry popped is
   the true maximum.

Ties are broken by the smaller (left id, right id), so the same counts give
the same vocabulary whatever the order of the input or the number of workers.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict

from gradcraft.errors import UserError
from gradcraft.tokenizer.bpe import Tokenizer, piece_bytes
from gradcraft.tokenizer.pretokenize import compile_pattern, special_regex, split_pieces, split_special


def count_pieces(text: str, compiled, special_finder=None) -> Counter:
    """Distinct pieces of one text with their counts; special-token strings
    are cut out (they are never part of a merge)."""
    counts = Counter()
    for chunk, is_special in split_special(text, special_finder):
        if not is_special:
            counts.update(split_pieces(chunk, compiled))
    return counts


def learn_merges(piece_counts, n_merges: int, progress: bool = False) -> list[tuple[int, int]]:
    """The first `n_merges` merges (pairs of ids; merge k makes id 256 + k)
    learned from {piece bytes: count}. Stops early if no pair is left."""
    # Pieces as lists of byte ids, merged by bytes first (two str pieces can
    # stand for the same bytes), in a fixed order for reproducibility.
    by_bytes = defaultdict(int)
    for piece, c in piece_counts.items():
        by_bytes[piece if isinstance(piece, bytes) else piece_bytes(piece)] += c
    words, counts = [], []
    for b in sorted(by_bytes):
        if len(b) > 1:
            words.append(list(b))
            counts.append(by_bytes[b])

    pair_counts = defaultdict(int)
    where = defaultdict(set)  # pair -> indices of the words that (once) held it
    for wi, w in enumerate(words):
        c = counts[wi]
        for p in zip(w, w[1:]):
            pair_counts[p] += c
            where[p].add(wi)
    heap = [(-c, p) for p, c in pair_counts.items()]
    heapq.heapify(heap)

    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=n_merges, desc="learning merges", unit="merge", mininterval=0.5)
    merges = []
    while len(merges) < n_merges and heap:
        neg, pair = heapq.heappop(heap)
        current = pair_counts.get(pair, 0)
        if current != -neg:
            if current > 0:
                heapq.heappush(heap, (-current, pair))
            continue
        if current <= 0:
            continue
        new = 256 + len(merges)
        merges.append(pair)
        a, b = pair
        touched = set()
        for wi in where.pop(pair):
            w = words[wi]
            if not _contains(w, a, b):
                continue  # index entry went stale when an earlier merge rewrote it
            c = counts[wi]
            for p in zip(w, w[1:]):
                pair_counts[p] -= c
            merged = _merge(w, a, b, new)
            words[wi] = merged
            for p in zip(merged, merged[1:]):
                pair_counts[p] += c
                if p[0] == new or p[1] == new:
                    where[p].add(wi)
                    touched.add(p)
        del pair_counts[pair]
        for p in touched:
            heapq.heappush(heap, (-pair_counts[p], p))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return merges


def _contains(w: list, a: int, b: int) -> bool:
    i = -1
    try:
        while True:
            i = w.index(a, i + 1)
            if i + 1 < len(w) and w[i + 1] == b:
                return True
    except ValueError:
        return False


def _merge(w: list, a: int, b: int, new: int) -> list:
    """Replace each non-overlapping (a, b) in w, left to right, with new."""
    out, i, n = [], 0, len(w)
    while i < n:
        if w[i] == a and i + 1 < n and w[i + 1] == b:
            out.append(new)
            i += 2
        else:
            out.append(w[i])
            i += 1
    return out


def check_vocab_size(vocab_size: int, special_tokens) -> int:
    """Number of merges for a vocabulary of `vocab_size` ids in all."""
    n_merges = vocab_size - 256 - len(special_tokens)
    if n_merges < 0:
        raise UserError(f"--vocab_size {vocab_size} is too small: it must be at least 256 bytes + "
                        f"{len(special_tokens)} special tokens = {256 + len(special_tokens)}")
    return n_merges


def tokenizer_from_merges(pairs, pattern, special_tokens) -> Tokenizer:
    """Our id layout: bytes 0..255, merges from 256 on, then the specials."""
    merges = [(a, b, 256 + k) for k, (a, b) in enumerate(pairs)]
    first_special = 256 + len(merges)
    specials = {s: first_special + k for k, s in enumerate(special_tokens)}
    return Tokenizer(pattern=pattern, merges=merges, special_tokens=specials)


def train(texts, vocab_size: int, pattern: str = "gpt2", special_tokens=("<|endoftext|>",),
          workers: int = 1, progress: bool = False) -> Tokenizer:
    """Learn a tokenizer from an iterable of texts (str or bytes).

    `vocab_size` counts everything: 256 bytes + merges + special tokens. If the
    text runs out of pairs first, the vocabulary is smaller (see `.vocab_size`).

    >>> tok = train(["hello hello hello"], vocab_size=260, special_tokens=[])
    >>> tok.decode(tok.encode("hello"))
    'hello'
    """
    special_tokens = list(dict.fromkeys(special_tokens))
    n_merges = check_vocab_size(vocab_size, special_tokens)
    texts = [t.decode("utf-8", "surrogateescape") if isinstance(t, (bytes, bytearray)) else t for t in texts]
    if workers > 1 and sum(map(len, texts)) > 1 << 20:
        from gradcraft.tokenizer.parallel import count_pieces_parallel
        counts = count_pieces_parallel(texts, pattern, special_tokens, workers)
    else:
        compiled, finder = compile_pattern(pattern), special_regex(special_tokens)
        counts = Counter()
        for t in texts:
            counts.update(count_pieces(t, compiled, finder))
    pairs = learn_merges(counts, n_merges, progress=progress)
    return tokenizer_from_merges(pairs, pattern, special_tokens)
