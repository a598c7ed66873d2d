"""`gradcraft tokenize` end to end: token files decode back to the inputs,
and every bad input is one `error:` line, exit status 2, nothing written."""

import os
import subprocess
import sys

import numpy as np
import pytest

import gradcraft.cli.main as cli_main
from gradcraft.data.tokenfile import read_token_file
from gradcraft.tokenizer import Tokenizer
from tokenizer_corpus import make_corpus


@pytest.fixture(autouse=True)
def only_tokenize(monkeypatch):
    # Test this subcommand alone, whatever state the others are in.
    monkeypatch.setattr(cli_main, "SUBCOMMANDS", {"tokenize": "tokenize"})


def run(*argv):
    try:
        return cli_main.main(["tokenize", "--quiet", *map(str, argv)])
    except SystemExit as e:  # a flag out of range is refused while parsing (argparse exits)
        return e.code


@pytest.fixture
def data_dir(tmp_path):
    d = tmp_path / "raw"
    (d / "sub").mkdir(parents=True)
    docs = {}
    for k, text in enumerate(make_corpus(n_docs=8)):
        p = d / ("sub" if k % 2 else "") / f"doc{k}.txt"
        docs[p] = text.encode("utf-8")
    docs[d / "bad_utf8.txt"] = b"caf\xe9 \xff\xfe bytes \x80\n"
    docs[d / "empty.txt"] = b""
    docs[d / "ignored.md"] = b"not read"
    for p, b in docs.items():
        p.write_bytes(b)
    return d


def documents(tokens: np.ndarray, tok: Tokenizer) -> list[bytes]:
    """Split a token stream at the separators (each document is preceded by one)."""
    eot = tok.special_tokens["<|endoftext|>"]
    cuts = np.flatnonzero(tokens == eot)
    assert cuts.size and cuts[0] == 0
    bounds = list(cuts) + [tokens.size]
    return [tok.decode_bytes(tokens[a + 1 : b].tolist()) for a, b in zip(bounds, bounds[1:])]


def inputs(data_dir) -> list[bytes]:
    paths = sorted(p for p in data_dir.rglob("*.txt") if p.stat().st_size)
    return sorted(p.read_bytes() for p in paths)


def test_tokenize_round_trip(tmp_path, data_dir, capsys, monkeypatch):
    import gradcraft.data.prepare as prepare
    import gradcraft.tokenizer.parallel as parallel

    monkeypatch.setattr(prepare, "SMALL_INPUT", 0)  # use the worker processes even on tiny data
    monkeypatch.setattr(parallel, "CHUNK_BYTES", 300)
    out = tmp_path / "out" / "tokens.bin"
    assert run("--data_dir", data_dir, "--output_path", out, "--vocab_size", 400, "--workers", 2) == 0
    tok = Tokenizer.load(tmp_path / "out" / "tokenizer.json")
    tokens, header = read_token_file(out)
    assert header.fingerprint == tok.fingerprint and header.vocab_size == tok.vocab_size == 400
    assert tokens.dtype == np.uint16
    assert sorted(documents(np.asarray(tokens), tok)) == inputs(data_dir)
    summary = capsys.readouterr().out
    assert "bytes/token" in summary and "10 files" in summary and "2 workers" in summary


def test_val_split_and_reuse(tmp_path, data_dir, capsys):
    out = tmp_path / "tokens.bin"
    assert (
        run(
            "--data_dir",
            data_dir,
            "--output_path",
            out,
            "--vocab_size",
            300,
            "--val_fraction",
            0.25,
            "--pattern",
            "gpt2",
        )
        == 0
    )
    train_t, _ = read_token_file(out)
    val_t, _ = read_token_file(tmp_path / "tokens.val.bin")
    tok = Tokenizer.load(tmp_path / "tokenizer.json")
    train_docs, val_docs = documents(np.asarray(train_t), tok), documents(np.asarray(val_t), tok)
    assert len(val_docs) == 2  # round(0.25 * 9 non-empty documents)
    assert sorted(train_docs + val_docs) == inputs(data_dir)
    first = out.read_bytes()

    # Same command again: the vocabulary is reused and the split is the same.
    assert run("--data_dir", data_dir, "--output_path", out, "--vocab_size", 999, "--val_fraction", 0.25) == 0
    assert "reusing" in capsys.readouterr().err
    assert out.read_bytes() == first
    assert Tokenizer.load(tmp_path / "tokenizer.json").fingerprint == tok.fingerprint

    assert run("--data_dir", data_dir, "--output_path", out, "--vocab_size", 350, "--retrain") == 0
    assert Tokenizer.load(tmp_path / "tokenizer.json").vocab_size == 350


def test_extension_and_special_tokens(tmp_path, data_dir):
    out = tmp_path / "md.bin"
    assert (
        run(
            "--data_dir",
            data_dir,
            "--ext",
            ".md",
            "--output_path",
            out,
            "--vocab_size",
            300,
            "--special_tokens",
            "<|endoftext|>,<|pad|>",
        )
        == 0
    )
    tok = Tokenizer.load(tmp_path / "tokenizer.json")
    assert list(tok.special_tokens) == ["<|endoftext|>", "<|pad|>"]
    tokens, _ = read_token_file(out)
    assert documents(np.asarray(tokens), tok) == [b"not read"]


def error_case(tmp_path, capsys, *argv):
    before = set(tmp_path.rglob("*"))
    assert run(*argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err
    assert set(tmp_path.rglob("*")) == before  # nothing written
    return err


def test_errors(tmp_path, data_dir, capsys):
    out = tmp_path / "o" / "t.bin"
    assert "does not exist" in error_case(tmp_path, capsys, "--data_dir", tmp_path / "nope", "--output_path", out)
    assert "no *.py files" in error_case(tmp_path, capsys, "--data_dir", data_dir, "--ext", ".py", "--output_path", out)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "a.txt").write_bytes(b"")
    (empty / "b.txt").write_bytes(b"")
    assert "are empty" in error_case(tmp_path, capsys, "--data_dir", empty, "--output_path", out)
    assert "too small" in error_case(
        tmp_path, capsys, "--data_dir", data_dir, "--output_path", out, "--vocab_size", 256
    )
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert "not a directory" in error_case(tmp_path, capsys, "--data_dir", data_dir, "--output_path", blocker / "t.bin")
    assert "is a directory" in error_case(tmp_path, capsys, "--data_dir", data_dir, "--output_path", tmp_path)
    assert "val_fraction" in error_case(
        tmp_path, capsys, "--data_dir", data_dir, "--output_path", out, "--val_fraction", 1.5
    )
    bad_vocab = tmp_path / "v.json"
    bad_vocab.write_text("{oops")
    assert "not valid JSON" in error_case(
        tmp_path, capsys, "--data_dir", data_dir, "--output_path", out, "--vocab_path", bad_vocab
    )


def test_real_entry_point(tmp_path, data_dir):
    """The installed command, in a fresh process (workers forked from it)."""
    code = (
        "import sys, gradcraft.cli.main as m; m.SUBCOMMANDS = {'tokenize': 'tokenize'}; sys.exit(m.main(sys.argv[1:]))"
    )
    out = tmp_path / "t.bin"
    ok = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "tokenize",
            "--data_dir",
            str(data_dir),
            "--output_path",
            str(out),
            "--vocab_size",
            "300",
        ],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(
        [sys.executable, "-c", code, "tokenize", "--data_dir", str(tmp_path / "x")], capture_output=True, text=True
    )
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and bad.stderr.startswith("error:")
    assert os.path.exists(out)


def test_reused_vocabulary_brings_its_pattern(tmp_path, data_dir, monkeypatch):
    # A `none` vocabulary must never see a file cut into chunks, even though
    # --pattern defaults to gpt4 (chunk cuts are only safe for gpt2/gpt4).
    import gradcraft.tokenizer.parallel as parallel
    from gradcraft.tokenizer import train

    monkeypatch.setattr(parallel, "CHUNK_BYTES", 100)
    vocab = tmp_path / "none.json"
    train(make_corpus(n_docs=4), vocab_size=300, pattern="none").save(vocab)
    out = tmp_path / "t.bin"
    assert run("--data_dir", data_dir, "--output_path", out, "--vocab_path", vocab) == 0
    tok = Tokenizer.load(vocab)
    tokens, _ = read_token_file(out)
    eot = tok.special_tokens["<|endoftext|>"]
    expected = []
    for p in sorted(p for p in data_dir.rglob("*.txt") if p.stat().st_size):
        expected += [eot] + tok.encode_bytes(p.read_bytes())
    assert np.asarray(tokens).tolist() == expected


def test_prepare_dataset_is_the_library_function_behind_the_command(tmp_path, data_dir):
    from gradcraft.data.prepare import prepare_dataset
    from gradcraft.errors import UserError

    out = tmp_path / "lib" / "tokens.bin"
    summary = prepare_dataset(
        str(data_dir), str(out), vocab_size=300, val_fraction=0.25, progress=False, log=lambda message: None
    )
    tok = Tokenizer.load(tmp_path / "lib" / "tokenizer.json")
    train, _ = read_token_file(out)
    val, _ = read_token_file(tmp_path / "lib" / "tokens.val.bin")
    assert summary["tokens"] == {str(out): len(train), str(tmp_path / "lib" / "tokens.val.bin"): len(val)}
    assert summary["files"] == 10 and not summary["reused"] and tok.vocab_size == 300
    assert sorted(documents(np.concatenate([np.asarray(train), np.asarray(val)]), tok)) == inputs(data_dir)
    with pytest.raises(UserError, match="val_fraction"):
        prepare_dataset(str(data_dir), str(out), val_fraction=1.5, progress=False)
