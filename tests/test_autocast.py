"""gradcraft.autocast against torch.autocast: the dtype (and value) of each op inside a CPU autocast
block, gradients reaching float32 parameters, nesting, decorators, threads (gradcraft/amp/)."""

import threading
import warnings

import numpy as np
import pytest

import gradcraft as gc
import gradcraft.nn.functional as gF
from gradcraft.amp import policy

torch = pytest.importorskip("torch")
tF = torch.nn.functional

RNG = np.random.default_rng(0)
X = RNG.normal(size=(4, 8)).astype(np.float32)
W = RNG.normal(size=(8, 8)).astype(np.float32) / 3
BIAS = RNG.normal(size=(8,)).astype(np.float32)
TARGET = np.array([1, 0, 7, 3])


def _name(dtype) -> str:
    return str(dtype).split(".")[-1]


# Each case: f(lib, F, a, env) with a the op's input (float32 or a lower dtype) and env the float32
# tensors (x, w, bias) and the int64 targets t of the same library.
CASES = {
    "matmul": lambda L, F, a, e: a @ e["w"],
    "matmul_lower_times_fp32": lambda L, F, a, e: a @ e["w"].T,
    "mm": lambda L, F, a, e: L.mm(a, e["w"]),
    "bmm": lambda L, F, a, e: L.bmm(a.reshape(1, 4, 8), e["w"].reshape(1, 8, 8)),
    "linear": lambda L, F, a, e: F.linear(a, e["w"], e["bias"]),
    "linear_module_like": lambda L, F, a, e: F.linear(a, e["w"]),
    "einsum": lambda L, F, a, e: L.einsum("ij,jk->ik", a, e["w"]),
    "sdpa": lambda L, F, a, e: F.scaled_dot_product_attention(
        a.reshape(1, 1, 4, 8), e["x"].reshape(1, 1, 4, 8), e["x"].reshape(1, 1, 4, 8), is_causal=True
    ),
    "dot": lambda L, F, a, e: L.dot(a[0], a[1]),
    "outer": lambda L, F, a, e: L.outer(a[0], a[1]),
    "softmax": lambda L, F, a, e: F.softmax(a, -1),
    "softmax_dtype": lambda L, F, a, e: F.softmax(a, -1, dtype=L.float32),
    "log_softmax": lambda L, F, a, e: F.log_softmax(a, dim=-1),
    "layer_norm": lambda L, F, a, e: F.layer_norm(a, (8,)),
    "rms_norm": lambda L, F, a, e: F.rms_norm(a, (8,)),
    "cross_entropy": lambda L, F, a, e: F.cross_entropy(a, e["t"]),
    "cross_entropy_none": lambda L, F, a, e: F.cross_entropy(a, e["t"], reduction="none"),
    "nll_loss": lambda L, F, a, e: F.nll_loss(a, e["t"]),
    "mse_loss": lambda L, F, a, e: F.mse_loss(a, a * 0.5),
    "mse_loss_mixed": lambda L, F, a, e: F.mse_loss(a, e["x"]),
    "l1_loss": lambda L, F, a, e: F.l1_loss(a, a * 0.5),
    "smooth_l1_loss": lambda L, F, a, e: F.smooth_l1_loss(a, a * 0.5),
    "huber_loss": lambda L, F, a, e: F.huber_loss(a, a * 0.5),
    "binary_cross_entropy": lambda L, F, a, e: F.binary_cross_entropy(L.sigmoid(a), L.sigmoid(a * 0.5)),
    "bce_with_logits": lambda L, F, a, e: F.binary_cross_entropy_with_logits(a, L.sigmoid(a * 0.5)),
    "cosine_similarity": lambda L, F, a, e: F.cosine_similarity(a, a * 0.5),
    "normalize": lambda L, F, a, e: F.normalize(a),
    "exp": lambda L, F, a, e: L.exp(a),
    "log": lambda L, F, a, e: L.log(a.abs() + 1),
    "pow": lambda L, F, a, e: L.pow(a, 2),
    "pow_operator": lambda L, F, a, e: a**2,
    "rpow": lambda L, F, a, e: 2**a,
    "sum": lambda L, F, a, e: a.sum(),
    "sum_dim": lambda L, F, a, e: L.sum(a, dim=1),
    "prod": lambda L, F, a, e: (a * 0.1 + 1).prod(dim=1),
    "cumsum": lambda L, F, a, e: L.cumsum(a, dim=0),
    "norm": lambda L, F, a, e: L.norm(a),
    "mean": lambda L, F, a, e: a.mean(),
    "var": lambda L, F, a, e: a.var(dim=0),
    "std": lambda L, F, a, e: a.std(),
    "logsumexp": lambda L, F, a, e: L.logsumexp(a, dim=-1),
    "rsqrt": lambda L, F, a, e: L.rsqrt(a.abs() + 1),
    "reciprocal": lambda L, F, a, e: (a.abs() + 1).reciprocal(),
    "softplus": lambda L, F, a, e: F.softplus(a),
    "tanh": lambda L, F, a, e: L.tanh(a),
    "sigmoid": lambda L, F, a, e: L.sigmoid(a),
    "gelu": lambda L, F, a, e: F.gelu(a),
    "relu": lambda L, F, a, e: F.relu(a),
    "silu": lambda L, F, a, e: F.silu(a),
    "elu": lambda L, F, a, e: F.elu(a),
    "sqrt": lambda L, F, a, e: (a.abs() + 1).sqrt(),
    "add_same": lambda L, F, a, e: a + a,
    "mul_mixed": lambda L, F, a, e: a * e["x"],
    "cat_mixed": lambda L, F, a, e: L.cat([a, e["x"]]),
    "stack_mixed": lambda L, F, a, e: L.stack([a, e["x"]]),
    "where_mixed": lambda L, F, a, e: L.where(e["x"] > 0, a, e["x"]),
    "amax": lambda L, F, a, e: L.amax(a, dim=1),
    "max": lambda L, F, a, e: a.max(),
    "tril": lambda L, F, a, e: L.tril(a),
    "clamp": lambda L, F, a, e: a.clamp(-1, 1),
    "dropout_eval": lambda L, F, a, e: F.dropout(a, 0.5, training=False),
    "matmul_float64": lambda L, F, a, e: a.double() @ e["w"].double(),
}


def _env(L, torch_side: bool, device: str = "cpu"):
    if torch_side:
        return {"x": L.tensor(X), "w": L.tensor(W), "bias": L.tensor(BIAS), "t": L.tensor(TARGET)}
    put = lambda a: gc.tensor(a, device=device)  # noqa: E731
    return {"x": put(X), "w": put(W), "bias": put(BIAS), "t": put(TARGET)}


def _run(L, F, case, low, cast_input: bool):
    env = _env(L, L is torch)
    a = env["x"].to(getattr(L, low)) if cast_input else env["x"]
    with L.autocast("cpu", dtype=getattr(L, low)):
        return CASES[case](L, F, a, env)


@pytest.mark.parametrize("low", ["bfloat16", "float16"])
@pytest.mark.parametrize("cast_input", [False, True], ids=["fp32_input", "low_input"])
def test_dtype_of_every_op_matches_torch(low, cast_input):
    wrong = []
    for case in CASES:
        expected = _run(torch, tF, case, low, cast_input)
        got = _run(gc, gF, case, low, cast_input)
        if _name(got.dtype) != _name(expected.dtype):
            wrong.append(f"{case}: {_name(got.dtype)}, torch {_name(expected.dtype)}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("cast_input", [False, True], ids=["fp32_input", "low_input"])
@pytest.mark.parametrize("case", ["matmul", "linear", "sdpa", "einsum", "cross_entropy_none", "mse_loss_mixed", "prod"])
def test_values_match_torch_in_bfloat16(case, cast_input):
    expected = _run(torch, tF, case, "bfloat16", cast_input).float().numpy()
    got = _run(gc, gF, case, "bfloat16", cast_input).float().numpy()
    np.testing.assert_allclose(got, expected, rtol=2e-2, atol=2e-2)


def test_linear_cross_entropy_is_the_lower_product_and_a_float32_loss():
    """gradcraft's fused output layer + loss: as PyTorch's cross_entropy(linear(x, w)) under autocast."""
    out = {}
    for L, F in ((gc, gF), (torch, tF)):
        x, w = L.tensor(X, requires_grad=True), L.tensor(W, requires_grad=True)
        with L.autocast("cpu"):
            if L is gc:
                loss = F.linear_cross_entropy(x, w, L.tensor(TARGET))
            else:
                loss = F.cross_entropy(F.linear(x, w), L.tensor(TARGET))
        loss.backward()
        out[L.__name__] = (loss, x.grad, w.grad)
    for ours, theirs in zip(out["gradcraft"], out["torch"]):
        assert _name(ours.dtype) == _name(theirs.dtype) == "float32"
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=2e-2, atol=1e-2)


def _mlp_grads(L, F, nn, autocast: bool, backward_inside: bool = False):
    lin1, lin2 = nn.Linear(8, 16), nn.Linear(16, 8)
    norm = nn.LayerNorm(16)
    with L.no_grad():
        for p, v in zip(
            [lin1.weight, lin1.bias, lin2.weight, lin2.bias],
            [W.repeat(2, 0) / 2, BIAS.repeat(2) / 4, W.repeat(2, 1) / 2, BIAS / 4],
        ):
            p.copy_(L.tensor(np.ascontiguousarray(v)))
    x, t = L.tensor(X), L.tensor(TARGET)
    ctx = L.autocast("cpu", dtype=L.bfloat16, enabled=autocast)
    with ctx:
        h = F.gelu(norm(lin1(x)))
        logits = lin2(h)
        loss = F.cross_entropy(logits, t)
        if backward_inside:
            loss.backward()
    if not backward_inside:
        loss.backward()
    params = [lin1.weight, lin1.bias, norm.weight, lin2.weight, lin2.bias]
    return loss, logits, [p.grad for p in params]


@pytest.mark.parametrize("backward_inside", [False, True])
def test_gradients_reach_float32_parameters(backward_inside):
    loss, logits, grads = _mlp_grads(gc, gF, gc.nn, True, backward_inside)
    t_loss, t_logits, t_grads = _mlp_grads(torch, tF, torch.nn, True, backward_inside)
    assert loss.dtype == gc.float32 and logits.dtype == gc.bfloat16
    assert t_loss.dtype == torch.float32 and t_logits.dtype == torch.bfloat16
    for g, tg in zip(grads, t_grads):
        assert g.dtype == gc.float32
        np.testing.assert_allclose(g.numpy(), tg.numpy(), rtol=5e-2, atol=2e-2)
    np.testing.assert_allclose(loss.item(), t_loss.item(), rtol=1e-2)


def test_backward_is_not_autocast_again():
    """Gradients are the same whether backward() runs inside the block or after it."""
    _, _, inside = _mlp_grads(gc, gF, gc.nn, True, backward_inside=True)
    _, _, after = _mlp_grads(gc, gF, gc.nn, True, backward_inside=False)
    for a, b in zip(inside, after):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_state_nesting_and_defaults():
    assert gc.get_autocast_dtype("cpu") == gc.bfloat16 and gc.get_autocast_dtype("cuda") == gc.float16
    assert not gc.is_autocast_enabled("cpu") and not gc.is_autocast_enabled()
    x = gc.tensor(X)
    with gc.autocast("cpu"):
        assert gc.is_autocast_enabled("cpu") and not gc.is_autocast_enabled("cuda")
        assert (x @ x.T).dtype == gc.bfloat16
        with gc.autocast("cpu", enabled=False):
            assert not gc.is_autocast_enabled("cpu") and (x @ x.T).dtype == gc.float32
        with gc.amp.autocast("cpu", dtype=gc.float16):
            assert gc.get_autocast_dtype("cpu") == gc.float16 and (x @ x.T).dtype == gc.float16
        assert gc.get_autocast_dtype("cpu") == gc.bfloat16 and (x @ x.T).dtype == gc.bfloat16
    assert not gc.is_autocast_enabled("cpu") and (x @ x.T).dtype == gc.float32


def test_exception_inside_restores_state():
    with pytest.raises(KeyError):
        with gc.autocast("cpu"):
            raise KeyError("x")
    assert not gc.is_autocast_enabled("cpu") and not policy.state.on


def test_decorator():
    @gc.autocast("cpu")
    def forward(a, b):
        return a @ b

    x = gc.tensor(X)
    assert forward(x, x.T).dtype == gc.bfloat16
    assert (x @ x.T).dtype == gc.float32 and forward.__name__ == "forward"


def test_state_is_per_thread():
    seen = {}
    inside, done = threading.Event(), threading.Event()

    def other():
        inside.wait()
        x = gc.tensor(X)
        seen["enabled"], seen["dtype"] = gc.is_autocast_enabled("cpu"), (x @ x.T).dtype
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with gc.autocast("cpu"):
        inside.set()
        done.wait(30)
    thread.join()
    assert seen == {"enabled": False, "dtype": gc.float32}


def test_unsupported_dtype_and_missing_cuda_warn_and_disable():
    with pytest.warns(UserWarning, match="CPU Autocast only supports"):
        with gc.autocast("cpu", dtype=gc.float64):
            assert not gc.is_autocast_enabled("cpu")
    if not gc.cuda.is_available():
        with pytest.warns(UserWarning, match="CUDA is not available"):
            with gc.autocast("cuda"):
                assert not gc.is_autocast_enabled("cuda")
    with pytest.raises(RuntimeError, match="unsupported autocast device_type"):
        gc.autocast("xpu_unknown")
    with pytest.raises(ValueError, match="device_type"):
        gc.autocast(0)


def test_deprecated_aliases():
    with pytest.warns(FutureWarning, match="torch.cpu.amp.autocast"):
        ctx = gc.cpu.amp.autocast()
    x = gc.tensor(X)
    with ctx:
        assert (x @ x.T).dtype == gc.bfloat16
    from gradcraft.cuda.amp import autocast as cuda_autocast  # importable, as torch.cuda.amp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with cuda_autocast(enabled=False):
            assert not gc.is_autocast_enabled("cuda")


# PyTorch's CUDA op reference, written out here as the documentation lists it: under CUDA autocast
# these ops compute in float32 / the lower dtype; every other op keeps its inputs' (promoted) dtype.
CUDA_FP32 = {
    "softmax", "softmax_dtype", "log_softmax", "layer_norm", "rms_norm", "cross_entropy", "cross_entropy_none",
    "nll_loss", "mse_loss", "mse_loss_mixed", "l1_loss", "smooth_l1_loss", "bce_with_logits", "cosine_similarity",
    "normalize", "exp", "log", "pow", "pow_operator", "rpow", "sum", "sum_dim", "prod", "cumsum", "norm", "rsqrt",
    "reciprocal", "softplus",
}  # fmt: skip
CUDA_LOWER = {"matmul", "matmul_lower_times_fp32", "mm", "bmm", "linear", "linear_module_like", "einsum", "sdpa"}


def _check_cuda_table(device: str) -> None:
    """Each op under the CUDA table: in float32, the lower dtype, or its inputs' dtype (mean, var,
    logsumexp, elu... built from sum/exp inside stay in bfloat16, as PyTorch's own kernels)."""
    kind = device.split(":")[0]
    wrong = []
    for case in CASES:
        if case in ("binary_cross_entropy", "matmul_float64", "dot"):
            continue
        env = _env(gc, False, device)
        a = env["x"].to(gc.bfloat16)
        with gc.autocast(kind, dtype=gc.bfloat16):
            got = CASES[case](gc, gF, a, env).dtype
        mixed = case.endswith("_mixed")
        expected = gc.float32 if case in CUDA_FP32 or mixed else gc.bfloat16
        if got != expected:
            wrong.append(f"{case}: {got}, expected {expected}")
    assert not wrong, "\n".join(wrong)
    env = _env(gc, False, device)
    with gc.autocast(kind, dtype=gc.bfloat16), pytest.raises(RuntimeError, match="unsafe to autocast"):
        gF.binary_cross_entropy(gc.sigmoid(env["x"]), gc.sigmoid(env["x"]))
    with gc.autocast(kind, dtype=gc.bfloat16):  # dot promotes on CUDA: bfloat16 x float32 -> float32
        assert gc.dot(env["x"][0].to(gc.bfloat16), env["x"][1]).dtype == gc.float32


def test_cuda_policy_on_the_documented_lists(monkeypatch):
    """The CUDA table applied to CPU tensors (the same check runs on a GPU below)."""
    monkeypatch.setitem(policy.POLICY, "cpu", policy.POLICY["cuda"])
    _check_cuda_table("cpu")


CUDA_ONLY = pytest.param(
    "cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(not gc.cuda.is_available(), reason="needs CuPy and a GPU")]
)


@pytest.mark.parametrize("device", [CUDA_ONLY])
def test_cuda_autocast_on_the_gpu(device):
    _check_cuda_table(device)
    x = gc.tensor(X, device=device)
    with gc.autocast("cuda"):  # float16 by default
        assert (x @ x.T).dtype == gc.float16 and gF.softmax(x @ x.T, -1).dtype == gc.float32
    with gc.autocast("cuda", dtype=gc.bfloat16):  # autocast("cuda") leaves CPU tensors alone
        assert (gc.tensor(X) @ gc.tensor(W)).dtype == gc.float32


@pytest.mark.parametrize("device", [CUDA_ONLY])
def test_cuda_gradients_reach_float32_parameters(device):
    """A GPT block's forward under CUDA autocast (flash attention in bfloat16), backward after it."""
    rng = np.random.default_rng(3)
    q = rng.normal(size=(2, 4, 64, 64)).astype(np.float32)
    weight = rng.normal(size=(64, 64)).astype(np.float32) / 8  # (the same weight on both sides)
    out = {}
    for L, F, dev in ((gc, gF, device), (torch, tF, "cpu")):
        w = L.tensor(weight, device=dev, requires_grad=True)
        x = L.tensor(q, device=dev)
        with L.autocast(dev, dtype=L.bfloat16):
            h = F.scaled_dot_product_attention(x @ w, x, x, is_causal=True)
            loss = F.mse_loss(F.layer_norm(h, (64,)), L.tensor(q, device=dev))
        loss.backward()
        out[L.__name__] = (h.dtype, loss.dtype, w.grad.dtype, loss.item(), w.grad.cpu().numpy())
    ours, theirs = out["gradcraft"], out["torch"]
    assert [_name(d) for d in ours[:3]] == [_name(d) for d in theirs[:3]] == ["bfloat16", "float32", "float32"]
    np.testing.assert_allclose(ours[3], theirs[3], rtol=2e-2)
    np.testing.assert_allclose(ours[4], theirs[4], rtol=5e-2, atol=5e-3)


def test_off_costs_one_check():
    """With autocast off, a listed op runs its own body: the same graph as before autocast existed."""
    assert not policy.state.on
    x = gc.tensor(X)
    assert (x @ x.T).dtype == gc.float32 and gc.exp(x.to(gc.bfloat16)).dtype == gc.bfloat16
