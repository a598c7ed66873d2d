"""torch.multiprocessing: the standard library's multiprocessing names, and `spawn`, which starts
nprocs processes running fn(i, *args) (i = 0..nprocs-1) and waits for them, as DDP tutorials use:

    def worker(rank, world_size):
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        ...
    mp.spawn(worker, args=(2,), nprocs=2, join=True)

A process that raises makes spawn stop the others and raise ProcessRaisedException with its
traceback; one that exits with a non-zero status, ProcessExitedException.
"""

from __future__ import annotations

import multiprocessing as _mp
import multiprocessing.connection as _connection
import signal
import sys
import traceback
from multiprocessing import *  # noqa: F403  (torch.multiprocessing re-exports them)


class ProcessException(Exception):
    def __init__(self, msg: str, error_index: int, pid: int):
        super().__init__(msg)
        self.msg, self.error_index, self.pid = msg, error_index, pid


class ProcessRaisedException(ProcessException):
    """A spawned process raised an exception (its traceback is the message)."""


class ProcessExitedException(ProcessException):
    """A spawned process exited with a non-zero status (or was killed by a signal)."""

    def __init__(self, msg: str, error_index: int, error_pid: int, exit_code: int, signal_name: str | None = None):
        super().__init__(msg, error_index, error_pid)
        self.exit_code, self.signal_name = exit_code, signal_name


def _wrap(fn, i, args, error_queue) -> None:
    try:
        fn(i, *args)
    except KeyboardInterrupt:
        pass
    except Exception:
        error_queue.put(traceback.format_exc())
        sys.exit(1)


class ProcessContext:
    def __init__(self, processes, error_queues):
        self.processes, self.error_queues = processes, error_queues
        self.sentinels = {p.sentinel: i for i, p in enumerate(processes)}

    def pids(self) -> list:
        return [p.pid for p in self.processes]

    def join(self, timeout: float | None = None, grace_period: float | None = None) -> bool:
        """True once every process has finished; raises (after stopping the others) if one failed."""
        if not self.sentinels:
            return True
        ready = _connection.wait(list(self.sentinels), timeout=timeout)
        failed = None
        for sentinel in ready:
            index = self.sentinels.pop(sentinel)
            process = self.processes[index]
            process.join()
            if process.exitcode != 0 and failed is None:
                failed = index
        if failed is None:
            return not self.sentinels
        for process in self.processes:
            if process.is_alive():
                process.terminate()
            process.join()
        process = self.processes[failed]
        if not self.error_queues[failed].empty():
            message = self.error_queues[failed].get()
            raise ProcessRaisedException(
                f"\n\n-- Process {failed} terminated with the following error:\n{message}", failed, process.pid
            )
        code = process.exitcode
        if code < 0:
            name = signal.Signals(-code).name
            raise ProcessExitedException(
                f"process {failed} terminated with signal {name}", failed, process.pid, code, name
            )
        raise ProcessExitedException(f"process {failed} terminated with exit code {code}", failed, process.pid, code)


def start_processes(fn, args=(), nprocs: int = 1, join: bool = True, daemon: bool = False, start_method="spawn"):
    context = _mp.get_context(start_method)
    error_queues, processes = [], []
    for i in range(nprocs):
        error_queue = context.SimpleQueue()
        process = context.Process(target=_wrap, args=(fn, i, args, error_queue), daemon=daemon)
        process.start()
        error_queues.append(error_queue)
        processes.append(process)
    process_context = ProcessContext(processes, error_queues)
    if not join:
        return process_context
    while not process_context.join():
        pass
    return None


def spawn(fn, args=(), nprocs: int = 1, join: bool = True, daemon: bool = False, start_method: str = "spawn"):
    """Start nprocs processes running fn(i, *args); with join, wait for all of them."""
    return start_processes(fn, args, nprocs, join, daemon, start_method)
