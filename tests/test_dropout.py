"""Dropout's random state: masks from (seed, counter, stream, index), one counter step per training step.

The masks come from an int64 [seed, counter] tensor in device memory (gradcraft/ops/creation.py), so a
training step captured as a CUDA graph draws new masks on every replay. Without a GPU, replay is
played here by `CPUGraphs`, which records the CPU backend's kernel calls of one step and runs them
again with the same arrays and launch attributes, as a CUDA graph does: a mask baked into a recorded
call would repeat, and the replayed training would part from the eager one.
"""

import json

import numpy as np
import pytest

import gradcraft as gc
import gradcraft.nn.functional as F
from gradcraft.device import get_backend
from gradcraft.capture import CapturedStep
from gradcraft.errors import UserError
from gradcraft.models import Transformer, preset
from gradcraft.ops.creation import advance_dropout
from gradcraft.optim import AdamW, grad_norm_and_scale

REFERENCE = get_backend("cpu").reference_kernels["dropout"]
M64 = (1 << 64) - 1


def mask(n, seed, counter, stream, p=0.5):
    state = np.array([seed, counter], dtype=np.uint64).view(np.int64)
    return REFERENCE(np.ones(n), state, p=p, stream=stream) != 0


def philox4x64(c, k0, k1):
    """philox.cuh's `philox4x64_block`, in Python integers."""
    M0, M1, W0, W1 = 0xD2E7470EE14C6C93, 0xCA5A826395121157, 0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B
    c0, c1, c2, c3 = c
    for _ in range(10):
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = (p1 >> 64) ^ c1 ^ k0, p1 & M64, (p0 >> 64) ^ c3 ^ k1, p0 & M64
        k0, k1 = (k0 + W0) & M64, (k1 + W1) & M64
    return c0, c1, c2, c3


def kernel_mask(n, seed, counter, stream, p):
    """dropout.cu's mask, element by element: word i % 4 of block (i / 4 + 1, counter, stream, 0)."""
    words = [w for q in range((n + 3) // 4) for w in philox4x64((q + 1, counter, stream, 0), seed, 0)]
    return np.array([(w >> 11) * 2.0**-53 >= p for w in words[:n]])


# ------------------------------------------------------------------ the kernel


def test_the_numpy_reference_is_the_cuda_kernels_philox_mapping():
    """Bit for bit what dropout.cu computes (the GPU test compares the CUDA kernel with the reference)."""
    rng = np.random.default_rng(0)
    for n in (1, 5, 37):
        seed, counter, stream = (int(v) for v in rng.integers(0, 2**63 - 1, size=3))
        np.testing.assert_array_equal(mask(n, seed, counter, stream, 0.3), kernel_mask(n, seed, counter, stream, 0.3))


def test_a_mask_depends_only_on_seed_counter_stream_and_index():
    base = mask(1000, 7, 3, 2)
    np.testing.assert_array_equal(mask(1000, 7, 3, 2), base)
    np.testing.assert_array_equal(mask(37, 7, 3, 2), base[:37])  # element i's bit does not depend on the size
    state = np.array([7, 3], dtype=np.int64)
    for dtype in (np.float32, np.float64, np.dtype("bfloat16")):  # nor on the dtype
        np.testing.assert_array_equal(
            REFERENCE(np.ones((10, 100), dtype), state, p=0.5, stream=2) != 0, base.reshape(10, 100)
        )
    for other in (mask(1000, 8, 3, 2), mask(1000, 7, 4, 2), mask(1000, 7, 3, 3)):
        assert 0.3 < (other != base).mean() < 0.7  # any other seed, counter or stream: another mask
    assert 0.45 < base.mean() < 0.55


def test_counter_0_stream_0_is_numpys_philox_stream_of_the_seed():
    """The old seed-only form (kernel tests): state [seed, 0], the stream that `rand` draws from."""
    x = np.ones(1001)
    np.testing.assert_array_equal(
        REFERENCE(x, p=0.3, seed=123) != 0, np.random.Generator(np.random.Philox(key=123)).random(1001) >= 0.3
    )


# ------------------------------------------------------------------ the op


def _state():
    return gc.get_rng_state()["dropout"]["cpu"]  # [counter, streams]


def test_forward_and_backward_use_the_same_mask_and_two_layers_differ():
    gc.manual_seed(5)
    x = gc.ones(64, 50, dtype=gc.float64, requires_grad=True)
    a, b = F.dropout(x, p=0.4), F.dropout(x, p=0.4)
    (a.sum() + 3 * b.sum()).backward()
    ya, yb = a.numpy(), b.numpy()
    np.testing.assert_allclose(x.grad.numpy(), ya + 3 * yb)  # each backward regenerated its forward's mask
    assert 0.3 < ((ya != 0) != (yb != 0)).mean() < 0.7
    counter, _ = _state()
    np.testing.assert_array_equal(ya.ravel() != 0, mask(3200, 5, counter, 0, 0.4))
    np.testing.assert_array_equal(yb.ravel() != 0, mask(3200, 5, counter, 1, 0.4))


def test_advance_moves_the_counter_and_restarts_the_streams():
    gc.manual_seed(11)
    x = gc.ones(500, dtype=gc.float64)
    assert _state() == [0, 0]
    advance_dropout("cpu")
    first = [F.dropout(x).numpy() != 0 for _ in range(2)]
    assert _state() == [1, 2]
    advance_dropout("cpu")
    second = [F.dropout(x).numpy() != 0 for _ in range(2)]
    assert _state() == [2, 2]
    for step, masks in ((1, first), (2, second)):
        for stream, m in enumerate(masks):
            np.testing.assert_array_equal(m, mask(500, 11, step, stream))


def test_manual_seed_repeats_everything_and_the_rng_state_round_trips():
    def draws():
        x = gc.ones(300, dtype=gc.float64)
        advance_dropout("cpu")
        return [F.dropout(x).numpy(), gc.rand(5).numpy(), F.dropout(x).numpy()]

    gc.manual_seed(2)
    first = draws()
    saved = json.loads(json.dumps(gc.get_rng_state()))  # what a checkpoint keeps
    later = draws()
    gc.manual_seed(2)
    for got, expected in zip(draws(), first):
        np.testing.assert_array_equal(got, expected)
    gc.manual_seed(99)
    gc.set_rng_state(saved)
    for got, expected in zip(draws(), later):
        np.testing.assert_array_equal(got, expected)


def test_an_old_rng_state_still_loads():
    gc.manual_seed(4)
    gc.set_rng_state(np.random.default_rng(1).bit_generator.state)  # a checkpoint from before dropout's state
    assert gc.rand(3).numpy().shape == (3,)


def test_a_lazy_mask_realized_after_the_counter_moved_is_refused():
    gc.manual_seed(0)
    y = F.dropout(gc.ones(10))
    advance_dropout("cpu")
    with pytest.raises(UserError, match="modified in place"):
        y.numpy()


# ------------------------------------------------------------------ captured steps (CUDA graphs played on the CPU)


class CPUGraphs:
    """CUDA-graph semantics for the CPU backend: `capture` records every kernel call of one step (the
    engine's, the gradient norm's and AdamW's) with its arrays and attributes; `replay` runs the calls
    again, writing each result into the array the recording produced, and runs no Python of the step.
    While recording, nothing goes back to the memory pool (a graph's private pool)."""

    METHODS = ("run", "grad_norm", "adamw_step")

    def __init__(self, backend):
        self.backend = backend
        self.replays = 0

    def capture(self, fn):
        calls = []

        def recorder(method):
            def call(*args, **kwargs):
                out = method(*args, **kwargs)
                calls.append((method, args, kwargs, out))
                return out

            return call

        for name in self.METHODS:
            setattr(self.backend, name, recorder(getattr(self.backend, name)))
        self.backend.release = lambda array: None
        try:
            result = fn()
        finally:
            for name in self.METHODS + ("release",):
                delattr(self.backend, name)
        # The recording ran the step once already (CUDA's records without running: its first replay runs).
        return result, {"calls": calls, "ran": True}

    def replay(self, graph):
        if graph.pop("ran", False):
            return
        self.replays += 1
        for method, args, kwargs, out in graph["calls"]:
            new = method(*args, **kwargs)
            for old, value in zip(_outputs(out), _outputs(new)):
                if old is not None and not np.may_share_memory(old, value):  # (views of inputs need nothing)
                    np.copyto(old, value)

    def release_graph(self, graph):
        pass


def _outputs(result):
    return result if isinstance(result, tuple) else (result,)


@pytest.fixture
def cpu_graphs(monkeypatch):
    backend = get_backend("cpu")
    graphs = CPUGraphs(backend)
    for name in ("capture", "replay", "release_graph"):
        monkeypatch.setattr(backend, name, getattr(graphs, name), raising=False)
    return graphs


def _training(graph, steps=6, advance=True):
    gc.manual_seed(0)
    model = Transformer(preset("toy-v0", dim=32, n_heads=2, n_layers=2, seq_len=16, vocab_size=64, dropout=0.2))
    opt = AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    backend = get_backend("cpu")
    x_in = gc.zeros(4, 16, dtype=gc.int64).realize()
    y_in = gc.zeros(4, 16, dtype=gc.int64).realize()

    def step():
        if advance:
            advance_dropout("cpu")
        _, loss = model(x_in, y_in)
        loss.backward()
        stats = grad_norm_and_scale(model.parameters(), 0.5)
        opt.step(grad_scale=stats, prepare=False)
        opt.zero_grad()
        return loss, stats

    run = CapturedStep(step, "cpu") if graph else step
    rng = np.random.default_rng(1)
    losses = []
    for _ in range(steps):
        data = rng.integers(0, 64, size=(4, 17))
        backend.write(x_in._buf, data[:, :-1])
        backend.write(y_in._buf, data[:, 1:])
        opt.prepare()
        loss, stats = run()
        losses.append((loss.item(), float(stats.numpy()[0])))
    return losses, {k: v.numpy() for k, v in model.state_dict().items()}


def test_replayed_steps_with_dropout_equal_eager_steps(cpu_graphs):
    eager_losses, eager_weights = _training(graph=False)
    graph_losses, graph_weights = _training(graph=True)
    assert cpu_graphs.replays == 3  # 2 eager warm-up steps, the capture, 3 replays
    assert graph_losses == eager_losses
    for key in eager_weights:
        np.testing.assert_array_equal(graph_weights[key], eager_weights[key], err_msg=key)


def test_without_the_counters_move_replays_would_repeat_the_masks(cpu_graphs):
    """The check above has teeth: with no advance inside the step, the replays (steps 4-6) reuse the
    recorded step's masks, while eager steps keep drawing new ones (new stream ids)."""
    eager_losses, _ = _training(graph=False, advance=False)
    graph_losses, _ = _training(graph=True, advance=False)
    assert graph_losses[:3] == eager_losses[:3] and graph_losses[3:] != eager_losses[3:]


# ------------------------------------------------------------------ the trainer


def _train(tmp_path, name, resume=False, **over):
    from gradcraft.data.tokenfile import write_token_file
    from gradcraft.training.log import read_log
    from gradcraft.training.trainer import TrainConfig, train

    data = tmp_path / "tokens.bin"
    if not data.exists():
        write_token_file(
            str(data), np.random.default_rng(0).integers(0, 64, size=4000).astype(np.uint16), vocab_size=64
        )
    notes = []
    tc = TrainConfig(
        dataset=str(data),
        model_dir=str(tmp_path / name),
        steps=10,
        batch_size=4,
        target_batch=8,
        warmup_steps=2,
        checkpoint_every=5,
        progress=False,
        **over,
    )
    train(
        tc,
        preset("toy-v0", vocab_size=64, dim=32, n_heads=2, n_layers=2, seq_len=16, dropout=0.1),
        resume=resume,
        log=notes.append,
    )
    rows = [(r["step"], r["loss"], r["grad_norm"]) for r in read_log(str(tmp_path / name / "training_log.csv"))]
    return rows, notes


def test_training_with_dropout_replays_the_graph_and_resumes_exactly(cpu_graphs, tmp_path):
    """Two micro-batches a step (gradient accumulation): eager, replayed, and replayed in two sessions
    (stopped at step 4, resumed from its checkpoint) log the same losses and norms, bit for bit."""
    eager, _ = _train(tmp_path, "eager", cuda_graph="off")
    graph, notes = _train(tmp_path, "graph", cuda_graph="on")
    assert cpu_graphs.replays == 7 and not [n for n in notes if "eagerly" in n]  # 2 warm-up steps, the capture
    assert graph == eager
    _train(tmp_path, "split", cuda_graph="on", stop_after=4)
    split, _ = _train(tmp_path, "split", resume=True, cuda_graph="on")
    assert cpu_graphs.replays == 7 + 1 + 3
    assert split == eager
