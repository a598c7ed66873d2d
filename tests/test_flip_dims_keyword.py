"""torch.flip and Tensor.flip with PyTorch's keyword `dims`, as tutorials call it, against PyTorch."""

import numpy as np
import pytest

import gradcraft

torch = pytest.importorskip("torch")


def test_flip_dims_keyword_matches_torch():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    g, t = gradcraft.tensor(x), torch.tensor(x)
    for dims in ([1], (0, 2), [-1]):
        np.testing.assert_array_equal(gradcraft.flip(g, dims=dims).numpy(), torch.flip(t, dims=dims).numpy())
        np.testing.assert_array_equal(g.flip(dims=dims).numpy(), t.flip(dims=dims).numpy())
    np.testing.assert_array_equal(g.flip(0, 1).numpy(), t.flip(0, 1).numpy())
    np.testing.assert_array_equal(gradcraft.flip(g, [2]).numpy(), torch.flip(t, [2]).numpy())
    with pytest.raises(TypeError):
        gradcraft.flip(g, [0], dims=[1])


def test_flip_dims_keyword_gradient():
    w = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)
    g = gradcraft.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    (gradcraft.flip(g, dims=[1]) * gradcraft.tensor(w)).sum().backward()
    np.testing.assert_array_equal(g.grad.numpy(), [[3.0, 2.0, 1.0]])
