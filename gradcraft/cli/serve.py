"""`gradcraft serve`: an OpenAI-compatible HTTP completions server for a trained model."""

import os

from gradcraft.cli.generate import load


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("serve", help="serve a model over HTTP (OpenAI-compatible /v1/completions)")
    p.add_argument("--model_dir", help="a training run: takes the tokenizer, config and weights from it")
    p.add_argument("--vocab")
    p.add_argument("--config")
    p.add_argument("--weights")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s, this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--name", default=None, help="model name reported by /v1/models (default: the model_dir name)")
    p.add_argument("--device", default="cpu")
    p.set_defaults(func=run)


def run(args) -> int:
    from gradcraft.inference.server import serve

    generator = load(args)
    name = args.name or os.path.basename(os.path.normpath(args.model_dir or os.path.dirname(args.weights)))
    print(f"serving {name} on http://{args.host}:{args.port} (POST /v1/completions, GET /v1/models, GET /health)",
          flush=True)
    serve(generator, name, args.host, args.port)
    return 0
