"""Mutation audit: does the test suite catch small deliberate bugs where users depend on the code?

Each mutant below replaces one exact piece of source text (found exactly once, or the mutant is
reported as stale) in a temporary copy of the repository, runs the test files that should catch
it (`pytest -x`: the first failure is enough), and restores the file. A mutant is *caught* when a
test fails, *missed* when they all pass. The working tree is never modified. The C kernels are
compiled in the copy's own cache, so C mutants are real.

    python scripts/mutation_audit.py                   # every mutant; a table at the end
    python scripts/mutation_audit.py --list            # names and the tests each runs
    python scripts/mutation_audit.py --only temperature_multiplies,top_p_halved
    python scripts/mutation_audit.py --baseline        # first check the tests pass unmutated
    python scripts/mutation_audit.py --markdown out.md # also write the table as Markdown

Exit status 1 when a mutant is missed or stale. It takes a while (each mutant runs its tests in a
fresh process): run it under `nice` on a shared machine. docs/testing.md records the last score.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # relative to the repository root
    old: str
    new: str
    tests: tuple  # pytest arguments: files, and -k expressions
    what: str  # the bug, in words


M = Mutant
KERNELS = "src/gradcraft/backend/cpu/native/kernels.c"
NORMS, SOFTMAX, OPTIM = (f"src/gradcraft/backend/cpu/{name}.py" for name in ("norms", "softmax", "optim"))
TIES, EDGES, INPLACE = "tests/test_ties_and_repeats.py", "tests/test_optim_edges.py", "tests/test_inplace_saved.py"
FORWARDED, SPECIALS = "tests/test_trainer_forwarded_options.py", "tests/test_special_tokens_and_streams.py"
MUTANTS = [
    # ---- data samplers
    M(
        "sequential_sampler_forgets_position",
        "src/gradcraft/data/sampler.py",
        "self.epoch, self.position = epoch, position",
        "self.epoch, self.position = epoch, 0",
        ("tests/test_samplers.py",),
        "SequentialEpochs restarts its epoch on resume",
    ),
    M(
        "sequential_sampler_same_order_every_epoch",
        "src/gradcraft/data/sampler.py",
        "np.random.default_rng([self.seed, epoch])",
        "np.random.default_rng([self.seed, 0])",
        ("tests/test_samplers.py",),
        "every epoch visits the windows in the same order",
    ),
    M(
        "random_sampler_ignores_saved_state",
        "src/gradcraft/data/sampler.py",
        'self.rng.bit_generator.state = state["rng"]',
        "pass",
        ("tests/test_samplers.py",),
        "RandomWindows does not restore its generator",
    ),
    # ---- sampling (generation)
    M(
        "temperature_multiplies",
        "src/gradcraft/sampling.py",
        "scaled = values.astype(np.float64) / temperature if narrow",
        "scaled = values.astype(np.float64) * temperature if narrow",
        ("tests/test_sampling.py",),
        "temperature multiplies the logits",
    ),
    M(
        "top_p_halved",
        "src/gradcraft/sampling.py",
        "keep = cumulative - probs[order] < top_p",
        "keep = cumulative - probs[order] < top_p / 2",
        ("tests/test_sampling.py",),
        "the top-p threshold is halved",
    ),
    M(
        "top_k_keeps_one_more",
        "src/gradcraft/sampling.py",
        "kth = np.partition(values, -top_k)[-top_k]",
        "kth = np.partition(values, -top_k - 1)[-top_k - 1]",
        ("tests/test_sampling.py",),
        "top-k keeps k + 1 tokens",
    ),
    M(
        "kv_cache_position_off_by_one",
        "src/gradcraft/inference/generate.py",
        "caches=self.caches, start=position)",
        "caches=self.caches, start=position + 1)",
        ("tests/test_generate.py", "-k", "kv_cache or greedy"),
        "decoding steps use the next position",
    ),
    # ---- training: gradient accumulation and data parallel
    M(
        "accumulation_seed_one",
        "src/gradcraft/training/step.py",
        "seed = 1.0 / (self.accum * self.world)",
        "seed = 1.0",
        ("tests/test_grad_accumulation.py",),
        "backward seeded with 1 instead of 1/(accum x world)",
    ),
    M(
        "accumulation_ignores_world",
        "src/gradcraft/training/step.py",
        "seed = 1.0 / (self.accum * self.world)",
        "seed = 1.0 / self.accum",
        ("tests/test_grad_accumulation.py",),
        "data-parallel gradients summed, not averaged",
    ),
    # ---- norms (the C kernel is the float32 path, the NumPy reference the float64 one)
    M(
        "rms_norm_no_eps_c",
        KERNELS,
        "float rstd = row_rstd(xr, features, 0.0f, eps);\n        if (weight)",
        "float rstd = row_rstd(xr, features, 0.0f, 0.0f);\n        if (weight)",
        ("tests/test_ops.py", "-k", "norm"),
        "RMSNorm forward (C) without eps",
    ),
    M(
        "rms_norm_no_eps_numpy",
        NORMS,
        "rstd = 1.0 / np.sqrt(o.mean(axis=1, keepdims=True) + eps)",
        "rstd = 1.0 / np.sqrt(o.mean(axis=1, keepdims=True))",
        ("tests/test_ops.py", "-k", "norm"),
        "RMSNorm forward (NumPy) without eps",
    ),
    M(
        "layer_norm_no_eps_c",
        KERNELS,
        "float *o = out + r * features;\n"
        "        float mean = row_mean(xr, features), rstd = row_rstd(xr, features, mean, eps);",
        "float *o = out + r * features;\n"
        "        float mean = row_mean(xr, features), rstd = row_rstd(xr, features, mean, 0.0f);",
        ("tests/test_ops.py", "-k", "norm"),
        "LayerNorm forward (C) without eps",
    ),
    M(
        "layer_norm_no_eps_numpy",
        NORMS,
        "o *= 1.0 / np.sqrt((o * o).mean(axis=1, keepdims=True) + eps)",
        "o *= 1.0 / np.sqrt((o * o).mean(axis=1, keepdims=True))",
        ("tests/test_ops.py", "-k", "norm"),
        "LayerNorm forward (NumPy) without eps",
    ),
    # ---- attention
    M(
        "causal_mask_top_left_numpy",
        SOFTMAX,
        "i = np.arange(T)[:, None] + (S - T)",
        "i = np.arange(T)[:, None]",
        ("tests/test_ops.py", "-k", "sdpa"),
        "causal queries aligned with the first keys (NumPy)",
    ),
    M(
        "causal_mask_top_left_c",
        KERNELS,
        "if (causal) end = i + S - T + 1;",
        "if (causal) end = i + 1;",
        ("tests/test_ops.py", "tests/test_cpu_native.py", "-k", "sdpa or masked_softmax"),
        "causal queries aligned with the first keys (C)",
    ),
    M(
        "attention_c_sees_the_next_key",
        "src/gradcraft/backend/cpu/native/sdpa.c",
        "return s->causal ? min_i(s->S, t + s->off + 1) : s->S;",
        "return s->causal ? min_i(s->S, t + s->off + 2) : s->S;",
        ("tests/test_cpu_native.py", "-k", "sdpa"),
        "causal attention (C) lets each query see the next key",
    ),
    M(
        "attention_c_key_gradient_skips_a_query",
        "src/gradcraft/backend/cpu/native/sdpa.c",
        "if (band == LOWER) kb = min_i(K, max_i(0, i - off));",
        "if (band == LOWER) kb = min_i(K, max_i(0, i - off + 1));",
        ("tests/test_cpu_native.py", "-k", "sdpa"),
        "the key and value gradients (C) leave out the first query that sees a key",
    ),
    M(
        "attention_scale_1_over_d",
        "src/gradcraft/ops/attention.py",
        "1.0 / math.sqrt(D)",
        "1.0 / D",
        ("tests/test_ops.py", "-k", "sdpa"),
        "attention scaled by 1/D",
    ),
    # ---- kernels
    M(
        "exp_taylor_term",
        "src/gradcraft/backend/cpu/native/vector_math.h",
        "p = p * r + 1.0f / 6.0f;",
        "p = p * r + 1.0f / 5.0f;",
        ("tests/test_cpu_native.py",),
        "a wrong coefficient in the vectorized exp",
    ),
    M(
        "linear_cross_entropy_c_drops_chunks",
        "src/gradcraft/backend/cpu/native/linear_cross_entropy.py",
        "            if start:\n                dw += partial",
        "            if start:\n                dw = dw",
        ("tests/test_cpu_native.py", "-k", "linear_cross_entropy"),
        "the fused output layer's weight gradient (C) keeps only the first chunk's",
    ),
    M(
        "cross_entropy_mean_counts_ignored",
        "src/gradcraft/ops/cross_entropy.py",
        'total = reduce_sum(losses)\n    if reduction == "sum":\n        return total\n'
        "    count = reduce_sum(ew.ne(flat_target, ignore_index))",
        'total = reduce_sum(losses)\n    if reduction == "sum":\n        return total\n'
        "    count = reduce_sum(ew.ne(flat_target, -12345))",
        ("tests/test_ops.py", "-k", "cross_entropy"),
        "the mean loss counts ignored targets",
    ),
    # ---- optimizer
    M(
        "adamw_no_bias_correction",
        "src/gradcraft/optim/optimizer.py",
        "step_size, bc2_sqrt = lr / (1.0 - beta1**step), math.sqrt(1.0 - beta2**step)",
        "step_size, bc2_sqrt = lr, 1.0",
        ("tests/test_optim.py",),
        "AdamW without bias correction",
    ),
    M(
        "adamw_c_second_moment_unsquared",
        KERNELS,
        "v[i] = v[i] * beta2 + gi * keep2 * gi;",
        "v[i] = v[i] * beta2 + keep2 * fabsf(gi);",
        ("tests/test_optim.py", "tests/test_cpu_native.py"),
        "AdamW's second moment of abs(g), not g^2 (C)",
    ),
    M(
        "clip_coefficient_inverted",
        OPTIM,
        "coef = min(1.0, max_norm / (norm + 1e-6)) if max_norm > 0 else 1.0",
        "coef = min(1.0, norm / (max_norm + 1e-6)) if max_norm > 0 else 1.0",
        ("tests/test_optim.py",),
        "the clipping coefficient inverted",
    ),
    M(
        "warmup_off_by_one",
        "src/gradcraft/optim/lr_schedule.py",
        "return self.max_lr * (step + 1) / self.warmup_steps",
        "return self.max_lr * step / self.warmup_steps",
        ("tests/test_optim.py",),
        "warmup starts at learning rate 0",
    ),
    # ---- tokenizer
    M(
        "bpe_merges_leftmost_first",
        "src/gradcraft/tokenizer/bpe.py",
        "best = min(ranks)",
        "best = next((r for r in ranks if r != INF), INF)",
        ("tests/test_tokenizer.py",),
        "BPE applies the leftmost mergeable pair, not the lowest rank",
    ),
    M(
        "bpe_training_keeps_stale_counts",
        "src/gradcraft/tokenizer/train.py",
        "if current != -neg:  # stale entry",
        "if current != -neg and False:  # stale entry",
        ("tests/test_tokenizer.py",),
        "BPE training merges pairs by out-of-date counts",
    ),
    # ---- decoding
    M(
        "stepped_prompt_feeds_the_previous_token",
        "src/gradcraft/inference/batching.py",
        "seq.last = seq.prompt[seq.prefilled]",
        "seq.last = seq.prompt[seq.prefilled - 1]",
        ("tests/test_batching.py",),
        "a prompt fed through the decoding step repeats a token instead of moving on",
    ),
    M(
        "stepped_prompt_draws_before_its_last_token",
        "src/gradcraft/inference/batching.py",
        "if seq.prefilled < len(seq.prompt) - 1:",
        "if seq.prefilled < len(seq.prompt) - 2:",
        ("tests/test_batching.py",),
        "a stepped prompt's second-to-last token takes a number from the sequence's generator",
    ),
    M(
        "kv_append_leaves_the_key_unrotated",
        "src/gradcraft/backend/cpu/kv_cache.py",
        "q, key = rotate_rows(q, *rope), rotate_rows(key, *rope)",
        "q = rotate_rows(q, *rope)",
        ("tests/test_kv_cache.py",),
        "the fused decoding attention stores this step's key without RoPE",
    ),
    M(
        "norm_linear_drops_the_residual",
        "src/gradcraft/backend/cpu/gemv.py",
        's = elementwise.KERNELS["add"](x, res) if residual else x',
        "s = x",
        ("tests/test_norm_linear.py",),
        "the fused product's reference forgets the residual add",
    ),
    M(
        "decode_drops_the_attention_branch",
        "src/gradcraft/models/transformer.py",
        "a, x = norm_then(self.norm2, x, h, mlp.fc.weight, mlp.fc.bias, activation)",
        "a, x = norm_then(self.norm2, x, h * 0, mlp.fc.weight, mlp.fc.bias, activation)",
        ("tests/test_generate.py",),
        "the decoding step loses the attention's output from the residual stream",
    ),
    # ---- grouped casts, the graph after backward, linear_bias
    M(
        "late_cast_group_moves_past_a_write",
        "src/gradcraft/engine/grouping.py",
        "                late.clear()\n",
        "                pass\n",
        ("tests/test_engine.py",),
        "a gradient-side cast grouped after the schedule reads a buffer an assign already overwrote",
    ),
    M(
        "lazy_nodes_keep_saved_outputs",
        "src/gradcraft/autograd/engine.py",
        "            node.saved = ()\n            if t.is_realized:",
        "            pass\n            if t.is_realized:",
        ("tests/test_engine.py",),
        "flash attention's saved statistics keep the forward graph (and a reader of every weight) alive",
    ),
    M(
        "linear_bias_gradient_over_columns",
        "src/gradcraft/backend/cpu/linear.py",
        'reduce.KERNELS["sum"](g, (0,), False)',
        'reduce.KERNELS["sum"](g.T, (0,), False)[: g.shape[1]]',
        ("tests/test_linear_bias.py",),
        "the bias gradient sums over the wrong axis (right only for square gradients)",
    ),
    # ---- ties and repeated indices (tests/test_ties_and_repeats.py)
    M(
        "tied_amax_gives_each_tie_all",
        "src/gradcraft/ops/reduce.py",
        "share = ew.div(hit, sum(hit, axes, keepdim=True))",
        "share = hit",
        (TIES,),
        "a tied max/amax gives every tied element the whole gradient instead of an even share",
    ),
    M(
        "tied_maximum_to_the_second",
        "src/gradcraft/ops/elementwise.py",
        "share_a = add(win, mul(tie, 0.5))",
        "share_a = win",
        (TIES,),
        "maximum/minimum give a tie's gradient to the second operand, not half to each",
    ),
    M(
        "clamp_splits_at_a_bound",
        "src/gradcraft/ops/elementwise.py",
        "out = where(lt(out, min), min, out)",
        "out = maximum(out, min)",
        (TIES,),
        "clamp shares the gradient of an element at its lower bound with the bound",
    ),
    M(
        "embedding_backward_drops_repeats",
        "src/gradcraft/backend/cpu/embedding.py",
        "for level in range(1, int(counts.max())):",
        "for level in range(1, 1):",
        (TIES,),
        "the embedding gradient keeps one occurrence of a repeated id",
    ),
    M(
        "index_backward_overwrites_repeats",
        "src/gradcraft/backend/cpu/gather.py",
        "np.add.at(out, _index_tuple(indices, spec), _wide(g))",
        "out[_index_tuple(indices, spec)] = _wide(g)",
        (TIES,),
        "indexing's gradient writes a repeated index's contributions over each other",
    ),
    M(
        "take_along_dim_backward_overwrites_repeats",
        "src/gradcraft/backend/cpu/gather.py",
        "np.add.at(out, tuple(grids), _wide(g))",
        "out[tuple(grids)] = _wide(g)",
        (TIES,),
        "gather/take_along_dim's gradient keeps one contribution of a repeated index",
    ),
    M(
        "index_put_value_gradient_shared",
        "src/gradcraft/ops/indexing.py",
        "averaged = ew.where(ew.gt(count, 1), through, averaged)",
        "averaged = ew.where(ew.gt(count, 1), averaged, averaged)",
        (TIES,),
        "a value written to a repeated index gets a share of the gradient, not all of it",
    ),
    M(
        "descending_sort_puts_the_last_tie_first",
        "src/gradcraft/backend/cpu/reduce.py",
        'key = -_wide(a) if largest else _wide(a)\n    order = np.argsort(key, axis=axis, kind="stable")',
        'order = np.argsort(_wide(a), axis=axis, kind="stable")\n'
        "    order = np.flip(order, axis) if largest else order",
        (TIES, "-k", "sort"),
        "a descending sort (and topk) orders tied elements last index first (a reversed ascending sort)",
    ),
    # ---- optimizers at the edges (tests/test_optim_edges.py)
    M(
        "adam_eps_inside_the_root",
        "src/gradcraft/optim/adaptive.py",
        'denom = v_new.sqrt() / math.sqrt(1.0 - beta2**step) + group["eps"]',
        'denom = (v_new + group["eps"]).sqrt() / math.sqrt(1.0 - beta2**step)',
        (EDGES, "-k", "adam and not adamw"),
        "Adam adds eps under the square root",
    ),
    M(
        "adamw_eps_inside_the_root",
        "src/gradcraft/optim/optimizer.py",
        'denom = v_new.sqrt() / bc2_sqrt + group["eps"]',
        'denom = (v_new + group["eps"]).sqrt() / bc2_sqrt',
        (EDGES, "-k", "adamw"),
        "AdamW (unfused) adds eps under the square root",
    ),
    M(
        "rmsprop_eps_inside_the_root",
        "src/gradcraft/optim/adaptive.py",
        'avg = sq_new.sqrt() + group["eps"]',
        'avg = (sq_new + group["eps"]).sqrt()',
        (EDGES, "-k", "rmsprop"),
        "RMSprop adds eps under the square root",
    ),
    M(
        "adagrad_without_eps",
        "src/gradcraft/optim/adaptive.py",
        'clr * g / (total_new.sqrt() + group["eps"])',
        "clr * g / total_new.sqrt()",
        (EDGES, "-k", "adagrad"),
        "Adagrad divides by the root of the sum without eps (0/0 for a parameter that never had a gradient)",
    ),
    M(
        "sgd_dampening_ignored",
        "src/gradcraft/optim/optimizer.py",
        "(g * (1.0 - dampening) if dampening else g)",
        "g",
        (EDGES, "-k", "sgd"),
        "SGD's momentum ignores dampening",
    ),
    M(
        "fused_adamw_counts_a_step_without_gradient",
        "src/gradcraft/optim/optimizer.py",
        "(p.grad is not None or not with_grad_only)",
        "(True or not with_grad_only)",
        (EDGES, "-k", "fused"),
        "the fused AdamW counts a step for a parameter that had no gradient (its bias correction runs ahead)",
    ),
    M(
        "adamw_c_one_minus_beta_in_float",
        KERNELS,
        "const float keep1 = (float)(1.0 - beta1_d), keep2 = (float)(1.0 - beta2_d);",
        "const float keep1 = 1.0f - beta1, keep2 = 1.0f - beta2;",
        (EDGES, "-k", "fused"),
        "the C AdamW takes 1 - beta in float32 (1.3e-5 off for 0.999)",
    ),
    M(
        "state_dict_loads_the_first_parameter_only",
        "src/gradcraft/optim/optimizer.py",
        'for i, s in state_dict["state"].items():',
        'for i, s in list(state_dict["state"].items())[:1]:',
        (EDGES, "-k", "round_trip"),
        "load_state_dict restores the first parameter's state only",
    ),
    # ---- in-place writes (tests/test_inplace_saved.py)
    M(
        "view_write_misses_its_base",
        "src/gradcraft/ops/inplace.py",
        "if recording and before.base is not x:",
        "if False:",
        (INPLACE,),
        "a recorded write through a view changes the view but not its base (nor the base's other views)",
    ),
    M(
        "self_product_not_saved",
        "src/gradcraft/ops/inplace.py",
        "return builtins.sum(1 for t in node.inputs if t is x) > 1 or builtins.any(",
        "return builtins.any(",
        (INPLACE,),
        "y * y then y.add_(1): backward uses the new y instead of refusing",
    ),
    M(
        "saved_output_write_unnoticed",
        "src/gradcraft/ops/inplace.py",
        "    _mark_if_output_saved(x)\n    earlier",
        "    earlier",
        (INPLACE,),
        "writing into exp/sigmoid/tanh's saved output is not refused at backward",
    ),
    M(
        "constant_written_after_a_product",
        "src/gradcraft/ops/inplace.py",
        "if _differentiable(node) and (alias.requires_grad or _needs_value(node, alias)):",
        "if _differentiable(node) and alias.requires_grad:",
        (INPLACE,),
        "a constant written in place after a product saved it: backward goes on (PyTorch refuses)",
    ),
    # ---- the trainer's forwarded options (tests/test_trainer_forwarded_options.py)
    M(
        "label_smoothing_not_forwarded",
        "src/gradcraft/training/step.py",
        "label_smoothing=self.tc.label_smoothing",
        "label_smoothing=0.0",
        (FORWARDED,),
        "gradcraft train drops --label_smoothing",
    ),
    M(
        "decay_embeddings_not_forwarded",
        "src/gradcraft/training/trainer.py",
        "groups = weight_decay_groups(model, tc.weight_decay, tc.decay_embeddings)",
        "groups = weight_decay_groups(model, tc.weight_decay)",
        (FORWARDED,),
        "gradcraft train decays the embeddings whatever --decay_embeddings says",
    ),
    M(
        "grad_clip_not_applied",
        "src/gradcraft/training/trainer.py",
        "opt.step(grad_scale=grad_stats if tc.grad_clip else None)",
        "opt.step(grad_scale=None)",
        (FORWARDED,),
        "gradcraft train logs the norm but never clips",
    ),
    M(
        "beta2_not_forwarded",
        "src/gradcraft/training/trainer.py",
        "betas=(tc.beta1, tc.beta2)",
        "betas=(tc.beta1, 0.95)",
        (FORWARDED,),
        "gradcraft train ignores --beta2",
    ),
    M(
        "fused_ce_c_smoothing_gradient_dropped",
        KERNELS,
        "x[target[r]] -= 1.0f - smoothing;",
        "x[target[r]] -= 1.0f;",
        (FORWARDED,),
        "the fused output layer's gradient (C) ignores label smoothing (its loss does not)",
    ),
    # ---- C kernels, tokenizer, streaming, server
    M(
        "swiglu_c_backward_drops_the_gate_term",
        KERNELS,
        "dgate[j] = gr[j] * up[j] * s * (1.0f + gate[j] * (1.0f - s));",
        "dgate[j] = gr[j] * up[j] * s;",
        ("tests/test_cpu_native.py", "-k", "swiglu"),
        "SwiGLU's gate gradient (C) without the sigmoid's derivative",
    ),
    M(
        "log_softmax_c_backward_uses_log_probabilities",
        KERNELS,
        "for (i64 j = 0; j < n; j++) o[j] = gr[j] - exp_f(yr[j]) * total;",
        "for (i64 j = 0; j < n; j++) o[j] = gr[j] - yr[j] * total;",
        ("tests/test_cpu_native.py", "-k", "log_softmax"),
        "log-softmax's gradient (C) multiplies by log-probabilities, not probabilities",
    ),
    M(
        "cross_entropy_c_smoothing_over_the_padded_width",
        KERNELS,
        "nll = (1.0f - smoothing) * nll + smoothing * (lse - total / (float)classes);",
        "nll = (1.0f - smoothing) * nll + smoothing * (lse - total / (float)width);",
        ("tests/test_cpu_native.py", "tests/test_vocab_padding.py", "-k", "cross_entropy or smooth"),
        "the loss's smoothing term (C) divides by the padded vocabulary",
    ),
    M(
        "specials_shortest_first",
        "src/gradcraft/tokenizer/pretokenize.py",
        "specials = sorted(set(specials), key=lambda s: (-len(s), s))",
        "specials = sorted(set(specials), key=lambda s: (len(s), s))",
        (SPECIALS,),
        'special tokens that are prefixes of one another: "<|a|>" wins over "<|a|>x"',
    ),
    M(
        "stream_holds_back_one_character_too_few",
        "src/gradcraft/inference/text.py",
        "hold = 0 if hit or final else max(_longest(self.stops) - 1, 0)",
        "hold = 0 if hit or final else max(_longest(self.stops) - 2, 0)",
        (SPECIALS,),
        "a stream hands out the first character of a stop string that is still arriving",
    ),
    M(
        "server_ignores_stop_strings",
        "src/gradcraft/inference/admission.py",
        "stop_strings=stops,",
        "stop_strings=(),",
        ("tests/test_server_stop_streams.py",),
        "the server drops a request's stop strings",
    ),
]


def copy_repository(target: Path) -> None:
    """Tracked and untracked-but-not-ignored files of the working tree."""
    files = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def run_tests(copy: Path, tests, timeout: int) -> tuple[str, float, str]:
    """('pass' | 'fail' | 'error', seconds, the first failing test, else pytest's last line)."""
    env = dict(
        os.environ, PYTHONPATH=str(copy / "src"), GRADCRAFT_CACHE_DIR=str(copy / ".cache"), PYTHONDONTWRITEBYTECODE="1"
    )
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
            cwd=copy,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return "error", time.perf_counter() - start, f"timed out after {timeout} s"
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    failed = [line.split()[1].split("::", 1)[-1] for line in lines if line.startswith(("FAILED ", "ERROR "))]
    summary = failed[0] if failed else (lines[-1] if lines else proc.stderr.strip()[-200:])
    outcome = {0: "pass", 1: "fail", 2: "fail"}.get(proc.returncode, "error")  # 2: collection or import error
    return outcome, time.perf_counter() - start, summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--only", help="comma-separated mutant names")
    p.add_argument("--list", action="store_true", help="list the mutants and exit")
    p.add_argument("--baseline", action="store_true", help="first run every mutant's tests unmutated")
    p.add_argument("--timeout", type=int, default=1200, help="seconds per test run (default 1200)")
    p.add_argument("--markdown", help="also write the result table to this file")
    args = p.parse_args(argv)
    mutants = MUTANTS
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {m.name for m in MUTANTS}
        if unknown:
            print(f"error: unknown mutant(s) {', '.join(sorted(unknown))}, see --list", file=sys.stderr)
            return 2
        mutants = [m for m in MUTANTS if m.name in wanted]
    if args.list:
        for m in mutants:
            print(f"{m.name:42s} {m.path}: {m.what}  [{' '.join(m.tests)}]")
        return 0

    rows = []
    with tempfile.TemporaryDirectory(prefix="gradcraft-mutants-") as tmp:
        copy = Path(tmp)
        copy_repository(copy)
        if args.baseline:
            for tests in dict.fromkeys(m.tests for m in mutants):
                outcome, seconds, summary = run_tests(copy, tests, args.timeout)
                print(f"baseline {' '.join(tests)}: {outcome} ({seconds:.0f} s) {summary}", flush=True)
                if outcome != "pass":
                    print("error: the tests fail without any mutant, fix them first", file=sys.stderr)
                    return 2
        for m in mutants:
            path = copy / m.path
            original = path.read_text()
            if original.count(m.old) != 1:
                rows.append((m, "stale", 0.0, f"the text to mutate occurs {original.count(m.old)} times"))
                print(f"{m.name}: stale", flush=True)
                continue
            path.write_text(original.replace(m.old, m.new))
            try:
                outcome, seconds, summary = run_tests(copy, m.tests, args.timeout)
            finally:
                path.write_text(original)
            verdict = {"fail": "caught", "pass": "MISSED"}.get(outcome, "error")
            rows.append((m, verdict, seconds, summary))
            print(f"{m.name}: {verdict} ({seconds:.0f} s) {summary}", flush=True)

    caught = sum(r[1] == "caught" for r in rows)
    table = ["| mutant | file | the bug | tests run | result | first failing test |", "|---|---|---|---|---|---|"]
    table += [
        f"| {m.name} | {m.path} | {m.what} | `{' '.join(m.tests)}` | {verdict} | "
        f"{'`' + summary + '`' if verdict == 'caught' else summary} |"
        for m, verdict, _, summary in rows
    ]
    table.append(f"\nScore: {caught} of {len(rows)} mutants caught.")
    print("\n".join(table))
    if args.markdown:
        Path(args.markdown).write_text("\n".join(table) + "\n")
    return 0 if caught == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
