"""In-place operations with PyTorch's semantics (gradcraft/ops/inplace.py), the errors where PyTorch
refuses them, iteration over tensors, and the second-backward message, each against torch."""

import numpy as np
import pytest
import torch

import gradcraft as gc
from gradcraft.errors import UserError


def both(data, **kw):
    data = np.asarray(data)
    return gc.tensor(data, **kw), torch.tensor(data, **kw)


def same(a, b, tol=1e-6):
    np.testing.assert_allclose(
        a.numpy() if isinstance(a, gc.Tensor) else a,
        b.detach().numpy() if isinstance(b, torch.Tensor) else b,
        rtol=tol,
        atol=tol,
    )


# ------------------------------------------------------------------ writes into buffers (nothing recorded)


def test_manual_sgd_updates_the_parameter_object():
    rng = np.random.default_rng(0)
    w0, x0 = rng.standard_normal((3, 2)), rng.standard_normal((4, 3))
    results = []
    for lib in (gc, torch):
        w = lib.tensor(w0, requires_grad=True)
        x = lib.tensor(x0)
        same_object = w
        for _ in range(3):
            loss = ((x @ w) ** 2).mean()
            loss.backward()
            with lib.no_grad():
                w -= 0.1 * w.grad
                w.grad.zero_()
        assert w is same_object and w.is_leaf and w.requires_grad
        results.append(w.detach().numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-12)


@pytest.mark.parametrize(
    "name,args",
    [
        ("add_", (2.0,)),
        ("sub_", (0.5,)),
        ("mul_", (3.0,)),
        ("div_", (4.0,)),
        ("zero_", ()),
        ("fill_", (7.0,)),
        ("clamp_", (-0.2, 0.3)),
        ("pow_", (2,)),
        ("neg_", ()),
        ("relu_", ()),
    ],
)
def test_underscore_methods_match_torch(name, args):
    data = np.random.default_rng(1).standard_normal((3, 4))
    g, t = both(data)
    out_g, out_t = getattr(g, name)(*args), getattr(t, name)(*args)
    assert out_g is g and out_t is t
    same(g, t)


def test_tensor_arguments_alpha_masked_fill_copy_lerp_addcmul():
    rng = np.random.default_rng(2)
    a, b, m = rng.standard_normal((3, 4)), rng.standard_normal((4,)), rng.random((3, 4)) < 0.5
    for op in (
        lambda lib, x, y, mask: x.add_(y, alpha=-2),
        lambda lib, x, y, mask: x.masked_fill_(mask, 9.0),
        lambda lib, x, y, mask: x.copy_(y.expand(3, 4)),
        lambda lib, x, y, mask: x.lerp_(y, 0.25),
        lambda lib, x, y, mask: x.addcmul_(y, y, value=0.5).addcdiv_(y, y.abs() + 1, value=-1),
    ):
        g, t = both(a)
        op(gc, g, gc.tensor(b), gc.tensor(m))
        op(torch, t, torch.tensor(b), torch.tensor(m))
        same(g, t)


def test_copy_converts_dtype_and_accepts_arrays():
    g, t = both(np.zeros((2, 3), dtype=np.float32))
    g.copy_(gc.arange(6).reshape(2, 3))
    t.copy_(torch.arange(6).reshape(2, 3))
    same(g, t)
    g.copy_(np.ones((2, 3)))
    assert g.dtype == gc.float32 and g.numpy().sum() == 6


@pytest.mark.parametrize(
    "index",
    [
        0,
        -1,
        (1, 2),
        (slice(None), 1),
        (slice(1, 3), slice(None, None, 2)),
        (Ellipsis, 0),
        (0, None),
        [2, 0],
        (slice(None), [1, 3]),
        ([0, 2], [1, 3]),
    ],
)
def test_setitem_matches_torch(index):
    data = np.arange(20, dtype=np.float64).reshape(4, 5)
    g, t = both(data)
    shape = tuple(t[index].shape)
    value = np.random.default_rng(3).standard_normal(shape)
    g[index] = gc.tensor(value)
    t[index] = torch.tensor(value)
    same(g, t)
    g[index] = 5.5
    t[index] = 5.5
    same(g, t)


def test_setitem_with_index_tensors_and_masks():
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    g, t = both(data)
    g[gc.tensor([2, 0])] = gc.tensor([1.0, 2.0, 3.0, 4.0])
    t[torch.tensor([2, 0])] = torch.tensor([1.0, 2.0, 3.0, 4.0])
    same(g, t)
    g[g > 5] = 0.0
    t[t > 5] = 0.0
    same(g, t)
    mask = np.array([True, False, True])
    g[gc.tensor(mask)] = gc.tensor([[1.0, 2, 3, 4], [5, 6, 7, 8]])
    t[torch.tensor(mask)] = torch.tensor([[1.0, 2, 3, 4], [5, 6, 7, 8]])
    same(g, t)
    g[gc.tensor(data > 3)] = gc.arange(8).float()
    t[torch.tensor(data > 3)] = torch.arange(8).float()
    same(g, t)


def test_views_write_into_their_base():
    g, t = both(np.zeros((3, 4), dtype=np.float32))
    for lib, x in ((gc, g), (torch, t)):
        x[0].fill_(1.0)
        x[1][2] = 5.0
        x.T[3].add_(2.0)
        x.view(12)[5] = -1.0
        x.data.mul_(2.0)
    same(g, t)


def test_lazy_readers_keep_the_old_values_and_views_see_the_new():
    g, t = both(np.arange(6, dtype=np.float32).reshape(2, 3))
    out = []
    for lib, x in ((gc, g), (torch, t)):
        doubled = x * 2  # computed from the old values
        row = x[1]  # a view: sees the write
        x.add_(10)
        out.append((doubled, row))
    same(out[0][0], out[1][0])
    same(out[0][1], out[1][1])


def test_lazy_tensors_and_fresh_creations_can_be_written():
    g = gc.zeros(3, 3)
    g[1, 1] = 4.0
    t = torch.zeros(3, 3)
    t[1, 1] = 4.0
    same(g, t)
    with gc.no_grad():
        h = gc.ones(2, 3) @ gc.ones(3, 2)
        h.relu_().mul_(0.5)
    same(h, torch.full((2, 2), 1.5))


def test_integer_tensors_and_iadd_of_ints():
    g, t = both(np.arange(5))
    g += 3
    t += 3
    g //= 2
    t //= 2
    g %= 3
    t %= 3
    same(g, t)
    assert g.dtype == gc.int64


def test_uniform_and_normal_fill_in_place_reproducibly():
    gc.manual_seed(0)
    a = gc.empty(2000).uniform_(-2.0, 3.0)
    b = gc.zeros(2000).normal_(1.0, 0.5)
    gc.manual_seed(0)
    a2 = gc.empty(2000).uniform_(-2.0, 3.0)
    assert np.array_equal(a.numpy(), a2.numpy())
    assert -2.0 <= a.numpy().min() and a.numpy().max() < 3.0 and abs(a.numpy().mean() - 0.5) < 0.15
    assert abs(b.numpy().mean() - 1.0) < 0.05 and abs(b.numpy().std() - 0.5) < 0.05


# ------------------------------------------------------------------ recorded by autograd


def test_inplace_on_non_leaf_flows_gradients_like_torch():
    rng = np.random.default_rng(4)
    x0, w0 = rng.standard_normal((3, 4)), rng.standard_normal((4,))
    grads = []
    for lib in (gc, torch):
        x = lib.tensor(x0, requires_grad=True)
        w = lib.tensor(w0, requires_grad=True)
        h = x * 1.0
        h += w
        h[:, 0] = h[:, 1] * 2
        h.masked_fill_(h < -1, 0.0)
        h.relu_()
        (h * h).sum().backward()
        grads.append((h, x.grad, w.grad))
    for a, b in zip(*grads):
        same(a, b, 1e-10)


def test_value_requiring_grad_into_a_constant_buffer():
    rng = np.random.default_rng(5)
    v0 = rng.standard_normal(3)
    grads = []
    for lib in (gc, torch):
        v = lib.tensor(v0, requires_grad=True)
        buf = lib.zeros(2, 3, dtype=lib.float64)
        buf[1] = v * 3
        assert buf.requires_grad and not buf.is_leaf
        buf.sum().backward()
        grads.append(v.grad)
    same(*grads)


# ------------------------------------------------------------------ refusals, as in PyTorch


def test_leaf_requiring_grad_refuses_outside_no_grad():
    w = gc.ones(3, requires_grad=True)
    for op in (
        lambda: w.add_(1),
        lambda: w.__isub__(1.0),
        lambda: w.zero_(),
        lambda: w.__setitem__(0, 2.0),
        lambda: w[0].fill_(3.0),
        lambda: w.uniform_(),
    ):
        with pytest.raises(RuntimeError, match="leaf") as info:
            op()
        assert isinstance(info.value, UserError)
    with gc.no_grad():
        w.add_(1)
        w[0] = 7.0
    assert w.tolist() == [7.0, 2.0, 2.0] and w.requires_grad and w.is_leaf


def test_dtype_shape_and_overlap_refusals():
    i = gc.arange(3)
    with pytest.raises(RuntimeError, match="can't be cast"):
        i += 0.5
    x = gc.zeros(2, 3)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        x.add_(gc.ones(4, 2, 3))
    with pytest.raises(RuntimeError, match="single memory location"):
        gc.zeros(1, 3).expand(4, 3).add_(1)
    with pytest.raises(UserError):
        x[0] = gc.ones(4)


def test_modified_output_saved_for_backward_raises_at_backward():
    for lib in (gc, torch):
        x = lib.ones(3, requires_grad=True)
        y = x.exp()
        y.add_(1)  # exp's gradient needs its output, now overwritten
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


def test_modified_input_saved_for_backward_raises_at_backward():
    for lib in (gc, torch):
        a = lib.ones(3, requires_grad=True)
        b = lib.ones(3, requires_grad=True)
        h = a * 2
        out = (h * b).sum()  # mul saves h for b's gradient
        h.mul_(3)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.backward()


def test_parameter_updated_under_no_grad_before_backward_raises():
    for lib in (gc, torch):
        w = lib.ones(3, requires_grad=True)
        x = lib.ones(3, requires_grad=True)
        out = (w * x).sum()
        out.item() if lib is gc else None  # (gradcraft: computed now, as torch computed it)
        with lib.no_grad():
            w.add_(1)
        with pytest.raises(RuntimeError):
            out.backward()


def test_input_not_saved_may_be_modified():
    for lib in (gc, torch):
        x = lib.ones(3, requires_grad=True)
        y = x + 1
        z = (y * 2).sum()  # mul by a number saves nothing of y
        y.add_(5)
        z.backward()
        assert x.grad.tolist() == [2.0, 2.0, 2.0]


# ------------------------------------------------------------------ iteration and exception types


def test_iteration_protocol():
    g, t = both(np.arange(6).reshape(3, 2))
    assert [r.tolist() for r in g] == [r.tolist() for r in t]
    a, b, c = g
    assert c.tolist() == [4, 5]
    assert [int(v) for v in g.flatten()] == list(range(6))
    assert [(x.tolist(), y) for x, y in zip(g, "ab")] == [([0, 1], "a"), ([2, 3], "b")]
    assert len(list(gc.zeros(0, 2))) == 0
    with pytest.raises(TypeError):
        iter(gc.tensor(1.0))


def test_index_errors_are_index_errors_and_user_errors():
    x = gc.zeros(3, 2)
    for bad in (lambda: x[3], lambda: x[0, 5], lambda: x[0, 0, 0], lambda: x.narrow(0, 2, 2)):
        with pytest.raises(IndexError) as info:
            bad()
        assert isinstance(info.value, UserError) and "\n" not in str(info.value)
    with pytest.raises(IndexError):
        x[-4] = 1.0


def test_second_backward_says_retain_graph():
    for lib in (gc, torch):
        x = lib.ones(3, requires_grad=True)
        y = (x.exp() * x).sum()
        y.backward()
        with pytest.raises(RuntimeError, match="second time"):
            y.backward()


def test_retain_graph_accumulates_like_torch():
    grads = []
    for lib in (gc, torch):
        x = lib.tensor([0.5, -1.0, 2.0], requires_grad=True)
        y = (x.exp() * x).sum()
        y.backward(retain_graph=True)
        y.backward()
        grads.append(x.grad)
    same(*grads)


@pytest.mark.parametrize(
    "bad",
    [
        lambda m: m.ones(2, 3) + m.ones(4),
        lambda m: m.ones(2, 3).reshape(5),
        lambda m: m.ones(2, 3) @ m.ones(2, 3),
        lambda m: m.ones(2).item(),
        lambda m: m.ones(2).sum(3),
        lambda m: m.ones(2, 3)[2],
        lambda m: len(m.tensor(1.0)),
        lambda m: m.cat([m.ones(2, 3), m.ones(3, 2)]),
    ],
)
def test_errors_have_torch_exception_types(bad):
    with pytest.raises(Exception) as expected:
        bad(torch)
    with pytest.raises(Exception) as got:
        bad(gc)
    assert isinstance(got.value, type(expected.value)), (type(got.value), type(expected.value))
    assert isinstance(got.value, UserError) or isinstance(got.value, TypeError)


def test_computations_through_views_keep_the_old_values():
    results = []
    for lib in (gc, torch):
        x = lib.arange(6, dtype=lib.float32).reshape(2, 3)
        through_view = x[:, :2] * 2  # computed from the old values
        view_of_view = x[1].reshape(3, 1)  # a view: sees the write
        x.add_(10)
        x[0, 0] = -1.0
        results.append((through_view, view_of_view, x))
    for a, b in zip(*results):
        same(a, b)


def test_second_backward_through_a_shared_freed_intermediate():
    for lib in (gc, torch):
        x = lib.ones(2, 3, requires_grad=True)
        h = x.exp() * 2  # an intermediate of two losses
        a, b = (h * h).sum(), (h * 3).sum()
        a.backward()
        with pytest.raises(RuntimeError, match="second time"):
            b.backward()


def test_a_lazy_side_branch_the_caller_holds_is_computed_with_backward(cpu_kernels_run):
    # The model's logits beside its fused loss: a lazy op outside the loss's graph, built on a graph
    # tensor. backward() realizes that tensor, so the optimizer's in-place update finds no lazy
    # reader of the weights (no copy of every weight) and the logits still read the old ones.
    rng = np.random.default_rng(0)
    w0, x0 = rng.standard_normal((3, 4)), rng.standard_normal((5, 3))
    w = gc.tensor(w0, requires_grad=True)

    def model(x):
        h = x @ w  # the forward's last activation, which the caller never sees
        return h * 2.0, h.square().mean()  # a lazy branch beside the loss's graph, and the loss

    side, loss = model(gc.tensor(x0))
    loss.backward()
    cpu_kernels_run.clear()
    with gc.no_grad():
        w -= 0.1 * w.grad
    assert "contiguous" not in cpu_kernels_run  # no copy of w kept for a lazy reader
    np.testing.assert_allclose(side.numpy(), 2 * x0 @ w0, rtol=1e-6)  # computed from the old w
    np.testing.assert_allclose(w.numpy(), w0 - 0.1 * (2 / 20) * x0.T @ (x0 @ w0), rtol=1e-6)
