"""Our public signatures against PyTorch's: every name gradcraft exports under a PyTorch name (torch.*,
torch.nn.functional, nn modules' __init__/forward, optimizers, lr schedulers, torch.utils.data, distributions,
nn.init, nn.utils, Tensor methods) takes PyTorch's parameter names, order, kinds and simple defaults, or its
difference is listed below with the reason. An entry that no longer differs fails too, so the list stays exact."""

import re

import pytest

pytest.importorskip("torch")

from signature_diff import report  # noqa: E402

# Reasons shared by many names. An entry made only of these may differ only in the parameters they name.
OUT = "out= is not taken: every result is a new tensor (assign it); "
LAYOUT = "layout=/pin_memory=/memory_format= are not taken: tensors are strided, contiguous and unpinned; "
GEN = "generator= is not taken here: these draw from the global generator (torch.manual_seed); "
CATEGORY = {
    OUT: r"missing (keyword )?'out'",
    LAYOUT: r"missing (keyword )?'(layout|pin_memory|memory_format)'",
    GEN: r"missing (keyword )?'generator'",
}
DOC = "PyTorch's docstring names a parameter its binding does not use; ours takes the binding's name"

DELIBERATE = {
    # PyTorch's docstring reads "atanh_(other)", but the method takes no argument (x.atanh_() runs)
    "torch.Tensor.atanh_": "PyTorch's docstring names an argument the method does not take",
    "torch.Tensor.arctanh_": "PyTorch's docstring names an argument the method does not take",
    "torch.empty": LAYOUT,
    "torch.empty_like": LAYOUT,
    "torch.eye": LAYOUT,
    "torch.full": LAYOUT,
    "torch.full_like": LAYOUT,
    "torch.linspace": LAYOUT,
    "torch.logspace": LAYOUT,
    "torch.ones": LAYOUT,
    "torch.ones_like": LAYOUT,
    "torch.rand_like": GEN + LAYOUT,
    "torch.randn_like": GEN + LAYOUT,
    "torch.randperm": LAYOUT,
    "torch.tensor": LAYOUT,
    "torch.zeros": LAYOUT,
    "torch.zeros_like": LAYOUT,
    "torch.nonzero": OUT,
    "torch.index_add": OUT,
    "torch.nn.init.kaiming_normal_": GEN,
    "torch.nn.init.kaiming_uniform_": GEN,
    "torch.nn.init.normal_": GEN,
    "torch.nn.init.trunc_normal_": GEN,
    "torch.nn.init.uniform_": GEN,
    "torch.nn.init.xavier_normal_": GEN,
    "torch.nn.init.xavier_uniform_": GEN,
    "torch.Tensor.bfloat16": LAYOUT,
    "torch.Tensor.bool": LAYOUT,
    "torch.Tensor.clone": LAYOUT,
    "torch.Tensor.contiguous": LAYOUT,
    "torch.Tensor.cpu": LAYOUT,
    "torch.Tensor.double": LAYOUT,
    "torch.Tensor.float": LAYOUT,
    "torch.Tensor.half": LAYOUT,
    "torch.Tensor.int": LAYOUT,
    "torch.Tensor.is_contiguous": LAYOUT,
    "torch.Tensor.long": LAYOUT,
    "torch.Tensor.new_empty": LAYOUT,
    "torch.Tensor.new_full": LAYOUT,
    "torch.Tensor.new_ones": LAYOUT,
    "torch.Tensor.new_tensor": LAYOUT,
    "torch.Tensor.new_zeros": LAYOUT,
    "torch.arange": LAYOUT + "arange(end) is the one-argument overload: start takes the end there",
    "torch.randint_like": GEN + LAYOUT + "randint_like(input, high) is the overload: low takes high there",
    "torch.compile": "gradcraft's own compiler: backend/name/shapes options of torch.compile's inductor differ",
    "torch.concatenate": "PyTorch's docstring shows out= as positional; its binding, like ours, takes it by keyword",
    "torch.einsum": "PyTorch's binding is einsum(*args); ours names the equation",
    "torch.norm": "out= is not taken, so dtype is not the sixth positional parameter (pass it by keyword)",
    "torch.std": "correction=None means PyTorch's default of 1",
    "torch.var": "correction=None means PyTorch's default of 1",
    "torch.Tensor.std": "correction=None means PyTorch's default of 1",
    "torch.Tensor.var": "correction=None means PyTorch's default of 1",
    "torch.topk": "dim=-1 is PyTorch's meaning of dim=None (the last dimension)",
    "torch.Tensor.topk": "dim=-1 is PyTorch's meaning of dim=None (the last dimension)",
    "torch.nn.functional.softmax": "dim=-1 by default instead of PyTorch's deprecated implicit choice; "
    "the private _stacklevel is not taken, so dtype goes by keyword",
    "torch.nn.functional.log_softmax": "dim=-1 by default instead of PyTorch's deprecated implicit choice; "
    "the private _stacklevel is not taken, so dtype goes by keyword",
    "torch.nn.functional.linear_cross_entropy": "gradcraft's fused linear + cross-entropy predates PyTorch's "
    "function of this name and keeps its own parameters",
    "torch.optim.Optimizer.__init__": "the base class takes its hyperparameters as keywords, not a defaults dict",
    "torch.Tensor.cuda": LAYOUT + "the device index is named index; non_blocking is not taken",
    "torch.Tensor.type_as": DOC + " (other)",
    "torch.Tensor.where": DOC + " (other)",
    "torch.Tensor.uniform_": "PyTorch's from/to are Python keywords, so they can only be passed by position",
}


def test_signatures_match_pytorch_or_are_listed():
    rows = report()
    differ = {name: problems for name, status, problems, _ in rows if status == "differ"}
    equal = sum(1 for r in rows if r[1] == "equal")
    skipped = sorted(name for name, status, _, _ in rows if status == "skip")
    extras = sum(1 for r in rows if r[3])
    print(
        f"signatures: {len(rows)} names, {equal} equal, {len(differ)} differences listed as deliberate, "
        f"{len(skipped)} not comparable ({', '.join(skipped)}); {extras} with extra keyword parameters"
    )
    unlisted = {n: p for n, p in differ.items() if n not in DELIBERATE}
    assert not unlisted, "signatures that differ from PyTorch's:\n" + "\n".join(
        f"{n}: {p}" for n, p in unlisted.items()
    )
    stale = sorted(n for n in DELIBERATE if n not in differ)
    assert not stale, f"listed as deliberate but equal to PyTorch's now (remove them): {stale}"
    for name, reason in DELIBERATE.items():
        rest = reason
        allowed = []
        for category, pattern in CATEGORY.items():
            if category in rest:
                rest = rest.replace(category, "")
                allowed.append(pattern)
        if rest.strip():
            continue  # a specific reason covers the name's differences
        other = [p for p in differ[name] if not any(re.fullmatch(a, p) for a in allowed)]
        assert not other, f"{name} differs beyond its listed reason: {other}"


def test_keyword_calls_with_pytorch_names():
    import gradcraft as torch

    a, b = torch.ones(2, 2), torch.full((2, 2), 2.0)
    assert torch.matmul(input=a, other=b).tolist() == [[4.0, 4.0], [4.0, 4.0]]
    assert torch.add(input=a, other=b, alpha=2).tolist() == [[5.0, 5.0], [5.0, 5.0]]
    assert torch.sum(input=b, dim=0).tolist() == [4.0, 4.0]
    assert torch.where(a > 0, input=a, other=b).tolist() == a.tolist()
    assert torch.pow(input=b, exponent=2).tolist() == [[4.0, 4.0], [4.0, 4.0]]
    assert torch.nn.functional.softmax(input=a, dim=1).tolist() == [[0.5, 0.5], [0.5, 0.5]]
    assert torch.nn.Linear(2, 1)(input=a).shape == (2, 1)


def test_legacy_loss_arguments_and_weights_as_pytorch():
    import numpy as np
    import torch

    import gradcraft

    rng = np.random.default_rng(0)
    a, b, w = (rng.standard_normal((4, 3)).astype(np.float32) for _ in range(3))
    w = np.abs(w)
    target = np.array([0, 2, 1, 1])
    for name in ("l1_loss", "mse_loss"):
        for kw in ({"size_average": False}, {"reduce": False}, {"weight": w}, {"weight": w, "reduction": "sum"}):
            ours = {k: gradcraft.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
            theirs = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
            with pytest.warns(UserWarning) if "weight" not in kw else _no_warning():
                got = getattr(gradcraft.nn.functional, name)(gradcraft.tensor(a), gradcraft.tensor(b), **ours)
            want = getattr(torch.nn.functional, name)(torch.tensor(a), torch.tensor(b), **theirs)
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.warns(UserWarning):
        got = gradcraft.nn.CrossEntropyLoss(size_average=False)(gradcraft.tensor(a), gradcraft.tensor(target))
    want = torch.nn.CrossEntropyLoss(reduction="sum")(torch.tensor(a), torch.tensor(target))
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
    with pytest.warns(UserWarning):
        got = gradcraft.nn.NLLLoss(reduce=False)(gradcraft.tensor(a), gradcraft.tensor(target))
    np.testing.assert_allclose(got.numpy(), -a[np.arange(4), target], rtol=1e-6)


class _no_warning:
    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc):
        self._catch.__exit__(*exc)
        return False


def test_embedding_padding_idx_and_norms_without_affine_as_pytorch():
    import numpy as np
    import torch

    import gradcraft

    ours = gradcraft.nn.Embedding(5, 3, padding_idx=-4)
    theirs = torch.nn.Embedding(5, 3, padding_idx=-4)
    assert ours.padding_idx == theirs.padding_idx == 1
    assert not ours.weight.numpy()[1].any()
    weights = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)  # a nonzero padding row too
    ours = gradcraft.nn.Embedding(5, 3, padding_idx=1, _weight=gradcraft.tensor(weights))
    theirs = torch.nn.Embedding(5, 3, padding_idx=1, _weight=torch.tensor(weights))
    idx = np.array([[0, 1, 2], [1, 4, 1]])
    out, ref = ours(gradcraft.tensor(idx)), theirs(torch.tensor(idx))
    (out * out).sum().backward()
    (ref * ref).sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy())
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-6)
    with pytest.raises(gradcraft.errors.UserError):
        gradcraft.nn.Embedding(5, 3, padding_idx=5)
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    for ours, theirs in (
        (gradcraft.nn.LayerNorm(3, elementwise_affine=False), torch.nn.LayerNorm(3, elementwise_affine=False)),
        (gradcraft.nn.RMSNorm(3, elementwise_affine=False), torch.nn.RMSNorm(3, elementwise_affine=False)),
    ):
        assert list(ours.parameters()) == [] and list(theirs.parameters()) == []
        np.testing.assert_allclose(
            ours(gradcraft.tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(), atol=1e-5
        )


def test_out_arguments_as_pytorch():
    import numpy as np
    import torch

    import gradcraft

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    ours_out, theirs_out = gradcraft.zeros(1), torch.zeros(1)  # resized to the result, as PyTorch resizes
    got = gradcraft.add(gradcraft.tensor(a), 1, out=ours_out)
    want = torch.add(torch.tensor(a), 1, out=theirs_out)
    assert got is ours_out and want is theirs_out
    np.testing.assert_allclose(ours_out.numpy(), theirs_out.numpy())
    values, indices = gradcraft.zeros(2), gradcraft.zeros(2, dtype=gradcraft.int64)
    result = gradcraft.max(gradcraft.tensor(a), 1, out=(values, indices))
    assert result.values is values and indices.tolist() == [2, 2] and values.tolist() == [2.0, 5.0]
    ints = gradcraft.zeros(3, dtype=gradcraft.int64)
    gradcraft.arange(3, out=ints)
    assert ints.tolist() == [0, 1, 2] and ints.dtype == gradcraft.int64
    leaf = gradcraft.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        gradcraft.mul(leaf, 2, out=gradcraft.zeros(2))
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        torch.mul(torch.ones(2, requires_grad=True), 2, out=torch.zeros(2))
    with gradcraft.no_grad():
        assert gradcraft.mul(leaf, 2, out=gradcraft.zeros(2)).tolist() == [2.0, 2.0]
