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


# ---------------------------------------------------------------- F.sample_tokens: the draw where the logits are

ROW_CASES = [  # (temperature, top_k, top_p): 0 = greedy, top_k 0 = none, top_p 1 = none
    (0.0, 0, 1.0),
    (0.8, 20, 1.0),
    (1.3, 0, 1.0),
    (0.7, 50, 0.9),
    (1.0, 5, 0.5),
    (2.0, 1, 1.0),
    (0.9, 100000, 1.0),  # top-k past the vocabulary: none
]


def _sample_inputs(V, dtype, seed=0, coarse=False):
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((len(ROW_CASES), V)) * 3
    if coarse:
        logits = np.round(logits)  # many ties, also at the k-th value
    temperature, top_k, top_p = (
        np.array(c, dtype=d) for c, d in zip(zip(*ROW_CASES), (np.float64, np.int64, np.float64))
    )
    uniform = rng.random(len(ROW_CASES))
    return logits.astype(dtype), temperature, top_k, top_p, uniform


def _expected(logits, temperature, top_k, top_p, uniform):
    """Each row through sample_next with a generator whose next random() is the row's uniform."""
    out = []
    for b, row in enumerate(logits):
        params = SamplingParams(
            temperature=float(temperature[b]) or None,
            top_k=int(top_k[b]) or None,
            top_p=float(top_p[b]) if top_p[b] < 1 else None,
        )

        class Fixed:  # stands in for a generator: sample_next draws exactly one number from it
            def random(self, u=uniform[b]):
                return float(u)

        out.append(sample_next(row, params, Fixed()))
    return out


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("coarse", [False, True])
def test_sample_tokens_draws_what_sample_next_draws(dtype, coarse):
    import gradcraft as gc
    import gradcraft.nn.functional as F

    dt = np.dtype(dtype) if dtype == "float32" else np.dtype(__import__("ml_dtypes").bfloat16)
    inputs = _sample_inputs(3000, dt, coarse=coarse)
    got = F.sample_tokens(*(gc.tensor(a) for a in inputs)).numpy()
    assert got.tolist() == _expected(*inputs)


def test_sample_next_uses_one_number_of_its_generator_as_choice_did():
    """The draw is Generator.choice's with one random() number: the same token, the same state after."""
    for seed in range(200):
        r = np.random.default_rng(seed)
        logits = r.standard_normal(50).astype(np.float32)
        params = SamplingParams(temperature=0.9, top_k=10, top_p=0.8)
        mine, theirs = np.random.default_rng(seed + 1), np.random.default_rng(seed + 1)
        token = sample_next(logits, params, mine)
        probs = np.exp((logits.astype(np.float64) - logits.max()) / 0.9)
        kth = np.sort(logits)[-10]
        probs[logits < kth] = 0
        probs /= probs.sum()
        order = np.argsort(-probs, kind="stable")
        keep = np.cumsum(probs[order]) - probs[order] < 0.8
        kept = np.zeros_like(probs)
        kept[order[keep]] = probs[order[keep]]
        assert token == int(theirs.choice(50, p=kept / kept.sum()))
        assert mine.random() == theirs.random()


def test_sample_tokens_refuses_bad_shapes_and_types():
    import gradcraft as gc
    import gradcraft.nn.functional as F
    from gradcraft.errors import UserError

    logits, temperature, top_k, top_p, uniform = (gc.tensor(a) for a in _sample_inputs(10, np.float32))
    with pytest.raises(UserError, match="top_k must be int64"):
        F.sample_tokens(logits, temperature, top_p, top_p, uniform)
    with pytest.raises(UserError, match="logits must be"):
        F.sample_tokens(logits.reshape(-1), temperature, top_k, top_p, uniform)


@pytest.mark.parametrize("positions", [1, 3])
def test_greedy_advance_writes_its_argmax_into_ids_and_moves_the_position_on(positions):
    """F.greedy_advance: each row's argmax (NumPy's, ties and NaN included), written into ids, and the
    position (shared, or one per row) one further; lazy tensors built from the old ids and position
    keep the old values (the engine's in-place rules), and bad arguments get one clear error."""
    import gradcraft as gc
    import gradcraft.nn.functional as F
    from gradcraft.errors import UserError

    rows = np.random.default_rng(0).standard_normal((3, 40)).astype(np.float32)
    rows[1, [5, 30]] = 9  # a tie: the first index
    rows[2, [33, 4]] = np.nan  # the first NaN
    logits = gc.tensor(rows)
    ids = gc.tensor(np.full((3, 1), 7, dtype=np.int64)).realize()
    position = gc.tensor(np.arange(positions, dtype=np.int64) + 10).realize()
    old_ids, old_position = ids + 0, position * 1
    best = F.greedy_advance(logits, ids, position).numpy()
    np.testing.assert_array_equal(best, [np.argmax(rows[0]), 5, 4])
    np.testing.assert_array_equal(ids.numpy().reshape(-1), best)
    np.testing.assert_array_equal(position.numpy(), np.arange(positions) + 11)
    np.testing.assert_array_equal(old_ids.numpy().reshape(-1), [7, 7, 7])
    np.testing.assert_array_equal(old_position.numpy(), np.arange(positions) + 10)
    with pytest.raises(UserError, match="ids must be an int64 tensor of 3"):
        F.greedy_advance(logits, gc.zeros(2, dtype=gc.int64), position)
    with pytest.raises(UserError, match="position must be an int64"):
        F.greedy_advance(logits, ids, gc.zeros(2, dtype=gc.int64))
    with pytest.raises(UserError, match="logits must be"):
        F.greedy_advance(logits.reshape(-1), ids, position)


@pytest.mark.cuda
@pytest.mark.skipif(not __import__("gradcraft.device", fromlist=["x"]).is_available("cuda"), reason="needs a GPU")
@pytest.mark.parametrize("V", [3000, 32000])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_sample_tokens_draws_what_the_cpu_draws(V, dtype):
    """kernels/sampling.cu against the CPU kernel on the same logits and uniforms: every parameter mix
    of ROW_CASES over many rows, coarse logits (ties at the k-th value) too. The kernel answers -1
    only where it cannot hold the row (top-p without top-k, or more than 1024 candidates)."""
    import gradcraft as gc
    import gradcraft.nn.functional as F

    for coarse in (False, True):
        inputs = [
            np.tile(a, 9) if a.ndim == 1 else np.tile(a, (9, 1)) for a in _sample_inputs(V, np.float32, 1, coarse)
        ]
        inputs[4] = np.random.default_rng(2).random(len(inputs[4]))  # a fresh uniform for every row
        inputs[1][::7] = 1.0  # some plain-temperature rows over the whole vocabulary
        inputs[2][::7], inputs[3][::7] = 0, 1.0
        inputs[2][3::11], inputs[3][3::11] = 2000, 0.95  # more candidates than the kernel holds
        logits = gc.tensor(inputs[0]).to(getattr(gc, dtype))
        want = F.sample_tokens(logits, *(gc.tensor(a) for a in inputs[1:])).numpy()
        got = F.sample_tokens(logits.to("cuda"), *(gc.tensor(a, device="cuda") for a in inputs[1:])).numpy()
        k, p = inputs[2], inputs[3]
        whole = (k <= 0) | (k >= V)
        unheld = (inputs[1] > 0) & ((whole & (p < 1)) | (~whole & (k > 1024)))
        assert (got[unheld] == -1).all()
        assert (got[~unheld] != -1).all()  # (the coarse rows' ties at the k-th value stay under 1024)
        np.testing.assert_array_equal(got[~unheld], want[~unheld])


def test_sample_tokens_without_the_kernel_leaves_the_draws_to_the_host(monkeypatch):
    """A device without the kernel (ops/fallback.py): greedy rows get their argmax, the others -1."""
    import gradcraft as gc
    import gradcraft.nn.functional as F
    from gradcraft.device import get_backend

    backend = get_backend("cpu")
    table = {name: kernel for name, kernel in backend.kernels.items() if name != "sample_tokens"}
    monkeypatch.setattr(backend, "kernels", table)
    inputs = _sample_inputs(300, np.float32)
    got = F.sample_tokens(*(gc.tensor(a) for a in inputs)).numpy()
    greedy = inputs[1] == 0
    assert (got[greedy] == inputs[0][greedy].argmax(-1)).all() and (got[~greedy] == -1).all()


@pytest.mark.cuda
@pytest.mark.skipif(not __import__("gradcraft.device", fromlist=["x"]).is_available("cuda"), reason="needs a GPU")
def test_cuda_sample_tokens_treats_signed_zeros_and_nans_as_numpy_does():
    """-0.0 equals 0.0 (a tie, in top-k and argmax); a NaN is never a top-k candidate; a NaN over the
    whole vocabulary is left to the host (-1)."""
    import gradcraft as gc
    import gradcraft.nn.functional as F

    nan = float("nan")
    logits = np.array(
        [[1.0, -0.0, 0.0, -5.0], [-0.0, 0.0, -1.0, -2.0], [nan, 1.0, 2.0, 3.0], [0.5, nan, 0.1, 0.2]], np.float32
    )
    temperature, top_k = np.array([1.0, 0.0, 1.0, 1.0]), np.array([2, 0, 2, 0], dtype=np.int64)
    top_p, uniform = np.ones(4), np.array([0.75, 0.5, 0.5, 0.3])
    args = [logits, temperature, top_k, top_p, uniform]
    want = F.sample_tokens(*(gc.tensor(a) for a in args[:3]), gc.tensor(top_p), gc.tensor(uniform)).numpy()
    got = F.sample_tokens(*(gc.tensor(a, device="cuda") for a in args)).numpy()
    assert got[:3].tolist() == want[:3].tolist() == [1, 0, 3]
    assert got[3] == -1
