"""`gradcraft import`: another trainer's model as a gradcraft run folder (docs/k2.md).

    gradcraft import --format k2 --checkpoint latest.ckpt --tokenizer tokenizer.bbpe --model_dir runs/k2

--format k2 reads K2's TFCKPT1 checkpoint (every header field, parameter name and size checked) and
its tokenizer (tokenizer.bbpe, or merges.txt with vocab.json beside it), and writes a run folder:
gradcraft_config.json, gradcraft_model.safetensors (the tokenizer's fingerprint in its metadata),
gradcraft_tokenizer.json, and a checkpoint at K2's step with K2's recipe in train_config.json, so that
`generate`/`serve --model_dir` run it and `train --resume` goes on from that step on a new corpus.
"""

import os
from dataclasses import asdict

from gradcraft.errors import UserError

FORMATS = ("k2",)

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
MORE_STEPS = 1000  # the steps a `train --resume` without --steps trains past K2's step
K2_DROPOUT = 0.1


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "import",
        help="turn another trainer's checkpoint and tokenizer into a run folder",
        description="Import a model trained elsewhere (K2's TFCKPT1 + BPE tokenizer) as a "
        "gradcraft run folder that generates, serves, exports and trains on.",
    )
    p.add_argument("--format", required=True, help="k2 (K2's latest.ckpt); required, no default")
    p.add_argument("--checkpoint", required=True, help="the checkpoint file, e.g. latest.ckpt; required, no default")
    p.add_argument(
        "--tokenizer",
        required=True,
        help="K2's tokenizer.bbpe, or its merges.txt (vocab.json beside it); required, no default",
    )
    p.add_argument("--model_dir", required=True, help="the run folder to create; required, no default")
    p.add_argument("--overwrite", action="store_true", help="replace a run already in --model_dir (default: refuse)")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.format not in FORMATS:
        raise UserError(f"--format must be one of {', '.join(FORMATS)}, got {args.format!r}")
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


def write_run_folder(model_dir: str, model, tokenizer, step: int) -> None:
    """A run folder holding `model` at `step`: config, weights, tokenizer, and a checkpoint with fresh
    AdamW moments and a warmup + cosine schedule that starts at `step` (K2 trained with plain SGD:
    there are no moments to bring)."""
    import numpy as np

    import gradcraft as gc
    from gradcraft.atomic import write_json
    from gradcraft.optim import AdamW, CosineWithWarmup
    from gradcraft.optim.schedule import Shifted
    from gradcraft.tokenizer import save_tokenizer
    from gradcraft.training import checkpoint as ckpt
    from gradcraft.optim.weight_decay import weight_decay_groups
    from gradcraft.training.trainer import TrainConfig, save_run_weights

    os.makedirs(model_dir, exist_ok=True)
    recipe = TrainConfig(dataset="", model_dir=model_dir, steps=step + MORE_STEPS, **K2_RECIPE)
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
