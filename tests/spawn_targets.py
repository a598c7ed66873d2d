"""Functions that tests/test_torch_distributed.py starts with gradcraft.multiprocessing.spawn (a
module of their own: a spawned process imports it, and it imports nothing heavy)."""

import os
import sys


def write_rank(rank, folder, word):
    with open(os.path.join(folder, f"rank{rank}"), "w") as f:
        f.write(f"{word} {rank}")


def fail_on_one(rank, folder):
    if rank == 1:
        raise ValueError("rank one fails")
    write_rank(rank, folder, "ok")


def exit_three(rank):
    sys.exit(3 if rank == 0 else 0)
