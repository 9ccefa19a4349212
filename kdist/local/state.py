"""Where `kdist run --local` keeps a job's state: ``.kdist/<name>`` beside the job file.

Beside the job file, not in the current directory, so that a run started from
anywhere finds the same checkpoints (and never litters another directory). With
no job file (the built-in starter job, `train(local=True)`, a TrainingJob made in
Python) it is the current directory: there is no file to sit beside.

A run clears parts of it (the last run's code and workspace, `kdist.local.runner.local_workspace`;
the workloads prune checkpoints), so none of it may be a symlink: clearing through one
would delete files outside the project. Such a link is refused (UsageError, exit 2)
before anything is deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kdist.shared import env as E
from kdist.shared.errors import UsageError

#: What a local run clears or writes in `.kdist/<name>` (`local_workspace`, checkpoints).
STATE_DIRS = ("code", "workspace", "checkpoints")


def state_root(job_file: str | None) -> Path:
    """The directory that holds `.kdist`: the job file's (absolute: the workers run
    elsewhere and get paths under it), else the current directory."""
    import os

    return Path(os.path.abspath(job_file)).parent if job_file else Path.cwd()


def state_dir(job_name: str, cwd: Path) -> Path:
    """`.kdist/<job_name>` under `cwd` (the `state_root`); UsageError when `.kdist`, it or
    one of its `STATE_DIRS` is a symlink, or `.kdist` or it is not a directory."""
    state = cwd / ".kdist" / job_name
    for path in (state.parent, state, *(state / d for d in STATE_DIRS)):
        if path.is_symlink():
            raise UsageError(f"{path} is a symlink; kdist keeps local runs' state there and "
                             "will not follow it (remove the link)")
    for path in (state.parent, state):
        if path.exists() and not path.is_dir():
            raise UsageError(f"{path}: kdist keeps local runs' state in this directory, but it "
                             "is a file; move it away")
    return state


def local_checkpoint_dir(job: Any, cwd: Path) -> Path | None:
    """Where a local run keeps checkpoints: `.kdist/<name>/checkpoints` under `cwd` (the
    `state_root`).

    The spec's path (e.g. /checkpoints) is a mount point inside the pods; on a
    workstation it is usually not writable, and a second local run should
    resume from the first one's checkpoints as a resubmitted job would.
    """
    if job.spec.checkpoint is None:
        return None
    return state_dir(job.metadata.name, cwd) / "checkpoints"


def earlier_checkpoints(ckpt: Path, fresh: bool) -> None:
    """Before a local run: with `fresh`, remove the checkpoints an earlier run left in `ckpt`
    (`local_checkpoint_dir`: no symlink on the way); else say in one line (stderr) that
    the run resumes from them, as a resubmitted job would: never silently."""
    import shutil
    import sys

    try:
        kept = sorted(p.name for p in ckpt.iterdir()) if ckpt.is_dir() else []
    except OSError:
        kept = []
    if not kept:
        return
    if fresh:
        try:
            shutil.rmtree(ckpt)
        except OSError as e:
            raise UsageError(f"{ckpt}: cannot remove the earlier checkpoints (--fresh): "
                             f"{e.strerror or e}") from None
        print(f"kdist: --fresh: removed the earlier checkpoints in {ckpt}", file=sys.stderr,
              flush=True)
        return
    try:
        latest = (ckpt / "latest").read_text().strip()[:64]
    except (OSError, UnicodeDecodeError):
        latest = ""
    what = f" (latest {latest})" if latest.isprintable() and latest else ""
    print(f"kdist: {ckpt} has an earlier run's checkpoints{what}: a workload that resumes "
          "goes on from them (--fresh starts over)", file=sys.stderr, flush=True)


def counted_restarts(dirs: Sequence[Path]) -> int:
    """The restart the nodes' launchers would count next (``kdist.runtime.restarts``:
    each start and each restart in process is counted in its directory)."""
    seen = [0]
    for d in dirs:
        try:
            text = (d / "starts").read_text().strip()
        except OSError:
            continue
        seen.append(int(text) if text.isdigit() else 0)
    return max(seen)


def memory_root() -> str:
    """A directory of this run's own for the nodes' memory copies (``env.MEMORY_DIR``):
    under /dev/shm where there is one, as in a pod; the caller removes it."""
    import os
    import tempfile

    shm = E.DEFAULT_MEMORY_DIR
    where = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    return tempfile.mkdtemp(prefix="kdist-memory-", dir=where)


def memory_dir(root: str, node: int, attempt: int | None) -> str:
    """Node `node`'s memory directory: its own for the run where its pod restarts in place
    (`attempt` None: a pod keeps its /dev/shm), else a new one per attempt (a new pod's
    /dev/shm is empty)."""
    return f"{root}/node-{node}" if attempt is None else f"{root}/attempt-{attempt}-node-{node}"
