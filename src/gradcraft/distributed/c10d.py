"""torch.distributed's names over gradcraft's process groups: init_process_group (torchrun's
environment, or rank/world_size and a tcp:// or env:// address), the collectives on tensors
(all_reduce with a ReduceOp, broadcast, all_gather, reduce, barrier) and the queries.

    dist.init_process_group("gloo")          # CPU processes (gradcraft's TCP group); "nccl" on GPUs
    dist.all_reduce(t, op=dist.ReduceOp.SUM) # in place, on every rank
    dist.destroy_process_group()

Backend "gloo" (or "cpu", "tcp") is gradcraft's TCP group; "nccl" (or "cuda") its NCCL group on
cuda:LOCAL_RANK; None picks NCCL where a GPU is available, else the TCP group. There is one group:
the `group` arguments take None (or the group itself).
"""

from __future__ import annotations

import datetime
import os

from gradcraft.distributed.spawn import finished, join_group
from gradcraft.distributed.topology import DEFAULT_TIMEOUT_S, Topology
from gradcraft.errors import UserError
from gradcraft.ops.collective import all_gather_flat, default_group, set_default_group
from gradcraft.ops.collective import all_reduce as _sum_in_place
from gradcraft.ops.function import no_grad

_NOT_INITIALIZED = "Default process group has not been initialized, please make sure to call init_process_group."


class ReduceOp:
    """How all_reduce combines the ranks' tensors (torch.distributed.ReduceOp's names)."""

    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"


class Backend(str):
    GLOO = "gloo"
    NCCL = "nccl"
    UNDEFINED = "undefined"


class _Work:
    """What async_op=True returns: the collective already ran (gradcraft's collectives block)."""

    def wait(self, timeout=None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


GroupMember = type("GroupMember", (), {"WORLD": None, "NON_GROUP_MEMBER": -100})


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return default_group() is not None


def is_gloo_available() -> bool:
    return True


def is_nccl_available() -> bool:
    from gradcraft import cuda

    return cuda.is_available()


def is_torchelastic_launched() -> bool:
    return os.environ.get("TORCHELASTIC_RUN_ID") is not None


def _group(group=None):
    g = group if group is not None else default_group()
    if g is None:
        raise ValueError(_NOT_INITIALIZED)
    return g


def _seconds(timeout) -> float:
    if timeout is None:
        return DEFAULT_TIMEOUT_S
    return timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)


def _address(init_method: str | None) -> tuple:
    """(host, port) of rank 0: from a tcp:// address, or MASTER_ADDR and MASTER_PORT (env://)."""
    if init_method and init_method.startswith("tcp://"):
        host, _, port = init_method[len("tcp://") :].partition("?")[0].rpartition(":")
        return host.strip("[]"), int(port)
    if init_method not in (None, "env://"):
        raise UserError(f"init_method {init_method!r} is not supported; use 'env://' or 'tcp://host:port'")
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
    if missing:
        raise ValueError(
            f"Error initializing torch.distributed using env:// rendezvous: environment variable {missing[0]} "
            "expected, but not set"
        )
    return os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])


def _env_int(name: str, given: int) -> int:
    if given is not None and given >= 0:
        return given
    text = os.environ.get(name)
    if text is None:
        raise ValueError(
            f"Error initializing torch.distributed using env:// rendezvous: environment variable {name} "
            "expected, but not set"
        )
    return int(text)


def init_process_group(
    backend: str | None = None,
    init_method: str | None = None,
    timeout: datetime.timedelta | None = None,
    world_size: int = -1,
    rank: int = -1,
    store=None,
    group_name: str = "",
    pg_options=None,
    device_id=None,
) -> None:
    """Join the job's processes: every rank calls it (torchrun sets RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR, MASTER_PORT)."""
    if default_group() is not None:
        raise ValueError("trying to initialize the default process group twice!")
    if store is not None:
        raise UserError("init_process_group(store=...) is not supported; use init_method='env://' or 'tcp://...'")
    name = (backend or ("nccl" if is_nccl_available() else "gloo")).lower().partition(":")[0]
    if name not in ("gloo", "nccl", "cpu", "cuda", "tcp"):
        raise ValueError(f"Invalid backend: '{backend}' (gradcraft has 'gloo' over TCP and 'nccl')")
    world = _env_int("WORLD_SIZE", world_size)
    me = _env_int("RANK", rank)
    if not 0 <= me < world:
        raise ValueError(f"Invalid rank {me} for world size {world}")
    host, port = _address(init_method)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device_id is not None:
        local_rank = device_id if isinstance(device_id, int) else int(str(device_id).partition(":")[2] or 0)
    device = f"cuda:{local_rank}" if name in ("nccl", "cuda") else "cpu"
    topology = Topology(
        nnodes=world,
        node_rank=me,
        nproc=1,
        master_addr=host,
        master_port=port,
        timeout=_seconds(timeout),
        started_by="environment" if os.environ.get("RANK") is not None else "gradcraft",
    )
    topology.check()
    group = join_group(topology, me, device)
    group.torch_backend = "nccl" if device.startswith("cuda") else "gloo"
    set_default_group(group)


def destroy_process_group(group=None) -> None:
    g = _group(group)
    finished(g)
    close = getattr(g, "close", None)
    if close is not None:
        close()
    if g is default_group():
        set_default_group(None)


def get_rank(group=None) -> int:
    return _group(group).rank


def get_world_size(group=None) -> int:
    return _group(group).world


def get_backend(group=None) -> str:
    return _group(group).torch_backend


def get_node_local_rank(fallback_rank: int | None = None) -> int:
    if "LOCAL_RANK" in os.environ:
        return int(os.environ["LOCAL_RANK"])
    if fallback_rank is not None:
        return fallback_rank
    raise RuntimeError("LOCAL_RANK is not in the environment")


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op: bool = False):
    """Combine tensor over the ranks, in place: every rank ends with the same values."""
    g = _group(group)
    if op in (ReduceOp.SUM, ReduceOp.AVG):
        _sum_in_place(g, [tensor])
        if op == ReduceOp.AVG:
            with no_grad():
                tensor.div_(g.world)
    elif op in (ReduceOp.MAX, ReduceOp.MIN, ReduceOp.PRODUCT):
        every = all_gather_flat(g, tensor)
        combined = {ReduceOp.MAX: every.amax, ReduceOp.MIN: every.amin, ReduceOp.PRODUCT: every.prod}[op](dim=0)
        with no_grad():
            tensor.copy_(combined)
    else:
        raise ValueError(f"unsupported ReduceOp {op!r}")
    return _Work() if async_op else None


def reduce(tensor, dst: int | None = None, op=ReduceOp.SUM, group=None, async_op: bool = False, group_dst=None):
    """all_reduce's result on rank dst (the others keep theirs, as PyTorch leaves them undefined)."""
    g = _group(group)
    dst = group_dst if dst is None else dst
    if g.rank != dst:
        original = tensor.clone().realize()
    all_reduce(tensor, op, group)
    if g.rank != dst:
        with no_grad():
            tensor.copy_(original)
    return _Work() if async_op else None


def broadcast(tensor, src: int | None = None, group=None, async_op: bool = False, group_src=None):
    """Rank src's tensor, in place, on every rank (a sum with the others' zeros: exact)."""
    g = _group(group)
    src = group_src if src is None else src
    if src is None or not 0 <= src < g.world:
        raise ValueError(f"broadcast: src must be a rank of the group, got {src}")
    if g.rank != src:
        with no_grad():
            tensor.zero_()
    _sum_in_place(g, [tensor])
    return _Work() if async_op else None


def all_gather(tensor_list, tensor, group=None, async_op: bool = False):
    """tensor_list[r] = rank r's tensor, on every rank."""
    g = _group(group)
    if len(tensor_list) != g.world:
        raise ValueError(f"all_gather: tensor_list has {len(tensor_list)} tensors for {g.world} ranks")
    every = all_gather_flat(g, tensor)
    with no_grad():
        for r, out in enumerate(tensor_list):
            out.copy_(every[r])
    return _Work() if async_op else None


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op: bool = False):
    """output_tensor (world x input's rows, or (world, *input.shape)) = every rank's input, in order."""
    every = all_gather_flat(_group(group), input_tensor)
    with no_grad():
        output_tensor.copy_(every.reshape(output_tensor.shape))
    return _Work() if async_op else None


def all_gather_object(object_list: list, obj, group=None) -> None:
    """object_list[r] = rank r's obj (pickled; every rank's pickle padded to the longest)."""
    import pickle

    import numpy as np

    from gradcraft.ops.creation import tensor as make_tensor

    g = _group(group)
    data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    sizes = all_gather_flat(g, make_tensor([data.size])).numpy().reshape(-1)
    padded = np.zeros(int(sizes.max()), dtype=np.uint8)
    padded[: data.size] = data
    every = all_gather_flat(g, make_tensor(padded)).numpy()
    for r in range(g.world):
        object_list[r] = pickle.loads(every[r, : sizes[r]].tobytes())


def broadcast_object_list(object_list: list, src: int | None = None, group=None, device=None, group_src=None) -> None:
    src = group_src if src is None else src
    gathered: list = [None] * _group(group).world
    all_gather_object(gathered, list(object_list), group)
    object_list[:] = gathered[src or 0]


def barrier(group=None, async_op: bool = False, device_ids=None, timeout=None):
    """Wait until every rank has reached its barrier."""
    from gradcraft.ops.creation import zeros

    _sum_in_place(_group(group), [zeros(1).realize()])
    return _Work() if async_op else None


def new_group(
    ranks=None,
    timeout=None,
    backend=None,
    pg_options=None,
    use_local_synchronization=False,
    group_desc=None,
    device_id=None,
    sort_ranks=True,
):
    g = _group()
    if ranks is not None and sorted(ranks) != list(range(g.world)):
        raise UserError("new_group: gradcraft has one group, of every rank; subgroups are not supported")
    return g
