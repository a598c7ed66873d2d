"""The CUDA backend: CuPy arrays as buffers, every kernel of the contract.

The kernels live in one module per family, each exporting a KERNELS dict that the table is assembled
from: elementwise.py, reduce.py, movement.py, gather.py, creation.py, random.py, moe.py use CuPy's own
routines where a handwritten kernel would not pay, with backend/cpu/'s dtype rules (float16/bfloat16
arithmetic runs in float32 and rounds once); matmul.py goes to cuBLAS (gemv.py for one-row products);
activations.py, softmax.py, cross_entropy.py, linear_cross_entropy.py, norms.py, rope.py, embedding.py,
dropout.py, sdpa.py, flash_attention.py (flash) and gemv.py (norm_linear) launch kernels/*.cu (rows.py: the
row kernels' layouts). Extra methods beyond the contract: `adamw_step`, `grad_norm` (optim.py) and
`cross_entropy_with_grad` (cross_entropy.py).
"""

import cupy as cp
import cupyx

import numpy as np

from gradcraft.backend import Backend, assemble_kernels
from gradcraft.device import count_transfer
from gradcraft.backend.cuda import (
    activations,
    fused,
    creation,
    cross_entropy,
    dropout,
    elementwise,
    embedding,
    flash_attention,
    gather,
    gemv,
    kv_cache,
    linalg,
    linear,
    linear_cross_entropy,
    moe,
    movement,
    norms,
    optim,
    random,
    reduce,
    rope,
    sampling,
    sdpa,
    softmax,
)
from gradcraft.backend.cuda import launch as L
from gradcraft.backend.cuda import matmul as matmul_family

# The kernel families; the backend's table is their KERNELS dicts put together (and copy_from).
FAMILIES = (
    elementwise,
    reduce,
    matmul_family,
    movement,
    gather,
    moe,
    creation,
    random,
    activations,
    softmax,
    cross_entropy,
    linear_cross_entropy,
    norms,
    rope,
    embedding,
    dropout,
    sdpa,
    flash_attention,
    kv_cache,
    sampling,
    gemv,
    linear,
    linalg,
)


class CUDABackend(Backend):
    def __init__(self, index: int = 0):
        self.index = index
        self.device = f"cuda:{index}"
        self._device = cp.cuda.Device(index)
        self._graph_memory = {}  # id(graph) -> (graph, its private memory pool, its stream, its tables)
        self.kernels = {**assemble_kernels(FAMILIES), "copy_from": self._copy_from}
        self.check_contract()

    def run(self, op: str, args: list, attrs: dict):
        with self._device:
            return self.kernels[op](*args, **attrs)

    fuses_elementwise = True  # generated kernels for engine/fusion.py's groups (fused.py)

    def fused_elementwise(self, args: list, program: tuple, shape: tuple, dtype):
        with self._device:
            return fused.run(args, program, shape, dtype)

    def _copy_from(self, a, source_backend):
        if isinstance(a, np.ndarray):
            return self.from_numpy(a)
        if a.device.id == self.index:
            return a.copy()
        return self.from_numpy(source_backend.to_numpy(a))  # another GPU: through the host

    def from_numpy(self, array):
        count_transfer()
        with self._device:
            return cp.asarray(np.asarray(array, order="C"))  # (ascontiguousarray would make 0-d 1-d)

    def to_numpy(self, array):
        count_transfer()
        with self._device:
            return cp.asnumpy(array)

    # At most this many bytes, to_numpy_later copies with a kernel that writes the pinned host buffer
    # directly (pinned memory is mapped into the device's address space: unified addressing) instead
    # of a copy-engine transfer, whose set-up sits between a decoding loop's graph replays.
    # bench/decode_profile.py times both (0 turns the kernel copy off).
    KERNEL_FETCH_BYTES = 4096

    def to_numpy_later(self, array):
        """An asynchronous copy on the current stream into pinned host memory (CuPy's pinned pool),
        after everything queued there; the function returned waits for it (an event)."""
        count_transfer()
        with self._device:
            array = cp.ascontiguousarray(array)  # (a copy kernel, queued in order, if strided)
            host = cupyx.empty_pinned(array.shape, array.dtype)
            stream = cp.cuda.get_current_stream()
            pointer = 0
            if 0 < array.nbytes <= self.KERNEL_FETCH_BYTES:  # the buffer's device address (its own, with UVA)
                try:
                    pointer = cp.cuda.runtime.pointerGetAttributes(host.ctypes.data).devicePointer
                except cp.cuda.runtime.CUDARuntimeError:  # not mapped: the copy engine, below
                    pointer = 0
            if pointer:
                memory = cp.cuda.UnownedMemory(pointer, array.nbytes, host, self._device.id)
                cp.ndarray(array.shape, array.dtype, cp.cuda.MemoryPointer(memory, 0))[...] = array
            elif array.nbytes:
                cp.cuda.runtime.memcpyAsync(
                    host.ctypes.data, array.data.ptr, array.nbytes, cp.cuda.runtime.memcpyDeviceToHost, stream.ptr
                )
            done = cp.cuda.Event(disable_timing=True)
            done.record(stream)

        def wait():
            done.synchronize()  # (a kernel's writes to host memory are visible once it has completed)
            return host

        return wait

    def release(self, array) -> None:
        """Nothing to do: CuPy's pool takes the memory back when the last reference goes."""

    def synchronize(self) -> None:
        with self._device:
            cp.cuda.Device().synchronize()

    # ------------------------------------------------------------ beyond the contract

    def fused_linear_cross_entropy(self, dtype) -> bool:
        return np.dtype(dtype) in (np.dtype(np.float32), *L.HALF)

    def fused_linear_bias(self, dtype) -> bool:
        with self._device:
            return linear.supported(dtype)

    def flash_attention_supported(self, dtype, head_dim: int, value_dim: int) -> bool:
        return flash_attention.supported(dtype, head_dim, value_dim)

    def kv_attention_supported(self, dtype, length: int, head_dim: int) -> bool:
        return kv_cache.supported(dtype, length, head_dim)

    def kv_append_supported(self, dtype, length: int, head_dim: int) -> bool:
        return kv_cache.append_supported(dtype, length, head_dim)

    def norm_linear_supported(self, rows: int, N: int, K: int, dtype, activation) -> bool:
        return gemv.supported(rows, N, K, dtype, activation)

    def cross_entropy_with_grad(self, logits, target, ignore_index=-100, label_smoothing=0.0, grad_scale=1.0):
        """(per-row loss, dlogits * grad_scale) in one launch; see cross_entropy.launch."""
        with self._device:
            return cross_entropy.cross_entropy_with_grad(
                logits, target, None, ignore_index, label_smoothing, grad_scale
            )

    def adamw_step(self, *args, **kwargs) -> None:
        """In-place AdamW over every parameter in one launch: Backend.adamw_step's arguments, see
        optim.adamw_step."""
        with self._device:
            optim.adamw_step(*args, **kwargs)

    def grad_norm(self, grads, max_norm=0.0):
        """float32 device array [norm, clip coefficient]; see optim.grad_norm."""
        with self._device:
            return optim.grad_norm(grads, max_norm)

    def scale_many(self, arrays, scale) -> None:
        """Every array times scale[0], in place, in one launch; see optim.scale_many."""
        with self._device:
            optim.scale_many(arrays, scale)

    def cast_many(self, arrays, dtypes) -> list:
        """Many casts between float32, bfloat16 and float16 in one launch; see optim.cast_many."""
        with self._device:
            return optim.cast_many(arrays, dtypes)

    # ------------------------------------------------------------ CUDA graphs

    def capture(self, fn):
        """Run fn() with its kernels recorded into a CUDA graph instead of executed.

        Memory allocated while recording comes from a private pool that nothing else allocates from
        afterwards, so the addresses baked into the graph stay the graph's own; the pool lives as long
        as the graph. Returns (fn's result, graph). Nothing has run until `replay(graph)`.
        """
        pool = cp.cuda.MemoryPool()
        stream = cp.cuda.Stream(non_blocking=True)
        with self._device:
            self.synchronize()
            # The eager runs before capture left their intermediates cached in the default pool; the
            # graph gets its own copies, so hand the idle cached blocks back to the driver first.
            cp.get_default_memory_pool().free_all_blocks()
            with cp.cuda.using_allocator(pool.malloc), stream, L.capture_tables() as tables:
                stream.begin_capture()  # relaxed mode: the pool may still call cudaMalloc
                try:
                    result = fn()
                finally:
                    graph = stream.end_capture()
        # the graph's memory, and the host tables its copies read, live as long as it
        self._graph_memory[id(graph)] = (graph, pool, stream, tables)
        return result, graph

    def release_graph(self, graph) -> None:
        """Forget a captured graph: its private pool goes with it once nothing else holds its arrays
        (a generation's decoding graph, when the generation ends)."""
        self._graph_memory.pop(id(graph), None)

    def memory_info(self) -> dict:
        """CuPy's default pool plus the private pools of captured graphs. Pools never give memory back
        while the process runs, so `reserved_bytes` is also the peak; a steady loop (eager after its
        first steps, or replayed) allocates nothing new from the driver."""
        with self._device:
            default = cp.get_default_memory_pool()
            graph_pools = [held[1] for held in self._graph_memory.values()]
            return {
                "used_bytes": default.used_bytes() + sum(p.used_bytes() for p in graph_pools),
                "reserved_bytes": default.total_bytes() + sum(p.total_bytes() for p in graph_pools),
            }

    def replay(self, graph) -> None:
        """Launch a captured graph on the current stream (after anything queued there)."""
        with self._device:
            graph.launch(stream=cp.cuda.get_current_stream())

    def address(self, array) -> int:
        """Where the array's first element lives (two arrays at one address share memory)."""
        return array.data.ptr

    def write(self, array, values) -> None:
        count_transfer()
        with self._device:
            array.set(np.ascontiguousarray(values, dtype=array.dtype))
