"""gradcraft.Generator and the sampling ops (multinomial, normal, bernoulli, poisson, randint's
overloads). gradcraft's generator is not PyTorch's, so the numbers are checked statistically or
against exact properties (ranges, no repeats, shapes, dtypes, reproducibility), and shapes, dtypes
and errors against the PyTorch oracle."""

import numpy as np
import pytest

import gradcraft as gc

torch = pytest.importorskip("torch")


def _seeded(seed):
    return gc.Generator().manual_seed(seed)


# ------------------------------------------------------------------ Generator


def test_generator_seeds_every_random_op_reproducibly():
    draws = [
        lambda g: gc.rand(4, generator=g),
        lambda g: gc.randn(2, 3, generator=g),
        lambda g: gc.randint(0, 100, (5,), generator=g),
        lambda g: gc.randperm(9, generator=g),
        lambda g: gc.multinomial(gc.tensor([0.2, 0.3, 0.5]), 8, replacement=True, generator=g),
        lambda g: gc.normal(0.0, 1.0, (3,), generator=g),
        lambda g: gc.bernoulli(gc.full((6,), 0.5), generator=g),
        lambda g: gc.poisson(gc.full((4,), 3.0), generator=g),
    ]
    first = [draw(_seeded(7)).tolist() for draw in draws]
    assert first == [draw(_seeded(7)).tolist() for draw in draws]
    assert first[:2] != [draw(_seeded(8)).tolist() for draw in draws[:2]]


def test_generator_state_round_trip_and_seed_queries():
    g = gc.Generator(device="cpu")
    assert g.manual_seed(123) is g and g.initial_seed() == 123 and g.device == "cpu"
    state = g.get_state()
    assert state.dtype == gc.uint8
    a = gc.rand(5, generator=g).tolist()
    g.set_state(state)
    assert gc.rand(5, generator=g).tolist() == a
    new_seed = g.seed()
    assert g.initial_seed() == new_seed
    with pytest.raises(RuntimeError):
        g.set_state(gc.tensor([1, 2, 3], dtype=gc.uint8))
    with pytest.raises(TypeError):
        gc.rand(2, generator="seed")


def test_a_generator_leaves_the_global_stream_alone():
    assert gc.manual_seed(5) is gc.default_generator and gc.initial_seed() == 5
    expected = gc.rand(4).tolist()
    gc.manual_seed(5)
    gc.randn(10, generator=_seeded(1)).realize()
    assert gc.rand(4).tolist() == expected


# ------------------------------------------------------------------ randint


@pytest.mark.parametrize(
    "args, kwargs, low, high",
    [
        ((10, (3,)), {}, 0, 10),
        ((3, 10, (2, 2)), {}, 3, 10),
        ((10,), {"size": (4,)}, 0, 10),
        ((3, 10), {"size": (2, 3)}, 3, 10),
        ((), {"low": 2, "high": 5, "size": (6,)}, 2, 5),
        ((), {"high": 5, "size": [2, 1]}, 0, 5),
        ((0, 4, (3,)), {"dtype": "int32"}, 0, 4),
        ((0, 4, (3,)), {"dtype": "float32", "requires_grad": True}, 0, 4),
    ],
)
def test_randint_overloads_match_torch(args, kwargs, low, high):
    def call(lib):
        kw = dict(kwargs)
        if "dtype" in kw:
            kw["dtype"] = getattr(lib, kw["dtype"])
        return lib.randint(*args, **kw)

    ours, theirs = call(gc), call(torch)
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert ours.dtype.name == str(theirs.dtype).removeprefix("torch.")
    assert ours.requires_grad == theirs.requires_grad
    values = ours.numpy()
    assert values.min() >= low and values.max() < high


def test_randint_covers_its_range_and_refuses_what_torch_refuses():
    values = gc.randint(-3, 4, (4000,), generator=_seeded(0)).numpy()
    assert set(values.tolist()) == set(range(-3, 4))
    for lib in (gc, torch):
        with pytest.raises(RuntimeError):
            lib.randint(5, 5, (2,))
        with pytest.raises(TypeError):
            lib.randint(5)
        with pytest.raises(RuntimeError):
            lib.randint(0, 5, (2,), requires_grad=True)  # an integer tensor cannot require grad


# ------------------------------------------------------------------ multinomial


@pytest.mark.parametrize("compare_limit", [1 << 22, 0])  # every u against every sum; sorted together
def test_multinomial_with_replacement_follows_the_probabilities(compare_limit, monkeypatch):
    import gradcraft.ops.random as sampling

    monkeypatch.setattr(sampling, "_COMPARE_LIMIT", compare_limit)
    probs = gc.tensor([1.0, 0.0, 3.0, 6.0])  # unnormalised, one category impossible
    draws = gc.multinomial(probs, 20000, replacement=True, generator=_seeded(3))
    assert draws.dtype == gc.int64 and draws.shape == (20000,)
    counts = np.bincount(draws.numpy(), minlength=4) / 20000
    assert counts[1] == 0
    np.testing.assert_allclose(counts, [0.1, 0.0, 0.3, 0.6], atol=0.015)


def test_multinomial_with_many_samples_of_many_categories():
    weights = np.r_[np.zeros(10), np.ones(2990), [2990.0]]  # a WeightedRandomSampler over a dataset
    draws = gc.multinomial(gc.tensor(weights), 6000, replacement=True, generator=_seeded(8)).numpy()
    assert draws.min() >= 10 and abs((draws == 3000).mean() - 0.5) < 0.03
    assert len(np.unique(draws[draws < 3000])) > 1500


def test_multinomial_without_replacement_never_repeats_and_draws_first_by_probability():
    probs = gc.tensor([[0.5, 0.25, 0.125, 0.125]] * 3000)  # 3000 rows, one draw of 4 each
    draws = gc.multinomial(probs, 4, generator=_seeded(4)).numpy()
    assert draws.shape == (3000, 4)
    assert (np.sort(draws, axis=1) == np.arange(4)).all()  # a permutation of the categories per row
    first = np.bincount(draws[:, 0], minlength=4) / 3000
    np.testing.assert_allclose(first, [0.5, 0.25, 0.125, 0.125], atol=0.03)
    # P(second = 1) = sum over first != 1 of p_first * p_1 / (1 - p_first)
    second_is_1 = 0.5 * 0.25 / 0.5 + 2 * 0.125 * 0.25 / 0.875
    assert abs((draws[:, 1] == 1).mean() - second_is_1) < 0.03


def test_multinomial_shapes_method_and_default_like_torch():
    rows = [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
    for lib in (gc, torch):
        one = lib.multinomial(lib.tensor(rows[0]), 1)
        assert tuple(one.shape) == (1,) and one.tolist() == [1]
        two = lib.tensor(rows).multinomial(5, replacement=True)
        assert tuple(two.shape) == (2, 5) and two.tolist() == [[1] * 5, [0] * 5]
    assert sorted(gc.tensor([1.0, 1.0, 1.0]).multinomial(3).tolist()) == [0, 1, 2]


@pytest.mark.parametrize(
    "probs, n, replacement",
    [
        ([1.0, -1.0, 0.0], 1, False),
        ([0.0, 0.0], 1, True),
        ([1.0, 1.0], 3, False),
        ([1.0, float("nan")], 1, True),
        ([1.0, 2.0], 0, True),
        ([[[1.0]]], 1, True),
    ],
)
def test_multinomial_errors_as_torch(probs, n, replacement):
    messages = []
    for lib in (torch, gc):
        with pytest.raises(RuntimeError) as caught:
            lib.multinomial(lib.tensor(probs), n, replacement)
        messages.append(str(caught.value))
    assert messages[0].split("(")[0].strip() in messages[1]  # PyTorch's words, up to its first parenthesis
    with pytest.raises(RuntimeError, match="floating-point"):
        gc.multinomial(gc.tensor([1, 2]), 1)


# ------------------------------------------------------------------ normal, bernoulli, poisson


def test_normal_overloads_shapes_dtypes_and_statistics():
    cases = [
        lambda lib: lib.normal(lib.zeros(2, 3), 1.0),
        lambda lib: lib.normal(0.0, lib.ones(4)),
        lambda lib: lib.normal(lib.zeros(3, 1), lib.ones(1, 2)),
        lambda lib: lib.normal(mean=lib.zeros(2), std=lib.ones(2)),
        lambda lib: lib.normal(2, 3, (2, 5)),
        lambda lib: lib.normal(0.0, 1.0, size=(3,), dtype=lib.float64),
        lambda lib: lib.normal(lib.zeros(2, dtype=lib.float64), 1.0),
    ]
    for case in cases:
        ours, theirs = case(gc), case(torch)
        assert tuple(ours.shape) == tuple(theirs.shape)
        assert ours.dtype.name == str(theirs.dtype).removeprefix("torch.")
    x = gc.normal(gc.full((20000,), 2.0), gc.full((20000,), 0.5), generator=_seeded(5)).numpy()
    assert abs(x.mean() - 2.0) < 0.02 and abs(x.std() - 0.5) < 0.02
    for lib in (gc, torch):
        with pytest.raises(RuntimeError):
            lib.normal(0.0, -1.0, (2,))
        with pytest.raises(RuntimeError):
            lib.normal(lib.zeros(2), -1.0)


def test_normal_gradient_is_zero_as_torch():
    for lib in (gc, torch):
        mean = lib.zeros(3, requires_grad=True)
        y = lib.normal(mean, 1.0)
        assert y.requires_grad
        (y * 2).sum().backward()
        assert mean.grad.tolist() == [0.0, 0.0, 0.0]
    assert gc.normal(0.0, 1.0, (2,), requires_grad=True).requires_grad


def test_bernoulli_and_bernoulli_inplace():
    p = gc.tensor([0.0, 1.0, 0.0, 1.0])
    assert gc.bernoulli(p).tolist() == [0.0, 1.0, 0.0, 1.0]
    draws = gc.bernoulli(gc.full((20000,), 0.3), generator=_seeded(6)).numpy()
    assert set(np.unique(draws)) <= {0.0, 1.0} and abs(draws.mean() - 0.3) < 0.015
    for lib in (gc, torch):
        assert lib.bernoulli(lib.zeros(3, dtype=lib.float64)).dtype == lib.float64
        assert lib.bernoulli(lib.ones(3), 0.0).tolist() == [0.0, 0.0, 0.0]
        x = lib.zeros(4)
        assert x.bernoulli_(1.0) is x and x.tolist() == [1.0] * 4
        assert x.bernoulli_(lib.tensor([1.0, 0.0, 1.0, 0.0])).tolist() == [1.0, 0.0, 1.0, 0.0]
        with pytest.raises(RuntimeError):
            lib.bernoulli(lib.tensor([1.5]))
    assert abs(gc.zeros(20000).bernoulli_(0.25, generator=_seeded(2)).mean().item() - 0.25) < 0.015


def test_poisson_counts():
    rates = gc.tensor([0.0, 1.0, 20.0]).reshape(3, 1).expand(3, 5000)
    counts = gc.poisson(rates, generator=_seeded(9)).numpy()
    assert counts.dtype == np.float32 and (counts == np.round(counts)).all()
    assert (counts[0] == 0).all()
    np.testing.assert_allclose(counts.mean(axis=1), [0.0, 1.0, 20.0], atol=0.2)
    with pytest.raises(RuntimeError):
        gc.poisson(gc.tensor([-1.0]))


# ------------------------------------------------------------------ requires_grad= on the factories


@pytest.mark.parametrize(
    "make",
    [
        lambda lib: lib.eye(3, requires_grad=True),
        lambda lib: lib.zeros(2, 3, requires_grad=True),
        lambda lib: lib.ones(2, requires_grad=True),
        lambda lib: lib.full((2,), 1.5, requires_grad=True),
        lambda lib: lib.arange(0.0, 3.0, requires_grad=True),
        lambda lib: lib.linspace(0, 1, 5, requires_grad=True),
        lambda lib: lib.logspace(0, 1, 3, requires_grad=True),
        lambda lib: lib.rand(2, requires_grad=True),
        lambda lib: lib.randn(2, 2, requires_grad=True),
        lambda lib: lib.randn(size=(2, 2), requires_grad=True),
        lambda lib: lib.randperm(4, dtype=lib.float32, requires_grad=True),
        lambda lib: lib.tensor([1.0, 2.0], requires_grad=True),
        lambda lib: lib.empty(3, requires_grad=True),
    ],
)
def test_factories_take_requires_grad(make):
    ours, theirs = make(gc), make(torch)
    assert ours.requires_grad and theirs.requires_grad and ours.is_leaf
    assert tuple(ours.shape) == tuple(theirs.shape)
    (ours * 2).sum().backward()
    assert ours.grad.shape == ours.shape


def test_inplace_random_fills_take_a_generator():
    a = gc.zeros(6).uniform_(2.0, 3.0, generator=_seeded(1)).tolist()
    assert a == gc.zeros(6).uniform_(2.0, 3.0, generator=_seeded(1)).tolist() and 2.0 <= min(a) <= max(a) < 3.0
    b = gc.zeros(6).normal_(0.0, 2.0, generator=_seeded(1)).tolist()
    assert b == gc.zeros(6).normal_(0.0, 2.0, generator=_seeded(1)).tolist()


def test_random_fills_integers_in_range_as_torch():
    for lib in (gc, torch):
        x = lib.zeros(2000)
        assert x.random_(3) is x and set(x.tolist()) == {0.0, 1.0, 2.0}
        y = lib.zeros(2000, dtype=lib.int32).random_(5, 8)
        assert set(y.tolist()) == {5, 6, 7} and y.dtype == lib.int32
        z = lib.zeros(2000, dtype=lib.uint8).random_()
        assert 0 <= min(z.tolist()) and max(z.tolist()) <= 255 and len(set(z.tolist())) > 200
        assert set(lib.zeros(100, dtype=lib.bool).random_().tolist()) == {False, True}
        seed = lib.empty((), dtype=lib.int64).random_().item()
        assert isinstance(seed, int) and seed >= 0
    wide = gc.zeros(1000).random_(generator=_seeded(2)).numpy()
    assert wide.max() <= 2**24 and wide.max() > 2**20 and (wide == np.round(wide)).all()
