"""F.kl_div and nn.KLDivLoss against PyTorch: every reduction, log_target, zero targets, gradients."""

import numpy as np
import pytest

import gradcraft
import gradcraft.nn.functional as F

torch = pytest.importorskip("torch")


def _data():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 5)).astype(np.float32)
    target = rng.random((4, 5)).astype(np.float32)
    target[0, :2] = 0.0  # zero probabilities contribute nothing
    target /= target.sum(1, keepdims=True)
    return logits, target


@pytest.mark.parametrize("reduction", ["none", "sum", "batchmean", "mean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div_matches_torch(reduction, log_target):
    logits, target = _data()
    if log_target:
        target = np.log(np.maximum(target, 1e-3)).astype(np.float32)
    gi = gradcraft.tensor(logits, requires_grad=True)
    ti = torch.tensor(logits, requires_grad=True)
    ours = F.kl_div(gi.log_softmax(-1), gradcraft.tensor(target), reduction=reduction, log_target=log_target)
    theirs = torch.nn.functional.kl_div(
        ti.log_softmax(-1), torch.tensor(target), reduction=reduction, log_target=log_target
    )
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-5, atol=1e-6)
    ours.sum().backward()
    theirs.sum().backward()
    np.testing.assert_allclose(gi.grad.numpy(), ti.grad.numpy(), rtol=1e-4, atol=1e-6)
    assert not np.isnan(gi.grad.numpy()).any()


def test_kldivloss_module_and_errors():
    logits, target = _data()
    ours = gradcraft.nn.KLDivLoss(reduction="batchmean", log_target=False)
    theirs = torch.nn.KLDivLoss(reduction="batchmean", log_target=False)
    a = ours(gradcraft.tensor(logits).log_softmax(1), gradcraft.tensor(target)).item()
    b = theirs(torch.tensor(logits).log_softmax(1), torch.tensor(target)).item()
    assert abs(a - b) < 1e-6
    with pytest.raises(ValueError):
        torch.nn.functional.kl_div(torch.tensor(logits), torch.tensor(target), reduction="avg")
    with pytest.raises(ValueError):
        F.kl_div(gradcraft.tensor(logits), gradcraft.tensor(target), reduction="avg")
