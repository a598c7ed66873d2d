"""Gradient buckets: the gradients summed over the processes while backward is still running.

Backward produces the gradients last layer first. Each one, as soon as its kernel is issued
(autograd's on_grad_ready), is copied into its slot of a flat bucket; a bucket whose every gradient
has arrived is handed to the communication at once, and the processes sum it while backward goes
on computing the earlier layers' gradients (PyTorch DDP's scheme). After backward, `finish` waits
for the last bucket and points every parameter's .grad at its slot of the summed bucket.

The buckets are laid out on the first step, in the order the gradients arrive there, up to
`bucket_bytes` each, one dtype per bucket; later steps reuse the layout (and the buffers). Every
process runs the same graph, so the gradients arrive in the same order everywhere and the
processes issue the same collectives in the same order; buckets are issued strictly in order.

Where the communication runs:
- CPU (TCPGroup): a communication thread sums the buckets through the sockets while the main
  thread runs the rest of backward (NumPy releases the GIL in its kernels).
- CUDA (NCCLGroup): a second stream. When a bucket is complete, an event recorded on the compute
  stream makes the communication stream wait for the copies into the bucket, then the bucket's
  all-reduce is issued there; `finish` makes the compute stream wait for the communication
  stream. Inside a CUDA graph capture these events fork the communication stream into the
  capture and join it back, so the replayed graph overlaps the all-reduces with the backward
  kernels too. The buffers are allocated on the first (eager, uncaptured) step and stay put.

With ZeRO-1 (zero.py) a bucket is reduce-scattered instead: each process receives only its
1/world slice of the summed bucket (each bucket is padded to a multiple of world).
"""

import queue
import threading

import numpy as np

from gradcraft.errors import UserError
from gradcraft.ops.collective import all_reduce, from_device_array


class Bucket:
    def __init__(self, index: int, dtype, pad_to: int):
        self.index, self.dtype, self.pad_to = index, dtype, pad_to
        self.slots = []  # (param, offset, size), in arrival order on the first step
        self.offsets = {}  # id(param) -> (offset, size)
        self.size = 0
        self.flat = None  # the buffer: one per bucket, kept across steps
        self.arrived = 0
        self.shard = None  # ZeRO: this rank's slice of the summed bucket

    def add(self, param, size: int) -> None:
        self.slots.append((param, self.size, size))
        self.offsets[id(param)] = (self.size, size)
        self.size += size

    @property
    def padded_size(self) -> int:
        return -(-self.size // self.pad_to) * self.pad_to


class GradientBuckets:
    def __init__(self, group, params, bucket_bytes: int, scatter: bool = False):
        self.group, self.scatter = group, scatter
        self.params = [p for p in params if p.requires_grad]
        self.bucket_bytes = max(1, int(bucket_bytes))
        self.buckets: list[Bucket] = []
        self.where: dict[int, Bucket] = {}  # id(param) -> its bucket
        self.laid_out = False
        self._open: dict = {}  # dtype -> the bucket being filled (first step only)
        self._next = 0  # the first bucket not issued yet
        self._got: set[int] = set()  # id(param) of the gradients that arrived in this backward
        self._cuda = None
        self._thread = None

    # ------------------------------------------------------------ one backward

    def start(self) -> None:
        """Before the backward whose gradients are to be summed (the step's last micro-batch)."""
        for bucket in self.buckets:
            bucket.arrived = 0
            bucket.shard = None
        self._next = 0
        self._got = set()

    def ready(self, param, buffer) -> None:
        """autograd's on_grad_ready: param's gradient (buffer) has been issued."""
        pid = id(param)
        if pid in self._got:
            return
        self._got.add(pid)
        bucket = self.where.get(pid)
        if bucket is None:
            if not self.laid_out:  # first step: the bucket is copied in when it closes
                self._place(param, buffer)
            return  # (later: not in the layout, no gradient on the first step: summed in finish())
        offset, size = bucket.offsets[pid]
        self._copy_in(bucket, offset, size, buffer)
        bucket.arrived += 1
        if bucket.arrived == len(bucket.slots):
            self._issue_ready()

    def _place(self, param, buffer) -> None:
        """First step: put param into the open bucket of its dtype; close the bucket when full."""
        dtype = buffer.dtype
        bucket = self._open.get(dtype)
        if bucket is None:
            bucket = self._open[dtype] = Bucket(len(self.buckets), dtype, self.group.world if self.scatter else 1)
            self.buckets.append(bucket)
            bucket.pending = []
        bucket.add(param, int(np.prod(buffer.shape)))
        bucket.pending.append(buffer)
        self.where[id(param)] = bucket
        if bucket.size * buffer.dtype.itemsize >= self.bucket_bytes:
            self._close(bucket)

    def _close(self, bucket: Bucket) -> None:
        self._open.pop(bucket.dtype, None)
        bucket.flat = self._empty(bucket.padded_size, bucket.dtype, like=bucket.pending[0])
        bucket.flat[bucket.size :] = 0
        if self.scatter and self._is_cuda(bucket.flat):  # (allocated outside any graph capture)
            bucket.shard_buffer = self._empty(bucket.padded_size // self.group.world, bucket.dtype, bucket.flat)
        for (_, offset, size), buffer in zip(bucket.slots, bucket.pending):
            self._copy_in(bucket, offset, size, buffer)
        bucket.arrived = len(bucket.slots)
        del bucket.pending
        self._issue_ready()

    def finish(self) -> None:
        """After backward: issue what is left, wait for every bucket, point each .grad at its sum
        (ZeRO: keep only this rank's slices, in bucket.shard; the .grad are left alone)."""
        if not self.laid_out:
            for bucket in list(self._open.values()):
                self._close(bucket)
            self.laid_out = True
        for bucket in self.buckets[self._next :]:
            if bucket.arrived < len(bucket.slots):  # a parameter without a gradient this step: zeros
                for param, offset, size in bucket.slots:
                    if id(param) not in self._got:
                        bucket.flat[offset : offset + size] = 0
                bucket.arrived = len(bucket.slots)
        self._issue_ready()
        self._wait()
        if not self.scatter:
            for bucket in self.buckets:
                for param, offset, size in bucket.slots:
                    if id(param) in self._got:
                        view = bucket.flat[offset : offset + size].reshape(param.shape)
                        param.grad = from_device_array(view, param.dtype, param.device)
        extra = [p for p in self.params if id(p) not in self.where and p.grad is not None]
        if extra:  # no gradient on the first step, one now: summed here, at the end
            if self.scatter:
                raise UserError(
                    "ZeRO-1 needs every parameter to have a gradient on the first step; train without --zero"
                )
            grads = [p.grad.contiguous().realize() for p in extra]
            all_reduce(self.group, grads)
            for p, g in zip(extra, grads):
                p.grad = g

    # ------------------------------------------------------------ the communication

    def _issue_ready(self) -> None:
        while self._next < len(self.buckets):
            bucket = self.buckets[self._next]
            if bucket.flat is None or bucket.arrived < len(bucket.slots):
                return
            self._issue(bucket)
            self._next += 1

    def _is_cuda(self, buffer) -> bool:
        return type(buffer).__module__.startswith("cupy")

    def _empty(self, n, dtype, like):
        if self._is_cuda(like):
            import cupy as cp

            return cp.empty(n, dtype)
        return np.empty(n, dtype)

    def _copy_in(self, bucket: Bucket, offset: int, size: int, buffer) -> None:
        # (on CUDA: a copy kernel on the compute stream, ordered after the gradient's own kernel)
        bucket.flat[offset : offset + size] = buffer.reshape(-1)

    def _issue(self, bucket: Bucket) -> None:
        if self._is_cuda(bucket.flat):
            self._issue_cuda(bucket)
        else:
            self._issue_cpu(bucket)

    def _issue_cpu(self, bucket: Bucket) -> None:
        if self._thread is None:
            self._jobs, self._errors = queue.Queue(), []
            self._thread = threading.Thread(target=self._communicate, name="gradcraft-buckets", daemon=True)
            self._thread.start()
        self._jobs.put(bucket)

    def _communicate(self) -> None:
        while True:
            bucket = self._jobs.get()
            try:
                if bucket is not None and not self._errors:
                    if self.scatter:
                        bucket.shard = self.group.reduce_scatter(bucket.flat)
                    else:
                        self.group.all_reduce([bucket.flat])
            except BaseException as e:  # raised again by _wait, on the main thread
                self._errors.append(e)
            finally:
                self._jobs.task_done()
            if bucket is None:
                return

    def _issue_cuda(self, bucket: Bucket) -> None:
        import cupy as cp

        if self._cuda is None:
            self._cuda = cp.cuda.Stream(non_blocking=True)
        compute = cp.cuda.get_current_stream()
        copied = cp.cuda.Event(disable_timing=True)
        copied.record(compute)
        self._cuda.wait_event(copied)  # the bucket's copies (and the kernels before them) are done
        if self.scatter:
            bucket.shard = self.group.reduce_scatter(bucket.flat, out=bucket.shard_buffer, stream=self._cuda)
        else:
            self.group.all_reduce([bucket.flat], stream=self._cuda)

    def _wait(self) -> None:
        if self._thread is not None:
            self._jobs.join()
            if self._errors:
                error = self._errors[0]
                self._errors.clear()
                raise error
        if self._cuda is not None:
            import cupy as cp

            summed = cp.cuda.Event(disable_timing=True)
            summed.record(self._cuda)
            cp.cuda.get_current_stream().wait_event(summed)  # the join back (a captured graph needs it)

    def close(self) -> None:
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join(timeout=5)
            self._thread = None
