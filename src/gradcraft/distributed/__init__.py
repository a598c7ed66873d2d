"""Data parallelism: one process per device, gradients summed over the processes during backward.

    gradcraft train --device cuda --nproc 2 ...      # cuda:0 and cuda:1 of this host, NCCL
    gradcraft train --device cpu --nproc 2 ...       # CPU processes joined by TCP sockets (what CI tests)
    gradcraft train --nnodes 2 --node_rank 0 --master_addr HOST --master_port 29500 --nproc 8 ...
    torchrun ... -m gradcraft.cli.main train ...      # RANK, WORLD_SIZE, ... from the environment

Every process builds the same model from the same seed and draws the same batches from the same
sampler; process r computes the gradients of its share of the step's micro-batches. The gradients
are summed over the processes in buckets, each sent as soon as backward has produced it
(buckets.py), so every process holds the same gradients, takes the same clipped AdamW step and
keeps the same weights without ever sending them; or, with ZeRO-1 (zero.py), each process keeps
the AdamW state of its own slice of the weights and the slices are gathered after the step.
Global rank 0 writes the logs and checkpoints. docs/distributed.md is the user's guide.

    topology.py     nodes, processes per node, the master; torchrun's variables
    rendezvous.py   how the processes find each other (TCP at the master, with a timeout)
    tcp.py          the CPU process group (sockets)
    spawn.py        starting a node's processes; join_group
    watch.py        a GPU job's processes notice one that dies (NCCL would wait for it forever)
    buckets.py      gradient buckets reduced while backward runs
    zero.py         ZeRO-1: the optimizer state sharded over the processes
    c10d.py         torch.distributed's names (init_process_group, all_reduce, broadcast, ...)
"""

from gradcraft.distributed.spawn import finished, join_group, launch
from gradcraft.distributed.tcp import TCPGroup
from gradcraft.distributed.topology import Topology
from gradcraft.ops.collective import all_reduce as _sum_in_place

# torch.distributed's names (c10d.py): `import gradcraft.distributed as dist` as `torch.distributed`
from gradcraft.distributed.c10d import (  # noqa: E402
    Backend,
    GroupMember,
    ReduceOp,
    all_gather,
    all_gather_into_tensor,
    all_gather_object,
    all_reduce,
    barrier,
    broadcast,
    broadcast_object_list,
    destroy_process_group,
    get_backend,
    get_node_local_rank,
    get_rank,
    get_world_size,
    init_process_group,
    is_available,
    is_gloo_available,
    is_initialized,
    is_nccl_available,
    is_torchelastic_launched,
    new_group,
    reduce,
)


def all_reduce_tensors(group, tensors) -> None:
    """Sum tensors over the group's processes, in place (their memory must be contiguous)."""
    _sum_in_place(group, tensors)


__all__ = [
    "Backend",
    "GroupMember",
    "ReduceOp",
    "TCPGroup",
    "Topology",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_reduce",
    "all_reduce_tensors",
    "barrier",
    "broadcast",
    "broadcast_object_list",
    "destroy_process_group",
    "finished",
    "get_backend",
    "get_node_local_rank",
    "get_rank",
    "get_world_size",
    "init_process_group",
    "is_available",
    "is_gloo_available",
    "is_initialized",
    "is_nccl_available",
    "is_torchelastic_launched",
    "join_group",
    "launch",
    "new_group",
    "reduce",
]
