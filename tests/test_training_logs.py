"""The run's logs besides training_log.csv: events.jsonl (one JSON object a line, cut back on resume like
the CSV) and `--log tensorboard` (the tensorboard package's event files; one error line without it)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from gradcraft.training.log import JSONLLog, read_events, read_log
from cli_helpers import TINY_TRAIN
from test_train import run_here

TINY = TINY_TRAIN


def run(*args, check=True, prelude=""):
    if not prelude:  # in process: the same run without an interpreter start
        return run_here(*args, check=check)
    code = f"import sys; {prelude}from gradcraft.cli.main import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run([sys.executable, "-c", code, "train", *args], capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}:\n{proc.stderr}")
    return proc


def lines_of(path):
    with open(path) as f:
        return [json.loads(line) for line in f]  # every line parses


def test_events_jsonl_matches_the_csv(dataset, tmp_path):
    out = tmp_path / "run"
    run("--dataset", dataset, "--model_dir", str(out), "--steps", "12", "--eval_every", "4", *TINY)
    events = lines_of(out / "events.jsonl")
    assert events[0]["event"] == "start" and events[0]["step"] == 0 and not events[0]["resumed"]
    assert events[0]["config"]["steps"] == 12 and events[0]["model"]["dim"] == 32
    assert events[-1]["event"] == "end" and events[-1]["step"] == 12 and events[-1]["status"] == "finished"
    steps = [e for e in events if e["event"] == "step"]
    rows = read_log(str(out / "training_log.csv"))
    assert [e["step"] for e in steps] == [int(r["step"]) for r in rows] == list(range(1, 13))
    for e, r in zip(steps, rows):
        for key in ("loss", "grad_norm", "lr", "tokens_per_s"):
            assert e[key] == float(r[key]), (key, e, r)  # the same value, to the last bit
        assert e["elapsed"] >= 0 and "val_loss" not in e
    evals = [e for e in events if e["event"] == "eval"]
    assert [(e["step"], e["val_loss"]) for e in evals] == [
        (int(r["step"]), float(r["val_loss"])) for r in rows if r["val_loss"]
    ] and len(evals) == 3


def test_resume_cuts_events_back_like_the_csv(dataset, tmp_path):
    out = tmp_path / "split"
    common = ["--dataset", dataset, "--model_dir", str(out), "--checkpoint_every", "4", *TINY]
    run("--steps", "12", "--stop_after", "8", *common)
    # a crash after the checkpoint at step 8: events of steps 9-10 were written, then a line cut short
    with open(out / "events.jsonl", "a") as f:
        for step in (9, 10):
            f.write(json.dumps({"event": "step", "step": step, "loss": 99.0}) + "\n")
        f.write('{"event": "step", "step": 11, "lo')
    run("--steps", "12", "--resume", "--dataset", dataset, "--model_dir", str(out), "--no_progress")
    events = lines_of(out / "events.jsonl")
    steps = [e["step"] for e in events if e["event"] == "step"]
    assert steps == list(range(1, 13))  # no duplicates, nothing stale
    assert all(e.get("loss") != 99.0 for e in events)
    assert [(e["event"], e["step"]) for e in events if e["event"] in ("start", "end")] == [
        ("start", 0),
        ("end", 8),
        ("start", 8),
        ("end", 12),
    ]
    rows = read_log(str(out / "training_log.csv"))
    assert [e["loss"] for e in events if e["event"] == "step"] == [float(r["loss"]) for r in rows]


def test_jsonl_log_is_line_buffered_and_cut_on_resume(tmp_path):
    path = str(tmp_path / "events.jsonl")
    log = JSONLLog(path)
    for step in range(1, 6):
        log.write("step", step, loss=float(step))
        assert len(read_events(path)) == step  # on disk before close
    log.write("step", 6, loss=float("nan"))  # JSON has no NaN: null
    assert read_events(path)[-1]["loss"] is None
    log.close()
    JSONLLog(path, resume_step=3).close()
    assert [e["step"] for e in read_events(path)] == [1, 2, 3]
    JSONLLog(path).close()  # a fresh run starts an empty log
    assert read_events(path) == []


def test_log_flag_rejects_unknown_names(dataset, tmp_path):
    proc = run(
        "--dataset",
        dataset,
        "--model_dir",
        str(tmp_path / "r"),
        "--steps",
        "2",
        "--log",
        "csv,wandb",
        *TINY,
        check=False,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "wandb" in lines[0] and lines[0].startswith("error: ")


def test_log_tensorboard_without_the_package_is_one_error_line(dataset, tmp_path):
    out = tmp_path / "tb"
    proc = run(
        "--dataset",
        dataset,
        "--model_dir",
        str(out),
        "--steps",
        "2",
        "--log",
        "jsonl,tensorboard",
        *TINY,
        check=False,
        prelude="sys.modules['tensorboard'] = None; ",
    )  # as if it were not installed
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and "pip install tensorboard" in lines[0], proc.stderr
    assert not out.exists()  # checked before training starts


def test_log_tensorboard_writes_the_scalars(dataset, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "tb"
    common = [
        "--dataset",
        dataset,
        "--model_dir",
        str(out),
        "--checkpoint_every",
        "3",
        "--eval_every",
        "3",
        "--log",
        "jsonl,tensorboard",
        *TINY,
    ]
    run("--steps", "9", "--stop_after", "8", *common)
    with open(out / "train_config.json") as f:
        assert json.load(f)["log"] == "jsonl,tensorboard"  # --resume keeps the run's logs
    shutil.rmtree(out / "checkpoints" / "step_00000008")  # as if killed before it: steps 7-8 are redone
    run("--steps", "9", "--resume", "--dataset", dataset, "--model_dir", str(out), "--no_progress")
    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == {"train/loss", "train/lr", "train/grad_norm", "val/loss"}
    rows = read_log(str(out / "training_log.csv"))
    loss = acc.Scalars("train/loss")
    assert [e.step for e in loss] == list(range(1, 10))
    assert [e.value for e in loss] == pytest.approx([float(r["loss"]) for r in rows], rel=1e-6)  # float32
    assert [e.step for e in acc.Scalars("val/loss")] == [3, 6, 9]
    assert [e["step"] for e in lines_of(out / "events.jsonl") if e["event"] == "step"] == list(range(1, 10))


def test_tensorboard_writer_does_not_import_torch(tmp_path):
    pytest.importorskip("tensorboard")
    code = (
        "import sys; from gradcraft.training.log import TensorBoardLog; w = TensorBoardLog(sys.argv[1]); "
        "w.scalars(1, {'train/loss': 1.0}); w.close(); print('torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a file whose writes fail with ENOSPC)")
def test_a_full_disk_while_appending_a_log_names_the_file(tmp_path):
    from gradcraft.errors import UserError
    from gradcraft.training.log import CSVLog

    for log, write in (
        (CSVLog(str(tmp_path / "training_log.csv")), lambda log: log.append({"step": 1, "loss": 2.0})),
        (JSONLLog(str(tmp_path / "events.jsonl")), lambda log: log.write("step", 1, loss=2.0)),
    ):
        log.file.close()
        log.file = open("/dev/full", "a", buffering=1)  # (the disk fills up mid-run)
        if isinstance(log, CSVLog):
            import csv

            log.writer = csv.DictWriter(log.file, fieldnames=log.columns)
        with pytest.raises(UserError, match=f"cannot write {log.path}: No space left on device"):
            write(log)
