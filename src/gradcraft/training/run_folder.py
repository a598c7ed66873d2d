"""The run folder's files: which ones a run writes, refusing a folder that holds another run,
clearing one for --overwrite, and the final weights (Hugging Face's layout where it fits)."""

import json
import os
import shutil

from gradcraft.atomic import is_storage_error, usual_mode, write_failure
from gradcraft.errors import UserError
from gradcraft.training import checkpoint as ckpt
from safetensors.numpy import save_file

# What a run writes into its --model_dir. `--overwrite` removes exactly these (nothing else in the
# folder), so list every new file a run writes here. A folder "holds a run" when it has a checkpoint
# or final weights: a run stopped before its first checkpoint has nothing to resume, so the same
# command may start it again.
RUN_FILES = (
    "gradcraft_config.json",
    "config.json",
    "generation_config.json",
    "train_config.json",
    "checkpoints",
    "model.safetensors",
    "gradcraft_model.safetensors",
    "training_log.csv",
    "loss.png",
    "events.jsonl",
    "tensorboard",
    "gradcraft_tokenizer.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "manifest.json",
)


# The final weights: Hugging Face's model.safetensors (older run folders: gradcraft's), or
# gradcraft_model.safetensors for an architecture HF has no class for (see save_run_weights).
FINAL_WEIGHTS = ("gradcraft_model.safetensors", "model.safetensors")


def check_model_dir(model_dir: str, resume: bool, overwrite: bool) -> None:
    """Refuse a --model_dir that would mix two runs: one that is a file, one that holds another run
    (unless --resume continues it or --overwrite replaces it), or --resume where there is no run."""
    if resume and overwrite:
        raise UserError("--resume continues the run in --model_dir and --overwrite deletes it: give one of them")
    if os.path.exists(model_dir) and not os.path.isdir(model_dir):
        raise UserError(f"--model_dir {model_dir} is a file, not a folder; give a new or existing folder")
    checkpoints = ckpt.list_checkpoints(os.path.join(model_dir, "checkpoints"))
    weights = any(os.path.exists(os.path.join(model_dir, name)) for name in FINAL_WEIGHTS)
    if (checkpoints or weights) and not resume and not overwrite:
        what = f"checkpoints up to step {int(os.path.basename(checkpoints[-1])[5:])}" if checkpoints else "weights"
        raise UserError(
            f"{model_dir} already holds a run ({what}); pass --resume to continue it, "
            "--overwrite to replace it, or choose another --model_dir"
        )


def clear_run(model_dir: str, log) -> None:
    """Delete the run files of RUN_FILES from model_dir (for --overwrite); other files stay."""
    removed = []
    for name in RUN_FILES:
        path = os.path.join(model_dir, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.unlink(path)
        else:
            continue
        removed.append(name)
    if removed:
        log(f"--overwrite: removed the earlier run's {', '.join(removed)} from {model_dir}")


def save_weights(model, path: str, fingerprint: str = "") -> None:
    """The final weights, atomically, with the tokenizer fingerprint in the safetensors metadata."""
    tmp = path + ".tmp"
    try:
        save_file(
            ckpt.weights_to_numpy(model),
            tmp,
            metadata={"tokenizer_fingerprint": fingerprint or "", "config": json.dumps(model.config.to_dict())},
        )
        usual_mode(tmp)  # safetensors writes 0600; the rest of the run folder is 0644
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        manifest = os.path.join(os.path.dirname(os.path.abspath(path)), WEIGHTS_MANIFEST)
        if os.path.isfile(manifest):  # the folder's manifest follows the weights it names
            write_weights_manifest(os.path.dirname(os.path.abspath(path)), os.path.basename(path))
    except BaseException as e:  # a full disk, a read-only folder, Ctrl-C: no temp file left, the old file kept
        if os.path.exists(tmp):
            os.unlink(tmp)
        if is_storage_error(e):
            raise write_failure(path, e) from None
        if type(e).__name__ == "SafetensorError":
            raise UserError(f"cannot write {path}: {e}; check the free space and the folder") from None
        raise


def save_run_weights(model, model_dir: str, fingerprint: str = "") -> str:
    """The final weights in the run folder; returns their path. For an architecture transformers
    computes exactly, Hugging Face's config.json + model.safetensors (HF's layout, fp32, which
    gradcraft's loader converts back exactly with gradcraft_config.json), so the run folder opens in
    AutoModelForCausalLM as is; otherwise gradcraft_model.safetensors in our layout and no
    config.json, so that HF refuses the folder. The other layout's files (an older run folder's,
    resumed) are removed after the new ones are written."""
    from gradcraft.models.hf import export_hf, hf_exact_family

    metadata = {"tokenizer_fingerprint": fingerprint or "", "config": json.dumps(model.config.to_dict())}
    if hf_exact_family(model.config) is not None:
        export_hf(model, model_dir, metadata, _eot_id(model_dir))
        written, stale = "model.safetensors", ("gradcraft_model.safetensors",)
    else:
        save_weights(model, os.path.join(model_dir, "gradcraft_model.safetensors"), fingerprint)
        written, stale = "gradcraft_model.safetensors", ("model.safetensors", "config.json", "generation_config.json")
    for name in stale:
        path = os.path.join(model_dir, name)
        if os.path.exists(path):
            os.unlink(path)
    write_weights_manifest(model_dir, written)
    return os.path.join(model_dir, written)


def _eot_id(model_dir: str) -> int | None:
    """The run folder's tokenizer's end-of-text id (None: no tokenizer, or none in it)."""
    from gradcraft.tokenizer import load_tokenizer

    path = os.path.join(model_dir, ckpt.RUN_TOKENIZER)
    if not os.path.exists(path):
        return None
    try:
        return load_tokenizer(path).eot_id
    except UserError:
        return None


def not_started(model_dir: str) -> bool:
    """A run folder whose run was stopped before its first checkpoint: settings saved, no checkpoint,
    no final weights. `train --resume` starts it again from step 0 (a requeued job reruns one command)."""
    return not ckpt.list_checkpoints(os.path.join(model_dir, "checkpoints")) and not any(
        os.path.exists(os.path.join(model_dir, name)) for name in FINAL_WEIGHTS
    )


def portable_path(path: str, model_dir: str) -> str:
    """How the run folder saves a path: relative to the run folder when it lies inside it (the two move
    together), else absolute, so that a resume from any working directory finds it."""
    if not path:
        return path
    full, folder = os.path.abspath(path), os.path.abspath(model_dir)
    if os.path.commonpath([full, folder]) == folder:
        return os.path.relpath(full, folder)
    return full


def saved_path(path: str, model_dir: str) -> str:
    """A path as portable_path saved it, made usable from here (older runs saved it as typed)."""
    if not path or os.path.isabs(path):
        return path
    inside = os.path.join(model_dir, path)
    return inside if os.path.exists(inside) else path


WEIGHTS_MANIFEST = "manifest.json"


def write_weights_manifest(model_dir: str, name: str) -> None:
    """manifest.json beside the final weights: their sha256, as a checkpoint's manifest holds its
    files' (generate, serve and export verify it: runfiles.check_weights_manifest)."""
    from gradcraft.atomic import write_json

    write_json(os.path.join(model_dir, WEIGHTS_MANIFEST), {name: ckpt._sha256(os.path.join(model_dir, name))})
