"""The file of one rank's newest state in memory (``kdist.workloads.memory``).

One file per rank, ``kdist-memory-<job>-<port>-rank<R>.pt`` (the job's name and master
port) in ``$KDIST_MEMORY_DIR`` (default /dev/shm, the pod's in-memory emptyDir: a worker
restarted in the same pod finds it; a new pod, a spare's included, holds none)::

    KDIST-MEMORY 1\\n
    {"step": 40, "key": "...", "crc32": 123, "bytes": 456}\\n   the header, one JSON line
    <bytes>                                                   the state (kdist.workloads.memory)

Written to a temporary name of the writer's own and renamed over the old file, so a
reader sees the previous state or the whole new one; ``read`` returns None for a file
that is missing, partial, corrupt (its CRC-32: cheap enough to compute every step, and
a file in memory needs no more) or another job's (its key). Standard library only: the
bytes are the caller's.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kdist.shared import env as E

MAGIC = b"KDIST-MEMORY 1\n"
MAX_HEADER = 4096  # bytes of the header line read at most


@dataclass(frozen=True)
class Held:
    """A rank's state as read back: its step, the header's fields, the payload."""

    step: int
    header: dict[str, Any]
    payload: bytes


def directory() -> Path:
    """``$KDIST_MEMORY_DIR``, else /dev/shm where writable, else the temporary directory."""
    chosen = os.environ.get(E.MEMORY_DIR)
    if chosen:
        return Path(chosen)
    shm = E.DEFAULT_MEMORY_DIR
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return Path(shm)
    return Path(tempfile.gettempdir())


def path_for(job: str, rank: int, where: Path | None = None) -> Path:
    """Rank `rank`'s file of job `job` (the name made safe for a file name)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", job)[:100] or "job"
    return (where if where is not None else directory()) / f"kdist-memory-{safe}-rank{rank}.pt"


def write(path: Path, step: int, key: str, chunks: Sequence[bytes | memoryview]) -> None:
    """Replace `path` by the state of `step` (the bytes of `chunks`, one after the other),
    atomically. No fsync: the file lives in memory and matters only while the machine does."""
    crc, size = 0, 0
    for chunk in chunks:
        crc, size = zlib.crc32(chunk, crc), size + len(memoryview(chunk).cast("B"))
    header = {"step": step, "key": key, "crc32": crc, "bytes": size}
    path.parent.mkdir(parents=True, exist_ok=True)
    # A name of this process's own: a frozen worker that thaws may still be writing its.
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    with open(part, "wb") as f:
        f.write(MAGIC + json.dumps(header).encode() + b"\n")
        for chunk in chunks:
            f.write(chunk)
    os.replace(part, path)


def read(path: Path, key: str) -> Held | None:
    """The state in `path` if it is whole, verified and of `key`; None otherwise (said on
    stderr unless the file is just missing)."""
    try:
        with open(path, "rb") as f:
            if f.read(len(MAGIC)) != MAGIC:
                raise ValueError("not a kdist memory file")
            line = f.readline(MAX_HEADER)
            header = json.loads(line)
            if not isinstance(header, dict) or not isinstance(header.get("step"), int):
                raise ValueError("no step in its header")
            if header.get("key") != key:
                raise ValueError("another job's (or another model's) state")
            payload = f.read(int(header["bytes"]) + 1)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        _warn(f"{path} ignored: {e}")
        return None
    if len(payload) != header["bytes"]:
        _warn(f"{path} ignored: {len(payload)} bytes of state, its header says "
              f"{header['bytes']} (partial)")
        return None
    if zlib.crc32(payload) != header.get("crc32"):
        _warn(f"{path} ignored: its state does not match its CRC-32")
        return None
    return Held(header["step"], header, payload)


def remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:  # never written, or gone already
        pass


def _warn(message: str) -> None:
    print(f"kdist.workloads.memory: {message}", file=sys.stderr, flush=True)
