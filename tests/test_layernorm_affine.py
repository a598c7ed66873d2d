"""nn.LayerNorm's elementwise_affine (PyTorch's third positional parameter, before bias) against PyTorch."""

import numpy as np
import pytest

import gradcraft

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("args", [((3, 5), 1e-5, False), ((5,), 1e-3, True, False), ((5,), 1e-5, True)])
def test_layernorm_affine_options_match_torch(args):
    x = np.random.default_rng(0).normal(2.0, 3.0, size=(4, 3, 5)).astype(np.float32)
    ours, theirs = gradcraft.nn.LayerNorm(*args), torch.nn.LayerNorm(*args)
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict())
    assert len(list(ours.parameters())) == len(list(theirs.parameters()))
    assert (ours.weight is None) == (theirs.weight is None) and (ours.bias is None) == (theirs.bias is None)
    assert repr(ours) == repr(theirs)
    xo = gradcraft.tensor(x, requires_grad=True)
    xt = torch.tensor(x, requires_grad=True)
    out_o, out_t = ours(xo), theirs(xt)
    np.testing.assert_allclose(out_o.detach().numpy(), out_t.detach().numpy(), rtol=1e-5, atol=1e-5)
    (out_o * out_o).sum().backward()
    (out_t * out_t).sum().backward()
    np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
