"""Which parameters get weight decay: the one rule, used by the trainer and the benchmarks.

nanoGPT's `configure_optimizers` (and Hugging Face's Trainer in effect): every parameter of two or
more dimensions is decayed (the matmul weights, the embeddings, and so the tied output matrix,
counted once), and none of one dimension (norm gains, biases, other vectors such as a learned Swish
beta). `decay_embeddings=False` is the other common convention: the embedding tables (and the tied
head with them) are not decayed either.

    groups = weight_decay_groups(model, 0.1)
    opt = AdamW(groups, lr=1e-3)

An optimizer itself has no rule of its own: it decays each group by the group's `weight_decay`,
as PyTorch's does.
"""

from gradcraft.nn.layers import Embedding


def decay_split(model, decay_embeddings: bool = True) -> tuple[list, list]:
    """(decayed, not decayed): two lists of (name, parameter), in the model's parameter order.
    Tied parameters appear once, under their first name; parameters without gradients are left out."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, Embedding)}
    decayed, kept = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        decay = p.ndim >= 2 and (decay_embeddings or id(p) not in embeddings)
        (decayed if decay else kept).append((name, p))
    return decayed, kept


def weight_decay_groups(model, weight_decay: float, decay_embeddings: bool = True) -> list[dict]:
    """Two optimizer parameter groups: the decayed parameters with `weight_decay`, the rest with 0.
    Each group also carries the parameter names (key "names"), for messages and checkpoints."""
    decayed, kept = decay_split(model, decay_embeddings)
    return [
        {"params": [p for _, p in decayed], "names": [n for n, _ in decayed], "weight_decay": weight_decay},
        {"params": [p for _, p in kept], "names": [n for n, _ in kept], "weight_decay": 0.0},
    ]


def describe_decay(groups: list[dict]) -> str:
    """One line: how many tensors and parameters are decayed and how many are not."""

    def count(group):
        return f"{len(group['params'])} tensors ({sum(p.numel() for p in group['params']):,} parameters)"

    decayed, kept = groups
    return f"weight decay {decayed['weight_decay']:g} on {count(decayed)}; none on {count(kept)}"
