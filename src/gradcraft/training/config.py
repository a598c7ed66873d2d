"""A training run's settings (TrainConfig) and the settings file `gradcraft train --config` reads.

Each field's help text and range are its metadata (`gradcraft.validation.setting`), the one place
they are written: the `train` flags are generated from them (cli/train.py), and a --config file, the
run's saved train_config.json and TrainConfig.validate() are checked against them. Errors name the
fields (`steps must be ...`); the command line spells them as flags.

A settings file (TOML or JSON) holds ModelConfig and TrainConfig fields by name, either in a `model`
and a `train` table or flat (each key then goes to the dataclass that has it), plus `preset`:

    preset = "demo"            # or [model] preset = "demo"
    [model]
    n_layers = 2
    [train]
    steps = 200
    max_lr = 3e-4

A run's own train_config.json (flat) and gradcraft_config.json are such files.
"""

import dataclasses
import os
from dataclasses import dataclass

from gradcraft.data.sampler import SAMPLERS
from gradcraft.errors import ConfigError, UserError
from gradcraft.training.log import check_tensorboard, parse_log_kinds
from gradcraft.validation import (
    Value,
    check_fields,
    field_values,
    fraction,
    non_negative_float,
    non_negative_int,
    parse_json,
    positive_float,
    positive_int,
    read_bytes,
    seed,
    setting,
)


@dataclass
class TrainConfig:
    dataset: str = setting(help="token file from `gradcraft tokenize`", flag=False)
    model_dir: str = setting(help="where checkpoints, logs and weights go", flag=False)
    steps: int = setting(
        1000, value=positive_int, help="optimizer steps in the whole run; the schedule ends at this step"
    )
    batch_size: int = setting(8, value=positive_int, help="sequences per micro-batch")
    target_batch: int | None = setting(
        None,
        value=positive_int,
        help="sequences per optimizer step, all processes (a multiple of batch_size x "
        "nproc) (default: batch_size x nproc)",
    )
    max_lr: float = setting(1e-3, value=positive_float, help="peak learning rate, reached after warmup")
    min_lr: float = setting(1e-4, value=non_negative_float, help="learning rate at the end of the cosine decay")
    warmup_steps: int = setting(100, value=non_negative_int, help="steps of linear warmup")
    beta1: float = setting(0.9, value=fraction, help="AdamW beta1")
    beta2: float = setting(0.95, value=fraction, help="AdamW beta2")
    weight_decay: float = setting(
        0.1,
        value=non_negative_float,
        help="AdamW weight decay, on every weight of 2+ dimensions (none on norms, biases, "
        "vectors); gradcraft/optim/weight_decay.py",
    )
    decay_embeddings: bool = setting(
        True, help="true: the embeddings (and a tied output layer) are decayed too, as in nanoGPT; false: not"
    )
    grad_clip: float = setting(
        1.0, value=non_negative_float, help="clip the global gradient norm to this (0: no clipping)"
    )
    label_smoothing: float = setting(0.0, value=fraction, help="label smoothing of the cross-entropy")
    print_every: int = setting(10, value=positive_int, help="print a line every N steps (without a progress bar)")
    checkpoint_every: int = setting(100, value=positive_int, help="write a checkpoint every N steps (and at the end)")
    keep_checkpoints: int = setting(3, value=positive_int, help="checkpoints kept (the newest)")
    eval_every: int = setting(
        0, value=non_negative_int, help="evaluate on the validation split every N steps (0: at the end only)"
    )
    eval_batches: int = setting(8, value=positive_int, help="batches per evaluation")
    sampling: str = setting(
        "random",
        value=Value(str, choices=tuple(SAMPLERS)),
        help="random: windows anywhere; sequential: each window once per epoch, shuffled",
    )
    seed: int = setting(0, value=seed, help="random seed (weights, batches, dropout)")
    device: str = setting("cpu", help="cpu, cuda or cuda:N")
    dtype: str = setting(
        "float32",
        value=Value(str, choices=("float32", "bfloat16")),
        help="bfloat16 = mixed precision (fp32 master weights)",
    )
    max_bad_steps: int = setting(3, value=positive_int, help="stop after this many non-finite steps in a row")
    stop_after: int | None = setting(
        None,
        value=positive_int,
        help="end this session at step N while the schedule still spans steps (then "
        "--resume) (default: none: run to steps)",
    )
    progress: bool = setting(True, flag=False, help="a progress bar (the flag --no_progress turns it off)")
    cuda_graph: str = setting(
        "auto",
        value=Value(str, choices=("auto", "on", "off")),
        help="record the step as a CUDA graph and replay it (auto: on for cuda)",
    )
    nproc: int = setting(
        1,
        value=positive_int,
        help="data-parallel processes on this machine: one per GPU from device on (NCCL), or CPU processes",
    )
    # nnodes, bucket_mb and zero have their flags with the other multi-node ones (cli/distributed_flags.py)
    nnodes: int = setting(
        1,
        value=positive_int,
        flag=False,
        help="nodes of this session (set by the launch, never saved: a run may resume on others)",
    )
    bucket_mb: float = setting(
        25.0,
        value=positive_float,
        flag=False,
        help="gradients are summed over the processes in buckets of this many MB, while backward runs",
    )
    zero: bool = setting(False, flag=False, help="ZeRO-1: each process keeps the AdamW state of 1/world of the weights")
    log: str = setting(
        "csv,jsonl",
        help="logs to write, a comma list of csv, jsonl (events.jsonl), tensorboard "
        "(needs `pip install tensorboard`); training_log.csv is always written",
    )

    @property
    def world(self) -> int:
        return self.nproc * self.nnodes

    def validate(self) -> None:
        """Each field in its range (the metadata's), then the checks across fields. A ConfigError
        names the fields."""
        for name, value in field_values(TrainConfig).items():
            problem = value.problem(getattr(self, name))
            if problem is not None:
                raise ConfigError(f"{name} {problem}", (name,))
        target = self.target_batch or self.batch_size * self.world
        if target % (self.batch_size * self.world):
            per_step = (
                f"batch_size {self.batch_size}"
                + (f" x nproc {self.nproc}" if self.nproc > 1 else "")
                + (f" x nnodes {self.nnodes}" if self.nnodes > 1 else "")
            )
            raise ConfigError(
                f"target_batch {target} is not a multiple of {per_step}",
                ("target_batch", "batch_size", "nproc", "nnodes"),
            )
        if "tensorboard" in parse_log_kinds(self.log):
            check_tensorboard()  # before anything is trained or written


# the keys of a settings file besides the fields: the preset the model fields override
FILE_KEYS = ("preset",)
# TrainConfig fields a settings file may not set: the launch's own
NOT_IN_FILES = ("nnodes",)
MAX_SETTINGS_BYTES = 1 << 20


def read_settings_file(path: str) -> tuple[dict, dict]:
    """(model values, train values) from a TOML or JSON settings file (see the module's docstring),
    every key checked: an unknown key, a wrong type or an out-of-range value is one UserError
    naming the file and the key. The model values may include `preset`."""
    from gradcraft.models.config import ModelConfig

    model_fields = {**field_values(ModelConfig), "preset": Value(str)}
    train_fields = {k: v for k, v in field_values(TrainConfig).items() if k not in NOT_IN_FILES}
    doc = _parse_settings(path)
    tables = {"model": model_fields, "train": train_fields}
    hint = "see `gradcraft train --help` and docs/training.md for the settings"
    if not isinstance(doc, dict):
        check_fields(doc, path, {}, hint=hint)  # the one-line "must hold an object"
    model, train = {}, {}
    flat = {}
    for key, value in doc.items():
        if key in tables and isinstance(value, dict):
            check_fields(value, f"{path} [{key}]", tables[key], allow_unknown=False, hint=hint)
            (model if key == "model" else train).update(value)
        else:
            flat[key] = value
    check_fields(flat, path, {**model_fields, **train_fields}, allow_unknown=False, hint=hint)
    for key, value in flat.items():
        (model if key in model_fields else train)[key] = value
    return model, train


def _parse_settings(path: str):
    """The parsed file: TOML (.toml, with Python's tomllib) or JSON (anything else), size bounded."""
    raw = read_bytes(path, MAX_SETTINGS_BYTES, "settings file ", hint="give a .toml or .json file of settings")
    if os.path.splitext(path)[1].lower() != ".toml":
        return parse_json(raw, path, hint="a settings file is TOML (.toml) or JSON")
    import tomllib

    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{path} is not valid TOML ({e})") from None


def field_help(cls) -> dict:
    """name -> the field's help text with its default (for the flags and the docs)."""
    result = {}
    for f in dataclasses.fields(cls):
        text = f.metadata.get("help", "")
        if "default" not in text and f.default is not dataclasses.MISSING:
            default = str(f.default).lower() if isinstance(f.default, bool) else f.default
            text += f" (default: {default})"
        result[f.name] = text
    return result
