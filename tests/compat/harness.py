"""Run a PyTorch program twice, with `torch` and with gradcraft standing in for it, and compare the
numbers it prints.

A program is an ordinary PyTorch script (`import torch`, `import torch.nn as nn`, `from torch import
optim`, ...). For the gradcraft run, `torch` and its submodules resolve to gradcraft's (as
`import gradcraft as torch` would), nothing else changes. A line ending in `# gradcraft-edit: <code>`
is replaced by <code> for the gradcraft run: the documented edit a program needed (counted, and
reported: the suite's goal is programs that need none).

Both runs print text; the numbers (and True/False) in it are compared in order, each to the
precision the less precise side printed (torch prints tensors with 4 decimals) plus a relative
1e-4 for float32 rounding. Type names, dtypes and devices in the text are not compared.

    python tests/compat/harness.py tests/compat/programs/mlp_regression.py   # run both, show both
"""

import contextlib
import io
import math
import re
import sys
from pathlib import Path

PROGRAMS = Path(__file__).parent / "programs"
EDIT_MARK = "# gradcraft-edit:"
_SUBMODULES = ("nn", "nn.functional", "nn.init", "nn.utils", "optim", "optim.lr_scheduler")
# More torch submodules; one whose module cannot be imported (tensorboard not installed) is left out.
_MORE_SUBMODULES = (
    "autograd",
    "autograd.function",
    "distributions",
    "serialization",
    "onnx",
    "nn.parallel",
    "distributed",
    "multiprocessing",
    "utils",
    "utils.tensorboard",
    "autograd.functional",
    "nn.utils.rnn",
)
_IGNORED = re.compile(
    r"dtype=[\w.]+|device='[^']*'|grad_fn=<\w+>|torch\.return_types\.\w+|\w+Result|"
    r"gradcraft\.[\w.]+|torch\.[\w.]+"
)
_TOKEN = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|\bnan\b|[-+]?\binf\b|\bTrue\b|\bFalse\b")


def programs() -> list:
    return sorted(PROGRAMS.glob("*.py"))


def edits(path: Path) -> int:
    return sum(EDIT_MARK in line for line in path.read_text().splitlines())


def _edited(line: str) -> str:
    code, _, replacement = line.partition(EDIT_MARK)
    return code[: len(code) - len(code.lstrip())] + replacement.strip()


def source(path: Path, library: str) -> str:
    lines = path.read_text().splitlines()
    if library == "gradcraft":
        lines = [_edited(line) if EDIT_MARK in line else line for line in lines]
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def torch_is(library: str):
    """Within the block, `import torch` (and torch.nn, ...) gives `library`'s modules."""
    import importlib

    if library == "torch":
        yield
        return
    import gradcraft

    for sub in _SUBMODULES:
        importlib.import_module(f"gradcraft.{sub}")
    for sub in _MORE_SUBMODULES:  # (tensorboard needs its package)
        with contextlib.suppress(ImportError):
            importlib.import_module(f"gradcraft.{sub}")
    # every gradcraft submodule loaded by now (gradcraft.utils.data, ...) stands for torch's of that name
    aliases = {"torch": gradcraft}
    aliases.update({"torch" + name[9:]: m for name, m in list(sys.modules.items()) if name.startswith("gradcraft.")})
    saved = {name: sys.modules.get(name) for name in aliases}
    sys.modules.update(aliases)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def run(path: Path, library: str) -> str:
    """The program's standard output when `torch` is `library` ("torch" or "gradcraft")."""
    code = compile(source(path, library), str(path), "exec")
    out = io.StringIO()
    with torch_is(library), contextlib.redirect_stdout(out):
        exec(code, {"__name__": "__main__", "__file__": str(path)})
    return out.getvalue()


def tokens(text: str) -> list:
    return _TOKEN.findall(_IGNORED.sub(" ", text))


def _quantum(token: str) -> float:
    """Half a unit in the last printed place."""
    mantissa, _, exponent = token.lower().partition("e")
    decimals = len(mantissa.partition(".")[2]) if "." in mantissa else 0
    return 0.5 * 10.0 ** (-decimals + (int(exponent) if exponent else 0))


def compare(expected: str, got: str) -> list:
    """Differences between two outputs, as lines (empty when they agree)."""
    a, b = tokens(expected), tokens(got)
    problems = []
    if len(a) != len(b):
        problems.append(f"torch printed {len(a)} numbers, gradcraft {len(b)}")
    for i, (x, y) in enumerate(zip(a, b)):
        if x in ("True", "False") or y in ("True", "False"):
            ok = x == y
        else:
            fx, fy = float(x), float(y)
            if math.isnan(fx) or math.isnan(fy):
                ok = math.isnan(fx) and math.isnan(fy)
            elif math.isinf(fx) or math.isinf(fy):
                ok = fx == fy
            else:
                ok = abs(fx - fy) <= max(_quantum(x), _quantum(y)) * 1.02 + 1e-4 * max(abs(fx), abs(fy)) + 1e-7
        if not ok:
            problems.append(f"number {i}: torch {x}, gradcraft {y}")
            if len(problems) > 5:
                break
    return problems


def summary_line(stats: dict) -> str | None:
    """The suite's line for the test summary (pytest's terminalreporter.stats), None if it did not run."""
    reports = [
        r
        for r in stats.get("passed", []) + stats.get("failed", [])
        if "test_program_matches_torch" in r.nodeid and r.when == "call"
    ]
    if not reports:
        return None
    passed = {r.nodeid for r in reports if r.passed}
    paths = programs()
    unchanged = [p for p in paths if edits(p) == 0 and any(f"[{p.stem}]" in n for n in passed)]
    return (
        f"PyTorch compatibility suite: {len(passed)} of {len(reports)} programs print torch's numbers; "
        f"{len(unchanged)} of {len(paths)} run unchanged (no edited line)"
    )


if __name__ == "__main__":
    for name in sys.argv[1:]:
        path = Path(name)
        expected, got = run(path, "torch"), run(path, "gradcraft")
        print(f"== {path.name}: torch\n{expected}== gradcraft\n{got}")
        print("\n".join(compare(expected, got)) or "same numbers")
