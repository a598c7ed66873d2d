"""The penalties and filters: frequency and presence (OpenAI's), repetition (HF's), logit_bias and
min_p. Their definition (gradcraft.sampling.penalize) against Hugging Face's logits processors and
PyTorch; the server's decoding step (tensor ops on the device, inference/penalties.py) against the
host's arithmetic, token for token, alone and batched; and `gradcraft generate`'s flags."""

import threading

import numpy as np
import pytest

import gradcraft as gc
from gradcraft.inference.generate import SamplingParams, generate, generate_without_cache
from gradcraft.inference.batching import Scheduler, Sequence
from gradcraft.models import ModelConfig, Transformer
from gradcraft.sampling import min_p_shift, penalize

torch = pytest.importorskip("torch")

V = 50


def test_penalize_equals_hf_logits_processors_and_openais_definition():
    lp = pytest.importorskip("transformers.generation.logits_process")
    rng = np.random.default_rng(0)
    for trial in range(20):
        logits = (rng.standard_normal(V) * 3).astype(np.float32)
        prompt = rng.integers(0, V, 6)
        generated = rng.integers(0, V, 10)
        counts = np.bincount(generated, minlength=V).astype(np.float32)
        seen = np.zeros(V, dtype=np.float32)
        seen[np.concatenate([prompt, generated])] = 1
        rep, freq, pres = 1.0 + rng.random(), rng.uniform(-2, 2), rng.uniform(-2, 2)
        min_p, temperature = rng.uniform(0.01, 0.5), rng.uniform(0.3, 2)
        bias = np.zeros(V, dtype=np.float32)
        bias[rng.integers(0, V, 3)] = rng.uniform(-100, 100, 3)

        scores = torch.tensor(logits)[None]
        ids = torch.tensor(np.concatenate([prompt, generated]))[None]
        # HF's repetition penalty over the prompt and the generated tokens
        want = lp.RepetitionPenaltyLogitsProcessor(rep)(ids, scores.clone())[0].numpy()
        got = penalize(logits, np.zeros(V), seen, repetition=rep)
        np.testing.assert_array_equal(got, want)
        # OpenAI's frequency and presence penalties over the generated tokens
        c = torch.tensor(counts)
        want = (scores[0] - freq * c - pres * (c > 0).float()).numpy()
        np.testing.assert_allclose(penalize(logits, counts, seen, frequency=freq, presence=pres), want, rtol=1e-6)
        # logit_bias: added
        np.testing.assert_array_equal(penalize(logits, counts, seen, bias=bias), logits + bias)
        # min_p, on the probabilities at the temperature (HF applies its warper after the temperature's)
        warped = lp.MinPLogitsWarper(min_p)(ids, scores / temperature)[0]
        got = penalize(logits, counts, seen, shift=min_p_shift(min_p, temperature))
        np.testing.assert_array_equal(np.isinf(got), torch.isinf(warped).numpy())
        assert np.isinf(got).any() or trial  # (some trial drops tokens)
    # nothing set: the logits exactly
    np.testing.assert_array_equal(penalize(logits, counts, seen), logits)
    assert min_p_shift(0.0, 1.0) == min_p_shift(0.5, 0) == float("-inf")


@pytest.fixture(scope="module")
def model():
    gc.manual_seed(0)
    return Transformer(ModelConfig(vocab_size=V, seq_len=48, dim=32, n_layers=1, n_heads=2))


def run_scheduler(scheduler, jobs):
    """Submit (prompt, params, logprobs) jobs at once; their generated tokens."""
    outs, done = [[] for _ in jobs], [threading.Event() for _ in jobs]
    seqs = [
        Sequence(
            prompt, params, lambda s, t, lp, i=i: outs[i].append(t), lambda s, r, i=i: done[i].set(), logprobs=logprobs
        )
        for i, (prompt, params, logprobs) in enumerate(jobs)
    ]
    scheduler.submit(seqs)
    assert all(d.wait(60) for d in done)
    return outs


CASES = [
    dict(repetition_penalty=1.6),
    dict(frequency_penalty=1.5, presence_penalty=0.5),
    dict(presence_penalty=-1.0, repetition_penalty=0.7),
    dict(logit_bias={7: 8.0, 3: -100.0}),
    dict(temperature=0.9, seed=3, top_k=None, min_p=0.2, repetition_penalty=1.2, frequency_penalty=0.4),
    dict(temperature=1.2, seed=8, top_k=10, top_p=0.9, presence_penalty=1.0, logit_bias={5: 2.0}),
]


@pytest.mark.parametrize("step_prompts", [0, 32])
def test_the_decoding_step_penalizes_as_the_host_does_alone_and_batched(model, step_prompts):
    """step_prompts 0: prompts prefilled (the first token drawn on the host, the rest in the step); 32:
    prompts fed through the step (whose counts then start from the prompt's tokens going through it)."""
    scheduler = Scheduler(model, slots=8, step_prompts=step_prompts)
    try:
        prompt = [1, 2, 3, 4, 2]
        jobs, expected = [], []
        for case in CASES:
            params = dict(max_tokens=14, temperature=None, top_k=20) | case
            want = generate_without_cache(model, prompt, SamplingParams(**params))
            plain = generate_without_cache(model, prompt, SamplingParams(**(params | {"logit_bias": None})))
            assert want != plain or "logit_bias" not in case  # the bias does something
            for logprobs in (None, 1):  # (a row that reports logprobs is drawn on the host from the step's row)
                jobs.append((prompt, SamplingParams(**params), logprobs))
                expected.append(want)
            assert generate(model, [prompt], SamplingParams(**params))[0][0] == want  # `generate`'s host path
        # a neighbour with no penalty gets its answer alone
        jobs.append(([9, 8], SamplingParams(max_tokens=14, temperature=None), None))
        expected.append(generate_without_cache(model, [9, 8], SamplingParams(max_tokens=14, temperature=None)))
        for i, job in enumerate(jobs[:3]):  # alone
            assert run_scheduler(scheduler, [job]) == [expected[i]]
        assert run_scheduler(scheduler, jobs) == expected  # all at once (batched, slots reused)
        assert run_scheduler(scheduler, jobs[-1:]) == expected[-1:]  # in a slot a bias row was left in
    finally:
        scheduler.close()


def test_generate_flags(trained_run, capsys):
    from cli_helpers import run_cli

    model = ["generate", "--model_dir", trained_run / "run", "--max_tokens", "6", "--prompt", "def "]
    status, plain, _ = run_cli(model, capsys)
    assert status == 0
    status, forced, _ = run_cli([*model, "--logit_bias", "40=100"], capsys)
    from gradcraft.tokenizer import Tokenizer
    from gradcraft.inference.text import paths_from_model_dir

    tokenizer = Tokenizer.load(paths_from_model_dir(str(trained_run / "run"))[0])
    assert status == 0 and forced == tokenizer.decode([40] * 6) + "\n"
    status, penalized, _ = run_cli([*model, "--repetition_penalty", "1.5", "--frequency_penalty", "1"], capsys)
    assert status == 0 and penalized != plain
    for bad in (["--logit_bias", "x=1"], ["--logit_bias", "5=200"], ["--logit_bias", "99999=1"]):
        status, _, err = run_cli([*model, *bad], capsys)
        assert status == 2 and err.startswith("error: --logit_bias") and err.count("\n") == 1, err
    for bad in (["--repetition_penalty", "0"], ["--min_p", "2"], ["--presence_penalty", "-3"]):
        status, _, err = run_cli([*model, *bad], capsys)
        assert status == 2 and bad[0] in err


@pytest.mark.cuda
@pytest.mark.skipif(not gc.is_available("cuda"), reason="needs an NVIDIA GPU with CuPy")
@pytest.mark.parametrize("step_prompts", [0, 32])
def test_the_penalized_step_is_captured_on_cuda_and_answers_as_the_cpu(step_prompts):
    """On CUDA the step with penalties is a captured graph of its own, and its greedy answers under load are
    the CPU scheduler's (up to rounding: the same tokens on this model), beside a request with none."""
    from test_batching import PROMPTS, make_model, served

    cases = [dict(repetition_penalty=1.5), dict(frequency_penalty=1.0, presence_penalty=0.5), dict(logit_bias={7: 5})]
    requests = [(PROMPTS[i % len(PROMPTS)], SamplingParams(max_tokens=12, **cases[i % 3])) for i in range(6)]
    requests.append((PROMPTS[0], SamplingParams(max_tokens=12)))
    cpu = Scheduler(make_model("gpt"), slots=4, step_prompts=step_prompts)
    try:
        expected = served(cpu, requests)
    finally:
        cpu.close()
    model = make_model("gpt")
    model.to("cuda")
    scheduler = Scheduler(model, slots=4, step_prompts=step_prompts)
    try:
        assert served(scheduler, requests) == expected
        assert any(b.penalized is not None and b.penalized.graph is not None for b in scheduler.buckets.values())
    finally:
        scheduler.close()


def test_special_tokens_in_a_generate_prompt_are_special_unless_split(trained_run, capsys):
    from cli_helpers import run_cli

    from gradcraft.inference.text import TextGenerator, paths_from_model_dir
    from gradcraft.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(paths_from_model_dir(str(trained_run / "run"))[0])
    generator = TextGenerator(None, tokenizer)
    prompt = "<|endoftext|>" * 4
    assert generator.encode_prompt(prompt) == [tokenizer.eot_id] * 4
    assert generator.encode_prompt(prompt, split_special_tokens=True) == tokenizer.encode_ordinary(prompt)
    command = ["generate", "--model_dir", trained_run / "run", "--max_tokens", "2", "--prompt", prompt]
    assert run_cli(command, capsys)[0] == 0  # 4 tokens
    status, _, err = run_cli([*command, "--split_special_tokens"], capsys)  # as text: longer than the context
    assert status == 2 and "context" in err
