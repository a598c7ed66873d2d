"""Which files a `--model_dir` stands for, for generate, serve and export.

A finished run folder has its final weights; an interrupted one (Ctrl-C, SIGTERM, a kill) has only
checkpoints, which hold the weights too: the newest intact one is used, and one line says so. A
checkpoint folder (`runs/x/checkpoints/step_00000200`) may be given as `--model_dir` itself, and
`--checkpoint STEP` picks one of a run folder's. A folder that holds no run is refused with a line
that says what a run folder holds and which command makes one.
"""

import os
import sys
from dataclasses import dataclass

from gradcraft.errors import UserError
from gradcraft.inference.text import CONFIG_NAMES, paths_from_model_dir
from gradcraft.training import checkpoint as ckpt


@dataclass
class ModelFiles:
    run_dir: str  # the run folder (the parent of a checkpoint's checkpoints/ folder)
    vocab: str
    config: str
    weights: str
    step: int | None = None  # the checkpoint's step, when the weights are a checkpoint's


def not_a_run(folder: str) -> UserError:
    return UserError(
        f"{folder} is not a run folder: a run folder holds gradcraft_config.json (or config.json), weights "
        "(model.safetensors, or checkpoints/step_*) and a tokenizer; `gradcraft train --model_dir DIR` "
        "makes one (`gradcraft import` from another trainer's files)"
    )


def _is_checkpoint(folder: str) -> bool:
    name = os.path.basename(os.path.normpath(folder))
    return (
        name.startswith("step_")
        and name[5:].isdigit()
        and all(os.path.exists(os.path.join(folder, f)) for f in ("model.safetensors", "state.json"))
    )


def find_model(model_dir: str, checkpoint: int | None = None, log=None) -> ModelFiles:
    """The tokenizer, config and weights `--model_dir` (and `--checkpoint`) stand for; see the module."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    if not os.path.exists(model_dir):
        raise UserError(f"model directory {model_dir} does not exist")
    if not os.path.isdir(model_dir):
        raise UserError(f"--model_dir {model_dir} is a file; give a run folder")
    if _is_checkpoint(model_dir):
        if checkpoint is not None:
            raise UserError(f"--model_dir {model_dir} is a checkpoint already; drop --checkpoint")
        run_dir = os.path.dirname(os.path.dirname(os.path.abspath(model_dir)))
        return _from_checkpoint(run_dir, os.path.normpath(model_dir))
    vocab, config, weights = paths_from_model_dir(model_dir)
    found = ckpt.list_checkpoints(os.path.join(model_dir, "checkpoints"))
    if not os.path.exists(config):
        raise not_a_run(model_dir)
    if checkpoint is not None:
        path = os.path.join(model_dir, "checkpoints", f"step_{checkpoint:08d}")
        if path not in found:
            have = ", ".join(os.path.basename(p)[5:].lstrip("0") or "0" for p in found) or "none"
            raise UserError(f"--checkpoint {checkpoint}: {model_dir} has no such checkpoint (it has: {have})")
        problem = ckpt.verify(path)
        if problem is not None:
            raise UserError(f"--checkpoint {checkpoint}: {path} is unusable ({problem})")
        log(f"note: using checkpoint step {checkpoint} ({path})")
        return _from_checkpoint(model_dir, path)
    if os.path.exists(weights):
        return ModelFiles(model_dir, vocab, config, weights)
    if not found:
        raise UserError(
            f"{model_dir} holds a run's settings but no weights: it stopped before its first checkpoint; "
            f"train it with `gradcraft train --model_dir {model_dir} --resume`"
        )
    path = ckpt.latest_checkpoint(model_dir, log)
    if path is None:
        raise UserError(f"{model_dir} has no final weights and no intact checkpoint")
    files = _from_checkpoint(model_dir, path)
    log(
        f"note: {model_dir} has no final weights (the run was interrupted): using its newest checkpoint, "
        f"step {files.step} ({path})"
    )
    return files


def _from_checkpoint(run_dir: str, path: str) -> ModelFiles:
    vocab, config, _ = paths_from_model_dir(run_dir)
    if not os.path.exists(config):
        raise UserError(
            f"the checkpoint {path} is not inside a run folder (no {' or '.join(CONFIG_NAMES)} in {run_dir}); "
            "give the run folder that holds it"
        )
    return ModelFiles(run_dir, vocab, config, os.path.join(path, "model.safetensors"), int(os.path.basename(path)[5:]))
