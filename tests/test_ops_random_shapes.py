"""Random shapes (hypothesis): broadcasting binary ops, reductions over random axes, views and matmul."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from optable import OpInfo
from test_ops import check_op

SETTINGS = settings(max_examples=40, deadline=None)
dims = st.integers(min_value=1, max_value=4)
shapes = st.lists(dims, min_size=0, max_size=4).map(tuple)


@st.composite
def broadcastable_pair(draw):
    shape = draw(shapes)
    other = tuple(1 if draw(st.booleans()) else n for n in shape)
    drop = draw(st.integers(0, len(other)))
    return shape, other[drop:]


BINARY = {
    "add": lambda m, a, b: a + b,
    "mul": lambda m, a, b: a * b,
    "sub": lambda m, a, b: b - a,
    "maximum": lambda m, a, b: m.T.maximum(a, b),
    "where": lambda m, a, b: m.T.where(a > b, a, b * 2),
}


@SETTINGS
@given(
    pair=broadcastable_pair(),
    name=st.sampled_from(sorted(BINARY)),
    swap=st.booleans(),
    dtype=st.sampled_from(["float64", "float32"]),
)
def test_broadcasting_binary_ops(pair, name, swap, dtype):
    a, b = pair if not swap else pair[::-1]
    check_op(OpInfo(name, BINARY[name], []), (a, b), dtype)


@SETTINGS
@given(
    shape=st.lists(dims, min_size=1, max_size=4).map(tuple),
    data=st.data(),
    reduction=st.sampled_from(["sum", "mean", "amax", "var", "logsumexp"]),
    keepdim=st.booleans(),
)
def test_reductions_over_random_axes(shape, data, reduction, keepdim):
    axes = tuple(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1)))
    if reduction == "var" and np.prod([shape[a] for a in axes]) < 2:
        return
    fn = lambda m, x: getattr(x, reduction)(axes, keepdim=keepdim)  # noqa: E731
    check_op(OpInfo(reduction, fn, []), (shape,), "float64")


@SETTINGS
@given(shape=st.lists(dims, min_size=2, max_size=4).map(tuple), data=st.data())
def test_views_compose(shape, data):
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    start = data.draw(st.integers(0, shape[0] - 1))
    fn = lambda m, x: (x.permute(*perm)[..., None].flatten(-2) * 1.5)[..., :].reshape(-1)[start:]  # noqa: E731
    check_op(OpInfo("views", fn, []), (shape,), "float64")


@SETTINGS
@given(batch=st.lists(st.integers(1, 3), max_size=2).map(tuple), n=dims, k=dims, m=dims)
def test_batched_matmul(batch, n, k, m):
    check_op(OpInfo("matmul", lambda lib, a, b: a @ b, []), (batch + (n, k), (k, m)), "float64")
    check_op(OpInfo("bmm", lambda lib, a, b: a @ b, []), (batch + (n, k), batch + (k, m)), "float32")
