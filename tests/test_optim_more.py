"""Adadelta, Adamax, NAdam, RAdam, LBFGS (and Adagrad's options) against torch.optim: the weights and
the state after several steps on a small problem."""

import numpy as np
import pytest

import gradcraft as gc

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(3)
A = RNG.normal(size=(5, 4))
B = RNG.normal(size=(5, 3))
W0 = RNG.normal(size=(4, 3))
V0 = RNG.normal(size=(3,))


def _train(lib, make, steps=6, dtype="float64"):
    w = lib.tensor(W0.astype(dtype), requires_grad=True)
    v = lib.tensor(V0.astype(dtype), requires_grad=True)
    a, b = lib.tensor(A.astype(dtype)), lib.tensor(B.astype(dtype))
    opt = make(lib, [w, v])
    for _ in range(steps):
        opt.zero_grad()
        loss = (((a @ w + v).tanh() - b) ** 2).mean() + (w**2).sum() * 0.01
        loss.backward()
        opt.step()
    return opt, [w, v]


CASES = {
    "adadelta": lambda lib, p: lib.optim.Adadelta(p),
    "adadelta_options": lambda lib, p: lib.optim.Adadelta(p, lr=0.5, rho=0.8, eps=1e-5, weight_decay=0.1),
    "adadelta_maximize": lambda lib, p: lib.optim.Adadelta(p, lr=0.5, weight_decay=0.1, maximize=True),
    "adamax": lambda lib, p: lib.optim.Adamax(p, lr=0.05),
    "adamax_options": lambda lib, p: lib.optim.Adamax(p, 0.03, (0.8, 0.99), 1e-6, 0.05),
    "nadam": lambda lib, p: lib.optim.NAdam(p, lr=0.05),
    "nadam_decay": lambda lib, p: lib.optim.NAdam(p, lr=0.05, weight_decay=0.1, momentum_decay=0.01),
    "nadam_decoupled": lambda lib, p: lib.optim.NAdam(p, lr=0.05, weight_decay=0.1, decoupled_weight_decay=True),
    "radam": lambda lib, p: lib.optim.RAdam(p, lr=0.05),
    "radam_decay": lambda lib, p: lib.optim.RAdam(p, lr=0.05, betas=(0.5, 0.6), weight_decay=0.1),
    "radam_decoupled": lambda lib, p: lib.optim.RAdam(p, lr=0.05, weight_decay=0.1, decoupled_weight_decay=True),
    "adagrad_options": lambda lib, p: lib.optim.Adagrad(p, lr=0.1, lr_decay=0.05, initial_accumulator_value=0.3),
    "adagrad_maximize": lambda lib, p: lib.optim.Adagrad(p, lr=0.1, weight_decay=0.2, maximize=True),
    "adam_maximize": lambda lib, p: lib.optim.Adam(p, lr=0.1, weight_decay=0.2, maximize=True),
    "adam_decoupled": lambda lib, p: lib.optim.Adam(p, lr=0.1, weight_decay=0.2, decoupled_weight_decay=True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_torch(name):
    opt_g, params_g = _train(gc, CASES[name])
    opt_t, params_t = _train(torch, CASES[name])
    for pg, pt in zip(params_g, params_t):
        np.testing.assert_allclose(pg.detach().numpy(), pt.detach().numpy(), rtol=1e-6, atol=1e-9)
    state_g, state_t = opt_g.state_dict(), opt_t.state_dict()
    assert sorted(state_g["state"]) == sorted(state_t["state"])
    for i, st in state_t["state"].items():
        sg = state_g["state"][i]
        assert sorted(sg) == sorted(st), (sorted(sg), sorted(st))
        for key, value in st.items():
            np.testing.assert_allclose(np.asarray(sg[key], dtype=np.float64), value.numpy(), rtol=1e-5, atol=1e-9)
    group_t = {k: v for k, v in state_t["param_groups"][0].items() if k != "params"}
    for key in ("lr", "betas", "eps", "weight_decay", "rho", "momentum_decay", "decoupled_weight_decay"):
        if key in group_t:
            assert state_g["param_groups"][0][key] == group_t[key], key


def test_float32_parameters():
    opt_g, params_g = _train(gc, CASES["nadam"], dtype="float32")
    opt_t, params_t = _train(torch, CASES["nadam"], dtype="float32")
    assert params_g[0].dtype == gc.float32
    np.testing.assert_allclose(params_g[0].detach().numpy(), params_t[0].detach().numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("make", [lambda lib: lib.optim.Adamax, lambda lib: lib.optim.NAdam])
def test_invalid_arguments(make):
    for lib in (gc, torch):
        w = lib.zeros(2, requires_grad=True)
        with pytest.raises(ValueError, match="Invalid learning rate"):
            make(lib)([w], lr=-1.0)
        with pytest.raises(ValueError, match="Invalid beta parameter at index 1"):
            make(lib)([w], betas=(0.9, 1.0))


def _rosenbrock(lib, line_search, max_iter=15, steps=3):
    x = lib.tensor(np.array([-1.2, 1.0, 0.5]), requires_grad=True)
    opt = lib.optim.LBFGS([x], lr=1, max_iter=max_iter, history_size=4, line_search_fn=line_search)

    def closure():
        opt.zero_grad()
        loss = ((1 - x[:-1]) ** 2).sum() + 100 * ((x[1:] - x[:-1] ** 2) ** 2).sum()
        loss.backward()
        return loss

    losses = [opt.step(closure).item() for _ in range(steps)]
    return x, losses, opt


@pytest.mark.parametrize("line_search", [None, "strong_wolfe"])
def test_lbfgs_matches_torch(line_search):
    xg, lg, og = _rosenbrock(gc, line_search)
    xt, lt, ot = _rosenbrock(torch, line_search)
    np.testing.assert_allclose(lg, lt, rtol=1e-6)
    np.testing.assert_allclose(xg.detach().numpy(), xt.detach().numpy(), rtol=1e-6, atol=1e-9)
    sg, st = og.state_dict()["state"][0], ot.state_dict()["state"][0]
    assert sg["func_evals"] == st["func_evals"] and sg["n_iter"] == st["n_iter"]
    assert len(sg["old_dirs"]) == len(st["old_dirs"])


def test_lbfgs_signature_and_errors():
    import inspect

    params = list(inspect.signature(torch.optim.LBFGS.__init__).parameters)
    assert list(inspect.signature(gc.optim.LBFGS.__init__).parameters) == params
    x = gc.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="per-parameter options"):
        gc.optim.LBFGS([{"params": [x]}, {"params": [gc.zeros(1, requires_grad=True)]}])
    assert gc.optim.LBFGS([x], max_iter=8).param_groups[0]["max_eval"] == 10


@pytest.mark.parametrize("name", ["Adadelta", "Adamax", "NAdam", "RAdam", "Adagrad"])
def test_signatures(name):
    import inspect

    ours = inspect.signature(getattr(gc.optim, name).__init__).parameters
    theirs = inspect.signature(getattr(torch.optim, name).__init__).parameters
    if name == "Adagrad":  # (Adagrad takes its options by keyword)
        assert set(theirs) - {"self", "params", "foreach", "differentiable", "fused"} <= set(gc.optim.Adagrad.defaults)
        return
    assert list(ours) == list(theirs)
    for key in theirs:
        if key not in ("self", "params"):
            assert ours[key].default == theirs[key].default, key
            assert ours[key].kind == theirs[key].kind, key


def test_state_is_keyed_by_the_parameter():
    for lib in (gc, torch):
        w = lib.zeros(3, requires_grad=True)
        opt = lib.optim.Adamax([w], lr=0.1)
        (w - 1).pow(2).sum().backward()
        opt.step()
        assert w in opt.state and sorted(opt.state[w]) == ["exp_avg", "exp_inf", "step"]
        np.testing.assert_allclose(np.asarray(opt.state[w]["exp_avg"]), [-0.2] * 3, rtol=1e-6)
