"""gradcraft.amp.GradScaler against torch.amp.GradScaler("cpu"): the scale, the skipped steps and the
weights over float16 sequences that overflow; unscale_ with clipping; state dicts; errors."""

import warnings

import numpy as np
import pytest

import gradcraft as gc

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy on the overflowing float16 values

RNG = np.random.default_rng(1)
W0 = (RNG.normal(size=(6, 4)) / 2).astype(np.float32)
B0 = (RNG.normal(size=(6,)) / 4).astype(np.float32)


def _model(L):
    lin = L.nn.Linear(4, 6)
    with L.no_grad():
        lin.weight.copy_(L.tensor(W0))
        lin.bias.copy_(L.tensor(B0))
    return lin


SIZES = (1.0, 6.0, 1.0, 1.0, 1.0, 20.0, 1.0, 1.0, 1.0, 1.0, 3.0, 1.0)


def _batches(n=12):
    """Inputs whose float16 gradients overflow at the larger scales: some batches are larger."""
    rng = np.random.default_rng(2)
    out = []
    for i in range(n):
        x = rng.normal(size=(8, 4)).astype(np.float32) * SIZES[i % len(SIZES)]
        out.append((x, rng.normal(size=(8, 6)).astype(np.float32)))
    return out


def _train(L, clip: float | None = None, interval: int = 2):
    model = _model(L)
    opt = L.optim.SGD(model.parameters(), lr=0.01)
    scaler = L.amp.GradScaler("cpu", init_scale=2.0**16, growth_interval=interval)
    log = []
    for x, y in _batches():
        opt.zero_grad()
        with L.autocast("cpu", dtype=L.float16):
            out = model(L.tensor(x))
            loss = L.nn.functional.mse_loss(out, L.tensor(y))
        scaler.scale(loss).backward()
        if clip is not None:
            scaler.unscale_(opt)
            L.nn.utils.clip_grad_norm_(model.parameters(), clip)
        stepped = scaler.step(opt) is not None or not _skipped(scaler, opt)
        scaler.update()
        log.append((scaler.get_scale(), scaler._get_growth_tracker(), stepped))
    return log, model.weight.detach().numpy().copy(), scaler


def _skipped(scaler, opt):
    found = scaler._per_optimizer_states[id(opt)]["found_inf_per_device"]
    return bool(sum(float(v.item()) for v in found.values()))


@pytest.mark.parametrize("clip", [None, 0.5])
def test_float16_sequence_matches_torch(clip):
    log, weight, _ = _train(gc, clip)
    t_log, t_weight, _ = _train(torch, clip)
    assert log == t_log
    skipped = [not s for _, _, s in log]
    assert any(skipped) and not all(skipped)  # the sequence overflows, and also steps
    assert len({s for s, _, _ in log}) > 2  # the scale backed off and grew
    np.testing.assert_allclose(weight, t_weight, rtol=2e-3, atol=2e-4)


def _synthetic(L, grads, device="cpu", **kw):
    """The same gradients for both libraries, inf and NaN at chosen steps; SGD steps."""
    p = L.tensor(np.ones(3, dtype=np.float32), requires_grad=True, device=device)
    opt = L.optim.SGD([p], lr=0.1)
    scaler = L.amp.GradScaler(device, **kw)
    log = []
    for g in grads:
        scaler.scale(L.tensor(1.0, device=device))  # makes the scale on the device, as scale(loss) does
        p.grad = L.tensor(np.asarray(g, dtype=np.float32), device=device)
        result = scaler.step(opt)
        scaler.update()
        log.append((scaler.get_scale(), scaler._get_growth_tracker(), result is None))
    return log, p.detach().cpu().numpy().copy()


CUDA_ONLY = pytest.param(
    "cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(not gc.cuda.is_available(), reason="needs CuPy and a GPU")]
)


@pytest.mark.parametrize("device", ["cpu", CUDA_ONLY])
def test_synthetic_gradients_with_inf_and_nan_match_torch(device):
    inf, nan = float("inf"), float("nan")
    grads = [[1, 2, 3], [inf, 0, 0], [1, 1, 1], [1, 1, 1], [1, 1, 1], [0, nan, 0], [2, 2, 2], [2, 2, 2], [-inf, 1, 1]]
    for kw in ({"init_scale": 8.0, "growth_interval": 2}, {"init_scale": 3.0e38, "growth_interval": 1}):
        log, p = _synthetic(gc, grads, device, **kw)
        t_log, t_p = _synthetic(torch, grads, **kw)
        assert log == t_log, kw
        np.testing.assert_allclose(p, t_p, rtol=1e-6)


def test_scale_outputs_nested():
    scaler = gc.amp.GradScaler("cpu", init_scale=4.0)
    a, b = gc.tensor([1.0, 2.0]), gc.tensor(3.0, dtype=gc.float16)
    out = scaler.scale([a, (b, a)])
    assert isinstance(out, list) and isinstance(out[1], tuple)
    np.testing.assert_array_equal(out[0].numpy(), [4.0, 8.0])
    t_out = torch.amp.GradScaler("cpu", init_scale=4.0).scale(torch.tensor(3.0, dtype=torch.float16))
    assert str(out[1][0].dtype).split(".")[-1] == str(t_out.dtype).split(".")[-1]
    assert out[1][0].item() == 12.0
    with pytest.raises(ValueError, match="iterable of Tensors"):
        scaler.scale(3.0)


def test_state_dict_round_trip_and_disabled():
    log, _, scaler = _train(gc)
    state = scaler.state_dict()
    assert state == {
        "scale": log[-1][0],
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 2,
        "_growth_tracker": log[-1][1],
    }
    other = gc.amp.GradScaler("cpu")
    other.load_state_dict(state)
    assert other.get_scale() == state["scale"] and other.state_dict() == state
    with pytest.raises(RuntimeError, match="state dict is empty"):
        other.load_state_dict({})
    off = gc.amp.GradScaler("cpu", enabled=False)
    assert not off.is_enabled() and off.state_dict() == {} and off.get_scale() == 1.0
    x = gc.tensor(2.0)
    assert off.scale(x) is x


def test_update_and_unscale_cause_no_host_sync(monkeypatch):
    model = _model(gc)
    opt = gc.optim.SGD(model.parameters(), lr=0.1)
    scaler = gc.amp.GradScaler("cpu")
    x, y = _batches(2)[1]
    scaler.scale(gc.nn.functional.mse_loss(model(gc.tensor(x)), gc.tensor(y))).backward()

    def no_sync(self):
        raise AssertionError("a host sync")

    with monkeypatch.context() as m:
        m.setattr(gc.Tensor, "item", no_sync)
        m.setattr(gc.Tensor, "tolist", no_sync)
        scaler.unscale_(opt)
    scaler.step(opt)  # reads the flag once
    with monkeypatch.context() as m:
        m.setattr(gc.Tensor, "item", no_sync)
        scaler.update()
    assert scaler.get_scale() == 2.0**16


def test_errors_as_torch():
    model = _model(gc)
    opt = gc.optim.SGD(model.parameters(), lr=0.1)
    scaler = gc.amp.GradScaler("cpu")
    with pytest.raises(AssertionError, match="_scale is None"):
        scaler.step(opt)
    scaler.scale(model(gc.tensor(_batches(1)[0][0])).sum()).backward()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        scaler.step(opt)
    with pytest.raises(RuntimeError, match="after step"):
        scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="Closure"):
        scaler.update()
        scaler.step(opt, closure=lambda: 0)
    half = gc.tensor(np.ones(2, dtype=np.float16), requires_grad=True)
    half.grad = gc.tensor(np.ones(2, dtype=np.float16))
    with pytest.raises(ValueError, match="FP16 gradients"):
        scaler.unscale_(gc.optim.SGD([half], lr=0.1))
    with pytest.raises(AssertionError, match="growth factor"):
        gc.amp.GradScaler("cpu", growth_factor=1.0)
    scaler.update(new_scale=8.0)
    assert scaler.get_scale() == 8.0
    scaler.update(new_scale=gc.tensor([4.0]))
    assert scaler.get_scale() == 4.0


def test_cuda_names():
    if not gc.cuda.is_available():
        with pytest.warns(UserWarning, match="CUDA is not available"):
            assert not gc.amp.GradScaler().is_enabled()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        scaler = gc.cuda.amp.GradScaler(enabled=False)  # nanoGPT's, for bfloat16 and float32 runs
    assert any(issubclass(w.category, FutureWarning) for w in seen)
    assert not scaler.is_enabled() and isinstance(scaler, gc.amp.GradScaler)
