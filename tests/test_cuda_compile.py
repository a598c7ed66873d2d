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
