"""Elementwise fusion (gradcraft/engine/fusion.py): which nodes a schedule fuses, and that a fused
group computes what its kernels compute one by one.

Here the CPU backend runs a group by its reference (each op's own kernel in turn; its generated C
kernels are tests/test_fusion_cpu.py's): the results must be bitwise those of the unfused schedule,
and the tests check the grouping rules (what joins a group, what must stay outside). The generated
CUDA kernels are compiled here with NVRTC alone when its library is installed, and compared with the
unfused kernels on a GPU (the cuda-marked tests)."""

import numpy as np
import pytest

import gradcraft as gc
import gradcraft.nn.functional as F
from gradcraft import nn
from gradcraft.backend import Backend
from gradcraft.backend.cuda import compiler, fused
from gradcraft.device import get_backend
from gradcraft.engine import fusion, realize

needs_gpu = pytest.mark.skipif(not gc.is_available("cuda"), reason="needs an NVIDIA GPU with CuPy")


@pytest.fixture
def fusing_cpu(monkeypatch):
    """The CPU backend handed fused groups (run by its reference), recording each group's ops."""
    backend = get_backend("cpu")
    groups = []
    reference = Backend.fused_elementwise  # (each op's own kernel in turn, not the C kernels)

    def record(self, args, program, shape, dtype):
        groups.append(tuple(e[1] for e in program if e[0] == "op" and e[1] != "full"))
        return reference(self, args, program, shape, dtype)

    monkeypatch.setattr(type(backend), "fuses_elementwise", True)
    monkeypatch.setattr(type(backend), "fused_min_elements", 0)
    monkeypatch.setattr(type(backend), "fused_elementwise", record)
    return groups


def _custom_ops(x, w):
    """A user's own activations and norm (the issue's examples), forward and backward."""
    a = x * gc.sigmoid(1.702 * x)
    b = F.relu(x).square()
    c = 30 * gc.tanh(x / 30)
    d = x * gc.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    return (a + b) * c - d


def _run(device="cpu", dtype=gc.float32):
    rng = np.random.default_rng(0)
    x = gc.tensor(rng.normal(size=(4, 33)).astype(np.float32), device=device).to(dtype).requires_grad_()
    w = gc.tensor(rng.normal(size=(33,)).astype(np.float32), device=device).to(dtype).requires_grad_()
    y = _custom_ops(x, w)
    y.backward(gc.ones_like(y))
    return [t.float().numpy() for t in (y.detach(), x.grad, w.grad)]


def test_user_activations_and_norms_fuse_forward_and_backward_bitwise(fusing_cpu):
    fused_result = _run()
    assert len(fusing_cpu) >= 3 and max(len(g) for g in fusing_cpu) >= 5, fusing_cpu
    fusion_was = fusion.ENABLED
    fusion.ENABLED = False
    try:
        plain = _run()
    finally:
        fusion.ENABLED = fusion_was
    for a, b in zip(fused_result, plain):
        np.testing.assert_array_equal(a, b)


def test_fusion_cuts_the_kernels_of_a_training_step(fusing_cpu):
    def step():
        gc.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.GELU(approximate="tanh"), nn.Linear(16, 4))
        opt = gc.optim.AdamW(model.parameters(), lr=1e-2)
        x = gc.tensor(np.random.default_rng(1).normal(size=(5, 8)).astype(np.float32))
        before = realize.launches["kernels"]
        for _ in range(3):
            h = model(x)
            loss = (h * gc.sigmoid(h)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        return realize.launches["kernels"] - before, loss.item(), [p.numpy().copy() for p in model.parameters()]

    fused_kernels, fused_loss, fused_params = step()
    fusion_was = fusion.ENABLED
    fusion.ENABLED = False
    try:
        kernels, loss, params = step()
    finally:
        fusion.ENABLED = fusion_was
    assert fused_kernels < kernels and fused_loss == loss
    for a, b in zip(fused_params, params):
        np.testing.assert_array_equal(a, b)


def test_what_a_group_may_not_absorb(fusing_cpu):
    x = gc.randn(6, 5)
    t = (x * 2).exp()  # kept by the caller: a target, so it is a group's output, not an inside value
    u = t + 1
    gc.realize(t, u)
    np.testing.assert_allclose(u.numpy(), t.numpy() + 1, rtol=1e-6)
    assert all(len(g) <= 2 for g in fusing_cpu), fusing_cpu
    # a reduction between elementwise ops splits them: the sum is its own kernel
    fusing_cpu.clear()
    v = ((x * 3).exp().sum(-1, keepdim=True) * 2).sqrt()
    v.realize()
    assert ("mul", "exp") in fusing_cpu and ("mul", "sqrt") in fusing_cpu, fusing_cpu


def test_a_group_does_not_move_reads_past_an_in_place_write(fusing_cpu):
    w = gc.randn(7)
    with gc.no_grad():
        before = w.numpy().copy()
        lazy = (w * 2 + 1).exp()  # reads w's old data ...
        w.mul_(0.5)  # ... though w is written first
    np.testing.assert_allclose(lazy.numpy(), np.exp(before * 2 + 1), rtol=1e-6)


@pytest.mark.skipif(compiler.find_nvrtc() is None, reason="NVRTC library not found")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_generated_kernels_compile(arch, fusing_cpu):
    """Every op of fusion.FUSABLE in a generated kernel, over float32/bfloat16/float16/bool inputs of
    each layout (own shape, one value, a bias, a transposed view), compiles with NVRTC."""
    rng = np.random.default_rng(0)
    import ml_dtypes

    shape = (3, 4)
    args = [
        rng.normal(size=shape).astype(np.float32),
        np.float32(rng.normal(size=(1,))),
        rng.normal(size=(4,)).astype(ml_dtypes.bfloat16),
        rng.normal(size=(4, 3)).astype(np.float16).T,
        rng.normal(size=shape) > 0,
        rng.integers(0, 5, size=shape),
    ]
    args[1] = np.asarray(args[1])
    ops = []
    for op in fusion.UNARY:
        ops.append(("op", op, (0,), (), "float32", shape))
    for op in fusion.BINARY + fusion.COMPARE:
        ops.append(("op", op, (1, 2), (), "bool" if op in fusion.COMPARE else "bfloat16", shape))
    program = [("in", k, a.dtype.name) for k, a in enumerate(args)]
    for entry in ops:
        program.append(entry)
    program += [
        ("op", "gelu", (0,), (("approximate", "tanh"),), "float32", shape),
        ("op", "gelu", (0,), (("approximate", "none"),), "float16", shape),
        ("op", "cast", (5,), (("dtype", np.dtype("float32")),), "float32", shape),
        ("op", "cast", (0,), (("dtype", np.dtype("bool")),), "bool", shape),
        ("op", "logical_not", (4,), (), "bool", shape),
        ("op", "full", (), (("dtype", np.dtype("float32")), ("shape", ()), ("value", 0.1)), "float32", ()),
        ("op", "where", (4, 3, len(program) + 5), (), "float16", shape),
    ]
    text = fused.source(tuple(program), args, shape, np.dtype("float16"))
    ptx = compiler.nvrtc_compile(compiler.expand(text), "fused.cu", arch, library=compiler.find_nvrtc())
    assert b".entry fused" in ptx


@needs_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_fused_cuda_kernels_equal_the_unfused_ones(dtype):
    dtype = getattr(gc, dtype)
    fused_result = _run("cuda", dtype)
    fusion_was = fusion.ENABLED
    fusion.ENABLED = False
    try:
        plain = _run("cuda", dtype)
    finally:
        fusion.ENABLED = fusion_was
    tol = 1e-5 if dtype == gc.float32 else 1e-2
    for a, b in zip(fused_result, plain):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
