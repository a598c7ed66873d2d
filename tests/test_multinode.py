"""Data parallelism across "machines" on the CPU: two launchers on 127.0.0.1 as two nodes (flags, or
torchrun's environment), the rendezvous's errors and timeouts, gradient buckets summed during
backward, and ZeRO-1 against plain data parallelism. All traffic stays on 127.0.0.1; every wait is
bounded by --rdzv_timeout and the subprocess timeouts.
"""

import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from safetensors.numpy import load_file

from gradcraft.distributed import Topology, launch
from gradcraft.distributed import rendezvous
from gradcraft.errors import UserError
from test_distributed import rows
from test_train import TINY
from test_train import run_here as run  # in process: the same runs without an interpreter start each

COMMON = ["--steps", "4", "--target_batch", "8", "--checkpoint_every", "2", *TINY]


def train_command(*args):
    return [sys.executable, "-m", "gradcraft.cli.main", "train", *args]


def start(*args, env=None):
    return subprocess.Popen(train_command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def finish(proc, timeout=120):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def same_rows(a, b, rtol=2e-4):
    """The same steps, losses and gradient norms in two runs' training_log.csv (float rounding apart)."""
    ra, rb = np.array(rows(a)), np.array(rows(b))
    assert ra.shape == rb.shape and ra.shape[0] > 0
    np.testing.assert_allclose(ra, rb, rtol=rtol)


def weights(folder):
    return load_file(str(folder / "model.safetensors"))


def assert_same_weights(a, b, rtol=2e-5, atol=1e-6):
    wa, wb = weights(a), weights(b)
    assert sorted(wa) == sorted(wb)
    for name in wa:
        np.testing.assert_allclose(wb[name], wa[name], rtol=rtol, atol=atol, err_msg=name)


@pytest.fixture(scope="module")
def one_process(dataset, tmp_path_factory):
    """The reference: one process accumulating the step's two micro-batches."""
    folder = tmp_path_factory.mktemp("ref") / "one"
    run("--dataset", dataset, "--model_dir", str(folder), *COMMON)
    return folder


def test_two_launchers_as_two_nodes_equal_one_process(dataset, one_process, tmp_path):
    port = rendezvous.free_port()
    folder = tmp_path / "nodes"
    node = [
        "--dataset",
        dataset,
        "--model_dir",
        str(folder),
        "--nnodes",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(port),
        "--rdzv_timeout",
        "60",
        "--bucket_mb",
        "0.01",
        *COMMON,
    ]
    second = start(*node, "--node_rank", "1")  # the node that is not the master may start first
    first = start(*node, "--node_rank", "0")
    code0, out0, err0 = finish(first)
    code1, out1, err1 = finish(second)
    assert code0 == 0 and code1 == 0, err0 + err1
    assert "weights in" in out0 and "rank 0 on node 0 wrote the run" in out1
    assert "(2 nodes)" in err0
    same_rows(folder, one_process)
    assert_same_weights(one_process, folder)


def test_torchrun_environment_with_zero_then_resume_on_one_process(dataset, one_process, tmp_path):
    """Two ranks started as torchrun starts them (one per "node"), with ZeRO-1, stopped after step 2;
    resumed as one plain process from the gathered checkpoint: the same run as the reference."""
    port = rendezvous.free_port()
    folder = tmp_path / "env"
    procs = []
    for rank in (1, 0):
        env = dict(
            os.environ,
            RANK=str(rank),
            WORLD_SIZE="2",
            LOCAL_RANK="0",
            LOCAL_WORLD_SIZE="1",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        procs.append(
            start(
                "--dataset",
                dataset,
                "--model_dir",
                str(folder),
                "--zero",
                "--bucket_mb",
                "0.01",
                "--rdzv_timeout",
                "60",
                "--stop_after",
                "2",
                *COMMON,
                env=env,
            )
        )
    results = [finish(p) for p in procs]
    assert all(code == 0 for code, _, _ in results), "".join(err for _, _, err in results)
    assert "ZeRO-1: AdamW state" in results[1][2] and "MiB saved per process" in results[1][2]
    proc = run("--model_dir", str(folder), "--resume", "--nproc", "1", "--dataset", dataset, "--no_progress")
    assert "resuming from" in proc.stderr
    same_rows(folder, one_process)
    assert_same_weights(one_process, folder)


@pytest.mark.extended  # (the torchrun test's ZeRO run, resumed from its gathered state, equals one process)
def test_zero_equals_plain_data_parallel(dataset, tmp_path):
    common = [
        "--dataset",
        dataset,
        "--nproc",
        "2",
        "--steps",
        "3",
        "--checkpoint_every",
        "3",
        "--bucket_mb",
        "0.005",
        *TINY,
    ]
    run("--model_dir", str(tmp_path / "plain"), *common)
    run("--model_dir", str(tmp_path / "zero"), "--zero", *common)
    same_rows(tmp_path / "zero", tmp_path / "plain", rtol=1e-5)
    assert_same_weights(tmp_path / "plain", tmp_path / "zero", rtol=1e-5)
    # the sharded moments, gathered into the checkpoint, are the unsharded ones
    plain = load_file(str(tmp_path / "plain" / "checkpoints" / "step_00000003" / "optimizer.safetensors"))
    zero = load_file(str(tmp_path / "zero" / "checkpoints" / "step_00000003" / "optimizer.safetensors"))
    assert sorted(plain) == sorted(zero) and len(plain) > 4
    for key in plain:
        np.testing.assert_allclose(zero[key], plain[key], rtol=1e-4, atol=1e-9, err_msg=key)


def _one_error_line(code, err):
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("error: "), err


def test_a_node_that_never_arrives_is_one_line_within_the_timeout(dataset, tmp_path):
    base = ["--dataset", dataset, "--nnodes", "2", "--master_addr", "127.0.0.1", "--rdzv_timeout", "2", *COMMON]
    began = time.monotonic()
    alone_master = start(
        *base, "--model_dir", str(tmp_path / "a"), "--node_rank", "0", "--master_port", str(rendezvous.free_port())
    )
    alone_worker = start(
        *base, "--model_dir", str(tmp_path / "b"), "--node_rank", "1", "--master_port", str(rendezvous.free_port())
    )
    code, _, err = finish(alone_master, timeout=60)
    _one_error_line(code, err)
    assert "1 of 2 ranks arrived within 2 s; missing rank 1" in err
    code, _, err = finish(alone_worker, timeout=60)
    _one_error_line(code, err)
    assert "rank 1 could not reach the master at 127.0.0.1:" in err and "within 2 s" in err
    assert time.monotonic() - began < 45  # (2 s of waiting; the rest is starting Python on a busy machine)
    assert not (tmp_path / "b").exists()  # a node that is not node 0 writes nothing


def test_launch_flag_mistakes_are_one_line(dataset, tmp_path):
    out = ["--dataset", dataset, "--model_dir", str(tmp_path / "x"), *TINY]
    for flags, message in (
        (["--nnodes", "2", "--node_rank", "2", "--master_port", "1234"], "--node_rank 2 must be"),
        (["--nnodes", "2"], "needs --master_port"),
        (["--nnodes", "2", "--node_rank", "0", "--master_port", "99999"], "--master_port"),
        (["--nproc", "2", "--bucket_mb", "0"], "--bucket_mb"),
    ):
        proc = run(*out, *flags, check=False)
        _one_error_line(proc.returncode, proc.stderr)
        assert message in proc.stderr, proc.stderr
    env = dict(
        os.environ,
        RANK="0",
        WORLD_SIZE="2",
        LOCAL_RANK="0",
        LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT="1234",
    )
    code, _, err = finish(start(*out, "--nnodes", "2", env=env))
    _one_error_line(code, err)
    assert "--nnodes given while RANK and WORLD_SIZE are set" in err


# ---------------------------------------------------------------- in-process: topology, rendezvous


def test_torchrun_environment_becomes_a_topology():
    env = {
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "4",
        "MASTER_ADDR": "node0",
        "MASTER_PORT": "29500",
    }
    t = Topology.from_environment(env)
    assert (t.nnodes, t.node_rank, t.nproc, t.local_rank, t.rank, t.world) == (2, 1, 4, 1, 5, 8)
    assert (t.master_addr, t.master_port, t.started_by) == ("node0", 29500, "environment")
    assert Topology.from_environment({}) is None
    with pytest.raises(UserError, match="MASTER_ADDR is not"):
        Topology.from_environment({k: v for k, v in env.items() if k != "MASTER_ADDR"})
    with pytest.raises(UserError, match="not a multiple of LOCAL_WORLD_SIZE"):
        Topology.from_environment(dict(env, WORLD_SIZE="6", LOCAL_WORLD_SIZE="4"))
    with pytest.raises(UserError, match="RANK=5 with LOCAL_RANK=2 does not fit"):
        Topology.from_environment(dict(env, LOCAL_RANK="2"))
    with pytest.raises(UserError, match="MASTER_PORT='x' is not a whole number"):
        Topology.from_environment(dict(env, MASTER_PORT="x"))


def _serve_in_thread(port, world, signature, timeout):
    result = {}

    def target():
        try:
            result["peers"] = rendezvous.serve("127.0.0.1", port, world, signature, timeout)
        except UserError as e:
            result["error"] = str(e)

    thread = threading.Thread(target=target)
    thread.start()
    return thread, result


def test_rendezvous_refuses_mismatched_ranks_with_one_line_on_both_sides():
    port = rendezvous.free_port()
    thread, result = _serve_in_thread(port, 2, "steps=6", 10)
    with pytest.raises(UserError, match="other training settings than rank 0"):
        rendezvous.join("127.0.0.1", port, 1, 2, "steps=7", 10)
    thread.join(10)
    assert "steps=7 vs steps=6" in result["error"]

    port = rendezvous.free_port()
    thread, result = _serve_in_thread(port, 3, "", 10)
    with pytest.raises(UserError, match="started for a world of 2 processes but rank 0 for 3"):
        rendezvous.join("127.0.0.1", port, 1, 2, "", 10)
    thread.join(10)


def test_rendezvous_port_in_use_is_one_line():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        with pytest.raises(UserError, match=f"--master_port {busy.getsockname()[1]} is already in use"):
            rendezvous.serve("127.0.0.1", busy.getsockname()[1], 2, "", 1)


# ---------------------------------------------------------------- buckets during backward


def _bucketed_gradients(group, device):
    """Small model, buckets of ~1 KB: several buckets, the first one issued before backward ends;
    the summed gradients equal an all-reduce of plain gradients."""
    import gradcraft as gc
    from gradcraft.distributed.buckets import GradientBuckets
    from gradcraft.models import ModelConfig, Transformer

    gc.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=32, seq_len=8, dim=16, n_layers=2, n_heads=2, ffn_dim=32))
    rng = np.random.default_rng(group.rank)
    x, y = (gc.tensor(rng.integers(0, 32, (2, 8))) for _ in range(2))

    _, loss = model(x, y)
    loss.backward()
    expected = {name: p.grad.numpy().copy() for name, p in model.named_parameters()}
    group.all_reduce(list(expected.values()))
    for p in model.parameters():
        p.grad = None

    buckets = GradientBuckets(group, model.parameters(), 1024)
    issued = []  # per step: buckets handed to the communication when each gradient arrived

    def ready(param, buffer):
        buckets.ready(param, buffer)
        issued[-1].append(buckets._next)

    for _ in range(2):  # the first step lays the buckets out, the second reuses them
        buckets.start()
        issued.append([])
        _, loss = model(x, y)
        loss.backward(on_grad_ready=ready)
        buckets.finish()
        for name, p in model.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), expected[name], rtol=1e-6, atol=1e-7, err_msg=name)
        for p in model.parameters():
            p.grad = None
    buckets.close()
    return len(buckets.buckets), issued


def test_buckets_are_summed_while_backward_runs():
    n_buckets, issued = launch(_bucketed_gradients, 2, "cpu")
    assert n_buckets > 3
    for step in issued:
        # the first bucket went out while most gradients were still to come, and the count only grows
        assert step[len(step) // 2] >= 1 and step == sorted(step)
    assert issued[1][-1] == n_buckets  # laid out: the last bucket goes as its last gradient arrives


def test_peer_watch_tells_a_death_from_a_normal_end():
    """The GPU groups' lifeline (NCCL would wait for a dead process forever): a connection closed
    after "bye" is a normal end; one closed without it, a death."""
    from gradcraft.distributed.watch import PeerWatch

    for peer_says_bye in (True, False):
        ours, theirs = socket.socketpair()
        lost = threading.Event()
        messages = []
        watch = PeerWatch([ours], rank=1, on_lost=lambda m: (messages.append(m), lost.set()))
        other = PeerWatch([theirs], rank=0, on_lost=lambda m: None)
        if peer_says_bye:
            other.done()
        other.close()
        watch._thread.join(5)  # it stops watching once the peer has gone, either way
        assert not watch._thread.is_alive() and lost.is_set() is not peer_says_bye
        assert messages == (
            []
            if peer_says_bye
            else ["rank 0 left the job (its connection closed without finishing); see that process's error"]
        )
        watch.close()
