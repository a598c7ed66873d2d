"""torch.distributed's names and DistributedDataParallel: two CPU processes on localhost run
tests/torch_distributed_worker.py (a PyTorch program) from torchrun's environment with gradcraft as
`torch`. The collectives' results are checked against their definition, DDP's gradients and weights
against PyTorch in this process: one model from rank 0's weights, each step's gradient the mean of
the two ranks' shards' gradients. (`python tests/torch_distributed_worker.py torch` under torchrun
runs the same program on PyTorch's gloo; it prints the same numbers. Spawning PyTorch here would
take most of this file's time budget.)"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gradcraft as gc
from gradcraft.distributed.rendezvous import free_port

WORKER = Path(__file__).parent / "torch_distributed_worker.py"


def _run(library: str) -> list:
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(
            os.environ,
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE="2",
            LOCAL_WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS="1",
            GRADCRAFT_NUM_THREADS="1",
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), library], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        )
    results = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        assert p.returncode == 0, stderr.decode()[-3000:]
        results.append(json.loads(stdout.decode().strip().splitlines()[-1]))
    return results


def _compare(a, b, path=""):
    if isinstance(b, dict):
        assert sorted(a) == sorted(b), path
        for k in b:
            _compare(a[k], b[k], f"{path}.{k}")
    elif isinstance(b, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _compare(x, y, f"{path}[{i}]")
    elif isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-4, abs=2e-5), path
    else:
        assert a == b, path


def _torch_reference(torch):
    """What DDP must compute, in one process: the workers' program with the ranks' gradients averaged."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    rng = np.random.default_rng(100)  # rank 0's weights, which DDP broadcasts
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.tensor(rng.normal(size=tuple(p.shape)), dtype=torch.float32))
    data = np.random.default_rng(7).normal(size=(3, 8, 3)).astype(np.float32)
    shards = [(torch.tensor(data[0, r * 4 : r * 4 + 4]), torch.tensor(data[1, r * 4 : r * 4 + 4, :2])) for r in (0, 1)]

    def grads(scale=1.0):
        per_rank = []
        for x, y in shards:
            model.zero_grad()
            ((model(x * scale) - y) ** 2).mean().backward()
            per_rank.append([p.grad.clone() for p in model.parameters()])
        return per_rank

    out = {"start": [p.detach().numpy().tolist() for p in model.parameters()]}
    for step in range(2):
        mean = [(a + b) / 2 for a, b in zip(*grads())]
        out[f"grad{step}"] = [g.numpy().tolist() for g in mean]
        with torch.no_grad():
            for p, g in zip(model.parameters(), mean):
                p -= 0.1 * g
    local = grads()
    out["local"] = [[g.numpy().tolist() for g in rank] for rank in local]
    doubled = grads(2.0)
    total = [(a1 + b1 + a2 + b2) / 2 for a1, a2, b1, b2 in zip(local[0], local[1], doubled[0], doubled[1])]
    out["accumulated"] = [g.numpy().tolist() for g in total]
    with torch.no_grad():
        for p, g in zip(model.parameters(), total):
            p -= 0.1 * g
    out["end"] = [p.detach().numpy().tolist() for p in model.parameters()]
    return out


def _close(a, b, name, atol=2e-5):
    for x, y in zip(a, b):
        np.testing.assert_allclose(np.array(x), np.array(y), rtol=1e-4, atol=atol, err_msg=name)


def test_two_cpu_processes():
    torch = pytest.importorskip("torch")
    ranks = _run("gradcraft")
    for r, out in enumerate(ranks):
        assert (out["available"], out["before"], out["after"], out["destroyed"]) == (True, False, True, False)
        assert (out["rank"], out["world"], out["backend"]) == (r, 2, "gloo")
        assert out["sum"] == [3.0, 2.0]
        assert out["MAX"] == [2.0, 4.0] and out["MIN"] == [1.0, 1.0] and out["PRODUCT"] == [2.0, 4.0]
        assert out["AVG"] == [1.5, 2.5]
        assert out["broadcast"] == [10.0, 6.0]
        assert out["all_gather"] == [[0.0, 0.5], [1.0, 1.5]]
        assert out["objects"] == [{"rank": 0, "name": "r0"}, {"rank": 1, "name": "r1"}]
        assert out["has_module"] and out["state_keys"] == [
            "module.0.weight",
            "module.0.bias",
            "module.2.weight",
            "module.2.bias",
        ]
    reference = _torch_reference(torch)
    for r, out in enumerate(ranks):
        for key in ("start", "grad0", "grad1", "accumulated", "end"):
            _close(out[key], reference[key], f"rank {r} {key}")
        _close(out["local"], reference["local"][r], f"rank {r} local")


def test_single_process_queries_and_errors(monkeypatch):
    dist = gc.distributed
    assert dist.is_available() and not dist.is_initialized()
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        dist.get_rank()
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        gc.nn.parallel.DistributedDataParallel(gc.nn.Linear(2, 2))
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="environment variable WORLD_SIZE expected"):
        dist.init_process_group("gloo")
    with pytest.raises(ValueError, match="Invalid backend"):
        dist.init_process_group("mpi", world_size=1, rank=0)
    port = free_port()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", world_size=1, rank=0)
    try:
        assert (dist.get_rank(), dist.get_world_size(), dist.get_backend()) == (0, 1, "gloo")
        t = gc.tensor([1.0, 2.0])
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        assert t.tolist() == [1.0, 2.0]
        model = gc.nn.Linear(2, 1)
        ddp = gc.nn.parallel.DistributedDataParallel(model)
        ddp(gc.ones(3, 2)).sum().backward()
        np.testing.assert_allclose(model.weight.grad.numpy(), [[3.0, 3.0]])
        with pytest.raises(ValueError, match="twice"):
            dist.init_process_group("gloo", world_size=1, rank=0)
    finally:
        dist.destroy_process_group()
    assert not dist.is_initialized()


def test_multiprocessing_spawn(tmp_path):
    import spawn_targets

    mp = gc.multiprocessing
    mp.spawn(spawn_targets.write_rank, args=(str(tmp_path), "hello"), nprocs=2, start_method="fork")
    assert sorted(p.read_text() for p in tmp_path.iterdir()) == ["hello 0", "hello 1"]
    with pytest.raises(mp.ProcessRaisedException, match="rank one fails"):
        mp.spawn(spawn_targets.fail_on_one, args=(str(tmp_path),), nprocs=2, start_method="fork")
    with pytest.raises(mp.ProcessExitedException, match="exit code 3"):
        mp.spawn(spawn_targets.exit_three, nprocs=2, start_method="fork")
    context = mp.spawn(
        spawn_targets.write_rank, args=(str(tmp_path), "later"), nprocs=1, join=False, start_method="fork"
    )
    while not context.join():
        pass
    assert (tmp_path / "rank0").read_text() == "later 0"
