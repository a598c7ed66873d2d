"""Fused elementwise groups as generated C kernels on the CPU (backend/cpu/native/fused.py) against
the unfused kernels (the reference: each op's own kernel in turn).

Bitwise where the C expression is NumPy's (arithmetic, comparisons, where, casts, constants, half
precision rounding), within float tolerance for the transcendental functions. Each test compiles few
distinct kernels (one per dtype for the op table): compiles are cached on disk by source."""

import os
import subprocess
import sys

import numpy as np
import pytest

import gradcraft as gc
import gradcraft.nn.functional as F
from gradcraft.backend import Backend
from gradcraft.backend.cpu import threads
from gradcraft.backend.cpu.native import fused
from gradcraft.device import get_backend
from gradcraft.engine import fusion, realize

pytestmark = pytest.mark.skipif(not fused.available(), reason="no C compiler: the CPU runs fused groups by reference")

# ops whose C expression is NumPy's, operation for operation: their results must be bitwise equal
EXACT = {"neg", "abs", "sign", "relu", "sqrt", "rsqrt", "add", "sub", "mul", "div", "maximum", "minimum"}
EXACT |= set(fusion.COMPARE) | {"where", "cast", "logical_not", "full", "pow2"}
# (rtol, atol): a few ulps (and their absolute part where a value nears zero by cancellation)
TOLERANCE = {"float32": (3e-6, 1e-6), "float64": (1e-13, 1e-15), "float16": (2e-3, 1e-4), "bfloat16": (1.6e-2, 1e-3)}


@pytest.fixture
def small_groups_in_c(monkeypatch):
    """Fused groups of any size run as C kernels (by default only big ones do: a compile is not
    worth it for small arrays)."""
    monkeypatch.setattr(fused, "MIN_ELEMENTS", 0)


def _values(rng, shape, dtype, positive=False):
    x = rng.normal(size=shape) * 2.0
    flat = x.reshape(-1)
    specials = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-30, 60.0, -60.0, 0.5, 2.0]
    flat[: min(len(specials), flat.size)] = specials[: flat.size]
    if positive:
        x = np.abs(x) + 0.25
    return x.astype(dtype)


def _op_table_program(dtype, rows, cols):
    """A program holding every fusable op of fusion's table once, each op's value selected into its
    own columns of the output by a nest of `where`s, so that one kernel checks them all. Inputs: x in
    the output's layout, y a transposed view, b along the last axis (reversed), r a row statistic, s one value,
    a mask, int64 and int32 ids, then one column mask per op."""
    rng = np.random.default_rng(0)
    shape, name = (rows, cols), np.dtype(dtype).name
    args = [
        _values(rng, shape, dtype),
        np.ascontiguousarray(_values(rng, (cols, rows), dtype)).T,
        _values(rng, (cols,), dtype, positive=True)[::-1],  # (a reversed view: a negative stride)
        _values(rng, (rows, 1), dtype),
        np.asarray(2.0, dtype),
        rng.normal(size=shape) > 0,
        rng.integers(-5, 5, size=shape),
        rng.integers(-5, 5, size=(rows, 1)).astype(np.int32),
    ]
    program = [("in", k, a.dtype.name) for k, a in enumerate(args)]
    slots = []  # (what it checks, position of its value)

    def op(kind, refs, attrs=(), out=name, label=None):
        program.append(("op", kind, tuple(refs), tuple(attrs), out, shape))
        if label:
            slots.append((label, len(program) - 1))
        return len(program) - 1

    pairs = [(0, 1), (1, 2), (0, 3), (3, 0), (2, 0)]
    for k, kind in enumerate(fusion.UNARY):
        op(kind, (pairs[k % 5][0],), label=kind)
    for k, kind in enumerate(fusion.BINARY):
        attrs = (("approximate", "none"),) if kind == "gelu_backward" else ()
        gradient = kind.endswith("_backward")  # (value and gradient: same shape)
        op(kind, (1, 0) if gradient else pairs[k % 5], attrs, label=kind)
    op("pow", (0, 4), label="pow2")  # (an exponent of 2: x * x)
    op("gelu_backward", (0, 1), (("approximate", "tanh"),), label="gelu_backward tanh")
    op("gelu", (1,), (("approximate", "tanh"),), label="gelu tanh")
    op("gelu", (0,), (("approximate", "none"),), label="gelu")
    for k, kind in enumerate(fusion.COMPARE):
        op("cast", (op(kind, pairs[k % 5], out="bool"),), (("dtype", np.dtype(dtype)),), label=kind)
    op("where", (5, 0, 3), label="where")
    op("cast", (6,), (("dtype", np.dtype(dtype)),), label="cast")
    op("cast", (7,), (("dtype", np.dtype(dtype)),), label="cast")
    as_bool = op("cast", (1,), (("dtype", np.dtype(bool)),), out="bool")
    op("cast", (op("logical_not", (as_bool,), out="bool"),), (("dtype", np.dtype(dtype)),), label="logical_not")
    constant = op("full", (), (("dtype", np.dtype(dtype)), ("shape", ()), ("value", 0.1)))
    op("add", (0, constant), label="full")
    # column c shows slot c % len(slots)
    value = slots[-1][1]
    for j in reversed(range(len(slots) - 1)):
        program.append(("in", len(args), "bool"))
        args.append(np.arange(cols) % len(slots) == j)
        value = op("where", (len(program) - 1, slots[j][1], value))
    return tuple(program), args, shape, [label for label, _ in slots]


def _check(program, args, shape, dtype, labels):
    backend = get_backend("cpu")
    got = backend.fused_elementwise(args, program, shape, np.dtype(dtype))
    want = Backend.fused_elementwise(backend, args, program, shape, np.dtype(dtype))  # kernels one by one
    assert got.dtype == want.dtype and got.shape == want.shape
    got, want = got.astype(np.float64), want.astype(np.float64)
    for j, label in enumerate(labels):
        a, b = got[:, j :: len(labels)], want[:, j :: len(labels)]
        if label.split()[0] in EXACT:
            np.testing.assert_array_equal(a, b, err_msg=label)
        else:
            rtol, atol = TOLERANCE[np.dtype(dtype).name]
            if "_backward" in label:  # g * f'(x): the sum inside f' cancels near its zeros, an ulp of g * O(1)
                atol = max(atol, rtol * np.nanmax(np.abs(b[np.isfinite(b)])))
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=label)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_every_fusable_op_equals_its_unfused_kernel(dtype, small_groups_in_c):
    program, args, shape, labels = _op_table_program(dtype, 13, 2 * 47 + 5)
    _check(program, args, shape, dtype, labels)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_casts_from_float64_to_half_round_once(dtype, small_groups_in_c):
    """float64 values just beside the midpoints of two half-precision values: rounded through float32
    they would round twice (to the midpoint, then to even); the cast rounds once, as NumPy's."""
    rng = np.random.default_rng(3)
    h = rng.normal(size=500).astype(dtype)
    up = np.nextafter(h.astype(np.float32), np.float32(np.inf)).astype(dtype)  # (the next half value, at least)
    up = np.where(up == h, (h.astype(np.float64) * (1 + 2**-6)).astype(dtype), up)
    mid = (h.astype(np.float64) + up.astype(np.float64)) / 2
    x = np.concatenate([mid * (1 + 1e-12), mid * (1 - 1e-12), [np.nan, np.inf, -0.0, 1e-30, 1e6]]).reshape(5, -1)
    program = (("in", 0, "float64"), ("op", "cast", (0,), (("dtype", np.dtype(dtype)),), dtype, x.shape))
    program += (("op", "neg", (1,), (), dtype, x.shape),)
    _check(program, [x], x.shape, dtype, ["cast"])


def test_big_outputs_split_over_threads_mid_row(monkeypatch):
    """Over a million elements the kernel runs on ranges that the threads take in turn (cut in the
    middle of rows): same results as the reference."""
    monkeypatch.setattr(threads, "_num_threads", 3)
    program, args, shape, labels = _op_table_program("float32", 22000, 49)
    assert shape[0] * shape[1] >= threads._PARALLEL_MIN
    _check(program, args, shape, "float32", labels)


def _user_ops(x, w):
    """A user's own activations and a hand-written RMSNorm (the issue's examples)."""
    a = x * gc.sigmoid(1.702 * x)
    b = F.relu(x).square()
    c = 30 * gc.tanh(x / 30)
    d = x * gc.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    return (a + b) * c - d


def _train_values(fn, shape, transpose=False):
    rng = np.random.default_rng(1)
    data = rng.normal(size=shape[::-1] if transpose else shape).astype(np.float32)
    x = gc.tensor(data)
    x = (x.t() if transpose else x).detach().requires_grad_()
    w = gc.tensor(rng.normal(size=shape[-1:]).astype(np.float32)).requires_grad_()
    y = fn(x, w)
    y.backward(gc.tensor(rng.normal(size=tuple(y.shape)).astype(np.float32)))
    return [t.numpy().copy() for t in (y.detach(), x.grad, w.grad)]


def _unfused(fn, *args, **kwargs):
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(fusion, "ENABLED", False)
    try:
        return fn(*args, **kwargs)
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("transpose", [False, True])
def test_user_activations_forward_and_backward(transpose, small_groups_in_c, monkeypatch):
    ops = []
    kernel = fused._kernel

    def seen(text):
        ops.append(text)
        return kernel(text)

    monkeypatch.setattr(fused, "_kernel", seen)
    monkeypatch.setattr(fused, "_plans", {})  # (so that every group looks its kernel up)
    got = _train_values(_user_ops, (19, 45), transpose)
    assert len(ops) >= 4  # forward and backward groups ran as C kernels
    for a, b in zip(got, _unfused(_train_values, _user_ops, (19, 45), transpose)):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)


def test_arithmetic_chains_are_bitwise_the_unfused_ones(small_groups_in_c):
    """A hand-written RMSNorm and squared ReLU: no transcendental function, so every value of the
    forward and the backward is the unfused one, bit for bit."""

    def norm(x, w):
        return F.relu(x * gc.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w).square() / 3

    before = realize.launches["kernels"]
    got = _train_values(norm, (23, 37))
    fused_kernels = realize.launches["kernels"] - before
    before = realize.launches["kernels"]
    want = _unfused(_train_values, norm, (23, 37))
    assert fused_kernels < realize.launches["kernels"] - before
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_debug_prints_the_generated_source(small_groups_in_c, monkeypatch, capsys):
    monkeypatch.setattr(fused, "DEBUG", 2)
    monkeypatch.setattr(fused, "_kernels", {})  # (compiled before in this process: not printed again)
    x = gc.tensor(np.linspace(-3, 3, 257, dtype=np.float32))
    y = (x * 0.5 + 1.25).abs().sqrt().numpy()
    np.testing.assert_array_equal(y, np.sqrt(np.abs(np.linspace(-3, 3, 257, dtype=np.float32) * 0.5 + 1.25)))
    err = capsys.readouterr().err
    assert "fused C kernel" in err and "void fused(" in err and "sqrtf(" in err


def test_without_a_compiler_groups_run_by_reference(tmp_path):
    """A machine without a C compiler (none on the PATH, CC naming none): fusion is off on the CPU (a
    group would only be its kernels one by one) and results are the unfused ones."""
    code = (
        "import numpy as np, gradcraft as gc\n"
        "from gradcraft.device import get_backend\n"
        "from gradcraft.backend.cpu.native import fused\n"
        "fused.MIN_ELEMENTS = 0\n"
        "x = gc.tensor(np.linspace(-2, 2, 300, dtype=np.float32))\n"
        "print(get_backend('cpu').fuses_elementwise, fused.available())\n"
        "print(((x * 3 - 1).abs() * x).numpy().tobytes().hex())\n"
    )
    x = np.linspace(-2, 2, 300, dtype=np.float32)
    want = (np.abs(x * np.float32(3) - np.float32(1)) * x).tobytes().hex()
    env = {**os.environ, "CC": str(tmp_path / "no-cc"), "PATH": str(tmp_path), "GRADCRAFT_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", want], out.stdout
