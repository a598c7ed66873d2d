"""One family, one name: each contract kernel lives in a module of the same name in backend/cpu/ and
backend/cuda/ (dev/FAMILIES.md lists the families). The CUDA modules are read as source (no CuPy here)."""

import ast
from pathlib import Path

import gradcraft
from gradcraft.backend import KERNELS, PRIMITIVES
from gradcraft.backend.cpu import FAMILIES as CPU_FAMILIES

CUDA = Path(gradcraft.__file__).parent / "backend" / "cuda"
CUDA_ONLY = {"copy_from"}  # (the CUDA backend's own method: it needs the device index)


def _cuda_kernel_names(path: Path) -> set:
    """The keys of a module's KERNELS dict (a literal, possibly spread over names defined above it)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "KERNELS" for t in node.targets):
            for sub in ast.walk(node.value):
                if isinstance(sub, ast.Dict):
                    names |= {k.value for k in sub.keys if isinstance(k, ast.Constant)}
    return names


def test_each_kernel_has_one_family_name_on_the_cpu_and_on_cuda():
    cpu = {kernel: family.__name__.rsplit(".", 1)[1] for family in CPU_FAMILIES for kernel in family.KERNELS}
    cuda = {}
    for path in sorted(CUDA.glob("*.py")):
        for kernel in _cuda_kernel_names(path):
            assert kernel not in cuda, f"{kernel} in cuda/{cuda.get(kernel)}.py and cuda/{path.stem}.py"
            cuda[kernel] = path.stem
    assert set(cpu) == KERNELS
    # (an optional kernel may be missing on CUDA: its fallback runs there; a primitive may not)
    assert set(cuda) | CUDA_ONLY >= PRIMITIVES, sorted(PRIMITIVES - set(cuda) - CUDA_ONLY)
    assert set(cuda) <= KERNELS, sorted(set(cuda) - KERNELS)
    differ = {k: (cpu[k], cuda[k]) for k in cuda if cpu[k] != cuda[k]}
    assert not differ, f"kernels whose CPU and CUDA modules are named differently: {differ}"


def test_a_cuda_family_with_its_own_kernel_file_is_named_after_it():
    """cuda/<family>.py launches kernels/<family>.cu where the family has a file of that name."""
    kernel_files = {p.stem for p in (CUDA / "kernels").glob("*.cu")}
    for path in sorted(CUDA.glob("*.py")):
        if _cuda_kernel_names(path) and path.stem in kernel_files:
            assert f'"{path.stem}.cu"' in path.read_text() or "FILE" in path.read_text(), path.name
