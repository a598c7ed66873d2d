"""Every JSON file gradcraft reads is checked before use (gradcraft/validation.py and
gradcraft/training/runfiles.py): a damaged or hand-edited file is one `error:` line naming the file
and the field, exit 2, or, for a checkpoint, a fallback to the previous one with a warning. A table
of file cases, each run through the real command in-process on a copy of a trained run folder."""

import hashlib
import json
import shutil

import pytest

from gradcraft import validation
from gradcraft.cli.main import main
from cli_helpers import ONE_LAYER_TRAIN, run_cli


@pytest.fixture
def run_copy(trained_run, tmp_path):
    """A copy of the conftest run folder (and its token file), safe to damage."""
    shutil.copytree(trained_run / "run", tmp_path / "run")
    shutil.copy(trained_run / "tokens.bin", tmp_path / "tokens.bin")
    return tmp_path


def _edit_json(path, change):
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


NESTED = "[" * 200_000 + "]" * 200_000

# (id, file in the run folder, new content: bytes, str, or a function editing the JSON, words in the line)
GENERATE_CASES = [
    ("config-wrong-type", "gradcraft_config.json", lambda d: d.update(dim="32"), ["gradcraft_config.json", "'dim'"]),
    ("config-unknown-field", "gradcraft_config.json", lambda d: d.update(colour=1), ["unknown field 'colour'"]),
    ("config-kv-heads-0", "gradcraft_config.json", lambda d: d.update(n_kv_heads=0), ["'n_kv_heads'", ">= 1"]),
    ("config-negative-dim", "gradcraft_config.json", lambda d: d.update(dim=-32), ["'dim'"]),
    ("config-nan-eps", "gradcraft_config.json", '{"norm_eps": NaN}', ["'norm_eps'"]),
    ("config-bool-as-int", "gradcraft_config.json", lambda d: d.update(n_layers=True), ["'n_layers'"]),
    (
        "config-huge-dim",
        "gradcraft_config.json",
        lambda d: d.update(dim=10**9, n_heads=1, n_kv_heads=1, ffn_dim=1),
        ["parameters", "RAM"],
    ),
    ("config-huge-layers", "gradcraft_config.json", lambda d: d.update(n_layers=10**9), ["parameters", "RAM"]),
    ("config-list", "gradcraft_config.json", "[]", ["must hold a JSON object"]),
    ("config-null", "gradcraft_config.json", "null", ["must hold a JSON object"]),
    ("config-garbage", "gradcraft_config.json", b'{"dim": "\xff\xfe"}', ["gradcraft_config.json", "UTF-8"]),
    ("config-binary", "gradcraft_config.json", b"\x00\x01\x02garbage", ["not valid JSON"]),
    ("config-indivisible", "gradcraft_config.json", lambda d: d.update(n_heads=3), ["not divisible"]),
    ("config-not-json", "gradcraft_config.json", "{dim: 32", ["not valid JSON", "line 1"]),
    ("config-nested", "gradcraft_config.json", NESTED, ["nested too deeply"]),
    ("hf-config-wrong-type", "config.json", None, []),  # placeholder replaced below
    ("tokenizer-nested", "gradcraft_tokenizer.json", '{"format": ' + NESTED + "}", ["nested too deeply"]),
    ("tokenizer-list", "gradcraft_tokenizer.json", "[1, 2]", ["not a tokenizer"]),
    ("tokenizer-wrong-types", "gradcraft_tokenizer.json", lambda d: d.update(merges="abc"), ["gradcraft_tokenizer"]),
    (
        "tokenizer-hf-wrong-types",
        "gradcraft_tokenizer.json",
        '{"model": {"type": "BPE", "vocab": [1]}, "pre_tokenizer": {"type": "ByteLevel"}}',
        ["damaged HF tokenizer.json"],
    ),
    (
        "tokenizer-hf-pre-string",
        "gradcraft_tokenizer.json",
        '{"model": {"type": "BPE", "vocab": {}}, "pre_tokenizer": "x"}',
        ["gradcraft_tokenizer.json"],
    ),
]
GENERATE_CASES = [c for c in GENERATE_CASES if c[2] is not None]


def _damage(folder, name, content):
    path = folder / name
    if callable(content):
        _edit_json(path, content)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)


@pytest.mark.parametrize("name,content,words", [pytest.param(n, c, w, id=i) for i, n, c, w in GENERATE_CASES])
def test_damaged_file_is_one_error_line_naming_it(name, content, words, run_copy, capsys):
    _damage(run_copy / "run", name, content)
    status, out, err = run_cli(
        ["generate", "--model_dir", run_copy / "run", "--prompt", "def", "--max_tokens", 2], capsys
    )
    assert status == 2, err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert name in err
    for word in words:
        assert word in err, err


def test_hf_config_with_wrong_types_is_one_line(run_copy, capsys):
    """A run folder HF opens: its config.json read through the HF converter, then the same checks."""
    (run_copy / "run" / "gradcraft_config.json").unlink()
    _edit_json(run_copy / "run" / "config.json", lambda d: d.update(num_attention_heads="two"))
    status, _, err = run_cli(["generate", "--model_dir", run_copy / "run", "--prompt", "x"], capsys)
    assert status == 2 and err.count("\n") == 1 and "config.json" in err, err


def test_file_larger_than_the_limit_is_refused_before_reading(run_copy, capsys, monkeypatch):
    monkeypatch.setattr(validation, "MAX_JSON_BYTES", 100)
    status, _, err = run_cli(["generate", "--model_dir", run_copy / "run", "--prompt", "x"], capsys)
    assert status == 2 and "more than the 100" in err and "gradcraft_config.json" in err, err
    monkeypatch.setattr(validation, "MAX_TOKENIZER_BYTES", 100)
    monkeypatch.setattr(validation, "MAX_JSON_BYTES", 1 << 20)
    status, _, err = run_cli(["generate", "--model_dir", run_copy / "run", "--prompt", "x"], capsys)
    assert status == 2 and "larger than 100 bytes" in err, err


RESUME = ["train", "--dataset", "{tokens}", "--model_dir", "{run}", "--resume", "--steps", "31", "--no_progress"]
RESUME_CASES = [
    ("train-config-wrong-type", "train_config.json", lambda d: d.update(steps="30"), ["train_config.json", "'steps'"]),
    ("train-config-negative-lr", "train_config.json", lambda d: d.update(max_lr=-1), ["'max_lr'", "> 0"]),
    ("train-config-beta", "train_config.json", lambda d: d.update(beta1=2), ["'beta1'"]),
    (
        "train-config-checkpoint-every-0",
        "train_config.json",
        lambda d: d.update(checkpoint_every=0),
        ["'checkpoint_every'"],
    ),
    ("train-config-unknown", "train_config.json", lambda d: d.update(learning_rate=1), ["unknown field"]),
    ("train-config-null", "train_config.json", "null", ["must hold a JSON object"]),
    ("train-config-nested", "train_config.json", NESTED, ["nested too deeply"]),
    ("model-config-wrong-type", "gradcraft_config.json", lambda d: d.update(n_heads=[2]), ["'n_heads'"]),
    ("model-config-unknown", "gradcraft_config.json", lambda d: d.update(heads=2), ["unknown field 'heads'"]),
]


@pytest.mark.parametrize("name,content,words", [pytest.param(n, c, w, id=i) for i, n, c, w in RESUME_CASES])
def test_damaged_run_file_on_resume_is_one_error_line(name, content, words, run_copy, capsys):
    _damage(run_copy / "run", name, content)
    before = sorted(p.name for p in (run_copy / "run" / "checkpoints").iterdir())
    argv = [a.format(tokens=run_copy / "tokens.bin", run=run_copy / "run") for a in RESUME]
    status, out, err = run_cli(argv, capsys)
    assert status == 2, err
    assert err.count("\n") == 1 and err.startswith("error: ") and name in err, err
    for word in words:
        assert word in err, err
    assert sorted(p.name for p in (run_copy / "run" / "checkpoints").iterdir()) == before  # nothing written


# ---------------------------------------------------------------- checkpoints: fall back, never crash


def _rehash(checkpoint):
    """Recompute the manifest, as anyone who edits a checkpoint by hand can."""
    manifest = {
        n: hashlib.sha256((checkpoint / n).read_bytes()).hexdigest()
        for n in ("model.safetensors", "optimizer.safetensors", "state.json")
    }
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))


STATE_CASES = [
    ("step-negative", lambda d: d.update(step=-5), "'step'"),
    ("step-other-folder", lambda d: d.update(step=2), "holds step 2"),
    ("step-string", lambda d: d.update(step="4"), "'step'"),
    ("sampler-missing", lambda d: d.pop("sampler"), "'sampler' is missing"),
    ("optimizer-list", lambda d: d.update(optimizer=[]), "'optimizer'"),
    ("param-groups-not-list", lambda d: d["optimizer"].update(param_groups={}), "'param_groups'"),
    ("lr-negative", lambda d: d["optimizer"]["param_groups"][0].update(lr=-1.0), "'lr'"),
    ("scalar-key", lambda d: d["optimizer"]["scalars"].update({"x": 1}), "optimizer scalar 'x'"),
]
MANIFEST_CASES = [
    ("manifest-list", "[]", "must hold a JSON object"),
    ("manifest-null", "null", "JSON object"),
    ("manifest-missing-key", '{"state.json": "00"}', "is missing"),
    ("manifest-not-hex", None, "not a sha256"),
    ("manifest-garbage", "\x00\x01", "not valid JSON"),
]


@pytest.fixture(scope="module")
def two_checkpoints(dataset, tmp_path_factory):
    """A run with checkpoints at steps 2 and 4 (the newest is the one the cases damage)."""
    folder = tmp_path_factory.mktemp("ckpt") / "run"
    assert (
        main(
            [
                "train",
                "--dataset",
                dataset,
                "--model_dir",
                str(folder),
                *ONE_LAYER_TRAIN,
                "--steps",
                "4",
                "--checkpoint_every",
                "2",
            ]
        )
        == 0
    )
    return folder


def _resume(run, capsys):
    """(exit status, stderr) of `gradcraft train --resume` on the run folder, to step 5."""
    dataset = json.loads((run / "train_config.json").read_text())["dataset"]
    argv = ["train", "--dataset", dataset, "--model_dir", run, "--resume", "--steps", "5", "--no_progress"]
    status, _, err = run_cli(argv, capsys)
    return status, err


def _resume_after_damage(two_checkpoints, tmp_path, damage, capsys):
    run = tmp_path / "run"
    shutil.copytree(two_checkpoints, run)
    damage(run / "checkpoints" / "step_00000004")
    return _resume(run, capsys)


@pytest.mark.parametrize("change,words", [pytest.param(c, w, id=i) for i, c, w in STATE_CASES])
def test_edited_state_falls_back_to_the_previous_checkpoint(change, words, two_checkpoints, tmp_path, capsys):
    def damage(checkpoint):
        _edit_json(checkpoint / "state.json", change)
        _rehash(checkpoint)

    status, err = _resume_after_damage(two_checkpoints, tmp_path, damage, capsys)
    assert status == 0, err
    assert "warning: checkpoint step_00000004 is unusable" in err and words in err, err
    assert "resuming from" in err and "(step 2)" in err, err


@pytest.mark.parametrize("content,words", [pytest.param(c, w, id=i) for i, c, w in MANIFEST_CASES])
def test_broken_manifest_falls_back_to_the_previous_checkpoint(content, words, two_checkpoints, tmp_path, capsys):
    def damage(checkpoint):
        if content is None:
            _edit_json(checkpoint / "manifest.json", lambda d: d.update({"state.json": "z" * 64}))
        else:
            (checkpoint / "manifest.json").write_text(content)

    status, err = _resume_after_damage(two_checkpoints, tmp_path, damage, capsys)
    assert status == 0, err
    assert "step_00000004 is unusable" in err and words in err and "(step 2)" in err, err


def test_no_intact_checkpoint_is_one_error_after_the_warnings(two_checkpoints, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(two_checkpoints, run)
    for checkpoint in (run / "checkpoints").iterdir():
        (checkpoint / "manifest.json").write_text("[]")
    status, err = _resume(run, capsys)
    lines = err.strip().splitlines()
    assert status == 2 and lines[-1].startswith("error: no usable checkpoint"), err
    assert all(line.startswith("warning: ") for line in lines[:-1]) and len(lines) == 3, err
