"""`gradcraft train`: train a decoder on a token file; checkpoints, exact resume, CSV log, loss plot."""

import dataclasses
import os
import sys

from gradcraft.cli.common import fraction, non_negative_float, non_negative_int, positive_float, positive_int, seed
from gradcraft.errors import UserError
from gradcraft.validation import Value

# --flag -> help, for the training flags (their defaults are TrainConfig's, shown by `training_help`)
TRAIN_HELP = {
    "steps": "optimizer steps in the whole run; the schedule ends at this step",
    "batch_size": "sequences per micro-batch",
    "target_batch": "sequences per optimizer step, all processes (a multiple of --batch_size x --nproc)",
    "max_lr": "peak learning rate, reached after warmup",
    "min_lr": "learning rate at the end of the cosine decay",
    "warmup_steps": "steps of linear warmup",
    "beta1": "AdamW beta1",
    "beta2": "AdamW beta2",
    "weight_decay": "AdamW weight decay, on every weight of 2+ dimensions (none on norms, biases, vectors)",
    "decay_embeddings": "true: the embeddings (and a tied output layer) are decayed too, as in nanoGPT; "
                        "false: not",
    "grad_clip": "clip the global gradient norm to this (0: no clipping)",
    "label_smoothing": "label smoothing of the cross-entropy",
    "print_every": "print a line every N steps (without a progress bar)",
    "checkpoint_every": "write a checkpoint every N steps (and at the end)",
    "keep_checkpoints": "checkpoints kept (the newest)",
    "eval_every": "evaluate on the validation split every N steps (0: at the end only)",
    "eval_batches": "batches per evaluation",
    "seed": "random seed (weights, batches, dropout)",
    "max_bad_steps": "stop after this many non-finite steps in a row",
    "stop_after": "end this session at step N while the schedule still spans --steps (then --resume)",
    "sampling": "random: windows anywhere; sequential: each window once per epoch, shuffled",
    "device": "cpu, cuda or cuda:N",
    "dtype": "bfloat16 = mixed precision (fp32 master weights)",
    "cuda_graph": "record the step as a CUDA graph and replay it (auto: on for cuda)",
    "nproc": "data-parallel processes on this machine: one per GPU from --device on (NCCL), or CPU processes",
    "log": "logs to write, a comma list of csv, jsonl (events.jsonl), tensorboard (needs `pip install "
           "tensorboard`); training_log.csv is always written",
}

# the numeric training flags -> their range-checked types (cli/common.py)
TRAINING_FLAGS = {
    "steps": positive_int, "batch_size": positive_int, "target_batch": positive_int, "max_lr": positive_float,
    "min_lr": non_negative_float, "warmup_steps": non_negative_int, "beta1": fraction, "beta2": fraction,
    "weight_decay": non_negative_float, "grad_clip": non_negative_float, "label_smoothing": fraction,
    "print_every": positive_int, "checkpoint_every": positive_int, "keep_checkpoints": positive_int,
    "eval_every": non_negative_int, "eval_batches": positive_int, "seed": seed, "max_bad_steps": positive_int,
    "stop_after": positive_int,
}

# flag -> ModelConfig field (the architecture; saved in model_dir/gradcraft_config.json)
ARCH_FLAGS = {"vocab_size": "vocab_size", "seq_len": "seq_len", "embed_dim": "dim", "num_heads": "n_heads",
              "num_layers": "n_layers", "num_kv_heads": "n_kv_heads", "ffn_dim": "ffn_dim", "dropout": "dropout",
              "attn_dropout": "attn_dropout", "resid_dropout": "resid_dropout", "embd_dropout": "embd_dropout"}


def add_parser(subparsers) -> None:
    from gradcraft.models.config import ModelConfig
    from gradcraft.training.trainer import TrainConfig

    p = subparsers.add_parser("train", help="train a model on a token file",
                              description="Train a decoder-only transformer. Flags override the preset; with "
                                          "--resume, unset flags keep the values of the interrupted run.")
    p.add_argument("--dataset", default="data/tokens.bin", help="token file from `gradcraft tokenize` (default: %(default)s)")
    p.add_argument("--model_dir", default="runs/demo", help="where checkpoints, logs and weights go; a folder holding "
                   "another run is refused without --resume or --overwrite (default: %(default)s)")
    p.add_argument("--preset", default=None, help="named architecture (default: demo); see docs/training.md")
    p.add_argument("--resume", action="store_true", help="continue from the newest intact checkpoint in --model_dir")
    p.add_argument("--overwrite", action="store_true",
                   help="delete the run already in --model_dir (its checkpoints, logs, weights) and start a new one")
    arch = p.add_argument_group("architecture (override the preset; default: the preset's value)")
    arch.add_argument("--vocab_size", type=positive_int, help="must equal the dataset's vocabulary (default: taken from it)")
    defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
    for flag, kind, what in (("seq_len", positive_int, "context length in tokens"),
                             ("embed_dim", positive_int, "model width"),
                             ("num_heads", positive_int, "attention heads"),
                             ("num_layers", positive_int, "transformer blocks"),
                             ("num_kv_heads", positive_int, "key/value heads (grouped-query attention)"),
                             ("ffn_dim", positive_int, "MLP hidden width"), ("dropout", fraction, "dropout probability")):
        arch.add_argument(f"--{flag}", type=kind, help=f"{what} (default: the preset's)")
    for flag, where in (("attn_dropout", "on the attention weights"),
                        ("resid_dropout", "on the residual branch after each attention/MLP projection"),
                        ("embd_dropout", "after the embeddings")):
        arch.add_argument(f"--{flag}", type=fraction, help=f"dropout probability {where} (default: --dropout)")
    moe = p.add_argument_group("mixture of experts (loss coefficients; may change on --resume)")
    moe.add_argument("--moe_balance", type=non_negative_float,
                     help=f"load-balancing loss coefficient (default: {defaults['moe_balance']})")
    moe.add_argument("--moe_zloss", type=non_negative_float, help=f"router z-loss coefficient (default: {defaults['moe_zloss']})")
    run = p.add_argument_group("training (default: TrainConfig's value; with --resume: the run's)")
    train_defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    for name, kind in TRAINING_FLAGS.items():
        run.add_argument(f"--{name}", type=kind, help=training_help(name, train_defaults))
    run.add_argument("--decay_embeddings", choices=["true", "false"],
                     help=training_help("decay_embeddings", train_defaults))
    run.add_argument("--sampling", choices=["random", "sequential"], help=training_help("sampling", train_defaults))
    run.add_argument("--device", help=training_help("device", train_defaults))
    run.add_argument("--dtype", choices=["float32", "bfloat16"], help=training_help("dtype", train_defaults))
    run.add_argument("--cuda_graph", choices=["auto", "on", "off"], help=training_help("cuda_graph", train_defaults))
    run.add_argument("--nproc", type=positive_int, help=training_help("nproc", train_defaults))
    run.add_argument("--log", help=training_help("log", train_defaults))
    run.add_argument("--no_progress", action="store_true", help="print lines instead of a progress bar")
    from gradcraft.cli.launch_flags import add_distributed_arguments
    add_distributed_arguments(p)  # --nnodes, --node_rank, --master_addr, --master_port, --zero...
    # on --resume, the saved train_config.json is checked against the flags' own ranges
    p.set_defaults(func=run_train, flag_types={a.dest: a.type for a in p._actions if isinstance(a.type, Value)})


def training_help(name: str, defaults: dict) -> str:
    """A training flag's help with its default; the flags themselves default to None so that a
    --resume can tell "not given" (keep the run's value) from "given"."""
    default = defaults[name]
    if isinstance(default, bool):
        default = str(default).lower()  # as the flag is written
    if default is None:
        default = {"target_batch": "--batch_size x --nproc", "stop_after": "none: run to --steps"}[name]
    return f"{TRAIN_HELP[name]} (default: {default})"


def build_configs(args):
    """(TrainConfig, ModelConfig) from the flags, the preset, and (with --resume) the saved run."""
    from gradcraft.data.tokenfile import read_token_header
    from gradcraft.models.config import preset
    from gradcraft.training.runfiles import read_model_config, read_train_config
    from gradcraft.training.trainer import TrainConfig, check_model_dir

    check_model_dir(args.model_dir, args.resume, args.overwrite)
    if not os.path.exists(args.dataset):
        raise UserError(f"dataset {args.dataset} does not exist; make one with `gradcraft tokenize`")
    header = read_token_header(args.dataset)
    given_arch = {field: getattr(args, flag) for flag, field in ARCH_FLAGS.items() if getattr(args, flag) is not None}

    if args.resume:
        # gradcraft's own config; older run folders kept it as config.json (now Hugging Face's)
        config_path = os.path.join(args.model_dir, "gradcraft_config.json")
        if not os.path.exists(config_path):
            config_path = os.path.join(args.model_dir, "config.json")
        if not os.path.exists(config_path):
            raise UserError(f"--resume: {config_path} does not exist; nothing to resume in {args.model_dir}")
        model_config = read_model_config(config_path)  # every field checked (training/runfiles.py)
        saved = model_config.to_dict()
        for flag, field in ARCH_FLAGS.items():
            value = getattr(args, flag)
            if value is not None and saved.get(field) != value:
                raise UserError(f"--resume: --{flag} {value} differs from {saved.get(field)} in {config_path}; "
                                "drop the flag, or train into a new --model_dir")
        train_config_path = os.path.join(args.model_dir, "train_config.json")
        train_values = read_train_config(train_config_path, args.flag_types) \
            if os.path.exists(train_config_path) else {}
    else:
        if header.vocab_size and "vocab_size" not in given_arch:
            given_arch["vocab_size"] = header.vocab_size
        model_config = preset(args.preset or "demo", **given_arch)
        train_values = {}
    for name in ("moe_balance", "moe_zloss"):
        if getattr(args, name) is not None:
            setattr(model_config, name, getattr(args, name))
    train_values.update(dataset=args.dataset, model_dir=args.model_dir)
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    for name in fields:
        value = getattr(args, name, None)
        if value is not None and name not in ("dataset", "model_dir"):
            train_values[name] = value == "true" if name == "decay_embeddings" else value
    if args.stop_after is None:
        train_values.pop("stop_after", None)  # a resumed run goes on to --steps unless told otherwise
    if args.no_progress:
        train_values["progress"] = False
    from gradcraft.device import parse_device
    # with --nproc > 1, gradcraft.distributed checks the GPUs and names all it needs
    train_values["device"] = parse_device(train_values.get("device") or "cpu",
                                          require_available=(train_values.get("nproc") or 1) == 1)
    return TrainConfig(**train_values), model_config


def run_train(args) -> int:
    from gradcraft.training import checkpoint as ckpt
    from gradcraft.training.runlock import Terminated, lock_run_folder, release_run_folder, sigterm_as_interrupt
    from gradcraft.training.trainer import check_memory, interrupted_message, train_processes
    from gradcraft.cli.launch_flags import is_writer, topology_from_args

    train_config, lock, locked, created = None, None, False, False
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
            train_config, model_config = build_configs(args)
            if not locked and writer:
                train_config.validate()  # the checks train_processes makes first, before the folder exists
                check_memory(train_config, model_config)
                created = not os.path.exists(train_config.model_dir)
                lock, locked = lock_run_folder(train_config.model_dir), True
            summary = train_processes(train_config, model_config, resume=args.resume, overwrite=args.overwrite,
                                      topology=topology)
        except (UserError, OSError):  # a full disk, a damaged file...: one line (cli/main.py), no temporaries
            if locked:
                ckpt.remove_temporaries(args.model_dir)  # ours: we hold the folder's lock
            raise
        except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (Terminated): the same clear stop
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
        print(f"nothing to do: the run in {train_config.model_dir} is at step {summary['step']} and --steps is "
              f"{summary['steps']}" + (f" (--stop_after {train_config.stop_after})" if train_config.stop_after else "")
              + "; pass a larger --steps to train it further")
        return 0
    where = f"weights in {_final_weights(train_config.model_dir)}" if summary.get("writer", True) else \
        "rank 0 on node 0 wrote the run"
    print(f"trained {summary['step']} steps; final loss {summary['loss']:.4f}; "
          f"peak memory {summary['peak_bytes'] / 2**20:,.0f} MiB; "
          f"{summary['tokens_per_s']:,.0f} tokens/s; {where}")
    if summary.get("hard_exit"):  # a torchrun rank on a GPU: skip the teardown that can hang (launch._run_rank)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def _final_weights(model_dir: str) -> str:
    from gradcraft.inference.text import paths_from_model_dir
    return paths_from_model_dir(model_dir)[2]
