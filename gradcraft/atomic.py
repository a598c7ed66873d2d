"""Atomic file writes: a temp file in the same folder, fsync, then rename over the target.

A reader (or a process restarted after SIGKILL) sees the old file or the new
one, never half of one.

    with atomic_file("data/tokens.bin") as f:   # a binary file object (seekable)
        f.write(...)
    write_text("config.json", text)
"""

import contextlib
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


@contextlib.contextmanager
def atomic_file(path, suffix: str = ""):
    """A binary file that replaces `path` only when the block ends without an exception."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=suffix, dir=folder)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(folder)


def write_bytes(path, data: bytes) -> None:
    with atomic_file(path) as f:
        f.write(data)


def write_text(path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path, data) -> None:
    write_text(path, json.dumps(data, indent=2) + "\n")
