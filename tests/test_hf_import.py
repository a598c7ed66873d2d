"""`gradcraft import --format hf FOLDER --model_dir RUN`: a tiny random GPT-2, LLaMA and Mistral made
and saved by transformers (with a byte-level BPE tokenizer made by `tokenizers`), imported; our
forward against HF's on the same weights; then `train --resume` fine-tunes it on a corpus tokenized
with the imported tokenizer (nanoGPT's finetune_shakespeare flow)."""

import numpy as np
import pytest
from safetensors.numpy import load_file

import gradcraft as gc
from cli_helpers import run_cli

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

TEXT = [f"def reverse_string(s):\n    return s[::-1]  # {i} the quick brown fox\n" for i in range(40)]


def _save_tokenizer(folder) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(TEXT, trainer)
    tok.save(str(folder / "tokenizer.json"))
    return tok.get_vocab_size()


def _hf_model(family: str, vocab: int):
    torch.manual_seed(0)
    if family == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=vocab, n_positions=32, n_embd=32, n_layer=2, n_head=2)
        return transformers.GPT2LMHeadModel(cfg)
    common = dict(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        tie_word_embeddings=False,
    )
    if family == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**common))
    return transformers.MistralForCausalLM(transformers.MistralConfig(sliding_window=8, **common))


@pytest.mark.parametrize("family", ["gpt2", "llama", "mistral"])
def test_import_an_hf_folder_then_fine_tune(family, tmp_path, capsys):
    from gradcraft.inference.run_paths import find_model
    from gradcraft.inference.text import load_model

    src = tmp_path / "hf"
    src.mkdir()
    vocab = _save_tokenizer(src)
    hf = _hf_model(family, vocab).eval()
    hf.save_pretrained(str(src))
    if family == "gpt2":  # as OpenAI's own gpt2: pytorch_model.bin, names without the transformer. prefix
        (src / "model.safetensors").unlink()
        state = {k.removeprefix("transformer."): v for k, v in hf.state_dict().items() if not k.startswith("lm_")}
        torch.save(state, str(src / "pytorch_model.bin"))
    run = tmp_path / "run"
    status, out, err = run_cli(["import", "--format", "hf", src, "--model_dir", run], capsys)
    assert status == 0, err
    assert f"imported {src} ({family})" in out

    files = find_model(str(run))
    model, _ = load_model(files.config, files.weights)
    model.eval()
    ids = np.random.default_rng(0).integers(0, vocab, size=(2, 20))
    with gc.no_grad():
        ours = model(gc.tensor(ids)).numpy()
    with torch.no_grad():
        theirs = hf(torch.tensor(ids)).logits.numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)

    # fine-tune on a corpus tokenized with the imported tokenizer
    raw = tmp_path / "raw"
    raw.mkdir()
    for i, line in enumerate(TEXT):
        (raw / f"{i}.txt").write_text(line * 3)
    tokenize = ["tokenize", "--data_dir", raw, "--output_path", tmp_path / "tokens.bin"]
    tokenize += ["--vocab_path", run / "gradcraft_tokenizer.json", "--workers", "1"]
    status, _, err = run_cli(tokenize, capsys)
    assert status == 0, err
    before = load_file(str(run / "checkpoints" / "step_00000000" / "model.safetensors"))
    train = ["train", "--dataset", tmp_path / "tokens.bin", "--model_dir", run, "--resume", "--steps", "2"]
    status, _, err = run_cli(train + ["--batch_size", "2", "--max_lr", "1e-3", "--no_progress"], capsys)
    assert status == 0, err
    assert "resuming from" in err and "(step 0)" in err
    after = load_file(str(run / "checkpoints" / "step_00000002" / "model.safetensors"))
    assert before.keys() == after.keys() and any(not np.array_equal(before[k], after[k]) for k in before)


def test_import_refuses_what_it_cannot_read(tmp_path, capsys):
    status, _, err = run_cli(["import", "--format", "hf", tmp_path, "--model_dir", tmp_path / "run"], capsys)
    assert status == 2 and f"{tmp_path} has no config.json; an HF checkpoint folder holds" in err
    status, _, err = run_cli(["import", "--format", "hf", "--model_dir", tmp_path / "run"], capsys)
    assert status == 2 and "--format hf takes the HF checkpoint folder as its argument" in err
    (tmp_path / "config.json").write_text('{"model_type": "bert", "vocab_size": 10}')
    status, _, err = run_cli(["import", "--format", "hf", tmp_path, "--model_dir", tmp_path / "run"], capsys)
    assert status == 2 and "unsupported Hugging Face model_type 'bert'" in err
    assert not (tmp_path / "run").exists()
