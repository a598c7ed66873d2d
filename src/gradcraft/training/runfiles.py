"""The schemas of the JSON files in a run folder, and their checked readers.

Every JSON file gradcraft reads back goes through gradcraft/validation.py: its size and nesting are
bounded before parsing, and its fields are checked for type and range against the schemas here,
so a damaged or hand-edited file is one `error:` line naming the file and the field (or, for a
checkpoint, a fallback to the previous one) instead of a traceback or a silently wrong run:

    gradcraft_config.json / config.json   the ModelConfig fields (unknown ones refused); HF's config.json
    train_config.json                     the TrainConfig fields
  (the ranges of both are the fields' metadata: models/config.py, training/config.py)
    checkpoints/*/state.json              STATE_FIELDS (step >= 0, sampler, rng, optimizer, ...)
    checkpoints/*/manifest.json           one sha256 per checkpoint file
"""

import os

from gradcraft.errors import UserError
from gradcraft.validation import Value, check_fields, field_values, read_json

EDITED = "the file was damaged or edited by hand"

_positive = Value(int, low=1)
_non_negative = Value(int, low=0)

STATE_FIELDS = {
    "step": Value(int, low=0, high=1 << 40),
    "sampler": Value(dict),
    "rng": Value(dict),
    "schedule": Value(dict, optional=True),
    "optimizer": Value(dict),
    "tokenizer_fingerprint": Value(str, optional=True),
    "vocab_size": _positive,
}
SAMPLER_FIELDS = {"kind": Value(str), "epoch": _non_negative, "position": _non_negative, "rng": Value(dict)}
OPTIMIZER_FIELDS = {"scalars": Value(dict), "param_groups": Value(list)}
_SHA256 = Value(str)


def model_config_fields() -> dict:
    from gradcraft.models.config import ModelConfig

    return field_values(ModelConfig)


def read_model_config(path: str):
    """The ModelConfig in `path`: gradcraft's (every field checked, unknown ones refused) or Hugging
    Face's config.json (converted, then checked the same way)."""
    from gradcraft.models.config import ModelConfig
    from gradcraft.models.hf import config_from_hf, is_hf_config

    data = read_json(path, hint=f"{EDITED}; give the config.json the model was saved with")
    hint = "give the config.json the model was saved with"
    if isinstance(data, dict) and is_hf_config(data):
        try:
            config = config_from_hf(data)
        except (ValueError, TypeError, KeyError, ArithmeticError, AttributeError) as e:
            raise UserError(f"{path} is not a Hugging Face config gradcraft reads ({type(e).__name__}: {e})") from None
        except UserError as e:  # a field out of its range (ModelConfig.validate)
            raise UserError(f"{path}: {e}; {EDITED}; {hint}") from None
        check_fields(config.to_dict(), path, model_config_fields(), hint=hint)
        return config
    check_fields(data, path, model_config_fields(), allow_unknown=False, hint=f"{EDITED}; {hint}")
    try:
        return ModelConfig.from_dict(data)  # the checks across fields (dim divisible by n_heads, ...)
    except UserError as e:
        raise UserError(f"{path}: {e}; {EDITED}; {hint}") from None


def parameter_count(config) -> int:
    """The parameters of a model with this config (the dense estimate; MoE layers count one expert)."""
    dim, ffn = config.dim, config.ffn_dim or 4 * config.dim
    count = config.vocab_size * dim * (1 if config.tie_embeddings else 2) + config.n_layers * (
        4 * dim * dim + 3 * dim * ffn
    )
    if config.positions == "learned":
        count += config.seq_len * dim
    return count


def check_model_fits(config, path: str) -> None:
    """Refuse, before allocating anything, a config whose float32 weights exceed this machine's RAM."""
    need = 4 * parameter_count(config)
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return
    if need > have:
        raise UserError(
            f"{path} describes a model of {parameter_count(config):,} parameters ({need / 2**30:,.1f} GiB "
            f"of weights), more than this machine's {have / 2**30:,.1f} GiB of RAM; {EDITED}, or the "
            "model is too large for this machine"
        )


def read_train_config(path: str) -> dict:
    """train_config.json as a dict of TrainConfig fields, each checked against its range (the field's
    metadata; the `train` flag that sets it has the same)."""
    from gradcraft.training.config import TrainConfig

    fields = field_values(TrainConfig)
    hint = f"{EDITED}; fix or delete it (the flags of the resumed command are then used)"
    return check_fields(read_json(path, hint=hint), path, fields, allow_unknown=False, hint=hint)


def check_state(path: str) -> dict:
    """A checkpoint's state.json, checked: a UserError naming the field otherwise."""
    doc = read_json(path, hint=EDITED)
    check_fields(doc, path, STATE_FIELDS, required=("step", "sampler", "rng", "optimizer"), hint=EDITED)
    check_fields(doc["sampler"], f"{path} (sampler)", SAMPLER_FIELDS, required=("kind",), hint=EDITED)
    check_fields(
        doc["optimizer"], f"{path} (optimizer)", OPTIMIZER_FIELDS, required=tuple(OPTIMIZER_FIELDS), hint=EDITED
    )
    from gradcraft.training.statecheck import check_state_fields

    check_state_fields(doc, path)  # rng, schedule, sampler, param groups, scalars
    return doc


def check_manifest(path: str, names) -> dict:
    """A checkpoint's manifest.json: an object with a sha256 (64 hex digits) for each of `names`."""
    doc = read_json(path, hint=EDITED)
    check_fields(doc, path, {name: _SHA256 for name in names}, required=tuple(names), hint=EDITED)
    for name in names:
        digest = doc[name]
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise UserError(f"{path}: field {name!r} is not a sha256 digest; {EDITED}")
    return doc


def check_weights_manifest(weights_path: str) -> None:
    """When the weights' folder has a manifest.json naming them (training writes one beside the
    final weights), their sha256 must match it: a flipped bit, zeros or a truncation in the weights
    is one UserError line instead of a model that silently generates garbage. No manifest, or one
    that does not name this file (an export, an older run folder): nothing to verify."""
    manifest_path = os.path.join(os.path.dirname(os.path.abspath(weights_path)), "manifest.json")
    name = os.path.basename(weights_path)
    if not os.path.isfile(manifest_path):
        return
    doc = read_json(manifest_path, hint=EDITED)
    if not isinstance(doc, dict) or name not in doc:
        return
    check_manifest(manifest_path, [name])
    if _sha256(weights_path) != doc[name]:  # (checkpoint.py's reader imports this module: no import back)
        raise UserError(
            f"{weights_path} does not match its sha256 in {manifest_path}: the weights are damaged "
            "(truncated, overwritten or corrupted); train again or restore them from a checkpoint"
        )


def _sha256(path: str) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
