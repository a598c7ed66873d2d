"""Host time per eager op: gradcraft's graph building, scheduling and launch against PyTorch's.

    python bench/host_overhead.py --device cuda       # tiny tensors: the time is the host's
    python bench/host_overhead.py --device cpu

Times three patterns on tensors of 8 elements (where the device's work is negligible), each op
realized on its own as eager code does (`y = x * 2; y.realize()`), and a chain of 50 ops realized
once (one schedule). Prints microseconds per op for gradcraft, for gradcraft with fusion off, and
for PyTorch, and the ratio.
"""

import argparse
import os
import subprocess
import sys
import time


def measure(lib: str, device: str, repeat: int) -> dict:
    if lib == "torch":
        import torch

        x = torch.ones(8, device=device)

        def sync():
            if device.startswith("cuda"):
                torch.cuda.synchronize()

        def realize(t):
            return t
    else:
        import gradcraft as torch

        x = torch.ones(8, device=device)

        def sync():
            if device.startswith("cuda"):
                torch.cuda.synchronize()

        def realize(t):
            return t.realize()

    results = {}

    def timed(name, fn, ops):
        fn()
        sync()
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        sync()
        results[name] = (time.perf_counter() - start) / (repeat * ops) * 1e6

    def one_by_one():
        y = x
        for _ in range(10):
            y = realize(y * 1.0001)

    def chain():
        y = x
        for _ in range(50):
            y = y * 1.0001 + 0.0
        realize(y)

    def mixed():
        y = x
        for _ in range(5):
            y = realize(torch.tanh(y)) + realize(y.exp() * 0.5)
        realize(y)

    timed("one op, realized each time", one_by_one, 10)
    timed("chain of 100 ops, one realize", chain, 100)
    timed("unary and binary mix", mixed, 20)
    return results


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--repeat", type=int, default=200)
    p.add_argument("--only", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.only:
        print(repr(measure(args.only, args.device, args.repeat)))
        return
    rows = {}
    for name, lib, env in (
        ("gradcraft", "gradcraft", {}),
        ("gradcraft, fusion off", "gradcraft", {"GRADCRAFT_FUSION": "0"}),
        ("torch", "torch", {}),
    ):
        cmd = [sys.executable, __file__, "--only", lib, "--device", args.device, "--repeat", str(args.repeat)]
        out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
        rows[name] = eval(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {"error": out.stderr[-300:]}
    print(f"host time per op (us), device {args.device}")
    patterns = list(rows["torch"]) if "error" not in rows["torch"] else list(rows["gradcraft"])
    print(f"{'pattern':34s} " + " ".join(f"{name:>22s}" for name in rows) + "   torch/gradcraft")
    for pattern in patterns:
        cells = [rows[name].get(pattern, float("nan")) for name in rows]
        ratio = rows["torch"].get(pattern, float("nan")) / rows["gradcraft"].get(pattern, float("nan"))
        print(f"{pattern:34s} " + " ".join(f"{c:22.2f}" for c in cells) + f"   {ratio:.2f}x")


if __name__ == "__main__":
    main()
