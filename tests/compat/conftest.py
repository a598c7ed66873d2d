import os
import sys

sys.path.insert(0, os.path.dirname(__file__))  # the programs' tests import harness.py

try:  # PyTorch's side on one thread: its small ops are slower on two busy cores (the CI machine)
    import torch

    torch.set_num_threads(1)
except ImportError:
    pass
