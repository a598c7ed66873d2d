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
import sys

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


def main(argv=None) -> int:
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
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
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
