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
