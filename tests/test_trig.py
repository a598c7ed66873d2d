"""torch.atan2 / hypot beyond the op table (tests/optable.py has values, edges and gradients): PyTorch's
errors for a Python number operand."""

import pytest

import gradcraft as gc

torch = pytest.importorskip("torch")


def test_atan2_and_hypot_take_tensors_only_as_pytorch():
    for name in ("atan2", "hypot"):
        for args_gc, args_torch in (
            ((gc.ones(2), 2.0), (torch.ones(2), 2.0)),
            ((2.0, gc.ones(2)), (2.0, torch.ones(2))),
        ):
            with pytest.raises(TypeError) as expected:
                getattr(torch, name)(*args_torch)
            with pytest.raises(TypeError) as got:
                getattr(gc, name)(*args_gc)
            assert str(got.value) == str(expected.value)
