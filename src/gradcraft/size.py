"""`gradcraft.Size`: a tensor's shape, a tuple that prints as PyTorch's `torch.Size([2, 3])`.

A tuple subclass that changes only printing, `numel()`, and `+` (a Size plus a tuple is a Size,
either way round). Indexing and slicing are the tuple's own, so the ops, which read shapes all the
time, pay nothing: a slice of a Size is a plain tuple (PyTorch's is a Size)."""


class Size(tuple):
    __slots__ = ()

    def __repr__(self) -> str:
        return f"torch.Size({list(self)})"

    __str__ = __repr__

    def numel(self) -> int:
        count = 1
        for n in self:
            count *= n
        return count

    def __add__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return Size(tuple.__add__(self, other))

    def __radd__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return Size(tuple.__add__(other, self))

    def __reduce__(self):
        return Size, (tuple(self),)
