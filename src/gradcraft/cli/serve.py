"""`gradcraft serve`: an OpenAI-compatible HTTP completions server for a trained model."""

import os
import sys

from gradcraft.cli.common import add_model_arguments, non_negative_int, port, positive_float, positive_int
from gradcraft.cli.generate import load
from gradcraft.errors import UserError

DESCRIPTION = (
    "Serve a trained model over HTTP: OpenAI-compatible POST /v1/completions and "
    'POST /v1/chat/completions (streaming with "stream": true), GET /v1/models, GET /health, and a '
    "browser playground at GET / (off with --no_ui). "
    "Concurrent requests are batched continuously (up to --max_batch sequences decoded together, "
    "--max_queue more waiting; beyond that, 429); a request whose client disconnects is cancelled. "
    "One access-log line per request goes to stderr."
)


def add_parser(subparsers) -> None:
    from gradcraft.inference.server import MAX_BODY_BYTES

    p = subparsers.add_parser(
        "serve", help="serve a model over HTTP (OpenAI-compatible /v1/completions)", description=DESCRIPTION
    )
    add_model_arguments(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s, this machine only)")
    p.add_argument("--port", type=port, default=8000, help="TCP port, 1-65535 (default: %(default)s)")
    p.add_argument("--name", default=None, help="model name reported by /v1/models (default: the model_dir name)")
    p.add_argument(
        "--alias",
        action="append",
        default=[],
        help="another name a request's `model` may give, repeatable (a request naming any other model "
        "gets a 404 model_not_found; one with no `model` is served; default: none)",
    )
    p.add_argument("--device", default="cpu", help="'cpu', 'cuda' or 'cuda:N' (default: %(default)s)")
    p.add_argument(
        "--max_body_bytes",
        type=positive_int,
        default=MAX_BODY_BYTES,
        help="largest request body accepted; larger ones get a 413 (default: %(default)s)",
    )
    p.add_argument("--docs", action="store_true", help="also serve the API docs at /docs and /openapi.json")
    p.add_argument("--no_ui", action="store_true", help="do not serve the browser playground at / (a 404 there)")
    add_batching_arguments(p)
    p.set_defaults(func=run)


def add_batching_arguments(p) -> None:
    """Continuous batching, limits and access (inference/batching.py, inference/server.py)."""
    from gradcraft.inference.server import MAX_QUEUE, REQUEST_TIMEOUT, SLOTS

    p.add_argument(
        "--max_batch",
        type=positive_int,
        default=SLOTS,
        help="sequences decoded together: the KV cache's slots, allocated once (default: %(default)s)",
    )
    p.add_argument(
        "--max_queue",
        type=non_negative_int,
        default=MAX_QUEUE,
        help="sequences that may wait for a slot; more get a 429 (default: %(default)s)",
    )
    p.add_argument(
        "--prefill_chunk",
        type=positive_int,
        default=256,
        help="prompt tokens prefilled between two decoding steps (default: %(default)s)",
    )
    p.add_argument(
        "--step_prompts",
        type=non_negative_int,
        default=None,
        help="prompts of at most this many tokens are fed through the batched decoding step, a token "
        "a step, instead of a prefill pass of their own; 0: prefill every prompt (default: 32 on a GPU, "
        "0 on the CPU)",
    )
    p.add_argument(
        "--request_timeout",
        type=positive_float,
        default=REQUEST_TIMEOUT,
        help="seconds a request may take, waiting included; later, a 503 (default: %(default)s)",
    )
    from gradcraft.inference.http_front import Limits

    limits = Limits()
    p.add_argument(
        "--max_connections",
        type=positive_int,
        default=limits.max_connections,
        help="open connections at most (also bounded by the file-descriptor limit); more get a 503 "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--header_timeout",
        type=positive_float,
        default=limits.header_timeout,
        help="seconds a connection has to send a whole request head; then it is closed (default: %(default)s)",
    )
    p.add_argument(
        "--idle_timeout",
        type=positive_float,
        default=limits.idle_timeout,
        help="seconds an idle keep-alive connection stays open between requests (default: %(default)s)",
    )
    p.add_argument(
        "--body_timeout",
        type=positive_float,
        default=limits.body_timeout,
        help="seconds a request body may pause; then a 408 (default: %(default)s)",
    )
    p.add_argument(
        "--api_key",
        default=None,
        help="require 'Authorization: Bearer <key>' on /v1/ (default: the GRADCRAFT_API_KEY "
        "environment variable, else no key)",
    )


def _check_batching(args) -> None:
    for flag, value, least in (
        ("--max_batch", args.max_batch, 1),
        ("--max_queue", args.max_queue, 0),
        ("--step_prompts", 0 if args.step_prompts is None else args.step_prompts, 0),
        ("--prefill_chunk", args.prefill_chunk, 1),
    ):
        if value < least:
            raise UserError(f"{flag} must be at least {least}, got {value}")
    if not args.request_timeout > 0:
        raise UserError(f"--request_timeout must be a positive number of seconds, got {args.request_timeout}")
    if args.api_key is None:
        args.api_key = os.environ.get("GRADCRAFT_API_KEY") or None
    if args.api_key is not None and not args.api_key.strip():
        raise UserError("--api_key is empty: give a key, or leave the flag out to serve without one")


def _check_sizes(args) -> None:
    """The size flags against the model's config and this machine's memory (serve_limits.py), and
    the connection limits handed to the HTTP front."""
    from gradcraft.inference import http_front
    from gradcraft.inference.serve_limits import check_serve_limits
    from gradcraft.inference.text import paths_from_model_dir
    from gradcraft.training.runfiles import read_model_config

    limits = http_front.LIMITS
    limits.max_connections = args.max_connections
    limits.header_timeout, limits.idle_timeout = args.header_timeout, args.idle_timeout
    limits.body_timeout = args.body_timeout
    config_path = args.config or (paths_from_model_dir(args.model_dir)[1] if args.model_dir else None)
    if not config_path or not os.path.exists(config_path):
        return  # loading says what is missing
    config = read_model_config(config_path)
    check_serve_limits(config, args.device, args.max_batch, args.max_queue, args.max_body_bytes, args.max_connections)


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
    _check_batching(args)
    _check_sizes(args)  # before anything is allocated: the flags against the model and the memory
    sock = bind(args.host, args.port)  # before loading the model: a taken port fails at once
    if not _is_loopback(args.host):
        print(
            f"warning: --host {args.host} lets other machines reach this server"
            f"{'' if args.api_key else ' with no API key (--api_key)'}; the default 127.0.0.1 serves "
            "this machine only",
            file=sys.stderr,
            flush=True,
        )
    try:
        generator = load(args)
        name = args.name or os.path.basename(os.path.normpath(args.model_dir or os.path.dirname(args.weights)))
        print(
            f"serving {name} on http://{args.host}:{args.port} (POST /v1/completions, POST /v1/chat/completions, "
            f"GET /v1/models, GET /health{', /docs' if args.docs else ''}"
            f"{'' if args.no_ui else ', playground at /'}; {args.max_batch} sequences at once)",
            flush=True,
        )
        serve(
            generator,
            name,
            args.host,
            args.port,
            sock=sock,
            max_body_bytes=args.max_body_bytes,
            docs=args.docs,
            slots=args.max_batch,
            max_queue=args.max_queue,
            prefill_chunk=args.prefill_chunk,
            step_prompts=args.step_prompts,
            request_timeout=args.request_timeout,
            api_key=args.api_key,
            ui=not args.no_ui,
            aliases=tuple(args.alias),
        )
    finally:
        sock.close()
    return 0
