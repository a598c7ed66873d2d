"""The scripts of tests/data/oracle_scripts run with PyTorch and with gradcraft standing in for it (the
compat suite's harness), and print the same numbers: class-weighted and soft-target cross entropy,
packed sequences through the recurrent layers, interpolate and the other layers, margin losses.
Plus the error cases and gumbel_softmax's properties (its samples come from gradcraft's generator)."""

import sys
from pathlib import Path

import numpy as np
import pytest

import gradcraft as gc
import gradcraft.nn as gnn
import gradcraft.nn.functional as GF

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).parent / "compat"))
from harness import compare, run  # noqa: E402

SCRIPTS = sorted((Path(__file__).parent / "data" / "oracle_scripts").glob("*.py"))


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_script_prints_torch_numbers(path):
    expected, got = run(path, "torch"), run(path, "gradcraft")
    assert len(expected.split()) > 50, "the script printed too little"
    problems = compare(expected, got)
    assert not problems, "\n".join(problems)


def test_errors_as_pytorch():
    x = gc.randn(2, 3, 4, 4)
    with pytest.raises(ValueError):
        GF.interpolate(x, size=(2, 2), scale_factor=2)
    with pytest.raises(ValueError):
        GF.interpolate(x)
    with pytest.raises(ValueError):
        GF.interpolate(x, scale_factor=2, align_corners=True)
    with pytest.raises(NotImplementedError):
        GF.interpolate(x, scale_factor=2, mode="linear")
    with pytest.raises(RuntimeError):
        GF.pixel_shuffle(gc.randn(1, 3, 2, 2), 2)
    with pytest.raises(RuntimeError):
        GF.glu(gc.randn(2, 3), dim=1)
    with pytest.raises(RuntimeError):
        GF.cross_entropy(gc.randn(2, 3), gc.tensor([0, 1]), weight=gc.ones(4))
    with pytest.raises(RuntimeError):
        GF.cross_entropy(gc.randn(2, 3), gc.rand(2, 4))
    with pytest.raises(RuntimeError, match="sorted in decreasing order"):
        gnn.utils.rnn.pack_padded_sequence(gc.randn(3, 2, 1), [1, 3])
    with pytest.raises(ValueError):
        gnn.TripletMarginLoss(margin=0)
    with pytest.raises(NotImplementedError):
        GF.embedding_bag(gc.tensor([[0, 1]]), gc.randn(3, 2), mode="mean", per_sample_weights=gc.ones(1, 2))


def test_gumbel_softmax_properties():
    gc.manual_seed(0)
    logits = gc.tensor(np.log([[0.7, 0.2, 0.1]] * 4000), requires_grad=True)
    soft = GF.gumbel_softmax(logits, tau=0.5)
    assert np.allclose(soft.sum(-1).numpy(), 1.0, atol=1e-5)
    hard = GF.gumbel_softmax(logits, tau=0.5, hard=True)
    values = hard.numpy()
    assert set(np.unique(values)) <= {0.0, 1.0} and np.all(values.sum(-1) == 1)
    # the argmax of logits + Gumbel noise is a sample of softmax(logits)
    assert np.allclose(values.mean(0), [0.7, 0.2, 0.1], atol=0.03)
    (hard * gc.tensor([1.0, 2.0, 3.0])).sum().backward()  # straight through: the soft sample's gradient
    assert logits.grad is not None and np.abs(logits.grad.numpy()).sum() > 0
