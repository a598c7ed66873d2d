"""Decoding through fixed KV caches (gradcraft/ops/kv_cache.py): the slot write and the attention over
the filled slots, against PyTorch's attention on exactly those keys; on the CPU's kernels, through the
primitives alone (ops/fallback.py), and on CUDA against the CPU (skipped without a GPU)."""

import numpy as np
import pytest
import torch

import gradcraft as gc
import gradcraft.nn.functional as F
from gradcraft.device import is_available
from gradcraft.errors import UserError

# (B, H, Hkv, L, D, positions): one shared position, per-row positions, a full ring (positions past L)
CASES = [
    (1, 4, 4, 16, 8, [5]),
    (3, 6, 2, 12, 16, [0, 7, 11]),
    (2, 4, 1, 8, 48, [3, 20]),  # row 1 has wrapped a ring of 8: every slot is filled
    (2, 2, 2, 5, 128, [4]),
    (1, 2, 2, 200, 64, [450]),  # a wrapped ring long enough for the CUDA kernel to split it into chunks
]


def _inputs(B, H, Hkv, L, D, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, H, 1, D)).astype(np.float32)
    k = rng.standard_normal((B, Hkv, L, D)).astype(np.float32)
    v = rng.standard_normal((B, Hkv, L, D)).astype(np.float32)
    return q, k, v


def _torch_reference(q, k, v, positions):
    """Each row's query against its filled slots [0, min(p + 1, L)) through torch's SDPA."""
    B, H, _, D = q.shape
    Hkv, L = k.shape[1:3]
    positions = np.broadcast_to(np.asarray(positions), (B,))
    out = []
    for b in range(B):
        n = min(positions[b] + 1, L)
        kb = torch.tensor(k[b, :, :n]).repeat_interleave(H // Hkv, dim=0)
        vb = torch.tensor(v[b, :, :n]).repeat_interleave(H // Hkv, dim=0)
        out.append(torch.nn.functional.scaled_dot_product_attention(torch.tensor(q[b]), kb, vb).numpy())
    return np.stack(out)


@pytest.mark.parametrize("B,H,Hkv,L,D,positions", CASES)
def test_attention_over_filled_slots_matches_torch(B, H, Hkv, L, D, positions):
    q, k, v = _inputs(B, H, Hkv, L, D)
    out = F.kv_cache_attention(gc.tensor(q), gc.tensor(k), gc.tensor(v), gc.tensor(np.array(positions)))
    np.testing.assert_allclose(out.numpy(), _torch_reference(q, k, v, positions), rtol=1e-5, atol=1e-5)


def test_attention_ignores_what_the_unfilled_slots_hold():
    q, k, v = _inputs(2, 4, 2, 10, 8)
    garbage_k, garbage_v = k.copy(), v.copy()
    garbage_k[:, :, 4:] = 1e4  # slots past position 3 were never written
    garbage_v[:, :, 4:] = np.nan
    position = gc.tensor(np.array([3]))
    clean = F.kv_cache_attention(gc.tensor(q), gc.tensor(k), gc.tensor(v), position).numpy()
    dirty = F.kv_cache_attention(gc.tensor(q), gc.tensor(garbage_k), gc.tensor(garbage_v), position).numpy()
    np.testing.assert_array_equal(clean, dirty)


@pytest.mark.parametrize("positions", [[2], [0, 9, 13]])
def test_write_puts_each_row_in_its_slot_and_leaves_the_rest(positions):
    B, Hkv, L, D = 3, 2, 10, 4
    rng = np.random.default_rng(1)
    cache = rng.standard_normal((B, Hkv, L, D)).astype(np.float32)
    value = rng.standard_normal((B, Hkv, 1, D)).astype(np.float32)
    expected = cache.copy()
    for b, p in enumerate(np.broadcast_to(np.asarray(positions), (B,))):
        expected[b, :, p % L] = value[b, :, 0]  # position 13 of a ring of 10 lives at slot 3
    t = gc.tensor(cache)
    written = F.kv_cache_write(t, gc.tensor(value), gc.tensor(np.array(positions)))
    np.testing.assert_array_equal(written.numpy(), expected)
    np.testing.assert_array_equal(t.numpy(), expected)  # in place: the cache itself holds it


def test_bad_shapes_and_positions_are_user_errors():
    q, k, v = _inputs(2, 4, 2, 6, 8)
    with pytest.raises(UserError, match="position"):
        F.kv_cache_attention(gc.tensor(q), gc.tensor(k), gc.tensor(v), gc.tensor(np.array([1, 2, 3])))
    with pytest.raises(UserError, match="query"):
        F.kv_cache_attention(gc.tensor(k), gc.tensor(k), gc.tensor(v), gc.tensor(np.array([1])))
    with pytest.raises(UserError, match="value"):
        F.kv_cache_write(gc.tensor(k), gc.tensor(k), gc.tensor(np.array([1])))


def test_primitives_alone_compute_the_same_attention(primitives_only):
    q, k, v = _inputs(3, 6, 2, 12, 16)
    positions = np.array([0, 7, 11])
    fused = primitives_only.reference_kernels["kv_attention"](q, k, v, positions, scale=1 / np.sqrt(16))
    composed = F.kv_cache_attention(gc.tensor(q), gc.tensor(k), gc.tensor(v), gc.tensor(positions)).numpy()
    np.testing.assert_allclose(composed, fused, rtol=1e-5, atol=1e-6)


@pytest.mark.cuda
@pytest.mark.skipif(not is_available("cuda"), reason="needs CuPy and an NVIDIA GPU")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("B,H,Hkv,L,D,positions", CASES + [(2, 8, 2, 3000, 64, [2999, 1234])])
def test_cuda_kernels_match_the_cpu(B, H, Hkv, L, D, positions, dtype):
    dt = getattr(gc, dtype)
    q, k, v = _inputs(B, H, Hkv, L, D, seed=B * L + D)
    pos = np.array(positions)
    want = (
        F.kv_cache_attention(gc.tensor(q).to(dt), gc.tensor(k).to(dt), gc.tensor(v).to(dt), gc.tensor(pos))
        .float()
        .numpy()
    )
    got = (
        F.kv_cache_attention(
            gc.tensor(q, device="cuda").to(dt),
            gc.tensor(k, device="cuda").to(dt),
            gc.tensor(v, device="cuda").to(dt),
            gc.tensor(pos, device="cuda"),
        )
        .float()
        .numpy()
    )
    tol = {"float32": 1e-5, "bfloat16": 2e-2, "float16": 2e-3}[dtype]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    cache = gc.tensor(k, device="cuda").to(dt).realize()
    value = gc.tensor(q[:, :Hkv], device="cuda").to(dt)
    F.kv_cache_write(cache, value, gc.tensor(pos, device="cuda")).realize()
    expected = gc.tensor(k).to(dt).numpy().astype(np.float32)
    for b, p in enumerate(np.broadcast_to(pos, (B,))):
        expected[b, :, p % L] = gc.tensor(q[b, :Hkv, 0]).to(dt).float().numpy()
    np.testing.assert_array_equal(cache.float().numpy(), expected)


@pytest.mark.cuda
@pytest.mark.skipif(not is_available("cuda"), reason="needs CuPy and an NVIDIA GPU")
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_cuda_attention_spreads_a_nan_or_infinite_score_as_the_cpu_does(bad):
    """A NaN (or +inf) in a filled key makes that head's output NaN on both devices, also when the
    key sits alone in its chunk or its lane group (the split kernel must not drop it)."""
    q, k, v = _inputs(1, 2, 2, 600, 64, seed=5)
    k[0, 0, 0, :] = bad
    pos = np.array([4])
    want = F.kv_cache_attention(gc.tensor(q), gc.tensor(k), gc.tensor(v), gc.tensor(pos)).numpy()
    cuda = [gc.tensor(a, device="cuda").to(gc.bfloat16) for a in (q, k, v)]
    got = F.kv_cache_attention(*cuda, gc.tensor(pos, device="cuda")).float().numpy()
    assert np.isnan(want[0, 0]).all() and np.isfinite(want[0, 1]).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


@pytest.mark.cuda
@pytest.mark.skipif(not is_available("cuda"), reason="needs CuPy and an NVIDIA GPU")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_split_attention_gives_the_first_result_at_every_launch_and_replay(monkeypatch, dtype):
    """The split kernel's last block of each (row, head) merges the chunks and sets its counter back to
    0: launches in a row and replays of captured graphs all write the first launch's output, bit for
    bit (the output is poisoned before each, so a launch that writes nothing fails), and a graph
    captured earlier still does after others ran."""
    import cupy as cp

    from gradcraft.backend.cuda import kv_cache
    from gradcraft.backend.cuda import launch as L

    monkeypatch.setattr(L, "POISON", True)
    backend = gc.device.get_backend(gc.device.canonical("cuda"))
    groups = kv_cache.THREADS // kv_cache._split_lanes(np.dtype(dtype), 64)
    tol = {"float32": 1e-5, "bfloat16": 2e-2}[dtype]
    graphs = []

    def case(B, H, Hkv, length, position):
        """The launch (a function), PyTorch's result and the launch's splits."""
        q, k, v = (cp.asarray(a).astype(np.dtype(dtype)) for a in _inputs(B, H, Hkv, length, 64, seed=length))
        want = _torch_reference(*(a.astype(np.float32).get() for a in (q, k, v)), [position])
        position = cp.array([position])  # (a copy from the host: not in a capture)

        def run():
            return kv_cache._kv_attention(q, k, v, position, 1 / 8)

        return run, want, kv_cache._chunks(B * H, length, groups)[0]

    def check_replays(out, graph, first, times=3):
        for _ in range(times):
            out.view(np.uint8).fill(0xFF)  # NaN bits, on the stream that the replay follows
            backend.replay(graph)
            np.testing.assert_array_equal(out.get(), first)

    try:
        # many splits of a long filled cache, one head; the counters taken at the first (eager) launch
        run, want, splits = case(1, 1, 1, 8192, 8191)
        assert splits >= 16
        first = run().get()
        np.testing.assert_allclose(first.astype(np.float32), want, rtol=tol, atol=tol)
        np.testing.assert_array_equal(run().get(), first)
        out_one, graph_one = backend.capture(run)
        graphs.append(graph_one)
        run_one = run  # (its inputs must outlive the graph that reads them)
        check_replays(out_one, graph_one, first)
        # two heads, a cache filled in part, captured before any eager launch
        run, want, splits = case(1, 2, 1, 4096, 3000)
        assert splits >= 16
        out, graph = backend.capture(run)
        graphs.append(graph)
        backend.replay(graph)
        first_two = out.get()
        np.testing.assert_allclose(first_two.astype(np.float32), want, rtol=tol, atol=tol)
        check_replays(out, graph, first_two)
        np.testing.assert_array_equal(run().get(), first_two)
        np.testing.assert_array_equal(run().get(), first_two)
        check_replays(out_one, graph_one, first, times=2)  # the first graph still counts right
        del run_one
        # one split: the block writes the output itself
        run, want, splits = case(1, 2, 2, 16, 9)
        assert splits == 1
        first = run().get()
        np.testing.assert_allclose(first.astype(np.float32), want, rtol=tol, atol=tol)
        np.testing.assert_array_equal(run().get(), first)
        out, graph = backend.capture(run)
        graphs.append(graph)
        check_replays(out, graph, first)
    finally:
        for graph in graphs:
            backend.release_graph(graph)


def _append_case(B, H, Hkv, L, D, positions, rotary, seed=1):
    """Inputs of kv_cache_attention with this step's keys/values: query, caches, key, value, position
    and, if rotary, (cos, sin) rows at each row's position (or one row for all)."""
    q, k, v = _inputs(B, H, Hkv, L, D, seed=seed)
    rng = np.random.default_rng(seed + 1)
    key, value = (rng.standard_normal((B, Hkv, 1, D)).astype(np.float32) for _ in range(2))
    rope = None
    if rotary:
        angles = rng.uniform(0, 6, size=(len(positions), D // 2)).astype(np.float32)
        rope = (np.cos(angles), np.sin(angles))
    return q, k, v, key, value, np.array(positions), rope


def _append_attention(device, case, dtype=gc.float32):
    """F.kv_cache_attention with key/value/rotary on `device`: (output, k cache, v cache) as float32."""
    q, k, v, key, value, position, rope = case
    t = lambda a, d=dtype: gc.tensor(a, device=device).to(d)  # noqa: E731
    kc, vc = t(k).realize(), t(v).realize()
    rotary = None if rope is None else (t(rope[0], gc.float32), t(rope[1], gc.float32))
    out = F.kv_cache_attention(t(q), kc, vc, t(position, gc.int64), key=t(key), value=t(value), rotary=rotary)
    gc.realize(out)
    return [a.to(gc.float32).numpy() for a in (out, kc, vc)]


APPEND_CASES = [c + (r,) for c in CASES for r in (False, True)]


@pytest.mark.parametrize("B,H,Hkv,L,D,positions,rotary", APPEND_CASES)
def test_attention_with_this_steps_keys_is_the_rotation_the_write_and_the_attention(
    monkeypatch, B, H, Hkv, L, D, positions, rotary
):
    """One op (the kv_append_attention kernel) against the separate ops it stands for: rotary
    embedding of the query and key, the two cache writes, attention over the filled slots."""
    from gradcraft.device import get_backend

    case = _append_case(B, H, Hkv, L, D, positions, rotary)
    fused = _append_attention("cpu", case)
    monkeypatch.setattr(type(get_backend("cpu")), "kv_append_supported", lambda self, *a: False)
    composed = _append_attention("cpu", case)
    for a, b in zip(fused, composed):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    q, k, v, key, value, position, rope = case
    slots = np.broadcast_to(position, (B,)) % L
    for b in range(B):  # the value went in unrotated; the other slots kept what they held
        np.testing.assert_array_equal(fused[2][b, :, slots[b]], value[b, :, 0])
        others = np.arange(L) != slots[b]
        np.testing.assert_array_equal(fused[1][b, :, others], k[b, :, others])


@pytest.mark.skipif(not is_available("cuda"), reason="no CUDA device")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("B,H,Hkv,L,D,positions,rotary", APPEND_CASES)
def test_cuda_attention_with_this_steps_keys_matches_the_cpu(dtype, B, H, Hkv, L, D, positions, rotary):
    case = _append_case(B, H, Hkv, L, D, positions, rotary)
    want = _append_attention("cpu", case, getattr(gc, dtype))
    got = _append_attention("cuda", case, getattr(gc, dtype))
    tol = {"float32": 1e-4, "bfloat16": 2e-2}[dtype]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
