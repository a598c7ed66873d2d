"""NCCL for data parallelism (gradcraft/distributed.py): one communicator per process and GPU.

The all-reduce runs on the current stream, so inside a CUDA graph capture it is recorded with the
rest of the training step and replayed with it.
"""

import cupy as cp

from gradcraft.errors import UserError


def _nccl():
    try:
        from cupy.cuda import nccl
    except ImportError as e:
        raise UserError(
            f"NCCL is not available to CuPy ({e}); install the nvidia-nccl wheel for your CUDA "
            "version (e.g. pip install nvidia-nccl-cu12)"
        ) from None
    return nccl


def check_nccl() -> None:
    """Raise the one-line error now (in the launcher) if CuPy has no NCCL."""
    _nccl()


def available_devices() -> int:
    return cp.cuda.runtime.getDeviceCount()


def unique_id():
    """The id that lets the processes find each other (made once, by the launching process)."""
    return _nccl().get_unique_id()


class NCCLGroup:
    backend = "nccl"

    def __init__(self, rank: int, world: int, uid, device_index: int):
        nccl = _nccl()
        self.rank, self.world, self.device_index = rank, world, device_index
        cp.cuda.Device(device_index).use()
        self.comm = nccl.NcclCommunicator(world, uid, rank)
        self._types = {
            cp.dtype(cp.float32): nccl.NCCL_FLOAT32,
            cp.dtype(cp.float16): nccl.NCCL_FLOAT16,
            cp.dtype(cp.float64): nccl.NCCL_FLOAT64,
        }
        if hasattr(nccl, "NCCL_BFLOAT16"):
            import ml_dtypes

            self._types[cp.dtype(ml_dtypes.bfloat16)] = nccl.NCCL_BFLOAT16
        self._sum = nccl.NCCL_SUM

    def _check_types(self, arrays, what: str) -> None:
        missing = {str(a.dtype) for a in arrays if a.dtype not in self._types}
        if missing:  # (before a group starts: a failure inside it would leave the other ranks waiting)
            raise TypeError(f"NCCL {what}: no NCCL type for {', '.join(sorted(missing))}")

    def all_reduce(self, arrays, stream=None) -> None:
        """Sum each (contiguous) array over the processes, in place, on `stream` (default: the current
        one; inside a graph capture, a stream that takes part in the capture)."""
        nccl = _nccl()
        self._check_types(arrays, "all-reduce")
        stream = (stream or cp.cuda.get_current_stream()).ptr
        nccl.groupStart()  # one launch for all the arrays
        try:
            for a in arrays:
                if a.size:
                    self.comm.allReduce(a.data.ptr, a.data.ptr, a.size, self._types[a.dtype], self._sum, stream)
        finally:
            nccl.groupEnd()

    def reduce_scatter(self, flat, out=None, stream=None):
        """The sum over the processes of the contiguous 1-d `flat` (length a multiple of world):
        this rank's slice, into `out` (or a new array), on `stream` (default: the current one)."""
        self._check_types([flat], "reduce-scatter")
        shard = flat.size // self.world
        out = cp.empty(shard, flat.dtype) if out is None else out
        self.comm.reduceScatter(
            flat.data.ptr,
            out.data.ptr,
            shard,
            self._types[flat.dtype],
            self._sum,
            (stream or cp.cuda.get_current_stream()).ptr,
        )
        return out

    def all_gather(self, shard, flat) -> None:
        """flat (world x shard.size, contiguous) = every rank's shard in rank order (current stream)."""
        self._check_types([shard], "all-gather")
        self.comm.allGather(
            shard.data.ptr, flat.data.ptr, shard.size, self._types[shard.dtype], cp.cuda.get_current_stream().ptr
        )

    def close(self) -> None:
        self.comm.destroy()
