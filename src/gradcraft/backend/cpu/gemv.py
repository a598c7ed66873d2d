"""`norm_linear`, the fused one-row product of a decoding step (kernels/gemv.cu on a GPU), as the CPU
kernels compute it step by step: the reference the CUDA kernel is tested against.

    s = x + residual                  (when a residual is given; also returned)
    n = rms_norm(s) or layer_norm(s)  (when a norm is given)
    h = n @ weight^T (+ bias)
    y = activation(h)                 (gelu, gelu with tanh, or swiglu: silu(h[:, :N/2]) * h[:, N/2:])

Each step rounds to the input's dtype as the separate kernels do, so the fused kernel reads and
writes the same values as the unfused chain, up to its own summation order.
"""

from gradcraft.backend.cpu import activations, elementwise, matmul, norms


def unpack(arrays, residual: bool, norm, norm_bias: bool, bias: bool) -> tuple:
    """(x, residual, norm_weight, norm_bias, weight, bias) from norm_linear's inputs (absent ones None)."""
    arrays = list(arrays)
    x = arrays.pop(0)
    res = arrays.pop(0) if residual else None
    nw = arrays.pop(0) if norm is not None else None
    nb = arrays.pop(0) if norm_bias else None
    w = arrays.pop(0)
    b = arrays.pop(0) if bias else None
    if arrays:
        raise ValueError(f"norm_linear: {len(arrays)} inputs too many for its attributes")
    return x, res, nw, nb, w, b


def _norm_linear(*arrays, residual, norm, eps, norm_bias, bias, activation):
    x, res, nw, nb, w, b = unpack(arrays, residual, norm, norm_bias, bias)
    s = elementwise.KERNELS["add"](x, res) if residual else x
    if norm == "rms_norm":
        n = norms.KERNELS["rms_norm"](s, nw, eps=eps, n_dims=1)
    elif norm == "layer_norm":
        n = norms.KERNELS["layer_norm"](s, nw, nb, eps=eps, n_dims=1)
    else:
        n = s
    h = matmul.KERNELS["matmul"](n, w.T)
    if bias:
        h = elementwise.KERNELS["add"](h, b)
    if activation == "swiglu":
        h = activations.KERNELS["swiglu"](h)
    elif activation in ("gelu", "gelu_tanh"):
        h = activations.KERNELS["gelu"](h, approximate="tanh" if activation == "gelu_tanh" else "none")
    return (h, s) if residual else h


KERNELS = {"norm_linear": _norm_linear}
