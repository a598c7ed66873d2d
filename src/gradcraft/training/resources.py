"""What a run needs and what the machine has: a lower bound on one process's memory (checked before
anything is allocated) and the GPU's peak FLOP/s (for the model-FLOPs utilisation the log prints)."""

import os

from gradcraft.errors import UserError
from gradcraft.models import ModelConfig
from gradcraft.training.config import TrainConfig


def estimate_memory_bytes(tc: TrainConfig, mc: ModelConfig) -> int:
    """A lower bound on the memory one process of this run needs: fp32 weights, gradients and two
    AdamW moments (16 bytes a parameter), plus the largest activations of one micro-batch: the
    logits and their gradient, and, where attention is computed explicitly (the CPU), three
    (batch, heads, seq_len, seq_len) matrices: the scores, the attention weights and their gradient,
    which one layer's backward holds at once. The real peak is higher; this is for refusing a run
    that cannot fit before anything is allocated."""
    from gradcraft.training.runfiles import parameter_count

    dim, layers, heads = mc.dim, mc.n_layers, mc.n_heads
    ffn = mc.ffn_dim
    params = parameter_count(mc)
    B, T = tc.batch_size, mc.seq_len
    activations = 2 * B * T * mc.vocab_size * 4 + layers * B * T * (4 * dim + 2 * ffn) * 4
    if not tc.device.startswith("cuda"):  # flash attention on CUDA never holds the T x T scores
        activations += 3 * B * heads * T * T * 4
    return 16 * params + activations


def available_memory_bytes(device: str) -> int | None:
    """The machine's RAM (CPU) or the GPU's memory, or None when unknown."""
    try:
        if device.startswith("cuda"):
            import cupy

            with cupy.cuda.Device(int(device.partition(":")[2] or 0)):
                return int(cupy.cuda.runtime.memGetInfo()[1])
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except Exception:
        return None


def check_memory(tc: TrainConfig, mc: ModelConfig) -> None:
    need, have = estimate_memory_bytes(tc, mc), available_memory_bytes(tc.device)
    if have is not None and need > have:
        where = "this machine's RAM" if tc.device == "cpu" else f"{tc.device}'s memory"
        raise UserError(
            f"this run needs at least {_gib(need)} but {where} is {_gib(have)} (--seq_len {mc.seq_len}, "
            f"--batch_size {tc.batch_size}, {describe_size(mc)}); lower --seq_len or --batch_size, "
            "or pick a smaller model"
        )


def _gib(n: int) -> str:
    return f"{n / 2**40:,.2f} TiB" if n >= 2**40 else f"{n / 2**30:,.1f} GiB"


def describe_size(mc: ModelConfig) -> str:
    return f"dim {mc.dim}, {mc.n_layers} layers, vocabulary {mc.vocab_size}"


def peak_flops(device: str, dtype: str) -> float | None:
    """Dense peak FLOP/s of the detected GPU, for model-FLOPs utilisation (None on the CPU)."""
    if not device.startswith("cuda"):
        return None
    try:
        import cupy

        name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode()
    except Exception:
        return None
    table = {"H200": (989e12, 67e12), "H100": (989e12, 67e12), "A100": (312e12, 19.5e12)}
    for key, (bf16, fp32) in table.items():
        if key in name:
            return bf16 if dtype == "bfloat16" else fp32
    return None
