"""Storage faults injected with strace (scripts/strace_faults.py) into `gradcraft train` mid-run: the
N-th fsync failing with EIO, rename with EIO, write with ENOSPC stop the run with one `error:` line and
exit 2, no traceback, no temporary left, every checkpoint intact, and a resume ends with exactly the
weights of an uninterrupted run. Skipped where strace is not installed (or cannot trace here)."""

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "scripts", "strace_faults.py")

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")


def load_script():
    spec = importlib.util.spec_from_file_location("strace_faults", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def script():
    probe = subprocess.run(["strace", "-f", "-qq", "-o", os.devnull, sys.executable, "-c", "0"], capture_output=True)
    if probe.returncode != 0:  # e.g. a container without ptrace
        pytest.skip(f"strace cannot trace here: {probe.stderr.decode(errors='replace').strip()[:200]}")
    return load_script()


# A run makes about 64 fsyncs, 23 renames and 74 writes: these land in checkpoint writes mid-run.
@pytest.mark.parametrize("syscall,when", [("fsync", 30), ("write", 40)])
def test_a_storage_fault_mid_run_stops_cleanly(script, tmp_path, syscall, when):
    dataset = script.fault_injection.make_dataset(str(tmp_path))
    code, problems, error = script.one_case(dataset, str(tmp_path), syscall, when, reference=None)
    assert problems == []
    assert code == 2 and error.startswith("error:"), (code, error)


def test_a_failed_rename_mid_run_resumes_to_the_exact_weights(script, tmp_path):
    dataset = script.fault_injection.make_dataset(str(tmp_path))
    reference_run = str(tmp_path / "reference")
    argv = script.fault_injection.command(dataset, reference_run, False)
    subprocess.run([sys.executable, "-m", "gradcraft.cli.main", *argv], check=True, capture_output=True)
    reference = script.fault_injection.weights(reference_run)
    code, problems, error = script.one_case(dataset, str(tmp_path), "rename", 12, reference)
    assert problems == []
    assert code == 2 and "Input/output error" in error, (code, error)


def test_the_checks_see_a_traceback_and_leftovers(script, tmp_path):
    """check_stop can fail: a traceback, two error lines, a temporary left behind."""
    run = tmp_path / "run"
    run.mkdir()
    (run / ".tmp-abcdefgh").write_bytes(b"x")
    problems = script.check_stop(str(run), 1, "Traceback (most recent call last):\nOSError: boom")
    assert len(problems) == 3, problems
    assert len(script.check_stop(str(run), 2, "error: a\nerror: b")) == 2
