"""Damaged token files give one `error:` line, never a traceback: bad header fields,
truncation, and token ids outside the vocabulary (which used to be an IndexError mid-training)."""

import struct
import subprocess
import sys

import numpy as np
import pytest

from gradcraft.data import tokenfile
from gradcraft.data.sampler import RandomWindows, SequentialEpochs, eval_batches
from gradcraft.data.tokenfile import HEADER_BYTES, check_token_ids, max_token_id, read_token_file, write_token_file
from gradcraft.errors import UserError


def _good(tmp_path, n=1000, vocab=64, name="t.bin"):
    path = tmp_path / name
    write_token_file(str(path), (np.arange(n) % vocab).astype(np.uint16), vocab_size=vocab, fingerprint="ab" * 8)
    return path


def _patch(path, offset, fmt, value):
    raw = bytearray(path.read_bytes())
    struct.pack_into(fmt, raw, offset, value)
    path.write_bytes(bytes(raw))


def _one_line(excinfo, *needles):
    msg = str(excinfo.value)
    assert "\n" not in msg
    for n in needles:
        assert n in msg, msg


def test_good_file_reads(tmp_path):
    tokens, header = read_token_file(_good(tmp_path))
    assert header.count == 1000 and header.vocab_size == 64 and header.fingerprint == "ab" * 8
    assert int(tokens.max()) == 63


def test_wrong_magic(tmp_path):
    path = _good(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[:8] = b"NOTTOKEN"
    path.write_bytes(bytes(raw))
    with pytest.raises(UserError) as e:
        read_token_file(path)
    _one_line(e, str(path), "bad magic")


def test_empty_and_short_files(tmp_path):
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    with pytest.raises(UserError, match="bad magic"):
        read_token_file(empty)
    short = tmp_path / "short.bin"
    short.write_bytes(_good(tmp_path).read_bytes()[:20])
    with pytest.raises(UserError) as e:
        read_token_file(short)
    _one_line(e, "truncated", "header needs 64 bytes")


def test_wrong_version_dtype_reserved_fingerprint(tmp_path):
    for offset, fmt, value, needle in [
        (8, "<I", 7, "version 7"),
        (12, "<I", 3, "token size 3"),
        (28, "<I", 5, "reserved"),
        (32, "B", 0xFF, "fingerprint"),
    ]:
        path = _good(tmp_path, name=f"h{offset}.bin")
        _patch(path, offset, fmt, value)
        with pytest.raises(UserError) as e:
            read_token_file(path)
        _one_line(e, str(path), needle)


def test_truncated_data_and_count_larger_than_data(tmp_path):
    path = _good(tmp_path)
    path.write_bytes(path.read_bytes()[: HEADER_BYTES + 999])  # 499 tokens and half of one
    with pytest.raises(UserError) as e:
        read_token_file(path)
    _one_line(e, "truncated", "header says 1000 tokens, file holds 499", "partial token")
    path = _good(tmp_path, name="c.bin")
    _patch(path, 16, "<Q", 1 << 40)  # a count far beyond the data
    with pytest.raises(UserError) as e:
        read_token_file(path)
    _one_line(e, "truncated", f"header says {1 << 40} tokens")
    path = _good(tmp_path, name="d.bin")
    _patch(path, 16, "<Q", 10)
    with pytest.raises(UserError, match="longer than its header says"):
        read_token_file(path)


def test_ids_out_of_range_named_with_file_id_and_vocab(tmp_path):
    path = _good(tmp_path)
    raw = bytearray(path.read_bytes())
    struct.pack_into("<H", raw, HEADER_BYTES + 2 * 777, 5000)
    path.write_bytes(bytes(raw))
    with pytest.raises(UserError) as e:
        read_token_file(path)
    _one_line(e, str(path), "token id 5000", "position 777", "64 ids")
    tokens, _ = read_token_file(path, check_ids=False)  # the check can be skipped explicitly
    assert int(tokens[777]) == 5000


def test_check_is_chunked_and_finds_the_first_bad_id():
    tokens = np.zeros(10_000, np.uint16)
    tokens[4321], tokens[9000] = 70, 99
    assert max_token_id(tokens, chunk=1000) == 99
    with pytest.raises(UserError, match="token id 70 at position 4321"):
        check_token_ids(tokens, 64, "x.bin", chunk=1000)
    check_token_ids(tokens, 100, "x.bin", chunk=1000)  # all below: fine
    assert max_token_id(np.zeros(0, np.uint16)) == -1


def test_samplers_check_against_the_model_vocabulary(tmp_path):
    path = tmp_path / "novocab.bin"
    write_token_file(str(path), (np.arange(500) % 50).astype(np.uint16), dtype=np.uint16)  # records no vocabulary
    tokens, header = read_token_file(path)
    assert header.vocab_size == 0
    for cls in (RandomWindows, SequentialEpochs):
        cls(tokens, 8, 2, vocab_size=50)
        with pytest.raises(UserError, match="token id 40 at position 40, but the model's vocabulary has 40 ids"):
            cls(tokens, 8, 2, vocab_size=40)
    with pytest.raises(UserError, match="validation split"):
        next(eval_batches(tokens, 8, 2, 2, vocab_size=10))


def test_train_cli_one_line_error_for_bad_ids(tmp_path):
    path = tmp_path / "bad.bin"
    ids = (np.arange(4000) % 64).astype(np.uint16)
    ids[1234] = 64  # one id == the vocabulary size
    write_token_file(str(path), ids, dtype=np.uint16, vocab_size=64)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gradcraft.cli.main",
            "train",
            "--dataset",
            str(path),
            "--model_dir",
            str(tmp_path / "run"),
            "--preset",
            "toy-v0",
            "--embed_dim",
            "32",
            "--num_heads",
            "2",
            "--num_layers",
            "1",
            "--seq_len",
            "16",
            "--batch_size",
            "2",
            "--steps",
            "2",
            "--no_progress",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    assert str(path) in lines[-1] and "token id 64" in lines[-1] and "64 ids" in lines[-1]


def test_check_chunk_constant_is_bounded():
    # 1 << 24 tokens of uint32 = 64 MB: the most the id check holds at once
    assert tokenfile.CHECK_CHUNK * 4 <= 64 << 20
