"""Decoding speed with a KV cache: gradcraft against HF transformers on the same weights, one run.

    python bench/generate.py --preset llama-15m --vocab 4096 --new_tokens 64 --threads 2
    python bench/generate.py --preset llama-110m --vocab 32000 --new_tokens 128 --device cuda

Our model is exported to the HF layout and loaded there (LlamaForCausalLM / GPT2LMHeadModel), so both
sides decode the same network; greedy decoding, the same prompts, token ids checked equal first.
Prints tokens/s end to end (prefill, warm-up and graph capture included) and decode only (the steps
after the fourth token: no prefill, no eager warm-up step or graph capture; what each further token
of a long answer costs), at each batch size, and the ratios ours / HF.
"""

import argparse
import os
import sys
import tempfile
import time

import numpy as np

# bench/ is sys.path[0] when a script here runs; drop it, or bench/kernels.py would shadow the `kernels`
# package that transformers looks for.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "src"))


WARM = 3  # token 0 (the prefill's), then two eager decoding steps and the one that captures the graph


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="llama-15m")
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--prompt_tokens", type=int, default=16)
    p.add_argument("--new_tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--device", default="cpu", help="cpu or cuda (both sides)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="both sides' weights")
    p.add_argument("--batches", default="1,8", help="batch sizes, a comma list")
    args = p.parse_args()
    import torch
    import transformers

    if args.threads:
        from gradcraft.benchmarks import limit_threads

        limit_threads(args.threads)  # PyTorch's threads and NumPy's BLAS (gradcraft.backend.blas)
    import gradcraft as gc
    from gradcraft.inference.generate import SamplingParams, generate
    from gradcraft.models import Transformer, describe, preset
    from gradcraft.models.hf import export_hf

    gc.manual_seed(0)
    model = Transformer(preset(args.preset, vocab_size=args.vocab))
    folder = tempfile.mkdtemp()
    export_hf(model, folder)
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval().to(args.device)
    model.to(args.device)
    if args.dtype != "float32":
        model.to(getattr(gc, args.dtype))
        hf.to(getattr(torch, args.dtype))
    print(
        f"{args.preset}: {describe(model)}; prompt {args.prompt_tokens} tokens, {args.new_tokens} new, greedy; "
        f"{args.dtype}; device {args.device}; threads {args.threads or 'all'}; torch {torch.__version__}, "
        f"transformers {transformers.__version__}"
    )
    rng = np.random.default_rng(0)
    print(
        f"{'batch':>5s} {'gradcraft tok/s':>16s} {'HF tok/s':>10s} {'ratio':>6s}   "
        f"{'decode only: gradcraft':>22s} {'HF':>10s} {'ratio':>6s}"
    )
    for batch in [int(b) for b in args.batches.split(",")]:
        prompts = rng.integers(0, args.vocab, size=(batch, args.prompt_tokens))
        params = SamplingParams(max_tokens=args.new_tokens)
        generate(model, [list(p) for p in prompts[:, :4]], SamplingParams(max_tokens=4))  # warm up
        stamps = []  # when each step's tokens reached the host (row 0 stands for the step)
        t = time.perf_counter()
        ours, _ = generate(
            model,
            [list(p) for p in prompts],
            params,
            on_token=lambda r, _: stamps.append(time.perf_counter()) if r == 0 else None,  # (False stops a row)
        )
        ours_s = time.perf_counter() - t
        with torch.no_grad():
            hf.generate(
                torch.tensor(prompts[:, :4], device=args.device), max_new_tokens=4, do_sample=False, pad_token_id=0
            )
            hf_stamps = []

            class Stamp(transformers.LogitsProcessor):  # called once per step, after its forward pass
                def __call__(self, input_ids, scores):
                    if args.device.startswith("cuda"):
                        torch.cuda.synchronize()
                    hf_stamps.append(time.perf_counter())
                    return scores

            t = time.perf_counter()
            out = hf.generate(
                torch.tensor(prompts, device=args.device),
                max_new_tokens=args.new_tokens,
                min_new_tokens=args.new_tokens,
                do_sample=False,
                pad_token_id=0,
                logits_processor=transformers.LogitsProcessorList([Stamp()]),
            )
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            hf_s = time.perf_counter() - t
        # (in bf16 two implementations may round a near-tie apart: then they part at some token)
        same = all(list(o) == list(h[args.prompt_tokens :]) for o, h in zip(ours, out.tolist()))
        ours_tps, hf_tps = batch * args.new_tokens / ours_s, batch * args.new_tokens / hf_s
        # decode only: the steps after the first WARM ones. Not the prefill (token 0), nor our first
        # decoding steps, which run eagerly (gradcraft.capture's warm-up, 2) and then capture the CUDA
        # graph (once per generate call): what each further token costs, as a long answer sees it.
        # The same steps on both sides.
        ours_decode = batch * (len(stamps) - 1 - WARM) / (stamps[-1] - stamps[WARM])
        hf_decode = batch * (len(hf_stamps) - 1 - WARM) / (hf_stamps[-1] - hf_stamps[WARM])
        print(
            f"{batch:5d} {ours_tps:16,.1f} {hf_tps:10,.1f} {ours_tps / hf_tps:5.2f}x   "
            f"{ours_decode:22,.1f} {hf_decode:10,.1f} {ours_decode / hf_decode:5.2f}x"
            f"{'' if same else '  (token ids differ!)'}"
        )


if __name__ == "__main__":
    main()
