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
import weakref

import numpy as np

from gradcraft import dtypes
from gradcraft.device import canonical, get_backend
from gradcraft.dtypes import DType, to_dtype
from gradcraft.engine import lazy
from gradcraft.engine.graph import Node
from gradcraft.engine.lazy import LazyBuffer, hold
from gradcraft.engine.realize import before_write, realize as realize_graph
from gradcraft.errors import RuntimeError_
from gradcraft.size import Size


def _shorthand_for_to(target, name: str):
    """The method `name` of Tensor (`x.float()`, `x.cpu()`, ...): `x.to(target)`, as in PyTorch."""

    def method(self: "Tensor") -> "Tensor":
        return self.to(target)

    method.__name__, method.__qualname__ = name, f"Tensor.{name}"
    method.__doc__ = f"self.to({f'gradcraft.{target.name}' if isinstance(target, DType) else repr(target)})"
    return method


class Tensor(LazyBuffer):
    # the engine's fields (shape, dtype, device, _buf, _node, _index, _storage, _requires_grad) are
    # declared by engine/lazy.py's LazyBuffer; autograd's here
    __slots__ = ("grad", "_graph_freed", "__weakref__")
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
        hold(self, get_backend(device).from_numpy(array))

    def _init(self, shape, dtype: DType, device: str, requires_grad: bool) -> None:  # (_lazy: the same fields)
        self.shape = shape if shape.__class__ is Size else Size(shape)
        self.dtype = dtype
        self.device = device
        self._requires_grad = False
        self.grad = None
        self._buf = None
        self._node = None
        self._index = 0
        # the version and lazy readers of the memory (shared by every alias of it: engine/lazy.py)
        self._storage = None
        self._graph_freed = False  # a backward pass freed the graph behind it (autograd/engine.py)
        self.requires_grad = requires_grad

    @classmethod
    def _lazy(cls, node, index, shape, dtype, device, requires_grad) -> "Tensor":
        # The output of a new node (ops/function.py's apply, which only asks for grad on a floating
        # dtype): _init's fields set directly, since every op pays for this.
        t = cls.__new__(cls)
        t.shape, t.dtype, t.device = shape if shape.__class__ is Size else Size(shape), dtype, device
        t._requires_grad, t.grad, t._buf, t._node, t._index = bool(requires_grad), None, None, node, index
        t._storage, t._graph_freed = None, False
        return t

    @classmethod
    def _from_buffer(cls, buf, dtype: DType, device: str, requires_grad: bool = False) -> "Tensor":
        t = cls.__new__(cls)
        t._init(tuple(buf.shape), dtype, device, requires_grad)
        hold(t, buf)  # (an alias of memory a tensor holds shares its version and readers)
        return t

    @property
    def _version(self) -> int:
        """How many times this tensor's memory was written in place (PyTorch's `_version`)."""
        storage = self._storage
        return 0 if storage is None else storage.version

    @_version.setter
    def _version(self, value: int) -> None:
        lazy.storage(self).version = value

    @property
    def _readers(self):
        """Weak references to the lazy nodes built from this tensor's memory (any alias of it)."""
        storage = self._storage
        return None if storage is None else storage.readers

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
        if self._storage is not None:  # lazy ops built from the old contents refuse to run
            lazy.detach_readers(self, self._storage)
            self._storage = None
        self.shape, self.dtype, self.device = value.shape, value.dtype, value.device
        self._node, self._index = None, 0
        hold(self, value._buf)  # the same memory: its version and readers too

    @property
    def is_realized(self) -> bool:
        return self._buf is not None

    # ------------------------------------------------------------ evaluation

    def realize(self) -> "Tensor":
        """Compute this tensor now (a no-op when it already holds a buffer)."""
        realize_graph([self])
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
        if grad and self._node is not None:  # a non-leaf shows its node, as PyTorch's repr does
            grad = f", grad_fn=<{self.grad_fn.name()}>"
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

    def detach(self) -> "Tensor":
        """The same values, cut from the gradient graph (shares the buffer once realized)."""
        if self._buf is not None:
            return Tensor._from_buffer(self._buf, self.dtype, self.device)
        # a lazy view of self that requires no grad (ops/function.py's apply of a "reshape")
        node = Node("reshape", (self,), {"shape": self.shape}, self.device)
        out = Tensor._lazy(node, 0, self.shape, self.dtype, self.device, False)
        node.view_out = weakref.ref(out)
        return out

    def zero_grad(self) -> None:
        self.grad = None

    # ------------------------------------------------------------ conversion
    # (.to, .type, .type_as, .assign and new_* are ops: gradcraft/ops/conversion.py)

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

    def view_as(self, other) -> "Tensor":
        return self.reshape(other.shape)

    def reshape_as(self, other) -> "Tensor":
        return self.reshape(other.shape)


# ---------------------------------------------------------------- for the layers built on Tensor
# The functions through which ops/, autograd/ and the graph capture reach what a Tensor holds (no
# module but this one reads its private fields: tests/test_layering.py).

lazy_output = Tensor._lazy  # (node, index, shape, dtype, device, requires_grad): an op's output
from_buffer = Tensor._from_buffer  # (buf, dtype, device): a constant holding a device array


def init_alias(t: Tensor, source: Tensor) -> None:
    """Make t, a new tensor not yet initialized (a Parameter's __init__), an alias of source's
    memory (computed first): its shape, dtype, device, buffer and version counter."""
    t._init(source.shape, source.dtype, source.device, False)
    t.data = source


def node_of(t: Tensor):
    """The graph node that computes t (None for a leaf, a constant, or once computed and no backward
    pass needs the recipe)."""
    return t._node


def take_contents(x: Tensor, value: Tensor) -> Tensor:
    """x becomes `value` (its node, or its buffer once computed) at a new version of its own, for a
    recorded in-place write (ops/inplace.py). Returns a new tensor holding what x held: its node or
    buffer, whether it required grad, and its memory's version and readers."""
    old = Tensor.__new__(Tensor)
    old._init(x.shape, x.dtype, x.device, False)
    old._requires_grad, old._buf, old._node, old._index = x._requires_grad, x._buf, x._node, x._index
    old._storage = x._storage
    previous = x._version
    x._storage = None
    x._node, x._index = (None, 0) if value._node is None else (value._node, value._index)
    if value._buf is not None:  # a computed value: x is an alias of its memory
        x._buf = None
        hold(x, value._buf)
    else:
        x._buf = None
        x._storage = lazy.Storage(previous + 1)
    x._requires_grad = value.requires_grad
    return old


def output_index(t: Tensor) -> int:
    """Which output of its node t is."""
    return t._index


def version(t: Tensor) -> int:
    """How many times t's memory was written in place (PyTorch's `t._version`)."""
    return t._version


def bump_version(t: Tensor) -> None:
    """After a backend routine wrote into t's memory itself: its version (shared by every alias of
    the memory) moves on, so lazy ops built on the old contents refuse to run."""
    lazy.mark_written(t)


def same_memory(a: Tensor, b: Tensor) -> bool:
    """Whether a and b are aliases of one block of memory (one version counter)."""
    return a._storage is not None and a._storage is b._storage


def graph_freed(t: Tensor) -> bool:
    """Whether a backward pass freed the graph behind t (PyTorch's retain_graph error)."""
    return t._graph_freed


def free_graph(t: Tensor) -> None:
    """After backward: t, computed, becomes a constant (its recipe and the graph behind it go)."""
    t._node = None
    t._requires_grad = False
    t._graph_freed = True


def buffer_of(t: Tensor):
    """t's device array, computing t first (for code that hands tensors to a backend's own
    routines: graph capture, collectives, fused optimizer kernels)."""
    t.realize()
    return t._buf


def write_from_host(t: Tensor, values) -> None:
    """Copy `values` (a host array of t's shape and dtype) into t's memory now. Lazy tensors built
    from the old contents of that memory keep them; its version moves on."""
    t.realize()
    before_write(t)
    get_backend(t.device).write(t._buf, values)
    t._storage.version += 1
