"""Every numeric flag of every subcommand is range-checked where it is defined (a `Value` type from
cli/common.py): out-of-range, non-finite and non-numeric values are one `error:` line and exit 2,
while parsing, before any work. The table of bad values is derived from each flag's own range, so a
new flag is covered as soon as it exists; hand-picked cases are listed explicitly as well."""

import argparse
import math

import pytest

from gradcraft.cli.main import build_parser, main
from gradcraft.validation import Value


PARSER = build_parser()  # built once: parsing does not change it


def _flags():
    """(subcommand, --flag, action) for every option of every subcommand."""
    found = []
    for name, sub in PARSER.subcommands.items():
        for action in sub._actions:
            long = [s for s in action.option_strings if s.startswith("--")]
            if long and not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                found.append((name, long[0], action))
    return found


FLAGS = _flags()
NUMERIC = [(c, f, a) for c, f, a in FLAGS if isinstance(a.type, Value)]


def test_every_numeric_flag_has_a_range_checked_type():
    plain = [f"{command} {flag}" for command, flag, action in FLAGS if action.type in (int, float)]
    assert not plain, f"give these flags a type from cli/common.py (positive_int, probability, ...): {plain}"
    assert len(NUMERIC) >= 40  # train, generate, serve, tokenize, bench, demo


def _bad_values(kind: Value) -> list:
    """Strings just outside the flag's range, plus non-numbers and non-finite numbers."""
    bad = ["x", ""]
    if kind.kind is float:
        bad += ["nan", "inf", "-inf"]
    step = 1 if kind.kind is int else 1e-3
    if kind.low is not None:
        bad.append(str(kind.low if kind.low_open else kind.low - step))
    if kind.high is not None:
        bad.append(str(kind.high if kind.high_open else kind.high + step))
    if kind.kind is int:
        bad.append("1.5")
    if kind.not_between is not None:
        bad.append(str(sum(kind.not_between) / 2))
    return bad


DERIVED = [pytest.param(c, f, v, id=f"{c}{f}={v}") for c, f, a in NUMERIC for v in _bad_values(a.type)]

# hand-picked bad values, spelled out so that they stay covered whatever the derived table becomes
ISSUE = [
    ("train", "--max_lr", "-1"),
    ("train", "--warmup_steps", "-10"),
    ("train", "--beta1", "2"),
    ("train", "--grad_clip", "-1"),
    ("train", "--num_heads", "0"),
    ("train", "--num_kv_heads", "0"),
    ("train", "--checkpoint_every", "0"),
    ("train", "--print_every", "0"),
    ("train", "--target_batch", "-4"),
    ("train", "--seed", "-1"),
    ("train", "--max_bad_steps", "0"),
    ("train", "--stop_after", "-1"),
    ("train", "--dropout", "1"),
    ("train", "--steps", "0"),
    ("generate", "--temp", "-1"),
    ("generate", "--temp", "nan"),
    ("generate", "--temp", "1e-320"),
    ("generate", "--top_p", "2"),
    ("generate", "--top_p", "0"),
    ("generate", "--seed", "-1"),
    ("generate", "--max_tokens", "0"),
    ("serve", "--port", "70000"),
    ("serve", "--port", "0"),
    ("serve", "--max_body_bytes", "0"),
    ("tokenize", "--vocab_size", "-5"),
    ("tokenize", "--val_fraction", "1"),
    ("tokenize", "--workers", "0"),
    ("bench", "--threads", "0"),
    ("demo", "--lr", "0"),
]


def _parse(command, flag, value):
    try:
        PARSER.parse_args([command, f"{flag}={value}"])
    except SystemExit as e:
        return e.code
    return 0


@pytest.mark.parametrize("command,flag,value", DERIVED + [pytest.param(*c, id="issue:" + " ".join(c)) for c in ISSUE])
def test_out_of_range_flag_is_one_error_line(command, flag, value, capsys):
    assert _parse(command, flag, value) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: argument "), err
    assert flag in err and "must be" in err, err


@pytest.mark.parametrize("command,flag,action", [pytest.param(c, f, a, id=f"{c}{f}") for c, f, a in NUMERIC])
def test_every_default_is_within_its_flag_range(command, flag, action):
    if action.default is not None:
        assert action.type.problem(action.default) is None, (command, flag, action.default)


@pytest.mark.parametrize(
    "command,flag,value",
    [
        ("train", "--max_lr", "3e-4"),
        ("train", "--beta2", "0.999"),
        ("train", "--grad_clip", "0"),
        ("train", "--seed", "0"),
        ("generate", "--temp", "0"),
        ("generate", "--top_p", "1"),
        ("serve", "--port", "65535"),
        ("tokenize", "--val_fraction", "0"),
    ],
)
def test_values_in_range_are_accepted(command, flag, value):
    assert _parse(command, flag, value) == 0


def test_value_checks_file_values_like_flags():
    steps = Value(int, low=1)
    assert steps.problem(3) is None
    assert steps.problem(0) == "must be an integer >= 1, got 0"
    assert steps.problem(True) is not None and steps.problem(2.0) is not None  # bool and float are not ints
    assert Value(float, low=0).problem(math.nan) is not None
    assert Value(int, low=1).or_null().problem(None) is None


def test_refused_train_flag_creates_nothing(tmp_path, dataset, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--dataset", dataset, "--model_dir", str(tmp_path / "run"), "--max_lr", "-1"])
    assert exit_info.value.code == 2 and not (tmp_path / "run").exists()
    assert capsys.readouterr().err.startswith("error: argument --max_lr")
