"""Options that `gradcraft train` only passes on (label smoothing, weight decay and its embedding
rule, gradient clipping, AdamW's betas, accumulation to a target batch), checked through what the run
logs, against PyTorch on the same weights and batches.

A run of three steps logs, for step 1, the loss and gradient norm of the initial weights on its first
batches (label smoothing, accumulation) and, for steps 2 and 3, the loss after one and two AdamW
steps, which depend on every optimizer option: the betas, the weight decay and which parameters get
it, the clipping of the gradient (visible from the second update on: Adam's first update does not
see a gradient's scale), the learning rate (read from the log: the schedule has its own tests).
The reference computes all of it with torch.nn.functional.cross_entropy(label_smoothing=),
torch.nn.utils.clip_grad_norm_ and torch.optim.AdamW, from the definitions of the options.
"""

import json

import numpy as np
import pytest
import torch

import gradcraft as gc
from gradcraft.benchmarks import torch_reference
from gradcraft.cli.main import main
from gradcraft.data.sampler import SAMPLERS
from gradcraft.data.tokenfile import read_token_file
from gradcraft.models import ModelConfig, Transformer
from gradcraft.nn.layers import Embedding
from gradcraft.training.log import read_log
from cli_helpers import TINY_TRAIN

CASES = {
    # label smoothing, weight decay on the matrices only, clipping that bites (the norm is ~1), betas
    "smoothing_clip_no_embedding_decay": dict(
        label_smoothing=0.3, weight_decay=3.0, decay_embeddings=False, grad_clip=0.05, betas=(0.8, 0.9), target=4
    ),
    # no smoothing or clipping, strong decay on the embeddings too, two micro-batches per step
    "decay_embeddings_no_clip_accumulation": dict(
        label_smoothing=0.0, weight_decay=2.0, decay_embeddings=True, grad_clip=0.0, betas=(0.9, 0.99), target=8
    ),
}


def _train(dataset, out, case):
    argv = ["train", "--dataset", dataset, "--model_dir", str(out), "--steps", "3", "--dropout", "0"]
    argv += ["--label_smoothing", str(case["label_smoothing"]), "--weight_decay", str(case["weight_decay"])]
    argv += ["--decay_embeddings", "true" if case["decay_embeddings"] else "false"]
    argv += ["--grad_clip", str(case["grad_clip"]), "--beta1", str(case["betas"][0]), "--beta2", str(case["betas"][1])]
    argv += ["--target_batch", str(case["target"]), "--checkpoint_every", "100", *TINY_TRAIN]
    argv += ["--max_lr", "3e-2", "--warmup_steps", "0"]
    assert main(argv) == 0


def _reference(dataset, out, case, lr):
    """(step-1 loss, step-1 gradient norm, step-2 loss, step-3 loss) computed with PyTorch."""
    mc = ModelConfig.from_dict(json.loads((out / "gradcraft_config.json").read_text()))
    tc = json.loads((out / "train_config.json").read_text())
    gc.manual_seed(tc["seed"])
    model = Transformer(mc)  # the run's initial weights, made as train() makes them
    tokens, _ = read_token_file(dataset)
    sampler = SAMPLERS[tc["sampling"]](tokens, mc.seq_len, tc["batch_size"], seed=tc["seed"])
    accum = case["target"] // tc["batch_size"]
    steps = [[sampler.next_batch() for _ in range(accum)] for _ in range(3)]

    embedding_ids = {id(m.weight) for m in model.modules() if isinstance(m, Embedding)}
    named = list(model.named_parameters())
    params = {name: torch.tensor(p.numpy(), requires_grad=True) for name, p in named}
    decayed = [n for n, p in named if p.ndim >= 2 and (case["decay_embeddings"] or id(p) not in embedding_ids)]
    kept = [n for n in params if n not in decayed]
    opt = torch.optim.AdamW(
        [
            {"params": [params[n] for n in decayed], "weight_decay": case["weight_decay"]},
            {"params": [params[n] for n in kept], "weight_decay": 0.0},
        ],
        lr=lr[0],
        betas=case["betas"],
    )

    def mean_loss(batches):
        x = torch.tensor(np.concatenate([b[0] for b in batches]))
        y = torch.tensor(np.concatenate([b[1] for b in batches]))
        logits = torch_reference.forward(mc, params, x)
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), y.reshape(-1), label_smoothing=case["label_smoothing"]
        )

    losses, norm = [], None
    for k, batches in enumerate(steps):
        for group in opt.param_groups:
            group["lr"] = lr[k]
        opt.zero_grad()
        loss = mean_loss(batches)
        losses.append(loss.item())
        if k == 2:
            break
        loss.backward()
        if k == 0:
            norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params.values())).item()
        if case["grad_clip"]:
            torch.nn.utils.clip_grad_norm_(list(params.values()), case["grad_clip"])
        opt.step()
    return losses[0], norm, losses[1], losses[2]


@pytest.mark.parametrize("name", list(CASES))
def test_logged_losses_follow_the_forwarded_options(dataset, tmp_path, name):
    case = CASES[name]
    out = tmp_path / "run"
    _train(dataset, out, case)
    rows = read_log(str(out / "training_log.csv"))
    lr = [float(r["lr"]) for r in rows]
    loss1, norm1, loss2, loss3 = _reference(dataset, out, case, lr)
    np.testing.assert_allclose(float(rows[0]["loss"]), loss1, rtol=1e-5, err_msg="step 1 loss")
    np.testing.assert_allclose(float(rows[0]["grad_norm"]), norm1, rtol=1e-4, err_msg="step 1 gradient norm")
    np.testing.assert_allclose(float(rows[1]["loss"]), loss2, rtol=2e-5, err_msg="step 2 loss (one AdamW step)")
    np.testing.assert_allclose(float(rows[2]["loss"]), loss3, rtol=2e-5, err_msg="step 3 loss (two AdamW steps)")
    if name == "smoothing_clip_no_embedding_decay":
        # each option moves the reference by far more than the tolerances: a run that dropped one
        # (no smoothing, no decay, decay on the embeddings, no clipping, other betas) fails above
        for change in (
            {"label_smoothing": 0.0},
            {"weight_decay": 0.0},
            {"decay_embeddings": True},
            {"grad_clip": 0.0},
            {"betas": (0.9, 0.95)},
        ):
            other = _reference(dataset, out, dict(case, **change), lr)
            assert max(abs(a - b) / abs(b) for a, b in zip((loss1, norm1, loss2, loss3), other)) > 2e-4, change
