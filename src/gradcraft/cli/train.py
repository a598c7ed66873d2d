"""`gradcraft train`: train a decoder on a token file; checkpoints, exact resume, CSV log, loss plot."""

import argparse
import dataclasses
import os
import sys

from gradcraft.errors import ConfigError, UserError

DEFAULT_DATASET = "data/tokens.bin"
DEFAULT_MODEL_DIR = "runs/demo"


def add_parser(subparsers) -> None:
    from gradcraft.models.config import ModelConfig
    from gradcraft.training.config import TrainConfig, field_help

    p = subparsers.add_parser(
        "train",
        help="train a model on a token file",
        description="Train a decoder-only transformer. Flags override the --config file, "
        "which overrides the preset; with --resume, unset flags keep the values "
        "of the interrupted run. The model and training flags are the fields of "
        "ModelConfig and TrainConfig (docs/training.md).",
    )
    p.add_argument(
        "--config",
        help="a TOML or JSON file of model and training settings by field name ([model] and "
        "[train] tables, or flat; a run's train_config.json is one); flags override it "
        "(default: none)",
    )
    p.add_argument("--dataset", help=f"token file from `gradcraft tokenize` (default: {DEFAULT_DATASET})")
    p.add_argument(
        "--model_dir",
        help="where checkpoints, logs and weights go; a folder holding another run is "
        f"refused without --resume or --overwrite (default: {DEFAULT_MODEL_DIR})",
    )
    from gradcraft.models.config import PRESETS

    p.add_argument(
        "--preset",
        default=None,
        metavar="NAME",
        help=f"named architecture: {', '.join(sorted(PRESETS))} (default: demo); see docs/training.md",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest intact checkpoint in --model_dir (a run stopped before its first "
        "checkpoint starts again from step 0)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="delete the run already in --model_dir (its checkpoints, logs, weights) and start a new one",
    )
    model_help = {
        f.name: f.metadata["help"] + ("" if "default" in f.metadata["help"] else " (default: the preset's)")
        for f in dataclasses.fields(ModelConfig)
    }
    add_field_flags(
        p.add_argument_group(
            "model: ModelConfig's fields (override the preset; the mixture-of-experts "
            "loss coefficients may change on --resume)"
        ),
        ModelConfig,
        model_help,
    )
    add_field_flags(
        p.add_argument_group("training: TrainConfig's fields (with --resume, default: the run's)"),
        TrainConfig,
        field_help(TrainConfig),
    )
    p.add_argument("--no_progress", action="store_true", help="print lines instead of a progress bar")
    from gradcraft.cli.distributed_flags import add_distributed_arguments

    add_distributed_arguments(p)  # --nnodes, --node_rank, --master_addr, --master_port, --bucket_mb, --zero...
    p.set_defaults(func=run_train)


def add_field_flags(group, cls, helps: dict) -> None:
    """One flag per field of the dataclass `cls` whose metadata does not say flag=False: --<field> and its
    aliases, typed by the field's range (a bool field takes true or false), help from the metadata. Every
    flag defaults to None ("not given"): the preset, the --config file or the resumed run decide then."""
    for f in dataclasses.fields(cls):
        if not f.metadata.get("flag", True):
            continue
        value, kind = f.metadata.get("value"), _field_kind(cls, f.name)
        names = [f"--{f.name}"] + [f"--{alias}" for alias in f.metadata.get("aliases", ())]
        kwargs = dict(dest=f.name, action=FieldFlag, help=helps[f.name])
        if kind is bool:
            group.add_argument(*names, choices=["true", "false"], **kwargs)
        elif value is not None and value.choices is not None:
            group.add_argument(*names, choices=list(value.choices), **kwargs)
        else:
            group.add_argument(*names, type=value if kind in (int, float) else None, **kwargs)


class FieldFlag(argparse._StoreAction):
    """Stores the value, and remembers the spelling the user wrote (--embed_dim for the field dim),
    so that an error about the field names the flag as it was given."""

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        spellings = getattr(namespace, "flag_spellings", None) or {}
        spellings[self.dest] = option_string
        namespace.flag_spellings = spellings


def spell(args, name: str) -> str:
    """How the command line set the field `name`: the flag as given, the --config file, or --name."""
    given = (getattr(args, "flag_spellings", None) or {}).get(name)
    if given:
        return given
    if name in (getattr(args, "from_file", None) or ()):
        return f"{name} (in {args.config})"
    return f"--{name}"


def _field_kind(cls, name: str):
    from gradcraft.validation import dataclass_fields

    found = dataclass_fields(cls).get(name)
    return found.kind if found is not None else None


def _as_bool(value):
    """A bool field's value from a flag ("true"/"false") or a settings file (true/false)."""
    return value == "true" if isinstance(value, str) else value


def apply_settings_file(args) -> None:
    """Fill the flags not given on the command line from the --config file (so that a flag overrides
    the file), then the defaults of --dataset and --model_dir."""
    if args.config:
        from gradcraft.training.config import read_settings_file

        model, train = read_settings_file(args.config)
        args.from_file = {**model, **train}
        for name, value in args.from_file.items():
            if name == "progress":
                args.no_progress = args.no_progress or not value
            elif getattr(args, name, None) is None:
                setattr(args, name, value)
    args.dataset_given = args.dataset is not None
    args.dataset = args.dataset or DEFAULT_DATASET
    args.model_dir = args.model_dir or DEFAULT_MODEL_DIR


def given_model_values(args) -> dict:
    """The ModelConfig fields given by a flag or the --config file."""
    from gradcraft.models.config import ModelConfig

    given = {}
    for f in dataclasses.fields(ModelConfig):
        value = getattr(args, f.name, None)
        if value is not None:
            given[f.name] = _as_bool(value) if _field_kind(ModelConfig, f.name) is bool else value
    return given


def build_configs(args):
    """(TrainConfig, ModelConfig) from the flags, the --config file, the preset, and (with --resume)
    the saved run."""
    from gradcraft.data.tokenfile import read_token_header
    from gradcraft.models.config import ModelConfig, preset
    from gradcraft.training.run_folder import not_started, saved_path
    from gradcraft.training.runfiles import read_model_config, read_train_config
    from gradcraft.training.trainer import TrainConfig, check_model_dir

    check_model_dir(args.model_dir, args.resume, args.overwrite)
    train_values = {}
    if args.resume:
        train_config_path = os.path.join(args.model_dir, "train_config.json")
        train_values = read_train_config(train_config_path) if os.path.exists(train_config_path) else {}
        saved_dataset = saved_path(train_values.get("dataset") or "", args.model_dir)
        if not args.dataset_given and saved_dataset:
            args.dataset = saved_dataset  # the run's own data, found from any folder (run_folder.saved_path)
    if not os.path.exists(args.dataset):
        raise UserError(f"dataset {args.dataset} does not exist; make one with `gradcraft tokenize`")
    header = read_token_header(args.dataset)
    given_model = given_model_values(args)
    resumable = {f.name for f in dataclasses.fields(ModelConfig) if f.metadata.get("resumable")}

    if args.resume:
        if not os.path.isdir(args.model_dir):
            raise UserError(
                f"--resume: {args.model_dir} does not exist: nothing to resume; check the path, or start "
                "without --resume"
            )
        # gradcraft's own config; older run folders kept it as config.json (now Hugging Face's)
        config_path = os.path.join(args.model_dir, "gradcraft_config.json")
        if not os.path.exists(config_path):
            config_path = os.path.join(args.model_dir, "config.json")
        if not os.path.exists(config_path):
            raise UserError(f"--resume: {config_path} does not exist; nothing to resume in {args.model_dir}")
        model_config = read_model_config(config_path)  # every field checked (training/runfiles.py)
        check_resumed_preset(args, model_config, given_model, config_path)
        saved = model_config.to_dict()
        for name, value in given_model.items():
            if name not in resumable and saved.get(name) != value:
                raise UserError(
                    f"--resume: {spell(args, name)} {value} differs from {saved.get(name)} "
                    f"in {config_path}; drop the setting, or train into a new --model_dir"
                )
        for name in resumable & set(given_model):
            setattr(model_config, name, given_model[name])
        model_config.validate()
        if not_started(args.model_dir):
            check_same_dataset(args, saved_dataset)
            print(
                f"note: --resume: {args.model_dir} holds no checkpoint yet (the run stopped before its first); "
                "starting it from step 0 with its saved settings",
                file=sys.stderr,
            )
            args.resume = False
    else:
        if header.vocab_size and "vocab_size" not in given_model:
            given_model["vocab_size"] = header.vocab_size
        model_config = preset(args.preset or "demo", **given_model)
    train_values.update(dataset=args.dataset, model_dir=args.model_dir)
    for f in dataclasses.fields(TrainConfig):
        value = getattr(args, f.name, None)
        if value is not None and f.name not in ("dataset", "model_dir"):
            train_values[f.name] = _as_bool(value) if _field_kind(TrainConfig, f.name) is bool else value
    if args.stop_after is None:
        train_values.pop("stop_after", None)  # a resumed run goes on to --steps unless told otherwise
    if args.no_progress:
        train_values["progress"] = False
    from gradcraft.device import parse_device

    # with --nproc > 1, gradcraft.distributed checks the GPUs and names all it needs
    train_values["device"] = parse_device(
        train_values.get("device") or "cpu", require_available=(train_values.get("nproc") or 1) == 1
    )
    return TrainConfig(**train_values), model_config


def check_resumed_preset(args, saved_config, given_model: dict, config_path: str) -> None:
    """Refuse `--resume --preset X` on a run of another architecture: the run's saved preset name, or
    (a run imported from elsewhere, which names none) every field preset X sets that no flag overrides."""
    from gradcraft.models.config import PRESETS

    if args.preset is None:
        return
    if args.preset not in PRESETS:
        raise UserError(f"unknown preset {args.preset!r}; choose one of {', '.join(sorted(PRESETS))}")
    saved_preset = saved_config.extra.get("preset")
    if saved_preset is not None:
        if saved_preset != args.preset:
            raise UserError(
                f"--resume: --preset {args.preset} differs from {saved_preset} in {config_path}; "
                "drop the setting, or train into a new --model_dir"
            )
        return
    saved = saved_config.to_dict()
    for name, value in PRESETS[args.preset].items():
        if name in ("vocab_size", "extra") or name in given_model or saved.get(name) == value:
            continue
        raise UserError(
            f"--resume: --preset {args.preset} differs from the run in {config_path} (its {name} is "
            f"{saved.get(name)}, the preset's {value}); drop the setting, or train into a new --model_dir"
        )


def check_same_dataset(args, saved_dataset: str) -> None:
    """A run restarted before its first checkpoint goes on with the data it started on: another
    --dataset means another run, which belongs in another folder."""
    if saved_dataset and os.path.realpath(saved_dataset) != os.path.realpath(args.dataset):
        raise UserError(
            f"--resume: --dataset {args.dataset} differs from {saved_dataset}, which the run in "
            f"{args.model_dir} started on; drop the setting, or train into a new --model_dir"
        )


def run_train(args) -> int:
    """Train; a ConfigError (a bad setting) names the flags that set it."""
    try:
        return _run_train(args)
    except ConfigError as e:
        raise UserError(e.spelled(lambda name: spell(args, name))) from None


def _run_train(args) -> int:
    from gradcraft.training import checkpoint as ckpt
    from gradcraft.training.runlock import (
        Terminated,
        interrupt_handled,
        lock_run_folder,
        release_run_folder,
        sigterm_as_interrupt,
    )
    from gradcraft.training.resources import check_memory
    from gradcraft.training.trainer import interrupted_message, train_processes
    from gradcraft.cli.distributed_flags import is_writer, topology_from_args

    train_config, lock, locked, created = None, None, False, False
    apply_settings_file(args)
    topology = topology_from_args(args)  # several machines, or torchrun's environment; None: this host
    if topology is not None:
        args.nproc, args.nnodes = topology.nproc, topology.nnodes
    writer = is_writer(topology)  # only global rank 0's command locks and writes the run folder
    with sigterm_as_interrupt():
        try:
            # The run folder's lock comes before anything is written into it: a folder that exists is
            # locked first (so a second train on a running folder is told who holds it); a new one
            # after the flags and the dataset are checked (a mistyped command creates no folder).
            if os.path.isdir(args.model_dir) and writer:
                lock, locked = lock_run_folder(args.model_dir), True
                # what a killed earlier run left (a checkpoint, a pruning, the tokenizer copy, a log
                # write cut short): no process but this one, which holds the lock, can be writing them
                swept = ckpt.remove_temporaries(args.model_dir)
                if swept:
                    print(
                        f"note: removed {len(swept)} temporary files a stopped run left in {args.model_dir}",
                        file=sys.stderr,
                    )
            train_config, model_config = build_configs(args)
            if not locked and writer:
                train_config.validate()  # the checks train_processes makes first, before the folder exists
                check_memory(train_config, model_config)
                created = not os.path.exists(train_config.model_dir)
                lock, locked = lock_run_folder(train_config.model_dir), True
            summary = train_processes(
                train_config, model_config, resume=args.resume, overwrite=args.overwrite, topology=topology
            )
        except (UserError, OSError):  # a full disk, a damaged file...: one line (cli/main.py), no temporaries
            if locked:
                ckpt.remove_temporaries(args.model_dir)  # ours: we hold the folder's lock
            raise
        except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (Terminated): the same clear stop
            interrupt_handled()
            code = 143 if isinstance(e, Terminated) else 130
            if train_config is None:
                print("\n" + ("terminated" if code == 143 else "interrupted"), file=sys.stderr)
                return code
            if locked:
                ckpt.remove_temporaries(train_config.model_dir)  # ours: we hold the folder's lock
            print(f"\n{interrupted_message(train_config)}" if writer else "\ninterrupted", file=sys.stderr)
            return code
        finally:
            # a folder this command created and left empty (a run refused before it wrote anything) goes
            release_run_folder(lock, train_config.model_dir if created else None)
    if summary.get("finished"):
        print(
            f"nothing to do: the run in {train_config.model_dir} is at step {summary['step']} and --steps is "
            f"{summary['steps']}"
            + (f" (--stop_after {train_config.stop_after})" if train_config.stop_after else "")
            + "; pass a larger --steps to train it further"
        )
        return 0
    where = (
        f"weights in {_final_weights(train_config.model_dir)}"
        if summary.get("writer", True)
        else "rank 0 on node 0 wrote the run"
    )
    print(
        f"trained {summary['step']} steps; final loss {summary['loss']:.4f}; "
        f"peak memory {summary['peak_bytes'] / 2**20:,.0f} MiB; "
        f"{summary['tokens_per_s']:,.0f} tokens/s; {where}"
    )
    if summary.get("hard_exit"):  # a torchrun rank on a GPU: skip the teardown that can hang (launch._run_rank)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def _final_weights(model_dir: str) -> str:
    from gradcraft.inference.text import paths_from_model_dir

    return paths_from_model_dir(model_dir)[2]
