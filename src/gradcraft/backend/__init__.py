"""The backend contract: the closed set of kernels a device implements.

A kernel takes device arrays and a dict of attributes, and returns a new
array (or a view, for movement kernels), or a tuple of arrays for the fused
backward kernels marked (multi). Kernels never modify their inputs, except
those whose spec lists the inputs they write (`assign`, `kv_append_attention`,
`greedy_advance`: engine/realize.py's WRITES_INPUTS comes from the specs).

Each kernel is declared once, by its op's spec (backend/opspec.py); the tables below are read
from the specs. PRIMITIVES are what every backend must have. OPTIONAL are fused kernels a backend
may leave out: where one is missing, the op layer computes it from primitives (the spec's
fallback, gradcraft/ops/fallback.py), and the gradient then follows the primitives' own rules, so
a missing forward kernel never asks for its backward one. A backend that has a fused forward
kernel must have its backward kernel too (OPTIONAL_PAIRS). A gated kernel (flash_attention,
linear_cross_entropy, ...) is asked for only where the backend says it is the fast way (the
spec's `gate`, a method of Backend).

`backend/cpu/` implements every kernel with NumPy, one module per kernel family, and is the
reference the C and CUDA kernels are tested against.
"""

import numpy as np

from gradcraft.backend.opspec import SPECS
from gradcraft.errors import UserError

# The contract, from the ops' specs (backend/opspec.py: one declaration per op).
PRIMITIVES = frozenset(name for name, spec in SPECS.items() if not spec.optional)
# optional fused forward kernel -> its fused backward kernels
OPTIONAL_PAIRS = {
    name: tuple(spec.backward) for name, spec in SPECS.items() if spec.optional and spec.backward_of is None
}
OPTIONAL = frozenset(name for name, spec in SPECS.items() if spec.optional)
KERNELS = PRIMITIVES | OPTIONAL


def assemble_kernels(families) -> dict:
    """One kernel table from the KERNELS dicts of a backend's family modules; a name that two
    families define is an error (each kernel lives in one place)."""
    table = {}
    for family in families:
        twice = table.keys() & family.KERNELS.keys()
        if twice:
            raise ValueError(f"{family.__name__} defines kernels another family has: {sorted(twice)}")
        table.update(family.KERNELS)
    return table


def check_optimizer_state(params, grads, exp_avgs, exp_avg_sqs, what: str = "adamw_step") -> None:
    """Every list equally long and, per parameter k, grad/exp_avg/exp_avg_sq holding exactly as many
    elements as params[k]; optimizer states floating point. The kernels (C, NumPy chunks, CUDA)
    walk params[k].size elements of all four: a state of another size (a damaged or foreign
    checkpoint) would read or write out of bounds. Raises UserError naming the tensor."""
    lists = {"grads": grads, "exp_avgs": exp_avgs, "exp_avg_sqs": exp_avg_sqs}
    for name, arrays in lists.items():
        if len(arrays) != len(params):
            raise UserError(f"{what}: {len(params)} parameters but {len(arrays)} {name}")
    for k, p in enumerate(params):
        n = int(p.size)
        for name, arrays in lists.items():
            a = arrays[k]
            if int(a.size) != n:
                raise UserError(
                    f"{what}: {name[:-1]} of parameter {k} has {int(a.size)} elements {tuple(a.shape)}, "
                    f"the parameter has {n} {tuple(p.shape)} (a damaged or mismatched optimizer state?)"
                )
            if name != "grads" and a.dtype.kind != "f" and a.dtype.name != "bfloat16":
                raise UserError(
                    f"{what}: {name[:-1]} of parameter {k} has dtype {a.dtype}; optimizer states must be floating point"
                )


class Backend:
    """What the engine needs from a device besides its kernels."""

    device: str
    kernels: dict

    def run(self, op: str, args: list, attrs: dict):
        return self.kernels[op](*args, **attrs)

    def from_numpy(self, array):
        raise NotImplementedError

    # Whether the engine should hand this backend fused elementwise groups (engine/fusion.py): only
    # where fused_elementwise is faster than the kernels one by one.
    fuses_elementwise = False

    def fused_elementwise(self, args: list, program: tuple, shape: tuple, dtype):
        """Run an elementwise program (engine/fusion.py) over args; returns its last value, of `shape`
        and `dtype`. Here: each op's own kernel in turn, which is what a generated kernel must equal.
        Entries: ("in", k, dtype name) reads args[k]; ("op", name, refs, attrs, dtype name, shape)
        runs kernel `name` on the values at positions `refs` with dict(attrs)."""
        values = []
        for entry in program:
            if entry[0] == "in":
                values.append(args[entry[1]])
            else:
                values.append(self.run(entry[1], [values[r] for r in entry[2]], dict(entry[3])))
        return values[-1]

    def to_numpy(self, array):
        raise NotImplementedError

    def to_numpy_later(self, array):
        """Start copying a device array to the host behind the work queued so far, and return a
        function that waits for the copy and gives the NumPy array: the host can queue more work
        meanwhile (a decoding loop launches the next step before it reads this one's tokens). Here,
        for devices that run synchronously: the copy now."""
        result = np.array(self.to_numpy(array), copy=True)
        return lambda: result

    def release(self, array) -> None:
        """An intermediate the engine no longer needs; the device may reuse its memory."""

    def synchronize(self) -> None:
        """Wait for queued kernels (for timing)."""

    def has(self, capability: str) -> bool:
        """Whether this device implements an optional method of this class (a fused kernel such as
        "adamw_step" or "grad_norm"), or a kernel of its table: asked by the layers above, which
        never compare backend classes."""
        if capability in getattr(self, "kernels", {}):
            return True
        method = getattr(type(self), capability, None)
        return callable(method) and method is not getattr(Backend, capability, None)

    # Multi-tensor optimizer kernels (outside the graph: they update buffers in place, in one launch
    # on the GPU). Step-dependent numbers arrive in device arrays so the launches never change.

    def adamw_step(
        self, params, grads, exp_avgs, exp_avg_sqs, lr_step, *, beta1, beta2, eps, weight_decay, grad_scale=None
    ) -> None:
        """PyTorch's AdamW rule over lists of buffers, in place. lr_step: float32 array [lr, step];
        grad_scale: None or an array whose first element multiplies every gradient (clipping)."""
        raise NotImplementedError

    def grad_norm(self, grads, max_norm: float = 0.0):
        """float32 array [global L2 norm, min(1, max_norm / (norm + 1e-6))] (1 when max_norm is 0)."""
        raise NotImplementedError

    def scale_many(self, arrays, scale) -> None:
        """Every array (contiguous float32/bfloat16/float16) multiplied in place by scale[0] (a float32
        array), in float32 and rounded once to its dtype: clip_grad_norm_'s scaling, in one launch."""
        raise NotImplementedError

    def cast_many(self, arrays, dtypes) -> list:
        """New arrays: arrays[i] (contiguous float32/bfloat16/float16) converted to dtypes[i], each
        exactly as the `cast` kernel converts it, in one launch. The engine groups a schedule's casts
        of weights (and of weight gradients) into it where the device has it (engine/grouping.py)."""
        raise NotImplementedError

    def flash_attention_supported(self, dtype, head_dim: int, value_dim: int) -> bool:
        """Whether this device's flash-attention kernels are the fast way for this case (else attention
        takes the explicit or recomputing path)."""
        return False

    def recomputing_attention_preferred(self, dtype) -> bool:
        """Whether the `sdpa` kernels (weights recomputed in the backward pass) beat explicit attention
        (weights kept) here, so that attention takes them even when asked to keep the weights."""
        return False

    def kv_attention_supported(self, dtype, length: int, head_dim: int) -> bool:
        """Whether this device's kv_attention kernel takes a cache of `length` slots and this head dim
        (else the op layer composes it from primitives)."""
        return self.has_kernel("kv_attention")

    def kv_append_supported(self, dtype, length: int, head_dim: int) -> bool:
        """Whether kv_cache_attention with this step's keys/values takes this device's
        kv_append_attention kernel (else the op layer rotates, writes and attends in separate ops)."""
        return self.has_kernel("kv_append_attention")

    def norm_linear_supported(self, rows: int, N: int, K: int, dtype, activation) -> bool:
        """Whether F.norm_linear should take this device's fused kernel for `rows` rows of K features
        and an (N, K) weight (else the op layer composes it: add, norm, matmul, bias, activation)."""
        return False

    def fused_linear_bias(self, dtype) -> bool:
        """Whether F.linear with a bias should take this device's linear_bias kernels (the bias added
        in the product's epilogue, its gradient summed by the weight gradient's product) rather than
        a matmul and an add (and a sum in the backward pass)."""
        return False

    def fused_linear_cross_entropy(self, dtype) -> bool:
        """Whether F.linear_cross_entropy should take this device's fused kernel (logits never whole)
        rather than a matmul and cross_entropy."""
        return False

    def write(self, array, values) -> None:
        """Copy host values into an existing device buffer (same shape)."""
        raise NotImplementedError

    def kernel_status(self) -> str:
        """One line about how this device's kernels are built, for benchmark headers ("" if nothing)."""
        return ""

    def memory_info(self) -> dict:
        """Bytes the device's allocator holds (`reserved_bytes`, what the process takes from the device)
        and hands out now (`used_bytes`)."""
        from gradcraft.backend.memory import stats

        return {"used_bytes": stats.live_bytes, "reserved_bytes": stats.peak_bytes}

    def check_contract(self) -> None:
        """Every primitive present, no unknown kernel, and each optional fused kernel with its backward."""
        names = set(self.kernels)
        missing = PRIMITIVES - names
        for forward, backward in OPTIONAL_PAIRS.items():
            if forward in names:
                missing |= set(backward) - names
        if missing:
            raise NotImplementedError(f"backend {self.device} lacks kernels: {sorted(missing)}")
        unknown = names - KERNELS
        if unknown:
            raise NotImplementedError(f"backend {self.device} has kernels outside the contract: {sorted(unknown)}")

    def has_kernel(self, op: str) -> bool:
        """Whether this backend runs `op` itself (else the op layer composes it from primitives)."""
        return op in self.kernels


def slices_tile_one_axis(specs, shape) -> bool:
    """True when the boxes of `specs` (one tuple of (start, stop, step) per leading axis each) differ
    on one axis only, where they are disjoint step-1 ranges covering it whole: then writing each
    gradient into its box fills the output, and no zero-fill is needed."""
    boxes = [
        [slice(*item).indices(n) for item, n in zip(spec, shape)] + [(0, n, 1) for n in shape[len(spec) :]]
        for spec in specs
    ]
    varying = [a for a in range(len(shape)) if len({box[a] for box in boxes}) > 1]
    if len(varying) > 1 or any(s[2] != 1 for box in boxes for s in box):
        return False
    if not varying:
        return len(boxes) == 1 and all(s == (0, n, 1) for s, n in zip(boxes[0], shape))
    axis = varying[0]
    if any(box[a] != (0, shape[a], 1) for box in boxes for a in range(len(shape)) if a != axis):
        return False
    ranges = sorted(box[axis][:2] for box in boxes)
    return ranges[0][0] == 0 and ranges[-1][1] == shape[axis] and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
