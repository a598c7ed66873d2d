"""Peak memory of learning a tokenizer, per input byte, on adversarial inputs (issue 52):

    text        words separated by spaces and newlines (a Zipf vocabulary of 50,000 made-up words)
    long-line   one line of letters without a single space or newline
    random      random bytes

For each input of --mb megabytes: `gradcraft tokenize` (--workers 1, the whole file as its sample)
and Hugging Face tokenizers' ByteLevel BPE `train` (same vocabulary size), each in a process of its
own; the peak RSS of that process (os.wait4's ru_maxrss), its growth over the same command on a 1 KB
file (the interpreter and imports), that growth per input byte, and the wall time.

    python bench/tokenizer_memory.py --mb 20 --vocab_size 8192
    python bench/tokenizer_memory.py --mb 1 --kinds text,random   # a quick look
"""

import argparse
import itertools
import os
import random
import subprocess
import sys
import tempfile
import time

KINDS = ("text", "long-line", "random")
HF_TRAIN = """
import sys
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
trainer = trainers.BpeTrainer(vocab_size=int(sys.argv[2]), show_progress=False,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train([sys.argv[1]], trainer)
print(tok.get_vocab_size())
"""


def make_input(kind: str, path: str, size: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    with open(path, "wb") as f:
        if kind == "random":
            f.write(rng.randbytes(size))
            return
        letters = "abcdefghijklmnopqrstuvwxyz"
        if kind == "long-line":
            while size > 0:
                n = min(size, 1 << 20)
                f.write("".join(rng.choices(letters, k=n)).encode())
                size -= n
            return
        words = ["".join(rng.choices(letters, k=rng.randint(2, 10))) for _ in range(50_000)]
        cumulative = list(itertools.accumulate(1 / (i + 1) for i in range(len(words))))
        written = 0
        while written < size:
            line = " ".join(rng.choices(words, cum_weights=cumulative, k=12)) + "\n"
            f.write(line.encode())
            written += len(line)


def measure(command: list) -> tuple[int, float]:
    """(peak RSS in bytes, seconds) of one process."""
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: a full pipe would block the child
        t0 = time.perf_counter()
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(command)} failed:\n{err.read().decode(errors='replace')[-2000:]}")
    return usage.ru_maxrss * 1024, seconds


def commands(folder: str, data: str, vocab_size: int, mb: float) -> dict:
    out = os.path.join(folder, "out")
    return {
        "gradcraft": [
            sys.executable,
            "-m",
            "gradcraft.cli.main",
            "tokenize",
            "--data_dir",
            data,
            "--output_path",
            os.path.join(out, "tokens.bin"),
            "--vocab_size",
            str(vocab_size),
            "--workers",
            "1",
            "--sample_mb",
            str(max(mb, 0.001) * 1.01),
            "--retrain",
            "--quiet",
        ],
        "hf": [sys.executable, "-c", HF_TRAIN, os.path.join(data, "input.txt"), str(vocab_size)],
    }


def run(mb: float, kinds, vocab_size: int, tools, log=print) -> list:
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for kind in kinds:
            for size, label in ((1000, "baseline"), (int(mb * 1e6), "input")):
                data = os.path.join(folder, f"{kind}-{label}")
                os.makedirs(data, exist_ok=True)
                make_input(kind, os.path.join(data, "input.txt"), size)
                for tool in tools:
                    rss, seconds = measure(commands(folder, data, vocab_size, size / 1e6)[tool])
                    rows.append({"kind": kind, "tool": tool, "label": label, "bytes": size, "rss": rss, "s": seconds})
    table = []
    for row in rows:
        if row["label"] != "input":
            continue
        base = next(
            r for r in rows if r["label"] == "baseline" and r["kind"] == row["kind"] and r["tool"] == row["tool"]
        )
        growth = row["rss"] - base["rss"]
        table.append(dict(row, growth=growth, per_byte=growth / row["bytes"]))
    return table


def format_table(table) -> str:
    lines = [
        "| input | tool | MB | peak RSS | growth over a 1 KB run | growth per input byte | time |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in table:
        lines.append(
            f"| {r['kind']} | {r['tool']} | {r['bytes'] / 1e6:.0f} | {r['rss'] / 2**20:,.0f} MiB | "
            f"{r['growth'] / 2**20:,.0f} MiB | {r['per_byte']:.2f} | {r['s']:.1f} s |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=20, help="input size in MB (default: %(default)s)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma list of " + ", ".join(KINDS))
    parser.add_argument("--vocab_size", type=int, default=8192)
    parser.add_argument("--tools", default="gradcraft,hf", help="gradcraft, hf or both (default: %(default)s)")
    args = parser.parse_args()
    table = run(args.mb, args.kinds.split(","), args.vocab_size, args.tools.split(","))
    print(format_table(table))


if __name__ == "__main__":
    main()
