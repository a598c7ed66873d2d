"""Convolutions, pooling and normalisation layers against PyTorch: forward values and the gradients
of every input and parameter, the modules' parameter shapes, init bounds, state_dict keys and
printing, the running statistics of BatchNorm, and PyTorch's errors."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import gradcraft as gc  # noqa: E402
from gradcraft import nn  # noqa: E402
from gradcraft.nn import functional as F  # noqa: E402

TF = torch.nn.functional


def _pair(shape, rng):
    data = rng.normal(size=shape)
    return torch.tensor(data, requires_grad=True), gc.tensor(data, requires_grad=True)


def _compare(torch_out, gc_out, torch_inputs, gc_inputs, rng, atol=1e-10):
    """Forward values, then the gradients of every input for one random cotangent."""
    assert tuple(torch_out.shape) == tuple(gc_out.shape)
    np.testing.assert_allclose(gc_out.numpy(), torch_out.detach().numpy(), atol=atol, rtol=1e-6)
    cot = rng.normal(size=tuple(torch_out.shape))
    (torch_out * torch.tensor(cot)).sum().backward()
    (gc_out * gc.tensor(cot)).sum().backward()
    for t, g in zip(torch_inputs, gc_inputs):
        np.testing.assert_allclose(g.grad.numpy(), t.grad.numpy(), atol=atol, rtol=1e-6)


CONV_CASES = [
    ("conv2d", (2, 4, 7, 6), (6, 2, 3, 2), True, dict(stride=(2, 1), padding=1, dilation=(1, 2), groups=2)),
    ("conv2d", (2, 3, 5, 5), (4, 3, 3, 3), False, dict(padding="same")),
    ("conv2d", (2, 3, 6, 5), (4, 3, 2, 2), True, dict(padding="same", dilation=2)),
    ("conv2d", (3, 5, 5), (2, 3, 3, 3), True, dict(padding="valid")),
    ("conv1d", (2, 3, 9), (4, 3, 3), True, dict(stride=2, padding=2)),
    ("conv1d", (3, 9), (4, 3, 3), True, {}),
    ("conv1d", (2, 4, 8), (4, 1, 3), False, dict(groups=4, padding="same")),
    (
        "conv_transpose2d",
        (2, 4, 4, 5),
        (4, 3, 3, 2),
        True,
        dict(stride=(2, 3), padding=(1, 0), output_padding=(1, 2), groups=2),
    ),
    ("conv_transpose2d", (2, 4, 4, 5), (4, 3, 3, 3), True, dict(stride=2, padding=3, dilation=2)),
    ("conv_transpose1d", (2, 4, 6), (4, 3, 3), True, dict(stride=3, padding=1, output_padding=2)),
    ("conv_transpose1d", (4, 6), (4, 3, 3), False, {}),
]


@pytest.mark.parametrize("name,xs,ws,bias,kwargs", CONV_CASES)
def test_functional_convolutions_match_torch(name, xs, ws, bias, kwargs):
    rng = np.random.default_rng(0)
    tx, gx = _pair(xs, rng)
    tw, gw = _pair(ws, rng)
    out_channels = ws[0] if name.startswith("conv1d") or name.startswith("conv2d") else ws[1] * kwargs.get("groups", 1)
    tb, gb = _pair((out_channels,), rng) if bias else (None, None)
    t_out = getattr(TF, name)(tx, tw, tb, **kwargs)
    g_out = getattr(F, name)(gx, gw, gb, **kwargs)
    _compare(t_out, g_out, [tx, tw] + ([tb] if bias else []), [gx, gw] + ([gb] if bias else []), rng)


POOL_CASES = [
    ("max_pool2d", (2, 3, 7, 6), (3, 2, 1), {}),
    ("max_pool2d", (2, 3, 7, 6), ((3, 2), (2, 1), (1, 0), 2, True), {}),
    ("max_pool2d", (3, 7, 6), (2,), dict(ceil_mode=True, return_indices=True)),
    ("max_pool1d", (2, 3, 9), (3, 2, 1), dict(ceil_mode=True, return_indices=True)),
    ("max_pool1d", (2, 3, 10), (4, 3, 2), dict(dilation=1, ceil_mode=True)),
    ("avg_pool2d", (2, 3, 7, 6), (3, 2, 1), {}),
    ("avg_pool2d", (2, 3, 7, 6), (3, 2, 1), dict(ceil_mode=True, count_include_pad=False)),
    ("avg_pool2d", (2, 3, 7, 6), (3, 2, 1), dict(ceil_mode=True)),
    ("avg_pool2d", (2, 3, 7, 6), ((2, 3),), dict(divisor_override=4)),
    ("avg_pool1d", (2, 3, 10), (4, 3, 2), dict(ceil_mode=True, count_include_pad=False)),
    ("adaptive_avg_pool2d", (2, 3, 7, 6), ((3, 4),), {}),
    ("adaptive_avg_pool2d", (2, 3, 7, 6), ((None, 4),), {}),
    ("adaptive_avg_pool1d", (3, 7), (5,), {}),
    ("adaptive_max_pool2d", (2, 3, 7, 6), ((3, 4), True), {}),
    ("adaptive_max_pool2d", (3, 7, 6), (2,), dict(return_indices=True)),
    ("adaptive_max_pool1d", (2, 3, 7), (5, True), {}),
]


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("name,xs,args,kwargs", POOL_CASES)
def test_functional_pooling_matches_torch(name, xs, args, kwargs, ties):
    """With ties (rounded inputs) the max pools' gradient goes to the window's first maximum, and
    the indices returned are PyTorch's."""
    rng = np.random.default_rng(1)
    data = rng.normal(size=xs) * (2.0 if ties else 1.0)
    data = np.round(data) if ties else data
    tx, gx = torch.tensor(data, requires_grad=True), gc.tensor(data, requires_grad=True)
    t_out = getattr(TF, name)(tx, *args, **kwargs)
    g_out = getattr(F, name)(gx, *args, **kwargs)
    if isinstance(t_out, tuple):
        assert g_out[1].tolist() == t_out[1].tolist()
        t_out, g_out = t_out[0], g_out[0]
    _compare(t_out, g_out, [tx], [gx], rng)


def test_pooling_errors_match_torch():
    x = gc.zeros(1, 1, 5, 5)
    with pytest.raises(RuntimeError, match="pad should be at most half"):
        F.max_pool2d(x, 2, padding=2)
    with pytest.raises(RuntimeError):
        F.conv2d(x, gc.zeros(2, 3, 3, 3))
    with pytest.raises(ValueError, match="strided"):
        F.conv2d(x, gc.zeros(2, 1, 3, 3), stride=2, padding="same")


MODULES = [
    ("Conv1d", (4, 6, 3), dict(stride=2, padding=1, bias=False), (2, 4, 9)),
    ("Conv2d", (4, 6, (3, 2)), dict(padding="same", groups=2), (2, 4, 5, 6)),
    ("ConvTranspose1d", (4, 6, 3), dict(stride=2, output_padding=1), (2, 4, 5)),
    ("ConvTranspose2d", (4, 6, 3), dict(stride=2, padding=1, groups=2, dilation=2), (2, 4, 3, 4)),
    ("Conv2d", (3, 4, 4), dict(padding=2, padding_mode="reflect"), (2, 3, 5, 6)),
    ("Conv2d", (3, 4, 3), dict(padding=(1, 2), padding_mode="replicate", stride=2), (2, 3, 5, 6)),
    ("Conv1d", (3, 4, 4), dict(padding="same", padding_mode="circular", dilation=2), (2, 3, 7)),
    ("MaxPool2d", (3,), dict(stride=2, padding=1, ceil_mode=True), (2, 3, 7, 7)),
    ("MaxPool1d", (2,), {}, (2, 3, 7)),
    ("AvgPool2d", (3,), dict(stride=2, padding=1, count_include_pad=False), (2, 3, 7, 7)),
    ("AvgPool1d", (3,), dict(stride=1), (2, 3, 7)),
    ("AdaptiveAvgPool2d", ((1, 1),), {}, (2, 3, 7, 5)),
    ("AdaptiveAvgPool1d", (3,), {}, (2, 3, 7)),
    ("AdaptiveMaxPool2d", (2,), {}, (2, 3, 7, 5)),
    ("AdaptiveMaxPool1d", (3,), {}, (2, 3, 7)),
    ("GroupNorm", (2, 4), {}, (3, 4, 5)),
    ("GroupNorm", (4, 4), dict(affine=False), (3, 4, 2, 2)),
]


@pytest.mark.parametrize("cls,args,kwargs,xs", MODULES)
def test_modules_match_torch(cls, args, kwargs, xs):
    """Weights copied from torch's module: the same output and gradients, the same parameter names
    and shapes, the same printout."""
    rng = np.random.default_rng(2)
    t_mod = getattr(torch.nn, cls)(*args, **kwargs).double()
    g_mod = getattr(nn, cls)(*args, **kwargs).double()
    assert repr(g_mod) == repr(t_mod)
    t_state = t_mod.state_dict()
    assert list(g_mod.state_dict()) == list(t_state)
    assert [tuple(v.shape) for v in g_mod.state_dict().values()] == [tuple(v.shape) for v in t_state.values()]
    g_mod.load_state_dict({k: v.numpy() for k, v in t_state.items()})
    tx, gx = _pair(xs, rng)
    _compare(t_mod(tx), g_mod(gx), [tx] + list(t_mod.parameters()), [gx] + list(g_mod.parameters()), rng)


@pytest.mark.parametrize("cls", ["Conv1d", "Conv2d", "ConvTranspose2d"])
def test_conv_init_bounds_are_torch_kaiming_uniform(cls):
    gc.manual_seed(0)
    mod = getattr(nn, cls)(8, 6, 3, groups=2)
    fan_in = mod.weight.shape[1] * math.prod(mod.weight.shape[2:])
    bound = 1 / math.sqrt(fan_in)  # kaiming_uniform_(a=sqrt(5)) gives 1/sqrt(fan_in) too
    w, b = mod.weight.numpy(), mod.bias.numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    assert np.abs(b).max() <= bound and w.std() > 0.4 * bound


def test_conv_module_errors_match_torch():
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="strided"):
        nn.Conv2d(3, 4, 3, stride=2, padding="same")
    with pytest.raises(ValueError):
        nn.Conv2d(3, 4, 3, padding_mode="mirror")
    with pytest.raises(ValueError, match='Only "zeros" padding mode'):
        nn.ConvTranspose2d(3, 4, 3, padding_mode="reflect")
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        nn.Conv1d(1, 1, 3, padding=4, padding_mode="reflect")(gc.zeros(1, 1, 4))


def test_conv_transpose_output_size_matches_torch():
    rng = np.random.default_rng(3)
    t_mod, g_mod = (
        torch.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1),
        nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1),
    )
    g_mod.load_state_dict({k: v.numpy() for k, v in t_mod.state_dict().items()})
    data = rng.normal(size=(1, 2, 4, 4)).astype(np.float32)
    t_out = t_mod(torch.tensor(data), output_size=[8, 8])
    g_out = g_mod(gc.tensor(data), output_size=[8, 8])
    np.testing.assert_allclose(g_out.numpy(), t_out.detach().numpy(), atol=1e-5)


@pytest.mark.parametrize(
    "cls,kwargs,xs",
    [
        ("BatchNorm1d", {}, (6, 3)),
        ("BatchNorm1d", dict(momentum=None), (4, 3, 5)),
        ("BatchNorm2d", dict(affine=False, eps=1e-3), (4, 3, 2, 2)),
        ("BatchNorm2d", dict(track_running_stats=False), (4, 3, 2, 2)),
        ("BatchNorm2d", dict(momentum=0.3, bias=False), (3, 3, 2, 3)),
    ],
)
def test_batch_norm_modules_match_torch(cls, kwargs, xs):
    """Three training steps (running statistics, num_batches_tracked, momentum None's cumulative
    average), then eval mode; outputs, gradients and buffers as torch's."""
    rng = np.random.default_rng(4)
    t_mod = getattr(torch.nn, cls)(3, **kwargs).double()
    g_mod = getattr(nn, cls)(3, **kwargs).double()
    assert repr(g_mod) == repr(t_mod)
    assert list(g_mod.state_dict()) == list(t_mod.state_dict())
    if g_mod.weight is not None:
        g_mod.weight.data = gc.tensor(rng.normal(size=3))
        t_mod.weight.data = torch.tensor(g_mod.weight.numpy())
    for step in range(4):
        if step == 3:
            t_mod.eval(), g_mod.eval()
        tx, gx = _pair(xs, rng)
        _compare(t_mod(tx), g_mod(gx), [tx] + list(t_mod.parameters()), [gx] + list(g_mod.parameters()), rng)
        for key, value in t_mod.state_dict().items():
            np.testing.assert_allclose(g_mod.state_dict()[key].numpy(), value.numpy(), atol=1e-12, err_msg=key)


def test_functional_batch_norm_and_errors_match_torch():
    rng = np.random.default_rng(5)
    mean, var = rng.normal(size=3), rng.uniform(0.5, 2, size=3)
    tx, gx = _pair((4, 3, 5), rng)
    tw, gw = _pair((3,), rng)
    t_out = TF.batch_norm(tx, torch.tensor(mean), torch.tensor(var), tw, None, False, 0.1, 1e-3)
    g_out = F.batch_norm(gx, gc.tensor(mean), gc.tensor(var), gw, None, False, 0.1, 1e-3)
    _compare(t_out, g_out, [tx, tw], [gx, gw], rng)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nn.BatchNorm1d(3)(gc.zeros(1, 3))
    with pytest.raises(ValueError, match="expected 4D input"):
        nn.BatchNorm2d(3)(gc.zeros(2, 3, 4))


def test_channel_dropout_zeroes_whole_channels():
    gc.manual_seed(0)
    x = gc.ones(8, 16, 3, 3, requires_grad=True)
    y = F.dropout2d(x, 0.5)
    per_channel = y.numpy().reshape(8, 16, 9)
    assert set(np.unique(per_channel)) <= {0.0, 2.0}
    assert (per_channel.min(-1) == per_channel.max(-1)).all()  # one factor per channel
    assert 0.2 < (per_channel[..., 0] == 0).mean() < 0.8
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), y.numpy())
    drop = nn.Dropout2d(0.5).eval()
    assert drop(x) is x or np.array_equal(drop(x).numpy(), x.numpy())
