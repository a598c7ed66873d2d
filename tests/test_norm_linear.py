"""F.norm_linear (ops/nn.py) and its CPU reference kernel (backend/cpu/gemv.py) against PyTorch."""

import numpy as np
import pytest
import torch

import gradcraft as gc
import gradcraft.nn.functional as F
from gradcraft.device import get_backend
from gradcraft.errors import UserError


def torch_norm_linear(x, res, w, b, nw, nb, norm, activation, eps=1e-5):
    s = x + res if res is not None else x
    if norm == "rms_norm":
        h = torch.nn.functional.rms_norm(s, (s.shape[-1],), nw, eps)
    elif norm == "layer_norm":
        h = torch.nn.functional.layer_norm(s, (s.shape[-1],), nw, nb, eps)
    else:
        h = s
    h = torch.nn.functional.linear(h, w, b)
    if activation == "swiglu":
        gate, up = h.chunk(2, dim=-1)
        h = torch.nn.functional.silu(gate) * up
    elif activation is not None:
        h = torch.nn.functional.gelu(h, approximate="tanh" if activation == "gelu_tanh" else "none")
    return h, s


@pytest.mark.parametrize("norm", [None, "rms_norm", "layer_norm"])
@pytest.mark.parametrize("activation", [None, "gelu", "gelu_tanh", "swiglu"])
@pytest.mark.parametrize("extras", [(True, True), (False, False), (True, False)])
def test_norm_linear_and_its_reference_kernel_are_pytorchs(norm, activation, extras):
    with_residual, with_bias = extras
    r = np.random.default_rng(0)
    K, N = 24, 10
    arrays = {
        "x": r.standard_normal((1, 3, K)),
        "res": r.standard_normal((1, 3, K)),
        "w": r.standard_normal((N, K)) / 5,
        "b": r.standard_normal(N),
        "nw": 1 + r.standard_normal(K) / 4,
        "nb": r.standard_normal(K) / 4,
    }
    arrays = {k: v.astype(np.float32) for k, v in arrays.items()}
    used = {"res": with_residual, "b": with_bias, "nw": norm is not None, "nb": norm == "layer_norm"}
    pick = {k: (v if used.get(k, True) else None) for k, v in arrays.items()}
    t = {k: (torch.tensor(v) if v is not None else None) for k, v in pick.items()}
    want_y, want_s = torch_norm_linear(t["x"], t["res"], t["w"], t["b"], t["nw"], t["nb"], norm, activation)
    g = {k: (gc.tensor(v) if v is not None else None) for k, v in pick.items()}
    out = F.norm_linear(
        g["x"],
        g["w"],
        g["b"],
        residual=g["res"],
        norm=norm,
        norm_weight=g["nw"],
        norm_bias=g["nb"],
        activation=activation,
    )
    y, s = out if with_residual else (out, None)
    np.testing.assert_allclose(y.numpy(), want_y.numpy(), rtol=1e-5, atol=1e-5)
    if with_residual:
        np.testing.assert_array_equal(s.numpy(), want_s.numpy())
    # the reference kernel, on the rows as (R, K)
    order = [pick["x"].reshape(-1, K)]
    order += [pick["res"].reshape(-1, K)] if with_residual else []
    order += [pick[k] for k in ("nw", "nb", "w", "b") if pick[k] is not None]
    attrs = dict(residual=with_residual, norm=norm, eps=1e-5, norm_bias=norm == "layer_norm", bias=with_bias)
    kernel = get_backend("cpu").reference_kernels["norm_linear"]
    got = kernel(*order, activation=activation, **attrs)
    got_y = got[0] if with_residual else got
    np.testing.assert_allclose(got_y, want_y.numpy().reshape(got_y.shape), rtol=1e-5, atol=1e-5)
    if with_residual:
        np.testing.assert_array_equal(got[1], want_s.numpy().reshape(-1, K))


def test_norm_linear_gradients_flow_through_the_composed_ops():
    x = gc.randn(2, 8, requires_grad=True)
    w = gc.randn(6, 8, requires_grad=True)
    nw = gc.ones(8, requires_grad=True)
    y = F.norm_linear(x, w, norm="rms_norm", norm_weight=nw, activation="swiglu")
    y.sum().backward()
    assert x.grad is not None and w.grad is not None and nw.grad is not None


def test_norm_linear_rejects_what_does_not_fit():
    x, w = gc.randn(1, 8), gc.randn(5, 8)
    with pytest.raises(UserError, match="even output width"):
        F.norm_linear(x, w, activation="swiglu")
    with pytest.raises(UserError, match="weight must be"):
        F.norm_linear(x, gc.randn(5, 7))
    with pytest.raises(UserError, match="norm_weight goes with a norm"):
        F.norm_linear(x, w, norm="rms_norm")
    with pytest.raises(UserError, match="share the input's dtype"):
        F.norm_linear(x, w.to(gc.float64))
    with pytest.raises(UserError, match="norm must be one of"):
        F.norm_linear(x, w, norm="batch_norm", norm_weight=gc.ones(8))


def test_norm_linear_checks_the_bias_and_norm_shapes_its_kernel_reads():
    """The fused kernel reads N bias values and K norm weights: anything else is refused, not
    broadcast (the composed ops would broadcast a (1,) bias; the kernel would read past it)."""
    x, w = gc.randn(1, 8), gc.randn(5, 8)
    with pytest.raises(UserError, match=r"bias must be \(5,\)"):
        F.norm_linear(x, w, gc.randn(1))
    with pytest.raises(UserError, match=r"norm_weight must be \(8,\)"):
        F.norm_linear(x, w, norm="rms_norm", norm_weight=gc.ones(1))
    with pytest.raises(UserError, match=r"norm_bias must be \(8,\)"):
        F.norm_linear(x, w, norm="layer_norm", norm_weight=gc.ones(8), norm_bias=gc.zeros(4))


def test_linear_with_a_broadcast_bias_is_pytorchs_even_where_the_fused_kernel_runs(monkeypatch):
    """F.linear takes norm_linear for a one-row product with a bias; a (1,) bias (which PyTorch
    broadcasts) and a mismatched width (matmul's error) stay off it."""
    backend = get_backend("cpu")
    monkeypatch.setattr(backend, "norm_linear_supported", lambda *a: True)  # as a GPU's one-row case
    r = np.random.default_rng(1)
    x, w, b = (r.standard_normal(s).astype(np.float32) for s in ((1, 8), (5, 8), (1,)))
    want = torch.nn.functional.linear(torch.tensor(x), torch.tensor(w), torch.tensor(b)).numpy()
    np.testing.assert_allclose(F.linear(gc.tensor(x), gc.tensor(w), gc.tensor(b)).numpy(), want, rtol=1e-6)
    b5 = r.standard_normal(5).astype(np.float32)
    want = torch.nn.functional.linear(torch.tensor(x), torch.tensor(w), torch.tensor(b5)).numpy()
    np.testing.assert_allclose(F.linear(gc.tensor(x), gc.tensor(w), gc.tensor(b5)).numpy(), want, rtol=1e-5)
    with pytest.raises(Exception) as error:
        F.linear(gc.tensor(x), gc.randn(5, 7), gc.tensor(b5))
    assert "norm_linear" not in str(error.value)


@pytest.mark.parametrize("fused", [False, True])
def test_norm_linear_eps_none_is_the_norms_default(monkeypatch, fused):
    """eps=None is F.rms_norm's and F.layer_norm's default, composed or through the fused kernel (the CPU
    backend made to claim it, as a GPU does for one row)."""
    if fused:
        monkeypatch.setattr(type(get_backend("cpu")), "norm_linear_supported", lambda self, *a: True)
    x, w, nw = gc.randn(1, 8), gc.randn(4, 8), gc.randn(8)
    for norm, plain in (("rms_norm", F.rms_norm(x, (8,), nw)), ("layer_norm", F.layer_norm(x, (8,), nw))):
        got = F.norm_linear(x, w, norm=norm, norm_weight=nw, eps=None)
        np.testing.assert_allclose(got.numpy(), (plain @ w.mT).numpy(), rtol=1e-6, atol=1e-6)
