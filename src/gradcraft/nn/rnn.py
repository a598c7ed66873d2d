"""Recurrent layers, as in torch.nn: RNN (tanh or relu), LSTM (with proj_size), GRU and their cells.

Parameter names (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, weight_hr_l0, "_reverse"
for the second direction), shapes, gate order (LSTM: i, f, g, o; GRU: r, z, n), initialisation
(uniform in +-1/sqrt(hidden_size)) and the (output, h_n) / (output, (h_n, c_n)) results are
PyTorch's. Each layer multiplies the whole sequence by its input weights at once, then steps through
time with one product by the hidden weights per step, composed from public ops."""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any

from gradcraft.errors import RuntimeError_, TypeError_, ValueError_
from gradcraft.nn import functional as F
from gradcraft.nn import init
from gradcraft.nn.module import Module, Parameter
from gradcraft.ops.creation import zeros
from gradcraft.ops.movement import cat, stack
from gradcraft.typing import DTypeLike, Device

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _cell_step(mode, x_part, h, c, w_hh, b_hh, w_hr):
    """One step: x_part is the input's projection (bias included) for this step. Returns (h, c)."""
    hidden = F.linear(h, w_hh, b_hh)
    if mode == "LSTM":
        i, f, g, o = (x_part + hidden).chunk(4, -1)
        c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        h = o.sigmoid() * c.tanh()
        return (F.linear(h, w_hr) if w_hr is not None else h), c
    if mode == "GRU":
        x_r, x_z, x_n = x_part.chunk(3, -1)
        h_r, h_z, h_n = hidden.chunk(3, -1)
        r, z = (x_r + h_r).sigmoid(), (x_z + h_z).sigmoid()
        n = (x_n + r * h_n).tanh()
        return (1 - z) * n + z * h, None
    pre = x_part + hidden
    return (pre.tanh() if mode == "RNN_TANH" else F.relu(pre)), None


class RNNBase(Module):
    def __init__(
        self,
        mode: str,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device: Device = None,
        dtype: DTypeLike = None,
    ) -> None:
        super().__init__()
        if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) or not 0 <= dropout <= 1:
            raise ValueError_(
                "dropout should be a number in range [0, 1] representing the probability of an element being zeroed"
            )
        if dropout > 0 and num_layers == 1:
            warnings.warn(
                "dropout option adds dropout after all but last recurrent layer, so non-zero dropout expects "
                f"num_layers greater than 1, but got dropout={dropout} and num_layers={num_layers}",
                stacklevel=2,
            )
        for name, value in (("bias", bias), ("batch_first", batch_first)):
            if not isinstance(value, bool):
                raise TypeError_(f"{name} should be of type bool, got: {type(value).__name__}")
        for name, value in (("input_size", input_size), ("hidden_size", hidden_size)):
            if not isinstance(value, int):
                raise TypeError_(f"{name} should be of type int, got: {type(value).__name__}")
            if value <= 0:
                raise ValueError_(f"{name} must be greater than zero")
        if num_layers <= 0:
            raise ValueError_("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError_("proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError_("proj_size has to be smaller than hidden_size")
        if mode not in _GATES:
            raise ValueError_("Unrecognized RNN mode: " + mode)
        self.mode, self.input_size, self.hidden_size, self.num_layers = mode, input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size = bidirectional, proj_size
        directions = 2 if bidirectional else 1
        gate_size = _GATES[mode] * hidden_size
        real_hidden = proj_size if proj_size > 0 else hidden_size
        self._flat_weights_names = []
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else real_hidden * directions
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction == 1 else "")
                shapes = [("weight_ih", (gate_size, layer_input)), ("weight_hh", (gate_size, real_hidden))]
                if bias:
                    shapes += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                if proj_size > 0:
                    shapes += [("weight_hr", (proj_size, hidden_size))]
                for name, shape in shapes:
                    setattr(self, name + suffix, Parameter(zeros(shape, device=device, dtype=dtype)))
                    self._flat_weights_names.append(name + suffix)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -bound, bound)

    @property
    def all_weights(self) -> list:
        return [getattr(self, name) for name in self._flat_weights_names]

    def flatten_parameters(self) -> None:
        """PyTorch compacts cuDNN's weights here; there is nothing to compact."""

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s

    def _weights(self, layer: int, direction: int) -> tuple:
        suffix = f"_l{layer}" + ("_reverse" if direction == 1 else "")
        get = lambda name: getattr(self, name + suffix, None)  # noqa: E731
        return get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh"), get("weight_hr")

    def _initial(self, hx, batch: int, size: int, x: Tensor, unbatched: bool, name: str) -> Tensor:
        directions = 2 if self.bidirectional else 1
        expected = (self.num_layers * directions, batch, size)
        if hx is None:
            return zeros(expected, dtype=x.dtype, device=x.device)
        if unbatched:
            if hx.ndim != 2:
                raise RuntimeError_(f"For unbatched 2-D input, {name} should also be 2-D but got {hx.ndim}-D tensor")
            hx = hx.unsqueeze(1)
        elif hx.ndim != 3:
            raise RuntimeError_(f"For batched 3-D input, {name} should also be 3-D but got {hx.ndim}-D tensor")
        if tuple(hx.shape) != expected:
            raise RuntimeError_(f"Expected hidden size {expected}, got {list(hx.shape)}")
        return hx

    def forward(self, input: Tensor, hx: Tensor | tuple | None = None) -> tuple:
        if hasattr(input, "batch_sizes"):  # a PackedSequence: run per length group (gradcraft/nn/utils/rnn.py)
            from gradcraft.nn.utils.rnn import run_packed

            return run_packed(self, input, hx)
        if input.ndim not in (2, 3):
            raise ValueError_(f"{type(self).__name__}: Expected input to be 2D or 3D, got {input.ndim}D tensor instead")
        unbatched = input.ndim == 2
        x = input.unsqueeze(1) if unbatched else (input.transpose(0, 1) if self.batch_first else input)
        if x.shape[-1] != self.input_size:
            raise RuntimeError_(
                f"input.size(-1) must be equal to input_size. Expected {self.input_size}, got {x.shape[-1]}"
            )
        if x.dtype != self.weight_ih_l0.dtype:
            raise ValueError_(
                f"RNN input dtype ({x.dtype}) does not match weight dtype ({self.weight_ih_l0.dtype}). "
                f"Convert input: input.to({self.weight_ih_l0.dtype}), or convert model: model.to({x.dtype})"
            )
        batch = x.shape[1]
        real_hidden = self.proj_size if self.proj_size > 0 else self.hidden_size
        lstm = self.mode == "LSTM"
        if lstm:
            h0, c0 = hx if hx is not None else (None, None)
            h0 = self._initial(h0, batch, real_hidden, x, unbatched, "hx")
            c0 = self._initial(c0, batch, self.hidden_size, x, unbatched, "cx")
        else:
            h0, c0 = self._initial(hx, batch, real_hidden, x, unbatched, "hx"), None
        directions = 2 if self.bidirectional else 1
        h_n, c_n = [], []
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                k = layer * directions + direction
                out, h, c = self._run(x, layer, direction, h0[k], c0[k] if lstm else None)
                outputs.append(out)
                h_n.append(h)
                c_n.append(c)
            x = outputs[0] if directions == 1 else cat(outputs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        output = x.squeeze(1) if unbatched else (x.transpose(0, 1) if self.batch_first else x)
        h_n = stack(h_n)
        hidden = h_n.squeeze(1) if unbatched else h_n
        if lstm:
            c_n = stack(c_n)
            hidden = (hidden, c_n.squeeze(1) if unbatched else c_n)
        return output, hidden

    def _run(self, x: Tensor, layer: int, direction: int, h: Tensor, c: Tensor | None):
        """One direction of one layer over the sequence x (T, N, features): (outputs, h_T, c_T)."""
        w_ih, w_hh, b_ih, b_hh, w_hr = self._weights(layer, direction)
        projected = F.linear(x, w_ih, b_ih)  # every step's input product at once
        steps = range(x.shape[0] - 1, -1, -1) if direction == 1 else range(x.shape[0])
        outputs = [None] * x.shape[0]
        for t in steps:
            h, c = _cell_step(self.mode, projected[t], h, c, w_hh, b_hh, w_hr)
            outputs[t] = h
        return stack(outputs), h, c


class RNN(RNNBase):
    """RNN(input_size, hidden_size, num_layers=1, nonlinearity='tanh', bias=True, batch_first=False,
    dropout=0.0, bidirectional=False, device=None, dtype=None), as PyTorch's positional order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if "proj_size" in kwargs:
            raise ValueError_("proj_size argument is only supported for LSTM, not RNN or GRU")
        if len(args) > 3:
            nonlinearity = args[3]
            args = args[:3] + args[4:]
        else:
            nonlinearity = kwargs.pop("nonlinearity", "tanh")
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError_(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", *args, **kwargs)
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """LSTM(input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
    bidirectional=False, proj_size=0, device=None, dtype=None)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__("LSTM", *args, **kwargs)


class GRU(RNNBase):
    """GRU(input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
    bidirectional=False, device=None, dtype=None)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if "proj_size" in kwargs:
            raise ValueError_("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)


class RNNCellBase(Module):
    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool,
        num_chunks: int,
        device: Device = None,
        dtype: DTypeLike = None,
    ) -> None:
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        self.weight_ih = Parameter(zeros(num_chunks * hidden_size, input_size, device=device, dtype=dtype))
        self.weight_hh = Parameter(zeros(num_chunks * hidden_size, hidden_size, device=device, dtype=dtype))
        if bias:
            self.bias_ih = Parameter(zeros(num_chunks * hidden_size, device=device, dtype=dtype))
            self.bias_hh = Parameter(zeros(num_chunks * hidden_size, device=device, dtype=dtype))
        else:
            self.bias_ih = self.bias_hh = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -bound, bound)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def _batched(self, input: Tensor, states: tuple) -> tuple:
        if input.ndim not in (1, 2):
            raise ValueError_(f"{type(self).__name__}: Expected input to be 1D or 2D, got {input.ndim}D instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError_(f"input has inconsistent input_size: got {input.shape[-1]} expected {self.input_size}")
        unbatched = input.ndim == 1
        x = input.unsqueeze(0) if unbatched else input
        out = []
        for state in states:
            if state is None:
                state = zeros(x.shape[0], self.hidden_size, dtype=x.dtype, device=x.device)
            elif unbatched:
                state = state.unsqueeze(0)
            out.append(state)
        return x, unbatched, out

    def _step(self, mode: str, input: Tensor, h, c=None):
        x, unbatched, states = self._batched(input, (h, c) if mode == "LSTM" else (h,))
        h, c = _cell_step(
            mode, F.linear(x, self.weight_ih, self.bias_ih), states[0], states[-1], self.weight_hh, self.bias_hh, None
        )
        if unbatched:
            h, c = h.squeeze(0), (c.squeeze(0) if c is not None else None)
        return (h, c) if mode == "LSTM" else h


class RNNCell(RNNCellBase):
    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        nonlinearity: str = "tanh",
        device: Device = None,
        dtype: DTypeLike = None,
    ) -> None:
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError_(f"Unknown nonlinearity: {nonlinearity}")
        self.nonlinearity = nonlinearity

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        return self._step("RNN_TANH" if self.nonlinearity == "tanh" else "RNN_RELU", input, hx)


class LSTMCell(RNNCellBase):
    def __init__(
        self, input_size: int, hidden_size: int, bias: bool = True, device: Device = None, dtype: DTypeLike = None
    ) -> None:
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input: Tensor, hx: tuple | None = None) -> tuple:
        h, c = hx if hx is not None else (None, None)
        return self._step("LSTM", input, h, c)


class GRUCell(RNNCellBase):
    def __init__(
        self, input_size: int, hidden_size: int, bias: bool = True, device: Device = None, dtype: DTypeLike = None
    ) -> None:
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        return self._step("GRU", input, hx)
