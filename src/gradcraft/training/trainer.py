"""The training loop: token file in, trained model directory out, resumable exactly.

Reads top to bottom: data, model, optimizer, (resume), then the loop of
micro-batches -> gradient accumulation -> clip -> AdamW step -> log ->
evaluate -> checkpoint.
"""

import math
import os
import shlex
import sys
import time
from dataclasses import asdict, replace

import numpy as np

import gradcraft as gc
from gradcraft.atomic import write_json
from gradcraft.data.sampler import SAMPLERS, eval_batches
from gradcraft.data.tokenfile import read_token_file, val_path_for
from gradcraft.distributed.buckets import GradientBuckets
from gradcraft.distributed.zero import ZeroAdamW
from gradcraft.errors import UserError
from gradcraft.models import ModelConfig, Transformer, describe
from gradcraft.optim import AdamW, CosineWithWarmup
from gradcraft.optim.lr_schedule import Shifted, from_state_dict, set_lr, with_total_steps
from gradcraft.optim.weight_decay import describe_decay, weight_decay_groups
from gradcraft.training import checkpoint as ckpt
from gradcraft.training.config import TrainConfig  # noqa: F401 (re-exported: its home is training/config.py)
from gradcraft.training.resources import check_memory, peak_flops
from gradcraft.training.log import RunLogs, parse_log_kinds, plot_loss
from gradcraft.training.run_folder import (
    FINAL_WEIGHTS,  # noqa: F401
    RUN_FILES,  # noqa: F401
    check_model_dir,
    clear_run,  # noqa: F401
    portable_path,
    save_run_weights,
    save_weights,  # noqa: F401
)
from gradcraft.training.runguards import check_split, final_weights_intact, load_sampler, stop_if_nonfinite
from gradcraft.training.runlock import raise_if_interrupted
from gradcraft.training.step import GradientStep, _moe_stats


def resume_command(tc: TrainConfig) -> str:
    """The command that continues this run (the rest of its settings are in train_config.json)."""
    return f"gradcraft train --dataset {shlex.quote(tc.dataset)} --model_dir {shlex.quote(tc.model_dir)} --resume"


def interrupted_message(tc: TrainConfig) -> str:
    """What to say after Ctrl-C: the newest checkpoint's step and how to go on from it."""
    paths = ckpt.list_checkpoints(os.path.join(tc.model_dir, "checkpoints"))
    if not paths:
        return (
            f"interrupted before the first checkpoint (every --checkpoint_every {tc.checkpoint_every} steps): "
            "nothing to resume; run the same command again"
        )
    step = int(os.path.basename(paths[-1])[5:])
    return f"interrupted: the newest checkpoint holds step {step} ({paths[-1]}); resume with: {resume_command(tc)}"


def load_dataset(path: str):
    if not os.path.exists(path):
        raise UserError(f"dataset {path} does not exist; make one with `gradcraft tokenize`")
    tokens, header = read_token_file(path)
    val, val_header = None, None
    if os.path.exists(val_path_for(path)):
        val, val_header = read_token_file(val_path_for(path))
    return tokens, header, val, val_header


def _decay_groups(model, tc: TrainConfig, checkpoint: str | None, log):
    """(tc, the optimizer's parameter groups) by the weight-decay rule (gradcraft/optim/weight_decay.py).

    A resumed run keeps the split its checkpoint was written with, because the AdamW moments are
    stored by position in the groups: a checkpoint from before embeddings were decayed (its groups
    carry no names) goes on with --decay_embeddings false; one whose split differs from the flags'
    is refused."""
    groups = weight_decay_groups(model, tc.weight_decay, tc.decay_embeddings)
    if checkpoint is None:
        return tc, groups
    saved = [g.get("names") for g in ckpt.read_state(checkpoint)["optimizer"]["param_groups"]]
    if saved[0] is None:
        old = weight_decay_groups(model, tc.weight_decay, decay_embeddings=False)
        if tc.decay_embeddings and [g["names"] for g in old] != [g["names"] for g in groups]:
            log(
                "note: this run's checkpoints come from before embeddings were decayed: it goes on without "
                "decaying them (--decay_embeddings false)"
            )
        return replace(tc, decay_embeddings=False), old
    if saved != [g["names"] for g in groups]:
        raise UserError(
            f"--resume: --decay_embeddings {str(tc.decay_embeddings).lower()} splits the parameters "
            f"differently from the checkpoint {checkpoint} ({len(saved[0])} decayed tensors there, "
            f"{len(groups[0]['names'])} here); drop the flag, or train into a new --model_dir"
        )
    return tc, groups


def train(
    tc: TrainConfig, mc: ModelConfig, resume: bool = False, log=None, group=None, overwrite: bool = False
) -> dict:
    """Run training; returns a summary (final step, last loss, tokens/s).

    group: this process's place among data-parallel processes (gradcraft/distributed.py), or None.
    Each process computes its share of a step's micro-batches; rank 0 alone logs and writes files.
    overwrite: first delete the RUN_FILES of an earlier run in tc.model_dir (after the dataset checks).
    A resumed run that has nothing left to do returns {"finished": True, "step": ...} at once."""
    rank, world = (group.rank, group.world) if group is not None else (0, 1)
    main = rank == 0
    log = log or (lambda msg: print(msg, file=sys.stderr))
    if not main:
        log = _silent
    tc.validate()
    tokens, header, val_tokens, val_header = load_dataset(tc.dataset)
    if header.vocab_size and header.vocab_size != mc.vocab_size:
        if resume:
            raise UserError(
                f"the dataset {tc.dataset} has a vocabulary of {header.vocab_size} but the run in "
                f"{tc.model_dir} was trained with {mc.vocab_size}: it was made with another tokenizer; "
                "resume with the run's own dataset, or train into a new --model_dir"
            )
        raise UserError(
            f"--vocab_size {mc.vocab_size} differs from the dataset's tokenizer vocabulary "
            f"({header.vocab_size}); leave --vocab_size unset to take it from the dataset"
        )
    # every id below the model's vocabulary (a header of vocabulary 0 records none): one chunked pass
    sampler = SAMPLERS[tc.sampling](tokens, mc.seq_len, tc.batch_size, seed=tc.seed, vocab_size=mc.vocab_size)
    if val_tokens is not None:
        check_split(val_tokens, val_header, header, mc, tc.dataset)
    if world != tc.world:
        raise ValueError(f"TrainConfig asks for {tc.world} processes but the process group has {world}")
    per_step = tc.target_batch or tc.batch_size * world  # sequences per optimizer step, all processes
    accum = per_step // (tc.batch_size * world)  # micro-batches per process and step

    gc.manual_seed(tc.seed)
    model = Transformer(mc)
    if tc.device != "cpu":
        model.to(tc.device)
    compute_dtype = gc.bfloat16 if tc.dtype == "bfloat16" else gc.float32
    checkpoint = None
    if resume:
        checkpoint = ckpt.latest_checkpoint(tc.model_dir, log)
        if checkpoint is None:
            raise UserError(f"no usable checkpoint in {tc.model_dir}/checkpoints; start without --resume")
    tc, groups = _decay_groups(model, tc, checkpoint, log)
    opt = AdamW(groups, lr=tc.max_lr, betas=(tc.beta1, tc.beta2), weight_decay=tc.weight_decay)
    # gradients summed during backward, bucket by bucket (gradcraft/distributed/buckets.py)
    buckets = GradientBuckets(group, model.parameters(), tc.bucket_mb * 2**20, scatter=tc.zero) if world > 1 else None
    if tc.zero and world > 1:
        opt = ZeroAdamW(opt, buckets, group, log)
    elif tc.zero:
        log("note: --zero shards the optimizer state over processes; with one process it changes nothing")
    schedule = CosineWithWarmup(tc.max_lr, tc.min_lr, tc.warmup_steps, tc.steps)
    if overwrite and main:  # after every check of the data and the model: a mistake deletes nothing
        clear_run(tc.model_dir, log)
    if main:
        os.makedirs(tc.model_dir, exist_ok=True)

    start_step = 0
    if resume:
        state = ckpt.load_checkpoint(checkpoint, model, opt)
        if (
            state.get("tokenizer_fingerprint")
            and header.fingerprint
            and state["tokenizer_fingerprint"] != header.fingerprint
        ):
            raise UserError(
                f"the dataset {tc.dataset} was made with a different tokenizer ({header.fingerprint}) "
                f"than the run in {tc.model_dir} ({state['tokenizer_fingerprint']}); resume with the "
                "run's own dataset, or train into a new --model_dir"
            )
        start_step = state["step"]
        end = min(tc.steps, tc.stop_after) if tc.stop_after else tc.steps
        if start_step >= end:
            if main and not final_weights_intact(tc.model_dir):
                save_run_weights(model, tc.model_dir, header.fingerprint)
            return {"finished": True, "step": start_step, "steps": tc.steps}
        load_sampler(sampler, state["sampler"], checkpoint)
        gc.set_rng_state(state["rng"])
        log(f"resuming from {checkpoint} (step {start_step})")
        schedule = _resumed_schedule(state.get("schedule"), schedule, start_step, log)
    if main:
        write_json(os.path.join(tc.model_dir, "gradcraft_config.json"), mc.to_dict())
        # the batch per step as resolved, so that a --resume with another --nproc keeps it
        write_json(os.path.join(tc.model_dir, "train_config.json"), saved_train_config(tc, per_step))
        # the tokenizer travels with the run folder (checked against the token file's fingerprint)
        ckpt.copy_tokenizer(tc.model_dir, tc.dataset, header.fingerprint, mc.seq_len, log)

    log(f"model: {describe(model)}")
    log(describe_decay(groups) + ("" if tc.decay_embeddings else " (embeddings not decayed)"))
    log(
        f"data: {len(tokens):,} tokens; {tc.batch_size} x {accum} sequences of {mc.seq_len} per step"
        + (f" on each of {world} processes" + (f" ({tc.nnodes} nodes)" if tc.nnodes > 1 else "") if world > 1 else "")
        + f"; device {tc.device}, {tc.dtype}"
    )
    run_log = (
        RunLogs(
            tc.model_dir,
            parse_log_kinds(tc.log),
            resume_step=start_step if resume else None,
            extra_columns=list(_moe_stats(model, names_only=True)),
        )
        if main
        else None
    )
    if main:
        run_log.start(start_step, resumed=resume, config=saved_train_config(tc, per_step), model=mc.to_dict())
    peak = peak_flops(tc.device, tc.dtype)
    flops_per_token = model.flops_per_token()
    tokens_per_step = per_step * mc.seq_len
    bar = _progress(tc, start_step) if main else None
    bad_steps, last_loss, last_good_ckpt = 0, float("nan"), None
    tok_per_s = 0.0
    model.train()

    end_step = min(tc.steps, tc.stop_after) if tc.stop_after else tc.steps
    runner = GradientStep(model, opt, tc, accum, mc.seq_len, compute_dtype, log, group, buckets)
    for step in range(start_step, end_step):
        raise_if_interrupted()
        t0 = time.perf_counter()
        lr = schedule(step)
        set_lr(opt, lr)
        if rank and mc.uses_dropout:
            # Dropout masks of their own on the other processes, from (seed, rank, step): a resumed run
            # draws the same ones (rank 0's random state, with its dropout counter, is the one the
            # checkpoints keep). manual_seed writes the seed into the device's dropout state in place,
            # so a replayed graph reads it too.
            gc.manual_seed(tc.seed + 7919 * rank + 104729 * step)
        # every process draws the whole step's micro-batches and computes its own share of them
        batches = [sampler.next_batch() for _ in range(accum * world)]
        step_loss, moe_sums, grad_stats = runner.run(batches[rank * accum : (rank + 1) * accum])
        norm_value = float(grad_stats.numpy()[0])
        if not (math.isfinite(step_loss) and math.isfinite(norm_value)):
            bad_steps += 1
            runner.discard_gradients()
            log(
                f"warning: step {step + 1}: loss {step_loss} / grad norm {norm_value} is not finite; skipped the update"
            )
            if bad_steps >= tc.max_bad_steps:
                if run_log:
                    run_log.end(step, "stopped: the loss was not finite", bad_steps=bad_steps)
                    run_log.close()
                where = (
                    f"the last good checkpoint is {last_good_ckpt}" if last_good_ckpt else "no checkpoint was written"
                )
                raise UserError(
                    f"the loss was not finite for {bad_steps} steps in a row (last at step {step + 1}); "
                    f"stopped: {where}. Try a lower --max_lr"
                )
            continue
        bad_steps = 0
        opt.step(grad_scale=grad_stats if tc.grad_clip else None)
        runner.discard_gradients()
        dt = time.perf_counter() - t0
        tok_per_s = tokens_per_step / dt
        last_loss = step_loss
        done = step + 1

        val_loss = None
        checkpoint_due = done % tc.checkpoint_every == 0 or done == end_step
        # ZeRO-1: the full optimizer state is gathered from every process (all take part), rank 0 saves it
        saved_opt = _GatheredState(opt.state_dict()) if checkpoint_due and isinstance(opt, ZeroAdamW) else opt
        if not main:
            continue
        if val_tokens is not None and ((tc.eval_every and done % tc.eval_every == 0) or done == tc.steps):
            val_loss = evaluate(model, val_tokens, mc.seq_len, tc.batch_size, tc.eval_batches, tc.device, compute_dtype)
        run_log.append(
            {
                "step": done,
                "loss": step_loss,
                "grad_norm": norm_value,
                "lr": lr,
                "tokens_per_s": round(tok_per_s, 1),
                "val_loss": val_loss,
                **moe_sums,
            }
        )
        if bar is not None:
            postfix = {"loss": f"{step_loss:.4f}", "lr": f"{lr:.2e}", "tok/s": f"{tok_per_s:,.0f}"}
            if peak:
                postfix["mfu"] = f"{100 * flops_per_token * tok_per_s / (peak * world):.1f}%"
            bar.set_postfix(postfix, refresh=False)
            bar.update(1)
        elif done % tc.print_every == 0 or done == end_step:
            log(
                f"step {done}/{tc.steps} loss {step_loss:.4f} lr {lr:.2e} {tok_per_s:,.0f} tok/s"
                + (f" val {val_loss:.4f}" if val_loss is not None else "")
            )
        if checkpoint_due:
            stop_if_nonfinite(model, done, last_good_ckpt, run_log)  # a checkpoint never holds NaN weights
            last_good_ckpt = ckpt.save_checkpoint(
                tc.model_dir,
                done,
                model,
                saved_opt,
                keep=tc.keep_checkpoints,
                state={
                    "sampler": sampler.state_dict(),
                    "rng": gc.get_rng_state(),
                    "schedule": schedule.state_dict(),
                    "tokenizer_fingerprint": header.fingerprint,
                    "vocab_size": mc.vocab_size,
                },
            )

    if bar is not None:
        bar.close()
    if buckets is not None:
        buckets.close()
    if not main:
        memory = gc.device.get_backend(tc.device).memory_info()
        return {
            "step": end_step,
            "loss": last_loss,
            "tokens_per_s": tok_per_s,
            "peak_bytes": memory["reserved_bytes"],
            "writer": False,
        }
    stop_if_nonfinite(model, end_step, last_good_ckpt, run_log)  # nor the final weights
    run_log.end(
        end_step,
        "finished" if end_step == tc.steps else "stopped (--stop_after)",
        loss=last_loss,
        tokens_per_s=round(tok_per_s, 1),
    )
    run_log.close()
    save_run_weights(model, tc.model_dir, header.fingerprint)
    try:
        plot_loss(os.path.join(tc.model_dir, "training_log.csv"), os.path.join(tc.model_dir, "loss.png"))
    except ModuleNotFoundError as e:
        if e.name.split(".")[0] != "matplotlib":
            raise
        log(
            "note: no loss.png: matplotlib is not installed (pip install 'gradcraft[plot]'); "
            "the losses are in training_log.csv"
        )
    memory = gc.device.get_backend(tc.device).memory_info()
    return {"step": end_step, "loss": last_loss, "tokens_per_s": tok_per_s, "peak_bytes": memory["reserved_bytes"]}


def saved_train_config(tc: TrainConfig, per_step: int) -> dict:
    """train_config.json: the settings a --resume keeps, with the batch per step as resolved (so that
    a resume on another --nproc keeps it). Not the node count (a run may resume on other nodes) nor
    --zero (checkpoints are whole either way)."""
    values = asdict(replace(tc, target_batch=per_step))
    values["dataset"] = portable_path(tc.dataset, tc.model_dir)  # found again from any working directory
    values["model_dir"] = os.path.abspath(tc.model_dir)  # (a resume names the folder it resumes)
    for launch_setting in ("nnodes", "zero"):  # this session's, given again to a resume that wants them
        values.pop(launch_setting)
    return values


class _GatheredState:
    """A sharded optimizer's full state, gathered for rank 0's checkpoint."""

    def __init__(self, state: dict):
        self.state = state

    def state_dict(self) -> dict:
        return self.state


def _resumed_schedule(saved_state, fresh, step: int, log):
    """The schedule a resumed run follows from `step` (docs/training.md, "Starting, resuming,
    stopping"): the saved one, its decay re-fitted to a new --steps without a jump
    (with_total_steps); or `fresh`, built from the flags, when --max_lr, --min_lr or --warmup_steps
    were changed on purpose."""
    if not saved_state:
        return fresh
    saved = from_state_dict(saved_state)
    base = from_state_dict(saved.base) if hasattr(saved, "base") else saved
    if (base.max_lr, base.min_lr, base.warmup_steps) != (fresh.max_lr, fresh.min_lr, fresh.warmup_steps):
        if isinstance(saved, Shifted):  # an imported run (docs/k2.md): the new settings, still from its start
            fresh = Shifted(
                replace(fresh, total_steps=max(1, fresh.total_steps - saved.offset)).state_dict(), saved.offset
            )
        log(f"schedule: new learning-rate settings from step {step}: {saved(step):.3g} becomes {fresh(step):.3g}")
        return fresh
    schedule = with_total_steps(saved, step, fresh.total_steps)
    if schedule is not saved:
        log(
            f"schedule: --steps {saved.total_steps} -> {fresh.total_steps}: the learning rate goes on from "
            f"{saved(step):.3g} at step {step} and reaches --min_lr {fresh.min_lr:.3g} at step {fresh.total_steps}"
        )
    return schedule


def train_processes(
    tc: TrainConfig, mc: ModelConfig, resume: bool = False, overwrite: bool = False, topology=None
) -> dict:
    """`train` on tc.nproc data-parallel processes (one per GPU from tc.device on); the summary of
    this node's first process (rank 0's on node 0).

    topology (gradcraft.distributed.Topology): a multi-node job, or this process as one rank started
    by torchrun (started_by "environment"); None: this host alone. The command-line entry: before any
    process starts, it refuses a --model_dir that holds another run (check_model_dir) and a run that
    cannot fit in memory (check_memory); only node 0, which writes, checks the folder."""
    tc.validate()  # here, before any process starts
    writer = topology is None or topology.node_rank == 0
    if writer:
        check_model_dir(tc.model_dir, resume, overwrite)
    check_memory(tc, mc)
    if topology is None and tc.nproc == 1:
        return train(tc, mc, resume, overwrite=overwrite)
    from gradcraft.distributed import finished, join_group, launch
    from gradcraft.distributed.spawn import check_devices, rank_device

    signature = job_signature(tc)
    if topology is not None and topology.started_by == "environment":  # torchrun: this process is one rank
        check_devices(replace(topology, nproc=topology.local_rank + 1), tc.device)
        device = rank_device(tc.device, topology.local_rank)
        group = join_group(topology, topology.rank, device, signature)
        summary = train(replace(tc, device=device), mc, resume, group=group, overwrite=overwrite)
        finished(group)
        return dict(summary, hard_exit=device.startswith("cuda"))  # (see launch._run_rank: NCCL at exit)
    return launch(_train_rank, tc.nproc, tc.device, tc, mc, resume, overwrite, topology=topology, signature=signature)


def job_signature(tc: TrainConfig) -> str:
    """What every rank must agree on, compared at the rendezvous: the settings that shape the step."""
    keys = (
        "steps",
        "batch_size",
        "target_batch",
        "seed",
        "sampling",
        "dtype",
        "nproc",
        "nnodes",
        "zero",
        "bucket_mb",
        "max_lr",
        "grad_clip",
    )
    return ",".join(f"{k}={getattr(tc, k)}" for k in keys)


def _train_rank(group, device, tc, mc, resume, overwrite=False):
    return train(replace(tc, device=device), mc, resume, group=group, overwrite=overwrite)


def _silent(msg) -> None:
    pass


def evaluate(model, tokens, seq_len, batch_size, max_batches, device, compute_dtype) -> float:
    model.eval()
    losses = []
    with gc.no_grad():
        for x, y in eval_batches(tokens, seq_len, batch_size, max_batches):
            _, loss = model(gc.tensor(x, device=device), gc.tensor(y, device=device), compute_dtype=compute_dtype)
            losses.append(loss.item())
    model.train()
    return float(np.mean(losses))


def _progress(tc: TrainConfig, start: int):
    if not tc.progress or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=tc.steps, initial=start, unit="step", dynamic_ncols=True)
