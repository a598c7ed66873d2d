"""A mismatched optimizer state (a damaged or foreign checkpoint) must give a one-line UserError,
never an out-of-bounds read or write in a native kernel.

The CPU cases run in a subprocess: if a kernel did write out of bounds, the child would crash
(non-zero exit, a signal) instead of taking pytest down with it."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gradcraft
from gradcraft.errors import UserError

ADAMW = dict(beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01)  # (the kernel takes every hyperparameter)

CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    from gradcraft.backend import cpu
    from gradcraft.backend.cpu import native as cpu_native
    from gradcraft.errors import UserError

    which, path = sys.argv[1], sys.argv[2]
    p = np.ones(4096, np.float32); g = np.ones(4096, np.float32)
    m = np.zeros(16, np.float32)            # exp_avg of the wrong size: 16 elements, not 4096
    v = np.zeros(4096, np.float32)
    consts = dict(scale=1.0, step_size=1e-3, bc2_sqrt=0.5, decay=1.0, beta1=0.9, beta2=0.999, eps=1e-8)
    try:
        if which == "c":
            if cpu_native.library() is None and path == "native":
                print("NO-COMPILER"); sys.exit(0)
            cpu_native.adamw_update(p, g, m, v, **consts)
        else:
            ok = np.ones(8, np.float32)
            cpu.optim._adamw_step([ok, p], [ok, g], [np.zeros(8, np.float32), m], [np.zeros(8, np.float32), v],
                            np.array([1e-3, 1.0], np.float32), beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0)
    except UserError as e:
        assert "\\n" not in str(e)
        print("USERERROR", e)
        assert np.all(p == 1.0), "nothing may be written before the check"
        sys.exit(0)
    print("NO ERROR"); sys.exit(1)
""")


def _child(which: str, native: bool):
    env = dict(os.environ, GRADCRAFT_CPU_NATIVE="1" if native else "0")
    return subprocess.run(
        [sys.executable, "-c", CHILD, which, "native" if native else "numpy"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize("which,native", [("c", True), ("step", True), ("step", False)])
def test_mismatched_exp_avg_is_a_user_error(which, native):
    r = _child(which, native)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)  # a crash shows here, not in pytest
    if "NO-COMPILER" in r.stdout:
        pytest.skip("no C compiler: the C kernel is not built")
    line = r.stdout.strip().splitlines()[-1]
    assert line.startswith("USERERROR"), r.stdout
    assert "exp_avg of parameter" in line and "16 elements" in line and "4096" in line
    if which == "step":
        assert "parameter 1" in line  # names the tensor by its index


def test_checker_names_each_tensor():
    from gradcraft.backend import check_optimizer_state

    a, b = np.zeros(3, np.float32), np.zeros(5, np.float32)
    check_optimizer_state([a, b], [a, b], [a, b], [a, b])  # consistent: fine
    with pytest.raises(UserError, match="grad of parameter 1 has 3 elements"):
        check_optimizer_state([a, b], [a, a], [a, b], [a, b])
    with pytest.raises(UserError, match="exp_avg_sq of parameter 0"):
        check_optimizer_state([a, b], [a, b], [a, b], [b, b])
    with pytest.raises(UserError, match="2 parameters but 1 exp_avgs"):
        check_optimizer_state([a, b], [a, b], [a], [a, b])
    with pytest.raises(UserError, match="floating point"):
        check_optimizer_state([a], [a], [np.zeros(3, np.int32)], [a])


@pytest.mark.skipif(not gradcraft.device.is_available("cuda"), reason="needs a CUDA GPU")
def test_cuda_mismatched_exp_avg_is_a_user_error():
    import cupy as cp
    from gradcraft.backend.cuda import optim

    p, g, v = cp.ones(4096, cp.float32), cp.ones(4096, cp.float32), cp.zeros(4096, cp.float32)
    m = cp.zeros(16, cp.float32)
    lr_step = cp.asarray([1e-3, 1.0], dtype=cp.float32)
    with pytest.raises(UserError, match="exp_avg of parameter 0 has 16 elements"):
        optim.adamw_step([p], [g], [m], [v], lr_step, **ADAMW)
    assert bool((p == 1).all())
    with pytest.raises(UserError, match="exp_avg_sq of parameter 0 must be a contiguous float32"):
        optim.adamw_step([p], [g], [cp.zeros(4096, cp.float32)], [cp.zeros(4096, cp.float16)], lr_step, **ADAMW)
    with pytest.raises(UserError, match=r"grad_norm\[0\]"):
        optim.grad_norm([cp.zeros((8, 8), cp.float32)[:, ::2]])
