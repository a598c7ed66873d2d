"""The command line a new user meets: no abbreviated flags, presets and descriptions in --help, error
lines that do not repeat themselves, generating past the context (--context crop, and the server's
"context": "crop"), an HF export that stops where gradcraft stops, and quickstart.sh run twice."""

import json
import os
import subprocess
import sys
import threading

import pytest

import gradcraft as gc
from cli_helpers import run_cli
from gradcraft.cli.main import build_parser
from gradcraft.inference.generate import SamplingParams, generate, generate_without_cache
from gradcraft.models import ModelConfig, Transformer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory):
    from gradcraft.cli.main import main

    root = tmp_path_factory.mktemp("usability")
    raw = root / "raw"
    raw.mkdir()
    for i in range(20):
        (raw / f"f{i}.txt").write_text(f"def reverse_string(s): return s[::-1]  # line {i} hello world\n")
    argv = ["tokenize", "--data_dir", raw, "--output_path", root / "tokens.bin", "--vocab_size", "300"]
    assert main([str(a) for a in argv + ["--workers", "1"]]) == 0
    return root / "tokenizer.json"


def test_flags_are_never_abbreviated(capsys, tmp_path):
    # `--step 3` was taken as --steps 3; `--warmup` was ambiguous between two spellings of one flag
    for flag in ("--step", "--warmup"):
        status, _, err = run_cli(["train", "--model_dir", tmp_path / "r", flag, "3"], capsys)
        assert status == 2
        assert err.strip() == f"error: unrecognized arguments: {flag} 3 (see gradcraft train --help)"
    status, _, err = run_cli(["generate", "--model", "x", "--prompt", "a"], capsys)
    assert status == 2 and "unrecognized arguments: --model x" in err


def test_help_lists_the_presets_and_every_command_has_a_description():
    from gradcraft.models.config import PRESETS

    parser = build_parser()
    train_help = parser.subcommands["train"].format_help()
    assert all(name in train_help for name in PRESETS)
    for name, sub in parser.subcommands.items():
        assert sub.description, f"gradcraft {name} --help has no description"


def test_an_unknown_log_kind_is_said_once(tokenizer_path, capsys, tmp_path):
    dataset = tokenizer_path.parent / "tokens.bin"
    status, _, err = run_cli(["train", "--dataset", dataset, "--model_dir", tmp_path / "r", "--log", "wandb"], capsys)
    assert status == 2
    assert err.strip() == "error: 'wandb' is not a known logger; --log takes a comma list of csv, jsonl, tensorboard"


@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_context_crop_goes_on_as_nanogpt_sample_does(positions):
    """Past the context, each token comes from the last seq_len tokens (recomputed): the KV-cache path
    and the scheduler give the tokens of the plain loop that crops (nanoGPT's sample.py)."""
    from gradcraft.inference.batching import Scheduler, Sequence

    gc.manual_seed(0)
    arch = dict(norm="layernorm", mlp="gelu", bias=True) if positions == "learned" else {}
    model = Transformer(
        ModelConfig(vocab_size=50, seq_len=8, dim=16, n_layers=2, n_heads=2, positions=positions, **arch)
    )
    model.eval()
    oracle = generate_without_cache(model, [1, 2, 3], SamplingParams(max_tokens=20, context="crop"))
    assert len(oracle) == 20
    ids, reasons = generate(model, [[1, 2, 3]], SamplingParams(max_tokens=20, context="crop"))
    assert ids == [oracle] and reasons == ["length"]
    assert generate(model, [[1, 2, 3]], SamplingParams(max_tokens=20))[1] == ["context"]  # stop: the default
    # a prompt longer than the context keeps its last seq_len tokens; sampled, two rows
    long = list(range(1, 13))
    sampled = SamplingParams(max_tokens=6, context="crop", temperature=0.9, seed=3)
    ids, _ = generate(model, [long, long[::-1]], sampled)
    assert ids[0] == generate_without_cache(model, long, sampled)
    assert ids[1] == generate_without_cache(model, long[::-1], sampled)
    # the server's scheduler, a cropped window re-run into the sequence's slot
    got, finished, done = [], [], threading.Event()
    scheduler = Scheduler(model, slots=2, max_queue=2)
    try:
        seq = Sequence(
            [1, 2, 3],
            SamplingParams(max_tokens=20, context="crop"),
            on_token=lambda s, t, lp: got.append(t),
            on_finish=lambda s, r: (finished.append(r), done.set()),
        )
        scheduler.submit([seq])
        assert done.wait(60)
    finally:
        scheduler.close()
    assert finished == ["length"] and got == oracle


def test_generate_and_serve_take_context_crop(tokenizer_path, tmp_path, capsys):
    from gradcraft.inference.text import TextGenerator
    from gradcraft.tokenizer import Tokenizer
    from test_server import start_in_process
    from test_server_api import call, complete

    tok = Tokenizer.load(str(tokenizer_path))
    gc.manual_seed(1)
    model = Transformer(ModelConfig(vocab_size=tok.vocab_size, seq_len=8, dim=16, n_layers=1, n_heads=2)).eval()
    prompt = "def reverse"
    oracle = generate_without_cache(model, tok.encode(prompt), SamplingParams(max_tokens=12, context="crop"))
    oracle_text = tok.decode(oracle[: oracle.index(tok.eot_id)] if tok.eot_id in oracle else oracle)

    class NoEndOfText(TextGenerator):  # random weights end at <|endoftext|> now and then
        def stop_ids(self):
            return ()

    url, _, stop = start_in_process(NoEndOfText(model, tok), slots=2)
    try:
        body = complete(url, prompt=prompt, max_tokens=12, temperature=0, context="crop")
        assert body["choices"][0]["text"] == tok.decode(oracle)
        refused = call(url, "/v1/completions", {"prompt": prompt, "context": "slide"})
        assert refused[0] == 400  # an invalid value: OpenAI's 400 invalid_request_error
    finally:
        stop()
    # the CLI, from a saved model
    from gradcraft.atomic import write_json
    from gradcraft.training.run_folder import save_weights

    write_json(str(tmp_path / "config.json"), model.config.to_dict())
    save_weights(model, str(tmp_path / "w.safetensors"), tok.fingerprint)
    files = ["--vocab", tokenizer_path, "--config", tmp_path / "config.json", "--weights", tmp_path / "w.safetensors"]
    status, out, err = run_cli(
        ["generate", *files, "--prompt", prompt, "--max_tokens", "12", "--context", "crop"], capsys
    )
    assert status == 0, err
    assert out == oracle_text + "\n" and "context length" not in err


def test_hf_generate_stops_at_our_end_of_text(tokenizer_path, tmp_path):
    """config.json and generation_config.json carry the tokenizer's end-of-text id: transformers'
    greedy generate ends on the token where ours ends."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from gradcraft.models.hf import export_hf
    from gradcraft.tokenizer import Tokenizer

    tok = Tokenizer.load(str(tokenizer_path))
    eot = tok.eot_id
    assert eot is not None
    gc.manual_seed(2)
    cfg = ModelConfig(vocab_size=tok.vocab_size, seq_len=64, dim=32, n_layers=2, n_heads=2, tie_embeddings=False)
    model = Transformer(cfg).eval()
    prompt = tok.encode("def reverse")
    free, _ = generate(model, [prompt], SamplingParams(max_tokens=12))
    # make <|endoftext|> win where the 5th token would come (and, maybe, earlier: either way ours ends there)
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    state["lm_head.weight"][eot] = state["lm_head.weight"][free[0][4]] * 1.5
    model.load_state_dict(state)
    ours, reasons = generate(model, [prompt], SamplingParams(max_tokens=12, stop_ids=(eot,)))
    assert reasons == ["stop"] and len(ours[0]) <= 4
    export_hf(model, str(tmp_path), eot_id=eot)
    config = json.loads((tmp_path / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (eot, eot, eot)
    assert json.loads((tmp_path / "generation_config.json").read_text())["eos_token_id"] == eot
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path)).eval()
    with torch.no_grad():
        theirs = hf.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False)[0, len(prompt) :].tolist()
    assert theirs == ours[0] + [eot]


def test_quickstart_again_reuses_the_data_and_the_run(tmp_path):
    """The script run a second time: the first run's token file and run folder (made here in-process,
    with the commands and paths the script uses, to keep the test short) are reused, and the
    completions printed."""
    from gradcraft.cli.main import main

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(60):
        (corpus / f"m{i}.py").write_text(f"def reverse_string(s):\n    return s[::-1]\nclass Stack:  # {i}\n" * 2)
    data, run = tmp_path / "data", tmp_path / "run"
    tiny = "--embed_dim 16 --num_layers 1 --num_heads 2 --seq_len 32 --batch_size 2 --no_progress"
    tokenize = ["tokenize", "--data_dir", corpus, "--ext", ".py", "--output_path", data / "tokens.bin"]
    tokenize += ["--vocab_path", data / "tokenizer.json", "--vocab_size", "300", "--val_fraction", "0.01"]
    assert main([str(a) for a in tokenize + ["--workers", "1"]]) == 0
    train = ["train", "--dataset", data / "tokens.bin", "--model_dir", run, "--preset", "toy-v0", "--steps", "2"]
    assert main([str(a) for a in train + tiny.split()]) == 0
    tokens_mtime, weights_mtime = (os.path.getmtime(p) for p in (data / "tokens.bin", run / "model.safetensors"))
    env = dict(
        os.environ,
        GC=f"{sys.executable} -m gradcraft.cli.main",
        CORPUS=str(corpus),
        DATA=str(data),
        RUN=str(run),
        PRESET="toy-v0",
        VOCAB_SIZE="300",
        STEPS="2",
        TRAIN_FLAGS=tiny,
    )
    script = os.path.join(REPO, "scripts", "quickstart.sh")
    again = subprocess.run(["bash", script], env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert f"== 1/3 reusing {data}/tokens.bin" in again.stdout
    assert f"== 2/3 reusing the run in {run}" in again.stdout and "nothing to do: the run in" in again.stdout
    assert again.stdout.count("--- prompt:") == 3 and "error" not in again.stderr
    assert os.path.getmtime(data / "tokens.bin") == tokens_mtime
    assert os.path.getmtime(run / "model.safetensors") == weights_mtime


def test_prebuild_fills_the_kernel_cache_without_a_gpu(tmp_path, capsys):
    """`gradcraft prebuild --arch` compiles (real NVRTC, no GPU) into files named as the GPU run's cache
    names them, in parallel; a second run finds them all."""
    from gradcraft.backend.cuda import compiler

    library = compiler.find_nvrtc()
    if library is None:
        pytest.skip("NVRTC library not found (pip install nvidia-cuda-nvrtc-cu12)")
    argv = ["prebuild", "--arch", "sm_80", "--out", tmp_path, "--files", "rope.cu,gradnorm.cu", "--workers", "2"]
    status, out, err = run_cli(argv, capsys)
    assert status == 0, err
    assert f"compiling 2 CUDA kernels (first run only; kept in {tmp_path})" in out
    version = compiler.nvrtc_version(library)
    names = {compiler.cubin_name(compiler.source(n), "sm_80", version) for n in ("rope.cu", "gradnorm.cu")}
    assert set(os.listdir(tmp_path)) == names
    status, out, _ = run_cli(argv, capsys)
    assert status == 0 and out.strip() == f"the kernel cache {tmp_path} already holds all 2 kernels"
    # an H100/H200 (sm_90) runs the Hopper files' sm_90a machine code
    assert ("flash_hopper.cu", "sm_90a") in compiler.targets("sm_90") and ("rope.cu", "sm_90") in compiler.targets(
        "sm_90"
    )
    assert all(arch == "sm_80" for _, arch in compiler.targets("sm_80"))


def test_prebuild_refuses_cleanly(tmp_path, capsys):
    import importlib.util

    status, _, err = run_cli(["prebuild", "--device", "cpu"], capsys)
    assert status == 2 and "prebuild compiles the GPU's kernels; give --device cuda" in err
    status, _, err = run_cli(["prebuild", "--arch", "sm_80", "--files", "nope.cu", "--out", tmp_path], capsys)
    assert status == 2 and "no kernel file nope.cu in" in err
    if importlib.util.find_spec("cupy") is None:
        status, _, err = run_cli(["prebuild", "--device", "cuda"], capsys)
        assert status == 2 and "prebuild --device cuda needs CuPy and a GPU, and CuPy is not installed here" in err


def test_python_dash_m_gradcraft_is_the_command_line():
    """`python -m gradcraft` works where the console script is not on PATH (a venv not activated)."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(gc.__file__))))
    done = subprocess.run(
        [sys.executable, "-m", "gradcraft", "train", "--steps", "x"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("error: argument --steps")
    assert "Traceback" not in done.stderr
