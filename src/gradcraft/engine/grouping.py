"""Casts of a schedule run together: one multi-tensor launch instead of one kernel each.

A mixed-precision training step casts every float32 weight to bf16 in its forward pass and every
bf16 weight gradient back to float32 in its backward pass: on gpt2-124m, ~300 small kernels of
5-8 us of GPU time each. Where the device has `cast_many` (Backend.cast_many), realize() runs
instead:

- early: the casts of tensors that already hold a buffer (the weights) together, where the first of
  them stood in the schedule. Only those standing before the schedule's first kernel that writes
  its inputs (an optimizer's assign): a cast after it may have to read what it writes.
- late: the casts whose result is a target that no other kernel of the schedule reads (the
  gradients), together, after every other kernel of the schedule. Only those standing after the
  schedule's last kernel that writes its inputs: one before it may read (through a view) what it
  writes. Not when a caller watches targets as they are computed (realize's on_ready: data
  parallelism sums buckets early).

Each grouped cast gives the bits its own kernel would give; only the order of independent kernels
changes (and a late cast's input lives until the end of the schedule).
"""

from gradcraft.engine.graph import Node

# The dtypes Backend.cast_many converts between (NumPy dtype names).
DTYPES = ("float32", "bfloat16", "float16")


def plan(
    order: list, readers: dict, target_keys: set, watching: bool, writes_inputs: dict, can_group
) -> tuple[dict, list]:
    """(at, late) for the casts worth grouping (two or more of a kind on a device). at maps the id of
    every grouped node to what the schedule's loop does there: the first cast of an early group maps
    to the group's nodes (run them all), every other grouped node to None (skip it). late: the late
    groups, one per device, to run after the schedule. can_group(device) says whether the device has
    cast_many."""
    if sum(node.op == "cast" for node in order) < 2:  # (nothing to group: the common eager case, at once)
        return {}, []
    early: dict[str, list] = {}
    late: dict[str, list] = {}
    for node in order:
        if node.op in writes_inputs:
            break
        if _groupable(node, can_group) and node.inputs[0]._buf is not None and node.inputs[0]._buf.flags.c_contiguous:
            early.setdefault(node.device, []).append(node)
    if not watching:
        for node in order:
            if node.op in writes_inputs:
                # A cast before a write must read the old data, and its input may be a view of the
                # written buffer (w.reshape(-1).to(bf16) beside w's assign): none moves past a write.
                late.clear()
                continue
            if (
                _groupable(node, can_group)
                and node.inputs[0]._buf is None
                and (id(node), 0) in target_keys
                and not readers.get((id(node), 0), 0)
            ):
                late.setdefault(node.device, []).append(node)
    at: dict = {}
    for nodes in early.values():
        if len(nodes) > 1:
            at.update({id(n): None for n in nodes})
            at[id(nodes[0])] = nodes
    late_groups = [nodes for nodes in late.values() if len(nodes) > 1]
    for nodes in late_groups:
        at.update({id(n): None for n in nodes})
    return at, late_groups


def _groupable(node: Node, can_group) -> bool:
    return (
        node.op == "cast"
        and node.inputs[0].dtype.np.name in DTYPES
        and node.attrs["dtype"].name in DTYPES
        and can_group(node.device)
    )
