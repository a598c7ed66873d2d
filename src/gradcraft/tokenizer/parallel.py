"""Counting and encoding big inputs on several processes, in bounded memory.

Files are cut into chunks of `CHUNK_BYTES` to 2 * `CHUNK_BYTES` at safe
boundaries (after a newline before a visible ASCII character, else between a
visible ASCII character and a space: no gpt2/gpt4 piece spans such a point,
see pretokenize.next_cut), so chunks encode independently to exactly the
tokens of a single pass, and one huge line costs no more memory than many
short ones. Only a window of 1 MB with neither point (one giant "word") is cut
anywhere (at a UTF-8 character boundary), the one case where the tokens next
to the cut can differ from a single pass. Workers read their chunk from disk themselves:
only (path, start, end) goes to a worker and only token arrays come back.

At most `2 * workers` tasks are in flight, so memory stays bounded whatever
the corpus size, and results come back in input order.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
from collections import Counter, deque
from itertools import chain

import numpy as np

from gradcraft.tokenizer.bpe import CACHE_ENTRIES
from gradcraft.tokenizer.pretokenize import (
    CHUNKABLE,
    compile_pattern,
    cap_counts,
    count_pieces,
    next_cut,
    resolve_pattern,
    special_regex,
    split_text,
    split_windows,
)

CHUNK_BYTES = 1 << 20


def plan_chunks(paths, pattern: str, chunk_bytes: int | None = None) -> list[tuple[int, str, int, int]]:
    """[(document index, path, start, end)] covering every file in order;
    each file is one document. With gpt2/gpt4, every chunk holds at most
    2 * chunk_bytes bytes, whatever the line lengths (pretokenize.next_cut:
    after a newline, else before a space, else a hard cut), so counting,
    sampling and encoding work in bounded memory."""
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    chunkable = resolve_pattern(pattern)[0] in CHUNKABLE
    chunks = []
    for doc, path in enumerate(paths):
        size = os.path.getsize(path)
        if size == 0:
            continue
        if not chunkable or size <= chunk_bytes:
            chunks.append((doc, path, 0, size))
            continue
        with open(path, "rb") as f:
            start = 0
            while start < size:
                end = _next_chunk_end(f, start, size, chunk_bytes)
                chunks.append((doc, path, start, end))
                start = end
    return chunks


def _next_chunk_end(f, start: int, size: int, step: int) -> int:
    """next_cut(file, start, size, step, hard=True), reading only the window it searches: a file
    mapped whole would keep every page it searched resident (a file with no cut point, all of it)."""
    lo = start + step
    if lo >= size:
        return size
    offset = lo - 1  # one byte before the window: LINE_CUT looks behind
    f.seek(offset)
    window = f.read(step + 2)  # [lo - 1, hi + 1): all next_cut reads
    return offset + next_cut(window, start - offset, size - offset, step, hard=True)


def sample_chunks(chunks, budget_bytes: int, seed: int = 0, chunk_bytes: int | None = None) -> list:
    """A seeded random sample of `chunks` holding at most about `budget_bytes`
    bytes: whole chunks in a shuffled order while they fit, then the first part
    of one more chunk, cut at a next_cut point, so the sample is budget_bytes
    (to within one cut window) instead of budget + a whole chunk. In input order."""
    import random

    chunk_bytes = chunk_bytes or CHUNK_BYTES
    order = list(range(len(chunks)))
    random.Random(seed).shuffle(order)
    picked, size = [], 0
    for i in order:
        if size >= budget_bytes:
            break
        doc, path, start, end = chunks[i]
        left = budget_bytes - size
        if end - start > left:
            with open(path, "rb") as f:
                f.seek(start)
                head = f.read(min(end - start, left + chunk_bytes))
            end = start + next_cut(head, 0, len(head), max(left // 2, 1), hard=True)
            if end <= start:
                continue
        picked.append((doc, path, start, end))
        size += end - start
    picked.sort()
    return picked


def read_chunk(path: str, start: int, end: int) -> str:
    """A chunk of a file as text; invalid UTF-8 survives as surrogateescape."""
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(end - start).decode("utf-8", "surrogateescape")


def group_tasks(chunks, task_bytes: int | None = None) -> list[list]:
    """Pack consecutive small chunks into tasks of about task_bytes (fewer
    round trips for corpora of many small files)."""
    task_bytes = task_bytes or CHUNK_BYTES
    tasks, cur, size = [], [], 0
    for c in chunks:
        cur.append(c)
        size += c[3] - c[2]
        if size >= task_bytes:
            tasks.append(cur)
            cur, size = [], 0
    if cur:
        tasks.append(cur)
    return tasks


def _context():
    # fork on Linux: workers start at once and never re-import the caller's
    # __main__ (spawn/forkserver would, which breaks scripts without a
    # `if __name__ == "__main__"` guard). Elsewhere spawn, the only safe choice.
    if sys.platform.startswith("linux"):
        return mp.get_context("fork")
    return mp.get_context("spawn")


def _windowed(pool, fn, tasks, workers):
    """Like pool.imap, but with at most 2 * workers tasks submitted at once."""
    pending = deque()
    for task in tasks:
        pending.append(pool.apply_async(fn, (task,)))
        if len(pending) >= 2 * workers:
            yield pending.popleft().get()
    while pending:
        yield pending.popleft().get()


# ----------------------------------------------------------------- counting
_count_state = {}


def _ignore_sigint():
    # Ctrl-C goes to the whole process group: let the parent alone handle it
    # (it stops the pool and removes partial files) instead of every worker
    # printing a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _count_init(pattern, special_tokens, in_worker=False):
    if in_worker:
        _ignore_sigint()
    _count_state["rx"] = compile_pattern(pattern)
    _count_state["special"] = special_regex(special_tokens)


def _count_task(task) -> Counter:
    counts = Counter()
    for item in task:
        text = item if isinstance(item, str) else read_chunk(*item[1:])
        counts.update(count_pieces(text, _count_state["rx"], _count_state["special"]))
    return counts


def count_pieces_parallel(texts_or_chunks, pattern, special_tokens, workers: int, progress=None) -> Counter:
    """Distinct pieces and counts of texts (str) or file chunks, on `workers`
    processes. `progress(n_bytes)` is called as tasks finish."""
    tasks, chunks = [], []
    for item in texts_or_chunks:
        if isinstance(item, str):
            tasks.extend([part] for part in _split_text(item, pattern, CHUNK_BYTES))
        else:
            chunks.append(item)
    tasks += group_tasks(chunks)  # many small files -> fewer, bigger tasks
    total = Counter()
    if workers <= 1:
        _count_init(pattern, special_tokens)
        results = map(_count_task, tasks)
        for task, c in zip(tasks, results):
            _merge_counts(total, c)
            if progress:
                progress(_task_bytes(task))
        return total
    with _context().Pool(workers, initializer=_count_init, initargs=(pattern, special_tokens, True)) as pool:
        for task, c in zip(tasks, _windowed(pool, _count_task, tasks, workers)):
            _merge_counts(total, c)
            if progress:
                progress(_task_bytes(task))
    return total


def _merge_counts(total: Counter, c: Counter):
    if not total:
        total.update(c)
    else:
        get = total.get
        for k, v in c.items():
            total[k] = get(k, 0) + v
    cap_counts(total)  # bounded whatever the text (pretokenize.MAX_DISTINCT_PIECES)


def _task_bytes(task) -> int:
    return sum(len(x) if isinstance(x, str) else x[3] - x[2] for x in task)


def _split_text(text: str, pattern, step: int) -> list[str]:
    """Cut an in-memory text at exact boundaries (or not at all): pretokenize.split_text."""
    return split_text(text, pattern, step) or [text]


# ----------------------------------------------------------------- encoding
_encode_state = {}


def _encode_init(tokenizer, dtype, in_worker=False):
    if in_worker:
        _ignore_sigint()
    _encode_state["tok"] = tokenizer
    _encode_state["dtype"] = dtype


def encode_text_array(tokenizer, text: str, dtype) -> np.ndarray:
    """Ordinary-text encoding straight into a NumPy array (special tokens too, for a tokenizer that
    finds them in any text: K2's)."""
    if tokenizer.split_specials:
        return np.array(tokenizer.encode(text), dtype=dtype)
    compiled, cache = tokenizer._compiled, tokenizer._cache
    if compiled is None:
        return np.fromiter(chain.from_iterable(map(cache.__getitem__, [text] if text else [])), dtype=dtype)
    arrays = []
    for window in split_windows(text, compiled):  # the pieces of a window at a time (exact cuts)
        if len(cache) > CACHE_ENTRIES:
            cache.clear()
        arrays.append(np.fromiter(chain.from_iterable(map(cache.__getitem__, compiled.findall(window))), dtype=dtype))
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _encode_task(task) -> list[np.ndarray]:
    tok, dtype = _encode_state["tok"], _encode_state["dtype"]
    return [encode_text_array(tok, read_chunk(*c[1:]), dtype) for c in task]


def encode_chunks(tokenizer, chunks, workers: int, dtype=np.uint32):
    """Yield (chunk, token array) for each chunk, in order, on `workers`
    processes. Special-token strings inside files are ordinary text."""
    tasks = group_tasks(chunks)
    if workers <= 1:
        _encode_init(tokenizer, dtype)
        for task in tasks:
            yield from zip(task, _encode_task(task))
        return
    with _context().Pool(workers, initializer=_encode_init, initargs=(tokenizer, dtype, True)) as pool:
        for task, arrays in zip(tasks, _windowed(pool, _encode_task, tasks, workers)):
            yield from zip(task, arrays)
