"""The command line around a run: refusing a used --model_dir, --overwrite, resuming a finished run,
a longer --steps without a jump in the learning rate, Ctrl-C, tokenize's stale validation file, and
the help, defaults, --version and dashed aliases of every flag."""

import argparse
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from gradcraft.cli.main import build_parser
from gradcraft.data.tokenfile import write_token_file
from gradcraft.optim.lr_schedule import CosineWithWarmup, from_state_dict, with_total_steps
from gradcraft.training.log import read_log
from cli_helpers import run_cli as cli
from cli_helpers import TINY_TRAIN, train_process, wait_for_checkpoint

TINY = TINY_TRAIN


def train(capsys, dataset, model_dir, *flags):
    return cli(["train", "--dataset", dataset, "--model_dir", model_dir, *flags], capsys)


# ---- 2: a used --model_dir


def test_used_model_dir_is_refused_then_overwritten(dataset, tmp_path, capsys):
    out = tmp_path / "run"
    assert train(capsys, dataset, out, "--steps", "6", "--checkpoint_every", "3", *TINY)[0] == 0
    (out / "notes.txt").write_text("mine")  # not a run file: --overwrite keeps it
    status, _, err = train(capsys, dataset, out, "--steps", "2", *TINY)
    assert status == 2 and "already holds a run (checkpoints up to step 6)" in err
    assert sorted(os.listdir(out / "checkpoints")) == ["step_00000003", "step_00000006"]  # untouched
    status, _, err = train(capsys, dataset, out, "--steps", "2", "--overwrite", *TINY, "--vocab_size", "100")
    assert status == 2 and "--vocab_size 100" in err  # a mistaken --overwrite deletes nothing
    assert sorted(os.listdir(out / "checkpoints")) == ["step_00000003", "step_00000006"]
    status, _, err = train(capsys, dataset, out, "--steps", "2", "--overwrite", *TINY)
    assert status == 0, err
    assert "removed the earlier run's" in err
    assert os.listdir(out / "checkpoints") == ["step_00000002"]
    assert [int(r["step"]) for r in read_log(str(out / "training_log.csv"))] == [1, 2]
    assert (out / "notes.txt").read_text() == "mine"


def test_run_stopped_before_its_first_checkpoint_may_start_again(dataset, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text("{}")  # what a run killed before its first checkpoint leaves
    assert train(capsys, dataset, out, "--steps", "2", *TINY)[0] == 0


# ---- 5: resuming


def test_resume_of_a_finished_run_says_so(dataset, tmp_path, capsys):
    out = tmp_path / "run"
    assert train(capsys, dataset, out, "--steps", "4", *TINY)[0] == 0
    status, stdout, err = train(capsys, dataset, out, "--resume", "--no_progress")
    assert status == 0, err
    assert "nothing to do" in stdout and "step 4" in stdout and "--steps" in stdout
    assert "nan" not in stdout + err and "tokens/s" not in stdout
    assert [int(r["step"]) for r in read_log(str(out / "training_log.csv"))] == [1, 2, 3, 4]


def test_longer_steps_on_resume_keeps_the_learning_rate_continuous(dataset, tmp_path, capsys):
    out = tmp_path / "run"
    common = ["--checkpoint_every", "5", *TINY]
    assert train(capsys, dataset, out, "--steps", "20", "--stop_after", "10", *common)[0] == 0
    status, _, err = train(capsys, dataset, out, "--resume", "--steps", "40", "--no_progress")
    assert status == 0, err
    assert "schedule: --steps 20 -> 40" in err
    lr = [float(r["lr"]) for r in read_log(str(out / "training_log.csv"))]
    assert len(lr) == 40
    original = CosineWithWarmup(3e-3, 1e-4, 2, 20)
    assert lr[:10] == pytest.approx([original(s) for s in range(10)])
    steps_down = np.diff(lr[2:])
    assert (steps_down <= 1e-12).all()  # after warmup: never up
    assert lr[10] == pytest.approx(original(10))  # no jump: the first resumed step gets what it would have got
    assert lr[11] > original(11) and lr[19] > original(19)  # ... and the rest of the decay is stretched
    assert lr[-1] == pytest.approx(1e-4, rel=0.1)  # schedule(39): one step before min_lr


def test_with_total_steps_rule():
    cosine = CosineWithWarmup(1e-3, 1e-4, 10, 100)
    assert with_total_steps(cosine, 50, 100) is cosine
    warm = with_total_steps(cosine, 5, 300)  # still warming up: the decay just spans the new total
    assert [warm(s) for s in range(10)] == [cosine(s) for s in range(10)] and warm.total_steps == 300
    longer = with_total_steps(cosine, 60, 200)
    assert longer(60) == cosine(60) and longer(59) == cosine(59)
    assert longer(200) == pytest.approx(1e-4) and longer(150) > cosine(150)
    again = with_total_steps(from_state_dict(longer.state_dict()), 120, 400)  # saved, resumed, stretched again
    assert again(120) == pytest.approx(longer(120)) and again(400) == pytest.approx(1e-4)
    assert with_total_steps(cosine, 100, 200)(150) == pytest.approx(1e-4)  # a finished decay holds min_lr


def test_resume_with_another_tokenizers_dataset_does_not_blame_vocab_size(dataset, tmp_path, capsys):
    out = tmp_path / "run"
    assert train(capsys, dataset, out, "--steps", "2", *TINY)[0] == 0
    other = tmp_path / "other.bin"
    write_token_file(str(other), np.arange(2000, dtype=np.uint16) % 80, vocab_size=80, fingerprint="zzz")
    status, _, err = train(capsys, other, out, "--resume", "--steps", "4", "--no_progress")
    assert status == 2
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert "--vocab_size" not in err and "another tokenizer" in err


def test_ctrl_c_names_the_checkpoint_and_the_resume_command(dataset, tmp_path):
    out = tmp_path / "run"
    proc = train_process(dataset, out, "--steps", "100000", "--checkpoint_every", "1")
    wait_for_checkpoint(out, 2, proc, timeout=120)  # step 2 or later (the run keeps its newest 3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err
    assert last.startswith("interrupted: the newest checkpoint holds step ")
    step = int(last.split("holds step ")[1].split()[0])
    assert (out / "checkpoints" / f"step_{step:08d}").exists()
    assert last.endswith(f"resume with: gradcraft train --dataset {dataset} --model_dir {out} --resume")


# ---- 3: tokenize


def test_tokenize_removes_a_stale_validation_file_and_notes_a_small_vocabulary(tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    for i in range(6):
        (raw / f"d{i}.txt").write_text(f"hello world {i}\n" * 3)
    tokens = tmp_path / "out" / "tokens.bin"
    base = ["tokenize", "--quiet", "--data_dir", raw, "--output_path", tokens, "--workers", "1", "--retrain"]
    assert cli([*base, "--val_fraction", "0.3", "--vocab_size", "280"], capsys)[0] == 0
    assert (tmp_path / "out" / "tokens.val.bin").exists()
    status, out, err = cli([*base, "--vocab_size", "5000"], capsys)
    assert status == 0, err
    assert not (tmp_path / "out" / "tokens.val.bin").exists()
    assert "removed" in out and "tokens.val.bin" in out
    assert "fewer than --vocab_size 5000" in out


# ---- 6: help, defaults, --version, dashed aliases


def _subparsers(parser):
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


OWN_COMMANDS = ["demo", "tokenize", "train", "generate", "bench", "serve", "export"]


@pytest.mark.parametrize("command", OWN_COMMANDS)
def test_every_flag_has_help_and_its_default(command):
    sub = _subparsers(build_parser())[command]
    text = sub.format_help()
    for action in sub._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        assert action.help, f"{command} {action.option_strings[0]} has no help"
        shown = sub._get_formatter()._get_help_string(action)
        if not isinstance(action, argparse._StoreTrueAction):
            assert "default" in shown, f"{command} {action.option_strings[0]}: no default in {shown!r}"
    assert "--model-dir" not in text  # the aliases work but are not listed twice


def test_version(capsys):
    status, out, _ = cli(["--version"], capsys)
    assert status == 0 and out.startswith("gradcraft ") and out.strip() != "gradcraft"


def test_dashed_spellings_are_aliases():
    parser = build_parser()
    args = parser.parse_args(["train", "--model-dir", "x", "--max-lr", "0.5", "--no-progress", "--stop-after", "3"])
    assert (args.model_dir, args.max_lr, args.no_progress, args.stop_after) == ("x", 0.5, True, 3)
    for command, sub in _subparsers(parser).items():
        for action in sub._actions:
            for option in action.option_strings:
                if option.startswith("--") and "_" in option:
                    assert "--" + option[2:].replace("_", "-") in action.option_strings, (command, option)


def test_presets_table_in_docs_matches_the_code():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run(
        [sys.executable, os.path.join(root, "scripts", "presets_table.py"), "--check"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
