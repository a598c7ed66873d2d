"""What runs in a DataLoader's worker processes, and what both loaders share: reading one batch.

A worker is a process started with the loader's multiprocessing context (fork, Linux's default: it
inherits the dataset, so neither the dataset nor `worker_init_fn` has to be picklable). It seeds
Python's `random`, NumPy's global generator and gradcraft's global generator from (base seed,
worker id), sets its WorkerInfo, runs `worker_init_fn(worker_id)`, then answers the tasks of its
index queue: each one batch's indices (a map-style dataset) or "the next batch" (an iterable one).
The batch is collated in the worker and sent back pickled, tensors as their NumPy data (gradcraft's
tensors are lazy handles: the data is what crosses the process boundary); the main process makes
tensors of it again. An exception in the worker is sent back and raised in the main process.
"""

from __future__ import annotations

import io
import os
import pickle
import queue
import random
import traceback

import numpy as np

_worker_info = None


class WorkerInfo:
    """Inside a worker: `id`, `num_workers`, `seed` and `dataset` (this worker's copy)."""

    _frozen = False

    def __init__(self, **fields) -> None:
        for key, value in fields.items():
            setattr(self, key, value)
        self._frozen = True

    def __setattr__(self, key, value) -> None:
        if self._frozen:
            raise RuntimeError(f"Cannot assign attributes to {type(self).__name__} objects")
        super().__setattr__(key, value)

    def __repr__(self) -> str:
        return f"WorkerInfo(id={self.id}, num_workers={self.num_workers}, seed={self.seed}, dataset={self.dataset!r})"


def get_worker_info() -> WorkerInfo | None:
    """This worker's WorkerInfo in a DataLoader worker process; None in the main process."""
    return _worker_info


class Fetcher:
    """Reads one batch (or one sample, without auto-batching) from a dataset."""

    def __init__(self, dataset, iterable: bool, auto_collation: bool, collate_fn, batch_size, drop_last: bool):
        self.dataset, self.iterable, self.auto_collation = dataset, iterable, auto_collation
        self.collate_fn, self.batch_size, self.drop_last = collate_fn, batch_size, drop_last
        self.stream = iter(dataset) if iterable else None
        self.ended = False

    def restart(self) -> None:
        """A new epoch of an iterable dataset (persistent workers): iterate it again."""
        self.stream, self.ended = iter(self.dataset), False

    def fetch(self, index):
        """The collated batch at `index` (a list of indices) or the stream's next one; StopIteration at
        the end of an iterable dataset."""
        if self.iterable:
            if self.ended:
                raise StopIteration
            if not self.auto_collation:
                return self.collate_fn(next(self.stream))
            samples = []
            for sample in self.stream:
                samples.append(sample)
                if len(samples) == self.batch_size:
                    break
            else:
                self.ended = True
            if not samples or (self.drop_last and len(samples) < self.batch_size):
                raise StopIteration
            return self.collate_fn(samples)
        if not self.auto_collation:
            return self.collate_fn(self.dataset[index])
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.collate_fn(self.dataset.__getitems__(index))
        return self.collate_fn([self.dataset[i] for i in index])


def _rebuild_tensor(array, dtype_name: str, device: str, requires_grad: bool):
    from gradcraft.tensor import Tensor

    return Tensor(array, dtype=dtype_name, device=device, requires_grad=requires_grad)


class _TensorPickler(pickle.Pickler):
    """Pickles gradcraft tensors as their data, dtype, device and requires_grad."""

    def reducer_override(self, obj):
        from gradcraft.tensor import Tensor

        if isinstance(obj, Tensor):
            return _rebuild_tensor, (obj.detach().numpy(), obj.dtype.name, obj.device, obj.requires_grad)
        return NotImplemented


def dumps(value) -> bytes:
    buffer = io.BytesIO()
    _TensorPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return buffer.getvalue()


def loads(data: bytes):
    return pickle.loads(data)


def worker_seeds(base_seed: int, worker_id: int) -> tuple:
    """(the seed of `random` and gradcraft, NumPy's global seed): PyTorch gives a worker base_seed +
    its id; NumPy's 32-bit words are mixed from both, so workers never share a NumPy stream."""
    seed = (base_seed + worker_id) % 2**64
    return seed, np.random.SeedSequence([base_seed % 2**64, worker_id]).generate_state(4)


def worker_loop(
    dataset, fetcher_args: dict, index_queue, result_queue, worker_id: int, num_workers: int, base_seed: int,
    worker_init_fn, parent_pid: int,
) -> None:  # fmt: skip
    """A worker process's body: answer (epoch, task, index) messages until None arrives."""
    global _worker_info
    from gradcraft.ops.creation import default_generator

    seed, numpy_seed = worker_seeds(base_seed, worker_id)
    random.seed(seed)
    np.random.seed(numpy_seed)
    default_generator.manual_seed(seed)  # (not gradcraft.manual_seed: that also touches device dropout state)
    _worker_info = WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)
    try:
        if worker_init_fn is not None:
            worker_init_fn(worker_id)
        fetcher = Fetcher(dataset, **fetcher_args)
    except Exception as error:  # reported with the first task
        fetcher, startup_error = None, _error_payload(error, worker_id)
    while True:
        try:
            message = index_queue.get(timeout=5.0)
        except queue.Empty:
            if os.getppid() != parent_pid:  # the main process is gone
                return
            continue
        if message is None:
            return
        epoch, task, index = message
        if task == "restart":
            if fetcher is not None and fetcher.iterable:
                fetcher.restart()
            continue
        if fetcher is None:
            result_queue.put((worker_id, epoch, task, "error", startup_error))
            continue
        try:
            result_queue.put((worker_id, epoch, task, "ok", dumps(fetcher.fetch(index))))
        except StopIteration:
            result_queue.put((worker_id, epoch, task, "stop", None))
        except Exception as error:
            result_queue.put((worker_id, epoch, task, "error", _error_payload(error, worker_id)))


def _error_payload(error: Exception, worker_id: int) -> bytes:
    text = f"Caught {type(error).__name__} in DataLoader worker process {worker_id}.\nOriginal {traceback.format_exc()}"
    try:
        return pickle.dumps((type(error), text))
    except Exception:
        return pickle.dumps((RuntimeError, text))


def raise_worker_error(payload: bytes) -> None:
    """Raise, in the main process, the exception a worker caught: the same type where it can be
    made from one message (PyTorch's behaviour), else RuntimeError."""
    error_type, text = pickle.loads(payload)
    try:
        error = error_type(text)
    except Exception:
        error = RuntimeError(text)
    raise error
