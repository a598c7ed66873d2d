"""Where a decoding step's time goes on the GPU: the captured step alone, the whole per-token loop, and
the kernels of one replay (CUPTI through torch.profiler).

    python bench/decode_profile.py --preset llama-110m --vocab 32000 --dtype bfloat16 --batch 1
"""

import argparse
import collections
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

import gradcraft as gc  # noqa: E402
from gradcraft.inference.generate import SamplingParams, _Decoder, _realize_step, generate, sample_next  # noqa: E402
from gradcraft.models import Transformer, preset  # noqa: E402


@gc.no_grad()
def main():
    p = argparse.ArgumentParser()
    p.add_argument("--preset", default="llama-110m")
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--new_tokens", type=int, default=128)
    p.add_argument("--cupti", action="store_true")
    p.add_argument("--top", type=int, default=25, help="kernels listed by --cupti, longest first")
    args = p.parse_args()
    gc.manual_seed(0)
    model = Transformer(preset(args.preset, vocab_size=args.vocab)).to("cuda")
    if args.dtype != "float32":
        model.to(getattr(gc, args.dtype))
    prompts = [list(r) for r in np.random.default_rng(0).integers(0, args.vocab, size=(args.batch, 16))]
    generate(model, prompts, SamplingParams(max_tokens=8))
    for _ in range(2):
        t = time.perf_counter()
        generate(model, prompts, SamplingParams(max_tokens=args.new_tokens))
        s = time.perf_counter() - t
        print(
            f"generate {args.batch}x{args.new_tokens}: {s * 1e3:.1f} ms, {args.batch * args.new_tokens / s:,.0f} tok/s"
        )
    # the replayed step alone: a decoder as generate() builds one after the prefill, stepped twice
    # eagerly and then captured
    caches = model.new_caches()
    _realize_step(model(gc.tensor(np.array(prompts), device="cuda"), caches=caches)[:, -1], caches)
    d = _Decoder(model, caches, args.batch, len(prompts[0]), "cuda", static=True)
    for t in range(3):
        d.step([0] * args.batch, len(prompts[0]) + t)
    backend = gc.device.get_backend("cuda")
    ids = np.zeros((args.batch, 1), dtype=np.int64)
    pos = np.array([20], dtype=np.int64)
    pending = []

    def one_ahead():  # generate's greedy loop: queue the next step, then read the one before
        pending.append(d.launch_greedy())
        if len(pending) > 1:
            pending.pop(0)()

    for label, fn in (
        ("replay only", lambda: backend.replay(d.captured.graph)),
        ("feed+replay", lambda: d.captured(ids, pos)),
        ("feed+replay+ids", lambda: d.captured(ids, pos)[1].numpy()),
        ("step()", lambda: d.step([0] * args.batch, 20)),
        ("one step ahead", one_ahead),
        ("ahead, copy engine", one_ahead),  # the ids fetched by a copy-engine transfer, not a kernel
    ):
        if label == "ahead, copy engine":
            backend.KERNEL_FETCH_BYTES = 0
        if label in ("one step ahead", "ahead, copy engine"):
            pending.clear()
            d.start([0] * args.batch, 20)  # (the positions then run on: 200 steps stay inside the context)
        fn()
        backend.synchronize()
        t = time.perf_counter()
        n = 200
        for _ in range(n):
            fn()
        backend.synchronize()
        print(f"{label:>20s}: {(time.perf_counter() - t) / n * 1e6:8.1f} us")
    backend.KERNEL_FETCH_BYTES = type(backend).KERNEL_FETCH_BYTES
    row = d.step([0] * args.batch, 20).rows()
    params = SamplingParams(max_tokens=8, temperature=0.8, top_k=20)
    rng = np.random.default_rng(0)
    for label, pr in (("greedy", SamplingParams()), ("top-k 20, T 0.8", params)):
        t = time.perf_counter()
        for _ in range(200):
            sample_next(row[0], pr, rng)
        print(f"{'sample ' + label:>20s}: {(time.perf_counter() - t) / 200 * 1e6:8.1f} us")
    if args.cupti:
        import torch
        from torch.profiler import ProfilerActivity, profile

        torch.cuda.init()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                backend.replay(d.captured.graph)
            backend.synchronize()
        total, count = collections.Counter(), collections.Counter()
        for e in prof.events():
            if e.device_type.name == "CUDA":
                total[e.name] += e.device_time_total / 10
                count[e.name] += 1 / 10
        gpu = sum(total.values())
        print(f"GPU time per replay: {gpu:.1f} us over {sum(count.values()):.0f} kernels")
        for name, us in total.most_common(args.top):
            print(f"{us:8.1f} us {count[name]:5.0f}x  {name[:110]}")
    d.close()


if __name__ == "__main__":
    main()
