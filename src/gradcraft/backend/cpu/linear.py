"""`linear_bias` and its weight-side gradient: a product with its bias added, and the weight's and
bias's gradients from one pass over the output gradient (cuBLASLt's bias epilogues on a GPU,
backend/cuda/linear.py). On the CPU, the reference the CUDA kernels are tested against: the matmul
and add kernels, and the sum kernel for the bias gradient, in the input's dtype as the unfused ops.

    linear_bias(x (M, K), w (N, K), b (N,)) -> x @ w^T + b
    linear_bias_backward(g (M, N), x (M, K)) -> (g^T @ x (N, K), g summed over rows (N,))
"""

from gradcraft.backend.cpu import elementwise, matmul, reduce


def _linear_bias(x, w, b):
    return elementwise.KERNELS["add"](matmul.KERNELS["matmul"](x, w.T), b)


def _linear_bias_backward(g, x):
    return matmul.KERNELS["matmul"](g.T, x), reduce.KERNELS["sum"](g, (0,), False)


KERNELS = {"linear_bias": _linear_bias, "linear_bias_backward": _linear_bias_backward}
