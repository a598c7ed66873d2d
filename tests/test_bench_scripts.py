"""Every module the bench/ scripts and scripts/*.py import is installed by the package: the standard
library, gradcraft and its dependencies, or an extra of pyproject.toml (test, cuda, plot, serve).
(A script that needed threadpoolctl, which no extra installs, failed on a clean `pip install .[test]`.)"""

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# distribution name -> the module it installs, where they differ
MODULE_OF = {"cupy-cuda12x": "cupy", "nvidia-cuda-nvrtc-cu12": None, "pytest-xdist": "xdist", "ml_dtypes": "ml_dtypes"}
LOCAL = {"gradcraft", "tokenizer_corpus", "optable", "lab", "flash_variants"}  # the package, bench/ helpers, dev/cuda


def installed_modules() -> set:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = list(meta.get("dependencies", []))
    for extra in meta.get("optional-dependencies", {}).values():
        names += extra
    modules = set()
    for requirement in names:
        name = re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].strip()
        module = MODULE_OF.get(name, name.replace("-", "_"))
        if module:
            modules.add(module)
    return modules


def imported_modules(path: Path) -> set:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


SCRIPTS = sorted(ROOT.glob("bench/*.py")) + sorted(ROOT.glob("scripts/*.py"))


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_script_imports_are_installed_by_an_extra(path):
    local = LOCAL | {p.stem for p in path.parent.glob("*.py")}
    missing = imported_modules(path) - sys.stdlib_module_names - installed_modules() - local
    assert not missing, f"{path.name} imports {sorted(missing)}: add them to an extra in pyproject.toml or drop them"


def test_the_check_sees_a_missing_module(tmp_path):
    script = tmp_path / "bench.py"
    script.write_text("import os\nfrom threadpoolctl import threadpool_limits\nimport numpy\n")
    assert imported_modules(script) - sys.stdlib_module_names - installed_modules() == {"threadpoolctl"}


def test_gqa_split_bench_refuses_bad_shapes_in_one_line():
    import subprocess

    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gqa_split.py"), "--shapes", "1,6,4,128,64"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and run.stderr.startswith("error: --shapes takes B,H,Hkv,T,D")
    assert len(run.stderr.strip().splitlines()) == 1 and not run.stdout
