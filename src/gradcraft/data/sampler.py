"""Batches of (input, target) windows from a token array, with state that checkpoints can save.

    sampler = RandomWindows(tokens, seq_len=256, batch_size=8, seed=0)   # vocab_size=V: check every id < V
    x, y = sampler.next_batch()        # int64 arrays (8, 256); y is x shifted by one token
    state = sampler.state_dict()       # restore with load_state_dict(state) to continue exactly

RandomWindows draws windows that start anywhere in the corpus. SequentialEpochs
cuts the corpus into non-overlapping windows and visits each once per epoch,
in an order shuffled per epoch.
"""

import numpy as np

from gradcraft.errors import UserError


def _check_length(tokens, seq_len: int, what: str = "dataset") -> None:
    if len(tokens) < seq_len + 2:
        raise UserError(
            f"the {what} holds {len(tokens)} tokens; sequences of {seq_len} need at least "
            f"{seq_len + 2} (seq_len + 2): use more data or a smaller --seq_len"
        )


def _check_vocab(tokens, vocab_size, what: str = "the dataset") -> None:
    """With vocab_size (the model's), every id must be below it: one chunked pass over the tokens,
    a one-line UserError otherwise (instead of an IndexError in the embedding mid-training).
    read_token_file already checks against the file's own recorded vocabulary; this covers files
    that record none (vocabulary 0) and models with a smaller vocabulary."""
    if vocab_size is not None:
        from gradcraft.data.tokenfile import check_token_ids

        check_token_ids(tokens, int(vocab_size), what, "the model's vocabulary")


class RandomWindows:
    kind = "random"

    def __init__(self, tokens, seq_len: int, batch_size: int, seed: int = 0, vocab_size: int | None = None):
        _check_length(tokens, seq_len)
        _check_vocab(tokens, vocab_size)
        self.tokens, self.seq_len, self.batch_size = tokens, seq_len, batch_size
        self.rng = np.random.default_rng(seed)

    def next_batch(self):
        starts = self.rng.integers(0, len(self.tokens) - self.seq_len - 1, size=self.batch_size)
        return _gather(self.tokens, starts, self.seq_len)

    def state_dict(self) -> dict:
        return {"kind": self.kind, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]


class SequentialEpochs:
    kind = "sequential"

    def __init__(self, tokens, seq_len: int, batch_size: int, seed: int = 0, vocab_size: int | None = None):
        _check_length(tokens, seq_len)
        _check_vocab(tokens, vocab_size)
        self.tokens, self.seq_len, self.batch_size, self.seed = tokens, seq_len, batch_size, seed
        self.n_windows = (len(tokens) - 1) // seq_len
        self.epoch, self.position = 0, 0
        self._order = self._shuffled(0)

    def _shuffled(self, epoch: int):
        return np.random.default_rng([self.seed, epoch]).permutation(self.n_windows)

    def next_batch(self):
        starts = []
        while len(starts) < self.batch_size:
            if self.position == self.n_windows:
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._shuffled(self.epoch)
            starts.append(self._order[self.position] * self.seq_len)
            self.position += 1
        return _gather(self.tokens, np.array(starts), self.seq_len)

    def state_dict(self) -> dict:
        return {"kind": self.kind, "epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        epoch, position = int(state["epoch"]), int(state["position"])
        if not 0 <= position <= self.n_windows:
            # a position past the data set's windows would index the shuffled order out of range
            raise UserError(
                f"the sampler's position {position} is beyond this data set's {self.n_windows} windows "
                f"of {self.seq_len} tokens; expected 0..{self.n_windows}"
            )
        self.epoch, self.position = epoch, position
        self._order = self._shuffled(self.epoch)


SAMPLERS = {"random": RandomWindows, "sequential": SequentialEpochs}


def _gather(tokens, starts, seq_len):
    windows = np.stack([np.asarray(tokens[s : s + seq_len + 1], dtype=np.int64) for s in starts])
    return windows[:, :-1], windows[:, 1:]


def eval_batches(tokens, seq_len: int, batch_size: int, max_batches: int, vocab_size: int | None = None):
    """Fixed, evenly spaced windows of a held-out split (the same every evaluation)."""
    _check_length(tokens, seq_len, "validation split")
    _check_vocab(tokens, vocab_size, "the validation split")
    n = min(max_batches * batch_size, (len(tokens) - 1) // seq_len)
    starts = np.linspace(0, len(tokens) - seq_len - 1, num=max(n, 1)).astype(np.int64)
    for i in range(0, len(starts), batch_size):
        yield _gather(tokens, starts[i : i + batch_size], seq_len)
