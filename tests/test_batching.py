"""Continuous batching (inference/batching.py): every answer under load equals the same request alone."""

import threading
import time

import numpy as np
import pytest

import gradcraft as gc
from gradcraft.inference.generate import SamplingParams, StopReason, generate
from gradcraft.inference.batching import CANCELLED, TIMEOUT, QueueFull, Scheduler, Sequence
from gradcraft.models import ModelConfig, Transformer
from test_models import FAMILIES, randomize, small_config

# every attention and feed-forward kind: learned positions and RoPE, GQA, a sliding window of 3 that
# wraps its ring many times, and mixture-of-experts layers (with a capacity limit in training)
SERVED = dict(
    FAMILIES,
    moe_window=dict(
        norm="rmsnorm",
        mlp="swiglu",
        positions="rope",
        bias=False,
        n_kv_heads=2,
        attention_pattern="LG",
        window=4,
        ffn_pattern="MD",
        n_experts=4,
        experts_per_token=2,
        capacity_factor=1.0,
    ),
)


def make_model(family, seq_len=32, seed=3):
    if family in FAMILIES:
        config = small_config(family, seq_len=seq_len)
    else:
        config = ModelConfig(
            **dict(dict(vocab_size=61, dim=32, n_layers=2, n_heads=4), **SERVED[family]), seq_len=seq_len
        )
    model = Transformer(config)
    randomize(model, seed=seed)
    return model


class Collector:
    """Records each sequence's tokens, logprobs and ending; `wait()` until all have ended."""

    def __init__(self):
        self.tokens, self.logprobs, self.reasons = {}, {}, {}
        self.done = threading.Condition()

    def sequence(self, key, prompt, params, **kwargs):
        self.tokens[key], self.logprobs[key] = [], []

        def on_token(seq, token, logprob):
            self.tokens[key].append(token)
            self.logprobs[key].append(logprob)

        def on_finish(seq, reason):
            with self.done:
                self.reasons[key] = reason
                self.done.notify_all()

        return Sequence(list(prompt), params, on_token, on_finish, **kwargs)

    def wait(self, keys, timeout=60):
        with self.done:
            assert self.done.wait_for(lambda: all(k in self.reasons for k in keys), timeout)


def params_for(i):
    """Greedy and sampled requests of different lengths, seeds and sampling settings."""
    if i % 3 == 0:
        return SamplingParams(max_tokens=6 + i % 7)
    return SamplingParams(
        max_tokens=5 + i % 9,
        temperature=0.7 + 0.1 * (i % 4),
        top_k=None if i % 2 else 8,
        top_p=0.9 if i % 5 == 1 else None,
        seed=100 + i,
    )


PROMPTS = [[3, 1, 4, 1, 5], [9, 2], [6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3], [8], [4, 6, 2, 6, 4, 3, 3]]


def served(scheduler, requests, stagger=None):
    """Tokens and reasons of (prompt, params) requests; stagger: submit request i after i * stagger steps."""
    out = Collector()
    for i, (prompt, params) in enumerate(requests):
        if stagger:
            target = scheduler.steps + stagger
            deadline = time.monotonic() + 30
            while scheduler.steps < target and scheduler.load()["running"] and time.monotonic() < deadline:
                time.sleep(0.001)
        scheduler.submit([out.sequence(i, prompt, params)])
    out.wait(range(len(requests)))
    return [out.tokens[i] for i in range(len(requests))], [out.reasons[i] for i in range(len(requests))]


@pytest.mark.parametrize("step_prompts", [0, 5])
@pytest.mark.parametrize("family", sorted(SERVED))
def test_every_answer_under_load_equals_the_request_served_alone(family, step_prompts):
    """step_prompts 0: every prompt prefilled (in chunks of 4); 5: prompts of up to 5 tokens fed
    through the decoding step, the 11-token one prefilled, both ways in one batch."""
    model = make_model(family)
    requests = [(PROMPTS[i % len(PROMPTS)], params_for(i)) for i in range(10)]
    scheduler = Scheduler(model, slots=4, max_queue=64, prefill_chunk=4, step_prompts=step_prompts)
    try:
        alone = [served(scheduler, [r]) for r in requests]
        together = served(scheduler, requests)
        joining = served(scheduler, requests, stagger=2)  # requests join (and leave) mid-batch
    finally:
        scheduler.close()
    assert together == ([a[0][0] for a in alone], [a[1][0] for a in alone])
    assert joining == together
    # and the greedy answers are the KV-cache generator's (which is checked against recomputation);
    # not with experts: their capacity limit drops other tokens in a 4-token prefill chunk than in a
    # whole prompt
    for (prompt, params), tokens in zip(requests, together[0]):
        if not params.temperature and not model.moe_layers():
            assert tokens == generate(model, [prompt], params)[0][0]


@pytest.mark.parametrize("step_prompts", [0, 32])
def test_sampled_answers_are_the_generators_whether_the_step_or_the_host_draws(monkeypatch, step_prompts):
    """A sampled sequence draws one uniform number a token from its own generator and the step picks
    its token (F.sample_tokens): the same tokens as generate()'s sample_next with that seed. Where the
    device has no sampling kernel, every row comes back -1 and is drawn on the host with the same
    number: the same tokens again."""
    from gradcraft.device import get_backend

    model = make_model("llama_gqa")
    requests = [(PROMPTS[i % len(PROMPTS)], params_for(i)) for i in range(12) if params_for(i).temperature]

    def serve():
        scheduler = Scheduler(model, slots=4, max_queue=64, prefill_chunk=64, step_prompts=step_prompts)
        try:
            return served(scheduler, requests)[0]
        finally:
            scheduler.close()

    in_step = serve()
    assert in_step == [generate(model, [prompt], params)[0][0] for prompt, params in requests]
    backend = get_backend("cpu")
    table = {name: kernel for name, kernel in backend.kernels.items() if name != "sample_tokens"}
    monkeypatch.setattr(backend, "kernels", table)
    assert serve() == in_step


def test_the_context_end_and_stop_ids_end_a_sequence():
    model = make_model("llama_gqa", seq_len=12)
    scheduler = Scheduler(model, slots=2)
    try:
        tokens, reasons = served(scheduler, [([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], SamplingParams(max_tokens=50))])
        # tokens fed at positions 10 and 11 (the last), and the one predicted after them
        assert len(tokens[0]) == 3 and reasons == ["context"]
        assert generate(model, [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]], SamplingParams(max_tokens=50)) == (tokens, reasons)
        stop = tokens[0][1]
        tokens, reasons = served(
            scheduler, [([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], SamplingParams(max_tokens=50, stop_ids=(stop,)))]
        )
        assert tokens[0] == tokens[0][:1] and reasons == ["stop"]
    finally:
        scheduler.close()


def test_logprobs_are_the_models_log_softmax():
    model = make_model("gpt")
    scheduler = Scheduler(model, slots=2)
    prompt = [3, 1, 4]
    try:
        out = Collector()
        scheduler.submit([out.sequence(0, prompt, SamplingParams(max_tokens=3), logprobs=2, prompt_logprobs=True)])
        out.wait([0])
    finally:
        scheduler.close()
    ids = prompt + out.tokens[0]
    with gc.no_grad():
        logits = model(gc.tensor(np.array([ids[:-1]]))).numpy()[0].astype(np.float64)
    expected = (
        logits
        - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True))
        - logits.max(-1, keepdims=True)
    )
    got = [lp.logprob for lp in out.logprobs[0]]
    np.testing.assert_allclose(got, [expected[len(prompt) - 1 + i, t] for i, t in enumerate(out.tokens[0])], atol=1e-4)
    first = out.logprobs[0][0]
    assert [t for t, _ in first.top] == list(np.argsort(-expected[len(prompt) - 1], kind="stable")[:2])


def test_a_cancelled_or_expired_sequence_frees_its_slot_and_the_queue_is_bounded():
    model = make_model("gpt", seq_len=64)
    scheduler = Scheduler(model, slots=1, max_queue=2)
    try:
        out = Collector()
        long = out.sequence("long", [1, 2], SamplingParams(max_tokens=60))
        scheduler.submit([long])
        deadline = time.monotonic() + 30
        while not out.tokens["long"] and time.monotonic() < deadline:  # until it holds the slot
            time.sleep(0.001)
        waiting = [out.sequence(i, [1, 2], SamplingParams(max_tokens=2)) for i in range(2)]
        scheduler.submit(waiting)  # the one slot is taken: both wait
        with pytest.raises(QueueFull):
            scheduler.submit([out.sequence("over", [1], SamplingParams(max_tokens=2))])
        late = out.sequence("late", [1, 2], SamplingParams(max_tokens=2), deadline=time.monotonic() - 1)
        with pytest.raises(QueueFull):
            scheduler.submit([late])
        long.cancel.set()  # the client went away: its slot goes to the waiting ones
        out.wait(["long", 0, 1])
        assert out.reasons["long"] == CANCELLED and len(out.tokens["long"]) < 60
        assert out.reasons[0] == out.reasons[1] == "length"
        scheduler.submit([late])
        out.wait(["late"])
        assert out.reasons["late"] == TIMEOUT and out.tokens["late"] == []
        assert scheduler.load() == {"waiting": 0, "running": 0, "slots": 1}
    finally:
        scheduler.close()


def test_free_slots_take_requests_before_the_waiting_line_counts():
    # max_queue bounds those waiting for a slot: requests that come while slots are free are taken,
    # even before the loop has moved the ones before them into their slots.
    model = make_model("gpt", seq_len=64)
    scheduler = Scheduler(model, slots=2, max_queue=0)
    try:
        out = Collector()
        with scheduler.wake:  # the loop cannot move anything meanwhile
            scheduler.submit([out.sequence(i, [1, 2], SamplingParams(max_tokens=40)) for i in range(2)])
            with pytest.raises(QueueFull):
                scheduler.submit([out.sequence("over", [1], SamplingParams(max_tokens=2))])
        out.wait([0, 1])
        assert out.reasons[0] == out.reasons[1] == "length" and "over" not in out.reasons
    finally:
        scheduler.close()


def test_memory_stays_flat_over_a_thousand_requests():
    model = make_model("llama_gqa", seq_len=16)
    scheduler = Scheduler(model, slots=8, max_queue=1000)
    requests = [
        (PROMPTS[i % len(PROMPTS)], SamplingParams(max_tokens=1 + i % 2, temperature=1.0, seed=i)) for i in range(1000)
    ]
    try:
        served(scheduler, requests[:100])
        gc.reset_peak_memory_stats()
        before = gc.memory_stats()
        _, reasons = served(scheduler, requests)
        after = gc.memory_stats()
    finally:
        scheduler.close()
    assert reasons == ["length"] * 1000
    assert after["live_bytes"] <= before["live_bytes"]
    assert after["peak_bytes"] <= before["live_bytes"] + 1_000_000  # a step's temporaries, not a cache per request


@pytest.mark.parametrize("step_prompts", [0, 5])
def test_a_short_prompt_is_fed_through_the_decoding_step(step_prompts):
    """A prompt of at most step_prompts tokens takes one decoding step a token (its last one's step
    gives the first new token); a longer one is prefilled, and its first token comes from the prefill."""
    model = make_model("llama_gqa")
    scheduler = Scheduler(model, slots=2, prefill_chunk=4, step_prompts=step_prompts)
    try:
        for prompt in (PROMPTS[0], PROMPTS[2]):  # 5 and 11 tokens
            before = scheduler.steps
            tokens, reasons = served(scheduler, [(prompt, SamplingParams(max_tokens=3))])
            stepped = len(prompt) <= step_prompts
            assert len(tokens[0]) == 3 and reasons == [StopReason.LENGTH]
            assert scheduler.steps - before == (len(prompt) + 2 if stepped else 2)
    finally:
        scheduler.close()
