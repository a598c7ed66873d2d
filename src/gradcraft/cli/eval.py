"""`gradcraft eval`: perplexity and bits per byte of a text or token file, and multiple-choice accuracy
on a HellaSwag-format jsonl, for a trained model (gradcraft/inference/evaluate.py)."""

import json
import os
import sys

from gradcraft.cli.common import add_model_arguments, positive_int
from gradcraft.errors import UserError

DESCRIPTION = (
    "Evaluate a trained model: perplexity and bits per byte of a text (--text) or token file (--tokens), "
    "with sliding windows of the context (--stride apart; Hugging Face's method), and multiple-choice "
    "accuracy (acc, and acc_norm normalised by the endings' lengths, as lm-eval-harness computes them) on a "
    "jsonl of {ctx, endings, label} lines, HellaSwag's format (--choices). Results are printed and, with "
    "--out, written as JSON."
)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "eval", help="perplexity and multiple-choice accuracy of a model", description=DESCRIPTION
    )
    add_model_arguments(p)
    p.add_argument("--text", help="a UTF-8 text file to measure perplexity and bits per byte on")
    p.add_argument("--tokens", help="a token file (from `gradcraft tokenize`) to measure them on")
    p.add_argument("--choices", help="a HellaSwag-format jsonl for multiple-choice accuracy")
    p.add_argument(
        "--context",
        type=positive_int,
        default=None,
        help="tokens in a perplexity window (default: the model's context length); with --choices, the most "
        "tokens of a context and ending scored together, the first only as context (default: the model's "
        "context length + 1: the model sees its whole context); lm-eval-harness through `serve` with "
        "max_length=M scores what --context M-1 does",
    )
    p.add_argument(
        "--stride",
        type=positive_int,
        default=None,
        help="tokens between the starts of two perplexity windows, 1 to --context; below it, each window "
        "scores only its last --stride tokens, which see more context (default: --context: windows "
        "side by side)",
    )
    p.add_argument("--batch_size", type=positive_int, default=4, help="perplexity windows run together")
    p.add_argument("--limit", type=positive_int, default=None, help="only the first N multiple-choice documents")
    p.add_argument("--out", default=None, help="write the results as JSON to this file")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: %(default)s)")
    p.add_argument("--no_progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=run)


def _bar(args, unit: str, what: str, total: int):
    from tqdm import tqdm

    return tqdm(total=total, unit=unit, desc=what, dynamic_ncols=True, disable=args.no_progress, file=sys.stderr)


def _text_tokens(path: str, tokenizer) -> list:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise UserError(f"{path} does not exist") from None
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text; give a token file with --tokens") from None
    return tokenizer.encode(text, allowed_special="all")  # special tokens' text as the tokens (as generate)


def _file_tokens(path: str, tokenizer):
    from gradcraft.data.tokenfile import read_token_file

    tokens, header = read_token_file(path)
    if header.fingerprint and header.fingerprint != tokenizer.fingerprint:
        raise UserError(
            f"{path} was made by a tokenizer of fingerprint {header.fingerprint}, not the model's "
            f"({tokenizer.fingerprint}); tokenize the text with the model's tokenizer"
        )
    if header.vocab_size and header.vocab_size > tokenizer.vocab_size:
        raise UserError(
            f"{path} holds ids of a {header.vocab_size}-token vocabulary; the model's has {tokenizer.vocab_size}"
        )
    return tokens


def run(args) -> int:
    from gradcraft.cli.generate import load
    from gradcraft.inference import evaluate

    if not (args.text or args.tokens or args.choices):
        raise UserError("give --text, --tokens or --choices: what to evaluate on")
    for flag, path in (("--text", args.text), ("--tokens", args.tokens), ("--choices", args.choices)):
        if path is not None and not os.path.isfile(path):
            raise UserError(f"{flag} {path} does not exist")
    generator = load(args)
    model, tokenizer = generator.model, generator.tokenizer
    model.eval()
    seq_len = model.config.seq_len
    context = args.context or seq_len
    if not 2 <= context <= seq_len:  # (a token and the one it predicts)
        raise UserError(f"--context must be between 2 and the model's context length {seq_len}, got {context}")
    stride = args.stride or context
    if stride > context:
        raise UserError(f"--stride must be at most the context ({context}), got {stride}")
    results = {"model": args.model_dir or args.weights, "device": args.device}
    for flag, path in (("text", args.text), ("tokens", args.tokens)):
        if path is None:
            continue
        tokens = _text_tokens(path, tokenizer) if flag == "text" else _file_tokens(path, tokenizer)
        total = len(evaluate.windows(len(tokens), context, stride))
        with _bar(args, "window", f"perplexity {os.path.basename(path)}", total) as bar:
            result = evaluate.perplexity(model, tokenizer, tokens, context, stride, args.batch_size, bar)
        results[f"perplexity_{flag}"] = dict(file=path, **result)
        bpb = result["bits_per_byte"]
        print(
            f"{path}: perplexity {result['perplexity']:.4f}, loss {result['loss']:.4f} nats/token, "
            f"{'n/a' if bpb is None else f'{bpb:.4f}'} bits/byte ({result['scored_tokens']} tokens scored, "
            f"context {context}, stride {stride})"
        )
    if args.choices:
        docs = evaluate.read_choices(args.choices, args.limit)
        with _bar(args, "doc", f"choices {os.path.basename(args.choices)}", len(docs)) as bar:
            # (the model sees one token fewer than a scored sequence holds)
            seen = args.context - 1 if args.context else seq_len
            result = evaluate.multiple_choice(model, tokenizer, docs, seen, bar)
        results["choices"] = dict(file=args.choices, **result)
        print(
            f"{args.choices}: acc {result['acc']:.4f}, acc_norm {result['acc_norm']:.4f} ({result['docs']} documents)"
        )
    if args.out:
        from gradcraft.atomic import write_text

        write_text(args.out, json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0
