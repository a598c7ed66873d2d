"""Elementwise fusion: chains of elementwise kernels in a schedule become one generated kernel.

A user's own activation (`x * torch.sigmoid(1.702 * x)`), a hand-written RMSNorm's scaling, the
gradient rules of both: eagerly, each op is a kernel that reads and writes the whole tensor (and on
a GPU, ~40 us of host time to launch). `fuse(order, ...)` finds, in a scheduled order, the groups of
elementwise nodes whose intermediate results nothing else needs, and puts one `FusedGroup` step in
their place: a program of the group's ops over its external inputs, which the backend runs as one
kernel (`Backend.fused_elementwise`: generated CUDA C on a GPU, backend/cuda/fused.py; generated C
on the CPU where a compiler exists, backend/cpu/native/fused.py; the same kernels one by one
elsewhere, which is the reference). A backend may admit more dtypes (`fused_extra_dtypes`) and
leave small outputs unfused (`fused_min_elements`).

Which nodes join a group: an elementwise op of FUSABLE over floating-point (or bool) values, on one
device, whose output is read only by nodes of the same group, is no target of the realize and is
kept by no tensor; scalar and filled constants (`full`) are folded in as constants. A group never
spans a kernel that writes its inputs (an optimizer's assign): its reads would move past the write.
Every op keeps its own rounding (a bfloat16 result is rounded to bfloat16 where the unfused kernel
would round it), so a fused group computes what its kernels computed one by one.

GRADCRAFT_FUSION=0 turns fusion off; GRADCRAFT_DEBUG=1 prints each group's ops, =2 also the
generated source.
"""

import math
import os

import numpy as np

from gradcraft.device import get_backend

ENABLED = os.environ.get("GRADCRAFT_FUSION", "1") != "0"

UNARY = ("neg", "abs", "sign", "relu", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "silu")
BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "gelu_backward", "silu_backward")
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")
FUSABLE = frozenset(UNARY + BINARY + COMPARE + ("gelu", "where", "cast", "logical_not", "full"))
# the dtypes a fused kernel computes with (its values: float, or bool for comparisons and masks)
VALUE_DTYPES = frozenset(np.dtype(d) for d in ("float32", "float16", "bfloat16", "bool"))
# the dtypes a cast may read besides those (integer ids, counts)
CAST_SOURCES = frozenset(np.dtype(d) for d in ("int32", "int64"))
MIN_OPS = 2  # a group of one op is that op's own kernel


class FusedGroup:
    """A step of a schedule standing for several elementwise nodes (see the module docstring).

    inputs: the external tensors the group reads, once per read (so the schedule's reader counts
    hold); attrs: {"program", "shape", "dtype"} (what Backend.fused_elementwise takes); output_id:
    the id of the node whose output the group computes (values and reader counts are keyed by it);
    nodes: the nodes it stands for, in order."""

    __slots__ = ("op", "inputs", "attrs", "n_outputs", "device", "output_id", "saved", "nodes")

    def __init__(self, inputs, program, shape, dtype, root, nodes):
        self.op = "fused_elementwise"
        self.inputs = tuple(inputs)
        self.attrs = {"program": program, "shape": shape, "dtype": dtype}
        self.n_outputs = 1
        self.device = root.device
        self.output_id = id(root)
        self.saved = ()
        self.nodes = nodes

    def __repr__(self) -> str:
        return f"FusedGroup({' '.join(ins[1] for ins in self.attrs['program'] if ins[0] == 'op')})"


def _dtype_of(t) -> np.dtype:
    return np.dtype(t.dtype.np)


def _fusable(node, out_dtype, values=VALUE_DTYPES) -> bool:
    if node.op not in FUSABLE or node.n_outputs != 1:
        return False
    if out_dtype not in values:
        return False
    if node.op == "full":
        return True
    sources = CAST_SOURCES | values if node.op == "cast" else values
    return all(_dtype_of(inp) in sources for inp in node.inputs)


def fuse(order, readers, target_keys, keep) -> list:
    """The order with fusable groups replaced by FusedGroup steps (the order itself where none)."""
    backend = get_backend(order[0].device)
    # a backend may compute more dtypes than VALUE_DTYPES (the CPU's C kernels: float64 too), and run
    # groups below a size by the kernels one by one (the CPU: a compile is not worth it for small arrays)
    values = VALUE_DTYPES | getattr(backend, "fused_extra_dtypes", frozenset())
    smallest = getattr(backend, "fused_min_elements", 0)
    info = {}  # id(node) -> (output shape, NumPy dtype), from the tensors that point at its output
    for tensor in keep.values():
        if tensor._index == 0:
            info[id(tensor._node)] = (tuple(tensor.shape), _dtype_of(tensor))
    for node in order:
        for inp in node.inputs:
            if inp._buf is None and inp._index == 0:
                info[id(inp._node)] = (tuple(inp.shape), _dtype_of(inp))
    if smallest and all(math.prod(shape) < smallest for shape, _ in info.values()):
        return order
    consumers: dict[int, list] = {}
    for node in order:
        for inp in node.inputs:
            if inp._buf is None:
                consumers.setdefault(id(inp._node), []).append(node)
    # Segments between kernels that write their inputs: no group crosses one.
    segment, segment_of = 0, {}
    for node in order:
        segment_of[id(node)] = segment
        if node.op in ("assign", "kv_append_attention", "greedy_advance"):
            segment += 1
    group_of: dict[int, int] = {}
    roots: dict[int, object] = {}
    members: dict[int, list] = {}
    for node in reversed(order):
        if id(node) not in info or not _fusable(node, info[id(node)][1], values):
            continue
        key = (id(node), 0)
        users = consumers.get(id(node), ())
        groups = {group_of.get(id(u)) for u in users}
        joined = None
        if users and key not in target_keys and key not in keep and len(groups) == 1 and None not in groups:
            g = groups.pop()
            if segment_of[id(roots[g])] == segment_of[id(node)] and readers.get(key, 0) == len(users):
                joined = g
        if joined is None:
            if node.op == "full" or (smallest and math.prod(info[id(node)][0]) < smallest):
                continue  # a constant on its own, or too small an output: not a group root
            joined = id(node)
            roots[joined] = node
            members[joined] = []
        group_of[id(node)] = joined
        members[joined].append(node)
    groups = {g: nodes for g, nodes in members.items() if sum(n.op != "full" for n in nodes) >= MIN_OPS}
    if not groups:
        return order
    out = []
    for node in order:
        g = group_of.get(id(node))
        if g is None or g not in groups:
            out.append(node)
        elif roots[g] is node:
            out.append(_group(groups[g], node, info))
    return out


def _group(nodes, root, info) -> FusedGroup:
    """The FusedGroup of nodes (root last in the order), its program in topological order."""
    inside = {id(n) for n in nodes}
    ordered = list(reversed(nodes))  # members were collected from the root backwards
    index: dict[int, int] = {}
    program, inputs = [], []
    for node in ordered:
        refs = []
        for inp in node.inputs:
            if inp._buf is None and id(inp._node) in inside:
                refs.append(index[id(inp._node)])
            else:
                program.append(("in", len(inputs), _dtype_of(inp).name))
                inputs.append(inp)
                refs.append(len(program) - 1)
        shape, dtype = info[id(node)]
        program.append(("op", node.op, tuple(refs), _attrs(node.attrs), dtype.name, shape))
        index[id(node)] = len(program) - 1
    shape, dtype = info[id(root)]
    return FusedGroup(inputs, tuple(program), shape, dtype, root, ordered)


def _attrs(attrs: dict) -> tuple:
    return tuple(sorted(attrs.items()))  # (values are numbers, strings, shapes and NumPy dtypes: hashable)
