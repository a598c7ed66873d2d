"""Tokenizer memory is bounded whatever the line length, and chunking changes nothing.

A file with no newline used to be one chunk: counting and encoding held every piece of the whole
file at once, and `--sample_mb` took the whole file. Files are now cut after a newline, else
between a visible ASCII character and a space (exact: no gpt2/gpt4 piece spans either point),
else hard at a UTF-8 character boundary; see pretokenize.next_cut."""

import random
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gradcraft.tokenizer import train
from gradcraft.tokenizer.parallel import encode_chunks, plan_chunks, sample_chunks
from gradcraft.tokenizer.pretokenize import compile_pattern, next_cut, split_pieces, split_text

ALPHABET = list("abcXYZ019 \n\t\r.,;'\"()-_=+#") + [
    "'s",
    "'ll",
    "  ",
    "   ",
    "\n\n",
    " \n",
    "é",
    "中文",
    "\u00a0",
    "\u3000",
    "\r\n",
    "\x1c",
    "123456",
]


def _random_text(rng, n):
    return "".join(rng.choice(ALPHABET) for _ in range(n))


def _words(rng, n_bytes):
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(3000)]
    seps = [" ", " ", " ", ", ", ". ", "; ", " (", ") ", " = ", " 123 ", ' "', '" ']
    out, size = [], 0
    while size < n_bytes:
        w = rng.choice(words) + rng.choice(seps)
        out.append(w)
        size += len(w)
    return "".join(out)[:n_bytes]


@pytest.mark.parametrize("pattern", ["gpt2", "gpt4"])
def test_exact_cuts_give_the_pieces_of_one_pass(pattern):
    """Fuzz: pieces of the parts, concatenated == pieces of the whole text, i.e. no pre-token spans
    a cut and none is changed by it (ASCII fast path and the full `regex` pattern both)."""
    rng = random.Random(1)
    rx = compile_pattern(pattern)
    n_cuts = 0
    for trial in range(300):
        text = _random_text(rng, rng.randint(1, 400))
        if trial % 3 == 0:
            text = text.encode("ascii", "ignore").decode()  # the `re` ASCII patterns
        step = rng.randint(1, 40)
        parts = split_text(text, pattern, step)  # exact cuts only
        assert "".join(parts) == text
        n_cuts += len(parts) - 1
        got = [p for part in parts for p in split_pieces(part, rx)]
        assert got == split_pieces(text, rx), (text, step, parts)
    assert n_cuts > 300  # the fuzz did cut


@pytest.mark.parametrize("pattern", ["gpt2", "gpt4"])
def test_hard_cuts_bound_every_part_and_keep_the_text(pattern):
    rng = random.Random(2)
    rx = compile_pattern(pattern)
    for _ in range(200):
        text = _random_text(rng, rng.randint(1, 400))
        step = rng.randint(1, 40)
        parts = split_text(text, pattern, step, hard=True)
        assert "".join(parts) == text
        assert all(len(p) <= 2 * step for p in parts)
        # Where every cut is a LINE_CUT or SPACE_CUT point, the pieces are exactly those of one pass.
        ends = np.cumsum([len(p) for p in parts])[:-1]
        if all(
            text[e - 1] == "\n"
            and "!" <= text[e - 2] <= "~"
            and "!" <= text[e] <= "~"
            or "!" <= text[e - 1] <= "~"
            and text[e] == " "
            for e in ends
        ):
            assert [p for part in parts for p in split_pieces(part, rx)] == split_pieces(text, rx)
    # No cut point at all: a hard cut, after at most 2 * step characters.
    assert next_cut("x" * 100, 0, 100, 10) == 20
    # Bytes: never inside a UTF-8 sequence.
    data = "é".encode() * 50
    cut = next_cut(data, 0, len(data), 5)
    assert cut <= 10 and data[cut] & 0xC0 != 0x80


def test_chunked_file_encoding_equals_one_pass(tmp_path):
    """A one-line file, cut into small chunks (space cuts only: no newline), encodes to exactly the
    tokens of one pass over the whole text; every chunk is bounded."""
    rng = random.Random(3)
    text = _words(rng, 400_000) + " tail é中文 " + _random_text(rng, 2000).replace("\n", " ")
    path = tmp_path / "one.txt"
    path.write_text(text, encoding="utf-8")
    tok = train([text[:100_000]], vocab_size=600, pattern="gpt4", special_tokens=[])
    chunks = plan_chunks([str(path)], "gpt4", chunk_bytes=10_000)
    assert len(chunks) > 20 and all(e - s <= 20_000 for _, _, s, e in chunks)
    got = np.concatenate([arr for _, arr in encode_chunks(tok, chunks, workers=1, dtype=np.uint32)])
    assert got.tolist() == tok.encode_ordinary(text)


def test_train_api_counts_long_texts_in_parts_with_the_same_result():
    rng = random.Random(4)
    text = _words(rng, 300_000)
    T = sys.modules["gradcraft.tokenizer.train"]
    whole = train([text], vocab_size=400, pattern="gpt4", special_tokens=[])
    old = T.COUNT_PART
    try:
        T.COUNT_PART = 1000
        parts = train([text], vocab_size=400, pattern="gpt4", special_tokens=[])
    finally:
        T.COUNT_PART = old
    assert parts.fingerprint == whole.fingerprint


def test_sample_chunks_honours_the_budget_in_bytes(tmp_path):
    rng = random.Random(5)
    path = tmp_path / "one.txt"
    path.write_text(_words(rng, 300_000))
    chunks = plan_chunks([str(path)], "gpt4", chunk_bytes=50_000)
    for budget in (1, 1000, 60_000, 123_456, 10**9):
        picked = sample_chunks(chunks, budget, seed=0, chunk_bytes=50_000)
        size = sum(e - s for _, _, s, e in picked)
        assert size <= budget + 1 and (size >= min(budget, 300_000) // 2 or budget < 10)
        assert picked == sorted(picked) and picked == sample_chunks(chunks, budget, seed=0, chunk_bytes=50_000)
    whole = sample_chunks(chunks, 10**9)
    assert sum(e - s for _, _, s, e in whole) == 300_000


CHILD = textwrap.dedent("""
    import resource, subprocess, sys
    r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
    print(r.returncode)
    print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
    sys.stdout.write(r.stdout + r.stderr)
""")


def _tokenize_peak_rss(data_dir, out, sample_mb):
    """Run `gradcraft tokenize` in a subprocess; (peak RSS in bytes of it and its workers, output)."""
    cmd = [
        sys.executable,
        "-m",
        "gradcraft.cli.main",
        "tokenize",
        "--data_dir",
        str(data_dir),
        "--output_path",
        str(out),
        "--vocab_size",
        "1000",
        "--sample_mb",
        str(sample_mb),
        "--quiet",
        "--workers",
        "2",
    ]
    # (a guard against a hang, not a time limit: a loaded 2-core machine running two suites at once
    # took minutes over what takes seconds alone)
    r = subprocess.run([sys.executable, "-c", CHILD, *cmd], capture_output=True, text=True, timeout=1200)
    code, peak, output = r.stdout.split("\n", 2)
    assert code == "0", output + r.stderr
    return int(peak), output


def test_single_line_file_tokenizes_in_bounded_memory_and_sample_mb_is_bytes(tmp_path):
    """16 MB on one line (eight of the 2 MiB chunks a line is cut into). Read as one chunk, this was
    ~13 B of RSS per input byte on this text (331 MB peak for 20 MB; 140 B/B reported on other text)
    and the vocabulary was learned on all of it whatever --sample_mb. Bound asserted: peak RSS
    growth over a run on a tiny file < 3 bytes per input byte (48 MB here)."""
    rng = random.Random(6)
    tiny, big = tmp_path / "tiny", tmp_path / "big"
    tiny.mkdir()
    big.mkdir()
    (tiny / "a.txt").write_text(_words(rng, 5_000))
    n = 16_000_000
    (big / "one.txt").write_text(_words(rng, n))
    base, _ = _tokenize_peak_rss(tiny, tmp_path / "o1" / "t.bin", 2)
    peak, output = _tokenize_peak_rss(big, tmp_path / "o2" / "t.bin", 2)
    growth = peak - base
    assert growth < 3 * n, f"peak RSS {peak / 1e6:.0f} MB, {growth / n:.1f} B per input byte over {base / 1e6:.0f} MB"
    learned = float(re.search(r"learned on ([0-9.]+) MB", output).group(1))
    assert 1.0 <= learned <= 2.0 + 2 * (1 << 20) / 1e6, output  # the budget, within one chunk (<= 2 MiB)
    assert "16.00 MB ->" in output
