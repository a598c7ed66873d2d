"""Attention on the GPU: the explicit path's kernels against the CPU backend; flash attention (the
mma.sync kernels, the wgmma forward and backward, attention-weight dropout) against the NumPy reference
kernels and the explicit path. Skipped without a GPU; see cuda_support.py."""

import numpy as np
import pytest

import gradcraft as gc
import gradcraft.nn.functional as gF
from cuda_support import BF16, CUDA_ONLY, FLOATS, both, check, cpu, randn, rel_err, rng

pytestmark = CUDA_ONLY

# ---------------------------------------------------------------- the explicit path's kernels


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", ["plain", "causal_T1", "causal_TS", "window", "gqa", "bool_mask", "float_mask"])
def test_sdpa(gpu, case, dtype):
    r = rng()
    B, H, Hkv, T, S, D = 2, 4, 4, 5, 5, 8
    attrs = {"scale": 1 / np.sqrt(D), "causal": False, "window": None}
    mask = None
    if case == "causal_T1":
        T, S, attrs["causal"] = 1, 9, True
    elif case == "causal_TS":
        T, S, attrs["causal"] = 3, 7, True
    elif case == "window":
        T, S, attrs["causal"], attrs["window"] = 6, 6, True, 2
    elif case == "gqa":
        Hkv, attrs["causal"] = 2, True
    elif case == "bool_mask":
        mask = r.random((1, 1, T, S)) < 0.7
        mask[..., 0] = True
    elif case == "float_mask":
        mask = randn((B, 1, T, S), dtype, r)
    q, k, v = randn((B, H, T, D), dtype, r), randn((B, Hkv, S, D), dtype, r), randn((B, Hkv, S, 3), dtype, r)
    g = randn((B, H, T, 3), dtype, r)
    extra = [mask] if mask is not None else []
    check(gpu, "sdpa", q, k, v, *extra, **attrs)
    check(gpu, "sdpa_backward", q, k, v, g, *extra, **attrs)


# ---------------------------------------------------------------- flash attention (tensor cores)


def _case_id(c):
    """A case's test id: B2H4kv4T64S64D64cwNone for (2, 4, 4, 64, 64, 64, True, None)."""
    return "B{}H{}kv{}T{}S{}D{}{}w{}".format(*c[:6], "c" * c[6], c[7])


def _flash_inputs(case, dtype, r):
    """q (B, H, T, D), k and v (B, Hkv, S, D) and the output gradient dO (B, H, T, D), drawn from r in
    that order, and the attention attributes of `case` (B, H, Hkv, T, S, D, causal, window)."""
    B, H, Hkv, T, S, D, causal, window = case
    q, k, v = randn((B, H, T, D), dtype, r), randn((B, Hkv, S, D), dtype, r), randn((B, Hkv, S, D), dtype, r)
    g = randn((B, H, T, D), dtype, r)
    return q, k, v, g, {"scale": 1 / np.sqrt(D), "causal": causal, "window": window}


# (B, H, Hkv, T, S, D, causal, window): tile-aligned and ragged sizes, GQA ratios 1/2/4, windows that
# skip whole tiles, queries aligned with the last T of S keys (a KV cache), T > S, one query (decoding).
FLASH_CASES = [
    (2, 4, 4, 64, 64, 64, True, None),
    (1, 4, 2, 100, 100, 64, True, None),
    (2, 8, 2, 77, 77, 128, True, None),
    (1, 2, 2, 130, 130, 48, True, 40),
    (1, 3, 1, 33, 200, 64, True, None),
    (2, 2, 2, 1, 150, 32, True, None),
    (1, 2, 2, 90, 70, 96, False, None),
    (1, 2, 1, 257, 257, 128, True, 64),
    (1, 2, 2, 129, 129, 64, False, 16),
    (1, 4, 4, 300, 300, 48, True, None),
    (1, 2, 2, 200, 200, 128, False, None),
]


@pytest.mark.parametrize("dtype", [BF16, np.float16])
@pytest.mark.parametrize("case", FLASH_CASES, ids=_case_id)
def test_flash_attention(gpu, case, dtype):
    q, k, v, g, attrs = _flash_inputs(case, dtype, rng())
    (out, lse), (ref_out, ref_lse) = both(gpu, "flash_attention", q, k, v, **attrs)
    limit = 1e-2 if dtype == BF16 else 2e-3
    assert out.dtype == dtype and lse.dtype == np.float32
    assert rel_err(out, ref_out) < limit
    visible = np.isfinite(ref_lse)
    np.testing.assert_array_equal(np.isfinite(lse), visible)
    np.testing.assert_allclose(lse[visible], ref_lse[visible], rtol=1e-3, atol=1e-3)
    # The backward pass from the reference's output and statistics, so both sides get the same inputs.
    got, expected = both(gpu, "flash_attention_backward", q, k, v, ref_out, ref_lse, g, **attrs)
    for name, a, e in zip(("dq", "dk", "dv"), got, expected):
        assert a.dtype == e.dtype
        assert rel_err(a, e) < 2 * limit, name


HOPPER_CASES = [  # (B, H, Hkv, T, S, D, causal, window): the wgmma forward's head dims, ragged tiles
    (2, 4, 4, 128, 128, 64, True, None),
    (1, 4, 2, 300, 300, 64, True, None),
    (1, 4, 1, 77, 77, 128, True, None),
    (1, 2, 2, 513, 513, 128, True, 200),
    (1, 3, 3, 33, 260, 64, True, None),
    (1, 2, 2, 1, 150, 128, True, None),
    (1, 2, 2, 190, 70, 64, True, None),
    (1, 2, 1, 257, 257, 128, False, None),
    (1, 2, 2, 129, 129, 64, False, 16),
    (1, 2, 2, 300, 40, 128, True, None),  # query tiles with no key to see (T > S, causal)
    (1, 2, 2, 300, 40, 64, True, None),
    (1, 2, 2, 100, 100, 64, False, 2**31 - 1),  # a window wider than S hides nothing (no int32 overflow)
]


@pytest.mark.parametrize("variant", range(1))  # (beyond a head dim's variants: skipped)
@pytest.mark.parametrize("dtype", [BF16, np.float16])
@pytest.mark.parametrize("case", HOPPER_CASES, ids=_case_id)
def test_hopper_flash_forward(gpu, case, dtype, variant):
    """The wgmma forward (flash_hopper.cu, sm_90 only), each variant the package runs
    (flash_variants.PRODUCTION_VARIANTS; the lab's: dev/cuda/check_flash_hopper.py), against the NumPy
    reference and the mma.sync kernel, every output element written (the outputs start as NaN). A
    persistent variant must give the same bits from a grid of one or two blocks, each then taking many
    query tiles in turn."""
    import cupy as cp

    from gradcraft.backend.cuda import flash_attention

    if not flash_attention.hopper(dtype, case[5]):
        pytest.skip("the wgmma forward runs on compute capability 9.0 only")
    B, H, Hkv, T, S, D, causal, window = case
    if variant >= len(flash_attention.PRODUCTION_VARIANTS["fwd"][D]):
        pytest.skip(f"no such variant at head dim {D}")
    q, k, v, _, attrs = _flash_inputs(case, dtype, rng())
    ref_out, ref_lse = cpu().reference_kernels["flash_attention"](q, k, v, **attrs)
    dq, dk, dv = (gpu.from_numpy(a) for a in (q, k, v))
    out = cp.full((B, T, H, D), np.nan, dtype=np.float32).astype(dtype).transpose(0, 2, 1, 3)
    lse = cp.full((B, H, T), np.nan, dtype=np.float32)
    strides = [[np.int64(s // a.itemsize) for s in a.strides[:3]] for a in (dq, dk, dv)]
    tiles = flash_attention.PRODUCTION_VARIANTS["fwd"][D][variant]  # (keys per tile, warpgroups per block[, kind])
    flash_attention._hopper_fwd(dq, dk, dv, out, lse, *strides, attrs["scale"], causal, window, tiles=tiles)
    if tiles[2:] and tiles[2] in flash_attention.PERSISTENT_KINDS:
        for blocks in (1, 2):
            out2, lse2 = cp.full(out.shape, np.nan, dtype=np.float32).astype(dtype), cp.full_like(lse, np.nan)
            args = (dq, dk, dv, out2, lse2, *strides, attrs["scale"], causal, window)
            flash_attention._hopper_fwd(*args, tiles=tiles, blocks=blocks)
            np.testing.assert_array_equal(cp.asnumpy(out2).view(np.uint16), cp.asnumpy(out).view(np.uint16))
            np.testing.assert_array_equal(cp.asnumpy(lse2), cp.asnumpy(lse))
    out, lse = cp.asnumpy(out), cp.asnumpy(lse)
    limit = 1e-2 if dtype == BF16 else 2e-3
    assert rel_err(out, ref_out) < limit
    visible = np.isfinite(ref_lse)
    np.testing.assert_array_equal(np.isfinite(lse), visible)
    np.testing.assert_allclose(lse[visible], ref_lse[visible], rtol=1e-3, atol=1e-3)
    monkey = pytest.MonkeyPatch()
    monkey.setenv("GRADCRAFT_HOPPER_ATTENTION", "0")  # the mma.sync kernel, for a second opinion
    try:
        old_out, _ = gpu.run("flash_attention", [dq, dk, dv], attrs)
    finally:
        monkey.undo()
    assert rel_err(out, gpu.to_numpy(old_out)) < limit


def _backward_case(gpu, case, dtype):
    """A backward test's inputs on the GPU (q, k, v, the reference output and lse, dO), the NumPy
    reference's dq, dk, dv, and the attention attributes of `case`."""
    q, k, v, g, attrs = _flash_inputs(case, dtype, rng())
    ref_out, ref_lse = cpu().reference_kernels["flash_attention"](q, k, v, **attrs)
    expected = cpu().reference_kernels["flash_attention_backward"](q, k, v, ref_out, ref_lse, g, **attrs)
    return [gpu.from_numpy(a) for a in (q, k, v, ref_out, ref_lse, g)], expected, attrs


def _nan_gradients(inputs, dtype):
    """dq, dk, dv for q, k, v = inputs[:3], laid out as the launcher lays them out ((B, T, heads, D) seen
    as (B, heads, T, D)), all NaN: a test then sees every element written."""
    import cupy as cp

    shapes = [(a.shape[0], a.shape[2], a.shape[1], a.shape[3]) for a in inputs[:3]]
    return [cp.full(s, np.nan, dtype=np.float32).astype(dtype).transpose(0, 2, 1, 3) for s in shapes]


@pytest.mark.parametrize("variant", range(2))
@pytest.mark.parametrize("dtype", [BF16, np.float16])
@pytest.mark.parametrize("case", HOPPER_CASES, ids=_case_id)
def test_hopper_flash_backward(gpu, case, dtype, variant):
    """The wgmma backward (flash_hopper_bwd.cu: dq and dk/dv, or dk/dv adding dQ up itself, sm_90 only),
    each (dq, dk/dv) pair the package runs (flash_variants.PRODUCTION_VARIANTS: the default and the
    deterministic one; the lab's: dev/cuda/check_flash_hopper.py), against the NumPy reference and the
    mma.sync kernels, every gradient element written (they start as NaN)."""
    import cupy as cp

    from gradcraft.backend.cuda import flash_attention

    B, H, Hkv, T, S, D, causal, window = case
    if not flash_attention.hopper(dtype, D):
        pytest.skip("the wgmma backward runs on compute capability 9.0 only")
    if variant >= len(flash_attention.PRODUCTION_VARIANTS["bwd"][D]):
        pytest.skip(f"no such variant at head dim {D}")
    inputs, expected, attrs = _backward_case(gpu, case, dtype)
    grads = _nan_gradients(inputs, dtype)
    tiles = flash_attention.PRODUCTION_VARIANTS["bwd"][D][variant]
    launches = flash_attention.backward_launches(*inputs, *grads, attrs["scale"], causal, window, tiles=tiles)
    for launch in launches.values():
        launch()
    limit = 2e-2 if dtype == BF16 else 4e-3
    for name, a, e in zip(("dq", "dk", "dv"), grads, expected):
        assert rel_err(cp.asnumpy(a), e) < limit, name
    monkey = pytest.MonkeyPatch()
    monkey.setenv("GRADCRAFT_HOPPER_ATTENTION", "0")  # the mma.sync kernels, for a second opinion
    try:
        old = gpu.run("flash_attention_backward", inputs, attrs)
    finally:
        monkey.undo()
    for name, a, e in zip(("dq", "dk", "dv"), grads, old):
        assert rel_err(cp.asnumpy(a), gpu.to_numpy(e)) < limit, name


SPLIT_CASES = [c for c in HOPPER_CASES if c[1] != c[2]] + [  # grouped-query cases, G up to 8
    (1, 16, 2, 200, 200, 128, True, None),
    (2, 8, 1, 130, 130, 64, False, None),
    (1, 6, 2, 190, 70, 128, True, 50),
]


@pytest.mark.parametrize("dtype", [BF16, np.float16])
@pytest.mark.parametrize("case", SPLIT_CASES, ids=_case_id)
def test_hopper_backward_split_sweeps(gpu, case, dtype):
    """The warp-specialised fused backward with each key tile's sweep over its G query heads split over
    `parts` blocks, for every divisor of G (the blocks add dk and dv up in float32, then converted):
    against the NumPy reference, every gradient element written (they start as NaN)."""
    import cupy as cp

    from gradcraft.backend.cuda import flash_attention

    B, H, Hkv, T, S, D, causal, window = case
    if not flash_attention.hopper(dtype, D):
        pytest.skip("the wgmma backward runs on compute capability 9.0 only")
    inputs, expected, attrs = _backward_case(gpu, case, dtype)
    G = H // Hkv
    for parts in (p for p in range(1, G + 1) if G % p == 0):
        grads = _nan_gradients(inputs, dtype)
        launches = flash_attention.backward_launches(*inputs, *grads, attrs["scale"], causal, window, parts=parts)
        assert ("dk" in launches) == (parts > 1)  # (dk's and dv's conversions)
        for launch in launches.values():
            launch()
        limit = 2e-2 if dtype == BF16 else 4e-3
        for name, a, e in zip(("dq", "dk", "dv"), grads, expected):
            assert rel_err(cp.asnumpy(a), e) < limit, f"{name}, parts {parts}"


def test_hopper_backward_splits_sweeps_of_many_columns(gpu):
    """kv_parts: a block per query head where the G heads' columns exceed KV_SWEEP_COLUMNS (512), else one
    block sweeping all G."""
    from gradcraft.backend.cuda import flash_attention

    assert flash_attention.KV_SWEEP_COLUMNS == 512
    expected = {(1, 128): 1, (2, 128): 1, (4, 128): 1, (8, 128): 8, (16, 128): 16, (6, 128): 6, (5, 128): 5}
    expected |= {(4, 64): 1, (8, 64): 1, (16, 64): 16, (12, 64): 12, (3, 64): 1}
    for (G, D), parts in expected.items():
        assert flash_attention.kv_parts(G, D) == parts, (G, D)


def test_hopper_backward_deterministic_mode_repeats_its_bits(gpu, monkeypatch):
    """GRADCRAFT_DETERMINISTIC=1 swaps the fused Hopper backward (dQ added up with float32 atomics,
    whose order varies) for the separate dq kernel: two runs give the same bits, and the same
    gradients as the fused default within rounding."""
    import cupy as cp

    from gradcraft.backend.cuda import flash_attention

    B, H, T, D = 2, 4, 700, 64
    if not flash_attention.hopper(BF16, D):
        pytest.skip("the wgmma backward runs on compute capability 9.0 only")
    r = rng()
    q, k, v, g = (randn((B, H, T, D), BF16, r) for _ in range(4))
    attrs = {"scale": 1 / np.sqrt(D), "causal": True, "window": None}
    out, lse = cpu().reference_kernels["flash_attention"](q, k, v, **attrs)
    inputs = [gpu.from_numpy(a) for a in (q, k, v, out, lse, g)]

    def backward():
        return [cp.asnumpy(a) for a in flash_attention.flash_attention_backward(*inputs, **attrs)]

    fused = backward()
    monkeypatch.setenv("GRADCRAFT_DETERMINISTIC", "1")
    first, second = backward(), backward()
    for name, a, b, c in zip(("dq", "dk", "dv"), first, second, fused):
        np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16), err_msg=name)
        assert rel_err(a, c) < 1e-2, name


def test_flash_attention_strided_inputs(gpu):
    """q, k, v as views of one packed (B, T, 3, H, D) projection, as the model makes them."""
    r = rng()
    B, T, H, D = 2, 150, 4, 64
    qkv = randn((B, T, 3, H, D), BF16, r)
    g = randn((B, H, T, D), BF16, r)
    views = [np.ascontiguousarray(qkv[:, :, i].transpose(0, 2, 1, 3)) for i in range(3)]
    attrs = {"scale": 0.125, "causal": True, "window": None}
    ref_out, ref_lse = cpu().reference_kernels["flash_attention"](*views, **attrs)
    ref_grads = cpu().reference_kernels["flash_attention_backward"](*views, ref_out, ref_lse, g, **attrs)
    packed = gpu.from_numpy(qkv)
    q, k, v = (packed[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    assert not q.flags.c_contiguous
    out, lse = gpu.run("flash_attention", [q, k, v], attrs)
    assert rel_err(gpu.to_numpy(out), ref_out) < 1e-2
    grads = gpu.run(
        "flash_attention_backward",
        [
            q,
            k,
            v,
            gpu.from_numpy(ref_out),
            gpu.from_numpy(ref_lse),
            gpu.from_numpy(g).transpose(0, 2, 1, 3).copy().transpose(0, 2, 1, 3),
        ],
        attrs,
    )
    for a, e in zip(grads, ref_grads):
        assert rel_err(gpu.to_numpy(a), e) < 2e-2


@pytest.mark.parametrize("window", [None, 24])
def test_flash_attention_op_matches_explicit(gpu, window):
    """Through the op layer: bf16 attention on CUDA picks the flash kernels; the float32 explicit path
    (weights kept) is the reference, values and gradients."""
    from gradcraft.ops.attention import sdpa_kernel

    r = rng()
    B, H, Hkv, T, D = 2, 6, 2, 97, 64
    data = [r.standard_normal(s) for s in ((B, H, T, D), (B, Hkv, T, D), (B, Hkv, T, D))]
    g = r.standard_normal((B, H, T, D))
    results = {}
    for dtype, mode in ((gc.bfloat16, "auto"), (gc.float32, "math")):
        leaves = [gc.tensor(x, dtype=dtype, device="cuda", requires_grad=True) for x in data]
        with sdpa_kernel(mode):
            y = gF.scaled_dot_product_attention(*leaves, is_causal=True, window=window, save_weights=True)
        assert (y._node.op == "flash_attention") == (mode == "auto")
        y.backward(gc.tensor(g, dtype=dtype, device="cuda"))
        results[mode] = [y.float().numpy()] + [t.grad.float().numpy() for t in leaves]
    for got, expected in zip(results["auto"], results["math"]):
        assert rel_err(got, expected) < 1.5e-2


DROPOUT_CASES = [
    (2, 4, 2, 100, 100, 64, True, None),
    (1, 2, 2, 77, 77, 128, True, None),
    (1, 2, 1, 130, 130, 48, True, 40),
    (1, 3, 3, 33, 90, 64, True, None),
    (1, 2, 2, 70, 61, 32, False, None),
]


@pytest.mark.parametrize("dtype", [BF16, np.float16])
@pytest.mark.parametrize("case", DROPOUT_CASES, ids=_case_id)
def test_flash_attention_dropout(gpu, case, dtype):
    """The dropout kernels draw backend/philox.py's mask: output and the three gradients equal the NumPy
    reference with the same state and stream (a different mask would be far off)."""
    r = rng()
    q, k, v, g, attrs = _flash_inputs(case, dtype, r)
    state = np.array([int(r.integers(0, 2**62)), int(r.integers(0, 2**31))], dtype=np.int64)
    attrs.update(dropout_p=0.3, stream=int(r.integers(0, 50)))
    (out, lse), (ref_out, ref_lse) = both(gpu, "flash_attention", q, k, v, state, **attrs)
    limit = 1e-2 if dtype == BF16 else 2e-3
    assert rel_err(out, ref_out) < limit
    visible = np.isfinite(ref_lse)
    np.testing.assert_allclose(lse[visible], ref_lse[visible], rtol=1e-3, atol=1e-3)  # lse is undropped
    got, expected = both(gpu, "flash_attention_backward", q, k, v, ref_out, ref_lse, g, state, **attrs)
    for name, a, e in zip(("dq", "dk", "dv"), got, expected):
        assert rel_err(a, e) < 2 * limit, name


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_attention_dropout_kernel(gpu, dtype):
    """The explicit path's dropout: the same mask as the NumPy reference, blocks at offsets included."""
    r = rng()
    state = np.array([int(r.integers(0, 2**62)), 5], dtype=np.int64)
    x = randn((2, 3, 2, 13, 21), dtype, r)
    check(gpu, "attention_dropout", x, state, p=0.4, stream=2, T=13, S=21, i0=0, j0=0)
    check(gpu, "attention_dropout", x[..., :7, :9].copy(), state, p=0.1, stream=0, T=40, S=50, i0=20, j0=13)


@pytest.mark.parametrize("window", [None, 24])
def test_flash_attention_dropout_op_matches_explicit(gpu, window):
    """Through the op layer, with dropout: bf16 flash kernels against the float32 explicit path, each
    run at the same dropout counter and stream (so with the same mask)."""
    from gradcraft.ops.attention import sdpa_kernel
    from gradcraft.ops.creation import advance_dropout

    r = rng()
    B, H, Hkv, T, D = 2, 4, 2, 97, 64
    data = [r.standard_normal(s) for s in ((B, H, T, D), (B, Hkv, T, D), (B, Hkv, T, D))]
    g = r.standard_normal((B, H, T, D))
    results = {}
    for dtype, mode in ((gc.bfloat16, "auto"), (gc.float32, "math")):
        gc.manual_seed(1234)
        advance_dropout("cuda")
        leaves = [gc.tensor(x, dtype=dtype, device="cuda", requires_grad=True) for x in data]
        with sdpa_kernel(mode):
            y = gF.scaled_dot_product_attention(*leaves, is_causal=True, window=window, dropout_p=0.2)
        assert (y._node.op == "flash_attention") == (mode == "auto")
        y.backward(gc.tensor(g, dtype=dtype, device="cuda"))
        results[mode] = [y.float().numpy()] + [t.grad.float().numpy() for t in leaves]
    for got, expected in zip(results["auto"], results["math"]):
        assert rel_err(got, expected) < 1.5e-2
