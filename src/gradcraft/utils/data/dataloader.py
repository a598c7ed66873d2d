"""DataLoader, as `torch.utils.data`'s: batches of a dataset, read in this process or by worker
processes (`num_workers` > 0, see worker.py), with PyTorch's arguments, checks and order.

Each iteration takes indices from the sampler (SequentialSampler, or RandomSampler with `shuffle`),
groups them with a BatchSampler (`batch_size`, `drop_last`), reads the samples and collates them
(`collate_fn`, default_collate). With workers, up to `prefetch_factor` batches per worker are in
flight, handed out in turn, and batches come back in the sampler's order. `pin_memory` is accepted
and changes nothing: gradcraft copies host data to a GPU from ordinary memory. `in_order=False` is
accepted; batches still come in order.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import queue
import time
import weakref

from gradcraft.errors import TypeError_, ValueError_
from gradcraft.utils.data import worker as _worker
from gradcraft.utils.data.collate import default_collate, default_convert
from gradcraft.utils.data.dataset import IterableDataset
from gradcraft.utils.data.sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler

__all__ = ["DataLoader", "default_collate", "default_convert", "get_worker_info"]
get_worker_info = _worker.get_worker_info
_FIXED = ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers")


class _InfiniteConstantSampler(Sampler):
    """An iterable dataset's "sampler": None forever (the dataset decides where it ends)."""

    def __iter__(self):
        return itertools.repeat(None)


class DataLoader:
    def __init__(
        self, dataset, batch_size: int | None = 1, shuffle: bool | None = None, sampler=None, batch_sampler=None,
        num_workers: int = 0, collate_fn=None, pin_memory: bool = False, drop_last: bool = False,
        timeout: float = 0, worker_init_fn=None, multiprocessing_context=None, generator=None, *,
        prefetch_factor: int | None = None, persistent_workers: bool = False, pin_memory_device: str = "",
        in_order: bool = True,
    ) -> None:  # fmt: skip
        if num_workers < 0:
            raise ValueError_(
                "num_workers option should be non-negative; use num_workers=0 to disable multiprocessing."
            )
        if timeout < 0:
            raise ValueError_("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError_(
                "prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 to enable "
                "multiprocessing, otherwise set prefetch_factor to None."
            )
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        if prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError_("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError_("persistent_workers option needs num_workers > 0")
        iterable = isinstance(dataset, IterableDataset)
        if iterable:
            for name, value in (("shuffle", shuffle), ("sampler", sampler), ("batch_sampler", batch_sampler)):
                if value not in (None, False):
                    raise ValueError_(
                        f"DataLoader with IterableDataset: expected unspecified {name} option, but got {name}={value}"
                    )
        shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError_("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError_(
                    "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last"
                )
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError_("batch_size=None option disables auto-batching and is mutually exclusive with drop_last")
        if sampler is None:
            if iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        if isinstance(multiprocessing_context, str):
            multiprocessing_context = multiprocessing.get_context(multiprocessing_context)
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.num_workers = num_workers
        self.collate_fn = collate_fn or (default_collate if batch_sampler is not None else default_convert)
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers
        self.in_order = in_order
        self._iterable = iterable
        self._iterator = None
        self._initialized = True

    def __setattr__(self, name, value) -> None:
        if self.__dict__.get("_initialized") and name in _FIXED:
            raise ValueError_(f"{name} attribute should not be set after {type(self).__name__} is initialized")
        super().__setattr__(name, value)

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto_collation else self.sampler

    def _fetcher_args(self) -> dict:
        return {
            "iterable": self._iterable,
            "auto_collation": self._auto_collation,
            "collate_fn": self.collate_fn,
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
        }

    def __iter__(self):
        if self.num_workers == 0:
            return _SingleProcessIter(self)
        if not self.persistent_workers:
            return _MultiProcessIter(self)
        if self._iterator is None:
            self._iterator = _MultiProcessIter(self)
        else:
            self._iterator._start_epoch()
        return self._iterator

    def __len__(self) -> int:
        if self._iterable:
            if not hasattr(self.dataset, "__len__"):
                raise TypeError_(f"object of type '{type(self.dataset).__name__}' has no len()")
            length = len(self.dataset)
            if self.batch_size is not None:
                length = length // self.batch_size if self.drop_last else -(-length // self.batch_size)
            return length
        return len(self._index_sampler)

    @property
    def multiprocessing_context_or_default(self):
        return self.multiprocessing_context or multiprocessing.get_context()


class _SingleProcessIter:
    def __init__(self, loader: DataLoader) -> None:
        self._loader = loader
        self._fetcher = _worker.Fetcher(loader.dataset, **loader._fetcher_args())
        self._indices = iter(loader._index_sampler)

    def __iter__(self):
        return self

    def __next__(self):
        return self._fetcher.fetch(next(self._indices))

    def __len__(self) -> int:
        return len(self._loader)


class _MultiProcessIter:
    """The main process's side of the workers: tasks out, results back in order."""

    def __init__(self, loader: DataLoader) -> None:
        from gradcraft.ops.creation import next_seed

        self._loader = loader
        context = loader.multiprocessing_context_or_default
        self._results = context.Queue()
        self._index_queues, self._workers = [], []
        base_seed = next_seed(loader.generator)
        for worker_id in range(loader.num_workers):
            index_queue = context.Queue()
            process = context.Process(
                target=_worker.worker_loop,
                args=(loader.dataset, loader._fetcher_args(), index_queue, self._results, worker_id,
                      loader.num_workers, base_seed, loader.worker_init_fn, os.getpid()),
                daemon=True,
            )  # fmt: skip
            process.start()
            self._index_queues.append(index_queue)
            self._workers.append(process)
        # The workers are stopped when this iterator is collected or Python exits, by a finalizer that
        # holds the queues itself (a collected reference cycle may have closed them first otherwise).
        self._shutdown = weakref.finalize(
            self, _stop_workers, os.getpid(), self._workers, self._index_queues, self._results
        )
        self._epoch = -1
        self._start_epoch()

    def _start_epoch(self) -> None:
        self._epoch += 1
        if self._epoch > 0 and self._loader._iterable:
            for index_queue in self._index_queues:
                index_queue.put((self._epoch, "restart", None))
        self._indices = iter(self._loader._index_sampler)
        self._active = [True] * len(self._workers)
        self._next_worker = itertools.cycle(range(len(self._workers)))
        self._sent = self._received = 0
        self._tasks = {}  # task -> [worker] while in flight, [worker, data] once it came early
        for _ in range(self._loader.prefetch_factor * len(self._workers)):
            self._send_one()

    def _send_one(self) -> None:
        if not any(self._active):
            return
        try:
            index = next(self._indices)
        except StopIteration:
            return
        worker = next(w for w in self._next_worker if self._active[w])
        self._index_queues[worker].put((self._epoch, self._sent, index))
        self._tasks[self._sent] = [worker]
        self._sent += 1

    def __iter__(self):
        return self

    def __len__(self) -> int:
        return len(self._loader)

    def __next__(self):
        while True:
            while self._received < self._sent:  # skip the tasks of workers whose stream has ended
                task = self._tasks.get(self._received)
                if task is not None and (len(task) == 2 or self._active[task[0]]):
                    break
                self._tasks.pop(self._received, None)
                self._received += 1
            else:
                if not self._loader.persistent_workers:
                    self._shutdown()
                raise StopIteration
            task = self._tasks[self._received]
            if len(task) == 2:
                return self._deliver(task[1])
            worker, epoch, number, status, payload = self._get()
            if epoch != self._epoch:
                continue  # an abandoned epoch's result (persistent workers)
            if status == "stop":
                self._active[worker] = False
                self._tasks.pop(number, None)
                continue
            if status == "error":
                self._shutdown()
                _worker.raise_worker_error(payload)
            if number == self._received:
                return self._deliver(payload)
            self._tasks[number].append(payload)

    def _deliver(self, payload):
        self._tasks.pop(self._received, None)
        self._received += 1
        self._send_one()
        return _worker.loads(payload)

    def _get(self):
        """The next result; a worker that died or a `timeout` without a result is a RuntimeError."""
        timeout = self._loader.timeout
        start = time.monotonic()
        while True:
            wait = 5.0 if timeout <= 0 else min(5.0, max(0.0, timeout - (time.monotonic() - start)))
            try:
                return self._results.get(timeout=wait)
            except queue.Empty:
                dead = [str(w.pid) for w in self._workers if not w.is_alive()]
                if dead:
                    self._shutdown()
                    raise RuntimeError(f"DataLoader worker (pid(s) {', '.join(dead)}) exited unexpectedly") from None
                if 0 < timeout <= time.monotonic() - start:
                    self._shutdown()
                    raise RuntimeError(f"DataLoader timed out after {timeout} seconds") from None


def _stop_workers(owner: int, workers: list, index_queues: list, results) -> None:
    """Ask each worker to end, wait a little, then end the ones still running (in the process that
    started them: a forked worker of another loader holds a copy of this finalizer too)."""
    if os.getpid() != owner:
        return
    for index_queue in index_queues:
        try:
            index_queue.put(None)
        except (OSError, ValueError):
            pass
    for process in workers:
        process.join(timeout=5.0)
        if process.is_alive():
            process.terminate()
    for q in (*index_queues, results):
        q.cancel_join_thread()
        q.close()
