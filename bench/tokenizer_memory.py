"""Peak memory of learning a tokenizer, per input byte, on adversarial inputs:

    text        words separated by spaces and newlines (a Zipf vocabulary of 50,000 made-up words)
    long-line   one line of letters without a single space or newline
    random      random bytes (HF's trainer reads UTF-8 only: it gets them as Latin-1 text)
    one-byte    one byte repeated ("aaaa...": one endless piece)
    tiny-lines  lines of 1 to 3 random letters, digits or punctuation marks
    runs        runs of 1 to 100,000 spaces, tabs or newlines, then of digits, in turn

For each input of --mb megabytes: `gradcraft tokenize` (--workers 1, the whole file as its sample)
and Hugging Face tokenizers' ByteLevel BPE `train` (same vocabulary size), each in a process of its
own (inputs are written by another process: a child's peak RSS starts at its parent's); the peak
RSS of that process (os.wait4's ru_maxrss), its growth over the same command on a 1 KB
file (the interpreter and imports), that growth per input byte, and the wall time.

    python bench/tokenizer_memory.py --mb 20 --vocab_size 8192
    python bench/tokenizer_memory.py --mb 1 --kinds text,random   # a quick look
    python bench/tokenizer_memory.py --mb 200 --tools gradcraft --json bench/results/tokenizer_memory/200mb.json
"""

import argparse
import itertools
import json
import platform
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

KINDS = ("text", "long-line", "random", "one-byte", "tiny-lines", "runs")
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
            data = rng.randbytes(size)
            f.write(data)
            # HF's trainer reads UTF-8 only: it gets the same bytes as Latin-1 text (each byte a
            # character; ByteLevel maps them back to bytes, those >= 0x80 as two)
            with open(path + ".hf", "wb") as hf:
                hf.write(data.decode("latin-1").encode())
            return
        letters = "abcdefghijklmnopqrstuvwxyz"
        if kind == "one-byte":
            while size > 0:
                n = min(size, 1 << 20)
                f.write(b"a" * n)
                size -= n
            return
        if kind in ("tiny-lines", "runs"):
            _write_generated(f, kind, size, rng)
            return
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


def _write_generated(f, kind: str, size: int, rng: random.Random) -> None:
    symbols = "abcdefghijklmnopqrstuvwxyz0123456789.,;:!?-+*/=()[]{}<>"
    written, turn = 0, 0
    while written < size:
        if kind == "tiny-lines":
            block = "".join("".join(rng.choices(symbols, k=rng.randint(1, 3))) + "\n" for _ in range(10_000))
        else:
            n = rng.randint(1, 100_000)
            block = "".join(rng.choices(" \t\n" if turn % 2 == 0 else "0123456789", k=n))
            turn += 1
        data = block.encode()[: size - written]
        f.write(data)
        written += len(data)


def measure(command: list, timeout: float) -> tuple[int, float, bool]:
    """(peak RSS in bytes, seconds, finished) of one process, killed after `timeout` seconds."""
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: a full pipe would block the child
        t0 = time.perf_counter()
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        timer.cancel()
        seconds = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        finished = proc.returncode == 0
        if not finished and seconds < timeout:
            err.seek(0)
            raise SystemExit(f"{' '.join(command)} failed:\n{err.read().decode(errors='replace')[-2000:]}")
    return usage.ru_maxrss * 1024, seconds, finished


def _hf_input(path: str) -> str:
    return path + ".hf" if os.path.exists(path + ".hf") else path


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
        "hf": [sys.executable, "-c", HF_TRAIN, _hf_input(os.path.join(data, "input.txt")), str(vocab_size)],
    }


def run(mb: float, kinds, vocab_size: int, tools, timeout: float, log=print) -> list:
    """Measure each (kind, tool); log() each table row as it is measured; returns the rows."""
    table = []
    log(HEADER)
    with tempfile.TemporaryDirectory() as folder:
        for kind in kinds:
            sizes = {}
            for size, label in ((1000, "baseline"), (int(mb * 1e6), "input")):
                sizes[label] = os.path.join(folder, f"{kind}-{label}")
                os.makedirs(sizes[label], exist_ok=True)
                # in a process of its own: a child's peak RSS starts at its parent's peak (Linux keeps
                # it across fork and exec), so this process must never hold an input
                path = os.path.join(sizes[label], "input.txt")
                subprocess.run(
                    [sys.executable, os.path.abspath(__file__), "--make_input", kind, path, str(size)], check=True
                )
            for tool in tools:
                base, _, _ = measure(commands(folder, sizes["baseline"], vocab_size, 0.001)[tool], timeout)
                rss, seconds, finished = measure(commands(folder, sizes["input"], vocab_size, mb)[tool], timeout)
                size = int(mb * 1e6)
                row = dict(kind=kind, tool=tool, bytes=size, rss=rss, s=seconds, finished=finished)
                row.update(growth=rss - base, per_byte=(rss - base) / size)
                table.append(row)
                log(format_row(row))
    return table


HEADER = """| input | tool | MB | peak RSS | growth over a 1 KB run | growth per input byte | time |
|---|---|---:|---:|---:|---:|---:|"""


def format_row(r) -> str:
    time_text = f"{r['s']:.1f} s" if r["finished"] else f"> {r['s']:.0f} s (stopped; RSS so far)"
    return (
        f"| {r['kind']} | {r['tool']} | {r['bytes'] / 1e6:.0f} | {r['rss'] / 2**20:,.0f} MiB | "
        f"{r['growth'] / 2**20:,.0f} MiB | {r['per_byte']:.2f} | {time_text} |"
    )


def main() -> None:
    if sys.argv[1:2] == ["--make_input"]:
        make_input(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=20, help="input size in MB (default: %(default)s)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma list of " + ", ".join(KINDS))
    parser.add_argument("--vocab_size", type=int, default=8192)
    parser.add_argument("--tools", default="gradcraft,hf", help="gradcraft, hf or both (default: %(default)s)")
    parser.add_argument(
        "--timeout", type=float, default=600, help="seconds before a run is stopped (default: %(default)s)"
    )
    parser.add_argument("--json", help="also write the rows, the command and the machine to this JSON file")
    args = parser.parse_args()
    rows = run(args.mb, args.kinds.split(","), args.vocab_size, args.tools.split(","), args.timeout, log=_print)
    if args.json:
        machine = dict(platform=platform.platform(), cpus=os.cpu_count(), python=platform.python_version())
        with open(args.json, "w") as f:
            json.dump(dict(command=sys.argv, machine=machine, date=time.strftime("%Y-%m-%d"), rows=rows), f, indent=1)


def _print(line: str) -> None:
    print(line, flush=True)


if __name__ == "__main__":
    main()
