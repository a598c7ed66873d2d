"""Running `gradcraft <command>` in a test: in-process (its exit status, argparse's own exits included,
and what it printed), or `gradcraft train` as a process of its own (for signals and kills)."""

import os
import re
import signal
import subprocess
import sys
import time

from gradcraft.cli.main import main


# An access-log line of an in-process server (a module's `api` fixture): its thread may write one while
# a later test of the module captures stderr. It is no output of the command under test.
_ACCESS_LOG = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \S+ [A-Z]+ /\S* \d{3} .*\n?", re.M)


def run_cli(argv, capsys):
    """(exit status, stdout, stderr) of main(argv); argv items may be paths or numbers."""
    capsys.readouterr()  # what other threads wrote before the command
    try:
        status = main([str(a) for a in argv])
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    return status, out, _ACCESS_LOG.sub("", err)


# A training run small enough for a test: a few seconds on one core.
TINY_TRAIN = ["--preset", "toy-v0", "--embed_dim", "32", "--num_heads", "2", "--num_layers", "2", "--seq_len", "16"]
TINY_TRAIN += ["--batch_size", "4", "--warmup_steps", "2", "--no_progress", "--max_lr", "3e-3"]

# The smallest run the CLI trains: one layer of 16 features.
ONE_LAYER_TRAIN = ["--preset", "toy-v0", "--embed_dim", "16", "--num_layers", "1", "--num_heads", "2"]
ONE_LAYER_TRAIN += ["--seq_len", "16", "--batch_size", "2", "--no_progress"]


def train_process(dataset, out, *flags, **popen_options):
    """`gradcraft train --dataset dataset --model_dir out` of TINY_TRAIN and `flags`, started as a process
    (stdout and stderr piped as text unless popen_options say otherwise)."""
    command = [sys.executable, "-m", "gradcraft.cli.main", "train", "--dataset", dataset, "--model_dir", str(out)]
    options = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, **popen_options}
    if os.name == "posix":
        # A shell without job control starts background commands (`scripts/test.sh &`) with SIGINT
        # ignored, and a child inherits that: the run would go on after the tests' Ctrl-C.
        options.setdefault("preexec_fn", lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    return subprocess.Popen([*command, *TINY_TRAIN, *flags], **options)


def wait_for_checkpoint(out, step, proc, timeout=300):
    """Until a checkpoint of step `step` or later exists. (Not that very folder: the run keeps its
    newest 3, so on a loaded machine a poll can miss a short-lived one.)"""
    folder = out / "checkpoints"
    deadline = time.time() + timeout
    while time.time() < deadline:
        names = os.listdir(folder) if folder.exists() else []
        if any(n.startswith("step_") and n[5:].isdigit() and int(n[5:]) >= step for n in names):
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint of step >= {step} in {folder} after {timeout} s")
