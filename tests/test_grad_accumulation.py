"""Gradients of accumulated micro-batches and of data-parallel steps against PyTorch's gradient of the
mean loss over the whole step's batch (the independent decoder in benchmarks/torch_reference.py).

AdamW normalizes the gradient's scale away and clipping bounds it, so a training run's losses barely
notice a gradient that is 2x too large; these tests look at the gradients themselves (in process) and
at the gradient norm that `gradcraft train` logs for its first step (before clipping), for
accumulation within a process and across processes.
"""

import json

import numpy as np
import pytest
import torch

import gradcraft as gc
from gradcraft.benchmarks import torch_reference
from gradcraft.data.sampler import SAMPLERS
from gradcraft.data.tokenfile import read_token_file
from gradcraft.models import ModelConfig, Transformer
from gradcraft.training.log import read_log
from gradcraft.training.trainer import GradientStep, TrainConfig
from test_train import TINY, run_here


def torch_mean_loss_gradients(cfg, state, batches):
    """(mean loss, {name: gradient}) of the cross-entropy averaged over every token of every batch."""
    params = {k: torch.tensor(np.asarray(v), requires_grad=True) for k, v in state.items()}
    x = torch.tensor(np.concatenate([b[0] for b in batches]))
    y = torch.tensor(np.concatenate([b[1] for b in batches]))
    logits = torch_reference.forward(cfg, params, x)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
    loss.backward()
    return loss.item(), {k: p.grad for k, p in params.items() if p.grad is not None}


def test_accumulated_gradients_equal_the_gradient_of_the_mean_loss():
    cfg = ModelConfig(
        vocab_size=50,
        seq_len=8,
        dim=32,
        n_layers=1,
        n_heads=2,
        norm="rmsnorm",
        mlp="swiglu",
        positions="rope",
        bias=False,
        tie_embeddings=False,
    )
    gc.manual_seed(0)
    model = Transformer(cfg)
    rng = np.random.default_rng(0)
    accum, batch = 3, 2
    batches = [(rng.integers(0, 50, (batch, 8)), rng.integers(0, 50, (batch, 8))) for _ in range(accum)]
    tc = TrainConfig(
        dataset="unused", model_dir="unused", batch_size=batch, target_batch=batch * accum, cuda_graph="off"
    )
    step = GradientStep(model, None, tc, accum, cfg.seq_len, gc.float32, log=print)
    mean_loss, _, grad_stats = step.run(batches)
    want_loss, want = torch_mean_loss_gradients(cfg, {k: v.numpy() for k, v in model.state_dict().items()}, batches)
    np.testing.assert_allclose(mean_loss, want_loss, rtol=1e-5)
    for name, p in model.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), want[name].numpy(), rtol=1e-3, atol=1e-6, err_msg=name)
    norm = np.sqrt(sum(float((want[name].double() ** 2).sum()) for name, _ in model.named_parameters()))
    np.testing.assert_allclose(float(grad_stats.numpy()[0]), norm, rtol=1e-4)


@pytest.mark.parametrize("nproc,target_batch", [(1, 8), (2, 8), (2, 16)])
def test_first_logged_gradient_norm_is_that_of_the_mean_loss(dataset, tmp_path, nproc, target_batch):
    """micro-batches of 4: 2 per step on one process, 1 on each of 2, 2 on each of 2."""
    out = tmp_path / "run"
    run_here(
        "--dataset",
        dataset,
        "--model_dir",
        str(out),
        "--steps",
        "1",
        "--nproc",
        str(nproc),
        "--target_batch",
        str(target_batch),
        "--dropout",
        "0",
        *TINY,
    )
    mc = ModelConfig.from_dict(json.loads((out / "gradcraft_config.json").read_text()))
    tc = json.loads((out / "train_config.json").read_text())
    first = read_log(str(out / "training_log.csv"))[0]
    # the run's initial weights and first batches, made as train() makes them
    gc.manual_seed(tc["seed"])
    model = Transformer(mc)
    tokens, _ = read_token_file(dataset)
    sampler = SAMPLERS[tc["sampling"]](tokens, mc.seq_len, tc["batch_size"], seed=tc["seed"])
    batches = [sampler.next_batch() for _ in range(target_batch // tc["batch_size"])]
    want_loss, want = torch_mean_loss_gradients(mc, {k: v.numpy() for k, v in model.state_dict().items()}, batches)
    norm = np.sqrt(sum(float((want[name].double() ** 2).sum()) for name, _ in model.named_parameters()))
    np.testing.assert_allclose(float(first["loss"]), want_loss, rtol=1e-5)
    np.testing.assert_allclose(float(first["grad_norm"]), norm, rtol=1e-4)
