"""DistributedSampler, as `torch.utils.data.distributed`'s: each of `num_replicas` processes reads its
own share of the dataset's indices (every `num_replicas`-th from its `rank`), padded by repeating
indices (or cut, with `drop_last`) so that every share has the same length. With `shuffle`, the
order is a permutation seeded by `seed + epoch` (call `set_epoch` each epoch), the same in every
process, so the shares never overlap."""

from __future__ import annotations

import math
import sys

from gradcraft.errors import RuntimeError_, ValueError_
from gradcraft.utils.data.sampler import Sampler


def _process_group(name: str) -> int:
    """The default process group's world size or rank, through `gradcraft.distributed`'s PyTorch-named
    functions (`is_initialized`, `get_world_size`, `get_rank`). Looked up, not imported: a process that
    never loaded gradcraft.distributed has no process group."""
    dist = sys.modules.get("gradcraft.distributed")
    initialized = getattr(dist, "is_initialized", None)
    if initialized is None or not initialized():
        raise RuntimeError_(
            "Default process group has not been initialized, please make sure to call init_process_group "
            "(or pass num_replicas= and rank= to DistributedSampler)."
        )
    return int(getattr(dist, name)())


class DistributedSampler(Sampler):
    def __init__(
        self, dataset, num_replicas: int | None = None, rank: int | None = None, shuffle: bool = True, seed: int = 0,
        drop_last: bool = False,
    ) -> None:  # fmt: skip
        num_replicas = _process_group("get_world_size") if num_replicas is None else num_replicas
        rank = _process_group("get_rank") if rank is None else rank
        if rank >= num_replicas or rank < 0:
            raise ValueError_(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        n = len(dataset)
        if drop_last and n % num_replicas:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)  # the tail that would need padding, dropped
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:
            from gradcraft.ops.creation import randperm
            from gradcraft.ops.generator import Generator

            indices = randperm(n, generator=Generator().manual_seed(self.seed + self.epoch)).tolist()
        else:
            indices = list(range(n))
        if self.drop_last:
            indices = indices[: self.total_size]
        else:
            padding = self.total_size - len(indices)
            indices += (indices * math.ceil(padding / max(len(indices), 1)))[:padding]
        assert len(indices) == self.total_size
        return iter(indices[self.rank : self.total_size : self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """The epoch seeds the shuffle (with `seed`): call it before each epoch's iteration, or every
        epoch reads the same order."""
        self.epoch = epoch
