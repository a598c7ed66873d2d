"""Evaluating a language model (`gradcraft eval`): perplexity and bits per byte of a text, and
multiple-choice accuracy on a HellaSwag-style file.

Perplexity uses Hugging Face's sliding-window method ("Perplexity of fixed-length models"): windows of
`context` tokens whose starts are `stride` apart; each window scores only the tokens the windows before
it did not, each predicted from the tokens before it in the window (so with a stride below the
context, every scored token but the first window's sees at least context - stride earlier tokens). The
very first token is never scored (nothing predicts it). perplexity = exp(mean negative log-likelihood
per scored token); bits per byte = the summed negative log-likelihood / ln 2 / the UTF-8 bytes of the
scored tokens (tokenizer-independent, as lm-eval-harness reports it).

Multiple choice scores each ending as lm-eval-harness's `loglikelihood` requests do: the context and
" " + ending are encoded together and the ending's tokens are those after the context's (trailing spaces
of the context move to the ending first), the ending's log-likelihood is the sum over its tokens, and a
sequence longer than the context keeps its last tokens. acc: the ending of the highest log-likelihood
is the labelled one; acc_norm: the same after dividing each by its ending's length in characters
(lm-eval's `completion_len`, which is the length in bytes for ASCII text).
"""

import json
import math

import numpy as np

import gradcraft as gc
import gradcraft.nn.functional as F
from gradcraft.errors import UserError


@gc.no_grad()
def token_logprobs(model, ids: np.ndarray) -> np.ndarray:
    """(B, T - 1) float64: the log-probability of ids[:, 1:] given the tokens before each, one pass of
    ids[:, :-1] through the model (only the (B, T - 1) values come back from the device)."""
    device = model.tok_emb.weight.device
    inputs = gc.tensor(np.ascontiguousarray(ids[:, :-1]), device=device)
    targets = gc.tensor(np.ascontiguousarray(ids[:, 1:, None]), device=device)
    logprobs = F.log_softmax(model(inputs).float(), dim=-1)
    return logprobs.gather(-1, targets)[..., 0].numpy().astype(np.float64)


def windows(n: int, context: int, stride: int) -> list:
    """The sliding windows over n tokens: (begin, end, first scored position) each."""
    if n < 2:
        raise UserError(f"perplexity needs at least 2 tokens, got {n}")
    if not 1 <= stride <= context:
        raise UserError(f"--stride must be between 1 and the context ({context}), got {stride}")
    out, scored = [], 0
    for begin in range(0, n, stride):
        end = min(begin + context, n)
        out.append((begin, end, max(scored, begin + 1)))
        scored = end
        if end == n:
            break
    return out


def byte_lengths(tokenizer) -> np.ndarray:
    """Each token id's length in bytes."""
    return np.array([len(tokenizer.decode_bytes([i])) for i in range(tokenizer.vocab_size)], dtype=np.int64)


def perplexity(model, tokenizer, tokens, context: int, stride: int, batch_size: int = 1, progress=None) -> dict:
    """The sliding-window perplexity of `tokens` (1-D ids); progress: a tqdm-like bar (update(n)) or None."""
    tokens = np.asarray(tokens, dtype=np.int64)
    spans = windows(len(tokens), context, stride)
    nll, scored_bytes, count = 0.0, 0, 0
    lengths = byte_lengths(tokenizer)
    # windows of one length are run together (all but the last have `context` tokens)
    by_length: dict = {}
    for span in spans:
        by_length.setdefault(span[1] - span[0], []).append(span)
    for group in by_length.values():
        for i in range(0, len(group), batch_size):
            batch = group[i : i + batch_size]
            rows = token_logprobs(model, np.stack([tokens[b:e] for b, e, _ in batch]))
            for row, (begin, end, first) in zip(rows, batch):
                nll -= float(row[first - begin - 1 : end - begin - 1].sum())
                scored_bytes += int(lengths[tokens[first:end]].sum())
                count += end - first
            if progress is not None:
                progress.update(len(batch))
    loss = nll / count
    return {
        "tokens": int(len(tokens)),
        "scored_tokens": count,
        "bytes": scored_bytes,
        "context": context,
        "stride": stride,
        "nll": nll,
        "loss": loss,
        "perplexity": math.exp(loss),
        "bits_per_byte": nll / math.log(2) / scored_bytes if scored_bytes else None,
    }


def encode_pair(tokenizer, context: str, continuation: str) -> tuple[list, list]:
    """lm-eval-harness's split of a (context, continuation) pair into token ids: the context's trailing
    spaces move to the continuation, the two are encoded together, and the continuation's ids are
    those after the context's. An empty context is the end-of-text token, as lm-eval's prefix."""
    if not context:
        if tokenizer.eot_id is None:
            raise UserError("an empty context needs a tokenizer with an end-of-text token")
        return [tokenizer.eot_id], tokenizer.encode(continuation, allowed_special="all")
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole = tokenizer.encode(context + continuation, allowed_special="all")
    context_ids = tokenizer.encode(context, allowed_special="all")
    return context_ids, whole[len(context_ids) :]


def read_choices(path: str, limit: int | None = None) -> list:
    """The documents of a HellaSwag-format jsonl: one JSON object a line with `ctx` (text), `endings` (a
    list of texts) and `label` (the right ending's index, an integer or a string of digits)."""
    docs = []
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                if limit is not None and len(docs) >= limit:
                    break
                where = f"{path} line {number}"
                try:
                    doc = json.loads(line)
                except json.JSONDecodeError as e:
                    raise UserError(f"{where} is not JSON ({e.msg})") from None
                ctx, endings, label = (
                    doc.get(k) if isinstance(doc, dict) else None for k in ("ctx", "endings", "label")
                )
                if isinstance(label, str) and label.isdigit():
                    label = int(label)
                if (
                    not isinstance(ctx, str)
                    or not isinstance(endings, list)
                    or len(endings) < 2
                    or not all(isinstance(e, str) and e for e in endings)
                    or not isinstance(label, int)
                    or isinstance(label, bool)
                    or not 0 <= label < len(endings)
                ):
                    raise UserError(
                        f"{where}: give ctx (text), endings (2 or more non-empty texts) and label (the right "
                        "ending's index)"
                    )
                docs.append((ctx, endings, label))
    except FileNotFoundError:
        raise UserError(f"{path} does not exist") from None
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text") from None
    if not docs:
        raise UserError(f"{path} holds no documents")
    return docs


def choice_logliks(model, tokenizer, ctx: str, endings: list, context: int) -> list:
    """Each ending's log-likelihood after ctx (one batch of the endings through the model)."""
    seqs = []
    for ending in endings:
        ctx_ids, cont_ids = encode_pair(tokenizer, ctx, " " + ending)
        if not cont_ids:
            raise UserError(f"the ending {ending!r} encodes to no tokens after its context")
        seqs.append(((ctx_ids + cont_ids)[-(context + 1) :], len(cont_ids)))
    width = max(len(s) for s, _ in seqs)
    ids = np.zeros((len(seqs), width), dtype=np.int64)  # padded on the right: no earlier position sees it
    for i, (s, _) in enumerate(seqs):
        ids[i, : len(s)] = s
    rows = token_logprobs(model, ids)
    # an ending longer than the kept sequence scores all its kept tokens but the first (nothing predicts it)
    return [float(rows[i, len(s) - 1 - min(n, len(s) - 1) : len(s) - 1].sum()) for i, (s, n) in enumerate(seqs)]


def multiple_choice(model, tokenizer, docs: list, context: int, progress=None) -> dict:
    """acc and acc_norm over docs [(ctx, endings, label)]; progress: a tqdm-like bar or None."""
    correct = correct_norm = 0
    for ctx, endings, label in docs:
        logliks = np.array(choice_logliks(model, tokenizer, ctx, endings, context))
        correct += int(np.argmax(logliks) == label)
        correct_norm += int(np.argmax(logliks / np.array([len(e) for e in endings], dtype=np.float64)) == label)
        if progress is not None:
            progress.update(1)
    n = len(docs)
    return {
        "docs": n,
        "acc": correct / n,
        "acc_norm": correct_norm / n,
        # the standard error of a mean of 0/1 outcomes (lm-eval's acc_stderr)
        "acc_stderr": math.sqrt(correct / n * (1 - correct / n) / (n - 1)) if n > 1 else None,
        "acc_norm_stderr": math.sqrt(correct_norm / n * (1 - correct_norm / n) / (n - 1)) if n > 1 else None,
    }
