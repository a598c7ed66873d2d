"""The op specs (gradcraft/backend/opspec.py) and what is read from them: the contract, the kernels
that write their inputs, the fallbacks, the Tensor methods and out= functions. And the kernel tests
derived from the specs: the op table (tests/optable.py) runs every kernel of the contract but those
listed below, and every spec's fallback is checked against PyTorch through the op-table rows that
run its kernel, on a backend without that kernel."""

import functools
import pathlib
import pickle
import re

import pytest

import gradcraft as gc
from gradcraft.backend import KERNELS, OPTIONAL, OPTIONAL_PAIRS, PRIMITIVES, Backend
from gradcraft.backend import opspec
from gradcraft.device import get_backend
from gradcraft.engine.realize import WRITES_INPUTS
from gradcraft.ops.fallback import CAPABILITY_GATED, FALLBACKS
from gradcraft.ops.function import GRADIENTS
from optable import OPS
from test_ops import check_op

# Kernels the op table does not run, and where they are tested instead.
ELSEWHERE = {
    "greedy_advance": "test_generate.py, test_cuda.py (decoding)",
    "rand": "test_random_ops.py",
    "randn": "test_random_ops.py",
    "randint": "test_random_ops.py",
    "copy_from": "test_cuda.py (device copies)",
    "dropout": "test_dropout.py",
    "attention_dropout": "test_attention_dropout.py",
    "moe_permute": "test_moe.py",
    "moe_permute_backward": "test_moe.py",
    "moe_unpermute": "test_moe.py",
    "moe_unpermute_backward": "test_moe.py",
    "passthrough": "test_autograd_function.py",
    "linear_cross_entropy": "test_linear_cross_entropy.py",
    "flash_attention": "test_flash_attention.py",
    "flash_attention_backward": "test_flash_attention.py",
    "kv_attention": "test_kv_cache.py",
    "kv_append_attention": "test_kv_cache.py",
    "sample_tokens": "test_sampling.py",
    "norm_linear": "test_norm_linear.py",
    "linear_bias": "test_linear_bias.py (asked for where the backend prefers it: not on the CPU)",
    "linear_bias_backward": "test_linear_bias.py",
    "logical_not": "optable_compat.py (masked_fill_ with a negated mask), test_cuda.py",
}


def test_the_contract_is_read_from_the_specs():
    assert PRIMITIVES | OPTIONAL == KERNELS == set(opspec.SPECS) and not PRIMITIVES & OPTIONAL
    assert WRITES_INPUTS == {"assign": (0,), "kv_append_attention": (1, 2), "greedy_advance": (1, 2)}
    assert OPTIONAL_PAIRS["rms_norm"] == ("rms_norm_backward",) and OPTIONAL_PAIRS["rope"] == ()
    assert set(OPTIONAL_PAIRS) == set(FALLBACKS) | CAPABILITY_GATED
    for name, spec in opspec.SPECS.items():
        assert GRADIENTS.get(name) is spec.grad_rule, name
        assert spec == name and hash(spec) == hash(name) and opspec.SPECS[name] is spec


def test_every_spec_is_complete():
    for name, spec in opspec.SPECS.items():
        if spec.optional and spec.backward_of is None:
            assert spec.composite is not None or spec.gate, f"{name}: an optional kernel needs a fallback or a gate"
        if spec.gate:
            assert callable(getattr(Backend, spec.gate, None)), f"{name}: gate {spec.gate} is no Backend method"
        for backward in spec.backward:
            assert backward.optional and backward.backward_of is spec and backward.composite is None, backward
        if spec.writes:
            assert spec.grad_rule is None, f"{name} writes its inputs: it has no gradient"
        fn = spec.torch_function
        if spec.method:
            assert getattr(gc.Tensor, fn.__name__) is fn, name
        if spec.out:
            assert getattr(gc, fn.__name__).__wrapped__ is fn, name


def test_a_spec_is_declared_once_and_pickles_as_itself():
    with pytest.raises(ValueError, match="declared twice"):
        opspec.OpSpec("rms_norm")
    assert pickle.loads(pickle.dumps(opspec.RMS_NORM)) is opspec.RMS_NORM


def test_ops_name_their_spec_not_a_string():
    """apply(...) and @gradient(...) take the spec constant (opspec.RMS_NORM), which an editor can
    follow; a string literal there would be a second spelling of the name. (tensor.py and
    ops/inplace.py still pass a few names as strings: a spec equals its name, so both work.)"""
    root = pathlib.Path(gc.__file__).parent
    found = [
        f"{path.relative_to(root)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
        for path in sorted(root.rglob("*.py"))
        if path.name not in ("tensor.py", "inplace.py")
        for text in [path.read_text()]
        for m in re.finditer(r"(?<![\w.])(apply|gradient)\(\s*[\"']\w+[\"']", text)
    ]
    assert not found, "name the op's spec (gradcraft/backend/opspec.py):\n" + "\n".join(found)


def _first_sample_kernels(op) -> set:
    """The kernels the CPU runs for an op-table row's first sample, forward and backward."""
    backend = get_backend("cpu")
    ran, run = set(), backend.run
    backend.run = lambda name, args, attrs: (ran.add(name), run(name, args, attrs))[1]
    try:
        check_op(op, op.samples[0], "float64")
    finally:
        del backend.run
    return ran


@functools.cache
def _rows_by_kernel() -> dict:
    rows: dict = {}
    for op in OPS:
        for name in _first_sample_kernels(op):
            rows.setdefault(name, []).append(op)
    return rows


def test_the_op_table_runs_every_kernel_of_the_contract():
    ran = set(_rows_by_kernel())
    assert not set(ELSEWHERE) & ran, f"run by the op table now, drop from ELSEWHERE: {sorted(set(ELSEWHERE) & ran)}"
    missing = KERNELS - ran - set(ELSEWHERE)
    assert not missing, f"add an op-table row (tests/optable.py) that runs: {sorted(missing)}"


@pytest.mark.parametrize("name", sorted(FALLBACKS))
def test_fallback_matches_torch_on_the_op_table(name, request):
    """The spec's fallback, through the rows that run its kernel: forward and gradients against PyTorch."""
    rows = _rows_by_kernel().get(name, [])  # (with the full kernel table: before primitives_only)
    if not rows:
        pytest.skip(f"no op-table row runs {name} ({ELSEWHERE[name]})")
    primitives_only = request.getfixturevalue("primitives_only")
    ran = set()
    run = primitives_only.run
    primitives_only.run = lambda op, args, attrs: (ran.add(op), run(op, args, attrs))[1]
    try:
        for op in rows:
            for sample in op.samples:
                check_op(op, sample, "float32")  # (the erf of gelu's fallback is good to 1.5e-7)
    finally:
        del primitives_only.run
    assert name not in ran and ran <= PRIMITIVES
