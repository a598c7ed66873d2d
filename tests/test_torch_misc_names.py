"""PyTorch's small top-level names, each against the oracle: Tensor.__format__, torch.Size, dtype
printing, set_default_dtype/device, torch.accelerator, the legacy tensor types and Variable,
inference_mode, and the constants."""

import math

import pytest

import gradcraft as gc

torch = pytest.importorskip("torch")


@pytest.mark.parametrize(
    "template, make",
    [
        ("{:.4f}", lambda lib: lib.tensor(1.23456)),
        ("{:.3f}", lambda lib: lib.tensor(2.5, dtype=lib.float64)),
        ("{:>8.2f}|", lambda lib: lib.tensor(-0.125)),
        ("{:d}", lambda lib: lib.tensor(7)),
        ("{:.2e}", lambda lib: (lib.ones(3) * 1234.5).sum()),
        ("{}", lambda lib: lib.tensor(3)),
        ("{:.1%}", lambda lib: lib.tensor(0.25)),
    ],
)
def test_format_specs_on_zero_dim_tensors(template, make):
    assert template.format(make(gc)) == template.format(make(torch))


def test_format_of_tensors_with_elements_as_torch():
    for lib in (gc, torch):
        for value in (lib.tensor([1.5]), lib.ones(2, 2)):
            with pytest.raises(TypeError, match="unsupported format string passed to Tensor.__format__"):
                f"{value:.2f}"
            assert f"{value}" == str(value)
    loss = gc.tensor([0.5, 1.5]).mean()
    assert f"loss {loss:.4f}" == "loss 1.0000"


def test_size_prints_and_behaves_as_torch():
    for shape in ((2, 3), (), (5,)):
        ours, theirs = gc.zeros(shape).shape, torch.zeros(shape).shape
        assert str(ours) == str(theirs) and repr(ours) == repr(theirs) and f"{ours}" == f"{theirs}"
        assert ours == theirs == shape and ours.numel() == theirs.numel()
    x = gc.ones(2, 3)
    assert isinstance(x.shape, gc.Size) and isinstance(x.shape, tuple) and isinstance(x.size(), gc.Size)
    assert (x @ gc.ones(3, 4)).shape == gc.Size([2, 4]) and x.size(1) == 3 and type(x.shape[0]) is int
    assert str(gc.Size([2]) + (3,)) == str(torch.Size([2]) + (3,))
    assert str((3,) + gc.Size([2])) == str((3,) + torch.Size([2]))
    assert gc.zeros(gc.Size([2, 2])).shape == (2, 2)
    import pickle

    assert pickle.loads(pickle.dumps(x.shape)) == (2, 3)


def test_dtypes_print_as_torch():
    for name in ("float32", "float64", "int64", "bool", "bfloat16"):
        assert str(getattr(gc, name)) == str(getattr(torch, name)) == repr(getattr(gc, name))


def test_set_default_dtype_changes_every_factory():
    try:
        for lib in (gc, torch):
            lib.set_default_dtype(lib.float64)
            assert lib.get_default_dtype() == lib.float64
            made = [
                lib.tensor([1.5]),
                lib.zeros(2),
                lib.ones(1),
                lib.rand(2),
                lib.randn(2),
                lib.arange(0.0, 1.0, 0.5),
                lib.linspace(0, 1, 3),
                lib.full((2,), 1.5),
                lib.nn.Linear(2, 2).weight,
                lib.arange(3) * 0.5,
            ]
            assert [str(t.dtype) for t in made] == ["torch.float64"] * len(made)
            assert lib.arange(3).dtype == lib.int64 and lib.tensor([1]).dtype == lib.int64
            with pytest.raises(TypeError, match="only floating-point types are supported as the default type"):
                lib.set_default_dtype(lib.int64)
    finally:
        gc.set_default_dtype(gc.float32)
        torch.set_default_dtype(torch.float32)
    assert gc.tensor([1.5]).dtype == gc.float32


def test_set_default_device():
    try:
        gc.set_default_device("cpu")
        assert gc.get_default_device() == "cpu" and gc.zeros(2).device == "cpu"
        with pytest.raises(gc.UserError):
            gc.set_default_device("gpu")
    finally:
        gc.set_default_device(None)
    assert str(torch.get_default_device()) == gc.get_default_device() == "cpu"


def test_accelerator_answers_like_torch_on_this_machine():
    assert gc.accelerator.is_available() == gc.cuda.is_available()
    assert gc.accelerator.device_count() == gc.cuda.device_count()
    current = gc.accelerator.current_accelerator()
    if gc.accelerator.is_available():
        assert current.type == "cuda" and gc.zeros(1, device=current).device == "cuda:0"
    else:
        assert current is None and gc.accelerator.current_device_index() == -1
    device = gc.accelerator.current_accelerator().type if gc.accelerator.is_available() else "cpu"
    assert gc.ones(2).to(device).sum().item() == 2.0


@pytest.mark.parametrize(
    "make, initialized",
    [
        (lambda lib: lib.FloatTensor([1, 2]), True),
        (lambda lib: lib.FloatTensor(2, 3), False),  # PyTorch leaves the memory as it was
        (lambda lib: lib.LongTensor([1.7, 2.2]), True),
        (lambda lib: lib.DoubleTensor(lib.Size([2])), False),
        (lambda lib: lib.IntTensor(4), False),
        (lambda lib: lib.BoolTensor([1, 0]), True),
        (lambda lib: lib.ByteTensor([1, 2]), True),
        (lambda lib: lib.FloatTensor(), True),
        (lambda lib: lib.FloatTensor(lib.ones(2)), True),
        (lambda lib: lib.ones(2).type(lib.LongTensor), True),
        (lambda lib: lib.ones(2).type("torch.DoubleTensor"), True),
        (lambda lib: lib.ones(2).type(lib.float64), True),
    ],
)
def test_legacy_tensor_types(make, initialized):
    ours, theirs = make(gc), make(torch)
    assert tuple(ours.shape) == tuple(theirs.shape) and str(ours.dtype) == str(theirs.dtype)
    if initialized:
        assert ours.tolist() == theirs.tolist()


def test_legacy_type_checks_and_names():
    for lib in (gc, torch):
        assert isinstance(lib.ones(2), lib.FloatTensor) and not isinstance(lib.ones(2).long(), lib.FloatTensor)
        assert isinstance(lib.ones(2).long(), lib.LongTensor)
        names = [lib.ones(1).to(d).type() for d in (lib.float32, lib.float64, lib.int64, lib.int32, lib.bool)]
        assert names == ["torch.FloatTensor", "torch.DoubleTensor", "torch.LongTensor", "torch.IntTensor",
                         "torch.BoolTensor"]  # fmt: skip
        with pytest.raises(TypeError):
            lib.LongTensor(2.5)
        with pytest.raises(TypeError):
            lib.FloatTensor(lib.ones(2).long())


def test_variable_is_the_tensor_with_requires_grad():
    for lib in (gc, torch):
        x = lib.ones(2)
        v = lib.autograd.Variable(x, requires_grad=True)
        assert v is not x and v.requires_grad and not x.requires_grad and v.is_leaf
        (v * 3).sum().backward()
        assert v.grad.tolist() == [3.0, 3.0]
        assert not lib.autograd.Variable(x).requires_grad


def test_inference_mode_as_context_manager_and_decorator():
    for lib in (gc, torch):
        w = lib.ones(2, requires_grad=True)
        with lib.inference_mode():
            assert not lib.is_grad_enabled() and lib.is_inference_mode_enabled()
            assert not (w * 2).requires_grad
        assert lib.is_grad_enabled() and not lib.is_inference_mode_enabled()
        with lib.inference_mode(False):
            assert (w * 2).requires_grad

        @lib.inference_mode()
        def called():
            return lib.is_grad_enabled()

        @lib.inference_mode
        def bare():
            return (w * 2).requires_grad

        assert called() is False and bare() is False and lib.is_grad_enabled()


def test_constants():
    for name in ("pi", "e", "inf"):
        assert getattr(gc, name) == getattr(torch, name)
    assert math.isnan(gc.nan) and gc.tensor([gc.inf]).isinf().item()


def test_set_default_tensor_type_the_legacy_way():
    import warnings

    try:
        for lib in (gc, torch):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # PyTorch deprecates it
                lib.set_default_tensor_type(lib.DoubleTensor)
                assert lib.zeros(1).dtype == lib.float64 and lib.tensor([0.5]).dtype == lib.float64
                lib.set_default_tensor_type("torch.FloatTensor")
                assert lib.zeros(1).dtype == lib.float32
                with pytest.raises(TypeError):
                    lib.set_default_tensor_type(lib.LongTensor)
    finally:
        gc.set_default_dtype(gc.float32)
        torch.set_default_dtype(torch.float32)
