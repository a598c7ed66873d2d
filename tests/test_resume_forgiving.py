"""A run that forgives: `--resume` refuses another preset, restarts a run stopped before its first
checkpoint, finds its dataset from any folder after the run moved; generate and export use an
interrupted run's checkpoints; a folder that is not a run is named as such."""

import json
import os
import shutil

import pytest
from safetensors.numpy import load_file

from cli_helpers import ONE_LAYER_TRAIN, run_cli


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A tokenizer and a token file made by `gradcraft tokenize` (so that runs copy the tokenizer)."""
    from gradcraft.cli.main import main

    root = tmp_path_factory.mktemp("forgiving")
    raw = root / "raw"
    raw.mkdir()
    for i in range(20):
        (raw / f"f{i}.txt").write_text(f"def reverse_string(s): return s[::-1]  # line {i} hello world\n")
    argv = ["tokenize", "--data_dir", raw, "--output_path", root / "data" / "tokens.bin", "--vocab_size", "300"]
    assert main([str(a) for a in argv + ["--workers", "1"]]) == 0
    return root / "data" / "tokens.bin"


def _train(dataset, out, capsys, *flags):
    argv = ["train", "--dataset", dataset, "--model_dir", out, *ONE_LAYER_TRAIN, "--checkpoint_every", "2", *flags]
    return run_cli(argv, capsys)


def test_resume_refuses_another_preset(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(corpus, out, capsys, "--steps", "2")[0] == 0
    status, _, err = run_cli(["train", "--model_dir", out, "--resume", "--preset", "demo", "--steps", "4"], capsys)
    assert status == 2
    assert err.strip() == (
        f"error: --resume: --preset demo differs from toy-v0 in {out}/gradcraft_config.json; "
        "drop the setting, or train into a new --model_dir"
    )
    # the run's own preset (and the run's own dataset, from train_config.json) goes on
    status, _, err = _train(corpus, out, capsys, "--steps", "4", "--resume")
    assert status == 0, err
    assert "resuming from" in err


def test_resume_checks_the_preset_of_an_imported_run(corpus, tmp_path, capsys):
    """A run folder that names no preset (imported): every field the preset sets is compared."""
    out = tmp_path / "run"
    assert _train(corpus, out, capsys, "--steps", "2")[0] == 0
    config = json.loads((out / "gradcraft_config.json").read_text())
    config["extra"].pop("preset")
    (out / "gradcraft_config.json").write_text(json.dumps(config))
    status, _, err = run_cli(["train", "--model_dir", out, "--resume", "--preset", "gpt2-124m"], capsys)
    assert status == 2
    assert "--preset gpt2-124m differs from the run in" in err and "(its seq_len is 16, the preset's 1024)" in err


def test_resume_before_the_first_checkpoint_starts_at_step_0(corpus, tmp_path, capsys):
    fresh, restarted = tmp_path / "fresh", tmp_path / "restarted"
    assert _train(corpus, fresh, capsys, "--steps", "3", "--checkpoint_every", "10")[0] == 0
    # a run killed before its first checkpoint: settings and logs written, no checkpoint, no weights
    assert _train(corpus, restarted, capsys, "--steps", "3", "--checkpoint_every", "10")[0] == 0
    for name in ("checkpoints", "model.safetensors", "config.json", "generation_config.json", "loss.png"):
        path = restarted / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    status, out, err = _train(corpus, restarted, capsys, "--steps", "3", "--checkpoint_every", "10", "--resume")
    assert status == 0, err
    assert f"note: --resume: {restarted} holds no checkpoint yet" in err and "starting it from step 0" in err
    a, b = load_file(str(fresh / "model.safetensors")), load_file(str(restarted / "model.safetensors"))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)  # exactly as if fresh


def test_resume_still_refuses_a_missing_folder_and_another_dataset(corpus, tmp_path, capsys):
    status, _, err = _train(corpus, tmp_path / "typo", capsys, "--steps", "2", "--resume")
    assert status == 2 and "does not exist: nothing to resume" in err
    assert not (tmp_path / "typo").exists()
    out = tmp_path / "run"
    assert _train(corpus, out, capsys, "--steps", "2", "--checkpoint_every", "10")[0] == 0
    shutil.rmtree(out / "checkpoints")
    (out / "model.safetensors").unlink()
    other = tmp_path / "other.bin"
    shutil.copy(corpus, other)
    status, _, err = _train(other, out, capsys, "--steps", "2", "--resume")
    assert status == 2
    assert f"--dataset {other} differs from {corpus}, which the run in {out} started on" in err


def test_resume_from_another_folder_after_the_run_moved(corpus, tmp_path, capsys, monkeypatch):
    """The dataset is saved absolute (a relative --dataset from the first working directory)."""
    monkeypatch.chdir(corpus.parent)
    assert _train("tokens.bin", "run", capsys, "--steps", "2")[0] == 0
    saved = json.loads((corpus.parent / "run" / "train_config.json").read_text())
    assert saved["dataset"] == str(corpus)
    shutil.move(str(corpus.parent / "run"), str(tmp_path / "moved"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    status, _, err = run_cli(["train", "--model_dir", "../moved", "--resume", "--steps", "4"], capsys)
    assert status == 0, err
    assert "resuming from ../moved/checkpoints/step_00000002 (step 2)" in err


@pytest.fixture(scope="module")
def interrupted(corpus, tmp_path_factory):
    """A run of 4 steps (checkpoints at 2 and 4) whose final weights are gone, as after a kill."""
    out = tmp_path_factory.mktemp("interrupted") / "run"
    status, _, err = _train(corpus, out, _CapsysStub(), "--steps", "4")
    assert status == 0, err
    (out / "model.safetensors").unlink()
    (out / "config.json").unlink()
    return out


class _CapsysStub:
    """readouterr() for run_cli in a module fixture (pytest's capsys is function-scoped)."""

    def readouterr(self):
        return "", ""


def test_generate_uses_an_interrupted_runs_newest_checkpoint(interrupted, capsys):
    argv = ["generate", "--model_dir", interrupted, "--prompt", "def", "--max_tokens", "4"]
    status, out, err = run_cli(argv, capsys)
    assert status == 0, err
    step4 = interrupted / "checkpoints" / "step_00000004"
    assert f"note: {interrupted} has no final weights (the run was interrupted): using its newest checkpoint, " in err
    assert f"step 4 ({step4})" in err
    # a checkpoint folder as --model_dir, and --checkpoint STEP, give that checkpoint's text
    status, same, _ = run_cli(["generate", "--model_dir", step4, "--prompt", "def", "--max_tokens", "4"], capsys)
    assert status == 0 and same == out
    status, _, err = run_cli(argv + ["--checkpoint", "2"], capsys)
    assert status == 0 and "note: using checkpoint step 2" in err
    status, _, err = run_cli(argv + ["--checkpoint", "3"], capsys)
    assert status == 2 and "error: --checkpoint 3: " in err and "(it has: 2, 4)" in err


def test_export_takes_an_interrupted_run(interrupted, tmp_path, capsys):
    status, out, err = run_cli(
        ["export", "--model_dir", interrupted, "--format", "safetensors", "--out", tmp_path / "x"], capsys
    )
    assert status == 0, err
    assert "newest checkpoint, step 4" in err
    assert sorted(os.listdir(tmp_path / "x")) == ["config.json", "gradcraft_tokenizer.json", "model.safetensors"]


def test_a_folder_that_is_not_a_run(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("x")
    for argv in (
        ["generate", "--model_dir", tmp_path / "notes", "--prompt", "x"],
        ["export", "--model_dir", tmp_path / "notes", "--format", "hf", "--out", tmp_path / "o"],
    ):
        status, _, err = run_cli(argv, capsys)
        assert status == 2
        assert err.startswith(f"error: {tmp_path / 'notes'} is not a run folder: a run folder holds ")
        assert "`gradcraft train --model_dir DIR` makes one" in err and "tokenizer.json does not exist" not in err
