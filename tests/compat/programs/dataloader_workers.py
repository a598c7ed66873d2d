"""A DataLoader with worker processes: a map-style dataset read by two workers (batches still come
in order), worker_init_fn, and an IterableDataset that splits its stream by get_worker_info()."""
import math

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info


class Windows(Dataset):
    """Sliding windows over a sequence: input = 4 values, target = the next one."""

    def __init__(self, series):
        self.series = series

    def __len__(self):
        return len(self.series) - 4

    def __getitem__(self, i):
        return torch.tensor(self.series[i:i + 4]), torch.tensor(self.series[i + 4])


series = np.sin(np.linspace(0, 3, 24)).astype(np.float32)


def note_worker(worker_id):
    info = get_worker_info()
    assert info.id == worker_id and info.num_workers == 2


loader = DataLoader(Windows(series), batch_size=5, num_workers=2, worker_init_fn=note_worker, pin_memory=True)
print(len(loader), get_worker_info() is None)
for x, y in loader:
    print(tuple(x.shape), f"{x.mean():.5f}", f"{y.sum():.5f}")


class RangeStream(IterableDataset):
    def __init__(self, start, end):
        self.start, self.end = start, end

    def __iter__(self):
        info = get_worker_info()
        if info is None:
            lo, hi = self.start, self.end
        else:  # split the range into one contiguous piece per worker
            per_worker = int(math.ceil((self.end - self.start) / float(info.num_workers)))
            lo = self.start + info.id * per_worker
            hi = min(lo + per_worker, self.end)
        return iter(range(lo, hi))


stream = RangeStream(3, 11)
print(list(DataLoader(stream, num_workers=0)))
print([b.tolist() for b in DataLoader(stream, batch_size=3, num_workers=2)])
print(sorted(int(v) for v in DataLoader(stream, num_workers=2)))
