"""Datasets, as `torch.utils.data`'s: a map-style Dataset answers `dataset[i]` and `len(dataset)`, an
IterableDataset is iterated; TensorDataset, ConcatDataset, ChainDataset, StackDataset and Subset
combine them, and `random_split` cuts one into random non-overlapping parts."""

from __future__ import annotations

import bisect
import itertools
import math
import warnings

from gradcraft.errors import ValueError_
from gradcraft.ops.generator import default_generator


class Dataset:
    """A map-style dataset: subclasses define `__getitem__` (and usually `__len__`)."""

    def __getitem__(self, index):
        raise NotImplementedError(f"Subclasses of Dataset should implement __getitem__ ({type(self).__name__})")

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])

    def __class_getitem__(cls, item):  # `Dataset[tuple[Tensor, int]]` in annotated code, as torch's Generic
        return cls


class IterableDataset(Dataset):
    """A dataset read as a stream: subclasses define `__iter__`. With worker processes each worker
    iterates its own copy; `get_worker_info()` tells it which part to yield."""

    def __iter__(self):
        raise NotImplementedError(f"Subclasses of IterableDataset should implement __iter__ ({type(self).__name__})")

    def __add__(self, other: Dataset) -> ChainDataset:
        return ChainDataset([self, other])


class TensorDataset(Dataset):
    """Sample i is `tuple(t[i] for t in tensors)`; every tensor has the same first dimension."""

    def __init__(self, *tensors) -> None:
        if not tensors or any(t.size(0) != tensors[0].size(0) for t in tensors):
            raise ValueError_("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].size(0)


class StackDataset(Dataset):
    """Samples of several datasets of one length side by side: positional (a tuple per sample) or
    by keyword (a dict per sample)."""

    def __init__(self, *args, **kwargs) -> None:
        if args and kwargs:
            raise ValueError_(
                "Supported either ``tuple``- (via ``args``) or``dict``- (via ``kwargs``) like input/output"
            )
        self.datasets = args or kwargs
        lengths = {len(d) for d in (args or kwargs.values())}
        if len(lengths) != 1:
            raise ValueError_("Size mismatch between datasets")
        self._length = lengths.pop()

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {key: dataset[index] for key, dataset in self.datasets.items()}
        return tuple(dataset[index] for dataset in self.datasets)

    def __len__(self) -> int:
        return self._length


class ConcatDataset(Dataset):
    """The samples of several map-style datasets one after another."""

    def __init__(self, datasets) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise AssertionError("datasets should not be an empty iterable")
        if any(isinstance(d, IterableDataset) for d in self.datasets):
            raise AssertionError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, index):
        if index < 0:
            if -index > len(self):
                raise ValueError_("absolute value of index should not exceed dataset length")
            index += len(self)
        which = bisect.bisect_right(self.cumulative_sizes, index)
        if which == len(self.datasets):
            raise IndexError(f"index {index} is out of range for a ConcatDataset of length {len(self)}")
        offset = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][index - offset]


class ChainDataset(IterableDataset):
    """The streams of several iterable datasets one after another."""

    def __init__(self, datasets) -> None:
        self.datasets = datasets

    def __iter__(self):
        for dataset in self.datasets:
            if not isinstance(dataset, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")
            yield from dataset

    def __len__(self) -> int:
        return sum(len(d) for d in self.datasets)


class Subset(Dataset):
    """The samples of `dataset` at `indices`, in that order."""

    def __init__(self, dataset, indices) -> None:
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, index):
        if isinstance(index, list):
            return self.dataset[[self.indices[i] for i in index]]
        return self.dataset[self.indices[index]]

    def __getitems__(self, indices: list) -> list:
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.dataset.__getitems__([self.indices[i] for i in indices])
        return [self.dataset[self.indices[i]] for i in indices]

    def __len__(self) -> int:
        return len(self.indices)


def random_split(dataset, lengths, generator=default_generator) -> list:
    """Split `dataset` into non-overlapping Subsets of the given lengths, or fractions summing to 1
    (each part floor(fraction * n), the remainder dealt one by one from the first part on), in an
    order drawn by `randperm(n, generator=generator)`."""
    from gradcraft.ops.creation import randperm

    lengths = list(lengths)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        for i, fraction in enumerate(lengths):
            if not 0 <= fraction <= 1:
                raise ValueError_(f"Fraction at index {i} is not between 0 and 1")
        counts = [math.floor(len(dataset) * fraction) for fraction in lengths]
        for i in range(len(dataset) - sum(counts)):
            counts[i % len(counts)] += 1
        for i, count in enumerate(counts):
            if count == 0:
                warnings.warn(
                    f"Length of split at index {i} is 0. This might result in an empty dataset.", stacklevel=2
                )
        lengths = counts
    if sum(lengths) != len(dataset):
        raise ValueError_("Sum of input lengths does not equal the length of the input dataset!")
    order = randperm(sum(lengths), generator=generator).tolist()
    ends = list(itertools.accumulate(lengths))
    return [Subset(dataset, order[end - length : end]) for end, length in zip(ends, lengths)]
