"""No function binds a name that its module imports (a local `os = ...` hides the `os` module for
the whole function, and the code that needs the module fails only when it runs: the CUDA
launchers' such bug reached main because CI has no GPU to run them). Checked on the source with
`ast` for every gradcraft/*.py, so it covers code no CPU test executes."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent / "src" / "gradcraft"


def _imported_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names if a.name != "*")
    return names


def _bound_names(fn: ast.FunctionDef | ast.AsyncFunctionDef):
    """(name, line) of every name the function's own body binds (arguments included; nested
    functions and classes by their names, their bodies checked on their own)."""
    args = fn.args
    for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
        if a is not None:
            yield a.arg, fn.lineno
    stack = list(fn.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            if not isinstance(node, ast.Lambda):
                yield node.name, node.lineno
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            yield node.id, node.lineno
        stack.extend(ast.iter_child_nodes(node))


def test_no_function_shadows_a_module_import():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        imported = _imported_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for name, line in _bound_names(node):
                    if name in imported:
                        found.append(f"{path.relative_to(ROOT.parent)}:{line}: {name!r} in {node.name}()")
    assert not found, "names that hide a module-level import:\n" + "\n".join(sorted(set(found)))
