"""Every op of the table in optable.py, forward and backward, against PyTorch (CPU)."""

import types

import numpy as np
import pytest
import torch

import gradcraft as gc
import gradcraft.nn.functional as gF
from optable import OPS, Const, Fixed, Ints, Mask, float_data, input_shape

GC = types.SimpleNamespace(name="gradcraft", T=gc, F=gF)
TORCH = types.SimpleNamespace(name="torch", T=torch, F=torch.nn.functional)
DTYPES = {"float64": (gc.float64, torch.float64, np.float64), "float32": (gc.float32, torch.float32, np.float32)}


def make_inputs(sample, np_dtype, rng, noncontiguous=False):
    """Build the same inputs for both libraries. Returns (gc_args, torch_args, differentiable pairs)."""
    gc_args, torch_args, pairs = [], [], []
    for spec in sample:
        if isinstance(spec, Const):
            gc_args.append(spec.value)
            torch_args.append(spec.value)
        elif isinstance(spec, Ints):
            data = rng.integers(0, spec.high, size=spec.shape)
            gc_args.append(gc.tensor(data, dtype=gc.int64))
            torch_args.append(torch.tensor(data, dtype=torch.int64))
        elif isinstance(spec, Fixed):
            data = rng.standard_normal(spec.shape).astype(np_dtype)
            gc_args.append(gc.tensor(data))
            torch_args.append(torch.tensor(data))
        elif isinstance(spec, Mask):
            data = rng.random(spec.shape) < 0.5
            gc_args.append(gc.tensor(data))
            torch_args.append(torch.tensor(data))
        else:
            shape = input_shape(spec)
            data = float_data(spec, rng).astype(np_dtype)
            if noncontiguous and len(shape) >= 1:
                # A strided view: every other element of a twice-as-wide base tensor.
                base = np.repeat(data, 2, axis=-1)
                g_leaf = gc.tensor(base, requires_grad=True)
                t_leaf = torch.tensor(base, requires_grad=True)
                gc_args.append(g_leaf[..., ::2])
                torch_args.append(t_leaf[..., ::2])
            else:
                g_leaf = gc.tensor(data, requires_grad=True)
                t_leaf = torch.tensor(data, requires_grad=True)
                gc_args.append(g_leaf)
                torch_args.append(t_leaf)
            pairs.append((g_leaf, t_leaf))
    return gc_args, torch_args, pairs


def check_op(op, sample, dtype_name, noncontiguous=False, seed=0):
    _, _, np_dtype = DTYPES[dtype_name]
    rtol, atol = (op.rtol64, op.atol64) if dtype_name == "float64" else (op.rtol32, op.atol32)
    rng = np.random.default_rng(seed)
    gc_args, torch_args, pairs = make_inputs(sample, np_dtype, rng, noncontiguous)
    out_gc = op.fn(GC, *gc_args)
    out_t = op.fn(TORCH, *torch_args)
    expected = out_t.detach().numpy()
    got = out_gc.numpy()
    assert got.shape == expected.shape, f"{op.name}: shape {got.shape} != torch {expected.shape}"
    assert got.dtype == expected.dtype, f"{op.name}: dtype {got.dtype} != torch {expected.dtype}"
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, err_msg=f"{op.name} forward")
    if not op.grad:
        return
    upstream = rng.standard_normal(expected.shape).astype(np_dtype)
    (out_gc * gc.tensor(upstream)).sum().backward()
    (out_t * torch.tensor(upstream)).sum().backward()
    skip = {1, 2} if "const_inputs_1_2" in op.tags else set()
    for i, (g_leaf, t_leaf) in enumerate(pairs):
        if i in skip:
            continue
        assert g_leaf.grad is not None, f"{op.name}: no gradient for input {i}"
        np.testing.assert_allclose(
            g_leaf.grad.numpy(), t_leaf.grad.numpy(), rtol=rtol, atol=atol, err_msg=f"{op.name} gradient of input {i}"
        )


CASES = [pytest.param(op, i, id=f"{op.name}-{i}") for op in OPS for i in range(len(op.samples))]


@pytest.mark.parametrize("dtype_name", ["float64", "float32"])
@pytest.mark.parametrize("op,sample_index", CASES)
def test_op_matches_torch(op, sample_index, dtype_name):
    check_op(op, op.samples[sample_index], dtype_name)


@pytest.mark.parametrize("op,sample_index", [c for c in CASES if c.values[0].noncontiguous])
def test_op_matches_torch_noncontiguous(op, sample_index):
    check_op(op, op.samples[sample_index], "float64", noncontiguous=True, seed=1)
