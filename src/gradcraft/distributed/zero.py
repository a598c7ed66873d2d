"""ZeRO-1: the AdamW state sharded over the data-parallel processes (`gradcraft train --zero`).

Plain data parallelism keeps, on every process, two float32 moments for every weight: 8 bytes a
parameter, the same 8 bytes on each of the world processes. With ZeRO-1 each process owns a 1/world
slice of every gradient bucket (buckets.py, padded to a multiple of world):

    backward          each bucket is reduce-scattered as soon as it is complete: a process
                      receives only the sum of its own slice of the gradients
    grad norm         the sum of squares of each slice, all-reduced: the global norm, and the
                      clipping coefficient from it
    AdamW             on the slice only: the moments exist for 1/world of the weights here
    all-gather        every process's updated slice of the weights, into every process's weights

The update is the plain one, element by element (the same fused AdamW kernel), so the weights
equal plain data parallelism's to float rounding of the gradient sums. Checkpoints hold the full,
unsharded state in the ordinary format: `state_dict` gathers it (every process must call it) and
`load_state_dict` takes its slice, so a run resumes on any number of processes, with or without
--zero.
"""

import numpy as np

from gradcraft import dtypes
from gradcraft.nn.module import Parameter
from gradcraft.ops.collective import device_array, from_device_array, write_flat
from gradcraft.ops.optim import grad_norm
from gradcraft.optim import AdamW
from gradcraft.tensor import Tensor


class ZeroAdamW:
    def __init__(self, opt: AdamW, buckets, group, log=print):
        self.outer = opt  # the model's AdamW: its param_groups (lr, betas...) and parameter order
        self.param_groups = opt.param_groups  # set_lr writes the learning rate here
        self.buckets, self.group, self.log = buckets, group, log
        self.inner = None  # AdamW over this process's pieces, built once the buckets are laid out
        self.pieces = []  # (piece, param, bucket, start in the bucket, start in the param, size)
        self._loaded = None  # a checkpoint's full state, applied when the pieces exist
        self.built = False

    # ------------------------------------------------------------ building the shard

    def _build(self) -> None:
        self.built = True
        world, rank = self.group.world, self.group.rank
        group_of = {id(p): gi for gi, g in enumerate(self.outer.param_groups) for p in g["params"]}
        per_group = [[] for _ in self.outer.param_groups]
        for bucket in self.buckets.buckets:
            shard = bucket.padded_size // world
            lo, hi = rank * shard, (rank + 1) * shard
            for param, offset, size in bucket.slots:
                a, b = max(lo, offset), min(hi, offset + size)
                if a >= b:
                    continue
                view = device_array(param).reshape(-1)[a - offset : b - offset]  # shares the weights' memory
                piece = Parameter(from_device_array(view, param.dtype, param.device))  # decay: its group's
                self.pieces.append((piece, param, bucket, a - lo, a - offset, b - a))
                per_group[group_of[id(param)]].append(piece)
        groups = [
            dict({k: v for k, v in g.items() if k != "params" and not k.startswith("_")}, params=pieces)
            for g, pieces in zip(self.outer.param_groups, per_group)
        ]
        # (a process whose slices hold only padding has no optimizer of its own: AdamW needs parameters)
        nonempty = [g for g in groups if g["params"]]
        self._group_index = [gi for gi, g in enumerate(groups) if g["params"]]
        self.inner = AdamW(nonempty, fused=self.outer.fused) if nonempty else None
        if self._loaded is not None:
            self._apply_loaded(self._loaded)
            self._loaded = None
        total = sum(size for b in self.buckets.buckets for _, _, size in b.slots)
        mine = sum(p[5] for p in self.pieces)
        full, sharded = 8 * total, 8 * mine
        self.log(
            f"ZeRO-1: AdamW state {full / 2**20:,.1f} MiB per process without sharding, {sharded / 2**20:,.1f} "
            f"MiB with it on {world} processes: {(full - sharded) / 2**20:,.1f} MiB saved per process"
        )

    # ------------------------------------------------------------ one step

    def grad_norm_and_scale(self, max_norm: float | None):
        """[global norm, clipping coefficient] from this process's slices (after buckets.finish)."""
        if not self.built:
            self._build()
        for piece, _, bucket, at, _, size in self.pieces:
            piece.grad = from_device_array(bucket.shard[at : at + size], piece.dtype, piece.device)
        device = self.buckets.params[0].device
        grads = [p.grad for p, *_ in self.pieces]
        if grads:
            squares = device_array(grad_norm(grads))[:1] ** 2
        else:
            squares = self.buckets.buckets[0].flat[:1].astype(np.float32) * 0  # a zero, numpy or cupy as the buckets
        self.group.all_reduce([squares])
        xp = _array_module(squares)
        norm = xp.sqrt(squares.astype(xp.float32))
        coef = xp.minimum(1.0, max_norm / (norm + 1e-6)) if max_norm else xp.ones_like(norm)
        return from_device_array(xp.concatenate([norm, coef]).astype(xp.float32), dtypes.float32, device)

    def step(self, grad_scale=None) -> None:
        """AdamW on this process's slices, then every process's slices into everyone's weights."""
        if self.inner is not None:
            for gi, group in zip(self._group_index, self.inner.param_groups):
                group["lr"] = self.outer.param_groups[gi]["lr"]
            self.inner.step(grad_scale=grad_scale)
        for bucket in self.buckets.buckets:
            shard = bucket.padded_size // self.group.world
            mine = bucket.shard  # the gradient slice is spent: it now carries the updated weights
            mine[...] = 0
            for piece, param, b, at, _, size in self.pieces:
                if b is bucket:
                    mine[at : at + size] = device_array(piece)
            self.group.all_gather(mine[:shard], bucket.flat)
            for param, offset, size in bucket.slots:
                write_flat(param, bucket.flat[offset : offset + size])

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.outer.zero_grad()
        for piece, *_ in self.pieces:
            piece.grad = None

    # ------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        """The full AdamW state in the ordinary format (a collective: every process calls it)."""
        params = [p for g in self.outer.param_groups for p in g["params"]]
        outer_state = self.outer.state_dict()
        if not self.built:
            return self._loaded or outer_state  # before the first step: nothing sharded yet
        xp = _array_module(self.buckets.buckets[0].flat)
        # the step count (every process with slices has the same; one may have none)
        counted = [self.inner.state[id(piece)]["step"] for piece, *_ in self.pieces if id(piece) in self.inner.state]
        votes = xp.array([max(counted, default=0), 1 if counted else 0], xp.float32)
        self.group.all_reduce([votes])
        step = int(round(float(votes[0]) / max(1.0, float(votes[1]))))
        state = {}
        for name in ("exp_avg", "exp_avg_sq"):
            full = {}
            for bucket in self.buckets.buckets:
                shard = bucket.padded_size // self.group.world
                mine = xp.zeros(shard, xp.float32)
                for piece, param, b, at, _, size in self.pieces:
                    if b is bucket and id(piece) in self.inner.state:
                        mine[at : at + size] = device_array(self.inner.state[id(piece)][name])
                gathered = xp.empty(bucket.padded_size, xp.float32)
                self.group.all_gather(mine, gathered)
                gathered = gathered if xp is np else xp.asnumpy(gathered)
                for param, offset, size in bucket.slots:
                    full[id(param)] = gathered[offset : offset + size].reshape(param.shape).copy()
            for index, param in enumerate(params):
                if id(param) in full and step:
                    state.setdefault(index, {"step": step})[name] = full[id(param)]
        return {"state": state, "param_groups": outer_state["param_groups"]}

    def load_state_dict(self, state_dict: dict) -> None:
        for group, saved in zip(self.outer.param_groups, state_dict["param_groups"]):
            group.update(saved)
        if self.pieces:
            self._apply_loaded(state_dict)
        else:
            self._loaded = state_dict

    def _apply_loaded(self, state_dict: dict) -> None:
        index = {id(p): i for i, p in enumerate(p for g in self.outer.param_groups for p in g["params"])}
        for piece, param, _, _, start, size in self.pieces:
            saved = state_dict["state"].get(index[id(param)]) or state_dict["state"].get(str(index[id(param)]))
            if not saved:
                continue
            entry = {"step": int(saved["step"])}
            for name in ("exp_avg", "exp_avg_sq"):
                values = np.asarray(saved[name], np.float32).reshape(-1)[start : start + size]
                entry[name] = Tensor(np.ascontiguousarray(values), device=piece.device)
            self.inner.state[id(piece)] = entry


def _array_module(array):
    """numpy, or cupy for a GPU array (this module runs on both, as the buckets do)."""
    if isinstance(array, np.ndarray):
        return np
    import cupy

    return cupy
