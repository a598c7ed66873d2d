"""Tensors on the same memory share its version counter and its lazy readers (engine/lazy.py).

Each scenario is written once for both libraries (`m` is torch or gradcraft): it makes an alias of a
tensor's memory (detach, .data, a realized view, a Parameter made from a tensor, `.data = ...`),
builds lazy ops from one alias, writes in place through another (directly, under no_grad, or by an
optimizer step), and returns the tensors whose values are compared with PyTorch's. A lazy op that
read the old contents through any alias must compute what PyTorch's eager op computed.
"""

import numpy as np
import pytest

import gradcraft as gc

torch = pytest.importorskip("torch")

W = np.array([1.0, -2.0, 3.0, 0.5], dtype=np.float32)


def _values(m, ts):
    return [t.detach().numpy() if m is torch else t.numpy() for t in ts]


def _param(m):
    return m.nn.Parameter(m.tensor(W.copy()))


def _detach_clone_then_sub(m):
    w = _param(m)
    old = w.detach().clone()
    with m.no_grad():
        w.sub_(1.0)
    return old, w


def _detach_product_then_sub(m):
    w = _param(m)
    old = w.detach() * 1
    with m.no_grad():
        w.sub_(1.0)
    return old, w


def _data_product_then_mul(m):
    w = _param(m)
    old = w.data * 2
    with m.no_grad():
        w.mul_(3.0)
    return old, w


def _write_through_detached_alias(m):
    w = _param(m)
    twice = w * 2  # (requires grad: a lazy reader of w itself)
    d = w.detach()
    d.add_(1.0)  # the same memory: w sees the write, and twice keeps the old value
    return twice, w, d


def _write_through_data_alias(m):
    x = m.tensor(W.copy())
    y = x + 1
    x.data.mul_(2.0)
    return y, x


def _realized_slice_written(m):
    x = m.tensor(W.copy())
    if m is gc:
        x.realize()
    v = x[1:3]
    if m is gc:
        v.realize()  # a view of x's buffer
    y = x * 1
    v.add_(10.0)
    return y, x, v


def _realized_reshape_written(m):
    x = m.tensor(W.copy())
    if m is gc:
        x.realize()
    v = x.reshape(2, 2)
    if m is gc:
        v.realize()
    y = x.sum()
    x.mul_(3.0)  # written through the base: the view sees it
    return y, v, x


def _realized_transpose_reader(m):
    x = m.tensor(W.reshape(2, 2).copy())
    if m is gc:
        x.realize()
    v = x.t()
    if m is gc:
        v.realize()
    z = v @ m.ones(2, 2)  # reads the view's old contents
    x.zero_()
    return z, v


def _parameter_of_a_tensor(m):
    t = m.tensor(W.copy())
    if m is gc:
        t.realize()
    s = t * 1
    p = m.nn.Parameter(t)  # the same memory
    with m.no_grad():
        p.add_(5.0)
    return s, t, p


def _data_setter_shares_memory(m):
    x = m.zeros(4)
    y = m.tensor(W.copy())
    x.data = y
    r = x * 1
    y.add_(1.0)
    return r, x, y


def _sgd_step(m, **kwargs):
    w = _param(m)
    old = w.detach().clone()
    view = w.detach()[:2] * 1
    w.grad = m.tensor(np.array([0.5, 1.0, -1.0, 2.0], dtype=np.float32))
    opt = m.optim.SGD([w], lr=0.1, **kwargs)
    opt.step()
    opt.step()
    return old, view, w


def _adamw_step(m, **kwargs):
    w = _param(m)
    old = w.detach().clone()
    prod = w.data * w.data
    w.grad = m.tensor(np.array([0.5, 1.0, -1.0, 2.0], dtype=np.float32))
    opt = m.optim.AdamW([w], lr=0.1, **kwargs)
    opt.step()
    return old, prod, w


SCENARIOS = {
    "detach_clone_then_sub": _detach_clone_then_sub,
    "detach_product_then_sub": _detach_product_then_sub,
    "data_product_then_mul": _data_product_then_mul,
    "write_through_detached_alias": _write_through_detached_alias,
    "write_through_data_alias": _write_through_data_alias,
    "realized_slice_written": _realized_slice_written,
    "realized_reshape_written": _realized_reshape_written,
    "realized_transpose_reader": _realized_transpose_reader,
    "parameter_of_a_tensor": _parameter_of_a_tensor,
    "data_setter_shares_memory": _data_setter_shares_memory,
    "sgd": _sgd_step,
    "sgd_momentum": lambda m: _sgd_step(m, momentum=0.9, weight_decay=0.01),
    "adamw_fused": lambda m: _adamw_step(m),
    "adamw_unfused": lambda m: _adamw_step(m, fused=False),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_aliases_share_version_and_readers(name):
    expected = _values(torch, SCENARIOS[name](torch))
    got = _values(gc, SCENARIOS[name](gc))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6)


def test_aliases_share_the_version_counter():
    x = gc.ones(3).realize()
    d, v = x.detach(), x[:2].realize()
    before = x._version
    with gc.no_grad():
        x.add_(1.0)
    assert x._version == d._version == v._version == before + 1
    d.mul_(2.0)
    assert x._version == v._version == before + 2
    np.testing.assert_array_equal(x.numpy(), [4.0, 4.0, 4.0])


def _saved_alias_scenario(m, write):
    x = m.tensor(W.copy(), requires_grad=True)
    y = x.detach()
    y.requires_grad_()
    z = (y * y).sum()
    with m.no_grad():
        write(x)
    z.backward()
    return y.grad


@pytest.mark.parametrize(
    "write",
    [lambda x: x.add_(1.0), lambda x: x.detach().mul_(2.0), lambda x: x[1:].zero_()],
    ids=["add_", "detach_mul_", "view_zero_"],
)
def test_saved_alias_modified_in_place_raises_like_pytorch(write):
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _saved_alias_scenario(torch, write)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _saved_alias_scenario(gc, write)


def test_optimizer_step_after_product_with_detached_weight_raises_like_pytorch():
    """A product saved a detached alias of a weight for another operand's gradient; the optimizer
    then wrote the weight: backward refuses in both libraries."""

    def run(m):
        w = _param(m)
        a = m.tensor(W.copy(), requires_grad=True)
        loss = (a * w.detach()).sum()
        w.grad = m.ones(4)
        m.optim.SGD([w], lr=0.1).step()
        loss.backward()

    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run(torch)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run(gc)
