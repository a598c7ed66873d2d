"""torch.distributions: log_prob, entropy, moments, shapes and KL against PyTorch; sampling by
shape, dtype and moments; rsample's gradients."""

import numpy as np
import pytest

import gradcraft as gc

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
LOC = RNG.normal(size=(2, 3))
SCALE = RNG.uniform(0.5, 2.0, size=(2, 3))
VALUE = RNG.normal(size=(4, 2, 3))
PROBS = RNG.uniform(0.05, 1.0, size=(2, 5))
LOGITS = RNG.normal(size=(2, 5))


def _make(lib, name):
    D, t = lib.distributions, lib.tensor
    return {
        "normal": lambda: D.Normal(t(LOC), t(SCALE)),
        "normal_numbers": lambda: D.Normal(0.5, 2.0),
        "uniform": lambda: D.Uniform(t(LOC - 2), t(LOC + SCALE)),
        "exponential": lambda: D.Exponential(t(SCALE)),
        "laplace": lambda: D.Laplace(t(LOC), t(SCALE)),
        "bernoulli_probs": lambda: D.Bernoulli(probs=t(PROBS[0])),
        "bernoulli_logits": lambda: D.Bernoulli(logits=t(LOGITS[0])),
        "categorical_probs": lambda: D.Categorical(probs=t(PROBS)),
        "categorical_logits": lambda: D.Categorical(logits=t(LOGITS)),
        "onehot": lambda: D.OneHotCategorical(probs=t(PROBS)),
        "independent": lambda: D.Independent(D.Normal(t(LOC), t(SCALE)), 1),
    }[name]()


def _values(lib, name):
    t = lib.tensor
    if name.startswith("bernoulli"):
        return t((VALUE[0, 0, :] > 0).astype(np.float64).repeat(2)[:5])
    if name.startswith("categorical"):
        return t(np.array([[0, 4], [3, 1], [2, 2]]))
    if name == "onehot":
        return t(np.eye(5)[[1, 3]])
    if name == "exponential":
        return t(np.abs(VALUE))
    if name == "uniform":
        return t(np.clip(VALUE, LOC - 1.9, LOC + SCALE - 0.01))
    if name == "normal_numbers":
        return t(np.float32(0.3))
    return t(VALUE)


NAMES = [
    "normal",
    "normal_numbers",
    "uniform",
    "exponential",
    "laplace",
    "bernoulli_probs",
    "bernoulli_logits",
    "categorical_probs",
    "categorical_logits",
    "onehot",
    "independent",
]


def _close(a, b, name):
    a = a.numpy() if hasattr(a, "numpy") else np.asarray(a)
    b = b.detach().numpy() if hasattr(b, "detach") else np.asarray(b)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("name", NAMES)
def test_against_torch(name):
    ours, theirs = _make(gc, name), _make(torch, name)
    assert tuple(ours.batch_shape) == tuple(theirs.batch_shape)
    assert tuple(ours.event_shape) == tuple(theirs.event_shape)
    assert ours.has_rsample == theirs.has_rsample
    _close(ours.log_prob(_values(gc, name)), theirs.log_prob(_values(torch, name)), name + " log_prob")
    _close(ours.entropy(), theirs.entropy(), name + " entropy")
    for moment in ("mean", "variance", "stddev", "mode"):
        _close(getattr(ours, moment), getattr(theirs, moment), f"{name} {moment}")
    for attr in ("probs", "logits"):
        if hasattr(theirs, attr):
            _close(getattr(ours, attr), getattr(theirs, attr), f"{name} {attr}")
    for shape in ((), (7,), (3, 2)):
        drawn = ours.sample(shape)
        assert tuple(drawn.shape) == tuple(theirs.sample(shape).shape)
        assert drawn.dtype.name == str(theirs.sample(shape).dtype).replace("torch.", "")
        assert not drawn.requires_grad


@pytest.mark.parametrize(
    "name", ["normal", "uniform", "exponential", "laplace", "bernoulli_probs", "categorical_probs"]
)
def test_sample_moments(name):
    gc.manual_seed(0)
    d = _make(gc, name)
    drawn = d.sample((20000,)).numpy().astype(np.float64)
    if name.startswith("categorical"):
        freq = np.stack([(drawn == k).mean(0) for k in range(5)], -1)
        np.testing.assert_allclose(freq, d.probs.numpy(), atol=0.02)
        return
    np.testing.assert_allclose(drawn.mean(0), d.mean.numpy(), atol=0.06 * float(np.max(d.stddev.numpy())) + 0.01)
    np.testing.assert_allclose(drawn.var(0), d.variance.numpy(), rtol=0.1, atol=0.01)


def test_rsample_gradients_flow():
    loc = gc.tensor(LOC, requires_grad=True)
    scale = gc.tensor(SCALE, requires_grad=True)
    gc.manual_seed(1)
    z = gc.distributions.Normal(loc, scale).rsample((5,))
    z.sum().backward()
    np.testing.assert_allclose(loc.grad.numpy(), np.full(LOC.shape, 5.0))
    gc.manual_seed(1)
    eps = (gc.distributions.Normal(loc, scale).rsample((5,)) - loc).detach().numpy() / SCALE
    np.testing.assert_allclose(scale.grad.numpy(), eps.sum(0), rtol=1e-6)
    with pytest.raises(NotImplementedError):
        gc.distributions.Categorical(logits=gc.tensor(LOGITS)).rsample()


def test_log_prob_gradient_matches_torch():
    grads = []
    for lib in (gc, torch):
        loc = lib.tensor(LOC, requires_grad=True)
        logits = lib.tensor(LOGITS, requires_grad=True)
        lp = lib.distributions.Normal(loc, lib.tensor(SCALE)).log_prob(lib.tensor(VALUE)).sum()
        lp = lp + lib.distributions.Categorical(logits=logits).log_prob(lib.tensor(np.array([1, 3]))).sum()
        lp.backward()
        grads.append((loc.grad.numpy(), logits.grad.numpy()))
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-10)


@pytest.mark.parametrize(
    "pair",
    [
        ("normal", lambda lib: lib.distributions.Normal(lib.tensor(LOC * 0.5), lib.tensor(SCALE[::-1].copy()))),
        ("categorical_logits", lambda lib: lib.distributions.Categorical(probs=lib.tensor(PROBS[::-1].copy()))),
        ("bernoulli_probs", lambda lib: lib.distributions.Bernoulli(logits=lib.tensor(LOGITS[1]))),
        ("exponential", lambda lib: lib.distributions.Exponential(lib.tensor(SCALE * 2))),
        ("laplace", lambda lib: lib.distributions.Laplace(lib.tensor(LOC + 1), lib.tensor(SCALE))),
        ("uniform", lambda lib: lib.distributions.Uniform(lib.tensor(LOC - 3), lib.tensor(LOC + 3))),
        ("onehot", lambda lib: lib.distributions.OneHotCategorical(logits=lib.tensor(LOGITS))),
        ("independent", lambda lib: lib.distributions.Independent(lib.distributions.Normal(lib.tensor(LOC), 1.5), 1)),
    ],
)
def test_kl_divergence(pair):
    name, other = pair
    ours = gc.distributions.kl_divergence(_make(gc, name), other(gc))
    theirs = torch.distributions.kl_divergence(_make(torch, name), other(torch))
    _close(ours, theirs, name)


def test_errors():
    for lib in (gc, torch):
        D = lib.distributions
        with pytest.raises(ValueError, match="Either `probs` or `logits` must be specified"):
            D.Categorical(probs=lib.tensor([0.5, 0.5]), logits=lib.tensor([0.0, 0.0]))
        with pytest.raises(ValueError, match="Expected parameter scale"):
            D.Normal(lib.tensor([0.0]), lib.tensor([-1.0]))
        with pytest.raises(NotImplementedError):
            D.kl_divergence(D.Normal(0.0, 1.0), D.Bernoulli(probs=lib.tensor(0.5)))
    gc.distributions.Normal(gc.tensor([0.0]), gc.tensor([-1.0]), validate_args=False)


def _mvn(lib, kind, requires_grad=False):
    rng = np.random.default_rng(2)
    a = rng.normal(size=(2, 3, 3))
    cov = a @ a.transpose(0, 2, 1) + 2 * np.eye(3)
    matrix = (
        np.linalg.cholesky(cov) if kind == "scale_tril" else cov if kind == "covariance_matrix" else np.linalg.inv(cov)
    )
    loc = lib.tensor(rng.normal(size=3), requires_grad=requires_grad)
    param = lib.tensor(matrix, requires_grad=requires_grad)
    return lib.distributions.MultivariateNormal(loc, **{kind: param}), loc, param


@pytest.mark.parametrize("kind", ["scale_tril", "covariance_matrix", "precision_matrix"])
def test_multivariate_normal(kind):
    values = np.random.default_rng(3).normal(size=(4, 2, 3))
    ours, theirs = _mvn(gc, kind)[0], _mvn(torch, kind)[0]
    assert tuple(ours.batch_shape) == (2,) and tuple(ours.event_shape) == (3,)
    _close(ours.log_prob(gc.tensor(values)), theirs.log_prob(torch.tensor(values)), "log_prob")
    for attr in ("entropy", "mean", "variance", "covariance_matrix", "precision_matrix", "scale_tril"):
        a, b = getattr(ours, attr), getattr(theirs, attr)
        _close(a() if callable(a) else a, b() if callable(b) else b, attr)
    other = lambda lib: lib.distributions.MultivariateNormal(  # noqa: E731
        lib.ones(3, dtype=lib.float64), scale_tril=lib.tensor(np.diag([1.0, 2.0, 0.5]))
    )
    _close(
        gc.distributions.kl_divergence(ours, other(gc)), torch.distributions.kl_divergence(theirs, other(torch)), "kl"
    )
    assert tuple(ours.rsample((5,)).shape) == (5, 2, 3)


def test_multivariate_normal_gradients_and_errors():
    grads = []
    for lib in (gc, torch):
        d, loc, param = _mvn(lib, "covariance_matrix", requires_grad=True)
        (d.log_prob(lib.tensor(np.ones(3))).sum() + d.entropy().sum()).backward()
        grads.append((loc.grad.numpy(), param.grad.numpy()))
        with pytest.raises(ValueError, match="PositiveDefinite"):
            lib.distributions.MultivariateNormal(lib.zeros(2), covariance_matrix=lib.tensor([[1.0, 2.0], [2.0, 1.0]]))
        with pytest.raises(ValueError, match="Exactly one of"):
            lib.distributions.MultivariateNormal(lib.zeros(2))
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
