"""torch.linalg.inv / det / slogdet / solve / cholesky beyond the op table (tests/optable.py has their
values and gradients): PyTorch's errors for singular and non-positive-definite inputs, the result
types, the torch.* and Tensor spellings."""

import numpy as np
import pytest

import gradcraft as gc

torch = pytest.importorskip("torch")


def _message(fn_gc, fn_torch, data):
    with pytest.raises(torch.linalg.LinAlgError) as expected:
        fn_torch(torch.tensor(data))
    with pytest.raises(gc.linalg.LinAlgError) as got:
        fn_gc(gc.tensor(data)).numpy()
    assert isinstance(got.value, RuntimeError)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize(
    "data",
    [
        [[1.0, 2.0], [2.0, 4.0]],
        [[0.0, 0.0], [0.0, 0.0]],
        [[[1.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [1.0, 1.0]]],  # (the second of a batch)
    ],
)
def test_singular_matrices_raise_pytorchs_errors(data):
    _message(gc.linalg.inv, torch.linalg.inv, data)
    _message(
        lambda a: gc.linalg.solve(a, gc.ones(a.shape[:-1])),
        lambda a: torch.linalg.solve(a, torch.ones(a.shape[:-1])),
        data,
    )


@pytest.mark.parametrize(
    "data", [[[1.0, 2.0], [2.0, 1.0]], [[-1.0, 0.0], [0.0, 1.0]], [[[2.0, 0], [0, 2.0]], [[1.0, 0], [0, -1.0]]]]
)
def test_cholesky_of_a_matrix_that_is_not_positive_definite(data):
    _message(gc.linalg.cholesky, torch.linalg.cholesky, data)


def test_singular_determinants_and_bad_inputs():
    singular = [[1.0, 2.0], [2.0, 4.0]]
    assert gc.linalg.det(gc.tensor(singular)).item() == torch.linalg.det(torch.tensor(singular)).item() == 0.0
    sign, logabs = gc.linalg.slogdet(gc.tensor(singular))
    assert (sign.item(), logabs.item()) == (0.0, -np.inf)
    assert gc.logdet(gc.tensor([[-2.0, 0.0], [0.0, 1.0]])).isnan().item()
    for bad, torch_bad in ((gc.ones(2, 3), torch.ones(2, 3)), (gc.ones(3), torch.ones(3))):
        with pytest.raises(RuntimeError) as expected:
            torch.linalg.inv(torch_bad)
        with pytest.raises(RuntimeError) as got:
            gc.linalg.inv(bad)
        assert str(got.value) == str(expected.value)
    with pytest.raises(RuntimeError, match="Expected a floating point"):
        gc.linalg.det(gc.ones(2, 2, dtype=gc.int64))


def test_spellings_and_result_types():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 3))
    ga, ta = gc.tensor(a), torch.tensor(a)
    result = ga.slogdet()
    expected = torch.linalg.slogdet(ta)
    assert result._fields == ("sign", "logabsdet")
    np.testing.assert_allclose(result.logabsdet.numpy(), expected.logabsdet.numpy(), rtol=1e-12)
    np.testing.assert_allclose(gc.slogdet(ga).sign.numpy(), torch.slogdet(ta).sign.numpy())
    for ours, theirs in ((ga.inverse(), ta.inverse()), (gc.inverse(ga), torch.inverse(ta)), (ga.det(), ta.det())):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10)
    np.testing.assert_allclose(gc.det(ga).numpy(), torch.det(ta).numpy(), rtol=1e-10)
    np.testing.assert_allclose(ga.logdet().numpy(), ta.logdet().numpy(), rtol=1e-10)
