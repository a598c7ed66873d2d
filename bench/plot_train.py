"""Bar chart of training throughput from bench/train_gpt.py --json files: tokens/s per configuration
(a group of bars) and side (gradcraft and each PyTorch baseline, one colour each), written as a PNG.

    python bench/train_gpt.py --preset mallmoc --batch 16 --seq 512 --device cuda --graph --json gpu.json
    python bench/train_gpt.py --preset mallmoc --batch 16 --seq 512 --device cuda --graph --bf16 --json gpu.json
    python bench/plot_train.py gpu.json --out train_tokens_per_s.png

Each run of train_gpt.py appends one configuration (its --label, by default "preset precision
batch x seq") to the file; several files may be given. Above each PyTorch bar: ours / that bar.
Needs matplotlib.
"""

import argparse
import json
import sys

SIDE_ORDER = ("gradcraft", "eager", "sdpa", "compile")
COLOURS = {"gradcraft": "#d62728", "eager": "#9ecae1", "sdpa": "#4292c6", "compile": "#08519c"}


def load_runs(paths) -> list[dict]:
    runs = []
    for path in paths:
        with open(path) as f:
            runs += json.load(f)["runs"]
    return runs


def table(runs) -> tuple[list[str], list[str], dict]:
    """(configuration labels, sides in order, {(label, side): tokens/s}) of the runs that succeeded."""
    labels = list(dict.fromkeys(r["label"] for r in runs))
    values = {}
    for r in runs:
        for side, numbers in r["sides"].items():
            if "tokens_per_s" in numbers:
                values[(r["label"], side)] = numbers["tokens_per_s"]
    present = {side for _, side in values}
    sides = [s for s in SIDE_ORDER if s in present] + sorted(present - set(SIDE_ORDER))
    return labels, sides, values


def plot(runs, out: str, title: str | None = None) -> None:
    try:
        import matplotlib
    except ImportError:
        sys.exit("error: plotting needs matplotlib: pip install gradcraft[plot] (or matplotlib)")
    matplotlib.use("Agg")  # a file, no display
    import matplotlib.pyplot as plt

    labels, sides, values = table(runs)
    if not values:
        sys.exit("error: no side of any run has a tokens/s figure to plot")
    width = 0.8 / len(sides)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.5 + len(labels) * (0.4 + 0.5 * len(sides))), 4.5))
    for j, side in enumerate(sides):
        xs = [i + (j - (len(sides) - 1) / 2) * width for i in range(len(labels))]
        heights = [values.get((label, side), 0.0) for label in labels]
        bars = ax.bar(xs, heights, width, label=side, color=COLOURS.get(side))
        for bar, label in zip(bars, labels):
            ours = values.get((label, "gradcraft"))
            theirs = values.get((label, side))
            if side != "gradcraft" and ours and theirs:
                ax.annotate(
                    f"{ours / theirs:.2f}x",
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=15 if len(labels) > 3 else 0, ha="right" if len(labels) > 3 else "center")
    ax.set_ylabel("tokens / s (higher is better)")
    ax.set_title(title or "training throughput (above a PyTorch bar: ours / it)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("json", nargs="+", help="files written by bench/train_gpt.py --json")
    p.add_argument("--out", default="train_tokens_per_s.png", help="PNG to write (default: %(default)s)")
    p.add_argument("--title", default=None)
    args = p.parse_args(argv)
    plot(load_runs(args.json), args.out, args.title)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
