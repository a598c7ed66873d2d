"""`gradcraft tokenize`: learn a BPE vocabulary and turn a folder of text into token files.

    gradcraft tokenize --data_dir data/raw_data --ext .txt --vocab_size 8192

Each matching file (recursive, sorted by path) is one document, preceded by
the document separator (<|endoftext|>, or the first special token). The
vocabulary is learned on a sample of about --sample_mb MB of the training
documents, unless --vocab_path already exists: then it is reused (pass
--retrain to learn a new one). Nothing is written until everything has
succeeded: token files and the tokenizer are written to temp files and
renamed into place at the end. A run without --val_fraction removes the
validation file an earlier run left next to --output_path (saying so): it was
cut from another corpus or split, and `gradcraft train` would evaluate on it.
It is derived data (the same command with --val_fraction remakes it), so
removing it loses nothing; refusing would only make the user delete it by hand.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys
import time

from gradcraft.cli.common import fraction, positive_float, positive_int
from gradcraft.errors import UserError

DEFAULT_DATA_DIR = os.path.join("data", "raw_data")
DEFAULT_OUTPUT = os.path.join("data", "tokens.bin")
SMALL_INPUT = 4 << 20  # below this many bytes, worker processes cost more than they save


def add_parser(subparsers):
    p = subparsers.add_parser(
        "tokenize", help="learn a BPE vocabulary and write token files",
        description="Learn a byte-level BPE vocabulary from text files and encode them into a token file "
                    "(see docs/tokenizer.md).")
    p.add_argument("--data_dir", default=DEFAULT_DATA_DIR, help="folder of input files, read recursively (default: %(default)s)")
    p.add_argument("--exclude", default="", help="folder names to skip, comma separated, e.g. site-packages,tests "
                                                 "(default: none)")
    p.add_argument("--ext", default=".txt", help="file name ending(s) to read, comma separated, e.g. .py or .txt,.md (default: %(default)s)")
    p.add_argument("--output_path", default=DEFAULT_OUTPUT, help="token file to write (default: %(default)s)")
    p.add_argument("--vocab_path", default=None, help="tokenizer file to write, or to reuse if it exists (default: tokenizer.json next to --output_path)")
    p.add_argument("--retrain", action="store_true", help="learn a new vocabulary even if --vocab_path exists (default: reuse it)")
    p.add_argument("--vocab_size", type=positive_int, default=8192, help="ids in all: 256 bytes + merges + special tokens (default: %(default)s)")
    p.add_argument("--sample_mb", type=positive_float, default=200, help="MB of text used to learn the vocabulary (default: %(default)s)")
    p.add_argument("--pattern", choices=["gpt2", "gpt4", "none"], default="gpt4", help="pre-tokenization split pattern (default: %(default)s)")
    p.add_argument("--special_tokens", default="<|endoftext|>", help="comma-separated special tokens; the first separates documents (default: %(default)s)")
    p.add_argument("--val_fraction", type=fraction, default=0.0, help="fraction of documents held out into <output stem>.val<suffix>; "
                   "0 also removes such a file left by an earlier run (default: %(default)s)")
    p.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1, help="worker processes (default: CPU count, %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress bars (default: show them)")
    p.set_defaults(func=run)
    return p


def val_path_for(output_path: str) -> str:
    """data/tokens.bin -> data/tokens.val.bin; data/tokens -> data/tokens.val"""
    stem, suffix = os.path.splitext(output_path)
    return f"{stem}.val{suffix}"


def find_files(data_dir: str, exts: list[str], exclude: list[str] = ()) -> list[str]:
    """Files under data_dir ending in one of exts, skipping folders named in exclude, in sorted order."""
    if not os.path.isdir(data_dir):
        raise UserError(f"data directory {data_dir} does not exist (pass --data_dir)")
    found = []
    for root, dirs, files in os.walk(data_dir):
        dirs[:] = sorted(d for d in dirs if d not in exclude)
        found.extend(os.path.join(root, f) for f in sorted(files) if f.endswith(tuple(exts)))
    found.sort()  # plain sorted path order, the order documents are written in
    if not found:
        raise UserError(f"no {'/'.join('*' + e for e in exts)} files under {data_dir} (choose others with --ext)")
    return found


def split_documents(files: list[str], data_dir: str, val_fraction: float):
    """Deterministic split by document: the files whose sha256(relative path)
    is smallest go to validation, so the split does not depend on file order
    or on the machine."""
    if val_fraction <= 0:
        return files, []
    if len(files) < 2:
        raise UserError(f"--val_fraction needs at least 2 non-empty documents; {data_dir} has {len(files)}")
    n_val = min(len(files) - 1, max(1, round(val_fraction * len(files))))
    key = {f: hashlib.sha256(os.path.relpath(f, data_dir).encode("utf-8", "surrogateescape")).hexdigest() for f in files}
    val = set(sorted(files, key=key.get)[:n_val])
    return [f for f in files if f not in val], [f for f in files if f in val]


def check_writable(path: str, what: str) -> None:
    """Fail before any work if `path` cannot be written (nothing is created)."""
    if os.path.isdir(path):
        raise UserError(f"{what} {path} is a directory; give a file path")
    folder = os.path.dirname(os.path.abspath(path))
    probe = folder
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise UserError(f"cannot write {what} {path}: {probe} is not a directory")
    if not os.access(probe, os.W_OK):
        raise UserError(f"cannot write {what} {path}: {probe} is not writable")


def _bar(args, total, desc):
    from tqdm import tqdm
    tqdm.monitor_interval = 0  # no monitor thread: worker processes are forked
    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, disable=args.quiet, file=sys.stderr,
                mininterval=0.5)


def learn(args, chunks, special_tokens, workers):
    """Learn a vocabulary on a seeded random sample of chunks."""
    from gradcraft.tokenizer.parallel import count_pieces_parallel
    from gradcraft.tokenizer.train import learn_merges, tokenizer_from_merges

    budget = int(args.sample_mb * 1e6)
    order = list(range(len(chunks)))
    random.Random(0).shuffle(order)
    picked, size = [], 0
    for i in order:
        if size >= budget:
            break
        picked.append(chunks[i])
        size += chunks[i][3] - chunks[i][2]
    picked.sort()
    n_merges = args.vocab_size - 256 - len(special_tokens)
    with _bar(args, size, "counting pieces") as bar:
        counts = count_pieces_parallel(picked, args.pattern, special_tokens,
                                       workers if size > SMALL_INPUT else 1, progress=bar.update)
    pairs = learn_merges(counts, n_merges, progress=not args.quiet)
    return tokenizer_from_merges(pairs, args.pattern, special_tokens), size


def encode_documents(tok, chunks, sep_id, workers, dtype, bar):
    """Yield token arrays: the separator before each document, then its chunks."""
    import numpy as np
    from gradcraft.tokenizer.parallel import encode_chunks

    sep = np.array([sep_id], dtype=dtype) if sep_id is not None else None
    last_doc = None
    for (doc, _, start, end), arr in encode_chunks(tok, chunks, workers, dtype=dtype):
        if doc != last_doc and sep is not None:
            yield sep
        last_doc = doc
        bar.update(end - start)
        yield arr


def run(args) -> int:
    """Tokenize under a lock on the output's folder (the nearest one that exists), so that two
    `gradcraft tokenize` never mix their token files and tokenizer in one folder."""
    from gradcraft.training.runlock import lock_directory
    folder = os.path.dirname(os.path.abspath(args.output_path))
    while not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    with lock_directory(folder, "tokenize"):
        return tokenize(args)


def tokenize(args) -> int:
    from gradcraft.data.tokenfile import dtype_for_vocab, write_token_file
    from gradcraft.tokenizer.formats import load_tokenizer, save_tokenizer
    from gradcraft.tokenizer.parallel import plan_chunks

    t0 = time.perf_counter()
    special_tokens = [s for s in dict.fromkeys(x.strip() for x in args.special_tokens.split(",")) if s]
    exts = [e.strip() for e in args.ext.split(",") if e.strip()]
    vocab_path = args.vocab_path or os.path.join(os.path.dirname(args.output_path), "tokenizer.json")
    val_path = val_path_for(args.output_path)
    reuse = os.path.exists(vocab_path) and not args.retrain
    if args.workers < 1:
        raise UserError(f"--workers must be at least 1, not {args.workers}")
    if not 0 <= args.val_fraction < 1:
        raise UserError(f"--val_fraction must be in [0, 1), not {args.val_fraction}")
    if not reuse:
        if args.sample_mb <= 0:
            raise UserError(f"--sample_mb must be positive, not {args.sample_mb}")
        from gradcraft.tokenizer.train import check_vocab_size
        check_vocab_size(args.vocab_size, special_tokens)
    check_writable(args.output_path, "output")
    stale_val = args.val_fraction == 0 and os.path.exists(val_path)
    if args.val_fraction > 0 or stale_val:
        check_writable(val_path, "validation output")
    if not reuse:
        check_writable(vocab_path, "vocabulary")

    files = find_files(args.data_dir, exts, [e.strip() for e in args.exclude.split(",") if e.strip()])
    chunks = plan_chunks(files, args.pattern)
    total_bytes = sum(c[3] - c[2] for c in chunks)
    if total_bytes == 0:
        raise UserError(f"all {len(files)} matching files under {args.data_dir} are empty")
    docs = sorted({c[1] for c in chunks})
    train_docs, val_docs = split_documents(docs, args.data_dir, args.val_fraction)
    val_set = set(val_docs)
    train_chunks = [c for c in chunks if c[1] not in val_set]
    val_chunks = [c for c in chunks if c[1] in val_set]
    workers = args.workers if total_bytes > SMALL_INPUT else 1

    if reuse:
        tok = load_tokenizer(vocab_path)
        print(f"reusing the vocabulary in {vocab_path} (pass --retrain to learn a new one)", file=sys.stderr)
        sample = 0
    else:
        tok, sample = learn(args, train_chunks, special_tokens, workers)
    t_learn = time.perf_counter() - t0
    if tok.pattern_name != args.pattern:
        # A reused vocabulary brings its own pattern, which decides where a
        # file may be cut into chunks (only gpt2/gpt4 allow it).
        chunks = plan_chunks(files, tok.pattern)
        train_chunks = [c for c in chunks if c[1] not in val_set]
        val_chunks = [c for c in chunks if c[1] in val_set]
    sep_id = tok.special_tokens.get("<|endoftext|>", next(iter(tok.special_tokens.values()), None))
    dtype = dtype_for_vocab(tok.vocab_size)

    # Everything goes to temp names first, renamed only when all succeeded.
    created_dirs = _make_dirs([args.output_path, val_path if val_chunks else None, None if reuse else vocab_path])
    pending = []
    try:
        counts = {}
        with _bar(args, total_bytes, "encoding") as bar:
            for path, part in ((args.output_path, train_chunks), (val_path, val_chunks)):
                if path == val_path and not part:
                    continue
                tmp = _temp_name(path)
                pending.append((tmp, path))
                counts[path] = write_token_file(tmp, encode_documents(tok, part, sep_id, workers, dtype, bar),
                                                vocab_size=tok.vocab_size, fingerprint=tok.fingerprint, dtype=dtype)
        if not reuse:
            tmp = _temp_name(vocab_path)
            save_tokenizer(tok, tmp)
            pending.append((tmp, vocab_path))
        for tmp, path in pending:
            os.replace(tmp, path)
        pending = []
        if stale_val:
            os.unlink(val_path)
    except OSError as e:
        raise UserError(f"cannot read or write {e.filename or 'a file'}: {e.strerror}") from None
    finally:
        for tmp, _ in pending:
            if os.path.exists(tmp):
                os.unlink(tmp)
        if pending:
            for d in reversed(created_dirs):
                if os.path.isdir(d) and not os.listdir(d):
                    os.rmdir(d)

    elapsed = time.perf_counter() - t0
    n_tokens = sum(counts.values())
    print(f"{len(files)} files ({len(docs)} non-empty documents), {total_bytes / 1e6:.2f} MB -> {n_tokens:,} tokens, "
          f"{total_bytes / max(n_tokens, 1):.2f} bytes/token")
    if not reuse and tok.vocab_size < args.vocab_size:
        print(f"note: the vocabulary has {tok.vocab_size} ids, fewer than --vocab_size {args.vocab_size}: the "
              f"{sample / 1e6:.2f} MB sample had no more pairs to merge (more text, or a smaller --vocab_size)")
    print(f"vocabulary: {tok.vocab_size} ids, pattern {tok.pattern_name}, fingerprint {tok.fingerprint}, "
          f"{'reused' if reuse else f'learned on {sample / 1e6:.2f} MB'}: {vocab_path}")
    for path, n in counts.items():
        print(f"wrote {path}: {n:,} tokens ({dtype.name})")
    if stale_val:
        print(f"removed {val_path}, the validation split of an earlier run (this run has none: --val_fraction 0), "
              "so that `gradcraft train` does not evaluate on it")
    print(f"time: {elapsed:.1f} s (vocabulary {t_learn:.1f} s, encoding {elapsed - t_learn:.1f} s, "
          f"{total_bytes / 1e6 / max(elapsed - t_learn, 1e-9):.1f} MB/s on {workers} worker{'s' * (workers > 1)})")
    return 0


def _temp_name(path: str) -> str:
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f".{name}.partial-{os.getpid()}")


def _make_dirs(paths) -> list[str]:
    """Create missing parent folders; return the ones created (to remove on failure)."""
    created = []
    for p in paths:
        if p is None:
            continue
        missing, d = [], os.path.dirname(os.path.abspath(p))
        while not os.path.exists(d):
            missing.append(d)
            d = os.path.dirname(d)
        for d in reversed(missing):
            try:
                os.mkdir(d)
            except OSError as e:
                raise UserError(f"cannot create folder {d}: {e.strerror}") from None
            created.append(d)
    return created
