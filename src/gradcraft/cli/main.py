"""`gradcraft <subcommand>`: dispatch to one module per subcommand.

Each subcommand module exposes `add_parser(subparsers)` (which registers its
flags and sets `func`) and a `run(args)` that does the work. A `UserError`
raised anywhere, an argparse mistake, or a missing optional dependency
(matplotlib, fastapi: the `plot` and `serve` extras), or an error of the storage
that no command turned into a UserError (a full disk, a read-only folder, no
permission: gradcraft/atomic.py) becomes one line `error: ...` on stderr and
exit status 2. A closed pipe on stdout (`gradcraft generate ... | head -c 10`)
ends the command quietly with status 141, as SIGPIPE ends other tools. Every `--some_flag` also answers to
`--some-flag` (cli/common.py adds the aliases after all commands are built).
"""

import importlib
import os
import signal
import sys
import threading

from gradcraft.cli.common import Parser, add_dash_aliases, check_dependencies, missing_dependency_message, version
from gradcraft.atomic import is_storage_error
from gradcraft.errors import UserError

# subcommand name -> module under gradcraft.cli
SUBCOMMANDS = {
    "demo": "demo",
    "tokenize": "tokenize",
    "train": "train",
    "generate": "generate",
    "serve": "serve",
    "bench": "bench",
    "export": "export",
    "import": "import_cmd",
    "eval": "eval",
    "prebuild": "prebuild",
}


def build_parser() -> Parser:
    parser = Parser(
        prog="gradcraft",
        description="Train and run small language models with the gradcraft engine. "
        "Every --flag_name may also be spelled --flag-name.",
    )
    parser.add_argument(
        "--version", action="version", version=f"gradcraft {version()}", help="print the installed version and exit"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    parser.subcommands = sub.choices
    for module_name in SUBCOMMANDS.values():
        module = importlib.import_module(f"gradcraft.cli.{module_name}")
        module.add_parser(sub)
    add_dash_aliases(parser)
    return parser


def _terminate_early(signum, frame):
    from gradcraft.training.runlock import Terminated

    raise Terminated()


def main(argv=None) -> int:
    if argv is None and threading.current_thread() is threading.main_thread():
        # the command line's own process: SIGTERM stops it like Ctrl-C (one line, exit 143) from
        # here on, before a subcommand is loaded or anything written; `train` installs its own
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _terminate_early)
    try:
        return _main(argv)
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM while the commands load or parse
        return _stopped(e)


def _stopped(e: KeyboardInterrupt) -> int:
    terminated = type(e).__name__ == "Terminated"
    print("terminated" if terminated else "interrupted", file=sys.stderr)
    return 143 if terminated else 130


def _main(argv) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # reported by the subcommand's parser, so that the line points at its --help
        parser.subcommands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        check_dependencies(args.command)
        result = args.func(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:
        message = missing_dependency_message(e.name)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        return _stopped(e)
    except BrokenPipeError:
        if argv is None:  # the command line's own process (not a caller's: its fds are not ours to touch)
            _discard_stdout()
        return 141  # 128 + SIGPIPE: what `yes | head` reports
    except OSError as e:
        if not is_storage_error(e):
            raise
        where = f"{e.filename}: " if e.filename else ""
        print(f"error: {where}{e.strerror}; check the folder, its permissions and the free space", file=sys.stderr)
        return 2
    return int(result or 0)


def _discard_stdout() -> None:
    """After the reader of stdout went away: point stdout at /dev/null, so that the interpreter's
    final flush of what is still buffered does not fail again (and print a traceback) at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, AttributeError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
