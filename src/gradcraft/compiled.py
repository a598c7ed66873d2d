"""`gradcraft.compile` (torch.compile's name and arguments): a model or a step function whose
kernels are replayed from recorded CUDA graphs.

    model = gradcraft.compile(model)          # an OptimizedModule: model._orig_mod is the original
    step = gradcraft.compile(train_step)      # forward, backward, clipping, optimizer step

What it does: the code runs as written, every call, building the lazy graph as eagerly (so every
Python side effect, `.item()` and print happens as it would); each schedule the engine then runs
(the forward and backward of a `loss.backward()`, the clipping, the optimizer's update) is recorded
as a CUDA graph the second time it is seen with the same structure, shapes and dtypes, and replayed
after that: one launch instead of hundreds (gradcraft/engine/plans.py). A schedule with new shapes
or dtypes is recorded anew (a bounded cache, as torch.compile's guards recompile); one that cannot be
recorded runs eagerly after one warning line naming the reason. Dropout draws new masks at every
call: each call moves the device's dropout counter on once, as a recorded kernel.

On a device that cannot record graphs (the CPU), the code runs eagerly with the same dropout rule,
so results equal a compiled GPU run's up to the devices' arithmetic. `backend="eager"` (torch's
name for "no compiler") and `disable=True` do the same everywhere; `mode="max-autotune-no-cudagraphs"`
keeps graphs off too. `fullgraph=True` turns the fallback into an error. `dynamic` is accepted (a new
shape is a new recording either way).
"""

import functools
from collections.abc import Callable

from gradcraft.compiled_step import StepGraphs
from gradcraft.engine import plans
from gradcraft.errors import UserError
from gradcraft.nn.module import Module
from gradcraft.ops.creation import advance_dropout

_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
_BACKENDS = ("inductor", "cudagraphs", "eager", "aot_eager")


def compile(
    model: Callable | None = None,
    *,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    backend: str = "inductor",
    mode: str | None = None,
    options: dict | None = None,
    disable: bool = False,
) -> Callable:
    """torch.compile: returns the compiled model or function (or, called with keyword arguments
    only, a decorator)."""
    if mode is not None and mode not in _MODES:
        raise UserError(f"compile(mode={mode!r}): the modes are {', '.join(_MODES)}")
    if not callable(backend) and backend not in _BACKENDS:
        raise UserError(f"compile(backend={backend!r}): the backends are {', '.join(_BACKENDS)}")
    graphs = not disable and backend not in ("eager", "aot_eager") and mode != "max-autotune-no-cudagraphs"
    settings = {"graphs": graphs, "fullgraph": fullgraph, "failed_seen": plans.stats["failed"]}
    if model is None:
        return lambda fn: compile(
            fn, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode, options=options, disable=disable
        )
    if isinstance(model, Module):
        return OptimizedModule(model, settings)
    if not callable(model):
        raise UserError(f"compile() takes a Module or a function, got {type(model).__name__}")
    return CompiledFunction(model, settings)


def _devices_of(args, kwargs, module=None) -> set:
    devices = set()
    for value in list(args) + list(kwargs.values()):
        device = getattr(value, "device", None)
        if isinstance(device, str):
            devices.add(device)
    if module is not None:
        for p in module.parameters():
            devices.add(p.device)
            break
    return devices


def _before_call(settings, devices) -> None:
    """Per call: the dropout counter moves on (on every device the call touches), and on devices
    that record graphs the engine's plans replay repeated schedules."""
    for device in devices:
        advance_dropout(device)
        if settings["graphs"]:
            plans.enable(device)


def _after_call(settings) -> None:
    # fullgraph: schedules that failed to record since this compiled object last looked (a module's
    # backward runs after its call returns, so its failures are seen at the next call)
    failed, settings["failed_seen"] = plans.stats["failed"] - settings["failed_seen"], plans.stats["failed"]
    if settings["fullgraph"] and failed:
        raise UserError(
            "compile(fullgraph=True): part of this call could not be recorded as a CUDA graph "
            "(see the warning above); remove fullgraph=True to let it run eagerly"
        )


class CompiledFunction:
    """A compiled step function (see the module's docstring); `__wrapped__` is the original."""

    def __init__(self, fn, settings: dict):
        self.__wrapped__ = fn
        self._settings = settings
        self._graphs = StepGraphs(fn, settings["fullgraph"]) if settings["graphs"] else None
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        if self._graphs is None:
            return self._run(args, kwargs, replay_schedules=True)
        return self._graphs(args, kwargs, lambda replay_schedules: self._run(args, kwargs, replay_schedules))

    def _run(self, args, kwargs, replay_schedules: bool):
        """The function as written (its schedules replayed where the whole step cannot be)."""
        settings = self._settings if replay_schedules else dict(self._settings, graphs=False)
        _before_call(settings, _devices_of(args, kwargs) or {"cpu"})
        out = self.__wrapped__(*args, **kwargs)
        _after_call(settings)
        return out

    def __get__(self, instance, owner):  # a compiled method binds as the function did
        return self if instance is None else functools.partial(self, instance)


class OptimizedModule(Module):
    """torch's compiled-module wrapper: calls go to `_orig_mod`, its state_dict keys carry the
    `_orig_mod.` prefix (as PyTorch's do), and attributes it lacks are the original's."""

    def __init__(self, mod: Module, settings: dict):
        super().__init__()
        self._orig_mod = mod
        object.__setattr__(self, "_settings", settings)

    def forward(self, *args, **kwargs):
        _before_call(self._settings, _devices_of(args, kwargs, self._orig_mod) or {"cpu"})
        out = self._orig_mod(*args, **kwargs)
        _after_call(self._settings)
        return out

    def __getattr__(self, name):
        # only reached for names the wrapper lacks (Module keeps its children in a dict)
        original = self.__dict__.get("_orig_mod")
        if original is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(original, name)

    def __repr__(self) -> str:
        return f"OptimizedModule(\n  (_orig_mod): {repr(self._orig_mod).replace(chr(10), chr(10) + '  ')}\n)"
