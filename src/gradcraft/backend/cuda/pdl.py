"""Programmatic dependent launch (PDL): launching a kernel so that it may start while the kernel
before it in the stream still runs (sm_90 and later, CUDA 12.3+ for CUDA-graph capture).

A kernel launched here must call common.cuh's `pdl_wait()` before it reads anything an earlier
kernel writes and before it writes anything an earlier kernel may still read (kernels/gemv.cu's
products: their weight loads come first). A kernel launched normally after one launched here simply
waits for it, as stream order always does, so only the launchers of such kernels use `launch`.

CuPy's kernel launch takes no launch attributes, so `launch` calls the driver's cuLaunchKernelEx
through ctypes, on the CUfunction CuPy compiled (`Function.ptr`) and CuPy's current stream; stream
capture records the launch as a programmatic edge of the graph. Off by default (measured slower end to
end on the H200, docs/cuda.md); GRADCRAFT_PDL=1 turns it on, for weights stored in the compute dtype
only: gemv.cu's products load their weight before pdl_wait(), so a weight cast by the kernel just
before (float32 weights under a bf16 compute dtype) could be read before that cast has finished.
Off, every kernel launches through CuPy. CuPy is imported only when a device is asked about, so this
module imports without it.
"""

import ctypes
import functools
import os

import numpy as np

# cuda.h: CUlaunchAttributeID's CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
PROGRAMMATIC_STREAM_SERIALIZATION = 6
MIN_DRIVER = 12030  # cuDriverGetVersion's 12.3: captures programmatic launches into graphs


class _AttributeValue(ctypes.Union):
    """CUlaunchAttributeValue: a 64-byte union (`char pad[64]`; 8-byte aligned: some members hold
    pointers); PDL's member is `int programmaticStreamSerializationAllowed`."""

    _fields_ = [("pad", ctypes.c_char * 64), ("event", ctypes.c_void_p), ("allowed", ctypes.c_int)]


class _Attribute(ctypes.Structure):
    """CUlaunchAttribute: `CUlaunchAttributeID id; char pad[8 - sizeof(id)]; CUlaunchAttributeValue value`
    (72 bytes: the value at offset 8)."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", _AttributeValue)]


class _Config(ctypes.Structure):
    """CUlaunchConfig: grid and block sizes, dynamic shared memory, stream, attributes."""

    _fields_ = [
        ("gridDimX", ctypes.c_uint),
        ("gridDimY", ctypes.c_uint),
        ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint),
        ("blockDimY", ctypes.c_uint),
        ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("hStream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(_Attribute)),
        ("numAttrs", ctypes.c_uint),
    ]


# A kernel argument's ctypes type by the NumPy scalar type the launchers pass (launch.py's i32, i64,
# f64, ptr): the widths CuPy's own launch gives them.
_SCALARS = {
    np.dtype(np.int32): ctypes.c_int32,
    np.dtype(np.int64): ctypes.c_int64,
    np.dtype(np.uint64): ctypes.c_uint64,
    np.dtype(np.float32): ctypes.c_float,
    np.dtype(np.float64): ctypes.c_double,
}


def pack(args) -> tuple:
    """The kernel's arguments as cuLaunchKernelEx's `void** kernelParams`: (the array of pointers, the
    ctypes values it points at; keep both alive until the launch returns). A device array (anything
    with `.data.ptr`, as a cupy.ndarray) becomes its pointer; a NumPy scalar a value of its width."""
    values = []
    for i, a in enumerate(args):
        if isinstance(a, np.generic):
            kind = _SCALARS.get(a.dtype)
            if kind is None:
                raise TypeError(f"PDL launch: argument {i} is a {a.dtype} scalar, which no kernel here takes")
            values.append(kind(a.item()))
        elif hasattr(a, "data") and hasattr(a.data, "ptr"):
            values.append(ctypes.c_uint64(a.data.ptr))
        else:
            raise TypeError(
                f"PDL launch: argument {i} ({type(a).__name__}) is neither a device array nor a NumPy scalar"
            )
    params = (ctypes.c_void_p * max(1, len(values)))(*(ctypes.addressof(v) for v in values))
    return params, values


@functools.cache
def _driver():
    """libcuda with cuLaunchKernelEx, or None (no driver, or one older than CUDA 12.0)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    if not hasattr(lib, "cuLaunchKernelEx"):
        return None
    lib.cuLaunchKernelEx.argtypes = [ctypes.POINTER(_Config), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.cuLaunchKernelEx.restype = ctypes.c_int
    lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    lib.cuGetErrorString.restype = ctypes.c_int
    lib.cuDriverGetVersion.argtypes = [ctypes.POINTER(ctypes.c_int)]
    lib.cuDriverGetVersion.restype = ctypes.c_int
    return lib


@functools.cache
def _device_supports(device_id: int) -> bool:
    import cupy as cp

    lib = _driver()
    if lib is None:
        return False
    version = ctypes.c_int()
    if lib.cuDriverGetVersion(ctypes.byref(version)) != 0 or version.value < MIN_DRIVER:
        return False
    return int(cp.cuda.Device(device_id).compute_capability) >= 90


def supported() -> bool:
    """Whether PDL launches work here: CuPy present, a driver with cuLaunchKernelEx (CUDA 12.3 or
    later, for graph capture), and a current device of sm_90 or later."""
    try:
        import cupy as cp
    except ImportError:
        return False
    return _device_supports(cp.cuda.Device().id)


def available() -> bool:
    """Whether kernels written for it launch with PDL: supported() and turned on (GRADCRAFT_PDL=1;
    read at each launch, so a benchmark can time both)."""
    return os.environ.get("GRADCRAFT_PDL", "0").strip() == "1" and supported()


def launch(function, grid, block, args, shared_mem: int = 0) -> None:
    """Launch `function` (a cupy.RawKernel, or the cupy.cuda.Function behind one) on CuPy's current
    stream with the PDL attribute, as `function(grid, block, args, shared_mem=shared_mem)` would
    launch it without. grid and block: tuples of up to 3 sizes."""
    import cupy as cp

    lib = _driver()
    if lib is None:
        raise RuntimeError("PDL launch: libcuda has no cuLaunchKernelEx (a CUDA 12 driver is needed)")
    gx, gy, gz = (tuple(grid) + (1, 1))[:3]
    bx, by, bz = (tuple(block) + (1, 1))[:3]
    attribute = _Attribute(id=PROGRAMMATIC_STREAM_SERIALIZATION)
    attribute.value.allowed = 1
    config = _Config(gx, gy, gz, bx, by, bz, shared_mem, cp.cuda.get_current_stream().ptr, ctypes.pointer(attribute), 1)
    params, values = pack(args)
    handle = function.kernel.ptr if hasattr(function, "kernel") else function.ptr  # a RawKernel's Function
    status = lib.cuLaunchKernelEx(ctypes.byref(config), handle, params, None)
    if status != 0:
        text = ctypes.c_char_p()
        lib.cuGetErrorString(status, ctypes.byref(text))
        message = text.value.decode() if text.value else "unknown error"
        raise RuntimeError(f"PDL launch: cuLaunchKernelEx failed with CUresult {status} ({message})")
    del values  # (alive until here: params points at them)
