"""Crafted or damaged files: every field of a checkpoint's state.json and every tensor of
its optimizer file, the final weights (dtype, finiteness, checksum, a config that disagrees), a
tokenizer's pattern, the logs, and token files: one `error:` line naming the file and the field, or
a fallback to the previous checkpoint; never a traceback, never a run that "finishes" wrong."""

import hashlib
import json
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from gradcraft.cli.main import main
from cli_helpers import ONE_LAYER_TRAIN, run_cli


@pytest.fixture(scope="module")
def two_checkpoints(dataset, tmp_path_factory):
    """A run with checkpoints at steps 2 and 4 and its final weights (the cases damage step 4)."""
    folder = tmp_path_factory.mktemp("crafted") / "run"
    argv = ["train", "--dataset", dataset, "--model_dir", str(folder), *ONE_LAYER_TRAIN]
    assert main([*argv, "--steps", "4", "--checkpoint_every", "2", "--log", "jsonl"]) == 0
    return folder


@pytest.fixture
def run(two_checkpoints, tmp_path):
    shutil.copytree(two_checkpoints, tmp_path / "run")
    return tmp_path / "run"


def _rehash(checkpoint):
    """Recompute the manifest, as anyone who edits a checkpoint by hand can."""
    manifest = {
        n: hashlib.sha256((checkpoint / n).read_bytes()).hexdigest()
        for n in ("model.safetensors", "optimizer.safetensors", "state.json")
    }
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))


def _edit_json(path, change):
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _resume(run, capsys, *flags):
    dataset = json.loads((run / "train_config.json").read_text())["dataset"]
    argv = ["train", "--dataset", dataset, "--model_dir", run, "--resume", "--steps", "5", "--no_progress", *flags]
    return run_cli(argv, capsys)


def _one_error(status, err, *words):
    assert status == 2, err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert "Traceback" not in err
    for word in words:
        assert word in err, err


# ---------------------------------------------------------------- state.json: every nested field


def _generator(d):
    d["rng"]["generator"]["state"] = "garbage"


STATE_CASES = [
    ("rng-garbage", _generator, "'rng.generator'"),
    ("rng-unknown-bit-generator", lambda d: d["rng"]["generator"].update(bit_generator="os"), "bit_generator"),
    ("rng-not-object", lambda d: d["rng"].update(generator=[1]), "'generator'"),
    ("rng-dropout-counter", lambda d: d["rng"].update(dropout={"cpu": [-1, "x"]}), "'rng.dropout.cpu'"),
    ("rng-dropout-seed", lambda d: d["rng"].update(dropout_seed=2**70), "'dropout_seed'"),
    ("schedule-unknown-kind", lambda d: d["schedule"].update(kind="sawtooth"), "'schedule.kind'"),
    ("schedule-missing-field", lambda d: d["schedule"].pop("max_lr"), "'schedule'"),
    ("schedule-nan", lambda d: d["schedule"].update(max_lr=float("nan")), "'schedule'"),
    ("step-minus-one", lambda d: d.update(step=-1), "'step'"),
    ("step-string", lambda d: d.update(step="4"), "'step'"),
    ("step-1e308", lambda d: d.update(step=1e308), "'step'"),
    ("step-huge-int", lambda d: d.update(step=10**30), "'step'"),
    ("betas-out-of-range", lambda d: d["optimizer"]["param_groups"][0].update(betas=[2.0, 0.9]), "'betas'"),
    ("betas-short", lambda d: d["optimizer"]["param_groups"][0].update(betas=[0.9]), "'betas'"),
    ("param-groups-empty", lambda d: d["optimizer"].update(param_groups=[]), "param_groups"),
    ("eps-zero", lambda d: d["optimizer"]["param_groups"][0].update(eps=0), "'eps'"),
    ("sampler-kind", lambda d: d["sampler"].update(kind="shuffle"), "'sampler.kind'"),
    ("sampler-rng", lambda d: d["sampler"].update(rng={"bit_generator": "PCG64"}), "'sampler.rng'"),
    (
        "sampler-position-1e18",
        lambda d: d.update(sampler={"kind": "sequential", "epoch": 0, "position": 10**18}),
        "'position'",
    ),
    ("scalar-not-step", lambda d: d["optimizer"]["scalars"].update({"0.lr": 1.0}), "'0.lr'"),
    ("scalar-step-negative", lambda d: d["optimizer"]["scalars"].update({"0.step": -3}), "'0.step'"),
]


@pytest.mark.parametrize("change,words", [pytest.param(c, w, id=i) for i, c, w in STATE_CASES])
def test_crafted_state_makes_the_checkpoint_unusable_naming_the_field(change, words, run):
    """verify() is what a resume asks of each checkpoint, newest first (the fallback itself: below)."""
    from gradcraft.training.checkpoint import verify

    checkpoint = run / "checkpoints" / "step_00000004"
    _edit_json(checkpoint / "state.json", change)
    _rehash(checkpoint)
    problem = verify(str(checkpoint))
    assert problem is not None and words in problem and "state.json" in problem, problem
    assert verify(str(run / "checkpoints" / "step_00000002")) is None


def test_a_resume_falls_back_past_a_crafted_state(run, capsys):
    checkpoint = run / "checkpoints" / "step_00000004"
    _edit_json(checkpoint / "state.json", _generator)
    _rehash(checkpoint)
    status, _, err = _resume(run, capsys)
    assert status == 0, err
    assert "warning: checkpoint step_00000004 is unusable" in err and "'rng.generator'" in err, err
    assert "(step 2)" in err and "Traceback" not in err, err


def test_sampler_position_beyond_the_data_is_one_line(dataset, tmp_path, capsys):
    folder = tmp_path / "seq"
    argv = ["train", "--dataset", dataset, "--model_dir", folder, *ONE_LAYER_TRAIN, "--sampling", "sequential"]
    assert run_cli([*argv, "--steps", "2"], capsys)[0] == 0
    checkpoint = folder / "checkpoints" / "step_00000002"
    _edit_json(checkpoint / "state.json", lambda d: d["sampler"].update(position=10**9))
    _rehash(checkpoint)
    status, _, err = _resume(folder, capsys)
    _one_error(status, err, "state.json", "'sampler'", "beyond this data set's")


# ---------------------------------------------------------------- optimizer.safetensors: every tensor


def _opt_missing(t):
    t.pop("0.exp_avg_sq")


def _opt_unknown(t):
    t["0.momentum"] = t["0.exp_avg"]


def _opt_half(t):
    t["1.exp_avg"] = t["1.exp_avg"].astype(np.float16)


def _opt_nan(t):
    t["0.exp_avg_sq"].reshape(-1)[3] = np.nan


def _opt_negative(t):
    t["0.exp_avg_sq"].reshape(-1)[0] = -1.0


def _opt_shape(t):
    t["0.exp_avg"] = t["0.exp_avg"].reshape(-1)[:5].copy()


def _opt_index(t):
    t["999.exp_avg"] = t["0.exp_avg"]


OPTIMIZER_CASES = [
    ("missing-exp-avg-sq", _opt_missing, ["'0.exp_avg_sq' is missing"]),
    ("unknown-key", _opt_unknown, ["unknown tensor '0.momentum'"]),
    ("float16", _opt_half, ["'1.exp_avg'", "float16", "float32"]),
    ("nan", _opt_nan, ["'0.exp_avg_sq'", "NaN"]),
    ("negative", _opt_negative, ["'0.exp_avg_sq'", "negative"]),
    ("wrong-shape", _opt_shape, ["'0.exp_avg'", "shape"]),
    ("index-beyond", _opt_index, ["'999.exp_avg'"]),
]


@pytest.mark.parametrize("change,words", [pytest.param(c, w, id=i) for i, c, w in OPTIMIZER_CASES])
def test_crafted_optimizer_state_is_one_error_line(change, words, run, capsys):
    checkpoint = run / "checkpoints" / "step_00000004"
    tensors = {k: v.copy() for k, v in load_file(str(checkpoint / "optimizer.safetensors")).items()}
    change(tensors)
    save_file(tensors, str(checkpoint / "optimizer.safetensors"))
    _rehash(checkpoint)
    status, _, err = _resume(run, capsys)
    _one_error(status, err, "optimizer.safetensors", *words)
    assert not (run / "checkpoints" / "step_00000005").exists()


# ---------------------------------------------------------------- non-finite weights never end a run


def test_nan_weights_stop_the_run_keeping_the_last_good_checkpoint(dataset, tmp_path, capsys, monkeypatch):
    """An update that makes the weights NaN (here: forced after the first step) never reaches a
    checkpoint or the final weights: one line naming the last good checkpoint, exit 2."""
    import gradcraft as gc
    from gradcraft.optim import AdamW

    original, calls = AdamW.step, []

    def poisoned(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        calls.append(1)
        if len(calls) >= 2:
            p = self.param_groups[0]["params"][0]
            p.data = gc.tensor(np.full(p.shape, np.nan, dtype=np.float32))
        return out

    monkeypatch.setattr(AdamW, "step", poisoned)
    folder = tmp_path / "nan"
    argv = ["train", "--dataset", dataset, "--model_dir", folder, *ONE_LAYER_TRAIN, "--steps", "3"]
    status, _, err = run_cli([*argv, "--checkpoint_every", "1", "--max_bad_steps", "5"], capsys)
    lines = err.strip().splitlines()
    assert status == 2 and lines[-1].startswith("error: the weights are not finite after step 2"), err
    assert "Traceback" not in err and not any(line.startswith("error") for line in lines[:-1]), err
    assert "step_00000001" in err, err
    assert sorted(p.name for p in (folder / "checkpoints").iterdir()) == ["step_00000001"]
    assert not (folder / "model.safetensors").exists() and not (folder / "gradcraft_model.safetensors").exists()


# ---------------------------------------------------------------- final weights


def _weights(run):
    return run / "model.safetensors"


@pytest.fixture
def final_run(trained_run, tmp_path):
    """A copy of the conftest run (with its tokenizer: generate reaches the weights)."""
    shutil.copytree(trained_run / "run", tmp_path / "run")
    return tmp_path / "run"


@pytest.mark.parametrize("damage", ["bitflip", "zeros", "truncate"])
def test_damaged_final_weights_are_refused_by_their_manifest(damage, final_run, capsys):
    run = final_run
    path = _weights(run)
    data = bytearray(path.read_bytes())
    if damage == "bitflip":
        data[-7] ^= 0x10
    elif damage == "zeros":
        data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)
    else:
        data = data[:-100]
    path.write_bytes(bytes(data))
    for command in (
        ["generate", "--model_dir", run, "--prompt", "x"],
        ["export", "--model_dir", run, "--out", run.parent / "exported", "--format", "safetensors"],
    ):
        status, _, err = run_cli(command, capsys)
        _one_error(status, err, "model.safetensors", "sha256", "manifest.json")


def test_final_weights_have_a_manifest(final_run):
    run = final_run
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest == {"model.safetensors": hashlib.sha256(_weights(run).read_bytes()).hexdigest()}


def _rewrite_weights(run, change):
    from safetensors import safe_open

    with safe_open(str(_weights(run)), "numpy") as f:
        metadata = f.metadata()
    weights = {k: v.copy() for k, v in load_file(str(_weights(run))).items()}
    change(weights)
    save_file(weights, str(_weights(run)), metadata=metadata)
    (run / "manifest.json").unlink()  # an edit by hand: no manifest to catch it, so the checks must


def test_int8_weights_are_refused_not_cast_to_zeros(final_run, capsys):
    run = final_run
    name = "model.norm.weight"
    _rewrite_weights(run, lambda w: w.update({name: (w[name] * 10).astype(np.int8)}))
    status, _, err = run_cli(["generate", "--model_dir", run, "--prompt", "x"], capsys)
    _one_error(status, err, "model.safetensors", name, "int8")


def test_nan_weights_are_refused_on_load(final_run, capsys):
    run = final_run
    name = "model.norm.weight"
    _rewrite_weights(run, lambda w: w[name].__setitem__(0, np.nan))
    status, _, err = run_cli(["generate", "--model_dir", run, "--prompt", "x"], capsys)
    _one_error(status, err, name, "NaN")


def test_a_config_with_fewer_layers_than_the_weights_is_refused(final_run, capsys):
    run = final_run
    """Weights of 2 layers against a config of 1: refused, not loaded with a layer ignored."""

    def add_layer(w):
        for name in [n for n in w if n.startswith("model.layers.0.")]:
            w[name.replace("layers.0.", "layers.1.")] = w[name]

    _rewrite_weights(run, add_layer)
    status, _, err = run_cli(["generate", "--model_dir", run, "--prompt", "x"], capsys)
    _one_error(status, err, "model.layers.1.", "does not fit")


# ---------------------------------------------------------------- tokenizer, token files


def test_tokenizer_pattern_that_is_not_a_regex_is_one_line(trained_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained_run / "run", run)
    path = run / "gradcraft_tokenizer.json"
    _edit_json(path, lambda d: d.update(pattern="(unclosed[", pattern_name="custom"))
    status, _, err = run_cli(["generate", "--model_dir", run, "--prompt", "x"], capsys)
    _one_error(status, err, "gradcraft_tokenizer.json", "not a valid regex")


def test_ids_beyond_the_model_vocabulary_are_refused_up_front(tmp_path, capsys):
    """A header of vocabulary 0 (none recorded) and ids beyond the model's: refused before training."""
    from gradcraft.data.tokenfile import write_token_file

    tokens = np.arange(2000) % 64
    tokens[1500] = 60000
    write_token_file(str(tmp_path / "t.bin"), tokens.astype(np.uint16), vocab_size=0)
    argv = ["train", "--dataset", tmp_path / "t.bin", "--model_dir", tmp_path / "r", *ONE_LAYER_TRAIN]
    status, _, err = run_cli([*argv, "--vocab_size", "64", "--steps", "2"], capsys)
    _one_error(status, err, "60000", "position 1500", "64")


def test_a_validation_split_of_another_tokenizer_is_refused(dataset, tmp_path, capsys):
    from gradcraft.data.tokenfile import read_token_file, write_token_file

    tokens, _ = read_token_file(dataset)
    write_token_file(str(tmp_path / "d.bin"), np.asarray(tokens), vocab_size=64, fingerprint="abc123")
    write_token_file(str(tmp_path / "d.val.bin"), np.asarray(tokens[:500]), vocab_size=64, fingerprint="ffff00")
    argv = ["train", "--dataset", tmp_path / "d.bin", "--model_dir", tmp_path / "r", *ONE_LAYER_TRAIN]
    status, _, err = run_cli([*argv, "--steps", "2"], capsys)
    _one_error(status, err, "d.val.bin", "another tokenizer", "ffff00")
    assert not (tmp_path / "r").exists()


# ---------------------------------------------------------------- logs


LOG_DAMAGE = [
    ("csv-torn-last-line", "training_log.csv", lambda b: b + b"5,2.3"),
    ("csv-headerless", "training_log.csv", lambda b: b.split(b"\n", 1)[1]),
    ("csv-binary", "training_log.csv", lambda b: b"\x00\xff\xfe\x80garbage\n" * 5),
    ("csv-bad-row", "training_log.csv", lambda b: b + b"x,y,z\n3,notanumber,1,1,1,\n"),
    ("jsonl-bad-types", "events.jsonl", lambda b: b + b'{"event": "step", "step": "x"}\n[1, 2]\n{"step": true}\n'),
    ("jsonl-bad-bytes", "events.jsonl", lambda b: b + b"\xff\xfe{garbage\n" + b'{"event": "step", "step": 3'),
]


@pytest.mark.parametrize("name,damage", [pytest.param(n, d, id=i) for i, n, d in LOG_DAMAGE])
def test_damaged_logs_are_trimmed_on_resume(name, damage, run):
    """What a resume does to the logs (RunLogs with resume_step): only whole, well-formed rows and
    events up to the step survive, and the files end with a newline."""
    from gradcraft.training.log import RunLogs, read_events, read_log

    path = run / name
    path.write_bytes(damage(path.read_bytes()))
    logs = RunLogs(str(run), ["csv", "jsonl"], resume_step=2)
    logs.append({"step": 3, "loss": 1.5, "grad_norm": 1.0, "lr": 1e-3, "tokens_per_s": 10.0, "val_loss": None})
    logs.close()
    steps = [int(r["step"]) for r in read_log(str(run / "training_log.csv"))]
    assert steps[-1] == 3 and steps == sorted(set(steps)) and all(s <= 3 for s in steps), steps
    assert all(isinstance(e["step"], int) and e["step"] <= 3 for e in read_events(str(run / "events.jsonl")))
    for log in ("training_log.csv", "events.jsonl"):
        assert (run / log).read_bytes().endswith(b"\n")


def test_a_resume_trims_a_torn_log(run, capsys):
    path = run / "training_log.csv"
    path.write_bytes(path.read_bytes() + b"5,2.3")
    status, _, err = _resume(run, capsys, "--log", "jsonl")
    assert status == 0 and "Traceback" not in err, err
    from gradcraft.training.log import read_log

    assert [int(r["step"]) for r in read_log(str(path))] == [1, 2, 3, 4, 5]


def test_plot_survives_a_damaged_log(run, tmp_path):
    pytest.importorskip("matplotlib")
    from gradcraft.training.log import plot_loss

    path = run / "training_log.csv"
    path.write_bytes(path.read_bytes() + b"9,\xff\n10,1.0,2\n11,2.5")
    plot_loss(str(path), str(tmp_path / "loss.png"))
    assert (tmp_path / "loss.png").stat().st_size > 0
