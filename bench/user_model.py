"""A user's own GPT and training loop (bench/user_gpt.py), run with PyTorch and with gradcraft
standing in for `torch`, side by side: eager against eager, compiled against compiled, in fp32,
TF32 and bf16 autocast, for the plain GPT and the one with hand-written elementwise ops. Mode
`step` compiles gradcraft's whole training step (`gradcraft.compile(train_step)`: one CUDA graph)
and compares it with PyTorch's compiled model (the `compiled` row's PyTorch run).

    python bench/user_model.py                         # every configuration, a table at the end
    python bench/user_model.py --only gradcraft:compiled:bf16:gpt --steps 30

Each configuration runs in its own process (a fresh `torch` module, fresh GPU memory). The loop is
the one a user writes: a batch from NumPy, forward under autocast, backward, clip_grad_norm_, a
fused AdamW step, zero_grad, the loss read every 10 steps. Prints ms/step, and for gradcraft the
kernels launched per step (eager) or the recorded schedules replayed (compiled).
"""

import argparse
import importlib
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
LIBS, MODES, PRECISIONS, MODELS = (
    ("torch", "gradcraft"),
    ("eager", "compiled", "step"),
    ("fp32", "tf32", "bf16"),
    ("gpt", "custom"),
)


def use_library(name: str):
    """`import torch` resolves to `name` from here on."""
    if name == "torch":
        return importlib.import_module("torch")
    import gradcraft

    sys.modules["torch"] = gradcraft
    for sub in ("nn", "nn.functional", "optim", "nn.utils"):
        sys.modules[f"torch.{sub}"] = importlib.import_module(f"gradcraft.{sub}")
    return gradcraft


def run_one(lib, mode, precision, model_name, steps, warmup, batch, device) -> dict:
    torch = use_library(lib)
    sys.path.insert(0, HERE)
    import user_gpt  # (after `torch` is chosen)

    torch.manual_seed(0)
    tf32 = precision == "tf32"
    if tf32:  # (off is both libraries' default)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    config = user_gpt.GPTConfig(custom=model_name == "custom")
    model = user_gpt.GPT(config).to(device)
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cuda" if device.startswith("cuda") else "cpu")
    if mode == "compiled" or (mode == "step" and lib == "torch"):
        model = torch.compile(model)
    ctx = torch.autocast(device_type="cuda", dtype=torch.bfloat16) if precision == "bf16" else _nothing()

    def train_step(x, y):
        with ctx:
            _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    if mode == "step" and lib == "gradcraft":  # the whole step compiled: one graph (torch: its compiled model)
        train_step = torch.compile(train_step)
    rng = np.random.default_rng(0)
    data = rng.integers(0, config.vocab_size, size=(warmup + steps, batch, config.block_size + 1))
    kernels = _kernel_counter(lib)
    losses = []
    start = None
    for i in range(warmup + steps):
        if i == warmup:
            _sync(torch, device)
            start = time.perf_counter()
            kernels.reset()
        x = torch.from_numpy(data[i, :, :-1].astype(np.int64)).to(device)
        y = torch.from_numpy(data[i, :, 1:].astype(np.int64)).to(device)
        loss = train_step(x, y)
        if i % 10 == 0:
            losses.append(round(loss.item(), 4))
    _sync(torch, device)
    ms = (time.perf_counter() - start) / steps * 1e3
    out = {"lib": lib, "mode": mode, "precision": precision, "model": model_name, "ms": ms, "losses": losses}
    out.update(kernels.per_step(steps))
    return out


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _sync(torch, device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _kernel_counter(lib):
    """gradcraft: kernels launched one by one, graphs replayed and the kernels they held, per step."""

    class Counter:
        def reset(self):
            if lib == "gradcraft":
                from gradcraft.engine import plans, realize

                self.sources = (realize.launches, plans.stats)
                self.base = (dict(realize.launches), dict(plans.stats))

        def per_step(self, steps):
            if lib != "gradcraft":
                return {}
            (launches, stats), (launches0, stats0) = self.sources, self.base
            return {
                "eager_kernels": (launches["kernels"] - launches0["kernels"]) / steps,
                "graphs": (stats["replayed"] - stats0["replayed"]) / steps,  # (a whole compiled step: not counted)
                "graph_kernels": (stats["replayed_kernels"] - stats0["replayed_kernels"]) / steps,
            }

    return Counter()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", help="one configuration, lib:mode:precision:model")
    p.add_argument("--libs", default=",".join(LIBS))
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--precisions", default=",".join(PRECISIONS))
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--device", default="cuda")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    if args.only:
        lib, mode, precision, model = args.only.split(":")
        result = run_one(lib, mode, precision, model, args.steps, args.warmup, args.batch, args.device)
        print("RESULT " + json.dumps(result), flush=True)
        return
    results = []
    for model in args.models.split(","):
        for precision in args.precisions.split(","):
            for mode in args.modes.split(","):
                for lib in args.libs.split(","):
                    spec = f"{lib}:{mode}:{precision}:{model}"
                    same = [
                        r
                        for r in results
                        if (r["lib"], r["mode"], r["precision"], r["model"]) == (lib, "compiled", precision, model)
                    ]
                    if lib == "torch" and mode == "step" and same and "ms" in same[0]:
                        results.append(dict(same[0], mode="step"))  # (PyTorch's compiled model, run once)
                        continue
                    cmd = [sys.executable, __file__, "--only", spec, "--steps", str(args.steps)]
                    cmd += ["--warmup", str(args.warmup), "--batch", str(args.batch), "--device", args.device]
                    proc = subprocess.run(cmd, capture_output=True, text=True)
                    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
                    if line:
                        results.append(json.loads(line[0][7:]))
                        r = results[-1]
                        extra = {k: r[k] for k in ("eager_kernels", "graphs", "graph_kernels") if k in r}
                        print(f"{spec:36s} {r['ms']:8.2f} ms/step  losses {r['losses'][:3]} {extra}", flush=True)
                    else:
                        err = (proc.stderr.strip().splitlines() or ["?"])[-1]
                        results.append({"lib": lib, "mode": mode, "precision": precision, "model": model, "error": err})
                        print(f"{spec:36s} failed: {err}", flush=True)
    print("\nmodel   precision mode      torch ms  gradcraft ms  ratio (torch/gradcraft)")
    for model in args.models.split(","):
        for precision in args.precisions.split(","):
            for mode in args.modes.split(","):
                row = {
                    r["lib"]: r for r in results if (r["model"], r["precision"], r["mode"]) == (model, precision, mode)
                }
                t, g = row.get("torch", {}).get("ms"), row.get("gradcraft", {}).get("ms")
                ratio = f"{t / g:.2f}x" if t and g else "-"
                print(f"{model:7s} {precision:9s} {mode:9s} {t or 0:8.2f}  {g or 0:12.2f}  {ratio}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
