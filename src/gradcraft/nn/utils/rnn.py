"""torch.nn.utils.rnn: PackedSequence, pack_padded_sequence, pad_packed_sequence, pad_sequence,
pack_sequence, unpad_sequence, unpack_sequence; and how the recurrent layers run a PackedSequence.

A PackedSequence holds the time steps of a batch of sequences of different lengths one after the other:
step t holds the batch_sizes[t] sequences that are longer than t, longest first (sorted_indices gives
that order when the batch was not sorted already). Packing and padding are slices, concatenations and
index_selects, so gradients flow through them. The lengths live on the host, as in PyTorch.

An RNN/LSTM/GRU given a PackedSequence runs its sequences in groups of equal length (one ordinary
forward pass per distinct length, on the group's unpadded steps): each sequence's final state is the
state at its own last step, a reverse direction starts at its own last element, and the output is
packed as the input was, as in PyTorch.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from gradcraft.errors import RuntimeError_, ValueError_
from gradcraft.ops.creation import full, tensor
from gradcraft.ops.movement import cat, stack


class PackedSequence(namedtuple("PackedSequence", ["data", "batch_sizes", "sorted_indices", "unsorted_indices"])):
    """(data, batch_sizes, sorted_indices, unsorted_indices), as torch.nn.utils.rnn.PackedSequence."""

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None and sorted_indices is not None:
            unsorted_indices = _invert(sorted_indices)
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs) -> PackedSequence:
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        return type(self)(data, self.batch_sizes, self.sorted_indices, self.unsorted_indices)

    def cpu(self) -> PackedSequence:
        return self.to("cpu")

    def cuda(self, device: int = 0) -> PackedSequence:
        return self.to(f"cuda:{device}")

    def _as(self, name: str) -> PackedSequence:
        data = getattr(self.data, name)()
        if data is self.data:
            return self
        return type(self)(data, self.batch_sizes, self.sorted_indices, self.unsorted_indices)

    def float(self) -> PackedSequence:
        return self._as("float")

    def double(self) -> PackedSequence:
        return self._as("double")

    def half(self) -> PackedSequence:
        return self._as("half")

    def long(self) -> PackedSequence:
        return self._as("long")

    def int(self) -> PackedSequence:
        return self._as("int")

    def pin_memory(self) -> PackedSequence:
        return self

    @property
    def is_cuda(self) -> bool:
        return self.data.is_cuda

    def is_pinned(self) -> bool:
        return False


def _host(values) -> np.ndarray:
    if hasattr(values, "numpy"):
        return np.asarray(values.numpy(), dtype=np.int64).reshape(-1)
    return np.asarray(list(values), dtype=np.int64).reshape(-1)


def _invert(permutation):
    order = _host(permutation)
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    return tensor(inverse)


def pack_padded_sequence(input, lengths, batch_first: bool = False, enforce_sorted: bool = True) -> PackedSequence:
    lengths = _host(lengths)
    batch = input.shape[0 if batch_first else 1]
    if len(lengths) != batch:
        raise ValueError_(
            f"Expected `len(lengths)` to be equal to batch_size, but got {len(lengths)} (batch_size={batch})"
        )
    if (lengths <= 0).any():
        raise RuntimeError_(
            "Length of all samples has to be greater than 0, but found an element in 'lengths' that is <= 0"
        )
    sorted_indices = None
    if enforce_sorted:
        if (np.diff(lengths) > 0).any():
            raise RuntimeError_(
                "`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. You can pass "
                "`enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to sidestep this requirement "
                "if you do not need ONNX exportability."
            )
    else:
        order = np.argsort(-lengths, kind="stable")
        sorted_indices = tensor(order)
        lengths = lengths[order]
        input = input.index_select(0 if batch_first else 1, sorted_indices)
    if batch_first:
        input = input.transpose(0, 1)
    if lengths[0] > input.shape[0]:
        raise RuntimeError_(f"Expected sequence length to be at most {input.shape[0]}, but got {lengths[0]}")
    batch_sizes = np.array([(lengths > t).sum() for t in range(lengths[0])], dtype=np.int64)
    data = cat([input[t, : int(b)] for t, b in enumerate(batch_sizes)])
    return PackedSequence(data, tensor(batch_sizes), sorted_indices, None)


def pad_packed_sequence(sequence, batch_first: bool = False, padding_value: float = 0.0, total_length=None):
    """(padded (T, B, *) or (B, T, *), lengths int64) with the batch in its original order."""
    data, batch_sizes = sequence.data, _host(sequence.batch_sizes)
    steps, batch = len(batch_sizes), int(batch_sizes[0])
    if total_length is not None:
        if total_length < steps:
            raise ValueError_(
                "Expected total_length to be at least the length of the longest sequence in input, but got "
                f"total_length={total_length} and max sequence length being {steps}"
            )
        steps_out = total_length
    else:
        steps_out = steps
    feature = tuple(data.shape[1:])
    rows, offset = [], 0
    for b in batch_sizes:
        row = data[offset : offset + int(b)]
        if b < batch:
            row = cat([row, full((batch - int(b),) + feature, padding_value, dtype=data.dtype, device=data.device)])
        rows.append(row)
        offset += int(b)
    rows += [full((batch,) + feature, padding_value, dtype=data.dtype, device=data.device)] * (steps_out - steps)
    padded = stack(rows)
    lengths = np.array([(batch_sizes > i).sum() for i in range(batch)], dtype=np.int64)
    if sequence.unsorted_indices is not None:
        unsorted = sequence.unsorted_indices
        padded = padded.index_select(1, unsorted)
        lengths = lengths[_host(unsorted)]
    if batch_first:
        padded = padded.transpose(0, 1)
    return padded, tensor(lengths)


def pad_sequence(sequences, batch_first: bool = False, padding_value: float = 0.0, padding_side: str = "right"):
    """A list of (L_i, *) tensors as one (max L, B, *) tensor (or (B, max L, *)), padded."""
    if padding_side not in ("left", "right"):
        raise ValueError_(f"Expected padding_side to be one of left or right, but got {padding_side}.")
    sequences = list(sequences)
    longest = max(s.shape[0] for s in sequences)
    columns = []
    for s in sequences:
        missing = longest - s.shape[0]
        if missing:
            pad = full((missing,) + tuple(s.shape[1:]), padding_value, dtype=s.dtype, device=s.device)
            s = cat([s, pad] if padding_side == "right" else [pad, s])
        columns.append(s)
    return stack(columns, 0 if batch_first else 1)


def pack_sequence(sequences, enforce_sorted: bool = True) -> PackedSequence:
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpad_sequence(padded_sequences, lengths, batch_first: bool = False) -> list:
    if not batch_first:
        padded_sequences = padded_sequences.transpose(0, 1)
    return [padded_sequences[i, : int(n)] for i, n in enumerate(_host(lengths))]


def unpack_sequence(packed_sequences) -> list:
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)


def _repack(padded, like: PackedSequence):
    """padded (T, B, *) in the original batch order, packed as `like` is."""
    if like.sorted_indices is not None:
        padded = padded.index_select(1, like.sorted_indices)
    return PackedSequence(
        cat([padded[t, : int(b)] for t, b in enumerate(_host(like.batch_sizes))]),
        like.batch_sizes,
        like.sorted_indices,
        like.unsorted_indices,
    )


def run_packed(module, packed: PackedSequence, hx):
    """RNNBase.forward of a PackedSequence: (PackedSequence output, final states in the batch's order)."""
    padded, lengths = pad_packed_sequence(packed)
    lengths = _host(lengths)
    steps = padded.shape[0]
    lstm = module.mode == "LSTM"
    outputs, finals = [None] * len(lengths), [None] * len(lengths)
    for length in sorted(set(lengths.tolist()), reverse=True):
        members = [i for i, n in enumerate(lengths) if n == length]
        index = tensor(members)
        part = padded[:length].index_select(1, index)
        if module.batch_first:
            part = part.transpose(0, 1)
        if hx is None:
            part_hx = None
        elif lstm:
            part_hx = (hx[0].index_select(1, index), hx[1].index_select(1, index))
        else:
            part_hx = hx.index_select(1, index)
        out, state = module.forward(part, part_hx)
        if module.batch_first:
            out = out.transpose(0, 1)
        for j, i in enumerate(members):
            column = out[:, j]
            if length < steps:
                pad = full((steps - length,) + tuple(column.shape[1:]), 0.0, dtype=out.dtype, device=out.device)
                column = cat([column, pad])
            outputs[i] = column
            finals[i] = (state[0][:, j], state[1][:, j]) if lstm else state[:, j]
    output = _repack(stack(outputs, 1), packed)
    if lstm:
        return output, (stack([f[0] for f in finals], 1), stack([f[1] for f in finals], 1))
    return output, stack(finals, 1)
