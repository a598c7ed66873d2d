"""bench/converge.py in a few steps: both sides start from the same weights and see the same batches, so
without dropout their validation curves agree (the same architecture, optimizer and decay rule), and
with dropout each side draws its own masks."""

import importlib.util
import json
import os

import numpy as np
import pytest

pytest.importorskip("torch")

TINY = [
    "--corpus_mb",
    "0.05",
    "--layers",
    "1",
    "--dim",
    "32",
    "--heads",
    "2",
    "--seq_len",
    "16",
    "--batch",
    "4",
    "--steps",
    "4",
    "--eval_every",
    "2",
    "--eval_batches",
    "2",
    "--warmup",
    "1",
]


def converge():
    path = os.path.join(os.path.dirname(__file__), "..", "bench", "converge.py")
    spec = importlib.util.spec_from_file_location("converge", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_dropout_both_sides_follow_one_curve(tmp_path, capsys):
    out = tmp_path / "curves.json"
    assert converge().main([*TINY, "--dropout", "0", "--seed", "0,1", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "best val: gradcraft" in printed and "mean  gradcraft - pytorch" in printed
    results = json.loads(out.read_text())["results"]
    assert [r["seed"] for r in results] == [0, 1]
    for r in results:
        curve = np.array(r["curve"])
        assert list(curve[:, 0]) == [0, 2, 4]
        np.testing.assert_allclose(curve[:, 1], curve[:, 2], rtol=0, atol=2e-4)
        assert curve[-1, 1] < curve[0, 1] - 0.1  # it learns
        assert r["ours"]["final"] == curve[-1, 1] and r["ours"]["best"] == curve[1:, 1].min()
    assert results[0]["curve"][0][1] != results[1]["curve"][0][1]  # another seed, other weights


def test_with_dropout_the_masks_differ_but_the_start_agrees(tmp_path):
    out = tmp_path / "curves.json"
    assert converge().main([*TINY, "--dropout", "0.3", "--attn_dropout", "0", "--json", str(out)]) == 0
    curve = np.array(json.loads(out.read_text())["results"][0]["curve"])
    np.testing.assert_allclose(curve[0, 1], curve[0, 2], rtol=0, atol=1e-5)  # the same initial weights
    assert np.abs(curve[1:, 1] - curve[1:, 2]).max() > 1e-4  # each side its own masks
