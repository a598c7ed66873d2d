"""Every user mistake on the command line is one line `error: ...` and exit status 2: a table of
mistakes, each run through the real entry point (in-process, so the table stays fast)."""

import sys

import pytest

from gradcraft.cli.main import main


def run_cli(argv, capsys):
    """(exit status, stdout, stderr) of `gradcraft <argv>`."""
    try:
        status = main([str(a) for a in argv])
    except SystemExit as e:  # argparse's errors and --help/--version exit through SystemExit
        status = e.code
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def places(tmp_path, dataset):
    """Paths the cases refer to: a file, a folder holding a run, a token file (vocabulary 64)."""
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    used = tmp_path / "used_run"
    (used / "checkpoints" / "step_00000010").mkdir(parents=True)
    (used / "config.json").write_text("{}")
    return {"file": a_file, "used": used, "dataset": dataset, "new": tmp_path / "new_run"}


TRAIN = ["train", "--dataset", "{dataset}", "--preset", "toy-v0", "--no_progress"]

# (id, argv with {place} fields, words the error line must contain)
CASES = [
    ("generate-device-gpu", ["generate", "--model_dir", "{new}", "--device", "gpu"], ["'gpu'", "cuda"]),
    ("generate-device-CPU", ["generate", "--model_dir", "{new}", "--device", "CPU"], ["'CPU'", "'cpu'"]),
    ("generate-device-dtype", ["generate", "--model_dir", "{new}", "--device", "float16"], ["--dtype"]),
    ("serve-device-gpu", ["serve", "--model_dir", "{new}", "--device", "gpu"], ["'gpu'"]),
    ("bench-device-gpu", ["bench", "--device", "gpu", "--only", "ours"], ["'gpu'"]),
    ("train-device-gpu", [*TRAIN, "--model_dir", "{new}", "--device", "gpu"], ["'gpu'"]),
    ("train-device-float16", [*TRAIN, "--model_dir", "{new}", "--device", "float16"], ["--dtype"]),
    ("train-model-dir-file", [*TRAIN, "--model_dir", "{file}"], ["is a file"]),
    ("train-used-model-dir", [*TRAIN, "--model_dir", "{used}"], ["already holds a run", "--resume", "--overwrite"]),
    ("train-resume-and-overwrite", [*TRAIN, "--model_dir", "{used}", "--resume", "--overwrite"], ["give one"]),
    ("train-resume-nothing", [*TRAIN, "--model_dir", "{new}", "--resume"], ["nothing to resume"]),
    ("train-seq-len-too-big", [*TRAIN, "--model_dir", "{new}", "--seq_len", "100000"], ["needs at least", "TiB"]),
    ("train-unknown-flag", [*TRAIN, "--model_dir", "{new}", "--bogus", "1"], ["--bogus"]),
    ("train-bad-number", [*TRAIN, "--model_dir", "{new}", "--steps", "ten"], ["--steps", "'ten'"]),
    ("train-bad-choice", [*TRAIN, "--model_dir", "{new}", "--dtype", "float16"], ["--dtype"]),
    ("train-unknown-preset", [*TRAIN, "--model_dir", "{new}", "--preset", "nope"], ["preset"]),
    ("tokenize-bad-number", ["tokenize", "--vocab-size", "x"], ["--vocab_size", "'x'"]),
    ("no-command", [], ["COMMAND"]),
]


@pytest.mark.parametrize("argv,words", [pytest.param(a, w, id=i) for i, a, w in CASES])
def test_one_error_line(argv, words, places, capsys):
    status, out, err = run_cli([a.format(**places) for a in argv], capsys)
    lines = err.strip().splitlines()
    assert status == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for word in words:
        assert word in lines[0], lines[0]
    assert not (places["new"]).exists()  # a refused run creates nothing


@pytest.mark.parametrize("checked_first", [True, False])
def test_missing_optional_dependency_is_one_line(checked_first, trained_run, capsys, monkeypatch):
    import gradcraft.cli.common as common

    monkeypatch.setitem(sys.modules, "fastapi", None)  # `import fastapi` now fails as if not installed
    if checked_first:  # serve is refused before it loads anything
        argv = ["serve", "--model_dir", trained_run / "no_such_run"]
    else:  # an import deep inside a command still ends as one line
        monkeypatch.setattr(common, "NEEDS", {})
        argv = ["serve", "--model_dir", trained_run / "run", "--port", "65000"]
    status, _, err = run_cli(argv, capsys)
    assert status == 2
    assert err.strip().splitlines() == [err.strip()] and err.startswith("error: ")
    assert "needs fastapi" in err and "gradcraft[serve]" in err


def test_train_without_matplotlib_still_finishes(dataset, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    status, _, err = run_cli(
        [
            "train",
            "--dataset",
            dataset,
            "--model_dir",
            tmp_path / "run",
            "--preset",
            "toy-v0",
            "--embed_dim",
            "32",
            "--num_heads",
            "2",
            "--seq_len",
            "16",
            "--batch_size",
            "2",
            "--steps",
            "2",
            "--no_progress",
        ],
        capsys,
    )
    assert status == 0, err
    assert "gradcraft[plot]" in err
    assert (tmp_path / "run" / "model.safetensors").exists() and not (tmp_path / "run" / "loss.png").exists()
