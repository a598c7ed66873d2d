"""`gradcraft export`: a trained run as a folder for other tools.

    gradcraft export --model_dir runs/x --format hf --out hf/x           # opens in HF transformers as-is
    gradcraft export --model_dir runs/x --format safetensors --out w/x   # gradcraft's own layout

--format hf writes `config.json` + `model.safetensors` in the Hugging Face layout (GPT-2 and LLaMA
families, and Mistral/Ministral/Mixtral: gradcraft/models/hf.py) and, when HF can express the
tokenizer, `tokenizer.json` + `tokenizer_config.json` for `AutoTokenizer`. An architecture that HF has
no class for is refused rather than written as a config HF would misread.
--format safetensors writes gradcraft's `config.json`, `model.safetensors` (our parameter names, the
tokenizer fingerprint in the metadata) and `gradcraft_tokenizer.json`: a folder `generate --model_dir`
reads. Both formats keep float32 weights and the true vocabulary size.
--format gguf writes `model.gguf` for llama.cpp (LLaMA- and GPT-2-style models, with the tokenizer;
--outtype f16 or f32: gradcraft/models/gguf_export.py; needs the `gguf` extra).
--format k2 writes K2's `latest.ckpt` (TFCKPT1) and, for K2's tokenizer, `tokenizer.bbpe` + `vocab.json`
+ `merges.txt` (gradcraft/models/k2.py, docs/k2.md).
"""

import os
import shutil

from gradcraft.atomic import write_failure
from gradcraft.cli.common import add_checkpoint_argument
from gradcraft.errors import UserError
from gradcraft.training.runlock import lock_directory

FORMATS = ("hf", "safetensors", "k2", "gguf")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "export",
        help="write a trained model as a Hugging Face, safetensors, GGUF or K2 folder",
        description="Export a run folder's final weights, config and tokenizer.",
    )
    p.add_argument(
        "--model_dir", required=True, help="a training run (or any folder `generate` reads); required, no default"
    )
    p.add_argument(
        "--format",
        required=True,
        help="hf (transformers' layout), safetensors (gradcraft's), gguf (llama.cpp's) or k2 (K2's latest.ckpt); "
        "required, no default",
    )
    p.add_argument(
        "--outtype",
        choices=["f16", "f32"],
        default="f16",
        help="--format gguf: the weight matrices' type (norms and biases stay f32) (default: f16)",
    )
    p.add_argument("--out", required=True, help="a new or empty folder to write; required, no default")
    add_checkpoint_argument(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from gradcraft.inference.run_paths import find_model
    from gradcraft.inference.text import check_tokenizer, load_model
    from gradcraft.tokenizer import Tokenizer

    if args.format not in FORMATS:
        raise UserError(f"--format must be one of {', '.join(FORMATS)}, got {args.format!r}")
    out = args.out
    if os.path.exists(out) and not os.path.isdir(out):
        raise UserError(f"--out {out} is a file; give a new or empty folder")
    if os.path.isdir(out) and os.listdir(out):
        raise UserError(f"--out {out} is not empty; give a new or empty folder")
    found = find_model(args.model_dir, args.checkpoint)
    vocab, config, weights = found.vocab, found.config, found.weights
    model, metadata = load_model(config, weights)
    tokenizer = None
    if os.path.exists(vocab):
        tokenizer = Tokenizer.load(vocab)
        check_tokenizer(tokenizer, model.config, metadata, vocab)
    created = not os.path.exists(out)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise write_failure(out, e) from None
    with lock_directory(out, "export"):  # two exports into one folder would mix their files
        if os.listdir(out):
            raise UserError(f"--out {out} is not empty; give a new or empty folder")
        try:
            if args.format == "hf":
                written = _export_hf(model, tokenizer, metadata, out)
            elif args.format == "gguf":
                from gradcraft.models.gguf_export import export_gguf

                name = os.path.basename(os.path.normpath(found.run_dir))
                export_gguf(model, tokenizer, os.path.join(out, "model.gguf"), args.outtype, name)
                written = ["model.gguf"]
            elif args.format == "k2":
                from gradcraft.models.k2 import export_k2
                from gradcraft.training.checkpoint import run_step

                step = found.step if found.step is not None else run_step(found.run_dir, model.config)
                written = export_k2(model, tokenizer, step, out)
            else:
                written = _export_safetensors(model, tokenizer, metadata, out)
        except BaseException:  # a full disk, Ctrl-C: no half export left (the folder was empty)
            _empty(out, remove=created)
            raise
    print(f"wrote {', '.join(written)} to {out}")
    if tokenizer is None:
        print(f"note: no tokenizer found for {args.model_dir}; the export holds the model only")
    return 0


def _empty(folder: str, remove: bool) -> None:
    """Delete what an export wrote into `folder` (empty before it), and the folder if it made it."""
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.unlink(path)
    if remove:
        os.rmdir(folder)


def _export_hf(model, tokenizer, metadata, out) -> list:
    from gradcraft.models.hf import export_hf, family_of, write_hf_tokenizer

    cfg = model.config
    family_of(cfg)  # refuse an architecture HF has no class for, before creating anything
    if "M" in cfg.ffn_pattern and cfg.capacity_factor:
        raise UserError(
            f"this model's experts have a capacity limit (capacity_factor {cfg.capacity_factor}) that "
            "HF's Mixtral lacks, so transformers would compute other outputs; export --format safetensors"
        )
    fingerprint = metadata.get("tokenizer_fingerprint", "")
    eot = tokenizer.eot_id if tokenizer is not None else None
    export_hf(model, out, metadata={"tokenizer_fingerprint": fingerprint} if fingerprint else None, eot_id=eot)
    written = ["config.json", "generation_config.json", "model.safetensors"]
    if tokenizer is not None:
        if write_hf_tokenizer(tokenizer, out, model.config.seq_len):
            written += ["tokenizer.json", "tokenizer_config.json"]
        else:
            print("note: HF would encode with this tokenizer differently; no tokenizer.json written")
    return written


def _export_safetensors(model, tokenizer, metadata, out) -> list:
    from gradcraft.atomic import write_json
    from gradcraft.training.checkpoint import RUN_TOKENIZER
    from gradcraft.training.trainer import save_weights

    os.makedirs(out, exist_ok=True)
    write_json(os.path.join(out, "config.json"), model.config.to_dict())
    fingerprint = metadata.get("tokenizer_fingerprint") or (tokenizer.fingerprint if tokenizer else "")
    save_weights(model, os.path.join(out, "model.safetensors"), fingerprint)
    written = ["config.json", "model.safetensors"]
    if tokenizer is not None:
        tokenizer.save(os.path.join(out, RUN_TOKENIZER))
        written.append(RUN_TOKENIZER)
    return written
