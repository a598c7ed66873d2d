"""torch.nn.utils.vector_to_parameters against PyTorch: slices land in order, autograd does not see the
write, and a non-tensor vector raises TypeError."""

import numpy as np
import pytest

import gradcraft
from gradcraft.nn.utils import parameters_to_vector, vector_to_parameters

torch = pytest.importorskip("torch")


def test_round_trip_matches_torch():
    rng = np.random.default_rng(0)
    shapes = [(3, 2), (3,), (1, 3)]
    init = [rng.normal(size=s).astype(np.float32) for s in shapes]
    vec = rng.normal(size=sum(int(np.prod(s)) for s in shapes)).astype(np.float32)
    ours = [gradcraft.nn.Parameter(gradcraft.tensor(w)) for w in init]
    theirs = [torch.nn.Parameter(torch.tensor(w)) for w in init]
    vector_to_parameters(gradcraft.tensor(vec), ours)
    torch.nn.utils.vector_to_parameters(torch.tensor(vec), theirs)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
        assert a.requires_grad and a.is_leaf and a.grad is None
    np.testing.assert_array_equal(parameters_to_vector(ours).detach().numpy(), vec)
    with pytest.raises(TypeError):
        torch.nn.utils.vector_to_parameters(vec, theirs)
    with pytest.raises(TypeError):
        vector_to_parameters(vec, ours)


def test_write_is_not_recorded():
    p = gradcraft.nn.Parameter(gradcraft.zeros(2))
    src = gradcraft.tensor([1.0, 2.0], requires_grad=True)
    vector_to_parameters(src * 3, [p])
    (p * p).sum().backward()
    assert src.grad is None
    np.testing.assert_allclose(p.grad.numpy(), [6.0, 12.0])
