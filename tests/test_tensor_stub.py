"""gradcraft/tensor.pyi (the Tensor class as editors and type checkers see it) matches the live class."""

import ast
import importlib.util
from pathlib import Path

import gradcraft as gc

ROOT = Path(__file__).resolve().parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location("gen_tensor_stub", ROOT / "scripts" / "gen_tensor_stub.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_stub_is_up_to_date():
    generated = _generator().generate()
    committed = (ROOT / "src" / "gradcraft" / "tensor.pyi").read_text()
    assert committed == generated, "gradcraft/tensor.pyi is out of date: run python scripts/gen_tensor_stub.py"


def test_stub_declares_every_public_method_and_property():
    tree = ast.parse((ROOT / "src" / "gradcraft" / "tensor.pyi").read_text())
    (cls,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Tensor"]
    declared = {node.name for node in cls.body if isinstance(node, ast.FunctionDef)}
    declared |= {node.target.id for node in cls.body if isinstance(node, ast.AnnAssign)}
    # another name of a method already declared (`clip = clamp`): the stub's aliases name real methods
    aliases = {node.targets[0].id: node.value.id for node in cls.body if isinstance(node, ast.Assign)}
    assert set(aliases.values()) <= declared, aliases
    assert all(getattr(gc.Tensor, alias) is getattr(gc.Tensor, name) for alias, name in aliases.items())
    declared |= set(aliases)
    public = {name for name in dir(gc.Tensor) if not name.startswith("_")}
    assert public <= declared, f"missing from the stub: {sorted(public - declared)}"
    for name in ("add", "sum", "reshape", "__add__", "__getitem__", "T", "shape", "dtype"):
        assert name in declared


def test_stub_keeps_signatures_and_hints():
    stub = (ROOT / "src" / "gradcraft" / "tensor.pyi").read_text()
    assert "def cuda(self, index: builtins.int = ...) -> Tensor" in stub  # builtins spelled out in the class
    assert "def transpose(self, dim0: builtins.int, dim1: builtins.int)" in stub
    assert "    shape: Size\n" in stub


def test_package_ships_the_stub_and_py_typed():
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["gradcraft"]
    assert "py.typed" in data and "tensor.pyi" in data
    assert (ROOT / "src" / "gradcraft" / "py.typed").exists()
