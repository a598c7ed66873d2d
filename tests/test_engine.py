"""The engine's promises: laziness, freeing, memory counters, autograd behaviour, errors, dtypes."""

import os
import subprocess
import sys

import numpy as np
import pytest

import gradcraft as gc
import gradcraft.nn.functional as F
from gradcraft.errors import UserError


def test_import_does_not_pull_in_a_framework():
    code = (
        "import sys, gradcraft, gradcraft.nn.functional; "
        "print([m for m in ('torch', 'jax', 'tensorflow') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_building_a_thousand_ops_allocates_nothing_until_realize():
    x = gc.randn(64, 64).realize()
    (x * 0.999 + 0.001).tanh()  # the CPU's cached 0-d constants (ops/elementwise.py) are made once, here
    before = gc.memory_stats()["allocations"]
    y = x
    for i in range(1000):
        y = (y * 0.999 + 0.001).tanh() if i % 2 else y.exp().log()
    assert gc.memory_stats()["allocations"] == before
    assert y._buf is None
    y.realize()
    assert gc.memory_stats()["allocations"] > before
    expected = x.numpy().astype(np.float64)
    for i in range(1000):
        expected = np.tanh(expected * 0.999 + 0.001) if i % 2 else np.log(np.exp(expected))
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4, atol=1e-5)


def _mlp_step(batch=64, width=256, depth=4):
    gc.manual_seed(0)
    x = gc.randn(batch, width).realize()
    weights = [gc.randn(width, width, requires_grad=True) for _ in range(depth)]
    for w in weights:
        w.realize()
    h = x
    intermediate_bytes = 0
    for w in weights:
        h = (h @ w).relu()
        intermediate_bytes += 2 * batch * width * 4  # matmul output and relu output
    loss = (h * h).mean()
    return loss, weights, intermediate_bytes


def test_engine_frees_intermediates_during_forward_and_backward():
    loss, weights, forward_bytes = _mlp_step()
    live_before = gc.memory_stats()["live_bytes"]
    gc.reset_peak_memory_stats()
    loss.backward()
    peak = gc.memory_stats()["peak_bytes"] - live_before
    # Every intermediate of forward and backward, had nothing been freed: the forward activations,
    # as many activation gradients, and one gradient per weight.
    all_intermediates = 2 * forward_bytes + sum(w.numel() * 4 for w in weights)
    assert peak < all_intermediates
    assert all(w.grad is not None and w.grad.is_realized for w in weights)


def test_pool_recycles_buffers_in_a_steady_loop():
    x = gc.randn(128, 128).realize()
    for _ in range(3):
        (x.exp() * 2 + 1).sum().realize()
    fresh = gc.memory_stats()["fresh_allocations"]
    for _ in range(5):
        (x.exp() * 2 + 1).sum().realize()
    assert gc.memory_stats()["fresh_allocations"] - fresh <= 5  # only the small kept results are new


def test_recomputing_a_freed_random_intermediate_gives_the_same_values():
    gc.manual_seed(1)
    r = gc.rand(5)
    y = r * 2
    y.realize()  # r was an intermediate of this schedule: freed, not kept
    assert r._buf is None
    np.testing.assert_allclose(r.numpy() * 2, y.numpy())


def test_manual_seed_makes_random_ops_reproducible():
    gc.manual_seed(7)
    a = gc.randn(3, 3).numpy()
    gc.manual_seed(7)
    assert np.array_equal(a, gc.randn(3, 3).numpy())
    assert not np.array_equal(a, gc.randn(3, 3).numpy())


def test_gradients_accumulate_and_zero_grad_clears():
    x = gc.tensor([1.0, 2.0], requires_grad=True)
    (x * 3).sum().backward()
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 7.0])
    x.zero_grad()
    assert x.grad is None


def test_no_grad_and_detach_stop_the_graph():
    x = gc.tensor([1.0, 2.0], requires_grad=True)
    with gc.no_grad():
        y = x * 2
    assert not y.requires_grad
    z = (x * 2).detach()
    assert not z.requires_grad and z.is_leaf
    with pytest.raises(UserError, match="does not require grad"):
        y.sum().backward()


def test_backward_needs_a_scalar_or_a_gradient():
    x = gc.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(UserError, match=r"non-scalar tensor of shape torch.Size\(\[2\]\)"):
        (x * 2).backward()
    (x * 2).backward(gc.tensor([1.0, 1.0]))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


def test_integer_tensors_cannot_require_grad():
    with pytest.raises(UserError, match="only floating-point tensors can require gradients, got int64"):
        gc.tensor([1, 2], requires_grad=True)


def test_shape_mismatch_names_both_shapes():
    with pytest.raises(UserError, match=r"torch.Size\(\[2, 3\]\) and torch.Size\(\[4\]\)"):
        gc.zeros(2, 3) + gc.zeros(4)
    with pytest.raises(UserError, match=r"torch.Size\(\[2, 3\]\) @ torch.Size\(\[4, 5\]\)"):
        gc.zeros(2, 3) @ gc.zeros(4, 5)


def test_norm_weights_must_have_the_normalized_shape():
    F = gc.nn.functional
    with pytest.raises(UserError, match=r"rms_norm: weight has shape \(1,\); it must be the normalized shape \(8,\)"):
        F.rms_norm(gc.zeros(4, 8), 8, weight=gc.ones(1))
    with pytest.raises(UserError, match=r"layer_norm: bias has shape \(16,\)"):
        F.layer_norm(gc.zeros(4, 8), 8, weight=gc.ones(8), bias=gc.zeros(16))


def test_device_mismatch_and_unknown_device():
    with pytest.raises(UserError, match="unknown device 'tpu'"):
        gc.zeros(2, device="tpu")


def test_dtype_promotion_follows_pytorch():
    f32, f64, i64 = gc.zeros(2), gc.zeros(2, dtype=gc.float64), gc.zeros(2, dtype=gc.int64)
    assert (f32 + f64).dtype == gc.float64
    assert (i64 + f32).dtype == gc.float32
    assert (i64 * 2).dtype == gc.int64
    assert (i64 * 2.5).dtype == gc.float32
    assert (f32 * 2).dtype == gc.float32
    assert (i64 / 2).dtype == gc.float32
    assert (gc.zeros(2, dtype=gc.bfloat16) + gc.zeros(2, dtype=gc.float16)).dtype == gc.float32
    assert (gc.zeros(2, dtype=gc.uint8) + gc.zeros(2, dtype=gc.int32)).dtype == gc.int32
    assert (gc.zeros(2, dtype=gc.bool) + gc.zeros(2, dtype=gc.bool)).dtype == gc.bool
    assert gc.tensor([1.5]).dtype == gc.float32 and gc.tensor([1]).dtype == gc.int64


@pytest.mark.parametrize("dtype", [gc.bfloat16, gc.float16])
def test_half_precision_ops_compute_in_float32_and_round_once(dtype):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal((16, 4)).astype(np.float32)
    x = gc.tensor(a).to(dtype)
    out = F.softmax((x @ gc.tensor(b).to(dtype)).tanh(), dim=-1)
    assert out.dtype == dtype
    ref = np.tanh(a.astype(dtype.np).astype(np.float32) @ b.astype(dtype.np).astype(np.float32))
    ref = np.exp(ref) / np.exp(ref).sum(-1, keepdims=True)
    np.testing.assert_allclose(out.float().numpy(), ref, rtol=2e-2, atol=2e-2)


def test_half_precision_gradients_flow():
    w = gc.randn(4, 4).to(gc.bfloat16).realize().requires_grad_()
    (w.float() ** 2).sum().backward()
    assert w.grad.dtype == gc.bfloat16
    np.testing.assert_allclose(w.grad.float().numpy(), 2 * w.float().numpy(), rtol=1e-2)


def test_assign_writes_in_place_and_earlier_lazy_tensors_keep_the_old_data():
    p = gc.tensor([1.0, 2.0])
    earlier = p * 10  # built from the old data, not realized: it computes from them, as in PyTorch
    p.assign(p * 2).realize()
    np.testing.assert_allclose(p.numpy(), [2.0, 4.0])
    np.testing.assert_allclose(earlier.numpy(), [10.0, 20.0])
    w = gc.tensor([1.0, 2.0], requires_grad=True)
    out = (w * w).sum()  # lazy; reads w, which an update then overwrites
    with gc.no_grad():
        w.assign(w - 1).realize()
    assert out.item() == 5.0  # the value from the old w
    with pytest.raises(UserError, match="modified by an inplace operation"):
        out.backward()  # its gradient would need the old w


def test_debug_trace_prints_kernels():
    code = "import gradcraft as gc; (gc.ones(2, 3) * 2).sum().realize()"
    env = dict(os.environ, GRADCRAFT_DEBUG="2")
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stderr
    assert "mul" in err and "sum" in err and "MB" in err and "ms" in err


def test_to_device_cpu_roundtrip_and_repr():
    x = gc.arange(6).reshape(2, 3)
    assert x.to("cpu").tolist() == [[0, 1, 2], [3, 4, 5]]
    assert "dtype=int64" in repr(x)
    assert x.float().dtype == gc.float32 and x.to(gc.float64).dtype == gc.float64


def test_getitem_errors_are_clear():
    x = gc.zeros(2, 3)
    with pytest.raises(UserError, match="out of bounds"):
        x[5]
    with pytest.raises(UserError, match="too many indices"):
        x[0, 0, 0]


# ------------------------------------------------------------------ casts grouped into one launch


def _bf16_steps(steps: int = 2):
    """Parameters and losses of a tiny gpt2 trained in bf16 mixed precision (weights cast in the
    forward, weight gradients cast back in the backward)."""
    from gradcraft.models import ModelConfig, Transformer

    gc.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=50, seq_len=8, dim=16, n_layers=2, n_heads=2))
    opt = gc.optim.AdamW(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(0)
    idx, targets = (gc.tensor(rng.integers(0, 50, size=(2, 8))) for _ in range(2))
    losses = []
    for _ in range(steps):
        logits, loss = model(idx, targets, compute_dtype=gc.bfloat16)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, {k: v.numpy() for k, v in model.state_dict().items()}


@pytest.fixture
def cast_many_launches(monkeypatch):
    """The CPU backend given a cast_many made of its own cast kernel (engine/grouping.py then groups
    casts there as on a GPU); each launch's (from, to) dtype names, one list per launch."""
    backend = gc.device.get_backend("cpu")
    launches = []

    def cast_many(self, arrays, dtypes):
        launches.append([(a.dtype.name, np.dtype(d).name) for a, d in zip(arrays, dtypes)])
        return [self.kernels["cast"](a, d) for a, d in zip(arrays, dtypes)]

    monkeypatch.setattr(type(backend), "cast_many", cast_many, raising=False)
    return launches


def test_a_device_with_cast_many_gets_the_weights_and_gradients_casts_in_two_launches(request):
    """engine/grouping.py, on the CPU given a cast_many made of its own cast kernel: the same bits
    as one kernel per cast, with the weights' casts in one launch and the gradients' in another."""
    plain_losses, plain_params = _bf16_steps()
    launches = request.getfixturevalue("cast_many_launches")  # from here on
    assert gc.device.get_backend("cpu").has("cast_many")
    ran = request.getfixturevalue("cpu_kernels_run")
    grouped_losses, grouped_params = _bf16_steps()
    assert grouped_losses == plain_losses
    for name, value in plain_params.items():
        np.testing.assert_array_equal(grouped_params[name], value, err_msg=name)
    n_params = len(plain_params)
    weights = [g for g in launches if g[0] == ("float32", "bfloat16")]
    gradients = [g for g in launches if g[0] == ("bfloat16", "float32")]
    assert len(weights) == len(gradients) == 2  # one of each per step
    # every weight but the position table (looked up in float32); every weight gradient but the
    # position table's and the token table's (whose cast output layer gradient is added to its
    # lookup's in float32)
    assert [len(g) for g in weights] == [n_params - 1] * 2
    assert [len(g) for g in gradients] == [n_params - 2] * 2
    assert ran.count("cast") <= 4 * 2  # what is left: the activations' casts


def test_casts_are_not_grouped_when_a_caller_watches_targets_as_they_come(cast_many_launches):
    w = [gc.randn(4, 4, requires_grad=True) for _ in range(3)]
    x = gc.randn(2, 4).to(gc.bfloat16)
    loss = sum(((x @ p.to(gc.bfloat16)).float() ** 2).sum() for p in w)
    seen = []
    loss.backward(on_grad_ready=lambda leaf, buffer: seen.append(buffer.dtype.name))
    # the weights' casts only; the gradients' ran as they came
    assert [len(g) for g in cast_many_launches] == [3]
    assert seen == ["float32"] * 3
    for p in w:
        expected = 2 * x.float().numpy().T @ (x.float().numpy() @ p.to(gc.bfloat16).float().numpy())
        np.testing.assert_allclose(p.grad.numpy(), expected, rtol=2e-2, atol=1e-2)


@pytest.mark.parametrize("flash", [False, True])
def test_after_backward_no_lazy_reader_of_a_weight_is_left(flash, monkeypatch, cpu_kernels_run):
    """While the caller holds the model's lazy logits, nothing built before backward still reads a
    weight: the optimizer's in-place update then copies no weight to keep such readers right. With
    flash attention, whose node saves its softmax statistics (a reference cycle), too."""
    from gradcraft.models import ModelConfig, Transformer
    from gradcraft.ops.function import live_readers

    backend = gc.device.get_backend("cpu")
    monkeypatch.setattr(type(backend), "flash_attention_supported", lambda self, *a: flash)
    gc.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=50, seq_len=8, dim=16, n_layers=2, n_heads=2))
    idx = gc.tensor(np.random.default_rng(0).integers(0, 50, size=(2, 8)))
    ran = cpu_kernels_run
    logits, loss = model(idx, idx, compute_dtype=gc.bfloat16)
    loss.backward()
    assert ("flash_attention" in ran) == flash
    stale = [name for name, p in model.named_parameters() if live_readers(p)]
    assert stale == []
    expected = logits.numpy()
    opt = gc.optim.AdamW(model.parameters(), lr=1e-2)
    ran.clear()
    opt.step()
    assert "contiguous" not in ran
    np.testing.assert_array_equal(logits.numpy(), expected)  # the logits of the weights before the step


def test_a_grouped_cast_of_a_view_reads_the_data_before_a_write_in_the_same_schedule(cast_many_launches):
    # Casts that no kernel reads run after the schedule; the assign (moved last by the schedule) must
    # not come before them: their inputs are views of the buffer it writes.
    w0 = np.arange(6, dtype=np.float32).reshape(2, 3)
    w = gc.tensor(w0)
    flat, transposed = w.reshape(6).to(gc.bfloat16), w.mT.to(gc.float16)
    gc.realize(flat, transposed, w.assign(w * 2))
    np.testing.assert_array_equal(flat.float().numpy(), w0.reshape(6))
    np.testing.assert_array_equal(transposed.float().numpy(), w0.T)
    np.testing.assert_array_equal(w.numpy(), 2 * w0)


def test_kernel_host_time_sums_each_ops_kernel_calls_while_the_block_lasts():
    from gradcraft.engine.realize import kernel_host_time

    a = gc.randn(64, 64, requires_grad=True).realize()
    with kernel_host_time() as outer:
        (a @ a).realize()
        with kernel_host_time() as inner:
            (a @ a).sum().backward()
    assert set(inner) <= set(outer) and "matmul" in outer and "matmul" in inner
    assert all(seconds > 0 for seconds in outer.values())
    assert outer["matmul"] > inner["matmul"]  # the outer block also saw the first product
    assert "sum" in inner
    before = dict(outer)
    (a @ a).realize()  # after the blocks: counted nowhere
    assert outer == before


def _one_kernel_graphs():
    """Graphs whose realize schedules one kernel: a single-output op, a multi-output op whose gradient
    rule reads a second output (flash attention's log-sum-exp), and no-grad ops."""
    gc.manual_seed(3)
    q, k, v = (gc.randn(1, 2, 8, 4, requires_grad=True).realize() for _ in range(3))
    x = gc.randn(3, 5).realize()
    from gradcraft.ops.attention import sdpa_kernel

    with sdpa_kernel("flash"):
        flash = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return [
        ("exp of a leaf that requires grad", lambda: [q.exp()], q),
        ("flash attention", lambda: [flash], q),
        ("a no-grad op and a realized target", lambda: [x.exp(), x], None),
    ]


@pytest.mark.parametrize("case", range(3))
def test_one_kernel_realize_keeps_what_the_general_schedule_keeps(case, monkeypatch):
    """realize() of one kernel takes a short path (engine/realize.py's _realize_one); on_ready forces the
    general loop. Both must give the same values, keep the same saved outputs, and drop the same recipes."""
    from gradcraft.engine import realize as engine

    short_paths = []
    one = engine._realize_one
    monkeypatch.setattr(engine, "_realize_one", lambda *a: short_paths.append(1) or one(*a))
    realize = engine.realize
    states = []
    for general in (False, True):
        name, build, leaf = _one_kernel_graphs()[case]
        targets = build()
        node = targets[0]._node
        short_paths.clear()
        realize(targets, on_ready=(lambda t, b: None) if general else None)
        assert len(short_paths) == (0 if general else 1)
        saved = [s._buf is not None for s in node.saved]
        states.append(([t.numpy().copy() for t in targets], saved, [t._node is None for t in targets], len(node.saved)))
        if leaf is not None:
            targets[0].sum().backward()  # the saved outputs serve the backward pass
            states[-1] += (leaf.grad.numpy().copy(),)
    (values_a, *rest_a), (values_b, *rest_b) = states
    for a, b in zip(values_a, values_b):
        np.testing.assert_array_equal(a, b)
    assert rest_a[:3] == rest_b[:3], name
    if leaf is not None:
        np.testing.assert_array_equal(rest_a[3], rest_b[3])
    if case == 1:
        assert rest_a[0] == [True] and rest_a[2] == 1  # the log-sum-exp kept for the backward pass
