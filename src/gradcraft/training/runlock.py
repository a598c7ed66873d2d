"""One `gradcraft train` per run folder, and SIGTERM handled like Ctrl-C.

The lock is an OS file lock (fcntl.flock, exclusive, non-blocking) on
`<model_dir>/.lock`, which holds the holder's PID. The OS releases it when the
process ends, however it ends, so a crashed run never leaves a stale lock; the
file itself stays (removing it would let a third process lock a new file
while a second one still holds the old). Where fcntl is missing (Windows),
there is no lock and no error.
"""

import contextlib
import os
import signal
import sys
import threading

from gradcraft.errors import UserError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

LOCK_NAME = ".lock"


class Terminated(KeyboardInterrupt):
    """Raised in the main thread by SIGTERM: the train command handles it like Ctrl-C (exit 143)."""


def _holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 64).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return text if text.isdigit() else ""


def _open(path: str, flags: int, what: str, make_folder: str | None = None) -> int:
    """os.open (making make_folder first, when given); a failure is one line: cannot <what> <path>."""
    try:
        if make_folder is not None:
            os.makedirs(make_folder, exist_ok=True)
        return os.open(path, flags, 0o644)
    except OSError as e:
        raise UserError(f"cannot {what} {path}: {e.strerror}") from None


def lock_run_folder(model_dir: str):
    """Take the run folder's lock (creating the folder); returns an fd to release with
    release_run_folder, or None where the OS has no flock. Another live holder: a UserError naming
    its PID, and nothing is written."""
    if fcntl is None:
        return None
    path = os.path.join(model_dir, LOCK_NAME)
    if os.path.isdir(model_dir) and os.path.exists(path):
        # a folder another run may hold: probe without writing anything (no create, no truncate)
        fd = _open(path, os.O_RDWR, "open the run folder's lock")
    else:
        fd = _open(path, os.O_RDWR | os.O_CREAT, "create the run folder's lock", make_folder=model_dir)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        pid = _holder(fd)
        os.close(fd)
        who = f"process {pid}" if pid else "another process"
        raise UserError(
            f"{model_dir} is in use by {who} (another `gradcraft train` on this folder); "
            "wait for it to end, or stop it, or choose another --model_dir"
        ) from None
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def release_run_folder(fd, remove_if_empty: str | None = None) -> None:
    """Release the lock. remove_if_empty: the run folder, when the caller created it; if it holds
    nothing but .lock (the run stopped before writing anything), the folder is removed."""
    if fd is None:
        return
    if remove_if_empty is not None:
        try:
            if os.listdir(remove_if_empty) == [LOCK_NAME]:
                os.unlink(os.path.join(remove_if_empty, LOCK_NAME))
                os.rmdir(remove_if_empty)
        except OSError:
            pass
    try:
        os.ftruncate(fd, 0)  # no PID of a process that no longer holds the folder
    except OSError:
        pass
    os.close(fd)  # closing releases the flock


@contextlib.contextmanager
def lock_directory(folder: str, command: str):
    """Hold an exclusive OS lock on the folder itself (flock on its directory descriptor, so nothing
    is written into it) for the block: for the commands that write several files into a folder of
    their own output (`tokenize` into its output folder, `export` into --out), so that two of them
    cannot interleave their files. A second one is refused with one line; no lock where the OS has
    no flock."""
    if fcntl is None:
        yield
        return
    fd = _open(folder, os.O_RDONLY, "open the folder")
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise UserError(
                f"{folder} is in use by another `gradcraft {command}` writing into it; wait for it "
                "to end, or write elsewhere"
            ) from None
        yield
    finally:
        os.close(fd)  # closing releases the flock


_stop = None  # while a train command runs: the KeyboardInterrupt class of the first stop signal
_handled = False  # the command has caught it (`interrupt_handled`) and is cleaning up


@contextlib.contextmanager
def sigterm_as_interrupt():
    """Within the block, Ctrl-C raises KeyboardInterrupt and SIGTERM Terminated in the main thread,
    and `raise_if_interrupted` raises it again: an exception raised while Python runs a finalizer or
    a weakref callback is dropped ("Exception ignored in ..."), and the run would go on as if never
    stopped; such a dropped stop is not printed. The previous handlers are restored afterwards. Off
    the main thread (where signal.signal raises) it does nothing."""
    global _stop, _handled
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        global _stop
        # Once the command has caught the stop, a second signal does not cut its cleanup short; until
        # then each one raises again (the first may have been dropped in a finalizer, far from a step).
        if not _handled:
            _stop = _stop or (Terminated if signum == signal.SIGTERM else KeyboardInterrupt)
            raise _stop()

    # A signal ignored when the command started stays ignored (the shell ignores SIGINT for a job run
    # with `&` in a script, so that Ctrl-C stops the script's foreground command, not the job).
    stops = [sig for sig in (signal.SIGTERM, signal.SIGINT) if signal.getsignal(sig) is not signal.SIG_IGN]
    previous = {sig: signal.signal(sig, handler) for sig in stops}
    previous_hook = sys.unraisablehook

    def quiet_dropped_stop(unraisable):
        # Python prints an exception dropped in a finalizer with its traceback ("Exception ignored
        # in ..."); a stop dropped there is not lost (`raise_if_interrupted` raises it again at the
        # next step), so the user sees the one-line stop message, not a traceback. Others print.
        if _stop is None or not isinstance(unraisable.exc_value, _stop):
            previous_hook(unraisable)

    sys.unraisablehook = quiet_dropped_stop
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook
        for sig, old in previous.items():
            signal.signal(sig, old)
        _stop, _handled = None, False


def interrupt_handled() -> None:
    """The command caught the stop signal's exception: further signals wait for its cleanup."""
    global _handled
    _handled = True


def raise_if_interrupted() -> None:
    """Raise the stop signal's exception if one came (called between training steps: see above)."""
    if _stop is not None:
        raise _stop()
