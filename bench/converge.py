"""Convergence against PyTorch: does gradcraft train a GPT as well as PyTorch trains the same GPT?

gradcraft's Transformer and an independent PyTorch GPT (nanoGPT's model, written out below: LayerNorm,
tanh-GELU MLP, learned positions, biases, tied embeddings, dropout after the embeddings, on the
attention weights and after each projection) are trained side by side on a byte-level corpus (the
Python standard library's .py files, the corpus of the quick start, read as bytes: vocabulary 256):

- the same initial weights (ours, copied into PyTorch),
- the same batches in the same order, the same learning-rate schedule, AdamW settings and clipping,
- each side's own weight-decay rule: ours (gradcraft/optim/weight_decay.py) and nanoGPT's
  `configure_optimizers` (every parameter of 2+ dimensions), written here;
- each side's own dropout masks (dropout is random: the curves part by noise, not by design).

Printed: both validation curves (the same held-out batches, eval mode) and each side's best and final
validation loss; with several seeds, the mean differences.

    python bench/converge.py                                   # CPU, tiny model: a few minutes on 2 cores
    python bench/converge.py --steps 100 --seed 0,1,2
    python bench/converge.py --recipe gpu --device cuda --seed 0,1,2    # the GPU recipe (10.8M, bf16)
    python bench/converge.py --json curves.json --plot curves.png

Flags after --recipe override the recipe's values (--dropout, --layers, --dim, ...).
"""

import argparse
import glob
import hashlib
import json
import os
import sys
import sysconfig
import textwrap
import time

import numpy as np

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
)  # gradcraft from this checkout

RECIPES = {
    # tiny, for 2 CPU cores: about 0.1M parameters, 400 steps of 16 x 64 bytes. PyTorch on one thread:
    # two spinning threads on a busy 2-core machine make it ten times slower
    "cpu": dict(
        corpus_mb=1.0,
        layers=2,
        dim=64,
        heads=4,
        seq_len=64,
        batch=16,
        steps=400,
        lr=2e-3,
        min_lr=2e-4,
        warmup=30,
        beta2=0.99,
        weight_decay=0.1,
        clip=1.0,
        dropout=0.1,
        eval_every=50,
        eval_batches=8,
        dtype="float32",
        threads=1,
    ),
    # the GPU recipe: 10.8M parameters, 5,000 steps of 64 x 256 bytes, bf16
    "gpu": dict(
        corpus_mb=1.1,
        layers=6,
        dim=384,
        heads=6,
        seq_len=256,
        batch=64,
        steps=5000,
        lr=1e-3,
        min_lr=1e-4,
        warmup=100,
        beta2=0.99,
        weight_decay=0.1,
        clip=1.0,
        dropout=0.2,
        eval_every=250,
        eval_batches=20,
        dtype="bfloat16",
        threads=None,
    ),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", choices=sorted(RECIPES), default="cpu", help="default values (default: cpu)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (both sides)")
    p.add_argument("--seed", default="0", help="a seed, or a comma list (one run per seed)")
    for name, kind in (
        ("steps", int),
        ("corpus_mb", float),
        ("layers", int),
        ("dim", int),
        ("heads", int),
        ("seq_len", int),
        ("batch", int),
        ("lr", float),
        ("min_lr", float),
        ("warmup", int),
        ("beta2", float),
        ("weight_decay", float),
        ("clip", float),
        ("dropout", float),
        ("eval_every", int),
        ("eval_batches", int),
    ):
        p.add_argument(f"--{name}", type=kind, help="(default: the recipe's)")
    p.add_argument("--attn_dropout", type=float, help="dropout on the attention weights (default: --dropout)")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], help="(default: the recipe's)")
    p.add_argument("--threads", type=int, help="CPU threads for PyTorch (default: the recipe's; gpu: its own)")
    p.add_argument("--json", help="write the curves and results here")
    p.add_argument("--plot", help="draw the validation curves into this PNG (needs matplotlib)")
    args = p.parse_args(argv)
    for key, value in RECIPES[args.recipe].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.attn_dropout is None:
        args.attn_dropout = args.dropout
    args.seeds = [int(s) for s in str(args.seed).split(",")]
    return args


# ------------------------------------------------------------------ data


def stdlib_corpus(megabytes: float) -> tuple[np.ndarray, str]:
    """The first `megabytes` of the standard library's .py files (sorted by path, site-packages and
    tests left out) as bytes: (uint8 array, a description with its sha256)."""
    root = sysconfig.get_paths()["stdlib"]
    files = sorted(
        f
        for f in glob.glob(os.path.join(root, "**", "*.py"), recursive=True)
        if "site-packages" not in f and f"{os.sep}test" not in f[len(root) :]
    )
    limit, chunks, size = int(megabytes * 2**20), [], 0
    for path in files:
        with open(path, "rb") as f:
            chunks.append(f.read())
        size += len(chunks[-1])
        if size >= limit:
            break
    data = b"".join(chunks)[:limit]
    digest = hashlib.sha256(data).hexdigest()[:12]
    return np.frombuffer(data, dtype=np.uint8), (
        f"{len(data):,} bytes of Python {sys.version.split()[0]}'s stdlib .py files (sha256 {digest})"
    )


def windows(data: np.ndarray, starts: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets), int64 (len(starts), seq_len) each: targets are the inputs shifted by one."""
    rows = np.stack([data[s : s + seq_len + 1] for s in starts]).astype(np.int64)
    return rows[:, :-1], rows[:, 1:]


# ------------------------------------------------------------------ the PyTorch side: nanoGPT's model


def torch_gpt(args):
    """nanoGPT's GPT (model.py), the parts this recipe uses: a torch.nn.Module class built on demand."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(args.dim, 3 * args.dim)
            self.c_proj = nn.Linear(args.dim, args.dim)
            self.resid_dropout = nn.Dropout(args.dropout)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.c_attn(x).split(args.dim, dim=2)
            q, k, v = (t.view(B, T, args.heads, C // args.heads).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
            y = F.scaled_dot_product_attention(
                q, k, v, dropout_p=args.attn_dropout if self.training else 0.0, is_causal=True
            )
            return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(args.dim, 4 * args.dim)
            self.c_proj = nn.Linear(4 * args.dim, args.dim)
            self.dropout = nn.Dropout(args.dropout)

        def forward(self, x):
            return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn = nn.LayerNorm(args.dim), CausalSelfAttention()
            self.ln_2, self.mlp = nn.LayerNorm(args.dim), MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(256, args.dim), nn.Embedding(args.seq_len, args.dim)
            self.drop = nn.Dropout(args.dropout)
            self.h = nn.ModuleList(Block() for _ in range(args.layers))
            self.ln_f = nn.LayerNorm(args.dim)
            self.lm_head = nn.Linear(args.dim, 256, bias=False)
            self.lm_head.weight = self.wte.weight  # tied

        def forward(self, idx, targets):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.drop(self.wte(idx) + self.wpe(pos))
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.float().view(-1, 256), targets.reshape(-1))

        def configure_optimizers(self, weight_decay, lr, betas, device_type):
            """nanoGPT's: decay every parameter of 2+ dimensions, none of the others."""
            params = {n: p for n, p in self.named_parameters() if p.requires_grad}
            decay = [p for p in params.values() if p.dim() >= 2]
            other = [p for p in params.values() if p.dim() < 2]
            groups = [{"params": decay, "weight_decay": weight_decay}, {"params": other, "weight_decay": 0.0}]
            return torch.optim.AdamW(groups, lr=lr, betas=betas, fused=device_type == "cuda")

    return GPT


def copy_ours_into(gpt, weights: dict) -> None:
    """Our state dict (NumPy, our names) into nanoGPT's parameters."""
    import torch

    names = {
        "wte.weight": "tok_emb.weight",
        "wpe.weight": "pos_emb.weight",
        "ln_f.weight": "norm.weight",
        "ln_f.bias": "norm.bias",
    }
    for i in range(len(gpt.h)):
        for theirs, ours in (
            ("ln_1", "norm1"),
            ("ln_2", "norm2"),
            ("attn.c_attn", "attn.qkv"),
            ("attn.c_proj", "attn.proj"),
            ("mlp.c_fc", "mlp.fc"),
            ("mlp.c_proj", "mlp.proj"),
        ):
            for kind in ("weight", "bias"):
                names[f"h.{i}.{theirs}.{kind}"] = f"blocks.{i}.{ours}.{kind}"
    with torch.no_grad():
        for theirs, p in gpt.named_parameters():  # (the tied lm_head.weight is wte.weight)
            p.copy_(torch.from_numpy(weights[names[theirs]]))


# ------------------------------------------------------------------ the two runs


def run_seed(args, data: np.ndarray, seed: int, log) -> dict:
    import torch

    import gradcraft as gc
    from gradcraft.capture import CapturedStep
    from gradcraft.models import ModelConfig, Transformer
    from gradcraft.ops.creation import advance_dropout
    from gradcraft.optim import AdamW, CosineWithWarmup, grad_norm_and_scale
    from gradcraft.optim.lr_schedule import set_lr
    from gradcraft.optim.weight_decay import weight_decay_groups

    split = int(len(data) * 0.9)
    train_data, val_data = data[:split], data[split:]
    rng = np.random.default_rng(seed)
    eval_starts = np.random.default_rng(10_000 + seed).integers(
        0, len(val_data) - args.seq_len - 1, size=(args.eval_batches, args.batch)
    )
    schedule = CosineWithWarmup(args.lr, args.min_lr, args.warmup, args.steps)
    cuda = args.device.startswith("cuda")

    # ours
    gc.manual_seed(seed)
    cfg = ModelConfig(
        vocab_size=256,
        seq_len=args.seq_len,
        dim=args.dim,
        n_layers=args.layers,
        n_heads=args.heads,
        norm="layernorm",
        mlp="gelu",
        positions="learned",
        bias=True,
        tie_embeddings=True,
        dropout=args.dropout,
        attn_dropout=args.attn_dropout,
    )
    model = Transformer(cfg)
    weights = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    model.to(args.device)
    device = model.tok_emb.weight.device
    opt = AdamW(weight_decay_groups(model, args.weight_decay), lr=args.lr, betas=(0.9, args.beta2))
    compute_dtype = gc.bfloat16 if args.dtype == "bfloat16" else None
    x_in = gc.zeros(args.batch, args.seq_len, dtype=gc.int64, device=device).realize()
    y_in = gc.zeros(args.batch, args.seq_len, dtype=gc.int64, device=device).realize()
    backend = gc.device.get_backend(device)

    def our_step():
        advance_dropout(device)  # new masks every step (recorded, so each replay moves them on too)
        _, loss = model(x_in, y_in, compute_dtype=compute_dtype)
        loss.backward()
        stats = grad_norm_and_scale(model.parameters(), args.clip)
        opt.step(grad_scale=stats, prepare=False)
        opt.zero_grad()
        return loss

    our_run = CapturedStep(our_step, device) if cuda else our_step

    # PyTorch
    torch.manual_seed(seed)
    tdev = torch.device(args.device)
    gpt = torch_gpt(args)().to(tdev)
    copy_ours_into(gpt, weights)
    topt = gpt.configure_optimizers(args.weight_decay, args.lr, (0.9, args.beta2), tdev.type)

    def evaluate():
        ours, theirs = [], []
        model.eval()
        gpt.eval()
        with gc.no_grad(), torch.no_grad(), torch.autocast(tdev.type, torch.bfloat16, enabled=args.dtype == "bfloat16"):
            for starts in eval_starts:
                x, y = windows(val_data, starts, args.seq_len)
                ours.append(
                    model(gc.tensor(x, device=device), gc.tensor(y, device=device), compute_dtype=compute_dtype)[
                        1
                    ].item()
                )
                theirs.append(gpt(torch.from_numpy(x).to(tdev), torch.from_numpy(y).to(tdev)).item())
        model.train()
        gpt.train()
        return float(np.mean(ours)), float(np.mean(theirs))

    curve = [(0, *evaluate())]
    log(f"seed {seed}: step      0  val gradcraft {curve[0][1]:.4f}  pytorch {curve[0][2]:.4f}")
    train_loss = {"ours": [], "torch": []}
    seconds = {"ours": 0.0, "torch": 0.0}
    for step in range(args.steps):
        x, y = windows(train_data, rng.integers(0, len(train_data) - args.seq_len - 1, size=args.batch), args.seq_len)
        lr = schedule(step)

        t0 = time.perf_counter()
        set_lr(opt, lr)
        backend.write(x_in._buf, x)
        backend.write(y_in._buf, y)
        opt.prepare()
        train_loss["ours"].append(our_run().item())
        seconds["ours"] += time.perf_counter() - t0

        t0 = time.perf_counter()
        for group in topt.param_groups:
            group["lr"] = lr
        with torch.autocast(tdev.type, torch.bfloat16, enabled=args.dtype == "bfloat16"):
            loss = gpt(torch.from_numpy(x).to(tdev), torch.from_numpy(y).to(tdev))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(gpt.parameters(), args.clip)
        topt.step()
        topt.zero_grad(set_to_none=True)
        train_loss["torch"].append(loss.item())
        seconds["torch"] += time.perf_counter() - t0

        done = step + 1
        if done % args.eval_every == 0 or done == args.steps:
            curve.append((done, *evaluate()))
            recent = slice(-min(args.eval_every, done), None)
            log(
                f"seed {seed}: step {done:6d}  val gradcraft {curve[-1][1]:.4f}  pytorch {curve[-1][2]:.4f}   "
                f"(train {np.mean(train_loss['ours'][recent]):.4f} / {np.mean(train_loss['torch'][recent]):.4f})"
            )
    if cuda and hasattr(our_run, "close"):
        our_run.close()
    result = {
        "seed": seed,
        "curve": curve,
        "seconds": seconds,
        "final_train": {k: float(np.mean(v[-min(args.eval_every, len(v)) :])) for k, v in train_loss.items()},
    }
    for side, column in (("ours", 1), ("torch", 2)):
        best = min(curve[1:] or curve, key=lambda row: row[column])
        result[side] = {"best": best[column], "best_step": best[0], "final": curve[-1][column]}
    return result


def report(results: list, log) -> None:
    log("")
    log("seed  best val: gradcraft (step)  pytorch (step)   diff  |  final val: gradcraft  pytorch   diff")
    for r in results:
        o, t = r["ours"], r["torch"]
        log(
            f"{r['seed']:4d}  {o['best']:16.4f} ({o['best_step']:5d}) {t['best']:8.4f} ({t['best_step']:5d}) "
            f"{o['best'] - t['best']:+7.4f}  |  {o['final']:17.4f} {t['final']:8.4f} {o['final'] - t['final']:+7.4f}"
        )
    if len(results) > 1:
        best = np.mean([r["ours"]["best"] - r["torch"]["best"] for r in results])
        final = np.mean([r["ours"]["final"] - r["torch"]["final"] for r in results])
        log(f"mean  gradcraft - pytorch: best {best:+.4f}, final {final:+.4f} over {len(results)} seeds")
    times = {side: sum(r["seconds"][side] for r in results) for side in ("ours", "torch")}
    log(f"training time: gradcraft {times['ours']:.1f} s, pytorch {times['torch']:.1f} s")


def plot(results: list, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, r in enumerate(results):
        curve = r["curve"][1:] if len(r["curve"]) > 2 else r["curve"]  # (the untrained step 0 would flatten it)
        steps = [row[0] for row in curve]
        ax.plot(
            steps,
            [row[1] for row in curve],
            color="tab:blue",
            alpha=0.8,
            marker=".",
            label="gradcraft" if i == 0 else None,
        )
        ax.plot(
            steps,
            [row[2] for row in curve],
            color="tab:orange",
            alpha=0.8,
            linestyle="--",
            marker=".",
            label="PyTorch (nanoGPT's model)" if i == 0 else None,
        )
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (nats/byte)")
    ax.set_title(textwrap.fill(title + f"; seeds {', '.join(str(r['seed']) for r in results)}", 90), fontsize=8)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    args = parse_args(argv)
    log = print
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    data, what = stdlib_corpus(args.corpus_mb)
    if len(data) < 20 * (args.seq_len + 1):
        print(
            f"error: the corpus holds {len(data):,} bytes, too few for --seq_len {args.seq_len}; raise --corpus_mb",
            file=sys.stderr,
        )
        return 2
    drop = f"dropout {args.dropout}"
    if args.attn_dropout != args.dropout:
        drop += f" (attention {args.attn_dropout})"
    title = (
        f"{args.layers} layers, dim {args.dim}, {args.heads} heads, context {args.seq_len}, {drop}, "
        f"{args.batch} x {args.seq_len} bytes x {args.steps} steps, lr {args.lr:g}->{args.min_lr:g}, "
        f"wd {args.weight_decay:g}, {args.dtype}, {args.device}"
    )
    log(f"corpus: {what}; 90% train / 10% validation")
    log(f"recipe: {title}")
    results = [run_seed(args, data, seed, log) for seed in args.seeds]
    report(results, log)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "corpus": what, "results": results}, f, indent=1)
    if args.plot:
        plot(results, args.plot, title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
