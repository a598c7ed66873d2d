"""The run folder travels (its tokenizer inside) and exports to Hugging Face transformers."""

import contextlib
import io
import json
import os
import shutil
import types

import numpy as np
import pytest

import gradcraft as gc
from gradcraft.cli.main import main

SMALL = [
    "--embed_dim",
    "32",
    "--num_layers",
    "1",
    "--num_heads",
    "2",
    "--seq_len",
    "24",
    "--steps",
    "30",
    "--batch_size",
    "4",
    "--warmup_steps",
    "2",
    "--max_lr",
    "1e-2",
    "--no_progress",
]
FAMILIES = {"llama": ["--preset", "toy-v0"], "gpt2": ["--preset", "mallmoc", "--ffn_dim", "64"]}
TEXT = "def reverse_string(s):\n    return s[::-1]\n# ünïcödé ✓ 漢字 🙂\n"


def _tokenize(data):
    raw = data / "raw"
    raw.mkdir(parents=True)
    for i in range(20):
        (raw / f"f{i}.txt").write_text(TEXT * 3 + f"x = {i}\n")
    assert (
        main(
            [
                "tokenize",
                "--data_dir",
                str(raw),
                "--output_path",
                str(data / "tokens.bin"),
                "--vocab_size",
                "300",
                "--workers",
                "1",
            ]
        )
        == 0
    )
    return data / "tokens.bin"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One tokenized corpus and a tiny trained run of each HF family."""
    root = tmp_path_factory.mktemp("runfolder")
    tokens = _tokenize(root / "data")
    for name, preset in FAMILIES.items():
        assert main(["train", "--dataset", str(tokens), "--model_dir", str(root / name), *preset, *SMALL]) == 0
    return root


def _cli(*args, cwd=None):
    """`gradcraft <args>` run from the folder `cwd`, in this process (main(), as the command calls it),
    its output captured: the same run without an interpreter's start."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd or os.getcwd()), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main([str(a) for a in args])
        except SystemExit as e:
            status = e.code
    return types.SimpleNamespace(returncode=status, stdout=out.getvalue(), stderr=err.getvalue())


def _generate(model_dir, cwd):
    proc = _cli(
        "generate",
        "--model_dir",
        str(model_dir),
        "--prompt",
        "def ",
        "--max_tokens",
        "12",
        "--temp",
        "1.0",
        "--seed",
        "3",
        cwd=cwd,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _one_line(proc, needle):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], (
        proc.stderr
    )


def test_run_folder_holds_its_tokenizer_and_generates_after_a_move(tmp_path):
    tokens = _tokenize(tmp_path / "data")
    run = tmp_path / "runs" / "mine"
    # relative paths, as a user types them: the run's train_config.json records "data/tokens.bin"
    proc = _cli(
        "train", "--dataset", "data/tokens.bin", "--model_dir", "runs/mine", "--preset", "toy-v0", *SMALL, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    from gradcraft.tokenizer import Tokenizer
    from gradcraft.data.tokenfile import read_token_header

    copy = Tokenizer.load(run / "gradcraft_tokenizer.json")
    assert copy.fingerprint == read_token_header(str(tokens)).fingerprint
    before = _generate(run, cwd=tmp_path)
    assert len(before) > 4

    moved = tmp_path / "elsewhere" / "moved_run"
    moved.parent.mkdir()
    shutil.move(str(run), str(moved))
    shutil.rmtree(tmp_path / "data")
    away = tmp_path / "somewhere_else"
    away.mkdir()
    assert _generate(moved, cwd=away) == before
    assert _generate(os.path.relpath(moved, away), cwd=away) == before


def test_old_run_folder_finds_its_tokenizer_through_the_dataset(runs, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(runs / "llama", old)
    for name in ("gradcraft_tokenizer.json", "tokenizer.json", "tokenizer_config.json"):
        (old / name).unlink()
    assert _generate(old, cwd=tmp_path) == _generate(runs / "llama", cwd=tmp_path)


def test_a_tokenizer_that_did_not_make_the_dataset_is_not_copied(tmp_path):
    tokens = _tokenize(tmp_path / "data")
    from gradcraft.tokenizer import train as train_tokenizer

    train_tokenizer(["something else entirely " * 50], vocab_size=300).save(str(tmp_path / "data" / "tokenizer.json"))
    proc = _cli("train", "--dataset", str(tokens), "--model_dir", str(tmp_path / "run"), "--preset", "toy-v0", *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert "is not the tokenizer that made" in proc.stderr
    assert not (tmp_path / "run" / "gradcraft_tokenizer.json").exists()


def _our_logits(model_dir, ids):
    from gradcraft.inference.text import load_model, paths_from_model_dir

    _, config, weights = paths_from_model_dir(str(model_dir))
    model, _ = load_model(config, weights)
    model.eval()
    with gc.no_grad():
        return model(gc.tensor(np.array([ids]))).numpy()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_hf_export_opens_in_transformers_with_our_logits_and_ids(runs, tmp_path, family):
    import torch
    import transformers

    out = tmp_path / "hf"
    proc = _cli("export", "--model_dir", str(runs / family), "--format", "hf", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    expected = "GPT2LMHeadModel" if family == "gpt2" else "LlamaForCausalLM"
    assert json.loads((out / "config.json").read_text())["architectures"] == [expected]

    from gradcraft.tokenizer import Tokenizer

    ours = Tokenizer.load(runs / family / "gradcraft_tokenizer.json")
    text = TEXT + "<|endoftext|>x = 3"
    ids = ours.encode(text, allowed_special="all")
    for folder in (out, runs / family):  # the export, and the run folder's tokenizer as it is
        hf_tok = transformers.AutoTokenizer.from_pretrained(str(folder))
        assert hf_tok(text)["input_ids"] == ids
        assert hf_tok.decode(ids) == text

    hf = transformers.AutoModelForCausalLM.from_pretrained(str(out), attn_implementation="eager").eval()
    assert type(hf).__name__ == expected
    with torch.no_grad():
        theirs = hf(torch.tensor([ids[:20]])).logits.numpy()
    np.testing.assert_allclose(_our_logits(runs / family, ids[:20]), theirs, rtol=1e-4, atol=1e-4)
    # gradcraft reads the HF folder back: the same greedy text
    assert _generate(out, cwd=tmp_path) == _generate(runs / family, cwd=tmp_path)


def test_safetensors_export_generates_the_same_text(runs, tmp_path):
    out = tmp_path / "st"
    proc = _cli("export", "--model_dir", str(runs / "gpt2"), "--format", "safetensors", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(out)) == ["config.json", "gradcraft_tokenizer.json", "model.safetensors"]
    assert _generate(out, cwd=tmp_path) == _generate(runs / "gpt2", cwd=tmp_path)


def test_new_layout_names_are_read_first(runs, tmp_path):
    """gradcraft_config.json / gradcraft_model.safetensors (our files beside HF's) win over config.json."""
    from gradcraft.inference.text import load_model
    from gradcraft.training.trainer import save_weights

    run = tmp_path / "renamed"
    shutil.copytree(runs / "llama", run)
    model, metadata = load_model(str(run / "gradcraft_config.json"), str(run / "model.safetensors"))
    save_weights(model, str(run / "gradcraft_model.safetensors"), metadata["tokenizer_fingerprint"])
    (run / "config.json").write_text("{}")  # something else under HF's names: not read
    (run / "model.safetensors").write_bytes(b"not weights")
    assert _generate(run, cwd=tmp_path) == _generate(runs / "llama", cwd=tmp_path)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_run_folder_opens_in_transformers_as_is(runs, family):
    """The run folder itself, as `gradcraft train` leaves it: AutoModelForCausalLM gives our logits
    (float32, CPU) and AutoTokenizer our ids; gradcraft's config sits beside HF's, the weights once."""
    import torch
    import transformers

    run = runs / family
    expected = "GPT2LMHeadModel" if family == "gpt2" else "LlamaForCausalLM"
    assert json.loads((run / "config.json").read_text())["architectures"] == [expected]
    assert "model_type" not in json.loads((run / "gradcraft_config.json").read_text())
    assert not (run / "gradcraft_model.safetensors").exists()  # no second copy of the weights

    from gradcraft.tokenizer import Tokenizer

    text = TEXT + "<|endoftext|>x = 3"
    ids = Tokenizer.load(run / "gradcraft_tokenizer.json").encode(text, allowed_special="all")
    assert transformers.AutoTokenizer.from_pretrained(str(run))(text)["input_ids"] == ids
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        str(run), attn_implementation="eager", torch_dtype=torch.float32
    ).eval()
    assert type(hf).__name__ == expected
    with torch.no_grad():
        theirs = hf(torch.tensor([ids[:20]])).logits.numpy()
    np.testing.assert_allclose(_our_logits(run, ids[:20]), theirs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_run_folder_weights_read_back_bit_exact(runs, family):
    """HF's layout is the only copy of the final weights: what the loader converts back is exactly
    the trained model (the last checkpoint holds it in our layout), in float32."""
    from safetensors.numpy import load_file
    from gradcraft.data.tokenfile import read_token_header
    from gradcraft.inference.text import load_model, paths_from_model_dir
    from gradcraft.training import checkpoint as ckpt

    run = runs / family
    _, config, weights = paths_from_model_dir(str(run))
    assert os.path.basename(config) == "gradcraft_config.json" and os.path.basename(weights) == "model.safetensors"
    model, metadata = load_model(config, weights)
    assert metadata["tokenizer_fingerprint"] == read_token_header(str(runs / "data" / "tokens.bin")).fingerprint
    trained = load_file(os.path.join(ckpt.list_checkpoints(str(run / "checkpoints"))[-1], "model.safetensors"))
    ours = ckpt.weights_to_numpy(model)
    assert sorted(ours) == sorted(trained)
    for name, value in ours.items():
        assert value.dtype == np.float32 and np.array_equal(value, trained[name]), name


def test_hf_layout_round_trip_is_bit_exact_for_every_family_hf_computes():
    from gradcraft.models import Transformer
    from gradcraft.models.hf import from_hf_state, hf_exact_family, to_hf_state
    from test_models import FAMILIES as MODEL_FAMILIES, randomize, small_config

    checked = 0
    for family in sorted(MODEL_FAMILIES):
        cfg = small_config(family)
        if hf_exact_family(cfg) is None:
            continue
        model = Transformer(cfg)
        randomize(model, seed=3)
        ours = {k: v.numpy() for k, v in model.state_dict().items()}
        back = from_hf_state(cfg, to_hf_state(model))
        assert sorted(back) == sorted(ours)
        for name in ours:
            assert np.array_equal(back[name], ours[name]), (family, name)
        checked += 1
    assert checked >= 2


def test_old_run_folder_layout_still_generates_and_resumes(runs, tmp_path):
    """A run folder from before gradcraft_config.json: gradcraft's config.json and model.safetensors."""
    from safetensors.numpy import load_file
    from gradcraft.inference.text import load_model
    from gradcraft.models.hf import is_hf_config, is_hf_state
    from gradcraft.training.trainer import save_weights

    old = tmp_path / "old"
    shutil.copytree(runs / "llama", old)
    ours = json.loads((old / "gradcraft_config.json").read_text())
    model, metadata = load_model(str(old / "gradcraft_config.json"), str(old / "model.safetensors"))
    os.replace(old / "gradcraft_config.json", old / "config.json")
    save_weights(model, str(old / "model.safetensors"), metadata["tokenizer_fingerprint"])
    assert not is_hf_state(load_file(str(old / "model.safetensors")))
    assert _generate(old, cwd=tmp_path) == _generate(runs / "llama", cwd=tmp_path)

    proc = _cli(
        "train",
        "--dataset",
        str(runs / "data" / "tokens.bin"),
        "--model_dir",
        str(old),
        "--resume",
        "--steps",
        "32",
        "--no_progress",
    )
    assert proc.returncode == 0, proc.stderr
    assert "resuming from" in proc.stderr and "step 30" in proc.stderr
    # the resumed run leaves the new layout
    assert json.loads((old / "gradcraft_config.json").read_text()) == ours
    assert is_hf_config(json.loads((old / "config.json").read_text()))
    assert is_hf_state(load_file(str(old / "model.safetensors")))
    _generate(old, cwd=tmp_path)


def test_a_family_hf_lacks_has_no_config_json_and_still_generates(runs, tmp_path):
    """Learned-beta SwiGLU with learned positions: transformers has no class for it, so the run folder
    holds no config.json (HF refuses it) and keeps its weights in gradcraft_model.safetensors."""
    import transformers

    run = tmp_path / "k2"
    tokens = str(runs / "data" / "tokens.bin")
    assert (
        main(["train", "--dataset", tokens, "--model_dir", str(run), "--preset", "k2-83m", "--ffn_dim", "64", *SMALL])
        == 0
    )
    assert not (run / "config.json").exists() and not (run / "model.safetensors").exists()
    assert (run / "gradcraft_config.json").exists() and (run / "gradcraft_model.safetensors").exists()
    _generate(run, cwd=tmp_path)
    with pytest.raises((OSError, ValueError), match="config.json"):  # "Unrecognized model ... config.json"
        transformers.AutoModelForCausalLM.from_pretrained(str(run))
    assert (
        main(["train", "--dataset", tokens, "--model_dir", str(run), "--resume", "--steps", "32", "--no_progress"]) == 0
    )
    assert not (run / "config.json").exists() and (run / "gradcraft_model.safetensors").exists()
    _generate(run, cwd=tmp_path)


def test_export_refuses_bad_input_with_one_line(runs, tmp_path):
    _one_line(
        _cli("export", "--model_dir", str(runs / "llama"), "--format", "onnx", "--out", str(tmp_path / "a")),
        "--format must be one of hf, safetensors",
    )
    _one_line(
        _cli("export", "--model_dir", str(tmp_path / "none"), "--format", "hf", "--out", str(tmp_path / "b")),
        "does not exist",
    )
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    _one_line(
        _cli("export", "--model_dir", str(runs / "llama"), "--format", "hf", "--out", str(tmp_path / "full")),
        "is not empty",
    )
    # an architecture HF has no class for (learned-beta SwiGLU, learned positions): refused, nothing written
    odd = tmp_path / "odd"
    odd.mkdir()
    cfg = json.loads((runs / "llama" / "gradcraft_config.json").read_text())
    cfg.update(learned_beta=True, positions="learned")
    (odd / "config.json").write_text(json.dumps(cfg))
    from gradcraft.models import ModelConfig, Transformer
    from gradcraft.training.trainer import save_weights

    save_weights(Transformer(ModelConfig.from_dict(cfg)), str(odd / "model.safetensors"))
    _one_line(
        _cli("export", "--model_dir", str(odd), "--format", "hf", "--out", str(tmp_path / "c")),
        "no Hugging Face equivalent",
    )
    assert not (tmp_path / "c").exists()
    assert (
        _cli("export", "--model_dir", str(odd), "--format", "safetensors", "--out", str(tmp_path / "d")).returncode == 0
    )
    # mixture-of-experts with a capacity limit: HF's Mixtral has none, so it would compute other outputs
    cfg = json.loads((runs / "llama" / "gradcraft_config.json").read_text())
    cfg.update(ffn_pattern="M", n_experts=2, experts_per_token=1, capacity_factor=1.25)
    (odd / "config.json").write_text(json.dumps(cfg))
    save_weights(Transformer(ModelConfig.from_dict(cfg)), str(odd / "model.safetensors"))
    _one_line(_cli("export", "--model_dir", str(odd), "--format", "hf", "--out", str(tmp_path / "e")), "capacity limit")
    assert not (tmp_path / "e").exists()


def test_generate_in_bfloat16_casts_the_weights_and_agrees_with_float32(runs):
    """--dtype: the weights (and so the KV caches) in bfloat16; the logits within bf16's rounding of
    float32's; "auto" is float32 on the CPU and bfloat16 on a GPU; a wrong name is one error line."""
    from gradcraft.inference.text import inference_dtype, load_model, paths_from_model_dir

    _, config, weights = paths_from_model_dir(str(runs / "llama"))
    half, _ = load_model(config, weights, dtype="bfloat16")
    full, _ = load_model(config, weights, dtype="auto")
    assert {p.dtype for p in half.parameters()} == {gc.bfloat16}
    assert {p.dtype for p in full.parameters()} == {gc.float32}
    assert inference_dtype("auto", "cuda:0") == "bfloat16" and inference_dtype("float16", "cpu") == "float16"
    ids = gc.tensor(np.array([[5, 9, 2, 7, 1]]))
    with gc.no_grad():
        a, b = half.eval()(ids).float().numpy(), full.eval()(ids).numpy()
    assert np.abs(a - b).max() < 0.05 * np.abs(b).max()
    proc = _cli(
        "generate", "--model_dir", str(runs / "llama"), "--prompt", "def ", "--max_tokens", "6", "--dtype", "bfloat16"
    )
    assert proc.returncode == 0, proc.stderr
    bad = _cli("generate", "--model_dir", str(runs / "llama"), "--prompt", "x", "--dtype", "int8")
    assert bad.returncode == 2 and "--dtype" in bad.stderr and "Traceback" not in bad.stderr
