"""The layer rules of docs/design.md ("Layers"), checked on the source: no module imports from a
layer above it, nothing above the ops layer touches a tensor's buffer or version, models import
only the public API. Parses every gradcraft/*.py with `ast` (nothing is imported)."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent / "src" / "gradcraft"

# Layer of each top-level module or package, from design.md's table (lower number = lower layer;
# a module may import its own layer and the ones below). The root package `gradcraft` is the public
# API: any layer at or above the tensor may import it.
LAYERS = {
    "errors": 0,
    "atomic": 0,
    "validation": 1,
    "dtypes": 2,
    "device": 2,
    "typing": 2,  # typing: the annotations' names (gradcraft/typing.py)
    "size": 2,  # gradcraft.Size, the shape tuple that prints as torch.Size
    "printoptions": 2,  # torch.set_printoptions' settings, read by Tensor.__repr__
    "sampling": 2,  # the definition of sampling a token (NumPy), shared by the host and the kernels' tests
    "backend": 3,
    "engine": 4,
    "tensor": 5,
    "autograd": 5,
    "ops": 5,
    "cuda": 5,
    "legacy": 5,  # FloatTensor & co., Variable
    "accelerator": 6,  # torch.accelerator, over cuda
    "amp": 5,  # autocast's policy, read by the ops at their boundary, and GradScaler
    "backends": 5,  # torch.backends' precision switches
    "gradcraft": 7,  # the root package: the public API, re-exporting tensor, ops, nn and optim
    "serialization": 6,
    "capture": 6,  # a step recorded once as a CUDA graph (it makes its input tensors)
    "nn": 7,
    "compiled": 7,  # gradcraft.compile: above nn (it wraps Modules), below the models
    "compiled_step": 7,  # a compiled function's whole-step graphs: beside optim (it prepares optimizers)
    "optim": 7,
    "distributions": 7,  # torch.distributions (public ops only)
    "onnx": 7,  # torch.onnx: export refused with one line
    "multiprocessing": 1,  # torch.multiprocessing: the standard library's, and spawn
    "tokenizer": 8,
    "data": 8,
    "models": 9,
    "distributed": 10,  # (listed after training in design.md; the trainer uses it, it never imports training)
    "utils": 7,  # torch.utils: data (datasets, samplers, DataLoader), imported by the root package as in torch
    "training": 11,
    "inference": 12,
    "benchmarks": 13,
    "cli": 14,
    "__main__": 15,  # `python -m gradcraft`: the command line
}
PUBLIC_API_LAYER = 5
# Modules that may reach a tensor's buffer (`._buf`) and version (`._version`).
BUFFER_ACCESS = ("tensor", "autograd", "engine", "ops", "backend", "serialization")
# Above the ops layer nothing imports a backend (capabilities are asked through get_backend(...).has).
NO_BACKEND = ("nn", "optim", "models", "training", "inference", "cli")
# What model code imports: the public API, its siblings, and the public helpers.
MODEL_IMPORTS = (
    "gradcraft",
    "gradcraft.nn",
    "gradcraft.nn.functional",
    "gradcraft.nn.init",
    "gradcraft.dtypes",
    "gradcraft.errors",
    "gradcraft.atomic",
    "gradcraft.models",
    "gradcraft.tokenizer",
    "gradcraft.validation",
)  # validation: the configs' field declarations (setting, Value)

# Known violations: none (memory accounting lives in backend/, process groups go through the device
# registry, kernel status is asked of the backend). Keep it empty.
EXCEPTIONS: set = set()


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, path, ast.parse(path.read_text(), str(path))


def _imports(name, path, tree):
    """(line, imported module) for every import of a gradcraft module; `from gradcraft import x`
    names the submodule x when there is one."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    # imports under `if TYPE_CHECKING:` never run: annotations may name any layer's types
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING"
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                is_module = (ROOT.parent / (sub.replace(".", "/") + ".py")).exists() or (
                    ROOT.parent / sub.replace(".", "/")
                ).is_dir()
                yield node.lineno, sub if is_module else base


def _layer_key(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "gradcraft"


def test_every_module_has_a_layer():
    missing = {_layer_key(name) for name, _, _ in _modules()} - set(LAYERS)
    assert not missing, f"add these to LAYERS (and to design.md's table): {sorted(missing)}"


def test_no_import_from_a_layer_above():
    wrong = []
    for name, path, tree in _modules():
        mine = LAYERS[_layer_key(name)]
        for line, target in _imports(name, path, tree):
            if not target.startswith("gradcraft") or (name, target) in EXCEPTIONS:
                continue
            theirs = LAYERS[_layer_key(target)]
            if target == "gradcraft" and mine >= PUBLIC_API_LAYER:
                continue
            if theirs > mine and _layer_key(target) != _layer_key(name):
                wrong.append(f"{path.relative_to(ROOT.parent)}:{line} imports {target} (a layer above)")
            elif _layer_key(name) in NO_BACKEND and _layer_key(target) == "backend":
                wrong.append(f"{path.relative_to(ROOT.parent)}:{line} imports {target} (ask get_backend(d).has)")
    assert not wrong, "\n".join(wrong)


def test_models_import_only_the_public_api():
    wrong = []
    for name, path, tree in _modules():
        if not name.startswith("gradcraft.models"):
            continue
        for line, target in _imports(name, path, tree):
            if (
                target.startswith("gradcraft")
                and not target.startswith("gradcraft.models")
                and target not in MODEL_IMPORTS
                and not target.startswith("gradcraft.tokenizer")
            ):
                wrong.append(f"{path.relative_to(ROOT.parent)}:{line} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_buffers_and_versions_only_below_the_public_api():
    wrong = []
    for name, path, tree in _modules():
        if _layer_key(name) in BUFFER_ACCESS:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("_buf", "_version"):
                wrong.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} uses .{node.attr}")
    assert not wrong, "use the public Tensor API (copy_, .data, ops/optim.py, ops/collective.py):\n" + "\n".join(wrong)


def test_the_checker_sees_a_violation(tmp_path):
    """The scan itself: an attribute access and an upward import in a sample are found."""
    tree = ast.parse("from gradcraft.cli import main\nx._buf = 1\n")
    assert any(isinstance(n, ast.Attribute) and n.attr == "_buf" for n in ast.walk(tree))
    targets = [t for _, t in _imports("gradcraft.nn.sample", ROOT / "nn" / "sample.py", tree)]
    assert "gradcraft.cli.main" in targets and LAYERS[_layer_key(targets[0])] > LAYERS["nn"]


def test_no_two_modules_import_each_other():
    """No import circles between two modules (function-level imports included)."""
    graph = {
        name: {target for _, target in _imports(name, path, tree) if target.startswith("gradcraft.")}
        for name, path, tree in _modules()
    }
    circles = sorted(
        {tuple(sorted((a, b))) for a, targets in graph.items() for b in targets if b != a and a in graph.get(b, ())}
    )
    assert circles == []


# The graph layers: the engine, the Tensor on it, the ops and autograd. Imports go one way among them.
GRAPH_PACKAGES = ("engine", "tensor", "ops", "autograd")


def _graph_package_imports():
    """{(importer, imported)} among GRAPH_PACKAGES, function-level imports included, with a sample site."""
    edges = {}
    for name, path, tree in _modules():
        mine = _layer_key(name)
        if mine not in GRAPH_PACKAGES:
            continue
        for line, target in _imports(name, path, tree):
            theirs = _layer_key(target) if target.startswith("gradcraft.") else None
            if theirs in GRAPH_PACKAGES and theirs != mine:
                edges.setdefault((mine, theirs), f"{path.relative_to(ROOT.parent)}:{line}")
    return edges


def test_no_import_circle_among_engine_tensor_ops_and_autograd():
    edges = _graph_package_imports()
    graph = {p: {b for a, b in edges if a == p} for p in GRAPH_PACKAGES}
    state: dict = {}

    def cycle_from(p, path):
        state[p] = "open"
        for q in sorted(graph[p]):
            if state.get(q) == "open":
                return path + [q]
            if q not in state:
                found = cycle_from(q, path + [q])
                if found:
                    return found
        state[p] = "done"
        return None

    for p in GRAPH_PACKAGES:
        if p not in state:
            found = cycle_from(p, [p])
            if found:
                sites = [edges[(a, b)] for a, b in zip(found, found[1:])]
                raise AssertionError(f"import circle {' -> '.join(found)} (at {', '.join(sites)})")


def test_the_engine_imports_nothing_above_it():
    """engine/ knows its own values (engine/lazy.py's LazyBuffer), never the Tensor, the ops, autograd
    or anything built on them; not even for annotations."""
    wrong = []
    for name, path, tree in _modules():
        if _layer_key(name) != "engine":
            continue
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            for target in targets:
                key = _layer_key(target) if target.startswith("gradcraft.") else None
                if target == "gradcraft" or (key is not None and LAYERS[key] > LAYERS["engine"]):
                    wrong.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} imports {target}")
    assert not wrong, "\n".join(wrong)


# A Tensor's private fields. The engine's value (engine/lazy.py's LazyBuffer, which Tensor extends)
# declares the first group, which the engine reads; the rest are Tensor's own.
ENGINE_FIELDS = ("_buf", "_node", "_index", "_storage", "_requires_grad")
TENSOR_PRIVATE = ("_version", "_readers", "_graph_freed", "_init", "_lazy", "_from_buffer")
# Modules that still read them, and how many times: none (tensor.py's functions serve the rest).
PRIVATE_READERS_ALLOWED: dict = {}


def _private_reads(tree, names):
    """(line, name) of every `x.name` and getattr/setattr(x, "name") in the tree."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in names:
            yield node.lineno, node.attr
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", None) in ("getattr", "setattr", "hasattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in names
        ):
            yield node.lineno, node.args[1].value


def test_no_module_outside_tensor_py_reads_a_tensors_private_fields():
    wrong, counts = [], {}
    for name, path, tree in _modules():
        if name == "gradcraft.tensor":
            continue
        names = TENSOR_PRIVATE if _layer_key(name) == "engine" else ENGINE_FIELDS + TENSOR_PRIVATE
        for line, attr in _private_reads(tree, names):
            counts[name] = counts.get(name, 0) + 1
            wrong.append(f"{path.relative_to(ROOT.parent)}:{line} reads .{attr}")
    assert counts == PRIVATE_READERS_ALLOWED, (
        "use gradcraft/tensor.py's functions (buffer_of, node_of, version, bump_version, from_buffer...) "
        "or the public Tensor API:\n" + "\n".join(wrong)
    )


def test_the_private_field_checker_sees_a_read():
    tree = ast.parse("y = t._node.inputs\nz = getattr(t, '_buf')\nw = obj.node\n")
    assert sorted(_private_reads(tree, ENGINE_FIELDS)) == [(1, "_node"), (2, "_buf")]
