"""What every `gradcraft` subcommand shares: the parser class, dashed flag aliases, the version, and
the messages for optional dependencies.

- `Parser` turns every argparse mistake (unknown flag, bad number, bad choice) into one line
  `error: ...` and exit status 2, like a `UserError`, instead of a usage block.
- `HelpFormatter` appends the default to every flag's help (unless the help already says it), and
  lists each flag once (its dashed alias is not repeated).
- `add_dash_aliases(parser)` makes `--model-dir` an alias of `--model_dir`, for every flag of every
  subcommand, so a new flag gets its alias without anyone remembering to add it.
- The range-checked flag types (`positive_int`, `non_negative_float`, `probability`, `port`, ...):
  give every numeric flag one as its `type=`, where the flag is defined, so that `--steps -1` is
  refused while parsing with one line (`argument --steps: must be an integer >= 1, got '-1'`).
  tests/test_cli_flags.py checks that every numeric flag of every subcommand has one.
"""

from __future__ import annotations

import argparse
import sys

# Range-checked argparse types (gradcraft/validation.py): a string in, the value or one error line out.
from gradcraft.validation import (  # noqa: F401 (the flags' types, defined with the fields that share them)
    Value,
    fraction,
    non_negative_float,
    non_negative_int,
    port,
    positive_float,
    positive_int,
    probability,
    seed,
)

# importable module -> (the extra that installs it, what needs it)
OPTIONAL_MODULES = {
    "matplotlib": ("plot", "the loss plot"),
    "fastapi": ("serve", "gradcraft serve"),
    "uvicorn": ("serve", "gradcraft serve"),
    "starlette": ("serve", "gradcraft serve"),
    "gguf": ("gguf", "export --format gguf"),
}


def version() -> str:
    """The installed package's version (from its metadata), or "unknown" when run from a bare checkout."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("gradcraft")
    except PackageNotFoundError:
        return "unknown"


# subcommand -> optional modules it cannot run without (checked before it starts any work)
NEEDS = {"serve": ("fastapi", "uvicorn")}


def check_dependencies(command: str) -> None:
    """Raise ModuleNotFoundError (turned into one line by main) for a module `command` needs."""
    import importlib.util

    for name in NEEDS.get(command, ()):
        if importlib.util.find_spec(name) is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def missing_dependency_message(module_name: str) -> str | None:
    """The one-line explanation for a missing optional dependency, or None if it is not one of ours."""
    top = (module_name or "").split(".")[0]
    if top not in OPTIONAL_MODULES:
        return None
    extra, needed_by = OPTIONAL_MODULES[top]
    return (
        f"{needed_by} needs {top}, which is not installed here; install it with "
        f"pip install 'gradcraft[{extra}]' (or: bash scripts/setup_venv.sh {extra})"
    )


class HelpFormatter(argparse.HelpFormatter):
    def _get_help_string(self, action):
        text = action.help or ""
        unset = action.default is None or action.default is False or action.default is argparse.SUPPRESS
        if "default" in text or unset or action.default in ([], "") or not action.option_strings:
            return text
        return text + " (default: %(default)s)"

    def _format_action_invocation(self, action):
        if not action.option_strings:
            return super()._format_action_invocation(action)
        shown = [s for s in action.option_strings if s not in getattr(action, "dash_aliases", ())]
        original = action.option_strings
        action.option_strings = shown
        try:
            return super()._format_action_invocation(action)
        finally:
            action.option_strings = original


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line: `error: <what> (see gradcraft ... --help)`, exit 2."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("allow_abbrev", False)  # `--step 3` is not silently `--steps 3`
        super().__init__(*args, **kwargs)

    def error(self, message):
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """--model_dir, or --vocab, --config and --weights: where generate and serve find a model."""
    parser.add_argument(
        "--model_dir",
        help="a training run: takes the tokenizer, config and weights from it; an interrupted run's newest "
        "checkpoint, or a checkpoint folder (runs/x/checkpoints/step_N) (default: none; then give --vocab, "
        "--config and --weights)",
    )
    add_checkpoint_argument(parser)
    parser.add_argument(
        "--vocab", help="tokenizer file (gradcraft, HF tokenizer.json or .tiktoken) (default: the one in --model_dir)"
    )
    parser.add_argument("--config", help="model config.json (default: the one in --model_dir)")
    parser.add_argument("--weights", help="model.safetensors (default: the one in --model_dir)")
    parser.add_argument(
        "--dtype",
        choices=["auto", "float32", "bfloat16", "float16"],
        default="auto",
        help="the weights' and KV caches' type while generating (default: auto: bfloat16 on a GPU, float32 on the CPU)",
    )


def add_checkpoint_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checkpoint",
        type=non_negative_int,
        default=None,
        metavar="STEP",
        help="use the --model_dir run's checkpoint of this step (default: the final weights, else the newest "
        "checkpoint)",
    )


def add_dash_aliases(parser: argparse.ArgumentParser) -> None:
    """Give every `--some_flag` of `parser` and its subcommands the alias `--some-flag`.

    argparse has no public way to add an option string to an existing action, so this appends to
    `action.option_strings` and registers the alias in the parser's option table (shared with its
    argument groups), which is exactly what `add_argument` does for the spellings it is given."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                add_dash_aliases(sub)
            continue
        aliases = []
        for option in action.option_strings:
            if option.startswith("--") and "_" in option:
                alias = "--" + option[2:].replace("_", "-")
                if alias not in parser._option_string_actions:
                    aliases.append(alias)
        for alias in aliases:
            action.option_strings.append(alias)
            parser._option_string_actions[alias] = action
        action.dash_aliases = tuple(getattr(action, "dash_aliases", ())) + tuple(aliases)
