"""Data parallelism: one process per device, gradients summed over the processes after every backward.

    gradcraft train --device cuda --nproc 2 ...    # cuda:0 and cuda:1, gradients summed by NCCL
    gradcraft train --device cpu --nproc 2 ...     # CPU processes joined by pipes (what CI tests)

Every process builds the same model from the same seed and draws the same batches from the same
sampler; process r computes the gradients of its share of the step's micro-batches. `all_reduce`
sums the gradients (and the logged losses) over the processes, so every process holds the same
gradients, takes the same clipped AdamW step and keeps the same weights without ever sending them.
Rank 0 writes the logs and checkpoints. On GPUs the all-reduce is recorded into the step's CUDA
graph with the rest of the step.

`launch(fn, nproc, device, *args)` runs fn(group, device_of_this_rank, *args) in nproc fresh
processes and returns rank 0's result; an error in any process stops them all and is raised once.
"""

import multiprocessing as mp
import multiprocessing.connection
import os
import sys
import traceback

from gradcraft.errors import UserError


class PipeGroup:
    """Processes on the CPU. Every rank sends its arrays to rank 0, which adds them in rank order and
    sends the sums back: every rank ends with the same bits."""

    backend = "pipes"

    def __init__(self, rank: int, world: int, connections):
        self.rank, self.world = rank, world
        self.connections = connections  # rank 0: one per other rank, in rank order; others: [to rank 0]

    def all_reduce(self, arrays) -> None:
        """Sum each array over the processes, in place."""
        if self.rank == 0:
            parts = [conn.recv() for conn in self.connections]
            for i, array in enumerate(arrays):
                for part in parts:
                    array += part[i]
            for conn in self.connections:
                conn.send(list(arrays))
        else:
            self.connections[0].send(list(arrays))
            for array, total in zip(arrays, self.connections[0].recv()):
                array[...] = total

    def close(self) -> None:
        for conn in self.connections:
            conn.close()


def all_reduce_tensors(group, tensors) -> None:
    """Sum realized tensors over the group's processes, in place (their buffers must be contiguous)."""
    if group is not None and group.world > 1 and tensors:
        group.all_reduce([t._buf for t in tensors])


# ---------------------------------------------------------------- processes

def _group_setup(nproc: int, device: str):
    """Per-rank arguments that let each process join the group: pipes, or NCCL's id and a GPU each."""
    kind, _, index = device.partition(":")
    if kind == "cpu":
        pairs = [mp.Pipe() for _ in range(nproc - 1)]  # rank 0 <-> rank r
        return [("cpu", [a for a, _ in pairs], "cpu")] + [("cpu", [b], "cpu") for _, b in pairs]
    try:
        from gradcraft.backend.cuda.nccl import available_devices, unique_id
        gpus = available_devices()
        uid = unique_id()
    except UserError:
        raise
    except Exception as e:  # no CuPy, no driver, no NCCL
        raise UserError(f"--device {device} --nproc {nproc} needs CuPy, NCCL and NVIDIA GPUs ({type(e).__name__}: "
                        f"{e}); use --device cpu, or install gradcraft[cuda]") from None
    first = int(index or 0)
    if first + nproc > gpus:
        raise UserError(f"--nproc {nproc} from {device} needs GPUs cuda:{first}..cuda:{first + nproc - 1}; "
                        f"this machine has {gpus}")
    return [("nccl", uid, f"cuda:{first + rank}") for rank in range(nproc)]


def _join(rank: int, world: int, setup):
    kind, handle, device = setup
    if kind == "cpu":
        return PipeGroup(rank, world, handle), device
    from gradcraft.backend.cuda.nccl import NCCLGroup
    return NCCLGroup(rank, world, handle, int(device.partition(":")[2])), device


def _run_rank(rank, world, setup, fn, args, result_pipe):
    code = 0
    try:
        group, device = _join(rank, world, setup)
        result = fn(group, device, *args)
        result_pipe.send(("ok", result if rank == 0 else None))
    except UserError as e:
        result_pipe.send(("error", str(e)))
        code = 2
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        result_pipe.send(("crash", traceback.format_exc()))
        code = 1
    # Leave without Python's shutdown: tearing down a CUDA graph that holds NCCL kernels and the NCCL
    # communicator, in whatever order the finalizers run, hung the process at exit on 2 H200s. The
    # process owns nothing else that needs closing; its result has been sent (the parent reads while
    # it waits, so a big result cannot block).
    sys.stdout.flush()
    sys.stderr.flush()
    result_pipe.close()
    os._exit(code)


def launch(fn, nproc: int, device: str, *args):
    """Run fn(group, device, *args) on nproc processes (rank r on GPU first+r, or on the CPU) and
    return rank 0's result. fn must be importable by name (the processes are spawned fresh)."""
    context = mp.get_context("spawn")  # a forked CUDA context is unusable in the child
    setups = _group_setup(nproc, device)
    pipes = [context.Pipe(duplex=False) for _ in range(nproc)]  # (parent's end, rank's end)
    processes = [context.Process(target=_run_rank, args=(rank, nproc, setups[rank], fn, args, pipes[rank][1]),
                                 name=f"gradcraft-rank{rank}") for rank in range(nproc)]
    for process in processes:
        process.start()
    for _, rank_end in pipes:
        rank_end.close()  # the rank holds its own copy; ours closed, its exit shows as end-of-file
    readers = {reader: rank for rank, (reader, _) in enumerate(pipes)}
    outcome = {}
    try:
        running = list(processes)
        while running or readers:
            for ready in mp.connection.wait([p.sentinel for p in running] + list(readers)):
                if ready in readers:
                    rank = readers.pop(ready)
                    try:
                        outcome[rank] = ready.recv()
                    except EOFError:  # it ended without a result (killed, or stopped by us)
                        pass
                    continue
                process = next(p for p in running if p.sentinel == ready)
                process.join()
                running.remove(process)
                if process.exitcode != 0:  # the others would wait for it forever in the next all-reduce
                    for other in running:
                        other.terminate()
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
            process.join()
    # a user error (one line) first: another rank's crash may only be the consequence of it
    failures = sorted((status != "error", rank, status, value) for rank, (status, value) in outcome.items()
                      if status != "ok")
    if failures:
        _, rank, status, value = failures[0]
        if status == "error":
            raise UserError(value)
        raise RuntimeError(f"process {rank} of {nproc} failed:\n{value}")
    if any(p.exitcode != 0 for p in processes) or 0 not in outcome:
        codes = ", ".join(f"rank {r}: {p.exitcode}" for r, p in enumerate(processes))
        raise UserError(f"a training process stopped without a result ({codes})")
    return outcome[0][1]
