"""Guards of a training run against data and state that would make it silently wrong: a validation
split from another tokenizer, a sampler position from a damaged state.json, and weights that have
become NaN or infinite (a run never writes a checkpoint or its final weights with them)."""

import os

from gradcraft.data.tokenfile import val_path_for
from gradcraft.errors import UserError


def check_split(val_tokens, val_header, header, mc, dataset: str) -> None:
    """The validation split must come from the training tokenizer (else val_loss means nothing) and
    hold only ids of the model's vocabulary."""
    from gradcraft.data.tokenfile import check_token_ids

    val_path = val_path_for(dataset)
    if (val_header.fingerprint or header.fingerprint) and val_header.fingerprint != header.fingerprint:
        raise UserError(
            f"{val_path} was made with another tokenizer (fingerprint {val_header.fingerprint or 'none'}) than "
            f"{dataset} ({header.fingerprint or 'none'}): its validation loss would mean nothing; "
            "tokenize both with the same tokenizer, or remove the validation file"
        )
    if val_header.vocab_size and header.vocab_size and val_header.vocab_size != header.vocab_size:
        raise UserError(
            f"{val_path} has a vocabulary of {val_header.vocab_size}, {dataset} of {header.vocab_size}; "
            "tokenize both with the same tokenizer"
        )
    check_token_ids(val_tokens, mc.vocab_size, val_path, "the model's vocabulary")


def load_sampler(sampler, saved: dict, checkpoint: str) -> None:
    where = os.path.join(checkpoint, "state.json")
    if saved.get("kind") != sampler.kind:
        raise UserError(
            f"{where}: field 'sampler.kind' is {saved.get('kind')!r}, this run samples {sampler.kind!r} "
            "(--sampling); resume with the run's own --sampling"
        )
    try:
        sampler.load_state_dict(saved)
    except UserError as e:
        raise UserError(f"{where}: field 'sampler': {e}; the file was damaged or edited by hand") from None


def stop_if_nonfinite(model, step: int, last_good: str | None, run_log) -> None:
    """A run never ends, nor writes a checkpoint, with NaN or infinite weights: it stops with one
    line naming the last good checkpoint (kept)."""
    from gradcraft.training.statecheck import nonfinite_parameter

    name = nonfinite_parameter(model)
    if name is None:
        return
    if run_log:
        run_log.end(step, "stopped: the weights are not finite")
        run_log.close()
    where = f"the last good checkpoint is {last_good}" if last_good else "no checkpoint of this session was written"
    raise UserError(
        f"the weights are not finite after step {step} ({name} holds NaN or infinity): stopped without "
        f"saving them; {where}. Try a lower --max_lr, or resume from an earlier checkpoint"
    )


def final_weights_intact(model_dir: str) -> bool:
    """The run folder holds final weights and their manifest, and they match. Weights without a
    manifest are not taken as intact: the manifest is written right after them, so a run stopped
    between the two (an I/O error, a kill) has it missing, and resuming the finished run writes both
    again from its last checkpoint (the same weights)."""
    from gradcraft.training.run_folder import FINAL_WEIGHTS, WEIGHTS_MANIFEST
    from gradcraft.training.runfiles import check_weights_manifest

    if not os.path.isfile(os.path.join(model_dir, WEIGHTS_MANIFEST)):
        return False
    for name in FINAL_WEIGHTS:
        path = os.path.join(model_dir, name)
        if os.path.exists(path):
            try:
                check_weights_manifest(path)
            except UserError:
                return False
            return True
    return False
