"""Run a schedule: call each node's kernel, free each intermediate after its last reader.

Buffers of intermediates live only in this function's `values` table; a tensor
keeps its buffer (`tensor._buf`) only when it is a target of the realize, or
when autograd will need it later (a tensor that requires grad, realized before
its backward pass ran). Everything else is released the moment its last
reader has run, and its array goes back to the device's pool.

GRADCRAFT_DEBUG=1 prints each kernel as it runs; =2 adds shapes, bytes and time.
"""

import contextlib
import os
import sys
import time

from gradcraft.backend.opspec import SPECS
from gradcraft.device import get_backend
from gradcraft.engine import fusion, grouping, plans
from gradcraft.engine.lazy import hold, mark_written, readers_of
from gradcraft.engine.schedule import schedule

DEBUG = int(os.environ.get("GRADCRAFT_DEBUG", "0") or 0)

# Called as hook(target, ids of the schedule's nodes) just before an `assign` overwrites target's
# buffer: gradcraft/ops/inplace.py gives lazy tensors built from the old contents a copy of them.
BEFORE_WRITE: list = []

# The kernels that write into some of their inputs, and which inputs (their specs' `writes`).
WRITES_INPUTS = {name: spec.writes for name, spec in SPECS.items() if spec.writes}


# Kernels run one by one since the process started (bench/user_model.py reads it per step); a
# replayed schedule counts in engine/plans.py's stats instead.
launches = {"kernels": 0}

# The dicts of the active `kernel_host_time` blocks (op name -> seconds).
_host_times: list[dict] = []


@contextlib.contextmanager
def kernel_host_time():
    """Within: the host time of each backend kernel call the engine makes (in any thread of the
    process), summed by op name into the yielded dict (seconds). On a GPU that is the launcher's work
    and the launch, not the kernel's run (which goes on behind it); on the CPU it is the kernel
    itself. With the block's wall time it tells the engine's own per-op work (graph, schedule,
    autograd) from the launchers' (bench/attention.py --phases)."""
    times: dict = {}
    _host_times.append(times)
    try:
        yield times
    finally:
        _host_times.remove(times)


def _count_host_time(op: str, start: float) -> None:
    seconds = time.perf_counter() - start
    for times in _host_times:
        times[op] = times.get(op, 0.0) + seconds


def before_write(target, scheduled=frozenset()) -> None:
    """Announce that target's buffer is about to be overwritten outside a schedule (fused kernels)."""
    for hook in BEFORE_WRITE:
        hook(target, scheduled)


def realize(targets, keep_saved: bool = True, on_ready=None) -> None:
    """Compute every target tensor's buffer.

    keep_saved: also keep buffers of realized intermediates that require grad,
    because a later `.backward()` reads them (PyTorch's saved tensors).
    on_ready: called as on_ready(target, buffer) for each target as soon as the kernel that
    computes it has been issued (already realized targets: first), while the rest of the schedule
    still runs: data parallelism starts summing a bucket of gradients there.
    """
    if on_ready is not None:
        for t in targets:
            if t._buf is not None:
                on_ready(t, t._buf)
    elif len(targets) == 1:  # eager code's case: one op over realized inputs, without a schedule
        t = targets[0]
        if t._buf is not None:
            return
        node = t._node
        if node.op not in WRITES_INPUTS:
            for inp, version in zip(node.inputs, node.input_versions):
                if inp._buf is None or inp._storage.version != version:
                    break  # (a lazy input: schedule; a stale one: schedule refuses it)
            else:
                _realize_one(node, targets, keep_saved)
                return
    order, readers = schedule(targets)
    if not order:
        return
    if len(order) == 1 and on_ready is None and order[0].op not in WRITES_INPUTS:
        _realize_one(order[0], targets, keep_saved)
        return
    replayed = on_ready is None and plans.replays(order)
    if replayed and plans.transfers(order):
        realize(plans.transfers(order), keep_saved=keep_saved)  # copies from the host: not recordable
        order, readers = schedule(targets)
        replayed = plans.replays(order)
    target_keys, keep = _kept(order, targets, keep_saved)
    if fusion.ENABLED and _fuses(order[0].device):
        order = fusion.fuse(order, readers, target_keys, keep)
    if replayed:
        values = plans.run(order, readers, target_keys, keep, _run_loop, announce_writes, WRITES_INPUTS)
    else:
        values = _run_loop(order, readers, target_keys, keep, on_ready, targets)
    for key, tensor in keep.items():
        hold(tensor, values[key])
    for t in targets:
        if t._buf is None:
            hold(t, values[(id(t._node), t._index)])
        if not t._requires_grad:
            t._node = None  # no backward will need the recipe: let the graph behind it go


def _kept(order, targets, keep_saved: bool):
    """(keys of the targets' outputs, {key: tensor} of every output whose buffer a tensor keeps).
    Keys are (id(node), output index), as schedule.output_key makes them; written out in the loops
    below, which run once per kernel: they are the engine's per-op cost."""
    target_keys = {(id(t._node), t._index) for t in targets if t._buf is None}
    # Tensor objects seen in the graph, by output key: the ones we may keep.
    keep: dict[tuple, object] = {}
    if keep_saved:
        for node in order:
            for inp in node.inputs:
                if inp._buf is None and inp._requires_grad:
                    keep[(id(inp._node), inp._index)] = inp
            for extra in node.saved:  # what a multi-output node's gradient rule will read
                if extra._buf is None:
                    keep[(id(node), extra._index)] = extra
    for t in targets:
        if t._buf is None:
            keep[(id(t._node), t._index)] = t
    return target_keys, keep


def announce_writes(order) -> None:
    """Before a schedule overwrites inputs in place: the hooks that give lazy readers of the old
    contents a copy of them (ops/inplace.py)."""
    scheduled = None
    for node in order:
        for i in WRITES_INPUTS.get(node.op, ()):
            if BEFORE_WRITE and readers_of(node.inputs[i]):
                if scheduled is None:
                    scheduled = _scheduled_ids(order)
                before_write(node.inputs[i], scheduled)


def _scheduled_ids(order) -> set:
    """The ids of the graph nodes a schedule runs (a fused group's members included)."""
    return {id(n) for step in order for n in getattr(step, "nodes", (step,))}


def _run_loop(order, readers, target_keys, keep, on_ready=None, targets=(), announce=True) -> dict:
    """Run each node's kernel in order; returns the buffers of the outputs in target_keys and keep,
    by key. Every other intermediate is released after its last reader. announce=False: the caller
    has run announce_writes already (a schedule recorded as a CUDA graph, engine/plans.py)."""
    watched: dict[int, list] = {}  # id(node) -> the targets it computes, for on_ready
    if on_ready is not None:
        for t in targets:
            if t._buf is None:
                watched.setdefault(id(t._node), []).append(t)
    values: dict[tuple, object] = {}
    backends: dict[str, object] = {}
    grouped, late_groups = grouping.plan(order, readers, target_keys, bool(watched), WRITES_INPUTS, _has_cast_many)
    scheduled = None
    for step, node in enumerate(order):
        backend = backends.get(node.device)
        if backend is None:
            backend = backends[node.device] = get_backend(node.device)
        if grouped and id(node) in grouped:
            group = grouped[id(node)]
            if group is not None:  # an early group's first cast: the whole group now
                _run_casts(group, backend, values, readers, target_keys, keep, watched, on_ready)
            continue
        written = WRITES_INPUTS.get(node.op, ())
        for i in written:
            if announce and BEFORE_WRITE and readers_of(node.inputs[i]):
                if scheduled is None:
                    scheduled = _scheduled_ids(order)
                before_write(node.inputs[i], scheduled)
        args = [inp._buf if inp._buf is not None else values[(id(inp._node), inp._index)] for inp in node.inputs]
        start = time.perf_counter() if DEBUG >= 2 or _host_times else 0.0
        if node.op == "fused_elementwise":  # a group of elementwise nodes (engine/fusion.py)
            result = backend.fused_elementwise(args, **node.attrs)
        else:
            result = backend.run(node.op, args, node.attrs)
        launches["kernels"] += 1
        if _host_times:
            _count_host_time(node.op, start)
        outputs = result if node.n_outputs > 1 else (result,)
        if DEBUG:
            _trace(step, node, args, outputs, backend, start)
        del args, result
        for i in written:
            mark_written(node.inputs[i])
        node_id = node.output_id
        for index, value in enumerate(outputs):
            key = (node_id, index)
            if readers.get(key, 0) or key in target_keys or key in keep:
                values[key] = value
        if watched and node_id in watched:
            for t in watched.pop(node_id):
                on_ready(t, outputs[t._index])
        del outputs, value
        # Inputs read for the last time: drop them (and recycle their memory) unless kept.
        for inp in node.inputs:
            if inp._buf is not None:
                continue
            key = (id(inp._node), inp._index)
            left = readers[key] - 1
            readers[key] = left
            if left == 0 and key not in keep:
                backend.release(values.pop(key))

    for group in late_groups:
        _run_casts(group, get_backend(group[0].device), values, readers, target_keys, keep, watched, on_ready)
    return values


def _realize_one(node, targets, keep_saved: bool) -> None:
    """realize() of a schedule of one kernel that writes none of its inputs (so every input already
    holds a buffer): eager code's common case (one op, then .realize() or .backward()), without the
    bookkeeping of intermediates that the general loop needs. What it keeps is what that loop would
    keep: the targets, and with keep_saved the outputs the node's gradient rule reads."""
    backend = get_backend(node.device)
    args = [inp._buf for inp in node.inputs]
    start = time.perf_counter() if DEBUG >= 2 or _host_times else 0.0
    result = backend.run(node.op, args, node.attrs)
    launches["kernels"] += 1
    if _host_times:
        _count_host_time(node.op, start)
    outputs = result if node.n_outputs > 1 else (result,)
    if DEBUG:
        _trace(0, node, args, outputs, backend, start)
    if keep_saved:
        for extra in node.saved:
            if extra._buf is None:
                hold(extra, outputs[extra._index])
    for t in targets:
        if t._buf is None:
            hold(t, outputs[t._index])
        if not t._requires_grad:
            t._node = None  # (as realize's loop)


def _fuses(device: str) -> bool:
    return getattr(get_backend(device), "fuses_elementwise", False)


def _has_cast_many(device: str) -> bool:
    return get_backend(device).has("cast_many")


def _run_casts(nodes, backend, values, readers, target_keys, keep, watched, on_ready) -> None:
    """Run a group of cast nodes (engine/grouping.py) in one cast_many launch, then do for each what
    the schedule's loop does after a node: keep its output where needed, tell on_ready, release
    inputs read for the last time. An input that is not contiguous takes its own cast kernel."""
    args = [
        inp._buf if inp._buf is not None else values[(id(inp._node), inp._index)] for n in nodes for inp in n.inputs
    ]
    together = [i for i, a in enumerate(args) if a.flags.c_contiguous]
    outputs = [None] * len(nodes)
    start = time.perf_counter()
    cast = backend.cast_many([args[i] for i in together], [nodes[i].attrs["dtype"] for i in together])
    launches["kernels"] += 1 + len(nodes) - len(together)
    for i, out in zip(together, cast):
        outputs[i] = out
    for i, node in enumerate(nodes):
        if outputs[i] is None:
            outputs[i] = backend.run("cast", [args[i]], node.attrs)
    if _host_times:
        _count_host_time("cast_many", start)
        if DEBUG:
            print(f"[gradcraft]   grouped {node.device:7s} cast ({len(together)} in one launch)", file=sys.stderr)
    del args, cast
    for node, value in zip(nodes, outputs):
        key = (id(node), 0)
        if readers.get(key, 0) or key in target_keys or key in keep:
            values[key] = value
        if watched and id(node) in watched:
            for t in watched.pop(id(node)):
                on_ready(t, value)
        inp = node.inputs[0]
        if inp._buf is None:
            key = (id(inp._node), inp._index)
            readers[key] -= 1
            if readers[key] == 0 and key not in keep:
                backend.release(values.pop(key))


def _trace(step, node, args, outputs, backend, start) -> None:
    if DEBUG >= 2:
        backend.synchronize()
        ms = (time.perf_counter() - start) * 1e3
        shapes = " ".join(str(tuple(a.shape)) for a in args)
        out_bytes = sum(o.nbytes for o in outputs)
        print(
            f"[gradcraft] {step:5d} {node.device:7s} {_name(node):24s} in {shapes} -> "
            f"{' '.join(str(tuple(o.shape)) for o in outputs)} {out_bytes / 1e6:.3f} MB {ms:.3f} ms",
            file=sys.stderr,
        )
    else:
        print(f"[gradcraft] {step:5d} {node.device:7s} {_name(node)}", file=sys.stderr)


def _name(node) -> str:
    """The op, or for a fused group its ops: fused(mul sigmoid mul)."""
    if node.op != "fused_elementwise":
        return node.op
    return "fused(" + " ".join(e[1] for e in node.attrs["program"] if e[0] == "op") + ")"
