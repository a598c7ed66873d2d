"""The CUDA backend: CuPy arrays as buffers, every kernel of the contract.

Primitive kernels (elementwise, reductions, movement, gathers, creation) use CuPy's own routines
where a handwritten kernel would not pay, with cpu.py's dtype rules: float16/bfloat16 arithmetic runs
in float32 and rounds once. The fused NN kernels are launchers in nn.py over kernels/*.cu;
matmul goes to cuBLAS (matmul.py). Extra methods beyond the contract: `adamw_step`, `grad_norm`
(optim.py) and `cross_entropy_with_grad` (nn.py).
"""

import functools

import cupy as cp

import numpy as np

from gradcraft.backend import Backend, slices_tile_one_axis
from gradcraft.backend.cuda import launch as L
from gradcraft.backend.cuda import attention, nn, optim
from gradcraft.backend.cuda.matmul import gemm, matmul

HALF = L.HALF


# ---------------------------------------------------------------- elementwise

def _unary(fn):
    def kernel(a):
        return L.finish(fn(L.wide(a)), a.dtype)
    return kernel


def _sigmoid(w):
    return cp.exp(-cp.logaddexp(0.0, -w)).astype(w.dtype, copy=False)


_FAST_BINARY = {"add", "sub", "mul", "div", "maximum", "minimum"}
_BINARY_UNROLL = 2  # 16-byte accesses in flight per array and thread (elementwise.cu's U)


def _binary_one_pass(name, a, b):
    """elementwise.cu over contiguous a and b of one float dtype, b's values repeating along a's leading
    axes (b_n = b.size divides n = a.size: a's own shape, a bias, or one value). The `_v` kernel moves
    16 bytes per access where a, out (and b, unless it is one value) are 16-byte aligned and a repeated
    b's size is a multiple of the values per access; the one-value kernel otherwise."""
    out = L.empty(a.shape, a.dtype)
    n, b_n = a.size, b.size
    if not n:
        return out
    sfx = L.suffix(a.dtype)
    per_access = 16 // a.dtype.itemsize
    if b_n == 1:
        vector = L.aligned(a, out)
    else:
        vector = (b_n == n or (b_n % per_access == 0 and b_n < 2 ** 31)) and L.aligned(a, b, out)
    if vector:
        # A grid-stride loop over n // per_access accesses; at most 16 blocks of 256 an SM: several waves
        # at the 4..6 blocks an SM these kernels' registers allow, so a last partial wave costs little.
        blocks = min(L.grid_1d(n // per_access, 256, _BINARY_UNROLL), 16 * L.sm_count())
        L.run("elementwise.cu", f"{name}_v_{sfx}", blocks, 256, (a, b, out, L.i64(n), L.i64(b_n)))
    else:
        L.run("elementwise.cu", f"{name}_{sfx}", L.grid_1d(n, 256, 4), 256, (a, b, out, L.i64(n), L.i64(b_n)))
    return out


def _binary(name, fn):
    def kernel(a, b):
        if (name in _FAST_BINARY and a.dtype in L.FLOAT and b.dtype == a.dtype and a.flags.c_contiguous
                and b.flags.c_contiguous and b.ndim <= a.ndim and b.size
                and (b.size == 1 or a.shape[a.ndim - b.ndim:] == b.shape)):
            # One pass for the common cases: same shape, a bias along the last axes, or times a
            # scalar (b's values repeat along a's leading axes).
            return _binary_one_pass(name, a, b)
        wa, wb = L.wide(a), L.wide(b)
        out = fn(wa, wb)
        return L.finish(out, a.dtype) if a.dtype in HALF else out
    return kernel


def _compare(fn):
    def kernel(a, b):
        return fn(L.wide(a), L.wide(b))
    return kernel


def _pow(a, b):
    return L.finish(cp.power(L.wide(a), L.wide(b)), a.dtype)


def _rsqrt(a):
    return L.finish(1.0 / cp.sqrt(L.wide(a)), a.dtype)


def _cast(a, dtype):
    dtype = np.dtype(dtype)
    if a.dtype in HALF and dtype not in L.FLOAT:
        a = a.astype(np.float32)
    return a.astype(dtype)


def _where(cond, a, b):
    dtype = np.result_type(a, b)
    a, b = a.astype(dtype, copy=False), b.astype(dtype, copy=False)
    if dtype in HALF:  # select the 16-bit patterns: no arithmetic needed
        return cp.where(cond, a.view(np.uint16), b.view(np.uint16)).view(dtype)
    return cp.where(cond, a, b)


# ---------------------------------------------------------------- reductions

def _trailing(a, axes):
    """The number of trailing axes `axes` names when they are exactly the last ones, else None."""
    if axes is None:
        return a.ndim
    axes = sorted({ax % a.ndim for ax in ((axes,) if isinstance(axes, int) else axes)})
    k = len(axes)
    return k if axes == list(range(a.ndim - k, a.ndim)) else None


def _reduce_rows(kind, a, k, keepdim):
    """reduce.cu over the trailing k axes of a float array (one block per output element)."""
    a = L.contiguous(a)
    C = int(np.prod(a.shape[a.ndim - k:], dtype=np.int64))
    rows = a.size // C
    out = L.empty(a.shape[:a.ndim - k], a.dtype)
    if rows:
        L.run("reduce.cu", f"reduce_{kind}_{L.suffix(a.dtype)}", rows, L.row_threads(C), (a, out, L.i32(C)))
    return out.reshape(a.shape[:a.ndim - k] + (1,) * k) if keepdim else out


def _leading(a, axes) -> int:
    """k when axes are exactly the first k dims of a C-contiguous a (0 otherwise)."""
    k = len(axes)
    return k if a.ndim and k < a.ndim and tuple(axes) == tuple(range(k)) and a.flags.c_contiguous else 0


def _sum_leading(a, k, keepdim):
    """Sum over the leading k dims (a bias gradient: (B*T, C) -> (C,)) as ones(1, rows) @ a(rows, C): one
    cuBLAS GEMV-shaped product, memory bound, instead of a strided column reduction."""
    C = int(np.prod(a.shape[k:], dtype=np.int64))
    rows = a.size // C
    ones = _ones(rows, a.dtype)
    out = gemm(ones, a.reshape(rows, C), allow_tf32=False).reshape(a.shape[k:])  # sums stay fp32-exact
    return out.reshape((1,) * k + a.shape[k:]) if keepdim else out


@functools.lru_cache(maxsize=32)
def _ones(rows: int, dtype) -> cp.ndarray:
    return cp.ones((1, rows), dtype=dtype)


def _reduction(kind, fn):
    def kernel(a, axes, keepdim):
        k = _trailing(a, axes) if a.ndim else None
        if a.dtype in L.FLOAT and k and a.size and all(a.shape):
            return _reduce_rows(kind, a, k, keepdim)
        lead = _leading(a, axes) if kind == "sum" and a.dtype in (np.float32, np.dtype("bfloat16"), np.float16) \
            else 0
        if lead and a.size and all(a.shape):
            return _sum_leading(a, lead, keepdim)
        w = L.wide(a)
        if kind == "sum" and a.dtype.kind in "biu":
            return fn(w, axis=axes, keepdims=keepdim, dtype=np.int64)
        return L.finish(cp.asarray(fn(w, axis=axes, keepdims=keepdim)), a.dtype)
    return kernel


def _arg(fn):
    def kernel(a, axis, keepdim):
        w = L.wide(a)
        if axis is None:
            result = fn(w.reshape(-1)).astype(np.int64)
            return result.reshape((1,) * a.ndim) if keepdim else result
        result = fn(w, axis=axis).astype(np.int64)
        return cp.expand_dims(result, axis) if keepdim else result


    return kernel


def _cumsum(a, axis, reverse):
    w = L.wide(a)
    floating = a.dtype in L.FLOAT  # (bfloat16's NumPy kind is "V", not "f")
    dtype = w.dtype if floating else np.int64
    if reverse:
        result = cp.flip(cp.cumsum(cp.flip(w, axis), axis=axis, dtype=dtype), axis)
    else:
        result = cp.cumsum(w, axis=axis, dtype=dtype)
    return L.finish(L.contiguous(result), a.dtype if floating else np.int64)


def _topk(a, k, axis, largest):
    """Indices of the k largest (or smallest) along axis, sorted; ties keep the lower index (stable sort)."""
    key = -L.wide(a) if largest else L.wide(a)
    order = cp.argsort(key, axis=axis)
    return L.contiguous(cp.take(order, cp.arange(k), axis=axis)).astype(np.int64)


# ---------------------------------------------------------------- movement, gathers

def _slice(a, slices):
    return a[tuple(slice(*s) for s in slices)]


def _index_tuple(indices, spec):
    return tuple(indices[item] if isinstance(item, int) else slice(*item) for item in spec)


def _index(a, *indices, spec):
    return L.contiguous(a[_index_tuple(indices, spec)])


def _index_put_add(g, *indices, spec, shape):
    w = L.wide(g)
    out = cp.zeros(shape, dtype=w.dtype)
    cp.add.at(out, _index_tuple(indices, spec), w)
    return L.finish(out, g.dtype)


def _copy_rows(dst, src) -> bool:
    """dst[...] = src, 16 bytes at a time, for a contiguous src and a dst whose rows (last axis) are
    contiguous and evenly spaced (a slice of a wider array along its last axis, as the q/k/v
    gradients are of the qkv projection's); False, copying nothing, for any other layout."""
    if dst.ndim == 0 or dst.shape != src.shape or dst.dtype != src.dtype or not src.flags.c_contiguous:
        return False
    item, width = dst.itemsize, dst.shape[-1] * dst.itemsize
    if dst.strides[-1] != item or width % 16 or any(dst.strides[i] != dst.shape[i + 1] * dst.strides[i + 1]
                                                    for i in range(dst.ndim - 2)):
        return False
    row_stride = dst.strides[-2] if dst.ndim > 1 else width
    if row_stride % 16 or dst.data.ptr % 16 or src.data.ptr % 16:
        return False
    rows = dst.size // dst.shape[-1]
    if rows:
        L.run("elementwise.cu", "copy_rows_16", L.grid_1d(rows * (width // 16)), 256,
              (src, dst, L.i64(rows), L.i64(width // 16), L.i64(row_stride // 16)))
    return True


def _put_slices(*gs, specs, shape):
    """Zeros of `shape` with each g added at its slices (cpu.py's put_slices): plain slice writes,
    no atomics; no zero-fill when the slices tile the output along one axis."""
    if all(g.dtype == gs[0].dtype for g in gs) and slices_tile_one_axis(specs, shape):
        out = L.empty(shape, gs[0].dtype)  # plain copies: no arithmetic, so no widening
        for g, spec in zip(gs, specs):
            dst = out[tuple(slice(*s) for s in spec)]
            if not _copy_rows(dst, g):  # (CuPy's strided copy is ~5x slower than the rows one)
                dst[...] = g
        return out
    dtype = np.result_type(*[L.acc_dtype(g.dtype) if g.dtype in HALF else g.dtype for g in gs])
    if slices_tile_one_axis(specs, shape):
        out = cp.empty(shape, dtype=dtype)
        for g, spec in zip(gs, specs):
            out[tuple(slice(*s) for s in spec)] = g
    else:
        out = cp.zeros(shape, dtype=dtype)
        for g, spec in zip(gs, specs):
            out[tuple(slice(*s) for s in spec)] += L.wide(g)
    return L.finish(out, gs[0].dtype)


def _moe_permute(x, slot, rows):
    """cpu.py's moe_permute: one scatter of token rows to their expert slots (no atomics)."""
    out = cp.zeros((rows, x.shape[1]), dtype=x.dtype)
    out[slot.reshape(-1)] = cp.repeat(x, slot.shape[1], axis=0)
    return out


def _moe_permute_backward(g, slot):
    return L.finish(L.wide(g)[slot].sum(axis=1), g.dtype)


# (Elementwise products and sums, not cp.einsum: einsum calls cuBLAS through CuPy's bindings, which
# refuse while a CUDA graph is being captured.)

def _moe_unpermute(y, slot, w):
    wy = L.wide(y)
    return L.finish((wy[slot] * L.wide(w).astype(wy.dtype)[:, :, None]).sum(axis=1), y.dtype)


def _moe_unpermute_backward(y, slot, w, g):
    wy, wg = L.wide(y), L.wide(g)
    dy = cp.zeros(wy.shape, dtype=wy.dtype)
    dy[slot.reshape(-1)] = (L.wide(w).astype(wy.dtype)[:, :, None] * wg[:, None, :]).reshape(-1, wy.shape[1])
    dw = (wy[slot] * wg[:, None, :]).sum(axis=-1)
    return L.finish(dy, y.dtype), L.finish(dw, w.dtype)


def _take_along_dim(a, idx, axis):
    return L.contiguous(cp.take_along_axis(a, idx, axis=axis))


def _scatter_add_along_dim(g, idx, axis, shape):
    w = L.wide(g)
    out = cp.zeros(shape, dtype=w.dtype)
    grids = list(cp.ix_(*[cp.arange(n) for n in idx.shape]))
    grids[axis] = idx
    cp.add.at(out, tuple(grids), w)
    return L.finish(out, g.dtype)


def _pad(a, pads, value):
    out = cp.full(tuple(n + lo + hi for n, (lo, hi) in zip(a.shape, pads)), value, dtype=a.dtype) \
        if a.dtype not in HALF else cp.full(tuple(n + lo + hi for n, (lo, hi) in zip(a.shape, pads)), value,
                                            dtype=np.float32).astype(a.dtype)
    out[tuple(slice(lo, lo + n) for n, (lo, _) in zip(a.shape, pads))] = a
    return out


def _triangle(fn):
    def kernel(a, diagonal):
        rows, cols = a.shape[-2:]
        keep = fn(cp.ones((rows, cols), dtype=np.bool_), diagonal)
        if a.dtype in HALF:
            return cp.where(keep, a.view(np.uint16), np.uint16(0)).view(a.dtype)
        return cp.where(keep, a, cp.zeros((), dtype=a.dtype))
    return kernel


# ---------------------------------------------------------------- creation

def _full(shape, value, dtype):
    dtype = np.dtype(dtype)
    if dtype in HALF:
        return cp.full(shape, value, dtype=np.float32).astype(dtype)
    return cp.full(shape, value, dtype=dtype)


def _arange(start, stop, step, dtype, shape):
    # Computed on the device (a host array would be a copy that CUDA-graph capture cannot record):
    # start + i * step in int64 or float64, then cast, as cpu.py does.
    exact = np.int64 if all(isinstance(v, (int, np.integer)) for v in (start, stop, step)) else np.float64
    return cp.arange(start, stop, step, dtype=exact).astype(dtype, copy=False)


def _random(kind):
    def kernel(shape, seed, dtype):
        dtype = np.dtype(dtype)
        out = L.empty(shape, dtype)
        if out.size:
            L.run("random.cu", f"{kind}_{L.suffix(dtype)}", L.grid_1d(-(-out.size // 4)), 256,
                  (out, L.i64(out.size), np.uint64(seed)))
        return out
    return kernel


def _randint(shape, low, high, seed, dtype):
    out = L.empty(shape, np.int64)
    if out.size:
        L.run("random.cu", "randint_i64", L.grid_1d(-(-out.size // 4)), 256,
              (out, L.i64(out.size), np.uint64(seed), L.i64(low), L.i64(high)))
    return out.astype(dtype, copy=False)


def _assign(target, value):
    target[...] = value if value.dtype == target.dtype else value.astype(target.dtype)
    return target


class CUDABackend(Backend):
    def __init__(self, index: int = 0):
        self.index = index
        self.device = f"cuda:{index}"
        self._device = cp.cuda.Device(index)
        self._graph_memory = {}  # id(graph) -> (graph, its private memory pool, its stream)
        self.kernels = {
            "neg": _unary(cp.negative), "exp": _unary(cp.exp), "log": _unary(cp.log), "sqrt": _unary(cp.sqrt),
            "rsqrt": _rsqrt, "abs": _unary(cp.abs), "sin": _unary(cp.sin), "cos": _unary(cp.cos),
            "tanh": _unary(cp.tanh), "relu": lambda a: L.finish(cp.maximum(L.wide(a), 0), a.dtype),
            "sigmoid": lambda a: L.finish(_sigmoid(L.wide(a)), a.dtype),
            "gelu": nn.gelu, "silu": nn.silu, "sign": _unary(cp.sign),
            "logical_not": cp.logical_not, "cast": _cast,
            "gelu_backward": nn.gelu_backward, "silu_backward": nn.silu_backward,
            "swiglu": nn.swiglu, "swiglu_backward": nn.swiglu_backward,
            "add": _binary("add", cp.add), "sub": _binary("sub", cp.subtract), "mul": _binary("mul", cp.multiply),
            "div": _binary("div", cp.true_divide), "pow": _pow, "maximum": _binary("maximum", cp.maximum),
            "minimum": _binary("minimum", cp.minimum),
            "eq": _compare(cp.equal), "ne": _compare(cp.not_equal), "lt": _compare(cp.less),
            "le": _compare(cp.less_equal), "gt": _compare(cp.greater), "ge": _compare(cp.greater_equal),
            "where": _where,
            "sum": _reduction("sum", cp.sum), "max": _reduction("max", cp.max), "min": _reduction("min", cp.min),
            "argmax": _arg(cp.argmax), "argmin": _arg(cp.argmin), "cumsum": _cumsum, "topk": _topk,
            "matmul": matmul,
            "reshape": lambda a, shape: cp.reshape(a, shape), "permute": lambda a, axes: cp.transpose(a, axes),
            "expand": lambda a, shape: cp.broadcast_to(a, shape), "slice": _slice,
            "flip": lambda a, axes: cp.flip(a, axes), "contiguous": lambda a: cp.array(a, copy=True, order="C"),
            "index": _index, "index_put_add": _index_put_add, "take_along_dim": _take_along_dim,
            "scatter_add_along_dim": _scatter_add_along_dim, "put_slices": _put_slices,
            "moe_permute": _moe_permute, "moe_permute_backward": _moe_permute_backward,
            "moe_unpermute": _moe_unpermute, "moe_unpermute_backward": _moe_unpermute_backward,
            "cat": lambda *arrays, axis: cp.concatenate(arrays, axis=axis), "pad": _pad,
            "tril": _triangle(cp.tril), "triu": _triangle(cp.triu),
            "full": _full, "arange": _arange, "rand": _random("rand"), "randn": _random("randn"),
            "randint": _randint, "copy_from": self._copy_from, "assign": _assign,
            "softmax": nn.softmax, "softmax_backward": nn.softmax_backward,
            "log_softmax": nn.log_softmax, "log_softmax_backward": nn.log_softmax_backward,
            "cross_entropy": nn.cross_entropy, "cross_entropy_backward": nn.cross_entropy_backward,
            "layer_norm": nn.layer_norm, "layer_norm_backward": nn.layer_norm_backward,
            "rms_norm": nn.rms_norm, "rms_norm_backward": nn.rms_norm_backward,
            "embedding": nn.embedding, "embedding_backward": nn.embedding_backward, "dropout": nn.dropout,
            "attention_dropout": nn.attention_dropout,
            "rope": nn.rope, "sdpa": nn.sdpa, "sdpa_backward": nn.sdpa_backward,
            "flash_attention": attention.flash_attention,
            "flash_attention_backward": attention.flash_attention_backward,
            "masked_softmax": nn.masked_softmax, "masked_softmax_backward": nn.masked_softmax_backward,
        }
        self.check_contract()

    def run(self, op: str, args: list, attrs: dict):
        with self._device:
            return self.kernels[op](*args, **attrs)

    def _copy_from(self, a, source_backend):
        if isinstance(a, np.ndarray):
            return self.from_numpy(a)
        if a.device.id == self.index:
            return a.copy()
        return self.from_numpy(source_backend.to_numpy(a))  # another GPU: through the host

    def from_numpy(self, array):
        with self._device:
            return cp.asarray(np.asarray(array, order="C"))  # (ascontiguousarray would make 0-d 1-d)

    def to_numpy(self, array):
        with self._device:
            return cp.asnumpy(array)

    def release(self, array) -> None:
        """Nothing to do: CuPy's pool takes the memory back when the last reference goes."""

    def synchronize(self) -> None:
        with self._device:
            cp.cuda.Device().synchronize()

    # ------------------------------------------------------------ beyond the contract

    def flash_attention_supported(self, dtype, head_dim: int, value_dim: int) -> bool:
        return attention.supported(dtype, head_dim, value_dim)

    def cross_entropy_with_grad(self, logits, target, ignore_index=-100, label_smoothing=0.0, grad_scale=1.0):
        """(per-row loss, dlogits * grad_scale) in one launch; see nn.cross_entropy_with_grad."""
        with self._device:
            return nn.cross_entropy_with_grad(logits, target, None, ignore_index, label_smoothing, grad_scale)

    def adamw_step(self, params, grads, exp_avgs, exp_avg_sqs, lr_step, *, beta1=0.9, beta2=0.999, eps=1e-8,
                   weight_decay=0.01, grad_scale=None) -> None:
        """In-place AdamW over every parameter in one launch; see optim.adamw_step."""
        with self._device:
            optim.adamw_step(params, grads, exp_avgs, exp_avg_sqs, lr_step, beta1=beta1, beta2=beta2, eps=eps,
                             weight_decay=weight_decay, grad_scale=grad_scale)

    def grad_norm(self, grads, max_norm=0.0):
        """float32 device array [norm, clip coefficient]; see optim.grad_norm."""
        with self._device:
            return optim.grad_norm(grads, max_norm)

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
            with cp.cuda.using_allocator(pool.malloc), stream:
                stream.begin_capture()  # relaxed mode: the pool may still call cudaMalloc
                try:
                    result = fn()
                finally:
                    graph = stream.end_capture()
        self._graph_memory[id(graph)] = (graph, pool, stream)  # the graph's memory lives as long as it
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
            graph_pools = [pool for _, pool, _ in self._graph_memory.values()]
            return {"used_bytes": default.used_bytes() + sum(p.used_bytes() for p in graph_pools),
                    "reserved_bytes": default.total_bytes() + sum(p.total_bytes() for p in graph_pools)}

    def replay(self, graph) -> None:
        """Launch a captured graph on the current stream (after anything queued there)."""
        with self._device:
            graph.launch(stream=cp.cuda.get_current_stream())

    def write(self, array, values) -> None:
        with self._device:
            array.set(np.ascontiguousarray(values, dtype=array.dtype))
