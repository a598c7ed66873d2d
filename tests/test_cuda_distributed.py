"""Data-parallel training on GPUs through NCCL (skipped without 2 GPUs and NCCL).

What tests/test_distributed.py checks on CPU processes, on cuda:0 and cuda:1: the all-reduce sums,
and `gradcraft train --nproc 2` trains like one GPU accumulating two micro-batches, with the
step (all-reduce included) replayed from a CUDA graph and without one.
"""

import numpy as np
import pytest

from test_train import TINY, run
from test_distributed import rows


def _gpus() -> int:
    try:
        import cupy
        from cupy.cuda import nccl  # noqa: F401

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


pytestmark = [pytest.mark.cuda, pytest.mark.skipif(_gpus() < 2, reason="needs 2 GPUs and NCCL")]


def _nccl_sums(group, device):
    import cupy as cp
    import ml_dtypes

    with cp.cuda.Device(int(device.partition(":")[2])):
        a = cp.full(1000, group.rank + 1, cp.float32)
        b = cp.full((3, 5), group.rank + 0.5, ml_dtypes.bfloat16)
        group.all_reduce([a, b])
        return cp.asnumpy(a).tolist()[:3], cp.asnumpy(b).astype(np.float32).tolist()[0][:2], device


def test_nccl_all_reduce():
    from gradcraft.distributed import launch

    assert launch(_nccl_sums, 2, "cuda") == ([3.0] * 3, [2.0, 2.0], "cuda:0")


@pytest.mark.parametrize("graph", ["on", "off"])
def test_two_gpus_train_like_one_accumulating_two(dataset, tmp_path, graph):
    common = [
        "--dataset",
        dataset,
        "--steps",
        "8",
        "--target_batch",
        "8",
        "--device",
        "cuda",
        "--cuda_graph",
        graph,
        *TINY,
    ]
    run("--model_dir", str(tmp_path / "one"), *common)
    run("--model_dir", str(tmp_path / "two"), "--nproc", "2", *common)
    one, two = rows(tmp_path / "one"), rows(tmp_path / "two")
    assert [r[0] for r in two] == list(range(1, 9))
    np.testing.assert_allclose([r[1:] for r in two], [r[1:] for r in one], rtol=1e-3)


def test_more_processes_than_gpus_is_one_line(dataset, tmp_path):
    proc = run(
        "--dataset",
        dataset,
        "--model_dir",
        str(tmp_path / "x"),
        "--device",
        "cuda",
        "--nproc",
        "64",
        *TINY,
        check=False,
    )
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "needs GPUs cuda:0..cuda:63" in proc.stderr


def test_two_nodes_of_one_gpu_equal_one_node_of_two(dataset, tmp_path):
    """Two launchers on this host as two nodes (cuda:0 and cuda:1), NCCL's id through the rendezvous,
    against one launcher with two GPUs; then ZeRO-1 on the GPUs (captured step) against plain."""
    import subprocess
    import sys
    from gradcraft.distributed.rendezvous import free_port

    common = ["--dataset", dataset, "--steps", "8", "--target_batch", "8", "--bucket_mb", "0.01", *TINY]
    run("--model_dir", str(tmp_path / "one_node"), "--device", "cuda", "--nproc", "2", *common)
    port = str(free_port())
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gradcraft.cli.main",
                "train",
                "--model_dir",
                str(tmp_path / "two_nodes"),
                "--device",
                f"cuda:{rank}",
                "--nnodes",
                "2",
                "--node_rank",
                str(rank),
                "--master_port",
                port,
                "--rdzv_timeout",
                "120",
                *common,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (1, 0)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    np.testing.assert_allclose(rows(tmp_path / "two_nodes"), rows(tmp_path / "one_node"), rtol=1e-4)
    run("--model_dir", str(tmp_path / "zero"), "--device", "cuda", "--nproc", "2", "--zero", *common)
    np.testing.assert_allclose(rows(tmp_path / "zero"), rows(tmp_path / "one_node"), rtol=1e-4)
