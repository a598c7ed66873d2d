"""backend/cuda/pdl.py without a GPU: the driver structures' C layouts, the packing of kernel
arguments into cuLaunchKernelEx's `void** kernelParams`, and GRADCRAFT_PDL (off unless =1). (The launches
themselves: tests/test_cuda_linear.py, on a GPU.)"""

import ctypes
import types

import numpy as np
import pytest

from gradcraft.backend.cuda import pdl


def test_structures_have_cuda_h_layouts():
    # CUlaunchAttributeValue: char pad[64]; CUlaunchAttribute: id, pad to 8, the value
    assert ctypes.sizeof(pdl._AttributeValue) == 64
    assert pdl._Attribute.value.offset == 8 and ctypes.sizeof(pdl._Attribute) == 72
    # CUlaunchConfig: 7 unsigned ints, then the stream (8-aligned), the attributes, their count
    assert pdl._Config.sharedMemBytes.offset == 24
    assert (pdl._Config.hStream.offset, pdl._Config.attrs.offset, pdl._Config.numAttrs.offset) == (32, 40, 48)
    assert ctypes.sizeof(pdl._Config) == 56
    attribute = pdl._Attribute(id=pdl.PROGRAMMATIC_STREAM_SERIALIZATION)
    attribute.value.allowed = 1
    raw = bytes(attribute)
    assert raw[:4] == (6).to_bytes(4, "little") and raw[8:12] == (1).to_bytes(4, "little")


def _device_array(address):
    return types.SimpleNamespace(data=types.SimpleNamespace(ptr=address))  # what pack reads of a cupy.ndarray


def test_pack_gives_each_argument_its_width_and_value():
    args = (
        _device_array(0x7F00_1234_5600),
        np.int64(-(2**40) - 3),
        np.int32(-7),
        np.uint64(2**63 + 5),
        np.float32(1.5),
        np.float64(-(2.0**-30)),
        _device_array(0),  # a NULL pointer (launch.ptr(None))
    )
    params, values = pdl.pack(args)
    expected = [
        (ctypes.c_uint64, 0x7F00_1234_5600),
        (ctypes.c_int64, -(2**40) - 3),
        (ctypes.c_int32, -7),
        (ctypes.c_uint64, 2**63 + 5),
        (ctypes.c_float, 1.5),
        (ctypes.c_double, -(2.0**-30)),
        (ctypes.c_uint64, 0),
    ]
    assert len(params) == len(values) == len(expected)
    for i, (kind, value) in enumerate(expected):
        assert type(values[i]) is kind, i
        assert params[i] == ctypes.addressof(values[i]), i  # kernelParams[i] points at argument i's value
        assert ctypes.cast(params[i], ctypes.POINTER(kind)).contents.value == value, i
    # the bytes a kernel reads: exactly the argument's width
    assert ctypes.string_at(params[2], 4) == np.int32(-7).tobytes()
    assert ctypes.string_at(params[4], 4) == np.float32(1.5).tobytes()
    assert ctypes.string_at(params[1], 8) == np.int64(-(2**40) - 3).tobytes()


def test_pack_refuses_what_no_kernel_takes():
    with pytest.raises(TypeError, match="argument 1"):
        pdl.pack((_device_array(16), 3))  # a Python int: its width would be a guess
    with pytest.raises(TypeError, match="float16"):
        pdl.pack((np.float16(1.0),))


def test_available_honours_gradcraft_pdl(monkeypatch):
    monkeypatch.setattr(pdl, "supported", lambda: True)
    monkeypatch.delenv("GRADCRAFT_PDL", raising=False)
    assert not pdl.available()  # off unless asked for (slower end to end on the H200)
    monkeypatch.setenv("GRADCRAFT_PDL", "0")
    assert not pdl.available()
    monkeypatch.setenv("GRADCRAFT_PDL", "1")
    assert pdl.available()
    monkeypatch.setattr(pdl, "supported", lambda: False)
    assert not pdl.available()  # (turned on, but no sm_90 device, driver or CuPy)


def test_unsupported_without_cupy_or_a_gpu():
    try:
        import cupy  # noqa: F401

        pytest.skip("CuPy is installed: supported() depends on the device")
    except ImportError:
        assert not pdl.supported() and not pdl.available()
