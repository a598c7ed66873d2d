"""Atomic file writes: a temp file in the same folder, fsync, then rename over the target.

A reader (or a process restarted after SIGKILL) sees the old file or the new
one, never half of one. A write that fails (a full disk, a read-only folder, no
permission) removes its temp file, leaves the old file as it was, and raises a
`UserError` with one line (`write_failure`) instead of the OSError.

    with atomic_file("data/tokens.bin") as f:   # a binary file object (seekable)
        f.write(...)
    write_text("config.json", text)
"""

import contextlib
import errno
import json
import os
import tempfile

from gradcraft.errors import UserError


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def usual_mode(path) -> None:
    """Give a file the mode a plain open() would (0666 less the umask: 0644 typically). For files
    made through a temporary file (mkstemp, and safetensors' save_file) that start as 0600."""
    os.chmod(path, 0o666 & ~_umask())


# errors of the storage rather than of the program: reported as one line, never a traceback
STORAGE_ERRNOS = {
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EROFS,
    errno.EACCES,
    errno.EPERM,
    errno.EFBIG,
    errno.EIO,
    errno.ENOTDIR,
    errno.EISDIR,
    errno.ENAMETOOLONG,
}
_ADVICE = {
    errno.ENOSPC: "the disk is full; free some space and run the command again",
    errno.EDQUOT: "the disk quota is used up; free some space and run the command again",
    errno.EROFS: "the file system is read-only; choose a writable folder",
    errno.EACCES: "choose a folder you may write to, or change its permissions",
    errno.EPERM: "choose a folder you may write to, or change its permissions",
}


def write_failure(path, error: OSError) -> UserError:
    """The one-line UserError for a failed write of `path`: what failed and what to do."""
    advice = _ADVICE.get(error.errno, "check the folder and the disk")
    return UserError(f"cannot write {os.fspath(path)}: {error.strerror or error}; {advice}")


def is_storage_error(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in STORAGE_ERRNOS


@contextlib.contextmanager
def atomic_file(path, suffix: str = ""):
    """A binary file that replaces `path` only when the block ends without an exception."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=suffix, dir=folder)
        usual_mode(tmp)  # mkstemp makes 0600
    except OSError as e:
        raise write_failure(path, e) from None
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if is_storage_error(e):
            raise write_failure(path, e) from None
        raise
    try:
        fsync_dir(folder)
    except OSError as e:  # the new file is in place, but may not last a power cut: say which one
        if is_storage_error(e):
            raise write_failure(path, e) from None
        raise


def write_bytes(path, data: bytes) -> None:
    with atomic_file(path) as f:
        f.write(data)


def write_text(path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path, data) -> None:
    write_text(path, json.dumps(data, indent=2) + "\n")
