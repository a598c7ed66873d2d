"""`gradcraft train`: train a decoder on a token file; checkpoints, exact resume, CSV log, loss plot."""

import dataclasses
import json
import os

from gradcraft.errors import UserError

# flag -> ModelConfig field (the architecture; saved in model_dir/config.json)
ARCH_FLAGS = {"vocab_size": "vocab_size", "seq_len": "seq_len", "embed_dim": "dim", "num_heads": "n_heads",
              "num_layers": "n_layers", "num_kv_heads": "n_kv_heads", "ffn_dim": "ffn_dim", "dropout": "dropout"}


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("train", help="train a model on a token file",
                              description="Train a decoder-only transformer. Flags override the preset; with "
                                          "--resume, unset flags keep the values of the interrupted run.")
    p.add_argument("--dataset", default="data/tokens.bin", help="token file from `gradcraft tokenize` (default: %(default)s)")
    p.add_argument("--model_dir", default="runs/demo", help="where checkpoints, logs and weights go (default: %(default)s)")
    p.add_argument("--preset", default=None, help="named architecture (default: demo); see docs/training.md")
    p.add_argument("--resume", action="store_true", help="continue from the newest intact checkpoint in --model_dir")
    arch = p.add_argument_group("architecture (override the preset)")
    arch.add_argument("--vocab_size", type=int, help="must equal the dataset's vocabulary (default: taken from it)")
    arch.add_argument("--seq_len", type=int)
    arch.add_argument("--embed_dim", type=int)
    arch.add_argument("--num_heads", type=int)
    arch.add_argument("--num_layers", type=int)
    arch.add_argument("--num_kv_heads", type=int)
    arch.add_argument("--ffn_dim", type=int)
    arch.add_argument("--dropout", type=float)
    moe = p.add_argument_group("mixture of experts (loss coefficients; may change on --resume)")
    moe.add_argument("--moe_balance", type=float, help="load-balancing loss coefficient (default 0.01)")
    moe.add_argument("--moe_zloss", type=float, help="router z-loss coefficient (default 0.001)")
    run = p.add_argument_group("training")
    for name, kind in (("steps", int), ("batch_size", int), ("target_batch", int), ("max_lr", float),
                       ("min_lr", float), ("warmup_steps", int), ("beta1", float), ("beta2", float),
                       ("weight_decay", float), ("grad_clip", float), ("label_smoothing", float),
                       ("print_every", int), ("checkpoint_every", int), ("keep_checkpoints", int),
                       ("eval_every", int), ("eval_batches", int), ("seed", int), ("max_bad_steps", int),
                       ("stop_after", int)):
        run.add_argument(f"--{name}", type=kind)
    run.add_argument("--sampling", choices=["random", "sequential"])
    run.add_argument("--device", help="cpu, cuda or cuda:N (default: cpu)")
    run.add_argument("--dtype", choices=["float32", "bfloat16"], help="bfloat16 = mixed precision (default: float32)")
    run.add_argument("--cuda_graph", choices=["auto", "on", "off"],
                     help="record the step as a CUDA graph and replay it (default auto: on for cuda, dropout included)")
    run.add_argument("--nproc", type=int, help="data-parallel processes: one per GPU from --device on "
                                                 "(cuda:0 .. cuda:N-1, NCCL), or CPU processes (default: 1)")
    run.add_argument("--no_progress", action="store_true", help="print lines instead of a progress bar")
    p.set_defaults(func=run_train)


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {path}: {e}") from None


def build_configs(args):
    """(TrainConfig, ModelConfig) from the flags, the preset, and (with --resume) the saved run."""
    from gradcraft.data.tokenfile import read_token_header
    from gradcraft.models.config import ModelConfig, preset
    from gradcraft.training.trainer import TrainConfig

    if not os.path.exists(args.dataset):
        raise UserError(f"dataset {args.dataset} does not exist; make one with `gradcraft tokenize`")
    header = read_token_header(args.dataset)
    given_arch = {field: getattr(args, flag) for flag, field in ARCH_FLAGS.items() if getattr(args, flag) is not None}

    if args.resume:
        config_path = os.path.join(args.model_dir, "config.json")
        if not os.path.exists(config_path):
            raise UserError(f"--resume: {config_path} does not exist; nothing to resume in {args.model_dir}")
        saved = _read_json(config_path)
        for flag, field in ARCH_FLAGS.items():
            value = getattr(args, flag)
            if value is not None and saved.get(field) != value:
                raise UserError(f"--resume: --{flag} {value} differs from {saved.get(field)} in {config_path}; "
                                "drop the flag, or train into a new --model_dir")
        model_config = ModelConfig.from_dict(saved)
        train_values = _read_json(os.path.join(args.model_dir, "train_config.json")) \
            if os.path.exists(os.path.join(args.model_dir, "train_config.json")) else {}
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
            train_values[name] = value
    if args.stop_after is None:
        train_values.pop("stop_after", None)  # a resumed run goes on to --steps unless told otherwise
    if args.no_progress:
        train_values["progress"] = False
    from gradcraft.device import canonical
    train_values["device"] = canonical(train_values.get("device") or "cpu")
    return TrainConfig(**train_values), model_config


def run_train(args) -> int:
    from gradcraft.training.trainer import train_processes

    train_config, model_config = build_configs(args)
    summary = train_processes(train_config, model_config, resume=args.resume)
    print(f"trained {summary['step']} steps; final loss {summary['loss']:.4f}; "
          f"peak memory {summary['peak_bytes'] / 2**20:,.0f} MiB; "
          f"{summary['tokens_per_s']:,.0f} tokens/s; weights in {os.path.join(train_config.model_dir, 'model.safetensors')}")
    return 0
