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


def load_script():
    spec = importlib.util.spec_from_file_location("strace_faults", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def script():
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
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


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """(dataset, a finished uninterrupted run folder), shared: one training run."""
    fault_injection = load_script().fault_injection
    folder = tmp_path_factory.mktemp("finished")
    dataset = fault_injection.make_dataset(str(folder))
    run = folder / "run"
    argv = fault_injection.command(dataset, str(run), False)
    subprocess.run([sys.executable, "-m", "gradcraft.cli.main", *argv], check=True, capture_output=True)
    return dataset, run


def test_a_failed_rename_mid_run_resumes_to_the_exact_weights(script, finished, tmp_path):
    dataset, reference_run = finished
    reference = script.fault_injection.weights(str(reference_run))
    code, problems, error = script.one_case(dataset, str(tmp_path), "rename", 12, reference)
    assert problems == []
    assert code == 2 and "Input/output error" in error, (code, error)


def test_the_checks_see_a_traceback_and_leftovers(tmp_path):
    """check_stop can fail: a traceback, two error lines, a temporary left behind."""
    script = load_script()
    run = tmp_path / "run"
    run.mkdir()
    (run / ".tmp-abcdefgh").write_bytes(b"x")
    problems = script.check_stop(str(run), 1, "Traceback (most recent call last):\nOSError: boom")
    assert len(problems) == 3, problems
    assert len(script.check_stop(str(run), 2, "error: a\nerror: b")) == 2


def test_a_finished_run_stopped_before_its_weights_manifest_writes_it_on_resume(finished, tmp_path):
    """An I/O error between the final weights and their manifest (strace: an fsync failing there)
    left weights without a manifest, which a resume took as intact and never completed."""
    from gradcraft.training.runfiles import check_weights_manifest

    dataset, reference_run = finished
    run = tmp_path / "run"
    shutil.copytree(reference_run, run)
    (run / "manifest.json").unlink()
    argv = load_script().fault_injection.command(dataset, str(run), True)
    subprocess.run([sys.executable, "-m", "gradcraft.cli.main", *argv], check=True, capture_output=True)
    assert (run / "manifest.json").is_file()
    import numpy as np

    fault_injection = load_script().fault_injection
    weights, reference = fault_injection.weights(str(run)), fault_injection.weights(str(reference_run))
    assert weights.keys() == reference.keys()  # the same weights, from the last checkpoint
    assert all(np.array_equal(weights[k], reference[k]) for k in weights)
    check_weights_manifest(str(run / "model.safetensors"))
