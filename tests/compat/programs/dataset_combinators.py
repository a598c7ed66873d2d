"""Datasets built from datasets: ConcatDataset (also with +), Subset, StackDataset, ChainDataset."""
import torch
from torch.utils.data import ChainDataset, ConcatDataset, DataLoader, Dataset, IterableDataset, StackDataset, Subset


class Squares(Dataset):
    def __init__(self, n, offset=0):
        self.n, self.offset = n, offset

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i >= self.n:
            raise IndexError(i)
        v = i + self.offset
        return torch.tensor([float(v)]), v * v


class Count(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(range(self.n))


both = ConcatDataset([Squares(3), Squares(4, offset=10)])
print(len(both), both.cumulative_sizes, both[4][1], both[-1][1])
plus = Squares(2) + Squares(2, offset=5)
print(len(plus), [plus[i][1] for i in range(len(plus))])
for x, y in DataLoader(both, batch_size=3):
    print(x.squeeze(1).tolist(), y.tolist())

part = Subset(Squares(10), [9, 0, 4])
print(len(part), [part[i][1] for i in range(3)])
stacked = StackDataset(Squares(3), Squares(3, offset=1))
print(stacked[2][0][1], stacked[2][1][1])
named = StackDataset(a=Squares(3), b=Squares(3, offset=2))
batch = next(iter(DataLoader(named, batch_size=3)))
print(sorted(batch), batch["a"][1].tolist(), batch["b"][0].squeeze(1).tolist())
chained = ChainDataset([Count(2), Count(3)])
print(list(chained), [b.tolist() for b in DataLoader(Count(2) + Count(3), batch_size=2)])
