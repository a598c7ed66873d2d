"""`gradcraft <subcommand>`: dispatch to one module per subcommand.

Each subcommand module exposes `add_parser(subparsers)` (which registers its
flags and sets `func`) and a `run(args)` that does the work. A `UserError`
raised anywhere becomes one line on stderr and exit status 2.
"""

import argparse
import importlib
import sys

from gradcraft.errors import UserError

# subcommand name -> module under gradcraft.cli
SUBCOMMANDS = {
    "demo": "demo",
    "tokenize": "tokenize",
    "train": "train",
    "generate": "generate",
    "serve": "serve",
    "bench": "bench",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gradcraft", description="Train and run small language models with the gradcraft engine.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module_name in SUBCOMMANDS.values():
        module = importlib.import_module(f"gradcraft.cli.{module_name}")
        module.add_parser(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = args.func(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
