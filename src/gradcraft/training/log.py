"""The training logs: `training_log.csv` (one row per step), `events.jsonl` (one JSON object per
event), an optional TensorBoard event file, and a loss-curve PNG drawn from the CSV."""

import csv
import json
import math
import os
import time

from gradcraft.atomic import write_failure, write_text

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
        try:
            self.writer.writerow({c: _fmt(row.get(c)) for c in self.columns})
            self.file.flush()
        except OSError as e:  # (a full disk: the one line names this file)
            raise write_failure(self.path, e) from None

    def close(self) -> None:
        self.file.close()


# The writers `--log` may name; csv is always on.
LOG_KINDS = ("csv", "jsonl", "tensorboard")
TENSORBOARD_MISSING = "--log tensorboard needs the tensorboard package: pip install tensorboard"


def parse_log_kinds(spec: str) -> list:
    """--log "jsonl,tensorboard" -> the writers to use, csv always among them; a bad name is a UserError."""
    from gradcraft.errors import ConfigError

    kinds = [k.strip() for k in (spec or "").split(",") if k.strip()]
    bad = [k for k in kinds if k not in LOG_KINDS]
    if bad:
        raise ConfigError(
            f"{bad[0]!r} is not a known logger; log takes a comma list of {', '.join(LOG_KINDS)}", ("log",)
        )
    return ["csv"] + [k for k in LOG_KINDS[1:] if k in kinds]


def check_tensorboard() -> None:
    """A UserError naming `pip install tensorboard` when the tensorboard package is missing."""
    from gradcraft.errors import UserError

    try:
        import tensorboard.summary.writer.event_file_writer  # noqa: F401
    except ImportError:
        raise UserError(TENSORBOARD_MISSING) from None


class JSONLLog:
    """`events.jsonl`: one JSON object a line (`"event"`: start, step, eval or end; each has `"step"`).

    Line-buffered and flushed per event, so a crash loses at most the line being written. On resume
    the events after the resumed step are dropped (they are redone), as CSVLog drops its rows, and
    so is a last line a crash cut short."""

    def __init__(self, path: str, resume_step: int | None = None):
        self.path = path
        self.t0 = time.time()
        lines = []
        if resume_step is not None and os.path.exists(path):
            lines = [json.dumps(e) for e in read_events(path) if int(e.get("step", 0)) <= resume_step]
        write_text(path, "".join(line + "\n" for line in lines))
        self.file = open(path, "a", buffering=1)

    def write(self, event: str, step: int, **values) -> None:
        now = time.time()
        record = {"event": event, "step": step, "time": round(now, 3), "elapsed": round(now - self.t0, 3)}
        record.update((k, _json_value(v)) for k, v in values.items())
        try:
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()
        except OSError as e:  # (a full disk: the one line names this file)
            raise write_failure(self.path, e) from None

    def close(self) -> None:
        self.file.close()


def _whole_lines(path: str):
    """The lines of a log file that end in a newline (a last line without one was cut short by a
    crash: a torn write, dropped), as text; a line that is not UTF-8 is skipped."""
    with open(path, "rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                return
            try:
                yield raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                continue


def read_events(path: str) -> list:
    """The events of an events.jsonl: JSON objects with an integer "step" >= 0. A line that does not
    parse, has bad bytes or bad types, or was cut short by a crash, is skipped."""
    events = []
    for line in _whole_lines(path):
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            continue
        step = event.get("step") if isinstance(event, dict) else None
        if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
            events.append(event)
    return events


def _json_value(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN or Infinity
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        return _json_value(value.item())  # a numpy scalar
    return value


class TensorBoardLog:
    """Scalars in a TensorBoard event file under `<model_dir>/tensorboard/`, written with the
    tensorboard package's own writer (no torch, no tensorflow). On resume a SessionLog START just after the
    resumed step makes TensorBoard drop the scalars a previous session wrote after that step."""

    def __init__(self, log_dir: str, resume_step: int | None = None):
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.Event, self.Summary = Event, Summary
        os.makedirs(log_dir, exist_ok=True)
        self.writer = EventFileWriter(log_dir, flush_secs=10)
        if resume_step is not None:
            # TensorBoard keeps the points before this event's step and drops those at it and after
            self.writer.add_event(
                Event(wall_time=time.time(), step=resume_step + 1, session_log=SessionLog(status=SessionLog.START))
            )

    def scalars(self, step: int, values: dict) -> None:
        values = {k: float(v) for k, v in values.items() if v is not None and math.isfinite(float(v))}
        if values:
            summary = self.Summary(value=[self.Summary.Value(tag=k, simple_value=v) for k, v in values.items()])
            self.writer.add_event(self.Event(wall_time=time.time(), step=step, summary=summary))

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class RunLogs:
    """The run's logs together: the CSV always, events.jsonl and TensorBoard as `--log` names them."""

    def __init__(self, model_dir: str, kinds, resume_step: int | None = None, extra_columns=()):
        self.csv = CSVLog(
            os.path.join(model_dir, "training_log.csv"), resume_step=resume_step, extra_columns=extra_columns
        )
        self.jsonl = JSONLLog(os.path.join(model_dir, "events.jsonl"), resume_step) if "jsonl" in kinds else None
        self.tb = (
            TensorBoardLog(os.path.join(model_dir, "tensorboard"), resume_step) if "tensorboard" in kinds else None
        )

    def start(self, step: int, resumed: bool, config: dict, model: dict) -> None:
        if self.jsonl:
            self.jsonl.write("start", step, resumed=resumed, config=config, model=model)

    def append(self, row: dict) -> None:
        """One step's row (the CSV's columns); its val_loss, when set, is also an eval event."""
        self.csv.append(row)
        step = row["step"]
        if self.jsonl:
            self.jsonl.write("step", step, **{k: v for k, v in row.items() if k not in ("step", "val_loss")})
            if row.get("val_loss") is not None:
                self.jsonl.write("eval", step, val_loss=row["val_loss"])
        if self.tb:
            self.tb.scalars(
                step,
                {
                    "train/loss": row["loss"],
                    "train/lr": row["lr"],
                    "train/grad_norm": row["grad_norm"],
                    "val/loss": row.get("val_loss"),
                },
            )

    def end(self, step: int, status: str, **values) -> None:
        if self.jsonl:
            self.jsonl.write("end", step, status=status, **values)

    def close(self) -> None:
        self.csv.close()
        if self.jsonl:
            self.jsonl.close()
        if self.tb:
            self.tb.close()


def _fmt(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)  # full precision: resumed logs compare bitwise
    return value


def read_log(path: str) -> list:
    """The well-formed rows of a training_log.csv, as dicts of strings: a header starting with
    "step", then rows with as many fields, an integer step >= 0 and numbers (or nothing) elsewhere.
    Anything else (a torn last line, a headerless or binary file, a damaged row) is skipped, so that
    a resume trims it and the plot never meets it."""
    rows, header = [], None
    for line in _whole_lines(path):
        try:
            values = next(csv.reader([line]), [])
        except csv.Error:
            continue
        if header is None:
            if not values or values[0] != "step":
                return []  # no header: nothing in the file can be trusted to be a column
            header = values
            continue
        if len(values) != len(header):
            continue
        row = dict(zip(header, values))
        if (
            row["step"].isascii()
            and row["step"].isdigit()
            and all(_is_number(v) for k, v in row.items() if k != "step")
        ):
            rows.append(row)
    return rows


def _is_number(text: str) -> bool:
    if text == "":
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True


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
