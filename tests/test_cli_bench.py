"""`gradcraft bench` and bench/: every side trains the same model side by side; the losses must agree.
The timings themselves are never asserted (a shared CI machine makes them noise)."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

import gradcraft as gc
from gradcraft.benchmarks import torch_reference
from gradcraft.benchmarks.training import parse_baselines, select_sides
from gradcraft.errors import UserError
from gradcraft.models import ModelConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bench(*args, code=None):
    cmd = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "gradcraft.cli.main", "bench", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def script(name, *args):
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", name), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


TINY = ["--preset", "toy-v0", "--batch", "2", "--steps", "2", "--warmup", "1", "--threads", "1"]


def side_rows(stdout):
    """The side names of the result table's rows (a name, then ms/step and tokens/s)."""
    return re.findall(r"^(\w+)\s+[\d.]+\s+[\d,]+\s", stdout, re.M)


def drifts(stdout):
    return {m[0]: float(m[1]) for m in re.findall(r"max \|loss difference\| .*, (\w+) vs gradcraft: (\S+)", stdout)}


# ---------------------------------------------------------------- choosing the sides


def test_baseline_names_comma_separated_or_repeated():
    assert parse_baselines(["sdpa,eager", "compile", "sdpa"], "cpu") == ["sdpa", "eager", "compile"]
    assert parse_baselines([], "cpu") == ["eager"]  # the CPU default: compile takes minutes there
    assert parse_baselines(None, "cuda:0") == ["eager", "sdpa", "compile"]
    with pytest.raises(UserError, match="unknown baseline 'flash'"):
        parse_baselines(["eager,flash"], "cpu")


@pytest.mark.parametrize(
    "only, sides",
    [
        (None, ["gradcraft", "eager", "sdpa"]),
        ("ours", ["gradcraft"]),
        ("gradcraft", ["gradcraft"]),
        ("torch", ["eager", "sdpa"]),
        ("pytorch", ["eager", "sdpa"]),
    ],
)
def test_only_selects_sides(only, sides):
    assert select_sides(only, ["eager", "sdpa"]) == sides


def test_side_by_side_losses_agree():
    proc = bench(*TINY, "--baseline", "eager", "--baseline", "sdpa")
    assert proc.returncode == 0, proc.stderr
    assert side_rows(proc.stdout) == ["gradcraft", "eager", "sdpa"]
    assert re.search(r"speed ratio \(gradcraft tokens/s / eager tokens/s\): [\d.]+x", proc.stdout)
    assert re.search(r"speed ratio \(gradcraft tokens/s / sdpa tokens/s\): [\d.]+x", proc.stdout)
    assert re.search(r"matmul rate measured through PyTorch: [\d.]+ TFLOP/s", proc.stdout)
    assert re.search(r"^gradcraft .* [\d.]+%  ", proc.stdout, re.M)  # an MFU figure
    assert set(drifts(proc.stdout)) == {"eager", "sdpa"}
    assert max(drifts(proc.stdout).values()) < 1e-4


def test_only_ours():
    proc = bench(*TINY, "--only", "ours", "--no_mfu")
    assert proc.returncode == 0, proc.stderr
    assert side_rows(proc.stdout) == ["gradcraft"] and "ratio" not in proc.stdout and "matmul rate" not in proc.stdout


def test_unknown_baseline_one_line():
    proc = bench(*TINY, "--baseline", "eager,jit")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: unknown baseline 'jit'; choose from eager, sdpa, compile (comma-separated or repeated)"
    ]


def test_without_pytorch_one_line():
    code = (
        "import sys; sys.modules['torch'] = None; from gradcraft.cli.main import main; "
        "sys.exit(main(['bench', *sys.argv[1:]]))"
    )
    proc = bench(*TINY, code=code)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: gradcraft bench compares against PyTorch, which is not installed here; install it "
        "(pip install torch) or run with --only gradcraft"
    ]


@pytest.mark.skipif(gc.device.is_available("cuda"), reason="this machine has a GPU")
def test_no_gpu_one_line():
    proc = bench(*TINY, "--device", "cuda", "--only", "gradcraft")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "CUDA" in proc.stderr


# ---------------------------------------------------------------- bench/train_gpt.py and its plot


def test_train_gpt_only_ours_json_and_plot(tmp_path):
    results = tmp_path / "results.json"
    toy = ["--preset", "toy-v0", "--device", "cpu", "--batch", "2", "--steps", "1", "--warmup", "0", "--threads", "1"]
    proc = script("train_gpt.py", *toy, "--only", "ours", "--no_mfu", "--json", str(results))
    assert proc.returncode == 0, proc.stderr
    assert side_rows(proc.stdout) == ["gradcraft"]
    proc = script("train_gpt.py", *toy, "--baseline", "sdpa", "--no_mfu", "--json", str(results), "--label", "second")
    assert proc.returncode == 0, proc.stderr
    assert side_rows(proc.stdout) == ["gradcraft", "sdpa"]
    runs = json.loads(results.read_text())["runs"]
    assert [r["label"] for r in runs] == ["toy-v0 fp32 2x32", "second"]
    assert list(runs[1]["sides"]) == ["gradcraft", "sdpa"] and runs[1]["sides"]["sdpa"]["tokens_per_s"] > 0

    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        import plot_train
    finally:
        sys.path.pop(0)
    labels, sides, values = plot_train.table(plot_train.load_runs([str(results)]))
    assert labels == ["toy-v0 fp32 2x32", "second"] and sides == ["gradcraft", "sdpa"] and len(values) == 3
    plot_train.main([str(results), "--out", str(tmp_path / "plot.png")])
    assert (tmp_path / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_train_gpt_rejects_an_unknown_baseline():
    proc = script("train_gpt.py", "--device", "cpu", "--baseline", "eager,fast")
    assert proc.returncode == 2 and "unknown baseline 'fast'" in proc.stderr


# ---------------------------------------------------------------- the sdpa reference against the explicit one

CONFIGS = {
    "gpt": dict(norm="layernorm", mlp="gelu", positions="learned", bias=True, tie_embeddings=True),
    "llama_gqa": dict(norm="rmsnorm", mlp="swiglu", positions="rope", bias=False, n_kv_heads=2),
    "hybrid_window_gqa": dict(
        norm="rmsnorm", mlp="swiglu", positions="rope", bias=False, n_kv_heads=1, attention_pattern="LG", window=3
    ),
    "moe": dict(
        norm="rmsnorm", mlp="swiglu", positions="rope", bias=False, ffn_pattern="DM", n_experts=4, experts_per_token=2
    ),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_sdpa_reference_equals_explicit(name):
    cfg = ModelConfig(vocab_size=61, seq_len=16, dim=32, n_layers=2, n_heads=4, **CONFIGS[name])
    rng = np.random.default_rng(0)
    gc.manual_seed(0)
    from gradcraft.models import Transformer

    params = {
        k: torch.tensor(v.numpy() + 0.1 * rng.standard_normal(v.shape).astype(np.float32))
        for k, v in Transformer(cfg).state_dict().items()
    }
    idx = torch.tensor(rng.integers(0, cfg.vocab_size, size=(3, 12)))
    targets = torch.tensor(rng.integers(0, cfg.vocab_size, size=(3, 12)))
    outs = {}
    for attention in ("explicit", "sdpa"):
        logits, aux = torch_reference.forward(cfg, params, idx, with_aux=True, attention=attention)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab_size), targets.reshape(-1)) + aux
        outs[attention] = logits.detach(), loss.item()
    torch.testing.assert_close(outs["sdpa"][0], outs["explicit"][0], rtol=1e-5, atol=1e-5)
    assert outs["sdpa"][1] == pytest.approx(outs["explicit"][1], rel=1e-5)
    with pytest.raises(ValueError, match="attention must be"):
        torch_reference.forward(cfg, params, idx, attention="flash")


# ---------------------------------------------------------------- bench/attention.py


def test_attention_bench_runs_on_the_cpu():
    proc = script(
        "attention.py",
        "--device",
        "cpu",
        "--seqs",
        "16,32",
        "--dims",
        "8,16",
        "--tokens",
        "64",
        "--width",
        "32",
        "--extra_seq",
        "32",
        "--window",
        "8",
        "--gqa",
        "4,2",
        "--repeat",
        "1",
        "--rounds",
        "2",
        "--threads",
        "1",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "median of 2 alternating rounds of 1 calls" in proc.stdout
    rows = re.findall(r"^(causal|window 8|gqa 4/2)\s.*\s([\d.]+)x\s+(\S+) / (\S+) / (\S+) / (\S+)$", proc.stdout, re.M)
    assert [r[0] for r in rows] == ["causal"] * 4 + ["window 8", "gqa 4/2"]
    assert max(float(e) for r in rows for e in r[2:]) < 1e-4  # ours and PyTorch's agree (float32)
    assert "(agree)" in proc.stdout


def test_attention_bench_gpu_time_needs_cuda():
    proc = script("attention.py", "--device", "cpu", "--gpu_time", "--seqs", "16", "--extra_seq", "0")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: --gpu_time traces CUDA kernels; leave it out with --device cpu"]


@pytest.mark.cuda
@pytest.mark.skipif(not gc.device.is_available("cuda"), reason="needs CuPy and an NVIDIA GPU")
def test_attention_bench_gpu_time_splits_each_side_into_kernels():
    proc = script(
        "attention.py", "--seqs", "256", "--dims", "64", "--tokens", "1024", "--width", "128", "--extra_seq", "0",
        "--repeat", "2", "--rounds", "1", "--gpu_time",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = {side: re.search(rf"^    {side} GPU ([\d.]+) ms: (.+)$", proc.stdout, re.M) for side in ("ours", "torch")}
    for side, found in lines.items():
        assert found, proc.stdout
        kernels = [float(part.rsplit(" ", 1)[1]) for part in found.group(2).split(", ")]
        assert all(ms > 0 for ms in kernels) and float(found.group(1)) == pytest.approx(sum(kernels), abs=2e-3)
    assert "flash" in lines["ours"].group(2) or "hopper" in lines["ours"].group(2)  # our attention kernels ran


@pytest.mark.extended  # a reporting option of the bench (test_attention_bench_runs_on_the_cpu runs the bench)
def test_attention_bench_phases_split_each_call():
    proc = script(
        "attention.py", "--device", "cpu", "--seqs", "16", "--dims", "8", "--tokens", "32", "--width", "16",
        "--extra_seq", "0", "--repeat", "2", "--rounds", "1", "--threads", "1", "--phases",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for side in ("ours", "torch"):
        calls = r" \(kernel calls ([\d.]+)\)" if side == "ours" else "()"  # ours: the backend's share
        pattern = (
            rf"^    {side} phases \(ms, medians\): build (\S+), forward (\S+){calls}, backward (\S+){calls}, "
            r"wait (\S+)$"
        )
        found = re.search(pattern, proc.stdout, re.M)
        assert found, proc.stdout
        build, forward, forward_calls, backward, backward_calls, wait = (float(x or 0) for x in found.groups())
        assert min(build, forward, backward, wait) >= 0 and forward > 0 and backward > 0
        assert forward_calls <= forward and backward_calls <= backward
        assert (forward_calls > 0 and backward_calls > 0) == (side == "ours")


@pytest.mark.extended  # a reporting option of the bench, as above
def test_attention_bench_host_profile_names_our_engine_functions():
    proc = script(
        "attention.py", "--device", "cpu", "--seqs", "16", "--dims", "8", "--tokens", "32", "--width", "16",
        "--extra_seq", "0", "--repeat", "2", "--rounds", "1", "--threads", "1", "--host_profile", "3",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for order in ("tottime", "cumtime"):
        section = proc.stdout.split(f"ours host profile, 3 calls, by {order}:")[1]
        assert "ncalls  tottime  percall  cumtime" in section.split("\n")[2]
    assert "gradcraft/engine/realize.py" in proc.stdout and "autograd/engine.py" in proc.stdout
    bad = script("attention.py", "--device", "cpu", "--host_profile", "-1")
    assert bad.returncode == 2 and bad.stderr.strip() == "error: --host_profile takes a number of calls >= 0, got -1"


def test_attention_host_bench_refuses_what_it_cannot_time_in_one_line():
    """bench/attention_host.py times the CUDA launch path: on the CPU, or with a count below 1, it says
    so in one line and exits 2 (its timings run on a GPU: BENCHMARK.md)."""
    cpu = script("attention_host.py", "--device", "cpu")
    assert cpu.returncode == 2 and cpu.stderr.strip().startswith("error: bench/attention_host.py times the CUDA")
    assert len(cpu.stderr.strip().splitlines()) == 1
    bad = script("attention_host.py", "--calls", "0")
    assert bad.returncode == 2 and bad.stderr.strip() == "error: --calls must be at least 1, got 0"


# ---------------------------------------------------------------- bench/attention_kernels.py


def test_attention_kernels_names_the_fastest_variant_against_the_default():
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "attention_kernels.py")
    spec = importlib.util.spec_from_file_location("attention_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # (the GPU imports are inside main)
    times = {"mma.sync": 0.004, "wgmma n128 w1": 0.002, "wgmma n128 w2 ws": 0.0016}
    assert module.fastest(times, "wgmma n128 w1") == "wgmma n128 w2 ws 1.600 ms (1.25x the default, wgmma n128 w1)"
    assert module.fastest(times, "wgmma n128 w2 ws").startswith("wgmma n128 w2 ws 1.600 ms (1.00x the default")
    assert module.fastest(times, None) == "wgmma n128 w2 ws 1.600 ms"  # (a default not among them)
