"""The layers of gradcraft/nn/conv.py, pooling.py, normalization.py, rnn.py, attention.py and
transformer_layers.py on a GPU: built on the CPU, copied to CUDA, the same outputs and gradients
(of the input and of every parameter) as on the CPU, the reference. Skipped without a GPU; torch is
not needed (tests/test_nn_layers.py and test_nn_recurrent.py check the CPU against PyTorch)."""

import copy
import warnings

import numpy as np
import pytest
from cuda_support import CUDA_ONLY

import gradcraft as gc
from gradcraft import nn
from gradcraft.nn import functional as F

pytestmark = CUDA_ONLY


def _run(module, inputs, device, call_kwargs):
    """Outputs (flattened) and the gradients of the inputs and parameters, as NumPy arrays."""
    module = copy.deepcopy(module).to(device)
    leaves = [gc.tensor(a, device=device, requires_grad=True) for a in inputs]
    kwargs = {k: gc.tensor(v, device=device) if isinstance(v, np.ndarray) else v for k, v in call_kwargs.items()}
    out = module(*leaves, **kwargs)
    outs = [t for t in (out if isinstance(out, tuple) else (out,)) if t is not None]
    outs = [u for t in outs for u in (t if isinstance(t, tuple) else (t,))]
    loss = sum((t * t).sum() for t in outs)
    loss.backward()
    return [t.numpy() for t in outs], [t.grad.numpy() for t in leaves + list(module.parameters())]


L, S, N, E = 4, 5, 2, 8
PADDED = np.zeros((N, S), bool)
PADDED[0, 3:] = True
CASES = [
    ("conv2d", lambda: nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2), [(2, 4, 7, 6)], {}),
    ("conv1d_same", lambda: nn.Conv1d(3, 4, 4, padding="same", dilation=2), [(2, 3, 9)], {}),
    (
        "conv_transpose2d",
        lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1),
        [(2, 4, 3, 4)],
        {},
    ),
    ("conv_transpose1d", lambda: nn.ConvTranspose1d(3, 2, 3, stride=3), [(2, 3, 5)], {}),
    ("max_pool2d", lambda: nn.MaxPool2d(3, 2, 1, ceil_mode=True), [(2, 3, 7, 6)], {}),
    ("avg_pool2d", lambda: nn.AvgPool2d(3, 2, 1, count_include_pad=False), [(2, 3, 7, 6)], {}),
    ("adaptive_max", lambda: nn.AdaptiveMaxPool2d((3, 4)), [(2, 3, 7, 6)], {}),
    ("adaptive_avg", lambda: nn.AdaptiveAvgPool1d(4), [(2, 3, 7)], {}),
    ("batch_norm", lambda: nn.BatchNorm2d(3), [(4, 3, 2, 3)], {}),
    ("group_norm", lambda: nn.GroupNorm(2, 4), [(3, 4, 5)], {}),
    ("lstm", lambda: nn.LSTM(3, 4, num_layers=2, bidirectional=True), [(5, 2, 3)], {}),
    ("gru", lambda: nn.GRU(3, 4, batch_first=True), [(2, 5, 3)], {}),
    ("rnn_cell", lambda: nn.RNNCell(3, 4, nonlinearity="relu"), [(2, 3)], {}),
    ("mha", lambda: nn.MultiheadAttention(E, 2), [(L, N, E), (S, N, E), (S, N, E)], {"key_padding_mask": PADDED}),
    (
        "transformer",
        lambda: nn.Transformer(E, 2, 1, 1, 16, dropout=0.0, batch_first=True),
        [(N, S, E), (N, L, E)],
        {"tgt_mask": np.triu(np.full((L, L), -np.inf, np.float32), 1)},
    ),
]


@pytest.mark.parametrize("name,build,shapes,call_kwargs", CASES, ids=[c[0] for c in CASES])
def test_layer_on_cuda_matches_cpu(name, build, shapes, call_kwargs):
    gc.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = build()
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    cpu_out, cpu_grads = _run(module, inputs, "cpu", call_kwargs)
    gpu_out, gpu_grads = _run(module, inputs, "cuda", call_kwargs)
    for a, b in zip(cpu_out + cpu_grads, gpu_out + gpu_grads):
        np.testing.assert_allclose(b, a, rtol=2e-4, atol=2e-5)


def test_functional_pool_indices_on_cuda():
    x = np.random.default_rng(1).standard_normal((2, 3, 7, 6)).astype(np.float32)
    _, cpu_idx = F.max_pool2d(gc.tensor(x), 3, 2, 1, return_indices=True)
    _, gpu_idx = F.max_pool2d(gc.tensor(x, device="cuda"), 3, 2, 1, return_indices=True)
    np.testing.assert_array_equal(gpu_idx.numpy(), cpu_idx.numpy())
