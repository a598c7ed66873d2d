"""The public API carries type hints: every public function of gradcraft and gradcraft.nn.functional, the
constructors and forward methods of the nn layers, and the optimizers' constructors annotate each parameter
and the return, so a new public function without them fails here."""

import inspect
import types

import gradcraft as gc
import gradcraft.nn as nn
import gradcraft.nn.functional as F
import gradcraft.optim as optim


def _missing(function, skip_first: bool) -> list:
    sig = inspect.signature(function)
    names = [
        p.name for i, p in enumerate(sig.parameters.values()) if p.annotation is p.empty and not (skip_first and i == 0)
    ]
    return names + (["return"] if sig.return_annotation is sig.empty else [])


def _public_functions(module):
    for name in dir(module):
        obj = getattr(module, name)
        if not name.startswith("_") and isinstance(obj, types.FunctionType):
            yield f"{module.__name__}.{name}", obj


def _classes(module):
    for name in dir(module):
        obj = getattr(module, name)
        if isinstance(obj, type) and obj.__module__.startswith("gradcraft") and not name.startswith("_"):
            yield obj


def test_public_functions_are_annotated():
    unannotated = {name: _missing(fn, False) for module in (gc, F) for name, fn in _public_functions(module)}
    unannotated = {name: missing for name, missing in unannotated.items() if missing}
    assert not unannotated, f"public functions without type hints (parameter names): {unannotated}"


def test_layer_and_optimizer_signatures_are_annotated():
    unannotated = {}
    for cls in [*_classes(nn), *_classes(optim)]:
        methods = ("__init__", "forward") if issubclass(cls, nn.Module) else ("__init__",)
        for method in methods:
            if method in vars(cls) and inspect.isfunction(vars(cls)[method]):
                missing = _missing(vars(cls)[method], True)
                if missing:
                    unannotated[f"{cls.__name__}.{method}"] = missing
    assert not unannotated, f"layer/optimizer methods without type hints: {unannotated}"


def test_the_check_sees_a_function_without_hints():
    def untyped(x, y: int):
        return x

    assert _missing(untyped, False) == ["x", "return"]
    assert len(list(_public_functions(gc))) > 100 and nn.Linear in list(_classes(nn))
