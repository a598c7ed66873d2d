"""Learning a byte-level BPE vocabulary.

The standard incremental algorithm:

1. Count the distinct pieces of the training text (a piece that occurs a
   million times is processed once, with weight 1e6).
2. Count every adjacent pair of tokens over those pieces, and index
   pair -> positions where it occurs.
3. Repeatedly take the most frequent pair from a max-heap, give it the next
   id, and rewrite only its occurrences (found through the index), updating
   the counts of the pairs on either side of each rewrite. Heap entries are
   not removed when a count changes: a popped entry whose count is out of date is pushed again with
   the current count ("lazy invalidation"). A count only goes up for pairs
   that contain the new token, and those are pushed right away, so every
   pair's heap entry is >= its true count and the first valid entry popped is
   the true maximum.

Ties are broken by the smaller (left id, right id), so the same counts give
the same vocabulary whatever the order of the input or the number of workers.
"""

from __future__ import annotations

import heapq
import re
import sys
from array import array
from collections import Counter, defaultdict
from itertools import repeat

from gradcraft.errors import UserError
from gradcraft.tokenizer.bpe import _ENTRY as _bpe_entry
from gradcraft.tokenizer.bpe import Tokenizer, piece_bytes
from gradcraft.tokenizer.parallel import count_pieces_parallel

# count_pieces, split_pieces, split_special: re-exported from their old home
from gradcraft.tokenizer.pretokenize import (
    cap_counts,
    compile_pattern,
    count_pieces,  # noqa: F401
    special_regex,
    split_pieces,  # noqa: F401
    split_special,  # noqa: F401
    split_text,
)

COUNT_PART = 1 << 20  # characters counted at a time by train() on one process
_PAIR_KEY = 1 << 21  # ids are below this: a pair's key is left * _PAIR_KEY + right
# A heap entry is one int, -count * _HEAP_COUNT + pair key: the most frequent pair first, ties to the
# smaller key, like a (-count, key) tuple at a third of the memory.
_HEAP_SHIFT = 42
_HEAP_COUNT = 1 << _HEAP_SHIFT  # > every pair key
# The learner holds about 90 bytes per byte of distinct pieces (a position in four arrays, and the
# table of the pairs alive); it learns from the most frequent distinct pieces up to this many bytes
# (ordinary text's distinct words fit; a sample of random bytes or of one endless "word" does not).
MAX_LEARN_BYTES = 2 << 20
# Of which at most this many bytes of pieces seen only once: in ordinary text those are the rare words
# (about a third of the distinct bytes of a few MB of text); a sample of random bytes or of one endless "word" is nearly
# all such pieces, and they would hold the learner's memory at its top for nothing.
MAX_LEARN_SINGLE_BYTES = 256 << 10


def learn_merges(piece_counts, n_merges: int, progress: bool = False) -> list[tuple[int, int]]:
    """The first `n_merges` merges (pairs of ids; merge k makes id 256 + k)
    learned from {piece (str or bytes): count}: the most frequent pieces up to MAX_LEARN_BYTES of
    distinct bytes. Stops early if no pair is left.

    All distinct pieces are laid end to end in one token array with next/prev
    links (a doubly linked list per piece), each position weighted by its
    piece's count, and `where` maps a pair to the positions where it starts.
    A merge visits only the occurrences of its pair, so the cost does not
    depend on how long the pieces are (the `none` pattern has one piece per
    document)."""
    by_bytes = _learned_pieces(piece_counts)
    # per position, in compact arrays (4 or 8 bytes an entry, not a Python int object each);
    # -1 = no neighbour / removed
    # 4-byte weights unless a count needs more
    wcode = "i" if max(by_bytes.values(), default=0) < 1 << 31 else "q"
    tokens, weight, nxt, prv = array("i"), array(wcode), array("i"), array("i")
    # a pair (a, b) is the int a * K + b: no tuple object per pair, and the same order (ties go to
    # the smaller (a, b))
    K = _PAIR_KEY
    if 256 + n_merges >= K:
        raise UserError(f"a vocabulary of {256 + n_merges} ids is more than the {K} this learner handles")
    pair_counts = defaultdict(int)
    where = defaultdict(lambda: array("i"))  # pair -> positions where it started at some point
    for b in sorted(by_bytes):
        n = len(b)
        if n < 2:
            continue
        c, start = by_bytes[b], len(tokens)
        tokens.extend(b)
        weight.extend(repeat(c, n))
        nxt.extend(range(start + 1, start + n))
        nxt.append(-1)
        prv.append(-1)
        prv.extend(range(start, start + n - 1))
        for i, (x, y) in enumerate(zip(b, b[1:]), start):
            key = x * K + y
            pair_counts[key] += c
            where[key].append(i)
    del by_bytes
    # A pair gets all its occurrences at once: the byte pairs here, any other pair in the merge that
    # makes the newer of its two tokens; afterwards its count only goes down. So a pair seen once is
    # left out of the tables (on random bytes or one endless "word" nearly all of them are) until
    # the best pair left is seen once, when the tables are rebuilt from the arrays, exactly.
    sparse = True
    _drop_singletons(pair_counts, where)
    heap = [-c * _HEAP_COUNT + p for p, c in pair_counts.items()]
    heapq.heapify(heap)

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n_merges, desc="learning merges", unit="merge", mininterval=0.5, file=sys.stderr)
    merges = []

    def lower(key, c):  # a pair's count goes down; a pair no longer present leaves the table
        left = pair_counts[key] - c
        if left > 0:
            pair_counts[key] = left
        else:
            pair_counts.pop(key, None)
            where.pop(key, None)

    while len(merges) < n_merges:
        if not heap:
            if not sparse:
                break
            sparse = False  # only pairs seen once (or no pair) are left: count them all again
            heap = _rebuild_pairs(tokens, weight, nxt, pair_counts, where)
            continue
        entry = heapq.heappop(heap)
        neg, pair = entry >> _HEAP_SHIFT, entry & (_HEAP_COUNT - 1)
        current = pair_counts.get(pair, 0)
        if current != -neg:  # stale entry: requeue with the true count
            if current > 0:
                heapq.heappush(heap, -current * _HEAP_COUNT + pair)
            continue
        if sparse and current == 1:  # the best pair is seen once: so are those left out; count all
            sparse = False
            heap = _rebuild_pairs(tokens, weight, nxt, pair_counts, where)
            continue
        new = 256 + len(merges)
        a, b = divmod(pair, K)
        merges.append((a, b))
        touched = set()
        positions = sorted(where.pop(pair))  # left to right, so "aaa" merges as (aa)a
        for p in positions:
            q = nxt[p]
            if tokens[p] != a or q < 0 or tokens[q] != b:
                continue  # this occurrence was rewritten by an earlier merge
            c, left, right = weight[p], prv[p], nxt[q]
            if left >= 0:  # (x, a) becomes (x, new)
                t = tokens[left]
                if t * K + a != pair:
                    lower(t * K + a, c)
                key = t * K + new
                pair_counts[key] += c
                where[key].append(left)
                touched.add(key)
            if right >= 0:  # (b, y) becomes (new, y)
                t = tokens[right]
                if b * K + t != pair:
                    lower(b * K + t, c)
                key = new * K + t
                pair_counts[key] += c
                where[key].append(p)
                touched.add(key)
                prv[right] = p
            tokens[p], tokens[q], nxt[p] = new, -1, right
        pair_counts.pop(pair, None)
        where.pop(pair, None)
        floor = 1 if sparse else 0
        for p in touched:  # only pairs with the new token went up: push those now
            c = pair_counts.get(p, 0)
            if c > floor:
                heapq.heappush(heap, -c * _HEAP_COUNT + p)
            elif c > 0:
                del pair_counts[p], where[p]
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return merges


def _drop_singletons(pair_counts: dict, where: dict) -> None:
    for key in [k for k, c in pair_counts.items() if c == 1]:
        del pair_counts[key], where[key]


def _rebuild_pairs(tokens, weight, nxt, pair_counts: dict, where: dict) -> list:
    """Count every pair still present from the token arrays (the tables left out those seen once);
    returns the new heap."""
    K = _PAIR_KEY
    pair_counts.clear()
    where.clear()
    for p, q in enumerate(nxt):
        if q >= 0 and tokens[p] >= 0:
            key = tokens[p] * K + tokens[q]
            pair_counts[key] += weight[p]
            where[key].append(p)
    heap = [-c * _HEAP_COUNT + p for p, c in pair_counts.items()]
    heapq.heapify(heap)
    return heap


_SURROGATE = re.compile("[\ud800-\udfff]")


def _learned_pieces(piece_counts: dict) -> dict:
    """{bytes: count} of the pieces the learner takes (_most_frequent). Str pieces that stand for
    the same bytes are merged first, unless none can: all str without surrogates (UTF-8 is one to
    one on those, and keeps their order), when only the kept pieces are converted, not a copy of
    every piece (a sample of one endless "word" has megabytes of distinct pieces)."""
    if all(isinstance(p, str) and (p.isascii() or not _SURROGATE.search(p)) for p in piece_counts):
        kept = _most_frequent(piece_counts, MAX_LEARN_BYTES, MAX_LEARN_SINGLE_BYTES, size=_utf8_len)
        return {p.encode(): c for p, c in kept.items()}
    by_bytes = defaultdict(int)
    for piece, c in piece_counts.items():
        by_bytes[piece if isinstance(piece, bytes) else piece_bytes(piece)] += c
    return _most_frequent(by_bytes, MAX_LEARN_BYTES, MAX_LEARN_SINGLE_BYTES)


def _utf8_len(piece: str) -> int:
    return len(piece) if piece.isascii() else len(piece.encode())


def _most_frequent(by_bytes: dict, budget: int, single_budget: int | None = None, size=len) -> dict:
    """The most frequent pieces whose bytes (`size`) add up to at most `budget`, those seen once to at
    most `single_budget` (ties: the smaller piece first, for reproducibility); all of them when they
    fit."""
    single_budget = budget if single_budget is None else single_budget
    total = single = 0
    for piece, c in by_bytes.items():
        n = size(piece)
        total += n
        if c == 1:
            single += n
    if total <= budget and single <= single_budget:
        return by_bytes
    by_count = defaultdict(list)  # grouped by count: no sort key object per piece
    for piece, c in by_bytes.items():
        by_count[c].append(piece)
    kept, held = {}, 0
    for c in sorted(by_count, reverse=True):
        pieces = by_count.pop(c)
        pieces.sort()
        if c == 1:
            budget = min(budget, held + single_budget)
        for piece in pieces:
            held += size(piece)
            if held > budget:
                return kept
            kept[piece] = c
    return kept


def check_vocab_size(vocab_size: int, special_tokens) -> int:
    """Number of merges for a vocabulary of `vocab_size` ids in all."""
    n_merges = vocab_size - 256 - len(special_tokens)
    if n_merges < 0:
        raise UserError(
            f"--vocab_size {vocab_size} is too small: it must be at least 256 bytes + "
            f"{len(special_tokens)} special tokens = {256 + len(special_tokens)}"
        )
    return n_merges


def tokenizer_from_merges(pairs, pattern, special_tokens) -> Tokenizer:
    """Our id layout: bytes 0..255, merges from 256 on, then the specials."""
    merges = [(a, b, 256 + k) for k, (a, b) in enumerate(pairs)]
    first_special = 256 + len(merges)
    specials = {s: first_special + k for k, s in enumerate(special_tokens)}
    return Tokenizer(pattern=pattern, merges=merges, special_tokens=specials)


def train(
    texts,
    vocab_size: int,
    pattern: str = "gpt4",
    special_tokens=("<|endoftext|>",),
    workers: int = 1,
    progress: bool = False,
) -> Tokenizer:
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
        counts = count_pieces_parallel(texts, pattern, special_tokens, workers)
    else:
        compiled, finder = compile_pattern(pattern), special_regex(special_tokens)
        counts = Counter()
        for t in texts:
            # A long text is counted in parts cut at exact points only (split_text), so for ordinary
            # text the list of pieces holds about COUNT_PART characters' worth, not the whole text.
            for part in split_text(t, pattern, COUNT_PART):
                counts.update(count_pieces(part, compiled, finder))
                cap_counts(counts)
    pairs = learn_merges(counts, n_merges, progress=progress)
    return tokenizer_from_merges(pairs, pattern, special_tokens)


_bpe_entry["train"] = train  # Tokenizer.train
