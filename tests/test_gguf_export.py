"""`gradcraft export --format gguf`: the file read back with gguf's own reader (llama.cpp's authors'),
its metadata and tensor names as llama.cpp's loader expects them, and a NumPy forward pass written
the way llama.cpp computes these architectures (GGML's `llama` rotates adjacent pairs, hence the q/k
permutation) from the file's tensors alone, against our logits and greedy tokens, f32 and f16; and
llama.cpp itself (llama-cpp-python, where it is installed: it builds from source, so the test extras
leave it out) on the same files."""

import numpy as np
import pytest

import gradcraft as gc
from cli_helpers import run_cli

gguf = pytest.importorskip("gguf")

TINY = ["--embed_dim", "32", "--num_layers", "2", "--num_heads", "4", "--seq_len", "16", "--batch_size", "2"]
TINY += ["--steps", "2", "--no_progress"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A LLaMA-style run (GQA, tied head) and a GPT-2-style one (untied head), tokenizer included."""
    from gradcraft.cli.main import main

    root = tmp_path_factory.mktemp("gguf")
    (root / "raw").mkdir()
    for i in range(30):
        (root / "raw" / f"{i}.txt").write_text(f"def reverse_string(s):\n    return s[::-1]  # {i} fox\n" * 3)
    argv = ["tokenize", "--data_dir", root / "raw", "--output_path", root / "tokens.bin", "--vocab_size", "300"]
    assert main([str(a) for a in argv + ["--workers", "1"]]) == 0
    base = ["train", "--dataset", str(root / "tokens.bin"), *TINY]
    assert main(base + ["--model_dir", str(root / "llama"), "--preset", "toy-v0", "--num_kv_heads", "2"]) == 0
    gpt = ["--model_dir", str(root / "gpt2"), "--preset", "mallmoc", "--tie_embeddings", "false"]
    assert main(base + gpt + ["--gelu_approximate", "tanh"]) == 0
    return root


def _read(path):
    reader = gguf.GGUFReader(str(path))
    meta = {name: field.contents() for name, field in reader.fields.items() if not name.startswith("GGUF.")}
    tensors = {t.name: np.asarray(t.data) for t in reader.tensors}
    return meta, tensors


def _norm(x, w, b=None, eps=1e-5, rms=False):
    if rms:
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _attention(q, k, v):
    """q (H, T, D), k/v (Hkv, T, D): causal softmax attention, the kv heads shared by groups of q heads."""
    k, v = (np.repeat(a, q.shape[0] // a.shape[0], axis=0) for a in (k, v))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def _llama_cpp_logits(meta, t, ids):
    """llama.cpp's `llama` graph: rope on adjacent pairs (GGML's NORM mode) over the file's q/k rows."""
    t = {k: v.astype(np.float64) for k, v in t.items()}
    H = meta["llama.attention.head_count"]
    eps, base, T = meta["llama.attention.layer_norm_rms_epsilon"], meta["llama.rope.freq_base"], len(ids)
    x = t["token_embd.weight"][ids]
    D = x.shape[1] // H
    angles = np.arange(T)[:, None] * base ** (-np.arange(0, D, 2) / D)  # (T, D/2)
    cos, sin = np.cos(angles), np.sin(angles)

    def rope(a):  # (heads, T, D): pairs (2i, 2i + 1)
        even, odd = a[..., 0::2], a[..., 1::2]
        out = np.empty_like(a)
        out[..., 0::2], out[..., 1::2] = even * cos - odd * sin, even * sin + odd * cos
        return out

    for i in range(meta["llama.block_count"]):
        b = f"blk.{i}."
        h = _norm(x, t[b + "attn_norm.weight"], eps=eps, rms=True)
        q, k, v = (h @ t[b + f"attn_{n}.weight"].T for n in "qkv")
        q, k, v = (a.reshape(T, -1, D).transpose(1, 0, 2) for a in (q, k, v))
        o = _attention(rope(q), rope(k), v).transpose(1, 0, 2).reshape(T, -1)
        x = x + o @ t[b + "attn_output.weight"].T
        h = _norm(x, t[b + "ffn_norm.weight"], eps=eps, rms=True)
        g = h @ t[b + "ffn_gate.weight"].T
        x = x + (g / (1 + np.exp(-g)) * (h @ t[b + "ffn_up.weight"].T)) @ t[b + "ffn_down.weight"].T
    x = _norm(x, t["output_norm.weight"], eps=eps, rms=True)
    return x @ t.get("output.weight", t["token_embd.weight"]).T


def _gpt2_logits(meta, t, ids):
    """llama.cpp's `gpt2` graph: learned positions, fused qkv, GELU (tanh), layernorm with biases."""
    t = {k: v.astype(np.float64) for k, v in t.items()}
    H, eps, T = meta["gpt2.attention.head_count"], meta["gpt2.attention.layer_norm_epsilon"], len(ids)
    x = t["token_embd.weight"][ids] + t["position_embd.weight"][:T]
    D = x.shape[1] // H
    for i in range(meta["gpt2.block_count"]):
        b = f"blk.{i}."
        h = _norm(x, t[b + "attn_norm.weight"], t[b + "attn_norm.bias"], eps)
        qkv = h @ t[b + "attn_qkv.weight"].T + t[b + "attn_qkv.bias"]
        q, k, v = (a.reshape(T, H, D).transpose(1, 0, 2) for a in np.split(qkv, 3, axis=-1))
        o = _attention(q, k, v).transpose(1, 0, 2).reshape(T, -1)
        x = x + o @ t[b + "attn_output.weight"].T + t[b + "attn_output.bias"]
        h = _norm(x, t[b + "ffn_norm.weight"], t[b + "ffn_norm.bias"], eps)
        u = h @ t[b + "ffn_up.weight"].T + t[b + "ffn_up.bias"]
        u = 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u**3)))
        x = x + u @ t[b + "ffn_down.weight"].T + t[b + "ffn_down.bias"]
    x = _norm(x, t["output_norm.weight"], t["output_norm.bias"], eps)
    return x @ t.get("output.weight", t["token_embd.weight"]).T


def _greedy(logits_of, prompt, n):
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(np.argmax(logits_of(ids)[-1])))
    return ids[len(prompt) :]


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_gguf_export_computes_our_logits(runs, family, tmp_path, capsys):
    from gradcraft.inference.run_paths import find_model
    from gradcraft.inference.text import load_model
    from gradcraft.tokenizer import Tokenizer

    files = find_model(str(runs / family))
    model, _ = load_model(files.config, files.weights)
    model.eval()
    tok = Tokenizer.load(files.vocab)
    prompt = tok.encode("def reverse")

    def ours(ids):
        with gc.no_grad():
            return model(gc.tensor(np.array([ids]))).numpy()[0]

    forward = _llama_cpp_logits if family == "llama" else _gpt2_logits
    for outtype, tol in (("f32", 1e-4), ("f16", 2e-2)):
        out = tmp_path / outtype
        argv = ["export", "--model_dir", runs / family, "--format", "gguf", "--outtype", outtype, "--out", out]
        status, stdout, err = run_cli(argv, capsys)
        assert status == 0, err
        assert stdout.startswith(f"wrote model.gguf to {out}")
        meta, tensors = _read(out / "model.gguf")
        cfg = model.config
        assert meta["general.architecture"] == family
        assert meta[f"{family}.context_length"] == cfg.seq_len and meta[f"{family}.block_count"] == cfg.n_layers
        assert meta["general.file_type"] == (1 if outtype == "f16" else 0)
        assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.pre"] == "llama-bpe"  # gpt4 split
        tokens = meta["tokenizer.ggml.tokens"]
        assert len(tokens) == cfg.vocab_size and tokens[tok.eot_id] == "<|endoftext|>"
        assert meta["tokenizer.ggml.eos_token_id"] == tok.eot_id and len(meta["tokenizer.ggml.merges"]) > 0
        expected = {"token_embd.weight", "output_norm.weight", "blk.0.attn_norm.weight", "blk.1.ffn_down.weight"}
        if family == "llama":
            assert meta["llama.attention.head_count_kv"] == 2
            expected |= {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.ffn_gate.weight"}
            assert "output.weight" not in tensors  # tied: llama.cpp reads token_embd
        else:
            expected |= {"position_embd.weight", "blk.0.attn_qkv.bias", "output.weight", "output_norm.bias"}
        assert expected <= set(tensors)
        matrices = {t.dtype for name, t in tensors.items() if t.ndim == 2}
        assert matrices == {np.dtype(np.float16 if outtype == "f16" else np.float32)}
        assert all(t.dtype == np.float32 for t in tensors.values() if t.ndim == 1)  # norms and biases
        np.testing.assert_allclose(forward(meta, tensors, prompt), ours(prompt), rtol=tol, atol=tol)
        if outtype == "f32":
            assert _greedy(lambda ids: forward(meta, tensors, ids), prompt, 8) == _greedy(ours, prompt, 8)


def test_gguf_export_refuses_what_llama_cpp_cannot_run(runs, tmp_path, capsys):
    import json

    config = json.loads((runs / "llama" / "gradcraft_config.json").read_text())
    config.update(attention_pattern="LL", window=4)
    run = tmp_path / "swa"
    run.mkdir()
    for name in ("gradcraft_tokenizer.json", "gradcraft_config.json"):
        (run / name).write_bytes((runs / "llama" / name).read_bytes())
    (run / "gradcraft_config.json").write_text(json.dumps(config))
    (run / "checkpoints").mkdir()
    step = runs / "llama" / "checkpoints" / "step_00000002"
    import shutil

    shutil.copytree(step, run / "checkpoints" / "step_00000002")
    status, _, err = run_cli(["export", "--model_dir", run, "--format", "gguf", "--out", tmp_path / "o"], capsys)
    assert status == 2 and "export --format gguf writes LLaMA- and GPT-2-style models; this one is mistral" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_llama_cpp_runs_the_export(runs, family, tmp_path, capsys):
    """llama.cpp itself (llama-cpp-python, where installed) loads the file, tokenizes as we do and
    computes our logits and greedy tokens."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from gradcraft.inference.run_paths import find_model
    from gradcraft.inference.text import load_model
    from gradcraft.tokenizer import Tokenizer

    files = find_model(str(runs / family))
    model, _ = load_model(files.config, files.weights)
    model.eval()
    tok = Tokenizer.load(files.vocab)
    text = "def reverse_string(s):"
    prompt = tok.encode(text)
    status, _, err = run_cli(["export", "--model_dir", runs / family, "--format", "gguf", "--out", tmp_path], capsys)
    assert status == 0, err
    llm = llama_cpp.Llama(str(tmp_path / "model.gguf"), n_ctx=16, logits_all=True, verbose=False, n_threads=1)
    assert llm.tokenize(text.encode(), add_bos=False, special=False) == prompt
    llm.eval(prompt)
    theirs = np.asarray(llm.scores[: len(prompt)])
    with gc.no_grad():
        ours = model(gc.tensor(np.array([prompt]))).numpy()[0]
    np.testing.assert_allclose(theirs, ours, rtol=1e-3, atol=1e-3)
