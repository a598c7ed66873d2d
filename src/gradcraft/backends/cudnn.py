"""torch.backends.cudnn: the flags scripts set, accepted and kept. cuDNN serves PyTorch's convolutions
and RNNs, which gradcraft does not have (its matmuls' TF32 switch is backends.cuda.matmul.allow_tf32),
so none of them changes a result; is_available() says gradcraft does not use cuDNN."""

allow_tf32 = True
benchmark = False
deterministic = False
enabled = True
benchmark_limit = 10


def is_available() -> bool:
    return False


def version():
    return None
