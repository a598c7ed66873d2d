"""`gradcraft serve`: an OpenAI-compatible HTTP completions server for a trained model."""

import os

from gradcraft.cli.common import add_model_arguments, port, positive_int
from gradcraft.cli.generate import load
from gradcraft.errors import UserError

DESCRIPTION = ("Serve a trained model over HTTP: OpenAI-compatible POST /v1/completions (streaming with "
               "\"stream\": true), GET /v1/models and GET /health. Requests run one at a time in arrival order; "
               "a request whose client disconnects is cancelled. One access-log line per request goes to stderr.")


def add_parser(subparsers) -> None:
    from gradcraft.inference.server import MAX_BODY_BYTES

    p = subparsers.add_parser("serve", help="serve a model over HTTP (OpenAI-compatible /v1/completions)",
                              description=DESCRIPTION)
    add_model_arguments(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s, this machine only)")
    p.add_argument("--port", type=port, default=8000, help="TCP port, 1-65535 (default: %(default)s)")
    p.add_argument("--name", default=None, help="model name reported by /v1/models (default: the model_dir name)")
    p.add_argument("--device", default="cpu", help="'cpu', 'cuda' or 'cuda:N' (default: %(default)s)")
    p.add_argument("--max_body_bytes", type=positive_int, default=MAX_BODY_BYTES,
                   help="largest request body accepted; larger ones get a 413 (default: %(default)s)")
    p.add_argument("--docs", action="store_true", help="also serve the API docs at /docs and /openapi.json")
    p.set_defaults(func=run)


def _check_device(device: str) -> str:
    """The canonical device, or a UserError (one line): a wrong name, or a GPU this machine lacks."""
    from gradcraft import device as devices
    parse = getattr(devices, "parse_device", None)  # the shared parser (checks availability too)
    return parse(device) if parse is not None else devices.canonical(device)


def run(args) -> int:
    from gradcraft.inference.server import bind, serve

    args.device = _check_device(args.device)
    if args.max_body_bytes < 1:
        raise UserError(f"--max_body_bytes must be at least 1, got {args.max_body_bytes}")
    sock = bind(args.host, args.port)  # before loading the model: a taken port fails at once
    try:
        generator = load(args)
        name = args.name or os.path.basename(os.path.normpath(args.model_dir or os.path.dirname(args.weights)))
        print(f"serving {name} on http://{args.host}:{args.port} (POST /v1/completions, GET /v1/models, "
              f"GET /health{', /docs' if args.docs else ''})", flush=True)
        serve(generator, name, args.host, args.port, sock=sock, max_body_bytes=args.max_body_bytes, docs=args.docs)
    finally:
        sock.close()
    return 0
