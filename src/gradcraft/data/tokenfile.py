"""Token files: a 64-byte header, then the tokens as raw little-endian integers.

    offset  size  field
         0     8  magic b"GCTOKENS"
         8     4  format version (uint32 LE), currently 1
        12     4  bytes per token (uint32 LE): 2 -> uint16, 4 -> uint32
        16     8  token count (uint64 LE)
        24     4  vocabulary size (uint32 LE; 0 = not recorded)
        28     4  reserved, zero
        32    32  tokenizer fingerprint, ASCII hex, NUL-padded
        64     -  count * bytes-per-token bytes of tokens

uint16 is used when every id fits (vocabulary <= 65536), halving the file.
Readers memory-map the tokens, so a file bigger than RAM is fine.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

import numpy as np

from gradcraft.atomic import atomic_file
from gradcraft.errors import UserError

MAGIC = b"GCTOKENS"
VERSION = 1
HEADER_BYTES = 64
_HEADER = struct.Struct("<8sIIQII32s")  # 64 bytes, see the table above
_DTYPES = {2: np.dtype("<u2"), 4: np.dtype("<u4")}


@dataclass(frozen=True)
class TokenFileHeader:
    version: int
    dtype: np.dtype
    count: int
    vocab_size: int
    fingerprint: str


def dtype_for_vocab(vocab_size: int) -> np.dtype:
    """uint16 if every id < vocab_size fits in 16 bits, else uint32."""
    return _DTYPES[2] if vocab_size <= 1 << 16 else _DTYPES[4]


def _pack_header(itemsize: int, count: int, vocab_size: int, fingerprint: str) -> bytes:
    fp = fingerprint.encode("ascii")
    if len(fp) > 32:
        raise ValueError("fingerprint longer than 32 characters")
    return _HEADER.pack(MAGIC, VERSION, itemsize, count, vocab_size, 0, fp)


def write_token_file(path, tokens, *, vocab_size: int | None = None, fingerprint: str = "", dtype=None) -> int:
    """Write tokens (an array, or an iterable of arrays / lists of ints,
    consumed one piece at a time) to `path`, atomically: a temp file in the
    same folder, fsync, then rename over `path`. Returns the token count.

    The token dtype comes from `dtype`, else `vocab_size`, else (for a single
    array) from its largest value."""
    path = os.fspath(path)
    if isinstance(tokens, np.ndarray) and tokens.ndim == 1:
        tokens = [tokens]
        if dtype is None and vocab_size is None:
            vocab_size = int(tokens[0].max()) + 1 if tokens[0].size else 0
    if dtype is None:
        if vocab_size is None:
            raise ValueError("write_token_file needs vocab_size or dtype for an iterable of tokens")
        dtype = dtype_for_vocab(vocab_size)
    dtype = np.dtype(dtype).newbyteorder("<")
    if dtype.itemsize not in _DTYPES:
        raise ValueError(f"token dtype must be uint16 or uint32, not {dtype}")
    limit = 1 << (8 * dtype.itemsize)

    count = 0
    with atomic_file(path, suffix=".tokens") as f:
        f.write(_pack_header(dtype.itemsize, 0, vocab_size or 0, fingerprint))
        for chunk in tokens:
            arr = np.asarray(chunk)
            if arr.size == 0:
                continue
            if arr.min() < 0 or arr.max() >= limit:
                raise ValueError(f"token id {int(arr.max())} does not fit in {dtype}")
            f.write(arr.astype(dtype, copy=False).tobytes())
            count += arr.size
        f.seek(0)  # the count is known only now
        f.write(_pack_header(dtype.itemsize, count, vocab_size or 0, fingerprint))
    return count


def val_path_for(path: str) -> str:
    """The validation split next to a token file: data/tokens.bin -> data/tokens.val.bin, data/tokens ->
    data/tokens.val (written by `gradcraft tokenize --val_fraction`, read by `gradcraft train`)."""
    stem, suffix = os.path.splitext(path)
    return f"{stem}.val{suffix}"


def read_token_header(path) -> TokenFileHeader:
    """Read and check the header of a token file (see `read_token_file`)."""
    path = os.fspath(path)
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            raw = f.read(HEADER_BYTES)
    except FileNotFoundError:
        raise UserError(f"token file {path} not found") from None
    except OSError as e:
        raise UserError(f"cannot read token file {path}: {e.strerror}") from None
    if raw[:8] != MAGIC:
        raise UserError(f"{path} is not a gradcraft token file (bad magic)")
    if len(raw) < HEADER_BYTES:
        raise UserError(f"{path} is truncated: the header needs {HEADER_BYTES} bytes, file holds {len(raw)}")
    _, version, itemsize, count, vocab_size, reserved, fp = _HEADER.unpack(raw)
    if version != VERSION:
        raise UserError(
            f"{path} has token file format version {version}; this gradcraft reads version "
            f"{VERSION} (re-run `gradcraft tokenize` or upgrade gradcraft)"
        )
    if itemsize not in _DTYPES:
        raise UserError(f"{path} has a damaged header (token size {itemsize} bytes; expected 2 or 4)")
    if reserved != 0:
        raise UserError(f"{path} has a damaged header (reserved field is {reserved}, expected 0)")
    try:
        fingerprint = fp.rstrip(b"\0").decode("ascii")
    except UnicodeDecodeError:
        raise UserError(f"{path} has a damaged header (the tokenizer fingerprint is not ASCII)") from None
    held = (size - HEADER_BYTES) // itemsize
    if size - HEADER_BYTES != count * itemsize:
        what = "truncated" if held < count else "longer than its header says"
        raise UserError(
            f"{path} is {what}: header says {count} tokens, file holds {held}"
            + (" (and a partial token)" if (size - HEADER_BYTES) % itemsize else "")
        )
    return TokenFileHeader(version, _DTYPES[itemsize], count, vocab_size, fingerprint)


def read_token_file(path, *, check_ids: bool = True) -> tuple[np.ndarray, TokenFileHeader]:
    """(tokens, header): the tokens memory-mapped read-only, 1-D, dtype uint16
    or uint32. Raises UserError with one line if the file is missing, is not a
    token file, has an unknown version, its size disagrees with its header, or
    (check_ids, when the header records a vocabulary) it holds an id >= the
    vocabulary size: a model would index its embedding out of range."""
    header = read_token_header(path)
    if header.count == 0:  # mmap cannot map zero bytes
        return np.zeros(0, dtype=header.dtype), header
    try:
        tokens = np.memmap(os.fspath(path), dtype=header.dtype, mode="r", offset=HEADER_BYTES, shape=(header.count,))
    except (OSError, ValueError) as e:
        raise UserError(f"cannot map token file {os.fspath(path)}: {getattr(e, 'strerror', None) or e}") from None
    if check_ids and header.vocab_size:
        check_token_ids(tokens, header.vocab_size, os.fspath(path), "its header's vocabulary")
    return tokens, header


CHECK_CHUNK = 1 << 24  # tokens per step of check_token_ids: 32-64 MB of the file at a time


def max_token_id(tokens, chunk: int = CHECK_CHUNK) -> int:
    """The largest id in a (memory-mapped) token array, read `chunk` tokens at a
    time so memory stays bounded whatever the file size; -1 if empty."""
    top = -1
    for i in range(0, len(tokens), chunk):
        top = max(top, int(np.max(tokens[i : i + chunk])))
    return top


def check_token_ids(
    tokens, vocab_size: int, path: str = "the dataset", against: str = "the vocabulary", chunk: int = CHECK_CHUNK
) -> None:
    """UserError (one line: the file, the first bad id and where, the vocabulary)
    if any id is >= vocab_size. One pass over the file, `chunk` tokens at a time."""
    for i in range(0, len(tokens), chunk):
        part = np.asarray(tokens[i : i + chunk])
        if part.size and int(part.max()) >= vocab_size:
            pos = int(np.argmax(part >= vocab_size))
            raise UserError(
                f"{path} holds token id {int(part[pos])} at position {i + pos}, but {against} has "
                f"{vocab_size} ids (0..{vocab_size - 1}): the file is damaged or was made with "
                f"another tokenizer (re-run `gradcraft tokenize`)"
            )
