"""A full disk, a read-only folder or a refused permission while gradcraft writes (checkpoints, final
weights, token files, exports): one `error:` line, exit 2, no temporary files left, and the files
written before (the previous checkpoint, the previous token file) intact. The failures are injected
in-process (no tmpfs here): the OS error is raised half-way through a real write."""

import errno
import os
import shutil

import pytest

import gradcraft.atomic as atomic
from gradcraft.training import checkpoint as ckpt
from cli_helpers import ONE_LAYER_TRAIN, run_cli

TINY = ONE_LAYER_TRAIN


def leftovers(folder) -> list:
    """Temporary files and folders anywhere under `folder`."""
    found = []
    for root, dirs, files in os.walk(folder):
        found += [
            os.path.join(root, n)
            for n in dirs + files
            if n.startswith((".tmp", ".tokens")) or ".partial-" in n or n.endswith(".tmp")
        ]
    return found


class _FullDisk:
    """A file whose writes of at least `from_size` bytes write half, then fail with ENOSPC."""

    def __init__(self, f, from_size):
        self.f, self.from_size = f, from_size

    def write(self, data):
        if len(data) >= self.from_size:
            self.f.write(bytes(data[: len(data) // 2]))
            self.f.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.f.write(data)

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def fill_disk_in_atomic_writes(monkeypatch, from_size):
    real = os.fdopen
    monkeypatch.setattr(atomic.os, "fdopen", lambda fd, *a, **k: _FullDisk(real(fd, *a, **k), from_size))


def test_full_disk_during_a_checkpoint_keeps_the_previous_one(dataset, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    real, calls = ckpt.save_file, []

    def save_file(tensors, path, *args, **kwargs):  # the 2nd checkpoint's weights: half written, then ENOSPC
        calls.append(path)
        if len(calls) == 3:
            fill_disk_in_save_file(monkeypatch, ckpt)
            return ckpt.save_file(tensors, path, *args, **kwargs)
        return real(tensors, path, *args, **kwargs)

    monkeypatch.setattr(ckpt, "save_file", save_file)
    status, _, err = run_cli(
        ["train", "--dataset", dataset, "--model_dir", run, *TINY, "--steps", "6", "--checkpoint_every", "2"], capsys
    )
    assert status == 2, err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("error: cannot write") and "step_00000004" in lines[-1], err
    assert "disk is full" in lines[-1] and "Traceback" not in err, err
    assert not leftovers(run), leftovers(run)
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["step_00000002"]
    assert ckpt.verify(str(run / "checkpoints" / "step_00000002")) is None
    monkeypatch.undo()
    status, _, err = run_cli(["train", "--dataset", dataset, "--model_dir", run, "--resume"], capsys)
    assert status == 0 and "resuming from" in err and "(step 2)" in err, err
    assert (run / "checkpoints" / "step_00000006").is_dir()


def test_read_only_checkpoint_folder_is_one_line(dataset, tmp_path, capsys, monkeypatch):
    real = os.makedirs

    def makedirs(path, *args, **kwargs):
        if "checkpoints" in os.fspath(path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "makedirs", makedirs)
    status, _, err = run_cli(
        ["train", "--dataset", dataset, "--model_dir", tmp_path / "run", *TINY, "--steps", "2"], capsys
    )
    assert status == 2 and err.strip().splitlines()[-1].startswith("error: cannot write"), err
    assert "read-only" in err and "Traceback" not in err, err


def test_full_disk_writing_the_final_weights(dataset, tmp_path, capsys, monkeypatch):
    fill_disk_in_atomic_writes(monkeypatch, 50_000)  # only the weights are written in pieces this large
    run = tmp_path / "run"
    status, _, err = run_cli(["train", "--dataset", dataset, "--model_dir", run, *TINY, "--steps", "2"], capsys)
    assert status == 2 and "model.safetensors" in err and "disk is full" in err, err
    assert not (run / "model.safetensors").exists() and not leftovers(run), leftovers(run)
    assert ckpt.verify(str(run / "checkpoints" / "step_00000002")) is None  # the run can be resumed


@pytest.fixture
def corpus(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for i in range(5):
        (raw / f"{i}.txt").write_text(f"hello world {i}\n" * 20)
    return raw


def test_full_disk_while_tokenizing_keeps_the_previous_token_file(corpus, tmp_path, capsys, monkeypatch):
    out = tmp_path / "data" / "tokens.bin"
    argv = ["tokenize", "--data_dir", corpus, "--output_path", out, "--vocab_size", "280", "--workers", "1", "--quiet"]
    assert run_cli(argv, capsys)[0] == 0
    before = {p.name: p.read_bytes() for p in out.parent.iterdir()}
    fill_disk_in_atomic_writes(monkeypatch, 1)
    status, _, err = run_cli([*argv, "--retrain"], capsys)
    assert status == 2 and err.count("\n") == 1 and "disk is full" in err, err
    assert {p.name: p.read_bytes() for p in out.parent.iterdir()} == before  # nothing new, nothing lost


def test_read_only_folder_for_tokens_is_one_line(corpus, tmp_path, capsys, monkeypatch):
    def mkstemp(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(atomic.tempfile, "mkstemp", mkstemp)
    out = tmp_path / "tokens.bin"
    status, _, err = run_cli(
        ["tokenize", "--data_dir", corpus, "--output_path", out, "--vocab_size", "280", "--workers", "1", "--quiet"],
        capsys,
    )
    assert status == 2 and err.count("\n") == 1 and "read-only" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_real_read_only_folder(corpus, tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        status, _, err = run_cli(
            [
                "tokenize",
                "--data_dir",
                corpus,
                "--output_path",
                locked / "tokens.bin",
                "--vocab_size",
                "280",
                "--workers",
                "1",
                "--quiet",
            ],
            capsys,
        )
        assert status == 2 and err.count("\n") == 1, err
        status, _, err = run_cli(["train", "--dataset", "x.bin", "--model_dir", locked / "run"], capsys)
        assert status == 2 and err.count("\n") == 1, err
    finally:
        locked.chmod(0o755)


def fill_disk_in_save_file(monkeypatch, module):
    """safetensors' save_file (which writes through a file of its own) as it fails on a full disk."""
    real = module.save_file

    def save_file(tensors, path, *args, **kwargs):
        real(tensors, path, *args, **kwargs)
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    monkeypatch.setattr(module, "save_file", save_file)


def test_full_disk_during_export_leaves_no_half_export(trained_run, tmp_path, capsys, monkeypatch):
    from gradcraft.training import run_folder

    fill_disk_in_atomic_writes(monkeypatch, 10_000)  # --format hf writes through atomic_file
    fill_disk_in_save_file(monkeypatch, run_folder)  # --format safetensors through safetensors' save_file
    for fmt in ("hf", "safetensors"):
        out = tmp_path / fmt
        status, _, err = run_cli(["export", "--model_dir", trained_run / "run", "--format", fmt, "--out", out], capsys)
        assert status == 2 and err.count("\n") == 1 and "disk is full" in err, (fmt, err)
        assert not out.exists(), list(out.iterdir())


def test_storage_error_outside_the_atomic_writes_is_one_line(dataset, tmp_path, capsys, monkeypatch):
    """A write no command anticipated (here: the training log) still ends as one line and exit 2."""
    from gradcraft.training import log as run_logs

    monkeypatch.setattr(
        run_logs.RunLogs,
        "append",
        lambda self, row: (_ for _ in ()).throw(
            OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "run" / "training_log.csv"))
        ),
    )
    status, _, err = run_cli(
        ["train", "--dataset", dataset, "--model_dir", tmp_path / "run", *TINY, "--steps", "2"], capsys
    )
    assert status == 2 and err.strip().splitlines()[-1].startswith("error: ") and "training_log.csv" in err, err
    assert "Traceback" not in err


def test_run_folder_files_have_the_usual_mode(trained_run):
    """safetensors writes through a 0600 temporary file; every file gets 0666 less the umask."""
    mask = os.umask(0)
    os.umask(mask)
    modes = {}
    for root, _, files in os.walk(trained_run / "run"):
        for name in files:
            if name != ".lock":
                path = os.path.join(root, name)
                modes[os.path.relpath(path, trained_run)] = os.stat(path).st_mode & 0o777
    assert any(name.endswith("optimizer.safetensors") for name in modes)
    assert set(modes.values()) == {0o666 & ~mask}, modes


def test_a_second_export_or_tokenize_into_a_folder_in_use_is_refused(trained_run, corpus, tmp_path, capsys):
    from gradcraft.training.runlock import lock_directory

    out = tmp_path / "export"
    out.mkdir()
    with lock_directory(str(out), "export"):  # as another export in progress holds it
        status, _, err = run_cli(
            ["export", "--model_dir", trained_run / "run", "--format", "safetensors", "--out", out], capsys
        )
    assert status == 2 and "in use by another `gradcraft export`" in err, err
    assert list(out.iterdir()) == []
    data = tmp_path / "data"
    data.mkdir()
    with lock_directory(str(data), "tokenize"):
        status, _, err = run_cli(
            [
                "tokenize",
                "--data_dir",
                corpus,
                "--output_path",
                data / "t.bin",
                "--vocab_size",
                "280",
                "--workers",
                "1",
                "--quiet",
            ],
            capsys,
        )
    assert status == 2 and "in use by another `gradcraft tokenize`" in err, err
    assert list(data.iterdir()) == []
    assert (
        run_cli(["export", "--model_dir", trained_run / "run", "--format", "safetensors", "--out", out], capsys)[0] == 0
    )


def test_leftover_helper_sees_temporaries(tmp_path):
    (tmp_path / ".tmp-step_00000002-1").mkdir()
    assert leftovers(tmp_path)
    shutil.rmtree(tmp_path / ".tmp-step_00000002-1")
    assert not leftovers(tmp_path)
