"""ParameterList/ParameterDict, meshgrid/bincount/nonzero/argwhere, scatter/scatter_add/index_add,
checked against PyTorch on CPU."""

import warnings

import numpy as np
import pytest

import gradcraft as gc
from gradcraft import nn

torch = pytest.importorskip("torch")


def test_parameter_list_registration_and_repr():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.ps = nn.ParameterList([nn.Parameter(gc.zeros(2, 3)), gc.ones(4)])

    class T(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ps = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(2, 3)), torch.ones(4)])

    m, t = M(), T()
    assert list(m.state_dict()) == list(t.state_dict()) == ["ps.0", "ps.1"]
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in t.named_parameters()]
    m.ps.append(gc.zeros(5))
    t.ps.append(torch.zeros(5))
    assert len(m.ps) == len(t.ps) == 3
    assert isinstance(m.ps[-1], nn.Parameter) and m.ps[-1].requires_grad
    assert [p.shape for p in m.ps] == [tuple(p.shape) for p in t.ps]
    assert list(m.state_dict()) == list(t.state_dict())
    assert repr(m.ps) == repr(t.ps)
    assert repr(nn.ParameterList()) == repr(torch.nn.ParameterList())
    m.ps[0] = gc.full((1,), 3.0)
    assert m.ps[0].numpy().tolist() == [3.0] and m.state_dict()["ps.0"].shape == (1,)
    with pytest.raises(IndexError):
        m.ps[3]


def test_parameter_dict_registration_and_repr():
    m = nn.ParameterDict({"a": nn.Parameter(gc.zeros(2)), "b": gc.zeros(2, 3)})
    t = torch.nn.ParameterDict({"a": torch.nn.Parameter(torch.zeros(2)), "b": torch.zeros(2, 3)})
    assert list(m.state_dict()) == list(t.state_dict()) == ["a", "b"]
    assert repr(m) == repr(t)
    m["c"] = gc.ones(1)
    t["c"] = torch.ones(1)
    assert list(m.keys()) == list(t.keys()) and len(m) == len(t) == 3 and "c" in m
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in t.named_parameters()]
    m.pop("a")
    t.pop("a")
    assert list(m) == list(t) and list(m.state_dict()) == list(t.state_dict())
    with pytest.raises(KeyError):
        m["a"]
    loss = (m["b"].sum() + m["c"].sum() * 2).backward()
    assert loss is None and m["c"].grad.numpy().tolist() == [2.0]


def _both(array, requires_grad=False):
    return gc.tensor(array, requires_grad=requires_grad), torch.tensor(array, requires_grad=requires_grad)


@pytest.mark.parametrize("indexing", [None, "ij", "xy"])
def test_meshgrid_values_and_gradients(indexing):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(n) for n in (3, 2, 4)]
    ours = [gc.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    kw = {} if indexing is None else {"indexing": indexing}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got, want = gc.meshgrid(*ours, **kw), torch.meshgrid(*theirs, **kw)
    weights = rng.standard_normal(tuple(want[0].shape))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.detach().numpy())
    sum((g * gc.tensor(weights) * (i + 1)).sum() for i, g in enumerate(got)).backward()
    sum((w * torch.tensor(weights) * (i + 1)).sum() for i, w in enumerate(want)).backward()
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=1e-12)
    two = gc.meshgrid([gc.arange(2.0), gc.tensor(5.0)], indexing="xy")
    want2 = torch.meshgrid([torch.arange(2.0), torch.tensor(5.0)], indexing="xy")
    assert [tuple(t.shape) for t in two] == [tuple(t.shape) for t in want2]
    with pytest.raises(RuntimeError):
        gc.meshgrid(gc.zeros(2), indexing="yx")
    with pytest.raises(RuntimeError):
        gc.meshgrid(gc.zeros(2), gc.arange(2), indexing="ij")


def test_nonzero_argwhere_bincount():
    array = np.array([[0, 1.5, 0], [2, 0, -1]])
    ours, theirs = _both(array)
    np.testing.assert_array_equal(gc.nonzero(ours).numpy(), torch.nonzero(theirs).numpy())
    np.testing.assert_array_equal(ours.nonzero().numpy(), theirs.nonzero().numpy())
    assert ours.nonzero().dtype == gc.int64
    for g, w in zip(ours.nonzero(as_tuple=True), theirs.nonzero(as_tuple=True)):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
    np.testing.assert_array_equal(gc.argwhere(ours).numpy(), torch.argwhere(theirs).numpy())
    assert tuple(gc.nonzero(gc.zeros(2, 3)).shape) == tuple(torch.nonzero(torch.zeros(2, 3)).shape)
    for x in (3.0, 0.0):
        assert tuple(gc.tensor(x).nonzero().shape) == tuple(torch.tensor(x).nonzero().shape)
    assert len(gc.tensor(3.0).nonzero(as_tuple=True)) == len(torch.tensor(3.0).nonzero(as_tuple=True))
    values = np.array([1, 4, 4, 0, 1, 4])
    v, tv = _both(values)
    for kw in ({}, {"minlength": 8}):
        got, want = gc.bincount(v, **kw), torch.bincount(tv, **kw)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        assert str(got.dtype) == str(want.dtype)
    for weights in (np.linspace(0, 1, 6).astype(np.float32), np.arange(6)):
        w, tw = _both(weights)
        got, want = v.bincount(w), tv.bincount(tw)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
        assert str(got.dtype) == str(want.dtype)
    assert gc.bincount(gc.tensor([], dtype=gc.int64)).shape == (0,)
    with pytest.raises(RuntimeError):
        gc.bincount(gc.tensor([1, -1]))
    with pytest.raises(RuntimeError):
        gc.bincount(gc.tensor([1.0]))


def _grads(fn, arrays, weights):
    """Run fn on our tensors and torch's, return both results and the inputs' gradients of sum(out * weights)."""
    ours = [gc.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    theirs = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    got, want = fn(gc, ours), fn(torch, theirs)
    (got * gc.tensor(weights)).sum().backward()
    (want * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12)
    for o, t in zip(ours, theirs):
        if t.grad is None:
            assert o.grad is None or not o.grad.numpy().any()
        else:
            np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_add_and_scatter_against_pytorch(dim):
    rng = np.random.default_rng(1)
    x, src = rng.standard_normal((3, 5)), rng.standard_normal((2, 4))
    index = rng.integers(0, 3 if dim == 0 else 5, size=(2, 4))  # repeats: scatter_add sums them
    weights = rng.standard_normal((3, 5))
    big = rng.standard_normal((4, 6))  # src larger than index: only index's extent is read
    np.testing.assert_allclose(
        gc.tensor(x).scatter_add(dim, gc.tensor(index), gc.tensor(big)).numpy(),
        torch.tensor(x).scatter_add(dim, torch.tensor(index), torch.tensor(big)).numpy(),
    )
    _grads(lambda m, t: m.scatter_add(t[0], dim, t[2], t[1]), [x, src, index], weights)
    _grads(lambda m, t: t[0].scatter_add(dim, t[2], t[1]) * 2, [x, src, index], weights)
    # scatter with distinct positions per line (PyTorch leaves repeated positions undefined)
    if dim == 0:
        perm = np.stack([rng.permutation(3)[:2] for _ in range(4)], axis=1)
    else:
        perm = np.stack([rng.permutation(5)[:4] for _ in range(2)])
    _grads(lambda m, t: m.scatter(t[0], dim, t[2], t[1]), [x, src, perm], weights)
    _grads(lambda m, t: t[0].scatter(dim, t[2], 2.5), [x, src, perm], weights)
    with warnings.catch_warnings():  # PyTorch: reduce= is deprecated (and has no gradient there)
        warnings.simplefilter("ignore")
        want = torch.tensor(x).scatter(dim, torch.tensor(index), torch.tensor(src), reduce="add")
    got = gc.tensor(x).scatter(dim, gc.tensor(index), gc.tensor(src), reduce="add")
    np.testing.assert_allclose(got.numpy(), want.numpy())


def test_scatter_gradients_with_repeated_positions():
    x, src = np.zeros((2, 3)), np.arange(6.0).reshape(2, 3)
    index = np.array([[0, 0, 2], [1, 1, 1]])
    ours = [gc.tensor(a, requires_grad=True) for a in (x, src)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (x, src)]
    w = np.arange(1.0, 7.0).reshape(2, 3)
    (ours[0].scatter(1, gc.tensor(index), ours[1]) * gc.tensor(w)).sum().backward()
    (theirs[0].scatter(1, torch.tensor(index), theirs[1]) * torch.tensor(w)).sum().backward()
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy())


@pytest.mark.parametrize("alpha", [1, -2.5])
def test_index_add_against_pytorch(alpha):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 3, 2))
    weights = rng.standard_normal((4, 3, 2))
    for dim, n in ((0, 4), (1, 3), (-1, 2)):
        index = rng.integers(0, n, size=5)
        source_shape = list(x.shape)
        source_shape[dim] = 5
        source = rng.standard_normal(source_shape)
        _grads(lambda m, t: m.index_add(t[0], dim, t[2], t[1], alpha=alpha), [x, source, index], weights)
        _grads(lambda m, t: t[0].index_add(dim, t[2], t[1], alpha=alpha), [x, source, index], weights)
    with pytest.raises(RuntimeError):
        gc.zeros(3).index_add(0, gc.tensor([0]), gc.ones(1, dtype=gc.float64))


def test_in_place_scatter_forms_against_pytorch():
    rng = np.random.default_rng(3)
    x, src = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    index = np.array([[2, 0, 1, 2]])
    w = rng.standard_normal((3, 4))

    def run(m, t):
        y = t[0] * 1.0
        y.scatter_add_(0, t[2], t[1][:1])
        y.index_add_(1, m.tensor([3, 0]), t[1][:, :2], alpha=0.5)
        y.scatter_(0, t[2], t[1][1:2] * 3)
        return y.scatter_(1, t[2][:, :2], -1.0)

    _grads(run, [x, src, index], w)
    y = gc.tensor(x)
    assert y.scatter_add_(0, gc.tensor(index), gc.tensor(src)) is y
    np.testing.assert_allclose(
        y.numpy(), torch.tensor(x).scatter_add_(0, torch.tensor(index), torch.tensor(src)).numpy()
    )
    leaf = gc.tensor(x, requires_grad=True)
    with pytest.raises(RuntimeError):
        leaf.scatter_(0, gc.tensor(index), gc.tensor(src))
    with pytest.raises(RuntimeError):
        gc.zeros(3, 4).scatter_add(0, gc.tensor(index, dtype=gc.int32), gc.ones(3, 4))
