"""Data-parallel training (`gradcraft train --nproc N`) on CPU processes joined by TCP sockets.

Two processes with one micro-batch each must train like one process accumulating two: the same
batches in the same order, gradients summed in another order (so equal to float32 rounding, not
bitwise). Only rank 0 writes; a resumed data-parallel run continues the same run exactly; an error
in one process stops them all with one line. tests/test_cuda_distributed.py runs the same on GPUs.
"""

import numpy as np
import pytest

import gradcraft as gc
from gradcraft.distributed import TCPGroup, launch
from gradcraft.errors import UserError
from gradcraft.training.log import read_log
from test_train import TINY, one_line_error
from test_train import run_here as run  # in process: the same runs without an interpreter start each


def rows(model_dir):
    return [
        (int(r["step"]), float(r["loss"]), float(r["grad_norm"])) for r in read_log(str(model_dir / "training_log.csv"))
    ]


def _thread_counts(group, device):
    from gradcraft.backend.cpu import blas, threads

    return blas.threads(), threads.num_threads()


def test_cpu_processes_share_the_cores(monkeypatch):
    # Each of N processes on a node gets cores // N threads (BLAS's and the kernels'), unless set.
    import os

    for name in ("GRADCRAFT_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    share = max(1, cores // 2)
    blas_threads, kernel_threads = launch(_thread_counts, 2, "cpu")
    assert kernel_threads == share and blas_threads in (share, None)
    monkeypatch.setenv("GRADCRAFT_NUM_THREADS", "3")
    assert launch(_thread_counts, 2, "cpu")[1] == 3


def test_two_processes_train_like_one_accumulating_two(dataset, tmp_path):
    common = ["--dataset", dataset, "--steps", "8", "--target_batch", "8", "--checkpoint_every", "4", *TINY]
    run("--model_dir", str(tmp_path / "one"), *common)
    run("--model_dir", str(tmp_path / "two"), "--nproc", "2", *common)
    one, two = rows(tmp_path / "one"), rows(tmp_path / "two")
    assert [r[0] for r in two] == list(range(1, 9))
    np.testing.assert_allclose([r[1:] for r in two], [r[1:] for r in one], rtol=2e-4)
    assert one[-1][1] < one[0][1]
    # rank 0 wrote everything, once
    names = sorted(p.name for p in (tmp_path / "two").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "one").iterdir())


def test_data_parallel_resume_continues_the_same_run(dataset, tmp_path):
    """With dropout (each process draws its own masks), stopped and resumed: bitwise the same run."""
    common = [
        "--dataset",
        dataset,
        "--steps",
        "8",
        "--checkpoint_every",
        "4",
        "--nproc",
        "2",
        "--dropout",
        "0.1",
        *TINY,
    ]
    run("--model_dir", str(tmp_path / "straight"), *common)
    run("--model_dir", str(tmp_path / "split"), "--stop_after", "4", *common)
    run("--model_dir", str(tmp_path / "split"), "--resume", "--dataset", dataset, "--no_progress")
    assert rows(tmp_path / "split") == rows(tmp_path / "straight")  # same processes, same sums: bitwise


@pytest.mark.extended  # (test_multinode's torchrun run resumed on one process equals its reference too)
def test_resume_on_another_process_count_keeps_the_batch(dataset, tmp_path):
    """No --target_batch: the batch of the first session (4 x 2 processes) stays when resumed on one."""
    common = ["--dataset", dataset, "--steps", "8", "--checkpoint_every", "4", *TINY]
    run("--model_dir", str(tmp_path / "straight"), "--nproc", "2", *common)
    run("--model_dir", str(tmp_path / "split"), "--nproc", "2", "--stop_after", "4", *common)
    proc = run(
        "--model_dir", str(tmp_path / "split"), "--resume", "--nproc", "1", "--dataset", dataset, "--no_progress"
    )
    assert "4 x 2 sequences" in proc.stderr
    np.testing.assert_allclose(
        [r[1:] for r in rows(tmp_path / "split")], [r[1:] for r in rows(tmp_path / "straight")], rtol=2e-4
    )


def test_bad_process_counts_get_one_line(dataset, tmp_path):
    out = str(tmp_path / "bad")
    one_line_error(
        run("--dataset", dataset, "--model_dir", out, *TINY, "--nproc", "2", "--target_batch", "4", check=False),
        "--target_batch 4 is not a multiple of --batch_size 4 x --nproc 2",
    )
    one_line_error(run("--dataset", dataset, "--model_dir", out, *TINY, "--nproc", "0", check=False), "--nproc")


def _fails_on_rank_1(group, device):
    if group.rank == 1:
        raise UserError("rank 1 cannot go on")
    group.all_reduce([np.zeros(3, np.float32)])  # would wait forever for rank 1
    return "unreachable"


def _sums(group, device):
    a = np.full(4, group.rank + 1, np.float32)
    group.all_reduce([a, np.zeros(())])
    return a.tolist()


def _big_result(group, device):
    return np.arange(1 << 20, dtype=np.int64)  # 8 MB: far more than a pipe's buffer


def test_tcp_group_sums_and_errors_stop_every_process():
    assert launch(_sums, 3, "cpu") == [6.0] * 4
    with pytest.raises(UserError, match="rank 1 cannot go on"):
        launch(_fails_on_rank_1, 2, "cpu")
    assert launch(_big_result, 2, "cpu").sum() == (1 << 20) * ((1 << 20) - 1) // 2
    assert launch(_scatter_and_gather, 3, "cpu") == ([0.0, 6.0], [0.0, 6.0, 12.0, 18.0, 24.0, 30.0])


def _scatter_and_gather(group, device):
    """reduce_scatter: each rank's slice of the sum; all_gather: the slices back in rank order."""
    flat = np.arange(6, dtype=np.float32) * (group.rank + 1)  # sum: 6 x arange(6)
    mine = group.reduce_scatter(flat)
    assert mine.tolist() == [6.0 * (2 * group.rank), 6.0 * (2 * group.rank + 1)]
    gathered = np.zeros(6, np.float32)
    group.all_gather(mine, gathered)
    return mine.tolist(), gathered.tolist()


@pytest.mark.skipif(gc.device.is_available("cuda"), reason="this machine has a GPU")
def test_cuda_processes_without_a_gpu_one_line(dataset, tmp_path):
    one_line_error(
        run(
            "--dataset",
            dataset,
            "--model_dir",
            str(tmp_path / "x"),
            *TINY,
            "--device",
            "cuda",
            "--nproc",
            "2",
            check=False,
        ),
        "--nproc 2",
    )


def test_single_process_group_is_a_no_op():
    group = TCPGroup(0, 1, [])
    a = np.ones(3)
    group.all_reduce([a])
    assert a.tolist() == [1.0, 1.0, 1.0]
