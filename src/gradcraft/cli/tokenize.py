"""`gradcraft tokenize`: learn a BPE vocabulary and turn a folder of text into token files.

    gradcraft tokenize --data_dir data/raw_data --ext .txt --vocab_size 8192

The flags are `gradcraft.data.prepare.prepare_dataset`'s parameters (its docstring says what it
does); this module parses them, holds the output folder's lock and prints the summary.
"""

from __future__ import annotations

import os
import sys

from gradcraft.cli.common import fraction, positive_float, positive_int

DEFAULT_DATA_DIR = os.path.join("data", "raw_data")
DEFAULT_OUTPUT = os.path.join("data", "tokens.bin")


def add_parser(subparsers):
    p = subparsers.add_parser(
        "tokenize",
        help="learn a BPE vocabulary and write token files",
        description="Learn a byte-level BPE vocabulary from text files and encode them into a token file "
        "(see docs/tokenizer.md).",
    )
    p.add_argument(
        "--data_dir", default=DEFAULT_DATA_DIR, help="folder of input files, read recursively (default: %(default)s)"
    )
    p.add_argument(
        "--exclude", default="", help="folder names to skip, comma separated, e.g. site-packages,tests (default: none)"
    )
    p.add_argument(
        "--ext",
        default=".txt",
        help="file name ending(s) to read, comma separated, e.g. .py or .txt,.md (default: %(default)s)",
    )
    p.add_argument("--output_path", default=DEFAULT_OUTPUT, help="token file to write (default: %(default)s)")
    p.add_argument(
        "--vocab_path",
        default=None,
        help="tokenizer file to write, or to reuse if it exists (default: tokenizer.json next to --output_path)",
    )
    p.add_argument(
        "--retrain", action="store_true", help="learn a new vocabulary even if --vocab_path exists (default: reuse it)"
    )
    p.add_argument(
        "--vocab_size",
        type=positive_int,
        default=8192,
        help="ids in all: 256 bytes + merges + special tokens (default: %(default)s)",
    )
    p.add_argument(
        "--sample_mb",
        type=positive_float,
        default=200,
        help="MB of text used to learn the vocabulary (default: %(default)s)",
    )
    p.add_argument(
        "--pattern",
        choices=["gpt2", "gpt4", "none"],
        default="gpt4",
        help="pre-tokenization split pattern (default: %(default)s)",
    )
    p.add_argument(
        "--special_tokens",
        default="<|endoftext|>",
        help="comma-separated special tokens; the first separates documents (default: %(default)s)",
    )
    p.add_argument(
        "--val_fraction",
        type=fraction,
        default=0.0,
        help="fraction of documents held out into <output stem>.val<suffix>; "
        "0 also removes such a file left by an earlier run (default: %(default)s)",
    )
    p.add_argument(
        "--workers",
        type=positive_int,
        default=os.cpu_count() or 1,
        help="worker processes (default: CPU count, %(default)s)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars (default: show them)")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    """Tokenize under a lock on the output's folder (the nearest one that exists), so that two
    `gradcraft tokenize` never mix their token files and tokenizer in one folder."""
    from gradcraft.training.runlock import lock_directory

    folder = os.path.dirname(os.path.abspath(args.output_path))
    while not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    with lock_directory(folder, "tokenize"):
        from gradcraft.data.prepare import sweep_temporaries

        swept = sweep_temporaries(folder)  # a killed earlier tokenize's (we hold the folder's lock)
        if swept:
            print(f"note: removed {len(swept)} temporary files a stopped tokenize left in {folder}", file=sys.stderr)
        return tokenize(args)


def tokenize(args) -> int:
    from gradcraft.data.prepare import prepare_dataset

    s = prepare_dataset(
        args.data_dir,
        args.output_path,
        vocab_path=args.vocab_path,
        retrain=args.retrain,
        vocab_size=args.vocab_size,
        sample_mb=args.sample_mb,
        pattern=args.pattern,
        special_tokens=args.special_tokens.split(","),
        exts=args.ext.split(","),
        exclude=args.exclude.split(","),
        val_fraction=args.val_fraction,
        workers=args.workers,
        progress=not args.quiet,
    )
    tok, total_bytes, n_tokens = s["tokenizer"], s["bytes"], sum(s["tokens"].values())
    print(
        f"{s['files']} files ({s['documents']} non-empty documents), {total_bytes / 1e6:.2f} MB -> "
        f"{n_tokens:,} tokens, {total_bytes / max(n_tokens, 1):.2f} bytes/token"
    )
    if not s["reused"] and tok.vocab_size < args.vocab_size:
        print(
            f"note: the vocabulary has {tok.vocab_size} ids, fewer than --vocab_size {args.vocab_size}: the "
            f"{s['sample_bytes'] / 1e6:.2f} MB sample had no more pairs to merge (more text, or a smaller "
            "--vocab_size)"
        )
    how = "reused" if s["reused"] else f"learned on {s['sample_bytes'] / 1e6:.2f} MB"
    print(
        f"vocabulary: {tok.vocab_size} ids, pattern {tok.pattern_name}, fingerprint {tok.fingerprint}, "
        f"{how}: {s['vocab_path']}"
    )
    for path, n in s["tokens"].items():
        print(f"wrote {path}: {n:,} tokens ({s['dtype'].name})")
    if s["removed_val"]:
        print(
            f"removed {s['removed_val']}, the validation split of an earlier run (this run has none: "
            "--val_fraction 0), so that `gradcraft train` does not evaluate on it"
        )
    elapsed, t_learn, workers = s["seconds"], s["learn_seconds"], s["workers"]
    print(
        f"time: {elapsed:.1f} s (vocabulary {t_learn:.1f} s, encoding {elapsed - t_learn:.1f} s, "
        f"{total_bytes / 1e6 / max(elapsed - t_learn, 1e-9):.1f} MB/s on {workers} worker{'s' * (workers > 1)})"
    )
    return 0
