"""Replayed schedules: a schedule seen again is run from the CUDA graph recorded the last time.

`gradcraft.compile` turns this on for a device (`enable(device)`). From then on, every schedule of
at least MIN_NODES kernels on that device gets a key: its structure (each node's op, attributes and
where its inputs come from) and the shape, dtype and strides of every realized buffer it reads (its
leaves). The first time a key is seen the schedule runs as usual (kernels compile, pools fill); the
second time its kernels are recorded into a CUDA graph and replayed; every later time it is only
replayed, one launch instead of one per kernel. Python still builds the graph each step (so every
side effect of the user's code happens as it would eagerly); only the launches are replaced.

What a replay must preserve, and how:
- Leaves. The graph reads the buffers it was recorded with. A leaf that is the same memory as then
  (a parameter, an optimizer moment, a gradient a replayed schedule wrote) costs nothing; a new one
  (the next batch) is copied into the recorded buffer first, which the plan keeps alive.
- Outputs. A replay writes the same buffers every time. A tensor from an earlier replay that still
  holds one (a loss kept in a list) is given a copy of its data first, so it never changes under
  its holder.
- Writes. In-place writes (`assign`) announce themselves before the replay, as the eager loop does
  (lazy readers of the old contents get a copy), and bump the written tensors' versions.
- Failures. A schedule whose kernels cannot be recorded (a kernel that waits for the host, say)
  runs eagerly from then on, after one warning line naming the reason.

Random ops that take a fresh seed per call (rand, randn) change the key, so their schedules run
eagerly; dropout reads its counter from device memory, so its schedules replay (gradcraft.compile
moves that counter on once per call).
"""

import sys
import weakref
from collections import OrderedDict

import numpy as np

from gradcraft.device import get_backend
from gradcraft.engine.lazy import hold, mark_written

MIN_NODES = 8  # smaller schedules gain little from a graph
MAX_PLANS = 16  # recorded graphs kept per process (each holds its schedule's peak memory)

_enabled: set = set()  # devices whose schedules are replayed
_plans: "OrderedDict[tuple, Plan]" = OrderedDict()
_warned: set = set()
_suspended = [0]  # inside a whole-step recording (gradcraft/compiled_step.py): no graphs of our own
# schedules recorded, replayed (and the kernels those replays ran), run eagerly, failed to record
stats = {"recorded": 0, "replayed": 0, "replayed_kernels": 0, "eager": 0, "failed": 0}


def enable(device: str) -> None:
    """Replay repeated schedules on `device` from now on, where it can record CUDA graphs."""
    if hasattr(get_backend(device), "capture"):
        _enabled.add(device)


def disable(device: str | None = None) -> None:
    """Stop replaying (one device, or all), and release every recorded graph."""
    if device is None:
        _enabled.clear()
    else:
        _enabled.discard(device)
    while _plans:
        _plans.popitem()[1].close()
    _warned.clear()  # (a schedule that fails again after this warns again)


class suspended:
    """Within: schedules run as usual, never recorded or replayed (a whole step is being recorded
    into one graph, which these schedules' kernels join)."""

    def __enter__(self):
        _suspended[0] += 1

    def __exit__(self, *exc):
        _suspended[0] -= 1


def replays(order) -> bool:
    """Whether this schedule goes through the plans: enabled device, one device, big enough."""
    if not _enabled or _suspended[0] or len(order) < MIN_NODES:
        return False
    device = order[0].device
    return device in _enabled and all(node.device == device for node in order)


def transfers(order) -> list:
    """The lazy tensors of a schedule that copy data in from another device (a batch made on the
    host, then `.to("cuda")`): a CUDA graph cannot record a host-to-device copy, so the engine runs
    them first, and their results are new inputs like any other."""
    moved = {}
    for node in order:
        for inp in node.inputs:
            if inp._buf is None and inp._node.op == "copy_from":
                moved[id(inp)] = inp
    return list(moved.values())


class Plan:
    __slots__ = ("seen", "graph", "leaves", "leaf_holders", "outputs", "holders", "failed", "device", "kernels")

    def __init__(self, device: str):
        self.seen = 0
        self.graph = None
        self.device = device
        self.leaves: list = []  # the buffers the graph reads, by leaf index
        self.leaf_holders: list = []  # weak references to the tensors that held them when recorded
        self.outputs: list = []  # (position, output index, buffer) of every kept output
        self.holders: list = []  # weak references to the tensors that hold the outputs now
        self.failed = None  # why the schedule cannot be recorded
        self.kernels = 0

    def close(self) -> None:
        if self.graph is not None:
            get_backend(self.device).release_graph(self.graph)
        self.graph = None


def freeze(value):
    """A hashable stand-in for an attribute value; unknown objects by identity (no match)."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, (tuple, list)):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, freeze(v)) for k, v in value.items())
    if isinstance(value, np.dtype):
        return value.str
    if isinstance(value, type):
        return value
    if isinstance(value, np.generic):
        return (value.dtype.str, value.item())
    if isinstance(value, np.ndarray) and value.size <= 64:
        return (value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, slice):
        return ("slice", value.start, value.stop, value.step)
    return ("id", id(value))


def _key(order, target_keys, keep):
    """(the schedule's structural key, its leaf tensors in leaf order, node positions by id)."""
    position = {node.output_id: i for i, node in enumerate(order)}
    leaf_index: dict[int, int] = {}
    leaves: list = []  # one tensor per leaf buffer
    leaf_shapes: list = []
    nodes = []
    for node in order:
        inputs = []
        for inp in node.inputs:
            buf = inp._buf
            if buf is None:
                inputs.append((position[id(inp._node)], inp._index))
                continue
            index = leaf_index.get(id(buf))
            if index is None:
                index = leaf_index[id(buf)] = len(leaves)
                leaves.append(inp)
                leaf_shapes.append((buf.shape, buf.dtype.str, buf.strides))
            inputs.append(-1 - index)
        nodes.append((node.op, freeze(node.attrs), tuple(inputs), node.n_outputs))
    kept = tuple(sorted((position[node_id], index) for node_id, index in set(keep) | set(target_keys)))
    return (order[0].device, tuple(nodes), tuple(leaf_shapes), kept), leaves, position


def run(order, readers, target_keys, keep, run_loop, announce_writes, writes_inputs) -> dict:
    """The schedule's kept outputs by key, computed eagerly, recorded, or replayed. run_loop,
    announce_writes and writes_inputs are engine/realize.py's (which imports this module)."""
    key, leaves, position = _key(order, target_keys, keep)
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = Plan(order[0].device)
        while len(_plans) > MAX_PLANS:
            _plans.popitem(last=False)[1].close()
    else:
        _plans.move_to_end(key)
    plan.seen += 1
    if plan.failed is not None or plan.seen < 2:
        stats["eager"] += 1
        return run_loop(order, readers, target_keys, keep)
    announce_writes(order)
    if plan.graph is None:
        values = _record(plan, order, readers, target_keys, keep, run_loop, leaves, position)
        if values is None:  # could not record: this time and from now on, eagerly
            return run_loop(order, readers, target_keys, keep, announce=False)
    else:
        values = _replay(plan, leaves, order, writes_inputs)
    plan.holders = [weakref.ref(t) for t in keep.values()]
    return values


def _record(plan, order, readers, target_keys, keep, run_loop, leaves, position):
    backend = get_backend(plan.device)
    saved_readers = dict(readers)
    try:
        values, graph = backend.capture(lambda: run_loop(order, readers, target_keys, keep, announce=False))
    except Exception as e:  # a kernel that waits for the host, an unsupported call while recording
        readers.clear()
        readers.update(saved_readers)
        plan.failed = f"{type(e).__name__}: {e}".splitlines()[0][:200]
        stats["failed"] += 1
        ops = sorted({node.op for node in order})
        if plan.failed not in _warned:
            _warned.add(plan.failed)
            print(
                f"warning: gradcraft.compile: a schedule of {len(order)} kernels ({', '.join(ops[:6])}"
                f"{', ...' if len(ops) > 6 else ''}) runs eagerly: it cannot be recorded as a CUDA graph "
                f"({plan.failed})",
                file=sys.stderr,
            )
        return None
    plan.graph = graph
    plan.leaves = [t._buf for t in leaves]
    plan.leaf_holders = [weakref.ref(t) for t in leaves]
    plan.kernels = len(order)
    plan.outputs = [(position[node_id], index, value) for (node_id, index), value in values.items()]
    stats["recorded"] += 1
    backend.replay(graph)
    stats["replayed_kernels"] += plan.kernels
    return values


def _replay(plan, leaves, order, writes_inputs) -> dict:
    backend = get_backend(plan.device)
    # Outputs of the last run still held by a tensor: give that tensor its own copy first.
    buffers = {id(buf) for _, _, buf in plan.outputs}
    for ref in plan.holders:
        t = ref()
        if t is not None and t._buf is not None and id(t._buf) in buffers:
            hold(t, t._buf.copy())
    for recorded, holder, leaf in zip(plan.leaves, plan.leaf_holders, leaves):
        current = leaf._buf
        if recorded is current or backend.address(recorded) == backend.address(current):
            continue
        # A new input (the next batch): into the recorded buffer, after giving the tensor that held
        # it when recorded (if it lives on) a copy of its own.
        old = holder()
        if old is not None and old._buf is recorded:
            hold(old, recorded.copy())
        recorded[...] = current
    for node in order:
        for i in writes_inputs.get(node.op, ()):
            mark_written(node.inputs[i])
    backend.replay(plan.graph)
    stats["replayed"] += 1
    stats["replayed_kernels"] += plan.kernels
    return {(order[pos].output_id, index): buf for pos, index, buf in plan.outputs}
