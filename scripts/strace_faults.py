"""Storage faults injected with strace into `gradcraft train`: the N-th fsync fails with EIO, the N-th
rename with EIO, the N-th write with ENOSPC, for N spread over the whole run (setup, checkpoint
writes, the final weights, the logs), and after each faulted run:

    - exit 0 (the fault was absorbed, or came after the last write) or 2 with exactly one `error:`
      line on stderr, and no traceback;
    - no temporary (`.tmp-*`) left in the run folder;
    - every checkpoint folder intact (its manifest verifies);
    - the run resumed without faults ends with exactly the weights of an uninterrupted run.

    python scripts/strace_faults.py                  # every syscall class, 6 points each
    python scripts/strace_faults.py --points 2 --syscalls fsync,write

Needs strace (apt-get install strace); a syscall counted here is one of the training process and
its threads (strace -f). Exit status 1 when a check fails, with the problems listed.
"""

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fault_injection  # noqa: E402  (the tiny dataset, the training flags, the checks of a run folder)

FAULTS = {"fsync": "EIO", "rename": "EIO", "write": "ENOSPC"}


def strace_command(argv: list, syscall: str | None, when: int = 0, count_to: str | None = None) -> list:
    """`gradcraft <argv>` under strace: the `when`-th `syscall` fails (FAULTS), or (count_to) the
    calls of every class are counted into that file."""
    train = [sys.executable, "-m", "gradcraft.cli.main", *argv]
    if count_to:
        return ["strace", "-f", "-qq", "-c", "-o", count_to, "-e", "trace=" + ",".join(FAULTS), *train]
    inject = f"inject={syscall}:error={FAULTS[syscall]}:when={when}"
    return ["strace", "-f", "-qq", "-o", os.devnull, "-e", f"trace={syscall}", "-e", inject, *train]


def _env() -> dict:
    # no .pyc writes (their writes and renames would take the injected faults)
    return dict(os.environ, PYTHONDONTWRITEBYTECODE="1")


def count_calls(dataset: str, folder: str) -> dict:
    """{syscall: calls} of one uninterrupted run."""
    run, out = os.path.join(folder, "count-run"), os.path.join(folder, "counts.txt")
    subprocess.run(
        strace_command(fault_injection.command(dataset, run, False), None, count_to=out),
        env=_env(),
        check=True,
        capture_output=True,
    )
    shutil.rmtree(run)
    counts = {}
    for line in open(out):
        parts = line.split()
        if parts and parts[-1] in FAULTS:
            counts[parts[-1]] = int(parts[3])
    return counts


def check_stop(run: str, code: int, err: str) -> list:
    """The checks of a faulted run (see the module docstring); returns the problems."""
    from gradcraft.training import checkpoint as ckpt

    problems = []
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    if "Traceback" in err:
        problems.append(f"a traceback: {err[-800:]}")
    if code not in (0, 2):
        problems.append(f"exit status {code}: {err[-300:]}")
    elif code == 2 and len(errors) != 1:
        problems.append(f"exit 2 with {len(errors)} error lines: {err[-300:]}")
    if fault_injection.temporaries(run):
        problems.append(f"temporaries left: {fault_injection.temporaries(run)}")
    for path in fault_injection.checkpoints(run):
        if ckpt.verify(path) is not None:
            problems.append(f"checkpoint {path} damaged: {ckpt.verify(path)}")
    return problems


def one_case(dataset: str, folder: str, syscall: str, when: int, reference: dict | None) -> tuple[int, list, str]:
    """(exit status, problems, its error line) of a run with the `when`-th `syscall` failing, then
    resumed to the end and compared with `reference` (when given)."""
    run = os.path.join(folder, f"run-{syscall}-{when}")
    shutil.rmtree(run, ignore_errors=True)
    argv = fault_injection.command(dataset, run, False)
    proc = subprocess.run(strace_command(argv, syscall, when), env=_env(), capture_output=True, text=True)
    problems = check_stop(run, proc.returncode, proc.stderr)
    error = next((line for line in proc.stderr.splitlines() if line.startswith("error:")), "")
    if reference is not None and not problems:
        resume = bool(fault_injection.checkpoints(run))
        argv = fault_injection.command(dataset, run, resume)
        again = subprocess.run(
            [sys.executable, "-m", "gradcraft.cli.main", *argv], env=_env(), capture_output=True, text=True
        )
        if again.returncode != 0:
            problems.append(f"the resumed run failed ({again.returncode}): {again.stderr[-500:]}")
        else:
            final = fault_injection.weights(run)
            if final.keys() != reference.keys() or any(not np.array_equal(final[k], reference[k]) for k in final):
                problems.append("the resumed run's final weights differ from an uninterrupted run's")
            problems += fault_injection.final_checks(run)
    shutil.rmtree(run, ignore_errors=True)
    return proc.returncode, [f"{syscall} #{when}: {p}" for p in problems], error


def spread(total: int, points: int, rng: random.Random) -> list:
    """`points` call numbers over 1..total: the first, the last and the others drawn between."""
    if total <= points:
        return list(range(1, total + 1))
    inner = rng.sample(range(2, total), points - 2) if points > 2 else []
    return sorted({1, total, *inner})[:points]


def run_all(syscalls, points: int, seed: int, folder: str, log=print) -> dict:
    """Every case; returns {"cases", "stopped" (exit 2), "problems", "errors" (distinct error lines)}."""
    dataset = fault_injection.make_dataset(folder)
    ref_run = os.path.join(folder, "reference")
    subprocess.run(
        [sys.executable, "-m", "gradcraft.cli.main", *fault_injection.command(dataset, ref_run, False)],
        env=_env(),
        check=True,
        capture_output=True,
    )
    reference = fault_injection.weights(ref_run)
    counts = count_calls(dataset, folder)
    rng = random.Random(seed)
    summary = dict(cases=0, stopped=0, problems=[], errors=set(), calls=counts)
    for syscall in syscalls:
        for when in spread(counts.get(syscall, 0), points, rng):
            code, problems, error = one_case(dataset, folder, syscall, when, reference)
            summary["cases"] += 1
            summary["stopped"] += code == 2
            summary["problems"] += problems
            if error:
                summary["errors"].add(re.sub(r"(?<!\w)/\S+", "PATH", error))
            log(f"{syscall} #{when}: exit {code} {error}{'; ' + '; '.join(problems) if problems else ''}")
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--syscalls", default=",".join(FAULTS), help="comma list of " + ", ".join(FAULTS))
    parser.add_argument("--points", type=int, default=6, help="calls faulted per syscall (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if shutil.which("strace") is None:
        print("error: strace is not installed (apt-get install strace)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        summary = run_all(args.syscalls.split(","), args.points, args.seed, folder)
    print(f"calls in one run: {summary['calls']}")
    print(f"{summary['cases']} faulted runs, {summary['stopped']} stopped with exit 2; error lines seen:")
    for line in sorted(summary["errors"]):
        print(f"  {line}")
    for p in summary["problems"]:
        print(f"PROBLEM {p}")
    print(f"{len(summary['problems'])} problems")
    return 1 if summary["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
