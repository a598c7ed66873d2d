"""The samplers a DataLoader can take: sequential, random (a permutation), subset, weighted, batched
and distributed over replicas."""
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)
from torch.utils.data.distributed import DistributedSampler

data = list(range(10))
print(list(SequentialSampler(data)))
print(list(BatchSampler(SequentialSampler(data), batch_size=3, drop_last=False)))
print(list(BatchSampler(SequentialSampler(data), batch_size=3, drop_last=True)))
print(len(BatchSampler(range(10), 4, False)), len(BatchSampler(range(10), 4, True)))

g = torch.Generator()
g.manual_seed(0)
shuffled = list(RandomSampler(data, generator=g))
print(sorted(shuffled) == data, len(shuffled))
print(len(RandomSampler(data, replacement=True, num_samples=25)))
print(sorted(SubsetRandomSampler([2, 4, 6, 8])))
weighted = list(WeightedRandomSampler([0.0, 0.0, 1.0, 0.0], num_samples=6))
print(weighted)
unique = sorted(WeightedRandomSampler([1.0, 2.0, 3.0], num_samples=3, replacement=False))
print(unique)

for rank in range(3):
    sampler = DistributedSampler(data, num_replicas=3, rank=rank, shuffle=False)
    print(rank, list(sampler), len(sampler))
for rank in range(4):
    print(rank, list(DistributedSampler(data, num_replicas=4, rank=rank, shuffle=False, drop_last=True)))

shares = []
for rank in range(2):
    sampler = DistributedSampler(data, num_replicas=2, rank=rank, shuffle=True, seed=3)
    sampler.set_epoch(5)
    shares.append(list(sampler))
print(sorted(shares[0] + shares[1]) == data, len(shares[0]))

loader = DataLoader(data, sampler=SubsetRandomSampler([1, 3, 5, 7, 9]), batch_size=2)
print(len(loader), sorted(torch.cat(list(loader)).tolist()))
