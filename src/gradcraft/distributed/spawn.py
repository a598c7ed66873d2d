"""Starting the processes of a data-parallel job and joining them into one group.

    launch(fn, nproc, device, *args)                  # one host: nproc processes
    launch(fn, nproc, device, *args, topology=t)      # this node's share of a multi-node job
    join_group(topology, rank, device)                # a process started by torchrun (no launch)
    finished(group)                                   # done: its going is no failure (GPU groups)

launch runs fn(group, device_of_this_rank, *args) in the node's processes (spawned fresh) and
returns the result of the node's first rank (global rank 0's on node 0); an error in any process
stops them all and is raised once. Every process joins the group through the rendezvous at the
master (gradcraft/distributed/rendezvous.py): on the CPU the rendezvous's connections become a
TCPGroup, on GPUs rank 0 sends NCCL's unique id through them and NCCL connects the ranks.
"""

import dataclasses
import multiprocessing as mp
import multiprocessing.connection
import os
import sys
import traceback

from gradcraft.distributed import rendezvous
from gradcraft.distributed.tcp import PeerLost, TCPGroup
from gradcraft.distributed.topology import Topology
from gradcraft.distributed.watch import PeerWatch
from gradcraft.errors import UserError


def check_devices(topology: Topology, device: str) -> None:
    """Before any process starts: the GPUs this node's processes need exist (and CuPy and NCCL)."""
    kind, _, index = device.partition(":")
    if kind == "cpu":
        return
    try:
        from gradcraft.device import collectives

        nccl = collectives(device)
        nccl.check_nccl()
        gpus = nccl.available_devices()
    except UserError:
        raise
    except Exception as e:  # no CuPy, no driver
        raise UserError(
            f"--device {device} --nproc {topology.nproc} needs CuPy, NCCL and NVIDIA GPUs "
            f"({type(e).__name__}: {e}); use --device cpu, or install gradcraft[cuda]"
        ) from None
    first = int(index or 0)
    if first + topology.nproc > gpus:
        raise UserError(
            f"--nproc {topology.nproc} from {device} needs GPUs cuda:{first}..cuda:"
            f"{first + topology.nproc - 1}; this machine has {gpus}"
        )


def rank_device(device: str, local_rank: int) -> str:
    kind, _, index = device.partition(":")
    return "cpu" if kind == "cpu" else f"cuda:{int(index or 0) + local_rank}"


def rendezvous_port(topology: Topology) -> int:
    """The port our rendezvous listens on. Under torchrun with its agent's store (the default since
    PyTorch 2.4), that store already listens on MASTER_PORT, so we take the next one."""
    port = topology.master_port
    if topology.started_by == "environment" and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        port += 1
    return port


def join_group(topology: Topology, rank: int, device: str, signature: str = "", on_lost=None):
    """This process's place in the group: a TCPGroup on the CPU, an NCCLGroup on a GPU.

    On a GPU the rendezvous's connections then watch the other processes (watch.py): on_lost(message)
    is called if one dies (default: print `error: message` and exit with status 2). Call
    finished(group) when this process is done."""
    world = topology.world
    addr, port = topology.master_addr, rendezvous_port(topology)
    if not device.startswith("cuda"):
        if rank == 0:
            connections = rendezvous.serve(addr, port, world, signature, topology.timeout)
        else:
            connections = [rendezvous.join(addr, port, rank, world, signature, topology.timeout)[0]]
        return TCPGroup(rank, world, connections)
    from gradcraft.device import collectives

    nccl = collectives(device)
    if rank == 0:
        uid = nccl.unique_id()
        connections = rendezvous.serve(
            addr, port, world, signature, topology.timeout, make_payload=lambda: {"nccl_id": list(uid)}
        )
    else:
        sock, answer = rendezvous.join(addr, port, rank, world, signature, topology.timeout)
        connections, uid = [sock], tuple(answer["nccl_id"])
    group = nccl.NCCLGroup(rank, world, uid, int(device.partition(":")[2] or 0))
    # NCCL has its own connections now; ours stay open to notice a process that dies
    group.watch = PeerWatch(connections, rank, on_lost or _exit_with_error)
    return group


def finished(group) -> None:
    """This process is done with the group (its last collective has run): not a failure to others."""
    watch = getattr(group, "watch", None)
    if watch is not None:
        watch.done()


def _exit_with_error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)
    os._exit(2)


def share_cores(nproc: int) -> None:
    """A CPU process's threads, BLAS's and the CPU kernels': the node's cores split among its nproc
    processes (torchrun sets OMP_NUM_THREADS=1 for the same reason: each would otherwise start a
    thread per core, and they would fight over the cores). A count the user set is kept."""
    if any(os.environ.get(name) for name in ("GRADCRAFT_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")):
        return
    from gradcraft.backend.cpu import blas, threads

    share = max(1, threads.usable_cores() // max(nproc, 1))
    blas.set_threads(share)
    threads.set_num_threads(share)


def _run_rank(topology, local_rank, device, signature, fn, args, result_pipe):
    code = 0
    rank = topology.node_rank * topology.nproc + local_rank
    if device.partition(":")[0] == "cpu":
        share_cores(topology.nproc)

    def lost(message):  # (on the watching thread: a GPU process of the job died; NCCL would wait forever)
        result_pipe.send(("lost", message))
        result_pipe.close()
        os._exit(2)

    try:
        group = join_group(topology, rank, device, signature, on_lost=lost)
        result = fn(group, device, *args)
        finished(group)
        result_pipe.send(("ok", result if local_rank == 0 else None))
    except PeerLost as e:  # the consequence of another rank's failure: reported only if nothing else is
        result_pipe.send(("lost", str(e)))
        code = 2
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


def launch(fn, nproc: int, device: str, *args, topology: Topology | None = None, signature: str = ""):
    """Run fn(group, device, *args) on this node's processes (local rank r on GPU first+r, or on the
    CPU) and return the node's first rank's result. fn must be importable by name (the processes are
    spawned fresh). topology: the multi-node layout (default: one host, nproc processes, a free port
    on 127.0.0.1); signature: settings every rank must share, compared at the rendezvous."""
    topology = topology or Topology(nproc=nproc)
    topology.check()
    if topology.master_port is None:  # one host: a rendezvous port of its own
        topology = dataclasses.replace(topology, master_port=rendezvous.free_port(topology.master_addr))
    check_devices(topology, device)
    nproc = topology.nproc
    context = mp.get_context("spawn")  # a forked CUDA context is unusable in the child
    pipes = [context.Pipe(duplex=False) for _ in range(nproc)]  # (parent's end, rank's end)
    processes = [
        context.Process(
            target=_run_rank,
            args=(topology, r, rank_device(device, r), signature, fn, args, pipes[r][1]),
            name=f"gradcraft-rank{topology.node_rank * nproc + r}",
        )
        for r in range(nproc)
    ]
    for process in processes:
        process.start()
    for _, rank_end in pipes:
        rank_end.close()  # the rank holds its own copy; ours closed, its exit shows as end-of-file
    readers = {reader: r for r, (reader, _) in enumerate(pipes)}
    outcome = {}
    try:
        running = list(processes)
        while running or readers:
            for ready in mp.connection.wait([p.sentinel for p in running] + list(readers)):
                if ready in readers:
                    r = readers.pop(ready)
                    try:
                        outcome[r] = ready.recv()
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
    # a user error (one line) first: another rank's crash may only be the consequence of it; a lost
    # peer last: it is the consequence of something that happened elsewhere
    order = {"error": 0, "crash": 1, "lost": 2}
    failures = sorted((order[status], r, status, value) for r, (status, value) in outcome.items() if status != "ok")
    if failures:
        _, r, status, value = failures[0]
        if status == "crash":
            raise RuntimeError(f"process {topology.node_rank * nproc + r} of {topology.world} failed:\n{value}")
        raise UserError(value)
    if any(p.exitcode != 0 for p in processes) or 0 not in outcome:
        codes = ", ".join(f"rank {topology.node_rank * nproc + r}: {p.exitcode}" for r, p in enumerate(processes))
        raise UserError(f"a training process stopped without a result ({codes})")
    return outcome[0][1]
