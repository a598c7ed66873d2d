"""Every kernels/*.cu compiles with NVRTC for sm_80 and sm_90 — on a machine without a GPU.

Needs only the NVRTC library (pip install nvidia-cuda-nvrtc-cu12); CuPy and a GPU are not used.
"""

import sys
from pathlib import Path

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
@pytest.mark.parametrize(
    "name, kernel",
    [("flash_hopper.cu", "hopper_fwd_bf16_d128_n128"), ("flash_hopper_bwd.cu", "hopper_bwd_dkdv_bf16_d128_m64")],
)
def test_hopper_kernels_compile_to_wgmma_for_sm_90a(name, kernel):
    """The Hopper files' kernels hold wgmma only when built for sm_90a (compiler.hopper_module's target);
    for sm_80 and sm_90 (above) they compile empty."""
    text = compiler.source(name)
    ptx = compiler.nvrtc_compile(text, name, compiler.HOPPER_ARCH, library=LIBRARY)
    assert b"wgmma.mma_async" in ptx and kernel.encode() in ptx
    assert b"wgmma" not in compiler.nvrtc_compile(text, name, "sm_90", library=LIBRARY)


@pytest.mark.skipif(LIBRARY is None, reason="NVRTC library not found (pip install nvidia-cuda-nvrtc-cu12)")
@pytest.mark.parametrize("name", ["flash_hopper.cu", "flash_hopper_bwd.cu"])
def test_hopper_kernels_keep_wgmma_asynchronous(name):
    """ptxas serialises every wgmma of a kernel (and says so, C7513/C7514) where a register of an
    in-flight product is read or redefined before the wait that retires it, or (C7512) where a
    register cap leaves too few registers: the kernels would still be right but lose the overlap
    they exist for, which no CPU test would otherwise notice."""
    log = compiler.ptxas_report(compiler.source(name), name, compiler.HOPPER_ARCH, library=LIBRARY)
    serialised = [line for line in log.splitlines() if any(c in line for c in ("C7512", "C7513", "C7514"))]
    assert not serialised, "\n".join(serialised)


def test_cached_cubin_builds_once_per_source_and_survives_an_unwritable_cache(tmp_path, monkeypatch):
    """hopper_module's on-disk cache: a second process reads what the first built; an edited source,
    another target or another NVRTC builds anew; a cache it cannot write to only costs a rebuild."""
    builds = []

    def build(tag):
        def run():
            builds.append(tag)
            return f"cubin of {tag}".encode()

        return run

    monkeypatch.setenv("GRADCRAFT_KERNEL_CACHE", str(tmp_path / "cache"))
    assert compiler.cached_cubin("src", "sm_90a", (12, 8), build("a")) == b"cubin of a"
    assert compiler.cached_cubin("src", "sm_90a", (12, 8), build("b")) == b"cubin of a"
    assert compiler.cached_cubin("src2", "sm_90a", (12, 8), build("c")) == b"cubin of c"
    assert compiler.cached_cubin("src", "sm_90a", (13, 0), build("d")) == b"cubin of d"
    assert builds == ["a", "c", "d"]
    assert not list((tmp_path / "cache").glob("*.tmp"))
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("GRADCRAFT_KERNEL_CACHE", str(blocker / "cache"))
    assert compiler.cached_cubin("src", "sm_90a", (12, 8), build("e")) == b"cubin of e"


def _script(name):
    import importlib.util

    scripts = Path(__file__).resolve().parents[1] / "scripts"
    sys.path.insert(0, str(scripts))  # (kernel_report imports prebuild_kernels beside it)
    try:
        spec = importlib.util.spec_from_file_location(name, scripts / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(scripts))
    return module


@pytest.mark.skipif(LIBRARY is None, reason="NVRTC library not found (pip install nvidia-cuda-nvrtc-cu12)")
def test_prebuilt_kernels_are_what_the_gpu_machines_cache_reads(tmp_path, monkeypatch, capsys):
    """scripts/prebuild_kernels.py builds machine code here and names it as cached_cubin names it, so
    a GPU machine with the same NVRTC version reads it instead of compiling (a small file stands in
    for the Hopper files, which take NVRTC tens of seconds)."""
    prebuild = _script("prebuild_kernels")
    out = tmp_path / "kcache"
    assert prebuild.main(["--nvrtc", LIBRARY, "--out", str(out), "--files", "rope.cu"]) == 0
    (cubin,) = out.glob("*.cubin")
    assert cubin.read_bytes()[:4] == b"\x7fELF"  # machine code, not PTX

    def build():
        raise AssertionError("compiled again: the prebuilt file was not found")

    monkeypatch.setenv("GRADCRAFT_KERNEL_CACHE", str(out))
    text, version = compiler.source("rope.cu"), compiler.nvrtc_version(LIBRARY)
    assert compiler.cached_cubin(text, compiler.HOPPER_ARCH, version, build) == cubin.read_bytes()
    assert prebuild.main(["--nvrtc", LIBRARY, "--out", str(out), "--files", "nope.cu"]) == 2
    assert capsys.readouterr().err.startswith("error: no kernel file nope.cu")
    blocker = tmp_path / "a file"
    blocker.write_text("")
    assert prebuild.main(["--nvrtc", LIBRARY, "--out", str(blocker / "kcache"), "--files", "rope.cu"]) == 2
    assert capsys.readouterr().err.startswith("error: cannot write ")


@pytest.mark.skipif(LIBRARY is None, reason="NVRTC library not found (pip install nvidia-cuda-nvrtc-cu12)")
def test_kernel_report_gives_each_kernels_registers_and_spills(tmp_path, capsys):
    report = _script("kernel_report")
    assert report.main(["--nvrtc", LIBRARY, "--files", "rope.cu", "--arch", "sm_80", "--kernels", "f32"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows and all("f32" in row[0] and int(row[1]) > 0 and row[3] == "/" for row in rows)
    assert report.main(["--nvrtc", LIBRARY, "--files", "rope.cu", "--nvdisasm", str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err.startswith("error: no nvdisasm program at ")
    assert report.main(["--nvrtc", LIBRARY, "--files", "rope.cu", "--kernels", "("]) == 2
    assert capsys.readouterr().err.startswith("error: --kernels '(' is not a regular expression")
    assert report.main(["--nvrtc", LIBRARY, "--files", "nope.cu"]) == 2
    assert capsys.readouterr().err.startswith("error: no kernel file nope.cu")


def test_kernel_report_counts_each_kernels_lines_of_sass():
    listing = "\n".join(
        [
            '\t.section\t.text.k_one,"ax",@progbits',
            ".text.k_one:",
            "        /*0000*/                   MOV R1, c[0x0][0x28] ;",
            "        /*0010*/                   EXIT ;",
            "//--------------------- .text.k_two --------------------------",
            '\t.section\t.text.k_two,"ax",@progbits',
            ".text.k_two:",
            "        /*0000*/                   EXIT ;",
        ]
    )
    assert _script("kernel_report").sass_lines(listing) == {"k_one": 2, "k_two": 1}


LAB = Path(__file__).resolve().parent.parent / "dev" / "cuda"


@pytest.mark.skipif(LIBRARY is None, reason="NVRTC library not found (pip install nvidia-cuda-nvrtc-cu12)")
@pytest.mark.skipif(not LAB.is_dir(), reason="no dev/cuda beside the tests")
@pytest.mark.parametrize(
    "name, kernels",
    [
        ("flash_hopper_lab.cu", (b"hopper_fwd_bf16_d64_n128_w1", b"hopper_fwd_f16_d128_n128_c2_wsp", b"_d64_n64_w1_p")),
        ("flash_hopper_bwd_lab.cu", (b"hopper_bwd_fused_bf16_d64_m128_c2_ws", b"hopper_bwd_fused_overlap_f16_d128")),
    ],
)
def test_lab_kernels_still_build_on_the_package_files(name, kernels):
    """dev/cuda's lab files include the package's Hopper files and add the variants gradcraft does not run
    (dev/cuda/README.md): a change to the package's templates must keep them building, the package's
    kernels (the first names) with the lab's (the last)."""
    ptx = compiler.nvrtc_compile(compiler.expand((LAB / name).read_text()), name, compiler.HOPPER_ARCH, library=LIBRARY)
    assert b"wgmma.mma_async" in ptx and all(kernel in ptx for kernel in kernels)
