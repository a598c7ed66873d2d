"""`gradcraft bench`: both engines train the same model side by side; the losses must agree."""

import re
import subprocess
import sys

import pytest

import gradcraft as gc


def bench(*args, code=None):
    cmd = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "gradcraft.cli.main", "bench", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


TINY = ["--preset", "toy-v0", "--batch", "2", "--steps", "2", "--warmup", "1", "--threads", "1"]


def test_side_by_side_losses_agree():
    proc = bench(*TINY)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^gradcraft\s+[\d.]+\s+[\d,]+", proc.stdout, re.M)
    assert re.search(r"^pytorch\s+[\d.]+\s+[\d,]+", proc.stdout, re.M)
    assert re.search(r"speed ratio .*: [\d.]+x", proc.stdout)
    drift = float(re.search(r"max \|loss difference\| over the first 3 steps: (\S+)", proc.stdout).group(1))
    assert drift < 1e-4


def test_one_side_only():
    proc = bench(*TINY, "--only", "gradcraft")
    assert proc.returncode == 0, proc.stderr
    assert "gradcraft" in proc.stdout and "pytorch " not in proc.stdout and "ratio" not in proc.stdout


def test_without_pytorch_one_line():
    code = ("import sys; sys.modules['torch'] = None; from gradcraft.cli.main import main; "
            "sys.exit(main(['bench', *sys.argv[1:]]))")
    proc = bench(*TINY, code=code)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: gradcraft bench compares against PyTorch, which is not installed here; install it "
        "(pip install torch) or run with --only gradcraft"]


@pytest.mark.skipif(gc.device.is_available("cuda"), reason="this machine has a GPU")
def test_no_gpu_one_line():
    proc = bench(*TINY, "--device", "cuda", "--only", "gradcraft")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "CUDA" in proc.stderr
