"""F.affine_grid / F.grid_sample beyond the op table (tests/optable_compat.py has values and gradients):
PyTorch's warning for the default align_corners, its errors, and the nearest mode's zero grid gradient."""

import numpy as np
import pytest

import gradcraft as gc
import gradcraft.nn.functional as gF

torch = pytest.importorskip("torch")
F = torch.nn.functional


def test_default_align_corners_warns_as_pytorch_and_means_false():
    theta = np.array([[[0.9, 0.1, 0.0], [-0.2, 1.1, 0.3]]])
    with pytest.warns(UserWarning, match="align_corners=False since 1.3.0"):
        grid = gF.affine_grid(gc.tensor(theta), [1, 1, 3, 4])
    np.testing.assert_allclose(
        grid.numpy(), F.affine_grid(torch.tensor(theta), [1, 1, 3, 4], align_corners=False).numpy(), rtol=1e-12
    )
    with pytest.warns(UserWarning, match="align_corners=False since 1.3.0"):
        gF.grid_sample(gc.ones(1, 1, 2, 2), grid.float())


@pytest.mark.parametrize(
    "call",
    [
        lambda m, t: m.affine_grid(t.ones(1, 2, 3), [1, 1, 2], align_corners=False),
        lambda m, t: m.affine_grid(t.ones(1, 3, 3), [1, 1, 2, 2], align_corners=False),
        lambda m, t: m.affine_grid(t.ones(1, 2, 3, dtype=t.int64), [1, 1, 2, 2], align_corners=False),
        lambda m, t: m.grid_sample(t.ones(1, 1, 2, 2), t.zeros(1, 1, 1, 2), mode="cubic", align_corners=False),
        lambda m, t: m.grid_sample(t.ones(1, 1, 2, 2), t.zeros(1, 1, 1, 2), padding_mode="wrap", align_corners=False),
    ],
)
def test_errors_as_pytorch(call):
    with pytest.raises((ValueError, NotImplementedError)) as expected:
        call(F, torch)
    with pytest.raises(type(expected.value)) as got:
        call(gF, gc)
    assert str(got.value) == str(expected.value)


def test_nearest_gives_the_grid_a_zero_gradient():
    grid = gc.tensor(np.full((1, 2, 2, 2), 0.3), requires_grad=True)
    gF.grid_sample(gc.ones(1, 1, 3, 3, dtype=gc.float64), grid, mode="nearest", align_corners=True).sum().backward()
    assert grid.grad is not None and not grid.grad.numpy().any()
