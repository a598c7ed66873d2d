"""One `gradcraft train` per run folder (an OS lock on <model_dir>/.lock), and SIGTERM
handled like Ctrl-C (the newest checkpoint and the resume command, no temporaries left, exit 143)."""

import os
import signal
import subprocess
import sys

import pytest

from gradcraft.training.log import read_log
from cli_helpers import TINY_TRAIN, train_process, wait_for_checkpoint

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="fcntl.flock and SIGTERM are POSIX")

TINY = TINY_TRAIN


def _listing(folder):
    return sorted(
        (os.path.relpath(os.path.join(d, n), folder), os.path.getmtime(os.path.join(d, n)))
        for d, dirs, files in os.walk(folder)
        for n in dirs + files
        if n != ".lock"
    )


def test_a_second_train_on_a_running_folder_is_refused_and_the_first_finishes(dataset, tmp_path):
    out = tmp_path / "run"
    first = train_process(dataset, out, "--steps", "500", "--checkpoint_every", "50", "--print_every", "50")
    try:
        wait_for_checkpoint(out, 50, first)
        assert (out / ".lock").read_text().strip() == str(first.pid)
        # The first is paused (holding its lock) while the seconds try: on a fast machine it could
        # otherwise finish its 500 steps before they start, and nothing would refuse them.
        first.send_signal(signal.SIGSTOP)
        try:
            seconds = [
                train_process(dataset, out, "--steps", "500", *flags) for flags in ([], ["--resume"], ["--overwrite"])
            ]
            for second in seconds:
                _, err = second.communicate(timeout=60)
                assert second.returncode == 2, err
                lines = err.strip().splitlines()
                assert len(lines) == 1 and lines[0].startswith("error: ") and f"process {first.pid}" in lines[0], err
            assert first.poll() is None  # refused while the first was running
        finally:
            first.send_signal(signal.SIGCONT)
        _, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err
    assert "error" not in err and "Traceback" not in err
    from gradcraft.inference.text import load_model, paths_from_model_dir

    _, config_path, weights_path = paths_from_model_dir(str(out))
    load_model(config_path, weights_path)  # the final weights load
    rows = read_log(str(out / "training_log.csv"))
    assert [int(r["step"]) for r in rows] == list(range(1, 501))  # continuous: the second wrote nothing
    assert not [n for n in os.listdir(out / "checkpoints") if n.startswith(".tmp-")]

    # released at the end: a --resume (to a larger --steps) takes the lock and goes on
    again = train_process(dataset, out, "--steps", "510", "--resume")
    _, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    assert [int(r["step"]) for r in read_log(str(out / "training_log.csv"))] == list(range(1, 511))


def test_a_refused_train_writes_nothing(dataset, tmp_path):
    """While a process holds the lock, a second train changes nothing in the folder, not even .lock."""
    from gradcraft.training.runlock import lock_run_folder, release_run_folder

    out = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from gradcraft.training.runlock import lock_run_folder\n"
            f"fd = lock_run_folder({str(out)!r}); print('locked', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = _listing(out), (out / ".lock").read_text(), os.path.getmtime(out / ".lock")
        second = train_process(dataset, out, "--steps", "5")
        _, err = second.communicate(timeout=60)
        assert second.returncode == 2 and err.count("\n") == 1 and f"process {holder.pid}" in err, err
        assert (_listing(out), (out / ".lock").read_text(), os.path.getmtime(out / ".lock")) == before
    finally:
        holder.kill()
        holder.wait()
    # the OS released the killed holder's lock: no stale lock
    fd = lock_run_folder(str(out))
    assert (out / ".lock").read_text().strip() == str(os.getpid())
    release_run_folder(fd)


def test_sigterm_stops_like_ctrl_c_and_the_run_resumes(dataset, tmp_path):
    out = tmp_path / "run"
    proc = train_process(dataset, out, "--steps", "100000", "--checkpoint_every", "1")
    try:
        wait_for_checkpoint(out, 3, proc)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("interrupted: the newest checkpoint holds step "), err
    assert last.endswith(f"resume with: gradcraft train --dataset {dataset} --model_dir {out} --resume")
    step = int(last.split("holds step ")[1].split()[0])
    assert (out / "checkpoints" / f"step_{step:08d}").exists()
    leftovers = [
        n for d in (out, out / "checkpoints") for n in os.listdir(d) if n.startswith(".tmp-") or n.endswith(".tmp")
    ]
    assert leftovers == []

    again = train_process(dataset, out, "--resume", "--steps", str(step + 3))
    _, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    assert f"(step {step})" in err
    assert int(read_log(str(out / "training_log.csv"))[-1]["step"]) == step + 3


def test_the_sigterm_handler_is_restored_and_skipped_off_the_main_thread():
    import threading
    from gradcraft.training.runlock import sigterm_as_interrupt

    before = signal.getsignal(signal.SIGTERM)
    with sigterm_as_interrupt():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before
    errors = []

    def other():
        try:
            with sigterm_as_interrupt():
                pass
        except Exception as e:  # signal.signal off the main thread would raise ValueError
            errors.append(e)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert errors == []


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_signal_dropped_by_a_finalizer_is_raised_between_steps(signum):
    # Python drops an exception raised in a finalizer ("Exception ignored in ..."): a Ctrl-C or a
    # SIGTERM that lands there must still stop the run at the next step, as the same exception.
    import weakref
    from gradcraft.training.runlock import Terminated, raise_if_interrupted, sigterm_as_interrupt

    class Thing:
        pass

    before, reached = signal.getsignal(signum), []
    expected = Terminated if signum == signal.SIGTERM else KeyboardInterrupt
    with pytest.raises(expected) as raised:
        with sigterm_as_interrupt():
            thing = Thing()
            weakref.finalize(thing, os.kill, os.getpid(), signum)
            del thing  # the signal arrives inside the finalizer, which drops the exception
            reached.append("after")
            raise_if_interrupted()
    assert type(raised.value) is expected
    assert reached == ["after"] and signal.getsignal(signum) is before
    raise_if_interrupted()  # outside the block: nothing pending


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_dropped_by_a_finalizer_prints_no_traceback_and_other_errors_still_print(signum, monkeypatch):
    # The user sees the train command's one-line stop message, not "Exception ignored in ..." and a
    # traceback from whatever finalizer the signal happened to land in; a real error still prints.
    import weakref
    from gradcraft.training.runlock import raise_if_interrupted, sigterm_as_interrupt

    class Thing:
        pass

    def fail():
        raise ValueError("a real error in a finalizer")

    printed = []

    def hook(unraisable):
        printed.append(unraisable.exc_type)

    monkeypatch.setattr(sys, "unraisablehook", hook)
    with pytest.raises(KeyboardInterrupt):
        with sigterm_as_interrupt():
            thing, other = Thing(), Thing()
            weakref.finalize(thing, os.kill, os.getpid(), signum)
            weakref.finalize(other, fail)
            del thing, other
            raise_if_interrupted()
    assert printed == [ValueError]
    assert sys.unraisablehook is hook  # restored


def test_a_stop_signal_ignored_at_the_start_stays_ignored():
    # `gradcraft train ... &` in a script: the shell ignores SIGINT for the job (Ctrl-C is for the
    # script's foreground command), and Python keeps it ignored; the run must not start taking it.
    from gradcraft.training.runlock import raise_if_interrupted, sigterm_as_interrupt

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with sigterm_as_interrupt():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)
            raise_if_interrupted()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_after_a_dropped_stop_the_next_ctrl_c_stops_at_once_and_the_cleanup_is_not_cut_short():
    import weakref
    from gradcraft.training.runlock import interrupt_handled, sigterm_as_interrupt

    class Thing:
        pass

    reached = []
    with sigterm_as_interrupt():
        with pytest.raises(KeyboardInterrupt):
            thing = Thing()
            weakref.finalize(thing, os.kill, os.getpid(), signal.SIGINT)
            del thing  # dropped in the finalizer: the run goes on (far from a step, say)
            reached.append("dropped")
            os.kill(os.getpid(), signal.SIGINT)  # the user presses Ctrl-C again: it stops at once
            reached.append("not reached")
        interrupt_handled()  # what the train command does when it catches the stop
        os.kill(os.getpid(), signal.SIGINT)  # during the cleanup: waits for it
        reached.append("cleaned up")
    assert reached == ["dropped", "cleaned up"]


def test_without_fcntl_there_is_no_lock(tmp_path, monkeypatch):
    from gradcraft.training import runlock

    monkeypatch.setattr(runlock, "fcntl", None)
    assert runlock.lock_run_folder(str(tmp_path / "run")) is None
    assert not (tmp_path / "run").exists()
    runlock.release_run_folder(None)


def test_remove_temporaries_takes_the_leftovers_of_a_stopped_write(tmp_path):
    from gradcraft.training.checkpoint import remove_temporaries

    (tmp_path / "checkpoints" / ".tmp-step_00000004-123").mkdir(parents=True)
    (tmp_path / "checkpoints" / "step_00000003").mkdir()
    for name in (".tmp-abc.json", "gradcraft_model.safetensors.tmp", "loss.png.tmp.png", ".lock", "notes.txt"):
        (tmp_path / name).write_text("x")
    remove_temporaries(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == [".lock", "checkpoints", "notes.txt"]
    assert os.listdir(tmp_path / "checkpoints") == ["step_00000003"]
