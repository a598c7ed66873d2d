"""One step's gradients: forward and backward over the micro-batches, summed over the processes,
and the global gradient norm; recorded once as a CUDA graph where asked (`--cuda_graph`)."""

import gradcraft as gc
from gradcraft.distributed import all_reduce_tensors
from gradcraft.distributed.buckets import GradientBuckets
from gradcraft.distributed.zero import ZeroAdamW
from gradcraft.capture import CapturedStep
from gradcraft.errors import UserError
from gradcraft.ops.creation import advance_dropout
from gradcraft.optim import grad_norm_and_scale


class GradientStep:
    """Forward and backward over a step's micro-batches, then the global gradient norm.

    The micro-batches are copied into the captured step's fixed input tensors, so on a GPU the whole computation can
    be recorded once as a CUDA graph and replayed every step (`--cuda_graph`): Python then runs once,
    not once per kernel. The optimizer update stays outside the graph, after the host has checked
    that the loss and the norm are finite.
    """

    def __init__(self, model, opt, tc, accum, seq_len, compute_dtype, log, group=None, buckets=None):
        self.model, self.opt, self.tc, self.accum, self.compute_dtype = model, opt, tc, accum, compute_dtype
        self.group = group
        self.world = group.world if group is not None else 1
        if buckets is None and self.world > 1:
            buckets = GradientBuckets(group, model.parameters(), tc.bucket_mb * 2**20)
        self.buckets = buckets
        use_graph = tc.cuda_graph == "on" or (tc.cuda_graph == "auto" and tc.device.startswith("cuda"))
        self.captured = CapturedStep(self._compute, tc.device) if use_graph else None
        self.log = log

    def _compute(self, *inputs):
        """inputs: x0, y0, x1, y1, ... (token ids of each micro-batch)."""
        if self.model.config.uses_dropout:
            # New masks for this step: the dropout counter (in device memory) moves on by one here, by a
            # kernel that a captured graph records, so each replay draws the masks an eager step would.
            # The step's forward and backward both run after this and before the next step's move, so
            # they see one counter value: the backward regenerates the forward's masks.
            advance_dropout(self.tc.device)
        losses, stats = [], []
        for i, (x, y) in enumerate(zip(inputs[::2], inputs[1::2])):
            # the last micro-batch's backward completes the gradients: its buckets are summed over the
            # processes as backward produces them (the earlier ones only accumulate, as DDP's no_sync)
            summing = self.buckets is not None and i == self.accum - 1
            if summing:
                self.buckets.start()
            _, loss = self.model(x, y, label_smoothing=self.tc.label_smoothing, compute_dtype=self.compute_dtype)
            logged = {"loss": self.model.last_losses["cross_entropy"], **_moe_stats(self.model)}
            if len(logged) > 1:
                gc.realize(loss, *logged.values())  # computed by the forward pass, read after backward
            # Seeding the backward pass with 1/(accum x processes) (not backward() on a scaled loss) makes
            # `loss` the root, which the backward schedule realizes: its value is read afterwards, never
            # recomputed. Summed over the micro-batches and processes, the gradient is that of the mean loss.
            seed = 1.0 / (self.accum * self.world)
            loss.backward(
                gc.full(loss.shape, seed, dtype=loss.dtype, device=loss.device),
                on_grad_ready=self.buckets.ready if summing else None,
            )
            losses.append(logged.pop("loss"))
            stats.append(logged)
        if self.buckets is not None:
            self.buckets.finish()  # the last buckets, and .grad pointed at the sums
            # the logged values too (a few scalars)
            all_reduce_tensors(
                self.group, [t.realize() for t in losses] + [t.realize() for s in stats for t in s.values()]
            )
        if isinstance(self.opt, ZeroAdamW):
            return losses, stats, self.opt.grad_norm_and_scale(self.tc.grad_clip)
        return losses, stats, grad_norm_and_scale(self.model.parameters(), self.tc.grad_clip)

    @property
    def replaying(self) -> bool:
        return self.captured is not None and self.captured.graph is not None

    def run(self, batches):
        """(mean loss, MoE statistics, [norm, clip coefficient] tensor) of one step's micro-batches."""
        arrays = [a for batch in batches for a in batch]
        if self.captured is None:
            outputs = self._compute(*[gc.tensor(a, device=self.tc.device) for a in arrays])
        else:
            try:
                outputs = self.captured(*arrays)  # copied into the captured step's own input tensors
            except UserError as e:
                self.log(f"note: {e}; running eagerly")
                self.captured = None
                self.opt.zero_grad()
                outputs = self._compute(*[gc.tensor(a, device=self.tc.device) for a in arrays])
        losses, stats, grad_stats = outputs
        moe_sums = {}
        share = self.accum * self.world  # the logged values are sums over the processes
        for logged in stats:
            for key, value in logged.items():
                moe_sums[key] = moe_sums.get(key, 0.0) + float(value.item()) / share
        return sum(loss.item() for loss in losses) / share, moe_sums, grad_stats

    def discard_gradients(self) -> None:
        # A replayed graph writes the gradients into the same buffers every step: keep them.
        if not self.replaying:
            self.opt.zero_grad()


def _moe_stats(model, names_only: bool = False) -> dict:
    """Per MoE layer: the fraction of assignments each expert received and the auxiliary losses."""
    stats = {}
    for i, layer in model.moe_layers():
        for e in range(layer.n_experts):
            stats[f"moe{i}_expert{e}"] = None if names_only else layer.aux["load"][e]
        stats[f"moe{i}_balance"] = None if names_only else layer.aux["balance"]
        stats[f"moe{i}_z"] = None if names_only else layer.aux["z"]
    return stats
