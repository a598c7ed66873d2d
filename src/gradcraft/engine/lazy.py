"""The memory behind lazy values: one `Storage` per block of memory, shared by every alias of it.

Tensors that share memory (`x.detach()`, `x.data`, a realized view `x[0]` or `x.reshape(...)`, a
parameter and the tensor it was made from) share one version counter and one list of lazy readers,
as PyTorch's views share their storage's version counter. An in-place write to any of them (an
optimizer step, `w.sub_(...)` under no_grad, a collective) therefore moves the version every alias
sees, and the lazy ops built from any alias before the write get a copy of the old contents
(ops/inplace.py) or refuse to run, instead of reading the new data.

Which memory a buffer is: the array its `.base` chain ends at (NumPy and CuPy views keep their base).
Every buffer a tensor holds is registered here by that root (`hold`), so a new alias of it, however
it was made (a view kernel, a buffer handed to `Tensor._from_buffer`), finds the same Storage.

A value that is still lazy gets its Storage on first need (a reader, or a recorded in-place write);
when it is computed, `hold` merges it with the Storage of the memory it lands in.
"""

import weakref


class Storage:
    """version: how many times the memory was written in place; readers: weak references to the
    graph nodes built from a tensor on it (None until the first); root: the array that owns the
    memory (kept, so its id names it), None while the value is lazy."""

    __slots__ = ("version", "readers", "root", "swept_to", "__weakref__")

    def __init__(self, version: int = 0):
        self.version = version
        self.readers = None
        self.root = None
        self.swept_to = 32


class LazyBuffer:
    """The engine's value: what a graph node reads and computes. gradcraft.tensor.Tensor is one (it
    adds the gradient and what autograd keeps), so the engine's nodes hold their inputs as these and
    the engine reads no other field of them.

    shape, dtype, device: what the value is; _buf: its device array once computed (None while
    lazy); _node, _index: the node whose output `_index` computes it (None for a constant, and once
    computed unless a backward pass may still need the recipe); _storage: the Storage of its memory
    (version and lazy readers, shared by its aliases; None until first needed); _requires_grad:
    whether a backward pass may read it, so that a realize keeps its buffer and its recipe."""

    __slots__ = ("shape", "dtype", "device", "_buf", "_node", "_index", "_storage", "_requires_grad")


# id(root) -> weak reference to the Storage of that memory (live while some tensor holds it)
_by_root: dict = {}
_sweep_at = [1024]  # the size of _by_root at which its dead entries are dropped


def root_of(buf):
    """The object that owns buf's memory (buf itself when it is no view)."""
    base = buf.base
    while base is not None:
        buf = base
        base = getattr(buf, "base", None)
    return buf


def storage_of(buf):
    """The Storage registered for buf's memory, or None when no tensor holds it."""
    root = root_of(buf)
    ref = _by_root.get(id(root))
    storage = ref() if ref is not None else None
    return storage if storage is not None and storage.root is root else None


def hold(t, buf) -> None:
    """t (a tensor) takes buf as its memory: it joins the Storage of that memory, registering it if
    no tensor holds it yet. Lazy readers of t keep their recorded version (translated to the
    Storage t joins), so a reader that was stale stays stale."""
    t._buf = buf
    root = buf
    base = buf.base
    while base is not None:
        root = base
        base = getattr(root, "base", None)
    key = id(root)
    ref = _by_root.get(key)
    storage = ref() if ref is not None else None
    current = t._storage
    if storage is not None and storage.root is root:
        if current is not storage:
            if current is not None:
                _move_readers(t, current, storage)
            t._storage = storage
        return
    if current is None:
        current = t._storage = Storage()
    elif current.root is not None:  # t leaves other memory (which other tensors may still hold)
        storage = Storage(current.version)
        _move_readers(t, current, storage)
        current = t._storage = storage
    current.root = root
    _by_root[key] = weakref.ref(current)
    if len(_by_root) >= _sweep_at[0]:
        _sweep()


def _sweep() -> None:
    """Drop the entries of memory no tensor holds any more; the next sweep when the table has doubled."""
    for key in [k for k, ref in _by_root.items() if ref() is None]:
        del _by_root[key]
    _sweep_at[0] = max(1024, 2 * len(_by_root))


def _move_readers(t, source: Storage, target: Storage, stale: bool = False) -> None:
    """The lazy nodes reading t, registered on `source`, now read it on `target`: their recorded
    versions are translated (current -> current, older -> stale). stale: every one becomes stale
    (t's memory was replaced under them)."""
    for ref in source.readers or ():
        node = ref()
        if node is None or not any(inp is t for inp in node.inputs):
            continue
        node.input_versions = tuple(
            (-1 if stale or v != source.version else target.version) if inp is t else v
            for inp, v in zip(node.inputs, node.input_versions)
        )
        if target.readers is None:
            target.readers = []
        target.readers.append(ref)


def detach_readers(t, storage: Storage) -> None:
    """t's memory is being replaced (not written): lazy nodes reading t that were built before can
    no longer get its old data, so they refuse to run (`.data = other`)."""
    _move_readers(t, storage, Storage(), stale=True)


def current_reads(node, t) -> list:
    """The positions of node's inputs that are on t's memory (t or an alias of it) and were read at
    its current version: what an in-place write to that memory would change under the node."""
    storage = t._storage
    return [
        i
        for i, (inp, v) in enumerate(zip(node.inputs, node.input_versions))
        if inp._storage is storage and v == storage.version
    ]


def version_of(t) -> int:
    storage = t._storage
    return 0 if storage is None else storage.version


def storage(t) -> Storage:
    """t's Storage, made now if t has none yet (a lazy value)."""
    s = t._storage
    if s is None:
        s = t._storage = Storage()
    return s


def register_reader(node, inputs) -> None:
    """Remember (weakly) that `node` reads each input, on the input's Storage (shared by every alias
    of its memory), so that an in-place write to any alias can keep the node reading the data it was
    built on (gradcraft/ops/inplace.py). A new Node registers itself (engine/graph.py); this is for
    a node re-pointed at another input."""
    ref = weakref.ref(node)
    for t in inputs:
        storage = t._storage
        if storage is None:
            storage = t._storage = Storage()
        if storage.readers is None:
            storage.readers = [ref]
            continue
        storage.readers.append(ref)
        if not len(storage.readers) & 63:
            sweep_readers(storage)


def sweep_readers(storage: Storage) -> None:
    """Called every 64 additions: if the list has grown to twice its size after the last sweep, the
    dead references are dropped (amortized constant time)."""
    readers = storage.readers
    if len(readers) >= 2 * storage.swept_to:
        readers[:] = [r for r in readers if r() is not None]
        storage.swept_to = len(readers)


def live_readers(t) -> list:
    """The nodes built from `t` itself that still exist (each once, though a node reading t twice, as
    mul(t, t), registered twice). Nodes reading other aliases of t's memory: `storage_readers`."""
    nodes = [r() for r in readers_of(t)]
    return list(dict.fromkeys(n for n in nodes if n is not None and any(inp is t for inp in n.inputs)))


def storage_readers(t) -> list:
    """The nodes built from any tensor on t's memory (t and its aliases) that still exist."""
    nodes = [r() for r in readers_of(t)]
    return list(dict.fromkeys(n for n in nodes if n is not None))


def readers_of(t) -> list:
    """The weak references to the nodes registered as readers of t's memory (dead ones included)."""
    storage = t._storage
    return () if storage is None or storage.readers is None else storage.readers


def mark_written(t) -> None:
    """t's memory was just written in place: its version (every alias's) moves on."""
    storage(t).version += 1
