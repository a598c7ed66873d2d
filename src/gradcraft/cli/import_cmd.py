"""`gradcraft import`: another trainer's model as a gradcraft run folder (docs/k2.md, docs/training.md).

    gradcraft import --format k2 --checkpoint latest.ckpt --tokenizer tokenizer.bbpe --model_dir runs/k2
    gradcraft import --format hf path/to/gpt2 --model_dir runs/gpt2

--format hf reads a local Hugging Face checkpoint folder (GPT-2, LLaMA, Mistral families: config.json,
model.safetensors or its shards or pytorch_model.bin, and a byte-level BPE tokenizer.json;
gradcraft/models/hf_files.py) and writes the same kind of run folder at step 0, with a fine-tuning
recipe (HF_RECIPE), so that `train --resume` fine-tunes it on a corpus tokenized with its tokenizer.

--format k2 reads K2's TFCKPT1 checkpoint (every header field, parameter name and size checked) and
its tokenizer (tokenizer.bbpe, or merges.txt with vocab.json beside it), and writes a run folder:
gradcraft_config.json, gradcraft_model.safetensors (the tokenizer's fingerprint in its metadata),
gradcraft_tokenizer.json, and a checkpoint at K2's step with K2's recipe in train_config.json, so that
`generate`/`serve --model_dir` run it and `train --resume` goes on from that step on a new corpus.
"""

import os
from dataclasses import asdict

from gradcraft.errors import UserError

FORMATS = ("k2", "hf")

# K2's recipe for going on (docs/k2.md): what train_config.json starts with; `train --resume` flags override
K2_RECIPE = dict(
    label_smoothing=0.05,
    sampling="random",
    max_lr=3e-4,
    min_lr=3e-5,
    warmup_steps=100,
    grad_clip=1.0,
    weight_decay=0.1,
    batch_size=8,
)
# Fine-tuning a pretrained model (nanoGPT's finetune_shakespeare: a small constant learning rate)
HF_RECIPE = dict(
    sampling="random", max_lr=3e-5, min_lr=3e-5, warmup_steps=0, grad_clip=1.0, weight_decay=0.1, batch_size=8
)
MORE_STEPS = 1000  # the steps a `train --resume` without --steps trains past the imported step
K2_DROPOUT = 0.1


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "import",
        help="turn another trainer's checkpoint and tokenizer into a run folder",
        description="Import a model trained elsewhere (K2's TFCKPT1 + BPE tokenizer, or a local Hugging Face "
        "checkpoint folder of the GPT-2, LLaMA or Mistral families) as a gradcraft run folder that generates, "
        "serves, exports and trains on (`train --resume` fine-tunes it).",
    )
    p.add_argument(
        "--format", required=True, help="k2 (K2's latest.ckpt) or hf (an HF checkpoint folder); required, no default"
    )
    p.add_argument("source", nargs="?", default=None, help="--format hf: the HF checkpoint folder (default: none)")
    p.add_argument("--checkpoint", help="--format k2: the checkpoint file, e.g. latest.ckpt (default: none)")
    p.add_argument(
        "--tokenizer", help="--format k2: K2's tokenizer.bbpe, or its merges.txt (vocab.json beside it) (default: none)"
    )
    p.add_argument("--model_dir", required=True, help="the run folder to create; required, no default")
    p.add_argument("--overwrite", action="store_true", help="replace a run already in --model_dir (default: refuse)")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.format not in FORMATS:
        raise UserError(f"--format must be one of {', '.join(FORMATS)}, got {args.format!r}")
    if args.format == "hf":
        return run_hf(args)
    missing = [flag for flag in ("checkpoint", "tokenizer") if getattr(args, flag) is None]
    if missing or args.source is not None:
        raise UserError(
            "--format k2 takes --checkpoint FILE and --tokenizer FILE (no folder argument)"
            + (f"; --{missing[0]} is missing" if missing else "")
        )
    from gradcraft.models import Transformer, describe
    from gradcraft.models.k2 import config_from_header, read_tfckpt, state_from_k2
    from gradcraft.tokenizer.k2 import load_k2_tokenizer
    from gradcraft.training.trainer import check_model_dir, clear_run

    check_model_dir(args.model_dir, resume=False, overwrite=args.overwrite)
    header, params = read_tfckpt(args.checkpoint)
    tokenizer = load_k2_tokenizer(args.tokenizer)
    if tokenizer.vocab_size != header["vocab_size"]:
        raise UserError(
            f"the tokenizer {args.tokenizer} has {tokenizer.vocab_size} ids but {args.checkpoint} was "
            f"trained with a vocabulary of {header['vocab_size']}: not the tokenizer of these weights; "
            "give the tokenizer.bbpe that came with the checkpoint"
        )
    config = config_from_header(header, dropout=K2_DROPOUT)
    config.extra = dict(config.extra, imported_from="k2", k2_step=header["step"])
    model = Transformer(config)
    model.load_state_dict(state_from_k2(header, params))
    if args.overwrite:
        clear_run(args.model_dir, print)
    write_run_folder(args.model_dir, model, tokenizer, header["step"])
    print(f"imported K2 step {header['step']}: {describe(model)}")
    print(f"tokenizer: {tokenizer.vocab_size} ids, fingerprint {tokenizer.fingerprint}")
    print(
        f"wrote {args.model_dir}; generate with `gradcraft generate --model_dir {args.model_dir}`, go on training "
        f"with `gradcraft train --dataset <tokens.bin> --model_dir {args.model_dir} --resume`"
    )
    return 0


def run_hf(args) -> int:
    from gradcraft.models import Transformer, describe
    from gradcraft.models.hf_files import read_hf_config, read_hf_tensors, read_hf_tokenizer, our_state
    from gradcraft.training.trainer import check_model_dir, clear_run

    if args.source is None or args.checkpoint is not None or args.tokenizer is not None:
        raise UserError(
            "--format hf takes the HF checkpoint folder as its argument: gradcraft import --format hf "
            "FOLDER --model_dir RUN"
        )
    if not os.path.isdir(args.source):
        raise UserError(f"{args.source} is not a folder; give a Hugging Face checkpoint folder")
    check_model_dir(args.model_dir, resume=False, overwrite=args.overwrite)
    config = read_hf_config(args.source)
    tokenizer = read_hf_tokenizer(args.source)
    if tokenizer.vocab_size != config.vocab_size:
        raise UserError(
            f"the tokenizer in {args.source} has {tokenizer.vocab_size} ids but config.json says vocab_size "
            f"{config.vocab_size}; gradcraft needs the two equal"
        )
    model = Transformer(config)
    try:
        model.load_state_dict(our_state(config, read_hf_tensors(args.source)))
    except ValueError as e:
        raise UserError(f"the weights in {args.source} do not fit its config.json ({e})") from None
    if args.overwrite:
        clear_run(args.model_dir, print)
    write_run_folder(args.model_dir, model, tokenizer, 0, HF_RECIPE)
    print(f"imported {args.source} ({config.extra['hf_model_type']}): {describe(model)}")
    print(f"tokenizer: {tokenizer.vocab_size} ids, fingerprint {tokenizer.fingerprint}")
    print(
        f"wrote {args.model_dir}; tokenize a corpus with its tokenizer (`gradcraft tokenize --vocab_path "
        f"{os.path.join(args.model_dir, 'gradcraft_tokenizer.json')} ...`), then fine-tune with "
        f"`gradcraft train --dataset <tokens.bin> --model_dir {args.model_dir} --resume --steps N`"
    )
    return 0


def write_run_folder(model_dir: str, model, tokenizer, step: int, recipe_values: dict = K2_RECIPE) -> None:
    """A run folder holding `model` at `step`: config, weights, tokenizer, and a checkpoint with fresh
    AdamW moments and a warmup + cosine schedule that starts at `step` (K2 trained with plain SGD, and
    an HF folder holds no optimizer state: there are no moments to bring)."""
    import numpy as np

    import gradcraft as gc
    from gradcraft.atomic import write_json
    from gradcraft.optim import AdamW, CosineWithWarmup
    from gradcraft.optim.lr_schedule import Shifted
    from gradcraft.tokenizer import save_tokenizer
    from gradcraft.training import checkpoint as ckpt
    from gradcraft.optim.weight_decay import weight_decay_groups
    from gradcraft.training.trainer import TrainConfig, save_run_weights

    os.makedirs(model_dir, exist_ok=True)
    recipe = TrainConfig(dataset="", model_dir=model_dir, steps=step + MORE_STEPS, **recipe_values)
    cfg = model.config
    save_tokenizer(tokenizer, os.path.join(model_dir, ckpt.RUN_TOKENIZER))
    write_json(os.path.join(model_dir, "gradcraft_config.json"), cfg.to_dict())
    write_json(os.path.join(model_dir, "train_config.json"), asdict(recipe))
    gc.manual_seed(recipe.seed)
    optimizer = AdamW(
        weight_decay_groups(model, recipe.weight_decay, recipe.decay_embeddings),
        lr=recipe.max_lr,
        betas=(recipe.beta1, recipe.beta2),
        weight_decay=recipe.weight_decay,
    )
    schedule = Shifted(
        CosineWithWarmup(recipe.max_lr, recipe.min_lr, recipe.warmup_steps, MORE_STEPS).state_dict(), step
    )
    sampler = {"kind": "random", "rng": np.random.default_rng(recipe.seed).bit_generator.state}
    ckpt.save_checkpoint(
        model_dir,
        step,
        model,
        optimizer,
        keep=recipe.keep_checkpoints,
        state={
            "sampler": sampler,
            "rng": gc.get_rng_state(),
            "schedule": schedule.state_dict(),
            "tokenizer_fingerprint": tokenizer.fingerprint,
            "vocab_size": cfg.vocab_size,
        },
    )
    save_run_weights(model, model_dir, tokenizer.fingerprint)  # last: final weights say the folder is complete
