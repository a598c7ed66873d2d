"""`gradcraft train`: outputs, exact resume, surviving SIGKILL, and one-line errors for bad input."""

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
import types

import numpy as np
import pytest

from gradcraft.data.tokenfile import write_token_file
from gradcraft.training.log import read_log
from cli_helpers import TINY_TRAIN, train_process, wait_for_checkpoint
from gradcraft.cli.main import main

TINY = TINY_TRAIN


def run(*args, check=True, timeout=300):
    proc = subprocess.run(
        [sys.executable, "-m", "gradcraft.cli.main", "train", *args], capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}:\n{proc.stderr}")
    return proc


def run_here(*args, check=True):
    """`gradcraft train` in this process (main(), as the command calls it), its output captured: the
    same run without an interpreter's start. Returns what `run` returns: returncode, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(["train", *[str(a) for a in args]])
        except SystemExit as e:
            status = e.code
    if check and status != 0:
        raise AssertionError(f"exit {status}:\n{err.getvalue()}")
    return types.SimpleNamespace(returncode=status, stdout=out.getvalue(), stderr=err.getvalue())


def test_training_writes_every_output_and_learns(dataset, tmp_path):
    out = tmp_path / "run"
    run_here(
        "--dataset",
        dataset,
        "--model_dir",
        str(out),
        "--steps",
        "30",
        "--checkpoint_every",
        "10",
        "--eval_every",
        "10",
        "--keep_checkpoints",
        "2",
        "--target_batch",
        "8",
        *TINY,
    )
    for name in (
        "gradcraft_config.json",
        "config.json",
        "train_config.json",
        "model.safetensors",
        "training_log.csv",
        "loss.png",
    ):
        assert (out / name).exists(), name
    assert sorted(os.listdir(out / "checkpoints")) == ["step_00000020", "step_00000030"]  # the last 2 kept
    rows = read_log(str(out / "training_log.csv"))
    assert [int(r["step"]) for r in rows] == list(range(1, 31))
    assert float(rows[-1]["loss"]) < float(rows[0]["loss"]) - 0.5
    assert rows[9]["val_loss"] and rows[29]["val_loss"] and not rows[10]["val_loss"]


@pytest.mark.parametrize("sampling", ["random", "sequential"])
def test_resume_is_bitwise_exact(dataset, tmp_path, sampling):
    straight, split = tmp_path / "straight", tmp_path / "split"
    common = [
        "--dataset",
        dataset,
        "--checkpoint_every",
        "6",
        "--dropout",
        "0.1",
        "--target_batch",
        "8",
        "--sampling",
        sampling,
        *TINY,
    ]
    run_here("--model_dir", str(straight), "--steps", "12", *common)
    run_here("--model_dir", str(split), "--steps", "12", "--stop_after", "6", *common)
    run_here("--model_dir", str(split), "--steps", "12", "--resume", "--dataset", dataset, "--no_progress")
    a = read_log(str(straight / "training_log.csv"))
    b = read_log(str(split / "training_log.csv"))
    assert [(r["step"], r["loss"], r["grad_norm"]) for r in a] == [(r["step"], r["loss"], r["grad_norm"]) for r in b]


def test_sigkill_at_any_moment_leaves_a_resumable_run(dataset, tmp_path):
    """Each attempt waits for the event it needs (a checkpoint newer than the last one: the run made
    progress), never for a guessed number of seconds, then kills after a random jitter of up to a
    few steps, so the kill lands anywhere in the step and checkpoint cycle."""
    out = tmp_path / "killed"
    rng = np.random.default_rng(0)
    for attempt in range(4):
        resume = ["--resume"] if (out / "checkpoints").exists() and os.listdir(out / "checkpoints") else []
        done = _last_step(out) if resume else 0
        proc = train_process(
            dataset,
            out,
            "--steps",
            "400",
            "--checkpoint_every",
            "1",
            *resume,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_checkpoint(out, done + 1, proc)
            time.sleep(rng.random() * 0.3)  # where in the cycle the kill lands (any moment is correct)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    proc = run_here(
        "--dataset",
        dataset,
        "--model_dir",
        str(out),
        "--steps",
        "400",
        "--resume",
        "--no_progress",
        "--steps",
        str(_last_step(out) + 2),
    )
    assert "resuming from" in proc.stderr
    rows = read_log(str(out / "training_log.csv"))
    steps = [int(r["step"]) for r in rows]
    assert steps == list(range(1, steps[-1] + 1))  # no gap, no duplicate: redone steps replaced


def _last_step(out):
    names = [n for n in os.listdir(out / "checkpoints") if n.startswith("step_")]
    return max(int(n[5:]) for n in names)


def test_corrupted_checkpoint_falls_back_to_the_previous_one(dataset, tmp_path):
    out = tmp_path / "corrupt"
    run_here("--dataset", dataset, "--model_dir", str(out), "--steps", "4", "--checkpoint_every", "2", *TINY)
    newest = out / "checkpoints" / "step_00000004" / "model.safetensors"
    newest.write_bytes(newest.read_bytes()[:100])  # truncated
    proc = run_here("--dataset", dataset, "--model_dir", str(out), "--steps", "6", "--resume", "--no_progress")
    assert "step_00000004 is unusable" in proc.stderr and "falling back" in proc.stderr
    assert "resuming from" in proc.stderr and "step 2)" in proc.stderr


def one_line_error(proc, *needles):
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_bad_input_gets_one_clear_line(dataset, tmp_path):
    run = run_here  # seven runs without seven interpreters
    out = str(tmp_path / "bad")
    one_line_error(
        run("--dataset", str(tmp_path / "missing.bin"), "--model_dir", out, *TINY, check=False), "does not exist"
    )
    not_tokens = tmp_path / "text.bin"
    not_tokens.write_bytes(b"hello world, not a token file at all" * 10)
    one_line_error(run("--dataset", str(not_tokens), "--model_dir", out, *TINY, check=False), "token file")
    short = tmp_path / "short.bin"
    write_token_file(str(short), np.arange(10, dtype=np.uint16), vocab_size=64)
    one_line_error(
        run("--dataset", str(short), "--model_dir", out, *TINY, check=False), "holds 10 tokens", "at least 18"
    )
    one_line_error(
        run("--dataset", dataset, "--model_dir", out, *TINY, "--vocab_size", "100", check=False),
        "--vocab_size 100",
        "(64)",
    )
    one_line_error(
        run("--dataset", dataset, "--model_dir", out, *TINY, "--target_batch", "6", check=False),
        "--target_batch 6 is not a multiple of --batch_size 4",
    )
    run("--dataset", dataset, "--model_dir", out, "--steps", "2", *TINY)
    one_line_error(
        run("--dataset", dataset, "--model_dir", out, "--steps", "3", "--resume", "--embed_dim", "64", check=False),
        "--embed_dim 64 differs from 32",
    )


def test_non_finite_loss_skips_steps_then_stops_cleanly(dataset, tmp_path):
    out = tmp_path / "nan"
    proc = run_here(
        "--dataset",
        dataset,
        "--model_dir",
        str(out),
        "--steps",
        "50",
        "--checkpoint_every",
        "1",
        "--grad_clip",
        "0",
        *TINY,
        "--max_lr",
        "1e6",
        "--warmup_steps",
        "1",
        check=False,
    )
    assert proc.returncode == 2
    assert "skipped the update" in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the loss was not finite for 3 steps in a row")
    from gradcraft.training.checkpoint import latest_checkpoint

    assert latest_checkpoint(str(out)) is not None  # the last good checkpoint is intact
