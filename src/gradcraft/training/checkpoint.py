"""Checkpoints: weights, optimizer state and everything else needed to resume exactly.

Layout (one folder per checkpoint, under <model_dir>/checkpoints/):

    step_00000100/
        model.safetensors       weights
        optimizer.safetensors   AdamW moments, one tensor per parameter and moment
        state.json              step, optimizer scalars, schedule, RNG, sampler position, tokenizer fingerprint
        manifest.json           sha256 of each file above (written last)

A checkpoint is written into a hidden temporary folder, every file fsynced,
then the folder is renamed into place: a kill at any moment leaves either no
new checkpoint or a complete one. Loading verifies the manifest and falls back
to the previous checkpoint (saying so) when one is truncated or corrupted.
"""

import hashlib
import json
import os
import shutil
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

from gradcraft.atomic import fsync_dir, is_storage_error, usual_mode, write_failure
from gradcraft.errors import UserError

FILES = ("model.safetensors", "optimizer.safetensors", "state.json")


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync_file(path: str) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def weights_to_numpy(model) -> dict:
    """Our state dict as NumPy arrays (tied weights once per name; bfloat16 kept as is)."""
    return {name: np.ascontiguousarray(p.numpy()) for name, p in model.state_dict().items()}


def save_checkpoint(model_dir: str, step: int, model, optimizer, state: dict, keep: int = 3) -> str:
    """Write a checkpoint atomically (see the module's docstring); returns its folder. A failed write
    (Ctrl-C, SIGTERM, a full disk, a read-only folder) leaves no temporary folder and the previous
    checkpoints as they were; a storage error becomes one UserError line."""
    root = os.path.join(model_dir, "checkpoints")
    final = os.path.join(root, f"step_{step:08d}")
    tmp = os.path.join(root, f".tmp-step_{step:08d}-{os.getpid()}")
    replaced = os.path.join(root, f".tmp-old-step_{step:08d}-{os.getpid()}")
    try:
        os.makedirs(root, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        _write_checkpoint(tmp, model, optimizer, state, step)
        if os.path.exists(final):  # the same step again after a resume: replace it (renames are atomic)
            os.rename(final, replaced)
        os.rename(tmp, final)
        fsync_dir(root)
    except BaseException as e:  # no half-written folder left behind
        shutil.rmtree(tmp, ignore_errors=True)
        if os.path.exists(replaced) and not os.path.exists(final):
            os.rename(replaced, final)  # stopped between the two renames: the old one goes back
        if is_storage_error(e):
            raise write_failure(final, e) from None
        if type(e).__name__ == "SafetensorError":  # safetensors reports the OS error inside its own
            raise UserError(f"cannot write {final}: {e}; check the free space and the folder") from None
        raise
    shutil.rmtree(replaced, ignore_errors=True)
    _prune(root, keep)
    return final


def _write_checkpoint(tmp: str, model, optimizer, state: dict, step: int) -> None:
    save_file(weights_to_numpy(model), os.path.join(tmp, "model.safetensors"))
    usual_mode(os.path.join(tmp, "model.safetensors"))  # safetensors writes 0600; the rest of the folder is 0644
    opt_state = optimizer.state_dict()
    tensors, scalars = {}, {}
    for index, entry in opt_state["state"].items():
        for key, value in entry.items():
            if isinstance(value, np.ndarray):
                tensors[f"{index}.{key}"] = np.ascontiguousarray(value)
            else:
                scalars[f"{index}.{key}"] = value
    save_file(tensors, os.path.join(tmp, "optimizer.safetensors"))
    usual_mode(os.path.join(tmp, "optimizer.safetensors"))
    full_state = dict(state, step=step, optimizer={"scalars": scalars, "param_groups": opt_state["param_groups"]})
    with open(os.path.join(tmp, "state.json"), "w") as f:
        json.dump(full_state, f)
    manifest = {}
    for name in FILES:
        _fsync_file(os.path.join(tmp, name))
        manifest[name] = _sha256(os.path.join(tmp, name))
    with open(os.path.join(tmp, "manifest.json"), "w") as f:
        json.dump(manifest, f)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(tmp)


def _remove_checkpoint(path: str) -> None:
    """Delete a checkpoint folder so that a kill half-way never leaves a `step_*` folder with files
    missing: it is renamed to a temporary name first (atomic), then deleted (a killed deletion is a
    `.tmp-*` leftover, which the next run removes)."""
    doomed = os.path.join(os.path.dirname(path), f".tmp-old-{os.path.basename(path)}-{os.getpid()}")
    os.rename(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def _prune(root: str, keep: int) -> None:
    steps = list_checkpoints(root)
    for path in steps[:-keep] if keep > 0 else []:
        _remove_checkpoint(path)
    # leftovers of writes killed half-way (SIGKILL, power loss); never another live run's: `gradcraft train`
    # holds the run folder's lock (runlock.py) while it writes here
    for name in os.listdir(root):
        if name.startswith(".tmp-") and not name.endswith(f"-{os.getpid()}"):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def remove_temporaries(model_dir: str) -> list:
    """Remove every temporary a run leaves when it is stopped half-way through a write: the
    checkpoints' `.tmp-step_*` folders, atomic writes' `.tmp-*` files, the final weights' and the
    plot's temporaries. Only for the holder of the run folder's lock (gradcraft/training/runlock.py):
    no other process can be writing them. Returns what was removed."""
    removed = []
    for folder in (os.path.join(model_dir, "checkpoints"), model_dir):
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            if not (name.startswith(".tmp-") or name.endswith((".safetensors.tmp", ".tmp.png"))):
                continue
            path = os.path.join(folder, name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    continue
            removed.append(path)
    return removed


def list_checkpoints(root: str) -> list:
    """Complete-looking checkpoint folders, oldest first."""
    if not os.path.isdir(root):
        return []
    names = sorted(n for n in os.listdir(root) if n.startswith("step_") and n[5:].isdigit())
    return [os.path.join(root, n) for n in names]


def verify(path: str) -> str | None:
    """None when the checkpoint is intact, else why not: a manifest or state.json that is missing
    or fails its schema (training/runfiles.py), or a file that does not match its checksum."""
    from gradcraft.training.runfiles import check_manifest, check_state

    manifest_path = os.path.join(path, "manifest.json")
    if not os.path.exists(manifest_path):
        return "its manifest is missing"
    try:
        manifest = check_manifest(manifest_path, FILES)
    except UserError as e:
        return f"its manifest is unusable: {str(e).removeprefix(manifest_path + ': ')}"
    for name in FILES:
        file = os.path.join(path, name)
        if not os.path.exists(file):
            return f"{name} is missing"
        try:
            digest = _sha256(file)
        except OSError as e:
            return f"{name} is unreadable ({e.strerror})"
        if digest != manifest[name]:
            return f"{name} does not match its checksum (truncated or corrupted)"
    try:
        state = check_state(os.path.join(path, "state.json"))
    except UserError as e:
        return str(e)
    if state["step"] != int(os.path.basename(path)[5:]):
        return f"its state.json holds step {state['step']}, not the step its folder is named for"
    return None


def latest_checkpoint(model_dir: str, log=None) -> str | None:
    """The newest intact checkpoint; a damaged newer one is reported and skipped."""
    log = log or (lambda msg: print(msg, file=sys.stderr))
    for path in reversed(list_checkpoints(os.path.join(model_dir, "checkpoints"))):
        problem = verify(path)
        if problem is None:
            return path
        log(f"warning: checkpoint {os.path.basename(path)} is unusable ({problem}); falling back to the previous one")
    return None


def read_state(path: str) -> dict:
    """A checkpoint's state.json, checked (step, optimizer scalars and groups, schedule, RNG, sampler...)."""
    from gradcraft.training.runfiles import check_state

    return check_state(os.path.join(path, "state.json"))


def load_checkpoint(path: str, model, optimizer) -> dict:
    """Load weights and optimizer state in place; returns the saved state dict (step, rng, sampler...),
    checked against its schema (training/runfiles.py)."""
    from gradcraft.training.runfiles import check_state

    state = check_state(os.path.join(path, "state.json"))
    try:
        weights = load_file(os.path.join(path, "model.safetensors"))
        tensors = load_file(os.path.join(path, "optimizer.safetensors"))
    except Exception as e:  # safetensors raises its own error types for damaged files
        raise UserError(f"checkpoint {path} holds an unreadable safetensors file ({e})") from None
    from gradcraft.training.statecheck import check_optimizer_tensors, check_weight_arrays

    shapes = [tuple(p.shape) for g in optimizer.param_groups for p in g["params"]]
    try:
        check_weight_arrays(weights, os.path.join(path, "model.safetensors"))
        check_optimizer_tensors(
            tensors, state["optimizer"]["scalars"], shapes, os.path.join(path, "optimizer.safetensors")
        )
    except UserError as e:
        raise UserError(f"{e}; move {path} aside to resume from the checkpoint before it") from None
    try:
        model.load_state_dict(weights)
    except (ValueError, KeyError) as e:
        raise UserError(f"checkpoint {path} does not match the model ({e})") from None
    if len(state["optimizer"]["param_groups"]) != len(optimizer.param_groups):
        raise UserError(
            f"{os.path.join(path, 'state.json')}: field 'optimizer.param_groups' has "
            f"{len(state['optimizer']['param_groups'])} groups; the optimizer has {len(optimizer.param_groups)}"
        )
    per_param: dict = {}
    for key, value in tensors.items():
        index, name = key.split(".", 1)
        per_param.setdefault(int(index), {})[name] = value
    for key, value in state["optimizer"]["scalars"].items():
        index, name = key.split(".", 1)
        per_param.setdefault(int(index), {})[name] = value
    groups = state["optimizer"]["param_groups"]
    for g in groups:
        if "betas" in g:
            g["betas"] = tuple(g["betas"])
    try:
        optimizer.load_state_dict({"state": per_param, "param_groups": groups})
    except (IndexError, KeyError, ValueError, TypeError) as e:
        raise UserError(f"checkpoint {path} does not match the model's parameters ({e})") from None
    return state


# ------------------------------------------------------------------ the run folder's tokenizer

RUN_TOKENIZER = "gradcraft_tokenizer.json"


def dataset_tokenizer_path(dataset: str) -> str:
    """Where `gradcraft tokenize` puts the tokenizer by default: tokenizer.json next to the token file."""
    return os.path.join(os.path.dirname(os.path.abspath(dataset)), "tokenizer.json")


def copy_tokenizer(model_dir: str, dataset: str, fingerprint: str, seq_len: int | None = None, log=None) -> str | None:
    """Put the dataset's tokenizer into the run folder, so that the folder alone generates, serves and
    exports (from any directory, after the folder or the data moved). Returns the copy's path, or None.

    The copy is ours (`gradcraft_tokenizer.json`, exact, fingerprinted) plus, when HF can express it,
    `tokenizer.json` + `tokenizer_config.json` for `transformers.AutoTokenizer`. A tokenizer whose
    fingerprint differs from the token file's header did not make these tokens: it is not copied."""
    from gradcraft.models.hf import write_hf_tokenizer
    from gradcraft.tokenizer import load_tokenizer, save_tokenizer

    log = log or (lambda msg: print(msg, file=sys.stderr))
    target = os.path.join(model_dir, RUN_TOKENIZER)
    if os.path.exists(target):
        if not fingerprint or _fingerprint_of(target)[:16] == fingerprint:
            return target  # a resumed run: copied when it started
        for name in (RUN_TOKENIZER, "tokenizer.json", "tokenizer_config.json"):  # another data set's: stale
            if os.path.exists(os.path.join(model_dir, name)):
                os.remove(os.path.join(model_dir, name))
    source = dataset_tokenizer_path(dataset)
    if not os.path.exists(source):
        log(f"note: no tokenizer at {source}; the run folder will not hold one (generate with --vocab)")
        return None
    try:
        tok = load_tokenizer(source)
    except UserError as e:
        log(f"warning: the tokenizer next to the dataset is unreadable ({e}); not copied into the run folder")
        return None
    if fingerprint and tok.fingerprint != fingerprint:
        log(
            f"warning: {source} (fingerprint {tok.fingerprint}) is not the tokenizer that made {dataset} "
            f"({fingerprint}); not copied into the run folder (generate with --vocab)"
        )
        return None
    write_hf_tokenizer(tok, model_dir, seq_len)
    save_tokenizer(tok, target)  # last: its presence says the copy is complete
    return target


def _fingerprint_of(path: str) -> str:
    """The fingerprint a gradcraft tokenizer file declares ("" when unreadable), without rebuilding it."""
    from gradcraft.validation import MAX_TOKENIZER_BYTES, read_json

    try:
        doc = read_json(path, MAX_TOKENIZER_BYTES)
    except UserError:
        return ""
    return str(doc.get("fingerprint", "")) if isinstance(doc, dict) else ""


def run_step(model_dir: str, cfg) -> int:
    """The step of a run folder's weights: its newest checkpoint's, else the K2 step it was imported at."""
    found = list_checkpoints(os.path.join(model_dir, "checkpoints"))
    return int(os.path.basename(found[-1])[5:]) if found else int(cfg.extra.get("k2_step", 0))
