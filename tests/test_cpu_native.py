"""The compiled C kernels (backend/cpu/native) against their NumPy references in backend/cpu/<family>.py.

Each native kernel gets random float32 inputs and output buffers filled with NaN (so a kernel that
skips an element cannot pass by finding a zero there), and the result must match the NumPy kernel
it replaces. Then the same with the thread pool on (rows split among
threads), and the fallbacks: other dtypes and layouts go to the NumPy kernel.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from gradcraft.backend import cpu
from gradcraft.backend.cpu import native as cpu_native
from gradcraft.backend.cpu import threads as cpu_threads
from gradcraft.backend.cpu.threads import set_num_threads

lib = cpu_native.library()
pytestmark = pytest.mark.skipif(lib is None, reason=f"no compiled CPU kernels: {cpu_native.status()}")


def poisoned(shape, dtype):
    return np.full(shape, np.nan, dtype)


REFERENCE = cpu.CPUBackend().reference_kernels  # the NumPy kernels
NATIVE = cpu_native.kernels(REFERENCE, poisoned) if lib is not None else {}


def rand(*shape, scale=1.0, seed=0):
    return (np.random.default_rng(seed + len(shape)).standard_normal(shape) * scale).astype(np.float32)


def check(name, *args, rtol=2e-5, atol=2e-6, **attrs):
    got = NATIVE[name](*args, **attrs)
    want = REFERENCE[name](*args, **attrs)
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=name)


def with_output_gradient(make):
    def inputs():
        q, k, v = make()
        B, H, T, Dv = *q.shape[:3], v.shape[-1]
        if q.flags.c_contiguous:
            return q, k, v, rand(B, H, T, Dv, seed=3)
        return q, k, v, rand(B, T, H, Dv, seed=3).transpose(0, 2, 1, 3)  # as a (B, T, H, D) projection gives it

    return inputs


CASES = [
    ("silu", lambda: (rand(3, 1000, scale=4),), {}),
    ("silu", lambda: (rand(7) * 100,), {}),  # saturated: exp overflows and underflows
    ("silu_backward", lambda: (rand(5, 333, scale=4), rand(5, 333, seed=1)), {}),
    ("gelu", lambda: (rand(3, 1000, scale=4),), {"approximate": "none"}),
    ("gelu", lambda: (rand(3, 1000, scale=4) * 10,), {"approximate": "tanh"}),
    ("gelu_backward", lambda: (rand(5, 333, scale=4), rand(5, 333, seed=1)), {"approximate": "none"}),
    ("gelu_backward", lambda: (rand(5, 333, scale=4), rand(5, 333, seed=1)), {"approximate": "tanh"}),
    ("softmax", lambda: (rand(7, 300, scale=5), -1), {}),
    ("softmax", lambda: (rand(7, 3, 5), 1), {}),  # another axis: the NumPy kernel
    ("softmax_backward", lambda: (cpu.softmax._softmax(rand(7, 300), -1), rand(7, 300, seed=1), -1), {}),
    ("log_softmax", lambda: (rand(7, 300, scale=5), 1), {}),
    ("log_softmax_backward", lambda: (cpu.softmax._log_softmax(rand(4, 2, 50), -1), rand(4, 2, 50, seed=1), 2), {}),
    ("swiglu", lambda: (rand(4, 9, 2 * 24, scale=3),), {}),
    ("swiglu", lambda: (rand(2 * 5),), {}),
    ("swiglu_backward", lambda: (rand(4, 9, 48, scale=3), rand(4, 9, 24, seed=1)), {}),
    ("rms_norm", lambda: (rand(6, 7, 130), rand(130, seed=2)), {"eps": 1e-6, "n_dims": 1}),
    ("rms_norm", lambda: (rand(6, 4, 5), None), {"eps": 1e-5, "n_dims": 2}),
    ("rms_norm_backward", lambda: (rand(150, 64), rand(64, seed=2), rand(150, 64, seed=3)), {"eps": 1e-6, "n_dims": 1}),
    ("rms_norm_backward", lambda: (rand(3, 20), None, rand(3, 20, seed=3)), {"eps": 1e-6, "n_dims": 1}),
    (
        "layer_norm",
        lambda: (rand(6, 7, 96, scale=3) + 2, rand(96, seed=2), rand(96, seed=4)),
        {"eps": 1e-5, "n_dims": 1},
    ),
    ("layer_norm", lambda: (rand(6, 33), None, None), {"eps": 1e-5, "n_dims": 1}),
    (
        "layer_norm_backward",
        lambda: (rand(130, 48) + 1, rand(48, seed=2), rand(130, 48, seed=3)),
        {"eps": 1e-5, "n_dims": 1},
    ),
    ("layer_norm_backward", lambda: (rand(5, 3, 8), None, rand(5, 3, 8, seed=3)), {"eps": 1e-5, "n_dims": 2}),
    (
        "cross_entropy",
        lambda: (rand(64, 1000, scale=5), np.random.default_rng(1).integers(0, 1000, 64)),
        {"ignore_index": -100, "label_smoothing": 0.0},
    ),
    (
        "cross_entropy",
        lambda: (rand(9, 50, scale=5), np.array([3, -100, 0, 49, 7, 7, -100, 1, 2])),
        {"ignore_index": -100, "label_smoothing": 0.1},
    ),
    (
        "cross_entropy_backward",
        lambda: (
            rand(64, 1000, scale=5),
            np.random.default_rng(1).integers(0, 1000, 64),
            np.full(64, 1 / 64, np.float32),
        ),
        {"ignore_index": -100, "label_smoothing": 0.0},
    ),
    (
        "cross_entropy_backward",
        lambda: (rand(9, 50, scale=5), np.array([3, 5, 0, 49, 7, 7, 5, 1, 2]), rand(9, seed=5)),
        {"ignore_index": 5, "label_smoothing": 0.2},
    ),
    # the fused output layer + loss: one chunk, several (chunk_bytes), ignored rows, smoothing, padding
    (
        "linear_cross_entropy",
        lambda: (rand(37, 16, scale=2), rand(50, 16, seed=1), np.random.default_rng(2).integers(0, 50, 37)),
        {"atol": 1e-5},
    ),
    (
        "linear_cross_entropy",
        lambda: (
            rand(37, 16, scale=2),
            rand(50, 16, seed=1),
            np.where(np.arange(37) % 5 == 0, -100, np.random.default_rng(2).integers(0, 45, 37)),
        ),
        {"label_smoothing": 0.1, "valid_classes": 45, "chunk_bytes": 8 * 50 * 4, "atol": 1e-5},
    ),
    ("linear_cross_entropy", lambda: (rand(0, 8), rand(10, 8, seed=1), np.zeros(0, np.int64)), {"atol": 1e-5}),
    ("masked_softmax", lambda: (rand(2, 3, 16, 16, scale=4),), {"scale": 0.25, "causal": True, "window": None}),
    ("masked_softmax", lambda: (rand(2, 3, 5, 12, scale=4),), {"scale": 0.5, "causal": True, "window": 4}),
    ("masked_softmax", lambda: (rand(4, 7, 9),), {"scale": -1.5, "causal": False, "window": None}),
    (
        "masked_softmax_backward",
        lambda: (
            cpu.softmax._masked_softmax(rand(3, 16, 16), scale=1.0, causal=True, window=None),
            rand(3, 16, 16, seed=1),
        ),
        {"scale": 0.3},
    ),
    # attention (q, k, v[, g]): causal or not, grouped key/value heads, a window, more keys than queries
    # (a KV cache), head sizes that are not multiples of the kernels' tiles
    *[
        (
            name,
            make if name == "sdpa" else with_output_gradient(make),
            {"scale": scale, "causal": causal, "window": window, "atol": 1e-5},
        )
        for name in ("sdpa", "sdpa_backward")
        for make, scale, causal, window in [
            (lambda: (rand(2, 4, 16, 8), rand(2, 4, 16, 8, seed=1), rand(2, 4, 16, 8, seed=2)), 0.35, True, None),
            (lambda: (rand(2, 4, 7, 24), rand(2, 2, 11, 24, seed=1), rand(2, 2, 11, 40, seed=2)), 0.2, False, None),
            (lambda: (rand(1, 6, 37, 24), rand(1, 2, 53, 24, seed=1), rand(1, 2, 53, 40, seed=2)), 0.2, True, 9),
            (lambda: (rand(2, 3, 33, 64), rand(2, 3, 33, 64, seed=1), rand(2, 3, 33, 64, seed=2)), 0.125, True, None),
            (lambda: (rand(1, 2, 1, 16), rand(1, 2, 9, 16, seed=1), rand(1, 2, 9, 16, seed=2)), 0.25, True, None),
            (lambda: (rand(1, 2, 20, 16), rand(1, 2, 29, 16, seed=1), rand(1, 2, 29, 16, seed=2)), 0.25, False, 5),
            # views of a fused projection (B, T, H, D) transposed, and a last axis that is not contiguous
            (lambda: tuple(rand(2, 16, 4, 8, seed=i).transpose(0, 2, 1, 3) for i in range(3)), 0.35, True, None),
            (lambda: tuple(rand(2, 4, 8, 16, seed=i).swapaxes(-1, -2) for i in range(3)), 0.3, False, None),
        ]
    ],
    ("rope", lambda: (rand(2, 3, 8, 16), rand(8, 8, seed=1), rand(8, 8, seed=2)), {"inverse": False}),
    (
        "rope",
        lambda: (rand(2, 8, 3, 16).transpose(0, 2, 1, 3), rand(8, 8, seed=1), rand(8, 8, seed=2)),
        {"inverse": True},
    ),
    ("rope", lambda: (rand(2, 3, 16, 8).swapaxes(-1, -2), rand(8, 8, seed=1), rand(8, 8, seed=2)), {"inverse": True}),
    ("rope", lambda: (rand(5, 6), rand(5, 3, seed=1), rand(5, 3, seed=2)), {"inverse": False}),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name,make,attrs", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_native_matches_numpy(name, make, attrs, threads, monkeypatch):
    monkeypatch.setattr(cpu_native.common, "_PARALLEL_MIN", 0)  # split even these small arrays among threads
    monkeypatch.setattr(cpu_threads, "_PARALLEL_MIN", 0)
    set_num_threads(threads)
    try:
        check(name, *make(), **attrs)
    finally:
        set_num_threads(None)


def test_linear_cross_entropy_of_an_empty_vocabulary():
    """A weight of no rows (every target ignored) gives a loss of 0 and zero gradients, as PyTorch's
    cross_entropy does, not a division by zero when the chunk's rows are counted."""
    for n in (0, 3):
        loss, dx, dw = NATIVE["linear_cross_entropy"](rand(n, 8), rand(0, 8), np.full(n, -100))
        assert float(loss) == 0 and dx.shape == (n, 8) and dw.shape == (0, 8) and (dx == 0).all()


def test_training_takes_the_recomputing_attention_only_with_the_c_kernels(monkeypatch):
    """Without the C kernels (no compiler, GRADCRAFT_CPU_NATIVE=0) training keeps explicit attention: the
    NumPy sdpa, even inside the BLAS thread policy's wrapper, is not a reason to recompute the weights."""
    assert cpu.CPUBackend().recomputing_attention_preferred(np.float32)
    monkeypatch.setattr(cpu.native, "kernels", lambda reference, empty: {})
    numpy_only = cpu.CPUBackend()
    assert not numpy_only.recomputing_attention_preferred(np.float32)
    assert not numpy_only.fused_linear_cross_entropy(np.float32)


def test_big_arrays_on_threads():
    """Arrays as a training step has them, split among 2 threads; norm weight gradients are summed
    in blocks of rows that do not depend on the thread count (bitwise equal on 1 and 2 threads)."""
    x, w, g = rand(2048, 128), rand(128, seed=1), rand(2048, 128, seed=2)
    set_num_threads(2)
    try:
        two = NATIVE["rms_norm_backward"](x, w, g, eps=1e-6, n_dims=1)
        check(
            "cross_entropy_backward",
            rand(512, 4096, scale=3),
            np.arange(512) * 7,
            np.full(512, 0.01, np.float32),
            ignore_index=-100,
            label_smoothing=0.0,
        )
        check("masked_softmax", rand(16, 4, 128, 128), scale=0.17, causal=True, window=None)
    finally:
        set_num_threads(None)
    one = NATIVE["rms_norm_backward"](x, w, g, eps=1e-6, n_dims=1)
    assert all(np.array_equal(a, b) for a, b in zip(one, two))


def test_nan_propagates():
    """A NaN logit makes its row's loss NaN (the trainer's NaN guard relies on it)."""
    logits = rand(4, 100)
    logits[2, 17] = np.nan
    loss = NATIVE["cross_entropy"](logits, np.array([1, 2, 3, 4]), ignore_index=-100, label_smoothing=0.0)
    assert np.isnan(loss[2]) and np.isfinite(loss[[0, 1, 3]]).all()
    assert np.isnan(NATIVE["silu"](np.array([np.nan, 1.0], np.float32))[0])
    extremes = np.array([-np.inf, -1e30, -100.0, 100.0, np.inf], np.float32)
    for name in ("silu", "gelu"):
        with np.errstate(invalid="ignore", over="ignore"):
            np.testing.assert_array_equal(NATIVE[name](extremes), REFERENCE[name](extremes), err_msg=name)


def test_out_of_range_target_is_an_error():
    with pytest.raises(IndexError, match="out of range"):
        NATIVE["cross_entropy"](rand(2, 10), np.array([1, 10]), ignore_index=-100, label_smoothing=0.0)


def test_norm_weights_of_another_size_fall_back_to_numpy():
    """The C kernels read `features` weights; a broadcast (1,) weight goes to NumPy (which broadcasts)."""
    x, w = rand(4, 8), np.array([2.0], np.float32)
    np.testing.assert_array_equal(
        NATIVE["rms_norm"](x, w, eps=1e-6, n_dims=1), REFERENCE["rms_norm"](x, w, eps=1e-6, n_dims=1)
    )


def test_other_dtypes_fall_back_to_numpy():
    x = np.random.default_rng(0).standard_normal((3, 8))
    np.testing.assert_array_equal(NATIVE["silu"](x), cpu.activations._silu(x))  # float64: the NumPy kernel itself
    mask = np.tril(np.ones((6, 6), bool))
    s = rand(2, 6, 6)
    np.testing.assert_array_equal(
        NATIVE["masked_softmax"](s, mask, scale=1.0, causal=False, window=None),
        cpu.softmax._masked_softmax(s, mask, scale=1.0, causal=False, window=None),
    )


def test_adamw_matches_numpy():
    rng = np.random.default_rng(0)
    p, g, m, v = (rng.standard_normal(1000).astype(np.float32) for _ in range(4))
    v = np.abs(v)
    consts = dict(scale=0.7, step_size=1e-3, bc2_sqrt=0.3, decay=0.999, beta1=0.9, beta2=0.95, eps=1e-8)
    ref = [a.copy() for a in (p, g, m, v)]
    assert cpu_native.adamw_update(p, g, m, v, **consts)
    cpu.optim._adamw_update(*ref, **consts)
    for got, want in zip((p, m, v), (ref[0], ref[2], ref[3])):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_without_a_compiler_numpy_kernels_run(tmp_path):
    """No C compiler: a one-line status says so, and training still works on the NumPy kernels."""
    code = (
        "from gradcraft.backend.cpu import native as cpu_native; import gradcraft as gc; "
        "print(cpu_native.status());"
        "x = gc.randn(4, 6, requires_grad=True); gc.nn.functional.swiglu(x).sum().backward();"
        "print(x.grad.shape)"
    )
    env = {
        **os.environ,
        "CC": str(tmp_path / "no-such-cc"),
        "PATH": str(tmp_path),
        "GRADCRAFT_CACHE_DIR": str(tmp_path / "cache"),
    }
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "no C compiler found" in out.stdout and "torch.Size([4, 6])" in out.stdout
    env = {**os.environ, "GRADCRAFT_CPU_NATIVE": "0"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and "GRADCRAFT_CPU_NATIVE=0" in out.stdout, out.stderr


@pytest.mark.skipif(
    not (sys.platform.startswith("linux") and os.uname().machine == "x86_64")
    or __import__("shutil").which("gcc") is None,
    reason="needs gcc on x86-64",
)
def test_every_simd_loop_vectorizes_on_avx2_and_avx512():
    """gcc's vectorization report for AVX2 (x86-64-v3: Zen 2/3, Haswell on) and AVX-512 targets: every
    `omp simd` loop vectorized (a branch in exp_f once left AVX2 machines with scalar kernels)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "scripts"))
    import check_vectorization

    assert len(check_vectorization.simd_loops(cpu_native.compiler.SOURCE.read_text())) >= 30
    assert check_vectorization.check() == []
