"""Products and norms composed from matmul, movement and reductions: einsum, bmm, dot, outer, norm.

einsum contracts its operands two at a time, each pair as one batched matmul: the letters of a pair
split into batch (in both, still needed), contracted (in both, not needed after), and the letters of
one side only; each operand is permuted to (batch, kept, contracted) and reshaped to 3-d. No kernel of
its own, so every backend runs it and its gradient is the matmul's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from gradcraft.typing import DTypeLike, Dims

if TYPE_CHECKING:
    from gradcraft.tensor import Tensor

import builtins
import math

from gradcraft.errors import UserError
from gradcraft.ops import elementwise as ew
from gradcraft.ops import movement as mv
from gradcraft.ops import reduce as rd
from gradcraft.ops.matmul import matmul
from gradcraft.amp import policy as _amp


def bmm(input: Tensor, mat2: Tensor) -> Tensor:
    if _amp.state.on:
        return _amp.call("bmm", bmm, (input, mat2), {})
    if input.ndim != 3 or mat2.ndim != 3:
        raise UserError(f"bmm needs two 3-d tensors, got shapes {input.shape} and {mat2.shape}; use matmul for others")
    if input.shape[0] != mat2.shape[0] or input.shape[2] != mat2.shape[1]:
        raise UserError(f"bmm: shapes {input.shape} and {mat2.shape} do not multiply ((b, n, m) @ (b, m, p))")
    return matmul(input, mat2)


def mm(input: Tensor, mat2: Tensor) -> Tensor:
    if _amp.state.on:
        return _amp.call("mm", mm, (input, mat2), {})
    if input.ndim != 2 or mat2.ndim != 2:
        raise UserError(f"mm needs two 2-d tensors, got shapes {input.shape} and {mat2.shape}")
    return matmul(input, mat2)


def dot(input: Tensor, tensor: Tensor) -> Tensor:
    if _amp.state.on:
        return _amp.call("dot", dot, (input, tensor), {})
    if input.ndim != 1 or tensor.ndim != 1:
        raise UserError(f"dot needs two 1-d tensors, got shapes {input.shape} and {tensor.shape}")
    return matmul(input, tensor)


def outer(input: Tensor, vec2: Tensor) -> Tensor:
    return ew.mul(input.reshape(-1, 1), vec2.reshape(1, -1))


def norm(
    input: Tensor, p: float | str = "fro", dim: Dims = None, keepdim: bool = False, dtype: DTypeLike = None
) -> Tensor:
    """The vector p-norm over `dim` (all elements by default), as torch.norm / Tensor.norm."""
    if _amp.state.on:
        return _amp.call("norm", norm, (input, p, dim, keepdim), {"dtype": dtype})
    if dtype is not None:
        input = ew.cast(input, dtype)
    if not input.dtype.is_floating_point:
        raise UserError(f"norm needs a floating-point tensor, got {input.dtype.name}; convert with .float()")
    if p in ("fro", 2, 2.0, None):
        return ew.sqrt(rd.sum(ew.mul(input, input), dim, keepdim))
    if p in (float("inf"), "inf"):
        return rd.amax(ew.abs(input), dim, keepdim)
    if p == float("-inf"):
        return rd.amin(ew.abs(input), dim, keepdim)
    if p == 1:
        return rd.sum(ew.abs(input), dim, keepdim)
    if p == 0:
        return rd.sum(ew.cast(ew.ne(input, 0), input.dtype), dim, keepdim)
    if isinstance(p, str):
        raise UserError(f"norm: p={p!r} is not supported; use a number, 'fro' or inf")
    return ew.pow(rd.sum(ew.pow(ew.abs(input), float(p)), dim, keepdim), 1.0 / p)


def vector_norm(x, ord=2, dim=None, keepdim: bool = False, dtype=None):
    return norm(x, ord, dim, keepdim, dtype)


# ------------------------------------------------------------------ einsum


def _parse(equation: str, operands):
    equation = equation.replace(" ", "")
    inputs, arrow, output = equation.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(operands):
        raise UserError(f"einsum: the equation {equation!r} names {len(terms)} operands, {len(operands)} were given")
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in equation]
    ellipsis_dims = builtins.max(
        [t.ndim - len(term.replace("...", "")) for term, t in zip(terms, operands) if "..." in term] or [0]
    )
    fill = "".join(spare[:ellipsis_dims])
    expanded = []
    for term, t in zip(terms, operands):
        if "..." in term:
            n = t.ndim - len(term.replace("...", ""))
            term = term.replace("...", fill[ellipsis_dims - n :])
        if not term.isalpha() or len(term) != t.ndim:
            raise UserError(f"einsum: {term!r} does not describe an operand of shape {t.shape}")
        if len(set(term)) != len(term):
            raise UserError(f"einsum: a letter repeated within one operand ({term!r}, a diagonal) is not supported")
        expanded.append(term)
    if arrow:
        output = output.replace("...", fill)
    else:  # implicit output: the letters seen once, in alphabetical order (broadcast dims first)
        counts = {}
        for term in expanded:
            for c in term:
                counts[c] = counts.get(c, 0) + 1
        output = fill + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in fill))
    for c in output:
        if not builtins.any(c in term for term in expanded):
            raise UserError(f"einsum: output letter {c!r} appears in no operand")
    return expanded, output


def _sizes(terms, operands) -> dict:
    sizes = {}
    for term, t in zip(terms, operands):
        for c, n in zip(term, t.shape):
            if sizes.get(c, 1) != 1 and n != 1 and sizes[c] != n:
                raise UserError(f"einsum: letter {c!r} has sizes {sizes[c]} and {n}")
            sizes[c] = builtins.max(sizes.get(c, 1), n)
    return sizes


def _sum_out(t, term, keep):
    """Sum the letters of `term` not in `keep` (an operand's letters nobody else needs)."""
    drop = tuple(i for i, c in enumerate(term) if c not in keep)
    if not drop:
        return t, term
    return rd.sum(t, drop), "".join(c for c in term if c in keep)


def _arrange(t, term, order, sizes):
    """t permuted to the letters of `order` (each present in term) and broadcast to their sizes."""
    t = mv.permute(t, tuple(term.index(c) for c in order))
    shape = tuple(sizes[c] for c in order)
    return mv.expand(t, shape) if t.shape != shape else t


def _contract(a, ta, b, tb, keep, sizes):
    batch = [c for c in ta if c in tb and c in keep]
    summed = [c for c in ta if c in tb and c not in keep]
    only_a = [c for c in ta if c not in tb]
    only_b = [c for c in tb if c not in ta]
    a = _arrange(a, ta, batch + only_a + summed, sizes)
    b = _arrange(b, tb, batch + summed + only_b, sizes)
    nb, na, ns, nbb = (math.prod(sizes[c] for c in group) for group in (batch, only_a, summed, only_b))
    out = matmul(a.reshape(nb, na, ns), b.reshape(nb, ns, nbb))
    letters = batch + only_a + only_b
    return out.reshape(tuple(sizes[c] for c in letters)), "".join(letters)


def einsum(equation: str, *operands: Tensor) -> Tensor:
    """torch.einsum: "bij,bjk->bik", "...ij,...jk", "ij->ji", implicit outputs; no repeated letter
    within one operand."""
    if _amp.state.on:
        return _amp.call("einsum", einsum, (equation, *operands), {})
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    terms, output = _parse(equation, operands)
    sizes = _sizes(terms, operands)
    tensors = list(operands)
    for i in range(len(tensors)):  # letters only one operand has and the output does not
        others = set(output).union(*(set(t) for j, t in enumerate(terms) if j != i))
        tensors[i], terms[i] = _sum_out(tensors[i], terms[i], others)
    t, term = tensors[0], terms[0]
    for i in range(1, len(tensors)):
        later = set(output).union(*(set(x) for x in terms[i + 1 :]))
        t, term = _contract(t, term, tensors[i], terms[i], later, sizes)
    t, term = _sum_out(t, term, set(output))
    t = mv.permute(t, tuple(term.index(c) for c in output)) if term != output else t
    shape = tuple(sizes[c] for c in output)
    return mv.expand(t, shape) if t.shape != shape else t
