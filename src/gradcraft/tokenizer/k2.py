"""K2's byte-level BPE tokenizer (pstaykov/transformer, `tokenizer/`): its files, read and written.

K2 ships its tokenizer as `tokenizer.bbpe` (binary, exact) plus `merges.txt` + `vocab.json`
(human-readable, GPT-2's printable-byte spelling). The binary file, little-endian:

    "BBPEV1\\0\\0"                       8 bytes
    uint32 n_merges, then n_merges x (uint32 left, uint32 right)
    uint32 n_special, then n_special x (uint32 id, uint32 length, length bytes of UTF-8 text)

Ids 0..255 are the bytes; merge k makes id 256 + k. Encoding (K2's `Tokenizer::encode`): special
tokens are cut out of any text (longest first, leftmost), the rest is split by K2's pre-tokenizer
(pattern "k2", pretokenize.py), and each piece merges its lowest-id pair first, leftmost on ties:
exactly our "merges" mode with rank = merge index. K2 always honours special tokens in text, so a
K2 tokenizer here has `split_specials=True`. `merges.txt` + `vocab.json` hold no special tokens:
K2's trainer adds its five (SPECIAL_TOKENS below) right after the merges, and that is what reading
the pair assumes; the binary file is the one to bring when the specials were remapped.
"""

from __future__ import annotations

import json
import os
import struct

from gradcraft.errors import UserError
from gradcraft.tokenizer.bpe import Tokenizer, bytes_to_unicode
from gradcraft.tokenizer.pretokenize import PATTERNS, SPLITTERS, Splitter

MAGIC = b"BBPEV1\0\0"
# what K2's train_tokenizer gives ids n_regular, n_regular + 1, ...
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>")


# ------------------------------------------------------------------ pre-tokenization
def _k2_class(cp: int) -> str:
    """K2's character classes (its unicode_utils): 'L' letter, 'N' digit, 'W' whitespace, '' other."""
    if 97 <= cp <= 122 or 65 <= cp <= 90 or any(a <= cp <= b for a, b in _LETTER_RANGES):
        return "L"
    if 48 <= cp <= 57 or 0xFF10 <= cp <= 0xFF19:
        return "N"
    if cp in _WHITESPACE or 0x2000 <= cp <= 0x200A:
        return "W"
    return ""


_LETTER_RANGES = (
    (0x00AA, 0x02AF),
    (0x0370, 0x04FF),
    (0x0590, 0x08FF),
    (0x0900, 0x0DFF),
    (0x1E00, 0x1EFF),
    (0x3040, 0x30FF),
    (0x3400, 0x9FFF),
    (0xAC00, 0xD7A3),
    (0xF900, 0xFAFF),
)
_WHITESPACE = {0x20, 0x09, 0x0A, 0x0D, 0x0B, 0x0C, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000}


def _decode_at(data: bytes, i: int) -> tuple[int, int]:
    """K2's UTF-8 reader: (code point, length). Lenient like K2's: overlong forms, encoded surrogates
    and values past U+10FFFF are read as one character; a lead byte without its continuation bytes
    (or a stray continuation byte) is one character whose code point is the byte's value."""
    c0 = data[i]
    if c0 < 0x80:
        return c0, 1
    for lead_mask, lead_bits, extra in ((0xE0, 0xC0, 1), (0xF0, 0xE0, 2), (0xF8, 0xF0, 3)):
        if c0 & lead_mask == lead_bits:
            tail = data[i + 1 : i + 1 + extra]
            if len(tail) < extra or any(c & 0xC0 != 0x80 for c in tail):
                return c0, 1
            cp = c0 & (0x7F >> (extra + 1))
            for c in tail:
                cp = (cp << 6) | (c & 0x3F)
            return cp, 1 + extra
    return c0, 1


def k2_pieces(data: bytes) -> list[bytes]:
    """K2's pre-tokenizer over raw bytes, rule by rule (the exact reference; `K2Splitter` runs the
    equivalent regex on text that is valid UTF-8)."""
    pieces, i, n = [], 0, len(data)
    while i < n:
        cp, length = _decode_at(data, i)
        kind = _k2_class(cp)
        if cp == 0x27 and i + 1 < n:  # ' + one or two letters
            c1, l1 = _decode_at(data, i + 1)
            if _k2_class(c1) == "L":
                j = i + 1 + l1
                if j < n:
                    c2, l2 = _decode_at(data, j)
                    if _k2_class(c2) == "L":
                        j += l2
                pieces.append(data[i:j])
                i = j
                continue
        if kind in ("L", "N", "W"):
            j, count, last = i + length, 1, i
            while j < n and not (kind == "N" and count == 3):
                c, l = _decode_at(data, j)
                if _k2_class(c) != kind:
                    break
                last, j, count = j, j + l, count + 1
            if kind == "W" and j < n and last > i:  # leave the last whitespace to a piece of its own
                j = last
            pieces.append(data[i:j])
            i = j
            continue
        pieces.append(data[i : i + length])
        i += length
    return pieces


class K2Splitter(Splitter):
    """The "k2" pattern. Text that came from invalid UTF-8 (bytes read with surrogateescape) goes
    through `k2_pieces`, which reads bytes as leniently as K2 does; any other text through the regex."""

    def findall(self, text: str) -> list[str]:
        if any("\udc80" <= ch <= "\udcff" for ch in text):
            data = text.encode("utf-8", "surrogateescape")
            return [p.decode("utf-8", "surrogateescape") for p in k2_pieces(data)]
        return super().findall(text)


SPLITTERS["k2"] = K2Splitter  # compile_pattern("k2") cuts with it


# ------------------------------------------------------------------ building a tokenizer
def tokenizer_from_k2(pairs, specials: dict[str, int], source: str) -> Tokenizer:
    """A Tokenizer that encodes like K2's from its merge pairs (in order) and {text: id} specials."""
    merges, seen = [], {}
    for k, (a, b) in enumerate(pairs):
        new = 256 + k
        if a >= new or b >= new:
            raise UserError(
                f"{source}: merge {k} joins token {max(a, b)}, which does not exist yet; the file is damaged"
            )
        if (a, b) in seen:
            raise UserError(
                f"{source}: merges {seen[a, b]} and {k} join the same pair ({a}, {b}); "
                "not a tokenizer K2's trainer writes"
            )
        seen[a, b] = k
        merges.append((a, b, new))
    for text, i in specials.items():
        if not text:
            raise UserError(f"{source}: special token {i} is empty; K2 could never encode with it")
        if i < 256 + len(merges):
            raise UserError(f"{source}: special token {text!r} has id {i}, which is a regular token's id")
    return Tokenizer(pattern=PATTERNS["k2"], merges=merges, special_tokens=specials, split_specials=True)


def is_k2_tokenizer(tok: Tokenizer) -> bool:
    """Whether K2's files can hold this tokenizer exactly: K2's pre-tokenizer, byte ids 0..255, merge k
    making id 256 + k, special tokens after the merges and honoured in any text."""
    return (
        tok.pattern == PATTERNS["k2"]
        and tok.byte_ids == list(range(256))
        and not tok.extra_tokens
        and tok.merge_mode == "merges"
        and not tok.whole_piece
        and tok.split_specials
        and all(t == 256 + k for k, (_, _, t) in enumerate(tok.merges))
        and all(i >= 256 + len(tok.merges) for i in tok.special_tokens.values())
    )


# ------------------------------------------------------------------ files
def read_bbpe(path: str) -> Tokenizer:
    data = _read(path)
    if data[:6] != MAGIC[:6]:
        raise UserError(f"{path} is not a K2 tokenizer.bbpe (it does not start with BBPEV1)")
    pos = 8

    def take(size: int, what: str) -> bytes:
        nonlocal pos
        if pos + size > len(data):
            raise UserError(
                f"{path} is truncated: {what} needs {size} bytes at offset {pos}, the file has "
                f"{len(data)}; copy the tokenizer again"
            )
        pos += size
        return data[pos - size : pos]

    (n_merges,) = struct.unpack("<I", take(4, "the merge count"))
    raw = take(8 * n_merges, f"{n_merges} merges")
    flat = struct.unpack(f"<{2 * n_merges}I", raw)
    pairs = list(zip(flat[0::2], flat[1::2]))
    (n_special,) = struct.unpack("<I", take(4, "the special-token count"))
    specials = {}
    for k in range(n_special):
        i, length = struct.unpack("<II", take(8, f"special token {k}"))
        try:
            text = take(length, f"special token {k}").decode("utf-8")
        except UnicodeDecodeError:
            raise UserError(f"{path}: special token {k} is not UTF-8 text; the file is damaged") from None
        if text in specials:
            raise UserError(f"{path}: special token {text!r} appears twice; the file is damaged")
        specials[text] = i
    if pos != len(data):
        raise UserError(f"{path} has {len(data) - pos} bytes after its last special token; the file is damaged")
    return tokenizer_from_k2(pairs, specials, path)


def read_merges_vocab(merges_path: str, vocab_path: str | None = None) -> Tokenizer:
    """K2's merges.txt + vocab.json (vocab.json beside merges.txt unless given), with K2's five
    special tokens after the merges."""
    vocab_path = vocab_path or os.path.join(os.path.dirname(os.path.abspath(merges_path)), "vocab.json")
    try:
        vocab = json.loads(_read(vocab_path).decode("utf-8"))
        lines = _read(merges_path).decode("utf-8").split("\n")
    except (ValueError, UnicodeDecodeError) as e:
        raise UserError(f"{vocab_path} / {merges_path} are not K2's vocab.json / merges.txt ({e})") from None
    if not isinstance(vocab, dict):
        raise UserError(f"{vocab_path} is not a vocabulary (a JSON object of token: id)")
    uni = bytes_to_unicode()
    for b in range(256):
        if vocab.get(uni[b]) != b:
            raise UserError(f"{vocab_path}: byte {b} is not token {b}; not K2's vocab.json")
    if lines and lines[0].startswith("#version"):
        lines = lines[1:]
    while lines and lines[-1] == "":
        lines.pop()
    pairs = []
    for n, line in enumerate(lines):
        parts = line.split(" ")
        if len(parts) != 2 or parts[0] not in vocab or parts[1] not in vocab:
            raise UserError(f"{merges_path} line {n + 2}: {line!r} is not a merge of two tokens of {vocab_path}")
        a, b = vocab[parts[0]], vocab[parts[1]]
        if vocab.get(parts[0] + parts[1]) != 256 + n:
            raise UserError(
                f"{merges_path} line {n + 2}: the merge makes {parts[0] + parts[1]!r}, which "
                f"{vocab_path} does not hold as token {256 + n}; the two files do not belong together"
            )
        pairs.append((a, b))
    if len(vocab) != 256 + len(pairs):
        raise UserError(
            f"{vocab_path} has {len(vocab)} tokens but {merges_path} makes {256 + len(pairs)}; "
            "the two files do not belong together"
        )
    first = 256 + len(pairs)
    return tokenizer_from_k2(pairs, {s: first + k for k, s in enumerate(SPECIAL_TOKENS)}, merges_path)


def load_k2_tokenizer(path: str) -> Tokenizer:
    """tokenizer.bbpe, merges.txt (vocab.json beside it) or vocab.json (merges.txt beside it)."""
    if os.path.basename(path) == "vocab.json":
        return read_merges_vocab(os.path.join(os.path.dirname(os.path.abspath(path)), "merges.txt"), path)
    head = _read(path)[:8]
    if head.startswith(MAGIC[:6]):
        return read_bbpe(path)
    return read_merges_vocab(path)


def bbpe_bytes(tok: Tokenizer) -> bytes:
    _check_k2(tok)
    out = [MAGIC, struct.pack("<I", len(tok.merges))]
    out += [struct.pack("<II", a, b) for a, b, _ in tok.merges]
    specials = sorted(tok.special_tokens.items(), key=lambda x: x[1])  # K2 writes them by id
    out.append(struct.pack("<I", len(specials)))
    for text, i in specials:
        raw = text.encode("utf-8")
        out += [struct.pack("<II", i, len(raw)), raw]
    return b"".join(out)


def human_readable_files(tok: Tokenizer) -> tuple[str, str]:
    """(vocab.json, merges.txt) as K2's export_human_readable writes them."""
    _check_k2(tok)
    uni = bytes_to_unicode()

    def printable(i: int) -> str:
        return "".join(uni[b] for b in tok.token_bytes[i])

    n = 256 + len(tok.merges)
    entries = [f"  {json.dumps(printable(i), ensure_ascii=False)}: {i}" for i in range(n)]
    vocab = "{\n" + ",\n".join(entries) + "\n}\n"
    merges = "#version: 0.2\n" + "".join(f"{printable(a)} {printable(b)}\n" for a, b, _ in tok.merges)
    return vocab, merges


def write_k2_tokenizer(tok: Tokenizer, folder: str) -> list[str]:
    """tokenizer.bbpe, vocab.json and merges.txt into folder (atomically each); their names."""
    from gradcraft.atomic import write_bytes, write_text

    write_bytes(os.path.join(folder, "tokenizer.bbpe"), bbpe_bytes(tok))
    vocab, merges = human_readable_files(tok)
    write_text(os.path.join(folder, "vocab.json"), vocab)
    write_text(os.path.join(folder, "merges.txt"), merges)
    return ["tokenizer.bbpe", "vocab.json", "merges.txt"]


def _check_k2(tok: Tokenizer) -> None:
    if not is_k2_tokenizer(tok):
        raise UserError("this tokenizer is not K2's (another pre-tokenizer or id layout); K2's files cannot hold it")


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise UserError(f"tokenizer file {path} not found") from None
    except OSError as e:
        raise UserError(f"cannot read tokenizer file {path}: {e.strerror}") from None
