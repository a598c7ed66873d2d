"""K2 interop (docs/k2.md): a small synthetic K2 model and tokenizer, written by the test-side writers of
tests/k2_reference.py, imported; logits against K2's math in NumPy, ids against K2's tokenizer rules,
export back bit-exactly, corrupted files refused in one line, training resumed from K2's step."""

import json
import os
import struct

import numpy as np
import pytest

import k2_reference as ref
from gradcraft.cli.main import main
from cli_helpers import run_cli

HEADER = dict(step=1234, vocab_size=0, d_model=16, num_heads=2, num_layers=2, d_ff=12, max_len=24)
CORPUS = (
    "The quick brown fox — it's “quoted” and don't stop. Ünïcödé façade naïve Ærø, Ελληνικά κείμενα, "
    "русский текст, עברית ערבית عربي, हिन्दी, Tiếng Việt, ひらがな カタカナ, 漢字混じり, 한국어 문장, "
    "１２３ 1234567 x=42;\ty\t\tz  spaced   out\n\nnew\r\nlines 😀🎉 ×÷ «ª» ½ "
    "'tis the 'LL\u00a0nbsp\u3000ideo\u2003em "
)
TEXTS = [
    CORPUS,
    "",
    " ",
    "  \n ",
    "abc  ",
    "'",
    "''a",
    "'ab'c",
    "12345678",
    "<|endoftext|>x<|im_start|>",
    "<|im_end|><tool_call></tool_call> hi<|endoftext|",
    "a\u2028b\u205fc\u1680d\x0b\x0ce",
    "ß" * 40,
    "ͰͱϿЀӿ ְ ঀ Ḁỿぁヿ㐀鿿가힣豈﫿 ﬀ",
    "x" * 300 + " " * 5 + "1" * 7,
]


@pytest.fixture(scope="module")
def k2_files(tmp_path_factory):
    """K2's files for a small model: latest.ckpt, tokenizer.bbpe, vocab.json, merges.txt."""
    folder = tmp_path_factory.mktemp("k2")
    merges = ref.train_merges((CORPUS * 2).encode(), 120)
    specials = {s: 256 + len(merges) + k for k, s in enumerate(ref.SPECIALS)}
    header = dict(HEADER, vocab_size=256 + len(merges) + len(specials))
    params = ref.random_params(header)
    (folder / "latest.ckpt").write_bytes(ref.tfckpt_file(header, params))
    (folder / "tokenizer.bbpe").write_bytes(ref.bbpe_file(merges, specials))
    vocab, merges_txt = ref.human_readable(merges)
    (folder / "vocab.json").write_text(vocab, encoding="utf-8")
    (folder / "merges.txt").write_text(merges_txt, encoding="utf-8")
    return {"dir": folder, "header": header, "params": params, "tok": ref.RefTokenizer(merges, specials)}


@pytest.fixture(scope="module")
def imported(k2_files, tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "k2"
    d = k2_files["dir"]
    assert (
        main(
            [
                str(a)
                for a in [
                    "import",
                    "--format",
                    "k2",
                    "--checkpoint",
                    d / "latest.ckpt",
                    "--tokenizer",
                    d / "tokenizer.bbpe",
                    "--model_dir",
                    run,
                ]
            ]
        )
        == 0
    )
    return run


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_imported_logits_equal_k2_numpy(k2_files, imported, device):
    import gradcraft as gc
    from gradcraft.device import is_available
    from gradcraft.inference.text import load_model, paths_from_model_dir

    if not is_available(device):
        pytest.skip("needs CuPy and an NVIDIA GPU")
    vocab, config, weights = paths_from_model_dir(str(imported))
    model, metadata = load_model(config, weights, device=device)
    model.eval()
    ids = np.random.default_rng(1).integers(0, k2_files["header"]["vocab_size"], size=(2, 24))
    ours = model(gc.tensor(ids, device=device)).numpy()
    theirs = ref.forward(k2_files["header"], k2_files["params"], ids)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5 * np.abs(theirs).max())
    from gradcraft.tokenizer import load_tokenizer

    assert metadata["tokenizer_fingerprint"] == load_tokenizer(vocab).fingerprint


def test_generate_from_imported_run(k2_files, imported, capsys):
    """`generate` on the folder: K2's tokenizer for the prompt, K2's greedy next tokens."""
    status, out, err = run_cli(
        ["generate", "--model_dir", imported, "--prompt", "The quick", "--max_tokens", "4"], capsys
    )
    assert status == 0, err
    tok, h, p = k2_files["tok"], k2_files["header"], k2_files["params"]
    ids = tok.encode(b"The quick")
    for _ in range(4):
        ids.append(int(ref.forward(h, p, np.array([ids]))[0, -1].argmax()))
    expected = b"".join(tok.tokens[i] for i in ids[-4:] if i < len(tok.tokens)).decode("utf-8", "replace")
    assert out.rstrip("\n").endswith(expected.rstrip("\n"))


def test_export_round_trips_bit_exactly(k2_files, imported, tmp_path, capsys):
    out = tmp_path / "back"
    status, _, err = run_cli(["export", "--model_dir", imported, "--format", "k2", "--out", out], capsys)
    assert status == 0, err
    for name in ("latest.ckpt", "tokenizer.bbpe", "vocab.json", "merges.txt"):
        assert (out / name).read_bytes() == (k2_files["dir"] / name).read_bytes(), name


@pytest.mark.parametrize("source", ["tokenizer.bbpe", "merges.txt", "vocab.json"])
def test_tokenizer_ids_equal_k2(k2_files, source):
    from gradcraft.tokenizer import load_tokenizer

    tok = load_tokenizer(str(k2_files["dir"] / source))
    reference = k2_files["tok"]
    for text in TEXTS:
        expected = reference.encode(text.encode())
        assert tok.encode(text) == expected, text
        assert tok.decode_bytes(expected) == text.encode()
    rng = np.random.default_rng(0)
    alphabet = list(CORPUS) + ["<|im_end|>", "'", "  ", "\n"]
    for _ in range(200):
        text = "".join(rng.choice(alphabet, size=int(rng.integers(0, 30))))
        assert tok.encode(text) == reference.encode(text.encode()), text
    for data in (
        b"ab\xc3(\xff\xaa\xa0x",
        b"\xc1\x81bc \xe0\x80\x80\xed\xa0\x80z",
        b"\xf5\x80\x80\x80q\x80'\xc2",
        CORPUS.encode()[:-3] + b"\xe2\x82",
    ):  # invalid UTF-8: K2 reads it leniently
        assert tok.encode_bytes(data) == reference.encode(data), data
        assert tok.decode_bytes(tok.encode_bytes(data)) == data


def test_k2_preset_is_k2s_architecture():
    """k2-83m: K2's shapes, parameter for parameter (82.9M), and K2's math (eps, beta gate, MLP biases)."""
    from gradcraft.models import Transformer
    from gradcraft.models.config import ModelConfig, preset
    from gradcraft.models.k2 import check_k2_config, config_from_header

    big = preset("k2-83m")
    big_header = dict(
        vocab_size=big.vocab_size,
        d_model=big.dim,
        num_heads=big.n_heads,
        num_layers=big.n_layers,
        d_ff=big.ffn_dim,
        max_len=big.seq_len,
    )
    assert sum(int(np.prod(s)) for _, s in ref.param_list(big_header)) == 82_892_796
    check_k2_config(big)
    small = config_from_header(dict(HEADER, vocab_size=300))
    assert Transformer(small).num_parameters() == sum(
        int(np.prod(s)) for _, s in ref.param_list(dict(HEADER, vocab_size=300))
    )
    assert (small.norm_eps, small.learned_beta, small.mlp_bias, small.bias) == (1e-5, True, True, False)
    assert ModelConfig(bias=False).mlp_bias is False and ModelConfig().mlp_bias is True


def test_label_smoothing_matches_torch():
    """The loss of K2's recipe (label smoothing 0.05) over a padded vocabulary, against torch."""
    torch = pytest.importorskip("torch")
    import gradcraft as gc
    from gradcraft.models import Transformer
    from gradcraft.models.k2 import config_from_header

    model = Transformer(config_from_header(dict(HEADER, vocab_size=100), dropout=0.0))
    ids = np.random.default_rng(0).integers(0, 100, size=(2, 9))
    logits, loss = model(gc.tensor(ids[:, :-1]), gc.tensor(ids[:, 1:]), label_smoothing=0.05)
    expected = torch.nn.functional.cross_entropy(
        torch.tensor(logits.numpy()).reshape(-1, 100), torch.tensor(ids[:, 1:]).reshape(-1), label_smoothing=0.05
    )
    np.testing.assert_allclose(loss.item(), expected.item(), rtol=1e-5)


def test_tokenize_and_resume_from_k2_step(k2_files, imported, tmp_path, capsys):
    """A new corpus through K2's tokenizer, then `train --resume` goes on from K2's step with its recipe."""
    import shutil

    from gradcraft.data.tokenfile import read_token_file
    from gradcraft.tokenizer import load_tokenizer

    run = tmp_path / "k2"
    shutil.copytree(imported, run)
    raw = tmp_path / "raw"
    raw.mkdir()
    docs = [CORPUS[i:] + "<|im_end|> tail" for i in range(0, 60, 7)]
    for i, doc in enumerate(docs):
        (raw / f"d{i}.txt").write_text(doc, encoding="utf-8")
    tokens = tmp_path / "tokens.bin"
    status, _, err = run_cli(
        [
            "tokenize",
            "--data_dir",
            raw,
            "--output_path",
            tokens,
            "--vocab_path",
            k2_files["dir"] / "tokenizer.bbpe",
            "--workers",
            "1",
            "--quiet",
        ],
        capsys,
    )
    assert status == 0, err
    ids, header = read_token_file(str(tokens))
    eot = k2_files["tok"].specials["<|endoftext|>"]
    expected = [t for doc in docs for t in [eot] + k2_files["tok"].encode(doc.encode())]
    assert ids.tolist() == expected
    assert header.fingerprint == load_tokenizer(str(run / "gradcraft_tokenizer.json")).fingerprint

    step = k2_files["header"]["step"]
    status, _, err = run_cli(
        [
            "train",
            "--dataset",
            tokens,
            "--model_dir",
            run,
            "--resume",
            "--steps",
            step + 2,
            "--batch_size",
            "2",
            "--no_progress",
            "--log",
            "csv",
        ],
        capsys,
    )
    assert status == 0, err
    assert f"(step {step})" in err
    train_config = json.loads((run / "train_config.json").read_text())
    recipe = (train_config["label_smoothing"], train_config["sampling"], train_config["grad_clip"])
    assert recipe == (0.05, "random", 1.0)
    assert json.loads((run / "gradcraft_config.json").read_text())["dropout"] == 0.1
    assert os.path.isdir(run / "checkpoints" / f"step_{step + 2:08d}")
    lrs = [float(line.split(",")[3]) for line in (run / "training_log.csv").read_text().splitlines()[1:]]
    assert lrs[0] == pytest.approx(3e-4 / 100)  # warmup again from K2's step: fresh AdamW moments

    other = tmp_path / "other.bin"  # a corpus made with another tokenizer is refused: no silent garbage
    status, _, err = run_cli(
        [
            "tokenize",
            "--data_dir",
            raw,
            "--output_path",
            other,
            "--vocab_size",
            "300",
            "--workers",
            "1",
            "--quiet",
            "--vocab_path",
            tmp_path / "own.json",
        ],
        capsys,
    )
    assert status == 0, err
    status, _, err = run_cli(
        ["train", "--dataset", other, "--model_dir", run, "--resume", "--steps", step + 4, "--no_progress"], capsys
    )
    assert status == 2 and err.count("\n") == 1 and err.startswith("error: ")


def _damage(k2_files, tmp_path):
    """name -> (checkpoint bytes, tokenizer file name, tokenizer bytes): each broken in one way."""
    ckpt = (k2_files["dir"] / "latest.ckpt").read_bytes()
    bbpe = (k2_files["dir"] / "tokenizer.bbpe").read_bytes()
    name_at = 40 + 4
    renamed = ckpt[:name_at] + b"embedding.tokXemb" + ckpt[name_at + 17 :]
    size_at = name_at + len(b"embedding.token_emb")
    resized = ckpt[:size_at] + struct.pack("<q", 5) + ckpt[size_at + 8 :]
    header = bytearray(ckpt)
    struct.pack_into("<i", header, 8 + 4 * 4, 3)  # num_layers 3: the parameter count no longer fits
    heads = bytearray(ckpt)
    struct.pack_into("<i", heads, 8 + 3 * 4, 3)  # num_heads 3 does not divide d_model 16
    small_specials = ref.bbpe_file(k2_files["tok"].merges, {"<|endoftext|>": 256 + len(k2_files["tok"].merges)})
    return {
        "truncated-header": (ckpt[:30], "tokenizer.bbpe", bbpe),
        "truncated-data": (ckpt[:-10], "tokenizer.bbpe", bbpe),
        "trailing-bytes": (ckpt + b"\0", "tokenizer.bbpe", bbpe),
        "bad-magic": (b"TFCKPT2\n" + ckpt[8:], "tokenizer.bbpe", bbpe),
        "wrong-name": (renamed, "tokenizer.bbpe", bbpe),
        "wrong-size": (resized, "tokenizer.bbpe", bbpe),
        "wrong-count": (bytes(header), "tokenizer.bbpe", bbpe),
        "bad-heads": (bytes(heads), "tokenizer.bbpe", bbpe),
        "tokenizer-truncated": (ckpt, "tokenizer.bbpe", bbpe[:-3]),
        "tokenizer-mismatch": (ckpt, "tokenizer.bbpe", small_specials),
        "tokenizer-not-k2": (ckpt, "tokenizer.bbpe", b"BBPEV1\0\0" + struct.pack("<III", 1, 300, 2)),
        "merges-without-vocab": (ckpt, "merges.txt", b"#version: 0.2\nq q\n"),
    }


def test_damaged_files_give_one_line(k2_files, tmp_path, capsys):
    for case, (ckpt, tok_name, tok_bytes) in _damage(k2_files, tmp_path).items():
        folder = tmp_path / case
        folder.mkdir()
        (folder / "latest.ckpt").write_bytes(ckpt)
        (folder / tok_name).write_bytes(tok_bytes)
        status, _, err = run_cli(
            [
                "import",
                "--format",
                "k2",
                "--checkpoint",
                folder / "latest.ckpt",
                "--tokenizer",
                folder / tok_name,
                "--model_dir",
                folder / "run",
            ],
            capsys,
        )
        assert status == 2 and err.startswith("error: ") and err.count("\n") == 1, (case, err)
        assert not (folder / "run").exists(), case


def test_import_refuses_an_existing_run(k2_files, imported, capsys):
    d = k2_files["dir"]
    status, _, err = run_cli(
        [
            "import",
            "--format",
            "k2",
            "--checkpoint",
            d / "latest.ckpt",
            "--tokenizer",
            d / "tokenizer.bbpe",
            "--model_dir",
            imported,
        ],
        capsys,
    )
    assert status == 2 and "--overwrite" in err
    status, _, err = run_cli(["export", "--model_dir", imported, "--format", "k3", "--out", d / "x"], capsys)
    assert status == 2 and err.count("\n") == 1
