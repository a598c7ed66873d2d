"""Choosing a token from one row of logits with one uniform number: the definition of sampling that
the host (inference/generate.py's `sample_next`), the CPU kernel of `F.sample_tokens` and the CUDA
kernel (backend/cuda/kernels/sampling.cu, tested against this) share.

softmax(logits / temperature) restricted to the top-k (ties at the k-th value included) and then to
the top-p nucleus (the most probable tokens, ties in id order, until their mass reaches top_p), and
the token whose cumulative probability, in id order, first exceeds `uniform` (in [0, 1)). That last
step is what NumPy's `Generator.choice(n, p=probs)` does with one `Generator.random()` draw, so a
sequence that draws its uniform from its own generator picks what `choice` would have picked.
"""

import ml_dtypes
import numpy as np

_HALF = {np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)}


def sample_row(logits: np.ndarray, temperature: float, top_k: int | None, top_p: float | None, uniform: float) -> int:
    """The token id drawn from logits (V,) at a positive temperature with `uniform` in [0, 1)."""
    if logits.dtype in _HALF:
        logits = logits.astype(np.float32)  # (exactly)
    # float32 logits: the top k are chosen on the logits as they are, and only those k are widened and
    # divided (1.7x faster for a 32k row, BENCHMARK.md). Dividing a float32 value by a positive
    # temperature in float64 keeps the order and the ties (two float32 values never meet at one
    # quotient). Other types (float64, where two values may meet) are divided first.
    narrow = logits.dtype == np.float32
    values = logits if narrow else logits.astype(np.float64) / temperature
    candidates = None  # the token ids still in the running (None: all), ascending
    if top_k is not None and top_k < values.shape[0]:
        kth = np.partition(values, -top_k)[-top_k]
        candidates = np.flatnonzero(values >= kth)  # the top k (ties at the k-th included)
        values = values[candidates]  # the rest has probability 0: leave it out of the arithmetic
    scaled = values.astype(np.float64) / temperature if narrow else values
    probs = np.exp(scaled - scaled.max())
    probs /= probs.sum()
    if top_p is not None and top_p < 1.0:
        order = np.argsort(-probs, kind="stable")
        cumulative = np.cumsum(probs[order])
        keep = cumulative - probs[order] < top_p  # the smallest prefix whose mass reaches top_p
        mask = np.zeros_like(probs, dtype=bool)
        mask[order[keep]] = True
        probs = np.where(mask, probs, 0.0)
        probs /= probs.sum()
    cdf = probs.cumsum()
    cdf /= cdf[-1]
    choice = int(cdf.searchsorted(uniform, side="right"))
    return choice if candidates is None else int(candidates[choice])


def min_p_shift(min_p: float, temperature: float | None) -> float:
    """min_p as a shift of the logits: a token is kept where softmax(logits / T) >= min_p x the largest
    probability, that is where logit >= max logit + T * log(min_p). -inf (nothing dropped) when min_p is
    0 or decoding is greedy (the argmax is always kept)."""
    if not min_p or not temperature:
        return float("-inf")
    return float(np.float32(temperature * np.log(min_p)))


def penalize(
    logits: np.ndarray,
    counts: np.ndarray,
    seen: np.ndarray,
    bias: np.ndarray | None = None,
    frequency: float = 0.0,
    presence: float = 0.0,
    repetition: float = 1.0,
    shift: float = float("-inf"),
) -> np.ndarray:
    """One row of logits (V,) after the penalties, in float32, in this order (the device's step,
    inference/penalties.py, computes the same values in the same order):

    1. `bias` (V,) is added (OpenAI's logit_bias);
    2. HF's repetition penalty over the tokens in `seen` (the prompt's and the generated ones): a
       positive logit is divided by `repetition`, a negative one multiplied;
    3. OpenAI's penalties over the generated tokens: `frequency` x its count (`counts`, (V,)) and
       `presence` x (count > 0) are subtracted;
    4. min_p (`shift`, see min_p_shift): logits below max + shift become -inf."""
    f32 = np.float32
    x = np.asarray(logits, dtype=f32)
    if bias is not None:
        x = x + bias.astype(f32)
    rep = f32(repetition)
    x = np.where(seen > 0, np.where(x > 0, x / rep, x * rep), x).astype(f32)
    counts = counts.astype(f32)
    x = x - f32(frequency) * counts - f32(presence) * (counts > 0).astype(f32)
    return np.where(x < x.max() + f32(shift), f32(-np.inf), x).astype(f32)
