"""The training samplers (data/sampler.py): what a SequentialEpochs epoch visits, and that both samplers
continue exactly after a state_dict round trip, in the middle of an epoch and across its end."""

import json

import numpy as np
import pytest

from gradcraft.data.sampler import SAMPLERS, RandomWindows, SequentialEpochs

SEQ, BATCH = 5, 3


def corpus(n=103):
    return np.arange(n, dtype=np.uint16)  # token i at position i: a window's start is its first token


def starts_of(x):
    return [int(row[0]) for row in x]


def test_sequential_epochs_visit_every_window_once_per_epoch():
    tokens = corpus()
    n_windows = (len(tokens) - 1) // SEQ  # 20 non-overlapping windows of 5 (+1 target token)
    sampler = SequentialEpochs(tokens, SEQ, BATCH, seed=3)
    drawn = []
    for _ in range(2 * n_windows // BATCH + 2):  # a little more than two epochs
        x, y = sampler.next_batch()
        assert x.shape == y.shape == (BATCH, SEQ) and x.dtype == y.dtype == np.int64
        np.testing.assert_array_equal(y, x + 1)  # targets are the next tokens
        drawn += starts_of(x)
    every = list(range(0, n_windows * SEQ, SEQ))
    first, second = drawn[:n_windows], drawn[n_windows : 2 * n_windows]
    assert sorted(first) == every and sorted(second) == every  # each window once per epoch
    assert first != every and first != second  # shuffled, and reshuffled per epoch
    assert sampler.epoch == 2


def test_sequential_epochs_depend_on_the_seed_only():
    a = [starts_of(SequentialEpochs(corpus(), SEQ, BATCH, seed=1).next_batch()[0]) for _ in range(2)]
    b = starts_of(SequentialEpochs(corpus(), SEQ, BATCH, seed=2).next_batch()[0])
    assert a[0] == a[1] and a[0] != b


@pytest.mark.parametrize("kind", sorted(SAMPLERS))
@pytest.mark.parametrize("stop_after", [2, 6, 7])  # mid-epoch, and either side of the end of epoch 1 (20 windows)
def test_state_dict_resumes_exactly(kind, stop_after):
    """A sampler rebuilt from the saved state (through JSON, as checkpoints store it) continues with
    the batches the uninterrupted one draws."""
    straight = SAMPLERS[kind](corpus(), SEQ, BATCH, seed=5)
    expected = [straight.next_batch()[0] for _ in range(12)]
    first = SAMPLERS[kind](corpus(), SEQ, BATCH, seed=5)
    for _ in range(stop_after):
        first.next_batch()
    state = json.loads(json.dumps(first.state_dict()))
    assert state["kind"] == kind
    resumed = SAMPLERS[kind](corpus(), SEQ, BATCH, seed=5)
    resumed.next_batch()  # a fresh sampler that has already moved: the state must replace its position
    resumed.load_state_dict(state)
    for i in range(stop_after, 12):
        np.testing.assert_array_equal(resumed.next_batch()[0], expected[i], err_msg=f"{kind} batch {i}")


def test_random_windows_cover_the_corpus():
    sampler = RandomWindows(corpus(), SEQ, BATCH, seed=0)
    seen = set()
    for _ in range(200):
        x, y = sampler.next_batch()
        np.testing.assert_array_equal(y, x + 1)
        seen.update(starts_of(x))
    assert min(seen) == 0 and max(seen) == len(corpus()) - SEQ - 2  # every start a window can have
