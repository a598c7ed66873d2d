"""Ops: each is a forward (which kernel, output shape and dtype) plus a gradient rule in Tensor ops.

elementwise.py  unary/binary/where/cast        reduce.py    sum/max/var/topk/cumsum
movement.py     views, slicing, cat, pad        matmul.py    matmul
indexing.py     x[i] and x[i] = v               inplace.py   in-place ops (add_, copy_, ...)
creation.py     zeros/arange/rand, seeds        nn.py        fused NN ops (softmax, norms, attention, ...)
function.py     node building and the gradient-rule registry
methods.py      which op each Tensor method calls
"""
