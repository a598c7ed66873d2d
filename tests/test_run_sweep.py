"""No temporary survives a crash: `train` sweeps the `.tmp-*` leftovers of a killed run
(checkpoint writes, pruning, the tokenizer copy) under the run folder's lock before it writes
anything, and `tokenize` those of its output folder; SIGTERM is one line from the moment the
command starts; tokenize never reads its own outputs; a piped prompt is strictly UTF-8."""

import os
import signal
import subprocess
import sys
import time

import pytest

from cli_helpers import ONE_LAYER_TRAIN, run_cli

GRADCRAFT = [sys.executable, "-m", "gradcraft.cli.main"]


def test_train_sweeps_what_a_killed_run_left(dataset, tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", "--dataset", dataset, "--model_dir", run, *ONE_LAYER_TRAIN, "--steps", "2"]
    assert run_cli(argv, capsys)[0] == 0
    leftovers = [
        run / ".tmp-k2j3h4g5",  # an atomic write (the tokenizer copy, a JSON file) cut short
        run / ".tmp-tokenizer_config.json.x",
        run / "model.safetensors.tmp",
        run / "checkpoints" / ".tmp-old-step_00000001-99999",  # a pruning cut short
        run / "checkpoints" / ".tmp-step_00000003-99999",  # a checkpoint write cut short
    ]
    for path in leftovers:
        if path.name.startswith(".tmp-old") or path.name.startswith(".tmp-step"):
            path.mkdir()
            (path / "model.safetensors").write_bytes(b"x" * 1000)
        else:
            path.write_bytes(b"partial")
    status, _, err = run_cli([*argv[:-1], "3", "--resume"], capsys)
    assert status == 0, err
    assert "removed 5 temporary files" in err, err
    assert not [p for p in leftovers if p.exists()]


def test_a_refused_train_still_sweeps_nothing_it_does_not_hold(dataset, tmp_path, capsys):
    """The sweep happens under the lock: a second train on a held folder removes nothing."""
    from gradcraft.training.runlock import lock_run_folder, release_run_folder

    run = tmp_path / "run"
    run.mkdir()
    (run / ".tmp-live12345").write_bytes(b"being written by the holder")
    fd = lock_run_folder(str(run))
    try:
        argv = ["train", "--dataset", dataset, "--model_dir", run, *ONE_LAYER_TRAIN, "--steps", "2"]
        status, _, err = run_cli(argv, capsys)
    finally:
        release_run_folder(fd)
    assert status == 2 and "in use by" in err, err
    assert (run / ".tmp-live12345").exists()


def test_tokenize_never_reads_its_own_outputs(tmp_path, capsys):
    """Run twice into its own data folder with --ext matching its outputs: the same tokens."""
    data = tmp_path / "data"
    data.mkdir()
    for i in range(3):
        (data / f"f{i}.py").write_text(f"def f{i}(x):\n    return x * {i}\n" * 20)
    argv = ["tokenize", "--data_dir", data, "--output_path", data / "tokens.bin", "--vocab_size", "270"]
    argv += ["--workers", "1", "--ext", ".py,.bin,.json", "--quiet"]
    assert run_cli(argv, capsys)[0] == 0
    first = (data / "tokens.bin").read_bytes()
    (data / ".tmp-abcd1234").write_bytes(b"a killed tokenize's temporary")
    status, _, err = run_cli([*argv, "--retrain"], capsys)
    assert status == 0, err
    assert "not reading 2 token, tokenizer or temporary files" in err, err
    assert "removed 1 temporary files" in err, err
    assert (data / "tokens.bin").read_bytes() == first
    assert not (data / ".tmp-abcd1234").exists()


def _catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (Linux: SigCgt in /proc/<pid>/status)."""
    with open(f"/proc/{pid}/status") as f:
        mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
    return bool(mask & (1 << (signal.SIGTERM - 1)))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
def test_sigterm_from_the_start_is_one_line(trained_run):
    """SIGTERM as soon as the command has a handler (while it loads and waits for its prompt):
    "terminated", exit 143, no traceback, not a silent death."""
    proc = subprocess.Popen(
        [*GRADCRAFT, "generate", "--model_dir", str(trained_run / "run")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.time() + 60
    while not _catches_sigterm(proc.pid):
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert err.decode().strip().splitlines()[-1] == "terminated" and b"Traceback" not in err, err


@pytest.mark.parametrize("errors", ["surrogateescape", "strict", "replace"])
def test_piped_prompt_is_strict_utf8_whatever_the_locale(errors):
    """Whatever error handler the locale gives stdin (C and C.UTF-8: surrogateescape), the piped
    prompt's bytes are decoded strictly."""
    import io

    from gradcraft.cli.generate import read_piped_prompt
    from gradcraft.errors import UserError

    stdin = io.TextIOWrapper(io.BytesIO(b"def \xff\xfe not utf-8"), encoding="utf-8", errors=errors)
    with pytest.raises(UserError, match="not valid UTF-8"):
        read_piped_prompt(stdin)
    stdin = io.TextIOWrapper(io.BytesIO("déf ✓".encode()), encoding="utf-8", errors=errors)
    assert read_piped_prompt(stdin) == "déf ✓"


def test_main_in_process_leaves_sigterm_alone(capsys):
    """main() called from Python (a test, a notebook) does not take over the caller's SIGTERM."""
    before = signal.getsignal(signal.SIGTERM)
    run_cli(["generate", "--model_dir", "/nonexistent"], capsys)
    assert signal.getsignal(signal.SIGTERM) is before
