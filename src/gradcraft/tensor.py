"""The user-facing Tensor: a lazy handle with autograd.

A Tensor knows its shape, dtype and device, whether it requires grad, and
either holds a realized buffer (`_buf`, a device array) or points at the lazy
node that will compute it (`_node`, output `_index`). Building ops allocates
nothing; `.realize()` (and `.numpy()`, `.item()`, `repr`) runs the graph.

Method names and argument names follow PyTorch. The difference: nothing is
computed until realized. In-place ops (`x += 1`, `x.add_()`, `x[i] = v`) have
PyTorch's semantics (gradcraft/ops/inplace.py); `assign` is the lazy write the
optimizers use, which keeps a training step a single graph.
"""

import builtins
import math

import numpy as np

from gradcraft import dtypes
from gradcraft.device import canonical, get_backend
from gradcraft.dtypes import DType, to_dtype
from gradcraft.errors import RuntimeError_, UserError
from gradcraft.size import Size


def _shorthand_for_to(target, name: str):
    """The method `name` of Tensor (`x.float()`, `x.cpu()`, ...): `x.to(target)`, as in PyTorch."""

    def method(self: "Tensor") -> "Tensor":
        return self.to(target)

    method.__name__, method.__qualname__ = name, f"Tensor.{name}"
    method.__doc__ = f"self.to({f'gradcraft.{target.name}' if isinstance(target, DType) else repr(target)})"
    return method


class Tensor:
    __slots__ = (
        "shape",
        "dtype",
        "device",
        "_requires_grad",
        "grad",
        "_buf",
        "_node",
        "_index",
        "_version",
        "_readers",
        "_graph_freed",
        "__weakref__",
    )
    shape: Size  # a tuple that prints as torch.Size([...])
    dtype: DType
    device: str  # canonical: "cpu" or "cuda:N"
    grad: "Tensor | None"

    def __init__(self, data, dtype=None, device=None, requires_grad: bool = False):
        device = canonical(device if device is not None else getattr(data, "device", None))
        if isinstance(data, Tensor):
            array = data.numpy()
        else:
            array = np.asarray(data)
            if dtype is None and array.dtype == np.float64 and not isinstance(data, np.ndarray):
                array = array.astype(dtypes.default_float.np)  # Python floats: the default dtype, as in PyTorch
        target = to_dtype(dtype) if dtype is not None else to_dtype(array.dtype)
        if array.dtype != target.np:
            array = array.astype(target.np)
        self._init(tuple(array.shape), target, device, requires_grad)
        self._buf = get_backend(device).from_numpy(array)

    def _init(self, shape, dtype: DType, device: str, requires_grad: bool) -> None:  # (_lazy: the same fields)
        self.shape = shape if shape.__class__ is Size else Size(shape)
        self.dtype = dtype
        self.device = device
        self._requires_grad = False
        self.grad = None
        self._buf = None
        self._node = None
        self._index = 0
        self._version = 0
        self._readers = None  # weak references to the nodes that read this tensor (ops/function.py)
        self._graph_freed = False  # a backward pass freed the graph behind it (autograd/engine.py)
        self.requires_grad = requires_grad

    @classmethod
    def _lazy(cls, node, index, shape, dtype, device, requires_grad) -> "Tensor":
        # The output of a new node (ops/function.py's apply, which only asks for grad on a floating
        # dtype): _init's fields set directly, since every op pays for this.
        t = cls.__new__(cls)
        t.shape, t.dtype, t.device = shape if shape.__class__ is Size else Size(shape), dtype, device
        t._requires_grad, t.grad, t._buf, t._node, t._index = bool(requires_grad), None, None, node, index
        t._version, t._readers, t._graph_freed = 0, None, False
        return t

    @classmethod
    def _from_buffer(cls, buf, dtype: DType, device: str, requires_grad: bool = False) -> "Tensor":
        t = cls.__new__(cls)
        t._init(tuple(buf.shape), dtype, device, requires_grad)
        t._buf = buf
        return t

    # ------------------------------------------------------------ properties

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if value and not self.dtype.is_floating_point:
            raise RuntimeError_(
                f"only floating-point tensors can require gradients, got {self.dtype.name}; convert with .float() first"
            )
        if value and not self._requires_grad and self._node is not None:
            # A tensor that did not require grad is a leaf (as in PyTorch): compute it and drop its
            # recipe, so that gradients stop here.
            self.realize()
            self._node = None
        self._requires_grad = bool(value)

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        self.requires_grad = requires_grad
        return self

    @property
    def is_leaf(self) -> bool:
        """As in PyTorch: made by the user, or not part of a gradient graph."""
        return self._node is None or not self.requires_grad

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return len(self.shape)

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def numel(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        """Rows along the first dimension (`for row in t`, `a, b = t`, `list(t)`), as in PyTorch."""
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def is_contiguous(self) -> bool:
        """Whether the data lies in row-major order without gaps (computes a lazy tensor first)."""
        self.realize()
        return bool(self._buf.flags.c_contiguous)

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    def element_size(self) -> int:
        return self.dtype.itemsize

    def nelement(self) -> int:
        return self.numel()

    @property
    def data(self) -> "Tensor":
        """The same memory, cut from the gradient graph (in-place writes to it change this tensor)."""
        self.realize()
        return Tensor._from_buffer(self._buf, self.dtype, self.device)

    @data.setter
    def data(self, value: "Tensor") -> None:
        value = value.realize()
        self._buf, self.shape, self.dtype, self.device = value._buf, value.shape, value.dtype, value.device
        self._node, self._index = None, 0
        self._version += 1

    @property
    def is_realized(self) -> bool:
        return self._buf is not None

    # ------------------------------------------------------------ evaluation

    def realize(self) -> "Tensor":
        """Compute this tensor now (a no-op when it already holds a buffer)."""
        from gradcraft.engine.realize import realize

        realize([self])
        return self

    def numpy(self, *, force: bool = False) -> np.ndarray:
        """The data as a NumPy array (realizes first; a copy for devices other than the CPU).
        force: accepted as in PyTorch; gradcraft's conversion never refuses (grad or device)."""
        self.realize()
        return np.asarray(get_backend(self.device).to_numpy(self._buf))

    def tolist(self):
        return self.numpy().tolist()

    def item(self):
        if self.numel() != 1:
            raise RuntimeError_(f"item() needs a tensor with one element, got shape {self.shape}")
        return self.numpy().reshape(()).item()

    def __repr__(self) -> str:
        grad = ", requires_grad=True" if self.requires_grad else ""
        device = "" if self.device == "cpu" else f", device='{self.device}'"
        from gradcraft.printoptions import options  # (torch.set_printoptions)

        with np.printoptions(**options):
            body = np.array2string(
                self.numpy().astype(np.float32) if self.dtype in (dtypes.bfloat16, dtypes.float16) else self.numpy(),
                separator=", ",
                prefix="tensor(",
            )
        return f"tensor({body}, dtype={self.dtype.name}{device}{grad})"

    def __format__(self, format_spec: str) -> str:
        """`f"{loss:.4f}"`: a 0-d tensor formats as its number, as in PyTorch; any other tensor takes
        only the empty spec (its str)."""
        if self.ndim == 0:
            return self.item().__format__(format_spec)
        return object.__format__(self, format_spec)

    def __bool__(self) -> bool:
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self.dtype.kind not in "iu":
            raise TypeError("only integer tensors can be used as an index")
        return int(self.item())

    def __hash__(self) -> int:
        return id(self)

    def __array__(self, dtype=None, copy=None):
        array = self.numpy()
        return array.astype(dtype) if dtype is not None else array

    # ------------------------------------------------------------ autograd

    def backward(
        self,
        gradient=None,
        retain_graph=None,
        create_graph: bool = False,
        inputs=None,
        realize: bool = True,
        on_grad_ready=None,
    ) -> None:
        """Accumulate d(self)/d(leaf) into `.grad` of every leaf that requires grad.

        With realize=False the gradients stay lazy, so the caller can fold them
        (and the optimizer update) into one schedule. retain_graph=True keeps the
        graph for another backward, as in PyTorch. on_grad_ready(leaf, buffer) is called as
        each leaf's gradient is issued, during the backward (data parallelism's buckets).
        """
        from gradcraft.autograd.engine import backward

        if create_graph or inputs is not None:
            raise UserError(
                "backward(create_graph=..., inputs=...) is not supported; gradients of gradients are not implemented"
            )
        backward(self, gradient, realize, retain_graph=bool(retain_graph), on_grad_ready=on_grad_ready)

    def detach(self) -> "Tensor":
        """The same values, cut from the gradient graph (shares the buffer once realized)."""
        if self._buf is not None:
            return Tensor._from_buffer(self._buf, self.dtype, self.device)
        from gradcraft.ops.function import apply, no_grad

        with no_grad():
            return apply("reshape", (self,), {"shape": self.shape}, self.shape, self.dtype)

    def zero_grad(self) -> None:
        self.grad = None

    def assign(self, value) -> "Tensor":
        """Overwrite this realized tensor's buffer with `value` (lazily; used by optimizers)."""
        from gradcraft.ops.movement import assign

        return assign(self, value)

    # ------------------------------------------------------------ conversion

    def to(self, *args, dtype=None, device=None) -> "Tensor":
        """`.to(device)`, `.to(dtype)` or both, as in PyTorch."""
        for arg in args:
            if isinstance(arg, str) and arg.split(":")[0] in ("cpu", "cuda"):
                device = arg
            else:
                dtype = arg
        out = self
        if device is not None and canonical(device) != self.device:
            from gradcraft.ops.movement import to_device

            out = to_device(out, canonical(device))
        if dtype is not None and to_dtype(dtype) != out.dtype:
            from gradcraft.ops.elementwise import cast

            out = cast(out, to_dtype(dtype))
        return out

    def type(self, dtype) -> "Tensor":
        return self.to(dtype)

    # PyTorch's shorthands for .to(dtype) and .to("cpu")
    float = _shorthand_for_to(dtypes.float32, "float")
    double = _shorthand_for_to(dtypes.float64, "double")
    half = _shorthand_for_to(dtypes.float16, "half")
    bfloat16 = _shorthand_for_to(dtypes.bfloat16, "bfloat16")
    long = _shorthand_for_to(dtypes.int64, "long")
    int = _shorthand_for_to(dtypes.int32, "int")
    bool = _shorthand_for_to(dtypes.bool_, "bool")
    cpu = _shorthand_for_to("cpu", "cpu")

    def cuda(self, index: builtins.int = 0) -> "Tensor":  # (`int` is a method by now)
        return self.to(f"cuda:{index}")

    def is_floating_point(self) -> builtins.bool:
        return self.dtype.is_floating_point

    def type_as(self, other) -> "Tensor":
        return self.to(other.dtype)

    def view_as(self, other) -> "Tensor":
        return self.reshape(other.shape)

    def reshape_as(self, other) -> "Tensor":
        return self.reshape(other.shape)

    # ------------------------------------------------------------ new tensors like this one

    def _new_full(self, size, fill_value, dtype, device, requires_grad) -> "Tensor":
        from gradcraft.ops.creation import full

        size = size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
        return full(
            tuple(size),
            fill_value,
            dtype=dtype or self.dtype,
            device=device or self.device,
            requires_grad=requires_grad,
        )

    def new_zeros(self, *size, dtype=None, device=None, requires_grad=False) -> "Tensor":
        return self._new_full(size, 0, dtype, device, requires_grad)

    def new_ones(self, *size, dtype=None, device=None, requires_grad=False) -> "Tensor":
        return self._new_full(size, 1, dtype, device, requires_grad)

    def new_empty(self, *size, dtype=None, device=None, requires_grad=False) -> "Tensor":
        return self._new_full(size, 0, dtype, device, requires_grad)

    def new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False) -> "Tensor":
        return self._new_full((size,), fill_value, dtype, device, requires_grad)

    def new_tensor(self, data, *, dtype=None, device=None, requires_grad=False) -> "Tensor":
        return Tensor(data, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad)


def _attach_methods() -> None:
    """Give Tensor its op methods, each a thin call into gradcraft.ops (the table: ops/methods.py)."""
    from gradcraft.ops.methods import attach

    attach(Tensor)


# A captured step makes its own input tensors; the engine, below this layer, gets the class from here.
from gradcraft.engine import capture as _capture  # noqa: E402

_capture.TENSOR_TYPE.append(Tensor)
