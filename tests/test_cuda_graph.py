"""Whole-step CUDA-graph capture: replayed steps compute what eager steps compute."""

import time

import numpy as np
import pytest

import gradcraft as gc
from gradcraft.capture import CapturedStep
from gradcraft.models import Transformer, preset
from gradcraft.ops.creation import advance_dropout
from gradcraft.optim import AdamW, grad_norm_and_scale


def _training(device, graph, steps=6, name="toy-v0", between=None, **over):
    gc.manual_seed(0)
    model = Transformer(preset(name, **over)).to(device)
    cfg = model.config
    opt = AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    backend = gc.device.get_backend(gc.device.canonical(device))
    x_in = gc.zeros(4, cfg.seq_len, dtype=gc.int64, device=device).realize()
    y_in = gc.zeros(4, cfg.seq_len, dtype=gc.int64, device=device).realize()

    def step():
        if cfg.uses_dropout:
            advance_dropout(device)  # new masks each step; recorded, so each replay moves the counter too
        _, loss = model(x_in, y_in)
        loss.backward()
        stats = grad_norm_and_scale(model.parameters(), 0.5)
        opt.step(grad_scale=stats, prepare=False)
        opt.zero_grad()
        return loss, stats

    run = CapturedStep(step, device) if graph else step
    rng = np.random.default_rng(1)
    losses = []
    for _ in range(steps):
        data = rng.integers(0, cfg.vocab_size, size=(4, cfg.seq_len + 1))
        backend.write(x_in._buf, data[:, :-1])
        backend.write(y_in._buf, data[:, 1:])
        opt.prepare()
        loss, stats = run()
        losses.append((loss.item(), float(stats.numpy()[0])))
        if between is not None:
            between()
    return losses, {k: v.numpy() for k, v in model.state_dict().items()}


def test_captured_step_runs_eagerly_where_the_device_cannot_capture():
    # One BLAS thread: the CPU backend's thread policy times the big products and may run one on one
    # thread in a training and on two in the next, and on some CPUs (seen on an AMD EPYC) OpenBLAS's
    # two then round differently, which would tell two identical eager trainings apart.
    from gradcraft.backend.cpu import blas

    before = blas.threads()
    blas.set_threads(1)
    try:
        (a, wa), (b, wb) = _training("cpu", graph=True, steps=4), _training("cpu", graph=False, steps=4)
    finally:
        if before is not None:
            blas.set_threads(before)
    assert a == b and all(np.array_equal(wa[k], wb[k]) for k in wa)


@pytest.mark.cuda
@pytest.mark.skipif(not gc.is_available("cuda"), reason="needs an NVIDIA GPU with CuPy")
@pytest.mark.parametrize(
    "name,over", [("toy-v0", {}), ("mallmoc", dict(dim=64, n_layers=2, n_heads=4, seq_len=32, vocab_size=500))]
)
def test_replayed_steps_match_eager_steps(name, over):
    eager_losses, eager_weights = _training("cuda", graph=False, name=name, **over)
    graph_losses, graph_weights = _training("cuda", graph=True, name=name, **over)
    np.testing.assert_allclose(graph_losses, eager_losses, rtol=1e-5)
    for key in eager_weights:
        np.testing.assert_allclose(graph_weights[key], eager_weights[key], rtol=1e-5, atol=1e-6, err_msg=key)


@pytest.mark.cuda
@pytest.mark.skipif(not gc.is_available("cuda"), reason="needs an NVIDIA GPU with CuPy")
def test_a_replayed_step_keeps_its_tables_when_the_cache_drops_them():
    """The optimizer's kernels read pointer tables that a captured graph copies from pinned host
    memory at every replay: tables the cache drops between replays (many other tables made eagerly)
    must stay alive and unchanged for the graph."""
    import numpy as np_

    from gradcraft.backend.cuda import launch

    made = iter(range(10**9))

    def flood():  # more new tables than the cache keeps
        for _ in range(2 * launch.CACHED_CONSTANTS):
            launch.constant([next(made), 7, 9], np_.int64)

    eager_losses, eager_weights = _training("cuda", graph=False)
    graph_losses, graph_weights = _training("cuda", graph=True, between=flood)
    np.testing.assert_allclose(graph_losses, eager_losses, rtol=1e-5)
    for key in eager_weights:
        np.testing.assert_allclose(graph_weights[key], eager_weights[key], rtol=1e-5, atol=1e-6, err_msg=key)


@pytest.mark.cuda
@pytest.mark.skipif(not gc.is_available("cuda"), reason="needs an NVIDIA GPU with CuPy")
def test_gradcraft_train_with_and_without_graph_capture_logs_the_same_losses(tmp_path):
    from gradcraft.data.tokenfile import write_token_file
    from gradcraft.models import preset
    from gradcraft.training.log import read_log
    from gradcraft.training.trainer import TrainConfig, train

    tokens = np.random.default_rng(0).integers(0, 64, size=5000).astype(np.uint16)
    write_token_file(str(tmp_path / "t.bin"), tokens, vocab_size=64)
    logs = []
    for mode in ("off", "on"):
        tc = TrainConfig(
            dataset=str(tmp_path / "t.bin"),
            model_dir=str(tmp_path / mode),
            steps=8,
            batch_size=4,
            target_batch=8,
            warmup_steps=2,
            device="cuda:0",
            cuda_graph=mode,
            progress=False,
            checkpoint_every=4,
        )
        train(tc, preset("toy-v0", vocab_size=64, dim=32, n_heads=2, seq_len=16), log=lambda msg: None)
        logs.append([float(r["loss"]) for r in read_log(str(tmp_path / mode / "training_log.csv"))])
    np.testing.assert_allclose(logs[1], logs[0], rtol=1e-5)


@pytest.mark.cuda
@pytest.mark.skipif(not gc.is_available("cuda"), reason="needs an NVIDIA GPU with CuPy")
def test_a_replayed_training_loop_takes_no_new_device_memory():
    gc.manual_seed(0)
    model = Transformer(preset("toy-v0")).to("cuda")
    opt = AdamW(model.parameters(), lr=1e-3)
    backend = gc.device.get_backend("cuda:0")
    x_in = gc.zeros(4, 32, dtype=gc.int64, device="cuda").realize()

    def step():
        _, loss = model(x_in, x_in)
        loss.backward()
        opt.step(grad_scale=grad_norm_and_scale(model.parameters(), 1.0), prepare=False)
        opt.zero_grad()
        return loss

    run = CapturedStep(step, "cuda")
    for _ in range(4):  # two eager warm-up steps, the capture, one replay
        opt.prepare()
        run().item()
    before = backend.memory_info()["reserved_bytes"]
    for _ in range(5):
        opt.prepare()
        run().item()
    assert backend.memory_info()["reserved_bytes"] == before


@pytest.mark.cuda
@pytest.mark.skipif(not gc.is_available("cuda"), reason="needs an NVIDIA GPU with CuPy")
def test_bf16_mixed_precision_training_on_the_gpu_learns(tmp_path):
    from gradcraft.data.tokenfile import write_token_file
    from gradcraft.training.log import read_log
    from gradcraft.training.trainer import TrainConfig, train

    pattern = np.random.default_rng(0).integers(0, 64, size=40)
    write_token_file(str(tmp_path / "t.bin"), np.tile(pattern, 200).astype(np.uint16), vocab_size=64)
    tc = TrainConfig(
        dataset=str(tmp_path / "t.bin"),
        model_dir=str(tmp_path / "bf16"),
        steps=40,
        batch_size=8,
        warmup_steps=4,
        max_lr=3e-3,
        device="cuda:0",
        dtype="bfloat16",
        progress=False,
        checkpoint_every=40,
    )
    train(tc, preset("toy-v0", vocab_size=64, dim=64, n_heads=4, seq_len=32), log=lambda msg: None)
    losses = [float(r["loss"]) for r in read_log(str(tmp_path / "bf16" / "training_log.csv"))]
    assert np.isfinite(losses).all() and losses[-1] < losses[0] - 1.0


@pytest.mark.cuda
@pytest.mark.skipif(not gc.is_available("cuda"), reason="needs an NVIDIA GPU with CuPy")
@pytest.mark.parametrize("family", ["gpt", "llama_gqa"])
def test_decoding_replays_one_graph_per_token(family):
    """Generation on CUDA captures the decoding step once and replays it: the logits of every step
    equal the growing-cache path's, and greedy decoding gives the same tokens."""
    from test_generate import _decode_logits
    from test_models import randomize, small_config

    from gradcraft.inference.generate import SamplingParams, generate

    model = Transformer(small_config(family, seq_len=40))
    randomize(model, seed=4)
    model.to("cuda")
    prompts = [[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]]
    _, growing = _decode_logits(model, prompts, 30, static=False, device="cuda")
    decoder, replayed = _decode_logits(model, prompts, 30, static=True, device="cuda")
    assert decoder.captured.graph is not None  # captured after the warm-up steps, replayed since
    decoder.close()
    np.testing.assert_allclose(np.array(replayed), np.array(growing), rtol=1e-4, atol=1e-4)
    greedy = SamplingParams(max_tokens=30)
    backend = gc.device.get_backend("cuda:0")
    graphs = len(backend._graph_memory)
    assert generate(model, prompts, greedy, static=True) == generate(model, prompts, greedy, static=False)
    assert len(backend._graph_memory) == graphs  # each generation releases its graph and memory


@pytest.mark.cuda
@pytest.mark.skipif(not gc.is_available("cuda"), reason="needs an NVIDIA GPU with CuPy")
@pytest.mark.parametrize("family", ["gpt", "hybrid_window", "moe_window"])
@pytest.mark.parametrize("step_prompts", [0, 32])
def test_continuous_batching_replays_one_graph_per_bucket(family, step_prompts):
    """The scheduler on CUDA: each bucket's decoding step is captured and replayed, and the greedy
    answers under load are the CPU scheduler's (up to rounding: the same tokens on these models), with
    prompts prefilled or fed through the step alike on both (a mixture-of-experts prefill has a
    capacity limit that the step has not: the two ways may answer differently)."""
    from test_batching import PROMPTS, make_model, served

    from gradcraft.inference.generate import SamplingParams
    from gradcraft.inference.batching import Scheduler

    requests = [(PROMPTS[i % len(PROMPTS)], SamplingParams(max_tokens=12)) for i in range(6)]
    cpu = Scheduler(make_model(family), slots=4, step_prompts=step_prompts)
    try:
        expected = served(cpu, requests)
    finally:
        cpu.close()
    model = make_model(family)
    model.to("cuda")
    scheduler = Scheduler(model, slots=4, step_prompts=step_prompts)
    try:
        assert served(scheduler, requests) == expected
        assert any(b.captured is not None and b.captured.graph is not None for b in scheduler.buckets.values())
    finally:
        scheduler.close()


# ------------------------------------------------------------------ dropout inside the captured step


def _reference_mask(n, seed, counter, stream, p):
    state = np.array([seed, counter], dtype=np.uint64).view(np.int64)
    return gc.device.get_backend("cpu").reference_kernels["dropout"](np.ones(n), state, p=p, stream=stream) != 0


@pytest.mark.cuda
@pytest.mark.skipif(not gc.is_available("cuda"), reason="needs an NVIDIA GPU with CuPy")
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
@pytest.mark.parametrize("n,p", [(1, 0.5), (4097, 0.9), (1000003, 0.1)])
def test_cuda_dropout_masks_equal_the_numpy_reference(dtype, n, p):
    import cupy as cp

    gpu, cpu = gc.device.get_backend("cuda:0"), gc.device.get_backend("cpu")
    rng = np.random.default_rng()
    seed, counter, stream = (int(v) for v in rng.integers(0, 2**63 - 1, size=3))
    state = np.array([seed, counter], dtype=np.int64)
    x = rng.standard_normal(n).astype(dtype)
    expected = cpu.reference_kernels["dropout"](x, state, p=p, stream=stream)
    got = cp.asnumpy(gpu.run("dropout", [gpu.from_numpy(x), cp.asarray(state)], {"p": p, "stream": stream}))
    np.testing.assert_array_equal(got == 0, expected == 0)  # the same mask, bit for bit
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=1e-6)


@pytest.mark.cuda
@pytest.mark.skipif(not gc.is_available("cuda"), reason="needs an NVIDIA GPU with CuPy")
def test_a_replayed_dropout_reads_the_counter_that_each_replay_moves():
    """Call k of a captured step (eager, recorded or replayed) draws the mask of counter k: the kernel
    reads seed and counter from device memory, and the counter's move is part of the graph."""
    import gradcraft.nn.functional as F

    gc.manual_seed(123)
    x = gc.ones(3000, device="cuda").realize()

    def step():
        advance_dropout("cuda")
        a, b = F.dropout(x, p=0.3), F.dropout(x, p=0.3)
        gc.realize(a, b)  # inside the step, so that the graph records the dropout kernels too
        return a, b

    run = CapturedStep(step, "cuda")
    for k in range(1, 7):
        a, b = run()
        np.testing.assert_array_equal(a.numpy() != 0, _reference_mask(3000, 123, k, 0, 0.3), err_msg=f"call {k}")
        np.testing.assert_array_equal(b.numpy() != 0, _reference_mask(3000, 123, k, 1, 0.3), err_msg=f"call {k}")
    assert run.graph is not None
    run.close()


@pytest.mark.cuda
@pytest.mark.skipif(not gc.is_available("cuda"), reason="needs an NVIDIA GPU with CuPy")
def test_replayed_steps_with_dropout_match_eager_steps():
    over = dict(dim=64, n_heads=4, seq_len=32, dropout=0.1)
    eager_losses, eager_weights = _training("cuda", graph=False, **over)
    graph_losses, graph_weights = _training("cuda", graph=True, **over)
    # (eager steps draw new masks every step: a replay that repeated the recorded step's masks would
    # part from them by far more than rounding)
    np.testing.assert_allclose(graph_losses, eager_losses, rtol=1e-5)
    for key in eager_weights:
        np.testing.assert_allclose(graph_weights[key], eager_weights[key], rtol=1e-5, atol=1e-6, err_msg=key)


@pytest.mark.cuda
@pytest.mark.skipif(not gc.is_available("cuda"), reason="needs an NVIDIA GPU with CuPy")
def test_gradcraft_train_with_dropout_replays_the_graph_and_resumes(tmp_path):
    from gradcraft.data.tokenfile import write_token_file
    from gradcraft.training.log import read_log
    from gradcraft.training.trainer import TrainConfig, train

    tokens = np.random.default_rng(0).integers(0, 64, size=5000).astype(np.uint16)
    write_token_file(str(tmp_path / "t.bin"), tokens, vocab_size=64)
    mc = preset("toy-v0", vocab_size=64, dim=32, n_heads=2, seq_len=16, dropout=0.1)

    def session(name, mode, resume=False, **over):
        notes = []
        tc = TrainConfig(
            dataset=str(tmp_path / "t.bin"),
            model_dir=str(tmp_path / name),
            steps=10,
            batch_size=4,
            target_batch=8,
            warmup_steps=2,
            device="cuda:0",
            cuda_graph=mode,
            progress=False,
            checkpoint_every=5,
            **over,
        )
        train(tc, mc, resume=resume, log=notes.append)
        assert not [n for n in notes if "eagerly" in n], notes  # dropout no longer turns the graph off
        return [(float(r["loss"]), float(r["grad_norm"])) for r in read_log(str(tmp_path / name / "training_log.csv"))]

    eager, graph = session("off", "off"), session("on", "on")
    np.testing.assert_allclose(graph, eager, rtol=1e-5)
    session("split", "on", stop_after=4)
    resumed = session("split", "on", resume=True)  # from step 4's checkpoint, its dropout counter included
    np.testing.assert_allclose(resumed, graph, rtol=1e-5)


@pytest.mark.cuda
@pytest.mark.skipif(not gc.is_available("cuda"), reason="needs an NVIDIA GPU with CuPy")
def test_the_scheduler_captures_every_bucket_before_the_first_request():
    """On a GPU the scheduler captures each bucket's step at start-up (as vLLM does), so traffic that
    grows the batch never waits for a capture; the warm-up steps count for nothing and leave no trace
    in the answers."""
    from test_batching import PROMPTS, make_model, served

    from gradcraft.inference.generate import SamplingParams
    from gradcraft.inference.batching import Scheduler

    model = make_model("llama_gqa")
    model.to("cuda")
    requests = [(PROMPTS[i % len(PROMPTS)], SamplingParams(max_tokens=6)) for i in range(5)]
    cold = Scheduler(model, slots=8, warm_up=False)
    try:
        expected = served(cold, requests)
    finally:
        cold.close()
    scheduler = Scheduler(model, slots=8)
    try:
        deadline = time.monotonic() + 60
        while len(scheduler.buckets) < 3 and time.monotonic() < deadline:  # buckets 2, 4 and 8
            time.sleep(0.01)
        time.sleep(0.2)
        assert sorted(scheduler.buckets) == [2, 4, 8] and scheduler.steps == 0
        assert all(b.captured is not None and b.captured.graph is not None for b in scheduler.buckets.values())
        assert served(scheduler, requests) == expected
    finally:
        scheduler.close()
