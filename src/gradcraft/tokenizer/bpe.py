"""Byte-level BPE: the `Tokenizer` and its encode / decode.

A token is a byte string. Encoding a text:

1. cut out the special tokens the caller allows (they map straight to ids),
2. cut the rest into pieces with the split pattern (see pretokenize.py),
3. turn each piece into its UTF-8 bytes, one token per byte, and apply merges:
   repeatedly merge the adjacent pair with the lowest rank (the earliest
   learned merge), leftmost first on ties, until no pair has a rank.

Step 3 depends only on the piece, so results are cached per piece; on real
text almost every piece is a cache hit and encoding costs a regex scan plus a
dict lookup per piece.

Id layout of a vocabulary trained here: ids 0..255 are the single bytes
(id == byte value), merge k (0-based) creates id 256 + k, and the special
tokens follow the merges in the order given. Imported vocabularies keep the
ids they had in HF `tokenizers` or tiktoken, so that they encode to the same
ids as there.

Two merge semantics exist:

    "merges"  a pair merges only if (left, right) is a learned merge rule;
              its rank is the rule's position (HF `tokenizers`, GPT-2, ours)
    "ranks"   any adjacent pair whose concatenated bytes are a token merges,
              ranked by that token's id (tiktoken); implemented by adding a
              rule for every way of splitting every token in two
"""

from __future__ import annotations

import codecs
import hashlib
import heapq
import json
from itertools import chain

from gradcraft.tokenizer.pretokenize import compile_pattern, resolve_pattern, special_regex, split_pieces, split_special

INF = float("inf")
# Pieces longer than this (bytes) merge with a heap, O(n log n), instead of
# rescanning all pairs per merge, O(n^2): matters for `none` and long runs.
LONG_PIECE = 128
# Pieces up to this many characters are cached; the cache is dropped when full (an entry costs about
# 200 bytes: text whose pieces never repeat, such as random bytes, fills it; ordinary text's frequent
# pieces come back within a few thousand pieces after it is dropped).
CACHE_PIECE_CHARS = 256
CACHE_ENTRIES = 1 << 17
# A piece longer than this many characters (a "word" of megabytes: one line without spaces, a run of
# whitespace, the `none` pattern's document) is merged in consecutive parts of this length, so that
# encoding it costs bounded memory (merging holds about 200 bytes per byte of a piece) and no token
# spans a part boundary; shorter pieces, all of ordinary text, are merged whole.
MAX_PIECE_CHARS = 1 << 14


def _bytes_errors(err: UnicodeEncodeError):
    """Encode error handler for str -> bytes of a piece.

    U+DC80..U+DCFF are bytes that were not valid UTF-8 in an input read with
    `surrogateescape` (see `Tokenizer.encode_bytes`): they become those bytes
    again. Other lone surrogates (only possible in a str built by hand) get
    their 3-byte "surrogatepass" encoding, so encoding never fails.
    """
    out = bytearray()
    for ch in err.object[err.start : err.end]:
        cp = ord(ch)
        out += bytes([cp - 0xDC00]) if 0xDC80 <= cp <= 0xDCFF else ch.encode("utf-8", "surrogatepass")
    return bytes(out), err.end


ERRORS = "gradcraft-bytes"
codecs.register_error(ERRORS, _bytes_errors)


def piece_bytes(piece: str) -> bytes:
    """The bytes a piece stands for (see `_bytes_errors`)."""
    return piece.encode("utf-8", ERRORS)


class _PieceCache(dict):
    """piece -> tuple of ids; a miss computes and stores (dict.__missing__),
    so the hit path stays in C when used as `map(cache.__getitem__, pieces)`."""

    def __init__(self, compute):
        super().__init__()
        self.compute = compute

    def __missing__(self, piece):
        ids = self.compute(piece)
        if len(piece) <= CACHE_PIECE_CHARS:
            self[piece] = ids
        return ids


class Tokenizer:
    """A byte-level BPE vocabulary with its split pattern and special tokens.

    Build one with `gradcraft.tokenizer.train(...)`, `Tokenizer.load(path)`,
    `from_hf_json(...)` or `from_tiktoken(...)`; the constructor takes the
    raw tables:

    pattern         "gpt2" | "gpt4" | "none" | a regex string
    byte_ids        256 ids, the token id of each single byte (default: id == byte)
    merges          [(left_id, right_id, new_id), ...] in rank order
    special_tokens  {string: id}
    merge_mode      "merges" or "ranks" (see the module docstring)
    extra_tokens    {id: bytes} for tokens no merge produces (only in imports)
    whole_piece     look the whole piece up in the vocabulary first (tiktoken,
                    HF `ignore_merges`)
    split_specials  special-token strings in any text become their ids unless the
                    caller says otherwise (K2's tokenizer, tokenizer/k2.py); default:
                    only those the caller allows
    """

    def __init__(
        self,
        *,
        pattern="gpt2",
        byte_ids=None,
        merges=(),
        special_tokens=None,
        merge_mode="merges",
        extra_tokens=None,
        whole_piece=False,
        split_specials=False,
    ):
        if merge_mode not in ("merges", "ranks"):
            raise ValueError(f"merge_mode must be 'merges' or 'ranks', not {merge_mode!r}")
        self.pattern_name, self.pattern = resolve_pattern(pattern)
        self.byte_ids = list(range(256)) if byte_ids is None else [int(i) for i in byte_ids]
        if len(self.byte_ids) != 256:
            raise ValueError("byte_ids must hold 256 ids")
        self.merges = [(int(a), int(b), int(t)) for a, b, t in merges]
        self.special_tokens = {str(s): int(i) for s, i in (special_tokens or {}).items()}
        self.merge_mode = merge_mode
        self.extra_tokens = {int(i): bytes(b) for i, b in (extra_tokens or {}).items()}
        self.whole_piece = bool(whole_piece)
        self.split_specials = bool(split_specials)
        self._build()

    # ----------------------------------------------------------------- tables
    def _build(self):
        token_bytes = {i: bytes([b]) for b, i in enumerate(self.byte_ids)}
        for a, b, t in self.merges:
            token_bytes[t] = token_bytes[a] + token_bytes[b]
        token_bytes.update(self.extra_tokens)
        self.token_bytes = dict(token_bytes)  # ordinary tokens only
        for s, i in self.special_tokens.items():
            if i in token_bytes:
                raise ValueError(f"special token {s!r} reuses id {i}")
            token_bytes[i] = s.encode("utf-8")
        self.vocab_size = max(token_bytes) + 1
        # Decode table: a list indexed by id (holes are None and raise below).
        self._decode_table = [None] * self.vocab_size
        for i, b in token_bytes.items():
            self._decode_table[i] = b

        self._rank, self._pair_id = {}, {}
        if self.merge_mode == "merges":
            for r, (a, b, t) in enumerate(self.merges):
                self._rank.setdefault((a, b), r)
                self._pair_id.setdefault((a, b), t)
        else:
            by_bytes = {b: i for i, b in self.token_bytes.items()}
            for t, tb in self.token_bytes.items():
                for k in range(1, len(tb)):
                    a, b = by_bytes.get(tb[:k]), by_bytes.get(tb[k:])
                    if a is not None and b is not None:
                        self._rank[(a, b)] = t
                        self._pair_id[(a, b)] = t
        self._whole = {b: i for i, b in self.token_bytes.items()} if self.whole_piece else None
        self._compiled = compile_pattern(self.pattern)
        self._special_finder = special_regex(self.special_tokens)
        self._cache = _PieceCache(self._encode_piece)

    def __reduce__(self):
        # Send only the tables to worker processes, not caches or regexes.
        return (_rebuild, (self.state(),))

    def state(self) -> dict:
        """Everything that defines the tokenizer (what `save` writes)."""
        return {
            "pattern_name": self.pattern_name,
            "pattern": self.pattern,
            "byte_ids": self.byte_ids,
            "merges": [list(m) for m in self.merges],
            "special_tokens": self.special_tokens,
            "merge_mode": self.merge_mode,
            "extra_tokens": {str(i): b.hex() for i, b in sorted(self.extra_tokens.items())},
            "whole_piece": self.whole_piece,
            # only when set, so that every other tokenizer keeps its fingerprint
            **({"split_specials": True} if self.split_specials else {}),
        }

    @property
    def fingerprint(self) -> str:
        """16 hex digits of the sha256 of the canonical content: equal
        fingerprints mean equal encodings."""
        return self.full_fingerprint[:16]

    @property
    def full_fingerprint(self) -> str:
        state = self.state()
        state.pop("pattern_name")  # a name is only a label for the regex
        canon = json.dumps(state, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(canon.encode("ascii")).hexdigest()

    def __repr__(self):
        return (
            f"Tokenizer(vocab_size={self.vocab_size}, pattern={self.pattern_name!r}, "
            f"merges={len(self.merges)}, special_tokens={list(self.special_tokens)})"
        )

    # --------------------------------------------------------------- encoding
    def _encode_piece(self, piece: str) -> tuple:
        if len(piece) > MAX_PIECE_CHARS:
            return self._encode_parts(piece)
        data = piece_bytes(piece)
        if self._whole is not None:
            t = self._whole.get(data)
            if t is not None:
                return (t,)
        byte_ids = self.byte_ids
        ids = [byte_ids[b] for b in data]
        if len(ids) > LONG_PIECE:
            return tuple(self._merge_long(ids))
        if len(ids) < 2:
            return tuple(ids)
        # ranks[k] = rank of the pair (ids[k], ids[k+1]); after a merge only
        # the two pairs touching the new token change.
        rank_get, pair_id = self._rank.get, self._pair_id
        ranks = list(map(rank_get, zip(ids, ids[1:]), [INF] * (len(ids) - 1)))
        while ranks:
            best = min(ranks)
            if best == INF:
                break
            i = ranks.index(best)  # leftmost of the lowest rank
            new = pair_id[ids[i], ids[i + 1]]
            ids[i : i + 2] = (new,)
            del ranks[i]
            if i > 0:
                ranks[i - 1] = rank_get((ids[i - 1], new), INF)
            if i < len(ranks):
                ranks[i] = rank_get((new, ids[i + 1]), INF)
        return tuple(ids)

    def _encode_parts(self, piece: str) -> tuple:
        """A piece over MAX_PIECE_CHARS, merged in parts of that many characters (a repeated part,
        as in a run of one character, is merged once)."""
        out, last, last_ids = [], None, ()
        for i in range(0, len(piece), MAX_PIECE_CHARS):
            part = piece[i : i + MAX_PIECE_CHARS]
            if part != last:
                last, last_ids = part, self._encode_piece(part)
            out.extend(last_ids)
        return tuple(out)

    def _merge_long(self, ids: list) -> list:
        """Same result as the loop in `_encode_piece`, with a heap of rank * 2**32 + position
        (one int an entry: cheaper to compare and to hold than a tuple) and a linked list, so long
        pieces stay O(n log n)."""
        rank, pair_id, n = self._rank, self._pair_id, len(ids)
        get, pop, push, shift = rank.get, heapq.heappop, heapq.heappush, 1 << 32
        nxt = list(range(1, n + 1))
        prv = list(range(-1, n - 1))
        heap = [get(p) * shift + i for i, p in enumerate(zip(ids, ids[1:])) if p in rank]
        heapq.heapify(heap)
        while heap:
            r, i = divmod(pop(heap), shift)
            j = nxt[i] if ids[i] is not None else n
            if j >= n or get((ids[i], ids[j])) != r:
                continue  # stale: this pair changed since it was pushed
            new = ids[i] = pair_id[ids[i], ids[j]]
            ids[j] = None
            k = nxt[i] = nxt[j]
            if k < n:
                prv[k] = i
                r2 = get((new, ids[k]))
                if r2 is not None:
                    push(heap, r2 * shift + i)
            k = prv[i]
            if k >= 0:
                r2 = get((ids[k], new))
                if r2 is not None:
                    push(heap, r2 * shift + k)
        return [t for t in ids if t is not None]

    def encode_ordinary(self, text: str) -> list[int]:
        """Encode text, treating special-token strings as ordinary text."""
        if len(self._cache) > CACHE_ENTRIES:
            self._cache.clear()
        return list(chain.from_iterable(map(self._cache.__getitem__, split_pieces(text, self._compiled))))

    def encode(self, text: str, allowed_special=None) -> list[int]:
        """Encode text. Special-token strings found in the text become their
        special ids only if listed in `allowed_special` ("all" for every one);
        otherwise they are encoded as ordinary text, like any other string.
        Unset: none, or all for a tokenizer with `split_specials` (K2's)."""
        if allowed_special is None:
            allowed_special = "all" if self.split_specials else ()
        if allowed_special == "all":
            allowed = set(self.special_tokens)
        else:
            allowed = set(allowed_special)
            unknown = allowed - set(self.special_tokens)
            if unknown:
                raise ValueError(f"not special tokens of this tokenizer: {sorted(unknown)}")
        if not allowed or not any(s in text for s in allowed):
            return self.encode_ordinary(text)
        finder = self._special_finder if allowed == set(self.special_tokens) else special_regex(allowed)
        out = []
        for chunk, is_special in split_special(text, finder):
            if is_special:
                out.append(self.special_tokens[chunk])
            else:
                out.extend(self.encode_ordinary(chunk))
        return out

    def encode_bytes(self, data: bytes, allowed_special=None) -> list[int]:
        """Encode raw bytes, valid UTF-8 or not; `decode_bytes` gives them back.

        Invalid bytes are carried through the regex as lone surrogates
        (`surrogateescape`) and turned back into those bytes per piece."""
        return self.encode(bytes(data).decode("utf-8", "surrogateescape"), allowed_special)

    # --------------------------------------------------------------- decoding
    def decode_bytes(self, ids) -> bytes:
        """The exact bytes of a token sequence (any sequence of valid ids)."""
        table = self._decode_table
        if hasattr(ids, "tolist"):  # NumPy array / memmap: Python ints index faster
            ids = ids.tolist()
        try:
            if ids and min(ids) < 0:  # a negative index would silently wrap around
                raise IndexError
            return b"".join([table[i] for i in ids])
        except (IndexError, TypeError):
            bad = next(i for i in ids if not (0 <= int(i) < len(table)) or table[int(i)] is None)
            raise ValueError(f"token id {int(bad)} is not in the vocabulary (size {self.vocab_size})") from None

    def decode(self, ids, errors: str = "replace") -> str:
        """Decode to text; bytes that are not valid UTF-8 (e.g. a sequence cut
        inside a character) become U+FFFD unless `errors` says otherwise
        ("surrogateescape" gives back exactly what `encode_bytes` read)."""
        return self.decode_bytes(ids).decode("utf-8", errors)

    def id_to_bytes(self, i: int) -> bytes:
        return self.decode_bytes([i])

    @property
    def eot_id(self) -> int | None:
        """Id of <|endoftext|>, or None if this vocabulary has none."""
        return self.special_tokens.get("<|endoftext|>")

    # ------------------------------------------------------------- file I/O
    # The trainer (train.py) and the file formats (formats.py) build on this module: they register
    # their entry points in _ENTRY when the package is imported (tokenizer/__init__.py imports both),
    # so this module imports neither and the three form no import circle.
    @staticmethod
    def train(texts, vocab_size: int, *options, **named_options) -> Tokenizer:
        """Learn a vocabulary: `gradcraft.tokenizer.train` (tokenizer/train.py), with its options
        (pattern, special_tokens, workers, progress)."""
        return _ENTRY["train"](texts, vocab_size, *options, **named_options)

    def save(self, path) -> None:
        """Write our versioned JSON format (see docs/tokenizer.md), atomically."""
        _ENTRY["save"](self, path)

    @classmethod
    def load(cls, path) -> Tokenizer:
        """Load our format, an HF tokenizer.json, or a tiktoken rank file."""
        return _ENTRY["load"](path)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table used in HF vocab strings:
    visible Latin-1 bytes stand for themselves, the other 68 bytes (controls,
    space, ...) are shifted to U+0100 and up, in byte order."""
    visible = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table, shift = {}, 0
    for b in range(256):
        if b in visible:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + shift)
            shift += 1
    return table


_ENTRY: dict = {}  # "train" (train.py), "save" and "load" (formats.py): see Tokenizer.train


def _rebuild(state: dict) -> Tokenizer:
    state = dict(state)
    pattern = state.pop("pattern")
    state.pop("pattern_name", None)
    state["extra_tokens"] = {int(i): bytes.fromhex(h) for i, h in state.get("extra_tokens", {}).items()}
    return Tokenizer(pattern=pattern, **state)
