"""Tokenizer benchmark: gradcraft vs HF `tokenizers`, same corpus, pattern, vocabulary size and workers.

    python bench/tokenizer.py [--sample_mb 10] [--vocab_size 8192] [--pattern gpt4] [--workers 2]

Corpus: the Python standard library's own .py files (site-packages excluded).
Learning: both learn `--vocab_size` ids from the same sample of files.
Encoding: the whole corpus; ours reads the files in its worker processes
(as `gradcraft tokenize` does), HF gets the texts already in memory and
encodes them with `encode_batch` on `--workers` threads. Both start with an
empty per-piece cache. Before timing, our exported vocabulary is checked to
encode a sample exactly like HF does with the same file.
"""

import argparse
import glob
import os
import platform
import sys
import sysconfig
import time

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--sample_mb", type=float, default=10)
p.add_argument("--vocab_size", type=int, default=8192)
p.add_argument("--pattern", choices=["gpt2", "gpt4"], default="gpt4")
p.add_argument("--workers", type=int, default=os.cpu_count())
args = p.parse_args()
os.environ["RAYON_NUM_THREADS"] = str(args.workers)  # before tokenizers is imported

import numpy as np  # noqa: E402
import tokenizers  # noqa: E402
from tokenizers import Regex, decoders, models, pre_tokenizers, trainers  # noqa: E402

from gradcraft.tokenizer.bpe import _rebuild  # noqa: E402
from gradcraft.tokenizer.formats import to_hf_json  # noqa: E402
from gradcraft.tokenizer.parallel import count_pieces_parallel, encode_chunks, plan_chunks  # noqa: E402
from gradcraft.tokenizer.pretokenize import PATTERNS  # noqa: E402
from gradcraft.tokenizer.train import learn_merges, tokenizer_from_merges  # noqa: E402


def corpus_files():
    root = sysconfig.get_paths()["stdlib"]
    return sorted(
        f
        for f in glob.glob(os.path.join(root, "**", "*.py"), recursive=True)
        if "site-packages" not in f and os.path.getsize(f) > 0
    )


def hf_tokenizer(pattern):
    tk = tokenizers.Tokenizer(models.BPE())
    if pattern == "gpt2":
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tk.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(PATTERNS[pattern]), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    tk.decoder = decoders.ByteLevel()
    return tk


def main():
    files = corpus_files()
    raw = [open(f, "rb").read() for f in files]
    texts = [b.decode("utf-8", "replace") for b in raw]
    total = sum(map(len, raw))
    # The same sample for both: every k-th file, about sample_mb in all.
    step = max(1, round(total / (args.sample_mb * 1e6)))
    sample_idx = list(range(0, len(files), step))
    sample_bytes = sum(len(raw[i]) for i in sample_idx)
    specials = ["<|endoftext|>"]

    # --- learning
    t = time.perf_counter()
    chunks = plan_chunks([files[i] for i in sample_idx], args.pattern)
    counts = count_pieces_parallel(chunks, args.pattern, specials, args.workers)
    pairs = learn_merges(counts, args.vocab_size - 256 - len(specials))
    ours = tokenizer_from_merges(pairs, args.pattern, specials)
    t_ours_learn = time.perf_counter() - t

    hf = hf_tokenizer(args.pattern)
    trainer = trainers.BpeTrainer(
        vocab_size=args.vocab_size,
        special_tokens=specials,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    t = time.perf_counter()
    hf.train_from_iterator([texts[i] for i in sample_idx], trainer)
    t_hf_learn = time.perf_counter() - t

    # --- exactness check: our vocabulary exported to HF encodes like ours
    check = tokenizers.Tokenizer.from_str(__import__("json").dumps(to_hf_json(ours)))
    for text in texts[::50]:
        assert check.encode(text).ids == ours.encode(text, allowed_special="all"), "export mismatch"

    # --- encoding the whole corpus (fresh tokenizers: empty caches)
    ours = _rebuild(ours.state())
    dtype = np.uint16
    t = time.perf_counter()
    n_ours = 0
    for _, arr in encode_chunks(ours, plan_chunks(files, args.pattern), args.workers, dtype=dtype):
        n_ours += arr.size
    t_ours_enc = time.perf_counter() - t

    hf = tokenizers.Tokenizer.from_str(hf.to_str())
    encode = getattr(hf, "encode_batch_fast", hf.encode_batch)  # fastest the installed version has
    t = time.perf_counter()
    n_hf = sum(len(e.ids) for e in encode(texts, add_special_tokens=False))
    t_hf_enc = time.perf_counter() - t

    mb = total / 1e6
    print(
        f"corpus: {len(files)} stdlib .py files, {mb:.1f} MB; sample for learning: {sample_bytes / 1e6:.1f} MB; "
        f"vocab {args.vocab_size}; pattern {args.pattern}; workers {args.workers}"
    )
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"python {platform.python_version()}, tokenizers {tokenizers.__version__}, numpy {np.__version__}"
    )
    print()
    print("| step | gradcraft | HF tokenizers | ratio |")
    print("|---|---|---|---|")
    print(
        f"| learn {args.vocab_size} ids on {sample_bytes / 1e6:.1f} MB | {t_ours_learn:.2f} s | {t_hf_learn:.2f} s "
        f"| {t_ours_learn / t_hf_learn:.2f}x time (goal <= 3x) |"
    )
    print(
        f"| encode {mb:.1f} MB | {t_ours_enc:.2f} s = {mb / t_ours_enc:.2f} MB/s | {t_hf_enc:.2f} s = "
        f"{mb / t_hf_enc:.2f} MB/s | {t_hf_enc / t_ours_enc:.2f}x throughput (goal >= 0.5x) |"
    )
    print(f"| tokens (bytes/token) | {n_ours:,} ({total / n_ours:.2f}) | {n_hf:,} ({total / n_hf:.2f}) | |")


if __name__ == "__main__":
    sys.exit(main())
