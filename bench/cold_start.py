"""How long a first GPU run takes on a machine that has never compiled gradcraft's kernels, against a
warm one, and what `gradcraft prebuild` moves ahead of time.

    python bench/cold_start.py --json out.json        # on a GPU machine (CuPy installed)

Each phase is a separate `gradcraft` process, timed from start to exit, with the kernel caches
(gradcraft's GRADCRAFT_KERNEL_CACHE and CuPy's CUPY_CACHE_DIR) pointed at folders of this run:
  cold      empty caches, then `train` for a few steps (compiles every kernel it needs first)
  warm      the same `train` again, caches kept (a later run on the same machine)
  prebuild  empty caches, `gradcraft prebuild --device cuda` (e.g. a machine image's build step)
  after     `train` on the caches the prebuild filled
The train command is the quick start's `demo` preset on a small token file of Python source.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time


def timed(cmd, env) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    gc = [sys.executable, "-m", "gradcraft"]
    work = tempfile.mkdtemp(prefix="gradcraft-cold-")
    corpus = os.path.join(sysconfig.get_paths()["stdlib"], "json")
    env = dict(os.environ)
    data = os.path.join(work, "tokens.bin")
    vocab = os.path.join(work, "tokenizer.json")
    subprocess.run(
        gc
        + ["tokenize", "--data_dir", corpus, "--ext", ".py", "--output_path", data, "--vocab_path", vocab]
        + ["--vocab_size", "512"],
        env=env,
        check=True,
        capture_output=True,
    )

    def caches(name: str) -> dict:
        root = os.path.join(work, name)
        shutil.rmtree(root, ignore_errors=True)
        kernels, cupy_cache = os.path.join(root, "kernels"), os.path.join(root, "cupy")
        return dict(env, GRADCRAFT_KERNEL_CACHE=kernels, CUPY_CACHE_DIR=cupy_cache)

    def train(run_env, run: str) -> float:
        return timed(
            gc
            + ["train", "--dataset", data, "--model_dir", os.path.join(work, run), "--preset", "demo"]
            + ["--device", "cuda", "--steps", str(args.steps), "--batch_size", "8", "--eval_every", "0"],
            run_env,
        )

    cold_env = caches("a")
    results = {"cold": train(cold_env, "cold"), "warm": train(cold_env, "warm")}
    pre_env = caches("b")
    results["prebuild"] = timed(gc + ["prebuild", "--device", "cuda"], pre_env)
    results["after"] = train(pre_env, "after")
    for name, seconds in results.items():
        print(f"{name:9s} {seconds:7.1f} s")
    if args.json:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(0)
        results["gpu"] = props["name"].decode()
        results["cupy"] = cupy.__version__
        results["steps"] = args.steps
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
