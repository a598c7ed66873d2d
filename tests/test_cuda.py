"""The CUDA backend against the CPU backend: every op of the op table on both devices, the primitives
with their own CUDA paths, the optimizer's kernels, and a check that every contract kernel ran.
Skipped without a GPU; what the CUDA kernel tests share, and how they draw and compare their inputs,
is in cuda_support.py."""

import types

import numpy as np
import pytest

import gradcraft as gc
import gradcraft.nn.functional as gF
from gradcraft.backend import KERNELS
from optable import OPS, Const, Fixed, Ints, Mask, float_data, input_shape

from cuda_support import BF16, CUDA_ONLY, FLOATS, SEED, SEEN, KERNEL_TEST_MODULES, check, close, cpu, randn, rng

pytestmark = CUDA_ONLY


# ---------------------------------------------------------------- every op of the op table, on both devices

GC = types.SimpleNamespace(name="gradcraft", T=gc, F=gF)

# bf16 keeps 8 significant bits: one rounding errs by at most U = 2^-8 of the value. An op table
# result went through a few bf16 roundings (inputs, each op's output, the gradient's ops), and a
# value made by cancellation (a sum of terms larger than itself) errs by U of the terms, not of
# itself; BF16_ROUNDINGS of them are allowed, relative to each element and to the tensor's RMS.
BF16_U = 2.0**-8
BF16_ROUNDINGS = 8


def close_bf16(got, expected, what):
    """bf16 results against a float32 reference, element by element:
    |got - expected| <= BF16_ROUNDINGS * U * (|expected| + rms(expected))."""
    what = f"{what} (GRADCRAFT_TEST_SEED={SEED})"
    got, expected = np.asarray(got).astype(np.float64), np.asarray(expected).astype(np.float64)
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(np.isfinite(got), finite, err_msg=f"{what}: non-finite values differ")
    rms = float(np.sqrt(np.mean(expected[finite] ** 2))) if finite.any() else 0.0
    # (non-finite expected values are checked above: NaN where NaN, infinite where infinite)
    tolerance = np.where(finite, BF16_ROUNDINGS * BF16_U * (np.abs(np.where(finite, expected, 0.0)) + rms), 0.0)
    error = np.where(finite, np.abs(got - expected), 0.0)
    worst = np.unravel_index(np.argmax(error - tolerance), error.shape) if error.size else ()
    assert np.all(error <= tolerance), (
        f"{what}: |error| {error[worst]:.3g} > tolerance {tolerance[worst]:.3g} "
        f"at {worst} (expected {expected[worst]:.4g}, got {got[worst]:.4g})"
    )


def _inputs(sample, dtype, device, seed, noncontiguous, round_to=None):
    """The op's arguments and differentiable leaves; round_to (a gc dtype): float data rounded to it
    first (a float32 reference of bf16 inputs)."""
    r = np.random.default_rng(seed)
    args, leaves = [], []
    for spec in sample:
        if isinstance(spec, Const):
            args.append(spec.value)
        elif isinstance(spec, Ints):
            args.append(gc.tensor(r.integers(0, spec.high, size=spec.shape), dtype=gc.int64, device=device))
        elif isinstance(spec, Fixed):
            fixed = gc.tensor(r.standard_normal(spec.shape).astype(np.float32), device=device)
            args.append(fixed.to(round_to).to(dtype) if round_to is not None else fixed.to(dtype))
        elif isinstance(spec, Mask):
            args.append(gc.tensor(r.random(spec.shape) < 0.5, device=device))
        else:
            shape = input_shape(spec)
            data = float_data(spec, r)
            if round_to is not None:
                data = gc.tensor(data, dtype=round_to).float().numpy()
            if noncontiguous and len(shape) >= 1:
                leaf = gc.tensor(np.repeat(data, 2, axis=-1), dtype=dtype, device=device, requires_grad=True)
                args.append(leaf[..., ::2])
            else:
                leaf = gc.tensor(data, dtype=dtype, device=device, requires_grad=True)
                args.append(leaf)
            leaves.append(leaf)
    return args, leaves


def _run_op(op, sample, dtype, device, seed, noncontiguous, round_to=None):
    args, leaves = _inputs(sample, dtype, device, seed, noncontiguous, round_to)
    out = op.fn(GC, *args)
    values = [out.numpy()]
    if op.grad and out.dtype.is_floating_point:
        upstream = np.random.default_rng(seed + 1).standard_normal(out.shape)
        if round_to is not None:
            upstream = gc.tensor(upstream, dtype=round_to).float().numpy()
        (out * gc.tensor(upstream, dtype=out.dtype, device=device)).sum().backward()
        values += [leaf.grad.numpy() if leaf.grad is not None else None for leaf in leaves]
    return values


CASES = [pytest.param(op, i, id=f"{op.name}-{i}") for op in OPS for i in range(len(op.samples))]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "noncontiguous"])
@pytest.mark.parametrize("op,sample_index", CASES)
def test_op_table_matches_cpu(gpu, op, sample_index, dtype):
    noncontiguous = dtype == "noncontiguous"
    if noncontiguous and not op.noncontiguous:
        pytest.skip("op has no strided-input variant")
    bf16 = dtype == "bfloat16"
    seed = int(rng().integers(1 << 30))
    sample = op.samples[sample_index]
    # The reference: the CPU in float32 (for bf16, on the same bf16-rounded inputs and upstream gradient)
    expected = _run_op(op, sample, gc.float32, "cpu", seed, noncontiguous, round_to=gc.bfloat16 if bf16 else None)
    got = _run_op(op, sample, gc.bfloat16 if bf16 else gc.float32, "cuda", seed, noncontiguous)
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        if e is None:
            assert g is None
            continue
        what = f"{op.name} {'forward' if i == 0 else f'gradient of input {i - 1}'}"
        if bf16 and (g.dtype == BF16 or g.dtype.kind == "f"):  # a float32 result of bf16 work too
            close_bf16(g, e, what)
        else:
            close(g, e, what=what)


# ---------------------------------------------------------------- primitives with their own CUDA paths


@pytest.mark.parametrize("dtype", FLOATS + [np.float16, np.float64])
def test_argmax_over_the_last_axis_picks_the_first_of_equals_and_nans(gpu, dtype):
    r = rng()
    x = randn((5, 3001), dtype, r)
    x[1, [7, 2000]] = 50  # a tie: the first index wins
    x[2, [9, 11]] = np.nan  # NaN wins, the first one
    x[3, :] = 0
    wide = randn((3, 50257), dtype, r)  # a vocabulary: several loads in flight a thread
    wide[0, [40000, 3]] = 60  # the tie's later index is read first by its thread
    wide[1, [45000, 100]] = np.nan
    wide[2, 50256] = 70  # the last column, in the kernel's tail loop
    # 16-byte words with a scalar head and tail: rows of 3001 start off a 16-byte boundary (heads of
    # 1-7 values), short rows are all head; ties between the head, the words and the tail
    spans = randn((4, 203), dtype, r)
    spans[0, [1, 100, 202]] = 80  # row 0's head holds the first
    spans[1, [2, 150]] = 80  # row 1 starts 203 values in: index 2 may sit in its head
    spans[2, [100, 202]] = 80  # words before the tail
    spans[3, [200, 202]] = np.nan
    short = [randn((n, m), dtype, r) for n, m in ((3, 1), (2, 3), (5, 7))]
    for op in ("argmax", "argmin"):
        for a in (x, wide, spans, *short):
            got = gpu.to_numpy(gpu.run(op, [gpu.from_numpy(a)], {"axis": -1, "keepdim": False}))
            np.testing.assert_array_equal(got, getattr(np, op)(a.astype(np.float64), axis=-1))


@pytest.mark.parametrize("dtype", FLOATS + [np.float16, np.float64])
def test_split_argmax_and_greedy_advance(gpu, dtype):
    """The split argmax (a few long rows over several blocks, the last block of a row merging their
    winners: kernels/reduce.cu) gives NumPy's index for ties and NaNs across chunk boundaries, launch
    after launch (its counters go back to 0), and greedy_advance writes it into ids and moves the
    position on, shared by the rows or one per row."""
    from gradcraft.backend.cuda import reduce as R

    r = rng()
    C = 50257
    rows = randn((4, C), dtype, r)
    rows[0, [4095, 4096, 30000]] = 90  # a tie on both sides of the first chunk boundary
    rows[1, [49000, 12]] = np.nan  # NaN in the last chunk and the first
    rows[2, C - 1] = 90  # the last value, in the last (short) chunk
    rows[3, :] = 1  # all equal: index 0
    assert C >= R.SPLIT_MIN
    for op in ("argmax", "argmin"):
        for n in (1, 2, 4):
            for _ in range(3):  # the counters must be back at 0 after every launch
                got = gpu.to_numpy(gpu.run(op, [gpu.from_numpy(rows[:n])], {"axis": -1, "keepdim": False}))
                np.testing.assert_array_equal(got, getattr(np, op)(rows[:n].astype(np.float64), axis=-1))
    for n, positions in ((4, 1), (4, 4), (1, 1)):
        logits = gc.tensor(rows[:n], device="cuda")
        ids = gc.zeros(n, 1, dtype=gc.int64, device="cuda").realize()
        start = np.arange(positions, dtype=np.int64) + 5
        position = gc.tensor(start, device="cuda").realize()
        for step in range(1, 3):
            best = gF.greedy_advance(logits, ids, position).numpy()
            expected = np.argmax(rows[:n].astype(np.float64), axis=-1)
            np.testing.assert_array_equal(best, expected)
            np.testing.assert_array_equal(ids.numpy().reshape(-1), expected)
            np.testing.assert_array_equal(position.numpy(), start + step)


def test_tf32_switch(gpu):
    from gradcraft.backend.cuda import set_tf32

    r = rng()
    a, b = randn((256, 512), np.float32, r), randn((512, 128), np.float32, r)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    try:
        set_tf32(True)
        fast = gpu.to_numpy(gpu.run("matmul", [gpu.from_numpy(a), gpu.from_numpy(b)], {}))
    finally:
        set_tf32(False)
    plain = gpu.to_numpy(gpu.run("matmul", [gpu.from_numpy(a), gpu.from_numpy(b)], {}))
    err = lambda out: np.linalg.norm(out - exact) / np.linalg.norm(exact)  # noqa: E731
    assert err(plain) < 1e-5 and 1e-5 < err(fast) < 3e-3


@pytest.mark.parametrize("dtype", FLOATS + [np.float64, np.int64])
def test_reductions(gpu, dtype):
    r = rng()
    x = r.integers(-5, 5, size=(3, 37, 129)) if dtype == np.int64 else randn((3, 37, 129), dtype, r, scale=2)
    x = x.astype(dtype)
    for op in ("sum", "max", "min"):
        for axes, keepdim in (((2,), False), ((1, 2), True), (None, False), ((1,), False), ((0, 2), True)):
            check(gpu, op, x, axes=axes, keepdim=keepdim, tol_scale=4.0)
    for op in ("argmax", "argmin"):
        check(gpu, op, x, axis=1, keepdim=True)
        check(gpu, op, x, axis=None, keepdim=False)
    if dtype == BF16:
        # bf16: against the float32 cumsum rounded to bf16 once, which is what the kernel computes
        # (it accumulates in float32).
        got = gpu.to_numpy(gpu.run("cumsum", [gpu.from_numpy(x)], {"axis": 2, "reverse": True}))
        expected = cpu().run("cumsum", [x.astype(np.float32)], {"axis": 2, "reverse": True}).astype(BF16)
        close(got, expected, scale=4.0, what="cumsum bf16")
    else:
        check(gpu, "cumsum", x, axis=2, reverse=True, tol_scale=4.0)
    check(gpu, "topk", x, k=5, axis=-1, largest=True)


@pytest.mark.parametrize("dtype", [BF16, np.float16])
def test_half_binary_fast_path(gpu, dtype):
    r = rng()
    a, b = randn((1001, 3), dtype, r), randn((1001, 3), dtype, r, shift=3)
    s = np.asarray(1.7, dtype=dtype)
    for op in ("add", "sub", "mul", "div", "maximum", "minimum"):
        check(gpu, op, a, b)
        check(gpu, op, a, s)
        check(gpu, op, a, b[:1])  # broadcasting: CuPy's path
        check(gpu, op, a, b[0])  # a bias along the last axis: the one-pass kernel (b repeats)


def test_assign_and_logical_not(gpu):
    r = rng()
    target, value = gpu.from_numpy(randn((4, 5), np.float32, r)), randn((4, 5), BF16, r)
    out = gpu.run("assign", [target, gpu.from_numpy(value)], {})
    assert out is target
    close(gpu.to_numpy(target), value.astype(np.float32))
    check(gpu, "logical_not", r.random((3, 7)) < 0.5)


def test_copies_between_devices(gpu):
    for dtype in (np.float32, BF16, np.int64, np.bool_):
        x = (randn((3, 5), np.float32) > 0).astype(dtype)
        on_gpu = gpu.run("copy_from", [x], {"source_backend": cpu()})
        back = cpu().run("copy_from", [on_gpu], {"source_backend": gpu})
        assert isinstance(back, np.ndarray) and back.dtype == x.dtype
        np.testing.assert_array_equal(back, x)
    data = randn((4, 3), np.float32)
    t = gc.tensor(data).to("cuda")
    assert t.device == "cuda:0"
    np.testing.assert_array_equal(t.cpu().numpy(), data)  # against the values it was made from
    np.testing.assert_array_equal(t.numpy(), data)
    u = (t * 2).cpu()
    assert u.device == "cpu" and np.array_equal(u.numpy(), data * 2)


# ---------------------------------------------------------------- optimizer kernels (beyond the contract)


def _adamw_reference(p, g, m, v, lr, step, b1, b2, eps, wd):
    p = p * (1 - lr * wd)
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    p = p - (lr / (1 - b1**step)) * m / (np.sqrt(v) / np.sqrt(1 - b2**step) + eps)
    return p, m, v


def test_adamw_and_grad_norm(gpu):
    import cupy as cp

    r = rng()
    sizes = [1, 65537, 3000, 200001]
    params = [randn((n,), np.float64, r) for n in sizes]
    grads = [randn((n,), np.float32, r) for n in sizes]
    grads[2] = grads[2].astype(BF16)
    d_params = [cp.asarray(p.astype(np.float32)) for p in params]
    d_grads = [cp.asarray(g) for g in grads]
    d_m = [cp.zeros(n, np.float32) for n in sizes]
    d_v = [cp.zeros(n, np.float32) for n in sizes]
    norm = gpu.grad_norm(d_grads, max_norm=1.0)
    expected = np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads))
    got = cp.asnumpy(norm)
    assert abs(got[0] - expected) < 1e-5 * expected and abs(got[1] - min(1.0, 1.0 / (expected + 1e-6))) < 1e-6
    m = [np.zeros(n) for n in sizes]
    v = [np.zeros(n) for n in sizes]
    ref = [p.astype(np.float32).astype(np.float64) for p in params]
    for step in (1, 2, 3):
        lr_step = cp.asarray(np.array([1e-2, step], dtype=np.float32))
        gpu.adamw_step(
            d_params,
            d_grads,
            d_m,
            d_v,
            lr_step,
            beta1=0.9,
            beta2=0.999,
            eps=1e-8,
            weight_decay=0.1,
            grad_scale=norm[1:],
        )
        for i, g in enumerate(grads):
            ref[i], m[i], v[i] = _adamw_reference(
                ref[i], g.astype(np.float64) * got[1], m[i], v[i], 1e-2, step, 0.9, 0.999, 1e-8, 0.1
            )
    for i in range(len(sizes)):
        np.testing.assert_allclose(cp.asnumpy(d_params[i]), ref[i], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(cp.asnumpy(d_m[i]), m[i], rtol=1e-5, atol=1e-6)


def test_scale_many_rounds_once_per_dtype(gpu):
    """clip_grad_norm_'s in-place scaling: every tensor (ragged sizes, three dtypes) times scale[0] in
    float32, rounded once to its dtype, as the CPU backend's NumPy reference."""
    import cupy as cp

    from gradcraft.backend.cpu import optim as cpu_optim

    r = rng()
    sizes = ((1, np.float32), (65537, BF16), (3001, np.float16), (131073, np.float32))
    arrays = [randn((n,), dt, r) for n, dt in sizes]
    scale = np.array([0.37, 5.0], dtype=np.float32)
    d_arrays = [cp.asarray(a) for a in arrays]
    gpu.scale_many(d_arrays, cp.asarray(scale))
    cpu_optim._scale_many(arrays, scale)
    for got, want in zip(d_arrays, arrays):
        np.testing.assert_array_equal(cp.asnumpy(got).view(np.uint8), want.view(np.uint8))


def test_cast_many_gives_the_bits_of_one_cast_each(gpu):
    import cupy as cp

    r = rng()
    kinds = [np.float32, BF16, np.float16]
    arrays, dtypes = [], []
    for n in (1, 3, 65536, 65537, 200001, 7):
        for src in kinds:
            for dst in kinds:
                if src is dst:
                    continue
                a = (randn((n,), np.float32, r) * 300).astype(src)
                if n > 3:  # special values: signed zeros, infinities, NaN, halfway cases, overflow
                    a[:3] = np.array([-0.0, np.inf, np.nan], dtype=np.float32).astype(src)
                arrays.append(cp.asarray(a))
                dtypes.append(np.dtype(dst))
    arrays.append(cp.asarray(randn((5, 7), np.float32, r)))  # shapes kept
    dtypes.append(BF16)
    arrays.append(cp.asarray(np.array([1 + 2**-8, 1 + 3 * 2**-8, 70000.0, 1e-8], np.float32)))  # ties, f16 range
    dtypes.append(BF16)
    arrays.append(arrays[-1])
    dtypes.append(np.dtype(np.float16))
    outs = gpu.cast_many(arrays, dtypes)
    for k, (a, d, o) in enumerate(zip(arrays, dtypes, outs)):
        expected = cp.asnumpy(gpu.run("cast", [a], {"dtype": d}))
        got = cp.asnumpy(o)
        assert got.dtype == d and got.shape == a.shape, k
        nan = np.isnan(expected.astype(np.float32))
        np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), nan, err_msg=str(k))
        bits = np.uint32 if d.itemsize == 4 else np.uint16  # every other value bit for bit (-0.0 too)
        np.testing.assert_array_equal(got.view(bits)[~nan], expected.view(bits)[~nan], err_msg=str(k))


def test_memory_info(gpu):
    from gradcraft.backend.cuda import memory_info

    info = memory_info()
    assert info["total_bytes"] >= info["used_bytes"] >= 0


@pytest.mark.parametrize("capacity_factor", [None, 0.5])
def test_moe_layer_matches_the_cpu(gpu, capacity_factor):
    """Routing, the permutation kernels and their gradients, through the MoE layer on both devices."""
    from gradcraft.models.moe import MoE

    gc.manual_seed(3)
    layer = MoE(16, 12, 4, 2, capacity_factor, init_std=0.5, out_std=0.5)
    x = rng().standard_normal((2, 9, 16)).astype(np.float32)
    upstream = rng().standard_normal((2, 9, 16)).astype(np.float32)
    results = []
    for device in ("cpu", "cuda"):
        if device == "cuda":
            layer.to("cuda")
        xt = gc.tensor(x, device=device, requires_grad=True)
        out = layer(xt)
        ((out * gc.tensor(upstream, device=device)).sum() + layer.aux["balance"] + layer.aux["z"]).backward()
        results.append([out.numpy(), xt.grad.numpy()] + [p.grad.numpy() for p in layer.parameters()])
        layer.zero_grad()
    for got, expected in zip(results[1], results[0]):
        close(got, expected, scale=5.0, what="moe")


@pytest.mark.parametrize("D", [16, 18])  # 18: a ragged tail for every vector width (4 floats, 8 halves)
@pytest.mark.parametrize("dtype", FLOATS + [np.float16, np.float64])
def test_kv_cache_kernels(gpu, dtype, D):
    """kv_attention and the indexed assign (kernels/kv_cache.cu) against the NumPy kernels: per-row
    and shared positions, a ring past its length, grouped-query heads, a head size that is not a
    multiple of the vector width; tests/test_kv_cache.py checks the ops against PyTorch."""
    r = rng()
    q, k, v = randn((3, 4, 1, D), dtype, r), randn((3, 2, 10, D), dtype, r), randn((3, 2, 10, D), dtype, r)
    for position in (np.array([0, 5, 13]), np.array([7])):
        check(gpu, "kv_attention", q, k, v, position, scale=0.25)
        target, value = randn((3, 2, 10, D), dtype, r), randn((3, 2, 1, D), dtype, r)
        on_gpu = gpu.from_numpy(target)
        gpu.run("assign", [on_gpu, gpu.from_numpy(value), gpu.from_numpy(position)], {"dim": 2})
        expected = cpu().reference_kernels["assign"](target.copy(), value, position, dim=2)
        np.testing.assert_array_equal(gpu.to_numpy(on_gpu), expected)


# (the kernel takes head sizes whose rows are a power of two of 16-byte reads; the op layer composes the
# others, and tests/test_kv_cache.py checks that path)
@pytest.mark.parametrize("D", [32, 16])
@pytest.mark.parametrize("rotary", [False, True])
@pytest.mark.parametrize("dtype", FLOATS + [np.float16])
def test_kv_append_attention_kernel(gpu, dtype, rotary, D):
    """kv_append_attention (kernels/kv_cache.cu) against the NumPy kernel: this step's key and value
    written into their slots of both caches in place (rotated first when rotary, with per-row or shared
    angles), then the attention; per-row and shared positions, a ring past its length, grouped-query
    heads. tests/test_kv_cache.py checks the op against the separate ops it stands for."""
    r = rng()
    B, H, Hkv, length = 3, 4, 2, 37
    for position in (np.array([0, 20, 41]), np.array([9])):
        q, key, value = randn((B, H, 1, D), dtype, r), randn((B, Hkv, 1, D), dtype, r), randn((B, Hkv, 1, D), dtype, r)
        k_cache, v_cache = randn((B, Hkv, length, D), dtype, r), randn((B, Hkv, length, D), dtype, r)
        angles = r.uniform(0, 6, size=(len(position), D // 2))
        rope = (np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)) if rotary else ()
        attrs = {"scale": 0.3, "rotary": rotary}
        k_expected, v_expected = k_cache.copy(), v_cache.copy()
        expected = cpu().reference_kernels["kv_append_attention"](
            q, k_expected, v_expected, position, key, value, *rope, **attrs
        )
        k_gpu, v_gpu = gpu.from_numpy(k_cache), gpu.from_numpy(v_cache)
        rest = [gpu.from_numpy(a) for a in (position, key, value, *rope)]
        got = gpu.run("kv_append_attention", [gpu.from_numpy(q), k_gpu, v_gpu, *rest], attrs)
        what = f"kv_append_attention at {position.tolist()}"
        close(gpu.to_numpy(got), np.asarray(expected), what=what)
        close(gpu.to_numpy(k_gpu), k_expected, what=f"{what}: the key cache")
        close(gpu.to_numpy(v_gpu), v_expected, what=f"{what}: the value cache")


def test_sample_tokens_kernel(gpu):
    """sample_tokens (kernels/sampling.cu) against the NumPy kernel: greedy, top-k, top-k + top-p and
    whole-vocabulary rows; tests/test_sampling.py checks it further (ties, rows it cannot hold)."""
    r = rng()
    logits = randn((4, 777), np.float32, r, scale=3)
    args = [
        logits,
        np.array([0.0, 0.8, 1.2, 1.0]),
        np.array([0, 20, 7, 0], dtype=np.int64),
        np.array([1.0, 1.0, 0.6, 1.0]),
        r.random(4),
    ]
    got = gpu.to_numpy(gpu.run("sample_tokens", [gpu.from_numpy(a) for a in args], {}))
    np.testing.assert_array_equal(got, cpu().run("sample_tokens", args, {}))


def test_every_contract_kernel_ran(gpu, request):
    """Every contract kernel of the CUDA backend ran on the GPU in some test of KERNEL_TEST_MODULES. It
    reads what the whole session ran, so conftest.py puts it last, and it runs only where the session
    holds all those modules unfiltered, in one process."""
    config = request.config
    modules = {item.module.__name__.rpartition(".")[2] for item in request.session.items if hasattr(item, "module")}
    if (
        getattr(config, "workerinput", None) is not None
        or config.option.keyword
        or config.option.markexpr
        or not modules >= set(KERNEL_TEST_MODULES)
    ):
        pytest.skip(f"needs {', '.join(KERNEL_TEST_MODULES)} whole, in one process (run without -n, -k, -m)")
    # (an optional kernel the CUDA backend leaves out runs its spec's fallback there: tests/test_opspec.py)
    unseen = (KERNELS & set(gpu.kernels)) - SEEN
    assert not unseen, f"kernels never run on the GPU: {sorted(unseen)}"


@pytest.mark.parametrize("dtype", [np.int64, BF16, np.float32])
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (4096,), (0, 3)])
def test_to_numpy_later_copies_small_arrays_by_kernel_and_large_ones_by_copy_engine(gpu, dtype, shape):
    """The asynchronous fetch behind a decoding loop: up to KERNEL_FETCH_BYTES a copy kernel writes the
    pinned host buffer directly, above it a copy-engine transfer; both give the array's values, after
    everything queued before them, including a strided view."""
    r = rng()
    values = (r.integers(-1000, 1000, size=shape) if dtype == np.int64 else randn(shape, np.float32, r)).astype(dtype)
    a = gpu.from_numpy(values)
    waits = [gpu.to_numpy_later(a)]
    a[...] = 0  # queued after the fetch: the fetched values are the old ones
    waits.append(gpu.to_numpy_later(gpu.from_numpy(np.ascontiguousarray(values.T)).T))  # a strided view
    for wait in waits:
        got = wait()
        assert got.shape == values.shape and got.dtype == values.dtype
        np.testing.assert_array_equal(got, values)


def test_custom_autograd_function(gpu):
    """A user's autograd.Function on the GPU (its outputs pass through the `passthrough` kernel)."""

    class Cube(gc.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            ctx.save_for_backward(x)
            ctx.k = k
            return x**3 * k, x.sum()

        @staticmethod
        def backward(ctx, g, g_sum):
            (x,) = ctx.saved_tensors
            return g * 3 * x**2 * ctx.k + g_sum, None

    data = randn((5, 7), np.float32, rng())
    grads = []
    for device in ("cpu", "cuda"):
        x = gc.tensor(data, device=device, requires_grad=True)
        y, s = Cube.apply(x, 0.5)
        ((y * y).sum() + s * 2).backward()
        grads.append(x.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-5, atol=1e-6)
