"""EleutherAI's lm-eval-harness (skipped when absent; not a project dependency) against `gradcraft serve`:
the local tasks in tests/data/lm_eval (a HellaSwag-format multiple-choice task and a
`loglikelihood_rolling` perplexity task) through `local-completions` with its default settings but
max_length (the model's context), local data only. Every log-likelihood lm-eval reads from the server
equals a direct forward pass of the model over the same tokens and windows, and its acc / acc_norm equal
`gradcraft eval --choices`'s."""

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

import gradcraft as gc
from cli_helpers import run_cli
from test_server import start_in_process
from test_server_api import _generator

lm_eval = pytest.importorskip("lm_eval")
pytest.importorskip("tenacity")  # (lm-eval's API models need its `api` extra)

REPO = Path(__file__).resolve().parent.parent
TASKS = REPO / "tests" / "data" / "lm_eval"
NAME = "tiny"


@pytest.fixture(scope="module")
def evaluated(trained_run):
    """lm-eval's results, with per-document samples, for both tasks against a server of the trained run."""
    from lm_eval.tasks import TaskManager

    generator = _generator(trained_run)
    context = generator.model.config.seq_len
    url, _, stop = start_in_process(generator, NAME)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("HF_DATASETS_OFFLINE", "1")  # local data only
            patch.setenv("HF_HUB_OFFLINE", "1")
            patch.chdir(REPO)  # the task files' data paths are relative to the repository root
            results = lm_eval.simple_evaluate(
                model="local-completions",
                model_args=f"model={NAME},base_url={url}/v1/completions,tokenizer={trained_run / 'run'},"
                f"max_length={context}",
                tasks=["gradcraft_local_choices", "gradcraft_local_documents"],
                task_manager=TaskManager(include_path=str(TASKS)),
                batch_size=1,
                log_samples=True,
            )
    finally:
        stop()
    return results, generator, context


def logprobs_of(model, ids) -> np.ndarray:
    """log P(ids[i] | ids[:i]) for i >= 1, one forward pass, float64 log-softmax."""
    with gc.no_grad():
        logits = model(gc.tensor(np.array([ids[:-1]], dtype=np.int64)))[0].float().numpy().astype(np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    logprobs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return logprobs[np.arange(len(ids) - 1), ids[1:]]


def rolling_loglikelihood(model, ids, eot, max_length) -> float:
    """A document's log-likelihood by lm-eval's rolling windows for an API model of max_length M: each
    request holds at most M - 1 tokens, so chunks of M - 2 tokens are predicted, the first after the
    end-of-text token, every later one after the M - 1 tokens that end with it (the last chunk, however
    short, sees a full window)."""
    span = max_length - 2
    total = 0.0
    for start in range(0, len(ids), span):
        end = min(start + span, len(ids))
        window = [eot] + ids[:end] if start == 0 else ids[end - span - 1 : end]
        total += logprobs_of(model, window)[-(end - start) :].sum()
    return total


def test_multiple_choice_log_likelihoods_and_accuracy_equal_a_forward_pass(evaluated, trained_run, tmp_path, capsys):
    from gradcraft.inference.evaluate import encode_pair

    results, generator, context = evaluated
    model, tokenizer = generator.model, generator.tokenizer
    samples = results["samples"]["gradcraft_local_choices"]
    docs = [json.loads(line) for line in (TASKS / "choices.jsonl").read_text().splitlines()]
    assert len(samples) == len(docs)
    truncated = worst = 0
    for sample in samples:
        doc = docs[sample["doc_id"]]
        got = [float(ll) for ll, _ in sample["filtered_resps"]]
        direct = []
        for ending in doc["endings"]:  # lm-eval's request: context and " " + ending, its last M - 1 tokens
            ctx_ids, cont_ids = encode_pair(tokenizer, doc["ctx"], " " + ending)
            ids = (ctx_ids + cont_ids)[-(context - 1) :]
            truncated += len(ids) < len(ctx_ids) + len(cont_ids)
            direct.append(logprobs_of(model, ids)[-len(cont_ids) :].sum())
        np.testing.assert_allclose(got, direct, rtol=1e-5, atol=1e-5)
        worst = max(worst, np.abs(np.array(got) - direct).max())
    assert truncated  # (one document is longer than the context: both keep the same last tokens)
    measured = results["results"]["gradcraft_local_choices"]
    out = tmp_path / "choices.json"
    flags = ["--choices", TASKS / "choices.jsonl", "--context", context - 1, "--out", out, "--no_progress"]
    status, _, err = run_cli(["eval", "--model_dir", trained_run / "run", *flags], capsys)
    assert status == 0, err
    ours = json.loads(out.read_text())["choices"]
    assert ours["acc"] == measured["acc,none"] and ours["acc_norm"] == measured["acc_norm,none"]
    assert ours["acc_stderr"] == pytest.approx(measured["acc_stderr,none"])
    print(f"\nlm-eval {measured}\ngradcraft eval {ours}\nlargest log-likelihood difference {worst:.3g}")


def test_rolling_perplexity_equals_a_forward_pass_over_the_same_windows(evaluated, trained_run):
    from transformers import AutoTokenizer

    results, generator, context = evaluated
    model, tokenizer = generator.model, generator.tokenizer
    hf = AutoTokenizer.from_pretrained(str(trained_run / "run"))
    samples = results["samples"]["gradcraft_local_documents"]
    texts = [json.loads(line)["text"] for line in (TASKS / "documents.jsonl").read_text().splitlines()]
    assert len(samples) == len(texts)
    nll = words = nbytes = worst = 0.0
    for sample in samples:
        text = texts[sample["doc_id"]]
        ids = tokenizer.encode(text, allowed_special="all")
        assert ids == hf(text, add_special_tokens=False).input_ids  # the tokenizer lm-eval loads
        direct = rolling_loglikelihood(model, ids, tokenizer.eot_id, context)
        assert float(sample["filtered_resps"][0]) == pytest.approx(direct, rel=1e-5)
        worst = max(worst, abs(float(sample["filtered_resps"][0]) - direct))
        nll -= direct
        words += len(re.split(r"\s+", text))
        nbytes += len(text.encode())
    assert max(len(tokenizer.encode(t, allowed_special="all")) for t in texts) > 2 * context  # several windows
    measured = results["results"]["gradcraft_local_documents"]
    expected = {
        "word_perplexity": math.exp(nll / words),
        "byte_perplexity": math.exp(nll / nbytes),
        "bits_per_byte": nll / nbytes / math.log(2),
    }
    for metric, value in expected.items():
        assert measured[f"{metric},none"] == pytest.approx(value, rel=1e-5), metric
    lm = {k: measured[f"{k},none"] for k in expected}
    print(f"\nlm-eval {lm}\ndirect {expected}\nlargest difference {worst:.3g}")
