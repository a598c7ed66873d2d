"""gradcraft.compile of a whole step function (gradcraft/compiled_step.py): recorded once as one
graph, replayed without running its Python again.

On the CPU these tests use tests/test_compile.py's graph recorder (CUDA graphs' semantics: a
replay reruns the recorded kernels on the recorded arrays, and nothing else); the same tests run
with real CUDA graphs on a GPU. Every compiled run is compared with the same function run as
written (`backend="eager"`), which moves dropout's counter the same way."""

import numpy as np
import pytest

import gradcraft as gc
from gradcraft import nn
from gradcraft.compiled_step import WARMUP
from test_compile import TinyGPT, recording_cpu

needs_gpu = pytest.mark.skipif(not gc.is_available("cuda"), reason="needs an NVIDIA GPU with CuPy")


def _train(compile_kwargs, steps=10, shapes=((4, 8),), device="cpu", hold=False, inside=None, lrs=None):
    """Steps of a TinyGPT training step compiled as one function; returns (losses, state, Python
    runs of the step's body)."""
    gc.manual_seed(0)
    model = TinyGPT().to(device)
    opt = gc.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    runs = [0]

    def train_step(x, y, clip):
        runs[0] += 1
        logits, loss = model(x, y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        if inside is not None:
            inside(loss, opt)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return {"loss": loss, "logits": logits}

    step = gc.compile(train_step, **compile_kwargs)
    rng = np.random.default_rng(1)
    losses, held = [], []
    for i in range(steps):
        B, T = shapes[i % len(shapes)]
        if lrs is not None:
            opt.param_groups[0]["lr"] = lrs[i]
        x = gc.from_numpy(rng.integers(0, 23, (B, T))).to(device)
        y = gc.tensor(rng.integers(0, 23, (B, T)), device=device)
        out = step(x, y, clip=0.5)
        if hold:
            held.append(out)
        else:
            losses.append(out["loss"].item())
    if hold:  # read only now: each replay rewrote the graph's output memory
        losses = [out["loss"].item() for out in held] + [float(sum(out["logits"].sum().item() for out in held))]
    return losses, {k: v.numpy().copy() for k, v in model.state_dict().items()}, runs[0]


def _assert_same(a, b):
    np.testing.assert_allclose(a[0], b[0], rtol=1e-5, atol=1e-6)
    for k in a[1]:
        np.testing.assert_allclose(a[1][k], b[1][k], rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("hold", [False, True])
def test_a_step_is_recorded_once_and_replayed_equal_to_eager(hold):
    eager = _train({"backend": "eager"}, hold=hold)
    with recording_cpu():
        compiled = _train({}, hold=hold)
    assert eager[2] == 10 and compiled[2] == WARMUP + 1  # after the recording, no Python runs
    _assert_same(eager, compiled)


def test_learning_rates_set_between_calls_reach_the_replays():
    lrs = [3e-3 * (1 - i / 12) for i in range(10)]
    eager = _train({"backend": "eager"}, lrs=lrs)
    with recording_cpu():
        compiled = _train({}, lrs=lrs)
    assert compiled[2] == WARMUP + 1
    _assert_same(eager, compiled)


def test_a_new_signature_is_recorded_again():
    shapes = ((4, 8), (2, 6))
    eager = _train({"backend": "eager"}, steps=10, shapes=shapes)
    with recording_cpu():
        compiled = _train({}, steps=10, shapes=shapes)
    assert compiled[2] == 2 * (WARMUP + 1)
    _assert_same(eager, compiled)


def _read_loss(loss, opt):
    loss.item()


def _draw_noise(loss, opt):
    gc.randn(3)


def _schedule(loss, opt):
    for group in opt.param_groups:
        group["lr"] *= 0.9


class _Decay(gc.optim.lr_scheduler.LRScheduler):
    def get_lr(self):
        return [base * 0.9**self.last_epoch for base in self.base_lrs]


@pytest.mark.parametrize(
    "inside, reason",
    [(_read_loss, "copies data between the host and the device"), (_draw_noise, "host random generator")],
)
def test_a_step_that_cannot_be_replayed_runs_as_written_after_one_warning(inside, reason, capsys):
    eager = _train({"backend": "eager"}, inside=inside)
    with recording_cpu():
        compiled = _train({}, inside=inside)
    assert compiled[2] == 10  # every call ran the Python
    _assert_same(eager, compiled)
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: gradcraft.compile")]
    assert len(warnings) == 1 and reason in warnings[0] and "train_step" in warnings[0], warnings


def test_a_scheduler_stepped_inside_makes_the_step_run_as_written(capsys):
    holder = {}

    def inside(loss, opt):
        if "scheduler" not in holder:
            holder["scheduler"] = _Decay(opt)
        holder["scheduler"].step()

    with recording_cpu():
        compiled = _train({}, inside=inside)
    assert compiled[2] == 10
    assert "_Decay.step keeps its numbers" in capsys.readouterr().err


def test_a_step_whose_recording_fails_runs_as_written(capsys):
    """A kernel that cannot be recorded (here the recorder refuses cross-entropy, as a CUDA graph
    refuses a kernel that waits for the host): gradients and step counts are put back, the call and
    every later one run as written, after one warning."""
    eager = _train({"backend": "eager"})
    with recording_cpu(refuse={"softmax_cross_entropy", "cross_entropy"}):
        compiled = _train({})
    assert compiled[2] == 11  # ten calls, and the recording's run of the Python
    _assert_same(eager, compiled)
    err = [line for line in capsys.readouterr().err.splitlines() if "train_step runs as written" in line]
    assert len(err) == 1 and "recording it failed" in err[0], err


def test_fullgraph_refuses_a_step_with_a_host_sync():
    with recording_cpu():
        with pytest.raises(gc.UserError, match="fullgraph=True.*cannot be recorded"):
            _train({"fullgraph": True}, inside=_read_loss)


def test_the_cpu_without_graphs_runs_as_written():
    eager = _train({"backend": "eager"})
    compiled = _train({})
    assert compiled[2] == 10
    _assert_same(eager, compiled)


@needs_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("hold", [False, True])
def test_cuda_graph_of_a_whole_step_equals_eager_over_20_steps(hold):
    kwargs = dict(steps=20, shapes=((4, 8), (2, 6)), hold=hold, device="cuda", lrs=[1e-3 + 1e-4 * i for i in range(20)])
    eager = _train({"backend": "eager"}, **kwargs)
    compiled = _train({}, **kwargs)
    assert compiled[2] == 2 * (WARMUP + 1)
    np.testing.assert_allclose(eager[0], compiled[0], rtol=2e-5, atol=1e-6)
    for k in eager[1]:
        np.testing.assert_allclose(eager[1][k], compiled[1][k], rtol=2e-5, atol=1e-6, err_msg=k)
