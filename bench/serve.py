"""Load test of `gradcraft serve`: N concurrent streaming clients against one client at a time.

    python bench/serve.py --preset demo --clients 16 --requests 64 --max_tokens 64 --threads 2
    python bench/serve.py --model_dir runs/demo --clients 16 --requests 64     # a trained run instead

Starts a server on 127.0.0.1 (a free port; nothing leaves this machine) in a child process, then
runs the same fixed set of requests twice: one client sending them one after another, and N clients
at once (each its share, back to back). Every request streams (`"stream": true`), has a fixed prompt
and asks for exactly --max_tokens tokens: with --preset the model has random weights and a
tokenizer (learned on gradcraft's own sources) with no end-of-text token, so nothing ends early;
with --model_dir, stop tokens may end some answers sooner (the tokens counted are those received).

Prints, per run: the aggregate tokens/s (completion tokens over the run's wall time), time to first
token (TTFT) and inter-token latency (ITL, the gaps between streamed events) at p50 and p99; then the
ratio of the two aggregate throughputs.
"""

import argparse
import glob
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = [
    "def reverse(s):\n",
    "The quick brown fox",
    "import numpy as np\n",
    "# a small test\n",
    "class Tensor:\n",
    "for i in range(10):",
    "Once upon a time",
    "return x + y\n",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_preset(args) -> None:
    """The child process: a random-weight model of the preset with a learned tokenizer, served."""
    import gradcraft as gc
    from gradcraft.inference.server import serve
    from gradcraft.inference.text import inference_dtype
    from gradcraft.inference.text import TextGenerator
    from gradcraft.models import Transformer
    from gradcraft.models.config import preset
    from gradcraft.tokenizer import Tokenizer

    texts = [open(f, encoding="utf-8").read() for f in sorted(glob.glob(f"{_ROOT}/gradcraft/**/*.py", recursive=True))]
    tokenizer = Tokenizer.train(texts, preset(args.preset).vocab_size, special_tokens=())  # no end-of-text
    # The sources hold fewer merges than a large preset's vocabulary (llama-110m: ~15k of 32k): the model
    # gets the tokenizer's size, so that every id it can pick has a text.
    config = preset(args.preset, vocab_size=tokenizer.vocab_size)
    gc.manual_seed(0)
    model = Transformer(config)
    if args.device != "cpu":
        model.to(args.device)
    dtype = inference_dtype(args.dtype, args.device)
    if dtype != "float32":
        model.to(getattr(gc, dtype))  # as `gradcraft serve --dtype auto` does: bf16 on a GPU
    serve(
        TextGenerator(model, tokenizer),
        args.preset,
        "127.0.0.1",
        args.port,
        slots=args.max_batch,
        max_queue=4 * args.requests,
        step_prompts=args.step_prompts,
        access_log=False,
    )


def start_server(args, port: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.path.join(_ROOT, "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if args.threads:
        env.update(
            OMP_NUM_THREADS=str(args.threads),
            OPENBLAS_NUM_THREADS=str(args.threads),
            GRADCRAFT_NUM_THREADS=str(args.threads),
        )
    if args.model_dir:
        command = [
            sys.executable,
            "-m",
            "gradcraft.cli.main",
            "serve",
            "--model_dir",
            args.model_dir,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--max_batch",
            str(args.max_batch),
            "--max_queue",
            str(4 * args.requests),
            "--device",
            args.device,
            "--dtype",
            args.dtype,
        ]
    else:
        command = [
            sys.executable,
            os.path.abspath(__file__),
            "--_serve",
            "--preset",
            args.preset,
            "--port",
            str(port),
            "--max_batch",
            str(args.max_batch),
            "--device",
            args.device,
            "--dtype",
            args.dtype,
            "--requests",
            str(args.requests),
        ]
    if args.step_prompts is not None:
        command += ["--step_prompts", str(args.step_prompts)]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server did not start within 300 s")


def one_request(port: int, prompt: str, max_tokens: int) -> dict:
    """Stream one completion; returns its token count, TTFT and the gaps between events (seconds)."""
    body = json.dumps(
        {
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.8,
            "seed": 1,
            "stream": True,
            "stream_options": {"include_usage": True},  # the token count comes in a last chunk
        }
    )
    start = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"status {response.status}: {response.read()[:500]!r}")
    arrivals, tokens = [], 0
    for line in response:
        if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
            continue
        event = json.loads(line[6:])
        if "error" in event:
            raise RuntimeError(event["error"]["message"])
        if event["choices"] and event["choices"][0]["text"]:
            arrivals.append(time.perf_counter())
        if event.get("usage"):
            tokens = event["usage"]["completion_tokens"]
    conn.close()
    return {
        "tokens": tokens,
        "ttft": arrivals[0] - start if arrivals else float("nan"),
        "gaps": list(np.diff(arrivals)),
    }


def run(port: int, clients: int, requests: list, max_tokens: int) -> dict:
    """`clients` threads share the requests (client c takes requests c, c + clients, ...)."""
    results, failures = [], []

    def client(c):
        for prompt in requests[c::clients]:
            try:
                results.append(one_request(port, prompt, max_tokens))
            except Exception as e:  # noqa: BLE001 (counted and shown)
                failures.append(str(e))

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if failures:
        raise SystemExit(f"{len(failures)} requests failed, e.g. {failures[0]}")
    tokens = sum(r["tokens"] for r in results)
    ttft = np.array([r["ttft"] for r in results]) * 1000
    gaps = np.array([g for r in results for g in r["gaps"]]) * 1000
    return {
        "clients": clients,
        "requests": len(results),
        "tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "ttft_ms_p50": float(np.percentile(ttft, 50)),
        "ttft_ms_p99": float(np.percentile(ttft, 99)),
        "itl_ms_p50": float(np.percentile(gaps, 50)),
        "itl_ms_p99": float(np.percentile(gaps, 99)),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="demo", help="model shape, random weights (default: %(default)s)")
    p.add_argument("--model_dir", default=None, help="serve this trained run instead of a preset")
    p.add_argument("--clients", type=int, default=16, help="concurrent clients (default: %(default)s)")
    p.add_argument("--requests", type=int, default=64, help="requests per run (default: %(default)s)")
    p.add_argument("--max_tokens", type=int, default=64, help="tokens per request (default: %(default)s)")
    p.add_argument("--max_batch", type=int, default=16, help="the server's --max_batch (default: %(default)s)")
    p.add_argument(
        "--step_prompts",
        type=int,
        default=None,
        help="the server's --step_prompts (0: every prompt prefilled; default: the server's, 32 on a GPU, "
        "0 on the CPU)",
    )
    p.add_argument("--threads", type=int, default=None, help="CPU threads of the server (default: all)")
    p.add_argument("--device", default="cpu")
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16", "float16"],
        help="the served weights' type (default: auto: bfloat16 on a GPU, float32 on the CPU, as `gradcraft serve`)",
    )
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    p.add_argument("--_serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args._serve:
        return serve_preset(args)
    if min(args.clients, args.requests, args.max_tokens, args.max_batch) < 1 or (args.step_prompts or 0) < 0:
        raise SystemExit(
            "error: --clients, --requests, --max_tokens and --max_batch must be at least 1, --step_prompts at least 0"
        )
    port = _free_port()
    proc = start_server(args, port)
    try:
        requests = [PROMPTS[i % len(PROMPTS)] for i in range(args.requests)]
        run(port, min(args.clients, 4), requests[:8], 4)  # warm-up: first-use compilation, the memory pool
        rows = [run(port, 1, requests, args.max_tokens), run(port, args.clients, requests, args.max_tokens)]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(
        f"{args.model_dir or args.preset} on {args.device}, --max_batch {args.max_batch}, "
        f"{args.requests} requests x {args.max_tokens} tokens, streaming"
    )
    print(
        f"{'clients':>7} {'tokens':>7} {'wall s':>7} {'tok/s':>8} {'TTFT p50':>9} {'TTFT p99':>9} "
        f"{'ITL p50':>8} {'ITL p99':>8}   (ms)"
    )
    for r in rows:
        print(
            f"{r['clients']:7d} {r['tokens']:7d} {r['wall_s']:7.1f} {r['tokens_per_s']:8.1f} "
            f"{r['ttft_ms_p50']:9.1f} {r['ttft_ms_p99']:9.1f} {r['itl_ms_p50']:8.1f} {r['itl_ms_p99']:8.1f}"
        )
    ratio = rows[1]["tokens_per_s"] / rows[0]["tokens_per_s"]
    print(f"aggregate throughput, {args.clients} clients / 1 client: {ratio:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"args": {k: v for k, v in vars(args).items() if not k.startswith("_")}, "runs": rows, "ratio": ratio},
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
