"""Side-by-side benchmarks against PyTorch (`gradcraft bench`, and the scripts in bench/).

PyTorch is imported only when a benchmark runs its PyTorch side: `import gradcraft` never imports it.
torch_reference.py is the independent PyTorch implementation of our decoder that both the tests
(as the oracle of the models, with its explicit attention) and the benchmarks (as the PyTorch
baselines: explicit attention, scaled_dot_product_attention, torch.compile) use; training.py runs
the side-by-side training benchmark.
"""


def usable_cores() -> int:
    """The cores this process may run on: the default thread count of both engines' sides."""
    from gradcraft.backend.cpu.threads import usable_cores as cores

    return cores()


def limit_threads(threads: int):
    """Give both engines the same CPU threads: PyTorch's (and OpenMP's), and NumPy's BLAS (through
    gradcraft.backend.blas: no threadpoolctl needed). Returns the torch module, or None when PyTorch
    is not installed."""
    import os

    from gradcraft.backend.cpu import blas, threads as cpu_threads

    os.environ["OMP_NUM_THREADS"] = str(threads)
    blas.set_threads(threads)
    cpu_threads.set_num_threads(threads)
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    return torch
