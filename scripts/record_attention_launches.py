"""Every flash-attention kernel launch of a tree, recorded without a GPU, to compare two trees.

    python scripts/record_attention_launches.py record OUT.json [--tree DIR] [--quick]
    python scripts/record_attention_launches.py compare A.json B.json

`record` imports backend/cuda/flash_attention.py (attention.py in older trees) from --tree (default: this
checkout) with CuPy replaced by
a recorder: arrays are shapes, strides and made-up pointers from a deterministic allocator, and each
`cuLaunchKernel` (packed.py's path) is kept as its kernel name, grid, block, dynamic shared memory and
arguments, decoded with the launcher's own types (flash_attention.py's *_TYPES), along with the shapes,
strides and pointers of the arrays the launchers return. It walks head dims 32-128, bf16 and fp16,
causal or not, a window, GQA, T != S, empty sequences, strided and misaligned inputs, dropout, the
Hopper kernels on and off, deterministic mode, and every Hopper variant (persistent grids of 1 and 2
blocks too); --quick, a few of them. `compare` says, launch by launch, whether two recordings agree,
agree but for the order of a launch's arguments, or differ (exit status 1 unless all agree).

What it is for: a change to the launchers made on a machine without a GPU can be shown to hand the
kernels exactly what a GPU-tested tree handed them. It does not run a kernel. It reads trees whose
launchers go through packed.py.
"""

import argparse
import ctypes
import importlib.util
import itertools
import json
import math
import os
import struct
import sys
import types

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIRST_POINTER = 1 << 32


# ---------------------------------------------------------------- the stand-in for CuPy


class _Allocator:
    """Made-up device pointers, 256-byte aligned, from the same start for every case."""

    def __init__(self):
        self.next = FIRST_POINTER

    def take(self, nbytes) -> int:
        pointer = self.next
        self.next += -(-max(int(nbytes), 1) // 256) * 256 + 4096
        return pointer


ALLOC = _Allocator()


def _contiguous_strides(shape, itemsize) -> tuple:
    strides, step = [], itemsize
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


class Array:
    """What the launchers read of a cupy.ndarray."""

    def __init__(self, shape, dtype, pointer, strides=None):
        self.shape, self.dtype = tuple(int(s) for s in shape), np.dtype(dtype)
        self.itemsize, self.ndim = self.dtype.itemsize, len(self.shape)
        contiguous = _contiguous_strides(self.shape, self.itemsize)
        self.strides = tuple(strides) if strides is not None else contiguous
        self.size = math.prod(self.shape)
        self.nbytes = self.size * self.itemsize
        self.data = types.SimpleNamespace(ptr=int(pointer))
        self.flags = types.SimpleNamespace(c_contiguous=self.strides == contiguous or self.size <= 1)

    def transpose(self, *axes):
        return Array([self.shape[a] for a in axes], self.dtype, self.data.ptr, [self.strides[a] for a in axes])

    def fill(self, value):
        pass

    def describe(self) -> list:
        return [list(self.shape), list(self.strides), self.data.ptr, str(self.dtype)]


def _install_cupy(recorded: list, names: dict) -> None:
    def launch_kernel(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        marks = (ctypes.c_void_p * 5).from_address(extra)  # (BUFFER_POINTER, buffer, BUFFER_SIZE, &size, END)
        size = ctypes.c_size_t.from_address(marks[3]).value
        recorded.append((names[function], [gx, gy, gz], [bx, by, bz], shared, ctypes.string_at(marks[1], size)))

    class Device:
        def __init__(self, index=0):
            self.id, self.compute_capability = 0, "90"
            self.attributes = {"MultiProcessorCount": 132}

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    class MemoryPointer:
        def __init__(self, nbytes):
            self.ptr = ALLOC.take(nbytes)

    class ndarray:  # noqa: N801  (cupy's name)
        def __new__(cls, shape, dtype, memptr, strides=None):
            return Array(shape, dtype, memptr.ptr, strides)

    def empty(shape, dtype=np.float32):
        shape = shape if isinstance(shape, tuple) else (shape,)
        return Array(shape, dtype, ALLOC.take(math.prod(shape) * np.dtype(dtype).itemsize))

    cupy = types.ModuleType("cupy")
    cupy.ndarray, cupy.empty = ndarray, empty
    cupy.ascontiguousarray = lambda a: Array(a.shape, a.dtype, ALLOC.take(a.nbytes))
    cupy.cuda = types.SimpleNamespace(
        Device=Device,
        MemoryPointer=MemoryPointer,
        alloc=MemoryPointer,
        runtime=types.SimpleNamespace(getDevice=lambda: 0, memsetAsync=lambda *args: None),
        driver=types.SimpleNamespace(launchKernel=launch_kernel, funcSetAttribute=lambda *args: None),
        get_current_stream=lambda: types.SimpleNamespace(ptr=0),
    )
    sys.modules["cupy"], sys.modules["cupyx"] = cupy, types.ModuleType("cupyx")


# ---------------------------------------------------------------- record


def _kernel_types(attention, name: str) -> str:
    """The struct format of kernel `name`'s arguments, from the launcher's own constants."""
    if name.startswith("flash_bwd_dot"):
        return attention.DOT_TYPES
    for prefix, constant in (
        ("flash_fwd_", "FWD_TYPES"),
        ("flash_bwd_dq_", "DQ_TYPES"),
        ("flash_bwd_dkdv_", "DKDV_TYPES"),
    ):
        if name.startswith(prefix):
            return getattr(attention, constant) + attention._DROP
    if name.startswith("hopper_fwd_"):
        persistent = "_wsp" in name or "_wssp" in name
        return attention.PERSISTENT_FWD_TYPES if persistent else attention.FWD_TYPES
    if name.startswith("hopper_bwd_fused") and name.endswith("_ws"):  # (an older tree: no dkv_acc, parts)
        return getattr(attention, "WS_BWD_TYPES", attention.FUSED_TYPES)
    for prefix, constant in (
        ("hopper_bwd_dq_convert", "CONVERT_TYPES"),
        ("hopper_bwd_dq_", "DQ_TYPES"),
        ("hopper_bwd_dkdv_", "DKDV_TYPES"),
        ("hopper_bwd_fused", "FUSED_TYPES"),
    ):
        if name.startswith(prefix):
            return getattr(attention, constant)
    raise ValueError(f"no argument types known for kernel {name}")


def _hopper_variants(attention, tree: str) -> dict:
    """Every Hopper variant's table: the launchers' module's own where it has one, else dev/cuda/flash_variants.py's
    (where the lab's variants live)."""
    if hasattr(attention, "HOPPER_VARIANTS"):
        return attention.HOPPER_VARIANTS
    path = os.path.join(tree, "dev", "cuda", "flash_variants.py")
    spec = importlib.util.spec_from_file_location("_lab_flash_variants", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.HOPPER_VARIANTS


def _cases(attention, quick: bool, variants: dict):
    """(name, function(array maker)) of every case: a call of the launchers on made-up arrays."""
    bf16 = np.dtype("bfloat16")
    shapes = [(2, 4, 4, 300, 300), (1, 8, 2, 256, 256), (1, 2, 2, 300, 40), (3, 2, 2, 128, 512)]
    shapes += [(1, 16, 2, 256, 256)]  # (G = 8: at head dim 128 the fused backward's sweeps are split)
    shapes += [(2, 4, 4, 0, 300), (2, 4, 4, 300, 0)]  # (nothing to attend: no launch, zeroed gradients)
    dims, dtypes = ((64, 128), (bf16,)) if quick else ((32, 64, 96, 128), (bf16, np.float16))
    if quick:
        shapes = shapes[:3]
    options = ((True, False), (None, 16), ("1", "0"), (0.0, 0.25), (False, True), (False, True))
    for (B, H, Hkv, T, S), D, dtype, causal, window, on, p, strided, misaligned in itertools.product(
        shapes, dims, dtypes, *options
    ):
        if strided and (H != Hkv or T != S):
            continue
        attrs = {"scale": D**-0.5, "causal": causal, "window": window}

        def call(make, B=B, H=H, Hkv=Hkv, T=T, S=S, D=D, dtype=dtype, attrs=attrs, p=p, on=on, s=strided, m=misaligned):
            os.environ["GRADCRAFT_HOPPER_ATTENTION"] = on
            q = make((B, H, T, D), dtype, s, misaligned=m)
            k, v = make((B, Hkv, S, D), dtype, s), make((B, Hkv, S, D), dtype, s)
            state = Array((2,), np.int64, ALLOC.take(16))
            out, lse = attention.flash_attention(q, k, v, state, dropout_p=p, stream=3, **attrs)
            returned = [out.describe(), lse.describe()]
            g = make((B, H, T, D), dtype)
            for deterministic in ("0", "1"):
                os.environ["GRADCRAFT_DETERMINISTIC"] = deterministic
                grads = attention.flash_attention_backward(q, k, v, out, lse, g, state, dropout_p=p, stream=3, **attrs)
                returned += [a.describe() for a in grads]
            return returned

        layout = f"strided={strided} misaligned={misaligned}"
        yield f"B{B} H{H}/{Hkv} T{T} S{S} d{D} {np.dtype(dtype)} {attrs} hopper={on} p={p} {layout}", call

    os.environ["GRADCRAFT_HOPPER_ATTENTION"], os.environ["GRADCRAFT_DETERMINISTIC"] = "1", "0"
    for D, (B, H, Hkv, T, S) in itertools.product((64, 128), shapes[:3]):
        for tiles, blocks in itertools.product(variants["fwd"][D], (None, 1, 2)):

            def forward(make, B=B, H=H, Hkv=Hkv, T=T, S=S, D=D, tiles=tiles, blocks=blocks):
                q, k, v = make((B, H, T, D), bf16), make((B, Hkv, S, D), bf16), make((B, Hkv, S, D), bf16)
                out = make((B, T, H, D), bf16).transpose(0, 2, 1, 3)
                lse = make((B, H, T), np.float32)
                strides = [[s // a.itemsize for s in a.strides[:3]] for a in (q, k, v)]
                attention._hopper_fwd(q, k, v, out, lse, *strides, D**-0.5, True, None, tiles=tiles, blocks=blocks)
                return []

            yield f"hopper forward d{D} B{B} H{H}/{Hkv} T{T} S{S} {tiles} blocks={blocks}", forward
        for tiles in zip(variants["dq"][D], variants["dkdv"][D]):

            def backward(make, B=B, H=H, Hkv=Hkv, T=T, S=S, D=D, tiles=tiles):
                q, k, v = make((B, H, T, D), bf16), make((B, Hkv, S, D), bf16), make((B, Hkv, S, D), bf16)
                out, g, lse = make((B, H, T, D), bf16), make((B, H, T, D), bf16), make((B, H, T), np.float32)
                grads = [make((a.shape[0], a.shape[2], a.shape[1], D), bf16).transpose(0, 2, 1, 3) for a in (q, k, v)]
                launches = attention.backward_launches(q, k, v, out, lse, g, *grads, D**-0.5, True, None, tiles=tiles)
                for launch in launches.values():
                    launch()
                return [list(launches)]

            yield f"hopper backward d{D} B{B} H{H}/{Hkv} T{T} S{S} {tiles}", backward


def _make(shape, dtype, strided=False, misaligned=False):
    """An input array: contiguous, or a (B, heads, T, D) view of a packed (B, T, 3, heads, D) projection;
    misaligned: 2 elements past a 16-byte boundary (the launchers copy it)."""
    item = np.dtype(dtype).itemsize
    if strided:
        B, H, T, D = shape
        base = ALLOC.take(B * T * 3 * H * D * item)
        a = Array(shape, dtype, base + H * D * item, (T * 3 * H * D * item, D * item, 3 * H * D * item, item))
    else:
        a = Array(shape, dtype, ALLOC.take(math.prod(shape) * item))
    if misaligned:
        a.data.ptr += 2 * item
    return a


def record(tree: str, out: str, quick: bool) -> int:
    if not os.path.isfile(os.path.join(tree, "src", "gradcraft", "backend", "cuda", "packed.py")):
        print(
            f"error: {tree} has no src/gradcraft/backend/cuda/packed.py; give --tree a gradcraft checkout "
            "whose attention launchers go through packed.py",
            file=sys.stderr,
        )
        return 2
    recorded, names = [], {}
    _install_cupy(recorded, names)
    sys.path.insert(0, os.path.join(os.path.abspath(tree), "src"))
    from gradcraft.backend.cuda import compiler

    try:  # (the flash-attention launchers' module; attention.py in older trees)
        from gradcraft.backend.cuda import flash_attention as attention
    except ImportError:
        from gradcraft.backend.cuda import attention
    from gradcraft.backend.cuda import launch as L

    handles: dict = {}

    def handle(name):  # a made-up CUfunction, one a kernel, that names it
        if name not in handles:
            handles[name] = 0x1000 + 16 * len(handles)
            names[handles[name]] = name
        return handles[name]

    compiler.hopper_function = lambda file, name, device: types.SimpleNamespace(ptr=handle(name))
    L.with_shared = lambda file, name, shared, fixed=0: types.SimpleNamespace(
        kernel=types.SimpleNamespace(ptr=handle(name))
    )
    L.block_counters = lambda count: np.uint64(0xC0000)
    L._sm_count = lambda device: 132
    results = []
    for case, call in _cases(attention, quick, _hopper_variants(attention, os.path.abspath(tree))):
        ALLOC.next = FIRST_POINTER
        recorded.clear()
        try:
            returned = call(_make)
        except Exception as e:  # (a case the tree refuses is part of its behaviour, recorded as such)
            results.append({"case": case, "error": f"{type(e).__name__}: {e}"})
            continue
        launches = []
        for name, grid, block, shared, data in recorded:
            arguments = struct.unpack("@" + _kernel_types(attention, name), data)
            launch = {"kernel": name, "grid": grid, "block": block, "shared": shared, "arguments": list(arguments)}
            launches.append(launch)
        results.append({"case": case, "launches": launches, "returned": returned})
    with open(out, "w") as f:
        json.dump(results, f)
    print(f"{len(results)} cases, {sum(len(r.get('launches', ())) for r in results)} launches -> {out}")
    return 0


# ---------------------------------------------------------------- compare


def _load(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"error: cannot read the recording {path} ({e}); make one with `record`", file=sys.stderr)
        return None


def compare(a_path: str, b_path: str, show: int = 20) -> int:
    a = _load(a_path)
    b = _load(b_path) if a is not None else None
    if a is None or b is None:
        return 2
    if [r["case"] for r in a] != [r["case"] for r in b]:
        print("error: the two recordings walk different cases; record both with the same --quick", file=sys.stderr)
        return 2
    same = 0
    reordered: dict = {}  # kernel -> launches that agree but for their arguments' order
    differ = []
    for x, y in zip(a, b):
        if "error" in x or "error" in y or x["returned"] != y["returned"] or len(x["launches"]) != len(y["launches"]):
            differ.append((x["case"], "the case", x.get("error", ""), y.get("error", "")))
            continue
        for p, q in zip(x["launches"], y["launches"]):
            if p == q:
                same += 1
            elif {**p, "arguments": None} == {**q, "arguments": None} and sorted(p["arguments"]) == sorted(
                q["arguments"]
            ):
                reordered[p["kernel"]] = reordered.get(p["kernel"], 0) + 1
            else:
                differ.append((x["case"], p["kernel"], p, q))
    moved = ", ".join(f"{kernel} {n}" for kernel, n in sorted(reordered.items()))
    print(f"{same} launches agree, {sum(reordered.values())} agree but for their arguments' order", end="")
    print(f" ({moved}), {len(differ)} differ" if moved else f", {len(differ)} differ")
    for case, what, p, q in differ[:show]:
        print(f"  {case}: {what}\n    {p}\n    {q}")
    return 0 if not differ and not reordered else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("record", help="record a tree's launches into a JSON file")
    r.add_argument("out")
    r.add_argument("--tree", default=ROOT, help="the gradcraft checkout to record (default: this one)")
    r.add_argument("--quick", action="store_true", help="a few cases only")
    c = sub.add_parser("compare", help="compare two recordings")
    c.add_argument("a")
    c.add_argument("b")
    args = p.parse_args(argv)
    if args.command == "record":
        return record(args.tree, args.out, args.quick)
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
