"""The dataset pipeline as a library function: learn (or reuse) a BPE tokenizer and encode a folder
of text into token files, with an optional validation split. `gradcraft tokenize` parses its flags
and calls `prepare_dataset`; Python code can call it alike:

    from gradcraft.data.prepare import prepare_dataset
    summary = prepare_dataset("data/raw_data", "data/tokens.bin", vocab_size=8192, val_fraction=0.05)

Each matching file (recursive, sorted by path) is one document, preceded by the document separator
(<|endoftext|>, or the first special token). The vocabulary is learned on a sample of about
`sample_mb` MB of the training documents, unless `vocab_path` already exists: then it is reused
(`retrain=True` learns a new one). Nothing is written until everything has succeeded: token files
and the tokenizer are written to temp names and renamed into place at the end. A run without a
validation split removes the one an earlier run left next to `output_path` (it was cut from
another corpus or split, and training would evaluate on it); it is derived data, so nothing is lost.
Callers that may run concurrently on one folder hold its lock (cli/tokenize.py does).
"""

from __future__ import annotations

import hashlib
import os
import random
import sys
import time

from gradcraft.data.tokenfile import val_path_for
from gradcraft.errors import UserError

SMALL_INPUT = 4 << 20  # below this many bytes, worker processes cost more than they save


def prepare_dataset(
    data_dir: str,
    output_path: str,
    *,
    vocab_path: str | None = None,
    retrain: bool = False,
    vocab_size: int = 8192,
    sample_mb: float = 200,
    pattern: str = "gpt4",
    special_tokens=("<|endoftext|>",),
    exts=(".txt",),
    exclude=(),
    val_fraction: float = 0.0,
    workers: int | None = None,
    progress: bool = True,
    log=None,
) -> dict:
    """Tokenize the `exts` files under `data_dir` into `output_path` (and its validation split),
    learning the tokenizer into `vocab_path` (default: tokenizer.json next to output_path) or
    reusing it. Returns a summary: files, documents, bytes, tokens ({path: count}), the tokenizer,
    vocab_path, reused, sample_bytes, removed_val (a stale split removed), the times and workers.
    Bad input is a UserError naming the parameter (as its `gradcraft tokenize` flag is named)."""
    from gradcraft.data.tokenfile import dtype_for_vocab, write_token_file
    from gradcraft.tokenizer.formats import load_tokenizer, save_tokenizer
    from gradcraft.tokenizer.parallel import plan_chunks

    log = log or (lambda message: print(message, file=sys.stderr))
    workers = workers or os.cpu_count() or 1
    t0 = time.perf_counter()
    special_tokens = [s for s in dict.fromkeys(x.strip() for x in special_tokens) if s]
    exts = [e.strip() for e in exts if e.strip()]
    exclude = [e.strip() for e in exclude if e.strip()]
    vocab_path = vocab_path or os.path.join(os.path.dirname(output_path), "tokenizer.json")
    val_path = val_path_for(output_path)
    reuse = os.path.exists(vocab_path) and not retrain
    if workers < 1:
        raise UserError(f"workers (--workers) must be at least 1, not {workers}")
    if not 0 <= val_fraction < 1:
        raise UserError(f"val_fraction (--val_fraction) must be in [0, 1), not {val_fraction}")
    if not reuse:
        if sample_mb <= 0:
            raise UserError(f"sample_mb (--sample_mb) must be positive, not {sample_mb}")
        from gradcraft.tokenizer.train import check_vocab_size

        check_vocab_size(vocab_size, special_tokens)
    check_writable(output_path, "output")
    stale_val = val_fraction == 0 and os.path.exists(val_path)
    if val_fraction > 0 or stale_val:
        check_writable(val_path, "validation output")
    if not reuse:
        check_writable(vocab_path, "vocabulary")

    files = find_files(data_dir, exts, exclude)
    files, skipped = drop_own_files(files, [output_path, val_path, vocab_path])
    if skipped:
        log(f"note: not reading {len(skipped)} token, tokenizer or temporary files as text (e.g. {skipped[0]})")
    if not files:
        raise UserError(f"no text files under {data_dir}: every matching file is a token, tokenizer or temporary file")
    chunks = plan_chunks(files, pattern)
    total_bytes = sum(c[3] - c[2] for c in chunks)
    if total_bytes == 0:
        raise UserError(f"all {len(files)} matching files under {data_dir} are empty")
    docs = sorted({c[1] for c in chunks})
    train_docs, val_docs = split_documents(docs, data_dir, val_fraction)
    val_set = set(val_docs)
    train_chunks = [c for c in chunks if c[1] not in val_set]
    val_chunks = [c for c in chunks if c[1] in val_set]
    workers = workers if total_bytes > SMALL_INPUT else 1

    if reuse:
        tok = load_tokenizer(vocab_path)
        log(f"reusing the vocabulary in {vocab_path} (pass --retrain to learn a new one)")
        sample = 0
    else:
        tok, sample = learn(train_chunks, vocab_size, sample_mb, pattern, special_tokens, workers, progress)
    t_learn = time.perf_counter() - t0
    if tok.pattern_name != pattern:
        # A reused vocabulary brings its own pattern, which decides where a
        # file may be cut into chunks (only gpt2/gpt4 allow it).
        chunks = plan_chunks(files, tok.pattern)
        train_chunks = [c for c in chunks if c[1] not in val_set]
        val_chunks = [c for c in chunks if c[1] in val_set]
    sep_id = tok.special_tokens.get("<|endoftext|>", next(iter(tok.special_tokens.values()), None))
    dtype = dtype_for_vocab(tok.vocab_size)

    # Everything goes to temp names first, renamed only when all succeeded.
    created_dirs = _make_dirs([output_path, val_path if val_chunks else None, None if reuse else vocab_path])
    pending = []
    try:
        counts = {}
        with _bar(progress, total_bytes, "encoding") as bar:
            for path, part in ((output_path, train_chunks), (val_path, val_chunks)):
                if path == val_path and not part:
                    continue
                tmp = _temp_name(path)
                pending.append((tmp, path))
                counts[path] = write_token_file(
                    tmp,
                    encode_documents(tok, part, sep_id, workers, dtype, bar),
                    vocab_size=tok.vocab_size,
                    fingerprint=tok.fingerprint,
                    dtype=dtype,
                )
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
    return dict(
        files=len(files),
        documents=len(docs),
        bytes=total_bytes,
        tokens=counts,
        tokenizer=tok,
        vocab_path=vocab_path,
        reused=reuse,
        sample_bytes=sample,
        removed_val=val_path if stale_val else None,
        dtype=dtype,
        seconds=time.perf_counter() - t0,
        learn_seconds=t_learn,
        workers=workers,
    )


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


TOKENIZER_NAMES = ("tokenizer.json", "gradcraft_tokenizer.json", "tokenizer_config.json")


def drop_own_files(files: list, outputs: list) -> tuple[list, list]:
    """(the files to read as text, those skipped): never this command's outputs (a second run into
    its own data folder with a broad --ext), any gradcraft token file (by its magic), any tokenizer
    file (by name, or by our format's name at its start) and temporaries (`.tmp-*`)."""
    from gradcraft.data.tokenfile import MAGIC
    from gradcraft.tokenizer.formats import FORMAT_NAME

    own = {os.path.realpath(p) for p in outputs if p}
    kept, skipped = [], []
    for path in files:
        name = os.path.basename(path)
        head = b""
        try:
            with open(path, "rb") as f:
                head = f.read(4096)
        except OSError:
            pass  # find_files' caller reports unreadable files
        if (
            os.path.realpath(path) in own
            or name.startswith(".tmp-")
            or name in TOKENIZER_NAMES
            or head.startswith(MAGIC)
            or FORMAT_NAME.encode() in head[:200]
        ):
            skipped.append(path)
        else:
            kept.append(path)
    return kept, skipped


def sweep_temporaries(folder: str) -> list:
    """Remove the temporaries (`.tmp-` + mkstemp's 8 characters: gradcraft/atomic.py) a killed
    `tokenize` left in its output folder; only under that folder's lock (cli/tokenize.py)."""
    removed = []
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if name.startswith(".tmp-") and len(name) == 13 and os.path.isfile(path):
            try:
                os.unlink(path)
                removed.append(path)
            except OSError:
                pass
    return removed


def split_documents(files: list[str], data_dir: str, val_fraction: float):
    """Deterministic split by document: the files whose sha256(relative path)
    is smallest go to validation, so the split does not depend on file order
    or on the machine."""
    if val_fraction <= 0:
        return files, []
    if len(files) < 2:
        raise UserError(
            f"val_fraction (--val_fraction) needs at least 2 non-empty documents; {data_dir} has {len(files)}"
        )
    n_val = min(len(files) - 1, max(1, round(val_fraction * len(files))))
    key = {
        f: hashlib.sha256(os.path.relpath(f, data_dir).encode("utf-8", "surrogateescape")).hexdigest() for f in files
    }
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


def _bar(progress: bool, total, desc):
    from tqdm import tqdm

    tqdm.monitor_interval = 0  # no monitor thread: worker processes are forked
    return tqdm(
        total=total, desc=desc, unit="B", unit_scale=True, disable=not progress, file=sys.stderr, mininterval=0.5
    )


def learn(chunks, vocab_size, sample_mb, pattern, special_tokens, workers, progress):
    """Learn a vocabulary on a seeded random sample of chunks."""
    from gradcraft.tokenizer.parallel import count_pieces_parallel
    from gradcraft.tokenizer.train import learn_merges, tokenizer_from_merges

    budget = int(sample_mb * 1e6)
    order = list(range(len(chunks)))
    random.Random(0).shuffle(order)
    picked, size = [], 0
    for i in order:
        if size >= budget:
            break
        picked.append(chunks[i])
        size += chunks[i][3] - chunks[i][2]
    picked.sort()
    n_merges = vocab_size - 256 - len(special_tokens)
    with _bar(progress, size, "counting pieces") as bar:
        counts = count_pieces_parallel(
            picked, pattern, special_tokens, workers if size > SMALL_INPUT else 1, progress=bar.update
        )
    pairs = learn_merges(counts, n_merges, progress=progress)
    return tokenizer_from_merges(pairs, pattern, special_tokens), size


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
