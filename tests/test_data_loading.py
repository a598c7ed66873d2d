"""gradcraft.utils.data (torch.utils.data): datasets, collation, samplers, DistributedSampler and the
DataLoader, in this process and with worker processes. What is deterministic (orders without
shuffling, collated structures and dtypes, split lengths, errors) is compared with PyTorch; shuffles
are checked as permutations, reproducible from their generator."""

import collections

import numpy as np
import pytest

import gradcraft as gc
import gradcraft.utils.data
from gradcraft.utils.data import (
    BatchSampler,
    ConcatDataset,
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    StackDataset,
    Subset,
    SubsetRandomSampler,
    TensorDataset,
    WeightedRandomSampler,
    default_collate,
    default_convert,
    get_worker_info,
    random_split,
)

torch = pytest.importorskip("torch")
tud = torch.utils.data
Point = collections.namedtuple("Point", "x y")


def _plain(value):
    """A batch as nested Python values, with each tensor's dtype name, comparable across libraries."""
    if isinstance(value, (gc.Tensor, torch.Tensor)):
        return (str(value.dtype).removeprefix("torch."), value.tolist())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_plain(v) for v in value])
    return value


def test_the_module_is_torch_utils_data():
    assert gc.utils.data.DataLoader is DataLoader is gradcraft.utils.data.dataloader.DataLoader
    from gradcraft.utils.data.dataloader import default_collate as again

    assert again is default_collate


@pytest.mark.parametrize(
    "batch",
    [
        [(np.arange(3, dtype=np.float32), 1), (np.ones(3, dtype=np.float32), 2)],
        [{"x": 1.5, "y": True, "name": "a"}, {"x": 2.0, "y": False, "name": "b"}],
        [Point(np.float64(1.0), [1, 2]), Point(np.float64(2.5), [3, 4])],
        [[np.int32(1), np.array([[1, 2]], dtype=np.int64)], [np.int32(2), np.array([[3, 4]], dtype=np.int64)]],
    ],
)
def test_default_collate_matches_torch(batch):
    assert _plain(default_collate(batch)) == _plain(tud.default_collate(batch))


def test_default_collate_stacks_tensors_and_refuses_what_torch_refuses():
    ours = default_collate([gc.tensor([1.0, 2.0]), gc.tensor([3.0, 4.0])])
    assert ours.shape == (2, 2) and ours.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    for bad, error in (([object(), object()], TypeError), ([[1, 2], [1]], RuntimeError)):
        for collate in (default_collate, tud.default_collate):
            with pytest.raises(error):
                collate(bad)
    sample = {"a": np.arange(2), "b": (np.float64(1.0), "s")}
    assert _plain(default_convert(sample)) == _plain(tud.default_convert(sample))


def _tensors(lib):
    return lib.arange(20, dtype=lib.float32).reshape(10, 2), lib.arange(10)


@pytest.mark.parametrize("batch_size, drop_last", [(4, False), (4, True), (1, False), (None, False), (10, False)])
def test_dataloader_batches_match_torch_without_shuffle(batch_size, drop_last):
    ours = DataLoader(TensorDataset(*_tensors(gc)), batch_size=batch_size, drop_last=drop_last)
    theirs = tud.DataLoader(tud.TensorDataset(*_tensors(torch)), batch_size=batch_size, drop_last=drop_last)
    assert len(ours) == len(theirs)
    assert [_plain(b) for b in ours] == [_plain(b) for b in theirs]


def test_shuffled_epochs_are_permutations_reproducible_from_the_generator():
    data = TensorDataset(gc.arange(50))

    def epoch(seed):
        loader = DataLoader(data, batch_size=8, shuffle=True, generator=gc.Generator().manual_seed(seed))
        return [i for (b,) in loader for i in b.tolist()]

    first = epoch(0)
    assert sorted(first) == list(range(50)) and first != list(range(50))
    assert epoch(0) == first and epoch(1) != first
    gc.manual_seed(3)
    a = [b[0].tolist() for b in DataLoader(data, batch_size=50, shuffle=True)]
    gc.manual_seed(3)
    assert a == [b[0].tolist() for b in DataLoader(data, batch_size=50, shuffle=True)]


class Squares(Dataset):
    def __len__(self):
        return 7

    def __getitem__(self, i):
        if i >= 7:
            raise IndexError(i)
        return {"x": np.full(2, i, dtype=np.float32), "y": i * i}


def test_custom_dataset_collate_fn_and_samplers():
    loader = DataLoader(Squares(), batch_size=3, collate_fn=lambda samples: [s["y"] for s in samples])
    assert list(loader) == [[0, 1, 4], [9, 16, 25], [36]]
    batches = DataLoader(Squares(), batch_sampler=BatchSampler(SequentialSampler(range(7)), 2, True))
    assert [b["y"].tolist() for b in batches] == [[0, 1], [4, 9], [16, 25]]
    picked = DataLoader(Squares(), sampler=[6, 0, 3], batch_size=2)
    assert [b["y"].tolist() for b in picked] == [[36, 0], [9]]


def test_samplers():
    data = range(10)
    assert list(SequentialSampler(data)) == list(range(10))
    assert sorted(RandomSampler(data)) == list(range(10))
    g = gc.Generator().manual_seed(5)
    long = list(RandomSampler(data, num_samples=25, generator=g))
    assert len(long) == 25 and sorted(long[:10]) == list(range(10)) and sorted(long[10:20]) == list(range(10))
    drawn = list(RandomSampler(data, replacement=True, num_samples=100, generator=g))
    assert len(drawn) == 100 and set(drawn) <= set(range(10)) and len(set(drawn)) > 5
    assert sorted(SubsetRandomSampler([3, 5, 7], generator=g)) == [3, 5, 7]
    assert list(BatchSampler(data, 4, False)) == list(tud.BatchSampler(data, 4, False))
    assert len(BatchSampler(data, 4, True)) == len(tud.BatchSampler(data, 4, True)) == 2
    weighted = list(WeightedRandomSampler([0.0, 1.0, 3.0], 4000, generator=g))
    assert 0 not in weighted and abs(weighted.count(2) / 4000 - 0.75) < 0.03
    unique = list(WeightedRandomSampler([1.0, 1.0, 1.0, 1.0], 4, replacement=False, generator=g))
    assert sorted(unique) == [0, 1, 2, 3]
    for make in (
        lambda m: m.RandomSampler(data, num_samples=0),
        lambda m: m.RandomSampler(data, replacement=1),
        lambda m: m.BatchSampler(data, 0, False),
        lambda m: m.BatchSampler(data, 2, "no"),
        lambda m: m.WeightedRandomSampler([[1.0]], 2),
    ):
        with pytest.raises((ValueError, TypeError)) as ours:
            make(gradcraft.utils.data)
        with pytest.raises((ValueError, TypeError)) as theirs:
            make(tud)
        assert issubclass(ours.type, theirs.type)


@pytest.mark.parametrize("n, replicas, drop_last", [(10, 3, False), (10, 3, True), (2, 4, False), (12, 4, True)])
def test_distributed_sampler_matches_torch_without_shuffle(n, replicas, drop_last):
    for rank in range(replicas):
        ours = DistributedSampler(range(n), replicas, rank, shuffle=False, drop_last=drop_last)
        theirs = tud.DistributedSampler(range(n), replicas, rank, shuffle=False, drop_last=drop_last)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)


def test_distributed_sampler_shuffles_by_epoch_into_disjoint_shares():
    shares = [DistributedSampler(range(12), 3, rank, seed=1) for rank in range(3)]
    first = [list(s) for s in shares]
    assert sorted(sum(first, [])) == list(range(12))
    assert [list(s) for s in shares] == first  # the same epoch reads the same order
    for s in shares:
        s.set_epoch(1)
    second = [list(s) for s in shares]
    assert sorted(sum(second, [])) == list(range(12)) and second != first
    for bad_rank in (3, -1):
        with pytest.raises(ValueError):
            DistributedSampler(range(4), 3, bad_rank)
    with pytest.raises(RuntimeError):
        DistributedSampler(range(4))  # no process group


def test_random_split_and_dataset_combinators():
    for lengths in ([3, 7], [0.3, 0.3, 0.4], [0.5, 0.5], [0.34, 0.33, 0.33]):
        ours = random_split(range(10), lengths, generator=gc.Generator().manual_seed(0))
        theirs = tud.random_split(range(10), lengths, generator=torch.Generator().manual_seed(0))
        assert [len(p) for p in ours] == [len(p) for p in theirs]
        assert sorted(i for part in ours for i in part) == list(range(10))
    again = random_split(range(10), [3, 7], generator=gc.Generator().manual_seed(0))
    assert list(again[0]) == list(random_split(range(10), [3, 7], generator=gc.Generator().manual_seed(0))[0])
    for lib in (gradcraft.utils.data, tud):
        with pytest.raises(ValueError):
            lib.random_split(range(10), [3, 3])
    both = ConcatDataset([range(3), range(10, 14)])
    assert [both[i] for i in range(len(both))] == [0, 1, 2, 10, 11, 12, 13] and both[-1] == 13
    assert list(Subset(range(10, 20), [4, 1])) == [14, 11]
    stacked = StackDataset(a=range(3), b=range(3, 6))
    assert stacked[1] == {"a": 1, "b": 4} and len(stacked) == 3
    with pytest.raises(ValueError):
        TensorDataset(gc.zeros(3), gc.zeros(4))


def test_dataloader_argument_errors_as_torch():
    data = range(4)
    cases = [
        {"num_workers": -1},
        {"sampler": [0, 1], "shuffle": True},
        {"batch_sampler": [[0]], "batch_size": 2},
        {"batch_size": None, "drop_last": True},
        {"prefetch_factor": 2},
        {"persistent_workers": True},
    ]
    for kwargs in cases:
        for lib in (gradcraft.utils.data, tud):
            with pytest.raises(ValueError):
                lib.DataLoader(data, **kwargs)
    loader = DataLoader(data, batch_size=2)
    with pytest.raises(ValueError):
        loader.batch_size = 3


class _StreamBody:
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = get_worker_info() if isinstance(self, IterableDataset) else tud.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, self.n, step))

    def __len__(self):
        return self.n


class Stream(_StreamBody, IterableDataset):
    pass


class TorchStream(_StreamBody, tud.IterableDataset):
    pass


def test_iterable_dataset_in_process_matches_torch():
    ours = [b.tolist() for b in DataLoader(Stream(10), batch_size=4)]
    theirs = [b.tolist() for b in tud.DataLoader(TorchStream(10), batch_size=4)]
    assert ours == theirs and len(DataLoader(Stream(10), batch_size=4, drop_last=True)) == 2
    with pytest.raises(ValueError):
        DataLoader(Stream(3), shuffle=True)


def _record_worker(worker_id):
    info = get_worker_info()
    assert info.id == worker_id and info.num_workers == 2


class Seeds(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        info = get_worker_info()
        return gc.tensor([i, info.id, info.seed % 1000, np.random.randint(0, 1 << 30)])


def test_workers_give_the_same_batches_in_order():
    data = TensorDataset(*_tensors(gc))
    plain = [_plain(b) for b in DataLoader(data, batch_size=3)]
    loader = DataLoader(data, batch_size=3, num_workers=2, pin_memory=True, worker_init_fn=_record_worker, timeout=30)
    assert [_plain(b) for b in loader] == plain and len(loader) == 4
    assert get_worker_info() is None
    rows = next(iter(DataLoader(Seeds(), batch_size=4, num_workers=2, prefetch_factor=1, sampler=[0, 2, 1, 3])))
    rows = rows.tolist()
    assert [r[0] for r in rows] == [0, 2, 1, 3]
    by_worker = {r[1]: (r[2], r[3]) for r in rows}  # the whole batch comes from worker 0
    assert list(by_worker) == [0]
    workers = [b.tolist()[0] for b in DataLoader(Seeds(), batch_size=1, num_workers=2)]
    assert [w[1] for w in workers] == [0, 1, 0, 1]  # batches handed out in turn
    assert workers[0][2] != workers[1][2]  # each worker its own seed
    assert workers[0][3] != workers[1][3]  # and its own NumPy stream


def test_workers_split_an_iterable_dataset_and_persist():
    batches = [b.tolist() for b in DataLoader(Stream(11), batch_size=3, num_workers=2)]
    assert sorted(i for b in batches for i in b) == list(range(11))
    assert batches[0] == [0, 2, 4] and batches[1] == [1, 3, 5]  # the workers take turns
    loader = DataLoader(Stream(6), batch_size=2, num_workers=2, persistent_workers=True)
    first = [b.tolist() for b in loader]
    assert [b.tolist() for b in loader] == first  # the same workers, a new epoch


class Broken(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        raise KeyError(f"no sample {i}")


def test_a_worker_error_is_raised_in_the_main_process():
    with pytest.raises(KeyError, match="Caught KeyError in DataLoader worker process"):
        list(DataLoader(Broken(), batch_size=2, num_workers=2))


def test_annotated_subclasses_as_with_torch_generics():
    class Pairs(Dataset[tuple]):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return gc.tensor([i]), i

    class Backwards(gradcraft.utils.data.Sampler[int]):
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            return iter(range(self.n - 1, -1, -1))

        def __len__(self):
            return self.n

    assert [y.tolist() for _, y in DataLoader(Pairs(), sampler=Backwards(2))] == [[1], [0]]
