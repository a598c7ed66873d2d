"""The training log: `training_log.csv` (one row per step) and a loss-curve PNG drawn from it."""

import csv
import math
import os

from gradcraft.atomic import write_text

COLUMNS = ["step", "loss", "grad_norm", "lr", "tokens_per_s", "val_loss"]


class CSVLog:
    def __init__(self, path: str, resume_step: int | None = None, extra_columns=()):
        self.path = path
        self.columns = COLUMNS + list(extra_columns)
        rows = []
        if resume_step is not None and os.path.exists(path):
            # Rows written after the checkpoint we resume from are redone: drop them.
            rows = [r for r in read_log(path) if int(r["step"]) <= resume_step]
        lines = [",".join(self.columns)] + [",".join(str(r.get(c, "")) for c in self.columns) for r in rows]
        write_text(path, "\n".join(lines) + "\n")
        self.file = open(path, "a", newline="")
        self.writer = csv.DictWriter(self.file, fieldnames=self.columns)

    def append(self, row: dict) -> None:
        self.writer.writerow({c: _fmt(row.get(c)) for c in self.columns})
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def _fmt(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)  # full precision: resumed logs compare bitwise
    return value


def read_log(path: str) -> list:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def plot_loss(log_path: str, png_path: str) -> None:
    """Training (and validation) loss against step."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_log(log_path)
    steps = [int(r["step"]) for r in rows if r["loss"] and math.isfinite(float(r["loss"]))]
    losses = [float(r["loss"]) for r in rows if r["loss"] and math.isfinite(float(r["loss"]))]
    val = [(int(r["step"]), float(r["val_loss"])) for r in rows if r.get("val_loss")]
    expert_columns = [c for c in (rows[0].keys() if rows else ()) if "_expert" in c]
    fig, axes = plt.subplots(2 if expert_columns else 1, 1, figsize=(8, 8 if expert_columns else 4.5), squeeze=False)
    ax = axes[0][0]
    ax.plot(steps, losses, label="train loss", linewidth=1)
    if val:
        ax.plot(*zip(*val), "o-", label="validation loss")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.grid(alpha=0.3)
    ax.legend()
    if expert_columns:  # mixture of experts: each expert's share of the routed tokens
        ax = axes[1][0]
        for column in expert_columns:
            points = [(int(r["step"]), float(r[column])) for r in rows if r.get(column)]
            if points:
                ax.plot(*zip(*points), linewidth=1, label=column)
        ax.set_xlabel("step")
        ax.set_ylabel("share of routed tokens")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    tmp = png_path + ".tmp.png"
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, png_path)
