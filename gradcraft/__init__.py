"""gradcraft: a from-scratch deep-learning engine and LLM toolkit.

    import gradcraft as gc
    x = gc.randn(4, 3, requires_grad=True)
    loss = (x.tanh() ** 2).sum()      # lazy: nothing has run yet
    loss.backward()                   # one schedule: forward + backward
    print(loss.item(), x.grad)

Names follow PyTorch. Tensors are lazy: ops build a graph, and `.realize()`
(or anything that needs data) runs it.
"""

from gradcraft.dtypes import (DType, bfloat16, bool_, float16, float32, float64, int32, int64, promote_types,
                              uint8)
from gradcraft.tensor import Tensor, _attach_methods

_attach_methods()

from gradcraft.device import is_available  # noqa: E402
from gradcraft.engine.memory import stats as _memory_stats  # noqa: E402
from gradcraft.errors import UserError  # noqa: E402
from gradcraft.ops.creation import (arange, empty, eye, full, full_like, get_rng_state, manual_seed,  # noqa: E402
                                    ones, ones_like, rand, rand_like, randint, randn, randn_like, set_rng_state,
                                    tensor, zeros, zeros_like)
from gradcraft.ops.elementwise import (abs, clamp, cos, exp, log, masked_fill, maximum, minimum, sigmoid,  # noqa: E402
                                       sin, sqrt, tanh, where)
from gradcraft.ops.function import enable_grad, is_grad_enabled, no_grad  # noqa: E402
from gradcraft.ops.matmul import matmul  # noqa: E402
from gradcraft.ops.movement import cat, chunk, split, stack  # noqa: E402
from gradcraft.ops.reduce import argmax, cumsum, logsumexp, mean, topk  # noqa: E402
from gradcraft.ops.reduce import sum as sum  # noqa: E402

bool = bool_  # gradcraft.bool, like torch.bool


def memory_stats() -> dict:
    """Bytes in use by tensors, the peak since `reset_peak_memory_stats()`, and allocation counts."""
    return _memory_stats.as_dict()


def reset_peak_memory_stats() -> None:
    _memory_stats.reset_peak()


def realize(*tensors) -> None:
    """Realize several tensors in one schedule (shared intermediates are computed once)."""
    from gradcraft.engine.realize import realize as _realize
    _realize(list(tensors))


__version__ = "0.1.0"

from gradcraft import nn, optim  # noqa: E402,F401  (after the Tensor methods are attached)
