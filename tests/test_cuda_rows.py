"""The CUDA row kernels (softmax, cross-entropy, norms, activations, swiglu, rope, embedding) called
directly at odd sizes, then at every layout and access width; dropout and random numbers; and the
binary ops' 16-byte and one-value kernels; against the CPU backend. Skipped without a GPU; see cuda_support.py."""

import numpy as np
import pytest

from cuda_support import BF16, CUDA_ONLY, FLOATS, both, check, close, cpu, misaligned, randn, rng

pytestmark = CUDA_ONLY

# ---------------------------------------------------------------- fused kernels, directly, odd sizes


@pytest.mark.parametrize("dtype", FLOATS + [np.float64])
@pytest.mark.parametrize("shape,axis", [((1, 1), -1), ((3, 50257), 1), ((37, 1000), -1), ((5, 33, 7), 1), ((4, 3), 0)])
def test_softmax_family(gpu, shape, axis, dtype):
    x = randn(shape, dtype, scale=3)
    g = randn(shape, dtype)
    for op in ("softmax", "log_softmax"):
        y = cpu().run(op, [x], {"axis": axis})
        check(gpu, op, x, axis=axis)
        check(gpu, f"{op}_backward", np.asarray(y), g, axis=axis)


@pytest.mark.parametrize("dtype", FLOATS + [np.float64])
@pytest.mark.parametrize("N,C", [(1, 1), (1, 50257), (7, 50257), (64, 129)])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy(gpu, N, C, smoothing, dtype):
    r = rng()
    logits = randn((N, C), dtype, r, scale=2)
    target = r.integers(0, C, size=N).astype(np.int64)
    target[::3] = -100  # ignored rows
    g = randn((N,), dtype, r)
    check(gpu, "cross_entropy", logits, target, ignore_index=-100, label_smoothing=smoothing)
    check(gpu, "cross_entropy_backward", logits, target, g, ignore_index=-100, label_smoothing=smoothing)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("N,C,W", [(7, 50257, 50304), (9, 61, 64), (4, 1, 64)])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_valid_classes(gpu, N, C, W, smoothing, dtype):
    """A padded vocabulary: only the first C of W columns are classes, the padding gets gradient 0."""
    r = rng()
    logits = randn((N, W), dtype, r, scale=2)
    logits[:, C:] = 50  # padding that would dominate the softmax if it were read
    target = r.integers(0, C, size=N).astype(np.int64)
    target[::3] = -100  # ignored rows
    g = randn((N,), dtype, r)
    attrs = dict(ignore_index=-100, label_smoothing=smoothing, valid_classes=C)
    check(gpu, "cross_entropy", logits, target, **attrs)
    check(gpu, "cross_entropy_backward", logits, target, g, **attrs)  # padding: 0 on both, not the poison


def test_cross_entropy_with_grad_one_launch(gpu):
    import cupy as cp

    r = rng()
    logits, target = randn((9, 1001), np.float32, r), r.integers(0, 1001, size=9).astype(np.int64)
    loss, dlogits = gpu.cross_entropy_with_grad(cp.asarray(logits), cp.asarray(target), grad_scale=1 / 9)
    close(
        cp.asnumpy(loss), cpu().run("cross_entropy", [logits, target], {"ignore_index": -100, "label_smoothing": 0.0})
    )
    expected = cpu().run(
        "cross_entropy_backward",
        [logits, target, np.full(9, 1 / 9, np.float32)],
        {"ignore_index": -100, "label_smoothing": 0.0},
    )
    close(cp.asnumpy(dlogits), expected)


@pytest.mark.parametrize("dtype", FLOATS + [np.float64])
@pytest.mark.parametrize(
    "shape,n_dims", [((1, 1), 1), ((3, 5, 768), 1), ((4, 1, 4097), 1), ((2, 3, 4), 2), ((300, 33), 1)]
)
def test_norms(gpu, shape, n_dims, dtype):
    r = rng()
    x = randn(shape, dtype, r, scale=2, shift=0.5)
    g = randn(shape, dtype, r)
    norm_shape = shape[len(shape) - n_dims :]
    w, b = randn(norm_shape, dtype, r), randn(norm_shape, dtype, r)
    # weight gradients sum over every row: allow for the longer sums in bf16
    scale = 1.0 if dtype != BF16 else 2.0
    for weight, bias in ((w, b), (None, None)):
        check(gpu, "layer_norm", x, weight, bias, eps=1e-5, n_dims=n_dims)
        check(gpu, "layer_norm_backward", x, weight, g, eps=1e-5, n_dims=n_dims, tol_scale=scale)
        check(gpu, "rms_norm", x, weight, eps=1e-6, n_dims=n_dims)
        check(gpu, "rms_norm_backward", x, weight, g, eps=1e-6, n_dims=n_dims, tol_scale=scale)


def check_activations(checker, gpu, x, g):
    """gelu (exact and tanh) and silu, forward and backward, through `checker` (check, or
    check_both_alignments)."""
    for approximate in ("none", "tanh"):
        checker(gpu, "gelu", x, approximate=approximate)
        checker(gpu, "gelu_backward", x, g, approximate=approximate)
    checker(gpu, "silu", x)
    checker(gpu, "silu_backward", x, g)


@pytest.mark.parametrize("dtype", FLOATS + [np.float64, np.float16])
@pytest.mark.parametrize("n", [1, 1000003])
def test_activations(gpu, n, dtype):
    x, g = randn((n,), dtype, scale=3), randn((n,), dtype)
    check_activations(check, gpu, x, g)


@pytest.mark.parametrize("dtype", FLOATS + [np.float64])
@pytest.mark.parametrize("shape", [(3, 8), (1000, 768), (2, 5, 66), (2,)])
def test_swiglu(gpu, shape, dtype):
    h, g = randn(shape, dtype, scale=3), randn(shape[:-1] + (shape[-1] // 2,), dtype)
    check(gpu, "swiglu", h)
    check(gpu, "swiglu_backward", h, g)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(2, 3, 5, 8), (1, 1, 1, 2), (3, 7, 66)])
def test_rope(gpu, shape, dtype):
    T, half = shape[-2], shape[-1] // 2
    angles = rng().uniform(0, 6.3, size=(T, half))
    cos, sin = np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)
    x = randn(shape, dtype)
    for inverse in (False, True):
        check(gpu, "rope", x, cos, sin, inverse=inverse)


@pytest.mark.parametrize("dtype", FLOATS + [np.float64])
@pytest.mark.parametrize("V,D,idx_shape", [(50257, 33, (4, 65)), (7, 1, (3,)), (5, 768, (2, 300))])
def test_embedding(gpu, V, D, idx_shape, dtype):
    r = rng()
    weight = randn((V, D), dtype, r)
    idx = r.integers(0, min(V, 50), size=idx_shape).astype(np.int64)  # many repeats
    g = randn(idx_shape + (D,), dtype, r)
    check(gpu, "embedding", weight, idx)
    check(gpu, "embedding_backward", idx, g, num_embeddings=V)


# ---------------------------------------------------------------- row kernels: every layout, both accesses

# Widths that reach every layout of the row kernels (rows.layout): a row per warp up to 1024 values, a
# row per block in registers up to 16 values a thread (norm backward: 8192 values), a row per block
# read from memory beyond; each with 16-byte accesses (width a multiple of 16 / itemsize) and with
# single values (other widths, and the misaligned copies below). Enough rows that the backward's
# warps and blocks each take several (its grid is a few blocks per SM).
ROW_WIDTHS = {1: 5, 33: 3000, 768: 3000, 1000: 2500, 1032: 1500, 1100: 1400, 4097: 500, 8200: 300, 16512: 3, 20001: 3}
HALF_AND_ALL = FLOATS + [np.float64, np.float16]


def check_both_alignments(gpu, op, *args, tol_scale=1.0, **attrs):
    """check(), then again with every float array of more than one value passed as a misaligned copy."""
    check(gpu, op, *args, tol_scale=tol_scale, **attrs)
    expected = cpu().reference_kernels[op](*args, **attrs)
    moved = [
        misaligned(gpu, a)
        if isinstance(a, np.ndarray) and a.size > 1 and (a.dtype.kind == "f" or a.dtype == BF16)
        else gpu.from_numpy(a)
        if isinstance(a, np.ndarray)
        else a
        for a in args
    ]
    got = gpu.run(op, moved, attrs)
    if isinstance(expected, tuple):
        for i, (g, e) in enumerate(zip(got, expected)):
            if e is not None:
                close(gpu.to_numpy(g), e, scale=tol_scale, what=f"{op} output {i} (misaligned inputs)")
    else:
        close(gpu.to_numpy(got), expected, scale=tol_scale, what=f"{op} (misaligned inputs)")


@pytest.mark.parametrize("dtype", HALF_AND_ALL)
@pytest.mark.parametrize("width", list(ROW_WIDTHS))
def test_softmax_layouts(gpu, width, dtype):
    r = rng()
    x = randn((ROW_WIDTHS[width], width), dtype, r, scale=3)
    g = randn(x.shape, dtype, r)
    for op in ("softmax", "log_softmax"):
        y = np.asarray(cpu().run(op, [x], {"axis": -1}))
        check_both_alignments(gpu, op, x, axis=-1)
        check_both_alignments(gpu, f"{op}_backward", y, g, axis=-1)


@pytest.mark.parametrize("dtype", HALF_AND_ALL)
@pytest.mark.parametrize("width", [w for w in ROW_WIDTHS if w > 1])
def test_masked_softmax_layouts(gpu, width, dtype):
    """Attention masking in every layout: causal, sliding window (few keys), bool and additive masks."""
    r = rng()
    T = 5
    scores = randn((2, T, width), dtype, r, scale=3)
    for causal, window in ((True, None), (False, 3), (True, 2)):
        check(gpu, "masked_softmax", scores, scale=0.3, causal=causal, window=window)
    keep = r.random((1, T, width)) < 0.7
    keep[..., 0] = True
    check_both_alignments(gpu, "masked_softmax", scores, keep, scale=0.3, causal=True, window=None)
    check(gpu, "masked_softmax", scores, randn((2, 1, width), np.float32, r), scale=0.5, causal=False, window=None)
    p = np.asarray(cpu().run("masked_softmax", [scores], {"scale": 0.3, "causal": True, "window": None}))
    check_both_alignments(gpu, "masked_softmax_backward", p, randn(p.shape, dtype, r), scale=0.3)


@pytest.mark.parametrize("dtype", HALF_AND_ALL)
@pytest.mark.parametrize("width", [33, 1032, 1100, 20008, 20001])
def test_causal_rows_skip_masked_keys(gpu, width, dtype):
    """Rows 0..4 of a (T = S = width) causal matrix see keys 0..row: the kernels read only those."""
    import cupy as cp
    from gradcraft.backend.cuda import softmax as cuda_softmax

    x = randn((5, width), dtype, scale=3)
    rows, keys = np.arange(5)[:, None], np.arange(width)[None, :]
    for window in (None, 2):
        allowed = (keys <= rows) & ((keys > rows - window) if window else True)
        w = np.where(allowed, x.astype(np.float64) * 0.7, -np.inf)
        w -= w.max(axis=1, keepdims=True)
        for log in (False, True):
            expected = (
                w - np.log(np.exp(w).sum(axis=1, keepdims=True))
                if log
                else np.exp(w) / np.exp(w).sum(axis=1, keepdims=True)
            )
            got = cuda_softmax.softmax_rows(cp.asarray(x), 0.7, None, True, window, width, width, log)
            close(cp.asnumpy(got), expected.astype(dtype), what=f"causal rows, window {window}, log {log}")


@pytest.mark.parametrize("dtype", HALF_AND_ALL)
@pytest.mark.parametrize("width", list(ROW_WIDTHS))
def test_norm_layouts(gpu, width, dtype):
    r = rng()
    x = randn((ROW_WIDTHS[width], width), dtype, r, scale=2, shift=0.5)
    g = randn(x.shape, dtype, r)
    w, b = randn((width,), dtype, r), randn((width,), dtype, r)
    # weight gradients sum thousands of rows: float32 sums in another order differ by ~1e-4 (bf16: rounding)
    scale = {np.dtype(np.float32): 20.0, np.dtype(np.float64): 1.0}.get(np.dtype(dtype), 2.0)
    check_both_alignments(gpu, "layer_norm", x, w, b, eps=1e-5, n_dims=1)
    check_both_alignments(gpu, "layer_norm_backward", x, w, g, eps=1e-5, n_dims=1, tol_scale=scale)
    check_both_alignments(gpu, "rms_norm", x, w, eps=1e-6, n_dims=1)
    check_both_alignments(gpu, "rms_norm_backward", x, w, g, eps=1e-6, n_dims=1, tol_scale=scale)
    if dtype != np.float32:  # float32 weights with half/double x: read in the accumulator type
        w32, b32 = randn((width,), np.float32, r), randn((width,), np.float32, r)
        check(gpu, "layer_norm", x, w32, b32, eps=1e-5, n_dims=1)
        check(gpu, "layer_norm_backward", x, w32, g, eps=1e-5, n_dims=1, tol_scale=scale)


@pytest.mark.parametrize("dtype", HALF_AND_ALL)
@pytest.mark.parametrize("n", [7, 8, 4099])
def test_activation_accesses(gpu, n, dtype):
    """16-byte accesses with a tail (n % 8), and misaligned arrays (one value at a time)."""
    x, g = randn((n,), dtype, scale=3), randn((n,), dtype)
    check_activations(check_both_alignments, gpu, x, g)


@pytest.mark.parametrize("dtype", HALF_AND_ALL)
def test_activation_extremes(gpu, dtype):
    x = np.array(
        [-np.inf, -200, -90, -88, -50, -20, -10, -5, -1e-3, 0, 1e-3, 5, 10, 20, 88, 200, np.inf, np.nan] * 2,
        dtype=dtype,
    )
    g = np.ones_like(x)
    check_activations(check, gpu, x, g)


@pytest.mark.parametrize("dtype", HALF_AND_ALL)
@pytest.mark.parametrize("shape", [(7, 32), (3, 8192), (37, 160), (5, 66)])
def test_swiglu_accesses(gpu, shape, dtype):
    h, g = randn(shape, dtype, scale=3), randn(shape[:-1] + (shape[-1] // 2,), dtype)
    check_both_alignments(gpu, "swiglu", h)
    check_both_alignments(gpu, "swiglu_backward", h, g)


@pytest.mark.parametrize("dtype", HALF_AND_ALL)
@pytest.mark.parametrize("V,D", [(50257, 768), (40, 64), (9, 300), (60, 33)])
def test_embedding_runs(gpu, V, D, dtype):
    """The backward's chunks of 32 sorted positions: runs inside a chunk, across chunk boundaries, over
    more than 32 chunks (the join kernel's ballot loop), and a Zipf-like token stream."""
    r = rng()
    idx = np.concatenate(
        [
            np.full(5, 3),
            np.full(2100, V - 1),
            np.full(40, 1),
            np.full(32, 2),
            np.full(33, 0),
            r.integers(0, V, size=300),
        ]
    )
    cases = [r.permutation(idx).reshape(2, -1), np.sort(idx)]
    if V > 1000:  # a token stream: a few ids very often, most rarely
        cases.append(np.minimum(r.zipf(1.2, size=(4, 1024)) - 1, V - 1))
    weight = randn((V, D), dtype, r)
    for ids in cases:
        ids = ids.astype(np.int64)
        g = randn(ids.shape + (D,), dtype, r)
        check_both_alignments(gpu, "embedding", weight, ids)
        # (runs of 2100 rows: float32 sums in another order differ by ~1e-4)
        check_both_alignments(gpu, "embedding_backward", ids, g, num_embeddings=V, tol_scale=10.0)


@pytest.mark.parametrize("dtype", FLOATS + [np.float64])
@pytest.mark.parametrize("n,p", [(1, 0.5), (1000003, 0.1), (4097, 0.9)])
def test_dropout_mask_matches_cpu_exactly(gpu, n, p, dtype):
    x = randn((n,), dtype)
    seed = int(rng().integers(0, 2**63 - 1))
    got, expected = both(gpu, "dropout", x, seed=seed, p=p)
    np.testing.assert_array_equal(got == 0, expected == 0)  # the same mask, bit for bit
    close(got, expected)


@pytest.mark.parametrize("dtype", FLOATS + [np.float64])
def test_random(gpu, dtype):
    seed = int(rng().integers(0, 2**63 - 1))
    got, expected = both(gpu, "rand", (1001, 3), seed=seed, dtype=np.dtype(dtype))
    np.testing.assert_array_equal(got, expected)  # the same Philox stream as NumPy's
    normal = gpu.to_numpy(gpu.run("randn", [], {"shape": (1 << 20,), "seed": seed, "dtype": np.dtype(dtype)}))
    again = gpu.to_numpy(gpu.run("randn", [], {"shape": (1 << 20,), "seed": seed, "dtype": np.dtype(dtype)}))
    np.testing.assert_array_equal(normal, again)
    assert abs(normal.astype(np.float64).mean()) < 0.01 and abs(normal.astype(np.float64).std() - 1) < 0.01
    ints = gpu.to_numpy(
        gpu.run("randint", [], {"shape": (100000,), "low": -3, "high": 7, "seed": seed, "dtype": np.dtype(np.int64)})
    )
    assert ints.dtype == np.int64 and ints.min() == -3 and ints.max() == 6


# ---------------------------------------------------------------- cross-entropy: vectorised and scalar kernels

# (N, C, W): the gpt2 padded vocabulary (C odd: a scalar tail after the 16-byte vectors), short rows,
# rows of one 16-byte access, C below W with a partial vector of classes, wide rows of several batches.
CE_SHAPES = [
    (5, 50257, 50304),
    (9, 1, 1),
    (9, 7, 7),
    (9, 8, 8),
    (6, 1000, 1000),
    (5, 8200, 8200),
    (6, 997, 1000),
    (5, 8193, 8200),
    (4, 3, 8),
]


def _ce_inputs(N, C, W, dtype, float_loss, r):
    logits = randn((N, W), dtype, r, scale=2)
    logits[:, C:] = 50  # padding that would dominate the softmax if it were read
    if N > 2:
        logits[1] = randn((W,), dtype, r, scale=2, shift=30)  # a shifted row: the online max moves
        logits[1, C:] = 50
        logits[2, C - 1] = 12  # the row's max in the last class (the scalar tail when C is odd)
    target = r.integers(0, C, size=N).astype(np.int64)
    target[::3] = -100  # ignored rows
    if N > 2:
        target[2] = C - 1
    g_dtype = np.float32 if float_loss and np.dtype(dtype) in (BF16, np.dtype(np.float16)) else dtype
    return logits, target, randn((N,), g_dtype, r)


@pytest.mark.parametrize("dtype", [BF16, np.float16, np.float32])
@pytest.mark.parametrize("N,C,W", CE_SHAPES)
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("float_loss", [False, True])
def test_cross_entropy_vectorised(gpu, N, C, W, smoothing, float_loss, dtype):
    """Every width through the 16-byte kernels (W a multiple of 16 / itemsize) or the scalar ones, and
    again from misaligned logits (scalar kernels); poisoned outputs: the padding must be written 0."""
    logits, target, g = _ce_inputs(N, C, W, dtype, float_loss, rng())
    attrs = dict(ignore_index=-100, label_smoothing=smoothing, valid_classes=C, float_loss=float_loss)
    check_both_alignments(gpu, "cross_entropy", logits, target, **attrs)
    check_both_alignments(gpu, "cross_entropy_backward", logits, target, g, **attrs)


@pytest.mark.parametrize("dtype", [BF16, np.float32])
def test_cross_entropy_vectorised_one_launch(gpu, dtype):
    """Loss and dlogits in one launch on the padded gpt2 vocabulary, scaled for a mean."""
    import cupy as cp
    from gradcraft.backend.cuda import cross_entropy as cuda_ce

    N, C, W = 33, 50257, 50304
    logits, target, _ = _ce_inputs(N, C, W, dtype, True, rng())
    loss, dlogits = cuda_ce.cross_entropy_with_grad(
        cp.asarray(logits), cp.asarray(target), None, -100, 0.1, 1 / N, valid_classes=C, float_loss=True
    )
    attrs = {"ignore_index": -100, "label_smoothing": 0.1, "valid_classes": C, "float_loss": True}
    close(cp.asnumpy(loss), cpu().reference_kernels["cross_entropy"](logits, target, **attrs), what="loss")
    g = np.full(N, 1 / N, np.float32 if np.dtype(dtype) == BF16 else dtype)
    expected = cpu().reference_kernels["cross_entropy_backward"](logits, target, g, **attrs)
    close(cp.asnumpy(dlogits), expected, what="dlogits")


@pytest.mark.parametrize("dtype", [BF16, np.float32])
def test_cross_entropy_vectorised_bad_target(gpu, dtype):
    """A target outside [0, C) that is not ignore_index: NaN loss and gradient on its row only."""
    import cupy as cp
    from gradcraft.backend.cuda import cross_entropy as cuda_ce

    r = rng()
    N, C, W = 4, 50257, 50304
    logits = randn((N, W), dtype, r, scale=2)
    target = np.array([5, C, -100, 7], np.int64)
    loss, dlogits = cuda_ce.cross_entropy_with_grad(cp.asarray(logits), cp.asarray(target), valid_classes=C)
    loss, dlogits = cp.asnumpy(loss).astype(np.float64), cp.asnumpy(dlogits).astype(np.float64)
    assert np.isnan(loss[1]) and np.isnan(dlogits[1, :C]).all()
    assert np.isfinite(loss[[0, 2, 3]]).all() and loss[2] == 0 and np.isfinite(dlogits[[0, 2, 3]]).all()
    assert (dlogits[2] == 0).all() and (dlogits[:, C:][[0, 2, 3]] == 0).all()


# ---------------------------------------------------------------- binary ops: 16-byte and one-value kernels

BINARY_OPS = ("add", "sub", "mul", "div", "maximum", "minimum")
# (a's shape, b's shape): same shape (a multiple of 8 values; odd sizes, with a ragged tail; fewer values
# than one 16-byte access), a bias repeated along a's leading axes (b_n % 8 == 0, over one or two trailing
# axes; b_n % 8 != 0, where float64's 2 values an access may still fit), one value (0-d and (1,)).
BINARY_CASES = [
    ((64, 96), (64, 96)),
    ((1001, 3), (1001, 3)),
    ((3, 7, 13), (3, 7, 13)),
    ((5,), (5,)),
    ((37, 64), (64,)),
    ((9, 5, 24), (5, 24)),
    ((16, 3, 40), (40,)),
    ((41, 50), (50,)),
    ((333, 3), (3,)),
    ((17, 9), (9,)),
    ((1001, 3), ()),
    ((7,), (1,)),
]


def _record_launches(monkeypatch):
    """The names of the kernels the CUDA launchers run, in order (a list that fills as they run)."""
    from gradcraft.backend.cuda import launch

    launched, run = [], launch.run

    def recording(file, kernel, *args, **kwargs):
        launched.append(kernel)
        return run(file, kernel, *args, **kwargs)

    monkeypatch.setattr(launch, "run", recording)
    return launched


def _binary_kernels_agree(gpu, launched, a, b, *, a_misaligned=False, b_misaligned=False):
    """Every binary op on the GPU (a, b as given or as misaligned copies) against the CPU; returns the
    kernels each op launched."""
    kernels = []
    for op in BINARY_OPS:
        expected = np.asarray(cpu().reference_kernels[op](a, b))
        args = [
            misaligned(gpu, x) if moved else gpu.from_numpy(x) for x, moved in ((a, a_misaligned), (b, b_misaligned))
        ]
        launched.clear()
        got = gpu.run(op, args, {})
        close(
            gpu.to_numpy(got),
            expected,
            what=f"{op} {a.dtype} {a.shape} {b.shape} (misaligned a: {a_misaligned}, b: {b_misaligned})",
        )
        kernels.append(list(launched))
    return kernels


@pytest.mark.parametrize("dtype", HALF_AND_ALL, ids=lambda d: np.dtype(d).name)
def test_binary_vector_kernels(gpu, dtype, monkeypatch):
    """The 16-byte kernels (same shape, bias, one value) where sizes and pointers allow, the one-value
    kernel otherwise (a ragged bias, a misaligned a or b), each against the CPU, outputs poisoned."""
    from gradcraft.backend.cuda import launch

    launched = _record_launches(monkeypatch)
    dtype = np.dtype(dtype)
    sfx, vec = launch.suffix(dtype), 16 // dtype.itemsize
    r = rng()
    for a_shape, b_shape in BINARY_CASES:
        a = randn(a_shape, dtype, r)
        b = np.asarray(randn(b_shape, dtype, r, shift=3), dtype=dtype)  # (away from 0: div)
        n, b_n = a.size, b.size
        vector = b_n in (1, n) or b_n % vec == 0
        for op, ran in zip(BINARY_OPS, _binary_kernels_agree(gpu, launched, a, b)):
            assert ran == [f"{op}_v_{sfx}" if vector else f"{op}_{sfx}"], (a_shape, b_shape, ran)
        for op, ran in zip(BINARY_OPS, _binary_kernels_agree(gpu, launched, a, b, a_misaligned=True)):
            assert ran == [f"{op}_{sfx}"], (a_shape, b_shape, ran)
        for op, ran in zip(BINARY_OPS, _binary_kernels_agree(gpu, launched, a, b, b_misaligned=True)):
            assert ran == [f"{op}_v_{sfx}" if b_n == 1 else f"{op}_{sfx}"], (a_shape, b_shape, ran)


@pytest.mark.parametrize("dtype", [BF16, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_binary_vector_kernels_grid_stride(gpu, dtype, monkeypatch):
    """One SM's worth of blocks (16 x 256 threads), so each thread takes many accesses: the bias index
    advanced by the stride, wrapping around b, and the ragged tail after the loop."""
    from gradcraft.backend.cuda import launch

    launched = _record_launches(monkeypatch)
    monkeypatch.setattr(launch, "sm_count", lambda: 1)
    dtype = np.dtype(dtype)
    r = rng()
    for a_shape, b_shape in [
        ((257, 776), (776,)),
        ((131, 3, 104), (3, 104)),
        ((257, 777), (257, 777)),
        ((300, 1001), ()),
    ]:
        a = randn(a_shape, dtype, r)
        b = np.asarray(randn(b_shape, dtype, r, shift=3), dtype=dtype)
        for op, ran in zip(BINARY_OPS, _binary_kernels_agree(gpu, launched, a, b)):
            assert ran == [f"{op}_v_{launch.suffix(dtype)}"], (a_shape, b_shape, ran)


@pytest.mark.parametrize("dtype", [BF16, np.float32])
@pytest.mark.parametrize("widths", [(16, 8, 8), (24, 24, 24), (5, 3, 8)])  # 16-byte rows, and not (CuPy's copy)
def test_put_slices_along_the_last_axis(gpu, dtype, widths):
    """The q/k/v gradients into the qkv projection's: slices tiling the last axis, copied by rows."""
    r = rng()
    B, T = 3, 7
    edges = np.cumsum((0,) + widths)
    specs = [((0, B, 1), (0, T, 1), (int(a), int(b), 1)) for a, b in zip(edges, edges[1:])]
    gs = [randn((B, T, w), dtype, r) for w in widths]
    check(gpu, "put_slices", *gs, specs=specs, shape=(B, T, int(edges[-1])))
