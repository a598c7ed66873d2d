"""A compiled step function: its kernels recorded once as one CUDA graph, replayed without Python.

    @gradcraft.compile
    def train_step(x, y):
        with gradcraft.autocast("cuda", dtype=gradcraft.bfloat16):
            _, loss = model(x, y)
        loss.backward()
        gradcraft.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

As tinygrad's TinyJit and torch.compile's CUDA graphs: the first WARMUP calls with a given signature
run the function as written (kernels compile, memory pools fill, optimizer state appears); the next
one runs it once more with every kernel recorded into a CUDA graph; every later call only copies the
arguments' data into the tensors the graph reads and launches the graph. The function's Python does
not run again, so it must do the same work each call:

- The signature (each tensor argument's shape, dtype and device; every other argument's value; grad
  mode and autocast) picks the graph: a new one is recorded for a new signature, up to MAX_GRAPHS.
- Tensors it returns hold the graph's output memory. The next replay rewrites that memory, so a
  tensor still held from an earlier call is given its own copy first.
- Optimizers that step inside it are handled: their host side (the step count, the learning rate
  read from their param_groups) runs before each replay, so a schedule that changes `lr` between
  calls is followed.
- Dropout draws new masks each call (the device's dropout counter moves on inside the graph).
- A function that reads the device from the host (`.item()`, `.tolist()`, printing a tensor), copies
  host data in, or draws seeds from a host random generator cannot be replayed: it runs as written,
  every call, after one warning line naming the reason (an error with fullgraph=True). The warmup
  calls find out.
"""

import sys
import weakref
from collections import OrderedDict

from gradcraft import device as devices
from gradcraft.amp.policy import state as autocast_state
from gradcraft.device import get_backend
from gradcraft.engine import plans
from gradcraft.engine.lazy import hold
from gradcraft.engine.realize import realize
from gradcraft.errors import UserError
from gradcraft.ops import generator
from gradcraft.ops.creation import advance_dropout
from gradcraft.ops.function import is_grad_enabled, no_grad
from gradcraft.optim import optimizer as optimizers
from gradcraft.tensor import Tensor, buffer_of, from_buffer

WARMUP = 2  # calls run as written before the recording one
_FAILED = object()
MAX_GRAPHS = 8  # signatures kept per compiled function (each graph holds its peak memory)


def _flatten(value, tensors: list):
    """value with every Tensor in it (through tuples, lists and dicts) replaced by its index in tensors."""
    if isinstance(value, Tensor):
        tensors.append(value)
        return _Slot(len(tensors) - 1)
    if isinstance(value, (tuple, list)):
        return type(value)(_flatten(v, tensors) for v in value)
    if isinstance(value, dict):
        return {k: _flatten(v, tensors) for k, v in value.items()}
    return value


def _unflatten(value, tensors: list):
    if isinstance(value, _Slot):
        return tensors[value.index]
    if isinstance(value, (tuple, list)):
        return type(value)(_unflatten(v, tensors) for v in value)
    if isinstance(value, dict):
        return {k: _unflatten(v, tensors) for k, v in value.items()}
    return value


class _Slot:
    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index

    def __eq__(self, other):
        return isinstance(other, _Slot) and other.index == self.index

    def __hash__(self):
        return hash(("slot", self.index))

    def __repr__(self):
        return f"<tensor {self.index}>"


def _frozen(value):
    """A hashable form of the arguments, tensors replaced by slots: hashable values as they are (a
    frozen config compares by value), the rest as the engine's schedule keys freeze attributes
    (small NumPy arrays by content, other objects by identity)."""
    if isinstance(value, (tuple, list)):
        return (type(value).__name__,) + tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return ("dict",) + tuple((k, _frozen(v)) for k, v in value.items())
    try:
        hash(value)
        return value
    except TypeError:
        return plans.freeze(value)


class _Graph:
    """One signature's state: calls seen, then the recording and what a replay needs."""

    __slots__ = ("calls", "why_eager", "graph", "device", "inputs", "structure", "outputs", "returned", "optimizers")

    def __init__(self):
        self.calls = 0
        self.why_eager = None  # why this signature runs as written
        self.graph = None
        self.device = None
        self.inputs: list = []  # the tensors the graph reads the arguments from
        self.structure = None  # the returned value, tensors replaced by slots
        self.outputs: list = []  # (buffer, dtype) of each returned tensor
        self.returned: list = []  # weak references to the tensors the last call returned
        self.optimizers: list = []  # optimizers that step inside the function


class StepGraphs:
    """The per-signature graphs of one compiled function (gradcraft/compiled.py's CompiledFunction)."""

    def __init__(self, fn, fullgraph: bool = False):
        self.fn = fn
        self.fullgraph = fullgraph
        self.graphs: OrderedDict[tuple, _Graph] = OrderedDict()

    def __call__(self, args, kwargs, run_eagerly):
        tensors: list = []
        structure = _flatten((args, kwargs), tensors)
        device = _capturing_device(tensors)
        if device is None:
            return run_eagerly(True)
        key = (
            device,
            _frozen(structure),
            tuple((t.shape, t.dtype, t.device, t.requires_grad) for t in tensors),
            is_grad_enabled(),
            autocast_state.key(),
        )
        entry = self.graphs.get(key)
        if entry is None:
            entry = self.graphs[key] = _Graph()
            while len(self.graphs) > MAX_GRAPHS:
                _release(self.graphs.popitem(last=False)[1])
        else:
            self.graphs.move_to_end(key)
        entry.calls += 1
        if entry.why_eager is not None:
            return run_eagerly(True)  # (its repeated schedules replayed, as a compiled module's)
        if entry.calls <= WARMUP:
            realize(tensors)  # (a batch copied in from the host: the caller's transfer, not the step's)
            return self._run_as_written(entry, run_eagerly)
        if entry.graph is None:
            recorded = self._record(entry, device, tensors, structure)
            return run_eagerly(True) if recorded is _FAILED else recorded
        return self._replay(entry, tensors)

    def _run_as_written(self, entry, run_eagerly):
        transfers, draws = devices.transfers["count"], generator.draws["count"]
        optimizers.STEPPING = stepped = []
        try:
            out = run_eagerly(False)
        finally:
            optimizers.STEPPING = None
        if entry.why_eager is None and entry.calls == WARMUP:  # (the first call may make state: moments, counters)
            host_steps = [s for s in stepped if isinstance(s, str)]
            for opt in stepped:
                if not isinstance(opt, str) and all(opt is not o for o in entry.optimizers):
                    entry.optimizers.append(opt)
            if host_steps:
                self._give_up(
                    entry,
                    f"{host_steps[0]} keeps its numbers (learning rate, step count) on the host; "
                    "only the fused AdamW step reads them from the device (step the scheduler outside)",
                )
            elif devices.transfers["count"] != transfers:
                self._give_up(
                    entry,
                    "it copies data between the host and the device (.item(), .tolist(), .cpu(), "
                    "a tensor made from host data, printing a tensor...)",
                )
            elif generator.draws["count"] != draws:
                self._give_up(entry, "it draws seeds from a host random generator (rand, randn, randint...)")
        return out

    def _give_up(self, entry, why: str) -> None:
        entry.why_eager = why
        name = getattr(self.fn, "__qualname__", "the function")
        if self.fullgraph:
            raise UserError(f"compile(fullgraph=True): {name} cannot be recorded as one CUDA graph: {why}")
        print(f"warning: gradcraft.compile: {name} runs as written every call: {why}", file=sys.stderr)

    def _prepare(self, entry) -> None:
        for opt in entry.optimizers:
            opt.prepare(with_grad_only=False)
            optimizers.PREPARED.add(id(opt))

    def _record(self, entry, device, tensors, structure):
        backend = get_backend(device)
        # the graph's own argument tensors: copies, whose memory nothing else writes
        with no_grad():
            entry.inputs = [t.detach().clone().realize() for t in tensors]
        for t, own in zip(tensors, entry.inputs):
            own.requires_grad_(t.requires_grad)
        args, kwargs = _unflatten(structure, entry.inputs)
        # what a failed recording must put back: the gradients and the optimizers' step counts
        params = [p for opt in entry.optimizers for group in opt.param_groups for p in group["params"]]
        grads = [(p, p.grad) for p in params]
        steps = [(s, s.get("step")) for opt in entry.optimizers for s in opt.state.values()]
        self._prepare(entry)
        returned: list = []

        def step():
            advance_dropout(device)
            out = self.fn(*args, **kwargs)
            shape = _flatten(out, returned)
            for t in returned:
                t.realize()
            return shape

        try:
            with plans.suspended():
                entry.structure, entry.graph = backend.capture(step)
        except Exception as e:  # a kernel that waits for the host while recording (a data-dependent shape)
            optimizers.PREPARED.clear()
            for p, grad in grads:
                p.grad = grad
            for state, count in steps:
                state["step"] = count
            self._give_up(entry, f"recording it failed ({type(e).__name__}: {str(e).splitlines()[0][:200]})")
            return _FAILED
        optimizers.PREPARED.clear()
        entry.device = device
        entry.outputs = [(buffer_of(t), t.dtype) for t in returned]
        backend.replay(entry.graph)
        return self._returned(entry)

    def _replay(self, entry, tensors):
        with no_grad():
            for own, t in zip(entry.inputs, tensors):
                if own is not t:
                    own.copy_(t)
        for ref in entry.returned:  # a tensor still held from an earlier call keeps that call's values
            t = ref()
            if t is not None and t.is_realized and any(buffer_of(t) is buf for buf, _ in entry.outputs):
                hold(t, buffer_of(t).copy())
        self._prepare(entry)
        optimizers.PREPARED.clear()
        get_backend(entry.device).replay(entry.graph)
        return self._returned(entry)

    def _returned(self, entry):
        out = [from_buffer(buf, dtype, entry.device) for buf, dtype in entry.outputs]
        entry.returned = [weakref.ref(t) for t in out]
        return _unflatten(entry.structure, out)

    def release(self) -> None:
        while self.graphs:
            _release(self.graphs.popitem()[1])


def _release(entry) -> None:
    if entry.graph is not None:
        get_backend(entry.device).release_graph(entry.graph)
        entry.graph = None


def _capturing_device(tensors):
    """The one device of the tensor arguments, if its backend records graphs; else None."""
    found = {t.device for t in tensors}
    if len(found) != 1:
        return None
    device = found.pop()
    return device if hasattr(get_backend(device), "capture") else None
