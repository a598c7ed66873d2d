"""Bounds on `gradcraft serve`'s size flags, derived from the model and the machine's memory (as
`train` derives --seq_len's from check_memory): checked before the model is loaded or anything
allocated, so that `--max_batch 1000000000` is one line, not "serving" and then a 60 TiB
allocation error or the OOM killer.

    --max_batch       the KV cache (slots x layers x 2 x kv heads x context x head dim) and the
                      decoding step's per-slot buffers (logits over the vocabulary, activations)
    --max_queue       each waiting sequence holds its prompt's ids and its sampling state
    --max_body_bytes  each open connection may hold one body: the body limit x --max_connections,
                      within the RAM
"""

from gradcraft.errors import UserError

MAX_QUEUE_HARD = 1 << 20  # waiting sequences: beyond this a queue is a denial of service, not a queue
MAX_BODY_HARD = 1 << 30  # a request body of more than 1 GiB is no completion request
QUEUED_BYTES_PER_TOKEN = 64  # a waiting prompt's ids as Python ints in a list, and its share of the rest


def _gib(n: float) -> str:
    return f"{n / 2**40:,.1f} TiB" if n >= 2**40 else f"{n / 2**30:,.2f} GiB"


def slot_bytes(config, itemsize: int) -> int:
    """Memory one decoding slot takes (an upper estimate): its rows of every layer's K and V caches,
    plus the step's per-row buffers (logits and their sampling copies, activations, scores)."""
    kv = sum(
        2 * config.n_kv_heads * (config.layer_window(i) or config.seq_len) * config.head_dim * itemsize
        for i in range(config.n_layers)
    )
    ffn = config.ffn_dim or 4 * config.dim
    # measured on the CPU: ~19 KB a running slot for a model of dim 32, context 24, vocabulary 300,
    # where this gives ~49 KB (sampling sorts and copies the logits; attention scores over the context)
    return kv + 64 * config.vocab_size + 64 * (config.dim + ffn) + 16 * config.n_heads * config.seq_len


def check_serve_limits(config, device: str, max_batch: int, max_queue: int, max_body_bytes: int, connections: int):
    """A UserError (one line naming the flag, the need and the machine's memory) when the flags
    cannot fit; otherwise None."""
    from gradcraft.training.resources import available_memory_bytes
    from gradcraft.training.runfiles import parameter_count

    if max_queue > MAX_QUEUE_HARD:
        raise UserError(f"--max_queue {max_queue} is more than the {MAX_QUEUE_HARD:,} waiting sequences allowed")
    if max_body_bytes > MAX_BODY_HARD:
        raise UserError(f"--max_body_bytes {max_body_bytes} is more than the {MAX_BODY_HARD:,} bytes allowed")
    have = available_memory_bytes(device)
    if have is None:
        return
    itemsize = 4 if device == "cpu" else 2
    weights = parameter_count(config) * itemsize
    per_slot = slot_bytes(config, itemsize)
    room = have - weights
    where = "this machine's RAM" if device == "cpu" else f"{device}'s memory"
    if max_batch * per_slot > room:
        raise UserError(
            f"--max_batch {max_batch} needs {_gib(max_batch * per_slot)} for its KV cache and decoding "
            f"buffers ({_gib(per_slot)} a sequence at context {config.seq_len}), more than {where} "
            f"({_gib(have)}) holds beside the weights; at most {max(0, room // per_slot):,} fit"
        )
    host = available_memory_bytes("cpu") or have
    queued = max_queue * config.seq_len * QUEUED_BYTES_PER_TOKEN
    if queued > host // 2:
        raise UserError(
            f"--max_queue {max_queue} of prompts up to {config.seq_len} tokens could hold {_gib(queued)}, "
            f"more than half this machine's RAM ({_gib(host)}); at most {host // 2 // (config.seq_len * 64):,}"
        )
    bodies = max_body_bytes * connections
    if bodies > host:
        raise UserError(
            f"--max_body_bytes {max_body_bytes} on each of --max_connections {connections} could hold "
            f"{_gib(bodies)} of request bodies, more than this machine's RAM ({_gib(host)}); "
            "lower one of them"
        )
