"""Recurrent layers, MultiheadAttention and the transformer modules against PyTorch: weights copied
from torch's module, then the outputs (every element of nested results) and the gradients of the
inputs, initial states and every parameter; parameter names, shapes and printouts; PyTorch's errors."""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import gradcraft as gc  # noqa: E402
from gradcraft import nn  # noqa: E402


def _flat(out):
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in _flat(item)]
    return [] if out is None else [out]


def _as(value, lib):
    if isinstance(value, np.ndarray):
        return torch.tensor(value) if lib == "torch" else gc.tensor(value)
    return value


def _check(t_mod, g_mod, inputs, call_kwargs=None, train=False, rng=None, grad=True):
    """Load torch's weights into ours, run both on the same inputs (a list of arrays, or tuples of
    arrays given as one tuple argument), compare every output and all gradients."""
    rng = rng or np.random.default_rng(0)
    call_kwargs = call_kwargs or {}
    t_mod, g_mod = t_mod.double().train(train), g_mod.double().train(train)
    assert repr(g_mod) == repr(t_mod)
    t_state = t_mod.state_dict()
    assert list(g_mod.state_dict()) == list(t_state)
    assert [tuple(v.shape) for v in g_mod.state_dict().values()] == [tuple(v.shape) for v in t_state.values()]
    g_mod.load_state_dict({k: v.numpy() for k, v in t_state.items()})
    t_leaves, g_leaves, t_args, g_args = [], [], [], []
    for item in inputs:
        group = item if isinstance(item, tuple) else (item,)
        ts = [torch.tensor(a, requires_grad=grad) for a in group]
        gs = [gc.tensor(a, requires_grad=grad) for a in group]
        t_leaves += ts
        g_leaves += gs
        t_args.append(tuple(ts) if isinstance(item, tuple) else ts[0])
        g_args.append(tuple(gs) if isinstance(item, tuple) else gs[0])
    t_out = _flat(t_mod(*t_args, **{k: _as(v, "torch") for k, v in call_kwargs.items()}))
    g_out = _flat(g_mod(*g_args, **{k: _as(v, "gc") for k, v in call_kwargs.items()}))
    assert len(t_out) == len(g_out)
    t_loss, g_loss = 0, 0
    for a, b in zip(t_out, g_out):
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(b.numpy(), a.detach().numpy(), atol=1e-10)
        cot = rng.normal(size=tuple(a.shape))
        t_loss = t_loss + (a * torch.tensor(cot)).sum()
        g_loss = g_loss + (b * gc.tensor(cot)).sum()
    if not grad:
        return
    t_loss.backward()
    g_loss.backward()
    for a, b in zip(t_leaves + list(t_mod.parameters()), g_leaves + list(g_mod.parameters())):
        np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), atol=1e-10)


RECURRENT = [
    ("RNN", (3, 4), {}, [(5, 2, 3)]),
    ("RNN", (3, 4, 2, "relu"), dict(bidirectional=True, batch_first=True), [(2, 5, 3), (4, 2, 4)]),
    ("LSTM", (3, 4, 2), dict(bidirectional=True), [(5, 2, 3), ((4, 2, 4), (4, 2, 4))]),
    ("LSTM", (3, 4), dict(proj_size=2, num_layers=2, batch_first=True), [(2, 5, 3)]),
    ("LSTM", (3, 4), dict(bias=False), [(5, 3), ((1, 4), (1, 4))]),
    ("GRU", (3, 4, 2), dict(bidirectional=True, batch_first=True), [(2, 5, 3), (4, 2, 4)]),
    ("GRU", (3, 4), {}, [(5, 3)]),
    ("RNNCell", (3, 4), dict(nonlinearity="relu"), [(2, 3), (2, 4)]),
    ("RNNCell", (3, 4), dict(bias=False), [(3,)]),
    ("LSTMCell", (3, 4), {}, [(2, 3), ((2, 4), (2, 4))]),
    ("LSTMCell", (3, 4), {}, [(3,)]),
    ("GRUCell", (3, 4), {}, [(2, 3), (2, 4)]),
    ("GRUCell", (3, 4), {}, [(3,), (4,)]),
]


@pytest.mark.parametrize("cls,args,kwargs,shapes", RECURRENT)
def test_recurrent_modules_match_torch(cls, args, kwargs, shapes):
    rng = np.random.default_rng(1)
    inputs = [
        tuple(rng.normal(size=s) for s in item) if isinstance(item[0], tuple) else rng.normal(size=item)
        for item in shapes
    ]
    _check(getattr(torch.nn, cls)(*args, **kwargs), getattr(nn, cls)(*args, **kwargs), inputs, rng=rng)


def test_recurrent_init_and_parameter_names():
    gc.manual_seed(0)
    lstm = nn.LSTM(3, 16, num_layers=2, bidirectional=True)
    names = [n for n, _ in lstm.named_parameters()]
    assert names == [n for n, _ in torch.nn.LSTM(3, 16, num_layers=2, bidirectional=True).named_parameters()]
    assert names[:5] == ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_ih_l0_reverse"]
    values = np.concatenate([p.numpy().ravel() for p in lstm.parameters()])
    assert np.abs(values).max() <= 0.25 and np.abs(values).max() > 0.24 and values.std() > 0.12


def test_recurrent_dropout_between_layers_only_in_training():
    gc.manual_seed(0)
    rnn = nn.GRU(3, 8, num_layers=2, dropout=0.5)
    x = gc.randn(4, 2, 3)
    a, b = rnn(x)[0].numpy(), rnn(x)[0].numpy()
    assert not np.allclose(a, b)  # fresh masks each call
    rnn.eval()
    np.testing.assert_array_equal(rnn(x)[0].numpy(), rnn(x)[0].numpy())


def test_recurrent_errors_match_torch():
    with pytest.raises(ValueError, match="proj_size argument is only supported for LSTM"):
        nn.GRU(3, 4, proj_size=2)
    with pytest.raises(ValueError, match="Unknown nonlinearity"):
        nn.RNN(3, 4, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="proj_size has to be smaller"):
        nn.LSTM(3, 4, proj_size=4)
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        nn.LSTM(3, 4, dropout=0.2)
    with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size"):
        nn.LSTM(3, 4)(gc.zeros(5, 2, 2))
    with pytest.raises(RuntimeError, match="Expected hidden size"):
        nn.GRU(3, 4)(gc.zeros(5, 2, 3), gc.zeros(1, 3, 4))


L, S, N, E = 4, 5, 2, 8
CAUSAL = np.triu(np.ones((L, L), bool), 1)
PADDED = np.zeros((N, S), bool)
PADDED[0, 3:] = True
FLOAT_MASK = np.random.default_rng(2).normal(size=(N * 4, L, S))

ATTENTION = [
    ((E, 2), {}, [(L, N, E), (S, N, E), (S, N, E)], {}),
    (
        (E, 2),
        dict(batch_first=True),
        [(N, L, E), (N, S, E), (N, S, E)],
        dict(key_padding_mask=PADDED, average_attn_weights=False),
    ),
    (
        (E, 4),
        dict(kdim=3, vdim=5, add_bias_kv=True, add_zero_attn=True),
        [(L, N, E), (S, N, 3), (S, N, 5)],
        dict(key_padding_mask=PADDED, attn_mask=FLOAT_MASK),
    ),
    ((E, 2), dict(bias=False), [(L, E), (L, E), (L, E)], dict(attn_mask=CAUSAL, is_causal=True)),
    ((E, 2), {}, [(L, N, E), (L, N, E), (L, N, E)], dict(attn_mask=CAUSAL, need_weights=False)),
]


@pytest.mark.parametrize("args,kwargs,shapes,call", ATTENTION)
def test_multihead_attention_matches_torch(args, kwargs, shapes, call):
    rng = np.random.default_rng(3)
    inputs = [rng.normal(size=s) for s in shapes]
    t_mod, g_mod = torch.nn.MultiheadAttention(*args, **kwargs), nn.MultiheadAttention(*args, **kwargs)
    _check(t_mod, g_mod, inputs, call, rng=rng)


def _build(m, kind):
    """The same transformer module built with torch (m = torch) or gradcraft (m = gradcraft)."""
    if kind == "encoder_layer":
        return m.nn.TransformerEncoderLayer(E, 2, 16, dropout=0.0)
    if kind == "encoder_layer_prenorm":
        return m.nn.TransformerEncoderLayer(E, 2, 16, batch_first=True, norm_first=True, activation="gelu")
    if kind == "decoder_layer":
        return m.nn.TransformerDecoderLayer(E, 2, 16)
    if kind == "encoder":
        layer = m.nn.TransformerEncoderLayer(E, 2, 16, batch_first=True, activation=m.nn.GELU())
        return m.nn.TransformerEncoder(layer, 2, norm=m.nn.LayerNorm(E))
    if kind == "decoder":
        layer = m.nn.TransformerDecoderLayer(E, 2, 16, norm_first=True, bias=False)
        return m.nn.TransformerDecoder(layer, 2, norm=m.nn.LayerNorm(E, bias=False))
    return m.nn.Transformer(E, 2, 2, 1, 16, batch_first=True)


SQUARE = np.triu(np.full((L, L), -np.inf), 1)
TRANSFORMERS = [
    ("encoder_layer", [(L, N, E)], dict(src_mask=CAUSAL)),
    ("encoder_layer_prenorm", [(N, S, E)], dict(src_key_padding_mask=PADDED)),
    ("decoder_layer", [(L, N, E), (S, N, E)], dict(tgt_mask=CAUSAL, memory_key_padding_mask=PADDED)),
    ("encoder", [(N, S, E)], dict(src_key_padding_mask=PADDED)),
    ("decoder", [(L, N, E), (S, N, E)], dict(tgt_mask=SQUARE, tgt_is_causal=True)),
    ("transformer", [(N, S, E), (N, L, E)], dict(tgt_mask=SQUARE, src_key_padding_mask=PADDED)),
]


@pytest.mark.parametrize("kind,shapes,call", TRANSFORMERS)
def test_transformer_modules_match_torch(kind, shapes, call):
    rng = np.random.default_rng(4)
    inputs = [rng.normal(size=s) for s in shapes]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _check(_build(torch, kind), _build(gc, kind), inputs, call, rng=rng)


def test_encoder_inference_zeroes_padded_positions_as_torch():
    """Without gradients in eval mode PyTorch's encoder runs on nested tensors: padded positions
    come out as zeros (before the final norm). Ours gives the same numbers."""
    rng = np.random.default_rng(5)
    t_mod = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(E, 2, 16, batch_first=True), 2).eval()
    g_mod = nn.TransformerEncoder(nn.TransformerEncoderLayer(E, 2, 16, batch_first=True), 2).eval()
    g_mod.load_state_dict({k: v.numpy() for k, v in t_mod.state_dict().items()})
    x = rng.normal(size=(N, S, E)).astype(np.float32)
    with torch.no_grad():
        expected = t_mod(torch.tensor(x), src_key_padding_mask=torch.tensor(PADDED)).numpy()
    with gc.no_grad():
        got = g_mod(gc.tensor(x), src_key_padding_mask=gc.tensor(PADDED)).numpy()
    assert (expected[0, 3:] == 0).all()
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_transformer_helpers_and_errors():
    mask = nn.Transformer.generate_square_subsequent_mask(3)
    np.testing.assert_array_equal(mask.numpy(), torch.nn.Transformer.generate_square_subsequent_mask(3).numpy())
    with pytest.raises(RuntimeError, match="activation should be relu/gelu"):
        nn.TransformerEncoderLayer(8, 2, activation="tanh")
    with pytest.raises(ValueError, match="divisible by num_heads"):
        nn.MultiheadAttention(8, 3)
    with pytest.raises(RuntimeError, match="Need attn_mask"):
        x = gc.zeros(3, 1, 8)
        nn.MultiheadAttention(8, 2)(x, x, x, is_causal=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = nn.Transformer(8, 2, 1, 1, 16)
    with pytest.raises(RuntimeError, match="batch number"):
        model(gc.zeros(3, 2, 8), gc.zeros(3, 1, 8))
    weights = [p.numpy() for p in model.parameters() if p.ndim > 1]
    assert all(np.abs(w).max() <= np.sqrt(6 / sum(w.shape)) + 1e-6 for w in weights)  # xavier-uniform
