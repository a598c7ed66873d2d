"""Generation: the KV cache against recomputation, against HF generate, streaming, and CLI errors."""

import json
import subprocess
import sys
import types

import numpy as np
import pytest
import torch

import gradcraft as gc
from gradcraft.inference.generate import SamplingParams, _Decoder, _realize_step, generate, generate_without_cache
from gradcraft.models import Transformer
from gradcraft.models.hf import export_hf
from cli_helpers import run_cli
from test_models import FAMILIES, randomize, small_config


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_kv_cache_generation_equals_recomputing_the_context(family):
    cfg = small_config(family, seq_len=40)  # the hybrid family has window 3: generation runs far past it
    model = Transformer(cfg)
    randomize(model, seed=5)
    prompt = [3, 1, 4, 1, 5]
    params = SamplingParams(max_tokens=25, temperature=None)
    cached, _ = generate(model, [prompt], params)
    assert cached[0] == generate_without_cache(model, prompt, params)
    sampled = SamplingParams(max_tokens=20, temperature=1.0, top_k=10, top_p=0.9, seed=7)
    assert generate(model, [prompt], sampled)[0][0] == generate_without_cache(model, prompt, sampled)


def _decode_logits(model, prompts, steps, static, device="cpu"):
    """Logits of `steps` decoding steps after a prefill, feeding fixed token ids."""
    caches = model.new_caches()
    logits = model(gc.tensor(np.array(prompts), device=device), caches=caches)[:, -1]
    _realize_step(logits, caches)
    decoder = _Decoder(model, caches, len(prompts), len(prompts[0]), device, static)
    feed = np.random.default_rng(1).integers(0, model.config.vocab_size, size=(steps, len(prompts)))
    return decoder, [decoder.step(list(ids), len(prompts[0]) + t).rows() for t, ids in enumerate(feed)]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_static_cache_decoding_equals_the_growing_cache(family):
    """The decoding path that CUDA replays as one graph (StaticKVCaches, positions read from a device
    buffer) gives the logits of the growing caches, to the last position of the context, for every
    family: sliding-window layers through rings of their window (the hybrid family's window of 3 wraps
    many times), experts without a capacity limit."""
    cfg = small_config(family, seq_len=24)
    model = Transformer(cfg)
    randomize(model, seed=4)
    prompts = [[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]]
    _, growing = _decode_logits(model, prompts, 19, static=False)
    decoder, static = _decode_logits(model, prompts, 19, static=True)
    assert decoder.static is not None
    np.testing.assert_allclose(np.array(static), np.array(growing), rtol=1e-4, atol=1e-5)


def test_static_caches_are_freed_when_generation_ends(monkeypatch):
    """A server runs generation after generation: the whole-context caches of one must be gone when
    it returns, without waiting for Python's cycle collector."""
    import gc as python_gc
    import weakref

    from gradcraft.models import transformer

    model = Transformer(small_config("llama_gqa", seq_len=24))
    made = []
    plain = transformer.StaticKVCache.from_cache.__func__

    def tracked(cls, *args):
        cache = plain(cls, *args)
        made.append(weakref.ref(cache))
        return cache

    monkeypatch.setattr(transformer.StaticKVCache, "from_cache", classmethod(tracked))
    python_gc.disable()
    try:
        generate(model, [[1, 2, 3]], SamplingParams(max_tokens=6), static=True)
    finally:
        python_gc.enable()
    assert made and all(ref() is None for ref in made)


def test_batched_generation_equals_one_by_one():
    cfg = small_config("llama_gqa", seq_len=40)
    model = Transformer(cfg)
    randomize(model, seed=6)
    prompts = [[1, 2, 3], [4, 5, 6], [7, 8], [9, 10, 11, 12]]
    params = SamplingParams(max_tokens=12, temperature=0.9, top_k=20, seed=3)
    together, _ = generate(model, prompts, params)
    assert together == [generate(model, [p], params)[0][0] for p in prompts]


def test_generation_stops_at_the_context_length():
    cfg = small_config("gpt", seq_len=12)
    model = Transformer(cfg)
    out, reasons = generate(model, [[1, 2, 3, 4]], SamplingParams(max_tokens=100))
    assert len(out[0]) == 12 - 4 + 1 and reasons == ["context"]


@pytest.mark.parametrize("family", ["gpt", "llama_gqa"])
def test_greedy_generation_equals_hf_generate(family, tmp_path):
    import transformers

    cfg = small_config(family, seq_len=40)
    model = Transformer(cfg)
    randomize(model, seed=8)
    export_hf(model, str(tmp_path))
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), attn_implementation="eager").eval()
    prompt = [5, 9, 2, 7]
    with torch.no_grad():
        hf_out = hf.generate(
            torch.tensor([prompt]), max_new_tokens=20, do_sample=False, min_new_tokens=20, pad_token_id=0
        )[0, len(prompt) :].tolist()
    ours, _ = generate(model, [prompt], SamplingParams(max_tokens=20))
    assert ours[0] == hf_out


def test_streaming_output_equals_non_streaming(trained_run):
    from gradcraft.cli.generate import load
    import argparse

    args = argparse.Namespace(model_dir=str(trained_run / "run"), vocab=None, config=None, weights=None, device="cpu")
    generator = load(args)
    params = SamplingParams(max_tokens=40, temperature=1.5, top_k=50, seed=11)
    pieces = []
    texts, _ = generator.complete(["def ", "# ü"], params, on_text=lambda i, p: pieces.append((i, p)))
    for i, text in enumerate(texts):
        assert "".join(p for j, p in pieces if j == i) == text
    again, _ = generator.complete(["def ", "# ü"], SamplingParams(max_tokens=40, temperature=1.5, top_k=50, seed=11))
    assert again == texts
    stopped, reasons = generator.complete(["def "], SamplingParams(max_tokens=40, stop_strings=("s",)))
    assert "s" not in stopped[0]


def _generate(*args):
    return subprocess.run(
        [sys.executable, "-m", "gradcraft.cli.main", "generate", *args], capture_output=True, text=True, timeout=120
    )


def _one_line(proc, needle):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], (
        proc.stderr
    )


def test_cli_generates_and_rejects_mismatched_files(trained_run, tmp_path, capsys):
    run = trained_run / "run"
    ok = _generate("--model_dir", str(run), "--prompt", "def ", "--max_tokens", "5")
    assert ok.returncode == 0, ok.stderr

    def _generate_here(*args):  # the refusals in process: one interpreter, not five
        status, _, err = run_cli(["generate", *args], capsys)
        return types.SimpleNamespace(returncode=status, stderr=err)

    _one_line(_generate_here("--model_dir", str(tmp_path / "none")), "does not exist")
    _one_line(
        _generate_here(
            "--vocab",
            str(tmp_path / "x.json"),
            "--config",
            str(run / "config.json"),
            "--weights",
            str(run / "model.safetensors"),
            "--prompt",
            "a",
        ),
        "does not exist",
    )
    # a tokenizer of another size
    from gradcraft.tokenizer import train as train_tokenizer

    rng = np.random.default_rng(0)
    words = ["".join(chr(97 + c) for c in rng.integers(0, 26, size=rng.integers(2, 9))) for _ in range(3000)]
    other = train_tokenizer([" ".join(words)], vocab_size=280)
    other.save(str(tmp_path / "other.json"))
    _one_line(
        _generate_here(
            "--vocab",
            str(tmp_path / "other.json"),
            "--config",
            str(run / "config.json"),
            "--weights",
            str(run / "model.safetensors"),
            "--prompt",
            "a",
        ),
        "has 280 tokens",
    )
    # a tokenizer of the same size but different merges: the fingerprint catches it
    same_size = train_tokenizer([" ".join(reversed(words)) + " zz"], vocab_size=300)
    same_size.save(str(tmp_path / "same_size.json"))
    _one_line(
        _generate_here(
            "--vocab",
            str(tmp_path / "same_size.json"),
            "--config",
            str(run / "config.json"),
            "--weights",
            str(run / "model.safetensors"),
            "--prompt",
            "a",
        ),
        "not the one the weights",
    )
    # weights that do not fit the config
    cfg = json.loads((run / "gradcraft_config.json").read_text())
    cfg["dim"] = 64
    (tmp_path / "big.json").write_text(json.dumps(cfg))
    _one_line(
        _generate_here(
            "--vocab",
            str(trained_run / "tokenizer.json"),
            "--config",
            str(tmp_path / "big.json"),
            "--weights",
            str(run / "model.safetensors"),
            "--prompt",
            "a",
        ),
        "does not fit",
    )


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_greedy_decoding_one_step_ahead_gives_the_same_tokens_and_reasons(family, monkeypatch):
    """Greedy decoding through static caches queues each step before reading the one before (the step
    feeds itself its argmax): the same tokens and stop reasons as the growing caches' step-by-step
    loop, whether rows end by length, a stop id, a callback or the context, together or apart."""
    from gradcraft.inference import generate as generation

    used = []
    pipelined = generation._greedy_pipelined
    monkeypatch.setattr(generation, "_greedy_pipelined", lambda *a: used.append(1) or pipelined(*a))
    model = Transformer(small_config(family, seq_len=24))
    randomize(model, seed=8)
    prompts = [[3, 1, 4, 1, 5], [9, 2, 6, 5, 3], [7, 7, 1, 2, 8]]
    first, _ = generate(model, prompts, SamplingParams(max_tokens=30), static=False)
    cases = [
        SamplingParams(max_tokens=30),  # to the end of the context
        SamplingParams(max_tokens=6),
        SamplingParams(max_tokens=30, stop_ids=(first[0][3],)),  # row 0 stops early, the others go on
    ]
    for params in cases:
        heard = {False: [], True: []}
        for static in (False, True):

            def on_token(row, token, static=static):
                heard[static].append((row, token))
                return not (row == 2 and len([r for r, _ in heard[static] if r == 2]) == 4)  # row 2: a stop string

            result = generate(model, prompts, params, on_token=on_token, static=static)
            heard[static] = (result, heard[static])
        assert heard[True] == heard[False]
    assert len(used) == len(cases)
