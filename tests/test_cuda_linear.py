"""Matrix products on the GPU and what is fused into them: cuBLAS layouts, gemv for one row, the fused
norm + linear of a decoding step, programmatic dependent launch, cuBLASLt's bias epilogues and the
output layer + loss. Skipped without a GPU; see cuda_support.py."""

import numpy as np
import pytest

import gradcraft as gc
import gradcraft.nn.functional as gF
from cuda_support import BF16, CUDA_ONLY, FLOATS, SEED, both, check, close, cpu, misaligned, randn, rel_err, rng

pytestmark = CUDA_ONLY


# ---------------------------------------------------------------- the output layer + loss, fused


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float16])
@pytest.mark.parametrize("chunk_rows", [None, 7])
def test_linear_cross_entropy_kernel(gpu, dtype, chunk_rows):
    """The fused output layer + loss against its NumPy reference: loss sum, dx, dw; ignored rows,
    smoothing, padded classes, one chunk or several."""
    r = rng()
    N, C, V = 45, 64, 136
    x, w = randn((N, C), dtype, r), randn((V, C), dtype, r, scale=0.2)
    t = r.integers(0, 130, N)
    t[[0, 9]] = -100
    itemsize = np.dtype(dtype).itemsize
    attrs = {
        "ignore_index": -100,
        "label_smoothing": 0.1,
        "valid_classes": 130,
        "chunk_bytes": (chunk_rows or N) * V * itemsize,
    }
    (total, dx, dw), (rtotal, rdx, rdw) = both(gpu, "linear_cross_entropy", x, w, t, **attrs)
    assert dx.dtype == dtype and dw.dtype == dtype and total.dtype == np.float32
    np.testing.assert_allclose(float(total), float(rtotal), rtol=2e-3 if dtype != np.float32 else 1e-4)
    limit = 1e-2 if dtype == BF16 else (3e-3 if dtype == np.float16 else 1e-4)
    assert rel_err(dx, rdx) < limit and rel_err(dw, rdw) < limit


def test_model_step_with_the_fused_loss_equals_the_plain_one(gpu, monkeypatch):
    """bf16 gpt2-style model with a padded vocabulary on CUDA: the fused output layer + loss gives the
    loss and gradients of the matmul + cross_entropy path."""
    from gradcraft.models import Transformer, preset

    cfg = preset("gpt2-124m", vocab_size=1000, seq_len=64, n_layers=2, dim=128, n_heads=4)
    gc.manual_seed(0)
    model = Transformer(cfg).to("cuda")
    r = rng()
    x = gc.tensor(r.integers(0, 1000, (4, 64)), device="cuda")
    y = gc.tensor(r.integers(0, 1000, (4, 64)), device="cuda")
    results = {}
    for fused in (True, False):
        monkeypatch.setattr(type(gpu), "fused_linear_cross_entropy", lambda self, dtype, f=fused: f)
        model.zero_grad()
        _, loss = model(x, y, compute_dtype=gc.bfloat16, label_smoothing=0.05)
        loss.backward()
        results[fused] = (loss.item(), {n: p.grad.numpy().copy() for n, p in model.named_parameters()})
    assert abs(results[True][0] - results[False][0]) < 2e-3
    for name, g in results[True][1].items():
        assert rel_err(g, results[False][1][name]) < 3e-2, name


# ---------------------------------------------------------------- primitives with their own CUDA paths


@pytest.mark.parametrize("dtype", FLOATS + [np.float64, np.float16])
def test_matmul_layouts(gpu, dtype):
    r = rng()
    a, b = randn((3, 17, 33), dtype, r), randn((33, 9), dtype, r)
    check(gpu, "matmul", a, b)
    check(gpu, "matmul", randn((2, 1, 5, 7), dtype, r), randn((3, 7, 4), dtype, r))
    check(gpu, "matmul", randn((7,), dtype, r), randn((7, 5), dtype, r))
    check(gpu, "matmul", randn((5, 7), dtype, r), randn((7,), dtype, r))
    # a transposed view (x @ w.mT): passed to cuBLAS with a transpose flag
    w = randn((9, 33), dtype, r)
    got = gpu.to_numpy(gpu.run("matmul", [gpu.from_numpy(a), gpu.from_numpy(w).T], {}))
    close(got, np.asarray(cpu().run("matmul", [a, w.T], {})), what="matmul with a transposed operand")


@pytest.mark.parametrize("dtype", FLOATS + [np.float16])
def test_matmul_with_one_row_reads_the_weight_once(gpu, dtype):
    """x @ w.mT for one row (a decoding step's token) runs kernels/gemv.cu: 16-byte words or single
    values (K not a multiple, or x at an odd offset), one or two output columns a warp (an odd N);
    the kernel itself also takes up to 8 rows."""
    from gradcraft.backend.cuda import gemv

    r = rng()
    for x_shape, K, N in (((1, 64), 64, 37), ((1, 1, 96), 96, 3101), ((1, 33), 33, 9), ((1, 256), 256, 70)):
        x, w = randn(x_shape, dtype, r), randn((N, K), dtype, r)
        got = gpu.to_numpy(gpu.run("matmul", [gpu.from_numpy(x), gpu.from_numpy(w).T], {}))
        close(got, np.asarray(cpu().run("matmul", [x, w.T], {})), what=f"gemv {x_shape} @ ({K}, {N})")
    x, w = randn((1, 65), dtype, r), randn((17, 64), dtype, r)
    got = gpu.to_numpy(gpu.run("matmul", [gpu.from_numpy(x)[:, 1:], gpu.from_numpy(w).T], {}))
    close(got, np.asarray(cpu().run("matmul", [x[:, 1:], w.T], {})), what="gemv with an unaligned x")
    for rows, K, N, outputs in ((3, 64, 41, 1), (8, 40, 130, 2), (5, 48, 7, 2)):
        x, w = randn((rows, K), dtype, r), randn((N, K), dtype, r)
        out = gpu.from_numpy(np.zeros((rows, N), dtype))
        gemv.gemv(gpu.from_numpy(x), K, gpu.from_numpy(w), out, rows, N, K, outputs=outputs)
        close(gpu.to_numpy(out), np.asarray(cpu().run("matmul", [x, w.T], {})), what=f"gemv of {rows} rows")


# ---------------------------------------------------------------- programmatic dependent launch (pdl.py)


def _product_chain(gpu, x, res, weights, nw, nb, bias):
    """Dependent one-row launches, each reading the one before's output: gemv, then norm_linear with
    the residual stream (which also reads the output of the launch before that), alternately. Returns
    the last output and residual stream. A PDL kernel that read x before its predecessor finished would
    read the poison (NaN bits) or the previous run's values."""
    from gradcraft.backend.cuda import gemv
    from gradcraft.backend.cuda import launch as L

    h, s = x, res
    K = x.shape[1]
    for i, w in enumerate(weights):
        if i % 2 == 0:
            out = L.empty((1, K), x.dtype)
            gemv.gemv(h, K, w, out, 1, K, K)
            h = out
        else:
            attrs = dict(residual=True, norm="layer_norm", eps=1e-5, norm_bias=True, bias=True)
            h, s = gemv.norm_linear(h, s, nw, nb, w, bias, **attrs, activation="gelu_tanh")
    return h, s


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("K", [768, 100])  # 16-byte words; single values (K not a multiple of 8)
def test_pdl_launches_give_the_bits_of_normal_launches(gpu, dtype, K, monkeypatch):
    """gemv and norm_linear launched with programmatic dependent launch (sm_90+) compute the bits the
    normal launches do: eagerly, and in a chain of dependent launches captured into a CUDA graph and
    replayed with a new input each time (a missing pdl_wait would read the poisoned or the previous
    replay's values)."""
    from gradcraft.backend.cuda import pdl

    if not pdl.supported():
        pytest.skip("PDL needs an sm_90+ GPU and a CUDA 12.3+ driver")
    launches = []
    launch = pdl.launch
    monkeypatch.setattr(pdl, "launch", lambda *a, **k: (launches.append(a[0]), launch(*a, **k)))
    r = rng()
    weights = [gpu.from_numpy(randn((K, K), dtype, r, scale=K**-0.5)) for _ in range(12)]
    nw, nb, bias = (gpu.from_numpy(randn((n,), dtype, r, scale=0.2, shift=s)) for n, s in ((K, 1), (K, 0), (K, 0)))
    res = gpu.from_numpy(randn((1, K), dtype, r))
    inputs = [randn((1, K), dtype, r, scale=2) for _ in range(4)]

    def chain(x, on):
        monkeypatch.setenv("GRADCRAFT_PDL", "1" if on else "0")
        return _product_chain(gpu, x, res, weights, nw, nb, bias)

    def bits(pair):
        arrays = [gpu.to_numpy(a) for a in pair]
        assert all(np.isfinite(a.astype(np.float32)).all() for a in arrays), "unwritten (poisoned) output"
        return [a.view(f"u{np.dtype(dtype).itemsize}") for a in arrays]

    expected = [bits(chain(gpu.from_numpy(x), on=False)) for x in inputs]
    assert not launches
    for x, want in zip(inputs, expected):
        got = bits(chain(gpu.from_numpy(x), on=True))
        for g, e, name in zip(got, want, ("y", "s")):
            np.testing.assert_array_equal(g, e, err_msg=f"eager PDL chain {name} (GRADCRAFT_TEST_SEED={SEED})")
    assert len(launches) == len(inputs) * len(weights)  # every link went through cuLaunchKernelEx

    x = gpu.from_numpy(inputs[0])
    monkeypatch.setenv("GRADCRAFT_PDL", "1")
    outputs, graph = gpu.capture(lambda: _product_chain(gpu, x, res, weights, nw, nb, bias))
    for _ in range(3):
        for values, want in zip(inputs[::-1], expected[::-1]):  # a new input before every replay
            gpu.write(x, values)
            gpu.replay(graph)
            gpu.synchronize()
            for g, e, name in zip(bits(outputs), want, ("y", "s")):
                np.testing.assert_array_equal(g, e, err_msg=f"replayed PDL chain {name} (GRADCRAFT_TEST_SEED={SEED})")
    gpu.release_graph(graph)


# (K, N): 16-byte words (K = 768: a qkv of 2304 columns, one a warp; gate+up's 4096, two a warp), an
# odd K (single values), a column count that leaves the last block part empty (and, at two columns a
# warp, the last warp one column); swiglu's N is 2 * F. The residual and bias go on and off by case.
NORM_LINEAR_CASES = [(768, 2304, 4096, True, False), (33, 37, 74, False, True), (64, 3101, 3102, True, True)]


def _norm_linear_inputs(K, N, dtype, norm, residual, bias, norm_bias, r):
    """backend/cpu/gemv.py's inputs in its order, and its attributes."""
    arrays = [randn((1, K), dtype, r, scale=2)]
    if residual:
        arrays.append(randn((1, K), dtype, r))
    if norm is not None:
        arrays.append(randn((K,), dtype, r, scale=0.2, shift=1))
    if norm_bias:
        arrays.append(randn((K,), dtype, r, scale=0.1))
    arrays.append(randn((N, K), dtype, r, scale=K**-0.5))
    if bias:
        arrays.append(randn((N,), dtype, r, scale=0.5))
    return arrays, dict(residual=residual, norm=norm, eps=1e-5, norm_bias=norm_bias, bias=bias)


def _close_to_scale(got, expected, dtype, what):
    """|got - expected| within rtol of max |expected| (2e-2 for bf16/fp16: a few ulps of the output's
    scale, as the summation orders differ; 1e-4 for float32); same shape and dtype, nothing NaN."""
    assert got.shape == expected.shape and got.dtype == expected.dtype, f"{what}: {got.shape} {got.dtype}"
    got, expected = got.astype(np.float64), expected.astype(np.float64)
    assert np.isfinite(got).all(), f"{what}: non-finite values (unwritten output?) (GRADCRAFT_TEST_SEED={SEED})"
    rtol = 1e-4 if np.dtype(dtype) == np.float32 else 2e-2
    error, scale = np.abs(got - expected).max(), np.abs(expected).max()
    assert error <= rtol * scale, (
        f"{what}: max error {error:.3g} against scale {scale:.3g} (GRADCRAFT_TEST_SEED={SEED})"
    )


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("norm", [None, "rms_norm", "layer_norm"])
@pytest.mark.parametrize("activation", [None, "gelu", "gelu_tanh", "swiglu"])
def test_norm_linear_kernel(gpu, dtype, norm, activation):
    """The fused one-row product (kernels/gemv.cu's norm_linear) against the CPU reference kernel on
    the same inputs: y to a few ulps of its scale, s = x + residual bit for bit; outputs poisoned. The
    first case runs again from misaligned copies (the single-value kernels at K = 768)."""
    r = rng()
    for i, (K, N, N_glu, residual, bias) in enumerate(NORM_LINEAR_CASES):
        N = N_glu if activation == "swiglu" else N
        norm_bias = norm == "layer_norm" and i != 1
        arrays, attrs = _norm_linear_inputs(K, N, dtype, norm, residual, bias, norm_bias, r)
        attrs["activation"] = activation
        expected = cpu().reference_kernels["norm_linear"](*arrays, **attrs)
        what = f"norm_linear K={K} N={N} {attrs}"
        for aligned in (True, False) if i == 0 else (True,):
            inputs = [gpu.from_numpy(a) if aligned else misaligned(gpu, a) for a in arrays]
            got = gpu.run("norm_linear", inputs, attrs)
            if residual:
                (got, got_s), (expected_y, expected_s) = got, expected
                got_s, expected_s = gpu.to_numpy(got_s), np.asarray(expected_s)
                assert got_s.shape == expected_s.shape and got_s.dtype == expected_s.dtype
                bits = f"u{expected_s.dtype.itemsize}"
                np.testing.assert_array_equal(got_s.view(bits), expected_s.view(bits), err_msg=f"{what}: s")
            else:
                expected_y = expected
            _close_to_scale(gpu.to_numpy(got), np.asarray(expected_y), dtype, f"{what} aligned={aligned}")


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("norm", [None, "rms_norm", "layer_norm"])
@pytest.mark.parametrize("residual, bias", [(True, False), (False, True)])
def test_norm_linear_wide_output_layer(gpu, dtype, norm, residual, bias):
    """An output layer of an odd width (gpt2's 50257-like): the row normalized by one block, then the
    GEMV (gemv.wide), against the CPU reference; s bit for bit; the first case misaligned too."""
    from gradcraft.backend.cuda import gemv

    K, N = 768, 16400  # N >= gemv.MAX_COLUMNS, N % 64 != 0
    assert gemv.wide(N, None) and not gemv.wide(N, "gelu") and not gemv.wide(16384, None)
    assert gpu.norm_linear_supported(1, N, K, dtype, None) and not gpu.norm_linear_supported(1, N, K, dtype, "gelu")
    r = rng()
    arrays, attrs = _norm_linear_inputs(K, N, dtype, norm, residual, bias, norm == "layer_norm", r)
    attrs["activation"] = None
    expected = cpu().reference_kernels["norm_linear"](*arrays, **attrs)
    expected_y, expected_s = expected if residual else (expected, None)
    for aligned in (True, False):
        got = gpu.run("norm_linear", [gpu.from_numpy(a) if aligned else misaligned(gpu, a) for a in arrays], attrs)
        if residual:
            got, got_s = got
            bits = f"u{np.dtype(dtype).itemsize}"
            np.testing.assert_array_equal(gpu.to_numpy(got_s).view(bits), np.asarray(expected_s).view(bits))
        _close_to_scale(gpu.to_numpy(got), np.asarray(expected_y), dtype, f"wide norm_linear aligned={aligned}")


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_norm_linear_op_takes_the_fused_kernel_at_one_row(gpu, family, monkeypatch):
    """F.norm_linear on CUDA: one row without a gradient runs the fused kernel, and gives what the
    composed ops give (the path a gradient, or a second row, takes)."""
    assert gpu.norm_linear_supported(1, 2304, 768, BF16, None)
    assert not gpu.norm_linear_supported(2, 2304, 768, BF16, None)
    assert not gpu.norm_linear_supported(1, 32000, 768, BF16, None)  # an output layer: cuBLAS
    ran = []
    run = type(gpu).run
    monkeypatch.setattr(type(gpu), "run", lambda self, op, args, attrs: ran.append(op) or run(self, op, args, attrs))
    r = rng()
    K, N = 768, 4096 if family == "llama" else 3072
    data = dict(input=r.standard_normal((1, 1, K)), residual=r.standard_normal((1, 1, K)))
    data["weight"] = r.standard_normal((N, K)) * K**-0.5
    data["norm_weight"] = 1 + 0.2 * r.standard_normal(K)
    if family == "gpt2":
        data["norm_bias"], data["bias"] = 0.1 * r.standard_normal(K), 0.5 * r.standard_normal(N)
        attrs = dict(norm="layer_norm", activation="gelu_tanh")
    else:
        attrs = dict(norm="rms_norm", activation="swiglu")
    results = {}
    for fused in (True, False):
        tensors = {
            k: gc.tensor(v, dtype=gc.bfloat16, device="cuda", requires_grad=k == "weight" and not fused)
            for k, v in data.items()
        }
        ran.clear()
        y, s = gF.norm_linear(**tensors, **attrs)
        results[fused] = y.float().numpy(), s.float().numpy()
        assert ("norm_linear" in ran) == fused, ran
    assert results[True][0].shape == (1, 1, N // 2 if family == "llama" else N)
    _close_to_scale(results[True][0], results[False][0], BF16, f"{family} F.norm_linear fused against composed")
    np.testing.assert_array_equal(results[True][1], results[False][1])
    two_rows = {
        k: gc.tensor(np.concatenate([v, v], 1) if v.ndim == 3 else v, dtype=gc.bfloat16, device="cuda")
        for k, v in data.items()
    }
    ran.clear()
    y2, _ = gF.norm_linear(**two_rows, **attrs)
    assert "norm_linear" not in ran and y2.shape[1] == 2
    _close_to_scale(y2.float().numpy()[:, :1], results[True][0], BF16, f"{family}: a second row composed")


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float16])
@pytest.mark.parametrize("M,K,N", [(64, 768, 2304), (1000, 100, 50), (37, 24, 1000), (4096, 3072, 768), (5, 64, 64)])
def test_linear_bias_kernels(gpu, dtype, M, K, N):
    r = rng()
    x, w, b, g = (randn(s, dtype, r) for s in ((M, K), (N, K), (N,), (M, N)))
    # Long sums in low precision; and the reference rounds the product before adding the bias, where
    # the epilogue adds it to the float32 sum (one rounding fewer: the two may differ by an ulp).
    scale = max(2.0, K / 256) if dtype == BF16 else max(2.0, K / 64)
    check(gpu, "linear_bias", x, w, b, tol_scale=scale)
    # Backward: dw and db sum over the M rows. NumPy's float16 product rounds every partial sum to
    # float16 (the reference's error grows with M; cuBLASLt sums in float32), hence M / 8 there.
    rows = {np.dtype(np.float32): M / 256, np.dtype(BF16): M / 64, np.dtype(np.float16): M / 8}[np.dtype(dtype)]
    check(gpu, "linear_bias_backward", g, x, tol_scale=max(scale, rows))


def test_linear_bias_takes_cublaslt_epilogues_at_training_shapes(gpu, monkeypatch):
    """Not the fallback (a product and an add/sum): gemm may not run, yet the results are right, also
    for operands at offsets of only 16 bytes (views into larger buffers)."""
    import cupy as cp

    from gradcraft.backend.cuda import linear, matmul

    monkeypatch.setattr(matmul, "gemm", lambda *a, **k: pytest.fail("linear_bias fell back to gemm"))
    r = rng()
    for dtype in (BF16, np.float16, np.float32):
        whole = randn((512 * 768 + 8,), dtype, r)
        x = cp.asarray(whole)[8:].reshape(512, 768)  # 16 bytes into a buffer (8 bf16, 32 for float32)
        w, b, g = (cp.asarray(randn(s, dtype, r)) for s in ((2304, 768), (2304,), (512, 2304)))
        y = linear.linear_bias(x, w, b)
        dw, db = linear.linear_bias_backward(g, x)
        reference = cpu().reference_kernels
        xs = cp.asnumpy(x)
        close(cp.asnumpy(y), reference["linear_bias"](xs, cp.asnumpy(w), cp.asnumpy(b)), scale=3, what="y")
        ew, eb = reference["linear_bias_backward"](cp.asnumpy(g), xs)
        close(cp.asnumpy(dw), ew, scale=8, what="dw")
        close(cp.asnumpy(db), eb, scale=8, what="db")
