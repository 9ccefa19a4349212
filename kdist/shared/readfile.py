"""Reading a user's file, bounded: a job.yaml, a kubeconfig, its CA or token file."""

from __future__ import annotations

import os
import stat


def read_bounded(path: str | os.PathLike[str], limit: int) -> bytes:
    """A regular file's first `limit` + 1 bytes; ValueError for anything that is not one.

    Opened non-blocking and checked with fstat before reading: a FIFO or a
    device would otherwise block or never end.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise ValueError("is a directory, not a file")
        if not stat.S_ISREG(mode):
            raise ValueError("is not a regular file (a FIFO, socket or device?)")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit + 1)
    finally:
        os.close(fd)
