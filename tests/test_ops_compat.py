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
