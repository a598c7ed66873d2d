"""Every kernels/*.cu compiles with NVRTC for sm_80 and sm_90 — on a machine without a GPU.

Needs only the NVRTC library (pip install nvidia-cuda-nvrtc-cu12); CuPy and a GPU are not used.
"""

import pytest

from gradcraft.backend.cuda import compiler

LIBRARY = compiler.find_nvrtc()
FILES = compiler.kernel_files()


def test_kernel_files_exist():
    names = {f.name for f in FILES}
    for family in (
        "elementwise",
        "reduce",
        "softmax",
        "cross_entropy",
        "norms",
        "activations",
        "rope",
        "embedding",
        "dropout",
        "random",
        "adamw",
        "gradnorm",
    ):
        assert f"{family}.cu" in names


@pytest.mark.skipif(LIBRARY is None, reason="NVRTC library not found (pip install nvidia-cuda-nvrtc-cu12)")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_kernel_compiles(path, arch):
    ptx = compiler.nvrtc_compile(compiler.source(path.name), path.name, arch, library=LIBRARY)
    assert b".entry" in ptx  # at least one kernel came out


@pytest.mark.skipif(LIBRARY is None, reason="NVRTC library not found (pip install nvidia-cuda-nvrtc-cu12)")
def test_hopper_kernels_compile_to_wgmma_for_sm_90a():
    """flash_hopper.cu's kernels hold wgmma only when built for sm_90a (compiler.hopper_module's target);
    for sm_80 and sm_90 (above) they compile empty."""
    text = compiler.source("flash_hopper.cu")
    ptx = compiler.nvrtc_compile(text, "flash_hopper.cu", compiler.HOPPER_ARCH, library=LIBRARY)
    assert b"wgmma.mma_async" in ptx and b"hopper_fwd_bf16_d128_n128" in ptx
    assert b"wgmma" not in compiler.nvrtc_compile(text, "flash_hopper.cu", "sm_90", library=LIBRARY)
