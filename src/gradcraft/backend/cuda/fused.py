"""Generated CUDA kernels for fused elementwise groups (engine/fusion.py's programs).

One kernel per program and input layout: a grid-stride loop over the output's elements that loads
each input at its broadcast position, runs the program's ops in registers and stores the last value.
Every op computes as the unfused CUDA kernel does (float arithmetic for float16/bfloat16/float32, a
result rounded to its dtype where that kernel would store it: `round_to`), so the group equals its
kernels run one by one, up to the math library's last bit where the unfused kernel is a CuPy
routine. Sources are built from common.cuh and activations.cuh, compiled by NVRTC through CuPy
(cached in memory by source text here, on disk by CuPy). `source` needs no GPU: tests compile its
output with NVRTC alone (tests/test_fusion.py).

Input layouts: the output's own shape and C order (`x[i]`), one value (`x[0]`), or anything else
(a bias along the last axis, a row statistic, a transposed view) by its strides, with the output's
shape and the strides written into the source as constants.
"""

import math
import os
import sys

import numpy as np

from gradcraft.backend.cuda import compiler

DEBUG = int(os.environ.get("GRADCRAFT_DEBUG", "0") or 0)

_STORAGE = {"float32": "float", "float16": "f16", "bfloat16": "bf16", "bool": "bool", "int32": "int", "int64": "i64"}
_kernels: dict = {}

# C expressions of the ops, on values {a}, {b} (float, or bool for masks); comparisons give bool.
_OPS = {
    "neg": "-{a}",
    "abs": "fabsf({a})",
    "sign": "({a} != {a}) ? {a} : (float)(({a} > 0.f) - ({a} < 0.f))",
    "relu": "({a} > 0.f || {a} != {a}) ? {a} : 0.f",
    "exp": "expf({a})",
    "log": "logf({a})",
    "sqrt": "sqrtf({a})",
    "rsqrt": "1.f / sqrtf({a})",
    "sin": "sinf({a})",
    "cos": "cosf({a})",
    "tanh": "tanhf({a})",
    "sigmoid": "sigmoid({a})",
    "silu": "silu_value({a})",
    "logical_not": "!{a}",
    "add": "{a} + {b}",
    "sub": "{a} - {b}",
    "mul": "{a} * {b}",
    "div": "{a} / {b}",
    "pow": "powf({a}, {b})",
    "maximum": "({a} != {a} || {a} > {b}) ? {a} : {b}",  # NaN wins, as in PyTorch
    "minimum": "({a} != {a} || {a} < {b}) ? {a} : {b}",
    "silu_backward": "{b} * sigmoid({a}) * (1.f + {a} * sigmoid(-{a}))",
    "eq": "{a} == {b}",
    "ne": "{a} != {b}",
    "lt": "{a} < {b}",
    "le": "{a} <= {b}",
    "gt": "{a} > {b}",
    "ge": "{a} >= {b}",
}


def _value_type(dtype_name: str) -> str:
    return "bool" if dtype_name == "bool" else "float"


def _round(expr: str, dtype_name: str) -> str:
    """The value as the unfused kernel would have stored it (float16/bfloat16 round; bool is 0/1)."""
    if dtype_name in ("float16", "bfloat16"):
        return f"to_float(from_float<{_STORAGE[dtype_name]}>({expr}))"
    return expr


def _layout(a, shape) -> str:
    """How input a is read at output element i: 'i', '0', or a strided expression over the
    coordinates c0.. of the output's shape."""
    if a.size == 1:
        return "0"
    if tuple(a.shape) == tuple(shape) and a.flags.c_contiguous:
        return "i"
    offset = len(shape) - a.ndim
    terms = []
    for d in range(a.ndim):
        if a.shape[d] == 1:
            continue
        stride = a.strides[d] // a.itemsize
        if stride:
            terms.append(f"c{offset + d} * {stride}LL")
    return " + ".join(terms) or "0"


def source(program, args, shape, dtype) -> str:
    """The kernel's CUDA source (public for tests and GRADCRAFT_DEBUG)."""
    ndim = len(shape)
    layouts = [_layout(a, shape) for a in args]
    params = [f"const {_STORAGE[a.dtype.name]}* __restrict__ in{k}" for k, a in enumerate(args)]
    out_t = _STORAGE[np.dtype(dtype).name]
    body = []
    if any(layout not in ("i", "0") for layout in layouts):
        body.append("        i64 r = i;")
        for d in reversed(range(ndim)):
            body.append(f"        const i64 c{d} = r % {shape[d]}LL; r /= {shape[d]}LL;")
    for n, entry in enumerate(program):
        if entry[0] == "in":
            k = entry[1]
            load = f"in{k}[{layouts[k]}]"
            name = args[k].dtype.name
            if name == "bool" or name.startswith("int"):
                value = f"({'bool' if name == 'bool' else 'float'}){load}"
            else:
                value = f"to_float({load})"
            body.append(f"        const {_value_type(name if name == 'bool' else 'float32')} v{n} = {value};")
            continue
        _, op, refs, attrs, out_name, _ = entry
        attrs = dict(attrs)
        a, b = (f"v{refs[0]}" if refs else ""), (f"v{refs[1]}" if len(refs) > 1 else "")
        if op == "full":
            value = attrs["value"]
            expr = ("true" if value else "false") if out_name == "bool" else _float_literal(value)
        elif op == "cast":
            expr = f"({a} != 0.f)" if out_name == "bool" else f"(float){a}"
        elif op == "where":
            expr = f"v{refs[0]} ? v{refs[1]} : v{refs[2]}"
        elif op == "gelu":
            expr = f"gelu_value({a}, {int(attrs.get('approximate') == 'tanh')})"
        elif op == "gelu_backward":
            expr = f"{b} * gelu_slope({a}, {int(attrs.get('approximate') == 'tanh')})"
        else:
            expr = "(" + _OPS[op].format(a=a, b=b) + ")"
        body.append(f"        const {_value_type(out_name)} v{n} = {_round(expr, out_name)};")
    last = len(program) - 1
    store = f"v{last}" if out_t in ("float", "bool") else f"from_float<{out_t}>(v{last})"
    return (
        '#include "common.cuh"\n#include "activations.cuh"\n'
        f'extern "C" __global__ void fused({", ".join(params + [f"{out_t}* __restrict__ out", "i64 n"])}) {{\n'
        "    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {\n"
        + "\n".join(body)
        + f"\n        out[i] = {store};\n    }}\n}}\n"
    )


def _float_literal(value) -> str:
    value = float(value)
    if math.isnan(value):
        return "quiet_nan<float>()"
    if math.isinf(value):
        return "(-neg_inf<float>())" if value > 0 else "neg_inf<float>()"
    return float(np.float32(value)).hex() + "f"  # exact: the float32 the unfused `full` kernel holds


def run(args, program, shape, dtype):
    import cupy as cp  # (here: source() and its tests need no GPU)

    from gradcraft.backend.cuda import launch as L

    shape = tuple(shape)
    out = L.empty(shape, dtype)
    n = out.size
    if not n:
        return out
    text = source(program, args, shape, dtype)
    kernel = _kernels.get(text)
    if kernel is None:
        if DEBUG >= 2:
            print(f"[gradcraft] fused kernel:\n{text}", file=sys.stderr)
        full = compiler.expand(text)
        kernel = _kernels[text] = cp.RawKernel(full, "fused", options=compiler.OPTIONS)
    blocks = min(L.grid_1d(n, 256, 4), 16 * L.sm_count())
    kernel((max(blocks, 1),), (256,), (*args, out, np.int64(n)))
    return out
