"""gradcraft.compile and the engine's replayed schedules (gradcraft/engine/plans.py).

CI has no GPU, so the CPU backend is given a graph recorder with CUDA graphs' semantics: while
recording, kernels run (to make the output arrays) but nothing they write in place survives the
recording; a replay runs the recorded kernels again on the recorded arrays, writing each result into
the recorded output array. A replay that read a stale input, missed a leaf's new data or overwrote an
output someone still holds gives different numbers from the eager run, which these tests compare.
The same tests run on a GPU with real CUDA graphs (tests/test_cuda_compile_user.py)."""

import contextlib

import numpy as np
import pytest

import gradcraft as gc
import gradcraft.nn.functional as F
from gradcraft import nn
from gradcraft.device import get_backend
from gradcraft.engine import plans
from gradcraft.engine.realize import WRITES_INPUTS


class Recorder:
    """Records the CPU backend's kernel calls as a replayable list (see the module docstring)."""

    def __init__(self, backend, refuse=()):
        self.backend, self.refuse = backend, set(refuse)
        self.graphs: dict = {}

    # The multi-tensor methods (outside backend.run), with the argument positions of the lists they write.
    METHODS = {"adamw_step": (0, 2, 3), "grad_norm": (), "scale_many": (0,), "cast_many": ()}

    def capture(self, fn):
        calls, snapshots = [], {}
        run = self.backend.run

        def recording_run(op, args, attrs):
            if op in self.refuse:
                raise RuntimeError(f"operation not permitted when stream is capturing ({op})")
            for i in WRITES_INPUTS.get(op, ()):
                snapshots.setdefault(id(args[i]), (args[i], args[i].copy()))
            result = run(op, args, attrs)
            calls.append((op, list(args), attrs, result))
            return result

        def recording_method(name, method):
            def call(*args, **kwargs):
                for i in self.METHODS[name]:
                    for a in args[i]:
                        snapshots.setdefault(id(a), (a, a.copy()))
                result = method(*args, **kwargs)
                calls.append((method, args, kwargs, result))
                return result

            return call

        self.backend.run = recording_run
        for name in self.METHODS:
            setattr(self.backend, name, recording_method(name, getattr(self.backend, name)))
        try:
            result = fn()
        finally:
            for name in ("run", *self.METHODS):
                delattr(self.backend, name)
            for target, saved in snapshots.values():  # a recording leaves no writes behind
                np.copyto(target, saved)
        self.graphs[id(calls)] = calls
        return result, calls

    def replay(self, calls):
        for op, args, attrs, recorded in calls:
            if callable(op):  # a multi-tensor method: writes its lists in place, or returns new arrays
                result = op(*args, **attrs)
            else:
                result = self.backend.kernels[op](*args, **attrs)
            if recorded is None:
                continue
            pairs = zip(recorded, result) if isinstance(recorded, (tuple, list)) else ((recorded, result),)
            for out, new in pairs:
                if out is not new:
                    np.copyto(out, new)

    def release_graph(self, calls):
        self.graphs.pop(id(calls), None)

    @staticmethod
    def address(array):
        return array.__array_interface__["data"][0]


@contextlib.contextmanager
def recording_cpu(refuse=()):
    backend = get_backend("cpu")
    recorder = Recorder(backend, refuse)
    names = ("capture", "replay", "release_graph", "address")
    for name in names:
        setattr(backend, name, getattr(recorder, name))
    plans.stats.update(recorded=0, replayed=0, replayed_kernels=0, eager=0, failed=0)
    try:
        yield recorder
    finally:
        plans.disable()
        for name in names:
            delattr(backend, name)


class TinyGPT(nn.Module):
    def __init__(self, vocab=23, dim=16, T=8, dropout=0.1):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(T, dim)
        self.ln = nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, vocab)
        self.drop = nn.Dropout(dropout)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(gc.arange(T, device=idx.device))
        q, k, v = self.qkv(self.ln(x)).view(B, T, 3, 2, -1).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.1 if self.training else 0.0)
        x = x + self.drop(self.proj(y.transpose(1, 2).reshape(B, T, -1)))
        h = self.fc(x)
        logits = self.out(F.relu(h).square())  # squared ReLU: a user's own activation
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
        return logits, loss


def _train(compile_kwargs, steps=8, shapes=((4, 8),), clip=True, hold_outputs=False, device="cpu"):
    gc.manual_seed(0)
    model = TinyGPT().to(device)
    compiled = gc.compile(model, **compile_kwargs)
    opt = gc.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    rng = np.random.default_rng(1)
    losses, held = [], []
    for step in range(steps):
        B, T = shapes[step % len(shapes)]
        x = gc.from_numpy(rng.integers(0, 23, (B, T))).to(device)  # (on a GPU: a copy in the schedule)
        y = gc.tensor(rng.integers(0, 23, (B, T)), device=device)
        logits, loss = compiled(x, y)
        loss.backward()
        if clip:
            nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if hold_outputs:
            held.append((loss, logits))
        else:
            losses.append(loss.item())
    if hold_outputs:  # read only now: every replay after a step rewrote the recorded buffers
        losses = [loss.item() for loss, _ in held]
        losses.append(float(sum(logits.sum().item() for _, logits in held)))
    return losses, {k: v.numpy().copy() for k, v in model.state_dict().items()}


def _assert_same(a, b, rtol=1e-5):
    np.testing.assert_allclose(a[0], b[0], rtol=rtol, atol=1e-6)
    for k in a[1]:
        np.testing.assert_allclose(a[1][k], b[1][k], rtol=rtol, atol=1e-6, err_msg=k)


needs_gpu = pytest.mark.skipif(not gc.is_available("cuda"), reason="needs an NVIDIA GPU with CuPy")


@needs_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("hold_outputs", [False, True])
def test_cuda_graphs_replay_20_steps_equal_to_eager_with_dropout(hold_outputs):
    """Real CUDA graphs: 20 steps with dropout, two batch shapes, clipping and fused AdamW."""
    kwargs = dict(steps=20, shapes=((4, 8), (2, 6)), hold_outputs=hold_outputs, device="cuda")
    eager = _train({"backend": "eager"}, **kwargs)
    plans.stats.update(recorded=0, replayed=0, replayed_kernels=0, eager=0, failed=0)
    try:
        compiled = _train({}, **kwargs)
        # one schedule a step (forward and backward; clipping and AdamW are multi-tensor kernels), per
        # shape: seen once, recorded the second time, replayed after
        assert plans.stats["recorded"] >= 2 and plans.stats["replayed"] >= 16 and not plans.stats["failed"], plans.stats
    finally:
        plans.disable()
    _assert_same(eager, compiled, rtol=2e-5)


def test_compiled_training_replays_and_equals_the_eager_run_with_dropout():
    eager = _train({"backend": "eager"})
    with recording_cpu():
        compiled = _train({})
        assert plans.stats["recorded"] >= 1 and plans.stats["replayed"] >= 6, plans.stats  # steps 3 to 8
    _assert_same(eager, compiled)


def test_outputs_kept_from_earlier_steps_keep_their_values():
    eager = _train({"backend": "eager"}, steps=5, hold_outputs=True)
    with recording_cpu():
        compiled = _train({}, steps=5, hold_outputs=True)
        assert plans.stats["replayed"] > 0
    _assert_same(eager, compiled)


def test_a_new_shape_is_recorded_again():
    shapes = ((4, 8), (2, 6))
    eager = _train({"backend": "eager"}, steps=8, shapes=shapes)
    with recording_cpu():
        compiled = _train({}, steps=8, shapes=shapes)
        # forward+backward of each shape: seen at steps 1-2, recorded at 3-4, replayed at 5-8
        assert plans.stats["recorded"] == 2 and plans.stats["replayed"] >= 4, plans.stats
    _assert_same(eager, compiled)


def test_a_schedule_that_cannot_be_recorded_runs_eagerly_with_one_warning(capsys):
    eager = _train({"backend": "eager"}, steps=4)
    with recording_cpu(refuse={"softmax_cross_entropy", "cross_entropy"}):
        compiled = _train({}, steps=4)
        assert plans.stats["failed"] >= 1
    _assert_same(eager, compiled)
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: gradcraft.compile")]
    assert len(warnings) == 1 and "cannot be recorded" in warnings[0] and "stream is capturing" in warnings[0]


def test_fullgraph_refuses_what_cannot_be_recorded():
    with recording_cpu(refuse={"softmax_cross_entropy", "cross_entropy"}):
        with pytest.raises(gc.UserError, match="fullgraph"):
            _train({"fullgraph": True}, steps=3)
    with recording_cpu():
        plans.stats["failed"] = 5  # failures before this model was compiled are not its own
        _train({"fullgraph": True}, steps=3)


def test_compiled_step_function_and_new_batch_data():
    """A whole step compiled as a function; each call's batch is new data in new tensors (leaves
    copied into the recorded buffers), and a batch tensor kept from the first call is untouched."""

    def run(kwargs):
        gc.manual_seed(0)
        model = TinyGPT(dropout=0.0)
        opt = gc.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        @gc.compile(**kwargs)
        def step(x, y):
            _, loss = model(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss

        rng = np.random.default_rng(2)
        first = gc.tensor(rng.integers(0, 23, (4, 8)))
        kept = first.numpy().copy()
        losses = [step(first, gc.tensor(rng.integers(0, 23, (4, 8)))).item()]
        for _ in range(5):
            losses.append(step(gc.tensor(rng.integers(0, 23, (4, 8))), gc.tensor(rng.integers(0, 23, (4, 8)))).item())
        np.testing.assert_array_equal(first.numpy(), kept)
        return losses, {k: v.numpy().copy() for k, v in model.state_dict().items()}

    eager = run({"backend": "eager"})
    with recording_cpu():
        compiled = run({})
        assert plans.stats["replayed"] > 0
    _assert_same(eager, compiled)


def test_optimized_module_behaves_like_torchs():
    model = nn.Linear(3, 2)
    compiled = gc.compile(model, mode="reduce-overhead", dynamic=False)
    assert compiled._orig_mod is model and compiled.weight is model.weight
    assert list(compiled.state_dict()) == ["_orig_mod.weight", "_orig_mod.bias"]
    assert compiled.in_features == 3
    x = gc.randn(5, 3)
    np.testing.assert_array_equal(compiled(x).numpy(), model(x).numpy())
    with pytest.raises(gc.UserError, match="modes"):
        gc.compile(model, mode="fastest")
    with pytest.raises(gc.UserError, match="Module or a function"):
        gc.compile(3)
