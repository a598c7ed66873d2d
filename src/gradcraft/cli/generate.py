"""`gradcraft generate`: complete a prompt (or many, interactively) with a trained model."""

import os
import sys

from gradcraft.cli.common import add_model_arguments, positive_int, seed
from gradcraft.errors import UserError


def add_parser(subparsers) -> None:
    from gradcraft.inference.generate import MAX_TEMPERATURE, MIN_TEMPERATURE
    from gradcraft.validation import Value

    p = subparsers.add_parser(
        "generate",
        help="generate text from a trained model",
        description="Greedy by default; --temp enables sampling (with --top_k/--top_p). "
        "With no --prompt and no piped input, opens an interactive session.",
    )
    add_model_arguments(p)
    p.add_argument(
        "--prompt",
        help="one prompt; the completion is printed and the command exits (default: none: "
        "read piped input, or open an interactive session)",
    )
    p.add_argument("--max_tokens", type=positive_int, default=512, help="tokens to generate at most")
    p.add_argument(
        "--temp",
        type=Value(float, low=0, high=MAX_TEMPERATURE, not_between=(0, MIN_TEMPERATURE)),
        default=None,
        help="sampling temperature, 0 (greedy) or 1e-6 to 100 (default: none: greedy)",
    )
    p.add_argument("--top_k", type=positive_int, default=20, help="sample among the k most likely tokens (with --temp)")
    p.add_argument(
        "--top_p",
        type=Value(float, low=0, high=1, low_open=True),
        default=None,
        help="sample among the most likely tokens holding this much probability (default: none: off)",
    )
    p.add_argument("--seed", type=seed, default=None, help="random seed of the sampling (default: none: a fresh one)")
    p.add_argument("--stop", action="append", default=[], help="stop string, repeatable (default: none)")
    add_penalty_arguments(p)
    p.add_argument(
        "--context",
        choices=["stop", "crop"],
        default="stop",
        help="at the model's context length: stop, or crop: go on with the last context-length tokens "
        "(and keep a longer prompt's last ones), as nanoGPT's sample.py does; slower past the context "
        "(default: stop)",
    )
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.set_defaults(func=run)


def add_penalty_arguments(p) -> None:
    """The penalties and filters (gradcraft/sampling.py's `penalize`; docs/inference.md)."""
    from gradcraft.validation import Value

    penalty = Value(float, low=-2, high=2)
    p.add_argument(
        "--frequency_penalty",
        type=penalty,
        default=0.0,
        help="subtract this x each token's count in the generated text from its logit, -2 to 2 (OpenAI's; "
        "default: %(default)s)",
    )
    p.add_argument(
        "--presence_penalty",
        type=penalty,
        default=0.0,
        help="subtract this from the logit of each token the generated text holds, -2 to 2 (OpenAI's; "
        "default: %(default)s)",
    )
    p.add_argument(
        "--repetition_penalty",
        type=Value(float, low=0, high=100, low_open=True),
        default=1.0,
        help="divide the positive logits (multiply the negative ones) of the tokens in the prompt and the "
        "generated text by this (HF's; 1: off, 1.1-1.3 stops small models looping; default: %(default)s)",
    )
    p.add_argument(
        "--min_p",
        type=Value(float, low=0, high=1),
        default=0.0,
        help="with --temp, sample only among tokens at least this x as likely as the most likely (0: off)",
    )
    p.add_argument(
        "--logit_bias",
        action="append",
        default=[],
        metavar="ID=BIAS",
        help="add BIAS (-100 to 100) to token ID's logit; repeatable (-100 bans a token, 100 forces it; default: none)",
    )
    p.add_argument(
        "--split_special_tokens",
        action="store_true",
        help="encode special-token text in the prompt (<|endoftext|>) as plain text, not as the special token",
    )


def parse_logit_bias(items: list) -> dict | None:
    bias = {}
    for item in items:
        token, sep, value = item.partition("=")
        try:
            token_id, amount = int(token), float(value)
        except ValueError:
            token_id = amount = None
        if not sep or token_id is None or token_id < 0 or not -100 <= amount <= 100:
            raise UserError(f"--logit_bias takes ID=BIAS, a token id >= 0 and a bias in [-100, 100], got {item!r}")
        bias[token_id] = amount
    return bias or None


def load(args):
    from gradcraft.device import parse_device
    from gradcraft.inference.run_paths import find_model
    from gradcraft.inference.text import TextGenerator, check_tokenizer, load_model
    from gradcraft.tokenizer import Tokenizer

    device = parse_device(args.device)

    vocab, config, weights = args.vocab, args.config, args.weights
    if args.model_dir:
        found = find_model(args.model_dir, getattr(args, "checkpoint", None))
        vocab, config, weights = vocab or found.vocab, config or found.config, weights or found.weights
    elif getattr(args, "checkpoint", None) is not None:
        raise UserError("--checkpoint picks a checkpoint of the --model_dir run; give --model_dir")
    missing = [flag for flag, value in (("--vocab", vocab), ("--config", config), ("--weights", weights)) if not value]
    if missing:
        raise UserError(f"give --model_dir, or {' '.join(missing)}")
    if not os.path.exists(vocab):
        raise UserError(f"tokenizer file {vocab} does not exist; pass --vocab")
    tokenizer = Tokenizer.load(vocab)
    model, metadata = load_model(config, weights, device, getattr(args, "dtype", "auto"))
    check_tokenizer(tokenizer, model.config, metadata, vocab)
    return TextGenerator(model, tokenizer)


def params_from(args):
    from gradcraft.inference.generate import SamplingParams

    return SamplingParams(
        max_tokens=args.max_tokens,
        temperature=args.temp,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        stop_strings=tuple(args.stop),
        frequency_penalty=args.frequency_penalty,
        presence_penalty=args.presence_penalty,
        repetition_penalty=args.repetition_penalty,
        logit_bias=parse_logit_bias(args.logit_bias),
        min_p=args.min_p,
        context=getattr(args, "context", "stop"),
    )


def stream(generator, prompt: str, params, split_special_tokens: bool = False) -> str:
    """Print the completion as it is produced; returns the stop reason."""

    def on_text(_, piece):
        sys.stdout.write(piece)
        sys.stdout.flush()

    _, reasons = generator.complete([prompt], params, on_text, split_special_tokens)
    sys.stdout.write("\n")
    if reasons[0] == "context":
        print(
            f"[stopped: the model's context length ({generator.model.config.seq_len} tokens) was reached; "
            "--context crop goes on]",
            file=sys.stderr,
        )
    return reasons[0]


def read_piped_prompt(stdin) -> str:
    """The piped prompt, strictly UTF-8 whatever the locale (under C or C.UTF-8, Python's stdin lets
    invalid bytes through as surrogates)."""
    raw = stdin.buffer.read() if hasattr(stdin, "buffer") else stdin.read()
    if isinstance(raw, str):
        if _is_text(raw):
            return raw
        raise UserError("the piped prompt is not valid UTF-8 text; pipe UTF-8 text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(
            f"the piped prompt is not valid UTF-8 text ({e.reason} at byte {e.start}); pipe UTF-8 text"
        ) from None


def _is_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # surrogates: bytes that were not UTF-8
        return False
    return True


def interactive(generator, params, split_special_tokens: bool = False) -> None:
    try:
        import readline  # noqa: F401  (history and line editing for input())
    except ImportError:
        pass
    print(
        "interactive session: enter a prompt; Ctrl-C stops a generation, Ctrl-D (or an empty line twice) exits",
        file=sys.stderr,
    )
    empty = 0
    while True:
        try:
            prompt = input(">>> ")
        except EOFError:
            print(file=sys.stderr)
            return
        except KeyboardInterrupt:
            print(file=sys.stderr)
            continue
        if not _is_text(prompt):
            print("error: the prompt is not valid UTF-8 text; type or paste UTF-8", file=sys.stderr)
            continue
        if not prompt:
            empty += 1
            if empty >= 2:
                return
            continue
        empty = 0
        try:
            stream(generator, prompt, params, split_special_tokens)
        except KeyboardInterrupt:
            print("\n[generation stopped]", file=sys.stderr)
        except UserError as e:
            print(f"error: {e}", file=sys.stderr)


def run(args) -> int:
    params = params_from(args)
    params.validate(0)
    # `<&-` and `>&-` leave Python without sys.stdin / sys.stdout (None)
    if sys.stdout is None:
        raise UserError("stdout is closed, so the completion has nowhere to go; run without >&-")
    if args.prompt is None and sys.stdin is None:
        raise UserError("no --prompt and stdin is closed; pass --prompt, or pipe the prompt in")
    generator = load(args)
    vocab = generator.model.config.vocab_size
    if params.logit_bias and max(params.logit_bias) >= vocab:
        raise UserError(f"--logit_bias names token {max(params.logit_bias)}; the vocabulary has {vocab} tokens")
    split = args.split_special_tokens
    if args.prompt is not None:
        stream(generator, args.prompt, params, split)
    elif not sys.stdin.isatty():
        stream(generator, read_piped_prompt(sys.stdin), params, split)
    else:
        interactive(generator, params, split)
    return 0
