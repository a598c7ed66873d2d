"""Tensors and the memory that process groups move (gradcraft/distributed/): the sums over processes,
and the device arrays that gradient buckets and ZeRO-1's shards are cut from. distributed/ reaches a
tensor's memory only through these, so the version bumps of its in-place writes happen here.

    all_reduce(group, [loss, norm])               # summed over the processes, in place
    flat = device_array(param).reshape(-1)         # a view of the weights' memory (NumPy or CuPy)
    write_flat(param, summed[offset:offset + n])   # the weights from a flat array, in place
"""

from gradcraft.engine.realize import before_write
from gradcraft.ops.creation import empty
from gradcraft.tensor import buffer_of, bump_version, from_buffer


def all_reduce(group, tensors) -> None:
    """Sum tensors over the group's processes, in place (realized first; their memory must be
    contiguous). A group of one process, or None, leaves them as they are."""
    if group is None or group.world <= 1 or not tensors:
        return
    arrays = []
    for t in tensors:
        array = buffer_of(t)
        if not array.flags.c_contiguous:
            raise ValueError("all_reduce needs contiguous tensors: call .contiguous() first")
        arrays.append(array)
    for t in tensors:
        before_write(t)
    group.all_reduce(arrays)
    for t in tensors:
        bump_version(t)


def device_array(t):
    """The realized tensor's memory as the device's own array (NumPy or CuPy), shared, not copied:
    for code that hands memory to a process group. Writes into it must be announced with
    `write_flat` (or be to memory no tensor reads before the next `write_flat`)."""
    return buffer_of(t)


def from_device_array(array, dtype, device: str):
    """A tensor over a device array (the memory is shared: a slice of a bucket, a shard)."""
    return from_buffer(array, dtype, device)


def write_flat(t, values) -> None:
    """Overwrite t's memory, in place, with a flat device array of t.numel() elements."""
    array = buffer_of(t)
    before_write(t)  # lazy tensors built from the old contents keep them
    array.reshape(-1)[...] = values
    bump_version(t)


# The process group torch.distributed.init_process_group made (gradcraft/distributed/c10d.py): kept
# here, below nn/, so that nn.parallel.DistributedDataParallel finds it without importing distributed/.
_DEFAULT_GROUP: list = [None]


def default_group():
    """The default process group, or None before init_process_group (and after destroy)."""
    return _DEFAULT_GROUP[0]


def set_default_group(group) -> None:
    _DEFAULT_GROUP[0] = group


def all_gather_flat(group, t):
    """Every rank's t (contiguous, the same shape on every rank), in rank order: (world, *t.shape)."""
    t = t.contiguous().realize()
    out = empty((group.world, *t.shape), dtype=t.dtype, device=t.device).realize()
    group.all_gather(buffer_of(t).reshape(-1), buffer_of(out).reshape(-1))
    bump_version(out)
    return out
