"""`gradcraft eval`: sliding-window perplexity and bits per byte against Hugging Face's loop computed by
hand with PyTorch's cross-entropy (and, at stride 1, against the definition: every token scored from the
context - 1 tokens before it), and multiple-choice accuracy against the log-likelihoods lm-eval-harness
reads from the server (echo + logprobs + max_tokens 0)."""

import json
import math

import numpy as np
import pytest

import gradcraft as gc
from cli_helpers import run_cli

torch = pytest.importorskip("torch")

DOCS = [
    {"ctx": "    return", "endings": ["s[::-1]", "banana split", "x = 3"], "label": 0},
    {"ctx": "x =", "endings": ["1", "ünïcödé ✓"], "label": "1"},
    {"ctx": "# ünïcödé ✓ ", "endings": ["漢字 🙂", "def", "return s"], "label": 0},  # (a trailing space)
]


@pytest.fixture(scope="module")
def loaded(trained_run):
    from gradcraft.inference.text import load_model, paths_from_model_dir
    from gradcraft.tokenizer import Tokenizer

    vocab, config, weights = paths_from_model_dir(str(trained_run / "run"))
    model = load_model(config, weights)[0]
    model.eval()
    return model, Tokenizer.load(vocab)


def logits_of(model, ids) -> torch.Tensor:
    with gc.no_grad():
        return torch.tensor(model(gc.tensor(np.array([ids], dtype=np.int64)))[0].float().numpy(), dtype=torch.float64)


def hf_sliding_window_nll(model, ids, max_length, stride):
    """Hugging Face's "Perplexity of fixed-length models" loop: (summed NLL, tokens scored)."""
    ids = torch.tensor(ids)
    nll, count, prev_end = 0.0, 0, 0
    for begin in range(0, len(ids), stride):
        end = min(begin + max_length, len(ids))
        trg_len = end - prev_end
        input_ids = ids[begin:end]
        target = input_ids.clone()
        target[:-trg_len] = -100
        logits = logits_of(model, input_ids.tolist())
        nll += torch.nn.functional.cross_entropy(logits[:-1], target[1:], ignore_index=-100, reduction="sum").item()
        count += int((target[1:] != -100).sum())
        prev_end = end
        if end == len(ids):
            break
    return nll, count


def test_perplexity_equals_hugging_faces_sliding_window_loop(trained_run, loaded, tmp_path, capsys):
    model, tokenizer = loaded
    text = (trained_run / "raw" / "f3.txt").read_text()
    ids = tokenizer.encode(text)
    context = model.config.seq_len
    assert len(ids) > 3 * context
    for stride in (context, 7, 1):
        out = tmp_path / f"stride{stride}.json"
        flags = ["--text", trained_run / "raw" / "f3.txt", "--stride", stride, "--out", out, "--no_progress"]
        status, printed, err = run_cli(["eval", "--model_dir", trained_run / "run", *flags], capsys)
        assert status == 0, err
        got = json.loads(out.read_text())["perplexity_text"]
        nll, count = hf_sliding_window_nll(model, ids, context, stride)
        assert got["scored_tokens"] == count and got["tokens"] == len(ids)
        assert got["nll"] == pytest.approx(nll, rel=1e-5)
        assert got["perplexity"] == pytest.approx(math.exp(nll / count), rel=1e-5)
        assert f"perplexity {got['perplexity']:.4f}" in printed
        if stride < context:  # every token but the first is scored once
            assert count == len(ids) - 1
            assert got["bits_per_byte"] == pytest.approx(nll / math.log(2) / len(tokenizer.decode_bytes(ids[1:])))
    # stride 1, by the definition: token t predicted from the context - 1 tokens before it
    by_hand = 0.0
    for t in range(1, len(ids)):
        window = ids[max(0, t - context + 1) : t + 1]
        by_hand -= torch.log_softmax(logits_of(model, window)[-2], dim=0)[window[-1]].item()
    assert got["nll"] == pytest.approx(by_hand, rel=1e-5)


def test_a_token_file_gives_the_text_files_numbers(trained_run, loaded, tmp_path, capsys):
    from gradcraft.data.tokenfile import write_token_file

    model, tokenizer = loaded
    ids = tokenizer.encode((trained_run / "raw" / "f3.txt").read_text())
    path = tmp_path / "f3.bin"
    tokens = np.array(ids, dtype=np.uint16)
    write_token_file(str(path), tokens, vocab_size=tokenizer.vocab_size, fingerprint=tokenizer.fingerprint)
    out = tmp_path / "r.json"
    flags = ["--text", trained_run / "raw" / "f3.txt", "--tokens", path, "--stride", 5, "--out", out]
    status, _, err = run_cli(["eval", "--model_dir", trained_run / "run", *flags, "--batch_size", 3], capsys)
    assert status == 0, err
    results = json.loads(out.read_text())
    text, from_file = results["perplexity_text"], results["perplexity_tokens"]
    assert text["nll"] == pytest.approx(from_file["nll"], rel=1e-6) and text["bytes"] == from_file["bytes"]
    assert "perplexity f3.txt" in err  # the progress bar
    write_token_file(str(path), tokens, vocab_size=tokenizer.vocab_size, fingerprint="other")
    status, _, err = run_cli(["eval", "--model_dir", trained_run / "run", "--tokens", path], capsys)
    assert status == 2 and "fingerprint" in err


def test_multiple_choice_equals_the_log_likelihoods_lm_eval_reads_from_the_server(
    trained_run, loaded, tmp_path, capsys
):
    from gradcraft.inference.evaluate import encode_pair
    from test_server import start_in_process
    from test_server_api import _generator, complete

    model, tokenizer = loaded
    path = tmp_path / "choices.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    url, _, stop = start_in_process(_generator(trained_run), "m")
    try:
        correct = correct_norm = 0
        for doc in DOCS:
            logliks = []
            for ending in doc["endings"]:  # lm-eval's loglikelihood request: context + continuation, echoed
                ctx_ids, cont_ids = encode_pair(tokenizer, doc["ctx"], " " + ending)
                answer = complete(url, prompt=ctx_ids + cont_ids, max_tokens=0, echo=True, logprobs=0)
                logliks.append(sum(answer["choices"][0]["logprobs"]["token_logprobs"][-len(cont_ids) :]))
            label = int(doc["label"])
            correct += int(np.argmax(logliks) == label)
            correct_norm += int(np.argmax(np.array(logliks) / [len(e) for e in doc["endings"]]) == label)
    finally:
        stop()
    out = tmp_path / "r.json"
    status, printed, err = run_cli(
        ["eval", "--model_dir", trained_run / "run", "--choices", path, "--out", out], capsys
    )
    assert status == 0, err
    got = json.loads(out.read_text())["choices"]
    assert got["docs"] == 3 and got["acc"] == correct / 3 and got["acc_norm"] == correct_norm / 3
    assert 0 < correct_norm < 3 or 0 < correct < 3  # (a file where the answer is not all one way)
    assert f"acc {got['acc']:.4f}" in printed
    status, _, _ = run_cli(
        ["eval", "--model_dir", trained_run / "run", "--choices", path, "--limit", 1, "--out", out], capsys
    )
    assert status == 0 and json.loads(out.read_text())["choices"]["docs"] == 1


def test_choices_context_keeps_the_last_tokens_of_each_scored_sequence(trained_run, loaded, tmp_path, capsys):
    from gradcraft.inference.evaluate import encode_pair

    model, tokenizer = loaded
    path = tmp_path / "choices.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    for context in (3, 6):  # (every sequence is cut, and the endings of DOCS[2] too at 3)
        correct = correct_norm = 0
        for doc in DOCS:
            logliks = []
            for ending in doc["endings"]:
                ctx_ids, cont_ids = encode_pair(tokenizer, doc["ctx"], " " + ending)
                ids = (ctx_ids + cont_ids)[-context:]
                logprobs = torch.log_softmax(logits_of(model, ids), dim=1)
                scored = [logprobs[i - 1, ids[i]].item() for i in range(1, len(ids))]
                logliks.append(sum(scored[-len(cont_ids) :]))
            correct += int(np.argmax(logliks) == int(doc["label"]))
            correct_norm += int(np.argmax(np.array(logliks) / [len(e) for e in doc["endings"]]) == int(doc["label"]))
        out = tmp_path / "r.json"
        flags = ["--choices", path, "--context", context, "--out", out, "--no_progress"]
        status, _, err = run_cli(["eval", "--model_dir", trained_run / "run", *flags], capsys)
        assert status == 0, err
        got = json.loads(out.read_text())["choices"]
        assert (got["acc"], got["acc_norm"]) == (correct / 3, correct_norm / 3), context


def test_bad_input_is_one_error_line(trained_run, tmp_path, capsys):
    model = ["eval", "--model_dir", trained_run / "run"]
    text = trained_run / "raw" / "f3.txt"
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"ctx": "a", "endings": ["b"], "label": 0}\n')
    for flags in (
        [],
        ["--text", tmp_path / "missing.txt"],
        ["--text", text, "--stride", 100],
        ["--text", text, "--context", 1000],
        ["--text", text, "--context", 1],
        ["--choices", bad_json],
    ):
        status, _, err = run_cli([*model, *flags], capsys)
        assert status == 2 and err.startswith("error: ") and err.count("\n") == 1, (flags, err)
    status, _, err = run_cli([*model, "--text", text, "--stride", 0], capsys)
    assert status == 2 and "--stride" in err
