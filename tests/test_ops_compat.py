"""The op table's compatibility rows (tests/optable_compat.py), forward and backward, against PyTorch."""

import pytest
from optable_compat import COMPAT_OPS
from test_ops import check_op

CASES = [pytest.param(op, i, id=f"{op.name}-{i}") for op in COMPAT_OPS for i in range(len(op.samples))]


@pytest.mark.parametrize("dtype_name", ["float64", "float32"])
@pytest.mark.parametrize("op,sample_index", CASES)
def test_op_matches_torch(op, sample_index, dtype_name):
    check_op(op, op.samples[sample_index], dtype_name)


@pytest.mark.parametrize("op,sample_index", [c for c in CASES if c.values[0].noncontiguous])
def test_op_matches_torch_noncontiguous(op, sample_index):
    check_op(op, op.samples[sample_index], "float64", noncontiguous=True, seed=1)


def test_integer_powers_with_negative_exponents_match_torch():
    """NumPy refuses integers to negative integer powers; PyTorch gives 1 / a^|b| truncated (1, +-1
    or 0), with a tensor exponent or a scalar base."""
    import torch

    import gradcraft as gc

    base, exp = [2, -3, 1, -1, -1, 0, 5, 7], [-2, -1, -3, -3, -4, -1, 2, 0]
    assert (gc.tensor(base) ** gc.tensor(exp)).tolist() == (torch.tensor(base) ** torch.tensor(exp)).tolist()
    assert (2 ** gc.tensor([1, -2, 3])).tolist() == (2 ** torch.tensor([1, -2, 3])).tolist()
