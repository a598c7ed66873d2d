"""Drawing each row's next token where the logits are (F.sample_tokens): a server's decoding step then
copies B token ids to the host instead of B rows of logits, and no row is sampled in Python. And the
greedy pick that feeds itself (F.greedy_advance): a captured decoding step that writes its own next
input, so that a greedy loop queues step after step without the host in between.

The draw is gradcraft/sampling.py's: softmax(logits / temperature) over the top-k, then the top-p
nucleus, and the token whose cumulative probability in id order first exceeds the row's uniform
number. The caller draws that number from the sequence's own generator (`rng.random()`), so a row
picks what `sample_next` would pick with that generator (on a GPU up to rounding), alone or batched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

from gradcraft import dtypes
from gradcraft.backend import opspec
from gradcraft.errors import UserError
from gradcraft.ops.function import apply
from gradcraft.tensor import Tensor


def sample_tokens(logits: Tensor, temperature: Tensor, top_k: Tensor, top_p: Tensor, uniform: Tensor) -> Tensor:
    """Row b's next token for logits (B, V): its argmax where temperature[b] is 0, else a draw with
    uniform[b] in [0, 1) at temperature[b], keeping the top_k[b] most likely (0: every token) and
    then the top_p[b] nucleus (1: all kept). temperature, top_p and uniform are float64 (B,), top_k
    int64 (B,). Returns (B,) int64; -1 marks a row this device's kernel cannot hold (the CUDA kernel:
    more than 1024 candidates, or top-p without top-k), to be sampled on the host with the same
    uniform number (gradcraft.sampling.sample_row). No gradient."""
    if logits.ndim != 2 or not logits.dtype.is_floating_point:
        raise UserError(f"sample_tokens: logits must be a float (B, V) tensor, got {logits.dtype.name} {logits.shape}")
    B = logits.shape[0]
    for name, t, dtype in (
        ("temperature", temperature, dtypes.float64),
        ("top_k", top_k, dtypes.int64),
        ("top_p", top_p, dtypes.float64),
        ("uniform", uniform, dtypes.float64),
    ):
        if t.shape != (B,) or t.dtype != dtype:
            raise UserError(f"sample_tokens: {name} must be {dtype.name} ({B},), got {t.dtype.name} {t.shape}")
    return apply(opspec.SAMPLE_TOKENS, (logits, temperature, top_k, top_p, uniform), {}, (B,), dtypes.int64)


def greedy_advance(logits: Tensor, ids: Tensor, position: Tensor) -> Tensor:
    """Each row's argmax of logits (B, V) (NumPy's: the first index among equal values, the first NaN
    where a row has one), also written into ids (B elements, int64: the next step's input tokens) and
    with position (int64, 1 or B elements: where those tokens sit) moved on by one, both in place when
    the result is realized. Returns (B,) int64. One kernel on a GPU, where argmax, the two assigns
    and the add are four. No gradient."""
    if logits.ndim != 2 or not logits.dtype.is_floating_point:
        raise UserError(f"greedy_advance: logits must be a float (B, V) tensor, got {logits.dtype.name} {logits.shape}")
    B = logits.shape[0]
    if not isinstance(ids, Tensor) or ids.dtype != dtypes.int64 or ids.numel() != B:
        raise UserError(f"greedy_advance: ids must be an int64 tensor of {B} elements")
    if not isinstance(position, Tensor) or position.dtype != dtypes.int64 or position.numel() not in (1, B):
        raise UserError(f"greedy_advance: position must be an int64 tensor of 1 or {B} elements")
    if len({logits.device, ids.device, position.device}) != 1:
        raise UserError("greedy_advance: logits, ids and position must be on one device")
    for t in (ids, position):
        if not t.is_realized:  # the writes go into their own buffers
            t.realize()
    return apply(opspec.GREEDY_ADVANCE, (logits, ids, position), {}, (B,), dtypes.int64)
