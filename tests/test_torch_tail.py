"""ParameterList/ParameterDict, meshgrid/bincount/nonzero/argwhere, scatter/scatter_add/index_add,
checked against PyTorch on CPU."""

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
