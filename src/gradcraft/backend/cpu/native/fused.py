"""Generated C kernels for fused elementwise groups on the CPU (engine/fusion.py's programs).

One kernel per program and input layout: one loop over the output's elements (split into ranges that
the CPU backend's threads share) that loads each input at its broadcast position, runs the program's
ops in registers and stores the last value: one pass over memory instead of one per op. Compiled with
the machine's C compiler by compiler.build_source (one shared object per distinct source, cached on
disk by a hash of it), loaded with ctypes; with no compiler (or GRADCRAFT_CPU_NATIVE=0) `available()`
is False and the backend runs groups by its reference, each op's NumPy kernel in turn.

Every op computes as the unfused CPU kernel does, so results equal the unfused graph's:
- bitwise for arithmetic (+ - * /, neg, abs, sign, relu, max/min with NaN winning, sqrt, rsqrt as
  1/sqrt), comparisons, `where`, logical_not, casts and constants: IEEE operations in the op's own
  dtype, with -ffp-contract=off so that no a*b+c becomes one fused multiply-add;
- half precision as the NumPy kernels do it: float32 arithmetic, each op's result rounded to its
  float16/bfloat16 dtype where the unfused kernel stores it;
- within a few float32 ulps for the transcendental functions: exp, tanh and log (and sigmoid, which
  the CPU computes as 0.5 tanh(x/2) + 0.5) are vectorizable polynomials (fused_math.h), sin, cos and
  pow libm's (pow with an exponent of 2 or 1 is x * x or x: exact); SiLU and GELU (and their
  gradients) in float32 use the expressions of the compiled kernels of kernels.c. NumPy's own SIMD
  exp/tanh/log differ from these by an ulp or two.

Input layouts: the output's own shape and C order (`in[i]`), one value (`in[0]`), or anything else
(a bias, a row statistic, a transposed view) by strides over the output's dimensions, collapsed
where they can be and passed at run time, so that one kernel serves every shape.
"""

import ctypes
import math
import os
import sys
import threading

import numpy as np

from gradcraft.backend.cpu.native import compiler
from gradcraft.backend.cpu.native.common import _over_rows

DEBUG = int(os.environ.get("GRADCRAFT_DEBUG", "0") or 0)
# Outputs smaller than this run by the reference (each op's NumPy kernel): a new kernel costs a compile
# (~0.1-0.5 s, once per machine thanks to the disk cache), which small arrays never earn back.
_MIN = os.environ.get("GRADCRAFT_CPU_FUSION_MIN", "")
MIN_ELEMENTS = int(_MIN) if _MIN.isdigit() else 1 << 16
FLAGS = (*compiler.FLAGS, "-ffp-contract=off")
_BASIC_FLAGS = (*compiler._BASIC_FLAGS, "-ffp-contract=off")

_STORAGE = {
    "float32": "float",
    "float64": "double",
    "float16": "uint16_t",
    "bfloat16": "uint16_t",
    "bool": "unsigned char",
    "int32": "int32_t",
    "int64": "int64_t",
}
_LOAD = {"float16": "f16_to_f32({})", "bfloat16": "bf16_to_f32({})", "bool": "({} != 0)"}
_VALUE = {"float64": "double", "bool": "bool", "int32": "int32_t", "int64": "int64_t"}  # others: float
_P, _I = ctypes.c_void_p, ctypes.c_int64
_ARGTYPES = (_P, _P, _P, _I, _I)

_lock = threading.Lock()  # two Python threads may compile the same kernel at once
_kernels: dict = {}  # source text -> ctypes function, or None where compiling failed


def available() -> bool:
    """Whether generated kernels can be compiled here: the native kernels' compiler is there (and not
    switched off by GRADCRAFT_CPU_NATIVE=0)."""
    return compiler.library() is not None


def _value_type(name: str) -> str:
    return _VALUE.get(name, "float")


def _math(kind: str) -> dict:
    """Names of the maths functions for float or double values."""
    if kind == "double":
        return dict(exp="exp", log="log", sqrt="sqrt", sin="sin", cos="cos", tanh="tanh", pow="pow", abs="fabs")
    names = dict(exp="gc_expf", log="gc_logf", sqrt="sqrtf", sin="sinf", cos="cosf", tanh="gc_tanhf", pow="powf")
    return {**names, "abs": "fabsf"}


def _round(expr: str, name: str) -> str:
    """The value as the unfused kernel stores it (float16/bfloat16 round; the others are exact)."""
    if name == "float16":
        return f"f16_to_f32(f32_to_f16({expr}))"
    if name == "bfloat16":
        return f"bf16_to_f32(f32_to_bf16({expr}))"
    return expr


_S, _C3 = "0.7978845608028654", "0.044715"  # sqrt(2/pi) and GELU's cubic coefficient


def _activation(op: str, a: str, b: str, t: str, native: bool, tanh_form: bool) -> str:
    """SiLU and GELU and their gradients (b: the incoming gradient). native: float32, as kernels.c's
    silu_f32... compute them; else as the NumPy kernels (backend/cpu/activations.py) do, in type t."""
    f = "f" if t == "float" else ""
    m = _math(t)
    if native:
        inner = f"2.0f * {_S}f * {a} * (1.0f + {_C3}f * {a} * {a})"
        return {
            "silu": f"{a} * sigmoid_f({a})",
            "silu_backward": f"{b} * sigmoid_f({a}) * (1.0f + {a} * (1.0f - sigmoid_f({a})))",
            "gelu": f"{a} * sigmoid_f({inner})"
            if tanh_form
            else f"0.5f * {a} * (1.0f + erf_f({a} * 0.7071067811865476f))",
            "gelu_backward": f"{b} * sigmoid_f({inner}) * (1.0f + 2.0f * (1.0f - sigmoid_f({inner})) * "
            f"({_S}f * {a} * (1.0f + 3.0f * {_C3}f * {a} * {a})))"
            if tanh_form
            else f"{b} * (0.5f * (1.0f + erf_f({a} * 0.7071067811865476f)) + "
            f"{a} * exp_f(-0.5f * {a} * {a}) * 0.3989422804014327f)",
        }[op]
    sig = f"(0.5{f} * {m['tanh']}(0.5{f} * {a}) + 0.5{f})"
    erf = "erf" if t == "double" else "erf_f"
    u = f"(((({a} * {a}) * {_C3}{f} + 1.0{f}) * {a}) * {_S}{f})"
    return {
        "silu": f"{sig} * {a}",
        "silu_backward": f"({sig} * ((1.0{f} - {sig}) * {a} + 1.0{f})) * {b}",
        "gelu": f"((1.0{f} + {m['tanh']}({u})) * {a}) * 0.5{f}"
        if tanh_form
        else f"((1.0{f} + {erf}({a} * 0.7071067811865476{f})) * {a}) * 0.5{f}",
        "gelu_backward": f"(((1.0{f} + {m['tanh']}({u})) * 0.5{f}) + (1.0{f} - {m['tanh']}({u}) * {m['tanh']}({u})) * "
        f"(((({a} * {a}) * (3.0{f} * {_C3}{f}) + 1.0{f}) * {a}) * (0.5{f} * {_S}{f}))) * {b}"
        if tanh_form
        else f"(0.5{f} * (1.0{f} + {erf}({a} * 0.7071067811865476{f})) + "
        f"{a} * {m['exp']}(-0.5{f} * {a} * {a}) * 0.3989422804014327{f}) * {b}",
    }[op]


_BINARY = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _expression(op, refs, attrs, out_name, types, exponent) -> str:
    """The C expression of one op over values v<ref> (types[ref]: their C types)."""
    a = f"v{refs[0]}" if refs else ""
    b = f"v{refs[1]}" if len(refs) > 1 else ""
    t = _value_type(out_name)
    if t == "bool" and op not in _COMPARE and op not in ("logical_not", "cast", "where", "full"):
        t = "float"  # (arithmetic on masks: computed as numbers, stored as 0/1)
    wide = "double" if "double" in (types[r] for r in refs) else "float"  # (what a comparison compares in)
    f = "f" if t == "float" else ""
    m = _math(t)
    if op in _BINARY:
        return f"{a} {_BINARY[op]} {b}"
    if op in _COMPARE:
        return f"({wide}){a} {_COMPARE[op]} ({wide}){b}"
    if op == "cast":
        if out_name in ("float16", "bfloat16") and types[refs[0]] == "double":
            return f"f64_to_f32_odd({a})"  # (rounded once, not twice)
        return f"({a} != 0)" if out_name == "bool" else f"({t}){a}"
    if op == "where":
        return f"{a} ? ({t}){b} : ({t}){f'v{refs[2]}'}"
    if op == "logical_not":
        return f"!{a}"
    if op in ("silu", "silu_backward", "gelu", "gelu_backward"):
        return _activation(op, a, b, t, out_name == "float32", attrs.get("approximate") == "tanh")
    if op == "pow":
        if exponent == 2.0:
            return f"{a} * {a}"
        if exponent == 1.0:
            return a
        return f"{m['pow']}({a}, {b})"
    unary = {
        "neg": f"-{a}",
        "abs": f"{m['abs']}({a})",
        "sign": f"({a} != {a}) ? {a} : ({t})(({a} > 0) - ({a} < 0))",
        "relu": f"({a} > 0 || {a} != {a}) ? {a} : 0",
        "exp": f"{m['exp']}({a})",
        "log": f"{m['log']}({a})",
        "sqrt": f"{m['sqrt']}({a})",
        "rsqrt": f"1.0{f} / {m['sqrt']}({a})",
        "sin": f"{m['sin']}({a})",
        "cos": f"{m['cos']}({a})",
        "tanh": f"{m['tanh']}({a})",
        "sigmoid": f"0.5{f} * {m['tanh']}(0.5{f} * {a}) + 0.5{f}",
        "maximum": f"({a} > {b} || {a} != {a}) ? {a} : {b}",  # NaN wins; ties give b, as NumPy's
        "minimum": f"({a} < {b} || {a} != {a}) ? {a} : {b}",
    }
    return unary[op]


def _layout(args, shape):
    """(classes, dims, strides): how each input is read at output element i. classes[k]: 'i' (the
    output's own layout: in[i]), '0' (one value), or for the others ('c', 'b', 's': inner stride 1, 0
    or any) strides[k], over `dims`: the output's dimensions without those of size 1, merged where
    every strided input allows (dims[-1] is the inner loop's length)."""
    nd = len(shape)
    own = [0] * nd
    step = 1
    for d in reversed(range(nd)):
        own[d] = step if shape[d] > 1 else 0
        step *= shape[d]
    classes, full = [], []
    for a in args:
        st = [0] * nd
        for d in range(a.ndim):
            if a.shape[d] > 1:
                st[nd - a.ndim + d] = a.strides[d] // a.itemsize
        if a.size == 1:
            classes.append("0")
        elif st == own:
            classes.append("i")
        else:
            classes.append("s")
            full.append(st)
    if not full:
        return tuple(classes), (), ()
    dims, strides = [], []  # merged from the outermost dimension in
    for d in range(nd):
        if shape[d] == 1:
            continue
        if dims and all(s[-1] == st[d] * shape[d] for s, st in zip(strides, full)):
            dims[-1] *= shape[d]
            for s, st in zip(strides, full):
                s[-1] = st[d]
        else:
            dims.append(shape[d])
            if not strides:
                strides = [[] for _ in full]
            for s, st in zip(strides, full):
                s.append(st[d])
    it = iter(strides)
    for k, c in enumerate(classes):
        if c == "s":
            inner = next(it)[-1]
            classes[k] = "c" if inner == 1 else "b" if inner == 0 else "s"
    return tuple(classes), tuple(dims), tuple(tuple(s) for s in strides)


_SCALAR_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "neg": np.negative}


def _scalar(program, args, ref):
    """The value at program position ref where it is one number for every element (an input of one
    value, a constant, or +-*/ of such: a gradient's exponent b - 1), computed as the unfused kernels
    would; else None."""
    entry = program[ref]
    if entry[0] == "in":
        a = args[entry[1]]
        return (
            a.reshape(-1)[:1].astype(np.float32 if a.dtype.kind == "f" and a.itemsize < 4 else a.dtype)
            if a.size == 1
            else None
        )
    if entry[1] == "full":
        return np.array([dict(entry[3])["value"]], entry[4])
    if entry[1] not in _SCALAR_OPS:
        return None
    values = [_scalar(program, args, r) for r in entry[2]]
    if any(v is None for v in values):
        return None
    return _SCALAR_OPS[entry[1]](*values).astype(entry[4])


def _is_scalar(program, args, ref) -> bool:
    entry = program[ref]
    if entry[0] == "in":
        return args[entry[1]].size == 1
    return entry[1] == "full" or (entry[1] in _SCALAR_OPS and all(_is_scalar(program, args, r) for r in entry[2]))


def _exponent(program, args, ref):
    """The value of a pow's exponent where it is one number, 2 or 1 (baked into the source: pow(x, 2)
    is x * x bitwise, infinities and NaN included, pow(x, 1) is x), else None."""
    value = _scalar(program, args, ref)
    if value is None:
        return None
    value = float(value[0])
    return value if value in (2.0, 1.0) else None


def source(program, args, shape, dtype, layout=None, alias=None) -> str:
    """The kernel's C source (public for tests and GRADCRAFT_DEBUG). Its arguments: p (the inputs'
    and the output's addresses), m (the inner length, the outer dimensions, then each strided input's
    strides), k (the constants of `full` ops, as doubles), and the range [lo, hi) of output elements.
    alias[k]: the first input that is the same array as input k (its value is loaded once)."""
    classes, dims, _ = layout or _layout(args, shape)
    outer = max(len(dims) - 1, 0)
    out_name = np.dtype(dtype).name
    lines = [f"    {_STORAGE[a.dtype.name]} const *restrict in{k} = p[{k}];" for k, a in enumerate(args)]
    lines.append(f"    {_STORAGE[out_name]} *restrict out = p[{len(args)}];")
    body, types, constants, loaded = [], {}, 0, {}
    for n, entry in enumerate(program):
        if entry[0] == "in":
            k, name = entry[1], entry[2]
            types[n] = _value_type(name)
            j = alias[k] if alias else k
            if j in loaded:
                body.append(f"            const {types[n]} v{n} = v{loaded[j]};")
                continue
            loaded[k] = n
            index = {"i": "i", "0": "0", "c": "j", "b": "0", "s": "j * s{k}"}[classes[k]].format(k=k)
            pointer = f"in{k}" if classes[k] in "i0" else f"a{k}"
            load = _LOAD.get(name, "{}").format(f"{pointer}[{index}]")
            body.append(f"            const {types[n]} v{n} = {load};")
            continue
        _, op, refs, attrs, name, _ = entry
        attrs = dict(attrs)
        types[n] = _value_type(name)
        if op == "full":
            expr = f"({types[n]})k[{constants}]"
            constants += 1
        else:
            exponent = _exponent(program, args, refs[1]) if op == "pow" else None
            expr = _expression(op, refs, attrs, name, types, exponent)
            expr = f"({types[n]})({expr})" if types[n] != "bool" else f"({expr})"
        body.append(f"            const {types[n]} v{n} = {_round(expr, name)};")
    last = f"v{len(program) - 1}"
    store = {"float16": f"f32_to_f16({last})", "bfloat16": f"f32_to_bf16({last})"}.get(out_name, last)
    body.append(f"            out[i] = {store};")
    text = ['#include "fused_math.h"\n', "typedef int64_t i64;\n\n"]
    text.append("void fused(void **p, const i64 *m, const double *k, i64 lo, i64 hi) {\n")
    text += [line + "\n" for line in lines]
    if not dims:  # every input in the output's layout or one value: one flat loop
        text.append("    (void)m;\n    (void)k;\n#pragma omp simd\n    for (i64 i = lo; i < hi; i++) {\n")
        text += [line[4:] + "\n" for line in body]
        text.append("    }\n}\n")
        return "".join(text)
    strided = [k for k, c in enumerate(classes) if c in "cbs"]
    text.append("    (void)k;\n    const i64 L = m[0];\n    i64 start = lo;\n    while (start < hi) {\n")
    text.append("        const i64 row = start / L, col = start - row * L;\n")
    text.append("        const i64 n = (L - col < hi - start) ? L - col : hi - start;\n")
    at = 1 + outer
    offsets = []
    for k in strided:
        text.append(f"        i64 o{k} = 0;\n")
        if classes[k] == "s":
            text.append(f"        const i64 s{k} = m[{at + outer}];\n")
        offsets.append((k, at))
        at += outer + 1
    if outer:
        text.append("        i64 q = row, c;\n")
        for d in reversed(range(outer)):
            text.append(f"        c = q % m[{1 + d}]; q /= m[{1 + d}];\n")
            for k, base in offsets:
                text.append(f"        o{k} += c * m[{base + d}];\n")
    for k in strided:
        inner = {"c": " + col", "b": "", "s": f" + col * s{k}"}[classes[k]]
        text.append(f"        {_STORAGE[args[k].dtype.name]} const *restrict a{k} = in{k} + o{k}{inner};\n")
    text.append("#pragma omp simd\n        for (i64 j = 0; j < n; j++) {\n            const i64 i = start + j;\n")
    text += [line + "\n" for line in body]
    text.append("        }\n        start += n;\n    }\n}\n")
    return "".join(text)


def _meta(dims, strides) -> np.ndarray:
    """The m argument: inner length, outer dimensions, then each strided input's outer strides and its
    inner stride."""
    values = [dims[-1], *dims[:-1]]
    for s in strides:
        values += [*s[:-1], s[-1]]
    return np.array(values, np.int64)


def _kernel(text: str):
    """The compiled kernel of a source (None where it cannot be compiled), compiled on first use."""
    fn = _kernels.get(text, False)
    if fn is not False:
        return fn
    with _lock:
        if text in _kernels:
            return _kernels[text]
        if DEBUG >= 2:
            print(f"[gradcraft] fused C kernel:\n{text}", file=sys.stderr)
        fn = None
        cc = compiler.find_compiler()
        for flags in (FLAGS, _BASIC_FLAGS):
            try:
                path = compiler.build_source(text, "fused", cc, flags)
                fn = ctypes.CDLL(str(path)).fused
                fn.argtypes, fn.restype = _ARGTYPES, None
                break
            except (RuntimeError, OSError) as e:
                error = e
        if fn is None and DEBUG:
            print(f"[gradcraft] fused C kernel not compiled ({error}): the ops run one by one", file=sys.stderr)
        _kernels[text] = fn
        return fn


def _plan(program, args, shape, dtype, alias):
    """What a call needs besides the arrays' addresses: (kernel or None, m, k, the pow exponents'
    inputs, source by exponents), for one program over inputs of these shapes, strides and dtypes, and
    of this pattern of inputs that are the same array (alias)."""
    if any(a.ndim > len(shape) or a.dtype.name not in _STORAGE for a in args):
        return (None, None, None, (), {}, None)  # (no layout or dtype of the fusion pass's: the reference)
    layout = _layout(args, shape)
    meta = _meta(layout[1], layout[2]) if layout[1] else np.zeros(1, np.int64)
    values = [float(np.asarray(dict(e[3])["value"], e[4])) for e in program if e[0] == "op" and e[1] == "full"]
    constants = np.array(values or [0.0], np.float64)
    # a pow whose exponent is one number: the source depends on its value (2 and 1: exact forms)
    powers = tuple(e[2][1] for e in program if e[0] == "op" and e[1] == "pow" and _is_scalar(program, args, e[2][1]))

    def kernel(arrays):  # (holds no array: a plan outlives the call)
        return _kernel(source(program, arrays, shape, dtype, layout, alias))

    return (None if powers else kernel(args), meta, constants, powers, {}, kernel)


_plans: dict = {}
MAX_PLANS = 4096  # (forgotten all at once when full: a plan is cheap to make again, its kernel stays compiled)


def run(args, program, shape, dtype, empty, reference):
    """The group's output (a new array from empty(shape, dtype)), by its generated kernel; by
    reference() where the output is small or the kernel cannot be had."""
    n = math.prod(shape)
    if n < MIN_ELEMENTS or not available():
        return reference()
    addresses = [a.ctypes.data for a in args]
    # inputs that are the same array (a tensor the group reads several times) are loaded once
    first: dict = {}
    alias = tuple(
        [first.setdefault((x, a.shape, a.strides, a.dtype), k) for k, (x, a) in enumerate(zip(addresses, args))]
    )
    key = (program, tuple(shape), np.dtype(dtype), tuple([(a.shape, a.strides, a.dtype) for a in args]), alias)
    plan = _plans.get(key)
    if plan is None:
        if len(_plans) >= MAX_PLANS:
            _plans.clear()
        plan = _plans[key] = _plan(program, args, tuple(shape), dtype, alias)
    fn, meta, constants, powers, by_exponent, make = plan
    if powers:  # (a kernel for each exponent value of a different source: 2, 1, any other)
        exponents = tuple(_exponent(program, args, r) for r in powers)
        fn = by_exponent.get(exponents, False)
        if fn is False:
            fn = by_exponent[exponents] = make(args)
    if fn is None:
        return reference()
    out = empty(shape, dtype)
    pointers = (ctypes.c_void_p * (len(args) + 1))(*addresses, out.ctypes.data)
    p, m, k = ctypes.addressof(pointers), meta.ctypes.data, constants.ctypes.data
    _over_rows(lambda lo, hi: fn(p, m, k, lo, hi), n, 1)
    return out
