"""Ops: each is a forward (which kernel, output shape and dtype) plus a gradient rule in Tensor ops.

elementwise.py  unary/binary/where/cast        reduce.py    sum/max/var/topk/cumsum
movement.py     views, indexing, cat, pad       matmul.py    matmul
creation.py     zeros/arange/rand, seeds        nn.py        fused NN ops (softmax, norms, attention, ...)
function.py     node building and the gradient-rule registry
"""
