"""The penalties and filters of the server's decoding step, on the device: OpenAI's frequency and
presence penalties, HF's repetition penalty, logit_bias and min_p, applied to the step's logits as
tensor ops before F.sample_tokens draws the token (gradcraft/sampling.py's `penalize` is the same
arithmetic on one row on the host, and the definition).

Each slot of the scheduler has a row of state on the device: `counts` (how often each token was
generated), `seen` (the tokens of the prompt and the generated ones), `bias` (logit_bias), and a
column of the sequence's own numbers (frequency, presence, repetition, the min_p shift). The step
itself updates `counts` and `seen` with the token it is fed (`ids`): `add` says whether that token is a
generated one (counted), `mark` whether it is the row's at all (a free row marks nothing), so the
host never copies a (B, V) row per step: it writes a slot's rows once, when a sequence takes the slot.

A row with no penalty (frequency and presence 0, repetition 1, no bias, min_p off) comes out of these
ops with exactly its logits (x + 0, x / 1, x - 0 * count are exact), so an answer without penalties is
the same whether or not its neighbours in the batch have some.
"""

import numpy as np

import gradcraft as gc
from gradcraft.sampling import min_p_shift

# the per-row numbers, each a (slots, 1) float32 column
SCALARS = ("frequency", "presence", "repetition", "shift", "add", "mark")


class Penalties:
    """The per-slot state on the device, allocated on the first sequence that needs it."""

    def __init__(self, slots: int, vocab_size: int, device):
        self.slots, self.vocab_size, self.device = slots, vocab_size, device
        f32 = gc.float32
        self.counts = gc.zeros(slots, vocab_size, dtype=f32, device=device).realize()
        self.seen = gc.zeros(slots, vocab_size, dtype=f32, device=device).realize()
        self.bias = gc.zeros(slots, vocab_size, dtype=f32, device=device).realize()
        self.scalars = [gc.zeros(slots, 1, dtype=f32, device=device).realize() for _ in SCALARS]
        self.biased = set()  # slots whose bias row is not zero

    def tensors(self, rows: int) -> list:
        """Views of the first `rows` slots (writes go through): counts, seen, bias, then SCALARS."""
        return [t[:rows].realize() for t in (self.counts, self.seen, self.bias, *self.scalars)]

    def start(self, slot: int, seq, prompt_seen: bool) -> None:
        """Set slot's rows for seq as it starts decoding: no generated token yet; the prompt's tokens
        seen when they went through a prefill (prompt_seen), else none yet (the step marks them as it
        is fed them); its bias row."""
        params, V = seq.params, self.vocab_size
        seen = np.zeros((1, V), dtype=np.float32)
        if prompt_seen:
            seen[0, np.asarray(seq.prompt, dtype=np.int64)] = 1
        writes = [self.counts[slot : slot + 1].assign(gc.zeros(1, V, device=self.device))]
        writes.append(self.seen[slot : slot + 1].assign(gc.tensor(seen, device=self.device)))
        bias = params.bias_row(V)
        if bias is not None or slot in self.biased:
            row = np.zeros((1, V), dtype=np.float32) if bias is None else bias[None]
            writes.append(self.bias[slot : slot + 1].assign(gc.tensor(row, device=self.device)))
            (self.biased.add if bias is not None else self.biased.discard)(slot)
        gc.realize(*writes)

    def columns(self, running: dict) -> list:
        """The host's SCALARS columns for this step: each running sequence's numbers (slot -> Sequence)."""
        cols = {name: np.zeros((self.slots, 1), dtype=np.float32) for name in SCALARS}
        cols["repetition"][:] = 1
        cols["shift"][:] = -np.inf
        for slot, seq in running.items():
            p = seq.params
            cols["frequency"][slot], cols["presence"][slot] = p.frequency_penalty, p.presence_penalty
            cols["repetition"][slot], cols["shift"][slot] = p.repetition_penalty, min_p_shift(p.min_p, p.temperature)
            cols["add"][slot] = 1 if seq.prefilled >= len(seq.prompt) else 0  # fed a generated token
            cols["mark"][slot] = 1
        return [cols[name] for name in SCALARS]


def apply(logits, ids, counts, seen, bias, frequency, presence, repetition, shift, add, mark):
    """The step's logits (B, V) float32 after the penalties, and the writes of the updated counts and
    seen (realize them with the step). ids (B, 1) int64: the tokens fed to this step."""
    hit = (gc.arange(logits.shape[1], device=logits.device) == ids).float()
    new_counts = counts + hit * add
    new_seen = gc.maximum(seen, hit * mark)
    x = logits + bias
    x = gc.where(new_seen > 0, gc.where(x > 0, x / repetition, x * repetition), x)
    x = x - frequency * new_counts - presence * (new_counts > 0).float()
    x = x.masked_fill(x < x.amax(dim=1, keepdim=True) + shift, float("-inf"))
    return x, [counts.assign(new_counts), seen.assign(new_seen)]
