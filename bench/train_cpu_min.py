"""gradcraft against eager PyTorch on the `demo` training step (CPU, 2 threads), reporting the fastest
step as well as the median: on a shared machine the fastest step is the one least disturbed by other
processes, so it compares the code; the median shows what contention does to each side.

    python bench/train_cpu_min.py [ROUNDS]        # default 3 rounds of 2 warm-up + 5 timed steps per side

The sides run in turn (ours, torch, ours, ...) through gradcraft/benchmarks/training.py, what
`gradcraft bench` runs. GRADCRAFT_CPU_MARCH=x86-64-v3 times the C kernels as built for AVX2 machines;
GRADCRAFT_BLAS_POLICY=off runs every BLAS product on all threads (see gradcraft/backend/cpu/blas.py).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

from gradcraft.benchmarks import limit_threads  # noqa: E402  (gradcraft before NumPy: see gradcraft/__init__.py)

import numpy as np  # noqa: E402

limit_threads(2)
from gradcraft.benchmarks.training import OURS, Setup, initial_weights, runner  # noqa: E402
from gradcraft.models import preset  # noqa: E402

cfg = preset("demo")
setup = Setup(device="cpu", batch=16, steps=5, warmup=2, tf32=False, graph=False, dtype="float32")
weights = initial_weights(cfg)
times = {OURS: [], "eager": []}
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
    for side in (OURS, "eager"):
        _, step_times, _ = runner(side)(cfg, weights, setup, setup.warmup + setup.steps)
        times[side] += step_times[setup.warmup :]
ours, torch_ms = np.array(times[OURS]) * 1e3, np.array(times["eager"]) * 1e3
print(
    f"ours min {ours.min():.1f} med {np.median(ours):.1f} | torch min {torch_ms.min():.1f} "
    f"med {np.median(torch_ms):.1f} | ratio(min) {torch_ms.min() / ours.min():.2f} "
    f"ratio(med) {np.median(torch_ms) / np.median(ours):.2f} load {os.getloadavg()[0]:.1f}"
)
