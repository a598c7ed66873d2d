"""GRADCRAFT_TEST_TIMEOUT (tests/conftest.py): a test that overruns ends the run within its seconds,
printing the stacks that name it, instead of holding a GPU machine whose kernel hangs."""

import os
import subprocess
import sys
import time

import pytest


def run_sleeper(timeout: str, sleep: str) -> subprocess.CompletedProcess:
    """pytest in a subprocess on test_sleeps_when_asked, with GRADCRAFT_TEST_TIMEOUT `timeout`."""
    env = {**os.environ, "GRADCRAFT_TEST_TIMEOUT": timeout, "GRADCRAFT_TEST_SLEEP": sleep}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"{__file__}::test_sleeps_when_asked"]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def test_an_overrunning_test_ends_the_run_with_its_stack():
    start = time.monotonic()
    proc = run_sleeper("2", "60")
    assert time.monotonic() - start < 45  # (pytest's start-up, then the 2 s)
    assert proc.returncode != 0
    assert "Timeout" in proc.stderr and "test_sleeps_when_asked" in proc.stderr, proc.stderr[-2000:]


def test_a_test_within_its_time_passes_as_usual():
    proc = run_sleeper("30", "0.1")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_sleeps_when_asked():
    seconds = os.environ.get("GRADCRAFT_TEST_SLEEP")
    if not seconds:
        pytest.skip("runs only as the subprocess of the tests above")
    time.sleep(float(seconds))
