"""Token sampling (inference/generate.py `sample_next`) against an independent NumPy oracle.

The oracle below is written from the definitions, not from sample_next: temperature divides the
logits, top-k keeps the k largest, top-p keeps the most probable tokens until their mass reaches p
(the top token always). Each case draws many tokens from fixed logits and compares the frequencies
with the oracle's probabilities: tokens it excludes must never appear, the others within 5 standard
deviations. The oracle itself is checked against HF transformers' logits warpers.
"""

import numpy as np
import pytest
import torch

from gradcraft.inference.generate import SamplingParams, sample_next

DRAWS = 10000
LOGITS = np.array([2.0, 1.5, 1.0, 0.2, 0.1, -0.3, -1.0, -2.5], dtype=np.float32)


def oracle(logits, temperature, top_k=None, top_p=None):
    """Probabilities of each token id under temperature, then top-k, then top-p."""
    z = logits.astype(np.float64) / temperature
    probs = np.exp(z - z.max())
    probs /= probs.sum()
    ranked = sorted(range(len(z)), key=lambda i: -z[i])  # most probable first
    allowed = set(ranked[:top_k] if top_k else ranked)
    probs = np.array([p if i in allowed else 0.0 for i, p in enumerate(probs)])
    probs /= probs.sum()
    if top_p is not None:
        kept, mass = [], 0.0
        for i in ranked:
            if i in allowed and mass < top_p:
                kept.append(i)
                mass += probs[i]
        probs = np.array([p if i in kept else 0.0 for i, p in enumerate(probs)])
        probs /= probs.sum()
    return probs


def frequencies(logits, params, seed=0):
    rng = np.random.default_rng(seed)
    counts = np.bincount([sample_next(logits, params, rng) for _ in range(DRAWS)], minlength=len(logits))
    return counts / DRAWS


CASES = [  # (temperature, top_k, top_p)
    (1.0, None, None),
    (0.5, None, None),  # sharper: a multiplied temperature would flatten it instead
    (2.5, None, None),
    (1.0, 3, None),
    (0.7, None, 0.7),  # keeps the 2 most probable tokens (half of top_p would keep only the first)
    (1.0, None, 0.9),  # keeps 5 tokens
    (1.3, 5, 0.8),
    (0.3, None, 0.5),  # the top token alone holds more than top_p: only it is ever drawn
]


@pytest.mark.parametrize("temperature,top_k,top_p", CASES)
def test_sample_frequencies_match_the_oracle(temperature, top_k, top_p):
    want = oracle(LOGITS, temperature, top_k, top_p)
    got = frequencies(LOGITS, SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p))
    assert np.all(got[want == 0] == 0), f"excluded tokens drawn: {got} vs {want}"
    sigma = np.sqrt(want * (1 - want) / DRAWS)
    assert np.all(np.abs(got - want) <= 5 * sigma + 1e-12), f"frequencies {got} vs probabilities {want}"


def test_oracle_cases_are_discriminating():
    """The cases tell the variants apart: temperature divided vs multiplied, top-p vs half of it."""
    assert np.abs(oracle(LOGITS, 0.5) - oracle(LOGITS, 2.0)).max() > 0.1
    assert np.count_nonzero(oracle(LOGITS, 0.7, top_p=0.7)) == 2
    assert np.count_nonzero(oracle(LOGITS, 0.7, top_p=0.35)) == 1
    assert np.count_nonzero(oracle(LOGITS, 1.0, top_p=0.9)) == 5
    assert np.count_nonzero(oracle(LOGITS, 0.3, top_p=0.5)) == 1 and oracle(LOGITS, 0.3)[0] > 0.5


def test_greedy_without_temperature():
    rng = np.random.default_rng(0)
    assert all(sample_next(LOGITS[::-1].copy(), SamplingParams(temperature=None), rng) == 7 for _ in range(5))


@pytest.mark.parametrize("temperature,top_k,top_p", CASES)
def test_oracle_agrees_with_hf_logits_warpers(temperature, top_k, top_p):
    transformers = pytest.importorskip("transformers")
    scores = torch.tensor(LOGITS, dtype=torch.float64)[None]
    warpers = [transformers.TemperatureLogitsWarper(temperature)]
    if top_k:
        warpers.append(transformers.TopKLogitsWarper(top_k))
    if top_p is not None:
        warpers.append(transformers.TopPLogitsWarper(top_p))
    for warp in warpers:
        scores = warp(None, scores)
    np.testing.assert_allclose(
        torch.softmax(scores, -1)[0].numpy(), oracle(LOGITS, temperature, top_k, top_p), atol=1e-12
    )


def _draw_scaling_the_whole_row_first(logits, params, rng):
    """sample_next as it was before top-k moved ahead of the scaling: every logit divided in float64,
    then the top k of the quotients. The same draws are expected, token for token."""
    scaled = logits.astype(np.float64) / params.temperature
    kth = np.partition(scaled, -params.top_k)[-params.top_k]
    candidates = np.flatnonzero(scaled >= kth)
    scaled = scaled[candidates]
    probs = np.exp(scaled - scaled.max())
    probs /= probs.sum()
    return int(candidates[int(rng.choice(probs.shape[0], p=probs))])


@pytest.mark.parametrize("temperature", [0.8, 1e-3, 7.0])
def test_top_k_on_the_raw_logits_draws_what_scaling_first_drew(temperature):
    """Choosing the top k before dividing by the temperature changes no draw, ties at the k-th
    value included (a vocabulary-sized row, coarse values so that ties occur)."""
    values = np.random.default_rng(3).standard_normal(32000)
    logits = np.round(values * 8).astype(np.float32) / 8  # many equal values
    params = SamplingParams(temperature=temperature, top_k=20)
    ours, before = np.random.default_rng(11), np.random.default_rng(11)
    got = [sample_next(logits, params, ours) for _ in range(200)]
    want = [_draw_scaling_the_whole_row_first(logits, params, before) for _ in range(200)]
    assert got == want
    # (the draws vary: at 1e-3 only the tied largest logits are ever drawn, at the others many tokens)
    assert len(set(got)) > (1 if temperature < 0.1 else 5)


def test_float64_logits_that_meet_at_one_quotient_tie_as_before():
    """Two float64 logits may divide to one value: they tie at the k-th place, as when the whole
    row was divided first (the raw-logit shortcut is for float32 alone)."""
    logits = np.array([0.7000000000000001, 0.7000000000000002, 0.0])
    assert logits[0] / 0.7 == logits[1] / 0.7 and logits[0] != logits[1]
    params = SamplingParams(temperature=0.7, top_k=1)
    rng = np.random.default_rng(0)
    assert {sample_next(logits, params, rng) for _ in range(200)} == {0, 1}
