"""The fault-injection script (scripts/fault_injection.py), small: one round with a few faults (SIGKILL
inside a checkpoint write, a full disk, damaged files) ends with exactly the uninterrupted run's
weights and no damaged checkpoint or temporary left. The full run's figures: docs/reliability.md."""

import importlib.util
import os

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "scripts", "fault_injection.py")


def load_script():
    spec = importlib.util.spec_from_file_location("fault_injection", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_round_of_faults_ends_exact(tmp_path):
    script = load_script()
    # the faults injected in-process always land (the timed kills of the full script may come too late)
    result = script.run_rounds(
        rounds=1, faults=3, seed=3, folder=str(tmp_path), log=lambda *_: None, kinds=("kill-ckpt", "enospc", "corrupt")
    )
    assert result["problems"] == [] and result["rounds_exact"] == 1, result
    assert result["faults_hit"] == 3, result


def test_the_check_sees_a_resume_that_is_not_exact(tmp_path):
    """The comparison can fail: a reference from another seed is not matched."""
    script = load_script()
    dataset = script.make_dataset(str(tmp_path))
    other = str(tmp_path / "other")
    proc = script.launch(script.command(dataset, other, False) + ["--seed", "7"])
    proc.communicate(timeout=600)
    import random

    problems = script.one_round(dataset, str(tmp_path), script.weights(other), 1.0, random.Random(0), 0, {})
    assert problems == ["the final weights differ from the uninterrupted run's"]


def test_a_round_of_file_faults_ends_exact(tmp_path):
    """The faults of crafted files and killed runs: leftovers of a killed run, a state.json field crafted by class, a
    damaged log and a kill in the middle of pruning; the run still ends exact, swept and whole."""
    script = load_script()
    kinds = ("kill-ckpt", "state", "litter", "log", "kill-prune")
    result = script.run_rounds(rounds=1, faults=5, seed=3, folder=str(tmp_path), log=lambda *_: None, kinds=kinds)
    assert result["problems"] == [] and result["rounds_exact"] == 1, result
    hit = {kind: h for kind, (_, h) in result["faults_drawn_hit"].items()}
    assert all(hit.get(kind, 0) >= 1 for kind in ("state", "litter", "log", "kill-prune")), result
