"""Fault injection for `gradcraft train`: kill it, fill its disk and damage its files at random, N rounds,
and check that every run still ends with exactly the weights of an uninterrupted run.

    python scripts/fault_injection.py --rounds 20 --seed 0      # the figures in docs/reliability.md

Each round trains a tiny model (a checkpoint every step, so that faults often land inside checkpoint
writes) in a fresh run folder, and until the run completes, draws one fault per attempt:

    kill       SIGKILL at a random moment of the run
    kill-ckpt  SIGKILL inside a checkpoint write, after a random number of its files
    term       SIGTERM at a random moment (expected: exit 143 and the resume line)
    enospc     the disk fills up during a random checkpoint write (expected: one error line, exit 2)
    corrupt    a byte flipped in, or a truncation of, a random file of the newest checkpoint
               (expected: the resume warns and falls back to the previous checkpoint)
    kill-prune SIGKILL in the middle of deleting an old checkpoint (its `.tmp-old-*` folder is left;
               expected: the next start sweeps it)
    litter     the temporaries a killed run leaves (`.tmp-*` files beside the tokenizer and the
               configs, `.tmp-step_*` and `.tmp-old-*` folders) planted in the run folder
               (expected: the next start sweeps them under the lock)
    state      a field of the newest checkpoint's state.json set to a bad value of its class (a
               garbage random state, an unknown schedule, a step of -1, "4" or 1e308, betas out of
               range, no parameter groups, a sampler position of 1e18), its checksum recomputed
               (expected: the resume warns naming the field and falls back)
    log        training_log.csv or events.jsonl damaged (a torn last line, binary garbage, a row
               or an event of bad types) (expected: the resume trims it; the final log is whole)

then resumes (`--resume` when a checkpoint exists, else the same command again). After each attempt:
no temporary folder left by a clean stop, every checkpoint folder intact (but the one damaged on
purpose), and an error is one line. At the end: the final weights equal, bit for bit, those of the
uninterrupted reference run, match their manifest, and training_log.csv holds steps 1..N once each.
The in-process faults (kill-ckpt, enospc) run the real CLI in a child
process with one function wrapped (`python fault_injection.py child ...`).
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

FAULTS = ("kill", "kill-ckpt", "term", "enospc", "corrupt", "kill-prune", "litter", "state", "log")
STEPS = 8
TRAIN = [
    "--preset",
    "toy-v0",
    "--embed_dim",
    "16",
    "--num_layers",
    "1",
    "--num_heads",
    "2",
    "--seq_len",
    "16",
    "--batch_size",
    "2",
    "--steps",
    str(STEPS),
    "--checkpoint_every",
    "1",
    "--keep_checkpoints",
    "2",
    "--warmup_steps",
    "2",
    "--no_progress",
    "--log",
    "jsonl",
]


def child(fault: str, when: int, argv: list) -> int:
    """Run `gradcraft <argv>` in this process with one fault armed at the `when`-th checkpoint write."""
    import errno

    from gradcraft.cli.main import main
    from gradcraft.training import checkpoint as ckpt

    real_save, writes = ckpt.save_file, []

    def save_file(tensors, path, *args, **kwargs):
        writes.append(path)
        if len(writes) // 2 == when:  # two safetensors files per checkpoint
            if fault == "kill-ckpt":
                os.kill(os.getpid(), signal.SIGKILL)
            real_save(tensors, path, *args, **kwargs)
            with open(path, "r+b") as f:
                f.truncate(os.path.getsize(path) // 2)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return real_save(tensors, path, *args, **kwargs)

    if fault == "kill-prune":
        real_remove = ckpt._remove_checkpoint

        def remove(path):  # renamed aside, then killed before the deletion
            os.rename(path, os.path.join(os.path.dirname(path), f".tmp-old-{os.path.basename(path)}-{os.getpid()}"))
            os.kill(os.getpid(), signal.SIGKILL)
            real_remove(path)

        ckpt._remove_checkpoint = remove
    else:
        ckpt.save_file = save_file
    return main(argv)


STATE_DAMAGE = {
    "rng": lambda d: d["rng"]["generator"].update(state="garbage"),
    "schedule": lambda d: d["schedule"].update(kind="sawtooth"),
    "step -1": lambda d: d.update(step=-1),
    "step string": lambda d: d.update(step="4"),
    "step 1e308": lambda d: d.update(step=1e308),
    "betas": lambda d: d["optimizer"]["param_groups"][0].update(betas=[2.0, 0.9]),
    "param_groups": lambda d: d["optimizer"].update(param_groups=[]),
    "sampler": lambda d: d["sampler"].update(kind="sequential", epoch=0, position=10**18),
}


def damage_state(run: str, rng: random.Random) -> str | None:
    """A bad value in a random field of the newest checkpoint's state.json, its manifest recomputed
    (as someone editing it would); returns the folder."""
    import hashlib

    found = checkpoints(run)
    if not found:
        return None
    path = os.path.join(found[-1], "state.json")
    doc = json.load(open(path))
    STATE_DAMAGE[rng.choice(sorted(STATE_DAMAGE))](doc)
    with open(path, "w") as f:
        json.dump(doc, f)
    names = ("model.safetensors", "optimizer.safetensors", "state.json")
    manifest = {n: hashlib.sha256(open(os.path.join(found[-1], n), "rb").read()).hexdigest() for n in names}
    with open(os.path.join(found[-1], "manifest.json"), "w") as f:
        json.dump(manifest, f)
    return found[-1]


def litter(run: str, rng: random.Random) -> bool:
    """The temporaries a SIGKILL leaves at various moments, planted in the run folder."""
    if not os.path.isdir(run):
        return False
    for name in (".tmp-k2j3h4g5", ".tmp-tokenizer_config.json-x", "model.safetensors.tmp"):
        with open(os.path.join(run, name), "wb") as f:
            f.write(b"x" * rng.randint(1, 4096))
    if os.path.isdir(os.path.join(run, "checkpoints")):
        for name in (".tmp-old-step_00000001-424242", ".tmp-step_00000099-424242"):
            os.makedirs(os.path.join(run, "checkpoints", name), exist_ok=True)
            with open(os.path.join(run, "checkpoints", name, "model.safetensors"), "wb") as f:
                f.write(b"partial")
    return True


def damage_log(run: str, rng: random.Random) -> bool:
    name = rng.choice(["training_log.csv", "events.jsonl"])
    path = os.path.join(run, name)
    if not os.path.exists(path):
        return False
    tail = rng.choice([b"3,2.5", b"\x00\xff\xfe garbage\n", b"x,y\n7,notanumber,,,,\n", b'{"step": "x"}\n[1]\n'])
    with open(path, "ab") as f:
        f.write(tail)
    return True


def make_dataset(folder: str) -> str:
    from gradcraft.data.tokenfile import write_token_file

    rng = np.random.default_rng(0)
    pattern = rng.integers(0, 64, size=40)
    tokens = np.concatenate([np.where(rng.random(40) < 0.1, rng.integers(0, 64, 40), pattern) for _ in range(50)])
    path = os.path.join(folder, "tokens.bin")
    write_token_file(path, tokens.astype(np.uint16), vocab_size=64, fingerprint="faults")
    return path


def weights(run: str) -> dict:
    from safetensors.numpy import load_file

    return load_file(os.path.join(run, "model.safetensors"))


def command(dataset: str, run: str, resume: bool) -> list:
    return ["train", "--dataset", dataset, "--model_dir", run, *TRAIN] + (["--resume"] if resume else [])


def launch(argv: list, fault: str | None = None, when: int = 0) -> subprocess.Popen:
    script = (
        [sys.executable, os.path.abspath(__file__), "child", fault, str(when)]
        if fault
        else [sys.executable, "-m", "gradcraft.cli.main"]
    )
    return subprocess.Popen(script + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def checkpoints(run: str) -> list:
    from gradcraft.training import checkpoint as ckpt

    return ckpt.list_checkpoints(os.path.join(run, "checkpoints"))


def temporaries(run: str) -> list:
    return [os.path.join(r, n) for r, d, f in os.walk(run) for n in d + f if n.startswith(".tmp")]


def corrupt(run: str, rng: random.Random) -> str | None:
    """Flip a byte of, or truncate, a random file of the newest checkpoint; returns the folder."""
    found = checkpoints(run)
    if not found:
        return None
    path = os.path.join(
        found[-1], rng.choice(["model.safetensors", "optimizer.safetensors", "state.json", "manifest.json"])
    )
    data = bytearray(open(path, "rb").read())
    if rng.random() < 0.5 and data:
        data[rng.randrange(len(data))] ^= 0xFF
    else:
        data = data[: rng.randrange(len(data) + 1)]
    with open(path, "wb") as f:
        f.write(data)
    return found[-1]


def one_round(
    dataset: str,
    folder: str,
    reference: dict,
    duration: float,
    rng: random.Random,
    faults: int,
    tally: dict,
    kinds=FAULTS,
) -> list:
    """Train into a fresh folder with `faults` faults, then to the end; returns the problems found."""
    from gradcraft.training import checkpoint as ckpt

    run, problems, damaged = os.path.join(folder, "run"), [], None
    shutil.rmtree(run, ignore_errors=True)
    for attempt in range(faults + 20):
        fault = rng.choice(kinds) if attempt < faults else None
        resume = bool(checkpoints(run))
        if fault in ("corrupt", "state"):
            hit = corrupt(run, rng) if fault == "corrupt" else damage_state(run, rng)
            damaged = hit or damaged
            _count(tally, fault, hit is not None)
            continue
        if fault in ("litter", "log"):
            _count(tally, fault, litter(run, rng) if fault == "litter" else damage_log(run, rng))
            continue
        argv = command(dataset, run, resume)
        if fault in ("kill-ckpt", "enospc", "kill-prune"):
            done = int(os.path.basename(checkpoints(run)[-1])[5:]) if resume else 0
            proc = launch(argv, fault, rng.randint(1, max(STEPS - done, 1)))  # one of this attempt's checkpoints
        else:
            proc = launch(argv)
            if fault in ("kill", "term"):
                time.sleep(rng.uniform(0, duration))
                proc.send_signal(signal.SIGKILL if fault == "kill" else signal.SIGTERM)
        out, err = proc.communicate(timeout=600)
        code = proc.returncode
        if fault:
            _count(tally, fault, code != 0)  # a fault that came after the run ended did not hit
        lines = [line for line in err.splitlines() if line.startswith(("error:", "Traceback"))]
        if "Traceback" in err or len(lines) > 1:
            problems.append(f"{fault}: a traceback or several error lines: {err[-500:]}")
        if code == 2 and fault != "enospc":
            problems.append(f"{fault}: exit 2: {err.strip()[-300:]}")
        if fault == "enospc" and code not in (0, 2):  # 0: the run ended before the armed write
            problems.append(f"enospc: exit {code}")
        if code in (0, 2, 143) and temporaries(run):
            problems.append(f"{fault}: temporaries left after a clean stop: {temporaries(run)}")
        for path in checkpoints(run):
            if path != damaged and ckpt.verify(path) is not None:
                problems.append(f"{fault}: checkpoint {path} damaged: {ckpt.verify(path)}")
        if code == 0 and os.path.exists(os.path.join(run, "model.safetensors")) and fault is None:
            break
    else:
        problems.append("the run never completed")
        return problems
    final = weights(run)
    if final.keys() != reference.keys() or any(not np.array_equal(final[k], reference[k]) for k in final):
        problems.append("the final weights differ from the uninterrupted run's")
    problems += final_checks(run)
    if temporaries(run):
        problems.append(f"temporaries left at the end: {temporaries(run)}")
    return problems


def final_checks(run: str) -> list:
    """The finished run folder: weights matching their manifest, a log of steps 1..STEPS once each."""
    from gradcraft.errors import UserError
    from gradcraft.training.log import read_log
    from gradcraft.training.runfiles import check_weights_manifest

    problems = []
    try:
        check_weights_manifest(os.path.join(run, "model.safetensors"))
    except UserError as e:
        problems.append(f"the final weights fail their manifest: {e}")
    if not os.path.exists(os.path.join(run, "manifest.json")):
        problems.append("the final weights have no manifest")
    steps = [int(r["step"]) for r in read_log(os.path.join(run, "training_log.csv"))]
    if steps != list(range(1, STEPS + 1)):
        problems.append(f"training_log.csv holds steps {steps}, not 1..{STEPS}")
    return problems


def _count(tally: dict, fault: str, hit: bool) -> None:
    """tally[fault] = [drawn, hit]: a fault drawn after the run had finished (or with no checkpoint to
    damage) did not hit."""
    drawn, hits = tally.get(fault, (0, 0))
    tally[fault] = (drawn + 1, hits + hit)


def run_rounds(rounds: int, faults: int, seed: int, folder: str, log=print, kinds=FAULTS) -> dict:
    """Run the rounds; returns {"rounds", "faults_drawn_hit" (kind -> [drawn, hit]), "faults_hit",
    "rounds_exact" (rounds whose final weights equal the reference's, with no problem), "problems"}."""
    dataset = make_dataset(folder)
    t0 = time.perf_counter()
    ref = launch(command(dataset, os.path.join(folder, "reference"), False))
    _, err = ref.communicate(timeout=600)
    if ref.returncode != 0:
        raise RuntimeError(f"the reference run failed: {err}")
    duration = time.perf_counter() - t0
    reference = weights(os.path.join(folder, "reference"))
    rng, tally, problems, survived = random.Random(seed), {}, [], 0
    for r in range(rounds):
        found = one_round(dataset, folder, reference, duration, rng, faults, tally, kinds)
        survived += not found
        problems += [f"round {r}: {p}" for p in found]
        log(f"round {r + 1}/{rounds}: {'ok' if not found else '; '.join(found)}")
    return {
        "rounds": rounds,
        "faults_drawn_hit": tally,
        "faults_hit": sum(h for _, h in tally.values()),
        "rounds_exact": survived,
        "problems": problems,
    }


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        return child(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="training runs, each from scratch (default: 10)")
    parser.add_argument("--faults", type=int, default=4, help="faults per round (default: 4)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", default=",".join(FAULTS), help="faults to draw from (default: all)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        result = run_rounds(args.rounds, args.faults, args.seed, folder, kinds=tuple(args.kinds.split(",")))
    print(json.dumps(result, indent=1))
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
