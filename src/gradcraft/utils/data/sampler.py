"""Samplers, as `torch.utils.data`'s: iterables of dataset indices (Python ints) that a DataLoader
reads, and BatchSampler, which groups them into lists.

The random ones draw through gradcraft's random ops (`randperm`, `randint`, `multinomial`) from their
`generator=`; without one they make a Generator seeded from the global generator each time they are
iterated, as PyTorch does, so `gradcraft.manual_seed(s)` fixes every shuffle after it.
"""

from __future__ import annotations

from gradcraft.errors import TypeError_, ValueError_


class Sampler:
    """Subclasses define `__iter__` (the indices) and usually `__len__`."""

    def __init__(self, data_source=None) -> None:
        pass

    def __iter__(self):
        raise NotImplementedError

    def __class_getitem__(cls, item):  # `Sampler[int]`, as torch's Generic
        return cls


class SequentialSampler(Sampler):
    """0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source) -> None:
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


def _fresh_generator(generator):
    """`generator`, or a new Generator seeded from the global one (one draw of it)."""
    from gradcraft.ops.creation import next_seed
    from gradcraft.ops.generator import Generator

    return generator if generator is not None else Generator().manual_seed(next_seed())


def _check_count(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError_(f"{name} should be a positive integer value, but got {name}={value}")


class RandomSampler(Sampler):
    """A random order of the indices (a permutation per pass over the data, `num_samples` of them in
    all), or `num_samples` indices drawn with replacement."""

    def __init__(self, data_source, replacement: bool = False, num_samples: int | None = None, generator=None):
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(replacement, bool):
            raise TypeError_(f"replacement should be a boolean value, but got replacement={replacement}")
        _check_count("num_samples", self.num_samples)

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        from gradcraft.ops.creation import randint, randperm

        n = len(self.data_source)
        generator = _fresh_generator(self.generator)
        if self.replacement:
            for start in range(0, self.num_samples, 32):  # in blocks of 32, as PyTorch draws them
                count = min(32, self.num_samples - start)
                yield from randint(high=n, size=(count,), generator=generator).tolist()
            return
        for _ in range(self.num_samples // n):
            yield from randperm(n, generator=generator).tolist()
        yield from randperm(n, generator=generator).tolist()[: self.num_samples % n]

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a random order."""

    def __init__(self, indices, generator=None) -> None:
        self.indices = indices
        self.generator = generator

    def __iter__(self):
        from gradcraft.ops.creation import randperm

        for i in randperm(len(self.indices), generator=self.generator).tolist():
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """`num_samples` indices drawn with probabilities proportional to `weights` (with replacement by
    default; without, no index repeats)."""

    def __init__(self, weights, num_samples: int, replacement: bool = True, generator=None) -> None:
        import numpy as np

        from gradcraft import dtypes
        from gradcraft.tensor import Tensor

        _check_count("num_samples", num_samples)
        if not isinstance(replacement, bool):
            raise ValueError_(f"replacement should be a boolean value, but got replacement={replacement}")
        values = weights.detach().numpy() if isinstance(weights, Tensor) else np.asarray(weights)
        if values.ndim != 1:
            raise ValueError_(f"weights should be a 1d sequence but given weights have shape {tuple(values.shape)}")
        self.weights = Tensor(values.astype(np.float64), dtype=dtypes.float64)
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator

    def __iter__(self):
        from gradcraft.ops.random import multinomial

        yield from multinomial(self.weights, self.num_samples, self.replacement, generator=self.generator).tolist()

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Lists of `batch_size` indices from `sampler`; the last one shorter unless `drop_last`."""

    def __init__(self, sampler, batch_size: int, drop_last: bool) -> None:
        _check_count("batch_size", batch_size)
        if not isinstance(drop_last, bool):
            raise ValueError_(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self):
        batch = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size
