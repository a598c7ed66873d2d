"""Ties and repeated indices, forward and gradient, against PyTorch.

The op table (tests/optable.py) draws random normals, which never tie, and index rows whose indices
rarely repeat. Here every input is drawn so that they do: values from a handful of small integers
(exact in float32 and float64, so ties are real ties), and indices from a range much smaller than
their count. A reduction that sends a tied extreme's gradient to one element, or a backward that
drops a repeated index's second contribution, fails here.

PyTorch's rules, which these tests hold gradcraft to: amax/amin and the full max()/min() share the
gradient evenly among tied extremes; max(dim)/min(dim) give it all to the index they return (the
first); maximum/minimum split it in half on a tie; a repeated index accumulates its contributions.
"""

import numpy as np
import pytest
import torch

import gradcraft as gc

DTYPES = {"float64": (gc.float64, np.float64), "float32": (gc.float32, np.float32)}


class F:
    """A differentiable float input given by its values."""

    def __init__(self, values):
        self.values = np.asarray(values, dtype=np.float64)


class Idx:
    """A constant int64 input."""

    def __init__(self, values):
        self.values = np.asarray(values, dtype=np.int64)


def tied(shape, levels=3, seed=0):
    """Values from {0, .., levels-1} (times 0.5, minus 0.5): many ties along every axis."""
    rng = np.random.default_rng(seed)
    return F(rng.integers(0, levels, size=shape) * 0.5 - 0.5)


def repeated(high, shape, seed=1):
    """Indices in [0, high) with shape far larger than high along the last axis: each repeats."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, high, size=shape)
    idx.reshape(-1, shape[-1])[:, :2] = 0  # every row repeats index 0 at least once
    return Idx(idx)


def check(fn, inputs, dtype_name, outputs=lambda out: out, grad=True):
    """fn(lib, *args) on the same inputs in both libraries; the forward (indices exactly: ties must
    resolve the same way), then the gradient of every float input under a random upstream gradient."""
    _, np_dtype = DTYPES[dtype_name]
    g_args, t_args, pairs = [], [], []
    for spec in inputs:
        if isinstance(spec, Idx):
            g_args.append(gc.tensor(spec.values))
            t_args.append(torch.tensor(spec.values))
        else:
            data = spec.values.astype(np_dtype)
            g, t = gc.tensor(data, requires_grad=grad), torch.tensor(data, requires_grad=grad)
            g_args.append(g)
            t_args.append(t)
            pairs.append((g, t))
    g_out = outputs(fn(gc, *g_args))
    t_out = outputs(fn(torch, *t_args))
    g_out, t_out = (g_out if isinstance(g_out, tuple) else (g_out,)), (t_out if isinstance(t_out, tuple) else (t_out,))
    tol = 1e-12 if dtype_name == "float64" else 1e-5
    for g, t in zip(g_out, t_out):
        np.testing.assert_allclose(g.numpy(), t.detach().numpy(), rtol=tol, atol=tol, err_msg="forward")
        assert g.numpy().dtype == t.detach().numpy().dtype
    if not grad:
        return
    rng = np.random.default_rng(7)
    g_loss, t_loss = 0, 0
    for g, t in zip(g_out, t_out):
        if not t.dtype.is_floating_point:
            continue
        up = rng.standard_normal(tuple(t.shape)).astype(np_dtype)
        g_loss = g_loss + (g * gc.tensor(up)).sum()
        t_loss = t_loss + (t * torch.tensor(up)).sum()
    g_loss.backward()
    t_loss.backward()
    for k, (g, t) in enumerate(pairs):
        expected = t.grad.numpy() if t.grad is not None else np.zeros(tuple(t.shape), np_dtype)
        assert g.grad is not None, f"no gradient for input {k}"
        np.testing.assert_allclose(g.grad.numpy(), expected, rtol=tol, atol=tol, err_msg=f"gradient of input {k}")


def test_a_tied_amax_shares_its_gradient_evenly():
    """The issue's example: [[1, 3, 3]] gives [0, .5, .5]."""
    x = gc.tensor([[1.0, 3.0, 3.0]], requires_grad=True)
    x.amax(1).sum().backward()
    assert x.grad.tolist() == [[0.0, 0.5, 0.5]]
    y = gc.tensor([[1.0, 3.0, 3.0]], requires_grad=True)
    y.max(1).values.sum().backward()
    assert y.grad.tolist() == [[0.0, 1.0, 0.0]]  # max(dim): all to the index it returns


REDUCTIONS = {
    "amax_dim": lambda m, x: x.amax(1),
    "amax_dims_keepdim": lambda m, x: x.amax((0, 2), keepdim=True),
    "amin_last": lambda m, x: x.amin(-1),
    "amax_all": lambda m, x: x.amax(),
    "max_all": lambda m, x: x.max(),
    "min_all": lambda m, x: x.min(),
    "max_dim": lambda m, x: x.max(1),
    "max_dim_keepdim": lambda m, x: x.max(-1, keepdim=True),
    "min_dim": lambda m, x: x.min(0),
    "argmax_dim": lambda m, x: x.argmax(1),
    "argmin_dim": lambda m, x: x.argmin(-1, keepdim=True),
    "argmax_all": lambda m, x: x.argmax(),
    "argmin_all": lambda m, x: x.argmin(),
    "norm_inf": lambda m, x: x.norm(p=float("inf"), dim=-1),
    "logsumexp": lambda m, x: x.logsumexp(1),
    "softmax": lambda m, x: m.nn.functional.softmax(x * 3, dim=-1),
}


@pytest.mark.parametrize("dtype_name", ["float64", "float32"])
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reductions_with_ties_match_torch(name, dtype_name):
    fn = REDUCTIONS[name]
    if name.startswith("arg"):
        check(fn, [tied((3, 5, 4))], dtype_name, grad=False)
        return
    outputs = (lambda r: (r.values, r.indices)) if name.startswith(("max_dim", "min_dim")) else (lambda r: r)
    check(fn, [tied((3, 5, 4))], dtype_name, outputs)
    check(fn, [tied((3, 5, 4), levels=2, seed=3)], dtype_name, outputs)


def test_an_all_equal_row_shares_evenly_in_both_libraries():
    for dtype_name in DTYPES:
        check(lambda m, x: x.amax(-1) + x.amin(-1) * 2, [F(np.full((2, 5), 1.5))], dtype_name)
        check(lambda m, x: x.max() - x.min(), [F(np.full((2, 3), -0.5))], dtype_name)


ELEMENTWISE = {
    "maximum": lambda m, a, b: m.maximum(a, b),
    "minimum": lambda m, a, b: m.minimum(a, b),
    "max_binary": lambda m, a, b: m.max(a, b),
    "clamp_at_bounds": lambda m, a, b: a.clamp(-0.5, 0.5) + b.clamp(min=0.0),
    "clamp_tensor_bounds": lambda m, a, b: m.clamp(a, min=b, max=b + 0.5),
    "relu_abs_at_zero": lambda m, a, b: m.relu(a) + a.abs() * 2 + m.nn.functional.leaky_relu(b, 0.1),
    "where_equal": lambda m, a, b: m.where(a >= b, a, b),
    "clamp_equal_bounds": lambda m, a, b: m.clamp(a, min=b, max=b),
    "clamp_inverted_bounds": lambda m, a, b: m.clamp(a, min=b + 0.5, max=b),
}


@pytest.mark.parametrize("dtype_name", ["float64", "float32"])
@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise_ties_and_kinks_match_torch(name, dtype_name):
    check(ELEMENTWISE[name], [tied((4, 5), seed=4), tied((4, 5), seed=5)], dtype_name)
    check(ELEMENTWISE[name], [tied((2, 3, 4), seed=6), tied((3, 1), seed=7)], dtype_name)  # broadcast ties


SORTS = {
    "sort": lambda m, x: m.sort(x, dim=-1, stable=True),
    "sort_descending": lambda m, x: m.sort(x, dim=1, descending=True, stable=True),
    "sort_dim0": lambda m, x: m.sort(x, dim=0, stable=True),
    "argsort": lambda m, x: m.argsort(x, dim=-1, stable=True),
}


@pytest.mark.parametrize("dtype_name", ["float64", "float32"])
@pytest.mark.parametrize("name", list(SORTS))
def test_stable_sort_with_ties_matches_torch(name, dtype_name):
    """Stable: equal elements keep their order, so indices (and where the gradient goes) are defined."""
    outputs = (lambda r: r) if name == "argsort" else (lambda r: (r.values, r.indices))
    check(SORTS[name], [tied((3, 4, 6))], dtype_name, outputs, grad=name != "argsort")


@pytest.mark.parametrize("dtype_name", ["float64", "float32"])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_with_ties_matches_torch(largest, dtype_name):
    """topk's choice among tied elements is not specified by PyTorch (gradcraft takes the first); its
    values are, and each value's gradient goes to one element equal to it, each element at most once:
    the gradient summed over each group of equal elements matches PyTorch's."""
    _, np_dtype = DTYPES[dtype_name]
    x = tied((4, 7), seed=8).values.astype(np_dtype)
    up = np.random.default_rng(2).standard_normal((4, 3)).astype(np_dtype)
    grads = []
    for lib in (gc, torch):
        t = lib.tensor(x, requires_grad=True)
        r = t.topk(3, dim=-1, largest=largest)
        (r.values * lib.tensor(up)).sum().backward()
        values, indices = r.values.detach().numpy(), r.indices.numpy()
        np.testing.assert_array_equal(np.take_along_axis(x, indices, -1), values)  # indices point at the values
        assert all(len(set(row)) == 3 for row in indices)  # distinct, even among ties
        grads.append((values, t.grad.numpy()))
    (gv, gg), (tv, tg) = grads
    np.testing.assert_array_equal(gv, tv)
    for row in range(4):
        for level in np.unique(x[row]):
            same = x[row] == level
            np.testing.assert_allclose(gg[row][same].sum(), tg[row][same].sum(), rtol=1e-6, atol=1e-6)
            assert np.count_nonzero(gg[row][same]) == np.count_nonzero(tg[row][same])


INDEXING = {
    "gather": (lambda m, x, i: x.gather(1, i), lambda: [tied((3, 4)), repeated(4, (3, 9))]),
    "gather_dim0": (lambda m, x, i: x.gather(0, i), lambda: [tied((3, 4)), Idx(repeated(3, (4, 8)).values.T.copy())]),
    "take_along_dim": (
        lambda m, x, i: m.take_along_dim(x, i, dim=-1),
        lambda: [tied((2, 3, 4)), repeated(4, (2, 3, 7))],
    ),
    "index_select": (lambda m, x, i: x.index_select(0, i), lambda: [tied((4, 3)), repeated(4, (9,))]),
    "index_select_dim1": (lambda m, x, i: x.index_select(1, i) * 2.0, lambda: [tied((2, 5)), repeated(3, (7,))]),
    "getitem_list": (lambda m, x, i: x[i] * 1.0, lambda: [tied((4, 3)), repeated(3, (2, 6))]),
    "getitem_pairs": (lambda m, x, i: x[i, i] * 1.0, lambda: [tied((4, 4)), repeated(4, (8,))]),
    "getitem_inner": (lambda m, x, i: x[:, i] * 1.0, lambda: [tied((3, 4, 2)), repeated(2, (6,))]),
    "embedding": (lambda m, i, w: m.nn.functional.embedding(i, w), lambda: [repeated(3, (2, 8)), tied((5, 4))]),
    "cross_entropy_repeated_targets": (
        lambda m, x, t: m.nn.functional.cross_entropy(x, t, reduction="sum"),
        lambda: [tied((9, 4)), repeated(2, (9,))],
    ),
}


def _as_gc_args(specs):
    return [(s if isinstance(s, (F, Idx)) else Idx(s)) for s in specs]


@pytest.mark.parametrize("dtype_name", ["float64", "float32"])
@pytest.mark.parametrize("name", list(INDEXING))
def test_repeated_indices_accumulate_their_gradients(name, dtype_name):
    fn, inputs = INDEXING[name]
    check(fn, _as_gc_args(inputs()), dtype_name)


def _setitem(m, x, v, i):
    y = x * 1.0
    y[i] = v  # the same value to every repeat: the forward is defined
    return y


def _setitem_add(m, x, v, i):
    y = x * 1.0
    y[i] += v  # y[i] = y[i] + v: repeats do not accumulate in the forward (PyTorch's and NumPy's rule)
    return y * y


def _setitem_then_read(m, x, i):
    y = x * 2.0
    y[i] = x[i] * 3.0
    return y.sum(0) + x[i].sum()


@pytest.mark.parametrize("dtype_name", ["float64", "float32"])
def test_setitem_with_repeated_indices_matches_torch(dtype_name):
    i = repeated(3, (7,))
    check(_setitem, [tied((4, 3)), tied((3,), seed=9), i], dtype_name)
    check(_setitem, [tied((5, 2)), tied((1, 2), seed=9), i], dtype_name)
    check(_setitem_add, [tied((4, 3)), F(np.full((3,), 0.5)), i], dtype_name)
    check(_setitem_then_read, [tied((4, 3)), i], dtype_name)


@pytest.mark.parametrize("dtype_name", ["float64", "float32"])
def test_one_hot_and_masked_scatter_of_repeats(dtype_name):
    i = repeated(4, (3, 6))
    check(lambda m, t: m.nn.functional.one_hot(t, 5), [i], dtype_name, grad=False)
    check(lambda m, x, t: m.nn.functional.one_hot(t, 4).to(x.dtype) @ x, [tied((4, 2)), i], dtype_name)


def test_the_gradient_of_a_tied_reduction_in_a_model_like_graph():
    """amax's tie sharing must survive being composed (a stabilised log-softmax by hand)."""
    for dtype_name in DTYPES:
        check(
            lambda m, x: (x - x.amax(-1, keepdim=True)).exp().sum(-1).log() + x.amax(-1),
            [tied((4, 6), levels=2)],
            dtype_name,
        )
