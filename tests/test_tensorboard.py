"""torch.utils.tensorboard.SummaryWriter: the event files it writes hold what PyTorch's hold (read
back with tensorboard's own loader)."""

import glob
import os
import sys

import numpy as np
import pytest

import gradcraft as gc

pytest.importorskip("tensorboard")


def _events(folder):
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    found = []
    for path in sorted(glob.glob(os.path.join(folder, "events.out.tfevents.*"))):
        for event in EventFileLoader(path).Load():
            for value in event.summary.value:
                kind = value.WhichOneof("value")
                if kind == "simple_value":
                    data = round(value.simple_value, 6)
                elif kind == "histo":
                    h = value.histo
                    data = (
                        h.min,
                        h.max,
                        h.num,
                        round(h.sum, 6),
                        round(h.sum_squares, 6),
                        list(h.bucket_limit),
                        list(h.bucket),
                    )
                else:
                    data = (list(value.tensor.string_val), list(value.tensor.float_val))
                found.append((event.step, value.tag, kind, data))
    return found


def _log(SummaryWriter, lib, folder):
    weights = lib.tensor(np.linspace(-2, 3, 50))
    with SummaryWriter(log_dir=str(folder)) as writer:
        for step in range(3):
            writer.add_scalar("loss/train", lib.tensor(1.0 / (step + 1)), step)
            writer.add_scalar("lr", 0.1 * step, global_step=step, new_style=True)
            writer.add_scalars("loss", {"train": 0.5 + step, "val": 0.7 * step}, step)
        writer.add_histogram("weights", weights, 3)
        writer.add_histogram("coarse", weights, 3, bins=5, max_bins=3)
        writer.add_text("note", "hello", 4)
        writer.flush()
        assert writer.get_logdir() == str(folder)


def test_events_match_torch(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.utils.tensorboard import SummaryWriter as TorchWriter

    from gradcraft.utils.tensorboard import SummaryWriter

    _log(SummaryWriter, gc, tmp_path / "ours")
    _log(TorchWriter, torch, tmp_path / "theirs")
    for sub in ("", "loss_train", "loss_val"):
        ours, theirs = _events(tmp_path / "ours" / sub), _events(tmp_path / "theirs" / sub)
        assert ours == theirs and ours, sub


def test_missing_tensorboard_is_one_clear_error(monkeypatch):
    import importlib

    for name in [m for m in sys.modules if m == "tensorboard" or m.startswith("tensorboard.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    monkeypatch.delitem(sys.modules, "gradcraft.utils.tensorboard", raising=False)
    with pytest.raises(ImportError, match="TensorBoard logging requires the tensorboard package"):
        importlib.import_module("gradcraft.utils.tensorboard")
