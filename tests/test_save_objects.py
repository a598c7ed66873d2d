"""torch.save / torch.load of whole modules and other picklable objects, with PyTorch >= 2.6's
weights_only semantics; containers of tensors stay safetensors files."""

import io
import pickle

import numpy as np
import pytest

import gradcraft as gc
import gradcraft.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 3))
        self.head = nn.Linear(3, 3, bias=False)
        self.tied = self.body[0]  # the same module twice
        self.register_buffer("scale", gc.tensor([2.0, 3.0, 4.0]))
        self.note = {"epochs": 3, "name": "net"}

    def forward(self, x):
        return self.head(self.body(x)) * self.scale


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y


def _roundtrip(obj, **load_args):
    buffer = io.BytesIO()
    gc.save(obj, buffer)
    buffer.seek(0)
    return gc.load(buffer, **load_args)


def test_whole_module_roundtrip(tmp_path):
    gc.manual_seed(0)
    net = Net()
    path = tmp_path / "net.pt"
    gc.save(net, path)
    with pytest.raises(pickle.UnpicklingError, match="weights_only=False"):
        gc.load(path)
    with pytest.raises(pickle.UnpicklingError, match="weights_only=False"):
        gc.load(path, weights_only=True)
    back = gc.load(path, weights_only=False)
    assert type(back) is Net and back.note == net.note
    x = gc.randn(4, 3)
    np.testing.assert_array_equal(back(x).numpy(), net(x).numpy())
    assert back.tied is back.body[0]
    assert isinstance(back.body[0].weight, nn.Parameter) and back.body[0].weight.requires_grad
    assert not back.scale.requires_grad
    assert list(back.state_dict()) == list(net.state_dict())
    loss = back(x).sum()
    loss.backward()
    assert back.body[0].weight.grad is not None


def test_tensors_shared_stay_shared_and_dtypes_kept():
    t = gc.tensor([1.0, 2.0], dtype=gc.bfloat16)
    obj = {"a": Point(t, t), "b": gc.arange(3)}
    back = _roundtrip(obj, weights_only=False)
    assert back["a"].x is back["a"].y and back["a"].x.dtype == gc.bfloat16
    assert back["b"].tolist() == [0, 1, 2] and back["b"].dtype == gc.int64


def test_containers_of_tensors_load_safely():
    state = {"w": gc.ones(2), "step": 3, "names": ["a", "b"], "dtype": gc.bfloat16}
    buffer = io.BytesIO()
    gc.save(state, buffer)
    assert not buffer.getvalue().startswith(b"GRADCRAFT-PICKLE")  # a safetensors file, as before
    buffer.seek(0)
    back = gc.load(buffer)
    assert back["step"] == 3 and back["w"].tolist() == [1.0, 1.0] and back["dtype"] is gc.bfloat16
    assert _roundtrip([Point(1, 2), gc.float16], weights_only=False)[1] is gc.float16


def test_safe_globals_allow_a_class():
    back_refused = io.BytesIO()
    gc.save([Point(1, 2)], back_refused)
    back_refused.seek(0)
    with pytest.raises(pickle.UnpicklingError, match="Point"):
        gc.load(back_refused)
    with gc.serialization.safe_globals([Point]):
        back_refused.seek(0)
        (p,) = gc.load(back_refused)
    assert (p.x, p.y) == (1, 2)
    gc.serialization.add_safe_globals([Point])
    try:
        assert Point in gc.serialization.get_safe_globals()
        assert _roundtrip(Point(3, 4)).y == 4
    finally:
        gc.serialization.clear_safe_globals()


def test_unpicklable_refused_with_one_line():
    with pytest.raises(gc.UserError, match="cannot store"):
        gc.save(lambda: 1, io.BytesIO())


def test_map_location():
    back = _roundtrip({"p": Point(gc.ones(2), 0)}, map_location="cpu", weights_only=False)
    assert back["p"].x.device == "cpu"


def test_onnx_export_refused():
    with pytest.raises(gc.UserError, match="ONNX export is not supported"):
        gc.onnx.export(nn.Linear(2, 2), gc.randn(1, 2), "model.onnx")


def test_torch_refuses_the_same_way():
    torch = pytest.importorskip("torch")
    buffer = io.BytesIO()
    torch.save(torch.nn.Linear(2, 2), buffer)
    buffer.seek(0)
    with pytest.raises(pickle.UnpicklingError, match="weights_only"):
        torch.load(buffer)
